"""The partitioned reference executor: one reference interpreter per partition, one rendezvous between.

Each partition runs in a ``PartitionInterpreter``: the reference interpreter, plus a *port* to the
rendezvous that the Send and Recv rules of ``turnout.reference.rules`` call. A Send or Recv the
rendezvous cannot serve yet counts as busy in its iteration (so the iteration cannot retire under it)
and is made ready later from the partition's mailbox.

The driver decides which partition fires next: ``round_robin`` (one firing per partition in turn),
``random`` (a seeded choice among the partitions that can fire) or ``threads`` (one thread per
partition, all waiting on the rendezvous's condition variable when idle). Whatever the order, the run
ends when no partition can fire and no wake-up is pending; then any Recv still waiting, Send still
blocked or node still half-fed is a deadlock, reported with the waiting Recvs and their keys.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Optional

import numpy as np

from turnout.devices.names import DeviceSpec, parse
from turnout.devices.partition import Partition, Partitioned, check_partitions, partition
from turnout.devices.placement import Placement, Placer
from turnout.devices.rendezvous import Rendezvous
from turnout.devices.trace import DeviceTrace, PartitionedTrace
from turnout.errors import (
    ArgumentError,
    DeadFetchError,
    DeadlockError,
    FeedError,
    NonTerminationError,
    dead_fetch_message,
    describe_node,
)
from turnout.graph import Graph, Node, Tensor
from turnout.memory_plan import device_saved_stats
from turnout.reference.executor import Interpreter, Plan, plan_of, run_key
from turnout.reference.rules import Inbox, Tag, Token
from turnout.run_schedule import RunSchedule, Step
from turnout.session import RunOptions, RunResult
from turnout.slot_sizes import FIRST_CAPACITY, SlotPlan, SlotSizes

ORDERS = ("round_robin", "random", "threads")


def partition_plan(graph: Graph, fed: frozenset[int] = frozenset()) -> Plan:
    """The reference interpreter's plan for a whole partition (it is already pruned). Recvs are not
    sources: even a root-frame Recv waits for its token; nor are the Placeholders of ``fed``."""
    from turnout.validate import validate

    nodes = list(graph.nodes)
    sources = [n for n in nodes if not n.inputs and not n.control_inputs and n.op != "Recv" and n.id not in fed]
    return plan_of(nodes, validate(graph), sources)


class Port:
    """What the Send and Recv rules see of the rendezvous, for one partition."""

    def __init__(self, it: PartitionInterpreter, rv: Rendezvous) -> None:
        self.it = it
        self.rv = rv
        self.last_sent_dead = False

    def arrive(self, node: Node, tag: Tag) -> Optional[str]:
        """Whether a Send or Recv at ``tag`` may fire now (its rule), asked of the rendezvous; where it must wait,
        its iteration is kept busy (``arm``) until the rendezvous wakes it."""
        rule = (self.rv.arrive_send if node.op == "Send" else self.rv.arrive_recv)(self.it, node, tag)
        if rule is None:
            self.it.arm(tag)
        return rule

    def send(self, node: Node, tag: Tag, tok: Token) -> None:
        """Put a Send's token into the rendezvous, remembering whether it was dead (the Send's trace event says so)."""
        self.last_sent_dead = tok.dead
        self.rv.send(node, tag, tok)

    def take(self, node: Node, tag: Tag) -> Token:
        """Take the token a Recv at ``tag`` receives from the rendezvous."""
        return self.rv.take(node, tag)


class PartitionInterpreter(Interpreter):
    """The reference interpreter of one partition, stepped by a driver."""

    def __init__(self, device: str, plan: Plan, feeds: dict[tuple[int, int], Any], variables: dict[str, np.ndarray],
                 options: RunOptions, rv: Rendezvous, clock: itertools.count[int],
                 slots: SlotPlan = SlotPlan()) -> None:
        super().__init__(plan, feeds, variables, options, slots)
        self.device = device
        self.short = parse(device).short
        self.port = Port(self, rv)
        self.mailbox: deque[tuple[Node, Tag, str]] = deque()
        if options.trace:
            self.trace = DeviceTrace(device, clock)

    @property
    def slot_stats(self) -> dict[str, Any]:
        """What this partition's run says of its loops' checkpoint slots (``SlotPlan.stats``)."""
        return self.slots.stats

    def _trace_event(self, node: str, op: str, tag: Tag, dead: bool, rule: str) -> None:
        """A Send has no outputs, so its trace event takes its deadness from the token it sent."""
        if op == "Send":
            dead = self.port.last_sent_dead
        super()._trace_event(node, op, tag, dead, rule)

    def arm(self, tag: Tag) -> None:
        """A Send or Recv waits on the rendezvous: its iteration stays busy until it fires."""
        if tag:
            inst = self.frame_of(tag)
            inst.ready[tag[-1][1]] = inst.ready.get(tag[-1][1], 0) + 1

    def start(self) -> None:
        """Deliver the feeds, make the sources ready and ask the rendezvous for the root-frame Recvs."""
        for (nid, idx), value in self.feeds.items():
            for consumer, slot in self.plan.consumers.get((nid, idx), ()):
                self.deliver(consumer, slot, (), Token(value))
        for n in self.plan.sources:
            self._make_ready(n, (), "E-Op")
        for n in self.plan.nodes:
            if n.op == "Recv" and not n.control_inputs:
                box = self.inboxes[(n.id, ())] = Inbox([])
                rule = self.port.arrive(n, ())
                if rule is not None:
                    box.fired = True
                    self._make_ready(n, (), rule)

    def drain(self) -> None:
        """Make ready the Sends and Recvs the rendezvous woke (called by this partition's own thread)."""
        while self.mailbox:
            node, tag, rule = self.mailbox.popleft()
            if tag:
                inst = self.frame_of(tag)
                inst.ready[tag[-1][1]] -= 1
            self.inboxes[(node.id, tag)].fired = True
            self._make_ready(node, tag, rule)

    def step(self) -> None:
        """Fire one ready item."""
        node, tag, rule = self.queue.pop()
        self.firings += 1
        self.fire(node, tag, rule)

    def waiting_report(self) -> list[str]:
        """Nodes of this partition that received part of their inputs and never fired (Recvs and Sends
        waiting on the rendezvous are reported by the rendezvous)."""
        out = []
        for line in self.blocked_report().splitlines():
            if line.strip() and "Recv node" not in line and "Send node" not in line:
                out.append(f"  [{self.short}]{line}")
        return out


def check_firings(fired: int, options: RunOptions, who: str = "", scope: str = " over all partitions") -> None:
    """NonTerminationError once ``fired`` firings pass ``options.max_firings``: the firing limit of
    partitioned runs, in process (all partitions') and per cluster task (``who``)."""
    if options.max_firings is not None and fired > options.max_firings:
        raise NonTerminationError(f"{who}more than max_firings={options.max_firings} firings{scope}; does a loop "
                                  "fail to terminate?")


def stuck_report(rendezvous: list[str], parts: Sequence[Any], fetches: Iterable[tuple[str, str, Any]]
                 ) -> tuple[list[str], Optional[str]]:
    """The ``fetches`` (name, device, key) a partitioned run (in process or a cluster task's) never
    produced, and what it is blocked on: messages waiting (``rendezvous``) and its ``parts``' own
    waits; None where nothing is missing or waits."""
    by_device = {p.device: p for p in parts}
    missing = [name for name, d, k in fetches if k not in by_device[d].produced and k not in by_device[d].feeds]
    if not (rendezvous or missing):
        return missing, None
    lines = list(rendezvous)
    for p in parts:
        lines += p.waiting_report()
    return missing, limited(lines) or "  (nothing waits)"


def limited(lines: list[str]) -> str:
    """``lines`` as one report of at most 20 of them (every stuck-run report is cut so)."""
    return "\n".join(lines[:20]) + ("\n  ..." if len(lines) > 20 else "")


def drive_cooperative(parts: list[PartitionInterpreter], order: str, seed: int, options: RunOptions) -> None:
    """One thread: pick a partition that can fire (in turn, or at random with ``seed``), fire one item."""
    rng = random.Random(seed)
    turn = 0
    checked = 0
    while True:
        for p in parts:
            p.drain()
        ready = [p for p in parts if p.queue]
        if not ready:
            break  # (to the final check of the firing budget: a return skipped it)
        if order == "random":
            p = rng.choice(ready)
        else:
            p = min(ready, key=lambda q: (parts.index(q) - turn) % len(parts))
            turn = (parts.index(p) + 1) % len(parts)
        p.step()
        checked += 1
        if checked % 1024 == 0:
            check_firings(sum(p.firings for p in parts), options)
    check_firings(sum(p.firings for p in parts), options)


def drive_threads(parts: list[PartitionInterpreter], rv: Rendezvous, options: RunOptions) -> None:
    """One thread per partition. A thread with nothing to fire waits on the rendezvous's condition; the
    run is over when every thread waits and every mailbox is empty."""
    state: dict[str, Any] = {"idle": 0, "done": False, "error": None}
    cond = rv.cond

    def work(p: PartitionInterpreter) -> None:
        try:
            n = 0
            while True:
                with cond:
                    if state["done"]:
                        return
                    p.drain()
                if p.queue:
                    p.step()
                    n += 1
                    if n % 1024 == 0:
                        check_firings(sum(p.firings for p in parts), options)
                    continue
                with cond:
                    if p.mailbox:
                        continue
                    state["idle"] += 1
                    while not state["done"] and not p.mailbox:
                        if state["idle"] == len(parts) and all(not q.mailbox for q in parts):
                            state["done"] = True
                            cond.notify_all()
                            break
                        cond.wait()
                    state["idle"] -= 1
        except BaseException as e:  # noqa: BLE001 - handed to the calling thread
            with cond:
                if state["error"] is None:
                    state["error"] = e
                state["done"] = True
                cond.notify_all()

    threads = [threading.Thread(target=work, args=(p,), name=f"turnout-{p.short}", daemon=True) for p in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if state["error"] is not None:
        raise state["error"]
    check_firings(sum(p.firings for p in parts), options)


def check_feeds(graph: Graph, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> dict[tuple[int, int], Any]:
    """``feeds`` by key, validated with the graph: a partitioned run feeds root-frame tensors only."""
    from turnout.validate import validate

    fa = validate(graph, fetches)
    for t in feeds:
        if fa.node_frame.get(t.node.id, ()) != ():
            raise FeedError(f"cannot feed {t.name}: it is inside a loop frame; feed root-frame tensors only")
    return {(t.node.id, t.index): v for t, v in feeds.items()}


def check_fed(parted: Partitioned) -> None:
    """FeedError for a Placeholder of the partitions that the run does not feed."""
    for part in parted.partitions.values():
        for n in part.graph.nodes:
            if n.op == "Placeholder" and not n.name.startswith("_feed/"):
                raise FeedError(f"{describe_node(n)} must be fed a value (feed_dict)")


class PartitionedRun:
    """One run of a partitioned graph: the interpreters, the rendezvous, the trace."""

    def __init__(self, parted: Partitioned, feeds: dict[tuple[int, int], Any], variables: dict[str, np.ndarray],
                 options: RunOptions, plans: dict[str, Plan], fetches: Sequence[Tensor] = (),
                 slots: SlotPlan = SlotPlan()) -> None:
        self.parted = parted
        self.fetches = list(fetches)
        self.rv = Rendezvous()
        clock: itertools.count[int] = itertools.count()
        self.parts: list[PartitionInterpreter] = []
        for d, part in parted.partitions.items():
            local_feeds = {(ph.id, 0): feeds[key] for key, ph in part.feeds.items()}
            self.parts.append(PartitionInterpreter(d, plans[d], local_feeds, variables, options, self.rv, clock, slots))
        self.by_device = {p.device: p for p in self.parts}

    def run(self, order: str = "round_robin", seed: int = 0) -> None:
        """Start every partition, then drive them until none can fire: in turns (``round_robin`` or seeded
        ``random``), or one thread per partition (``threads``)."""
        if not self.parts:  # nothing fetched (``run([])``): no partition has work
            return
        for p in self.parts:
            p.start()
        if order == "threads":
            drive_threads(self.parts, self.rv, self.parts[0].options)
        else:
            drive_cooperative(self.parts, order, seed, self.parts[0].options)

    def check_finished(self) -> None:
        """DeadlockError if a fetch is missing, or a Recv still waits or a Send is blocked. Nodes left
        half-fed inside a partition do not stop a run whose fetches were all produced: it ends at
        quiescence, as the unpartitioned reference run does (TensorFlow's ``testLoop_false``)."""
        missing, body = stuck_report(self.rv.report(), self.parts,
                                     ((t.name, d, (t.node.id, t.index)) for d, t in self.parted.fetches))
        if body is not None:
            head = f"no partition can fire, but fetches {', '.join(missing)} were never produced. " if missing else ""
            raise DeadlockError(f"{head}The partitioned run is stuck. Blocked:\n{body}")

    def values(self) -> list[Any]:
        """The fetched values, each read on its partition (fed, or produced there); a dead fetch raises
        ``DeadFetchError``."""
        out = []
        for (d, t), orig in zip(self.parted.fetches, self.fetches):
            it = self.by_device[d]
            key = (t.node.id, t.index)
            tok = Token(it.feeds[key]) if key in it.feeds else it.produced[key]
            if tok.dead:
                raise DeadFetchError(dead_fetch_message(orig.name, orig.node))
            out.append(tok.value)
        return out

    def trace(self) -> Optional[PartitionedTrace]:
        """The per-device traces merged in one ``PartitionedTrace``, None when the run was not traced."""
        tracks = {p.device: p.trace for p in self.parts if isinstance(p.trace, DeviceTrace)}
        return PartitionedTrace(tracks) if tracks else None  # type: ignore[arg-type]


class PartitionedBackend:
    """``tn.Session(graph, backend="reference", devices=[...])``: place, partition, and run each partition
    on its own reference interpreter.

    Options: ``devices`` (names, at least one), ``requests`` (soft placement: node name -> device),
    ``allow_soft_placement`` (resolve a colocation conflict or a device not in ``devices`` by the rules
    of ``devices.placement`` instead of raising, as TensorFlow's option of that name),
    ``order`` (``"round_robin"``, ``"random"`` or ``"threads"``), ``seed`` (for ``"random"``). Per-run
    ``RunOptions`` apply inside every partition (its ready-queue scheduler, trace, limits).

    Memory budgets (``RunOptions.memory_budget`` and a loop's own) bound what each device holds: every
    partition's interpreter counts the values its own gradient stacks save, as the one-device
    reference interpreter does, and stops the run with ``ResourceExhaustedError`` where a device
    would go over. Stats: ``peak_saved_bytes`` (the most any device held), per device
    (``peak_saved_bytes_per_device``) and per loop, summed over devices (``saved_bytes``).
    """

    #: runs honour memory budgets, per device (each partition's interpreter counts its own pushes)
    memory_budgets = True

    def __init__(self, graph: Graph, devices: Sequence[str | DeviceSpec] = (),
                 requests: Optional[dict[str, str]] = None, order: str = "round_robin", seed: int = 0,
                 allow_soft_placement: bool = False) -> None:
        if order not in ORDERS:
            raise ArgumentError(f"unknown partition order {order!r}; choose one of {list(ORDERS)}")
        if not isinstance(allow_soft_placement, bool):
            raise ArgumentError(f"allow_soft_placement must be True or False, got {allow_soft_placement!r}")
        self.graph = graph
        self.devices = list(devices)
        self.requests = dict(requests or {})
        self.allow_soft_placement = allow_soft_placement
        self.order = order
        self.seed = seed
        self.placer = Placer(graph, self.devices, self.requests, allow_soft_placement)
        self._plans: dict[Any, tuple[Partitioned, dict[str, Plan]]] = {}
        self.last_run: Optional[PartitionedRun] = None
        #: per run's partitions, the checkpoint slots a recomputed loop gets, learnt from its runs
        #: (``turnout.slot_sizes``, as the one-device reference interpreter sizes them)
        self.slot_sizes = SlotSizes()
        self.placement  # noqa: B018 - unknown devices and conflicts are reported when the Session is made

    @property
    def placement(self) -> Placement:
        """The placement of the current graph version (recomputed when the graph grows)."""
        return self.placer()

    def partitioned(self, fetches: list[Tensor], fed: set[tuple[int, int]]) -> tuple[Partitioned, dict[str, Plan]]:
        """The partitions (and their interpreter plans) for these fetches and fed tensors, cached."""
        key = run_key(self.graph, fetches, fed)
        if key not in self._plans:
            self._plans[key] = partitions_of(self.graph, self.placement, fetches, fed)
        return self._plans[key]

    def explain(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
                memory_budget: Optional[int] = None) -> RunSchedule:
        """How a run of ``fetches`` executes (``Session.explain``): one interpreter per device's
        partition, with its ops, its Sends and Recvs and its control loops (the partitions a run of
        these fetches uses, made and cached as a run makes them). A run budget changes no step: it
        is counted on every device (the session adds the memory plan's lines)."""
        fed = {(t.node.id, t.index) for t in feeds}
        parted, plans = self.partitioned(fetches, fed)
        steps = tuple(partition_step(p, "the reference interpreter") for p in parted.partitions.values())
        notes = (f"{len(parted.transfers)} Send/Recv pair(s) carry values between devices",
                 *self.slot_sizes.notes(run_key(self.graph, fetches, fed),
                                        [n for p in plans.values() for n in p.nodes]),
                 *budget_notes(memory_budget))
        return RunSchedule("reference (partitioned)", steps, notes=notes)

    def run(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
            options: RunOptions) -> RunResult:
        """Run one step: partition the graph for these fetches (cached), run every partition on its own interpreter,
        check that the run finished, and return the values with the summed firing counts and the per-device stats."""
        fed = check_feeds(self.graph, fetches, feeds)
        parted, plans = self.partitioned(fetches, set(fed))
        check_fed(parted)
        key = run_key(self.graph, fetches, fed)
        slots = self.slot_sizes.plan(key, [n for p in plans.values() for n in p.nodes], FIRST_CAPACITY)
        run = PartitionedRun(parted, fed, variables, options, plans, fetches, slots)
        self.last_run = run
        try:
            run.run(self.order, self.seed)
        finally:
            self.slot_sizes.take()  # (what a run needed sizes the next, whether or not it finished)
        run.check_finished()
        values = run.values()
        counts: dict[tuple[str, tuple[Any, ...]], int] = {}
        for p in run.parts:
            for k, v in p.counts.items():
                counts[k] = counts.get(k, 0) + v
        stats = {"firings": sum(p.firings for p in run.parts), **slots.stats,
                 "firings_per_device": {p.device: p.firings for p in run.parts},
                 **run.rv.stats(), **_saved_stats(run.parts)}
        return RunResult(values=values, trace=run.trace(), counts=counts, stats=stats)


def partitions_of(graph: Graph, placement: Placement, fetches: list[Tensor], fed: set[tuple[int, int]]
                  ) -> tuple[Partitioned, dict[str, Plan]]:
    """The checked partitions of a run of ``fetches`` with ``fed`` tensors, and each partition's
    interpreter plan (made here, so that a partition's errors come from where the run starts, the
    driver of a cluster too)."""
    parted = partition(graph, placement, fetches, fed)
    check_partitions(parted)
    return parted, {d: partition_plan(p.graph, frozenset(ph.id for ph in p.feeds.values()))
                    for d, p in parted.partitions.items()}


def partition_step(part: Partition, who: str) -> Step:
    """A partition as a step of a schedule (``Session.explain``): on its device, what runs it
    (``who``), its size, its Sends and Recvs and its control loops."""
    ops = [n.op for n in part.graph.nodes]
    return Step("partition", f"{who} on {len(ops)} ops: {ops.count('Send')} Send, {ops.count('Recv')} Recv, "
                f"{len(part.control_loops)} control loop(s)", part.short)


def budget_notes(memory_budget: Optional[int]) -> tuple[str, ...]:
    """What a schedule of partitions says of a run's budget: it changes no step, and is counted on
    every device."""
    if memory_budget is None:
        return ()
    return (f"the memory_budget of {memory_budget} bytes bounds what each device's gradient stacks hold",)


def _saved_stats(parts: Sequence[PartitionInterpreter]) -> dict[str, Any]:
    """What the partitions' interpreters counted of their saved values under a memory budget
    (``memory_plan.device_saved_stats``; nothing without one)."""
    return device_saved_stats({p.device: p.saved for p in parts if p.saved is not None})
