"""Laws of a driven loop (``turnout.fast.driven``): the host's side between its compiled calls
(``drive_chunks``, ``DrivenLoop.run``) and the three traced bodies (``init``, ``chunk``, ``finish``).

Each law kills mutants of the full set of ``fast/driven.py`` (issue 40, part 3). The host's side is
checked on stand-ins: a chunk call that plays back the reports a test writes, and a store that
records what it is asked, so that each decision (when to stop, what to spill or refill, when no
progress means larger chunks, what each guard and call is given) is seen alone. The traced bodies
are checked on the smallest gradient that pushes a stack (``graphs.power_loop``, swapped, in chunks
of four entries) and on a few variants (a nested loop, a Variable, a loop variable that changes
shape, a hand-built loop whose exit side holds a loop), against their closed forms or the
reference, and called directly where no session goes (a loop whose entry values are dead).
``tools/mutation_equivalents.toml`` says why the mutants no law here can kill change nothing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

import graphs
import numpy as np
import pytest

import turnout as tn
from turnout.errors import KernelError
from turnout.fast import driven
from turnout.fast import stacks as stk
from turnout.fast.driven import AUX, CARRY, HOST_HAS, ITERS, PRED, REPORT, VALS, DrivenLoop, drive_chunks
from turnout.fast.outcome import MAX_CAPACITY, Raise, Retry

jax = pytest.importorskip("jax")

CAP = 4


# ---- stand-ins -------------------------------------------------------------------------------------
def _stack(ptr: int = 0, pending: bool = False) -> stk.StackValue:
    """A stack of ``CAP`` float64 entries with its pointer at ``ptr`` (no buffer where ``pending``)."""
    if pending:
        return stk.StackValue(CAP, np.float64)
    return stk.StackValue(CAP, np.float64, jax.device_put(np.zeros(CAP)), jax.device_put(np.zeros((CAP, 1), np.int32)),
                          jax.device_put(np.int32(ptr)))


class _Store:
    """A stand-in ``ChunkStore``: it holds chunks of the stacks in ``holds`` and records each call."""

    def __init__(self, holds: tuple[str, ...] = ()) -> None:
        self.holds = set(holds)
        self.calls: list[tuple[str, Any]] = []

    def has(self, k: str) -> bool:
        self.calls.append(("has", k))
        return k in self.holds

    def observe(self, stacks: dict[str, Any]) -> None:
        self.calls.append(("observe", dict(stacks)))

    def spill(self, full: dict[str, Any], ptr: dict[str, int]) -> dict[str, Any]:
        self.calls.append(("spill", (sorted(full), dict(ptr))))
        return {s: _stack(0) for s in full}

    def refill(self, low: dict[str, Any], ptr: dict[str, int]) -> dict[str, Any]:
        self.calls.append(("refill", (sorted(low), dict(ptr))))
        return {s: _stack(CAP) for s in low}

    def begin_pops(self, stacks: dict[str, Any]) -> None:
        self.calls.append(("begin_pops", dict(stacks)))

    def end_pushes(self, keys: Any) -> None:
        self.calls.append(("end_pushes", keys))

    def named(self, what: str) -> list[Any]:
        return [a for w, a in self.calls if w == what]


def _report(err: int, pred: bool, iters: int, push: dict[str, tuple[int, int]], pop: dict[str, tuple[int, int]]
            ) -> np.ndarray:
    """A chunk's report vector (``stacks.report_vector``'s layout): the error word, the predicate, the
    iterations so far, then (pointer, grow) per pushed stack and (pointer, shrink) per popped one."""
    parts = [err, int(pred), iters]
    for p, n in (*push.values(), *pop.values()):
        parts += [p, n]
    return np.asarray(parts, np.int32)


class _Chunk:
    """A stand-in chunk call that plays back ``reports`` (one per call), moving each stack's pointer
    to the report's and recording what it was given."""

    def __init__(self, reports: list[tuple[int, bool, int, dict[str, tuple[int, int]], dict[str, tuple[int, int]]]]
                 ) -> None:
        self.reports = list(reports)
        self.calls: list[dict[str, Any]] = []

    def __call__(self, feeds: Any, state: dict[str, Any], stacks: dict[str, Any], bound: Any
                 ) -> tuple[dict[Any, Any], dict[Any, Any], dict[str, Any]]:
        self.calls.append({"feeds": feeds, "state": dict(state), "stacks": dict(stacks), "bound": bound})
        err, pred, iters, push, pop = self.reports.pop(0)
        moved = {s: stacks[s].replace(stacks[s].buf, stacks[s].idx, np.int32(p))
                 for s, (p, _) in (*push.items(), *pop.items()) if not stacks[s].pending}
        new = {**moved, VALS: ("vals", iters), PRED: pred, ITERS: iters, AUX: state[AUX],
               REPORT: _report(err, pred, iters, push, pop)}
        return {}, {}, new


def _guard() -> tuple[list[tuple[str, Optional[list[str]]]], list[dict[str, Any]], Any]:
    """A recording guard: (the (what, stacks) of each step, the trace arguments each step was given,
    the guard)."""
    steps: list[tuple[str, Optional[list[str]]]] = []
    args: list[dict[str, Any]] = []

    @contextmanager
    def guard(what: str, stacks: Optional[list[str]]) -> Iterator[dict[str, Any]]:
        steps.append((what, stacks))
        a: dict[str, Any] = {}
        args.append(a)
        yield a

    return steps, args, guard


def _state(**stacks: Any) -> dict[str, Any]:
    """A loop's state after ``init``: the error word first, the carry, and ``stacks``."""
    return {"err": jax.device_put(np.int32(0)), VALS: ("vals", 0), PRED: True, ITERS: 0, **stacks}


# ---- drive_chunks ----------------------------------------------------------------------------------
def test_chunks_run_until_the_report_says_the_loop_stopped() -> None:
    """A driven loop stops at the first report whose predicate is false, whose error word is set or
    whose iterations reached the budget (``int(max_iter)``), and hands back the state of that chunk
    (its carry and stacks, the counts ``AUX``, no report) for ``finish``."""
    for last, budget in (((0, False, 3), 100), ((2, True, 3), 100), ((0, True, 7), 7)):
        chunk = _Chunk([(0, True, 1, {"a": (1, 1)}, {}), (0, True, 2, {"a": (2, 1)}, {}),
                        (*last, {"a": (3, 1)}, {}), (0, False, 9, {"a": (0, 1)}, {})])
        got = drive_chunks(chunk, {}, _state(a=_stack()), np.int32(budget), {"a": 1}, {}, 16, _Store(), "who")  # type: ignore[arg-type]
        assert isinstance(got, dict)
        assert len(chunk.calls) == 3 and got[ITERS] == last[2]
        assert REPORT not in got and AUX in got and int(got["a"].ptr) == 3
        assert all(c["bound"] == budget for c in chunk.calls)


def test_the_counts_of_pushes_and_pops_start_at_zero_on_the_stacks_device() -> None:
    """Before the first chunk nothing is measured: each pushed and popped stack's most-per-iteration
    count (``AUX``, (grow, shrink)) starts at 0, one scalar per stack, committed to the device of the
    first stack that has a buffer (the chunk's outputs are; an uncommitted one would compile the chunk
    again). A state whose stacks are all pending still starts (uncommitted zeros)."""
    chunk = _Chunk([(0, False, 0, {"a": (0, 0)}, {"b": (0, 0), "c": (0, 0)})])
    state = _state(p=_stack(pending=True), a=_stack(), b=_stack(), c=_stack())
    drive_chunks(chunk, {}, state, np.int32(5), {"a": 1}, {"b": 1, "c": 1}, 16, _Store(), "who")  # type: ignore[arg-type]
    grow, shrink = chunk.calls[0]["state"][AUX]
    assert sorted(grow) == ["a"] and sorted(shrink) == ["b", "c"]
    for v in (*grow.values(), *shrink.values()):
        assert int(v) == 0 and v.dtype == np.int32 and v.committed
    chunk = _Chunk([(0, False, 0, {"a": (0, 0)}, {"b": (0, 0)})])
    drive_chunks(chunk, {}, _state(a=_stack(pending=True), b=_stack(pending=True)), np.int32(5), {"a": 1},  # type: ignore[arg-type]
                 {"b": 1}, 16, _Store(), "who")
    grow, shrink = chunk.calls[0]["state"][AUX]
    assert [int(v) for v in (*grow.values(), *shrink.values())] == [0, 0]
    assert not any(v.committed for v in (*grow.values(), *shrink.values()))


def test_each_chunk_is_told_which_popped_stacks_the_host_holds_more_of() -> None:
    """``HOST_HAS``: per popped stack, whether the store holds chunks of it (a pop may empty the
    device's chunk only where it does not), asked of the store before each chunk; the feeds, the
    stacks (apart from the rest of the state) and the bound are passed as given."""
    store = _Store(holds=("b",))
    chunk = _Chunk([(0, True, 1, {}, {"b": (3, 1), "c": (3, 1)}), (0, False, 2, {}, {"b": (2, 1), "c": (2, 1)})])
    feeds = {(1, 0): 1.0}
    drive_chunks(chunk, feeds, _state(b=_stack(CAP), c=_stack(CAP)), np.int32(9), {}, {"b": 1, "c": 1}, CAP,  # type: ignore[arg-type]
                 store, "who")
    for call in chunk.calls:
        assert call["feeds"] is feeds
        assert {s: bool(v) for s, v in call["state"][HOST_HAS].items()} == {"b": True, "c": False}
        assert sorted(call["stacks"]) == ["b", "c"] and "b" not in call["state"] and "err" in call["state"]
    assert store.named("has").count("b") == 2 and None not in store.named("has")


def test_full_stacks_are_spilled_and_low_ones_refilled_between_chunks() -> None:
    """After a chunk the store takes the pushed stacks whose free room is less than one more
    iteration may push (``ChunkReport.full``) and gives chunks back to the popped stacks that hold
    fewer entries than one more iteration may pop while it holds more (``ChunkReport.low``), each with
    the chunk's pointers; the next chunk gets the stacks the store handed back. The store observes
    the stacks (only they) after every chunk. Each move is guarded under its name and the sorted keys
    it moves."""
    store = _Store(holds=("q",))
    chunk = _Chunk([(0, True, 4, {"b": (CAP, 1), "a": (CAP, 1)}, {"q": (0, 1)}),
                    (0, False, 5, {"b": (1, 1), "a": (1, 1)}, {"q": (3, 1)})])
    steps, _, guard = _guard()
    got = drive_chunks(chunk, {}, _state(b=_stack(), a=_stack(), q=_stack(CAP)), np.int32(9), {"b": 1, "a": 1},  # type: ignore[arg-type]
                       {"q": 1}, CAP, store, "who", guard)
    assert isinstance(got, dict)
    ptr = {"b": CAP, "a": CAP, "q": 0}
    assert store.named("spill") == [(["a", "b"], ptr)] and store.named("refill") == [(["q"], ptr)]
    assert steps == [("chunk", None), ("spill", ["a", "b"]), ("refill", ["q"]), ("chunk", None)]
    second = chunk.calls[1]["stacks"]
    assert [int(second[s].ptr) for s in ("a", "b", "q")] == [0, 0, CAP]  # (the store's stacks)
    observed = store.named("observe")
    assert len(observed) == 2 and all(sorted(o) == ["a", "b", "q"] for o in observed)


def test_a_chunk_that_moved_nothing_and_ran_no_iteration_asks_for_larger_chunks() -> None:
    """A chunk that ran no iteration and left no stack to move cannot make progress at this capacity:
    the outcome is ``Retry`` at twice the capacity, or past ``MAX_CAPACITY`` a ``Raise`` naming the
    route (``who``). A chunk that ran no iteration but left a stack to spill (or to refill) did make
    progress (the move frees room), and one that ran iterations did too."""
    def run(reports: list[Any], capacity: int, state: dict[str, Any], holds: tuple[str, ...] = ()) -> Any:
        return drive_chunks(_Chunk(reports), {}, state, np.int32(50), {"a": 1}, {"q": 1}, capacity,  # type: ignore[arg-type]
                            _Store(holds), "the route")

    idle = (0, True, 0, {"a": (0, 1)}, {"q": (2, 1)})
    got = run([idle], CAP, _state(a=_stack(), q=_stack(2)))
    assert isinstance(got, Retry) and got.capacity == 2 * CAP
    got = run([idle], MAX_CAPACITY, _state(a=_stack(), q=_stack(2)))
    assert isinstance(got, Raise) and isinstance(got.error, KernelError) and "the route" in str(got.error)
    done = (0, False, 0, {"a": (0, 1)}, {"q": (0, 1)})
    full = (0, True, 0, {"a": (CAP, 1)}, {"q": (2, 1)})
    assert isinstance(run([full, done], CAP, _state(a=_stack(CAP), q=_stack(2))), dict)
    low = (0, True, 0, {"a": (0, 1)}, {"q": (0, 1)})
    assert isinstance(run([low, done], CAP, _state(a=_stack(), q=_stack()), holds=("q",)), dict)
    ran = (0, True, 2, {"a": (2, 1)}, {"q": (2, 1)})
    assert isinstance(run([ran, done], CAP, _state(a=_stack(), q=_stack(2))), dict)
    again = (0, True, 2, {"a": (2, 1)}, {"q": (2, 1)})
    assert isinstance(run([ran, again], CAP, _state(a=_stack(), q=_stack(2))), Retry)


def test_each_chunk_span_counts_the_iterations_of_that_chunk() -> None:
    """A traced run's span of each chunk gets the iterations that chunk ran (the report counts from
    ``init``'s 0), and a guard that yields no arguments (``no_guard``) is not written to."""
    chunk = _Chunk([(0, True, 3, {"a": (3, 1)}, {}), (0, True, 7, {"a": (3, 1)}, {}), (0, False, 8, {"a": (0, 1)}, {})])
    steps, args, guard = _guard()
    drive_chunks(chunk, {}, _state(a=_stack()), np.int32(50), {"a": 1}, {}, 16, _Store(), "who", guard)  # type: ignore[arg-type]
    assert [a["iterations"] for a in args] == [3, 4, 1]
    chunk = _Chunk([(0, True, 3, {"a": (3, 1)}, {}), (0, False, 8, {"a": (0, 1)}, {})])
    got = drive_chunks(chunk, {}, _state(a=_stack()), np.int32(50), {"a": 1}, {}, 16, _Store(), "who")  # type: ignore[arg-type]
    assert isinstance(got, dict) and got[ITERS] == 8


# ---- DrivenLoop.run --------------------------------------------------------------------------------
def _loop(push: dict[str, int], pop: dict[str, int], capacity: int = 16) -> DrivenLoop:
    """A ``DrivenLoop`` whose region and emitter are never traced (its calls are replaced)."""
    return DrivenLoop(None, [], set(), push, pop, capacity, None, lambda f, **kw: f, None, False)  # type: ignore[arg-type]


def _call(name: str, log: list[Any], new: dict[str, Any], out: Optional[dict[Any, Any]] = None) -> Any:
    def call(feeds: Any, state: dict[str, Any], stacks: dict[str, Any], bound: Any) -> Any:
        log.append((name, feeds, dict(state), dict(stacks), bound))
        return dict(out or {}), {"live": True}, {**stacks, **new}  # (every stack handed back: ``_changed``)
    return call


def test_run_is_init_then_chunks_then_finish_with_the_state_split() -> None:
    """``run``: the store begins the pops of the popped stacks the state holds; ``init``, the chunks
    and ``finish`` each get the feeds, the state apart from its stacks, the stacks and the bound;
    ``finish`` gets the last chunk's state without the counts (``AUX``); the store ends the pushed
    stacks; the result is ``finish``'s outputs, live flags and the state without the carry. Every
    call and move is guarded, ``init`` and ``finish`` under their names."""
    log: list[Any] = []
    loop = _loop({"a": 1}, {"q": 1})
    loop.init = _call("init", log, {VALS: "v0", PRED: True, ITERS: 0, "x": "x1"})  # type: ignore[assignment]
    loop.chunk = _Chunk([(0, False, 2, {"a": (2, 1)}, {"q": (1, 1)})])  # type: ignore[assignment]
    loop.finish = _call("finish", log, {"err": "e2", "y": "y2", "a": "a2"}, {(5, 0): "out"})  # type: ignore[assignment]
    steps, _, guard = _guard()
    store = _Store()
    feeds = {(1, 0): 1.0}
    state = {"err": "e0", "x": "x0", "a": _stack(), "q": _stack(2)}
    got = loop.run(feeds, state, np.int32(9), store, "who", guard)  # type: ignore[arg-type]
    assert isinstance(got, tuple)
    out, lives, new = got
    assert out == {(5, 0): "out"} and lives == {"live": True}
    assert store.named("begin_pops") == [{"q": state["q"]}] and store.named("end_pushes") == [{"a": 1}]
    assert [c[0] for c in store.calls][0] == "begin_pops" and store.calls[-1][0] == "end_pushes"
    name, f, rest, stacks, bound = log[0]
    assert (name, f, rest, sorted(stacks), bound) == ("init", feeds, {"err": "e0", "x": "x0"}, ["a", "q"], 9)
    name, f, rest, stacks, bound = log[1]
    assert name == "finish" and f is feeds and bound == 9 and sorted(stacks) == ["a", "q"]
    assert set(rest) == {"err", "x", *CARRY} and rest[ITERS] == 2 and rest["x"] == "x1"
    assert steps == [("init", None), ("chunk", None), ("finish", None)]
    assert loop.chunk.calls[0]["bound"] == 9 and loop.chunk.calls[0]["feeds"] is feeds  # type: ignore[attr-defined]
    assert new["err"] == "e2" and new["y"] == "y2" and new["a"] == "a2" and new["x"] == "x1"
    assert not set(new) & {*CARRY, AUX, REPORT}
    assert int(new["q"].ptr) == 1  # (the chunk's stack, not the one run was given)


def test_a_loop_that_init_does_not_enter_runs_no_chunk() -> None:
    """Where ``init`` hands back no carry (the loop does not run: dead entry values), no chunk runs
    and ``finish`` gets ``init``'s state. The store begins the pops only of popped stacks the state
    holds."""
    log: list[Any] = []
    loop = _loop({"a": 1}, {"q": 1, "r": 1})
    loop.init = _call("init", log, {"x": "x1"})  # type: ignore[assignment]
    loop.chunk = _Chunk([])  # type: ignore[assignment]
    loop.finish = _call("finish", log, {})  # type: ignore[assignment]
    store, q = _Store(), _stack()
    got = loop.run({}, {"err": "e0", "x": "x0", "a": _stack(), "q": q}, np.int32(9), store, "who")  # type: ignore[arg-type]
    assert isinstance(got, tuple) and got[2]["x"] == "x1"
    assert store.named("begin_pops") == [{"q": q}]
    assert [c[0] for c in log] == ["init", "finish"] and log[1][2] == {"err": "e0", "x": "x1"}


@pytest.mark.parametrize("capacity", [CAP, MAX_CAPACITY])
def test_a_loop_that_cannot_progress_hands_back_the_outcome_and_does_not_finish(capacity: int) -> None:
    """A chunk that could make no progress ends ``run`` with its outcome (a ``Retry`` of larger
    chunks, or a ``Raise`` naming ``who``): ``finish`` is not called and the store is not told the
    pushes ended."""
    log: list[Any] = []
    loop = _loop({"a": 1}, {}, capacity)
    loop.init = _call("init", log, {VALS: "v0", PRED: True, ITERS: 0})  # type: ignore[assignment]
    loop.chunk = _Chunk([(0, True, 0, {"a": (0, 1)}, {})])  # type: ignore[assignment]
    loop.finish = _call("finish", log, {})  # type: ignore[assignment]
    store = _Store()
    steps, _, guard = _guard()
    got = loop.run({}, {"err": "e0", "a": _stack()}, np.int32(9), store, "the route", guard)  # type: ignore[arg-type]
    if capacity == CAP:
        assert isinstance(got, Retry) and got.capacity == 2 * CAP
    else:
        assert isinstance(got, Raise) and "the route" in str(got.error)
    assert [c[0] for c in log] == ["init"] and store.named("end_pushes") == []
    assert steps == [("init", None), ("chunk", None)]


# ---- _changed --------------------------------------------------------------------------------------
def test_a_call_hands_back_its_stacks_its_error_word_and_what_it_changed() -> None:
    """A traced call returns every stack (donated: the caller's copy is gone) and the error word even
    where unchanged, and any other entry only where it is not the object it was given (one returned
    as it came would be copied)."""
    same, other = object(), object()
    given = {"err": same, "s": same, "v": same, "w": same}
    after = {"err": same, "s": same, "v": same, "w": other, "new": other}
    assert driven._changed(after, given, {"s": same}) == {"err": same, "s": same, "w": other, "new": other}
    assert driven._changed({"v": same}, {"v": same}, {}) == {}


# ---- the traced bodies, on a real program ------------------------------------------------------------
_SESS: dict[str, Any] = {}


def _power() -> tuple[graphs.PowerLoop, tn.Session]:
    """``y = x**n`` and ``dy/dx`` with the loop swapped, in chunks of ``CAP`` entries (and no more in
    host memory inside one call), so that the forward loop and its gradient are driven segments."""
    if not _SESS:
        m = graphs.power_loop(swap_memory=True)
        _SESS["m"] = m
        _SESS["sess"] = tn.Session(m.g, backend="fast", stack_chunk=CAP, host_stack_limit=CAP)
    return _SESS["m"], _SESS["sess"]


@pytest.mark.parametrize("steps", [10, 5])
def test_a_driven_loop_and_its_gradient_give_the_closed_form(steps: int) -> None:
    """``x**n`` and ``n x**(n-1)`` through two driven loops (more pushes than the fused call keeps):
    the forward one pushes ``n`` values in chunks of ``CAP``, each full chunk but the last spilled to
    the store (``(n - 1) // CAP`` of them), the backward one pops them (refilled), with no retry.
    Fetching the forward value alone runs its driven loop with its exit fetched."""
    m, sess = _power()
    y, dx = sess.run([m.y, m.dx], {m.x: 1.5, m.n: steps})
    np.testing.assert_allclose([y, dx], [1.5**steps, steps * 1.5 ** (steps - 1)], rtol=1e-12)
    stats = sess.last_result.stats
    assert stats["fused"] is False and stats["stack_capacity_retries"] == 0
    assert stats["stack_chunks_swapped"] == (steps - 1) // CAP
    np.testing.assert_allclose(sess.run(m.y, {m.x: 0.5, m.n: steps}), 0.5**steps, rtol=1e-12)


def _nested() -> dict[str, Any]:
    """``y = x**(n k)`` by an outer loop (swapped, driven) of ``n`` steps around an inner loop of ``k``
    steps, and ``dy/dx``: the inner loop's pushes per outer iteration are known only on the device
    (its stack is ``measured``), and its ``lax.while_loop`` is bounded by the run's iteration bound."""
    if "nested" not in _SESS:
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.float64, [], name="x")
            n = tn.placeholder(tn.int32, [], name="n")
            k = tn.placeholder(tn.int32, [], name="k")

            def body(i: Any, y: Any) -> Any:
                _, y2 = tn.while_loop(lambda j, v: j < k, lambda j, v: (j + 1, v * x), [tn.constant(0), y],
                                      name="inner")
                return i + 1, y2

            _, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), tn.ones_like(x)], swap_memory=True,
                                 name="outer")
            (dx,) = tn.gradients(y, [x])
        sess = tn.Session(g, backend="fast", stack_chunk=CAP, host_stack_limit=CAP)
        _SESS["nested"] = {"sess": sess, "x": x, "n": n, "k": k, "y": y, "dx": dx}
    return _SESS["nested"]


@pytest.mark.parametrize("n, k", [(3, 3), (5, 2)])
def test_a_driven_loop_around_a_nested_loop_gives_the_closed_form(n: int, k: int) -> None:
    """``x**(n k)`` and ``n k x**(n k - 1)``: the outer loop and its gradient are driven, each chunk
    measuring how many entries one outer iteration pushes or pops on the inner loop's stack, with no
    retry; a run whose inner loop would pass ``max_iterations`` stops with ``NonTerminationError``
    (the bound reaches the nested loop inside each chunk). Kills ``driven._init:6d919179`` and
    ``driven._chunk:1d05e61d`` (the emitter of ``init`` or ``chunk`` made without the bound)."""
    m = _nested()
    sess = m["sess"]
    y, dx = sess.run([m["y"], m["dx"]], {m["x"]: 1.5, m["n"]: n, m["k"]: k})
    p = n * k
    np.testing.assert_allclose([y, dx], [1.5**p, p * 1.5 ** (p - 1)], rtol=1e-12)
    stats = sess.last_result.stats
    assert stats["fused"] is False and stats["stack_capacity_retries"] == 0
    driven_segs = [s for plan in sess.backend._plans.values() for s in plan.stages if s.driven is not None]
    assert driven_segs and all(s.measured for s in driven_segs)
    with pytest.raises(tn.errors.NonTerminationError):
        sess.run([m["y"], m["dx"]], {m["x"]: 1.5, m["n"]: 3, m["k"]: 50}, options=tn.RunOptions(max_iterations=20))


def test_a_driven_loop_over_a_variable_reads_its_value_of_each_run() -> None:
    """A Variable the driven loop reads sits in the state its calls are given beside the stacks and
    the error word (each call hands back only what it changed, ``_changed``): ``w**n`` and
    ``n w**(n-1)``, then again after the Variable is assigned. Kills ``driven._init:e2a80668`` and
    ``driven._finish:c6b0fed2`` (``_changed`` not given the call's state, which only an entry other
    than the stacks and the error word reads)."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        w = tn.Variable(np.float64(1.5), name="w")
        wr = w.read()
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * wr), [tn.constant(0), tn.ones_like(wr)],
                             swap_memory=True, name="power")
        (dw,) = tn.gradients(y, [w])
        set_w = w.assign(np.float64(0.5))
    sess = tn.Session(g, backend="fast", stack_chunk=CAP, host_stack_limit=CAP)
    for v in (1.5, 0.5):
        got = sess.run([y, dw], {n: 10})
        np.testing.assert_allclose(got, [v**10, 10 * v**9], rtol=1e-12)
        assert sess.last_result.stats["fused"] is False
        sess.run(set_w)


def test_a_driven_loop_whose_carry_changes_shape_is_refused_by_name() -> None:
    """A loop variable whose shape changes across iterations (``shape_invariants``) has no XLA loop:
    the driven loop's ``init``, tracing its body for the first carry, refuses it with an
    ``UnsupportedError`` that names the loop (not "a loop"), which the session reports as it falls
    back, or raises where falling back is off. Kills ``driven._init:5e238b68`` and
    ``driven._init:0223646b`` (``discover`` not given the loop: the error said "a loop")."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")

        def body(i: Any, y: Any, v: Any) -> Any:
            return i + 1, y * x, tn.concat([v, tn.reshape(y, [1])], 0)

        start = [tn.constant(0), tn.ones_like(x), tn.zeros([0], tn.float64)]
        _, y, v = tn.while_loop(lambda i, y, v: i < n, body, start, shape_invariants=[[], [], [None]],
                                swap_memory=True, name="grows")
        (dx,) = tn.gradients(y, [x])
    sess = tn.Session(g, backend="fast", stack_chunk=CAP, host_stack_limit=CAP, fallback=False)
    with pytest.raises(tn.errors.UnsupportedError, match="loop frame 'grows/frame0'.* changes type or shape"):
        sess.run([y, dx, v], {x: 1.5, n: 10})


def _exit_side_loop() -> tuple[tn.Graph, dict[str, Any]]:
    """A hand-built loop (frame ``f``) of ``n`` steps ``y <- y x``, each step pushing ``y`` on a
    stack, whose exit side (between its ``Switch`` and its ``Exit``) is a loop of its own (frame
    ``g``) of ``k`` doublings: ``x**n 2**k``. No builder of the API puts anything there."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        k = tn.placeholder(tn.int32, [], name="k")
        h = g.create_node("StackNew", (), {"elem_dtype": "float64", "elem_shape": []}, name="stk").outputs[0]

        def const(v: Any, frame: str = "f") -> Any:
            return tn.raw.enter(tn.constant(v), frame, is_constant=True)

        mi, _ = tn.raw.merge([tn.raw.enter(tn.constant(0), "f"), tn.raw.BACK_EDGE])
        my, _ = tn.raw.merge([tn.raw.enter(tn.ones_like(x), "f"), tn.raw.BACK_EDGE])
        x_in, k_in, h_in = (tn.raw.enter(t, "f", is_constant=True) for t in (x, k, h))
        p = tn.raw.loop_cond(mi < tn.raw.enter(n, "f", is_constant=True))
        (_, ti), (fy, ty) = tn.raw.switch(mi, p), tn.raw.switch(my, p)
        pushed = g.create_node("StackPush", [h_in, tn.reshape(ti, [1]), ty], name="push").outputs[0]
        tn.raw.close_back_edge(mi, tn.raw.next_iteration(ti + const(1)))
        tn.raw.close_back_edge(my, tn.raw.next_iteration(ty * x_in + pushed * const(np.float64(0.0))))
        one, two = const(1), const(np.float64(2.0))
        mj, _ = tn.raw.merge([tn.raw.enter(const(0), "g"), tn.raw.BACK_EDGE])
        mv, _ = tn.raw.merge([tn.raw.enter(fy, "g"), tn.raw.BACK_EDGE])
        pg = tn.raw.loop_cond(mj < tn.raw.enter(k_in, "g", is_constant=True))
        (_, tj), (fv, tv) = tn.raw.switch(mj, pg), tn.raw.switch(mv, pg)
        tn.raw.close_back_edge(mj, tn.raw.next_iteration(tj + tn.raw.enter(one, "g", is_constant=True)))
        tn.raw.close_back_edge(mv, tn.raw.next_iteration(tv * tn.raw.enter(two, "g", is_constant=True)))
        out = tn.raw.exit(tn.raw.exit(fv), name="out")
    return g, {"x": x, "n": n, "k": k, "out": out}


def test_a_driven_loop_whose_exit_side_holds_a_loop_bounds_it_too() -> None:
    """``finish`` traces the loop's exit side, and a loop there is bounded by the run's iteration
    bound like any other: ``x**n 2**k`` as the reference computes it, and ``NonTerminationError``
    where the exit side's loop would pass ``max_iterations``. Kills ``driven._finish:349f80fe``
    (``finish``'s emitter made without the bound)."""
    g, t = _exit_side_loop()
    sess = tn.Session(g, backend="fast", stack_chunk=CAP, host_stack_limit=CAP, fallback=False)
    for k in (3, 2):
        feeds = {t["x"]: 1.5, t["n"]: 10, t["k"]: k}
        np.testing.assert_allclose(sess.run(t["out"], feeds), tn.Session(g).run(t["out"], feeds), rtol=1e-12)
        assert sess.last_result.stats["fused"] is False
    (seg,) = [s for plan in sess.backend._plans.values() for s in plan.stages if s.driven is not None]
    assert seg.push and seg.driven.exit_side
    with pytest.raises(tn.errors.NonTerminationError):
        sess.run(t["out"], {t["x"]: 1.5, t["n"]: 10, t["k"]: 50}, options=tn.RunOptions(max_iterations=20))


def test_a_driven_loop_whose_entry_values_are_dead_does_not_run() -> None:
    """[E-Enter] and [E-Exit] on dead tokens: a driven loop whose entry values are dead runs no
    iteration (``init`` hands back no carry), its exits are dead, and its stack is handed back as it
    came, pending, with the error word clear. No session reaches this (the host skips a branch it
    does not take), so the forward loop of ``test_a_driven_loop_and_its_gradient_give_the_closed_form``
    is called directly, as the runner calls it (``DrivenLoop.run``). Kills ``driven._finish:fc70eead``
    (``finish`` reading a carry that ``init`` did not make)."""
    from turnout.fast.values import DEAD

    m, sess = _power()
    sess.run([m.y, m.dx], {m.x: 1.5, m.n: 10})
    seg = next(s for plan in sess.backend._plans.values() for s in plan.stages if s.driven is not None and s.push)
    assert isinstance(seg.fn, DrivenLoop)
    (s,) = seg.push
    store = _Store()
    with jax.enable_x64(True):
        state = {"err": jax.device_put(np.int32(0)), s: stk.StackValue(CAP, np.float64)}
        got = seg.fn.run({k: DEAD for k in seg.reads}, state, np.int32(1000), store, "test")  # type: ignore[arg-type]
    assert isinstance(got, tuple)
    out, _, new = got
    assert seg.fetched and all(out[k] is DEAD for k in seg.fetched)
    assert int(new["err"]) == 0 and new[s].pending
    assert store.named("end_pushes") == [seg.push]
    np.testing.assert_allclose(sess.run(m.dx, {m.x: 1.5, m.n: 10}), 10 * 1.5**9, rtol=1e-12)


def test_the_module_exports_what_it_defines() -> None:
    """Every name in ``fast.driven.__all__`` is defined by the module (``tests/test_exports.py``'s law,
    for this module alone). Kills the ``__all__`` mutants (``driven.<module>:c10a357e``, ...)."""
    from test_exports import test_every_exported_name_exists

    test_every_exported_name_exists("turnout.fast.driven")
