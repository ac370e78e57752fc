"""The first run of a new program in a fresh process: Turnout's fast backend against JAX.

Why fresh processes: the first compiled call a process makes pays for starting JAX and XLA (the
backend, the LLVM JIT, JAX's caches of small programs), whichever framework makes it. Timed one after
the other in one process, as ``benchmarks/lstm.py``'s "first call" columns are, the side that goes
first pays that too: there Turnout's first LSTM step looked four times JAX's. Here each sample is a
new Python process that imports both frameworks, builds its program and puts one small array on
the device (not timed), then times its first run (tracing, lowering, XLA's compile, the run and the
read-back) and a second run. Turnout's and JAX's processes alternate, so load on a shared machine
falls on both alike. Turnout's first run
is also split by JAX's own duration events: tracing into a jaxpr, lowering to MLIR, XLA's compile;
the rest is Turnout's own work (validation, raising the graph into regions) and the run.

Programs: the LSTM training step of ``benchmarks/lstm.py`` at the quick sizes (batch 16, hidden 32,
T = 10), the same with a batch of ``None`` rows in the graph (16 fed: its gradient stacks' shapes are
known only when traced, as in most imported TF1 models), the full sizes (batch 64, hidden 256,
T = 100), and the small training step of ``benchmarks/run_overhead.py``. The second run is timed
too: a program compiled on its first run repeats without compiling.

``python benchmarks/first_run.py [--quick] [--rounds N]`` prints a table and writes
``benchmarks/results/first_run.json`` (untracked); ``benchmarks/run.py`` runs it with the others.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
PROGRAMS = ("lstm_quick", "lstm_quick_unknown_batch", "lstm_full", "training_step")
QUICK_PROGRAMS = ("lstm_quick", "lstm_quick_unknown_batch", "training_step")
#: per LSTM program: (batch fed, input, hidden, t_max, steps run) and whether the graph leaves the batch to the feed
LSTM_SIZES = {"lstm_quick": ((16, 32, 32, 50, 10), False), "lstm_quick_unknown_batch": ((16, 32, 32, 50, 10), True),
              "lstm_full": ((64, 256, 256, 1000, 100), False)}
#: JAX's duration events that split a first run: (event, column)
EVENTS = (("/jax/core/compile/jaxpr_trace_duration", "trace_s"),
          ("/jax/core/compile/jaxpr_to_mlir_module_duration", "lower_s"),
          ("/jax/core/compile/backend_compile_duration", "xla_s"))


def _lstm(sizes: tuple[int, int, int, int, int], side: str, unknown_batch: bool = False) -> Callable[[], Any]:
    """The first-run callable of the LSTM step on ``side`` ('turnout' or 'jax'), built untimed
    (``unknown_batch``: Turnout's graph leaves the batch to the feed; JAX traces for the array it gets)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from benchmarks.lstm import build, jax_step

    batch, inp, hidden, t_max, steps = sizes
    m = build(None if unknown_batch else batch, inp, hidden, t_max)
    xs = np.random.default_rng(1).normal(size=(t_max, batch, inp)).astype(np.float32)
    if side == "turnout":
        import turnout as tn

        sess = tn.Session(m["graph"], backend="fast")
        feed = {m["xs"]: jax.device_put(xs), m["T"]: steps}
        fetch = [m["loss"], *m["grads"]]
        return lambda: sess.run(fetch, feed)
    step, _ = jax_step(hidden)
    params = (jnp.asarray(m["w0"]), jnp.zeros(4 * hidden, jnp.float32))
    xt = jax.device_put(xs[:steps])
    return lambda: [np.asarray(a) for a in jax.tree_util.tree_leaves(step(params, xt))]


def child(side: str, program: str) -> dict[str, Any]:
    """One sample, in this (fresh) process: the first and second run's seconds, and the first run's
    split by JAX's duration events."""
    import jax
    import numpy as np

    events: dict[str, float] = collections.defaultdict(float)

    def listen(event: str, duration_secs: float, **_: str | int) -> None:
        events[event] += duration_secs

    jax.monitoring.register_event_duration_secs_listener(listen)
    if program == "training_step":  # (only the side asked for is built: nothing compiles before the clock)
        from benchmarks.run_overhead import training_step_jax, training_step_turnout

        fn = training_step_turnout() if side == "turnout" else training_step_jax()
    else:
        sizes, unknown_batch = LSTM_SIZES[program]
        fn = _lstm(sizes, side, unknown_batch)
    # One transfer to the device on both sides before the clock starts: the process's first transfer
    # sets up the runtime's transfer machinery, and one side's builder may have made it already (the
    # JAX training step puts its parameters on the device, Turnout's puts its Variables there in the
    # first run), which would charge that setup to the other side alone.
    jax.block_until_ready(jax.device_put(np.zeros(8, np.float32)))
    events.clear()  # (building the program may compile small helpers: not part of the first run)
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    split = {col: events.get(name, 0.0) for name, col in EVENTS}
    t0 = time.perf_counter()
    fn()
    return {"side": side, "program": program, "first_s": first, "second_s": time.perf_counter() - t0, **split}


def _sample(side: str, program: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", side, program],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool, rounds: int | None = None) -> dict[str, Any]:
    """Median first-run seconds of each side over ``rounds`` alternating pairs of fresh processes."""
    programs = QUICK_PROGRAMS if quick else PROGRAMS
    rounds = rounds if rounds is not None else (2 if quick else 3)
    rows = []
    for program in programs:
        got: dict[str, list[dict[str, Any]]] = {"turnout": [], "jax": []}
        for _ in range(rounds):
            for side in ("turnout", "jax"):
                got[side].append(_sample(side, program))
        med = {side: {k: statistics.median(s[k] for s in samples)
                      for k in ("first_s", "second_s", *(c for _, c in EVENTS))}
               for side, samples in got.items()}
        rows.append({"program": program, "rounds": rounds, "turnout": med["turnout"], "jax": med["jax"],
                     "ratio": med["turnout"]["first_s"] / med["jax"]["first_s"], "samples": got})
    return {"name": "first_run", "rows": rows}


def table(res: dict[str, Any]) -> str:
    """The Markdown table of ``run``'s result."""
    lines = ["| program | Turnout first run (s) | JAX first call (s) | ratio | Turnout: trace / lower / XLA (s) | "
             "JAX: trace / lower / XLA (s) | second run: Turnout / JAX (ms) |", "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        t, j = r["turnout"], r["jax"]
        lines.append(f"| {r['program']} | {t['first_s']:.2f} | {j['first_s']:.2f} | {r['ratio']:.2f} | "
                     f"{t['trace_s']:.2f} / {t['lower_s']:.2f} / {t['xla_s']:.2f} | "
                     f"{j['trace_s']:.2f} / {j['lower_s']:.2f} / {j['xla_s']:.2f} | "
                     f"{1e3 * t['second_s']:.1f} / {1e3 * j['second_s']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the quick LSTM and the training step, two rounds")
    ap.add_argument("--rounds", type=int, default=None, help="pairs of processes per program")
    ap.add_argument("--child", nargs=2, metavar=("SIDE", "PROGRAM"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        if ROOT not in sys.path:
            sys.path.insert(0, ROOT)
        print(json.dumps(child(*args.child)))
        return 0
    res = run(args.quick, args.rounds)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "first_run.json"), "w", encoding="utf-8") as f:
        json.dump(res, f, indent=1)
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
