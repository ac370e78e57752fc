"""What bounds and guards a compiled run: the iteration bound its loops test, the firing budget it
refuses, and XLA's out-of-memory as Turnout's error (what the error word means is ``fast.outcome``).

Why a module of its own: the backend's general path, its repeated-run routes (``fast.repeat``) and
the partitioned executors (``turnout.devices``) all apply these rules, and each must apply them the
same way for the same mistake to raise the same error on every route.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import jax
import numpy as np

from turnout.errors import ResourceExhaustedError, UnsupportedError
from turnout.fast.plan import INT32_MAX, INT32_MAX_NP
from turnout.session import RunOptions

#: RunOptions' default firing budget: a guard the user did not choose, which compiled code (counting
#: iterations, not firings) leaves to max_iterations; any other budget is rejected, never ignored
DEFAULT_MAX_FIRINGS = RunOptions.max_firings

def iteration_bound(options: RunOptions) -> np.int32:
    """``RunOptions.max_iterations`` as the int32 argument compiled loops test (None, or more than
    int32 holds: the largest int32)."""
    mi = options.max_iterations
    return INT32_MAX_NP if mi is None or mi >= INT32_MAX else np.int32(mi)


#: the iteration bound of the default options (the hot fused route keeps it on the device)
DEFAULT_BOUND = iteration_bound(RunOptions())


def asks_for_firings(options: RunOptions) -> bool:
    """Whether ``options`` set a ``max_firings`` budget of the user's own: one other than the default
    (a guard the user did not choose, left to ``max_iterations``), which compiled code cannot honour."""
    return options.max_firings is not None and options.max_firings != DEFAULT_MAX_FIRINGS


def refuse_firing_budget(who: str, options: RunOptions) -> None:
    """Compiled code counts loop iterations, not node firings: a ``max_firings`` budget of the user's
    own (``asks_for_firings``) is refused, never ignored."""
    if asks_for_firings(options):
        raise UnsupportedError(
            f"{who}: RunOptions.max_firings={options.max_firings} cannot be honoured: compiled code counts loop "
            "iterations, not firings; bound loops with max_iterations (or run on backend='reference')")


@contextmanager
def device_oom(who: str, where: str, what: Callable[[], str]) -> Iterator[None]:
    """XLA's own out-of-memory (``RESOURCE_EXHAUSTED``, from a GPU or TPU allocator) in a compiled
    call, as Turnout's ``ResourceExhaustedError``: ``who`` ran out of memory on ``where`` (a device)
    running ``what()`` (the loops whose stacks the call touches, made only then: a description can
    cost more than a small call), suggesting ``swap_memory=True``."""
    try:
        yield
    except jax.errors.JaxRuntimeError as e:
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        raise ResourceExhaustedError(
            f"{who}: {where} ran out of memory running {what()}: {str(e).splitlines()[0]}; run loops with "
            "swap_memory=True to move full gradient stack chunks to host memory, or lower stack_chunk") from None


def fused_oom(who: str) -> AbstractContextManager[None]:
    """``device_oom`` of the fused attempt's one call (and of its lane): the whole program at once."""
    return device_oom(who, "the device", lambda: "the whole program (its fused call)")
