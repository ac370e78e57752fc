"""Traces of a partitioned run: one track per device, on one shared clock.

Each partition records its firings in its own ``Trace``, stamped from one shared counter, so merging the
per-device traces gives a single global order. The Chrome/Perfetto export shows one *process* per device
and, inside it, one row per frame instance, so iterations overlapping across devices can be seen (load
the JSON in ui.perfetto.dev or chrome://tracing).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any

from turnout.reference.trace import Event, Trace, fmt_tag


class DeviceTrace(Trace):
    """The trace of one partition; ``seq`` comes from the clock shared by all partitions of a run."""

    def __init__(self, device: str, clock: itertools.count[int]) -> None:
        super().__init__()
        self.device = device
        self._clock = clock

    def record(self, node: str, op: str, tag: tuple[tuple[str, int], ...], dead: bool, rule: str) -> None:
        """``Trace.record``, with ``seq`` from the clock shared by every partition of the run, so that the merged
        traces keep one global order."""
        self.events.append(Event(next(self._clock), node, op, tag, dead, rule))


class PartitionedTrace:
    """The per-device traces of one run."""

    def __init__(self, tracks: dict[str, DeviceTrace]) -> None:
        self.tracks = tracks
        #: a cluster run's per-task clock corrections (``cluster_trace.ClockOffsets``); None in one process
        self.clock_offsets: Any = None

    @property
    def events(self) -> list[tuple[str, Event]]:
        """Every (device, event), in global firing order."""
        out = [(d, e) for d, t in self.tracks.items() for e in t.events]
        return sorted(out, key=lambda de: de[1].seq)

    def summary(self) -> dict[str, Any]:
        """Per device: the reference trace summary (``Trace.summary``); over all devices: ``firings``
        (node firings, the run's ``stats["firings"]``; a device's are its ``stats["firings_per_device"]``),
        ``events`` (firings and bookkeeping events, ``len(trace)``) and the Send/Recv counts."""
        per = {d: t.summary() for d, t in self.tracks.items()}
        ops = Counter(e.op for _, e in self.events)
        return {"devices": per, "firings": sum(s["firings"] for s in per.values()),
                "events": sum(s["events"] for s in per.values()), "sends": ops["Send"], "recvs": ops["Recv"]}

    def to_chrome(self) -> dict[str, Any]:
        """The Chrome trace-event format (read by Perfetto): one process per device, one row per frame
        instance, one slice per firing at its global sequence number."""
        out: list[dict[str, Any]] = []
        meta: list[dict[str, Any]] = []
        for pid, (d, t) in enumerate(self.tracks.items()):
            meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": d}})
            rows: dict[str, int] = {}
            for e in t.events:
                row = fmt_tag(e.tag[:-1] + ((e.tag[-1][0], 0),)) if e.tag else "root"
                row = row.rsplit(":", 1)[0] if e.tag else row
                tid = rows.setdefault(row, len(rows))
                out.append({"name": e.node, "cat": e.op, "ph": "X", "ts": e.seq, "dur": 1, "pid": pid, "tid": tid,
                            "args": {"tag": fmt_tag(e.tag), "dead": e.dead, "rule": e.rule}})
            meta += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
                     for name, tid in rows.items()]
        return {"traceEvents": meta + out, "displayTimeUnit": "ns"}

    def save_chrome(self, path: str) -> None:
        """Write ``to_chrome()`` as JSON."""
        with open(path, "w") as f:
            json.dump(self.to_chrome(), f)

    def __len__(self) -> int:
        return sum(len(t) for t in self.tracks.values())
