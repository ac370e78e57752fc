"""Element types of tensors.

Why a module of its own: every layer (shape inference, numpy kernels, JAX lowering, z3 encodings,
serialization) must agree on one small closed set of dtypes, so they are defined once here and
referred to by name everywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from turnout.errors import ArgumentError


@dataclass(frozen=True)
class DType:
    """A tensor element type. ``resource`` and ``tensor_array`` are opaque handle/value types."""

    name: str
    numpy: Any  # numpy dtype, or None for opaque types

    @property
    def is_floating(self) -> bool:
        """True for ``float32`` and ``float64``."""
        return self.name in ("float32", "float64")

    @property
    def is_integer(self) -> bool:
        """True for ``int32`` and ``int64``."""
        return self.name in ("int32", "int64")

    @property
    def is_bool(self) -> bool:
        """True for ``bool``."""
        return self.name == "bool"

    @property
    def is_numeric(self) -> bool:
        """True for the floating and integer dtypes (arithmetic takes them; ``bool`` and the opaque types not)."""
        return self.is_floating or self.is_integer

    @property
    def is_opaque(self) -> bool:
        """True for the handle and value types with no numpy dtype (``resource``, ``tensor_array``)."""
        return self.numpy is None

    @property
    def itemsize(self) -> int:
        """Bytes per element (0 for an opaque type), for the allocation guards and memory accounting."""
        return 0 if self.numpy is None else int(np.dtype(self.numpy).itemsize)

    def __repr__(self) -> str:
        return f"tn.{self.name}"


bool_ = DType("bool", np.bool_)
int32 = DType("int32", np.int32)
int64 = DType("int64", np.int64)
float32 = DType("float32", np.float32)
float64 = DType("float64", np.float64)
#: Handles to stateful objects (Variables, gradient stacks).
resource = DType("resource", None)
#: The value type of a TensorArray (an immutable list of equally shaped tensors).
tensor_array = DType("tensor_array", None)

ALL: dict[str, DType] = {d.name: d for d in (bool_, int32, int64, float32, float64, resource, tensor_array)}


def as_dtype(x: Any) -> DType:
    """Converts a DType, a dtype name, a numpy dtype or a Python type to a DType. ``None`` is refused:
    numpy reads it as float64, so ``tn.placeholder(None, [])`` and ``tn.cast(x, None)`` made float64
    tensors, silently (a caller whose dtype may be left out tests for None before it calls this)."""
    if isinstance(x, DType):
        return x
    if x is None:
        raise ArgumentError("a dtype is needed here, got None (write tn.float32, 'int32', np.int64 ...)")
    if isinstance(x, str):
        if x in ALL:
            return ALL[x]
        raise ArgumentError(f"unknown dtype name {x!r}; expected one of {sorted(ALL)}")
    if x is bool:
        return bool_
    if x is int:
        return int32
    if x is float:
        return float32
    try:
        npd = np.dtype(x)
    except (TypeError, ValueError):  # numpy's words for an object that is no dtype (a Tensor, a list...)
        raise ArgumentError(f"cannot interpret {x!r} as a Turnout dtype "
                            "(write tn.float32, 'int32', np.int64 ...)") from None
    for d in ALL.values():
        if d.numpy is not None and np.dtype(d.numpy) == npd:
            return d
    raise ArgumentError(f"numpy dtype {npd} has no Turnout counterpart "
                        "(supported: bool, int32, int64, float32, float64)")


def infer_from_python(value: Any) -> DType:
    """The dtype a constant gets: Python bool -> bool, int -> int32, float -> float32, arrays keep theirs
    (float64 arrays stay float64; int64 arrays stay int64)."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.ndarray):
        return as_dtype(value.dtype) if isinstance(value, np.integer) else int32
    if isinstance(value, (float, np.floating)) and not isinstance(value, np.ndarray):
        return as_dtype(value.dtype) if isinstance(value, np.floating) else float32
    arr = np.asarray(value)
    if arr.dtype == np.float64 and not isinstance(value, np.ndarray):
        return float32  # nested Python lists of floats
    if arr.dtype == np.int64 and not isinstance(value, np.ndarray):
        return int32
    return as_dtype(arr.dtype)


# ---- kind and range checks for values entering a graph ------------------------------------------
#: numpy kinds with no Turnout dtype: strings, bytes, complex, datetimes, timedeltas, objects, records.
_FOREIGN_KINDS = {"U": "a string", "S": "a bytes string", "a": "a bytes string", "c": "a complex number",
                  "M": "a datetime", "m": "a timedelta", "O": "a Python object", "V": "a raw record"}


def describe_kind(arr: np.ndarray) -> str:
    """What a value with no Turnout counterpart is, in words ('a string', 'a complex number', ...)."""
    return _FOREIGN_KINDS.get(arr.dtype.kind, f"a {arr.dtype} value")


def as_checked_array(value: Any, d: DType, what: str) -> np.ndarray:
    """``value`` as a numpy array of dtype ``d``, or ``ValueError`` naming ``what`` (an argument or a
    tensor) when the conversion would change the value.

    Why one function: constants, Python scalars in operators, feeds and attributes all enter the
    graph through it, so ``2**40`` is refused as an int32 wherever it is written instead of wrapping
    to 0 in one place and not in another. The rules: strings, complex numbers, datetimes and other
    objects are refused (a numeric string is text, not a number); bool values feed only bool tensors
    and bool tensors take only bool values; integers must lie in the target's range; floats become
    integers only when they are whole numbers in range; a finite float must stay finite when narrowed
    to float32.
    """
    if d.is_opaque:
        raise ValueError(f"{what}: cannot make a value of dtype {d.name}")
    if type(value) is np.ndarray:
        arr = value
    elif isinstance(value, np.ndarray):  # a subclass: a masked array's mask no tensor holds; an np.matrix
        if isinstance(value, np.ma.MaskedArray):  # (or other subclass) is taken as its plain array
            raise ValueError(f"{what}: {_short(value)} is a masked array, whose mask a tensor cannot hold; "
                             "fill it first (value.filled(...))")
        arr = np.asarray(value)
    else:
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError, OverflowError) as e:
            raise ValueError(f"{what}: cannot convert {_short(value)} to a tensor ({e})") from None
    kind = arr.dtype.kind
    if kind in _FOREIGN_KINDS:
        if kind == "O" and arr.size and all(isinstance(v, int) and not isinstance(v, bool) for v in arr.flat):
            raise ValueError(f"{what}: integer {_short(value)} does not fit in {d.name} "
                             f"[{np.iinfo(np.int64).min}, {np.iinfo(np.int64).max}]")
        raise ValueError(f"{what}: {_short(value)} is {describe_kind(arr)}, which has no Turnout dtype "
                         "(supported: bool, int32, int64, float32, float64)")
    if d.is_bool != (kind == "b"):
        got = "a bool" if kind == "b" else f"a {arr.dtype} (numeric)"
        raise ValueError(f"{what}: {got} value for a {d.name} tensor; convert it explicitly (tn.cast)")
    if d.is_integer:
        info = np.iinfo(d.numpy)
        if kind == "f":
            with np.errstate(all="ignore"):
                whole = np.isfinite(arr) & (np.trunc(arr) == arr)
            if not np.all(whole):
                raise ValueError(f"{what}: {_short(value)} is not a whole number, so it is not a {d.name}; "
                                 "cast it explicitly (tn.cast)")
            lo, hi = (arr.min(), arr.max()) if arr.size else (0, 0)
            if lo < info.min or hi >= -float(info.min):
                raise ValueError(f"{what}: {_short(value)} does not fit in {d.name} [{info.min}, {info.max}]")
        elif kind in "iu" and arr.size:
            lo, hi = int(arr.min()), int(arr.max())
            if lo < info.min or hi > info.max:
                raise ValueError(f"{what}: integer {lo if lo < info.min else hi} does not fit in {d.name} "
                                 f"[{info.min}, {info.max}]")
    elif d.name == "float32" and kind == "f" and arr.dtype.itemsize > 4 and arr.size:
        with np.errstate(all="ignore"):
            finite = np.isfinite(arr)
            if np.any(finite & ~np.isfinite(arr.astype(np.float32))):
                raise ValueError(f"{what}: {_short(value)} overflows float32 (largest {np.finfo(np.float32).max:g})")
    elif d.is_floating and kind in "iu" and arr.size:
        pass  # every int64 has a nearest float; precision loss in big ints is the usual float rounding
    return arr.astype(d.numpy, copy=False)


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."
