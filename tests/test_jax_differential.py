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
