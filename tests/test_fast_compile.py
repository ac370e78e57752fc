"""Compile cost of the fast backend grows linearly with nesting: every region is traced once.

Why count lowerings rather than time them: a region traced twice per enclosing trace (once to learn
its result types, once inside ``lax.cond`` / ``lax.while_loop``) lowers its innermost op ``2^depth``
times, which a count shows exactly and a timing only under load-dependent noise. Timings live in
``benchmarks/compile_time.py``. Deep programs (beyond Python's default recursion limit) run too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import graphs
import numpy as np
import pytest

import turnout as tn

pytest.importorskip("jax")

from turnout.fast import lowering  # noqa: E402


def nested_conds(depth: int) -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def conds(d: int) -> Any:
            if d == depth:
                return x * 2.0
            return tn.cond(x > float(d), lambda: conds(d + 1), lambda: x - float(d))

        y = conds(0)
    return g, x, y


def nested_loops(depth: int) -> tuple[tn.Graph, tuple[tn.Tensor, tn.Tensor], tn.Tensor]:
    g, x, trips, y = graphs.nested_loops(depth)
    return g, (x, trips), y


@pytest.fixture
def mul_lowerings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times the ``Mul`` lowering rule runs (each run is one trace of the op)."""
    calls = [0]
    rule = lowering.LOWERING_RULES["Mul"]

    def counted(*a: Any) -> Any:
        calls[0] += 1
        return rule(*a)

    monkeypatch.setitem(lowering.LOWERING_RULES, "Mul", counted)
    yield calls


@pytest.mark.parametrize("depth", [1, 6, 12])
def test_innermost_op_of_nested_conds_is_traced_once(depth: int, mul_lowerings: list[int]) -> None:
    g, x, y = nested_conds(depth)
    got = tn.Session(g, backend="fast").run(y, {x: np.float32(depth + 1.0)})
    assert float(got) == 2.0 * (depth + 1.0)
    assert mul_lowerings[0] == 1


@pytest.mark.parametrize("depth", [1, 6, 12])
def test_innermost_op_of_nested_loops_is_traced_once(depth: int, mul_lowerings: list[int]) -> None:
    g, (x, trips), y = nested_loops(depth)
    got = tn.Session(g, backend="fast").run(y, {x: np.float32(2.0), trips: np.int32(1)})
    assert float(got) == pytest.approx(2.0 * 1.5 + 1.0)
    assert mul_lowerings[0] == 1


def test_case_with_many_branches_traces_each_branch_once(mul_lowerings: list[int]) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        idx = tn.placeholder(tn.int32, [], name="idx")
        y = tn.case(idx, [lambda k=k: x * float(k) for k in range(24)])
    sess = tn.Session(g, backend="fast")
    assert [float(sess.run(y, {x: np.float32(2.0), idx: np.int32(i)})) for i in (0, 5, 23, 99)] == [0, 10, 46, 46]
    assert mul_lowerings[0] == 24


@pytest.fixture
def low_recursion_limit() -> Iterator[None]:
    """A recursion limit far below what deep programs need without the deep-stack worker."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(600)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def test_100_nested_conds_run(low_recursion_limit: None) -> None:
    g, x, y = nested_conds(100)
    sess = tn.Session(g, backend="fast")
    assert float(sess.run(y, {x: np.float32(101.0)})) == 202.0
    # the first false predicate is d = 51: a shallower branch of the same plan
    assert float(sess.run(y, {x: np.float32(50.5)})) == 50.5 - 51.0
    assert sys.getrecursionlimit() == 600  # put back after the run


def test_deeply_nested_loops_run(low_recursion_limit: None) -> None:
    g, (x, trips), y = nested_loops(30)
    sess = tn.Session(g, backend="fast")
    assert float(sess.run(y, {x: np.float32(2.0), trips: np.int32(1)})) == pytest.approx(4.0)
    assert float(sess.run(y, {x: np.float32(2.0), trips: np.int32(0)})) == 2.0
    with pytest.raises(tn.NonTerminationError):  # errors cross back from the deep-stack worker
        sess.run(y, {x: np.float32(2.0), trips: np.int32(2)}, max_iterations=1)
    assert sess.backend.compile_count == 1  # new trip counts and budgets do not recompile


def test_the_thread_a_run_takes_is_decided_before_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Which thread a run takes is a value decided before the run (``FastBackend._thread_nesting``),
    not an exception raised from the planning inside it: before its program has a plan, the graph's
    bound (one level per cond here, so deeper than ``DEEP_NESTING``, though no cond nests in another),
    and from then on the nesting its first plan recorded (1: this thread)."""
    from turnout.fast import backend as fast_backend
    from turnout.fast.deep import DEEP_NESTING

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = x
        for k in range(DEEP_NESTING + 6):
            y = tn.cond(y > float(k), lambda y=y: y + 1.0, lambda y=y: y - 1.0)
    sess = tn.Session(g, backend="fast")
    b = sess.backend
    deep: list[int] = []
    real = fast_backend.call_deep

    def counted(fn: Any, *args: Any, nesting: int) -> Any:
        deep.append(nesting)
        return real(fn, *args, nesting=nesting)

    monkeypatch.setattr(fast_backend, "call_deep", counted)
    feeds = {x: np.float32(0.5)}
    before = b._thread_nesting([y], feeds)
    assert before > DEEP_NESTING
    ref = tn.Session(g).run(y, feeds)
    assert float(sess.run(y, feeds)) == pytest.approx(float(ref))
    assert deep == [before]  # the first run planned on the deep thread
    assert b._thread_nesting([y], feeds) == 0  # its plan nests one level: this thread from now on
    assert float(sess.run(y, {x: np.float32(40.0)})) == pytest.approx(float(tn.Session(g).run(y, {x: 40.0})))
    assert deep == [before]


# ---- loops in the light form (emit.run_light_while) ---------------------------------------------
def _loop_region(g: tn.Graph, fetch: tn.Tensor, feeds: list[tn.Tensor]) -> Any:
    from turnout.fast.functionalize import functionalize
    from turnout.fast.regions import WhileRegion

    return next(it for it in functionalize(g, [fetch], feeds).items if isinstance(it, WhileRegion))


def test_a_loop_with_a_comparison_header_is_light_and_its_counters_are_found() -> None:
    from turnout.fast.facts import counters, light_header

    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        # loop var 0 is while_loop's own counter; i counts too; j steps by 2; k counts a float
        _, _, y = tn.while_loop(lambda i, j, y: i < n, lambda i, j, y: (i + 1, j + 2, y * 2.0),
                                [tn.constant(0), tn.constant(0), tn.constant(1.0)])
    r = _loop_region(g, y, [n])
    assert light_header(r)
    names = {r.loop_vars[j][0].inputs[0].node.name for j in counters(r)}
    # the builder's counter and i (each starts from a constant of its own); j (+2) and y are no counters
    assert len(names) == 2 and any("counter_init" in s for s in names)
    assert len(r.loop_vars) >= 3


def test_a_header_that_can_fail_is_not_light() -> None:
    from turnout.fast.facts import light_header

    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        # integer division may fail (by zero): the header must run once per iteration, not be recomputed
        (y,) = tn.while_loop(lambda i: (n // i) > 1, lambda i: i + 1, [tn.constant(1)])
    assert not light_header(_loop_region(g, y, [n]))
    for backend in ("reference", "fast"):
        assert int(tn.Session(g, backend=backend).run(y, {n: np.int32(5)})) == 3


@pytest.mark.parametrize("start", [0, 3])
def test_twin_counters_share_one_carry_slot_and_keep_their_values(start: int) -> None:
    """A user's counter that starts where while_loop's own does is carried once; one that starts
    elsewhere is carried on its own. Both give the reference's values, and the bound still counts
    iterations (not the user's counter) when the user's counter starts at 3."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        i, acc = tn.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a + i * 10),
                               [tn.constant(start), tn.constant(0)])
    want = tn.Session(g, backend="reference").run([i, acc], {n: np.int32(7)})
    got = tn.Session(g, backend="fast").run([i, acc], {n: np.int32(7)})
    assert [int(v) for v in got] == [int(v) for v in want]
    # the budget counts iterations, not the user's counter (away from the boundary, where the
    # backends are known to differ by one: docs/missing.rst)
    trips = 7 - start
    for backend in ("reference", "fast"):
        sess = tn.Session(g, backend=backend)
        assert int(sess.run(i, {n: np.int32(7)}, max_iterations=trips + 1)) == 7
        with pytest.raises(tn.NonTerminationError):
            sess.run(i, {n: np.int32(7)}, max_iterations=trips - 1)


def test_an_inner_loop_over_budget_is_named_in_a_nest() -> None:
    """The iteration bound of a light loop nested in others: the loop that runs over is the one the
    error names, on both backends, and its enclosing loops stop with the same error type."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        outer_n = tn.placeholder(tn.int32, [], name="outer_n")
        inner_n = tn.placeholder(tn.int32, [], name="inner_n")

        def inner(w: Any) -> Any:
            return tn.while_loop(lambda j, v: j < inner_n, lambda j, v: (j + 1, v + 1.0),
                                 [tn.constant(0), w], name="inner")[1]

        _, y = tn.while_loop(lambda i, w: i < outer_n, lambda i, w: (i + 1, inner(w)),
                             [tn.constant(0), x], name="outer")
    feeds = {x: np.float32(0.0), outer_n: np.int32(3), inner_n: np.int32(5)}
    for backend in ("reference", "fast"):
        sess = tn.Session(g, backend=backend)
        assert float(sess.run(y, feeds, max_iterations=8)) == 15.0
        with pytest.raises(tn.NonTerminationError, match="loop frame 'outer/body/inner/"):
            sess.run(y, {**feeds, inner_n: np.int32(9)}, max_iterations=8)
        with pytest.raises(tn.NonTerminationError, match="loop frame 'outer/frame"):
            sess.run(y, {**feeds, outer_n: np.int32(9)}, max_iterations=8)
