"""Export rules: one per Turnout primitive (``EXPORT_RULES``), each writing TensorFlow NodeDefs and
returning the TensorFlow names of the node's outputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout.errors import UnsupportedError, describe_node
from turnout.graph import Node, Tensor
from turnout.graphdef import protos
from turnout.graphdef.export_context import Dt, ExportContext, Shape, Value
from turnout.graphdef.export_context import Rule as _Rule
from turnout.summarize import TF_ASSERT_PREFIX
from turnout.tables import registrar

#: Turnout primitive -> export rule
EXPORT_RULES: dict[str, _Rule] = {}
_rule = registrar(EXPORT_RULES)
Outs = Sequence[str]


def _ins(ctx: ExportContext, n: Node) -> list[str]:
    return [ctx.t(t) for t in n.inputs]


def _T(n: Node, k: int = 0) -> Dt:
    return Dt(n.inputs[k].dtype if n.inputs else n.outputs[0].dtype)


# ---- sources and control flow -------------------------------------------------------------------------
@_rule("Const")
def _const(ctx: ExportContext, n: Node) -> Outs:
    v = np.asarray(n.attrs["value"], dtype=dt.as_dtype(n.attrs["dtype"]).numpy)
    return [f'{ctx.add("Const", [], {"dtype": Dt(dt.as_dtype(n.attrs["dtype"])), "value": Value(v)})}:0']


@_rule("CheckpointSlots")
def _checkpoint_slots(ctx: ExportContext, n: Node) -> Outs:
    """The count a TensorFlow program gives the slots: the most the budget holds (what Turnout's
    interpreters give; TensorFlow has no run that could size them)."""
    v = np.asarray(n.attrs["slots"], np.int32)
    return [f'{ctx.add("Const", [], {"dtype": Dt(dt.int32), "value": Value(v)})}:0']


@_rule("Placeholder")
def _placeholder(ctx: ExportContext, n: Node) -> Outs:
    shape = n.attrs.get("shape")
    return [f'{ctx.add("Placeholder", [], {"dtype": Dt(n.outputs[0].dtype), "shape": Shape(shape)})}:0']


@_rule("Enter")
def _enter(ctx: ExportContext, n: Node) -> Outs:
    frame = ctx.frame()
    pi = ctx.parallel_iterations(frame)
    attrs = {"T": _T(n), "frame_name": n.attrs["frame_name"], "is_constant": bool(n.attrs.get("is_constant")),
             "parallel_iterations": pi}
    return [f'{ctx.add("Enter", _ins(ctx, n), attrs)}:0']


def _same(tf_op: str) -> _Rule:
    def rule(ctx: ExportContext, n: Node) -> Outs:
        name = ctx.add(tf_op, _ins(ctx, n), {"T": _T(n)} if tf_op != "LoopCond" else {})
        return [f"{name}:{k}" for k in range(len(n.outputs))]

    return rule


for _op in ("Exit", "NextIteration", "Switch", "Identity", "StopGradient"):
    _rule(_op)(_same(_op))
_rule("CheckpointTrips")(_same("Identity"))


@_rule("PreventGradient")
def _prevent_gradient(ctx: ExportContext, n: Node) -> Outs:
    return [f'{ctx.add("PreventGradient", _ins(ctx, n), {"T": _T(n), "message": n.attrs.get("message", "")})}:0']
_rule("LoopCond")(_same("LoopCond"))


@_rule("Merge")
def _merge(ctx: ExportContext, n: Node) -> Outs:
    name = ctx.add("Merge", _ins(ctx, n), {"T": _T(n), "N": len(n.inputs)}, name=ctx.reserved[n.id])
    return [f"{name}:0", f"{name}:1"]


@_rule("NoOp")
def _noop(ctx: ExportContext, n: Node) -> Outs:
    ctx.add("NoOp", [])
    return []


# ---- elementwise --------------------------------------------------------------------------------------
for _tn, _tf in [("Add", "AddV2"), ("Sub", "Sub"), ("Mul", "Mul"), ("Maximum", "Maximum"), ("Minimum", "Minimum"),
                 ("Pow", "Pow"), ("FloorMod", "FloorMod"), ("Less", "Less"), ("LessEqual", "LessEqual"),
                 ("Greater", "Greater"), ("GreaterEqual", "GreaterEqual"), ("Equal", "Equal"),
                 ("NotEqual", "NotEqual"), ("Neg", "Neg"), ("Tanh", "Tanh"), ("Sigmoid", "Sigmoid"), ("Exp", "Exp"),
                 ("Log", "Log"), ("Sqrt", "Sqrt"), ("Square", "Square"), ("Abs", "Abs"), ("Sign", "Sign"),
                 ("Relu", "Relu"), ("ZerosLike", "ZerosLike"), ("OnesLike", "OnesLike"), ("Log1p", "Log1p"),
                 ("Expm1", "Expm1"), ("Erf", "Erf"), ("Sin", "Sin"), ("Cos", "Cos"), ("Floor", "Floor"),
                 ("Ceil", "Ceil"), ("Round", "Round"), ("Tan", "Tan"), ("Asin", "Asin"), ("Acos", "Acos"),
                 ("Atan", "Atan"), ("Atan2", "Atan2"), ("Sinh", "Sinh"), ("Cosh", "Cosh"), ("Asinh", "Asinh"),
                 ("Acosh", "Acosh"), ("Atanh", "Atanh"), ("Erfc", "Erfc"), ("Lgamma", "Lgamma"),
                 ("Digamma", "Digamma")]:
    _rule(_tn)(_same(_tf))


def _untyped(tf_op: str) -> _Rule:
    def rule(ctx: ExportContext, n: Node) -> Outs:
        return [f"{ctx.add(tf_op, _ins(ctx, n))}:0"]

    return rule


for _tn, _tf in [("LogicalAnd", "LogicalAnd"), ("LogicalOr", "LogicalOr"), ("LogicalNot", "LogicalNot")]:
    _rule(_tn)(_untyped(_tf))


@_rule("Div")
def _div(ctx: ExportContext, n: Node) -> Outs:
    """Turnout divides integers with floor division, as TensorFlow's FloorDiv does."""
    op = "RealDiv" if n.inputs[0].dtype.is_floating else "FloorDiv"
    return [f'{ctx.add(op, _ins(ctx, n), {"T": _T(n)})}:0']


@_rule("Select")
def _select(ctx: ExportContext, n: Node) -> Outs:
    return [f'{ctx.add("SelectV2", _ins(ctx, n), {"T": _T(n, 1)})}:0']


@_rule("Cast")
def _cast(ctx: ExportContext, n: Node) -> Outs:
    return [f'{ctx.add("Cast", _ins(ctx, n), {"SrcT": _T(n), "DstT": Dt(n.outputs[0].dtype)})}:0']


@_rule("MatMul")
def _matmul(ctx: ExportContext, n: Node) -> Outs:
    """TensorFlow's MatMul takes matrices only: a product of batches (or of an operand of unknown
    rank) is its BatchMatMulV2, whose ``adj_x`` / ``adj_y`` transpose real operands."""
    ta, tb = bool(n.attrs.get("transpose_a", False)), bool(n.attrs.get("transpose_b", False))
    if all(x.shape is not None and len(x.shape) == 2 for x in n.inputs):
        return [f'{ctx.add("MatMul", _ins(ctx, n), {"T": _T(n), "transpose_a": ta, "transpose_b": tb})}:0']
    return [f'{ctx.add("BatchMatMulV2", _ins(ctx, n), {"T": _T(n), "adj_x": ta, "adj_y": tb})}:0']


# ---- static attributes become constant inputs ------------------------------------------------------
def _i32(v: Any) -> np.ndarray:
    return np.asarray(v, np.int32)


@_rule("Reshape")
def _reshape(ctx: ExportContext, n: Node) -> Outs:
    s = ctx.const(_i32(n.attrs["shape"]), "shape")
    return [f'{ctx.add("Reshape", [ctx.t(n.inputs[0]), s], {"T": _T(n), "Tshape": Dt(dt.int32)})}:0']


@_rule("ReshapeTo")
def _reshape_to(ctx: ExportContext, n: Node) -> Outs:
    return [f'{ctx.add("Reshape", _ins(ctx, n), {"T": _T(n), "Tshape": Dt(n.inputs[1].dtype)})}:0']


@_rule("Transpose")
def _transpose(ctx: ExportContext, n: Node) -> Outs:
    perm = n.attrs.get("perm")
    if perm is None:
        shp = n.inputs[0].shape
        if shp is None:
            raise UnsupportedError(f"{describe_node(n)}: a transpose without perm needs the input's rank")
        perm = list(reversed(range(len(shp))))
    p = ctx.const(_i32(perm), "perm")
    return [f'{ctx.add("Transpose", [ctx.t(n.inputs[0]), p], {"T": _T(n), "Tperm": Dt(dt.int32)})}:0']


@_rule("ExpandDims")
def _expand_dims(ctx: ExportContext, n: Node) -> Outs:
    a = ctx.const(_i32(n.attrs["axis"]), "axis")
    return [f'{ctx.add("ExpandDims", [ctx.t(n.inputs[0]), a], {"T": _T(n), "Tdim": Dt(dt.int32)})}:0']


@_rule("Concat")
def _concat(ctx: ExportContext, n: Node) -> Outs:
    a = ctx.const(_i32(n.attrs["axis"]), "axis")
    attrs = {"T": _T(n), "N": len(n.inputs), "Tidx": Dt(dt.int32)}
    return [f'{ctx.add("ConcatV2", [*_ins(ctx, n), a], attrs)}:0']


@_rule("Pack")
def _pack(ctx: ExportContext, n: Node) -> Outs:
    return [f'{ctx.add("Pack", _ins(ctx, n), {"T": _T(n), "N": len(n.inputs), "axis": 0})}:0']


@_rule("Tile")
def _tile(ctx: ExportContext, n: Node) -> Outs:
    m = ctx.const(_i32(n.attrs["multiples"]), "multiples")
    return [f'{ctx.add("Tile", [ctx.t(n.inputs[0]), m], {"T": _T(n), "Tmultiples": Dt(dt.int32)})}:0']


def _axis_size(ctx: ExportContext, x: Tensor, axis: int, out: Dt) -> str:
    """The size of ``x`` along ``axis``, as a scalar of type ``out`` (int32 or int64)."""
    shape = ctx.add("Shape", [ctx.t(x)], {"T": Dt(x.dtype), "out_type": out}, suffix="shape")
    i = [ctx.const(_i32([k]), name) for k, name in ((axis, "begin"), (axis + 1, "end"), (1, "strides"))]
    attrs = {"T": out, "Index": Dt(dt.int32), "shrink_axis_mask": 1}
    return f'{ctx.add("StridedSlice", [f"{shape}:0", *i], attrs, suffix="size")}:0'


def _from_end(ctx: ExportContext, idx: Tensor, x: Tensor, axis: int) -> str:
    """Indices into ``x`` along ``axis`` with a negative one counted from the end, as Turnout's gather
    reads it (TensorFlow's ops refuse a negative index): ``idx + size`` where ``idx < 0``. An index out
    of range either way stays out of range, so TensorFlow refuses what Turnout refuses. Constant
    indices with none negative are passed as they are."""
    v = idx.node.attrs.get("value") if idx.node.op == "Const" else None
    if v is not None and np.all(np.asarray(v) >= 0):
        return ctx.t(idx)
    Ti = Dt(idx.dtype)
    size = _axis_size(ctx, x, axis, Ti)
    zero = ctx.const(np.zeros((), idx.dtype.numpy), "zero")
    neg = ctx.add("Less", [ctx.t(idx), zero], {"T": Ti}, suffix="negative")
    wrapped = ctx.add("AddV2", [ctx.t(idx), size], {"T": Ti}, suffix="from_end")
    return f'{ctx.add("SelectV2", [f"{neg}:0", f"{wrapped}:0", ctx.t(idx)], {"T": Ti}, suffix="index")}:0'


@_rule("Gather")
def _gather(ctx: ExportContext, n: Node) -> Outs:
    axis = int(n.attrs.get("axis", 0))
    idx = _from_end(ctx, n.inputs[1], n.inputs[0], axis)
    attrs = {"Tparams": _T(n), "Tindices": _T(n, 1), "Taxis": Dt(dt.int32), "batch_dims": 0}
    return [f'{ctx.add("GatherV2", [ctx.t(n.inputs[0]), idx, ctx.const(_i32(axis), "axis")], attrs)}:0']


@_rule("ScatterAddLike")
def _scatter_add_like(ctx: ExportContext, n: Node) -> Outs:
    """Zeros like ``x`` with ``updates`` added at ``indices`` along ``axis`` (the gradient of a gather):
    TensorFlow's ``UnsortedSegmentSum`` into ``x.shape[axis]`` segments, which is what its own gather
    gradient runs, on the indices counted from the end where negative (``_from_end``). Another axis
    than 0 is moved to the front and back by transposes, which need the ranks."""
    like, idx, upd = n.inputs
    axis = int(n.attrs.get("axis", 0))
    T, Ti = _T(n, 2), Dt(idx.dtype)
    ids = _from_end(ctx, idx, like, axis)
    size = _axis_size(ctx, like, axis, Ti)
    data = ctx.t(upd)
    if axis:
        if idx.shape is None or upd.shape is None:
            raise UnsupportedError(f"{describe_node(n)}: a scatter along axis {axis} needs the ranks of its "
                                   "indices and updates")
        k, r = len(idx.shape), len(upd.shape)
        front = [*range(axis, axis + k), *range(axis), *range(axis + k, r)]
        moved = ctx.add("Transpose", [data, ctx.const(_i32(front), "front")], {"T": T, "Tperm": Dt(dt.int32)},
                        suffix="front")
        data = f"{moved}:0"
    out = ctx.add("UnsortedSegmentSum", [data, ids, size], {"T": T, "Tindices": Ti, "Tnumsegments": Ti},
                  suffix=None if not axis else "sum")
    if not axis:
        return [f"{out}:0"]
    back = [*range(1, axis + 1), 0, *range(axis + 1, r - k + 1)]
    return [f'{ctx.add("Transpose", [f"{out}:0", ctx.const(_i32(back), "back")], {"T": T, "Tperm": Dt(dt.int32)})}:0']


@_rule("UpdateSlot")
def _update_slot(ctx: ExportContext, n: Node) -> Outs:
    """``x`` with slot ``i`` replaced by ``v``: TensorFlow's ``TensorScatterUpdate`` at the one index
    ``[[i]]`` (counted from the end where negative, ``_from_end``) with the update ``[v]``."""
    x, i, v = n.inputs
    T, Ti = _T(n), Dt(i.dtype)
    idx = ctx.add("Reshape", [_from_end(ctx, i, x, 0), ctx.const(_i32([1, 1]), "index_shape")],
                  {"T": Ti, "Tshape": Dt(dt.int32)}, suffix="indices")
    upd = ctx.add("ExpandDims", [ctx.t(v), ctx.const(_i32(0), "lead")], {"T": T, "Tdim": Dt(dt.int32)},
                  suffix="updates")
    return [f'{ctx.add("TensorScatterUpdate", [ctx.t(x), f"{idx}:0", f"{upd}:0"], {"T": T, "Tindices": Ti})}:0']


@_rule("Sum", "Prod", "Mean", "Max", "Min", "All", "Any")
def _reduce(ctx: ExportContext, n: Node) -> Outs:
    axis = n.attrs.get("axis")
    if axis is None and n.inputs[0].shape is None:  # every axis of a rank known when it runs, as TF writes it
        rank = ctx.add("Rank", [ctx.t(n.inputs[0])], {"T": ctx.dtype_of(n.inputs[0])}, suffix="rank")
        bounds = [ctx.const(_i32(0), "axes_start"), f"{rank}:0", ctx.const(_i32(1), "axes_delta")]
        a = f'{ctx.add("Range", bounds, {"Tidx": Dt(dt.int32)}, suffix="axes")}:0'
    else:
        if axis is None:
            axis = list(range(len(n.inputs[0].shape or ())))
        a = ctx.const(_i32(axis if isinstance(axis, (list, tuple)) else [axis]), "axes")
    attrs = {"T": _T(n), "Tidx": Dt(dt.int32), "keep_dims": bool(n.attrs.get("keepdims", False))}
    if n.op in ("All", "Any"):  # bool reductions: TensorFlow's take no type attribute
        del attrs["T"]
    return [f'{ctx.add(n.op, [ctx.t(n.inputs[0]), a], attrs)}:0']


@_rule("Fill")
def _fill(ctx: ExportContext, n: Node) -> Outs:
    return [f'{ctx.add("Fill", _ins(ctx, n), {"T": _T(n, 1), "index_type": Dt(dt.int32)})}:0']


@_rule("Shape", "Size")
def _shape(ctx: ExportContext, n: Node) -> Outs:
    return [f'{ctx.add(n.op, _ins(ctx, n), {"T": _T(n), "out_type": Dt(dt.int32)})}:0']


@_rule("BroadcastLike")
def _broadcast_like(ctx: ExportContext, n: Node) -> Outs:
    s = ctx.add("Shape", [ctx.t(n.inputs[1])], {"T": _T(n, 1), "out_type": Dt(dt.int32)}, suffix="shape")
    return [f'{ctx.add("BroadcastTo", [ctx.t(n.inputs[0]), f"{s}:0"], {"T": _T(n), "Tidx": Dt(dt.int32)})}:0']


@_rule("SumToLike")
def _sum_to_like(ctx: ExportContext, n: Node) -> Outs:
    """Sum over the axes broadcasting added (TensorFlow's BroadcastGradientArgs), then reshape."""
    x, like = ctx.t(n.inputs[0]), ctx.t(n.inputs[1])
    sl = ctx.add("Shape", [like], {"T": _T(n, 1), "out_type": Dt(dt.int32)}, suffix="like_shape")
    sx = ctx.add("Shape", [x], {"T": _T(n), "out_type": Dt(dt.int32)}, suffix="x_shape")
    axes = ctx.add("BroadcastGradientArgs", [f"{sl}:0", f"{sx}:0"], {"T": Dt(dt.int32)}, suffix="axes")
    s = ctx.add("Sum", [x, f"{axes}:0"], {"T": _T(n), "Tidx": Dt(dt.int32), "keep_dims": True}, suffix="sum")
    return [f'{ctx.add("Reshape", [f"{s}:0", f"{sl}:0"], {"T": _T(n), "Tshape": Dt(dt.int32)})}:0']


# ---- indexing --------------------------------------------------------------------------------------
def _slice_inputs(ctx: ExportContext, n: Node, spec: list[dict[str, Any]],
                  dyn: list[Tensor]) -> tuple[list[str], dict[str, Any]]:
    """begin / end / strides tensors and masks of the StridedSlice equal to a GetItem spec."""
    begin: list[Any] = []
    end: list[Any] = []
    strides: list[int] = []
    masks = {"begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0}

    def val(x: Any) -> Any:
        return dyn[x["input"]] if isinstance(x, dict) else x

    for i, e in enumerate(spec):
        if e["kind"] == "index":
            v = val(e["value"])
            begin.append(v)
            end.append(v + 1 if isinstance(v, int) and v != -1 else ("plus1", v))
            strides.append(1)
            masks["shrink_axis_mask"] |= 1 << i
        else:
            s, t, step = val(e["start"]), val(e["stop"]), e["step"] or 1
            if s is None:
                masks["begin_mask"] |= 1 << i
            if t is None:
                masks["end_mask"] |= 1 << i
            begin.append(0 if s is None else s)
            end.append(0 if t is None else t)
            strides.append(step)

    def vec(xs: list[Any], what: str) -> str:
        if all(isinstance(x, int) for x in xs):
            return ctx.const(_i32(xs), what)
        parts = []
        for k, x in enumerate(xs):
            if isinstance(x, int):
                parts.append(ctx.const(_i32(x), f"{what}{k}"))
            elif isinstance(x, tuple):  # index i: end is i + 1 (or the end of the axis for -1)
                one = ctx.const(_i32(1), f"{what}{k}_one")
                parts.append(f'{ctx.add("AddV2", [ctx.t(x[1]), one], {"T": Dt(dt.int32)}, suffix=f"{what}{k}")}:0')
            else:
                parts.append(ctx.t(x))
        return f'{ctx.add("Pack", parts, {"T": Dt(dt.int32), "N": len(parts), "axis": 0}, suffix=what)}:0'

    for k, e in enumerate(end):
        if isinstance(e, tuple) and isinstance(e[1], int):  # static -1: to the end of the axis
            end[k] = 0
            masks["end_mask"] |= 1 << k
    return [vec(begin, "begin"), vec(end, "end"), vec(strides, "strides")], masks


@_rule("GetItem")
def _getitem(ctx: ExportContext, n: Node) -> Outs:
    args, masks = _slice_inputs(ctx, n, n.attrs["spec"], list(n.inputs[1:]))
    return [f'{ctx.add("StridedSlice", [ctx.t(n.inputs[0]), *args], {"T": _T(n), "Index": Dt(dt.int32), **masks})}:0']


@_rule("GetItemGrad")
def _getitem_grad(ctx: ExportContext, n: Node) -> Outs:
    args, masks = _slice_inputs(ctx, n, n.attrs["spec"], list(n.inputs[2:]))
    s = ctx.add("Shape", [ctx.t(n.inputs[0])], {"T": _T(n), "out_type": Dt(dt.int32)}, suffix="shape")
    attrs = {"T": _T(n, 1), "Index": Dt(dt.int32), **masks}
    return [f'{ctx.add("StridedSliceGrad", [f"{s}:0", *args, ctx.t(n.inputs[1])], attrs)}:0']


# ---- Variables ---------------------------------------------------------------------------------------
@_rule("VarHandle")
def _var_handle(ctx: ExportContext, n: Node) -> Outs:
    """A resource variable, and its initializer ``<name>/Assign`` (run by the GraphDef's ``init``)."""
    d = dt.as_dtype(n.attrs["dtype"])
    h = ctx.add("VarHandleOp", [], {"dtype": Dt(d), "shape": Shape(n.attrs.get("shape")),
                                    "shared_name": n.attrs["var_name"], "container": ""})
    init = ctx.const(np.asarray(n.attrs["initial_value"], d.numpy), "initial_value")
    ctx.initializers.append(ctx.add("AssignVariableOp", [f"{h}:0", init], {"dtype": Dt(d)}, suffix="Assign"))
    return [f"{h}:0"]


@_rule("ReadVariable")
def _read(ctx: ExportContext, n: Node) -> Outs:
    return [f'{ctx.add("ReadVariableOp", _ins(ctx, n), {"dtype": Dt(n.outputs[0].dtype)})}:0']


def _assign(tf_op: str) -> _Rule:
    def rule(ctx: ExportContext, n: Node) -> Outs:
        """TensorFlow's resource assigns have no output; Turnout's return the new value: read it after."""
        d = Dt(n.outputs[0].dtype)
        a = ctx.add(tf_op, _ins(ctx, n), {"dtype": d}, suffix="assign")
        return [f'{ctx.add("ReadVariableOp", [ctx.t(n.inputs[0])], {"dtype": d}, control=[a])}:0']

    return rule


for _tn, _tf in [("AssignVariable", "AssignVariableOp"), ("AssignAddVariable", "AssignAddVariableOp"),
                 ("AssignSubVariable", "AssignSubVariableOp")]:
    _rule(_tn)(_assign(_tf))


@_rule("Assert")
def _assert(ctx: ExportContext, n: Node) -> Outs:
    """TensorFlow's ``Assert`` has no output: it checks the condition and shows its data when it fails,
    and what waits on it takes a control edge. So the value leaves through an ``Identity`` that waits
    on the check. The message travels as the first datum, a string constant (TensorFlow shows it
    first), but for TensorFlow's own prefix (an imported Assert's message, which TensorFlow writes
    again); then what the Turnout Assert shows, its texts as string constants and its data tensors
    (``shown``), or, where it shows none, the value."""
    cond, value, *data = _ins(ctx, n)
    at_frame = [cond.split(":")[0].lstrip("^")] if ctx.frame() else []

    def text(s: str) -> str:
        name = ctx.add("Const", [], {}, suffix="message", control=at_frame)
        nd = ctx.gd.node[len(ctx.gd.node) - 1]
        nd.attr["dtype"].type = protos.DT_STRING
        nd.attr["value"].tensor.dtype = protos.DT_STRING
        nd.attr["value"].tensor.tensor_shape.SetInParent()
        nd.attr["value"].tensor.string_val.append(s.encode())
        return f"{name}:0"

    shown = n.attrs.get("shown", [None] * len(data))
    typed = iter([(d, _T(n, 2 + k)) for k, d in enumerate(data)])
    parts = [(text(p), None) if p is not None else next(typed) for p in shown]
    message = str(n.attrs.get("message", ""))
    head = [] if message == TF_ASSERT_PREFIX else [(text(message), None)]
    items = [*head, *(parts if data or shown else [(value, _T(n, 1))])]
    check = ctx.add("Assert", [cond, *[i for i, _ in items]],
                    {"T": [t if t is not None else _T(n, 1) for _, t in items],
                     "summarize": int(n.attrs.get("summarize", 3))}, suffix="check")
    types = ctx.gd.node[len(ctx.gd.node) - 1].attr["T"].list.type
    for k, (_, t) in enumerate(items):
        if t is None:
            types[k] = protos.DT_STRING
    return [f'{ctx.add("Identity", [value], {"T": _T(n, 1)}, control=[check])}:0']


@_rule("Sleep")
def _sleep(ctx: ExportContext, n: Node) -> Outs:
    raise UnsupportedError(f"{describe_node(n)}: Sleep (a benchmark's stand-in for waiting on I/O) has no TensorFlow "
                           "form; build the graph without it to export it")


# ---- gradient stacks ------------------------------------------------------------------------------------
@_rule("StackNew")
def _stack_new(ctx: ExportContext, n: Node) -> Outs:
    """A LIFO stack. Turnout keys pushes by iteration; in the exported graph the loops that push and
    pop run one iteration at a time, so the k-th pop meets the k-th push from the end."""
    d = dt.as_dtype(n.attrs["elem_dtype"])
    if d.is_opaque:
        raise UnsupportedError(f"{describe_node(n)}: stacks of {d.name} values have no TensorFlow form")
    m = ctx.const(_i32(-1), "max_size")
    return [f'{ctx.add("StackV2", [m], {"elem_type": Dt(d), "stack_name": n.name})}:0']


@_rule("StackPush")
def _stack_push(ctx: ExportContext, n: Node) -> Outs:
    h, idx, v = _ins(ctx, n)
    attrs = {"T": _T(n, 2), "swap_memory": False}
    return [f'{ctx.add("StackPushV2", [h, v], attrs, control=[idx.split(":")[0]])}:0']


@_rule("StackPop")
def _stack_pop(ctx: ExportContext, n: Node) -> Outs:
    h, idx = _ins(ctx, n)
    return [f'{ctx.add("StackPopV2", [h], {"elem_type": Dt(n.outputs[0].dtype)}, control=[idx.split(":")[0]])}:0']


# ---- ops of TF1 model code (issue 38): TensorFlow's own ops, with its attributes ------------------
@_rule("ArgMax", "ArgMin")
def _arg_reduce(ctx: ExportContext, n: Node) -> Outs:
    a = ctx.const(_i32(n.attrs.get("axis", 0)), "axis")
    attrs = {"T": _T(n), "Tidx": Dt(dt.int32), "output_type": Dt(n.outputs[0].dtype)}
    return [f'{ctx.add(n.op, [ctx.t(n.inputs[0]), a], attrs)}:0']


@_rule("Cumsum", "Cumprod")
def _cumsum(ctx: ExportContext, n: Node) -> Outs:
    """A running sum or product along ``axis``: TensorFlow's op of the same name, whose axis is an input."""
    a = ctx.const(_i32(n.attrs["axis"]), "axis")
    attrs = {"T": _T(n), "Tidx": Dt(dt.int32), "exclusive": bool(n.attrs.get("exclusive", False)),
             "reverse": bool(n.attrs.get("reverse", False))}
    return [f'{ctx.add(n.op, [ctx.t(n.inputs[0]), a], attrs)}:0']


@_rule("TopK")
def _top_k(ctx: ExportContext, n: Node) -> Outs:
    k = ctx.const(_i32(n.attrs["k"]), "k")
    name = ctx.add("TopKV2", [ctx.t(n.inputs[0]), k], {"T": _T(n), "sorted": True})
    return [f"{name}:0", f"{name}:1"]


@_rule("MatrixInverse", "Cholesky", "MatrixTriangularSolve", "MatrixSolve", "MatrixDeterminant",
       "LogMatrixDeterminant")
def _linalg(ctx: ExportContext, n: Node) -> Outs:
    """TensorFlow's op of the same name (its ``adjoint`` and ``lower`` attrs are Turnout's)."""
    attrs: dict[str, Any] = {"T": _T(n)}
    attrs.update({a: bool(n.attrs.get(a, a == "lower")) for a in ("adjoint", "lower") if a in n.attrs})
    name = ctx.add(n.op, _ins(ctx, n), attrs)
    return [f"{name}:{k}" for k in range(len(n.outputs))]


@_rule("ReverseSequence")
def _reverse_sequence(ctx: ExportContext, n: Node) -> Outs:
    attrs = {"T": _T(n), "Tlen": _T(n, 1), "seq_dim": int(n.attrs["seq_axis"]),
             "batch_dim": int(n.attrs["batch_axis"])}
    return [f'{ctx.add("ReverseSequence", _ins(ctx, n), attrs)}:0']
