"""Held reads (``fast/held.py``): laws its full mutant set found unchecked (``tools/mutation.py
--module fast/held.py --all``, see docs/checking.rst).

Each test states which stacks the fast backend holds for a graph and compares the values with the
reference interpreter's (which keeps one entry per push, as the graph says), with ``fallback=False``
so that a program the fast backend refuses fails the test instead of passing on the interpreter.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.errors import ExecutionError
from turnout.fast.held import variable_of

pytest.importorskip("jax")

X = np.random.default_rng(1).normal(size=(3, 3)).astype(np.float32)


def _held(sess: tn.Session) -> set[str]:
    """The Variables whose stacks the fast session's plans hold."""
    return {h.var_name for plan in sess.backend._plans.values() for h in plan.held.values()}


def _agree(g: tn.Graph, fetches: list[tn.Tensor], feeds: dict[tn.Tensor, Any]) -> tn.Session:
    """Run ``fetches`` on the reference interpreter and on the fast backend (no fallback): the same
    values; the fast session."""
    want = tn.Session(g).run(fetches, feeds)
    sess = tn.Session(g, backend="fast", options=tn.FastOptions(fallback=False))
    got = sess.run(fetches, feeds)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_allclose(b, a, rtol=3e-5, atol=1e-6)
    return sess


def test_a_read_through_an_identity_of_the_handle_is_held() -> None:
    """A handle passes through ``Identity`` nodes unchanged: a read of ``identity(w.handle)`` is a
    read of ``w``, and a loop that reads it so and never assigns ``w`` holds its gradient stack."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.eye(3, dtype=np.float32) * 0.6, name="w")
        x = tn.placeholder(tn.float32, [3, 3], name="x")
        handle = tn.identity(tn.identity(w.handle))

        def body(i: Any, h: Any) -> Any:
            wr = g.create_node("ReadVariable", [handle], w._attrs(), name="w_read").outputs[0]
            return i + 1, tn.tanh(tn.matmul(h, wr))

        _, h = tn.while_loop(lambda i, h: i < 4, body, [tn.constant(0), x])
        (dx,) = tn.gradients(tn.reduce_sum(h * h), [x])
    assert variable_of(handle) == "w"
    sess = _agree(g, [h, dx], {x: X})
    assert _held(sess) == {"w"}


def _pushed_and_popped(route: str) -> tuple[tn.Graph, list[tn.Tensor], dict[tn.Tensor, Any]]:
    """A hand-built stack pushed ``w``'s read every iteration of a loop and popped back, every entry,
    by a second loop after it; the handle reaches the pushing loop by ``route``: straight, through
    an ``Identity``, through a ``Switch`` and a ``Merge`` (a fed predicate chooses either output of
    one handle), or as a loop variable of the pushing loop (through its ``Merge``, ``Switch``,
    ``Identity``, ``NextIteration`` and ``Exit``), the popping loop taking what the loop gave back."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.float32(2.0), name="w")
        n = tn.placeholder(tn.int32, [], name="n")
        p = tn.placeholder(tn.bool, [], name="p")
        stack = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []}, name="stk").outputs[0]
        if route == "identity":
            stack = tn.identity(stack)
        elif route == "switch_merge":
            stack, _ = tn.raw.merge(list(tn.raw.switch(stack, p)))

        def push(handle: Any, i: Any) -> Any:
            return g.create_node("StackPush", [handle, tn.reshape(i, [1]), w.read()], name="push").outputs[0]

        if route == "loop_variable":
            _, s, stack = tn.while_loop(lambda i, s, hd: i < n,
                                        lambda i, s, hd: (i + 1, s + push(hd, i) * 0.0, hd),
                                        [tn.constant(0), tn.constant(0.0), stack])
        else:
            _, s = tn.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + push(stack, i) * 0.0),
                                 [tn.constant(0), tn.constant(0.0)])
        with tn.control_dependencies([s]):
            last = n - 1

        def pop_body(j: Any, total: Any) -> Any:
            popped = g.create_node("StackPop", [stack, tn.reshape(last - j, [1])], {"dtype": "float32"},
                                   name="pop").outputs[0]
            return j + 1, total + tn.reshape(popped, [])

        _, total = tn.while_loop(lambda j, t: j < n, pop_body, [tn.constant(0), tn.constant(0.0)])
    return g, [s, total], {n: np.int32(5), p: True}


@pytest.mark.parametrize("route", ["straight", "identity", "switch_merge", "loop_variable"])
def test_a_stack_handle_passed_through_control_flow_nodes_is_still_held(route: str) -> None:
    """The nodes a stack handle passes through unchanged (``Enter``, ``Switch``, ``Identity``,
    ``Merge``, ``Exit``, ``NextIteration``) are not uses of the stack: a stack reached through them,
    used only by its one push and its pops after the loop, is held, and its pops give ``w``'s value
    (five pops of ``w = 2``)."""
    g, fetches, feeds = _pushed_and_popped(route)
    sess = _agree(g, fetches, feeds)
    assert float(sess.run(fetches[1], feeds)) == 10.0
    assert _held(sess) == {"w"}


def test_a_handle_names_one_variable_only_if_every_path_reaches_the_same_one() -> None:
    """``variable_of`` follows every input of a Merge to its end, however the paths meet again: a
    Merge of ``b``'s handle with both outputs of one Switch of ``a``'s (the Switch reached twice), or
    with a Merge of them (a Merge inside a Merge), names no Variable; a Merge of one Variable's
    paths names it."""
    g = tn.Graph()
    with g.as_default():
        a = tn.Variable(1.0, name="a")
        b = tn.Variable(2.0, name="b")
        p = tn.placeholder(tn.bool, [], name="p")
        a_false, a_true = tn.raw.switch(a.handle, p)
        (a_again, _), (twice, _) = tn.raw.merge([a_false, a_true]), tn.raw.merge([b.handle, a_false, a_true])
        (nested, _), (same, _) = tn.raw.merge([b.handle, a_again]), tn.raw.merge([a.handle, a_again])
    assert variable_of(a_again) == "a" and variable_of(same) == "a"
    assert variable_of(twice) is None
    assert variable_of(nested) is None


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_hand_built_stack_popped_before_its_loop_is_not_held(backend: str) -> None:
    """A stack popped in the root frame before the loop that pushes ``w``'s reads onto it (the loop
    starts from the popped value): the pop finds the stack empty on every backend, and the fast
    backend keeps the stack's buffer. The pop reads the ``StackNew`` itself, with no node between:
    held, it would have been refused as a pop of a held stack before its loop."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.float32(2.0), name="w")
        stack = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []}, name="stk").outputs[0]
        popped = g.create_node("StackPop", [stack, tn.constant([0])], {"dtype": "float32"}, name="pop").outputs[0]

        def body(i: Any, h: Any) -> Any:
            pushed = g.create_node("StackPush", [stack, tn.reshape(i, [1]), w.read()], name="push").outputs[0]
            return i + 1, h + pushed * 0.0

        _, h = tn.while_loop(lambda i, h: i < 3, body, [tn.constant(0), tn.reshape(popped, [])])
    sess = tn.Session(g, backend=backend, **({"options": tn.FastOptions(fallback=False)} if backend == "fast" else {}))
    with pytest.raises(ExecutionError, match="pop"):
        sess.run(h)
    if backend == "fast":
        assert _held(sess) == set()


def test_an_assignment_to_a_variable_chosen_at_run_time_forbids_holding() -> None:
    """An assignment in the loop whose handle is a Merge of two Variables' handles (a fed predicate
    picks ``w``) may write any Variable: no read in that loop is held, and the reads after the
    assignment see the new value every iteration, as on the reference interpreter. A later loop that
    only reads ``w`` still holds its stack: the first loop forbids holding in itself alone."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.float64(0.9), name="w")
        a = tn.Variable(np.float64(0.1), name="a")
        p = tn.placeholder(tn.bool, [], name="p")
        n = tn.placeholder(tn.int32, [], name="n")

        a_false, _ = tn.raw.switch(a.handle, p)
        _, w_true = tn.raw.switch(w.handle, p)
        which, _ = tn.raw.merge([a_false, w_true])

        def body(i: Any, h: Any) -> Any:
            bump = g.create_node("AssignAddVariable", [which, tn.constant(0.05, tn.float64)], w._attrs(),
                                 name="bump").outputs[0]
            with tn.control_dependencies([bump]):
                r = w.read()
            return i + 1, tn.tanh(h * r)

        _, h = tn.while_loop(lambda i, h: i < n, body, [tn.constant(0), tn.constant(0.7, tn.float64)])
        def after(i: Any, h: Any) -> Any:
            with tn.control_dependencies([h]):  # (read once the first loop has ended: no race with it)
                r = w.read()
            return i + 1, tn.sin(h * r)

        # a second loop, after it, that only reads w: held
        _, h = tn.while_loop(lambda i, h: i < n, after, [tn.constant(0), h])
        (dw,) = tn.gradients(h, [w])
    feeds = {p: True, n: np.int32(4)}
    want = tn.Session(g).run([h, dw], feeds)
    sess = tn.Session(g, backend="fast", options=tn.FastOptions(fallback=False))
    np.testing.assert_allclose(sess.run([h, dw], feeds), want, rtol=1e-9)
    # (held, the first loop's pops would give w's value before its first assignment)
    assert _held(sess) == {"w"}


def test_a_read_used_through_identities_is_held() -> None:
    """The value a gradient saves may be the read passed through ``Identity`` nodes
    (``tn.identity(w)`` in the body): it is still the read's value, and the stack is held."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.eye(3, dtype=np.float32) * 0.6, name="w")
        x = tn.placeholder(tn.float32, [3, 3], name="x")
        _, h = tn.while_loop(lambda i, h: i < 4,
                             lambda i, h: (i + 1, tn.tanh(tn.matmul(h, tn.identity(tn.identity(w.read()))))),
                             [tn.constant(0), x])
        (dx,) = tn.gradients(tn.reduce_sum(h * h), [x])
    feeds = {x: np.random.default_rng(1).normal(size=(3, 3)).astype(np.float32)}
    want = tn.Session(g).run([h, dx], feeds)
    sess = tn.Session(g, backend="fast", options=tn.FastOptions(fallback=False))
    np.testing.assert_allclose(sess.run([h, dx], feeds), want, rtol=3e-5, atol=1e-6)
    assert _held(sess) == {"w"}


def test_a_stack_with_a_second_push_is_not_held() -> None:
    """A stack that two pushes share (``w``'s read at even indices, a constant at odd ones) keeps its
    buffer: only a stack with one push, of the read, is held. Held, every pop would give ``w``."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.float32(2.0), name="w")
        n = tn.placeholder(tn.int32, [], name="n")
        stack = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []}, name="stk").outputs[0]

        def body(i: Any, s: Any) -> Any:
            a = g.create_node("StackPush", [stack, tn.reshape(2 * i, [1]), w.read()], name="push_w").outputs[0]
            with tn.control_dependencies([a]):  # (pushed in index order, popped in reverse)
                b = g.create_node("StackPush", [stack, tn.reshape(2 * i + 1, [1]), tn.constant(5.0)],
                                  name="push_c").outputs[0]
            return i + 1, s + a * 0.0 + b * 0.0

        _, s = tn.while_loop(lambda i, s: i < n, body, [tn.constant(0), tn.constant(0.0)])
        with tn.control_dependencies([s]):
            last = 2 * n - 1

        def pop_body(j: Any, total: Any) -> Any:
            popped = g.create_node("StackPop", [stack, tn.reshape(last - j, [1])], {"dtype": "float32"},
                                   name="pop").outputs[0]
            return j + 1, total + tn.reshape(popped, [])

        _, total = tn.while_loop(lambda j, t: j < 2 * n, pop_body, [tn.constant(0), tn.constant(0.0)])
    sess = _agree(g, [s, total], {n: np.int32(3)})
    assert float(sess.run(total, {n: np.int32(3)})) == 3 * 2.0 + 3 * 5.0
    assert _held(sess) == set()
