"""A fused group of a compiled partition, and its compiled call.

Why a module of its own: ``devices.compiled_partition`` finds the groups of a partition and fires
them in the interpreter's protocol; what a group is (its members, its edges to the outside) and how
it becomes one compiled call is this module's one job. The call is built in the one calling
convention of the compiled side (``fast.call_spec``): its inputs from outside the group are its fed
values, keyed by (member, input slot), its returned member outputs its outputs, and its error word
says that a member's check failed. It is traced again when its inputs change type, so each call's
results come back with their own ``CallSpec`` (``call_spec.tagged_call``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import jax
import jax.numpy as jnp

from turnout.fast.call_spec import CallArgs, Traced, tagged_call
from turnout.fast.lower_node import lower_node
from turnout.fast.lowering_base import Shows
from turnout.fast.ranges import Ranges
from turnout.fast.values import is_static
from turnout.graph import Node

Key = tuple[int, int]


@dataclass
class Group:
    """One fused group of a partition: its members in topological order and its edges to the outside."""

    gid: int
    members: tuple[Node, ...]
    #: (member id, input slot) -> position in the compiled function's arguments, for inputs from outside
    slot_index: dict[tuple[int, int], int]
    #: member outputs the compiled function returns: those read outside the group, and in the root frame
    #: (where fetches live) every output; the others are never emitted
    returns: tuple[Key, ...]
    expected: int  # deliveries (data and control) that make the group ready at a tag
    fn: Optional[Callable[..., Any]] = None
    interpreted_reason: Optional[str] = None

    @property
    def head(self) -> Node:
        """The first member: the node whose ready item stands for the group's."""
        return self.members[0]

    def describe(self) -> str:
        """The group as error messages and reports name it: its size and first members."""
        return f"fused group of {len(self.members)} ops ({', '.join(m.name for m in self.members[:3])}" + (
            ", ...)" if len(self.members) > 3 else ")")


class _Checks:
    """The lowering rules' ``LoweringContext`` for a group: only ``check`` is used (groups hold no
    Variables or stacks, and no input of a group is a root-frame feed it could be specialised on);
    each check's ``ok`` is kept, and the call's error word says whether all held."""

    stop_on_error = False
    free_pointers = False
    push_limit = None
    capacity = 0  # (TensorArray ops are never in a group)
    slot_capacity = None  # (a recomputed loop's slots: every one its budget holds)
    learn_slots = None

    def __init__(self) -> None:
        self.oks: list[Any] = []
        self.fed: set[int] = set()
        self.dense: set[str] = set()
        self.full: dict[str, Any] = {}
        self.ranges = Ranges()
        self.fresh_writes: dict[int, frozenset[int]] = {}

    def check(self, ok: Any, message: str, code: str = "kernel", shows: Optional[Shows] = None) -> None:
        # (a group whose check fails runs again on the reference kernels, whose error shows the values)
        if is_static(ok) and bool(ok):
            return
        self.oks.append(ok)


def compile_group(g: Group) -> Callable[..., Any]:
    """The group as a compiled call in the one calling convention (``fast.call_spec``): its inputs
    from outside are the fed values (by their (member, slot)), its returned member outputs the
    outputs, and its error word 1 where a member's check failed (the caller then runs the group on
    the reference kernels, whose error names the op and its values). Each member is lowered by
    ``fast.lower_node``, the step the fast backend's emitter takes too (folded with the reference
    kernels when its inputs are known while tracing). Traced again when its inputs change type, so
    each call's results come back with their own ``CallSpec`` (``call_spec.tagged_call``)."""
    args = CallArgs(tuple(sorted(g.slot_index, key=g.slot_index.__getitem__)), (), bounded=False)

    def body(feeds: dict[Key, Any], state: dict[str, Any], stacks: dict[str, Any], bound: Any) -> Traced:
        env: dict[Key, Any] = {}
        ctx = _Checks()
        for m in g.members:
            ins = [feeds[(m.id, s)] if (m.id, s) in g.slot_index else env[(t.node.id, t.index)]
                   for s, t in enumerate(m.inputs)]
            for i, v in enumerate(lower_node(ctx, m, ins)):
                env[(m.id, i)] = v
        ok = jnp.all(jnp.stack([jnp.asarray(o, bool) for o in ctx.oks])) if ctx.oks else True
        return Traced({k: env[k] for k in g.returns}, 0 if ok is True else jnp.where(ok, 0, 1), {}, {})

    return tagged_call(args, body, jax.jit)  # type: ignore[no-any-return]


__all__ = ["Group", "Key", "compile_group"]
