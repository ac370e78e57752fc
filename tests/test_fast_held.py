"""Held reads (``turnout.fast.held``): a gradient stack that would save a Variable's value every
iteration of a loop that never assigns it keeps that value once on the fast backend.

Each test compares the fast backend with the reference interpreter (whose stacks keep one entry per
push, as the graph says), on the fused attempt and on the staged path (a small ``stack_chunk``, with
and without ``swap_memory``), and says which stacks the plan held.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.fast import stacks as stk
from turnout.fast.held import held_reads, variable_of

pytest.importorskip("jax")

X = np.random.default_rng(0).normal(size=(3, 3)).astype(np.float32)
TRIPS = (3, 5, 0, 40, 3)

Builder = Callable[[], tuple[tn.Graph, list[tn.Tensor], dict[str, tn.Tensor]]]


def rnn(shape: str = "plain", swap: bool = False, assign_inside: bool = False) -> Builder:
    """A loop of fed length over ``h``, reading Variables ``w`` and ``u`` inside its body; fetches the
    loss and its gradients with respect to both."""
    def build() -> tuple[tn.Graph, list[tn.Tensor], dict[str, tn.Tensor]]:
        g = tn.Graph()
        with g.as_default():
            w = tn.Variable(np.arange(9, dtype=np.float32).reshape(3, 3) / 20, name="w")
            u = tn.Variable(np.eye(3, dtype=np.float32) * 0.5, name="u")
            x = tn.placeholder(tn.float32, [3, 3], name="x")
            n = tn.placeholder(tn.int32, [], name="n")

            def body(i: Any, h: Any) -> Any:
                if shape == "nested":
                    _, h2 = tn.while_loop(lambda j, h: j < 2, lambda j, h: (j + 1, tn.tanh(tn.matmul(h, w) + 0.1)),
                                          [tn.constant(0), h])
                elif shape == "cond":
                    h2 = tn.cond(i % 2 > 0, lambda: tn.tanh(tn.matmul(h, w)), lambda: tn.sigmoid(tn.matmul(h, u)))
                elif assign_inside:  # (u is read only after this iteration's assignment: no race)
                    h2 = tn.tanh(tn.matmul(h, w) + 0.1)
                else:
                    h2 = tn.tanh(tn.matmul(h, w) + tn.matmul(x, u) * 0.1)
                if assign_inside:
                    with tn.control_dependencies([u.assign_add(tn.ones([3, 3]) * 0.01)]):
                        h2 = h2 + tn.matmul(h2, u.read()) * 0.1
                return i + 1, h2

            _, h = tn.while_loop(lambda i, h: i < n, body, [tn.constant(0), x], swap_memory=swap)
            loss = tn.reduce_sum(h * h)
            grads = [gr if gr is not None else tn.zeros([3, 3]) for gr in tn.gradients(loss, [w, u])]
        return g, [loss, *grads], {"x": x, "n": n}

    return build


def agree(build: Builder, **options: Any) -> tn.Session:
    """Run ``build``'s fetches at every trip count of ``TRIPS`` on both backends; the fast session."""
    got = {}
    for backend in ("reference", "fast"):
        g, fetches, ph = build()
        sess = tn.Session(g, backend=backend, **(options if backend == "fast" else {}))
        got[backend] = [sess.run(fetches, {ph["x"]: X, ph["n"]: t}) for t in TRIPS]
    for ref, fast in zip(got["reference"], got["fast"], strict=True):
        for a, b in zip(ref, fast, strict=True):
            np.testing.assert_allclose(b, a, rtol=3e-5, atol=1e-6)
    return sess


def held_names(sess: tn.Session) -> set[str]:
    return {h.var_name for plan in sess.backend._plans.values() for h in plan.held.values()}


@pytest.mark.parametrize("options", [{}, {"stack_chunk": 8}], ids=["fused", "staged"])
@pytest.mark.parametrize("shape", ["plain", "nested", "cond"])
def test_reads_in_a_loop_are_held_and_agree(shape: str, options: dict[str, Any]) -> None:
    sess = agree(rnn(shape), **options)
    # u is read in the plain body only through x @ u, whose gradient needs x, not u
    assert held_names(sess) == {"plain": {"w"}, "nested": {"w"}, "cond": {"w", "u"}}[shape]


def test_held_reads_with_swapped_stacks() -> None:
    sess = agree(rnn(swap=True), stack_chunk=8)
    assert held_names(sess) == {"w"}
    assert sess.last_result.stats.get("chunks_to_host", 1)  # (the run swapped: 40 iterations, chunks of 8)


def test_a_variable_the_loop_assigns_is_not_held() -> None:
    sess = agree(rnn(assign_inside=True))
    assert held_names(sess) == {"w"}  # u is assigned in the body: its reads differ per iteration


def test_a_held_value_is_the_one_the_loop_read() -> None:
    """An assignment after the forward loop and before the backward one (ordered by a control edge
    the gradient depends on) must not reach the backward loop: the popped value is the one read."""
    def build() -> tuple[tn.Graph, list[tn.Tensor], dict[str, tn.Tensor]]:
        g = tn.Graph()
        with g.as_default():
            w = tn.Variable(np.eye(3, dtype=np.float32) * 0.7, name="w")
            x = tn.placeholder(tn.float32, [3, 3], name="x")
            n = tn.placeholder(tn.int32, [], name="n")
            _, h = tn.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tn.tanh(tn.matmul(h, w))),
                                 [tn.constant(0), x])
            with tn.control_dependencies([h]):
                bump = w.assign(tn.ones([3, 3]) * 5.0)
            with tn.control_dependencies([bump]):
                loss = tn.reduce_sum(h * h) + 0.0
            (gw,) = tn.gradients(loss, [w])
        return g, [loss, gw], {"x": x, "n": n}

    sess = agree(build)
    assert held_names(sess) == {"w"}


def test_held_stacks_hold_no_buffer() -> None:
    """The stack buffers kept between runs are those of the loop with its Variable read before it."""
    def kept_bytes(read_inside: bool) -> int:
        g = tn.Graph()
        with g.as_default():
            w = tn.Variable(np.full((16, 16), 0.01, np.float32), name="w")
            x = tn.placeholder(tn.float32, [4, 16], name="x")
            wr = w.read()
            _, h = tn.while_loop(lambda i, h: i < 5,
                                 lambda i, h: (i + 1, tn.tanh(tn.matmul(h, w if read_inside else wr))),
                                 [tn.constant(0), x])
            step = tn.train.SGD(0.1).minimize(tn.reduce_sum(h))
        sess = tn.Session(g, backend="fast")
        sess.run(step, {x: np.ones((4, 16), np.float32)})
        return sum(stk.stack_nbytes(v) for bufs in sess.backend._stack_bufs.values() for v in bufs.values())

    assert kept_bytes(True) == kept_bytes(False) > 0


def test_the_graph_rules_for_holding() -> None:
    """``variable_of`` names one Variable or none (a Merge of two Variables' handles), and nothing
    is held in a program without a loop of the root frame."""
    from turnout.fast.functionalize import functionalize

    g = tn.Graph()
    with g.as_default():
        a = tn.Variable(1.0, name="a")
        b = tn.Variable(2.0, name="b")
        p = tn.placeholder(tn.bool, [], name="p")
        y = a.read() * b.read()
        both, _ = tn.raw.merge([a.handle, b.handle])
        (same, _), (_, other) = tn.raw.switch(a.handle, p), tn.raw.switch(a.handle, p)
    assert variable_of(a.handle) == "a" and variable_of(same) == "a" and variable_of(other) == "a"
    assert variable_of(both) is None and variable_of(y) is None
    assert held_reads(functionalize(g, [y], [p])) == {}
