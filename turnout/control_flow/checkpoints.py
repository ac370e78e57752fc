"""Online checkpoints: the forward half of reversing a loop under its own memory budget.

A ``tn.while_loop(..., memory_budget=B)`` whose gradient will recompute (``checkpointing_of``, the one
rule that both this builder and the gradient builder, ``turnout.gradients.recompute``, apply) keeps,
while it runs, the loop states that ``checkpoint_schedule.forward_checkpoints`` keeps: the state
before step ``i`` whenever ``i`` is a multiple of a stride, every other one dropped and the stride
doubled when the slots are full. The backward loop then starts from those states, not from the
initial state alone, and recomputes about one forward pass instead of about two.

The slots are extra loop variables of the forward loop, appended after the user's (``state_vars``
are the user's): one ``[slots, ...]`` buffer per loop variable, the number of states kept and the
stride. They are added when a gradient that recomputes is first built (``slots_of``), as the paper's
gradient adds its stack pushes to the forward loop: a loop without a budget, whose gradient keeps
stacks, or whose gradient is never built (or refused) has none of them, so a forward pass pays
nothing for a budget it does not use.

Its meaning, per iteration (``x`` the state before step ``i``)::

    while i % stride == 0 and count >= capacity(slots, stride):   # at most twice: ``thinnings``
        buf[:(count + 1) // 2] = buf[0:count:2]; count = (count + 1) // 2; stride *= 2
    if i % stride == 0:
        buf[count] = x; count += 1

so after ``n`` steps ``buf[:count]`` holds the states at ``0, stride, 2 stride, ...``: the positions
``forward_checkpoints(n, slots)`` gives, which the tests check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout import memory_plan, ops, primitives
from turnout import shapes as sh
from turnout.control_flow.cond import cond as build_cond
from turnout.control_flow.contexts import LoopVar, WhileContext
from turnout.graph import Tensor, ancestors

if TYPE_CHECKING:
    from turnout.graph import Graph


@dataclass(frozen=True)
class OnlineCheckpoints:
    """The forward loop's slots: ``plan`` (how many at most, of how many bytes), the loop variables of
    the buffers (one per state variable, in order), of the count of states kept and of the stride,
    and ``slots``, the int32 count the buffers have (``slot_count``: at most ``plan.slots``), a
    tensor of the loop's outer context that the backward loop reads too."""

    plan: memory_plan.Checkpointing
    bufs: tuple[LoopVar, ...]
    count: LoopVar
    stride: LoopVar
    slots: Tensor


def state_vars(w: WhileContext) -> list[LoopVar]:
    """The loop variables of ``w`` that hold the user's state: after the builder's counter, before the
    slots of online checkpoints and any gradient-sync variable."""
    return w.loop_vars[1:1 + w.num_state]


def accumulators(w: WhileContext) -> frozenset[int]:
    """The indices, among ``state_vars(w)``, of the TensorArrays that the body of ``w`` only writes (the
    outputs a ``tn.scan`` or ``tn.map_fn`` collects): in the body such an array is written, write after
    write, and the last write is its next value; nothing else reads it. Found once the body is built
    (the builder records them, ``WhileContext.accumulators``).

    Why they matter: no step's result depends on what such an array holds, so a recomputed step may
    be given any array of its type (the loop's initial one) and its writes dropped. Checkpoints need
    not keep it, and its gradient (an array of cotangents, one slot read per step) flows back as the
    store-everything gradient's does."""
    users = w.graph.consumers()
    out = set()
    for k, lv in enumerate(state_vars(w)):
        if lv.merge.outputs[0].dtype != dt.tensor_array or lv.body_input is None or lv.next_iteration is None:
            continue
        t, last = lv.body_input.outputs[0], lv.next_iteration.inputs[0]
        while True:
            readers = [n for n, slot in users[t.node.id] if n.inputs[slot] is t]
            if t is last:
                if readers == [lv.next_iteration]:
                    out.add(k)
                break
            if len(readers) != 1 or readers[0].op != "TensorArrayWrite" or readers[0].inputs[0] is not t:
                break
            t = readers[0].outputs[0]
    return frozenset(out)


def checkpointed(w: WhileContext) -> list[int]:
    """The indices, among ``state_vars(w)``, of the variables a checkpoint keeps: all but the arrays
    the body only writes (``accumulators``, as the builder recorded them)."""
    return [i for i in range(w.num_state) if i not in w.accumulators]


def state_bytes(w: WhileContext) -> Optional[int]:
    """Bytes of one checkpointed state of ``w`` (its state variables but the arrays it only writes),
    or None when one has no static size (a TensorArray the body reads, a shape that changes across
    iterations)."""
    total = 0
    lvs = state_vars(w)
    for lv in (lvs[i] for i in checkpointed(w)):
        t = lv.merge.outputs[0]
        n = sh.num_elements(t.shape)
        if n is None or t.dtype.is_opaque:
            return None
        total += int(n) * t.dtype.itemsize
    return total


def checkpointing_of(w: WhileContext, budget: Optional[int], budget_from: str = "loop"
                     ) -> Optional[memory_plan.Checkpointing]:
    """Whether loop ``w`` is reversed by recomputation under ``budget`` (its own, or its share of a
    gradient's: ``budget_from``), and in how many slots (None: its gradient keeps stacks, or it has none). The one
    rule (``memory_plan.checkpointing`` on the budget and the loop's state size) by which the slots
    are added to the forward loop and the backward loop recomputes from them."""
    if not w.back_prop:
        return None
    return memory_plan.checkpointing(w.name, budget, state_bytes(w), w.swap_memory, budget_from)


def thinnings(slots: int) -> int:
    """The most thinnings one step of a loop with ``slots`` slots makes. Why: a thinning happens with
    ``count == cap`` kept and leaves ``(cap + 1) // 2``; a second in the same step needs that to be
    ``>= slots - 1``, so ``slots <= 3``. With three slots the first thinning (at stride 1) comes at
    ``i = 3``, odd, so the doubled stride does not divide it, and later ones leave one state of the two
    allowed. With two slots the first comes at ``i = 2`` and thins twice (stride 4 does not divide 2);
    each later one comes at ``i`` equal to the stride, which the doubled stride does not divide. The
    tests compare the kept positions with ``forward_checkpoints`` for every slot count up to 12."""
    return 2 if slots == 2 else 1


def fewest_slots(slots: int) -> int:
    """The fewest slots a backend may give the buffers of a loop whose budget holds ``slots``
    (``CheckpointSlots``): ``slots`` itself when it is 3 or less, else 3. Why 3: a step makes at most
    ``thinnings(slots)`` thinnings, and ``thinnings`` is 1 for every count of 3 or more (its argument
    holds for any such count, not only the budget's), so one count of 3 or more serves the one
    thinning the loop's body was built with; 2 slots need two a step, and 1 slot none (the loop keeps
    only the state before its first step, ``keep``'s cap of ``slots`` when that is 1)."""
    return min(slots, 3)


def slot_count(w: WhileContext, cp: memory_plan.Checkpointing) -> Tensor:
    """How many slots the buffers of loop ``w`` get, as an int32 scalar of its outer context: a
    ``CheckpointSlots`` node, the budget's ``slots`` on the small-step system, which the other
    backends size down to what the runs need (at least ``fewest_slots``, ``turnout.slot_sizes``);
    fewer still where the loop's ``maximum_iterations`` bounds its trip count ``n`` (at most ``n``
    states are ever kept, one before each step, so ``max(1, maximum_iterations)`` slots hold them
    all and no thinning is ever due).

    Why not the budget's count as a constant: the buffers are allocated, and zero-filled, whole at
    every run, and a budget that holds far more states than the loop runs steps made every run pay
    for all of them (the LSTM step at ``T = 1000``: 5.4 times store-everything under 256 MiB with
    every slot; 3.6 times for a loop with no bound before the fast backend sized them). The gradient's
    values do not depend on the count. Only a bound that a compiled backend can know when compiling
    (``static_able``: constants and feeds, not a Variable or a value of a loop) is taken."""
    g = w.graph
    most = g.create_node("CheckpointSlots", [], checkpoint_attrs(cp), name=f"{w.name}/checkpoints/slots").outputs[0]
    m = w.maximum_iterations
    if m is None or cp.slots <= 1 or not static_able(m):
        return most
    return ops.minimum(most, ops.maximum(m, 1))


def trips(n: Tensor, w: WhileContext, cp: memory_plan.Checkpointing) -> Tensor:
    """The trip count ``n`` of loop ``w`` as its checkpointed backward loop reads it: through a
    ``CheckpointTrips`` node, which passes it on and from which a compiled backend learns how many
    slots the loop needed (at most ``cp.slots``), to size later runs' buffers. Only a gradient that
    recomputes makes one: ``memory_plan.recomputed_loops`` reads the plan of such gradients there."""
    return w.graph.create_node("CheckpointTrips", [n], checkpoint_attrs(cp),
                               name=f"{w.name}/checkpoints/trips").outputs[0]


def checkpoint_attrs(cp: memory_plan.Checkpointing) -> dict[str, Any]:
    """The attrs of ``CheckpointSlots`` and ``CheckpointTrips``: the loop's checkpointing as the
    graph keeps it (``memory_plan.Checkpointing``), so that every backend's accounting and
    ``tn.memory_report`` read it from the nodes of a run, built here or loaded from a file."""
    attrs: dict[str, Any] = {"slots": int(cp.slots), "loop": cp.loop, "state_bytes": int(cp.state_bytes),
                             "memory_budget": int(cp.budget)}
    if cp.budget_from != "loop":  # recorded only for a gradient's share: older graphs read the same
        attrs["budget_from"] = cp.budget_from
    return attrs


def static_able(t: Tensor) -> bool:
    """Whether ``t`` is computed from constants and fed placeholders alone (no Variable, no TensorArray,
    no value of a loop or a branch), so that a compiled backend knows it when compiling, or specialises
    on the feeds behind it. Only data edges count: a constant inside a loop body (the bound of a loop
    nested in it) waits on the body's pivot by a control edge, but has one value in every iteration."""
    return not any(n.op in primitives.STATEFUL or n.op in primitives.CONTROL_FLOW or n.op.startswith("TensorArray")
                   for n in ancestors([t], control=False).values())


def slots_of(w: WhileContext, cp: memory_plan.Checkpointing, loop: Callable[..., Any]) -> OnlineCheckpoints:
    """The slots of loop ``w``, which its gradient recomputes from in ``cp.slots`` slots: built into
    the forward loop the first time such a gradient is (``add_slots``, their next values by ``keep``
    in its body, ``loop`` the loop builder, passed in so that this module does not import it back),
    and shared by every later gradient of ``w``.

    Why at the gradient, not with the loop: a forward pass (a loop whose gradient is never built, or
    refused) would otherwise carry the slots in its graph, which the interpreters run and which made
    the LSTM step's forward pass under a budget 1.2 times the one without. The paper's gradient adds
    its stack pushes to the forward loop the same way."""
    if w.checkpoints is None:
        g = w.graph
        w.checkpoints = add_slots(g, w, cp)
        with g._in_context(w), g.control_dependencies(None), g._root_scope(), g.name_scope(f"{w.name}/body"):
            nexts = keep(w, w.checkpoints, loop)
        for lv, t in zip([*w.checkpoints.bufs, w.checkpoints.count, w.checkpoints.stride], nexts, strict=True):
            w.close_loop_var(lv, t, f"{w.name}/next_iteration")
    assert w.checkpoints.plan == cp, w.name
    return w.checkpoints


def add_slots(g: Graph, w: WhileContext, cp: memory_plan.Checkpointing) -> OnlineCheckpoints:
    """Append the slots' loop variables to ``w``, once its body is built (which arrays it only writes
    is known then: ``accumulators``): one buffer per checkpointed state variable, the count and the
    stride (``WhileContext.add_loop_var``; ``slots_of`` closes their back edges with what ``keep``
    computes). The buffers start as zeros of a run-time ``Fill`` of ``slot_count`` slots, not a
    constant as large as the budget in the graph."""
    assert w.pivot is not None
    lvs = state_vars(w)
    with (g._in_context(w.outer), g.control_dependencies(None), g._root_scope(),
          g.name_scope(f"{w.name}/checkpoints")):
        count = slot_count(w, cp)
        inits = [_buffer(count, lvs[i].merge.outputs[0]) for i in checkpointed(w)]
        inits += [ops.constant(0), ops.constant(1)]
    made = [w.add_loop_var(t, f"{w.name}/checkpoints") for t in inits]
    return OnlineCheckpoints(cp, tuple(made[:-2]), made[-2], made[-1], count)


def _buffer(count: Tensor, like: Tensor) -> Tensor:
    """Zeros of ``[count, *like.shape]`` in ``like``'s dtype: a ``Fill`` of the flat size, reshaped,
    so that the buffer's shape is known but for ``count``, which the run decides (``slot_count``; a
    ``Fill`` of a computed shape has no known shape, and a loop variable's must be the same after
    every iteration)."""
    elem = tuple(int(d) for d in like.shape or () if d is not None)  # (a static state: ``state_bytes``)
    assert len(elem) == len(like.shape or ())
    zero = ops.constant(np.zeros((), like.dtype.numpy))
    flat = ops.reshape(count * int(np.prod(elem, dtype=np.int64)), [1])
    return ops.reshape(ops.fill(flat, zero), [-1, *elem])


def keep(w: WhileContext, ck: OnlineCheckpoints, loop: Callable[..., Any]) -> list[Tensor]:
    """In the body of ``w``: the slots' next values, after thinning and keeping the state before this
    step (the module docstring). Thinning is a ``tn.cond``, so the steps that do not thin (all but
    about ``log2(n)``) do not copy the buffers for it. Keeping writes one slot every step
    (``tn.update_slot``, in place where compiled): the state when it is due, else the slot's own
    value, so no step copies a whole buffer (a ``Select`` over the buffers did, and a ``tn.cond``
    around the write was measured slower still: its branches copy the buffers).

    A thinning moves the kept states down one by one (slot ``k`` takes slot ``2k``, ``k`` rising,
    in an inner loop built by ``loop``, the loop builder, passed in by its caller so that this module
    does not import it back), each move a ``tn.update_slot`` in place. Why not gather every other
    slot at once: a gather makes new buffers as large as the slots, which the compiled step then
    holds beside the old ones, twice the loop's budget (XLA's own count of the step's temporaries,
    ``tests/test_recompute.py``)."""
    slots = ck.plan.slots  # the most there are: how many thinnings a step may make (``thinnings``)
    n_slots = ck.slots  # how many there are (``slot_count``; a capture of the loop's outer value)
    i = _body_in(w.counter)
    lvs = state_vars(w)
    x = [_body_in(lvs[k]) for k in checkpointed(w)]
    held = [*(_body_in(lv) for lv in ck.bufs), _body_in(ck.count), _body_in(ck.stride)]

    def thin(bufs_count_stride: list[Tensor]) -> list[Tensor]:
        *bufs, count, stride = bufs_count_stride
        kept = (count + 1) // 2

        def move(k: Tensor, *bufs: Tensor) -> list[Tensor]:
            return [k + 1, *(ops.update_slot(b, k, ops.gather(b, 2 * k)) for b in bufs)]

        moved = loop(lambda k, *_: k < kept, move, [ops.constant(1), *bufs], back_prop=False,
                     name=f"{w.name}/thin_moves")
        return [*moved[1:], kept, stride * 2]

    for _ in range(thinnings(slots)):
        count, stride = held[-2], held[-1]
        cap = ops.constant(slots) if slots == 1 else ops.where(ops.equal(stride, 1), n_slots, n_slots - 1)
        full = ops.logical_and(ops.equal(i % stride, 0), count >= cap)
        held = list(build_cond(full, partial(thin, held), partial(list, held), name=f"{w.name}/thin"))
    *bufs, count, stride = held
    due = ops.equal(i % stride, 0)
    slot = ops.minimum(count, n_slots - 1)
    bufs = [ops.update_slot(b, slot, ops.where(due, v, ops.gather(b, slot))) for b, v in zip(bufs, x, strict=True)]
    return [*bufs, ops.where(due, count + 1, count), stride]


def _body_in(lv: LoopVar) -> Tensor:
    assert lv.body_input is not None
    return lv.body_input.outputs[0]


__all__ = ["OnlineCheckpoints", "accumulators", "add_slots", "checkpoint_attrs", "checkpointed", "checkpointing_of",
           "fewest_slots", "keep", "slot_count", "slots_of", "state_bytes", "state_vars", "static_able", "thinnings",
           "trips"]
