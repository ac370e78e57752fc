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
