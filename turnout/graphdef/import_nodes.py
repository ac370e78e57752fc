"""The import of a set of NodeDefs, node by node in a topological order: what ``import_graph_def``
does for a GraphDef's nodes and the functional control-flow rules (``import_functions``) do for a
function's body, each NodeDef through its rule of ``IMPORT_RULES``.

Why a module of its own: the importer (the GraphDef's top level: Saver nodes, devices, shape
relaxation, colocation) and the rules that import a function's body call it both, and the rules
must not import the importer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.errors import GraphBuildError, TurnoutError
from turnout.frames import kahn_order
from turnout.graph import BACK_EDGE, Node
from turnout.graphdef.arity import check_input_types, check_inputs
from turnout.graphdef.flows import FlowAnalysis
from turnout.graphdef.import_context import REF_OPS, ImportContext, Ref, Rule
from turnout.graphdef.import_rules import IMPORT_RULES


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


def import_nodes(ctx: ImportContext, nodes: dict[str, Any], names: list[str], devices: Mapping[str, Any],
                 rules: Mapping[str, Rule] = IMPORT_RULES) -> dict[str, list[Node]]:
    """Import NodeDefs ``names`` of ``nodes`` (in that order) through their ``rules`` into ``ctx``,
    each on the Turnout device of its annotation (``devices``); returns the Turnout nodes each rule
    built. A rule's error names the node it came from; a field no TensorFlow writes is a
    GraphBuildError."""
    made: dict[str, list[Node]] = {}  # TF node name -> the Turnout nodes its rule built
    for name in names:
        nd = nodes[name]
        ctx.node, ctx.created, ctx.device = nd, [], None
        check_inputs(nd, len(ctx.data_inputs(nd)))
        ins = [_input(ctx, nodes, nd, t) for t in ctx.data_inputs(nd)]
        if nd.op not in REF_OPS:  # a ref read as a value: the Variable's value where this op runs (on the
            # Variable's device, by the colocation of resource ops; TensorFlow sends the value to the op)
            ins = [ctx.create("ReadVariable", [v.handle], v.attrs, suffix=f"read{k}").outputs[0]
                   if isinstance(v, Ref) else v for k, v in enumerate(ins)]
        # (a TensorArray's flow carries the array here, not TensorFlow's float scalar)
        check_input_types(nd, [None if ctx.flows.label(t) is not None else v
                               for t, v in zip(ctx.data_inputs(nd), ins, strict=True)])
        first, ctx.device = len(ctx.created), devices.get(name)
        try:
            outs = rules[nd.op](ctx, nd, ins)
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
        made[name] = ctx.created[first:]
    return made


def _stack_of(nodes: dict[str, Any], nd: Any) -> str:
    t = nd.input[0].split(":")[0]
    while nodes[t].op != "StackV2" and nodes[t].input:
        t = nodes[t].input[0].split(":")[0]
    return t


def order(nodes: dict[str, Any], flows: FlowAnalysis) -> list[str]:
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
    out = kahn_order(list(nodes), deps.__getitem__, str)
    if len(out) != len(nodes):
        stuck = sorted(set(nodes) - set(out))[:5]
        raise GraphBuildError(f"the GraphDef has a cycle that is not a loop back edge (through {stuck})")
    return out


__all__ = ["MALFORMED", "import_nodes", "order"]
