"""Looking at graphs: ``pretty(graph)`` as text with frames as nested blocks, ``to_dot(graph)`` as Graphviz.

Why frames as blocks: a primitive graph read as a flat list of nodes hides its loops. The frame of a
node (``turnout.frames.static_frames``) is what decides which tag its values carry, so both views
group nodes by static frame, nested as the frames nest, and mark the loop back edges
(``NextIteration -> Merge``) that close each cycle. ``to_dot`` can also paint a run: given the
reference interpreter's trace, nodes that fired live are filled and nodes that fired only dead (the
untaken side of a conditional, the last test of a loop's body) are grey and dashed. A partitioned graph
(``turnout.devices``) has its own views: ``pretty_partitions`` and ``partitions_to_dot`` show one block
or cluster per device, frames nested inside, and the Send -> Recv pairs between them.

Both work on graphs that fail validation (the frames are then left out, with the reason), because that
is when one most needs to look. Only text is produced: rendering DOT needs the Graphviz ``dot`` tool,
which Turnout does not require.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from turnout import shapes as sh
from turnout.arguments import checked
from turnout.errors import ArgumentError, ValidationError
from turnout.frames import Frame, static_frames
from turnout.graph import Graph, Node, Tensor, TensorSpec

__all__ = ["partitions_to_dot", "pretty", "pretty_partitions", "to_dot"]

_ARRAY_ELEMENTS_SHOWN = 4
_ATTR_CHARS = 40


# ---- the frame tree, shared by both views -------------------------------------------------------------
@dataclass
class _Block:
    """One frame: its nodes and child frames, in order of their first node."""

    path: Frame
    parallel_iterations: int = 1
    items: list[Node | _Block] = field(default_factory=list)
    first: int = 1 << 62


def _frame_tree(graph: Graph) -> tuple[_Block, str | None]:
    """The root block with nested frame blocks; on an invalid graph, one flat block and the reason."""
    root = _Block(())
    try:
        fa = static_frames(graph)
    except ValidationError as e:
        root.items = list(graph.nodes)
        return root, str(e)
    blocks: dict[Frame, _Block] = {(): root}

    def block(path: Frame) -> _Block:
        if path not in blocks:
            b = blocks[path] = _Block(path, fa.frames[path].parallel_iterations)
            block(path[:-1]).items.append(b)
        return blocks[path]

    for n in graph.nodes:
        path = fa.node_frame[n.id]
        block(path).items.append(n)
        for k in range(len(path) + 1):
            blocks[path[:k]].first = min(blocks[path[:k]].first, n.id)
    for b in blocks.values():
        b.items.sort(key=lambda x: x.id if isinstance(x, Node) else x.first)
    return root, None


def _frame_title(b: _Block) -> str:
    return f'frame "{b.path[-1]}" (parallel_iterations={b.parallel_iterations})'


# ---- text ------------------------------------------------------------------------------------------------
def _fmt_spec(s: TensorSpec) -> str:
    out = f"{s.dtype.name}{sh.fmt(s.shape)}"
    if s.elem_dtype is not None:
        out += f"<{s.elem_dtype.name}{sh.fmt(s.elem_shape)}>"
    return out


def _fmt_value(v: Any) -> str:
    if isinstance(v, np.ndarray):
        if v.size <= _ARRAY_ELEMENTS_SHOWN:
            return np.array2string(v, separator=", ") if v.ndim else repr(v.item())
        return f"<{v.dtype}{list(v.shape)}>"
    text = repr(v)
    return text if len(text) <= _ATTR_CHARS else text[: _ATTR_CHARS - 3] + "..."


#: attrs left out of the summary because the line shows them already (keyed by primitive).
_SHOWN_ELSEWHERE: dict[str, frozenset[str]] = {
    "Const": frozenset({"dtype"}),
    "Enter": frozenset({"frame_name", "parallel_iterations"}),
    "Placeholder": frozenset({"dtype", "shape"}),
}


def _attr_summary(n: Node) -> str:
    skip = _SHOWN_ELSEWHERE.get(n.op, frozenset())
    parts = []
    for k in sorted(n.attrs):
        if k in skip or (n.op == "Enter" and k == "is_constant" and not n.attrs[k]):
            continue
        parts.append("constant" if n.op == "Enter" and k == "is_constant" else f"{k}={_fmt_value(n.attrs[k])}")
    return f" [{', '.join(parts)}]" if parts else ""


def _input_ref(n: Node, t: Any) -> str:
    if not isinstance(t, Tensor):
        return "BACK_EDGE?"  # a back-edge slot not bound yet
    ref = t.name if t.index else t.node.name
    return f"{ref} (back edge)" if n.op == "Merge" and t.node.op == "NextIteration" else ref


def _node_line(n: Node) -> str:
    args = [_input_ref(n, t) for t in n.raw_inputs] + [f"^{c.name}" for c in n.control_inputs]
    outs = [_fmt_spec(t.spec) for t in n.outputs]
    typ = "()" if not outs else outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
    device = f" @{n.device}" if n.device else ""
    return f"{n.name} = {n.op}({', '.join(args)}){_attr_summary(n)} : {typ}{device}"


@checked
def pretty(graph: Graph) -> str:
    """The graph as text: one line per node, ``name = Op(inputs) [attrs] : dtype[shape]``, with each
    loop frame a nested ``frame "name" (parallel_iterations=N) { ... }`` block. ``^x`` is a control
    input on ``x``; a Merge input marked ``(back edge)`` comes from the loop's NextIteration."""
    root, problem = _frame_tree(graph)
    lines = [f"# frames not shown: {problem}"] if problem else []

    def emit(b: _Block, depth: int) -> None:
        pad = "  " * depth
        for item in b.items:
            if isinstance(item, Node):
                lines.append(pad + _node_line(item))
            else:
                lines.append(f"{pad}{_frame_title(item)} {{")
                emit(item, depth + 1)
                lines.append(pad + "}")

    emit(root, 0)
    return "\n".join(lines) + "\n"


# ---- Graphviz -----------------------------------------------------------------------------------------------
#: Node shapes of the control-flow primitives, so a loop's anatomy is visible at a glance.
_DOT_SHAPES: dict[str, str] = {
    "Switch": "triangle",
    "Merge": "invtriangle",
    "Enter": "trapezium",
    "Exit": "invtrapezium",
    "NextIteration": "cds",
    "LoopCond": "diamond",
    "Send": "house",
    "Recv": "invhouse",
}
_LIVE_STYLE = 'style="filled", fillcolor="palegreen"'
_DEAD_STYLE = 'style="dashed", color="grey55", fontcolor="grey55"'


def _q(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _firings(trace: Any) -> dict[str, tuple[int, int]]:
    """node name -> (live firings, dead firings), from a Trace, a list of events or of dicts."""
    events: Iterable[Any] = getattr(trace, "events", trace)
    if not isinstance(events, Iterable):
        raise ArgumentError(f"to_dot: trace must be a run's trace or a list of events, got {trace!r}")
    counts: dict[str, list[int]] = {}
    for e in events:
        try:
            name, dead = (e["node"], e["dead"]) if isinstance(e, dict) else (e.node, e.dead)
        except (KeyError, AttributeError):
            raise ArgumentError(f"to_dot: trace holds {e!r}, not an event with node and dead") from None
        counts.setdefault(name, [0, 0])[1 if dead else 0] += 1
    return {k: (v[0], v[1]) for k, v in counts.items()}


@checked
def to_dot(graph: Graph, trace: Any = None) -> str:
    """Graphviz DOT text: one ``subgraph cluster_k`` per loop frame (nested as the frames nest),
    data edges solid, back edges (NextIteration -> Merge) dashed, control edges dotted.

    ``trace``: the reference interpreter's trace (``RunResult.trace``, or a list of events with
    ``node`` and ``dead``). Nodes that fired live are filled; nodes that fired only dead are grey and
    dashed; each fired node's label says how often it fired live and dead.
    """
    lines = ["digraph turnout {", '  node [shape=box, fontname="Helvetica"];']
    lines += _dot_body(graph, "n", 0, _firings(trace) if trace is not None else {}, iter(range(1 << 30)))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_body(graph: Graph, prefix: str, depth: int, fired: dict[str, tuple[int, int]], clusters: Any) -> list[str]:
    """The node, cluster and edge statements of one graph; node ids are ``prefix`` + node id."""
    root, problem = _frame_tree(graph)
    lines = []
    if problem:
        lines.append(f"  // frames not shown: {problem.replace(chr(10), ' ')}")

    def node_stmt(n: Node, pad: str) -> str:
        label, style = f"{n.name}\n{n.op}", ""
        if n.name in fired:
            live, dead = fired[n.name]
            label += f"\nlive x{live}, dead x{dead}"
            style = ", " + (_LIVE_STYLE if live else _DEAD_STYLE)
        return f"{pad}{prefix}{n.id} [label={_q(label)}, shape={_DOT_SHAPES.get(n.op, 'box')}{style}];"

    def emit(b: _Block, level: int) -> None:
        pad = "  " * (level + 1)
        for item in b.items:
            if isinstance(item, Node):
                lines.append(node_stmt(item, pad))
            else:
                lines.append(f"{pad}subgraph cluster_{next(clusters)} {{")
                lines.append(f'{pad}  label={_q(_frame_title(item))}; style="rounded";')
                emit(item, level + 1)
                lines.append(pad + "}")

    emit(root, depth)
    pad = "  " * (depth + 1)
    for n in graph.nodes:
        for slot, t in enumerate(n.raw_inputs):
            if not isinstance(t, Tensor):
                continue
            style = ', style="dashed", constraint=false' if n.op == "Merge" and t.node.op == "NextIteration" else ""
            lines.append(f'{pad}{prefix}{t.node.id} -> {prefix}{n.id} [label="{t.index}:{slot}"{style}];')
        for c in n.control_inputs:
            lines.append(f'{pad}{prefix}{c.id} -> {prefix}{n.id} [style="dotted", arrowhead="odot"];')
    return lines


# ---- partitions (turnout.devices) -------------------------------------------------------------------------
def pretty_partitions(parted: Any) -> str:
    """A partitioned graph (``turnout.devices.partition``) as text: one ``device "cpu:0" { ... }`` block per
    partition, its loop frames nested inside, then the Send -> Recv pairs with their frames and credits."""
    lines = []
    for part in parted.partitions.values():
        lines.append(f"device {part.short!r} {{")
        lines += ["  " + line.removesuffix(f" @{part.device}") for line in pretty(part.graph).splitlines()]
        lines.append("}")
    lines.append("transfers {")
    for t in parted.transfers:
        frame = "/".join(t.frame) or "root"
        lines.append(f"  {t.send.name} @{_short(t.src_device)} -> {t.recv.name} @{_short(t.dst_device)}  "
                     f"[frame {frame}, credit {t.credit}{', control' if t.control else ''}]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def partitions_to_dot(parted: Any, trace: Any = None) -> str:
    """Graphviz DOT of a partitioned graph: one cluster per device with its loop frames nested inside,
    and a bold red edge from each Send to its Recv. ``trace``: a partitioned run's trace (per device)."""
    lines = ["digraph turnout_partitions {", '  node [shape=box, fontname="Helvetica"]; compound=true;']
    clusters = iter(range(1 << 30))
    tracks = getattr(trace, "tracks", {}) if trace is not None else {}
    prefixes: dict[int, str] = {}
    for k, (d, part) in enumerate(parted.partitions.items()):
        prefixes[id(part.graph)] = f"d{k}n"
        lines.append(f"  subgraph cluster_{next(clusters)} {{")
        lines.append(f'    label={_q("device " + part.short)}; style="bold"; color="steelblue";')
        fired = _firings(tracks[d]) if d in tracks else {}
        lines += ["  " + x for x in _dot_body(part.graph, f"d{k}n", 1, fired, clusters)]
        lines.append("  }")
    for t in parted.transfers:
        src = prefixes[id(t.send.graph)] + str(t.send.id)
        dst = prefixes[id(t.recv.graph)] + str(t.recv.id)
        lines.append(f'  {src} -> {dst} [color="red", penwidth=2, style="bold", label={_q(t.edge)}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _short(device: str) -> str:
    from turnout.devices.names import parse

    return parse(device).short


def frame_summary(graph: Graph) -> str:
    """The graph's loop frames (nested as they nest) with how many nodes each holds, how many conds and
    how many stack pushes: the shape of a program at a glance, shorter than ``pretty``. Gradient loops
    appear as frames of their own (the examples' tutorials print it)."""
    fa = static_frames(graph)
    count = Counter(fa.node_frame.values())
    conds = Counter(fa.node_frame[n.id] for n in graph.nodes if n.name.endswith("/switch_pred"))
    stacks = Counter(fa.node_frame[n.id] for n in graph.nodes if n.op == "StackPush")
    lines = [f"root: {count[()]} nodes, {conds[()]} conds"]
    for f in sorted(fa.frames, key=lambda f: (len(f), f)):
        if f:
            extra = f", {stacks[f]} stack pushes" if stacks[f] else ""
            lines.append(f"{'  ' * len(f)}frame {f[-1]!r}: {count[f]} nodes, {conds[f]} conds{extra}")
    return "\n".join(lines)
