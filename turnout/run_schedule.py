"""How a run will execute, as a value: ``Session.explain(fetches, feed_dict)`` returns a ``RunSchedule``.

Why a value and not a log line: every backend chooses a route for a run — the interpreter, one
compiled call, the fused attempt on a ladder of stack capacities, the staged path that drives loops
chunk by chunk, a graph placed on one device, per-device segments with loops and conds the host
drives, one SPMD program over a mesh — and a user who wonders why a run is slow, or an engineer who
wonders which route a test exercised, needs that choice in front of them without running the graph.
A ``RunSchedule`` is a short tree of ``Step`` records the backend makes from the same plan it runs
(nothing is compiled to make it); ``str()`` prints it as indented text, and the fields can be tested.

The vocabulary of ``Step.kind`` (one word per way a piece of a run executes):

- ``"interpreter"``: the reference interpreter fires the graph's ops (also the fast backend's fallback).
- ``"compiled call"``: one jitted function — a whole program, the fused attempt, or a segment.
- ``"driven loop"``: a loop with gradient stacks run a chunk of iterations per compiled call, its full
  stack chunks kept on the device or swapped to host memory between calls.
- ``"staged"``: a list of compiled segments and driven loops run in order (the steps below it).
- ``"host cond"`` / ``"host loop"``: a conditional or loop spanning devices, whose predicate the host
  reads; the steps below it run on their devices.
- ``"spmd program"``: one ``shard_map`` program over every device, spanning loops in lockstep.
- ``"partition"``: one device's partition of the partitioned reference executor, or of a cluster's task.
- ``"task"``: one task of a cluster (its process), the partitions of its devices below it.
- ``"one device"``: a placed graph whose every node sits on one device, run by the one-device backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from turnout.errors import ArgumentError

#: the kinds a ``Step`` may have (see the module docstring)
STEP_KINDS = ("interpreter", "compiled call", "driven loop", "staged", "host cond", "host loop", "spmd program",
              "partition", "one device", "task")

#: what the interpreter's one step says (the reference interpreter, and a backend that plans nothing)
INTERPRETER_STEP = "the graph's ops fire one by one as their inputs arrive"


@dataclass(frozen=True)
class Step:
    """One piece of a run: what executes it (``kind``, one of ``STEP_KINDS``), on which device (None:
    the backend's default device or the host), a short description, and the steps inside it (a host
    loop's body, the stages of the staged path, the schedule of a one-device run)."""

    kind: str
    what: str
    device: Optional[str] = None
    steps: tuple[Step, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in STEP_KINDS:  # a backend's own mistake, caught where it is made
            raise ArgumentError(f"unknown step kind {self.kind!r}; one of {STEP_KINDS}")

    def lines(self, indent: str = "") -> list[str]:
        """This step and those inside it, one line each, indented by depth."""
        where = f" [{self.device}]" if self.device else ""
        out = [f"{indent}{self.kind}{where}: {self.what}"]
        for s in self.steps:
            out += s.lines(indent + "  ")
        return out

    def walk(self) -> list[Step]:
        """This step and every step inside it, depth first."""
        return [self, *(x for s in self.steps for x in s.walk())]


@dataclass(frozen=True)
class RunSchedule:
    """How a run of some fetches with some feed signature executes on a session's backend.

    ``backend``: the backend's name (``"reference"``, ``"fast"``, ...); ``steps``: what runs, in
    order; ``otherwise``: what runs instead when the first attempt cannot finish (the fused attempt's
    stacks outgrow their largest rung: the staged path; a program the compiler refuses while tracing:
    the interpreter); ``notes``: facts that change later runs (a repeated run's lane, the capacity
    ladder, specialisation on fed values)."""

    backend: str
    steps: tuple[Step, ...]
    otherwise: tuple[Step, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def walk(self) -> list[Step]:
        """Every step of the schedule (``steps`` then ``otherwise``), depth first."""
        return [x for s in (*self.steps, *self.otherwise) for x in s.walk()]

    def kinds(self) -> set[str]:
        """The kinds of every step: what a test asks of a route."""
        return {s.kind for s in self.walk()}

    def __str__(self) -> str:
        out = [f"backend {self.backend!r}:"]
        for s in self.steps:
            out += s.lines("  ")
        if self.otherwise:
            out.append("  otherwise:")
            for s in self.otherwise:
                out += s.lines("    ")
        out += [f"  note: {n}" for n in self.notes]
        return "\n".join(out)


__all__ = ["INTERPRETER_STEP", "STEP_KINDS", "RunSchedule", "Step"]
