"""The gradient of a graph loop under its own memory budget against the store-everything gradient.

Why: ``tn.while_loop(..., memory_budget=B)`` is differentiated by recomputation from the checkpoints
its forward loop keeps online (``turnout.control_flow.checkpoints``, ``turnout.gradients.recompute``);
this measures what that costs in time against the same graph built without a budget, whose gradient
keeps every iteration's values on stacks. The issue's target: within 1.5 times of store-everything
with about ``sqrt(n)`` checkpoints.

The loop: ``v <- tanh(v W)`` for ``T`` steps, ``v`` of shape ``[1, H]``, ``W`` of ``[H, H]`` read from
outside the loop; the gradients of the initial ``v`` and of ``W``. With ``--builder scan`` the same
recurrence is a ``tn.scan`` over ``T`` inputs, ``v <- tanh(v W + x)``, whose every ``v`` is an
output (the TensorArray of its results, which a checkpoint leaves out: ``checkpoints.accumulators``),
and the loss sums them all. Per trip count, in one process,
calls interleaved (``benchmarks.common.timed_interleaved``): ``store`` (no budget), ``sqrt`` (a budget
of ``isqrt(2T)`` states), ``16`` (16 states) and ``64MiB`` (a budget of 64 MiB, which holds far more
states than the loop runs steps: what it costs is how many slots the backend gives, sized to the
runs or not, ``turnout.slot_sizes``). With ``--devices N`` the graph's nodes are placed round robin over
``N`` CPU devices (the fast partitioned executor; ``--whole-program never`` for its per-device tiers,
``always`` for its SPMD program). Reported: ms per gradient (median and best of
``--repeat`` after the first call), the ratio of the best to ``store``'s, the schedule's extra forward
passes (``checkpoint_schedule.cost(T, slots).overhead``), and the largest difference from ``store``'s
gradients.

Usage: ``bash scripts/py.sh benchmarks/recompute_graph.py [--backend fast] [--builder while_loop|scan]
[--lengths 1000 4000] [--hidden 256] [--devices 2 --whole-program never|always]``;
writes ``benchmarks/results/recompute_graph.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any, Optional

import numpy as np

import turnout as tn
from turnout import checkpoint_schedule as cs

try:  # run as ``python -m benchmarks.recompute_graph`` or as a script
    from benchmarks.common import machine, timed_interleaved, write_report
except ImportError:  # pragma: no cover
    sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
    from benchmarks.common import machine, timed_interleaved, write_report


def build(hidden: int, slots: Optional[int], builder: str = "while_loop") -> tuple[tn.Graph, dict[str, Any], list[Any]]:
    """The loop and its gradients; ``slots`` states of budget (None: no budget, store everything)."""
    state = 4 + 4 * hidden + 4  # bytes of one slot: the int32 counter, v's float32s, the int32 position
    budget = None if slots is None else slots * state
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [1, hidden], name="x")
        w = tn.placeholder(tn.float32, [hidden, hidden], name="w")
        if builder == "scan":
            n = tn.placeholder(tn.float32, [None, 1, hidden], name="n")  # (the inputs: T of them)
            ys = tn.scan(lambda v, u: tn.tanh(tn.matmul(v, w) + u), n, x, memory_budget=budget, name="rnn")
            loss = tn.reduce_sum(ys * ys)
        else:
            n = tn.placeholder(tn.int32, [], name="n")
            _, y = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tn.tanh(tn.matmul(v, w))),
                                 [tn.constant(0), x], name="rnn", memory_budget=budget)
            loss = tn.reduce_sum(y * y)
        grads = tn.gradients(loss, [x, w])
    return g, {"x": x, "w": w, "n": n}, list(grads)


def session(g: tn.Graph, backend: str, devices: int, whole_program: str) -> tn.Session:
    """A session of ``g`` on ``backend``, its nodes placed round robin over ``devices`` CPU devices
    where there are several (the fast partitioned executor, taking ``whole_program``)."""
    if devices <= 1:
        return tn.Session(g, backend=backend)
    names = [f"cpu:{k}" for k in range(devices)]
    spread = {nd.name: names[k % devices] for k, nd in enumerate(g.nodes)}
    return tn.Session(g, backend=backend, devices=names, requests=spread, whole_program=whole_program)


def measure(backend: str, hidden: int, length: int, repeat: int, builder: str = "while_loop", devices: int = 1,
            whole_program: str = "auto") -> dict[str, Any]:
    """Times and gradients of the four variants at one trip count."""
    rng = np.random.default_rng(0)
    steps: Any = length if builder != "scan" else (rng.normal(size=(length, 1, hidden)) * 0.1).astype(np.float32)
    feeds = {"x": rng.normal(size=(1, hidden)).astype(np.float32),
             "w": (rng.normal(size=(hidden, hidden)) / math.sqrt(hidden)).astype(np.float32), "n": steps}
    variants = {"store": None, "sqrt": math.isqrt(2 * length), "16": 16, "64MiB": (64 << 20) // (8 + 4 * hidden)}
    calls, got = {}, {}
    for name, slots in variants.items():
        g, ph, grads = build(hidden, slots, builder)
        sess = session(g, backend, devices, whole_program)
        feed = {ph[k]: v for k, v in feeds.items()}
        calls[name] = (lambda s=sess, f=feed, gs=grads: s.run(gs, f))
        got[name] = calls[name]()
    times = timed_interleaved(calls, repeat)
    out: dict[str, Any] = {"length": length}
    for name, slots in variants.items():
        err = max(float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))
                  for a, b in zip(got[name], got["store"], strict=True))
        out[name] = {"slots": slots, **times[name], "ratio": times[name]["min_s"] / times["store"]["min_s"],
                     "extra_forward_passes": None if slots is None else cs.cost(length, slots).overhead,
                     "max_rel_diff": err}
    return out


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="fast")
    ap.add_argument("--builder", choices=["while_loop", "scan"], default="while_loop")
    ap.add_argument("--lengths", type=int, nargs="+", default=[1000, 4000])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--devices", type=int, default=1, help="CPU devices to place the nodes on, round robin")
    ap.add_argument("--whole-program", choices=["auto", "always", "never"], default="auto")
    args = ap.parse_args(argv)
    if args.devices > 1 and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + f" --xla_force_host_platform_device_count={args.devices}").strip()
    rows = [measure(args.backend, args.hidden, t, args.repeat, args.builder, args.devices, args.whole_program)
            for t in args.lengths]
    lines = [f"recompute_graph: backend {args.backend}, {args.builder}, H = {args.hidden}, best of {args.repeat} "
             f"after the first, {args.devices} device(s), whole_program={args.whole_program}",
             "| T | store ms | sqrt slots | sqrt ms | ratio | extra passes | 16 ms | ratio | extra passes "
             "| 64 MiB ms | ratio | max diff |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, q, k, b = r["store"], r["sqrt"], r["16"], r["64MiB"]
        diff = max(q["max_rel_diff"], k["max_rel_diff"], b["max_rel_diff"])
        lines.append(f"| {r['length']} | {1e3 * s['min_s']:.1f} | {q['slots']} | {1e3 * q['min_s']:.1f} | "
                     f"{q['ratio']:.2f} | {q['extra_forward_passes']:.2f} | {1e3 * k['min_s']:.1f} | "
                     f"{k['ratio']:.2f} | {k['extra_forward_passes']:.2f} | {1e3 * b['min_s']:.1f} | "
                     f"{b['ratio']:.2f} | {diff:.1e} |")
    write_report("recompute_graph", {"machine": machine(), "args": vars(args), "rows": rows}, lines)


if __name__ == "__main__":
    main()
