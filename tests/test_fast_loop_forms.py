"""The form of a nest of counted loops is chosen before the nest is traced (``facts.hoistable``).

A nest whose iteration-bound checks are made before it (``CountedNests._hoist_checks``) must have
nothing inside that writes the error word, or errors would come in another order than on the
interpreters. That used to be found out while tracing: an error written inside a hoisted nest raised
``HoistConflict``, and the nest was traced a second time without hoisting. These tests pin every
program of the test suite that took that retrace (found by instrumenting the handler): those the
analysis now decides before tracing are traced once, and those only the trace can tell about (an
index the counters' ranges cannot prove) are traced twice, the second time as the outcome of the
first (``LightLoops._emit_hoisted`` returns ``None``), with the interpreter's answer either way.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np
import pytest

import turnout as tn

jax = pytest.importorskip("jax")

from turnout.fast import facts  # noqa: E402
from turnout.fast.emit import Emitter  # noqa: E402
from turnout.fast.functionalize import functionalize  # noqa: E402
from turnout.fast.regions import WhileRegion  # noqa: E402


def _run(sess: tn.Session, y: Any, feed: dict[Any, Any], mi: int = 10) -> tuple[str, Any]:
    """The value, or the error and what it names (the interpreters add the tag it ran at)."""
    try:
        return "value", np.asarray(sess.run(y, feed, max_iterations=mi)).tolist()
    except tn.TurnoutError as e:
        return type(e).__name__, str(e).split(" (")[0]


def _outcome(backend: str, g: tn.Graph, y: Any, feed: dict[Any, Any], mi: int = 10) -> tuple[str, Any]:
    return _run(tn.Session(g, backend=backend), y, feed, mi)


def _hoisting(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each hoisted trace of a nest from now on: True where it stood, False where the trace refuted
    it (and the nest was traced again)."""
    got: list[bool] = []
    emit_hoisted = Emitter._emit_hoisted

    def counting(self: Any, *args: Any) -> Any:
        kept = emit_hoisted(self, *args)
        got.append(kept is not None)
        return kept

    monkeypatch.setattr(Emitter, "_emit_hoisted", counting)
    return got


def _root_loop(g: tn.Graph, y: Any, feeds: list[Any]) -> WhileRegion:
    program = functionalize(g, [y], feeds)
    (loop,) = [it for it in program.items if isinstance(it, WhileRegion)]
    return loop


# ---- the programs that took the retrace, decided before tracing now ---------------------------------
def _inner_bound_inside() -> tuple[tn.Graph, Any, dict[str, Any]]:
    """An inner loop bounded by ``i + 2``, computed in the outer body: not on the nest's chain."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")

        def outer(i: Any, acc: Any) -> Any:
            _, a = tn.while_loop(lambda j, a: j < i + 2, lambda j, a: (j + 1, a + 1.0), [tn.constant(0), acc])
            return i + 1, a

        _, y = tn.while_loop(lambda i, acc: i < n, outer, [tn.constant(0), tn.constant(0.0)])
    return g, y, {"n": n}


def _count_pairs() -> tuple[tn.Graph, Any, dict[str, Any]]:
    """``sum_{i<n} sum_{j<i} 1``: the inner bound is the outer counter."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")

        def outer(i: Any, acc: Any) -> Any:
            _, inner = tn.while_loop(lambda j, a: j < i, lambda j, a: (j + 1, a + 1), [tn.constant(0), acc])
            return i + 1, inner

        _, y = tn.while_loop(lambda i, a: i < n, outer, [tn.constant(0), tn.constant(0)])
    return g, y, {"n": n}


def _siblings() -> tuple[tn.Graph, Any, dict[str, Any]]:
    """Two loops side by side in one body: a chain follows one loop per level."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        m = tn.placeholder(tn.int32, [], name="m")

        def outer(i: Any, acc: Any) -> Any:
            _, a = tn.while_loop(lambda j, a: j < m, lambda j, a: (j + 1, a + 1.0), [tn.constant(0), acc])
            _, b = tn.while_loop(lambda j, a: j < m, lambda j, a: (j + 1, a * 2.0), [tn.constant(0), a])
            return i + 1, b

        _, y = tn.while_loop(lambda i, acc: i < n, outer, [tn.constant(0), tn.constant(1.0)])
    return g, y, {"n": n, "m": m}


def _fed_bound_read() -> tuple[tn.Graph, Any, dict[str, Any]]:
    """A read at the counter of a loop whose bound is fed: the counter has no range when tracing."""
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(np.array([1.0, 2.0, 4.0], np.float32))
        n = tn.placeholder(tn.int32, [], name="n")
        ta = tn.TensorArray(tn.float32, size=3).unstack(x)
        _, y = tn.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + ta.read(i)),
                             [tn.constant(0), tn.constant(0.0)])
    return g, y, {"n": n}


#: each program with its runs (feeds, ``max_iterations``): values, and runs where one loop alone runs
#: away or one read fails (with several, the interpreter's answer depends on how far it lets outer
#: iterations run ahead)
DECIDED = {
    "inner_bound_inside": (_inner_bound_inside, [({"n": 3}, 10), ({"n": 4}, 5), ({"n": 4}, 4), ({"n": 2}, 3)]),
    "count_pairs": (_count_pairs, [({"n": 3}, 10), ({"n": 0}, 10), ({"n": 5}, 4)]),
    "siblings": (_siblings, [({"n": 3, "m": 2}, 10), ({"n": 2, "m": 5}, 4), ({"n": 5, "m": 1}, 4)]),
    "fed_bound_read": (_fed_bound_read, [({"n": 3}, 10), ({"n": 0}, 10), ({"n": 4}, 10)]),
}


@pytest.mark.parametrize("name", sorted(DECIDED))
def test_a_nest_that_cannot_be_hoisted_is_known_before_it_is_traced(name: str, monkeypatch: pytest.MonkeyPatch
                                                                     ) -> None:
    """No hoisted trace is refuted (the nest these loops are in is not hoisted, decided before it is
    traced), and every outcome, values and runaway loops alike, is the interpreter's."""
    build, runs = DECIDED[name]
    g, y, ph = build()
    hoisted = _hoisting(monkeypatch)
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g)
    for vals, mi in runs:
        feed = {t: np.int32(vals[k]) for k, t in ph.items()}
        assert _run(fast, y, feed, mi) == _run(ref, y, feed, mi), (name, vals, mi)
    assert False not in hoisted  # (an inner loop may be hoisted alone: a nest of its own, decided as such)


def test_the_analysis_reads_the_nest_and_the_bounds_at_its_head() -> None:
    """``facts.hoistable`` on the programs above: a loop off the chain refuses hoisting whatever the
    bounds; an index at a counter needs that counter's bound known when tracing."""
    g, y, ph = _fed_bound_read()
    loop = _root_loop(g, y, list(ph.values()))
    assert facts.cannot_fail(loop.nodes, facts.counter_merges(loop))
    assert facts.indexing_counters(loop) == facts.counter_merges(loop)
    traced = jax.numpy.int32(3)  # (not a numpy value: a bound known only when the program runs)
    assert not facts.hoistable(loop, [(loop, traced)])
    assert facts.hoistable(loop, [(loop, np.int32(3))])
    g, y, ph = _count_pairs()
    loop = _root_loop(g, y, list(ph.values()))
    assert len(facts.nest_loops(loop)) == 2 and facts.indexing_counters(loop) == frozenset()
    assert not facts.hoistable(loop, [(loop, np.int32(3))])  # (the inner loop is off the chain)


# ---- the programs only the trace can tell about: traced again, as an outcome ---------------------------
def _short_second_array() -> tuple[tn.Graph, Any, dict[str, Any], dict[str, Any]]:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, [None], name="a")
        b = tn.placeholder(tn.float32, [None], name="b")
        y = tn.foldl(lambda c, e: c + tn.foldl(lambda c2, e2: c2 + e2[0] * e2[1], (a, b), initializer=e[0] * e[1],
                                               parallel_iterations=1),
                     (a, b), initializer=tn.constant(0.0), parallel_iterations=1)
    return g, y, {"a": a, "b": b}, {"a": np.array([1.0, 2.0, 3.0], np.float32), "b": np.array([4.0, 5.0], np.float32)}


def _slot_written_before() -> tuple[tn.Graph, Any, dict[str, Any], dict[str, Any]]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        ta0 = tn.TensorArray(tn.float32, size=3, element_shape=[]).write(1, x)
        _, ta = tn.while_loop(lambda i, ta: i < 3, lambda i, ta: (i + 1, ta.write(i, x * 2.0)),
                              [tn.constant(0), ta0])
        y = ta.stack()
    return g, y, {"x": x}, {"x": np.float32(1.0)}


def _index_past_the_end() -> tuple[tn.Graph, Any, dict[str, Any], dict[str, Any]]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        n = tn.constant(4)
        _, y = tn.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + x[i] * x[n - 1 - i]),
                             [tn.constant(0), tn.constant(0.0)])
    return g, y, {"x": x}, {"x": np.arange(1, 4, dtype=np.float32)}


def _outer_counter_slot() -> tuple[tn.Graph, Any, dict[str, Any], dict[str, Any]]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def outer(i: Any, ta: Any) -> Any:
            _, ta = tn.while_loop(lambda j, t: j < 2, lambda j, t: (j + 1, t.write(i, x)), [tn.constant(0), ta])
            return i + 1, ta

        _, ta = tn.while_loop(lambda i, ta: i < 3, outer,
                              [tn.constant(0), tn.TensorArray(tn.float32, size=3, element_shape=[])])
        y = ta.stack()
    return g, y, {"x": x}, {"x": np.float32(1.0)}


REFUTED = {"short_second_array": _short_second_array, "slot_written_before": _slot_written_before,
           "index_past_the_end": _index_past_the_end, "outer_counter_slot": _outer_counter_slot}


@pytest.mark.parametrize("name", sorted(REFUTED))
def test_a_nest_the_trace_refutes_is_traced_once_more(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One hoisted trace, refuted; the nest traced again without hoisting; the interpreter's error."""
    g, y, ph, vals = REFUTED[name]()
    hoisted = _hoisting(monkeypatch)
    feed = {t: vals[k] for k, t in ph.items()}
    want = _outcome("reference", g, y, feed)
    assert want[0] == "KernelError"
    assert _outcome("fast", g, y, feed) == want
    assert hoisted == [False]


def test_a_nest_that_can_be_hoisted_is_hoisted_once() -> None:
    """The other side: a nest of counted loops with fed bounds and bodies that cannot fail is traced
    once, hoisted, with the interpreter's outcomes."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        m = tn.placeholder(tn.int32, [], name="m")

        def outer(i: Any, v: Any) -> Any:
            _, w = tn.while_loop(lambda j, w: j < m, lambda j, w: (j + 1, w + 1.0), [tn.constant(0), v])
            return i + 1, w

        _, y = tn.while_loop(lambda i, v: i < n, outer, [tn.constant(0), x])
    with pytest.MonkeyPatch.context() as mp:
        hoisted = _hoisting(mp)
        fast, ref = tn.Session(g, backend="fast"), tn.Session(g)
        for nv, mv, mi in [(2, 3, 5), (2, 6, 5), (6, 2, 5)]:
            feed = {x: np.float32(1.0), n: np.int32(nv), m: np.int32(mv)}
            assert _run(fast, y, feed, mi) == _run(ref, y, feed, mi)
    assert hoisted == [True]  # (one trace: fed bounds and budgets never recompile)


@pytest.mark.parametrize("element_shape", [None, [2]], ids=["pending", "known"])
def test_a_carry_is_made_concrete_once_and_the_body_traced_for_it(element_shape: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop whose carry holds a TensorArray of unknown element shape (pending until its first
    write) is traced once to learn the written array's type and once more with the array made
    (``loops.discover``, by ``tracing.reconcile``, which says whether anything changed); a carry of
    known types is traced once. Why count: a ``reconcile`` that said "changed" for a settled carry
    would trace every loop body up to eight times, and one that kept a pending array would leave the
    carry's type changing across iterations."""
    from turnout.fast import loops

    made = []

    class Counting(loops.Traced):  # type: ignore[misc, name-defined]
        def __init__(self, fn: Any, *args: Any) -> None:
            made.append(fn)
            super().__init__(fn, *args)

    monkeypatch.setattr(loops, "Traced", Counting)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")
        ta = tn.TensorArray(tn.float32, size=3, element_shape=element_shape)
        _, ta = tn.while_loop(lambda i, t: i < 3, lambda i, t: (i + 1, t.write(i, x * tn.cast(i, tn.float32))),
                              [tn.constant(0), ta])
        y = ta.stack()
    xv = np.array([1.0, -2.0], np.float32)
    np.testing.assert_array_equal(tn.Session(g, backend="fast").run(y, {x: xv}), tn.Session(g).run(y, {x: xv}))
    assert len(made) == (2 if element_shape is None else 0)  # (a settled carry: the body as it is, traced once)


@pytest.mark.parametrize("trips", [0, 2])
def test_a_loop_whose_predicate_holds_a_case_reads_the_cases_invariants(trips: int) -> None:
    """A loop whose predicate runs a ``case`` (a cond region in the loop's header, not a node) that
    reads an invariant of the loop, and whose loop variable changes shape (an input of unknown rank,
    fed a vector, summed to a scalar), so it is unrolled: the light loop gathers the invariants its
    header reads from every node of the header's items, a region's too. Found by the ``dev`` profile
    of ``test_generated_gradients_over_batches_of_unknown_size_compile_and_agree``: the fast backend
    raised ``AttributeError`` where the reference ran."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        x = tn.placeholder(tn.float64, None, name="x")

        def cond(i: Any, v: Any) -> Any:
            picked = tn.case(tn.constant(0), [lambda: n, lambda: n + 1], default=lambda: n + 2)
            return tn.logical_and(i < 2, i < picked)

        _, y = tn.while_loop(cond, lambda i, v: (i + 1, tn.reduce_sum(v) * 2.0), [tn.constant(0), x],
                             parallel_iterations=1)
        (dx,) = tn.gradients(y, [x])
    feeds = {n: trips, x: np.array([1.0, -0.5])}
    want = tn.Session(g).run([y, dx], feeds)
    # (with trips, ``v`` goes from a vector to a scalar: the run is the interpreter's, and says so)
    with pytest.warns(RuntimeWarning, match="changes type or shape across iterations") if trips else nullcontext():
        got = tn.Session(g, backend="fast").run([y, dx], feeds)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b)
