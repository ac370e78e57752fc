"""The gradient of ``scan`` and ``map_fn`` over n elements: time against n, which should grow linearly.

Why: the gradient of reading slot i of a TensorArray is a TensorArray of gradients with only slot i
set. Built naively (a fresh full-size TensorArray per backward iteration, added slotwise to the
accumulator) the backward loop costs O(n) per iteration and O(n^2) in all. Turnout accumulates into
one slot instead (``TensorArrayAccumulate``), so each backward iteration costs O(1) TensorArray work.
Usage: ``python -m benchmarks.scan_gradient [--quick]``; writes ``benchmarks/results/scan_gradient.json``
and ``.md``. This benchmark runs ``d sum(scan(c = tanh(c * x + 0.5))) / d xs`` and the same for ``map_fn`` for
several n on the reference and fast backends, side by side with the full-size baseline in the same
process, and reports time per element (flat when linear) and the growth of time against the growth
of n.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

import turnout as tn


@contextlib.contextmanager
def full_size_accumulation() -> Iterator[None]:
    """The O(n^2) baseline, for a side-by-side ratio: each backward iteration materializes the slot
    gradient as a full-size TensorArray and adds it slotwise to the accumulator (what Turnout did
    before ``TensorArrayAccumulate``)."""
    from turnout.gradients import grads as core

    def naive(self: Any, t: Any, acc: Any) -> Any:
        tot = self.total(t)
        return acc if tot is None else core.add_grads(acc, tot)

    saved = core.Grads.accumulate_into
    core.Grads.accumulate_into = naive  # type: ignore[method-assign]
    try:
        yield
    finally:
        core.Grads.accumulate_into = saved  # type: ignore[method-assign]


def build(kind: str, n: int) -> tuple[tn.Graph, Any, Any]:
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float64, [n, 4], name="xs")
        if kind == "scan":
            ys = tn.scan(lambda c, x: tn.tanh(c * x + 0.5), xs, initializer=tn.zeros([4], tn.float64))
        else:
            ys = tn.map_fn(lambda x: tn.tanh(x * x), xs)
        (dx,) = tn.gradients(tn.reduce_sum(ys), [xs])
    return g, xs, dx


def _time(sess: tn.Session, dx: Any, feeds: dict[Any, Any], repeat: int) -> float:
    sess.run(dx, feed_dict=feeds)  # compile (fast) / warm up
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(dx, feed_dict=feeds)
        best = min(best, time.perf_counter() - t0)
    return best


def run(quick: bool) -> dict[str, Any]:
    sizes = {"reference": [50, 100, 200, 400] if quick else [100, 200, 400, 800],
             "fast": [500, 2000, 8000] if quick else [1000, 4000, 16000, 64000]}
    out: dict[str, Any] = {}
    for kind in ("scan", "map_fn"):
        for backend, ns in sizes.items():
            rows = []
            for n in ns:
                row: dict[str, Any] = {"n": n}
                for mode in ("accumulate", "full_size"):
                    with full_size_accumulation() if mode == "full_size" else contextlib.nullcontext():
                        g, xs, dx = build(kind, n)
                    feeds = {xs: np.random.default_rng(0).uniform(-1, 1, (n, 4))}
                    # fast: stacks sized to hold every iteration, so each n runs as one fused call
                    opts: dict[str, Any] = {} if backend == "reference" else {"stack_chunk": ns[-1]}
                    row[mode] = _time(tn.Session(g, backend=backend, **opts), dx, feeds,
                                      2 if backend == "reference" else 5)
                rows.append(row)
            out[f"{kind}/{backend}"] = {
                "rows": rows, "n_ratio": ns[-1] / ns[0],
                "time_ratio": rows[-1]["accumulate"] / rows[0]["accumulate"],
                "full_size_time_ratio": rows[-1]["full_size"] / rows[0]["full_size"]}
    return out


def summary(r: dict[str, Any]) -> list[str]:
    lines = ["## Gradient of scan / map_fn against n", "",
             "| program | backend | n | accumulate (ms) | us per element | full-size baseline (ms) | baseline / "
             "accumulate |", "|---|---|---|---|---|---|---|"]
    for key, v in r.items():
        kind, backend = key.split("/")
        for row in v["rows"]:
            a, f = row["accumulate"], row["full_size"]
            lines.append(f"| {kind} | {backend} | {row['n']} | {1e3 * a:.1f} | {1e6 * a / row['n']:.1f} | "
                         f"{1e3 * f:.1f} | {f / a:.2f} |")
    lines += ["", "| program | backend | n grows by | accumulate time grows by | baseline time grows by |",
              "|---|---|---|---|---|"]
    for key, v in r.items():
        kind, backend = key.split("/")
        lines.append(f"| {kind} | {backend} | {v['n_ratio']:.0f}x | {v['time_ratio']:.1f}x | "
                     f"{v['full_size_time_ratio']:.1f}x |")
    return lines + [""]


if __name__ == "__main__":
    import sys

    from benchmarks.common import write_report

    res = run("--quick" in sys.argv)
    write_report("scan_gradient", res, summary(res))
