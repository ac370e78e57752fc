"""Element types of tensors.

Why a module of its own: every layer (shape inference, numpy kernels, JAX lowering, z3 encodings,
serialization) must agree on one small closed set of dtypes, so they are defined once here and
referred to by name everywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class DType:
    """A tensor element type. ``resource`` and ``tensor_array`` are opaque handle/value types."""

    name: str
    numpy: Any  # numpy dtype, or None for opaque types

    @property
    def is_floating(self) -> bool:
        return self.name in ("float32", "float64")

    @property
    def is_integer(self) -> bool:
        return self.name in ("int32", "int64")

    @property
    def is_bool(self) -> bool:
        return self.name == "bool"

    @property
    def is_numeric(self) -> bool:
        return self.is_floating or self.is_integer

    @property
    def is_opaque(self) -> bool:
        return self.numpy is None

    @property
    def itemsize(self) -> int:
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
    """Converts a DType, a dtype name, a numpy dtype or a Python type to a DType."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        if x in ALL:
            return ALL[x]
        raise TypeError(f"unknown dtype name {x!r}; expected one of {sorted(ALL)}")
    if x is bool:
        return bool_
    if x is int:
        return int32
    if x is float:
        return float32
    try:
        npd = np.dtype(x)
    except TypeError as e:
        raise TypeError(f"cannot interpret {x!r} as a Turnout dtype") from e
    for d in ALL.values():
        if d.numpy is not None and np.dtype(d.numpy) == npd:
            return d
    raise TypeError(f"numpy dtype {npd} has no Turnout counterpart (supported: bool, int32, int64, float32, float64)")


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
