"""``import_graph_def``: a TensorFlow v1 GraphDef (with its control flow) as a Turnout graph.

Why it can be direct: TensorFlow v1 lowers ``tf.cond`` / ``tf.while_loop`` to the same primitives as
Turnout (Switch, Merge, Enter, Exit, NextIteration, LoopCond), with the same frames and the same dead
values, so most NodeDefs become one Turnout node. The rules that differ live in ``import_rules``, one
per TensorFlow op name: ops whose static arguments TensorFlow passes as tensors (Reshape's shape,
Sum's axes) read them by constant folding; TensorArrays carry their value on the flow edge (see
``flows``); TensorFlow's LIFO gradient stacks become Turnout's keyed stacks with a depth counter.

The importer checks every op against the rule table before it builds anything, so one error lists
every unsupported op of the graph.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout.errors import (
    ArgumentError,
    GraphBuildError,
    NotFoundError,
    SerializationError,
    TurnoutError,
    UnsupportedError,
)
from turnout.graph import BACK_EDGE, Graph, Node, Tensor, TensorSpec
from turnout.graphdef import protos
from turnout.graphdef.flows import FlowAnalysis, tensor_name


@dataclass(frozen=True)
class Bundle:
    """Several Turnout tensors standing for one TensorFlow tensor (a LIFO stack: its keyed stack and
    its depth counter). Pass-through ops apply to each part."""

    parts: tuple[Tensor, ...]


@dataclass(frozen=True)
class RangeMarker:
    """``Range(start, limit, delta)`` with run-time bounds: Turnout has no such op, so it is kept
    symbolic and accepted only where its meaning is a whole prefix (TensorArray gather / scatter)."""

    start: Any
    limit: Any
    delta: Any
    limit_node: str


@dataclass(frozen=True)
class Text:
    """A string constant. Turnout has no string tensors; TF1 model code makes them only for the
    messages of ``Assert``, which reads them when it is imported."""

    value: str


@dataclass(frozen=True)
class BroadcastAxes:
    """The axes along which operand ``like`` of a broadcasting op was broadcast, when its shape is
    known only at run time (a BroadcastGradientArgs output): accepted only by the Sum that
    tf.gradients applies to them, which becomes a SumToLike."""

    like: Tensor


@dataclass(frozen=True)
class Ref:
    """A TF1 reference variable's ref tensor (``VariableV2``): the Turnout Variable's handle. An op
    that takes refs (``Assign``, ``ApplyGradientDescent``, the ``Ref*`` control flow) gets the
    handle; any other op reads the Variable where it runs (``read``: a read at the root, for fetches)."""

    handle: Tensor
    attrs: dict[str, Any]
    read: Tensor


#: ops whose inputs may be refs; every other op reads a ref input's Variable when it runs
REF_OPS = frozenset({"RefEnter", "RefExit", "RefIdentity", "RefSwitch", "RefMerge", "RefNextIteration", "Assign",
                     "AssignAdd", "AssignSub", "ApplyGradientDescent", "ApplyMomentum", "ApplyAdam",
                     "ApplyRMSProp", "ApplyAdagrad", "ApplyAdagradV2", "IsVariableInitialized"})

#: Tensor | Bundle | RangeMarker | Text | BroadcastAxes | Ref | None (or BACK_EDGE for a Merge input not yet built)
Value = Any
Rule = Callable[["ImportContext", Any, list[Value]], Sequence[Value]]

#: TensorFlow op name -> import rule; filled by ``turnout.graphdef.import_rules``.
IMPORT_RULES: dict[str, Rule] = {}


class ImportContext:
    """What a rule sees while its NodeDef is imported: the graph, the node's control inputs, constant
    folding over the GraphDef, the flow labels, and ``create`` (which names and wires Turnout nodes)."""

    def __init__(self, graph: Graph, nodes: dict[str, Any], flows: FlowAnalysis, prefix: str) -> None:
        self.graph = graph
        self.nodes = nodes
        self.flows = flows
        self.prefix = prefix
        self.values: dict[str, Value] = {}  # TF tensor name -> imported value
        self.control: dict[str, Node] = {}  # TF node name -> the Turnout node a control edge waits for
        self.back_edges: list[tuple[Node, int, str]] = []
        self.node: Any = None
        self.created: list[Node] = []
        #: StackPushV2 name -> what it pushes when that is not its input (a TensorArray flow's stand-in)
        self.pushed: dict[str, Tensor] = {}
        #: loop Merge name -> the shape it is imported with: TensorFlow's loop variable was relaxed
        #: (``shape_invariants``), found when its back edge did not fit (see ``_import``)
        self.relaxed: dict[str, list[Any]] = {}
        self._static: dict[str, Optional[np.ndarray]] = {}

    # ---- building --------------------------------------------------------------------------------
    def ctrl_inputs(self) -> list[Node]:
        return [self.control[i[1:]] for i in self.node.input if i.startswith("^") and i[1:] in self.control]

    def create(self, op: str, inputs: Sequence[Any], attrs: Optional[dict[str, Any]] = None,
               suffix: Optional[str] = None, control: Optional[Sequence[Node]] = None,
               shapes: Optional[Sequence[Any]] = None) -> Node:
        """A Turnout node for the current NodeDef. The last node a rule creates carries the NodeDef's
        name; helpers get ``<name>/_tn/<suffix>``. Every node gets the NodeDef's control inputs.

        ``shapes`` (one per output, None where nothing is known) are what TensorFlow recorded of
        the outputs' shapes; they refine the shape rule's answer. The node that carries the
        NodeDef's name takes the NodeDef's ``_output_shapes`` so, where TensorFlow wrote them."""
        name = self.prefix + self.node.name + (f"/_tn/{suffix or op}" if suffix is not None else "")
        ctrl = list(self.ctrl_inputs()) if control is None else list(control)
        for t in inputs:
            if isinstance(t, (Bundle, RangeMarker, Text, BroadcastAxes, Ref)) or t is None:
                raise UnsupportedError(f'{self.where()}: an input of this op is {self.describe(t)}')
        if shapes is None and suffix is None:
            shapes = self.relaxed.get(self.node.name) or protos.attr(self.node, "_output_shapes")
        specs = self._refined(op, inputs, attrs or {}, shapes) if shapes else None
        with self.graph._in_context(None), self.graph._no_capture(), self.graph.control_dependencies(None):
            n = self.graph.create_node(op, list(inputs), attrs or {}, name=name, control_inputs=ctrl, specs=specs)
        self.created.append(n)
        return n

    def _refined(self, op: str, inputs: Sequence[Any], attrs: dict[str, Any],
                 shapes: Sequence[Any]) -> Optional[list[TensorSpec]]:
        """The shape rule's output specs, each made as specific as TensorFlow's recorded shape where
        the two agree. A Merge of a loop takes TensorFlow's shape as it is: a loop variable declared
        with a relaxed shape (``shape_invariants``) is shape-varying, whatever it entered with."""
        from turnout import shapes as sh
        from turnout.shape_rules import infer

        specs = infer(op, [t for t in inputs if isinstance(t, Tensor)], attrs)
        out = []
        for k, s in enumerate(specs):
            tf_shape = sh.as_shape(shapes[k]) if k < len(shapes) else None
            if s.dtype.is_opaque or k >= len(shapes) or shapes[k] is None and op != "Merge":
                out.append(s)
            elif op == "Merge" and k == 0 and any(t is BACK_EDGE for t in inputs):
                out.append(TensorSpec(s.dtype, tf_shape, s.elem_dtype, s.elem_shape))
            elif sh.compatible(s.shape, tf_shape):
                out.append(TensorSpec(s.dtype, sh.merge(s.shape, tf_shape), s.elem_dtype, s.elem_shape))
            else:
                out.append(s)
        return out

    def const(self, value: Any, anchors: Sequence[Any] = (), suffix: Optional[str] = "const") -> Tensor:
        """A constant in the frame of ``anchors`` (tensors or nodes): TensorFlow puts a constant into a
        loop frame by a control edge from a node of that frame, and so does this."""
        arr = np.asarray(value)
        ctrl = self.ctrl_inputs() + [a.node if isinstance(a, Tensor) else a for a in anchors
                                     if isinstance(a, (Tensor, Node))]
        return self.create("Const", [], {"value": arr, "dtype": dt.as_dtype(arr.dtype).name}, suffix=suffix,
                           control=ctrl).outputs[0]

    def where(self) -> str:
        return f'{self.node.op} node "{self.node.name}"'

    @staticmethod
    def describe(v: Any) -> str:
        if isinstance(v, Bundle):
            return "a TensorFlow stack handle"
        if isinstance(v, Ref):
            return "a reference variable's ref (only ops that take refs may use it)"
        if isinstance(v, BroadcastAxes):
            return "run-time broadcast axes (supported only as the axes of tf.gradients' Sum)"
        if isinstance(v, Text):
            return "a string constant (Turnout has no string tensors; only Assert's message may read one)"
        if isinstance(v, RangeMarker):
            return "a Range with run-time bounds (supported only as TensorArray gather/scatter indices)"
        return "an output TensorFlow defines but the importer does not produce"

    # ---- attributes and constant folding ---------------------------------------------------------
    def attr(self, key: str, default: Any = None) -> Any:
        return protos.attr(self.node, key, default)

    @staticmethod
    def attr_of(nd: Any, key: str, default: Any = None) -> Any:
        return protos.attr(nd, key, default)

    def dtype(self, key: str = "T") -> dt.DType:
        return protos.tf_dtype(self.attr(key), self.where())

    def data_inputs(self, nd: Any = None) -> list[str]:
        nd = nd if nd is not None else self.node
        return [tensor_name(i) for i in nd.input if not i.startswith("^")]

    def static(self, tname: str) -> Optional[np.ndarray]:
        """The value of a TensorFlow tensor when it is known at import time, else None."""
        tname = tensor_name(tname)
        if tname not in self._static:
            self._static[tname] = None  # cycles (loops) are not constant
            self._static[tname] = _fold(self, tname)
        return self._static[tname]

    def static_int_list(self, tname: str, what: str) -> list[int]:
        v = self.static(tname)
        if v is None:
            raise UnsupportedError(f"{self.where()}: {what} ({tname}) must be known when importing; "
                                   "Turnout takes it as a static attribute")
        return [int(x) for x in np.ravel(v)]

    def spec_shape(self, tname: str) -> Optional[tuple[Any, ...]]:
        v = self.values.get(tensor_name(tname))
        return v.shape if isinstance(v, Tensor) else None


# ---- constant folding ------------------------------------------------------------------------------
_FOLD: dict[str, Optional[Callable[..., Any]]] = {
    "Identity": lambda x: x, "Snapshot": lambda x: x, "StopGradient": lambda x: x,
    "Add": np.add, "AddV2": np.add, "Sub": np.subtract, "Mul": np.multiply, "Maximum": np.maximum,
    "Minimum": np.minimum, "FloorDiv": np.floor_divide, "FloorMod": np.mod, "Neg": np.negative,
    "Prod": None, "Pack": None, "ConcatV2": None, "Range": None, "StridedSlice": None, "Cast": None,
    "Fill": None, "Reshape": None, "BroadcastGradientArgs": None, "Size": None, "Rank": None, "Shape": None,
    "InvertPermutation": lambda p: np.argsort(p).astype(p.dtype), "ConcatOffset": None, "DynamicStitch": None,
}


def _fold(ctx: ImportContext, tname: str) -> Optional[np.ndarray]:
    node_name, _, idx = tname.rpartition(":")
    nd = ctx.nodes.get(node_name)
    if nd is None:
        return None
    op = nd.op
    if op == "Const":
        return protos.tensor_to_numpy(protos.attr(nd, "value"), f'Const node "{nd.name}"')
    if op in ("Enter", "RefEnter") and protos.attr(nd, "is_constant", False):
        return ctx.static(ctx.data_inputs(nd)[0])
    if op in ("Shape", "Size", "Rank", "ShapeN"):
        shp = ctx.spec_shape(ctx.data_inputs(nd)[int(idx) if op == "ShapeN" else 0])
        op = "Shape" if op == "ShapeN" else op
        if shp is None or (op != "Rank" and any(d is None for d in shp)):
            return None
        out = {"Shape": np.asarray(shp, np.int32), "Size": np.asarray(int(np.prod(shp)), np.int32),
               "Rank": np.asarray(len(shp), np.int32)}[op]
        return out.astype(np.int64) if protos.attr(nd, "out_type") == 9 else out
    if op not in _FOLD:
        return None
    ins = [ctx.static(t) for t in ctx.data_inputs(nd)]
    if any(v is None for v in ins):
        return None
    vals: list[np.ndarray] = ins  # type: ignore[assignment]
    try:
        if op == "Pack":
            return np.stack(vals, axis=protos.attr(nd, "axis", 0))
        if op == "ConcatV2":
            return np.concatenate(vals[:-1], axis=int(vals[-1]))
        if op == "Range":
            return np.arange(int(vals[0]), int(vals[1]), int(vals[2])).astype(vals[0].dtype)
        if op == "Cast":
            return vals[0].astype(protos.tf_dtype(protos.attr(nd, "DstT"), op).numpy)
        if op == "Fill":
            return np.full([int(d) for d in vals[0]], vals[1])
        if op == "Reshape":
            return vals[0].reshape([int(d) for d in vals[1]])
        if op == "Prod":
            return np.prod(vals[0], axis=tuple(np.ravel(vals[1]).tolist()),
                           keepdims=bool(protos.attr(nd, "keep_dims", False))).astype(vals[0].dtype)
        if op == "StridedSlice":
            from turnout.graphdef.import_rules import strided_slice_index

            key = strided_slice_index(nd, [int(x) for x in vals[1]], [int(x) for x in vals[2]],
                                      [int(x) for x in vals[3]])
            return np.asarray(vals[0][key])
        if op == "DynamicStitch":
            n = len(vals) // 2
            merged: dict[int, Any] = {}
            for ids, data in zip(vals[:n], vals[n:]):
                for i, j in enumerate(np.ravel(ids)):
                    merged[int(j)] = np.reshape(data, (np.size(ids), *np.shape(data)[np.ndim(ids):]))[i]
            return np.stack([merged[j] for j in range(len(merged))])
        if op == "ConcatOffset":  # where input k of a Concat starts: the sizes before it, on the axis
            axis, shapes = int(vals[0]), vals[1:]
            off = np.zeros_like(shapes[0])
            for s in shapes[: int(idx)]:
                off[axis % len(off)] += s[axis % len(off)]
            return off
        if op == "BroadcastGradientArgs":
            return broadcast_gradient_args(vals[0], vals[1])[int(idx)]
        fn = _FOLD[op]
        return None if fn is None else np.asarray(fn(*vals))
    except (ValueError, IndexError, TypeError):
        return None


def broadcast_gradient_args(s0: Any, s1: Any) -> tuple[np.ndarray, np.ndarray]:
    """The axes along which each operand of a broadcasting binary op was broadcast (its gradient
    is summed over them), as TensorFlow's BroadcastGradientArgs computes them."""
    a, b = [int(x) for x in s0], [int(x) for x in s1]
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    r0 = [i for i in range(n) if a[i] == 1 and b[i] != 1]
    r1 = [i for i in range(n) if b[i] == 1 and a[i] != 1]
    return np.asarray(r0, np.int32), np.asarray(r1, np.int32)


# ---- the driver ------------------------------------------------------------------------------------
@dataclass
class ImportedGraph:
    """The result of ``import_graph_def``: the Turnout graph and the TensorFlow names of its tensors.

    ``tensor("while/Exit_1:0")`` is the Turnout tensor TensorFlow calls so; ``node("init")`` is the
    node to run for a TensorFlow target op; ``run(session, fetches, feed_dict)`` takes names for both.
    """

    graph: Graph
    values: dict[str, Any] = field(default_factory=dict)
    controls: dict[str, Node] = field(default_factory=dict)
    op_counts: dict[str, int] = field(default_factory=dict)

    def tensor(self, name: str) -> Tensor:
        """The Turnout tensor for a TensorFlow tensor name (``"op:0"``, or ``"op"`` for output 0)."""
        v = self.values.get(tensor_name(name))
        if isinstance(v, Ref):
            v = v.read
        if isinstance(v, Tensor):
            return v
        if v is None and tensor_name(name) not in self.values:
            raise NotFoundError(f"the imported GraphDef has no tensor {name!r}")
        raise UnsupportedError(f"tensor {name!r} has no Turnout value: it is {ImportContext.describe(v)}")

    def node(self, name: str) -> Node:
        """The Turnout node a TensorFlow op name stands for, to run it as a target."""
        try:
            return self.controls[name.split(":")[0]]
        except KeyError:
            raise NotFoundError(f"the imported GraphDef has no op {name!r}") from None

    def run(self, session: Any, fetches: Sequence[str], feed_dict: Optional[dict[str, Any]] = None,
            targets: Sequence[str] = ()) -> list[Any]:
        """``session.run`` with TensorFlow tensor names for fetches and feeds, and op names as targets."""
        feeds = {self.tensor(k): v for k, v in (feed_dict or {}).items()}
        out = session.run([self.tensor(f) for f in fetches] + [self.node(t) for t in targets], feeds)
        return list(out[: len(fetches)])


def parse_graph_def(source: Any) -> Any:
    """A GraphDef message from a message, serialized bytes, or a ``.pb`` / ``.pbtxt`` path."""
    p = protos.pb()
    if isinstance(source, p.graph_pb2.GraphDef):
        return source
    gd = p.graph_pb2.GraphDef()
    if isinstance(source, (bytes, bytearray)):
        return _parsed(gd, bytes(source), "the GraphDef bytes", text=False)
    if not isinstance(source, (str, os.PathLike)):
        raise ArgumentError(f"import_graph_def takes a GraphDef, its bytes or a path, got {type(source).__name__}")
    path = Path(source)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SerializationError(f"cannot read a GraphDef from {os.fspath(source)!r}: {e}") from None
    return _parsed(gd, data, os.fspath(source), text=path.suffix in (".pbtxt", ".txt"))


def _parsed(gd: Any, data: bytes, where: str, text: bool) -> Any:
    """``gd`` filled from ``data`` (the binary wire format, or protobuf text). Why the catch-all: the
    protobuf library's errors (``DecodeError``, ``ParseError``, a bad UTF-8 byte, deep nesting) name
    nothing of the user's; a file that is not a GraphDef is one ``SerializationError`` naming it."""
    from google.protobuf import text_format
    from google.protobuf.message import DecodeError

    try:
        if text:
            text_format.Parse(data.decode("utf-8"), gd)
        else:
            gd.ParseFromString(data)
    except (DecodeError, text_format.ParseError, ValueError, RecursionError, RuntimeError) as e:
        raise SerializationError(f"{where}: not a valid GraphDef ({type(e).__name__}: {e})") from None
    return gd


def unsupported_ops(gd: Any) -> dict[str, list[str]]:
    """Op name -> the nodes that use it, for every op of ``gd`` that has no import rule."""
    _load_rules()
    bad: dict[str, list[str]] = {}
    for nd in gd.node:
        if nd.op not in IMPORT_RULES:
            bad.setdefault(nd.op, []).append(nd.name)
    return bad


def _load_rules() -> None:
    if not IMPORT_RULES:
        import turnout.graphdef.import_rules  # noqa: F401  (fills IMPORT_RULES)


def _stack_of(nodes: dict[str, Any], nd: Any) -> str:
    t = nd.input[0].split(":")[0]
    while nodes[t].op != "StackV2" and nodes[t].input:
        t = nodes[t].input[0].split(":")[0]
    return t


def _order(nodes: dict[str, Any], flows: FlowAnalysis) -> list[str]:
    """A topological order of the NodeDefs, ignoring the NextIteration -> Merge back edges. A stack
    pop comes after every push onto its stack: state links them, not an edge, and the pop takes its
    type from the pushed tensor."""
    pushes: dict[str, list[str]] = {}
    writes: dict[str, list[str]] = {}  # forward TensorArray -> the nodes that write into it
    for n, nd in nodes.items():
        if nd.op == "StackPushV2":
            pushes.setdefault(_stack_of(nodes, nd), []).append(n)
        if nd.op in ("TensorArrayWriteV3", "TensorArrayScatterV3"):
            lab = flows.label(nd.input[0])
            if lab is not None and lab[0] == "fwd":
                writes.setdefault(lab[1], []).append(n)
    deps: dict[str, set[str]] = {}
    for n, nd in nodes.items():
        ds = set()
        for i in nd.input:
            src = i.lstrip("^").split(":")[0]
            if src not in nodes:
                raise GraphBuildError(f'node "{n}" reads "{i}", which is not in the GraphDef')
            if nd.op in ("Merge", "RefMerge") and nodes[src].op in ("NextIteration", "RefNextIteration"):
                continue
            ds.add(src)
        if nd.op == "StackPopV2":
            ds.update(pushes.get(_stack_of(nodes, nd), []))
        lab = flows.label(f"{n}:0") if nd.op in ("Const", "ZerosLike", "OnesLike", "Fill") else None
        if lab is not None:  # an empty TensorArray takes its size and element shape from the forward array
            ds.add(lab[1])
            ds.update(w for w in writes.get(lab[1], []) if w != n)
        deps[n] = ds
    users: dict[str, list[str]] = {n: [] for n in nodes}
    for n, ds in deps.items():
        for d in ds:
            users[d].append(n)
    indeg = {n: len(ds) for n, ds in deps.items()}
    ready = [n for n in nodes if indeg[n] == 0]
    out: list[str] = []
    while ready:
        n = ready.pop()
        out.append(n)
        for u in users[n]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if len(out) != len(nodes):
        stuck = sorted(set(nodes) - set(out))[:5]
        raise GraphBuildError(f"the GraphDef has a cycle that is not a loop back edge (through {stuck})")
    return out


def import_graph_def(graph_def: Any, graph: Optional[Graph] = None, prefix: str = "") -> ImportedGraph:
    """Import a TensorFlow v1 GraphDef (message, bytes, or a ``.pb`` / ``.pbtxt`` path) into ``graph``
    (a new Graph by default). Returns an ``ImportedGraph`` that maps TensorFlow names to Turnout
    tensors. Raises ``UnsupportedError`` listing every op without an import rule (see
    ``turnout.graphdef.SUPPORTED_OPS``); needs the ``tf`` extra (``pip install 'turnout[tf]'``).
    """
    gd = parse_graph_def(graph_def)
    try:
        return _import(gd, graph, prefix)
    except TurnoutError:
        raise
    except MALFORMED as e:
        # a field of a well-formed message that holds what no TensorFlow writes (an attr of the wrong
        # kind, an input that names nothing, a size out of range): a Turnout error, never the raw one
        raise GraphBuildError(f"the GraphDef is malformed: {type(e).__name__}: {e}") from None


def _input(ctx: ImportContext, nodes: dict[str, Any], nd: Any, t: str) -> Any:
    """The value of input ``t`` of NodeDef ``nd``: made by an earlier node, or the back edge of a
    loop's Merge (a NextIteration's output, bound once the loop is imported). Any other name (an
    output index its node does not have) is refused, naming both."""
    if t in ctx.values:
        return ctx.values[t]
    src = nodes.get(t.split(":")[0])
    if nd.op in ("Merge", "RefMerge") and src is not None and src.op in ("NextIteration", "RefNextIteration"):
        return BACK_EDGE
    raise GraphBuildError(f'node "{nd.name}" ({nd.op}) reads "{t}", which no node of the GraphDef outputs')


#: what a rule or an analysis raises when a NodeDef's fields hold what no TensorFlow writes
MALFORMED = (KeyError, IndexError, ValueError, TypeError, AttributeError, OverflowError, RecursionError)


def _import(gd: Any, graph: Optional[Graph], prefix: str) -> ImportedGraph:
    """``import_graph_def`` of a parsed message."""
    bad = unsupported_ops(gd)
    if bad:
        lines = [f"  {op}: {len(ns)} node(s), e.g. {ns[0]!r}" for op, ns in sorted(bad.items())]
        raise UnsupportedError("the GraphDef uses ops Turnout cannot import:\n" + "\n".join(lines)
                               + "\n(the supported ops are listed in turnout.graphdef.SUPPORTED_OPS)")
    nodes = {nd.name: nd for nd in gd.node}
    if len(nodes) != len(gd.node):
        raise GraphBuildError("the GraphDef has two nodes with the same name")
    flows = FlowAnalysis(nodes)
    # A loop variable TensorFlow relaxed (shape_invariants) shows only when its back edge does not
    # fit the shape it entered with: the import then starts again with that Merge relaxed. Into a
    # graph the caller gave, the tries go to scratch graphs, so the caller's graph gets one import.
    loops = any(nd.op in ("NextIteration", "RefNextIteration") for nd in gd.node)
    relaxed: dict[str, list[Any]] = {}
    for _ in range(8 * len(nodes) + 1):
        try:
            if graph is not None and loops:
                _import_once(nodes, flows, Graph(), prefix, relaxed)
                return _import_once(nodes, flows, graph, prefix, relaxed)
            return _import_once(nodes, flows, Graph() if graph is None else graph, prefix, relaxed)
        except _Relax as r:
            relaxed.update(r.shapes)
    raise GraphBuildError("the loop variables' shapes did not settle")  # (each try relaxes a shape: unreachable)


class _Relax(Exception):
    """Loop Merges whose back edges do not fit the shape they entered with, and their relaxed shapes."""

    def __init__(self, shapes: dict[str, list[Any]]) -> None:
        super().__init__(sorted(shapes))
        self.shapes = shapes


def _import_once(nodes: dict[str, Any], flows: FlowAnalysis, g: Graph, prefix: str,
                 relaxed: dict[str, list[Any]]) -> ImportedGraph:
    """One import of the NodeDefs into ``g``, with the loop Merges of ``relaxed`` relaxed."""
    from turnout import shapes as sh

    ctx = ImportContext(g, nodes, flows, prefix)
    ctx.relaxed = relaxed
    for name in _order(nodes, ctx.flows):
        nd = nodes[name]
        ctx.node, ctx.created = nd, []
        ins = [_input(ctx, nodes, nd, t) for t in ctx.data_inputs(nd)]
        if nd.op not in REF_OPS:  # a ref read as a value: the Variable's value where this op runs
            ins = [ctx.create("ReadVariable", [v.handle], v.attrs, suffix=f"read{k}").outputs[0]
                   if isinstance(v, Ref) else v for k, v in enumerate(ins)]
        try:
            outs = IMPORT_RULES[nd.op](ctx, nd, ins)
        except TurnoutError as e:
            if f'"{nd.name}"' in str(e):
                raise
            raise type(e)(f'{ctx.where()}: {e}') from e
        except MALFORMED as e:
            raise GraphBuildError(f"{ctx.where()}: the node is malformed ({type(e).__name__}: {e})") from None
        for k, v in enumerate(outs):
            ctx.values[f"{name}:{k}"] = v
        if ctx.created:
            ctx.control[name] = ctx.created[-1]
    relax: dict[str, list[Any]] = {}
    for merge, _slot, src in ctx.back_edges:
        v = ctx.values.get(src)
        have = merge.outputs[0].shape
        if isinstance(v, Tensor) and v.dtype == merge.outputs[0].dtype and not sh.fits_invariant(have, v.shape):
            wider = sh.most_specific_common(have, v.shape)
            if wider != have:
                relax[merge.name[len(prefix):]] = [wider, []]
    if relax:
        raise _Relax(relax)
    for merge, slot, src in ctx.back_edges:
        v = ctx.values.get(src)
        if not isinstance(v, Tensor):
            raise UnsupportedError(f'Merge node "{merge.name}": its back edge {src} is {ImportContext.describe(v)}')
        merge.close_back_edge(v, slot)
    counts = dict(Counter(nd.op for nd in nodes.values()))
    return ImportedGraph(g, dict(ctx.values), dict(ctx.control), counts)
