"""Export rules of TensorArrays (``TENSOR_ARRAY_RULES``): a Turnout array, a value, becomes TensorFlow's
``TensorArrayV3`` handle (found by tracing the value to the node that made its array) and a flow.

Why a module of its own: an array's handle is shared by every op that touches the array, so these
rules share a lookup (``_handle``) and, for the sums of gradient arrays, the export's analysis of
which arrays TensorFlow writes as gradient arrays whose writes add up (``graphdef.array_sums``).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from turnout import dtypes as dt
from turnout.errors import UnsupportedError, describe_node
from turnout.graph import Node, Tensor
from turnout.graphdef.array_sums import source
from turnout.graphdef.export_context import Dt, ExportContext, Shape
from turnout.graphdef.export_context import Rule as _Rule
from turnout.graphdef.export_rules import _T, Outs, _axis_size, _i32, _ins
from turnout.tables import registrar

#: Turnout TensorArray primitive -> export rule (``exporter`` joins it to ``export_rules.EXPORT_RULES``)
TENSOR_ARRAY_RULES: dict[str, _Rule] = {}
_rule = registrar(TENSOR_ARRAY_RULES)


def _ta_source(ctx: ExportContext, t: Tensor) -> Node:
    """The node that made the array of value ``t`` (``array_sums.source``), one with a handle."""
    node, _ = source(t)
    if node.op not in ("TensorArrayNew", "TensorArrayUnstack", "TensorArrayAdd"):
        raise UnsupportedError(f"{describe_node(ctx.node)}: its TensorArray comes from {describe_node(node)}, "
                               "which has no TensorFlow form")
    return node


def _handle(ctx: ExportContext, ta: Tensor) -> str:
    """The TensorArrayV3 handle of ``ta``, entered (as a loop invariant) into the current frame."""
    return _handle_of(ctx, _ta_source(ctx, ta))


def _handle_of(ctx: ExportContext, src: Node) -> str:
    """The handle of the array ``src`` made, entered into the current frame."""
    h = ctx.ta_handles[src.name]
    have, want = ctx.frame(src), ctx.frame()
    if want[: len(have)] != have:
        raise UnsupportedError(f"{describe_node(ctx.node)}: uses a TensorArray made in an inner loop frame")
    for k in range(len(have), len(want)):
        key = (h, want[: k + 1])
        if key not in ctx.enter_cache:
            fname = want[k]
            pi = ctx.parallel_iterations(want[: k + 1])
            ctx.enter_cache[key] = f'{ctx.add("Enter", [h], {"T": Dt(dt.resource), "frame_name": fname, "is_constant": True, "parallel_iterations": pi}, suffix="handle_enter", own_control=False)}:0'  # noqa: E501
        h = ctx.enter_cache[key]
    return h


def _ta_attrs(t: Tensor) -> tuple[Dt, Shape]:
    es = t.spec.elem_shape
    return Dt(t.spec.elem_dtype or dt.float32), Shape(None if es is None else list(es))


@_rule("TensorArrayNew")
def _ta_new(ctx: ExportContext, n: Node) -> Outs:
    """A ``TensorArrayV3``; an accumulator of gradient sums (``ctx.sums.aggregate``) is the gradient
    array of one, whose writes to a written slot add; a gradient array made in each iteration of a
    loop that sums it into an accumulator (``ctx.sums.merged``) makes no array: its writes go to the
    accumulator's, and its flow is a constant (the sum's ``AddV2`` orders the writes)."""
    acc = ctx.sums.merged.get(n.id)
    if acc is not None:
        ctx.ta_handles[n.name] = _handle_of(ctx, ctx.graph.nodes[acc])
        return [ctx.const(np.float32(0), "flow")]
    d, es = _ta_attrs(n.outputs[0])
    dynamic = bool(n.attrs.get("dynamic_size", False))
    name = ctx.add("TensorArrayV3", _ins(ctx, n), {"dtype": d, "element_shape": es, "dynamic_size": dynamic,
                                                   "clear_after_read": False, "identical_element_shapes": True,
                                                   "tensor_array_name": ""},
                   suffix="forward" if n.id in ctx.sums.aggregate else None)
    if n.id in ctx.sums.aggregate:
        name = ctx.add("TensorArrayGradV3", [f"{name}:0", f"{name}:1"], {"source": "turnout_sum"})
    ctx.ta_handles[n.name] = f"{name}:0"
    return [f"{name}:1"]


@_rule("TensorArrayUnstack")
def _ta_unstack(ctx: ExportContext, n: Node) -> Outs:
    x = ctx.t(n.inputs[0])
    d, es = _ta_attrs(n.outputs[0])
    size = _axis_size(ctx, n.inputs[0], 0, Dt(dt.int32))
    return [_scattered_array(ctx, n, size, x, d, es)]


def _scattered_array(ctx: ExportContext, n: Node, size: str, values: str, d: Dt, es: Shape, tag: str = "") -> str:
    """A new ``TensorArrayV3`` of ``size`` slots (the handle of ``n``'s array from now on) with slot
    ``i`` of ``values`` scattered into slot ``i``: the flow of TensorFlow's form of an array made whole
    (an unstack, a sum of arrays). ``tag`` prefixes the helper nodes' suffixes."""
    ta = ctx.add("TensorArrayV3", [size], {"dtype": d, "element_shape": es, "dynamic_size": False,
                                           "clear_after_read": False, "identical_element_shapes": True,
                                           "tensor_array_name": ""}, suffix="array")
    ctx.ta_handles[n.name] = f"{ta}:0"
    zero, one = ctx.const(_i32(0), f"{tag}start"), ctx.const(_i32(1), f"{tag}delta")
    r = ctx.add("Range", [zero, size, one], {"Tidx": Dt(dt.int32)}, suffix=f"{tag}indices")
    return f'{ctx.add("TensorArrayScatterV3", [f"{ta}:0", f"{r}:0", values, f"{ta}:1"], {"T": d})}:0'


@_rule("TensorArrayAdd")
def _ta_add(ctx: ExportContext, n: Node) -> Outs:
    """The slotwise sum of two arrays (gradients of one TensorArray, summed): TensorFlow has no such op,
    so a new array of the first's size is scattered with the sum of both arrays gathered whole. Each
    gather has the slot's full shape, so TensorFlow fills an unwritten slot with zeros, which is what
    the sum counts it as. Needs that shape and arrays of fixed size (a growing array's missing slots
    are zeros too, which no gather gives). Every slot of the sum is then written: a strict read of a
    slot neither array wrote gives zeros in TensorFlow where Turnout raises."""
    c = ctx.sums.carried.get(n.id)
    if c is not None:  # a loop-carried sum: the fresh array wrote into the accumulator's (``_ta_new``)
        ctx.ta_handles[n.name] = _handle_of(ctx, source(n.inputs[c])[0])
        return [f'{ctx.add("AddV2", _ins(ctx, n), {"T": Dt(dt.float32)}, suffix="flow")}:0']
    d, es = _ta_attrs(n.outputs[0])
    known = n.outputs[0].spec.elem_shape
    if (known is None or any(x is None for x in known)
            or any(_ta_source(ctx, t).attrs.get("dynamic_size") for t in n.inputs)):
        raise UnsupportedError(f"{describe_node(n)}: TensorArrayAdd exports only arrays of fixed size with a "
                               "static element shape")
    if any(ctx.frame(_ta_source(ctx, t)) != ctx.frame() for t in n.inputs):
        # A sum carried by a loop not of the form ``array_sums`` writes as one gradient array (a version
        # of an array read between sums, an array not made fresh in the iteration): a new array each
        # iteration would leave the loop's reads on the array it entered with.
        raise UnsupportedError(f"{describe_node(n)}: TensorArrayAdd of an array made outside its loop frame "
                               "has a TensorFlow form (one gradient array whose writes add) only when the "
                               "other array is made in the iteration, both fixed in size, and no version "
                               "of either is read but by the next write or sum")
    gathered = [_gather_all(ctx, n, d, es, ta=t)[0] for t in n.inputs]
    size = f"{ctx.add('TensorArraySizeV3', [_handle(ctx, n.inputs[0]), ctx.t(n.inputs[0])], suffix='sum_size')}:0"
    total = ctx.add("AddV2", gathered, {"T": d}, suffix="slots")
    return [_scattered_array(ctx, n, size, f"{total}:0", d, es, tag="sum_")]


@_rule("TensorArrayAccumulate")
def _ta_accumulate(ctx: ExportContext, n: Node) -> Outs:
    """``acc[i] += v``: a write to the accumulator, a gradient array, whose writes to a written slot
    add (``array_sums``)."""
    if source(n.inputs[0])[0].id not in ctx.sums.aggregate:
        raise UnsupportedError(f"{describe_node(n)}: TensorArrayAccumulate has a TensorFlow form (a write to "
                               "one gradient array, whose writes add) only into an array of fixed size made "
                               "by a TensorArrayNew, no version of which is read but by the next sum")
    ta, i, v = _ins(ctx, n)
    return [f'{ctx.add("TensorArrayWriteV3", [_handle(ctx, n.inputs[0]), i, v, ta], {"T": _T(n, 2)})}:0']


@_rule("TensorArrayWrite")
def _ta_write(ctx: ExportContext, n: Node) -> Outs:
    if n.attrs.get("overwrite", False) or n.attrs.get("ragged", False):
        raise UnsupportedError(f"{describe_node(n)}: a TensorArray write that overwrites or holds elements of "
                               "several shapes (an imported TensorList's) has no TensorArrayWriteV3 form")
    ta, i, v = _ins(ctx, n)
    return [f'{ctx.add("TensorArrayWriteV3", [_handle(ctx, n.inputs[0]), i, v, ta], {"T": _T(n, 2)})}:0']


@_rule("TensorArrayRead")
def _ta_read(ctx: ExportContext, n: Node) -> Outs:
    ta, i = _ins(ctx, n)
    return [f'{ctx.add("TensorArrayReadV3", [_handle(ctx, n.inputs[0]), i, ta], {"dtype": Dt(n.outputs[0].dtype)})}:0']


@_rule("TensorArrayReadOrZeros")
def _ta_read_or_zeros(ctx: ExportContext, n: Node) -> Outs:
    """Slot ``i``, or zeros where it is unwritten (a gradient array's slot no gradient reached): a
    ``TensorArrayGatherV3`` of ``[i]`` with the slot's full shape, which TensorFlow fills with zeros
    when the slot is unwritten, reshaped to the slot's shape. Needs that shape (``static_shape``) and
    an array of fixed size (a growing one's read past its end is zeros too, which no gather gives)."""
    d, _ = _ta_attrs(n.inputs[0])
    shape_in = n.inputs[2].node
    known = n.attrs.get("static_shape") or (
        [int(x) for x in np.asarray(shape_in.attrs["value"]).ravel()] if shape_in.op == "Const"
        else n.inputs[0].spec.elem_shape)
    if known is None or any(x is None for x in known) or _ta_source(ctx, n.inputs[0]).attrs.get("dynamic_size"):
        raise UnsupportedError(f"{describe_node(n)}: reading a slot or zeros needs the slot's static shape and an "
                               "array of fixed size")
    h, flow, i = _handle(ctx, n.inputs[0]), ctx.t(n.inputs[0]), ctx.t(n.inputs[1])
    one = ctx.add("Reshape", [i, ctx.const(_i32([1]), "one")], {"T": _T(n, 1), "Tshape": Dt(dt.int32)},
                  suffix="index")
    got = ctx.add("TensorArrayGatherV3", [h, f"{one}:0", flow], {"dtype": d, "element_shape": Shape(list(known))},
                  suffix="gather")
    shape = ctx.const(_i32(list(known)), "shape")
    return [f'{ctx.add("Reshape", [f"{got}:0", shape], {"T": d, "Tshape": Dt(dt.int32)})}:0']


@_rule("TensorArraySize")
def _ta_size(ctx: ExportContext, n: Node) -> Outs:
    return [f'{ctx.add("TensorArraySizeV3", [_handle(ctx, n.inputs[0]), ctx.t(n.inputs[0])])}:0']


@_rule("TensorArrayStack")
def _ta_stack(ctx: ExportContext, n: Node) -> Outs:
    d, es = _ta_attrs(n.inputs[0])
    return _gather_all(ctx, n, d, es)


@_rule("TensorArrayStackOrZeros")
def _ta_stack_or_zeros(ctx: ExportContext, n: Node) -> Outs:
    """A gather of every slot with a fully known element shape: TensorFlow then fills unwritten slots
    with zeros too, which is this primitive's meaning (scan / map_fn stack their results this way)."""
    d, es = _ta_attrs(n.inputs[0])
    known = n.attrs.get("static_shape")
    if known is not None and all(x is not None for x in known[1:]):
        es = Shape(list(known[1:]))
    return _gather_all(ctx, n, d, es)


def _gather_all(ctx: ExportContext, n: Node, d: Dt, es: Shape, ta: Optional[Tensor] = None) -> Outs:
    """``TensorArrayGatherV3`` of ``range(size)``: TensorFlow's form of stacking a whole array (``ta``,
    by default the node's first input)."""
    ta = n.inputs[0] if ta is None else ta
    h, flow = _handle(ctx, ta), ctx.t(ta)
    size = ctx.add("TensorArraySizeV3", [h, flow], suffix="size")
    zero, one = ctx.const(_i32(0), "start"), ctx.const(_i32(1), "delta")
    r = ctx.add("Range", [zero, f"{size}:0", one], {"Tidx": Dt(dt.int32)}, suffix="indices")
    return [f'{ctx.add("TensorArrayGatherV3", [h, f"{r}:0", flow], {"dtype": d, "element_shape": es})}:0']


