"""Specialising a compiled run on the fed values that decide its shapes: one loop for every executor.

XLA needs static shapes, and a shape argument computed from root-frame feeds alone (a ``fill`` shape,
a TensorArray size, a slice bound) is known only at run time. Such a program still compiles once
those feeds are constants of its plan: a trace that meets one raises ``lowering_base.NeedsStatic``
(only raising leaves a JAX trace), the executor's compile returns it as the outcome ``Specialise``,
and ``run_specialised`` plans and traces again with the feeds it names as constants. Their values
join the plan's cache key (``static_signature``), so a value seen before never recompiles.

Why one function: the one-device fast backend (``FastBackend``) and the fast partitioned executor
(``devices.fast_executor``) both specialise, and a rule of when it helps kept twice would drift.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from turnout.errors import UnsupportedError
from turnout.fast.lowering_base import Specialise
from turnout.fast.regions import Key

R = TypeVar("R")


def run_specialised(known: dict[Any, frozenset[Key]], sig: Any, feeds: Mapping[Key, Any],
                    compile_run: Callable[[dict[Key, np.ndarray]], R | Specialise]) -> tuple[R, dict[Key, np.ndarray]]:
    """Run ``compile_run`` on the values of the feeds run signature ``sig`` is specialised on
    (``known``, updated in place: what earlier runs of the signature learned), adding the feeds of
    every ``Specialise`` it returns, until it returns a result; return it with the values it was
    specialised on. A ``Specialise`` that teaches nothing new (its feeds are already static, or are
    not all fed) raises its refusal as ``UnsupportedError``: the program then falls back."""
    while True:
        static = known.get(sig, frozenset())
        values = {k: np.asarray(feeds[k]) for k in sorted(static)}
        result = compile_run(values)
        if not isinstance(result, Specialise):
            return result, values
        if result.keys <= static or not result.keys <= set(feeds):
            raise UnsupportedError(result.reason)
        known[sig] = static | result.keys


def static_signature(values: Mapping[Key, np.ndarray]) -> tuple[tuple[Key, bytes], ...]:
    """The part of a plan's cache key that the specialised values make (their dtypes and shapes are
    in the feed signature already)."""
    return tuple((k, v.tobytes()) for k, v in sorted(values.items()))


__all__ = ["run_specialised", "static_signature"]
