"""Gradient stack pointers: saturating everywhere, running free in the fused stage (``stacks.push``).

The fused stage lets a pointer run past its capacity, because its loops stop at the first error and
it hands no pointer back: that is what lets XLA merge the pointers of stacks pushed in lockstep. These
tests pin both update rules and check that an attempt whose stacks overflow mid-loop still climbs the
capacity ladder to the reference's values.
"""

from __future__ import annotations

import numpy as np
import pytest

import turnout as tn

pytest.importorskip("jax")

from turnout.fast import stacks as stk  # noqa: E402


def _stack(capacity: int) -> stk.StackValue:
    return stk.StackValue(capacity, np.float32).materialize((2,), (1,))


@pytest.mark.parametrize("free", [False, True])
def test_a_push_past_the_capacity_fails_and_moves_the_pointer_only_when_free(free: bool) -> None:
    s = _stack(2)
    oks = []
    for i in range(3):
        s, ok = stk.push(s, np.array([i]), np.full(2, float(i)), free=free)
        oks.append(bool(ok))
    assert oks == [True, True, False]
    assert int(s.ptr) == (3 if free else 2)
    np.testing.assert_array_equal(np.asarray(s.buf)[0], [0.0, 0.0])


@pytest.mark.parametrize("free", [False, True])
def test_a_pop_of_an_empty_stack_fails_and_moves_the_pointer_only_when_free(free: bool) -> None:
    s, _ = stk.push(_stack(2), np.array([7]), np.full(2, 1.5))
    s, v, ok, match = stk.pop(s, np.array([7]), free=free)
    assert bool(ok) and bool(match) and float(np.asarray(v)[0]) == 1.5
    s, _, ok, _ = stk.pop(s, np.array([6]), free=free)
    assert not bool(ok)
    assert int(s.ptr) == (-1 if free else 0)


def test_a_fused_attempt_overflowing_mid_loop_climbs_to_the_reference_gradient() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        w = tn.placeholder(tn.float32, [], name="w")

        def body(i: tn.Tensor, a: tn.Tensor, b: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor, tn.Tensor]:
            return i + 1, tn.tanh(a * w + 0.1), tn.sigmoid(b * w) + a  # several values saved per iteration

        _, a, b = tn.while_loop(lambda i, a, b: i < n, body, [tn.constant(0), tn.constant(0.5), tn.constant(0.2)])
        (dw,) = tn.gradients(a + b, [w])
    fast = tn.Session(g, backend="fast")
    ref = tn.Session(g)
    for trips in (5, 200, 7):  # 200 overflows the first rung (128 entries) in the middle of the loop
        feed = {n: np.int32(trips), w: np.float32(0.9)}
        np.testing.assert_allclose(fast.run(dw, feed), ref.run(dw, feed), rtol=1e-4)
        assert fast.last_result.stats["fused"]
    assert fast.last_result.stats["stack_capacity"] == 200  # (the first rung that holds 200 entries)


def test_a_driven_loop_measures_only_the_stacks_its_nested_loops_use() -> None:
    """A driven loop's chunk measures per iteration the pushes and pops of the stacks a nested loop
    uses (their counts are known only at run time) and trusts the static count of the others
    (``Segment.measured``, ``stacks.chunk_loop``). The outer loop pushes ``h`` once per iteration; the
    inner loop, run ``i`` times in outer iteration ``i``, pushes ``y``. With a chunk of 4 the run swaps
    chunks on the staged path, and its values and gradient equal the reference's."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")

        def outer(i, y):
            h = tn.tanh(y * x)
            _, y2 = tn.while_loop(lambda j, y: j < i, lambda j, y: (j + 1, y * x), [tn.constant(0), y + h * 0.1])
            return i + 1, y2

        _, y = tn.while_loop(lambda i, y: i < 5, outer, [tn.constant(0), tn.ones_like(x)],
                             swap_memory=True)
        (dx,) = tn.gradients(y, [x])
    feed = {x: 1.05}
    sess = tn.Session(g, backend="fast", stack_chunk=4)
    got = sess.run([y, dx], feed)
    want = tn.Session(g).run([y, dx], feed)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    stats = sess.last_result.stats
    assert stats["fused"] is False and stats["stack_chunks_swapped"] > 0
    driven = [st for p in sess.backend._plans.values() for st in p.stages if st.driven is not None and st.push]
    assert driven, "the forward loop is a driven stage"
    for st in driven:
        nested = st.measured
        assert nested and nested < set(st.push)  # some stacks measured, not all


def _marks(p_a: object, p_b: object) -> tuple[object, object, object]:
    """The high-water marks of two stacks holding ``p_a`` and ``p_b`` entries on a stand-in emitter:
    the mark after five root items that leave both stacks as they were, after a pop of the first,
    and a second chain of marks started from 0 after that."""
    from types import SimpleNamespace

    from turnout.fast.emitter_core import EmitterCore

    em = SimpleNamespace(state={}, marks={})
    for k, p in (("a", p_a), ("b", p_b)):
        em.state[stk.state_key(k)] = stk.StackValue(4, np.float32, np.zeros((4,)), None, p)
    mark: object = np.int32(0)
    for _ in range(5):
        mark = EmitterCore.stack_mark(em, mark)  # type: ignore[arg-type]
    first = mark
    a = em.state[stk.state_key("a")]
    em.state[stk.state_key("a")] = a.replace(a.buf, a.idx, a.ptr - 1)
    after_pop = EmitterCore.stack_mark(em, mark)  # type: ignore[arg-type]
    other = EmitterCore.stack_mark(em, np.int32(0))  # type: ignore[arg-type]
    return first, after_pop, other


def test_a_stacks_pointer_is_folded_into_the_high_water_mark_once() -> None:
    """``Emitter.stack_mark``: the mark is the most entries any stack has held, and a pointer already
    folded into a mark adds no ``max`` to the trace again; a pointer that changed (a pop) is folded
    again, and another chain of marks (the state's, beside the fused trace's own) folds every pointer.
    Why it matters: an imported bidirectional GRU, folding every stack after every root item, traced
    about 20 000 ``max`` ops and compiled them, seconds of its first run."""
    import jax

    jaxpr = jax.make_jaxpr(_marks)(np.int32(3), np.int32(7))
    assert sum(e.primitive.name == "max" for e in jaxpr.eqns) == 2 + 1 + 2
    assert [int(m) for m in jax.jit(_marks)(np.int32(3), np.int32(7))] == [7, 7, 7]
    assert [int(m) for m in jax.jit(_marks)(np.int32(9), np.int32(2))] == [9, 9, 8]
