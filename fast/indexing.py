"""One slot of a buffer, read or written at an index known to be in range.

Why not ``x[j]``, ``x.at[j].set(v)`` or ``lax.dynamic_index_in_dim``: for a traced ``j``, the first
two wrap a negative index (a compare and a select more in every loop body that indexes) and build
a scatter, and ``lax.dynamic_(update_)index_in_dim`` are nested jit calls, one more function to
trace and lower per use. The callers here have made ``j`` safe already: a TensorArray index checked
or proved in range (``lowering._ta_index``, ``fast.ranges``), a stack pointer clamped into the
buffer (``stacks.push``, ``stacks.pop``). So these use the ``lax`` primitives directly, told that
the index is not negative where the installed JAX lets them be told.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np


def _no_wrap(fn: Callable[..., Any]) -> dict[str, Any]:
    """``fn`` (``lax.dynamic_slice``, ``lax.dynamic_update_slice``) told that its indices are not
    negative (no wrapping), where the installed JAX lets it be told. (A signature that cannot be
    read, as under Sphinx's autodoc, tells nothing: the indices are then wrapped, as before.)"""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    return {"allow_negative_indices": False} if "allow_negative_indices" in params else {}


_NO_WRAP = _no_wrap(jax.lax.dynamic_slice)
_NO_WRAP_UPDATE = _no_wrap(jax.lax.dynamic_update_slice)


def _start(x: Any, j: Any) -> tuple[Any, ...]:
    return (jnp.asarray(j, jnp.int32),) + (np.int32(0),) * (jnp.ndim(x) - 1)


def slot(x: Any, j: Any, place: Optional[Callable[[Any], Any]] = None) -> Any:
    """``x[j]`` along the first axis, for ``j`` in range: static indexing for a Python int.
    ``place``: a move the slice takes before anything else touches it (``stack_values.to_device_memory``,
    for a buffer in host memory, where no op but the slice and the move may run)."""
    if isinstance(j, int) and place is None:
        return x[j]
    got = jax.lax.dynamic_slice(x, _start(x, j), (1, *jnp.shape(x)[1:]), **_NO_WRAP)
    return jax.lax.squeeze(got if place is None else place(got), (0,))


def put(x: Any, j: Any, v: Any, place: Optional[Callable[[Any], Any]] = None) -> Any:
    """``x`` with slot ``j`` along the first axis set to ``v``, for ``j`` in range. ``place``: a move
    the update takes last (``stack_values.to_host_memory``, for a buffer in host memory)."""
    if isinstance(j, int) and place is None:
        return x.at[j].set(v)
    update = jnp.reshape(jnp.asarray(v, x.dtype), (1, *jnp.shape(x)[1:]))
    update = update if place is None else place(update)
    return jax.lax.dynamic_update_slice(x, update, _start(x, j), **_NO_WRAP_UPDATE)
