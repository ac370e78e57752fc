"""Gradient bugs that once gave a silently wrong answer (issue "No silent wrong answers", gradients).

Each test names the class of bug it guards against; every closed form runs on both backends.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn

F = tn.float64


def run(backend: str, g: tn.Graph, fetches: Any, feeds: Any = None) -> Any:
    return tn.Session(g, backend=backend).run(fetches, feed_dict=feeds or {})


def test_fill_has_a_gradient(backend: str) -> None:
    """A primitive without a rule was once treated as non-differentiable: d sum(fill([3], x)) was None."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        (dx,) = tn.gradients(tn.reduce_sum(tn.fill([3], x) * x), [x])
        _, y = tn.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, tn.reduce_sum(tn.fill([2], v))), [0, x])
        (dl,) = tn.gradients(y, [x])
    assert dx is not None
    assert run(backend, g, [dx, dl], {x: 1.5}) == [9.0, 4.0]  # d 3x^2 = 6x; y = 4x


def test_an_op_without_a_gradient_rule_on_the_path_raises_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from turnout.gradients import rules

    monkeypatch.delitem(rules.GRAD_RULES, "Tanh")
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        y = tn.tanh(x, name="squash")
        with pytest.raises(tn.GradientError, match='squash.*no gradient rule for primitive Tanh'):
            tn.gradients(y, [x])


def test_gradient_inside_a_cond_branch_through_an_outside_tensor(backend: str) -> None:
    """The target reaches x only through t, computed outside the branch: this was None."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        t = x * x
        r = tn.cond(x > 0.0, lambda: tn.gradients(t * 3.0, [x])[0], lambda: tn.constant(0.0, F))
    assert run(backend, g, r, {x: 2.0}) == 12.0
    assert run(backend, g, r, {x: -2.0}) == 0.0


def test_gradient_inside_a_loop_body_through_an_outside_tensor(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        t = tn.tanh(x)
        _, acc = tn.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a + tn.gradients(t * t, [x])[0]),
                               [0, tn.constant(0.0, F)])
    v = 0.7
    expect = 3 * 2 * np.tanh(v) * (1 - np.tanh(v) ** 2)
    np.testing.assert_allclose(run(backend, g, acc, {x: v}), expect, rtol=1e-12)


@pytest.mark.parametrize("const_branch", ["inside", "outside"])
def test_cond_in_loop_with_invariant_predicate_and_constant_branch(backend: str, const_branch: str) -> None:
    """The taken branch reads only loop invariants: it once ran at the exit iteration too, so the
    loop (and its backward loop) never ended on the reference and was refused by the fast backend."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        p = tn.placeholder(tn.bool, [], name="p")
        c = tn.constant(5.0, F)

        def taken() -> Any:
            return tn.constant(1.0, F) if const_branch == "inside" else c

        _, r = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * tn.cond(p, taken, lambda: x)), [0, x])
        (dx,) = tn.gradients(r, [x])
    k = 1.0 if const_branch == "inside" else 5.0
    assert run(backend, g, [r, dx], {x: 2.0, p: True}) == [2.0 * k**3, k**3]
    assert run(backend, g, [r, dx], {x: 2.0, p: False}) == [16.0, 32.0]


def test_gradient_under_control_dependencies_on_a_loop_output(backend: str) -> None:
    """The gradient's sync variable once picked up the open control dependency (a root-frame node)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        _, r = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * x), [0, x])
        with tn.control_dependencies([r]):
            (dx,) = tn.gradients(r * 2.0, [x])
        tn.validate(g)
    assert run(backend, g, dx, {x: 2.0}) == 64.0


def test_back_prop_false_loop_is_a_constant(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        _, y = tn.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * x), [0, x], back_prop=False)
        assert tn.gradients(y, [x]) == [None]
        (dx,) = tn.gradients(y + x * x, [x])
    assert run(backend, g, dx, {x: 3.0}) == 6.0


def test_gradients_of_a_tensor_of_another_graph_raise() -> None:
    g1 = tn.Graph()
    with g1.as_default():
        a = tn.constant(1.0) * 2.0
    g2 = tn.Graph()
    with g2.as_default():
        x = tn.constant(2.0)
        _ = x * 3.0
        with pytest.raises(tn.GradientError, match="another graph"):
            tn.gradients(a, [x])
        with pytest.raises(tn.GradientError, match="another graph"):
            tn.gradients(x * 2.0, [a])


def test_gradients_are_built_in_the_graph_of_ys_whichever_graph_is_the_default(backend: str) -> None:
    # (called outside ``with g.as_default()``, they made their ones and sums in the default graph and
    # failed with "belongs to another graph"; ys and xs say which graph they belong in)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [3], name="x")
        _, y = tn.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * x), [0, x])
        loss = tn.reduce_sum(y)
    other = tn.Graph()
    with other.as_default():
        (dx,) = tn.gradients(loss, [x], grad_ys=[2.0], memory_budget=4096)
    assert dx.graph is g and not other.nodes
    np.testing.assert_allclose(run(backend, g, dx, {x: np.arange(3.0)}), 2 * 3 * np.arange(3.0) ** 2)


def test_map_fn_in_a_loop_body_keeps_the_static_shape(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [4, 3], name="x")
        _, r = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tn.map_fn(lambda row: row * 2.0, v)), [0, x])
        (dx,) = tn.gradients(tn.reduce_sum(r), [x])
    assert r.shape == (4, 3)
    out, d = run(backend, g, [r, dx], {x: np.ones((4, 3))})
    np.testing.assert_array_equal(out, np.full((4, 3), 8.0))
    np.testing.assert_array_equal(d, np.full((4, 3), 8.0))


def test_map_fn_and_scan_over_zero_elements(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [0, 3], name="x")
        m = tn.map_fn(lambda row: row * 2.0, x)
        s = tn.scan(lambda c, row: c + row, x, initializer=tn.zeros([3], F))
    assert m.shape == (0, 3) and s.shape == (0, 3)
    a, b = run(backend, g, [m, s], {x: np.zeros((0, 3))})
    assert a.shape == (0, 3) and b.shape == (0, 3)


def test_shape_invariant_any_shape(backend: str) -> None:
    """``tn.ANY_SHAPE`` lets a loop variable change rank; ``None`` still means "no invariant"."""
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(1.0, F)
        _, r = tn.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, tn.stack([v, v])), [0, x],
                             shape_invariants=[None, tn.ANY_SHAPE])
        assert r.shape is None
    with tn.Graph().as_default(), pytest.raises(tn.ShapeError, match="shape_invariants"):
        tn.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, tn.stack([v, v])), [0, tn.constant(1.0, F)],
                      shape_invariants=[None, None])
    np.testing.assert_array_equal(run("reference", g, r), np.ones((2, 2)))
    if backend == "fast":  # no jax.lax.while_loop carry changes rank: the loop of two bodies is unrolled
        sess = tn.Session(g, backend="fast", fallback=False)
        np.testing.assert_array_equal(sess.run(r), np.ones((2, 2)))
        assert sess.last_result is not None and sess.last_result.stats["executor"] == "compiled"
