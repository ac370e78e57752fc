"""Peak memory of the LSTM training step: the fast backend's gradient stacks against JAX's residuals.

Why: a compiled loop's stack buffers have the capacity the program was compiled for, and the backend
keeps them between runs. With one capacity (``stack_chunk``, 1024 entries) a step of 100 time steps
held buffers for 1024; the fused attempt now runs on a ladder of capacities (128, then 1024 by
default, ``fast.backend.capacity_ladder``) and a run of 100 steps uses the lower rung. JAX's
``value_and_grad`` of ``lax.scan`` keeps exactly ``T`` residuals (and compiles again for every ``T``).

Each configuration runs in a fresh process (peak RSS cannot be reset within one): build the model,
run the step three times, report the process's peak resident set and the step time, beside the same
figures for an idle process that imported JAX and built the model (what every configuration pays
before its first step). Configurations: ``ladder`` (the default), ``one_rung`` (``stack_ladder=False``:
every run at ``stack_chunk``) and ``jax`` (the baseline of ``benchmarks/lstm.py``).

Usage: ``python -m benchmarks.stack_memory [--quick] [--lengths 100 1000]``; writes
``benchmarks/results/stack_memory.json`` and ``.md`` (untracked).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = ("baseline", "ladder", "one_rung", "jax")


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def child(config: str, T: int, batch: int, hidden: int) -> dict[str, Any]:
    """One configuration in this (fresh) process: three steps, then the peak RSS and step times."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import turnout as tn
    from benchmarks.lstm import build, jax_step, jax_tree_leaves

    m = build(batch, hidden, hidden, T)
    xs = np.random.default_rng(1).normal(size=(T, batch, hidden)).astype(np.float32)
    times = []
    if config == "baseline":
        jax.device_put(xs).block_until_ready()
        return {"peak_rss": _peak_rss(), "step_s": []}
    if config == "jax":
        step, _ = jax_step(hidden)
        params = (jnp.asarray(m["w0"]), jnp.zeros(4 * hidden, jnp.float32))
        xs_d = jnp.asarray(xs)

        def run() -> Any:
            return [np.asarray(a) for a in jax_tree_leaves(step(params, xs_d))]
    else:
        sess = tn.Session(m["graph"], backend="fast", stack_ladder=(config == "ladder"))
        feed = {m["xs"]: jax.device_put(xs), m["T"]: T}

        def run() -> Any:
            return sess.run([m["loss"], *m["grads"]], feed)
    for _ in range(3):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    out: dict[str, Any] = {"peak_rss": _peak_rss(), "step_s": times}
    if config != "jax":
        out["stack_capacity"] = sess.last_result.stats["stack_capacity"]
        out["held_bytes"] = sess.backend.held_bytes()
    return out


def measure(T: int, batch: int, hidden: int) -> dict[str, Any]:
    """Every configuration at length ``T``, each in its own process."""
    row: dict[str, Any] = {"T": T}
    for config in CONFIGS:
        cmd = [sys.executable, "-m", "benchmarks.stack_memory", "--child", config, str(T), str(batch), str(hidden)]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        row[config] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="batch 16, hidden 32 (the default: batch 64, hidden 256)")
    ap.add_argument("--lengths", type=int, nargs="*", default=[100, 1000])
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        config, T, batch, hidden = args.child
        print(json.dumps(child(config, int(T), int(batch), int(hidden))))
        return
    batch, hidden = (16, 32) if args.quick else (64, 256)
    rows = [measure(T, batch, hidden) for T in args.lengths]
    mib = 2**20
    lines = [f"# Peak memory of the LSTM training step (batch {batch}, hidden {hidden}), one process each", "",
             "| T | idle process (MiB) | ladder: peak (MiB) / rung / held (MiB) | one rung: peak / rung / held "
             "| JAX: peak (MiB) | ladder step (ms) | one rung step (ms) | JAX step (ms) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lad, one, jx = r["ladder"], r["one_rung"], r["jax"]
        lines.append(
            f"| {r['T']} | {r['baseline']['peak_rss'] / mib:.0f} | {lad['peak_rss'] / mib:.0f} / "
            f"{lad['stack_capacity']} / {lad['held_bytes'] / mib:.0f} | {one['peak_rss'] / mib:.0f} / "
            f"{one['stack_capacity']} / "
            f"{one['held_bytes'] / mib:.0f} | {jx['peak_rss'] / mib:.0f} | {1e3 * min(lad['step_s'][1:]):.1f} | "
            f"{1e3 * min(one['step_s'][1:]):.1f} | {1e3 * min(jx['step_s'][1:]):.1f} |")
    from benchmarks.common import write_report

    write_report("stack_memory", {"batch": batch, "hidden": hidden, "rows": rows}, lines)


if __name__ == "__main__":
    main()
