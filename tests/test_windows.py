"""Convolution and pooling (``tn.conv2d``, ``tn.max_pool``, ``tn.avg_pool``) on every route of
``tests/route_table.py``: against JAX's own ``conv_general_dilated`` and ``reduce_window`` (values
and ``jax.grad``), against closed forms anyone can check by hand (TensorFlow's uneven ``SAME``
padding, the gradient of a max pool going to the *first* largest element of a window), and bad
inputs refused with the same Turnout error on every route. The gradient rules are checked against
finite differences in ``tests/test_gradient_rules.py``, TensorFlow's own graphs in
``tests/test_graphdef_import.py`` (the ``cnn_*`` fixtures) and ``tests/test_graphdef_nn_ops.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from route_table import ROUTES, run_on

import turnout as tn

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

F = tn.float64
RNG = np.random.default_rng(11)


#: (padding, strides, dilations) of the windows checked against JAX: TensorFlow's uneven SAME
#: padding with unequal strides, and VALID windows with a dilation
CONFIGS = [("SAME", (2, 3), (1, 1)), ("VALID", (1, 2), (2, 1))]


def _jax_windows(x: Any, w: Any) -> Any:
    """The loss of ``test_windows_and_their_gradients_match_jax_on_every_route`` in JAX, and its parts."""
    parts, loss = [], 0.0
    for padding, strides, dil in CONFIGS:
        y = lax.conv_general_dilated(x, w, strides, padding, rhs_dilation=dil,
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=lax.Precision.HIGHEST)
        win, st = (1, 3, 2, 1), (1, *strides, 1)
        peak = lax.reduce_window(x, -jnp.inf, lax.max, win, st, padding)
        count = lax.reduce_window(jnp.ones_like(x), 0.0, lax.add, win, st, padding)
        mean = lax.reduce_window(x, 0.0, lax.add, win, st, padding) / count
        loss = loss + jnp.sum(jnp.tanh(y)) + jnp.sum(peak * peak) + jnp.sum(mean ** 3)
        parts += [y, peak, mean]
    return loss, parts


def test_windows_and_their_gradients_match_jax_on_every_route() -> None:
    """Law: each window op and the gradient ``tn.gradients`` builds through it equal JAX's op and
    ``jax.grad``, on every route, for a batch whose size the graph does not know."""
    x, w = RNG.normal(size=(2, 7, 6, 3)), RNG.normal(size=(3, 2, 3, 4))
    x[0, :3, :3, 0] = 1.0  # tied maxima
    g = tn.Graph()
    with g.as_default():
        xp, wp = tn.placeholder(F, [None, 7, 6, 3]), tn.placeholder(F, [3, 2, 3, 4])
        parts, loss = [], 0.0
        for padding, strides, dil in CONFIGS:
            y = tn.conv2d(xp, wp, list(strides), padding, dilations=list(dil))
            peak = tn.max_pool(xp, [3, 2], list(strides), padding)
            mean = tn.avg_pool(xp, [3, 2], list(strides), padding)
            loss = loss + tn.reduce_sum(tn.tanh(y)) + tn.reduce_sum(peak * peak) + tn.reduce_sum(mean * mean * mean)
            parts += [y, peak, mean]
        gx, gw = tn.gradients(loss, [xp, wp])
    with jax.enable_x64(True):
        (_, want), grads = jax.value_and_grad(_jax_windows, (0, 1), has_aux=True)(x, w)
    for route in ROUTES:
        got = run_on(route, g, [*parts, gx, gw], {xp: x, wp: w})
        for k, (a, b) in enumerate(zip(got, [*want, *grads], strict=True)):
            np.testing.assert_allclose(a, np.asarray(b), rtol=1e-10, atol=1e-12, err_msg=f"{route}: output {k}")


def test_grouped_and_depthwise_convolutions_and_their_gradients_match_jax_on_every_route() -> None:
    """Law: a convolution of G feature groups (a filter with channels / G input channels, as in
    TensorFlow) and a depthwise one (``tn.depthwise_conv2d``, a group per channel, its filter
    (rows, columns, channels, multiplier)) equal JAX's ``feature_group_count`` convolutions, values
    and ``jax.grad``, on every route; the depthwise output channel ``c * M + m`` is channel ``c``'s
    filter ``m``."""
    x, wg, wd = RNG.normal(size=(2, 6, 5, 4)), RNG.normal(size=(3, 2, 2, 6)), RNG.normal(size=(2, 3, 4, 2))
    g = tn.Graph()
    with g.as_default():
        xp, gp = tn.placeholder(F, [None, 6, 5, 4]), tn.placeholder(F, [3, 2, 2, 6])
        dp = tn.placeholder(F, [2, 3, 4, 2])
        yg = tn.conv2d(xp, gp, [2, 1], "SAME", dilations=[1, 2])
        yd = tn.depthwise_conv2d(xp, dp, 1, "VALID")
        loss = tn.reduce_sum(tn.tanh(yg)) + tn.reduce_sum(yd * yd)
        grads = tn.gradients(loss, [xp, gp, dp])

    def jax_loss(x: Any, wg: Any, wd: Any) -> Any:
        dims = ("NHWC", "HWIO", "NHWC")
        yg = lax.conv_general_dilated(x, wg, (2, 1), "SAME", rhs_dilation=(1, 2), dimension_numbers=dims,
                                      feature_group_count=2, precision=lax.Precision.HIGHEST)
        yd = lax.conv_general_dilated(x, wd.reshape(2, 3, 1, 8), (1, 1), "VALID", dimension_numbers=dims,
                                      feature_group_count=4, precision=lax.Precision.HIGHEST)
        return jnp.sum(jnp.tanh(yg)) + jnp.sum(yd * yd), (yg, yd)

    with jax.enable_x64(True):
        (_, want), jgrads = jax.value_and_grad(jax_loss, (0, 1, 2), has_aux=True)(x, wg, wd)
    # the depthwise channel order by hand: output channel c * M + m at one window
    by_hand = sum(x[0, a, b, 1] * wd[a, b, 1, 1] for a in range(2) for b in range(3))
    for route in ROUTES:
        got = run_on(route, g, [yg, yd, *grads], {xp: x, gp: wg, dp: wd})
        assert got[1][0, 0, 0, 1 * 2 + 1] == pytest.approx(by_hand, rel=1e-12)
        for k, (a, b) in enumerate(zip(got, [*want, *jgrads], strict=True)):
            np.testing.assert_allclose(a, np.asarray(b), rtol=1e-10, atol=1e-12, err_msg=f"{route}: output {k}")


def test_grouped_convolutions_round_trip_through_a_graph_def_and_tn_save() -> None:
    """TensorFlow reads a Conv2D's groups from its filter's shape: exported as plain Conv2D and its
    backprops, imported back with the groups again; ``tn.save`` keeps the attribute."""
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")
    from turnout.graphdef import export_graph_def, import_graph_def

    x, w = RNG.normal(size=(2, 5, 4, 6)), RNG.normal(size=(2, 2, 3, 4))
    g = tn.Graph()
    with g.as_default():
        xp, wp = tn.placeholder(F, [None, 5, 4, 6], name="x"), tn.placeholder(F, [2, 2, 3, 4], name="w")
        loss = tn.reduce_sum(tn.square(tn.conv2d(xp, wp, 1, "SAME")))
        grads = tn.gradients(loss, [xp, wp])
    want = tn.Session(g).run([loss, *grads], {xp: x, wp: w})
    ex = export_graph_def(g)
    imp = import_graph_def(ex.graph_def)
    got = imp.run(tn.Session(imp.graph), [ex.tf_name(t) for t in [loss, *grads]],
                  {ex.tf_name(xp): x, ex.tf_name(wp): w})
    back = tn.loads(tn.dumps(g))
    saved = tn.Session(back).run([back.tensor(t.name) for t in [loss, *grads]],
                                 {back.tensor(xp.name): x, back.tensor(wp.name): w})
    for a, b, c in zip(got, saved, want, strict=True):
        np.testing.assert_allclose(a, c, rtol=1e-12)
        np.testing.assert_array_equal(b, c)


def test_same_padding_puts_the_odd_element_after() -> None:
    """Law (TensorFlow's SAME): ``ceil(n / stride)`` outputs; the padding a window needs is split with
    the odd element *after* the input. Rows 1..4, a window of 3 ones, stride 2: the windows are
    [1, 2, 3] and [3, 4, pad], so 6 and 7 (the odd pad before would give [pad, 1, 2] = 3)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(np.arange(1.0, 5.0).reshape(1, 4, 1, 1))
        y = tn.conv2d(x, tn.constant(np.ones((3, 1, 1, 1))), [2, 1], "SAME")
        peak = tn.max_pool(-x, [3, 1], [2, 1], "SAME")
        mean = tn.avg_pool(x, [3, 1], [2, 1], "SAME")
    for route in ROUTES:
        got = run_on(route, g, [y, peak, mean])
        np.testing.assert_array_equal(np.ravel(got[0]), [6.0, 7.0], err_msg=route)
        np.testing.assert_array_equal(np.ravel(got[1]), [-1.0, -3.0], err_msg=route)  # padding never wins
        np.testing.assert_array_equal(np.ravel(got[2]), [2.0, 3.5], err_msg=route)  # the pad is not counted


def test_max_pool_gradient_goes_to_the_first_largest_element() -> None:
    """Law (TensorFlow's MaxPoolGrad): each window's gradient is added at the first largest element
    in row-major order. A 3x3 input of equal values with 2x2 windows, stride 1: window (i, j) sends
    its gradient to (i, j), so the top-left 2x2 get 1 each and the last row and column nothing."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [1, 3, 3, 1])
        (dx,) = tn.gradients(tn.reduce_sum(tn.max_pool(x, 2, 1, "VALID")), [x])
    want = np.zeros((3, 3))
    want[:2, :2] = 1.0
    for route in ROUTES:
        got = run_on(route, g, dx, {x: np.full((1, 3, 3, 1), 0.5)})
        np.testing.assert_array_equal(got[0, :, :, 0], want, err_msg=route)


def test_nchw_is_the_nhwc_op_between_transposes() -> None:
    x, w = RNG.normal(size=(2, 3, 5, 4)), RNG.normal(size=(2, 2, 3, 2))
    g = tn.Graph()
    with g.as_default():
        xc = tn.constant(x)
        xn = tn.transpose(xc, [0, 2, 3, 1])
        pairs = [(tn.conv2d(xc, w, [1, 1, 2, 1], "SAME", data_format="NCHW"), tn.conv2d(xn, w, [2, 1], "SAME")),
                 (tn.max_pool(xc, [1, 1, 2, 2], 2, "VALID", data_format="NCHW"), tn.max_pool(xn, 2, 2, "VALID")),
                 (tn.avg_pool(xc, 3, 1, "SAME", data_format="NCHW"), tn.avg_pool(xn, 3, 1, "SAME"))]
    got = tn.Session(g).run(pairs)
    for nchw, nhwc in got:
        np.testing.assert_array_equal(nchw, np.transpose(nhwc, [0, 3, 1, 2]))


# ---- bad inputs: a Turnout error naming the op and the argument, alike on every route -------------
def _build(make: Any) -> None:
    g = tn.Graph()
    with g.as_default():
        make(tn.placeholder(F, [2, 5, 5, 3]), tn.placeholder(F, [2, 2, 3, 4]))


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda x, w: tn.conv2d(x[0], w, 1, "SAME"), tn.ShapeError, "Conv2D: the input must have rank 4"),
    (lambda x, w: tn.conv2d(x, w[0], 1, "SAME"), tn.ShapeError, "Conv2D: the filter must have rank 4"),
    (lambda x, w: tn.conv2d(x[:, :, :, :2], w, 1, "SAME"), tn.ShapeError, "input's channels differ"),
    (lambda x, w: tn.conv2d(x, w, 0, "SAME"), tn.ArgumentError, "Conv2D: strides must be two positive ints"),
    (lambda x, w: tn.conv2d(x, w, 1, "same"), tn.ArgumentError, "Conv2D: padding must be 'SAME' or 'VALID'"),
    (lambda x, w: tn.conv2d(x, w, 1, "SAME", dilations=[1, 0]), tn.ArgumentError, "Conv2D: dilations must"),
    (lambda x, w: tn.conv2d(x, w, [2, 1, 1, 1], "SAME"), tn.ArgumentError, "batch and the channels"),
    (lambda x, w: tn.conv2d(x, w, 1, "SAME", data_format="NWHC"), tn.ArgumentError, "data_format"),
    (lambda x, w: tn.conv2d(x, tn.cast(w, tn.float32), 1, "SAME"), tn.DTypeError, "Conv2D"),
    (lambda x, w: tn.max_pool(x, [0, 2], 1, "VALID"), tn.ArgumentError, "MaxPool: ksize must be two positive"),
    (lambda x, w: tn.max_pool(x, 6, 1, "VALID"), tn.ShapeError, "MaxPool: a window of 6"),
    (lambda x, w: tn.avg_pool(x, 2, 1.5, "VALID"), tn.ArgumentError, "avg_pool: strides"),
    (lambda x, w: tn.avg_pool(tn.cast(x, tn.int32), 2, 1, "VALID"), tn.DTypeError, "AvgPool"),
    # feature groups: the filter's input channels must divide the image's; its outputs split as evenly
    (lambda x, w: tn.conv2d(x, w[:, :, :2, :], 1, "SAME"), tn.ShapeError, "input's channels differ"),
    (lambda x, w: tn.conv2d(x, w[:, :, :1, :], 1, "SAME"), tn.ShapeError, "not a multiple of groups=3"),
    (lambda x, w: tn.depthwise_conv2d(x, tn.placeholder(F, [2, 2, None, 1]), 1, "SAME"), tn.ArgumentError,
     "depthwise_conv2d: the filter's shape"),
    (lambda x, w: x.graph.create_node("Conv2D", [x, w], {"strides": [1, 1], "dilations": [1, 1],
                                                         "padding": "SAME", "groups": 0}), tn.ArgumentError,
     "Conv2D: groups must be a positive int"),
])
def test_bad_arguments_are_refused_when_built(make: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        _build(make)


def test_shapes_known_only_when_run_are_refused_alike_on_every_route() -> None:
    """Law: an input the shape rule would refuse at build time, fed where the graph does not know its
    shape, is the same Turnout error (``KernelError`` with the rule's message) on every route."""
    g = tn.Graph()
    with g.as_default():
        x, w = tn.placeholder(F, None), tn.placeholder(F, None)
        y = tn.conv2d(x, w, 1, "VALID")
        peak = tn.max_pool(x, 3, 1, "VALID")
    bad = [({x: np.ones((5, 5, 3)), w: np.ones((2, 2, 3, 4))}, y, "Conv2D: the input must have rank 4"),
           ({x: np.ones((1, 5, 5, 2)), w: np.ones((2, 2, 3, 4))}, y, "input's channels differ"),
           ({x: np.ones((1, 2, 5, 3))}, peak, "MaxPool: a window of 3")]
    for feeds, fetch, message in bad:
        for route in ROUTES:
            with pytest.raises(tn.KernelError, match=message):
                run_on(route, g, fetch, feeds)


def test_windows_round_trip_through_a_graph_def() -> None:
    """Exported as TensorFlow's ops and imported back, the window ops and their gradients (whose
    result shape TensorFlow takes as a tensor) compute what they did."""
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")
    from turnout.graphdef import export_graph_def, import_graph_def

    x, w = RNG.normal(size=(2, 5, 4, 3)), RNG.normal(size=(2, 3, 3, 2))
    g = tn.Graph()
    with g.as_default():
        xp, wp = tn.placeholder(F, [None, 5, 4, 3], name="x"), tn.placeholder(F, [2, 3, 3, 2], name="w")
        y = tn.conv2d(tn.avg_pool(xp, 2, 1, "SAME"), wp, [2, 1], "SAME", dilations=[1, 2])
        loss = tn.reduce_sum(tn.max_pool(y * y, 2, 2, "VALID"))
        grads = tn.gradients(loss, [xp, wp])
    want = tn.Session(g).run([loss, *grads], {xp: x, wp: w})
    ex = export_graph_def(g)
    ops = {nd.op for nd in ex.graph_def.node}
    assert {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MaxPool", "MaxPoolGrad", "AvgPool",
            "AvgPoolGrad"} <= ops
    imp = import_graph_def(ex.graph_def)
    got = imp.run(tn.Session(imp.graph), [ex.tf_name(t) for t in [loss, *grads]],
                  {ex.tf_name(xp): x, ex.tf_name(wp): w})
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_windows_round_trip_through_tn_save_and_bad_attributes_are_refused_when_loaded() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [None, 5, 4, 2], name="x")
        y = tn.max_pool(tn.conv2d(x, np.ones((2, 2, 2, 3)), 2, "SAME", dilations=[1, 2]), 2, 1, "VALID")
        (dx,) = tn.gradients(tn.reduce_sum(tn.avg_pool(y, 2, 1, "SAME")), [x])
    text = tn.dumps(g)
    back = tn.loads(text)
    feed = RNG.normal(size=(2, 5, 4, 2))
    want = tn.Session(g).run(dx, {x: feed})
    np.testing.assert_array_equal(tn.Session(back).run(back.tensor(dx.name), {back.tensor(x.name): feed}), want)
    for good, bad, message in [('"padding": "VALID"', '"padding": "FOO"', "padding must be 'SAME' or 'VALID'"),
                               ('"ksize": [2, 2]', '"ksize": [0, 2]', "ksize must hold integers >= 1")]:
        assert good in text
        with pytest.raises(tn.SerializationError, match=message):
            tn.loads(text.replace(good, bad, 1))


def test_a_second_derivative_through_max_pooling_is_refused_naming_it() -> None:
    """MaxPoolGrad has no gradient (TensorFlow's MaxPoolGradGrad is not built, docs/missing.rst): a
    second derivative through a max pool is a GradientError naming the op, never a silent zero."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [1, 4, 4, 1])
        (dx,) = tn.gradients(tn.reduce_sum(tn.square(tn.max_pool(x * x, 2, 2, "VALID"))), [x])
        with pytest.raises(tn.GradientError, match="MaxPoolGrad.*second derivative through max pooling"):
            tn.gradients(tn.reduce_sum(dx), [x])
