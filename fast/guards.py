"""What bounds and guards a compiled run: the iteration bound its loops test, the firing budget it
refuses, and XLA's out-of-memory as Turnout's error (what the error word means is ``fast.outcome``).

Why a module of its own: the backend's general path, its repeated-run routes (``fast.repeat``) and
the partitioned executors (``turnout.devices``) all apply these rules, and each must apply them the
same way for the same mistake to raise the same error on every route.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

import jax
import numpy as np

from turnout.errors import ResourceExhaustedError, UnsupportedError
from turnout.fast.cut import Segment
from turnout.fast.plan import INT32_MAX, INT32_MAX_NP, Plan
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


def refuse_firing_budget(who: str, options: RunOptions) -> None:
    """Compiled code counts loop iterations, not node firings: a ``max_firings`` budget other than the
    default (a guard the user did not choose, left to ``max_iterations``) is refused, never ignored."""
    if options.max_firings is not None and options.max_firings != DEFAULT_MAX_FIRINGS:
        raise UnsupportedError(
            f"{who}: RunOptions.max_firings={options.max_firings} cannot be honoured: compiled code counts loop "
            "iterations, not firings; bound loops with max_iterations (or run on backend='reference')")


@contextmanager
def device_oom(plan: Plan, st: Optional[Segment] = None) -> Iterator[None]:
    """XLA's own out-of-memory (``RESOURCE_EXHAUSTED``, from a GPU or TPU allocator) as Turnout's
    ``ResourceExhaustedError``, naming the loop whose stage ran (``st``: a segment of the staged path;
    None: the fused attempt) and suggesting ``swap_memory=True``."""
    try:
        yield
    except jax.errors.JaxRuntimeError as e:
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        keys = [*st.push, *st.pop] if st is not None else []
        loops = sorted({plan.stack_info[k].where for k in keys if k in plan.stack_info})
        driven = st.driven if st is not None else None
        what = ", ".join(loops) if loops else (driven.describe() if driven is not None else "a compiled stage")
        raise ResourceExhaustedError(
            f"fast backend: the device ran out of memory running {what}: {str(e).splitlines()[0]}; run loops "
            "with swap_memory=True to move full gradient stack chunks to host memory, or lower stack_chunk") from None
