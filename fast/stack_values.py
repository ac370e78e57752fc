"""A gradient stack as a value: a fixed-capacity device buffer, an index record and a pointer, carried
as loop state, with its push and pop (the paper, Sec. 5; [E-Stack-Push], [E-Stack-Pop]).

Why a module of its own: every layer that touches a stack — the lowering rules, the emitter, the
chunk driver (``fast.stacks``), the store of full chunks (``fast.chunk_store``), the fused lane —
needs the value and its two operations, and nothing else of how chunks move. ``fast.stacks``
re-exports every name here.
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout.errors import UnsupportedError
from turnout.fast.indexing import put, slot

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
                 record: bool = True, host: bool = False) -> None:
        # (JAX rebuilds every stack of a compiled call's results through here: no conversion when the
        # dtype already is one)
        dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        self.capacity, self.dtype, self.buf, self.idx, self.ptr = capacity, dtype, buf, idx, ptr
        #: for a pending stack: whether its first push makes an index record (False: a positional
        #: stack whose element shape is known only when tracing, ``Plan.positional``)
        self.record = record
        #: the value buffer lives in the device's host memory inside a compiled call (``placed``):
        #: a swapping loop's stack in the fused stage (``Plan.host``); its index record and pointer
        #: stay on the device
        self.host = host

    def replace(self, buf: Any, idx: Any, ptr: Any) -> StackValue:
        """This stack with new arrays (its capacity, dtype, record flag and memory kept)."""
        return StackValue(self.capacity, self.dtype, buf, idx, ptr, self.record, self.host)

    @property
    def pending(self) -> bool:
        """True while the stack has no buffer: no push yet, and no element shape known."""
        return self.buf is None

    def materialize(self, elem_shape: tuple[int, ...], index_shape: tuple[int, ...]) -> StackValue:
        """This pending stack with zero buffers made inside a trace, once the first push fixes the element shape:
        values of ``elem_shape`` (in host memory for a ``host`` stack), an index record of ``index_shape`` unless it
        is positional, pointer 0."""
        record = jnp.zeros((self.capacity, *index_shape), jnp.int32) if self.record else None
        buf = placed(jnp.zeros((self.capacity, *elem_shape), self.dtype), self.host)
        return self.replace(buf, record, jnp.zeros((), jnp.int32))

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
        """Bytes of the value buffer and the index record (wherever they live: ``host``)."""
        if self.pending:
            return 0
        record = 0 if self.idx is None else math.prod(self.idx.shape) * 4
        return math.prod(self.buf.shape) * self.buf.dtype.itemsize + record


def host_apart(platform: str) -> bool:
    """Whether ``platform`` (JAX's name: ``"cpu"``, ``"gpu"``, ``"tpu"``) has a host memory apart from
    its device memory, which ``to_host_memory`` moves values to: every platform but the CPU, whose device
    memory already is host memory."""
    return platform != "cpu"


def to_host_memory(x: Any) -> Any:
    """``x`` moved to its device's host memory, inside a trace (JAX's host memory space: ``pinned_host``
    on a GPU or TPU); not ``fast.values.to_host``, which reads a fetched value back as numpy. Why
    inside the compiled call: a swapping loop's stack then needs no driver between chunks; each push
    is a device-to-host copy and each pop one back, which XLA makes where the loop reaches them (on an
    H200 they were not hidden behind the loop's compute, ``benchmarks/host_memory_loop.py``). Where
    host and device memory are one (the CPU) JAX drops the move and the program is the one without
    it."""
    return jax.device_put(x, jax.memory.Space.Host)


def to_device_memory(x: Any) -> Any:
    """``x`` brought back from host memory to its device, inside a trace (see ``to_host_memory``)."""
    return jax.device_put(x, jax.memory.Space.Device)


def placed(buf: Any, host: bool) -> Any:
    """A stack's new value buffer ``buf`` where the stack keeps it, inside a trace: moved to host
    memory for a stack in host memory (``StackValue.host``), as it is otherwise. The one rule for
    every place a buffer is made (``StackValue.materialize``, ``Plan._fused_entry``, a counted
    stack resized, a pending stack of a loop carry made concrete)."""
    return to_host_memory(buf) if host else buf


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
                                 meta_fields=["capacity", "dtype", "record", "host"])


def push(s: StackValue, index: Any, value: Any, free: bool = False, proved: bool = False,
         limit: Optional[int] = None) -> tuple[StackValue, Any]:
    """Returns the new stack and ``ok`` (False on overflow). ``proved``: the push is known to fit and
    its pops read by position (a counted stack, ``fast.counted_stacks``): the entry goes at the
    pointer unclamped, the index record is left as it is, and ``ok`` is the constant ``True``.

    ``free``: the pointer runs free (``ptr + 1`` whether or not the push fitted) instead of stopping
    at the capacity. The fused stage asks for it (its loops stop at the first error and it hands no
    pointer back), and so does a driven loop's chunk (``chunk_loop`` stops before a push of its loop
    could overflow, a nested stack that overflows sets the error word, and the host reads no pointer
    of a call whose error word is set): ``Emitter.free_pointers``. A pointer past the capacity is
    never read. ``limit`` (with ``free``; the capacity when not given): the pointer counts on past the
    capacity, and only a push at ``limit`` or beyond is an overflow (the fused attempt counts up to
    the top of its ladder, so that the run's high-water mark says which rung holds it:
    ``Emitter.note_mark``). Why:
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
    place = to_host_memory if s.host else None
    if proved:
        return s.replace(put(s.buf, s.ptr, value, place), s.idx, s.ptr + 1), np.bool_(True)
    ok = s.ptr < (s.capacity if limit is None or not free else limit)
    p = jnp.minimum(s.ptr, s.capacity - 1)
    buf = put(s.buf, p, value, place)
    idx = None if s.idx is None else put(s.idx, p, index)
    return s.replace(buf, idx, s.ptr + (1 if free else ok.astype(jnp.int32))), ok


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
    v = slot(s.buf, p, to_device_memory if s.host else None)
    # a positional stack's entry was pushed under its position (``positional``)
    pushed_at = p if s.idx is None else slot(s.idx, p)
    match = jnp.all(pushed_at == jnp.asarray(index, jnp.int32)) | ~ok
    return s.replace(s.buf, s.idx, s.ptr - (1 if free else ok.astype(jnp.int32))), v, ok, match



def split_state(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(everything but the gradient stacks, the stacks): compiled stages take the stacks as their own,
    donated, argument; Variables and the error word are not donated (device copies of Variables are
    kept between runs)."""
    rest: dict[str, Any] = {}
    stacks: dict[str, Any] = {}
    for k, v in state.items():  # (a kept stack going into the fused stage is its value buffer alone)
        (stacks if isinstance(v, StackValue) or k.startswith(STACK_PREFIX) else rest)[k] = v
    return rest, stacks



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
