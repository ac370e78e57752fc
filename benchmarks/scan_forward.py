"""The forward loop of ``scan`` and ``map_fn`` over n elements on the fast backend: time against n.

Why: each iteration writes one slot of a TensorArray, whose write-once check asks whether the slot
was written. When the check read the old slot table beside its in-place update, XLA copied the whole
table at every write (O(n) per write, O(n^2) in all). The table now counts writes and the check reads
the updated count, so the update stays in place (``turnout.fast.values.TA``). This benchmark times the
current lowering side by side with the old one (the check on the old table, swapped in for the
baseline in the same process) and reports the time per element, which is flat when the loop is
linear.

Usage: ``python -m benchmarks.scan_forward [--quick]``; writes ``benchmarks/results/scan_forward.json``
and ``.md`` (untracked).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

import turnout as tn


@contextlib.contextmanager
def check_on_the_old_table() -> Iterator[None]:
    """The baseline: ``TensorArrayWrite`` checks ``mask[j] == 0`` on the table before its update."""
    from turnout.fast import lowering
    from turnout.fast.values import TA

    def old_write(ctx: Any, n: Any, xs: list[Any]) -> list[Any]:
        import jax.numpy as jnp

        ta, i, v = xs
        v = jnp.asarray(v, ta.dtype)
        if ta.pending:
            ta = ta.materialize(tuple(v.shape))
        j = lowering._ta_index(ctx, n, ta, i, "TensorArrayWrite")
        ctx.check(ta.mask[j] == 0, "TensorArrayWrite: a slot was already written")
        return [TA(ta.size, ta.dtype, ta.elem_shape, ta.buf.at[j].set(v), ta.mask.at[j].set(1))]

    saved = lowering.LOWERING_RULES["TensorArrayWrite"]
    lowering.LOWERING_RULES["TensorArrayWrite"] = old_write
    try:
        yield
    finally:
        lowering.LOWERING_RULES["TensorArrayWrite"] = saved


def build(kind: str, n: int) -> tuple[tn.Graph, Any, Any]:
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, [n, 4], name="xs")
        if kind == "scan":
            ys = tn.scan(lambda c, x: tn.tanh(c * x + 0.5), xs, initializer=tn.zeros([4], tn.float32))
        else:
            ys = tn.map_fn(lambda x: tn.tanh(x * x), xs)
        out = tn.reduce_sum(ys)
    return g, xs, out


def _time(sess: tn.Session, out: Any, feeds: dict[Any, Any], repeat: int) -> float:
    sess.run(out, feed_dict=feeds)  # compile
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(out, feed_dict=feeds)
        best = min(best, time.perf_counter() - t0)
    return best


def run(quick: bool) -> dict[str, Any]:
    ns = [1000, 4000, 16000] if quick else [1000, 4000, 16000, 64000]
    out: dict[str, Any] = {}
    for kind in ("scan", "map_fn"):
        rows = []
        for n in ns:
            feeds_value = np.random.default_rng(0).uniform(-1, 1, (n, 4)).astype(np.float32)
            row: dict[str, Any] = {"n": n}
            for mode in ("count", "old_table"):
                g, xs, y = build(kind, n)
                with check_on_the_old_table() if mode == "old_table" else contextlib.nullcontext():
                    row[mode] = _time(tn.Session(g, backend="fast"), y, {xs: feeds_value}, 5)
            rows.append(row)
        out[kind] = {"rows": rows, "n_ratio": ns[-1] / ns[0],
                     "time_ratio": rows[-1]["count"] / rows[0]["count"],
                     "old_time_ratio": rows[-1]["old_table"] / rows[0]["old_table"]}
    return out


def summary(r: dict[str, Any]) -> list[str]:
    lines = ["## Forward scan / map_fn against n (fast backend, best of 5)", "",
             "| program | n | count (ms) | us per element | check on the old table (ms) | old / count |",
             "|---|---|---|---|---|---|"]
    for kind, v in r.items():
        for row in v["rows"]:
            a, b = row["count"], row["old_table"]
            lines.append(f"| {kind} | {row['n']} | {1e3 * a:.2f} | {1e6 * a / row['n']:.3f} | {1e3 * b:.2f} | "
                         f"{b / a:.1f} |")
    lines += ["", "| program | n grows by | time grows by | old lowering's time grows by |", "|---|---|---|---|"]
    for kind, v in r.items():
        lines.append(f"| {kind} | {v['n_ratio']:.0f}x | {v['time_ratio']:.1f}x | {v['old_time_ratio']:.1f}x |")
    return lines + [""]


if __name__ == "__main__":
    import sys

    from benchmarks.common import write_report

    res = run("--quick" in sys.argv)
    write_report("scan_forward", res, summary(res))
