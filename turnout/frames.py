"""Static frames: which loop frame every node belongs to, computed from the graph alone.

Why: the dataflow rules require all inputs of a node to carry the same tag, so statically all inputs
must come from the same frame ([W-Frame-Consistent]). The frame of a node is the frame of its outputs:
``Enter(frame F)`` moves into child frame F, ``Exit`` moves to the parent, every other node stays in
the frame of its inputs (a node without inputs is in the root frame ``()``). The same analysis gives
each frame's ``parallel_iterations`` and its Enter nodes, which the interpreters need.

Works on hand-built graphs (no builder metadata needed).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from turnout.arguments import checked
from turnout.errors import ValidationError, describe_node
from turnout.graph import Graph, Node, Tensor

T = TypeVar("T")

Frame = tuple[str, ...]


@dataclass
class FrameInfo:
    """Static facts about one frame (all instances of one loop)."""

    path: Frame
    parallel_iterations: int
    enters: list[Node] = field(default_factory=list)
    exits: list[Node] = field(default_factory=list)
    loop_cond: list[Node] = field(default_factory=list)


@dataclass
class FrameAnalysis:
    """What ``static_frames`` finds: the frame of every node (by node id), the static facts of every frame, and a
    topological order of the nodes that ignores the NextIteration -> Merge back edges."""

    node_frame: dict[int, Frame]
    frames: dict[Frame, FrameInfo]
    order: list[Node]  # a topological order ignoring NextIteration -> Merge back edges


def _is_back_edge(consumer: Node, t: Tensor) -> bool:
    return consumer.op == "Merge" and t.node.op == "NextIteration"


def same_iteration_preds(n: Node) -> list[Node]:
    """The nodes ``n`` waits for in the same iteration: its data and control inputs, without a Merge's
    back edge (a NextIteration's token belongs to the next iteration)."""
    preds = [t.node for t in n.raw_inputs if isinstance(t, Tensor) and not _is_back_edge(n, t)]
    return preds + list(n.control_inputs)


def node_id(n: Node) -> int:
    """A node's id: the ``key`` of ``kahn_order`` for the nodes of one graph."""
    return n.id


def kahn_order(items: Sequence[T], preds: Callable[[T], Iterable[T]], key: Callable[[T], Hashable]) -> list[T]:
    """Kahn's algorithm: ``items`` ordered so that each comes after its predecessors among ``items``
    (``preds``; predecessors outside ``items`` are ignored; ``key`` identifies an item, ``node_id`` for
    the nodes of one graph). Items on a cycle, or after one, are left out: a result shorter than
    ``items`` says there is a cycle."""
    keys = {key(n) for n in items}
    indeg = {key(n): 0 for n in items}
    succ: dict[Hashable, list[T]] = {key(n): [] for n in items}
    for n in items:
        for p in preds(n):
            if key(p) in keys:
                indeg[key(n)] += 1
                succ[key(p)].append(n)
    ready = [n for n in items if indeg[key(n)] == 0]
    order: list[T] = []
    while ready:
        n = ready.pop()
        order.append(n)
        for s in succ[key(n)]:
            indeg[key(s)] -= 1
            if indeg[key(s)] == 0:
                ready.append(s)
    return order


def topological_order(graph: Graph, nodes: list[Node] | None = None) -> list[Node]:
    """Kahn's algorithm over data and control edges, ignoring NextIteration -> Merge back edges.
    Raises [W-Cycle-Through-Next] naming a node on any other cycle."""
    nodes = graph.nodes if nodes is None else nodes
    order = kahn_order(nodes, same_iteration_preds, node_id)
    if len(order) != len(nodes):
        placed = {n.id for n in order}
        stuck = sorted((n for n in nodes if n.id not in placed), key=lambda n: n.id)
        raise ValidationError(
            f"the graph has a cycle that does not pass through a NextIteration -> Merge back edge; "
            f"{describe_node(stuck[0])} is on or after it",
            "W-Cycle-Through-Next", stuck[0],
        )
    return order


@checked
def static_frames(graph: Graph) -> FrameAnalysis:
    """Compute the frame of every node; raises ValidationError on inconsistent frames."""
    order = topological_order(graph)
    nf: dict[int, Frame] = {}
    frames: dict[Frame, FrameInfo] = {(): FrameInfo((), 1)}
    for n in order:
        srcs: list[tuple[str, Frame]] = []
        for t in n.raw_inputs:
            if isinstance(t, Tensor) and not _is_back_edge(n, t):
                srcs.append((t.name, nf[t.node.id]))
        for c in n.control_inputs:
            srcs.append((f"^{c.name}", nf[c.id]))
        distinct = {f for _, f in srcs}
        if len(distinct) > 1:
            desc = ", ".join(f"{name} in {_fmt(f)}" for name, f in srcs)
            raise ValidationError(
                f"{describe_node(n)} has inputs from different frames: {desc}", "W-Frame-Consistent", n
            )
        base: Frame = distinct.pop() if distinct else ()
        if n.op == "Enter":
            fname = n.attrs["frame_name"]
            f = (*base, fname)
            info = frames.get(f)
            pi = int(n.attrs.get("parallel_iterations", 10))
            if info is None:
                info = frames[f] = FrameInfo(f, pi)
            elif info.parallel_iterations != pi:
                raise ValidationError(
                    f"{describe_node(n)} enters frame {fname!r} with parallel_iterations={pi}, but another "
                    f"Enter of that frame says {info.parallel_iterations}", "W-Frame-Name", n,
                )
            info.enters.append(n)
            nf[n.id] = f
        elif n.op == "Exit":
            if not base:
                raise ValidationError(f"{describe_node(n)} is not inside any frame", "W-Exit-In-Frame", n)
            frames[base].exits.append(n)
            nf[n.id] = base[:-1]
        elif n.op == "NextIteration":
            if not base:
                raise ValidationError(f"{describe_node(n)} is not inside any frame", "W-Next-In-Frame", n)
            nf[n.id] = base
        else:
            if n.op == "LoopCond" and base:
                frames[base].loop_cond.append(n)
            nf[n.id] = base
    # back edges: a NextIteration must return to the frame of the Merge it feeds
    for n in graph.nodes:
        if n.op == "Merge":
            for t in n.raw_inputs:
                if isinstance(t, Tensor) and _is_back_edge(n, t) and nf[t.node.id] != nf[n.id]:
                    raise ValidationError(
                        f"{describe_node(n)} in {_fmt(nf[n.id])} has a back edge from {t.node.name} in "
                        f"{_fmt(nf[t.node.id])}; a NextIteration must return to its own frame",
                        "W-Frame-Name", n,
                    )
    return FrameAnalysis(nf, frames, order)


def _fmt(f: Frame) -> str:
    return "the root frame" if not f else "frame " + "/".join(repr(x) for x in f)
