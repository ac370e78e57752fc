"""Run every benchmark, write ``benchmarks/results/latest.json`` and a Markdown summary.

The results folder is untracked (a ``--quick`` smoke run must not overwrite recorded numbers);
the numbers the docs cite are a run copied by hand to ``benchmarks/recorded/``. ``--out`` picks
another folder.

Usage: ``python benchmarks/run.py [--quick] [--only NAME ...]``. All benchmarks run in this one
process, one after the other, so every ratio compares runs on the same machine under the same load.
Optional peers (TensorFlow, PyTorch) are not required and are not measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import apps, compile_time, cond_in_loop, first_run, loop_trivial, lstm, run_overhead  # noqa: E402
from benchmarks.common import machine  # noqa: E402

BENCHMARKS = {"run_overhead": run_overhead, "loop_trivial": loop_trivial, "cond_in_loop": cond_in_loop,
              "lstm": lstm, "apps": apps, "compile_time": compile_time, "first_run": first_run}
RESULTS = os.path.join(ROOT, "benchmarks", "results")


def _ms(s: float) -> str:
    return f"{1e3 * s:.2f}"


def summary(res: dict[str, Any]) -> str:
    lines = [f"# Turnout benchmarks ({'quick' if res['quick'] else 'full'})", "",
             f"Machine: {res['machine']['cpu_count']} CPUs, devices {res['machine']['devices']}, "
             f"jax {res['machine']['jax']}, {res['machine']['platform']}", ""]
    b = res["benchmarks"]
    if "run_overhead" in b:
        lines += ["## Fixed cost of one Session.run (best block of calls)", "",
                  run_overhead.table(b["run_overhead"]), ""]
    if "loop_trivial" in b:
        r = b["loop_trivial"]
        lines += ["## Trivial-body loop", "",
                  "| N | Turnout fast (ms) | jax.jit(lax.while_loop) (ms) | ratio | first call fast / jax (ms) |",
                  "|---|---|---|---|---|",
                  f"| {r['N']} | {_ms(r['fast']['median_s'])} | {_ms(r['jax_while_loop']['median_s'])} | "
                  f"{r['fast_over_jax']:.2f} | {_ms(r['fast']['first_s'])} / {_ms(r['jax_while_loop']['first_s'])} |",
                  ""]
    if "cond_in_loop" in b:
        r = b["cond_in_loop"]
        lines += ["## Cond inside a loop", "",
                  "| N | Turnout fast (ms) | lax.cond in lax.while_loop (ms) | ratio |", "|---|---|---|---|",
                  f"| {r['N']} | {1e3 * r['fast']['median_s']:.3f} | {1e3 * r['jax_cond_in_while']['median_s']:.3f} | "
                  f"{r['fast_over_jax']:.2f} |", "",
                  f"Against the same hand-written loop called with a numpy scalar (no `jnp.int32(N)` dispatch "
                  f"per call): {1e6 * r['fast_again']['median_s']:.1f} us vs "
                  f"{1e6 * r['jax_numpy_arg']['median_s']:.1f} us, ratio {r['fast_over_jax_numpy_arg']:.2f}.", ""]
    if "lstm" in b:
        r = b["lstm"]
        lines += [f"## LSTM training step (batch {r['batch']}, input {r['input']}, hidden {r['hidden']}, "
                  f"stack_chunk {r['stack_chunk']})", "",
                  "| T | Turnout fast (ms) | first call (ms) | jax value_and_grad(scan) (ms) | first call (ms) | ratio "
                  "| device stack MB | peak RSS growth per step (MB) | chunks swapped | agree |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for row in r["rows"]:
            lines.append(f"| {row['T']} | {_ms(row['fast']['median_s'])} | {_ms(row['fast']['first_s'])} | "
                         f"{_ms(row['jax_scan']['median_s'])} | {_ms(row['jax_scan']['first_s'])} | "
                         f"{row['fast_over_jax']:.2f} | {row['peak_device_stack_bytes'] / 2**20:.0f} | "
                         f"{row['max_rss_growth_bytes_per_step'] / 2**20:.0f} | "
                         f"{row['stack_chunks_swapped']} | {row['agree']} |")
        sw = r["swapping"]
        lines += ["", f"Recompilations across lengths: Turnout fast {r['fast_recompiles_after_first_length']} "
                      f"(after the first length), JAX scan {r['jax_traces']} traces for "
                      f"{len(r['lengths'])} lengths.", "",
                  f"With stack_chunk {sw['stack_chunk']} at T={sw['T']}: {_ms(sw['fast']['median_s'])} ms "
                  f"(ratio {sw['fast_over_jax']:.2f} to the JAX row above), {sw['stack_chunks_swapped']} chunks "
                  f"swapped, device stacks {sw['peak_device_stack_bytes'] / 2**20:.0f} MB, host stacks "
                  f"{sw['peak_host_stack_bytes'] / 2**20:.0f} MB, agree {sw['agree']}.", ""]
    if "apps" in b:
        d, r = b["apps"]["dqn"], b["apps"]["decode"]
        lines += ["## DQN on CartPole: in-graph loop vs Python-driven (fast backend)", "",
                  "| steps per run | in-graph steps/s | Python-driven steps/s | speedup | agree |",
                  "|---|---|---|---|---|",
                  f"| {d['steps_per_run']} | {d['in_graph_steps_per_s']:.0f} | {d['python_steps_per_s']:.0f} | "
                  f"{d['speedup']:.1f} | {d['agree']} |", "",
                  f"## Greedy decoding (batch {r['batch']}, hidden {r['hidden']}, max_len {r['max_len']}, "
                  f"{r['decode_steps']} decode steps)", "",
                  "| Turnout fast (ms) | jax.jit(lax.while_loop) (ms) | ratio | Python-driven (ms) | "
                  "Python-driven / fast | agree |", "|---|---|---|---|---|---|",
                  f"| {_ms(r['fast']['median_s'])} | {_ms(r['jax_while_loop']['median_s'])} | "
                  f"{r['fast_over_jax']:.2f} | {_ms(r['python_driven']['median_s'])} | "
                  f"{r['python_over_fast']:.1f} | {r['agree']} |", ""]
    if "compile_time" in b:
        lines += compile_time.summary(b["compile_time"])
    if "first_run" in b:
        lines += ["## First run of a new program, each in a fresh process (medians)", "",
                  first_run.table(b["first_run"]), ""]
    refs = [(k, v["reference"]) for k, v in b.items() if "reference" in v]
    if refs:
        lines += ["## Reference interpreter", "", "| program | N | firings | firings/s |", "|---|---|---|---|"]
        for k, v in refs:
            fps = f"{v['firings_per_s']:.0f}" if v.get("firings_per_s") else "n/a"
            lines.append(f"| {k} | {v['N']} | {v['firings']} | {fps} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--only", nargs="*", choices=sorted(BENCHMARKS), help="run only these")
    ap.add_argument("--out", default=RESULTS,
                    help="folder for latest.json / latest.md (default: %(default)s, untracked)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    import jax

    res: dict[str, Any] = {"quick": args.quick, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "machine": machine(), "benchmarks": {}}
    names = args.only or list(BENCHMARKS)
    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=len(names), unit="benchmark", desc="benchmarks")
    with jax.enable_x64(True):
        for name in names:
            if bar is not None:
                bar.set_postfix_str(name)
            else:
                print(f"running {name} ...", flush=True)
            t0 = time.perf_counter()
            res["benchmarks"][name] = BENCHMARKS[name].run(args.quick)
            res["benchmarks"][name]["wall_s"] = time.perf_counter() - t0
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "latest.json"), "w") as f:
        json.dump(res, f, indent=2)
    text = summary(res)
    with open(os.path.join(args.out, "latest.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
