"""Graph replace: the fetches as they would be if some tensors were others, by copying what lies between.

``replaced(fetches, {old: new})`` returns, for each fetch, a tensor that computes what the fetch
computes with every read of ``old`` made a read of ``new``: the nodes on a path from an ``old`` to
a fetch (through data or control edges) are copied, their copies reading ``new`` and each other's
outputs; every other node is shared. Nothing is edited (graphs are append-only), so the original
fetches still run as before.

Why: a run under a memory budget may swap a gradient built with stacks for one built to recompute
(``turnout.rebuild``); the values that depend on the gradient, an optimizer's updates and
the ``train_op`` that groups them, must then read the new gradient. TensorFlow's
``graph_editor.graph_replace`` does the same, for the same reason.

The law it relies on: a node's value depends only on its op, attrs and inputs (and, for the
Variable ops, on the Variable, which the copy reads and writes as the original does). So a copy
reading ``new`` gives what the original would give had ``old`` held ``new``'s value. ``Switch`` and
``Merge`` obey it too, deadness included (a dead input gives the same dead outputs), so a cond in the
root frame is copied like any other nodes: its copy is a cond of the same predicate and branches,
any of which may read ``new``, and it runs in whichever executor runs the original. A loop is a
cycle whose frame is named by its ``Enter`` nodes, so one node of it cannot be copied apart from the
rest: where the nodes between reach into a loop, the whole loop (its frame and the frames nested in
it) is copied under a frame name of its own, each ``Merge`` closing its back edge on the copy of its
``NextIteration``; what reads any output of a loop so copied is copied too, whether or not that
output depends on ``new`` (read from the original, the original loop would run beside its copy,
and a Variable update in its body twice). What is not a function of its inputs alone is refused
(``UnsupportedError`` naming the node and its source line): a stack op or a Variable's handle (a new
stack or Variable would not be the old one), a placeholder, a Send or Recv.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

from turnout import primitives
from turnout.errors import ArgumentError, UnsupportedError, describe_node
from turnout.graph import BACK_EDGE, Graph, Node, Tensor
from turnout.validate import frame_analysis

Key = tuple[int, int]

#: ops whose copy would not compute what the original does (module docstring): transfers, stacks,
#: Variable handles and placeholders
NOT_COPIED = primitives.TRANSFER | frozenset({"StackNew", "StackPush", "StackPop", "VarHandle", "Placeholder"})


def key(t: Tensor) -> Key:
    """A tensor's key: its node's id and its output index."""
    return (t.node.id, t.index)


def between(fetches: Sequence[Tensor], old: Mapping[Key, Tensor], copied: frozenset[int] = frozenset()) -> list[Node]:
    """The nodes on a path from a tensor of ``old`` (keys) to one of ``fetches``, in creation order
    (an order of their edges but a loop's back edges, which the walk forward follows too). A read of
    an ``old`` tensor is where a path starts; so is a control edge from a node that made one, and an
    edge from a node of ``copied`` (ids: the loops copied whole, ``closure``)."""
    makers = {k[0] for k in old}
    seen: dict[int, Node] = {}
    work = [t.node for t in fetches if key(t) not in old]
    while work:
        n = work.pop()
        if n.id in seen or n.id in makers:
            continue
        seen[n.id] = n
        work += [t.node for t in n.raw_inputs if isinstance(t, Tensor) and key(t) not in old]
        work += n.control_inputs
    consumers: dict[int, list[int]] = {}
    hit: set[int] = set()
    for n in seen.values():
        preds = [t.node.id for t in n.raw_inputs if isinstance(t, Tensor)] + [c.id for c in n.control_inputs]
        for p in preds:
            consumers.setdefault(p, []).append(n.id)
        if any(isinstance(t, Tensor) and key(t) in old for t in n.raw_inputs) or n.id in copied or \
                any(c.id in makers for c in n.control_inputs) or any(p in copied for p in preds):
            hit.add(n.id)
    front = list(hit)  # (forward from the reads of ``old``, a loop's back edges included)
    while front:
        for m in consumers.get(front.pop(), []):
            if m not in hit:
                hit.add(m)
                front.append(m)
    return [seen[i] for i in sorted(hit)]


def with_loops(nodes: list[Node]) -> tuple[list[Node], dict[str, str]]:
    """``nodes`` with every node of each loop one of them lies in (the outermost loop, whole, with
    its ``Exit`` nodes), in creation order; and a frame name for each such loop's copy, unused in the
    graph. A path into or out of a loop passes an ``Enter`` or an ``Exit``, so nodes with no
    control-flow primitive among them lie in the root frame."""
    if not any(n.op in primitives.CONTROL_FLOW for n in nodes):
        return nodes, {}
    g = nodes[0].graph
    frame = frame_analysis(g).node_frame

    def loop_of(n: Node) -> str | None:  # (the outermost loop an Exit leaves is its input's)
        f = frame[n.inputs[0].node.id if n.op == "Exit" else n.id]
        return f[0] if f else None

    tops = {top for top in map(loop_of, nodes) if top is not None}
    if not tops:
        return nodes, {}
    keep = {n.id: n for n in nodes} | {n.id: n for n in g.nodes if loop_of(n) in tops}
    used = {str(n.attrs["frame_name"]) for n in g.nodes if n.op == "Enter"}
    names: dict[str, str] = {}
    for top in sorted(tops):
        name, k = f"{top}_copy", 0
        while name in used:
            k += 1
            name = f"{top}_copy_{k}"
        used.add(name)
        names[top] = name
    return [keep[i] for i in sorted(keep)], names


def closure(fetches: Sequence[Tensor], old: Mapping[Key, Tensor]) -> tuple[list[Node], dict[str, str]]:
    """``between`` with its loops whole (``with_loops``), and again with what reads those loops'
    other nodes, until nothing is added. Why: a node that reads an ``Exit`` of a loop copied whole
    but not the replaced tensors would otherwise read the original loop, which then runs too: a
    Variable update in its body (which the copy runs as well) would be applied twice."""
    copied: frozenset[int] = frozenset()
    while True:
        nodes, frames = with_loops(between(fetches, old, copied))
        ids = frozenset(n.id for n in nodes)
        if ids <= copied:
            return nodes, frames
        copied = ids


def refusal(n: Node) -> Optional[str]:
    """Why node ``n`` cannot be copied (None: it can), in words for an error."""
    if n.op in NOT_COPIED:
        return f"{describe_node(n)} is a {n.op}, whose copy would not be the same {n.op.lower()}"
    return None


def replaced(fetches: Sequence[Tensor], old_to_new: Mapping[Tensor, Tensor], what: str = "graph_replace"
             ) -> list[Tensor]:
    """``fetches`` with each read of a key of ``old_to_new`` made a read of its value (module
    docstring): the nodes between them copied, named ``<what>/<name>``, on the same devices and with
    the same source lines. ``what`` also begins an error's message. Raises ``UnsupportedError``,
    naming the node, for a node it cannot copy, and ``ArgumentError`` for ``fetches`` or ``old_to_new``
    of the wrong kind (a name or a number where a tensor is due)."""
    _check_kinds(fetches, old_to_new, what)
    old = {key(o): n for o, n in old_to_new.items()}
    for o, t in old_to_new.items():
        if t.dtype != o.dtype or t.graph is not o.graph:
            raise UnsupportedError(f"{what}: {t.name} cannot stand for {o.name}: another dtype or graph")
    nodes, frames = closure(fetches, old)
    for n in nodes:
        why = refusal(n)
        if why is not None:
            raise UnsupportedError(f"{what}: cannot copy what reads the replaced tensors: {why}")
    copies: dict[int, Node] = {}
    made = {k[0]: v.node for k, v in old.items()}  # (a control edge from an old tensor's maker: the new one's)
    back: list[tuple[Node, int, Tensor]] = []  # a copied Merge's back edges: (copy, slot, original source)
    g: Optional[Graph] = nodes[0].graph if nodes else None

    def read(t: Tensor) -> Tensor:
        if key(t) in old:
            return old[key(t)]
        return copies[t.node.id].outputs[t.index] if t.node.id in copies else t

    for n in nodes:
        assert g is not None
        later = [i for i, t in enumerate(n.inputs) if n.op == "Merge" and t.node.id >= n.id]
        ins = [BACK_EDGE if i in later else read(t) for i, t in enumerate(n.inputs)]
        ctrl = [copies.get(c.id) or made.get(c.id) or c for c in n.control_inputs]
        attrs = dict(n.attrs)
        if n.op == "Enter" and attrs["frame_name"] in frames:
            attrs["frame_name"] = frames[attrs["frame_name"]]
        specs = [t.spec for t in n.outputs] if later else None  # (a Merge's, as its loop relaxed them)
        with g._in_context(None), g.control_dependencies(None), g._root_scope(), g._no_capture():
            c = g.create_node(n.op, ins, attrs, name=f"{what}/{n.name}", control_inputs=ctrl, specs=specs)
        back += [(c, i, n.inputs[i]) for i in later]
        c.device, c.source = n.device, n.source
        if n.id in g.gradient_of:
            g.gradient_of[c.id] = g.gradient_of[n.id]
        if n.id in g.colocation:
            g.colocation[c.id] = tuple(copies[i].id if i in copies else i for i in g.colocation[n.id])
        copies[n.id] = c
    for c, i, t in back:
        c.close_back_edge(read(t), i)
    return [read(t) for t in fetches]


def _check_kinds(fetches: object, old_to_new: object, what: str) -> None:
    """Refuse ``fetches`` that are not a list or tuple of tensors and an ``old_to_new`` that is not a
    mapping from tensors to tensors, naming the parameter. Why: each reached the user as Python's
    ``AttributeError`` from deep in the copy (``'str' object has no attribute 'node'``)."""
    if not isinstance(fetches, (list, tuple)):
        raise ArgumentError(f"{what}: fetches must be a list or tuple of tensors, got {type(fetches).__name__}")
    bad = next((f for f in fetches if not isinstance(f, Tensor)), None)
    if bad is not None:
        raise ArgumentError(f"{what}: fetches must be tensors, got {type(bad).__name__} {bad!r}")
    if not isinstance(old_to_new, Mapping):
        raise ArgumentError(f"{what}: old_to_new must be a mapping from tensors to tensors, got "
                            f"{type(old_to_new).__name__}")
    for o, n in old_to_new.items():
        if not isinstance(o, Tensor) or not isinstance(n, Tensor):
            raise ArgumentError(f"{what}: old_to_new must map tensors to tensors, got {type(o).__name__} {o!r} -> "
                                f"{type(n).__name__} {n!r}")


__all__ = ["NOT_COPIED", "between", "closure", "key", "refusal", "replaced", "with_loops"]
