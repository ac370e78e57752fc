"""Timing helpers shared by the benchmark scripts.

Why medians of several runs after a warm-up: the first call of every compiled function pays for
tracing and XLA compilation, which each script reports separately (``compile_s``); steady-state
numbers are the median of ``repeat`` timed calls, each ending with the result on the host.
"""

from __future__ import annotations

import math
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


def timed_pair(fa: Callable[[], Any], fb: Callable[[], Any], repeat: int,
               block_s: float = 0.0) -> tuple[dict[str, float], dict[str, float]]:
    """``timed`` for two functions, their timed calls interleaved (a, b, a, b, ...): on a shared
    machine whose load changes from second to second, both sides then see the same conditions.

    ``block_s``: each sample times a block of as many calls as take about that long (counted from a
    warm call of each function), and is the time per call. Why: a call of a millisecond or less
    varies by half from one call to the next on the shared development machine, so the median of a
    few single calls was mostly noise; a block averages it out, and each side's blocks last about as
    long, so both sample the same load."""
    first = []
    for fn in (fa, fb):
        t0 = time.perf_counter()
        fn()
        first.append(time.perf_counter() - t0)
    counts = [1, 1]
    if block_s > 0:
        for i, fn in enumerate((fa, fb)):
            t0 = time.perf_counter()
            fn()
            counts[i] = max(1, math.ceil(block_s / max(time.perf_counter() - t0, 1e-6)))
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, ts, k in zip((fa, fb), times, counts, strict=True):
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            ts.append((time.perf_counter() - t0) / k)
    return tuple(  # type: ignore[return-value]
        {"first_s": f, "median_s": statistics.median(ts), "min_s": min(ts), "repeat": repeat, "calls_per_sample": k}
        for f, ts, k in zip(first, times, counts, strict=True))


def timed_interleaved(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, dict[str, float]]:
    """``timed_pair`` for any number of named functions: one untimed-for-the-median first call each,
    then ``repeat`` rounds calling each once, in turn."""
    first = {}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        fn()
        first[name] = time.perf_counter() - t0
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: {"first_s": first[name], "median_s": statistics.median(ts), "min_s": min(ts), "repeat": repeat}
            for name, ts in times.items()}


def write_report(name: str, data: dict[str, Any], lines: list[str]) -> None:
    """Write ``data`` to ``benchmarks/results/<name>.json`` and the summary ``lines`` to ``<name>.md``
    (the untracked results folder), and print the summary."""
    import json

    text = "\n".join(lines)
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    with open(os.path.join(out_dir, f"{name}.md"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    print(text)


def machine() -> dict[str, Any]:
    import jax

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
    }
