"""The structured semantics ([S-Cond], [S-Case], [S-While], [S-Scan]) made executable.

Why a second evaluator: the dataflow interpreters (``turnout.reference``, ``semantics.smallstep``)
give a graph its meaning token by token. This module gives a *builder-made* graph its meaning the way
its Python text reads: a ``cond`` is an ``if``, a ``while_loop`` is a ``while``. ``[T2-Adequacy]`` and
``[T5-Deadness-Soundness]`` say the two must agree on values, stores and which ops run live at which
tag, so the tests compare them. For that comparison to mean anything this module must not reuse the
dataflow machinery: it imports nothing from ``turnout.reference`` or ``turnout.fast`` and reads the
control flow only from the structured form the builders leave on ``graph.contexts``. It shares with
the interpreters only ``turnout/`` (graph, contexts, kernels).

How it works, in one paragraph. ``StructuredForm`` groups the graph into *regions* (the root, each
cond branch, each loop frame) and, inside a region, into *items*: a plain op, a whole ``cond``
(its Switches, both branches, its Merges) or a whole ``while_loop`` (its Enters, its frame, its
Exits). Items of a region are run in a topological order that follows data and control edges and,
between unordered items, program order (node creation order) -- which is how the structured rules
order effects on the stores. A cond item evaluates its predicate and runs only the taken branch
([S-Cond]; ``case`` is a chain of conds, [S-Case]); a loop item is a Python ``while`` over its
iterations ([S-While]; ``scan``/``map_fn``/``foldl`` are loops over TensorArrays, [S-Scan]). Only
the ancestors of the fetches take part, as in TensorFlow and the reference interpreter.

The walk over regions (``Walker``) is shared with the z3 encodings in ``semantics.symbolic``, which
replace values by formulas.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import numpy as np

from turnout import primitives
from turnout.control_flow.contexts import CondContext, CondInfo, ControlFlowContext, WhileContext
from turnout.errors import (
    DeadFetchError,
    ExecutionError,
    FeedError,
    KernelError,
    NonTerminationError,
    UnsupportedError,
    ValidationError,
    dead_fetch_message,
    describe_node,
)
from turnout.graph import Graph, Node, Tensor
from turnout.kernels import run_kernel, truth
from turnout.tables import registrar

Tag = tuple[tuple[str, int], ...]

__all__ = ["CondItem", "Item", "StructuredForm", "StructuredResult", "Tag", "Walker", "WhileItem", "evaluate"]


# ---------------------------------------------------------------------------------------------------
# The structured form: regions and items
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class CondItem:
    """One ``cond`` seen from the region that contains it: pivot Switch, capture Switches, both
    branches and the Merges."""

    info: CondInfo


@dataclass(frozen=True, eq=False)
class WhileItem:
    """One ``while_loop`` seen from the region that contains it: Enters, the frame, the Exits."""

    ctx: WhileContext


Item = Union[Node, CondItem, WhileItem]
Region = Optional[ControlFlowContext]  # None is the root region

_HAND_BUILT = (
    "is not part of a cond or while_loop made by the builders; hand-built control flow has no structured "
    "form (run it with the reference interpreter or semantics.smallstep instead)"
)


class StructuredForm:
    """The regions and items of the part of ``graph`` that ``targets`` need.

    ``targets`` (nodes) and their ancestors through data, back and control edges take part; a fed
    tensor cuts the walk. ``targets=None`` keeps every node.
    """

    def __init__(self, graph: Graph, targets: Iterable[Node] | None = None,
                 fed: frozenset[tuple[int, int]] = frozenset()) -> None:
        self.graph = graph
        self.needed: dict[int, Node] = self._ancestors(graph, targets, fed)
        self.cond_of: dict[int, CondInfo] = {}  # Switch / Merge node id -> its cond
        self.while_of_exit: dict[int, WhileContext] = {}
        self.while_of_enter: dict[int, WhileContext] = {}
        self.loop_merges: set[int] = set()
        self.loop_switches: set[int] = set()
        self.body_inputs: set[int] = set()
        self._index_contexts()
        self._items: dict[tuple[int, str], list[Item]] = {}
        self._macro: dict[int, CondItem | WhileItem] = {}
        self._pred_ids: dict[int, set[int]] = {}
        self._cache: dict[tuple[str, int], list[Any]] = {}

    # -- which nodes take part ---------------------------------------------------------------------
    @staticmethod
    def _ancestors(graph: Graph, targets: Iterable[Node] | None, fed: frozenset[tuple[int, int]]) -> dict[int, Node]:
        if targets is None:
            return {n.id: n for n in graph.nodes}
        keep: dict[int, Node] = {}
        stack = list(targets)
        while stack:
            n = stack.pop()
            if n.id in keep:
                continue
            keep[n.id] = n
            w = in_loop(n)
            if w is not None and w.pivot is not None:
                stack.append(w.pivot)  # a loop that takes part runs its test ([S-While])
            stack.extend(t.node for t in n.raw_inputs if isinstance(t, Tensor) and (t.node.id, t.index) not in fed)
            # A fed Placeholder stands for its value: a control dependency on it is already satisfied.
            stack.extend(c for c in n.control_inputs if not (c.op == "Placeholder" and (c.id, 0) in fed))
        return keep

    def _index_contexts(self) -> None:
        consumers: dict[int, list[Node]] = {}
        for n in self.graph.nodes:
            for t in n.raw_inputs:
                if isinstance(t, Tensor):
                    consumers.setdefault(t.node.id, []).append(n)
            for c in n.control_inputs:
                consumers.setdefault(c.id, []).append(n)
        for ctx in self.graph.contexts:
            if isinstance(ctx, WhileContext):
                for lv in ctx.loop_vars:
                    self.loop_merges.add(lv.merge.id)
                    for part, ids in ((lv.switch, self.loop_switches), (lv.body_input, self.body_inputs)):
                        if part is not None:
                            ids.add(part.id)
                    if lv.exit is not None:
                        self.while_of_exit[lv.exit.id] = ctx
            elif isinstance(ctx, CondContext) and ctx.branch == 1:
                info = ctx.info
                self.cond_of[info.pivot_switch.id] = info
                for m in info.merges:
                    self.cond_of[m.id] = info
        for n in self.graph.nodes:
            home = n.context
            if n.op == "Enter" and isinstance(home, WhileContext) and n.attrs.get("frame_name") == home.frame_name:
                self.while_of_enter[n.id] = home
            elif n.op == "Switch" and n.id not in self.cond_of:
                # [S-Cond] lowering: an outside value read by a branch goes through Switch(value, pred);
                # its consumers are nodes of the branch itself, or the cond's Merges.
                for c in consumers.get(n.id, []):
                    if c.id in self.cond_of and c.op == "Merge":
                        self.cond_of[n.id] = self.cond_of[c.id]
                        break
                    cc = c.context
                    if c.op == "Enter" and isinstance(cc, WhileContext):
                        cc = cc.outer  # a loop on the branch enters the captured value
                    if isinstance(cc, CondContext) and cc.outer is n.context:
                        self.cond_of[n.id] = cc.info
                        break

    # -- items -------------------------------------------------------------------------------------
    def macro(self, ctx: ControlFlowContext) -> CondItem | WhileItem:
        """The item that stands for the construct ``ctx`` belongs to (a cond for a branch context)."""
        key = id(ctx.info) if isinstance(ctx, CondContext) else id(ctx)
        if key not in self._macro:
            self._macro[key] = CondItem(ctx.info) if isinstance(ctx, CondContext) else WhileItem(ctx)  # type: ignore[arg-type]
        return self._macro[key]

    def _owner(self, n: Node) -> tuple[Region, Item]:
        """The region a node is placed in, and its item there."""
        if n.id in self.cond_of:
            info = self.cond_of[n.id]
            return info.branches[1].outer, self.macro(info.branches[1])
        if n.id in self.while_of_exit:
            w = self.while_of_exit[n.id]
            return w.outer, self.macro(w)
        if n.id in self.while_of_enter:
            w = self.while_of_enter[n.id]
            return w.outer, self.macro(w)
        return n.context, n

    def item_in(self, n: Node, region: Region) -> Item | None:
        """The item of ``region`` that ``n`` belongs to, or None when ``n`` is outside ``region``."""
        reg, it = self._owner(n)
        if reg is region:
            return it
        c = reg
        while c is not None:
            if c.outer is region:
                return self.macro(c)
            c = c.outer
        return None

    def items(self, region: Region, part: str = "all") -> list[Item]:
        """The items of ``region`` in execution order. For a loop frame, ``part`` is ``"test"`` (the
        condition: Merges, the predicate, LoopCond, Switches) or ``"body"``."""
        key = (-1 if region is None else id(region), part)
        if key not in self._items:
            self._items[key] = self._order(region, part)
        return self._items[key]

    def _part_of(self, region: WhileContext, n: Node) -> str:
        key = id(region)
        if key not in self._pred_ids:
            self._pred_ids[key] = {m.id for m in region.pred_nodes}
        return "test" if n.id in self._pred_ids[key] and n.id not in self.body_inputs else "body"

    def _order(self, region: Region, part: str) -> list[Item]:
        members: dict[int, Item] = {}
        first: dict[int, int] = {}
        item_of: dict[int, Item] = {}
        parts: dict[int, set[str]] = {}
        for n in sorted(self.needed.values(), key=lambda n: n.id):
            it = self.item_in(n, region)
            if it is None:
                continue
            k = id(it)
            members[k] = it
            first.setdefault(k, n.id)
            item_of[n.id] = it
            if isinstance(region, WhileContext) and self._owner(n)[0] is region:
                parts.setdefault(k, set()).add(self._part_of(region, n))
        if isinstance(region, WhileContext):
            keep = {k for k in members if (("test" in parts.get(k, {"body"})) == (part == "test"))}
            members = {k: v for k, v in members.items() if k in keep}
        succ: dict[int, set[int]] = {k: set() for k in members}
        indeg = dict.fromkeys(members, 0)
        for nid, it in item_of.items():
            a = id(it)
            if a not in members:
                continue
            n = self.needed[nid]
            preds = [t.node for t in n.raw_inputs if isinstance(t, Tensor)
                     and not (n.op == "Merge" and t.node.op == "NextIteration")]
            for p in [*preds, *n.control_inputs]:
                b = item_of.get(p.id)
                if b is None or id(b) == a or id(b) not in members or a in succ[id(b)]:
                    continue
                succ[id(b)].add(a)
                indeg[a] += 1
        ready = [(first[k], k) for k, d in indeg.items() if d == 0]
        heapq.heapify(ready)
        order: list[Item] = []
        while ready:
            _, k = heapq.heappop(ready)
            order.append(members[k])
            for s in succ[k]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, (first[s], s))
        if len(order) != len(members):
            raise ValidationError("the structured form of the graph has a cycle outside a loop's back edge",
                                  "W-Cycle-Through-Next")
        return order

    def _cached(self, what: str, obj: Any, make: Callable[[], list[Any]]) -> list[Any]:
        key = (what, id(obj))
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def _region_nodes(self, region: Region) -> list[Node]:
        return [n for n in sorted(self.needed.values(), key=lambda n: n.id) if n.context is region]

    def switches(self, info: CondInfo) -> list[Node]:
        """The cond's Switch nodes that take part (the pivot Switch and the capture Switches)."""
        return self._cached("switches", info, lambda: [
            n for n in self._region_nodes(info.branches[1].outer)
            if n.op == "Switch" and self.cond_of.get(n.id) is info])

    def merges(self, info: CondInfo) -> list[Node]:
        """The cond's Merges that take part in the run."""
        return self._cached("merges", info, lambda: [m for m in info.merges if m.id in self.needed])

    def enters(self, ctx: WhileContext) -> list[Node]:
        """The loop's Enter nodes that take part in the run."""
        return self._cached("enters", ctx, lambda: [n for n in self._region_nodes(ctx) if n.id in self.while_of_enter])

    def exits(self, ctx: WhileContext) -> list[Node]:
        """The Exits of the loop's variables that take part in the run."""
        return self._cached("exits", ctx, lambda: [
            lv.exit for lv in ctx.loop_vars if lv.exit is not None and lv.exit.id in self.needed])

    def loop_vars(self, ctx: WhileContext) -> list[Any]:
        """The loop's variables whose Merge takes part in the run."""
        return self._cached("loop_vars", ctx, lambda: [lv for lv in ctx.loop_vars if lv.merge.id in self.needed])


def in_loop(node: Node) -> WhileContext | None:
    """The innermost loop whose frame holds ``node`` (its Enters belong to it, its Exits to the parent)."""
    c = node.context
    return c.while_context if c is not None else None


# ---------------------------------------------------------------------------------------------------
# The walk over regions, shared with the z3 encodings
# ---------------------------------------------------------------------------------------------------
class Walker(ABC):
    """Runs the items of a region in order; subclasses say what a node, a cond and a loop mean.

    Values live in ``env[tag][(node id, output index)]``; a missing entry is a dead value.
    """

    def __init__(self, form: StructuredForm) -> None:
        self.form = form
        self.env: dict[Tag, dict[tuple[int, int], Any]] = {}

    def read(self, t: Tensor, tag: Tag) -> Any:
        """The value of ``t`` at ``tag``; an entry not written yet is an internal error (the items run in dependency
        order)."""
        try:
            return self.env[tag][(t.node.id, t.index)]
        except KeyError:
            raise ExecutionError(
                f"internal: the structured evaluator read {t.name} at {fmt_tag(tag)} before computing it"
            ) from None

    def write(self, node: Node, index: int, tag: Tag, value: Any) -> None:
        """Set output ``index`` of ``node`` at ``tag`` to ``value``."""
        self.env.setdefault(tag, {})[(node.id, index)] = value

    def loop_entry(self, ctx: WhileContext, tag: Tag) -> tuple[list[Node], dict[int, Any], list[Any], list[Any]]:
        """What a loop instance starts from: its Enter nodes, the values they enter, its loop variables
        and their initial values."""
        enters = self.form.enters(ctx)
        entered = {e.id: self.read(e.inputs[0], tag) for e in enters}
        lvs = self.form.loop_vars(ctx)
        return enters, entered, lvs, [entered[lv.enter.id] for lv in lvs]

    def seed_iteration(self, tj: Tag, enters: list[Node], entered: dict[int, Any], lvs: list[Any],
                       vals: list[Any], value_index: Any) -> None:
        """Iteration ``tj`` sees every invariant ([E-Enter-Const]) and the loop variables through their
        Merges, whose value_index is 0 on entry and 1 after ([E-Merge-Live])."""
        for e in enters:
            if e.attrs.get("is_constant"):
                self.write(e, 0, tj, entered[e.id])
        for lv, v in zip(lvs, vals, strict=True):
            self.write(lv.merge, 0, tj, v)
            self.write(lv.merge, 1, tj, value_index)

    def run_region(self, region: Region, tag: Tag, part: str = "all") -> None:
        """Run the items of ``region`` (``part``: ``"test"`` or ``"body"`` of a loop frame, else ``"all"``) at
        ``tag`` in order: each cond, loop and node by the subclass's meaning of it."""
        for it in self.form.items(region, part):
            if isinstance(it, CondItem):
                self.cond(it.info, tag)
            elif isinstance(it, WhileItem):
                self.loop(it.ctx, tag)
            else:
                self.node(it, tag)

    @abstractmethod
    def node(self, n: Node, tag: Tag) -> None:
        """Evaluate one ordinary node at ``tag``."""

    @abstractmethod
    def cond(self, info: CondInfo, tag: Tag) -> None:
        """Evaluate one cond region at ``tag`` ([S-Cond])."""

    @abstractmethod
    def loop(self, ctx: WhileContext, tag: Tag) -> None:
        """Evaluate one while region at ``tag`` ([S-While])."""


def fmt_tag(tag: Tag) -> str:
    """``frame:k/inner:j`` for a tag, ``root`` for the root tag (as ``turnout.reference.trace.fmt_tag``), for
    messages."""
    return "/".join(f"{f}:{k}" for f, k in tag) or "root"


# ---------------------------------------------------------------------------------------------------
# The concrete evaluator
# ---------------------------------------------------------------------------------------------------
@dataclass
class StructuredResult:
    """What ``evaluate`` returns.

    ``live[(node name, tag)]``: how many times the op ran live at that tag (1 for every op that ran;
    the key uses the tag of the op's inputs, so an Enter is keyed by the parent tag and an Exit by the
    last iteration's tag, as in the dataflow rules). ``trip_counts[(frame name, parent tag)]``: body
    executions of each loop instance. ``variables`` / ``stacks``: the final stores.
    """

    values: list[Any]
    live: dict[tuple[str, Tag], int] = field(default_factory=dict)
    trip_counts: dict[tuple[str, Tag], int] = field(default_factory=dict)
    variables: dict[str, np.ndarray] = field(default_factory=dict)
    stacks: dict[Any, dict[tuple[int, ...], Any]] = field(default_factory=dict)

    def live_nodes(self) -> set[str]:
        """Names of the ops that ran live at least once."""
        return {name for name, _ in self.live}

    def live_count(self, node: str | Node | Tensor) -> int:
        """At how many tags ``node`` ran live."""
        name = node if isinstance(node, str) else (node.node.name if isinstance(node, Tensor) else node.name)
        return sum(1 for n, _ in self.live if n == name)


NodeRule = Callable[["_Evaluator", Node, Tag, list[Any]], list[Any]]
RULES: dict[str, NodeRule] = {}


_rule = registrar(RULES)


class _Evaluator(Walker):
    def __init__(self, form: StructuredForm, feeds: dict[tuple[int, int], Any], variables: dict[str, np.ndarray],
                 max_iterations: int) -> None:
        super().__init__(form)
        self.feeds = feeds
        self.variables = variables
        self.stacks: dict[Any, dict[tuple[int, ...], Any]] = {}
        self.max_iterations = max_iterations
        self.live: dict[tuple[str, Tag], int] = {}
        self.trip_counts: dict[tuple[str, Tag], int] = {}

    def mark(self, n: Node, tag: Tag) -> None:
        key = (n.name, tag)
        self.live[key] = self.live.get(key, 0) + 1

    def read(self, t: Tensor, tag: Tag) -> Any:
        if not tag and (t.node.id, t.index) in self.feeds:
            return self.feeds[(t.node.id, t.index)]
        return super().read(t, tag)

    def node(self, n: Node, tag: Tag) -> None:
        """An ordinary op: its inputs were computed before it (data and control edges order the items)."""
        rule = RULES.get(n.op)
        if rule is None:
            rule = _compute if primitives.get(n.op).kind in ("compute", "source") else _unsupported
        ins = [] if n.op == "Merge" else [self.read(t, tag) for t in n.inputs]
        outs = rule(self, n, tag, ins)
        if outs is None:  # the rule wrote its outputs itself (a loop Switch sends only one)
            self.mark(n, tag)
            return
        for i, v in enumerate(outs):
            self.write(n, i, tag, v)
        self.mark(n, tag)

    def cond(self, info: CondInfo, tag: Tag) -> None:
        """[S-Cond] ``f() if p else g()``: only the taken branch's ops run; ``case`` is a chain of these
        ([S-Case]). The Switches send each captured value straight to the taken branch; each Merge
        forwards the taken branch's output, with value_index = the branch."""
        switches = self.form.switches(info)
        b = int(truth(self.read(info.pred, tag), lambda: describe_node(switches[0]) if switches else info.pred.name))
        for s in switches:
            self.write(s, b, tag, self.read(s.inputs[0], tag))
            self.mark(s, tag)
        self.run_region(info.branches[b], tag)
        for m in self.form.merges(info):
            self.write(m, 0, tag, self.read(m.inputs[b], tag))
            self.write(m, 1, tag, np.asarray(b, np.int32))
            self.mark(m, tag)

    def loop(self, ctx: WhileContext, tag: Tag) -> None:
        """[S-While] ``while c(v): v = b(v)``: the condition runs at every test (k + 1 times), the body
        k times. Each iteration j runs at tag ``tag + ((frame, j),)``; its values are dropped once the
        next iteration's loop variables are known."""
        frame = ctx.frame_name
        enters, entered, lvs, vals = self.loop_entry(ctx, tag)
        for e in enters:
            self.mark(e, tag)
        j = 0
        while True:
            tj = (*tag, (frame, j))
            self.seed_iteration(tj, enters, entered, lvs, vals, np.asarray(0 if j == 0 else 1, np.int32))
            self.run_region(ctx, tj, "test")
            if not truth(self.read(ctx.pivot.outputs[0], tj), lambda: describe_node(ctx.pivot)):  # type: ignore[union-attr]
                break
            if j >= self.max_iterations:
                raise NonTerminationError(
                    f'while_loop "{ctx.name}" (frame {frame}) at {fmt_tag(tag)} ran more than '
                    f"max_iterations={self.max_iterations} iterations; does its condition ever become false?"
                )
            self.run_region(ctx, tj, "body")
            vals = [self.read(lv.next_iteration.outputs[0], tj) for lv in lvs]
            self._drop(tj)
            j += 1
        self.trip_counts[(frame, tag)] = j
        for x in self.form.exits(ctx):
            self.write(x, 0, tag, self.read(x.inputs[0], tj))
            self.mark(x, tj)
        self._drop(tj)

    def _drop(self, tag: Tag) -> None:
        self.env.pop(tag, None)


def _compute(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> list[Any]:
    return run_kernel(n.op, ins, n.attrs, describe_node(n))


def _unsupported(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> list[Any]:
    raise UnsupportedError(f"structured evaluator: {describe_node(n)} {_HAND_BUILT}")


@_rule("Send", "Recv")
def _transfer(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> list[Any]:
    """Transfers exist only in partitions; the structured evaluator runs the unpartitioned graph."""
    raise UnsupportedError(f"structured evaluator: {describe_node(n)} belongs to a partitioned graph; evaluate "
                           "the unpartitioned graph instead")


@_rule("Placeholder")
def _placeholder(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> list[Any]:
    raise FeedError(f"{describe_node(n)} must be fed a value (feeds)")


@_rule("NoOp")
def _noop(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> list[Any]:
    return []


@_rule("Merge")
def _loop_merge(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> Any:
    """A loop Merge was bound by [S-While] before the test ran: v_0 at iteration 0, v_j after."""
    if n.id not in ev.form.loop_merges:
        _unsupported(ev, n, tag, ins)
    return None


@_rule("Switch")
def _loop_switch(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> Any:
    """A loop Switch sends the loop variable to the body while the test holds, else to the Exit."""
    if n.id not in ev.form.loop_switches:
        _unsupported(ev, n, tag, ins)
    ev.write(n, int(truth(ins[1], lambda: describe_node(n))), tag, ins[0])
    return None


@_rule("LoopCond", "NextIteration")
def _pass(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> list[Any]:
    if in_loop(n) is None:
        _unsupported(ev, n, tag, ins)
    return [ins[0]]


@_rule("Enter", "Exit")
def _enter_exit(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> list[Any]:
    return _unsupported(ev, n, tag, ins)  # builder-made Enters and Exits belong to a WhileItem


@_rule("VarHandle")
def _var_handle(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> list[Any]:
    """The handle is the variable's name; a variable not in the store starts at its initial value."""
    name = n.attrs["var_name"]
    if name not in ev.variables:
        ev.variables[name] = np.array(n.attrs["initial_value"], copy=True)
    return [name]


@_rule("ReadVariable")
def _read_variable(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> list[Any]:
    """[E-Var-Read], in program order: the value the store holds now."""
    return [np.array(ev.variables[ins[0]], copy=True)]


_UPDATES: dict[str, str | None] = {"AssignVariable": None, "AssignAddVariable": "Add", "AssignSubVariable": "Sub"}


@_rule(*_UPDATES)
def _assign(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> list[Any]:
    """[E-Var-Assign], in program order: store the new value and output it."""
    h, v = ins
    old = ev.variables[h]
    op = _UPDATES[n.op]
    new = np.asarray(v if op is None else run_kernel(op, [old, v], {}, describe_node(n))[0], dtype=old.dtype)
    if new.shape != old.shape:
        raise ExecutionError(f"{describe_node(n)}: assigning shape {new.shape} to a variable of shape {old.shape}")
    ev.variables[h] = new
    return [np.array(new, copy=True)]


@_rule("StackNew")
def _stack_new(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> list[Any]:
    """A fresh gradient stack; its handle names the op and the tag it ran at."""
    handle = f"{n.name}@{fmt_tag(tag)}"
    ev.stacks[handle] = {}
    return [handle]


@_rule("StackPush")
def _stack_push(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> list[Any]:
    """[E-Stack-Push]: record the value under the key ``tuple(index)``."""
    h, idx, v = ins
    ev.stacks[h][tuple(int(i) for i in np.ravel(idx))] = v
    return [v]


@_rule("StackPop")
def _stack_pop(ev: _Evaluator, n: Node, tag: Tag, ins: list[Any]) -> list[Any]:
    """[E-Stack-Pop]: the value recorded under ``tuple(index)``; a missing key is an error."""
    h, idx = ins
    key = tuple(int(i) for i in np.ravel(idx))
    try:
        return [ev.stacks[h][key]]
    except KeyError:
        raise KernelError(f"{describe_node(n)}: no value was pushed on stack {h} for index {key}") from None


# ---------------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------------
def _check_fetches(fetches: Sequence[Tensor], graph: Graph) -> None:
    for t in fetches:
        if not isinstance(t, Tensor) or t.graph is not graph:
            raise FeedError(f"fetch {t!r} is not a tensor of this graph")
        w = in_loop(t.node)
        if w is not None:
            raise ValidationError(
                f"cannot fetch {t.name}: {describe_node(t.node)} is inside {w.describe()}; fetch the loop's "
                "result instead", "W-Fetch-Root", t.node,
            )


def prepare_feeds(graph: Graph, feeds: Mapping[Tensor, Any] | None) -> dict[tuple[int, int], Any]:
    """Fed values by (node id, output index), converted and checked like a Session does."""
    from turnout.session import check_feed

    out: dict[tuple[int, int], Any] = {}
    for t, v in (feeds or {}).items():
        if not isinstance(t, Tensor) or t.graph is not graph:
            raise FeedError(f"feed key {t!r} is not a tensor of this graph")
        if in_loop(t.node) is not None:
            raise FeedError(f"cannot feed {t.name}: it is inside a loop frame; feed root-frame tensors only")
        out[(t.node.id, t.index)] = check_feed(t, v)
    return out


def evaluate(
    graph: Graph,
    fetches: Sequence[Tensor],
    feeds: Mapping[Tensor, Any] | None = None,
    variables: Mapping[str, np.ndarray] | None = None,
    max_iterations: int = 1_000_000,
) -> StructuredResult:
    """Evaluate the fetches of a builder-made graph by the structured rules.

    ``variables`` is the store at the start (not modified; variables missing from it start at their
    initial value); ``max_iterations`` bounds each loop instance (``NonTerminationError`` beyond it).
    Fetching a tensor of an untaken cond branch raises ``DeadFetchError``.
    """
    fetches = list(fetches)
    _check_fetches(fetches, graph)
    fed = prepare_feeds(graph, feeds)
    form = StructuredForm(graph, [t.node for t in fetches if (t.node.id, t.index) not in fed], frozenset(fed))
    for n in form.needed.values():
        if n.op == "Placeholder":
            raise FeedError(f"{describe_node(n)} must be fed a value (feeds)")
    ev = _Evaluator(form, fed, {k: np.array(v, copy=True) for k, v in (variables or {}).items()}, max_iterations)
    ev.run_region(None, ())
    values = []
    for t in fetches:
        key = (t.node.id, t.index)
        if key in fed:
            values.append(fed[key])
        elif key in ev.env.get((), {}):
            values.append(ev.env[()][key])
        else:
            raise DeadFetchError(dead_fetch_message(t.name, t.node))
    return StructuredResult(values, ev.live, ev.trip_counts, ev.variables, ev.stacks)
