"""The builders (cond, case, while_loop, scan/map_fn/foldl, TensorArray) on both backends.

Every expectation is a closed form a person can check by hand (the plain-Python meaning in each
builder's docstring); firing-count tests check the exactly-once claim (T3) and trip counts, and the
scheduler tests check confluence (T1) on one nested program — those two inspect the reference
interpreter's traces and schedulers, so they run on it alone.
"""

from __future__ import annotations

import collections
import warnings
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.primitives import PRIMITIVES
from turnout.session import RunOptions

Pair = collections.namedtuple("Pair", ["a", "b"])


#: tests of reference-only machinery, or of graphs the fast backend rejects by design (UnsupportedError)
REFERENCE_ONLY = pytest.mark.parametrize("backend", ["reference"])


def run(backend: str, g: tn.Graph, fetches: Any, feed: dict[Any, Any] | None = None, **opts: Any) -> Any:
    return tn.Session(g, backend=backend).run(fetches, feed_dict=feed, **opts)


def ints(xs: Any) -> list[int]:
    return [int(x) for x in xs]


# ---- cond ------------------------------------------------------------------------------------------
def test_cond_takes_the_branch_the_predicate_selects(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = tn.cond(x > 0.0, lambda: x * 2.0, lambda: -x)
    assert y.shape == () and y.dtype == tn.float32
    assert float(run(backend, g, y, {x: 3.0})) == 6.0
    assert float(run(backend, g, y, {x: -3.0})) == 3.0


def test_cond_runs_only_the_taken_branch(backend: str) -> None:
    """The untaken branch divides by zero; it receives dead values, so its kernel never runs."""
    g = tn.Graph()
    with g.as_default():
        d = tn.placeholder(tn.int32, [], name="d")
        y = tn.cond(tn.equal(d, 0), lambda: tn.constant(-1), lambda: 100 // d)
    assert int(run(backend, g, y, {d: 0})) == -1
    assert int(run(backend, g, y, {d: 4})) == 25


@pytest.mark.parametrize("a,b,want", [(True, True, 1), (True, False, 2), (False, True, 3), (False, False, 4)])
def test_nested_cond(backend: str, a: bool, b: bool, want: int) -> None:
    g = tn.Graph()
    with g.as_default():
        pa = tn.placeholder(tn.bool, [], name="a")
        pb = tn.placeholder(tn.bool, [], name="b")
        one, two, three, four = (tn.constant(k) for k in (1, 2, 3, 4))
        y = tn.cond(pa, lambda: tn.cond(pb, lambda: one, lambda: two),
                    lambda: tn.cond(pb, lambda: three, lambda: four))
    assert int(run(backend, g, y, {pa: a, pb: b})) == want


def test_cond_multi_output_and_structures(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        x = tn.constant(5)
        tup = tn.cond(p, lambda: (x + 1, x * 2), lambda: (x - 1, x * 3))
        dct = tn.cond(p, lambda: {"s": x + 10, "t": [x, x + 1]}, lambda: {"s": x - 10, "t": [x * 0, x]})
        nt = tn.cond(p, lambda: Pair(x, x + x), lambda: Pair(a=x * x, b=x))
    assert isinstance(tup, tuple) and len(tup) == 2
    assert set(dct) == {"s", "t"} and isinstance(dct["t"], list)
    assert isinstance(nt, Pair)
    vt, vd, vn = run(backend, g, [tup, dct, nt], {p: True})
    assert ints(vt) == [6, 10] and int(vd["s"]) == 15 and ints(vd["t"]) == [5, 6] and ints(vn) == [5, 10]
    vt, vd, vn = run(backend, g, [tup, dct, nt], {p: False})
    assert ints(vt) == [4, 15] and int(vd["s"]) == -5 and ints(vd["t"]) == [0, 5] and ints(vn) == [25, 5]
    assert isinstance(vn, Pair)


def test_cond_branches_returning_outside_tensors(backend: str) -> None:
    """A branch that returns an outside tensor unchanged still routes it through a Switch."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        a, b = tn.constant(7.0), tn.constant(8.0)
        y = tn.cond(p, lambda: a, lambda: b)
    assert y.node.op == "Merge"
    assert all(t.node.op == "Switch" for t in y.node.inputs)
    assert float(run(backend, g, y, {p: True})) == 7.0
    assert float(run(backend, g, y, {p: False})) == 8.0


def test_cond_branch_with_only_constants_dies_with_its_branch(backend: str) -> None:
    """Ops without inputs in a branch hang on the branch pivot: the untaken branch's constant is dead."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        y = tn.cond(p, lambda: tn.constant(1.0), lambda: tn.constant(2.0))
        consts = [n for n in g.nodes if n.op == "Const" and n.context is not None]
        assert len(consts) == 2 and all(n.control_inputs for n in consts)
    assert float(run(backend, g, y, {p: True})) == 1.0
    assert float(run(backend, g, y, {p: False})) == 2.0


def test_control_dependencies_inside_branches_only_run_when_taken(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        v = tn.Variable(0, name="hits")

        def hit() -> tn.Tensor:
            with tn.control_dependencies([v.assign_add(1)]):
                return tn.constant(1)

        y = tn.cond(p, hit, lambda: tn.constant(0))
        read = v.read()
    sess = tn.Session(g, backend=backend)
    assert int(sess.run(y, {p: False})) == 0
    assert int(sess.run(read)) == 0  # the untaken branch's assign never ran
    assert int(sess.run(y, {p: True})) == 1
    assert int(sess.run(y, {p: True})) == 1
    assert int(sess.run(read)) == 2


@pytest.mark.parametrize("taken", [True, False])
def test_a_branch_depending_on_an_outer_op_by_control_is_dead_when_not_taken(backend: str, taken: bool) -> None:
    """A branch whose constant waits on an op outside the cond (``control_dependencies`` inside the
    branch function) hangs that constant on a node of the branch. It once hung it on the captured
    Switch itself, which fires whichever branch is taken: the untaken branch's constant was live and
    the cond's Merge received two live inputs (``MergeConflictError`` on every backend)."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        outer = tn.identity(tn.constant(3.0))

        def waits() -> tn.Tensor:
            with tn.control_dependencies([outer]):
                return tn.constant(1.0)

        y = tn.cond(p, waits, lambda: tn.constant(2.0))
    assert float(run(backend, g, y, {p: taken})) == (1.0 if taken else 2.0)


def test_the_gradient_of_such_a_branch_in_a_loop(backend: str) -> None:
    """The same shape in a loop body, differentiated: the gradient exports the branch's constant (the
    factor of ``h * 2``) through a Merge with a filler, which the live constant also conflicted with."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")

        def body(i: Any, h: Any) -> Any:
            before = tn.identity(h)

            def double() -> tn.Tensor:
                with tn.control_dependencies([before]):
                    return h * 2.0

            return i + 1, tn.cond(tn.equal(tn.mod(i, 2), 0), double, lambda: h + 1.0)

        _, h = tn.while_loop(lambda i, h: i < 3, body, [tn.constant(0), x])
        (gx,) = tn.gradients(h, [x])
    got = run(backend, g, [h, gx], {x: 3.0})
    assert float(got[0]) == 14.0 and float(got[1]) == 4.0  # ((3 * 2) + 1) * 2; d/dx = 2 * 2


def test_cond_build_errors() -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.constant(True)
        with pytest.raises(tn.DTypeError, match="bool"):
            tn.cond(tn.constant(1), lambda: tn.constant(1), lambda: tn.constant(2))
        with pytest.raises(tn.ShapeError, match="scalar"):
            tn.cond(tn.constant([True]), lambda: tn.constant(1), lambda: tn.constant(2))
        with pytest.raises(tn.GraphBuildError, match="structures differ"):
            tn.cond(p, lambda: (tn.constant(1), tn.constant(2)), lambda: tn.constant(1))
        with pytest.raises(tn.DTypeError, match="float32"):
            tn.cond(p, lambda: tn.constant(1.0), lambda: tn.constant(1))
        with pytest.raises(tn.GraphBuildError, match="callables"):
            tn.cond(p, tn.constant(1), lambda: tn.constant(1))
        inside: list[tn.Tensor] = []

        def leak() -> tn.Tensor:
            t = tn.constant(3) + 1
            inside.append(t)
            return t

        tn.cond(p, leak, lambda: tn.constant(0))
        with pytest.raises(tn.GraphBuildError, match="cannot be used"):
            inside[0] * 2


# ---- case ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("index,want", [(0, 10), (1, 11), (2, 12), (3, -1), (-1, -1), (99, -1)])
def test_case_with_default(backend: str, index: int, want: int) -> None:
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        y = tn.case(i, [lambda k=k: tn.constant(10 + k) for k in range(3)], default=lambda: tn.constant(-1))
    assert int(run(backend, g, y, {i: index})) == want


@pytest.mark.parametrize("index,want", [(0, 0), (1, 100), (2, 200), (7, 200)])
def test_case_without_default_uses_the_last_branch(backend: str, index: int, want: int) -> None:
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        x = tn.constant(100)
        y = tn.case(i, [lambda: x * 0, lambda: x, lambda: x * 2])
    assert int(run(backend, g, y, {i: index})) == want


def test_case_errors() -> None:
    g = tn.Graph()
    with g.as_default():
        with pytest.raises(tn.GraphBuildError):
            tn.case(tn.constant(0), [])
        with pytest.raises(tn.DTypeError):
            tn.case(tn.constant(0.0), [lambda: tn.constant(1)])


# ---- while_loop ------------------------------------------------------------------------------------
def test_while_loop_doubling(backend: str) -> None:
    """The README's example: 10 doublings of x."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        i, y = tn.while_loop(lambda i, y: i < 10, lambda i, y: (i + 1, y * 2.0), [tn.constant(0), x])
    vi, vy = run(backend, g, [i, y], {x: 3.0})
    assert int(vi) == 10 and float(vy) == 3.0 * 1024


def test_while_loop_single_tensor_and_list(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.while_loop(lambda v: v < 100, lambda v: v * 3, tn.constant(1))  # 1,3,9,27,81,243
        b = tn.while_loop(lambda v: v < 100, lambda v: [v * 3], [tn.constant(1)])
    assert isinstance(a, tn.Tensor) and isinstance(b, list)
    va, vb = run(backend, g, [a, b])
    assert int(va) == 243 and ints(vb) == [243]


def test_while_loop_nested_structures(backend: str) -> None:
    """Fibonacci in several structures: after n steps (a, b) = (F(n), F(n+1))."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        i0 = tn.constant(0)
        zero, one = tn.constant(0), tn.constant(1)
        tup = tn.while_loop(lambda i, ab: i < n, lambda i, ab: (i + 1, (ab[1], ab[0] + ab[1])),
                            (i0, (zero, one)))
        lst = tn.while_loop(lambda i, ab: i < n, lambda i, ab: [i + 1, [ab[1], ab[0] + ab[1]]],
                            [i0, [zero, one]])
        dct = tn.while_loop(lambda d: d["i"] < n,
                            lambda d: {"i": d["i"] + 1, "a": d["b"], "b": d["a"] + d["b"]},
                            {"i": i0, "a": zero, "b": one})
        nt = tn.while_loop(lambda p: p.a < 30, lambda p: Pair(p.b, p.a + p.b), Pair(zero, one))
    assert isinstance(tup[1], tuple) and isinstance(lst[1], list) and isinstance(nt, Pair)
    vt, vl, vd, vn = run(backend, g, [tup, lst, dct, nt], {n: 10})
    assert int(vt[0]) == 10 and ints(vt[1]) == [55, 89]
    assert ints(vl[1]) == [55, 89]
    assert {k: int(v) for k, v in vd.items()} == {"i": 10, "a": 55, "b": 89}
    assert ints(vn) == [34, 55]  # first Fibonacci number >= 30 is 34


@pytest.mark.parametrize("max_iter,want", [(0, 0), (1, 1), (5, 5), (100, 20)])
def test_maximum_iterations(backend: str, max_iter: int, want: int) -> None:
    g = tn.Graph()
    with g.as_default():
        i = tn.while_loop(lambda i: i < 20, lambda i: i + 1, tn.constant(0), maximum_iterations=max_iter)
    assert int(run(backend, g, i)) == want


def test_maximum_iterations_as_a_tensor(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        m = tn.placeholder(tn.int32, [], name="m")
        s = tn.while_loop(lambda s: s > -1, lambda s: s + 2, tn.constant(0), maximum_iterations=m)
    assert int(run(backend, g, s, {m: 4})) == 8
    assert int(run(backend, g, s, {m: 0})) == 0


@pytest.mark.parametrize("fed,want", [(4, 8), (0, 0), (2**40, 2 * 10**3), (-2**40, 0)])
def test_an_int64_maximum_iterations_bounds_the_loop_as_its_int32_saturation(backend: str, fed: int,
                                                                              want: int) -> None:
    """An int64 tensor bound is the loop counter's int32 bound saturated: past 2**31 - 1 it bounds
    nothing (the predicate stops this loop at 1 000 iterations), below -2**31 it stops the loop at
    once. A numpy int64 that fits int32 is its value (one that does not is refused, as a Python int
    is: tests/test_bad_inputs.py). Before, ``maximum_iterations=np.int64(4)`` was refused."""
    g = tn.Graph()
    with g.as_default():
        m = tn.placeholder(tn.int64, [], name="m")
        s = tn.while_loop(lambda s: s < 2 * 10**3, lambda s: s + 2, tn.constant(0), maximum_iterations=m)
        c = tn.while_loop(lambda s: s < 2 * 10**3, lambda s: s + 2, tn.constant(0),
                          maximum_iterations=np.int64(min(max(fed, -2**31), 2**31 - 1)))
    assert [int(v) for v in run(backend, g, [s, c], {m: fed})] == [want, want if fed >= 0 else 0]


def test_parallel_iterations_do_not_change_results(backend: str) -> None:
    def build(pi: int) -> tuple[tn.Graph, Any]:
        g = tn.Graph()
        with g.as_default():
            out = tn.while_loop(lambda i, s: i < 25, lambda i, s: (i + 1, s + i * i),
                                [tn.constant(0), tn.constant(0)], parallel_iterations=pi)
        return g, out

    results = [ints(run(backend, *build(pi))) for pi in (1, 2, 10)]
    assert results == [[25, sum(k * k for k in range(25))]] * 3


def test_parallel_iterations_must_be_positive() -> None:
    g = tn.Graph()
    with g.as_default(), pytest.raises(tn.GraphBuildError, match="parallel_iterations"):
        tn.while_loop(lambda i: i < 1, lambda i: i + 1, tn.constant(0), parallel_iterations=0)


def test_loop_invariants_read_by_index(backend: str) -> None:
    """sum of xs[i] over i: xs enters the frame once, as a constant (loop invariant)."""
    xs = np.array([3.0, 1.0, 4.0, 1.0, 5.0], np.float32)
    g = tn.Graph()
    with g.as_default():
        c = tn.constant(xs)
        _, s = tn.while_loop(lambda i, s: i < 5, lambda i, s: (i + 1, s + c[i]),
                             [tn.constant(0), tn.constant(0.0)])
    enters = [n for n in g.nodes if n.op == "Enter" and n.attrs["is_constant"]]
    assert [n.inputs[0] for n in enters].count(c) == 1
    assert float(run(backend, g, s)) == float(xs.sum())


def test_shape_invariants_allow_a_growing_variable(backend: str) -> None:
    """x doubles its length each iteration: [1] -> [1,1] -> ... (length 2**3 after 3 iterations)."""
    g = tn.Graph()
    with g.as_default():
        x0 = tn.constant([1.0])
        i, x = tn.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, tn.concat([x, x], 0)),
                             [tn.constant(0), x0], shape_invariants=[[], [None]])
    assert x.shape == (None,)
    np.testing.assert_array_equal(run(backend, g, x), np.ones(8, np.float32))


def test_shape_change_without_invariants_is_a_build_time_shape_error() -> None:
    g = tn.Graph()
    with g.as_default(), pytest.raises(tn.ShapeError, match="shape_invariants"):
        tn.while_loop(lambda x: tn.size(x) < 8, lambda x: tn.concat([x, x], 0), tn.constant([1.0]))


@pytest.mark.parametrize("backend", ["reference", "fast", "smallstep"])
def test_a_body_of_unknown_rank_for_a_known_loop_variable_is_a_build_time_shape_error(backend: str) -> None:
    """``foldl`` with a ``[2]`` initializer over elements of unknown rank: the body's value has no known
    shape, so it may not fit the loop variable. The builder let an unknown *rank* pass (it refused
    only unknown dimensions), then every run failed validation ([W-Types]) on the reference and fast
    backends, while the small-step backend, which did not validate, ran it. It is refused when built,
    and a shape invariant that admits any shape makes it run on every backend."""
    with tn.Graph().as_default():
        xs = tn.placeholder(tn.float32, None, name="xs")
        with pytest.raises(tn.ShapeError, match="<unknown> after one iteration.*shape_invariants"):
            tn.foldl(lambda a, x: a + x, xs, initializer=tn.zeros([2], tn.float32))
    g = tn.Graph()  # (a builder that raised leaves its nodes behind: docs/missing.rst)
    with g.as_default():
        xs = tn.placeholder(tn.float32, None, name="xs")
        _, total = tn.while_loop(lambda i, a: i < tn.shape(xs)[0],
                                 lambda i, a: (i + 1, a + xs[i]), [tn.constant(0), tn.zeros([2], tn.float32)],
                                 shape_invariants=[None, tn.ANY_SHAPE])
    got = tn.Session(g, backend=backend).run(total, {xs: np.arange(6, dtype=np.float32).reshape(3, 2)})
    np.testing.assert_array_equal(got, [6.0, 9.0])


def test_shape_invariant_that_does_not_fit_the_initial_value() -> None:
    g = tn.Graph()
    with g.as_default(), pytest.raises(tn.ShapeError):
        tn.while_loop(lambda x: tn.size(x) < 8, lambda x: x, tn.constant([1.0, 2.0]), shape_invariants=[3])


def test_loop_body_dtype_change_is_an_error() -> None:
    g = tn.Graph()
    with g.as_default(), pytest.raises(tn.DTypeError, match="loop variable"):
        tn.while_loop(lambda x: x < 3, lambda x: tn.cast(x, tn.float32), tn.constant(0))


def test_loop_pred_must_be_bool_scalar() -> None:
    g = tn.Graph()
    with g.as_default(), pytest.raises(tn.DTypeError):
        tn.while_loop(lambda x: x, lambda x: x + 1, tn.constant(0))


def nested_loops_graph() -> tuple[tn.Graph, dict[str, Any]]:
    """for i in range(4): for j in range(max(0, 2 - i)): s += 10 * i + j + 1

    inner trip counts are 2, 1, 0, 0: the inner body runs zero times in the later outer iterations.
    s = (1 + 2) + (11) = 14; total inner iterations = 3.
    """
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")

        def outer_body(i: tn.Tensor, s: tn.Tensor, count: tn.Tensor) -> Any:
            trips = tn.maximum(2 - i, 0)
            _, s2, c2 = tn.while_loop(lambda j, s, c: j < trips,
                                      lambda j, s, c: (j + 1, s + 10 * i + j + 1, c + 1),
                                      [tn.constant(0), s, count], name="inner")
            return i + 1, s2, c2

        zeros = [tn.constant(0), tn.constant(0), tn.constant(0)]
        out = tn.while_loop(lambda i, s, c: i < n, outer_body, zeros, name="outer")
    return g, {"n": n, "out": out}


def test_loops_in_loops_with_zero_trip_inner_loop(backend: str) -> None:
    g, t = nested_loops_graph()
    assert ints(run(backend, g, t["out"], {t["n"]: 4})) == [4, 14, 3]
    assert ints(run(backend, g, t["out"], {t["n"]: 0})) == [0, 0, 0]
    assert ints(run(backend, g, t["out"], {t["n"]: 1})) == [1, 3, 2]


def test_cond_in_loop_body_collatz(backend: str) -> None:
    """Collatz steps from 6: 6 3 10 5 16 8 4 2 1 -> 8 steps; from 27 -> 111 steps."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        _, steps = tn.while_loop(
            lambda v, k: tn.not_equal(v, 1),
            lambda v, k: (tn.cond(tn.equal(v % 2, 0), lambda: v // 2, lambda: 3 * v + 1), k + 1),
            [x, tn.constant(0)])
    assert int(run(backend, g, steps, {x: 6})) == 8
    assert int(run(backend, g, steps, {x: 27})) == 111
    assert int(run(backend, g, steps, {x: 1})) == 0


@pytest.mark.parametrize("flag,want", [(True, 3), (False, 7)])
def test_cond_in_loop_predicate(backend: str, flag: bool, want: int) -> None:
    g = tn.Graph()
    with g.as_default():
        f = tn.placeholder(tn.bool, [], name="flag")
        i = tn.while_loop(lambda i: tn.cond(f, lambda: i < 3, lambda: i < 7), lambda i: i + 1, tn.constant(0))
    assert int(run(backend, g, i, {f: flag})) == want


@pytest.mark.parametrize("pred,want", [(True, 5.0), (False, -100.0)])
def test_loop_in_cond_branch_taken_and_untaken(backend: str, pred: bool, want: float) -> None:
    """When p is false the loop sits on the untaken branch: its Enters receive dead values, the whole
    loop dies at once, and the Merge after the cond takes the false branch."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        x = tn.constant(1.0)
        y = tn.cond(p, lambda: tn.while_loop(lambda v: v < 5.0, lambda v: v + 1.0, x), lambda: x * -100.0)
    assert float(run(backend, g, y, {p: pred})) == want


def test_loop_in_both_branches_and_cond_in_loop_in_cond(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        k = tn.constant(4)

        def evens_sum() -> tn.Tensor:  # 0 + 2 + 4 + 6 = 12
            return tn.while_loop(lambda i, s: i < 2 * k, lambda i, s: (i + 1, s + tn.cond(
                tn.equal(i % 2, 0), lambda: i, lambda: i * 0)), [tn.constant(0), tn.constant(0)])[1]

        def product() -> tn.Tensor:  # 1 * 2 * 3 * 4 = 24
            return tn.while_loop(lambda i, s: i <= k, lambda i, s: (i + 1, s * i),
                                 [tn.constant(1), tn.constant(1)])[1]

        y = tn.cond(p, evens_sum, product)
    assert int(run(backend, g, y, {p: True})) == 12
    assert int(run(backend, g, y, {p: False})) == 24


def test_tensor_from_inside_a_loop_used_outside_is_a_build_error() -> None:
    g = tn.Graph()
    with g.as_default():
        leaked: list[tn.Tensor] = []

        def body(i: tn.Tensor) -> tn.Tensor:
            j = i + 1
            leaked.append(j)
            return j

        tn.while_loop(lambda i: i < 3, body, tn.constant(0))
        with pytest.raises(tn.GraphBuildError, match="cannot be used"):
            leaked[0] * 2
        with pytest.raises(tn.GraphBuildError):
            tn.while_loop(lambda i: i < leaked[0], lambda i: i + 1, tn.constant(0))


def test_while_loop_structure_errors() -> None:
    g = tn.Graph()
    with g.as_default():
        with pytest.raises(tn.GraphBuildError, match="structures differ"):
            tn.while_loop(lambda a, b: a < 3, lambda a, b: (a + 1, (b, b)), [tn.constant(0), tn.constant(1)])
        with pytest.raises(tn.GraphBuildError):
            tn.while_loop(lambda: tn.constant(True), lambda: (), [])


def test_while_loop_records_its_context() -> None:
    """Builders leave their structure on the graph; loop variable 0 is the iteration counter."""
    g = tn.Graph()
    with g.as_default():
        tn.while_loop(lambda a: a < 3, lambda a: a + 1, tn.constant(0))
    from turnout.control_flow.contexts import WhileContext

    loops = [c for c in g.contexts if isinstance(c, WhileContext)]
    assert len(loops) == 1
    ctx = loops[0]
    assert len(ctx.loop_vars) == 2 and ctx.counter.merge.outputs[0].dtype == tn.int32
    assert ctx.pivot is not None and ctx.pivot.op == "LoopCond"
    ops = {lv.enter.op for lv in ctx.loop_vars} | {lv.exit.op for lv in ctx.loop_vars}  # type: ignore[union-attr]
    assert ops == {"Enter", "Exit"}


# ---- scan / map_fn / foldl / TensorArray -----------------------------------------------------------
def test_scan_map_fn_foldl(backend: str) -> None:
    xs = np.array([1, 2, 3, 4], np.int32)
    g = tn.Graph()
    with g.as_default():
        c = tn.constant(xs)
        cum = tn.scan(lambda acc, x: acc + x, c, tn.constant(0))
        cum_no_init = tn.scan(lambda acc, x: acc + x, c)
        sq = tn.map_fn(lambda x: x * x, c)
        total = tn.foldl(lambda acc, x: acc + x, c, tn.constant(0))
        prod = tn.foldl(lambda acc, x: acc * x, c)
        halves = tn.map_fn(lambda x: tn.cast(x, tn.float32) / 2.0, c, dtype=tn.float32)
    v = run(backend, g, [cum, cum_no_init, sq, total, prod, halves])
    assert ints(v[0]) == [1, 3, 6, 10]
    assert ints(v[1]) == [1, 3, 6, 10]
    assert ints(v[2]) == [1, 4, 9, 16]
    assert int(v[3]) == 10 and int(v[4]) == 24
    np.testing.assert_array_equal(v[5], [0.5, 1.0, 1.5, 2.0])


def test_scan_with_structured_carry_and_elems(backend: str) -> None:
    """Running (min, max) over pairs of rows."""
    a = np.array([3, 1, 4, 1, 5], np.int32)
    b = np.array([2, 7, 1, 8, 2], np.int32)
    g = tn.Graph()
    with g.as_default():
        out = tn.scan(lambda acc, x: (tn.minimum(acc[0], x["a"] + x["b"]),
                                      tn.maximum(acc[1], x["a"] * x["b"])),
                      {"a": tn.constant(a), "b": tn.constant(b)}, (tn.constant(100), tn.constant(0)))
    lo, hi = run(backend, g, out)
    assert ints(lo) == list(np.minimum.accumulate(a + b)) and ints(hi) == list(np.maximum.accumulate(a * b))


def test_tensor_array_accumulation_in_a_loop(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        ta0 = tn.TensorArray(tn.int32, size=n)
        _, ta = tn.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, i * i)),
                              [tn.constant(0), ta0])
        assert isinstance(ta, tn.TensorArray)
        stacked, size, third = ta.stack(), ta.size(), ta.read(2)
    s, sz, r = run(backend, g, [stacked, size, third], {n: 4})
    assert ints(s) == [0, 1, 4, 9] and int(sz) == 4 and int(r) == 4


def test_a_dynamic_size_tensor_array_grows_with_its_writes(backend: str) -> None:
    """``dynamic_size=True``: a loop of fed length writes past the end of an array of size 0, and the
    array grows to hold each write (TensorFlow's ``TensorArray(size=0, dynamic_size=True)`` of a
    decoder's outputs); its gradient flows back through the writes. A fixed-size one refuses the
    same write past its end."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        x = tn.placeholder(tn.float32, [], name="x")
        ta0 = tn.TensorArray(tn.float32, size=0, dynamic_size=True)
        _, ta = tn.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, x * tn.cast(i, tn.float32))),
                              [tn.constant(0), ta0])
        stacked, size = ta.stack(), ta.size()
        (dx,) = tn.gradients(tn.reduce_sum(stacked), [x])
        fixed = tn.TensorArray(tn.float32, size=1).write(1, x)
        with pytest.raises(tn.ArgumentError, match="TensorArray: dynamic_size must be True or False"):
            tn.TensorArray(tn.float32, size=0, dynamic_size="yes")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the fast backend runs it on the interpreter
        s, sz, d = run(backend, g, [stacked, size, dx], {n: 4, x: 0.5})
    np.testing.assert_allclose(s, [0.0, 0.5, 1.0, 1.5])
    assert int(sz) == 4 and float(d) == 6.0
    with pytest.raises(tn.KernelError, match="out of range|size"):
        run(backend, g, fixed.size(), {x: 1.0})


def test_tensor_array_unstack_read(backend: str) -> None:
    from turnout.control_flow.tensor_array import unstack

    g = tn.Graph()
    with g.as_default():
        row = unstack(tn.constant([[1, 2], [3, 4]])).read(1)
        size = unstack(tn.constant([[1, 2], [3, 4]])).size()
    assert ints(run(backend, g, row)) == [3, 4] and int(run(backend, g, size)) == 2


def test_tensor_array_slots_are_write_once(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        twice = tn.TensorArray(tn.float32, size=2).write(0, 1.5).write(0, 2.5)
    with pytest.raises(tn.KernelError, match="already written"):
        run(backend, g, twice.size())


def test_tensor_array_unwritten_slot(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        ta = tn.TensorArray(tn.float32, size=2)
        unread = ta.write(0, 1.5).read(1)
        with pytest.raises(tn.DTypeError, match="TensorArrayWrite"):
            ta.write(1, tn.constant(1))
    with pytest.raises(tn.KernelError, match="never written"):
        run(backend, g, unread)


def test_map_fn_on_an_empty_input_with_known_shape(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [None], name="x")
        y = tn.foldl(lambda a, v: a + v, x, tn.constant(0))
    assert int(run(backend, g, y, {x: np.zeros(0, np.int32)})) == 0
    assert int(run(backend, g, y, {x: np.arange(5, dtype=np.int32)})) == 10


# ---- firing counts (T3) ----------------------------------------------------------------------------
def firings(result: Any, node: tn.Node) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(tags where ``node`` fired live, tags where it fired dead) in one traced run."""
    live = [e.tag for e in result.trace.events if e.node == node.name and not e.dead]
    dead = [e.tag for e in result.trace.events if e.node == node.name and e.dead]
    return live, dead


@REFERENCE_ONLY  # traces and firing counts exist only in the reference interpreter
@pytest.mark.parametrize("k", [0, 1, 4])
def test_firing_counts_match_the_trip_count(backend: str, k: int) -> None:
    """A loop with trip count k: its Merge fires at iterations 0..k (k+1 times, all live), its body
    fires live at iterations 0..k-1 and dead at iteration k, its Exit delivers one live value."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        out = tn.while_loop(lambda i: i < n, lambda i: tn.add(i, 1, name="step"), tn.constant(0), name="L")
    from turnout.control_flow.contexts import WhileContext

    ctx = next(c for c in g.contexts if isinstance(c, WhileContext))
    frame = ctx.frame_name
    sess = tn.Session(g, backend=backend)
    assert int(sess.run(out, {n: k}, trace=True)) == k
    res = sess.last_result
    assert res is not None and res.counts is not None and res.trace is not None
    assert res.counts and all(c == 1 for c in res.counts.values()), "each (node, tag) fires at most once"
    assert len({(e.node, e.tag) for e in res.trace.events}) == len(res.trace.events)
    live, dead = firings(res, ctx.loop_vars[1].merge)
    assert sorted(live) == [((frame, it),) for it in range(k + 1)] and dead == []
    live, dead = firings(res, g.node("L/body/step"))
    assert sorted(live) == [((frame, it),) for it in range(k)]
    assert dead == [((frame, k),)]
    live, dead = firings(res, ctx.loop_vars[1].next_iteration)  # type: ignore[arg-type]
    assert len(live) == k
    live, _ = firings(res, ctx.loop_vars[1].exit)  # type: ignore[arg-type]
    assert live == [((frame, k),)]  # the Exit fires in the frame; its value lands in the root
    assert res.trace.summary()["iterations_per_frame"][frame] == k + 1


@REFERENCE_ONLY  # traces and firing counts exist only in the reference interpreter
def test_firing_counts_of_nested_loops(backend: str) -> None:
    """Inner trip counts 2, 1, 0, 0 (see nested_loops_graph): the inner body's step fires live 3 times."""
    g, t = nested_loops_graph()
    sess = tn.Session(g, backend=backend)
    sess.run(t["out"], {t["n"]: 4}, trace=True)
    res = sess.last_result
    assert res is not None and all(c == 1 for c in res.counts.values())  # type: ignore[union-attr]
    inner_adds = [n for n in g.nodes if n.name.startswith("outer/body/inner/body/") and n.op == "Add"]
    assert inner_adds
    for node in inner_adds:
        live, _ = firings(res, node)
        assert len(live) == 3, node.name
    # one inner frame instance per outer iteration: 4 that run, and a dead one at outer iteration 4,
    # where the outer predicate is false and the inner loop's Enters receive dead values
    inner = [e for e in res.trace.events if len(e.tag) == 2]  # type: ignore[union-attr]
    assert len({e.tag[0] for e in inner}) == 5
    assert {e.tag[0][1] for e in inner if not e.dead and e.op in PRIMITIVES} == {0, 1, 2, 3}


@REFERENCE_ONLY  # traces and firing counts exist only in the reference interpreter
def test_untaken_loop_fires_only_dead(backend: str) -> None:
    """A loop on the untaken branch of a cond fires nothing live: deadness reaches all of it (T5)."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        y = tn.cond(p, lambda: tn.while_loop(lambda v: v < 5, lambda v: v + 1, tn.constant(0), name="W"),
                    lambda: tn.constant(-1))
    sess = tn.Session(g, backend=backend)
    assert int(sess.run(y, {p: False}, trace=True)) == -1
    res = sess.last_result
    loop_events = [e for e in res.trace.events if e.tag and e.op in PRIMITIVES]  # type: ignore[union-attr]
    assert loop_events and all(e.dead for e in loop_events)
    assert all(tag[0][1] == 0 for tag in (e.tag for e in loop_events))  # only iteration 0 ever starts


# ---- scheduler independence (T1) -------------------------------------------------------------------
@REFERENCE_ONLY  # schedulers exist only in the reference interpreter (fast ignores the option)
def test_scheduler_independence_on_a_nested_program(backend: str) -> None:
    g, t = nested_loops_graph()
    with g.as_default():
        out = t["out"]
        extra = tn.cond(out[1] > 10, lambda: out[1] * 2, lambda: out[1] - 1)
    fetch = [*out, extra]
    want = [4, 14, 3, 28]
    sess = tn.Session(g, backend=backend)
    runs = [RunOptions(scheduler="fifo"), RunOptions(scheduler="lifo")]
    runs += [RunOptions(scheduler="random", seed=s) for s in range(20)]
    for opts in runs:
        assert ints(sess.run(fetch, {t["n"]: 4}, options=opts)) == want, opts


@pytest.mark.parametrize("backend", ["reference", "fast", "smallstep"])
def test_a_builder_that_raises_leaves_the_graph_as_it_was(backend: str) -> None:
    """A ``while_loop``, a ``cond``, a ``map_fn`` or a ``tn.gradients`` that raises removes what it built
    (``Graph._all_or_nothing``). A half-built loop used to keep a Merge whose back edge was never
    bound, and every later run of the graph, of any tensor, failed validation ([W-Merge-Bound]): in a
    notebook, one mistake in a loop body spoilt the default graph."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, None, name="x")
        six = tn.constant(2.0) * 3.0
        _, z = tn.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a + tn.reduce_sum(tn.concat([x, x], -1) * a)),
                             [tn.constant(0), tn.constant(1.0)])
        (second,) = tn.gradients(tn.reduce_sum(tn.gradients(z, [x])[0]), [x])
        total = tn.reduce_sum(second)
        zero, one, vec = tn.constant(0), tn.constant(True), tn.constant([1.0, 2.0])
        before = (len(g.nodes), len(g.contexts), g.version)
        with pytest.raises(tn.DTypeError, match="loop variable"):
            tn.while_loop(lambda i: i < 3, lambda i: tn.cast(i, tn.float32), [zero])
        with pytest.raises(tn.DTypeError, match="true_fn"):
            tn.cond(one, lambda: tn.constant(1.0), lambda: tn.constant(1))
        with pytest.raises(tn.GradientError, match="third and higher-order"):  # after a backward loop or two
            tn.gradients(total, [x])
        with pytest.raises(ZeroDivisionError):  # the user's own exception, in a loop body
            tn.while_loop(lambda i: i < 3, lambda i: i + 1 // 0, [zero])
        with pytest.raises(tn.GraphBuildError, match="None"):  # after map_fn made its TensorArrays
            tn.map_fn(lambda v: None, vec)
        assert (len(g.nodes), len(g.contexts)) == before[:2] and g.version != before[2]
        _, w = tn.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2.0), [zero, six])
    got = tn.Session(g, backend=backend).run([six, z, w], {x: np.ones(2, np.float32)})
    assert [float(v) for v in got] == [6.0, 25.0, 48.0]


@pytest.mark.parametrize("backend", ["reference", "fast", "smallstep"])
def test_a_loop_body_that_catches_a_nested_builders_error_goes_on(backend: str) -> None:
    """Inside an outer loop's body, an inner loop fails after capturing an outer tensor (an Enter made
    in the outer loop for it). The outer loop forgets that capture with the inner loop's nodes, makes
    it again when the body next reads the tensor, and computes what it would have computed."""
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.float32, [], name="k")

        def body(i: tn.Tensor, a: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            try:
                tn.while_loop(lambda j: j < 2, lambda j: tn.cast(j, tn.float32) * k, [tn.constant(0)])
            except tn.DTypeError:
                pass
            return i + 1, a + k

        _, total = tn.while_loop(lambda i, a: i < 3, body, [tn.constant(0), tn.constant(0.0)])
    assert float(tn.Session(g, backend=backend).run(total, {k: np.float32(2.5)})) == 7.5


def test_unstack_into_a_tensor_array_must_fit_what_it_declares() -> None:
    """``ta.unstack(value)`` fills ``ta``: a dtype, element shape or (static) size other than the
    declared one is refused, as is unstacking into a TensorArray already written to. The result used
    to be a new TensorArray made from ``value`` alone: a float32 TensorArray of size 2 unstacking
    three int32 values became an int32 TensorArray of size 3, silently."""
    with tn.Graph().as_default():
        c = tn.constant
        with pytest.raises(tn.ShapeError, match="3 elements into a TensorArray of size 2"):
            tn.TensorArray(tn.float32, size=2).unstack(c([1.0, 2.0, 3.0]))
        with pytest.raises(tn.DTypeError, match="a tensor of int32 into a TensorArray of float32"):
            tn.TensorArray(tn.float32, size=3).unstack(c([1, 2, 3]))
        with pytest.raises(tn.ShapeError, match=r"elements of shape \[\] into a TensorArray of elements \[2\]"):
            tn.TensorArray(tn.float32, size=3, element_shape=[2]).unstack(c([1.0, 2.0, 3.0]))
        with pytest.raises(tn.GraphBuildError, match="write-once"):
            tn.TensorArray(tn.float32, size=3).write(0, c(1.0)).unstack(c([1.0, 2.0, 3.0]))
        n = tn.placeholder(tn.int32, [], name="n")
        fed = tn.TensorArray(tn.float32, size=n).unstack(c([1.0, 2.0])).stack()  # size known only when run
        listed = tn.TensorArray(tn.float32, size=3).unstack([1.0, 2.0, 3.0]).stack()  # a list takes the dtype
        got = tn.Session(fed.graph).run([fed, listed], {n: np.int32(2)})
    assert [v.tolist() for v in got] == [[1.0, 2.0], [1.0, 2.0, 3.0]]


def test_regression_a_loop_in_the_body_of_a_loop_that_never_runs_never_runs() -> None:
    """Found by the generated-program campaign (seed 1902, the deadness check): an inner loop whose
    initial value is an invariant of the outer loop entered the outer frame at its first iteration
    even when the outer loop ran no body (an invariant is live at every iteration, the exit
    iteration included), so its header fired live on the reference interpreter, and here divided by
    zero, where the other backends never run it. Its Enter now waits on the outer loop's pivot."""
    g = tn.Graph()
    with g.as_default():
        d = tn.placeholder(tn.int32, [], name="d")

        def outer(i: Any, a: Any) -> Any:
            _, b = tn.while_loop(lambda j, b: j < b // b, lambda j, b: (j + 1, b), [tn.constant(0), d], name="inner")
            return i + 1, a + b

        _, out = tn.while_loop(lambda i, a: i < 0, outer, [tn.constant(0), d], name="outer")
    for backend in ("reference", "smallstep", "fast"):
        assert tn.Session(g, backend=backend).run(out, {d: 0}) == 0, backend
    sess = tn.Session(g)
    sess.run(out, {d: 0}, options=RunOptions(trace=True))
    assert sess.last_result is not None and sess.last_result.trace is not None
    ops = {n.name for n in g.nodes}
    fired = {n for n, _ in sess.last_result.trace.live_firings() if n in ops}
    assert fired and not [n for n in fired if n.startswith("outer/body/inner/")]
