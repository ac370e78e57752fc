"""The paper's distributed while loop with a trivial body: iterations per second against devices.

The loop carries one scalar per device, ``x_k`` on device ``k``, and a counter on device 0; each
iteration sets ``x_k <- x_{k-1} + 1`` (a ring: every value crosses a device every iteration) and the
counter's device decides whether to go on. It runs for D = 1, 2, 4, 8 devices and
``parallel_iterations`` 1 and 32, on:

* Turnout: ``tn.Session(graph, backend="fast", devices=..., whole_program="always")``, the SPMD tier (one
  device: the unpartitioned fast backend), reporting the tier that ran;
* the anchor, the same loop written by hand in JAX: a ``shard_map`` ``while_loop`` whose devices pass
  ``x`` around the ring with ``lax.ppermute`` and share device 0's predicate with ``lax.psum``, timed
  interleaved with Turnout's run (``benchmarks.common.timed_pair``);
* for scale, the partitioned reference executor (one reference interpreter per device).

The target: Turnout's cross-device loop costs at most 1.2x the hand-written loop per iteration.
Usage: ``python benchmarks/paper/distributed_loop.py [--quick] [--docs]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.paper.common import force_host_devices, pyplot, save_plot, write_results  # noqa: E402

NAME = "distributed_loop"
DEVICE_COUNTS = (1, 2, 4, 8)
PARALLEL = (1, 32)


def build(ndev: int, parallel_iterations: int) -> tuple[Any, Any, list[Any]]:
    """The ring loop over ``ndev`` devices; returns (graph, the trip-count placeholder, the x fetches)."""
    import turnout as tn

    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        init = []
        for k in range(ndev):
            with tn.device(f"cpu:{k}"):
                init.append(tn.constant(float(k), name=f"x{k}_0"))

        def body(i: Any, *xs: Any) -> Any:
            new = []
            for k in range(ndev):
                with tn.device(f"cpu:{k}"):
                    new.append(xs[k - 1] + 1.0)
            return (i + 1, *new)

        # No device scope around the loop itself: its control nodes follow their data (placement's
        # defaults), so x_k's Merge and Switch sit on device k and only the ring edges cross devices.
        with tn.device("cpu:0"):
            i0 = tn.constant(0, name="i0")
        _, *xs = tn.while_loop(lambda i, *xs: i < n, body, [i0, *init], parallel_iterations=parallel_iterations)
    return g, n, xs


def expected(ndev: int, n: int) -> list[float]:
    return [float((k - n) % ndev + n) for k in range(ndev)]


def hand_written(ndev: int) -> Callable[[int], Any]:
    """The anchor: the same loop as one ``shard_map`` program written directly in JAX."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax, shard_map
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(jax.devices("cpu")[:ndev], dtype=object), ("d",))
    ring = [(k, (k + 1) % ndev) for k in range(ndev)]

    def loop(n: Any) -> Any:
        idx = lax.axis_index("d")
        x0 = idx.astype(jnp.float32)

        def share(p: Any) -> Any:  # device 0 decides; every device learns it
            return lax.psum(jnp.where(idx == 0, p.astype(jnp.int32), 0), "d") != 0

        def body(c: Any) -> Any:
            i, x, _ = c
            x = (lax.ppermute(x, "d", ring) if ndev > 1 else x) + 1.0
            return i + 1, x, share(i + 1 < n)

        _, x, _ = lax.while_loop(lambda c: c[2], body, (jnp.int32(0), x0, share(0 < n)))
        return x[None]

    fn = jax.jit(shard_map(loop, mesh=mesh, in_specs=P(), out_specs=P("d"), check_vma=False))
    return lambda n: np.asarray(fn(np.int32(n)))


def turnout_runner(ndev: int, pi: int) -> tuple[Callable[[int], list[Any]], str, Callable[[], Optional[str]]]:
    """(run(n) -> values, the route taken, the tier of the last run)."""
    import numpy as np

    import turnout as tn
    from turnout.devices import place
    from turnout.devices.spmd import spmd_choice
    from turnout.session import RunOptions

    g, n, xs = build(ndev, pi)
    devs = [f"cpu:{k}" for k in range(ndev)]
    try:
        # the SPMD tier at every parallel_iterations: the hand-written anchor is a shard_map loop too
        # (whole_program="auto" would drive a parallel_iterations=32 loop from the host instead)
        sess = tn.Session(g, backend="fast", devices=devs, whole_program="always")
    except tn.UnsupportedError:
        sess = None
    if sess is not None:
        def tier() -> Optional[str]:
            res = sess.last_result
            return res.stats.get("tier") if res is not None else None

        return (lambda v: sess.run(xs, {n: v})), "session", tier
    pl = place(g, devs)
    plan = spmd_choice(g, pl, xs, [n], only_spanning=False)
    if isinstance(plan, str):
        raise SystemExit(f"the SPMD tier declined the benchmark loop: {plan}")
    opts = RunOptions()
    return (lambda v: plan.run({n: np.int32(v)}, {}, opts).values), "spmd_choice", lambda: "spmd"


def partitioned_reference(ndev: int, pi: int, iters: int) -> dict[str, Any]:
    import turnout as tn

    g, n, xs = build(ndev, pi)
    sess = tn.Session(g, devices=[f"cpu:{k}" for k in range(ndev)])
    t0 = time.perf_counter()
    got = sess.run(xs, {n: iters})
    dt = time.perf_counter() - t0
    assert [float(v) for v in got] == expected(ndev, iters)
    return {"iterations": iters, "seconds": dt, "iterations_per_s": iters / dt}


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: few iterations, few repeats")
    ap.add_argument("--docs", action="store_true", help="also write the plot to docs/_static/paper/")
    args = ap.parse_args(argv)
    force_host_devices(max(DEVICE_COUNTS))
    from benchmarks.common import timed_pair

    iters = 1_000 if args.quick else 5_000
    repeat = 2 if args.quick else 5
    ref_iters = 10 if args.quick else 40
    rows = []
    for ndev in DEVICE_COUNTS:
        hand = hand_written(ndev)
        for pi in PARALLEL:
            run, route, tier = turnout_runner(ndev, pi)
            got = [float(v) for v in run(iters)]
            want = expected(ndev, iters)
            assert got == want and [float(v) for v in hand(iters)] == want, (got, want)
            t, h = timed_pair(lambda r=run: r(iters), lambda hw=hand: hw(iters), repeat)
            row = {
                "devices": ndev, "parallel_iterations": pi, "iterations": iters, "route": route, "tier": tier(),
                "turnout": t, "hand_shard_map": h,
                "turnout_us_per_iter": 1e6 * t["median_s"] / iters, "hand_us_per_iter": 1e6 * h["median_s"] / iters,
                "turnout_iter_per_s": iters / t["median_s"], "hand_iter_per_s": iters / h["median_s"],
                "ratio": t["median_s"] / h["median_s"],
                "partitioned_reference": partitioned_reference(ndev, pi, ref_iters),
            }
            rows.append(row)
            print(f"D={ndev} parallel_iterations={pi:2d}: turnout {row['turnout_us_per_iter']:.1f} us/iter "
                  f"({route}, tier {row['tier']}), hand shard_map {row['hand_us_per_iter']:.1f} us/iter, "
                  f"ratio {row['ratio']:.2f}; partitioned reference "
                  f"{row['partitioned_reference']['iterations_per_s']:.0f} iter/s", flush=True)
    res = {"name": NAME, "quick": args.quick, "rows": rows,
           "max_ratio": max(r["ratio"] for r in rows), "target_ratio": 1.2}
    res["results_path"] = write_results(NAME, res)
    res["plots"] = plot(rows, args.docs)
    return res


def plot(rows: list[dict[str, Any]], docs: bool) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    styles = {1: "-", 32: "--"}
    for pi in PARALLEL:
        sel = [r for r in rows if r["parallel_iterations"] == pi]
        ds = [r["devices"] for r in sel]
        ax.plot(ds, [r["turnout_iter_per_s"] for r in sel], "o" + styles[pi], color="C0",
                label=f"Turnout ({sel[-1]['tier']} tier), parallel_iterations={pi}")
        ax.plot(ds, [r["partitioned_reference"]["iterations_per_s"] for r in sel], "^" + styles[pi], color="C2",
                label=f"partitioned reference executor, parallel_iterations={pi}")
    sel = [r for r in rows if r["parallel_iterations"] == PARALLEL[0]]
    ax.plot([r["devices"] for r in sel], [r["hand_iter_per_s"] for r in sel], "s:", color="C1",
            label="hand-written shard_map loop (JAX)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(DEVICE_COUNTS), [str(d) for d in DEVICE_COUNTS])
    ax.set_xlabel("devices (forced host CPU devices)")
    ax.set_ylabel("iterations per second")
    ax.set_title("Distributed while loop, trivial body")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    paths = save_plot(fig, NAME, docs=docs)
    plt.close(fig)
    return paths


if __name__ == "__main__":
    main()
