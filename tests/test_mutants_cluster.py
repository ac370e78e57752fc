"""The cluster modules (``devices/cluster.py``, ``task_runner.py``, ``cluster_trace.py``,
``partition_executors.py``) where mutation testing found them unchecked (``python tools/mutation.py
--module devices/task_runner.py`` and the others): tests that fail under a surviving mutant. Every run
here is Ray-free: task runners in threads of this process (``cluster_programs.run_in_process``).
"""

from __future__ import annotations

from collections import Counter, deque
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from cluster_programs import SPEC, T0, T1, dev, fetched, loop_across_tasks, run_in_process
from test_mutants_reference import _stalled_loop

import turnout as tn
from turnout.devices.cluster import ClusterSpec
from turnout.devices.task_runner import TaskPlan, TaskRendezvous, TaskRunner
from turnout.session import RunOptions


# ---- cluster specs ------------------------------------------------------------------------------------
def test_a_spec_made_from_a_spec_is_the_same_cluster() -> None:
    copy = ClusterSpec(SPEC)
    assert copy.tasks == SPEC.tasks and copy.tasks is not SPEC.tasks
    assert copy.devices == SPEC.devices and copy.task_of(dev(1, 1)).name == T1


@pytest.mark.parametrize("key", ["num_cpus", "num_gpus"])
def test_a_bad_resource_count_names_its_field(key: str) -> None:
    for value, match in ((-1, "must be non-negative, got -1"), ("2", "must be a finite number, got '2'")):
        with pytest.raises(tn.ClusterSpecError, match=f"task /job:worker/task:0: {key} {match}"):
            ClusterSpec({"worker": [{"devices": 1, key: value}]})


# ---- task runners -------------------------------------------------------------------------------------
def _vector_loop(n: int = 6) -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """A loop whose vector-valued body runs on task 1 while its predicate sits on task 0: ndarray
    tokens cross between tasks every iteration."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[3], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device(dev(1, 0)):
                y2 = y * 2.0 - 1.0
            return i + 1, y2

        with tn.device(dev(0, 1)):
            _, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), x], name="loop")
    return g, x, y


def test_read_only_arrays_from_another_task_are_used_as_values() -> None:
    """Ray's object store hands a receiver read-only arrays; the receiving task copies them (and must
    keep their values)."""
    g, x, y = _vector_loop()
    value = np.array([1.0, 0.5, -2.0], np.float32)
    want = tn.Session(g).run(y, {x: value})
    got = fetched(run_in_process(g, [y], {x: value}, frozen=True))
    np.testing.assert_array_equal(got[0], want)


def test_a_delivered_read_only_array_becomes_a_writable_copy() -> None:
    runner = TaskRunner(T1, lambda *a: None)
    arr = np.arange(3.0)
    arr.setflags(write=False)
    key = ("a:0->" + dev(1), ())
    runner.deliver(5, [(key, arr, False)])
    tok = runner._rendezvous(5).messages[key]  # type: ignore[union-attr]
    assert tok.value is not arr and tok.value.flags.writeable and not tok.dead
    np.testing.assert_array_equal(tok.value, arr)


def test_a_task_counts_the_messages_it_sends() -> None:
    """``remote_calls`` and ``credit_calls`` (the driver's ``deliver_calls_between_tasks`` and
    ``credit_calls_between_tasks``) are the deliver and credit messages each task sent."""
    g, x, y = loop_across_tasks(12, parallel_iterations=2)
    log: list[tuple[str, str, str]] = []
    out = run_in_process(g, [y], {x: 2.0}, messages=log)
    np.testing.assert_equal(fetched(out), [tn.Session(g).run(y, {x: 2.0})])
    by = Counter((src, method) for src, _, method in log)
    for t in (T0, T1):
        assert out[t].remote_calls == by[(t, "deliver")] > 0
        assert out[t].credit_calls == by[(t, "credit")]
        assert out[t].remote_calls <= out[t].remote_sent  # a message holds one token or more
        assert out[t].busy_s >= 0 and out[t].wait_s >= 0 and out[t].waits >= 0


def test_max_firings_bounds_each_task_exactly() -> None:
    """A task stops with NonTerminationError after more than ``max_firings`` firings of its own
    partitions: a limit equal to its count of firings passes, one less fails, naming the task."""
    g, x, y = loop_across_tasks(5)
    out = run_in_process(g, [y], {x: 2.0})
    per_task = {t: sum(o.firings.values()) for t, o in out.items()}
    busiest = max(per_task, key=per_task.__getitem__)
    top = per_task[busiest]
    assert top > sorted(per_task.values())[0]  # one task fires more: the limit tells them apart
    ok = run_in_process(g, [y], {x: 2.0}, options=RunOptions(max_firings=top))
    np.testing.assert_equal(fetched(ok), fetched(out))
    bad = run_in_process(g, [y], {x: 2.0}, recv_timeout=2.0, options=RunOptions(max_firings=top - 1))
    err = bad[busiest]
    assert isinstance(err, tn.NonTerminationError), err
    assert f"task {busiest}: more than max_firings={top - 1} firings" in str(err)


def test_a_timeout_names_the_task_each_waiting_recv_and_blocked_send_waits_on() -> None:
    """The RecvTimeoutError lists each waiting Recv and blocked Send with the task it waits on: the
    peer for a cross-task edge, this task itself for an edge between two of its devices."""
    runner = TaskRunner(T1, lambda *a: None)
    rv = TaskRendezvous()
    rv.attach(TaskPlan(T1, {}, [], remote_out={"out": T0}, remote_in={"in": T0}), lambda *a: None, 1)
    it = SimpleNamespace(device=dev(1))
    node = SimpleNamespace
    rv.waiting[("in", ())] = (it, node(name="r_in"), ())  # type: ignore[assignment]
    rv.waiting[("local_in", ())] = (it, node(name="r_local"), ())  # type: ignore[assignment]
    rv.blocked[("out", ())] = deque([(it, node(name="s_out"), (("f", 0),))])  # type: ignore[list-item]
    rv.blocked[("local_out", ())] = deque([(it, node(name="s_local"), (("f", 0),))])  # type: ignore[list-item]
    msg = runner._timeout_message(rv, 0.5)
    assert msg.startswith(f"task {T1}: no message for 0.5 s (recv_timeout)")
    lines = msg.splitlines()[1:]
    assert lines == [
        f"  Recv 'r_in' on {dev(1)} waits for (edge 'in', tag root) from task {T0}",
        f"  Recv 'r_local' on {dev(1)} waits for (edge 'local_in', tag root) from task {T1}",
        f"  Send 's_local' on {dev(1)} waits for a credit of (edge 'local_out', tag f:0) from task {T1}",
        f"  Send 's_out' on {dev(1)} waits for a credit of (edge 'out', tag f:0) from task {T0}",
    ], msg


def test_nodes_left_half_fed_do_not_fail_a_task_whose_fetches_were_produced() -> None:
    """A hand-built loop whose body reads a non-constant Enter stalls at iteration 1 after its Exit
    fired dead at iteration 0. The reference and the in-process partitioned run end at quiescence and
    report the dead fetch (DeadFetchError); a task must end there too and return the dead token (the
    driver turns it into the same DeadFetchError), not fail with a DeadlockError of its own."""
    g, out = _stalled_loop(control=False)
    with pytest.raises(tn.DeadFetchError):
        tn.Session(g).run(out)
    with pytest.raises(tn.DeadFetchError):
        tn.Session(g, devices=SPEC.devices).run(out)
    got = run_in_process(g, [out], {}, recv_timeout=2.0)
    assert not any(isinstance(o, BaseException) for o in got.values()), got
    values: list[Any] = [v for o in got.values() for v in o.values]
    assert values == [(0, None, True)]


# ---- partition executors --------------------------------------------------------------------------------
def test_every_partition_executor_kind_carries_the_name_it_is_registered_under() -> None:
    from turnout.devices.partition_executors import PARTITION_EXECUTORS, REFERENCE, executor_kind

    assert REFERENCE.name == "reference" and executor_kind("reference") is REFERENCE
    for key in PARTITION_EXECUTORS:
        assert executor_kind(key).name == key


# ---- cluster traces -------------------------------------------------------------------------------------
def test_a_wall_clock_stamps_integer_microseconds_that_never_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two firings within one microsecond, or a clock stepped back (NTP), still get increasing stamps;
    otherwise a stamp is the wall clock's microsecond."""
    import time

    from turnout.devices import cluster_trace

    clock = cluster_trace.WallClock()
    real = [next(clock) for _ in range(1000)]
    assert all(type(s) is int for s in real) and all(a < b for a, b in zip(real, real[1:]))
    assert abs(real[0] - time.time_ns() // 1000) < 60_000_000
    ns = iter([5_000_000, 5_000_400, 4_000_000, 9_000_999])
    monkeypatch.setattr(cluster_trace.time, "time_ns", lambda: next(ns))
    clock = cluster_trace.WallClock()
    stamps = [next(clock) for _ in range(4)]
    assert stamps == [5000, 5001, 5002, 9000] and all(type(s) is int for s in stamps)


def test_merging_no_tracks_is_an_empty_timeline() -> None:
    from turnout.devices.cluster_trace import merge

    trace = merge({})
    assert len(trace) == 0 and trace.events == [] and trace.tracks == {}


def test_a_merged_trace_keeps_each_events_rule() -> None:
    from turnout.devices.cluster_trace import merge

    g, x, y = loop_across_tasks(3)
    out = run_in_process(g, [y], {x: 2.0}, options=RunOptions(trace=True))
    tracks = {d: evs for o in out.values() for d, evs in o.traces.items()}
    trace = merge(tracks)
    t0 = min(evs[0].seq for evs in tracks.values() if evs)
    for d, evs in tracks.items():
        assert [(e.seq - t0, e.node, e.rule) for e in evs] == [(e.seq, e.node, e.rule) for e in trace.tracks[d].events]
    rules = {e.rule for _, e in trace.events}
    assert {"E-Send", "E-Recv", "E-Merge-Live", "E-Recv-Dead"} <= rules, rules


def test_an_aborted_task_stops_waiting_and_fails_with_the_reason() -> None:
    """The driver aborts the other tasks of a run when one dies: a task waiting for a message from
    the dead one raises TaskFailedError with the driver's reason, long before its recv_timeout."""
    import threading
    import time

    from turnout.devices import partition, place
    from turnout.devices.task_runner import split_by_task

    g, x, y = loop_across_tasks(3)
    parted = partition(g, place(g, SPEC.devices), [y], {(x.node.id, 0)})
    plans = split_by_task(parted, lambda d: SPEC.task_of(d).name)
    runner = TaskRunner(T1, lambda *a: None)
    runner.prepare(0, plans[T1])
    timer = threading.Timer(0.3, runner.abort, (1, f"task {T0} died"))
    timer.start()
    t = time.perf_counter()
    with pytest.raises(tn.TaskFailedError, match=f"^task {T0} died$"):
        runner.run(1, 0, {}, RunOptions(), recv_timeout=30.0)
    timer.join()
    assert time.perf_counter() - t < 20.0
    runner.abort(1, "late")  # an abort for a finished run is dropped quietly
    with pytest.raises(tn.ExecutionError, match="already ran on task"):
        runner.run(1, 0, {}, RunOptions())


def test_a_task_keeps_each_sessions_variables_in_its_own_store() -> None:
    runner = TaskRunner(T1, lambda *a: None)
    v = np.array([1.0, 2.0])
    runner.set_variables({"v": v, "w": np.float32(3)}, store="a")
    v[0] = 99.0  # the task holds its own copy
    runner.set_variables({"v": np.array([5.0])}, store="b")
    assert runner.variable_names("a") == ["v", "w"] and runner.variable_names("b") == ["v"]
    np.testing.assert_array_equal(runner.get_variables(["v", "nope"], "a")["v"], [1.0, 2.0])
    assert set(runner.get_variables(["v", "nope"], "a")) == {"v"}
    runner.delete_variables(["v"], "a")
    assert runner.variable_names("a") == ["w"] and runner.variable_names("b") == ["v"]
    runner.delete_variables(None, "b")
    assert runner.variable_names("b") == [] and "b" not in runner.stores
    assert runner.variable_names(None) == []
