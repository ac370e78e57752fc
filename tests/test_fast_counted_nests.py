"""Nests of counted loops check their iteration bounds before they are entered (``Emitter._hoist_checks``).

A counted loop (counter from 0 advanced by 1, predicate ``counter < bound`` with the bound entered
unchanged) runs exactly ``bound`` bodies, so whether it goes over ``max_iterations`` is known before
it starts. The fast backend makes that check once, at the head of a nest of such loops, instead of
after each loop: a check after each loop writes the error word, which then is a loop variable of
every loop around it, and that doubled XLA's compile time of deep nests. These tests hold the
hoisted checks to the interpreters' outcomes, and pin that a hoisted nest's bodies leave the error
word alone.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import turnout as tn

jax = pytest.importorskip("jax")


def _nest(bounds: list[Any], depth: int, v: Any, divisor: Any = None) -> Any:
    if depth == len(bounds):
        return v * 1.5 + 1.0 if divisor is None else v + tn.cast(10 // divisor, tn.float32)
    _, w = tn.while_loop(lambda i, w: i < bounds[depth],
                         lambda i, w: (i + 1, _nest(bounds, depth + 1, w, divisor)),
                         [tn.constant(0), v], name=f"L{depth}")
    return w


def _build(depth: int, divide: bool = False) -> tuple[tn.Graph, Any, list[Any], Any, Any]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        bounds = [tn.placeholder(tn.int32, [], name=f"b{k}") for k in range(depth)]
        d = tn.placeholder(tn.int32, [], name="d") if divide else None
        y = _nest(bounds, 0, x, d)
    return g, x, bounds, d, y


def _outcome(backend: str, g: tn.Graph, y: Any, feed: dict[Any, Any], mi: int) -> tuple[str, Any]:
    try:
        return "value", float(tn.Session(g, backend=backend).run(y, feed, max_iterations=mi))
    except tn.TurnoutError as e:  # the error and what it names (the interpreters add the tag it ran at)
        return type(e).__name__, str(e).split(" (")[0]


@pytest.mark.parametrize("bounds", [[2, 3], [2, 7], [7, 2], [0, 7], [7, 0], [1, 1, 6, 1], [1, 6, 0, 6], [2, 2, 2],
                                    [5, 5], [6, 1, 1]])
def test_a_counted_nest_stops_where_the_interpreter_does(bounds: list[int]) -> None:
    """Values, or the error and the loop it names, as the reference interpreter gives them, when at
    most one level of the nest goes over the bound (with several, the interpreter's answer depends
    on how far its schedule lets outer iterations run ahead; the fast backend names the innermost,
    as it did when each loop checked after itself). A loop that is never entered (a bound of 0
    above it) goes over nothing."""
    mi = 5
    g, x, bs, _, y = _build(len(bounds))
    feed = {x: 1.0, **dict(zip(bs, bounds, strict=True))}
    assert _outcome("fast", g, y, feed, mi) == _outcome("reference", g, y, feed, mi)


def test_with_several_loops_over_the_bound_the_innermost_entered_is_named() -> None:
    g, x, bs, _, y = _build(4)
    feed = {x: 1.0, bs[0]: 6, bs[1]: 6, bs[2]: 6, bs[3]: 2}
    kind, text = _outcome("fast", g, y, feed, 5)
    assert kind == "NonTerminationError" and "L2/frame2" in text
    feed[bs[0]] = 0  # nothing inside an empty loop runs
    assert _outcome("fast", g, y, feed, 5) == ("value", 1.0)


@pytest.mark.parametrize(("bounds", "divisor"), [([2, 3], 0), ([2, 7], 0), ([2, 7], 1), ([7, 2], 0)])
def test_a_nest_that_can_fail_otherwise_keeps_the_interpreters_order(bounds: list[int], divisor: int) -> None:
    """An integer division in the innermost body can fail before a bound is spent: such a nest
    checks each loop after it, so a division by zero in the first iteration is reported, not the
    runaway loop it sits in."""
    g, x, bs, d, y = _build(len(bounds), divide=True)
    feed = {x: 1.0, d: divisor, **dict(zip(bs, bounds, strict=True))}
    assert _outcome("fast", g, y, feed, 5) == _outcome("reference", g, y, feed, 5)


def _while_eqns(jaxpr: Any) -> list[Any]:
    """Every ``while`` equation nested in ``jaxpr``."""
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "while":
            out.append(eqn)
        for sub in eqn.params.values():
            for j in sub if isinstance(sub, (list, tuple)) else [sub]:
                inner = getattr(j, "jaxpr", None)
                if inner is not None and hasattr(inner, "eqns"):
                    out += _while_eqns(inner)
    return out


def _while_bodies(jaxpr: Any) -> list[Any]:
    """Every ``while`` body jaxpr nested in ``jaxpr``."""
    return [e.params["body_jaxpr"].jaxpr for e in _while_eqns(jaxpr)]


def _traced(g: tn.Graph, y: Any, feed: dict[Any, Any]) -> Any:
    """The jaxpr of the ``Direct`` call that runs ``y`` with ``feed``."""
    sess = tn.Session(g, backend="fast")
    sess.run(y, feed)
    (d,) = sess.backend._direct.values()
    by_key = {(t.node.id, t.index): v for t, v in feed.items()}
    feed_vals = tuple(np.asarray(by_key[k], dtype=sess.backend.graph.nodes[k[0]].outputs[k[1]].dtype.numpy)
                      for k in d.args.feeds)
    with jax.enable_x64(True):
        return d.fn.trace(*feed_vals, np.int32(100)).jaxpr.jaxpr


def _traced_bodies(g: tn.Graph, y: Any, feed: dict[Any, Any]) -> list[Any]:
    return _while_bodies(_traced(g, y, feed))


def test_a_hoisted_nest_leaves_the_error_word_alone_in_its_bodies() -> None:
    """No loop body of a counted nest selects a new error word: the bodies compute the nest's values
    and counters only (a nest that divides integers writes the word in its bodies, as before)."""
    g, x, bs, _, y = _build(3)
    feed = {x: np.float32(1.0), **{b: np.int32(2) for b in bs}}
    bodies = _traced_bodies(g, y, feed)
    assert len(bodies) == 3
    assert not [e for b in bodies for e in b.eqns if e.primitive.name == "select_n"]
    g, x, bs, d, y = _build(3, divide=True)
    bodies = _traced_bodies(g, y, {x: np.float32(1.0), d: np.int32(1), **{b: np.int32(2) for b in bs}})
    assert [e for b in bodies for e in b.eqns if e.primitive.name == "select_n"]


def _nest_with(extra: Any, depth: int) -> tuple[tn.Graph, Any, Any, Any, Any]:
    """A ``depth``-level counted nest whose every body gives ``extra(inner value, counter, s)`` (``s``
    a fed float); returns (graph, x, the fed bound, s, y)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        t = tn.placeholder(tn.int32, [], name="t")
        s = tn.placeholder(tn.float32, [], name="s")

        def level(d: int, v: Any) -> Any:
            if d == depth:
                return v * 1.5 + 1.0
            _, w = tn.while_loop(lambda i, w: i < t, lambda i, w: (i + 1, extra(level(d + 1, w), i, s)),
                                 [tn.constant(0), v], name=f"L{d}")
            return w

        y = level(0, x)
    return g, x, t, s, y


def _same_outcome(got: tuple[str, Any], want: tuple[str, Any]) -> None:
    """The same value or error; with every level of a nest over its bound, the same error type (the
    reference may name an outer loop, its schedule running outer iterations ahead)."""
    if want[0] == "NonTerminationError":
        assert got[0] == want[0]
    else:
        assert got == want


#: bodies made of ops that never fail, casts that cannot fail among them: their nests are hoisted
CANNOT_FAIL_BODIES = {
    "counter cast to float": lambda w, i, s: w + tn.cast(i, tn.float32) * s,
    "int32 to int64 and back": lambda w, i, s: w + tn.cast(tn.cast(i, tn.int64) * 0, tn.float32),
    "stop_gradient and zeros_like": lambda w, i, s: tn.stop_gradient(w) + tn.zeros_like(w) * s,
    "shape and size": lambda w, i, s: w + tn.cast(tn.size(tn.shape(w)), tn.float32) * s,
}


@pytest.mark.parametrize("name", sorted(CANNOT_FAIL_BODIES))
def test_ops_that_cannot_fail_leave_the_nest_hoisted(name: str) -> None:
    g, x, t, s, y = _nest_with(CANNOT_FAIL_BODIES[name], 3)
    feed = {x: np.float32(1.0), t: np.int32(2), s: np.float32(0.5)}
    bodies = _traced_bodies(g, y, feed)
    assert len(bodies) == 3 and not [e for b in bodies for e in b.eqns if e.primitive.name == "select_n"]
    for tv, mi in [(2, 5), (3, 2), (0, 1)]:
        run = {**feed, t: tv}
        _same_outcome(_outcome("fast", g, y, run, mi), _outcome("reference", g, y, run, mi))


def test_a_cast_from_float_to_int_is_checked_where_it_runs() -> None:
    """A float cast to an integer fails on a NaN: such a nest checks each loop after it runs, and the
    outcome is the interpreter's whether the cast or a bound fails."""
    g, x, t, s, y = _nest_with(lambda w, i, s: w + tn.cast(tn.cast(w * s, tn.int32), tn.float32), 3)
    feed = {x: np.float32(1.0), t: np.int32(2), s: np.float32(0.5)}
    assert [e for b in _traced_bodies(g, y, feed) for e in b.eqns if e.primitive.name == "select_n"]
    for sv, tv, mi in [(0.5, 2, 5), (np.nan, 2, 5), (0.5, 4, 3), (np.nan, 0, 5)]:
        run = {x: np.float32(1.0), t: np.int32(tv), s: np.float32(sv)}
        _same_outcome(_outcome("fast", g, y, run, mi), _outcome("reference", g, y, run, mi))


def test_a_bound_computed_inside_the_nest_is_checked_after_its_loop() -> None:
    """An inner loop whose bound is computed in the outer body (here ``i + 2``) is not part of the
    hoisted nest: it checks itself after it runs, and the outcome is the interpreter's."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")

        def outer(i: Any, acc: Any) -> Any:
            _, a = tn.while_loop(lambda j, a: j < i + 2, lambda j, a: (j + 1, a + 1.0), [tn.constant(0), acc],
                                 name="inner")
            return i + 1, a

        _, y = tn.while_loop(lambda i, acc: i < n, outer, [tn.constant(0), tn.constant(0.0)], name="outer")
    for nv, mi in [(3, 10), (4, 5), (4, 4), (6, 10), (2, 3)]:  # (4, 4): the inner loop alone runs away
        feed = {n: nv}
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # compiled, not the fallback
            got = _outcome("fast", g, y, feed, mi)
        assert got == _outcome("reference", g, y, feed, mi), (nv, mi)


def test_a_deep_counted_nest_names_the_loop_that_runs_away() -> None:
    """Forty levels, one of them over the bound: the loop the interpreter names."""
    depth = 40
    g, x, bs, _, y = _build(depth)
    feed = {x: 1.0, **{b: 1 for b in bs}}
    feed[bs[23]] = 4
    want = _outcome("reference", g, y, feed, 3)
    assert want[0] == "NonTerminationError" and "L23/frame23" in want[1]
    assert _outcome("fast", g, y, feed, 3) == want
    feed[bs[23]] = 3
    assert _outcome("fast", g, y, feed, 3) == _outcome("reference", g, y, feed, 3)


def _rounding(bounds: list[int]) -> float:
    """The relative tolerance of a nest's float32 value: XLA may fuse ``v * 1.5 + 1`` into one
    rounding (a fused multiply-add) where numpy rounds twice, so each of the innermost body's runs
    may move the value by about one float32 ulp more."""
    return 1e-6 + 1.2e-7 * float(np.prod(bounds))


def test_regression_a_long_nest_differs_by_its_fused_roundings_only() -> None:
    """Found by the ``dev`` profile of ``test_counted_nests_agree_with_the_interpreter``: 144 runs of
    the innermost body reach 6.8e25, where fused and unfused roundings differ by 1.4e-6 relatively,
    more than the property's former fixed tolerance (1e-6)."""
    bounds = [4, 6, 6]
    g, x, bs, _, y = _build(3)
    feed = {x: 1.0, **dict(zip(bs, bounds, strict=True))}
    got, want = _outcome("fast", g, y, feed, 6), _outcome("reference", g, y, feed, 6)
    assert got[0] == want[0] == "value" and np.isclose(got[1], want[1], rtol=_rounding(bounds))
    assert not np.isclose(got[1], want[1] * 1.5, rtol=_rounding(bounds))  # one iteration more is caught


_SESSIONS: dict[tuple[int, bool], Any] = {}


def _sessions(depth: int, divide: bool) -> Any:
    """The graph of a ``depth``-level nest with one session per backend, built once per shape (the
    fast backend compiles each shape once; fed bounds and budgets never recompile)."""
    if (depth, divide) not in _SESSIONS:
        g, x, bs, d, y = _build(depth, divide)
        _SESSIONS[(depth, divide)] = (g, x, bs, d, y, tn.Session(g), tn.Session(g, backend="fast"))
    return _SESSIONS[(depth, divide)]


@given(st.data())
def test_counted_nests_agree_with_the_interpreter(data: Any) -> None:
    """Random depths, bounds (0 to 6), budgets (1 to 6) and an integer division that may fail: the
    fast backend gives the reference's value, or its error type; when one level alone runs away
    and nothing else fails, the loop it names too."""
    depth = data.draw(st.integers(1, 5), label="depth")
    divide = data.draw(st.booleans(), label="divide")
    bounds = data.draw(st.lists(st.integers(0, 6), min_size=depth, max_size=depth), label="bounds")
    mi = data.draw(st.integers(1, 6), label="max_iterations")
    divisor = data.draw(st.integers(0, 2), label="divisor") if divide else None
    _, x, bs, d, y, ref, fast = _sessions(depth, divide)
    feed = {x: 1.0, **dict(zip(bs, bounds, strict=True))}
    if divide:
        feed[d] = divisor

    def outcome(sess: Any) -> tuple[str, Any]:
        try:
            return "value", float(sess.run(y, feed, max_iterations=mi))
        except tn.TurnoutError as e:
            return type(e).__name__, str(e).split(" (")[0]

    want, got = outcome(ref), outcome(fast)
    entered = [all(b > 0 for b in bounds[:j]) for j in range(depth)]
    over = [j for j in range(depth) if entered[j] and bounds[j] > mi]
    divides_by_zero = divide and divisor == 0 and all(b > 0 for b in bounds)
    if over and divides_by_zero:
        # two mistakes: which the interpreter meets first depends on how far its schedule lets outer
        # iterations run ahead, so both backends must fail, each with one of them
        assert {want[0], got[0]} <= {"NonTerminationError", "KernelError"}
    elif len(over) > 1:
        assert got[0] == want[0] == "NonTerminationError"
    elif want[0] == "value":
        assert got[0] == "value" and np.isclose(got[1], want[1], rtol=_rounding(bounds))
    else:
        assert got == want


# ---- folds: reads at the counter cannot fail (``fast.ranges``) ------------------------------------
FOLDS = {"foldl": tn.foldl, "foldr": tn.foldr}


def _fold_nest(fold: str, depth: int, init: bool, x_shape: Any = (3,)) -> tuple[tn.Graph, Any, Any]:
    """``depth`` folds nested in one another over one fed vector, each step adding the inner fold of
    its element (without an initializer a fold starts from an element, its counter from 1)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, list(x_shape), name="x")
        f = FOLDS[fold]

        def level(d: int) -> Any:
            if d == depth - 1:
                return lambda c, e: c * 0.5 + e
            return lambda c, e: c + f(level(d + 1), x, initializer=e if init else None) * 0.25

        y = f(level(0), x, initializer=tn.constant(0.0) if init else None)
    return g, x, y


@pytest.mark.parametrize("init", [True, False], ids=["initializer", "from an element"])
@pytest.mark.parametrize("fold", sorted(FOLDS))
def test_a_nest_of_folds_reads_its_elements_without_checks(fold: str, init: bool) -> None:
    """The folds' reads at their counters (``n - 1 - i`` for ``foldr``) are proved in range while
    tracing, and the inner folds' bounds (the length of their elements, taken inside the outer
    bodies) are known at the head: the nest's bodies select no error word, and its values are the
    interpreter's."""
    g, x, y = _fold_nest(fold, 3, init)
    xv = np.array([0.5, -1.0, 2.0], np.float32)
    jaxpr = _traced(g, y, {x: xv})
    bodies = _while_bodies(jaxpr)
    assert len(bodies) == 3 and not [e for b in bodies for e in b.eqns if e.primitive.name == "select_n"]
    # the bounds are static (the vector's length, less one without an initializer) and the nest small
    # (``emit.SMALL_NEST``): its loops test their headers alone, with no cond around the nest
    assert [e.primitive.name for e in jaxpr.eqns if e.primitive.name in ("cond", "while")] == ["while"]
    for w in _while_eqns(jaxpr):
        assert [e.primitive.name for e in w.params["cond_jaxpr"].jaxpr.eqns] == ["lt"]
    for v in (xv, np.array([3.0, 0.25, -0.5], np.float32)):
        want = tn.Session(g).run(y, {x: v})
        assert np.allclose(tn.Session(g, backend="fast").run(y, {x: v}), want, rtol=1e-6)


def test_regression_a_deep_nest_of_folds_is_checked_once() -> None:
    """Found by ``benchmarks/compile_time.py``: the inner folds' bounds were followed through at most
    16 loops around them (``Emitter._bound_at_head`` counted each hop out of a loop against its
    depth), so a 24-level nest of folds checked its 8 innermost loops after each, and compiled in
    4.7 times JAX's time. Every level is now in the hoisted nest."""
    g, x, y = _fold_nest("foldl", 24, True, x_shape=(1,))
    bodies = _traced_bodies(g, y, {x: np.array([0.5], np.float32)})
    assert len(bodies) == 24 and not [e for b in bodies for e in b.eqns if e.primitive.name == "select_n"]
    want = tn.Session(g).run(y, {x: np.array([0.5], np.float32)})
    assert np.allclose(tn.Session(g, backend="fast").run(y, {x: np.array([0.5], np.float32)}), want, rtol=1e-6)


@pytest.mark.parametrize("init", [True, False], ids=["initializer", "from an element"])
@pytest.mark.parametrize("fold", sorted(FOLDS))
def test_a_nest_of_folds_runs_away_where_the_interpreter_does(fold: str, init: bool) -> None:
    """The hoisted bounds count the bodies each fold runs: three with an initializer, two from an
    element; a budget below that fails, as the interpreter does."""
    g, x, y = _fold_nest(fold, 2, init)
    feed = {x: np.array([0.5, -1.0, 2.0], np.float32)}
    for mi in (1, 2, 3, 4):
        _same_outcome(_outcome("fast", g, y, feed, mi), _outcome("reference", g, y, feed, mi))


def test_a_fold_over_elements_of_different_lengths_reads_out_of_range_as_the_interpreter_does() -> None:
    """Two element tensors whose lengths are known only when fed: the fold's bound is the first's
    length, so a shorter second cannot be proved in range and is checked (the trace refutes the
    nest's hoisted checks, and the nest is traced again with its checks after each loop,
    ``LightLoops.run_light_while``); the read past its end fails as on the interpreter."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, [None], name="a")
        b = tn.placeholder(tn.float32, [None], name="b")
        # (one iteration at a time: the interpreter then meets the inner fold's failing read first,
        # as the compiled nest does; with outer iterations running ahead, the outer fold's may come
        # first)
        y = tn.foldl(lambda c, e: c + tn.foldl(lambda c2, e2: c2 + e2[0] * e2[1], (a, b), initializer=e[0] * e[1],
                                               parallel_iterations=1),
                     (a, b), initializer=tn.constant(0.0), parallel_iterations=1)
    for av, bv in [([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]), ([1.0, 2.0, 3.0], [4.0, 5.0]), ([1.0], [2.0, 3.0])]:
        feed = {a: np.array(av, np.float32), b: np.array(bv, np.float32)}
        assert _outcome("fast", g, y, feed, 10) == _outcome("reference", g, y, feed, 10), (av, bv)


def test_a_read_at_a_fed_bound_is_checked() -> None:
    """A loop that reads an unstacked vector at its counter up to a fed bound: the bound is not known
    when tracing, so the read is checked, and a bound past the vector's end fails as on the
    interpreter."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        ta = tn.TensorArray(tn.float32, size=3).unstack(x)
        _, y = tn.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + ta.read(i)),
                             [tn.constant(0), tn.constant(0.0)])
    for nv in (0, 2, 3, 4):
        feed = {x: np.array([1.0, 2.0, 4.0], np.float32), n: nv}
        assert _outcome("fast", g, y, feed, 10) == _outcome("reference", g, y, feed, 10), nv


@pytest.mark.parametrize("length", [4, 3])
def test_an_index_at_the_counter_is_proved_or_checked(length: int) -> None:
    """``x[i]`` and ``x[n - 1 - i]`` for ``i < n`` over a vector of static length: in range when
    the vector holds ``n`` elements; with a bound past its end, the index out of range is the
    interpreter's error."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [length], name="x")
        n = tn.constant(4)
        _, y = tn.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + x[i] * x[n - 1 - i]),
                             [tn.constant(0), tn.constant(0.0)])
    feed = {x: np.arange(1, length + 1, dtype=np.float32)}
    assert _outcome("fast", g, y, feed, 10) == _outcome("reference", g, y, feed, 10)


# ---- a hoisted nest runs inside a cond on its checks ----------------------------------------------
def _static_nest(bound: int, depth: int) -> tuple[tn.Graph, Any, Any]:
    """``depth`` counted loops, each over the constant ``bound``, around ``v * 1.5 + 1``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def level(d: int, v: Any) -> Any:
            if d == depth:
                return v * 1.5 + 1.0
            _, w = tn.while_loop(lambda i, w: i < bound, lambda i, w: (i + 1, level(d + 1, w)),
                                 [tn.constant(0), v], name=f"L{d}")
            return w

        y = level(0, x)
    return g, x, y


def test_a_nest_over_its_budget_is_not_run() -> None:
    """Three loops of 10 000 iterations each under a budget of 100: the checks made before the nest
    fail, and the nest, whose loops no longer test the budget themselves, is skipped (run, it would
    take 10^12 iterations). The error is the interpreter's."""
    g, x, y = _static_nest(10_000, 3)
    assert _outcome("fast", g, y, {x: 1.0}, 100) == _outcome("reference", g, y, {x: 1.0}, 100)


@pytest.mark.parametrize(("bound", "wrapped"), [(2, False), (17, True)])
def test_the_loops_of_a_hoisted_nest_test_their_headers_alone(bound: int, wrapped: bool) -> None:
    """Each loop's test is its header's one comparison (no iteration bound), so XLA sees a constant
    trip count. A small nest (``2**3`` bodies) runs whole even when its checks fail; a larger one
    (``17**3`` bodies, above ``emit.SMALL_NEST``) sits in a ``cond`` on the checks made before it."""
    g, x, y = _static_nest(bound, 3)
    # (the interpreter's 4 913 bodies take seconds: no wall-clock limit, which a loaded machine passed)
    assert tn.Session(g, backend="fast").run(y, {x: 1.0}) == tn.Session(g).run(y, {x: 1.0}, max_seconds=None)
    jaxpr = _traced(g, y, {x: np.float32(1.0)})

    loops = _while_eqns(jaxpr)
    assert len(loops) == 3
    for w in loops:
        assert [e.primitive.name for e in w.params["cond_jaxpr"].jaxpr.eqns] == ["lt"]
    outer = [e.primitive.name for e in jaxpr.eqns if e.primitive.name in ("cond", "while")]
    assert outer == (["cond"] if wrapped else ["while"])
    # either way a budget below the bound is the interpreter's error (every level is over it: which
    # one is named may differ, see test_with_several_loops_over_the_bound_the_innermost_entered_is_named)
    for backend in ("fast", "reference"):
        with pytest.raises(tn.NonTerminationError, match=r"frame 'L\d/"):
            tn.Session(g, backend=backend).run(y, {x: 1.0}, max_iterations=bound - 1)

    # with every bound fed XLA sees no trip count: no cond, and each loop tests its bound itself
    g, x, bs, _, y = _build(3)
    jaxpr = _traced(g, y, {x: np.float32(1.0), **{b: np.int32(2) for b in bs}})
    assert [e.primitive.name for e in jaxpr.eqns if e.primitive.name in ("cond", "while")] == ["while"]
    for w in _while_eqns(jaxpr):
        assert [e.primitive.name for e in w.params["cond_jaxpr"].jaxpr.eqns].count("lt") == 2


# ---- scans and maps: writes at the counter are their slots' first ---------------------------------
def _scan_nest(kind: str, depth: int, reverse: bool = False, init: bool = True) -> tuple[tn.Graph, Any, Any]:
    """``depth`` scans (or maps) nested in one another over one fed three-element vector."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")

        def step(d: int) -> Any:
            if kind == "map":
                if d == depth - 1:
                    return lambda e: e * 2.0
                return lambda e: e + tn.reduce_sum(tn.map_fn(step(d + 1), x))
            if d == depth - 1:
                return lambda c, e: c * 0.5 + e
            return lambda c, e: c + tn.reduce_sum(tn.scan(step(d + 1), x, initializer=e if init else None,
                                                          reverse=reverse)) * 0.25

        if kind == "map":
            y = tn.map_fn(step(0), x)
        else:
            y = tn.scan(step(0), x, initializer=tn.constant(0.0) if init else None, reverse=reverse)
    return g, x, y


@pytest.mark.parametrize(("kind", "reverse", "init"), [("scan", False, True), ("scan", True, True),
                                                       ("scan", False, False), ("scan", True, False),
                                                       ("map", False, True)])
def test_a_nest_of_scans_writes_its_results_without_checks(kind: str, reverse: bool, init: bool) -> None:
    """A scan writes each carry at its counter (``n - 1 - i`` reversed; without an initializer after
    writing slot 0 or ``n - 1`` before the loop), a map each result: every write is its slot's first
    (``ranges.first_write``), so the nest's bodies select no error word, and the values are the
    interpreter's."""
    g, x, y = _scan_nest(kind, 3, reverse, init)
    xv = np.array([0.5, -1.0, 2.0], np.float32)
    bodies = _traced_bodies(g, y, {x: xv})
    assert len(bodies) == 3 and not [e for b in bodies for e in b.eqns if e.primitive.name == "select_n"]
    assert np.allclose(tn.Session(g, backend="fast").run(y, {x: xv}), tn.Session(g).run(y, {x: xv}), rtol=1e-6)


def test_a_nest_of_maps_traces_each_loop_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A map's output TensorArray enters its loop without an element shape; it takes its writes'
    static shape before the body is traced, so each loop of a nest of six maps is traced once (it
    was traced again once its shape was learnt, and a nest of ``k`` maps ``2^k`` times)."""
    from turnout.fast import emit

    calls: list[int] = []
    traced = emit.Emitter.run_light_while

    def counting(self: Any, r: Any, env: Any) -> None:
        calls.append(1)
        traced(self, r, env)

    monkeypatch.setattr(emit.Emitter, "run_light_while", counting)
    g, x, y = _scan_nest("map", 6)
    xv = np.array([0.5, -1.0, 2.0], np.float32)
    got = tn.Session(g, backend="fast").run(y, {x: xv})
    assert len(calls) == 6
    assert np.allclose(got, tn.Session(g).run(y, {x: xv}), rtol=1e-6)


def test_a_loop_writing_a_slot_written_before_it_fails_as_the_interpreter_does() -> None:
    """Slot 1 is written before a loop that writes slots 0 to 2 at its counter: the write is not
    proved a first write, it is checked, and the second write of slot 1 fails on both backends."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        ta0 = tn.TensorArray(tn.float32, size=3, element_shape=[]).write(1, x)
        _, ta = tn.while_loop(lambda i, ta: i < 3, lambda i, ta: (i + 1, ta.write(i, x * 2.0)),
                              [tn.constant(0), ta0])
        y = ta.stack()
    got, want = _outcome("fast", g, y, {x: 1.0}, 10), _outcome("reference", g, y, {x: 1.0}, 10)
    assert got == want and want[0] == "KernelError" and "TensorArrayWrite" in want[1]


def test_an_inner_loop_writing_the_outer_counter_fails_as_the_interpreter_does() -> None:
    """An inner loop that writes the *outer* loop's counter writes one slot in each of its bodies:
    not its own counter's slot, so checked, and the second write fails on both backends."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def outer(i: Any, ta: Any) -> Any:
            _, ta = tn.while_loop(lambda j, t: j < 2, lambda j, t: (j + 1, t.write(i, x)), [tn.constant(0), ta])
            return i + 1, ta

        _, ta = tn.while_loop(lambda i, ta: i < 3, outer,
                              [tn.constant(0), tn.TensorArray(tn.float32, size=3, element_shape=[])])
        y = ta.stack()
    got, want = _outcome("fast", g, y, {x: 1.0}, 10), _outcome("reference", g, y, {x: 1.0}, 10)
    assert got == want and want[0] == "KernelError" and "TensorArrayWrite" in want[1]


@pytest.mark.parametrize("op", ["//", "%", "**"])
def test_an_integer_op_on_a_constant_that_cannot_fail_leaves_the_nest_hoisted(op: str) -> None:
    """``i // 3``, ``i % 3`` and ``i ** 2`` cannot fail (the divisor has no zero, the exponent is not
    negative): the nest is hoisted, with the interpreter's outcomes. A divisor of 0 still fails as
    on the interpreter."""
    fns = {"//": lambda a, b: a // b, "%": lambda a, b: a % b, "**": lambda a, b: a ** b}
    for k, hoisted in [(3, True), (0, False)]:
        g, x, t, s, y = _nest_with(
            lambda w, i, s, k=k: w + tn.cast(fns[op](i, tn.constant(k if op != "**" else 2 - 3 * (k == 0))),
                                             tn.float32) * s, 3)
        feed = {x: np.float32(1.0), t: np.int32(2), s: np.float32(0.5)}
        if hoisted:  # (the other program fails when run)
            assert not [e for b in _traced_bodies(g, y, feed) for e in b.eqns if e.primitive.name == "select_n"]
        for tv, mi in [(2, 5), (3, 2)]:
            run = {**feed, t: tv}
            _same_outcome(_outcome("fast", g, y, run, mi), _outcome("reference", g, y, run, mi))
