"""One read-back for a checked call: the error word and live flags ride behind a fetch.

Why a module of its own: a ``Direct`` call (``Plan.direct_fn``) whose program can raise an error
returns an int32 vector of flags (the error word, then a live flag per fetch) beside its fetched
values, and a run read both back: two results and two waits, where a hand-written JAX function
returns and reads one. Measured with JAX alone on the development machine (2026-11-27, pinned to
one core, ``run_overhead.py``'s checked loop written out with the same checks): 14.0 µs a call
with the value and the flags as two results, 12.5 with the flags appended to the value. So when a
fetched value is small and of a dtype that can carry int32 words exactly, the call appends the flags
to it (``pack``), and the host splits the one array it reads back (``unpack``): the value is a view
of its first elements, the flags are its tail. The fused stage (``Plan.fused_fn``: a gradient
through a loop) does the same with its error word and live flags: both calls are laid out by one
builder (``fast.call_spec.lay_out``, which records the carrier in ``CallSpec.packed``); for the small
RNN training step of ``benchmarks/run_overhead.py`` one read-back instead of two.

The tail holds the flags' bits, not their numbers: an int32 or int64 value takes them as integers,
a float32 value as their bit patterns (``lax.bitcast_convert_type``), a float64 value as the bit
patterns of the int64 words. A float could not hold every code as a number: loop codes start at
2**24 (``outcome.NONTERM``). Bit patterns only move (concatenation is a copy): no arithmetic flushes
or rounds them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

#: the dtypes a fetched value may carry the flags in, and the integer dtype the host reads its tail as
#: (``None``: the tail is read as it is)
CARRIERS: dict[np.dtype, Optional[np.dtype]] = {
    np.dtype(np.int32): None,
    np.dtype(np.int64): None,
    np.dtype(np.float32): np.dtype(np.int32),
    np.dtype(np.float64): np.dtype(np.int64),
}

#: the most elements of a value that carries the flags: packing copies the value inside the call
PACK_MAX_ELEMENTS = 4096


@dataclass(frozen=True)
class Packing:
    """How a compiled call put its flags behind an output (which one: the key beside it in
    ``CallSpec.packed``): a value of ``shape`` (``size`` elements), its tail read as ``view``
    (``None``: as it is). Recorded by the call's trace."""

    shape: tuple[int, ...]
    size: int
    view: Optional[np.dtype]


def carrier(vals: tuple[Any, ...], taken: set[int]) -> Optional[int]:
    """The index of the value of ``vals`` (the fetched values a compiled call traced, one per live
    flag: ``call_spec.lay_out``) that should carry the flags: the smallest of those of a ``CARRIERS``
    dtype with at most ``PACK_MAX_ELEMENTS`` elements, not in ``taken`` (values that are also a
    Variable's new device value, which must stay an array of its own); ``None`` if there is none."""
    best: Optional[tuple[int, int]] = None
    for i, v in enumerate(vals):
        if i in taken or not isinstance(v, jax.Array) or np.dtype(v.dtype) not in CARRIERS:
            continue  # (a traced value is a jax.Array; a constant, a TensorArray or DEAD is not)
        size = math.prod(v.shape)
        if size <= PACK_MAX_ELEMENTS and (best is None or size < best[0]):
            best = (size, i)
    return None if best is None else best[1]


def pack(value: Any, flags: Any) -> tuple[Any, Packing]:
    """``value`` (traced) raveled with the int32 ``flags`` appended, as ``value``'s dtype, and how to
    split it again."""
    dtype = np.dtype(value.dtype)
    view = CARRIERS[dtype]
    words = flags.astype(jnp.int64) if dtype.itemsize == 8 else flags
    tail = words if view is None else lax.bitcast_convert_type(words, dtype)
    packed = jnp.concatenate([jnp.ravel(value), tail])
    return packed, Packing(tuple(value.shape), math.prod(value.shape), view)


def unpack(arr: np.ndarray, p: Packing) -> tuple[np.ndarray, list[int]]:
    """A packed array read back (``np.asarray`` of the call's result): the value (a view of its first
    ``p.size`` elements, in ``p.shape``) and the flags as Python ints."""
    tail = arr[p.size:]
    return arr[:p.size].reshape(p.shape), (tail if p.view is None else tail.view(p.view)).tolist()
