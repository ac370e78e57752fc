"""``tn.reduce_prod`` and ``tn.cumprod`` (primitives ``Prod`` and ``Cumprod``) on every route.

Products against numpy and ``jax.grad`` closed forms: over one axis, several, all of a tensor of
unknown rank, with ``keepdims``; over no elements (1); of int32 (wrapping as numpy's and XLA's do);
gradients where a group holds one zero and two (exact: each element's gradient is the product of
the others, never a division by the element); inside a loop's body; round trips through a TensorFlow
GraphDef; bad arguments as the same Turnout error on every route.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from route_table import ROUTES, in_jax, run_on

import turnout as tn

pytest.importorskip("jax")

X = np.array([[0.5, 0.0, -1.5], [2.0, 0.0, 0.7], [1.1, -0.3, 0.9], [0.0, 1.2, 2.0]])


def _products(x: Any) -> list[Any]:
    return [tn.reduce_prod(x), tn.reduce_prod(x, axis=1), tn.reduce_prod(x, axis=[0, 1], keepdims=True),
            tn.reduce_prod(x, axis=-2), tn.cumprod(x, axis=1), tn.cumprod(x, axis=0, exclusive=True),
            tn.cumprod(x, axis=-1, exclusive=True, reverse=True)]


def _numpy_products(x: np.ndarray) -> list[np.ndarray]:
    rev = np.flip(np.cumprod(np.flip(x, -1), axis=-1), -1)
    excl0 = np.concatenate([np.ones_like(x[:1]), np.cumprod(x, axis=0)[:-1]], axis=0)
    excl_rev = np.concatenate([rev[:, 1:], np.ones_like(x[:, :1])], axis=1)
    return [np.prod(x), np.prod(x, axis=1), np.prod(x, axis=(0, 1), keepdims=True), np.prod(x, axis=-2),
            np.cumprod(x, axis=1), excl0, excl_rev]


@pytest.mark.parametrize("route", ROUTES)
def test_products_and_their_gradients_match_closed_forms(route: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [None, 3], name="x")
        outs = _products(x)
        weights = [tn.constant(np.linspace(0.5, 1.5, max(int(np.size(v)), 1)).reshape(np.shape(v)))
                   for v in _numpy_products(X)]
        loss = sum(tn.reduce_sum(o * w) for o, w in zip(outs[:4], weights[:4], strict=True))
        (dx,) = tn.gradients(loss, [x])
    got = run_on(route, g, [*outs, dx], {x: X})
    for a, b in zip(got[:-1], _numpy_products(X), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)

    def f(v: Any) -> Any:
        import jax.numpy as jnp
        ws = [jnp.asarray(np.asarray(w.node.attrs["value"])) for w in weights[:4]]
        ps = [jnp.prod(v), jnp.prod(v, axis=1), jnp.prod(v, axis=(0, 1), keepdims=True), jnp.prod(v, axis=-2)]
        return sum(jnp.sum(p * w) for p, w in zip(ps, ws, strict=True))

    import jax
    want = in_jax(jax.grad(f), X)
    np.testing.assert_allclose(got[-1], want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("route", ROUTES)
def test_product_of_no_elements_is_one_and_int32_wraps(route: str) -> None:
    g = tn.Graph()
    with g.as_default():
        e = tn.placeholder(tn.float32, [None, 2], name="e")
        i = tn.placeholder(tn.int32, [None], name="i")
        outs = [tn.reduce_prod(e), tn.reduce_prod(e, axis=0), tn.cumprod(e, axis=0), tn.reduce_prod(i),
                tn.cumprod(i, exclusive=True)]
    big = np.array([65536, 65536, 3], np.int32)
    got = run_on(route, g, outs, {e: np.zeros((0, 2), np.float32), i: big})
    np.testing.assert_array_equal(got[0], np.float32(1.0))
    np.testing.assert_array_equal(got[1], np.ones(2, np.float32))
    assert got[2].shape == (0, 2)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got[3], np.prod(big, dtype=np.int32))
    np.testing.assert_array_equal(got[4], np.array([1, 65536, 0], np.int32))


@pytest.mark.parametrize("route", ROUTES)
def test_product_of_unknown_rank_and_in_a_loop_differentiates(route: str) -> None:
    """``axis`` None over a value whose rank is known only when it runs (the gradient flattens it),
    and a product inside a while loop's body (its gradient pops the saved values)."""
    g = tn.Graph()
    with g.as_default():
        u = tn.placeholder(tn.float64, None, name="u")
        v = tn.placeholder(tn.float64, [3], name="v")
        _, acc = tn.while_loop(lambda k, a: k < 3, lambda k, a: (k + 1, a * tn.reduce_prod(v + tn.cast(k, tn.float64))),
                               [tn.constant(0), tn.constant(1.0, tn.float64)])
        loss = tn.reduce_prod(u) + acc
        du, dv = tn.gradients(loss, [u, v])
    uv, vv = np.array([[1.5, -2.0], [0.0, 3.0]]), np.array([0.5, 1.5, -0.7])
    got = run_on(route, g, [loss, du, dv], {u: uv, v: vv})

    def f(a: Any, b: Any) -> Any:
        import jax.numpy as jnp
        return jnp.prod(a) + jnp.prod(b) * jnp.prod(b + 1.0) * jnp.prod(b + 2.0)

    import jax
    want = in_jax(jax.value_and_grad(f, argnums=(0, 1)), uv, vv)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1][0], rtol=1e-12)
    np.testing.assert_allclose(got[2], want[1][1], rtol=1e-12)


def test_products_round_trip_through_a_graph_def() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [4, 3], name="x")
        outs = [tn.identity(o, name=f"out{k}") for k, o in enumerate(_products(x))]
    imp = tn.import_graph_def(tn.export_graph_def(g))
    got = imp.run(tn.Session(imp.graph), [f"out{k}:0" for k in range(len(outs))], {"x:0": X})
    for a, b in zip(got, _numpy_products(X), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("route", ROUTES)
def test_bad_product_arguments_are_turnout_errors(route: str) -> None:
    g = tn.Graph()
    with g.as_default():
        with pytest.raises(tn.DTypeError, match="Prod"):
            tn.reduce_prod(tn.constant([True, False]))
        with pytest.raises(tn.ShapeError, match="Cumprod"):
            tn.cumprod(tn.constant(2.0))
        with pytest.raises(tn.ShapeError, match="Prod"):
            tn.reduce_prod(tn.constant([1.0, 2.0]), axis=3)
        with pytest.raises(tn.ShapeError, match=r"Prod: reduction axes \[1, -1\] name an axis twice"):
            tn.reduce_prod(tn.constant([[1.0, 2.0]]), axis=[1, -1])  # (bug hunt 2026-12-06: a KernelError at run)
        with pytest.raises(tn.GraphBuildError, match="axis"):
            tn.cumprod(tn.constant([1.0]), axis="0")  # type: ignore[arg-type]
        u = tn.placeholder(tn.float32, None, name="u")
        y = tn.cumprod(u, axis=2)
    with pytest.raises(tn.TurnoutError) as err:
        run_on(route, g, y, {u: np.ones((2, 2), np.float32)})
    assert type(err.value).__name__ in ("KernelError", "ShapeError")


def _jax_cumprod(v: Any, axis: int, exclusive: bool, reverse: bool) -> Any:
    """``tf.math.cumprod`` in jax.numpy: a running product, shifted by one when ``exclusive``."""
    import jax.numpy as jnp

    if reverse:
        v = jnp.flip(v, axis)
    c = jnp.cumprod(v, axis=axis)
    if exclusive:
        c = jnp.concatenate([jnp.ones_like(jnp.take(c, jnp.arange(1), axis=axis)),
                             jnp.take(c, jnp.arange(v.shape[axis] - 1), axis=axis)], axis=axis)
    return jnp.flip(c, axis) if reverse else c


#: lines with no zero, one, two (adjacent and apart) and three, along both axes
ZEROS = np.array([[2.0, 0.0, 3.0, 4.0, 0.0, 5.0], [0.0, 0.0, 1.5, 2.0, -1.0, 3.0],
                  [1.0, 2.0, 3.0, 0.0, 0.5, 2.0], [0.5, 0.0, 2.0, -1.0, 3.0, 0.0]])


#: every direction, exclusive or not, each along one of the two axes
VARIANTS = [(-1, False, False), (-1, True, True), (0, False, True), (0, True, False)]
W = np.linspace(-1.0, 2.0, ZEROS.size).reshape(ZEROS.shape)


@functools.cache
def _jax_cumprod_gradients(order: int) -> list[np.ndarray]:
    """jax.grad of ``sum(cumprod(x) * W)`` at ``ZEROS`` for each of ``VARIANTS`` (``order`` 2: the
    gradient of ``sum(that gradient * W)``)."""
    import jax
    import jax.numpy as jnp

    out = []
    for axis, ex, rv in VARIANTS:
        def f(u: Any, axis: int = axis, ex: bool = ex, rv: bool = rv) -> Any:
            return jnp.sum(_jax_cumprod(u, axis, ex, rv) * W)

        def f2(u: Any, f: Any = f) -> Any:
            return jnp.sum(jax.grad(f)(u) * W)

        out.append(in_jax(jax.grad(f if order == 1 else f2), ZEROS))
    return out


def _cumprod_gradients(order: int) -> tuple[tn.Graph, tn.Tensor, list[tn.Tensor]]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [4, 6], name="x")
        grads = []
        for axis, ex, rv in VARIANTS:
            (dx,) = tn.gradients(tn.reduce_sum(tn.cumprod(x, axis, exclusive=ex, reverse=rv) * W), [x])
            grads.extend([dx] if order == 1 else tn.gradients(tn.reduce_sum(dx * W), [x]))
    return g, x, grads


@pytest.mark.parametrize("route", ROUTES)
def test_cumprod_gradient_is_exact_where_a_line_holds_zeros(route: str) -> None:
    """Found by the bug hunt of 2026-12-06: ``cumprod``'s gradient divided by ``x`` and was NaN at a
    line's first zero (``d sum(cumprod([2, 0, 3, 4])) = [1, 32, 0, 0]``, it gave ``[1, nan, 0, 0]``).
    It is jax.grad's now on every route, for every direction, exclusive or not."""
    g, x, grads = _cumprod_gradients(1)
    with g.as_default():
        v = tn.placeholder(tn.float64, [4], name="v")
        (closed,) = tn.gradients(tn.reduce_sum(tn.cumprod(v)), [v])
    got = run_on(route, g, [closed, *grads], {x: ZEROS, v: np.array([2.0, 0.0, 3.0, 4.0])})
    np.testing.assert_array_equal(got[0], [1.0, 32.0, 0.0, 0.0])
    for a, b in zip(got[1:], _jax_cumprod_gradients(1), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_cumprod_second_derivative_is_exact_where_a_line_holds_zeros() -> None:
    """The gradient of ``cumprod``'s gradient is jax's too, at a line's second zero as well (where the
    gradient is 0 but grows with the first zero), and so is ``reduce_prod``'s second derivative."""
    g, x, grads = _cumprod_gradients(2)
    with g.as_default():  # reduce_prod's gradient is made of cumprods, so its second derivative was NaN
        (dp,) = tn.gradients(tn.reduce_sum(tn.reduce_prod(x, axis=1) ** 2), [x])
        (ddp,) = tn.gradients(tn.reduce_sum(dp * W), [x])
    got = tn.Session(g).run([*grads, ddp], {x: ZEROS})
    for a, b in zip(got[:-1], _jax_cumprod_gradients(2), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)

    import jax
    import jax.numpy as jnp

    def p2(u: Any) -> Any:
        return jnp.sum(jax.grad(lambda v: jnp.sum(jnp.prod(v, axis=1) ** 2))(u) * W)

    np.testing.assert_allclose(got[-1], in_jax(jax.grad(p2), ZEROS), rtol=1e-12, atol=1e-12)
