"""Resource limits that every backend enforces before it allocates: the allocation guard.

Why a module of its own: a small valid graph can ask for terabytes (``tile`` by 10**12, a ``fill``
whose shape is fed, a TensorArray of 2**30 slots). numpy would raise a bare ``MemoryError`` or take
the machine down; instead every kernel that makes a tensor whose size comes from a *value* (not
from the size of an input) asks ``check_allocation`` first, and the request fails with
``ResourceExhaustedError`` naming the op. The limit is per tensor, ``DEFAULT_MAX_TENSOR_BYTES`` unless
the run says otherwise (``RunOptions.max_tensor_bytes``); ``Session.run`` installs it for the duration
of one run with ``allocation_limit``, so the reference kernels, the structured evaluator and the fast
backend's trace-time checks all read the same number.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Optional

from turnout.errors import ResourceExhaustedError

#: The default largest tensor a run may create, in bytes (1 GiB). Raise it with
#: ``sess.run(..., max_tensor_bytes=N)`` or ``RunOptions(max_tensor_bytes=N)``; None disables the guard.
DEFAULT_MAX_TENSOR_BYTES = 2**30

_LIMIT: contextvars.ContextVar[Optional[int]] = contextvars.ContextVar(
    "turnout_max_tensor_bytes", default=DEFAULT_MAX_TENSOR_BYTES)


def current_limit() -> Optional[int]:
    """The per-tensor byte limit in force now (None: no limit)."""
    return _LIMIT.get()


@contextlib.contextmanager
def allocation_limit(max_bytes: Optional[int]) -> Iterator[None]:
    """Run the body with ``max_bytes`` as the per-tensor limit (None: unlimited)."""
    token = _LIMIT.set(max_bytes)
    try:
        yield
    finally:
        _LIMIT.reset(token)


def check_allocation(what: str, shape: Sequence[int], itemsize: int) -> None:
    """Raise ``ResourceExhaustedError`` if a tensor of ``shape`` and ``itemsize`` would exceed the limit.

    ``what`` names the op (and node). Computed with Python ints, so the product cannot overflow."""
    limit = _LIMIT.get()
    if limit is None:
        return
    n = 1
    for d in shape:
        n *= max(int(d), 0)
    nbytes = n * int(itemsize)
    if nbytes > limit:
        raise ResourceExhaustedError(
            f"{what}: a tensor of shape {list(int(d) for d in shape)} needs {nbytes:,} bytes, over the limit "
            f"max_tensor_bytes={limit:,}; raise it with sess.run(..., max_tensor_bytes=N) "
            "(RunOptions.max_tensor_bytes) if the program really needs that much")
