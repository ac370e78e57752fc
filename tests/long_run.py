"""The long run of the suite (``TURNOUT_LONG=1``): what the default run samples, in full.

Why a switch: the default run must stay well under fifteen minutes on two cores, and a few tests
sweep a parameter (a case table over every route, a schedule over every slot count) whose far end
costs much and says little the near end does not. The default run takes a sample of such a sweep
that still forces every route and every branch of the code it checks; the long run takes all of it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")

#: ``TURNOUT_LONG=1`` (any value but empty or ``0``) selects the long run
LONG = os.environ.get("TURNOUT_LONG", "") not in ("", "0")


def sweep(full: Iterable[T], default: Iterable[T]) -> list[T]:
    """The values a sweep takes: ``full`` in the long run, ``default`` (a sample of it) otherwise."""
    full, default = list(full), list(default)
    assert set(default) <= set(full), "a sweep's default is a sample of its values"
    return full if LONG else default
