"""An imported TF1 training step on Turnout's fast backend beside TensorFlow's own v1 ``Session``.

The model is the one TF1 users wrote (issue 38): ``tf.compat.v1.nn.dynamic_rnn`` over an
``LSTMCell`` with a fed ``sequence_length``, a squared-error loss, ``AdamOptimizer``, built by
TensorFlow in v1 graph mode with control flow v1. TensorFlow writes the GraphDef and runs it in a
``tf.compat.v1.Session`` on the CPU; Turnout imports the same GraphDef (``tn.import_graph_def``) and
runs it with ``backend="fast"``. One training step is one ``run`` of the loss with the Adam update as
a target, fed the same arrays on both sides.

Why two processes: TensorFlow and JAX need not share an environment (Turnout never depends on
TensorFlow). This script runs TensorFlow's side as a child process (``--tf-side``) that builds the
model, writes the GraphDef, and then times blocks of steps when asked on its standard input, so the
two sides' samples interleave (TF, Turnout, TF, ...) and both see the same load on a shared machine.
Both sides train from the same weights; the first three losses must agree.

Usage (from the repository root)::

    TURNOUT_TF_PYTHON=/path/to/python-with-tensorflow bash scripts/py.sh -m benchmarks.tf_session [--quick]

``TURNOUT_TF_PYTHON`` is a Python with ``tensorflow`` and ``tf_keras`` installed (``pip install
tensorflow tf_keras``; TF1's RNN cells live in ``tf_keras`` since TensorFlow 2.16); without it the
current Python is used if it has them, and otherwise the benchmark says so and exits 0 (skipped).
Results go to ``benchmarks/results/tf_session.{json,md}`` (with the run's ``XLA_FLAGS``, which JAX
reads when it starts).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
#: (batch, hidden) rows; the input depth is the hidden size, the sequence length T
SMALL = [(4, 8), (8, 16), (16, 32)]
LARGE = [(64, 256)]
T = 100


# ---- TensorFlow's side (runs in a Python with TensorFlow; imports neither Turnout nor JAX) -------------
def _weights(shape: tuple[int, ...], seed: int, scale: float = 0.3) -> np.ndarray:
    return (np.random.default_rng(seed).uniform(-1.0, 1.0, shape) * scale / np.sqrt(shape[0])).astype(np.float32)


def tf_side(batch: int, hidden: int, steps_t: int, out: Path) -> None:
    """Build the model, write ``model.pb``, ``feeds.npz`` and ``meta.json`` under ``out``, say "ready",
    then answer ``steps K`` with the seconds K training steps took and the last loss (``quit`` ends)."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.compat.v1.disable_v2_behavior()  # graph mode, control flow v1 (Enter/Exit/Merge/Switch)
    tf.compat.v1.enable_resource_variables()
    depth = hidden
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, None, depth], name="x")
        seq = tf.compat.v1.placeholder(tf.int32, [None], name="seq")
        y = tf.compat.v1.placeholder(tf.float32, [None, None, hidden], name="y")
        kernel = tf.compat.v1.constant_initializer(_weights((depth + hidden, 4 * hidden), 1))
        cell = tf.compat.v1.nn.rnn_cell.LSTMCell(hidden, initializer=kernel)
        outs, state = tf.compat.v1.nn.dynamic_rnn(cell, x, sequence_length=seq, dtype=tf.float32, scope="rnn")
        loss = tf.identity(tf.reduce_mean(tf.square(outs - y)) + 0.5 * tf.reduce_mean(state.c), name="loss")
        train = tf.compat.v1.train.AdamOptimizer(0.01).minimize(loss, name="train")
        init = tf.compat.v1.global_variables_initializer()
    rng = np.random.default_rng(2)
    feeds = {"x:0": rng.normal(size=(batch, steps_t, depth)).astype(np.float32),
             "seq:0": np.full(batch, steps_t, np.int32),
             "y:0": (rng.normal(size=(batch, steps_t, hidden)) * 0.5).astype(np.float32)}
    (out / "model.pb").write_bytes(g.as_graph_def().SerializeToString())
    np.savez(out / "feeds.npz", **{k.replace(":", "_"): v for k, v in feeds.items()})
    (out / "meta.json").write_text(json.dumps({"feeds": list(feeds), "loss": loss.name, "train": train.name,
                                               "init": init.name, "tensorflow": tf.__version__}))
    config = tf.compat.v1.ConfigProto()
    with tf.compat.v1.Session(graph=g, config=config) as sess:
        sess.run(init)
        fd = {g.get_tensor_by_name(k): v for k, v in feeds.items()}
        print("ready", flush=True)
        for line in sys.stdin:
            cmd = line.split()
            if not cmd or cmd[0] == "quit":
                break
            k = int(cmd[1])
            t0 = time.perf_counter()
            for _ in range(k):
                last, _ = sess.run([loss, train], fd)
            print(f"{time.perf_counter() - t0!r} {float(last)!r}", flush=True)


# ---- Turnout's side --------------------------------------------------------------------------------------
def tf_python() -> str | None:
    """The Python that runs TensorFlow's side: ``TURNOUT_TF_PYTHON``, else this one if it has
    TensorFlow and tf_keras, else None."""
    chosen = os.environ.get("TURNOUT_TF_PYTHON")
    if chosen:
        return chosen
    import importlib.util

    have = all(importlib.util.find_spec(m) is not None for m in ("tensorflow", "tf_keras"))
    return sys.executable if have else None


class TensorFlowSide:
    """The child process running TensorFlow's side for one size."""

    def __init__(self, python: str, batch: int, hidden: int, steps_t: int, where: Path) -> None:
        self.proc = subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--tf-side", "--batch", str(batch), "--hidden", str(hidden),
             "--time", str(steps_t), "--dir", str(where)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if self._line() != "ready":
            raise RuntimeError("TensorFlow's side did not start (run it alone with --tf-side to see why)")

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"TensorFlow's side exited (status {self.proc.poll()})")
        return line.strip()

    def steps(self, k: int) -> tuple[float, float]:
        """(seconds per step over a block of ``k`` steps, the last loss)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"steps {k}\n")
        self.proc.stdin.flush()
        seconds, loss = self._line().split()
        return float(seconds) / k, float(loss)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def measure(python: str, batch: int, hidden: int, steps_t: int, repeat: int, block_s: float) -> dict[str, Any]:
    """One size: both sides' first three losses, then ``repeat`` interleaved samples of each."""
    import turnout as tn

    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        tf_run = TensorFlowSide(python, batch, hidden, steps_t, where)
        try:
            meta = json.loads((where / "meta.json").read_text())
            t0 = time.perf_counter()
            imported = tn.import_graph_def(where / "model.pb")
            import_s = time.perf_counter() - t0
            with np.load(where / "feeds.npz", allow_pickle=False) as z:
                feeds = {imported.tensor(k): z[k.replace(":", "_")] for k in meta["feeds"]}
            sess = tn.Session(imported.graph, backend="fast")
            sess.run(imported.node(meta["init"]))
            fetches = [imported.tensor(meta["loss"]), imported.node(meta["train"])]

            def turnout_step() -> float:
                return float(sess.run(fetches, feeds)[0])

            t0 = time.perf_counter()
            tn_losses = [turnout_step()]
            first_s = time.perf_counter() - t0
            tn_losses += [turnout_step() for _ in range(2)]
            tf_losses = [tf_run.steps(1)[1] for _ in range(3)]
            agree = bool(np.allclose(tn_losses, tf_losses, rtol=1e-4, atol=1e-6))
            # block sizes: as many steps as take about block_s, from one warm step of each side
            t0 = time.perf_counter()
            turnout_step()
            k_tn = max(1, round(block_s / max(time.perf_counter() - t0, 1e-6)))
            k_tf = max(1, round(block_s / max(tf_run.steps(1)[0], 1e-6)))
            tn_times, tf_times = [], []
            for _ in range(repeat):
                tf_times.append(tf_run.steps(k_tf)[0])
                t0 = time.perf_counter()
                for _ in range(k_tn):
                    turnout_step()
                tn_times.append((time.perf_counter() - t0) / k_tn)
        finally:
            tf_run.close()
    tn_med, tf_med = statistics.median(tn_times), statistics.median(tf_times)
    return {"batch": batch, "hidden": hidden, "input": hidden, "T": steps_t, "nodes": sum(imported.op_counts.values()),
            "tensorflow": meta["tensorflow"], "import_s": import_s, "turnout_first_step_s": first_s,
            "turnout_step_s": tn_med, "turnout_min_s": min(tn_times), "tf_step_s": tf_med, "tf_min_s": min(tf_times),
            "tf_over_turnout": tf_med / tn_med, "steps_per_sample": {"turnout": k_tn, "tf": k_tf},
            "repeat": repeat, "losses": {"turnout": tn_losses, "tf": tf_losses}, "agree": agree}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two small sizes and the large one, fewer samples")
    ap.add_argument("--tf-side", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--hidden", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--time", type=int, default=T, help=argparse.SUPPRESS)
    ap.add_argument("--dir", default="", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.tf_side:
        tf_side(a.batch, a.hidden, a.time, Path(a.dir))
        return 0
    python = tf_python()
    if python is None:
        print("skipped: TensorFlow is not installed in this Python. Set TURNOUT_TF_PYTHON to a Python that has "
              "tensorflow and tf_keras (pip install tensorflow tf_keras), or install them here.")
        return 0
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks.common import machine, write_report

    sizes = ([SMALL[0], SMALL[-1]] if a.quick else SMALL) + LARGE
    rows = []
    for batch, hidden in sizes:
        big = (batch, hidden) in LARGE
        print(f"  batch {batch} hidden {hidden} T {T}", flush=True)
        rows.append(measure(python, batch, hidden, T, repeat=(3 if a.quick else 7) if big else (5 if a.quick else 9),
                            block_s=0.0 if big else 0.3))
    flags = os.environ.get("XLA_FLAGS", "")
    lines = ["# Imported TF1 training step (dynamic_rnn LSTM + Adam): Turnout fast vs TensorFlow v1 Session", "",
             f"XLA_FLAGS: {flags or '(none)'}", "",
             "| batch | hidden | T | Turnout (ms/step) | TensorFlow (ms/step) | TF / Turnout | losses agree |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['hidden']} | {r['T']} | {1e3 * r['turnout_step_s']:.2f} | "
                     f"{1e3 * r['tf_step_s']:.2f} | {r['tf_over_turnout']:.2f} | {r['agree']} |")
    write_report("tf_session", {"quick": a.quick, "machine": machine(), "xla_flags": flags, "rows": rows}, lines)
    return 0 if all(r["agree"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
