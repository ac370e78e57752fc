"""TensorFlow fixture cases for the TF1 model patterns the first families left out (tools/tf_fixtures.py
registers and writes them): dropout-wrapped stacked RNNs with gradient clipping and a decayed learning
rate, an RNN whose ``DropoutWrapper`` draws a mask at every time step, sparse (IndexedSlices)
embedding gradients under every optimizer, small CNNs with batch normalisation in both modes,
strided, dilated and padded windows and both poolings, loops with ``parallel_iterations`` and
``tf.case`` inside, an encoder and early-stopping greedy decoder, and the
gradient of a ``tf.scan`` RNN. Each is small: a few units, a few steps, so the replay on every
backend stays quick.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tf_fixture_helpers import _seeded, _train_runs, _weights, names

CASES: dict[str, Callable[[Any], list[dict[str, Any]]]] = {}


def case(fn: Callable[[Any], list[dict[str, Any]]]) -> Callable[[Any], list[dict[str, Any]]]:
    CASES[fn.__name__] = fn
    return fn


@case
def dropout_rnn_clip(tf: Any) -> list[dict[str, Any]]:
    """A ``MultiRNNCell`` of a ``BasicRNNCell`` and a ``GRUCell``, each in a ``DropoutWrapper`` that
    keeps everything (keep probability 1.0, how inference graphs are built: TensorFlow then draws no
    mask), under ``dynamic_rnn`` with a fed ``sequence_length``; the gradients clipped by
    ``clip_by_global_norm``, applied by SGD at an ``exponential_decay`` rate of the global step (an
    int64 Variable the update increments)."""
    batch, depth, hidden = 3, 2, 3
    x = tf.compat.v1.placeholder(tf.float32, [None, None, depth], name="x")
    seq = tf.compat.v1.placeholder(tf.int32, [None], name="seq")
    cells = [tf.compat.v1.nn.rnn_cell.BasicRNNCell(hidden), tf.compat.v1.nn.rnn_cell.GRUCell(hidden)]
    cells = [tf.compat.v1.nn.rnn_cell.DropoutWrapper(c, input_keep_prob=1.0, output_keep_prob=1.0) for c in cells]
    with tf.compat.v1.variable_scope("rnn", initializer=_seeded(tf, 90)):
        out, state = tf.compat.v1.nn.dynamic_rnn(tf.compat.v1.nn.rnn_cell.MultiRNNCell(cells), x,
                                                 sequence_length=seq, dtype=tf.float32)
    loss = tf.reduce_mean(tf.square(out - 0.25)) + tf.reduce_mean(state[1])
    step = tf.compat.v1.train.get_or_create_global_step()
    rate = tf.compat.v1.train.exponential_decay(0.5, step, 2, 0.5, staircase=True)
    tvars = tf.compat.v1.trainable_variables()
    grads, norm = tf.clip_by_global_norm(tf.gradients(loss, tvars), 0.3)
    train = tf.compat.v1.train.GradientDescentOptimizer(rate).apply_gradients(zip(grads, tvars), global_step=step)
    rng = np.random.default_rng(91)
    feeds = {"x:0": rng.normal(size=(batch, 4, depth)).astype(np.float32), "seq:0": np.asarray([4, 2, 3], np.int32)}
    runs = _train_runs(feeds, loss, train, [*(v.value() for v in tvars), step.value()])
    return runs + [{"feeds": feeds, "fetches": [norm.name, rate.name]}]


@case
def loss_scaled_skip_step(tf: Any) -> list[dict[str, Any]]:
    """Mixed precision's dynamic loss scaling, written out as TF1 code did before
    ``LossScaleOptimizer``: a tanh RNN's loss multiplied by a fed scale, the gradients unscaled, and
    the SGD update applied only under ``tf.cond`` where ``is_finite`` holds for every gradient
    (otherwise a counter of skipped steps grows); ``is_nan`` and ``is_inf`` of the gradients fetched.
    A scale of 3e38 overflows a scaled gradient to inf, an infinite one makes NaNs (both steps are
    skipped); a scale of 128 does not."""
    n = tf.compat.v1.placeholder(tf.int32, [], name="n")
    scale = tf.compat.v1.placeholder(tf.float32, [], name="scale")
    xs = tf.compat.v1.placeholder(tf.float32, [None, 2, 3], name="xs")
    w = tf.compat.v1.get_variable("w", initializer=_weights((3, 4), 95, 2.0))
    u = tf.compat.v1.get_variable("u", initializer=_weights((4, 4), 96))
    skipped = tf.compat.v1.get_variable("skipped", initializer=tf.constant(0), trainable=False)

    def body(i: Any, h: Any) -> Any:
        return i + 1, tf.tanh(tf.matmul(xs[i], w) + tf.matmul(h, u))

    _, h = tf.while_loop(lambda i, h: i < n, body, [0, tf.zeros([2, 4])])
    loss = tf.reduce_sum(h * h) + 1.0
    grads = [g / scale for g in tf.gradients(loss * scale, [w, u])]
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
    nan = tf.reduce_any([tf.reduce_any(tf.math.is_nan(g)) for g in grads])
    inf = tf.reduce_any([tf.reduce_any(tf.math.is_inf(g)) for g in grads])

    def apply() -> Any:
        with tf.control_dependencies([w.assign_sub(0.1 * grads[0]), u.assign_sub(0.1 * grads[1])]):
            return tf.constant(True)

    def skip() -> Any:
        with tf.control_dependencies([skipped.assign_add(1)]):
            return tf.constant(False)

    step = tf.cond(finite, apply, skip)
    xv = np.random.default_rng(97).normal(size=(5, 2, 3)).astype(np.float32)
    runs: list[dict[str, Any]] = []
    for s in (128.0, 3e38, float("inf"), 128.0):
        feeds = {"n:0": 5, "xs:0": xv, "scale:0": s}
        runs.append({"feeds": feeds, "fetches": [loss.name, nan.name, inf.name, finite.name, step.name]})
    runs.append({"feeds": {"n:0": 5, "xs:0": xv, "scale:0": 1.0},
                 "fetches": [loss.name, w.value().name, u.value().name, skipped.value().name]})
    return runs


@case
def dropout_wrapper_rnn(tf: Any) -> list[dict[str, Any]]:
    """A ``BasicRNNCell`` in a ``DropoutWrapper`` that drops its outputs (keep probability 0.7, under
    ``set_random_seed``) inside ``dynamic_rnn``: the mask is a new ``RandomUniform`` draw at every time
    step of every run, drawn inside TensorFlow's while loop, and its gradient pops the saved masks;
    SGD for three steps. ``parallel_iterations=1``: with more, TensorFlow's executor may run a later
    step's draw first (its shape is a constant once folded), and its numbers change from session to
    session; Turnout draws in iteration order (docs/random.rst)."""
    tf.compat.v1.set_random_seed(21)
    x = tf.compat.v1.placeholder(tf.float32, [None, None, 2], name="x")
    cell = tf.compat.v1.nn.rnn_cell.DropoutWrapper(tf.compat.v1.nn.rnn_cell.BasicRNNCell(3), output_keep_prob=0.7)
    with tf.compat.v1.variable_scope("rnn", initializer=_seeded(tf, 92)):
        out, _ = tf.compat.v1.nn.dynamic_rnn(cell, x, dtype=tf.float32, parallel_iterations=1)
    loss = tf.reduce_mean(tf.square(out - 0.25), name="loss")
    train = tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(loss)
    feeds = {"x:0": np.random.default_rng(93).normal(size=(2, 4, 2)).astype(np.float32)}
    return _train_runs(feeds, loss, train, [v.value() for v in tf.compat.v1.trainable_variables()])


@case
def embedding_sparse_optimizers(tf: Any) -> list[dict[str, Any]]:
    """A bag-of-embeddings classifier whose embedding gradients are ``IndexedSlices`` (a gather's
    gradient): each optimizer's sparse path after deduplicating the ids with ``Unique`` and
    ``UnsortedSegmentSum`` (Momentum's, Adagrad's and RMSProp's sparse apply ops, centered RMSProp's
    too, Adam's scatter adds: SGD's path is that scatter add alone), a sparse softmax and a
    ``softmax_cross_entropy_with_logits_v2`` loss."""
    vocab, dim, classes = 7, 3, 4
    ids = tf.compat.v1.placeholder(tf.int32, [None, None], name="ids")
    labels = tf.compat.v1.placeholder(tf.int32, [None], name="labels")
    opts = {"momentum": tf.compat.v1.train.MomentumOptimizer(0.3, 0.9),
            "adagrad": tf.compat.v1.train.AdagradOptimizer(0.3),
            "adam": tf.compat.v1.train.AdamOptimizer(0.1),
            "rmsprop": tf.compat.v1.train.RMSPropOptimizer(0.05, momentum=0.2),
            "centered": tf.compat.v1.train.RMSPropOptimizer(0.05, momentum=0.2, centered=True)}
    losses, steps, watched = [], [], []
    for k, (name, opt) in enumerate(opts.items()):
        emb = tf.compat.v1.get_variable(f"emb_{name}", initializer=_weights((vocab, dim), 100 + k, 1.0))
        w = tf.compat.v1.get_variable(f"w_{name}", initializer=_weights((dim, classes), 110 + k, 1.0))
        pooled = tf.reduce_mean(tf.nn.embedding_lookup(emb, ids), axis=1)
        logits = tf.matmul(pooled, w)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        loss += 0.5 * tf.reduce_mean(tf.compat.v1.nn.softmax_cross_entropy_with_logits_v2(
            labels=tf.one_hot(labels, classes) * 0.9 + 0.025, logits=logits))
        losses.append(tf.identity(loss, name=f"loss_{name}"))
        steps.append(opt.minimize(loss))
        watched += [emb.value(), w.value()]
    total = tf.add_n(losses, name="total")
    # ids repeat within and across rows: the deduplicating optimizers sum their rows' slices
    feeds = {"ids:0": np.asarray([[1, 3, 3], [0, 1, 6], [5, 5, 5]], np.int32),
             "labels:0": np.asarray([2, 0, 3], np.int32)}
    return _train_runs(feeds, total, tf.group(*steps), [*losses, *watched])


def _cnn(tf: Any, images: Any, training: Any) -> Any:
    """conv2d (SAME) + relu + max_pool, batch normalisation whose mode is ``training``, conv1d over the
    flattened rows, then a dense softmax head."""
    k1 = tf.compat.v1.get_variable("k1", initializer=_weights((3, 3, 1, 2), 120, 0.8))
    h = tf.nn.relu(tf.nn.conv2d(images, k1, strides=[1, 1, 1, 1], padding="SAME"))
    h = tf.nn.max_pool2d(h, ksize=2, strides=2, padding="VALID")
    h = tf.compat.v1.layers.batch_normalization(h, training=training, momentum=0.8, name="bn")
    seq = tf.reshape(h, [-1, 4, 2])  # (batch, 2*2 positions, 2 channels): 4 steps of 2
    k2 = tf.compat.v1.get_variable("k2", initializer=_weights((2, 2, 3), 121, 0.8))
    h = tf.nn.conv1d(seq, k2, stride=1, padding="VALID")
    w = tf.compat.v1.get_variable("w", initializer=_weights((9, 3), 122, 0.8))
    return tf.matmul(tf.reshape(h, [-1, 9]), w)


@case
def cnn_batch_norm(tf: Any) -> list[dict[str, Any]]:
    """A small CNN (``conv2d``, ``max_pool2d``, ``conv1d``) with ``layers.batch_normalization``
    whose ``training`` flag is a fed boolean (a ``tf.cond`` of FusedBatchNorm in both modes), its
    moving averages updated by ``UPDATE_OPS`` under the Momentum step; one run in inference mode."""
    images = tf.compat.v1.placeholder(tf.float32, [None, 4, 4, 1], name="images")
    labels = tf.compat.v1.placeholder(tf.int32, [None], name="labels")
    training = tf.compat.v1.placeholder_with_default(True, [], name="training")
    logits = _cnn(tf, images, training)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    with tf.control_dependencies(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)):
        train = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    rng = np.random.default_rng(123)
    feeds = {"images:0": rng.normal(size=(3, 4, 4, 1)).astype(np.float32), "labels:0": np.asarray([0, 2, 1], np.int32)}
    runs = _train_runs(feeds, loss, train, [v.value() for v in tf.compat.v1.global_variables()])
    pred = tf.argmax(logits, axis=1, name="pred")
    return runs + [{"feeds": {**feeds, "training:0": False}, "fetches": [loss.name, logits.name, pred.name]}]


@case
def cnn_batch_norm_adam(tf: Any) -> list[dict[str, Any]]:
    """The same CNN with its batch normalisation in training mode only (``training=True``: no cond),
    trained by Adam; the moving statistics fetched after training."""
    images = tf.compat.v1.placeholder(tf.float32, [None, 4, 4, 1], name="images")
    labels = tf.compat.v1.placeholder(tf.int32, [None], name="labels")
    logits = _cnn(tf, images, True)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    with tf.control_dependencies(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)):
        train = tf.compat.v1.train.AdamOptimizer(0.05).minimize(loss)
    rng = np.random.default_rng(124)
    feeds = {"images:0": rng.normal(size=(2, 4, 4, 1)).astype(np.float32), "labels:0": np.asarray([1, 2], np.int32)}
    return _train_runs(feeds, loss, train, [v.value() for v in tf.compat.v1.global_variables()])


@case
def cnn_windows_momentum(tf: Any) -> list[dict[str, Any]]:
    """conv (SAME, stride 2 along the rows: TensorFlow's uneven padding) -> fused batch normalisation
    in training mode -> relu, then a max pool (3x3, stride 2, SAME) and an average pool (2x2, VALID)
    side by side, a dilated conv (VALID) after the average pool, and a dense head, trained by Momentum
    (the images' batch size unknown to the graph)."""
    images = tf.compat.v1.placeholder(tf.float32, [None, 6, 5, 2], name="images")
    labels = tf.compat.v1.placeholder(tf.int32, [None], name="labels")
    k1 = tf.compat.v1.get_variable("k1", initializer=_weights((3, 3, 2, 3), 130, 0.8))
    h = tf.nn.conv2d(images, k1, strides=[1, 2, 1, 1], padding="SAME")  # (batch, 3, 5, 3)
    h = tf.nn.relu(tf.compat.v1.layers.batch_normalization(h, training=True, momentum=0.9, name="bn"))
    peak = tf.nn.max_pool2d(h, ksize=3, strides=2, padding="SAME")  # (batch, 2, 3, 3)
    mean = tf.nn.avg_pool2d(h, ksize=2, strides=1, padding="VALID")  # (batch, 2, 4, 3)
    k2 = tf.compat.v1.get_variable("k2", initializer=_weights((2, 2, 3, 2), 131, 0.8))
    wide = tf.nn.conv2d(mean, k2, strides=1, padding="VALID", dilations=[1, 1, 2, 1])  # (batch, 1, 2, 2)
    feats = tf.concat([tf.reshape(peak, [-1, 18]), tf.reshape(wide, [-1, 4])], axis=1)
    w = tf.compat.v1.get_variable("w", initializer=_weights((22, 3), 132, 0.5))
    logits = tf.matmul(feats, w)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    with tf.control_dependencies(tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS)):
        train = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    rng = np.random.default_rng(133)
    feeds = {"images:0": rng.normal(size=(3, 6, 5, 2)).astype(np.float32), "labels:0": np.asarray([2, 0, 1], np.int32)}
    return _train_runs(feeds, loss, train, [v.value() for v in tf.compat.v1.global_variables()])


@case
def cnn_pool_ties(tf: Any) -> list[dict[str, Any]]:
    """Max pooling of inputs full of equal values (small integers, then all ones), whose gradient
    TensorFlow sends to the first largest element of each window in row-major order: 3x3 windows,
    stride 2, SAME (overlapping, with the uneven padding) and 2x2, stride 1, VALID; an average pool's
    gradient beside them. The gradient of a weighted sum is fetched."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 5, 6, 2], name="x")
    pools = [tf.nn.max_pool2d(x, 3, 2, "SAME"), tf.nn.max_pool2d(x, 2, 1, "VALID"), tf.nn.avg_pool2d(x, 3, 2, "SAME")]
    loss = tf.add_n([tf.reduce_sum(p * _weights(tuple(p.shape[1:]), 140 + k, 1.0)) for k, p in enumerate(pools)])
    (grad,) = tf.gradients(loss, [x])
    rng = np.random.default_rng(141)
    fetches = [*(p.name for p in pools), grad.name]
    return [{"feeds": {"x:0": rng.integers(0, 3, size=(2, 5, 6, 2)).astype(np.float32)}, "fetches": fetches},
            {"feeds": {"x:0": np.ones((1, 5, 6, 2), np.float32)}, "fetches": fetches}]


@case
def while_case_map_fn(tf: Any) -> list[dict[str, Any]]:
    """A ``while_loop`` with ``parallel_iterations=8`` whose body picks a branch with ``tf.case``
    (two predicates and a default) nested in a ``tf.cond``, then a ``map_fn`` over the batch that
    writes a ``dynamic_size`` TensorArray per row; differentiated with respect to the input."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    n = tf.compat.v1.placeholder(tf.int32, [], name="n")

    def body(i: Any, h: Any) -> Any:
        def inner() -> Any:
            return tf.case([(tf.equal(i % 3, 0), lambda: tf.tanh(h) * 1.5),
                            (tf.equal(i % 3, 1), lambda: h * x)],
                           default=lambda: h + tf.sin(x), exclusive=False)

        return i + 1, tf.cond(i < 5, inner, lambda: h - 0.1 * h * h)

    _, h = tf.while_loop(lambda i, h: i < n, body, [0, x], parallel_iterations=8, back_prop=True)

    def row(v: Any) -> Any:
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        def write(j: Any, ta: Any) -> Any:
            return j + 1, ta.write(j, v[j] * tf.cast(j + 1, tf.float32))

        _, ta = tf.while_loop(lambda j, ta: j < 3, write, [0, ta])
        return tf.reduce_sum(ta.stack() * v)

    m = tf.map_fn(row, h, parallel_iterations=4)
    loss = tf.reduce_sum(m * m)
    (g,) = tf.gradients(loss, [x])
    xv = np.asarray([[0.5, -1.0, 0.3], [1.2, 0.4, -0.7]], np.float32)
    return [{"feeds": {"x:0": xv, "n:0": k}, "fetches": [m.name, loss.name, g.name]} for k in (0, 4, 7)]


@case
def seq2seq_greedy(tf: Any) -> list[dict[str, Any]]:
    """An encoder ``dynamic_rnn`` (GRU, fed lengths) whose final state starts a ``while_loop`` greedy
    decoder over an LSTM-free step (``tf.nn.top_k`` of the logits, a ``dynamic_size`` TensorArray),
    which stops early once every row has emitted the end token; the teacher-forced loss of the same
    decoder step is trained by SGD in the same graph."""
    vocab, hidden, end, max_len = 5, 3, 0, 6
    src = tf.compat.v1.placeholder(tf.int32, [None, None], name="src")
    src_len = tf.compat.v1.placeholder(tf.int32, [None], name="src_len")
    tgt = tf.compat.v1.placeholder(tf.int32, [None, None], name="tgt")
    emb = tf.compat.v1.get_variable("emb", initializer=_weights((vocab, hidden), 130, 1.0))
    with tf.compat.v1.variable_scope("enc"):
        cell = tf.compat.v1.nn.rnn_cell.GRUCell(hidden, kernel_initializer=_seeded(tf, 131))
        _, enc = tf.compat.v1.nn.dynamic_rnn(cell, tf.nn.embedding_lookup(emb, src), sequence_length=src_len,
                                             dtype=tf.float32)
    wd = tf.compat.v1.get_variable("wd", initializer=_weights((2 * hidden, hidden), 132, 1.0))
    wo = tf.compat.v1.get_variable("wo", initializer=_weights((hidden, vocab), 133, 1.5))

    def step(tok: Any, h: Any) -> tuple[Any, Any]:
        h = tf.tanh(tf.matmul(tf.concat([tf.nn.embedding_lookup(emb, tok), h], 1), wd))
        return h, tf.matmul(h, wo)

    batch = tf.shape(src)[0]

    def body(t: Any, tok: Any, h: Any, done: Any, out: Any, scores: Any) -> Any:
        h, logits = step(tok, h)
        best, idx = tf.nn.top_k(tf.nn.log_softmax(logits), k=1)
        nxt = tf.where(done, tf.fill([batch], end), idx[:, 0])
        return (t + 1, nxt, h, tf.logical_or(done, tf.equal(nxt, end)), out.write(t, nxt),
                scores + tf.where(done, tf.zeros([batch]), best[:, 0]))

    out0 = tf.TensorArray(tf.int32, size=0, dynamic_size=True)
    _, _, _, _, out, scores = tf.while_loop(
        lambda t, tok, h, done, out, s: tf.logical_and(t < max_len, tf.logical_not(tf.reduce_all(done))), body,
        [0, tf.fill([batch], 1), enc, tf.fill([batch], False), out0, tf.zeros([batch])])
    decoded = tf.transpose(out.stack(), name="decoded")
    # teacher forcing: the same step over the target's inputs, unrolled by tf.scan over time
    tgt_t = tf.transpose(tgt)
    hs = tf.scan(lambda h, tok: step(tok, h)[0], tgt_t[:-1], initializer=enc)
    logits = tf.einsum("tbh,hv->tbv", hs, wo)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tgt_t[1:], logits=logits))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(loss)
    feeds = {"src:0": np.asarray([[1, 2, 3], [4, 1, 0]], np.int32), "src_len:0": np.asarray([3, 2], np.int32),
             "tgt:0": np.asarray([[1, 3, 2, 0], [1, 4, 0, 0]], np.int32)}
    runs = [{"feeds": feeds, "fetches": [decoded.name, scores.name]}]
    runs += _train_runs(feeds, loss, train, [emb.value(), wd.value(), wo.value()])
    return runs + [{"feeds": feeds, "fetches": [decoded.name, scores.name]}]


@case
def scan_rnn_adam(tf: Any) -> list[dict[str, Any]]:
    """An Elman RNN written with ``tf.scan`` over time-major inputs (its state a tuple of the hidden
    vector and a running sum), an ``argmax`` and ``top_k`` read-out, trained by Adam through the
    scan's gradient, with ``tf.stop_gradient`` on one term."""
    time, batch, depth, hidden = 4, 2, 2, 3
    x = tf.compat.v1.placeholder(tf.float32, [None, None, depth], name="x")
    wx = tf.compat.v1.get_variable("wx", initializer=_weights((depth, hidden), 140, 0.8))
    wh = tf.compat.v1.get_variable("wh", initializer=_weights((hidden, hidden), 141, 0.8))
    b = tf.compat.v1.get_variable("b", initializer=tf.zeros([hidden]))

    def cell(state: Any, xt: Any) -> Any:
        h, total = state
        h = tf.tanh(tf.matmul(xt, wx) + tf.matmul(h, wh) + b)
        return h, total + tf.reduce_sum(h, axis=1)

    zeros = tf.zeros(tf.stack([tf.shape(x)[1], hidden]))
    hs, totals = tf.scan(cell, x, initializer=(zeros, tf.zeros(tf.shape(x)[1:2])))
    loss = tf.reduce_mean(tf.square(hs - 0.2)) + 0.1 * tf.reduce_mean(totals[-1])
    loss += 0.01 * tf.reduce_sum(tf.stop_gradient(hs) * hs)
    train = tf.compat.v1.train.AdamOptimizer(0.05).minimize(loss)
    top, where = tf.nn.top_k(hs[-1], k=2)
    best = tf.argmax(hs, axis=2, name="best")
    rng = np.random.default_rng(142)
    feeds = {"x:0": rng.normal(size=(time, batch, depth)).astype(np.float32)}
    runs = _train_runs(feeds, loss, train, [wx.value(), wh.value(), b.value()])
    return runs + [{"feeds": feeds, "fetches": [top.name, where.name, best.name]}]


@case
def mlp_random_init(tf: Any) -> list[dict[str, Any]]:
    """A two-layer MLP as TF1 model code writes it, initialised by TensorFlow's random ops under a
    graph seed (``set_random_seed``): ``tf.compat.v1.layers.dense`` with its default initializers
    (a glorot_uniform kernel, a RandomUniform; a zero bias), an output layer from ``get_variable``
    with a truncated_normal kernel and a random_normal bias, a he_normal (variance scaling) gain and
    a float64 random_uniform offset; trained by Adam. The first run fetches the initial values."""
    tf.compat.v1.set_random_seed(1234)
    batch, depth, hidden, classes = 6, 4, 8, 3
    x = tf.compat.v1.placeholder(tf.float32, [None, depth], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, classes], name="y")
    h = tf.compat.v1.layers.dense(x, hidden, activation=tf.tanh, name="hidden")
    v1 = tf.compat.v1
    w = v1.get_variable("out_w", [hidden, classes], initializer=v1.truncated_normal_initializer(stddev=0.3))
    b = v1.get_variable("out_b", [classes], initializer=v1.random_normal_initializer(0.0, 0.1))
    gain = v1.get_variable("gain", [hidden], initializer=v1.keras.initializers.he_normal())
    offset = v1.get_variable("offset", [classes], tf.float64, initializer=v1.random_uniform_initializer(-0.5, 0.5))
    logits = tf.matmul(h * gain, w) + b + tf.cast(offset, tf.float32)
    loss = tf.reduce_mean(tf.square(tf.nn.softmax(logits) - y))
    train = v1.train.AdamOptimizer(0.05).minimize(loss)
    rng = np.random.default_rng(150)
    feeds = {"x:0": rng.normal(size=(batch, depth)).astype(np.float32),
             "y:0": np.eye(classes, dtype=np.float32)[rng.integers(0, classes, batch)]}
    watched = [v.value() for v in v1.global_variables() if "Adam" not in v.name and "power" not in v.name]
    return [{"feeds": {}, "fetches": names(watched)}] + _train_runs(feeds, loss, train, watched)


@case
def lstm_random_init(tf: Any) -> list[dict[str, Any]]:
    """An ``LSTMCell`` under ``dynamic_rnn`` with TensorFlow's default initializers (``get_variable``'s
    glorot_uniform for the kernel, made inside the RNN's scope; zeros for the bias) and a
    glorot_normal read-out (TruncatedNormal), seeded by the graph seed: its initial values and its
    loss (not trained: ``mlp_random_init`` trains, and a compiled LSTM training step is slow to test)."""
    tf.compat.v1.set_random_seed(77)
    batch, time, depth, hidden = 3, 4, 2, 5
    v1 = tf.compat.v1
    x = v1.placeholder(tf.float32, [None, None, depth], name="x")
    out, _ = v1.nn.dynamic_rnn(v1.nn.rnn_cell.LSTMCell(hidden), x, dtype=tf.float32)
    w = v1.get_variable("readout", [hidden, 1], initializer=v1.glorot_normal_initializer())
    loss = tf.reduce_mean(tf.square(tf.tensordot(out, w, 1) - 0.5))
    feeds = {"x:0": np.random.default_rng(151).normal(size=(batch, time, depth)).astype(np.float32)}
    watched = [v.value() for v in v1.trainable_variables()]
    return [{"feeds": {}, "fetches": names(watched)}, {"feeds": feeds, "fetches": [loss.name]}]
