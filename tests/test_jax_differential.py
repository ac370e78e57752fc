"""Turnout against JAX on tensor programs: the regressions a differential campaign found.

Each test states one law and checks it on every backend (the reference interpreter, the fast backend,
and the fast backend through the partitioned executor), against a closed form or against the same
program written with ``jax.numpy`` and ``jax.grad``. The campaign drew random programs over tensors
of several shapes and dtypes (broadcasting, matmul, reductions, structure ops, cond/case/while_loop/
scan/map_fn/foldl and TensorArrays, and gradients through them) and compared values, dtypes, shapes,
gradients and error types; the last test here keeps a small derandomized form of it in the suite.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from route_table import COMPILED_ROUTES, run_strictly
from route_table import in_jax as _jax

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


import turnout as tn  # noqa: E402

ROUTES = COMPILED_ROUTES


# ---- BroadcastLike and SumToLike broadcast one way ---------------------------------------------------
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_broadcast_like_refuses_a_shape_that_does_not_broadcast_to_like(route: str) -> None:
    """``broadcast_like(x, like)`` has ``like``'s shape, so ``x`` must broadcast to it one way: [3, 1]
    against [3] is a ShapeError when built (it used to build, and fail when run with numpy's "input
    operand has more dimensions than allowed by the axis remapping" on the interpreters); with shapes
    known only at run time it is a KernelError with the same words on every backend."""
    g = tn.Graph()
    with g.as_default():
        with pytest.raises(tn.ShapeError, match=r"BroadcastLike: shape \[3, 1\] does not broadcast to \[3\]"):
            tn.broadcast_like(tn.zeros([3, 1]), tn.zeros([3]))
        with pytest.raises(tn.ShapeError, match=r"SumToLike: a tensor of shape \[3\] cannot be summed to shape "
                                                r"\[3, 1\]"):
            tn.sum_to_like(tn.zeros([3]), tn.zeros([3, 1]))
        x = tn.placeholder(tn.float32, None)
        up = tn.broadcast_like(x, tn.zeros([3]))
        down = tn.sum_to_like(x, tn.zeros([3]))
        fine = tn.broadcast_like(x, tn.zeros([2, 3])) + tn.sum_to_like(tn.ones([2, 3]), x)
    bad = np.zeros((3, 1), np.float32)
    with pytest.raises(tn.KernelError, match=r"BroadcastLike: shape \[3, 1\] does not broadcast to \[3\]"):
        run_strictly(route, g, up, {x: bad})
    with pytest.raises(tn.KernelError, match=r"SumToLike: a tensor of shape \[3, 1\] cannot be summed to shape \[3\]"):
        run_strictly(route, g, down, {x: bad})
    np.testing.assert_array_equal(run_strictly(route, g, fine, {x: np.ones((1, 3), np.float32)}), np.ones((2, 3)) + 2)


# ---- the gradient of a reshape of a value whose static shape is unknown ---------------------------------
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_reshape_gradient_reads_the_run_time_shape(route: str) -> None:
    """d/du sum(reshape(u, [-1])**2) = 2u for a ``u`` of unknown static shape: the gradient reshapes
    back to the shape ``u`` has when it runs, as TensorFlow's does (it was a GradientError, "reshape
    gradient needs the static shape")."""
    g = tn.Graph()
    with g.as_default():
        u = tn.placeholder(tn.float64, None)
        (d,) = tn.gradients(tn.reduce_sum(tn.square(tn.reshape(u, [-1]))), [u])
    uv = np.arange(6.0).reshape(2, 3) - 2.5
    np.testing.assert_allclose(run_strictly(route, g, d, {u: uv}), 2 * uv)


# ---- a TensorArray written in a while_loop -------------------------------------------------------------
def _rows_loop(x: Any) -> Any:
    """Three rows [x0 * x0, x0 * x1] tiled to [3, 2], written by a while_loop into a fresh TensorArray."""
    ta = tn.TensorArray(tn.float64, size=3)

    def body(i: Any, ta: Any) -> Any:
        return i + 1, ta.write(i, tn.broadcast_like(x[0] * x, tn.zeros([3, 2], tn.float64)))

    _, ta = tn.while_loop(lambda i, ta: i < 3, body, [tn.constant(0), ta])
    return ta.stack()


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_tensor_array_filled_in_a_loop_stacks_to_the_element_shape_it_was_written(route: str) -> None:
    """The stack of a fresh TensorArray written by a loop's body has that body's element shape
    ([3, 3, 2], as TensorFlow 1 infers it), not an unknown rank: a concat over axis -1 and a reduction
    over axis -1 of it then have gradients (both were GradientErrors needing "the rank"), equal to
    jax.grad of the same program, and a reshape of it one too."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [2])
        s = _rows_loop(x)
        assert s.shape == (3, 3, 2)  # (its size, 3, is a constant)
        y = tn.reduce_sum(tn.square(tn.reduce_sum(tn.concat([s, s], -1), axis=-1)))
        z = tn.reduce_sum(tn.matmul(tn.reshape(s, [-1, 6]), tn.reshape(s, [6, -1])))
        (d,) = tn.gradients(y + z, [x])

    def f(x: Any) -> Any:
        s = jnp.broadcast_to(x[0] * x, (3, 3, 2))
        y = jnp.sum(jnp.square(jnp.sum(jnp.concatenate([s, s], -1), axis=-1)))
        return y + jnp.sum(jnp.reshape(s, (3, 6)) @ jnp.reshape(s, (6, 3)))

    xv = np.array([-1.0, -2.0])
    want = _jax(jax.grad(f), xv)
    np.testing.assert_allclose(run_strictly(route, g, d, {x: xv}), want, rtol=1e-12)


# ---- the gradient of a tile of a value whose static shape is unknown -------------------------------------
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_tile_gradient_sums_the_tiles_at_run_time_shapes(route: str) -> None:
    """d/du sum(tile(u, m)**2) = 2 prod(m) u and d/dv sum(tile(v, m)**3) = 3 prod(m) v**2, for a ``u``
    of unknown shape and a ``v`` of shape [?, 2]: the tiles are summed over the run-time shape (it was
    a GradientError, "its gradient needs the static shape of the input"). A tile of a TensorArray's
    stack (the campaign's case) meets the same rule."""
    g = tn.Graph()
    with g.as_default():
        u = tn.placeholder(tn.float64, None)
        v = tn.placeholder(tn.float64, [None, 2])
        y = tn.reduce_sum(tn.square(tn.tile(u, [2, 3]))) + tn.reduce_sum(tn.tile(v, [3, 1]) ** 3)
        du, dv = tn.gradients(y, [u, v])
    uv, vv = np.array([[1.0, 2.0]]), np.array([[1.0, -1.0], [2.0, 3.0]])
    got = run_strictly(route, g, [du, dv], {u: uv, v: vv})
    np.testing.assert_allclose(got[0], 12 * uv)
    np.testing.assert_allclose(got[1], 9 * vv ** 2)


# ---- the gradient of a gather along a negative axis ------------------------------------------------------
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_gather_gradient_along_a_negative_axis_with_matrix_indices(route: str) -> None:
    """jax.grad of sum(erf(take(x, idx, axis=-1))) for a [3, 2] ``x`` and [2, 2] indices: the
    gradient scatters back along the axis counted from the end (the scatter moved the wrong axes, a
    KernelError on the interpreters and a fallback with a warning on the fast backend)."""
    idx = np.array([[0, -1], [1, 0]], np.int32)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [3, 2])
        (d,) = tn.gradients(tn.reduce_sum(tn.erf(tn.gather(x, idx, axis=-1))), [x])
    xv = np.array([[0.5, -1.0], [0.25, 2.0], [-0.75, 1.5]])
    want = _jax(jax.grad(lambda x: jnp.sum(jax.scipy.special.erf(jnp.take(x, jnp.asarray(idx) % 2, axis=-1)))), xv)
    np.testing.assert_allclose(run_strictly(route, g, d, {x: xv}), want, rtol=1e-12)


# ---- gradients that need the rank of a value of unknown rank ---------------------------------------------
@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_concat_gradient_of_values_of_unknown_rank(route: str, axis: int) -> None:
    """jax.grad of sum(w * sin(concat([a, b], axis))) for placeholders of unknown rank, pieces of
    different sizes along ``axis``: each piece's gradient is its range of the output's, counted from
    the end when the axis is negative (a GradientError, "its gradient needs the rank of the output").
    Also inside a loop, whose body saves the pieces' shapes for the backward loop."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float64, None)
        b = tn.placeholder(tn.float64, None)
        w = tn.placeholder(tn.float64, None)
        y = tn.reduce_sum(w * tn.sin(tn.concat([a, b], axis)))
        _, z = tn.while_loop(lambda i, s: i < 3,
                             lambda i, s: (i + 1, s + tn.reduce_sum(w * tn.concat([a * a, b], axis))),
                             [tn.constant(0), tn.constant(0.0, tn.float64)])
        grads = tn.gradients(y, [a, b]) + tn.gradients(z, [a, b])
    ax = axis % 2
    av = np.arange(6.0).reshape(2, 3) / 7
    bv = np.arange(4.0).reshape(2, 2) / 5 if ax == 1 else np.arange(3.0).reshape(1, 3) / 5
    joined = np.concatenate([av, bv], ax).shape
    wv = np.cos(np.arange(np.prod(joined), dtype=float)).reshape(joined)

    def f(a: Any, b: Any) -> Any:
        return jnp.sum(wv * jnp.sin(jnp.concatenate([a, b], axis)))

    def h(a: Any, b: Any) -> Any:
        return 3 * jnp.sum(wv * jnp.concatenate([a * a, b], axis))

    got = run_strictly(route, g, grads, {a: av, b: bv, w: wv})
    for have, want in zip(got, [*_jax(jax.grad(f, (0, 1)), av, bv), *_jax(jax.grad(h, (0, 1)), av, bv)]):
        np.testing.assert_allclose(have, want, rtol=1e-12)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_reductions_over_negative_axes_of_unknown_rank_have_gradients(route: str) -> None:
    """jax.grad of sums, maxima and means over negative axes (one, and a negative with a positive) of
    a placeholder of unknown rank: the reduced axes go back where they were, found when the run knows
    the rank (a GradientError, "its gradient needs the rank of the input")."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, None)
        w = tn.placeholder(tn.float64, None)
        y = (tn.reduce_sum(w * tn.reduce_max(tn.sin(x), axis=-1)) + tn.reduce_sum(tn.reduce_sum(x * x, axis=[0, -1]))
             + tn.reduce_sum(w * tn.reduce_mean(tn.exp(x), axis=-1)))
        (d,) = tn.gradients(y, [x])
    xv = np.arange(12.0).reshape(3, 4) / 5
    wv = np.array([1.0, -2.0, 0.5])

    def f(x: Any) -> Any:
        return (jnp.sum(wv * jnp.max(jnp.sin(x), axis=-1)) + jnp.sum(x * x)
                + jnp.sum(wv * jnp.mean(jnp.exp(x), axis=-1)))

    np.testing.assert_allclose(run_strictly(route, g, d, {x: xv, w: wv}), _jax(jax.grad(f), xv), rtol=1e-12)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_stack_along_any_axis_is_jax_stack(route: str) -> None:
    """``tn.stack(values, axis)`` is ``jnp.stack`` for every axis from ``-(r + 1)`` to ``r``, with its
    gradient, also of values of unknown rank; an axis out of that range is a ShapeError."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float64, [2, 3])
        b = tn.placeholder(tn.float64, None)
        outs = [tn.stack([a, tn.sin(a) * 2], axis=k) for k in range(-3, 3)]
        y = sum(tn.reduce_sum(tn.cos(o) * (i + 1.0)) for i, o in enumerate(outs))
        unknown = tn.stack([b, b * b], axis=-1)
        grads = tn.gradients(y, [a]) + tn.gradients(tn.reduce_sum(tn.sin(unknown)), [b])
        with pytest.raises(tn.ShapeError, match=r"stack: axis 3 is out of range for values of rank 2"):
            tn.stack([a, a], axis=3)
    av = np.arange(6.0).reshape(2, 3) / 4

    def f(a: Any) -> Any:
        return sum(jnp.sum(jnp.cos(jnp.stack([a, jnp.sin(a) * 2], axis=k)) * (i + 1.0))
                   for i, k in enumerate(range(-3, 3)))

    got = run_strictly(route, g, [*outs, unknown, *grads], {a: av, b: av})
    for k, o in zip(range(-3, 3), got):
        np.testing.assert_array_equal(o, np.stack([av, np.sin(av) * 2], axis=k))
    np.testing.assert_array_equal(got[6], np.stack([av, av * av], axis=-1))
    np.testing.assert_allclose(got[7], _jax(jax.grad(f), av), rtol=1e-12)
    np.testing.assert_allclose(got[8], _jax(jax.grad(lambda b: jnp.sum(jnp.sin(jnp.stack([b, b * b], -1)))), av),
                               rtol=1e-12)
