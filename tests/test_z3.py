"""The z3 encodings (``turnout.semantics.symbolic``): prediction, input synthesis, equivalence.

Predictions are checked against the structured evaluator, synthesized inputs are checked by running
the program on them, and the equivalence checker is tried on pairs whose answer is known by hand.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest
from example_counts import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import turnout as tn
from turnout.primitives import PRIMITIVES
from turnout.semantics import symbolic as sy
from turnout.semantics.structured import evaluate

z3 = pytest.importorskip("z3")


def loops(g: tn.Graph) -> list[Any]:
    return [c for c in g.contexts if c.kind == "while"]


def conds(g: tn.Graph) -> list[Any]:
    seen: list[Any] = []
    for c in g.contexts:
        if c.kind == "cond" and all(c.info is not s for s in seen):
            seen.append(c.info)
    return seen


def ints(xs: Any) -> list[int]:
    return [int(x) for x in xs]


# ---- the rule table ----------------------------------------------------------------------------------
def test_every_primitive_is_encoded_or_listed_as_unsupported() -> None:
    assert not set(sy.Z3_RULES) & sy.Z3_UNSUPPORTED
    missing = set(PRIMITIVES) - set(sy.Z3_RULES) - sy.Z3_UNSUPPORTED
    assert not missing, f"classify these primitives in semantics/symbolic.py: {sorted(missing)}"
    assert not (set(sy.Z3_RULES) | sy.Z3_UNSUPPORTED) - set(PRIMITIVES)


def test_turnout_and_the_structured_evaluator_do_not_import_z3() -> None:
    code = "import turnout, turnout.semantics, turnout.semantics.structured, sys; print('z3' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---- predict -----------------------------------------------------------------------------------------
def _collatz_like() -> tuple[tn.Graph, tn.Tensor, list[tn.Tensor]]:
    """Count halvings / 3x+1 steps of x until 1 (at most 50), then branch on the parity of the count."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")

        def body(n: tn.Tensor, steps: tn.Tensor) -> Any:
            n = tn.cond(tn.equal(n % 2, 0), lambda: n // 2, lambda: 3 * n + 1)
            return n, steps + 1

        n, steps = tn.while_loop(lambda n, s: n > 1, body, [x, tn.constant(0)], maximum_iterations=50)
        parity = tn.cond(tn.equal(steps % 2, 0), lambda: steps * 10, lambda: -steps)
    return g, x, [n, steps, parity]


@pytest.mark.parametrize("x", [1, 2, 6, 7, 27, -5])
def test_predict_equals_evaluate_on_a_loop_with_conds(x: int) -> None:
    g, ph, fetches = _collatz_like()
    assert sy.predict(g, fetches, {ph: x}) == ints(evaluate(g, fetches, {ph: x}).values)


def test_predict_int32_overflow_wraps_like_numpy() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        y = tn.while_loop(lambda i, y: i < 4, lambda i, y: (i + 1, y * x + 7), [tn.constant(0), x])[1]
        big = tn.placeholder(tn.int64, [], name="big")
        narrowed = tn.cast(big * 3, tn.int32)
        q, r = x // -7, x % -7
        a = tn.abs(x)
    feeds = {x: 2**31 - 1, big: 2**40 + 5}
    got = sy.predict(g, [y, narrowed, q, r, a], feeds)
    assert got == ints(evaluate(g, [y, narrowed, q, r, a], feeds).values)
    assert got[2:] == [(2**31 - 1) // -7, (2**31 - 1) % -7, 2**31 - 1]  # floor semantics, as Python's
    assert sy.predict(g, [a], {x: -(2**31)}) == [-(2**31)]  # abs(INT_MIN) wraps, as numpy's


def test_predict_nested_loops_and_case() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")

        def outer(i: tn.Tensor, acc: tn.Tensor) -> Any:
            _, acc = tn.while_loop(lambda j, a: j < i, lambda j, a: (j + 1, a + j * i), [tn.constant(0), acc])
            return i + 1, acc

        _, acc = tn.while_loop(lambda i, a: i < x, outer, [tn.constant(0), tn.constant(0)])
        pick = tn.case(x % 4, [lambda: acc, lambda: acc * 2, lambda: -acc], default=lambda: tn.constant(0))
    for v in [0, 1, 4, 5, 6]:
        want = sum(j * i for i in range(v) for j in range(i))
        want = [want, 2 * want, -want, 0][v % 4]
        assert sy.predict(g, [pick], {x: v}) == [want] == ints(evaluate(g, [pick], {x: v}).values)


def test_predict_reports_loops_beyond_the_bound_and_division_by_zero() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        y = tn.while_loop(lambda i: i < x, lambda i: i + 1, [tn.constant(0)])[0]
        z = tn.cond(x > 0, lambda: 100 // x, lambda: 100 // (x - x))
    assert sy.predict(g, [y], {x: 10}, bound=10) == [10]
    with pytest.raises(sy.BeyondBound):
        sy.predict(g, [y], {x: 11}, bound=10)
    assert sy.predict(g, [z], {x: 7}) == [14]
    with pytest.raises(tn.KernelError, match="division by zero"):
        sy.predict(g, [z], {x: -1})


def test_unsupported_ops_are_named() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = tn.tanh(x)
        v = tn.placeholder(tn.int32, [], name="v")
        s = tn.reduce_sum(tn.stack([v, v]))
        w = tn.Variable(1, name="w")
        r = w.read() + 1
    with pytest.raises(tn.UnsupportedError, match="Tanh"):
        sy.predict(g, [y], {x: 1.0})
    with pytest.raises(tn.UnsupportedError, match="Sum"):
        sy.predict(g, [s], {v: 1})
    with pytest.raises(tn.UnsupportedError, match="input v:0"):
        sy.predict(g, [v], {v: np.arange(3, dtype=np.int32)})
    with pytest.raises(tn.UnsupportedError, match="ReadVariable|VarHandle"):
        sy.predict(g, [r], {})


def test_float_programs_are_predicted_in_ideal_arithmetic() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        y = tn.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y / 2.0 + 1.0), [tn.constant(0), x])[1]
    # y -> y/2 + 1 three times from 8: 5, 3.5, 2.75
    assert sy.predict(g, [y], {x: 8.0}) == [2.75] == [float(v) for v in evaluate(g, [y], {x: 8.0}).values]


# ---- synthesis ---------------------------------------------------------------------------------------
def _two_input_loop() -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    """i counts up by step from start while i < 40."""
    g = tn.Graph()
    with g.as_default():
        start = tn.placeholder(tn.int32, [], name="start")
        step = tn.placeholder(tn.int32, [], name="step")
        i = tn.while_loop(lambda i: i < 40, lambda i: i + step, [start])[0]
    return g, start, step, i


@pytest.mark.parametrize("k", [0, 3, 7])
def test_synthesize_a_trip_count_and_check_it_by_running(k: int) -> None:
    g, start, step, i = _two_input_loop()
    (loop,) = loops(g)
    sol = sy.synthesize_trip_count(g, loop, k, [start, step], fixed=None, bound=k)
    assert sol is not None and set(sol) == {start, step}
    r = evaluate(g, [i], {start: sol[start], step: sol[step]})
    assert r.trip_counts == {(loop.frame_name, ()): k}
    # by frame name too, with one input fixed
    sol = sy.synthesize_trip_count(g, loop.frame_name, k, [start], fixed={step: 5}, bound=k)
    assert sol is not None
    assert evaluate(g, [i], {start: sol[start], step: 5}).trip_counts[(loop.frame_name, ())] == k


def test_synthesize_an_impossible_trip_count_is_none() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        y = tn.while_loop(lambda i: i < tn.minimum(n, 4), lambda i: i + 1, [tn.constant(0)])[0]
    (loop,) = loops(g)
    assert sy.synthesize_trip_count(g, loop, 5, [n], bound=6) is None  # min(n, 4) caps the count at 4
    sol = sy.synthesize_trip_count(g, loop, 4, [n])
    assert sol is not None and sol[n] >= 4 and int(evaluate(g, [y], {n: sol[n]}).values[0]) == 4


@pytest.mark.parametrize("branch", [1, 0])
def test_synthesize_each_branch(branch: int) -> None:
    g, x, fetches = _collatz_like()
    parity = conds(g)[-1]  # the cond on the parity of the step count, after the loop
    # a generous timeout: the query takes well under a second alone, but CI machines can be loaded
    sol = sy.synthesize_branch(g, parity, branch, [x], bound=50, timeout_ms=60_000)
    assert sol is not None
    steps = int(evaluate(g, [fetches[1]], {x: sol[x]}).values[0])
    assert (steps % 2 == 0) == bool(branch)


def test_synthesize_a_branch_that_cannot_be_taken_is_none() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        tn.cond(tn.logical_and(x > 5, x < 3), lambda: tn.constant(1), lambda: tn.constant(0), name="never")
    assert sy.synthesize_branch(g, "never", 1, [x]) is None
    assert sy.synthesize_branch(g, "never", 0, [x]) is not None


def test_a_hard_query_with_a_tiny_timeout_is_unknown_or_answered_never_hangs() -> None:
    """Factoring a 60-bit semiprime over 64-bit multiplication: z3 cannot do it in a millisecond."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int64, [], name="a")
        b = tn.placeholder(tn.int64, [], name="b")
        n = tn.constant(1_000_000_007 * 998_244_353, tn.int64)
        ok = tn.logical_and(tn.logical_and(tn.equal(a * b, n), a > 1), tn.logical_and(b > 1, a < 2**31))
        tn.cond(tn.logical_and(ok, b < 2**31), lambda: tn.constant(1), lambda: tn.constant(0), name="factor")
    t = time.monotonic()
    try:
        sol = sy.synthesize_branch(g, "factor", 1, [a, b], timeout_ms=1)
    except sy.SolverUnknown:
        sol = None
    else:
        assert sol is not None and sol[a] * sol[b] == 1_000_000_007 * 998_244_353
    assert time.monotonic() - t < 10.0
    # the same time limit on equivalence gives an undecided answer, not an exception
    gb = tn.Graph()
    with gb.as_default():
        a2 = tn.placeholder(tn.int64, [], name="a")
        b2 = tn.placeholder(tn.int64, [], name="b")
        y2 = tn.cast(tn.not_equal(a2 * b2, n.node.attrs["value"].item()), tn.int32)
    with g.as_default():
        y1 = tn.cast(tn.logical_not(ok), tn.int32)
    res = sy.equivalent(g, [y1], gb, [y2], [a, b], [a2, b2], uninterpreted=False, timeout_ms=1)
    assert res.equal in (None, False) and (res.equal is not None or "unknown" in res.reason)


# ---- equivalence -------------------------------------------------------------------------------------
def _graph(make: Any) -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = make(x)
    return g, x, y


def _equiv(fa: Any, fb: Any, **kw: Any) -> sy.EquivalenceResult:
    ga, xa, ya = _graph(fa)
    gb, xb, yb = _graph(fb)
    return sy.equivalent(ga, [ya], gb, [yb], [xa], [xb], **kw)


def test_cond_with_equal_branches_equals_its_branch() -> None:
    res = _equiv(lambda x: tn.cond(x > 0.0, lambda: tn.tanh(x), lambda: tn.tanh(x)), lambda x: tn.tanh(x))
    assert res.equal is True and res.counterexample is None


def test_swapped_branches_under_a_negated_predicate_are_equivalent() -> None:
    res = _equiv(lambda x: tn.cond(x > 0.0, lambda: tn.tanh(x), lambda: tn.exp(x)),
                 lambda x: tn.cond(tn.logical_not(x > 0.0), lambda: tn.exp(x), lambda: tn.tanh(x)))
    assert res.equal is True


def test_a_changed_constant_is_not_equivalent() -> None:
    res = _equiv(lambda x: tn.cond(x > 0.0, lambda: tn.tanh(x), lambda: tn.exp(x * 2.0)),
                 lambda x: tn.cond(x > 0.0, lambda: tn.tanh(x), lambda: tn.exp(x * 3.0)))
    assert res.equal is False and res.counterexample is not None


def test_interpreted_counterexample_is_a_real_difference() -> None:
    def make(c: int) -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.int32, [], name="x")
            y = tn.cond(x > 0, lambda: x * 2, lambda: x * 5 + c)
        return g, x, y

    (ga, xa, ya), (gb, xb, yb) = make(1), make(2)
    res = sy.equivalent(ga, [ya], gb, [yb], [xa], [xb], uninterpreted=False)
    assert res.equal is False
    (value,) = res.counterexample.values()
    assert value <= 0  # the branches differ only where x <= 0
    assert int(evaluate(ga, [ya], {xa: value}).values[0]) != int(evaluate(gb, [yb], {xb: value}).values[0])
    gc, xc, yc = make(1)
    assert sy.equivalent(ga, [ya], gc, [yc], [xa], [xc], uninterpreted=False).equal is True


def test_interpreted_loops_equivalence_up_to_the_bound() -> None:
    def loop(factor: int, unroll: bool = False) -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
        g = tn.Graph()
        with g.as_default():
            n = tn.placeholder(tn.int32, [], name="n")
            if unroll:  # 2 ** min(max(n, 0), 6) written without a loop
                k = tn.minimum(tn.maximum(n, 0), 6)
                y = tn.case(k, [lambda v=v: tn.constant(2**v) for v in range(6)], default=lambda: tn.constant(64))
            else:
                y = tn.while_loop(lambda i, y: tn.logical_and(i < n, i < 6), lambda i, y: (i + 1, y * factor),
                                  [tn.constant(0), tn.constant(1)])[1]
        return g, n, y

    (ga, na, ya), (gb, nb, yb), (gc, nc, yc) = loop(2), loop(2, unroll=True), loop(3)
    assert sy.equivalent(ga, [ya], gb, [yb], [na], [nb], bound=6, uninterpreted=False).equal is True
    res = sy.equivalent(ga, [ya], gc, [yc], [na], [nc], bound=6, uninterpreted=False)
    assert res.equal is False
    (n,) = res.counterexample.values()
    assert n >= 1  # 2**0 == 3**0: only a loop that runs tells them apart
    assert sy.predict(ga, [ya], {na: n}) != sy.predict(gc, [yc], {nc: n})


def test_equivalence_checks_its_arguments() -> None:
    ga, xa, ya = _graph(lambda x: x * 2.0)
    gi = tn.Graph()
    with gi.as_default():
        xi = tn.placeholder(tn.int32, [], name="x")
        yi = xi * 2
    with pytest.raises(tn.GraphBuildError, match="input 0"):
        sy.equivalent(ga, [ya], gi, [yi], [xa], [xi])
    with pytest.raises(ValueError):
        sy.equivalent(ga, [ya], gi, [yi], [xa], [])


# ---- generated integer programs: predict == evaluate ------------------------------------------------
@settings(max_examples=examples(40))
@given(st.data())
def test_predict_equals_evaluate_on_generated_int_programs(data: st.DataObject) -> None:
    import programs
    import strategies

    p = data.draw(strategies.programs(int_only=True, scan=False, loops=True, conds=True, max_depth=3))
    built = programs.build(p)
    inputs = data.draw(strategies.inputs_for(p))
    feeds = built.feed_dict(inputs)
    try:
        want = evaluate(built.graph, built.fetches, feeds).values
    except tn.KernelError:
        with pytest.raises(tn.KernelError):
            sy.predict(built.graph, built.fetches, feeds)
        return
    got = sy.predict(built.graph, built.fetches, feeds)
    assert got == [np.asarray(w).item() for w in want]
