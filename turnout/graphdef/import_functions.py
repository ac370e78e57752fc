"""Import rules of TensorFlow's functional control flow (control flow v2): ``While`` /
``StatelessWhile``, ``If`` / ``StatelessIf``, ``Case`` / ``StatelessCase`` and the calls
``PartitionedCall`` / ``StatefulPartitionedCall``, whose bodies are functions of the GraphDef's
library.

Why: TensorFlow 2 builds these wherever control flow v2 is on, which is its default even in graph
mode (a TF1 script under ``tf.compat.v1.disable_eager_execution()`` alone writes ``StatelessWhile`` and
``StatelessIf``, not Switch and Merge). Each becomes the Turnout builder of the same meaning, so it
lowers to the paper's primitives as a ``tn.while_loop``, ``tn.cond`` or ``tn.case`` written by hand
does, and ``tn.gradients`` differentiates it: the function's body is imported, NodeDef by NodeDef
through the ordinary rules (``import_nodes``), inside the builder's callback, with the callback's
arguments bound to the function's arguments (``_Arg``).

Loop variables and branch arguments of dtype ``resource`` (a Variable a body reads or assigns, which
TensorFlow passes in as an argument) are not carried: the body reads the Variable itself, as a body
that captured it would, and the op's output for it is the Variable again (TensorFlow's bodies return
a resource argument unchanged). A function's stateful ops that no output depends on (its
``control_ret``: an assignment in a branch) are kept by making every output wait for them.

Only the functions a node calls, directly or through other functions, are imported or need a rule
for each op of their bodies (``called``): TensorFlow imports a GraphDef whose library also holds
functions no node calls (a SavedModel's graph keeps every function it traced), whatever their ops.

Every call is inlined, so a recursive function is refused (``_function``), and a function whose
outputs do not fit its op (their count, a branch's dtypes) is refused before a builder sees it, naming
the function.

A function's node inputs name ``node:arg:index``, an output argument of the node's op and an index
into it; ``OUTPUT_ARGS`` lists the ops whose outputs are several arguments, in order (every other op
has one), so the name becomes the GraphDef's ``node:k``.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout import ops
from turnout import shapes as sh
from turnout.control_flow.cond import case as build_case
from turnout.control_flow.cond import cond as build_cond
from turnout.control_flow.tensor_array import from_graph_value, to_graph_value
from turnout.control_flow.while_loop import while_loop as build_while_loop
from turnout.errors import DTypeError, GraphBuildError, UnsupportedError
from turnout.graph import Node, Tensor, TensorSpec
from turnout.graphdef import protos
from turnout.graphdef.arity import declared_mismatch
from turnout.graphdef.import_context import Bundle, ImportContext, Rule, Value
from turnout.graphdef.import_nodes import import_nodes, order
from turnout.graphdef.import_rules import IMPORT_RULES, Outs
from turnout.graphdef.import_tensor_lists import NO_VALUE, PendingList, typed_list
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)

#: the ops of ``SUPPORTED_OPS`` whose outputs are several output arguments, their names in order
#: (TensorFlow's op registry; ``tests/test_graphdef_functions.py`` checks it there when it can)
OUTPUT_ARGS: dict[str, tuple[str, ...]] = {
    "BroadcastGradientArgs": ("r0", "r1"),
    "FusedBatchNorm": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"),
    "FusedBatchNormV2": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"),
    "FusedBatchNormV3": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2",
                         "reserve_space_3"),
    "FusedBatchNormGrad": ("x_backprop", "scale_backprop", "offset_backprop", "reserve_space_3",
                           "reserve_space_4"),
    "FusedBatchNormGradV2": ("x_backprop", "scale_backprop", "offset_backprop", "reserve_space_3",
                             "reserve_space_4"),
    "FusedBatchNormGradV3": ("x_backprop", "scale_backprop", "offset_backprop", "reserve_space_4",
                             "reserve_space_5"),
    "ListDiff": ("out", "idx"),
    "Merge": ("output", "value_index"),
    "Qr": ("q", "r"),
    "RefMerge": ("output", "value_index"),
    "Switch": ("output_false", "output_true"),
    "RefSwitch": ("output_false", "output_true"),
    "SoftmaxCrossEntropyWithLogits": ("loss", "backprop"),
    "SparseSoftmaxCrossEntropyWithLogits": ("loss", "backprop"),
    "TensorArrayConcatV3": ("value", "lengths"),
    "TensorArrayV3": ("handle", "flow"),
    "TensorListPopBack": ("output_handle", "tensor"),
    "TensorArrayGradV3": ("grad_handle", "flow_out"),
    "TopK": ("values", "indices"),
    "TopKV2": ("values", "indices"),
    "Unique": ("y", "idx"),
    "UniqueWithCounts": ("y", "idx", "count"),
}

#: the NodeDef op of a function's argument (TensorFlow's own name for it)
ARG = "_Arg"


def function_nodes(fdef: Any) -> tuple[dict[str, Any], list[str], list[str]]:
    """The NodeDefs of function ``fdef`` with GraphDef input names, an ``_Arg`` NodeDef per argument
    (named ``_arg/<name>``); the argument NodeDef names in order; the GraphDef names of its outputs."""
    gd = protos.pb().graph_pb2.GraphDef()
    ops_of = {nd.name: nd.op for nd in fdef.node_def}
    args = [f"_arg/{a.name}" for a in fdef.signature.input_arg]
    nodes: dict[str, Any] = {}
    for a, name in zip(fdef.signature.input_arg, args, strict=True):
        nd = gd.node.add()
        nd.name, nd.op = name, ARG
        nd.attr["T"].type = a.type
    for src in fdef.node_def:
        nd = gd.node.add()
        nd.CopyFrom(src)
        del nd.input[:]
        nd.input.extend(_graph_input(i, ops_of) for i in src.input)
        nodes[nd.name] = nd
    nodes.update({nd.name: nd for nd in gd.node if nd.op == ARG})
    missing = [o.name for o in fdef.signature.output_arg if o.name not in fdef.ret]
    if missing:
        raise GraphBuildError(f"function {fdef.signature.name!r}: its ret map names no value for output "
                              f"{missing[0]!r}")
    rets = [_graph_input(fdef.ret[o.name], ops_of) for o in fdef.signature.output_arg]
    return nodes, args, rets


def _graph_input(ref: str, ops_of: dict[str, str]) -> str:
    """A function's input name (``arg``, ``node:out_arg:k``, ``^node``) as a GraphDef's (``node:k``)."""
    if ref.startswith("^"):
        return ref if ref[1:] in ops_of else f"^_arg/{ref[1:]}"
    parts = ref.split(":")
    if len(parts) == 1:
        return f"_arg/{ref}"
    node, arg, k = parts[0], parts[1], int(parts[2]) if len(parts) > 2 else 0
    names = OUTPUT_ARGS.get(ops_of.get(node, ""))
    if names is None:
        return f"{node}:{k}"
    if arg not in names:
        raise UnsupportedError(f"a function's node reads {ref!r}: {ops_of[node]} has no output {arg!r}")
    return f"{node}:{names.index(arg) + k}"


def _arg(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A function's argument: the value its call passes. (A rule of function bodies only, ``BODY_RULES``:
    a GraphDef's own ``_Arg`` node is no op of the GraphDef format, and is refused as unsupported.)"""
    return [ctx.args[nd.name]]


#: the rules of a function body's NodeDefs: every op's, and its arguments'
BODY_RULES: ChainMap[str, Rule] = ChainMap({ARG: _arg}, IMPORT_RULES)


def call(ctx: ImportContext, fname: str, args: Sequence[Value], role: str) -> tuple[list[Value], list[Node]]:
    """Import the body of function ``fname`` with ``args`` into the control-flow context current now
    (a builder's callback), its nodes named under ``<node>/<role>/``; returns its outputs and the
    nodes of its stateful ops that nothing need wait for otherwise (its ``control_ret``)."""
    fdef = _function(ctx, fname)
    if len(args) != len(fdef.signature.input_arg):
        raise UnsupportedError(f"{ctx.where()}: calls {fname!r} with {len(args)} arguments; it takes "
                               f"{len(fdef.signature.input_arg)}")
    _check_declared(ctx, f"function {fname!r} declares argument", "the call passes", args, fdef.signature.input_arg)
    nodes, arg_names, rets = function_nodes(fdef)
    sub = ctx.child(nodes, f"{ctx.prefix}{ctx.node.name}/{role}/", dict(zip(arg_names, args, strict=True)), fname)
    if ctx.flow_context is None:
        _anchor_sources(sub, nodes, arg_names)
    import_nodes(sub, nodes, order(nodes, sub.flows), {}, BODY_RULES)
    outs = []
    for r in rets:
        name = r if ":" in r else f"{r}:0"
        if name not in sub.values:
            raise GraphBuildError(f"{ctx.where()}: function {fname!r} returns {name!r}, which none of its "
                                  "nodes outputs")
        outs.append(sub.values[name])
    _check_declared(ctx, f"function {fname!r} declares output", "its body returns", outs, fdef.signature.output_arg)
    return outs, [sub.control[n] for n in fdef.control_ret.values() if n in sub.control]


def _check_declared(ctx: ImportContext, declares: str, but: str, values: Sequence[Value], args: Sequence[Any]) -> None:
    """Refuse a function's arguments or outputs (``values``) whose dtypes are not those its signature
    declares (``args``, its ``input_arg`` or ``output_arg``), naming the function and the argument
    (``declares``: "function 'f' declares output"; ``but``: whose values these are). Why: each value
    keeps the dtype its own node gives it, so a body computing an int32 for a float32 output imported
    as an int32 and ran as one, silently; TensorFlow refuses such a function when it instantiates it."""
    for v, a in zip(values, args, strict=True):
        wrong = declared_mismatch(a.type, v)
        if wrong is not None:
            raise DTypeError(f"{ctx.where()}: {declares} {a.name!r} {protos.type_name(a.type)}, but {but} {wrong}")


def _check_attr(ctx: ImportContext, key: str, what: str, values: Sequence[Value], but: str) -> None:
    """Refuse the op's inputs or outputs (``values``, ``what`` naming one) whose dtypes disagree with its
    type-list attr ``key`` (a call's ``Tin`` and ``Tout``, a loop's ``T``), as TensorFlow refuses such a
    NodeDef; an op without the attr declares nothing."""
    declared = ctx.attr(key)
    if key not in ctx.node.attr or not isinstance(declared, list):
        return
    if len(declared) != len(values):
        raise GraphBuildError(f"{ctx.where()}: its {key} declares {len(declared)} {what}s, but {but} "
                              f"{len(values)}")
    for k, (enum, v) in enumerate(zip(declared, values, strict=True)):
        wrong = declared_mismatch(enum, v)
        if wrong is not None:
            raise DTypeError(f"{ctx.where()}: its {key} declares {what} {k} {protos.type_name(enum)}, "
                             f"but {but} {wrong}")


def _anchor_sources(sub: ImportContext, nodes: dict[str, Any], arg_names: list[str]) -> None:
    """Make the body's NodeDefs that read nothing (a constant) wait for the call's first tensor
    argument, as TensorFlow's inliner makes them wait for the call (its input control node). Why: a
    call at the GraphDef's top level may stand in a TensorFlow v1 loop, and a node that reads nothing
    would be made at the root, outside the loop's frame. (Inside a builder its context places them.)"""
    first = next((n for n in arg_names if any(not _is_resource(t) for t in _tensors(sub.args[n]))), None)
    if first is None:
        return
    sub.control[first] = next(t for t in _tensors(sub.args[first]) if not _is_resource(t)).node
    for nd in nodes.values():
        if nd.op != ARG and not nd.input:
            nd.input.append(f"^{first}")


def _tensors(v: Value) -> list[Tensor]:
    return list(v.parts) if isinstance(v, Bundle) else [v] if isinstance(v, Tensor) else []


def _function(ctx: ImportContext, fname: str) -> Any:
    """The FunctionDef ``fname`` of the library, where calling it from here ends: Turnout inlines
    every call, so a function that calls itself, directly or through others, is refused (TensorFlow
    runs such a recursion one call at a time; inlined, it would never stop)."""
    fdef = ctx.library.get(fname)
    if fdef is None:
        raise UnsupportedError(f"{ctx.where()}: calls function {fname!r}, which the GraphDef's library lacks")
    if fname in ctx.calls:
        chain = " -> ".join((*ctx.calls[ctx.calls.index(fname):], fname))
        raise UnsupportedError(f"{ctx.where()}: function {fname!r} calls itself ({chain}); Turnout inlines "
                               "calls and cannot import a recursive function")
    return fdef


def _count(ctx: ImportContext, fname: str, outs: Sequence[Any], want: int, what: str) -> None:
    """Refuse function ``fname`` (a loop's cond or body) returning other than ``want`` values."""
    if len(outs) != want:
        raise GraphBuildError(f"{ctx.where()}: function {fname!r} returns {len(outs)} values; a loop's {what} "
                              f"returns {want}")


def _after(outs: Sequence[Value], waits: list[Node]) -> list[Value]:
    """``outs``, each (but a resource) through an Identity that waits for ``waits``: what a caller reads
    of a function comes after the function's stateful ops, as TensorFlow's call guarantees."""
    if not waits:
        return list(outs)
    with waits[0].graph.as_default(), ops.control_dependencies(waits):
        return [v if _is_resource(v) else ops.identity(v) for v in outs]


def _is_resource(v: Value) -> bool:
    return isinstance(v, Tensor) and v.dtype == dt.resource


def _func(ctx: ImportContext, key: str) -> str:
    return ctx.node.attr[key].func.name


def _parts(v: Value, where: str) -> list[Tensor]:
    """The tensors a loop carries or a branch outputs for value ``v``: itself; none for a resource (a
    Variable, read where it is used); both parts of a TensorList (``import_tensor_lists``)."""
    if isinstance(v, Bundle):
        return list(v.parts)
    if not isinstance(v, Tensor):
        raise UnsupportedError(f"{where}: a value is {ImportContext.describe(v)}, which a function cannot "
                               "take or return here")
    return [] if _is_resource(v) else [v]


def _flat(vals: Sequence[Value], where: str) -> list[Tensor]:
    return [t for v in vals for t in _parts(v, where)]


def _unflat(like: Sequence[Value], flat: Sequence[Any]) -> list[Value]:
    """Values of ``like``'s structure from ``flat`` (``_flat``'s order, a TensorArray as a builder
    passes it or as its tensor); a resource stays itself."""
    it = iter(to_graph_value(v) for v in flat)
    out: list[Value] = []
    for v in like:
        if isinstance(v, Bundle):
            out.append(Bundle(tuple(next(it) for _ in v.parts)))
        else:
            out.append(v if _is_resource(v) else next(it))
    return out


def _named(ctx: ImportContext, outs: Sequence[Value], waits: Sequence[Any] = ()) -> Outs:
    """The op's outputs as Identities named for its NodeDef (a resource passes as it is), and a NoOp
    carrying the NodeDef's name that waits for them all and for ``waits`` (the tensors or nodes of
    effects no output carries), so that a control edge from the op waits for the whole call."""
    named = [v if _is_resource(v) or isinstance(v, Bundle) else
             ctx.create("Identity", [v], suffix=f"output{k}").outputs[0] for k, v in enumerate(outs)]
    after = [w.node if isinstance(w, Tensor) else w for w in waits]
    parts = [t.node for t in _flat(named, ctx.where())]
    ctx.create("NoOp", [], control=[*ctx.ctrl_inputs(), *parts, *after])
    return named


@_rule("While", "StatelessWhile")
def _while(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tn.while_loop`` of the ``cond`` and ``body`` functions over the inputs' tensors (a resource
    is not carried, a TensorList is carried as its two parts), with ``output_shapes`` as the shape
    invariants of the plain tensors (TensorFlow's are those of its loop variables; one of unknown rank
    is ``tn.ANY_SHAPE``, TensorFlow's ``TensorShape(None)``)."""
    cond_f, body_f = _func(ctx, "cond"), _func(ctx, "body")
    ins = [_typed(ctx, body_f, k, v) if isinstance(v, PendingList) else v for k, v in enumerate(ins)]
    _check_attr(ctx, "T", "input", ins, "it reads")
    flat = _flat(ins, ctx.where())
    if not flat:
        raise UnsupportedError(f"{ctx.where()}: a loop of resources only carries nothing Turnout can loop over")
    recorded = ctx.attr("output_shapes")
    # (a shape of unknown rank recorded is TensorFlow's relaxed invariant: the rank may change)
    shapes = [sh.ANY_SHAPE if s is None else s for s in recorded] if recorded else [None] * len(ins)
    if len(shapes) != len(ins):
        raise GraphBuildError(f"{ctx.where()}: output_shapes holds {len(shapes)} shapes for {len(ins)} loop "
                              "variables")
    invariants = _invariants(ins, shapes)

    def cond(*vs: Any) -> Any:
        outs = _after(*call(ctx, cond_f, _unflat(ins, vs), "cond"))
        _count(ctx, cond_f, outs, 1, "condition")
        return outs[0]

    def body(*vs: Any) -> Any:
        outs = _after(*call(ctx, body_f, _unflat(ins, vs), "body"))
        _count(ctx, body_f, outs, len(ins), f"body over {len(ins)} variables")
        return [from_graph_value(_as_recorded(ctx, t, s)) for t, s in zip(_flat(outs, ctx.where()), invariants,
                                                                         strict=True)]

    with ctx.graph.as_default(), ctx.graph._in_context(ctx.flow_context):
        res = build_while_loop(cond, body, [from_graph_value(t) for t in flat], shape_invariants=invariants,
                               parallel_iterations=int(ctx.attr("parallel_iterations", 10) or 10),
                               name=f"{ctx.prefix}{nd.name}")
    return _named(ctx, _unflat(ins, res))


def _typed(ctx: ImportContext, body_f: str, k: int, pending: PendingList) -> Bundle:
    """The list loop input ``k`` stands for, of the dtype the body pushes onto it: a cond's output that
    some branch makes with ``OptionalFromValue`` (the accumulator of a v2 gradient)."""
    fdef = ctx.library.get(body_f)
    dtype = None if fdef is None else _pushed_dtype(ctx, fdef, fdef.signature.input_arg[k].name)
    if dtype is None:
        raise UnsupportedError(f"{ctx.where()}: loop input {k} is a list of variant elements whose element "
                               "dtype the body does not show (only a cond's Optionals are supported)")
    return typed_list(ctx, dtype, pending.length)


def _pushed_dtype(ctx: ImportContext, fdef: Any, arg: str) -> Optional[dt.DType]:
    """The dtype of what ``fdef`` pushes onto its list argument ``arg``: the value an
    ``OptionalFromValue`` wraps, directly or as the output of a conditional one of whose branches
    returns it there."""
    by_name = {nd.name: nd for nd in fdef.node_def}
    for nd in fdef.node_def:
        if nd.op != "TensorListPushBack" or nd.input[0] != arg:
            continue
        src, _, rest = nd.input[1].partition(":")
        node = by_name.get(src)
        if node is None:
            return None
        if node.op == "OptionalFromValue":
            return protos.tf_dtype(protos.attr(node, "Toutput_types")[0], ctx.where())
        if node.op in ("If", "StatelessIf", "Case", "StatelessCase"):
            j = int(rest.rpartition(":")[2] or 0)
            branches = ([node.attr["then_branch"].func.name, node.attr["else_branch"].func.name]
                        if "then_branch" in node.attr else [f.name for f in node.attr["branches"].list.func])
            return _optional_types(ctx, branches).get(j)
    return None


def _as_recorded(ctx: ImportContext, t: Tensor, shape: Any) -> Tensor:
    """``t`` with the static shape TensorFlow recorded for its loop variable where ``t``'s own is less
    specific (a value popped off a list whose element shape the import could not know), as the
    importer takes every shape TensorFlow recorded (``ImportContext._refined``)."""
    if t.dtype.is_opaque or shape is None or shape is sh.ANY_SHAPE or not sh.compatible(t.shape, sh.as_shape(shape)):
        return t
    merged = sh.merge(t.shape, sh.as_shape(shape))
    if merged == t.shape:
        return t
    return ctx.graph.create_node("Identity", [t], name=f"{ctx.prefix}{ctx.node.name}/recorded_shape",
                                 specs=[TensorSpec(t.dtype, merged)]).outputs[0]


def _invariants(ins: Sequence[Value], shapes: Sequence[Any]) -> list[Any]:
    """The shape invariant of each carried tensor: the op's ``output_shapes`` entry of a plain
    tensor; none for a TensorList's parts (an array and its length)."""
    out: list[Any] = []
    for v, shape in zip(ins, shapes, strict=True):
        if isinstance(v, Bundle):
            out.extend(p.shape for p in v.parts)
        elif not _is_resource(v):
            out.append(shape)
    return out


@_rule("If", "StatelessIf")
def _if(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tn.cond`` of the ``then_branch`` and ``else_branch`` functions; a predicate that is not a
    bool is true where it is not zero, as TensorFlow's If reads a number."""
    pred, args = _predicate(ctx, ins[0]), ins[1:]
    then_f, else_f = _func(ctx, "then_branch"), _func(ctx, "else_branch")
    return _named(ctx, *_branches(ctx, args, [then_f, else_f],
                                  lambda fns: build_cond(pred, fns[0], fns[1], name=f"{ctx.prefix}{nd.name}")))


@_rule("Case", "StatelessCase")
def _case(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tn.case`` of the ``branches`` functions: an index out of range runs the last, as in TensorFlow."""
    index, args = ins[0], ins[1:]
    names = [f.name for f in nd.attr["branches"].list.func]
    if not names:
        raise UnsupportedError(f"{ctx.where()}: a Case with no branches")
    return _named(ctx, *_branches(ctx, args, names,
                                  lambda fns: build_case(index, list(fns), name=f"{ctx.prefix}{nd.name}")))


def _branches(ctx: ImportContext, args: Sequence[Value], fnames: list[str],
              build: Callable[[list[Callable[[], Any]]], Any]) -> tuple[list[Value], list[Value]]:
    """The outputs of a conditional over functions ``fnames`` called with ``args``, and what the op's
    control edges must wait for besides. A branch that returns a resource (a Variable chosen by the
    branch) is refused; a TensorList output comes out as its two parts; a conditional with no
    outputs whose branches have stateful ops (an assignment) has a scalar each branch makes after
    them, to wait for."""
    _same_outputs(ctx, fnames)
    _check_attr(ctx, "Tin", "input", args, "it reads")
    shaped: list[list[Value]] = []
    types = _optional_types(ctx, fnames)

    def branch(k: int, fname: str) -> Callable[[], Any]:
        def fn() -> Any:
            outs, waits = call(ctx, fname, args, f"branch{k}")
            if outs:
                outs = [_stand_in(ctx, types, j, shaped) if v is NO_VALUE else v for j, v in enumerate(outs)]
                shaped.append(outs)
                return [from_graph_value(t) for t in _flat(_after(outs, waits), ctx.where())]
            with ops.control_dependencies(waits):
                return [ops.constant(True)]
        return fn

    with ctx.graph.as_default(), ctx.graph._in_context(ctx.flow_context):
        res = build([branch(k, f) for k, f in enumerate(fnames)])
    if not shaped:
        _check_attr(ctx, "Tout", "output", [], f"function {fnames[0]!r} returns")
        return [], list(res)
    outs = _unflat(shaped[0], list(res))
    _check_attr(ctx, "Tout", "output", outs, f"function {fnames[0]!r} returns")
    return outs, []


def _same_outputs(ctx: ImportContext, fnames: list[str]) -> None:
    """Refuse branches ``fnames`` unless each returns what the first does, as many values of the same
    types (their signatures'), naming the branch that differs; and one that returns a resource (a
    Variable chosen by a branch), which Turnout's conditionals do not carry."""
    types = {f: [a.type for a in _function(ctx, f).signature.output_arg] for f in fnames}
    first = fnames[0]
    for f in fnames:
        if protos.DT_RESOURCE in types[f]:
            raise UnsupportedError(f"{ctx.where()}: branch {f!r} returns a resource (a Variable chosen by a "
                                   "branch)")
        if len(types[f]) != len(types[first]):
            raise GraphBuildError(f"{ctx.where()}: branch {f!r} returns {len(types[f])} values and branch "
                                  f"{first!r} {len(types[first])}; every branch of a conditional returns as many")
        j = next((j for j, (a, b) in enumerate(zip(types[f], types[first], strict=True)) if a != b), None)
        if j is not None:
            raise DTypeError(f"{ctx.where()}: output {j} of branch {f!r} is of dtype {protos.type_name(types[f][j])}, "
                             f"of branch {first!r} {protos.type_name(types[first][j])}")


def _optional_types(ctx: ImportContext, fnames: list[str]) -> dict[int, dt.DType]:
    """Output position -> the dtype some branch's ``OptionalFromValue`` gives it (what another branch's
    ``OptionalNone`` at that position stands for)."""
    types: dict[int, dt.DType] = {}
    for fname in fnames:
        fdef = ctx.library.get(fname)
        if fdef is None:
            continue
        by_name = {nd.name: nd for nd in fdef.node_def}
        for j, o in enumerate(fdef.signature.output_arg):
            src = by_name.get(fdef.ret[o.name].split(":")[0])
            if src is not None and src.op == "OptionalFromValue":
                types[j] = protos.tf_dtype(protos.attr(src, "Toutput_types")[0], ctx.where())
    return types


def _stand_in(ctx: ImportContext, types: dict[int, dt.DType], j: int, shaped: list[list[Value]]) -> Tensor:
    """A value for output ``j`` of a branch that did not compute it (its ``OptionalNone``): zeros of the
    shape another branch gave it, where one was imported already, marked ``gradient_filler`` (never
    read: the backward branch that reads it is this one's twin, which the same predicate takes)."""
    if j not in types:
        raise UnsupportedError(f"{ctx.where()}: output {j} is an OptionalNone in every branch")
    other = [o[j] for o in shaped if isinstance(o[j], Tensor)]
    shape = tuple(0 if d is None else d for d in (other[0].shape or ())) if other else ()
    value = np.zeros(shape, types[j].numpy)
    attrs = {"value": value, "dtype": types[j].name, "gradient_filler": True}
    return ctx.graph.create_node("Const", (), attrs, name=f"{ctx.prefix}{ctx.node.name}/filler").outputs[0]


def _predicate(ctx: ImportContext, p: Value) -> Tensor:
    if not isinstance(p, Tensor):
        raise UnsupportedError(f"{ctx.where()}: its predicate is {ImportContext.describe(p)}")
    if p.dtype == dt.bool_:
        return p
    if p.shape != ():
        raise UnsupportedError(f"{ctx.where()}: a predicate of dtype {p.dtype.name} must be a scalar here "
                               f"(got shape {p.shape})")
    return ctx.create("NotEqual", [p, ctx.const(p.dtype.numpy(0), [p], suffix="zero")], suffix="pred").outputs[0]


@_rule("PartitionedCall", "StatefulPartitionedCall")
def _call(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The function ``f`` called where the op stands: its body imported in its place."""
    _check_attr(ctx, "Tin", "input", ins, "it reads")
    outs, waits = call(ctx, _func(ctx, "f"), ins, "call")
    _check_attr(ctx, "Tout", "output", outs, f"function {_func(ctx, 'f')!r} returns")
    return _named(ctx, _after(outs, waits), waits)


def library(gd: Any) -> dict[str, Any]:
    """The functions of GraphDef ``gd``'s library by name. Two of one name are refused, as
    TensorFlow's function library refuses them: which one a call meant is not known."""
    out: dict[str, Any] = {}
    for f in gd.library.function:
        if f.signature.name in out:
            raise GraphBuildError(f"the GraphDef's library defines function {f.signature.name!r} twice")
        out[f.signature.name] = f
    return out


def _callees(nd: Any) -> Iterator[str]:
    """The names NodeDef ``nd`` calls a function by: a function-valued attr (a loop's ``cond`` and
    ``body``, an ``If``'s branches, a call's ``f``), a list of them (a ``Case``'s ``branches``), and its
    op (TensorFlow calls a library function whose name is a node's op)."""
    for a in nd.attr.values():
        kind = a.WhichOneof("value")
        if kind == "func":
            yield a.func.name
        elif kind == "list":
            yield from (f.name for f in a.list.func)
    yield nd.op


def called(gd: Any) -> list[Any]:
    """The FunctionDefs of GraphDef ``gd``'s library that its nodes call, directly or through the
    functions they call, in the library's order (every definition of a name defined twice, which
    ``library`` refuses). Why: only these are imported (module docstring)."""
    by_name: dict[str, list[Any]] = {}
    for f in gd.library.function:
        by_name.setdefault(f.signature.name, []).append(f)
    seen: set[str] = set()
    work = list(gd.node)
    while work:
        for name in _callees(work.pop()):
            if name in by_name and name not in seen:
                seen.add(name)
                work += [nd for f in by_name[name] for nd in f.node_def]
    return [f for f in gd.library.function if f.signature.name in seen]


__all__ = ["ARG", "OUTPUT_ARGS", "call", "called", "function_nodes", "library"]

