"""TensorFlow fixture cases for the element-wise math, activation and structure ops of TF1 model code
(tools/tf_fixtures.py registers and writes them): small models trained three steps by a TF1
optimizer, whose ``minimize`` calls ``tf.gradients``, so the GraphDefs hold TensorFlow's gradient ops
(``RsqrtGrad``, ``EluGrad``, ...) beside the forward ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tf_fixture_helpers import _train_runs, _weights

CASES: dict[str, Callable[[Any], list[dict[str, Any]]]] = {}


def case(fn: Callable[[Any], list[dict[str, Any]]]) -> Callable[[Any], list[dict[str, Any]]]:
    CASES[fn.__name__] = fn
    return fn


def _activations(tf: Any, h: Any) -> Any:
    """Every activation and element-wise function of the list, each on the same pre-activation."""
    a = (tf.nn.elu(h) + tf.nn.selu(h) + tf.nn.softplus(h) + tf.nn.leaky_relu(h, alpha=0.1)
         + tf.nn.relu6(4.0 * h) + 0.5 * h * (1.0 + tf.math.erf(h / np.sqrt(2.0))))
    pos = tf.abs(h) + 0.5
    return a + 0.1 * (tf.sin(h) + tf.cos(h) + tf.math.log1p(pos) + tf.math.expm1(-pos) + tf.sqrt(pos)
                      + tf.math.reciprocal(pos) + tf.math.rsqrt(pos) + tf.math.square(h))


@case
def mlp_layer_norm(tf: Any) -> list[dict[str, Any]]:
    """An MLP with layer normalisation (``nn.moments``: Mean, SquaredDifference; Rsqrt), every
    activation of the list, ``losses.mean_squared_error`` (DivNoNan) with L2 regularisation and a
    clipped term, trained by SGD; floor/ceil/round, is_finite and div_no_nan on the outputs."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 2], name="y")
    w1 = tf.compat.v1.get_variable("w1", initializer=_weights((4, 6), 60, 0.8))
    b1 = tf.compat.v1.get_variable("b1", initializer=_weights((6,), 61))
    gamma = tf.compat.v1.get_variable("gamma", initializer=tf.ones([6]))
    w2 = tf.compat.v1.get_variable("w2", initializer=_weights((6, 2), 62, 0.1))
    h = tf.matmul(x, w1) + b1
    mean, var = tf.nn.moments(h, axes=[1], keepdims=True)
    h = (h - mean) * tf.math.rsqrt(var + 1e-3) * gamma
    out = tf.matmul(_activations(tf, h), w2)
    loss = tf.compat.v1.losses.mean_squared_error(y, out) + 1e-2 * (tf.nn.l2_loss(w1) + tf.nn.l2_loss(w2))
    loss += 0.1 * tf.reduce_mean(tf.math.squared_difference(tf.clip_by_value(out, -0.5, 0.5), y))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.005).minimize(loss)
    steps = tf.floor(3.0 * out) + 10.0 * tf.math.ceil(3.0 * out) + 100.0 * tf.round(3.0 * out)
    ratio = tf.math.divide_no_nan(out, tf.round(out), name="ratio")
    finite = tf.math.is_finite(tf.math.reciprocal(tf.round(out)), name="finite")
    rng = np.random.default_rng(63)
    feeds = {"x:0": rng.normal(size=(5, 4)).astype(np.float32), "y:0": rng.normal(size=(5, 2)).astype(np.float32)}
    runs = _train_runs(feeds, loss, train, [w1.value(), b1.value(), gamma.value(), w2.value()])
    return runs + [{"feeds": feeds, "fetches": [steps.name, ratio.name, finite.name]}]


@case
def attention_block(tf: Any) -> list[dict[str, Any]]:
    """One self-attention block over a batch of sequences: projections that broadcast a matrix over
    the batch and the scores ``q k^T`` (BatchMatMulV2, adj_y), Softmax, the first position picked
    by Squeeze and a mean-pooled ExpandDims residual; trained by Adam."""
    d = 4
    x = tf.compat.v1.placeholder(tf.float32, [2, 3, d], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [2, d], name="y")
    wq, wk, wv = (tf.compat.v1.get_variable(n, initializer=_weights((d, d), 70 + k, 0.6))
                  for k, n in enumerate(("wq", "wk", "wv")))
    q, k, v = tf.matmul(x, wq), tf.matmul(x, wk), tf.matmul(x, wv)
    scores = tf.matmul(q, k, transpose_b=True) / np.sqrt(d).astype(np.float32)
    att = tf.matmul(tf.nn.softmax(scores), v) + tf.expand_dims(tf.reduce_mean(x, axis=1), 1)
    first = tf.squeeze(att[:, :1, :], axis=[1])
    loss = tf.reduce_mean(tf.square(first - y)) + 0.1 * tf.reduce_mean(tf.matmul(att, att, adjoint_a=True))
    train = tf.compat.v1.train.AdamOptimizer(0.05).minimize(loss)
    rng = np.random.default_rng(74)
    feeds = {"x:0": rng.normal(size=(2, 3, d)).astype(np.float32), "y:0": rng.normal(size=(2, d)).astype(np.float32)}
    return _train_runs(feeds, loss, train, [wq.value(), wk.value(), wv.value()])


@case
def one_hot_cumsum_pad(tf: Any) -> list[dict[str, Any]]:
    """A program over labels and steps: one_hot, cumsum (plain, exclusive, reverse), unstack, pad
    (Pad, PadV2), placeholder_with_default, identity_n, ensure_shape, check_numerics (a run with a
    NaN fails with TensorFlow's message), gather_nd (its gradient: ScatterNd of a run-time shape);
    its weights trained by SGD."""
    labels = tf.compat.v1.placeholder(tf.int32, [None], name="labels")
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    scale = tf.compat.v1.placeholder_with_default(tf.constant(1.5), [], name="scale")
    w = tf.compat.v1.get_variable("w", initializer=_weights((3, 4), 80, 0.7))
    x = tf.debugging.check_numerics(tf.ensure_shape(x, [None, 3]), "x is not finite")
    hot = tf.one_hot(labels, 4, on_value=2.0, off_value=-0.5)
    h = tf.matmul(x, w) * scale + hot
    c = tf.cumsum(h, axis=1) + tf.cumsum(h, axis=1, exclusive=True) + tf.cumsum(h, axis=0, reverse=True)
    cols = tf.unstack(c, axis=1)
    mixed = tf.stack([cols[0] * cols[1], cols[2] - cols[3]], axis=1)
    padded = tf.pad(mixed, [[1, 0], [0, 2]]) + tf.pad(mixed, [[0, 1], [1, 1]], constant_values=0.25)
    a, b = tf.identity_n([padded, c])
    picked = tf.gather_nd(c, [[0, 1], [2, 3]], name="picked")
    loss = tf.reduce_mean(tf.square(a)) + 0.1 * tf.reduce_mean(b) + 0.1 * tf.reduce_sum(picked * picked)
    train = tf.compat.v1.train.GradientDescentOptimizer(0.002).minimize(loss)
    cols_hot = tf.one_hot(labels, 3, axis=0, name="cols_hot")
    rng = np.random.default_rng(81)
    xv = rng.normal(size=(3, 3)).astype(np.float32)
    feeds = {"labels:0": np.asarray([0, 3, 1], np.int32), "x:0": xv}
    runs = _train_runs(feeds, loss, train, [w.value()])
    bad = xv.copy()
    bad[1, 2] = np.nan
    return runs + [
        {"feeds": {**feeds, "labels:0": np.asarray([2, -1, 5], np.int32), "scale:0": 0.5},
         "fetches": [loss.name, picked.name, cols_hot.name]},
        {"feeds": {**feeds, "x:0": bad}, "fetches": [loss.name], "error": "x is not finite : Tensor had NaN values"},
    ]


@case
def prod_cumprod(tf: Any) -> list[dict[str, Any]]:
    """Products: reduce_prod over one axis, two axes with keep_dims and all axes, of groups that
    hold one zero and two (its gradient, TensorFlow's _ProdGrad, is exact there), the int32
    reduce_prod of a shape's tail that flattens a batch, and cumprod (plain, exclusive, reverse) of
    positive values; trained by SGD."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 3, 2], name="x")
    w = tf.compat.v1.get_variable("w", initializer=_weights((6, 3), 90, 0.7))
    p = tf.compat.v1.get_variable("p", initializer=_weights((3, 2), 91, 0.9))
    h = x * p
    flat = tf.reshape(h, [-1, tf.reduce_prod(tf.shape(h)[1:])], name="flat")
    out = tf.matmul(flat, w)
    prods = (tf.reduce_prod(h, axis=1) + tf.reduce_sum(tf.reduce_prod(h, axis=[0, 2], keepdims=True))
             + tf.reduce_prod(p))
    pos = tf.abs(out) + 0.5
    c = tf.math.cumprod(pos, axis=1) + tf.math.cumprod(pos, axis=1, exclusive=True) \
        + tf.math.cumprod(pos, axis=0, reverse=True)
    loss = tf.reduce_mean(tf.square(out)) + 0.1 * tf.reduce_sum(prods) + 0.01 * tf.reduce_mean(c)
    train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss)
    rng = np.random.default_rng(92)
    xv = rng.normal(size=(4, 3, 2)).astype(np.float32)
    xv[0, 1, 0] = 0.0  # one zero in a group along axis 1
    xv[2, :2, 1] = 0.0  # two zeros in another
    feeds = {"x:0": xv}
    runs = _train_runs(feeds, loss, train, [w.value(), p.value()])
    return runs + [{"feeds": feeds, "fetches": [flat.name, c.name]}]


@case
def orthogonal_init_rnn(tf: Any) -> list[dict[str, Any]]:
    """A recurrent loop whose weights start from ``orthogonal_initializer`` (a random normal matrix's
    Q, its columns' signs R's diagonal's: ``Qr``, ``DiagPart``, ``Sign``, a ``Transpose`` for a wide
    matrix, a gain) under a graph seed, trained by SGD. Turnout computes the initial values at import
    with numpy's QR, equal to TensorFlow's to rounding."""
    tf.compat.v1.set_random_seed(140)
    xs = tf.compat.v1.placeholder(tf.float32, [None, 3], name="xs")
    w = tf.compat.v1.get_variable("w", [3, 4], initializer=tf.compat.v1.orthogonal_initializer(gain=1.2))
    u = tf.compat.v1.get_variable("u", [4, 4], initializer=tf.compat.v1.orthogonal_initializer())
    v = tf.compat.v1.get_variable("v", [4, 2], initializer=tf.compat.v1.orthogonal_initializer(seed=3))
    n = tf.shape(xs)[0]

    def body(t: Any, h: Any) -> Any:
        return t + 1, tf.tanh(tf.matmul(tf.expand_dims(xs[t], 0), w) + tf.matmul(h, u))

    _, h = tf.while_loop(lambda t, h: t < n, body, [0, tf.zeros([1, 4])])
    loss = tf.reduce_sum(tf.square(tf.matmul(h, v) - 0.5))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    feeds = {"xs:0": np.random.default_rng(141).normal(size=(5, 3)).astype(np.float32)}
    return _train_runs(feeds, loss, train, [w.value(), u.value(), v.value()])


@case
def special_functions(tf: Any) -> list[dict[str, Any]]:
    """A layer whose features are the trigonometric, hyperbolic and special functions (tan, asin,
    acos, atan, atan2, sinh, cosh, asinh, acosh, atanh, erfc, lgamma) of one pre-activation, kept in
    their domains, trained by SGD, so the GraphDef holds TensorFlow's gradients of each (lgamma's is
    Digamma; asin's Sqrt and Reciprocal); digamma and atan2 at signed zeros among the outputs."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
    w1 = tf.compat.v1.get_variable("w1", initializer=_weights((3, 4), 150, 0.5))
    w2 = tf.compat.v1.get_variable("w2", initializer=_weights((4, 1), 151, 0.2))
    h = tf.tanh(tf.matmul(x, w1))  # in (-1, 1)
    pos = tf.abs(h) + 1.5
    feats = (tf.tan(h) + tf.asin(0.9 * h) + tf.acos(0.9 * h) + tf.atan(3.0 * h) + tf.atan2(h, pos)
             + tf.sinh(h) + tf.cosh(h) + tf.asinh(2.0 * h) + tf.acosh(pos) + tf.atanh(0.9 * h)
             + tf.math.erfc(h) + tf.math.lgamma(pos))
    loss = tf.reduce_mean(tf.square(tf.matmul(feats, w2) - y))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(loss)
    edges = tf.constant([-1.0, 0.0, 0.5, 2.5], name="edges")
    psi = tf.math.digamma(edges, name="psi")
    zeros = tf.constant([0.0, -0.0, 0.0, -0.0], name="zeros")
    angle = tf.atan2(zeros, tf.constant([1.0, 1.0, -1.0, -1.0]), name="angle")
    rng = np.random.default_rng(152)
    feeds = {"x:0": rng.normal(size=(6, 3)).astype(np.float32), "y:0": rng.normal(size=(6, 1)).astype(np.float32)}
    runs = _train_runs(feeds, loss, train, [w1.value(), w2.value()])
    return runs + [{"feeds": {}, "fetches": [psi.name, angle.name]}]


@case
def summaries_sgd(tf: Any) -> list[dict[str, Any]]:
    """A linear model trained by SGD with TF1 summaries: a scalar of the loss, a histogram of the
    weights and a scalar under a name scope, merged by ``summary.merge_all`` (the import leaves the
    summaries out and lists the tensors they read)."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
    w = tf.compat.v1.get_variable("w", initializer=_weights((3, 1), 160, 0.5))
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y), name="loss")
    tf.compat.v1.summary.scalar("loss", loss)
    tf.compat.v1.summary.histogram("weights", w)
    with tf.name_scope("stats"):
        tf.compat.v1.summary.scalar("weight_norm", tf.norm(w))
    tf.compat.v1.summary.merge_all(name="merged")
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    rng = np.random.default_rng(161)
    feeds = {"x:0": rng.normal(size=(4, 3)).astype(np.float32), "y:0": rng.normal(size=(4, 1)).astype(np.float32)}
    return _train_runs(feeds, loss, train, [w.value()])


@case
def depthwise_separable(tf: Any) -> list[dict[str, Any]]:
    """A MobileNet-style block: a depthwise convolution (channel multiplier 2, stride 2, SAME), then a
    pointwise one, then a grouped convolution (``conv2d`` whose filter has half the channels: two
    feature groups), trained by momentum SGD; an NCHW-free, NHWC graph with TensorFlow's depthwise
    gradient ops (``DepthwiseConv2dNativeBackpropInput`` / ``Filter``) and Conv2D's on grouped shapes."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 7, 6, 3], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
    dw = tf.compat.v1.get_variable("dw", initializer=_weights((3, 3, 3, 2), 170, 0.4))
    pw = tf.compat.v1.get_variable("pw", initializer=_weights((1, 1, 6, 4), 171, 0.4))
    gw = tf.compat.v1.get_variable("gw", initializer=_weights((2, 2, 2, 4), 172, 0.4))
    head = tf.compat.v1.get_variable("head", initializer=_weights((4, 1), 173, 0.3))
    h = tf.nn.relu(tf.nn.depthwise_conv2d(x, dw, [1, 2, 2, 1], "SAME"))
    h = tf.nn.relu(tf.nn.conv2d(h, pw, 1, "VALID"))
    h = tf.tanh(tf.nn.conv2d(h, gw, 1, "SAME"))  # (4 channels, a 2-channel filter: two groups)
    out = tf.matmul(tf.reduce_mean(h, axis=[1, 2]), head)
    loss = tf.reduce_mean(tf.square(out - y))
    train = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss)
    rng = np.random.default_rng(174)
    feeds = {"x:0": rng.normal(size=(2, 7, 6, 3)).astype(np.float32), "y:0": rng.normal(size=(2, 1)).astype(np.float32)}
    return _train_runs(feeds, loss, train, [dw.value(), pw.value(), gw.value(), head.value()])


@case
def masked_loss(tf: Any) -> list[dict[str, Any]]:
    """A softmax classifier whose loss skips the examples labelled -1 (``tf.boolean_mask`` of the
    per-example losses: ``Where``, ``Squeeze``, ``GatherV2``; its gradient scatters back), trained by
    SGD."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    labels = tf.compat.v1.placeholder(tf.int32, [None], name="labels")
    w = tf.compat.v1.get_variable("w", initializer=_weights((3, 4), 180, 0.5))
    logits = tf.matmul(x, w)
    keep = tf.greater_equal(labels, 0)
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.maximum(labels, 0), logits=logits)
    loss = tf.reduce_mean(tf.boolean_mask(per_example, keep))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.5).minimize(loss)
    rng = np.random.default_rng(181)
    feeds = {"x:0": rng.normal(size=(6, 3)).astype(np.float32),
             "labels:0": np.asarray([0, -1, 3, 2, -1, 1], np.int32)}
    return _train_runs(feeds, loss, train, [w.value()])


@case
def image_resize(tf: Any) -> list[dict[str, Any]]:
    """Feature maps resized up and down by bilinear and nearest-neighbour interpolation, each in
    TF1's legacy form, with ``align_corners`` and with TF2's half-pixel centers, trained by SGD
    (``ResizeBilinearGrad`` and ``ResizeNearestNeighborGrad`` in the gradient); the resized maps
    fetched after training."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 5, 7, 2], name="x")
    y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
    k = tf.compat.v1.get_variable("k", initializer=_weights((1, 1, 2, 2), 190, 0.6))
    head = tf.compat.v1.get_variable("head", initializer=_weights((12, 1), 191, 0.3))
    h = tf.tanh(tf.nn.conv2d(x, k, 1, "SAME"))
    maps = [tf.compat.v1.image.resize_bilinear(h, [8, 4]),
            tf.compat.v1.image.resize_bilinear(h, [9, 13], align_corners=True),
            tf.compat.v1.image.resize_bilinear(h, [3, 11], half_pixel_centers=True),
            tf.compat.v1.image.resize_nearest_neighbor(h, [8, 4]),
            tf.compat.v1.image.resize_nearest_neighbor(h, [9, 13], align_corners=True),
            tf.compat.v1.image.resize_nearest_neighbor(h, [3, 11], half_pixel_centers=True)]
    feats = tf.concat([tf.reduce_mean(m * m, axis=[1, 2]) for m in maps], axis=1)
    loss = tf.reduce_mean(tf.square(tf.matmul(feats, head) - y))
    train = tf.compat.v1.train.GradientDescentOptimizer(0.3).minimize(loss)
    rng = np.random.default_rng(192)
    feeds = {"x:0": rng.normal(size=(2, 5, 7, 2)).astype(np.float32), "y:0": rng.normal(size=(2, 1)).astype(np.float32)}
    runs = _train_runs(feeds, loss, train, [k.value(), head.value()])
    return runs + [{"feeds": feeds, "fetches": [m.name for m in maps]}]
