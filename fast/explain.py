"""``Session.explain`` on the fast backends: the plan a run would take, as a ``RunSchedule``.

Why here and not in the backend: the schedule is a *reading* of the plan (``fast.plan.Plan``) the
runs themselves use; making it must not compile, run or change what a later run does. So this module
takes a plan and returns steps, and the backend only finds the plan (``FastBackend.explain``). The
partitioned backend reads its placed program's segments the same way (``devices.segments.steps_of``).
"""

from __future__ import annotations

from turnout.fast.plan import Plan, Stage
from turnout.fast.regions import WhileRegion
from turnout.run_schedule import RunSchedule, Step


def fallback_schedule(reason: str) -> RunSchedule:
    """The schedule of a signature the fast backend runs on the reference interpreter (``reason``:
    why it cannot be compiled)."""
    return RunSchedule("fast", (Step("interpreter", f"the reference interpreter (fallback: {reason})"),))


def plan_schedule(plan: Plan, rungs: list[int], swapped: frozenset[str] = frozenset(), lane: bool = True
                  ) -> RunSchedule:
    """The steps of a run of ``plan`` on the one-device fast backend; ``rungs``: its capacity ladder
    (``FastBackend._ladder``); ``swapped``: the frames whose full chunks a memory plan swaps
    (``turnout.memory_plan.MemoryPlan.swapped_frames``) besides those that ask for it; ``lane``:
    whether a repeated run may take its lane (not under a run's memory budget, which the general path
    checks, nor on a plan specialised on values or cut, whose runs each go through ``fast.specialise``)."""
    otherwise = (Step("interpreter", "the reference interpreter, if tracing finds an op the compiler refuses"),)
    if plan.fused is not None:
        sizes = (f"of {rungs[0]} entries" if len(rungs) == 1 else
                 f"on the rung of the capacity ladder ({', '.join(str(r) for r in rungs)} entries) that holds the run")
        fused = Step("compiled call", f"the whole program in one call, every loop a lax loop, gradient stacks {sizes}")
        staged = Step("staged", "when the stacks outgrow the largest rung: the stages in order",
                      steps=tuple(_stage(st, plan.capacity, swapped) for st in plan.stages))
        return RunSchedule("fast", (fused,), (staged, *otherwise),
                           ("a repeated run of this signature calls the rung that held the last run directly "
                            "(its lane)",) if lane else ())
    if plan.direct_ok:
        step = Step("compiled call", "one jitted call: feeds and Variables in, fetches, the error word and live "
                                     "flags out (Direct)")
        return RunSchedule("fast", (step,), otherwise, ("a repeated run of this signature is its lane: the same call, "
                                                        "without the general path's checks",) if lane else ())
    steps = tuple(_stage(st, plan.capacity, swapped) for st in plan.stages)
    return RunSchedule("fast", steps if len(steps) == 1 else (Step("staged", "the stages in order", steps=steps),),
                       otherwise)


def _stage(st: Stage, capacity: int, swapped: frozenset[str] = frozenset()) -> Step:
    if st.driven is not None:
        swap = st.driven.swap_memory or st.driven.frame[-1] in swapped
        return Step("driven loop", f"{_loop(st.driven)}: at most {capacity} iterations per call, full stack chunks "
                                   f"{'swapped to host memory' if swap else 'kept on the device'}")
    loops = sum(1 for it in st.items if isinstance(it, WhileRegion))
    return Step("compiled call", f"a segment of {len(st.items)} item(s)" + (f", {loops} loop(s)" if loops else ""))


def _loop(region: WhileRegion) -> str:
    return f"loop {region.frame[-1]!r}"



__all__ = ["fallback_schedule", "plan_schedule"]
