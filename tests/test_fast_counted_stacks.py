"""Counted stacks: the fused trace proves the pushes and pops of gradient stacks that follow loop counters.

A stack pushed once per body of a chain of counted loops, under their counters
(``fast.counted_stacks``), needs no check of its pushes and, once the chain has ended, none of its
pops: each pop reads the entry at its index's position, and the counters' ranges prove the index.
These tests hold such programs to the reference interpreter's values and errors, pin that their
fused trace writes no stack check (the error codes the plan registered), and check the parts on
their own: the structural search, the counters' constant exit values, the range of a ``Pack``, and
the position arithmetic.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pytest
from example_counts import examples
from hypothesis import given, settings
from hypothesis import strategies as hst

import turnout as tn

jax = pytest.importorskip("jax")
# (the repository's root, for ``benchmarks``: one tiny training step is both a benchmark and a test)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from turnout.fast import counted_stacks as cs  # noqa: E402
from turnout.fast import emit, facts  # noqa: E402
from turnout.fast.functionalize import functionalize  # noqa: E402
from turnout.fast.ranges import Ranges, propagate  # noqa: E402

STACK_KINDS = {"overflow", "underflow", "unrecorded"}


def _scan_nest(depth: int, n: int) -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    """``tn.gradients`` of a Variable through ``tn.scan`` nested ``depth`` deep over a fed vector
    of ``n`` elements: the loss, its gradient, the feed and the graph."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [n], name="x")
        w = tn.Variable(np.float32(0.5), name="w")

        def level(d: int) -> Any:
            if d == 0:
                return lambda c, e: tn.tanh(c * w.read() + e)
            return lambda c, e: c + tn.reduce_sum(tn.scan(level(d - 1), x, initializer=e)) * 0.1

        loss = tn.reduce_sum(tn.scan(level(depth - 1), x, initializer=tn.constant(0.0)))
        (gw,) = tn.gradients(loss, [w])
    return g, loss, gw, x


def _plan(sess: tn.Session) -> Any:
    (plan,) = {id(h.plan): h.plan for h, _ in sess.backend.repeats.routes.values()}.values()
    return plan


def _stack_codes(plan: Any) -> list[tuple[str, str]]:
    """The error codes a plan's traces registered for stack checks."""
    return [(k, m) for k, m in plan.codes.entries if k in STACK_KINDS or "StackPop" in m]


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_nest_of_scans_differentiates_with_no_stack_check(depth: int) -> None:
    g, loss, gw, x = _scan_nest(depth, 3)
    xv = np.array([0.5, 1.0, 1.5], np.float32)
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    for a, b in zip(fast.run([loss, gw], {x: xv}), ref.run([loss, gw], {x: xv}), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert fast.last_result.stats["fused"]
    plan = _plan(fast)
    assert sum(len(v) for v in plan.counted.values()) >= depth  # (one stack at least per level)
    assert _stack_codes(plan) == []
    # nor any TensorArray index check: the backward loops read at popped counters, whose range is known
    assert not [m for _, m in plan.codes.entries if "index out of range" in m]


def test_a_nest_too_large_for_the_first_rung_is_counted_on_the_next() -> None:
    """12 x 12 entries do not fit the first rung's 128, which its fused trace finds out before
    compiling (``RungTooSmall``): the rung is passed over for good, and the first rung that holds
    144 entries holds the stack, counted (256 entries on a ladder of ratio 2; the rungs above are not
    even planned)."""
    g, loss, gw, x = _scan_nest(2, 12)
    xv = np.linspace(-1.0, 1.0, 12).astype(np.float32)
    fast, ref = tn.Session(g, backend="fast", stack_rung_ratio=2), tn.Session(g, backend="reference")
    for a, b in zip(fast.run([loss, gw], {x: xv}), ref.run([loss, gw], {x: xv}), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    stats = fast.last_result.stats
    assert stats["fused"] and stats["stack_capacity"] == 256
    rung = _plan(fast)
    assert rung.capacity == 256 and _stack_codes(rung) == []
    (top,) = {id(h.top): h.top for h, _ in fast.backend.repeats.routes.values()}.values()
    assert top.ladder == [128, 256, 512, 1024] and sorted(top.rungs) == [128, 256] and top.rungs[256] is rung
    assert top.rungs[128].fused is None  # passed over, not compiled
    count = fast.backend.compile_count
    fast.run([loss, gw], {x: xv})
    assert fast.backend.compile_count == count


def test_a_counted_stack_larger_than_every_rung_runs_on_the_staged_path() -> None:
    g, loss, gw, x = _scan_nest(2, 12)
    xv = np.linspace(-1.0, 1.0, 12).astype(np.float32)
    fast, ref = tn.Session(g, backend="fast", stack_chunk=64), tn.Session(g, backend="reference")
    for _ in range(2):
        for a, b in zip(fast.run([loss, gw], {x: xv}), ref.run([loss, gw], {x: xv}), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert not fast.last_result.stats["fused"]


def _while_grad(pred: str) -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    """The gradient of ``v`` through a loop that multiplies it by 1.5: ``pred='counted'`` runs it
    ``n`` times (``i < n``); ``'data'`` while ``v < 10`` (not counted)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.constant(4)
        if pred == "counted":
            cond = lambda i, v: i < n  # noqa: E731
        else:
            cond = lambda i, v: v < 10.0  # noqa: E731
        _, y = tn.while_loop(cond, lambda i, v: (i + 1, v * v * 0.5 + 1.0), [tn.constant(0), x])
        (gx,) = tn.gradients(y, [x])
    return g, y, gx, x


@pytest.mark.parametrize("pred", ["counted", "data"])
def test_only_a_counted_loop_leaves_its_stacks_unchecked(pred: str) -> None:
    g, y, gx, x = _while_grad(pred)
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    for a, b in zip(fast.run([y, gx], {x: 1.5}), ref.run([y, gx], {x: 1.5}), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    codes = _stack_codes(_plan(fast))
    assert (codes == []) == (pred == "counted")


@pytest.mark.parametrize("mi", [1, 2, 3])
def test_a_budget_spent_in_a_counted_chain_is_the_interpreters_error(mi: int) -> None:
    """Three bodies per loop: a budget of 1 or 2 is spent (in the forward nest, whose check is made
    before it), one of 3 is not."""
    g, loss, gw, x = _scan_nest(2, 3)
    xv = np.array([0.5, 1.0, 1.5], np.float32)
    outcomes: list[Any] = []
    for backend in ("fast", "reference"):
        try:
            outcomes.append(float(tn.Session(g, backend=backend).run(gw, {x: xv}, max_iterations=mi)))
        except tn.TurnoutError as e:
            outcomes.append(type(e).__name__)
    if mi < 3:
        assert outcomes == ["NonTerminationError"] * 2
    else:
        np.testing.assert_allclose(outcomes[0], outcomes[1], rtol=1e-5)


def test_a_training_loop_of_fold_steps_matches_the_reference() -> None:
    """The tiny training step of ``benchmarks/run_overhead.py`` (a gradient through a fold, SGD),
    repeated: each step's loss and the Variable after it, on both backends."""
    from benchmarks.run_overhead import rnn_training_graph

    g, x, loss, step, xs, _ = rnn_training_graph()
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    for _ in range(3):
        a, _ = fast.run([loss, step], {x: xs})
        b, _ = ref.run([loss, step], {x: xs})
        np.testing.assert_allclose(a, b, rtol=1e-5)
        np.testing.assert_allclose(fast.variables["w"], ref.variables["w"], rtol=1e-5, atol=1e-7)
    assert _stack_codes(_plan(fast)) == []


@settings(max_examples=examples(100))
@given(hst.data())
def test_generated_program_gradients_with_counted_stacks_agree(data: hst.DataObject) -> None:
    """The generated gradient programs of the property tests (``tests/strategies.py``) on the fast
    backend with its default chunk, where a loop with a constant trip count has counted stacks, give
    the reference backend's values or its error. (``test_fast_gradients`` runs them with a chunk of 2,
    where most counted stacks outgrow the one rung and run staged.)"""
    import strategies

    case = data.draw(strategies.gradient_cases())
    outcomes: list[Any] = []
    for backend in ("reference", "fast"):
        try:
            outcomes.append(tn.Session(case.graph, backend=backend).run(case.grads, feed_dict=case.feeds))
        except tn.TurnoutError as e:
            outcomes.append(type(e).__name__)
    ref, got = outcomes
    if isinstance(ref, str) or isinstance(got, str):
        assert got == ref
    else:
        for a, b in zip(got, ref, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


# ---- the parts ------------------------------------------------------------------------------------
def test_the_search_finds_each_gradient_stack_with_its_chain() -> None:
    g, _, gw, x = _scan_nest(2, 3)
    program = functionalize(g, [gw], [x])
    found = cs.counted_stacks(program, emit.stack_key_of)
    (head,) = found.values()
    chains = sorted(len(c.loops) for c in head)
    assert chains[0] == 1 and chains[-1] == 2  # stacks of the outer body, and of the inner one
    for c in head:
        assert c.push.op == "StackPush" and c.push.inputs[1].shape == (len(c.loops),)


def test_the_search_passes_over_a_stack_pushed_under_other_indices() -> None:
    """A hand-built stack pushed under ``i + 1`` (not the counter) is not counted."""
    g = tn.Graph()
    with g.as_default():
        s = g.create_node("StackNew", (), {"elem_dtype": "int32", "elem_shape": []}, name="s")

        def body(i: Any) -> Any:
            p = g.create_node("StackPush", [s.outputs[0], tn.reshape(i + 1, [1]), i], name="push")
            with tn.control_dependencies([p]):
                return i + 1

        (out,) = tn.while_loop(lambda i: i < 3, body, [tn.constant(0)])
    program = functionalize(g, [out], [])
    assert cs.counted_stacks(program, emit.stack_key_of) == {}


@pytest.mark.parametrize("inside", [False, True])
def test_the_search_passes_over_a_stack_popped_inside_its_chain(inside: bool) -> None:
    """A hand-built stack pushed under its loop's counter is counted when it is popped after the
    loop, and not when a pop sits in the loop itself (the stack is not full there)."""
    g = tn.Graph()
    with g.as_default():
        s = g.create_node("StackNew", (), {"elem_dtype": "int32", "elem_shape": []}, name="s")

        def pop(i: Any) -> Any:
            return g.create_node("StackPop", [s.outputs[0], tn.stack([i])], {"dtype": "int32", "shape": []},
                                 name="pop").outputs[0]

        def body(i: Any, acc: Any) -> Any:
            p = g.create_node("StackPush", [s.outputs[0], tn.stack([i]), i * 2], name="push")
            with tn.control_dependencies([p]):
                got = pop(i) if inside else tn.identity(acc)
            return i + 1, acc + got

        _, acc = tn.while_loop(lambda i, acc: i < 3, body, [tn.constant(0), tn.constant(0)])
        out = acc if inside else acc + pop(tn.constant(1))
    program = functionalize(g, [out], [])
    found = cs.counted_stacks(program, emit.stack_key_of)
    assert (found == {}) == inside


@pytest.mark.parametrize("k", [0, 1, 2, 3, -1])
def test_a_pop_at_a_fed_index_checks_it(k: int) -> None:
    """A counted stack popped under a fed index, which no range proves: in range, the value pushed
    under it; out of range, the interpreters' ``KernelError`` (``test_error_parity`` has the same
    mistake on every backend)."""
    from test_error_parity import pop_of_an_index_never_pushed

    g, out, feed = pop_of_an_index_never_pushed()
    (kt,) = feed
    fast = tn.Session(g, backend="fast")
    assert int(fast.run(out, {kt: 1})) == 5
    assert _plan(fast).counted
    if 0 <= k < 3:
        assert int(fast.run(out, {kt: k})) == int(tn.Session(g, backend="reference").run(out, {kt: k})) == 2 * k + 3
    else:
        with pytest.raises(tn.KernelError, match="pop"):
            fast.run(out, {kt: k})


@pytest.mark.parametrize("fold", ["foldl", "foldr", "scan"])
@pytest.mark.parametrize("init", [True, False], ids=["initializer", "from an element"])
def test_a_loop_saves_its_counter_without_a_buffer(fold: str, init: bool) -> None:
    """A scan's or a fold's gradient saves the counter it read its element at (to accumulate the element's
    gradient there). That stack's entry under an index is the counter's value, ``index + start``: it
    is found (``CountedStack.counter``), pushed into nothing and popped from the index, and the
    gradient is the reference backend's (a wrong start would accumulate at the wrong slots)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        w = tn.Variable(np.float32(0.7), name="w")
        f = getattr(tn, fold)

        def inner(c: Any, e: Any) -> Any:
            return tn.tanh(c * w.read() + e)

        def outer(c: Any, e: Any) -> Any:
            got = f(inner, x, initializer=e if init else None)
            return c + tn.reduce_sum(got) * 0.5

        y = tn.reduce_sum(f(outer, x, initializer=tn.constant(0.1) if init else None))
        gw = tn.gradients(y, [w, x])  # (the gradient of x accumulates at the saved counters)
    xv = np.array([0.3, -0.2, 0.5, 0.1], np.float32)
    fast = tn.Session(g, backend="fast")
    for a, b in zip(fast.run(gw, {x: xv}), tn.Session(g).run(gw, {x: xv}), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    found = [c.counter for cs_ in _plan(fast).counted.values() for c in cs_ if c.counter is not None]
    assert bool(found) == (fold != "foldr")  # (a foldr reads at n - 1 - i: not a counter)
    assert _stack_codes(_plan(fast)) == []
    for v in (np.array([1.0, 2.0, -1.0, 0.0], np.float32), np.zeros(4, np.float32)):  # (the lane, too)
        for a, b in zip(fast.run(gw, {x: v}), tn.Session(g).run(gw, {x: v}), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_exit_counts_end_each_counter_its_trip_count_past_its_start() -> None:
    assert emit.exit_counts({0: 0, 2: 1}, (0, 0, 4)) == {0: 5, 2: 6}  # 5 bodies
    assert emit.exit_counts({0: 7}, (0, 7, 4)) == {0: 7}  # no body: a counter past its bound stays


@pytest.mark.parametrize(("start", "bound"), [(0, 4), (7, 4), (2, 2)])
def test_a_counted_loops_counter_after_it_is_the_interpreters(start: int, bound: int) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        i, v = tn.while_loop(lambda i, v: i < bound, lambda i, v: (i + 1, v * 2.0), [tn.constant(start), x])
        out = [i, v, i * 3]
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    assert [np.asarray(a).item() for a in fast.run(out, {x: 1.0})] == \
        [np.asarray(b).item() for b in ref.run(out, {x: 1.0})]


def test_a_shape_from_a_counted_loops_counter_compiles() -> None:
    """The counter of a loop ``i < 3`` ends as the constant 3 (``emit.exit_counts``), so a ``fill``
    of that length has a static shape: compiled (``fallback=False``), with the interpreter's value;
    and with a budget below the bound, the interpreter's error, not a fill of the wrong length."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        i, v = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 2.0), [tn.constant(0), x])
        out = tn.fill(tn.reshape(i, [1]), v)
    fast = tn.Session(g, backend="fast", fallback=False)
    np.testing.assert_array_equal(fast.run(out, {x: 1.5}), tn.Session(g).run(out, {x: 1.5}))
    assert fast.last_result.stats["executor"] == "compiled"
    for backend in ("fast", "reference"):
        with pytest.raises(tn.NonTerminationError):
            tn.Session(g, backend=backend).run(out, {x: 1.5}, max_iterations=2)


@pytest.mark.parametrize("n", [0, 3])
def test_a_loop_bounded_by_maximum_iterations_alone_is_counted(n: int) -> None:
    """``while_loop(lambda *_: True, ..., maximum_iterations=n)``: its header is ``i < n and True``,
    a counted loop, whose bound check is made before it; a budget below ``n`` is the
    interpreter's error."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        _, v = tn.while_loop(lambda i, v: True, lambda i, v: (i + 1, v + 1.0), [tn.constant(0), x],
                             maximum_iterations=n)
    program = functionalize(g, [v], [x])
    (loop,) = [it for it in program.items if isinstance(it, emit.WhileRegion)]
    assert facts.counted_bound(loop) is not None
    for mi in (5, 2):
        outcomes = []
        for backend in ("fast", "reference"):
            try:
                outcomes.append(float(tn.Session(g, backend=backend).run(v, {x: 1.0}, max_iterations=mi)))
            except tn.TurnoutError as e:
                outcomes.append(type(e).__name__)
        assert outcomes[0] == outcomes[1]


def test_a_pack_of_ranged_scalars_records_each_elements_range() -> None:
    table = Ranges()
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int32, [], name="a")
        b = tn.placeholder(tn.int32, [], name="b")
        packed = tn.stack([a, b])

    def run(x: Any, y: Any) -> Any:
        table.add(x, 0, 4)
        table.add(y, 2, 2)
        out = jax.numpy.stack([x, y])
        propagate(table, packed.node, [x, y], [out])
        assert table.each(out) == [(0, 4), (2, 2)]
        assert table.get(out) is None  # (not a scalar)
        return out

    jax.make_jaxpr(run)(np.int32(1), np.int32(2))
    assert table.each(np.array([3, 1], np.int32)) == [(3, 3), (1, 1)]


def test_positions_are_row_major_and_ranges_are_proved_per_element() -> None:
    assert int(cs.position(np.array([2], np.int32), (5,))) == 2
    assert int(cs.position(np.array([1, 2], np.int32), (3, 4))) == 6
    assert int(cs.position(np.array([1, 0, 3], np.int32), (2, 3, 4))) == 15
    assert bool(cs.in_range(np.array([1, 3], np.int32), (3, 4)))
    assert not bool(cs.in_range(np.array([1, 4], np.int32), (3, 4)))
    assert not bool(cs.in_range(np.array([-1, 0], np.int32), (3, 4)))
    assert cs.proved([(0, 2), (0, 3)], (3, 4))
    assert not cs.proved([(0, 2), (0, 4)], (3, 4))
    assert not cs.proved([(0, 2)], (3, 4)) and not cs.proved(None, (3,))
    assert int(cs.value_of_counter(np.array([1, 2], np.int32), 1, 0)) == 2
    assert int(cs.value_of_counter(np.array([1, 2], np.int32), 0, 1)) == 2
    buf = np.arange(12, dtype=np.float32)
    assert float(cs.read(buf, np.array([2, 3], np.int32), (3, 4))) == 11.0
    assert float(cs.read(buf, np.array([1, 1], np.int32), (3, 4))) == 5.0
