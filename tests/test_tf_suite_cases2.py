"""More closed-form cases of the kind TensorFlow's and JAX's own test suites pin, on every route.

Written here from the behaviours those suites check (``control_flow_ops_py_test``'s loop and cond
gradients, ``functional_ops_test`` / ``map_fn_test`` / ``scan_ops_test``, ``tensor_array_ops_test``,
``gradients_test``, the math and reduction tests of the ops Turnout has, JAX's
``lax_control_flow_test``), not copied, and not repeating ``tests/test_closed_forms.py`` or
``tests/test_tf_suite_cases.py``: loops whose trip count the data decides, loop variables that pass
through unchanged, zero-trip loops and a negative ``maximum_iterations``, unconnected gradients,
loops inside conds inside loops, ``case`` driven by the loop counter, three nested loops, the Hessian
of a loop with a cond, gathers and slices of a loop-invariant tensor, the scan and fold family with
gradients of their initializers and closures, a nested scan, ``map_fn`` of conds and of dicts,
elems of length zero, TensorArrays written and read in conds inside loops and grown under
``maximum_iterations``, Variables read and assigned in loops, loop and cond outputs that are outside
tensors (a bool loop variable, an empty one), gradients at kinks and ties (TensorFlow's rules),
integer division, rounding and wrap-around, strided slices with negative steps, slices of size -1,
and TensorFlow's error cases (a write-once slot written twice in a loop, a negative integer power,
an index out of range, an exclusive ``case`` with two true predicates).

Each case is one graph of several small programs, so that a route compiles it once; it runs on the
routes ``case_routes`` of ``tests/route_table.py`` gives it. Each route gives the closed form and
the reference interpreter's values. The bug tests at the end each name what was wrong before its
fix.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
from case_table import Case, Cases, close, f64, grad, ph, run_case
from route_table import ROUTES, case_routes, run_on

import turnout as tn

pytest.importorskip("jax")

CASES = Cases()
case = CASES.case





@case
def loops_whose_data_decide_the_trip_count() -> Case:
    x, y = ph(name="x"), ph(name="y")
    (sq,) = tn.while_loop(lambda v: v < 100.0, lambda v: v * v, [x])  # 2 -> 4 -> 16 -> 256 = x^8
    _, a, b = tn.while_loop(lambda i, a, b: i < 2, lambda i, a, b: (i + 1, a + b, a * b), [tn.constant(0), x, y])
    # a2 = (x + y) + x y, b2 = (x + y) x y: at (2, 3) a2 + b2 = 11 + 30, d/dx = 1 + y + x y + (x + y) y
    _, p, q = tn.while_loop(lambda i, p, q: i < 3, lambda i, p, q: (i + 1, p, q * p), [tn.constant(0), x, f64(1.0)])
    i2, j2 = tn.while_loop(lambda i, j: i < j, lambda i, j: (i + 1, j - 1), [tn.constant(0), tn.constant(10)])
    return ([sq, grad(sq, x), a + b, grad(a + b, x), grad(a + b, y), p, q, grad(q, x), i2, j2], {x: 2.0, y: 3.0},
            [256.0, 1024.0, 41.0, 25.0, 19.0, 2.0, 8.0, 12.0, 5, 5])


@case
def zero_trips_and_unconnected_gradients() -> Case:
    x, n, m = ph(name="x"), ph(name="n", dtype=tn.int32), ph(name="m", dtype=tn.int32)
    i, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * x), [tn.constant(0), f64(1.0)])
    # x reaches z only through the loop's predicate: no gradient flows (TensorFlow's None; "zero" asked)
    _, z = tn.while_loop(lambda i, z: tn.cast(i, tn.float64) < x, lambda i, z: (i + 1, z * 2.0),
                         [tn.constant(0), f64(1.0)])
    k, w = tn.while_loop(lambda i, v: i < 10, lambda i, v: [i + 1, v * 2.0], [tn.constant(0), f64(3.0)],
                         maximum_iterations=m)
    u = ph(None, name="u")
    return ([y, grad(y, x), grad(tn.cast(i, tn.float64), x, unconnected_gradients="zero"), z,
             grad(z, x, unconnected_gradients="zero"), k, w, grad(x * 2.0, u, unconnected_gradients="zero")],
            {x: 2.5, n: 0, m: -2, u: np.ones((2, 3))}, [1.0, 0.0, 0.0, 8.0, 0.0, 0, 3.0, np.zeros((2, 3))])


@case
def loops_in_conds_and_conds_in_loops() -> Case:
    x, z, p = ph(name="x"), ph(name="z"), ph(name="p", dtype=tn.bool)

    def loop() -> tn.Tensor:
        return tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * x), [tn.constant(0), x])[1]

    a, b = tn.cond(p, loop, lambda: x * x), tn.cond(tn.logical_not(p), loop, lambda: x * x)

    def nested(t: tn.Tensor) -> tn.Tensor:
        return tn.cond(t > 0.0, lambda: tn.cond(t > 1.0, lambda: t * t * t, lambda: t * t), lambda: -t)

    c, d = nested(z), nested(-z)
    e = tn.cond(p, lambda: f64(7.0), lambda: x * 3.0)
    s = tn.cond(p, lambda: tn.stop_gradient(x * x) * x, lambda: x)

    def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        def quad() -> tn.Tensor:
            return tn.while_loop(lambda j, w: j < 2, lambda j, w: (j + 1, w * 2.0), [tn.constant(0), y])[1]
        return i + 1, tn.cond(y < 5.0, quad, lambda: y + x)

    _, wcw = tn.while_loop(lambda i, y: i < 3, body, [tn.constant(0), x / 2.0])  # x/2 = 1 -> 4 -> 16 -> 16 + x
    return ([a, b, grad(a, x), grad(b, x), c, d, grad(c, z), grad(d, z), e, grad(e, x), s, grad(s, x), wcw,
             grad(wcw, x)], {x: 2.0, z: 3.0, p: True},
            [16.0, 4.0, 32.0, 4.0, 27.0, 3.0, 27.0, 1.0, 7.0, 0.0, 8.0, 4.0, 18.0, 9.0])


@case
def case_by_the_loop_counter() -> Case:
    x, k = ph(name="x"), ph(name="k", dtype=tn.int32)

    def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        return i + 1, tn.case(tn.mod(i, 3), [lambda: y + x, lambda: y * x, lambda: y - 1.0])

    _, y = tn.while_loop(lambda i, y: i < 4, body, [tn.constant(0), f64(0.0)])  # ((x x) - 1) + x
    r = tn.case(k, [lambda: x * 2.0, lambda: x * x, lambda: tn.sin(x)])
    return [y, grad(y, x), r, grad(r, x)], {x: 3.0, k: 1}, [11.0, 7.0, 9.0, 6.0]


@case
def the_hessian_of_a_loop_with_a_cond() -> Case:
    x = ph()

    def body(i: tn.Tensor, v: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        return i + 1, tn.cond(i < 1, lambda: v * x, lambda: v * x * x)

    _, h = tn.while_loop(lambda i, v: i < 3, body, [tn.constant(0), f64(1.0)])  # x^5
    dh = grad(h, x)
    return [h, dh, grad(dh, x)], {x: 1.5}, [1.5 ** 5, 5 * 1.5 ** 4, 20 * 1.5 ** 3]


@case
def gathers_and_slices_of_a_loop_invariant() -> Case:
    w = ph([4], name="w")
    idx = tn.constant([0, 0, 3])
    _, a, c = tn.while_loop(lambda i, a, c: i < 3, lambda i, a, c: (i + 1, a + tn.gather(w, i) * w[i + 1],
                                                                      c + tn.reduce_sum(tn.gather(w, idx))),
                            [tn.constant(0), f64(0.0), f64(0.0)])
    g = tn.gather(w, tn.constant([-1, 0, -1]))
    gw = tn.reduce_sum(g * f64([1.0, 2.0, 3.0]))
    return ([a, grad(a, w), c, grad(c, w), g, grad(gw, w)], {w: np.array([1.0, 2.0, 3.0, 4.0])},
            [20.0, [2, 4, 6, 3], 18.0, [6, 0, 0, 3], [4.0, 1.0, 4.0], [2, 0, 0, 4]])


@case
def the_scan_and_fold_family_with_gradients() -> Case:
    xs, w, c0, ys = ph([3], name="xs"), ph(name="w"), ph(name="c0"), ph([3], name="ys")
    s = tn.scan(lambda c, e: c * w + e, xs, initializer=c0)  # [2, 6, 15] at w = 2, c0 = 0.5
    dxs, dw, dc0 = tn.gradients(tn.reduce_sum(s), [xs, w, c0])
    fr = tn.foldr(lambda a, x: a * a + x, xs)  # (x2^2 + x1)^2 + x0
    dot = tn.foldl(lambda a, e: a + e[0] * e[1], (xs, ys), initializer=f64(0.0))

    def fn(c: tn.Tensor, e: tn.Tensor) -> tn.Tensor:
        return tn.while_loop(lambda j, p: j < 2, lambda j, p: (j + 1, p * e), [tn.constant(0), c])[1]

    sq = tn.scan(fn, xs, initializer=f64(1.0))  # running product of squares
    v = np.array([1.0, 2.0, 3.0])
    m = 9.0 + 2.0
    return ([s, dxs, dw, dc0, fr, grad(fr, xs), dot, sq, grad(sq[2], xs)],
            {xs: v, w: 2.0, c0: 0.5, ys: np.array([4.0, 5.0, 6.0])},
            [[2, 6, 15], [7, 3, 1], 15.5, 14.0, m * m + 1, [1.0, 2 * m, 2 * m * 2 * 3.0], 32.0, [1, 4, 36],
             2 * 36.0 / v])


@case
def nested_scans_and_the_forms_of_map_fn() -> Case:
    X = ph([2, 3], name="X")

    def outer(c: tn.Tensor, row: tn.Tensor) -> tn.Tensor:
        return tn.scan(lambda cc, e: cc * e, row, initializer=c[-1])

    s = tn.scan(outer, X, initializer=f64([1.0, 1.0, 1.0]))
    c = tn.map_fn(lambda e: tn.cond(e > 0.0, lambda: e * e, lambda: -3.0 * e), X[0])
    k, q, d = tn.map_fn(lambda e: (tn.cast(e["b"], tn.int32), e["b"] * e["b"], e["a"] * e["b"] + 1.0),
                        {"a": X[0], "b": X[1]}, dtype=(tn.int32, tn.float64, tn.float64), back_prop=False)
    M = np.array([[1.0, -2.0, 3.0], [0.5, 2.0, -1.5]])
    P = np.prod(M)
    return ([s, grad(s[1, 2], X), c, grad(tn.reduce_sum(c) + tn.reduce_sum(d), X), k, q, d], {X: M},
            [[[1, -2, -6], [-3, -6, 9]], P / M, [1, 6, 9], [[2, -3, 6], [0, 0, 0]], [0, 2, -1], M[1] ** 2,
             M[0] * M[1] + 1.0])


@case
def elems_of_length_zero() -> Case:
    X, c = ph([None, 2], name="X"), ph(name="c")
    m = tn.map_fn(lambda r: tn.reduce_sum(r), X)
    s = tn.scan(lambda cc, r: cc + r, X, initializer=f64([1.0, 1.0]))
    f = tn.foldl(lambda cc, r: cc + r, X, initializer=f64([1.0, 2.0]))
    a, b = tn.scan(lambda cc, e: (cc[0] + 1, cc[1] * e[0]), X, initializer=(tn.constant(0), c))
    return ([m, s, f, a, b, grad(tn.reduce_sum(b) + c, c)], {X: np.zeros((0, 2)), c: 2.0},
            [np.zeros(0), np.zeros((0, 2)), [1.0, 2.0], np.zeros(0), np.zeros(0), 1.0])


@case
def tensor_arrays_in_loops_and_conds() -> Case:
    x, xs = ph(name="x"), ph([4], name="xs")
    wc = tn.TensorArray(tn.float64, size=4)
    even: Callable[[tn.Tensor], tn.Tensor] = lambda i: tn.equal(tn.mod(i, 2), 0)  # noqa: E731
    _, wc = tn.while_loop(lambda i, t: i < 4,
                          lambda i, t: (i + 1, t.write(i, tn.cond(even(i), lambda: x, lambda: -x * x))),
                          [tn.constant(0), wc])
    rd = tn.TensorArray(tn.float64, size=4).unstack(xs)
    _, ra = tn.while_loop(lambda i, a: i < 4,
                          lambda i, a: (i + 1, tn.cond(even(i), lambda: a + rd.read(i), lambda: a * rd.read(i))),
                          [tn.constant(0), f64(0.0)])  # (x0 x1 + x2) x3

    def outer(i: tn.Tensor, t: tn.TensorArray) -> tuple[tn.Tensor, tn.TensorArray]:
        inner = tn.while_loop(lambda j, t2: j < 3, lambda j, t2: (j + 1, t2.write(i * 3 + j, i * 10 + j)),
                              [tn.constant(0), t])
        return i + 1, inner[1]

    _, nested = tn.while_loop(lambda i, t: i < 2, outer, [tn.constant(0), tn.TensorArray(tn.int32, size=6)])
    empty = tn.TensorArray(tn.float32, size=0, element_shape=[2])
    v = np.array([1.0, 2.0, 3.0, 4.0])
    return ([wc.stack(), grad(tn.reduce_sum(wc.stack()), x), ra, grad(ra, xs), nested.stack(), empty.stack(),
             empty.size()], {x: 3.0, xs: v},
            [[3, -9, 3, -9], -10.0, 20.0, [8, 4, 4, 5], [0, 1, 2, 10, 11, 12], np.zeros((0, 2)), 0])


@case
def tensor_array_that_a_zero_trip_loop_leaves_empty() -> Case:
    """TensorFlow 1's stack of an array no iteration wrote: ``[0, *element_shape]``, of the element
    shape the loop body's writes give while the graph is built (TensorFlow 1's ``TensorArray`` learns
    it from a write), and its gradient zero; the same loop run twice stacks both rows."""
    x, n = ph(name="x"), ph(name="n", dtype=tn.int32)

    def stacked(count: Any) -> tn.Tensor:
        ta = tn.TensorArray(tn.float64, size=count)
        _, ta = tn.while_loop(lambda i, t: i < count, lambda i, t: (i + 1, t.write(i, tn.stack([x, x * x]))),
                              [tn.constant(0), ta])
        return ta.stack()

    empty, two = stacked(n), stacked(n + 2)
    return ([empty, grad(tn.reduce_sum(empty) + x, x), two], {x: 3.0, n: 0},
            [np.zeros((0, 2)), 1.0, [[3.0, 9.0], [3.0, 9.0]]])


@case
def tensor_arrays_of_dynamic_size() -> Case:
    x, m = ph(name="x"), ph(name="m", dtype=tn.int32)
    tb = tn.TensorArray(tn.float64, size=0, dynamic_size=True)
    _, y, tb = tn.while_loop(lambda i, y, t: i < 100, lambda i, y, t: (i + 1, y * x, t.write(i, y)),
                             [tn.constant(0), f64(1.0), tb], maximum_iterations=m)
    sb = tb.stack()  # [1, x, x^2], y = x^3: d(1 + x^2 + x^4 + x^3)/dx = 2x + 4x^3 + 3x^2
    return [tb.size(), sb, y, grad(tn.reduce_sum(sb * sb) + y, x)], {x: 2.0, m: 3}, [3, [1, 2, 4], 8.0, 48.0]


@case
def variables_read_and_assigned_in_loops_and_conds() -> Case:
    v = tn.Variable(2.0, dtype=tn.float64, name="v")
    acc = tn.Variable(0.0, dtype=tn.float64, name="acc")
    s = tn.Variable(1.0, dtype=tn.float64, name="s")
    p = ph(name="p", dtype=tn.bool)
    _, y = tn.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * v.read()), [tn.constant(0), f64(1.0)])

    def body(i: tn.Tensor) -> tn.Tensor:
        with tn.control_dependencies([acc.assign_add(2.0)]):
            return i + 1

    (i,) = tn.while_loop(lambda i: i < 3, body, [tn.constant(0)])
    with tn.control_dependencies([i]):
        total = acc.read()
    chosen = tn.cond(p, lambda: s.assign(5.0), lambda: s.assign(7.0))
    return [y, grad(y, v), i, total, chosen], {p: False}, [8.0, 12.0, 3, 6.0, 7.0]


@case
def gradients_at_kinks_and_ties_as_tensorflow() -> Case:
    x, y, xs, b, e = ph(name="x"), ph(name="y"), ph([3], name="xs"), ph([3], name="b"), ph([3], name="e")
    m = tn.reduce_max(tn.stack([x, x, y]))  # a tie shares the gradient equally
    zero = x * f64(0.0)
    md = tn.mod(x * 7.5, y * 2.0)  # 7.5 mod 2 at x = y = 1: d/dx = 7.5, d/dy = -2 floor(7.5 / 2)
    pw = tn.reduce_sum(tn.pow(b, e))
    sm = tn.nn.softmax(xs)
    wh = tn.where(xs > 1.5, tn.sqrt(xs - 2.0), xs)  # the untaken side's NaN reaches the gradient (0 * NaN)
    cs = tn.cumsum(xs, exclusive=True, reverse=True)
    bv, ev, v = np.array([0.0, -2.0, 3.0]), np.array([2.0, 2.0, 2.0]), np.array([1.0, 2.0, 3.0])
    p = np.exp(v) / np.exp(v).sum()
    return ([grad(m, x), grad(m, y), grad(tn.maximum(x, y), x), grad(tn.maximum(x, y), y), grad(tn.minimum(x, y), x),
             grad(tn.minimum(x, y), y), grad(tn.abs(zero), x), grad(tn.relu(zero), x),
             grad(tn.clip_by_value(x, 0.0, 1.0), x), md, grad(md, x), grad(md, y), grad(pw, b), grad(pw, e),
             grad(sm[0], xs), grad(tn.reduce_sum(wh), xs), cs,
             grad(tn.reduce_sum(cs * f64([1.0, 2.0, 3.0])), xs), grad(tn.reduce_prod(xs - f64([0.0, 2.0, 0.0])), xs)],
            {x: 1.0, y: 1.0, xs: v, b: bv, e: ev},
            [2 / 3, 1 / 3, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.5, 7.5, -6.0, [0.0, -4.0, 6.0],
             [0.0, 0.0, 9 * np.log(3)], p[0] * (np.eye(3)[0] - p), [np.nan, np.inf, 0.5], [5, 3, 0], [0, 1, 3],
             [0.0, 3.0, 0.0]])


@case
def integer_division_rounding_and_wraparound() -> Case:
    a, b = tn.constant([-7, 7, -7, 7]), tn.constant([2, -2, 3, -3])
    fa, fb = tn.constant([-7.5, 7.5, 7.0]), tn.constant([2.0, -2.0, 0.0])
    r = tn.constant([0.5, 1.5, 2.5, -0.5, -2.5, -1.7, 1.7])
    big = ph(name="big", dtype=tn.int32)
    n, z = ph(name="n", dtype=tn.int32), ph(name="z", dtype=tn.int32)
    ties = tn.constant([[1, 3, 3], [2, 2, 0]])
    return ([tn.floordiv(a, b), tn.mod(a, b), a // 2, a % 3, tn.mod(fa, fb), tn.floordiv(fa, fb), n / z, tn.round(r),
             tn.cast(r, tn.int32), big + 1, big * 2, -(big + 1), abs(big + 1),
             tn.pow(tn.constant([2, -3, 0, 1]), tn.constant([10, 3, 0, 5])), tn.argmax(ties, 1), tn.argmin(ties, 1),
             tn.argmax(ties, 0)], {big: 2147483647, n: 7, z: 0},
            [[-4, -4, -3, -3], [1, -1, 2, -2], [-4, 3, -4, 3], [2, 1, 2, 1], [0.5, -0.5, np.nan], [-4.0, -4.0, np.inf],
             np.inf, [0, 2, 2, 0, -2, -2, 2], [0, 1, 2, 0, -2, -1, 1], -2147483648, -2, -2147483648, -2147483648,
             [1024, -27, 1, 1], [1, 0], [0, 2], [1, 0, 0]])


@case
def ranges_reductions_and_shape_ops() -> Case:
    e, x = ph([None], name="e"), ph([2, 3, 4], name="x")
    c = f64([1.0, 2.0, 3.0, 4.0])
    M = np.arange(24.0).reshape(2, 3, 4)
    u = tn.unstack(x[0], axis=1)
    s1, s2, s3 = tn.split(x[1, 0], [1, -1, 2])
    return ([tn.range(5, 1, -2), tn.range(3, 3), tn.range(0.0, 1.0, 0.3), tn.reduce_sum(e), tn.reduce_prod(e),
             tn.reduce_mean(e), tn.reduce_all(e > 0.0), tn.reduce_any(e > 0.0),
             tn.cumsum(c, exclusive=True, reverse=True), tn.cumprod(c, exclusive=True),
             tn.cumprod(c, exclusive=True, reverse=True),
             tn.one_hot(tn.constant([0, -1, 2]), 3, on_value=5.0, off_value=-1.0),
             tn.one_hot(tn.constant([2, 0]), 3, axis=0), tn.reduce_sum(x, -1), tn.reduce_sum(x, [0, 2]),
             tn.reduce_max(x, 1, keepdims=True), tn.reduce_mean(x, (-1, -2)), tn.stack(u, axis=-1), u[2],
             tn.concat([x[0], x[0]], -1), s1, s2, s3], {e: np.zeros(0), x: M},
            [[5, 3], np.zeros(0), [0.0, 0.3, 0.6, 0.9], 0.0, 1.0, np.nan, True, False, [9, 7, 4, 0], [1, 1, 2, 6],
             [24, 12, 4, 1], [[5, -1, -1], [-1, -1, -1], [-1, -1, 5]], [[0, 1], [0, 0], [1, 0]], M.sum(-1),
             M.sum((0, 2)), M.max(1, keepdims=True), M.mean((-1, -2)), M[0], M[0][:, 2],
             np.concatenate([M[0], M[0]], -1), [12.0], [13.0], [14.0, 15.0]])


@case
def strided_slices_and_operators() -> Case:
    x, y = ph([10], name="x"), ph([None], name="y")
    V = np.arange(10.0)
    keys = [np.s_[::-1], np.s_[::-2], np.s_[7:2:-2], np.s_[-3:], np.s_[-20:3], np.s_[8:100], np.s_[5:2], np.s_[1::3],
            np.s_[-1]]
    sl = x[5:0:-2] * f64([1.0, 2.0, 3.0])
    p, q = tn.constant([True, True, False, False]), tn.constant([True, False, True, False])
    a = tn.constant([7, -7])
    return ([x[k] for k in keys] + [y[k] for k in keys] +
            [sl, grad(tn.reduce_sum(sl), x), p & q, p | q, ~p, a // 2, a % 2, a / 2, -a, abs(a), 2.0 ** x[1:3],
             1.0 - x[1:3], 6.0 / x[1:3], 5 // a, 5 % a], {x: V, y: V},
            [V[k] for k in keys] * 2 +
            [[5.0, 6.0, 3.0], [0, 3, 0, 2, 0, 1, 0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [0, 0, 1, 1], [3, -4], [1, 1],
             [3.5, -3.5], [-7, 7], [7, 7], [2, 4], [0, -1], [6, 3], [0, -1], [5, -2]])


@case
def gradients_of_loop_outputs_used_with_others() -> Case:
    x = ph()
    _, y = tn.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, y * x), [tn.constant(0), x])  # x^3
    sg = tn.stop_gradient(y) * x + y
    _, a, b = tn.while_loop(lambda i, a, b: i < 2, lambda i, a, b: (i + 1, a * x, b + a),
                            [tn.constant(0), f64(1.0), f64(0.0)])
    (gy,) = tn.gradients([a, b], [x], grad_ys=[f64(2.0), f64(3.0)])
    d1, d2 = tn.gradients(x * x, [x, x])
    _, k, w = tn.while_loop(lambda i, k, w: i < 3, lambda i, k, w: (i + 1, k * 2, w + tn.cast(k, tn.float64) * x),
                            [tn.constant(0), tn.constant(1), f64(0.0)])
    out = tn.while_loop(lambda d: d["i"] < 3, lambda d: {"i": d["i"] + 1, "y": d["y"] * x},
                        [{"i": tn.constant(0), "y": f64(1.0)}])
    dy = out[0]["y"]
    xv = 0.5
    return ([sg, grad(sg, x), gy, d1, d2, grad(x, x), k, w, grad(w, x), dy, grad(dy, x)], {x: xv},
            [xv ** 4 + xv ** 3, xv ** 3 + 3 * xv ** 2, 2 * 2 * xv + 3, 2 * xv, 2 * xv, 1.0, 8, 7 * xv, 7.0, xv ** 3,
             3 * xv ** 2])


@case
def loop_and_cond_outputs_that_are_outside_tensors() -> Case:
    x, n, p, e = ph(name="x"), ph(name="n", dtype=tn.int32), ph(name="p", dtype=tn.bool), ph([None], name="e")
    i, done = tn.while_loop(lambda i, d: tn.logical_not(d), lambda i, d: (i + 1, i + 1 >= 3),
                            [tn.constant(0), tn.constant(False)])  # a bool loop variable
    _, v = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, x * 2.0), [tn.constant(0), f64(0.0)])
    r = tn.cond(p, lambda: x, lambda: x)
    (never,) = tn.while_loop(lambda i: tn.logical_and(p, i < 4), lambda i: i + 1, [tn.constant(0)])

    def body(i: tn.Tensor, w: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        return i + 1, tn.cond(i < 1, lambda: x, lambda: w * x)  # a branch that returns the invariant

    _, w = tn.while_loop(lambda i, w: i < 3, body, [tn.constant(0), f64(0.0)])
    _, z = tn.while_loop(lambda i, z: i < 3, lambda i, z: (i + 1, z * 2.0), [tn.constant(0), e])
    return ([i, done, v, grad(v, x), r, grad(r, x), never, w, grad(w, x), z], {x: 3.0, n: 2, p: False, e: np.zeros(0)},
            [3, True, 6.0, 2.0, 3.0, 1.0, 0, 27.0, 27.0, np.zeros(0)])


@case
def shape_ops_with_minus_one_sizes_axes_and_gradients() -> Case:
    x, t = ph([3, 4], name="x"), ph([None, None], name="t")
    M = np.arange(12.0).reshape(3, 4)
    g = tn.gather(x, tn.constant([[0, 3], [3, 3]]), axis=1)
    a, b = tn.split(x, 2, axis=1)
    loss = tn.reduce_sum(g) + tn.reduce_sum(a * 2.0) + tn.reduce_sum(b * 3.0) + tn.reduce_sum(tn.tile(x[:, :2], [2, 3]))
    tr = tn.transpose(tn.reshape(x, [3, 2, 2]), [2, 0, 1])
    dg = np.zeros((3, 4))
    dg[:, 0], dg[:, 3] = 1 + 2 + 6, 3 + 3
    dg[:, 1], dg[:, 2] = 2 + 6, 3
    return ([tn.slice(x, [1, 1], [-1, 2]), tn.slice(t, [0, 2], [2, -1]),
             tn.cumsum(x, axis=1, exclusive=True, reverse=True), tn.cumprod(x + 1.0, axis=-1, exclusive=True), g,
             grad(loss, x), tr, tn.one_hot(tn.constant([[0, 2], [1, -1]]), 3, axis=1),
             tn.squeeze(tn.expand_dims(x, -2), -2), tn.where(x > 5.0, x, 0.0),
             tn.clip_by_value(tn.constant([-3, 0, 5]), -1, 2)],
            {x: M, t: M},
            [M[1:, 1:3], M[0:2, 2:], np.flip(np.cumsum(np.flip(M, 1), 1), 1) - M, np.cumprod(M + 1, 1) / (M + 1),
             np.take(M, [[0, 3], [3, 3]], axis=1), dg, M.reshape(3, 2, 2).transpose(2, 0, 1),
             [[[1, 0], [0, 0], [0, 1]], [[0, 0], [1, 0], [0, 0]]], M, np.where(M > 5, M, 0), [-1, 0, 2]])


_close = partial(close, rtol=1e-6)


_REFERENCE: dict[str, list[Any]] = {}


@pytest.mark.parametrize("name,route", case_routes(CASES))
def test_a_closed_form_case_on_every_route(name: str, route: str) -> None:
    got, want = run_case(CASES, name, route)
    _close(got, want, f"{name} on {route}, against its closed form")
    if name not in _REFERENCE:
        _REFERENCE[name] = run_case(CASES, name, "reference")[0]
    _close(got, _REFERENCE[name], f"{name} on {route}, against the reference interpreter")


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_tensorflows_run_time_errors_are_kernel_errors_on_every_route(route: str) -> None:
    """A write-once slot written twice by a loop, an unwritten slot read, a negative integer power,
    an index past a fed length, an exclusive ``case`` with two true predicates: each is an error in
    TensorFlow when it runs, and a ``KernelError`` on every route here (never a value)."""
    g = tn.Graph()
    with g.as_default():
        x, i = ph(name="x"), ph(name="i", dtype=tn.int32)
        a, b, y = ph(name="a", dtype=tn.int32), ph(name="b", dtype=tn.int32), ph([None], name="y")
        twice = tn.while_loop(lambda j, t: j < 2, lambda j, t: (j + 1, t.write(0, x)),
                              [tn.constant(0), tn.TensorArray(tn.float64, size=2)])[1].read(0)
        unwritten = tn.TensorArray(tn.float64, size=2).write(0, x).read(i)
        both = tn.case(pred_fn_pairs=[(i > 0, lambda: tn.constant(1)), (i > 1, lambda: tn.constant(2))],
                       default=lambda: tn.constant(0), exclusive=True)
        cases = [(twice, {x: 1.0}, "already written"), (unwritten, {x: 1.0, i: 1}, "never written"),
                 (tn.pow(a, b), {a: 2, b: -1}, "integers to negative integer powers"),
                 (y[5], {y: np.arange(3.0)}, "out of range"), (both, {i: 5}, "more than one predicate is true")]
    for fetch, feeds, words in cases:
        with pytest.raises(tn.KernelError, match=words):
            run_on(route, g, fetch, feeds)


# ---- the bugs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_getitem_takes_an_ellipsis_and_new_axes_as_numpy(route: str) -> None:
    """``x[..., 0]`` and ``x[:, None]`` (TensorFlow's ``StridedSlice`` with its ellipsis and new-axis
    bits, common in its tests) were a GraphBuildError ("indexing with ... or None is not
    supported"), though the importer already built them; both now share one construction."""
    M = np.arange(24.0).reshape(2, 3, 4)
    keys = [np.s_[..., 0], np.s_[:, None, 1:], np.s_[None, ..., 1], np.s_[..., None], np.s_[1, ..., None, ::-2],
            np.s_[None], np.s_[...]]
    g = tn.Graph()
    with g.as_default():
        x = ph([2, 3, 4], name="x")
        outs = [x[k] for k in keys]
        d = grad(tn.reduce_sum(x[:, None, 1:] * 2.0), x)
        assert [o.shape for o in outs] == [M[k].shape for k in keys]
        with pytest.raises(tn.ShapeError, match=r"an ellipsis \(...\) needs the rank"):
            ph(None, name="u")[..., 0]
        with pytest.raises(tn.GraphBuildError, match="only one ellipsis"):
            x[..., 0, ...]
    got = run_on(route, g, [*outs, d], {x: M})
    _close(got, [*[M[k] for k in keys], np.where(np.arange(3)[None, :, None] >= 1, 2.0, 0.0) * np.ones((2, 3, 4))],
           f"getitem on {route}")


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_xor_of_bool_tensors_is_logical_xor(route: str) -> None:
    """``p ^ q`` on bool tensors (TensorFlow's ``logical_xor``) was Python's ``TypeError``
    ("unsupported operand type(s) for ^"): Tensor had no ``__xor__``."""
    g = tn.Graph()
    with g.as_default():
        p, q = tn.constant([True, True, False, False]), ph([4], name="q", dtype=tn.bool)
        outs = [p ^ q, True ^ q, tn.logical_xor(q, False)]
        with pytest.raises(tn.DTypeError, match="expected bool operands"):
            tn.constant(1.0) ^ tn.constant(2.0)
    got = run_on(route, g, outs, {q: np.array([True, False, True, False])})
    _close(got, [[0, 1, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0]], f"xor on {route}")


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_list_that_holds_tensors_is_packed_where_a_tensor_is_due(route: str) -> None:
    """``tf.fill([n, 2], v)``, ``tf.gather(x, [i, j])`` and ``tf.reduce_sum([a, b])`` (TensorFlow's
    autopacking) were a GraphBuildError ("cannot convert [...] to a tensor"): a list holding a tensor
    went to numpy. It is now the ``stack`` of its entries, its Python numbers in the tensors' dtype."""
    g = tn.Graph()
    with g.as_default():
        n, i = ph(name="n", dtype=tn.int32), ph(name="i", dtype=tn.int32)
        a, b = ph(name="a"), ph(name="b")
        s = tn.reduce_sum([b * b, 1.0])
        outs = [tn.fill([n, 2], 1.5), tn.gather(f64([1.0, 2.0, 3.0]), [i, n]), tn.reduce_sum([a, b]), s, grad(s, b),
                tn.constant([1, 2]) + [n, i], [[n], [i]] * tn.constant([[2]])]
        with pytest.raises(tn.GraphBuildError, match="not a whole number"):
            tn.identity([n, 1.5])
    got = run_on(route, g, outs, {n: 2, i: 0, a: 1.0, b: 3.0})
    _close(got, [np.full((2, 2), 1.5), [1.0, 3.0], 4.0, 10.0, 6.0, [3, 2], [[4], [0]]], f"autopacking on {route}")


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_the_mean_of_integers_rounds_toward_zero_as_tensorflows(route: str) -> None:
    """``tn.reduce_mean`` of an integer tensor was a DTypeError ("expected a floating dtype") where
    TensorFlow gives a value: the sum divided by the count rounding toward zero, and 0 over no
    elements (its reducer's identity for integers)."""
    g = tn.Graph()
    with g.as_default():
        v, e = ph([None, 2], name="v", dtype=tn.int32), ph([None], name="e", dtype=tn.int64)
        outs = [tn.reduce_mean(v), tn.reduce_mean(v, 0), tn.reduce_mean(v, 1, keepdims=True), tn.reduce_mean(e)]
    got = run_on(route, g, outs, {v: np.array([[-7, 2], [3, 3]], np.int32), e: np.zeros(0, np.int64)})
    assert [np.asarray(a).dtype for a in got] == [np.int32, np.int32, np.int32, np.int64]
    _close(got, [0, [-2, 2], [[-2], [3]], 0], f"integer mean on {route}")


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_stop_gradients_are_constants_for_one_gradients_call(route: str) -> None:
    """``tn.gradients`` had no ``stop_gradients`` (TensorFlow's argument; Python's ``TypeError`` for an
    unexpected keyword). A stopped tensor passes no gradient on, in a loop or a cond as anywhere,
    and still gets its own where it is one of ``xs``; the same graph's other gradients are unchanged."""
    g = tn.Graph()
    with g.as_default():
        a, p = ph(name="a"), ph(name="p", dtype=tn.bool)
        b, h = 2.0 * a, a * a
        _, y = tn.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, y * h), [tn.constant(0), a])  # a h^2
        r = tn.cond(p, lambda: h * a, lambda: a)
        outs = [*tn.gradients(a + b, [a, b], stop_gradients=[a, b]), *tn.gradients(a + b, [a, b]),
                *tn.gradients(y, [a, h], stop_gradients=h), grad(y, a), grad(r, a, stop_gradients=[h])]
        assert tn.gradients(h, [a], stop_gradients=[h]) == [None]
        with pytest.raises(tn.GradientError, match="stop_gradients must be tensors"):
            tn.gradients(y, [a], stop_gradients=[1.0])
    got = run_on(route, g, outs, {a: 3.0, p: True})
    _close(got, [1.0, 1.0, 3.0, 1.0, 81.0, 54.0, 81.0 + 4 * 81.0, 9.0], f"stop_gradients on {route}")


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_tensor_array_gather_and_scatter_as_tensorflows(route: str) -> None:
    """``ta.gather(indices)`` and ``ta.scatter(indices, value)`` (TensorFlow's, which its TensorArray
    tests use throughout) were Python's ``AttributeError``. They are reads and writes, slot by slot:
    gradients flow through them, and a slot unwritten, written twice or a value of another length
    is a KernelError as in TensorFlow."""
    g = tn.Graph()
    with g.as_default():
        x, v, i = ph([3], name="x"), ph(None, name="v"), ph([2], name="i", dtype=tn.int32)
        ta = tn.TensorArray(tn.float64, size=4).scatter([3, 0, 2], x * x)  # slots 4, _, 9, 1 at x = 1, 2, 3
        got_ = ta.gather(i)
        lw = tn.while_loop(lambda k, t: k < 3, lambda k, t: (k + 1, t.write(k, tn.cast(k, tn.float64) * x[k])),
                           [tn.constant(0), tn.TensorArray(tn.float64, size=3)])[1]
        outs = [got_, grad(tn.reduce_sum(got_ * f64([1.0, 2.0])), x), lw.gather([2, 0])]
        long = tn.TensorArray(tn.float64, size=4).scatter([0, 1], v).stack()
        twice = tn.TensorArray(tn.float64, size=4).scatter([1, 1], x[:2]).read(1)
        with pytest.raises(tn.ShapeError, match="2 indices for a value of shape"):
            tn.TensorArray(tn.float64, size=4).scatter([0, 1], x)
        with pytest.raises(tn.GraphBuildError, match="length is known while building"):
            ta.gather(ph([None], name="u", dtype=tn.int32))
    feeds = {x: np.array([1.0, 2.0, 3.0]), i: np.array([2, 0], np.int32)}
    _close(run_on(route, g, outs, feeds), [[9.0, 4.0], [0.0, 8.0, 6.0], [6.0, 0.0]], f"gather on {route}")
    for fetch, fed, words in [(got_, {**feeds, i: np.array([1, 0], np.int32)}, "never written"),
                              (long, {v: np.ones(3)}, "not the number of indices"), (twice, feeds, "already written")]:
        with pytest.raises(tn.KernelError, match=words):
            run_on(route, g, fetch, fed)
