"""The reference interpreter's main loop, frame instances and the Session backend.

Execution, in one paragraph: the fetches' ancestors (through data and control edges; a fed tensor
cuts the walk) take part. Source nodes are ready at the root tag. The loop pops a ready ``(node, tag)``,
computes its output tokens with ``rules.FIRE`` and sends them on with ``rules.ROUTE``; each delivery
fills the consumer's inbox for that tag, and ``rules.ARRIVE`` says when the consumer is ready. Frame
instances keep what the rules need: started and retired iterations (the ``parallel_iterations``
window), loop invariants, parked values and remembered dead exits. When nothing is ready the run is
over: every fetch must have been produced, or it is a deadlock.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from turnout.errors import (
    MAX_ITERATIONS_HINT,
    ArgumentError,
    DeadFetchError,
    DeadlockError,
    ExecutionError,
    FeedError,
    MergeConflictError,
    NonTerminationError,
    dead_fetch_message,
    describe_node,
    merge_conflict_message,
)
from turnout.frames import Frame, FrameAnalysis
from turnout.graph import Graph, Node, Tensor, ancestors
from turnout.limits import allocation_limit
from turnout.memory_plan import SavedBytes, platform, run_plan
from turnout.reference import rules
from turnout.reference.rules import DEAD, Inbox, Tag, Token
from turnout.reference.scheduler import ReadyQueue
from turnout.reference.trace import Trace, fmt_tag
from turnout.run_schedule import INTERPRETER_STEP, RunSchedule, Step
from turnout.session import RunOptions, RunResult
from turnout.slot_sizes import FIRST_CAPACITY, SlotPlan, SlotSizes


@dataclass
class Plan:
    """What one (graph version, fetches, feeds) needs, computed once: the pruned node set and its
    consumers, the back-edge slots of each Merge, and the static frames. ``frame_origin``: the Enter
    of lowest id of each frame, which names its instances in messages (the same Enter whichever of
    them arrives first, and the one the small-step system and the fast backend name)."""

    nodes: list[Node]
    consumers: dict[tuple[int, int], list[tuple[Node, int]]]
    control_consumers: dict[int, list[Node]]
    back_edge_slots: dict[int, frozenset[int]]
    frames: FrameAnalysis
    enters_per_frame: dict[Frame, int]
    exits_per_frame: dict[Frame, list[Node]]
    sources: list[Node]
    frame_origin: dict[Frame, Node]


def _validate(graph: Graph, fetches: list[Tensor]) -> FrameAnalysis:
    """Ill-formed graphs are rejected before anything runs ([T4-Quiescence])."""
    from turnout.validate import validate

    return validate(graph, fetches)


def make_plan(graph: Graph, fetches: list[Tensor], fed: set[tuple[int, int]]) -> Plan:
    """Prune to the ancestors of the fetches, like TensorFlow: only what the fetches need runs."""
    fa = _validate(graph, fetches)
    nodes = list(ancestors(fetches, fed).values())
    return plan_of(nodes, fa, [n for n in nodes if not n.inputs and not n.control_inputs])


def plan_of(nodes: list[Node], fa: FrameAnalysis, sources: list[Node]) -> Plan:
    """The plan of running ``nodes`` (a pruned graph, or a whole partition) from ``sources``: their
    consumers, back-edge slots and frames, counted once."""
    consumers: dict[tuple[int, int], list[tuple[Node, int]]] = {}
    control_consumers: dict[int, list[Node]] = {}
    back: dict[int, frozenset[int]] = {}
    enters: dict[Frame, int] = {}
    exits: dict[Frame, list[Node]] = {}
    origin: dict[Frame, Node] = {}
    for n in nodes:
        for slot, t in enumerate(n.inputs):
            consumers.setdefault((t.node.id, t.index), []).append((n, slot))
        for c in n.control_inputs:
            control_consumers.setdefault(c.id, []).append(n)
        back[n.id] = frozenset(
            s for s, t in enumerate(n.inputs) if n.op == "Merge" and t.node.op == "NextIteration"
        )
        if n.op == "Enter":
            f = fa.node_frame[n.id]
            enters[f] = enters.get(f, 0) + 1
            if f not in origin or n.id < origin[f].id:
                origin[f] = n
        elif n.op == "Exit":
            exits.setdefault(fa.node_frame[n.inputs[0].node.id], []).append(n)
    return Plan(nodes, consumers, control_consumers, back, fa, enters, exits, sources, origin)


@dataclass
class FrameInstance:
    """One instance of a loop frame: identified by its parent tag and frame name."""

    it: Interpreter
    parent_tag: Tag
    name: str
    path: Frame
    parallel_iterations: int
    enters_expected: int
    enters_seen: int = 0
    started: int = 0  # iterations 0 .. started-1 have started
    oldest: int = 0  # iterations below this have retired
    ready: dict[int, int] = field(default_factory=dict)  # ready items per iteration
    children: dict[int, int] = field(default_factory=dict)  # incomplete nested instances per iteration
    invariants: list[tuple[Node, Token]] = field(default_factory=list)
    parked: dict[int, list[tuple[Node, Token]]] = field(default_factory=dict)
    dead_exits: set[int] = field(default_factory=set)
    live_exits: set[int] = field(default_factory=set)
    origin: str = ""  # the frame's Enter of lowest id (``Plan.frame_origin``), as describe_node gives it

    def describe(self) -> str:
        """'loop frame "while/frame0" (instance root; entered by Enter node ... at model.py:3)'."""
        by = f"; entered by {self.origin}" if self.origin else ""
        return f"loop frame {self.name!r} (instance {fmt_tag(self.parent_tag)}{by})"

    def tag(self, k: int) -> Tag:
        """The tag of iteration ``k`` of this instance: the parent tag with ``(frame name, k)`` appended."""
        return (*self.parent_tag, (self.name, k))

    def start_iteration(self, k: int) -> None:
        """Iteration k begins: it receives every invariant ([E-Enter-Const])."""
        assert k == self.started, (k, self.started)
        limit = self.it.options.max_iterations
        # Iteration ``limit`` may start: it finds the predicate false (a true one stops the run at the
        # LoopCond, ``rules.fire_loop_cond``). This check bounds a hand-built frame without a LoopCond.
        if limit is not None and k > limit:
            raise NonTerminationError(
                f"{self.describe()} started iteration {k}, over the limit max_iterations={limit}; "
                f"{MAX_ITERATIONS_HINT}"
            )
        self.started += 1
        for enter, tok in self.invariants:
            self.it.emit(enter, 0, self.tag(k), tok)
            self.it.emit_control(enter, self.tag(k), tok)

    def add_invariant(self, enter: Node, tok: Token) -> None:
        """[E-Enter-Const]: deliver to the iterations already started, and remember for later ones."""
        self.invariants.append((enter, tok))
        for k in range(self.oldest, self.started):
            self.it.emit(enter, 0, self.tag(k), tok)
            self.it.emit_control(enter, self.tag(k), tok)

    def enter_arrived(self) -> None:
        """Count one more Enter of the frame as fired; once all have, the instance may retire iterations and complete
        (``Interpreter.check_retire``)."""
        self.enters_seen += 1
        self.it.check_retire(self)

    def send_to_next(self, node: Node, tag: Tag, tok: Token) -> None:
        """[E-Next-Live] / [E-Next-Park]: deliver to iteration k+1 if inside the window, else park."""
        k = tag[-1][1] + 1
        if k < self.started:
            self._deliver_next(node, k, tok)
        elif k < self.oldest + self.parallel_iterations:
            self.start_iteration(k)
            self._deliver_next(node, k, tok)
        else:
            self.parked.setdefault(k, []).append((node, tok))

    def _deliver_next(self, node: Node, k: int, tok: Token) -> None:
        self.it.emit(node, 0, self.tag(k), tok)
        self.it.emit_control(node, self.tag(k), tok)

    def unpark(self) -> None:
        """After a retirement the window moves: parked values for newly admitted iterations go on."""
        for k in sorted(self.parked):
            if k >= self.oldest + self.parallel_iterations:
                break
            if k == self.started:
                self.start_iteration(k)
            for node, tok in self.parked.pop(k):
                self._deliver_next(node, k, tok)

    @property
    def complete(self) -> bool:
        """True when the instance is done ([E-Frame-Done]): every Enter arrived, every started iteration retired,
        nothing parked."""
        return self.enters_seen == self.enters_expected and self.oldest == self.started and not self.parked


class Interpreter:
    """One run: the state of the tagged-token machine."""

    def __init__(self, plan: Plan, feeds: dict[tuple[int, int], Any], variables: dict[str, np.ndarray],
                 options: RunOptions, slots: SlotPlan = SlotPlan()) -> None:
        self.plan = plan
        #: the checkpoint slots its recomputed loops get (``turnout.slot_sizes``: every one their budgets
        #: hold, unless the backend learnt from earlier runs that fewer do)
        self.slots = slots
        self.options = options
        self.variables = variables
        self.stacks: dict[str, dict[tuple[int, ...], Any]] = {}
        self.feeds = feeds
        self.queue = ReadyQueue(options.scheduler, options.seed)
        self.inboxes: dict[tuple[int, Tag], Inbox] = {}
        self.fired: set[tuple[int, Tag]] = set()
        self.merge_live: set[tuple[int, Tag]] = set()  # Merges that received a live data input ([E-Merge-Conflict])
        self.frames: dict[tuple[Tag, str], FrameInstance] = {}
        self.produced: dict[tuple[int, int], Token] = {}
        self.counts: dict[tuple[str, Tag], int] = {}
        self.trace = Trace() if options.trace else None
        self.firings = 0
        self.arity = {n.id: len(n.inputs) for n in plan.nodes}  # inbox sizes (Node.inputs builds a tuple)
        # memory budgets (turnout.memory_plan): the bytes pushed on gradient stacks, per loop, checked at
        # each push; None when no budget applies to the run
        mplan = run_plan(plan.nodes, platform("cpu"), getattr(options, "memory_budget", None))
        self.saved = SavedBytes(mplan, "reference interpreter") if mplan is not None else None
        self.stack_loop: dict[str, str] = {}  # stack handle -> its forward loop, where ``saved`` counts

    # ---- frames ----------------------------------------------------------------------------------
    def frame_of(self, tag: Tag) -> FrameInstance:
        """The frame instance that tag ``tag`` is an iteration of (``tag`` is not the root tag)."""
        return self.frames[(tag[:-1], tag[-1][0])]

    def enter_frame(self, enter: Node, tag: Tag) -> FrameInstance:
        """The instance an Enter at parent tag ``tag`` enters; created with iteration 0 on first use."""
        name = enter.attrs["frame_name"]
        key = (tag, name)
        inst = self.frames.get(key)
        if inst is None:
            path = self.plan.frames.node_frame[enter.id]
            inst = FrameInstance(self, tag, name, path, int(enter.attrs.get("parallel_iterations", 10)),
                                 self.plan.enters_per_frame[path],
                                 origin=describe_node(self.plan.frame_origin[path]))
            self.frames[key] = inst
            if tag:
                parent = self.frame_of(tag)
                parent.children[tag[-1][1]] = parent.children.get(tag[-1][1], 0) + 1
            inst.start_iteration(0)
        return inst

    def check_retire(self, inst: FrameInstance) -> None:
        """[E-Iter-Retire]: retire the oldest iteration while it is idle; then [E-Frame-Done]."""
        while (
            inst.enters_seen == inst.enters_expected
            and inst.oldest < inst.started
            and inst.ready.get(inst.oldest, 0) == 0
            and inst.children.get(inst.oldest, 0) == 0
        ):
            inst.ready.pop(inst.oldest, None)
            inst.children.pop(inst.oldest, None)
            inst.oldest += 1
            if self.trace is not None:
                self._trace_event(f"{inst.name}#retire", "Retire", inst.tag(inst.oldest - 1), False, "E-Iter-Retire")
            inst.unpark()
        if inst.complete:
            self._frame_done(inst)

    def _frame_done(self, inst: FrameInstance) -> None:
        """[E-Frame-Done]: release a dead token for every Exit that sent nothing live; delete the instance."""
        del self.frames[(inst.parent_tag, inst.name)]
        for ex in self.plan.exits_per_frame.get(inst.path, []):
            if ex.id in inst.dead_exits and ex.id not in inst.live_exits:
                self._trace_event(ex.name, "Exit", inst.parent_tag, True, "E-Frame-Done")
                self.emit(ex, 0, inst.parent_tag, DEAD)
                self.emit_control(ex, inst.parent_tag, DEAD)
        if inst.parent_tag:
            parent = self.frame_of(inst.parent_tag)
            k = inst.parent_tag[-1][1]
            parent.children[k] -= 1
            self.check_retire(parent)

    # ---- tokens ----------------------------------------------------------------------------------
    def emit(self, node: Node, index: int, tag: Tag, tok: Token) -> None:
        """Send output ``index`` of ``node`` to its consumers at ``tag``."""
        key = (node.id, index)
        if key in self.feeds:
            return  # a fed tensor's consumers already received the fed value
        if not tag:
            self.produced[key] = tok
        for consumer, slot in self.plan.consumers.get(key, ()):
            self.deliver(consumer, slot, tag, tok)

    def emit_control(self, node: Node, tag: Tag, tok: Token) -> None:
        """Send ``tok`` on ``node``'s control edges, at ``tag``, to every node that waits on it."""
        for consumer in self.plan.control_consumers.get(node.id, ()):
            self.deliver(consumer, -1, tag, tok)

    def deliver(self, node: Node, slot: int, tag: Tag, tok: Token) -> None:
        """Put token ``tok`` into input ``slot`` of ``node`` at ``tag`` (``slot`` -1: a control input), and make the
        node ready when its arrive rule says so. A second live input of a Merge at one tag raises
        ``MergeConflictError`` ([E-Merge-Conflict]); inputs after a Merge fired are ignored ([E-Merge-Live])."""
        key = (node.id, tag)
        if slot >= 0 and node.op == "Merge" and not tok.dead:
            if key in self.merge_live:
                raise MergeConflictError(merge_conflict_message(node, fmt_tag(tag)))
            self.merge_live.add(key)
        box = self.inboxes.get(key)
        if box is None:
            box = self.inboxes[key] = Inbox([None] * self.arity[node.id])
        if box.fired:
            return  # [E-Merge-Live]: inputs arriving after a Merge fired at this tag are ignored
        if slot < 0:
            box.control.append(tok)
        else:
            if box.values[slot] is not None:
                raise ExecutionError(f"{describe_node(node)} received input {slot} twice at {fmt_tag(tag)}")
            box.values[slot] = tok
            box.arrival_order.append(slot)
        rule = rules.arrive_rule(node.op)(self, node, tag, box)
        if rule is not None:
            box.fired = True
            self._make_ready(node, tag, rule)

    def _make_ready(self, node: Node, tag: Tag, rule: str) -> None:
        if tag:
            inst = self.frame_of(tag)
            k = tag[-1][1]
            inst.ready[k] = inst.ready.get(k, 0) + 1
        self.queue.push((node, tag, rule))

    # ---- the main loop ---------------------------------------------------------------------------
    def run(self) -> None:
        """Run to quiescence: deliver the feeds, start the sources at the root tag, then fire ready (node, tag) pairs
        in the scheduler's order until none is left. ``max_firings`` and ``max_seconds`` stop a runaway run with
        ``NonTerminationError``."""
        for (nid, idx), value in self.feeds.items():
            for consumer, slot in self.plan.consumers.get((nid, idx), ()):
                self.deliver(consumer, slot, (), Token(value))
        for n in self.plan.sources:
            if n.op == "Placeholder" and (n.id, 0) in self.feeds:
                # Fed: its value went out above; a control dependency on it is satisfied, live.
                self.emit_control(n, (), Token(None))
                continue
            self._make_ready(n, (), "E-Op")
        limit = self.options.max_firings
        budget = self.options.max_seconds
        deadline = None if budget is None else time.monotonic() + budget
        while self.queue:
            node, tag, rule = self.queue.pop()
            self.firings += 1
            if limit is not None and self.firings > limit:
                raise NonTerminationError(self._runaway(f"more than max_firings={limit} firings", "max_firings",
                                                        node, tag))
            if deadline is not None and not self.firings & 1023 and time.monotonic() > deadline:
                raise NonTerminationError(self._runaway(f"the run took more than max_seconds={budget} seconds",
                                                        "max_seconds", node, tag))
            self.fire(node, tag, rule)

    def _runaway(self, what: str, option: str, node: Node, tag: Tag) -> str:
        """A non-termination message: the busiest loop instance (most iterations started) and the option."""
        busiest = max(self.frames.values(), key=lambda i: i.started, default=None)
        where = (f"; the busiest loop is {busiest.describe()}, at iteration {busiest.started - 1}"
                 if busiest is not None else "")
        return (f"{what} (last: {describe_node(node)} at {fmt_tag(tag)}){where}. Does a loop fail to terminate? "
                f"If the program really needs more, raise the limit with sess.run(..., {option}=N) "
                f"(RunOptions.{option}; None: no limit)")

    def fire(self, node: Node, tag: Tag, rule: str) -> None:
        """Fire ``node`` at ``tag``, exactly once: compute its outputs by its fire rule, record the firing (a trace
        event under ``rule``, when tracing), route the outputs, and let its frame instance retire iterations."""
        key = (node.id, tag)
        if key in self.fired:
            raise ExecutionError(f"{describe_node(node)} fired twice at {fmt_tag(tag)} (exactly-once violated)")
        self.fired.add(key)
        box = self.inboxes.pop(key, None) or Inbox([])
        if node.op == "Merge":
            self.inboxes[key] = _FIRED  # [E-Merge-Live]: later arrivals at this tag are ignored
        outs = rules.fire_rule(node.op)(self, node, tag, box)
        self.counts[(node.name, tag)] = self.counts.get((node.name, tag), 0) + 1
        if self.trace is not None:  # the rule's name is only worked out for a trace
            dead = bool(outs) and all(t.dead for t in outs)
            if node.op == "Switch":
                rule = "E-Switch-Dead" if box.any_dead() else "E-Switch"
            self._trace_event(node.name, node.op, tag, dead, _rule_name(node, rule, dead))
        rules.route_rule(node.op)(self, node, tag, outs)
        if tag:
            inst = self.frames.get((tag[:-1], tag[-1][0]))
            if inst is not None:
                inst.ready[tag[-1][1]] -= 1
                self.check_retire(inst)

    def _trace_event(self, node: str, op: str, tag: Tag, dead: bool, rule: str) -> None:
        if self.trace is not None:
            self.trace.record(node, op, tag, dead, rule)

    # ---- the end ---------------------------------------------------------------------------------
    def blocked_report(self) -> str:
        """The nodes that got some inputs but never fired, with what they wait for, and the frame instances left with
        parked values or missing Enters (the first 20 lines), for the error of a run that ended without its fetches."""
        lines = []
        for (nid, tag), box in sorted(self.inboxes.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            if box is _FIRED or box.fired:
                continue
            node = next(n for n in self.plan.nodes if n.id == nid)
            missing = [f"input {s} ({node.inputs[s].name})" for s, v in enumerate(box.values) if v is None]
            if len(box.control) < len(node.control_inputs):
                missing.append(f"{len(node.control_inputs) - len(box.control)} control input(s)")
            lines.append(f"  {describe_node(node)} at {fmt_tag(tag)} waits for {', '.join(missing)}")
        for inst in self.frames.values():
            if inst.parked:
                lines.append(f"  frame {inst.name!r} at {fmt_tag(inst.parent_tag)} has parked values for "
                             f"iterations {sorted(inst.parked)}")
            if inst.enters_seen < inst.enters_expected:
                lines.append(f"  frame {inst.name!r} at {fmt_tag(inst.parent_tag)} received "
                             f"{inst.enters_seen} of {inst.enters_expected} Enters")
        return "\n".join(lines[:20]) + ("\n  ..." if len(lines) > 20 else "")

    def stranded(self) -> list[tuple[int, Tag]]:
        """(node, tag) pairs that received some inputs but never fired: a stall. In a graph whose every
        node fires at every tag of its frame (all builder-made graphs, [T4-Quiescence]) there are none."""
        return [k for k, b in self.inboxes.items() if b is not _FIRED and not b.fired]

    def result(self, fetches: list[Tensor]) -> list[Any]:
        """The fetched values; DeadFetchError for a dead fetch, DeadlockError when a fetch was never
        produced. Nodes left waiting for part of their inputs do not stop a run whose fetches were all
        produced: the run ends at quiescence, as in TensorFlow's executor (a hand-built loop whose
        Switch reads a non-constant Enter, TensorFlow's ``testLoop_false``, returns the value its Exit
        delivered at iteration 0; iteration 1 is left waiting for the predicate, which never comes).
        ``stats["stranded_inboxes"]`` counts them; builder-made graphs leave none ([T4-Quiescence])."""
        missing = [t for t in fetches if (t.node.id, t.index) not in self.feeds
                   and (t.node.id, t.index) not in self.produced]
        stalled = self.stranded()
        if missing:
            names = ", ".join(t.name for t in missing)
            msg = f"no node can fire, but fetches {names} were never produced. "
            if stalled:
                msg += ("The run stalled: some nodes received only part of their inputs (for example an op "
                        "in iteration k > 0 reading a non-constant Enter, which only delivers to iteration 0). ")
            report = self.blocked_report() or "  (nothing is waiting: the fetches are unreachable)"
            raise DeadlockError(f"{msg}Blocked:\n{report}")
        values = []
        for t in fetches:
            key = (t.node.id, t.index)
            tok = Token(self.feeds[key]) if key in self.feeds else self.produced[key]
            if tok.dead:
                stall = ("; note that the run left nodes waiting for inputs that never came (a loop that "
                         f"ended because its next iteration stalled?):\n{self.blocked_report()}" if stalled else "")
                raise DeadFetchError(dead_fetch_message(t.name, t.node, stall))
            values.append(tok.value)
        return values


_FIRED = Inbox([], fired=True)



def _rule_name(node: Node, rule: str, dead: bool) -> str:
    if node.op in ("Enter", "Exit", "NextIteration", "LoopCond"):
        base = {"Enter": "E-Enter-Const" if node.attrs.get("is_constant") else "E-Enter",
                "Exit": "E-Exit", "NextIteration": "E-Next", "LoopCond": "E-LoopCond"}[node.op]
        if node.op in ("Exit", "NextIteration"):
            return f"{base}-{'Dead' if dead else 'Live'}"
        return base
    return rule


def run_key(graph: Graph, fetches: Sequence[Tensor], fed: Iterable[tuple[int, int]]) -> Any:
    """What a backend's plans of a run are cached and learnt under: the graph's version, the fetches
    and the fed tensors (keys). The interpreter backends' plans, partitions and slot sizes all key so."""
    return (graph.version, tuple((t.node.id, t.index) for t in fetches), frozenset(fed))


class ReferenceBackend:
    """``tn.Session(graph, backend="reference")``: runs each request with a fresh Interpreter."""

    #: runs honour ``RunOptions.memory_budget`` (the interpreter counts what its loops push)
    memory_budgets = True

    def __init__(self, graph: Graph, **options: Any) -> None:
        if options:
            raise ArgumentError(f"the reference backend takes no options, got {sorted(options)}")
        self.graph = graph
        self._plans: dict[Any, Plan] = {}
        #: per plan, the checkpoint slots a recomputed loop gets, learnt from its runs (``turnout.slot_sizes``)
        self.slot_sizes = SlotSizes()

    def plan(self, fetches: list[Tensor], fed: set[tuple[int, int]]) -> Plan:
        """The plan of a run of ``fetches`` with the tensors ``fed``, made once per ``run_key`` and cached."""
        key = run_key(self.graph, fetches, fed)
        if key not in self._plans:
            self._plans[key] = make_plan(self.graph, fetches, fed)
        return self._plans[key]

    def explain(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
                memory_budget: Optional[int] = None) -> RunSchedule:
        """How a run of ``fetches`` executes (``Session.explain``): the interpreter, one step; the notes
        say how many checkpoint slots the next run gives each recomputed loop (``turnout.slot_sizes``)."""
        fed = {(t.node.id, t.index) for t in feeds}
        notes = self.slot_sizes.notes(run_key(self.graph, fetches, fed), self.plan(fetches, fed).nodes)
        return RunSchedule("reference", (Step("interpreter", INTERPRETER_STEP),), notes=notes)

    def run(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
            options: RunOptions) -> RunResult:
        """Run one step on a fresh ``Interpreter`` and return its fetched values (its trace and firing counts too).
        Feeds must be root-frame tensors, and every Placeholder the run needs must be fed."""
        fed = {(t.node.id, t.index): v for t, v in feeds.items()}
        plan = self.plan(fetches, set(fed))
        for t in feeds:
            if plan.frames.node_frame.get(t.node.id, ()) != ():
                raise FeedError(f"cannot feed {t.name}: it is inside a loop frame; feed root-frame tensors only")
        for n in plan.nodes:
            if n.op == "Placeholder" and (n.id, 0) not in fed:
                raise FeedError(f"{describe_node(n)} must be fed a value (feed_dict)")
        slots = self.slot_sizes.plan(run_key(self.graph, fetches, set(fed)), plan.nodes, FIRST_CAPACITY)
        interp = Interpreter(plan, fed, variables, options, slots)
        try:
            interp.run()
        finally:
            self.slot_sizes.take()  # (what a run needed sizes the next, whether or not it finished)
        values = interp.result(fetches)
        return RunResult(
            values=values,
            trace=interp.trace,
            counts=interp.counts,
            stats={"firings": interp.firings, "stranded_inboxes": len(interp.stranded()), **slots.stats,
                   **({} if interp.saved is None else interp.saved.stats())},
        )


def run_graph(graph: Graph, fetches: list[Tensor], feeds: Optional[dict[Tensor, Any]] = None,
              options: Optional[RunOptions] = None) -> RunResult:
    """Convenience: one run without a Session (no persistent variables)."""
    opts = options or RunOptions()
    with allocation_limit(opts.max_tensor_bytes):
        return ReferenceBackend(graph).run(fetches, feeds or {}, {}, opts)
