"""Behaviour the fast backend shares with the reference interpreter, where mutation testing found
holes: deadness arriving through data inputs and through control inputs, conds whose branches
disagree, gradient stacks, TensorArrays read before any write or never written (the zeros paths of
gradient TensorArrays), negative sizes, ``stop_gradient`` on run-time values, and the op each
error names.

These tests run sessions and compare values and error types, never the fast backend's internals
(``tools/mutation.py --module fast/lowering.py`` measures how many mutants they kill). Tests taking
the ``backend`` fixture run on both backends and must give the same answer on each.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_ops import BINARY, UNARY

import turnout as tn
from turnout import raw


def _both(build: Any, feeds: Any = lambda ph: {}) -> dict[str, Any]:
    """Build the graph once per backend (fresh graph each time) and run it."""
    out = {}
    for b in ("reference", "fast"):
        g = tn.Graph()
        with g.as_default():
            fetch, ph = build()
        out[b] = tn.Session(g, backend=b).run(fetch, feeds(ph))
    return out


def _same(vals: dict[str, Any]) -> Any:
    ref, fast = vals["reference"], vals["fast"]
    for r, f in zip(ref if isinstance(ref, list) else [ref], fast if isinstance(fast, list) else [fast], strict=True):
        r, f = np.asarray(r), np.asarray(f)
        assert r.dtype == f.dtype and r.shape == f.shape, (r, f)
        np.testing.assert_allclose(f, r, rtol=1e-6)
    return ref


# ---- deadness through data inputs and through control inputs ------------------------------------------
@pytest.mark.parametrize("pred", [True, False])
def test_an_op_with_a_dead_data_input_is_dead(backend: str, pred: bool) -> None:
    """Ops fed by the untaken output of a Switch do not run; the Merge forwards the other side and
    its value index says which."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")
        x = tn.placeholder(tn.float32, shape=[], name="x")
        sf, st = raw.switch(x, p)
        a = tn.multiply(sf, 2.0, name="on_false")
        b = tn.add(st * st, 1.0, name="on_true")
        m, i = raw.merge([a, b])
    v, k = tn.Session(g, backend=backend).run([m, i], {p: np.bool_(pred), x: np.float32(3.0)})
    assert (float(v), int(k)) == ((10.0, 1) if pred else (6.0, 0))
    assert np.asarray(k).dtype == np.int32


@pytest.mark.parametrize("pred", [True, False])
def test_ops_killed_by_a_dead_control_input_feed_the_merge(backend: str, pred: bool) -> None:
    """A branch made only of constants (they hang on the branch's pivot by a control edge): their
    results are used, and the untaken branch's are not."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")
        x = tn.placeholder(tn.float32, shape=[], name="x")
        r = tn.cond(p, lambda: tn.constant(2.0) * tn.constant(3.0) + 1.0, lambda: x - tn.constant(4.0))
    got = tn.Session(g, backend=backend).run(r, {p: np.bool_(pred), x: np.float32(1.5)})
    assert float(got) == (7.0 if pred else -2.5)


@pytest.mark.parametrize("pred", [True, False])
def test_a_variable_update_on_the_untaken_branch_does_not_happen(backend: str, pred: bool) -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")
        v = tn.Variable(1.0, name="v")
        r = tn.cond(p, lambda: v.assign_add(10.0), lambda: v.read() * 2.0)
    sess = tn.Session(g, backend=backend)
    assert float(sess.run(r, {p: np.bool_(pred)})) == (11.0 if pred else 2.0)
    assert float(sess.run(v.read())) == (11.0 if pred else 1.0)


def test_a_merge_of_a_control_killed_op_is_run_or_refused_by_name() -> None:
    """A hand-made Merge of an op killed only by a control edge and a Switch output: the reference runs
    it; the fast backend cannot raise it to a conditional and says so, naming the Merge."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")
        x = tn.placeholder(tn.float32, shape=[], name="x")
        sf, st = raw.switch(x, p)
        with g.control_dependencies([st]):
            k = tn.multiply(x, 3.0, name="killed")
        m, _ = raw.merge([k, sf], name="odd_merge")
    feeds = {p: np.bool_(True), x: np.float32(5.0)}
    assert float(tn.Session(g).run(m, feeds)) == 15.0
    with pytest.raises(tn.UnsupportedError, match=r'Merge node "odd_merge".*complementary sides'):
        tn.Session(g, backend="fast", fallback=False).run(m, feeds)
    with pytest.warns(RuntimeWarning, match="complementary sides"):  # by default: run on the interpreter
        assert float(tn.Session(g, backend="fast").run(m, feeds)) == 15.0


# ---- conds whose branches disagree ----------------------------------------------------------------------
def test_cond_branches_of_different_dtypes_are_a_build_error() -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")
        with pytest.raises(tn.DTypeError, match="float32 in true_fn but int32 in false_fn"):
            tn.cond(p, lambda: tn.constant(1.0), lambda: tn.constant(1))


def test_cond_branches_of_different_shapes_compile_per_fed_predicate() -> None:
    """Shapes may differ per branch in the dataflow semantics (the reference returns the taken side).
    One ``lax.cond`` needs one type, so where feeds decide the predicate the plan is specialised on
    them (``lowering.NeedsStatic``): only the taken branch is compiled, one plan per predicate value,
    and a value seen before compiles nothing."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")
        r = tn.cond(p, lambda: tn.constant([1.0]), lambda: tn.constant([1.0, 2.0]), name="ragged")
    np.testing.assert_array_equal(tn.Session(g).run(r, {p: np.bool_(False)}), [1.0, 2.0])
    sess = tn.Session(g, backend="fast", fallback=False)
    for pv, want in ((False, [1.0, 2.0]), (True, [1.0]), (False, [1.0, 2.0]), (True, [1.0])):
        np.testing.assert_array_equal(sess.run(r, {p: np.bool_(pv)}), want)
        assert sess.last_result.stats["executor"] == "compiled"
        assert sess.last_result.stats["specialized_on"] == ["p:0"]
    compiles = sess.backend.compile_count
    sess.run(r, {p: np.bool_(True)})
    assert sess.backend.compile_count == compiles


def test_cond_branches_of_different_shapes_on_a_run_time_predicate_are_refused_by_fast() -> None:
    """Where no feed decides the predicate (here a Variable does), nothing can be specialised: the
    fast backend refuses with an error naming the Merge and both shapes, and by default runs the
    program on the reference interpreter (docs/missing.rst)."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.float32(0.0), name="v")
        r = tn.cond(v.read() > 0.5, lambda: tn.constant([1.0]), lambda: tn.constant([1.0, 2.0]), name="ragged")
    np.testing.assert_array_equal(tn.Session(g).run(r), [1.0, 2.0])
    with pytest.raises(tn.UnsupportedError, match=r"(?s)branches of the cond on Greater:0 near Merge node "
                                                  r"\"ragged/merge\".*different types or shapes"
                                                  r".*float32\[1\].*float32\[2\]"):
        tn.Session(g, backend="fast", fallback=False).run(r)
    with pytest.warns(RuntimeWarning, match="different types or shapes"):
        np.testing.assert_array_equal(tn.Session(g, backend="fast").run(r), [1.0, 2.0])


# ---- gradient stacks ---------------------------------------------------------------------------------------
def _stack(push: int | None, pop: int) -> tuple[tn.Graph, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        s = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": [2]}, name="stk")
        deps = []
        if push is not None:
            deps = [g.create_node("StackPush", [s.outputs[0], tn.constant([push]), tn.constant([1.0, 2.0])],
                                  name="psh")]
        with g.control_dependencies(deps):
            out = g.create_node("StackPop", [s.outputs[0], tn.constant([pop])], {"dtype": "float32", "shape": [2]},
                                name="pop_it").outputs[0]
    return g, out


def test_a_stack_is_created_at_its_first_push_and_pops_what_was_pushed(backend: str) -> None:
    g, out = _stack(3, 3)
    got = tn.Session(g, backend=backend).run(out)
    np.testing.assert_array_equal(got, [1.0, 2.0])
    assert got.dtype == np.float32


def test_a_stack_pushed_two_constants_pops_each_one(backend: str) -> None:
    """The fast backend pops a stack as a constant only when the one StackPush of that stack in the
    graph pushed it (``Emitter.note_push``, for a gradient's saved shapes). Two push nodes of two
    constants are popped as what each pushed, in reverse order."""
    g = tn.Graph()
    with g.as_default():
        s = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": [2]}, name="stk").outputs[0]
        a = g.create_node("StackPush", [s, tn.constant([0]), tn.constant([1.0, 2.0])], name="push_a")
        with g.control_dependencies([a]):
            b = g.create_node("StackPush", [s, tn.constant([1]), tn.constant([3.0, 4.0])], name="push_b")
        with g.control_dependencies([b]):
            top = g.create_node("StackPop", [s, tn.constant([1])], {"dtype": "float32", "shape": [2]}, name="pop_b")
        with g.control_dependencies([top]):
            low = g.create_node("StackPop", [s, tn.constant([0])], {"dtype": "float32", "shape": [2]}, name="pop_a")
    got = tn.Session(g, backend=backend).run([top.outputs[0], low.outputs[0]])
    np.testing.assert_array_equal(got[0], [3.0, 4.0])
    np.testing.assert_array_equal(got[1], [1.0, 2.0])


def test_stack_pop_on_a_stack_never_pushed_is_an_execution_error_naming_the_pop(backend: str) -> None:
    g, out = _stack(None, 0)
    with pytest.raises(tn.ExecutionError, match=r'StackPop node "pop_it"'):
        tn.Session(g, backend=backend).run(out)


def test_stack_pop_under_an_index_never_pushed_is_an_execution_error_naming_the_pop(backend: str) -> None:
    g, out = _stack(3, 2)
    with pytest.raises(tn.ExecutionError, match=r'StackPop node "pop_it"'):
        tn.Session(g, backend=backend).run(out)


# ---- TensorArrays --------------------------------------------------------------------------------------
def test_tensor_array_with_declared_shape_read_before_any_write_names_the_read(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        ta = tn.TensorArray(tn.float32, size=3, element_shape=[2])
        r = ta.read(1, name="early_read")
    with pytest.raises(tn.KernelError, match=r'TensorArrayRead node "early_read".*never written'):
        tn.Session(g, backend=backend).run(r)


def test_empty_tensor_array_with_declared_shape_stacks_to_an_empty_array(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        s = tn.TensorArray(tn.int32, size=0, element_shape=[2]).stack()
    got = tn.Session(g, backend=backend).run(s)
    assert got.shape == (0, 2) and got.dtype == np.int32


def test_negative_tensor_array_size_is_a_kernel_error_naming_the_op(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        ta = tn.TensorArray(tn.float32, size=tn.constant(-2), element_shape=[], name="neg_ta")
        n = ta.size()
    with pytest.raises(tn.KernelError, match=r'TensorArrayNew node "neg_ta.*negative size -2'):
        tn.Session(g, backend=backend).run(n)


@pytest.mark.parametrize("op, build, msg", [
    ("w_oob", lambda: tn.TensorArray(tn.float32, size=2).write(tn.constant(5), 1.0, name="w_oob").stack(),
     "index.*out of range for a TensorArray of size 2"),
    ("w_twice", lambda: tn.TensorArray(tn.float32, size=2).write(0, 1.0).write(0, 2.0, name="w_twice").stack(),
     "already written"),
    ("st_missing", lambda: tn.TensorArray(tn.float32, size=2).write(0, 1.0).stack(name="st_missing"),
     "never written"),
    ("the_div", lambda: tn.divide(tn.constant(3), tn.constant(0) + tn.constant(0), name="the_div"),
     "integer division by zero"),
])
def test_kernel_errors_name_their_op_on_both_backends(backend: str, op: str, build: Any, msg: str) -> None:
    g = tn.Graph()
    with g.as_default():
        out = build()
    with pytest.raises(tn.KernelError, match=rf'node "{op}".*{msg}'):
        tn.Session(g, backend=backend).run(out)


def test_gradient_tensor_arrays_are_zero_where_nothing_was_read() -> None:
    """The gradient of an unstacked TensorArray read at one slot is zero at the others (the zeros path of
    the gradient TensorArray's stack), also when the reads happen in a loop."""
    def one_slot() -> Any:
        x = tn.placeholder(tn.float32, shape=[3], name="x")
        ta = tn.TensorArray(tn.float32, size=3).unstack(x)
        return tn.gradients(ta.read(1) * 2.0, [x]), x

    got = _same(_both(one_slot, lambda x: {x: np.arange(3, dtype=np.float32)}))
    np.testing.assert_array_equal(got[0], [0.0, 2.0, 0.0])

    def in_a_loop() -> Any:
        x = tn.placeholder(tn.float32, shape=[4, 2], name="x")
        ta = tn.TensorArray(tn.float32, size=4).unstack(x)
        _, s = tn.while_loop(lambda i, s: i < 2, lambda i, s: (i + 1, s + tn.reduce_sum(ta.read(i) * ta.read(i))),
                             [tn.constant(0), tn.constant(0.0)])
        return tn.gradients(s, [x]), x

    xv = np.arange(8, dtype=np.float32).reshape(4, 2)
    got = _same(_both(in_a_loop, lambda x: {x: xv}))
    np.testing.assert_array_equal(got[0], np.where(np.arange(4)[:, None] < 2, 2 * xv, 0.0))


def test_gradient_through_tensor_array_writes_in_a_loop() -> None:
    def build() -> Any:
        x = tn.placeholder(tn.float32, shape=[], name="x")
        _, ta = tn.while_loop(lambda i, ta: i < 3,
                              lambda i, ta: (i + 1, ta.write(i, x * tn.cast(i, tn.float32))),
                              [tn.constant(0), tn.TensorArray(tn.float32, size=3)])
        y = ta.read(2) + ta.read(1) * x
        return [y, *tn.gradients(y, [x])], x

    y, dy = _same(_both(build, lambda x: {x: np.float32(2.0)}))
    assert (float(y), float(dy)) == (8.0, 6.0)  # y = 2x + x^2


def test_gradient_tensor_array_with_an_unknown_dimension() -> None:
    """The reference computes the zeros of a gradient TensorArray whose element shape has an unknown
    dimension. The fast backend must know the shape of those zeros when compiling: the gradient saves
    the shape on a stack in the loop, and every push of it pushes one constant while tracing, which the
    pop returns (``Emitter.note_push``), so the program compiles (it ran on the interpreter before)."""
    def build() -> Any:
        x = tn.placeholder(tn.float32, shape=[3, None], name="x")
        ta = tn.TensorArray(tn.float32, size=3).unstack(x)
        _, s = tn.while_loop(lambda i, s: i < 1, lambda i, s: (i + 1, s + tn.reduce_sum(ta.read(i))),
                             [tn.constant(0), tn.constant(0.0)])
        return tn.gradients(s, [x]), x

    g = tn.Graph()
    with g.as_default():
        grads, x = build()
    feeds = {x: np.ones((3, 2), np.float32)}
    np.testing.assert_array_equal(tn.Session(g).run(grads, feeds)[0],
                                  [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    sess = tn.Session(g, backend="fast", fallback=False)
    np.testing.assert_array_equal(sess.run(grads, feeds)[0], [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    assert sess.last_result.stats["executor"] == "compiled"


# ---- stop_gradient on a run-time value ----------------------------------------------------------------------
def test_stop_gradient_on_a_run_time_value(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        y = x * x + tn.stop_gradient(x * x * x)
        (dy,) = tn.gradients(y, [x])
    v, d = tn.Session(g, backend=backend).run([y, dy], {x: np.float32(3.0)})
    assert (float(v), float(d)) == (36.0, 6.0)


# ---- every elementwise op on run-time values -------------------------------------------------------------
# test_ops.py checks each op on constants, which the fast backend folds with the reference kernels before
# compiling; here the same tables run on fed values, so the fast backend's own lowering computes them.

def _fed(x: Any) -> tuple[tn.Tensor, Any]:
    x = np.asarray(x)
    return tn.placeholder(tn.as_dtype(x.dtype), shape=list(x.shape)), x


@pytest.mark.parametrize("name,op,ref,x", UNARY, ids=[u[0] for u in UNARY])
def test_unary_ops_on_fed_values(backend: str, name: str, op: Any, ref: Any, x: np.ndarray) -> None:
    g = tn.Graph()
    with g.as_default():
        p, v = _fed(x)
        t = op(p)
    got = tn.Session(g, backend=backend).run(t, {p: v})
    want = ref(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("name,op,ref,a,b", BINARY, ids=[u[0] for u in BINARY])
def test_binary_ops_on_fed_values(backend: str, name: str, op: Any, ref: Any, a: Any, b: Any) -> None:
    g = tn.Graph()
    with g.as_default():
        (pa, va), (pb, vb) = _fed(a), _fed(b)
        t = op(pa, pb)
    got = tn.Session(g, backend=backend).run(t, {pa: va, pb: vb})
    want = np.asarray(ref(a, b))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("k", [-3, -1, 0, 2])
def test_getitem_with_a_fed_index_at_both_ends(backend: str, k: int) -> None:
    """A run-time index may be any of -n .. n-1 (the range check is exact at both ends)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(np.array([10.0, 20.0, 30.0], np.float32))
        i = tn.placeholder(tn.int32, shape=[], name="i")
        y = x[i]
    assert float(tn.Session(g, backend=backend).run(y, {i: np.int32(k)})) == [10.0, 20.0, 30.0][k]
    with pytest.raises(tn.KernelError, match="out of range"):
        tn.Session(g, backend=backend).run(y, {i: np.int32(k - 4 if k < 0 else k + 3)})


def test_a_value_fast_cannot_lower_is_refused_naming_the_op_and_its_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lowering rule that fails on the values it is given (a ``TypeError`` or ``ValueError`` of its
    own, as a rule meeting a value kind it does not stack would raise) is refused, with the fallback
    off, as an ``UnsupportedError`` that names the op and the node, not a bare lowering failure.
    (TensorFlow's gradient of a scan, which once pushed a TensorArray flow onto a stack, now
    compiles: its flow is stacked as a token; the fault is injected into the rule table instead.)"""
    from turnout.errors import UnsupportedError
    from turnout.fast.lowering import LOWERING_RULES

    def refuses(ctx: object, n: object, xs: object) -> list[object]:
        raise TypeError("a value of a kind this rule does not take")

    monkeypatch.setitem(LOWERING_RULES, "Tanh", refuses)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        y = tn.tanh(x, name="squash")
    with pytest.raises(UnsupportedError, match=r'fast backend: cannot lower Tanh node "squash".*: a value of a kind'):
        tn.Session(g, backend="fast", fallback=False).run(y, {x: np.ones(2, np.float32)})
