"""Laws of one run of the fast partitioned executor's per-device tiers (``turnout.devices.plan_run``):
the plan dispatches from per-device workers exactly where a segment holds a host callback (or
``threads="always"``), each device's state (error word, Variables, stacks) lives on that device, and a
threaded run gives the values, deadness, errors and trace spans the host thread gives. Each law kills
mutants of the full set of ``devices/plan_run.py`` (issue 40, part 3; ``python tools/mutation.py
--module devices/plan_run.py --all``): the host-callback set or the ``threads`` choice broken, a
Variable or a stack placed on the wrong device, a worker that copies an input it should not (or not one
it should), that drops its trace span or the run's error, the module's exports.

The programs are two or three ops on two forced host devices (the conftest forces 8), so each run
compiles in well under a second; the hypothesis-driven runs of this tier are in ``test_devices_fast.py``.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import numpy as np
import pytest
import test_exports
from graphs import host_shape_filled_on_the_second_device, inner_loop_on_the_second_device

import turnout as tn
from turnout.devices.plan_run import HOST_CALLBACK_OPS, WHO, DevicePlan, PlanRun
from turnout.fast import stacks as stk
from turnout.fast.emit import var_key
from turnout.fast.outcome import Retry
from turnout.fast.regions import program_nodes
from turnout.fast.runner import RunPolicy
from turnout.fast.timeline import Timeline
from turnout.session import RunOptions

D2 = ["cpu:0", "cpu:1"]


def _plans(sess: tn.Session) -> list[DevicePlan]:
    """The per-device plans the session's fast partitioned backend made so far."""
    return list(sess.backend._plans.values())


def _chain(sleep: bool) -> tuple[tn.Graph, Any, Any]:
    """``z = (x * 2 [+ sleep 0 s] on cpu:1) + 1 on cpu:0``: a value crossing devices both ways."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        with tn.device("cpu:1"):
            y = x * 2.0
            if sleep:
                y = tn.sleep(y, 0.0)
        with tn.device("cpu:0"):
            z = y + 1.0
    return g, x, z


def _session(g: tn.Graph, threads: str) -> tn.Session:
    return tn.Session(g, backend="fast", devices=D2, fallback=False, threads=threads, whole_program="never")


def test_the_host_callback_ops_and_the_executors_name_are_the_documented_ones() -> None:
    """Law: ``Sleep`` (and only it) is a host callback; errors name the "fast partitioned executor".
    Kills the set's constants replaced (None, an empty set, a renamed op or name)."""
    assert HOST_CALLBACK_OPS == frozenset({"Sleep"})
    assert WHO == "fast partitioned executor"


@pytest.mark.parametrize("sleep,threads,want", [(True, "auto", True), (False, "auto", False),
                                                (False, "always", True)])
def test_a_plan_dispatches_from_workers_exactly_where_a_segment_holds_a_host_callback(
        sleep: bool, threads: str, want: bool) -> None:
    """Law: ``threaded`` is "some segment holds a ``Sleep``" under ``threads="auto"`` and "there are
    segments" under ``"always"``; only a threaded plan's run gets worker pools. Either way the values are
    the reference's. Kills ``threaded`` inverted, its ``any`` or ``==`` swapped, the op set misnamed and
    the pools taken for every plan (or none)."""
    g, x, z = _chain(sleep)
    sess = _session(g, threads)
    np.testing.assert_allclose(sess.run(z, {x: np.array([1.0, 2.0], np.float32)}), [3.0, 5.0])
    plans = _plans(sess)
    assert len(plans) == 1 and plans[0].threaded is want
    assert bool(sess.backend._pools) is want
    sess.close()


def test_a_plan_with_no_segments_is_not_threaded_even_when_always() -> None:
    """Law: ``threads="always"`` threads a plan only when it has segments to dispatch: a program of
    constants alone has none, so it runs on the host thread. Kills ``bool(sched.segments)`` replaced
    by a constant True."""
    g = tn.Graph()
    with g.as_default():
        with tn.device("cpu:1"):
            c = tn.constant(np.float32(4.0))
    sess = _session(g, "always")
    assert float(sess.run(c)) == 4.0
    plans = _plans(sess)
    assert all(not p.threaded for p in plans if not p.schedule.segments)
    sess.close()


def test_each_variable_lives_on_its_device_and_keeps_its_assignments_in_a_threaded_run() -> None:
    """Law: a Variable placed on cpu:1 is put there before the run (``var_device``), read and assigned
    by the worker of cpu:1, and the assignment is what the next run reads. Kills ``var_device``
    mapped to another device, the Variable's state put on the wrong device or left out, and the
    worker's new state not kept."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        with tn.device("cpu:1"):
            v = tn.Variable(np.float32(1.0), name="v")
            up = v.assign_add(tn.sleep(x, 0.0))
        with tn.device("cpu:0"):
            z = up * 3.0
    sess = _session(g, "auto")
    assert float(sess.run(z, {x: 2.0})) == 9.0
    assert float(sess.run(z, {x: 2.0})) == 15.0
    plan = _plans(sess)[-1]
    assert plan.threaded and set(plan.var_device.values()) == {tn.devices.parse("cpu:1").name}
    sess.close()


def test_a_threaded_runs_values_cross_devices_as_the_host_threads_do() -> None:
    """Law: a threaded run's every fetch equals the host thread's, whether a segment's input comes from
    the feed (a host value), from a worker on the same device or from one on the other device (a
    ``Lazy`` copied over). Kills the worker's input resolution broken: a ``Lazy`` not resolved, a
    device value not copied, a ``!=`` turned ``==``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        with tn.device("cpu:0"):
            a = tn.sleep(x + 1.0, 0.0)
        with tn.device("cpu:1"):
            b = tn.sleep(a * x, 0.0)
        with tn.device("cpu:0"):
            c = tn.sleep(b - a, 0.0)
        with tn.device("cpu:1"):
            d = c + b
    feed = np.array([1.0, 2.0, -3.0], np.float32)
    want = tn.Session(g).run([a, b, c, d], {x: feed})
    sess = _session(g, "auto")
    got = sess.run([a, b, c, d], {x: feed})
    for w, v in zip(want, got):
        np.testing.assert_allclose(v, w)
    assert _plans(sess)[0].threaded
    sess.close()


def test_a_threaded_runs_kernel_error_is_the_reference_error() -> None:
    """Law: an error a segment raises in its device's error word, run on a worker, is raised after the
    run as the reference's error type. Kills the worker's error word dropped from its result."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        with tn.device("cpu:1"):
            s = tn.sleep(x, 0.0)
            y = tn.assert_true(s > 0.0, s, "x must be positive")
        with tn.device("cpu:0"):
            z = y + 1.0
    sess = _session(g, "auto")
    assert float(sess.run(z, {x: 2.0})) == 3.0
    with pytest.raises(tn.KernelError, match="x must be positive"):
        sess.run(z, {x: -2.0})
    sess.close()


def test_a_traced_threaded_run_has_one_span_per_segment_call_on_its_devices_track() -> None:
    """Law: in a traced threaded run each worker records its segment call on its device's track, named
    as the segment. Kills the span dropped or put on another track."""
    g, x, z = _chain(sleep=True)
    sess = _session(g, "auto")
    sess.run(z, {x: np.array([1.0, 2.0], np.float32)}, trace=True)
    assert sess.last_result is not None
    tl = sess.last_result.trace
    plan = _plans(sess)[0]
    want = {(seg.device, seg.describe()) for seg in plan.schedule.segments}
    assert {(s.track, s.name) for s in tl.spans} >= want
    # (each worker's span starts when its call starts, after the run began, and ends after it)
    ours = [s for s in tl.spans if (s.track, s.name) in want]
    assert all(s.start_s > 0.0 and s.dur_s >= 0.0 for s in ours), ours
    sess.close()


def test_the_module_exports_what_it_defines() -> None:
    """Law: ``__all__`` names only what the module defines (``test_exports``'s law, for this module).
    Kills an export renamed."""
    test_exports.test_every_exported_name_exists("turnout.devices.plan_run")


def test_jax_keeps_its_x64_default_after_a_threaded_run() -> None:
    """Law: the worker's ``enable_x64`` is thread-local and scoped: the host's setting is unchanged
    after a threaded run (no state leaks into later tests)."""
    before = jax.config.jax_enable_x64
    g, x, z = _chain(sleep=True)
    sess = _session(g, "auto")
    sess.run(z, {x: np.array([1.0, 2.0], np.float32)})
    sess.close()
    assert jax.config.jax_enable_x64 == before


def test_a_threaded_run_whose_stack_outgrows_its_chunk_reruns_with_each_stack_on_its_device() -> None:
    """Law: the gradient stacks of a loop spanning cpu:0 and cpu:1 are made before the run on the
    device of their pushes (``stack_alloc``); a worker whose call outgrows its chunk (an inner loop of 3
    pushes in a chunk of 1) hands back a ``Retry``, the run stops dispatching and runs again with a
    larger chunk: the reference's values. Kills a stack put on a wrong device or allocated with wrong
    shapes, and the worker's ``Retry`` dropped (or its error word taken from another device)."""
    g, fetches, feeds = inner_loop_on_the_second_device(inner=3, outer=2)
    sess = tn.Session(g, backend="fast", devices=D2, stack_chunk=1, threads="always")
    np.testing.assert_allclose(sess.run(fetches, feeds), [1.01**6, 6 * 1.01**5], rtol=1e-12)
    stats = sess.last_result.stats if sess.last_result is not None else {}
    assert stats["stack_capacity_retries"] > 0 and stats["stack_capacity"] >= 3, stats
    plan = _plans(sess)[-1]
    news = [n for n in program_nodes(plan.program) if n.op == "StackNew"]
    assert plan.threaded and news and set(plan.stack_alloc) == {stk.state_key(n.id) for n in news}
    names = {tn.devices.parse(d).name for d in D2}
    assert {d for d, _, _ in plan.stack_alloc.values()} <= names
    sess.close()


def test_a_traced_threaded_loops_spans_carry_their_iteration() -> None:
    """Law: a worker's span of a segment inside a host-driven loop names the loop's iteration it ran
    in, as the host thread's spans do: iterations 0, 1 and 2 of a 3-iteration loop spanning the two
    devices. Kills the span's ``iteration`` dropped."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = tn.sleep(y * 2.0, 0.0)
            return i + 1, y2

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < 3, body, [tn.constant(0), x])
    sess = _session(g, "auto")
    assert float(sess.run(y, {x: 1.0}, trace=True)) == 8.0
    assert sess.last_result is not None
    cpu1 = tn.devices.parse("cpu:1").name
    its = sorted(s.args.get("iteration") for s in sess.last_result.trace.spans if s.track == cpu1)
    assert set(its) >= {0, 1, 2}, its
    sess.close()


def test_a_threaded_runs_host_known_value_stays_static_on_the_other_device() -> None:
    """Law: a value known on the host (a shape computed from a feed) reaches a worker as it is, not
    copied to the worker's device: ``fill`` on cpu:1 needs its shape static. Kills the host value
    (``where`` None) put on the device like a device value (``is not None`` turned ``is None``, ``and``
    turned ``or``: the plan is then specialised on the feed to make the shape static again)."""
    g, x, y = host_shape_filled_on_the_second_device(sleep=True)
    sess = _session(g, "auto")
    np.testing.assert_array_equal(sess.run(y, {x: np.zeros((2, 3), np.float32)}), np.full((4, 6), 1.5, np.float32))
    # (one plan, not specialised on the feed: a device value there would need it)
    plans = _plans(sess)
    assert len(plans) == 1 and plans[0].threaded and not plans[0].static_feeds
    sess.close()


def test_a_threaded_runs_dead_fetch_is_the_dead_fetch_error() -> None:
    """Law: a fetch a compiled cond leaves dead, made on a worker, is read through its live flag
    (``Lazy(..., live=True)``): ``DeadFetchError``, never the zeros that stand for it. Kills the live
    flag's ``Lazy`` made as a value's."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        c = tn.placeholder(tn.bool, [], name="c")
        with tn.device("cpu:0"):
            _, t = tn.raw.switch(tn.sleep(x, 0.0), c)
            y = t * 2.0
        with tn.device("cpu:1"):
            z = x + 1.0
    sess = _session(g, "auto")
    np.testing.assert_allclose(sess.run([y, z], {x: 3.0, c: True}), [6.0, 4.0])
    with pytest.raises(tn.DeadFetchError):
        sess.run([y, z], {x: 3.0, c: False})
    sess.close()


def _bare_run(pools: dict[str, ThreadPoolExecutor]) -> PlanRun:
    """A ``PlanRun`` with only what ``on_workers`` and ``drain`` read: its pools and its futures."""
    run = PlanRun.__new__(PlanRun)
    run.pools, run.futures = pools, []
    return run


def test_on_workers_waits_for_every_call_handed_out_then_drain_waits_for_it() -> None:
    """Law: in a threaded run ``on_workers(fn)`` runs ``fn`` only once every call handed to a worker
    so far has returned (here a call on device b, held until released), and ``drain`` waits for
    ``fn`` too. Kills the wait turned into ``if f.done()``, and ``fn``'s future left out of the run's."""
    pools = {"a": ThreadPoolExecutor(1), "b": ThreadPoolExecutor(1)}
    release, ran = threading.Event(), threading.Event()
    seen: list[bool] = []
    try:
        run = _bare_run(pools)
        held = pools["b"].submit(release.wait)
        run.futures.append(held)

        def fn() -> None:
            seen.append(held.done())
            threading.Event().wait(0.05)
            ran.set()

        run.on_workers(fn)
        assert not ran.wait(0.2), "fn ran before the call it must wait for returned"
        release.set()
        run.drain()
        assert ran.is_set() and seen == [True] and run.futures == []
    finally:
        release.set()
        for p in pools.values():
            p.shutdown(wait=True)


def test_on_workers_without_pools_runs_fn_at_once() -> None:
    """Law: a run with no workers runs ``fn`` on the calling thread, at once. Kills ``if not
    self.pools`` inverted."""
    run = _bare_run({})
    got: list[int] = []
    run.on_workers(lambda: got.append(1))
    assert got == [1] and run.futures == []


def test_drain_raises_the_first_failure_after_waiting_for_every_call() -> None:
    """Law: ``drain`` waits for every call handed out, raises the first one's failure (not a later
    one's, not none) and forgets them all. Kills the failure dropped (``first = None``, ``first and
    e``), the test ``is not None`` inverted, and a non-None start."""
    pools = {"a": ThreadPoolExecutor(1)}
    try:
        run = _bare_run(pools)
        done: list[int] = []

        def boom(msg: str) -> None:
            raise ValueError(msg)

        run.futures += [pools["a"].submit(boom, "first"), pools["a"].submit(boom, "second"),
                        pools["a"].submit(done.append, 1)]
        with pytest.raises(ValueError, match="^first$"):
            run.drain()
        assert done == [1] and run.futures == []
        run.futures.append(pools["a"].submit(done.append, 2))
        run.drain()  # no failure: nothing raised
        assert done == [1, 2]
    finally:
        pools["a"].shutdown(wait=True)


def test_a_plan_specialised_on_a_fed_shape_compiles_with_that_feed_as_a_constant() -> None:
    """Law: a ``fill`` on cpu:1 whose shape is a root feed compiles once the plan holds that feed as
    a constant (``fast.specialise``: the plan's ``static_feeds``); each new value is a plan of its
    own. Kills the plan made without the static feeds it was given."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        with tn.device("cpu:1"):
            y = tn.fill(tn.stack([n, 2]), 1.5)
        with tn.device("cpu:0"):
            z = y * 2.0
    sess = _session(g, "auto")
    for k in (3, 5):
        np.testing.assert_array_equal(sess.run(z, {n: k}), np.full((k, 2), 3.0, np.float32))
    assert any(p.static_feeds for p in _plans(sess))
    sess.close()


def _spanning_gradient() -> tuple[tn.Graph, Any, list[Any]]:
    """A loop spanning cpu:0 and cpu:1 (an inner loop on cpu:1 reading a Variable placed there) and
    its gradient: stacks on both devices, some of static element shape, one not (``x`` has no static
    length, and the inner loop's carry takes its shape)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [None], name="x")
        with tn.device("cpu:1"):
            v = tn.Variable(np.float64(2.0), name="v")

        def outer(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                _, y2 = tn.while_loop(lambda j, y: j < 3, lambda j, y: (j + 1, y * x * v), [tn.constant(0), y])
            with tn.device("cpu:0"):
                return i + 1, y2 + tn.cast(i, tn.float64)

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < 2, outer, [tn.constant(0), tn.ones_like(x)])
        (dx,) = tn.gradients(tn.reduce_sum(y), [x])
    return g, x, [y, dx]


def test_a_run_starts_with_each_devices_state_and_stacks_made_on_that_device() -> None:
    """Law: a ``PlanRun`` starts from per-device state made on that device before any step: an int32
    error word 0 on every device, each Variable's session entry (its initial value the first time)
    on its device, each gradient stack on its pushes' device (allocated there where its shapes are
    static, pending where not); its ``DeviceStacks`` has one store per device, labelled by the
    device's short name and naming the executor, holding the plan's stack info, capacity, the
    backend's ``device_memory_limit``, the run budget's memory plan and that device's checkpoint-slot
    bytes; the runner gets the plan, the state, the devices, the options, ``WHO`` and the timeline.
    Kills every argument of the state, the stacks' allocation and ``DeviceStacks``, and ``super().__init__``
    dropped, swapped or ``None``."""
    g, x, fetches = _spanning_gradient()
    sess = tn.Session(g, backend="fast", devices=D2, fallback=False, whole_program="never",
                      device_memory_limit=2**30)
    got = sess.run(fetches, {x: np.array([1.0, 1.5])})
    np.testing.assert_allclose(got, tn.Session(g).run(fetches, {x: np.array([1.0, 1.5])}))
    backend, plan = sess.backend, _plans(sess)[-1]
    cpu0, cpu1 = (tn.devices.parse(d).name for d in D2)
    jdev = backend.jax_devices
    plan.slot_bytes = {cpu0: {"outer": 64}, cpu1: {"inner": 128}}  # (none here: the wiring is the law)
    options, tl, variables = RunOptions(memory_budget=2**20, max_iterations=77), Timeline(), {}
    run = PlanRun(backend, plan, variables, options, tl)
    assert set(run.state) == {cpu0, cpu1}
    for d in (cpu0, cpu1):
        err = run.state[d]["err"]
        assert err.dtype == np.int32 and int(err) == 0 and err.devices() == {jdev[d]}
    assert float(variables["v"]) == 2.0
    held = run.state[cpu1][var_key("v")]
    assert float(held) == 2.0 and held.devices() == {jdev[cpu1]}
    assert var_key("v") not in run.state[cpu0]
    shapes = {s for _, _, s in plan.stack_alloc.values()}
    assert None in shapes and len(shapes) > 1 and {d for d, _, _ in plan.stack_alloc.values()} == {cpu0, cpu1}
    for k, (d, dtype, sh) in plan.stack_alloc.items():
        sv = run.state[d][k]
        assert isinstance(sv, stk.StackValue) and sv.capacity == plan.capacity and sv.dtype == dtype
        if sh is None:
            assert sv.pending
        else:
            assert sv.buf.shape == (plan.capacity, *sh[0]) and sv.idx.shape == (plan.capacity, *sh[1])
            assert sv.buf.devices() == sv.idx.devices() == sv.ptr.devices() == {jdev[d]}
    stacks = run.stacks
    assert stacks.capacity == plan.capacity and stacks.who == WHO
    assert stacks.labels == {cpu0: "cpu:0", cpu1: "cpu:1"}
    budget = plan.budget(2**20)
    assert budget is not None
    for d, store in stacks.stores.items():
        assert store.info is plan.stack_info and store.limit == 2**30 and store.budget is budget
        assert store.who == f"{WHO} (device {stacks.labels[d]})" and store.held == plan.slot_bytes[d]
    assert run.plan is plan and run.program is plan.program and run.jdev is jdev
    assert run.policy == RunPolicy(WHO) and run.tl is tl and run.max_iter_py == 77
    assert not plan.threaded and run.pools == {} and run.futures == []
    sess.close()


def test_a_threaded_loop_of_one_iteration_in_flight_waits_on_each_devices_last_call() -> None:
    """Law: a host-driven loop spanning both devices with ``parallel_iterations=1`` waits, before each
    next iteration, for the last call handed to each device's worker (``last_fut``, read by the
    window), and a kernel error of an iteration is raised as the reference's. Kills the worker's
    future not recorded as its device's last call (the window then waits on ``None``)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = tn.assert_true(y < 100.0, tn.sleep(y * 2.0, 0.0), "y grew past 100")
            with tn.device("cpu:0"):
                return i + 1, y2 + 1.0

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < 4, body, [tn.constant(0), x], parallel_iterations=1)
    sess = _session(g, "auto")
    assert float(sess.run(y, {x: 1.0})) == 31.0  # 1 -> 3 -> 7 -> 15 -> 31
    assert _plans(sess)[0].threaded
    with pytest.raises(tn.KernelError, match="y grew past 100"):
        sess.run(y, {x: 60.0})
    sess.close()


def test_a_traced_worker_waits_for_its_devices_error_word_before_closing_its_span(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Law: a traced worker ends its segment's span only once the call has run: it waits for the
    device's new error word (an int32 array), so the span is the call's run, not its dispatch. Kills
    the wait given ``None`` (a no-op) or another key."""
    waited: list[Any] = []
    real = jax.block_until_ready

    def recording(x: Any) -> Any:
        waited.append(x)
        return real(x)

    monkeypatch.setattr(jax, "block_until_ready", recording)
    g, x, z = _chain(sleep=True)
    sess = _session(g, "auto")
    sess.run(z, {x: np.array([1.0, 2.0], np.float32)}, trace=True)
    sess.close()
    errs = [w for w in waited if isinstance(w, jax.Array) and w.shape == () and w.dtype == np.int32]
    assert waited and all(w is not None for w in waited) and len(errs) >= len(_plans(sess)[0].schedule.segments), waited


def _static_loop_variable() -> tuple[tn.Graph, Any, Any, Any]:
    """A loop spanning the devices whose variable ``k`` a segment on cpu:1 computes as a value known
    when traced (``k2``, from the static size of ``y2``): ``y`` is ``x * 2 * 3 ** (n - 1)``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        n = tn.placeholder(tn.int32, [], name="n")

        def body(i: tn.Tensor, k: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = tn.sleep(y * k, 0.0)
                k2 = tn.cast(tn.size(y2), tn.float32) + 1.0
            return i + 1, k2, y2

        with tn.device("cpu:0"):
            _, _, y = tn.while_loop(lambda i, k, y: i < n, body, [tn.constant(0), tn.constant(2.0), x])
    return g, x, n, y


def test_a_threaded_loops_variable_known_when_traced_enters_each_iteration_as_a_device_value() -> None:
    """Law: in a threaded run a loop variable that a worker's segment computes as a value known when
    traced enters the next iteration as a device value, as the host driver enters the values it
    holds: the body's segments trace once for the loop, so a run of 4 iterations traces nothing that
    a run of 1 did not, and the values are the reference's. Kills the loop variable's ``data`` flag
    ignored (a static value per iteration: a trace more) and its value dropped."""
    g, x, n, y = _static_loop_variable()
    sess = _session(g, "auto")
    feed = np.array([1.0, 2.0], np.float32)
    np.testing.assert_allclose(sess.run(y, {x: feed, n: 1}), [2.0, 4.0])
    traces = sess.backend.compile_count
    np.testing.assert_allclose(sess.run(y, {x: feed, n: 4}), [54.0, 108.0])  # 2 * 3 ** 3
    assert sess.backend.compile_count == traces and _plans(sess)[0].threaded
    sess.close()


def test_every_device_value_a_worker_hands_its_segment_lives_on_the_segments_device(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Law: a worker copies each input its segment reads to the segment's device before the call: a
    loop variable known when traced, a value made on the other device (a loop's entry among them) and
    a value made on its own device all reach the call committed to that device (the call never moves
    a value itself). Kills the copies made to JAX's default device (``device_put`` without the device,
    or with ``None``) and a worker's output recorded as known on the host (``where`` None: a loop
    entered with it would hand it on uncopied)."""
    seen: list[tuple[str, Any]] = []
    real = PlanRun.call

    def spying(self: PlanRun, seg: Any, env_in: dict[Any, Any], state: dict[str, Any]) -> Any:
        seen.extend((seg.device, v) for v in env_in.values() if isinstance(v, jax.Array))
        return real(self, seg, env_in, state)

    monkeypatch.setattr(PlanRun, "call", spying)
    g, x, n, y = _static_loop_variable()
    sess = _session(g, "auto")
    np.testing.assert_allclose(sess.run(y, {x: np.array([1.0, 2.0], np.float32), n: 3}), [18.0, 36.0])
    jdev = sess.backend.jax_devices
    sess.close()
    g, x, z = _chain(sleep=True)
    sess = _session(g, "auto")
    np.testing.assert_allclose(sess.run(z, {x: np.array([1.0, 2.0], np.float32)}), [3.0, 5.0])
    sess.close()
    # a loop entered with a value a worker made on the other device
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        with tn.device("cpu:1"):
            a = tn.sleep(x * 2.0, 0.0)

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:0"):
                y2 = tn.sleep(y + 1.0, 0.0)
            with tn.device("cpu:1"):
                return i + 1, tn.sleep(y2 * 3.0, 0.0)

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < 2, body, [tn.constant(0), a])
    sess = _session(g, "auto")
    np.testing.assert_allclose(sess.run(y, {x: np.array([1.0, 2.0], np.float32)}), [30.0, 48.0])
    sess.close()
    assert {d for d, _ in seen} == set(jdev)
    wrong = [(d, v.devices(), v.committed) for d, v in seen if v.devices() != {jdev[d]} or not v.committed]
    assert not wrong, wrong


def test_a_host_conds_merge_index_reaches_a_worker_as_a_value_known_when_traced() -> None:
    """Law: the index a cond's Merge outputs, where the host reads the predicate and joins the
    branches, is known on the host; a worker on the other device hands it to its segment as it is,
    not copied to the device, so a ``fill`` whose shape it gives compiles without specialising the
    plan on the fed predicate: one plan, no static feeds, the reference's values for either branch.
    Kills a value known on the host (``where`` None) put on the device (``and`` turned ``or``)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        c = tn.placeholder(tn.bool, [], name="c")
        with tn.device("cpu:1"):
            s = tn.sleep(x * 2.0, 0.0)
            f, t = tn.raw.switch(s, c)
        with tn.device("cpu:0"):
            t2 = tn.sleep(t * 3.0, 0.0)
            f2 = tn.sleep(f + 1.0, 0.0)
            m, idx = tn.raw.merge([f2, t2])
        with tn.device("cpu:1"):
            z = tn.sleep(tn.fill(tn.stack([idx + 1, 2]), 1.0) * tn.reduce_sum(m), 0.0)
    sess = _session(g, "auto")
    ref = tn.Session(g)
    feed = np.array([1.0, 2.0], np.float32)
    for taken in (True, False, True):
        np.testing.assert_allclose(sess.run(z, {x: feed, c: taken}), ref.run(z, {x: feed, c: taken}))
    plans = _plans(sess)
    assert len(plans) == 1 and plans[0].threaded and not plans[0].static_feeds
    sess.close()


def test_a_workers_retry_becomes_the_runs_and_the_run_is_made_again_with_larger_chunks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Law: a call that hands back a ``Retry`` on a worker (a driven loop's chunk that cannot run an
    iteration; here the first call of the run, by a stand-in) makes that ``Retry`` the run's: the
    worker's outputs are dead to whatever waits on them, nothing fails, and the run is made again
    with the larger chunks, giving the reference's values. Kills the worker's ``Retry`` dropped
    (``None``, ``and``: the fetch is then dead) and the error word it hands back read under another
    key (the waiting calls then fail)."""
    real = PlanRun.call
    first: list[int] = []

    def retry_once(self: PlanRun, seg: Any, env_in: dict[Any, Any], state: dict[str, Any]) -> Any:
        if not first:
            first.append(self.plan.capacity)
            return Retry(2 * self.plan.capacity)
        return real(self, seg, env_in, state)

    monkeypatch.setattr(PlanRun, "call", retry_once)
    g, x, z = _chain(sleep=True)
    sess = _session(g, "auto")
    np.testing.assert_allclose(sess.run(z, {x: np.array([1.0, 2.0], np.float32)}), [3.0, 5.0])
    stats = sess.last_result.stats if sess.last_result is not None else {}
    assert stats["stack_capacity_retries"] == 1 and stats["stack_capacity"] == 2 * first[0], stats
    assert _plans(sess)[-1].threaded
    sess.close()
