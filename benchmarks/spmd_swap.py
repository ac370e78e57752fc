"""A swapping loop that spans two devices in lockstep: its training step on the SPMD program, which
keeps the loop's stacks in host memory inside its one call, against the host-driven tier, which
moves full stack chunks between its per-device calls (where such a loop ran before the SPMD program
could swap).

The model: ``h <- tanh(tanh(h W1) W0)`` for ``T`` steps (batch 8, width 32, float32), the first
matmul on ``cpu:1`` and the second on ``cpu:0``, ``swap_memory=True`` and ``parallel_iterations=1``
(the devices take turns, so pipelining gains nothing), and the gradient of ``sum(h * h)`` with
respect to the start. A third session runs the SPMD program under a ``device_memory_limit`` that
holds 1024 entries of the stacks on each device (a run under a limit took the host-driven tier before
the program counted its bytes, ``SpmdPlan.room``), and a fourth runs it under a run's
``memory_budget`` of the same bytes (``SpmdPlan.budget_room``; such runs too took the host-driven
tier before). The sessions run on the same forced CPU devices,
their calls alternated, best of ``--repeat``; the ratio is the host-driven step's time over the SPMD
program's. On the CPU the host
memory moves are dropped by JAX, so this measures the tiers, not the copies.

Run: ``python benchmarks/spmd_swap.py [--quick]``; results go to ``benchmarks/results/spmd_swap.json``
and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.common import timed_interleaved, write_report  # noqa: E402
from benchmarks.paper.common import force_host_devices  # noqa: E402

NAME = "spmd_swap"


def build() -> dict[str, Any]:
    """The two-device swapping loop and its gradient."""
    import numpy as np

    import turnout as tn

    rng = np.random.default_rng(0)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [8, 32], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        with tn.device("cpu:1"):
            w1 = tn.constant(rng.normal(size=(32, 32)).astype(np.float32) * 0.2)
        with tn.device("cpu:0"):
            w0 = tn.constant(rng.normal(size=(32, 32)).astype(np.float32) * 0.2)

        def body(i: Any, h: Any) -> Any:
            with tn.device("cpu:1"):
                a = tn.tanh(tn.matmul(h, w1))
            with tn.device("cpu:0"):
                return i + 1, tn.tanh(tn.matmul(a, w0))

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, h: i < n, body, [tn.constant(0), x], swap_memory=True,
                                 parallel_iterations=1)
            (gx,) = tn.gradients(tn.reduce_sum(y * y), [x])
    return {"graph": g, "x": x, "n": n, "grad": gx}


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one short length, few repeats")
    ap.add_argument("--repeat", type=int, default=None, help="timed steps per side and length (default 15, 3 quick)")
    args = ap.parse_args(argv)
    force_host_devices(2)
    import numpy as np

    import turnout as tn

    lengths = (100,) if args.quick else (100, 1000)
    repeat = args.repeat or (3 if args.quick else 15)
    m = build()
    x0 = np.random.default_rng(1).normal(size=(8, 32)).astype(np.float32)
    sessions = {mode: tn.Session(m["graph"], backend="fast", devices=["cpu:0", "cpu:1"], whole_program=mode)
                for mode in ("always", "never")}
    # (every device holds the index records of the loop's stacks: 4 bytes an entry each)
    stacks = sum(1 for node in m["graph"].nodes if node.op == "StackNew")
    sessions["limited"] = tn.Session(m["graph"], backend="fast", devices=["cpu:0", "cpu:1"], whole_program="always",
                                     device_memory_limit=1024 * 4 * stacks)
    sessions["budgeted"] = tn.Session(m["graph"], backend="fast", devices=["cpu:0", "cpu:1"], whole_program="always")
    budget = {"budgeted": 1024 * 4 * stacks}
    rows = []
    for T in lengths:
        feeds = {m["x"]: x0, m["n"]: np.int32(T)}
        calls = {mode: (lambda s=s, f=feeds, b=budget.get(mode): s.run(m["grad"], f, memory_budget=b))
                 for mode, s in sessions.items()}
        got = {mode: call() for mode, call in calls.items()}
        for mode in ("never", "limited", "budgeted"):
            np.testing.assert_allclose(got["always"], got[mode], rtol=1e-4, atol=1e-6)
        tiers = {mode: s.last_result.stats["tier"] for mode, s in sessions.items()}
        assert tiers == {"always": "spmd", "never": "host-driven", "limited": "spmd", "budgeted": "spmd"}, tiers
        t = timed_interleaved(calls, repeat)
        rows.append({"T": T, "spmd": t["always"], "host_driven": t["never"], "spmd_limited": t["limited"],
                     "spmd_budgeted": t["budgeted"],
                     "host_driven_over_spmd": t["never"]["min_s"] / t["always"]["min_s"],
                     "limited_over_spmd": t["limited"]["min_s"] / t["always"]["min_s"],
                     "budgeted_over_spmd": t["budgeted"]["min_s"] / t["always"]["min_s"]})
    lines = ["# A swapping loop spanning two devices: SPMD program against the host-driven tier", "",
             "| T | SPMD program (ms) | host-driven tier (ms) | ratio | SPMD under device_memory_limit (ms) | ratio "
             "| SPMD under a run's memory_budget (ms) | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['T']} | {1e3 * r['spmd']['min_s']:.2f} | {1e3 * r['host_driven']['min_s']:.2f} | "
              f"{r['host_driven_over_spmd']:.1f} | {1e3 * r['spmd_limited']['min_s']:.2f} | "
              f"{r['limited_over_spmd']:.2f} | {1e3 * r['spmd_budgeted']['min_s']:.2f} | "
              f"{r['budgeted_over_spmd']:.2f} |" for r in rows]
    out = {"name": NAME, "quick": args.quick, "repeat": repeat, "rows": rows}
    write_report(NAME, out, lines)
    return out


if __name__ == "__main__":
    main()
