"""The trace of a fast partitioned run: one track per device and one for the host (``DeviceTimeline``).

Why a module of its own: the per-device tiers (``devices.fast_executor``, ``devices.plan_run``) record
into it as they dispatch, and what a trace is (spans, their inferred starts, the Chrome trace-event
export) is a job apart from running segments.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import jax


class DeviceTimeline:
    """The trace of a fast partitioned run: one track per device, plus the host's track.

    Why watcher threads and not callbacks: under asynchronous dispatch the host's call returns before
    the device runs, so a host-side span says when work was *dispatched*, not when it ran; and a host
    callback inside a compiled segment makes its dispatch synchronous on CPU (measured: the call returns
    only when the segment has run), which would hide the very overlap the trace is meant to show. So a
    traced run dispatches the same compiled segments, and one watcher thread per device waits for each
    segment's error word (every output of one execution becomes ready together) and stamps its end.
    A segment's start is inferred as the latest of its dispatch, the end of the previous segment on its
    device (a device runs its segments in order) and the ends of the segments that produced its inputs.
    In a threaded run (segments with host callbacks, dispatched by per-device workers) the worker itself
    waits for each traced call, so those spans are measured, not inferred.
    Exports to the Chrome trace-event format (ui.perfetto.dev, chrome://tracing): one row per device.
    """

    def __init__(self) -> None:
        self._t0 = time.perf_counter()
        self.spans: list[dict[str, Any]] = []
        self._queues: dict[str, Any] = {}
        self._threads: list[threading.Thread] = []
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()

    def now(self) -> float:
        """Seconds since the run started."""
        return time.perf_counter() - self._t0

    def host(self, name: str, start: float, **args: Any) -> None:
        """A span on the host track, from ``start`` to now."""
        with self._lock:
            self.spans.append({"track": "host", "name": name, "start_s": start, "dur_s": self.now() - start,
                               "args": args})

    def dispatched(self, device: str, name: str, iteration: int, done: Any, inputs: list[int]) -> int:
        """Record a segment just dispatched on ``device``; ``done`` becomes ready when it has run,
        ``inputs`` are the spans that produced its inputs. Returns the new span's index."""
        with self._lock:
            i = len(self.spans)
            self.spans.append({"track": device, "name": name, "start_s": self.now(),
                               "dur_s": 0.0, "args": {"iteration": iteration}, "_inputs": inputs,
                               "_prev": self._last.get(device), "_end": None})
            self._last[device] = i
            q = self._queues.get(device)
            if q is None:
                q = self._queues[device] = queue.SimpleQueue()
                t = threading.Thread(target=self._watch, args=(q,), name=f"turnout-trace-{device}", daemon=True)
                t.start()
                self._threads.append(t)
        q.put((i, done))
        return i

    def ran(self, device: str, name: str, iteration: int, start: float, end: float) -> None:
        """A segment whose start and end are known (a threaded run's worker waited for it)."""
        with self._lock:
            self.spans.append({"track": device, "name": name, "start_s": start, "dur_s": end - start,
                               "args": {"iteration": iteration}})

    def _watch(self, q: Any) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            i, done = item
            try:
                jax.block_until_ready(done)
            finally:
                self.spans[i]["_end"] = self.now()

    def close(self) -> None:
        """Wait for the watchers, then settle every device span's start and duration."""
        for q in self._queues.values():
            q.put(None)
        for t in self._threads:
            t.join()
        self._queues.clear()
        self._threads.clear()
        for s in self.spans:
            if "_end" not in s:
                continue
            end = s.pop("_end")
            deps = [self.spans[j] for j in s.pop("_inputs")]
            prev = s.pop("_prev")
            if prev is not None:
                deps.append(self.spans[prev])
            start = max([s["start_s"]] + [d["start_s"] + d["dur_s"] for d in deps])
            s["start_s"] = min(start, end)
            s["dur_s"] = end - s["start_s"]

    def device_spans(self, device: str) -> list[dict[str, Any]]:
        """The spans of one device, in start order."""
        return sorted((s for s in self.spans if s["track"] == device), key=lambda s: s["start_s"])

    def summary(self) -> dict[str, Any]:
        """Spans and busy seconds per track."""
        tracks = sorted({s["track"] for s in self.spans})
        return {t: {"spans": sum(1 for s in self.spans if s["track"] == t),
                    "seconds": sum(s["dur_s"] for s in self.spans if s["track"] == t)} for t in tracks}

    def to_chrome(self) -> dict[str, Any]:
        """The Chrome trace-event format: one row (thread) per device and one for the host."""
        tracks = ["host"] + sorted({s["track"] for s in self.spans} - {"host"})
        tid = {t: i for i, t in enumerate(tracks)}
        meta = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": t}} for t, i in tid.items()]
        out = [{"name": s["name"], "cat": s["track"], "ph": "X", "ts": 1e6 * s["start_s"], "dur": 1e6 * s["dur_s"],
                "pid": 0, "tid": tid[s["track"]], "args": s["args"]} for s in self.spans]
        return {"traceEvents": meta + out, "displayTimeUnit": "ms"}

    def save_chrome(self, path: str) -> None:
        """Write ``to_chrome()`` as JSON."""
        import json

        with open(path, "w") as f:
            json.dump(self.to_chrome(), f)

    def __len__(self) -> int:
        return len(self.spans)



__all__ = ["DeviceTimeline"]
