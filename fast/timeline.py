"""The trace of a compiled run: one timeline of spans, on tracks, for every fast executor.

Why not firings: compiled code fires no nodes one by one, so the reference interpreter's trace (one
event per firing) has no counterpart here. What a user of the compiled side needs to see is where the
time of a run goes — which compiled call ran on which device, whether it was traced and compiled on
this run, how many chunks a driven loop took, when stack chunks moved to and from host memory, and
what the host did between calls (dispatches, predicate reads, waits). ``Session.run(..., trace=True)``
returns this timeline as ``last_result.trace`` on the one-device backend and on the partitioned
one alike; the one runner (``fast.runner``) records its steps here, so both record the same spans.

Tracks: ``run`` (the ``Session.run``), ``host`` (the host's own work), one per device for the
compiled calls made there (the one-device backend's device has no name: its track is ``compiled
stages``), ``driven loops`` (one span per chunk call) and ``host swaps`` (one per move of full
stack chunks). Like the reference trace it exports to the Chrome trace-event format, which
ui.perfetto.dev and chrome://tracing load (one row per track, times in microseconds from the start
of the run).

Why watcher threads for device spans: under asynchronous dispatch the host's call returns before the
device runs, so a host-side span says when work was *dispatched*, not when it ran; and a host
callback inside a compiled call makes its dispatch synchronous on the CPU, which would hide the very
overlap the trace is meant to show. So a call is recorded as dispatched, and one watcher thread per
track waits for its error word (every output of one execution becomes ready together) and stamps its
end. Its start is inferred as the latest of its dispatch, the end of the previous call on its track
(a device runs its calls in order) and the ends of the calls that produced its inputs.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Optional

import jax

from turnout.fast.cut import ONE

#: the fixed tracks, in display order (the devices' tracks follow, by name)
TRACKS = ("run", "host", "compiled stages", "driven loops", "host swaps")


def device_track(device: str) -> str:
    """The track of ``device``'s compiled calls: its name, or ``compiled stages`` for the one device
    of the one-device backend (``fast.cut.ONE``), whose fused attempt and one call go there too."""
    return "compiled stages" if device == ONE else device


@dataclass
class Span:
    """One span: what ran (``name``), where (``track``), when (seconds from the start of the run)."""

    name: str
    track: str
    start_s: float
    dur_s: float
    args: dict[str, Any]


@dataclass
class _Pending:
    """A dispatched call's span before its end is known: the spans it waits for."""

    inputs: list[int]
    prev: Optional[int]
    #: when its result was ready (stamped by the watcher of its track)
    end: Optional[float]


class Timeline:
    """The spans recorded during one run, relative to its start (see the module docstring)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._t0 = time.perf_counter()
        self._pending: dict[int, _Pending] = {}
        self._queues: dict[str, Any] = {}
        self._threads: list[threading.Thread] = []
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()

    def now(self) -> float:
        """Seconds since the run started."""
        return time.perf_counter() - self._t0

    @contextmanager
    def span(self, name: str, track: str, **args: Any) -> Iterator[dict[str, Any]]:
        """Record ``name`` on ``track`` around the block; the block may add to the yielded ``args``."""
        start = self.now()
        try:
            yield args
        finally:
            self.ran(track, name, start, self.now(), **args)

    def finished(self, compiles: int) -> None:
        """The run's own span (track ``run``), from the timeline's start to now, with the programs it
        traced and compiled (``summary()["compiles_this_run"]``)."""
        self.ran("run", "Session.run", 0.0, self.now(), compiled=compiles > 0, compiles=compiles)

    def host(self, name: str, start: float, **args: Any) -> None:
        """A span of the host's own work, from ``start`` to now."""
        self.ran("host", name, start, self.now(), **args)

    def ran(self, track: str, name: str, start: float, end: float, **args: Any) -> int:
        """A span whose start and end are known (the caller waited for it). Returns its index."""
        with self._lock:
            self.spans.append(Span(name, track, start, end - start, args))
            return len(self.spans) - 1

    def dispatched(self, track: str, name: str, done: Any, inputs: list[int], **args: Any) -> int:
        """Record a call just dispatched on ``track``; ``done`` becomes ready when it has run,
        ``inputs`` are the spans that produced its inputs. Returns the new span's index."""
        with self._lock:
            i = len(self.spans)
            self.spans.append(Span(name, track, self.now(), 0.0, args))
            self._pending[i] = _Pending(inputs, self._last.get(track), None)
            self._last[track] = i
            q = self._queues.get(track)
            if q is None:
                q = self._queues[track] = queue.SimpleQueue()
                t = threading.Thread(target=self._watch, args=(q,), name=f"turnout-trace-{track}", daemon=True)
                t.start()
                self._threads.append(t)
        q.put((i, done))
        return i

    def _watch(self, q: Any) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            i, done = item
            try:
                jax.block_until_ready(done)
            finally:
                self._pending[i].end = self.now()

    def close(self) -> None:
        """Wait for the watchers, then settle every dispatched span's start and duration. Spans
        dispatched afterwards start new watchers (a run tried again records on the same timeline)."""
        for q in self._queues.values():
            q.put(None)
        for t in self._threads:
            t.join()
        self._queues.clear()
        self._threads.clear()
        for i, p in sorted(self._pending.items()):
            s = self.spans[i]
            end = p.end if p.end is not None else s.start_s
            deps = [self.spans[j] for j in p.inputs] + ([self.spans[p.prev]] if p.prev is not None else [])
            start = max([s.start_s] + [d.start_s + d.dur_s for d in deps])
            s.start_s = min(start, end)
            s.dur_s = end - s.start_s
        self._pending.clear()

    def track_spans(self, track: str) -> list[Span]:
        """The spans of one track, in start order."""
        return sorted((s for s in self.spans if s.track == track), key=lambda s: s.start_s)

    def tracks(self) -> list[str]:
        """The tracks that hold spans, in display order."""
        used = {s.track for s in self.spans}
        return [t for t in TRACKS if t in used] + sorted(used - set(TRACKS))

    def summary(self) -> dict[str, Any]:
        """Spans and seconds per track, and what this run compiled.

        ``compiles_this_run``: programs traced and compiled during this run; the run's
        ``stats["compiles"]`` is the session's running total of the same count, so this is
        ``stats["compiles"]`` after the run minus before it. ``compiled_stages``: spans of compiled
        calls (on any device's track) whose call compiled on this run.
        """
        tracks = self.tracks()
        return {
            "spans": {t: sum(1 for s in self.spans if s.track == t) for t in tracks},
            "seconds": {t: sum(s.dur_s for s in self.spans if s.track == t) for t in tracks},
            "compiles_this_run": sum(s.args.get("compiles", 0) for s in self.spans if s.track == "run"),
            "compiled_stages": sum(1 for s in self.spans if s.track != "run" and s.args.get("compiled")),
        }

    def to_chrome(self) -> dict[str, Any]:
        """The Chrome trace-event format (also read by Perfetto): one row per track."""
        tid = {t: i for i, t in enumerate(self.tracks())}
        meta = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": t}} for t, i in tid.items()]
        out = [{"name": s.name, "cat": s.track, "ph": "X", "ts": 1e6 * s.start_s, "dur": 1e6 * s.dur_s,
                "pid": 0, "tid": tid[s.track], "args": s.args} for s in self.spans]
        return {"traceEvents": meta + out, "displayTimeUnit": "ms"}

    def save_chrome(self, path: str) -> None:
        """Write ``to_chrome()`` as JSON."""
        with open(path, "w") as f:
            json.dump(self.to_chrome(), f)

    def as_dicts(self) -> list[dict[str, Any]]:
        """The spans as plain dicts."""
        return [asdict(s) for s in self.spans]

    def __len__(self) -> int:
        return len(self.spans)


__all__ = ["TRACKS", "Span", "Timeline", "device_track"]
