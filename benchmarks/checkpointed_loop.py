"""The gradient of a JAX loop of unknown length in a fixed memory budget: ``turnout.jax.while_loop``
beside the store-everything ``lax.scan`` gradient and Equinox's checkpointed ``while_loop``.

Why: ``turnout.jax.while_loop`` trades recomputation for memory (``turnout.checkpoint_schedule``); this
measures what the trade costs in time and what it saves in bytes, at trip counts from a few hundred to
a hundred thousand. Two bodies: ``ode``, an explicit Euler step of a small MLP vector field (state 16
floats, hidden 64), and ``lstm``, an LSTM cell (batch 16, hidden 64, a fixed input). Each gradient is
taken with respect to the initial state and the closed-over weights.

For each body and trip count ``n`` (all in one process, calls interleaved, median of ``--repeat``):

- ``turnout``: ``turnout.jax.while_loop`` with ``isqrt(2n)`` slots (Equinox's default count);
- ``turnout_16``: the same with 16 slots, a budget that does not grow with ``n``;
- ``equinox``: ``eqx.internal.while_loop(kind="checkpointed", checkpoints=isqrt(2n))``, when Equinox is
  importable (it is an optional extra of this benchmark, never a dependency: ``pip install equinox``);
- ``scan``: ``jax.grad`` through ``lax.scan`` of length ``n``, which stores every step's residuals; left
  out where XLA's memory analysis says its temporaries exceed ``--scan-limit-mib``.

Reported per method: ms per gradient, the ratio to ``scan``, the compiled program's temporary bytes
(``memory_analysis().temp_size_in_bytes``: the saved values and the work buffers of the gradient), the
schedule's checkpoint bytes and its reported extra forward passes. The gradients of every method are
checked to agree (relative error) with ``turnout``'s.

Usage: ``python -m benchmarks.checkpointed_loop [--quick]``; writes
``benchmarks/results/checkpointed_loop.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import turnout.jax as tnj
from turnout import checkpoint_schedule as cs

try:  # run as ``python -m benchmarks.checkpointed_loop`` or as a script
    from benchmarks.common import machine, timed_interleaved, write_report
except ImportError:  # pragma: no cover
    sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
    from benchmarks.common import machine, timed_interleaved, write_report

Step = Callable[[Any, Any], Any]


def ode_problem(key: jax.Array) -> tuple[Any, Any, Step]:
    """(initial state, weights, step): y + dt * mlp(y), an explicit Euler step of a neural ODE."""
    k1, k2, k3 = jax.random.split(key, 3)
    d, h = 16, 64
    params = {"w1": jax.random.normal(k1, (d, h)) / math.sqrt(d), "b1": jnp.zeros(h),
              "w2": jax.random.normal(k2, (h, d)) / math.sqrt(h), "b2": jnp.zeros(d)}

    def step(y: jax.Array, p: Any) -> jax.Array:
        return y + 0.01 * (jnp.tanh(y @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"] - 0.1 * y)

    return jax.random.normal(k3, (d,)), params, step


def lstm_problem(key: jax.Array) -> tuple[Any, Any, Step]:
    """(initial state, weights, step): one LSTM cell step on a fixed input, state (h, c)."""
    k1, k2, k3 = jax.random.split(key, 3)
    batch, hidden, inputs = 16, 64, 32
    params = {"w": jax.random.normal(k1, (inputs + hidden, 4 * hidden)) / math.sqrt(inputs + hidden),
              "b": jnp.zeros(4 * hidden), "x": jax.random.normal(k2, (batch, inputs))}

    def step(s: Any, p: Any) -> Any:
        h, c = s
        gates = jnp.concatenate([p["x"], h], axis=1) @ p["w"] + p["b"]
        i, f, g, o = jnp.split(gates, 4, axis=1)
        c = jax.nn.sigmoid(f + 1.0) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return jax.nn.sigmoid(o) * jnp.tanh(c), c

    h0 = 0.1 * jax.random.normal(k3, (batch, hidden))
    return (h0, jnp.zeros_like(h0)), params, step


PROBLEMS = {"ode": ode_problem, "lstm": lstm_problem}


def gradients(step: Step, n: int, slots: int) -> dict[str, Callable[[Any, Any], Any]]:
    """Jitted ``(x0, params) -> grads`` of ``sum(final state ** 2)`` for every method."""

    def loss(x: Any) -> jax.Array:
        return sum(jnp.sum(a**2) for a in jax.tree.leaves(x))

    def cond(c: Any) -> jax.Array:
        return c[1] < n

    def with_loop(loop: Callable[..., Any]) -> Callable[[Any, Any], Any]:
        def f(x0: Any, p: Any) -> jax.Array:
            return loss(loop(cond, lambda c: (step(c[0], p), c[1] + 1), (x0, jnp.int32(0)))[0])

        return jax.jit(jax.grad(f, argnums=(0, 1)))

    def scan(x0: Any, p: Any) -> jax.Array:
        return loss(lax.scan(lambda x, _: (step(x, p), None), x0, None, length=n)[0])

    out = {"turnout": with_loop(lambda *a: tnj.while_loop(*a, checkpoints=slots)),
           "turnout_16": with_loop(lambda *a: tnj.while_loop(*a, checkpoints=16)),
           "scan": jax.jit(jax.grad(scan, argnums=(0, 1)))}
    try:
        import equinox as eqx
    except ImportError:
        return out
    out["equinox"] = with_loop(lambda *a: eqx.internal.while_loop(*a, kind="checkpointed", checkpoints=slots))
    return out


def temp_bytes(fn: Any, *args: Any) -> int | None:
    """The compiled program's temporary bytes (XLA's memory analysis), or None where not reported."""
    analysis = fn.lower(*args).compile().memory_analysis()
    return None if analysis is None else int(analysis.temp_size_in_bytes)


def rel_err(a: Any, b: Any) -> float:
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    num = math.sqrt(sum(float(jnp.sum((x - y) ** 2)) for x, y in zip(la, lb, strict=True)))
    return num / max(math.sqrt(sum(float(jnp.sum(y**2)) for y in lb)), 1e-30)


def measure(name: str, n: int, repeat: int, scan_limit: int) -> dict[str, Any]:
    x0, params, step = PROBLEMS[name](jax.random.PRNGKey(0))
    slots = max(2, math.isqrt(2 * n))
    fns = gradients(step, n, slots)
    mem = {m: temp_bytes(f, x0, params) for m, f in fns.items()}
    skipped = {}
    if (mem["scan"] or 0) > scan_limit:
        skipped["scan"] = f"temporaries {mem['scan'] / 2**20:.0f} MiB exceed the limit"
        del fns["scan"]
    calls = {m: (lambda f=f: jax.block_until_ready(f(x0, params))) for m, f in fns.items()}
    times = timed_interleaved(calls, repeat)
    ref = fns["turnout"](x0, params)
    state = tnj.state_bytes((x0, jnp.int32(0))) + tnj.POSITION_BYTES
    row: dict[str, Any] = {"body": name, "n": n, "slots": slots, "skipped": skipped, "methods": {}}
    for m in fns:
        k = {"turnout": slots, "turnout_16": 16}.get(m)
        row["methods"][m] = {
            "ms": 1e3 * times[m]["median_s"], "first_s": times[m]["first_s"], "temp_bytes": mem[m],
            "checkpoint_bytes": None if k is None else k * state,
            "extra_passes": None if k is None else cs.cost(n, k).overhead,
            "rel_err_vs_turnout": rel_err(fns[m](x0, params), ref),
        }
    return row


def summary(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| body | n | method | ms/grad | x scan | temp MiB | checkpoint KiB | extra passes | rel. err |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        scan = r["methods"].get("scan", {}).get("ms")
        for m, v in r["methods"].items():
            ratio = f"{v['ms'] / scan:.2f}" if scan else "-"
            tmp = "-" if v["temp_bytes"] is None else f"{v['temp_bytes'] / 2**20:.1f}"
            ck = "-" if v["checkpoint_bytes"] is None else f"{v['checkpoint_bytes'] / 2**10:.1f}"
            extra = "-" if v["extra_passes"] is None else f"{v['extra_passes']:.2f}"
            name = f"{m} ({r['slots']})" if m in ("turnout", "equinox") else m
            lines.append(f"| {r['body']} | {r['n']} | {name} | {v['ms']:.2f} | {ratio} | {tmp} | {ck} | {extra} | "
                         f"{v['rel_err_vs_turnout']:.1e} |")
        for m, why in r["skipped"].items():
            lines.append(f"| {r['body']} | {r['n']} | {m} | skipped: {why} | | | | | |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="n = 300 and 1000 only, 3 repeats")
    ap.add_argument("--lengths", type=int, nargs="*", default=[300, 1000, 10_000, 100_000])
    ap.add_argument("--bodies", nargs="*", default=list(PROBLEMS), choices=list(PROBLEMS))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scan-limit-mib", type=int, default=2048,
                    help="leave out the store-everything scan where its temporaries exceed this")
    args = ap.parse_args(argv)
    lengths, repeat = ([300, 1000], 3) if args.quick else (args.lengths, args.repeat)
    try:
        import equinox
        eqx_version: str | None = equinox.__version__
    except ImportError:
        eqx_version = None
        print("equinox is not installed: its checkpointed while_loop is left out (pip install equinox)")
    rows = []
    for body in args.bodies:
        for n in lengths:
            rows.append(measure(body, n, max(1, repeat if n <= 10_000 else min(repeat, 3)),
                                args.scan_limit_mib * 2**20))
            print(f"done {body} n={n}", file=sys.stderr)
    lines = [f"checkpointed loop gradients (jax {jax.__version__}, equinox {eqx_version or 'absent'}, "
             f"{np.__name__} {np.__version__}, {jax.devices()[0].platform})", "", *summary(rows)]
    write_report("checkpointed_loop", {"machine": machine(), "equinox": eqx_version, "rows": rows}, lines)


if __name__ == "__main__":
    main()
