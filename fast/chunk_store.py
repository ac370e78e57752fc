"""Where a driven loop's full stack chunks go between its chunk calls: the ``ChunkStore``.

Why a module of its own: the chunked loop (``fast.stacks``) only says *when* a chunk is full or a
stack runs low; what happens to the chunk — copied to host memory for a loop with
``swap_memory=True``, kept on the device otherwise, counted against a device memory cap and a
memory budget, brought back before the backward loop reaches it — is this store's one job, shared
by the one-device backend and the partitioned executors. ``fast.stacks`` (whose docstring tells
the design) re-exports every name here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout.errors import ResourceExhaustedError
from turnout.fast.stack_values import STACK_PREFIX, StackValue, kept_arrays, scalars_on, stack_nbytes, zeros_like_all
from turnout.memory_plan import MemoryPlan, platform, run_plan
from turnout.memory_plan import check as check_budget


@dataclass(frozen=True)
class StackInfo:
    """What the store needs to know of one stack: whose it is and what its loop asked for."""

    loop: str        # the forward loop's name (``StackNew`` attr ``loop_name``)
    where: str       # how an error names the loop: 'loop "rnn" (frame ..., created at model.py:12)'
    swap: bool       # the loop's ``swap_memory``


@functools.cache
def _copier() -> ThreadPoolExecutor:
    """The one worker thread that copies stack chunks between device and host memory.

    Why a thread: on a GPU, ``device_put`` to host memory only queues a DMA, but on a CPU it copies in
    the calling thread, so the driver would wait for the copy before it calls the next chunk. Done
    by the worker, the copy overlaps with the next chunk's compute on every platform. One worker
    keeps the copies in order (a chunk's copy to the host before its copy back). Made on first use
    and kept for the process (a cache: every store shares the one worker)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="turnout-stack-copy")


class Later:
    """Arrays the copier thread is producing (``fn(arrays)``); ``get`` waits for them."""

    def __init__(self, fn: Callable[[list[Any]], list[Any]], arrays: list[Any]) -> None:
        self.future: Future[list[Any]] = _copier().submit(fn, arrays)

    def get(self, i: int) -> Any:
        """Array ``i`` of the copier's result, waiting for the copy to finish."""
        return self.future.result()[i]


class Pair:
    """A stack chunk's buffers (values, indices): known now, or slots ``2*slot``, ``2*slot+1`` of a
    ``Later``."""

    def __init__(self, arrays: Optional[tuple[Any, Any]] = None, later: Optional[Later] = None, slot: int = 0) -> None:
        self.arrays, self.later, self.slot = arrays, later, slot

    def get(self) -> tuple[Any, Any]:
        """The chunk's two buffers, waiting for the copier where they are still on their way.

        The driver and the copier thread may both ask (a chunk copied back while the driver waits for
        its copy to the host): each field is read once, so that neither sees ``later`` cleared before
        ``arrays`` is set.
        """
        arrays = self.arrays
        if arrays is None:
            later = self.later
            if later is None:
                arrays = self.arrays  # the other thread has just set it
            else:
                arrays = (later.get(2 * self.slot), later.get(2 * self.slot + 1))
                self.arrays = arrays
                self.later = None
        assert arrays is not None
        return arrays


@dataclass
class Chunk:
    """A full chunk taken out of a stack's loop state: ``n`` valid rows of full-capacity buffers,
    in host memory (``on_host``: swapped out) or on the device (kept there)."""

    data: Pair
    n: int
    on_host: bool
    nbytes: int
    prefetched: Optional[Pair] = None  # device copies queued ahead of the backward loop


@dataclass
class Ledger:
    """Per-stack accounting of one run (bytes are buffer bytes, values and iteration indices)."""

    active: int = 0            # the buffer in the loop state
    spare: int = 0             # swapped stacks: the last chunk's buffer, while its copy is in flight
    kept: int = 0              # swap_memory=False: full chunks kept on the device
    prefetched: int = 0        # device copies of host chunks, queued for the backward loop
    host: int = 0              # chunks in host memory
    peak_device: int = 0
    saved_device: int = 0      # device / host bytes when the forward loop ended (every value saved)
    saved_host: int = 0
    to_host: int = 0           # chunks copied to host memory, and back
    from_host: int = 0
    kept_chunks: int = 0       # chunks that stayed on the device when the stack outgrew one
    device: str = ""

    @property
    def device_bytes(self) -> int:
        """The stack's bytes on the device now: its active buffer, a spare in flight, chunks kept there and
        prefetched copies."""
        return self.active + self.spare + self.kept + self.prefetched


def device_name(arr: Any) -> str:
    """'cpu:0', 'cuda:1': the device an array lives on, as memory reports name it."""
    try:
        d = next(iter(arr.devices()))
    except (AttributeError, StopIteration):
        return "?"
    return device_label(d)


def device_label(d: Any) -> str:
    """'cpu:0', 'cuda:1': a JAX device as memory reports name it."""
    return f"{d.platform}:{d.id}"


def _memory(arr: Any, kind: str) -> Optional[Any]:
    """A sharding placing a copy of ``arr`` in memory ``kind`` of its device, or None when the chunk
    is better copied through numpy (on the copier thread all the same): when the platform has no such
    memory, and on a CPU. Why a CPU copies through numpy: its "device" memory already is host memory,
    so a copy to ``pinned_host`` is a memory copy either way, and ``np.array`` makes it several times
    faster than the runtime's transfer (measured: 0.02 against 0.19 ms for a 256 KiB buffer), which
    matters on a CPU where the copier thread takes its time from the cores that compute."""
    try:
        d = next(iter(arr.devices()))
        if kind != "device" and (d.platform == "cpu" or kind not in {m.kind for m in d.addressable_memories()}):
            return None
        return jax.sharding.SingleDeviceSharding(d, memory_kind=kind)
    except (AttributeError, StopIteration, ValueError, TypeError):
        return None


def memory_row(loop: str, device: str, swap: bool) -> dict[str, Any]:
    """An empty row of ``memory_records`` for ``loop``'s stacks on ``device``: the terms every executor
    reports a run's stack memory in (``ChunkStore.records``, the SPMD tier's)."""
    return {"loop": loop, "device": device, "swap_memory": swap, "stacks": 0, "device_bytes": 0, "host_bytes": 0,
            "chunks_to_host": 0, "chunks_from_host": 0, "chunks_kept_on_device": 0, "peak_device_bytes": 0}


class ChunkStore:
    """The full chunks of one run's gradient stacks, and their memory accounting.

    Why one object per run: the forward loop's driver fills it and the backward loop's driver, a later
    stage of the same run, empties it; the accounting it keeps on the way is what
    ``FastBackend.memory_records`` reports after the run. ``limit`` is the device memory cap in bytes
    (None: no cap); ``info`` maps a stack key to its ``StackInfo``; ``budget``: the run's memory plan
    when a budget applies (its loops' device bytes are checked against it as they are recorded, and
    the loops it swaps are swapped as if they asked for ``swap_memory=True``). ``who``: the route its
    errors name (the fast backend, or one device of the partitioned executor).
    """

    def __init__(self, info: dict[str, StackInfo], limit: Optional[int] = None,
                 budget: Optional[MemoryPlan] = None, who: str = "fast backend",
                 held: Optional[dict[str, int]] = None) -> None:
        self.info = info
        self.limit = limit
        self.budget = budget
        self.who = who
        #: per loop reversed from checkpoints, the bytes its slots hold on the device for the whole run
        #: (``SlotPlan.bytes``), counted with the stacks' against the budget
        self.held = dict(held or {})
        check_slots(budget, self.held, who)
        self.swapped = budget.swapped() if budget is not None else frozenset()
        self.chunks: dict[str, list[Chunk]] = {}
        self.spares: dict[str, tuple[Any, Any, Optional[Chunk]]] = {}  # buffer, indices, its chunk in flight
        self.ledgers: dict[str, Ledger] = {}
        self.peak_device = 0
        self.peak_host = 0
        self.device_sharding: dict[str, Any] = {}  # stack key -> where its chunks come back to

    # ---- accounting -------------------------------------------------------------------------------
    def ledger(self, k: str) -> Ledger:
        """The ledger of stack ``k``, made empty on first use."""
        lg = self.ledgers.get(k)
        if lg is None:
            lg = self.ledgers[k] = Ledger()
        return lg

    def device_bytes(self) -> int:
        """The bytes every stack of the run holds on the device now, what the device memory cap is checked against."""
        return sum(lg.device_bytes for lg in self.ledgers.values())

    def host_bytes(self) -> int:
        """The bytes every stack of the run holds in host memory now."""
        return sum(lg.host for lg in self.ledgers.values())

    def _peaks(self) -> None:
        for lg in self.ledgers.values():
            lg.peak_device = max(lg.peak_device, lg.device_bytes)
        self.peak_device = max(self.peak_device, self.device_bytes())
        self.peak_host = max(self.peak_host, self.host_bytes())

    def observe(self, stacks: dict[str, Any], index_bytes: Optional[dict[str, int]] = None,
                host: frozenset[str] = frozenset()) -> None:
        """Record the buffers in the loop state (``StackValue`` per key, or a value buffer alone with
        its index record's bytes in ``index_bytes``: the fused stage's) and check the cap: called
        after every compiled call, since a stack whose element shape is known only while tracing is
        allocated inside it. ``host``: the stacks whose value buffers the fused stage keeps in host
        memory (``Plan.host``: every stack traced with ``StackValue.host`` is one), counted there."""
        for k, sv in stacks.items():
            buf, _ = kept_arrays(sv) if isinstance(sv, StackValue) or k.startswith(STACK_PREFIX) else (None, None)
            if buf is not None:
                lg = self.ledger(k)
                on_host = int(buf.nbytes) if k in host else 0
                lg.active = stack_nbytes(sv, (index_bytes or {}).get(k, 0)) - on_host
                lg.host = on_host or lg.host
                if not lg.device:
                    lg.device = device_name(buf)
        self._recorded()

    def observe_inside(self, nbytes: dict[str, int], device: str, host: Optional[dict[str, int]] = None) -> None:
        """Record the stacks a fused stage made inside its call (``Plan.inside``): ``nbytes`` per key
        on ``device``, and ``host`` per key in its host memory (``Plan.host_bytes``). They are in no
        state the call returns, but they took that memory during it."""
        for k, b in nbytes.items():
            lg = self.ledger(k)
            lg.active = b
            lg.host = (host or {}).get(k, lg.host)
            lg.device = lg.device or device
        self._recorded()

    def _recorded(self) -> None:
        """After buffers were recorded (``observe``, ``observe_inside``): the peaks, the cap and the budget."""
        self._peaks()
        if self.limit is not None and self.device_bytes() > self.limit:
            worst = max(self.ledgers, key=lambda k: self.ledgers[k].device_bytes)
            self._exhausted(worst, 0, "its stack buffers")
        self._budget_check(None, 0, "its stack buffers")

    def _check(self, k: str, extra: int, what: str) -> None:
        if self.limit is not None and self.device_bytes() + extra > self.limit:
            self._exhausted(k, extra, what)
        self._budget_check(k, extra, what)

    def _budget_check(self, k: Optional[str], extra: int, what: str) -> None:
        """The memory plan's budgets against the device bytes per loop, ``extra`` more for stack ``k``'s loop."""
        if self.budget is None:
            return
        by_loop = dict(self.held)
        for key, lg in self.ledgers.items():
            loop = self._info(key).loop
            by_loop[loop] = by_loop.get(loop, 0) + lg.device_bytes + (extra if key == k else 0)
        check_budget(self.budget, by_loop, self.who, f"stack buffers: {what}")

    def _info(self, k: str) -> StackInfo:
        return self.info.get(k, StackInfo("?", f"the loop of stack {k}", False))

    def swaps(self, k: str) -> bool:
        """Whether stack ``k``'s full chunks go to host memory: its loop asked (``swap_memory=True``),
        or the memory plan swaps the loop."""
        info = self._info(k)
        return info.swap or info.loop in self.swapped

    def _exhausted(self, k: str, extra: int, what: str) -> None:
        info = self._info(k)
        lg = self.ledger(k)
        hint = ("its stack chunks already go to host memory: lower stack_chunk (entries per device chunk) "
                "or raise the limit" if self.swaps(k) else
                "run the loop with swap_memory=True to move full stack chunks to host memory, or raise the limit")
        raise ResourceExhaustedError(
            f"{self.who}: the gradient stacks of {info.where} need {self.device_bytes() + extra} bytes on device "
            f"{lg.device or '?'} ({what}), over device_memory_limit={self.limit} bytes; {hint}")

    def moved(self) -> int:
        """Full chunks taken out of a loop state this run (to host memory or kept on the device)."""
        return sum(lg.to_host + lg.kept_chunks for lg in self.ledgers.values())

    def stats(self) -> dict[str, int]:
        """The run's totals, for ``RunResult.stats``."""
        lgs = self.ledgers.values()
        return {"peak_device_stack_bytes": self.peak_device, "peak_host_stack_bytes": self.peak_host,
                "stack_chunks_swapped": sum(lg.to_host for lg in lgs),
                "stack_chunks_from_host": sum(lg.from_host for lg in lgs),
                "stack_chunks_kept": sum(lg.kept_chunks for lg in lgs)}

    def saved(self, keys: Iterable[str]) -> None:
        """The forward loop that pushes ``keys`` has ended: note what its stacks hold now."""
        for k in keys:
            lg = self.ledgers.get(k)
            if lg is not None:
                lg.saved_device, lg.saved_host = lg.device_bytes, lg.host

    def records(self) -> list[dict[str, Any]]:
        """Per loop and device: the rows of ``FastBackend.memory_records``."""
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for k, lg in self.ledgers.items():
            info = self.info.get(k, StackInfo("?", "?", False))
            r = rows.setdefault((info.loop, lg.device), memory_row(info.loop, lg.device, self.swaps(k)))
            r["stacks"] += 1
            r["device_bytes"] += max(lg.saved_device, lg.active)
            r["host_bytes"] += lg.saved_host
            r["chunks_to_host"] += lg.to_host
            r["chunks_from_host"] += lg.from_host
            r["chunks_kept_on_device"] += lg.kept_chunks
            r["peak_device_bytes"] += lg.peak_device
        return list(rows.values())

    # ---- the forward loop: a stack outgrew its buffer ----------------------------------------------
    def has(self, k: str) -> bool:
        """Whether stack ``k`` has full chunks taken out of its loop state (the backward loop brings them back as its
        pops need them)."""
        return bool(self.chunks.get(k))

    def spill(self, full: dict[str, StackValue], pointers: Optional[dict[str, int]] = None) -> dict[str, StackValue]:
        """Take the full buffers of ``full`` (stack key -> its StackValue) out of the loop state and
        return empty stacks to go on with. ``pointers``: their pointers, where the host has read them
        already (``ChunkReport``).

        Swapped stacks: the buffers are copied to host memory asynchronously, all in one
        ``device_put`` (one call per buffer costs more than the copy for small chunks), and kept as
        spares; the spares of the previous spill (whose copy has had a whole chunk of compute to
        finish) are the new empty buffers. Kept stacks: the buffers stay on the device, and new ones
        are allocated.
        """
        out: dict[str, StackValue] = {}
        swap: dict[str, tuple[StackValue, int]] = {}
        fresh: list[str] = []  # stacks that go on in a newly allocated buffer
        for k, s in full.items():
            n = int(s.ptr) if pointers is None else pointers[k]
            if n == 0:
                out[k] = s
            elif self.swaps(k):
                swap[k] = (s, n)
            else:
                lg = self.ledger(k)
                self._check(k, s.nbytes(), "a new device chunk: swap_memory=False keeps full chunks on the device")
                self.chunks.setdefault(k, []).append(Chunk(Pair((s.buf, s.idx)), n, False, s.nbytes()))
                lg.kept += s.nbytes()
                lg.kept_chunks += 1
                lg.device = lg.device or device_name(s.buf)
                fresh.append(k)
        bufs = self._swap_out(swap, fresh) if swap else {}
        if fresh:
            made = zeros_like_all([a for k in fresh for a in (full[k].buf, full[k].idx)])
            bufs.update({k: (made[2 * i], made[2 * i + 1]) for i, k in enumerate(fresh)})
        if bufs:
            ptrs = scalars_on(next(iter(bufs.values()))[0], [0] * len(bufs))
            for (k, (buf, idx)), p in zip(bufs.items(), ptrs, strict=True):
                out[k] = StackValue(full[k].capacity, full[k].dtype, buf, idx, p)
        self._peaks()
        return out

    def _swap_out(self, full: dict[str, tuple[StackValue, int]], fresh: list[str]) -> dict[str, tuple[Any, Any]]:
        """Queue the copies of ``full`` to host memory; the empty buffers to go on with are the spares
        of the last spill (or, the first time, stacks appended to ``fresh`` to be allocated)."""
        first = next(iter(full.values()))[0]
        host = _memory(first.buf, "pinned_host")
        arrays = [a for s, _ in full.values() for a in (s.buf, s.idx)]

        def copy(arrays: list[Any]) -> list[Any]:
            if host is None:
                return [np.array(a) for a in arrays]
            return jax.block_until_ready(jax.device_put(arrays, host))  # done: the sources may be reused

        later = Later(copy, arrays)
        waited = False
        out = {}
        for i, (k, (s, n)) in enumerate(full.items()):
            lg = self.ledger(k)
            chunk = Chunk(Pair(later=later, slot=i), n, True, s.nbytes())
            self.chunks.setdefault(k, []).append(chunk)
            lg.to_host += 1
            lg.host += chunk.nbytes
            old = self.spares.pop(k, None)
            if old is not None:
                buf, idx, inflight = old
                if inflight is not None and not waited:
                    # the previous copies (one batch) must be done before their sources are
                    # overwritten; they had a whole chunk of compute to finish
                    inflight.data.get()
                    waited = True
                out[k] = (buf, idx)
            else:
                self._check(k, chunk.nbytes, "a second buffer while a full chunk is copied to host memory")
                fresh.append(k)
            self.spares[k] = (s.buf, s.idx, chunk)
            lg.spare = chunk.nbytes
        return out

    def end_pushes(self, keys: Iterable[str]) -> None:
        """The forward loop ended: note what the stacks hold, and keep each spare as the device copy
        of the chunk it holds.

        Why keep it: the spare is the buffer of the newest chunk, the one whose copy to host memory
        was queued last, and its rows are intact (it is only overwritten once reused as an empty
        buffer, which no push will do now). That chunk is the first the backward loop needs, often
        after only a few pops, so bringing it back would put a copy to the host *and* a copy back on
        the critical path. The device holds the same two chunks per stack as before."""
        keys = list(keys)
        self.saved(keys)
        for k in keys:
            spare = self.spares.pop(k, None)
            if spare is None:
                continue
            buf, idx, chunk = spare
            lg = self.ledger(k)
            lg.spare = 0
            if chunk is not None and chunk.prefetched is None and chunk in self.chunks.get(k, []):
                chunk.prefetched = Pair((buf, idx))
                lg.prefetched += chunk.nbytes

    # ---- the backward loop: a stack ran low ---------------------------------------------------------
    def prefetch(self, keys: Iterable[str]) -> None:
        """Queue the copies of the newest host chunk of each stack of ``keys`` back to the device,
        ahead of its pops, in one ``device_put`` (a chunk already prefetched, or kept on the device,
        needs nothing; one that does not fit under the cap is copied when the pops reach it)."""
        todo: list[tuple[str, Chunk]] = []
        extra = 0
        for k in keys:
            chunks = self.chunks.get(k)
            if not chunks or not chunks[-1].on_host or chunks[-1].prefetched is not None:
                continue
            c = chunks[-1]
            if self.limit is not None and self.device_bytes() + extra + c.nbytes > self.limit:
                continue
            todo.append((k, c))
            extra += c.nbytes
        if not todo:
            return
        for (k, c), got in zip(todo, self._to_device(todo), strict=True):
            c.prefetched = got
            self.ledger(k).prefetched += c.nbytes
        self._peaks()

    def _to_device(self, todo: list[tuple[str, Chunk]]) -> list[Pair]:
        """Device copies of host chunks, made by the copier thread in one ``device_put``."""
        for k, _ in todo:
            self.ledger(k).from_host += 1
        dev = self.device_sharding.get(todo[0][0])
        if any(self.device_sharding.get(k) != dev for k, _ in todo):
            dev = None
        pairs = [c.data for _, c in todo]

        def copy(pairs: list[Any]) -> list[Any]:
            # on the copier thread, after the copies to the host that it queued earlier
            arrays = [a for p in pairs for a in p.get()]
            # x64 on: a chunk copied through numpy keeps its dtype (the setting is per thread, and a
            # float64 numpy array put on a device without it would come back as float32)
            with jax.enable_x64(True):
                return [jnp.asarray(a) for a in arrays] if dev is None else list(jax.device_put(arrays, dev))

        later = Later(copy, pairs)
        return [Pair(later=later, slot=i) for i in range(len(todo))]

    def begin_pops(self, stacks: dict[str, Any]) -> None:
        """A loop that pops ``stacks`` (key -> its StackValue) starts: prefetch each one's newest chunk."""
        for k, sv in stacks.items():
            if isinstance(sv, StackValue) and not sv.pending:
                self.device_sharding[k] = _memory(sv.buf, "device")
        self.prefetch(stacks)

    def refill(self, low: dict[str, StackValue], pointers: Optional[dict[str, int]] = None) -> dict[str, StackValue]:
        """Fill the stacks of ``low`` (key -> a StackValue low on entries) from their newest chunks,
        keeping LIFO order, then prefetch the chunks next in line. ``pointers``: their pointers, where the
        host has read them already (``ChunkReport``)."""
        got = {k: self._refill(k, s, None if pointers is None else pointers[k]) for k, s in low.items()}
        ptrs = scalars_on(next(iter(got.values()))[0], [n for _, _, n in got.values()])
        out = {}
        for (k, (buf, idx, _)), p in zip(got.items(), ptrs, strict=True):
            out[k] = StackValue(low[k].capacity, low[k].dtype, buf, idx, p)
        self.prefetch(low)
        return out

    def _refill(self, k: str, s: StackValue, n: Optional[int] = None) -> tuple[Any, Any, int]:
        """An empty buffer takes a whole chunk in its place (the usual case: a loop pops as many
        values per iteration as it pushed); a buffer with entries left gets the newest rows below them."""
        chunks = self.chunks.get(k, [])
        lg = self.ledger(k)
        n = int(s.ptr) if n is None else n
        if n == 0 and chunks:
            c = chunks.pop()
            buf, idx = self._take(k, c)
            lg.active = s.nbytes()
            self._dropped(k, c)
            self._peaks()
            return buf, idx, c.n
        else:
            room = s.capacity - n
            parts_b: list[Any] = []
            parts_i: list[Any] = []
            got = 0
            while chunks and got < room:
                c = chunks[-1]
                buf, idx = self._take(k, c)
                take = min(room - got, c.n)
                parts_b.insert(0, buf[c.n - take:c.n])
                parts_i.insert(0, idx[c.n - take:c.n])
                got += take
                c.n -= take
                if c.n == 0:
                    chunks.pop()
                    self._dropped(k, c)
            if not got:
                return s.buf, s.idx, n
            new_b = jnp.concatenate([*parts_b, s.buf[:n], s.buf[n + got:]], axis=0)
            new_i = jnp.concatenate([*parts_i, s.idx[:n], s.idx[n + got:]], axis=0)
        self._peaks()
        return new_b, new_i, n + got

    def _take(self, k: str, c: Chunk) -> tuple[Any, Any]:
        """``c``'s buffers on the device: its prefetched copy, a copy made now, or (kept) itself."""
        if not c.on_host:
            return c.data.get()
        if c.prefetched is None:
            self._check(k, c.nbytes, "a chunk copied back from host memory")
            (c.prefetched,) = self._to_device([(k, c)])  # a partly consumed chunk keeps it for the next refill
            self.ledger(k).prefetched += c.nbytes
        c.data.get()  # its copy to host memory is done: a device copy kept by ``end_pushes`` may be donated now
        return c.prefetched.get()

    def _dropped(self, k: str, c: Chunk) -> None:
        """``c`` is used up: its host copy is freed, and its device copy is now the loop's buffer."""
        lg = self.ledger(k)
        if c.on_host:
            lg.host -= c.nbytes
            if c.prefetched is not None:
                lg.prefetched -= c.nbytes
        else:
            lg.kept -= c.nbytes


def check_slots(budget: Optional[MemoryPlan], held: dict[str, int], who: str) -> None:
    """The bytes that loops' checkpoint slots hold (``held``, per loop: ``SlotPlan.bytes``) against
    the memory plan ``budget``: ``ResourceExhaustedError`` where they alone are over it (a run's
    budget below what a gradient built to recompute keeps)."""
    if budget is not None and held:
        check_budget(budget, held, who, "checkpoint slots")


def budget_plan(nodes: Iterable[Any], stack_nodes: Iterable[Any], platform_name: str,
                run_budget: Optional[int]) -> Optional[MemoryPlan]:
    """The memory plan (``turnout.memory_plan.run_plan``) of a run whose gradient stacks and
    checkpoint slots are ``stack_nodes`` (a plan's ``StackNew`` and ``CheckpointSlots`` nodes), read
    with their pushes from ``nodes`` (the graph's), on platform ``platform_name``; None when no budget
    applies."""
    ids = {n.id for n in stack_nodes}
    mine = [n for n in nodes if n.id in ids or n.op == "StackPush"]  # (the pushes say each entry's index size)
    return run_plan(mine, platform(platform_name), run_budget)


