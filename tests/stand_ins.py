"""Stand-ins that tests hand to the compiled side's functions in place of a real trace.

Why a module of its own: a lowering rule or ``lower_node`` takes a ``LoweringContext``; a test that
calls one directly (without tracing a whole program) needs only what the function reads of it, and
several test files need the same stand-in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class CheckRecorder:
    """A stand-in trace: the fed node ids a rule may ask about (``fed``), and each ``check`` it makes,
    recorded as (the condition as a Python bool, the message)."""

    fed: set[int] = field(default_factory=set)
    checks: list[tuple[bool, str]] = field(default_factory=list)

    def check(self, ok: Any, message: str, code: str = "kernel", shows: Any = None) -> None:
        """Record the check (a trace would set the error word where ``ok`` does not hold)."""
        self.checks.append((bool(np.asarray(ok)), message))

    def failed(self) -> list[str]:
        """The messages of the checks whose condition did not hold."""
        return [m for ok, m in self.checks if not ok]
