"""A loop on one device of a graph that spans devices, run chunk by chunk so its stacks can move.

Why. The fast partitioned executor compiles a region whose nodes all sit on one device whole (one
``lax.while_loop`` in one segment call, no host work per iteration). For a loop that pushes gradient
stacks that leaves the host no point between pushes at which to take a full chunk out, so its
``swap_memory`` could not be honoured and a run longer than the chunk had to start again with a
bigger one. Such a loop (at the root of the program, or in a branch of a cond the host decides; not
inside a loop the host drives, whose iterations must not wait for the host) is therefore scheduled
as a segment of its own (``Segment.driven``) and run here as the one-device fast backend runs its
top-level loops: compiled so that one call runs at most as many iterations as the stacks have room
for (an extra predicate ``ptr + pushes <= capacity``, with the largest pushes per iteration seen so
far), and re-entered by the host, which hands full chunks to the device's ``ChunkStore`` (to host
memory, or kept on the device) and takes them back for the backward loop between calls.

Three compiled functions per region, each committed to the region's device by its inputs: ``init``
(the carry before the first iteration, with pending stacks made concrete), ``chunk`` (iterations up
to the stacks' room) and ``finish`` (the exit side), made by the one builder of both drivers
(``fast.driven.DrivenLoop``, in the one calling convention of the compiled side). The stacks are
donated to each call, so pushes update the buffers in place.
"""

from __future__ import annotations

from typing import Any, Union

import jax

from turnout.devices.swap import SpanningStacks
from turnout.fast.cut import Segment
from turnout.fast.driven import DrivenLoop, MakeEmitter
from turnout.fast.outcome import Raise, Retry, enforce
from turnout.fast.regions import Key


class RegionDriver:
    """The compiled ``init`` / ``chunk`` / ``finish`` of a driven segment's loop on its device, and
    the host loop that runs them (``run``). The segment (``fast.cut``) gives the loop, the keys it
    gives back (and those that leave with a live flag) and its stacks' pushes and pops per iteration;
    ``emitter`` makes the emitter of each trace (``DevicePlan.emitter``, counted by the executor)."""

    def __init__(self, emitter: MakeEmitter, capacity: int, seg: Segment, who: str) -> None:
        assert seg.driven is not None
        self.region = seg.driven
        self.capacity = capacity
        self.who = who
        self.push, self.pop = seg.push, seg.pop
        # (its pointers stop at the capacity: the executor reads a device's word only when it must wait)
        self.loop = DrivenLoop(seg.driven, seg.writes, set(seg.fetched), seg.push, seg.pop, capacity, emitter,
                               jax.jit, measured=seg.measured, free_pointers=False)

    def run(self, env_in: dict[Key, Any], state: dict[str, Any], max_iter: Any, stacks: SpanningStacks,
            device: str) -> Union[tuple[dict[Key, Any], dict[Key, Any], dict[str, Any]], Retry]:
        """Run the loop from ``state`` (its device's state), moving chunks between calls; returns the
        segment's ``(writes, live flags, new state)``, or the ``Retry`` of stacks that outgrew their
        chunk within one call (the run's, ``PlanRun.retry``: it starts again with the larger chunk)."""
        got = self.loop.run(env_in, state, max_iter, stacks.stores[device], self.who)
        if isinstance(got, Retry):
            return got
        if isinstance(got, Raise):
            enforce(got)
        assert not isinstance(got, Raise)
        out, lives, new = got
        stacks.settle(device, {s: v for s, v in new.items() if s in self.push or s in self.pop})
        return out, lives, new


__all__ = ["RegionDriver"]
