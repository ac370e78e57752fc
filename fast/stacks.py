"""Gradient stacks as chunked device buffers (the paper, Sec. 5).

Why chunks: XLA needs static memory bounds, so ``jax.grad(lax.while_loop)`` is refused — the number
of values a loop saves is only known at run time. Turnout keeps the paper's stacks instead. A stack
is a fixed-capacity device buffer plus a pointer, carried as loop state. A top-level loop that pushes
is compiled to run at most as many iterations as fit (an extra predicate ``ptr + pushes <= capacity``);
when the real predicate is still true, a Python driver moves the full buffer out to host memory (this
*is* memory swapping), resets the pointer and re-enters. The backward loop pops in reverse and, when
its buffer runs low, refills it from the host chunks, last first. Device-resident stack memory is
therefore bounded by ``capacity`` whatever the trip count. (When every push fits one chunk the
backend runs the whole program as one fused call instead, with no driver: see ``backend``.)

Design for nested loops: an inner loop's pushes go to the same buffers, inside the outer loop's chunk.
The outer chunk also stops when a stack's free room is smaller than the largest number of values one
outer iteration has pushed so far (``grow``); if an outer iteration still overflows (an irregular inner
trip count), the run is repeated with twice the capacity (``StackOverflow``; counted in
``RunResult.stats['stack_capacity_retries']``).

Pops are checked against the pushed iteration index ([E-Stack-Pop]): a StackPop receives the
iteration index the gradient graph expects, and a mismatch is a KernelError rather than a wrong
gradient.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from turnout.errors import UnsupportedError


@jax.tree_util.register_pytree_node_class
class StackValue:
    """``buf (capacity, *elem)``, ``idx (capacity, depth)`` (the pushed iteration indices), ``ptr``.

    ``buf is None``: no push yet and no element shape known (a *pending* stack).
    """

    def __init__(self, capacity: int, dtype: Any, buf: Any = None, idx: Any = None, ptr: Any = None) -> None:
        self.capacity, self.dtype, self.buf, self.idx, self.ptr = capacity, np.dtype(dtype), buf, idx, ptr

    @property
    def pending(self) -> bool:
        return self.buf is None

    def materialize(self, elem_shape: tuple[int, ...], index_shape: tuple[int, ...]) -> StackValue:
        return StackValue(self.capacity, self.dtype, jnp.zeros((self.capacity, *elem_shape), self.dtype),
                          jnp.zeros((self.capacity, *index_shape), jnp.int32), jnp.zeros((), jnp.int32))

    def nbytes(self) -> int:
        if self.pending:
            return 0
        return math.prod(self.buf.shape) * self.buf.dtype.itemsize + math.prod(self.idx.shape) * 4

    def tree_flatten(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        aux = (self.capacity, self.dtype.str)
        return ((), aux + (True,)) if self.pending else ((self.buf, self.idx, self.ptr), aux + (False,))

    @classmethod
    def tree_unflatten(cls, aux: tuple[Any, ...], children: tuple[Any, ...]) -> StackValue:
        cap, d, pending = aux
        return cls(cap, d) if pending else cls(cap, d, *children)


def push(s: StackValue, index: Any, value: Any) -> tuple[StackValue, Any]:
    """Returns the new stack and ``ok`` (False on overflow: the value is not stored)."""
    value = jnp.asarray(value, s.dtype)
    index = jnp.asarray(index, jnp.int32)
    if s.pending:
        s = s.materialize(tuple(value.shape), tuple(index.shape))
    elif value.shape != s.buf.shape[1:] or index.shape != s.idx.shape[1:]:
        # a preallocated stack (static shapes, see backend._static_stack_shapes) must not broadcast
        raise UnsupportedError(f"fast backend: a value of shape {value.shape} (index {index.shape}) pushed "
                               f"on a stack of elements {s.buf.shape[1:]} (index {s.idx.shape[1:]})")
    ok = s.ptr < s.capacity
    p = jnp.minimum(s.ptr, s.capacity - 1)
    buf = s.buf.at[p].set(jnp.where(ok, value, s.buf[p]))
    idx = s.idx.at[p].set(jnp.where(ok, index, s.idx[p]))
    return StackValue(s.capacity, s.dtype, buf, idx, s.ptr + ok.astype(jnp.int32)), ok


def pop(s: StackValue, index: Any) -> tuple[StackValue, Any, Any, Any]:
    """Returns the new stack, the value, ``ok`` (False on underflow) and ``match`` (the popped
    iteration index equals ``index``)."""
    ok = s.ptr > 0
    p = jnp.maximum(s.ptr - 1, 0)
    v = s.buf[p]
    match = jnp.all(s.idx[p] == jnp.asarray(index, jnp.int32)) | ~ok
    return StackValue(s.capacity, s.dtype, s.buf, s.idx, s.ptr - ok.astype(jnp.int32)), v, ok, match


class HostChunks:
    """The chunks a driver moved out of the device, per stack, oldest first (host memory)."""

    def __init__(self) -> None:
        self.chunks: dict[Any, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.swapped = 0
        self.host_bytes = 0
        self.peak_host_bytes = 0

    def has(self, k: Any) -> bool:
        return bool(self.chunks.get(k))

    def spill(self, k: Any, s: StackValue) -> StackValue:
        """Move the filled part of ``s`` to the host and return an empty stack reusing the buffer."""
        n = int(s.ptr)
        if n == 0:
            return s
        buf, idx = np.asarray(s.buf)[:n].copy(), np.asarray(s.idx)[:n].copy()
        self.chunks.setdefault(k, []).append((buf, idx))
        self.swapped += 1
        self.host_bytes += buf.nbytes + idx.nbytes
        self.peak_host_bytes = max(self.peak_host_bytes, self.host_bytes)
        return StackValue(s.capacity, s.dtype, s.buf, s.idx, jnp.zeros((), jnp.int32))

    def refill(self, k: Any, s: StackValue) -> StackValue:
        """Fill the free room below the device items with the newest host items (LIFO order kept)."""
        n = int(s.ptr)
        room = s.capacity - n
        parts_b: list[Any] = []
        parts_i: list[Any] = []
        got = 0
        chunks = self.chunks.get(k, [])
        while chunks and got < room:
            b, i = chunks.pop()
            take = min(room - got, b.shape[0])
            if take < b.shape[0]:
                chunks.append((b[: b.shape[0] - take], i[: b.shape[0] - take]))
            parts_b.insert(0, b[b.shape[0] - take:])
            parts_i.insert(0, i[b.shape[0] - take:])
            got += take
            self.host_bytes -= b[b.shape[0] - take:].nbytes + i[b.shape[0] - take:].nbytes
        if not got:
            return s
        dev_b, dev_i = np.asarray(s.buf), np.asarray(s.idx)
        new_b = np.concatenate([*parts_b, dev_b[:n]], axis=0)
        new_i = np.concatenate([*parts_i, dev_i[:n]], axis=0)
        buf = jnp.asarray(np.concatenate([new_b, dev_b[new_b.shape[0]:]], axis=0))
        idx = jnp.asarray(np.concatenate([new_i, dev_i[new_i.shape[0]:]], axis=0))
        return StackValue(s.capacity, s.dtype, buf, idx, jnp.asarray(new_b.shape[0], jnp.int32))
