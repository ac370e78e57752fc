"""A third set of closed-form cases from other frameworks' own control-flow suites, on every route.

Written here from the behaviours those suites check, not copied, and not repeating
``tests/test_closed_forms.py``, ``tests/test_tf_suite_cases.py`` or ``tests/test_tf_suite_cases2.py``:
TensorFlow's ``control_flow_ops_py_test`` / ``while_v2_test`` / ``cond_v2_test`` /
``functional_ops_test`` / ``tensor_array_ops_test``, JAX's ``lax_control_flow_test`` and PyTorch's
``torch._higher_order_ops`` cond and while_loop tests. Each family names the suite test it comes from.

Each family is one graph of several small programs, run on the routes ``case_routes`` of
``tests/route_table.py`` gives it (the reference interpreter, the small-step system, the fast
backend, and in turn one of the partitioned routes: the fast backend through the partitioned
executor on one device, and the partitioned reference and fast executors over two CPU devices with
every node placed round robin; all of them under ``TURNOUT_LONG=1``). A route gives the closed form (numpy), and where a
family takes gradients, ``jax.grad`` of the same program written with ``lax`` gives the wanted
gradient. The bug tests at the end each name what was wrong before its fix.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
from case_table import Case, Cases, close, f64, grad, ph, run_case
from route_table import ROUTES, case_routes, in_jax, run_on, run_strictly

import turnout as tn

jax = pytest.importorskip("jax")
lax = jax.lax
jnp = jax.numpy

CASES = Cases()
case = CASES.case





_ORACLE: dict[Any, Any] = {}


def jx(fn: Callable[..., Any], *args: Any, d: tuple[Any, ...] = ()) -> Any:
    """``fn`` at ``args`` in JAX with 64-bit types, as numpy, after one ``jax.grad`` per entry of
    ``d`` (its ``argnums``, innermost first). Remembered by ``fn``'s code and the arguments: each
    route builds the case again, and the oracle need not be traced again with it."""
    key = (fn.__code__, d, tuple(np.asarray(a).tobytes() for a in args))
    if key not in _ORACLE:
        f = fn
        for argnums in d:
            f = jax.grad(f, argnums=argnums)
        _ORACLE[key] = in_jax(f, *args)
    return _ORACLE[key]


@case
def nested_loops_writing_tensor_arrays_of_growing_elements() -> Case:
    """tensor_array_ops_test's writes of a TensorArray in nested while loops with their gradient,
    and control_flow_ops_py_test's loop variable that grows under a shape invariant: an inner loop
    grows ``v = [x, x^2, .., x^(i+1)]`` and the outer loop writes ``sum(v * v)`` into its array and
    ``v`` itself into a dynamic one, whose elements are vectors of a length only the loop knows."""
    x, w = ph(name="x"), ph([3], name="w")

    def grow(j: tn.Tensor, v: tn.Tensor, p: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor, tn.Tensor]:
        return j + 1, tn.concat([v, tn.reshape(p * x, [1])], 0), p * x

    def outer(i: tn.Tensor, ta: tn.TensorArray, tb: tn.TensorArray) -> tuple[Any, ...]:
        _, v, _ = tn.while_loop(lambda j, v, p: j < i, grow, [tn.constant(0), tn.reshape(x, [1]), x],
                                shape_invariants=[None, [None], None])
        return i + 1, ta.write(i, tn.reduce_sum(v * v)), tb.write(i, v[:1] * w[i])

    _, ta, tb = tn.while_loop(lambda i, ta, tb: i < 3, outer,
                              [tn.constant(0), tn.TensorArray(tn.float64, size=3),
                               tn.TensorArray(tn.float64, size=0, dynamic_size=True)])
    s, b = ta.stack(), tb.stack()  # s = [x^2, x^2 + x^4, x^2 + x^4 + x^6], b = [[x w0], [x w1], [x w2]]
    xv, wv = 1.5, np.array([1.0, -2.0, 0.5])
    want = [xv ** 2, xv ** 2 + xv ** 4, xv ** 2 + xv ** 4 + xv ** 6]
    return ([s, grad(tn.reduce_sum(s), x), b, *tn.gradients(tn.reduce_sum(b * b), [x, w])], {x: xv, w: wv},
            [want, 6 * xv + 8 * xv ** 3 + 6 * xv ** 5, (xv * wv)[:, None], 2 * xv * np.sum(wv * wv), 2 * xv * xv * wv])


@case
def nested_loop_second_derivative_under_maximum_iterations() -> Case:
    """control_flow_ops_py_test's nested while loops whose inner ``maximum_iterations`` comes from the
    outer context (testNestedWhileLoopWithMaxItersFromOuterContext), here differentiated twice: the
    inner loop runs 1, 2, then 3 times, and ``y = x^6``."""
    x = ph(name="x")

    def outer(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        _, y2 = tn.while_loop(lambda j, w: j < 100, lambda j, w: (j + 1, w * x), [tn.constant(0), y],
                              maximum_iterations=i + 1)
        return i + 1, y2

    _, y = tn.while_loop(lambda i, y: i < 100, outer, [tn.constant(0), f64(1.0)], maximum_iterations=3)
    dy = grad(y, x)
    xv = 1.25
    return [y, dy, grad(dy, x)], {x: xv}, [xv ** 6, 6 * xv ** 5, 30 * xv ** 4]


@case
def gradient_of_a_loop_cut_short_by_a_fed_maximum_iterations() -> Case:
    """while_v2_test's gradient of a loop that ``maximum_iterations`` (fed) stops before its own
    predicate would (testMaximumIterationsGradient-like), against ``jax.grad`` of ``fori_loop``."""
    x, m = ph(name="x"), ph(name="m", dtype=tn.int32)
    _, z = tn.while_loop(lambda i, z: z < 1e9, lambda i, z: (i + 1, z * x + 1.0), [tn.constant(0), x],
                         maximum_iterations=m)  # m = 2: (x^2 + 1) x + 1

    def jz(xv: Any) -> Any:
        return lax.fori_loop(0, 2, lambda i, z: z * xv + 1.0, xv)

    xv = 1.25
    return [z, grad(z, x)], {x: xv, m: 2}, [float(jx(jz, xv)), jx(jz, xv, d=(0,))]


@case
def conds_in_loops_differentiated_by_captured_values() -> Case:
    """cond_v2_test's and control_flow_ops_py_test's gradients of a cond inside a while loop with
    respect to tensors the branches capture from outside the loop (testCondInWhileGrad-like), the
    predicate reading a captured value too; PyTorch's cond tests differentiate the same shape."""
    w, c = ph([3], name="w"), ph(name="c")

    def body(i: tn.Tensor, v: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        return i + 1, tn.cond(tn.reduce_sum(v) < c, lambda: v * w, lambda: v + w * c)

    _, v = tn.while_loop(lambda i, v: i < 4, body, [tn.constant(0), f64([1.0, 1.0, 1.0])])
    loss = tn.reduce_sum(v * v)
    dw, dc = tn.gradients(loss, [w, c])

    def jloss(wv: Any, cv: Any) -> Any:
        def jbody(i: Any, v: Any) -> Any:
            return lax.cond(jnp.sum(v) < cv, lambda v: v * wv, lambda v: v + wv * cv, v)
        return jnp.sum(lax.fori_loop(0, 4, jbody, jnp.ones(3)) ** 2)

    wv, cv = np.array([2.0, 0.5, -1.0]), 2.5
    gw, gc = jx(jloss, wv, cv, d=((0, 1),))
    return [loss, dw, dc], {w: wv, c: cv}, [float(jx(jloss, wv, cv)), gw, gc]


@case
def reversed_scans_of_nested_structures() -> Case:
    """JAX's scan tests with ``reverse=True`` over pytrees and their gradients (testScanGrad with
    reverse), TensorFlow's scan_ops reverse cases: a tuple of elems holding a dict, a carry of a
    pair holding a dict."""
    xs, ys, c0 = ph([4], name="xs"), ph([4], name="ys"), ph(name="c0")

    def fn(c: Any, e: Any) -> Any:
        a, d = c
        x, inner = e
        return a * x + d["d"], {"d": d["d"] + inner["y"] * a}

    a, d = tn.scan(fn, (xs, {"y": ys}), initializer=(c0, {"d": f64(0.5)}), reverse=True)
    loss = tn.reduce_sum(a * a) + tn.reduce_sum(d["d"])
    gx, gy, gc = tn.gradients(loss, [xs, ys, c0])

    def jscan(xv: Any, yv: Any, cv: Any) -> Any:
        def step(c: Any, e: Any) -> Any:
            new = (c[0] * e[0] + c[1], c[1] + e[1] * c[0])
            return new, new
        return lax.scan(step, (cv, jnp.asarray(0.5)), (xv, yv), reverse=True)[1]

    def jloss(xv: Any, yv: Any, cv: Any) -> Any:
        a, d = jscan(xv, yv, cv)
        return jnp.sum(a * a) + jnp.sum(d)

    xv, yv, cv = np.array([1.0, -0.5, 2.0, 0.25]), np.array([0.5, 1.5, -1.0, 2.0]), 0.75
    ja, jd = jx(jscan, xv, yv, cv)
    return ([a, d["d"], gx, gy, gc], {xs: xv, ys: yv, c0: cv},
            [ja, jd, *jx(jloss, xv, yv, cv, d=((0, 1, 2),))])


@case
def foldr_of_structures_and_its_gradients() -> Case:
    """functional_ops_test's foldr cases (testFoldr_Simple, testFoldr_SingleInputMultiOutput,
    testFoldr_MultiInputSingleOutput, testFoldrGrad): a foldr with a pair as its carry, one over two
    elems, and its gradient, against a reversed ``lax.scan``."""
    xs, ys, w = ph([3], name="xs"), ph([3], name="ys"), ph(name="w")
    p, q = tn.foldr(lambda c, x: (c[0] * w + x, c[1] - x * c[0]), xs, initializer=(f64(1.0), f64(0.0)))
    dot = tn.foldr(lambda c, e: c * 2.0 + e[0] * e[1], (xs, ys), initializer=f64(0.0))
    gw, gx = tn.gradients(p + q, [w, xs])

    def jfold(xv: Any, wv: Any) -> Any:
        def step(c: Any, x: Any) -> Any:
            return (c[0] * wv + x, c[1] - x * c[0]), None
        return lax.scan(step, (jnp.asarray(1.0), jnp.asarray(0.0)), xv, reverse=True)[0]

    def jsum(wv: Any, xv: Any) -> Any:
        return sum(jfold(xv, wv))

    xv, yv, wv = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0]), 0.5
    jp, jq = jx(jfold, xv, wv)
    # dot: ((0 * 2 + 18) * 2 + 10) * 2 + 4
    return ([p, q, dot, gw, gx], {xs: xv, ys: yv, w: wv},
            [jp, jq, 96.0, *jx(jsum, wv, xv, d=((0, 1),))])


@case
def map_fn_over_nested_tuples_changing_dtypes() -> Case:
    """map_fn_test's multi-input, multi-output maps whose outputs change dtype
    (testMap_MultiInputSameStructureOutput, testMapOverNestedTuples-like) and its gradient
    (testMap_Grad): elems ``((int32, float64), bool)`` to ``(float64, (int64, bool))``."""
    a, b, p = ph([3], name="a", dtype=tn.int32), ph([3], name="b"), ph([3], name="p", dtype=tn.bool)

    def fn(e: Any) -> Any:
        (i, x), flag = e
        return x * tn.cast(i, tn.float64), (tn.cast(i, tn.int64) * 2, tn.logical_not(flag))

    y, (k, q) = tn.map_fn(fn, ((a, b), p), dtype=(tn.float64, (tn.int64, tn.bool)))
    av, bv, pv = np.array([1, -2, 3], np.int32), np.array([0.5, 1.5, 2.5]), np.array([True, False, True])
    return ([y, k, q, grad(tn.reduce_sum(y * y), b)], {a: av, b: bv, p: pv},
            [av * bv, 2 * av, ~pv, 2 * bv * av * av])


@case
def case_with_default_and_exclusive() -> Case:
    """control_flow_ops_py_test's ``tf.case`` tests (testCase_withDefault, testCase_withoutDefault,
    testCase_multiple_matches_exclusive, testCase_multiple_matches_non_exclusive) and their
    gradients with respect to what the branches capture; JAX's switch gradient (testSwitchGrad)."""
    x, k = ph(name="x"), ph(name="k", dtype=tn.int32)
    pairs = [(tn.equal(k, 1), lambda: x * 2.0), (tn.equal(k, 2), lambda: x * x), (tn.equal(k, 3), lambda: x * x * x)]
    exclusive = tn.case(pairs, default=lambda: -x, exclusive=True)
    first = tn.case([(k > 0, lambda: x + 1.0), (k > 1, lambda: x * 10.0)], default=lambda: x)  # first true wins
    nodefault = tn.case(pairs[:2] + [(k > 2, lambda: tn.sin(x))])
    idx = tn.case(k, [lambda: x, lambda: x * x], default=lambda: tn.exp(x))
    outs = [exclusive, first, nodefault, idx]
    xv = 1.5
    return ([*outs, *[grad(o, x) for o in outs]], {x: xv, k: 3},
            [xv ** 3, xv + 1.0, np.sin(xv), np.exp(xv), 3 * xv ** 2, 1.0, np.cos(xv), np.exp(xv)])


@case
def second_derivative_of_a_loop_in_a_loop() -> Case:
    """while_v2_test's second derivative of nested loops (testDoubleDerivative-like) and JAX's
    ``grad(grad(fori_loop))`` (testForiLoopGradOfGrad-like): ``v <- sin(v) x`` four times, two in
    each of two outer iterations, against ``jax.grad`` twice."""
    x = ph(name="x")

    def outer(i: tn.Tensor, v: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        return i + 1, tn.while_loop(lambda j, w: j < 2, lambda j, w: (j + 1, tn.sin(w) * x), [tn.constant(0), v])[1]

    _, v = tn.while_loop(lambda i, v: i < 2, outer, [tn.constant(0), x])
    d1 = grad(v, x)

    def jv(xv: Any) -> Any:
        return lax.fori_loop(0, 4, lambda i, w: jnp.sin(w) * xv, xv)

    xv = 0.7
    return [v, d1, grad(d1, x)], {x: xv}, [float(jx(jv, xv)), jx(jv, xv, d=(0,)), jx(jv, xv, d=(0, 0))]


@case
def mixed_second_derivative_of_coupled_loop_variables() -> Case:
    """while_v2_test's gradient of a gradient of a loop whose two variables feed each other, with
    respect to another input (testGradientOfGradient-like; JAX's ``grad(grad(f, 0), 1)``)."""
    x, y = ph(name="x"), ph(name="y")
    _, a, b = tn.while_loop(lambda i, a, b: i < 3, lambda i, a, b: (i + 1, a * b, a + y * b), [tn.constant(0), x, y])
    e = a + b
    dex, dey = tn.gradients(e, [x, y])

    def je(xv: Any, yv: Any) -> Any:
        a, b = lax.fori_loop(0, 3, lambda i, ab: (ab[0] * ab[1], ab[0] + yv * ab[1]), (xv, yv))
        return a + b

    xv, yv = 0.7, 1.1
    return ([e, dex, dey, grad(dex, y)], {x: xv, y: yv},
            [float(jx(je, xv, yv)), *jx(je, xv, yv, d=((0, 1),)), jx(je, xv, yv, d=(0, 1))])


@case
def loops_whose_trip_count_is_zero() -> Case:
    """control_flow_ops_py_test's and JAX's loops that never run their body (testWhileLoopZeroTrips-
    like, ``fori_loop(0, 0, ...)``): an inner loop that runs ``i`` times in an outer loop from 0, a
    zero-trip loop's gradient with respect to its initial value and to what its body captures, a
    TensorArray a zero-trip loop leaves empty, and a ``maximum_iterations`` of 0."""
    x, n = ph(name="x"), ph(name="n", dtype=tn.int32)

    def outer(i: tn.Tensor, v: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        return i + 1, tn.while_loop(lambda j, w: j < i, lambda j, w: (j + 1, w * x), [tn.constant(0), v])[1]

    _, nest = tn.while_loop(lambda i, v: i < 3, outer, [tn.constant(0), x])  # x^(1 + 0 + 1 + 2)
    _, z = tn.while_loop(lambda i, z: i < n, lambda i, z: (i + 1, z * x * x), [tn.constant(0), x * 3.0])
    _, ta = tn.while_loop(lambda i, t: i < n, lambda i, t: (i + 1, t.write(i, x)),
                          [tn.constant(0), tn.TensorArray(tn.float64, size=0, dynamic_size=True, element_shape=[])])
    _, m = tn.while_loop(lambda i, m: i < 10, lambda i, m: (i + 1, m * x), [tn.constant(0), x],
                         maximum_iterations=tn.constant(0))
    xv = 1.5
    return ([nest, grad(nest, x), z, grad(z, x), ta.size(), ta.stack(), m, grad(m, x)], {x: xv, n: 0},
            [xv ** 4, 4 * xv ** 3, 3 * xv, 3.0, 0, np.zeros(0), xv, 1.0])


@case
def integer_loop_variables_beside_float_ones() -> Case:
    """JAX's loops of tuple states mixing integer and float leaves (testForiLoopTupleState,
    testWhileLoopOfTupleOfIntsAndFloats-like) and TensorFlow's int64 and bool loop variables next to
    float32 ones: the dtypes come out as they went in, and the float leaves' gradients flow past the
    integer ones."""
    x32, x64 = ph(name="x32", dtype=tn.float32), ph(name="x64")

    def body(i: tn.Tensor, k: tn.Tensor, flag: tn.Tensor, a: tn.Tensor, b: tn.Tensor) -> tuple[tn.Tensor, ...]:
        return (i + 1, k * 3, tn.logical_not(flag), a * tn.cast(k, tn.float32),
                b + tn.cast(a, tn.float64) * tn.cast(i, tn.float64))

    i, k, flag, a, b = tn.while_loop(lambda i, k, f, a, b: i < 3, body,
                                     [tn.constant(0), tn.constant(1, tn.int64), tn.constant(True), x32, x64])
    da, db = tn.gradients(b, [x32, x64])
    assert (i.dtype, k.dtype, flag.dtype, a.dtype, b.dtype) == (tn.int32, tn.int64, tn.bool, tn.float32, tn.float64)
    # a: x32, x32, 3 x32, 27 x32; b = x64 + 0 * x32 + 1 * x32 + 2 * 3 x32
    return [i, k, flag, a, b, da, db], {x32: 2.0, x64: 0.5}, [3, 27, False, 54.0, 14.5, 7.0, 1.0]


@case
def parallel_iterations_leave_the_values_alone() -> Case:
    """control_flow_ops_py_test's loops with ``parallel_iterations`` greater than one
    (testWhile_ParallelIterations-like, testWhileWithTensorArrayParallel): the same loop at 1 and 32
    iterations in flight, writing a TensorArray and carrying a value, gives the same values and
    gradients."""
    x = ph(name="x")
    outs: list[Any] = []
    for par in (1, 32):
        _, y, t = tn.while_loop(lambda i, y, t: i < 5,
                                lambda i, y, t: (i + 1, y * x + 1.0, t.write(i, y * tn.cast(i, tn.float64))),
                                [tn.constant(0), f64(0.0), tn.TensorArray(tn.float64, size=5)],
                                parallel_iterations=par)
        s = t.stack()
        outs += [y, s, grad(y + tn.reduce_sum(s), x)]

    def jf(xv: Any) -> Any:
        ys = lax.scan(lambda y, i: (y * xv + 1.0, y * i), 0.0, jnp.arange(5.0))
        return ys

    def jl(xv: Any) -> Any:
        y, s = jf(xv)
        return y + jnp.sum(s)

    xv = 1.5
    y, s = jx(jf, xv)
    return outs, {x: xv}, [y, s, jx(jl, xv, d=(0,))] * 2


@case
def back_prop_false_in_each_builder() -> Case:
    """control_flow_ops_py_test's loops with ``back_prop=False`` (testWhileGrad_NoGradient-like),
    functional_ops_test's scan and map_fn with ``back_prop=False``: no gradient comes out of them,
    and one nested in a loop that does back-propagate leaves the outer loop's own gradient whole."""
    x, xs = ph(name="x"), ph([3], name="xs")
    s = tn.scan(lambda c, e: c * e, xs, initializer=x, back_prop=False)
    m = tn.map_fn(lambda e: e * x, xs, back_prop=False)
    f = tn.foldl(lambda c, e: c + e * x, xs, initializer=f64(0.0), back_prop=False)

    def body(i: tn.Tensor, v: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        k = tn.while_loop(lambda j, w: j < 2, lambda j, w: (j + 1, w * x), [tn.constant(0), v], back_prop=False)[1]
        return i + 1, v * x + k  # k = v x^2 counts as a constant: dv'/dv = x, dv'/dx = v

    _, v = tn.while_loop(lambda i, v: i < 2, body, [tn.constant(0), x])
    loss = tn.reduce_sum(s) + tn.reduce_sum(m) + f
    outs = [s, m, f, tn.gradients(loss, [x, xs], unconnected_gradients="zero"), v, grad(v, x)]
    xv, xsv = 2.0, np.array([1.0, 2.0, 3.0])
    v1 = xv ** 2 + xv ** 3  # v1 = v0 x + k with v0 = x; k = v0 x^2 counts as a constant
    dv1 = xv + xv
    dv2 = dv1 * xv + v1
    return ([s, m, f, *outs[3], v, outs[5]], {x: xv, xs: xsv},
            [[2.0, 4.0, 12.0], xsv * xv, 6 * xv, 0.0, np.zeros(3), v1 * xv + v1 * xv ** 2, dv2])


@case
def stop_gradient_inside_while_bodies() -> Case:
    """control_flow_ops_py_test's stop_gradient inside while bodies (testWhileGrad_StopGrad,
    testWhileGrad_StopGradInside): the stopped term counts as a constant at every iteration, and
    inside a cond in the loop only in the iterations that take its branch."""
    x = ph(name="x")
    _, a, b = tn.while_loop(lambda i, a, b: i < 3,
                            lambda i, a, b: (i + 1, tn.stop_gradient(a * x) + b, b * x),
                            [tn.constant(0), x, x])

    def body(i: tn.Tensor, v: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        return i + 1, tn.cond(i < 1, lambda: tn.stop_gradient(v * x), lambda: v * x)

    _, c = tn.while_loop(lambda i, v: i < 3, body, [tn.constant(0), x])

    def ja(xv: Any) -> Any:
        return lax.fori_loop(0, 3, lambda i, ab: (lax.stop_gradient(ab[0] * xv) + ab[1], ab[1] * xv), (xv, xv))[0]

    def jc(xv: Any) -> Any:
        return lax.fori_loop(0, 3, lambda i, v: lax.cond(i < 1, lambda v: lax.stop_gradient(v * xv),
                                                         lambda v: v * xv, v), xv)

    xv = 1.5
    return ([a, grad(a, x), c, grad(c, x)], {x: xv},
            [float(jx(ja, xv)), jx(ja, xv, d=(0,)), float(jx(jc, xv)), jx(jc, xv, d=(0,))])


@case
def stop_gradient_inside_a_scan_step() -> Case:
    """JAX's ``lax.stop_gradient`` in a scan's step (testScanGrad with a stopped carry): the stopped
    carry is a constant in each step, the same carry unstopped is not."""
    x, xs = ph(name="x"), ph([3], name="xs")
    s = tn.reduce_sum(tn.scan(lambda c, e: tn.stop_gradient(c) * e + c * x, xs, initializer=f64(1.0)))

    def js(xv: Any, xsv: Any) -> Any:
        return jnp.sum(lax.scan(lambda c, e: (lax.stop_gradient(c) * e + c * xv,) * 2, jnp.asarray(1.0), xsv)[1])

    xv, xsv = 1.5, np.array([1.0, -1.0, 2.0])
    return [s, *tn.gradients(s, [x, xs])], {x: xv, xs: xsv}, [float(jx(js, xv, xsv)), *jx(js, xv, xsv, d=((0, 1),))]


@case
def control_dependencies_on_and_in_loops() -> Case:
    """control_flow_ops_py_test's loops with control dependencies (testWhileWithControl_1 to _5,
    testCondWhile_1-like): a predicate under a control dependency on an outside tensor, a body whose
    results wait on a tensor of the iteration, a value that waits on a loop's output, and a group
    of loop outputs run as a target before a fetch that depends on it."""
    x = ph(name="x")
    v = tn.Variable(0.0, dtype=tn.float64, name="v")
    outside = x * 2.0

    def pred(i: tn.Tensor, y: tn.Tensor) -> tn.Tensor:
        with tn.control_dependencies([outside]):
            return i < 3

    def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        t = y + outside
        with tn.control_dependencies([t]):
            return i + 1, tn.identity(t * 0.5)

    i, y = tn.while_loop(pred, body, [tn.constant(0), x])
    with tn.control_dependencies([y]):
        after = tn.identity(x + 1.0)
    with tn.control_dependencies([i, y]):
        assigned = v.assign(y * 10.0)
    with tn.control_dependencies([tn.group(assigned)]):
        read = v.read() + 0.0
    xv = 2.0
    yv = xv
    for _ in range(3):
        yv = (yv + 2 * xv) * 0.5
    return [i, y, grad(y, x), after, read], {x: xv}, [3, yv, 1 / 8 + 2 * (1 / 2 + 1 / 4 + 1 / 8), xv + 1.0, 10 * yv]


@case
def variables_assigned_in_loop_bodies() -> Case:
    """control_flow_ops_py_test's loops that update Variables (testWhileUpdateVariable_1 to _5,
    testWhileAssignVariable-like): an assign of a value computed from the counter, ordered before
    the next read by a control dependency, an ``assign_add`` inside a cond inside the loop, and a
    Variable read in the predicate that the body grows."""
    v = tn.Variable(1.0, dtype=tn.float64, name="v")
    acc = tn.Variable(0.0, dtype=tn.float64, name="acc")

    def body(i: tn.Tensor, s: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
        a = v.assign(v.read() * 2.0 + tn.cast(i, tn.float64))
        with tn.control_dependencies([a]):
            r = v.read()
        b = tn.cond(tn.equal(tn.mod(i, 2), 0), lambda: acc.assign_add(r), lambda: acc.read())
        with tn.control_dependencies([b]):
            return i + 1, s + r

    i, s = tn.while_loop(lambda i, s: i < 4, body, [tn.constant(0), f64(0.0)], parallel_iterations=1)
    with tn.control_dependencies([i, s]):
        vs, accs = v.read(), acc.read()

    u = tn.Variable(1.0, dtype=tn.float64, name="u")

    def grow(k: tn.Tensor) -> tn.Tensor:
        with tn.control_dependencies([u.assign(u.read() * 3.0)]):
            return k + 1

    (k,) = tn.while_loop(lambda k: u.read() < 20.0, grow, [tn.constant(0)], parallel_iterations=1)
    vals, vv = [], 1.0
    for it in range(4):
        vv = vv * 2.0 + it
        vals.append(vv)
    # v: 2, 5, 12, 27; acc adds the even iterations' values, 2 + 12; u: 1, 3, 9, 27
    return [i, s, vs, accs, k], {}, [4, sum(vals), vals[-1], vals[0] + vals[2], 3]


@case
def tensor_arrays_passed_between_loops() -> Case:
    """tensor_array_ops_test's arrays written by one while loop and read by another, in reverse, with
    the gradient through both (testTensorArrayGradientWriteReadInLoops-like, testWhileLoopWritePack-
    Gradients), and an unstacked array read backwards into a new one."""
    x = ph([4], name="xs")
    _, t = tn.while_loop(lambda i, t: i < 4, lambda i, t: (i + 1, t.write(i, x[i] * x[i])),
                         [tn.constant(0), tn.TensorArray(tn.float64, size=4)])
    _, s = tn.while_loop(lambda i, s: i < 4, lambda i, s: (i + 1, s * 0.5 + t.read(3 - i)), [tn.constant(0), f64(0.0)])
    src = tn.TensorArray(tn.float64, size=4).unstack(x)
    _, dst = tn.while_loop(lambda i, d: i < 4,
                           lambda i, d: (i + 1, d.write(i, src.read(3 - i) * tn.cast(i + 1, tn.float64))),
                           [tn.constant(0), tn.TensorArray(tn.float64, size=4)])
    r = dst.stack()

    def js(xv: Any) -> Any:
        t = xv * xv
        return lax.fori_loop(0, 4, lambda i, s: s * 0.5 + t[3 - i], 0.0)

    xv, k = np.array([1.0, 2.0, -1.0, 0.5]), np.arange(1.0, 5.0)
    return ([s, grad(s, x), r, grad(tn.reduce_sum(r * r), x)], {x: xv},
            [float(jx(js, xv)), jx(js, xv, d=(0,)), xv[::-1] * k, (2 * xv[::-1] * k * k)[::-1]])


@case
def aliased_loop_variables_and_a_bool_predicate() -> Case:
    """JAX's while loops whose body returns one value for two carries and swaps carries
    (testWhileLoopTupleSwap-like), and TensorFlow's loop whose predicate is a bool loop variable the
    body computes (control_flow_ops_py_test's testWhileCondBool-like), with their gradients."""
    x = ph(name="x")

    def body(i: tn.Tensor, a: tn.Tensor, b: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor, tn.Tensor]:
        c = a * x
        return i + 1, c, c

    _, a, b = tn.while_loop(lambda i, a, b: i < 3, body, [tn.constant(0), x, x])  # x^4 twice
    _, e, f = tn.while_loop(lambda i, e, f: i < 2, lambda i, e, f: (i + 1, f, e * x),
                            [tn.constant(0), x, f64(1.0)])  # (x, 1) -> (1, x^2) -> (x^2, x)
    k, go, y = tn.while_loop(lambda i, go, y: go, lambda i, go, y: (i + 1, y * x < 50.0, y * x),
                             [tn.constant(0), tn.constant(True), f64(1.0)])  # 3, 9, 27, 81: four bodies
    xv = 3.0
    return ([a, b, grad(a + 2.0 * b, x), e, f, grad(e, x), k, go, y, grad(y, x)], {x: xv},
            [xv ** 4, xv ** 4, 12 * xv ** 3, xv ** 2, xv, 2 * xv, 4, False, xv ** 4, 4 * xv ** 3])


_close = partial(close, rtol=1e-9)


@pytest.mark.parametrize("name,route", case_routes(CASES))
def test_a_suite_case_on_every_route(name: str, route: str) -> None:
    got, want = run_case(CASES, name, route)
    _close(got, want, f"{name} on {route}")



@pytest.mark.parametrize("route", sorted(ROUTES))
def test_control_values_of_unknown_shape_fed_as_vectors_are_kernel_errors(route: str) -> None:
    """TensorFlow's run-time checks that a cond's or a loop's predicate, a case's index and a loop's
    ``maximum_iterations`` are scalars (control_flow_ops_py_test's testCondPredNonScalar-like,
    JAX's testCondTypeErrors / testSwitchErrors / testWhileTypeErrors for traced shapes): fed a
    vector through a placeholder of unknown shape, each is a KernelError on every route."""
    g = tn.Graph()
    with g.as_default():
        p = ph(None, name="p", dtype=tn.bool)
        k, m, v = [ph(None, name=a, dtype=tn.int32) for a in "kmv"]
        cond = tn.cond(p, lambda: f64(1.0), lambda: f64(2.0))
        (loop,) = tn.while_loop(lambda i: i < 3, lambda i: i + 1, [v], shape_invariants=[tn.ANY_SHAPE])
        (bounded,) = tn.while_loop(lambda i: i < 10, lambda i: i + 1, [tn.constant(0)], maximum_iterations=m)
        case = tn.case(k, [lambda: f64(1.0), lambda: f64(2.0)])
        pairs = tn.case([(p, lambda: f64(1.0))], default=lambda: f64(2.0))
    two = np.array([1, 0], np.int32)
    for fetch, feeds in [(cond, {p: np.array([False, True])}), (cond, {p: np.zeros(0, bool)}), (loop, {v: two}),
                         (bounded, {m: two}), (case, {k: two}), (pairs, {p: np.array([True, False])})]:
        with pytest.raises(tn.KernelError, match="the predicate must be a scalar bool, got a value of shape"):
            run_on(route, g, fetch, feeds)
    got = run_on(route, g, [cond, loop, bounded, case, pairs],
                 {p: True, k: np.int32(1), m: np.int32(2), v: np.int32(1)})
    _close(got, [1.0, 3, 2, 2.0, 1.0], f"scalars on {route}")


TYPE_ERRORS: list[tuple[str, Callable[[], Any], type, str]] = [
    ("cond pred of shape [1]", lambda: tn.cond(ph([1], "p", tn.bool), lambda: f64(1.0), lambda: f64(2.0)),
     tn.ShapeError, r"cond: the predicate must be a scalar, got shape \(1,\)"),
    ("cond pred float", lambda: tn.cond(ph(name="p"), lambda: f64(1.0), lambda: f64(2.0)),
     tn.DTypeError, "cond: the predicate must be a bool tensor, got float64"),
    ("cond branch dtypes", lambda: tn.cond(tn.constant(True), lambda: tn.constant(1.0), lambda: f64(1.0)),
     tn.DTypeError, "output 0 is float32 in true_fn but float64 in false_fn"),
    ("cond branch structures", lambda: tn.cond(tn.constant(True), lambda: (f64(1.0), f64(1.0)), lambda: f64(1.0)),
     tn.GraphBuildError, "true_fn and false_fn outputs: structures differ"),
    ("while cond of int", lambda: tn.while_loop(lambda i: i, lambda i: i - 1, [tn.constant(3)]),
     tn.DTypeError, "cond must return a bool scalar"),
    ("while cond of a vector", lambda: tn.while_loop(lambda i: i < 3, lambda i: i + 1, [tn.constant([0, 1])]),
     tn.DTypeError, "cond must return a bool scalar"),
    ("while body dtype", lambda: tn.while_loop(lambda i: i < 3, lambda i: tn.cast(i, tn.float32), [tn.constant(0)]),
     tn.DTypeError, "loop variable 0 enters as int32 but the body returns float32"),
    ("while body shape", lambda: tn.while_loop(lambda i: tn.size(i) < 3, lambda i: tn.concat([i, i], 0),
                                               [tn.constant([1])]),
     tn.ShapeError, r"has shape \[1\] on entry but \[2\] after one iteration"),
    ("while body structure", lambda: tn.while_loop(lambda i, j: i < 3, lambda i, j: (i + 1,),
                                                   [tn.constant(0), tn.constant(0)]),
     tn.GraphBuildError, "body output and loop_vars: structures differ"),
    ("maximum_iterations float", lambda: tn.while_loop(lambda i: i < 3, lambda i: i + 1, [tn.constant(0)],
                                                       maximum_iterations=2.5),
     tn.DTypeError, "maximum_iterations must be an int32 or int64 scalar"),
    ("case index float", lambda: tn.case(tn.constant(1.0), [lambda: f64(1.0)]),
     tn.DTypeError, "branch_index must be an int32 scalar"),
    ("case branch dtypes", lambda: tn.case(tn.constant(1), [lambda: f64(1.0), lambda: tn.constant(1)]),
     tn.DTypeError, "output 0 is float64 in true_fn but int32 in false_fn"),
    ("map_fn over a scalar", lambda: tn.map_fn(lambda e: e, f64(1.0)),
     tn.GraphBuildError, "elems must have a leading dimension"),
    ("map_fn dtype", lambda: tn.map_fn(lambda e: e, f64([1.0]), dtype=tn.int32),
     tn.GraphBuildError, "map_fn: output 0 of fn is float64, expected int32"),
    ("scan carry structure", lambda: tn.scan(lambda c, e: (c, c), f64([1.0]), initializer=f64(0.0)),
     tn.GraphBuildError, "structures differ"),
    ("scan carry dtype", lambda: tn.scan(lambda c, e: tn.cast(c, tn.float32), f64([1.0]), initializer=f64(0.0)),
     tn.DTypeError, "scan: output 0 of fn is float32, but the accumulator is float64"),
]


@pytest.mark.parametrize("what,build,kind,words", TYPE_ERRORS, ids=[t[0] for t in TYPE_ERRORS])
def test_the_type_errors_the_suites_expect_are_turnout_errors(what: str, build: Callable[[], Any], kind: type,
                                                              words: str) -> None:
    """The build-time type errors of JAX's testCondTypeErrors / testWhileTypeErrors /
    testSwitchErrors / testScanTypeErrors and TensorFlow's shape-invariant and dtype checks
    (testWhileShapeInferenceBadShape-like, testCondMismatchedDtypes-like): each is the Turnout error
    of its kind, naming what is wrong, raised while the graph is built."""
    with tn.Graph().as_default(), pytest.raises(kind, match=words):
        build()

# ---- the bugs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_tensor_array_index_or_size_fed_as_a_vector_is_an_error_naming_it(route: str) -> None:
    """A TensorArray's size, or the index of a read or a write, from a placeholder of unknown shape
    fed a vector (tensor_array_ops_test's shape errors): the interpreters' message was numpy's "kernel
    failed: only 0-dimensional arrays can be converted to Python scalars", and the fast routes gave
    up lowering the op (a warning, then the interpreter). Every route now says which operand of
    which op must be a scalar (``shape_rules.SCALAR_OPERANDS``), as the build does when the shape
    is known then; a scalar fed to the same graph runs."""
    g = tn.Graph()
    with g.as_default():
        k, j, n = [ph(None, name=a, dtype=tn.int32) for a in "kjn"]
        ta = tn.TensorArray(tn.float64, size=3).write(0, f64(1.5)).write(1, f64(2.5))
        read, write = ta.read(k), ta.write(j, f64(3.5)).read(2)
        size = tn.TensorArray(tn.float64, size=n).size()
        with pytest.raises(tn.ShapeError, match=r"TensorArrayRead: the index must be a scalar, got shape \[1\]"):
            ta.read(tn.constant([0]))
        with pytest.raises(tn.ShapeError, match=r"TensorArrayNew: the size must be a scalar"):
            tn.TensorArray(tn.float64, size=tn.constant([3]))
        with pytest.raises(tn.DTypeError, match=r"TensorArrayWrite: the index must be an int32 scalar, got float3"):
            ta.write(tn.constant(0.0), f64(1.0))
        with pytest.raises(tn.GraphBuildError, match=r"TensorArray.read: index: .*1.5 is not a whole number"):
            ta.read(1.5)
    vec = np.array([0, 1], np.int32)
    for fetch, feeds, words in [(read, {k: vec}, r"TensorArrayRead: the index must be a scalar, got shape \[2\]"),
                                (write, {j: vec}, "TensorArrayWrite: the index must be a scalar"),
                                (size, {n: vec}, "TensorArrayNew: the size must be a scalar")]:
        with pytest.raises(tn.KernelError, match=words):
            run_strictly(route, g, fetch, feeds)
    _close(run_strictly(route, g, [read, write, size], {k: np.int32(1), j: np.int32(2), n: np.int32(4)}), [2.5, 3.5, 4],
           f"scalar indices on {route}")


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_the_first_failure_of_a_program_is_the_error_on_every_route(route: str) -> None:
    """A nested loop reads a TensorArray one slot past its end, and the gradient accumulates into that
    slot after it: the fast executor over two devices, whose devices run ahead of the host, raised
    the gradient's ``TensorArrayAccumulate`` error (its device came first in the table of error
    words), where every other route raises the forward read's. A TensorArray of a vector size then
    written had its write's error raised in place of its own. The lowest error code, the check traced
    first, is now the one raised (``fast.runner._lowest_first``)."""
    g = tn.Graph()
    with g.as_default():
        v, n = ph([2], name="v"), ph(None, name="n", dtype=tn.int32)
        t = tn.TensorArray(tn.float64, size=2).unstack(v)

        def outer(i: tn.Tensor, s: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            inner = tn.while_loop(lambda j, w: j < 2, lambda j, w: (j + 1, w * t.read(i + j)), [tn.constant(0), s])
            return i + 1, inner[1]

        _, s = tn.while_loop(lambda i, s: i < 2, outer, [tn.constant(0), f64(1.0)])
        dv = grad(s, v)
        written = tn.TensorArray(tn.float64, size=n).write(0, f64(1.0)).read(0)
    with pytest.raises(tn.KernelError, match=r'TensorArrayRead node "while/body/while/body/ta_read".*out of range'):
        run_on(route, g, dv, {v: np.ones(2)})
    with pytest.raises(tn.KernelError, match=r"TensorArrayNew: the size must be a scalar"):
        run_on(route, g, written, {n: np.array([2, 2], np.int32)})
