"""Import rules of TensorFlow's TensorArray ops (``TensorArrayV3`` and its reads, writes, gathers,
scatters, splits, concats, sizes and gradients): the value rides on the flow edge (``turnout.graphdef.flows``), and
each op becomes the Turnout TensorArray primitive of the same meaning.

Why a module of its own: these rules share their helpers (the written shape, the gradient arrays,
whole-prefix gathers) with nothing else of ``import_rules``, which keeps the zero of a gradient array
(``_empty_ta``) that its ``Const``, ``ZerosLike`` and ``Fill`` rules make.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.composite import getitem
from turnout.errors import UnsupportedError
from turnout.graph import Node, Tensor
from turnout.graphdef.import_context import ImportContext, RangeMarker, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs, _empty_ta, _t, _written_shape
from turnout.graphdef.import_scatter import _int32
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)


@_rule("TensorArrayV3")
def _ta_new(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    shape = ctx.attr("element_shape")
    attrs = {"dtype": ctx.dtype("dtype").name, "element_shape": shape}
    if ctx.attr("dynamic_size", False):  # writes past the end grow it
        attrs["dynamic_size"] = True
    ta = ctx.create("TensorArrayNew", ins[:1], attrs).outputs[0]
    return [ta, ta]  # the handle and the flow both stand for the (empty) array


@_rule("TensorArrayWriteV3")
def _ta_write(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A write; to a gradient array, whose writes to a written slot add in TensorFlow (the sum of a
    slot's gradients), an accumulation (``TensorArrayAccumulate``: an unwritten slot counts as zero)."""
    op = "TensorArrayAccumulate" if _is_grad(ctx) else "TensorArrayWrite"
    return [ctx.create(op, [ins[3], ins[1], ins[2]]).outputs[0]]


def _is_grad(ctx: ImportContext, handle_input: int = 0) -> bool:
    lab = ctx.flows.label(ctx.data_inputs()[handle_input])
    return lab is not None and lab[0] == "grad"


@_rule("TensorArrayReadV3")
def _ta_read(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    ta = _t(ins[2])
    es = ta.spec.elem_shape
    if _is_grad(ctx) and es is not None and all(d is not None for d in es):
        # a gradient array's unwritten slot is a zero gradient, as in TensorFlow
        shp = ctx.const(np.asarray(es, np.int32), [ins[1]], suffix="shape")
        return [ctx.create("TensorArrayReadOrZeros", [ta, ins[1], shp]).outputs[0]]
    return [ctx.create("TensorArrayRead", [ta, ins[1]], shapes=[_element_shape(ctx, 2)]).outputs[0]]


def _element_shape(ctx: ImportContext, flow_input: int) -> Any:
    """The element shape of the TensorArray a read or gather reads: its ``element_shape`` attribute
    where TensorFlow wrote one, and what the forward array's writes give (``_written_shape``)."""
    from turnout import shapes as sh

    es = sh.as_shape(ctx.attr("element_shape"))
    lab = ctx.flows.label(ctx.data_inputs()[flow_input])
    if lab is not None and lab[0] == "fwd":
        written = _written_shape(ctx, lab[1], None)
        es = sh.merge(es, written) if sh.compatible(es, written) else es
    return None if es is None else list(es)


@_rule("TensorArraySizeV3")
def _ta_size(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    return [ctx.create("TensorArraySize", [ins[1]]).outputs[0]]


@_rule("TensorArrayCloseV3")
def _ta_close(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    ctx.create("NoOp", [])
    return []


def _whole_prefix(ctx: ImportContext, idx: Value, tname: str) -> bool:
    """Whether gather/scatter indices are ``range(0, n)`` (what TensorArray.stack / unstack emit). Any
    other run-time Range is a tensor of indices, as a gather reads it."""
    if isinstance(idx, RangeMarker):
        return idx.start == 0 and idx.delta == 1
    v = ctx.static(tname)
    return v is not None and np.array_equal(np.ravel(v), np.arange(np.size(v)))


#: TensorFlow gathers an unwritten slot of an array whose element shape is known as zeros
#: (``dynamic_rnn``'s loop stops at the longest sequence, short of its output array's size)
_ZEROS = {"unwritten_zeros": True}


@_rule("TensorArrayGatherV3")
def _ta_gather(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    ta, idx = _t(ins[2]), ins[1]
    if not _whole_prefix(ctx, idx, ctx.data_inputs()[1]):
        stacked = ctx.create("TensorArrayStack", [ta], dict(_ZEROS), suffix="stack").outputs[0]
        return [ctx.create("Gather", [stacked, idx], {"axis": 0}).outputs[0]]
    if (isinstance(idx, RangeMarker) and ctx.nodes[idx.limit_node].op != "TensorArraySizeV3"
            and not _zero_filled(ctx, ta)):
        return [getitem(ctx, _stacked(ctx, ta, 2, "stack"), (slice(None, idx.limit, None),), None)]
    return [_stacked(ctx, ta, 2)]


def _zero_filled(ctx: ImportContext, ta: Tensor) -> bool:
    """Whether ``ta`` is a gradient array of a fully known element shape, whose unwritten slots
    TensorFlow reads as zero gradients."""
    es = ta.spec.elem_shape
    return _is_grad(ctx) and es is not None and all(d is not None for d in es)


def _stacked(ctx: ImportContext, ta: Tensor, flow_input: int, suffix: str | None = None) -> Tensor:
    """Every slot of ``ta`` stacked, as TensorFlow's whole-array gather and concat read them: a
    gradient array of known element shape with zeros at its unwritten slots
    (``TensorArrayStackOrZeros``), any other with the element shape its writes give
    (``_element_shape`` of the op's input ``flow_input``) and zeros at unwritten slots where that
    shape is known (``_ZEROS``)."""
    if _zero_filled(ctx, ta):
        es = ta.spec.elem_shape or ()
        n = ctx.create("TensorArraySize", [ta], suffix="size").outputs[0]
        dims = [n, *(ctx.const(np.asarray(d, np.int32), [n], suffix=f"dim{k}") for k, d in enumerate(es))]
        shp = ctx.create("Pack", dims, suffix="shape").outputs[0]
        return ctx.create("TensorArrayStackOrZeros", [ta, shp], suffix=suffix).outputs[0]
    es = _element_shape(ctx, flow_input)
    return ctx.create("TensorArrayStack", [ta], dict(_ZEROS), suffix=suffix,
                      shapes=[None if es is None else [None, *es]]).outputs[0]


def _fresh(flow: Tensor) -> Node | None:
    """The ``TensorArrayNew`` that ``flow`` is, through Identity and Enter (an array nothing was
    written to: the only one a scatter or a split fills here, by an unstack); None for any other."""
    src = flow.node
    while src.op in ("Identity", "Enter") and src.inputs:
        src = src.inputs[0].node
    return src if src.op == "TensorArrayNew" else None


@_rule("TensorArrayScatterV3")
def _ta_scatter(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Scatter ``range(0, n)`` into a fresh array: an unstack (the only scatter TensorFlow's builders emit)."""
    if _fresh(_t(ins[3])) is None or not _whole_prefix(ctx, ins[1], ctx.data_inputs()[1]):
        raise UnsupportedError(f"{ctx.where()}: only a scatter of range(0, n) into a fresh TensorArray "
                               "(TensorArray.unstack) is supported")
    return [ctx.create("TensorArrayUnstack", [ins[2]]).outputs[0]]


@_rule("TensorArrayGradV3")
def _ta_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The gradient array of a forward array: TensorFlow looks it up by handle; here the gradient flow
    carries it. Called with a gradient flow, it is that array; with a forward flow, a fresh one whose
    writes reach the others through the sums tf.gradients builds (TensorArrayAdd)."""
    flow_lab = ctx.flows.label(ctx.data_inputs()[1])
    if flow_lab is not None and flow_lab[0] == "grad":
        g = ctx.create("Identity", [ins[1]]).outputs[0]
    else:
        lab = ctx.flows.label(f"{nd.name}:0")
        assert lab is not None
        g = _empty_ta(ctx, lab, [ins[1]], fwd=_t(ins[0]))
    return [g, g]


def _vector(ctx: ImportContext, x: Tensor, suffix: str) -> Tensor:
    return ctx.create("Reshape", [x], {"shape": [1]}, suffix=suffix).outputs[0]


@_rule("TensorArrayConcatV3")
def _ta_concat(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The elements joined along their first axis, and their lengths (int64). Elements share one
    shape here (what ``TensorArray.split`` into equal pieces and a loop's equal writes give), so it is
    the stack, as ``TensorArrayGatherV3`` of the whole array reads it (a gradient array's unwritten
    slot a zero), with its first two axes merged; each length is the elements' first dimension."""
    stacked = _stacked(ctx, _t(ins[1]), 1, "stack")
    s = ctx.create("Shape", [stacked], suffix="stack_shape").outputs[0]
    count, length = getitem(ctx, s, (0,), "count"), getitem(ctx, s, (1,), "length")
    rows = ctx.create("Mul", [count, length], suffix="rows").outputs[0]
    rest = getitem(ctx, s, (slice(2, None, None),), "rest")
    shape = ctx.create("Concat", [_vector(ctx, rows, "rows_vector"), rest], {"axis": 0}, suffix="shape").outputs[0]
    filled = ctx.create("Fill", [_vector(ctx, count, "count_vector"), length], suffix="lengths_int32").outputs[0]
    lengths = ctx.create("Cast", [filled], {"dtype": "int64"}, suffix="lengths").outputs[0]
    return [ctx.create("ReshapeTo", [stacked, shape], shapes=[_joined_shape(stacked.shape)]).outputs[0], lengths]


def _joined_shape(stacked: Any) -> Any:
    """The static shape of a stack ``[n, d0, *rest]`` with its first two axes merged, as far as it is
    known (a gradient's ``Rank`` of the concat folds from it)."""
    if stacked is None or len(stacked) < 2:
        return None
    n, d0, *rest = stacked
    return [None if n is None or d0 is None else n * d0, *rest]


@_rule("TensorArraySplitV3")
def _ta_split(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``value``'s rows cut into ``lengths`` pieces, written to a fresh array (what
    ``TensorArray.split`` and the gradient of a concat emit): an unstack of ``value`` reshaped to
    ``[count, length, ...]``. Elements share one shape here, so the lengths must all be the same (a
    KernelError otherwise, where TensorFlow takes pieces of any length); their sum must be the
    value's rows, and their count the array's size, as TensorFlow checks."""
    flow, value = _t(ins[3]), _t(ins[1])
    src = _fresh(flow)
    if src is None:
        raise UnsupportedError(f"{ctx.where()}: only a split into a fresh TensorArray is supported")
    lens = _int32(ctx, _t(ins[2]), "lengths_int32")
    count = ctx.create("Size", [lens], suffix="count").outputs[0]
    first = getitem(ctx, lens, (slice(None, 1, None),), "first")
    zero = ctx.const(np.zeros(1, np.int32), [lens], suffix="zero")
    piece = ctx.create("Sum", [ctx.create("Concat", [first, zero], {"axis": 0}, suffix="first_or_zero").outputs[0]],
                       {"axis": None, "keepdims": False}, suffix="piece").outputs[0]
    same = ctx.create("Equal", [lens, piece], suffix="same").outputs[0]
    value = ctx.checked(same, value, "lengths must all be the same: a Turnout TensorArray's elements share one "
                     "shape", "same_lengths")
    s = ctx.create("Shape", [value], suffix="value_shape").outputs[0]
    total = ctx.create("Mul", [count, piece], suffix="total").outputs[0]
    value = ctx.checked(ctx.create("Equal", [total, getitem(ctx, s, (0,), "rows")], suffix="sums").outputs[0], value,
                     "Expected sum of lengths to be equal to values.shape[0]", "sum_check")
    size = ctx.create("TensorArraySize", [flow], suffix="size").outputs[0]
    if not src.attrs.get("dynamic_size"):
        value = ctx.checked(ctx.create("Equal", [size, count], suffix="sizes").outputs[0], value,
                         "TensorArray's size is not equal to the size of lengths", "size_check")
    rest = getitem(ctx, s, (slice(1, None, None),), "rest")
    shape = ctx.create("Concat", [_vector(ctx, count, "count_vector"), _vector(ctx, piece, "piece_vector"), rest],
                       {"axis": 0}, suffix="shape").outputs[0]
    known = None if value.shape is None else [None, None, *value.shape[1:]]
    pieces = ctx.create("ReshapeTo", [value, shape], suffix="pieces", shapes=[known]).outputs[0]
    return [ctx.create("TensorArrayUnstack", [pieces]).outputs[0]]
