"""Import rules of TensorFlow's TensorList and Optional ops, the values control flow v2 adds to a
graph it differentiates. TensorLists: the accumulators a
v2 loop's gradient pushes its forward values onto and pops them off (``EmptyTensorList``,
``TensorListPushBack``, ``TensorListPopBack``), and the TensorArrays v2 code builds
(``TensorListReserve``, ``TensorListSetItem``, ``TensorListGetItem``, ``TensorListStack``,
``TensorListFromTensor``, ``TensorListLength``).

A TensorList is a value: a push or a set makes a new list and leaves the old one as it was. Turnout's
TensorArray is such a value too (``TensorArrayWrite`` returns the written array), so a list imports as
a ``Bundle`` of two parts, the TensorArray and the list's length: a push writes at the length and adds
one, a pop reads at the length less one and takes one off (the array keeps the popped slot, which no
later op of TensorFlow's gradients reads). A loop or a branch carries both parts
(``import_functions``). Why not Turnout's gradient stacks, which the v1 import maps ``StackV2`` to:
a stack is state that a pop mutates, where a list in a v2 graph is an ordinary loop variable, passed
from the forward loop's outputs to the backward loop's inputs; the TensorArray keeps that dataflow.

Optionals: a v2 conditional's gradient needs values of the branch that ran, so TensorFlow makes
each forward branch output them all, as ``OptionalFromValue`` where the branch computed the value and
``OptionalNone`` where it did not, and the backward branch reads its own with ``OptionalGetValue``.
An optional imports as the value itself, and ``OptionalNone`` as ``NO_VALUE``, which the conditional
replaces with a stand-in never read (``import_functions``): the paper's dead value does the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout.errors import UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef import protos
from turnout.graphdef.import_context import Bundle, ImportContext, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)


def _list(ctx: ImportContext, v: Value) -> tuple[Tensor, Tensor]:
    """The TensorArray and length of a list value."""
    if not (isinstance(v, Bundle) and len(v.parts) == 2 and v.parts[0].dtype == dt.tensor_array):
        raise UnsupportedError(f"{ctx.where()}: its list is {ImportContext.describe(v)}, not a TensorList")
    return v.parts[0], v.parts[1]


def _element_shape(ctx: ImportContext, k: int) -> Optional[list[Optional[int]]]:
    """The element shape input ``k`` gives, where it is known at import (-1: unknown rank)."""
    v = ctx.static(ctx.data_inputs()[k])
    if v is None or np.ndim(v) == 0:
        return None
    return [None if int(d) < 0 else int(d) for d in np.ravel(v)]


#: TensorFlow's DataType enum of ``variant``
_DT_VARIANT = 21


@dataclass(frozen=True)
class PendingList:
    """An empty list of variant elements (``EmptyTensorList``): the accumulator a v2 loop's gradient
    pushes a cond's Optionals onto. Its elements' dtype is the Optionals' values', which only the loop
    body shows: the loop that takes it makes its TensorArray (``import_functions``)."""

    length: Tensor


def typed_list(ctx: ImportContext, dtype: dt.DType, length: Tensor) -> Bundle:
    """An empty list of ``dtype`` elements of any shapes, made in ``ctx``'s current op: a cond's
    Optionals, each its value where the branch that ran computed one and a stand-in where it did not,
    whose shape only the other branch knows (so the pushes are ``ragged`` writes: the interpreters
    keep them; the fast backend runs such a program on the interpreter)."""
    attrs = {"dtype": dtype.name, "element_shape": None, "dynamic_size": True, "ragged_list": True}
    return Bundle((ctx.create("TensorArrayNew", [length], attrs, suffix="array").outputs[0], length))


def _new(ctx: ImportContext, size: Tensor, length: Tensor, shape_input: int) -> Bundle:
    attrs = {"dtype": protos.tf_dtype(ctx.attr("element_dtype"), ctx.where()).name,
             "element_shape": _element_shape(ctx, shape_input), "dynamic_size": True}
    return Bundle((ctx.create("TensorArrayNew", [size], attrs, suffix="array").outputs[0], length))


def _i32(ctx: ImportContext, v: int, anchors: list[Any]) -> Tensor:
    return ctx.const(np.int32(v), anchors, suffix=f"c{v}")


#: the ops an array passes through unchanged but for its writes (a frame's, a branch's, a write's)
_ARRAY_PASSES = frozenset({"Identity", "Enter", "Exit", "Merge", "Switch", "NextIteration", "TensorArrayWrite"})


def _ragged_source(ta: Tensor) -> bool:
    """Whether array ``ta`` is a ``typed_list``'s (through loops, branches and writes: a loop's Merge
    by its entry), whose pushes are ragged."""
    n = ta.node
    while n.op in _ARRAY_PASSES and n.raw_inputs and isinstance(n.raw_inputs[0], Tensor):
        n = n.raw_inputs[0].node  # (``raw_inputs``: a loop's Merge is read while its back edge is open)
    return n.op == "TensorArrayNew" and bool(n.attrs.get("ragged_list"))


@_rule("EmptyTensorList")
def _empty(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    zero = _i32(ctx, 0, [x for x in ins if isinstance(x, Tensor)])
    if ctx.attr("element_dtype") == _DT_VARIANT:
        return [PendingList(zero)]
    return [_new(ctx, zero, zero, 0)]


@_rule("TensorListReserve")
def _reserve(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A list of ``num_elements`` unset elements (a TensorArray of that size)."""
    n = ins[1]
    if not isinstance(n, Tensor):
        raise UnsupportedError(f"{ctx.where()}: its size is {ImportContext.describe(n)}")
    return [_new(ctx, n, n, 0)]


@_rule("TensorListPushBack")
def _push(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    ta, n = _list(ctx, ins[0])
    ragged = {"ragged": True} if _ragged_source(ta) else {}
    written = ctx.create("TensorArrayWrite", [ta, n, ins[1]], ragged, suffix="write").outputs[0]
    return [Bundle((written, ctx.create("Add", [n, _i32(ctx, 1, [n])], suffix="length").outputs[0]))]


@_rule("TensorListPopBack")
def _pop(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The list less its last element, and that element."""
    ta, n = _list(ctx, ins[0])
    last = ctx.create("Sub", [n, _i32(ctx, 1, [n])], suffix="length").outputs[0]
    value = ctx.create("TensorArrayRead", [ta, last], suffix="read").outputs[0]
    return [Bundle((ta, last)), value]


def _index(ctx: ImportContext, i: Value, n: Tensor, verb: str) -> Tensor:
    """Index ``i`` of a list of length ``n``, once it is in ``[0, n)``; else a KernelError with
    TensorFlow's words, when it runs. Why: the array under the list grows at a write past its size
    and reads zeros past its writes, which would set an element a list of ``n`` does not have, or
    read one, where TensorFlow's kernel refuses."""
    if not isinstance(i, Tensor):
        raise UnsupportedError(f"{ctx.where()}: its index is {ImportContext.describe(i)}")
    zero = _i32(ctx, 0, [i])
    ok = ctx.create("LogicalAnd", [ctx.create("GreaterEqual", [i, zero], suffix="index_from").outputs[0],
                                   ctx.create("Less", [i, n], suffix="index_below").outputs[0]],
                    suffix="index_ok").outputs[0]
    message = f"{ctx.node.name}: Trying to {verb} an element outside the list's length"
    return ctx.create("Assert", [ok, i], {"message": message}, suffix="index").outputs[0]


@_rule("TensorListSetItem")
def _set(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The list with element ``index`` set, whatever it held (a list is a value: the gradient of a set
    sets the same element of the gradient list to zero), so a TensorArray write that overwrites; an
    index outside the list is refused when it runs (``_index``)."""
    ta, n = _list(ctx, ins[0])
    i = _index(ctx, ins[1], n, "modify")
    written = ctx.create("TensorArrayWrite", [ta, i, ins[2]], {"overwrite": True}, suffix="write").outputs[0]
    return [Bundle((written, n))]


def _known_shape(ctx: ImportContext, ta: Tensor, k: int) -> Optional[list[int]]:
    """The element shape, where it is fully known: the op's ``element_shape`` input ``k`` or the array's."""
    for es in (_element_shape(ctx, k), ta.spec.elem_shape):
        if es is not None and all(d is not None for d in es):
            return [int(d) for d in es]  # type: ignore[arg-type]
    return None


@_rule("TensorListGetItem")
def _get(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """An element; one never set reads as zeros of the element shape, as TensorFlow's does (the
    gradient of a read sets one element of a list of unset ones), where that shape is known."""
    ta, n = _list(ctx, ins[0])
    i = _index(ctx, ins[1], n, "access")
    es = _known_shape(ctx, ta, 2)
    if es is None:
        return [ctx.create("TensorArrayRead", [ta, i]).outputs[0]]
    shape = ctx.const(np.asarray(es, np.int32), [ta], suffix="shape")
    return [ctx.create("TensorArrayReadOrZeros", [ta, i, shape]).outputs[0]]


@_rule("TensorListStack")
def _stack(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Every element, stacked; unset ones as zeros where the element shape is known. A list that was
    popped is refused when it runs (an ``Assert``): its array keeps the popped slots, so it is
    longer than the list."""
    ta, n = _list(ctx, ins[0])
    zeros = {"unwritten_zeros": True} if _known_shape(ctx, ta, 1) is not None else {}
    stacked = ctx.create("TensorArrayStack", [ta], zeros, suffix="stack").outputs[0]
    size = ctx.create("TensorArraySize", [ta], suffix="size").outputs[0]
    ok = ctx.create("Equal", [size, n], suffix="whole").outputs[0]
    message = f"{nd.name}: a TensorList that was popped cannot be stacked here (Turnout keeps its popped slots)"
    return [ctx.create("Assert", [ok, stacked], {"message": message}).outputs[0]]


@_rule("TensorListFromTensor")
def _from_tensor(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    x = ins[0]
    if not isinstance(x, Tensor):
        raise UnsupportedError(f"{ctx.where()}: its tensor is {ImportContext.describe(x)}")
    ta = ctx.create("TensorArrayUnstack", [x], suffix="array").outputs[0]
    return [Bundle((ta, ctx.create("TensorArraySize", [ta], suffix="length").outputs[0]))]


@_rule("TensorListLength")
def _length(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    return [ctx.create("Identity", [_list(ctx, ins[0])[1]]).outputs[0]]


@_rule("TensorListElementShape")
def _element_shape_of(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The elements' shape as TensorFlow gives it (-1 for an unknown size, a scalar -1 for an unknown
    rank), from the array's static element shape."""
    ta, _ = _list(ctx, ins[0])
    es = ta.spec.elem_shape
    value = np.int32(-1) if es is None else np.asarray([-1 if d is None else d for d in es], np.int32)
    out_type = protos.tf_dtype(ctx.attr("shape_type", 3), ctx.where())
    return [ctx.const(value.astype(out_type.numpy), [ta], suffix=None)]


class _NoValue:
    """An ``OptionalNone``: a branch's output for a value only another branch computes."""

    def __repr__(self) -> str:
        return "NO_VALUE"


NO_VALUE = _NoValue()


@_rule("OptionalFromValue")
def _optional(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    if len(ins) != 1:
        raise UnsupportedError(f"{ctx.where()}: an optional of {len(ins)} components (one is supported)")
    return [ins[0]]


@_rule("OptionalNone")
def _optional_none(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    return [NO_VALUE]


@_rule("OptionalGetValue")
def _optional_value(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    if ins[0] is NO_VALUE or not isinstance(ins[0], (Tensor, Bundle)):
        raise UnsupportedError(f"{ctx.where()}: its optional holds {ImportContext.describe(ins[0])}")
    return [ins[0]]


__all__ = ["NO_VALUE", "PendingList", "typed_list"]
