"""Sequence to sequence with attention: reverse digit sequences, then decode greedily in a while loop.

The paper's second motivating program is dynamic decoding: a decoder that feeds each output token
back as the next input and stops when the sentence ends, so the number of steps is known only at
run time. Here both phases are ``tn.while_loop``:

* training (teacher forcing): an encoder loop runs ``max(source lengths)`` steps of a GRU over the
  batch (each sequence stops updating at its own length), and a decoder loop reads the shifted
  target at each step and adds up the cross-entropy, masked past each sequence's end; the trip counts
  come from fed lengths, so one graph serves every length, and ``tn.gradients`` differentiates
  through both loops (Adam updates the Variables);
* greedy decoding: a loop that feeds back the argmax token and stops when every sequence in the
  batch has produced its end token — a trip count that depends on the model's own outputs — or at
  ``max_len + 1`` steps;
* beam search (``beam_search``): the same stopping rule over ``K`` beams per sequence, the beams
  reordered each step with ``Gather`` along their parents.

The decoder attends over the encoder's outputs (dot-product attention, Luong et al. 2015). The task:
the input is 3 to 8 random digits, the target is the same digits in reverse order, then ``EOS``.

The verdict at the end is judged against what a model that ignores its input could reach: it cannot
know the digits (a tenth of them right by chance) nor where the sequence ends, so even granted every
EOS it gets at most ``(1 + n/10) / (n + 1)`` of a sequence's tokens right (``blind_accuracy``). The
model has learned when its greedy decoding of a held-out batch gets at least twice that.

    python examples/seq2seq.py --steps 600                       # the fast backend (the default)
    python examples/seq2seq.py --backend reference --steps 100   # the reference interpreter: slower
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

import turnout as tn
from turnout.inspect import frame_summary as frame_summary  # the tutorial's listing

DIGITS, EOS, GO = 10, 10, 11  # tokens 0..9 are digits
VOCAB = 12


@dataclass
class Config:
    """Model and task sizes. ``max_len``: the longest source sequence (inputs are padded to it)."""

    embed: int = 16
    hidden: int = 64
    batch: int = 32
    min_len: int = 3
    max_len: int = 8
    learning_rate: float = 0.01
    seed: int = 0


def init_params(cfg: Config) -> dict[str, np.ndarray]:
    """Initial weights, by name (Glorot-uniform matrices, zero biases)."""
    rng = np.random.default_rng(cfg.seed)
    E, H = cfg.embed, cfg.hidden

    def glorot(n: int, m: int) -> np.ndarray:
        lim = np.sqrt(6.0 / (n + m))
        return rng.uniform(-lim, lim, (n, m)).astype(np.float32)

    return {
        "embedding": glorot(VOCAB, E),
        "enc/w": glorot(E + H, 3 * H), "enc/b": np.zeros(3 * H, np.float32),
        "dec/w": glorot(E + H, 3 * H), "dec/b": np.zeros(3 * H, np.float32),
        "attn/w": glorot(2 * H, H), "out/w": glorot(H, VOCAB), "out/b": np.zeros(VOCAB, np.float32),
    }


def gru(w: tn.Tensor, b: tn.Tensor, x: tn.Tensor, h: tn.Tensor, H: int) -> tn.Tensor:
    """A GRU cell (Cho et al. 2014), its gates from one matmul: update z, reset r, candidate n."""
    zr = tn.sigmoid(tn.matmul(tn.concat([x, h], 1), w[:, 0:2 * H]) + b[0:2 * H])
    z, r = zr[:, 0:H], zr[:, H:2 * H]
    n = tn.tanh(tn.matmul(tn.concat([x, r * h], 1), w[:, 2 * H:]) + b[2 * H:])
    return (1.0 - z) * n + z * h


def one_hot(tokens: tn.Tensor, depth: int) -> tn.Tensor:
    """[B] int32 -> [B, depth] float32 (no OneHot op needed: compare with 0..depth-1)."""
    return tn.cast(tn.equal(tn.expand_dims(tokens, 1), tn.constant(np.arange(depth, dtype=np.int32))), tn.float32)


def argmax(x: tn.Tensor) -> tn.Tensor:
    """Index of the largest entry of each row of ``x`` [B, n] (the first one on ties), as int32."""
    n = x.shape[1]
    is_max = tn.equal(x, tn.reduce_max(x, axis=1, keepdims=True))
    positions = tn.cast(is_max, tn.int32) * 0 + tn.constant(np.arange(n, dtype=np.int32))  # [B, n]
    idx = tn.where(is_max, positions, n)
    return tn.negative(tn.reduce_max(tn.negative(idx), axis=1))


class Model:
    """The weights (as tensors read once per program) and the pieces both phases share."""

    def __init__(self, cfg: Config, p: dict[str, tn.Tensor]) -> None:
        self.cfg, self.p = cfg, p

    def embed(self, tokens: tn.Tensor) -> tn.Tensor:
        return tn.gather(self.p["embedding"], tokens)

    def encode(self, src: tn.Tensor, src_len: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor, tn.Tensor]:
        """GRU over ``src`` [max_len, B] for ``max(src_len)`` steps. Returns the outputs [max_len, B,
        H] (zero past each sequence's end), the final states [B, H] (each at its own length) and the
        attention mask [max_len, B] (1 where a position exists)."""
        cfg, H = self.cfg, self.cfg.hidden
        B, T = cfg.batch, cfg.max_len
        rows = tn.constant(np.arange(T, dtype=np.int32))
        valid = tn.cast(tn.less(tn.expand_dims(rows, 1), tn.expand_dims(src_len, 0)), tn.float32)  # [T, B]

        def step(t: tn.Tensor, h: tn.Tensor, outs: tn.Tensor) -> tuple[tn.Tensor, ...]:
            h_new = gru(self.p["enc/w"], self.p["enc/b"], self.embed(src[t]), h, H)
            live = tn.expand_dims(valid[t], 1)  # [B, 1]: this sequence still has tokens
            h = live * h_new + (1.0 - live) * h
            at_t = tn.reshape(tn.cast(tn.equal(rows, t), tn.float32), [T, 1, 1])
            return t + 1, h, outs + at_t * tn.expand_dims(live * h_new, 0)

        _, h, outs = tn.while_loop(lambda t, h, outs: t < tn.reduce_max(src_len), step,
                                   [tn.constant(0), tn.zeros([B, H]), tn.zeros([T, B, H])], name="encoder")
        return outs, h, valid

    def decode_step(self, y_prev: tn.Tensor, h: tn.Tensor, enc: tn.Tensor, valid: tn.Tensor
                    ) -> tuple[tn.Tensor, tn.Tensor]:
        """One decoder step: feed the previous token, attend over the encoder outputs, and return the
        logits [B, VOCAB] and the new state."""
        H = self.cfg.hidden
        h = gru(self.p["dec/w"], self.p["dec/b"], self.embed(y_prev), h, H)
        scores = tn.reduce_sum(enc * tn.expand_dims(h, 0), axis=2) + (valid - 1.0) * 1e9  # [T, B]
        e = tn.exp(scores - tn.reduce_max(scores, axis=0, keepdims=True)) * valid
        weights = e / tn.reduce_sum(e, axis=0, keepdims=True)
        context = tn.reduce_sum(enc * tn.expand_dims(weights, 2), axis=0)  # [B, H]
        att = tn.tanh(tn.matmul(tn.concat([h, context], 1), self.p["attn/w"]))
        return tn.matmul(att, self.p["out/w"]) + self.p["out/b"], h


def build(cfg: Config | None = None, beam_width: int = 3) -> dict[str, Any]:
    """Four programs over the same Variables: ``train`` (teacher forcing; fetch ``loss`` and
    ``train_op``), ``decode`` (greedy, fetch ``tokens`` and ``steps``), ``beam`` (beam search of
    width ``beam_width``, fetch ``beam_tokens``, ``beam_scores``, ``beam_steps``) and
    ``decode_step`` (one decoder step, for the Python-driven decode loop)."""
    cfg = cfg or Config()
    B, T = cfg.batch, cfg.max_len
    U = T + 1  # the longest output: the reversed digits and EOS
    g = tn.Graph()
    with g.as_default():
        variables = {k: tn.Variable(v, name=k) for k, v in init_params(cfg).items()}
        src = tn.placeholder(tn.int32, [T, B], name="src")
        src_len = tn.placeholder(tn.int32, [B], name="src_len")
        dec_in = tn.placeholder(tn.int32, [U, B], name="dec_in")  # GO, then the target shifted right
        dec_out = tn.placeholder(tn.int32, [U, B], name="dec_out")  # the target, then EOS
        out_len = src_len + 1

        # ---- training: teacher forcing ----------------------------------------------------------
        m = Model(cfg, {k: v.read() for k, v in variables.items()})
        enc, h0, valid = m.encode(src, src_len)

        def teacher_step(t: tn.Tensor, h: tn.Tensor, nll: tn.Tensor) -> tuple[tn.Tensor, ...]:
            logits, h = m.decode_step(dec_in[t], h, enc, valid)
            z = logits - tn.reduce_max(logits, axis=1, keepdims=True)
            logp = z - tn.log(tn.reduce_sum(tn.exp(z), axis=1, keepdims=True))
            mask = tn.cast(tn.less(t, out_len), tn.float32)
            return t + 1, h, nll - tn.reduce_sum(mask * tn.reduce_sum(one_hot(dec_out[t], VOCAB) * logp, axis=1))

        _, _, nll = tn.while_loop(lambda t, h, nll: t < tn.reduce_max(out_len), teacher_step,
                                  [tn.constant(0), h0, tn.constant(0.0)], name="teacher_forcing")
        loss = nll / tn.cast(tn.reduce_sum(out_len), tn.float32)
        grads = tn.gradients(loss, list(m.p.values()))
        train_op = tn.train.Adam(cfg.learning_rate).apply_gradients(list(zip(grads, variables.values())),
                                                                    after=[loss])

        # ---- greedy decoding: stop when every sequence has produced EOS ---------------------------
        d = Model(cfg, {k: v.read() for k, v in variables.items()})
        enc_d, h_d, valid_d = d.encode(src, src_len)
        rows = tn.constant(np.arange(U, dtype=np.int32))

        def greedy_step(t: tn.Tensor, y: tn.Tensor, h: tn.Tensor, done: tn.Tensor, out: tn.Tensor
                        ) -> tuple[tn.Tensor, ...]:
            logits, h = d.decode_step(y, h, enc_d, valid_d)
            y = tn.where(done, EOS, argmax(logits))  # a finished sequence keeps emitting EOS
            out = tn.where(tn.equal(tn.expand_dims(rows, 1), t), tn.expand_dims(y, 0) * tn.ones([U, 1], tn.int32), out)
            return t + 1, y, h, done | tn.equal(y, EOS), out

        steps, _, _, _, tokens = tn.while_loop(
            lambda t, y, h, done, out: (t < U) & (tn.reduce_max(tn.cast(tn.logical_not(done), tn.int32)) > 0),
            greedy_step,
            [tn.constant(0), tn.fill([B], GO), h_d, tn.constant(np.zeros(B, bool)),
             tn.fill([U, B], EOS)],
            name="greedy_decode")

        # ---- beam search --------------------------------------------------------------------------
        beam = beam_search(Model(cfg, {k: v.read() for k, v in variables.items()}), src, src_len, beam_width)

        # ---- one decoder step, for the Python-driven loop ---------------------------------------
        y_prev = tn.placeholder(tn.int32, [B], name="y_prev")
        h_prev = tn.placeholder(tn.float32, [B, cfg.hidden], name="h_prev")
        enc_in = tn.placeholder(tn.float32, [T, B, cfg.hidden], name="enc")
        valid_in = tn.placeholder(tn.float32, [T, B], name="valid")
        s = Model(cfg, {k: v.read() for k, v in variables.items()})
        logits1, h1 = s.decode_step(y_prev, h_prev, enc_in, valid_in)
        y1 = argmax(logits1)
    return {"graph": g, "config": cfg, "variables": variables, "src": src, "src_len": src_len,
            "dec_in": dec_in, "dec_out": dec_out, "loss": loss, "train_op": train_op,
            "tokens": tokens, "steps": steps, "encoded": [enc_d, h_d, valid_d],
            "y_prev": y_prev, "h_prev": h_prev, "enc": enc_in, "valid": valid_in, "step_out": [y1, h1],
            "beam_width": beam_width, "beam_tokens": beam[0], "beam_scores": beam[1], "beam_steps": beam[2]}


def top_k(x: tn.Tensor, k: int) -> tuple[tn.Tensor, tn.Tensor]:
    """The ``k`` largest entries of each row of ``x`` [B, n], best first, and their indices (there
    is no TopK op: ``k`` rounds of argmax, each masking out the entry it found)."""
    n = x.shape[1]
    values, indices = [], []
    for _ in range(k):
        i = argmax(x)
        values.append(tn.reduce_max(x, axis=1))
        indices.append(i)
        x = tn.where(tn.equal(one_hot(i, n), 1.0), -1e30, x)
    return tn.transpose(tn.stack(values), [1, 0]), tn.transpose(tn.stack(indices), [1, 0])


def beam_search(d: Model, src: tn.Tensor, src_len: tn.Tensor, K: int) -> tuple[tn.Tensor, tn.Tensor, tn.Tensor]:
    """Beam search of width ``K``: returns the best sequence of each batch entry [max_len + 1, B],
    the ``K`` final scores (sums of log-probabilities, best first) [B, K], and the trip count.

    The batch is widened to ``B * K`` rows, row ``b * K + j`` holding beam ``j`` of entry ``b``. Each
    step scores every (beam, token) pair, keeps the ``K`` best per entry, and reorders the beams'
    states and token histories with ``Gather`` along their parents. A finished beam may only extend
    itself with ``EOS`` at no cost, so it keeps its score. The loop stops when every beam of every
    entry has finished, or after ``max_len + 1`` steps."""
    cfg = d.cfg
    B, U, V = cfg.batch, cfg.max_len + 1, VOCAB
    enc, h, valid = d.encode(src, src_len)
    rep = tn.constant(np.repeat(np.arange(B, dtype=np.int32), K))  # row b * K + j reads entry b
    enc, h, valid = tn.gather(enc, rep, axis=1), tn.gather(h, rep), tn.gather(valid, rep, axis=1)
    first = np.full(B * K, -1e9, np.float32)
    first[::K] = 0.0  # at the start only beam 0 is live, so the K beams do not start out equal
    base = tn.constant(np.repeat(np.arange(B, dtype=np.int32) * K, K))
    rows = tn.constant(np.arange(U, dtype=np.int32))
    eos_only = tn.constant(np.where(np.arange(V) == EOS, 0.0, -1e9).astype(np.float32))

    def step(t: tn.Tensor, y: tn.Tensor, h: tn.Tensor, score: tn.Tensor, done: tn.Tensor, hist: tn.Tensor
             ) -> tuple[tn.Tensor, ...]:
        logits, h = d.decode_step(y, h, enc, valid)
        z = logits - tn.reduce_max(logits, axis=1, keepdims=True)
        logp = z - tn.log(tn.reduce_sum(tn.exp(z), axis=1, keepdims=True))
        logp = tn.where(tn.expand_dims(done, 1) & tn.ones([1, V], tn.bool), eos_only * tn.ones_like(logp), logp)
        cand = tn.reshape(tn.expand_dims(score, 1) + logp, [B, K * V])
        best, idx = top_k(cand, K)
        idx = tn.reshape(idx, [B * K])
        parent = base + idx // V
        token = tn.mod(idx, V)
        hist = tn.gather(hist, parent, axis=1)
        hist = tn.where(tn.equal(tn.expand_dims(rows, 1), t), tn.expand_dims(token, 0) * tn.ones([U, 1], tn.int32),
                        hist)
        done = tn.gather(done, parent) | tn.equal(token, EOS)
        return t + 1, token, tn.gather(h, parent), tn.reshape(best, [B * K]), done, hist

    steps, _, _, score, _, hist = tn.while_loop(
        lambda t, y, h, score, done, hist: (t < U) & (tn.reduce_max(tn.cast(tn.logical_not(done), tn.int32)) > 0),
        step,
        [tn.constant(0), tn.fill([B * K], GO), h, tn.constant(first), tn.constant(np.zeros(B * K, bool)),
         tn.fill([U, B * K], EOS)],
        name="beam_search")
    best_rows = tn.constant(np.arange(B, dtype=np.int32) * K)
    return tn.gather(hist, best_rows, axis=1), tn.reshape(score, [B, K]), steps


def batch(rng: np.random.Generator, cfg: Config) -> dict[str, np.ndarray]:
    """A batch of the reversal task, padded: ``src`` [max_len, B] (padding 0, never read past each
    length), ``src_len`` [B], ``dec_in`` / ``dec_out`` [max_len + 1, B], and the target ``want``."""
    B, T = cfg.batch, cfg.max_len
    lens = rng.integers(cfg.min_len, cfg.max_len + 1, B).astype(np.int32)
    src = np.zeros((T, B), np.int32)
    dec_in = np.full((T + 1, B), EOS, np.int32)
    dec_out = np.full((T + 1, B), EOS, np.int32)
    dec_in[0] = GO
    for b, n in enumerate(lens):
        digits = rng.integers(0, DIGITS, n)
        src[:n, b] = digits
        dec_out[:n, b] = digits[::-1]
        dec_in[1:n + 1, b] = digits[::-1]
    return {"src": src, "src_len": lens, "dec_in": dec_in, "dec_out": dec_out}


def feeds(m: dict[str, Any], data: dict[str, np.ndarray], train: bool = True) -> dict[Any, np.ndarray]:
    keys = ["src", "src_len", "dec_in", "dec_out"] if train else ["src", "src_len"]
    return {m[k]: data[k] for k in keys}


def accuracy(tokens: np.ndarray, data: dict[str, np.ndarray]) -> tuple[float, float]:
    """(token accuracy over each target and its EOS, fraction of sequences exactly right)."""
    right = total = exact = 0
    for b, n in enumerate(data["src_len"]):
        ok = tokens[:n + 1, b] == data["dec_out"][:n + 1, b]
        right += int(ok.sum())
        total += n + 1
        exact += bool(ok.all())
    return right / total, exact / len(data["src_len"])


def blind_accuracy(data: dict[str, np.ndarray]) -> float:
    """The token accuracy a model that ignores its input cannot beat on ``data``, generously granted
    every EOS: a tenth of the ``n`` digits plus the EOS, over the ``n + 1`` tokens of each target."""
    n = np.asarray(data["src_len"], float)
    return float(np.sum(1 + n / 10) / np.sum(n + 1))


def decode_python(m: dict[str, Any], sess: Any, data: dict[str, np.ndarray]) -> np.ndarray:
    """Greedy decoding driven from Python: one ``Session.run`` to encode, then one per decoder step
    until every sequence has produced EOS (the same stopping rule as the in-graph loop)."""
    cfg = m["config"]
    enc, h, valid = sess.run(m["encoded"], feeds(m, data, train=False))
    y = np.full(cfg.batch, GO, np.int32)
    done = np.zeros(cfg.batch, bool)
    out = np.full((cfg.max_len + 1, cfg.batch), EOS, np.int32)
    for t in range(cfg.max_len + 1):
        y_new, h = sess.run(m["step_out"], {m["y_prev"]: y, m["h_prev"]: h, m["enc"]: enc, m["valid"]: valid})
        y = np.where(done, EOS, y_new).astype(np.int32)
        out[t] = y
        done |= y == EOS
        if done.all():
            break
    return out


def train(backend: str = "reference", steps: int = 600, cfg: Config | None = None, verbose: bool = True,
          eval_every: int = 50) -> dict[str, Any]:
    """Train with teacher forcing for ``steps`` batches; every ``eval_every`` steps decode a held-out
    batch greedily and record the token and sequence accuracies."""
    cfg = cfg or Config()
    m = build(cfg)
    sess = tn.Session(m["graph"], backend=backend)
    rng = np.random.default_rng(cfg.seed + 1)
    held_out = batch(np.random.default_rng(10_000 + cfg.seed), cfg)

    def evaluate() -> tuple[float, float]:
        return accuracy(sess.run(m["tokens"], feeds(m, held_out, train=False)), held_out)

    evals = [(0, *evaluate())]
    losses = []
    train_s = 0.0
    for step in range(1, steps + 1):
        data = batch(rng, cfg)
        t0 = time.perf_counter()
        loss, _ = sess.run([m["loss"], m["train_op"]], feeds(m, data))
        train_s += time.perf_counter() - t0
        losses.append(float(loss))
        if step % eval_every == 0 or step == steps:
            evals.append((step, *evaluate()))
            if verbose:
                print(f"step {step:5d}  loss {np.mean(losses[-eval_every:]):.3f}  held-out token accuracy "
                      f"{evals[-1][1]:.3f}  sequences exactly right {evals[-1][2]:.3f}  ({train_s:.1f} s)",
                      flush=True)
    return {"backend": backend, "losses": losses, "evals": evals, "train_s": train_s, "model": m,
            "session": sess, "held_out": held_out}


def plot(run: dict[str, Any], path: str) -> None:
    """Loss and held-out greedy-decoding accuracy against training steps, as a PNG (needs
    matplotlib: ``pip install turnout[plots]``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(8, 3.2), dpi=110)
    a1.plot(np.arange(1, len(run["losses"]) + 1), run["losses"], color="tab:blue", lw=0.8)
    a1.set_xlabel("training step")
    a1.set_ylabel("cross-entropy per token")
    a1.set_yscale("log")
    ev = np.asarray(run["evals"], float)
    a2.plot(ev[:, 0], ev[:, 1], "o-", ms=3, label="tokens right")
    a2.plot(ev[:, 0], ev[:, 2], "s-", ms=3, label="sequences exactly right")
    a2.set_xlabel("training step")
    a2.set_ylabel("greedy decoding, held-out batch")
    a2.set_ylim(0, 1.02)
    a2.legend(fontsize=8)
    fig.suptitle(f"seq2seq reversal, {run['backend']} backend", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["fast", "reference"], default="fast",
                    help="fast: compiled with JAX (default); reference: the interpreter, the oracle (much slower)")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the losses and accuracies to this JSON file")
    ap.add_argument("--plot", help="write the learning curves to this PNG (needs matplotlib)")
    args = ap.parse_args()
    if args.steps < 1:
        ap.error("--steps must be positive")
    cfg = Config(seed=args.seed)
    print(f"Task: learn to reverse sequences of {cfg.min_len} to {cfg.max_len} digits with an attention seq2seq "
          f"model, {args.steps} training steps, then decode greedily and by beam search; backend: {args.backend}",
          flush=True)
    r = train(args.backend, args.steps, cfg)
    tokens = r["session"].run(r["model"]["tokens"], feeds(r["model"], r["held_out"], train=False))
    src, n = r["held_out"]["src"], r["held_out"]["src_len"]
    for b in range(3):
        print("input", src[:n[b], b], "-> decoded", tokens[:n[b] + 1, b], "(10 = EOS)")
    beam = r["session"].run(r["model"]["beam_tokens"], feeds(r["model"], r["held_out"], train=False))
    (tok, seq), blind = accuracy(tokens, r["held_out"]), blind_accuracy(r["held_out"])
    print("held-out accuracy (tokens, sequences): greedy {:.3f} {:.3f}, beam search of width 3 {:.3f} {:.3f}".format(
        tok, seq, *accuracy(beam, r["held_out"])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: r[k] for k in ("backend", "losses", "evals", "train_s")}, f)
        print(f"wrote the losses and accuracies to {args.json}")
    if args.plot:
        plot(r, args.plot)
        print(f"wrote the learning curves to {args.plot}")
    before = r["evals"][0][1]
    if tok >= 2 * blind:
        print(f"Verdict: learned: greedy decoding gets {tok:.3f} of the held-out tokens right and {seq:.3f} of the "
              f"sequences exactly; a model that ignores its input gets at most {blind:.3f} of the tokens "
              f"(this one before training: {before:.3f})")
    else:
        print(f"Verdict: not learned yet: greedy decoding gets {tok:.3f} of the held-out tokens right, under twice "
              f"the {blind:.3f} a model that ignores its input can reach (before training: {before:.3f}); "
              f"train longer (--steps)")
