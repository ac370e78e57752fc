"""A gradient's memory budget, divided among the loops it reverses.

``tn.gradients(ys, xs, memory_budget=B)`` bounds the bytes that the loops it differentiates save for
it, all of them together, at any trip count: the budget of a training step, given where its gradient
is built. A run's budget (``Session.run(..., memory_budget=)``) comes after the gradient graph is
built, and turns a loop's stacks into recomputation only by building the call again with a budget
once a run outgrew them (``turnout.rebuild``); a gradient's budget comes before, so every
loop it reverses is built the way its share calls for, as if the loop had been given that share as a
budget of its own (``tn.while_loop(..., memory_budget=)``): recomputation from checkpoints where the
loop's state has a static size, else stacks checked against the share as they grow.

Which loops share it: every loop the gradient differentiates, at any depth, inside the context it is
called in (``reversed_loops``), so the shares together bound all it saves there (a gradient taken
inside a loop's body that reaches a loop outside it leaves that loop its own budget). A loop inside
another that keeps stacks is reversed by this gradient and checked against its share. A loop inside
another that recomputes is made again from the body function in each reversed step, whose gradient
is built on its own (``recompute.vjp_step``): that step's gradient gets the shares of the loops
inside (``inside``) as its budget, and its loops, the originals made again, share it as they did.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Optional

from turnout import memory_plan
from turnout.control_flow import checkpoints
from turnout.control_flow.contexts import ControlFlowContext, WhileContext
from turnout.errors import UnsupportedError
from turnout.graph import Graph


@dataclass(frozen=True)
class LoopBudget:
    """The budget a gradient reverses a loop under: ``bytes`` (None: none) and ``words``, how an
    error names it (the loop's own ``memory_budget=``, or its share of the gradient's)."""

    bytes: Optional[int]
    words: str
    #: the smallest budget of the gradient whose shares hold one state of each loop (None: its own)
    floor: Optional[int] = None
    #: whose it is, as the graph records it and plans print it (``memory_plan.LoopPlan.budget_from``)
    budget_from: str = "loop"

    def advice(self, state_bytes: int) -> str:
        """What to give where this budget holds no state of ``state_bytes`` bytes."""
        return f"give at least {state_bytes}" if self.floor is None else f"give the gradient at least {self.floor}"


def own(w: WhileContext) -> LoopBudget:
    """The loop's own budget (``tn.while_loop(..., memory_budget=)``), as every gradient without a
    budget of its own reverses it."""
    return LoopBudget(w.memory_budget, f"memory_budget={w.memory_budget} bytes")


def reversed_loops(g: Graph, root: Optional[ControlFlowContext], on_path: Collection[int]) -> list[WhileContext]:
    """The loops a gradient called in context ``root`` differentiates: those inside ``root``, at any
    depth, with a loop variable or an invariant on the gradient's path (``on_path``)."""
    out = []
    for c in g.contexts:
        if not isinstance(c, WhileContext) or not c.back_prop or c is root or not c.is_within(root):
            continue
        if any(lv.merge.id in on_path for lv in c.loop_vars) or any(e.id in on_path for e in c.invariants.values()):
            out.append(c)
    return out


def inside(shares: Mapping[int, LoopBudget], w: WhileContext) -> int:
    """The shares (``loop_budgets``) of the loops inside ``w``: what one step of ``w`` may save for
    its gradient, where ``w`` recomputes and each step is differentiated again from its body function
    (``recompute.vjp_step``), whose loops, made again, share it as the originals did."""
    return sum(b.bytes or 0 for c in w.graph.contexts if c is not w and c.is_within(w) and id(c) in shares
               for b in [shares[id(c)]])


def loop_budgets(loops: list[WhileContext], budget: int) -> dict[int, LoopBudget]:
    """Each loop's share of a gradient's ``budget`` (keyed by ``id`` of its context), by
    ``memory_plan.shares``: in proportion to its bytes per checkpointed state (a loop that asked to
    swap, or whose state has no static size, keeps stacks and counts as the mean). Refuses with
    ``UnsupportedError`` a budget that leaves a loop no byte."""
    weights = {}
    for w in loops:
        size = checkpoints.state_bytes(w)
        weights[w.name] = None if size is None else size + memory_plan.POSITION_BYTES
    own_ = {w.name: w.memory_budget for w in loops if w.memory_budget is not None}
    got = memory_plan.shares(weights, own_, budget)
    floor = memory_plan.smallest_shared(weights, own_)
    out = {}
    for w in loops:
        share = got[w.name]
        if share < 1:
            raise UnsupportedError(f'gradients: memory_budget={budget} bytes leaves while_loop "{w.name}" none of '
                                   f"it (the {len(loops)} loops it reverses share it); give a larger budget")
        if w.name in own_ and share == w.memory_budget:  # its own, kept: only a larger one of its own helps
            out[id(w)] = own(w)
        else:
            out[id(w)] = LoopBudget(share, f"a share of {share} bytes of the gradient's memory_budget={budget}", floor,
                                    "gradient")
    return out


__all__ = ["LoopBudget", "inside", "loop_budgets", "own", "reversed_loops"]
