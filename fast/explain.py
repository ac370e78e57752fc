"""``Session.explain`` on the fast backends: the plan a run would take, as a ``RunSchedule``.

Why here and not in the backend: the schedule is a *reading* of the plan (``fast.plan.Plan``) the
runs themselves use; making it must not compile, run or change what a later run does. So this module
takes a plan and returns steps, and the backend only finds the plan (``FastBackend.explain``). The
steps of a cut (``fast.cut``: the staged path's stages, a placed program's per-device segments and
host conds and loops) are printed by one function, ``cut_steps``, for both backends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

from turnout.fast import cut
from turnout.fast.plan import Plan
from turnout.fast.regions import WhileRegion
from turnout.run_schedule import RunSchedule, Step


def fallback_schedule(reason: str, backend: str = "fast", on: str = "the reference interpreter") -> RunSchedule:
    """The schedule of a signature that ``backend`` runs on its reference executor ``on`` (``reason``:
    why it cannot be compiled)."""
    return RunSchedule(backend, (Step("interpreter", f"{on} (fallback: {reason})"),))


def plan_schedule(plan: Plan, rungs: list[int], lane: bool = True) -> RunSchedule:
    """The steps of a run of ``plan`` on the one-device fast backend; ``rungs``: its capacity ladder
    (``FastBackend._ladder``); ``lane``: whether a repeated run may take its lane (not under a run's
    memory budget, which the general path checks, nor on a plan specialised on values or cut, whose
    runs each go through ``fast.specialise``). The loops a memory plan swaps are the plan's own
    (``Plan.swapped``), as the runs read them."""
    otherwise = (Step("interpreter", "the reference interpreter, if tracing finds an op the compiler refuses"),)
    if plan.fused is not None:
        fused = Step("compiled call", f"the whole program in one call, every loop a lax loop, gradient stacks "
                                      f"{_rungs(rungs)}{_host(plan)}")
        staged = Step("staged", "when the stacks outgrow the largest rung: the stages in order",
                      steps=_stages(plan))
        return RunSchedule("fast", (fused,), (staged, *otherwise),
                           ("a repeated run of this signature calls the rung that held the last run directly "
                            "(its lane)",) if lane else ())
    if plan.direct_ok:
        step = Step("compiled call", "one jitted call: feeds and Variables in, fetches, the error word and live "
                                     "flags out (Direct)")
        return RunSchedule("fast", (step,), otherwise, ("a repeated run of this signature is its lane: the same call, "
                                                        "without the general path's checks",) if lane else ())
    steps = _stages(plan)
    dropped = (f"the whole program as one call was refused when traced ({plan.refused}): the stages run "
               "instead",) if plan.refused else ()
    return RunSchedule("fast", steps if len(steps) == 1 else (Step("staged", "the stages in order", steps=steps),),
                       otherwise, dropped)


def _rungs(rungs: list[int]) -> str:
    """The ladder in words: every rung up to twelve, else the first three, the last and the count."""
    if len(rungs) == 1:
        return f"of {rungs[0]} entries"
    shown = f"{', '.join(str(r) for r in rungs)} entries" if len(rungs) <= 12 else \
        f"{', '.join(str(r) for r in rungs[:3])}, ..., {rungs[-1]} entries: {len(rungs)} rungs"
    return f"on the rung of the capacity ladder ({shown}) that holds the run"


def _host(plan: Plan) -> str:
    """Which loops' stacks the fused stage keeps in host memory (``Plan.host``), if any."""
    loops = sorted({plan.stack_info[k].loop for k in plan.host})
    return f", those of loop(s) {', '.join(repr(lp) for lp in loops)} in host memory (a copy at each push " \
           "and pop)" if loops else ""


def _stages(plan: Plan) -> tuple[Step, ...]:
    """The staged path's stages: the plan's cut for one device."""
    return cut_steps(plan.stages, plan.capacity, lambda k: k in plan.host)


def cut_steps(steps: Sequence[cut.Step], capacity: int, swaps: Callable[[str], bool],
              label: Callable[[str], Optional[str]] = lambda _: None) -> tuple[Step, ...]:
    """The steps of a cut (``fast.cut``) as schedule steps: a compiled segment, a driven loop (at most
    ``capacity`` iterations per call, its full chunks swapped to host memory where ``swaps`` says so of
    its stacks, else kept on the device), a host cond (its branches) or a host loop (its header, body
    and exit side). ``label`` names a step's device (None: the backend's one device)."""
    out: list[Step] = []
    for s in steps:
        if isinstance(s, cut.Segment) and s.driven is not None:
            kept = "swapped to host memory" if any(swaps(k) for k in s.push) else "kept on the device"
            out.append(Step("driven loop", f"{_loop(s.driven)}: at most {capacity} iterations per call, full stack "
                                           f"chunks {kept}", label(s.device)))
        elif isinstance(s, cut.Segment):
            loops = sum(1 for it in s.items if isinstance(it, WhileRegion))
            out.append(Step("compiled call", s.describe() + (f", {loops} loop(s) compiled whole" if loops else ""),
                            label(s.device)))
        elif isinstance(s, cut.HostCond):
            branches = tuple(Step("staged", f"branch {b}", steps=cut_steps(s.branches[b], capacity, swaps, label))
                             for b in (True, False))
            out.append(Step("host cond", f"predicate {s.region.pred.name}", steps=branches))
        else:
            over = ", ".join(str(label(d)) for d in s.devices)
            parts = tuple(Step("staged", part, steps=cut_steps(sub, capacity, swaps, label))
                          for part, sub in (("header", s.header), ("body", s.body), ("exit", s.exit_side)) if sub)
            out.append(Step("host loop", f"loop {s.region.frame[-1]!r} over {over}", label(s.home), parts))
    return tuple(out)


def _loop(region: WhileRegion) -> str:
    return f"loop {region.frame[-1]!r}"



__all__ = ["cut_steps", "fallback_schedule", "plan_schedule"]
