"""Tests that kill the survivors of the 2026-11-25 mutation campaigns (``python tools/mutation.py``, see
``docs/checking.rst``) on ``devices/swap.py``, ``devices/region_driver.py``, ``fast/backend.py`` and the
other ``devices/`` modules: each fails under a mutant that every older test let through.
"""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import numpy as np
import pytest
from programs import assert_same_outcome

import turnout as tn
from turnout.session import RunOptions

pytest.importorskip("jax")

from turnout.fast.timeline import TRACKS  # noqa: E402

D3 = ["cpu:0", "cpu:1", "cpu:2"]
CHUNK = 8


def _run_checked(sess: tn.Session, g: tn.Graph, fetch: Any, feeds: dict[tn.Tensor, Any]) -> dict[str, Any]:
    """``fetch`` on ``sess`` (the fast partitioned executor, no fallback) and on the partitioned reference
    executor: the same values. Returns the fast run's stats."""
    def want() -> Any:
        return tn.Session(g, devices=D3).run(fetch, feeds)

    def got() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return sess.run(fetch, feeds, options=RunOptions(max_iterations=10_000))

    assert assert_same_outcome(want, got, "fast partitioned vs reference")
    return sess.last_result.stats


def _plan(sess: tn.Session) -> Any:
    (plan,) = sess.backend._plans.values()
    return plan


def _stack_pushes(items: list[Any]) -> dict[str, int]:
    """Stack key -> StackPush nodes among ``items`` (plain nodes only)."""
    from turnout.fast.state_keys import stack_key_of

    out: dict[str, int] = {}
    for it in items:
        if isinstance(it, tn.graph.Node) and it.op == "StackPush" and (s := stack_key_of(it)) is not None:
            out[s] = out.get(s, 0) + 1
    return out


def _spanning_loop(cond_in_step: bool) -> dict[str, Any]:
    """``test_devices_swap.spanning_rnn`` swapped, with ``parallel_iterations=10``: ``y <- f(y) + 0.1 y^2 +
    0.3`` for ``n`` steps, ``f`` on cpu:1, the rest on cpu:2, the loop's control on cpu:0. ``cond_in_step``:
    ``f`` is a cond on cpu:1, so its gradient pushes in one branch only and the cond is compiled inside
    the cpu:1 segment. ``feeds(steps)``: the feeds of a run of ``steps`` steps."""
    from test_devices_swap import spanning_rnn

    m = spanning_rnn(True, parallel_iterations=10, cond=cond_in_step)
    x, w, n = m["x"], m["w"], m["n"]
    m.setdefault("feeds", lambda steps: {x: np.float64(0.3), w: np.float64(0.7), n: np.int32(steps)})
    return m


# ---- devices/swap.py --------------------------------------------------------------------------------------
def test_each_segment_of_a_spanning_loop_counts_its_pushes_per_call_exactly() -> None:
    """Kills ``swap._add:727d6457`` (a stack's first count read as unbounded). A segment of a loop body
    without nested loops pushes each stack a known number of times per call: its ``Traffic`` must say
    so, or the host reads every pointer before every call instead of once per chunk."""
    m = _spanning_loop(cond_in_step=False)
    sess = tn.Session(m["g"], backend="fast", devices=D3, stack_chunk=CHUNK)
    steps = 40
    stats = _run_checked(sess, m["g"], m["fetch"], m["feeds"](steps))
    assert stats["tier"] == "host-driven"
    plan = _plan(sess)
    pushing = {seg.index: _stack_pushes(seg.items) for seg in plan.schedule.segments}
    pushing = {k: v for k, v in pushing.items() if v}
    assert pushing  # the loop body's segments on cpu:1 and cpu:2 push
    for index, want in pushing.items():
        t = plan.schedule.segments[index].traffic
        assert t is not None and t.push == want
    # one read per chunk per stack (three stacks) and a few for the pops: far fewer than the calls
    assert stats["stack_pointer_reads"] < 3 * steps


def test_a_cond_in_a_spanning_loop_counts_its_larger_branch() -> None:
    """Kills ``swap.traffic:199e75d1`` (the keys of a cond's branches lost). The cond on cpu:1 pushes in
    one branch: the segment's traffic counts that branch, and the run (swapping chunks) agrees with the
    reference executor."""
    from turnout.fast.regions import CondRegion

    m = _spanning_loop(cond_in_step=True)
    sess = tn.Session(m["g"], backend="fast", devices=D3, stack_chunk=CHUNK)
    stats = _run_checked(sess, m["g"], m["fetch"], m["feeds"](30))
    assert stats["stack_chunks_swapped"] > 0
    plan = _plan(sess)
    conds = [seg for seg in plan.schedule.segments if any(isinstance(it, CondRegion) for it in seg.items)]
    assert conds, "the cond is compiled inside a segment"
    for seg in conds:
        t = seg.traffic
        assert t is not None
        for it in seg.items:
            if isinstance(it, CondRegion):
                per = [_stack_pushes(it.branches[b]) for b in (False, True)]
                for s in set(per[0]) | set(per[1]):
                    assert t.push[s] >= max(p.get(s, 0) for p in per) >= 1


def test_a_chunk_of_one_entry_is_swapped_out_after_every_push() -> None:
    """Kills ``swap.before:7aed1c34.3`` (a buffer holding one value never counted as full). With
    ``stack_chunk=1`` every push fills a chunk: the host must swap it out before the next call, so the run
    needs no second attempt with a larger chunk."""
    m = _spanning_loop(cond_in_step=False)
    sess = tn.Session(m["g"], backend="fast", devices=D3, stack_chunk=1)
    steps = 12
    stats = _run_checked(sess, m["g"], m["fetch"], m["feeds"](steps))
    assert stats["tier"] == "host-driven" and stats["stack_capacity_retries"] == 0
    assert stats["stack_chunks_swapped"] >= 3 * (steps - 1)  # three stacks, each chunk one push


@pytest.mark.parametrize("module", ["turnout.fast.device_stacks", "turnout.fast.runner", "turnout.fast.backend",
                                    "turnout.fast.cut", "turnout.devices.segments", "turnout.devices.spmd",
                                    "turnout.devices.fast_executor"])
def test_every_name_a_module_exports_exists(module: str) -> None:
    """Kills the ``__all__`` mutants (``swap.<module>:f977144a``, ``swap.<module>:9e697743``, ...): a name
    in ``__all__`` that the module does not define breaks ``from module import *``."""
    import importlib

    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", [])
    missing = [name for name in names if not hasattr(mod, name)]
    assert not missing, f"{module}.__all__ names {missing}, which it does not define"
    ns: dict[str, Any] = {}
    exec(f"from {module} import *", ns)  # noqa: S102 - the star import itself
    assert set(names) <= set(ns)


# ---- devices/region_driver.py -----------------------------------------------------------------------------
def test_a_driven_loop_whose_stacks_have_a_run_time_shape_runs_compiled() -> None:
    """The loop on cpu:1 carries a vector whose length is fed, so its stacks cannot be allocated
    before the run: they start pending in the device's state (``DevicePlan.stack_alloc``), the driven
    loop's trace makes them at their first push, one chunk long, and its full chunks are swapped to the
    host between calls; the reference's values. (Before its stacks started in the state, the trace
    made them inside the loop, the loop carry changed type, and the program ran on the partitioned
    reference executor.)"""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [None], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        with tn.device("cpu:1"):
            _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tn.tanh(y * 1.1) + 0.2),
                                 [tn.constant(0), x], swap_memory=True, name="fwd")
            (dx,) = tn.gradients(tn.reduce_sum(y), [x])
        with tn.device("cpu:0"):
            z = dx * 2.0
    feeds = {x: np.linspace(-1.0, 1.0, 5), n: np.int32(30)}
    want = tn.Session(g, devices=D3).run([y, z], feeds)
    sess = tn.Session(g, backend="fast", devices=D3, stack_chunk=CHUNK)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = sess.run([y, z], feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    stats = sess.last_result.stats
    assert stats["executor"] == "fast partitioned" and stats["stack_capacity"] == CHUNK, stats
    assert stats["stack_chunks_swapped"] > 0 and stats["stack_chunks_from_host"] > 0, stats


@pytest.mark.parametrize("swap", [True, False])
def test_a_driven_loop_in_a_branch_the_host_does_not_take(swap: bool) -> None:
    """A loop compiled on cpu:1 and run chunk by chunk is one branch of a cond whose predicate the host
    reads; when the other branch is taken the host skips the loop. Both branches, on one session: the
    reference executor's values each time. (The host never hands the driver dead entry values, so the
    driver's exit side for them, ``region_driver.run:6027cf5c``, is checked by calling the driver
    directly: ``tests/test_mutants_s6.py``.)"""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        p = tn.placeholder(tn.bool, [], name="p")

        def looped() -> tn.Tensor:
            with tn.device("cpu:1"):
                return tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tn.tanh(y * 1.1) + 0.2),
                                     [tn.constant(0), x], swap_memory=swap, name="fwd")[1]

        with tn.device("cpu:0"):
            y = tn.cond(p, looped, lambda: x * 3.0)
        (dx,) = tn.gradients(y, [x])
        with tn.device("cpu:0"):
            z = dx * 2.0
    sess = tn.Session(g, backend="fast", devices=D3, stack_chunk=CHUNK)
    for taken in (False, True, False):
        _run_checked(sess, g, [y, z], {x: np.float64(0.4), n: np.int32(20), p: np.bool_(taken)})
    plan = _plan(sess)
    assert any(seg.driven for seg in plan.schedule.segments)
    # no loop here is driven by the host: a segment is driven exactly when it is one loop that pushes
    # or pops, and then its loop is that item
    from turnout.fast.regions import WhileRegion

    for seg in plan.schedule.segments:
        it = seg.items[0]
        one_loop = (len(seg.items) == 1 and isinstance(it, WhileRegion)
                    and any(n.op in ("StackPush", "StackPop") for n in it.nodes))
        assert seg.driven is (it if one_loop else None)


# ---- devices/segments.py ----------------------------------------------------------------------------------
def test_segments_describe_themselves_by_device_first_node_and_what_else_they_hold() -> None:
    """Kills ``segments.describe:6b6a5ede`` (a suffix on the label of a one-item segment). Every segment
    label reads ``segment INDEX on DEVICE: FIRST NODE``, then `` (+N more)`` for N more items, or
    ``driven`` and its loop for a driven segment, and nothing else."""
    import re

    from turnout.fast.regions import item_nodes

    m = _spanning_loop(cond_in_step=True)
    sess = tn.Session(m["g"], backend="fast", devices=D3, stack_chunk=CHUNK)
    _run_checked(sess, m["g"], m["fetch"], m["feeds"](5))
    segments = _plan(sess).schedule.segments
    assert any(len(seg.items) == 1 for seg in segments) and any(len(seg.items) > 1 for seg in segments)
    for seg in segments:
        first = item_nodes(seg.items[0])[0].name
        rest = f" (+{len(seg.items) - 1} more)" if len(seg.items) > 1 else ""
        want = f"segment {seg.index} on {tn.devices.parse(seg.device).short}: {first}{rest}"
        assert seg.describe() == want
        assert re.fullmatch(r"segment \d+ on cpu:\d: \S+( \(\+\d+ more\))?", seg.describe())


def test_a_loop_on_one_device_that_only_pushes_is_driven() -> None:
    """Kills ``segments._drives:d15278e6`` (only loops that pop were driven). The forward loop on cpu:1
    only pushes; it must be a segment of its own run chunk by chunk, or its full chunks cannot be swapped
    out between calls (one call would run the whole loop)."""
    from test_devices_swap import loop_on_one_device

    m = loop_on_one_device(True)
    g, x, n = m["g"], m["x"], m["n"]
    sess = tn.Session(g, backend="fast", devices=D3, stack_chunk=CHUNK)
    stats = _run_checked(sess, g, m["fetch"], {x: np.float64(0.4), n: np.int32(40)})
    assert stats["stack_chunks_swapped"] >= 40 // CHUNK - 1 and stats["stack_capacity_retries"] == 0
    from turnout.fast.regions import WhileRegion

    driven = [seg for seg in _plan(sess).schedule.segments if seg.driven]
    ops = [{n.op for n in seg.items[0].nodes} for seg in driven]
    assert all(isinstance(seg.items[0], WhileRegion) for seg in driven)
    assert any("StackPush" in o and "StackPop" not in o for o in ops)  # the forward loop
    assert any("StackPop" in o for o in ops)  # the backward loop


def test_a_control_dependency_orders_a_read_after_an_assignment_in_one_segment() -> None:
    """Kills ``segments._cluster:def93914`` (control inputs left out of the order of a scope's items). The
    read of ``v`` on cpu:1 waits for its assignment only through a control edge, and the read is needed
    sooner (by the op on cpu:2) than the assignment; the segment must still assign first."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        with tn.device("cpu:1"):
            v = tn.Variable(np.float64(1.0), name="v")
            asg = v.assign(x * 3.0)
            with tn.control_dependencies([asg]):
                r = v.read()
        with tn.device("cpu:2"):
            out = r + 0.5
    sess = tn.Session(g, backend="fast", devices=D3, fallback=False)
    ref = tn.Session(g, devices=D3)
    for xv in (2.0, 5.0):
        want = ref.run(out, {x: np.float64(xv)})
        assert want == xv * 3.0 + 0.5
        assert sess.run(out, {x: np.float64(xv)}) == want


# ---- devices/spmd.py --------------------------------------------------------------------------------------
def test_a_float64_variable_keeps_its_precision_in_the_whole_program_tier() -> None:
    """Found while looking at the SPMD tier's survivor: the tier copied a Variable's host value to the devices
    outside ``jax.enable_x64``, so a float64 Variable became float32 on the devices (a silent loss of
    precision, and a type error once a batch assigned it)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, shape=[], name="x")
        n = tn.placeholder(tn.int32, shape=[], name="n")
        with tn.device("cpu:1"):
            v = tn.Variable(np.float64(1.0 / 3.0), name="v")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                h = y * v.read()
            with tn.device("cpu:2"):
                y2 = h + 1e-9
            return i + 1, y2

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), x], name="fwd", parallel_iterations=1)
    feeds = {x: np.float64(0.3), n: np.int32(3)}
    want = tn.Session(g, devices=D3).run(y, feeds)
    sess = tn.Session(g, backend="fast", devices=D3, fallback=False)
    got = sess.run(y, feeds)
    assert sess.last_result.stats["tier"] == "spmd"
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-14)


# ---- devices/fast_executor.py -----------------------------------------------------------------------------
def test_a_traced_host_driven_run_names_each_dispatch_on_the_host_track() -> None:
    """Kills ``fast_executor.segment:1e004635`` (the host's dispatch span without its name). In a traced
    host-driven run, each segment call has a span on its device's track and one on the host's track,
    ``dispatch`` and the segment's label."""
    m = _spanning_loop(cond_in_step=False)
    sess = tn.Session(m["g"], backend="fast", devices=D3, stack_chunk=CHUNK)
    want = sess.run(m["fetch"], m["feeds"](5))
    got = sess.run(m["fetch"], m["feeds"](5), trace=True)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert sess.last_result.stats["tier"] == "host-driven"
    tl = sess.last_result.trace
    host = [s.name for s in tl.spans if s.track == "host"]
    assert all(isinstance(name, str) and name for name in host), host
    dispatched = sorted(name[len("dispatch "):] for name in host if name.startswith("dispatch "))
    ran = sorted(s.name for s in tl.spans if s.track not in TRACKS and ": driven " not in s.name)  # (on devices)
    assert ran and dispatched == ran


def test_a_partitioned_run_reports_its_devices_and_segments() -> None:
    """Kills ``fast_executor._run_compiled:0e8c674c`` and ``:6571ff9c`` (the ``devices`` and ``segments``
    entries of the run's stats misnamed)."""
    m = _spanning_loop(cond_in_step=False)
    sess = tn.Session(m["g"], backend="fast", devices=D3, stack_chunk=CHUNK)
    stats = _run_checked(sess, m["g"], m["fetch"], m["feeds"](4))
    segments = _plan(sess).schedule.segments
    assert stats["devices"] == list(sess.backend.devices) and len(stats["devices"]) == 3
    assert stats["segments"] == len(segments) == sum(stats["segments_per_device"].values())



def test_a_fetch_on_a_branch_not_taken_is_dead_in_a_partitioned_run() -> None:
    """Kills ``fast_executor._run_plan:50cc0cf8`` (every fetch taken as live). A tensor inside the branch
    of a cond compiled on cpu:1 that does not run is dead: fetching it is a ``DeadFetchError``, as on the
    reference executor; the branch that runs gives its value."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, shape=[], name="x")
        inner: list[tn.Tensor] = []

        def taken_if_positive() -> tn.Tensor:
            t = tn.tanh(x) * 3.0
            inner.append(t)
            return t + 1.0

        with tn.device("cpu:1"):
            y = tn.cond(x > 0.0, taken_if_positive, lambda: x * 2.0)
        with tn.device("cpu:2"):
            z = y + 0.5
    sess = tn.Session(g, backend="fast", devices=D3, fallback=False)
    ref = tn.Session(g, devices=D3)
    (t,) = inner
    got = sess.run([z, t], {x: np.float64(0.5)})
    np.testing.assert_allclose(got, ref.run([z, t], {x: np.float64(0.5)}), rtol=1e-12)
    for s in (ref, sess):
        with pytest.raises(tn.DeadFetchError):
            s.run([z, t], {x: np.float64(-0.5)})



# ---- fast/backend.py --------------------------------------------------------------------------------------
def test_xla_out_of_memory_entering_a_driven_loop_names_the_loop() -> None:
    """Kills ``backend._drive:b1709d6d`` (the ``RESOURCE_EXHAUSTED`` handler around a driven loop's first
    call given no plan; now the guard around ``DrivenLoop.run``'s ``init``). XLA's out-of-memory raised
    by the call that enters the loop (a GPU allocator's;
    CPUs do not raise it here, so the call is made to) is a ``ResourceExhaustedError`` naming the loop,
    as it is from the later chunk calls."""
    import jax
    from graphs import power_loop

    g, x, n, y, dx = power_loop()
    sess = tn.Session(g, backend="fast", stack_chunk=8)
    want = sess.run([y, dx], {x: 1.5, n: 100})  # overflows one chunk: the next run goes chunk by chunk
    stages = [st for plan in sess.backend._plans.values() for st in plan.stages if st.driven is not None]
    assert stages

    def oom(*args: Any) -> Any:
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB.")

    inits = {id(st): st.fn.init for st in stages}
    for st in stages:
        st.fn.init = oom
    with pytest.raises(tn.ResourceExhaustedError, match=r'ran out of memory running loop "while".*swap_memory=True'):
        sess.run([y, dx], {x: 1.5, n: 100})
    for st in stages:
        st.fn.init = inits[id(st)]
    got = sess.run([y, dx], {x: 1.5, n: 100})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b)


# ---- devices/task_runner.py (tasks in threads of this process: no Ray) -------------------------------------
def test_each_task_plan_is_named_by_its_task() -> None:
    """Kills ``task_runner.split_by_task:45ee97d1`` (a task's plan made without its task's name)."""
    from cluster_programs import SPEC, loop_across_tasks

    from turnout.devices.partition import partition
    from turnout.devices.placement import place
    from turnout.devices.task_runner import split_by_task

    g, x, y = loop_across_tasks(3)
    parted = partition(g, place(g, SPEC.devices), [y], {(x.node.id, x.index)})
    plans = split_by_task(parted, lambda d: SPEC.task_of(d).name)
    assert len(plans) == 2
    for name, plan in plans.items():
        assert plan.task == name
        assert all(SPEC.task_of(d).name == name for d in plan.partitions)


@pytest.mark.parametrize("dead", [False, True])
def test_a_token_delivered_to_a_waiting_recv_wakes_it_with_the_rule_of_its_liveness(dead: bool) -> None:
    """Kills ``task_runner.deliver:008dcde8`` (a dead token woke its waiting Recv as [E-Recv])."""
    from types import SimpleNamespace

    from cluster_programs import T1, dev

    from turnout.devices.task_runner import TaskPlan, TaskRendezvous
    from turnout.reference.rules import Token

    rv = TaskRendezvous()
    rv.attach(TaskPlan(T1, {}, [], remote_in={"in": "/job:worker/task:0"}), lambda *a: None, 1)
    it = SimpleNamespace(device=dev(1), mailbox=[])
    recv = SimpleNamespace(name="r_in")
    key = ("in", ())
    rv.waiting[key] = (it, recv, ())  # type: ignore[assignment]
    rv.deliver(key, Token(None, True) if dead else Token(np.float32(1.5)))
    assert it.mailbox == [(recv, (), "E-Recv-Dead" if dead else "E-Recv")]
    assert key not in rv.waiting and rv.messages[key].dead == dead


def test_a_task_can_fetch_a_tensor_it_was_fed() -> None:
    """Kills ``task_runner.run:70a82791`` (a fetch looked for only among the produced values). ``x`` is
    fed and fetched: the task owning it returns the fed value."""
    from cluster_programs import fetched, loop_across_tasks, run_in_process

    g, x, y = loop_across_tasks(4)
    out = run_in_process(g, [y, x], {x: 2.0})
    assert not any(isinstance(o, Exception) for o in out.values()), out
    got = fetched(out)
    np.testing.assert_equal(got, tn.Session(g).run([y, x], {x: 2.0}))
    assert float(got[1]) == 2.0


def test_a_task_counts_each_time_it_waits() -> None:
    """Kills ``task_runner._drive:4d822c55`` (``waits = 1`` instead of ``+= 1``). A loop across the two
    tasks, one iteration at a time, whose body on task 1 sleeps 5 ms: each iteration task 0 (the
    LoopCond's) runs out of work and waits for task 1's message, so it waits once per iteration, not
    only once (no race: the sleep is far longer than task 0's own work in an iteration)."""
    from cluster_programs import T0, dev, fetched, run_in_process

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device(dev(1, 0)):
                y2 = tn.sleep(y * 1.5 - 0.25, 0.005)
            return i + 1, y2

        with tn.device(dev(0, 1)):
            _, y = tn.while_loop(lambda i, y: i < 10, body, [tn.constant(0), x], name="loop",
                                 parallel_iterations=1)
    out = run_in_process(g, [y], {x: 2.0})
    np.testing.assert_equal(fetched(out), [tn.Session(g).run(y, {x: 2.0})])
    assert out[T0].waits >= 5, {t: o.waits for t, o in out.items()}


@pytest.mark.parametrize("waiting", [20, 21])
def test_a_timeout_message_lists_twenty_waits_and_elides_only_the_rest(waiting: int) -> None:
    """Kills ``task_runner._timeout_message:768dccd6`` (``...`` after exactly twenty lines)."""
    from types import SimpleNamespace

    from cluster_programs import T1, dev

    from turnout.devices.task_runner import TaskPlan, TaskRendezvous, TaskRunner

    runner = TaskRunner(T1, lambda *a: None)
    rv = TaskRendezvous()
    rv.attach(TaskPlan(T1, {}, [], remote_in={"in": "/job:worker/task:0"}), lambda *a: None, 1)
    it = SimpleNamespace(device=dev(1))
    for k in range(waiting):
        rv.waiting[("in", (("f", k),))] = (it, SimpleNamespace(name=f"r{k}"), (("f", k),))  # type: ignore[assignment]
    lines = runner._timeout_message(rv, 1.0).splitlines()[1:]
    listed = [ln for ln in lines if ln.startswith("  Recv ")]
    assert len(listed) == 20
    assert lines[20:] == (["  ..."] if waiting > 20 else [])


# ---- devices/cluster.py -----------------------------------------------------------------------------------
def test_a_device_naming_another_task_by_its_task_alone_is_refused() -> None:
    """Kills ``cluster._devices:103ecc48`` (a device name with ``/task:`` but no ``/job:`` taken as this
    task's). Task 0 of the spec may not list a device of task 1."""
    from turnout.devices.cluster import ClusterSpec

    with pytest.raises(tn.ClusterSpecError, match=r"task /job:worker/task:0: device '/task:1/device:CPU:0' "
                                                  r"belongs to another task"):
        ClusterSpec({"worker": [{"devices": ["/task:1/device:CPU:0"]}, {"devices": 1}]})


def test_a_cluster_spec_shows_each_task_and_its_device_count() -> None:
    """Kills ``cluster.__repr__:53db53fc`` (the tasks of the repr joined by a mangled separator)."""
    from turnout.devices.cluster import ClusterSpec

    spec = ClusterSpec({"worker": [{"devices": 2}, {"devices": 1}]})
    assert repr(spec) == "ClusterSpec(/job:worker/task:0: 2 devices, /job:worker/task:1: 1 devices)"


# ---- devices/cluster_trace.py -----------------------------------------------------------------------------
def test_clock_offsets_are_the_least_that_put_each_recv_after_its_send() -> None:
    """Kills ``cluster_trace.clock_offsets:47e8b847.4`` (a constraint one tick too strict). Task 1's
    clock is behind: its Recv of ``a`` is stamped 5 before task 0's Send (and of ``c`` 2 before). The
    least correction moves task 1 by 6, after which the Recv of ``a`` is exactly one tick after its Send."""
    from turnout.devices.cluster_trace import clock_offsets
    from turnout.reference.trace import Event

    t0, t1 = "/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"
    tag = (("f", 0),)
    tracks = {t0: [Event(100, "_send/a", "Send", tag, False, "E-Send"),
                   Event(101, "_send/c", "Send", tag, False, "E-Send")],
              t1: [Event(95, "_recv/a", "Recv", tag, False, "E-Recv"),
                   Event(99, "_recv/c", "Recv", tag, False, "E-Recv")]}
    fix = clock_offsets(tracks)
    assert fix.consistent
    assert fix.offsets == {"/job:worker/task:0": 0, "/job:worker/task:1": 6}


# ---- devices/smallstep.py ---------------------------------------------------------------------------------
def test_explore_counts_every_reachable_configuration_once() -> None:
    """Kills ``smallstep.explore:92bd928a`` and ``:e9e878f4`` (``n_states`` counted down, or twice) and
    ``smallstep.explore:7e326f51`` (the search stopped at its first final configuration). A cond across
    two devices has many interleavings; an independent search over ``steps`` and ``step`` finds the same
    reachable configurations and final outcomes as ``explore``."""
    import graphs
    from test_devices_smallstep import _system

    from turnout.devices import smallstep as pss

    g, p, x, z = graphs.cond_split_over_two_devices()
    s = _system(g, [z], {p: True, x: 3})
    seen = {s.initial}
    frontier = [s.initial]
    finals = 0
    while frontier:
        pc = frontier.pop(0)
        nxt = pss.steps(s, pc)
        finals += not nxt
        for i, f in nxt:
            child = pss.step(s, pc, i, f)
            if child not in seen:
                seen.add(child)
                frontier.append(child)
    r = pss.explore(s)
    assert r.complete and not r.stuck
    assert len(seen) > 2 and r.n_states == len(seen)
    assert len(r.outcomes) == 1 and finals >= 1


# ---- devices/ray_runtime.py -------------------------------------------------------------------------------
def test_a_ray_session_places_nodes_where_its_requests_ask() -> None:
    """Kills ``ray_runtime.__init__:02689044`` (the backend's soft placement requests dropped). The
    placement is made when the backend is built, before any actor is used; a started pool is stood in
    for, so no Ray process is needed."""
    pytest.importorskip("ray")
    from cluster_programs import SPEC, dev

    from turnout.devices.ray_runtime import RayBackend, TaskPool

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        a = tn.multiply(x, 2.0, name="a")
        b = tn.add(a, 1.0, name="b")
    pool = TaskPool.__new__(TaskPool)
    pool.spec = SPEC
    requests = {"a": dev(1, 1), "b": dev(0, 1)}
    backend = RayBackend(g, cluster=pool, requests=requests)
    where = backend.placement.device_of
    assert where[a.node.id] == dev(1, 1) and where[b.node.id] == dev(0, 1)
    assert backend.placement.device_of != RayBackend(g, cluster=pool).placement.device_of


def _ray_backend(g: tn.Graph, **kw: Any) -> Any:
    """A ``RayBackend`` over ``cluster_programs.SPEC`` with a stand-in for a started pool (no Ray process)."""
    from cluster_programs import SPEC

    from turnout.devices.ray_runtime import RayBackend, TaskPool

    pool = TaskPool.__new__(TaskPool)
    pool.spec = SPEC
    return RayBackend(g, cluster=pool, **kw)


def test_a_ray_runs_stats_list_the_tasks_that_ran_and_its_counts() -> None:
    """Kills ``ray_runtime._result:ce905a37`` (the ``tasks`` entry of the run's stats misnamed) and
    ``ray_runtime._result:3711807c`` (a ``detail=True`` run's firing counts left out of its result). The
    tasks' outcomes come from task runners in threads of this process."""
    pytest.importorskip("ray")
    from cluster_programs import SPEC, loop_across_tasks, run_in_process

    from turnout.devices.partition import partition

    g, x, y = loop_across_tasks(4)
    backend = _ray_backend(g, detail=True)
    outcomes = run_in_process(g, [y], {x: 2.0})
    parted = partition(g, backend.placement, [y], {(x.node.id, x.index)})
    result = backend._result(parted, [y], outcomes)
    np.testing.assert_equal(result.values, [tn.Session(g).run(y, {x: 2.0})])
    assert result.stats["tasks"] == sorted(t.name for t in SPEC.tasks) == sorted(outcomes)
    assert result.stats["waits_per_task"].keys() == set(outcomes)
    counts: Counter[Any] = Counter()
    for o in outcomes.values():
        counts.update(o.counts)
    assert result.counts == dict(counts) and sum(counts.values()) == result.stats["firings"] > 0


def test_a_failed_task_makes_the_driver_wait_for_every_other_task_to_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kills ``ray_runtime._stop_others:36ecb869`` (the driver waiting for the first of the other tasks
    only). Each other task is told to abort, and the driver then waits, briefly, until all of their runs
    have returned (a stand-in for ``ray.wait`` that returns as many as it is asked for)."""
    ray = pytest.importorskip("ray")
    from cluster_programs import T0, T1, loop_across_tasks

    aborted: list[tuple[str, Any, str]] = []

    class _Actor:
        def __init__(self, name: str) -> None:
            self.abort = type("_Remote", (), {"remote": staticmethod(
                lambda run_id, reason: aborted.append((name, run_id, reason)))})

    waited: list[Any] = []

    def wait(refs: list[Any], num_returns: int = 1, timeout: Any = None) -> tuple[list[Any], list[Any]]:
        waited.extend(refs[:num_returns])
        return refs[:num_returns], refs[num_returns:]

    monkeypatch.setattr(ray, "wait", wait)
    g, _, _ = loop_across_tasks(2)
    backend = _ray_backend(g)
    backend.pool.actors = {T0: _Actor(T0), T1: _Actor(T1), "/job:worker/task:2": _Actor("/job:worker/task:2")}
    pending = ["run on task 1", "run on task 2"]
    backend._stop_others(T0, [T0, T1, "/job:worker/task:2"], pending, 7, "task 0 failed")
    assert sorted(a[0] for a in aborted) == [T1, "/job:worker/task:2"]
    assert all(a[1:] == (7, "task 0 failed") for a in aborted)
    assert waited == pending


def test_a_task_that_cannot_start_is_named_with_what_it_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kills ``ray_runtime.__init__:6daa97a1`` (the error for a task whose actor did not start within
    ``start_timeout`` without its message). Ray is stood in for: the actor of task 1 never answers, as when
    the cluster lacks the resources it asks for; the pool's error names it and them, and the pool kills
    the actors it made."""
    ray = pytest.importorskip("ray")
    from turnout.devices.ray_runtime import TaskPool

    killed: list[str] = []

    class _Actor:
        def __init__(self, name: str) -> None:
            self.name = name
            self.connect = type("_Remote", (), {"remote": staticmethod(lambda actors: f"ref of {name}")})

    class _Options:
        def __init__(self, **opts: Any) -> None:
            self.opts = opts

        def remote(self, name: str) -> _Actor:
            return _Actor(name)

    class _Remote:
        def options(self, **opts: Any) -> _Options:
            return _Options(**opts)

    def wait(refs: list[Any], num_returns: int = 1, timeout: Any = None) -> tuple[list[Any], list[Any]]:
        ready = [r for r in refs if "task:1" not in r]
        return ready, [r for r in refs if r not in ready]

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "remote", lambda cls: _Remote())
    monkeypatch.setattr(ray, "wait", wait)
    monkeypatch.setattr(ray, "get", lambda ref: 1234)
    monkeypatch.setattr(ray, "kill", lambda a, no_restart=True: killed.append(a.name))
    spec = {"worker": [{"devices": 1}, {"devices": 1, "num_cpus": 2, "resources": {"tpu_host": 1}}]}
    want = (r"task /job:worker/task:1 did not start within 2.5 s: does the cluster have num_cpus=2, num_gpus=0, "
            r"resources=\{'tpu_host': 1\.?0?\} free for it\?")
    with pytest.raises(tn.TaskFailedError, match=want):
        TaskPool(spec, start_timeout=2.5)
    assert sorted(killed) == ["/job:worker/task:0", "/job:worker/task:1"]
