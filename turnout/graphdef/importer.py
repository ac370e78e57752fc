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
import warnings
from collections import ChainMap, Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from turnout.arguments import check_node_name
from turnout.errors import (
    ArgumentError,
    FeedError,
    GraphBuildError,
    NotFoundError,
    SerializationError,
    TurnoutError,
    UnsupportedError,
)
from turnout.files import file_path
from turnout.graph import Graph, Node, Tensor
from turnout.graphdef import (  # noqa: F401  (their rules join IMPORT_RULES)
    import_arrays,
    import_conv3d,
    import_crop,
    import_ctc,
    import_functions,
    import_math,
    import_models,
    import_nms,
    import_nn,
    import_random,
    import_rnn_cells,
    import_scatter,
    import_structure,
    import_tensor_arrays,
    import_tensor_lists,
    protos,
)
from turnout.graphdef import input_pipeline as pipeline
from turnout.graphdef import left_out as leaving
from turnout.graphdef.exporter import ExportedGraphDef
from turnout.graphdef.flows import FlowAnalysis, tensor_name
from turnout.graphdef.import_context import ImportContext, Ref
from turnout.graphdef.import_nodes import MALFORMED, import_nodes, order
from turnout.graphdef.import_rules import IMPORT_RULES
from turnout.graphdef.placement import colocation_targets, tf_device


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
    #: tf.cond ``pred_id`` nodes whose Switches read the predicate behind them: a feed of one would
    #: not reach those Switches, so ``run`` refuses it
    looked_through: frozenset[str] = frozenset()
    #: the nodes of TensorFlow's Saver and summaries, which the import leaves out, each with the part it
    #: belongs to (``left_out``: ``"saver"`` or ``"summary"``)
    left_out: dict[str, str] = field(default_factory=dict)
    #: tag -> the TensorFlow name of the tensor each left-out scalar, histogram or tensor summary read
    #: (``left_out.summary_values``): fetch them to write the summaries with ``EventWriter``
    summaries: dict[str, str] = field(default_factory=dict)
    #: the TensorFlow names of the tensors that stand for the left-out input pipeline's batches (each
    #: output of each get-next node, ``input_pipeline.batches``): feed them
    batches: list[str] = field(default_factory=list)

    def _missing(self, what: str, name: str) -> NotFoundError:
        instead = leaving.why(self.left_out.get(name.split(":")[0]))
        if instead is not None:
            return NotFoundError(f"{what} {name!r} {instead}")
        return NotFoundError(f"the imported GraphDef has no {what} {name!r}")

    def tensor(self, name: str) -> Tensor:
        """The Turnout tensor for a TensorFlow tensor name (``"op:0"``, or ``"op"`` for output 0)."""
        v = self.values.get(tensor_name(name))
        if isinstance(v, Ref):
            v = v.read
        if isinstance(v, Tensor):
            return v
        if v is None and tensor_name(name) not in self.values:
            raise self._missing("tensor", name)
        raise UnsupportedError(f"tensor {name!r} has no Turnout value: it is {ImportContext.describe(v)}")

    def node(self, name: str) -> Node:
        """The Turnout node a TensorFlow op name stands for, to run it as a target."""
        try:
            return self.controls[name.split(":")[0]]
        except KeyError:
            raise self._missing("op", name) from None

    def run(self, session: Any, fetches: Sequence[str], feed_dict: Optional[dict[str, Any]] = None,
            targets: Sequence[str] = ()) -> list[Any]:
        """``session.run`` with TensorFlow tensor names for fetches and feeds, and op names as targets."""
        for k in feed_dict or {}:
            if isinstance(k, str) and tensor_name(k).split(":")[0] in self.looked_through:
                raise FeedError(f"feed {k!r}: the Switches of its tf.cond read the predicate behind this "
                                "pred_id Identity, not it, so the feed would not choose the branch; feed the "
                                "predicate itself")
        feeds = {self.tensor(k): v for k, v in (feed_dict or {}).items()}
        out = session.run([self.tensor(f) for f in fetches] + [self.node(t) for t in targets], feeds)
        return list(out[: len(fetches)])


def parse_graph_def(source: Any) -> Any:
    """A GraphDef message from a message, serialized bytes, a ``.pb`` / ``.pbtxt`` path, or what
    ``export_graph_def`` returned (its ``graph_def``: a round trip needs no unwrapping)."""
    p = protos.pb()
    if isinstance(source, ExportedGraphDef):
        source = source.graph_def
    if isinstance(source, p.graph_pb2.GraphDef):
        return source
    gd = p.graph_pb2.GraphDef()
    if isinstance(source, (bytes, bytearray)):
        return _parsed(gd, bytes(source), "the GraphDef bytes", text=False)
    if not isinstance(source, (str, os.PathLike)):
        raise ArgumentError("import_graph_def takes a GraphDef, its bytes, a path or an export_graph_def result, "
                            f"got {type(source).__name__}")
    where = file_path(source, "import_graph_def", "graph_def")
    path = Path(where)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SerializationError(f"cannot read a GraphDef from {where!r}: {e}") from None
    return _parsed(gd, data, where, text=path.suffix in (".pbtxt", ".txt"))


def _parsed(gd: Any, data: bytes, where: str, text: bool) -> Any:
    """``gd`` filled from ``data`` (the binary wire format, or protobuf text). Why the catch-all: the
    protobuf library's errors (``DecodeError``, ``ParseError``, a bad UTF-8 byte, deep nesting) name
    nothing of the user's; a file that is not a GraphDef is one ``SerializationError`` naming it."""
    from google.protobuf import text_format
    from google.protobuf.message import DecodeError

    try:
        if text:
            with warnings.catch_warnings():  # (protobuf's own DeprecationWarning for an escape like "\k")
                warnings.simplefilter("ignore", DeprecationWarning)
                text_format.Parse(data.decode("utf-8"), gd)
        else:
            gd.ParseFromString(data)
    except (DecodeError, text_format.ParseError, ValueError, RecursionError, RuntimeError) as e:
        raise SerializationError(f"{where}: not a valid GraphDef ({type(e).__name__}: {e})") from None
    return gd


def unsupported_ops(gd: Any) -> dict[str, list[str]]:
    """Op name -> the nodes that use it, for every op of ``gd`` that has no import rule (the nodes of
    its Saver and summaries aside: the import leaves them out, ``left_out``), the bodies of the functions its nodes
    call included (a node there is named ``<function>/<node>``; a function no node calls is not
    imported, as TensorFlow imports it whatever its ops: ``import_functions.called``)."""
    bad: dict[str, list[str]] = {}
    dropped = leaving.left_out(gd)
    for nd in gd.node:
        if nd.op not in IMPORT_RULES and nd.name not in dropped and nd.op not in pipeline.BATCH_RULES:
            bad.setdefault(nd.op, []).append(nd.name)
    for f in import_functions.called(gd):
        for nd in f.node_def:
            if nd.op not in IMPORT_RULES:
                bad.setdefault(nd.op, []).append(f"{f.signature.name}/{nd.name}")
    return bad


def import_graph_def(graph_def: Any, graph: Optional[Graph] = None, prefix: str = "") -> ImportedGraph:
    """Import a TensorFlow v1 GraphDef (message, bytes, a ``.pb`` / ``.pbtxt`` path, or an
    ``export_graph_def`` result) into ``graph``
    (a new Graph by default). Returns an ``ImportedGraph`` that maps TensorFlow names to Turnout
    tensors. Raises ``UnsupportedError`` listing every op without an import rule (see
    ``turnout.graphdef.SUPPORTED_OPS``); needs the ``tf`` extra (``pip install 'turnout[tf]'``).
    """
    if graph is not None and not isinstance(graph, Graph):
        raise ArgumentError(f"import_graph_def: graph must be a tn.Graph or None, got {type(graph).__name__}")
    if not isinstance(prefix, str):
        raise ArgumentError(f"import_graph_def: prefix must be a string, got {type(prefix).__name__} {prefix!r:.60}")
    check_node_name(prefix, "import_graph_def (prefix)")  # it begins every imported node's name
    gd = parse_graph_def(graph_def)
    try:
        return _import(gd, graph, prefix)
    except TurnoutError as e:
        raise _in_file(e, graph_def) from e.__cause__
    except MALFORMED as e:
        # a field of a well-formed message that holds what no TensorFlow writes (an attr of the wrong
        # kind, an input that names nothing, a size out of range): a Turnout error, never the raw one
        raise _in_file(GraphBuildError(f"the GraphDef is malformed: {type(e).__name__}: {e}"), graph_def) from None


def _in_file(e: TurnoutError, source: Any) -> TurnoutError:
    """``e`` with the file it was found in named first, when the GraphDef came from a path, as every
    reader's errors name their file (the type is kept: it is the same mistake, now with its file)."""
    if isinstance(source, (str, os.PathLike)) and e.args and isinstance(e.args[0], str):
        e.args = (f"{os.fsdecode(os.fspath(source))}: {e.args[0]}", *e.args[1:])
    return e


def _import(gd: Any, graph: Optional[Graph], prefix: str) -> ImportedGraph:
    """``import_graph_def`` of a parsed message, less its Saver's, summaries' and input pipeline's
    nodes (``left_out``), its get-next nodes made placeholders (``input_pipeline``)."""
    dropped = leaving.left_out(gd)
    summaries = leaving.summary_values(gd)
    batches = pipeline.batches(gd, dropped)
    if dropped or batches:
        gd = _kept(gd, dropped)
    imported = _import_kept(gd, graph, prefix)
    imported.left_out = dropped
    imported.summaries = summaries
    imported.batches = batches
    return imported


def _kept(gd: Any, dropped: dict[str, str]) -> Any:
    """``gd`` without the ``dropped`` nodes and the control edges from them (a group that ran the
    iterator's initializer), each get-next node without its inputs (``input_pipeline.batch_node``)."""
    nodes = {nd.name: nd for nd in gd.node}
    kept = type(gd)()
    kept.CopyFrom(gd)
    del kept.node[:]
    for nd in gd.node:
        if nd.name in dropped:
            continue
        if nd.op in pipeline.GET_NEXT_OPS:
            kept.node.add().CopyFrom(pipeline.batch_node(nd, nodes, dropped))
            continue
        copy = kept.node.add()
        copy.CopyFrom(nd)
        if any(i.startswith("^") and i[1:] in dropped for i in nd.input):
            del copy.input[:]
            copy.input.extend(i for i in nd.input if not (i.startswith("^") and i[1:] in dropped))
    return kept


def _import_kept(gd: Any, graph: Optional[Graph], prefix: str) -> ImportedGraph:
    bad = unsupported_ops(gd)
    if bad:
        lines = [f"  {op}: {len(ns)} node(s), e.g. {ns[0]!r}" for op, ns in sorted(bad.items())]
        raise UnsupportedError("the GraphDef uses ops Turnout cannot import:\n" + "\n".join(lines)
                               + "\n(the supported ops are listed in turnout.graphdef.SUPPORTED_OPS)")
    nodes = {nd.name: nd for nd in gd.node}
    if len(nodes) != len(gd.node):
        raise GraphBuildError("the GraphDef has two nodes with the same name")
    # every device annotation is read before anything is built, so a bad one fails the import at once;
    # a partial one is merged into the device scope the import runs under (``tf_device``)
    scope = graph._devices[-1] if graph is not None and graph._devices else None
    devices = {nd.name: tf_device(nd.device, f'{nd.op} node "{nd.name}"', scope) for nd in gd.node
               if nd.device}
    flows = FlowAnalysis(nodes)
    library = import_functions.library(gd)
    # A loop variable TensorFlow relaxed (shape_invariants) shows only when its back edge does not
    # fit the shape it entered with: the import then starts again with that Merge relaxed. Into a
    # graph the caller gave, the tries go to scratch graphs, so the caller's graph gets one import.
    loops = any(nd.op in ("NextIteration", "RefNextIteration") for nd in gd.node)
    relaxed: dict[str, list[Any]] = {}
    for _ in range(8 * len(nodes) + 1):
        try:
            if graph is not None and loops:
                _import_once(nodes, flows, Graph(), prefix, relaxed, devices, library)
                return _import_once(nodes, flows, graph, prefix, relaxed, devices, library)
            return _import_once(nodes, flows, Graph() if graph is None else graph, prefix, relaxed, devices,
                                library)
        except _Relax as r:
            relaxed.update(r.shapes)
    raise GraphBuildError("the loop variables' shapes did not settle")  # (each try relaxes a shape: unreachable)


class _Relax(Exception):
    """Loop Merges whose back edges do not fit the shape they entered with, and their relaxed shapes."""

    def __init__(self, shapes: dict[str, list[Any]]) -> None:
        super().__init__(sorted(shapes))
        self.shapes = shapes


def _import_once(nodes: dict[str, Any], flows: FlowAnalysis, g: Graph, prefix: str,
                 relaxed: dict[str, list[Any]], devices: dict[str, Optional[str]],
                 library: dict[str, Any]) -> ImportedGraph:
    """One import of the NodeDefs into ``g``, with the loop Merges of ``relaxed`` relaxed, each node on
    the Turnout device of its NodeDef's annotation (``devices``), calling the functions of ``library``."""
    from turnout import shapes as sh

    ctx = ImportContext(g, nodes, flows, prefix)
    ctx.relaxed, ctx.library = relaxed, library
    made = import_nodes(ctx, nodes, order(nodes, ctx.flows), devices, ChainMap(pipeline.BATCH_RULES, IMPORT_RULES))
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
    _colocate(g, nodes, made)
    _follow_resources(made)
    counts = dict(Counter(nd.op for nd in nodes.values()))
    return ImportedGraph(g, dict(ctx.values), dict(ctx.control), counts, frozenset(ctx.looked_through))


def _follow_resources(made: dict[str, list[Node]]) -> None:
    """TensorFlow's placer puts an op that takes a resource or a ref with the op that made it, and an
    annotation of the op that disagrees is ignored (it logs "Ignoring device specification"): an
    optimizer's update scoped to another device than its Variable runs where the Variable is. Turnout
    ties them too, but refuses two scopes in one tie; so such an annotation is imported as the device
    TensorFlow used, the maker's (and exported so)."""
    from turnout.devices.names import canonical
    from turnout.devices.placement import RESOURCE_USERS, resource_creator

    for built in made.values():
        for n in built:
            if n.op not in RESOURCE_USERS or n.device is None or not isinstance(n.raw_inputs[0], Tensor):
                continue
            maker = resource_creator(n.raw_inputs[0])
            if maker is not None and maker.device is not None and canonical(maker.device) != canonical(n.device):
                n.device = maker.device


def _colocate(g: Graph, nodes: dict[str, Any], made: dict[str, list[Node]]) -> None:
    """TensorFlow's colocation attrs (``_class: ["loc:@w"]``, which ``colocate_with`` and the optimizers'
    slots write) as Turnout colocation: each node a NodeDef became is placed with the first node each
    named NodeDef became, every entry of the attr tying (so the named nodes share a device too, as
    TensorFlow's placer groups them); an entry naming a node that built nothing (a folded constant)
    ties nothing."""
    for name, built in made.items():
        names = colocation_targets(protos.attr(nodes[name], "_class", []) or [])
        firsts = [made[t][0] for t in dict.fromkeys(names) if made.get(t)]
        for n in built:
            targets = tuple(t.id for t in firsts if t is not n)
            if targets:
                g.colocation[n.id] = targets
