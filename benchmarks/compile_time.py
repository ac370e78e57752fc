"""Compile time against program size: a ``case`` with many branches, deeply nested loops, deeply
nested conds, deeply nested folds, and the gradient of nested scans, each side by side with the
hand-written JAX program of the same shape (the folds against nested ``lax.scan``, the gradient
against ``jax.grad`` of nested ``lax.scan``).

Why: the fast backend compiles by *tracing* the region tree into ``lax`` control flow. If a region
were traced more than once per enclosing trace (say, once to learn its result types and again inside
``lax.cond``), compile time would double with every nesting level. This benchmark measures the
first ``Session.run`` of a fresh graph (raising, tracing, XLA compilation and one run) against the
first call of a fresh ``jax.jit`` function (tracing, compilation and one run) at sizes 2 to 64, so
growth and the ratio to JAX are both visible. The trip counts are fed (one iteration per loop) and
the conds' predicates depend on a fed value, so nothing folds away at trace time on either side.
The folds run over a fed one-element vector: their trip counts are its length, known when tracing,
on both sides. The gradient (``grad_scans``) is of a Variable through ``tn.scan`` nested ``n`` deep
over a fed three-element vector, sizes 1 to 6 (its innermost body runs ``3**n`` times, and its
gradient stacks hold as many entries; at 7 they outgrow the default ``stack_chunk``).

Run it alone with ``python3 benchmarks/compile_time.py [--quick] [--plot PATH]``; ``benchmarks/run.py``
runs it with the others.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import turnout as tn  # noqa: E402
from turnout.fast.deep import call_deep  # noqa: E402

SIZES = [2, 4, 8, 16, 32, 64]
QUICK_SIZES = [2, 8, 32]
GRAD_SIZES = [1, 2, 3, 4, 5, 6]
QUICK_GRAD_SIZES = [1, 3, 5]
SHAPES = ("case", "loops", "conds", "folds", "grad_scans")


# ---- Turnout programs ------------------------------------------------------------------------------
def build(shape: str, n: int) -> tuple[tn.Graph, tn.Tensor, dict[str, tn.Tensor]]:
    """The Turnout program of ``shape`` at size ``n``: (graph, output, placeholders by name)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        if shape == "case":
            idx = tn.placeholder(tn.int32, [], name="idx")
            def branch(k: int) -> Callable[[], Any]:
                return lambda: x * float(k) + 1.0

            out = tn.case(idx, [branch(k) for k in range(n)])
            return g, out, {"x": x, "idx": idx}
        if shape == "loops":
            trips = tn.placeholder(tn.int32, [], name="trips")

            def loops(d: int, v: tn.Tensor) -> tn.Tensor:
                if d == 0:
                    return v * 1.5 + 1.0
                _, w = tn.while_loop(lambda i, w: i < trips, lambda i, w: (i + 1, loops(d - 1, w)),
                                     [tn.constant(0), v])
                return w  # type: ignore[no-any-return]

            return g, loops(n, x), {"x": x, "trips": trips}
        if shape == "folds":
            xs = tn.placeholder(tn.float32, [1], name="xs")

            def folds(d: int) -> Callable[[Any, Any], Any]:
                if d == 1:
                    return lambda c, e: c * 1.5 + e
                return lambda c, e: c + tn.foldl(folds(d - 1), xs, initializer=e)

            return g, tn.foldl(folds(n), xs, initializer=x), {"x": x, "xs": xs}
        if shape == "grad_scans":
            xs = tn.placeholder(tn.float32, [3], name="xs")
            w = tn.Variable(np.float32(0.5), name="w")

            def scans(d: int) -> Callable[[Any, Any], Any]:
                if d == 1:
                    return lambda c, e: tn.tanh(c * w.read() + e)
                return lambda c, e: c + tn.reduce_sum(tn.scan(scans(d - 1), xs, initializer=e)) * 0.1

            loss = tn.reduce_sum(tn.scan(scans(n), xs, initializer=x))
            (gw,) = tn.gradients(loss, [w])
            return g, gw, {"x": x, "xs": xs}
        if shape == "conds":
            def conds(d: int) -> tn.Tensor:
                if d == n:
                    return x * 2.0
                return tn.cond(x > float(d), lambda: conds(d + 1), lambda: x - float(d))  # type: ignore[no-any-return]

            return g, conds(0), {"x": x}
    raise ValueError(shape)


def feeds(shape: str, n: int) -> dict[str, Any]:
    if shape == "case":
        return {"x": np.float32(3.0), "idx": np.int32(n - 1)}
    if shape == "loops":
        return {"x": np.float32(3.0), "trips": np.int32(1)}
    if shape == "folds":
        return {"x": np.float32(3.0), "xs": np.array([0.5], np.float32)}
    if shape == "grad_scans":
        return {"x": np.float32(0.0), "xs": np.array([0.5, 1.0, 1.5], np.float32)}
    return {"x": np.float32(n + 1.0)}  # every predicate true: the innermost branch runs


# ---- hand-written JAX programs of the same shapes --------------------------------------------------
def jax_program(shape: str, n: int) -> Callable[..., Any]:
    import jax
    import jax.numpy as jnp

    if shape == "case":
        def case(x: Any, idx: Any) -> Any:
            return jax.lax.switch(jnp.clip(idx, 0, n - 1), [lambda x, k=k: x * float(k) + 1.0 for k in range(n)], x)

        return case
    if shape == "loops":
        def loops(x: Any, trips: Any) -> Any:
            def nest(d: int, v: Any) -> Any:
                if d == 0:
                    return v * 1.5 + 1.0
                return jax.lax.while_loop(lambda c: c[0] < trips, lambda c: (c[0] + 1, nest(d - 1, c[1])),
                                          (jnp.int32(0), v))[1]

            return nest(n, x)

        return loops
    if shape == "folds":
        def folds(x: Any, xs: Any) -> Any:
            def nest(d: int) -> Callable[[Any, Any], Any]:
                if d == 1:
                    return lambda c, e: (c * 1.5 + e, None)
                return lambda c, e: (c + jax.lax.scan(nest(d - 1), e, xs)[0], None)

            return jax.lax.scan(nest(n), x, xs)[0]

        return folds
    if shape == "grad_scans":
        def loss(w: Any, x: Any, xs: Any) -> Any:
            def nest(d: int) -> Callable[[Any, Any], Any]:
                if d == 1:
                    return lambda c, e: (lambda r: (r, r))(jnp.tanh(c * w + e))
                return lambda c, e: (lambda r: (r, r))(c + jnp.sum(jax.lax.scan(nest(d - 1), e, xs)[1]) * 0.1)

            return jnp.sum(jax.lax.scan(nest(n), x, xs)[1])

        grad = jax.grad(loss)
        return lambda x, xs: grad(np.float32(0.5), x, xs)

    def conds(x: Any) -> Any:
        def nest(d: int) -> Any:
            if d == n:
                return x * 2.0
            return jax.lax.cond(x > float(d), lambda: nest(d + 1), lambda: x - float(d))

        return nest(0)

    return conds


def measure(shape: str, n: int, repeat: int = 1) -> dict[str, Any]:
    """First-run seconds of the Turnout program on the fast backend and of the JAX program: the best
    of ``repeat`` tries each, taken in turn (Turnout, JAX, Turnout, ...) so that load on a shared
    machine falls on both sides alike. Every try builds a fresh graph and a fresh JAX function, so
    nothing is cached between tries. Each side starts after a full garbage collection: the first
    full collection of a process scans everything JAX made at import (about 50 ms here), and
    whichever side's allocations set it off used to pay it."""
    import jax

    fast, jx = [], []
    for _ in range(repeat):
        g, out, ph = build(shape, n)
        fv = feeds(shape, n)
        gc.collect()  # a full collection pending since the imports lands on neither side's clock
        t0 = time.perf_counter()
        sess = tn.Session(g, backend="fast")
        got = sess.run(out, {ph[k]: v for k, v in fv.items()})
        fast.append(time.perf_counter() - t0)
        traces = sess.backend.compile_count
        fn = jax_program(shape, n)
        gc.collect()
        t0 = time.perf_counter()
        if n > 32:  # JAX lowers a nest of scans recursively: deep ones need the room Turnout gives its own
            want = call_deep(lambda: np.asarray(jax.jit(fn)(*fv.values())), nesting=n)  # noqa: B023
        else:
            want = np.asarray(jax.jit(fn)(*fv.values()))
        jx.append(time.perf_counter() - t0)
    fast_s, jax_s = min(fast), min(jx)
    return {"shape": shape, "n": n, "fast_s": fast_s, "jax_s": jax_s, "ratio": fast_s / jax_s,
            "nodes": len(g.nodes), "fast_traces": traces, "repeat": repeat,
            "agree": bool(np.allclose(np.asarray(got), want, rtol=1e-5))}


def run(quick: bool, shapes: tuple[str, ...] = SHAPES, repeat: int = 1) -> dict[str, Any]:
    sizes = QUICK_SIZES if quick else SIZES
    rows = []
    measure(shapes[0], 2)  # warm up: JAX's and Turnout's first-use costs belong to neither size
    for shape in shapes:
        grad = QUICK_GRAD_SIZES if quick else GRAD_SIZES
        for n in (grad if shape == "grad_scans" else sizes):
            rows.append(measure(shape, n, repeat))
    # (not folds: JAX's own nest of 100 ``lax.scan`` overflows the C stack while it is lowered, here;
    # Turnout's runs, 1.2 s on 2026-11-27)
    deep = [] if quick else [measure(s, 100, repeat) for s in ("loops", "conds") if s in shapes]
    return {"name": "compile_time", "sizes": sizes, "rows": rows, "deep": deep}


def plot(res: dict[str, Any], path: str) -> None:
    """Compile seconds against size, one panel per shape, Turnout fast and JAX side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = [s for s in SHAPES if any(r["shape"] == s for r in res["rows"])]
    fig, axes = plt.subplots(1, len(shapes), figsize=(4 * len(shapes), 3.6), sharey=False, squeeze=False)
    axes = axes[0]
    titles = {"case": "tn.case with n branches", "loops": "n nested while loops", "conds": "n nested conds",
              "folds": "n nested foldl", "grad_scans": "gradient of n nested scans"}
    for ax, shape in zip(axes, shapes, strict=True):
        rows = [r for r in res["rows"] + res.get("deep", []) if r["shape"] == shape]
        rows.sort(key=lambda r: r["n"])
        ns = [r["n"] for r in rows]
        ax.plot(ns, [r["fast_s"] for r in rows], "o-", label="Turnout fast (first run)")
        ax.plot(ns, [r["jax_s"] for r in rows], "s--", label="hand-written JAX (first call)")
        ax.set_title(titles[shape])
        ax.set_xlabel("n")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("seconds (trace + compile + one run)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def summary(res: dict[str, Any]) -> list[str]:
    lines = ["## Compile time against size", "",
             "| program | n | graph nodes | Turnout fast first run (s) | JAX first call (s) | ratio | agree |",
             "|---|---|---|---|---|---|---|"]
    for r in res["rows"] + res.get("deep", []):
        lines.append(f"| {r['shape']} | {r['n']} | {r['nodes']} | {r['fast_s']:.3f} | {r['jax_s']:.3f} | "
                     f"{r['ratio']:.2f} | {r['agree']} |")
    return lines + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="sizes 2, 8 and 32 only (gradients: 1, 3 and 5)")
    ap.add_argument("--plot", metavar="PNG", help="also draw the plot (needs matplotlib: pip install -e '.[plots]')")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="which programs, comma-separated (default: all)")
    ap.add_argument("--repeat", type=int, default=3, help="tries per size and side; the best is kept (default 3)")
    args = ap.parse_args(argv)
    shapes = tuple(s for s in args.shapes.split(",") if s)
    if not shapes or any(s not in SHAPES for s in shapes):
        ap.error(f"--shapes takes some of {', '.join(SHAPES)}")
    import jax

    with jax.enable_x64(True):
        res = run(args.quick, shapes, args.repeat)
    os.makedirs(os.path.join(ROOT, "benchmarks", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "benchmarks", "results", "compile_time.json"), "w") as f:
        json.dump(res, f, indent=2)
    print("\n".join(summary(res)))
    if args.plot:
        plot(res, args.plot)
        print(f"plot written to {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
