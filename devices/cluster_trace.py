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
Send). Across machines the clocks disagree (NTP keeps them within about a millisecond), so a Recv
could be stamped before the Send it waited for. ``merge`` therefore corrects the stamps with what the
run itself proves: every Recv happened after its Send. Each task gets one offset, the smallest that
puts every Recv at least a microsecond after its Send (``clock_offsets``: longest paths over the
"received after" constraints, as in Lamport's happened-before order). On one machine no constraint is
violated and every offset is 0. A skew too small to reorder a message stays; the correction cannot see
it, and it is below the message latency. Offsets that no assignment can satisfy (a clock that jumped
during the run) are left at their last values and reported as ``consistent=False``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass

from turnout.devices.names import parse
from turnout.devices.trace import DeviceTrace, PartitionedTrace
from turnout.reference.trace import Event

_SEND, _RECV = "_send/", "_recv/"


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


@dataclass(frozen=True)
class ClockOffsets:
    """Per task (``/job:<job>/task:<n>``): microseconds added to its stamps; ``consistent`` is False
    when no offsets could put every Recv after its Send."""

    offsets: dict[str, int]
    consistent: bool


def _task(device: str) -> str:
    spec = parse(device)
    return f"/job:{spec.job}/task:{spec.task}"


def clock_offsets(tracks: Mapping[str, list[Event]]) -> ClockOffsets:
    """The smallest per-task offsets under which every Recv is stamped after the Send of its key.

    A Send and its Recv share the cut edge's name (``_send/<edge>``, ``_recv/<edge>``) and the tag, as
    their rendezvous key does. Each such pair across tasks says ``off[receiver] - off[sender] >= send -
    recv + 1``; raising offsets until no constraint is violated (Bellman-Ford: a least solution needs
    at most one round of raises per task, and one more round that raises nothing confirms it) finds
    the least solution; offsets are then shifted so that the smallest is 0. Where that round still
    raises, the constraints hold a cycle no offsets satisfy: ``consistent`` is False."""
    sends: dict[tuple[str, tuple[tuple[str, int], ...]], tuple[str, int]] = {}
    for device, events in tracks.items():
        for e in events:
            if e.op == "Send" and e.node.startswith(_SEND):
                sends[(e.node[len(_SEND):], e.tag)] = (_task(device), e.seq)
    need: dict[tuple[str, str], int] = {}  # (sender, receiver) -> the largest send - recv + 1
    for device, events in tracks.items():
        receiver = _task(device)
        for e in events:
            sent = sends.get((e.node[len(_RECV):], e.tag)) if e.op == "Recv" and e.node.startswith(_RECV) else None
            if sent is not None and sent[0] != receiver:
                pair = (sent[0], receiver)
                need[pair] = max(need.get(pair, sent[1] - e.seq + 1), sent[1] - e.seq + 1)
    off = {_task(d): 0 for d in tracks}
    consistent = False
    for _ in range(len(off) + 1):
        changed = False
        for (a, b), w in need.items():
            if off[b] - off[a] < w:
                off[b], changed = off[a] + w, True
        if not changed:
            consistent = True
            break
    low = min(off.values(), default=0)
    return ClockOffsets({t: v - low for t, v in off.items()}, consistent)


def merge(tracks: Mapping[str, list[Event]]) -> PartitionedTrace:
    """One timeline from the tasks' tracks (device -> events stamped by a ``WallClock``): each task's
    stamps corrected by ``clock_offsets`` (so every Recv follows its Send), then shifted so that the
    earliest event is at 0. The offsets are kept on the result as ``clock_offsets``."""
    fix = clock_offsets(tracks)
    shifted = {d: [e.seq + fix.offsets[_task(d)] for e in events] for d, events in tracks.items()}
    t0 = min((s for seqs in shifted.values() for s in seqs), default=0)
    out: dict[str, DeviceTrace] = {}
    for device, events in tracks.items():
        tr = DeviceTrace(device, itertools.count())
        tr.events = [Event(s - t0, e.node, e.op, e.tag, e.dead, e.rule) for s, e in zip(shifted[device], events)]
        out[device] = tr
    trace = PartitionedTrace(out)
    trace.clock_offsets = fix
    return trace
