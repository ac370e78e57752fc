"""Import rules: one per TensorFlow op name (``IMPORT_RULES``), each building Turnout nodes.

A rule gets the import context, the NodeDef and the imported values of its data inputs, and returns
one value per TensorFlow output. Most are one Turnout node; the rest say why they are more.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout.array_ops import equal_split_parts, slice_part, split_parts
from turnout.composite import basic_index, dim, getitem, getitem_spec, index_with_new_axes
from turnout.errors import DTypeError, ShapeError, UnsupportedError
from turnout.graph import BACK_EDGE, Tensor
from turnout.graphdef.flows import gradient_flow_start, tensor_name
from turnout.graphdef.import_context import (
    TWO_OUTPUTS,
    BroadcastAxes,
    Bundle,
    ImportContext,
    RangeMarker,
    Ref,
    Text,
    Value,
    strided_slice_index,
)
from turnout.graphdef.import_context import Rule as _Rule
from turnout.summarize import TF_ASSERT_PREFIX
from turnout.tables import registrar

#: TensorFlow op name -> import rule
IMPORT_RULES: dict[str, _Rule] = {}
_rule = registrar(IMPORT_RULES)
Outs = Sequence[Value]


def _t(v: Value) -> Tensor:
    """``v``, which a rule reads as a tensor; another value (a TensorList, a stack handle, a string)
    in its place is a malformed GraphDef's, an ``UnsupportedError`` that ``import_nodes`` names the
    node in (it was an ``assert``: a raw ``AssertionError``, found by the bug hunt of 2026-12-06)."""
    if not isinstance(v, Tensor):
        raise UnsupportedError(f"an input is {ImportContext.describe(v)}, where a tensor is due")
    return v


# ---- sources and structure --------------------------------------------------------------------------
@_rule("Const")
def _const(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    lab = ctx.flows.label(f"{nd.name}:0")
    if lab is not None:
        return [_empty_ta(ctx, lab, [])]
    if ctx.attr("dtype") == 7:  # DT_STRING: an Assert's message, read when the Assert is imported
        return [Text(" ".join(v.decode("utf-8", "replace") for v in ctx.attr("value").string_val))]
    _same_dtype(ctx)
    value = protos_value(ctx)
    return [ctx.create("Const", [], {"value": value, "dtype": dt.as_dtype(value.dtype).name}).outputs[0]]


def _same_dtype(ctx: ImportContext) -> None:
    """Refuse a Const whose ``dtype`` attr is not its value's dtype, as TensorFlow's kernel does ("Type
    mismatch between value and dtype"). Why: the value's dtype won, so a float32 Const holding an int32
    tensor imported as an int32, silently. (A Const without the attr declares nothing.)"""
    from turnout.graphdef import protos

    declared, value = ctx.attr("dtype"), ctx.attr("value")
    if isinstance(declared, int) and value is not None and hasattr(value, "dtype") and value.dtype != declared:
        raise DTypeError(f"{ctx.where()}: its dtype attr is {protos.type_name(declared)}, "
                         f"but its value is {protos.type_name(value.dtype)}")


def protos_value(ctx: ImportContext) -> np.ndarray:
    """The current NodeDef's ``value`` attr (a TensorProto) as a numpy array."""
    from turnout.graphdef import protos

    return protos.tensor_to_numpy(ctx.attr("value"), ctx.where())


@_rule("Placeholder")
def _placeholder(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A placeholder of a narrow integer type Turnout has no dtype of (``protos.NARROW_INTS``: a uint8
    image) is an int32 one, which holds each of its values exactly, where every op that reads it is a
    ``Cast`` (which checks the range, ``_cast``): arithmetic in the narrow type would wrap where int32
    does not, so a placeholder read otherwise is refused."""
    from turnout.graphdef import protos

    shape = ctx.attr("shape")
    enum = protos.base_type(int(ctx.attr("dtype", 0)))
    if enum in protos.NARROW_INTS:
        readers = [o for o in ctx.nodes.values() if any(i.split(":")[0] == nd.name for i in ctx.data_inputs(o))]
        other = next((o for o in readers if o.op != "Cast"), None)
        if other is not None:
            raise UnsupportedError(f"{ctx.where()}: its dtype {protos.type_name(enum)} has no Turnout counterpart; "
                                   f"a placeholder of it is imported (as int32) only where casts alone read it, "
                                   f'but {other.op} node "{other.name}" reads it')
        return [ctx.create("Placeholder", [], {"dtype": "int32", "shape": shape}).outputs[0]]
    return [ctx.create("Placeholder", [], {"dtype": ctx.dtype("dtype").name, "shape": shape}).outputs[0]]


def _pass(op: str) -> _Rule:
    def rule(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
        x = ins[0]
        if isinstance(x, Ref):  # a ref moves into or out of a frame as its Variable's handle
            return [Ref(_single(ctx, op, x.handle, None), x.attrs, x.read)]
        if isinstance(x, Bundle):  # a stack handle moves into or out of a frame with both its parts
            return [Bundle(tuple(_single(ctx, op, p, i) for i, p in enumerate(x.parts)))]
        return [_single(ctx, op, x, None)]

    return rule


def _single(ctx: ImportContext, op: str, x: Value, part: int | None) -> Tensor:
    attrs: dict[str, Any] = {}
    if op == "Enter":
        attrs = {"frame_name": ctx.attr("frame_name"), "is_constant": bool(ctx.attr("is_constant", False)),
                 "parallel_iterations": int(ctx.attr("parallel_iterations", 10))}
    return ctx.create(op, [x], attrs, suffix=None if part is None else f"part{part}").outputs[0]


@_rule("Identity")
def _identity(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    start = gradient_flow_start(ctx.nodes, nd)
    if start is not None:  # TensorArray.grad's gradient_flow: from here the flow carries the gradient array
        return [ctx.create("Identity", [ctx.values[start]]).outputs[0]]
    return _pass("Identity")(ctx, nd, ins)


for _tf, _tn in [("Enter", "Enter"), ("RefEnter", "Enter"), ("Exit", "Exit"), ("RefExit", "Exit"),
                 ("NextIteration", "NextIteration"), ("RefNextIteration", "NextIteration"),
                 ("RefIdentity", "Identity"), ("Snapshot", "Identity"),
                 ("StopGradient", "StopGradient"), ("LoopCond", "LoopCond")]:
    _rule(_tf)(_pass(_tn))


@_rule("PreventGradient")
def _prevent_gradient(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """TensorFlow 1's fused losses (``SparseSoftmaxCrossEntropyWithLogits``) and ``CTCLoss`` wrap the
    backprop they save in it, so their gradients' graphs hold one: the value passes, and
    ``tn.gradients`` through it (a second derivative of the loss) is refused with its message, as
    TensorFlow refuses it."""
    return [ctx.create("PreventGradient", [_t(ins[0])], {"message": ctx.attr("message", "")}).outputs[0]]


@_rule("Switch", "RefSwitch")
def _switch(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Switch on the predicate itself, not on tf.cond's ``pred_id`` Identity of it: the same value
    (tf.cond switches the predicate on itself and every other input on ``pred_id``), and one tensor
    per predicate lets the fast backend see the two sides of one condition. Only that Identity is
    looked through: any other may be fed, and a Switch reading past it would take the branch the
    feed did not choose (an ``is_training`` Identity of a constant, a ``PlaceholderWithDefault``);
    a feed of ``pred_id`` itself is refused by ``ImportedGraph.run``."""
    pred = _t(ins[1])
    if _is_pred_id(ctx, pred):
        ctx.looked_through.add(ctx.data_inputs()[1].split(":")[0])
        pred = pred.node.inputs[0]
    x = ins[0]
    if isinstance(x, Ref):  # a ref routed into a branch: its handle
        n = ctx.create("Switch", [x.handle, pred])
        return [Ref(n.outputs[0], x.attrs, x.read), Ref(n.outputs[1], x.attrs, x.read)]
    if isinstance(x, Bundle):  # a stack handle routed into a branch: switch both parts
        parts = [ctx.create("Switch", [p, pred], suffix=None if k == len(x.parts) - 1 else f"part{k}")
                 for k, p in enumerate(x.parts)]
        return [Bundle(tuple(n.outputs[0] for n in parts)), Bundle(tuple(n.outputs[1] for n in parts))]
    n = ctx.create("Switch", [x, pred])
    return [n.outputs[0], n.outputs[1]]


def _is_pred_id(ctx: ImportContext, t: Tensor) -> bool:
    """Whether ``t`` is the import of tf.cond's own ``pred_id``: an Identity node of the GraphDef of
    that name, with no control inputs."""
    if not t.node.name.startswith(ctx.prefix):
        return False
    name = t.node.name.removeprefix(ctx.prefix)
    nd = ctx.nodes.get(name)
    return (nd is not None and nd.op == "Identity" and name.rsplit("/", 1)[-1] == "pred_id"
            and t.node.op == "Identity" and not t.node.control_inputs)


@_rule("Merge", "RefMerge")
def _merge(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    n = ctx.create("Merge", ins)
    for slot, (v, src) in enumerate(zip(ins, ctx.data_inputs())):
        if v is BACK_EDGE:
            ctx.back_edges.append((n, slot, src))
    return [n.outputs[0], n.outputs[1]]


@_rule("NoOp")
def _noop(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    ctx.create("NoOp", [])
    return []


@_rule("ControlTrigger")
def _control_trigger(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A NoOp whose waits on nodes inside tf.cond branches go through a Merge with the other sides.

    TensorFlow's ControlTrigger fires live even when its control inputs are dead; a Turnout NoOp
    would be dead then. tf.gradients hangs a loop's counter on triggers that wait for stack pushes
    and pops made inside a tf.cond, so in every iteration whose branch is not taken a plain NoOp
    would stop the loop. For such a wait on node ``c`` in branch ``b`` of predicate ``p``, the NoOp
    waits instead on ``Merge(signal after c, Switch(p, p)[1 - b])``: live in either case, and
    still after ``c`` whenever ``c`` runs. Inside nested conds (``tf.case``, a cond in a branch),
    branches ``b1..bk`` of predicates ``p1..pk`` from the outside in, the Merge takes one more input
    per level: ``Switch(taken_{j-1}, p_j)[1 - b_j]``, where ``taken_j`` is that Switch's other
    output (``taken_0``: ``p_1``), live exactly when the levels outside ``j`` are taken and ``j``
    is not. Exactly one of them is live in every iteration; they are joined innermost first, two
    at a time (one predicate's two sides each, which the fast backend raises to a conditional)."""
    waits = []
    for c in ctx.ctrl_inputs():
        sides = _cond_sides(ctx, c.name)
        if not sides:
            waits.append(c)
            continue
        k = len(waits)
        done = ctx.create("Const", [], {"value": np.asarray(True), "dtype": "bool"}, suffix=f"after{k}", control=[c])
        alts, taken = [], None
        for j, (pred, branch) in enumerate(sides):
            pivot = ctx.create("Switch", [pred if taken is None else taken, pred],
                               suffix=f"pivot{k}" if j == 0 else f"pivot{k}_{j}", control=[])
            alts.append(pivot.outputs[1 - branch])
            taken = pivot.outputs[branch]
        signal = done.outputs[0]
        for j in reversed(range(len(alts))):  # innermost first: each Merge joins one predicate's two sides
            signal = ctx.create("Merge", [signal, alts[j]], suffix=f"either{k}" if j == 0 else f"either{k}_{j}",
                                control=[]).outputs[0]
        waits.append(signal.node)
    ctx.create("NoOp", [], control=waits)
    return []


def _cond_sides(ctx: ImportContext, tn_name: str) -> list[tuple[Tensor, int]]:
    """For an imported node (by its name) inside tf.cond branches: the predicate and the branch of
    each enclosing cond within the frame, from the outermost in (empty outside any cond)."""
    return _cond_chain(ctx, tn_name.split("/_tn/")[0], {})


def _cond_chain(ctx: ImportContext, name: str, memo: dict[str, list[tuple[Tensor, int]]]) -> list[tuple[Tensor, int]]:
    """The conds around TensorFlow node ``name``, outermost first. Every value entering a branch
    passes its cond's Switch, so going back along data edges within the frame, the first Switches
    on non-loop predicates met border the node's branch: each, with the conds around that Switch,
    is a chain, and the longest is the node's (a node of an inner branch may also read an outer
    cond's Switch directly, as tf.gradients' stack pushes in nested conds do)."""
    if name in memo:
        return memo[name]
    memo[name] = []  # (a cycle back to here adds nothing)
    best: list[tuple[Tensor, int]] = []
    seen: set[str] = set()
    todo = [name]
    while todo:
        cur = todo.pop()
        if cur in seen or cur not in ctx.nodes:
            continue
        seen.add(cur)
        nd = ctx.nodes[cur]
        if nd.op in ("Merge", "RefMerge", "Enter", "RefEnter"):
            continue
        for i in nd.input:
            if i.startswith("^"):
                continue
            src = ctx.nodes.get(i.split(":")[0])
            if src is None:
                continue
            if src.op in ("Switch", "RefSwitch"):
                pname = ctx.data_inputs(src)[1]
                pnd = ctx.nodes.get(pname.split(":")[0])
                if pnd is not None and pnd.op != "LoopCond":
                    pred = _t(ctx.values[pname])
                    while pred.node.op == "Identity" and not pred.node.control_inputs:
                        pred = pred.node.inputs[0]
                    chain = [*_cond_chain(ctx, src.name, memo), (pred, int(i.split(":")[1]) if ":" in i else 0)]
                    if len(chain) > len(best):
                        best = chain
                continue
            todo.append(src.name)
    memo[name] = best
    return best


# ---- elementwise ------------------------------------------------------------------------------------
def _simple(tn_op: str, arity: int) -> _Rule:
    def rule(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
        return [ctx.create(tn_op, ins[:arity]).outputs[0]]

    return rule


for _tf, _tn in [("Sub", "Sub"), ("Mul", "Mul"), ("RealDiv", "Div"), ("Maximum", "Maximum"),
                 ("Minimum", "Minimum"), ("Pow", "Pow"), ("FloorMod", "FloorMod"), ("Less", "Less"),
                 ("LessEqual", "LessEqual"), ("Greater", "Greater"), ("GreaterEqual", "GreaterEqual"),
                 ("Equal", "Equal"), ("NotEqual", "NotEqual"), ("LogicalAnd", "LogicalAnd"),
                 ("LogicalOr", "LogicalOr"), ("Atan2", "Atan2")]:
    _rule(_tf)(_simple(_tn, 2))
for _tf, _tn in [("Neg", "Neg"), ("Tanh", "Tanh"), ("Sigmoid", "Sigmoid"), ("Exp", "Exp"), ("Log", "Log"),
                 ("Sqrt", "Sqrt"), ("Square", "Square"), ("Abs", "Abs"), ("Sign", "Sign"), ("Relu", "Relu"),
                 ("LogicalNot", "LogicalNot"), ("Size", "Size"), ("Log1p", "Log1p"), ("Expm1", "Expm1"),
                 ("Erf", "Erf"), ("Sin", "Sin"), ("Cos", "Cos"), ("Floor", "Floor"), ("Ceil", "Ceil"),
                 ("Tan", "Tan"), ("Asin", "Asin"), ("Acos", "Acos"), ("Atan", "Atan"), ("Sinh", "Sinh"),
                 ("Cosh", "Cosh"), ("Asinh", "Asinh"), ("Acosh", "Acosh"), ("Atanh", "Atanh"), ("Erfc", "Erfc"),
                 ("Lgamma", "Lgamma"), ("Digamma", "Digamma")]:
    _rule(_tf)(_simple(_tn, 1))
_rule("SelectV2")(_simple("Select", 3))


@_rule("Select")
def _select_v1(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """TF1's Select: a vector condition picks whole rows of higher-rank operands (dynamic_rnn copies
    finished sequences through so); otherwise it broadcasts like SelectV2. A row condition gets
    trailing axes of size 1, which Turnout's Select broadcasts."""
    c, x = _t(ins[0]), _t(ins[1])
    if c.shape is not None and len(c.shape) == 1 and (x.shape is None or len(x.shape) > 1):
        if x.shape is None:
            raise UnsupportedError(f"{ctx.where()}: a vector condition needs the operands' rank")
        for k in range(len(x.shape) - 1):
            c = ctx.create("ExpandDims", [c], {"axis": -1}, suffix=f"row{k}").outputs[0]
    return [ctx.create("Select", [c, ins[1], ins[2]]).outputs[0]]


@_rule("ZerosLike", "OnesLike")
def _like(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    lab = ctx.flows.label(f"{nd.name}:0")
    if lab is not None:  # zeros for a TensorArray gradient flow: an empty gradient TensorArray
        return [_empty_ta(ctx, lab, ins)]
    x = ins[0]
    if isinstance(x, Bundle) and x.parts[0].dtype == dt.tensor_array and nd.op == "ZerosLike":
        # a TensorList's (``import_tensor_lists``): a list of its length whose elements are never set,
        # the gradient a v2 loop's gradient passes for a list output nothing differentiates (an
        # element reads as zeros where its shape is known, as TensorFlow's unset elements; else the
        # read is an error, never a silent value)
        ta, n = x.parts
        es, elem = ta.spec.elem_shape, ta.spec.elem_dtype
        assert elem is not None
        attrs = {"dtype": elem.name, "element_shape": None if es is None else list(es),
                 "dynamic_size": True}
        return [Bundle((ctx.create("TensorArrayNew", [n], attrs).outputs[0], n))]
    return [ctx.create(nd.op, ins[:1]).outputs[0]]


@_rule("Add", "AddV2", "AddN")
def _add(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A sum; of TensorArray flows (tf.gradients aggregating TensorArray gradients) a slotwise sum."""
    if len(ins) == 1:
        return [ctx.create("Identity", ins).outputs[0]]
    if all(isinstance(x, Bundle) for x in ins):  # TensorLists (``import_tensor_lists``): slotwise too
        arrays = [x.parts[0] for x in ins]  # type: ignore[union-attr]
        acc = arrays[0]
        for k, a in enumerate(arrays[1:]):
            acc = ctx.create("TensorArrayAdd", [acc, a], suffix=f"add{k}").outputs[0]
        return [Bundle((acc, ins[0].parts[1]))]  # type: ignore[union-attr]
    ins = [ctx.range_tensor(x) for x in ins]  # (a Range of a run-time limit: reduced_shape's axes + rank)
    op = "TensorArrayAdd" if _t(ins[0]).dtype == dt.tensor_array else "Add"
    acc = ins[0]
    for k, x in enumerate(ins[1:]):
        acc = ctx.create(op, [acc, x], suffix=None if k == len(ins) - 2 else f"add{k}").outputs[0]
    return [acc]


@_rule("TensorScatterUpdate")
def _tensor_scatter_update(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A scatter of one slot along axis 0 (indices of shape ``[1, 1]``, updates with a leading 1: the
    form Turnout's ``UpdateSlot`` exports to) is that ``UpdateSlot``; other scatters are refused."""
    x, idx, upd = (_t(v) for v in ins)
    if idx.shape is None or tuple(idx.shape) != (1, 1) or upd.shape is None or tuple(upd.shape[:1]) != (1,):
        raise UnsupportedError(f"{ctx.where()}: only a scatter of one slot along axis 0 (indices of shape [1, 1]) "
                               "is supported")
    first = [{"kind": "index", "value": 0}]
    i = ctx.create("GetItem", [idx], {"spec": [*first, *first]}, suffix="index").outputs[0]
    v = ctx.create("GetItem", [upd], {"spec": first}, suffix="update").outputs[0]
    return [ctx.create("UpdateSlot", [x, i, v]).outputs[0]]


@_rule("TanhGrad")
def _tanh_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """dy * (1 - y^2), from the forward output y."""
    y, dy = ins
    yy = ctx.create("Mul", [y, y], suffix="yy").outputs[0]
    one = ctx.create("OnesLike", [y], suffix="one").outputs[0]
    d = ctx.create("Sub", [one, yy], suffix="one_minus_yy").outputs[0]
    return [ctx.create("Mul", [dy, d]).outputs[0]]


@_rule("SigmoidGrad")
def _sigmoid_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """dy * y * (1 - y), from the forward output y."""
    y, dy = ins
    one = ctx.create("OnesLike", [y], suffix="one").outputs[0]
    d = ctx.create("Sub", [one, y], suffix="one_minus_y").outputs[0]
    yd = ctx.create("Mul", [y, d], suffix="y_one_minus_y").outputs[0]
    return [ctx.create("Mul", [dy, yd]).outputs[0]]


@_rule("ReluGrad")
def _relu_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """dy where the forward input was positive, else 0."""
    dy, x = ins
    z = ctx.create("ZerosLike", [x], suffix="zero").outputs[0]
    pos = ctx.create("Greater", [x, z], suffix="positive").outputs[0]
    zdy = ctx.create("ZerosLike", [dy], suffix="zero_dy").outputs[0]
    return [ctx.create("Select", [pos, dy, zdy]).outputs[0]]


@_rule("Cast")
def _cast(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A cast from a narrow integer type (a placeholder ``_placeholder`` imported as int32) first checks
    that each value is one of that type's: a feed out of its range is a ``KernelError`` when the
    program runs, as TensorFlow refuses to feed it."""
    from turnout.graphdef import protos

    x = _t(ins[0])
    bounds = protos.NARROW_INTS.get(protos.base_type(int(ctx.attr("SrcT", 0))))
    if bounds is not None and x.dtype == dt.int32:
        lo, hi = (ctx.const(np.asarray(b, np.int32), [x], suffix=f"bound{k}") for k, b in enumerate(bounds))
        ok = ctx.create("LogicalAnd", [ctx.create("GreaterEqual", [x, lo], suffix="above").outputs[0],
                                       ctx.create("LessEqual", [x, hi], suffix="below").outputs[0]],
                        suffix="in_range").outputs[0]
        name = protos.type_name(protos.base_type(int(ctx.attr("SrcT"))))
        x = ctx.checked(ok, x, f"a value out of the range of {name}, [{bounds[0]}, {bounds[1]}], was fed", "range")
    return [ctx.create("Cast", [x], {"dtype": ctx.dtype("DstT").name}).outputs[0]]


@_rule("MatMul")
def _matmul(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    attrs = {"transpose_a": bool(ctx.attr("transpose_a", False)), "transpose_b": bool(ctx.attr("transpose_b", False))}
    return [ctx.create("MatMul", ins[:2], attrs).outputs[0]]


# ---- shapes: TensorFlow passes them as tensors, Turnout as static attributes ----------------------
@_rule("Shape")
def _shape(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    s = ctx.create("Shape", ins[:1], suffix=None if ctx.attr("out_type", 3) == 3 else "int32").outputs[0]
    if ctx.attr("out_type", 3) != 3:
        s = ctx.create("Cast", [s], {"dtype": ctx.dtype("out_type").name}).outputs[0]
    return [s]


@_rule("ShapeN")
def _shape_n(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """One Shape per input (what tf.gradients asks of a Concat's inputs)."""
    out = []
    for k, x in enumerate(ins):
        s = ctx.create("Shape", [x], suffix=None if k == len(ins) - 1 and ctx.attr("out_type", 3) == 3
                       else f"shape{k}").outputs[0]
        if ctx.attr("out_type", 3) != 3:
            s = ctx.create("Cast", [s], {"dtype": ctx.dtype("out_type").name},
                           suffix=None if k == len(ins) - 1 else f"cast{k}").outputs[0]
        out.append(s)
    return out


def _folded(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """An op over shapes that constant folding evaluates (all its inputs are known at import time)."""
    names = ctx.data_inputs()
    n_out = 2 if nd.op in TWO_OUTPUTS else 1
    vals = [ctx.static(f"{nd.name}:{k}") for k in range(n_out)]
    if any(v is None for v in vals):
        raise UnsupportedError(f"{ctx.where()}: supported only when its inputs are known at import time "
                               f"(here {', '.join(names)})")
    return [ctx.const(v, [x for x in ins if isinstance(x, Tensor)], suffix=None if n_out == 1 and k == 0 else
                      f"out{k}") for k, v in enumerate(vals)]


_rule("ListDiff")(_folded)


@_rule("Rank")
def _rank_op(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Folded where the input's rank is known at import time; else the length of its shape, read when
    it runs (the ``reduce_sum`` of a TensorArray's ``concat``, whose rank TensorFlow leaves unknown)."""
    if ctx.static(f"{nd.name}:0") is not None:
        return _folded(ctx, nd, ins)
    shape = ctx.create("Shape", ins[:1], suffix="shape").outputs[0]
    return [ctx.create("Size", [shape]).outputs[0]]


@_rule("Prod")
def _prod(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Folded when known (a shape's size, say), else the ``Prod`` primitive over the static axes."""
    if ctx.static(f"{nd.name}:0") is not None:
        return _folded(ctx, nd, ins)
    axes = ctx.static_int_list(ctx.data_inputs()[1], "the reduction axes")
    return [ctx.create("Prod", ins[:1], {"axis": axes, "keepdims": bool(ctx.attr("keep_dims", False))}).outputs[0]]


@_rule("BroadcastGradientArgs")
def _broadcast_gradient_args(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The axes each operand of a broadcasting op was broadcast along: folded when both shapes are
    known; else, for shapes read by Shape ops, ``BroadcastAxes`` markers that the Sum of tf.gradients'
    ``reshape(reduce_sum(dz, axes), shape(x))`` turns into Turnout's SumToLike(dz, x)."""
    vals = [ctx.static(f"{nd.name}:{k}") for k in range(2)]
    if all(v is not None for v in vals):
        return _folded(ctx, nd, ins)
    likes = []
    for k, tname in enumerate(ctx.data_inputs()):
        snd = ctx.nodes[tname.split(":")[0]]
        if snd.op == "ShapeN":
            likes.append(_t(ctx.values[ctx.data_inputs(snd)[int(tname.split(":")[1])]]))
        else:  # the tensor a Shape read, or zeros of the shape (a shape saved on a gradient stack)
            likes.append(_like_shape(ctx, tname, _t(ins[k]), f"like{k}"))
    return [BroadcastAxes(x) for x in likes]


@_rule("Range")
def _range(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    v = ctx.static(f"{nd.name}:0")
    if v is not None:
        return [ctx.const(v, [x for x in ins if isinstance(x, Tensor)], suffix=None)]
    names = ctx.data_inputs()
    start, delta = ctx.static(names[0]), ctx.static(names[2])
    if any(v is not None and not np.issubdtype(np.asarray(v).dtype, np.integer) for v in (start, delta)):
        start = delta = None  # (a float bound: the tensors hold it, not an int that would truncate it)
    marker = RangeMarker(None if start is None else int(start), ins[1], None if delta is None else int(delta),
                         names[1].split(":")[0], ins[0] if start is None else None, ins[2] if delta is None else None)
    # (a run-time start or step: the tensor tn.range builds; only known ints stay symbolic, for the
    # TensorArray indices and gradient stacks that read range(0, n) by its limit)
    return [ctx.range_tensor(marker) if start is None or delta is None else marker]


@_rule("Reshape")
def _reshape(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A Reshape to a shape known at import time; else ReshapeTo, which reads the shape when it runs
    (TF1 models with a None batch or time dimension reshape to shapes computed from Shape)."""
    shape = ctx.static(ctx.data_inputs()[1])
    if shape is not None:
        return [ctx.create("Reshape", ins[:1], {"shape": [int(d) for d in np.ravel(shape)]}).outputs[0]]
    target = _t(ins[1])
    if target.dtype != dt.int32:
        target = ctx.create("Cast", [target], {"dtype": "int32"}, suffix="shape").outputs[0]
    return [ctx.create("ReshapeTo", [ins[0], target], shapes=[_partial_shape(ctx, ctx.data_inputs()[1])]).outputs[0]]


def _shape_entry(ctx: ImportContext, tname: str) -> int | None:
    """``shape(x)[k]`` (a StridedSlice of a Shape that picks one entry) where the imported ``x``
    knows that dimension, though not all of them (a loss reshaping logits to ``[-1, classes]``)."""
    nd = ctx.nodes.get(tname.split(":")[0])
    if nd is None or nd.op != "StridedSlice" or not ctx.attr_of(nd, "shrink_axis_mask", 0):
        return None
    names = ctx.data_inputs(nd)
    src = ctx.nodes.get(names[0].split(":")[0])
    begin = ctx.static(names[1])
    if src is None or src.op != "Shape" or begin is None or np.size(begin) != 1:
        return None
    x = ctx.values.get(tensor_name(ctx.data_inputs(src)[0]))
    if not isinstance(x, Tensor) or x.shape is None or not -len(x.shape) <= int(np.ravel(begin)[0]) < len(x.shape):
        return None
    d = x.shape[int(np.ravel(begin)[0])]
    return None if d is None else int(d)


def _partial_shape(ctx: ImportContext, tname: str) -> list[Any] | None:
    """What is known at import time of a run-time shape vector, entry by entry (None: known when it
    runs; -1 too): a ConcatV2 or Pack of parts, some constant, or the Shape (ShapeN) of a tensor
    whose static shape has some dimensions. An embedding's gradient reshapes its
    rows to ``concat([n], shape(params)[1:])``, whose row length is known."""
    v = ctx.static(tname)
    if v is not None:
        return [None if int(d) < 0 else int(d) for d in np.ravel(v)]
    nd = ctx.nodes.get(tname.split(":")[0])
    if nd is None:
        return None
    if nd.op in ("Shape", "ShapeN"):  # (the shape of a tensor whose static shape is partly known)
        k = int(tensor_name(tname).split(":")[1]) if nd.op == "ShapeN" else 0
        x = ctx.values.get(tensor_name(ctx.data_inputs(nd)[k]))
        return None if not isinstance(x, Tensor) or x.shape is None else list(x.shape)
    if nd.op == "Pack":
        out: list[Any] = []
        for t in ctx.data_inputs(nd):
            d = ctx.static(t)
            out.append(_shape_entry(ctx, t) if d is None else None if int(d) < 0 else int(d))
        return out
    if nd.op == "ConcatV2":
        out = []
        for t in ctx.data_inputs(nd)[:-1]:
            part = _partial_shape(ctx, t)
            if part is None:
                x = ctx.values.get(tensor_name(t))
                if not isinstance(x, Tensor) or x.shape is None or len(x.shape) != 1 or x.shape[0] is None:
                    return None
                part = [None] * int(x.shape[0])
            out += part
        return out
    return None


@_rule("ExpandDims")
def _expand_dims(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    (axis,) = ctx.static_int_list(ctx.data_inputs()[1], "the axis")
    return [ctx.create("ExpandDims", ins[:1], {"axis": axis}).outputs[0]]


@_rule("Tile")
def _tile(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    x = _t(ins[0])
    if ctx.static(ctx.data_inputs()[1]) is None and x.shape is not None and all(d == 1 for d in x.shape):
        # run-time multiples of a tensor of ones along every axis (tf.gradients' Mean gradient with
        # unknown shapes): a broadcast to the shape the multiples give
        like = _like_shape(ctx, ctx.data_inputs()[1], _t(ins[1]))
        return [ctx.create("BroadcastLike", [x, like]).outputs[0]]
    mult = ctx.static_int_list(ctx.data_inputs()[1], "the multiples")
    return [ctx.create("Tile", ins[:1], {"multiples": mult}).outputs[0]]


def _like_shape(ctx: ImportContext, tname: str, shape: Tensor, suffix: str = "like") -> Tensor:
    """A tensor of the run-time shape ``shape`` (TensorFlow tensor ``tname``): the tensor a Shape op
    read, else zeros of that shape."""
    snd = ctx.nodes[tname.split(":")[0]]
    if snd.op == "Shape":
        v = ctx.values[ctx.data_inputs(snd)[0]]
        if isinstance(v, Tensor):
            return v
    if shape.dtype != dt.int32:
        shape = ctx.create("Cast", [shape], {"dtype": "int32"}, suffix=f"{suffix}_shape").outputs[0]
    zero = ctx.const(np.zeros((), np.bool_), [shape], suffix=f"{suffix}_zero")  # (only its shape is read)
    return ctx.create("Fill", [shape, zero], suffix=suffix).outputs[0]


@_rule("Transpose")
def _transpose(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    perm = ctx.static_int_list(ctx.data_inputs()[1], "the permutation")
    return [ctx.create("Transpose", ins[:1], {"perm": perm}).outputs[0]]


@_rule("Sum", "Mean", "Max", "Min", "All", "Any")
def _reduce(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    if isinstance(ins[1], BroadcastAxes):
        return [_sum_to_like(ctx, nd, _t(ins[0]), ins[1].like)]
    axes = None if _every_axis(ctx, ins[1]) else ctx.static_int_list(ctx.data_inputs()[1], "the reduction axes")
    attrs = {"axis": axes, "keepdims": bool(ctx.attr("keep_dims", False))}
    return [ctx.create(nd.op, ins[:1], attrs).outputs[0]]


def _every_axis(ctx: ImportContext, axes: Value) -> bool:
    """Whether reduction axes are ``range(0, rank(x))`` of the reduced ``x`` itself, what TensorFlow
    writes for a reduction over every axis of a tensor of unknown rank."""
    if not isinstance(axes, RangeMarker) or axes.start != 0 or axes.delta != 1:
        return False
    limit = ctx.nodes[axes.limit_node]
    return limit.op == "Rank" and ctx.data_inputs(limit)[0] == ctx.data_inputs()[0]


@_rule("ConcatV2")
def _concat(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    (axis,) = ctx.static_int_list(ctx.data_inputs()[-1], "the axis")
    return [ctx.create("Concat", ins[:-1], {"axis": axis}).outputs[0]]


@_rule("Pack")
def _pack(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tf.stack``, as ``tn.stack`` builds it: the ``Pack`` primitive along a new leading axis;
    along another, each input given that axis and joined along it (so no rank is needed)."""
    axis = int(ctx.attr("axis", 0))
    if axis == 0:
        return [ctx.create("Pack", ins).outputs[0]]
    parts = [ctx.create("ExpandDims", [t], {"axis": axis}, suffix=f"expand_{k}").outputs[0] for k, t in enumerate(ins)]
    return [ctx.create("Concat", parts, {"axis": axis}).outputs[0]]


@_rule("Fill")
def _fill(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    lab = ctx.flows.label(f"{nd.name}:0")
    if lab is not None:
        return [_empty_ta(ctx, lab, ins)]
    return [ctx.create("Fill", ins[:2]).outputs[0]]


def _known_non_negative(ctx: ImportContext, tname: str) -> bool:
    """Whether the import folds ``tname`` and finds no negative entry (then no check is needed)."""
    known = ctx.static(tname)
    return known is not None and bool(np.all(np.asarray(known) >= 0))


def non_negative(ctx: ImportContext, v: Value, tname: Optional[str], what: str) -> Value:
    """The indices ``v`` once none of its entries is negative. TensorFlow's gathers refuse a negative
    index (its CPU kernels say it is not in ``[0, n)``), where Turnout's ``Gather`` counts one from the
    end, as numpy does: without the check an imported lookup of ``-1`` would read the last row instead
    of failing. Left as it is where the import knows every entry (``tname``'s folded value, when the
    indices are a NodeDef's input), or where it is a ``Range`` that starts at 0 or later and counts up."""
    if tname is not None and _known_non_negative(ctx, tname):
        return v
    if isinstance(v, RangeMarker) and isinstance(v.start, int) and isinstance(v.delta, int) \
            and v.start >= 0 and v.delta > 0:
        return v
    idx = _t(ctx.range_tensor(v))
    zero = ctx.const(np.zeros((), idx.dtype.numpy), [idx], suffix=f"{what}_zero")
    ok = ctx.create("GreaterEqual", [idx, zero], suffix=f"{what}_non_negative").outputs[0]
    return ctx.checked(ok, idx, f"{what} must be >= 0 (TensorFlow refuses a negative index)", f"{what}_check")


@_rule("GatherV2")
def _gather(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    (axis,) = ctx.static_int_list(ctx.data_inputs()[2], "the axis")
    if ctx.attr("batch_dims", 0):
        raise UnsupportedError(f"{ctx.where()}: batch_dims is not supported")
    idx = non_negative(ctx, ins[1], ctx.data_inputs()[1], "indices")
    return [ctx.create("Gather", [ins[0], idx], {"axis": axis}).outputs[0]]


@_rule("UnsortedSegmentSum")
def _segment_sum(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Sum rows of ``data`` into ``num_segments`` rows (tf.gather's gradient): Turnout's
    ScatterAddLike into zeros of shape [num_segments, *data.shape[rank(ids):]]. A constant where
    every size is known at import; else a ``Fill`` of the run-time shape (a gradient accumulated in
    a loop has a run-time count; ``UnsortedSegmentProd``'s gradient, data of a run-time batch)."""
    data, ids, n = (_t(x) for x in ins[:3])
    num = ctx.static(ctx.data_inputs()[2])
    if _known_non_negative(ctx, ctx.data_inputs()[1]):
        return [segment_sum(ctx, data, ids, n, num)]
    return [_negative_ids_dropped(ctx, data, ids, n, num)]


def _negative_ids_dropped(ctx: ImportContext, data: Tensor, ids: Tensor, n: Tensor, num: Any) -> Tensor:
    """``UnsortedSegmentSum`` of ids that may be negative: TensorFlow's kernel drops the row of a
    negative id (an id of -1 is how a model leaves a padding row out), where ``ScatterAddLike``
    would count it from the end. Such a row is summed into one more segment, past the last, which
    the result leaves out; an id at or past ``n`` is still refused (an ``Assert``: the extra segment
    must not take it). Whatever the ranks of the data, and with gradients through it as ever."""
    n_ids = n if n.dtype == ids.dtype else ctx.create("Cast", [n], {"dtype": ids.dtype.name}, suffix="n_ids").outputs[0]
    ids = ctx.checked(ctx.create("Less", [ids, n_ids], suffix="below_n").outputs[0], ids,
                      "segment ids must be < num_segments", "ids_check")
    zero = ctx.const(np.zeros((), ids.dtype.numpy), [ids], suffix="id_zero")
    negative = ctx.create("Less", [ids, zero], suffix="negative_ids").outputs[0]
    ids = ctx.create("Select", [negative, n_ids, ids], suffix="dropped_to_the_end").outputs[0]
    one = ctx.const(np.ones((), n.dtype.numpy), [n], suffix="one")
    more = ctx.create("Add", [n, one], suffix="n_and_one").outputs[0]
    total = segment_sum(ctx, data, ids, more, None if num is None else int(num) + 1)
    return _getitem(ctx, total, (slice(None, -1, None),), "segments")


def segment_sum(ctx: ImportContext, data: Tensor, ids: Tensor, n: Tensor, num: Any) -> Tensor:
    """The rows of ``data`` summed into ``n`` segments by ``ids`` (``num``: ``n``'s value where the
    import knows it, else None), the formula of ``UnsortedSegmentSum``. The rank of the ids must be
    known; the data's may be known only when the program runs (a gradient's ``ones`` of a computed
    shape), its rows' shape then read from its ``Shape``."""
    if ids.shape is None or (data.shape is not None and len(ids.shape) > len(data.shape)):
        raise UnsupportedError(f"{ctx.where()}: needs the rank of the segment ids, at most the data's")
    rest = [] if data.shape is None else [_dim(ctx, data, k, f"dim{k}") for k in range(len(ids.shape), len(data.shape))]
    if num is not None and data.shape is not None and all(isinstance(d, int) for d in rest):
        like = ctx.const(np.zeros([int(num), *rest], data.dtype.numpy), [data], suffix="zeros")
    else:
        count = n if n.dtype == dt.int32 else ctx.create("Cast", [n], {"dtype": "int32"}, suffix="count").outputs[0]
        if data.shape is None:  # [count, *shape(data)[rank(ids):]]
            lead = ctx.create("Reshape", [count], {"shape": [1]}, suffix="count_vector").outputs[0]
            rows = _getitem(ctx, ctx.create("Shape", [data], suffix="data_shape").outputs[0],
                            (slice(len(ids.shape), None, None),), "row_shape")
            shape = ctx.create("Concat", [lead, rows], {"axis": 0}, suffix="shape").outputs[0]
        else:
            dims = [count, *(d if isinstance(d, Tensor)
                             else ctx.const(np.asarray(d, np.int32), [count], suffix=f"size{k}")
                             for k, d in enumerate(rest))]
            shape = ctx.create("Pack", dims, suffix="shape").outputs[0]
        zero = ctx.const(np.zeros((), data.dtype.numpy), [count], suffix="zero")
        like = ctx.create("Fill", [shape, zero], suffix="zeros").outputs[0]
    return ctx.create("ScatterAddLike", [like, ids, data]).outputs[0]


# ---- strided slices -------------------------------------------------------------------------------

def _elems(ctx: ImportContext, tname: str, what: str) -> list[Any]:
    """The entries of a small int vector: ints where known, Turnout scalars where a Pack builds it
    from run-time values (``x[i]`` with a tensor ``i``), or elements of a run-time vector of known
    length (such a Pack saved on a stack by ``tf.gradients`` and popped in the gradient loop)."""
    v = ctx.static(tname)
    if v is not None:
        return [int(x) for x in np.ravel(v)]
    nd = ctx.nodes[tname.split(":")[0]]
    if nd.op == "Pack":
        out: list[Any] = []
        for t in ctx.data_inputs(nd):
            s = ctx.static(t)
            out.append(int(s) if s is not None else ctx.values[t])
        return out
    vec = ctx.values.get(tensor_name(tname))
    if isinstance(vec, Tensor) and vec.shape is not None and len(vec.shape) == 1 and vec.shape[0] is not None:
        return [_getitem(ctx, vec, (k,), f"{what.split()[-1]}{k}") for k in range(vec.shape[0])]
    raise UnsupportedError(f"{ctx.where()}: {what} ({tname}) must be a constant or packed from scalars")


def _slice_args(ctx: ImportContext, names: list[str], rank: Optional[int]
                ) -> tuple[list[dict[str, Any]], list[Tensor], list[int]]:
    """GetItem's spec and run-time entries of a StridedSlice's begin, end and strides, and the axes
    of its result that its new-axis bits add (``basic_index``; ``rank`` is the sliced tensor's)."""
    begin = _elems(ctx, names[0], "begin")
    end = _elems(ctx, names[1], "end")
    strides = ctx.static_int_list(names[2], "the strides")
    key = strided_slice_index(ctx.node, begin, end, strides)
    if rank is None and any(k is Ellipsis for k in key):  # (by identity: entries may be tensors)
        raise UnsupportedError(f"{ctx.where()}: an ellipsis (ellipsis_mask) needs the rank of the sliced tensor "
                               "when importing")
    key, new_axes = basic_index(key, rank)
    dyn: list[Tensor] = []
    return getitem_spec(key, dyn), dyn, new_axes


def _rank(x: Tensor) -> Optional[int]:
    return None if x.shape is None else len(x.shape)


@_rule("StridedSlice")
def _strided_slice(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A ``GetItem``; each new-axis bit an ``ExpandDims`` of its result (``x[:, None]``), as ``x[key]``."""
    x = _t(ins[0])
    spec, dyn, new_axes = _slice_args(ctx, ctx.data_inputs()[1:4], _rank(x))
    return [index_with_new_axes(ctx, x, spec, dyn, new_axes)]


@_rule("StridedSliceGrad")
def _strided_slice_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    names = ctx.data_inputs()
    dy = _t(ins[4])
    shape = ctx.static(names[0])
    if shape is not None:
        like = ctx.const(np.zeros([int(d) for d in np.ravel(shape)], dy.dtype.numpy), [dy], suffix="zeros")
    else:  # a run-time input shape: the tensor its Shape op read, or zeros of that shape
        like = _like_shape(ctx, names[0], _t(ins[0]))
    spec, dyn, new_axes = _slice_args(ctx, names[1:4], _rank(like))
    for axis in reversed(new_axes):  # the axes the new-axis bits added, of size 1, dropped again
        dy = _getitem(ctx, dy, (*[slice(None)] * axis, 0), f"drop_new_axis{axis}")
    return [ctx.create("GetItemGrad", [like, dy, *dyn], {"spec": spec}).outputs[0]]


# ---- resource variables -----------------------------------------------------------------------------
def _var_node(ctx: ImportContext, tname: str) -> Any:
    """The NodeDef that makes the resource ``tname`` reads: a VarHandleOp, or a function's argument
    (``import_functions``), through the ops that pass a resource on (a v2 loop's output ``k`` is its
    input ``k``: a loop passes a Variable through unchanged)."""
    nd, port = ctx.nodes[tname.split(":")[0]], int(tensor_name(tname).split(":")[1])
    while nd.op not in ("VarHandleOp", "_Arg"):
        ins = ctx.data_inputs(nd)
        if nd.op in ("While", "StatelessWhile") and port < len(ins):
            nd, port = ctx.nodes[ins[port].split(":")[0]], int(ins[port].split(":")[1])
            continue
        if nd.op not in ("Identity", "Enter", "Switch", "Merge", "Exit", "RefEnter", "RefIdentity") or not ins:
            raise UnsupportedError(f"{ctx.where()}: its resource does not come from a VarHandleOp")
        nd, port = ctx.nodes[ins[0].split(":")[0]], int(ins[0].split(":")[1])
    return nd


def _var_attrs(ctx: ImportContext, vnd: Any) -> dict[str, Any]:
    """The dtype and shape of the Variable of VarHandleOp ``vnd``, or of the Variable a function's
    resource argument ``vnd`` is passed (read off the Turnout VarHandle the call's value comes from)."""
    from turnout.graphdef import protos

    if vnd.op == "_Arg":
        handle = _t(ctx.args[vnd.name]).node
        while handle.op != "VarHandle" and handle.inputs:
            handle = handle.inputs[0].node
        if handle.op != "VarHandle":
            raise UnsupportedError(f"{ctx.where()}: its resource does not come from a Variable")
        return {"dtype": handle.attrs["dtype"], "shape": handle.attrs["shape"]}
    return {"dtype": protos.tf_dtype(protos.attr(vnd, "dtype"), vnd.name).name, "shape": protos.attr(vnd, "shape")}


@_rule("VarHandleOp")
def _var_handle(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A Variable. Turnout variables carry their initial value: it is the value that the
    initializer (the AssignVariableOp TensorFlow names ``<var>/Assign``) writes, computed at import
    (``ImportContext.initial_value``: constants, or TensorFlow's random ops drawn as it draws them)."""
    attrs = _var_attrs(ctx, nd)
    init = None
    candidates = []
    for other in ctx.nodes.values():
        if other.op == "AssignVariableOp" and _var_source(ctx, other) == nd.name:
            candidates.append(other)
    candidates.sort(key=lambda o: o.name != f"{nd.name}/Assign")
    for c in candidates:
        init = ctx.initial_value(ctx.data_inputs(c)[1])
        if init is not None:
            break
    if init is None:
        raise UnsupportedError(f"{ctx.where()}: the variable has no initializer that can be computed at import "
                               "(an AssignVariableOp of constants and random ops of shapes known at import time)")
    if attrs["shape"] is None or any(d is None for d in attrs["shape"]):
        attrs["shape"] = list(np.shape(init))
    name = ctx.attr("shared_name") or nd.name
    value = np.asarray(init, dtype=dt.as_dtype(attrs["dtype"]).numpy)
    n = ctx.create("VarHandle", [], {"var_name": ctx.prefix + name, "initial_value": value, **attrs})
    ctx.graph.variables[ctx.prefix + name] = n
    return [n.outputs[0]]


def _var_source(ctx: ImportContext, nd: Any) -> str | None:
    try:
        return str(_var_node(ctx, ctx.data_inputs(nd)[0]).name)
    except (UnsupportedError, KeyError):
        return None


@_rule("ReadVariableOp")
def _read_var(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    attrs = _var_attrs(ctx, _var_node(ctx, ctx.data_inputs()[0]))
    return [ctx.create("ReadVariable", ins[:1], attrs).outputs[0]]


def _written(ctx: ImportContext, value: Value) -> Value:
    """What an assign writes: a value that depends on random draws and is computed at import (a
    variable initializer, ``ImportContext.initial_value``) as that constant, the very numbers the
    Variable starts with, whatever arithmetic a backend would use; any other value as it is."""
    name = ctx.data_inputs()[1]
    drawn = ctx.initial_value(name) if ctx.static(name) is None else None
    if drawn is None:
        return value
    return ctx.const(drawn, [value] if isinstance(value, Tensor) else [], suffix="initial_value")


def _assign(tn_op: str) -> _Rule:
    def rule(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
        attrs = _var_attrs(ctx, _var_node(ctx, ctx.data_inputs()[0]))
        ctx.create(tn_op, [ins[0], _written(ctx, ins[1])], attrs)
        return []  # TensorFlow's resource assigns have no outputs

    return rule


for _tf, _tn in [("AssignVariableOp", "AssignVariable"), ("AssignAddVariableOp", "AssignAddVariable"),
                 ("AssignSubVariableOp", "AssignSubVariable")]:
    _rule(_tf)(_assign(_tn))


@_rule("VarIsInitializedOp")
def _var_is_initialized(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Always true: an imported Variable starts at its initializer's value."""
    return [ctx.const(np.asarray(True), [x for x in ins if isinstance(x, Tensor)], suffix=None)]


# ---- TensorFlow's gradient stacks (LIFO) as Turnout's keyed stacks ---------------------------------
@_rule("StackV2")
def _stack(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A LIFO stack: a Turnout stack keyed by depth, and an int32 depth counter (a Variable). A push
    takes the slot ``depth`` and increments it in one AssignAdd; a pop decrements it and reads that
    slot, so pushes and pops pair up exactly as TensorFlow's, in whatever order they fire."""
    elem = ctx.dtype("elem_type")
    s = ctx.create("StackNew", [], {"elem_dtype": elem.name, "elem_shape": None, "forward_tensor": nd.name,
                                   "tf_stack": True}, suffix="stack")
    name = f"{ctx.prefix}{nd.name}/depth"
    depth = ctx.create("VarHandle", [], {"var_name": name, "dtype": "int32", "shape": [],
                                         "initial_value": np.asarray(0, np.int32)})
    return [Bundle((s.outputs[0], depth.outputs[0]))]


def _stack_parts(ctx: ImportContext, v: Value) -> tuple[Tensor, Tensor]:
    if not isinstance(v, Bundle):
        raise UnsupportedError(f"{ctx.where()}: its stack handle does not come from a StackV2")
    return v.parts[0], v.parts[1]


@_rule("StackPushV2")
def _push(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    stack, depth = _stack_parts(ctx, ins[0])
    if isinstance(ins[1], RangeMarker):  # a run-time range of indices: its limit is what varies
        r = ins[1]
        ctx.pushed_ranges[_stack_source(ctx, nd)] = (r.start, r.delta, r.limit_node)
        ctx.pushed[nd.name] = r.limit
        ins = [ins[0], r.limit]
    elem = _t(ins[1])
    if elem.dtype == dt.tensor_array and _pops_only_order(ctx, nd):
        # tf.gradients saves a forward TensorArray's flow only to order the gradient array's creation
        # after it: its size stands in (an int32 scalar, which every backend stacks), not the array
        elem = ctx.create("TensorArraySize", [elem], suffix="flow_token").outputs[0]
        ctx.pushed[nd.name] = elem
        from turnout.devices.placement import resource_creator

        maker = resource_creator(stack)  # (through the Enters that bring the handle into the loop)
        if maker is not None:
            maker.attrs["elem_dtype"] = elem.dtype.name  # the stack holds the tokens (an export writes it so)
    one = ctx.const(np.asarray(1, np.int32), [elem], suffix="one")
    after = ctx.create("AssignAddVariable", [depth, one], {"dtype": "int32", "shape": []}, suffix="depth").outputs[0]
    slot = ctx.create("Sub", [after, one], suffix="slot").outputs[0]
    key = ctx.create("Reshape", [slot], {"shape": [1]}, suffix="key").outputs[0]
    return [ctx.create("StackPush", [stack, key, elem]).outputs[0]]


@_rule("StackPopV2")
def _pop(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    stack, depth = _stack_parts(ctx, ins[0])
    pushed = _pushed_tensor(ctx)
    one = ctx.const(np.asarray(1, np.int32), [depth], suffix="one")
    slot = ctx.create("AssignSubVariable", [depth, one], {"dtype": "int32", "shape": []}, suffix="depth").outputs[0]
    key = ctx.create("Reshape", [slot], {"shape": [1]}, suffix="key").outputs[0]
    attrs = {"dtype": pushed.dtype.name, "shape": None if pushed.shape is None else list(pushed.shape),
             "stack": stack.node.name, "forward_tensor": pushed.name}
    if pushed.dtype == dt.tensor_array:
        attrs["elem_dtype"] = pushed.spec.elem_dtype.name if pushed.spec.elem_dtype else None
        attrs["elem_shape"] = None if pushed.spec.elem_shape is None else list(pushed.spec.elem_shape)
    popped = ctx.create("StackPop", [stack, key], attrs).outputs[0]
    saved = ctx.pushed_ranges.get(_stack_source(ctx, nd))
    if saved is not None:  # the range whose limit was pushed
        return [RangeMarker(saved[0], popped, saved[1], saved[2])]
    return [popped]


@_rule("StackCloseV2")
def _stack_close(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A no-op: a Turnout stack needs no closing (TensorFlow's frees the stack's memory). A NoOp after
    the stack's parts, in their frame, stands for it, for the control edges that wait on the close."""
    parts = _stack_parts(ctx, ins[0])
    ctx.create("NoOp", [], control=ctx.ctrl_inputs() + [p.node for p in parts])
    return []


def _pushed_tensor(ctx: ImportContext) -> Tensor:
    """The forward tensor pushed onto the popped stack (its dtype and shape are the pop's)."""
    src = _stack_source(ctx, ctx.node)
    for other in ctx.nodes.values():
        if other.op == "StackPushV2" and _stack_source(ctx, other) == src:
            v = ctx.pushed.get(other.name, ctx.values.get(ctx.data_inputs(other)[1]))
            if isinstance(v, Tensor):
                return v
    raise UnsupportedError(f"{ctx.where()}: no StackPushV2 pushes onto this stack before the pop")


def _pops_only_order(ctx: ImportContext, push: Any) -> bool:
    """Whether every value popped from ``push``'s stack reaches only the flow input of a
    TensorArrayGradV3 (through pass-through ops), or control edges: what TensorFlow's TensorArray
    gradients do with a saved forward flow, whose value Turnout's gradient arrays never read."""
    src = _stack_source(ctx, push)
    users: dict[str, list[tuple[Any, int]]] = {}
    for other in ctx.nodes.values():
        for k, i in enumerate(ctx.data_inputs(other)):
            users.setdefault(i, []).append((other, k))
    todo = [f"{o.name}:0" for o in ctx.nodes.values() if o.op == "StackPopV2" and _stack_source(ctx, o) == src]
    if not todo:
        return False
    seen: set[str] = set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        for u, k in users.get(t, []):
            if u.op == "TensorArrayGradV3" and k == 1:
                continue
            if u.op in ("Identity", "Enter", "Exit", "Switch", "Merge") and k == 0 or u.op == "Merge":
                todo.extend(f"{u.name}:{j}" for j in range(2 if u.op in ("Switch", "Merge") else 1))
                continue
            return False
    return True


def _stack_source(ctx: ImportContext, nd: Any) -> str:
    t = ctx.data_inputs(nd)[0].split(":")[0]
    while ctx.nodes[t].op != "StackV2":
        ins = ctx.data_inputs(ctx.nodes[t])
        if not ins:
            break
        t = ins[0].split(":")[0]
    return t


# ---- TensorArrays: the value rides on the flow edge (see turnout.graphdef.flows) -------------------
def _ta_origin(ctx: ImportContext, lab: tuple[str, str]) -> Tensor:
    """The forward TensorArray ``lab`` names, as created (its size and element type)."""
    v = ctx.values.get(f"{lab[1]}:0")
    if not isinstance(v, Tensor):
        raise UnsupportedError(f"{ctx.where()}: TensorArray {lab[1]} is used before it is created")
    return v


def _empty_ta(ctx: ImportContext, lab: tuple[str, str], anchors: Sequence[Value],
              fwd: Tensor | None = None) -> Tensor:
    """A TensorArray with no slot written, of the size and element type of forward array ``lab[1]``
    (the zero of a gradient TensorArray, which TensorFlow writes as a float zero flow). ``fwd`` is
    the forward array as seen in the current frame (default: where it was created)."""
    fwd = fwd if fwd is not None else _ta_origin(ctx, lab)
    size = ctx.create("TensorArraySize", [fwd], suffix="size", control=ctx.ctrl_inputs() + [
        a.node for a in anchors if isinstance(a, Tensor)]).outputs[0]
    es = _written_shape(ctx, lab[1], fwd.spec.elem_shape)
    attrs: dict[str, Any] = {"dtype": fwd.spec.elem_dtype.name if fwd.spec.elem_dtype else "float32",
                             "element_shape": None if es is None else list(es)}
    if ctx.attr_of(ctx.nodes[lab[1]], "dynamic_size", False):  # the gradient of a growing array grows too
        attrs["dynamic_size"] = True
    return ctx.create("TensorArrayNew", [size], attrs).outputs[0]


def _written_shape(ctx: ImportContext, origin: str, declared: Any) -> Any:
    """The element shape of forward TensorArray ``origin``: what it declares, made more specific by
    what is written into it (TensorFlow's ``infer_shape``: scan and map_fn declare none, and their
    gradient arrays take the shape of the forward writes; a split's pieces have the value's shape but
    for their length) and the ``element_shape`` its gathers name."""
    from turnout import shapes as sh

    es = declared
    for other in ctx.nodes.values():
        if other.op not in ("TensorArrayWriteV3", "TensorArrayScatterV3", "TensorArrayGatherV3", "TensorArraySplitV3"):
            continue
        names = ctx.data_inputs(other)
        if ctx.flows.label(names[0]) != ("fwd", origin):
            continue
        if other.op == "TensorArrayGatherV3":
            s = ctx.attr_of(other, "element_shape")
        elif other.op == "TensorArraySplitV3":  # pieces of the value's rows: [?, *rest]
            v = ctx.values.get(names[1])
            s = v.shape if isinstance(v, Tensor) else None
            s = (None, *s[1:]) if s is not None and len(s) else None
        else:
            v = ctx.values.get(names[2])
            s = v.shape if isinstance(v, Tensor) else None
            if other.op == "TensorArrayScatterV3" and s is not None:
                s = tuple(s[1:]) if len(s) else None
        s = sh.as_shape(s)
        if s is not None and sh.compatible(es, s):
            es = sh.merge(es, s)
    return es


@_rule("BroadcastTo")
def _broadcast_to(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Turnout broadcasts to the shape of another tensor: the one whose Shape this op reads, a
    constant of the folded shape, or else a ``Fill`` of the run-time shape (a reduction's gradient
    inside a loop broadcasts to the input shape it popped from a stack)."""
    sname = ctx.data_inputs()[1]
    snd = ctx.nodes[sname.split(":")[0]]
    shape = ctx.static(sname)
    if snd.op == "Shape":
        like = ctx.values[ctx.data_inputs(snd)[0]]
    elif shape is not None:
        like = ctx.const(np.zeros([int(d) for d in np.ravel(shape)], _t(ins[0]).dtype.numpy), [ins[0]], suffix="like")
    else:
        like = _like_shape(ctx, sname, _t(ins[1]))
    return [ctx.create("BroadcastLike", [ins[0], like]).outputs[0]]


@_rule("FloorDiv")
def _floor_div(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Turnout's Div floors on integers; on floats it divides exactly, and TensorFlow's FloorDiv is
    the ``Floor`` of that quotient (``tn.floordiv``)."""
    if not _t(ins[0]).dtype.is_floating:
        return [ctx.create("Div", ins[:2]).outputs[0]]
    q = ctx.create("Div", ins[:2], suffix="quotient").outputs[0]
    return [ctx.create("Floor", [q]).outputs[0]]


def _sum_to_like(ctx: ImportContext, nd: Any, dz: Tensor, like: Tensor) -> Tensor:
    """``Sum(dz, BroadcastGradientArgs(...)[k])``: dz summed down to the shape the Reshape after it
    restores. The Sum drops the reduced axes and the Reshape restores them, so this stands for the
    two only when every use of the Sum is such a Reshape (what tf.gradients builds). The target is
    the Reshape's shape, not the broadcast operand's: a batch matmul's gradient broadcasts the batch
    axes only (``shape(x)[:-2]``) and reshapes to all of ``shape(x)``; summing down to ``x``'s shape
    with numpy's (right-aligned) broadcasting is the same sum, as the matrix axes agree."""
    if nd.op != "Sum":
        raise UnsupportedError(f"{ctx.where()}: run-time broadcast axes are supported in a Sum only")
    targets = []
    for other in ctx.nodes.values():
        for k, i in enumerate(ctx.data_inputs(other)):
            if i == f"{nd.name}:0" and not (other.op == "Reshape" and k == 0):
                raise UnsupportedError(f"{ctx.where()}: a sum over run-time broadcast axes is supported only "
                                       f"when a Reshape restores its shape (used by {other.op} \"{other.name}\")")
            if i == f"{nd.name}:0":
                targets.append(ctx.data_inputs(other)[1])
    shape = ctx.values.get(targets[0]) if targets else None
    if isinstance(shape, Tensor):  # (imported: the Shape the broadcast axes were computed from)
        like = _like_shape(ctx, targets[0], shape, "target")
    return ctx.create("SumToLike", [dz, like]).outputs[0]


# ---- TF1 model code: the ops tf.compat.v1's layers, RNNs and optimizers emit -----------------------
@_rule("Assert")
def _assert(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A run-time check: Turnout's Assert of the condition, whose failure is a ``KernelError`` with
    TensorFlow's message, word for word: its string parts, and the values of the tensors it shows
    (at most ``summarize`` elements of each, as TensorFlow prints them: ``turnout.summarize``).
    TensorFlow's Assert has no output: what waits on it waits on the Turnout node by a control edge."""
    shown: list[Optional[str]] = [v.value if isinstance(v, Text) else None for v in ins[1:]]
    data = [_t(v) for v in ins[1:] if not isinstance(v, Text)]
    ctx.create("Assert", [ins[0], ins[0], *data], {"message": TF_ASSERT_PREFIX, "shown": shown,
                                                   "summarize": int(ctx.attr("summarize", 3))})
    return []


@_rule("BiasAdd", "BiasAddV1")
def _bias_add(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``x + bias`` along the channel axis (the last for NHWC, axis 1 for NCHW): TensorFlow's kernel
    is this broadcast sum, and so is its gradient (BiasAddGrad, the sum over the other axes)."""
    x, b = _t(ins[0]), _t(ins[1])
    if ctx.attr("data_format", "NHWC") == "NCHW":
        if x.shape is None:
            raise UnsupportedError(f"{ctx.where()}: NCHW needs the input's rank")
        b = ctx.create("Reshape", [b], {"shape": [-1] + [1] * (len(x.shape) - 2)}, suffix="channels").outputs[0]
    return [ctx.create("Add", [x, b]).outputs[0]]


@_rule("BiasAddGrad")
def _bias_add_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    dy = _t(ins[0])
    if dy.shape is None:
        raise UnsupportedError(f"{ctx.where()}: needs the rank of the gradient")
    channel = 1 if ctx.attr("data_format", "NHWC") == "NCHW" else len(dy.shape) - 1
    axes = [a for a in range(len(dy.shape)) if a != channel]
    return [ctx.create("Sum", [dy], {"axis": axes, "keepdims": False}).outputs[0]]


# GetItem and a dimension, built as the builders build them (``turnout.composite``)
_getitem = getitem
_dim = dim


@_rule("Split")
def _split(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``num_split`` equal slices along the axis, built as ``tn.split`` builds them (an axis of
    run-time size is cut at multiples of ``size // num_split``, checked to divide it when the
    program runs): TensorFlow's gradient, a Concat of the pieces, is already in the GraphDef."""
    (axis,) = ctx.static_int_list(ctx.data_inputs()[0], "the axis")
    x, n = _t(ins[1]), int(ctx.attr("num_split"))
    if x.shape is None:
        raise UnsupportedError(f"{ctx.where()}: needs the input's rank")
    axis %= len(x.shape)
    size = x.shape[axis]
    if n < 1 or size is not None and size % n:
        raise UnsupportedError(f"{ctx.where()}: dimension {size} does not split into {n} equal parts")
    return equal_split_parts(ctx, x, n, axis, ctx.where())


@_rule("SplitV")
def _split_v(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Slices of the given sizes, built as ``tn.split`` builds them (a -1 size takes the rest)."""
    names = ctx.data_inputs()
    sizes = ctx.static_int_list(names[1], "the split sizes")
    (axis,) = ctx.static_int_list(names[2], "the axis")
    x = _t(ins[0])
    if x.shape is None:
        raise UnsupportedError(f"{ctx.where()}: needs the input's rank")
    axis %= len(x.shape)
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes):
        raise UnsupportedError(f"{ctx.where()}: split sizes {sizes} must be >= 0, at most one of them -1")
    return split_parts(ctx, x, sizes, axis, ctx.where())


@_rule("Slice")
def _slice(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``x[begin:begin + size]`` per axis (size -1: to the end), built as ``tn.slice`` builds it.
    Begin and size may be run-time int32 vectors (tf.gradients computes them with ConcatOffset and
    Shape): their entries become GetItem's tensor bounds."""
    x = _t(ins[0])
    names = ctx.data_inputs()
    begin, size = ctx.static(names[1]), ctx.static(names[2])
    rank = len(x.shape) if x.shape is not None else None
    for v in (begin, size):
        if v is not None:
            rank = int(np.size(v))
    if rank is None:
        for t in ins[1:3]:
            shp = _t(t).shape
            if shp is not None and shp[0] is not None:
                rank = int(shp[0])
    if rank is None:
        raise UnsupportedError(f"{ctx.where()}: needs the rank of the slice")

    def entries(vec: Any, tensor: Value, what: str) -> list[Any]:
        if vec is not None:
            return [int(v) for v in np.ravel(vec)]
        return [_getitem(ctx, _t(tensor), (k,), f"{what}{k}") for k in range(rank)]

    return [slice_part(ctx, x, entries(begin, ins[1], "begin"), entries(size, ins[2], "size"))]


@_rule("ConcatOffset")
def _concat_offset(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Where each input of a Concat starts (ConcatV2's gradient slices there): folded when the shapes
    are known, else summed at run time, ``offset[k] = sum(shape[j] for j < k)`` on the axis only."""
    n_out = len(ins) - 1
    vals = [ctx.static(f"{nd.name}:{k}") for k in range(n_out)]
    anchors = [x for x in ins if isinstance(x, Tensor)]
    if all(v is not None for v in vals):
        return [ctx.const(v, anchors, suffix=None if k == n_out - 1 else f"out{k}") for k, v in enumerate(vals)]
    (axis,) = ctx.static_int_list(ctx.data_inputs()[0], "the axis")
    shp = _t(ins[1]).shape
    rank = shp[0] if shp is not None else None
    if rank is None:
        raise UnsupportedError(f"{ctx.where()}: needs the rank of the shapes")
    mask = ctx.const(np.eye(rank, dtype=np.int32)[axis % rank], anchors, suffix="axis_mask")
    off: Tensor = ctx.const(np.zeros(rank, np.int32), anchors, suffix="zero")
    outs = [off]
    for k in range(1, n_out):
        part = ctx.create("Mul", [ins[k], mask], suffix=f"along{k}").outputs[0]
        off = ctx.create("Add", [off, part], suffix=None if k == n_out - 1 else f"out{k}").outputs[0]
        outs.append(off)
    return outs


@_rule("BroadcastArgs")
def _broadcast_args(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The shape two shapes broadcast to (TensorFlow 2's ``linspace`` and ``broadcast_to`` of
    computed shapes write it): folded, since Turnout takes the shapes it feeds as static attributes;
    two known shapes that do not broadcast are a ``ShapeError`` naming them."""
    known = [k for k in (ctx.static(t) for t in ctx.data_inputs()) if k is not None]
    if len(known) == 2 and ctx.static(f"{nd.name}:0") is None:
        shown = " and ".join(str([int(d) for d in np.ravel(k)]) for k in known)
        raise ShapeError(f"{ctx.where()}: shapes {shown} do not broadcast")
    return _folded(ctx, nd, ins)


@_rule("InvertPermutation")
def _invert_permutation(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Folded: a permutation TensorFlow inverts is a Transpose's, which Turnout takes as a static attribute."""
    return _folded(ctx, nd, ins)


# ---- formulas: arithmetic on imported tensors, for the rules that compute what a kernel does --------
class _Formula:
    """Arithmetic on imported tensors for an update formula, in the frame of the update's gradient."""

    def __init__(self, ctx: ImportContext, anchor: Tensor) -> None:
        self.ctx, self.anchor, self.k = ctx, anchor, 0

    def op(self, name: str, *xs: Any) -> Tensor:
        self.k += 1
        args = [x if isinstance(x, Tensor) else self.c(x) for x in xs]
        return self.ctx.create(name, args, suffix=f"{name.lower()}{self.k}").outputs[0]

    def c(self, v: float) -> Tensor:
        self.k += 1
        return self.ctx.const(np.asarray(v, self.anchor.dtype.numpy), [self.anchor], suffix=f"c{self.k}")

    def last(self, t: Tensor) -> Tensor:
        """``t`` through the Identity that carries the NodeDef's name (its first output): the node a
        rule creates last takes that name, so a formula's result ends in it."""
        return self.ctx.create("Identity", [t]).outputs[0]


# ---- TF1 reference variables: a VariableV2 is a Turnout Variable; its ref is the handle -----------
@_rule("VariableV2", "Variable")
def _variable_v2(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A reference variable, with the value its initializer (the ``Assign`` TensorFlow names
    ``<var>/Assign``, of a value computed at import: ``ImportContext.initial_value``) writes."""
    attrs = {"dtype": ctx.dtype("dtype").name, "shape": ctx.attr("shape")}
    inits = [o for o in ctx.nodes.values() if o.op == "Assign" and _ref_source(ctx, o) == nd.name]
    inits.sort(key=lambda o: o.name != f"{nd.name}/Assign")
    init = next((v for v in (ctx.initial_value(ctx.data_inputs(o)[1]) for o in inits) if v is not None), None)
    if init is None:
        raise UnsupportedError(f"{ctx.where()}: the variable has no initializer that can be computed at import "
                               "(an Assign of constants and random ops of shapes known at import time)")
    if attrs["shape"] is None or any(d is None for d in attrs["shape"]):
        attrs["shape"] = list(np.shape(init))
    name = ctx.prefix + (ctx.attr("shared_name") or nd.name)
    value = np.asarray(init, dtype=dt.as_dtype(attrs["dtype"]).numpy)
    h = ctx.create("VarHandle", [], {"var_name": name, "initial_value": value, **attrs}, suffix="handle")
    ctx.graph.variables[name] = h
    read = ctx.create("ReadVariable", [h.outputs[0]], attrs).outputs[0]
    return [Ref(h.outputs[0], attrs, read)]


def _ref_source(ctx: ImportContext, nd: Any) -> str | None:
    """The VariableV2 an op's ref input comes from (through the Ref* pass-throughs), or None."""
    t = ctx.data_inputs(nd)[0].split(":")[0]
    while t in ctx.nodes and ctx.nodes[t].op in ("RefIdentity", "RefEnter", "RefSwitch", "RefExit", "Identity"):
        t = ctx.data_inputs(ctx.nodes[t])[0].split(":")[0]
    return t if t in ctx.nodes and ctx.nodes[t].op in ("VariableV2", "Variable") else None


def _ref(ctx: ImportContext, v: Value) -> Ref:
    if not isinstance(v, Ref):
        raise UnsupportedError(f"{ctx.where()}: its ref input does not come from a VariableV2")
    return v


def _ref_assign(tn_op: str) -> _Rule:
    def rule(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
        """The assign, whose output (TensorFlow's ref after the update) is the Variable's new value."""
        ref = _ref(ctx, ins[0])
        return [ctx.create(tn_op, [ref.handle, _written(ctx, ins[1])], ref.attrs).outputs[0]]

    return rule


for _tf, _tn in [("Assign", "AssignVariable"), ("AssignAdd", "AssignAddVariable"), ("AssignSub", "AssignSubVariable")]:
    _rule(_tf)(_ref_assign(_tn))


@_rule("IsVariableInitialized")
def _is_initialized(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Always true: an imported Variable starts at its initializer's value."""
    return [ctx.const(np.asarray(True), [], suffix=None)]
