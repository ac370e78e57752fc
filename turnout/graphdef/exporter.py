"""``export_graph_def``: a Turnout graph as a TensorFlow v1 GraphDef (control flow and gradients included).

Why it is mostly one node per node: Turnout's primitives are TensorFlow v1's, so Switch, Merge, Enter,
Exit, NextIteration and LoopCond keep their frames and names, and TensorBoard's graph dashboard
groups the nodes by their name scopes (``while/...``, ``gradients/while/...``). The rules in
``export_rules`` (one per Turnout primitive) handle what differs: static attributes become constant
inputs (placed in the node's frame by a control edge), resource assigns get a read for their output,
keyed gradient stacks become TensorFlow's LIFO stacks (their loops then run one iteration at a time,
``parallel_iterations = 1``, so pops meet pushes in reverse order), and a TensorArray value becomes a
TensorArrayV3 handle plus its flow.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout.arguments import checked
from turnout.errors import UnsupportedError, describe_node
from turnout.frames import Frame, static_frames
from turnout.graph import Graph, Node, Tensor
from turnout.graphdef import protos

Rule = Callable[["ExportContext", Node], Sequence[str]]
#: Turnout primitive -> export rule; filled by ``turnout.graphdef.export_rules``.
EXPORT_RULES: dict[str, Rule] = {}

_BAD = re.compile(r"[^A-Za-z0-9_.\-/>]")


def tf_node_name(name: str) -> str:
    """A Turnout node name as a legal TensorFlow node name."""
    s = _BAD.sub("_", name)
    return s if re.match(r"[A-Za-z0-9.]", s) else f"n{s}"


class ExportContext:
    """What an export rule sees: the GraphDef being written, the TensorFlow name of every exported
    Turnout tensor, each node's frame, and ``add`` / ``const`` to write NodeDefs."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.p = protos.pb()
        self.gd = self.p.graph_pb2.GraphDef()
        self.gd.versions.producer = 1205  # a GraphDef version TensorFlow 2.x reads
        self.names: dict[str, str] = {}  # Turnout tensor name -> TF tensor name
        self.node_names: dict[int, str] = {}  # Turnout node id -> TF node name (for control edges)
        self.used: set[str] = set()
        self.fa = static_frames(graph)
        self.node: Node = graph.nodes[0] if graph.nodes else None  # type: ignore[assignment]
        self.ta_handles: dict[str, str] = {}  # Turnout TensorArray tensor -> TF handle tensor (its frame)
        self.enter_cache: dict[tuple[str, Frame], str] = {}
        self.serial_frames: set[Frame] = set()
        self.initializers: list[str] = []
        self.reserved: dict[int, str] = {}

    # ---- names -------------------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        name = tf_node_name(base)
        k, out = 0, name
        while out in self.used:
            k += 1
            out = f"{name}_{k}"
        self.used.add(out)
        return out

    def t(self, x: Tensor) -> str:
        """The TensorFlow name of an exported Turnout tensor."""
        return self.names[x.name]

    def frame(self, n: Optional[Node] = None) -> Frame:
        return self.fa.node_frame[(n or self.node).id]

    # ---- writing -----------------------------------------------------------------------------------
    def add(self, op: str, inputs: Sequence[str], attrs: Optional[dict[str, Any]] = None,
            suffix: Optional[str] = None, control: Sequence[str] = (), name: Optional[str] = None) -> str:
        """Write a NodeDef for the current node (named after it, or ``<name>/<suffix>``); every one
        carries the node's control inputs. Returns the TensorFlow node name."""
        name = name or self.fresh(self.node.name if suffix is None else f"{self.node.name}/{suffix}")
        nd = self.gd.node.add()
        nd.name, nd.op = name, op
        nd.input.extend(list(inputs))
        ctrl = [f"^{self.node_names[c.id]}" for c in self.node.control_inputs if c.id in self.node_names]
        nd.input.extend(dict.fromkeys(ctrl + [f"^{c}" for c in control]))
        for k, v in (attrs or {}).items():
            set_attr(self, nd.attr[k], v)
        if self.node.device:
            nd.device = str(self.node.device)
        return name

    def const(self, value: Any, suffix: str = "const", anchor: Optional[str] = None) -> str:
        """A constant in the current node's frame: a control edge from ``anchor`` (a TF tensor of that
        frame, by default the node's first input) puts it there, as TensorFlow does."""
        arr = np.asarray(value)
        if anchor is None and self.node.inputs:
            anchor = self.t(self.node.inputs[0])
        control = [anchor.split(":")[0].lstrip("^")] if anchor and self.frame() else []
        name = self.add("Const", [], {"dtype": Dt(dt.as_dtype(arr.dtype)), "value": Value(arr)}, suffix=suffix,
                        control=control)
        return f"{name}:0"

    def dtype_of(self, x: Tensor) -> Dt:
        return Dt(x.dtype)


@dataclass(frozen=True)
class Dt:
    """An attr value that is a TensorFlow DataType."""

    dtype: dt.DType


@dataclass(frozen=True)
class Value:
    """An attr value that is a TensorProto."""

    value: Any


@dataclass(frozen=True)
class Shape:
    """An attr value that is a TensorShapeProto (None: unknown rank; None dims: unknown size)."""

    dims: Optional[Sequence[Optional[int]]]


def set_attr(ctx: ExportContext, a: Any, v: Any) -> None:
    if isinstance(v, Dt):
        if v.dtype == dt.tensor_array:  # a TensorArray value travels as its float flow
            a.type = protos.DTYPE_TO_TF["float32"]
        elif v.dtype.name not in protos.DTYPE_TO_TF:
            raise UnsupportedError(f"{describe_node(ctx.node)}: dtype {v.dtype.name} has no TensorFlow counterpart")
        else:
            a.type = protos.DTYPE_TO_TF[v.dtype.name]
    elif isinstance(v, Value):
        protos.numpy_to_tensor(v.value, a.tensor)
    elif isinstance(v, Shape):
        a.shape.SetInParent()  # a scalar's shape has no dims, but it is set
        if v.dims is None:
            a.shape.unknown_rank = True
        else:
            for d in v.dims:
                a.shape.dim.add().size = -1 if d is None else int(d)
    elif isinstance(v, bool):
        a.b = v
    elif isinstance(v, int):
        a.i = v
    elif isinstance(v, float):
        a.f = v
    elif isinstance(v, str):
        a.s = v.encode()
    elif isinstance(v, list):
        if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            a.list.i.extend(v)
        elif v and all(isinstance(x, Dt) for x in v):  # a list of types (``Assert``'s ``T``)
            for x in v:
                if x.dtype.name not in protos.DTYPE_TO_TF:
                    raise UnsupportedError(f"{describe_node(ctx.node)}: dtype {x.dtype.name} has no TensorFlow "
                                           "counterpart")
                a.list.type.append(protos.DTYPE_TO_TF[x.dtype.name])
        else:
            raise UnsupportedError(f"unsupported list attr {v!r}")
    else:
        raise UnsupportedError(f"unsupported attr {v!r}")


@dataclass
class ExportedGraphDef:
    """A GraphDef written from a Turnout graph, with the TensorFlow name of every Turnout tensor
    (``tensor_names["while/exit_1:0"]``) and ``init_op``, the op that runs every Variable initializer."""

    graph_def: Any
    tensor_names: dict[str, str] = field(default_factory=dict)
    init_op: Optional[str] = None
    op_names: dict[str, str] = field(default_factory=dict)

    def tf_op(self, node: Node | str) -> str:
        """The TensorFlow op to run for a Turnout node (a target such as a training step)."""
        return self.op_names[node if isinstance(node, str) else node.name]

    def tf_name(self, t: Tensor | str) -> str:
        """The TensorFlow tensor name of a Turnout tensor (or of its name)."""
        return self.tensor_names[t if isinstance(t, str) else t.name]

    def write(self, path: str | Path) -> Path:
        """Write ``.pbtxt`` as text, anything else as a binary ``.pb``."""
        path = Path(path)
        if path.suffix == ".pbtxt":
            from google.protobuf import text_format

            path.write_text(text_format.MessageToString(self.graph_def))
        else:
            path.write_bytes(self.graph_def.SerializeToString())
        return path


def unexportable(graph: Graph) -> dict[str, list[str]]:
    """Primitive -> the nodes that use it, for every primitive of ``graph`` with no export rule."""
    _load_rules()
    bad: dict[str, list[str]] = {}
    for n in graph.nodes:
        if n.op not in EXPORT_RULES:
            bad.setdefault(n.op, []).append(n.name)
    return bad


def _load_rules() -> None:
    if not EXPORT_RULES:
        import turnout.graphdef.export_rules  # noqa: F401  (fills EXPORT_RULES)


@checked
def export_graph_def(graph: Optional[Graph] = None) -> ExportedGraphDef:
    """Write ``graph`` (the default graph if None) as a TensorFlow v1 GraphDef that TensorFlow runs
    with the same results (``tf.compat.v1.import_graph_def``; run ``init_op`` first when there are
    Variables) and TensorBoard draws. Raises ``UnsupportedError`` listing every primitive that has
    no TensorFlow form (``turnout.graphdef.EXPORTABLE_PRIMITIVES`` lists those that have)."""
    from turnout.frames import topological_order
    from turnout.graph import get_default_graph

    g = graph if graph is not None else get_default_graph()
    bad = unexportable(g)
    if bad:
        lines = [f"  {op}: {len(ns)} node(s), e.g. {ns[0]!r}" for op, ns in sorted(bad.items())]
        raise UnsupportedError("the graph uses primitives that have no TensorFlow v1 form:\n" + "\n".join(lines))
    ctx = ExportContext(g)
    ctx.serial_frames = {ctx.fa.node_frame[n.id] for n in g.nodes if n.op in ("StackPush", "StackPop")}
    # the frames of pushes and pops, and every frame enclosing them, run one iteration at a time
    ctx.serial_frames |= {f[:k] for f in ctx.serial_frames for k in range(1, len(f))}
    order = topological_order(g)
    for n in order:  # a Merge is written last (its back edge comes later in the order); name it now
        if n.op == "Merge":
            ctx.reserved[n.id] = ctx.fresh(n.name)
            for k, t in enumerate(n.outputs):
                ctx.names[t.name] = f"{ctx.reserved[n.id]}:{k}"
            ctx.node_names[n.id] = ctx.reserved[n.id]
    for n in order:
        ctx.node = n
        if n.op != "Merge":
            _emit(ctx, n)
    for n in order:
        if n.op == "Merge":
            ctx.node = n
            _emit(ctx, n)
    init = None
    if ctx.initializers:
        ctx.node = order[0]
        nd = ctx.gd.node.add()
        nd.name = init = ctx.fresh("init")
        nd.op = "NoOp"
        nd.input.extend(f"^{i}" for i in ctx.initializers)
    ops = {n.name: ctx.node_names[n.id] for n in g.nodes if n.id in ctx.node_names}
    return ExportedGraphDef(ctx.gd, dict(ctx.names), init, ops)


def _emit(ctx: ExportContext, n: Node) -> None:
    before = len(ctx.gd.node)
    outs = EXPORT_RULES[n.op](ctx, n)
    for t, name in zip(n.outputs, outs):
        ctx.names[t.name] = name
    if len(ctx.gd.node) > before:  # a control edge on n waits for the last NodeDef n became
        ctx.node_names[n.id] = ctx.gd.node[len(ctx.gd.node) - 1].name
