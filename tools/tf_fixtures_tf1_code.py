"""TensorFlow fixture cases written the way TF1 model code is written (tools/tf_fixtures.py registers
and writes them): default initializers under ``tf.compat.v1.set_random_seed``, ``tf.compat.v1.layers``
and ``tf.compat.v1.keras.layers`` in graph mode, ``tf.compat.v1.train`` optimizers, learning-rate
schedules of the global step, ``ExponentialMovingAverage``, and a ``tf.compat.v1.train.Saver`` whose
checkpoint (written by ``_saved`` runs) the tests restore into the imported model. Each is small (a
few units, a few steps), so the replay on every backend stays quick.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tf_fixture_helpers import _saved, _seeded, _train_runs, names

CASES: dict[str, Callable[[Any], list[dict[str, Any]]]] = {}


def case(fn: Callable[[Any], list[dict[str, Any]]]) -> Callable[[Any], list[dict[str, Any]]]:
    CASES[fn.__name__] = fn
    return fn


@case
def resnet_block_bn(tf: Any) -> list[dict[str, Any]]:
    """A ResNet-style block: ``layers.conv2d`` (default glorot kernel, no bias) -> ``layers.batch_normalization``
    whose mode is a fed ``training`` flag -> relu -> conv -> batch norm, added to a 1x1 projection of
    the input, relu, global average pooling and a dense head; Momentum with the moving averages in
    ``UPDATE_OPS`` and a ``piecewise_constant`` learning rate of the global step. One run in inference
    mode after training; the Saver's checkpoint before the last two runs."""
    v1 = tf.compat.v1
    v1.set_random_seed(2018)
    images = v1.placeholder(tf.float32, [None, 4, 4, 2], name="images")
    labels = v1.placeholder(tf.int32, [None], name="labels")
    training = v1.placeholder(tf.bool, [], name="training")
    h = v1.layers.conv2d(images, 3, 3, padding="same", use_bias=False, name="conv1")
    h = tf.nn.relu(v1.layers.batch_normalization(h, training=training, name="bn1"))
    h = v1.layers.conv2d(h, 3, 3, padding="same", use_bias=False, name="conv2")
    h = v1.layers.batch_normalization(h, training=training, name="bn2")
    short = v1.layers.conv2d(images, 3, 1, name="proj")
    h = tf.nn.relu(h + short)
    logits = v1.layers.dense(tf.reduce_mean(h, axis=[1, 2]), 3, name="head")
    loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
    step = v1.train.get_or_create_global_step()
    rate = v1.train.piecewise_constant(step, [2], [0.1, 0.02])
    with tf.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
        train = v1.train.MomentumOptimizer(rate, 0.9).minimize(loss, global_step=step)
    rng = np.random.default_rng(300)
    feeds = {"images:0": rng.normal(size=(3, 4, 4, 2)).astype(np.float32), "labels:0": np.asarray([0, 2, 1], np.int32)}
    watched = [v.value() for v in v1.global_variables() if "Momentum" not in v.name]
    runs = _train_runs({**feeds, "training:0": True}, loss, train, watched)
    runs += [{"feeds": {**feeds, "training:0": False}, "fetches": [loss.name, logits.name, rate.name]}]
    return _saved(runs, replayed=2)


@case
def vae_fed_noise(tf: Any) -> list[dict[str, Any]]:
    """A small VAE: a ``layers.dense`` encoder to a mean and a log-variance, the reparameterisation
    ``z = mu + exp(logvar / 2) * eps`` with ``eps`` a fed placeholder (so every backend draws the same),
    a sigmoid decoder, the Bernoulli reconstruction loss (``sigmoid_cross_entropy_with_logits``) plus
    the KL term, trained by Adam at an ``exponential_decay`` rate of the global step; default
    initializers under a graph seed; the Saver's checkpoint (Adam's slots and powers, the global
    step) before the last two runs."""
    v1 = tf.compat.v1
    v1.set_random_seed(7)
    depth, hidden, latent = 6, 5, 2
    x = v1.placeholder(tf.float32, [None, depth], name="x")
    eps = v1.placeholder(tf.float32, [None, latent], name="eps")
    h = v1.layers.dense(x, hidden, activation=tf.nn.relu, name="enc")
    mu = v1.layers.dense(h, latent, name="mu")
    logvar = v1.layers.dense(h, latent, name="logvar")
    z = mu + tf.exp(0.5 * logvar) * eps
    dh = v1.layers.dense(z, hidden, activation=tf.nn.softplus, name="dec")
    logits = v1.layers.dense(dh, depth, name="out")
    recon = tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=x, logits=logits), axis=1)
    kl = -0.5 * tf.reduce_sum(1.0 + logvar - tf.square(mu) - tf.exp(logvar), axis=1)
    loss = tf.reduce_mean(recon + kl, name="elbo")
    step = v1.train.get_or_create_global_step()
    rate = v1.train.exponential_decay(0.02, step, 2, 0.5)  # (not staircase: 0.5 ** (step / 2))
    train = v1.train.AdamOptimizer(rate).minimize(loss, global_step=step)
    rng = np.random.default_rng(301)
    feeds = {"x:0": (rng.uniform(size=(4, depth)) > 0.5).astype(np.float32),
             "eps:0": rng.normal(size=(4, latent)).astype(np.float32)}
    watched = [v.value() for v in v1.trainable_variables()]
    sample = tf.sigmoid(logits, name="sample")
    return _saved(_train_runs(feeds, loss, train, watched) + [{"feeds": feeds, "fetches": [sample.name, kl.name]}], 2)


def _layer_norm(tf: Any, x: Any, name: str) -> Any:
    """Layer normalisation as TF1 transformer code writes it: ``nn.moments`` over the last axis, a
    gain and a bias Variable (ones and zeros)."""
    v1 = tf.compat.v1
    with v1.variable_scope(name):
        d = x.shape[-1]
        g = v1.get_variable("gamma", [d], initializer=v1.ones_initializer())
        b = v1.get_variable("beta", [d], initializer=v1.zeros_initializer())
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(var + 1e-6) * g + b


@case
def transformer_encoder(tf: Any) -> list[dict[str, Any]]:
    """One transformer encoder layer: multi-head self-attention (``layers.dense`` projections, heads
    split by ``reshape`` / ``transpose``, scaled ``q k^T``, a padding mask from fed lengths made with
    ``sequence_mask`` added as ``-1e9``, ``softmax``), residuals with layer normalisation, a relu
    feed-forward block; trained by Momentum with gradients clipped by global norm; batch and time
    dimensions ``None``. (Not Adam: the attention weights' gradients are about 1e-7 here, sums of
    larger terms that cancel, and Adam's step divides them by a square root of the same size plus
    ``epsilon``, which turns float32 rounding into steps that differ in the third digit.)"""
    v1 = tf.compat.v1
    v1.set_random_seed(11)
    d, heads = 4, 2
    x = v1.placeholder(tf.float32, [None, None, d], name="x")
    lengths = v1.placeholder(tf.int32, [None], name="lengths")
    batch, time = tf.shape(x)[0], tf.shape(x)[1]

    def split(t: Any) -> Any:
        return tf.transpose(tf.reshape(t, [batch, time, heads, d // heads]), [0, 2, 1, 3])

    q, k, v = (split(v1.layers.dense(x, d, use_bias=False, name=n)) for n in ("q", "k", "v"))
    scores = tf.matmul(q, k, transpose_b=True) / float(np.sqrt(d // heads))
    mask = tf.sequence_mask(lengths, time, dtype=tf.float32)[:, None, None, :]
    weights = tf.nn.softmax(scores + (1.0 - mask) * -1e9)
    att = tf.reshape(tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3]), [batch, time, d])
    h = _layer_norm(tf, x + v1.layers.dense(att, d, name="o"), "ln1")
    ff = v1.layers.dense(v1.layers.dense(h, 2 * d, activation=tf.nn.relu, name="ff1"), d, name="ff2")
    out = _layer_norm(tf, h + ff, "ln2")
    valid = tf.sequence_mask(lengths, time, dtype=tf.float32)
    loss = tf.reduce_sum(tf.reduce_sum(tf.square(out - 0.1), axis=2) * valid) / tf.reduce_sum(valid)
    tvars = v1.trainable_variables()
    grads, norm = tf.clip_by_global_norm(tf.gradients(loss, tvars), 1.0)
    train = v1.train.MomentumOptimizer(0.1, 0.9).apply_gradients(zip(grads, tvars))
    rng = np.random.default_rng(302)
    feeds = {"x:0": rng.normal(size=(2, 3, d)).astype(np.float32), "lengths:0": np.asarray([3, 2], np.int32)}
    runs = _train_runs(feeds, loss, train, [t.value() for t in tvars])
    return runs + [{"feeds": feeds, "fetches": [weights.name, norm.name]}]


@case
def keras_sequential(tf: Any) -> list[dict[str, Any]]:
    """A ``tf.compat.v1.keras`` ``Sequential`` model (``Dense``, ``BatchNormalization``, ``Dense``,
    ``Dense``; no input shape, so its call on a placeholder builds it) in graph mode, its default
    Keras initializers under a graph seed, trained by a ``tf.compat.v1.train`` optimizer with
    ``model.updates`` (the moving statistics) as control dependencies and Keras's learning phase
    fed True (a ``cond`` on the ``keras_learning_phase`` ``PlaceholderWithDefault``); one run in
    inference mode (its default). (``keras_dropout`` adds a ``Dropout``.)"""
    v1 = tf.compat.v1
    v1.set_random_seed(5)
    layers = v1.keras.layers
    model = v1.keras.Sequential([layers.Dense(6, activation="relu"), layers.BatchNormalization(),
                                 layers.Dense(3, activation="tanh"), layers.Dense(2)])
    x = v1.placeholder(tf.float32, [None, 4], name="x")
    y = v1.placeholder(tf.float32, [None, 2], name="y")
    out = model(x)
    loss = tf.reduce_mean(tf.square(out - y), name="loss")
    with tf.control_dependencies(model.updates):
        train = v1.train.GradientDescentOptimizer(0.1).minimize(loss, var_list=model.trainable_variables)
    phase = v1.keras.backend.learning_phase()
    rng = np.random.default_rng(303)
    feeds = {"x:0": rng.normal(size=(5, 4)).astype(np.float32), "y:0": rng.normal(size=(5, 2)).astype(np.float32)}
    watched = [v.value() for v in model.variables]
    runs = _train_runs({**feeds, phase.name: True}, loss, train, watched)
    return [{"feeds": {}, "fetches": names(watched)}, *runs, {"feeds": feeds, "fetches": [loss.name, out.name]}]


@case
def mlp_dropout(tf: Any) -> list[dict[str, Any]]:
    """An MLP trained with ``tf.nn.dropout`` on its hidden layers (rates 0.5 and a fed 0.25), its
    masks drawn anew at every step by TensorFlow's ``RandomUniform`` under ``set_random_seed``:
    Turnout's import must draw the same masks step after step for the losses and weights to agree."""
    v1 = tf.compat.v1
    v1.set_random_seed(77)
    x = v1.placeholder(tf.float32, [None, 5], name="x")
    y = v1.placeholder(tf.float32, [None, 2], name="y")
    rate = v1.placeholder_with_default(0.25, [], name="rate")
    h = v1.layers.dense(x, 8, activation=tf.nn.relu, name="h1")
    h = tf.nn.dropout(h, rate=0.5)
    h = v1.layers.dense(h, 6, activation=tf.nn.tanh, name="h2")
    h = tf.nn.dropout(h, rate=rate)
    out = v1.layers.dense(h, 2, name="out")
    loss = tf.reduce_mean(tf.square(out - y), name="loss")
    train = v1.train.GradientDescentOptimizer(0.2).minimize(loss)
    rng = np.random.default_rng(307)
    feeds = {"x:0": rng.normal(size=(6, 5)).astype(np.float32), "y:0": rng.normal(size=(6, 2)).astype(np.float32)}
    watched = [v.value() for v in v1.trainable_variables()]
    return _train_runs(feeds, loss, train, watched)


@case
def keras_dropout(tf: Any) -> list[dict[str, Any]]:
    """A ``tf.compat.v1.keras`` ``Sequential`` model with a ``Dropout`` layer in graph mode: Keras builds
    its mask in a ``cond`` on the learning phase (fed True while training, a new ``RandomUniform``
    draw each step; its default False in the last run, where the layer passes its input)."""
    v1 = tf.compat.v1
    v1.set_random_seed(9)
    layers = v1.keras.layers
    model = v1.keras.Sequential([layers.Dense(6, activation="relu"), layers.Dropout(0.4), layers.Dense(2)])
    x = v1.placeholder(tf.float32, [None, 3], name="x")
    y = v1.placeholder(tf.float32, [None, 2], name="y")
    out = model(x)
    loss = tf.reduce_mean(tf.square(out - y), name="loss")
    train = v1.train.GradientDescentOptimizer(0.1).minimize(loss, var_list=model.trainable_variables)
    phase = v1.keras.backend.learning_phase()
    rng = np.random.default_rng(308)
    feeds = {"x:0": rng.normal(size=(4, 3)).astype(np.float32), "y:0": rng.normal(size=(4, 2)).astype(np.float32)}
    runs = _train_runs({**feeds, phase.name: True}, loss, train, [v.value() for v in model.variables])
    return [*runs, {"feeds": feeds, "fetches": [loss.name, out.name]}]


@case
def bilstm_seq_lengths(tf: Any) -> list[dict[str, Any]]:
    """``bidirectional_dynamic_rnn`` of two ``LSTMCell`` s with their default initializers under a
    graph seed, fed ``sequence_length``, the two directions' outputs concatenated and read out by a
    ``layers.dense``: the initial values, the outputs (zero past each row's length, a length 0
    included) and the loss at three sets of lengths, the last all shorter than the time dimension
    (the loop stops at the longest, and the output arrays' later slots, never written, stack as
    zeros); not trained: ``bigru_rmsprop`` trains a bidirectional RNN, and a compiled LSTM training
    step is slow to test."""
    v1 = tf.compat.v1
    v1.set_random_seed(21)
    x = v1.placeholder(tf.float32, [None, None, 2], name="x")
    seq = v1.placeholder(tf.int32, [None], name="seq")
    (fw, bw), (fw_state, _) = v1.nn.bidirectional_dynamic_rnn(
        v1.nn.rnn_cell.LSTMCell(3), v1.nn.rnn_cell.LSTMCell(3), x, sequence_length=seq, dtype=tf.float32)
    pred = v1.layers.dense(tf.concat([fw, bw], axis=2), 1, name="readout")
    loss = tf.reduce_mean(tf.square(pred - 0.3))
    rng = np.random.default_rng(304)
    xv = rng.normal(size=(2, 3, 2)).astype(np.float32)
    watched = [v.value() for v in v1.trainable_variables()]
    return [{"feeds": {}, "fetches": names(watched)}] + [
        {"feeds": {"x:0": xv, "seq:0": np.asarray(lengths, np.int32)},
         "fetches": [pred.name, fw_state.h.name, loss.name]} for lengths in ([3, 1], [3, 0], [2, 0])]


@case
def while_training_loop(tf: Any) -> list[dict[str, Any]]:
    """A whole training loop inside one ``tf.while_loop``: each iteration computes a linear model's
    loss and its gradients with ``tf.gradients`` of the loop's own tensors, clips them by global norm
    and takes an SGD step on loop variables; the trained weights are assigned to the Variables after
    the loop; ``tf.compat.v1.train.ExponentialMovingAverage`` of the Variables is applied after that
    (its shadows start from the Variables' initial values through ``initialized_value()``); the
    Saver's checkpoint before the last run."""
    v1 = tf.compat.v1
    v1.set_random_seed(3)
    x = v1.placeholder(tf.float32, [None, 3], name="x")
    y = v1.placeholder(tf.float32, [None, 1], name="y")
    steps = v1.placeholder(tf.int32, [], name="steps")
    w = v1.get_variable("w", [3, 1])
    b = v1.get_variable("b", [1], initializer=v1.zeros_initializer())

    def body(i: Any, wv: Any, bv: Any, last: Any) -> Any:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, wv) + bv - y))
        gw, gb = tf.gradients(loss, [wv, bv])
        (gw, gb), _ = tf.clip_by_global_norm([gw, gb], 0.5)
        return i + 1, wv - 0.2 * gw, bv - 0.2 * gb, loss

    _, wt, bt, last = tf.while_loop(lambda i, *_: i < steps, body, [0, w.value(), b.value(), 0.0])
    fit = tf.group(w.assign(wt), b.assign(bt))
    ema = v1.train.ExponentialMovingAverage(0.5)
    with tf.control_dependencies([fit]):
        train = ema.apply([w, b])
    rng = np.random.default_rng(305)
    feeds = {"x:0": rng.normal(size=(6, 3)).astype(np.float32), "y:0": rng.normal(size=(6, 1)).astype(np.float32),
             "steps:0": 4}
    watched = [w.value(), b.value(), ema.average(w).value(), ema.average(b).value()]
    runs = [{"feeds": feeds, "fetches": [last.name], "targets": [train.name]} for _ in range(2)]
    return _saved(runs + [{"feeds": {**feeds, "steps:0": 0}, "fetches": [last.name, *names(watched)]}])


@case
def act_halting(tf: Any) -> list[dict[str, Any]]:
    """Adaptive computation time: a ``tf.while_loop`` whose predicate the data decides (``reduce_any``
    of the rows still running, at most 6 steps), rows that halted kept by TF1's row ``where``, the
    halting probabilities accumulated, a ponder cost of the step count; Adam under an
    ``exponential_decay`` (staircase) of the global step."""
    v1 = tf.compat.v1
    x = v1.placeholder(tf.float32, [None, 4], name="x")
    y = v1.placeholder(tf.float32, [None, 1], name="y")
    wh = v1.get_variable("wh", [4, 4], initializer=_seeded(tf, 1))
    wp = v1.get_variable("wp", [4, 1], initializer=_seeded(tf, 2))
    wo = v1.get_variable("wo", [4, 1], initializer=_seeded(tf, 3))
    step = v1.train.get_or_create_global_step()

    def body(n: Any, h: Any, halt: Any, acc: Any) -> Any:
        h2 = tf.tanh(tf.matmul(h, wh) + x)
        p = tf.sigmoid(tf.matmul(h2, wp))
        running = tf.cast(halt < 0.9, tf.float32)
        return n + 1, v1.where(tf.squeeze(halt < 0.9, 1), h2, h), halt + running * p, acc + running * p * h2

    rows = tf.shape(x)[0]
    n, _, _, acc = tf.while_loop(lambda n, h, halt, acc: tf.logical_and(tf.reduce_any(halt < 0.9), n < 6), body,
                                 [0, tf.zeros_like(x), tf.zeros([rows, 1]), tf.zeros_like(x)])
    loss = tf.reduce_mean(tf.square(tf.matmul(acc, wo) - y)) + 0.01 * tf.cast(n, tf.float32)
    rate = v1.train.exponential_decay(0.1, step, 2, 0.5, staircase=True)
    train = v1.train.AdamOptimizer(rate).minimize(loss, global_step=step)
    rng = np.random.default_rng(11)
    feeds = {"x:0": rng.normal(size=(5, 4)).astype(np.float32), "y:0": rng.normal(size=(5, 1)).astype(np.float32)}
    return _train_runs(feeds, loss, train, [wh.value(), wp.value(), wo.value(), step.value()])


@case
def text_cnn(tf: Any) -> list[dict[str, Any]]:
    """A text classifier: an embedding lookup, ``tf.nn.conv1d`` (an ``ExpandDims``, a ``Conv2D`` and a
    ``Squeeze``), max over time, a dense head, sparse softmax cross entropy plus an L2 penalty of
    every trainable variable (``add_n`` of ``l2_loss``), Nesterov momentum."""
    v1 = tf.compat.v1
    ids = v1.placeholder(tf.int32, [None, 7], name="ids")
    labels = v1.placeholder(tf.int32, [None], name="labels")
    emb = v1.get_variable("emb", [11, 5], initializer=_seeded(tf, 4))
    kernel = v1.get_variable("kernel", [3, 5, 6], initializer=_seeded(tf, 5))
    w = v1.get_variable("w", [6, 3], initializer=_seeded(tf, 6))
    b = v1.get_variable("b", [3], initializer=v1.zeros_initializer())
    seen = tf.nn.relu(tf.nn.conv1d(tf.nn.embedding_lookup(emb, ids), kernel, stride=1, padding="VALID"))
    logits = tf.matmul(tf.reduce_max(seen, axis=1), w) + b
    loss = (tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            + 1e-3 * tf.add_n([tf.nn.l2_loss(v) for v in v1.trainable_variables()]))
    train = v1.train.MomentumOptimizer(0.2, 0.9, use_nesterov=True).minimize(loss)
    rng = np.random.default_rng(12)
    feeds = {"ids:0": rng.integers(0, 11, size=(4, 7)).astype(np.int32), "labels:0": np.array([0, 2, 1, 2], np.int32)}
    return _train_runs(feeds, loss, train, [emb.value(), kernel.value(), w.value()])


@case
def returns_scan(tf: Any) -> list[dict[str, Any]]:
    """A policy-gradient step: discounted returns by a ``tf.scan`` over the reversed rewards, a
    baseline through ``stop_gradient``, a reverse exclusive ``cumsum``, the log-probabilities of the
    actions taken (``log_softmax``, ``one_hot``), an entropy bonus and a ``reduce_logsumexp`` term;
    centered RMSProp (``ResourceApplyCenteredRMSProp``)."""
    v1 = tf.compat.v1
    obs = v1.placeholder(tf.float32, [None, 3], name="obs")
    acts = v1.placeholder(tf.int32, [None], name="acts")
    rew = v1.placeholder(tf.float32, [None], name="rew")
    w1 = v1.get_variable("w1", [3, 8], initializer=_seeded(tf, 7))
    w2 = v1.get_variable("w2", [8, 2], initializer=_seeded(tf, 8))
    returns = tf.reverse(tf.scan(lambda c, r: c * 0.9 + r, tf.reverse(rew, [0]), initializer=0.0), [0])
    later = tf.math.cumsum(rew, reverse=True, exclusive=True)
    advantage = returns - tf.stop_gradient(tf.reduce_mean(returns)) + 0.1 * later
    logits = tf.matmul(tf.tanh(tf.matmul(obs, w1)), w2)
    logp = tf.nn.log_softmax(logits)
    chosen = tf.reduce_sum(logp * tf.one_hot(acts, 2), axis=1)
    entropy = -tf.reduce_sum(tf.exp(logp) * logp, axis=1)
    loss = (-tf.reduce_mean(chosen * advantage) - 0.01 * tf.reduce_mean(entropy)
            + 0.001 * tf.reduce_logsumexp(logits))
    train = v1.train.RMSPropOptimizer(0.05, momentum=0.5, centered=True).minimize(loss)
    rng = np.random.default_rng(13)
    feeds = {"obs:0": rng.normal(size=(6, 3)).astype(np.float32), "acts:0": np.array([0, 1, 1, 0, 1, 0], np.int32),
             "rew:0": rng.normal(size=(6,)).astype(np.float32)}
    return _train_runs(feeds, loss, train, [w1.value(), w2.value()])


@case
def cifar10_lrn(tf: Any) -> list[dict[str, Any]]:
    """The TF1 CIFAR-10 tutorial's network, small: conv -> relu -> max pool -> ``tf.nn.lrn`` with the
    tutorial's ``depth_radius=4, bias=1, alpha=0.001/9, beta=0.75`` -> conv -> relu -> another
    ``lrn`` (a radius smaller than the channels) -> max pool, a dense head with weight decay,
    sparse softmax cross entropy, and gradient descent at a staircase ``exponential_decay`` rate of
    the global step: the training graph holds ``LRN`` and ``LRNGrad``."""
    v1 = tf.compat.v1
    images = v1.placeholder(tf.float32, [None, 6, 6, 3], name="images")
    labels = v1.placeholder(tf.int32, [None], name="labels")
    k1 = v1.get_variable("conv1/weights", [3, 3, 3, 6], initializer=_seeded(tf, 9))
    b1 = v1.get_variable("conv1/biases", [6], initializer=v1.constant_initializer(0.1))
    k2 = v1.get_variable("conv2/weights", [3, 3, 6, 5], initializer=_seeded(tf, 10))
    w = v1.get_variable("local/weights", [20, 3], initializer=_seeded(tf, 11))
    h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(images, k1, [1, 1, 1, 1], "SAME"), b1))
    h = tf.nn.max_pool2d(h, ksize=3, strides=2, padding="SAME")
    h = tf.nn.lrn(h, 4, bias=1.0, alpha=0.001 / 9.0, beta=0.75)
    h = tf.nn.relu(tf.nn.conv2d(h, k2, [1, 1, 1, 1], "SAME"))
    h = tf.nn.lrn(h, 1, bias=2.0, alpha=0.3, beta=0.5)
    h = tf.nn.max_pool2d(h, ksize=3, strides=2, padding="SAME")
    logits = tf.matmul(tf.reshape(h, [-1, 20]), w)
    loss = (tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            + 0.004 * tf.nn.l2_loss(w))
    step = v1.train.get_or_create_global_step()
    rate = v1.train.exponential_decay(0.5, step, 2, 0.5, staircase=True)
    train = v1.train.GradientDescentOptimizer(rate).minimize(loss, global_step=step)
    rng = np.random.default_rng(14)
    feeds = {"images:0": (rng.normal(size=(4, 6, 6, 3)) * 2).astype(np.float32),
             "labels:0": np.array([0, 2, 1, 2], np.int32)}
    return _train_runs(feeds, loss, train, [k1.value(), k2.value(), w.value()])


@case
def input_pipelines(tf: Any) -> list[dict[str, Any]]:
    """A TF1 training script that reads its data inside the graph: a ``tf.data`` pipeline
    (``from_tensor_slices``, ``map``, ``batch``, ``repeat``) through an initializable iterator, whose
    initializer ``init_all`` groups with the Variables', and a queue pipeline
    (``slice_input_producer`` and ``train.batch``: a ``FIFOQueueV2`` and ``QueueDequeueManyV2``)
    feeding a second head. The runs feed the get-next nodes' outputs (TensorFlow takes a feed of any
    tensor), which is how a user runs the imported model: the import leaves the pipelines out."""
    v1 = tf.compat.v1
    rng = np.random.default_rng(15)
    xs, ys = rng.normal(size=(8, 3)).astype(np.float32), rng.integers(0, 2, size=(8,)).astype(np.int32)
    ds = tf.data.Dataset.from_tensor_slices((xs, ys)).map(lambda x, y: (x * 2.0, y)).batch(4).repeat()
    it = v1.data.make_initializable_iterator(ds)
    x, y = it.get_next()
    qx, qy = v1.train.batch(v1.train.slice_input_producer([xs, ys.astype(np.float32)], shuffle=False), batch_size=4)
    w = v1.get_variable("w", [3, 2], initializer=_seeded(tf, 16))
    v = v1.get_variable("v", [3, 1], initializer=_seeded(tf, 17))
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=tf.matmul(x, w)))
    loss += tf.reduce_mean(tf.square(tf.squeeze(tf.matmul(qx, v), 1) - qy))
    train = v1.train.GradientDescentOptimizer(0.3).minimize(loss)
    init_all = tf.group(v1.global_variables_initializer(), it.initializer, name="init_all")
    names_fed = [x.name, y.name, qx.name, qy.name]

    def batch(k: int) -> dict[str, Any]:
        rows = slice(4 * (k % 2), 4 * (k % 2) + 4)
        return dict(zip(names_fed, [xs[rows] * 2.0, ys[rows], xs[rows], ys[rows].astype(np.float32)], strict=True))

    runs = [{"feeds": {}, "fetches": [], "targets": [init_all.name]}]
    runs += [{"feeds": batch(k), "fetches": [loss.name], "targets": [train.name]} for k in range(3)]
    runs.append({"feeds": batch(1), "fetches": [loss.name, w.value().name, v.value().name]})
    return runs


def _block_cell_gradients(tf: Any) -> None:
    """The gradients TF1 registered for ``LSTMBlockCell`` and ``GRUBlockCell`` (its ``contrib.rnn``
    kept them; TensorFlow 2 registers none), so ``tf.gradients`` writes the training graph a TF1
    script wrote: the cell's gradient op, then the products that take ``dicfo`` (or ``d_c_bar`` and
    ``d_r_bar_u_bar``) back to the inputs and the weights."""
    from tensorflow.python.framework import ops
    from tensorflow.python.ops import gen_rnn_ops

    def lstm(op: Any, *grad: Any) -> Any:
        x, cs_prev, h_prev, w, wci, wcf, wco, b = op.inputs
        i, cs, f, o, ci, co, _ = op.outputs
        n_in = int(x.shape[1])
        cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad = gen_rnn_ops.lstm_block_cell_grad(
            x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, cs_grad=grad[1], h_grad=grad[6],
            use_peephole=op.get_attr("use_peephole"))
        xh_grad = tf.matmul(dicfo, w, transpose_b=True)
        w_grad = tf.matmul(tf.concat([x, h_prev], 1), dicfo, transpose_a=True)
        return (xh_grad[:, :n_in], cs_prev_grad, xh_grad[:, n_in:], w_grad, wci_grad, wcf_grad, wco_grad,
                tf.raw_ops.BiasAddGrad(out_backprop=dicfo))

    def gru(op: Any, *grad: Any) -> Any:
        x, h_prev, w_ru, w_c, b_ru, b_c = op.inputs
        r, u, c, _ = op.outputs
        d_x, d_h_prev, d_c_bar, d_r_bar_u_bar = gen_rnn_ops.gru_block_cell_grad(
            x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, grad[3])
        w_ru_grad = tf.matmul(tf.concat([x, h_prev], 1), d_r_bar_u_bar, transpose_a=True)
        w_c_grad = tf.matmul(tf.concat([x, h_prev * r], 1), d_c_bar, transpose_a=True)
        return (d_x, d_h_prev, w_ru_grad, w_c_grad, tf.reduce_sum(d_r_bar_u_bar, 0), tf.reduce_sum(d_c_bar, 0))

    for name, fn in (("LSTMBlockCell", lstm), ("GRUBlockCell", gru)):
        try:
            ops.RegisterGradient(name)(fn)
        except KeyError:  # (registered by an earlier case of this process)
            pass


@case
def block_cells(tf: Any) -> list[dict[str, Any]]:
    """A TF1 language model's step on the fused cells of ``contrib.rnn``: an embedding, three steps of
    ``LSTMBlockCell`` with peepholes and a cell clip, three of ``GRUBlockCell`` over them, a softmax
    head; SGD through TF1's gradients of the cells (``LSTMBlockCellGrad``, ``GRUBlockCellGrad``)."""
    v1 = tf.compat.v1
    _block_cell_gradients(tf)
    ids = v1.placeholder(tf.int32, [None, 3], name="ids")
    labels = v1.placeholder(tf.int32, [None], name="labels")
    emb = v1.get_variable("emb", [7, 4], initializer=_seeded(tf, 18))
    w = v1.get_variable("lstm/w", [4 + 5, 20], initializer=_seeded(tf, 19))
    b = v1.get_variable("lstm/b", [20], initializer=v1.constant_initializer(0.1))
    peep = [v1.get_variable(f"lstm/{k}", [5], initializer=_seeded(tf, 20 + j))
            for j, k in enumerate(("wci", "wcf", "wco"))]
    w_ru = v1.get_variable("gru/w_ru", [5 + 3, 6], initializer=_seeded(tf, 23))
    w_c = v1.get_variable("gru/w_c", [5 + 3, 3], initializer=_seeded(tf, 24))
    b_ru = v1.get_variable("gru/b_ru", [6], initializer=v1.constant_initializer(1.0))
    b_c = v1.get_variable("gru/b_c", [3], initializer=v1.zeros_initializer())
    out = v1.get_variable("out", [3, 7], initializer=_seeded(tf, 25))
    xs = tf.nn.embedding_lookup(emb, ids)
    batch = tf.shape(ids)[0]
    cs, h, g = tf.zeros([batch, 5]), tf.zeros([batch, 5]), tf.zeros([batch, 3])
    for t in range(3):
        _, cs, _, _, _, _, h = tf.raw_ops.LSTMBlockCell(x=xs[:, t], cs_prev=cs, h_prev=h, w=w, wci=peep[0],
                                                        wcf=peep[1], wco=peep[2], b=b, forget_bias=1.0,
                                                        cell_clip=2.0, use_peephole=True)
        _, _, _, g = tf.raw_ops.GRUBlockCell(x=h, h_prev=g, w_ru=w_ru, w_c=w_c, b_ru=b_ru, b_c=b_c)
    logits = tf.matmul(g, out)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    train = v1.train.GradientDescentOptimizer(0.5).minimize(loss)
    rng = np.random.default_rng(26)
    feeds = {"ids:0": rng.integers(0, 7, size=(4, 3)).astype(np.int32), "labels:0": np.array([1, 5, 0, 6], np.int32)}
    return _train_runs(feeds, loss, train, [w.value(), *(p.value() for p in peep), w_ru.value(), w_c.value()])


@case
def dqn_uint8_frames(tf: Any) -> list[dict[str, Any]]:
    """A DQN step as TF1 reinforcement-learning code writes it: stacked frames fed as ``uint8``
    (``Cast`` to float32, ``/ 255``), a convolution and a dense head for the Q-values, the Q of the
    actions taken (``one_hot``), a Huber loss against fed targets, RMSProp."""
    v1 = tf.compat.v1
    frames = v1.placeholder(tf.uint8, [None, 6, 6, 2], name="frames")
    actions = v1.placeholder(tf.int32, [None], name="actions")
    targets = v1.placeholder(tf.float32, [None], name="targets")
    k = v1.get_variable("conv/kernel", [3, 3, 2, 4], initializer=_seeded(tf, 27))
    w = v1.get_variable("q/w", [36, 3], initializer=_seeded(tf, 28))
    x = tf.cast(frames, tf.float32) / 255.0
    h = tf.nn.relu(tf.nn.conv2d(x, k, [1, 2, 2, 1], "SAME"))
    q = tf.matmul(tf.reshape(h, [-1, 36]), w)
    chosen = tf.reduce_sum(q * tf.one_hot(actions, 3), axis=1)
    loss = tf.reduce_mean(v1.losses.huber_loss(targets, chosen, reduction=v1.losses.Reduction.NONE))
    train = v1.train.RMSPropOptimizer(0.01, decay=0.95, epsilon=0.01).minimize(loss)
    rng = np.random.default_rng(29)
    feeds = {"frames:0": rng.integers(0, 256, size=(5, 6, 6, 2)).astype(np.uint8),
             "actions:0": np.array([0, 2, 1, 1, 0], np.int32), "targets:0": rng.normal(size=(5,)).astype(np.float32)}
    return _train_runs(feeds, loss, train, [q, k.value(), w.value()])


@case
def categorical_sampling(tf: Any) -> list[dict[str, Any]]:
    """``Multinomial`` as TF1 code draws it: a REINFORCE step whose policy samples an action per state
    (``tf.multinomial``, seeded by the graph seed alone) and trains, with Adam, on the log-probability of
    fed actions weighted by fed returns; and a character model's sampling loop (a ``tf.while_loop``
    that feeds each drawn character back, ``tf.random.categorical`` of the logits over a temperature,
    seeded, written into a TensorArray), plus several samples a row of a fed batch. Each run draws anew,
    so the runs check the counter's advance too."""
    v1 = tf.compat.v1
    v1.set_random_seed(31)
    obs = v1.placeholder(tf.float32, [None, 4], name="obs")
    taken = v1.placeholder(tf.int32, [None], name="taken")
    returns = v1.placeholder(tf.float32, [None], name="returns")
    w = v1.get_variable("policy/w", [4, 3], initializer=_seeded(tf, 32))
    logits = tf.matmul(obs, w)
    action = tf.squeeze(v1.multinomial(logits, 1), axis=1, name="action")
    logp = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=taken, logits=logits)
    loss = -tf.reduce_mean(logp * returns, name="pg_loss")
    train = v1.train.AdamOptimizer(0.05).minimize(loss)
    emb = v1.get_variable("charrnn/emb", [5, 3], initializer=_seeded(tf, 33))
    wh = v1.get_variable("charrnn/wh", [3, 3], initializer=_seeded(tf, 34))
    wo = v1.get_variable("charrnn/wo", [3, 5], initializer=_seeded(tf, 35))
    temperature = v1.placeholder(tf.float32, [], name="temperature")

    def step(i: Any, char: Any, h: Any, out: Any) -> Any:
        h = tf.tanh(tf.matmul(tf.nn.embedding_lookup(emb, char), wh) + h)
        nxt = tf.random.categorical(tf.matmul(h, wo) / temperature, 1, seed=36, dtype=tf.int32)[:, 0]
        return i + 1, nxt, h, out.write(i, nxt)

    start = tf.zeros([2], tf.int32)
    chars = tf.TensorArray(tf.int32, size=6)
    _, _, _, chars = tf.while_loop(lambda i, *_: i < 6, step, [0, start, tf.zeros([2, 3]), chars])
    text = tf.transpose(chars.stack(), name="text")
    many = tf.random.categorical(logits * 0.5, 7, seed=37, name="many")
    rng = np.random.default_rng(38)
    feeds = {"obs:0": rng.normal(size=(5, 4)).astype(np.float32), "taken:0": np.array([0, 2, 1, 1, 0], np.int32),
             "returns:0": rng.normal(size=(5,)).astype(np.float32), "temperature:0": np.float32(0.8)}
    fetches = [loss.name, action.name, text.name, many.name]
    return [{"feeds": feeds, "fetches": fetches, "targets": [train.name]} for _ in range(3)] + [
        {"feeds": feeds, "fetches": [*fetches, *names([w.value()])]}]


@case
def word2vec_nce(tf: Any) -> list[dict[str, Any]]:
    """The skip-gram model of TensorFlow's word2vec tutorial, as its TF1 script writes it: a
    ``random_uniform`` embedding, ``truncated_normal`` NCE weights and zero biases, ``tf.nn.nce_loss``
    (negative classes from ``LogUniformCandidateSampler``, unique, seeded by the graph seed), SGD at
    rate 1, and the cosine similarity of a few validation words to every word. Each run draws new
    negatives."""
    v1 = tf.compat.v1
    v1.set_random_seed(51)
    vocab, dim, sampled = 40, 6, 5
    inputs = v1.placeholder(tf.int32, [None], name="inputs")
    labels = v1.placeholder(tf.int64, [None, 1], name="labels")
    embeddings = tf.Variable(v1.random_uniform([vocab, dim], -1.0, 1.0), name="embeddings")
    weights = tf.Variable(v1.truncated_normal([vocab, dim], stddev=1.0 / np.sqrt(dim)), name="nce_weights")
    biases = tf.Variable(tf.zeros([vocab]), name="nce_biases")
    embed = tf.nn.embedding_lookup(embeddings, inputs)
    loss = tf.reduce_mean(v1.nn.nce_loss(weights=weights, biases=biases, labels=labels, inputs=embed,
                                         num_sampled=sampled, num_classes=vocab), name="nce_loss")
    train = v1.train.GradientDescentOptimizer(1.0).minimize(loss)
    norm = tf.sqrt(tf.reduce_sum(tf.square(embeddings), 1, keepdims=True))
    valid = tf.nn.embedding_lookup(embeddings / norm, tf.constant([1, 3, 5]))
    similarity = tf.matmul(valid, embeddings / norm, transpose_b=True, name="similarity")
    rng = np.random.default_rng(52)
    feeds = {"inputs:0": rng.integers(0, vocab, size=8).astype(np.int32),
             "labels:0": rng.integers(0, vocab, size=(8, 1)).astype(np.int64)}
    runs = _train_runs(feeds, loss, train, [embeddings.value(), weights.value(), biases.value()])
    return [*runs, {"feeds": feeds, "fetches": [similarity.name]}]


@case
def sampled_softmax_lm(tf: Any) -> list[dict[str, Any]]:
    """A language model's output layer trained by ``tf.nn.sampled_softmax_loss`` as TF1 code writes it
    (the NMT and PTB tutorials' choice for large vocabularies): an embedding, a tanh layer, the sampled
    softmax over a log-uniform sample of the vocabulary with the accidental hits removed
    (``ComputeAccidentalHits`` and ``SparseToDense``), SGD; the full softmax's loss for evaluation.
    The fed labels repeat a class the sampler draws often, so hits occur."""
    v1 = tf.compat.v1
    v1.set_random_seed(61)
    vocab, dim, sampled = 30, 5, 6
    words = v1.placeholder(tf.int32, [None], name="words")
    labels = v1.placeholder(tf.int64, [None, 1], name="labels")
    emb = v1.get_variable("emb", [vocab, dim], initializer=_seeded(tf, 62))
    w1 = v1.get_variable("w1", [dim, dim], initializer=_seeded(tf, 63))
    out_w = v1.get_variable("out_w", [vocab, dim], initializer=_seeded(tf, 64))
    out_b = v1.get_variable("out_b", [vocab], initializer=tf.zeros_initializer())
    h = tf.tanh(tf.matmul(tf.nn.embedding_lookup(emb, words), w1))
    loss = tf.reduce_mean(tf.nn.sampled_softmax_loss(out_w, out_b, labels, h, sampled, vocab), name="sampled_loss")
    train = v1.train.GradientDescentOptimizer(0.5).minimize(loss)
    logits = tf.matmul(h, out_w, transpose_b=True) + out_b
    full = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels[:, 0], logits=logits),
                          name="full_loss")
    feeds = {"words:0": np.array([3, 7, 1, 0, 12, 5], np.int32),
             "labels:0": np.array([[0], [1], [0], [2], [0], [17]], np.int64)}
    return _train_runs(feeds, loss, train, [emb.value(), out_w.value()]) + [{"feeds": feeds, "fetches": [full.name]}]


@case
def gp_regression(tf: Any) -> list[dict[str, Any]]:
    """A Gaussian-process regression written as TF1 code writes it: an RBF kernel of fed inputs with
    a trained log lengthscale, log signal and log noise, ``tf.linalg.cholesky`` of the kernel matrix,
    ``cholesky_solve`` (two ``MatrixTriangularSolve``) for the weights, the negative log marginal
    likelihood with ``tf.linalg.logdet``, Adam on it (TensorFlow's gradients of the Cholesky factor
    and the solves); the predictive mean at fed test points, and their predictive covariance through
    ``tf.linalg.inv`` (``MatrixInverse``, with ``adjoint``) and a ``triangular_solve`` of the upper
    triangle; ``slogdet``, ``solve`` and ``det`` of the kernel matrix, and their gradients."""
    v1 = tf.compat.v1
    x = v1.placeholder(tf.float64, [None, 2], name="x")
    y = v1.placeholder(tf.float64, [None, 1], name="y")
    xs = v1.placeholder(tf.float64, [None, 2], name="xs")
    jitter = v1.placeholder(tf.float64, [], name="jitter")
    log_ell = v1.get_variable("log_lengthscale", initializer=tf.constant(0.1, tf.float64))
    log_sf = v1.get_variable("log_signal", initializer=tf.constant(-0.2, tf.float64))
    log_sn = v1.get_variable("log_noise", initializer=tf.constant(-1.0, tf.float64))

    def rbf(a: Any, b: Any) -> Any:
        d = tf.reduce_sum(tf.square(a[:, None, :] - b[None, :, :]), axis=-1)
        return tf.exp(2.0 * log_sf) * tf.exp(-0.5 * d / tf.exp(2.0 * log_ell))

    n = tf.shape(x)[0]
    k = rbf(x, x) + (tf.exp(2.0 * log_sn) * jitter) * tf.eye(n, dtype=tf.float64)
    chol = tf.linalg.cholesky(k)
    alpha = tf.linalg.cholesky_solve(chol, y)
    nll = tf.add(0.5 * tf.reduce_sum(y * alpha) + 0.5 * tf.linalg.logdet(k),
                 0.5 * tf.cast(n, tf.float64) * np.log(2 * np.pi), name="nll")
    train = v1.train.AdamOptimizer(0.05).minimize(nll)
    ks = rbf(xs, x)
    mean = tf.matmul(ks, alpha, name="mean")
    cov = tf.subtract(rbf(xs, xs), tf.matmul(ks, tf.matmul(tf.linalg.inv(k, adjoint=True), ks, transpose_b=True)),
                      name="cov")
    upper = tf.linalg.triangular_solve(tf.transpose(chol), y, lower=False, name="upper_solve")
    sign, logabs = tf.linalg.slogdet(k)
    direct = tf.linalg.solve(k, y, name="direct_solve")
    det = tf.linalg.det(k[:2, :2], name="det")
    probes = tf.gradients(tf.reduce_sum(direct) + logabs + det, [log_ell, log_sn])
    rng = np.random.default_rng(71)
    pts = rng.normal(size=(6, 2))
    feeds = {"x:0": pts, "y:0": np.sin(pts[:, :1]) + 0.1 * rng.normal(size=(6, 1)),
             "xs:0": rng.normal(size=(3, 2)), "jitter:0": 1.0}
    runs = _train_runs(feeds, nll, train, [log_ell.value(), log_sf.value(), log_sn.value()])
    runs.append({"feeds": feeds, "fetches": [mean.name, cov.name, upper.name, sign.name, logabs.name, direct.name,
                                              det.name, *names(probes)]})
    return runs


@case
def ctc_speech(tf: Any) -> list[dict[str, Any]]:
    """A speech model's CTC training step as TF1 code writes it (DeepSpeech's shape): fed time-major
    features of fed lengths, a bidirectional GRU, a dense layer to the characters plus blank,
    ``tf.nn.ctc_loss`` of ``SparseTensor`` labels (a repeated character among them), Adam; and a second
    loss with ``ctc_merge_repeated=False`` and ``ignore_longer_outputs_than_inputs`` over a batch entry
    whose labels outrun its length, evaluated only."""
    v1 = tf.compat.v1
    v1.set_random_seed(80)
    feats = v1.placeholder(tf.float32, [None, None, 3], name="feats")
    lengths = v1.placeholder(tf.int32, [None], name="lengths")
    idx = v1.placeholder(tf.int64, [None, 2], name="label_indices")
    vals = v1.placeholder(tf.int32, [None], name="label_values")
    shape = v1.placeholder(tf.int64, [2], name="label_shape")
    fw, bw = v1.nn.rnn_cell.GRUCell(4), v1.nn.rnn_cell.GRUCell(4)
    (of, ob), _ = v1.nn.bidirectional_dynamic_rnn(fw, bw, feats, sequence_length=lengths, dtype=tf.float32,
                                                  time_major=True)
    w = v1.get_variable("out/w", [8, 5], initializer=_seeded(tf, 81))
    logits = tf.einsum("tbh,hc->tbc", tf.concat([of, ob], -1), w)
    labels = tf.SparseTensor(idx, vals, shape)
    loss = tf.reduce_mean(v1.nn.ctc_loss(labels, logits, lengths), name="ctc")
    other = v1.nn.ctc_loss(labels, logits, lengths, ctc_merge_repeated=False, ignore_longer_outputs_than_inputs=True)
    train = v1.train.AdamOptimizer(0.05).minimize(loss)
    rng = np.random.default_rng(82)
    feeds = {"feats:0": rng.normal(size=(7, 3, 3)).astype(np.float32), "lengths:0": np.array([7, 5, 3], np.int32),
             "label_indices:0": np.array([[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0]], np.int64),
             "label_values:0": np.array([1, 1, 3, 2, 0, 3], np.int32), "label_shape:0": np.array([3, 3], np.int64)}
    runs = _train_runs(feeds, loss, train, [w.value()])
    late = {**feeds, "label_indices:0": np.array([[0, 0], [1, 0], [2, 0], [2, 1], [2, 2], [2, 3]], np.int64),
            "label_values:0": np.array([1, 2, 0, 1, 2, 3], np.int32), "label_shape:0": np.array([3, 4], np.int64)}
    return [*runs, {"feeds": late, "fetches": [other.name]}]


@case
def embedding_lookup_sparse(tf: Any) -> list[dict[str, Any]]:
    """Sparse features as TF1 wide-and-deep code embeds them: ``tf.nn.embedding_lookup_sparse`` of
    ``SparseTensor`` ids (a row with no id, a repeated id) with each combiner (``sum``, ``mean``,
    ``sqrtn``; weighted by a ``SparseTensor`` of weights for one), concatenated into a dense layer, a
    sigmoid loss, SGD (the gradients ``SparseSegment*Grad``)."""
    v1 = tf.compat.v1
    idx = v1.placeholder(tf.int64, [None, 2], name="ids_indices")
    vals = v1.placeholder(tf.int64, [None], name="ids_values")
    wts = v1.placeholder(tf.float32, [None], name="weights")
    shape = v1.placeholder(tf.int64, [2], name="ids_shape")
    y = v1.placeholder(tf.float32, [None, 1], name="y")
    emb = v1.get_variable("emb", [9, 3], initializer=_seeded(tf, 91))
    ids = tf.SparseTensor(idx, vals, shape)
    parts = [tf.nn.embedding_lookup_sparse(emb, ids, None, combiner=c) for c in ("sum", "mean", "sqrtn")]
    parts.append(tf.nn.embedding_lookup_sparse(emb, ids, tf.SparseTensor(idx, wts, shape), combiner="mean"))
    h = tf.concat(parts, 1)
    w = v1.get_variable("w", [12, 1], initializer=_seeded(tf, 92))
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=tf.matmul(h, w)), name="loss")
    train = v1.train.GradientDescentOptimizer(0.5).minimize(loss)
    feeds = {"ids_indices:0": np.array([[0, 0], [0, 1], [0, 2], [2, 0], [3, 0], [3, 1]], np.int64),
             "ids_values:0": np.array([1, 4, 4, 8, 0, 2], np.int64),
             "weights:0": np.array([0.5, 1.0, 2.0, 1.5, 1.0, 3.0], np.float32),
             "ids_shape:0": np.array([4, 3], np.int64), "y:0": np.array([[1.0], [0.0], [1.0], [0.0]], np.float32)}
    return _train_runs(feeds, loss, train, [emb.value(), w.value(), h])


@case
def roi_crops(tf: Any) -> list[dict[str, Any]]:
    """A two-stage detector's region head as TF1 code writes it: convolution features, fed boxes (one
    reaching past the image, sampled at ``extrapolation_value``) cropped and resized by
    ``tf.image.crop_and_resize`` to 3 x 3, a dense head, SGD (``CropAndResizeGradImage``), and the
    gradient with respect to the boxes fetched (``CropAndResizeGradBoxes``); a 1 x 4 crop too."""
    v1 = tf.compat.v1
    images = v1.placeholder(tf.float32, [None, 6, 7, 2], name="images")
    boxes = v1.placeholder(tf.float32, [None, 4], name="boxes")
    index = v1.placeholder(tf.int32, [None], name="box_index")
    k = v1.get_variable("conv/k", [3, 3, 2, 3], initializer=_seeded(tf, 101))
    feats = tf.nn.relu(tf.nn.conv2d(images, k, [1, 1, 1, 1], "SAME"))
    crops = tf.image.crop_and_resize(feats, boxes, index, [3, 3], extrapolation_value=0.5)
    thin = tf.image.crop_and_resize(images, boxes, index, [1, 4])
    w = v1.get_variable("head/w", [27, 2], initializer=_seeded(tf, 102))
    scores = tf.matmul(tf.reshape(crops, [-1, 27]), w)
    loss = tf.add(tf.reduce_mean(tf.square(scores)), tf.reduce_sum(thin) * 0.01, name="roi_loss")
    train = v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    (dboxes,) = tf.gradients(loss, [boxes])
    rng = np.random.default_rng(103)
    feeds = {"images:0": rng.normal(size=(2, 6, 7, 2)).astype(np.float32),
             "boxes:0": np.array([[0.1, 0.2, 0.7, 0.9], [0.0, 0.0, 1.0, 1.0], [0.5, -0.2, 1.3, 0.6]], np.float32),
             "box_index:0": np.array([0, 1, 1], np.int32)}
    runs = _train_runs(feeds, loss, train, [k.value(), w.value()])
    return [*runs, {"feeds": feeds, "fetches": [dboxes.name, crops.name, thin.name]}]


@case
def conv3d_video(tf: Any) -> list[dict[str, Any]]:
    """A video (or volume) classifier as TF1 code writes it: ``layers.conv3d`` with ``same`` padding and
    strides over rows and columns, a ``valid`` one over depth, relu, 3-D max and average pooling
    added, global average pooling, a dense head, Adam (``Conv3DBackpropInputV2``,
    ``Conv3DBackpropFilterV2``, ``MaxPool3DGrad``, ``AvgPool3DGrad``); a fed batch of clips."""
    v1 = tf.compat.v1
    clips = v1.placeholder(tf.float32, [None, 5, 6, 6, 2], name="clips")
    labels = v1.placeholder(tf.int32, [None], name="labels")
    h = v1.layers.conv3d(clips, 3, 3, strides=(1, 2, 2), padding="same", activation=tf.nn.relu, name="c1",
                         kernel_initializer=_seeded(tf, 111))
    h = v1.layers.conv3d(h, 4, (2, 1, 1), padding="valid", activation=tf.nn.relu, name="c2",
                         kernel_initializer=_seeded(tf, 112))
    h = v1.layers.max_pooling3d(h, 2, (1, 2, 2), padding="same") + v1.layers.average_pooling3d(h, 2, (1, 2, 2),
                                                                                                padding="same")
    logits = v1.layers.dense(tf.reduce_mean(h, axis=[1, 2, 3]), 3, name="head", kernel_initializer=_seeded(tf, 113))
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits), name="loss")
    train = v1.train.AdamOptimizer(0.05).minimize(loss)
    rng = np.random.default_rng(114)
    feeds = {"clips:0": rng.normal(size=(2, 5, 6, 6, 2)).astype(np.float32), "labels:0": np.array([2, 0], np.int32)}
    return _train_runs(feeds, loss, train, [h, *(v.value() for v in v1.trainable_variables()[:2])])
