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

from typing import Any

import jax
import numpy as np
import pytest
import test_exports

import turnout as tn
from turnout.devices.plan_run import HOST_CALLBACK_OPS, WHO, DevicePlan

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
    assert all(s.dur_s >= 0.0 for s in tl.spans)
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
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")

        def outer(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                _, y2 = tn.while_loop(lambda j, y: j < 3, lambda j, y: (j + 1, y * x), [tn.constant(0), y])
            with tn.device("cpu:0"):
                return i + 1, y2 + 0.0

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < 2, outer, [tn.constant(0), tn.ones_like(x)])
        (dx,) = tn.gradients(y, [x])
    sess = tn.Session(g, backend="fast", devices=D2, stack_chunk=1, threads="always")
    np.testing.assert_allclose(sess.run([y, dx], {x: 1.01}), [1.01**6, 6 * 1.01**5], rtol=1e-12)
    stats = sess.last_result.stats if sess.last_result is not None else {}
    assert stats["stack_capacity_retries"] > 0 and stats["stack_capacity"] >= 3, stats
    plan = _plans(sess)[-1]
    assert plan.threaded and plan.stack_alloc
    names = {tn.devices.parse(d).name for d in D2}
    assert {d for d, _, _ in plan.stack_alloc.values()} <= names
    sess.close()
