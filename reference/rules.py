"""The firing rules of the reference interpreter, as tables keyed by primitive.

Three tables, each entry a short function citing the rule of ``specs/rules.toml`` it implements:

* ``ARRIVE[op]`` decides, as each input token arrives at (node, tag), whether the node is now ready.
* ``FIRE[op]`` computes the output tokens of a ready node from its input tokens.
* ``ROUTE[op]`` sends each output token on: to the same tag, into a child frame, out of a frame, or to
  the next iteration.

Ops not listed use the ``default`` entries (an ordinary op: [E-Op] / [E-Op-Dead]). Tests mutate single
entries of these tables to check that the property suite notices (tests/test_mutations.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from turnout.errors import ExecutionError, KernelError, NonTerminationError, describe_node, runaway_message
from turnout.graph import Node
from turnout.kernels import run_kernel, truth
from turnout.slot_sizes import slots_given

if TYPE_CHECKING:
    from turnout.reference.executor import Interpreter

Tag = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Token:
    """A value on an edge. Dead tokens carry no value."""

    value: Any
    dead: bool = False


DEAD = Token(None, True)


@dataclass
class Inbox:
    """The inputs that have arrived for one (node, tag)."""

    values: list[Optional[Token]]
    control: list[Token] = field(default_factory=list)
    arrival_order: list[int] = field(default_factory=list)
    fired: bool = False

    # Plain loops rather than all()/any() over generators: these two run at every token delivery and
    # every firing, and are the interpreter's hottest lines.
    def arrived_all(self, node: Node) -> bool:
        """True when every data input and every control input of ``node`` has arrived at this tag."""
        for v in self.values:
            if v is None:
                return False
        return len(self.control) == len(node.control_inputs)

    def any_dead(self) -> bool:
        """True when a token arrived so far, data or control, is dead."""
        for v in self.values:
            if v is not None and v.dead:
                return True
        for c in self.control:
            if c.dead:
                return True
        return False


# ---- ARRIVE: is the node ready? ---------------------------------------------------------------------
Arrive = Callable[["Interpreter", Node, Tag, Inbox], Optional[str]]


def arrive_ordinary(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> Optional[str]:
    """[E-Op] / [E-Op-Dead]: an ordinary node waits for every data and control input at its tag."""
    if not box.arrived_all(node):
        return None
    return "E-Op-Dead" if box.any_dead() else "E-Op"


def merge_expected_slots(it: Interpreter, node: Node, tag: Tag) -> list[int]:
    """The data inputs of a Merge that can arrive at ``tag`` ([E-Merge-AllDead]): for a loop Merge, the
    entry inputs at iteration 0 and the NextIteration inputs after; for any other Merge, all inputs."""
    back = it.plan.back_edge_slots[node.id]
    if not back:
        return list(range(len(node.inputs)))
    first = not tag or tag[-1][1] == 0
    return [s for s in range(len(node.inputs)) if (s in back) != first]


def arrive_merge(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> Optional[str]:
    """[E-Merge-Live] fires on the first live data input; [E-Merge-AllDead] / [E-Merge-DeadEnter] fire
    dead once every input that can arrive at this tag has arrived dead (at iteration 0 a loop Merge does
    not wait for its NextIteration input, so a loop entered with dead values dies at once)."""
    if len(box.control) != len(node.control_inputs):
        return None
    if any(v is not None and not v.dead for v in box.values):
        return "E-Merge-Live"
    expected = merge_expected_slots(it, node, tag)
    if all(box.values[s] is not None for s in expected):
        back = it.plan.back_edge_slots[node.id]
        return "E-Merge-DeadEnter" if back and (not tag or tag[-1][1] == 0) else "E-Merge-AllDead"
    return None


def arrive_transfer(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> Optional[str]:
    """[E-Send] / [E-Recv]: a Send or Recv waits for its inputs at its tag, then asks the rendezvous (a
    Send for a credit on its edge, a Recv for the token keyed (edge, tag)). When the rendezvous cannot
    serve it yet, the partitioned executor (``turnout.devices``) makes it ready later."""
    if not box.arrived_all(node):
        return None
    return _port(it, node).arrive(node, tag)  # type: ignore[no-any-return]


def _port(it: Interpreter, node: Node) -> Any:
    port = getattr(it, "port", None)
    if port is None:
        raise ExecutionError(f"{describe_node(node)} runs only in a partitioned run (turnout.devices)")
    return port


ARRIVE: dict[str, Arrive] = {"Merge": arrive_merge, "Send": arrive_transfer, "Recv": arrive_transfer}


def arrive_rule(op: str) -> Arrive:
    """The arrive rule of ``op`` (``ARRIVE``; ``arrive_ordinary`` for an op not listed)."""
    return ARRIVE.get(op, arrive_ordinary)


# ---- FIRE: compute output tokens --------------------------------------------------------------------
Fire = Callable[["Interpreter", Node, Tag, Inbox], list[Token]]


def _dead_outputs(node: Node) -> list[Token]:
    return [DEAD] * len(node.outputs)


def fire_compute(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> list[Token]:
    """[E-Op]: run the numpy kernel. [E-Op-Dead]: a dead input kills every output; no kernel runs."""
    if box.any_dead():
        return _dead_outputs(node)
    vals = [v.value for v in box.values]  # type: ignore[union-attr]
    return [Token(v) for v in run_kernel(node.op, vals, node.attrs, lambda: _where(node, tag))]


def _where(node: Node, tag: Tag) -> str:
    """How a kernel error names the node and its tag (formatted only when a kernel fails)."""
    from turnout.reference.trace import fmt_tag

    return f"{describe_node(node)} at {fmt_tag(tag)}"


def fire_switch(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> list[Token]:
    """[E-Switch]: the data goes to output ``pred`` (1 = true), the other output is dead.
    [E-Switch-Dead]: a dead data or predicate kills both outputs."""
    if box.any_dead():
        return [DEAD, DEAD]
    data, pred = box.values
    taken = 1 if truth(pred.value, lambda: _where(node, tag)) else 0  # type: ignore[union-attr]
    out = [DEAD, DEAD]
    out[taken] = Token(data.value)  # type: ignore[union-attr]
    return out


def fire_merge(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> list[Token]:
    """[E-Merge-Live]: forward the first live input with its index; else all inputs were dead."""
    if any(c.dead for c in box.control):
        return [DEAD, DEAD]
    for slot in box.arrival_order:
        tok = box.values[slot]
        if tok is not None and not tok.dead:
            return [Token(tok.value), Token(np.asarray(slot, np.int32))]
    return [DEAD, DEAD]


def fire_forward(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> list[Token]:
    """Enter, Exit, NextIteration and LoopCond ([E-LoopCond]) forward their token, live or dead; where
    it goes is ROUTE's business. A dead control input kills it, as for any op."""
    tok = box.values[0]
    assert tok is not None
    return [DEAD if box.any_dead() else tok]


def fire_loop_cond(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> list[Token]:
    """[E-LoopCond] forwards its token (``fire_forward``), checks that a live one is one boolean
    (``kernels.truth``), and applies ``RunOptions.max_iterations``: a
    live true predicate in iteration ``max_iterations`` would run body ``max_iterations + 1``, so the
    run stops there with ``NonTerminationError`` naming the loop frame. Why here and not where an
    iteration starts: iteration ``max_iterations`` is still needed to find the predicate false, and
    every backend then lets a loop of ``n`` bodies run under ``max_iterations=n`` (the fast backend's
    compiled loops test the same count)."""
    out = fire_forward(it, node, tag, box)
    live = not out[0].dead and truth(out[0].value, lambda: _where(node, tag))
    limit = it.options.max_iterations
    if limit is not None and tag and tag[-1][1] >= limit and live:
        raise NonTerminationError(runaway_message(it.frame_of(tag).describe(), limit))
    return out


def fire_source(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> list[Token]:
    """Const: [E-Op] with no data inputs (a dead control input, e.g. an untaken pivot, kills it)."""
    if box.any_dead():
        return _dead_outputs(node)
    return [Token(v) for v in run_kernel(node.op, [], node.attrs, lambda: _where(node, tag))]


def fire_placeholder(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> list[Token]:
    """A Placeholder never fires: a fed one is cut from the plan, and an unfed one is refused before
    the run (``ReferenceBackend.run``); this is the last guard for callers of ``Interpreter``."""
    raise ExecutionError(f"{describe_node(node)} must be fed a value (feed_dict)")


def fire_noop(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> list[Token]:
    """A NoOp has no data outputs; its one token (consumed by no data edge) carries its deadness to
    its control output."""
    return [DEAD if box.any_dead() else Token(None)]


def _stateful(effect: Callable[[Interpreter, Node, list[Any]], Any]) -> Fire:
    def fire(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> list[Token]:
        if box.any_dead():
            return _dead_outputs(node)
        vals = [v.value for v in box.values]  # type: ignore[union-attr]
        return [Token(effect(it, node, vals))]

    fire.__doc__ = effect.__doc__
    return fire


def _var_handle(it: Interpreter, node: Node, vals: list[Any]) -> Any:
    """VarHandle: the handle is the variable's name; the store is initialized on first use."""
    name = node.attrs["var_name"]
    if name not in it.variables:
        it.variables[name] = np.array(node.attrs["initial_value"], copy=True)
    return name


def _var_read(it: Interpreter, node: Node, vals: list[Any]) -> Any:
    """[E-Var-Read]: the current value of the variable."""
    return np.array(it.variables[vals[0]], copy=True)


def _assign(update: Callable[[Any, Any], Any]) -> Callable[[Interpreter, Node, list[Any]], Any]:
    def effect(it: Interpreter, node: Node, vals: list[Any]) -> Any:
        """[E-Var-Assign]: write the variable; the output is the new value."""
        h, v = vals
        old = it.variables[h]
        new = np.asarray(update(old, v), dtype=old.dtype)
        if new.shape != old.shape:
            raise ExecutionError(
                f"{describe_node(node)}: assigning shape {new.shape} to a variable of shape {old.shape}"
            )
        it.variables[h] = new
        return np.array(new, copy=True)

    return effect


def fire_stack_new(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> list[Token]:
    """StackNew: a fresh, empty gradient stack. The handle is derived from (node, tag), so it is the
    same under every scheduler."""
    if box.any_dead():
        return [DEAD]
    from turnout.reference.trace import fmt_tag

    handle = f"{node.name}@{fmt_tag(tag)}"
    it.stacks[handle] = {}
    if it.saved is not None and "loop_name" in node.attrs:  # a run under a memory budget counts its pushes
        it.stack_loop[handle] = node.attrs["loop_name"]
    return [Token(handle)]


def _stack_push(it: Interpreter, node: Node, vals: list[Any]) -> Any:
    """[E-Stack-Push]: save the value under its iteration index (keyed, so overlapping iterations are safe)."""
    h, idx, v = vals
    it.stacks[h][tuple(int(i) for i in np.ravel(idx))] = v
    if it.saved is not None and h in it.stack_loop:  # a memory budget: the value and its index, as the plan counts
        it.saved.push(it.stack_loop[h], int(getattr(v, "nbytes", 0)) + 4 * int(np.size(idx)))
    return v


def _checkpoint_slots(it: Interpreter, node: Node, vals: list[Any]) -> Any:
    """The slots of a loop's checkpoints (``CheckpointSlots``: the most its budget holds, which the
    slot buffers of the forward loop then take), at most the run's slot capacity (``it.slots``, which
    its backend learns from earlier runs' trip counts: ``turnout.slot_sizes``; every slot where it
    has none), counted where a memory budget applies as what the loop saves
    (``SavedBytes.checkpoints``). Why fewer may do: the gradient's values do not depend on the count,
    only its cost does, and the buffers are allocated and zero-filled whole at every run."""
    (count,) = run_kernel(node.op, vals, node.attrs)
    count = np.asarray(slots_given(int(count), it.slots.capacity), np.int32)
    if it.saved is not None:
        it.saved.checkpoints(node.attrs, int(count))
    return count


def _checkpoint_trips(it: Interpreter, node: Node, vals: list[Any]) -> Any:
    """The trip count of a loop its backward loop recomputes (``CheckpointTrips``), passed on; where
    the run gave the loop fewer slots than its budget holds and it needed more (its trip count, up
    to that count), the need goes to the run's learner (``it.slots.learn``), which sizes later runs."""
    (trips,) = run_kernel(node.op, vals, node.attrs)
    slots = int(node.attrs["slots"])
    need = min(int(trips), slots)
    if it.slots.learn is not None and need > slots_given(slots, it.slots.capacity):
        it.slots.learn(need)
    return trips


def _stack_pop(it: Interpreter, node: Node, vals: list[Any]) -> Any:
    """[E-Stack-Pop]: read back the value saved under the index."""
    h, idx = vals
    key = tuple(int(i) for i in np.ravel(idx))
    try:
        return it.stacks[h][key]
    except KeyError:
        raise KernelError(f"{describe_node(node)}: no value was pushed for index {key}") from None


def fire_send(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> list[Token]:
    """[E-Send]: the input token goes into the rendezvous under (edge, tag), live or dead: a dead Send
    still sends, so deadness crosses devices as values do. A control Send sends its control inputs'
    deadness."""
    tok = box.values[0] if box.values else (DEAD if box.any_dead() else Token(None))
    assert tok is not None
    _port(it, node).send(node, tag, tok)
    return []


def fire_recv(it: Interpreter, node: Node, tag: Tag, box: Inbox) -> list[Token]:
    """[E-Recv] / [E-Recv-Dead]: output the token taken from the rendezvous, live or dead. The Recv's own
    control input (from its device's control loop) only gives it its tag."""
    return [_port(it, node).take(node, tag)]


FIRE: dict[str, Fire] = {
    "Send": fire_send,
    "Recv": fire_recv,
    "Switch": fire_switch,
    "Merge": fire_merge,
    "Enter": fire_forward,
    "Exit": fire_forward,
    "NextIteration": fire_forward,
    "LoopCond": fire_loop_cond,
    "Const": fire_source,
    "Placeholder": fire_placeholder,
    "NoOp": fire_noop,
    "VarHandle": _stateful(_var_handle),
    "ReadVariable": _stateful(_var_read),
    "AssignVariable": _stateful(_assign(lambda old, v: v)),
    "AssignAddVariable": _stateful(_assign(lambda old, v: old + v)),
    "AssignSubVariable": _stateful(_assign(lambda old, v: old - v)),
    "StackNew": fire_stack_new,
    "StackPush": _stateful(_stack_push),
    "CheckpointSlots": _stateful(_checkpoint_slots),
    "CheckpointTrips": _stateful(_checkpoint_trips),
    "StackPop": _stateful(_stack_pop),
}


def fire_rule(op: str) -> Fire:
    """The fire rule of ``op`` (``FIRE``; ``fire_compute`` for an op not listed)."""
    return FIRE.get(op, fire_compute)


# ---- ROUTE: where output tokens go ------------------------------------------------------------------
Route = Callable[["Interpreter", Node, Tag, list[Token]], None]


def route_same_tag(it: Interpreter, node: Node, tag: Tag, outs: list[Token]) -> None:
    """Ordinary ops: every output (and the control output) goes to consumers at the same tag."""
    for i, tok in enumerate(outs):
        it.emit(node, i, tag, tok)
    it.emit_control(node, tag, _control_token(outs))


def _control_token(outs: list[Token]) -> Token:
    """A node's control output is dead exactly when all its data outputs are dead (a NoOp is live)."""
    for t in outs:
        if not t.dead:
            return _LIVE
    return DEAD if outs else _LIVE


_LIVE = Token(None)  # a live control token (Tokens are immutable, so one is shared)


def route_enter(it: Interpreter, node: Node, tag: Tag, outs: list[Token]) -> None:
    """[E-Enter]: into iteration 0 of the child frame instance (created if needed).
    [E-Enter-Const]: a loop invariant, delivered to every iteration that starts."""
    frame = it.enter_frame(node, tag)
    if node.attrs.get("is_constant"):
        frame.add_invariant(node, outs[0])
    else:
        child = (*tag, (node.attrs["frame_name"], 0))
        it.emit(node, 0, child, outs[0])
        it.emit_control(node, child, outs[0])
    frame.enter_arrived()


def route_exit(it: Interpreter, node: Node, tag: Tag, outs: list[Token]) -> None:
    """[E-Exit-Live]: a live value leaves to the parent tag. [E-Exit-Dead]: a dead one is remembered and
    released when the frame instance completes ([E-Frame-Done])."""
    frame = it.frame_of(tag)
    if outs[0].dead:
        frame.dead_exits.add(node.id)
        return
    frame.live_exits.add(node.id)
    it.emit(node, 0, tag[:-1], outs[0])
    it.emit_control(node, tag[:-1], outs[0])


def route_next_iteration(it: Interpreter, node: Node, tag: Tag, outs: list[Token]) -> None:
    """[E-Next-Live]: a live value goes to iteration k+1 (parked by [E-Next-Park] outside the
    parallel_iterations window). [E-Next-Dead]: a dead value is dropped: this is how a loop ends."""
    if outs[0].dead:
        return
    it.frame_of(tag).send_to_next(node, tag, outs[0])


ROUTE: dict[str, Route] = {"Enter": route_enter, "Exit": route_exit, "NextIteration": route_next_iteration}


def route_rule(op: str) -> Route:
    """The route rule of ``op`` (``ROUTE``; ``route_same_tag`` for an op not listed)."""
    return ROUTE.get(op, route_same_tag)
