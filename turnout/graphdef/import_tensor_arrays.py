"""Import rules of TensorFlow's TensorArray ops (``TensorArrayV3`` and its reads, writes, gathers,
scatters, sizes and gradients): the value rides on the flow edge (``turnout.graphdef.flows``), and
each op becomes the Turnout TensorArray primitive of the same meaning.

Why a module of its own: these rules share their helpers (the written shape, the gradient arrays,
whole-prefix gathers) with nothing else of ``import_rules``, which keeps the zero of a gradient array
(``_empty_ta``) that its ``Const``, ``ZerosLike`` and ``Fill`` rules make.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.errors import UnsupportedError
from turnout.graphdef.import_context import ImportContext, RangeMarker, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs, _empty_ta, _t, _written_shape
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
    es = ta.spec.elem_shape
    if _is_grad(ctx) and es is not None and all(d is not None for d in es):
        n = ctx.create("TensorArraySize", [ta], suffix="size").outputs[0]
        dims = [n, *(ctx.const(np.asarray(d, np.int32), [n], suffix=f"dim{k}") for k, d in enumerate(es))]
        shp = ctx.create("Pack", dims, suffix="shape").outputs[0]
        return [ctx.create("TensorArrayStackOrZeros", [ta, shp]).outputs[0]]
    es = _element_shape(ctx, 2)
    shapes = [None if es is None else [None, *es]]
    if isinstance(idx, RangeMarker) and ctx.nodes[idx.limit_node].op != "TensorArraySizeV3":
        stacked = ctx.create("TensorArrayStack", [ta], dict(_ZEROS), suffix="stack", shapes=shapes).outputs[0]
        spec = [{"kind": "slice", "start": None, "stop": {"input": 0}, "step": None}]
        return [ctx.create("GetItem", [stacked, idx.limit], {"spec": spec}).outputs[0]]
    return [ctx.create("TensorArrayStack", [ta], dict(_ZEROS), shapes=shapes).outputs[0]]


@_rule("TensorArrayScatterV3")
def _ta_scatter(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Scatter ``range(0, n)`` into a fresh array: an unstack (the only scatter TensorFlow's builders emit)."""
    flow = _t(ins[3])
    src = flow.node
    while src.op in ("Identity", "Enter") and src.inputs:
        src = src.inputs[0].node
    if src.op != "TensorArrayNew" or not _whole_prefix(ctx, ins[1], ctx.data_inputs()[1]):
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
