"""``Session.explain`` on the fast backends: the plan a run would take, as a ``RunSchedule``.

Why here and not in the backend: the schedule is a *reading* of the plan (``fast.plan.Plan``) the
runs themselves use; making it must not compile, run or change what a later run does. So this module
takes a plan and returns steps, and the backend only finds the plan (``FastBackend.explain``). The
partitioned backend reads its placed program's segments the same way (``devices.segments.steps_of``).
"""

from __future__ import annotations

from turnout.fast.cut import Segment
from turnout.fast.plan import Plan
from turnout.fast.regions import WhileRegion
from turnout.run_schedule import RunSchedule, Step


def fallback_schedule(reason: str) -> RunSchedule:
    """The schedule of a signature the fast backend runs on the reference interpreter (``reason``:
    why it cannot be compiled)."""
    return RunSchedule("fast", (Step("interpreter", f"the reference interpreter (fallback: {reason})"),))


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
                      steps=tuple(_stage(plan, st) for st in plan.stages))
        return RunSchedule("fast", (fused,), (staged, *otherwise),
                           ("a repeated run of this signature calls the rung that held the last run directly "
                            "(its lane)",) if lane else ())
    if plan.direct_ok:
        step = Step("compiled call", "one jitted call: feeds and Variables in, fetches, the error word and live "
                                     "flags out (Direct)")
        return RunSchedule("fast", (step,), otherwise, ("a repeated run of this signature is its lane: the same call, "
                                                        "without the general path's checks",) if lane else ())
    steps = tuple(_stage(plan, st) for st in plan.stages)
    return RunSchedule("fast", steps if len(steps) == 1 else (Step("staged", "the stages in order", steps=steps),),
                       otherwise)


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


def _stage(plan: Plan, st: Segment) -> Step:
    if st.driven is not None:
        swap = any(k in plan.host for k in st.push)
        return Step("driven loop", f"{_loop(st.driven)}: at most {plan.capacity} iterations per call, full stack "
                                   f"chunks {'swapped to host memory' if swap else 'kept on the device'}")
    loops = sum(1 for it in st.items if isinstance(it, WhileRegion))
    return Step("compiled call", f"a segment of {len(st.items)} item(s)" + (f", {loops} loop(s)" if loops else ""))


def _loop(region: WhileRegion) -> str:
    return f"loop {region.frame[-1]!r}"



__all__ = ["fallback_schedule", "plan_schedule"]
