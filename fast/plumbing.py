"""The paper's control-flow plumbing as wiring: what Switch, Merge, Enter, NextIteration and Exit pass.

Why a module of its own: the emitter does these primitives inside a trace (``fast.conds``,
``fast.loops``, ``fast.light_loops``, ``fast.unrolled``, ``fast.case_chain``) and the host between
compiled calls (``devices.host_control``), each on its own environment: a traced value in a dict, a
value on some device in a ``devices.host_env.HostEnv``. What differs is how a value is read and
written; which output takes which input, which is dead and which index a Merge reports is one set of
rules (the semantics' [E-Switch], [E-Merge-Live], [E-Enter], [E-Exit-Live]), written here once as values that
each environment applies (``EmitterCore.wire``, ``HostEnv.wire``).

A ``Wire`` says: output ``dst`` takes the value of tensor ``src`` as the structural node ``reader``
passes it on (the SPMD emitter moves it to ``reader``'s device), or, with no ``src``, the constant
``value`` (a Merge's index, ``DEAD``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from turnout.fast.regions import CondRegion, Key, WhileRegion, key
from turnout.fast.values import DEAD
from turnout.graph import Node, Tensor


@dataclass(frozen=True)
class Wire:
    """Output ``dst`` takes ``src`` as ``reader`` passes it on, or the constant ``value`` when
    ``src`` is None."""

    dst: Key
    src: Optional[Tensor] = None
    reader: Optional[Node] = None
    value: Any = DEAD


def dead(keys: Sequence[Key]) -> list[Wire]:
    """Every key in ``keys`` dead: a cond's outputs or a loop's Exits where what enters is dead
    ([E-Switch-Dead], [E-Merge-AllDead])."""
    return [Wire(k) for k in keys]


def switch_wires(switches: Sequence[Node], taken: int) -> list[Wire]:
    """[E-Switch] with the predicate decided: each Switch passes its data to output ``taken`` (a
    cond's branch ``b``; a loop's body with 1, its exit side with 0), and its other output is dead."""
    out = []
    for s in switches:
        out.append(Wire(key(s.outputs[taken]), s.inputs[0], s))
        out.append(Wire(key(s.outputs[1 - taken])))
    return out


def branch_joins(r: CondRegion, b: bool) -> list[tuple[Node, Optional[Tensor], Any]]:
    """[E-Merge-Live] after branch ``b`` of ``r`` ran: per Merge, in order, the input it forwards and its
    index, or ``(None, DEAD)`` where the branch gives it none (a Merge of the other branch alone)."""
    out: list[tuple[Node, Optional[Tensor], Any]] = []
    for m, slots in r.merges:
        if b in slots:
            out.append((m, m.inputs[slots[b]], np.asarray(slots[b], np.int32)))
        else:
            out.append((m, None, DEAD))
    return out


def join_wires(r: CondRegion, b: bool) -> list[Wire]:
    """``branch_joins`` as wires: each Merge's value and index outputs."""
    out = []
    for m, src, idx in branch_joins(r, b):
        out.append(Wire(key(m.outputs[0]), src, m) if src is not None else Wire(key(m.outputs[0])))
        out.append(Wire(key(m.outputs[1]), value=idx))
    return out


def invariant_wires(r: WhileRegion) -> list[Wire]:
    """[E-Enter-Const] of a loop invariant (``is_constant``): its value is the parent scope's, in every
    iteration."""
    return [Wire(key(inv.outputs[0]), inv.inputs[0], inv) for inv in r.invariants]


def entries(r: WhileRegion) -> list[tuple[Tensor, Node]]:
    """[E-Enter] of each loop variable, in order: the tensor that enters and the Merge that reads it
    (a loop's carry starts from these values)."""
    return [(e.inputs[0], m) for e, m, _, _, _ in r.loop_vars]


def next_values(r: WhileRegion) -> list[tuple[Tensor, Node]]:
    """[E-Next-Live] of each loop variable, in order: the tensor the body hands to the next
    iteration and the Merge that reads it."""
    return [(nx.inputs[0], m) for _, m, nx, _, _ in r.loop_vars]


def merge_outputs(r: WhileRegion, first: bool) -> list[tuple[Key, Key, np.ndarray]]:
    """[E-Merge-Live] at a loop's header, per loop variable in order: the keys of its Merge's value and
    index, and the index, the Enter's input slot at the first iteration and the NextIteration's
    after (the value is the carry's, which each environment holds its own way)."""
    return [(key(m.outputs[0]), key(m.outputs[1]), np.asarray(es if first else ns, np.int32))
            for _, m, _, es, ns in r.loop_vars]


def exit_wires(r: WhileRegion) -> list[Wire]:
    """[E-Exit-Live]: each Exit passes on the exit side's value of what it reads (the Switch's false
    output) to the scope around the loop."""
    return [Wire(key(x.outputs[0]), x.inputs[0], x) for x in r.exits]


def exit_keys(r: WhileRegion) -> list[Key]:
    """The keys of a loop's Exits (all dead when a loop variable enters dead)."""
    return [key(x.outputs[0]) for x in r.exits]


__all__ = ["Wire", "branch_joins", "dead", "entries", "exit_keys", "exit_wires", "invariant_wires", "join_wires",
           "merge_outputs", "next_values", "switch_wires"]
