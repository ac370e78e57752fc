"""Small gradient stacks are made inside the fused call (``fast.plan.inside_stacks``).

A static stack whose buffer at the plan's capacity is at most ``FastOptions.inside_stack_bytes`` (by
default 32 KiB on the CPU and none elsewhere; these tests give the platform they run on the CPU's
threshold, so that on a GPU the mechanism is still checked) is neither passed to the fused stage nor kept
between runs: the call makes it, and it is gone when the call returns.
These tests hold that such a run gives the reference values on every route (the fused attempt at each
rung, the staged path after an overflow, the lane of a repeated run), that nothing of it is kept, that
the memory report and the device memory cap still count it, and that a larger stack is still kept.
"""

from __future__ import annotations

import graphs
import jax
import numpy as np
import pytest

import turnout as tn
from turnout.fast import plan as fast_plan
from turnout.fast import stacks as stk

#: the CPU's threshold (``turnout.fast_options.INSIDE_STACK_BYTES``), on whatever platform runs the tests
INSIDE = 32 * 1024


def _plans(sess: tn.Session) -> list[fast_plan.Plan]:
    return [p for p in sess.backend._plans.values() if p.fused is not None and p.fused_warm]


def test_a_small_stack_is_made_inside_the_call_and_not_kept() -> None:
    p = graphs.power_loop()
    fast = tn.Session(p.g, backend="fast", inside_stack_bytes=INSIDE, stack_chunk=256)
    ref = tn.Session(p.g, backend="reference")
    for trips in (5, 0, 200, 5, 700, 5, 5):  # rung 128, rung 256, then the staged path (700 > 256)
        feed = {p.x: 1.001, p.n: trips}
        np.testing.assert_allclose(fast.run([p.y, p.dx], feed), ref.run([p.y, p.dx], feed), rtol=1e-12)
        assert fast.backend.held_bytes() == 0  # no stack kept (and no Variable in this graph)
    for plan in _plans(fast):
        assert plan.kept == {} and set(plan.inside) == set(plan.static) != set()
    assert fast.last_result.stats["fused"] is True


def test_the_memory_report_counts_a_stack_made_inside() -> None:
    p = graphs.power_loop()
    fast = tn.Session(p.g, backend="fast", inside_stack_bytes=INSIDE)
    fast.run([p.y, p.dx], {p.x: 1.5, p.n: 10})
    assert fast.last_result.stats["fused"] is True
    (row,) = fast.backend.memory_records()
    # one float64 value per entry at the lower rung (128 entries), and the positional stack's record
    # is not made at all (``plan.positional_stacks``)
    assert row["stacks"] == 1 and row["device_bytes"] == 128 * 8 and row["peak_device_bytes"] == 128 * 8
    assert row["device"] == stk.device_label(jax.devices()[0]) != "?"


def test_the_device_memory_cap_counts_a_stack_made_inside() -> None:
    p = graphs.power_loop()
    fast = tn.Session(p.g, backend="fast", inside_stack_bytes=INSIDE, device_memory_limit=100)
    with pytest.raises(tn.ResourceExhaustedError, match="device_memory_limit"):
        fast.run([p.y, p.dx], {p.x: 1.5, p.n: 10})


def test_a_repeated_small_training_step_keeps_nothing_and_trains_as_the_reference() -> None:
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(3, 4, 8)).astype(np.float32)
    sessions = []
    for backend in ("fast", "reference"):
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.float32, [3, 4, 8], name="x")
            w = tn.Variable(np.full((8, 8), 0.05, np.float32), name="w")
            h = tn.foldl(lambda h, e, w=w: tn.tanh(tn.matmul(h, w.read()) + e), x, initializer=tn.zeros([4, 8]))
            loss = tn.reduce_sum(h * h)
            step = tn.train.SGD(0.01).minimize(loss)
        opts = {"inside_stack_bytes": INSIDE} if backend == "fast" else {}
        sessions.append((tn.Session(g, backend=backend, **opts), loss, step, x))
    (fast, fl, fs, fx), (ref, rl, rs, rx) = sessions
    for _ in range(6):  # the later runs take the lane
        np.testing.assert_allclose(fast.run([fl, fs], {fx: xs})[0], ref.run([rl, rs], {rx: xs})[0], rtol=2e-5)
    assert fast.last_result.stats.get("route") == "lane"
    assert fast.backend.held_bytes() == 8 * 8 * 4  # the Variable's device copy alone: no stack kept


def test_a_stack_above_the_threshold_is_passed_in_and_kept() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [16, 16], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tn.tanh(y) * x), [tn.constant(0), x])
        (dx,) = tn.gradients(tn.reduce_sum(y), [x])
    fast, ref = tn.Session(g, backend="fast", inside_stack_bytes=INSIDE), tn.Session(g, backend="reference")
    xv = np.random.default_rng(2).normal(size=(16, 16)).astype(np.float32)
    for trips in (3, 7):
        np.testing.assert_allclose(fast.run(dx, {x: xv, n: trips}), ref.run(dx, {x: xv, n: trips}), rtol=1e-5)
    (plan,) = _plans(fast)
    # a 16 x 16 float32 value per entry: 128 KiB at the lower rung, above INSIDE
    assert plan.kept and not plan.inside
    assert fast.backend.held_bytes() >= 128 * 16 * 16 * 4


def test_inside_stacks_split_by_size() -> None:
    f32 = np.dtype(np.float32)
    static = {"stack:1": (f32, ((4, 8), ())), "stack:2": (f32, ((16, 16), ()))}
    assert set(fast_plan.inside_stacks(static, 128, INSIDE)) == {"stack:1"}  # 16 KiB and 128 KiB
    assert set(fast_plan.inside_stacks(static, 8, INSIDE)) == {"stack:1", "stack:2"}  # 1 KiB and 8 KiB
    assert fast_plan.stack_bytes(128, f32, ((4, 8), (1,))) == 128 * (4 * 8 * 4 + 4)
    assert fast_plan.inside_stacks(static, 8, 0) == {}


def test_the_threshold_is_the_platform_s_unless_the_options_give_one() -> None:
    assert tn.FastOptions().inside_limit("cpu") == INSIDE
    assert tn.FastOptions().inside_limit("some other platform") == 0  # none where the platform has none
    assert tn.FastOptions(inside_stack_bytes=2**30).inside_limit("some other platform") == 2**30
    assert tn.FastOptions(inside_stack_bytes=0).inside_limit("cpu") == 0
    with pytest.raises(tn.ArgumentError, match="FastOptions.inside_stack_bytes"):
        tn.FastOptions(inside_stack_bytes=-1)
