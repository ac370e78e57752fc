"""Laws of the one runner (``turnout.fast.runner.StepRunner``) on stand-ins: which steps run, where
their inputs and outputs live, which error word is acted on and when, which ``Retry`` is kept, and
what a traced run records. Each law kills mutants of the full set of ``fast/runner.py`` (issue 40,
part 3); the runs on forced devices reach the same code in seconds, these in milliseconds. The plan,
the stacks' store and the segments' compiled functions are stand-ins that record what the runner asks
of them: the runner reads only their interfaces."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Optional

import jax
import numpy as np
import pytest

from turnout.errors import ExecutionError
from turnout.fast import runner as runner_module
from turnout.fast.cut import HostCond, HostLoop, Segment, Traffic
from turnout.fast.driven import no_guard
from turnout.fast.host_env import HostEnv
from turnout.fast.outcome import OK, Raise, Retry
from turnout.fast.runner import RunPolicy, StepRunner
from turnout.fast.timeline import Timeline, device_track
from turnout.session import RunOptions

CPU = jax.devices("cpu")[0]


class _Stacks:
    """A stand-in ``DeviceStacks``: records every call the runner makes of it."""

    def __init__(self, devices: list[str], moved: int = 0) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.labels = {d: f"label-{d}" for d in devices}
        self.stores = {d: f"store-{d}" for d in devices}
        self._moved = moved

    def observe(self, d: str, st: dict[str, Any]) -> None:
        self.calls.append(("observe", d, st))

    @contextmanager
    def device_oom(self, t: Any, dev: str, describe: Any) -> Iterator[None]:
        self.calls.append(("oom", t, dev, describe()))
        yield

    def before(self, t: Any, dev: str, stacks: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("before", t, dev, dict(stacks)))
        return {k: ("refilled", v) for k, v in stacks.items()}

    def after(self, t: Any, dev: str, new: dict[str, Any]) -> None:
        self.calls.append(("after", t, dev, new))

    def settle(self, dev: str, stacks: dict[str, Any]) -> None:
        self.calls.append(("settle", dev, stacks))

    def moved(self) -> int:
        return self._moved

    def named(self, what: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == what]


class _Plan:
    """A stand-in ``StepPlan``: ``compiled`` hands out the segment's ``made`` function and records the
    request; ``outcome_of`` maps codes through ``outcomes`` (default: an error naming the code)."""

    def __init__(self, outcomes: Optional[dict[int, Any]] = None) -> None:
        self.program = SimpleNamespace(fetch_keys=[])
        self.backend = SimpleNamespace(compile_count=0)
        self.requests: list[tuple[Any, bool]] = []
        self.asked: list[tuple[int, str, int]] = []
        self.outcomes = outcomes or {}

    def compiled(self, seg: Segment, free_pointers: bool) -> Any:
        self.requests.append((seg, free_pointers))
        return seg.made  # type: ignore[attr-defined]

    def outcome_of(self, code: int, who: str, moved: int) -> Any:
        self.asked.append((code, who, moved))
        return self.outcomes.get(code, Raise(ExecutionError(f"code {code}")))


def _err(code: int) -> Any:
    return np.int32(code)


def _seg(device: str, fn: Any, reads: Optional[list[Any]] = None, index: int = 0, traffic: Any = None) -> Segment:
    seg = Segment(device, [], reads=list(reads or []), index=index, traffic=traffic)
    seg.made = fn  # type: ignore[attr-defined]
    return seg


def _fn(out: dict[Any, Any], err: int = 0, lives: Optional[dict[Any, Any]] = None,
        log: Optional[list[Any]] = None) -> Any:
    """A segment's stand-in compiled function: records its inputs, writes ``out``, sets ``err``."""

    def fn(env_in: dict[Any, Any], state: dict[str, Any], max_iter: Any) -> Any:
        if log is not None:
            log.append((dict(env_in), dict(state), max_iter))
        return dict(out), dict(lives or {}), {**state, "err": _err(err) if err else state["err"]}

    return fn


def _runner(devices: tuple[str, ...] = ("a",), check: bool = False, plan: Optional[_Plan] = None,
            tl: Optional[Timeline] = None, max_iterations: Optional[int] = None, moved: int = 0,
            errs: Optional[dict[str, int]] = None) -> StepRunner:
    state = {d: {"err": _err((errs or {}).get(d, 0))} for d in devices}
    return StepRunner(plan or _Plan(), state, _Stacks(list(devices), moved),  # type: ignore[arg-type]
                      {d: CPU for d in devices}, RunOptions(max_iterations=max_iterations),
                      RunPolicy("who", check_each_step=check), tl)


def test_a_new_runner_holds_its_inputs_and_starts_with_nothing_run() -> None:
    """A runner keeps its plan, program, state, stacks, devices, policy and timeline; it has run no
    iteration, kept no ``Retry``, no live flag and no worker; every device's state is shown to the
    stacks' store once, before any step (the store learns the pointers the run starts from).
    Kills ``__init__``'s attributes set to None and the observe loop dropped."""
    plan, tl = _Plan(), Timeline()
    run = _runner(("a", "b"), plan=plan, tl=tl, max_iterations=7)
    assert run.plan is plan and run.program is plan.program and run.tl is tl
    assert set(run.state) == {"a", "b"} and run.jdev == {"a": CPU, "b": CPU}
    assert run.policy == RunPolicy("who")
    assert run.max_iter_py == 7 and int(run.max_iter) == 7
    assert run.retry is None and run.iteration == 0
    assert run.lives == {} and run.pools == {} and run.last_fut == {} and run.producer == {}
    assert run.host_iterations == {}
    stacks: Any = run.stacks
    assert [c[1] for c in stacks.named("observe")] == ["a", "b"]
    assert stacks.named("observe")[0][2] is run.state["a"]


def test_a_run_policy_reads_words_only_when_it_must_by_default() -> None:
    """``RunPolicy``'s default lets devices run ahead of the host: a word is read at each step only
    where the executor asks for it. Kills the default flipped and ``__all__`` misspelt."""
    assert RunPolicy("x").check_each_step is False
    assert RunPolicy("x").who == "x"
    assert set(runner_module.__all__) == {"Called", "RunPolicy", "StepRunner"}


def test_a_run_places_its_feeds_runs_its_steps_and_returns_the_fetches() -> None:
    """``run``: each feed on its device (a device value, where the host environment says), the steps
    in order, each reading the values before it on its device; the environment comes back.
    Kills ``run``'s and ``segment``'s reads and writes of the environment broken."""
    log: list[Any] = []
    run = _runner(("a",))
    seg1 = _seg("a", _fn({"y": 2.0}, log=log), reads=["x", "absent"])
    seg2 = _seg("a", _fn({"z": 3.0}, log=log), reads=["y"], index=1)
    env = run.run([seg1, seg2], [("x", np.float32(1.0), "a")])
    assert env is not None
    assert env.where["x"] == "a" and isinstance(env.vals["x"], jax.Array)
    assert env.vals["y"] == 2.0 and env.vals["z"] == 3.0 and env.where["z"] == "a"
    assert set(log[0][0]) == {"x"} and float(log[0][0]["x"]) == 1.0
    assert set(log[1][0]) == {"y"}
    assert log[0][2] == run.max_iter


def test_a_run_acts_on_the_words_at_its_end_and_settles_its_timeline_however_it_ends() -> None:
    """Without ``check_each_step`` a failed word is read only at the end (``finish``), and the run
    raises its error; the timeline is closed (``settle``) even so.
    Kills ``finish`` or ``settle`` dropped and the word read after every step."""
    tl = Timeline()
    closed: list[bool] = []
    tl.close = lambda: closed.append(True)  # type: ignore[method-assign]
    run = _runner(("a",), tl=tl)
    after: list[Any] = []
    with pytest.raises(ExecutionError, match="code 5"):
        run.run([_seg("a", _fn({}, err=5)), _seg("a", _fn({"w": 1}, log=after), index=1)], [])
    assert len(after) == 1, "devices run ahead: the word is read at the end"
    assert closed == [True]
    Timeline.close(tl)  # (the real close, so that no watcher outlives the test)
    ok = _runner(("a",))
    ok.settle()  # no timeline: nothing to close


def test_checking_each_step_raises_after_the_failed_step() -> None:
    """With ``check_each_step`` the word is read as the call returns: no step after the failed one
    runs, and its outputs are already in the environment when it raises.
    Kills ``segment``'s ``code`` and ``check`` changes."""
    run = _runner(("a",), check=True)
    after: list[Any] = []
    env = HostEnv()
    with pytest.raises(ExecutionError, match="code 3"):
        run.steps([_seg("a", _fn({"q": 1.0}, err=3)), _seg("a", _fn({}, log=after), index=1)], env)
    assert after == [] and env.vals["q"] == 1.0
    assert run.plan.asked == [(3, "who", 0)]  # type: ignore[attr-defined]


def test_a_retry_ends_the_run_and_the_first_one_is_kept() -> None:
    """A word that decodes to a ``Retry`` stops every later step; the run returns None and keeps the
    first ``Retry`` (a later one, from another device's word, does not replace it).
    Kills ``self.retry or got`` turned round and ``run``'s None return changed."""
    plan = _Plan({4: Retry(64), 6: Retry(128)})
    run = _runner(("a",), check=True, plan=plan)
    after: list[Any] = []
    assert run.run([_seg("a", _fn({}, err=4)), _seg("a", _fn({}, log=after), index=1)], []) is None
    assert after == [] and run.retry == Retry(64)
    run.check(6)
    assert run.retry == Retry(64)


def test_a_call_that_returns_a_retry_stops_the_steps_and_keeps_the_first() -> None:
    """A call that gives back a ``Retry`` (stacks outgrown within it) changes nothing of the state or
    the environment, and no later step runs; the run's first ``Retry`` is kept.
    Kills ``steps``' early return and ``segment``'s Retry branch changed."""
    run = _runner(("a",))
    before = run.state["a"]
    calls: list[Any] = []

    def call(seg: Segment, env_in: Any, state: Any) -> Any:
        calls.append(seg.index)
        return Retry(16 * (seg.index + 1))

    run.call = call  # type: ignore[method-assign]
    env = HostEnv()
    run.steps([_seg("a", None), _seg("a", None, index=1)], env)
    assert calls == [0] and run.retry == Retry(16) and run.state["a"] is before and env.vals == {}
    run.segment(_seg("a", None, index=1), env)
    assert run.retry == Retry(16)


def test_a_segment_keeps_its_new_state_and_the_live_flags_of_its_writes() -> None:
    """A call's state is its device's from then on, and its live flags are the run's.
    Kills ``self.state[dev] = state`` and ``lives.update`` dropped."""
    run = _runner(("a",))
    run.segment(_seg("a", _fn({"k": 1.0}, lives={"k": False})), HostEnv())
    assert run.lives == {"k": False}
    assert int(run.state["a"]["err"]) == 0 and run.state["a"] is not None


def test_the_steps_dispatch_conds_and_loops_to_the_host() -> None:
    """``steps``: a ``HostCond`` goes to ``cond``, a ``HostLoop`` to ``loop``, a segment to
    ``segment``, in order; nothing runs once a ``Retry`` is kept. Kills ``steps``' isinstance tests changed."""
    run = _runner(("a",))
    seen: list[str] = []
    run.cond = lambda s, env: seen.append("cond")  # type: ignore[method-assign]
    run.loop = lambda s, env: seen.append("loop")  # type: ignore[method-assign]
    run.segment = lambda s, env: seen.append("seg")  # type: ignore[method-assign]
    hc = HostCond(region=None, branches={})  # type: ignore[arg-type]
    hl = HostLoop(region=None, header=[], body=[], exit_side=[], devices=["a"], home="a")  # type: ignore[arg-type]
    run.steps([hc, _seg("a", None), hl], HostEnv())
    assert seen == ["cond", "seg", "loop"]
    run.retry = Retry(8)
    run.steps([hc], HostEnv())
    assert seen == ["cond", "seg", "loop"]


def test_a_segments_function_is_made_once_with_free_pointers_where_each_word_is_read() -> None:
    """``fn_of``: the plan compiles a segment on first use, its pointers free exactly where each step's
    word is read (``check_each_step``), and the function is kept on the segment.
    Kills ``fn_of``'s test and ``free_pointers`` changed."""
    for check in (False, True):
        plan = _Plan()
        run = _runner(("a",), check=check, plan=plan)
        seg = _seg("a", _fn({}))
        assert run.fn_of(seg) is seg.made  # type: ignore[attr-defined]
        assert run.fn_of(seg) is seg.made  # type: ignore[attr-defined]
        assert plan.requests == [(seg, check)] and seg.fn is seg.made  # type: ignore[attr-defined]


def test_a_call_that_moves_stacks_refills_before_and_shows_the_store_after() -> None:
    """A call with stack traffic: the stacks of its state go through ``DeviceStacks.before`` (the
    rest untouched) and the call's new state is shown to ``after``; all inside ``device_oom`` for its
    device. A call without traffic touches neither.
    Kills ``call``'s traffic tests and arguments of ``before``, ``after``, ``device_oom`` changed."""
    log: list[Any] = []
    run = _runner(("a",))
    t = Traffic({"stack:s": 1})
    run.state["a"] = {"err": _err(0), "stack:s": "S", "v": "V"}
    seg = _seg("a", _fn({}, log=log), traffic=t)
    out, lives, new = run.call(seg, {}, run.state["a"])  # type: ignore[misc]
    stacks: Any = run.stacks
    assert stacks.named("oom") == [("oom", t, "a", seg.describe())]
    assert stacks.named("before") == [("before", t, "a", {"stack:s": "S"})]
    assert log[0][1]["stack:s"] == ("refilled", "S") and log[0][1]["v"] == "V"
    assert stacks.named("after") == [("after", t, "a", new)]
    plain = _runner(("a",))
    plain.call(_seg("a", _fn({})), {}, plain.state["a"])
    pstacks: Any = plain.stacks
    assert pstacks.named("before") == [] and pstacks.named("after") == []


class _Driven:
    """A stand-in ``DrivenLoop``: ``run`` records its arguments and returns ``got``."""

    def __init__(self, got: Any) -> None:
        self.got = got
        self.args: list[Any] = []

    def run(self, env_in: Any, state: Any, max_iter: Any, store: Any, who: str, guard: Any) -> Any:
        self.args.append((env_in, state, max_iter, store, who, guard))
        return self.got


def _driven_seg(got: Any, push: Optional[dict[str, int]] = None, pop: Optional[dict[str, int]] = None) -> Segment:
    seg = _seg("a", None)
    seg.driven = SimpleNamespace(describe=lambda: "loop L")  # type: ignore[assignment]
    seg.push, seg.pop = dict(push or {}), dict(pop or {})
    seg.fn = _Driven(got)
    return seg


def test_a_driven_segment_runs_its_loop_on_its_devices_store_and_settles_its_stacks() -> None:
    """A driven segment's loop gets its inputs, state, the iteration bound, its device's store, the
    executor's name and the guard; then the stacks it pushes or pops (only those) are settled.
    Kills ``_drive``'s arguments and its settle filter changed."""
    new = {"err": _err(0), "p": 1, "q": 2, "r": 3}
    seg = _driven_seg(({"o": 1}, {}, new), push={"p": 1}, pop={"q": 1})
    run = _runner(("a",), max_iterations=9)
    got = run.call(seg, {"i": 1}, run.state["a"])
    assert got == ({"o": 1}, {}, new)
    (env_in, state, mi, store, who, guard), = seg.fn.args
    assert env_in == {"i": 1} and state is run.state["a"] and int(mi) == 9
    assert store == "store-a" and who == "who" and guard is no_guard
    stacks: Any = run.stacks
    assert stacks.named("settle") == [("settle", "a", {"p": 1, "q": 2})]
    assert stacks.named("after") == []


def test_a_driven_loops_retry_is_returned_and_its_error_raised() -> None:
    """A driven loop's ``Retry`` goes back to the runner untouched (nothing settled); its ``Raise``
    fails the run with the loop's error. Kills ``_drive``'s Retry and Raise branches changed."""
    run = _runner(("a",))
    assert run.call(_driven_seg(Retry(32)), {}, run.state["a"]) == Retry(32)
    stacks: Any = run.stacks
    assert stacks.named("settle") == []
    with pytest.raises(ExecutionError, match="driven failed"):
        run.call(_driven_seg(Raise(ExecutionError("driven failed"))), {}, run.state["a"])


def test_compiles_reads_the_backends_count() -> None:
    """``compiles``: the backend's running count of traces. Kills ``compiles`` returning None."""
    plan = _Plan()
    plan.backend.compile_count = 11
    assert _runner(plan=plan).compiles() == 11


def test_a_traced_run_ahead_call_is_dispatched_after_the_spans_that_made_its_inputs() -> None:
    """Traced, with devices running ahead: a call is a host span ``dispatch ...`` and a dispatched span
    on its device's track whose inputs are the spans that produced its inputs; its outputs are
    recorded as produced by its span; the span says whether the call compiled.
    Kills ``_traced``'s labels, ``iteration`` and ``compiled`` arguments and the producer record changed."""
    tl = Timeline()
    plan = _Plan()
    run = _runner(("a",), tl=tl, plan=plan)
    first = _seg("a", _fn({"x": np.ones(2)}))
    env = HostEnv()
    run.segment(first, env)

    def compiling(env_in: Any, state: Any, mi: Any) -> Any:
        plan.backend.compile_count += 1
        return {"y": np.zeros(1)}, {}, {**state, "err": _err(0)}

    second = _seg("a", compiling, reads=["x", "nope"], index=1)
    run.iteration = 3
    run.segment(second, env)
    run.settle()
    track = device_track("a")
    spans = tl.track_spans(track)
    assert [s.name for s in spans] == [first.describe(), second.describe()]
    assert [s.args["compiled"] for s in spans] == [False, True]
    assert spans[1].args["iteration"] == 3
    hosts = [s.name for s in tl.track_spans("host")]
    assert hosts == [f"dispatch {first.describe()}", f"dispatch {second.describe()}"]
    assert tl.track_spans("host")[1].args["iteration"] == 3
    i0, i1 = tl.spans.index(spans[0]), tl.spans.index(spans[1])
    assert tl._pending == {}  # settled
    assert run.producer[id(env.vals["x"])] == (env.vals["x"], i0)
    assert run.producer[id(env.vals["y"])][1] == i1


def test_a_traced_run_ahead_calls_inputs_are_its_producers_spans() -> None:
    """The inputs of a dispatched span are the spans that made the values it reads (and only those).
    Kills the inputs' comprehension in ``_traced`` changed."""
    tl = Timeline()
    calls = _dispatches(tl)
    run = _runner(("a",), tl=tl)
    env = HostEnv({"fed": 1.0}, {"fed": "a"})
    run.segment(_seg("a", _fn({"x": np.ones(1)})), env)
    run.segment(_seg("a", _fn({"y": np.ones(1)}), index=1), env)
    run.segment(_seg("a", _fn({}), reads=["y", "x", "fed"], index=2), env)
    run.settle()
    seen = [inputs for _, inputs in calls]
    assert seen[0] == [] and seen[2] == sorted([_kernel_span(tl, "segment 0"), _kernel_span(tl, "segment 1")])


def _dispatches(tl: Timeline) -> list[tuple[Any, list[int]]]:
    """What ``tl.dispatched`` is called with from now on, as ``(the value its span waits on, its
    inputs)`` per call, in order; each call still goes to the timeline."""
    calls: list[tuple[Any, list[int]]] = []
    real = tl.dispatched

    def dispatched(track: str, name: str, ready: Any, inputs: list[int], **args: Any) -> int:
        calls.append((ready, inputs))
        return real(track, name, ready, inputs, **args)

    tl.dispatched = dispatched  # type: ignore[method-assign]
    return calls


def _kernel_span(tl: Timeline, prefix: str) -> int:
    """The index of the device span (not the host's dispatch) whose name starts with ``prefix``."""
    return next(i for i, s in enumerate(tl.spans) if s.track != "host" and s.name.startswith(prefix))


def test_a_traced_call_the_host_waited_for_is_measured_on_its_track() -> None:
    """Traced, checking each step (or a driven loop): the call's span is measured on its device's
    track, with the iteration and whether it compiled, and there is no dispatch span.
    Kills ``_traced``'s ``or``/``and`` and the measured span's arguments changed."""
    tl = Timeline()
    run = _runner(("a",), tl=tl, check=True)
    run.iteration = 2
    seg = _seg("a", _fn({"x": np.ones(1)}))
    env = HostEnv()
    run.segment(seg, env)
    (span,) = tl.track_spans(device_track("a"))
    assert span.name == seg.describe() and span.args == {"iteration": 2, "compiled": False}
    assert tl.track_spans("host") == []
    assert run.producer[id(env.vals["x"])][1] == tl.spans.index(span)
    tl2 = Timeline()
    run2 = _runner(("a",), tl=tl2)
    dseg = _driven_seg(({}, {}, {"err": _err(0)}))
    run2._traced(dseg, HostEnv(), {}, {"err": _err(0)}, 0.0, False)
    assert [s.track for s in tl2.spans] == [device_track("a")]


def test_the_guard_of_a_traced_driven_loop_spans_its_chunks_and_moves() -> None:
    """Untraced, a driven loop's guard is ``no_guard``. Traced, each chunk call is a ``chunk`` span on
    ``driven loops`` and each move a ``stack chunks full`` (spill) or ``stack chunks back`` (refill)
    span on ``host swaps`` naming its stacks; the device is named only where there are several; any
    other event has no span. Kills ``guard``'s names, tracks, ``len(self.state) > 1`` and the event tests changed."""
    assert _runner(("a",)).guard(_seg("a", None)) is no_guard
    for devices, where in ((("a",), {}), (("a", "b"), {"device": "label-b"})):
        tl = Timeline()
        guard = _runner(devices, tl=tl).guard(_seg(devices[-1], None))
        for what, stacks in (("chunk", None), ("spill", ["s"]), ("refill", ["t"]), ("other", None)):
            with guard(what, stacks) as args:
                assert isinstance(args, dict)
        got = [(s.name, s.track, s.args) for s in tl.spans]
        assert got == [("chunk", "driven loops", where),
                       ("stack chunks full", "host swaps", {"stacks": ["s"], **where}),
                       ("stack chunks back", "host swaps", {"stacks": ["t"], **where})]


def test_on_workers_runs_at_once_without_workers() -> None:
    """With no worker threads, ``on_workers`` runs its function at once. Kills ``fn()`` dropped."""
    got: list[int] = []
    _runner().on_workers(lambda: got.append(1))
    assert got == [1]


def test_retiring_a_window_acts_on_its_lowest_word() -> None:
    """``_retire``: the words of a window's segments (a worker's future holds its state third) are
    read, and the lowest nonzero is acted on; a window of zeros does nothing; a traced run records
    the wait on the host's track. Kills ``_retire``'s ``result()[2]``, its Future test and its ``if failed`` changed."""
    fut: Future[Any] = Future()
    fut.set_result((None, None, _err(7)))
    plan = _Plan()
    run = _runner(plan=plan)
    with pytest.raises(ExecutionError, match="code 5"):
        run._retire([fut, _err(0), _err(5)])
    assert plan.asked == [(5, "who", 0)]
    run._retire([_err(0), _err(0)])
    assert plan.asked == [(5, "who", 0)]
    with pytest.raises(ExecutionError, match="code 7"):
        run._retire([fut])
    tl = Timeline()
    _runner(tl=tl)._retire([_err(0)])
    assert [(s.name, s.track) for s in tl.spans] == [("wait: parallel_iterations window", "host")]


def test_finish_acts_on_every_devices_word_lowest_first_until_a_retry() -> None:
    """``finish``: every device's word, the lowest code first whatever the device order (the error the
    interpreters raise); once a word decodes to a ``Retry`` the later ones are not acted on.
    Kills ``finish``'s ``retry is None`` test and its order changed."""
    plan = _Plan()
    run = _runner(("a", "b", "c"), plan=plan, errs={"a": 9, "b": 0, "c": 4})
    with pytest.raises(ExecutionError, match="code 4"):
        run.finish()
    plan = _Plan({2: Retry(8)})
    run = _runner(("a", "b"), plan=plan, errs={"a": 3, "b": 2})
    run.finish()
    assert run.retry == Retry(8) and [a[0] for a in plan.asked] == [2]
    quiet = _runner(("a",), plan=(p := _Plan()))
    quiet.finish()
    assert p.asked == []


def test_check_asks_the_plan_with_the_executor_and_the_chunks_moved() -> None:
    """``check`` decodes a word with the executor's name and how many chunks were moved out (a stack
    run empty after a move is a ``Retry``, not an error); an ``Ok`` outcome does nothing.
    Kills ``check``'s arguments to ``outcome_of`` changed."""
    plan = _Plan({1: OK})
    run = _runner(plan=plan, moved=3)
    run.check(1)
    assert plan.asked == [(1, "who", 3)] and run.retry is None


def test_lowest_first_sorts_the_nonzero_words() -> None:
    """``_lowest_first``: the nonzero codes, ascending. Kills ``_lowest_first``'s filter and sort changed."""
    assert runner_module._lowest_first([0, 5, 2, 0, 9, 1]) == [1, 2, 5, 9]
    assert runner_module._lowest_first([0, 0]) == []


def test_a_feed_is_placed_on_its_own_device() -> None:
    """``run`` puts each feed on the JAX device of the device it is fed to (not the default one):
    a segment there reads it without a copy.
    Kills ``runner.run:fd50bf17`` and ``d9f6dea5`` (``device_put`` without the feed's device)."""
    devs = jax.devices("cpu")
    run = StepRunner(_Plan(), {"a": {"err": _err(0)}}, _Stacks(["a"]),  # type: ignore[arg-type]
                     {"a": devs[-1]}, RunOptions(), RunPolicy("who"))
    env = run.run([], [("x", np.float32(1.0), "a")])
    assert env is not None and env.vals["x"].devices() == {devs[-1]}


def test_the_host_steps_get_their_step_and_environment() -> None:
    """``steps`` hands a ``HostCond`` to ``cond`` and a ``HostLoop`` to ``loop`` with the very step
    and the scope's environment (the host decides that cond or loop, in that scope).
    Kills ``runner.steps:25ac73c3``, ``d27de4eb``, ``e1561505``, ``ee247862`` (``cond``/``loop`` called with
    None)."""
    run = _runner(("a",))
    seen: list[tuple[str, Any, Any]] = []
    run.cond = lambda s, env: seen.append(("cond", s, env))  # type: ignore[method-assign]
    run.loop = lambda s, env: seen.append(("loop", s, env))  # type: ignore[method-assign]
    hc = HostCond(region=None, branches={})  # type: ignore[arg-type]
    hl = HostLoop(region=None, header=[], body=[], exit_side=[], devices=["a"], home="a")  # type: ignore[arg-type]
    env = HostEnv()
    run.steps([hc, hl], env)
    assert seen == [("cond", hc, env), ("loop", hl, env)]
    assert seen[0][1] is hc and seen[0][2] is env and seen[1][1] is hl and seen[1][2] is env


def test_a_value_of_another_device_is_copied_to_each_reader_device() -> None:
    """A segment reads a value that lives on another device as a copy on its own JAX device, one per
    reading device: a segment on a third device does not get the first reader's copy.
    Kills ``runner.segment:37104635``, ``10dfc34d``, ``5e515b69`` (``env.on`` without the device or its JAX
    device)."""
    devs = jax.devices("cpu")
    jdev = {"a": devs[1], "b": devs[2], "c": devs[3]}
    state = {d: {"err": _err(0)} for d in jdev}
    run = StepRunner(_Plan(), state, _Stacks(list(jdev)), jdev,  # type: ignore[arg-type]
                     RunOptions(), RunPolicy("who"))
    env = HostEnv()
    env.set("x", jax.device_put(np.float32(2.0), devs[2]), "b")
    log: list[Any] = []
    run.segment(_seg("a", _fn({}, log=log), reads=["x"]), env)
    run.segment(_seg("c", _fn({}, log=log), reads=["x"], index=1), env)
    assert [e["x"].devices() for e, _, _ in log] == [{devs[1]}, {devs[3]}]


def test_a_traced_call_says_it_compiled_only_if_the_count_moved_during_it() -> None:
    """A traced call's span says ``compiled`` by comparing the backend's count before and after the
    call, not with zero: a plan that compiled earlier and not now records False.
    Kills ``runner.segment:7c7f6b1f`` (the count before the call read as 0)."""
    plan = _Plan()
    plan.backend.compile_count = 5
    tl = Timeline()
    run = _runner(("a",), tl=tl, plan=plan, check=True)
    run.segment(_seg("a", _fn({})), HostEnv())
    (span,) = tl.spans
    assert span.args["compiled"] is False


def test_a_dispatched_span_waits_on_the_error_word_its_call_returned() -> None:
    """A call dispatched to run ahead is timed by its own device's word (the state it returned), the
    value that is ready once the call has run. Kills ``runner._traced:f6db1de2`` (the span dispatched on None)."""
    tl = Timeline()
    calls = _dispatches(tl)
    run = _runner(("a",), tl=tl)
    run.segment(_seg("a", _fn({}, err=0)), HostEnv())
    run.settle()
    done = [ready for ready, _ in calls]
    assert len(done) == 1 and done[0] is run.state["a"]["err"]


def test_a_traced_driven_loop_gets_the_guard_of_its_own_device() -> None:
    """A driven segment's loop runs under its segment's guard: traced on several devices, its chunk
    spans name the segment's device. Kills ``runner._drive:facb915c`` (``self.guard(None)``)."""
    tl = Timeline()
    run = _runner(("a", "b"), tl=tl)
    seg = _driven_seg(({}, {}, {"err": _err(0)}))
    seg.device = "b"
    run.call(seg, {}, run.state["b"])
    (*_, guard), = seg.fn.args
    with guard("chunk", None):
        pass
    assert [(s.name, s.args) for s in tl.spans] == [("chunk", {"device": "label-b"})]


def test_a_traced_wait_starts_when_the_host_starts_waiting() -> None:
    """A traced ``_retire``'s host span starts at the timeline's time when the wait began, not at the
    run's start. Kills ``runner._retire:566988ea`` (the wait's start read as 0)."""
    tl = Timeline()
    tl.now = lambda: 5.0  # type: ignore[method-assign]
    _runner(tl=tl)._retire([_err(0)])
    (span,) = tl.spans
    assert span.start_s == 5.0 and span.dur_s == 0.0
