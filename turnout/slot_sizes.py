"""How many checkpoint slots a backend gives a recomputed loop: learnt from its runs.

A loop under its own memory budget keeps checkpoints of its state in slots (``CheckpointSlots``,
``turnout.control_flow.checkpoints``), buffers that every run allocates and zero-fills whole. The
small-step system, which specifies, gives it every slot its budget holds. The gradient's values do
not depend on the count, only its cost does: too few slots and the backward loop recomputes more
(about one forward pass more each time the count is squared away), too many and every run pays for
memory it never writes (a
256 MiB budget cost the LSTM step of 1000 iterations 3.6 times its store-everything time). So the
backend sizes them as it sizes a gradient stack's buffer: a plan gives a loop at most its
``slot_capacity`` slots — the plan's stack capacity (``FastOptions.stack_chunk``, or the rung of
the capacity ladder), until a run needed more — and a run whose loop needed more (its trip count,
up to the budget's count, over what it got: ``CheckpointTrips``) says so. The run's values stand
(they do not depend on the count); the runs after it are planned with the smallest power of two
that holds what it needed, compiled once per power.

Why per program, not per plan: every plan of one program (at any rung, specialised on any feed)
runs the same loops, so what one run learnt sizes them all.

The one-device backend (``fast.backend``) and the fast partitioned executor's tiers
(``devices.fast_executor``: the per-device segments and the SPMD program) size them alike: each keeps
a ``SlotSizes`` and gives each plan the ``SlotPlan`` that ``SlotSizes.plan`` makes. So do the
reference interpreter and the partitioned reference executor (``reference.executor``,
``devices.executor``), from ``FIRST_CAPACITY`` on a plan's first run, their ``CheckpointSlots`` and
``CheckpointTrips`` rules reading the run's ``SlotPlan``, and a cluster session's driver
(``devices.ray_runtime``), which sends its tasks the capacity and learns from what they report: an
interpreter too allocates and fills the buffers whole, so a budget that holds far more states than
the runs take made every run pay for them all (docs/memory_budgets.rst has the figures). Why this
module is not in ``fast/``: the interpreters, which import no JAX, read it too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Optional

from turnout.control_flow.checkpoints import fewest_slots
from turnout.graph import Node
from turnout.memory_plan import checkpoint_bytes

#: the slot capacity of an interpreter's first run of a plan (the compiled backends start at the plan's
#: stack capacity instead): the runs after one that needed more get the smallest power of two that holds it
FIRST_CAPACITY = 64


def slots_given(slots: int, capacity: Optional[int]) -> int:
    """How many slots a loop whose budget holds ``slots`` gets in a trace whose ``slot_capacity`` is
    ``capacity``: all of them where it is ``None`` (the small-step system's count), else at most
    ``capacity`` and at least ``checkpoints.fewest_slots``."""
    return slots if capacity is None else min(slots, max(capacity, fewest_slots(slots)))


@dataclass(frozen=True)
class SlotPlan:
    """The checkpoint slots of one plan: its ``CheckpointSlots`` nodes (one per loop reversed from
    checkpoints), the most slots its traces give a loop (``capacity``; None: every one the budget
    holds), and where a run that needed more says so (``learn``, the ``ctx.learn_slots`` of its
    traces; None where every loop gets all its budget holds, or nothing learns)."""

    nodes: tuple[Node, ...] = ()
    capacity: Optional[int] = None
    learn: Optional[Callable[[Any], None]] = None

    @property
    def budgets(self) -> dict[str, int]:
        """Per loop, the most slots its budget holds."""
        return {str(n.attrs["loop"]): int(n.attrs["slots"]) for n in self.nodes}

    @property
    def counts(self) -> dict[str, int]:
        """Per loop, the slots this plan's traces give it (``slots_given``)."""
        return {loop: slots_given(s, self.capacity) for loop, s in self.budgets.items()}

    def bytes(self, nodes: Optional[Iterable[Node]] = None) -> dict[str, int]:
        """Per loop (of ``nodes``, a subset of this plan's: a device's; all where None), the bytes of
        the slots this plan's traces give it (at most: a loop bounded by ``maximum_iterations`` may
        get fewer), as a memory budget counts them (``memory_plan.checkpoint_bytes``): the backend's
        own accounting of its checkpoints."""
        return dict(checkpoint_bytes(n.attrs, slots_given(int(n.attrs["slots"]), self.capacity))
                    for n in (self.nodes if nodes is None else nodes))

    def bytes_by_device(self, device_of: Mapping[int, str]) -> dict[str, dict[str, int]]:
        """``bytes`` per device of a placed plan (``device_of``: node id -> device)."""
        out: dict[str, dict[str, int]] = {}
        for n in self.nodes:
            out.setdefault(device_of[n.id], {}).update(self.bytes([n]))
        return out

    @property
    def stats(self) -> dict[str, Any]:
        """What a run's stats say of the slots (``checkpoint_slots``: ``counts``;
        ``checkpoint_bytes``: ``bytes``), where the plan has any."""
        return {"checkpoint_slots": self.counts, "checkpoint_bytes": self.bytes()} if self.nodes else {}

    @property
    def learns(self) -> bool:
        """Whether a run of this plan may learn that a loop needs more slots than it gives (some loop
        gets fewer than its budget holds). Such a plan takes no lane: a lane repeats one plan, and
        would never take up what a run learnt."""
        return any(c < self.budgets[loop] for loop, c in self.counts.items())


class SlotSizes:
    """The slot capacities learnt per program (``functionalize.program_key``), and the needs the runs
    in progress reported (from a host callback of the compiled program, or while tracing), which
    ``take`` turns into capacities after the run."""

    def __init__(self) -> None:
        self.learnt: dict[Any, int] = {}
        self.needs: dict[Any, int] = {}

    def capacity(self, program: Any) -> Optional[int]:
        """The slot capacity learnt for ``program``, or None (none learnt: the plan's own capacity)."""
        return self.learnt.get(program)

    def plan(self, program: Any, nodes: Iterable[Node], capacity: int) -> SlotPlan:
        """The ``SlotPlan`` of a plan of ``program`` whose nodes are ``nodes`` and whose stack
        capacity is ``capacity``: at most what the program's runs taught (``capacity(program)``), else
        ``capacity``; learning where a loop gets fewer than its budget holds."""
        slots = tuple(n for n in nodes if n.op == "CheckpointSlots")
        sized = SlotPlan(slots, self.capacity(program) or capacity)
        return SlotPlan(slots, sized.capacity, self.learner(program)) if sized.learns else sized

    def notes(self, program: Any, nodes: Iterable[Node], capacity: int = FIRST_CAPACITY) -> tuple[str, ...]:
        """What ``Session.explain`` says of the slots an interpreter's plan of ``program`` made now
        would give (``plan``, ``slot_notes``): ``capacity`` until a run teaches more."""
        plan = self.plan(program, nodes, capacity)
        return slot_notes(plan.budgets, plan.counts, self.capacity(program), f"a first run's {capacity}")

    def learner(self, program: Any) -> Callable[[Any], None]:
        """What a trace of ``program``'s plans calls with the slots a run needed (``ctx.learn_slots``)."""
        return partial(self._need, program)

    def _need(self, program: Any, needed: Any) -> None:
        self.needs[program] = max(self.needs.get(program, 0), int(needed))

    def take(self) -> set[Any]:
        """The needs reported so far made capacities (the smallest power of two holding each), and the
        programs whose capacity grew (their plans are made again by the next run)."""
        grown = set()
        for program, needed in self.needs.items():
            cap = 1 << max(needed - 1, 0).bit_length()
            if cap > self.learnt.get(program, 0):
                self.learnt[program] = cap
                grown.add(program)
        self.needs.clear()
        return grown


def slot_notes(budgets: dict[str, int], given: dict[str, int], learnt: Optional[int],
               first: str = "the plan's stack capacity") -> tuple[str, ...]:
    """What ``Session.explain`` says of a plan's checkpoint slots: per loop reversed from checkpoints
    (``budgets``: the slots its budget holds; ``given``: the most the plan gives it), and whether that
    was learnt from a run (``learnt``: the program's learnt capacity, or None: ``first`` says where
    the count comes from)."""
    why = "learnt from an earlier run's trip count" if learnt is not None else first
    return tuple(f"loop {loop!r} keeps at most {given[loop]} checkpoint slots of the {most} its memory_budget holds"
                 + (f" ({why}; a longer run teaches more)" if given[loop] < most else "")
                 for loop, most in budgets.items())


__all__ = ["FIRST_CAPACITY", "SlotPlan", "SlotSizes", "slot_notes", "slots_given"]
