"""The compiled partition executor (``partition_executor="fast"``): a task's partitions, their compute fused.

Why this shape. Inside a task of a cluster, a partition is a graph with Send and Recv nodes, and the
task runner (``task_runner.TaskRunner``) drives it token by token: messages from other tasks arrive
at any time, with their tags, and every Send must go out as soon as its value exists, or the peers
stall. So the control skeleton of a partition (Switch, Merge, Enter, Exit, NextIteration, LoopCond,
Send, Recv, Variables and stacks) keeps the reference interpreter's rules, which already speak this
protocol. What costs time is elsewhere: the interpreter fires every arithmetic op one by one in Python.
This executor cuts each partition, once per plan, into *fused groups*: connected sets of pure compute
ops (``Primitive.kind == "compute"``) in one frame, and runs each group as ONE jitted JAX function
built from the fast backend's lowering rules (``fast.lowering.LOWERING_RULES``). A loop body's matmuls,
gates and activations then cost one call per iteration instead of one interpreter firing per op.

How a group fires. A group is a node of the dataflow graph in its own right: it is ready at a tag when
every input that comes from outside the group (data and control) has arrived at that tag, and it then
delivers each member's outputs to the consumers outside the group. Two facts make this exact:

* a group is *convex*: no path leaves it and comes back (checked when the group grows, see
  ``fused_groups``), so waiting for all of its inputs can never wait on its own outputs, and fusing
  adds no deadlock;
* deadness is per member, as the rules say: a member whose data or control input is dead makes dead
  outputs ([E-Op-Dead]); the others still compute. When every input is live, the jitted function runs;
  when some are dead (an untaken branch), the members run one by one on the reference kernels.

Errors keep the reference's meaning. A kernel check inside the compiled function (an integer division
by zero, an index out of range) only sets a flag; when a flag is set, the group runs again on the
reference kernels, which raise the reference's ``KernelError`` naming the op and its tag. A group that
cannot be compiled (a shape decided by a run-time value, an op whose lowering refuses its inputs) runs
on the reference kernels from then on; ``stats`` counts both. Results equal the reference interpreter's
up to floating-point rounding (XLA may fuse and reorder arithmetic), as for the fast backend.

A partition with no Send or Recv at all (everything it computes stays on its device: the one-task
layout of a model, or a part of the graph no other device reads) needs no rendezvous, and runs whole as
ONE fast-backend program (``WholePartition``), loops included, as ``backend="fast"`` runs a graph placed
on one device. A traced run or a ``max_firings`` budget asks for firings, which a compiled program does
not make, so that run uses the fused groups; a program the fast backend cannot compile uses them from
then on.

What is not compiled: TensorArray ops (their values are the interpreter's per-slot tuples, not the fast
backend's buffers), ``Sleep`` (a host wait, kept where it is), ops without inputs (a ``Const`` joins
a group when a control input makes it fire at every tag), and groups of one op (nothing to fuse).
In a partition that sends or receives, a loop still runs its control nodes on the interpreter, one
iteration at a time, even when its whole body lies in the partition; compiling such a loop whole (its
Enter values in, its Exit values out) is not done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import jax
import numpy as np

from turnout.devices.executor import PartitionInterpreter, partition_plan
from turnout.devices.fused_group import Group, Key, compile_group
from turnout.devices.jax_device import process_devices
from turnout.devices.names import parse
from turnout.devices.partition import Partition
from turnout.devices.partition_executors import ExecutorKind
from turnout.devices.rendezvous import Rendezvous
from turnout.errors import ExecutionError, PlacementError, TurnoutError, UnsupportedError, describe_node
from turnout.fast.backend import FastBackend
from turnout.fast.call_spec import CallSpec, copy_static
from turnout.fast.guards import asks_for_firings
from turnout.fast.values import DEAD as FAST_DEAD
from turnout.frames import kahn_order, node_id, same_iteration_preds
from turnout.graph import Node
from turnout.kernels import run_kernel
from turnout.primitives import PRIMITIVES
from turnout.reference.executor import Plan
from turnout.reference.rules import DEAD, Tag, Token, _where
from turnout.reference.rules import _control_token as control_token
from turnout.reference.trace import fmt_tag
from turnout.session import RunOptions
from turnout.slot_sizes import SlotPlan

#: the rule name a fused group's ready item carries (and its trace events do not: members keep E-Op)
FUSED = "E-Fused"

#: compute primitives kept out of groups, with the reason
NOT_FUSED: dict[str, str] = {
    "Sleep": "a host wait: it stays a firing of its own, where the program put it",
}



def fusible(node: Node) -> bool:
    """Whether ``node`` may join a fused group: a pure compute op with inputs, or a ``Const`` with a
    control input (inside a loop or a branch it fires at every tag, like an op: the gradient's loops
    hold many), with no TensorArray value on its edges (the interpreter's TensorArrays are not the fast
    backend's), and not in ``NOT_FUSED``."""
    prim = PRIMITIVES.get(node.op)
    if node.op == "Const":
        if not node.control_inputs:
            return False
    elif prim is None or prim.kind != "compute" or node.op in NOT_FUSED or node.op.startswith("TensorArray"):
        return False
    elif not node.inputs:
        return False
    return all(t.spec.elem_dtype is None for t in (*node.inputs, *node.outputs))


@dataclass
class Prepared:
    """What ``prepare`` computes once per partition: the interpreter's plan, with the edges inside groups
    removed, and the groups (whose compiled functions are kept across runs); for a partition with no
    Send or Recv, the fast backend that runs it whole (``whole``) and why it stopped trying, if it did."""

    plan: Plan
    groups: list[Group]
    group_of: dict[int, Group]
    part: Optional[Partition] = None
    whole: Any = None
    whole_declined: Optional[str] = None
    #: the JAX device its compiled code runs on (``_jax_device``; None: the process's default)
    jdev: Any = None


# ---- finding the groups -----------------------------------------------------------------------------
class _Preds:
    """Predecessors for grouping: the same-iteration inputs (``frames.same_iteration_preds``), and for a
    Recv, the Sends of this partition whose tokens may come back to it through other devices
    (``Partition.waits``)."""

    def __init__(self, plan: Plan, waits: dict[int, frozenset[int]]) -> None:
        by_id = {n.id: n for n in plan.nodes}
        self.waits = {r: [by_id[s] for s in ss if s in by_id] for r, ss in waits.items()}

    def __call__(self, n: Node) -> list[Node]:
        return same_iteration_preds(n) + self.waits.get(n.id, [])


def fused_groups(plan: Plan, min_size: int = 2, waits: Optional[dict[int, frozenset[int]]] = None) -> list[list[Node]]:
    """The fused groups of a partition's plan: maximal-by-greedy connected sets of ``fusible`` nodes of
    one frame, each convex.

    Nodes are visited in topological order; a fusible node joins the groups of its fusible producers
    in the same frame (all of them when their union stays convex, else the largest one that does), or
    starts a group. Convexity of a set U is checked on its members' direct predecessors: a path that
    leaves U and comes back enters its last member from a predecessor outside U that descends from U,
    so U is convex exactly when no such predecessor has an ancestor in U (ancestor sets are bitsets).
    ``waits`` (``Partition.waits``) adds the paths through other devices; a partition whose nodes cannot
    be ordered with them is not fused at all."""
    all_preds = _Preds(plan, waits or {})
    order = kahn_order(plan.nodes, all_preds, node_id)
    if len(order) != len(plan.nodes):
        return []
    bit = {n.id: 1 << i for i, n in enumerate(order)}
    frame = plan.frames.node_frame
    anc: dict[int, int] = {}
    members: dict[int, list[Node]] = {}  # group number -> members in topological order
    group_of: dict[int, int] = {}
    gbits: dict[int, int] = {}
    fresh = itertools.count()

    def preds(n: Node) -> list[Node]:
        return [p for p in all_preds(n) if p.id in bit]

    def convex(nodes: Sequence[Node], ubits: int) -> bool:
        return not any(anc[p.id] & ubits for m in nodes for p in preds(m) if not bit[p.id] & ubits)

    for n in order:
        a = 0
        for p in preds(n):
            a |= anc[p.id] | bit[p.id]
        anc[n.id] = a
        if not fusible(n) or n.id not in frame:
            continue
        cands = sorted({group_of[t.node.id] for t in n.inputs if t.node.id in group_of
                        and frame.get(t.node.id) == frame[n.id]}, key=lambda g: -len(members[g]))
        chosen: list[int] = []
        ubits = bit[n.id]
        for g in cands:
            ubits |= gbits[g]
        if cands and convex([m for g in cands for m in members[g]] + [n], ubits):
            chosen = cands
        else:
            for g in cands:
                if convex([*members[g], n], gbits[g] | bit[n.id]):
                    chosen = [g]
                    break
        if chosen:
            target = chosen[0]
            for g in chosen[1:]:
                for m in members[g]:
                    group_of[m.id] = target
                members[target].extend(members.pop(g))
                gbits[target] |= gbits.pop(g)
            members[target].append(n)
            gbits[target] |= bit[n.id]
            group_of[n.id] = target
        else:
            g = next(fresh)
            members[g] = [n]
            gbits[g] = bit[n.id]
            group_of[n.id] = g
    pos = {n.id: i for i, n in enumerate(order)}
    return [sorted(ms, key=lambda m: pos[m.id]) for ms in members.values() if len(ms) >= min_size]


def _group(gid: int, nodes: list[Node], plan: Plan) -> Group:
    inside = {m.id for m in nodes}
    slot_index: dict[tuple[int, int], int] = {}
    for m in nodes:
        for s, t in enumerate(m.inputs):
            if t.node.id not in inside:
                slot_index[(m.id, s)] = len(slot_index)
    outside_controls = sum(1 for m in nodes for c in m.control_inputs if c.id not in inside)
    returns = []
    root = not plan.frames.node_frame.get(nodes[0].id, ())  # a root-frame group: any output may be fetched
    for m in nodes:
        for i in range(len(m.outputs)):
            readers = plan.consumers.get((m.id, i), [])
            if root or not readers or any(r.id not in inside for r, _ in readers):
                returns.append((m.id, i))
    return Group(gid, tuple(nodes), slot_index, tuple(returns), len(slot_index) + outside_controls)


def prepare(part: Partition, min_size: int = 2) -> Prepared:
    """The reference plan of ``part`` with its fused groups: edges inside a group are removed from the
    plan (the group computes them), so members never fire one by one."""
    plan = partition_plan(part.graph, frozenset(ph.id for ph in part.feeds.values()))
    groups = [_group(i, ms, plan) for i, ms in enumerate(fused_groups(plan, min_size, part.waits))]
    group_of = {m.id: g for g in groups for m in g.members}

    def outside(consumer: Node, producer: int) -> bool:
        g = group_of.get(producer)
        return g is None or group_of.get(consumer.id) is not g

    consumers = {k: [(c, s) for c, s in v if outside(c, k[0])] for k, v in plan.consumers.items()}
    controls = {k: [c for c in v if outside(c, k)] for k, v in plan.control_consumers.items()}
    alone = not any(n.op in ("Send", "Recv") for n in part.graph.nodes)
    return Prepared(dataclasses.replace(plan, consumers=consumers, control_consumers=controls), groups, group_of,
                    part, whole_declined=None if alone else "it sends or receives",
                    jdev=_jax_device(part.device) if groups or alone else None)


# ---- the executor -----------------------------------------------------------------------------------
#: a member output the compiled function does not return (read only inside its group): never emitted
_UNSET = Token(None)

def _token(v: Any) -> Token:
    """A group's output as the interpreter's token: a value dead while tracing is a dead token."""
    return DEAD if v is FAST_DEAD else Token(np.asarray(v))


class _Box:
    """A group's inbox at one tag: outside data tokens by argument position, control tokens by member."""

    __slots__ = ("values", "controls", "arrived")

    def __init__(self, n: int) -> None:
        self.values: list[Optional[Token]] = [None] * n
        self.controls: dict[int, list[Token]] = {}
        self.arrived = 0


def _jax_device(device: str) -> Any:
    """Where a partition's groups run: the process's default device for a CPU partition (a task's CPU
    devices share its host), else the accelerator of that index, which must exist in the task."""
    spec = parse(device)
    if spec.type.upper() == "CPU":
        return None
    have = process_devices(spec.type)
    if spec.index >= len(have):
        raise PlacementError(f"device {spec.name}: this task's process has {len(have)} JAX {spec.type} device(s)")
    return have[spec.index]


class CompiledPartition(PartitionInterpreter):
    """The reference interpreter of one partition, with its fused groups run as jitted functions."""

    def __init__(self, device: str, prepared: Prepared, feeds: dict[Key, Any], variables: dict[str, np.ndarray],
                 options: RunOptions, rv: Rendezvous, clock: itertools.count[int], slots: SlotPlan) -> None:
        super().__init__(device, prepared.plan, feeds, variables, options, rv, clock, slots)
        self.prepared = prepared
        self.group_of = prepared.group_of
        self.gboxes: dict[tuple[int, Tag], _Box] = {}
        self.jdev = prepared.jdev
        #: this run's counts: group calls compiled, interpreted and wholly dead, compilations, reruns after a
        #: failed check
        self.stats = {"groups": len(prepared.groups), "fused_ops": len(prepared.group_of), "compiled_calls": 0,
                      "interpreted_calls": 0, "dead_calls": 0, "compiles": 0, "check_reruns": 0}

    def deliver(self, node: Node, slot: int, tag: Tag, tok: Token) -> None:
        """``Interpreter.deliver`` for a node outside any fused group; a token for a group's member goes into the
        group's inbox at ``tag``, and the group's head is made ready (rule ``E-Fused``) once every input from outside
        the group has arrived."""
        g = self.group_of.get(node.id)
        if g is None:
            super().deliver(node, slot, tag, tok)
            return
        key = (g.gid, tag)
        box = self.gboxes.get(key)
        if box is None:
            box = self.gboxes[key] = _Box(len(g.slot_index))
        if slot < 0:
            box.controls.setdefault(node.id, []).append(tok)
        else:
            i = g.slot_index[(node.id, slot)]
            if box.values[i] is not None:
                raise ExecutionError(f"{describe_node(node)} received input {slot} twice at {fmt_tag(tag)}")
            box.values[i] = tok
        box.arrived += 1
        if box.arrived == g.expected:
            self._make_ready(g.head, tag, FUSED)

    def fire(self, node: Node, tag: Tag, rule: str) -> None:
        """``Interpreter.fire``, or, for rule ``E-Fused``, the whole group at once: each member marked fired exactly
        once, the group run compiled (or interpreted), each member's firing counted and traced as ``E-Op`` /
        ``E-Op-Dead``, and its outputs routed as the interpreter routes them."""
        if rule != FUSED:
            super().fire(node, tag, rule)
            return
        g = self.group_of[node.id]
        box = self.gboxes.pop((g.gid, tag))
        for m in g.members:
            if (m.id, tag) in self.fired:
                raise ExecutionError(f"{describe_node(m)} fired twice at {fmt_tag(tag)} (exactly-once violated)")
            self.fired.add((m.id, tag))
        outs = self._run_group(g, tag, box)
        self.firings += len(g.members) - 1
        for m in g.members:
            toks = outs[m.id]
            self.counts[(m.name, tag)] = self.counts.get((m.name, tag), 0) + 1
            dead = bool(toks) and all(t.dead for t in toks)
            if self.trace is not None:
                self._trace_event(m.name, m.op, tag, dead, "E-Op-Dead" if dead else "E-Op")
            for i, tok in enumerate(toks):
                if tok is not _UNSET:
                    self.emit(m, i, tag, tok)
            self.emit_control(m, tag, control_token(toks))
        if tag:
            inst = self.frames.get((tag[:-1], tag[-1][0]))
            if inst is not None:
                inst.ready[tag[-1][1]] -= 1
                self.check_retire(inst)

    # ---- running a group ----------------------------------------------------------------------------
    def _dead_members(self, g: Group, box: _Box) -> set[int]:
        dead: set[int] = set()
        for m in g.members:
            if any(t.dead for t in box.controls.get(m.id, ())) or any(c.id in dead for c in m.control_inputs):
                dead.add(m.id)
                continue
            for s, t in enumerate(m.inputs):
                j = g.slot_index.get((m.id, s))
                if (box.values[j].dead if j is not None else t.node.id in dead):  # type: ignore[union-attr]
                    dead.add(m.id)
                    break
        return dead

    def _run_group(self, g: Group, tag: Tag, box: _Box) -> dict[int, list[Token]]:
        dead = self._dead_members(g, box)
        if len(dead) == len(g.members):  # an untaken branch, a loop's last test: nothing to compute
            self.stats["dead_calls"] += 1
            return {m.id: [DEAD] * len(m.outputs) for m in g.members}
        if not dead and g.interpreted_reason is None:
            got = self._compiled(g, box)
            if got is not None:
                return got
        return self._interpreted(g, tag, box, dead)

    def _compiled(self, g: Group, box: _Box) -> Optional[dict[int, list[Token]]]:
        args = [t.value for t in box.values]  # type: ignore[union-attr]
        try:
            with jax.enable_x64(True):
                if g.fn is None:
                    g.fn = compile_group(g)
                    self.stats["compiles"] += 1
                with jax.default_device(self.jdev) if self.jdev is not None else contextlib.nullcontext():
                    res, tag = g.fn(*args)
                spec: CallSpec = tag.spec
                got, flags, _ = spec.split(res)
                if flags is not None and int(np.asarray(flags)[0]):
                    self.stats["check_reruns"] += 1
                    return None  # the reference kernels raise the error, naming the op and its tag
        except (TurnoutError, TypeError, ValueError, IndexError, KeyError) as e:
            g.interpreted_reason = f"{type(e).__name__}: {e}"
            return None
        self.stats["compiled_calls"] += 1
        got.update((k, copy_static(v)) for k, v in spec.static.items())
        return {m.id: [_token(got[(m.id, i)]) if (m.id, i) in got else _UNSET
                       for i in range(len(m.outputs))] for m in g.members}

    def _interpreted(self, g: Group, tag: Tag, box: _Box, dead: set[int]) -> dict[int, list[Token]]:
        self.stats["interpreted_calls"] += 1
        env: dict[Key, Any] = {}
        outs: dict[int, list[Token]] = {}
        for m in g.members:
            if m.id in dead:
                outs[m.id] = [DEAD] * len(m.outputs)
                continue
            ins = [box.values[g.slot_index[(m.id, s)]].value if (m.id, s) in g.slot_index  # type: ignore[union-attr]
                   else env[(t.node.id, t.index)] for s, t in enumerate(m.inputs)]
            vals = run_kernel(m.op, ins, m.attrs, lambda m=m: _where(m, tag))  # type: ignore[misc]
            for i, v in enumerate(vals):
                env[(m.id, i)] = v
            outs[m.id] = [Token(v) for v in vals]
        return outs

    # ---- reports ------------------------------------------------------------------------------------
    def stranded(self) -> list[tuple[int, Tag]]:
        """Groups that received part of their inputs count as stranded, as nodes do."""
        return super().stranded() + [(self.prepared.groups[gid].head.id, tag) for gid, tag in self.gboxes]

    def blocked_report(self) -> str:
        """``Interpreter.blocked_report``, with the fused groups still waiting for inputs from outside the group."""
        lines = [super().blocked_report()] if super().blocked_report() else []
        for (gid, tag), box in sorted(self.gboxes.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            g = self.prepared.groups[gid]
            lines.append(f"  {g.describe()} at {fmt_tag(tag)}: has {box.arrived} of its {g.expected} inputs "
                         "from outside the group")
        return "\n".join(lines)


# ---- a partition that talks to no other: the fast backend, whole ------------------------------------
class WholePartition:
    """A partition with no Send or Recv needs nothing from the rendezvous: it runs as ONE fast-backend
    program (``fast.backend.FastBackend``, kept in ``Prepared.whole`` across runs), as the fast
    partitioned executor runs a graph placed on one device. Where the fast backend cannot run it
    (``UnsupportedError``: a program it cannot compile, a ``max_firings`` budget, a traced run), the
    partition runs on ``CompiledPartition`` from then on, and this object hands the runner that one's
    queue, mailbox and results."""

    def __init__(self, device: str, prepared: Prepared, feeds: dict[Key, Any], variables: dict[str, np.ndarray],
                 options: RunOptions, rv: Rendezvous, clock: itertools.count[int], slots: SlotPlan) -> None:
        self.device = device
        self.prepared = prepared
        self.args = (device, prepared, feeds, variables, options, rv, clock, slots)
        #: what the whole program's run says of its checkpoint slots (the fast backend sizes them itself)
        self._slot_stats: dict[str, Any] = {}
        self.feeds = feeds
        self.inner: Optional[CompiledPartition] = None
        self._produced: dict[Key, Token] = {}
        self._mailbox: deque[tuple[Node, Tag, str]] = deque()
        self.stats = {"groups": 0, "fused_ops": 0, "compiled_calls": 0, "interpreted_calls": 0, "dead_calls": 0,
                      "compiles": 0, "check_reruns": 0, "whole_runs": 0}

    # the runner's view: this object's until it hands over to a CompiledPartition
    @property
    def queue(self) -> Any:
        """The ready items: the ``CompiledPartition``'s once handed over, else none (a whole run leaves nothing to
        fire)."""
        return self.inner.queue if self.inner is not None else ()

    @property
    def mailbox(self) -> Any:
        """The rendezvous's wake-ups: the ``CompiledPartition``'s once handed over, else an empty mailbox (a whole
        run has no Send or Recv)."""
        return self.inner.mailbox if self.inner is not None else self._mailbox

    @property
    def produced(self) -> dict[Key, Token]:
        """The root-frame tokens the run produced: the fetches of the whole run, or the ``CompiledPartition``'s."""
        return self.inner.produced if self.inner is not None else self._produced

    @property
    def firings(self) -> int:
        """The firings counted against ``max_firings``: the ``CompiledPartition``'s, 0 for a whole run (which is
        never asked for a firing budget)."""
        return self.inner.firings if self.inner is not None else 0

    @property
    def counts(self) -> dict[tuple[str, Tag], int]:
        """The firing counts per (node name, tag): the ``CompiledPartition``'s, none for a whole run."""
        return self.inner.counts if self.inner is not None else {}

    @property
    def trace(self) -> Any:
        """The ``CompiledPartition``'s trace, None for a whole run (a traced run is never run whole)."""
        return self.inner.trace if self.inner is not None else None

    @property
    def saved(self) -> Any:
        """The interpreter's count of saved values (``memory_plan.SavedBytes``) once the partition runs
        on ``CompiledPartition``; run whole, the fast backend counts its stacks itself, and its stats
        say what it held (``peak_device_stack_bytes``)."""
        return self.inner.saved if self.inner is not None else None

    @property
    def slot_stats(self) -> dict[str, Any]:
        """The checkpoint slots the run gave: the fast backend's own sizing (``turnout.slot_sizes``,
        learnt across this partition's runs) run whole, the task's ``SlotPlan`` once on
        ``CompiledPartition``."""
        return self.inner.slot_stats if self.inner is not None else self._slot_stats

    def start(self) -> None:
        """Run the partition whole, or hand it to ``CompiledPartition``."""
        p = self.prepared
        if p.whole_declined is None and not _asks_for_firings(self.args[4]):
            try:
                self._run_whole()
                return
            except UnsupportedError as e:  # the program cannot be compiled: never try again
                p.whole_declined = str(e)
        self.inner = CompiledPartition(*self.args)
        self.inner.start()
        self.stats = self.inner.stats

    def _run_whole(self) -> None:
        p = self.prepared
        assert p.part is not None
        _, _, feeds, variables, options, _, _, _ = self.args
        if p.whole is None:
            p.whole = FastBackend(p.part.graph, fallback=False)
        nodes = {n.id: n for n in p.part.graph.nodes}
        fetches = [nodes[nid].outputs[i] for nid, i in p.part.fetches if (nid, i) not in feeds]
        fed = {nodes[nid].outputs[i]: v for (nid, i), v in feeds.items()}
        before = p.whole.compile_count
        if p.jdev is not None:
            with jax.default_device(p.jdev):
                result = p.whole.run(fetches, fed, variables, options)
        else:
            result = p.whole.run(fetches, fed, variables, options)
        for t, v in zip(fetches, result.values, strict=True):
            self._produced[(t.node.id, t.index)] = Token(v)
        self._slot_stats = {k: result.stats[k] for k in ("checkpoint_slots", "checkpoint_bytes") if k in result.stats}
        self.stats["whole_runs"] += 1
        self.stats["peak_device_stack_bytes"] = int(result.stats.get("peak_device_stack_bytes", 0))
        self.stats["compiles"] += p.whole.compile_count - before

    def drain(self) -> None:
        """``CompiledPartition.drain`` once handed over; a whole run has no wake-ups."""
        if self.inner is not None:
            self.inner.drain()

    def step(self) -> None:
        """Fire one ready item of the ``CompiledPartition``; the runner calls it only while ``queue`` holds some,
        which a whole run never does."""
        assert self.inner is not None, "a partition run whole has nothing left to fire"
        self.inner.step()

    def waiting_report(self) -> list[str]:
        """The nodes still waiting, as ``PartitionInterpreter.waiting_report``; none for a whole run."""
        return self.inner.waiting_report() if self.inner is not None else []


def _asks_for_firings(options: RunOptions) -> bool:
    """A traced run (whose trace lists firings) or a ``max_firings`` budget: what a whole compiled program
    cannot give, so that run goes to ``CompiledPartition`` (later runs try the whole program again)."""
    return options.trace or asks_for_firings(options)


def make(device: str, prepared: Prepared, feeds: dict[Key, Any], variables: dict[str, np.ndarray],
         options: RunOptions, rv: Rendezvous, clock: itertools.count[int], slots: SlotPlan) -> Any:
    """One run's executor of a prepared partition: whole on the fast backend when it talks to no other
    partition (which sizes its checkpoint slots itself), else the interpreter with fused groups, whose
    slots are ``slots``."""
    if prepared.whole_declined is None:
        return WholePartition(device, prepared, feeds, variables, options, rv, clock, slots)
    return CompiledPartition(device, prepared, feeds, variables, options, rv, clock, slots)


def describe(part: Partition) -> str:
    """What runs ``part``: one fast-backend program where it talks to no other partition (unless the
    backend cannot compile it), else the interpreter with its arithmetic fused into jitted groups."""
    if not any(n.op in ("Send", "Recv") for n in part.graph.nodes):
        return "one fast-backend program (it talks to no other partition)"
    return "the interpreter, its arithmetic fused into jitted groups"


FAST = ExecutorKind("fast", prepare, make, memory_budgets=True, describe=describe)
