"""Train a small LSTM over variable-length sequences, built with ``tn.while_loop``.

The sequence length is a run-time placeholder: one graph serves every length, and the loop's
gradient (a backward while loop popping the saved activations off stacks, the paper's Sec. 5) runs
as many iterations as the forward loop did. The weights are Variables, trained with Adam.

Task: read a sequence of vectors and predict, at the last step, twice the mean of their first
coordinate plus half the second coordinate of the last vector (a regression that needs memory over
the whole, varying, length).

The verdict at the end compares the loss on held-out sequences (64 batches that training never saw)
with a closed form: the loss of the best prediction that ignores the input (always 0, the target's
mean), ``E[target**2] = 4 E[1/n] + 0.25`` over the lengths ``n`` drawn. Below half of that, the model
has learned something it could only get from reading the sequence.

    python examples/lstm.py --steps 60                       # the fast backend (JAX): compiles once
    python examples/lstm.py --backend reference --steps 60   # the reference interpreter: slower
    python examples/lstm.py --logdir runs/lstm               # and a TensorBoard event file
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import turnout as tn


def build(hidden: int = 16, inputs: int = 4, batch: int = 8, seed: int = 0,
          learning_rate: float = 0.03) -> dict[str, Any]:
    """The graph: placeholders ``xs`` [time, batch, inputs], ``length``, ``target`` [batch, 1]."""
    rng = np.random.default_rng(seed)
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, [None, batch, inputs], name="xs")
        length = tn.placeholder(tn.int32, [], name="length")
        target = tn.placeholder(tn.float32, [batch, 1], name="target")
        scale = 1.0 / np.sqrt(inputs + hidden)
        w = tn.Variable(rng.normal(0, scale, (inputs + hidden, 4 * hidden)).astype(np.float32), name="lstm/w")
        b = tn.Variable(np.zeros(4 * hidden, np.float32), name="lstm/b")
        wo = tn.Variable(rng.normal(0, 1 / np.sqrt(hidden), (hidden, 1)).astype(np.float32), name="out/w")
        bo = tn.Variable(np.zeros(1, np.float32), name="out/b")

        def cell(t: tn.Tensor, h: tn.Tensor, c: tn.Tensor) -> tuple[Any, ...]:
            z = tn.matmul(tn.concat([xs[t], h], axis=1), w) + b
            i = tn.sigmoid(z[:, 0:hidden])
            f = tn.sigmoid(z[:, hidden:2 * hidden] + 1.0)
            o = tn.sigmoid(z[:, 2 * hidden:3 * hidden])
            u = tn.tanh(z[:, 3 * hidden:])
            c = f * c + i * u
            return t + 1, o * tn.tanh(c), c

        zeros = tn.zeros([batch, hidden], tn.float32)
        _, h, _ = tn.while_loop(lambda t, h, c: t < length, cell, [tn.constant(0), zeros, zeros], name="lstm")
        pred = tn.matmul(h, wo) + bo
        loss = tn.reduce_mean(tn.square(pred - target))
        train_op = tn.train.Adam(learning_rate).minimize(loss)
    return {"graph": g, "xs": xs, "length": length, "target": target, "loss": loss, "train_op": train_op,
            "batch": batch, "inputs": inputs}


def batch_for(rng: np.random.Generator, batch: int, inputs: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    xs = rng.normal(size=(length, batch, inputs)).astype(np.float32)
    return xs, (2 * xs[:, :, :1].mean(axis=0) + 0.5 * xs[-1, :, 1:2]).astype(np.float32)


def constant_loss(min_len: int, max_len: int) -> float:
    """The expected loss of the best input-blind prediction (0): ``E[target**2]`` for lengths drawn
    uniformly from [min_len, max_len], where ``target = 2 mean(x[:, 0]) + 0.5 x[-1, 1]`` over
    standard normal ``x``, so ``E[target**2] = 4 E[1/n] + 0.25``."""
    lengths = np.arange(min_len, max_len + 1)
    return float(4 * np.mean(1.0 / lengths) + 0.25)


def held_out_loss(sess: Any, m: dict[str, Any], min_len: int, max_len: int, batches: int = 64,
                  seed: int = 10_000) -> float:
    """The mean loss over ``batches`` fresh batches of random lengths (no training step runs)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(batches):
        n = int(rng.integers(min_len, max_len + 1))
        xs, target = batch_for(rng, m["batch"], m["inputs"], n)
        xs = np.concatenate([xs, np.zeros((max_len - n, *xs.shape[1:]), xs.dtype)])
        out.append(float(sess.run(m["loss"], feed_dict={m["xs"]: xs, m["length"]: n, m["target"]: target})))
    return float(np.mean(out))


def verdict(before: float, after: float, min_len: int, max_len: int) -> str:
    """One line: did the held-out loss fall below half the best input-blind loss?"""
    blind = constant_loss(min_len, max_len)
    against = (f"{blind:.3f}, the loss of the best prediction that ignores the input (a closed form); "
               f"before training {before:.3f}")
    if after < 0.5 * blind:
        return f"Verdict: learned: held-out loss {after:.3f}, under half of {against}"
    return f"Verdict: not learned yet: held-out loss {after:.3f}, not under half of {against}; try more --steps"


def main(backend: str = "reference", steps: int = 60, min_len: int = 3, max_len: int = 12, seed: int = 0,
         verbose: bool = True, logdir: str | None = None) -> list[float]:
    """Train for ``steps`` steps on random lengths in [min_len, max_len]; returns the losses. With
    ``logdir``, the loss per step and the graph go to a TensorBoard event file there (needs the
    ``tf`` extra). With ``verbose``, prints each step, where the event file went, and last the verdict
    (``verdict``: the held-out loss before and after training against the input-blind loss)."""
    m = build(seed=seed)
    writer = None
    if logdir is not None:
        from turnout.graphdef import EventWriter

        writer = EventWriter(logdir)
        writer.add_graph(m["graph"])
    sess = tn.Session(m["graph"], backend=backend)
    before = held_out_loss(sess, m, min_len, max_len) if verbose else float("nan")
    rng = np.random.default_rng(seed + 1)
    losses = []
    for step in range(steps):
        n = int(rng.integers(min_len, max_len + 1))
        xs, target = batch_for(rng, m["batch"], m["inputs"], n)
        # Pad the time axis to max_len: the fed shape stays the same, only the scalar ``length``
        # changes, so the fast backend compiles once and the loop's trip count is decided at run time.
        xs = np.concatenate([xs, np.zeros((max_len - n, *xs.shape[1:]), xs.dtype)])
        t0 = time.perf_counter()
        loss, _ = sess.run([m["loss"], m["train_op"]], feed_dict={m["xs"]: xs, m["length"]: n, m["target"]: target})
        dt = time.perf_counter() - t0
        losses.append(float(loss))
        if writer is not None:
            writer.add_scalar("loss", float(loss), step)
        if verbose:
            print(f"step {step:3d}  length {n:2d}  loss {float(loss):.4f}  {dt * 1000:7.1f} ms/step")
    if verbose and steps >= 20:
        k = max(1, steps // 5)
        print(f"mean loss of the first {k} steps {np.mean(losses[:k]):.4f}, of the last {k} {np.mean(losses[-k:]):.4f}")
    if writer is not None:
        writer.close()
        if verbose:
            print(f"wrote the loss and the graph to {writer.path} (view: tensorboard --logdir {logdir})")
    if verbose:
        print(verdict(before, held_out_loss(sess, m, min_len, max_len), min_len, max_len))
    return losses


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["fast", "reference"], default="fast",
                    help="fast: compiled with JAX, one executable for every length (default); "
                         "reference: the interpreter, the oracle (slower)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-len", type=int, default=12)
    ap.add_argument("--logdir", default=None, help="write the loss and the graph for TensorBoard here")
    args = ap.parse_args()
    if args.max_len < 3 or args.steps < 1:
        ap.error("--max-len must be at least 3 and --steps at least 1")
    print(f"Task: train an LSTM regression over sequences of 3 to {args.max_len} steps, {args.steps} Adam steps; "
          f"backend: {args.backend}")
    if args.backend == "fast":
        print("(the first step includes compilation; every later length reuses the same executable)")
    main(backend=args.backend, steps=args.steps, seed=args.seed, max_len=args.max_len, logdir=args.logdir)
