"""The cut: a program's region tree cut into the steps a run executes, on one device or many.

Why one cut for every runner: the fast backend raises a graph to structured regions
(``fast.functionalize``) and lowers each region to ``jax.lax`` control flow. What the host must do
between compiled calls is then decided by two facts alone, the device of every node and which loops
push or pop gradient stacks, so one builder makes the steps of every run that is not one call:

* ``Segment``: items on one device, compiled as one function committed to that device
  (``fast.segment.SegmentFn``). It reads the keys its items need from the host's environment and
  gives back the keys something outside it reads (another step, a region's control, a fetch).
* A *driven* segment: one loop on one device that pushes or pops gradient stacks, outside any loop
  the host drives, run chunk by chunk (``fast.driven.DrivenLoop``) so that its full stack chunks can
  leave the device between calls. It carries its stacks' pushes and pops per iteration.
* ``HostCond``: a conditional spanning devices; the host reads its predicate and runs the steps of
  the taken branch.
* ``HostLoop``: a loop spanning devices; the host runs its header steps, reads the predicate, and
  runs the body steps, iteration after iteration.

A region whose nodes all sit on one device is one item of one segment (a loop there stays one
``lax.while_loop``); only a region that spans devices is taken apart, one level at a time. A graph on
one device is the one-device case (``one_device``): its root items in program order, cut before and
after each driven loop — the fast backend's staged path. The partitioned executor's per-device tiers
cut a placed program with the same builder.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from turnout.fast.regions import CondRegion, Item, Key, Program, WhileRegion, item_nodes, key, walk
from turnout.fast.state_keys import stack_key_of
from turnout.graph import Node

#: the device name of every node of a graph cut for one device (``one_device``)
ONE = "one device"


@dataclass
class Traffic:
    """What one call of a segment can do to the stacks of its device: stack key -> the most values
    it pushes (or pops), ``None`` where there is no bound (a push inside a loop compiled whole)."""

    push: dict[str, Optional[int]] = field(default_factory=dict)
    pop: dict[str, Optional[int]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.push or self.pop)


def traffic(items: list[Item], held: Collection[str] = ()) -> Traffic:
    """The ``Traffic`` of a segment's items (stacks not ``held``): the counts of ``iteration_counts``,
    unbounded (``None``) for a stack a loop among the items pushes or pops, since its trip count is
    known only on the device."""
    push, pop, unbounded = iteration_counts(items, held)
    return Traffic({k: None if k in unbounded else n for k, n in push.items()},
                   {k: None if k in unbounded else n for k, n in pop.items()})


@dataclass
class Segment:
    """Items of one scope placed on one device, compiled as one function committed to ``device``."""

    device: str
    items: list[Item]
    reads: list[Key] = field(default_factory=list)
    writes: list[Key] = field(default_factory=list)
    #: the writes that are fetched: they leave with a live flag (a fetch inside a compiled cond)
    fetched: list[Key] = field(default_factory=list)
    index: int = 0
    #: the segment's one loop where it is driven (run chunk by chunk so that its stacks can move
    #: between calls), else None
    driven: Optional[WhileRegion] = None
    #: a driven loop's stacks: stack key -> its pushes (pops) per iteration known from the graph
    #: (``iteration_counts``), and the stacks a nested loop pushes or pops, measured as chunks run
    push: dict[str, int] = field(default_factory=dict)
    pop: dict[str, int] = field(default_factory=dict)
    measured: set[str] = field(default_factory=set)
    #: what one call can do to its device's stacks (``traffic``), None where it touches none: the host
    #: moves chunks around the calls that do
    traffic: Optional[Traffic] = None
    #: the segment's compiled function (``SegmentFn``, or a driven loop's ``DrivenLoop``), made on first use
    fn: Any = None
    #: the device as traces and errors name it (``schedule``'s ``label``; none on one device)
    label: str = ""

    def describe(self) -> str:
        """A short label for traces and errors: the device and the first node's name, or the loop
        a driven segment runs in chunks."""
        where = f" on {self.label}" if self.label else ""
        if self.driven is not None:
            return f"segment {self.index}{where}: driven {self.driven.describe()}"
        first = item_nodes(self.items[0])[0].name if self.items else "(empty)"
        more = f" (+{len(self.items) - 1} more)" if len(self.items) > 1 else ""
        return f"segment {self.index}{where}: {first}{more}"


@dataclass
class HostCond:
    """A conditional whose nodes span devices: the host reads its predicate, then runs a branch."""

    region: CondRegion
    branches: dict[bool, list[Step]]


@dataclass
class HostLoop:
    """A loop whose nodes span devices, driven by the host one iteration at a time."""

    region: WhileRegion
    header: list[Step]
    body: list[Step]
    exit_side: list[Step]
    devices: list[str]
    home: str  # the device of the loop's Merges (and its NextIterations): loop variables live there
    #: the stacks the loop (or a loop nested in it) pushes: when it ends, their pushes are over
    pushes: set[str] = field(default_factory=set)


Step = Union[Segment, HostCond, HostLoop]


@dataclass
class Schedule:
    """The steps of the root scope, and the counts the run statistics report."""

    steps: list[Step]
    segments: list[Segment]
    host_loops: list[HostLoop]
    host_conds: list[HostCond]
    compiled_loops: int  # loops compiled whole inside one segment


def item_devices(it: Item, device_of: dict[int, str]) -> set[str]:
    """The devices an item's nodes sit on."""
    return {device_of[n.id] for n in item_nodes(it)}


def _stack_ops(nodes: list[Node], held: Collection[str]) -> list[tuple[str, str]]:
    """(op, stack key) of the StackPush / StackPop nodes among ``nodes`` whose stack is not held."""
    return [(n.op, k) for n in nodes if n.op in ("StackPush", "StackPop")
            and (k := stack_key_of(n)) is not None and k not in held]


def iteration_counts(items: list[Item], held: Collection[str] = ()) -> tuple[dict[str, int], dict[str, int], set[str]]:
    """What one run of ``items`` (a loop body's iteration, or a segment's call) does to its stacks:
    (pushes per stack, pops per stack, the stacks a loop among them pushes or pops). Why a cond counts
    its larger branch: only one runs. Why a loop counts nothing but names its stacks: its trip count is
    known only on the device, so a driven loop's chunk measures what one iteration of a nested loop did
    (``stacks.chunk_loop``) and ``traffic`` calls it unbounded."""
    push: dict[str, int] = {}
    pop: dict[str, int] = {}
    measured: set[str] = set()
    for it in items:
        if isinstance(it, Node):
            for op, k in _stack_ops([it], held):
                into = push if op == "StackPush" else pop
                into[k] = into.get(k, 0) + 1
        elif isinstance(it, CondRegion):
            (push_f, pop_f, m_f), (push_t, pop_t, m_t) = (iteration_counts(it.branches[b], held) for b in (False, True))
            for into, f, t in ((push, push_f, push_t), (pop, pop_f, pop_t)):
                for k in set(f) | set(t):
                    into[k] = into.get(k, 0) + max(f.get(k, 0), t.get(k, 0))
            measured |= m_f | m_t
        else:
            for op, k in _stack_ops(it.nodes, held):
                (push if op == "StackPush" else pop).setdefault(k, 0)
                measured.add(k)
    return push, pop, measured


class _Builder:
    def __init__(self, program: Program, device_of: dict[int, str], fed: set[int], held: Collection[str],
                 label: Callable[[str], str]) -> None:
        self.program = program
        self.label = label
        self.device_of = device_of
        self.fed = fed
        self.held = held
        self.segments: list[Segment] = []
        self.host_loops: list[HostLoop] = []
        self.host_conds: list[HostCond] = []
        self.compiled_loops = 0
        # key -> ids of the nodes that read it (data and control inputs, every depth): a segment gives
        # back what a node outside it reads
        self.readers: dict[Key, set[int]] = {}
        for it in walk(program.items):
            for n in item_nodes(it):
                for t in n.inputs:
                    self.readers.setdefault(key(t), set()).add(n.id)
                for c in n.control_inputs:
                    self.readers.setdefault((c.id, -1), set()).add(n.id)
        self.fetch = set(program.fetch_keys)
        self.host_loop_depth = 0  # > 0 while building the steps of a loop the host drives

    def scope(self, items: list[Item]) -> list[Step]:
        """The steps of one scope: spanning regions become host steps, the rest per-device segments."""
        steps: list[Step] = []
        for dev, its in self._cluster(items):
            steps.append(self._host(its[0]) if dev is None else self._segment(dev, its))
        return steps

    def _drives(self, it: Item) -> bool:
        """A loop on one device that pushes or pops gradient stacks (not held ones), outside the loops
        the host drives, is a segment of its own, run chunk by chunk (``Segment.driven``). Inside a
        host-driven loop it stays compiled whole: driving it would make each of the outer loop's
        iterations wait for the host."""
        return (self.host_loop_depth == 0 and isinstance(it, WhileRegion)
                and bool(_stack_ops(it.nodes, self.held)))

    def _order(self, items: list[Item], devs: list[Optional[str]]) -> list[int]:
        """A dependency order of ``items`` that keeps going on one device while it can. With one
        device there is nothing to keep together: the program order."""
        if None not in devs and len(set(devs)) <= 1:
            return list(range(len(items)))
        owner: dict[int, int] = {}
        for i, it in enumerate(items):
            for n in item_nodes(it):
                owner[n.id] = i
        deps: list[set[int]] = [set() for _ in items]
        for i, it in enumerate(items):
            for n in item_nodes(it):
                for t in n.inputs:
                    j = owner.get(t.node.id)
                    if j is not None and j != i and not (n.op == "Merge" and t.node.op == "NextIteration"):
                        deps[i].add(j)
                for c in n.control_inputs:
                    j = owner.get(c.id)
                    if j is not None and j != i:
                        deps[i].add(j)
        # When nothing more is ready on the current device, switch to the ready item whose first reader
        # comes earliest in the program order (so a constant on device k is placed just before the op
        # of device k that reads it, and joins its segment, instead of forming a segment of its own).
        urgency = [len(items)] * len(items)
        for j in range(len(items)):
            for i in deps[j]:
                urgency[i] = min(urgency[i], j)
        done: set[int] = set()
        order: list[int] = []
        current: Optional[str] = None
        while len(order) < len(items):
            ready = [i for i in range(len(items)) if i not in done and deps[i] <= done]
            # the program order is a valid order, so something is always ready
            same = [i for i in ready if devs[i] is not None and devs[i] == current]
            i = same[0] if same else min(ready, key=lambda r: (urgency[r], r))
            order.append(i)
            done.add(i)
            current = devs[i]
        return order

    def _cluster(self, items: list[Item]) -> list[tuple[Optional[str], list[Item]]]:
        """Items in ``_order``; then runs of items on one device form one group, and each spanning
        region and each driven loop is a group of its own."""
        devs: list[Optional[str]] = []
        for it in items:
            ds = item_devices(it, self.device_of)
            devs.append(next(iter(ds)) if len(ds) == 1 else None)
            if len(ds) == 1:
                self.compiled_loops += sum(1 for x in walk([it]) if isinstance(x, WhileRegion))
        groups: list[tuple[Optional[str], list[Item]]] = []
        alone = False  # the last group is a driven loop, which nothing joins
        for i in self._order(items, devs):
            d = devs[i]
            drives = d is not None and self._drives(items[i])
            if d is not None and groups and groups[-1][0] == d and not drives and not alone:
                groups[-1][1].append(items[i])
            else:
                groups.append((d, [items[i]]))
            alone = drives
        return groups

    def _segment(self, device: str, items: list[Item]) -> Segment:
        nodes = [n for it in items for n in item_nodes(it)]
        ids = {n.id for n in nodes}
        reads = {key(t) for n in nodes for t in n.inputs if t.node.id not in ids or t.node.id in self.fed}
        reads |= {key(o) for n in nodes if n.id in self.fed for o in n.outputs}
        reads |= {(c.id, -1) for n in nodes for c in n.control_inputs if c.id not in ids}
        produced = {key(o) for n in nodes if n.id not in self.fed for o in n.outputs} | {(n.id, -1) for n in nodes}
        writes = sorted(k for k in produced if k in self.fetch or self.readers.get(k, set()) - ids)
        # (what a segment reads is made outside it, or fed: so no value it is given leaves it again)
        assert not reads & produced, f"a segment writes keys it reads: {sorted(reads & produced)}"
        seg = Segment(device, items, sorted(reads), writes, [k for k in writes if k in self.fetch],
                      index=len(self.segments), label=self.label(device), traffic=traffic(items, self.held) or None)
        if len(items) == 1 and self._drives(items[0]):
            loop = items[0]
            assert isinstance(loop, WhileRegion)
            seg.driven = loop
            seg.push, seg.pop, seg.measured = iteration_counts(loop.body, self.held)
            # every stack the loop uses, with no count where a nested loop's chunk measures it
            for op, k in _stack_ops(loop.nodes, self.held):
                (seg.push if op == "StackPush" else seg.pop).setdefault(k, 0)
        self.segments.append(seg)
        return seg

    def _host(self, it: Item) -> Step:
        if isinstance(it, CondRegion):
            hc = HostCond(it, {b: self.scope(it.branches[b]) for b in (False, True)})
            self.host_conds.append(hc)
            return hc
        assert isinstance(it, WhileRegion)
        home = self.device_of[it.loop_vars[0][1].id] if it.loop_vars else self.device_of[it.loop_cond.id]
        self.host_loop_depth += 1
        try:
            hl = HostLoop(it, self.scope(it.header), self.scope(it.body), self.scope(it.exit_side),
                          sorted(item_devices(it, self.device_of)), home,
                          {k for op, k in _stack_ops(it.nodes, self.held) if op == "StackPush"})
        finally:
            self.host_loop_depth -= 1
        self.host_loops.append(hl)
        return hl


def schedule(program: Program, device_of: dict[int, str], fed: set[int], held: Collection[str] = (),
             label: Callable[[str], str] = str) -> Schedule:
    """Cut ``program`` into steps by the devices of its nodes (see the module docstring). ``held``:
    stacks whose pushes do nothing (``fast.held``), which no loop is driven for; ``label``: a
    device's name in traces and errors."""
    b = _Builder(program, device_of, fed, held, label)
    steps = b.scope(program.items)
    return Schedule(steps, b.segments, b.host_loops, b.host_conds, b.compiled_loops)


def one_device(program: Program, fed: set[int], held: Collection[str] = ()) -> list[Segment]:
    """The steps of ``program`` on one device: its root items in program order, cut before and after
    each driven loop (at least one segment, empty for an empty program)."""
    device_of = {n.id: ONE for it in program.items for n in item_nodes(it)}
    sched = schedule(program, device_of, fed, held, label=lambda _: "")
    segs = [s for s in sched.steps if isinstance(s, Segment)]
    assert len(segs) == len(sched.steps)  # (one device: no host conds or loops)
    return segs or [Segment(ONE, [], index=0)]


__all__ = ["ONE", "HostCond", "HostLoop", "Schedule", "Segment", "Step", "Traffic", "item_devices",
           "iteration_counts", "one_device", "schedule", "traffic"]
