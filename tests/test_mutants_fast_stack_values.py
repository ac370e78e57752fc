"""Laws of a gradient stack as a value (``turnout.fast.stack_values``): its keys, its buffers made in
a trace and outside one, its bytes, where its buffers live, its push and pop, and the small helpers
the drivers share (committed scalars and zeros, the split of the run state, the buffers kept
between runs). Each law kills mutants of the full set of ``fast/stack_values.py`` (issue 40, part 3;
``python tools/mutation.py --module fast/stack_values.py --all``) that the stack runs of its list
leave alive or reach only through whole programs (seconds each).

Every function is called directly, on stacks of four or fewer entries, eagerly or inside one small
``jax.jit`` where what is checked is where a buffer lives (JAX keeps the memory kinds of a
program's results on the CPU too). The tests run with eight CPU devices (``conftest.py``), so a
value committed to device 3 is told apart from one left on the default device.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from turnout.errors import UnsupportedError
from turnout.fast import stack_values as sv
from turnout.fast.stack_values import StackValue


def _kind(x: Any) -> str:
    return str(x.sharding.memory_kind)


def _committed(x: Any) -> bool:
    """Whether array ``x`` is committed to its device (a jitted call's cache key reads it)."""
    return bool(x._committed)


def _full(cap: int = 4, ptr: int = 0, depth: int = 1, width: int = 3, dtype: Any = np.float32,
          record: bool = True, host: bool = False) -> StackValue:
    """A stack with buffers: entry ``j`` holds ``j + 1`` in every element, index record ``100 + j``."""
    buf = jnp.asarray(np.arange(1, cap + 1, dtype=dtype)[:, None] * np.ones((1, width), dtype))
    idx = jnp.asarray(np.arange(100, 100 + cap, dtype=np.int32)[:, None] * np.ones((1, depth), np.int32)) \
        if record else None
    return StackValue(cap, dtype, buf, idx, jnp.int32(ptr), record, host)


# --- keys and the run state ------------------------------------------------------------------------

def test_a_stacks_state_key_names_its_stacknew_and_a_held_stacks_key_is_no_stack_key() -> None:
    """Law: the run state keys the stack of StackNew ``7`` ``stack:7`` (the form its documentation
    and the kept buffers' report give) and a held stack's one value ``held:stack:7``, which does not
    begin as a stack key (the split of the state below must not take it for a stack)."""
    assert sv.state_key(7) == "stack:7" and sv.STACK_PREFIX == "stack:"
    held = sv.HELD_PREFIX + sv.state_key(7)
    assert held == "held:stack:7" and not held.startswith(sv.STACK_PREFIX)


def test_the_run_state_splits_into_its_stacks_and_the_rest_by_value_or_by_key() -> None:
    """Law: ``split_state`` puts every ``StackValue``, and every value under a stack key (a kept value
    buffer alone, for the fused stage), among the stacks, and everything else (the error word,
    Variables, a held stack's value) in the rest, each value as it was."""
    a, b, c, d, e = (np.full(2, float(i), np.float32) for i in range(5))
    s = StackValue(4, np.float32)
    state = {"err": a, "var:v": b, "stack:3": c, "oddly_named": s, "held:stack:4": d, "stack:9": _full(), "x": e}
    rest, stacks = sv.split_state(state)
    assert set(rest) == {"err", "var:v", "held:stack:4", "x"} and set(stacks) == {"stack:3", "oddly_named", "stack:9"}
    assert all((rest | stacks)[k] is v for k, v in state.items())


# --- the value: construction, replacement, its pytree ----------------------------------------------

def test_a_new_stack_is_pending_keeps_a_record_lives_on_the_device_and_holds_a_numpy_dtype() -> None:
    """Law: a stack made with a capacity and a dtype alone is pending (no buffer, no pointer), makes
    an index record at its first push and lives in device memory; its dtype is a ``numpy.dtype``
    whatever names it."""
    s = StackValue(4, "float16")
    assert s.pending and s.buf is None and s.idx is None and s.ptr is None
    assert s.capacity == 4 and s.record is True and s.host is False
    assert isinstance(s.dtype, np.dtype) and s.dtype == np.dtype(np.float16)
    assert s.nbytes() == 0


def test_replace_gives_new_arrays_and_keeps_capacity_dtype_record_and_memory() -> None:
    """Law: ``replace`` swaps the three arrays and keeps everything else, a positional host stack's
    flags included."""
    s = StackValue(4, np.int16, "b0", None, "p0", record=False, host=True)
    r = s.replace("b1", "i1", "p1")
    assert (r.capacity, r.dtype, r.buf, r.idx, r.ptr, r.record, r.host) == (4, np.dtype(np.int16), "b1", "i1", "p1",
                                                                           False, True)


def test_a_stack_is_a_pytree_of_its_three_arrays_with_its_flags_static() -> None:
    """Law: a stack flattens to its buffer, index record and pointer, in that order (a pending one to
    nothing), and unflattens with its capacity, dtype, record flag and memory kept; so it crosses a
    ``jax.jit`` boundary whole."""
    s = _full(ptr=2, host=True, record=True)
    leaves, tree = jax.tree_util.tree_flatten(s)
    assert len(leaves) == 3 and leaves[0] is s.buf and leaves[1] is s.idx and leaves[2] is s.ptr
    back = jax.tree_util.tree_unflatten(tree, [1, 2, 3])
    assert (back.capacity, back.dtype, back.record, back.host, back.buf, back.idx, back.ptr) == \
        (4, np.dtype(np.float32), True, True, 1, 2, 3)
    assert jax.tree_util.tree_leaves(StackValue(4, np.float32)) == []
    out = jax.jit(lambda t: t.replace(t.buf * 2, t.idx, t.ptr + 1))(_full(ptr=1))
    assert isinstance(out, StackValue) and int(out.ptr) == 2 and float(out.buf[0, 0]) == 2.0


def test_a_stacks_bytes_are_its_value_buffer_and_its_index_record() -> None:
    """Law: ``nbytes`` counts the value buffer (its elements times their size) and the index record
    (four bytes an entry), nothing for a positional stack's absent record, nothing for a pending
    stack; ``stack_nbytes`` reads a stack so, and a kept value buffer alone as its bytes plus the
    index record the call makes (none by default)."""
    s = _full(cap=4, depth=2, width=3, dtype=np.float16)
    assert s.nbytes() == s.buf.nbytes + s.idx.nbytes and isinstance(s.nbytes(), int)
    p = _full(cap=4, width=3, dtype=np.float16, record=False)
    assert p.nbytes() == p.buf.nbytes
    assert sv.stack_nbytes(s) == s.nbytes() and sv.stack_nbytes(StackValue(4, np.float32)) == 0
    assert sv.stack_nbytes(s.buf) == s.buf.nbytes and sv.stack_nbytes(s.buf, 12) == s.buf.nbytes + 12


def test_the_buffers_kept_between_runs_are_a_stacks_arrays_or_a_value_buffer_alone() -> None:
    """Law: ``kept_arrays`` reads a stack as its value buffer and index record, a pending stack or
    nothing as none, and a value buffer kept alone (the fused stage's) as itself with no record."""
    s, buf = _full(), jnp.zeros((4, 2))
    got = sv.kept_arrays(s)
    assert got[0] is s.buf and got[1] is s.idx
    assert sv.kept_arrays(None) == (None, None) and sv.kept_arrays(StackValue(4, np.float32)) == (None, None)
    got = sv.kept_arrays(buf)
    assert got[0] is buf and got[1] is None


# --- buffers made in a trace and outside one --------------------------------------------------------

@pytest.mark.parametrize("record,host", [(True, False), (False, True)])
def test_a_pending_stack_materializes_zero_buffers_of_its_dtype_where_it_lives(record: bool, host: bool) -> None:
    """Law: ``materialize`` makes, inside a trace, a zero value buffer of the stack's capacity, element
    shape and dtype (in host memory for a host stack), an int32 zero index record of the index shape
    unless the stack is positional, and an int32 pointer 0."""
    s = StackValue(4, np.int16, record=record, host=host)
    m = jax.jit(lambda: s.materialize((3,), (2,)))()
    assert m.buf.shape == (4, 3) and m.buf.dtype == np.int16 and not np.asarray(m.buf).any()
    assert _kind(m.buf) == ("pinned_host" if host else "device")
    assert m.ptr.shape == () and m.ptr.dtype == np.int32 and int(m.ptr) == 0
    assert (m.capacity, m.dtype, m.record, m.host) == (4, np.dtype(np.int16), record, host)
    if record:
        assert m.idx.shape == (4, 2) and m.idx.dtype == np.int32 and not np.asarray(m.idx).any()
    else:
        assert m.idx is None


@pytest.mark.parametrize("on", [None, 3])
def test_allocate_makes_committed_zero_buffers_on_the_device_asked(on: Any) -> None:
    """Law: ``allocate`` makes, outside a trace, zero buffers of the capacity, element and index shapes
    (values of the stack's dtype, an int32 record and pointer), each committed to the device given
    (JAX's default device when none is)."""
    device = None if on is None else jax.devices()[on]
    s = StackValue(4, np.int16).allocate((3,), (2,), device)
    want = device if device is not None else jax.devices()[0]
    for a, shape, dtype in ((s.buf, (4, 3), np.int16), (s.idx, (4, 2), np.int32), (s.ptr, (), np.int32)):
        assert a.shape == shape and a.dtype == dtype and not np.asarray(a).any()
        assert a.devices() == {want} and _committed(a)
    assert s.capacity == 4 and s.dtype == np.int16


@pytest.mark.parametrize("on", [None, 5])
def test_device_zeros_are_committed_to_the_device_asked(on: Any) -> None:
    """Law: ``device_zeros`` gives zeros of the shape and dtype asked, committed to the device given,
    or to JAX's default device when none is (a fresh array is not committed by itself)."""
    device = None if on is None else jax.devices()[on]
    x = sv.device_zeros((2, 3), np.int16, device)
    assert x.shape == (2, 3) and x.dtype == np.int16 and not np.asarray(x).any()
    assert x.devices() == {device if device is not None else jax.devices()[0]} and _committed(x)


def test_committed_commits_an_array_to_the_device_it_lies_on() -> None:
    """Law: ``committed`` gives the same values on the same device, committed there (``jnp`` makes a
    fresh array uncommitted)."""
    x = jnp.arange(3, dtype=jnp.int32)
    assert not _committed(x)
    y = sv.committed(x)
    assert _committed(y) and y.devices() == x.devices()
    np.testing.assert_array_equal(np.asarray(y), np.arange(3))


# --- where buffers live ------------------------------------------------------------------------------

def test_host_memory_moves_and_placement_put_a_buffer_where_its_stack_lives() -> None:
    """Law: inside a trace ``to_host_memory`` moves a value to host memory and ``to_device_memory``
    brings it back, values unchanged; ``placed`` moves a host stack's buffer and leaves a device
    stack's where it is. Host memory is apart from the device's everywhere but on the CPU."""
    def f(x: Any) -> Any:
        h = sv.to_host_memory(x)
        return h, sv.to_device_memory(h), sv.placed(x, True), sv.placed(x, False)

    x = jnp.arange(4.0)
    h, d, ph, pd = jax.jit(f)(x)
    assert [_kind(v) for v in (h, d, ph, pd)] == ["pinned_host", "device", "pinned_host", "device"]
    for v in (h, d, ph, pd):
        np.testing.assert_array_equal(np.asarray(v), np.arange(4.0))
    assert not sv.host_apart("cpu") and sv.host_apart("gpu") and sv.host_apart("tpu")


class _Trim:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, pad: Any) -> int:
        self.calls.append(pad)
        return 1


def test_freed_memory_is_trimmed_on_the_cpu_only_and_only_where_the_c_library_can(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Law: ``return_freed_memory`` calls ``malloc_trim(0)`` once on the CPU, never elsewhere, and
    does nothing where the C library has no ``malloc_trim`` (a stand-in for glibc's records calls)."""
    trim = _Trim()
    monkeypatch.setattr(sv, "_malloc_trim", lambda: trim)
    sv.return_freed_memory("gpu")
    assert trim.calls == []
    sv.return_freed_memory("cpu")
    assert trim.calls == [0]
    monkeypatch.setattr(sv, "_malloc_trim", lambda: None)
    sv.return_freed_memory("cpu")  # (no C function: nothing to call)


# --- push ----------------------------------------------------------------------------------------------

def test_a_pending_stacks_first_push_makes_its_buffers_and_writes_entry_zero() -> None:
    """Law: pushing on a pending stack fixes its element and index shapes from the pushed value and
    index, writes both at entry 0 and moves the pointer to 1 (int32), ``ok``."""
    s, ok = sv.push(StackValue(4, np.float32), np.array([7, 8]), np.array([1.5, 2.5, 3.5]))
    assert bool(ok) and s.ptr.dtype == np.int32 and int(s.ptr) == 1
    assert s.buf.shape == (4, 3) and s.idx.shape == (4, 2)
    np.testing.assert_array_equal(np.asarray(s.buf[0]), [1.5, 2.5, 3.5])
    np.testing.assert_array_equal(np.asarray(s.idx[0]), [7, 8])
    assert not np.asarray(s.buf[1:]).any() and not np.asarray(s.idx[1:]).any()


def test_a_pushed_value_is_rounded_once_to_the_stacks_dtype() -> None:
    """Law: a value is converted to the stack's dtype as it is pushed, in one step: ``1 + 2**-11 +
    2**-30`` lies just above the float16 halfway point between 1 and ``1 + 2**-10`` and rounds up; had
    it gone through float32 first (JAX's default) it would round to the halfway point and then to
    even, 1."""
    v = np.float64(1 + 2.0 ** -11 + 2.0 ** -30)
    want = np.float16(v)
    s, _ = sv.push(StackValue(2, np.float16), np.int32(0), v)
    assert s.buf.dtype == np.float16 and np.asarray(s.buf)[0] == want


def test_a_full_stack_refuses_the_push_and_its_value_lands_on_the_last_entry() -> None:
    """Law: a push on a stack with room writes its value and index at the pointer and moves the pointer
    by one, ``ok``; on a full stack ``ok`` is false, the pointer stays at the capacity and the value
    and index land, unguarded, on the last entry."""
    s = _full(cap=2, depth=2)
    oks, ptrs = [], []
    for t in range(3):
        s, ok = sv.push(s, np.array([t, 10 * t]), np.full(3, 5.0 + t))
        oks.append(bool(ok))
        ptrs.append(int(s.ptr))
    assert oks == [True, True, False] and ptrs == [1, 2, 2] and s.ptr.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(s.buf), [[5.0] * 3, [7.0] * 3])
    np.testing.assert_array_equal(np.asarray(s.idx), [[0, 0], [2, 20]])


@pytest.mark.parametrize("free,limit,oks,ptrs", [
    (False, None, [True, True, False, False], [1, 2, 2, 2]),
    (False, 3, [True, True, False, False], [1, 2, 2, 2]),
    (True, None, [True, True, False, False], [1, 2, 3, 4]),
    (True, 3, [True, True, True, False], [1, 2, 3, 4])])
def test_a_free_pointer_counts_past_the_capacity_and_a_limit_moves_the_overflow(
        free: bool, limit: Any, oks: list[bool], ptrs: list[int]) -> None:
    """Law: with ``free`` the pointer moves by one at every push, fitted or not; the push overflows at
    the capacity, or at ``limit`` where one is given with ``free`` (a limit without ``free`` is
    ignored). Four pushes on a stack of two entries."""
    s = _full(cap=2)
    got_ok, got_ptr = [], []
    for t in range(4):
        s, ok = sv.push(s, np.array([t]), np.full(3, float(t)), free=free, limit=limit)
        got_ok.append(bool(ok))
        got_ptr.append(int(s.ptr))
    assert got_ok == oks and got_ptr == ptrs


def test_a_proved_push_writes_at_the_pointer_and_leaves_the_record_alone() -> None:
    """Law: a ``proved`` push (a counted stack) writes the value at the pointer, moves it by one, keeps
    the index record as it was (the same array) and answers the constant ``True``."""
    s = _full(cap=4, ptr=1)
    out, ok = sv.push(s, np.array([55]), np.full(3, 9.0), proved=True)
    assert isinstance(ok, np.bool_) and bool(ok)
    assert out.idx is s.idx and int(out.ptr) == 2
    np.testing.assert_array_equal(np.asarray(out.buf[:, 0]), [1.0, 9.0, 3.0, 4.0])


def test_pushes_keep_a_host_stacks_buffer_in_host_memory_and_a_device_stacks_on_the_device() -> None:
    """Law: inside a trace a host stack's buffer stays in host memory through a push, proved or not,
    and a device stack's on the device; the values are the same."""
    def f(v: Any) -> Any:
        out = []
        for host in (True, False):
            s = _full(cap=4, ptr=1, host=host)
            s = s.replace(sv.placed(s.buf, host), s.idx, s.ptr)
            a, _ = sv.push(s, np.array([1]), v)
            b, _ = sv.push(s, np.array([1]), v, proved=True)
            out += [a.buf, b.buf]
        return out

    bufs = jax.jit(f)(jnp.full(3, 9.0))
    assert [_kind(b) for b in bufs] == ["pinned_host"] * 2 + ["device"] * 2
    for b in bufs:
        np.testing.assert_array_equal(np.asarray(b[:, 0]), [1.0, 9.0, 3.0, 4.0])


def test_a_push_of_the_wrong_shape_is_refused_naming_the_shapes() -> None:
    """Law: a value or an index whose shape is not the stack's element or index shape is refused (a
    preallocated stack must not broadcast), the message naming both shapes (the index's only for a
    stack with a record); a positional stack takes an index of any shape."""
    s = _full(cap=4, depth=2, width=3)
    with pytest.raises(UnsupportedError) as e:
        sv.push(s, np.array([1, 2]), np.zeros(2))
    assert str(e.value).endswith(f"a value of shape {(2,)} (index {(2,)}) pushed on a stack of elements {(3,)} "
                                 f"(index {(2,)})")
    with pytest.raises(UnsupportedError) as e:
        sv.push(s, np.array([1, 2, 3]), np.zeros(3))
    assert f"(index {(3,)}) pushed" in str(e.value) and str(e.value).endswith(f"(index {(2,)})")
    p = _full(cap=4, width=3, record=False)
    with pytest.raises(UnsupportedError) as e:
        sv.push(p, np.int32(1), np.zeros(2))
    assert str(e.value).endswith(f"on a stack of elements {(3,)}")
    out, ok = sv.push(p, np.array([1, 2, 3]), np.ones(3))
    assert bool(ok) and out.idx is None and int(out.ptr) == 1


# --- positional stacks ---------------------------------------------------------------------------------

def test_a_positional_push_holds_when_the_index_is_the_entrys_position() -> None:
    """Law: ``positional`` is true for any push on a stack that keeps a record (pending or not); on a
    positional stack it holds when the pushed index (read as an int32) is the position the push
    writes: 0 for the first push, the pointer after it."""
    assert sv.positional(StackValue(4, np.float32), np.int32(3)) is True
    assert sv.positional(_full(ptr=2), np.int32(5)) is True
    pending = StackValue(4, np.float32, record=False)
    assert bool(sv.positional(pending, 0)) and bool(sv.positional(pending, 0.7))
    assert not bool(sv.positional(pending, 1))
    p = _full(ptr=2, record=False)
    assert bool(sv.positional(p, 2)) and bool(sv.positional(p, 2.4)) and not bool(sv.positional(p, 1))


# --- pop -------------------------------------------------------------------------------------------------

def test_a_pop_reads_the_top_entry_and_matches_its_recorded_index() -> None:
    """Law: a pop reads the entry under the pointer, moves the pointer down by one (int32), ``ok``, and
    ``match`` says whether the index recorded with that entry is the one asked (read as an int32)."""
    s = _full(cap=4, ptr=2)  # entries 1 and 2 recorded under 100 and 101
    out, v, ok, match = sv.pop(s, np.array([101]))
    np.testing.assert_array_equal(np.asarray(v), [2.0] * 3)
    assert bool(ok) and bool(match) and int(out.ptr) == 1 and out.ptr.dtype == np.int32
    assert out.buf is s.buf and out.idx is s.idx and out.capacity == 4
    _, _, _, mismatch = sv.pop(s, np.array([100]))
    assert not bool(mismatch)
    _, v1, ok1, match1 = sv.pop(out, 100.3)
    np.testing.assert_array_equal(np.asarray(v1), [1.0] * 3)
    assert bool(ok1) and bool(match1)


@pytest.mark.parametrize("free,after", [(False, 0), (True, -1)])
def test_a_pop_of_an_empty_stack_underflows_and_a_free_pointer_goes_below_zero(free: bool, after: int) -> None:
    """Law: a pop of an empty stack is not ``ok`` (its ``match`` holds: there is nothing to mismatch),
    reads entry 0, and leaves the pointer at 0, or moves it to -1 where the pointer runs free."""
    out, v, ok, match = sv.pop(_full(cap=4, ptr=0), np.array([7]), free=free)
    assert not bool(ok) and bool(match) and int(out.ptr) == after and out.ptr.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(v), [1.0] * 3)


def test_a_free_pop_moves_the_pointer_by_one() -> None:
    """Law: a free pop with entries moves the pointer down by exactly one."""
    out, _, ok, _ = sv.pop(_full(cap=4, ptr=3), np.array([102]), free=True)
    assert bool(ok) and int(out.ptr) == 2


def test_a_positional_pop_matches_the_position_it_reads() -> None:
    """Law: a positional stack (no record) matches a pop whose index is the position read (the
    pointer less one), and no other."""
    s = _full(cap=4, ptr=3, record=False)
    out, v, ok, match = sv.pop(s, np.int32(2))
    assert bool(ok) and bool(match) and out.idx is None
    np.testing.assert_array_equal(np.asarray(v), [3.0] * 3)
    assert not bool(sv.pop(s, np.int32(1))[3])


def test_a_host_stacks_pop_brings_the_value_to_the_device() -> None:
    """Law: inside a trace a value popped from a host stack is in device memory, the buffer stays in
    host memory, and the value is the device stack's."""
    def f() -> Any:
        out = []
        for host in (True, False):
            s = _full(cap=4, ptr=2, host=host)
            s = s.replace(sv.placed(s.buf, host), s.idx, s.ptr)
            r, v, _, _ = sv.pop(s, np.array([101]))
            out += [r.buf, v]
        return out

    hb, hv, db, dv = jax.jit(f)()
    assert [_kind(x) for x in (hb, hv, db, dv)] == ["pinned_host", "device", "device", "device"]
    np.testing.assert_array_equal(np.asarray(hv), np.asarray(dv))


def test_a_pop_without_free_stops_its_pointer_at_zero() -> None:
    """Law: a pop runs its pointer free only when asked (``free`` is off by default, as in ``push``):
    a pop of an empty stack, asked nothing, leaves the pointer at 0."""
    out, _, ok, _ = sv.pop(_full(cap=4, ptr=0), np.array([7]))
    assert not bool(ok) and int(out.ptr) == 0


def test_a_device_stacks_pop_makes_no_memory_move_and_a_host_stacks_one() -> None:
    """Law: a pop from a stack in device memory reads its entry as it is, with no move between
    memories in the traced program; only a host stack's pop brings its entry to the device (one
    ``device_put``)."""
    def moves(host: bool) -> int:
        s = _full(cap=4, ptr=2, host=host)

        def f(buf: Any) -> Any:
            return sv.pop(s.replace(buf, s.idx, s.ptr), np.array([101]))[1]

        return [e.primitive.name for e in jax.make_jaxpr(f)(s.buf).jaxpr.eqns].count("device_put")

    assert moves(False) == 0 and moves(True) == 1


# --- scalars and zeros the drivers make --------------------------------------------------------------

def test_scalars_are_int32_and_committed_to_the_device_of_what_they_go_with() -> None:
    """Law: ``scalar_on`` / ``scalars_on`` give int32 scalars of the values asked, committed to the
    device of ``like`` (device 2 here); for a ``like`` with no device (a numpy array) plain int32
    scalars, which stay int32 beside a smaller integer type."""
    like = jax.device_put(np.zeros(2, np.float32), jax.devices()[2])
    one = sv.scalar_on(like, 6)
    assert int(one) == 6 and one.dtype == np.int32 and one.devices() == {jax.devices()[2]} and _committed(one)
    many = sv.scalars_on(like, [3, 4])
    assert [int(x) for x in many] == [3, 4] and all(x.devices() == {jax.devices()[2]} and _committed(x) for x in many)
    plain = sv.scalars_on(np.zeros(2), [3, 4])
    assert [int(x) for x in plain] == [3, 4] and all((x + np.int16(1)).dtype == np.int32 for x in plain)


def test_zeros_like_all_makes_zeros_on_the_arrays_device_with_one_compiled_call_per_signature() -> None:
    """Law: ``zeros_like_all`` gives zeros of each array's shape and dtype on the arrays' device
    (device 4 here), made by one compiled function per signature and device, kept and used again; for
    arrays with no device (numpy), plain zeros."""
    dev = jax.devices()[4]
    arrays = [jax.device_put(np.ones((2, 3), np.int16), dev), jax.device_put(np.ones(4, np.float32), dev)]
    got = sv.zeros_like_all(arrays)
    for z, a in zip(got, arrays, strict=True):
        assert z.shape == a.shape and z.dtype == a.dtype and not np.asarray(z).any() and z.devices() == {dev}
    key = (((2, 3), np.dtype(np.int16).str), ((4,), np.dtype(np.float32).str)), dev
    fn = sv._ZEROS[key]
    again = sv.zeros_like_all(arrays)
    assert sv._ZEROS[key] is fn and [z.shape for z in again] == [(2, 3), (4,)]
    (one,) = sv.zeros_like_all(arrays[1:])
    assert one.shape == (4,) and one.devices() == {dev}
    plain = sv.zeros_like_all([np.ones((2, 2), np.int16)])
    assert plain[0].shape == (2, 2) and plain[0].dtype == np.int16 and not np.asarray(plain[0]).any()


@pytest.mark.parametrize("index", [float("nan"), 3e9])
def test_a_pushed_index_is_converted_to_int32_as_it_is_pushed_and_one_int32_cannot_hold_is_refused(
        index: float) -> None:
    """Law: a push converts its iteration index to int32 at once (as ``numpy`` does): an index no
    int32 holds (NaN, three billion) is refused there, not saturated into the index record."""
    s = StackValue(4, np.float32, jnp.zeros((4, 3), jnp.float32), jnp.zeros(4, jnp.int32), jnp.int32(0))
    sv.push(s, 2.7, np.zeros(3))  # (a scalar index, as the record's entries)
    with pytest.raises((ValueError, OverflowError)):
        sv.push(s, index, np.zeros(3))
