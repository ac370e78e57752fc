"""Gradient stacks of a run's steps: chunks swapped to host memory or kept, per device.

Why this module. Every gradient stack lives on the device of its pushes (placement colocates each
``StackPush`` and ``StackPop`` with its ``StackNew``), as the fixed-capacity stack buffer carried in
that device's state. The one runner (``fast.runner``) calls a run's steps one by one — segments,
driven loops, and, where a loop spans devices, a few per-device segments per iteration — so the host
sits between the calls that push, and a ``ChunkStore`` per device can take a full buffer out of the
device state and hand an empty one back:

- ``swap_memory=True``: the full chunk goes to host memory asynchronously (the store's copier thread)
  and comes back, on the device of its pushes, ahead of the backward loop's pops; the device holds at
  most two chunks per stack (the one being filled and the one whose copy is in flight), whatever the
  trip count.
- ``swap_memory=False``: the full chunk stays on its device and the stack goes on in a fresh buffer
  there: it grows on the device, chunk by chunk, and the run is not repeated.

There is one ``ChunkStore`` per device, so ``device_memory_limit`` caps each device's stack bytes on
its own, and the memory report names the device of every record. A graph on one device is the case
of one store.

Why the host does not read every stack pointer: a read waits for the device, which would undo the
asynchronous dispatch that lets device A run ahead of device B. The host instead counts, per stack,
the most values the calls it has dispatched since its last read can have pushed (``cut.Traffic``: the
``StackPush`` nodes of a segment, at most one branch of a compiled cond); only when that bound says the
next call might not fit does it read the pointer (once per chunk in a loop that pushes every
iteration) and, if the buffer is really that full, spill it. Pops are the mirror image: a stack is
refilled from its newest chunk when the pops dispatched since the last read might empty it. A segment
that pushes inside a loop compiled whole (an inner loop on one device) has no such bound: the host
reads its stacks' pointers before each of its calls and keeps the largest growth seen, and an inner
loop that still overflows its chunk repeats the run with twice the chunk. A driven loop moves its own
chunks between its calls (``fast.driven``); the host reads its pointers once it has run (``settle``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Optional

from turnout.fast import stacks as stk
from turnout.fast.cut import Traffic
from turnout.fast.guards import device_oom
from turnout.memory_plan import MemoryPlan


class DeviceStacks:
    """The gradient stacks of one run: a ``ChunkStore`` per device, and what the host knows of each
    stack's pointer without reading it (see the module docstring). ``who`` and ``label`` name the
    run's executor and a device in errors (a device with no label: the one device of the run).

    ``before(traffic, device, stacks)`` runs before a segment call and returns the stacks to pass it
    (full buffers swapped or kept, low ones refilled); ``after(traffic, device, stacks)`` records the
    call's outputs (and checks ``device_memory_limit``); ``loop_ended(keys)`` tells the stores that a
    forward loop's pushes are over.
    """

    def __init__(self, info: dict[str, stk.StackInfo], devices: Iterable[str], capacity: int,
                 limit: Optional[int], budget: Optional[MemoryPlan] = None,
                 held: Optional[dict[str, dict[str, int]]] = None, *, who: str,
                 label: Callable[[str], str]) -> None:
        self.capacity = capacity
        self.who = who
        #: device -> its name in errors, made once (a call's out-of-memory guard is made on every call)
        self.labels = {d: label(d) for d in devices}
        # one store per device: each counts its own buffers, and the checkpoint slots it holds (``held``:
        # per device, per loop), against the cap and the budget
        held = held or {}
        self.stores = {d: stk.ChunkStore(info, limit, budget, f"{who} (device {lab})" if lab else who, held.get(d))
                       for d, lab in self.labels.items()}
        self.known: dict[str, int] = {}      # the pointer when last read (0: not read since a spill)
        self.pushed: dict[str, int] = {}     # the most values pushed since that read
        self.popped: dict[str, int] = {}     # the most values popped since that read
        self.grow: dict[str, int] = {}       # unbounded pushes: the largest growth per call seen
        self.shrink: dict[str, int] = {}     # unbounded pops: the largest shrink per call seen
        self.begun: set[str] = set()         # stacks whose pops have started (prefetch queued)
        self.reads = 0                       # pointer reads (each waits for its device)

    def _read(self, s: str, sv: stk.StackValue) -> int:
        p = int(sv.ptr)
        self.reads += 1
        last = self.known.get(s)
        if last is not None:
            if p > last:
                self.grow[s] = max(self.grow.get(s, 1), p - last)
            elif p < last:
                self.shrink[s] = max(self.shrink.get(s, 1), last - p)
        self.known[s], self.pushed[s], self.popped[s] = p, 0, 0
        return p

    def before(self, t: Traffic, device: str, stacks: dict[str, Any]) -> dict[str, Any]:
        """The stacks for the next call of a segment with traffic ``t`` on ``device``: the given ones,
        with full buffers spilled and low ones refilled where the next call needs it."""
        store = self.stores[device]
        full: dict[str, stk.StackValue] = {}
        for s, n in t.push.items():
            sv = stacks.get(s)
            if not isinstance(sv, stk.StackValue) or sv.pending:
                continue
            if n is not None and self.known.get(s, 0) + self.pushed.get(s, 0) + n <= self.capacity:
                continue  # fits for sure: no read
            p = self._read(s, sv)
            need = n if n is not None else self.grow.get(s, 1)
            if p > 0 and p + need > self.capacity:
                full[s] = sv
        low: dict[str, stk.StackValue] = {}
        for s, n in t.pop.items():
            sv = stacks.get(s)
            if not isinstance(sv, stk.StackValue) or sv.pending:
                continue
            if s not in self.begun:
                self.begun.add(s)
                store.begin_pops({s: sv})
            if not store.has(s):
                continue
            if n is not None and s in self.known and self.known[s] - self.popped.get(s, 0) - n >= 0:
                continue  # enough entries for sure: no read
            p = self._read(s, sv)
            need = n if n is not None else self.shrink.get(s, 1)
            if p < need:
                low[s] = sv
        if full:
            stacks = {**stacks, **store.spill(full)}
            for s in full:
                self.known[s], self.pushed[s] = 0, 0
        if low:
            got = store.refill(low)
            stacks = {**stacks, **got}
            for s, sv in got.items():
                self.known[s], self.popped[s] = int(sv.ptr), 0
        return stacks

    def after(self, t: Traffic, device: str, stacks: dict[str, Any]) -> None:
        """Count what the call just dispatched may have pushed and popped, and record its buffers."""
        for s, n in t.push.items():
            if n is not None:
                self.pushed[s] = self.pushed.get(s, 0) + n
        for s, n in t.pop.items():
            if n is not None:
                self.popped[s] = self.popped.get(s, 0) + n
        self.stores[device].observe({s: stacks[s] for s in (*t.push, *t.pop) if s in stacks})

    def settle(self, device: str, stacks: dict[str, Any]) -> None:
        """A driven loop on ``device`` has run (and been waited for): note its stacks' pointers, so
        that the host's bounds start from them."""
        for s, sv in stacks.items():
            if isinstance(sv, stk.StackValue) and not sv.pending:
                self._read(s, sv)
        self.stores[device].observe({s: v for s, v in stacks.items() if isinstance(v, stk.StackValue)})

    def observe(self, device: str, stacks: dict[str, Any]) -> None:
        """Record buffers allocated outside a segment call (before the run), and check the cap."""
        self.stores[device].observe({s: v for s, v in stacks.items() if isinstance(v, stk.StackValue)})

    def loop_ended(self, keys: set[str]) -> None:
        """A loop that pushes ``keys`` has ended: its spares go, and what its stacks hold is noted."""
        for store in self.stores.values():
            store.end_pushes([k for k in keys if k in store.ledgers])

    def device_oom(self, t: Optional[Traffic], device: str, what: Callable[[], str]) -> AbstractContextManager[None]:
        """XLA's own out-of-memory in a call on ``device`` (``guards.device_oom``), naming the loops whose
        stacks the call touches (traffic ``t``), or else the call, described by ``what()``."""
        info = self.stores[device].info

        def loops() -> str:
            keys = [*t.push, *t.pop] if t else []
            return ", ".join(sorted({info[k].where for k in keys if k in info})) or what()

        lab = self.labels[device]
        return device_oom(self.who, f"device {lab}" if lab else "the device", loops)

    def moved(self) -> int:
        """Full chunks taken out of a device state this run (to host memory or kept on the device)."""
        return sum(st.moved() for st in self.stores.values())

    def records(self) -> list[dict[str, Any]]:
        """Per loop and device: the rows of ``memory_records``."""
        return [r for st in self.stores.values() for r in st.records()]

    def stats(self) -> dict[str, Any]:
        """The run's totals, for ``RunResult.stats`` (peaks summed over devices), with the bytes of
        the checkpoint slots per loop (``checkpoint_bytes``, where a loop keeps any)."""
        out: dict[str, Any] = {}
        slots: dict[str, int] = {}
        for st in self.stores.values():
            for k, v in st.stats().items():
                out[k] = out.get(k, 0) + v
            for loop, b in st.held.items():
                slots[loop] = slots.get(loop, 0) + b
        out["stack_pointer_reads"] = self.reads
        return {**out, "checkpoint_bytes": slots} if slots else out


__all__ = ["DeviceStacks"]
