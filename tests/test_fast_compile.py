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
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        trips = tn.placeholder(tn.int32, [], name="trips")

        def loops(d: int, v: Any) -> Any:
            if d == 0:
                return v * 1.5 + 1.0
            return tn.while_loop(lambda i, w: i < trips, lambda i, w: (i + 1, loops(d - 1, w)),
                                 [tn.constant(0), v])[1]

        y = loops(depth, x)
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
