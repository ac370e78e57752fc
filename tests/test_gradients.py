"""Gradients of loop-free programs: every differentiable primitive, conds, Variables, second order.

Each rule is checked against ``jax.grad`` of the same function written with jax.numpy (float64), on
the reference backend. Conds are checked on both branches (two feeds), with closed forms a person can
verify by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import turnout as tn

jax.config.update("jax_enable_x64", True)
F = tn.float64
RNG = np.random.default_rng(7)


def run(g: tn.Graph, fetches: Any, feeds: dict[Any, Any], **kw: Any) -> Any:
    return tn.Session(g, backend="reference").run(fetches, feed_dict=feeds, **kw)


def check_against_jax(tn_fn: Callable[..., Any], jax_fn: Callable[..., Any], *arrays: np.ndarray,
                      rtol: float = 1e-9) -> None:
    """d/dxs sum(w * f(xs)) with a fixed random weighting ``w``, Turnout vs jax."""
    g = tn.Graph()
    with g.as_default():
        xs = [tn.placeholder(F, a.shape, name=f"x{i}") for i, a in enumerate(arrays)]
        out = tn_fn(*xs)
        w = RNG.normal(size=out.shape)
        loss = tn.reduce_sum(out * tn.constant(w, F))
        grads = tn.gradients(loss, xs)
    got = run(g, grads, dict(zip(xs, arrays, strict=True)))
    want = jax.grad(lambda *a: jnp.sum(jax_fn(*a) * w), argnums=tuple(range(len(arrays))))(*arrays)
    for gt, wt in zip(got, want, strict=True):
        np.testing.assert_allclose(gt, wt, rtol=rtol, atol=1e-12)


def pos(*shape: int) -> np.ndarray:
    return RNG.uniform(0.5, 2.0, size=shape)


def nrm(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape)


CASES: dict[str, tuple[Callable[..., Any], Callable[..., Any], Callable[[], list[np.ndarray]]]] = {
    "add_broadcast": (lambda a, b: a + b, lambda a, b: a + b, lambda: [nrm(3, 1), nrm(4)]),
    "sub_broadcast": (lambda a, b: a - b, lambda a, b: a - b, lambda: [nrm(3, 4), nrm(1, 4)]),
    "mul_broadcast": (lambda a, b: a * b, lambda a, b: a * b, lambda: [nrm(3, 1), nrm(3, 4)]),
    "div": (lambda a, b: a / b, lambda a, b: a / b, lambda: [nrm(3, 4), pos(4)]),
    "pow": (lambda a, b: tn.pow(a, b), lambda a, b: a ** b, lambda: [pos(5), nrm(5)]),
    "maximum": (tn.maximum, jnp.maximum, lambda: [nrm(6), nrm(6)]),
    "minimum": (tn.minimum, jnp.minimum, lambda: [nrm(6), nrm(6)]),
    "select": (lambda a, b: tn.where(a > 0.0, a * b, b), lambda a, b: jnp.where(a > 0, a * b, b),
               lambda: [nrm(6), nrm(6)]),
    "neg_square_identity": (lambda a: tn.identity(-tn.square(a)), lambda a: -(a * a), lambda: [nrm(4)]),
    "abs": (tn.abs, jnp.abs, lambda: [nrm(5)]),
    "relu": (tn.relu, jax.nn.relu, lambda: [nrm(7)]),
    "sqrt": (tn.sqrt, jnp.sqrt, lambda: [pos(4)]),
    "log": (tn.log, jnp.log, lambda: [pos(4)]),
    "exp": (tn.exp, jnp.exp, lambda: [nrm(4)]),
    "tanh": (tn.tanh, jnp.tanh, lambda: [nrm(4)]),
    "sigmoid": (tn.sigmoid, jax.nn.sigmoid, lambda: [nrm(4)]),
    "cast_float32_roundtrip": (lambda a: tn.cast(tn.cast(a, tn.float32), F) * a, lambda a: a * a,
                               lambda: [np.array([0.5, 1.25, -2.0])]),
    "matmul": (tn.matmul, jnp.matmul, lambda: [nrm(2, 3), nrm(3, 4)]),
    "matmul_ta": (lambda a, b: tn.matmul(a, b, transpose_a=True), lambda a, b: a.T @ b, lambda: [nrm(3, 2), nrm(3, 4)]),
    "matmul_tb": (lambda a, b: tn.matmul(a, b, transpose_b=True), lambda a, b: a @ b.T, lambda: [nrm(2, 3), nrm(4, 3)]),
    "matmul_tab": (lambda a, b: tn.matmul(a, b, transpose_a=True, transpose_b=True), lambda a, b: a.T @ b.T,
                   lambda: [nrm(3, 2), nrm(4, 3)]),
    "reshape": (lambda a: tn.reshape(a, [3, 4]) * 2.0, lambda a: jnp.reshape(a, (3, 4)) * 2, lambda: [nrm(2, 6)]),
    "transpose": (lambda a: tn.transpose(a, [2, 0, 1]), lambda a: jnp.transpose(a, (2, 0, 1)), lambda: [nrm(2, 3, 4)]),
    "expand_dims": (lambda a: tn.expand_dims(a, 1), lambda a: a[:, None], lambda: [nrm(3)]),
    "concat": (lambda a, b: tn.concat([a, b, a], 1), lambda a, b: jnp.concatenate([a, b, a], 1),
               lambda: [nrm(2, 3), nrm(2, 1)]),
    "pack": (lambda a, b: tn.stack([a, b * a]), lambda a, b: jnp.stack([a, b * a]), lambda: [nrm(3), nrm(3)]),
    "tile": (lambda a: tn.tile(a, [2, 3]), lambda a: jnp.tile(a, (2, 3)), lambda: [nrm(2, 2)]),
    "getitem_slices": (lambda a: a[1:3, 0] * a[0, 1:3], lambda a: a[1:3, 0] * a[0, 1:3], lambda: [nrm(4, 4)]),
    "gather_repeats": (lambda a: tn.gather(a, tn.constant([2, 0, 2])), lambda a: a[jnp.array([2, 0, 2])],
                       lambda: [nrm(4, 2)]),
    "sum_axis": (lambda a: tn.reduce_sum(a * a, axis=1), lambda a: jnp.sum(a * a, axis=1), lambda: [nrm(3, 4)]),
    "sum_keepdims": (lambda a: tn.reduce_sum(a, axis=0, keepdims=True) * a,
                     lambda a: jnp.sum(a, axis=0, keepdims=True) * a, lambda: [nrm(3, 4)]),
    "mean": (lambda a: tn.reduce_mean(a, axis=[0, 2]), lambda a: jnp.mean(a, axis=(0, 2)), lambda: [nrm(2, 3, 4)]),
    "mean_all": (lambda a: tn.reduce_mean(a * a) * a, lambda a: jnp.mean(a * a) * a, lambda: [nrm(3, 2)]),
    "max": (lambda a: tn.reduce_max(a, axis=1), lambda a: jnp.max(a, axis=1), lambda: [nrm(3, 5)]),
    "broadcast_like_sum_to_like": (lambda a, b: tn.sum_to_like(tn.broadcast_like(a, b) * b, a),
                                   lambda a, b: jnp.sum(jnp.broadcast_to(a, b.shape) * b, axis=0, keepdims=True),
                                   lambda: [nrm(1, 3), nrm(4, 3)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_matches_jax(name: str) -> None:
    tn_fn, jax_fn, arrays = CASES[name]
    # the float32 round trip rounds the gradient to float32 too
    check_against_jax(tn_fn, jax_fn, *arrays(), rtol=1e-6 if name.startswith("cast") else 1e-9)


def test_getitem_with_a_tensor_index() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [5], name="x")
        i = tn.placeholder(tn.int32, [], name="i")
        y = x[i] * x[i] * 3.0  # d/dx = 6 x[i] at i, 0 elsewhere
        (dx,) = tn.gradients(y, [x])
    xv = np.arange(5.0)
    np.testing.assert_allclose(run(g, dx, {x: xv, i: 3}), [0, 0, 0, 18.0, 0])


def test_tensor_array_ops_at_the_root() -> None:
    """unstack -> read/write -> stack: the gradient of a TensorArray is a TensorArray of gradients, and
    unwritten slots (here slot 1 of ``ta``, never read) count as zero."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [3, 2], name="x")
        ta = tn.TensorArray(F, size=3).unstack(x)
        a, c = ta.read(0), ta.read(2)
        out = tn.TensorArray(F, size=2).write(0, a * c).write(1, c * 2.0).stack()
        (dx,) = tn.gradients(tn.reduce_sum(out), [x])
    xv = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    want = np.array([xv[2], [0.0, 0.0], xv[0] + 2.0])
    np.testing.assert_allclose(run(g, dx, {x: xv}), want)


def test_cond_both_branches_closed_form() -> None:
    """y = x^3 if x > 0 else -5x: dy/dx = 3x^2 = 12 at x=2, -5 at x=-2."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        y = tn.cond(x > 0.0, lambda: x * x * x, lambda: x * -5.0)
        (dx,) = tn.gradients(y, [x])
    assert run(g, dx, {x: 2.0}) == 12.0
    assert run(g, dx, {x: -2.0}) == -5.0
    kinds = {n.op for n in g.nodes if n.name.startswith("gradients")}
    assert {"Switch", "Merge"} <= kinds  # the Merge gradient is a Switch, the Switch gradient a Merge


def test_nested_conds_with_outside_tensors_match_jax() -> None:
    def f_tn(x: Any, a: Any) -> Any:
        return tn.cond(x > a, lambda: tn.cond(x > 2.0 * a, lambda: x * a * a, lambda: x * x),
                       lambda: a * tn.exp(x))

    def f_jax(x: Any, a: Any) -> Any:
        return jnp.where(x > a, jnp.where(x > 2 * a, x * a * a, x * x), a * jnp.exp(x))

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        a = tn.placeholder(F, [], name="a")
        y = f_tn(x, a)
        grads = tn.gradients(y, [x, a])
    for xv in (-0.5, 1.5, 3.0):  # the three leaves
        got = run(g, grads, {x: xv, a: 1.0})
        want = jax.grad(f_jax, (0, 1))(xv, 1.0)
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_case_gradients_each_branch() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        k = tn.placeholder(tn.int32, [], name="k")
        y = tn.case(k, [lambda: x * 2.0, lambda: x * x, lambda: tn.constant(1.0, F)])
        (dx,) = tn.gradients(y, [x], unconnected_gradients="zero")
    assert [float(run(g, dx, {x: 3.0, k: kk})) for kk in (0, 1, 2, 7)] == [2.0, 6.0, 0.0, 0.0]


def test_cond_output_not_used_by_taken_branch_is_zero() -> None:
    """The outside tensor ``a`` is read by the true branch only: its gradient is 0 when false runs."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        a = tn.placeholder(F, [2], name="a")
        y = tn.cond(x > 0.0, lambda: tn.reduce_sum(a * x), lambda: x)
        grads = tn.gradients(y, [x, a])
    np.testing.assert_allclose(run(g, grads[1], {x: -1.0, a: [1.0, 2.0]}), [0.0, 0.0])
    np.testing.assert_allclose(run(g, grads[1], {x: 3.0, a: [1.0, 2.0]}), [3.0, 3.0])


def test_stop_gradient_and_unconnected() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        z = tn.placeholder(F, [], name="z")
        y = x * tn.stop_gradient(x * x) + z * 0.0  # d/dx = x^2 (the stopped factor is a constant)
        dx, dz = tn.gradients(y, [x, z])
        assert tn.gradients(tn.stop_gradient(y), [x]) == [None]
        n = tn.placeholder(tn.int32, [], name="n")
        assert tn.gradients(tn.cast(n, F) * 2.0, [n]) == [None]  # integers carry no gradient
        (zero,) = tn.gradients(tn.stop_gradient(y), [x], unconnected_gradients="zero")
    assert run(g, [dx, dz, zero], {x: 3.0, z: 1.0}) == [9.0, 0.0, 0.0]


def test_grad_ys_weights_the_outputs() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [2], name="x")
        (dx,) = tn.gradients([x * 2.0, x * x], [x], grad_ys=[tn.constant([1.0, 10.0], F), tn.constant([1.0, 1.0], F)])
    np.testing.assert_allclose(run(g, dx, {x: [1.0, 2.0]}), [2.0 + 2.0, 20.0 + 4.0])


def test_grad_ys_of_another_shape_is_refused_naming_it() -> None:
    """A ``grad_ys`` whose shape does not fit its ``ys`` is a GradientError naming both shapes, at
    once (it was a Reshape's ShapeError deep in the backward graph); one of unknown shape passes."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [3], name="x")
        for bad in (tn.constant([1.0, 2.0], F), tn.constant(1.0, F)):
            with pytest.raises(tn.GradientError, match=r"grad_ys for Mul(_1)?:0 has shape \[\d?\], expected \[3\]"):
                tn.gradients(x * 2.0, [x], grad_ys=[bad])
        u = tn.placeholder(F, None, name="u")
        (dx,) = tn.gradients(x * 2.0, [x], grad_ys=[u])
    np.testing.assert_allclose(run(g, dx, {x: [1.0, 1.0, 1.0], u: [1.0, 2.0, 3.0]}), [2.0, 4.0, 6.0])


def test_variable_gradient_sums_over_its_reads() -> None:
    """loss = sum(w * x) + sum(w * w): two reads of w; d/dw = x + 2 w."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.array([1.0, -2.0]), name="w")
        x = tn.placeholder(F, [2], name="x")
        loss = tn.reduce_sum(w * x) + tn.reduce_sum(w.read() * w.read())
        (dw,) = tn.gradients(loss, [w])
    np.testing.assert_allclose(run(g, dw, {x: [3.0, 4.0]}), [3.0 + 2.0, 4.0 - 4.0])


def test_variable_read_inside_a_cond() -> None:
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.array(2.0), name="w")
        x = tn.placeholder(F, [], name="x")
        y = tn.cond(x > 0.0, lambda: w * w * x, lambda: x)
        (dw,) = tn.gradients(y, [w])
    assert run(g, dw, {x: 3.0}) == 12.0  # 2 w x
    assert run(g, dw, {x: -3.0}) == 0.0


def test_gradient_of_gradient_without_loops() -> None:
    """y = x^3 (x > 0) else -x: y'' = 6x = 12 at x=2, 0 at x=-2; and tanh'' vs jax."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        y = tn.cond(x > 0.0, lambda: x * x * x, lambda: -x)
        (d1,) = tn.gradients(y, [x])
        (d2,) = tn.gradients(d1, [x])
        t = tn.tanh(x * 0.7) * x
        (t1,) = tn.gradients(t, [x])
        (t2,) = tn.gradients(t1, [x])
    assert run(g, [d1, d2], {x: 2.0}) == [12.0, 12.0]
    assert run(g, [d1, d2], {x: -2.0}) == [-1.0, 0.0]
    want = jax.grad(jax.grad(lambda v: jnp.tanh(v * 0.7) * v))(0.3)
    np.testing.assert_allclose(run(g, t2, {x: 0.3}), want, rtol=1e-12)


def test_gradient_inside_a_cond_branch() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        y = tn.cond(x > 0.0, lambda: tn.gradients(x * x * x, [x])[0], lambda: x)
    assert run(g, y, {x: 2.0}) == 12.0
    assert run(g, y, {x: -2.0}) == -2.0


def test_errors_name_the_problem() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        with pytest.raises(tn.GradientError, match="unconnected_gradients"):
            tn.gradients(x, [x], unconnected_gradients="zeros")
        with pytest.raises(tn.GradientError, match="xs must be tensors"):
            tn.gradients(x, ["x"])


def test_memory_report_without_loops_is_empty() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        tn.gradients(x * x, [x])
    rep = tn.memory_report(g)
    assert rep.loops == [] and str(rep) == "no gradient stacks"


def test_hand_built_cond_switch_merge_duality() -> None:
    """A conditional built from raw Switch / Merge: y = (x^2 c if p else 2x) * x.
    p: dy/dx = 3 x^2 c = 54, dy/dc = x^3 = 27 (x=3, c=2); not p: dy/dx = 4x = 12, dy/dc = 0."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        c = tn.placeholder(F, [], name="c")
        p = tn.placeholder(tn.bool, [], name="p")
        xf, xt = tn.raw.switch(x, p)
        _, ct = tn.raw.switch(c, p)
        m, _ = tn.raw.merge([xf * 2.0, xt * xt * ct])
        grads = tn.gradients(m * x, [x, c])
    assert run(g, grads, {x: 3.0, c: 2.0, p: True}) == [54.0, 27.0]
    assert run(g, grads, {x: 3.0, c: 2.0, p: False}) == [12.0, 0.0]


def test_hand_built_loop_is_refused_clearly() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        e = tn.raw.enter(x, "raw_frame")
        m, _ = tn.raw.merge([e, tn.graph.BACK_EDGE])
        pred = tn.raw.loop_cond(m < 10.0)
        out, body = tn.raw.switch(m, pred)
        tn.raw.close_back_edge(m, tn.raw.next_iteration(body * 2.0))
        y = tn.raw.exit(out)
        with pytest.raises(tn.GradientError, match="hand-built control flow"):
            tn.gradients(y, [x])
