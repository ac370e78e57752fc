"""How many checkpoint slots the one-device backend gives a recomputed loop: learnt from its runs.

A loop under its own memory budget keeps checkpoints of its state in slots (``CheckpointSlots``,
``turnout.control_flow.checkpoints``), buffers that every run allocates and zero-fills whole. The
interpreters give it every slot its budget holds. The gradient's values do not depend on the count,
only its cost does: too few slots and the backward loop recomputes more (about one forward pass more
each time the count is squared away), too many and every run pays for memory it never writes (a
256 MiB budget cost the LSTM step of 1000 iterations 3.6 times its store-everything time). So the
backend sizes them as it sizes a gradient stack's buffer: a plan gives a loop at most its
``slot_capacity`` slots — the plan's stack capacity (``FastOptions.stack_chunk``, or the rung of
the capacity ladder), until a run needed more — and a run whose loop needed more (its trip count,
up to the budget's count, over what it got: ``CheckpointTrips``) says so. The run's values stand
(they do not depend on the count); the runs after it are planned with the smallest power of two
that holds what it needed, compiled once per power.

Why per program, not per plan: every plan of one program (at any rung, specialised on any feed)
runs the same loops, so what one run learnt sizes them all.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Optional


class SlotSizes:
    """The slot capacities learnt per program (``FastBackend._program_key``), and the needs the runs
    in progress reported (from a host callback of the compiled program, or while tracing), which
    ``take`` turns into capacities after the run."""

    def __init__(self) -> None:
        self.learnt: dict[Any, int] = {}
        self.needs: dict[Any, int] = {}

    def capacity(self, program: Any) -> Optional[int]:
        """The slot capacity learnt for ``program``, or None (none learnt: the plan's own capacity)."""
        return self.learnt.get(program)

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


def slot_notes(budgets: dict[str, int], given: dict[str, int], learnt: Optional[int]) -> tuple[str, ...]:
    """What ``Session.explain`` says of a plan's checkpoint slots: per loop reversed from checkpoints
    (``budgets``: the slots its budget holds; ``given``: the most the plan gives it), and whether that
    was learnt from a run (``learnt``: the program's learnt capacity, or None)."""
    why = "learnt from an earlier run's trip count" if learnt is not None else "the plan's stack capacity"
    return tuple(f"loop {loop!r} keeps at most {given[loop]} checkpoint slots of the {most} its memory_budget holds"
                 + (f" ({why}; a longer run teaches more)" if given[loop] < most else "")
                 for loop, most in budgets.items())


__all__ = ["SlotSizes", "slot_notes"]
