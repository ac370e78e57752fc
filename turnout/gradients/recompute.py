"""The gradient of a loop under its own memory budget: a checkpointed backward loop that recomputes.

A loop differentiated with gradient stacks saves values in every iteration, so its memory grows with
the trip count. A ``tn.while_loop(..., memory_budget=B)`` whose plan calls for recomputation
(``control_flow.checkpoints.checkpointing_of``, the rule its builder applied too) pushes nothing on
stacks: its forward loop keeps ``slots`` states online instead (``control_flow.checkpoints``: the
positions ``checkpoint_schedule.forward_checkpoints(n, slots)`` gives), slots this builder adds to it,
as the store-everything gradient adds its pushes (``checkpoints.slots_of``). Its backward loop knows the
trip count ``n`` when it starts, and runs the schedule's backward half from those states,
``checkpoint_schedule.actions(n, slots)``, as a ``tn.while_loop`` that reverses one step per
iteration: an inner loop (``push_all``) first makes the schedule's pushes (each recomputes ``split``
steps from the top slot, calling the loop's body function again, and keeps the state reached in the
next slot), then the body is recomputed up to the state before the step, and the step's
vector-Jacobian product applied (the body called once more, differentiated by this same gradient
builder with the cotangents as ``grad_ys``). The actions come in the order ``actions`` yields them.
The schedule is a graph like any other, so the reference interpreter, the small-step system and the
compiled backends all run the same plan.

Its meaning, as plain Python (``ct`` the cotangents of its results, ``acc`` those of the values its
body reads from outside)::

    buf, count, stride = the forward loop's slots       # buf[:count]: the states at 0, stride, ...
    pos, top, end = [k * stride for k in range(slots)], count - 1, n
    while end > 0:
        while slots - top >= 2 and end - pos[top] >= 2:                     # push_all
            m = split(end - pos[top], slots - top)
            buf[top + 1], pos[top + 1] = run(body, m, buf[top]), pos[top] + m
            top += 1
        start = pos[top]
        x = run(body, end - 1 - start, buf[top])                          # advance
        ct, dacc = vjp(body, x)(ct); acc += dacc                          # vjp_step
        end -= 1
        if end == start:
            top -= 1

The slots are loop variables, of the forward loop and then of the backward loop: one ``[slots, ...]``
buffer per loop variable and the int32 positions (in the forward loop, the count and the stride they
follow from), ``slots * (state bytes + 4) <= B`` whatever the trip count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from turnout import checkpoint_schedule as schedule
from turnout import math_ops, memory_plan, nest, ops
from turnout.control_flow import checkpoints
from turnout.control_flow.contexts import ControlFlowContext, LoopVar, WhileContext
from turnout.control_flow.tensor_array import from_graph_value, to_graph_value
from turnout.control_flow.while_loop import _call
from turnout.control_flow.while_loop import while_loop as build_while_loop
from turnout.errors import UnsupportedError, describe_node
from turnout.gradients.budgets import LoopBudget
from turnout.gradients.grads import Grads, Key, key
from turnout.gradients.rules import is_differentiable_dtype
from turnout.graph import Tensor

if TYPE_CHECKING:
    from turnout.gradients.core import Backward

Pairs = list[tuple[Tensor, Tensor]]

#: ops whose second run would write state a second time: a body with one cannot be recomputed
WRITES = frozenset({"AssignVariable", "AssignAddVariable", "AssignSubVariable"})


def plan(w: WhileContext, budget: LoopBudget) -> Optional[memory_plan.Checkpointing]:
    """How many slots the gradient of ``w`` recomputes in under ``budget`` (the loop's own, or its
    share of the gradient's: ``Backward.budget_of``), or None when it keeps gradient stacks. Raises
    ``UnsupportedError`` naming the loop where its budget calls for recomputation and the loop cannot
    be recomputed (no Python body, a body that writes state) or holds no state, or where an earlier
    gradient gave the forward loop more slots than this budget holds. A forward loop holds one set
    of slots, so a gradient whose budget holds those an earlier one made recomputes from them.

    A gradient of such a gradient (second order) differentiates the backward loop built here, a loop
    without a budget of its own: it keeps stacks of that loop's values, which a run's budget counts;
    the cotangents of the checkpoints it starts from go back into the forward states they hold
    (``Kept``)."""
    cp = checkpoints.checkpointing_of(w, budget.bytes, budget.budget_from)
    if cp is None:
        return None
    head = (f'gradients: while_loop "{w.name}" has {budget.words}, which only recomputation '
            "from checkpoints meets at any trip count")
    why = cannot_recompute(w)
    if why is not None:
        raise UnsupportedError(f"{head}, but {why}. Drop the budget, or give swap_memory=True to keep and swap "
                               "its gradient stacks instead")
    if cp.slots < 1:
        raise UnsupportedError(f"{head}, but it holds no loop state: one takes {cp.state_bytes} bytes (its loop "
                               f"variables and a {memory_plan.POSITION_BYTES}-byte position); "
                               f"{budget.advice(cp.state_bytes)}")
    held = w.checkpoints.plan if w.checkpoints is not None else cp
    if held.slots * held.state_bytes > cp.budget:
        raise UnsupportedError(f"{head}, but an earlier gradient gave its forward loop {held.slots} checkpoint "
                               f"slot(s) of {held.state_bytes} bytes, more than this budget holds, and a loop holds "
                               "one set of slots; give this gradient at least "
                               f"{held.slots * held.state_bytes} bytes")
    return held


def cannot_recompute(w: WhileContext) -> Optional[str]:
    """Why the body of ``w`` cannot be run again to recompute a state (None: it can)."""
    if w.body_fn is None:
        return "it has no Python body function to call again"
    for n in w.graph.nodes:
        if n.op in WRITES and n.context is not None and n.context.is_within(w):
            return f"its body writes state ({describe_node(n)}), which a recomputation would write again"
    return None


def loop_grad(b: Backward, w: WhileContext, dys: Sequence[Optional[Tensor]], cp: memory_plan.Checkpointing
              ) -> Pairs:
    """Gradients of the initial values and invariants of ``w``, given those of its Exits, by the
    checkpointed backward loop (module docstring)."""
    g = b.g
    lvs = checkpoints.state_vars(w)
    wanted = [i for i, lv in enumerate(lvs) if lv.merge.id in b.on_path
              and is_differentiable_dtype(lv.merge.outputs[0].dtype)]
    invs = [e for e in w.invariants.values() if e.id in b.on_path and b.wants(e.inputs[0])]
    if not wanted and not invs:
        return []
    ck = checkpoints.slots_of(w, cp, build_while_loop)  # (built into the forward loop by its first such gradient)
    diff = [i for i, lv in enumerate(lvs) if is_differentiable_dtype(lv.merge.outputs[0].dtype)]
    outside = [Outside(tuple(b.aliases(g.nodes[k[0]].outputs[k[1]])), b.value(e.inputs[0]))
               for k, e in w.invariants.items()]
    ct0 = [dys[i + 1] if dys[i + 1] is not None else b.zeros_like(lvs[i].enter.inputs[0]) for i in diff]
    acc0 = [b.zeros_like(e.inputs[0]) for e in invs]
    # the arrays the body only writes are not checkpointed: a recomputed step is given the loop's
    # initial one, whose writes it drops (``checkpoints.accumulators``)
    st = State(checkpoints.checkpointed(w), {i: b.value(lvs[i].enter.inputs[0]) for i in w.accumulators})
    bufs0 = [b.value(exit_of(lv)) for lv in ck.bufs]
    n = checkpoints.trips(b.value(exit_of(w.counter)), w, cp)
    n_slots = b.value(ck.slots)  # the slots the buffers have (``checkpoints.slot_count``: at most ``slots``)
    # one position a slot the buffers have (not a slot the budget holds: a constant of that many would sit
    # in the graph, and every run would make and carry it, however few slots the backend gives); counted
    # from a buffer's shape, which a compiled backend knows while tracing wherever the loop is (a count
    # made of other constants may not be: a cond's branch exports only sizes as constants)
    ones = ops.fill([ops.shape(bufs0[0])[0]], 1)
    pos0 = math_ops.cumsum(ones, exclusive=True) * b.value(exit_of(ck.stride))
    init = [b.value(exit_of(ck.count)) - 1, n, pos0, *bufs0, *ct0, *acc0]
    nb, nc = len(bufs0), len(ct0)
    kept = Kept.of(b, w, ck, dys, diff, st)

    read = [o for e, o in zip(w.invariants.values(), outside, strict=True) if e in invs]

    def reverse(top: Tensor, end: Tensor, pos: Tensor, *rest: Any) -> list[Tensor]:
        ctx = g.current_context
        assert isinstance(ctx, WhileContext)
        _seed_captures(ctx, outside)
        flat = [to_graph_value(v) for v in rest]  # an outside TensorArray's gradient is one
        bufs, ct, acc = flat[:nb], flat[nb:nb + nc], flat[nb + nc:]
        top, pos, bufs = push_all(w, st, n_slots, end, top, pos, bufs)
        start = ops.gather(pos, top)
        x = advance(w, st, [ops.gather(buf, top) for buf in bufs], end - 1 - start)
        out = vjp_step(b, w, st.whole(x), diff, ct, acc, read)
        ct, acc = kept.add(out[:nc], end - 1), out[nc:]
        end = end - 1
        return [ops.where(ops.equal(end, start), top - 1, top), end, pos, *bufs, *ct, *acc]

    res = build_while_loop(lambda top, end, *_: end > 0, reverse, init, parallel_iterations=1,
                           name=f"gradients/{w.name}")
    res = [to_graph_value(r) for r in res]
    ct, acc = res[3 + nb:3 + nb + nc], res[3 + nb + nc:]
    pairs: Pairs = [(lvs[i].enter.inputs[0], ct[diff.index(i)]) for i in wanted]
    pairs += [(e.inputs[0], a) for e, a in zip(invs, acc, strict=True)]
    return pairs


@dataclass(frozen=True)
class Kept:
    """The cotangents of the forward loop's checkpoints, where a gradient of its gradient (second
    order) gives them: ``cts``, per checkpointed state variable that has one, its index among the
    cotangents the backward loop carries and the cotangent of its slot buffer; ``stride`` and
    ``count``, the forward loop's last stride and number of states kept, and ``slots``, the buffers'
    slot count.

    Why: the buffers the backward loop starts from are states of the forward loop, so the backward
    loop's result depends on the initial values through them too. When the forward loop ends, slot
    ``k < count`` holds the state before step ``k * stride`` (``checkpoints.keep``), so the
    cotangent of that slot adds to the state's as the backward loop reverses that step."""

    cts: tuple[tuple[int, Tensor], ...]
    stride: Optional[Tensor] = None
    count: Optional[Tensor] = None
    slots: Optional[Tensor] = None

    @classmethod
    def of(cls, b: Backward, w: WhileContext, ck: checkpoints.OnlineCheckpoints, dys: Sequence[Optional[Tensor]],
           diff: list[int], st: State) -> Kept:
        """The checkpoints' cotangents among ``dys`` (one per loop variable of ``w``; none in a
        first-order gradient, which then builds nothing for them)."""
        at = {id(lv): k for k, lv in enumerate(w.loop_vars[:len(dys)])}  # (slots built by this gradient: no dys)
        cts = tuple((diff.index(i), d) for lv, i in zip(ck.bufs, st.kept, strict=True)
                    if id(lv) in at and (d := dys[at[id(lv)]]) is not None and i in diff)
        if not cts:
            return cls(())
        return cls(cts, b.value(exit_of(ck.stride)), b.value(exit_of(ck.count)), b.value(ck.slots))

    def add(self, ct: list[Tensor], p: Tensor) -> list[Tensor]:
        """``ct``, the cotangents of the state before step ``p``, with those of the slot that holds it."""
        if not self.cts:
            return ct
        assert self.stride is not None and self.count is not None and self.slots is not None
        k = p // self.stride
        held = ops.logical_and(ops.equal(p % self.stride, 0), k < self.count)
        at = ops.maximum(ops.minimum(k, self.slots - 1), 0)
        out = list(ct)
        for j, d in self.cts:
            got = ops.gather(d, at)
            out[j] = out[j] + ops.where(held, got, ops.zeros_like(got))
        return out


@dataclass(frozen=True)
class State:
    """How a checkpointed state stands for the loop's whole state: ``kept``, the indices of the state
    variables a checkpoint holds (``checkpoints.checkpointed``), in order; ``spare``, per other index
    (an array the body only writes), the array a recomputed step is given."""

    kept: list[int]
    spare: dict[int, Tensor]

    def whole(self, xs: Sequence[Tensor]) -> list[Tensor]:
        """The whole state, the checkpointed ``xs`` with the spare arrays between them."""
        it = iter(xs)
        return [self.spare[i] if i in self.spare else next(it) for i in range(len(self.kept) + len(self.spare))]

    def part(self, whole: Sequence[Tensor]) -> list[Tensor]:
        """What a checkpoint holds of a whole state."""
        return [whole[i] for i in self.kept]


def push_all(w: WhileContext, st: State, slots: Tensor, end: Tensor, top: Tensor, pos: Tensor, bufs: list[Tensor]
             ) -> tuple[Tensor, Tensor, list[Tensor]]:
    """The schedule's pushes before the next reversed step, as an inner ``tn.while_loop`` (named
    ``<loop>/push``): while two slots or more are free from the top one and the top segment
    ``[pos[top], end)`` has two steps or more, recompute ``split`` steps from the top state and keep the
    state reached in the next slot. Why a loop of its own: the steps that push nothing (most of them)
    then neither compute a split nor rewrite the slots."""
    def can_push(top: Tensor, pos: Tensor, *_: Any) -> Tensor:
        return ops.logical_and(slots - top >= 2, end - ops.gather(pos, top) >= 2)

    def push(top: Tensor, pos: Tensor, *bufs: Tensor) -> list[Tensor]:
        start = ops.gather(pos, top)
        m = split(end - start, slots - top)
        x = advance(w, st, [ops.gather(buf, top) for buf in bufs], m)
        bufs_next = [ops.update_slot(buf, top + 1, v) for buf, v in zip(bufs, x, strict=True)]
        return [top + 1, ops.update_slot(pos, top + 1, start + m), *bufs_next]

    out = build_while_loop(can_push, push, [top, pos, *bufs], parallel_iterations=1, name=f"{w.name}/push")
    out = [to_graph_value(t) for t in out]
    return out[0], out[1], out[2:]


def exit_of(lv: LoopVar) -> Tensor:
    """The value loop variable ``lv`` leaves its loop with."""
    assert lv.exit is not None
    return lv.exit.outputs[0]


@dataclass(frozen=True)
class Outside:
    """A tensor from outside the loop that its body reads: every name it has in the contexts it was
    captured into (``Backward.aliases``; the body may name it by any of them), and its value as the
    gradient sees it (``Backward.value``: popped, where it was made in an enclosing loop being
    differentiated)."""

    names: tuple[Tensor, ...]
    value: Tensor

    @property
    def keys(self) -> list[Key]:
        """The capture keys of its names."""
        return [key(t) for t in self.names]


def _seed_captures(ctx: ControlFlowContext, outside: Sequence[Outside]) -> list[Tensor]:
    """Make context ``ctx`` capture each outside tensor once, under every one of its names, so that
    every capture the recomputed body makes in ``ctx`` or in a context nested in it meets the same
    value (``value``; where ``ctx`` already captured it, that capture). Returns
    those captures."""
    out = []
    for o in outside:
        got = next((ctx._captured[k] for k in o.keys if k in ctx._captured), None)
        if got is None:
            got = ctx._make_capture(ctx._outer_value(o.value)) if isinstance(ctx, WhileContext) else \
                ctx.capture(o.names[0])
        for k in o.keys:
            if k not in ctx._captured:
                ctx.add_capture(k, got)
        out.append(got)
    return out


def call_body(w: WhileContext, xs: Sequence[Tensor]) -> list[Tensor]:
    """The loop's body function called once more on the flat state ``xs``; its flat result, as the
    context it is called in sees it. Why captured: a body may return a tensor from outside the loop
    unchanged (``lambda i, v: (i + 1, x)``), which no op of the call then reads, so nothing captured
    it; its capture (the one ``_seed_captures`` made) is what carries its gradient outside."""
    assert w.body_fn is not None
    out = _call(w.body_fn, w.structure, nest.pack_as(w.structure, [from_graph_value(x) for x in xs]),
                f'while_loop "{w.name}"', "body")
    if not isinstance(out, (list, tuple)) and len(xs) == 1:
        out = [out]
    flat = [ops.convert_to_tensor(to_graph_value(v)) for v in nest.flatten(out)]
    here = w.graph.current_context
    return flat if here is None else [here.capture(t) for t in flat]


def advance(w: WhileContext, st: State, x: list[Tensor], m: Tensor) -> list[Tensor]:
    """The checkpointed state ``m`` steps after ``x``: the body recomputed in an inner loop
    (``recompute``), given the spare arrays (``State``), its writes to them dropped."""
    res = build_while_loop(lambda j, *_: j < m, lambda j, *xs: [j + 1, *st.part(call_body(w, st.whole(xs)))],
                           [ops.constant(0), *x], name=f"{w.name}/recompute")
    return [to_graph_value(r) for r in res[1:]]


def vjp_step(b: Backward, w: WhileContext, x: list[Tensor], diff: list[int], ct: list[Tensor], acc: list[Tensor],
             read: Sequence[Outside]) -> list[Tensor]:
    """In the backward loop's body (``branch``), the step that reverses: the body called once more on
    state ``x``, differentiated with the cotangents ``ct`` as ``grad_ys``; returns the cotangents of
    ``x`` and ``acc`` plus those of the outside tensors ``read`` that the body reads.

    The step's gradient covers the nodes this call builds and nothing else: the region it walks is the
    whole loop body, where the recomputation that produced ``x`` also reads the outside tensors, and
    ``x`` is a point to differentiate at, not a function of them within the step."""
    g = b.g
    branch = g.current_context
    assert branch is not None
    invb = _seed_captures(branch, read)
    xb = [branch.capture(t) for t in x]
    n0 = len(g.nodes)
    ys = call_body(w, xb)
    xs = [xb[i] for i in diff]
    step = type(b)(g, branch, [*xs, *invb], [ys[i] for i in diff])
    step.on_path = {i for i in step.on_path if i >= n0}
    step.share(b.inner_budget(w))  # (the loops the body runs, made again here, share what the originals had)
    grads = Grads()
    for i, c in zip(diff, ct, strict=True):
        grads.add(ys[i], branch.capture(c))
    step.backprop_region(branch, grads)
    new_ct = []
    for t in xs:
        d = grads.total(t)
        new_ct.append(b.refine_shape(d, t.shape) if d is not None else b.zeros_like(t))
    return new_ct + [grads.accumulate_into(t, branch.capture(a)) for t, a in zip(invb, acc, strict=True)]


def split(length: Tensor, free: Tensor) -> Tensor:
    """``checkpoint_schedule.split(length, free)`` in int32 graph arithmetic that never overflows: it
    saturates at ``SPLIT_CAP`` exactly where the pure version does, so both pick the same split."""
    cap = schedule.SPLIT_CAP
    length = ops.minimum(length, cap // 2)

    def grow(beta: Tensor, beta1: Tensor, beta2: Tensor, r: Tensor) -> list[Tensor]:
        k, d = free + r + 1, r + 1
        q, rem = beta // d, beta % d  # beta * k // d == q * k + rem * k // d, exactly
        nxt = ops.where(q > cap // k, cap, ops.minimum(cap, q * k + rem * k // d))
        return [nxt, beta, beta1, r + 1]

    one, zero = ops.constant(1), ops.constant(0)
    beta, beta1, beta2, _ = build_while_loop(lambda beta, *_: beta < length, grow, [one, zero, zero, zero],
                                             name="split")
    return ops.minimum(length - 1, ops.maximum(ops.maximum(1, length - (beta - beta1)), beta2))


__all__ = ["WRITES", "Outside", "State", "advance", "call_body", "cannot_recompute", "exit_of", "loop_grad", "plan",
           "split", "vjp_step"]
