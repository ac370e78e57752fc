"""Laws of a partitioned run's trace (``turnout.devices.trace``): one track per device stamped from
one shared clock, merged in that clock's order, summed over the devices, and exported to the Chrome
trace-event format (one process per device, one row per frame instance). Each law kills mutants of
the full set of ``devices/trace.py`` (issue 40, part 3; ``python tools/mutation.py --module
devices/trace.py --all``): an event stamped without the shared clock or with a field dropped, tracks
merged out of order, a count summed over the wrong key or op, a Chrome field renamed or valued
wrongly, a row named by the wrong part of a tag.

The traces are filled by hand with ``DeviceTrace.record``, as the partitioned executor fills them
(a firing per call, bookkeeping events included): no graph is built and nothing runs, so each test
takes milliseconds. The Chrome output is compared with one written out here from the format's
definition, field by field, not read back from the code under test.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from turnout.devices.trace import DeviceTrace, PartitionedTrace
from turnout.reference.trace import Event, Trace

Tag = tuple[tuple[str, int], ...]

#: the firings of a run on two devices, in global order: (device, node, op, tag, dead, rule). Both
#: devices fire in turn, so a merge that keeps each track whole (or sorts by device) is out of order;
#: tags nest two loops so a frame instance's row differs from its frame's name; a bookkeeping event
#: ([E-Iter-Retire]) is an event but no firing; two Sends and one Recv tell the two counts apart.
FIRINGS: list[tuple[str, str, str, Tag, bool, str]] = [
    ("cpu:1", "x", "Placeholder", (), False, "E-Op"),
    ("cpu:0", "send_x", "Send", (), False, "E-Send"),
    ("cpu:1", "recv_x", "Recv", (), False, "E-Recv"),
    ("cpu:0", "enter", "Enter", (("L", 0),), False, "E-Enter"),
    ("cpu:0", "mul", "Mul", (("L", 1),), True, "E-Op-Dead"),
    ("cpu:1", "inner", "Add", (("L", 1), ("M", 0)), False, "E-Op"),
    ("cpu:1", "inner", "Add", (("L", 1), ("M", 3)), False, "E-Op"),
    ("cpu:0", "send_y", "Send", (("L", 2), ("M", 0)), False, "E-Send"),
    ("cpu:0", "retire", "Retire", (("L", 2),), False, "E-Iter-Retire"),
]


def _filled() -> tuple[PartitionedTrace, dict[str, DeviceTrace]]:
    """The traces of ``FIRINGS``: one ``DeviceTrace`` per device on one shared clock, filled in the
    firings' order, and the ``PartitionedTrace`` of the run (cpu:0's track first)."""
    clock = itertools.count()
    tracks = {d: DeviceTrace(d, clock) for d in ("cpu:0", "cpu:1")}
    for device, node, op, tag, dead, rule in FIRINGS:
        tracks[device].record(node, op, tag, dead, rule)
    return PartitionedTrace(tracks), tracks


def _row(tag: Tag) -> str:
    """The row of a firing in the Chrome export: its frame instance, written as the tag of the levels
    above the innermost one followed by the innermost frame's name (``L:1/M``), or ``root``."""
    if not tag:
        return "root"
    return "/".join([f"{f}:{k}" for f, k in tag[:-1]] + [tag[-1][0]])


def test_each_device_stamps_its_firings_from_the_one_shared_clock() -> None:
    """The law of one clock: every event of every track is stamped with the next number of the clock
    the tracks share, so the stamps of a run are 0, 1, 2, ... in firing order across devices, and
    each event keeps the node, op, tag, deadness and rule it was recorded with. A track knows its
    device. Kills ``record`` stamping ``None`` or dropping, swapping or nulling a field, the device
    or the clock not kept (``self.device = None``, ``self._clock = None``)."""
    trace, tracks = _filled()
    assert tracks["cpu:0"].device == "cpu:0" and tracks["cpu:1"].device == "cpu:1"
    want = {d: [Event(seq, node, op, tag, dead, rule)
                for seq, (dev, node, op, tag, dead, rule) in enumerate(FIRINGS) if dev == d]
            for d in tracks}
    assert {d: t.events for d, t in tracks.items()} == want
    assert isinstance(tracks["cpu:0"], Trace)  # the reference trace's summary and checks apply per device


def test_the_merged_events_are_in_the_clocks_order_with_their_devices() -> None:
    """``events`` is every (device, event) of the run in global firing order: the shared clock's, not
    track by track nor by device name. Kills the merge's sort key dropped or inverted."""
    trace, _ = _filled()
    assert [(d, e.node, e.tag) for d, e in trace.events] == [(f[0], f[1], f[3]) for f in FIRINGS]
    assert [e.seq for _, e in trace.events] == list(range(len(FIRINGS)))


def test_a_run_without_a_cluster_has_no_clock_offsets() -> None:
    """A trace made in one process has no clock corrections (``clock_offsets`` is None; only a
    cluster's merge sets it, ``cluster_trace``). Kills its first value mutated to ``""``."""
    trace, _ = _filled()
    assert trace.clock_offsets is None


def test_the_summary_sums_the_devices_and_counts_sends_and_recvs() -> None:
    """The summary's law: per device, that device's reference summary (``Trace.summary``); over all
    devices, ``firings`` and ``events`` the sums of the devices' (a bookkeeping event is an event,
    not a firing) and ``sends`` / ``recvs`` the numbers of Send and Recv events. Kills every key
    renamed, a sum over a misnamed key, the Send and Recv counts read under another op's name."""
    trace, tracks = _filled()
    per = {d: t.summary() for d, t in tracks.items()}
    fired = [f for f in FIRINGS if f[5] != "E-Iter-Retire"]
    assert trace.summary() == {"devices": per, "firings": len(fired), "events": len(FIRINGS),
                               "sends": 2, "recvs": 1}
    assert per["cpu:0"]["firings"] == 4 and per["cpu:1"]["firings"] == 4  # each device counted once


def test_the_length_of_a_partitioned_trace_is_every_devices_events() -> None:
    """``len(trace)`` is the number of events of all tracks together. Kills ``sum(None)``."""
    trace, tracks = _filled()
    assert len(trace) == len(FIRINGS) == sum(len(t.events) for t in tracks.values())


def _chrome_by_hand(trace: PartitionedTrace) -> dict[str, Any]:
    """The Chrome trace-event document of ``trace``, written from the format: per device (in track
    order, pid 0, 1, ...) a ``process_name`` metadata event naming the device, a ``thread_name`` event
    per row of that device (tids numbered from 0 in order of first use), and per firing a complete
    (``X``) slice of duration 1 at its global stamp, its node as name, its op as category, its tag,
    deadness and rule as args; the time unit is nanoseconds (the stamps are a count, not time)."""
    meta: list[dict[str, Any]] = []
    slices: list[dict[str, Any]] = []
    for pid, (device, track) in enumerate(trace.tracks.items()):
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": device}})
        rows: list[str] = []
        for e in track.events:
            if _row(e.tag) not in rows:
                rows.append(_row(e.tag))
            tag = "/".join(f"{f}:{k}" for f, k in e.tag) or "root"
            slices.append({"name": e.node, "cat": e.op, "ph": "X", "ts": e.seq, "dur": 1, "pid": pid,
                           "tid": rows.index(_row(e.tag)), "args": {"tag": tag, "dead": e.dead, "rule": e.rule}})
        meta += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": row}}
                 for tid, row in enumerate(rows)]
    return {"traceEvents": meta + slices, "displayTimeUnit": "ns"}


def test_the_chrome_export_is_one_process_per_device_and_one_row_per_frame_instance() -> None:
    """The Chrome (Perfetto) export's law, the whole document: see ``_chrome_by_hand``. A firing's
    row is its frame instance: ``L`` for every iteration of a root loop, ``L:1/M`` for the inner loop
    entered in the outer loop's iteration 1, ``L:2/M`` for the one entered in iteration 2, ``root``
    outside any loop. Kills every key and constant of the metadata and slice events mutated, the
    rows keyed by the wrong part of the tag (the outer level dropped, the iteration kept, the split
    at the first ``:``, the root's name), the rows' metadata replacing the process's, and the
    slices or metadata lost."""
    trace, _ = _filled()
    doc = trace.to_chrome()
    assert doc == _chrome_by_hand(trace)
    rows = {(m["pid"], m["args"]["name"]) for m in doc["traceEvents"] if m["name"] == "thread_name"}
    assert rows == {(0, "root"), (0, "L"), (0, "L:2/M"), (1, "root"), (1, "L:1/M")}


def test_save_chrome_writes_the_export_as_json(tmp_path: Path) -> None:
    """``save_chrome`` writes ``to_chrome()`` to the path, as JSON a viewer loads. Kills the file
    opened without its path or mode, and the document or the file left out of ``json.dump``."""
    trace, _ = _filled()
    path = tmp_path / "trace.json"
    trace.save_chrome(str(path))
    assert json.loads(path.read_text()) == json.loads(json.dumps(trace.to_chrome()))
