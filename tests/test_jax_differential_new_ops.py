"""The window ops and the array builders against JAX, inside control flow: the regressions a
differential campaign found, and a small derandomized form of that campaign.

The campaign drew programs of ``tn.conv2d`` / ``tn.max_pool`` / ``tn.avg_pool`` (NHWC and NCHW, SAME and
VALID, strides larger than the window, windows larger than the input, dilations, batches of 0 and 1,
integer inputs to max pooling, float32 and float64, shapes known only when the program runs) and of the
array builders (``squeeze``, ``unstack``, ``split``, ``slice``, ``one_hot``, ``argmax``/``argmin``,
``rank``, ``clip_by_value``, ``stack(axis=)``, ``tn.nn.softmax``/``log_softmax``, ``tn.range``), plain
and in ``while_loop`` bodies (whose gradients pop the saved values off stacks), ``cond`` branches,
``map_fn``, ``scan`` and ``foldl``, and compared values, dtypes, shapes, gradients and error types with
the same program in ``jax.numpy`` and ``jax.grad`` on every route of ``tests/route_table.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from route_table import COMPILED_ROUTES, ROUTES, run_on
from strategies import WindowCase, window_cases

import turnout as tn

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402


def _each_route(g: tn.Graph, fetches: Any, feeds: Any) -> dict[str, Any]:
    return {route: run_on(route, g, fetches, feeds) for route in ROUTES}


# ---- empty batches, empty images, no output channels ----------------------------------------------------
def test_max_pool_gradient_of_an_empty_batch_is_empty_on_every_route() -> None:
    """Law: the gradient of a max pool over an empty batch (N = 0) is an empty gradient of the input's
    shape, as ``jax.grad`` gives it, in a while_loop too (the interpreters' MaxPoolGrad kernel failed,
    "cannot reshape array of size 0", while the fast backend ran it)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 1, 3, 1])
        plain = tn.gradients(tn.reduce_sum(tn.max_pool(x, [1, 3], [3, 4], "SAME") ** 2), [x])[0]
        _, s = tn.while_loop(lambda i, s: i < 2,
                             lambda i, s: (i + 1, s + tn.reduce_sum(tn.max_pool(x * tn.cast(i, tn.float32), 2, 1,
                                                                                "SAME"))),
                             [tn.constant(0), tn.constant(0.0)])
        looped = tn.gradients(s, [x])[0]
    xv = np.zeros((0, 1, 3, 1), np.float32)
    for route, got in _each_route(g, [plain, looped], {x: xv}).items():
        for a in got:
            assert a.shape == xv.shape and a.dtype == np.float32, route


@pytest.mark.parametrize("op", ["conv2d", "max_pool", "avg_pool"])
def test_an_empty_image_under_same_padding_has_an_empty_output_and_gradient(op: str) -> None:
    """Law (TensorFlow's and XLA's SAME): an image with no rows has ``ceil(0 / stride) = 0`` output rows,
    and its gradient is empty too, whatever the window; a window longer than the padded (empty) input
    is no error (the interpreters' kernels failed, "window shape cannot be larger than input array
    shape", while the fast backend gave the empty output)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, None)
        w = tn.placeholder(tn.float64, None)
        y = tn.conv2d(x, w, 1, "SAME") if op == "conv2d" else getattr(tn, op)(x, 2, 1, "SAME")
        grads = tn.gradients(tn.reduce_sum(y * y), [x, w] if op == "conv2d" else [x])
    xv, wv = np.ones((1, 0, 3, 1)), np.ones((2, 2, 1, 2))
    for route, got in _each_route(g, [y, *grads], {x: xv, w: wv}).items():
        assert got[0].shape == (1, 0, 3, 2 if op == "conv2d" else 1), route
        assert got[1].shape == xv.shape, route
        if op == "conv2d":
            np.testing.assert_array_equal(got[2], np.zeros_like(wv), err_msg=route)


def test_a_convolution_to_no_output_channels_is_empty_and_its_input_gradient_zero() -> None:
    """Law: a filter of shape [kh, kw, c, 0] gives an output with no channels, an input gradient of
    zeros and an empty filter gradient, as ``jax.grad`` of ``lax.conv_general_dilated`` (the interpreters'
    kernel failed, "cannot reshape array of size 0", from a reshape with -1 of an empty filter)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, None)
        w = tn.placeholder(tn.float64, None)
        y = tn.conv2d(x, w, [1, 2], "VALID")
        gx, gw = tn.gradients(tn.reduce_sum(tn.sin(y)), [x, w])
    xv, wv = np.arange(18.0).reshape(1, 3, 3, 2), np.ones((2, 2, 2, 0))
    for route, got in _each_route(g, [y, gx, gw], {x: xv, w: wv}).items():
        assert got[0].shape == (1, 2, 1, 0), route
        np.testing.assert_array_equal(got[1], np.zeros_like(xv), err_msg=route)
        assert got[2].shape == wv.shape, route


# ---- Fill: a vector shape and a scalar value, when built and when run ----------------------------------
def test_fill_refuses_a_value_that_is_not_a_scalar_and_a_shape_that_is_not_a_vector() -> None:
    """Law (TensorFlow's Fill): the value is a scalar and the shape a vector. When built, a vector value
    is a ShapeError (numpy and JAX broadcast it silently into the result); known only when run, it
    and a shape of rank 2 are KernelErrors with the shape rule's words on every route. ``tn.range``
    of a fed limit of shape [1] meets the second (it failed with numpy's "only 0-dimensional arrays
    can be converted to Python scalars")."""
    g = tn.Graph()
    with g.as_default():
        with pytest.raises(tn.ShapeError, match=r"Fill: the value must be a scalar, got shape \[2\]"):
            tn.fill([2], tn.constant([1.0, 2.0]))
        v = tn.placeholder(tn.float64, None)
        n = tn.placeholder(tn.int32, None)
        filled = tn.fill([2], v)
        counted = tn.range(n)
    for route in ROUTES:
        np.testing.assert_array_equal(run_on(route, g, filled, {v: 3.0}), [3.0, 3.0])
        np.testing.assert_array_equal(run_on(route, g, counted, {n: 3}), [0, 1, 2])
        with pytest.raises(tn.KernelError, match=r"Fill: the value must be a scalar, got shape \[2\]"):
            run_on(route, g, filled, {v: np.ones(2)})
        with pytest.raises(tn.KernelError, match=r"node \"range/"):  # (on two devices the partition holding
            run_on(route, g, counted, {n: np.array([3], np.int32)})  # range's Cumsum may report first)
    with pytest.raises(tn.KernelError, match=r"range/ones.*Fill: the shape must be a vector, got a tensor of shape "
                                             r"\[1, 1\]"):
        run_on("fast", g, counted, {n: np.array([3], np.int32)})


# ---- the extremum of no rows -----------------------------------------------------------------------------
def test_max_and_softmax_of_a_batch_of_no_rows_are_empty_on_every_route() -> None:
    """Law (TensorFlow, numpy and JAX): reducing an empty tensor along axes that are not empty leaves an
    empty result, so ``reduce_max(x, axis=1)`` of a [0, 3] ``x`` is [0] and ``tn.nn.softmax`` /
    ``log_softmax`` of a batch of no rows are [0, 3], with empty gradients, in a while_loop too (Max
    and Min refused any empty input, "reduction over an empty tensor", on every route). Reducing the
    empty axis itself gives the reduction's identity, as TensorFlow's kernels do: -inf for a maximum
    (test_extremum_over_no_elements_is_its_identity_and_softmax_of_no_classes_is_empty)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 3])
        top, low = tn.reduce_max(x, axis=1), tn.reduce_min(x, axis=-1, keepdims=True)
        probs, logs = tn.nn.softmax(x), tn.nn.log_softmax(x)
        _, s = tn.while_loop(lambda i, s: i < 2,
                             lambda i, s: (i + 1, s + tn.reduce_sum(tn.nn.log_softmax(x * tn.cast(i, tn.float32)))),
                             [tn.constant(0), tn.constant(0.0)])
        (dx,) = tn.gradients(tn.reduce_sum(probs * probs) + s, [x])
        over_rows = tn.reduce_max(x, axis=0)
    xv = np.zeros((0, 3), np.float32)
    for route in ROUTES:
        got = run_on(route, g, [top, low, probs, logs, s, dx], {x: xv})
        assert [a.shape for a in got] == [(0,), (0, 1), (0, 3), (0, 3), (), (0, 3)], route
        assert all(a.dtype == np.float32 for a in got) and got[4] == 0.0, route
        np.testing.assert_array_equal(run_on(route, g, over_rows, {x: xv}), np.full(3, -np.inf, np.float32))


def test_extremum_over_no_elements_is_its_identity_and_softmax_of_no_classes_is_empty() -> None:
    """Law (TensorFlow's kernels; ``jax.lax.reduce_max``): ``Max`` over no elements is the least value
    of the dtype (-inf for floats), ``Min`` the greatest, so ``tn.nn.softmax`` and ``log_softmax``
    along an axis of size 0 are empty, with empty gradients, as TensorFlow's are (all three were
    KernelError "Max: reduction over an empty tensor", on every route)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2, None])
        i = tn.placeholder(tn.int32, [None])
        probs, logs = tn.nn.softmax(x), tn.nn.log_softmax(x)
        (dx,) = tn.gradients(tn.reduce_sum(probs) + tn.reduce_sum(logs), [x])
        outs = [tn.reduce_max(x, axis=1), tn.reduce_min(x, axis=-1, keepdims=True), tn.reduce_max(i),
                tn.reduce_min(i), probs, logs, dx]
    for route in ROUTES:
        got = run_on(route, g, outs, {x: np.zeros((2, 0), np.float32), i: np.zeros(0, np.int32)})
        np.testing.assert_array_equal(got[0], np.full(2, -np.inf, np.float32))
        np.testing.assert_array_equal(got[1], np.full((2, 1), np.inf, np.float32))
        assert got[2] == np.iinfo(np.int32).min and got[3] == np.iinfo(np.int32).max, route
        assert [a.shape for a in got[4:]] == [(2, 0)] * 3, route
        assert all(a.dtype == np.float32 for a in got[:2] + got[4:]), route




# ---- a gradient reshaped back to a shape with an unknown size beside a 0 ---------------------------------
def test_gradients_back_to_a_shape_with_an_unknown_size_beside_a_zero_read_the_run_time_shape() -> None:
    """Law: the gradient of ``squeeze(expand_dims(x, 0) * 1.5, 0)`` and of ``reshape(x, [-1])`` for an
    ``x`` of static shape [?, 0] is an empty gradient of x's run-time shape, in a while_loop too.
    Reshaping back to [-1, 0] names no size (any size times 0 is 0), so the gradient reads the shape
    when it runs (it was a KernelError, "cannot reshape [1, 3, 0] to [-1, 0]", on every route)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [None, 0])

        def f(t: Any) -> Any:
            return tn.reduce_sum(tn.squeeze(tn.expand_dims(t, 0) * 1.5, 0)) + tn.reduce_sum(tn.reshape(t, [-1]))

        _, s = tn.while_loop(lambda i, s: i < 2, lambda i, s: (i + 1, s + f(x)),
                             [tn.constant(0), tn.constant(0.0, tn.float64)])
        grads = tn.gradients(f(x), [x]) + tn.gradients(s, [x])
    for route, got in _each_route(g, grads, {x: np.zeros((3, 0))}).items():
        assert [a.shape for a in got] == [(3, 0), (3, 0)], route

# ---- max pooling's gradient where a window holds NaN (docs/missing.rst) ----------------------------------
@pytest.mark.xfail(strict=True, reason="docs/missing.rst: the fast backend picks by XLA's select-and-scatter")
def test_max_pool_gradient_of_a_window_holding_nan_is_one_answer_everywhere() -> None:
    """Law (one answer on every route): the gradient of a max pool over windows [1, nan] and [nan, 5]
    goes to the same element of each window on every route. The interpreters give it to each window's
    first element, the fast backend to the NaN of the first window and the 5 of the second."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [1, 1, 4, 1])
        (d,) = tn.gradients(tn.reduce_sum(tn.max_pool(x, [1, 2], [1, 2], "VALID")), [x])
    xv = np.array([1.0, np.nan, np.nan, 5.0]).reshape(1, 1, 4, 1)
    got = _each_route(g, d, {x: xv})
    for route, a in got.items():
        np.testing.assert_array_equal(a, got["reference"], err_msg=route)

# ---- the campaign, derandomized: window programs in control flow against jax.grad ----------------------
def _pads(size: int, k: int, s: int, d: int, padding: str) -> tuple[int, int]:
    """TensorFlow's SAME split (the odd element after), written out here so JAX gets explicit pads."""
    if padding == "VALID":
        return (0, 0)
    total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
    return (total // 2, total - total // 2)


def _jax_window(c: WindowCase, x: Any, w: Any) -> Any:
    """The window op of ``c`` in JAX over an NHWC ``x``."""
    pads = [_pads(x.shape[1 + i], c.window[i], c.strides[i], c.dilations[i], c.padding) for i in range(2)]
    if c.op == "conv":
        return lax.conv_general_dilated(x, w, c.strides, pads, rhs_dilation=c.dilations,
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=lax.Precision.HIGHEST)
    win, st, full = (1, *c.window, 1), (1, *c.strides, 1), [(0, 0), *pads, (0, 0)]
    if c.op == "max":
        return lax.reduce_window(x, -jnp.inf, lax.max, win, st, full)
    ones = jnp.ones_like(x)
    return lax.reduce_window(x, 0.0, lax.add, win, st, full) / lax.reduce_window(ones, 0.0, lax.add, win, st, full)


def _turnout_window(c: WindowCase, x: Any, w: Any) -> Any:
    if c.op == "conv":
        return tn.conv2d(x, w, list(c.strides), c.padding, dilations=list(c.dilations), data_format=c.data_format)
    pool = tn.max_pool if c.op == "max" else tn.avg_pool
    return pool(x, list(c.window), list(c.strides), c.padding, data_format=c.data_format)


def _in_context(c: WindowCase, loss: Any, x: Any, lib: str) -> Any:
    """``loss`` of ``x`` in ``c.context``, the same program in Turnout (``lib="tn"``) and in JAX (loops
    unrolled; the while loop runs twice, the cond takes its true branch, map/scan go over the batch)."""
    if lib == "jax":
        per = [loss(x[i:i + 1]) for i in range(x.shape[0])]
        return {"plain": lambda: loss(x), "while": lambda: loss(x) + loss(2 * x), "cond": lambda: loss(x),
                "map": lambda: sum((p * p for p in per), 0.0),
                "scan": lambda: sum((sum(per[:i + 1], 0.0) for i in range(len(per))), 0.0)}[c.context]()
    one = tn.constant(1, x.dtype)
    if c.context == "plain":
        return loss(x)
    if c.context == "while":
        return tn.while_loop(lambda i, s: i < 2, lambda i, s: (i + 1, s + loss(x * (tn.cast(i, x.dtype) + one))),
                             [tn.constant(0), tn.constant(0, x.dtype)])[1]
    if c.context == "cond":
        return tn.cond(tn.reduce_sum(tn.zeros_like(x)) < one, lambda: loss(x), lambda: loss(x + x))
    if c.context == "map":
        return tn.reduce_sum(tn.map_fn(lambda e: loss(tn.expand_dims(e, 0)), x, dtype=x.dtype) ** 2)
    return tn.reduce_sum(tn.scan(lambda s, e: s + loss(tn.expand_dims(e, 0)), x, initializer=tn.constant(0, x.dtype)))


@settings(max_examples=max(3, settings.default.max_examples // 34))
@given(window_cases())
def test_generated_window_programs_in_control_flow_match_jax(c: WindowCase) -> None:
    """Law: a window op in a while_loop body, a cond branch, map_fn or scan, and its gradient with
    respect to the images and the filter, equal the same program in JAX and ``jax.grad``, on the
    compiled routes, for batches of 0 to 2, images with no rows, SAME windows larger than the input and
    strides larger than the window (``TURNOUT_HYPOTHESIS_PROFILE=dev`` or ``nightly`` for a long run;
    the campaign behind it also ran every route of ``tests/route_table.py``)."""
    rng = np.random.default_rng(c.seed)
    n, h, w, ch = c.nhwc
    shape = (n, h, w, ch) if c.data_format == "NHWC" else (n, ch, h, w)
    xv = rng.normal(size=shape).astype(c.dtype)
    wv = rng.normal(size=(*c.window, ch, c.out_channels)).astype(c.dtype)
    known = {"static": list(shape), "batch": [None, *shape[1:]], "unknown": None}[c.shape_mode]
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(getattr(tn, c.dtype), known)
        f = tn.placeholder(getattr(tn, c.dtype), None if c.shape_mode == "unknown" else list(wv.shape))

        def loss(t: Any) -> Any:
            y = _turnout_window(c, t, f)
            return tn.reduce_sum(tn.tanh(y)) + tn.reduce_sum(y * y) * tn.constant(0.25, t.dtype)

        out = _in_context(c, loss, x, "tn")
        fetches = [out, *tn.gradients(out, [x, f] if c.op == "conv" else [x])]

    def program(xj: Any, wj: Any) -> Any:
        def loss(t: Any) -> Any:
            y = _jax_window(c, t if c.data_format == "NHWC" else jnp.transpose(t, (0, 2, 3, 1)), wj)
            return jnp.sum(jnp.tanh(y)) + jnp.sum(y * y) * 0.25

        return _in_context(c, loss, xj, "jax")

    with jax.enable_x64(True):
        xj, wj = jnp.asarray(xv), jnp.asarray(wv)
        value, grads = jax.value_and_grad(program, (0, 1) if c.op == "conv" else (0,))(xj, wj)
    want = [np.asarray(value), *map(np.asarray, grads)]
    tol = 2e-4 if c.dtype == "float32" else 1e-9
    for route in COMPILED_ROUTES:
        got = run_on(route, g, fetches, {x: xv, f: wv})
        for k, (a, b) in enumerate(zip(got, want, strict=True)):
            assert a.shape == b.shape and a.dtype == np.dtype(c.dtype), (route, k, a.shape, a.dtype)
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.abs(b).max(initial=0))),
                                       err_msg=f"{route}: output {k}")
