"""Fast-backend behaviour that the seed-4 mutation campaigns found unchecked (``tools/mutation.py``,
see docs/checking.rst): the gradient stacks' chunk store (``fast/stacks.py``: which loop a device
memory cap error names and what needed the bytes, the accounting of a chunk copied back from host
memory when the backward loop reaches it, the copier thread).

Each test runs the fast backend with ``fallback=False`` where a graph could fall back: a program the
fast backend refuses must fail the test, not quietly run on the reference interpreter and pass.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import graphs
import numpy as np
import pytest

import turnout as tn
from turnout.errors import ResourceExhaustedError

pytest.importorskip("jax")

PER_ENTRY = 8 + 4  # a float64 value of the power loop and its int32 iteration index
VALUE = 8  # a run in one fused call checks the stack by position: no index record (plan.positional_stacks)


# ---- fast/stacks.py: the chunk store ------------------------------------------------------------------
@pytest.mark.parametrize("swap, chunk, limit, steps, what", [
    # one chunk does not fit at all: the buffers in the loop state are over the cap (ChunkStore.observe)
    (False, 64, 64 * VALUE - 1, 10, "its stack buffers"),
    # a swapped stack needs a second buffer while its full chunk is copied out (ChunkStore._swap_out)
    (True, 64, 64 * PER_ENTRY + 1, 200, "a second buffer while a full chunk is copied to host memory"),
    # an unswapped stack keeps full chunks on the device until they no longer fit (ChunkStore.spill)
    (False, 64, 4 * 64 * PER_ENTRY, 640, "a new device chunk: swap_memory=False keeps full chunks on the device"),
])
def test_each_device_memory_cap_error_names_the_loop_its_device_and_what_needed_the_bytes(
        swap: bool, chunk: int, limit: int, steps: int, what: str) -> None:
    """A cap error must say which loop's stacks crossed it, on which device, how many bytes they
    needed and what asked for them: without the loop a user cannot tell which ``swap_memory`` to set."""
    g, x, n, y, dx = graphs.power_loop(swap_memory=swap)
    # (host_stack_limit: a swapped run past the chunk takes the staged path, whose chunks the cap counts)
    sess = tn.Session(g, backend="fast", stack_chunk=chunk, device_memory_limit=limit, fallback=False,
                      host_stack_limit=chunk)
    with pytest.raises(ResourceExhaustedError) as info:
        sess.run([y, dx], {x: 1.5, n: steps})
    msg = str(info.value)
    assert 'the gradient stacks of loop "while"' in msg and "graphs.py" in msg
    assert f"on device cpu:0 ({what}), over device_memory_limit={limit} bytes" in msg
    need = int(msg.split(" need ")[1].split(" bytes")[0])
    assert need > limit


def test_an_inner_swapped_loop_refilled_from_several_host_chunks_keeps_its_accounting() -> None:
    """Irregular inner trip counts leave partly full chunks; a backward refill that needs more rows
    than the newest chunk holds takes the next one too, copied back on demand (only the newest is
    prefetched). That copy is counted on its own stack: every row of the memory report belongs to a
    loop of the program, and every chunk sent to the host comes back: copied back, except the newest of
    each stack, which the backward loop takes from the device buffer it was copied from."""
    import test_swap_memory as sm

    m = sm.rnn(swap=False, nested=True)  # the inner loop swaps, the outer one keeps its chunks
    ref = tn.Session(m["g"])
    sess = tn.Session(m["g"], backend="fast", stack_chunk=8, fallback=False)
    for steps in (24, 60):
        f = sm.feed(m, steps)
        for a, b in zip(sess.run(m["fetch"], f), ref.run(m["fetch"], f), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
        rows = {r.loop: r for r in tn.memory_report(sess).records}
        assert set(rows) == {"rnn", "rnn/body/inner"}
        inner = rows["rnn/body/inner"]
        stacks = len(tn.memory_report(m["g"]).loop("rnn/body/inner").stacked)
        assert inner.swap_memory is True and inner.chunks_to_host > stacks
        assert inner.chunks_from_host == inner.chunks_to_host - stacks
        assert rows["rnn"].chunks_to_host == rows["rnn"].chunks_from_host == 0
        stats = sess.last_result.stats
        assert stats["stack_chunks_swapped"] == inner.chunks_to_host
        assert stats["stack_chunks_from_host"] == inner.chunks_from_host


def test_stack_chunks_are_copied_by_one_named_worker_thread() -> None:
    """The copies to and from host memory run on one worker thread (in order: a chunk's copy out
    before its copy back), named so that a profiler or a thread dump shows what it is."""
    g, x, n, y, dx = graphs.power_loop(swap_memory=True)
    sess = tn.Session(g, backend="fast", stack_chunk=8, fallback=False, host_stack_limit=8)
    yv, dv = sess.run([y, dx], {x: 1.01, n: 50})
    np.testing.assert_allclose([yv, dv], [1.01**50, 50 * 1.01**49], rtol=1e-9)
    assert sess.last_result.stats["stack_chunks_swapped"] > 0
    copiers = [t for t in threading.enumerate() if t.name.startswith("turnout-stack-copy")]
    assert len(copiers) == 1 and copiers[0] is not threading.current_thread()


# ---- fast/case_chain.py: nested conds raised to one lax.switch ----------------------------------------

#: a predicate on the fed int ``i`` for level ``k`` of a chain, built from one speculable op (plus
#: constants): true for exactly one value of ``i`` in 0..9, or for a range of them
PREDICATES: dict[str, Callable[[tn.Tensor, int], tn.Tensor]] = {
    "Equal": lambda i, k: tn.equal(i, k),
    "NotEqual": lambda i, k: tn.logical_not(tn.not_equal(i, k)),
    "Less": lambda i, k: tn.less(i, k + 1),
    "LessEqual": lambda i, k: tn.less_equal(i, k),
    "Greater": lambda i, k: tn.greater(k + 1, i),
    "GreaterEqual": lambda i, k: tn.greater_equal(k, i),
    "LogicalNot": lambda i, k: tn.logical_not(tn.greater(i, k)),
    "LogicalAnd": lambda i, k: tn.logical_and(tn.greater_equal(i, k), tn.less_equal(i, k)),
    "LogicalOr": lambda i, k: tn.logical_or(tn.equal(i, k), tn.equal(i, k - 100)),
    "Identity": lambda i, k: tn.identity(tn.equal(i, k)),
}


def _chain(op: str, levels: int) -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    """``cond(p_0(i), f_0, lambda: cond(p_1(i), f_1, ...))`` written out by hand, each predicate
    computed inside the enclosing false branch with ``PREDICATES[op]``."""
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, (), name="i")
        x = tn.placeholder(tn.float32, (2,), name="x")

        def level(k: int) -> tn.Tensor:
            if k == levels:
                return x - 100.0
            return tn.cond(PREDICATES[op](i, k), lambda: tn.tanh(x * float(k + 1)) + float(k),
                           lambda: level(k + 1))

        y = level(0)
    return g, i, x, y


@pytest.mark.parametrize("op", sorted(PREDICATES))
def test_a_chain_whose_predicates_use_any_speculable_op_is_one_switch(op: str, switches: list[int]) -> None:
    """Every op of ``case_chain.SPECULABLE`` can compute a chain's inner predicates and the chain is
    still raised to one flat ``lax.switch``, meaning what the nested conds mean at every index."""
    levels = 4
    g, i, x, y = _chain(op, levels)
    fast = tn.Session(g, backend="fast", fallback=False)
    ref = tn.Session(g)
    xv = np.array([0.5, -1.0], np.float32)
    for k in [-2, *range(levels), levels, 9]:
        np.testing.assert_allclose(fast.run(y, {i: k, x: xv}), ref.run(y, {i: k, x: xv}), rtol=1e-6)
    assert switches and max(switches) == levels + 1


def test_a_chain_with_a_non_speculable_predicate_stays_nested(switches: list[int]) -> None:
    """An op that may fail or has an effect (here ``Mod``, which fails on zero) must not be
    computed before its branch is taken, so the chain stays nested conds and still agrees."""
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, (), name="i")
        d = tn.placeholder(tn.int32, (), name="d")
        y = tn.cond(tn.equal(i, 0), lambda: tn.constant(10),
                    lambda: tn.cond(tn.equal(tn.mod(i, d), 1), lambda: tn.constant(11),
                                    lambda: tn.cond(tn.equal(i, 5), lambda: tn.constant(12),
                                                    lambda: tn.constant(13))))
    fast = tn.Session(g, backend="fast", fallback=False)
    assert [int(fast.run(y, {i: k, d: 7})) for k in (0, 1, 5, 7)] == [10, 11, 12, 13]
    assert int(fast.run(y, {i: 0, d: 0})) == 10  # the division by zero is in an untaken branch
    assert max(switches, default=0) < 4


def test_the_chain_computes_each_predicate_once(monkeypatch: pytest.MonkeyPatch, switches: list[int]) -> None:
    """The chain's predicates are computed up front, once; the switch's functions reuse them rather
    than computing them again in every level (which would make tracing quadratic in the chain)."""
    from turnout.fast import lowering

    rule = lowering.LOWERING_RULES["Equal"]
    calls = [0]

    def counted(*a: Any) -> Any:
        calls[0] += 1
        return rule(*a)

    monkeypatch.setitem(lowering.LOWERING_RULES, "Equal", counted)
    levels = 12
    g, i, x, y = _chain("Equal", levels)
    fast = tn.Session(g, backend="fast", fallback=False)
    xv = np.array([0.5, -1.0], np.float32)
    ref = tn.Session(g)
    for k in (0, 7, levels):
        np.testing.assert_allclose(fast.run(y, {i: k, x: xv}), ref.run(y, {i: k, x: xv}), rtol=1e-6)
    assert max(switches) == levels + 1
    assert calls[0] == levels


# ---- error messages name their op -------------------------------------------------------------------
def test_a_push_of_another_shape_onto_a_stack_is_an_unsupported_error_naming_the_push() -> None:
    """A stack's buffer has one element shape, fixed at its first push. A later push of another shape
    (fine on the reference interpreter, whose stacks are lists) is refused by the fast backend, and
    the error names that push, not just the shapes."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")
        y = tn.placeholder(tn.float32, [None], name="y")
        s = g.create_node("StackNew", (), {"elem_dtype": "float32"}, name="stk").outputs[0]
        p1 = g.create_node("StackPush", [s, tn.constant([0]), x], name="psh1")
        with g.control_dependencies([p1]):
            p2 = g.create_node("StackPush", [s, tn.constant([1]), y], name="psh2")
        with g.control_dependencies([p2]):
            top = g.create_node("StackPop", [s, tn.constant([1])], {"dtype": "float32"}, name="pop").outputs[0]
    feeds = {x: np.ones(3, np.float32), y: np.full(4, 2.0, np.float32)}
    np.testing.assert_array_equal(tn.Session(g).run(top, feeds), np.full(4, 2.0, np.float32))
    with pytest.raises(tn.UnsupportedError, match=r'StackPush node "psh2".*shape \(4,\).*elements \(3,\)'):
        tn.Session(g, backend="fast", fallback=False).run(top, feeds)


# ---- fast/lowering.py: element-wise rules on run-time values ---------------------------------------
_UNARY = ["negative", "tanh", "sigmoid", "exp", "log", "sqrt", "square", "abs", "sign", "relu"]
_BINARY = ["add", "subtract", "multiply", "maximum", "minimum"]


@pytest.mark.parametrize("fn", _UNARY + _BINARY)
def test_each_elementwise_op_on_fed_values_agrees_with_the_reference(fn: str) -> None:
    """Every element-wise lowering rule on values fed at run time (a constant operand would be folded
    before any rule runs), without the reference fallback, on negative, zero and positive entries in
    float32 and float64 (``log`` and ``sqrt`` on positive ones)."""
    for dtype in (tn.float32, tn.float64):
        g = tn.Graph()
        with g.as_default():
            a = tn.placeholder(dtype, [None], name="a")
            b = tn.placeholder(dtype, [None], name="b")
            y = getattr(tn, fn)(a) if fn in _UNARY else getattr(tn, fn)(a, b)
        av = np.array([0.25, 3.0, 1.5] if fn in ("log", "sqrt") else [-2.5, 0.0, 1.5], dtype.numpy)
        feeds = {a: av, b: np.array([1.0, -1.0, 2.0], dtype.numpy)}
        got = tn.Session(g, backend="fast", fallback=False).run(y, feeds)
        want = tn.Session(g).run(y, feeds)
        assert got.dtype == want.dtype == np.dtype(dtype.numpy)
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("b_shape", [[3], [1, 3], [2, 1], [2, 3], []])
def test_gradients_of_broadcasting_ops_sum_back_to_each_input_shape(b_shape: list[int]) -> None:
    """The gradient of a broadcasting op sums the incoming gradient back to each operand's shape
    (``SumToLike``: leading axes dropped, axes of size 1 kept; with static shapes the builder emits
    a reduce_sum instead, so the dimensions here are known only at run time). Run without the
    reference fallback and compared with the reference and with the closed form."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float64, [None, 3], name="a")  # unknown dims: summed by the SumToLike op
        b = tn.placeholder(tn.float64, [None] * len(b_shape), name="b")
        loss = tn.reduce_sum(tn.multiply(a, b) + tn.maximum(b, a))
        da, db = tn.gradients(loss, [a, b])
    rng = np.random.default_rng(len(b_shape))
    av, bv = rng.normal(size=(2, 3)), rng.normal(size=b_shape)
    feeds = {a: av, b: bv}
    got = tn.Session(g, backend="fast", fallback=False).run([da, db], feeds)
    want = tn.Session(g).run([da, db], feeds)
    bb = np.broadcast_to(bv, (2, 3))
    pick_b = (bb >= av).astype(np.float64)  # where maximum takes b (ties: the reference's choice, none here)
    closed_db = np.sum(av + pick_b, axis=tuple(range(2 - len(b_shape))))  # the leading axes b lacks
    closed_db = np.sum(closed_db, axis=tuple(i for i, d in enumerate(b_shape) if d == 1), keepdims=True)
    for x, y in zip(got, want, strict=True):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(x, y, rtol=1e-12)
    assert np.shape(got[1]) == tuple(b_shape)
    np.testing.assert_allclose(got[0], bb + (1 - pick_b), rtol=1e-12)
    np.testing.assert_allclose(got[1], closed_db.reshape(b_shape), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
def test_variable_updates_keep_the_variables_dtype(dtype: str) -> None:
    """An assignment's result and the stored value keep the Variable's dtype on the fast backend (an
    int32 counter must not come back as a float), in a loop that updates it with fed values."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.array([3, 4], dtype), name="v")
        d = tn.placeholder(getattr(tn, dtype), [2], name="d")
        n = tn.placeholder(tn.int32, [], name="n")

        def body(i: tn.Tensor, x: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            a1 = v.assign_add(d)
            with g.control_dependencies([a1]):
                a2 = v.assign_sub(d * 2)
            with g.control_dependencies([a2]):
                a3 = v.assign(a1 + a2 + x)
            return i + 1, a3

        _, last = tn.while_loop(lambda i, x: i < n, body, [tn.constant(0), tn.zeros([2], getattr(tn, dtype))])
        with g.control_dependencies([last]):
            after = v.read()
    feeds = {d: np.array([1, 2], dtype), n: 3}
    fast = tn.Session(g, backend="fast", fallback=False)
    ref = tn.Session(g)
    got, want = fast.run([last, after], feeds), ref.run([last, after], feeds)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(a, b)


def test_a_case_whose_branches_differ_in_shape_compiles_per_fed_index() -> None:
    """Like a cond, a case may return values of different shapes per branch in the dataflow semantics.
    The one ``lax.switch`` it is raised to cannot; where feeds decide the index (the predicates of
    the chain's nested conds read it through their Switches), the plan is specialised on it."""
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, (), name="i")
        y = tn.case(i, [lambda k=k: tn.constant([1.0] * (k + 1)) for k in range(3)],
                    default=lambda: tn.constant([0.0]), name="ragged")
    sess = tn.Session(g, backend="fast", fallback=False)
    for iv in (2, 0, 7, 1):
        np.testing.assert_array_equal(sess.run(y, {i: iv}), tn.Session(g).run(y, {i: iv}))
        assert sess.last_result.stats["specialized_on"] == ["i:0"]


def test_a_case_whose_branches_differ_in_shape_is_refused_naming_the_chain_and_its_merge() -> None:
    """With an index no feed decides (a Variable's), the error names the chain's cond and its Merge."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.int32(2), name="v")
        y = tn.case(v.read(), [lambda k=k: tn.constant([1.0] * (k + 1)) for k in range(3)],
                    default=lambda: tn.constant([0.0]), name="ragged")
    np.testing.assert_array_equal(tn.Session(g).run(y), [1.0, 1.0, 1.0])
    with pytest.raises(tn.UnsupportedError, match=r'(?s)the case chain of cond on .* near Merge node '
                                                  r'"ragged/branch0/merge".*different types or shapes.*float32\[1\]'):
        tn.Session(g, backend="fast", fallback=False).run(y)


def test_tensor_array_gradients_with_known_shapes_run_compiled() -> None:
    """The gradient of ``TensorArray.write`` reads the written slot back or zeros
    (``TensorArrayReadOrZeros``), and that of ``unstack`` stacks the slots or zeros
    (``TensorArrayStackOrZeros``); with every shape known they compile (no reference fallback) and
    give the closed-form gradient: d/dx sum_i c_i * tanh(x_i) = c * (1 - tanh(x)^2)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [3, 2], name="x")
        c = tn.placeholder(tn.float64, [3, 2], name="c")
        src = tn.TensorArray(tn.float64, size=3).unstack(x)

        def body(i: tn.Tensor, out: tn.TensorArray) -> tuple[tn.Tensor, tn.TensorArray]:
            return i + 1, out.write(i, tn.tanh(src.read(i)))

        _, out = tn.while_loop(lambda i, out: i < 3, body, [tn.constant(0), tn.TensorArray(tn.float64, size=3)])
        loss = tn.reduce_sum(out.stack() * c)
        (dx,) = tn.gradients(loss, [x])
    rng = np.random.default_rng(7)
    feeds = {x: rng.normal(size=(3, 2)), c: rng.normal(size=(3, 2))}
    got = tn.Session(g, backend="fast", fallback=False).run([loss, dx], feeds)
    want = tn.Session(g).run([loss, dx], feeds)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(got[1], feeds[c] * (1 - np.tanh(feeds[x]) ** 2), rtol=1e-12)
