"""Tests for the two ``devices/`` mutants that no older test killed (``docs/checking.rst``): how the host
checks the stacks of a segment of a loop spanning devices when one of them has no buffer yet
(``swap.before:b5e3fdcb``), and what a loop run chunk by chunk does when its entry values are dead
(``region_driver.run:6027cf5c``). Each fails under its mutant and passes without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_mutants_s5 import CHUNK, D3, _plan, _run_checked

import turnout as tn

pytest.importorskip("jax")


# ---- devices/swap.py --------------------------------------------------------------------------------------
def _loop_with_a_branch_switched_off() -> dict[str, Any]:
    """A loop spanning devices, ``y <- tanh(1.3 h) + 0.1 y^2 + 0.3`` for ``n`` steps (the ``tanh`` on
    cpu:1, the rest on cpu:2, the loop's control on cpu:0), where ``h`` is a cond on cpu:1 whose predicate
    is a constant ``False``: the branch taken is ``y / 2``; the other runs an inner loop over a vector of
    fed length (``v y``, ``v`` of shape ``[None]``). Its gradient with respect to ``x`` (the start).

    The inner loop's pushes lie in the branch never taken, and their element shape is known only at run
    time, so their stack never gets a buffer (it is made at its first push). It is one of the stacks of
    the cpu:1 segment of the loop body, next to stacks of static shape that the segment pushes every
    iteration. Why the predicate is a constant: the compiled segment then traces the taken branch only;
    with a run-time predicate ``lax.cond`` gives the stack a buffer like the other branch's."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        v = tn.placeholder(tn.float64, [None], name="v")
        n = tn.placeholder(tn.int32, [], name="n")
        with tn.device("cpu:1"):
            off = tn.constant(False, name="off")

        def vector_branch(y: tn.Tensor) -> tn.Tensor:
            _, z = tn.while_loop(lambda j, z: j < 2, lambda j, z: (j + 1, tn.tanh(z) * 0.9),
                                 [tn.constant(0), v * y], swap_memory=True, name="inner")
            return tn.reduce_sum(z)

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                h = tn.cond(off, lambda: vector_branch(y), lambda: y * 0.5)
                h2 = tn.tanh(h * 1.3)
            with tn.device("cpu:2"):
                y2 = h2 + y * y * 0.1 + 0.3
            return i + 1, y2

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), x], name="fwd", swap_memory=True,
                                 parallel_iterations=10)
        (dx,) = tn.gradients(y, [x])
    return {"g": g, "fetch": [y, dx],
            "feeds": lambda steps: {x: np.float64(0.3), v: np.linspace(-1.0, 1.0, 4), n: np.int32(steps)}}


def test_a_stack_without_a_buffer_does_not_hide_the_segments_other_stacks() -> None:
    """Kills ``swap.before:b5e3fdcb`` (the host stops checking a segment's stacks at the first one without
    a buffer). The law: before each call of a segment, the host checks every stack the call may push,
    whatever the ones before it in the segment's list. A stack that has no buffer (never pushed: its pushes
    lie in a branch that is not taken) is skipped, and the stacks after it are still swapped out as they
    fill, so a run of 20 steps in chunks of 8 needs no second attempt with a larger chunk and swaps chunks
    to host memory. Under the mutant the stacks after the bufferless one overflow their chunk, and the run
    is repeated with a larger one (and nothing is swapped)."""
    m = _loop_with_a_branch_switched_off()
    sess = tn.Session(m["g"], backend="fast", devices=D3, stack_chunk=CHUNK)
    stats = _run_checked(sess, m["g"], m["fetch"], m["feeds"](20))
    assert stats["tier"] == "host-driven"
    assert stats["stack_capacity_retries"] == 0, stats
    assert stats["stack_chunks_swapped"] > 0, stats
    # what the test is about: a segment whose pushes list a stack without a buffer before run time (not
    # allocated: its element shape is not static) ahead of a stack it pushes once per call
    plan = _plan(sess)
    orders = [list(seg.traffic.push.items()) for seg in plan.schedule.segments
              if seg.traffic]
    assert any(
        any(plan.stack_alloc[s][2] is None and any(plan.stack_alloc[t][2] is not None and c == 1
                                                     for t, c in order[i + 1:])
            for i, (s, _) in enumerate(order))
        for order in orders), orders


# ---- devices/region_driver.py -----------------------------------------------------------------------------
def test_a_driven_loop_whose_entry_values_are_dead_does_not_run() -> None:
    """Kills ``region_driver.run:6027cf5c`` (the exit side of a loop that is never entered called without
    its iteration limit). The law ([E-Enter] and [E-Exit] on dead tokens): a loop whose entry values are
    dead runs no iteration and its exits are dead; the driver hands back the device's state with its
    stacks as they were (nothing pushed, no chunk moved) and its error word clear.

    No session reaches this path today: a loop whose inputs can be dead is placed, by its guard, inside
    the cond that makes them so, and the host skips a branch it does not take. So the driven segment of
    ``test_devices_swap.loop_on_one_device`` is called directly, as the one runner calls it
    (``DrivenLoop.run``, ``fast.runner``), with every value it reads dead. A live run on the same session
    before and after gives the reference's values."""
    import jax
    from test_devices_swap import loop_on_one_device

    from turnout.fast import stacks as stk
    from turnout.fast.device_stacks import DeviceStacks
    from turnout.fast.driven import DrivenLoop
    from turnout.fast.values import DEAD

    m = loop_on_one_device(True)
    g, x, n = m["g"], m["x"], m["n"]
    feeds = {x: np.float64(0.4), n: np.int32(20)}
    sess = tn.Session(g, backend="fast", devices=D3, stack_chunk=CHUNK)
    _run_checked(sess, g, m["fetch"], feeds)
    plan = _plan(sess)
    forward = [seg for seg in plan.schedule.segments
               if seg.driven and not any(nd.op == "StackPop" for nd in seg.items[0].nodes)]
    assert len(forward) == 1
    seg = forward[0]
    drv = seg.fn
    assert isinstance(drv, DrivenLoop)
    dev = seg.device
    jd = sess.backend.jax_devices[dev]
    with jax.enable_x64(True):  # as the executor runs (the loop computes in float64)
        state: dict[str, Any] = {"err": jax.device_put(np.int32(0), jd)}
        for k, (d, dtype, shapes) in plan.stack_alloc.items():
            if d == dev and shapes is not None:
                with jax.default_device(jd):
                    state[k] = stk.StackValue(plan.capacity, dtype).materialize(*shapes)
        pushed = set(drv.push)
        assert pushed and pushed <= set(state)  # the loop's stacks have buffers on its device
        stacks = DeviceStacks(plan.stack_info, sess.backend.devices, plan.capacity, None, who="test",
                              label=lambda d: tn.devices.parse(d).short)
        stacks.observe(dev, state)

        got = drv.run({k: DEAD for k in seg.reads}, state, np.int32(10_000), stacks.stores[dev], "test")
        assert isinstance(got, tuple)
        out, _, new = got

    exits = {(x_.id, 0) for x_ in seg.items[0].exits}
    assert exits & set(seg.writes)  # the loop's result leaves the segment
    for k in exits & set(seg.writes):
        assert out[k] is DEAD, (k, out[k])
    assert int(new["err"]) == 0
    for s in pushed:
        assert isinstance(new[s], stk.StackValue) and int(new[s].ptr) == 0, s
    assert stacks.moved() == 0
    # the session itself is unaffected: the live run still gives the reference's values
    _run_checked(sess, g, m["fetch"], feeds)
