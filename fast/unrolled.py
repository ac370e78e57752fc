"""Loops unrolled while tracing: the form of a loop whose variables change shape across iterations.

An XLA loop keeps one type, so a loop variable that grows (``shape_invariants``: a concatenation
per iteration; the indices and values a gather's gradient accumulates in a loop) has no
``lax.while_loop``. Such a loop still compiles when the trace knows its trip count: its predicate is
known at every iteration while tracing (a counter from a constant against a constant or fed bound).
The emitter then runs it as the interpreter does, one iteration after the other, each body traced
with the shapes its own iteration has: the program holds one copy of the body per iteration, so the
form is kept to loops of at most ``FastOptions.unroll_max`` bodies (``UNROLL_MAX``, 64, by default).

Why not chosen before tracing: whether a carry keeps its type is known only once its body is
traced. The emitter tries the loop's form, and a loop whose carry changes type is refused inside
its trace (``loops.CarryChanges``); ``Emitter.run_while`` catches that refusal around the one loop
and unrolls it here. Where its predicate is not known while tracing but fed values alone decide
what its header reads, the plan is specialised on them (``NeedsStatic``), and the next trace knows it.
"""

from __future__ import annotations

from typing import Any, NoReturn, Optional

import jax.numpy as jnp
import numpy as np

from turnout.errors import UnsupportedError
from turnout.fast.conds import small_decision
from turnout.fast.emitter_core import Env
from turnout.fast.light_loops import LightLoop, LightLoops
from turnout.fast.loops import CarryChanges
from turnout.fast.lowering_base import NeedsStatic, feeds_behind
from turnout.fast.outcome import NONTERM
from turnout.fast.plumbing import dead, entries, exit_keys, exit_wires
from turnout.fast.regions import Key, item_nodes, key, tensor_of
from turnout.fast.values import DEAD, is_static


def run_unrolled(em: LightLoops, loop: LightLoop, refusal: UnsupportedError) -> None:
    """Loop ``loop.r`` unrolled on ``loop.env``: its Exits' values into it. ``refusal`` (why the loop
    could not be lowered: its carry changed type, ``CarryChanges``, or what it computes from that,
    such as a shape that a pop of a value pushed in such a loop decides) is raised where it cannot
    be unrolled either: a predicate known only when the program runs (or ``NeedsStatic`` where fed
    values decide it), or more than ``em.unroll_max`` bodies."""
    r = loop.r
    em.hold(r, em.state)  # (the stacks its gradient holds take their Variables' values now, ``fast.held``)
    vals = [em.read(loop.env, t, m) for t, m in entries(r)]
    if any(v is DEAD for v in vals):
        em.wire(dead(exit_keys(r)), loop.env)
        return
    if loop.framed:
        em.frames.append(loop.number)
    try:
        bodies, henv, pred = _iterate(em, loop, vals, refusal)
    finally:
        if loop.framed:
            em.frames.pop()
    if loop.framed:
        em._leave_frame(loop.before, loop.off)
    _budget(em, loop, bodies)
    eenv = loop.side(henv, pred, 0)
    em.run_items(r.exit_side, eenv)
    em.wire(exit_wires(r), eenv, loop.env)


def _iterate(em: LightLoops, loop: LightLoop, vals: list[Any], refusal: UnsupportedError) -> tuple[int, Env, Any]:
    """The bodies, one after the other, while the predicate (known while tracing) holds: how many ran,
    and the header's environment and predicate that ended the loop."""
    r = loop.r
    for k in range(em.unroll_max + 1):
        henv, pred = loop.header(vals, k == 0)
        if not is_static(pred):
            _not_known(em, loop, k, refusal)
        if not bool(pred):
            return k, henv, pred
        if k == em.unroll_max:
            break
        benv = loop.side(henv, pred, 1)
        em.run_items(r.body, benv)
        vals = [em.read(benv, nxt.inputs[0], m) for _, m, nxt, _, _ in r.loop_vars]
    raise _refused(refusal, f"it runs more than {em.unroll_max} bodies, too many to unroll (FastOptions.unroll_max)")


def _not_known(em: LightLoops, loop: LightLoop, k: int, refusal: UnsupportedError) -> NoReturn:
    """A predicate known only when the program runs: ``NeedsStatic`` where the loop's carry changes
    type and, at the first iteration, fed values alone decide what the header reads (the loop's
    entry values and invariants), else the refusal."""
    keys = _feeds_deciding(em, loop) if k == 0 and isinstance(refusal, CarryChanges) else None
    if keys:
        raise NeedsStatic(f"{refusal}; its trip count is known only when the program runs", keys)
    raise _refused(refusal, "its trip count is known only when the program runs")


def _refused(refusal: UnsupportedError, why: str) -> UnsupportedError:
    """The error of a loop that could be neither lowered nor unrolled: ``refusal``, the reason the
    lowering gave, and where that was its carry changing type, ``why`` it was not unrolled either."""
    if isinstance(refusal, CarryChanges):
        return UnsupportedError(f"{refusal}; {why}")
    return refusal


def _feeds_deciding(em: LightLoops, loop: LightLoop) -> Optional[frozenset[Key]]:
    """The fed tensors that alone decide the values the header of ``loop`` reads before its first
    iteration and the trace does not know (``lowering_base.feeds_behind``), each a count or a flag
    (``conds.small_decision``), or ``None`` where something else does."""
    r = loop.r
    entries = {key(m.outputs[0]): (e.inputs[0], em.read(loop.env, e.inputs[0], m)) for e, m, _, _, _ in r.loop_vars}
    entries.update({key(inv.outputs[0]): (inv.inputs[0], loop.base[key(inv.outputs[0])]) for inv in r.invariants})
    read = {key(t) for it in r.header for n in item_nodes(it) for t in n.inputs}  # (a cond's nodes too)
    keys: set[Key] = set()
    for k, (t, v) in entries.items():
        if k not in read or is_static(v):
            continue
        got = feeds_behind(t, em.fed)
        if got is None or not all(small_decision(tensor_of(t.graph, k)) for k in got):
            return None  # (something else decides it, or data: a plan per value would compile every run)
        keys |= got
    return frozenset(keys) or None


def _budget(em: LightLoops, loop: LightLoop, bodies: int) -> None:
    """The iteration budget (``max_iterations``, a run-time argument) checked against the bodies the
    unrolled loop ran: more than it allows is the error a loop that ran out of iterations gives."""
    if em.max_iter is None or not bodies:
        return
    over = jnp.asarray(np.int32(bodies)) > jnp.asarray(em.max_iter)
    if not loop.number:
        em.check(~over, loop.message, code="nonterm")
    else:
        em._set_err(over, NONTERM + loop.off)


__all__ = ["run_unrolled"]
