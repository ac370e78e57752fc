"""Laws of the fast backend's window ops (``turnout.fast.lower_windows``): each convolution, pooling
op and gradient gives the reference interpreter's values (its numpy kernels, TensorFlow's), of the
same dtype and shape, on TensorFlow's uneven ``SAME`` padding (the odd element after), unequal
strides, dilations and feature groups; a max pool's padding never wins (its initial value is the
dtype's lowest) and its gradient goes to the first largest element of a window; an average pool
divides by the elements inside the input only. Each law kills mutants of the full set of
``fast/lower_windows.py`` (issue 40, part 3; ``python tools/mutation.py --module
fast/lower_windows.py --all``, ``"decorated"`` in the tool's list since ``@lowering_rule`` registers
the rules).

One program holds every case, so the fast backend compiles once; its gradients are built by
``tn.gradients`` (the ``Conv2DBackpropInput``, ``Conv2DBackpropFilter``, ``MaxPoolGrad`` and
``AvgPoolGrad`` nodes). It runs last: the smaller cases ahead of it stop most mutants sooner (the
tool runs the file with ``-x``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import turnout as tn
from turnout.fast.lowering import LOWERING_RULES

F = tn.float64
RNG = np.random.default_rng(5)


def _program() -> tuple[tn.Graph, list[tn.Tensor], dict[Any, Any]]:
    """Convolutions (SAME with strides (2, 3), VALID with dilations (2, 1), two feature groups with
    stride (1, 2) and dilations (1, 2)) and pools (max and average, SAME and VALID, windows taller
    than wide) of an input with tied maxima and negative values, their weighted sums as the loss,
    and its gradients with respect to the input and the filters."""
    x = RNG.normal(size=(2, 5, 7, 4)) - 1.0
    x[0, :3, :3, :] = -0.25  # tied maxima in the first windows
    w, wg = RNG.normal(size=(3, 2, 4, 3)), RNG.normal(size=(2, 3, 2, 6))
    g = tn.Graph()
    with g.as_default():
        xp, wp, gp = tn.placeholder(F, [2, 5, 7, 4]), tn.placeholder(F, [3, 2, 4, 3]), tn.placeholder(F, [2, 3, 2, 6])
        ys = [tn.conv2d(xp, wp, [2, 3], "SAME"), tn.conv2d(xp, wp, [1, 2], "VALID", dilations=[2, 1]),
              tn.conv2d(xp, gp, [1, 2], "SAME", dilations=[1, 2]),
              tn.max_pool(xp, [3, 2], [2, 3], "SAME"), tn.max_pool(xp, [2, 3], [1, 2], "VALID"),
              tn.avg_pool(xp, [3, 2], [2, 3], "SAME"), tn.avg_pool(xp, [2, 3], [2, 1], "SAME")]
        loss = tn.constant(0.0, F)
        for k, y in enumerate(ys):
            c = tn.constant(RNG.normal(size=[d for d in y.shape]), F)
            loss = loss + tn.reduce_sum(y * c) + (0.1 * k) * tn.reduce_sum(y * y)
        grads = tn.gradients(loss, [xp, wp, gp])
    return g, [*ys, *grads], {xp: x, wp: w, gp: wg}


def test_convolutions_ask_for_the_highest_precision() -> None:
    """Law: the Conv2D rule asks XLA for ``Precision.HIGHEST`` (a float32 convolution on a GPU is
    then not rounded through TF32; on a CPU the values cannot show it, so the traced program is
    read). Kills ``precision=None`` in ``_conv``."""
    g = tn.Graph()
    with g.as_default():
        y = tn.conv2d(tn.placeholder(tn.float32, [1, 4, 4, 2]), tn.placeholder(tn.float32, [2, 2, 2, 3]), [1, 1],
                      "VALID")
    rule = LOWERING_RULES["Conv2D"]
    jaxpr = jax.make_jaxpr(lambda a, b: rule(None, y.node, [a, b]))(jnp.ones((1, 4, 4, 2), jnp.float32),
                                                                   jnp.ones((2, 2, 2, 3), jnp.float32))
    (conv,) = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "conv_general_dilated"]
    precision = conv.params["precision"]
    assert precision is not None
    assert set(precision if isinstance(precision, tuple) else (precision,)) == {jax.lax.Precision.HIGHEST}


def test_an_integer_max_pool_pads_with_the_lowest_integer() -> None:
    """Law: a max pool of int32 values all below zero is the reference's, of dtype int32: its
    padding is the lowest int32 (``np.iinfo``), never 0 and never a float's ``-inf``. Kills the
    ``_lowest`` mutant that takes ``-inf`` for every dtype."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [1, 3, 4, 1])
        y = tn.max_pool(x, [2, 3], [2, 2], "SAME")
    v = -np.arange(1, 13, dtype=np.int32).reshape(1, 3, 4, 1)
    fast, ref = tn.Session(g, backend="fast", fallback=False).run(y, {x: v}), tn.Session(g).run(y, {x: v})
    assert fast.dtype == ref.dtype == np.int32
    np.testing.assert_array_equal(fast, ref)
    assert (fast < 0).all()


def test_pools_of_other_dtypes_keep_theirs() -> None:
    """Law: a max pool of float32 values all below zero (padding never wins: its initial value is
    the lowest float, not 0) and an average pool of float32 and their gradients are the
    reference's, of dtype float32; the padding an uneven SAME window needs goes after the input
    (the windows [1, 2, 3] and [3, 4, pad] of rows 1..4 with a window of 3 and stride 2)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [1, 4, 3, 2])
        peak = tn.max_pool(x, [3, 2], [2, 2], "SAME")
        mean = tn.avg_pool(x, [3, 2], [2, 2], "SAME")
        grads = tn.gradients(tn.reduce_sum(peak * peak) + tn.reduce_sum(mean * mean), [x])
    v = -np.arange(1.0, 25.0, dtype=np.float32).reshape(1, 4, 3, 2)
    outs = [peak, mean, *grads]
    fast, ref = tn.Session(g, backend="fast", fallback=False).run(outs, {x: v}), tn.Session(g).run(outs, {x: v})
    for a, b in zip(fast, ref, strict=True):
        assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_array_equal(fast[0][0, :, 0, 0], [v[0, 0, 0, 0], v[0, 2, 0, 0]])


def test_a_float32_convolution_and_its_gradients_keep_float32() -> None:
    """Law: a float32 convolution and its gradients with respect to the input and the filter are the
    reference's, of dtype float32 (the stand-in each gradient differentiates through has its
    input's dtype, not JAX's default float). Kills the ``jnp.zeros(shape, None)`` and
    ``jnp.zeros(shape)`` mutants of ``_conv2d_backprop_input`` and ``_conv2d_backprop_filter``."""
    g = tn.Graph()
    with g.as_default():
        x, w = tn.placeholder(tn.float32, [1, 4, 5, 2]), tn.placeholder(tn.float32, [2, 3, 2, 3])
        y = tn.conv2d(x, w, [1, 2], "SAME")
        grads = tn.gradients(tn.reduce_sum(y * y), [x, w])
    feeds = {x: RNG.normal(size=(1, 4, 5, 2)).astype(np.float32), w: RNG.normal(size=(2, 3, 2, 3)).astype(np.float32)}
    outs = [y, *grads]
    fast, ref = tn.Session(g, backend="fast", fallback=False).run(outs, feeds), tn.Session(g).run(outs, feeds)
    for a, b in zip(fast, ref, strict=True):
        assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_windows_and_their_gradients_are_the_references() -> None:
    """Law: every window op and gradient on the fast backend equals the reference's (float64, to
    rounding), with the same dtype and shape."""
    g, outs, feeds = _program()
    fast, ref = tn.Session(g, backend="fast", fallback=False).run(outs, feeds), tn.Session(g).run(outs, feeds)
    for k, (a, b) in enumerate(zip(fast, ref, strict=True)):
        assert a.dtype == b.dtype and a.shape == b.shape, k
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=f"output {k}")
