"""Placement: which device runs each node.

Three sources decide, strongest first:

1. **Colocation constraints**, which are not optional: a ``NextIteration`` sits with the ``Merge`` it
   feeds (the back edge of a loop never crosses devices); an op on a resource (a Variable, a gradient
   stack) sits with the op that created the resource, so the resource's state lives on one device;
   ``tn.colocate_with`` scopes, which the gradient builder uses to put each backward op with its forward
   op. Constrained nodes form groups that are placed as one.
2. **Device scopes** (``tn.device``): a group takes the device its members ask for; two members asking
   for different devices is a conflict, reported with the nodes and the rule that ties them.
3. **Defaults** for groups nobody placed: a backward op built by ``tn.gradients`` goes with its forward
   op (TensorFlow's ``colocate_gradients_with_ops``, here a default rather than a constraint, so it never
   conflicts with a scope); any other op takes the device of its first data input (so a Switch follows
   its data, an Exit its value, an op its operands), else of its first control input, else the first
   device of the list.

``place`` also takes *soft requests* (node name -> device) that yield to constraints instead of
raising; the property tests use them to draw random placements of generated programs.

``allow_soft_placement=True`` (TensorFlow's option of that name, for graphs written for other
machines, such as an imported GraphDef) turns the two placement errors of device scopes into rules:

* **a colocation conflict** (members of one group scoped to different devices): the group takes the
  device of its earliest-built member that asked for one (the resource's maker, the loop's Merge, the
  op named in ``colocate_with``, when they asked), and the others yield, as TensorFlow's placer keeps
  the device of the node colocated *with*;
* **a device not among the session's devices**: like TensorFlow's, which keeps a request's job and
  task and drops its device type and index, the node goes to the first listed device of the same job
  and task (one of the same type first); when the list has none, the request is dropped and the node
  is placed by the defaults (rule 3), as if it had no scope.

A device name that cannot be parsed stays an error either way. ``Placement.why`` tells which nodes
yielded and why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional

from turnout.arguments import checked
from turnout.devices.names import DeviceSpec, canonical, parse
from turnout.errors import PlacementError, describe_node
from turnout.frames import topological_order
from turnout.graph import Graph, Node, Tensor

#: ops that read or write the resource their input 0 carries, and the ops that create resources
RESOURCE_USERS = frozenset({"ReadVariable", "AssignVariable", "AssignAddVariable", "AssignSubVariable",
                            "StackPush", "StackPop"})
RESOURCE_MAKERS = frozenset({"VarHandle", "StackNew"})
#: ops that forward a resource handle unchanged (input 0 to output 0)
_FORWARDERS = frozenset({"Identity", "Enter", "Exit", "Switch", "Merge", "NextIteration", "StopGradient"})


@dataclass
class Placement:
    """The device of every node of ``graph`` (canonical names), and why it is there."""

    graph: Graph
    devices: list[str]
    device_of: dict[int, str]
    reasons: dict[int, str] = field(default_factory=dict)

    def __getitem__(self, node: Node | Tensor | str) -> str:
        """The device of a node (or of a tensor's node, or of the node with this name)."""
        n = _as_node(self.graph, node)
        return self.device_of[n.id]

    def nodes_on(self, device: str | DeviceSpec) -> list[Node]:
        """The nodes placed on ``device``, in creation order."""
        d = canonical(device)
        return [n for n in self.graph.nodes if self.device_of.get(n.id) == d]

    def why(self, node: Node | Tensor | str) -> str:
        """The rule that put this node on its device."""
        return self.reasons[_as_node(self.graph, node).id]

    def describe(self) -> str:
        """One line per device: its nodes."""
        lines = []
        for d in self.devices:
            names = [n.name for n in self.nodes_on(d)]
            lines.append(f"{parse(d).short}: {', '.join(names) if names else '(nothing)'}")
        return "\n".join(lines)


def _as_node(graph: Graph, x: Node | Tensor | str) -> Node:
    if isinstance(x, Tensor):
        return x.node
    if isinstance(x, str):
        return graph.node(x)
    return x


def resource_creator(t: Tensor) -> Optional[Node]:
    """The VarHandle or StackNew a resource handle comes from, through Enter/Exit/Switch/Merge plumbing."""
    seen: set[int] = set()
    while t.node.id not in seen:
        seen.add(t.node.id)
        n = t.node
        if n.op in RESOURCE_MAKERS:
            return n
        if n.op not in _FORWARDERS or not n.raw_inputs or not isinstance(n.raw_inputs[0], Tensor):
            return None
        t = n.raw_inputs[0]
    return None


class _Groups:
    """Union-find over node ids, remembering the rules that joined each group."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.parent = {n.id: n.id for n in nodes}
        self.ties: dict[int, list[str]] = {}

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: Node, b: Node, why: str) -> None:
        if a.id not in self.parent or b.id not in self.parent:
            return
        ra, rb = self.find(a.id), self.find(b.id)
        ties = self.ties.pop(ra, []) + (self.ties.pop(rb, []) if rb != ra else [])
        root = min(ra, rb)
        self.parent[ra] = self.parent[rb] = root
        self.ties[root] = ties + [why]


def colocation_groups(graph: Graph, nodes: Sequence[Node]) -> _Groups:
    """The groups of nodes that must share a device, with the rules that tie them."""
    groups = _Groups(nodes)
    for n in nodes:
        if n.op == "Merge":
            for t in n.raw_inputs:
                if isinstance(t, Tensor) and t.node.op == "NextIteration":
                    groups.union(n, t.node, f"{t.node.name} is the NextIteration of loop Merge {n.name}")
        if n.op in RESOURCE_USERS and n.raw_inputs and isinstance(n.raw_inputs[0], Tensor):
            maker = resource_creator(n.raw_inputs[0])
            if maker is not None:
                groups.union(n, maker, f"{n.name} ({n.op}) uses the resource made by {maker.name} ({maker.op})")
        for target in graph.colocation.get(n.id, ()):
            groups.union(n, graph.nodes[target], f"{n.name} was built under colocate_with({graph.nodes[target].name})")
    return groups


def _order(graph: Graph) -> list[Node]:
    """A topological order (back edges ignored) in which every forward op comes before the backward ops
    of its gradient, so they can follow it; the plain order if that would make a cycle."""
    base = topological_order(graph)
    if not graph.gradient_of:
        return base
    pos = {n.id: k for k, n in enumerate(base)}
    succ: dict[int, list[int]] = {n.id: [] for n in base}
    indeg = dict.fromkeys(pos, 0)
    for n in base:
        preds = [t.node.id for t in n.raw_inputs if isinstance(t, Tensor)
                 and not (n.op == "Merge" and t.node.op == "NextIteration")]
        preds += [c.id for c in n.control_inputs]
        if n.id in graph.gradient_of:
            preds.append(graph.gradient_of[n.id])
        for p in preds:
            succ[p].append(n.id)
            indeg[n.id] += 1
    ready = sorted((i for i, d in indeg.items() if d == 0), key=pos.__getitem__, reverse=True)
    out: list[Node] = []
    while ready:
        i = ready.pop()
        out.append(graph.nodes[i])
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return out if len(out) == len(base) else base


@checked
def place(graph: Graph, devices: Sequence[str | DeviceSpec], requests: Optional[Mapping[str, str]] = None,
          allow_soft_placement: bool = False) -> Placement:
    """Place every node of ``graph`` on one of ``devices`` (see the module docstring for the rules).

    ``requests`` are soft: node name -> device, used for groups with no device scope, yielding to the
    colocation constraints. Raises PlacementError for an unknown device, a device scope naming a device
    not in ``devices``, or two nodes that must share a device but are scoped to different ones; with
    ``allow_soft_placement`` the last two are resolved by the rules of the module docstring instead
    (why: a graph written for another machine, or with TensorFlow's looser colocation, still runs).

    In three steps: what each colocation group asks for (``_asked``), the device of each group that
    asked (``_group_devices``), and every node in ``_order`` (a topological order that puts each
    forward op before its gradient's ops), a group that asked nothing following its first node's
    forward op, input or control input (``_assign``).
    """
    resolver = _Resolver(_device_list(devices), allow_soft_placement)
    groups = colocation_groups(graph, list(graph.nodes))
    hard, soft = _asked(graph, groups, requests, resolver)
    group_device = _group_devices(hard, soft, groups, resolver)
    device_of, reasons = _assign(graph, groups, group_device, resolver)
    return Placement(graph, resolver.devs, device_of, reasons)


class Placer:
    """A backend's placement of its graph (``place``), made once per graph version: a backend asks at
    every run, and a graph that grew since (an op fetch's proxy, a gradient built after the session)
    is placed again. Every partitioned backend places through one, so they place alike."""

    def __init__(self, graph: Graph, devices: Sequence[str | DeviceSpec], requests: Optional[Mapping[str, str]] = None,
                 allow_soft_placement: bool = False) -> None:
        self.graph = graph
        self.args = (list(devices), dict(requests or {}), allow_soft_placement)
        self._made: Optional[tuple[int, Placement, frozenset[str]]] = None

    def placed(self) -> tuple[Placement, frozenset[str]]:
        """The placement of the graph as it is now, and the devices it puts a node on (a run asks for
        both: one check of the version, no pass over the graph)."""
        if self._made is None or self._made[0] != self.graph.version:
            placement = place(self.graph, *self.args)
            self._made = (self.graph.version, placement, frozenset(placement.device_of.values()))
        return self._made[1], self._made[2]

    def __call__(self) -> Placement:
        """The placement of the graph as it is now."""
        return self.placed()[0]

    def used(self) -> frozenset[str]:
        """The devices the placement puts a node on."""
        return self.placed()[1]


def _device_list(devices: Sequence[str | DeviceSpec]) -> list[str]:
    """The canonical names of ``devices``, in order; none, or one listed twice, is a PlacementError."""
    if not devices:
        raise PlacementError("place needs at least one device")
    devs: list[str] = []
    for d in devices:
        c = canonical(d)
        if c in devs:
            raise PlacementError(f"device {d!r} is listed twice (as {c})")
        devs.append(c)
    return devs


class _Resolver:
    """A device name a node asks for, resolved to one of the listed devices, and why each node's own
    request gave way (``yielded``, with ``allow_soft_placement``)."""

    def __init__(self, devs: list[str], soft: bool) -> None:
        self.devs, self.soft = devs, soft
        self.yielded: dict[int, str] = {}  # node id -> why its own request gave way

    def __call__(self, name: str, node: Node, what: str) -> Optional[str]:
        try:
            c = canonical(name)
        except PlacementError as e:
            raise PlacementError(f"{describe_node(node)} {what} {name!r}: {e}") from None
        if c in self.devs:
            return c
        if not self.soft:
            raise PlacementError(
                f"{describe_node(node)} {what} {name!r} ({c}), which is not one of the devices "
                f"{[parse(d).short for d in self.devs]} (allow_soft_placement=True places it on a device of its "
                "task, or by the default rules)"
            )
        alt = _soft_device(c, self.devs)
        self.yielded[node.id] = (f"asked for {parse(c).short}, which is not one of the devices: "
                                 + (f"placed on {parse(alt).short}, the first listed device of its task" if alt
                                    else "no listed device is of its task, so the request is dropped")
                                 + " (allow_soft_placement)")
        return alt


def _asked(graph: Graph, groups: _Groups, requests: Optional[Mapping[str, str]], resolve: _Resolver
           ) -> tuple[dict[int, list[tuple[Node, str]]], dict[int, str]]:
    """Per colocation group (its root): the devices its nodes' scopes name, in build order (``hard``),
    and the first request one of its nodes makes (``soft``)."""
    hard: dict[int, list[tuple[Node, str]]] = {}
    soft: dict[int, str] = {}
    for n in graph.nodes:
        root = groups.find(n.id)
        if n.device is not None:
            d = resolve(n.device, n, "is scoped to device")
            if d is not None:
                hard.setdefault(root, []).append((n, d))
        if requests and n.name in requests and root not in soft:
            d = resolve(requests[n.name], n, "is requested on device")
            if d is not None:
                soft[root] = d
    return hard, soft


def _group_devices(hard: dict[int, list[tuple[Node, str]]], soft: dict[int, str], groups: _Groups,
                   resolve: _Resolver) -> dict[int, tuple[str, str]]:
    """The device (and why) of each group that asked for one: its first scoped node's, a conflict being
    a PlacementError unless soft placement lets the others yield; else its request."""
    group_device: dict[int, tuple[str, str]] = {}
    for root, asked in hard.items():
        distinct = sorted({d for _, d in asked})
        n0, d0 = asked[0]  # (nodes are visited in the order they were built)
        if len(distinct) > 1:
            ties = "; ".join(groups.ties.get(root, [])) or "they are colocated"
            if not resolve.soft:
                who = ", ".join(f"{describe_node(n)} on {parse(d).short}" for n, d in asked)
                raise PlacementError(f"conflicting placement: {who} must share one device, because {ties} "
                                     "(allow_soft_placement=True resolves it by the colocation rule)")
            for n, d in asked:
                if d != d0:
                    resolve.yielded[n.id] = (f"asked for {parse(d).short}, yields to {n0.name} on "
                                             f"{parse(d0).short} because {ties} (allow_soft_placement)")
        group_device[root] = (d0, f"device scope of {n0.name}")
    for root, d in soft.items():
        group_device.setdefault(root, (d, "requested"))
    return group_device


def _assign(graph: Graph, groups: _Groups, group_device: dict[int, tuple[str, str]], resolve: _Resolver
            ) -> tuple[dict[int, str], dict[int, str]]:
    """Every node's device and the reason, in ``_order``: a group that asked for nothing takes the
    device of its first node's forward op, else its first placed input, else its first control input,
    else the first listed device."""
    device_of: dict[int, str] = {}
    reasons: dict[int, str] = {}
    for n in _order(graph):
        root = groups.find(n.id)
        if root not in group_device:
            d, why = resolve.devs[0], "default device"
            fwd = graph.gradient_of.get(n.id)
            data = [t for t in n.raw_inputs if isinstance(t, Tensor) and t.node.id in device_of]
            if fwd is not None and fwd in device_of:
                d, why = device_of[fwd], f"with its forward op {graph.nodes[fwd].name}"
            elif data:
                d, why = device_of[data[0].node.id], f"follows its input {data[0].name}"
            elif n.control_inputs and n.control_inputs[0].id in device_of:
                d, why = device_of[n.control_inputs[0].id], f"follows its control input {n.control_inputs[0].name}"
            group_device[root] = (d, why)
        d, why = group_device[root]
        device_of[n.id] = d
        tied = groups.ties.get(root, [])
        own = why in (f"device scope of {n.name}", f"follows its input {n.raw_inputs[0].name}"
                      if n.raw_inputs and isinstance(n.raw_inputs[0], Tensor) else "")
        reasons[n.id] = f"{why}; colocated ({'; '.join(tied)})" if tied and not own else why
        if n.id in resolve.yielded:
            reasons[n.id] = f"{resolve.yielded[n.id]}; {reasons[n.id]}"
    return device_of, reasons


def _soft_device(name: str, devices: Sequence[str]) -> Optional[str]:
    """Where ``allow_soft_placement`` puts a request for ``name``, a device not in ``devices``: the first
    listed device of the same job and task, one of the same type first (TensorFlow keeps a soft
    request's job and task and drops its type and index); None when the task has none listed."""
    want = parse(name)
    same_task = [d for d in devices if (parse(d).job, parse(d).task) == (want.job, want.task)]
    same_type = [d for d in same_task if parse(d).type == want.type]
    pick = same_type or same_task
    return pick[0] if pick else None
