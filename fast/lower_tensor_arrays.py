"""Lowering rules of TensorArrays and their gradients: a TensorArray is a ``(size, *elem)`` buffer
with a mask of written slots (``fast.values.TA``); indices are checked, or proved in range while
tracing (``fast.ranges``).
"""

from __future__ import annotations

from typing import Any, Optional

import jax.numpy as jnp
import numpy as np

from turnout import shapes as sh
from turnout.errors import UnsupportedError, describe_node
from turnout.fast.indexing import put, slot
from turnout.fast.lowering_base import (
    LoweringContext,
    guard,
    lowering_rule,
    not_static,
    np_dtype,
)
from turnout.fast.ranges import first_write, known_within
from turnout.fast.values import MASK_DTYPE, TA, Stacked, is_static
from turnout.graph import Node, Tensor, sources
from turnout.kernels import ta_element_mismatch
from turnout.validate import HANDLE_CARRIERS


# ---- TensorArray -----------------------------------------------------------------------------------
def _ta_index(ctx: LoweringContext, n: Node, ta: TA, i: Any, op: str, grows: bool = False) -> Any:
    """Slot ``i`` of ``ta``, checked to be in range (a constant, or an index the trace has proved in
    range, needs no check: ``fast.ranges``), clamped into it: a Python int when it is a constant,
    so that indexing with it is static. ``grows``: the op may write past the end of a dynamic array
    (``_dynamic_index``)."""
    if ta.dynamic:
        return _dynamic_index(ctx, n, ta, i, op, grows)
    if is_static(i):
        ctx.check(np.asarray(0 <= int(i) < ta.size), f"{describe_node(n)}: {op}: index out of range for a "
                  f"TensorArray of size {ta.size}")
        return min(max(int(i), 0), max(ta.size - 1, 0))
    if known_within(ctx, i, 0, ta.size - 1):  # a fold's counter (``fast.ranges``): nothing to check
        return i
    ctx.check((i >= 0) & (i < ta.size), f"{describe_node(n)}: {op}: index out of range for a TensorArray of "
              f"size {ta.size}")
    return jnp.clip(i, 0, max(ta.size - 1, 0))


def _dynamic_index(ctx: LoweringContext, n: Node, ta: TA, i: Any, op: str, grows: bool) -> Any:
    """Slot ``i`` of the dynamic array ``ta``, clamped into its buffer. An op that ``grows`` it (a
    write) takes any slot from 0 up, as the interpreters do: one past the capacity is the error
    word's ``overflow`` (the run goes again with twice the capacity, ``outcome.Retry``); any other
    op reads below its run-time length."""
    top = np.int32(max(ta.size - 1, 0))
    if grows:
        _nonnegative(ctx, n, i, op)
        ctx.check(i < ta.size, f"{describe_node(n)}: a TensorArray of dynamic size outgrew its capacity of {ta.size}",
                  code="overflow")
    else:
        ctx.check((i >= 0) & (i < ta.length), f"{describe_node(n)}: {op}: index out of range for a TensorArray of "
                  "dynamic size")
    if is_static(i):
        return min(max(int(i), 0), int(top))
    return jnp.clip(i, 0, top)


def _nonnegative(ctx: LoweringContext, n: Node, i: Any, op: str) -> None:
    """The check that index ``i`` of an op of a dynamic array (which takes any slot from 0 up) is not
    negative."""
    ctx.check(i >= 0, f"{describe_node(n)}: {op}: negative index into a TensorArray of dynamic size")


@lowering_rule("TensorArrayNew")
def _ta_new(ctx, n, xs):
    if not is_static(xs[0]):
        not_static(ctx, n, 0,
                    f"fast backend: {describe_node(n)}: a TensorArray's size must be known when compiling (it may "
                    "depend on the shapes and values of fed tensors, not on loop state)")
    size = int(xs[0])
    guard(n, [max(size, 0)], np.int64)  # the slot table, counted as in the reference kernels
    if size < 0:
        ctx.check(np.asarray(False), f"{describe_node(n)}: TensorArrayNew: negative size {size}")
        size = 0
    es = n.attrs.get("element_shape")
    if n.attrs.get("dynamic_size"):  # a buffer of the run's capacity, and the size it has now (``TA``)
        ta = TA(max(size, ctx.capacity), np_dtype(n.attrs["dtype"]), None, written=frozenset(),
                length=np.int32(size))
    else:
        ta = TA(size, np_dtype(n.attrs["dtype"]), None, written=frozenset())
    if es is not None and all(d is not None for d in es):
        ta = ta.materialize(tuple(es), n)
    return [ta]


@lowering_rule("TensorArrayWrite")
def _ta_write(ctx, n, xs):
    if n.attrs.get("ragged", False):
        raise UnsupportedError(f"fast backend: {describe_node(n)}: a TensorArray of elements of several shapes "
                               "(an imported list of a cond's Optionals) has no buffer; it runs on the interpreter")
    ta, i, v = xs
    v = jnp.asarray(v, ta.dtype)
    # the element shape the graph declares (or earlier writes fixed), checked as the reference kernel
    # checks it; a mismatch fails when the write runs (it may sit in a branch never taken)
    declared = n.inputs[0].spec.elem_shape if ta.pending else ta.elem_shape
    if not sh.compatible(declared, tuple(v.shape)):
        ctx.check(np.asarray(False), f"{describe_node(n)}: {ta_element_mismatch(tuple(v.shape), declared)}")
        if not ta.pending:
            return [ta]
    if ta.pending:
        ta = ta.materialize(tuple(v.shape), n)
    j = _ta_index(ctx, n, ta, i, "TensorArrayWrite", grows=True)
    if ta.size:
        if n.attrs.get("overwrite", False) or first_write(ctx, n, ta.written, i):
            # (an overwrite, a TensorList's set, sets the slot whatever it held; ``fast.ranges``: no
            # slot is written twice)
            mask = put(ta.mask, j, np.ones((), MASK_DTYPE))
        else:
            mask = ta.mask.at[j].add(1)  # the check reads the updated count: the update stays in place (TA)
            ctx.check(mask[j] == 1, f"{describe_node(n)}: TensorArrayWrite: a slot was already written (TensorArray "
                      "slots are write-once)")
        return [ta.with_slots(put(ta.buf, j, v), mask, _written(ta, i), _grown(ta, i))]
    return [ta]


def _grown(ta: TA, i: Any) -> Any:
    """The length of the dynamic array ``ta`` once slot ``i`` is written (``None`` for an array of
    static size): one past ``i`` where that is more."""
    if not ta.dynamic:
        return None
    if is_static(i) and is_static(ta.length):
        return np.int32(max(int(ta.length), int(i) + 1))
    return jnp.maximum(ta.length, jnp.asarray(i, jnp.int32) + 1)


#: the most constant slots whose writes a TensorArray's ``written`` records
_WRITTEN_MAX = 64


def _written(ta: TA, i: Any) -> Optional[frozenset[int]]:
    """The slots known written after ``ta`` is written at ``i``: ``None`` (unknown) unless the
    slots before were known and ``i`` is a constant."""
    if ta.written is None or not is_static(i) or len(ta.written) >= _WRITTEN_MAX:
        return None
    return ta.written | {int(i)}


@lowering_rule("TensorArrayRead")
def _ta_read(ctx, n, xs):
    ta, i = xs
    if ta.pending:
        raise UnsupportedError(f"fast backend: {describe_node(n)} reads a TensorArray whose element shape is unknown "
                               "(nothing was written to it); give element_shape")
    j = _ta_index(ctx, n, ta, i, "TensorArrayRead")
    if not ta.size:
        return [jnp.zeros(ta.elem_shape, ta.dtype)]
    if not ta.full:
        ctx.check(slot(ta.mask, j) > 0, f"{describe_node(n)}: TensorArrayRead: slot was never written")
    return [slot(ta.buf, j)]


#: ops whose output 0 is the TensorArray of their input 0, or of every data input (``graph.sources``)
_PASSES_ARRAY = {**HANDLE_CARRIERS, "TensorArrayWrite": False, "TensorArrayAccumulate": False, "TensorArrayAdd": True}


def _declared(t: Tensor) -> bool:
    """Whether every array that can reach ``t`` declared its element shape when it was made (a
    ``TensorArrayNew`` with a fully known ``element_shape``; an unstacked tensor's). Why the graph
    is asked: an array that enters a loop with no element shape is given the one its writes have
    (``light_loops._settled_arrays``), so a loop that runs no body leaves an array with an element
    shape that the interpreters, which saw no write, do not know, and refuse to stack empty."""
    def declared(m: Node) -> bool:
        es = m.attrs.get("element_shape")
        return m.op == "TensorArrayUnstack" or (m.op == "TensorArrayNew" and es is not None
                                                and all(d is not None for d in es))

    return all(declared(m) for m in sources(t, _PASSES_ARRAY))


@lowering_rule("TensorArrayStack")
def _ta_stack(ctx, n, xs):
    (ta,) = xs
    if ta.pending:
        if ta.size:
            raise UnsupportedError(f"fast backend: {describe_node(n)} stacks a TensorArray nothing was written to")
        raise UnsupportedError(f"fast backend: {describe_node(n)}: empty TensorArray with an unknown element shape")
    if not _declared(n.inputs[0]) and n.attrs.get("element_shape") is None:  # (else known only from a write)
        ctx.check(ta.sized() > 0, f"{describe_node(n)}: TensorArrayStack: empty TensorArray with an unknown "
                  "element shape")
    if n.attrs.get("unwritten_zeros"):  # (the kernel's ``_stack_with_zeros``)
        ta = ta.with_slots(_zeroed(ta), jnp.ones_like(ta.mask))
    if ta.dynamic:
        return [_stack_dynamic(ctx, n, ta)]
    if ta.size:
        ctx.check(jnp.all(ta.mask > 0), f"{describe_node(n)}: TensorArrayStack: some slots were never written")
    return [ta.buf]


def _stack_dynamic(ctx: LoweringContext, n: Node, ta: TA) -> Any:
    """The stack of dynamic array ``ta``: its first ``length`` slots, each written. Where ``length``
    is known while tracing, an array of that many rows; else a ``Stacked`` value, which the host
    cuts to its length when it is fetched, and at which the run is cut when an op reads it
    (``EmitterCore.run_node``)."""
    below = jnp.arange(ta.size, dtype=jnp.int32) < ta.length
    ctx.check(jnp.all((ta.mask > 0) | ~below), f"{describe_node(n)}: TensorArrayStack: some slots were never written")
    if is_static(ta.length):
        return ta.buf[:int(ta.length)]
    return Stacked(ta.buf, ta.length)


@lowering_rule("TensorArrayUnstack")
def _ta_unstack(ctx, n, xs):
    v = jnp.asarray(xs[0])
    return [TA(v.shape[0], v.dtype, tuple(v.shape[1:]), v, jnp.ones((v.shape[0],), MASK_DTYPE), full=True)]


@lowering_rule("TensorArraySize")
def _ta_size(ctx, n, xs):
    return [xs[0].sized()]



# ---- TensorArray gradients: unwritten slots count as zeros -----------------------------------------
def _zeroed(ta: TA) -> Any:
    """The buffer with unwritten slots as zeros (buffers start as zeros, but say so explicitly)."""
    m = ta.mask.reshape(ta.mask.shape + (1,) * (ta.buf.ndim - 1))
    return jnp.where(m > 0, ta.buf, jnp.zeros((), ta.dtype))


@lowering_rule("TensorArrayAdd")
def _ta_add(ctx, n, xs):
    a, b = xs
    if a.dynamic or b.dynamic:
        return [_add_dynamic(a, b)]
    if a.size != b.size:
        raise UnsupportedError(f"fast backend: {describe_node(n)}: TensorArrayAdd of sizes {a.size} and {b.size}")
    if a.pending:
        return [b]
    if b.pending:
        return [a]
    return [TA(a.size, a.dtype, a.elem_shape, _zeroed(a) + _zeroed(b), jnp.maximum(a.mask, b.mask))]


def _add_dynamic(a: TA, b: TA) -> TA:
    """The slotwise sum of two arrays one of which is dynamic, as the interpreters add them: the
    longer one's size, a missing slot unwritten. (Its capacity is the larger of theirs.)"""
    length = jnp.maximum(a.sized(), b.sized())
    if a.pending and b.pending:
        return TA(max(a.size, b.size), a.dtype, None, length=length)
    shape = (b if a.pending else a).elem_shape
    cap = max(a.size, b.size)
    bufs, masks = [], []
    for t in (a, b):
        if t.pending:
            continue
        pad = cap - t.size
        bufs.append(jnp.pad(_zeroed(t), [(0, pad)] + [(0, 0)] * len(shape)))
        masks.append(jnp.pad(t.mask, (0, pad)))
    buf = bufs[0] if len(bufs) == 1 else bufs[0] + bufs[1]
    mask = masks[0] if len(masks) == 1 else jnp.maximum(masks[0], masks[1])
    return TA(cap, a.dtype, shape, buf, mask, length=length)


@lowering_rule("TensorArrayAccumulate")
def _ta_accumulate(ctx, n, xs):
    """Slot i += v in place (an unwritten slot counts as zero): O(element) work per call, so the
    gradient of a scan over n elements stays O(n) in all.

    The old value is ``buf[j]`` alone, without ``mask[j]``: every TA keeps its unwritten slots zero
    (``materialize`` starts from zeros, ``TensorArrayAdd`` adds zeroed buffers). Why it matters: XLA
    fuses a read of ``mask[j]`` into the buffer update, which then reads the whole mask while the
    mask update writes it in place; with nothing ordering the two, XLA copied the mask twice in every
    iteration of the backward loop (seen in the optimized HLO of the scan gradient), O(n) per
    iteration."""
    ta, i, v = xs
    v = jnp.asarray(v, ta.dtype)
    if ta.pending:
        ta = ta.materialize(tuple(v.shape), n)
    if not ta.size:
        return [ta]
    j = _ta_index(ctx, n, ta, i, "TensorArrayAccumulate", grows=True)
    return [ta.with_slots(ta.buf.at[j].add(v), ta.mask.at[j].set(1), length=_grown(ta, i))]


def _static_shape(ctx: LoweringContext, n: Node, shp: Any, i: int) -> tuple[int, ...]:
    if not is_static(shp):
        not_static(ctx, n, i, f"fast backend: {describe_node(n)}: the shape must be known when compiling")
    return tuple(int(d) for d in np.asarray(shp))


@lowering_rule("TensorArrayReadOrZeros")
def _ta_read_or_zeros(ctx, n, xs):
    ta, i, shp = xs
    shape = _static_shape(ctx, n, shp, 2)
    if ta.dynamic:  # any slot from 0 up: one past the end (or the capacity) reads as zeros
        _nonnegative(ctx, n, i, "TensorArrayReadOrZeros")
        if ta.pending:
            return [jnp.zeros(shape, ta.dtype)]
        j = jnp.clip(i, 0, ta.size - 1)
        inside = (i < ta.size) & (slot(ta.mask, j) > 0)
        return [jnp.where(inside, slot(ta.buf, j), jnp.zeros((), ta.dtype)).reshape(shape)]
    if ta.pending or not ta.size:
        if not known_within(ctx, i, 0, ta.size - 1):
            ctx.check((i >= 0) & (i < ta.size), f"{describe_node(n)}: TensorArrayReadOrZeros: index out of range "
                      f"for a TensorArray of size {ta.size}")
        return [jnp.zeros(shape, ta.dtype)]
    j = _ta_index(ctx, n, ta, i, "TensorArrayReadOrZeros")
    return [jnp.where(slot(ta.mask, j) > 0, slot(ta.buf, j), jnp.zeros((), ta.dtype)).reshape(shape)]


@lowering_rule("TensorArrayStackOrZeros")
def _ta_stack_or_zeros(ctx, n, xs):
    ta, shp = xs
    shape = _static_shape(ctx, n, shp, 1)
    if ta.dynamic:
        ctx.check(ta.length == shape[0], f"{describe_node(n)}: TensorArrayStackOrZeros: a TensorArray of dynamic "
                  f"size for a leading dimension of {shape[0]}")
        if ta.pending:
            return [jnp.zeros(shape, ta.dtype)]
        buf = _zeroed(ta)
        rows = (buf[:shape[0]] if ta.size >= shape[0]
                else jnp.pad(buf, [(0, shape[0] - ta.size)] + [(0, 0)] * (buf.ndim - 1)))
        return [rows.reshape(shape)]
    if shape[0] != ta.size:
        raise UnsupportedError(f"fast backend: {describe_node(n)}: {ta.size} slots for a leading dimension of "
                               f"{shape[0]}")
    if ta.pending:
        return [jnp.zeros(shape, ta.dtype)]
    return [_zeroed(ta).reshape(shape)]
