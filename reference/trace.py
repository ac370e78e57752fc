"""Execution traces: what fired, at which tag, live or dead, in which order.

A trace is the raw material of the deadness and exactly-once checks ([T3-Exactly-Once],
[T5-Deadness-Soundness]) and of the Chrome/Perfetto export (load the JSON in ui.perfetto.dev or
chrome://tracing: one row per frame instance, one slice per firing, in firing order).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    """One trace event: its place ``seq`` in the run, the node's name and op, its tag, whether its outputs were dead,
    and the rule of ``specs/rules.toml`` it applied."""

    seq: int
    node: str
    op: str
    tag: tuple[tuple[str, int], ...]
    dead: bool
    rule: str


#: rules of trace events that are not node firings (the run's ``stats["firings"]`` does not count them)
BOOKKEEPING = ("E-Iter-Retire", "E-Frame-Done")


def fmt_tag(tag: tuple[tuple[str, int], ...]) -> str:
    """``frame:k/inner:j`` for a tag, ``root`` for the root tag: how tags appear in messages and traces."""
    return "/".join(f"{f}:{k}" for f, k in tag) or "root"


class Trace:
    """An ordered list of firing events."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def record(self, node: str, op: str, tag: tuple[tuple[str, int], ...], dead: bool, rule: str) -> None:
        """Append one event, numbered in order."""
        self.events.append(Event(len(self.events), node, op, tag, dead, rule))

    def live_firings(self) -> set[tuple[str, tuple[tuple[str, int], ...]]]:
        """The (node, tag) pairs that fired live: what the deadness checks compare between executors."""
        return {(e.node, e.tag) for e in self.events if not e.dead}

    def summary(self) -> dict[str, Any]:
        """What the run did, counted from the events.

        ``firings``: node firings, live or dead; the same count as the run's ``stats["firings"]``
        (and ``live + dead == firings``). The trace also holds two kinds of bookkeeping events that are
        not node firings: ``retirements`` ([E-Iter-Retire], one per iteration that ends) and
        ``frame_end_exits`` ([E-Frame-Done]: the dead token an Exit sends when its frame ends), so
        ``events == firings + retirements + frame_end_exits == len(trace)``. ``iterations_per_frame``:
        iterations started per frame name; ``rules``: events per semantic rule, bookkeeping included.
        """
        iters: dict[str, int] = Counter()
        seen: set[tuple[Any, ...]] = set()
        for e in self.events:
            for depth, (frame, k) in enumerate(e.tag):
                key = (e.tag[:depth], frame, k)
                if key not in seen:
                    seen.add(key)
                    iters[frame] += 1
        rules = Counter(e.rule for e in self.events)
        fired = [e for e in self.events if e.rule not in BOOKKEEPING]
        return {
            "firings": len(fired),
            "live": sum(not e.dead for e in fired),
            "dead": sum(e.dead for e in fired),
            "retirements": rules["E-Iter-Retire"],
            "frame_end_exits": rules["E-Frame-Done"],
            "events": len(self.events),
            "iterations_per_frame": dict(iters),
            "rules": dict(rules),
        }

    def to_chrome(self) -> dict[str, Any]:
        """The Chrome trace-event format (also read by Perfetto)."""
        rows: dict[str, int] = {}
        out = []
        for e in self.events:
            row_key = fmt_tag(e.tag[:-1] + ((e.tag[-1][0], 0),)) if e.tag else "root"
            tid = rows.setdefault(row_key, len(rows))
            out.append({
                "name": e.node, "cat": e.op, "ph": "X", "ts": e.seq, "dur": 1, "pid": 0, "tid": tid,
                "args": {"tag": fmt_tag(e.tag), "dead": e.dead, "rule": e.rule},
            })
        meta = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": name}}
                for name, tid in rows.items()]
        return {"traceEvents": meta + out, "displayTimeUnit": "ns"}

    def save_chrome(self, path: str) -> None:
        """Write ``to_chrome`` as JSON to ``path``."""
        with open(path, "w") as f:
            json.dump(self.to_chrome(), f)

    def as_dicts(self) -> list[dict[str, Any]]:
        """The events as plain dicts, ready for JSON."""
        return [asdict(e) for e in self.events]

    def __len__(self) -> int:
        return len(self.events)
