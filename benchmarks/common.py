"""Timing helpers shared by the benchmark scripts.

Why medians of several runs after a warm-up: the first call of every compiled function pays for
tracing and XLA compilation, which each script reports separately (``compile_s``); steady-state
numbers are the median of ``repeat`` timed calls, each ending with the result on the host.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], Any], repeat: int) -> dict[str, float]:
    """First call (compile + run), then the median / min of ``repeat`` further calls, in seconds."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"first_s": first, "median_s": statistics.median(times), "min_s": min(times), "repeat": repeat}


def machine() -> dict[str, Any]:
    import jax

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
    }
