"""Import rules of TensorFlow's CNN ops on paths the TensorFlow fixtures (``cnn_*``) do not take: NCHW
windows, gradients whose result shape is a constant, batch normalisation with an
``exponential_avg_factor`` and its gradient in both modes (against ``jax.vjp`` of the training
formula), ``VariableShape`` as int64, the refusals, and a ``tf.cond`` on a ``PlaceholderWithDefault``.
Hand-written GraphDefs, on both backends; needs the ``tf`` extra, not TensorFlow."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.errors import UnsupportedError

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from test_graphdef_model_ops import BACKENDS, BOOL, F32, GraphDef, _run  # noqa: E402

from turnout.graphdef import import_graph_def  # noqa: E402

RNG = np.random.default_rng(5)
X = RNG.normal(size=(2, 3, 5, 4)).astype(np.float32)  # NCHW: 2 images of 3 channels, 5 x 4
W = RNG.normal(size=(2, 2, 3, 2)).astype(np.float32)


def _nhwc(backend: str) -> list[Any]:
    """What Turnout's own NHWC ops give for the NCHW graph of ``test_nchw_windows_are_the_nhwc_ones``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(np.transpose(X, [0, 2, 3, 1]))
        y = tn.conv2d(x, W, [2, 1], "SAME")
        dx = tn.gradients(tn.reduce_sum(y * y), [x])[0]
        outs = [y, tn.max_pool(x, [3, 2], 1, "SAME"), tn.avg_pool(x, 2, [1, 2], "VALID"), dx]
    return [np.transpose(v, [0, 3, 1, 2]) for v in tn.Session(g, backend=backend).run(outs)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_nchw_windows_are_the_nhwc_ones(backend: str) -> None:
    """Law: an NCHW Conv2D, MaxPool, AvgPool and Conv2DBackpropInput (with constant ``input_sizes``)
    compute the NHWC op's values, transposed."""
    g = GraphDef()
    x, w = g.const("x", X), g.const("w", W)
    nchw = {"data_format": "NCHW", "T": F32}
    g.node("conv", "Conv2D", (x, w), strides=[1, 1, 2, 1], padding="SAME", **nchw)
    g.node("peak", "MaxPool", (x,), ksize=[1, 1, 3, 2], strides=[1, 1, 1, 1], padding="SAME", **nchw)
    g.node("mean", "AvgPool", (x,), ksize=[1, 1, 2, 2], strides=[1, 1, 1, 2], padding="VALID", **nchw)
    g.node("two", "Mul", ("conv", g.const("c2", np.float32(2.0))), T=F32)
    g.node("dx", "Conv2DBackpropInput", (g.const("sizes", np.asarray(X.shape, np.int32)), w, "two"),
           strides=[1, 1, 2, 1], padding="SAME", **nchw)
    got = _run(g, ["conv:0", "peak:0", "mean:0", "dx:0"], {}, backend)
    for a, b in zip(got, _nhwc(backend), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _bn_graph(training: bool, factor: float = 1.0) -> GraphDef:
    """FusedBatchNormV3 of a fed NHWC ``x`` and its FusedBatchNormGradV3 for a fed ``dy``."""
    g = GraphDef()
    x, dy = g.placeholder("x", F32, [-1, 3, 2, 3]), g.placeholder("dy", F32, [-1, 3, 2, 3])
    scale, offset = g.const("scale", np.float32([0.5, 2.0, -1.0])), g.const("offset", np.float32([0.1, 0.0, -0.3]))
    mean, var = g.const("mean", np.float32([0.2, -0.1, 0.4])), g.const("var", np.float32([1.5, 0.7, 2.0]))
    attrs = {"T": F32, "epsilon": 0.01, "is_training": training}
    g.node("bn", "FusedBatchNormV3", (x, scale, offset, mean, var), exponential_avg_factor=factor, **attrs)
    g.node("grad", "FusedBatchNormGradV3", (dy, x, scale, "bn:3", "bn:4", "bn:5"), **attrs)
    return g


SCALE, OFFSET = np.float32([0.5, 2.0, -1.0]), np.float32([0.1, 0.0, -0.3])
MEAN, VAR = np.float32([0.2, -0.1, 0.4]), np.float32([1.5, 0.7, 2.0])
XB, DY = RNG.normal(size=(2, 3, 2, 3)).astype(np.float32), RNG.normal(size=(2, 3, 2, 3)).astype(np.float32)


def _bn(x: Any, scale: Any, offset: Any, jnp: Any) -> Any:
    m = jnp.mean(x, axis=(0, 1, 2))
    v = jnp.mean((x - m) ** 2, axis=(0, 1, 2))
    return (x - m) / jnp.sqrt(v + 0.01) * scale + offset


@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_batch_norm_in_training_mode(backend: str) -> None:
    """Law: training mode normalises by the batch's statistics; ``batch_variance`` is the unbiased
    variance, both statistics blended ``(1 - f) * running + f * batch`` (f = 0.5 here); the gradient
    is the vector-Jacobian product of that normalisation (``jax.vjp``)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    g = _bn_graph(training=True, factor=0.5)
    got = _run(g, ["bn:0", "bn:1", "bn:2", "bn:3", "bn:4", "grad:0", "grad:1", "grad:2"], {"x:0": XB, "dy:0": DY},
               backend)
    m, v = XB.mean(axis=(0, 1, 2)), XB.var(axis=(0, 1, 2))
    n = XB.size / 3
    y, back = jax.vjp(lambda x, s, o: _bn(x, s, o, jnp), XB, SCALE, OFFSET)
    want = [y, 0.5 * MEAN + 0.5 * m, 0.5 * VAR + 0.5 * v * n / (n - 1), m, v, *back(DY)]
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(a, np.asarray(b), rtol=2e-5, atol=2e-5, err_msg=f"output {k}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_batch_norm_in_inference_mode(backend: str) -> None:
    """Law: inference mode normalises by the given statistics, which pass through; its gradient is
    that affine map's: ``dx = dy * scale / sqrt(var + eps)``."""
    g = _bn_graph(training=False)
    got = _run(g, ["bn:0", "bn:1", "bn:2", "grad:0", "grad:1", "grad:2"], {"x:0": XB, "dy:0": DY}, backend)
    inv = 1.0 / np.sqrt(VAR + 0.01)
    want = [(XB - MEAN) * inv * SCALE + OFFSET, MEAN, VAR, DY * SCALE * inv,
            np.sum(DY * (XB - MEAN), axis=(0, 1, 2)) * inv, np.sum(DY, axis=(0, 1, 2))]
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=f"output {k}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_variable_shape_as_int64(backend: str) -> None:
    g = GraphDef()
    g.node("v", "VarHandleOp", dtype=F32, shape=[2, 3], shared_name="v")
    g.node("v/Assign", "AssignVariableOp", ("v", g.const("init", np.ones((2, 3), np.float32))), dtype=F32)
    g.node("s", "VariableShape", ("v",), out_type=9)
    (got,) = _run(g, ["s:0"], {}, backend)
    assert got.dtype == np.int64 and got.tolist() == [2, 3]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_cond_on_a_placeholder_with_default_follows_its_feed(backend: str) -> None:
    """Regression: a Switch read its predicate through every Identity before it, so a ``tf.cond`` on
    a ``PlaceholderWithDefault`` (batch normalisation's ``training`` flag) took the default's branch
    even when the flag was fed the other way. Law: a fed flag chooses the branch."""
    g = GraphDef()
    g.node("flag", "PlaceholderWithDefault", (g.const("default", np.bool_(True)),), dtype=BOOL, shape=[])
    g.node("pred_id", "Identity", ("flag",), T=BOOL)
    x = g.const("x", np.float32(3.0))
    g.node("sw", "Switch", (x, "pred_id"), T=F32)
    g.node("neg", "Neg", ("sw:0",), T=F32)
    g.node("merge", "Merge", ("neg", "sw:1"), T=F32, N=2)
    imp = import_graph_def(g.gd)
    sess = tn.Session(imp.graph, backend=backend)
    assert imp.run(sess, ["merge:0"], {}) == [3.0]
    assert imp.run(sess, ["merge:0"], {"flag:0": np.bool_(False)}) == [-3.0]


def test_refusals_name_the_op_and_what_it_cannot_honour() -> None:
    cases = [
        ("Conv2D", {"strides": [2, 1, 1, 1], "padding": "SAME"}, "moves along the batch or the channels"),
        ("Conv2D", {"strides": [1, 1, 1, 1], "padding": "EXPLICIT"}, "padding EXPLICIT"),
        ("Conv2D", {"strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NCHW_VECT_C"}, "data_format"),
        ("MaxPool", {"ksize": [1, 2, 2], "strides": [1, 1, 1, 1], "padding": "SAME"}, "ksize must have 4 entries"),
    ]
    for op, attrs, msg in cases:
        g = GraphDef()
        ins = (g.const("x", np.ones((1, 4, 4, 3), np.float32)),)
        if op == "Conv2D":
            ins = (*ins, g.const("w", np.ones((2, 2, 3, 1), np.float32)))
        g.node("op", op, ins, T=F32, **attrs)
        with pytest.raises(UnsupportedError, match=f'{op} node "op": .*{msg}'):
            import_graph_def(g.gd)
    g = GraphDef()
    g.node("op", "Conv2D", (g.const("x", np.ones((1, 4, 4, 3), np.float32)), g.const("w", np.ones((2, 2, 3, 1),
                                                                                              np.float32))),
           T=F32, strides=[1, 1, 1, 1], padding="FULL")
    with pytest.raises(tn.ArgumentError, match="Conv2D: padding must be 'SAME' or 'VALID', got 'FULL'"):
        import_graph_def(g.gd)



@pytest.mark.parametrize("backend", BACKENDS)
def test_resizing_an_integer_image_and_to_one_pixel(backend: str) -> None:
    """TensorFlow's bilinear resize returns float32 of an int32 image; nearest keeps the dtype; with
    ``align_corners`` and one output pixel the scale is the plain ratio (no division by zero), so
    the pixel is the first one. (The interpolation itself is checked against TensorFlow by the
    fixture ``image_resize``.)"""
    from test_graphdef_model_ops import I32

    img = np.arange(2 * 3 * 4 * 1, dtype=np.int32).reshape(2, 3, 4, 1)
    g = GraphDef()
    x = g.const("img", img)
    g.node("bl", "ResizeBilinear", (x, g.const("s6", np.asarray([6, 8], np.int32))), T=I32)
    g.node("nn", "ResizeNearestNeighbor", (x, g.const("s1", np.asarray([1, 1], np.int32))), T=I32,
           align_corners=True)
    bl, nn = _run(g, ["bl:0", "nn:0"], {}, backend)
    assert bl.dtype == np.float32 and nn.dtype == np.int32
    # legacy bilinear upsampling by exactly 2 along both axes: even pixels are the input's
    np.testing.assert_array_equal(bl[:, ::2, ::2], img.astype(np.float32))
    np.testing.assert_array_equal(bl[:, 1, 1], (img[:, 0, 0] + img[:, 0, 1] + img[:, 1, 0] + img[:, 1, 1]) / 4)
    np.testing.assert_array_equal(nn, img[:, :1, :1])


def test_resizing_needs_its_sizes_at_import_and_says_which() -> None:
    g = GraphDef()
    g.node("bl", "ResizeBilinear", (g.placeholder("x", F32, [1, 3, 4, 1]), g.placeholder("s", 3, [2])), T=F32)
    with pytest.raises(UnsupportedError, match='ResizeBilinear node "bl": the size .* must be known when importing'):
        import_graph_def(g.gd)
    g = GraphDef()
    g.node("nn", "ResizeNearestNeighbor", (g.placeholder("x", F32, [1, -1, 4, 1]),
                                           g.const("s", np.asarray([2, 2], np.int32))), T=F32)
    with pytest.raises(UnsupportedError, match="the image's rows and columns must be known"):
        import_graph_def(g.gd)
