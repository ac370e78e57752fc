"""Peak memory of the LSTM training step: the fast backend's gradient stacks against JAX's residuals.

Why: a compiled loop's stack buffers have the capacity the program was compiled for, and the backend
keeps them between runs. The fused attempt runs on a ladder of capacities (``fast.plan.capacity_ladder``:
by default 128, 160, 200, ... 959, 1024 entries, ratio 1.25, ``FastOptions.stack_first_rung`` and
``stack_rung_ratio``) and a run uses the first rung that holds its high-water mark. JAX's
``value_and_grad`` of ``lax.scan`` keeps exactly ``T`` residuals (and compiles again for every ``T``).

Each memory configuration runs in a fresh process (peak RSS cannot be reset within one): build the
model, run the step three times, report the process's peak resident set, the step times, the rung
and the bytes of stacks the backend keeps (its own report, ``FastBackend.stack_buffers``), beside the
same figures for an idle process that imported JAX and built the model (what every configuration
pays before its first step). Configurations: ``ladder`` (the default), ``coarse``
(``stack_rung_ratio=8``: the ladder before issue 37, 128 then 1024), ``one_rung``
(``stack_ladder=False``: every run at ``stack_chunk``) and ``jax`` (the baseline of
``benchmarks/lstm.py``); ``--configs`` may also name ``fine`` (``stack_rung_ratio=1.2``),
``double`` (``stack_rung_ratio=2``: 128, 256, 512, 1024) and ``descend`` (one plan's runs of 1000
steps, then runs of ``T``: the stack bytes the backend keeps after each, as it descends).

Repeated-run speed (``speed``, one more process per length): the default ladder and the coarse one
in one process, their steps interleaved (``common.timed_pair``), after a first run of each; the ratio
says whether the tighter rung costs speed.

Usage: ``python -m benchmarks.stack_memory [--quick] [--lengths 100 200 500 1000] [--repeat 5]
[--no-speed] [--configs ladder jax ...]``; writes ``benchmarks/results/stack_memory.json`` and ``.md`` (untracked).
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
MEMORY_CONFIGS = ("baseline", "ladder", "coarse", "one_rung", "jax")
#: the fast backend's options per configuration
OPTIONS: dict[str, dict[str, Any]] = {"ladder": {}, "coarse": {"stack_rung_ratio": 8},
                                      "one_rung": {"stack_ladder": False}, "fine": {"stack_rung_ratio": 1.2},
                                      "double": {"stack_rung_ratio": 2}}
#: every configuration ``--configs`` may name: the default ones, ``fine`` (a ladder of ratio 1.2),
#: ``double`` (ratio 2) and ``descend`` (runs of 1000 steps, then of ``T``: what the backend keeps)
CHOICES = MEMORY_CONFIGS + ("fine", "double", "descend")
MIB = 2**20


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _model(T: int, batch: int, hidden: int) -> tuple[dict[str, Any], Any]:
    import numpy as np

    from benchmarks.lstm import build

    m = build(batch, hidden, hidden, T)
    return m, np.random.default_rng(1).normal(size=(T, batch, hidden)).astype(np.float32)


def _fast_step(m: dict[str, Any], xs: Any, T: int, options: dict[str, Any]) -> tuple[Any, Any]:
    """A fast-backend session with ``options`` and a function running one step of it."""
    import jax

    import turnout as tn

    sess = tn.Session(m["graph"], backend="fast", **options)
    feed = {m["xs"]: jax.device_put(xs), m["T"]: T}
    return sess, lambda: sess.run([m["loss"], *m["grads"]], feed)


def _jax_run(m: dict[str, Any], xs: Any, hidden: int) -> Any:
    import jax.numpy as jnp
    import numpy as np

    from benchmarks.lstm import jax_step, jax_tree_leaves

    step, _ = jax_step(hidden)
    params = (jnp.asarray(m["w0"]), jnp.zeros(4 * hidden, jnp.float32))
    xs_d = jnp.asarray(xs)
    return lambda: [np.asarray(a) for a in jax_tree_leaves(step(params, xs_d))]


def child(config: str, T: int, batch: int, hidden: int, repeat: int) -> dict[str, Any]:
    """One configuration in this (fresh) process: three steps, then the peak RSS and step times;
    for ``speed``, the two ladders' repeated steps side by side."""
    import jax

    m, xs = _model(T, batch, hidden)
    if config == "baseline":
        jax.device_put(xs).block_until_ready()
        return {"peak_rss": _peak_rss(), "step_s": []}
    if config == "speed":
        return _speed(m, xs, T, repeat)
    if config == "descend":
        return _descend(T, batch, hidden)
    sess = None
    if config == "jax":
        run = _jax_run(m, xs, hidden)
    else:
        sess, run = _fast_step(m, xs, T, OPTIONS[config])
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    out: dict[str, Any] = {"peak_rss": _peak_rss(), "step_s": times}
    if sess is not None:
        stats = sess.last_result.stats
        out.update(stack_capacity=stats["stack_capacity"], stack_ladder=stats.get("stack_ladder"),
                   held_bytes=sess.backend.held_bytes(), compiles=sess.backend.compile_count,
                   kept_stack_bytes=sum(sum(b["stacks"].values()) for b in sess.backend.stack_buffers()))
    return out


def _descend(T: int, batch: int, hidden: int, long: int = 1000) -> dict[str, Any]:
    """One plan's runs of ``long`` steps, then of ``T``: the stack bytes the backend keeps after the
    long run and after each short one, and the rung of each. Why: a plan holds the rung of its last
    runs' high-water marks (``FastOptions.stack_descend_after``), so the long run's buffers should go
    once enough short runs fitted a lower rung."""
    import numpy as np

    from benchmarks.lstm import build

    m = build(batch, hidden, hidden, long)
    xs = np.random.default_rng(1).normal(size=(long, batch, hidden)).astype(np.float32)
    sess, _ = _fast_step(m, xs, long, {})
    kept, rungs = [], []
    for t in [long] + [T] * (sess.backend.options.stack_descend_after + 1):
        sess.run([m["loss"], *m["grads"]], {m["xs"]: xs, m["T"]: t})
        kept.append(sum(sum(b["stacks"].values()) for b in sess.backend.stack_buffers()))
        rungs.append(sess.last_result.stats["stack_capacity"])
    return {"long": long, "kept_stack_bytes": kept, "rungs": rungs, "peak_rss": _peak_rss()}


def _speed(m: dict[str, Any], xs: Any, T: int, repeat: int) -> dict[str, Any]:
    """The default ladder's and the coarse ladder's repeated steps at length ``T``, interleaved."""
    from benchmarks.common import timed_pair

    new, run_new = _fast_step(m, xs, T, OPTIONS["ladder"])
    old, run_old = _fast_step(m, xs, T, OPTIONS["coarse"])
    first = []
    for run in (run_new, run_old):  # compiles (and climbs) before timing
        t0 = time.perf_counter()
        run()
        first.append(time.perf_counter() - t0)
    a, b = timed_pair(run_new, run_old, repeat)
    return {"ladder": a, "coarse": b, "first_s": first, "ratio": a["median_s"] / b["median_s"],
            "ratio_min": a["min_s"] / b["min_s"],
            "capacity": [s.last_result.stats["stack_capacity"] for s in (new, old)]}


def measure(T: int, batch: int, hidden: int, repeat: int, configs: tuple[str, ...]) -> dict[str, Any]:
    """The ``configs`` at length ``T``, each in its own process."""
    row: dict[str, Any] = {"T": T}
    for config in configs:
        cmd = [sys.executable, "-m", "benchmarks.stack_memory", "--child", config, str(T), str(batch), str(hidden),
               str(repeat)]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        row[config] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"  T={T} {config}: done", file=sys.stderr, flush=True)
    return row


def _fast_cell(r: dict[str, Any]) -> str:
    return f"{r['peak_rss'] / MIB:.0f} / {r['stack_capacity']} / {r['kept_stack_bytes'] / MIB:.0f}"


def table(rows: list[dict[str, Any]], batch: int, hidden: int) -> list[str]:
    """The report's lines: peak RSS per configuration, ratios to JAX, and the repeated-run speed."""
    lines = [f"# Peak memory of the LSTM training step (batch {batch}, hidden {hidden}), one process each", "",
             "| T | idle (MiB) | ladder: peak (MiB) / rung / kept stacks (MiB) | coarse (ratio 8) | one rung "
             "| JAX peak (MiB) | ladder / JAX | coarse / JAX | first step ladder / coarse (s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not all(c in r for c in MEMORY_CONFIGS):  # some configurations only: their peaks (MiB) / rungs
            cells = [f"{c}: {r[c]['peak_rss'] / MIB:.0f}" + (f" / {r[c]['stack_capacity']}" if c in OPTIONS else "")
                     for c in CHOICES if c in r and c != "descend"]
            if "descend" in r:
                d = r["descend"]
                cells.append(f"descend: kept (MiB) {' '.join(f'{b / MIB:.0f}' for b in d['kept_stack_bytes'])}, "
                             f"rungs {' '.join(map(str, d['rungs']))}")
            lines.append(f"| {r['T']} | " + " | ".join(cells) + " |")
            continue
        lad, co, jx = r["ladder"], r["coarse"], r["jax"]
        lines.append(
            f"| {r['T']} | {r['baseline']['peak_rss'] / MIB:.0f} | {_fast_cell(lad)} | {_fast_cell(co)} | "
            f"{_fast_cell(r['one_rung'])} | {jx['peak_rss'] / MIB:.0f} | **{lad['peak_rss'] / jx['peak_rss']:.2f}** | "
            f"{co['peak_rss'] / jx['peak_rss']:.2f} | {lad['step_s'][0]:.2f} / {co['step_s'][0]:.2f} |")
    if any("speed" in r for r in rows):
        lines += ["", "Repeated steps, the two ladders interleaved in one process (ms; median, min):", "",
                  "| T | rungs (ladder, coarse) | ladder | coarse | ladder / coarse (median, min) |",
                  "|---|---|---|---|---|"]
        for r in rows:
            s = r.get("speed")
            if s is not None:
                a, b = s["ladder"], s["coarse"]
                lines.append(f"| {r['T']} | {s['capacity'][0]}, {s['capacity'][1]} | {1e3 * a['median_s']:.1f}, "
                             f"{1e3 * a['min_s']:.1f} | {1e3 * b['median_s']:.1f}, {1e3 * b['min_s']:.1f} | "
                             f"**{s['ratio']:.3f}**, {s['ratio_min']:.3f} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="batch 16, hidden 32 (the default: batch 64, hidden 256)")
    ap.add_argument("--lengths", type=int, nargs="*", default=[100, 200, 500, 1000])
    ap.add_argument("--repeat", type=int, default=5, help="interleaved samples per side of the speed comparison")
    ap.add_argument("--no-speed", action="store_true", help="memory only")
    ap.add_argument("--configs", nargs="*", choices=CHOICES, default=list(MEMORY_CONFIGS),
                    help="the memory configurations to run (the table needs baseline, ladder, coarse, one_rung, jax)")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        config, T, batch, hidden, repeat = args.child
        print(json.dumps(child(config, int(T), int(batch), int(hidden), int(repeat))))
        return
    batch, hidden = (16, 32) if args.quick else (64, 256)
    configs = tuple(args.configs) + (() if args.no_speed else ("speed",))
    rows = [measure(T, batch, hidden, args.repeat, configs) for T in args.lengths]
    from benchmarks.common import write_report

    write_report("stack_memory", {"batch": batch, "hidden": hidden, "rows": rows}, table(rows, batch, hidden))


if __name__ == "__main__":
    main()
