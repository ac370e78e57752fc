"""Static shapes, possibly partially known.

A shape is ``None`` (unknown rank) or a tuple whose entries are ints or ``None`` (unknown size).
Shapes are plain tuples so they serialize, hash and compare without ceremony.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Optional

from turnout.errors import ArgumentError

Shape = Optional[tuple[Optional[int], ...]]

#: the most dimensions numpy (and so every backend) gives an array
MAX_NDARRAY_RANK = 64


class _AnyShape:
    """The type of ``ANY_SHAPE``: one instance, compared by identity."""

    _instance: Optional[_AnyShape] = None

    def __new__(cls) -> _AnyShape:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "tn.ANY_SHAPE"

    def __reduce__(self) -> str:
        return "ANY_SHAPE"


#: A shape invariant that allows any shape, rank included (``shape_invariants=[tn.ANY_SHAPE, ...]``).
#: Why a sentinel: in ``shape_invariants`` the entry ``None`` keeps its historical meaning "no invariant
#: for this loop variable" (its shape stays that of the initial value), so "any shape" needs its own name.
ANY_SHAPE = _AnyShape()


def as_shape(s: Any) -> Shape:
    """Normalizes a user-given shape (None, list, tuple) to a Shape."""
    if s is None:
        return None
    if isinstance(s, int):
        raise ArgumentError(f"a shape is a sequence of dimensions, got the int {s}; write [{s}]")
    if not isinstance(s, Iterable) or isinstance(s, (str, bytes)):
        raise ArgumentError(f"a shape is a sequence of dimensions (ints, None or -1), got {type(s).__name__} {s!r}")
    out: list[Optional[int]] = []
    for d in s:
        if d is None or d == -1:
            out.append(None)
        elif isinstance(d, int) and d >= 0:
            out.append(int(d))
        else:
            raise ArgumentError(f"invalid dimension {d!r} in shape {s!r}")
    return tuple(out)


def is_fully_defined(s: Shape) -> bool:
    """True when the rank and every dimension are known."""
    return s is not None and all(d is not None for d in s)


def compatible(a: Shape, b: Shape) -> bool:
    """True when some concrete shape satisfies both."""
    if a is None or b is None:
        return True
    if len(a) != len(b):
        return False
    return all(x is None or y is None or x == y for x, y in zip(a, b))


def fits_invariant(invariant: Shape, shape: Shape) -> bool:
    """Whether a loop's back edge of ``shape`` fits its loop variable's shape ``invariant``: compatible,
    and fixing every dimension the invariant fixes (a back edge of unknown rank fits only an unknown
    invariant). The loop builder checks it when it closes a back edge (``shape_rules.check_merge_input``)
    and validation checks it again on the final graph ([W-Types]): one rule, so the two cannot drift
    (they did once, and the builder let an unknown rank pass that validation refused at every run)."""
    if invariant is None:
        return True
    if shape is None:
        return False
    return compatible(invariant, shape) and not any(x is None and y is not None for x, y in zip(shape, invariant))


def merge(a: Shape, b: Shape) -> Shape:
    """The most specific shape compatible with both (call only when ``compatible``)."""
    if a is None:
        return b
    if b is None:
        return a
    return tuple(x if x is not None else y for x, y in zip(a, b, strict=True))


def most_specific_common(a: Shape, b: Shape) -> Shape:
    """The least specific shape that describes both (used where values of either shape flow, e.g. Merge)."""
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == y else None for x, y in zip(a, b))


def broadcast(a: Shape, b: Shape) -> Shape:
    """numpy broadcasting on static shapes; raises ValueError when the known sizes cannot broadcast."""
    if a is None or b is None:
        return None
    n = max(len(a), len(b))
    pa = (1,) * (n - len(a)) + tuple(a)
    pb = (1,) * (n - len(b)) + tuple(b)
    out: list[Optional[int]] = []
    for x, y in zip(pa, pb):
        if x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif x is None or y is None:
            out.append(x if y is None else y)
        elif x == y:
            out.append(x)
        else:
            raise ValueError(f"shapes {fmt(a)} and {fmt(b)} cannot broadcast")
    return tuple(out)


def num_elements(s: Shape) -> Optional[int]:
    """The number of elements, None unless the shape is fully defined."""
    if not is_fully_defined(s):
        return None
    n = 1
    for d in s:  # type: ignore[union-attr]
        n *= d  # type: ignore[operator]
    return n


def fmt(s: Shape) -> str:
    """``[2, ?]`` (``<unknown>`` for an unknown rank), for messages."""
    if s is None:
        return "<unknown>"
    return "[" + ", ".join("?" if d is None else str(d) for d in s) + "]"


def from_value(v: Any) -> tuple[int, ...]:
    """The shape of an array-like value, as ints."""
    import numpy as np

    return tuple(int(d) for d in np.shape(v))


def rank(s: Shape) -> Optional[int]:
    """The number of dimensions, None when the rank is unknown."""
    return None if s is None else len(s)


def seq(s: Sequence[int]) -> tuple[int, ...]:
    """A sequence of dimensions as a tuple of Python ints (numpy ints included)."""
    return tuple(int(d) for d in s)


def too_large_to_index(dims: Sequence[int], itemsize: int) -> Optional[str]:
    """Why numpy cannot make an array of the known ``dims`` (of ``itemsize`` bytes an element), or
    ``None`` when it can. Why a check of its own: a file can declare any shape, and numpy refuses more
    than 64 dimensions, and dimensions whose nonzero sizes multiply past the int64 range even when a
    zero beside them makes the array empty (``[2**62, 0]``), with a ``ValueError`` naming nothing of
    the file's; every reader of outside data asks this first (Python ints: the product cannot wrap)."""
    if len(dims) > MAX_NDARRAY_RANK:
        return f"{len(dims)} dimensions, more than the {MAX_NDARRAY_RANK} an array can have"
    if math.prod(d for d in dims if d) * itemsize > 2**63 - 1:
        return "its nonzero dimensions multiply past the int64 range, too large to index"
    return None
