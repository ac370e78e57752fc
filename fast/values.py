"""Run-time values of the fast backend that are not plain arrays.

Why pytrees: these values cross ``lax.cond`` branches, ``lax.while_loop`` carries and ``jax.jit``
boundaries. Registering them as pytrees lets their static parts (a TensorArray's size, a handle's
name) travel as tree structure, so they stay static, while buffers travel as arrays.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout.errors import ResourceExhaustedError, describe_node
from turnout.graph import Node
from turnout.kernels import TensorArrayValue, check_ta_capacity


@jax.tree_util.register_pytree_node_class
class _Dead:
    """A value that is dead at trace time (the untaken output of a Switch inside a branch). A pytree
    without leaves, so it can stand in a branch's outputs while their shapes are worked out."""

    def __repr__(self) -> str:
        return "DEAD"

    def tree_flatten(self) -> tuple[tuple[()], None]:
        return (), None

    @classmethod
    def tree_unflatten(cls, aux: None, children: tuple[()]) -> _Dead:
        return DEAD

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Dead)

    def __hash__(self) -> int:
        return 0


DEAD = _Dead()


#: the dtype of a TensorArray's per-slot write count (``TA.mask``)
MASK_DTYPE = jnp.int8


@jax.tree_util.register_pytree_node_class
class TA:
    """A TensorArray: ``buf`` of shape ``(size, *elem)`` and ``mask`` ``(size,)``, the number of writes of
    each slot (int8: 0 is unwritten, 1 written; 2 only in the write that the write-once check rejects).

    Why a count and not a flag: the write-once check must read whether slot j was written while the
    write updates the mask in place. With a flag, the check reads the old mask and the update writes
    it, and XLA, with nothing ordering the two, copied the whole mask at every write: O(n) per write of
    a scan over n elements. With a count, the write adds 1 and the check reads the *updated* slot, so
    the update comes first and stays in place.

    The size is static (part of the tree structure): XLA needs static shapes, so a TensorArray's
    size must be known when the program is compiled (it may depend on feed *shapes*, not values).
    ``buf is None`` while no element shape is known yet (no write so far): a *pending* array, which
    becomes concrete at its first write.

    A TensorArray of *dynamic* size (``dynamic_size=True``: TensorFlow's decoders' outputs) grows with
    its writes, and an XLA buffer cannot. It is a buffer of a static *capacity* (``size``: the run's
    capacity for buffers that grow with a loop, as a gradient stack's chunk, or its declared size
    when larger) and a run-time ``length`` (its size as the interpreters count it: one past the
    highest slot written, or its declared size). A write past the capacity sets the error word's
    ``overflow`` kind, and the run goes again with twice the capacity (``outcome.Retry``), as a stack
    that outgrew its chunk does. ``length`` is a leaf of the tree (a traced int32), ``dynamic`` part
    of its structure; for an array of static size ``length`` is ``size``.
    """

    def __init__(self, size: int, dtype: Any, elem_shape: Optional[tuple[int, ...]],
                 buf: Any = None, mask: Any = None, full: bool = False,
                 written: Optional[frozenset[int]] = None, length: Any = None) -> None:
        self.size, self.dtype, self.elem_shape, self.buf, self.mask = size, np.dtype(dtype), elem_shape, buf, mask
        #: dynamic size: the int32 length (numpy where known while tracing); ``None``: static size
        self.length = length
        #: What the trace knows of the mask. ``full``: every slot is written (an unstacked tensor), so
        #: a read need not look at the mask. ``written``: exactly these slots are written (a new
        #: array, then writes at constant indices), ``None`` when unknown; a loop whose body writes
        #: the slot its counter moves over needs no write-once check where none of these is in its
        #: range (``Emitter.fresh_writes``). Neither is part of the tree structure, so both are
        #: lost (and the checks made) wherever the array crosses a ``lax`` boundary; a loop's
        #: body sees the arrays it closes over, and the emitter reads a loop's entry values
        #: before they enter the loop.
        self.full = full
        self.written = written

    @property
    def pending(self) -> bool:
        """True while the array has no buffer: its element shape is not known yet (no write or declaration fixed it)."""
        return self.buf is None

    @property
    def dynamic(self) -> bool:
        """Whether the array grows with its writes (``dynamic_size``): its size is ``length``."""
        return self.length is not None

    def sized(self) -> Any:
        """The array's size as the interpreters count it: ``length`` for a dynamic array, else
        ``size`` (an int32, traced or known)."""
        return np.int32(self.size) if self.length is None else self.length

    def with_slots(self, buf: Any, mask: Any, written: Optional[frozenset[int]] = None, length: Any = None) -> TA:
        """This array with new buffer and mask (and, for a dynamic array, ``length``, else its own)."""
        return TA(self.size, self.dtype, self.elem_shape, buf, mask, written=written,
                  length=self.length if length is None else length)

    def materialize(self, elem_shape: tuple[int, ...], node: Node) -> TA:
        """This array with its buffer and mask made for ``elem_shape``, once its first write (or
        declaration) fixes it. Why the allocation guard here: the interpreters keep a TensorArray
        as slots and allocate only what is written or stacked, while XLA allocates ``size`` slots at
        once, so a large declared size must meet ``max_tensor_bytes`` here (``node``, whose element
        shape this is, is named) rather than fail inside XLA."""
        if not self.dynamic:  # (a dynamic array's capacity is the run's, not the program's: the
            try:              # interpreters guard what its first write makes it, ``_ta_write``)
                check_ta_capacity(self.size, tuple(elem_shape), self.dtype)
            except ResourceExhaustedError as e:
                raise ResourceExhaustedError(f"{describe_node(node)}: {e}") from None
        return TA(self.size, self.dtype, tuple(elem_shape), jnp.zeros((self.size, *elem_shape), self.dtype),
                  jnp.zeros((self.size,), MASK_DTYPE), written=self.written, length=self.length)

    def tree_flatten(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """The pytree children: buffer and mask (none while pending) and, for a dynamic array, its ``length``; size,
        dtype, element shape and the pending flag are static. ``full`` and ``written`` are left out, so they are lost
        where the array crosses a ``lax`` boundary."""
        aux = (self.size, self.dtype.str, self.elem_shape, self.dynamic)
        slots = () if self.pending else (self.buf, self.mask)
        return slots + ((self.length,) if self.dynamic else ()), aux + (self.pending,)

    @classmethod
    def tree_unflatten(cls, aux: tuple[Any, ...], children: tuple[Any, ...]) -> TA:
        """The array rebuilt from ``tree_flatten``'s parts (what the trace knew of its mask is lost)."""
        size, d, es, dynamic, pending = aux
        length = children[-1] if dynamic else None
        slots = children[:-1] if dynamic else children
        return cls(size, d, es, length=length) if pending else cls(size, d, es, slots[0], slots[1], length=length)


@jax.tree_util.register_pytree_node_class
class Stacked:
    """The stack of a TensorArray of dynamic size (``TensorArrayStack``): its buffer, of the array's
    capacity, and the run-time ``length`` of it that holds the elements.

    Why a value of its own: its shape is known only when the program runs, which XLA cannot express.
    Fetched, the host takes the first ``length`` rows (``to_host``). Read by another op, the run is
    cut at it (``fast.specialise``): an earlier run computes it, and the program runs with it fed, its
    shape then known (``EmitterCore.run_node``)."""

    def __init__(self, buf: Any, length: Any) -> None:
        self.buf, self.length = buf, length

    def tree_flatten(self) -> tuple[tuple[Any, Any], None]:
        """The pytree children: the buffer and its run-time ``length``."""
        return (self.buf, self.length), None

    @classmethod
    def tree_unflatten(cls, aux: None, children: tuple[Any, Any]) -> Stacked:
        """The stack rebuilt from its buffer and ``length``."""
        return cls(*children)


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class Handle:
    """A Variable or gradient-stack handle: static, compared by (kind, name)."""

    kind: str  # "var" or "stack"
    name: Any
    attrs_key: Any = None

    def tree_flatten(self) -> tuple[tuple[()], tuple[str, Any, Any]]:
        """No children: the whole handle is static, so a compiled call is specialised on which Variable or stack it
        names."""
        return (), (self.kind, self.name, self.attrs_key)

    @classmethod
    def tree_unflatten(cls, aux: tuple[str, Any, Any], children: tuple[()]) -> Handle:
        """The handle rebuilt from its static fields."""
        return cls(*aux)


@jax.tree_util.register_pytree_node_class
class Static:
    """A numpy value known at trace time, carried across a ``jax.jit`` boundary as structure (so
    constant folding survives from one compiled stage to the next)."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = value
        self._key = (value.dtype.str, value.shape, value.tobytes())

    def tree_flatten(self) -> tuple[tuple[()], Any]:
        """No children: the value itself is the static part (compared by dtype, shape and bytes), so it stays a
        constant inside the next compiled stage."""
        return (), self

    @classmethod
    def tree_unflatten(cls, aux: Any, children: tuple[()]) -> np.ndarray:
        """The numpy value itself: inside the stage the wrapper is gone, and the value folds as a constant."""
        return aux.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Static) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)


def wrap_static(v: Any) -> Any:
    """``v`` wrapped as ``Static`` when it is a numpy value known at trace time (to cross a ``jax.jit`` boundary as a
    constant), else ``v`` as it is."""
    return Static(v) if isinstance(v, np.ndarray) else v


def is_static(v: Any) -> bool:
    """A value known while tracing (numpy), as opposed to a traced jax value."""
    return isinstance(v, (np.ndarray, np.generic))


def to_host(v: Any) -> Any:
    """A fetched value as the session returns it: numpy arrays, a TensorArray as the reference
    backend's ``TensorArrayValue``, the stack of a dynamic one cut to its length, a resource handle
    as it is."""
    if isinstance(v, TA):
        n = int(v.sized())
        items = tuple(None for _ in range(n)) if v.pending else tuple(
            np.asarray(v.buf[i]) if bool(v.mask[i]) else None for i in range(n))
        return TensorArrayValue(np.dtype(v.dtype).name, v.elem_shape, items, v.dynamic)
    if isinstance(v, Stacked):
        return np.asarray(v.buf)[:int(v.length)]
    if isinstance(v, Handle):
        return v
    return np.asarray(v)


def start_reads(vals: Iterable[Any]) -> None:
    """Start copying each device array of ``vals`` to the host, so that the reads which follow (the
    error word first, then each fetched value) wait for the device once, not once per array.

    Why: on a GPU each ``np.asarray`` of a device array is a synchronisation; a run that reads its
    error word and then two fetched values paid three where ``jax.jit``'s caller, reading one
    result, pays one. On the CPU the arrays are already in host memory and the backend does not call
    this (``FastBackend.overlap_reads``)."""
    for v in vals:
        if isinstance(v, jax.Array):
            v.copy_to_host_async()
