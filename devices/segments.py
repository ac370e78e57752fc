"""Segments: the functionalized program of a placed graph, cut by device into host-driven steps.

Why cut the *region tree* rather than the partitioned graph: the fast backend already raises a graph
to structured regions (``turnout.fast.functionalize``) and lowers each region to ``jax.lax`` control
flow. A region whose nodes all sit on one device can therefore be compiled whole, exactly as the
unpartitioned fast backend compiles it: a loop inside one partition stays one ``lax.while_loop``
(tier 1). Only a region that spans devices is taken apart, and it is taken apart one level at a time:
its own items are grouped into per-device *segments* (maximal groups of items on one device, in a
dependency order that prefers to stay on the same device), and the host drives the region's control
(its predicate) between them (tier 3). A nested region that fits one device is again one item of one
segment, so the host only ever drives the frames that really span devices.

The steps of a scope:

* ``Segment``: items on one device, compiled as one jitted function committed to that device. It
  reads the keys its items need from the host's environment and gives back the keys something outside
  it reads (another step, the region's own control, a fetch).
* ``HostCond``: a conditional spanning devices; the host reads its predicate and runs the steps of the
  taken branch.
* ``HostLoop``: a loop spanning devices; the host runs its header steps, reads the predicate, and runs
  the body steps, iteration after iteration (``devices.fast_executor`` drives it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from turnout.devices.names import parse
from turnout.fast.regions import CondRegion, Item, Key, Program, WhileRegion, item_nodes, key, walk
from turnout.run_schedule import Step as RunStep


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
    fn: Any = None  # the jitted function, made on first use
    #: a segment of one loop that pushes or pops gradient stacks, outside any loop the host drives:
    #: run chunk by chunk (``devices.region_driver``) so that its stacks can move between calls
    driven: bool = False

    def describe(self) -> str:
        """A short label for traces and errors: the device and the first node's name."""
        first = item_nodes(self.items[0])[0].name if self.items else "(empty)"
        more = f" (+{len(self.items) - 1} more)" if len(self.items) > 1 else ""
        if self.driven:
            more = " (its loop run in chunks)"
        return f"segment {self.index} on {parse(self.device).short}: {first}{more}"


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


Step = Union[Segment, HostCond, HostLoop]


@dataclass
class Schedule:
    """The steps of the root scope, and the counts the run statistics report."""

    steps: list[Step]
    segments: list[Segment]
    host_loops: list[HostLoop]
    host_conds: list[HostCond]
    compiled_loops: int  # loops compiled whole inside one segment (tier 1)


def item_devices(it: Item, device_of: dict[int, str]) -> set[str]:
    """The devices an item's nodes sit on."""
    return {device_of[n.id] for n in item_nodes(it)}


class _Builder:
    def __init__(self, program: Program, device_of: dict[int, str], fed: set[int]) -> None:
        self.program = program
        self.device_of = device_of
        self.fed = fed
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
        groups = self._cluster(items)
        steps: list[Step] = []
        for dev, its in groups:
            if dev is None:
                steps.append(self._host(its[0]))
            else:
                steps.append(self._segment(dev, its))
        return steps

    def _drives(self, it: Item) -> bool:
        """A loop on one device that pushes or pops gradient stacks, outside the loops the host drives,
        is a segment of its own, run chunk by chunk (``Segment.driven``). Inside a host-driven loop it
        stays compiled whole: driving it would make each of the outer loop's iterations wait for the
        host."""
        return (self.host_loop_depth == 0 and isinstance(it, WhileRegion)
                and any(n.op in ("StackPush", "StackPop") for n in it.nodes))

    def _cluster(self, items: list[Item]) -> list[tuple[Optional[str], list[Item]]]:
        """Items in a dependency order that keeps going on one device while it can; then runs of
        items on one device form one group, and each spanning region is a group of its own."""
        devs: list[Optional[str]] = []
        for it in items:
            ds = item_devices(it, self.device_of)
            devs.append(next(iter(ds)) if len(ds) == 1 else None)
            if len(ds) == 1:
                self.compiled_loops += sum(1 for x in walk([it]) if isinstance(x, WhileRegion))
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
        groups: list[tuple[Optional[str], list[Item]]] = []
        alone = False  # the last group is a driven loop, which nothing joins
        for i in order:
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
        seg = Segment(device, items, sorted(reads), writes, [k for k in writes if k in self.fetch],
                      index=len(self.segments), driven=len(items) == 1 and self._drives(items[0]))
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
                          sorted(item_devices(it, self.device_of)), home)
        finally:
            self.host_loop_depth -= 1
        self.host_loops.append(hl)
        return hl


def schedule(program: Program, device_of: dict[int, str], fed: set[int]) -> Schedule:
    """Cut ``program`` into steps by the devices of its nodes (see the module docstring)."""
    b = _Builder(program, device_of, fed)
    steps = b.scope(program.items)
    return Schedule(steps, b.segments, b.host_loops, b.host_conds, b.compiled_loops)


def steps_of(steps: list[Step]) -> tuple[RunStep, ...]:
    """The per-device steps of a placed program (``devices.segments``: segments, host conds, host
    loops) as schedule steps."""
    out: list[RunStep] = []
    for s in steps:
        if isinstance(s, Segment):
            kind = "driven loop" if s.driven else "compiled call"
            out.append(RunStep(kind, s.describe(), parse(s.device).short))
        elif isinstance(s, HostCond):
            branches = tuple(RunStep("staged", f"branch {b}", steps=steps_of(s.branches[b]))
                             for b in (True, False))
            out.append(RunStep("host cond", f"predicate {s.region.pred.name}", steps=branches))
        else:
            over = ", ".join(parse(d).short for d in s.devices)
            parts = tuple(RunStep("staged", part, steps=steps_of(sub))
                          for part, sub in (("header", s.header), ("body", s.body), ("exit", s.exit_side)) if sub)
            out.append(RunStep("host loop", f"loop {s.region.frame[-1]!r} over {over}", parse(s.home).short, parts))
    return tuple(out)
