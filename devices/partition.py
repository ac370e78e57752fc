"""Partitioning: one graph per device, cut at device boundaries into Send/Recv pairs, with control loops.

The pass, in the paper's terms (Sec. 4.4):

* Every edge whose ends sit on different devices becomes ``Send -> Recv``. A Send fires even when its
  value is dead and the Recv hands on the dead bit, so deadness crosses devices exactly as values do.
  The rendezvous key is ``(edge, tag)``: a tag already names the frame instance and the iteration, so
  every partition computes the same key without coordination. A control edge becomes a *control* Send
  (no data input, it sends its control inputs' deadness) and a Recv the consumer takes as control input.
* A loop frame whose nodes sit on several devices gets a **control loop** on every one of those devices:
  ``Enter -> Merge(enter, next) -> Switch(merge, pred) -> NextIteration(switch:1)``. The predicate is the
  frame's ``LoopCond``, local on its own device and received per iteration elsewhere. There is no
  control Exit: a false predicate makes the NextIteration dead and the device's loop ends. Nested frames
  feed the outer control Merge into the inner control Enter; the outermost reads a dummy constant.
  Every Recv inside the frame takes a control edge from its device's control Merge, so it fires once
  per iteration, at the right tag, with no data input.
* Two refinements beyond TensorFlow's rule make this deadlock-free under any placement: control loops
  are built on *every* device holding nodes of the frame (senders too, not only receivers: a device whose
  loop nodes read only loop constants would otherwise never start iteration 1), and every ``Enter`` gets
  one copy per device that consumes it, so the entered value crosses devices once per loop entry, in the
  parent frame, and each device's frame instance counts its own Enters.
* Each Send carries a *credit*: the ``parallel_iterations`` of its frame (1 in the root frame). The
  rendezvous lets at most that many messages of one edge and frame instance wait unconsumed, so a sender
  cannot run arbitrarily far ahead and memory stays bounded.

Feeds become a Placeholder on each device that reads the fed tensor (feeds are root-frame tensors).
Each partition is a well-formed graph on its own (``check_partitions`` validates them and the pairing of
every Send with one Recv).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout.arguments import checked
from turnout.devices.names import parse
from turnout.devices.placement import Placement
from turnout.errors import PartitionError, describe_node
from turnout.frames import Frame, FrameAnalysis, kahn_order, same_iteration_preds, static_frames
from turnout.graph import BACK_EDGE, Graph, Node, Tensor, TensorSpec, ancestors
from turnout.validate import validate


@dataclass
class Transfer:
    """One Send/Recv pair: an edge (a tensor, or a control edge) cut between two devices."""

    edge: str
    src_device: str
    dst_device: str
    frame: Frame
    control: bool
    send: Node
    recv: Node
    credit: int


@dataclass
class ControlLoop:
    """The control loop of one frame on one device."""

    frame: Frame
    device: str
    enter: Node
    merge: Node
    switch: Optional[Node] = None
    next: Optional[Node] = None
    pred: Optional[Tensor] = None


@dataclass
class Partition:
    """The graph of one device, and where the original nodes went."""

    device: str
    graph: Graph
    nodes: dict[int, Node] = field(default_factory=dict)  # original node id -> its copy here
    feeds: dict[tuple[int, int], Node] = field(default_factory=dict)  # fed tensor -> Placeholder here
    control_loops: dict[Frame, ControlLoop] = field(default_factory=dict)
    #: Recv node id -> ids of this partition's Sends whose tokens may travel, through other devices and in
    #: the same iteration, to that Recv (``recv_waits``): what an executor that fuses nodes must not merge
    waits: dict[int, frozenset[int]] = field(default_factory=dict)
    #: the (node id, output) of this partition's tensors that the run fetches
    fetches: list[tuple[int, int]] = field(default_factory=list)

    @property
    def short(self) -> str:
        """The device's short name (``cpu:1`` for a local device), for pictures, traces and reports."""
        return parse(self.device).short


@dataclass
class Partitioned:
    """The result of ``partition``: the partitions, the Send/Recv pairs, and where each fetch lives."""

    graph: Graph
    placement: Placement
    partitions: dict[str, Partition]
    transfers: list[Transfer]
    fetches: list[tuple[str, Tensor]]  # per original fetch: (device, tensor in that partition)
    frames: dict[Frame, set[str]]  # every frame of the pruned graph -> the devices holding its nodes

    def partition_of(self, device: str) -> Partition:
        """The partition of ``device`` (any spelling of its name: ``"cpu:1"`` or the full one)."""
        return self.partitions[parse(device).name]

    def control_loops(self) -> list[ControlLoop]:
        """Every partition's control loops, one per spanning frame and device."""
        return [c for p in self.partitions.values() for c in p.control_loops.values()]


@checked
def partition(graph: Graph, placement: Placement, fetches: Sequence[Tensor],
              fed: Collection[tuple[int, int]] = ()) -> Partitioned:
    """Cut the part of ``graph`` the fetches need (fed tensors cut the walk) into one graph per device.

    The passes, in order (as TensorFlow's ``graph_partition.cc`` does it): decide where each Enter is
    copied and which devices hold each frame (``_enter_devices``, ``_frame_hosts``, ``_spanning``,
    ``_loop_conds``); open a control loop per spanning frame and device (``_open_control_loops``); copy
    every node onto its device, cutting edges between devices into Send/Recv pairs
    (``_copy_nodes``, ``_Cut.transfer``); close the control loops on their predicates
    (``_close_control_loops``); record what each Recv waits for (``recv_waits``) and where each fetch
    lives (``_place_fetches``).

    Raises PartitionError for a loop spanning devices with no (or several) LoopCond, or for a fetch
    that is not produced anywhere.
    """
    if placement.graph is not graph:
        raise PartitionError("the placement was computed for another graph")
    fa = validate(graph, fetches)
    fed = set(fed)
    keep = ancestors(list(fetches), fed)
    order = [n for n in fa.order if n.id in keep]
    dev = placement.device_of
    consumers = _consumers(order, keep)
    enter_devs = _enter_devices(order, consumers, dev)
    hosts = _frame_hosts(order, fa.node_frame, enter_devs, dev, consumers, fed)
    spanning = _spanning(hosts)
    loop_conds = _loop_conds(fa, spanning, keep)
    all_devs = sorted({d for ds in hosts.values() for d in ds} | {dev[n.id] for n in order}
                      | {dev[t.node.id] for t in fetches}, key=placement.devices.index)
    parts = {d: Partition(d, Graph()) for d in all_devs}
    cut = _Cut(fa, placement, fed, parts, Partitioned(graph, placement, parts, [], [],
                                                       {f: set(ds) for f, ds in hosts.items()}))
    _open_control_loops(cut, spanning)
    _copy_nodes(cut, order, enter_devs)
    _close_control_loops(cut, spanning, loop_conds)
    for d, waits in recv_waits(cut.result).items():
        parts[d].waits = waits
    _place_fetches(cut, fetches)
    return cut.result


# ---- where things go: Enter copies, the devices of each frame, the frames that span devices ----------------
def _consumers(order: list[Node], keep: Collection[int]) -> dict[int, list[Node]]:
    """Node id -> the kept nodes that read it (by a data or a control edge), in topological order."""
    consumers: dict[int, list[Node]] = {n.id: [] for n in order}
    for n in order:
        for t in n.raw_inputs:
            if isinstance(t, Tensor) and t.node.id in keep:
                consumers[t.node.id].append(n)
        for c in n.control_inputs:
            consumers[c.id].append(n)
    return consumers


def _enter_devices(order: list[Node], consumers: dict[int, list[Node]], dev: dict[int, str]) -> dict[int, list[str]]:
    """Enter id -> the devices that get a copy of it: every device that consumes it, else its own.

    Why a copy per consuming device: the entered value then crosses devices once per loop entry, in
    the parent frame, instead of once per iteration, and each device's frame instance counts its own
    Enters. An Enter feeding an inner Enter goes where the inner one's copies go (hence the reverse
    walk)."""
    enter_devs: dict[int, list[str]] = {}
    for n in reversed(order):
        if n.op == "Enter":
            ds = {d for c in consumers[n.id] for d in (enter_devs[c.id] if c.op == "Enter" else [dev[c.id]])}
            enter_devs[n.id] = sorted(ds) or [dev[n.id]]
    return enter_devs


def _devices_of(n: Node, enter_devs: dict[int, list[str]], dev: dict[int, str]) -> list[str]:
    """The devices that hold a copy of ``n``: its Enter copies, or its placement."""
    return enter_devs[n.id] if n.op == "Enter" else [dev[n.id]]


def _frame_hosts(order: list[Node], nf: dict[int, Frame], enter_devs: dict[int, list[str]], dev: dict[int, str],
                 consumers: dict[int, list[Node]], fed: set[tuple[int, int]]) -> dict[Frame, set[str]]:
    """Frame -> the devices holding its nodes. An Enter also counts in its parent frame and an Exit in
    the frame it leaves (both ends of a loop boundary touch both frames), and a device that reads a
    fed tensor holds the root frame (its feed Placeholder lives there)."""
    hosts: dict[Frame, set[str]] = {(): set()}
    for n in order:
        frames = {nf[n.id]}
        if n.op == "Enter":
            frames.add(nf[n.id][:-1])
        if n.op == "Exit":
            frames.add(nf[n.inputs[0].node.id])
        for f in frames:
            hosts.setdefault(f, set()).update(_devices_of(n, enter_devs, dev))
    for key in fed:
        for c in consumers.get(key[0], []):
            hosts[()].add(dev[c.id])
    return hosts


def _spanning(hosts: dict[Frame, set[str]]) -> dict[Frame, set[str]]:
    """The loop frames whose nodes, nested frames included, sit on more than one device, with those
    devices: each gets a control loop on every one of them. Why every one, senders too: a device whose
    loop nodes read only loop constants would otherwise never start iteration 1."""
    spanning: dict[Frame, set[str]] = {}
    for f in hosts:
        if f:
            spanning[f] = set().union(*(hosts[g] for g in hosts if g[: len(f)] == f))
    return {f: ds for f, ds in spanning.items() if len(ds) > 1}


def _loop_conds(fa: FrameAnalysis, spanning: dict[Frame, set[str]], keep: Collection[int]) -> dict[Frame, Node]:
    """The LoopCond of each spanning frame: the predicate its control loops follow (exactly one)."""
    loop_conds: dict[Frame, Node] = {}
    for f in spanning:
        lcs = [n for n in fa.frames[f].loop_cond if n.id in keep]
        if len(lcs) != 1:
            raise PartitionError(
                f"loop frame {'/'.join(f)!r} spans devices {sorted(parse(d).short for d in spanning[f])} but has "
                f"{len(lcs)} LoopCond nodes; a control loop needs exactly one predicate to follow"
            )
        loop_conds[f] = lcs[0]
    return loop_conds


# ---- building the partitions ----------------------------------------------------------------------------------
@dataclass
class _Cut:
    """What the building passes share: the frame analysis, the partitions being built, and the Recvs
    made so far (one per cut edge and destination device, made on first use)."""

    fa: FrameAnalysis
    placement: Placement
    fed: set[tuple[int, int]]
    parts: dict[str, Partition]
    result: Partitioned
    recvs: dict[tuple[str, str], Node] = field(default_factory=dict)

    def make(self, d: str, op: str, inputs: Sequence[Any], attrs: dict[str, Any], name: str,
             control: Sequence[Node] = (), specs: Optional[list[TensorSpec]] = None,
             source: Optional[str] = None) -> Node:
        """A new node in the partition of device ``d``."""
        g = self.parts[d].graph
        with g.device(d):
            node = g.create_node(op, inputs, attrs, name=name, control_inputs=control, specs=specs)
        node.source = source
        return node

    def fed_placeholder(self, n: Node) -> bool:
        """A fed Placeholder does not run: its value stands for it, so a control edge from it is met."""
        return n.op == "Placeholder" and (n.id, 0) in self.fed

    def local(self, t: Tensor, d: str) -> Tensor:
        """Original tensor ``t`` as seen on device ``d``: a local output, an Enter copy, a feed or a Recv."""
        key = (t.node.id, t.index)
        if key in self.fed:
            p = self.parts[d]
            if key not in p.feeds:
                p.feeds[key] = self.make(d, "Placeholder", [], {"dtype": t.dtype.name, "shape": None if t.shape is None
                                                                else list(t.shape)}, f"_feed/{t.name}", specs=[t.spec])
            return p.feeds[key].outputs[0]
        if t.node.id in self.parts[d].nodes:
            return self.parts[d].nodes[t.node.id].outputs[t.index]
        return self.transfer(t.node, t.index, d).outputs[0]

    def local_control(self, c: Node, d: str) -> Node:
        """Original node ``c``'s control output as seen on device ``d``: its copy there, or a control Recv."""
        if c.id in self.parts[d].nodes:
            return self.parts[d].nodes[c.id]
        return self.transfer(c, None, d)

    def transfer(self, src_node: Node, index: Optional[int], d: str) -> Node:
        """The Recv on device ``d`` of output ``index`` of ``src_node`` (``None``: its control output),
        with its Send on ``src_node``'s device. The Send's credit is its frame's ``parallel_iterations``
        (1 in the root frame); a Recv inside a spanning frame fires once per iteration of the device's
        control loop, by a control edge from its Merge."""
        what = src_node.name if index is None else f"{src_node.name}:{index}"
        key = (what if index is not None else "^" + what, d)
        if key in self.recvs:
            return self.recvs[key]
        s = self.placement.device_of[src_node.id]
        f = self.fa.node_frame[src_node.id]
        edge = f"{'^' if index is None else ''}{what}->{parse(d).short}"
        credit = self.fa.frames[f].parallel_iterations if f else 1
        base = {"edge": edge, "src_device": s, "dst_device": d, "credit": credit}
        local_src = self.parts[s].nodes[src_node.id]
        if index is None:
            send = self.make(s, "Send", [], {**base, "control": True}, f"_send/{edge}", control=[local_src],
                             source=src_node.source)
            spec = TensorSpec(dt.bool_, ())
        else:
            send = self.make(s, "Send", [local_src.outputs[index]], {**base, "control": False}, f"_send/{edge}",
                             source=src_node.source)
            spec = src_node.outputs[index].spec
        ctrl = [self.parts[d].control_loops[f].merge] if f else []
        recv = self.make(d, "Recv", [], _recv_attrs(base, index is None, spec), f"_recv/{edge}", control=ctrl,
                         specs=[spec], source=src_node.source)
        self.result.transfers.append(Transfer(edge, s, d, f, index is None, send, recv, credit))
        self.recvs[key] = recv
        return recv


def _recv_attrs(base: dict[str, Any], control: bool, spec: TensorSpec) -> dict[str, Any]:
    """A Recv's attributes: the edge, its devices and credit, and the type of what it receives."""
    attrs = {**base, "control": control, "dtype": spec.dtype.name,
             "shape": None if spec.shape is None else list(spec.shape)}
    if spec.elem_dtype is not None:
        attrs["elem_dtype"] = spec.elem_dtype.name
    if spec.elem_shape is not None:
        attrs["elem_shape"] = list(spec.elem_shape)
    return attrs


def _open_control_loops(cut: _Cut, spanning: dict[Frame, set[str]]) -> None:
    """Each spanning frame's control loop on each of its devices, outer frames first: its Enter and
    Merge now, so the Recvs made while copying can hang off the Merge; the rest once the LoopConds
    exist (``_close_control_loops``). A nested frame's Enter reads its parent's control Merge, the
    outermost a dummy constant. The Enter carries the source line of the frame's first Enter: an
    interpreter names a runaway loop by an Enter of the partition, and this may be its only one."""
    for f in sorted(spanning, key=len):
        for d in sorted(spanning[f], key=cut.placement.devices.index):
            outer = f[:-1]
            if outer:
                src = cut.parts[d].control_loops[outer].merge.outputs[0]
            else:
                src = cut.make(d, "Const", [], {"value": np.asarray(0.0, np.float32), "dtype": "float32"},
                               f"_cloop/{f[-1]}/dummy", specs=[TensorSpec(dt.float32, ())]).outputs[0]
            pi = cut.fa.frames[f].parallel_iterations
            first = min(cut.fa.frames[f].enters, key=lambda n: n.id, default=None)
            enter = cut.make(d, "Enter", [src], {"frame_name": f[-1], "is_constant": False, "parallel_iterations": pi},
                             f"_cloop/{f[-1]}/enter", specs=[TensorSpec(dt.float32, ())],
                             source=None if first is None else first.source)
            merge = cut.make(d, "Merge", [enter.outputs[0], BACK_EDGE], {}, f"_cloop/{f[-1]}/merge",
                             specs=[TensorSpec(dt.float32, ()), TensorSpec(dt.int32, ())])
            cut.parts[d].control_loops[f] = ControlLoop(f, d, enter, merge)


def _copy_nodes(cut: _Cut, order: list[Node], enter_devs: dict[int, list[str]]) -> None:
    """Copy every node onto its device(s), in topological order, reading other devices' values through
    Recvs. A Merge's back edge is left open while copying (its NextIteration comes later in the order)
    and closed at the end, where the NextIteration must sit on the Merge's device."""
    back_edges: list[tuple[str, Node, int, Node]] = []
    for n in order:
        if cut.fed_placeholder(n):
            continue
        for d in _devices_of(n, enter_devs, cut.placement.device_of):
            ins: list[Any] = []
            for slot, t in enumerate(n.raw_inputs):
                assert isinstance(t, Tensor)
                if n.op == "Merge" and t.node.op == "NextIteration":
                    ins.append(BACK_EDGE)
                    back_edges.append((d, n, slot, t.node))
                else:
                    ins.append(cut.local(t, d))
            ctrl = [cut.local_control(c, d) for c in n.control_inputs if not cut.fed_placeholder(c)]
            copy = cut.make(d, n.op, ins, dict(n.attrs), n.name, control=ctrl, specs=[o.spec for o in n.outputs],
                            source=n.source)
            cut.parts[d].nodes[n.id] = copy
    for d, merge, slot, nxt in back_edges:
        nodes = cut.parts[d].nodes
        if nxt.id not in nodes:
            raise PartitionError(
                f"{describe_node(nxt)} is not on the device of the Merge it feeds, {describe_node(merge)}")
        nodes[merge.id].close_back_edge(nodes[nxt.id].outputs[0], slot)


def _close_control_loops(cut: _Cut, spanning: dict[Frame, set[str]], loop_conds: dict[Frame, Node]) -> None:
    """Finish each control loop: ``Switch(merge, pred) -> NextIteration(switch:1)`` back into the Merge.
    The predicate is the frame's LoopCond, local on its device and received per iteration elsewhere;
    there is no control Exit: a false predicate makes the NextIteration dead and the loop ends."""
    for f in sorted(spanning, key=len):
        lc = loop_conds[f]
        for d in sorted(spanning[f], key=cut.placement.devices.index):
            cl = cut.parts[d].control_loops[f]
            pred = cut.local(lc.outputs[0], d)
            name = f"_cloop/{f[-1]}"
            cl.switch = cut.make(d, "Switch", [cl.merge.outputs[0], pred], {}, f"{name}/switch",
                                 specs=[TensorSpec(dt.float32, ()), TensorSpec(dt.float32, ())])
            cl.next = cut.make(d, "NextIteration", [cl.switch.outputs[1]], {}, f"{name}/next",
                               specs=[TensorSpec(dt.float32, ())])
            cl.merge.close_back_edge(cl.next.outputs[0], 1)
            cl.pred = pred


def _place_fetches(cut: _Cut, fetches: Sequence[Tensor]) -> None:
    """Where each fetch lives: its producer's copy on the producer's device, or that device's feed
    Placeholder for a fed fetch."""
    result = cut.result
    for t in fetches:
        d = cut.placement.device_of[t.node.id]
        part = cut.parts[d]
        if (t.node.id, t.index) in cut.fed:
            result.fetches.append((d, cut.local(t, d)))
            part.fetches.append((result.fetches[-1][1].node.id, result.fetches[-1][1].index))
        elif t.node.id not in part.nodes:
            raise PartitionError(f"fetch {t.name} was not placed on any partition")
        else:
            result.fetches.append((d, part.nodes[t.node.id].outputs[t.index]))
            part.fetches.append((part.nodes[t.node.id].id, t.index))


def recv_waits(p: Partitioned) -> dict[str, dict[int, frozenset[int]]]:
    """Per device: each Recv's node id -> the ids of the Sends *of the same partition* from which a token
    can reach it within one iteration, through the other partitions.

    Why: inside one partition a Send and a Recv are not connected, yet the Recv may wait for what the
    Send sent (device A sends x to B, B computes, A receives the result). An executor that runs a set
    of nodes as one step (``compiled_partition``) must not put that Send's producer and that Recv's
    consumer in one step, or the step would wait for itself. Edges are data and control edges without
    a Merge's back edges (a NextIteration's token belongs to the next iteration), plus each Send to its
    Recv. Should that graph have a cycle, every Recv is said to wait on every Send of its partition.

    A loop's Exit also waits for the NextIterations of its frame, in every partition: what leaves a
    loop after its first iteration came round its back edges, so without those edges a Send before a
    loop and a Recv after it, both in the parent frame, looked unconnected (a gradient's forward value
    sent to another task, which runs the loop and sends back the gradient: the compiled partition fused
    the forward op with the op that receives the gradient, and the two tasks waited for each other;
    found by the ``dev`` profile of ``tests/test_compiled_partition.py``)."""
    nodes = [(d, n) for d, part in p.partitions.items() for n in part.graph.nodes]
    send_of = {(tr.dst_device, tr.recv.id): (tr.src_device, tr.send) for tr in p.transfers}
    nexts: dict[Frame, list[tuple[str, Node]]] = {}  # a loop frame -> its NextIterations, every partition
    exit_frame: dict[tuple[str, int], Frame] = {}  # an Exit -> the frame it leaves
    for d, part in p.partitions.items():
        node_frame = static_frames(part.graph).node_frame
        for n in part.graph.nodes:
            if n.op == "NextIteration":
                nexts.setdefault(node_frame[n.id], []).append((d, n))
            elif n.op == "Exit":
                exit_frame[(d, n.id)] = node_frame[n.inputs[0].node.id]

    def preds(item: tuple[str, Node]) -> list[tuple[str, Node]]:
        d, n = item
        out = [(d, m) for m in same_iteration_preds(n)]
        if n.op == "Exit":
            out += nexts.get(exit_frame[(d, n.id)], [])
        return out + [send_of[(d, n.id)]] if (d, n.id) in send_of else out

    def key(item: tuple[str, Node]) -> tuple[str, int]:
        return item[0], item[1].id

    order = kahn_order(nodes, preds, key)
    acyclic = len(order) == len(nodes)
    sends = [(d, n.id) for d, n in nodes if n.op == "Send"]
    bit = {k: 1 << i for i, k in enumerate(sends)}
    reach: dict[tuple[str, int], int] = {}  # node -> the Sends that reach it (bitset)
    for item in order:
        r = 0
        for q in preds(item):
            r |= reach[key(q)] | bit.get(key(q), 0)
        reach[key(item)] = r
    result: dict[str, dict[int, frozenset[int]]] = {}
    for d, n in nodes:
        if n.op != "Recv":
            continue
        mine = frozenset(sid for (sd, sid) in sends if sd == d and (not acyclic or reach[(d, n.id)] & bit[(sd, sid)]))
        if mine:
            result.setdefault(d, {})[n.id] = mine
    return result


@checked
def check_partitions(p: Partitioned) -> None:
    """Partition well-formedness: each partition passes validation on its own , every Send
    has exactly one Recv with the same edge, on the other device, in the same frame, and the reverse."""
    sends: dict[str, tuple[str, Frame]] = {}
    recvs: dict[str, tuple[str, Frame]] = {}
    for d, part in p.partitions.items():
        fa = validate(part.graph)
        for n in part.graph.nodes:
            if n.op in ("Send", "Recv"):
                table = sends if n.op == "Send" else recvs
                edge = n.attrs["edge"]
                if edge in table:
                    raise PartitionError(f"two {n.op} nodes for edge {edge!r}")
                want = n.attrs["src_device"] if n.op == "Send" else n.attrs["dst_device"]
                if want != d:
                    raise PartitionError(f"{describe_node(n)} is on {d}, its attrs say {want}")
                table[edge] = (d, fa.node_frame[n.id])
        static_frames(part.graph)
    if set(sends) != set(recvs):
        raise PartitionError(f"unpaired Send/Recv edges: {sorted(set(sends) ^ set(recvs))}")
    for edge, (d, f) in sends.items():
        rd, rf = recvs[edge]
        if rd == d or rf != f:
            raise PartitionError(f"edge {edge!r}: Send on {d} in {f}, Recv on {rd} in {rf}")
