"""The per-device steps of a placed program, as a ``RunSchedule`` prints them.

Why a module of its own: the cut itself (segments, host conds, host loops) is the compiled side's
one cut, ``fast.cut``, made for any placement, and it is printed by one function
(``fast.explain.cut_steps``); what is particular to a placed program is only how a step names its
device (``cpu:1``, or a cluster task's full name), which ``devices.names`` knows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from turnout.devices.names import parse
from turnout.fast.cut import Schedule, schedule
from turnout.fast.explain import cut_steps
from turnout.fast.regions import Program
from turnout.run_schedule import Step as RunStep

if TYPE_CHECKING:
    from turnout.devices.plan_run import DevicePlan


def placed_schedule(program: Program, device_of: dict[int, str], fed: set[int]) -> Schedule:
    """``fast.cut.schedule`` of a placed program, its segments labelled by their devices' short names."""
    return schedule(program, device_of, fed, label=lambda d: parse(d).short)


def steps_of(plan: DevicePlan) -> tuple[RunStep, ...]:
    """The per-device steps of a placed program's plan as schedule steps (``fast.explain.cut_steps``,
    each step naming its device)."""
    info = plan.stack_info
    return cut_steps(plan.schedule.steps, plan.capacity, lambda k: k in info and info[k].swap,
                     lambda d: parse(d).short)


__all__ = ["placed_schedule", "steps_of"]
