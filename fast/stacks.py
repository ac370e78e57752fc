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
trip count), the run is repeated with twice the capacity (an ``outcome.Retry``; counted in
``RunResult.stats['stack_capacity_retries']``).

Pops are checked against the pushed iteration index ([E-Stack-Pop]): a StackPop receives the
iteration index the gradient graph expects, and a mismatch is a KernelError rather than a wrong
gradient.

The module's parts: a stack as a value and its push and pop (``fast.stack_values``), the chunked
loop and what the host reads after each chunk (here: ``chunk_loop``, ``ChunkReport``), and the store
of full chunks (``fast.chunk_store``). Every name of the three is importable from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout.fast.chunk_store import (
    Chunk,
    ChunkStore,
    Later,
    Ledger,
    Pair,
    StackInfo,
    budget_plan,
    check_slots,
    device_label,
    device_name,
)
from turnout.fast.stack_values import (
    HELD_PREFIX,
    STACK_PREFIX,
    StackValue,
    committed,
    device_zeros,
    host_apart,
    kept_arrays,
    placed,
    pop,
    positional,
    push,
    return_freed_memory,
    scalar_on,
    scalars_on,
    split_state,
    stack_nbytes,
    state_key,
    to_device_memory,
    to_host_memory,
    zeros_like_all,
)


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

    The one bounded loop of both drivers: the fast backend's and the
    partitioned executor's for a loop on one device (both run by ``fast.runner``)."""
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
    swap decisions between chunks, shared by every driven loop (``fast.driven``)."""

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



__all__ = [
    "HELD_PREFIX", "STACK_PREFIX", "Chunk", "ChunkReport", "ChunkStore", "Later", "Ledger", "Pair", "StackInfo",
    "StackValue", "budget_plan", "chunk_loop", "check_slots", "committed", "device_label", "device_name",
    "device_zeros", "host_apart", "kept_arrays", "placed", "pop", "positional", "push", "report_vector",
    "return_freed_memory", "scalar_on", "scalars_on", "split_state", "stack_nbytes", "state_key", "to_device_memory",
    "to_host_memory", "zeros_like_all"
]
