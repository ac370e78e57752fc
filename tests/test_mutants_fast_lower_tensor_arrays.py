"""Laws of the TensorArray lowering's helpers (``turnout.fast.lower_tensor_arrays``): an index into an
array of static size is checked (unless a constant or a proved range makes the check moot) and
clamped into it, a constant staying a Python int; one into a dynamic array is checked not negative
and within the capacity where the op grows it (the capacity's error is ``overflow``), else below its
run-time length; a write grows a dynamic array's length to one past its index and records the
constant slots written (up to 64); an array's element shape is declared when every array that can
reach it (through writes, accumulations, sums and loop plumbing) was made with one or unstacked; a
dynamic array's stack checks its first ``length`` slots; unwritten slots read as zeros, and the sum
of two arrays one of which is dynamic has the larger capacity and length. Each law kills mutants of
the full set of ``fast/lower_tensor_arrays.py`` (issue 40, part 3; ``python tools/mutation.py
--module fast/lower_tensor_arrays.py --all``).

The helpers are called directly, with a stand-in lowering context that records its checks and
answers range questions as told, on ``TA`` values and stand-in graph nodes built by hand.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import turnout as tn
from turnout.errors import UnsupportedError, describe_node
from turnout.fast import lower_tensor_arrays as lta
from turnout.fast.lowering_base import NeedsStatic
from turnout.fast.values import TA, Stacked, is_static


class _Ctx:
    """A lowering context that records each check (its condition as numpy, message and code) and
    knows an index in a range exactly where ``within`` says so, recording what it was asked."""

    def __init__(self, within: bool = False, fed: frozenset[int] = frozenset()) -> None:
        self.checks: list[tuple[Any, str, str]] = []
        self.asked: list[tuple[Any, int, int]] = []
        self.fed = set(fed)

        def ask(v: Any, lo: int, hi: int) -> bool:
            self.asked.append((v, lo, hi))
            return within

        self.ranges = SimpleNamespace(within=ask)

    def check(self, ok: Any, message: str, code: str = "kernel", shows: Any = None) -> None:
        self.checks.append((np.asarray(ok), message, code))


def _node() -> Any:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int32, [2], name="a")
        b = tn.placeholder(tn.int32, [2], name="b")
        return (a + b).node


N = _node()
OP = "TensorArrayRead"
RANGE = f"{describe_node(N)}: {OP}: index out of range for a TensorArray of size "


def _static(size: int) -> TA:
    return TA(size, np.float32, (2,), jnp.zeros((size, 2), np.float32), jnp.zeros((size,), jnp.int8))


def _dynamic(cap: int, length: int) -> TA:
    return TA(cap, np.float32, (2,), jnp.zeros((cap, 2), np.float32), jnp.zeros((cap,), jnp.int8),
              length=np.int32(length))


def _oks(ctx: _Ctx) -> list[tuple[bool, str, str]]:
    return [(bool(ok), m, c) for ok, m, c in ctx.checks]


# ---- indices ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("i", "ok", "slot"), [(0, True, 0), (2, True, 2), (3, True, 3), (4, False, 3), (-1, False, 0)])
def test_a_constant_index_into_a_static_array_is_checked_and_clamped_to_a_python_int(i: int, ok: bool,
                                                                                      slot: int) -> None:
    ctx = _Ctx()
    got = lta._ta_index(ctx, N, _static(4), np.int32(i), OP)
    assert type(got) is int and got == slot
    assert _oks(ctx) == [(ok, RANGE + "4", "kernel")]


def test_an_index_into_an_empty_static_array_is_refused_and_clamped_to_zero() -> None:
    for i in (np.int32(0), np.int32(2), jnp.int32(0), jnp.int32(2)):
        ctx = _Ctx()
        assert int(lta._ta_index(ctx, N, _static(0), i, OP)) == 0
        assert _oks(ctx) == [(False, RANGE + "0", "kernel")]


def test_an_index_a_range_proves_within_the_array_is_used_unchecked() -> None:
    ctx = _Ctx(within=True)
    i = jnp.int32(2)
    assert lta._ta_index(ctx, N, _static(4), i, OP) is i
    assert ctx.checks == [] and ctx.asked == [(i, 0, 3)]


@pytest.mark.parametrize(("i", "ok", "slot"), [(0, True, 0), (3, True, 3), (4, False, 3), (-1, False, 0), (2, True, 2)])
def test_a_traced_index_into_a_static_array_is_checked_and_clamped(i: int, ok: bool, slot: int) -> None:
    ctx = _Ctx()
    got = lta._ta_index(ctx, N, _static(4), jnp.int32(i), OP)
    assert not is_static(got) and int(got) == slot
    assert _oks(ctx) == [(ok, RANGE + "4", "kernel")]
    assert [a[1:] for a in ctx.asked] == [(0, 3)]


GROW = f"{describe_node(N)}: {OP}: negative index into a TensorArray of dynamic size"
OUTGREW = f"{describe_node(N)}: a TensorArray of dynamic size outgrew its capacity of "
DYN = f"{describe_node(N)}: {OP}: index out of range for a TensorArray of dynamic size"


@pytest.mark.parametrize("static", [True, False], ids=["constant", "traced"])
@pytest.mark.parametrize(("i", "nonneg", "fits", "slot"), [(0, True, True, 0), (3, True, True, 3), (4, True, False, 3),
                                                         (-1, False, True, 0), (9, True, False, 3)])
def test_a_write_into_a_dynamic_array_checks_its_index_not_negative_and_within_its_capacity(
        static: bool, i: int, nonneg: bool, fits: bool, slot: int) -> None:
    """A growing op takes any slot from 0 up: beyond the capacity is the ``overflow`` error (the run
    goes again with more), not a range error; the slot is clamped into the buffer."""
    ctx = _Ctx()
    got = lta._ta_index(ctx, N, _dynamic(4, 1), np.int32(i) if static else jnp.int32(i), OP, grows=True)
    assert (type(got) is int) == static and int(got) == slot
    assert _oks(ctx) == [(nonneg, GROW, "kernel"), (fits, OUTGREW + "4", "overflow")]
    assert ctx.asked == []


@pytest.mark.parametrize("static", [True, False], ids=["constant", "traced"])
@pytest.mark.parametrize(("i", "ok", "slot"),
                         [(0, True, 0), (1, True, 1), (2, False, 2), (-1, False, 0), (5, False, 3)])
def test_a_read_of_a_dynamic_array_checks_its_index_below_its_length(static: bool, i: int, ok: bool, slot: int) -> None:
    ctx = _Ctx()
    got = lta._ta_index(ctx, N, _dynamic(4, 2), np.int32(i) if static else jnp.int32(i), OP)
    assert (type(got) is int) == static and int(got) == slot
    assert _oks(ctx) == [(ok, DYN, "kernel")]


def test_an_index_into_an_empty_dynamic_array_is_clamped_to_zero() -> None:
    for i in (np.int32(2), jnp.int32(2)):
        assert int(lta._ta_index(_Ctx(), N, _dynamic(0, 0), i, OP, grows=True)) == 0


# ---- what a write leaves -----------------------------------------------------------------------------
def test_a_write_grows_a_dynamic_arrays_length_to_one_past_its_index() -> None:
    assert lta._grown(_static(4), np.int32(2)) is None
    for length, i, want in ((2, 4, 5), (2, 0, 2), (3, 2, 3), (0, 0, 1)):
        got = lta._grown(_dynamic(8, length), np.int32(i))
        assert is_static(got) and got.dtype == np.int32 and int(got) == want
        with jax.enable_x64(True):
            for ta, ix in ((_dynamic(8, length), jnp.asarray(i, jnp.int64)),
                           (TA(8, np.float32, None, length=jnp.int32(length)), np.int64(i))):
                got = lta._grown(ta, ix)
                assert not is_static(got) and got.dtype == np.int32 and int(got) == want


def test_a_write_records_the_constant_slots_written_up_to_64() -> None:
    def ta(written: Optional[frozenset[int]]) -> Any:
        return SimpleNamespace(written=written)

    assert lta._written(ta(frozenset({1})), np.int32(2)) == {1, 2}
    assert lta._written(ta(frozenset({1})), np.int32(1)) == {1}
    assert lta._written(ta(frozenset()), np.int32(0)) == {0}
    assert lta._written(ta(None), np.int32(2)) is None
    assert lta._written(ta(frozenset({1})), jnp.int32(2)) is None
    assert lta._written(ta(frozenset(range(63))), np.int32(70)) == frozenset([*range(63), 70])
    assert lta._written(ta(frozenset(range(64))), np.int32(70)) is None


# ---- declared element shapes ----------------------------------------------------------------------
_ids = iter(range(1, 10_000))


class _Node:
    """A stand-in graph node (hashed by identity, as ``graph.sources`` collects them in a set)."""

    def __init__(self, op: str, inputs: tuple[Any, ...], attrs: dict[str, Any]) -> None:
        self.id, self.op, self.attrs = next(_ids), op, attrs
        self.inputs = [SimpleNamespace(node=x) for x in inputs]

    def __repr__(self) -> str:
        return f"{self.op}{self.attrs}"


def _n(op: str, *inputs: Any, **attrs: Any) -> Any:
    return _Node(op, inputs, attrs)


def _t(node: Any) -> Any:
    return SimpleNamespace(node=node)


@pytest.mark.parametrize(("node", "ok"), [
    (_n("TensorArrayNew", element_shape=(2, 3)), True), (_n("TensorArrayNew", element_shape=()), True),
    (_n("TensorArrayNew", element_shape=None), False), (_n("TensorArrayNew", element_shape=(2, None)), False),
    (_n("TensorArrayNew"), False), (_n("TensorArrayUnstack"), True),
    (_n("Placeholder", element_shape=(2,)), False)], ids=str)
def test_an_array_is_declared_when_made_with_a_whole_element_shape_or_unstacked(node: Any, ok: bool) -> None:
    assert lta._declared(_t(node)) is ok


def test_a_declaration_is_followed_through_writes_accumulations_sums_and_loops() -> None:
    """Writes and accumulations pass their input 0 (the array) on, not their index or value; a sum
    and a Merge pass every input on; an Identity its input."""
    new, bare = _n("TensorArrayNew", element_shape=(2,)), _n("TensorArrayNew")
    const = _n("Const")
    write = _n("TensorArrayWrite", new, const, const)
    acc = _n("TensorArrayAccumulate", write, const, const)
    assert lta._declared(_t(acc))
    assert lta._declared(_t(_n("Identity", _n("TensorArrayAdd", acc, _n("TensorArrayUnstack", const)))))
    assert not lta._declared(_t(_n("TensorArrayAdd", acc, _n("TensorArrayWrite", bare, const, const))))
    assert not lta._declared(_t(_n("Merge", acc, bare)))


# ---- stacks and zeros ----------------------------------------------------------------------------
STACKED = f"{describe_node(N)}: TensorArrayStack: some slots were never written"


@pytest.mark.parametrize(("mask", "length", "ok"), [((1, 1, 0, 0), 2, True), ((1, 0, 1, 1), 2, False),
                                                    ((0, 0, 0, 0), 0, True), ((1, 1, 1, 0), 4, False),
                                                    ((1, 1, 1, 1), 4, True), ((2, 1, 0, 0), 2, True)])
def test_a_dynamic_arrays_stack_checks_its_first_length_slots_and_cuts_them(mask: tuple[int, ...], length: int,
                                                                           ok: bool) -> None:
    buf = jnp.arange(8, dtype=np.float32).reshape(4, 2)
    ta = TA(4, np.float32, (2,), buf, jnp.asarray(mask, jnp.int8), length=np.int32(length))
    ctx = _Ctx()
    got = lta._stack_dynamic(ctx, N, ta)
    np.testing.assert_array_equal(got, np.arange(8, dtype=np.float32).reshape(4, 2)[:length])
    assert _oks(ctx) == [(ok, STACKED, "kernel")]
    ctx = _Ctx()
    ta = TA(4, np.float32, (2,), buf, jnp.asarray(mask, jnp.int8), length=jnp.int32(length))
    got = lta._stack_dynamic(ctx, N, ta)
    assert isinstance(got, Stacked) and got.buf is buf and got.length is ta.length
    assert _oks(ctx) == [(ok, STACKED, "kernel")]


def test_a_dynamic_arrays_stack_check_traces_no_64_bit_positions() -> None:
    """The positions compared with the length are int32 even where 64-bit values are on (as the
    fast backend traces)."""
    with jax.enable_x64(True):
        jaxpr = jax.make_jaxpr(_traced_check)(jnp.int32(2))
    dtypes = {str(v.aval.dtype) for e in jaxpr.eqns for v in e.outvars}
    assert "int64" not in dtypes


def _traced_check(length: Any) -> Any:
    """The condition ``_stack_dynamic`` checks, for a dynamic array of capacity 4 and ``length``."""
    got: list[Any] = []

    class Ctx(_Ctx):
        def check(self, ok: Any, message: str, code: str = "kernel", shows: Any = None) -> None:
            got.append(ok)

    lta._stack_dynamic(Ctx(), N, TA(4, np.float32, (2,), jnp.zeros((4, 2), np.float32), jnp.ones((4,), jnp.int8),
                                   length=length))
    return got[0]


@pytest.mark.parametrize("elem", [(2,), (), (2, 3)])
def test_unwritten_slots_read_as_zeros_of_the_arrays_dtype(elem: tuple[int, ...]) -> None:
    buf = np.arange(3 * int(np.prod(elem)), dtype=np.int32).reshape((3, *elem)) + 1
    mask = np.array([1, 0, 1], np.int8)
    got = lta._zeroed(TA(3, np.int32, elem, jnp.asarray(buf), jnp.asarray(mask)))
    want = buf.copy()
    want[1] = 0
    assert got.dtype == np.int32 and got.shape == buf.shape
    np.testing.assert_array_equal(got, want)


# ---- sums with a dynamic array ---------------------------------------------------------------------
def _ta(rows: list[list[int]], mask: list[int], length: Optional[int] = None) -> TA:
    buf = jnp.asarray(rows, jnp.int32)
    return TA(len(rows), np.int32, (2,), buf, jnp.asarray(mask, jnp.int8),
              length=None if length is None else np.int32(length))


def test_the_sum_of_arrays_one_dynamic_adds_their_written_slots_in_the_larger_capacity() -> None:
    a = _ta([[1, 2], [3, 4]], [1, 0], length=2)
    b = _ta([[10, 20], [30, 40], [50, 60]], [0, 1, 1])
    for x, y in ((a, b), (b, a)):
        got = lta._add_dynamic(x, y)
        assert got.size == 3 and got.dtype == np.int32 and got.elem_shape == (2,) and got.dynamic
        np.testing.assert_array_equal(got.buf, [[1, 2], [30, 40], [50, 60]])
        np.testing.assert_array_equal(got.mask, [1, 1, 1])
        assert int(got.length) == 3
    long = _ta([[1, 2], [3, 4], [5, 6], [7, 8]], [1, 1, 1, 1], length=4)
    assert int(lta._add_dynamic(long, b).length) == int(lta._add_dynamic(b, long).length) == 4


def test_the_sum_with_an_array_nothing_was_written_to_is_the_others_slots() -> None:
    b = _ta([[10, 20], [30, 40], [50, 60]], [0, 1, 1])
    pending = TA(5, np.int32, None, length=np.int32(4))
    for x, y in ((pending, b), (b, pending)):
        got = lta._add_dynamic(x, y)
        assert got.size == 5 and got.dtype == np.int32 and got.elem_shape == (2,) and int(got.length) == 4
        np.testing.assert_array_equal(got.buf, [[0, 0], [30, 40], [50, 60], [0, 0], [0, 0]])
        np.testing.assert_array_equal(got.mask, [0, 1, 1, 0, 0])


def test_the_sum_of_two_arrays_nothing_was_written_to_is_pending_in_the_larger_capacity() -> None:
    a = TA(5, np.int32, None, length=np.int32(4))
    b = TA(7, np.int32, None)
    for x, y in ((a, b), (b, a)):
        got = lta._add_dynamic(x, y)
        assert got.pending and got.size == 7 and got.dtype == np.int32 and got.elem_shape is None
        assert int(got.length) == 7
    got = lta._add_dynamic(a, TA(2, np.int32, None, length=np.int32(1)))
    assert got.size == 5 and int(got.length) == 4


# ---- static shapes -----------------------------------------------------------------------------------
def test_a_shape_argument_must_be_known_when_compiling() -> None:
    got = lta._static_shape(_Ctx(), N, np.asarray([2, 3], np.int64), 1)
    assert got == (2, 3) and all(type(d) is int for d in got)
    message = f"fast backend: {describe_node(N)}: the shape must be known when compiling"
    with pytest.raises(UnsupportedError) as e:
        lta._static_shape(_Ctx(), N, jnp.asarray([2, 3]), 1)
    assert str(e.value) == message and not isinstance(e.value, NeedsStatic)
    b = N.inputs[1].node
    with pytest.raises(NeedsStatic) as f:
        lta._static_shape(_Ctx(fed=frozenset({b.id})), N, jnp.asarray([2, 3]), 1)
    assert str(f.value) == message
    assert f.value.keys == frozenset({(b.id, 0)})
