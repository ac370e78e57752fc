"""Closed-form control-flow cases of the kind TensorFlow's and JAX's own test suites pin, on every route.

Each case is a small program whose values are known in closed form (``want``; None where the case
checks agreement only, its values then the reference interpreter's): ``maximum_iterations`` on a
vector state, nested and fed and zero (TensorFlow's while-loop tests), gradients through conds in
loops, loop invariants, nested loops whose inner trip count is the outer counter, second
derivatives, ``grad_ys`` with ``stop_gradient``, ``scan`` with several accumulators in reverse,
``map_fn`` of tuples, folds without an initializer, ``case`` in its predicate form, a TensorArray
of dynamic size, a loop variable that grows under a shape invariant, int64 counters and a matrix
power (JAX's ``fori_loop`` tests). Written here from the behaviour those suites check, not copied.

Each case runs on the reference interpreter, the small-step system and the fast backend, and on one
of the partitioned routes in turn (``case_routes`` in ``tests/route_table.py``; every one of them
under ``TURNOUT_LONG=1``): the fast backend through the partitioned executor on one device,
and, over two devices with every node placed round robin (so loops and their gradients span both),
the partitioned reference and the fast partitioned executor. A route gives the closed form, and the
reference's values to float tolerance.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pytest
from case_table import Case, Cases, f64
from route_table import case_routes, run_on

import turnout as tn

pytest.importorskip("jax")

CASES = Cases()
case = CASES.case



@case
def max_iterations_on_a_vector_state() -> Case:
    s = tn.constant([1, 2, 3, 4, 5])
    i, r = tn.while_loop(lambda i, v: i < 10, lambda i, v: [i + 1, v + 1], [tn.constant(0), s],
                         maximum_iterations=3)
    return [r, i], {}, [np.array([4, 5, 6, 7, 8]), 3]


@case
def max_iterations_nested_from_the_outer_counter() -> Case:
    def outer(i: tn.Tensor, x: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        _, x2 = tn.while_loop(lambda j, y: j < 100, lambda j, y: (j + 1, y * 2.0), [tn.constant(0), x],
                              maximum_iterations=i + 1)
        return i + 1, x2

    i, x = tn.while_loop(lambda i, x: i < 100, outer, [tn.constant(0), tn.constant(1.0)], maximum_iterations=4)
    return [i, x], {}, [4, 2.0 ** 10]


@case
def max_iterations_gradient() -> Case:
    x = tn.placeholder(tn.float64, [], name="x")
    _, y = tn.while_loop(lambda i, y: i < 100, lambda i, y: (i + 1, y * x), [tn.constant(0), f64(1.0)],
                         maximum_iterations=5)
    (d,) = tn.gradients(y, [x])
    return [y, d], {x: 1.5}, [1.5 ** 5, 5 * 1.5 ** 4]


@case
def max_iterations_zero_and_fed() -> Case:
    n = tn.placeholder(tn.int32, [], name="n")
    i0, r0 = tn.while_loop(lambda i, v: i < 10, lambda i, v: [i + 1, v * 2.0], [tn.constant(0), tn.constant(3.0)],
                           maximum_iterations=0)
    i, r = tn.while_loop(lambda i, v: i < 10, lambda i, v: [i + 1, v * 2.0], [tn.constant(0), tn.constant(3.0)],
                         maximum_iterations=n)
    return [r0, i0, r, i], {n: 2}, [3.0, 0, 12.0, 2]


@case
def cond_in_a_loop_gradient() -> Case:
    x = tn.placeholder(tn.float64, [], name="x")

    def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        return i + 1, tn.cond(y > 10.0, lambda: y * 0.5, lambda: y * x)

    _, y = tn.while_loop(lambda i, y: i < 6, body, [tn.constant(0), f64(1.0)])
    (d,) = tn.gradients(y, [x])
    # x = 3: 1 -> 3 -> 9 -> 27 -> 13.5 -> 6.75 -> 20.25, so y = x^4 / 4 on this path
    return [y, d], {x: 3.0}, [20.25, 27.0]


@case
def loop_invariant_and_initial_value_gradients() -> Case:
    x = tn.placeholder(tn.float64, [], name="x")
    w = tn.placeholder(tn.float64, [], name="w")
    _, y = tn.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, tn.tanh(y * w) + x), [tn.constant(0), x])
    dx, dw = tn.gradients(y, [x, w])
    return [y, dx, dw], {x: 0.3, w: 0.7}, None


@case
def nested_loops_inner_trip_count_the_outer_counter() -> Case:
    x = tn.placeholder(tn.float64, [], name="x")

    def outer(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        _, y2 = tn.while_loop(lambda j, z: j < i, lambda j, z: (j + 1, z * x), [tn.constant(0), y])
        return i + 1, y2

    _, y = tn.while_loop(lambda i, y: i < 4, outer, [tn.constant(0), f64(1.0)])
    (d,) = tn.gradients(y, [x])
    return [y, d], {x: 1.1}, [1.1 ** 6, 6 * 1.1 ** 5]


@case
def second_derivative_of_a_loop() -> Case:
    x = tn.placeholder(tn.float64, [], name="x")
    _, y = tn.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), [tn.constant(0), f64(1.0)])
    (d,) = tn.gradients(y, [x])
    (dd,) = tn.gradients(d, [x])
    return [y, d, dd], {x: 2.0}, [8.0, 12.0, 12.0]


@case
def grad_ys_through_stop_gradient() -> Case:
    x = tn.placeholder(tn.float64, [2], name="x")
    _, y = tn.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, y * tn.stop_gradient(y) + x), [tn.constant(0), x])
    (d,) = tn.gradients(y, [x], grad_ys=tn.constant([1.0, 2.0], tn.float64))
    # y1 = x sg(x) + x, y2 = y1 sg(y1) + x: only the first factor and the added x carry a gradient,
    # dy1/dx = x + 1 and dy2/dx = y1 (x + 1) + 1
    xs = np.array([0.5, -1.0])
    y1 = xs * xs + xs
    return [y, d], {x: xs}, [y1 * y1 + xs, np.array([1.0, 2.0]) * (y1 * (xs + 1) + 1)]


@case
def scan_of_two_accumulators_in_reverse() -> Case:
    xs = tn.placeholder(tn.float64, [5], name="xs")
    a, b = tn.scan(lambda c, e: (c[0] + e, c[1] * e), xs, initializer=(f64(0.0), f64(1.0)), reverse=True)
    (d,) = tn.gradients(tn.reduce_sum(a) + tn.reduce_sum(b), [xs])
    v = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    sums, prods = np.cumsum(v[::-1])[::-1], np.cumprod(v[::-1])[::-1]
    # d sum(a) / d v_k = k + 1 (v_k is in sums[0..k]); d sum(b) / d v_k = sum over j <= k of prods[j] / v_k
    db = np.array([sum(prods[j] for j in range(k + 1)) / v[k] for k in range(5)])
    return [a, b, d], {xs: v}, [sums, prods, np.arange(1, 6) + db]


@case
def map_fn_of_a_tuple() -> Case:
    xs = tn.placeholder(tn.float64, [4, 2], name="xs")
    s, p = tn.map_fn(lambda v: (tn.reduce_sum(v), tn.reduce_sum(v) * v[0]), xs, dtype=(tn.float64, tn.float64))
    (d,) = tn.gradients(tn.reduce_sum(p), [xs])
    v = np.arange(8.0).reshape(4, 2)
    # p = (a + b) a: dp/da = 2a + b, dp/db = a
    return [s, p, d], {xs: v}, [v.sum(1), v.sum(1) * v[:, 0], np.stack([2 * v[:, 0] + v[:, 1], v[:, 0]], 1)]


@case
def folds_without_an_initializer() -> Case:
    xs = tn.constant([1.0, 2.0, 3.0, 4.0], tn.float64)
    return [tn.foldl(lambda a, x: a * x, xs), tn.foldr(lambda a, x: a - x, xs)], {}, [24.0, 4.0 - 3 - 2 - 1]


@case
def case_predicate_form_exclusive() -> Case:
    i = tn.placeholder(tn.int32, [], name="i")
    r = tn.case(pred_fn_pairs=[(tn.equal(i, 1), lambda: tn.constant(10)), (tn.equal(i, 2), lambda: tn.constant(20))],
                default=lambda: tn.constant(-1), exclusive=True)
    return [r], {i: 2}, [20]


@case
def tensor_array_of_dynamic_size() -> Case:
    n = tn.placeholder(tn.int32, [], name="n")
    ta = tn.TensorArray(tn.float32, size=0, dynamic_size=True)
    _, ta = tn.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, tn.cast(i, tn.float32) * 2.0)),
                          [tn.constant(0), ta])
    return [ta.stack()], {n: 4}, [np.array([0.0, 2.0, 4.0, 6.0], np.float32)]


@case
def a_loop_variable_grows_under_a_shape_invariant() -> Case:
    _, r = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tn.concat([v, v], 0)),
                         [tn.constant(0), tn.constant([1.0])], shape_invariants=[None, [None]])
    return [r], {}, [np.ones(8)]


@case
def int64_counter() -> Case:
    i = tn.while_loop(lambda i: i < tn.constant(5, tn.int64), lambda i: i + tn.constant(2, tn.int64),
                      [tn.constant(0, tn.int64)])
    return [i], {}, [6]


@case
def matrix_power_and_its_gradient() -> Case:
    a = tn.placeholder(tn.float64, [2, 2], name="a")
    _, m = tn.while_loop(lambda i, m: i < 3, lambda i, m: (i + 1, tn.matmul(m, a)),
                         [tn.constant(0), tn.constant(np.eye(2))])
    (d,) = tn.gradients(tn.reduce_sum(m), [a])
    A = np.array([[0.5, 1.0], [-0.5, 0.25]])
    one = np.ones((2, 2))
    # d sum(A^3) / dA = sum over k of (A^k)^T 1 (A^(2-k))^T
    grad = sum(np.linalg.matrix_power(A, k).T @ one @ np.linalg.matrix_power(A, 2 - k).T for k in range(3))
    return [m, d], {a: A}, [A @ A @ A, grad]


def _run(name: str, route: str) -> tuple[list[Any], Optional[list[Any]]]:
    g = tn.Graph()
    with g.as_default():
        fetches, feeds, want = CASES[name]()
    return list(run_on(route, g, fetches, feeds)), want


def _close(got: list[Any], want: list[Any], what: str) -> None:
    assert len(got) == len(want), what
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        if b is not None:
            np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-6, atol=1e-12,
                                       err_msg=f"{what}: fetch {k}")


_REFERENCE: dict[str, list[Any]] = {}


@pytest.mark.parametrize("name,route", case_routes(CASES))
def test_a_closed_form_case_on_every_route(name: str, route: str) -> None:
    got, want = _run(name, route)
    if want is not None:
        _close(got, want, f"{name} on {route}, against its closed form")
    if name not in _REFERENCE:
        _REFERENCE[name] = _run(name, "reference")[0]
    _close(got, _REFERENCE[name], f"{name} on {route}, against the reference interpreter")
