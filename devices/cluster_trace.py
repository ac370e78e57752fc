"""Traces of a cluster run: each task traces its partitions, the driver merges them into one timeline.

In one process the partitions of a run share a counter, so their events have one global order. The
tasks of a cluster are separate processes (and maybe machines), so a counter cannot be shared; a task
stamps each event with the wall clock instead (``WallClock``: microseconds, strictly increasing within
the task), and the driver merges the tasks' tracks by those stamps (``merge``), shifted so that the
run's first event is at 0. The result is the ``PartitionedTrace`` of a run in one process: one track
per device (a device's name says its task), the same summary and the same Chrome/Perfetto export,
where the stamps are microseconds since the run began.

What the merged order means: within a task it is the task's firing order. Across tasks it is the order
of the clocks, which on one machine is the order in which things happened (a Recv comes after its
Send); across machines it is as good as their clocks agree (NTP: about a millisecond).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping

from turnout.devices.trace import DeviceTrace, PartitionedTrace
from turnout.reference.trace import Event


class WallClock:
    """The ``clock`` of a traced task's partitions: wall-clock microseconds, never repeating a value
    (two firings within one microsecond get consecutive stamps), so a task's own order is kept."""

    def __init__(self) -> None:
        self.last = -1

    def __iter__(self) -> WallClock:
        return self

    def __next__(self) -> int:
        now = time.time_ns() // 1000
        self.last = now if now > self.last else self.last + 1
        return self.last


def merge(tracks: Mapping[str, list[Event]]) -> PartitionedTrace:
    """One timeline from the tasks' tracks (device -> events stamped by a ``WallClock``): the stamps
    shifted so that the earliest event is at 0."""
    t0 = min((e.seq for events in tracks.values() for e in events[:1]), default=0)
    out: dict[str, DeviceTrace] = {}
    for device, events in tracks.items():
        tr = DeviceTrace(device, itertools.count())
        tr.events = [Event(e.seq - t0, e.node, e.op, e.tag, e.dead, e.rule) for e in events]
        out[device] = tr
    return PartitionedTrace(out)
