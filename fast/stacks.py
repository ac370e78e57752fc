"""Gradient stacks as chunked device buffers (the paper, Sec. 5).

Why chunks: XLA needs static memory bounds, so ``jax.grad(lax.while_loop)`` is refused — the number
of values a loop saves is only known at run time. Turnout keeps the paper's stacks instead. A stack
is a fixed-capacity device buffer plus a pointer, carried as loop state. A top-level loop that pushes
is compiled to run at most as many iterations as fit (an extra predicate ``ptr + pushes <= capacity``);
when the real predicate is still true, a Python driver takes the full buffer out of the loop state,
gives the loop an empty one and re-enters. What happens to the full chunk is the forward loop's
``swap_memory`` (recorded on every ``StackNew``), kept per stack by a ``ChunkStore``:

- ``swap_memory=True``: the chunk is copied to host memory *asynchronously*: a copier thread runs
  one ``jax.device_put`` of every full buffer to the device's ``pinned_host`` memory kind while the
  driver calls the next chunk at once (on a GPU the put itself only queues a DMA; on a CPU it is a
  memory copy, which the thread takes off the driver's path). Its device buffer becomes the stack's
  *spare*, reused as the next empty buffer once the copy has finished, so the device holds at most
  two chunks per stack (the one being filled and the one in flight) whatever the trip count. The
  backward loop pops in reverse; while it pops chunk ``k`` the store has already queued the copy of
  chunk ``k-1`` back to the device (a *prefetch*), so the swap-in is ready when the pops reach it.
- ``swap_memory=False`` (the default, as in TensorFlow): the chunk stays on the device and the stack
  continues in a fresh device buffer: the stack grows on the device, chunk by chunk, and the backward
  loop takes the chunks back without any copy. Nothing leaves the device.

A device memory cap (``FastBackend(device_memory_limit=BYTES)``) bounds the stack bytes the store
holds on the device: a new buffer that would cross it raises ``ResourceExhaustedError`` naming the
loop and suggesting ``swap_memory=True``. A memory budget (``turnout.memory_plan``: a loop's
``memory_budget``, a run's ``RunOptions.memory_budget``) is checked the same way against the same
accounting, per loop and for the run, and swaps the loops its plan says to swap. The store also
counts, per stack, the bytes on the device and on the host and the chunks moved, for
``tn.memory_report(session)``. (When every push fits one chunk the backend runs the whole program as
one fused call instead, with no driver: see ``backend``.)

Design for nested loops: an inner loop's pushes go to the same buffers, inside the outer loop's chunk.
The outer chunk also stops when a stack's free room is smaller than the largest number of values one
outer iteration has pushed so far (``grow``); if an outer iteration still overflows (an irregular inner
trip count), the run is repeated with twice the capacity (``outcome.StacksOutgrown``; counted in
``RunResult.stats['stack_capacity_retries']``).

Pops are checked against the pushed iteration index ([E-Stack-Pop]): a StackPop receives the
iteration index the gradient graph expects, and a mismatch is a KernelError rather than a wrong
gradient.
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout.errors import ResourceExhaustedError, UnsupportedError
from turnout.fast.indexing import put, slot
from turnout.memory_plan import MemoryPlan, platform, run_plan
from turnout.memory_plan import check as check_budget

#: the state keys of gradient stacks begin so (``fast.emit.stack_key``)
STACK_PREFIX = "stack:"
#: the run-state key prefix of a held stack's one value (``fast.held``): ``held:stack:<StackNew id>``
HELD_PREFIX = "held:"


def state_key(stack_id: Any) -> str:
    """The run-state key of the stack made by StackNew node ``stack_id`` (a stack handle's name)."""
    return f"{STACK_PREFIX}{stack_id}"


def committed(x: Any) -> Any:
    """``x`` committed to the device it lies on. Why: a compiled function's cache key includes whether
    each argument array is committed. The outputs of a compiled call are, and the next run passes them
    back (kept stack buffers, a Variable's device copy), so a fresh array must be committed too, or the
    second run of every plan compiled the whole program again (about 1 s for a small LSTM step)."""
    (device,) = x.devices()
    return jax.device_put(x, device)


class StackValue:
    """``buf (capacity, *elem)``, ``idx (capacity, depth)`` (the pushed iteration indices), ``ptr``.

    ``buf is None``: no push yet and no element shape known (a *pending* stack). ``ptr is None`` only
    for a pending stack, and for a stack the fused stage hands back (the next attempt starts every
    stack empty). ``idx is None`` on a stack that has a buffer: a *positional* stack, whose entries
    sit at the position their iteration index names (``plan.positional_stacks``), so it keeps no
    record of them.

    A pytree whose arrays are its children and whose capacity and dtype are static (registered as a
    dataclass node: JAX flattens it in C++, without a Python call per stack and per compiled call).
    """

    def __init__(self, capacity: int, dtype: Any, buf: Any = None, idx: Any = None, ptr: Any = None,
                 record: bool = True) -> None:
        # (JAX rebuilds every stack of a compiled call's results through here: no conversion when the
        # dtype already is one)
        dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self.capacity, self.dtype, self.buf, self.idx, self.ptr = capacity, dtype, buf, idx, ptr
        #: for a pending stack: whether its first push makes an index record (False: a positional
        #: stack whose element shape is known only when tracing, ``Plan.positional``)
        self.record = record

    @property
    def pending(self) -> bool:
        return self.buf is None

    def materialize(self, elem_shape: tuple[int, ...], index_shape: tuple[int, ...]) -> StackValue:
        record = jnp.zeros((self.capacity, *index_shape), jnp.int32) if self.record else None
        return StackValue(self.capacity, self.dtype, jnp.zeros((self.capacity, *elem_shape), self.dtype),
                          record, jnp.zeros((), jnp.int32))

    def allocate(self, elem_shape: tuple[int, ...], index_shape: tuple[int, ...], device: Any = None) -> StackValue:
        """``materialize`` outside a trace: fresh buffers committed to ``device`` (JAX's default device
        when None), pointer 0.

        Why not ``materialize`` there: an eager ``jnp.zeros`` compiles a small XLA program per shape
        and dtype, and the first run of the benchmark LSTM step spent 0.3 s of its 2 s making its
        stack buffers that way. Zeros made on the host (the operating system hands out zeroed pages)
        and put on the device cost a copy: 0.04 to 0.07 s for the same buffers."""
        return StackValue(self.capacity, self.dtype, device_zeros((self.capacity, *elem_shape), self.dtype, device),
                          device_zeros((self.capacity, *index_shape), np.int32, device),
                          device_zeros((), np.int32, device))

    def nbytes(self) -> int:
        if self.pending:
            return 0
        record = 0 if self.idx is None else math.prod(self.idx.shape) * 4
        return math.prod(self.buf.shape) * self.buf.dtype.itemsize + record


def device_zeros(shape: tuple[int, ...], dtype: Any, device: Any = None) -> Any:
    """Zeros made on the host and put on ``device`` (JAX's default device when None), committed there
    (see ``StackValue.allocate`` for why not ``jnp.zeros``, and ``committed``)."""
    x = jax.device_put(np.zeros(shape, dtype), device)
    return x if device is not None else committed(x)  # (a device given commits it already)


@functools.cache
def _malloc_trim() -> Optional[Callable[[int], int]]:
    """glibc's ``malloc_trim``, or None where the C library has none (not glibc)."""
    try:
        return ctypes.CDLL(None).malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def return_freed_memory(platform: str) -> None:
    """Hand memory freed by dropped stack buffers back to the operating system, on the CPU (where
    device buffers are the process's heap) with glibc; elsewhere nothing.

    Why: a fused attempt that outgrows its rung is discarded and its buffers freed before the next
    rung allocates its own (``FastBackend._run_fused_sized``). glibc keeps freed blocks of up to
    32 MiB in its heaps (its threshold for mapping a block on its own rises to the largest block
    freed), and the next rung's blocks, twice as large, do not fit them: the process then held both
    rungs' buffers. ``malloc_trim`` returns the free pages; it walks the heaps once, and runs only
    when a run climbs a rung. For the benchmark LSTM at T = 200 (a climb from 128 to 256 entries) the
    process held 392 MiB after the discarded attempt and 268 MiB after the trim, and peaked at 570
    against 597 MiB without it; a run starting at 256 peaks at about 485 MiB, the difference being
    mostly the discarded rung's compilation, which stays (2026-12-02, one process each)."""
    trim = _malloc_trim() if platform == "cpu" else None
    if trim is not None:
        trim(0)


def kept_arrays(v: Any) -> tuple[Any, Any]:
    """``(value buffer, index record)`` of a stack kept between runs: a ``StackValue`` (kept by the
    stages) or its value buffer alone (kept by the fused stage, which makes its index record inside
    the call: ``Plan._segment``); ``(None, None)`` for nothing kept."""
    if v is None or isinstance(v, StackValue):
        return (None, None) if v is None or v.pending else (v.buf, v.idx)
    return v, None


def stack_nbytes(v: Any, index_bytes: int = 0) -> int:
    """Device bytes of a stack as state holds it: a ``StackValue``, or a kept value buffer alone plus
    ``index_bytes`` for an index record that exists only within a call (the fused stage's)."""
    return v.nbytes() if isinstance(v, StackValue) else int(v.nbytes) + index_bytes


jax.tree_util.register_dataclass(StackValue, data_fields=["buf", "idx", "ptr"],
                                 meta_fields=["capacity", "dtype", "record"])


def push(s: StackValue, index: Any, value: Any, free: bool = False, proved: bool = False) -> tuple[StackValue, Any]:
    """Returns the new stack and ``ok`` (False on overflow). ``proved``: the push is known to fit and
    its pops read by position (a counted stack, ``fast.counted_stacks``): the entry goes at the
    pointer unclamped, the index record is left as it is, and ``ok`` is the constant ``True``.

    ``free``: the pointer runs free (``ptr + 1`` whether or not the push fitted) instead of stopping
    at the capacity. The fused stage asks for it (its loops stop at the first error and it hands no
    pointer back), and so does a driven loop's chunk (``chunk_loop`` stops before a push of its loop
    could overflow, a nested stack that overflows sets the error word, and the host reads no pointer
    of a call whose error word is set): ``Emitter.free_pointers``. A pointer past the capacity is
    never read. Why:
    stacks pushed once per iteration from the same start then have the same pointer, which XLA's
    loop simplifier merges into one loop variable; with the saturating update each stack kept its
    own (for the small LSTM step, 55 kernels per forward iteration instead of 35, 35 per backward
    iteration instead of 15).

    On overflow the value lands on the last entry, unguarded: no run reads a stack that overflowed
    (a fused attempt that overflows is discarded, and a staged run in which a nested loop's stack
    overflows runs again with a larger chunk), and guarding the write cost each push a read of the
    old entry and a select, two XLA kernels per stack per iteration. The entry is written by a
    dynamic update at a scalar position (``indexing.put``), not an indexed ``.at[p].set``, which
    XLA:CPU turned into one more kernel building the index vector."""
    value = jnp.asarray(value, s.dtype)
    index = jnp.asarray(index, jnp.int32)
    if s.pending:
        s = s.materialize(tuple(value.shape), tuple(index.shape))
    elif value.shape != s.buf.shape[1:] or (s.idx is not None and index.shape != s.idx.shape[1:]):
        # a preallocated stack (static shapes, see plan.static_stack_shapes) must not broadcast
        raise UnsupportedError(f"fast backend: a value of shape {value.shape} (index {index.shape}) pushed "
                               f"on a stack of elements {s.buf.shape[1:]}"
                               + ("" if s.idx is None else f" (index {s.idx.shape[1:]})"))
    if proved:
        return StackValue(s.capacity, s.dtype, put(s.buf, s.ptr, value), s.idx, s.ptr + 1), np.bool_(True)
    ok = s.ptr < s.capacity
    p = jnp.minimum(s.ptr, s.capacity - 1)
    buf = put(s.buf, p, value)
    idx = None if s.idx is None else put(s.idx, p, index)
    return StackValue(s.capacity, s.dtype, buf, idx, s.ptr + (1 if free else ok.astype(jnp.int32))), ok


def positional(s: StackValue, index: Any) -> Any:
    """For a push on a *positional* stack (no index record: ``idx is None``, see
    ``Plan.positional``): whether the pushed iteration index is the entry's position, as the pops of
    such a stack assume. ``True`` for a stack with its record."""
    if s.pending:  # (its first push: at position 0)
        return True if s.record else jnp.all(jnp.asarray(index, jnp.int32) == 0)
    if s.idx is not None:
        return True
    return jnp.all(jnp.asarray(index, jnp.int32) == s.ptr)


def pop(s: StackValue, index: Any, free: bool = False) -> tuple[StackValue, Any, Any, Any]:
    """Returns the new stack, the value, ``ok`` (False on underflow) and ``match`` (the popped
    iteration index equals ``index``). ``free``: the pointer runs free, as for ``push``."""
    ok = s.ptr > 0
    p = jnp.maximum(s.ptr - 1, 0)
    v = slot(s.buf, p)
    # a positional stack's entry was pushed under its position (``positional``)
    pushed_at = p if s.idx is None else slot(s.idx, p)
    match = jnp.all(pushed_at == jnp.asarray(index, jnp.int32)) | ~ok
    return StackValue(s.capacity, s.dtype, s.buf, s.idx, s.ptr - (1 if free else ok.astype(jnp.int32))), v, ok, match


def chunk_loop(body: Callable[[Any], Any], c: Any, aux: Any, push: dict[str, int], pop: dict[str, int],
               capacity: int, max_iter: Any, host_has: dict[str, Any],
               measured: Optional[set[str]] = None) -> Any:
    """One call of a driven loop: ``lax.while_loop`` over the loop's carry ``c`` (``(vals, pred,
    state, iters)``) that stops before a push could overflow a stack's chunk or a pop find it empty
    while the host holds more (``host_has``). ``push`` / ``pop``: stack key -> pushes / pops per
    iteration known statically; ``aux = (grow, shrink)`` carries, per stack, the most one iteration
    has pushed or popped so far (nested loops' counts are only known at run time), and is returned
    updated with the carry, for the host's swap decisions between calls, with the scalars those
    decisions read as one vector (``report_vector``): ``(carry, aux, report)``. ``measured``: the stacks
    whose counts must be measured so (default: all); for any other the static count is an upper bound
    (no nested loop pushes or pops it), and its entry of ``aux`` passes through unchanged.

    Why not measure every stack: each measurement is two small operations per stack and iteration,
    and on the CPU each operation of a loop body is dispatched on its own; for the memory
    experiment's LSTM (ten stacks) they were a third of a backward iteration.

    The one bounded loop of both drivers: the fast backend's (``fast.plan.Plan.loop_fns``) and the
    partitioned executor's for a loop on one device (``devices.region_driver``)."""
    def ptrs(state: dict[str, Any]) -> dict[str, Any]:
        return {s: _pointer(state, s) for s in {*push, *pop}}

    tracked = {*push, *pop} if measured is None else measured

    def most(n: int, seen: dict[str, Any], s: str) -> Any:
        return jnp.maximum(n, seen[s]) if s in tracked else n

    def cond(ca: Any) -> Any:
        (_, pred, state, iters), (grow, shrink) = ca
        ok = jnp.asarray(pred) & (iters < max_iter) & (state["err"] == 0)
        p = ptrs(state)
        for s, n in push.items():
            ok &= p[s] + most(n, grow, s) <= capacity
        for s, n in pop.items():
            ok &= (p[s] >= most(n, shrink, s)) | ~host_has[s]
        return ok

    def body2(ca: Any) -> Any:
        c, (grow, shrink) = ca
        before = ptrs(c[2])
        c2 = body(c)
        after = ptrs(c2[2])
        grow = {s: jnp.maximum(grow[s], after[s] - before[s]) if s in tracked else grow[s] for s in grow}
        shrink = {s: jnp.maximum(shrink[s], before[s] - after[s]) if s in tracked else shrink[s] for s in shrink}
        return c2, (grow, shrink)

    c2, aux2 = jax.lax.while_loop(cond, body2, (c, aux))
    return c2, aux2, report_vector(c2, aux2, push, pop)


def report_vector(c: Any, aux: Any, push: dict[str, int], pop: dict[str, int]) -> Any:
    """The scalars the host reads after a chunk, as one int32 vector (``ChunkReport`` reads it): the
    error word, the predicate, the iteration count, then each pushed stack's pointer and ``grow``,
    then each popped stack's pointer and ``shrink``.

    Why one vector: each scalar read back on its own costs a transfer and a few Python calls (tens of
    microseconds on the CPU); the driver of the memory experiment's LSTM, ten stacks, read about 33
    per chunk."""
    _, pred, state, iters = c
    grow, shrink = aux
    parts = [state["err"], pred, iters]
    parts += [x for s in push for x in (_pointer(state, s), grow[s])]
    parts += [x for s in pop for x in (_pointer(state, s), shrink[s])]
    return jnp.stack([jnp.reshape(x, ()) for x in parts]).astype(jnp.int32)


def _pointer(state: dict[str, Any], s: str) -> Any:
    """Stack ``s``'s pointer in a loop's state, 0 while it is pending (no buffer yet)."""
    return jnp.int32(0) if state[s].pending else state[s].ptr


@dataclass(frozen=True)
class ChunkReport:
    """A driven loop's chunk as the host sees it, read back at once (``report_vector``); the host's
    swap decisions between chunks, shared by both drivers (``fast.backend`` and
    ``devices.region_driver``)."""

    err: int
    pred: bool
    iters: int
    #: stack key -> its pointer after the chunk (0 for a pending stack)
    ptr: dict[str, int]
    #: stack key -> the most values one iteration has pushed (``grow``) or popped (``shrink``) so far
    grow: dict[str, int]
    shrink: dict[str, int]

    @staticmethod
    def read(vector: Any, push: dict[str, int], pop: dict[str, int]) -> ChunkReport:
        """The report in ``vector`` (``report_vector``'s), read back in one transfer; ``push`` and
        ``pop`` are the dicts the chunk was traced with, whose order is the vector's."""
        v = np.asarray(vector).tolist()
        ptr: dict[str, int] = {}
        grow: dict[str, int] = {}
        shrink: dict[str, int] = {}
        i = 3
        for s in push:
            ptr[s], grow[s] = v[i], v[i + 1]
            i += 2
        for s in pop:
            ptr[s], shrink[s] = v[i], v[i + 1]
            i += 2
        return ChunkReport(v[0], bool(v[1]), v[2], ptr, grow, shrink)

    def stopped(self, max_iter: int) -> bool:
        """The loop is over: an error, its predicate false, or the iteration budget spent."""
        return self.err != 0 or not self.pred or self.iters >= max_iter

    def full(self, push: dict[str, int], state: dict[str, Any], capacity: int) -> dict[str, StackValue]:
        """The pushed stacks with entries whose free room is less than one more iteration may push:
        their chunks go to the store (``ChunkStore.spill``)."""
        return {s: state[s] for s, n in push.items()
                if not state[s].pending and 0 < self.ptr[s] and self.ptr[s] + max(n, self.grow[s]) > capacity}

    def low(self, pop: dict[str, int], state: dict[str, Any], store: ChunkStore) -> dict[str, StackValue]:
        """The popped stacks with fewer entries than one more iteration may pop while the store holds
        more: they take chunks back (``ChunkStore.refill``)."""
        return {s: state[s] for s, n in pop.items()
                if not state[s].pending and self.ptr[s] < max(n, self.shrink[s]) and store.has(s)}


def split_state(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(everything but the gradient stacks, the stacks): compiled stages take the stacks as their own,
    donated, argument; Variables and the error word are not donated (device copies of Variables are
    kept between runs)."""
    rest: dict[str, Any] = {}
    stacks: dict[str, Any] = {}
    for k, v in state.items():  # (a kept stack going into the fused stage is its value buffer alone)
        (stacks if isinstance(v, StackValue) or k.startswith(STACK_PREFIX) else rest)[k] = v
    return rest, stacks


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
        return self.future.result()[i]


class Pair:
    """A stack chunk's buffers (values, indices): known now, or slots ``2*slot``, ``2*slot+1`` of a
    ``Later``."""

    def __init__(self, arrays: Optional[tuple[Any, Any]] = None, later: Optional[Later] = None, slot: int = 0) -> None:
        self.arrays, self.later, self.slot = arrays, later, slot

    def get(self) -> tuple[Any, Any]:
        # the driver and the copier thread may both ask (a chunk copied back while the driver waits
        # for its copy to the host): read each field once, so that neither sees ``later`` cleared
        # before ``arrays`` is set
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


class ChunkStore:
    """The full chunks of one run's gradient stacks, and their memory accounting.

    Why one object per run: the forward loop's driver fills it and the backward loop's driver, a later
    stage of the same run, empties it; the accounting it keeps on the way is what
    ``FastBackend.memory_records`` reports after the run. ``limit`` is the device memory cap in bytes
    (None: no cap); ``info`` maps a stack key to its ``StackInfo``; ``budget``: the run's memory plan
    when a budget applies (its loops' device bytes are checked against it as they are recorded, and
    the loops it swaps are swapped as if they asked for ``swap_memory=True``).
    """

    def __init__(self, info: dict[str, StackInfo], limit: Optional[int] = None,
                 budget: Optional[MemoryPlan] = None) -> None:
        self.info = info
        self.limit = limit
        self.budget = budget
        self.swapped = budget.swapped() if budget is not None else frozenset()
        self.chunks: dict[str, list[Chunk]] = {}
        self.spares: dict[str, tuple[Any, Any, Optional[Chunk]]] = {}  # buffer, indices, its chunk in flight
        self.ledgers: dict[str, Ledger] = {}
        self.peak_device = 0
        self.peak_host = 0
        self.device_sharding: dict[str, Any] = {}  # stack key -> where its chunks come back to

    # ---- accounting -------------------------------------------------------------------------------
    def ledger(self, k: str) -> Ledger:
        lg = self.ledgers.get(k)
        if lg is None:
            lg = self.ledgers[k] = Ledger()
        return lg

    def device_bytes(self) -> int:
        return sum(lg.device_bytes for lg in self.ledgers.values())

    def host_bytes(self) -> int:
        return sum(lg.host for lg in self.ledgers.values())

    def _peaks(self) -> None:
        for lg in self.ledgers.values():
            lg.peak_device = max(lg.peak_device, lg.device_bytes)
        self.peak_device = max(self.peak_device, self.device_bytes())
        self.peak_host = max(self.peak_host, self.host_bytes())

    def observe(self, stacks: dict[str, Any], index_bytes: Optional[dict[str, int]] = None) -> None:
        """Record the buffers in the loop state (``StackValue`` per key, or a value buffer alone with
        its index record's bytes in ``index_bytes``: the fused stage's) and check the cap: called
        after every compiled call, since a stack whose element shape is known only while tracing is
        allocated inside it."""
        for k, sv in stacks.items():
            buf, _ = kept_arrays(sv) if isinstance(sv, StackValue) or k.startswith(STACK_PREFIX) else (None, None)
            if buf is not None:
                lg = self.ledger(k)
                lg.active = stack_nbytes(sv, (index_bytes or {}).get(k, 0))
                if not lg.device:
                    lg.device = device_name(buf)
        self._recorded()

    def observe_inside(self, nbytes: dict[str, int], device: str) -> None:
        """Record the stacks a fused stage made inside its call (``Plan.inside``): ``nbytes`` per key,
        on ``device``. They are in no state the call returns, but they took that memory during it."""
        for k, b in nbytes.items():
            lg = self.ledger(k)
            lg.active = b
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
        by_loop: dict[str, int] = {}
        for key, lg in self.ledgers.items():
            loop = self._info(key).loop
            by_loop[loop] = by_loop.get(loop, 0) + lg.device_bytes + (extra if key == k else 0)
        check_budget(self.budget, by_loop, "fast backend", f"stack buffers: {what}")

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
            f"fast backend: the gradient stacks of {info.where} need {self.device_bytes() + extra} bytes on device "
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
            r = rows.setdefault((info.loop, lg.device), {
                "loop": info.loop, "device": lg.device, "swap_memory": self.swaps(k), "stacks": 0, "device_bytes": 0,
                "host_bytes": 0, "chunks_to_host": 0, "chunks_from_host": 0, "chunks_kept_on_device": 0,
                "peak_device_bytes": 0})
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


def budget_plan(nodes: Iterable[Any], stack_nodes: Iterable[Any], platform_name: str,
                run_budget: Optional[int]) -> Optional[MemoryPlan]:
    """The memory plan (``turnout.memory_plan.run_plan``) of a run whose gradient stacks are
    ``stack_nodes`` (a plan's), read with their pushes from ``nodes`` (the graph's), on platform
    ``platform_name``; None when no budget applies."""
    ids = {n.id for n in stack_nodes}
    mine = [n for n in nodes if n.id in ids or n.op == "StackPush"]  # (the pushes say each entry's index size)
    return run_plan(mine, platform(platform_name), run_budget)


def scalar_on(like: Any, v: int) -> Any:
    """An int32 scalar committed to ``like``'s device. Why: a jitted call's cache key includes
    whether each argument is committed to a device, and the outputs of compiled calls are; a stack
    pointer made with ``jnp.asarray`` is not, and every such mix of arguments would compile the
    chunk function again."""
    return scalars_on(like, [v])[0]


def scalars_on(like: Any, values: list[int]) -> list[Any]:
    """``scalar_on`` for several values, in one ``device_put`` (a call costs more than the bytes)."""
    try:
        dev = next(iter(like.devices()))
    except (AttributeError, StopIteration):
        return [jnp.asarray(v, jnp.int32) for v in values]
    return list(jax.device_put([np.int32(v) for v in values], dev))


_ZEROS: dict[Any, Any] = {}


def zeros_like_all(arrays: list[Any]) -> list[Any]:
    """New zero buffers of the shapes, dtypes and device of ``arrays``, made by one compiled call
    (cached per signature) rather than one dispatch each. Entries above a stack's pointer are never
    read, so only the allocation matters."""
    try:
        dev = next(iter(arrays[0].devices()))
    except (AttributeError, StopIteration):
        return [jnp.zeros_like(a) for a in arrays]
    specs = tuple((tuple(a.shape), np.dtype(a.dtype).str) for a in arrays)
    fn = _ZEROS.get((specs, dev))
    if fn is None:
        def make() -> list[Any]:
            return [jnp.zeros(shape, np.dtype(d)) for shape, d in specs]

        fn = _ZEROS[(specs, dev)] = jax.jit(make, out_shardings=jax.sharding.SingleDeviceSharding(dev))
    return list(fn())
