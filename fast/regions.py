"""Structured regions: what ``functionalize`` raises a primitive graph to.

Why a structured form: XLA (and therefore ``jax.lax``) knows conditionals and loops as *structured*
operations — ``lax.cond(p, t, f)`` and ``lax.while_loop(c, b, init)`` — while a Turnout graph states
control flow with the paper's primitives and dead values. A region tree is the bridge: each loop
frame is a :class:`WhileRegion` (predicate header, body, exit side), each group of Switch/Merge on
one predicate a :class:`CondRegion` (two branches and the Merges that join them). Lowering then only
walks this tree; it never sees a dead value.

A *liveness guard* is a frozenset of literals ``(predicate key, branch)``: a node fires live exactly
when every literal holds (a conjunction, as an op with any dead input is dead, [E-Op-Dead]).
Switch output ``b`` adds the literal ``(pred, b)``; a Merge of complementary sides removes it
([E-Merge-Live]). Guards are per frame: a loop's body and header are guarded by the loop's own
predicate, and the whole loop sits at the guard of its Enters in the parent frame.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Union

from turnout.errors import describe_node
from turnout.frames import Frame
from turnout.graph import Graph, Node, Tensor

#: (node id, output index) of a tensor: the key under which values live in an environment.
Key = tuple[int, int]
#: (predicate key, branch taken)
Literal = tuple[Key, bool]
Guard = frozenset[Literal]
EMPTY: Guard = frozenset()


def key(t: Tensor) -> Key:
    """The key of ``t`` in an environment: (node id, output index)."""
    return (t.node.id, t.index)


def tensor_of(graph: Graph, k: Key) -> Tensor:
    """The tensor of ``graph`` that key ``k`` names (``key``'s inverse)."""
    return graph.nodes[k[0]].outputs[k[1]]


@dataclass
class CondRegion:
    """Switches and Merges on one predicate at one scope, with what each branch computes: the
    structured conditional of [S-Cond] (a ``case`` is a chain of these, [S-Case]).

    ``switches``: Switch nodes on ``pred`` firing at ``scope``; in branch ``b`` their output ``b``
    is their data and output ``1 - b`` is dead. ``merges``: (Merge node, {branch: input slot}).
    ``branches[b]``: the items run when ``pred == b`` (a ``lax.cond`` branch).
    """

    pred: Tensor
    scope: Guard
    switches: list[Node]
    merges: list[tuple[Node, dict[bool, int]]]
    branches: dict[bool, list[Item]]
    nodes: list[Node] = field(default_factory=list)  # every node inside, at any depth
    #: branch values read outside the region (by a later cond on the same predicate): they leave the
    #: ``lax.cond`` as extra results, zeros on the other side
    exports: list[Key] = field(default_factory=list)

    def describe(self) -> str:
        """``cond on <predicate>``, for messages."""
        return f"cond on {self.pred.name}"


def cond_exports(r: CondRegion, fetch_keys: Collection[Key]) -> list[Key]:
    """The keys a cond hands out besides its Merges, sorted: the fetched values its branches compute
    and its ``exports``. One answer for the emitter (``fast.conds``, which joins them after a
    ``lax.cond``) and the host (``fast.host_control``, which joins them after the branch it ran)."""
    joins = {m.id for m, _ in r.merges}
    return sorted({key(o) for n in r.nodes if n.id not in joins for o in n.outputs if key(o) in fetch_keys}
                  | set(r.exports))


def cond_outputs(r: CondRegion, exports: list[Key]) -> list[Key]:
    """Everything a cond gives out: each Merge's value and index, then ``exports`` (``cond_exports``);
    all dead when the predicate is dead ([E-Switch-Dead], [E-Merge-AllDead])."""
    return [key(o) for m, _ in r.merges for o in m.outputs[:2]] + list(exports)


def pred_reader(r: CondRegion) -> Node:
    """The node an error about ``r``'s predicate names: its first Switch, or the predicate's own node
    for a conditional without Switches (a gradient's, whose branches only join values)."""
    return r.switches[0] if r.switches else r.pred.node


@dataclass
class WhileRegion:
    """One loop frame: ``Enter -> Merge -> header -> LoopCond -> Switch -> body -> NextIteration``,
    the structured loop of [S-While].

    ``loop_vars``: (Enter, Merge, NextIteration, enter slot, next slot) per loop variable.
    ``invariants``: ``Enter(is_constant=True)`` nodes: their value is the parent's, in every iteration.
    ``header`` computes the predicate from the Merges; ``carried`` are header tensors that the body,
    the exit side or the NextIterations read (the loop state, with the predicate).
    """

    frame: Frame
    loop_cond: Node
    loop_vars: list[tuple[Node, Node, Node, int, int]]
    invariants: list[Node]
    switches: list[Node]
    exits: list[Node]
    header: list[Item]
    body: list[Item]
    exit_side: list[Item]
    carried: list[Tensor]
    parallel_iterations: int
    nodes: list[Node] = field(default_factory=list)  # every node of the frame, nested frames and Exits
    #: facts about the loop computed once from the region alone (``fast.facts``), by name
    facts: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def describe(self) -> str:
        """'loop frame 'while/frame0' (entered by Enter node ... (created at model.py:3))': the frame,
        and its first Enter, which carries the user's source line of the loop (as the interpreters
        name a loop)."""
        enters = [lv[0] for lv in self.loop_vars] + list(self.invariants)
        by = f" (entered by {describe_node(min(enters, key=lambda n: n.id))})" if enters else ""
        return f"loop frame {self.frame[-1]!r}{by}"


Item = Union[Node, CondRegion, WhileRegion]


@dataclass
class Program:
    """The raised form of the part of a graph a set of fetches needs."""

    items: list[Item]                    # the root frame, in a dependency order
    guards: dict[Key, Guard]             # liveness guard of every needed tensor (per frame)
    fetch_keys: list[Key]
    stacks_pushed: dict[int, set[int]] = field(default_factory=dict)  # id(WhileRegion) -> StackNew ids
    stacks_popped: dict[int, set[int]] = field(default_factory=dict)
    #: id(WhileRegion) -> (its number, its height): ``loop_number``, ``loop_height``; filled on first use
    loop_numbers: dict[int, tuple[int, int]] = field(default_factory=dict)


def item_nodes(it: Item) -> list[Node]:
    """Every node an item holds, at any depth (a region's structural nodes included)."""
    return [it] if isinstance(it, Node) else it.nodes


def program_nodes(program: Program) -> list[Node]:
    """Every node of a program's items, once each."""
    out: dict[int, Node] = {}
    for it in program.items:
        for n in item_nodes(it):
            out[n.id] = n
    return list(out.values())


def walk(items: list[Item]) -> list[Item]:
    """Every item, depth first (regions before their contents), without recursion (programs may
    nest hundreds of regions deep)."""
    out: list[Item] = []
    work: list[Item] = list(reversed(items))
    while work:
        it = work.pop()
        out.append(it)
        if isinstance(it, CondRegion):
            work += reversed(it.branches[False] + it.branches[True])
        elif isinstance(it, WhileRegion):
            work += reversed(it.header + it.body + it.exit_side)
    return out


def loop_number(program: Program, r: WhileRegion) -> int:
    """The number of loop ``r`` in ``program``: loops numbered from 1 in depth-first pre-order
    (``walk``), or 0 for a loop that is not in the program's tree.

    Why pre-order: a loop's number is larger than the numbers of the loops around it, and the first
    loop of a body is numbered one more than the loop whose body it is. A nonterm error code written
    relative to the enclosing loop (``outcome.NONTERM``) is then the same constant at every level of a
    nest, so every level's check is the same XLA kernel, compiled once.
    """
    _number_loops(program)
    return program.loop_numbers.get(id(r), (0, 0))[0]


def loop_height(program: Program, r: WhileRegion) -> int:
    """How many loops deep ``r`` is from its innermost nested loop: 1 for a loop with no loop inside
    (through conds), 0 for a loop that is not in the program's tree."""
    _number_loops(program)
    return program.loop_numbers.get(id(r), (0, 0))[1]


def _number_loops(program: Program) -> None:
    """Fill ``program.loop_numbers``: id -> (pre-order number, height), without recursion."""
    if program.loop_numbers:
        return
    order: list[tuple[WhileRegion, WhileRegion | None]] = []  # (loop, enclosing loop), pre-order
    work: list[tuple[Item, WhileRegion | None]] = [(it, None) for it in reversed(program.items)]
    while work:
        it, outer = work.pop()
        if isinstance(it, CondRegion):
            work += [(x, outer) for x in reversed(it.branches[False] + it.branches[True])]
        elif isinstance(it, WhileRegion):
            order.append((it, outer))
            work += [(x, it) for x in reversed(it.header + it.body + it.exit_side)]
    height = {id(r): 1 for r, _ in order}
    for r, outer in reversed(order):
        if outer is not None:
            height[id(outer)] = max(height[id(outer)], height[id(r)] + 1)
    for i, (r, _) in enumerate(order):
        program.loop_numbers[id(r)] = (i + 1, height[id(r)])


def nesting(items: list[Item]) -> int:
    """How deep regions nest in ``items`` (0: no region), computed without recursion."""
    deepest = 0
    work: list[tuple[list[Item], int]] = [(items, 0)]
    while work:
        its, d = work.pop()
        for it in its:
            if isinstance(it, CondRegion):
                deepest = max(deepest, d + 1)
                work += [(it.branches[False], d + 1), (it.branches[True], d + 1)]
            elif isinstance(it, WhileRegion):
                deepest = max(deepest, d + 1)
                work += [(it.header, d + 1), (it.body, d + 1), (it.exit_side, d + 1)]
    return deepest
