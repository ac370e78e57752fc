"""The fixed cost of one ``Session.run`` on the fast backend, against calling the jitted JAX function.

Why a benchmark of its own: a small program run many times (an RL actor's step, a serving call)
spends its time in the per-run work around the compiled call, not in the call. Three programs, each
beside its hand-written ``jax.jit`` twin called on the same numpy arrays and read back with
``np.asarray`` (what a JAX user pays per call):

- ``elementwise``: ``x * 2 + 1`` on a fed ``(4,)`` array (nothing to check, one output);
- ``variable``: ``v.assign_add(x)`` read back (a Variable kept on the device between runs), and the
  same through the partitioned backend with every node on its one device (``devices=["cpu:0"]``);
- ``checked_loop``: a ``while_loop`` of fed length whose body divides by a fed integer (an error
  word and an iteration bound to check after the call);
- ``specialised (fed length)``: ``fill([m], x) * 2`` with ``m`` fed, a shape the plan is specialised
  on (``fast.specialise``; JAX's twin takes ``m`` as a static argument), repeated by a lane that
  checks ``m``'s value;
- ``training_step``: ``[loss, train_op]`` of a small regression with SGD (the op fetched as ``None``);
- ``rnn_training_step``: the same of a two-step RNN, a gradient through a loop (the fused stage).

Each pair is timed in blocks of ``calls`` calls, the two sides' blocks interleaved; the figure is the
best block's time per call (the least disturbed by other work on the machine) and the ratio of the two.
``python benchmarks/run_overhead.py [--quick]`` prints them; ``benchmarks/run.py`` records them.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

import turnout as tn


def _per_call(fa: Callable[[], Any], fb: Callable[[], Any], calls: int, blocks: int) -> tuple[float, float]:
    """Best block time per call of ``fa`` and ``fb``, blocks interleaved (both warmed up first)."""
    for _ in range(20):
        fa()
        fb()
    best = [float("inf"), float("inf")]
    for _ in range(blocks):
        for i, fn in enumerate((fa, fb)):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best[i] = min(best[i], (time.perf_counter() - t0) / calls)
    return best[0], best[1]


def _programs() -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    import jax
    import jax.numpy as jnp

    out: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {}
    a = np.arange(4, dtype=np.float32)

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        y = x * 2.0 + 1.0
    sess = tn.Session(g, backend="fast")
    f = jax.jit(lambda v: v * 2.0 + 1.0)
    np.testing.assert_allclose(sess.run(y, {x: a}), np.asarray(f(a)))
    out["elementwise"] = (lambda: sess.run(y, {x: a}), lambda: np.asarray(f(a)))

    g = tn.Graph()
    with g.as_default():
        x2 = tn.placeholder(tn.float32, [4], name="x")
        v = tn.Variable(np.zeros(4, np.float32), name="v")
        upd = v.assign_add(x2)
    vsess = tn.Session(g, backend="fast")
    state = {"v": jnp.zeros(4, jnp.float32)}
    fv = jax.jit(lambda s, d: s + d, donate_argnums=0)

    def hand_var() -> Any:
        state["v"] = fv(state["v"], a)
        return np.asarray(state["v"])

    out["variable"] = (lambda: vsess.run(upd, {x2: a}), hand_var)
    # the same graph through the partitioned backend, every node on its one device: the one-device tier
    psess = tn.Session(g, backend="fast", devices=["cpu:0"])
    pstate = {"v": jnp.zeros(4, jnp.float32)}

    def hand_var_placed() -> Any:
        pstate["v"] = fv(pstate["v"], a)
        return np.asarray(pstate["v"])

    out["variable, devices=[cpu:0]"] = (lambda: psess.run(upd, {x2: a}), hand_var_placed)

    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        k = tn.placeholder(tn.int32, [], name="k")
        _, s = tn.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + (i + 7) // k),
                             [tn.constant(0), tn.constant(0)])
    lsess = tn.Session(g, backend="fast")

    @jax.jit
    def hand_loop(nv: Any, kv: Any) -> Any:
        return jax.lax.while_loop(lambda c: c[0] < nv, lambda c: (c[0] + 1, c[1] + (c[0] + 7) // kv),
                                  (jnp.int32(0), jnp.int32(0)))[1]

    nv, kv = np.int32(8), np.int32(3)
    assert int(lsess.run(s, {n: nv, k: kv})) == int(hand_loop(nv, kv))
    out["checked_loop"] = (lambda: lsess.run(s, {n: nv, k: kv}), lambda: np.asarray(hand_loop(nv, kv)))

    g = tn.Graph()
    with g.as_default():
        m = tn.placeholder(tn.int32, [], name="m")
        xs = tn.placeholder(tn.float32, [], name="x")
        filled = tn.fill(tn.reshape(m, [1]), xs) * 2.0
    ssess = tn.Session(g, backend="fast")
    ffill = jax.jit(lambda mv, xv: jnp.full((mv,), xv) * 2.0, static_argnums=0)
    mv, xv = 4, np.float32(1.5)
    np.testing.assert_allclose(ssess.run(filled, {m: mv, xs: xv}), np.asarray(ffill(mv, xv)))
    out["specialised (fed length)"] = (lambda: ssess.run(filled, {m: mv, xs: xv}), lambda: np.asarray(ffill(mv, xv)))
    out["training_step"] = _training_step()
    out["rnn_training_step"] = _rnn_training_step()
    return out


def rnn_training_graph() -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Node, np.ndarray, np.ndarray]:
    """The two-step tanh RNN (batch 4, width 8) trained by SGD that ``rnn_training_step`` times:
    ``(graph, x, loss, train_op, xs, w0)``, with the fed sequence ``xs`` and the weights' initial
    value ``w0``. ``tests/test_fast_counted_stacks.py`` runs the same step on both backends."""
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(2, 4, 8)).astype(np.float32)
    w0 = (rng.normal(size=(8, 8)) * 0.1).astype(np.float32)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2, 4, 8], name="x")
        w = tn.Variable(w0, name="w")
        h = tn.foldl(lambda h, e: tn.tanh(tn.matmul(h, w.read()) + e), x, initializer=tn.zeros([4, 8], tn.float32))
        loss = tn.reduce_sum(h * h)
        step = tn.train.SGD(0.01).minimize(loss)
    return g, x, loss, step, xs, w0


def _rnn_training_step() -> tuple[Callable[[], Any], Callable[[], Any]]:
    """``sess.run([loss, train_op])`` of a two-step tanh RNN (batch 4, width 8) trained by SGD: a
    gradient through a loop, so the fast backend's fused stage with its gradient stacks (not the
    ``Direct`` call), beside ``jax.value_and_grad`` of a ``lax.scan`` twin. Each side is run once and
    checked against the other."""
    import jax
    import jax.numpy as jnp

    g, x, loss, step, xs, w0 = rnn_training_graph()
    sess = tn.Session(g, backend="fast")

    def loss_fn(wv: Any, xv: Any) -> Any:
        hv, _ = jax.lax.scan(lambda c, e: (jnp.tanh(c @ wv + e), None), jnp.zeros((4, 8), jnp.float32), xv)
        return jnp.sum(hv * hv)

    def hand_step(wv: Any, xv: Any) -> Any:
        lv, gw = jax.value_and_grad(loss_fn)(wv, xv)
        return lv, wv - 0.01 * gw

    hand = jax.jit(hand_step, donate_argnums=0)
    state = {"w": jnp.asarray(w0)}

    def hand_run() -> Any:
        lv, state["w"] = hand(state["w"], xs)
        return np.asarray(lv)

    def ours() -> Any:
        return sess.run([loss, step], {x: xs})

    np.testing.assert_allclose(ours()[0], hand_run(), rtol=1e-5)
    return ours, hand_run


def _training_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The training step's batch (32 rows of 8 inputs, 32 targets) and initial parameters."""
    rng = np.random.default_rng(0)
    xb, yb = rng.normal(size=(32, 8)).astype(np.float32), rng.normal(size=32).astype(np.float32)
    return xb, yb, np.full((8, 16), 0.1, np.float32), np.full(16, 0.1, np.float32)


def training_step_turnout() -> Callable[[], Any]:
    """``sess.run([loss, train_op], feeds)`` of a one-layer regression (batch 32, 8 inputs, 16 hidden
    units, SGD) on the fast backend, built and not yet run. The fetch holds an op, which the session
    fetches as ``None``. ``benchmarks/first_run.py`` times its first run."""
    xb, yb, w0, v0 = _training_data()
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [32, 8], name="x")
        y = tn.placeholder(tn.float32, [32], name="y")
        w, v = tn.Variable(w0, name="w"), tn.Variable(v0, name="v")
        err = tn.reduce_sum(tn.tanh(tn.matmul(x, w.read())) * v.read(), axis=1) - y
        loss = tn.reduce_mean(err * err)
        step = tn.train.SGD(0.01).minimize(loss)
    sess = tn.Session(g, backend="fast")
    return lambda: sess.run([loss, step], {x: xb, y: yb})


def training_step_jax() -> Callable[[], Any]:
    """The same step in JAX: ``jax.value_and_grad`` and the update in one jitted function that
    donates the parameters, each call returning the loss on the host; built and not yet run."""
    import jax
    import jax.numpy as jnp

    xb, yb, w0, v0 = _training_data()

    def loss_fn(params: Any, xv: Any, yv: Any) -> Any:
        wv, vv = params
        e = jnp.sum(jnp.tanh(xv @ wv) * vv, axis=1) - yv
        return jnp.mean(e * e)

    def hand_step(params: Any, xv: Any, yv: Any) -> Any:
        lv, grads = jax.value_and_grad(loss_fn)(params, xv, yv)
        return lv, jax.tree_util.tree_map(lambda p, gr: p - 0.01 * gr, params, grads)

    hand = jax.jit(hand_step, donate_argnums=0)
    state = {"p": (jnp.asarray(w0), jnp.asarray(v0))}

    def hand_run() -> Any:
        lv, state["p"] = hand(state["p"], xb, yb)
        return np.asarray(lv)

    return hand_run


def _training_step() -> tuple[Callable[[], Any], Callable[[], Any]]:
    """The two sides of the training step, each run once and checked against the other."""
    ours, hand_run = training_step_turnout(), training_step_jax()
    np.testing.assert_allclose(ours()[0], hand_run(), rtol=1e-5)
    return ours, hand_run


def run(quick: bool) -> dict[str, Any]:
    calls, blocks = (200, 5) if quick else (1000, 15)
    rows = {}
    for name, (fa, fb) in _programs().items():
        t, j = _per_call(fa, fb, calls, blocks)
        rows[name] = {"turnout_us": t * 1e6, "jax_us": j * 1e6, "ratio": t / j}
    return {"name": "run_overhead", "calls_per_block": calls, "blocks": blocks, "rows": rows}


def table(res: dict[str, Any]) -> str:
    lines = ["| program | Session.run (us) | jitted JAX + np.asarray (us) | ratio |", "|---|---|---|---|"]
    for name, r in res["rows"].items():
        lines.append(f"| {name} | {r['turnout_us']:.1f} | {r['jax_us']:.1f} | {r['ratio']:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(run("--quick" in sys.argv)))
