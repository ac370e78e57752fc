"""Rule tables keyed by primitive name, and the one decorator that fills them.

Every interpreter in Turnout is such a table (numpy kernels, shape rules, gradient rules, the
structured evaluator, z3 encodings, JAX lowerings). Registering a rule on the line after its short
function, for one or several primitives, is the autodidax idiom this helper keeps uniform.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])


def registrar(table: dict[str, F]) -> Callable[..., Callable[[F], F]]:
    """``rule = registrar(TABLE)``; then ``@rule("Add", "Sub")`` stores the function under each name."""

    def rule(*names: str) -> Callable[[F], F]:
        def register(f: F) -> F:
            for name in names:
                table[name] = f
            return f

        return register

    return rule
