"""Make the pictures of docs/devices.rst: the paper's distributed while loop, placed and partitioned.

    python3 scripts/devices_figures.py        # writes docs/figures/devices_*.dot, *.png and devices_timeline.png

The DOT files (the placed graph, and the partitions with their control loops and Send/Recv pairs) are
written always, and rendered to PNG where Graphviz's ``dot`` is on the PATH (``apt-get install
graphviz``); the docs show the committed PNGs, so building the docs needs no Graphviz. The trace timeline PNG needs
matplotlib (``pip install -e ".[plots]"``): one row per device, one mark per firing at its position in
the run, coloured by loop iteration, so iterations overlapping across devices can be seen.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import turnout as tn
from turnout.devices import partition
from turnout.inspect import partitions_to_dot, to_dot

FIGURES = Path(__file__).resolve().parent.parent / "docs" / "figures"
DEVICES = ["cpu:0", "cpu:1"]


def distributed_loop() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """The loop of the docs page: the loop control on cpu:0, the body's work on cpu:1."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = tn.tanh(y) * 2.0
            return i + 1, y2

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < 4, body, [tn.constant(0), x], parallel_iterations=2,
                                 name="loop")
    return g, x, y


def main() -> int:
    FIGURES.mkdir(parents=True, exist_ok=True)
    g, x, y = distributed_loop()
    sess = tn.Session(g, devices=DEVICES)
    sess.run(y, {x: 0.5}, trace=True)
    res = sess.last_result
    assert res is not None and res.trace is not None
    parted = partition(g, sess.backend.placement, [y], {(x.node.id, 0)})
    (FIGURES / "devices_placed.dot").write_text(to_dot(g))
    (FIGURES / "devices_partitions.dot").write_text(partitions_to_dot(parted, res.trace))
    if shutil.which("dot"):
        for name in ("devices_placed", "devices_partitions"):
            subprocess.run(["dot", "-Tpng", "-Gdpi=60", str(FIGURES / f"{name}.dot"), "-o",
                            str(FIGURES / f"{name}.png")], check=True)
    else:
        print("Graphviz's dot is not on the PATH: the DOT files are not rendered to PNG")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: wrote the DOT files only (pip install -e '.[plots]')")
        return 0
    fig, ax = plt.subplots(figsize=(9, 2.4))
    rows = {d: k for k, d in enumerate(res.trace.tracks)}
    cmap = plt.get_cmap("viridis")
    for d, e in res.trace.events:
        if e.op == "Retire":
            continue
        it = e.tag[-1][1] if e.tag else -1
        color = "lightgrey" if it < 0 else cmap(it / 5)
        marker = "v" if e.op == "Recv" else "^" if e.op == "Send" else "|"
        ax.scatter(e.seq, rows[d], c=[color], marker=marker, s=40 if marker != "|" else 120,
                   edgecolors="none" if marker != "|" else None)
    ax.set_yticks(list(rows.values()), [d.rsplit("/", 1)[-1] for d in rows])
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("firing order (^ Send, v Recv, | other ops; colour = loop iteration, grey = root frame)")
    ax.set_title("Trace of the distributed while loop, one row per device")
    fig.tight_layout()
    fig.savefig(FIGURES / "devices_timeline.png", dpi=110)
    print(f"wrote {FIGURES}/devices_placed.dot, devices_partitions.dot, devices_timeline.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
