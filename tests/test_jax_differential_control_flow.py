"""Turnout against JAX on programs with control flow: the regressions a differential campaign found.

The campaign drew random programs over float64 vectors and matrices (while_loops with several states,
``maximum_iterations`` and captured tensors, nested loops whose inner trip count reads the outer
counter, cond/case inside loops and loops inside conds, scan/map_fn/foldl/foldr with tuple states and
``reverse=True``, TensorArrays written, read, stacked and unstacked in loops) and compared values and
the gradients with respect to the inputs with ``jax.grad`` of the same program written with
``jax.numpy`` and ``lax.cond`` (loops unrolled in Python), on every backend: the reference
interpreter, the fast backend, and the fast backend through the partitioned executor.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from route_table import COMPILED_ROUTES, run_on, run_strictly
from route_table import ROUTES as ALL_ROUTES
from route_table import in_jax as _jax

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


import turnout as tn  # noqa: E402

ROUTES = COMPILED_ROUTES


# ---- the stack of a TensorArray of constant size ---------------------------------------------------------
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_the_stack_of_a_tensor_array_of_constant_size_has_a_static_length(route: str) -> None:
    """``TensorArray(size=1).write(0, x[:1]).stack()`` has shape [1, 1], as TensorFlow 1 gives it, and
    keeps it through a loop that carries the array; so a [2, 1, 3] loop variable plus that stack stays
    [2, 1, 3] (with [?, 1] it became [2, ?, 3] and the loop refused to build, "shape [2, 1, 3] on
    entry but [2, ?, 3] after one iteration"). A dynamic_size array's stack keeps an unknown length.
    Values and gradients equal jax.grad of the same program."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [3])

        def body(i: Any, v: Any) -> Any:
            ta = tn.TensorArray(tn.float64, size=1).write(0, x[:1])
            return i + 1, v + ta.stack() * x

        _, v = tn.while_loop(lambda i, v: i < 3, body, [tn.constant(0), tn.zeros([2, 1, 3], tn.float64)])
        ta = tn.TensorArray(tn.float64, size=3, element_shape=[3])
        _, ta = tn.while_loop(lambda i, ta: i < 3,
                              lambda i, ta: (i + 1, ta.write(i, tn.sin(x) * tn.cast(i, tn.float64))),
                              [tn.constant(0), ta])
        rows = ta.stack()
        dyn = tn.TensorArray(tn.float64, size=0, dynamic_size=True).write(0, x).stack()
        uns = tn.TensorArray(tn.float64, size=3).unstack(tn.reshape(x, [3, 1])).stack()
        assert v.shape == (2, 1, 3) and rows.shape == (3, 3) and dyn.shape == (None, 3) and uns.shape == (3, 1)
        y = tn.reduce_sum(tn.square(v)) + tn.reduce_sum(tn.matmul(rows, uns))
        (d,) = tn.gradients(y, [x])

    def f(x: Any) -> Any:
        v = jnp.broadcast_to(3 * x[0] * x, (2, 1, 3))
        rows = jnp.stack([jnp.sin(x) * i for i in range(3)])
        return jnp.sum(jnp.square(v)) + jnp.sum(rows @ jnp.reshape(x, (3, 1)))

    xv = np.array([0.5, -1.0, 2.0])
    got = run_strictly(route, g, [v, d], {x: xv})
    np.testing.assert_allclose(got[0], np.broadcast_to(3 * xv[0] * xv, (2, 1, 3)), rtol=1e-12)
    np.testing.assert_allclose(got[1], _jax(jax.grad(f), xv), rtol=1e-12)


# ---- an unstack whose count is known only when it runs ---------------------------------------------------
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_unstack_checks_the_count_it_fills_when_it_runs(route: str) -> None:
    """``TensorArray(size=3).unstack(x)`` for an ``x`` of shape [?] fills the array of size 3: inside a
    loop's body and a cond's branch (the size crosses into the frame) the values and the gradient are
    jax.grad's, and four elements are a KernelError on every backend, as TensorFlow's scatter into an
    array that is not resizeable fails (it used to make an array of size 4, silently)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [None])
        ta = tn.TensorArray(tn.float64, size=3)

        def body(i: Any, s: Any) -> Any:
            return i + 1, s + ta.unstack(tn.sin(x) * tn.cast(i + 1, tn.float64)).read(1)

        _, s = tn.while_loop(lambda i, s: i < 2, body, [tn.constant(0), tn.constant(0.0, tn.float64)])
        c = tn.cond(tn.reduce_sum(x) > 0, lambda: ta.unstack(tn.square(x)).stack(), lambda: x)
        y = s * tn.reduce_sum(c)
        (d,) = tn.gradients(y, [x])
        grown = tn.TensorArray(tn.float64, size=0, dynamic_size=True).unstack(x).stack()

    def f(x: Any) -> Any:
        return 3 * jnp.sin(x[1]) * jnp.sum(jnp.square(x))

    xv = np.array([0.5, -1.0, 2.0])
    got = run_strictly(route, g, [y, d], {x: xv})
    np.testing.assert_allclose(got[0], _jax(f, xv), rtol=1e-12)
    np.testing.assert_allclose(got[1], _jax(jax.grad(f), xv), rtol=1e-12)
    np.testing.assert_array_equal(run_strictly(route, g, grown, {x: np.arange(4.0)}), np.arange(4.0))
    with pytest.raises(tn.KernelError, match=r"the number of elements is not the TensorArray's size.*\[3\] \[4\]"):
        run_strictly(route, g, y, {x: np.arange(4.0)})


@pytest.mark.parametrize("route", sorted(ALL_ROUTES))
def test_a_stack_with_unwritten_zeros_fills_what_a_loop_left_unwritten(route: str) -> None:
    """``TensorArrayStack`` with ``unwritten_zeros`` (what an imported TensorFlow gather is) stacks
    the slots a loop did not write as zeros of the written elements' shape, on every route; without
    it, the same stack is a KernelError naming the unwritten slots."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")

        def body(i: Any, t: Any) -> Any:
            return i + 1, t.write(i, tn.fill(tn.stack([2]), tn.cast(i + 1, tn.float32)))

        _, ta = tn.while_loop(lambda i, t: i < n, body, [tn.constant(0), tn.TensorArray(tn.float32, size=4)])
        zeros = g.create_node("TensorArrayStack", [ta.tensor], {"unwritten_zeros": True}).outputs[0]
        plain = ta.stack()
    want = np.array([[1.0, 1.0], [2.0, 2.0], [0.0, 0.0], [0.0, 0.0]], np.float32)
    np.testing.assert_array_equal(run_on(route, g, zeros, {n: 2}), want)
    with pytest.raises(tn.KernelError, match="never written"):
        run_on(route, g, plain, {n: 2})
