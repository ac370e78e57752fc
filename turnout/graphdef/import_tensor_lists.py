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


def _new(ctx: ImportContext, size: Tensor, length: Tensor, shape_input: int) -> Bundle:
    if ctx.attr("element_dtype") == _DT_VARIANT:
        raise UnsupportedError(f"{ctx.where()}: a list of variant elements (the Optionals or lists a v2 "
                               "loop's gradient saves for a cond or a list inside the loop) is not supported")
    attrs = {"dtype": protos.tf_dtype(ctx.attr("element_dtype"), ctx.where()).name,
             "element_shape": _element_shape(ctx, shape_input), "dynamic_size": True}
    return Bundle((ctx.create("TensorArrayNew", [size], attrs, suffix="array").outputs[0], length))


def _i32(ctx: ImportContext, v: int, anchors: list[Any]) -> Tensor:
    return ctx.const(np.int32(v), anchors, suffix=f"c{v}")


@_rule("EmptyTensorList")
def _empty(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    zero = _i32(ctx, 0, [x for x in ins if isinstance(x, Tensor)])
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
    written = ctx.create("TensorArrayWrite", [ta, n, ins[1]], suffix="write").outputs[0]
    return [Bundle((written, ctx.create("Add", [n, _i32(ctx, 1, [n])], suffix="length").outputs[0]))]


@_rule("TensorListPopBack")
def _pop(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The list less its last element, and that element."""
    ta, n = _list(ctx, ins[0])
    last = ctx.create("Sub", [n, _i32(ctx, 1, [n])], suffix="length").outputs[0]
    value = ctx.create("TensorArrayRead", [ta, last], suffix="read").outputs[0]
    return [Bundle((ta, last)), value]


@_rule("TensorListSetItem")
def _set(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The list with element ``index`` set, whatever it held (a list is a value: the gradient of a set
    sets the same element of the gradient list to zero), so a TensorArray write that overwrites."""
    ta, n = _list(ctx, ins[0])
    written = ctx.create("TensorArrayWrite", [ta, ins[1], ins[2]], {"overwrite": True}, suffix="write").outputs[0]
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
    ta, _ = _list(ctx, ins[0])
    es = _known_shape(ctx, ta, 2)
    if es is None:
        return [ctx.create("TensorArrayRead", [ta, ins[1]]).outputs[0]]
    shape = ctx.const(np.asarray(es, np.int32), [ta], suffix="shape")
    return [ctx.create("TensorArrayReadOrZeros", [ta, ins[1], shape]).outputs[0]]


@_rule("TensorListStack")
def _stack(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Every element, stacked; unset ones as zeros where the element shape is known (a list that was
    popped is refused when it runs: its array is longer than the list)."""
    ta, _ = _list(ctx, ins[0])
    zeros = {"unwritten_zeros": True} if _known_shape(ctx, ta, 1) is not None else {}
    return [ctx.create("TensorArrayStack", [ta], zeros).outputs[0]]


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


__all__ = ["NO_VALUE"]
