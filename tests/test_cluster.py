"""Cluster specs and the per-task runner, without Ray: the runners of two tasks run in threads of this
process, wired by direct calls, and must give the unpartitioned reference's results."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from cluster_programs import (
    SPEC,
    T0,
    T1,
    cond_across_tasks,
    dev,
    fetched,
    gradient_across_tasks,
    loop_across_tasks,
    run_in_process,
)

import turnout as tn
from turnout.devices.cluster import ClusterSpec
from turnout.session import RunOptions


# ---- cluster specs -----------------------------------------------------------------------------------
def test_spec_devices_and_tasks() -> None:
    spec = ClusterSpec({"worker": [{"devices": 2, "resources": {"node_a": 0.5}},
                                   {"devices": ["CPU:0", "/job:worker/task:1/device:GPU:0"], "num_gpus": 1}],
                        "ps": [{"devices": ["cpu:0"], "num_cpus": 1}]})
    assert spec.devices == ["/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:1",
                            "/job:worker/task:1/device:CPU:0", "/job:worker/task:1/device:GPU:0",
                            "/job:ps/task:0/device:CPU:0"]
    assert spec.task_of("/job:worker/task:1/device:GPU:0").name == "/job:worker/task:1"
    assert spec.task("/job:ps/task:0").num_cpus == 1 and spec.tasks[0].resources == {"node_a": 0.5}
    with pytest.raises(tn.PlacementError, match="belongs to no task"):
        spec.task_of("/job:worker/task:7/device:CPU:0")


@pytest.mark.parametrize("bad, match", [
    ({}, "maps job names"),
    ([{"devices": 1}], "maps job names"),
    ({"wor ker": [{"devices": 1}]}, "bad job name"),
    ({"worker": []}, "non-empty list of tasks"),
    ({"worker": {"devices": 1}}, "non-empty list of tasks"),
    ({"worker": [{"devices": 0}]}, "at least 1"),
    ({"worker": [{"devices": []}]}, "non-empty list"),
    ({"worker": [{}]}, "missing 'devices'"),
    ({"worker": [{"devices": 1, "gpus": 1}]}, r"unknown field\(s\) \['gpus'\]"),
    ({"worker": [{"devices": ["cpu:0", "CPU:0"]}]}, "listed twice"),
    ({"worker": [{"devices": ["/job:worker/task:1/device:CPU:0"]}]}, "belongs to another task"),
    ({"worker": [{"devices": ["tpu"]}]}, "cannot parse device name"),
    ({"worker": [{"devices": ["GPU:0"]}]}, "num_gpus=0"),
    ({"worker": [{"devices": 1, "num_cpus": -1}]}, "non-negative"),
    ({"worker": [{"devices": 1, "num_cpus": float("nan")}]}, "finite number"),
    ({"worker": [{"devices": 1, "resources": {"node_a": 0}}]}, "positive"),
    ({"worker": [{"devices": 1, "resources": {"CPU": 1}}]}, "bad resource name"),
    ({"worker": [{"devices": 1, "resources": ["node_a"]}]}, "mapping"),
])
def test_malformed_specs_are_rejected(bad: Any, match: str) -> None:
    with pytest.raises(tn.ClusterSpecError, match=match):
        ClusterSpec(bad)


def test_malformed_spec_is_rejected_before_ray_is_needed() -> None:
    g, x, y = loop_across_tasks(3)
    with pytest.raises(tn.ClusterSpecError, match="task /job:worker/task:1: missing 'devices'"):
        tn.Session(g, cluster={"worker": [{"devices": 2}, {"num_cpus": 1}]})


def test_import_turnout_does_not_import_ray() -> None:
    import subprocess
    import sys

    code = "import sys, turnout, turnout.devices, turnout.devices.cluster, turnout.devices.task_runner; " \
           "print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# ---- task runners in one process ---------------------------------------------------------------------
@pytest.mark.parametrize("parallel_iterations", [1, 10])
def test_loop_spanning_two_tasks_in_process(parallel_iterations: int) -> None:
    g, x, y = loop_across_tasks(30, parallel_iterations)
    want = tn.Session(g).run(y, {x: 2.0})
    out = run_in_process(g, [y], {x: 2.0})
    np.testing.assert_equal(fetched(out), [want])
    sent = sum((o.message_log[0] for o in out.values()), [])
    received = sum((o.message_log[1] for o in out.values()), [])
    assert sorted(sent) == sorted(received) and len(set(sent)) == len(sent)
    # the predicate reaches task 1 every iteration; the unconsumed tokens of an edge never pass its credit
    assert out[T0].remote_sent >= 31 and out[T1].remote_sent >= 30
    assert max(o.peak_unconsumed for o in out.values()) <= parallel_iterations


@pytest.mark.parametrize("value", [2.0, -2.0])
def test_cond_across_two_tasks_in_process(value: float) -> None:
    g, x, out_t = cond_across_tasks()
    want = tn.Session(g).run(out_t, {x: value})
    np.testing.assert_equal(fetched(run_in_process(g, [out_t], {x: value})), [want])


def test_recv_timeout_names_key_and_sending_task() -> None:
    g, x, y = loop_across_tasks(3)
    out = run_in_process(g, [y], {x: 1.0}, recv_timeout=0.5, only={T1})  # task 0 never runs
    err = out[T1]
    assert isinstance(err, tn.RecvTimeoutError)
    msg = str(err)
    assert "task /job:worker/task:1: no message for 0.5 s" in msg
    assert "loop/loop_cond:0->/job:worker/task:1" in msg and f"from task {T0}" in msg


def test_a_token_delivered_twice_fails_the_run_not_the_message() -> None:
    from turnout.devices.task_runner import TaskRendezvous
    from turnout.reference.rules import Token

    rv = TaskRendezvous()
    key = ("a:0->/job:worker/task:1/device:CPU:0", ())
    rv.deliver(key, Token(np.float32(1)))
    assert rv.aborted is None
    rv.deliver(key, Token(np.float32(1)))
    assert isinstance(rv.aborted, tn.ExecutionError) and "delivered twice" in str(rv.aborted)


# ---- the partition executor seam ----------------------------------------------------------------------
def test_a_task_puts_its_variables_back_when_the_run_fails_here_or_elsewhere() -> None:
    """Task 0 assigns its Variable, then fails (a division by zero after the assignment): it puts
    its store back itself. Task 1 assigns its own and ends well: it keeps what its store held before
    the run until the driver settles the run (``TaskRunner.settle``), and puts it back when told the
    run failed; a run that ended well everywhere keeps its values."""
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, shape=[], name="k")
        with tn.device(dev(0)):
            w0 = tn.Variable(np.float32(1.0), name="w0")
            bumped0 = w0.assign_add(1.0)
            with tn.control_dependencies([bumped0]):
                q = tn.divide(tn.constant(6), k)
        with tn.device(dev(1, 1)):
            w1 = tn.Variable(np.float32(1.0), name="w1")
            bumped1 = w1.assign_add(1.0)
    for feed, fails in ((np.int32(0), True), (np.int32(2), False)):
        runners: dict[str, Any] = {}
        out = run_in_process(g, [q, bumped1], {k: feed}, runners_out=runners)
        assert isinstance(out[T0], tn.KernelError) is fails and not isinstance(out[T1], Exception)
        assert runners[T0].stores.get(None, {}) == ({} if fails else {"w0": 2.0})
        assert runners[T1].stores[None] == {"w1": 2.0}  # until the driver says how the run ended
        runners[T1].settle(1, keep=not fails)
        assert runners[T1].stores[None] == ({} if fails else {"w1": 2.0})
        runners[T1].settle(1, keep=False)  # settled once: a second word changes nothing
        assert runners[T1].stores[None] == ({} if fails else {"w1": 2.0})


def test_a_partition_executor_plugs_in_by_name_or_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from cluster_programs import _Counted

    from turnout.devices import partition_executors

    g, x, y = loop_across_tasks(6)
    want = tn.Session(g).run(y, {x: 2.0})
    monkeypatch.setitem(partition_executors.PARTITION_EXECUTORS, "counting", "cluster_programs:COUNTING")
    for name in ("counting", "cluster_programs:COUNTING"):
        before = (_Counted.prepared, _Counted.made)
        out = run_in_process(g, [y], {x: 2.0}, executor=name)
        np.testing.assert_equal(fetched(out), [want])
        n_parts = sum(len(o.firings) for o in out.values())
        assert n_parts == 3 and (_Counted.prepared, _Counted.made) == (before[0] + n_parts, before[1] + n_parts)


# ---- memory budgets, counted per device on every task ------------------------------------------------
X3 = np.array([0.3, -0.6, 0.9], np.float32)


def _partitioned_reference(g: tn.Graph, gx: tn.Tensor, x: tn.Tensor, budget: int) -> dict[str, Any]:
    """The partitioned reference executor's stats of the same run on the cluster's devices."""
    sess = tn.Session(g, backend="partitioned", devices=SPEC.devices)
    sess.run(gx, {x: X3}, memory_budget=budget)
    return sess.last_result.stats


@pytest.mark.parametrize("executor", ["reference", "fast"])
def test_a_run_budget_is_counted_per_device_on_every_task(executor: str) -> None:
    """Each task's partitions count what their loops save against a run's ``memory_budget``, per
    device, as the partitioned reference executor counts them (the driver merges the tasks' counts
    with ``memory_plan.device_saved_stats``); a budget below what a device saves stops the run with
    ``ResourceExhaustedError`` naming the loop, on the task that would go over."""
    from turnout.memory_plan import device_saved_stats

    if executor == "fast":
        pytest.importorskip("jax")
    g, x, gx = gradient_across_tasks()
    want = tn.Session(g).run(gx, {x: X3})
    roomy = 10**6
    out = run_in_process(g, [gx], {x: X3}, executor=executor, options=RunOptions(memory_budget=roomy))
    np.testing.assert_allclose(fetched(out)[0], want, rtol=1e-5)
    merged = device_saved_stats({d: s for o in out.values() for d, s in (o.saved or {}).items()})
    ref = _partitioned_reference(g, gx, x, roomy)
    assert merged["peak_saved_bytes_per_device"] == ref["peak_saved_bytes_per_device"] and merged["saved_bytes"]
    assert merged["saved_bytes"] == ref["saved_bytes"] and merged["peak_saved_bytes"] == ref["peak_saved_bytes"]
    tight = merged["peak_saved_bytes"] - 1
    out = run_in_process(g, [gx], {x: X3}, executor=executor, options=RunOptions(memory_budget=tight),
                         recv_timeout=1.0)  # (the other task waits for what the failed one never sends)
    errors = [o for o in out.values() if isinstance(o, tn.ResourceExhaustedError)]
    assert errors and 'loop "loop"' in str(errors[0]), out


@pytest.mark.parametrize("executor", ["reference", "fast"])
def test_a_task_gives_a_recomputed_loop_the_slots_its_driver_says(executor: str) -> None:
    """Law: a task gives each recomputed loop of its partitions at most the ``slot_capacity`` its
    driver says (``turnout.slot_sizes.slots_given``; every slot the budget holds where None), reports
    them in its outcome (``slot_stats``, per loop, as a run's stats say them), and reports what a loop
    needed beyond them (its trip count: ``slots_needed``, 0 where it got enough) from whichever task
    reads the loop's ``CheckpointTrips``; the gradient is the store-everything one whatever the count."""
    from turnout.slot_sizes import slots_given

    if executor == "fast":
        pytest.importorskip("jax")
    g, x, gx = gradient_across_tasks(20, budget=5000 * 20)  # 5,000 slots of 20 bytes
    g0, x0, gx0 = gradient_across_tasks(20)
    want = tn.Session(g0).run(gx0, {x0: X3})
    for capacity in (None, 8, 32):
        out = run_in_process(g, [gx], {x: X3}, executor=executor, slot_capacity=capacity)
        np.testing.assert_allclose(fetched(out)[0], want, rtol=1e-5)
        given = 5000 if capacity is None else slots_given(5000, capacity)
        stats = [o.slot_stats for o in out.values() if o.slot_stats]
        assert stats == [{"checkpoint_slots": {"loop": given}, "checkpoint_bytes": {"loop": given * 20}}], out
        assert sum(o.slots_needed for o in out.values()) == (20 if given < 20 else 0)


def test_a_partition_run_whole_counts_its_stacks_as_the_fast_backend() -> None:
    """A partition that talks to no other runs whole on the fast backend, which counts its own stack
    buffers against the run's budget: its peak in the task's stats (``peak_device_stack_bytes``), and
    a budget below it stops the run with ``ResourceExhaustedError``."""
    pytest.importorskip("jax")
    g = tn.Graph()
    with g.as_default(), tn.device(dev(1, 0)):
        x = tn.placeholder(tn.float32, shape=[3], name="x")
        _, y = tn.while_loop(lambda i, v: i < 6, lambda i, v: (i + 1, tn.tanh(v) * v), [tn.constant(0), x])
        (gx,) = tn.gradients(tn.reduce_sum(y), [x])
    want = tn.Session(g).run(gx, {x: X3})
    out = run_in_process(g, [gx], {x: X3}, executor="fast", options=RunOptions(memory_budget=10**6))
    np.testing.assert_allclose(fetched(out)[0], want, rtol=1e-5)
    (stats,) = [s for o in out.values() for s in (o.executor_stats or {}).values() if s.get("whole_runs")]
    assert stats["peak_device_stack_bytes"] > 0
    out = run_in_process(g, [gx], {x: X3}, executor="fast", options=RunOptions(memory_budget=16), recv_timeout=1.0)
    assert any(isinstance(o, tn.ResourceExhaustedError) for o in out.values()), out


@pytest.mark.parametrize("executor", ["reference", "fast"])
def test_a_loops_own_budget_recomputes_across_tasks(executor: str) -> None:
    """A loop's own ``memory_budget`` reverses it from checkpoints on the cluster too: the gradient is
    the store-everything one, and what the tasks count of the loop is its slots, within the budget."""
    if executor == "fast":
        pytest.importorskip("jax")
    budget = 3 * (3 * 4 + 4 + 4)  # three states: the counter, the vector and its position
    g, x, gx = gradient_across_tasks(budget=budget)
    g0, x0, gx0 = gradient_across_tasks()
    assert not [nd for nd in g.nodes if nd.op == "StackPush"]
    out = run_in_process(g, [gx], {x: X3}, executor=executor, options=RunOptions(memory_budget=10**6))
    np.testing.assert_allclose(fetched(out)[0], tn.Session(g0).run(gx0, {x0: X3}), rtol=1e-5)
    counted = {d: s.by_loop for o in out.values() for d, s in (o.saved or {}).items()}
    assert any(b.get("loop") for b in counted.values()) and all(b.get("loop", 0) <= budget for b in counted.values())


@pytest.mark.parametrize("name, match", [
    ("fastest", r"unknown partition executor 'fastest'.*\['fast', 'reference'\]"),
    ("no_such_module_here:KIND", "cannot load"),
    ("cluster_programs:SPEC", "is a ClusterSpec, not an ExecutorKind"),
])
def test_an_unknown_partition_executor_is_refused(name: str, match: str) -> None:
    from turnout.devices.partition_executors import executor_kind

    with pytest.raises(tn.UnsupportedError, match=match):
        executor_kind(name)


# ---- traces of runs over tasks ------------------------------------------------------------------------
def _firings(trace: Any) -> Counter[tuple[str, str, str, tuple[Any, ...], bool]]:
    return Counter((d, e.node, e.op, e.tag, e.dead) for d, e in trace.events)


def test_task_traces_merge_into_the_one_process_timeline() -> None:
    from turnout.devices.cluster_trace import merge

    g, x, y = loop_across_tasks(5)
    out = run_in_process(g, [y], {x: 2.0}, options=RunOptions(trace=True))
    trace = merge({d: evs for o in out.values() for d, evs in o.traces.items()})
    one = tn.Session(g, devices=SPEC.devices)
    one.run(y, {x: 2.0}, trace=True)
    assert one.last_result is not None
    # the same firings, live or dead, on the same devices as a traced run in one process
    assert _firings(trace) == _firings(one.last_result.trace) and len(trace) > 0
    seqs = [e.seq for _, e in trace.events]
    assert seqs[0] == 0 and seqs == sorted(seqs)
    for track in trace.tracks.values():  # a task's own firing order is kept
        own = [e.seq for e in track.events]
        assert own == sorted(own) and len(set(own)) == len(own)
    # every Recv comes after the Send of its key, whichever task each sits on
    sent = {(e.node.removeprefix("_send/"), e.tag): e.seq for _, e in trace.events if e.op == "Send"}
    recvs = [(e.node.removeprefix("_recv/"), e.tag, e.seq) for _, e in trace.events if e.op == "Recv"]
    assert recvs and all(sent[(edge, tag)] < seq for edge, tag, seq in recvs)
    assert trace.summary()["sends"] == sum(o.sent for o in out.values())
    # the summary's firings are the run's node firings, as in one process (iteration retirements aside)
    assert trace.summary()["firings"] == sum(n for o in out.values() for n in o.firings.values())
    assert trace.summary()["firings"] == one.last_result.stats["firings"] == one.last_result.trace.summary()["firings"]


def _skewed(tracks: dict[str, list[Any]], task: str, by_us: int) -> dict[str, list[Any]]:
    from turnout.reference.trace import Event

    return {d: [Event(e.seq + (by_us if f"/task:{task}/" in d else 0), e.node, e.op, e.tag, e.dead, e.rule)
                for e in evs] for d, evs in tracks.items()}


def _causal(trace: Any) -> bool:
    sent = {(e.node.removeprefix("_send/"), e.tag): e.seq for _, e in trace.events if e.op == "Send"}
    return all(sent[(e.node.removeprefix("_recv/"), e.tag)] < e.seq for _, e in trace.events if e.op == "Recv")



def test_a_task_clock_that_lags_is_corrected_so_every_recv_follows_its_send() -> None:
    from turnout.devices.cluster_trace import clock_offsets, merge

    g, x, y = loop_across_tasks(5)
    out = run_in_process(g, [y], {x: 2.0}, options=RunOptions(trace=True))
    tracks = {d: evs for o in out.values() for d, evs in o.traces.items()}
    same = clock_offsets(tracks)  # one machine: nothing to correct
    assert same.consistent and set(same.offsets.values()) == {0}
    lag = 50_000  # task 1's clock 50 ms behind: its Recvs would be stamped before their Sends
    skewed = _skewed(tracks, "1", -lag)
    sent = {(e.node.removeprefix("_send/"), e.tag): e.seq for evs in skewed.values() for e in evs if e.op == "Send"}
    assert any(e.seq < sent[(e.node.removeprefix("_recv/"), e.tag)]  # the skew does break causality
               for evs in skewed.values() for e in evs if e.op == "Recv")
    fix = clock_offsets(skewed)
    assert fix.consistent and fix.offsets["/job:worker/task:0"] == 0
    assert 0 < fix.offsets["/job:worker/task:1"] <= lag  # the least shift that restores causality
    trace = merge(skewed)
    assert _causal(trace) and trace.clock_offsets == fix
    assert _firings(trace) == _firings(merge(tracks))  # the same firings; only stamps move


def test_clocks_that_no_offset_can_reconcile_are_reported_not_looped_on() -> None:
    from turnout.devices.cluster_trace import clock_offsets
    from turnout.reference.trace import Event

    t0, t1 = "/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"
    tag = (("f", 0),)
    # a -> b received 10 us "before" it was sent, and b -> a likewise: a positive cycle
    tracks = {t0: [Event(100, "_send/a", "Send", tag, False, "r"), Event(95, "_recv/b", "Recv", tag, False, "r")],
              t1: [Event(90, "_recv/a", "Recv", tag, False, "r"), Event(105, "_send/b", "Send", tag, False, "r")]}
    fix = clock_offsets(tracks)
    assert not fix.consistent and min(fix.offsets.values()) == 0


def test_credits_ride_on_tokens_and_small_ones_wait_until_the_task_would_wait() -> None:
    from turnout.devices.task_runner import TaskPlan, TaskRendezvous

    sent: list[tuple[str, str, Any]] = []
    rv = TaskRendezvous()
    plan = TaskPlan(T1, {}, [], remote_out={"back": T0}, remote_in={"fwd": T0}, credits={"fwd": 10, "back": 10})
    rv.attach(plan, lambda dst, method, run, *args: sent.append((dst, method, args)), run_id=1)
    rv.owed[(T0, "fwd", ())] = 3  # under half the credit: held back while the task is busy
    rv.flush(force=False)
    assert sent == [] and rv.owed
    rv.pending[T0] = [(("back", ()), np.float32(1), False)]  # a token for T0 takes the credits along
    rv.flush(force=False)
    assert sent == [(T0, "deliver", ([(("back", ()), np.float32(1), False)], [("fwd", (), 3)]))] and not rv.owed
    sent.clear()
    rv.owed[(T0, "fwd", ())] = 5  # half the credit: goes at once
    rv.flush(force=False)
    assert sent == [(T0, "credit", ([("fwd", (), 5)],))]
    sent.clear()
    rv.owed[(T0, "fwd", ())] = 1  # before the task waits, everything owed goes
    rv.flush(force=True)
    assert sent == [(T0, "credit", ([("fwd", (), 1)],))] and not rv.owed


def test_the_lstm_benchmark_splits_layers_and_their_loop_variables_across_tasks() -> None:
    import importlib.util
    from pathlib import Path

    from turnout.devices import place

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "ray_lstm.py"
    spec = importlib.util.spec_from_file_location("ray_lstm", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    build = bench.build

    devices = [d for t in SPEC.tasks for d in t.devices[:1]]
    m = build(2, 3, 2, 4, lambda layer: devices[layer % 2], SPEC.devices)
    g, xs = m["graph"], m["xs"]
    value = np.random.default_rng(0).normal(size=(3, 2, 4)).astype(np.float32)
    want = tn.Session(g).run(m["loss"], {xs: value})
    np.testing.assert_allclose(fetched(run_in_process(g, [m["loss"]], {xs: value}, requests=m["requests"])), [want],
                               rtol=1e-6)
    placement = place(g, SPEC.devices, m["requests"])
    merges = {n.name: placement[n] for n in g.nodes if n.op == "Merge"}
    # both layers' loop variables, forward and backward, sit with their layer: task 1 holds some of each
    assert {d for name, d in merges.items() if name.startswith("lstm/")} == set(devices)
    assert {d for name, d in merges.items() if name.startswith("gradients/")} == set(devices)
