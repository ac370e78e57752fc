"""TensorFlow fixture cases for the ops common in TF1/TF2 models that import as formulas over existing
primitives (turnout.graphdef.import_arrays, import_scatter, the new rules of import_math):
registered and written by tools/tf_fixtures.py. Each model trains a few steps with a TF1 optimizer,
so the GraphDef holds TensorFlow's gradient ops of them (``MirrorPadGrad``, ``SoftsignGrad``, the
``Xlogy`` / ``Xdivy`` of Xlogy's gradient, ``BatchToSpaceND`` of SpaceToBatchND's, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from tf_fixture_helpers import _train_runs, _weights, names

CASES: dict[str, Callable[[Any], list[dict[str, Any]]]] = {}


def case(fn: Callable[[Any], list[dict[str, Any]]]) -> Callable[[Any], list[dict[str, Any]]]:
    CASES[fn.__name__] = fn
    return fn


@case
def dilated_conv_embedding(tf: Any) -> list[dict[str, Any]]:
    """An embedding in a TF1 reference variable (``VariableV2``) whose rows are reshaped into a small
    image, mirror-padded (REFLECT, then SYMMETRIC), through an atrous convolution
    (``SpaceToBatchND``, ``Conv2D``, ``BatchToSpaceND``), ``SpaceToDepth`` / ``DepthToSpace``, a
    ``Roll``, a softsign, then a matrix's band, diagonal and set diagonal, a ``TensorScatterAdd``,
    an ``UnsortedSegmentMax`` and ``Prod``, an ``Xlogy`` cross entropy and a ``MulNoNan`` mask;
    trained by SGD, which applies the embedding's sparse gradient with ``ScatterSub``. Beside it:
    ``InTopKV2`` (with ties), ``LinSpace``, ``Rint`` and a ``tf.Print``."""
    vocab, rows = 6, 3
    ids = tf.compat.v1.placeholder(tf.int32, [None], name="ids")
    target = tf.compat.v1.placeholder(tf.float32, [None, 4], name="target")
    emb = tf.compat.v1.Variable(_weights((vocab, 16), 160, 1.0), name="emb", use_resource=False)
    filt = tf.compat.v1.Variable(_weights((2, 2, 1, 2), 161, 0.8), name="filt", use_resource=False)
    w = tf.compat.v1.Variable(_weights((rows * 4, 4), 162, 0.5), name="w", use_resource=False)
    img = tf.reshape(tf.nn.embedding_lookup(emb, ids), [-1, 4, 4, 1])
    img = tf.pad(img, [[0, 0], [1, 1], [2, 1], [0, 0]], mode="REFLECT")  # 6 x 7
    img = tf.pad(img, [[0, 0], [1, 1], [0, 1], [0, 0]], mode="SYMMETRIC")  # 8 x 8
    conv = tf.nn.atrous_conv2d(img, filt, rate=2, padding="SAME")  # 8 x 8 x 2
    deep = tf.nn.space_to_depth(conv, 2)  # 4 x 4 x 8
    back = tf.nn.depth_to_space(tf.roll(deep, shift=[1, -1], axis=[1, 3]), 2)  # 8 x 8 x 2
    feat = tf.nn.softsign(tf.reduce_mean(back, axis=[2, 3]))  # [batch, 8]
    m = tf.reshape(feat, [-1, 2, 4])
    band = tf.linalg.band_part(m, 0, 1) + tf.linalg.set_diag(m, tf.linalg.diag_part(m) * 2.0)
    diag = tf.linalg.diag(tf.linalg.diag_part(band))  # [batch, 2, 2]
    flat = tf.concat([tf.reshape(band, [-1, 8]), tf.reshape(diag, [-1, 4])], axis=1)  # [batch, 12]
    flat = tf.tensor_scatter_nd_add(flat, [[0, 1], [1, 3], [0, 1]], [0.5, -0.25, 1.0])
    out = tf.matmul(flat, w)  # [batch, 4]
    segs = tf.constant([0, 1, 0, 2], name="segs")
    seg_max = tf.math.unsorted_segment_max(tf.transpose(out), segs, 3)  # [3, batch]
    seg_prod = tf.math.unsorted_segment_prod(tf.transpose(tf.tanh(out)), segs, 3)
    probs = tf.nn.softmax(out)
    xent = -tf.reduce_mean(tf.math.xlogy(target, probs))
    mask = tf.cast(target > 0.3, tf.float32)
    masked = tf.reduce_mean(tf.math.multiply_no_nan(tf.square(out), mask))
    loss = xent + 0.1 * masked + 0.01 * tf.reduce_sum(tf.square(seg_max)) + 0.01 * tf.reduce_sum(seg_prod)
    train = tf.compat.v1.train.GradientDescentOptimizer(0.2).minimize(loss)
    labels = tf.compat.v1.placeholder(tf.int32, [None], name="labels")
    top = tf.math.in_top_k(predictions=tf.round(out * 2.0), targets=labels, k=2, name="top")
    ramp = tf.raw_ops.LinSpace(start=tf.reduce_min(out), stop=tf.reduce_max(out), num=5, name="ramp")
    halves = tf.compat.v1.placeholder(tf.float32, [None], name="halves")
    rint = tf.math.rint(halves, name="rint")
    printed = tf.compat.v1.Print(loss, [loss, ids], message="loss: ", name="printed")
    rng = np.random.default_rng(163)
    feeds = {"ids:0": np.asarray([1, 4, 1], np.int32), "target:0": rng.dirichlet(np.ones(4), 3).astype(np.float32)}
    runs = _train_runs(feeds, loss, train, [emb, filt, w])
    tops = {**feeds, "labels:0": np.asarray([0, 3, 1], np.int32),
            "halves:0": np.asarray([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.7], np.float32)}
    return runs + [{"feeds": tops, "fetches": [top.name, ramp.name, rint.name, printed.name, seg_max.name]}]


@case
def runtime_ranges_top_k(tf: Any) -> list[dict[str, Any]]:
    """``tf.range`` of run-time start and step (ints and floats), a TensorArray gathered at a
    run-time range that is not ``range(0, n)``, a loop whose body gathers at ``range(a, n, s)``, and
    ``nn.top_k`` trained through (its gradient's ``Range`` steps by a dimension it reads from a
    ``GatherV2`` of a static ``Shape``), trained by momentum."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 6], name="x")
    a = tf.compat.v1.placeholder(tf.int32, [], name="a")
    s = tf.compat.v1.placeholder(tf.int32, [], name="s")
    f = tf.compat.v1.placeholder(tf.float32, [], name="f")
    w = tf.compat.v1.get_variable("w", initializer=_weights((6, 6), 170, 0.6))
    h = tf.tanh(tf.matmul(x, w))
    top, idx = tf.nn.top_k(h, k=3)
    row = tf.reshape(h, [-1])
    n = tf.shape(row)[0]

    def body(i: Any, acc: Any) -> Any:  # (the range's bounds are fed: the fast backend specialises on them)
        return i + 1, acc + tf.cast(i, tf.float32) * tf.reduce_sum(tf.gather(row, tf.range(a, n, s)))

    _, picked = tf.while_loop(lambda i, acc: i < 3, body, [0, tf.constant(0.0)])
    loss = tf.reduce_sum(top * top) + 0.1 * picked * picked
    train = tf.compat.v1.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    ints = tf.range(a, 3 * n, s, name="ints")
    floats = tf.range(0.5, f, 1.5, name="floats")
    steps = tf.range(f, 10.0, f, name="steps")
    ta = tf.TensorArray(tf.float32, size=n, clear_after_read=False).unstack(row)
    odd = ta.gather(tf.range(1, n, 2), name="odd")
    from_a = ta.gather(tf.range(a, n, s), name="from_a")
    feeds = {"x:0": np.random.default_rng(171).normal(size=(2, 6)).astype(np.float32),
             "a:0": 1, "s:0": 3, "f:0": 4.0}
    runs = _train_runs(feeds, loss, train, [w.value(), idx])
    other = {**feeds, "a:0": 4, "s:0": 5, "f:0": 2.5}
    return runs + [{"feeds": feeds, "fetches": [ints.name, floats.name, steps.name, odd.name, from_a.name]},
                   {"feeds": other, "fetches": [ints.name, steps.name, from_a.name]}]


@case
def sharded_embedding(tf: Any) -> list[dict[str, Any]]:
    """An embedding split over three shards by a ``fixed_size_partitioner`` and looked up with both
    partition strategies (``DynamicPartition`` of the ids, ``ParallelDynamicStitch`` of the rows back
    in order), a ``dynamic_partition`` of float rows trained through (its gradient stitches the
    partitioned gradients), and a ``dynamic_stitch`` whose indices repeat (the later wins), trained by
    Adagrad (``ResourceSparseApplyAdagrad`` on each shard)."""
    ids = tf.compat.v1.placeholder(tf.int32, [None], name="ids")
    parts = tf.compat.v1.placeholder(tf.int32, [None], name="parts")
    emb = tf.compat.v1.get_variable("emb", [10, 4], initializer=tf.compat.v1.random_normal_initializer(0.0, 0.5, 180),
                                    partitioner=tf.compat.v1.fixed_size_partitioner(3))
    by_mod = tf.compat.v1.nn.embedding_lookup(emb, ids, partition_strategy="mod")
    by_div = tf.compat.v1.nn.embedding_lookup(emb, ids, partition_strategy="div")
    rows = tf.tanh(by_mod + 0.5 * by_div)
    pieces = tf.dynamic_partition(rows, parts, 3)
    back = tf.dynamic_stitch([tf.range(tf.size(ids)), tf.constant([0, 0])], [rows * 2.0, pieces[0][:2] + 1.0])
    loss = (tf.reduce_sum(tf.square(pieces[0])) + 0.5 * tf.reduce_sum(pieces[1]) - tf.reduce_sum(pieces[2] * rows[:1])
            + 0.1 * tf.reduce_sum(back))
    train = tf.compat.v1.train.AdagradOptimizer(0.1).minimize(loss)
    feeds = {"ids:0": np.asarray([1, 7, 3, 9, 1, 0], np.int32), "parts:0": np.asarray([0, 2, 0, 1, 2, 0], np.int32)}
    runs = _train_runs(feeds, loss, train, [v.value() for v in emb])
    return runs + [{"feeds": feeds, "fetches": [by_mod.name, by_div.name, pieces[1].name, back.name]}]


@case
def reference_sparse_optimizers(tf: Any) -> list[dict[str, Any]]:
    """TF1's default Variables (``VariableV2``, reference variables) holding embeddings, each trained
    on its looked-up rows by a sparse optimizer update: ``SparseApplyAdagrad``,
    ``SparseApplyMomentum`` (Nesterov), ``SparseApplyRMSProp`` (with momentum) and
    ``SparseApplyCenteredRMSProp``, the reference forms of the resource ops TF2's Variables use."""
    ids = tf.compat.v1.placeholder(tf.int32, [None], name="ids")
    tables = [tf.compat.v1.Variable(_weights((6, 3), 190 + k, 0.7), name=f"table{k}", use_resource=False)
              for k in range(4)]
    rows = [tf.nn.embedding_lookup(t, ids) for t in tables]
    losses = [tf.reduce_sum(tf.square(tf.tanh(r) - 0.25 * k)) for k, r in enumerate(rows)]
    opts = [tf.compat.v1.train.AdagradOptimizer(0.2),
            tf.compat.v1.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
            tf.compat.v1.train.RMSPropOptimizer(0.05, momentum=0.5),
            tf.compat.v1.train.RMSPropOptimizer(0.05, momentum=0.5, centered=True)]
    train = tf.group(*[o.minimize(loss, var_list=[t]) for o, loss, t in zip(opts, losses, tables)])
    loss = tf.add_n(losses, name="loss")
    feeds = {"ids:0": np.asarray([0, 4, 2, 4], np.int32)}
    return _train_runs(feeds, loss, train, tables)


@case
def more_optimizers(tf: Any) -> list[dict[str, Any]]:
    """TF1's other optimizers on one least-squares loss, each on a reference variable (``Apply*``) and
    a resource variable (``ResourceApply*``), and on embedding rows (their sparse updates, reference
    and resource): Adadelta, proximal gradient descent and proximal Adagrad (L1 and L2), FTRL
    (``ApplyFtrl``; an ``l1`` that zeroes weights; ``ApplyFtrlV2`` with a learning-rate power other
    than -0.5 and L2 shrinkage), and ``ResourceApplyFtrl`` with ``multiply_linear_by_lr`` written
    with ``tf.raw_ops`` (no TF1 optimizer sets it)."""
    v1 = tf.compat.v1
    x = v1.placeholder(tf.float32, [None, 3], name="x")
    y = v1.placeholder(tf.float32, [None, 2], name="y")
    ids = v1.placeholder(tf.int32, [None], name="ids")
    opts = {"adadelta": lambda: v1.train.AdadeltaOptimizer(1.0, rho=0.9, epsilon=1e-4),
            "proximal_sgd": lambda: v1.train.ProximalGradientDescentOptimizer(0.1, 0.05, 0.2),
            "proximal_adagrad": lambda: v1.train.ProximalAdagradOptimizer(0.3, l1_regularization_strength=0.05,
                                                                          l2_regularization_strength=0.2),
            "ftrl": lambda: v1.train.FtrlOptimizer(0.3, l1_regularization_strength=0.01,
                                                   l2_regularization_strength=0.1),
            "ftrl_l1": lambda: v1.train.FtrlOptimizer(0.3, l1_regularization_strength=0.6),
            "ftrl_v2": lambda: v1.train.FtrlOptimizer(0.3, learning_rate_power=-0.7, l1_regularization_strength=0.01,
                                                      l2_regularization_strength=0.1,
                                                      l2_shrinkage_regularization_strength=0.05)}
    losses, steps, watched = [], [], []
    for k, (name, make) in enumerate(opts.items()):
        for resource in (False, True):
            tag = f"{name}_{'resource' if resource else 'ref'}"
            w = v1.Variable(_weights((3, 2), 300 + 2 * k + resource), name=f"w_{tag}", use_resource=resource)
            emb = v1.Variable(_weights((5, 2), 320 + 2 * k + resource), name=f"emb_{tag}", use_resource=resource)
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
            loss += tf.reduce_sum(tf.square(tf.tanh(tf.nn.embedding_lookup(emb, ids)) - 0.3))
            losses.append(tf.identity(loss, name=f"loss_{tag}"))
            steps.append(make().minimize(loss))
            watched += [w.value(), emb.value()]
    var = v1.Variable(_weights((3, 2), 340), name="w_raw", use_resource=True)
    accum = v1.Variable(np.full((3, 2), 0.1, np.float32), name="accum_raw", use_resource=True)
    linear = v1.Variable(np.zeros((3, 2), np.float32), name="linear_raw", use_resource=True)
    raw_loss = tf.reduce_mean(tf.square(tf.matmul(x, var) - y), name="loss_raw")
    (grad,) = tf.gradients(raw_loss, [var])
    steps.append(tf.raw_ops.ResourceApplyFtrl(var=var.handle, accum=accum.handle, linear=linear.handle, grad=grad,
                                              lr=0.3, l1=0.02, l2=0.1, lr_power=-0.5, multiply_linear_by_lr=True))
    total = tf.add_n([*losses, raw_loss], name="total")
    rng = np.random.default_rng(341)
    feeds = {"x:0": rng.normal(size=(4, 3)).astype(np.float32), "y:0": rng.normal(size=(4, 2)).astype(np.float32),
             "ids:0": np.asarray([0, 3, 4], np.int32)}
    return _train_runs(feeds, total, tf.group(*steps), [*losses, *watched, var.value(), accum.value(), linear.value()])


@case
def optimizer_hyperparameters(tf: Any) -> list[dict[str, Any]]:
    """Fed hyperparameters of the proximal and FTRL updates (``tf.raw_ops`` on resource variables),
    values TensorFlow's kernels branch on or refuse among them: proximal gradient descent with a
    negative ``l1`` (its kernel then skips the soft threshold), proximal Adagrad at a rate of 0
    (refused, dense and sparse), and FTRL at a positive learning-rate power (refused by the sparse
    kernel alone: the dense one computes with it)."""
    v1 = tf.compat.v1
    x = v1.placeholder(tf.float32, [None, 3], name="x")
    y = v1.placeholder(tf.float32, [None, 2], name="y")
    ids = v1.placeholder(tf.int32, [None], name="ids")
    l1 = v1.placeholder(tf.float32, [], name="l1")
    lr = v1.placeholder(tf.float32, [], name="lr")
    power = v1.placeholder(tf.float32, [], name="power")

    def weights(name: str, seed: int, shape: tuple[int, ...] = (3, 2), fill: float | None = None) -> Any:
        value = _weights(shape, seed) if fill is None else np.full(shape, fill, np.float32)
        return v1.Variable(value, name=name, use_resource=True)

    def dense_loss(w: Any) -> Any:
        return tf.reduce_mean(tf.square(tf.matmul(x, w) - y))

    def rows_loss(emb: Any) -> Any:
        return tf.reduce_sum(tf.square(tf.tanh(tf.nn.embedding_lookup(emb, ids)) - 0.3))

    w_prox, w_ada, w_ftrl = weights("w_prox", 400), weights("w_ada", 401), weights("w_ftrl", 402)
    e_ada, e_ftrl = weights("e_ada", 403, (5, 2)), weights("e_ftrl", 404, (5, 2))
    acc = {k: weights(f"accum_{k}", 0, s, 0.1) for k, s in [("w_ada", (3, 2)), ("w_ftrl", (3, 2)),
                                                           ("e_ada", (5, 2)), ("e_ftrl", (5, 2))]}
    lin = {k: weights(f"linear_{k}", 0, s, 0.0) for k, s in [("w_ftrl", (3, 2)), ("e_ftrl", (5, 2))]}
    losses = [dense_loss(w_prox), dense_loss(w_ada), dense_loss(w_ftrl), rows_loss(e_ada), rows_loss(e_ftrl)]
    grads = [tf.gradients(loss, [w])[0] for loss, w in zip(losses, [w_prox, w_ada, w_ftrl, e_ada, e_ftrl])]
    raw = tf.raw_ops
    prox = raw.ResourceApplyProximalGradientDescent(var=w_prox.handle, alpha=0.1, l1=l1, l2=0.2, delta=grads[0])
    ada = raw.ResourceApplyProximalAdagrad(var=w_ada.handle, accum=acc["w_ada"].handle, lr=lr, l1=0.01, l2=0.1,
                                           grad=grads[1])
    ftrl = raw.ResourceApplyFtrl(var=w_ftrl.handle, accum=acc["w_ftrl"].handle, linear=lin["w_ftrl"].handle,
                                 grad=grads[2], lr=0.3, l1=0.01, l2=0.1, lr_power=power)
    ada_rows = raw.ResourceSparseApplyProximalAdagrad(var=e_ada.handle, accum=acc["e_ada"].handle, lr=lr, l1=0.01,
                                                      l2=0.1, grad=grads[3].values, indices=grads[3].indices)
    ftrl_rows = raw.ResourceSparseApplyFtrl(var=e_ftrl.handle, accum=acc["e_ftrl"].handle,
                                            linear=lin["e_ftrl"].handle, grad=grads[4].values,
                                            indices=grads[4].indices, lr=0.3, l1=0.01, l2=0.1, lr_power=power)
    total = tf.add_n(losses, name="total")
    rng = np.random.default_rng(405)
    data = {"x:0": rng.normal(size=(4, 3)).astype(np.float32), "y:0": rng.normal(size=(4, 2)).astype(np.float32),
            "ids:0": np.asarray([0, 3, 4], np.int32)}

    def fed(l1v: float, lrv: float, powv: float) -> dict[str, Any]:
        return {**data, "l1:0": np.float32(l1v), "lr:0": np.float32(lrv), "power:0": np.float32(powv)}

    every = tf.group(prox, ada, ftrl, ada_rows, ftrl_rows)
    watched = [w.value() for w in (w_prox, w_ada, w_ftrl, e_ada, e_ftrl)]
    runs = _train_runs(fed(0.05, 0.3, -0.5), total, every, watched, steps=2)
    return runs + [
        {"feeds": fed(-1.0, 0.3, -0.5), "fetches": [], "targets": [prox.name]},
        {"feeds": fed(0.05, 0.3, 0.5), "fetches": [], "targets": [ftrl.name]},
        {"feeds": fed(0.05, 0.3, -0.5), "fetches": names(watched[:3])},
        {"feeds": fed(0.05, 0.0, -0.5), "fetches": [], "targets": [ada.name], "error": "lr is not a positive scalar"},
        {"feeds": fed(0.05, 0.0, -0.5), "fetches": [], "targets": [ada_rows.name],
         "error": "lr is not a positive scalar"},
        {"feeds": fed(0.05, 0.3, 0.5), "fetches": [], "targets": [ftrl_rows.name],
         "error": "lr_power is not a non-positive scalar"}]


@case
def sorted_segments(tf: Any) -> list[dict[str, Any]]:
    """``tf.math.segment_sum`` and ``segment_mean`` over fed sorted ids (segment 1 empty in the first
    feed), trained through (their gradients gather the output's gradient at the ids, the mean's
    scaled by each segment's count) by SGD, and a run whose ids are not sorted (TensorFlow's kernel
    refuses it)."""
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    ids = tf.compat.v1.placeholder(tf.int32, [None], name="ids")
    w = tf.compat.v1.get_variable("w", initializer=_weights((3, 3), 200, 0.6))
    h = tf.tanh(tf.matmul(x, w))
    sums = tf.math.segment_sum(h, ids, name="sums")
    means = tf.math.segment_mean(h * h, ids, name="means")
    loss = tf.reduce_sum(sums * sums) + tf.reduce_sum(means)
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    rng = np.random.default_rng(201)
    feeds = {"x:0": rng.normal(size=(6, 3)).astype(np.float32), "ids:0": np.asarray([0, 0, 2, 2, 2, 3], np.int32)}
    other = {"x:0": rng.normal(size=(3, 3)).astype(np.float32), "ids:0": np.asarray([1, 1, 1], np.int32)}
    unsorted = {"x:0": rng.normal(size=(3, 3)).astype(np.float32), "ids:0": np.asarray([0, 2, 1], np.int32)}
    runs = _train_runs(feeds, loss, train, [w.value()])
    return runs + [{"feeds": other, "fetches": [sums.name, means.name]},
                   {"feeds": unsorted, "fetches": [sums.name], "error": "segment ids are not increasing"}]


@case
def tensor_array_split_concat(tf: Any) -> list[dict[str, Any]]:
    """A TF1 loop fed by ``TensorArray.split`` (``TensorArraySplitV3``, lengths computed from a fed
    count) that writes a step of each piece and joins them with ``concat`` (``TensorArrayConcatV3``,
    whose lengths output is fetched too), trained by SGD: the gradients split the concat's gradient
    into a gradient array and concat the split's back. (A run whose rows are no multiple of the
    count fails in TensorFlow with a message that shows its values: tests/test_tensor_array_split_concat.py
    checks Turnout's error for it.)"""
    x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
    n = tf.compat.v1.placeholder(tf.int32, [], name="n")
    w = tf.compat.v1.get_variable("w", initializer=_weights((3, 3), 210, 0.6))
    h = tf.tanh(tf.matmul(x, w))
    piece = tf.shape(h)[0] // n
    pieces = tf.TensorArray(tf.float32, size=n, infer_shape=True).split(h, tf.fill([n], piece))
    out = tf.TensorArray(tf.float32, size=n)

    def body(i: Any, out: Any) -> Any:
        return i + 1, out.write(i, pieces.read(i) * tf.cast(i + 1, tf.float32))

    _, out = tf.compat.v1.while_loop(lambda i, out: i < n, body, [tf.constant(0), out])
    concat = out.concat()
    joined = tf.identity(concat, name="joined")
    lengths = tf.identity(concat.op.outputs[1], name="lengths")
    loss = tf.reduce_sum(joined * joined, name="loss")
    train = tf.compat.v1.train.GradientDescentOptimizer(0.05).minimize(loss)
    rng = np.random.default_rng(211)
    feeds = {"x:0": rng.normal(size=(6, 3)).astype(np.float32), "n:0": np.asarray(3, np.int32)}
    other = {"x:0": rng.normal(size=(4, 3)).astype(np.float32), "n:0": np.asarray(4, np.int32)}
    runs = _train_runs(feeds, loss, train, [w.value()])
    return runs + [{"feeds": other, "fetches": [joined.name, lengths.name]}]
