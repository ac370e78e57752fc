"""Parallel iterations across devices (the paper, Sec. 6): a 4-stage pipelined loop, and the cost of
a loop inside one partition.

1. **Overlap.** A loop whose iteration i sends ``x + i`` through four stages, stage k on device k,
   each stage waiting ``--sleep`` seconds (``tn.sleep``: a stand-in for I/O, so the figure does not
   depend on how many CPU cores are free). With ``parallel_iterations = 1`` the host driver waits for
   iteration i before it starts iteration i+1, so the run takes about ``4 N`` stage times; with
   ``parallel_iterations = P > 1`` device 0 starts iteration i+1 while device 1 still runs iteration i,
   and the run approaches ``N + 3`` stage times. Overlap factor = serial time / pipelined time
   (ideal ``4N / (N + 3)``), timed side by side (interleaved) in one run; target >= 2x.
2. **A loop inside one partition.** A trivial-body loop (``i += 1; x = x * 0.999 + 1``, a run-time N)
   placed on cpu:1, between ops on cpu:0, on the fast partitioned executor, against the same graph
   on the unpartitioned fast backend: both are one ``lax.while_loop``, so the per-iteration ratio
   should be about 1 (target <= 1.1x).
3. **A loop spanning two devices**, host-driven: the same trivial body with its multiply on cpu:1,
   per-iteration cost in microseconds (what the host driver costs per iteration on this machine).

``python benchmarks/paper/pipeline_overlap.py [--quick] [--docs]`` writes
``benchmarks/results/paper/pipeline_overlap.json`` and ``.png`` (and, with ``--docs``, the docs' copy
of the plot). The plot: the times against P with the ideal pipeline, and the per-device timeline of a
traced run with P = 4.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.paper.common import force_host_devices, pyplot, save_plot, write_results  # noqa: E402

NAME = "pipeline_overlap"
STAGES = 4


def pipeline(n: int, seconds: float, parallel_iterations: int) -> tuple[Any, Any, Any]:
    """The 4-stage pipelined loop: (graph, x, sum of the last stage's outputs)."""
    import turnout as tn

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def body(i: Any, acc: Any) -> tuple[Any, Any]:
            with tn.device("cpu:0"):
                h = tn.cast(i, tn.float32) + x
                i2 = i + 1
            for k in range(STAGES):
                with tn.device(f"cpu:{k}"):
                    h = tn.sleep(h * 0.5 + 1.0, seconds, name=f"stage{k}")
            with tn.device(f"cpu:{STAGES - 1}"):
                acc2 = acc + h
            return i2, acc2

        with tn.device("cpu:0"):
            i0 = tn.constant(0)
        with tn.device(f"cpu:{STAGES - 1}"):
            a0 = tn.constant(0.0)
        _, acc = tn.while_loop(lambda i, a: i < n, body, [i0, a0], parallel_iterations=parallel_iterations,
                               name="pipeline")
    return g, x, acc


def trivial_loop(spanning: bool) -> tuple[Any, Any, Any]:
    """``i += 1; x = x * 0.999 + 1`` for a fed N: on cpu:1 between ops on cpu:0 (one partition), or
    with its multiply on cpu:1 and its counter on cpu:0 (spanning two devices)."""
    import turnout as tn

    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        with tn.device("cpu:0"):
            x0 = tn.constant(0.0) + 1.0

        def body(i: Any, x: Any) -> tuple[Any, Any]:
            if spanning:
                with tn.device("cpu:1"):
                    y = x * 0.999 + 1.0
                return i + 1, y
            return i + 1, x * 0.999 + 1.0

        if spanning:
            with tn.device("cpu:0"):
                _, x = tn.while_loop(lambda i, x: i < n, body, [tn.constant(0), x0])
        else:
            with tn.device("cpu:1"):
                _, x = tn.while_loop(lambda i, x: i < n, body, [tn.constant(0), x0])
        with tn.device("cpu:0"):
            out = x - 1.0
    return g, n, out


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    """Run the three measurements, write the JSON and the plot, return the results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations and repeats")
    ap.add_argument("--docs", action="store_true", help="also write docs/_static/paper/pipeline_overlap.png")
    ap.add_argument("--sleep", type=float, default=0.01, help="seconds each stage waits (default 0.01)")
    args = ap.parse_args(argv)
    force_host_devices(8)

    import numpy as np

    import turnout as tn
    from benchmarks.common import timed, timed_pair
    from turnout.fast.timeline import TRACKS

    devices = [f"cpu:{k}" for k in range(STAGES)]
    n = 12 if args.quick else 32
    repeat = 2 if args.quick else 5
    ps = [1, 2, 4, 8]

    # 1. overlap: every P timed in turn, round after round (interleaved, so load changes hit all alike)
    sessions = {}
    want = None
    for p in ps:
        g, x, acc = pipeline(n, args.sleep, p)
        s = tn.Session(g, backend="fast", devices=devices)
        got = float(s.run(acc, {x: 1.0}))  # compiles
        ref = float(tn.Session(g).run(acc, {x: 1.0}))
        assert got == ref, (got, ref)
        want = got if want is None else want
        assert got == want
        sessions[p] = (s, x, acc)
    import time

    times: dict[int, list[float]] = {p: [] for p in ps}
    for _ in range(repeat):
        for p in ps:
            s, x, acc = sessions[p]
            t0 = time.perf_counter()
            s.run(acc, {x: 1.0})
            times[p].append(time.perf_counter() - t0)
    med = {p: float(np.median(t)) for p, t in times.items()}
    overlap = {p: med[1] / med[p] for p in ps}
    ideal = STAGES * n / (n + STAGES - 1)
    s4, x4, acc4 = sessions[4]
    s4.run(acc4, {x4: 1.0}, trace=True)
    tl = s4.last_result.trace
    spans = [{"device": sp.track, "iteration": sp.args.get("iteration"), "start_s": sp.start_s,
              "dur_s": sp.dur_s} for sp in tl.spans if sp.track not in TRACKS]
    for s, _, _ in sessions.values():
        s.close()

    # 2. a loop inside one partition vs the unpartitioned fast backend, side by side. Per iteration is
    # the slope between a short and a long trip count, so the per-run costs (the partitioned run's
    # extra segments and transfers) do not count as per-iteration ones; they are reported apart.
    short, big = 10, (2_000_000 if args.quick else 10_000_000)
    g, nn, out = trivial_loop(spanning=False)
    part = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"])
    whole = tn.Session(g, backend="fast")
    unbounded = tn.RunOptions(max_iterations=None)  # 10 million iterations: past the default guard
    a_big, b_big = timed_pair(lambda: part.run(out, {nn: big}, options=unbounded),
                              lambda: whole.run(out, {nn: big}, options=unbounded), repeat + 2)
    a_small, b_small = timed_pair(lambda: part.run(out, {nn: short}), lambda: whole.run(out, {nn: short}),
                                  repeat + 2)
    assert part.last_result.stats["tier"] == "compiled" and part.last_result.stats["compiled_loops"] == 1
    assert float(part.run(out, {nn: big}, options=unbounded)) == float(whole.run(out, {nn: big}, options=unbounded))
    per_a = (a_big["median_s"] - a_small["median_s"]) / (big - short)
    per_b = (b_big["median_s"] - b_small["median_s"]) / (big - short)
    one_partition = {"N": big, "N_short": short, "partitioned": a_big, "unpartitioned": b_big,
                     "partitioned_short": a_small, "unpartitioned_short": b_small,
                     "ns_per_iter_partitioned": 1e9 * per_a, "ns_per_iter_unpartitioned": 1e9 * per_b,
                     "per_run_us_partitioned": 1e6 * a_small["median_s"],
                     "per_run_us_unpartitioned": 1e6 * b_small["median_s"],
                     "ratio": per_a / per_b}

    # 3. a host-driven loop spanning two devices: microseconds per iteration
    small = 200 if args.quick else 1000
    g, nn, out = trivial_loop(spanning=True)
    span = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"])
    r = timed(lambda: span.run(out, {nn: small}), repeat)
    assert span.last_result.stats["tier"] == "host-driven"
    spanning = {"N": small, "timing": r, "us_per_iter": 1e6 * r["median_s"] / small}

    results = {
        "name": NAME, "quick": args.quick, "stages": STAGES, "iterations": n, "stage_sleep_s": args.sleep,
        "seconds_by_parallel_iterations": {str(p): med[p] for p in ps},
        "all_seconds": {str(p): times[p] for p in ps},
        "overlap_factor": {str(p): overlap[p] for p in ps}, "ideal_overlap": ideal,
        "serial_bound_s": STAGES * n * args.sleep, "pipelined_bound_s": (n + STAGES - 1) * args.sleep,
        "trace_spans_p4": spans,
        "one_partition_loop": one_partition, "spanning_loop": spanning,
    }
    path = write_results(NAME, results)
    _plot(results, args.docs)
    print("overlap (serial / pipelined): " + ", ".join(f"P={p}: {overlap[p]:.2f}x" for p in ps)
          + f" (ideal {ideal:.2f}x); loop inside one partition: {one_partition['ratio']:.3f}x the "
          f"unpartitioned fast backend per iteration (per run: {one_partition['per_run_us_partitioned']:.0f} vs "
          f"{one_partition['per_run_us_unpartitioned']:.0f} us); spanning loop: "
          f"{spanning['us_per_iter']:.0f} us/iteration -> {path}")
    return results


def _plot(r: dict[str, Any], docs: bool) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1, 1.6]})
    ps = [int(p) for p in r["seconds_by_parallel_iterations"]]
    secs = [r["seconds_by_parallel_iterations"][str(p)] for p in ps]
    ax1.bar([str(p) for p in ps], secs, color="#4c72b0", label="measured")
    ax1.axhline(r["serial_bound_s"], color="gray", ls="--", lw=1, label="serial: 4N stage times")
    ax1.axhline(r["pipelined_bound_s"], color="green", ls="--", lw=1, label="pipelined: N+3 stage times")
    for i, p in enumerate(ps):
        ax1.text(i, secs[i], f"{r['overlap_factor'][str(p)]:.2f}x", ha="center", va="bottom", fontsize=9)
    ax1.set_xlabel("parallel_iterations")
    ax1.set_ylabel("seconds per run")
    ax1.set_title(f"{r['stages']} stages x {r['iterations']} iterations, {1e3 * r['stage_sleep_s']:.0f} ms each")
    ax1.legend(fontsize=8)
    devs = sorted({s["device"] for s in r["trace_spans_p4"]})
    cmap = plt.get_cmap("tab10")
    for s in r["trace_spans_p4"]:
        if s["dur_s"] <= 0:
            continue
        y = devs.index(s["device"])
        it = s["iteration"] or 0
        ax2.barh(y, 1e3 * s["dur_s"], left=1e3 * s["start_s"], color=cmap(it % 10), edgecolor="black", lw=0.3)
    ax2.set_yticks(range(len(devs)))
    ax2.set_yticklabels([d.rsplit("device:", 1)[-1].lower() for d in devs])
    ax2.invert_yaxis()
    ax2.set_xlabel("ms since the run started (colour: iteration)")
    ax2.set_title("traced run, parallel_iterations=4: device k runs iteration i while k-1 runs i+1")
    fig.tight_layout()
    save_plot(fig, NAME, docs=docs)


if __name__ == "__main__":
    main()
