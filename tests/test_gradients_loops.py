"""Gradients through while loops (the paper, Sec. 5.2): backward loops, stacks, invariants.

Closed-form cases a person can check by hand come first; the rest compare against ``jax.grad`` of the
same computation written as a plain Python loop over jax.numpy (float64), or against central finite
differences. Everything runs on the reference backend, under several schedulers where iterations can
overlap (the stacks are keyed, so the schedule must not matter).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import turnout as tn
from turnout.control_flow.contexts import WhileContext

jax.config.update("jax_enable_x64", True)
F = tn.float64
SCHEDULES = [dict(scheduler="fifo"), dict(scheduler="lifo"), dict(scheduler="random", seed=1),
             dict(scheduler="random", seed=2)]


def run(g: tn.Graph, fetches: Any, feeds: dict[Any, Any], **kw: Any) -> Any:
    return tn.Session(g, backend="reference").run(fetches, feed_dict=feeds, **kw)


def run_all_schedules(g: tn.Graph, fetches: Any, feeds: dict[Any, Any]) -> Any:
    """Run under every scheduler, check they agree exactly, return the values."""
    results = [run(g, fetches, feeds, **s) for s in SCHEDULES]
    first = results[0] if isinstance(results[0], list) else [results[0]]
    for r in results[1:]:
        for a, b in zip(first, r if isinstance(r, list) else [r], strict=True):
            np.testing.assert_array_equal(a, b)
    return results[0]


# ---- closed forms --------------------------------------------------------------------------------
def test_squaring_until_100_has_gradient_1024() -> None:
    """2 -> 4 -> 16 -> 256: y = x^8, dy/dx = 8 x^7 = 1024 at x = 2 (TensorFlow's classic test)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(2.0)
        (y,) = tn.while_loop(lambda v: v < 100.0, lambda v: [v * v], [x])
        (dx,) = tn.gradients(y, [x])
    assert run(g, [y, dx], {}) == [256.0, 1024.0]


@pytest.mark.parametrize("parallel_iterations", [1, 10])
def test_v_times_a_invariant_and_initial_value(parallel_iterations: int) -> None:
    """v_{k+1} = v_k * a, 4 times: y = v0 a^4; dy/dv0 = a^4 = 16, dy/da = 4 v0 a^3 = 48 (v0=1.5, a=2).
    ``a`` is a loop invariant (Enter is_constant): its gradient accumulates over the iterations."""
    g = tn.Graph()
    with g.as_default():
        v0 = tn.placeholder(F, [], name="v0")
        a = tn.placeholder(F, [], name="a")
        _, y = tn.while_loop(lambda i, v: i < 4, lambda i, v: (i + 1, v * a), [tn.constant(0), v0],
                             parallel_iterations=parallel_iterations)
        dv0, da = tn.gradients(y, [v0, a])
    assert run_all_schedules(g, [y, dv0, da], {v0: 1.5, a: 2.0}) == [24.0, 16.0, 48.0]


def test_two_coupled_loop_variables_match_jax() -> None:
    def f(x: Any, y: Any) -> Any:
        for _ in range(3):
            x, y = x * y, x + y
        return x + y

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        y = tn.placeholder(F, [], name="y")
        _, xo, yo = tn.while_loop(lambda i, a, b: i < 3, lambda i, a, b: (i + 1, a * b, a + b), [tn.constant(0), x, y])
        grads = tn.gradients(xo + yo, [x, y])
    np.testing.assert_allclose(run_all_schedules(g, grads, {x: 1.1, y: 0.7}), jax.grad(f, (0, 1))(1.1, 0.7), rtol=1e-12)


def _power_loop(v: Any, a: Any, n: int, pi: int) -> Any:
    return tn.while_loop(lambda i, w: i < n, lambda i, w: (i + 1, w * a + 0.5), [tn.constant(0), v],
                         parallel_iterations=pi)[1]


def _power_py(v: Any, a: Any, n: int) -> Any:
    for _ in range(n):
        v = v * a + 0.5
    return v


@pytest.mark.parametrize("pi", [1, 10])
def test_serial_and_parallel_pairs_of_loops(pi: int) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        a = tn.placeholder(F, [], name="a")
        serial = _power_loop(_power_loop(x, a, 3, pi), a * a, 2, pi)  # loop 2 reads loop 1's result
        parallel = _power_loop(x, a, 2, pi) * _power_loop(x * 2.0, a, 3, pi)  # independent loops
        gs = tn.gradients(serial, [x, a]) + tn.gradients(parallel, [x, a])
    got = run_all_schedules(g, gs, {x: 0.8, a: 1.3})
    want_s = jax.grad(lambda x, a: _power_py(_power_py(x, a, 3), a * a, 2), (0, 1))(0.8, 1.3)
    want_p = jax.grad(lambda x, a: _power_py(x, a, 2) * _power_py(x * 2, a, 3), (0, 1))(0.8, 1.3)
    np.testing.assert_allclose(got, [*want_s, *want_p], rtol=1e-12)


@pytest.mark.parametrize("inner_pi", [1, 10])
def test_nested_loops_inner_trip_count_varies(inner_pi: int) -> None:
    """The inner loop runs i+1 times in outer iteration i: its trip counts are pushed on an outer stack."""
    def f(a: Any, b: Any, v: Any) -> Any:
        for i in range(3):
            for _ in range(i + 1):
                v = v * a + 0.1
            v = v * b
        return v

    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(F, [], name="a")
        b = tn.placeholder(F, [], name="b")
        v0 = tn.placeholder(F, [], name="v0")

        def outer(i: Any, v: Any) -> Any:
            _, w = tn.while_loop(lambda j, w: j < i + 1, lambda j, w: (j + 1, w * a + 0.1), [tn.constant(0), v],
                                 parallel_iterations=inner_pi, name="inner")
            return i + 1, w * b

        _, y = tn.while_loop(lambda i, v: i < 3, outer, [tn.constant(0), v0], name="outer")
        grads = tn.gradients(y, [a, b, v0])
    got = run_all_schedules(g, grads, {a: 1.1, b: 0.9, v0: 0.5})
    np.testing.assert_allclose(got, jax.grad(f, (0, 1, 2))(1.1, 0.9, 0.5), rtol=1e-12)
    # the stack index of the inner loop's stacks has two counters (outer first)
    rep = tn.memory_report(g)
    inner = rep.loop("outer/body/inner")
    assert [s.tensor for s in inner.stacked] == ["outer/body/inner/body_in_2:0"]
    pushes = [n for n in g.nodes if n.op == "StackPush" and n.context.name == "outer/body/inner"]
    assert pushes and all(n.inputs[1].shape == (2,) for n in pushes)
    outer_stacked = {s.tensor for s in rep.loop("outer").stacked}
    assert "outer/body/inner/gradient_sync/trip_count:0" in outer_stacked  # inner trip counts, per outer iteration


def test_nested_loops_against_finite_differences() -> None:
    """A 2-level loop nest with vector state, checked by central differences in float64."""
    def build() -> tuple[tn.Graph, Any, Any, Any]:
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(F, [3], name="x")
            w = tn.placeholder(F, [3, 3], name="w")

            def outer(i: Any, h: Any) -> Any:
                _, h2 = tn.while_loop(lambda j, h: j < 2, lambda j, h: (j + 1, tn.tanh(tn.matmul(h, w))),
                                      [tn.constant(0), h])
                return i + 1, h2 + h * 0.5

            _, h = tn.while_loop(lambda i, h: i < 3, outer, [tn.constant(0), tn.reshape(x, [1, 3])])
            loss = tn.reduce_sum(h * h)
            grads = tn.gradients(loss, [x, w])
        return g, (x, w), loss, grads

    g, (x, w), loss, grads = build()
    rng = np.random.default_rng(0)
    xv, wv = rng.normal(size=3), rng.normal(size=(3, 3)) * 0.5
    dx, dw = run(g, grads, {x: xv, w: wv}, scheduler="random", seed=5)
    eps = 1e-6
    for arr, d, which in ((xv, dx, 0), (wv, dw, 1)):
        fd = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += eps
            minus[idx] -= eps
            fp = run(g, loss, {x: plus if which == 0 else xv, w: plus if which == 1 else wv})
            fm = run(g, loss, {x: minus if which == 0 else xv, w: minus if which == 1 else wv})
            fd[idx] = (fp - fm) / (2 * eps)
        np.testing.assert_allclose(d, fd, rtol=1e-6, atol=1e-8)


def test_cond_inside_loop_matches_jax() -> None:
    """The branch taken changes from iteration to iteration; the backward cond re-takes it."""
    def f(x: Any) -> Any:
        v = x
        for _ in range(6):
            v = jnp.where(v > 2.0, v * 0.5 + x, v * v * 3.0)
        return v

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        _, y = tn.while_loop(lambda i, v: i < 6,
                             lambda i, v: (i + 1, tn.cond(v > 2.0, lambda: v * 0.5 + x, lambda: v * v * 3.0)),
                             [tn.constant(0), x])
        (dx,) = tn.gradients(y, [x])
    for xv in (0.7, 0.3):
        np.testing.assert_allclose(run_all_schedules(g, dx, {x: xv}), jax.grad(f)(xv), rtol=1e-12)


def test_loop_in_cond_in_loop_reading_branch_values() -> None:
    """Three levels: the inner loop reads ``s``, computed in the cond branch of the outer body; the
    backward graph gets it through the cond's exported outputs and the outer stacks."""
    def f(x: Any) -> Any:
        v = x
        for i in range(5):
            if i % 2 == 0:
                s = v * 0.5 + x
                for _ in range(i):
                    v = jnp.tanh(v * s)
            else:
                v = v * x
        return v

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")

        def outer(i: Any, v: Any) -> Any:
            def taken() -> Any:
                s = v * 0.5 + x
                return tn.while_loop(lambda j, w: j < i, lambda j, w: (j + 1, tn.tanh(w * s)), [tn.constant(0), v])[1]

            return i + 1, tn.cond(tn.equal(i % 2, 0), taken, lambda: v * x)

        _, y = tn.while_loop(lambda i, v: i < 5, outer, [tn.constant(0), x], parallel_iterations=4)
        (dx,) = tn.gradients(y, [x])
    np.testing.assert_allclose(run_all_schedules(g, [y, dx], {x: 0.8}), [f(0.8), jax.grad(f)(0.8)], rtol=1e-12)


def test_loop_inside_cond_both_branches() -> None:
    """y = x^4 via a loop when p, else 2x: dy/dx = 4x^3 = 13.5 at x=1.5, or 2. The untaken branch's
    backward loop receives dead values and dies instead of hanging."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        p = tn.placeholder(tn.bool, [], name="p")
        y = tn.cond(p, lambda: tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * x), [tn.constant(0), x])[1],
                    lambda: x * 2.0)
        (dx,) = tn.gradients(y, [x])
    assert run_all_schedules(g, [y, dx], {x: 1.5, p: True}) == [5.0625, 13.5]
    assert run_all_schedules(g, [y, dx], {x: 1.5, p: False}) == [3.0, 2.0]


def test_case_with_a_loop_branch() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        c = tn.placeholder(F, [], name="c")
        k = tn.placeholder(tn.int32, [], name="k")
        y = tn.case(k, [lambda: x * c,
                        lambda: tn.while_loop(lambda i, v: i < 4, lambda i, v: (i + 1, v * x), [tn.constant(0), c])[1],
                        lambda: c * c])
        grads = tn.gradients(y, [x, c])
    assert run_all_schedules(g, grads, {x: 1.5, c: 2.0, k: 0}) == [2.0, 1.5]
    assert run_all_schedules(g, grads, {x: 1.5, c: 2.0, k: 1}) == [4 * 2.0 * 1.5 ** 3, 1.5 ** 4]
    assert run_all_schedules(g, grads, {x: 1.5, c: 2.0, k: 2}) == [0.0, 4.0]


def test_stop_gradient_inside_and_outside_loops() -> None:
    """Inside: v <- v * sg(x) + x three times: dy/dx = x^3 + x^2 + x + 1 = 15 at x = 2 (the stopped
    factor acts as a constant). Outside: stop_gradient(y) has no gradient."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        _, y = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * tn.stop_gradient(x) + x), [tn.constant(0), x])
        (dx,) = tn.gradients(y, [x])
        assert tn.gradients(tn.stop_gradient(y) * x, [x]) != [None]
        assert tn.gradients(tn.stop_gradient(y), [x]) == [None]
    assert run(g, [y, dx], {x: 2.0}) == [30.0, 15.0]


@pytest.mark.parametrize("trips", [0, 1, 2])
def test_zero_trip_and_shape_varying_loop(trips: int) -> None:
    """v doubles its length each iteration (shape_invariants [None]); with 0 trips the gradient is the
    gradient of the initial value, and the invariant ``a`` gets exactly 0."""
    def f(v: Any, a: Any) -> Any:
        for _ in range(trips):
            v = jnp.concatenate([v, v * a])
        return jnp.sum(v * v)

    g = tn.Graph()
    with g.as_default():
        v0 = tn.placeholder(F, [2], name="v0")
        a = tn.placeholder(F, [], name="a")
        n = tn.placeholder(tn.int32, [], name="n")
        _, v = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tn.concat([v, v * a], 0)), [tn.constant(0), v0],
                             shape_invariants=[[], [None]])
        grads = tn.gradients(tn.reduce_sum(v * v), [v0, a])
    got = run_all_schedules(g, grads, {v0: [1.0, 2.0], a: 3.0, n: trips})
    want = jax.grad(f, (0, 1))(jnp.array([1.0, 2.0]), 3.0)
    np.testing.assert_allclose(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1])


def test_maximum_iterations_bounds_the_backward_loop_too() -> None:
    """The predicate alone would run for ever (v < 1e9 with v = 2^k); maximum_iterations=3 stops it:
    y = x^4, dy/dx = 4 x^3 = 32 at x = 2."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        _, y = tn.while_loop(lambda i, v: v < 1e9, lambda i, v: (i + 1, v * x), [tn.constant(0), x],
                             maximum_iterations=3)
        (dx,) = tn.gradients(y, [x])
    assert run(g, [y, dx], {x: 2.0}) == [16.0, 32.0]


def test_back_prop_false_makes_the_loop_a_constant_for_gradients() -> None:
    """As in TensorFlow: no gradient flows through a back_prop=False loop, and nothing is stacked."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        _, y = tn.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * x), [tn.constant(0), x], back_prop=False,
                             name="frozen")
        assert tn.gradients(y, [x]) == [None]
        (dx,) = tn.gradients(y * x, [x])  # d(y x)/dx with y held constant is y
        assert not [n for n in g.nodes if n.op == "StackPush"]
    assert run(g, [y, dx], {x: 2.0}) == [8.0, 8.0]


def test_tensor_array_scan_map_fn_foldl_match_jax() -> None:
    xs_v = np.array([0.5, -1.0, 2.0, 0.3])

    def f(xs: Any, c0: Any) -> Any:
        c, ys = c0, []
        for x in xs:
            c = jnp.tanh(c * x + 0.5)
            ys.append(c)
        sc, mp = jnp.stack(ys), xs * xs * 3.0
        c = c0
        for x in xs:
            c = c * x + 1.0
        return jnp.sum(sc * sc) + jnp.sum(mp * sc) + c

    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(F, [4], name="xs")
        c0 = tn.placeholder(F, [], name="c0")
        sc = tn.scan(lambda c, x: tn.tanh(c * x + 0.5), xs, initializer=c0)
        mp = tn.map_fn(lambda x: x * x * 3.0, xs)
        fl = tn.foldl(lambda c, x: c * x + 1.0, xs, initializer=c0)
        grads = tn.gradients(tn.reduce_sum(sc * sc) + tn.reduce_sum(mp * sc) + fl, [xs, c0])
    got = run_all_schedules(g, grads, {xs: xs_v, c0: 0.2})
    want = jax.grad(f, (0, 1))(xs_v, 0.2)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_tensor_array_written_in_a_loop_read_outside() -> None:
    """A TensorArray loop variable: slot k = x^(k+1); read slots 1 and 3: d/dx (x^2 + x^4) = 2x + 4x^3."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")

        def body(i: Any, v: Any, ta: Any) -> Any:
            return i + 1, v * x, ta.write(i, v)

        _, _, ta = tn.while_loop(lambda i, v, ta: i < 4, body, [tn.constant(0), x, tn.TensorArray(F, size=4)])
        (dx,) = tn.gradients(ta.read(1) + ta.read(3), [x])
    assert run_all_schedules(g, dx, {x: 2.0}) == 2 * 2.0 + 4 * 8.0


def test_gradient_requested_inside_a_loop_body() -> None:
    """acc = sum over v = 1, 2, 3 of d(v^3)/dv = 3 (1 + 4 + 9) = 42."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")

        def body(i: Any, v: Any, acc: Any) -> Any:
            (d,) = tn.gradients(v * v * v, [v])
            return i + 1, v + 1.0, acc + d

        _, _, acc = tn.while_loop(lambda i, v, acc: i < 3, body, [tn.constant(0), x, tn.constant(0.0, F)])
    assert run_all_schedules(g, acc, {x: 1.0}) == 42.0


def test_gradient_inside_a_body_through_an_inner_loop() -> None:
    """Inside the outer body, differentiate an inner loop (its stacks are keyed by both counters)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")

        def body(i: Any, acc: Any) -> Any:
            xi = x + tn.cast(i, F)
            _, y = tn.while_loop(lambda j, v: j < 2, lambda j, v: (j + 1, v * xi), [tn.constant(0), xi])
            (d,) = tn.gradients(y, [xi])  # y = xi^3: 3 xi^2
            return i + 1, acc + d

        _, acc = tn.while_loop(lambda i, acc: i < 3, body, [tn.constant(0), tn.constant(0.0, F)], parallel_iterations=3)
    assert run_all_schedules(g, acc, {x: 1.0}) == 3 * (1 + 4 + 9)


def test_variable_read_inside_a_loop() -> None:
    """y = x * w^2 (two iterations of v * w): d/dw sum(y) + sum(w^2) = 2 x w + 2 w, per element."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.array([1.0, 2.0]), name="w")
        x = tn.placeholder(F, [2], name="x")
        _, y = tn.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * w), [tn.constant(0), x])
        (dw,) = tn.gradients(tn.reduce_sum(y) + tn.reduce_sum(w * w), [w])
    np.testing.assert_allclose(run_all_schedules(g, dw, {x: [3.0, 4.0]}), [2 * 3 * 1 + 2, 2 * 4 * 2 + 4])


def test_second_order_through_a_loop() -> None:
    """y = x^3: d2y/dx2 = 6x (more in tests/test_gradients_second_order.py)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        _, y = tn.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * x), [tn.constant(0), x])
        (d1,) = tn.gradients(y, [x])
        (d2,) = tn.gradients(d1, [x])
    assert run_all_schedules(g, [d1, d2], {x: 2.0}) == [12.0, 12.0]


def test_backward_graph_is_builder_made_with_explicit_stacks() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        _, y = tn.while_loop(lambda i, v: i < 5, lambda i, v: (i + 1, tn.tanh(v) * x),
                             [tn.constant(0), x], swap_memory=True, name="fwd")
        tn.gradients(y, [x])
    fwd = next(c for c in g.contexts if isinstance(c, WhileContext) and c.name == "fwd")
    bwd = [c for c in g.contexts if isinstance(c, WhileContext) and c.name.startswith("gradients/")]
    assert len(bwd) == 1 and bwd[0].counter is bwd[0].loop_vars[0]
    stacks = [n for n in g.nodes if n.op == "StackNew"]
    assert stacks and all(n.context is None for n in stacks)
    assert all(n.attrs["frame_name"] == fwd.frame_name and n.attrs["swap_memory"] is True for n in stacks)
    pushes = [n for n in g.nodes if n.op == "StackPush"]
    pops = [n for n in g.nodes if n.op == "StackPop"]
    assert {n.context for n in pushes} == {fwd} and {n.context for n in pops} == {bwd[0]}
    pushed = [n.inputs[2].name for n in pushes]
    assert len(pushed) == len(set(pushed))  # each forward tensor is pushed once
    assert all(n.inputs[1].dtype == tn.int32 and n.inputs[1].shape == (1,) for n in pushes + pops)


def test_memory_report_lists_stacked_tensors_per_iteration() -> None:
    """The body reads v (float64 [3], loop variable 2 after the builder's counter and i) and
    h = tanh(v * a) (float64 [3]); the gradient of v * a needs v
    and a (an invariant: not stacked), the gradient of tanh needs h: 2 x 24 bytes per iteration."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [3], name="x")
        a = tn.placeholder(F, [3], name="a")
        _, y = tn.while_loop(lambda i, v: i < 4, lambda i, v: (i + 1, tn.tanh(v * a, name="h")), [tn.constant(0), x],
                             name="rnn")
        tn.gradients(tn.reduce_sum(y), [x, a])
    rep = tn.memory_report(g)
    (loop,) = rep.loops
    assert loop.loop_name == "rnn" and loop.swap_memory is False
    assert sorted(s.tensor for s in loop.stacked) == ["rnn/body/h:0", "rnn/body_in_2:0"]
    assert all(s.dtype == "float64" and s.shape == (3,) and s.bytes_per_iteration == 24 for s in loop.stacked)
    assert loop.bytes_per_iteration == 48
    text = str(rep)
    assert 'loop "rnn"' in text and "48 bytes per iteration" in text and "rnn/body/h:0" in text


def _gradient_programs() -> dict[str, tuple[tn.Graph, list[Any], dict[Any, Any]]]:
    """A few gradient graphs (loop, cond in loop, nested loops, scan) with their fetches and feeds."""
    out: dict[str, tuple[tn.Graph, list[Any], dict[Any, Any]]] = {}
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [], name="x")
        _, y = tn.while_loop(lambda i, v: i < 6,
                             lambda i, v: (i + 1, tn.cond(v > 2.0, lambda: v * 0.5 + x, lambda: v * v * 3.0)),
                             [tn.constant(0), x])
        out["cond_in_loop"] = (g, [y, *tn.gradients(y, [x])], {x: 0.7})
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(F, [], name="a")
        v0 = tn.placeholder(F, [], name="v0")

        def outer(i: Any, v: Any) -> Any:
            return i + 1, tn.while_loop(lambda j, w: j < i + 1, lambda j, w: (j + 1, w * a + 0.1),
                                        [tn.constant(0), v])[1]

        _, y = tn.while_loop(lambda i, v: i < 3, outer, [tn.constant(0), v0])
        out["nested"] = (g, [y, *tn.gradients(y, [a, v0])], {a: 1.1, v0: 0.5})
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(F, [4], name="xs")
        sc = tn.scan(lambda c, x: tn.tanh(c * x + 0.5), xs, initializer=tn.constant(0.2, F))
        out["scan"] = (g, tn.gradients(tn.reduce_sum(sc), [xs]), {xs: np.array([0.5, -1.0, 2.0, 0.3])})
    return out


@pytest.mark.parametrize("name", ["cond_in_loop", "nested", "scan"])
def test_gradient_graphs_are_structured_and_adequate(name: str) -> None:
    """[T2-Adequacy] on gradient graphs: the structured evaluator (which reads only the builders'
    contexts) gives the reference interpreter's values, so the backward graph is builder-made."""
    from turnout.semantics import structured
    from turnout.validate import validate

    g, fetches, feeds = _gradient_programs()[name]
    validate(g, fetches, list(feeds))
    got = structured.evaluate(g, fetches, feeds).values
    want = run(g, fetches, feeds)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


# ---- T6 on generated programs ----------------------------------------------------------------------
def _finite_difference(p: Any, inputs: dict[str, np.ndarray], which: list[int], name: str, eps: float = 1e-6
                       ) -> np.ndarray:
    """Central differences of sum(program results[which]) w.r.t. input ``name``, by the AST interpreter."""
    import programs as P

    base = np.asarray(inputs[name], dtype=np.float64)
    out = np.zeros_like(base)
    for idx in np.ndindex(base.shape):
        vals = []
        for sign in (1.0, -1.0):
            moved = base.copy()
            moved[idx] += sign * eps
            res = P.interpret(p, {**inputs, name: moved}).values
            vals.append(sum(float(res[i]) for i in which))
        out[idx] = (vals[0] - vals[1]) / (2 * eps)
    return out


def test_t6_generated_programs_match_finite_differences() -> None:
    """[T6] For generated structured programs (nested while_loop / cond / case / scan over
    differentiable float ops, control steered by ints), the dataflow gradient of the sum of the float
    results equals (a) ``jax.grad`` of a straight-line replay of the same program along the control
    decisions it took (float64, rtol 1e-9) and (b) central finite differences of the program's direct
    interpretation (eps 1e-6, rtol 1e-4, atol 1e-5)."""
    import programs as P
    import strategies as S
    from hypothesis import assume, given

    @given(S.float_programs().flatmap(lambda p: S.inputs_for(p, wide=False).map(lambda i: (p, i))))
    def check(case: tuple[Any, dict[str, np.ndarray]]) -> None:
        p, inputs = case
        built = P.build(p)
        g, ph, fetches = built
        which = [i for i, t in enumerate(fetches) if t.dtype.is_floating]
        names = [d.name for d in p.inputs if d.dtype.startswith("float")]
        assume(which and names)
        results = P.interpret(p, inputs).values
        assume(all(np.all(np.abs(np.asarray(results[i])) < 1e4) for i in which))
        with g.as_default():
            loss = fetches[which[0]]
            for i in which[1:]:
                loss = loss + fetches[i]
            grads = tn.gradients(loss, [ph[n] for n in names], unconnected_gradients="zero")
        got = run(g, grads, built.feed_dict(inputs), scheduler="random", seed=0)
        replay = P.replay_gradients(p, inputs, which, names)
        for n, gr, want in zip(names, got, replay, strict=True):
            # (a) jax.grad of the straight-line replay of the control decisions taken: tight tolerance
            np.testing.assert_allclose(gr, want, rtol=1e-9, atol=1e-12, err_msg=f"d/d{n} (jax replay) of\n{p}")
            # (b) central finite differences (float64, eps 1e-6)
            np.testing.assert_allclose(gr, _finite_difference(p, inputs, which, n), rtol=1e-4, atol=1e-5,
                                       err_msg=f"d/d{n} (finite differences) of\n{p}")

    check()


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_regression_cond_in_loop_exporting_a_value_of_partly_known_shape(backend: str) -> None:
    """Found by the mutation campaign of devices/swap.py: a cond branch inside a loop computes a value of
    shape ``[?]`` that the gradient needs, so the branch exports it through a Merge with a stand-in on
    the other branch. The stand-in was a scalar, which that Merge rejects ([W-Types]); it now has the
    value's rank (unknown sizes 0). Closed form: y = 2x, then y <- tanh(y) * y twice."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            return i + 1, tn.cond(i > 0, lambda: tn.tanh(y) * y, lambda: y * 2.0)

        _, y = tn.while_loop(lambda i, y: i < 3, body, [tn.constant(0), x])
        loss = tn.reduce_sum(y)
        (dx,) = tn.gradients(loss, [x])
    xv = np.array([0.5, -1.0, 0.25], np.float32)
    y, d = xv.astype(np.float64) * 2.0, np.full(3, 2.0)
    for _ in range(2):
        t = np.tanh(y)
        d = d * (t + y * (1.0 - t * t))
        y = t * y
    got_loss, got_dx = tn.Session(g, backend=backend).run([loss, dx], {x: xv})
    np.testing.assert_allclose(got_loss, y.sum(), rtol=1e-5)
    np.testing.assert_allclose(got_dx, d, rtol=1e-5)
