"""The paper's memory experiment: an LSTM training step against sequence length, swapping on and off.

An LSTM ``while_loop`` and its gradient (``benchmarks/lstm.py``'s model) run for ``T`` steps. Every
step pushes the values its gradient needs on stacks, so a step of length ``T`` saves ``T`` times the
per-iteration bytes until the backward loop pops them. Two graphs of the same model differ only in the
loop's ``swap_memory``; both run on the fast backend with one stack chunk size and one device memory
cap (``device_memory_limit``), chosen so that the stacks of the lengths up to one chunk fit on the
device and those of the longest lengths do not. Both sides run each length as one compiled call. The
unswapped loop keeps its stacks on the device: up to one chunk in the call, past it on the staged
path, chunk by chunk, until the cap stops it with ``ResourceExhaustedError`` naming the loop. The
swapped loop keeps its stacks in host memory inside the call (each push a copy there, each pop one
back), so it holds no stack on the device at any length.

Measured, per length and side by side (timed calls interleaved, so both see the same machine load):
the time per loop iteration (step time / ``T``), the peak device stack bytes, the host stack bytes
and the chunks moved, from ``tn.memory_report(session)``. Run: ``python benchmarks/paper/memory.py
[--quick] [--docs]``; results go to ``benchmarks/results/paper/memory.json`` and ``memory.png``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from benchmarks.paper.common import force_host_devices, pyplot, save_plot, write_results

NAME = "memory"


def _config(quick: bool) -> dict[str, Any]:
    if quick:
        return {"batch": 8, "inp": 16, "hidden": 16, "lengths": [50, 100, 200, 400], "chunk": 128,
                "fits_steps": 150, "repeat": 3}
    # the default chunk of 1024 steps, and a cap that holds 1200 steps of stacks: the unswapped loop
    # runs up to T = 1000 in one call, and from 2000 needs two chunks, over the cap
    return {"batch": 16, "inp": 32, "hidden": 64, "lengths": [100, 200, 500, 1000, 2000, 4000], "chunk": 1024,
            "fits_steps": 1200, "repeat": 9}


def _timed_step(sess: Any, fetch: list[Any], feed: dict[Any, Any]) -> float:
    t0 = time.perf_counter()
    sess.run(fetch, feed)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small model and lengths: a smoke run")
    ap.add_argument("--docs", action="store_true", help="also write docs/_static/paper/memory.png")
    ap.add_argument("--repeat", type=int, default=None, help="timed steps per side and length (default 9, 3 quick)")
    ap.add_argument("--batch", type=int, default=None, help="the model's batch (default 16, 8 quick)")
    ap.add_argument("--hidden", type=int, default=None, help="the model's hidden size (default 64, 16 quick)")
    args = ap.parse_args(argv)
    if "jax" not in sys.modules:  # run alone: the conventions of every paper experiment
        force_host_devices(8)

    import jax
    import numpy as np

    import turnout as tn
    from benchmarks.lstm import build
    from turnout.errors import ResourceExhaustedError

    cfg = _config(args.quick)
    if args.repeat is not None:
        cfg["repeat"] = max(1, args.repeat)
    cfg.update({k: max(1, v) for k, v in (("batch", args.batch), ("hidden", args.hidden)) if v is not None})
    lengths, chunk = cfg["lengths"], cfg["chunk"]
    t_max = max(lengths)
    models = {swap: build(cfg["batch"], cfg["inp"], cfg["hidden"], t_max, swap_memory=swap) for swap in (False, True)}
    static = tn.memory_report(models[False]["graph"]).loop("lstm")
    per_iter = static.bytes_per_iteration
    assert per_iter is not None
    per_iter_with_index = per_iter + 4 * len(static.stacked)  # each entry also holds its int32 iteration index
    one_chunk = chunk * per_iter_with_index  # one chunk of every stack of the loop
    limit = cfg["fits_steps"] * per_iter_with_index
    sessions = {swap: tn.Session(m["graph"], backend="fast", stack_chunk=chunk, device_memory_limit=limit)
                for swap, m in models.items()}
    xs = jax.device_put(np.random.default_rng(1).normal(size=(t_max, cfg["batch"], cfg["inp"])).astype(np.float32))

    rows = []
    for T in lengths:
        print(f"  memory T={T}", flush=True)
        row: dict[str, Any] = {"T": T}
        live = {}
        for swap, m in models.items():
            fetch, feed = [m["loss"], *m["grads"]], {m["xs"]: xs, m["T"]: T}
            side = "swap" if swap else "no_swap"
            try:
                t0 = time.perf_counter()
                got = sessions[swap].run(fetch, feed)
                row[side] = {"first_s": time.perf_counter() - t0, "values": got}
                live[swap] = (fetch, feed)
            except ResourceExhaustedError as e:
                row[side] = {"error": "ResourceExhaustedError", "message": str(e)}
        times: dict[bool, list[float]] = {s: [] for s in live}
        for _ in range(cfg["repeat"]):
            for swap, (fetch, feed) in live.items():
                times[swap].append(_timed_step(sessions[swap], fetch, feed))
        for swap in live:
            side = "swap" if swap else "no_swap"
            (rec,) = tn.memory_report(sessions[swap]).loop("lstm")
            med = statistics.median(times[swap])
            row[side].update({
                "median_s": med, "min_s": min(times[swap]), "us_per_iteration": med / T * 1e6,
                "peak_device_bytes": rec.peak_device_bytes, "device_bytes": rec.device_bytes,
                "host_bytes": rec.host_bytes, "chunks_to_host": rec.chunks_to_host,
                "chunks_from_host": rec.chunks_from_host, "chunks_kept_on_device": rec.chunks_kept_on_device,
                "peak_device_over_one_chunk": rec.peak_device_bytes / one_chunk,
            })
        for swap, (fetch, feed) in live.items():
            # one traced step: the driver's time in the chunk hand-overs (copies queued, buffers
            # allocated or reused, prefetches), which is what swapping adds to the critical path
            sessions[swap].run(fetch, feed, trace=True)
            tl = sessions[swap].last_result.trace
            hand = [sp.dur_s for sp in tl.spans if sp.track == "host swaps"]
            row["swap" if swap else "no_swap"]["handover_s_per_step"] = sum(hand)
            row["swap" if swap else "no_swap"]["handovers"] = len(hand)
        if len(live) == 2:
            a, b = row["no_swap"].pop("values"), row["swap"].pop("values")
            row["agree"] = bool(all(np.allclose(x, y, rtol=1e-5, atol=1e-7) for x, y in zip(a, b, strict=True)))
            row["swap_over_no_swap"] = row["swap"]["median_s"] / row["no_swap"]["median_s"]
            # each swapped step over the unswapped step timed just before it: the two saw the same load,
            # so the median of these ratios is less moved by a load that drifts during the run
            row["paired_swap_over_no_swap"] = statistics.median(
                b / a for a, b in zip(times[False], times[True], strict=True))
        for side in ("swap", "no_swap"):
            row[side].pop("values", None)
        rows.append(row)

    fits = [r for r in rows if "swap_over_no_swap" in r]
    swapped = [r["swap"]["us_per_iteration"] for r in rows if "us_per_iteration" in r["swap"]]
    summary = {
        "limit_bytes": limit, "one_chunk_bytes": one_chunk, "bytes_per_iteration": per_iter_with_index,
        "stack_chunk": chunk,
        "max_swap_over_no_swap": max((r["swap_over_no_swap"] for r in fits), default=None),
        "median_swap_over_no_swap": statistics.median([r["swap_over_no_swap"] for r in fits]) if fits else None,
        "max_paired_swap_over_no_swap": max((r["paired_swap_over_no_swap"] for r in fits), default=None),
        "unswapped_fails_at": [r["T"] for r in rows if "error" in r["no_swap"]],
        "swapped_fails_at": [r["T"] for r in rows if "error" in r["swap"]],
        "swap_us_per_iteration_max_over_min": max(swapped) / min(swapped) if swapped else None,
        "max_peak_device_over_one_chunk": max(
            (r["swap"]["peak_device_over_one_chunk"] for r in rows if "peak_device_bytes" in r["swap"]), default=None),
        "all_agree": all(r.get("agree", True) for r in rows),
    }
    out = {"name": NAME, "quick": args.quick, "config": cfg, "summary": summary, "rows": rows}
    out["path"] = write_results(NAME, out)
    _plot(rows, summary, args.docs)
    print(_table(rows, summary))
    return out


def _table(rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    cap, chunk = summary["limit_bytes"] / 2**20, summary["one_chunk_bytes"] / 2**20
    lines = [f"cap {cap:.2f} MiB, one chunk per stack {chunk:.2f} MiB",
             "T | no swap us/iter | swap us/iter | swap/no swap (medians; paired) | peak device MiB (no swap, swap) | "
             "swap host MiB | chunks to host (no swap, swap)"]
    for r in rows:
        ns = r["no_swap"]
        sw = r["swap"]
        lines.append(" | ".join([
            str(r["T"]),
            f"{ns['us_per_iteration']:.1f}" if "us_per_iteration" in ns else "out of memory",
            f"{sw['us_per_iteration']:.1f}" if "us_per_iteration" in sw else "out of memory",
            f"{r['swap_over_no_swap']:.3f}; {r['paired_swap_over_no_swap']:.3f}" if "swap_over_no_swap" in r else "-",
            ", ".join(f"{d['peak_device_bytes'] / 2**20:.2f}" if "peak_device_bytes" in d else "-" for d in (ns, sw)),
            f"{sw['host_bytes'] / 2**20:.2f}" if "host_bytes" in sw else "-",
            ", ".join(str(d.get("chunks_to_host", "-")) for d in (ns, sw))]))
    return "\n".join(lines)


def _plot(rows: list[dict[str, Any]], summary: dict[str, Any], docs: bool) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for side, label, mark in (("no_swap", "swap_memory=False", "o-"), ("swap", "swap_memory=True", "s-")):
        ts = [r["T"] for r in rows if "us_per_iteration" in r[side]]
        ax1.plot(ts, [r[side]["us_per_iteration"] for r in rows if "us_per_iteration" in r[side]], mark, label=label)
        ax2.plot(ts, [r[side]["peak_device_bytes"] / 2**20 for r in rows if "us_per_iteration" in r[side]], mark,
                 label=label)
        failed = [r["T"] for r in rows if "error" in r[side]]
        if failed:
            top = max(r[s]["us_per_iteration"] for r in rows for s in ("swap", "no_swap") if "us_per_iteration" in r[s])
            ax1.plot(failed, [top] * len(failed), "rx", markersize=10,
                     label=f"{label}: ResourceExhaustedError" if side == "no_swap" else None)
    ax2.axhline(summary["limit_bytes"] / 2**20, color="r", ls="--", label="device_memory_limit")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("sequence length T")
        ax.legend(fontsize=8)
    ax1.set_ylabel("time per loop iteration (us)")
    ax1.set_ylim(bottom=0)
    ax2.set_ylabel("peak device stack memory (MiB)")
    ax1.set_title("LSTM training step")
    ax2.set_title("gradient stacks on the device")
    fig.tight_layout()
    for p in save_plot(fig, NAME, docs=docs):
        print(f"  wrote {p}")


if __name__ == "__main__":
    main()
