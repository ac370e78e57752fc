"""The fast backend's trace: a timeline of compiled stages, driven-loop chunks and host swaps.

Why not firings: compiled code fires no nodes one by one, so the reference interpreter's trace (one
event per firing) has no counterpart here. What a user of the fast backend needs to see is where the
time of a run goes — which compiled stage ran, whether it was traced and compiled on this run, how
many chunks a driven loop took and when stack chunks moved to and from host memory. ``Session.run(...,
trace=True)`` returns this timeline as ``last_result.trace``; like the reference trace it exports to
the Chrome trace-event format, which ui.perfetto.dev and chrome://tracing load (one row per kind of
span, times in microseconds from the start of the run).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

#: rows of the exported timeline, in display order
ROWS = ("run", "compiled stages", "driven loops", "host swaps")


@dataclass
class Span:
    name: str
    row: str
    start_s: float
    dur_s: float
    args: dict[str, Any] = field(default_factory=dict)


class Timeline:
    """Spans recorded during one fast run, relative to its start."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._t0 = time.perf_counter()

    @contextmanager
    def span(self, name: str, row: str, **args: Any) -> Iterator[dict[str, Any]]:
        """Record ``name`` on ``row`` around the block; the block may add to the yielded ``args``."""
        start = time.perf_counter()
        try:
            yield args
        finally:
            end = time.perf_counter()
            self.spans.append(Span(name, row, start - self._t0, end - start, args))

    def summary(self) -> dict[str, Any]:
        """Spans per row, seconds per row, and what this run compiled.

        ``compiles_this_run``: programs traced and compiled during this run; the run's
        ``stats["compiles"]`` is the session's running total of the same count, so this is
        ``stats["compiles"]`` after the run minus before it. ``compiled_stages``: spans of the
        ``compiled stages`` row whose call compiled on this run.
        """
        return {
            "spans": dict(Counter(s.row for s in self.spans)),
            "seconds": {r: sum(s.dur_s for s in self.spans if s.row == r) for r in ROWS
                        if any(s.row == r for s in self.spans)},
            "compiles_this_run": sum(s.args.get("compiles", 0) for s in self.spans if s.row == "run"),
            "compiled_stages": sum(1 for s in self.spans if s.row == "compiled stages" and s.args.get("compiled")),
        }

    def to_chrome(self) -> dict[str, Any]:
        """The Chrome trace-event format (also read by Perfetto): one row per kind of span."""
        rows = {r: i for i, r in enumerate(ROWS)}
        out = [{"name": s.name, "cat": s.row, "ph": "X", "ts": 1e6 * s.start_s, "dur": 1e6 * s.dur_s,
                "pid": 0, "tid": rows.get(s.row, len(rows)), "args": s.args} for s in self.spans]
        meta = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": r}} for r, i in rows.items()]
        return {"traceEvents": meta + out, "displayTimeUnit": "ms"}

    def save_chrome(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_chrome(), f)

    def as_dicts(self) -> list[dict[str, Any]]:
        return [asdict(s) for s in self.spans]

    def __len__(self) -> int:
        return len(self.spans)
