"""TensorFlow's protocol buffers, from the optional ``tf`` extra, and conversions to plain Python.

Why a module of its own: Turnout never depends on TensorFlow. The GraphDef, NodeDef, TensorProto and
Event messages come from a maintained package that ships TensorFlow's ``.proto`` files compiled for
Python (TensorBoard's ``tensorboard.compat.proto``); ``pip install turnout[tf]`` installs it. Only
this module imports it, on first use, so ``import turnout`` stays numpy-only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout.errors import UnsupportedError

# TensorFlow DataType enum values (tensorflow/core/framework/types.proto); the *_REF forms add 100.
TF_TO_DTYPE: dict[int, dt.DType] = {
    1: dt.float32, 2: dt.float64, 3: dt.int32, 9: dt.int64, 10: dt.bool_, 20: dt.resource,
}
DTYPE_TO_TF: dict[str, int] = {d.name: e for e, d in TF_TO_DTYPE.items()}
DT_VARIANT = 21
DT_STRING = 7
TF_TYPE_NAMES = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string",
                 9: "int64", 10: "bool", 14: "bfloat16", 19: "float16", 20: "resource", 21: "variant"}


def pb() -> Any:
    """The proto modules (graph_pb2, node_def_pb2, ...), or a clear error naming the extra to install."""
    try:
        from tensorboard.compat.proto import (  # type: ignore[import-not-found, unused-ignore]
            attr_value_pb2,
            event_pb2,
            graph_pb2,
            node_def_pb2,
            summary_pb2,
            tensor_pb2,
            tensor_shape_pb2,
            types_pb2,
            versions_pb2,
        )
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise UnsupportedError(
            "GraphDef import/export needs TensorFlow's protobuf definitions: pip install 'turnout[tf]' "
            f"(it installs the tensorboard package; TensorFlow itself is not needed) [{e}]"
        ) from None

    class _P:
        pass

    p = _P()
    for m in (attr_value_pb2, event_pb2, graph_pb2, node_def_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2,
              types_pb2, versions_pb2):
        setattr(p, m.__name__.rsplit(".", 1)[-1], m)
    return p


def tf_dtype(enum: int, where: str) -> dt.DType:
    """The Turnout dtype of a TensorFlow DataType enum (reference types count as their base type)."""
    base = enum - 100 if enum > 100 else enum
    try:
        return TF_TO_DTYPE[base]
    except KeyError:
        name = TF_TYPE_NAMES.get(base, f"enum {base}")
        raise UnsupportedError(f"{where}: TensorFlow dtype {name} has no Turnout counterpart "
                               "(supported: float32, float64, int32, int64, bool, resource)") from None


def shape_of(proto: Any) -> list[int | None] | None:
    """A TensorShapeProto as a list (None for an unknown dimension), or None for an unknown rank."""
    if proto.unknown_rank:
        return None
    return [None if d.size < 0 else int(d.size) for d in proto.dim]


_VAL_FIELDS = {1: "float_val", 2: "double_val", 3: "int_val", 9: "int64_val", 10: "bool_val"}


def tensor_to_numpy(t: Any, where: str) -> np.ndarray:
    """A TensorProto's value: from ``tensor_content`` bytes, or from the typed repeated field (one
    value broadcast to the whole shape, as TensorFlow writes splat constants)."""
    d = tf_dtype(t.dtype, where)
    shape = [int(x.size) for x in t.tensor_shape.dim]
    npd = np.dtype(d.numpy)
    if t.tensor_content:
        return np.frombuffer(t.tensor_content, dtype=npd.newbyteorder("<")).astype(npd).reshape(shape)
    vals = list(getattr(t, _VAL_FIELDS[t.dtype]))
    n = int(np.prod(shape)) if shape else 1
    if not vals:
        return np.zeros(shape, dtype=npd)
    if len(vals) == n:
        return np.asarray(vals, dtype=npd).reshape(shape)
    arr = np.full(n, vals[-1], dtype=npd)
    arr[: len(vals)] = vals
    return arr.reshape(shape)


def numpy_to_tensor(value: Any, tensor: Any) -> None:
    """Fill a TensorProto from a numpy value (little-endian ``tensor_content``, as TensorFlow writes)."""
    arr = np.asarray(value)
    d = dt.as_dtype(arr.dtype)
    tensor.dtype = DTYPE_TO_TF[d.name]
    for n in arr.shape:
        tensor.tensor_shape.dim.add().size = int(n)
    tensor.tensor_content = arr.astype(np.dtype(d.numpy).newbyteorder("<")).tobytes()


def attr(node: Any, key: str, default: Any = None) -> Any:
    """A NodeDef attribute as a Python value (type enums stay ints; shapes become lists)."""
    if key not in node.attr:
        return default
    a = node.attr[key]
    kind = a.WhichOneof("value")
    if kind == "list":
        lst = a.list
        for f in ("i", "f", "b", "s", "type"):
            if len(getattr(lst, f)):
                vals = list(getattr(lst, f))
                return [v.decode() for v in vals] if f == "s" else vals
        if len(lst.shape):
            return [shape_of(s) for s in lst.shape]
        return []
    if kind == "s":
        return a.s.decode()
    if kind == "shape":
        return shape_of(a.shape)
    if kind == "tensor":
        return a.tensor
    if kind is None:
        return default
    return getattr(a, kind)
