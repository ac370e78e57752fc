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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from turnout.arguments import checked
from turnout.errors import UnsupportedError
from turnout.frames import topological_order
from turnout.graph import Graph, Node, Tensor, get_default_graph
from turnout.graphdef.export_context import ExportContext
from turnout.graphdef.export_nn import WINDOW_RULES
from turnout.graphdef.export_random import RANDOM_RULES
from turnout.graphdef.export_rules import EXPORT_RULES as _OP_RULES
from turnout.graphdef.export_tensor_arrays import TENSOR_ARRAY_RULES

#: Turnout primitive -> export rule: the TensorArrays' (``export_tensor_arrays``) and every other's
EXPORT_RULES = {**_OP_RULES, **TENSOR_ARRAY_RULES, **WINDOW_RULES, **RANDOM_RULES}


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
    bad: dict[str, list[str]] = {}
    for n in graph.nodes:
        if n.op not in EXPORT_RULES:
            bad.setdefault(n.op, []).append(n.name)
    return bad


@checked
def export_graph_def(graph: Optional[Graph] = None) -> ExportedGraphDef:
    """Write ``graph`` (the default graph if None) as a TensorFlow v1 GraphDef that TensorFlow runs
    with the same results (``tf.compat.v1.import_graph_def``; run ``init_op`` first when there are
    Variables) and TensorBoard draws. Raises ``UnsupportedError`` listing every primitive that has
    no TensorFlow form (``turnout.graphdef.EXPORTABLE_PRIMITIVES`` lists those that have)."""
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
    written: dict[int, range] = {}  # Turnout node id -> the indices of the NodeDefs it became
    for n in order:
        ctx.node = n
        if n.op != "Merge":
            written[n.id] = _emit(ctx, n)
    for n in order:
        if n.op == "Merge":
            ctx.node = n
            written[n.id] = _emit(ctx, n)
    _colocation_attrs(ctx, written)
    init = None
    if ctx.initializers:
        ctx.node = order[0]
        nd = ctx.gd.node.add()
        nd.name = init = ctx.fresh("init")
        nd.op = "NoOp"
        nd.input.extend(f"^{i}" for i in ctx.initializers)
    ops = {n.name: ctx.node_names[n.id] for n in g.nodes if n.id in ctx.node_names}
    return ExportedGraphDef(ctx.gd, dict(ctx.names), init, ops)


def _emit(ctx: ExportContext, n: Node) -> range:
    """Write the NodeDefs of ``n``; returns their indices in the GraphDef."""
    before = len(ctx.gd.node)
    outs = EXPORT_RULES[n.op](ctx, n)
    for t, name in zip(n.outputs, outs):
        ctx.names[t.name] = name
    if len(ctx.gd.node) > before:  # a control edge on n waits for the last NodeDef n became
        ctx.node_names[n.id] = ctx.gd.node[len(ctx.gd.node) - 1].name
    return range(before, len(ctx.gd.node))


def _colocation_attrs(ctx: ExportContext, written: dict[int, range]) -> None:
    """``tn.colocate_with`` (and an imported GraphDef's ``_class``) as TensorFlow's colocation attr on
    every NodeDef of the colocated node: ``_class: ["loc:@<each target's first NodeDef>", ...]``, so
    TensorFlow places them together as Turnout would (and a re-import ties them again)."""
    from turnout.graphdef.placement import LOC_PREFIX

    for nid, targets in ctx.graph.colocation.items():
        if nid not in written:
            continue
        names = [ctx.gd.node[written[t][0]].name for t in targets if written.get(t)]
        for k in written[nid]:
            nd = ctx.gd.node[k]
            for name in names:
                if nd.name != name:
                    nd.attr["_class"].list.s.append(f"{LOC_PREFIX}{name}".encode())
