"""Running on a Ray cluster: one local cluster of two nodes on 127.0.0.1 for the whole test session.

Every result is compared with the unpartitioned reference run of the same graph. The cluster is started
once (session-scoped fixture) with one CPU per node, and stopped at the end; each test that starts
actors stops them. Skipped when Ray is not installed (it is an optional extra, installed by the test
setup).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from cluster_programs import T0, T1, cond_across_tasks, dev, loop_across_tasks
from hypothesis import given, settings
from hypothesis import strategies as st
from programs import assert_same_outcome, build, to_source
from strategies import gradient_cases, programs_with_inputs

import turnout as tn
from turnout.session import RunOptions

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from turnout.devices.local_cluster import LocalCluster  # noqa: E402
from turnout.devices.ray_runtime import TaskPool  # noqa: E402


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[LocalCluster]:
    lc = LocalCluster(nodes=2, num_cpus=1)
    lc.start()
    try:
        yield lc
    finally:
        lc.stop()


@pytest.fixture(scope="session")
def pool(local_cluster: LocalCluster) -> Iterator[TaskPool]:
    """Two tasks, one per node, shared by the tests that neither kill nor stop a task."""
    with TaskPool(local_cluster.spec(tasks=2, devices=2)) as p:
        yield p


def _gone(pids: list[int], within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
            return True
        time.sleep(0.2)
    return False


# ---- results equal the reference ---------------------------------------------------------------------
def test_loop_whose_body_spans_two_tasks(pool: TaskPool) -> None:
    g, x, y = loop_across_tasks(25)
    want = [tn.Session(g).run(y, {x: v}) for v in (1.0, -3.0)]
    sess = tn.Session(g, cluster=pool, detail=True)
    for v, w in zip((1.0, -3.0), want):
        np.testing.assert_equal(sess.run(y, {x: v}), w)
    stats = sess.backend.last_stats
    # the LoopCond owner (task 0) sends the predicate to task 1 every iteration; the edge between the two
    # devices of task 1 stays inside task 1
    assert stats["messages_between_tasks"] >= 2 * 25 and stats["messages"] > stats["messages_between_tasks"]
    sent, received = sess.backend.last_message_log
    assert sent == received and set(sent.values()) == {1}
    assert any(edge.startswith("loop/loop_cond:0->" + T1) for edge, _ in sent)
    assert any(edge.endswith("->" + dev(1, 0)) and dev(1, 1) not in edge for edge, _ in sent)
    assert set(stats["busy_s_per_task"]) == set(stats["wait_s_per_task"]) == {T0, T1}
    assert all(v > 0 for v in stats["busy_s_per_task"].values())
    sess.close()


def test_backend_fast_on_a_cluster_trains_with_compiled_groups_in_each_task(pool: TaskPool) -> None:
    """``backend="fast"`` runs every task's partitions on the compiled partition executor: a gradient
    step whose loop runs on task 0 and whose Variable lives on task 1 gives the reference's losses and
    Variable, and the tasks' arithmetic ran as compiled groups."""
    g, x, loss, step = _training_graph()
    ref = tn.Session(g)
    with tn.Session(g, backend="fast", cluster=pool) as sess:
        for v in (0.5, 1.5, -1.0):
            np.testing.assert_allclose(sess.run([loss, step], {x: v})[0], ref.run([loss, step], {x: v})[0],
                                       rtol=1e-5)
        np.testing.assert_allclose(sess.variables["w"], ref.variables["w"], rtol=1e-5)
        stats = sess.backend.last_stats
        assert stats["partition_executor"] == "fast"
        assert stats["compiled_calls"] > 0 and stats["interpreted_calls"] == 0
        assert stats["compiles"] == 0, "a second run of a plan compiles nothing"
        assert set(stats["executor_stats"]) <= set(pool.spec.devices)


def test_a_traced_cluster_run_is_one_timeline_with_a_track_per_device(pool: TaskPool, tmp_path: Any) -> None:
    g, x, y = loop_across_tasks(4)
    one = tn.Session(g, devices=pool.spec.devices)
    value = one.run(y, {x: 1.0}, trace=True)
    assert one.last_result is not None
    want = one.last_result.trace
    with tn.Session(g, cluster=pool) as sess:
        np.testing.assert_equal(sess.run(y, {x: 1.0}, trace=True), value)
        res = sess.last_result
        assert res is not None and res.trace is not None
        trace = res.trace
        assert set(trace.tracks) == set(want.tracks) == {dev(0, 1), dev(1, 0), dev(1, 1)}
        key = lambda de: Counter((d, e.node, e.tag, e.dead) for d, e in de.events)  # noqa: E731
        assert key(trace) == key(want)
        # stamped by the wall clock: a Recv on task 1 comes after the Send of its key on task 0, with no
        # correction needed on one machine
        assert trace.clock_offsets.consistent and set(trace.clock_offsets.offsets.values()) == {0}
        sent = {(e.node.removeprefix("_send/"), e.tag): e.seq for _, e in trace.events if e.op == "Send"}
        assert all(sent[(e.node.removeprefix("_recv/"), e.tag)] < e.seq for _, e in trace.events if e.op == "Recv")
        path = tmp_path / "cluster.json"
        trace.save_chrome(str(path))
        names = {e["args"]["name"] for e in json.loads(path.read_text())["traceEvents"] if e["name"] == "process_name"}
        assert names == set(want.tracks)
        assert sess.run(y, {x: 1.0}) == value and sess.last_result.trace is None  # type: ignore[union-attr]


def test_an_unknown_partition_executor_is_refused_before_any_actor_starts(local_cluster: LocalCluster) -> None:
    g, x, y = loop_across_tasks(3)
    with pytest.raises(tn.UnsupportedError, match="unknown partition executor 'jit'"):
        tn.Session(g, cluster=local_cluster.spec(), partition_executor="jit")


@pytest.mark.parametrize("value", [2.0, -2.0])
def test_cond_across_two_tasks(pool: TaskPool, value: float) -> None:
    g, x, out = cond_across_tasks()
    with tn.Session(g, cluster=pool) as sess:
        np.testing.assert_equal(sess.run(out, {x: value}), tn.Session(g).run(out, {x: value}))


def _training_graph() -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    """A Variable on task 1 updated by a gradient step whose loop runs on task 0."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        with tn.device(dev(1, 1)):
            w = tn.Variable(0.5, name="w")
            wr = w.read()
        with tn.device(dev(0)):
            _, y = tn.while_loop(lambda i, y: i < 4, lambda i, y: (i + 1, y * wr + x), [tn.constant(0), x])
            loss = y * y
        (gw,) = tn.gradients(loss, [wr])
        with tn.device(dev(1, 1)):
            step = w.assign_sub(gw * 0.01)
    return g, x, loss, step


def test_variables_stay_on_their_task_and_gradients_cross_tasks(pool: TaskPool) -> None:
    g, x, loss, step = _training_graph()
    ref = tn.Session(g)
    want = [ref.run([loss, step], {x: 1.0}) for _ in range(3)]
    sess = tn.Session(g, cluster=pool)
    got = [sess.run([loss, step], {x: 1.0}) for _ in range(3)]
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-6)
    # the value lives in task 1's actor, read on demand; task 0 holds no Variable of this session
    assert list(sess.variables) == ["w"]
    np.testing.assert_allclose(sess.variables["w"], ref.variables["w"], rtol=1e-6)
    uid = sess.backend.uid
    assert ray.get(pool.actors[T0].variable_names.remote(uid)) == []
    assert ray.get(pool.actors[T1].variable_names.remote(uid)) == ["w"]
    # writing through the view writes the task's copy (what a checkpoint restore does)
    sess.variables.update({"w": np.float32(2.0)})
    ref.variables["w"] = np.float32(2.0)
    np.testing.assert_allclose(sess.run(loss, {x: 1.0}), ref.run(loss, {x: 1.0}), rtol=1e-6)
    # checked as every session.variables checks a value set from outside (turnout.store)
    with pytest.raises(tn.FeedError, match="Variable 'w'"):
        sess.variables["w"] = np.zeros(3, np.float32)
    np.testing.assert_allclose(sess.variables["w"], 2.0)
    sess.close()
    assert ray.get(pool.actors[T1].variable_names.remote(uid)) == []


@pytest.mark.parametrize("failure", ["kernel error on the other task", "dead fetch"])
def test_a_run_that_raises_changes_no_variable_on_any_task(pool: TaskPool, failure: str) -> None:
    """All or nothing across the cluster, as in one process: task 1 assigns its Variable and ends
    well; then the run fails (a division by zero on task 0, or a fetch that turns out dead on the
    driver). Every task puts its Variables back (``TaskRunner.settle``)."""
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, shape=[], name="k")
        with tn.device(dev(1, 1)):
            w = tn.Variable(np.float32(1.0), name="w")
            bumped = w.assign_add(1.0)
        with tn.device(dev(0)):
            q = tn.divide(tn.constant(6), k)
            _, live = tn.raw.switch(tn.cast(q, tn.float32), k > 1)
    fetch = [bumped, q] if failure.startswith("kernel") else [bumped, live]
    bad = {k: np.int32(0)} if failure.startswith("kernel") else {k: np.int32(1)}
    error = tn.KernelError if failure.startswith("kernel") else tn.DeadFetchError
    ref = tn.Session(g)
    with tn.Session(g, cluster=pool) as sess:
        for s in (ref, sess):
            s.run(bumped, {k: np.int32(2)})
            with pytest.raises(error):
                s.run(fetch, bad)
            np.testing.assert_allclose(s.variables["w"], 2.0)
            s.run(fetch, {k: np.int32(2)})
            np.testing.assert_allclose(s.variables["w"], 3.0)


def test_closing_a_backend_on_a_shared_pool_forgets_only_its_variables(pool: TaskPool) -> None:
    """The backend's own close (what a session's close ends with) deletes its Variables from the
    tasks and leaves the shared pool's actors, and the other sessions' Variables, alone."""
    g, x, loss, step = _training_graph()
    mine, other = tn.Session(g, cluster=pool), tn.Session(g, cluster=pool)
    mine.run(step, {x: 1.0})
    other.run(step, {x: 1.0})
    uids = mine.backend.uid, other.backend.uid
    mine.backend.close()
    assert [ray.get(pool.actors[T1].variable_names.remote(u)) for u in uids] == [[], ["w"]]
    assert pool.closed is None and other.run(loss, {x: 1.0}) is not None
    other.close()


def test_feeds_on_a_cluster_are_checked_as_in_one_process(pool: TaskPool) -> None:
    """A fed tensor the fetch does not need is allowed, as in one process; a missing feed is a
    FeedError naming the Placeholder, raised on the driver."""
    g, x, z = _cast_across_tasks()
    with g.as_default():
        unused = tn.placeholder(tn.float32, shape=[], name="unused")
    want = tn.Session(g).run(z, {x: 1.5, unused: 2.0})
    with tn.Session(g, cluster=pool) as sess:
        assert sess.run(z, {x: 1.5, unused: 2.0}) == want
        with pytest.raises(tn.FeedError, match=r'^Placeholder node "x" \(created at .*\) must be fed a value'):
            sess.run(z)


def test_checkpoint_restores_variables_into_a_new_cluster_session(pool: TaskPool, tmp_path: Any) -> None:
    """Train two steps, checkpoint, close the session (its Variables are gone from the tasks), restore
    into a new session and train on: the same as three steps in one session (the checkpoint reads and
    writes the tasks' copies through ``session.variables``)."""
    checkpoint = pytest.importorskip("turnout.checkpoint", reason="tn.checkpoint comes with the main branch")
    g, x, loss, step = _training_graph()
    ref = tn.Session(g)
    want = [ref.run([loss, step], {x: 1.0}) for _ in range(3)]
    first = tn.Session(g, cluster=pool)
    got = [first.run([loss, step], {x: 1.0}) for _ in range(2)]
    assert checkpoint.save(first, tmp_path / "ckpt") == ["w"]
    first.close()
    with pytest.raises(tn.ExecutionError, match="closed"):  # as on every backend (test_session.py)
        first.run([loss, step], {x: 1.0})
    second = tn.Session(g, cluster=pool)
    assert checkpoint.restore(second, tmp_path / "ckpt") == ["w"]
    got.append(second.run([loss, step], {x: 1.0}))
    second.close()
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-6)


def test_placement_errors_come_before_any_actor_starts(local_cluster: LocalCluster) -> None:
    g = tn.Graph()
    with g.as_default():
        with tn.device("/job:worker/task:5/device:CPU:0"):
            tn.constant(1.0) + 1.0
    with pytest.raises(tn.PlacementError):
        tn.Session(g, cluster=local_cluster.spec())


def test_soft_placement_on_a_cluster_resolves_a_conflict_by_the_colocation_rule(local_cluster: LocalCluster,
                                                                                  pool: TaskPool) -> None:
    """An op colocated with a Variable of task 1 but scoped to task 0: refused before any actor
    starts, as on one process; with ``allow_soft_placement=True`` it goes with the Variable (the
    colocation rule), and the run gives the interpreter's values."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        with tn.device(dev(1, 1)):
            w = tn.Variable(1.5, name="w")
        with tn.device(dev(0)), tn.colocate_with(w):
            t = tn.multiply(w.read(), x, name="t")
        with tn.device(dev(0)):
            _, y = tn.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 0.5 + t), [tn.constant(0), x])
    want = tn.Session(g).run(y, {x: 2.0})
    with pytest.raises(tn.PlacementError, match="allow_soft_placement=True"):
        tn.Session(g, cluster=local_cluster.spec())
    sess = tn.Session(g, cluster=pool, allow_soft_placement=True)
    try:
        np.testing.assert_allclose(sess.run(y, {x: 2.0}), want, rtol=1e-6)
        assert "task:1" in str(sess.backend.placement[t.node])
    finally:
        sess.close()


# ---- faults --------------------------------------------------------------------------------------
def test_task_killed_mid_loop_fails_the_run_naming_the_task(local_cluster: LocalCluster) -> None:
    g, x, y = loop_across_tasks(10**7)
    sess = tn.Session(g, cluster=local_cluster.spec(), recv_timeout=60)
    pids = dict(sess.backend.pool.pids)
    killer = threading.Timer(1.5, os.kill, (pids[T1], signal.SIGKILL))
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(tn.TaskFailedError, match=f"task {T1} died during the run"):
        sess.run(y, {x: 1.0}, max_firings=10**9, max_iterations=10**8)
    assert time.monotonic() - t0 < 30  # bounded: far below the 60 s Recv timeout
    killer.join()
    assert _gone(list(pids.values())), "a task process outlived the failed run"
    with pytest.raises(tn.TaskFailedError, match="stopped"):
        sess.run(y, {x: 1.0})


def test_silent_task_is_a_recv_timeout_naming_key_and_sender(local_cluster: LocalCluster) -> None:
    g, x, y = loop_across_tasks(10**7)
    sess = tn.Session(g, cluster=local_cluster.spec(), recv_timeout=2.0)
    pids = dict(sess.backend.pool.pids)
    stopper = threading.Timer(1.5, os.kill, (pids[T0], signal.SIGSTOP))
    stopper.start()
    try:
        with pytest.raises(tn.RecvTimeoutError) as info:
            sess.run(y, {x: 1.0}, max_firings=10**9, max_iterations=10**8)
        msg = str(info.value)
        assert f"task {T1}: no message for 2 s" in msg and f"from task {T0}" in msg and "(edge 'loop/" in msg
        # the stopped task cannot put its Variables back: no later run may start from them
        with pytest.raises(tn.TaskFailedError, match=f"task {T0} did not answer within recv_timeout=2 s"):
            sess.run(y, {x: 1.0})
    finally:
        stopper.join()
        with contextlib.suppress(ProcessLookupError):  # (stopping the pool killed it)
            os.kill(pids[T0], signal.SIGCONT)
        sess.close()
    assert _gone(list(pids.values()))


def test_every_socket_of_the_cluster_listens_on_loopback(local_cluster: LocalCluster) -> None:
    pids = local_cluster.pids()
    assert len(pids) >= 4  # GCS, two raylets, their helpers
    listening = []
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        listening += [(pid, c.laddr) for c in conns if c.status == psutil.CONN_LISTEN]
    assert listening, "the cluster listens on no socket?"
    def loopback(ip: str) -> bool:
        a = ipaddress.ip_address(ip)
        mapped = getattr(a, "ipv4_mapped", None)
        return (mapped or a).is_loopback

    assert all(loopback(addr.ip) for _, addr in listening), listening


# ---- T7 over Ray: generated programs under random placements across 2 tasks x 2 devices ---------------
RAY_EXAMPLES = max(4, settings.default.max_examples // 4)
GUARD = dict(max_firings=200_000, max_iterations=1_000)


def _check_on_cluster(pool: TaskPool, graph: tn.Graph, fetches: list[tn.Tensor], feeds: dict[tn.Tensor, Any],
                      data: st.DataObject, what: str, executor: str = "reference") -> None:
    devices = pool.spec.devices
    idx = data.draw(st.lists(st.integers(0, len(devices) - 1), min_size=len(graph.nodes),
                             max_size=len(graph.nodes)), label="placement")
    requests = {n.name: devices[i] for n, i in zip(graph.nodes, idx)}
    scheduler = data.draw(st.sampled_from(("fifo", "lifo", "random")), label="scheduler")
    guard = GUARD if executor == "reference" else {"max_iterations": GUARD["max_iterations"]}
    with tn.Session(graph, cluster=pool, requests=requests, detail=True, partition_executor=executor) as sess:
        if assert_same_outcome(lambda: tn.Session(graph).run(fetches, feeds, options=RunOptions(**guard)),
                               lambda: sess.run(fetches, feeds, options=RunOptions(scheduler, 7, **guard)),
                               what + f"cluster run ({executor} partition executor)"):
            sent, received = sess.backend.last_message_log
            assert sent == received and set(sent.values()) <= {1}, "a message was lost, duplicated or stranded"


@settings(max_examples=RAY_EXAMPLES, deadline=None)
@given(programs_with_inputs(loops=True), st.data())
def test_T7_on_a_cluster(pool: TaskPool, pi: tuple[Any, dict[str, Any]], data: st.DataObject) -> None:
    p, inputs = pi
    b = build(p)
    _check_on_cluster(pool, b.graph, b.fetches, b.feed_dict(inputs), data, to_source(p) + "\n")


@settings(max_examples=RAY_EXAMPLES, deadline=None)
@given(st.data())
def test_T7_gradients_on_a_cluster(pool: TaskPool, data: st.DataObject) -> None:
    case = data.draw(gradient_cases())
    _check_on_cluster(pool, case.graph, case.grads, case.feeds, data, to_source(case.program) + "\n")


@settings(max_examples=max(2, RAY_EXAMPLES // 2), deadline=None)
@given(programs_with_inputs(loops=True), st.data())
def test_T7_on_a_cluster_with_compiled_partitions(pool: TaskPool, pi: tuple[Any, dict[str, Any]],
                                                  data: st.DataObject) -> None:
    """The same, each task running its partitions on the compiled partition executor (JAX in the actors;
    no ``max_firings`` budget, which would keep every partition on the interpreter)."""
    p, inputs = pi
    b = build(p)
    _check_on_cluster(pool, b.graph, b.fetches, b.feed_dict(inputs), data, to_source(p) + "\n", executor="fast")


# ---- the same mistakes raise the same error types as in one process -------------------------------------
def _cast_across_tasks() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """A float fed on task 0, cast to int32 on task 1 (the kernel's error crosses a task boundary)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        with tn.device(dev(0)):
            y = x * 2.0
        with tn.device(dev(1, 1)):
            z = tn.cast(y, tn.int32)
    return g, x, z


@pytest.mark.parametrize("case", ["bad feed", "nan cast", "dead fetch"])
def test_mistakes_raise_the_reference_error_types_across_tasks(pool: TaskPool, case: str) -> None:
    if case == "dead fetch":
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.float32, shape=[], name="x")
            with tn.device(dev(0)):
                sw_false, sw_true = tn.raw.switch(x, x > 0.0)
            with tn.device(dev(1, 1)):
                out = sw_true * 3.0
        fetch, feeds, error = out, {x: -1.0}, tn.DeadFetchError
    else:
        g, x, fetch = _cast_across_tasks()
        feeds, error = ({x: "1.5"}, tn.FeedError) if case == "bad feed" else ({x: float("nan")}, tn.KernelError)
    with pytest.raises(error):
        tn.Session(g).run(fetch, feeds)
    with tn.Session(g, cluster=pool) as sess, pytest.raises(error):
        sess.run(fetch, feeds)


def test_a_cluster_session_counts_a_memory_budget_per_device(pool: TaskPool) -> None:
    """A run's ``memory_budget`` bounds what each device of each task saves, as on the partitioned
    executors: the stats report it per device and per loop (as the partitioned reference executor's),
    and a budget below a device's peak stops the run with ``ResourceExhaustedError`` naming the loop."""
    from cluster_programs import gradient_across_tasks

    g, x, gx = gradient_across_tasks()
    xv = np.array([0.3, -0.6, 0.9], np.float32)
    ref = tn.Session(g, backend="partitioned", devices=pool.spec.devices)
    want = ref.run(gx, {x: xv}, memory_budget=10**6)
    with tn.Session(g, cluster=pool) as sess:
        np.testing.assert_allclose(sess.run(gx, {x: xv}, memory_budget=10**6), want, rtol=1e-5)
        stats = sess.last_result.stats
        for k in ("peak_saved_bytes", "peak_saved_bytes_per_device", "saved_bytes"):
            assert stats[k] == ref.last_result.stats[k], k
        g.gradient_calls.clear()  # (no record to rebuild from: the stacks' own stop, turnout.rebuild)
        with pytest.raises(tn.ResourceExhaustedError, match='loop "loop"'):
            sess.run(gx, {x: xv}, memory_budget=stats["peak_saved_bytes"] - 1)


def test_a_partition_executor_that_does_not_count_is_refused_a_budget_by_name(pool: TaskPool) -> None:
    """A partition executor plugged in by name whose kind does not count saved values
    (``ExecutorKind.memory_budgets``) is refused a run budget, and a graph with a loop's own, with an
    ``UnsupportedError`` naming it, never run over it without a word."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        _, y = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * x), [tn.constant(0), x],
                             swap_memory=True, memory_budget=10**6, name="budgeted")
        (gx,) = tn.gradients(y, [x])
    with tn.Session(g, cluster=pool, partition_executor="cluster_programs:COUNTING") as sess:
        with pytest.raises(tn.UnsupportedError, match=r"memory_budget of loop\(s\) \['budgeted'\]"):
            sess.run(gx, {x: 1.5})
    g2 = tn.Graph()
    with g2.as_default():
        z = tn.placeholder(tn.float32, [], name="z")
        doubled = z * 2.0
    with tn.Session(g2, cluster=pool, partition_executor="cluster_programs:COUNTING") as sess:
        with pytest.raises(tn.UnsupportedError, match="does not honour memory_budget"):
            sess.run(doubled, {z: 1.0}, memory_budget=10**6)


def test_a_run_budget_rebuilds_the_gradient_on_a_cluster(pool: TaskPool) -> None:
    """A run that outgrows the stacks under a run's budget is repeated on the gradient rebuilt to
    recompute (``turnout.rebuild``), on a cluster's tasks as on one process, each within the budget."""
    from test_run_budget import BUDGET, two_loops

    m = two_loops()
    req = {nd.name: pool.spec.devices[k % len(pool.spec.devices)] for k, nd in enumerate(m["g"].nodes)}
    want = tn.Session(m["g"]).run(m["grads"], m["feeds"](60))
    with tn.Session(m["g"], cluster=pool, requests=req) as sess:
        sess.run(m["grads"], m["feeds"](5), memory_budget=BUDGET)
        assert "rebuilt_gradients" not in sess.last_result.stats
        got = sess.run(m["grads"], m["feeds"](60), memory_budget=BUDGET)
        stats = sess.last_result.stats
        assert stats["rebuilt_gradients"] and stats["peak_saved_bytes"] <= BUDGET
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def test_a_cluster_session_sizes_the_checkpoint_slots_from_what_its_runs_needed(pool: TaskPool) -> None:
    """Law: a cluster session gives a recomputed loop the slots the partitioned reference executor
    would (``turnout.slot_sizes``): ``FIRST_CAPACITY`` on the first run of its fetches, then the
    smallest power of two holding what a run needed, learnt by the driver from the tasks' reports
    (the loop's ``CheckpointSlots`` and the ``CheckpointTrips`` its backward loop reads may sit on
    different tasks); the gradients are the store-everything ones whatever the count. Why: a task
    allocates and zero-fills every slot it gives at every run (here 5,000 of 20 bytes)."""
    from cluster_programs import gradient_across_tasks

    from turnout.slot_sizes import FIRST_CAPACITY

    g, x, gx = gradient_across_tasks(70, budget=5000 * 20)
    g0, x0, gx0 = gradient_across_tasks(70)
    xv = np.array([0.3, -0.6, 0.9], np.float32)
    want = tn.Session(g0).run(gx0, {x0: xv})
    ref = tn.Session(g, backend="partitioned", devices=pool.spec.devices)
    with tn.Session(g, cluster=pool) as sess:
        for slots in (FIRST_CAPACITY, 128, 128):
            np.testing.assert_allclose(sess.run(gx, {x: xv}), want, rtol=1e-5)
            ref.run(gx, {x: xv})
            assert sess.last_result.stats["checkpoint_slots"] == {"loop": slots}
            assert sess.last_result.stats["checkpoint_bytes"] == {"loop": slots * 20}
            assert ref.last_result.stats["checkpoint_slots"] == {"loop": slots}


@pytest.mark.parametrize("executor", ["reference", "fast"])
def test_a_cluster_session_explains_its_tasks_and_their_partitions(pool: TaskPool, executor: str) -> None:
    """``Session.explain`` on a cluster, made on the driver without asking any task: one ``task``
    step per task, its devices' partitions below it with what runs each (the partition executor's
    ``describe``: the reference interpreter, or on the fast kind the interpreter with fused groups
    for a partition that talks to another); the notes say how many Send/Recv pairs are messages
    between tasks and how many checkpoint slots the next run gives a recomputed loop, before a run
    and after one that needed more."""
    from cluster_programs import gradient_across_tasks

    if executor == "fast":
        pytest.importorskip("jax")
    g, x, gx = gradient_across_tasks(70, budget=5000 * 20)
    xv = np.array([0.3, -0.6, 0.9], np.float32)
    with tn.Session(g, cluster=pool, partition_executor=executor) as sess:
        before = sess.explain(gx, {x: xv})
        assert before.backend == "ray cluster"
        assert sorted(s.device for s in before.steps) == sorted({T0, T1}) and before.kinds() == {"task", "partition"}
        assert sorted(len(s.steps) for s in before.steps) == [1, 2]  # (the loop on task 0, its body on task 1)
        parts = [p for s in before.steps for p in s.steps]
        assert all(p.device.startswith(s.device) for s in before.steps for p in s.steps)
        who = "the reference interpreter" if executor == "reference" else "the interpreter, its arithmetic fused"
        assert all(p.what.startswith(who) for p in parts), parts
        assert any("messages between tasks" in n and not n.startswith("0 ") for n in before.notes), before.notes
        assert any("keeps at most 64 checkpoint slots of the 5000 its memory_budget holds (a first run's 64;"
                   in n for n in before.notes), before.notes
        sess.run(gx, {x: xv})
        after = sess.explain(gx, {x: xv}, memory_budget=10**7)
        assert any("keeps at most 128 checkpoint slots of the 5000 its memory_budget holds (learnt from an earlier"
                   in n for n in after.notes), after.notes
        assert any("memory_budget of 10000000 bytes" in n for n in after.notes), after.notes
