"""The per-device steps of a placed program, as a ``RunSchedule`` prints them.

Why a module of its own: the cut itself (segments, host conds, host loops) is the compiled side's
one cut, ``fast.cut``, made for any placement; what is particular to a placed program is only how a
step names its device (``cpu:1``, or a cluster task's full name), which ``devices.names`` knows.
"""

from __future__ import annotations

from turnout.devices.names import parse
from turnout.fast.cut import HostCond, Schedule, Segment, Step, schedule
from turnout.fast.regions import Program
from turnout.run_schedule import Step as RunStep


def placed_schedule(program: Program, device_of: dict[int, str], fed: set[int]) -> Schedule:
    """``fast.cut.schedule`` of a placed program, its segments labelled by their devices' short names."""
    return schedule(program, device_of, fed, label=lambda d: parse(d).short)


def steps_of(steps: list[Step]) -> tuple[RunStep, ...]:
    """The per-device steps of a placed program (``fast.cut``: segments, host conds, host loops) as
    schedule steps."""
    out: list[RunStep] = []
    for s in steps:
        if isinstance(s, Segment):
            kind = "driven loop" if s.driven is not None else "compiled call"
            out.append(RunStep(kind, s.describe(), parse(s.device).short))
        elif isinstance(s, HostCond):
            branches = tuple(RunStep("staged", f"branch {b}", steps=steps_of(s.branches[b]))
                             for b in (True, False))
            out.append(RunStep("host cond", f"predicate {s.region.pred.name}", steps=branches))
        else:
            over = ", ".join(parse(d).short for d in s.devices)
            parts = tuple(RunStep("staged", part, steps=steps_of(sub))
                          for part, sub in (("header", s.header), ("body", s.body), ("exit", s.exit_side)) if sub)
            out.append(RunStep("host loop", f"loop {s.region.frame[-1]!r} over {over}", parse(s.home).short, parts))
    return tuple(out)


__all__ = ["placed_schedule", "steps_of"]
