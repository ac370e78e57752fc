"""Laws of what a fast-backend run starts from and leaves behind (``turnout.fast.run_state.RunState``):
the state a run starts from (error word, Variables' device copies, stacks kept or made), what it keeps
for the next run, the accounting of what the backend holds between runs, and how its error word is
read. Each law kills mutants of the full set of ``fast/run_state.py`` (issue 40, part 3) that the
backend's runs leave alive or reach only through runs of seconds. ``RunState``'s methods are called
on a stand-in backend (the attributes they read) and stand-in plans, so the file takes milliseconds;
the arrays are real (JAX's, on the default device)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.errors import KernelError
from turnout.fast import run_state
from turnout.fast.outcome import Ok, Raise
from turnout.fast.run_state import WHO, RunState
from turnout.fast.stacks import StackValue, stack_nbytes
from turnout.fast.state_keys import var_key


def _backend(**attrs: Any) -> Any:
    """A stand-in backend: no stack buffers or device copies held, unless ``attrs`` says so; the
    methods of ``RunState`` that others call, bound to it."""
    b = SimpleNamespace(**{"_stack_bufs": {}, "_dev_vars": {}, **attrs})
    b._device_var = lambda *a: RunState._device_var(b, *a)
    b._kept_stacks, b._decode = RunState._kept_stacks, RunState._decode
    return b


def _sv(capacity: int = 4, elem: int = 2) -> StackValue:
    """A kept ``StackValue`` of float32 entries of ``elem`` values, with its index record."""
    return StackValue(capacity, np.float32, np.zeros((capacity, elem), np.float32), np.zeros((capacity, 1), np.int32),
                      np.int32(0))


def test_held_bytes_count_kept_stacks_and_device_copies() -> None:
    """What the backend holds between runs: every kept stack's bytes (a ``StackValue``'s buffer and
    record, or a buffer alone) plus every Variable's device copy."""
    sv, bare, dev = _sv(), np.zeros((8, 3), np.float32), np.zeros(5, np.float64)
    b = _backend(_stack_bufs={1: {"a": sv}, 2: {"b": bare}}, _dev_vars={"v": ("entry", dev)})
    assert RunState.held_bytes(b) == sv.nbytes() + bare.nbytes + dev.nbytes
    assert RunState.held_bytes(_backend()) == 0


def test_stack_buffers_report_each_rungs_capacity_ladder_and_stacks() -> None:
    """Per plan holding kept stacks: its capacity, the ladder of the top plan it is a rung of, and
    each stack's bytes; ``None`` for what is not known (a plan no longer planned, a plan not run on a
    ladder)."""
    rung = SimpleNamespace(capacity=8, rungs={})
    top = SimpleNamespace(capacity=4, ladder=(4, 8), rungs={})
    top.rungs = {4: top, 8: rung}
    flat = SimpleNamespace(capacity=16, ladder=None, rungs={})
    flat.rungs = {16: flat}
    gone = SimpleNamespace(capacity=32)
    a, c = np.zeros((4, 2), np.float32), np.zeros((32, 1), np.float32)
    b = _backend(_plans={"s": top, "s8": rung, "f": flat},
                 _stack_bufs={id(top): {"a": a}, id(rung): {"b": _sv(8)}, id(flat): {}, id(gone): {"c": c}})
    assert RunState.stack_buffers(b) == [
        {"capacity": 4, "ladder": [4, 8], "stacks": {"a": a.nbytes}},
        {"capacity": 8, "ladder": [4, 8], "stacks": {"b": stack_nbytes(_sv(8))}},
        {"capacity": 16, "ladder": None, "stacks": {}},
        {"capacity": None, "ladder": None, "stacks": {"c": c.nbytes}}]


def test_release_buffers_frees_stacks_and_copies_and_settles_the_variables() -> None:
    """``release_buffers`` drops every kept stack and device copy and settles the session's values
    (a run's new values read back from the device before the copies go)."""
    settled: list[bool] = []
    b = _backend(_stack_bufs={1: {"a": 1}}, _dev_vars={"v": (1, 2)},
                 variable_store=SimpleNamespace(settle=lambda: settled.append(True)))
    RunState.release_buffers(b)
    assert b._stack_bufs == {} and b._dev_vars == {} and settled == [True]


def test_a_span_is_the_timelines_while_tracing_and_an_empty_context_otherwise() -> None:
    """``_span``: the timeline's span of that name, track and arguments while a trace is recorded;
    else a context that yields a fresh, empty dict (what a span's caller writes its arguments into)."""
    asked: list[Any] = []
    tl = SimpleNamespace(span=lambda name, track, **args: asked.append((name, track, args)) or "span")
    assert RunState._span(_backend(_timeline=tl), "stage", "device", n=3) == "span"  # type: ignore[arg-type]
    assert asked == [("stage", "device", {"n": 3})]
    with RunState._span(_backend(_timeline=None), "stage", "device") as got:  # type: ignore[arg-type]
        assert got == {}
        got["compiled"] = True  # (as a caller writes its arguments)
    with RunState._span(_backend(_timeline=None), "stage", "device") as again:  # type: ignore[arg-type]
        assert again == {} and again is not got  # (each untraced span its own dict: no state kept between runs)


def _plan_with_variable() -> tuple[Any, np.ndarray]:
    """A stand-in plan that reads one Variable ``v`` (a real VarHandle node, initial value [1, 2])."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.array([1.0, 2.0], np.float32), name="v")
    return SimpleNamespace(var_nodes={"v": v.handle_node}), np.array([1.0, 2.0], np.float32)


def test_a_run_starts_from_the_last_runs_device_copy_while_the_entry_is_the_one_it_wrote() -> None:
    """A Variable's device copy: the first run puts its initial value on the device (and makes it the
    session's entry); while the entry is the one the last run wrote, its copy is reused; once the
    session holds another value, that value is put on the device instead."""
    plan, initial = _plan_with_variable()
    b, variables = _backend(), {}
    first = RunState._device_var(b, plan, "v", variables)  # type: ignore[arg-type]
    np.testing.assert_array_equal(np.asarray(first), initial)
    np.testing.assert_array_equal(variables["v"], initial)
    b._dev_vars["v"] = (variables["v"], "the last run's copy")
    assert RunState._device_var(b, plan, "v", variables) == "the last run's copy"  # type: ignore[arg-type]
    variables["v"] = np.array([5.0, 6.0], np.float32)
    np.testing.assert_array_equal(np.asarray(RunState._device_var(b, plan, "v", variables)), [5.0, 6.0])  # type: ignore[arg-type]


def _stack_plan() -> Any:
    """A stand-in plan of capacity 4 reading Variable ``v``, with a pending stack ``p`` (no shapes
    known), stacks ``m`` (made fresh), ``r`` (reused whole), ``f`` (a buffer the fused stage kept)
    and ``i`` (made inside the fused call), each of float32 entries of 2 values and a 1-deep index."""
    plan, _ = _plan_with_variable()
    plan.capacity, plan.inside = 4, {"i"}
    plan.stack_slots = [("p", np.float32, None)] + [(k, np.float32, ((2,), (1,))) for k in "mrfi"]
    return plan


def test_a_staged_run_starts_from_a_zero_error_word_and_kept_or_new_stacks() -> None:
    """A run of the stages starts from error word 0 (int32), the Variables' copies, a pending stack
    for one of unknown shape, the stacks the last run of its plan kept (their buffers and records
    as they are, a fused-kept buffer given a new record) and new zeroed ones, each at pointer 0;
    the plan's kept stacks are taken (donated), other plans' left."""
    plan = _stack_plan()
    kept_r, kept_f = _sv(), np.ones((4, 2), np.float32)
    b = _backend(_stack_bufs={id(plan): {"r": kept_r, "f": kept_f}, 0: {"x": 1}})
    state = RunState._initial_state(b, plan, {})  # type: ignore[arg-type]
    assert b._stack_bufs == {0: {"x": 1}}
    assert state["err"] == 0 and state["err"].dtype == np.int32
    np.testing.assert_array_equal(np.asarray(state[var_key("v")]), [1.0, 2.0])
    assert state["p"].buf is None and state["p"].capacity == 4 and state["p"].dtype == np.float32
    assert state["r"].buf is kept_r.buf and state["r"].idx is kept_r.idx
    assert state["f"].buf is kept_f and state["f"].idx.shape == (4, 1)
    for k in "mi":
        assert state[k].buf.shape == (4, 2) and state[k].idx.shape == (4, 1) and state[k].idx.dtype == np.int32
        assert not np.asarray(state[k].buf).any()
    for k in "mrfi":
        assert state[k].capacity == 4 and state[k].dtype == np.float32 and state[k].ptr == 0


def test_a_fused_run_starts_from_buffers_alone_and_skips_the_stacks_made_inside() -> None:
    """The fused stage sets its error word itself and makes its index records and the stacks it
    makes inside the call: its state holds no ``err``, no stack of ``plan.inside``, and each other
    stack as its value buffer alone (kept, or new zeros)."""
    plan = _stack_plan()
    kept_f = np.ones((4, 2), np.float32)
    state = RunState._initial_state(_backend(_stack_bufs={id(plan): {"f": kept_f}}), plan, {}, fused=True)  # type: ignore[arg-type]
    assert set(state) == {var_key("v"), "p", "m", "r", "f"}
    assert state["f"] is kept_f and state["m"].shape == (4, 2) and not isinstance(state["m"], StackValue)


def test_a_stack_made_inside_the_fused_call_leaves_out_only_itself() -> None:
    """Whatever the order of the plan's stacks, one made inside the fused call leaves out itself
    alone: the stacks listed after it still start from their buffers. Kills the loop stopping at the
    first such stack (``break`` for ``continue``)."""
    plan = _stack_plan()
    plan.stack_slots = [(k, np.float32, ((2,), (1,))) for k in "imf"]
    state = RunState._initial_state(_backend(), plan, {}, fused=True)  # type: ignore[arg-type]
    assert set(state) == {var_key("v"), "m", "f"} and all(state[k].shape == (4, 2) for k in "mf")


def test_only_stacks_with_a_buffer_are_kept() -> None:
    """The stacks kept for the next run: those of ``plan.kept`` in the state that have a value buffer
    (a ``StackValue`` with one, or a buffer alone); a pending one, or one the state lacks, is not."""
    sv, bare = _sv(), np.zeros((4, 2), np.float32)
    state = {"a": sv, "b": StackValue(4, np.float32), "c": bare, "e": _sv()}
    kept = RunState._kept_stacks(SimpleNamespace(kept=["a", "b", "c", "d"]), state)  # type: ignore[arg-type]
    assert kept == {"a": sv, "c": bare}


@pytest.mark.parametrize("prealloc, keep", [(True, True), (True, False), (False, True)])
def test_a_run_ends_with_its_fetches_its_variables_written_and_its_stacks_kept_or_dropped(
        monkeypatch: pytest.MonkeyPatch, prealloc: bool, keep: bool) -> None:
    """``_finish``: the fetched values (``fetched`` of the fetches, environment and live flags), each
    Variable written back (flagged when the plan writes it), and the plan's stacks kept for its next
    run only where it preallocates them and the options keep buffers (else dropped; other plans'
    untouched)."""
    calls: list[Any] = []
    monkeypatch.setattr(run_state, "fetched", lambda f, env, lives: calls.append(("fetched", f, env, lives)) or ["x"])
    monkeypatch.setattr(run_state, "write_variables", lambda *a: calls.append(("write", *a)))
    plan = SimpleNamespace(prealloc=prealloc, kept=["s"], var_nodes={"v": None, "w": None}, written_vars={"w"})
    b = _backend(options=SimpleNamespace(keep_stack_buffers=keep), _stack_bufs={id(plan): "old", 0: "other"})
    state = {"s": np.zeros(2), var_key("v"): "v copy", var_key("w"): "w copy"}
    variables: dict[str, Any] = {}
    got = RunState._finish(b, plan, ["f"], {"env": 1}, {"lives": 1}, state, variables)  # type: ignore[arg-type]
    assert got == ["x"]
    assert calls == [("fetched", ["f"], {"env": 1}, {"lives": 1}),
                     ("write", (("v", False, None), ("w", True, None)), ["v copy", "w copy"], ["x"], variables,
                      b._dev_vars)]
    assert b._stack_bufs == ({id(plan): {"s": state["s"]}, 0: "other"} if prealloc and keep else {0: "other"})


def test_a_runs_stats_name_its_backend_compiles_stages_and_stacks() -> None:
    """A general-path run's stats: the backend, its compiles so far, the stages and whether fused, the
    stack capacity, the stages' seconds, then the stacks' and the checkpoint slots' own stats."""
    plan = SimpleNamespace(capacity=64, slots=SimpleNamespace(stats={"slots": 1}))
    got = RunState._run_stats(_backend(compile_count=3), plan, 2, True, [0.5], {"swapped": 7})  # type: ignore[arg-type]
    assert got == {"backend": "fast", "compiles": 3, "stages": 2, "fused": True, "stack_capacity": 64,
                   "stage_seconds": [0.5], "swapped": 7, "slots": 1}


def test_an_error_word_is_decoded_by_the_plan_naming_the_fast_backend() -> None:
    """``_decode`` asks the plan what a word means, naming the fast backend, with nothing swapped, not
    an attempt and no mark unless told; ``_raise_errors`` raises a Direct call's error (and returns
    on ``Ok``), reading the word as a Python int."""
    asked: list[Any] = []
    err = KernelError("boom")
    plan = SimpleNamespace(outcome_of=lambda *a: asked.append(a) or (Raise(err) if a[0] else Ok()))
    RunState._decode(plan, 5)  # type: ignore[arg-type]
    RunState._decode(plan, 6, 2, True, 9)  # type: ignore[arg-type]
    assert asked == [(5, "fast backend", 0, False, 0), (6, "fast backend", 2, True, 9)] and WHO == "fast backend"
    b = _backend()
    RunState._raise_errors(b, plan, np.int32(0))  # type: ignore[arg-type]
    with pytest.raises(KernelError, match="boom"):
        RunState._raise_errors(b, plan, np.int32(3))  # type: ignore[arg-type]
    assert type(asked[-1][0]) is int and asked[-1][0] == 3
