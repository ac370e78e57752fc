"""More fast-backend behaviour that mutation testing found unchecked: gradient stacks whose element
shape is known only at run time (so they are materialized at their first push, inside a branch or a
loop body), a stack handle carried out of a loop and used by a later, chunked loop, and the dtype of
the stacks ``to_jax`` allocates.

Each test runs the fast backend with ``fallback=False``: a program the fast backend cannot compile
must fail the test, not quietly run on the reference interpreter and pass.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn


def _session(g: tn.Graph, backend: str, **opts: Any) -> tn.Session:
    """A session on ``backend``; on the fast backend without the reference fallback."""
    if backend == "fast":
        opts.setdefault("fallback", False)
    return tn.Session(g, backend=backend, **opts)


def _push(g: tn.Graph, handle: tn.Tensor, index: Any, value: Any, name: str) -> Any:
    return g.create_node("StackPush", [handle, index, value], name=name)


def _pop(g: tn.Graph, handle: tn.Tensor, index: Any, name: str, **attrs: Any) -> tn.Tensor:
    return g.create_node("StackPop", [handle, index], {"dtype": "float32", **attrs}, name=name).outputs[0]


# ---- stacks materialized at their first push (element shape known only at run time) -------------------
@pytest.mark.parametrize("pred", [True, False])
def test_a_stack_first_pushed_in_one_branch_of_a_cond(backend: str, pred: bool) -> None:
    """The pushed value has an unknown dimension, so the stack cannot be allocated before the run: it is
    pending in the branch that does not push and concrete in the one that does, and the two branches'
    states must be reconciled into one type for ``lax.cond``. When the push does not happen, the pop
    is an error naming it."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        x = tn.placeholder(tn.float32, [None], name="x")
        s = g.create_node("StackNew", (), {"elem_dtype": "float32"}, name="stk").outputs[0]

        def push() -> tn.Tensor:
            with g.control_dependencies([_push(g, s, tn.constant([0]), x * 2.0, "psh")]):
                return tn.constant(1)

        r = tn.cond(p, push, lambda: tn.constant(0))
        with g.control_dependencies([r]):
            out = _pop(g, s, tn.constant([0]), "pop_it")
    feeds = {p: np.bool_(pred), x: np.array([1.0, 2.0, 3.0], np.float32)}
    if pred:
        np.testing.assert_array_equal(_session(g, backend).run(out, feeds), [2.0, 4.0, 6.0])
    else:
        with pytest.raises(tn.ExecutionError, match=r'StackPop node "pop_it"'):
            _session(g, backend).run(out, feeds)


def test_a_stack_first_pushed_in_a_loop_body(backend: str) -> None:
    """The loop carry holds the stack: pending before the first iteration, concrete after it; the
    carry must be made concrete before ``lax.while_loop`` (one type for every iteration). Pops in
    reverse order give back what each iteration pushed."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")
        s = g.create_node("StackNew", (), {"elem_dtype": "float32"}, name="stk").outputs[0]

        def body(i: tn.Tensor, a: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with g.control_dependencies([_push(g, s, tn.reshape(i, [1]), x + tn.cast(i, tn.float32), "psh")]):
                return i + 1, a + 1

        n, _ = tn.while_loop(lambda i, a: i < 3, body, [tn.constant(0), tn.constant(0)])
        with g.control_dependencies([n]):
            last = _pop(g, s, tn.constant([2]), "pop2")
        with g.control_dependencies([last]):
            middle = _pop(g, s, tn.constant([1]), "pop1")
    got = _session(g, backend).run([last, middle], {x: np.array([1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(got[0], [3.0, 4.0])
    np.testing.assert_array_equal(got[1], [2.0, 3.0])


# ---- a stack handle leaving a loop through Exit --------------------------------------------------------
def _handle_through_a_loop(pushes: int) -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """A stack handle carried through one loop (it leaves by that loop's Exit), then pushed ``pushes``
    times by a second loop and popped back by a third: the sum of what was pushed, popped in reverse."""
    g = tn.Graph()
    with g.as_default():
        s = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []}, name="stk").outputs[0]
        _, h = tn.while_loop(lambda i, h: i < 2, lambda i, h: (i + 1, h), [tn.constant(0), s])

        def push_body(i: tn.Tensor, a: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with g.control_dependencies([_push(g, h, tn.reshape(i, [1]), tn.cast(i, tn.float32) * 1.5, "psh")]):
                return i + 1, a + 1.0

        n, count = tn.while_loop(lambda i, a: i < pushes, push_body, [tn.constant(0), tn.constant(0.0)])

        def pop_body(i: tn.Tensor, t: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            return i - 1, t + _pop(g, h, tn.reshape(i, [1]), "pop", shape=[])

        with g.control_dependencies([n]):
            top = tn.identity(n - 1)
        _, total = tn.while_loop(lambda i, t: i >= 0, pop_body, [top, tn.constant(0.0)])
    return g, count, total


def test_a_stack_handle_leaving_a_loop_is_still_chunked_by_a_later_loop() -> None:
    """The loop that pushes must know the stack it pushes to (through the first loop's Exit), so that
    it stops at the end of each device chunk and starts a new one (kept on the device: swap_memory=False).
    Without that it would overflow the chunk and the whole run would be repeated with a larger capacity."""
    g, count, total = _handle_through_a_loop(8)
    want = 1.5 * sum(range(8))
    np.testing.assert_allclose(tn.Session(g).run([count, total]), [8.0, want])
    sess = tn.Session(g, backend="fast", fallback=False, stack_chunk=2)
    np.testing.assert_allclose(sess.run([count, total]), [8.0, want])
    stats = sess.last_result.stats
    assert stats["stack_capacity_retries"] == 0, stats
    assert stats["stack_chunks_swapped"] + stats["stack_chunks_kept"] > 0, stats  # chunk ends, not a re-run
    assert stats["stack_capacity"] == 2, stats


# ---- to_jax --------------------------------------------------------------------------------------------
def test_to_jax_gradient_stacks_keep_the_pushed_dtype() -> None:
    """``to_jax`` allocates the gradient stacks itself: a float64 forward value pushed onto a float32
    stack would lose precision silently, so the gradient must equal the reference's to float64 accuracy."""
    import jax

    from turnout.fast import to_jax

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        _, y = tn.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), [tn.constant(0), tn.ones_like(x)])
        (dx,) = tn.gradients(y, [x])
    want = tn.Session(g).run(dx, {x: 1.1})
    with jax.enable_x64(True):
        got = to_jax(g, [x], dx)(np.float64(1.1))
        assert np.asarray(got).dtype == np.float64
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-13)


# ---- functionalize: the errors of raising a graph to regions --------------------------------------------
def test_a_merge_of_two_live_paths_names_the_merge_its_inputs_and_when(backend: str) -> None:
    """[E-Merge-Conflict] raised while compiling says where it happens (at every tag where the Merge
    runs, since both inputs are always live together) and, on the fast backend, which inputs."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, [], name="a")
        m, _ = tn.raw.merge([tn.add(a, 1.0, name="plus"), tn.multiply(a, 3.0, name="times")], name="both_live")
    with pytest.raises(tn.MergeConflictError) as ei:
        _session(g, backend).run(m, {a: np.float32(1.0)})
    msg = str(ei.value)
    assert msg.startswith('[E-Merge-Conflict] Merge node "both_live"'), msg
    if backend == "fast":
        assert "received two live data inputs at tag every tag where it runs;" in msg, msg
        assert msg.endswith("(fast backend: inputs plus:0, times:0 are live together)"), msg


def test_loops_nested_three_deep(backend: str) -> None:
    """Each loop region holds exactly its own child loops (frames one level deeper), at every depth:
    sum over i < 2, j < 3, k < 4 of (i + j + k + x)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")

        def middle(i: tn.Tensor, acc: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            def inner(j: tn.Tensor, acc: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
                _, acc = tn.while_loop(lambda k, a: k < 4, lambda k, a: (k + 1, a + i + j + k + x),
                                       [tn.constant(0), acc])
                return j + 1, acc

            _, acc = tn.while_loop(lambda j, a: j < 3, inner, [tn.constant(0), acc])
            return i + 1, acc

        _, total = tn.while_loop(lambda i, a: i < 2, middle, [tn.constant(0), tn.constant(0)])
    want = sum(i + j + k + 5 for i in range(2) for j in range(3) for k in range(4))
    assert int(_session(g, backend).run(total, {x: np.int32(5)})) == want


def test_a_stack_pushed_only_by_a_nested_loop_is_chunked_by_the_top_level_loop() -> None:
    """A top-level loop's region holds the nodes of its nested loops, so the pushes of an inner loop
    count as pushes of the loop the backend drives chunk by chunk: with a chunk of 8 entries and 5
    inner pushes per outer iteration, the loop moves on to new chunks and the run is never repeated.
    y = x**15 and its gradient 15 x**14."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")

        def outer(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            _, y2 = tn.while_loop(lambda j, y: j < 5, lambda j, y: (j + 1, y * x), [tn.constant(0), y])
            return i + 1, y2

        _, y = tn.while_loop(lambda i, y: i < 3, outer, [tn.constant(0), tn.ones_like(x)])
        (dx,) = tn.gradients(y, [x])
    sess = tn.Session(g, backend="fast", fallback=False, stack_chunk=8)
    np.testing.assert_allclose(sess.run([y, dx], {x: 1.01}), [1.01**15, 15 * 1.01**14], rtol=1e-12)
    stats = sess.last_result.stats
    assert stats["stack_capacity_retries"] == 0, stats
    assert stats["stack_chunks_swapped"] + stats["stack_chunks_kept"] > 0, stats  # chunk ends, not a re-run


# ---- lowering: run-time operands (fed, so nothing is constant-folded) ----------------------------------
@pytest.mark.parametrize("name, msg", [("Div", "integer division by zero"), ("FloorMod", "integer modulo by zero")])
def test_integer_division_by_a_fed_zero_is_a_kernel_error_naming_the_op(backend: str, name: str, msg: str) -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int32, [2], name="a")
        b = tn.placeholder(tn.int32, [2], name="b")
        q = g.create_node(name, [a, b], name="q").outputs[0]
    sess = _session(g, backend)
    np.testing.assert_array_equal(sess.run(q, {a: np.array([7, -7], np.int32), b: np.array([2, 2], np.int32)}),
                                  [3, -4] if name == "Div" else [1, 1])
    with pytest.raises(tn.ExecutionError, match=rf'{name} node "q".*{msg}'):
        sess.run(q, {a: np.array([7, 7], np.int32), b: np.array([2, 0], np.int32)})


def test_pow_of_fed_values(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, [2], name="a")
        b = tn.placeholder(tn.float32, [2], name="b")
        p = g.create_node("Pow", [a, b], name="p").outputs[0]
    got = _session(g, backend).run(p, {a: np.array([2.0, 9.0], np.float32), b: np.array([3.0, 0.5], np.float32)})
    np.testing.assert_allclose(got, [8.0, 3.0], rtol=1e-6)


def test_a_slice_with_a_stop_decided_by_loop_state_is_refused_by_name() -> None:
    """A slice bound fed from outside is compiled by specialising the plan on the feed; one that is a loop
    variable has a new value every iteration, so no plan fits it: where the trace knows the loop's trip
    count the loop is unrolled (each body with its own bound), else refused naming the GetItem node."""
    g = tn.Graph()
    with g.as_default():
        x = tn.constant([1.0, 2.0, 3.0])
        w = tn.placeholder(tn.float32, [], name="w")
        _, total = tn.while_loop(lambda i, s: i < 4, lambda i, s: (i + 1, s + tn.reduce_sum(x[:i])),
                                 [tn.constant(0), tn.constant(0.0)])
        _, data = tn.while_loop(lambda i, s: s < w, lambda i, s: (i + 1, s + tn.reduce_sum(x[:i])),
                                [tn.constant(0), tn.constant(0.0)])
    assert tn.Session(g).run(total) == 0.0 + 1.0 + 3.0 + 6.0
    assert tn.Session(g, backend="fast", fallback=False).run(total) == 10.0  # (unrolled: four bodies)
    with pytest.raises(tn.UnsupportedError, match=r"GetItem node .*slices with a bound known only at run time"):
        tn.Session(g, backend="fast", fallback=False).run(data, {w: 2.0})


def test_a_slice_with_a_fed_stop_is_compiled_once_per_value() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.constant([1.0, 2.0, 3.0])
        k = tn.placeholder(tn.int32, [], name="k")
        y = x[:k]
    sess = tn.Session(g, backend="fast", fallback=False)
    compiles = []
    for stop in (2, 1, 2, 1):
        np.testing.assert_array_equal(sess.run(y, {k: np.int32(stop)}), [1.0, 2.0, 3.0][:stop])
        assert sess.last_result.stats["executor"] == "compiled"
        assert sess.last_result.stats["specialized_on"] == ["k:0"]
        compiles.append(sess.last_result.stats["compiles"])
    assert compiles[1] > compiles[0]  # a new value is a new plan
    assert compiles[3] == compiles[2] == compiles[1]  # a value seen before never compiles again


def test_a_primitive_the_fast_backend_does_not_lower_is_refused_with_its_reason() -> None:
    """A Recv outside a partitioned run: the fast backend refuses it naming the node and the reason of
    ``lowering.UNSUPPORTED`` (not a raw KeyError); with the fallback, the reference interpreter's own
    error is raised, as on the reference backend."""
    g = tn.Graph()
    r = g.create_node("Recv", [], {"edge": "e", "src_device": "cpu:1", "dst_device": "cpu:0", "credit": 1,
                                   "control": False, "dtype": "float32", "shape": []}, name="rcv")
    with g.as_default():
        y = tn.identity(r.outputs[0])
    with pytest.raises(tn.UnsupportedError, match=r'Recv node "rcv".*unsupported: partitioned fast execution is a '
                                                  r"later issue \(run partitions with backend='reference'\)"):
        tn.Session(g, backend="fast", fallback=False).run(y)
    with pytest.warns(RuntimeWarning), pytest.raises(tn.ExecutionError, match="runs only in a partitioned run"):
        tn.Session(g, backend="fast").run(y)
