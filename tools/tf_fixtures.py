"""Write the TensorFlow-produced GraphDef fixtures under tests/data/tf/ (run where TensorFlow is installed).

Each case builds a TensorFlow v1 graph (graph mode, control flow v1, TensorArrayV3, resource
variables), runs it in a ``tf.compat.v1.Session`` and writes ``<case>.pbtxt`` (the GraphDef as text)
and ``<case>.json`` (the runs: feeds by tensor name, fetched tensor names, TensorFlow's values).
tests/test_graphdef_import.py replays the runs on every Turnout backend without TensorFlow.

    python tools/tf_fixtures.py [--out tests/data/tf] [--check] [CASE ...]

Named cases are the only ones written (or checked); without names, every case. ``--check`` writes
nothing: it re-runs every case in TensorFlow and compares with the checked-in values.
TensorFlow is not a dependency of Turnout; this script is the only place that imports it. The model
families need TF1's RNN cells, which TensorFlow 2.16 and later take from the ``tf_keras`` package.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# the helpers the op-coverage cases share live in a module of their own, beside this one
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tf_fixture_helpers import _seeded, _train_runs, _weights  # noqa: E402

CASES: dict[str, Callable[[Any], list[dict[str, Any]]]] = {}


def case(fn: Callable[[Any], list[dict[str, Any]]]) -> Callable[[Any], list[dict[str, Any]]]:
    CASES[fn.__name__] = fn
    return fn


@case
def while_simple(tf: Any) -> list[dict[str, Any]]:
    x = tf.compat.v1.placeholder(tf.float32, [], name="x")
    _, y = tf.while_loop(lambda i, y: i < 10, lambda i, y: (i + 1, y * 2.0), [tf.constant(0), x])
    return [{"feeds": {"x:0": 3.0}, "fetches": [y.name]}]


@case
def while_nested(tf: Any) -> list[dict[str, Any]]:
    n = tf.compat.v1.placeholder(tf.int32, [], name="n")

    def outer(i: Any, acc: Any) -> Any:
        _, inner = tf.while_loop(lambda j, a: j < i + 1, lambda j, a: (j + 1, a + j * i), [0, acc])
        return i + 1, inner

    _, acc = tf.while_loop(lambda i, a: i < n, outer, [0, 0])
    return [{"feeds": {"n:0": k}, "fetches": [acc.name]} for k in (0, 1, 4)]


@case
def cond_simple(tf: Any) -> list[dict[str, Any]]:
    x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
    y = tf.cond(tf.reduce_sum(x) > 0.0, lambda: x * 2.0, lambda: x - 1.0)
    return [{"feeds": {"x:0": v}, "fetches": [y.name]} for v in ([1.0, 2.0], [-3.0, 1.0])]


@case
def cond_in_while(tf: Any) -> list[dict[str, Any]]:
    n = tf.compat.v1.placeholder(tf.int32, [], name="n")

    def body(i: Any, s: Any) -> Any:
        s2 = tf.cond(tf.equal(tf.math.floormod(i, 2), 0), lambda: s + tf.cast(i, tf.float32), lambda: s * 1.5)
        return i + 1, s2

    _, s = tf.while_loop(lambda i, s: i < n, body, [0, 1.0])
    return [{"feeds": {"n:0": k}, "fetches": [s.name]} for k in (0, 5)]


@case
def while_in_cond(tf: Any) -> list[dict[str, Any]]:
    x = tf.compat.v1.placeholder(tf.float32, [], name="x")

    def looping() -> Any:
        return tf.while_loop(lambda v: v < 100.0, lambda v: v * 3.0, [x])

    y = tf.cond(x > 0.0, lambda: looping()[0], lambda: -x)
    return [{"feeds": {"x:0": v}, "fetches": [y.name]} for v in (2.0, -4.0)]


@case
def tensor_array_loop(tf: Any) -> list[dict[str, Any]]:
    n = tf.compat.v1.placeholder(tf.int32, [], name="n")
    ta = tf.TensorArray(tf.float32, size=n, element_shape=[2])

    def body(i: Any, ta: Any) -> Any:
        f = tf.cast(i, tf.float32)
        return i + 1, ta.write(i, tf.stack([f, f * f]))

    _, ta = tf.while_loop(lambda i, ta: i < n, body, [0, ta])
    out = ta.stack()
    return [{"feeds": {"n:0": 4}, "fetches": [out.name]}]


@case
def scan_map_fn(tf: Any) -> list[dict[str, Any]]:
    x = tf.compat.v1.placeholder(tf.float32, [5], name="x")
    c = tf.scan(lambda a, v: a * 0.5 + v, x, initializer=tf.constant(1.0))
    m = tf.map_fn(lambda v: v * v + 1.0, x)
    return [{"feeds": {"x:0": [1.0, 2.0, 3.0, -1.0, 0.5]}, "fetches": [c.name, m.name]}]


@case
def grad_while(tf: Any) -> list[dict[str, Any]]:
    x = tf.compat.v1.placeholder(tf.float32, [], name="x")
    n = tf.compat.v1.placeholder(tf.int32, [], name="n")
    _, y = tf.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tf.tanh(y * x) + y), [0, x])
    (g,) = tf.gradients(y, [x])
    return [{"feeds": {"x:0": 0.7, "n:0": k}, "fetches": [y.name, g.name]} for k in (0, 3)]


@case
def grad_nested_while(tf: Any) -> list[dict[str, Any]]:
    x = tf.compat.v1.placeholder(tf.float32, [], name="x")

    def outer(i: Any, y: Any) -> Any:
        _, y2 = tf.while_loop(lambda j, v: j < i, lambda j, v: (j + 1, v * x), [0, y])
        return i + 1, y2 + 1.0

    _, y = tf.while_loop(lambda i, y: i < 3, outer, [0, x])
    (g,) = tf.gradients(y, [x])
    return [{"feeds": {"x:0": 1.1}, "fetches": [y.name, g.name]}]


@case
def grad_cond_in_while(tf: Any) -> list[dict[str, Any]]:
    x = tf.compat.v1.placeholder(tf.float32, [], name="x")

    def body(i: Any, y: Any) -> Any:
        return i + 1, tf.cond(i < 2, lambda: y * x, lambda: y + x)

    _, y = tf.while_loop(lambda i, y: i < 4, body, [0, x])
    (g,) = tf.gradients(y, [x])
    return [{"feeds": {"x:0": 1.5}, "fetches": [y.name, g.name]}]


@case
def grad_scan(tf: Any) -> list[dict[str, Any]]:
    x = tf.compat.v1.placeholder(tf.float32, [4], name="x")
    c = tf.scan(lambda a, v: tf.tanh(a * v), x, initializer=tf.constant(0.5))
    loss = tf.reduce_sum(c)
    (g,) = tf.gradients(loss, [x])
    return [{"feeds": {"x:0": [1.0, -2.0, 0.5, 3.0]}, "fetches": [loss.name, g.name]}]


@case
def rnn_variables(tf: Any) -> list[dict[str, Any]]:
    """A tanh RNN over a run-time number of steps with resource Variables, one SGD step, its loss."""
    n = tf.compat.v1.placeholder(tf.int32, [], name="n")
    xs = tf.compat.v1.placeholder(tf.float32, [None, 1, 3], name="xs")
    rng = np.random.default_rng(0)
    w = tf.compat.v1.get_variable("w", initializer=rng.normal(size=(3, 4)).astype(np.float32) * 0.5)
    u = tf.compat.v1.get_variable("u", initializer=rng.normal(size=(4, 4)).astype(np.float32) * 0.5)
    steps = tf.compat.v1.get_variable("steps", initializer=tf.constant(0), trainable=False)

    def body(i: Any, h: Any) -> Any:
        return i + 1, tf.tanh(tf.matmul(xs[i], w) + tf.matmul(h, u))

    _, h = tf.while_loop(lambda i, h: i < n, body, [0, tf.zeros([1, 4])])
    loss = tf.reduce_sum(h * h)
    gw, gu = tf.gradients(loss, [w, u])
    train = tf.group(w.assign_sub(0.1 * gw), u.assign_sub(0.1 * gu), steps.assign_add(1))
    xv = rng.normal(size=(5, 1, 3)).astype(np.float32).tolist()
    feeds = {"n:0": 5, "xs:0": xv}
    return [
        {"feeds": feeds, "fetches": [loss.name, gw.name, gu.name]},
        {"feeds": feeds, "fetches": [], "targets": [train.name]},
        {"feeds": feeds, "fetches": [loss.name, steps.value().name]},
    ]


@case
def grad_map_fn(tf: Any) -> list[dict[str, Any]]:
    """The gradient of map_fn: its accumulator TensorArray has no element shape until written."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
    m = tf.map_fn(lambda v: tf.tanh(v) * tf.reduce_sum(v), x)
    loss = tf.reduce_sum(m * m)
    (g,) = tf.gradients(loss, [x])
    return [{"feeds": {"x:0": [[0.5, -1.0], [1.5, 0.2], [-0.3, 0.8], [2.0, -2.0]]}, "fetches": [loss.name, g.name]}]


@case
def grad_gather_in_loop(tf: Any) -> list[dict[str, Any]]:
    """The gradient of a gather inside a loop (an embedding lookup per step): an IndexedSlices
    gradient that tf.gradients densifies with a Reshape to a run-time shape."""
    ids = tf.compat.v1.placeholder(tf.int32, [None], name="ids")
    emb = tf.compat.v1.get_variable("emb", initializer=_weights((5, 3), 3))
    n = tf.shape(ids)[0]

    def body(i: Any, h: Any) -> Any:
        return i + 1, tf.tanh(h + tf.gather(emb, ids[i]))

    _, h = tf.while_loop(lambda i, h: i < n, body, [0, tf.zeros([3])])
    loss = tf.reduce_sum(h * h)
    (g,) = tf.gradients(loss, [emb])
    g = tf.convert_to_tensor(g)
    return [{"feeds": {"ids:0": k}, "fetches": [loss.name, g.name]} for k in ([0, 2, 2, 4], [1])]


@case
def while_shape_invariants(tf: Any) -> list[dict[str, Any]]:
    """A loop variable that grows each iteration, declared with ``shape_invariants``: TensorFlow
    records the Merge's shape as partly unknown."""
    n = tf.compat.v1.placeholder(tf.int32, [], name="n")
    x = tf.compat.v1.placeholder(tf.float32, [2], name="x")

    def body(i: Any, acc: Any) -> Any:
        return i + 1, tf.concat([acc, acc[-2:] * 2.0], axis=0)

    _, acc = tf.while_loop(lambda i, acc: i < n, body, [0, x],
                           shape_invariants=[tf.TensorShape([]), tf.TensorShape([None])])
    total = tf.reduce_sum(acc)
    return [{"feeds": {"n:0": k, "x:0": [1.0, -0.5]}, "fetches": [acc.name, total.name]} for k in (0, 3)]


@case
def grad_scan_foldl(tf: Any) -> list[dict[str, Any]]:
    """scan then foldl, differentiated: the gradient TensorArrays take the element shape their
    forward arrays declare."""
    x = tf.compat.v1.placeholder(tf.float32, [4, 2], name="x")
    c = tf.scan(lambda a, v: tf.tanh(a + v), x, initializer=tf.constant([0.1, -0.1]))
    f = tf.foldl(lambda a, v: a * 0.5 + tf.reduce_sum(v * v), c, initializer=tf.constant(0.0))
    (g,) = tf.gradients(f, [x])
    return [{"feeds": {"x:0": [[1.0, -2.0], [0.5, 3.0], [0.2, 0.1], [-1.0, 0.4]]}, "fetches": [f.name, g.name]}]


@case
def grad_dynamic_tensor_array(tf: Any) -> list[dict[str, Any]]:
    """A TensorArray of dynamic size (size 0, grown by its writes, as the decoders' outputs are) written
    in a loop of fed length, stacked and differentiated: its gradient array has the forward's size."""
    x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
    n = tf.compat.v1.placeholder(tf.int32, [], name="n")
    ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True, element_shape=[3])

    def body(i: Any, h: Any, ta: Any) -> Any:
        h = tf.tanh(h * x + tf.cast(i, tf.float32) * 0.1)
        return i + 1, h, ta.write(i, h * h)

    _, h, ta = tf.while_loop(lambda i, h, ta: i < n, body, [0, x, ta])
    out = ta.stack()
    loss = tf.reduce_sum(out) + tf.reduce_sum(h)
    (g,) = tf.gradients(loss, [x])
    return [{"feeds": {"x:0": [0.5, -1.0, 0.25], "n:0": k}, "fetches": [out.name, loss.name, g.name]}
            for k in (1, 4)]


# ---- TF1 model families (issue 38): built with tf.compat.v1's high-level APIs, trained three steps ----
def _lstm_training(tf: Any, optimizer: Any, known_sizes: bool, rnn_device: str | None = None,
                   ) -> list[dict[str, Any]]:
    """``nn.dynamic_rnn`` over an LSTMCell with a fed ``sequence_length``, a squared-error loss on the
    outputs and the final state, minimized by ``optimizer``. Without ``known_sizes`` the batch and
    time dimensions are None, as TF1 models usually declare them. ``rnn_device`` scopes the RNN."""
    batch, time, depth, hidden = 3, 5, 3, 4
    b, t = (batch, time) if known_sizes else (None, None)
    x = tf.compat.v1.placeholder(tf.float32, [b, t, depth], name="x")
    seq = tf.compat.v1.placeholder(tf.int32, [b], name="seq")
    y = tf.compat.v1.placeholder(tf.float32, [b, t, hidden], name="y")
    kernel = tf.compat.v1.constant_initializer(_weights((depth + hidden, 4 * hidden), 1))
    cell = tf.compat.v1.nn.rnn_cell.LSTMCell(hidden, initializer=kernel)
    with tf.device(rnn_device):
        out, state = tf.compat.v1.nn.dynamic_rnn(cell, x, sequence_length=seq, dtype=tf.float32, scope="rnn")
    loss = tf.reduce_mean(tf.square(out - y)) + 0.5 * tf.reduce_mean(state.c)
    train = optimizer.minimize(loss)
    rng = np.random.default_rng(2)
    feeds = {"x:0": rng.normal(size=(batch, time, depth)).astype(np.float32),
             "seq:0": np.asarray([5, 2, 3], np.int32),
             "y:0": rng.normal(size=(batch, time, hidden)).astype(np.float32) * 0.5}
    return _train_runs(feeds, loss, train, [v.value() for v in tf.compat.v1.global_variables()])


@case
def lstm_sgd(tf: Any) -> list[dict[str, Any]]:
    return _lstm_training(tf, tf.compat.v1.train.GradientDescentOptimizer(0.5), known_sizes=True)


@case
def lstm_adam(tf: Any) -> list[dict[str, Any]]:
    return _lstm_training(tf, tf.compat.v1.train.AdamOptimizer(0.05), known_sizes=False)


@case
def bigru_rmsprop(tf: Any) -> list[dict[str, Any]]:
    """A ``bidirectional_dynamic_rnn`` of GRU cells (ReverseSequence) with a fed ``sequence_length``,
    trained by RMSProp."""
    batch, depth, hidden = 3, 2, 3
    x = tf.compat.v1.placeholder(tf.float32, [None, None, depth], name="x")
    seq = tf.compat.v1.placeholder(tf.int32, [None], name="seq")
    fw = tf.compat.v1.nn.rnn_cell.GRUCell(hidden, kernel_initializer=_seeded(tf, 4))
    bw = tf.compat.v1.nn.rnn_cell.GRUCell(hidden, kernel_initializer=_seeded(tf, 5))
    (of, ob), _ = tf.compat.v1.nn.bidirectional_dynamic_rnn(fw, bw, x, sequence_length=seq, dtype=tf.float32)
    loss = tf.reduce_mean(tf.square(of - 0.3)) + tf.reduce_mean(tf.square(ob + 0.2))
    train = tf.compat.v1.train.RMSPropOptimizer(0.05, momentum=0.5).minimize(loss)
    rng = np.random.default_rng(6)
    feeds = {"x:0": rng.normal(size=(batch, 4, depth)).astype(np.float32), "seq:0": np.asarray([4, 1, 3], np.int32)}
    return _train_runs(feeds, loss, train, [v.value() for v in tf.compat.v1.global_variables()])


@case
def multi_lstm_momentum(tf: Any) -> list[dict[str, Any]]:
    """A ``MultiRNNCell`` of two LSTM layers under ``dynamic_rnn``, a softmax classifier on the last
    output (SparseSoftmaxCrossEntropyWithLogits), trained by Momentum (Nesterov)."""
    batch, depth, hidden, classes = 3, 2, 3, 4
    x = tf.compat.v1.placeholder(tf.float32, [None, None, depth], name="x")
    labels = tf.compat.v1.placeholder(tf.int32, [None], name="labels")
    cells = [tf.compat.v1.nn.rnn_cell.LSTMCell(hidden, initializer=_seeded(tf, 7 + k)) for k in range(2)]
    out, _ = tf.compat.v1.nn.dynamic_rnn(tf.compat.v1.nn.rnn_cell.MultiRNNCell(cells), x, dtype=tf.float32)
    w = tf.compat.v1.get_variable("w_out", initializer=_weights((hidden, classes), 9))
    logits = tf.matmul(out[:, -1], w)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    train = tf.compat.v1.train.MomentumOptimizer(0.2, 0.9, use_nesterov=True).minimize(loss)
    rng = np.random.default_rng(10)
    feeds = {"x:0": rng.normal(size=(batch, 4, depth)).astype(np.float32), "labels:0": np.asarray([0, 3, 1], np.int32)}
    return _train_runs(feeds, loss, train, [v.value() for v in tf.compat.v1.global_variables()])


@case
def softmax_adagrad(tf: Any) -> list[dict[str, Any]]:
    """A dense softmax classifier: Softmax, LogSoftmax, SoftmaxCrossEntropyWithLogits, ArgMax/ArgMin
    accuracy, an Assert on the inputs, trained by Adagrad."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 4], name="y")
    w = tf.compat.v1.get_variable("w", initializer=_weights((3, 4), 11))
    b = tf.compat.v1.get_variable("b", initializer=tf.zeros([4]))
    checked = tf.compat.v1.Assert(tf.reduce_all(tf.math.is_finite(x)) if False else tf.reduce_all(x < 100.0),
                                  ["inputs must be below 100, got", x], name="check")
    with tf.control_dependencies([checked]):
        logits = tf.nn.bias_add(tf.matmul(x, w), b)
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits))
    loss += 0.1 * tf.reduce_mean(-tf.nn.log_softmax(logits)[:, 0]) + 0.1 * tf.reduce_max(tf.nn.softmax(logits))
    hits = tf.equal(tf.argmax(logits, 1), tf.argmax(y, 1))
    acc = tf.reduce_mean(tf.cast(hits, tf.float32), name="accuracy")
    worst = tf.argmin(logits, 1, output_type=tf.int32, name="worst")
    train = tf.compat.v1.train.AdagradOptimizer(0.3).minimize(loss)
    rng = np.random.default_rng(12)
    feeds = {"x:0": rng.normal(size=(5, 3)).astype(np.float32),
             "y:0": np.eye(4, dtype=np.float32)[[0, 1, 3, 3, 2]]}
    runs = _train_runs(feeds, loss, train, [w.value(), b.value(), acc, worst])
    bad = {"x:0": np.full((2, 3), 200.0, np.float32), "y:0": np.eye(4, dtype=np.float32)[[0, 1]]}
    return runs + [{"feeds": bad, "fetches": [loss.name], "error": "inputs must be below 100"}]


@case
def greedy_decoder(tf: Any) -> list[dict[str, Any]]:
    """A ``while_loop`` greedy decoder that stops when every row has emitted its end token: an
    embedding lookup (ResourceGather), ArgMax, All, and a TensorArray of dynamic size."""
    vocab, hidden, end = 6, 4, 0
    start = tf.compat.v1.placeholder(tf.int32, [None], name="start")
    emb = tf.compat.v1.get_variable("emb", initializer=_weights((vocab, hidden), 17, 1.0))
    w = tf.compat.v1.get_variable("w", initializer=_weights((hidden, vocab), 41, 1.0))
    batch = tf.shape(start)[0]
    out = tf.TensorArray(tf.int32, size=0, dynamic_size=True)

    def body(t: Any, tok: Any, done: Any, h: Any, out: Any) -> Any:
        h = tf.tanh(tf.nn.embedding_lookup(emb, tok) + h)
        nxt = tf.argmax(tf.matmul(h, w), axis=1, output_type=tf.int32)
        nxt = tf.where(done, tf.fill([batch], end), nxt)
        return t + 1, nxt, tf.logical_or(done, tf.equal(nxt, end)), h, out.write(t, nxt)

    cond = lambda t, tok, done, h, out: tf.logical_and(t < 8, tf.logical_not(tf.reduce_all(done)))  # noqa: E731
    _, _, _, _, out = tf.while_loop(cond, body, [0, start, tf.fill([batch], False), tf.zeros([batch, hidden]), out])
    tokens = tf.transpose(out.stack(), name="tokens")
    return [{"feeds": {"start:0": s}, "fetches": [tokens.name]} for s in ([1, 2, 3], [4], [5, 5])]


@case
def raw_rnn_decoder(tf: Any) -> list[dict[str, Any]]:
    """A ``raw_rnn`` greedy decoder over an LSTMCell: each step feeds back the embedding of its
    argmax token and a row finishes when it emits the end token (dynamic-size TensorArrays)."""
    vocab, hidden, end, max_steps = 6, 4, 0, 7
    start = tf.compat.v1.placeholder(tf.int32, [None], name="start")
    emb = tf.compat.v1.get_variable("emb", initializer=_weights((vocab, 3), 24, 1.5))
    w = tf.compat.v1.get_variable("w", initializer=_weights((hidden, vocab), 25, 1.5))
    cell = tf.compat.v1.nn.rnn_cell.LSTMCell(hidden, initializer=_seeded(tf, 23))
    batch = tf.shape(start)[0]

    def loop_fn(time: Any, output: Any, state: Any, loop_state: Any) -> Any:
        if output is None:  # the first call: the start tokens
            return (tf.zeros([batch], tf.bool), tf.nn.embedding_lookup(emb, start),
                    cell.zero_state(batch, tf.float32), None, None)
        token = tf.argmax(tf.matmul(output, w), axis=1, output_type=tf.int32)
        finished = tf.logical_or(tf.equal(token, end), time >= max_steps)
        return finished, tf.nn.embedding_lookup(emb, token), state, output, None

    outputs, _, _ = tf.compat.v1.nn.raw_rnn(cell, loop_fn)
    logits = tf.identity(outputs.stack(), name="outputs")
    return [{"feeds": {"start:0": s}, "fetches": [logits.name]} for s in ([1, 2, 3], [4, 5])]


@case
def beam_search(tf: Any) -> list[dict[str, Any]]:
    """A beam search with ``top_k``: each step scores every (beam, token) pair, keeps the best ``k``
    (TopKV2), and follows the back-pointers (FloorDiv, FloorMod, gathers) of a TensorArray."""
    vocab, hidden, k, steps = 5, 3, 2, 4
    start = tf.compat.v1.placeholder(tf.int32, [], name="start")
    emb = tf.constant(_weights((vocab, hidden), 15, 1.0))
    w = tf.constant(_weights((hidden, vocab), 16, 1.0))
    tokens0 = tf.fill([k], start)
    scores0 = tf.constant([0.0] + [-1e9] * (k - 1))
    ta = tf.TensorArray(tf.int32, size=steps)

    def body(t: Any, tok: Any, score: Any, h: Any, ta: Any) -> Any:
        h = tf.tanh(tf.gather(emb, tok) + h)
        logp = tf.nn.log_softmax(tf.matmul(h, w))
        total = tf.reshape(tf.expand_dims(score, 1) + logp, [-1])
        best, idx = tf.nn.top_k(total, k=k)
        beam, nxt = idx // vocab, idx % vocab
        return t + 1, nxt, best, tf.gather(h, beam), ta.write(t, tf.stack([beam, nxt]))

    _, tok, score, _, ta = tf.while_loop(lambda t, *_: t < steps, body,
                                         [0, tokens0, scores0, tf.zeros([k, hidden]), ta])
    history = ta.stack(name="history")
    return [{"feeds": {"start:0": s}, "fetches": [score.name, tok.name, history.name]} for s in (1, 3)]


@case
def reference_variables(tf: Any) -> list[dict[str, Any]]:
    """A model with TF1's default reference variables (VariableV2, Assign, Ref* control flow): a tanh
    RNN over a run-time number of steps that counts its iterations in a Variable (RefEnter), trained
    by plain SGD (ApplyGradientDescent), with a step counter (AssignAdd) and a decay that a cond
    applies from the second step on (RefSwitch, AssignSub)."""
    n = tf.compat.v1.placeholder(tf.int32, [], name="n")
    xs = tf.compat.v1.placeholder(tf.float32, [None, 1, 2], name="xs")
    w = tf.compat.v1.Variable(_weights((2, 3), 17), name="w", use_resource=False)
    u = tf.compat.v1.Variable(_weights((3, 3), 18), name="u", use_resource=False)
    count = tf.compat.v1.Variable(0, name="count", use_resource=False)
    scale = tf.compat.v1.Variable(1.0, name="scale", use_resource=False)
    ticks = tf.compat.v1.Variable(0, name="ticks", use_resource=False)

    def body(i: Any, h: Any) -> Any:
        with tf.control_dependencies([tf.compat.v1.assign_add(ticks, 1)]):
            return i + 1, tf.tanh(tf.matmul(xs[i], w) + tf.matmul(h, u))

    _, h = tf.while_loop(lambda i, h: i < n, body, [0, tf.zeros([1, 3])])
    loss = tf.reduce_sum(h * h) * scale
    opt = tf.compat.v1.train.GradientDescentOptimizer(0.3).minimize(loss, var_list=[w, u])
    with tf.control_dependencies([opt]):
        counted = tf.compat.v1.assign_add(count, 1)
        decayed = tf.cond(counted > 1, lambda: tf.compat.v1.assign_sub(scale, 0.1), lambda: tf.identity(scale))
        train = tf.group(counted, decayed)
    rng = np.random.default_rng(19)
    feeds = {"n:0": 4, "xs:0": rng.normal(size=(4, 1, 2)).astype(np.float32)}
    # the loop's iterations counted, fetched alone: a ref fetched beside the loss that updates it
    # would read whenever TensorFlow's executor gets to it
    return _train_runs(feeds, loss, train, [w, u, count, scale]) + [{"feeds": feeds, "fetches": [ticks.name]}]


@case
def optimizers_reference(tf: Any) -> list[dict[str, Any]]:
    """Every TF1 optimizer's reference form (ApplyMomentum, ApplyAdam, ApplyRMSProp, ApplyAdagrad,
    ApplyGradientDescent), each training its own reference variable on one least-squares loss."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 2], name="y")
    opts = {"sgd": tf.compat.v1.train.GradientDescentOptimizer(0.1),
            "momentum": tf.compat.v1.train.MomentumOptimizer(0.1, 0.9),
            "adam": tf.compat.v1.train.AdamOptimizer(0.1),
            "rmsprop": tf.compat.v1.train.RMSPropOptimizer(0.05),
            "adagrad": tf.compat.v1.train.AdagradOptimizer(0.2)}
    losses, steps, ws = [], [], []
    for k, (name, opt) in enumerate(opts.items()):
        w = tf.compat.v1.Variable(_weights((3, 2), 30 + k), name=f"w_{name}", use_resource=False)
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y), name=f"loss_{name}")
        losses.append(loss)
        steps.append(opt.minimize(loss))
        ws.append(w)
    total = tf.add_n(losses, name="total")
    train = tf.group(*steps)
    rng = np.random.default_rng(31)
    feeds = {"x:0": rng.normal(size=(4, 3)).astype(np.float32), "y:0": rng.normal(size=(4, 2)).astype(np.float32)}
    return _train_runs(feeds, total, train, [*losses, *ws])


# ---- placement as TensorFlow had it (issue 38, item 4): device annotations on two CPU devices ----------
#: cases whose Session needs more than the default: two CPU devices, and TensorFlow's soft placement
#: where a resource op's device scope conflicts with its Variable's (TensorFlow then follows colocation)
SESSION_CONFIG: dict[str, dict[str, Any]] = {}


def placed(config: dict[str, Any]) -> Callable[[Callable[[Any], list[dict[str, Any]]]],
                                                Callable[[Any], list[dict[str, Any]]]]:
    def wrap(fn: Callable[[Any], list[dict[str, Any]]]) -> Callable[[Any], list[dict[str, Any]]]:
        SESSION_CONFIG[fn.__name__] = config
        return case(fn)

    return wrap


@placed({"device_count": {"CPU": 2}})
def placed_rnn(tf: Any) -> list[dict[str, Any]]:
    """A tanh RNN whose reference Variables and loss sit on ``/cpu:0`` and whose loop runs on
    ``/device:CPU:1`` (the loop reads the Variables across devices), trained by SGD: a placement
    TensorFlow accepts as written, with the full and the short device syntax."""
    with tf.device("/cpu:0"):
        n = tf.compat.v1.placeholder(tf.int32, [], name="n")
        xs = tf.compat.v1.placeholder(tf.float32, [None, 1, 2], name="xs")
        w = tf.compat.v1.Variable(_weights((2, 3), 41), name="w", use_resource=False)
        u = tf.compat.v1.Variable(_weights((3, 3), 42), name="u", use_resource=False)
    loss, train = _placed_rnn_sgd(tf, n, xs, w, u, "/job:localhost/replica:0/task:0/device:CPU:1")
    rng = np.random.default_rng(43)
    feeds = {"n:0": 4, "xs:0": rng.normal(size=(4, 1, 2)).astype(np.float32)}
    return _train_runs(feeds, loss, train, [w, u])


def _placed_rnn_sgd(tf: Any, n: Any, xs: Any, w: Any, u: Any, loop_device: str) -> tuple[Any, Any]:
    """The placed fixtures' small RNN: its loop on ``loop_device``, its loss and SGD step on
    ``/cpu:0``."""
    with tf.device(loop_device):
        def body(i: Any, h: Any) -> Any:
            return i + 1, tf.tanh(tf.matmul(xs[i], w) + tf.matmul(h, u))

        _, h = tf.while_loop(lambda i, h: i < n, body, [0, tf.zeros([1, 3])])
    with tf.device("/cpu:0"):
        loss = tf.reduce_sum(h * h, name="loss")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.3).minimize(loss)
    return loss, train


@placed({"device_count": {"CPU": 2}, "allow_soft_placement": True})
def placed_lstm_adam(tf: Any) -> list[dict[str, Any]]:
    """The ``dynamic_rnn`` LSTM trained by Adam with its RNN (Variables included) under ``/device:CPU:1``
    and the loss and optimizer under ``/device:CPU:0``: the optimizer's resource updates are scoped to
    CPU:0 but must sit with their Variables on CPU:1, a colocation conflict that TensorFlow resolves
    only with ``allow_soft_placement``."""
    with tf.device("/device:CPU:0"):
        return _lstm_training(tf, tf.compat.v1.train.AdamOptimizer(0.05), known_sizes=False,
                              rnn_device="/device:CPU:1")


@placed({"device_count": {"CPU": 2}, "allow_soft_placement": True})
def placed_gpu_fallback(tf: Any) -> list[dict[str, Any]]:
    """A model written for a GPU: its Variables and loop under ``/device:GPU:0``, its loss on
    ``/cpu:0``. On a machine without one, TensorFlow runs it only with ``allow_soft_placement`` (the
    GPU's ops go to the CPU), and so does Turnout with devices that list no GPU."""
    with tf.device("/device:GPU:0"):
        n = tf.compat.v1.placeholder(tf.int32, [], name="n")
        xs = tf.compat.v1.placeholder(tf.float32, [None, 1, 2], name="xs")
        w = tf.compat.v1.get_variable("w", initializer=_weights((2, 3), 44))
        u = tf.compat.v1.get_variable("u", initializer=_weights((3, 3), 45))
    loss, train = _placed_rnn_sgd(tf, n, xs, w, u, "/device:GPU:0")
    rng = np.random.default_rng(46)
    feeds = {"n:0": 3, "xs:0": rng.normal(size=(3, 1, 2)).astype(np.float32)}
    return _train_runs(feeds, loss, train, [w.value(), u.value()])


import tf_fixtures_ops  # noqa: E402  (element-wise math, activations and structure ops of TF1 models)

CASES.update(tf_fixtures_ops.CASES)

import tf_fixtures_models  # noqa: E402  (TF1 model patterns: dropout, clipping, sparse gradients, CNN, seq2seq)

CASES.update(tf_fixtures_models.CASES)

import tf_fixtures_tf1_code  # noqa: E402  (TF1 model code as written: default initializers, layers, keras, EMA)

CASES.update(tf_fixtures_tf1_code.CASES)

import tf_fixtures_v2  # noqa: E402  (control flow v2: While, If, Case, a tf.function call)

CASES.update(tf_fixtures_v2.CASES)

import tf_fixtures_more_ops  # noqa: E402  (mirror pads, block moves, diagonals, scatters: formulas over primitives)

CASES.update(tf_fixtures_more_ops.CASES)


def build(tf: Any, name: str, out: Path) -> tuple[str, list[dict[str, Any]]]:
    """The case's GraphDef as text and its runs with TensorFlow's values; a ``{"save": True}`` run
    (``_saved``) writes the Variables with ``tf.compat.v1.train.Saver`` under ``out`` at that point
    and records the prefix, relative to ``out``, as its ``checkpoint``."""
    g = tf.Graph()
    with g.as_default():
        runs = CASES[name](tf)
        init = tf.compat.v1.global_variables_initializer()
        saver = tf.compat.v1.train.Saver() if any("save" in r for r in runs) else None
    from google.protobuf import text_format

    config = tf.compat.v1.ConfigProto(**SESSION_CONFIG.get(name, {}))
    with tf.compat.v1.Session(graph=g, config=config) as sess:
        sess.run(init)
        for r in runs:
            if "save" in r:
                r["checkpoint"] = f"saver/{name}/model.ckpt"
                (out / r["checkpoint"]).parent.mkdir(parents=True, exist_ok=True)
                saver.save(sess, str(out / r["checkpoint"]), write_meta_graph=False, write_state=False)
                continue
            if "error" in r:  # a run that TensorFlow refuses (an Assert): the message must be TF's
                try:
                    sess.run(r["fetches"] + r.get("targets", []), feed_dict=r["feeds"])
                except tf.errors.InvalidArgumentError as e:
                    assert r["error"] in e.message, e.message
                    # the whole line TensorFlow printed (an Assert's data, as it shows them), which
                    # Turnout's error must contain word for word
                    r["error"] = next(line for line in e.message.split("\n") if r["error"] in line).strip()
                else:
                    raise AssertionError(f"{name}: the run was expected to fail")
                r["expected"] = []
                r["feeds"] = {k: np.asarray(v).tolist() for k, v in r["feeds"].items()}
                continue
            vals = sess.run(r["fetches"] + r.get("targets", []), feed_dict=r["feeds"])
            r["expected"] = [np.asarray(v).tolist() for v in vals[: len(r["fetches"])]]
            r["feeds"] = {k: np.asarray(v).tolist() for k, v in r["feeds"].items()}
    return text_format.MessageToString(g.as_graph_def()), runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests" / "data" / "tf"))
    ap.add_argument("--check", action="store_true", help="compare with the checked-in values, write nothing")
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    a = ap.parse_args(argv)
    # TF1's RNN cells live in the Keras 2 package (tf_keras), which TensorFlow uses when this is set
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    # TensorFlow's own CPU kernels refuse the gradient of a dilated convolution (Conv2DBackpropFilter
    # with a dilation above 1); its oneDNN kernels, on by default only on some processors, compute it
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    import tensorflow as tf

    tf.compat.v1.disable_v2_behavior()
    tf.compat.v1.enable_resource_variables()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    bad = 0
    import tempfile

    scratch = Path(tempfile.mkdtemp())  # (--check writes its checkpoints there)
    for name in a.cases or sorted(CASES):
        text, runs = build(tf, name, scratch if a.check else out)
        meta = {"tensorflow": tf.__version__, "runs": runs}
        if name in SESSION_CONFIG:
            meta["session_config"] = SESSION_CONFIG[name]
        if a.check:
            old = json.loads((out / f"{name}.json").read_text())
            for r_old, r_new in zip(old["runs"], runs):
                for e_old, e_new in zip(r_old.get("expected", []), r_new.get("expected", [])):
                    if not np.allclose(e_old, e_new, rtol=1e-5, atol=1e-6, equal_nan=True):
                        print(f"{name}: TensorFlow now gives {e_new}, the fixture says {e_old}")
                        bad += 1
            continue
        (out / f"{name}.pbtxt").write_text(text)
        (out / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
        print(f"{name}: {text.count('node {')} nodes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
