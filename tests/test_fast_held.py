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
from hypothesis import given, settings
from hypothesis import strategies as st

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
    sess = agree(rnn(swap=True), stack_chunk=8, host_stack_limit=8)  # (past 8 pushes: the staged path)
    assert held_names(sess) == {"w"}
    g, fetches, ph = rnn(swap=True)()
    fast = tn.Session(g, backend="fast", stack_chunk=8, host_stack_limit=8)
    fast.run(fetches, {ph["x"]: X, ph["n"]: 40})
    assert sum(r.chunks_to_host for r in tn.memory_report(fast).records) > 0  # 40 iterations, chunks of 8
    assert held_names(fast) == {"w"}


def test_a_variable_the_loop_assigns_is_not_held() -> None:
    sess = agree(rnn(assign_inside=True))
    assert held_names(sess) == {"w"}  # u is assigned in the body: its reads differ per iteration


@pytest.mark.parametrize("assign", ["assign", "assign_add", "assign_sub"])
def test_every_kind_of_assignment_in_the_loop_forbids_holding(assign: str) -> None:
    """A read after an assignment in the same body sees a new value every iteration, whichever op
    assigns: not held, and the gradient is the reference's."""
    def build() -> tuple[tn.Graph, list[tn.Tensor], dict[str, tn.Tensor]]:
        g = tn.Graph()
        with g.as_default():
            u = tn.Variable(np.float64(0.9), name="u")
            x = tn.placeholder(tn.float32, [3, 3], name="x")
            n = tn.placeholder(tn.int32, [], name="n")

            def body(i: Any, h: Any) -> Any:
                new = tn.cast(i, tn.float64) * 0.1 + 0.5
                with tn.control_dependencies([getattr(u, assign)(new)]):
                    r = u.read()
                return i + 1, tn.tanh(h * r)

            _, h = tn.while_loop(lambda i, h: i < n, body, [tn.constant(0), tn.constant(0.7, tn.float64)])
            (gu,) = tn.gradients(h, [u])
            gu = gu if gu is not None else tn.constant(0.0, tn.float64)
        return g, [h, gu], {"x": x, "n": n}

    sess = agree(build)
    assert held_names(sess) == set()


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


def test_a_hand_built_stack_popped_in_its_own_loop_is_not_held(backend: str) -> None:
    """A stack pushed a Variable's read in a loop and popped in that loop (built by hand, before the
    push): the pop finds the stack empty on every backend. Held, the pop would have returned the
    Variable's value instead of failing."""
    from turnout.errors import ExecutionError

    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.float32(2.0), name="w")
        stack = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []}, name="stk").outputs[0]

        def body(i: Any, h: Any) -> Any:
            index = tn.reshape(i, [1])
            popped = g.create_node("StackPop", [stack, index], {"dtype": "float32"}, name="pop").outputs[0]
            with tn.control_dependencies([popped]):
                pushed = g.create_node("StackPush", [stack, index, w.read()], name="push").outputs[0]
            return i + 1, h + tn.reshape(popped, []) + pushed * 0.0

        _, h = tn.while_loop(lambda i, h: i < 3, body, [tn.constant(0), tn.constant(0.0)])
    sess = tn.Session(g, backend=backend)
    with pytest.raises(ExecutionError, match="pop"):
        sess.run(h)
    if backend == "fast":
        assert held_names(sess) == set()


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
        sess = tn.Session(g, backend="fast", inside_stack_bytes=0)  # every stack kept, however small
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



def _expr(draw: Any, depth: int) -> Callable[[dict[str, Any]], Any]:
    """A random scalar expression over the loop value ``h``, Variables ``w`` and ``u`` and constants:
    a function of the environment, so that it is built (and reads the Variables) where it is called."""
    if depth == 0 or draw(st.booleans()):
        leaf = draw(st.sampled_from(["h", "w", "u", "c"]))
        if leaf == "c":
            c = draw(st.sampled_from([-0.5, 0.25, 1.5]))
            return lambda env: tn.constant(c, tn.float64)
        return lambda env: env[leaf]
    op = draw(st.sampled_from(["add", "sub", "mul", "tanh", "sigmoid"]))
    a = _expr(draw, depth - 1)
    if op in ("tanh", "sigmoid"):
        fn = tn.tanh if op == "tanh" else tn.sigmoid
        return lambda env: fn(a(env))
    b = _expr(draw, depth - 1)
    bin_ = {"add": tn.add, "sub": tn.subtract, "mul": tn.multiply}[op]
    return lambda env: bin_(a(env), b(env))


@st.composite
def variable_loops(draw: Any) -> tuple[str, Any, Any, bool]:
    """(body shape, two expressions, whether the body assigns ``u``) of a loop over ``h``."""
    shape = draw(st.sampled_from(["plain", "cond", "nested", "nested_cond"]))
    # each branch multiplies by a Variable: its gradient then needs the value read (a push, or a hold)
    e1, e2 = _expr(draw, 3), _expr(draw, 2)
    v1, v2 = draw(st.sampled_from(["w", "u"])), draw(st.sampled_from(["w", "u"]))
    return (shape, lambda env: tn.multiply(e1(env), env[v1]), lambda env: tn.multiply(e2(env), env[v2]),
            draw(st.booleans()))


# a tenth of the loaded profile's budget: each program is trained on two backends and two routes
@settings(max_examples=max(1, settings.default.max_examples // 10))
@given(variable_loops(), st.lists(st.integers(0, 6), min_size=2, max_size=3), st.booleans())
def test_random_loops_reading_variables_train_as_the_reference(
        loop: tuple[str, Any, Any, bool], trips: list[int], staged: bool) -> None:
    """Random loop bodies over Variables read inside them (under a cond, in a nested loop, beside an
    assignment to one of them), trained by SGD on both Variables for a few runs: the fetched
    gradients and the Variables after every run are the reference's, on the fused attempt and on
    the staged path (``stack_chunk=2``)."""
    shape, e1, e2, assign = loop

    def build() -> tuple[tn.Graph, list[Any], tn.Tensor, list[tn.Variable]]:
        g = tn.Graph()
        with g.as_default():
            w = tn.Variable(np.float64(0.7), name="w")
            u = tn.Variable(np.float64(-0.3), name="u")
            n = tn.placeholder(tn.int32, [], name="n")

            def step(i: Any, h: Any, u_now: Any) -> Any:
                env = {"h": h, "w": w, "u": u_now}
                if shape in ("cond", "nested_cond"):
                    return tn.cond(tn.equal(tn.mod(i, 2), 0), lambda: e1(env), lambda: e2(env))
                return e1(env)

            def body(i: Any, h: Any) -> Any:
                u_now: Any = u  # the Variable: read wherever the body uses it
                if assign:  # then read once per iteration, after the assignment (no race)
                    with tn.control_dependencies([u.assign_add(tn.constant(0.01, tn.float64))]):
                        u_now = u.read()
                if shape.startswith("nested"):
                    _, h2 = tn.while_loop(lambda j, h: j < 2, lambda j, h: (j + 1, step(i + j, h, u_now)),
                                          [tn.constant(0), h])
                else:
                    h2 = step(i, h, u_now)
                return i + 1, h2

            _, h = tn.while_loop(lambda i, h: i < n, body, [tn.constant(0), tn.constant(0.5, tn.float64)])
            loss = h * h
            grads = [gr if gr is not None else tn.constant(0.0, tn.float64) for gr in tn.gradients(loss, [w, u])]
            with tn.control_dependencies([loss]):  # (an update unordered with the loop would race it)
                train = [w.assign_sub(grads[0] * 0.05), u.assign_sub(grads[1] * 0.05)]
        return g, [loss, *grads, *train], n, [w, u]

    got = {}
    for backend in ("reference", "fast"):
        g, fetches, n, vs = build()
        sess = tn.Session(g, backend=backend, **({"stack_chunk": 2} if staged and backend == "fast" else {}))
        got[backend] = [(sess.run(fetches, {n: t}), sess.run(vs)) for t in trips]
    for (ra, rv), (fa, fv) in zip(got["reference"], got["fast"], strict=True):
        for a, b in zip([*ra, *rv], [*fa, *fv], strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)


def test_a_held_stack_pushed_under_a_cond_is_no_stack_of_the_driven_loop() -> None:
    """A hand-built stack pushed a Variable's read inside a cond of a loop, and popped only after the
    loop, is held (its pushes do nothing, its pops give the Variable's value); the loop also has a
    gradient's stacks, so on the staged path it is driven chunk by chunk. The law of the cut
    (``cut.iteration_counts``): a driven loop counts the pushes and pops of its stacks per iteration,
    and a held stack is none of them at any depth, under a cond too. Counted, the chunk would look
    for a buffer the held stack does not have. Equal to the reference interpreter's values (which
    keeps one entry per push)."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.float32(2.0), name="w")
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        stack = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []}, name="stk").outputs[0]

        def body(i: Any, h: Any) -> Any:
            index = tn.reshape(i, [1])

            def push() -> Any:
                p = g.create_node("StackPush", [stack, index, w.read()], name="push").outputs[0]
                return h * 1.0 + p * 0.0

            return i + 1, tn.tanh(tn.cond(tn.equal(i % 2, 0), push, lambda: h * 1.0) * 1.1)

        _, y = tn.while_loop(lambda i, h: i < n, body, [tn.constant(0), x])
        (dx,) = tn.gradients(y, [x])
        with tn.control_dependencies([y]):
            last = (n - 1) // 2 * 2  # the last index pushed (the even iterations push)

        def pop_body(j: Any, s: Any) -> Any:
            popped = g.create_node("StackPop", [stack, tn.reshape(last - 2 * j, [1])], {"dtype": "float32"},
                                   name="pop").outputs[0]
            return j + 1, s + tn.reshape(popped, [])

        _, total = tn.while_loop(lambda j, s: j < (n + 1) // 2, pop_body, [tn.constant(0), tn.constant(0.0)])
    feeds = {x: np.float32(0.3), n: np.int32(40)}
    want = tn.Session(g).run([y, dx, total], feeds)
    sess = tn.Session(g, backend="fast", stack_chunk=8)
    np.testing.assert_allclose(sess.run([y, dx, total], feeds), want, rtol=1e-4)
    assert float(want[2]) == 40.0  # twenty pops of w = 2
    assert held_names(sess) == {"w"}
    stats = sess.last_result.stats
    assert not stats["fused"] and stats["stages"] > 1  # the staged path: the forward loop driven
