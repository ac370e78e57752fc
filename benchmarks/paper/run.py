"""Run the paper's experiments, one after the other, in one process.

Usage: ``python benchmarks/paper/run.py [--quick] [--docs] [--only NAME ...]``. Each experiment is a
module of this folder with a ``main(argv)`` that writes ``benchmarks/results/paper/<name>.json`` and a
plot ``<name>.png`` there (``--docs`` also refreshes the plot shown in ``docs/paper_experiments.rst``).
Host devices are forced before jax is imported (eight, enough for every experiment); on a machine with
GPUs the experiments that can use them say so in their results.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.paper.common import RESULTS, force_host_devices  # noqa: E402

#: the experiments, in the order the docs present them
EXPERIMENTS = ("distributed_loop", "pipeline_overlap", "model_parallel", "memory")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the chosen experiments; return (and write to ``summary.json``) each one's result and time."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: small sizes, few repeats")
    ap.add_argument("--docs", action="store_true", help="also write the plots shown in the docs")
    ap.add_argument("--only", nargs="*", choices=EXPERIMENTS, help="run only these experiments")
    args = ap.parse_args(argv)
    force_host_devices(8)
    out: dict[str, Any] = {}
    for name in args.only or EXPERIMENTS:
        mod = importlib.import_module(f"benchmarks.paper.{name}")
        sub = (["--quick"] if args.quick else []) + (["--docs"] if args.docs else [])
        t0 = time.perf_counter()
        print(f"== {name} ==", flush=True)
        out[name] = {"result": mod.main(sub), "seconds": time.perf_counter() - t0}
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "summary.json"), "w") as f:
        json.dump(out, f, indent=2, default=str)
    return out


if __name__ == "__main__":
    main()
