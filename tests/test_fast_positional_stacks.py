"""Positional stacks: the fused stage checks a gradient stack's pops by position, not by a record.

A stack pushed once in every iteration of a root-frame loop (``fast.plan.positional_stacks``) holds,
when its pushed index is the loop's iteration number, every entry at the position its index names,
so a pop can compare its expected index with its position instead of reading a record of indices
that every push would have to write. Each push checks the premise at run time; a push away from its
position discards the attempt, which runs again at once with index records. These tests check three
cases: a gradient loop (positional), a hand-built loop that pushes under indices away from their
positions (the records come back, with the reference backend's results), and pops in the wrong
order (refused with the same ``KernelError`` by position as by record).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn

pytest.importorskip("jax")


def _rnn(batch: Any = 4) -> tuple[tn.Graph, list[tn.Tensor], tn.Tensor, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [batch, 3], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        w = tn.Variable(np.linspace(-1.0, 1.0, 9, dtype=np.float32).reshape(3, 3), name="w")

        def body(i: Any, h: Any, loss: Any) -> Any:
            h2 = tn.tanh(tn.matmul(h, w.read()) + x)
            return i + 1, h2, loss + tn.reduce_sum(h2[:, 0:2] * h2[:, 1:3])

        _, _, loss = tn.while_loop(lambda i, h, loss: i < n, body,
                                   [tn.constant(0), tn.zeros([4, 3], tn.float32), tn.constant(0.0)])
        grads = tn.gradients(loss, [x, w])
    return g, [loss, *grads], x, n


@pytest.mark.parametrize("batch", [4, None])
def test_a_gradient_loop_runs_its_stacks_by_position(batch: Any) -> None:
    """Every stack pushed once per iteration goes by position: those of static shapes (allocated
    before the call) and those whose shapes are known only when the fused stage is traced (a
    scalar's shape, saved for its gradient), which make no index record at their first push."""
    from turnout.fast.plan import positional_stacks

    g, fetch, x, n = _rnn(batch)
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    xv = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    for trips in (5, 1, 12, 0, 5):
        feed = {x: xv, n: trips}
        for a, b in zip(fast.run(fetch, feed), ref.run(fetch, feed), strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
        assert fast.last_result.stats["fused"]
    (plan,) = {id(h.plan): h.plan for h, _ in fast.backend.repeats.routes.values()}.values()
    assert plan.positional and plan.positional == positional_stacks(plan.program) >= set(plan.static)
    assert plan.index_bytes == {}  # no record to count


def _hand_built_stack(order: str, offset: Any = 10, dynamic: bool = False) -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """A hand-built stack: a loop pushes ``i`` under index ``[i + offset]`` (``order='offset'``: away
    from its position unless the offset is 0; ``offset`` may be a tensor) or ``[i]`` (``'forward'``),
    and a second loop pops as many values, expecting the pushed indices in reverse (``'offset'``) or
    ``[j]``, forward again: the wrong order for a stack. It folds them as ``acc * 3 + value``.
    ``dynamic``: the pushed value is ``i`` as a vector of one element whose size the graph does not
    know (a static stack is allocated before the call, such a stack at its first push)."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        one = tn.fill(tn.reshape(n * 0 + 1, [1]), tn.constant(0.0, tn.float64)) if dynamic else None
        if offset is None:
            offset = tn.placeholder(tn.int32, [], name="offset")
        s = g.create_node("StackNew", (), {"elem_dtype": "float64", "elem_shape": []}, name="stk").outputs[0]

        def push(i: Any, c: Any) -> Any:
            at = tn.reshape(i + offset if order == "offset" else i, [1])
            value = tn.cast(i, tn.float64) if one is None else tn.cast(i, tn.float64) + one
            p = g.create_node("StackPush", [s, at, value], name="psh").outputs[0]
            return i + 1, c + tn.reduce_sum(p) * 0

        _, pushed = tn.while_loop(lambda i, c: i < n, push, [tn.constant(0), tn.constant(0.0, tn.float64)])

        def pop(j: Any, acc: Any) -> Any:
            at = tn.reshape(n - 1 - j + offset if order == "offset" else j, [1])
            with g.control_dependencies([acc.node]):  # after the first loop: ``start`` waits for it
                v = g.create_node("StackPop", [s, at], {"dtype": "float64", "shape": [] if one is None else [None]},
                                  name="pop_it").outputs[0]
            return j + 1, acc * 3 + tn.reduce_sum(v)

        with g.control_dependencies([pushed.node]):
            start = tn.identity(tn.constant(0.0, tn.float64))
        _, out = tn.while_loop(lambda j, acc: j < n, pop, [tn.constant(0), start])
    return g, n, out


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_push_away_from_its_position_brings_the_records_back(dynamic: bool) -> None:
    g, n, out = _hand_built_stack("offset", dynamic=dynamic)
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    assert float(ref.run(out, {n: 4})) == 3 * (3 * (3 * 3 + 2) + 1) + 0  # popped 3, 2, 1, 0
    fused = []
    for trips in (4, 4, 6, 4):
        assert float(fast.run(out, {n: trips})) == float(ref.run(out, {n: trips}))
        fused.append(fast.last_result.stats["fused"])
    # the first attempt met an index away from its position: discarded, and run again at once with
    # the index records, as every later run is (one fused call each, one trace more in all)
    assert fused == [True, True, True, True]
    warm = [p for p in fast.backend._plans.values() if p.fused is not None and p.fused_warm]
    assert warm and all(not p.positional for p in warm)
    assert all(st.fn is None for p in warm for st in p.stages)  # the stages were never compiled


@pytest.mark.parametrize("dynamic", [False, True])
def test_pops_out_of_order_are_refused_by_position_as_by_record(dynamic: bool) -> None:
    """The fast backend's stacks are last-in first-out buffers: a pop must find the index it expects
    on top (the reference's stacks are maps from index to value, and return the values: a limit
    listed in docs/missing.rst). Checked by position, the refusal is the same ``KernelError``."""
    g, n, out = _hand_built_stack("forward", dynamic=dynamic)
    sess = tn.Session(g, backend="fast")
    assert float(sess.run(out, {n: 1})) == 0.0  # one entry: forward and reversed agree
    with pytest.raises(tn.KernelError, match=r'StackPop node "[^"]*pop_it".*another iteration index'):
        sess.run(out, {n: 3})
    warm = [p for p in sess.backend._plans.values() if p.fused is not None and p.fused_warm]
    assert warm and all(p.positional for p in warm)  # pushed at their positions: no record needed
    # (``dynamic``: the stacks' shapes are known only when traced; every plan, the refused run's too,
    # learnt them from a trace before it compiled, ``FusedAttempts._learn_stack_shapes``)
    assert all(p.static and not p.unlearnt_stacks() for p in warm)


def test_stacks_under_a_cond_or_in_a_nested_loop_keep_their_records_and_run_fused() -> None:
    """A push under a cond skips iterations, and an inner loop's push runs many times per outer
    iteration: neither stack's entries sit at their outer iteration's position, so both keep their
    index records in the fused stage, while the stack pushed directly in the body goes by position.
    Every run is one fused call (no attempt discarded for a push away from its position) and gives
    the reference's gradient."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")

        def inner(i: Any, y: Any) -> Any:
            _, z = tn.while_loop(lambda k, z: k < i % 3, lambda k, z: (k + 1, tn.tanh(z) * x), [tn.constant(0), y])
            return z

        def body(i: Any, y: Any) -> Any:
            y = tn.cond(tn.equal(i % 2, 0), lambda: tn.tanh(y * x), lambda: y + 0.5)
            return i + 1, inner(i, y) * x

        _, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), tn.constant(0.3, tn.float64)])
        (dx,) = tn.gradients(y, [x])
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    for trips in (5, 8, 2):
        feed = {x: 0.9, n: trips}
        np.testing.assert_allclose(fast.run([y, dx], feed), ref.run([y, dx], feed), rtol=1e-10)
        assert fast.last_result.stats["fused"]
    warm = [p for p in fast.backend._plans.values() if p.fused is not None and p.fused_warm]
    assert warm
    for p in warm:
        assert p.positional and p.positional < set(p.static)  # some by position, the others recorded
        assert all(st.fn is None for st in p.stages)  # never a discarded attempt: the stages never ran


def test_a_push_away_from_its_position_on_a_repeated_run() -> None:
    """Whether a push is at its position can change from run to run (here with a fed offset): a
    repeated run on its lane that meets it leaves it, and the general path runs the attempt again with
    records; the lane made before that (its executable without records) is not used again, and a new
    one is made."""
    g, n, out = _hand_built_stack("offset", offset=None)
    offset = g.tensor("offset:0")
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    for k, route in ((0, "general"), (0, "lane"), (7, "general"), (7, "lane"), (0, "lane")):
        feed = {n: 4, offset: k}
        assert float(fast.run(out, feed)) == float(ref.run(out, feed)) == 102.0
        assert fast.last_result.stats["fused"] and fast.last_result.stats["route"] == route
