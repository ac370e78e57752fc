"""A run's memory budget met by recomputation: the gradient rebuilt, and the run repeated on it.

A gradient built without a budget (``tn.gradients(loss, params)``) keeps stacks: one entry per
iteration of each loop it reverses. A run's budget (``Session.run(..., memory_budget=B)``) comes
after that graph is built, so the planner's "recompute" (``memory_plan``, rules 3 and 5) cannot be
how the stacks are built; a run keeps them while they fit, ``max_iterations`` of them. A run that
outgrows them need not fail: every top-level ``tn.gradients`` call is recorded on its graph
(``GradientCall``), so the session builds, once, a *twin* of each call that reverses such a loop:
the same call with ``memory_budget=`` the loops' share of the run's budget, which recomputes from
checkpoints (``gradients.recompute``; the slots it adds to the forward loop are loop variables that
no fetch of the old gradient needs, so its runs do not compute them). The fetches are then copied
with the old gradient's outputs replaced by the twin's (``turnout.graph_replace``: an optimizer's
updates and the ``train_op`` that groups them), and the run is repeated on the copies.

Why a twin in the same graph, not a run-time switch in a backend: recomputation is a graph like any
other, so the reference interpreter, the small-step system and every compiled and partitioned
backend run the same plan, checked against the same oracle; and the old gradient stays as it was,
so a run without a budget, and a run whose stacks fit, run exactly as before (no twin is built).

Its meaning, as plain Python (``session.run`` under ``memory_budget=B``)::

    try:
        return run(fetches)                        # stacks, while they fit (the backend checks)
    except ResourceExhaustedError:
        plan = plan_memory(fetches, B)             # the loops it plans to recompute
        twins = {old: gradients(*call, memory_budget=share(call, plan)) for call in calls(plan)}
        return run(replaced(fetches, twins))       # and every later run of these fetches under B
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Optional

from turnout import memory_plan
from turnout.control_flow import checkpoints
from turnout.control_flow.contexts import WhileContext
from turnout.errors import UnsupportedError
from turnout.graph import Graph, Tensor, ancestors
from turnout.graph_replace import replaced

#: builds the call again: its budget (None: none) -> its outputs
Builder = Callable[[Optional[int]], list[Optional[Tensor]]]


@dataclass
class GradientCall:
    """One top-level ``tn.gradients`` call, as the graph records it: its ``outputs``; the loops it
    reverses (``loops``) and those whose gradient it built with stacks (``stacked``); ``start``, the
    id of the first node it made; ``source``, the user's line; ``build``, the call again under a
    budget; and the ``twins`` built so far (budget -> outputs)."""

    outputs: tuple[Optional[Tensor], ...]
    loops: frozenset[str]
    stacked: frozenset[str]
    start: int
    source: Optional[str]
    build: Builder
    twins: dict[int, tuple[Optional[Tensor], ...]] = field(default_factory=dict)

    def forget_nodes_from(self, n0: int) -> None:
        """Drop the twins whose nodes a builder that raised removed (``Graph._roll_back``)."""
        self.twins = {b: t for b, t in self.twins.items() if all(x is None or x.node.id < n0 for x in t)}

    def twin(self, budget: int) -> tuple[Optional[Tensor], ...]:
        """The call built again with ``memory_budget=budget`` (once per budget)."""
        if budget not in self.twins:
            self.twins[budget] = tuple(self.build(budget))
        return self.twins[budget]


def record(g: Graph, start: int, outputs: Sequence[Optional[Tensor]], source: Optional[str], build: Builder) -> None:
    """Record a top-level gradient call that made nodes ``start`` on, with these outputs."""
    made = g.nodes[start:]
    stacked = frozenset(str(n.attrs["loop_name"]) for n in made if n.op == "StackNew" and "loop_name" in n.attrs)
    done = frozenset(str(n.attrs["loop"]) for n in made if n.op == "CheckpointTrips")
    g.gradient_calls.append(GradientCall(tuple(outputs), stacked | done, stacked, start, source, build))


@dataclass(frozen=True)
class Rebuilt:
    """What a run under a budget runs instead of ``fetches``: the copies (``fetches``), and per
    rebuilt gradient call its source line and the budget its twin was built under (``budgets``)."""

    fetches: list[Tensor]
    budgets: tuple[tuple[str, int], ...]
    loops: frozenset[str]

    def lines(self) -> list[str]:
        """What a report says of it."""
        return [f"the gradient of loop(s) {sorted(self.loops)} rebuilt to recompute from checkpoints under the "
                f"run's memory_budget: tn.gradients{f' at {src}' if src else ''} with memory_budget={b}"
                for src, b in self.budgets]


def wanted(plan: memory_plan.MemoryPlan) -> frozenset[str]:
    """The loops a plan would recompute whose gradient was built with stacks (``built=False``)."""
    return frozenset(lp.loop for lp in plan.loops if lp.action == memory_plan.RECOMPUTE and not lp.built)


def calls_for(g: Graph, fetches: Sequence[Tensor], loops: frozenset[str]) -> list[GradientCall]:
    """The recorded gradient calls that reverse one of ``loops`` with stacks and that ``fetches``
    read an output of."""
    need = ancestors(list(fetches))
    return [c for c in g.gradient_calls if c.stacked & loops
            and any(o is not None and o.node.id in need for o in c.outputs)]


def why_not(g: Graph, loop: str) -> Optional[str]:
    """Why the gradient of ``loop`` would keep stacks under any budget (None: it would recompute)."""
    w = next((c for c in g.contexts if isinstance(c, WhileContext) and c.name == loop), None)
    if w is None:
        return f'loop "{loop}" has no builder record (a graph loaded or imported), so its body cannot be run again'
    if checkpoints.checkpointing_of(w, 1 << 62) is None:
        return f'loop "{loop}" keeps stacks under any budget (swap_memory=True, or a state of no static size)'
    return None


def share(c: GradientCall, plan: memory_plan.MemoryPlan) -> int:
    """The budget the twin of call ``c`` is built under: the run's whole budget where ``c`` reverses
    every loop of the run's plan, else the plan's budgets of the loops it reverses (their shares of
    the run's, and the own budgets of those that have one), at most the run's. Why: its loops then
    share among them what the run's plan gave them, and the gradient's shares sum to at most that."""
    assert plan.run_budget is not None
    if all(lp.loop in c.loops for lp in plan.loops):
        return plan.run_budget
    return max(1, min(plan.run_budget, sum(lp.budget or 0 for lp in plan.loops if lp.loop in c.loops)))


def for_run(g: Graph, fetches: Sequence[Tensor], plan: memory_plan.MemoryPlan) -> Optional[Rebuilt]:
    """The rebuilt run of ``fetches`` under ``plan`` (its run budget), or None when it has nothing
    to rebuild (no loop it would recompute keeps stacks, or no recorded gradient call made them).
    Raises ``UnsupportedError`` saying why where a twin cannot be built or the fetches copied."""
    assert plan.run_budget is not None
    want = wanted(plan)
    calls = calls_for(g, fetches, want) if want else []
    if not calls:
        return None
    for loop in sorted(want & frozenset().union(*(c.stacked for c in calls))):
        why = why_not(g, loop)
        if why is not None:
            raise UnsupportedError(why)
    old_to_new: dict[Tensor, Tensor] = {}
    budgets = []
    for c in calls:
        budget = share(c, plan)
        twin = c.twin(budget)
        budgets.append((c.source or "", budget))
        for old, new in zip(c.outputs, twin, strict=True):
            if old is not None and new is not None:
                old_to_new[old] = new
    copies = replaced(list(fetches), old_to_new, "run_budget")
    return Rebuilt(copies, tuple(budgets), want)


def rebuilt_run(g: Graph, fetches: Sequence[Tensor], platform_name: str, run_budget: int,
                error: BaseException) -> Rebuilt:
    """``for_run`` after a run of ``fetches`` under ``run_budget`` stopped with ``error`` (a
    ``ResourceExhaustedError``): the rebuilt run, or ``error`` raised again where nothing can be
    rebuilt; where a twin cannot be built, ``error``'s type with its words and the reason."""
    plan = memory_plan.graph_plan(g, list(fetches), platform_name, run_budget)
    try:
        got = for_run(g, fetches, plan)
    except UnsupportedError as why:
        raise type(error)(f"{error}. The gradient could not be rebuilt to recompute under the run's budget: "
                          f"{why}") from error
    if got is None:
        raise error
    return got


def explain_lines(g: Graph, fetches: Sequence[Tensor], plan: memory_plan.MemoryPlan,
                  done: Optional[Rebuilt]) -> list[str]:
    """What ``Session.explain`` says of a run under ``plan``'s budget: the rebuilt gradients its runs
    of these fetches use (``done``), else which it would rebuild if a run outgrew the stacks."""
    if done is not None:
        return [f"this session runs these fetches with {line}" for line in done.lines()]
    want = wanted(plan)
    calls = calls_for(g, fetches, want) if want and plan.run_budget is not None else []
    out = []
    for c in calls:
        loops = sorted(c.stacked & want)
        why = [w for w in map(partial(why_not, g), loops) if w is not None]
        src = f"tn.gradients{f' at {c.source}' if c.source else ''}"
        out.append(f"a run that outgrows the stacks of loop(s) {loops} is repeated with the gradient ({src}) rebuilt "
                   "to recompute from checkpoints" if not why else
                   f"a run that outgrows the stacks of loop(s) {loops} stops: the gradient ({src}) cannot be rebuilt "
                   f"to recompute ({'; '.join(why)})")
    return out


__all__ = ["Builder", "GradientCall", "Rebuilt", "calls_for", "explain_lines", "for_run", "rebuilt_run",
           "record", "share", "wanted", "why_not"]
