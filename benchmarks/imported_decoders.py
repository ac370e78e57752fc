"""TensorFlow-made programs of data-dependent shapes on the fast backend beside the interpreter.

The imported fixtures of ``tests/data/tf`` (written by ``tools/tf_fixtures.py``; TensorFlow is not
needed here) whose shapes only a run decides: the ``raw_rnn`` and ``while_loop`` greedy decoders
(TensorArrays of dynamic size, their stacks cut at), a loop variable that grows under
``shape_invariants`` and the gradient of a gather in a loop (loops unrolled while tracing). Each runs
its first recorded feeds on the fast backend (compiled: ``fallback=False``) and on the reference
interpreter, interleaved; the values must agree.

Usage: ``bash scripts/py.sh -m benchmarks.imported_decoders [--repeat N]``. Results go to
``benchmarks/results/imported_decoders.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

import numpy as np

import turnout as tn
from turnout.graphdef import import_graph_def

try:  # run as ``python -m benchmarks.imported_decoders`` or as a script
    from benchmarks.common import machine, timed_interleaved, write_report
except ImportError:  # pragma: no cover
    sys.path.insert(0, __file__.rsplit("/benchmarks/", 1)[0])
    from benchmarks.common import machine, timed_interleaved, write_report

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "tf"
CASES = ["greedy_decoder", "raw_rnn_decoder", "while_shape_invariants", "grad_gather_in_loop"]


def measure(case: str, repeat: int) -> dict[str, Any]:
    """The fast backend's and the interpreter's time per run of ``case``'s first recorded feeds."""
    meta = json.loads((DATA / f"{case}.json").read_text())
    imp = import_graph_def(DATA / f"{case}.pbtxt")
    run = meta["runs"][0]
    feeds = {imp.tensor(k): np.asarray(v) for k, v in run["feeds"].items()}
    fetches = [imp.tensor(f) for f in run["fetches"]]
    fast = tn.Session(imp.graph, backend="fast", fallback=False)
    ref = tn.Session(imp.graph)
    times = timed_interleaved({"fast": lambda: fast.run(fetches, feeds), "reference": lambda: ref.run(fetches, feeds)},
                              repeat)
    agree = all(np.allclose(a, b, rtol=2e-5, atol=1e-5) for a, b in zip(fast.run(fetches, feeds),
                                                                       ref.run(fetches, feeds), strict=True))
    stats = fast.last_result.stats if fast.last_result is not None else {}
    return {"case": case, **times, "agree": agree, "executor": stats.get("executor"),
            "cut_at": stats.get("cut_at", []), "specialized_on": stats.get("specialized_on", [])}


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    rows = [measure(c, args.repeat) for c in CASES]
    lines = [f"imported_decoders: median of {args.repeat} runs after the first, interleaved",
             "| case | fast ms | interpreter ms | interpreter / fast | fast first run ms | executor | agree |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        f, i = r["fast"], r["reference"]
        lines.append(f"| {r['case']} | {1e3 * f['median_s']:.2f} | {1e3 * i['median_s']:.2f} | "
                     f"{i['median_s'] / f['median_s']:.1f} | {1e3 * f['first_s']:.0f} | {r['executor']} | "
                     f"{r['agree']} |")
    write_report("imported_decoders", {"machine": machine(), "args": vars(args), "rows": rows}, lines)


if __name__ == "__main__":
    main()
