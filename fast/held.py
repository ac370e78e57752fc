"""Held reads: a gradient stack that would save the same Variable value every iteration keeps it once.

Why: a Variable used inside a loop body is read there, once per iteration (the handle is entered
into the frame, as TensorFlow does), and the gradient saves every forward value the backward loop
needs on a stack. For ``tanh(h @ W + x)`` that value is ``W`` itself: a loop of ``T`` iterations
pushes ``T`` copies of the weights and the backward loop pops them back, which costs ``T`` times
the weights' memory (the largest stack of an RNN) and a copy per iteration each way.

In the compiled program the copies are all one value. A top-level loop of the root frame runs as
one item: everything before it has finished and nothing after it has started. If no op inside the
loop (nested loops and conds included) assigns the Variable, every read inside it returns the value
the Variable held when the loop began. The fast backend therefore *holds* such a stack: its pushes
do nothing, and its pops return that value, taken once as the loop starts (``Emitter.hold``) and
carried to the backward loop in the run's state under ``stacks.HELD_PREFIX``. The interpreters keep their
stacks as the graph says (``[E-Stack-Push]``); the values popped are the same.

A stack is held only when that is certain from the graph:

- one StackPush pushes it (a gradient's stack), with a value read by a ``ReadVariable`` (through
  ``Identity`` nodes, or a cond's gradient export of it) that lies inside a loop which is an item of
  the root frame;
- the read's Variable, and that of every assignment inside the loop, is known by name (its handle
  comes from one ``VarHandle`` through Enter, Switch and Identity nodes, or Merges of one name);
  an assignment whose Variable is not known forbids holding any read in its loop;
- nothing in that loop assigns the read's Variable;
- the stack is used by its StackPush and StackPops alone, and every pop lies in a top-level item
  after the loop (a gradient's backward loop does; a hand-built stack popped in the loop itself or
  before it keeps its buffer, and its pops their errors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from turnout.fast.emit import stack_source
from turnout.fast.regions import Program, WhileRegion, item_nodes, program_nodes
from turnout.fast.stacks import state_key
from turnout.graph import Node, Tensor

#: ops that write a Variable (the lowering's ``_assign`` rules)
ASSIGNS = frozenset({"AssignVariable", "AssignAddVariable", "AssignSubVariable"})
#: nodes a handle passes through unchanged on its way from its ``VarHandle``
_THROUGH = frozenset({"Enter", "Switch", "Identity"})
#: nodes a stack handle passes through on its way from its ``StackNew`` (``emit.stack_source``)
_PASS = frozenset({"Enter", "Switch", "Identity", "Merge", "Exit", "NextIteration"})


@dataclass(frozen=True)
class HeldRead:
    """A held stack (its ``StackNew`` id): the Variable its pushes read, and the top-level loop at whose
    start it is taken."""

    stack: int
    var_name: str
    loop: WhileRegion


def variable_of(t: Tensor) -> Optional[str]:
    """The name of the Variable a handle tensor refers to, or ``None`` when it is not one name (a
    Merge of two Variables' handles, a handle from anything but a ``VarHandle``)."""
    names: set[str] = set()
    todo, seen = [t.node], set()
    while todo:
        n = todo.pop()
        if n.id in seen:
            continue
        seen.add(n.id)
        if n.op == "VarHandle":
            names.add(str(n.attrs["var_name"]))
        elif n.op in _THROUGH and n.raw_inputs:
            todo.append(n.inputs[0].node)
        elif n.op == "Merge":
            todo += [i.node for i in n.inputs]
        else:
            return None
    return names.pop() if len(names) == 1 else None


def _read_of(t: Tensor) -> Optional[Node]:
    """The ``ReadVariable`` whose value ``t`` is, if it is one: through ``Identity`` nodes, and through
    a cond's gradient export (a Merge of a branch's value and a ``gradient_filler`` stand-in for the
    other branch, which is never read: the backward cond reads the value only on the branch that
    computed it)."""
    n = t.node
    while True:
        if n.op == "Identity":
            n = n.inputs[0].node
        elif n.op == "Merge" and any(i.node.attrs.get("gradient_filler") for i in n.inputs):
            real = [i for i in n.inputs if not i.node.attrs.get("gradient_filler")]
            if len(real) != 1:
                return None
            n = real[0].node
        else:
            return n if n.op == "ReadVariable" else None


def held_reads(program: Program) -> dict[str, HeldRead]:
    """Stack key (``stack:<StackNew id>``) -> ``HeldRead``, for every stack of ``program`` that the
    fast backend may hold (see the module docstring)."""
    nodes = program_nodes(program)
    users: dict[int, list[Node]] = {}  # StackNew id -> the ops (not pass-through nodes) its handle reaches
    for n in nodes:
        if n.op in _PASS:
            continue
        for t in n.inputs:
            if t.node.op in _PASS or t.node.op == "StackNew":
                src = stack_source(t)
                if src is not None:
                    users.setdefault(src.id, []).append(n)
    place: dict[int, int] = {}  # node id -> the index of the top-level item it lies in
    for i, it in enumerate(program.items):
        for n in item_nodes(it):
            place[n.id] = i
    out: dict[str, HeldRead] = {}
    for at, loop in enumerate(program.items):
        if not isinstance(loop, WhileRegion):
            continue
        assigned = {variable_of(n.inputs[0]) for n in loop.nodes if n.op in ASSIGNS}
        if None in assigned:
            continue
        for n in loop.nodes:
            read = _read_of(n.inputs[2]) if n.op == "StackPush" else None
            src = stack_source(n.inputs[0]) if read is not None else None
            if src is None:
                continue
            name = variable_of(read.inputs[0])  # type: ignore[union-attr]
            uses = users.get(src.id, [])
            if (name is None or name in assigned or any(u.op not in ("StackPush", "StackPop") for u in uses)
                    or sum(u.op == "StackPush" for u in uses) != 1
                    or any(place.get(u.id, -1) <= at for u in uses if u.op == "StackPop")):
                continue  # (a pop before the loop's end, as only a hand-built stack has, pops what was pushed)
            out[state_key(src.id)] = HeldRead(src.id, name, loop)
    return out
