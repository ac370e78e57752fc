"""Lowering rules of state: Variables (read and assigned through the run-time state), gradient
stacks (pushed and popped through ``fast.stacks``, counted and held stacks included), and the count of
a recomputed loop's checkpoint slots, sized to what the runs need.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from turnout.errors import UnsupportedError, describe_node
from turnout.fast import counted_stacks
from turnout.fast import stacks as stk
from turnout.fast.lowering_base import (
    LOWERING_RULES,
    Rule,
    lowering_rule,
    np_dtype,
)
from turnout.fast.values import Handle, is_static
from turnout.slot_sizes import slots_given


# ---- state: Variables and gradient stacks ----------------------------------------------------------
@lowering_rule("VarHandle")
def _var_handle(ctx, n, xs):
    return [Handle("var", n.attrs["var_name"])]


@lowering_rule("ReadVariable")
def _read_var(ctx, n, xs):
    return [ctx.read_var(n, xs[0])]


def _assign(combine: Callable[[Any, Any], Any]) -> Rule:
    def rule(ctx, n, xs):
        h, v = xs
        new = jnp.asarray(combine(ctx.read_var(n, h), v)).astype(np_dtype(n.attrs["dtype"]))
        ctx.write_var(h, new)
        return [new]

    return rule


LOWERING_RULES.update({
    "AssignVariable": _assign(lambda old, v: v),
    "AssignAddVariable": _assign(lambda old, v: old + v),
    "AssignSubVariable": _assign(lambda old, v: old - v),
})


@lowering_rule("StackNew")
def _stack_new(ctx, n, xs):
    return [Handle("stack", n.id)]


@lowering_rule("StackPush")
def _stack_push(ctx, n, xs):
    h, index, v = xs
    if ctx.holds(h):  # its one value is taken as its loop starts (``fast.held``)
        return [v]
    s0 = ctx.get_stack(n, h)
    ctx.note_push_shape(h, v, index)
    # a counted stack whose chain of loops is being traced: the push is proved to fit and to land at
    # its index's position, and no pop reads its index record (``fast.counted_stacks``)
    key = stk.state_key(h.name)
    proved = key in ctx.dense
    if proved and key in ctx.counter_pushes:  # it pushes a counter: its pops compute the value from their index
        ctx.note_push(n, h, v)
        ctx.note_push_range(h, v)
        return [v]
    if proved and is_static(v):
        ctx.note_push(n, h, v)
        if ctx.pushed_constant(h) is not None:  # every pop returns the constant: nothing to write
            ctx.skip_push(h)
            return [v]
    try:
        s, ok = stk.push(s0, index, v, free=ctx.free_pointers, proved=proved, limit=ctx.push_limit)
    except UnsupportedError as e:  # a value whose shape differs from the stack's elements: name the push
        raise UnsupportedError(f"{describe_node(n)}: {e}") from None
    if proved:
        ctx.note_push_range(h, v)
    else:
        # one message for every positional push: a failed one only sends the run back to index records
        ctx.check(stk.positional(s0, index), "a positional stack pushed away from its position", code="unrecorded")
        ctx.check(ok, f"{describe_node(n)}: stack chunk overflow", code="overflow")
    ctx.set_stack(h, s)
    ctx.note_push(n, h, v, index)
    return [v]


@lowering_rule("StackPop")
def _stack_pop(ctx, n, xs):
    h, index = xs
    if ctx.holds(h):
        return [ctx.held_value(n, h)]
    s0 = ctx.get_stack(n, h)
    if s0.pending:
        ctx.check(np.asarray(False), f"{describe_node(n)}: StackPop on an empty stack", code="underflow")
        return [jnp.zeros(ctx.pending_shape(n, h), np_dtype(n.attrs["dtype"]))]
    const = ctx.pushed_constant(h)  # every push pushed this constant: the pop's value is known (a shape)
    dims = ctx.full.get(stk.state_key(h.name))
    if dims is not None:  # a counted stack after its chain: an entry at every position (``fast.counted_stacks``)
        safe = counted_stacks.proved(ctx.ranges.each(index), dims)
        if not safe:
            ctx.check(counted_stacks.in_range(index, dims), f"{describe_node(n)}: StackPop: the popped value was "
                      "pushed under another iteration index (pushes and pops are not in reverse order)")
        if const is not None:
            return [const]
        counter = ctx.counter_pushes.get(stk.state_key(h.name))
        if counter is not None:  # the entry under the index is the counter's value there
            v = counted_stacks.value_of_counter(index, *counter)
            ctx.pop_range(h, v)
            return [v]
        ctx.read_skipped(n, h)  # (a push that wrote nothing, for a constant a later trace contradicted)
        v = counted_stacks.read(s0.buf, index, dims)
        ctx.pop_range(h, v)
        return [v]
    s, v, ok, match = stk.pop(s0, index, free=ctx.free_pointers)
    ctx.check(ok, f"{describe_node(n)}: StackPop on an empty stack", code="underflow")
    ctx.check(match, f"{describe_node(n)}: StackPop: the popped value was pushed under another iteration index "
              "(pushes and pops are not in reverse order)")
    ctx.set_stack(h, s)
    if const is None:  # (a constant pushed under this index, in a loop unrolled while tracing)
        const = ctx.pushed_constant(h, index)
    return [v if const is None else const]


# ---- checkpoint slots ------------------------------------------------------------------------------
@lowering_rule("CheckpointSlots")
def _checkpoint_slots(ctx, n, xs):
    # (an array, as the reference kernels give a constant: a numpy scalar would not cross a call as one)
    return [np.asarray(slots_given(int(n.attrs["slots"]), ctx.slot_capacity), np.int32)]


@lowering_rule("CheckpointTrips")
def _checkpoint_trips(ctx, n, xs):
    """The trip count passed on; where the slots were sized below the budget's and the loop needed
    more (``min(trips, slots)`` over what it got), that need goes to ``ctx.learn_slots`` (the backend
    sizes later runs by it): while tracing when the count is known then, else by a host callback
    that only a run that needed more makes."""
    (trips,) = xs
    slots = int(n.attrs["slots"])
    given = slots_given(slots, ctx.slot_capacity)
    learn = ctx.learn_slots
    if learn is None or given >= slots:
        return [trips]
    if is_static(trips):
        if min(int(trips), slots) > given:
            learn(np.int32(min(int(trips), slots)))
        return [trips]
    need = jnp.minimum(jnp.asarray(trips, jnp.int32), np.int32(slots))
    jax.lax.cond(need > given, lambda v: jax.debug.callback(learn, v), lambda v: None, need)
    return [trips]
