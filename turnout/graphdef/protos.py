"""TensorFlow's protocol buffers, from the optional ``tf`` extra, and conversions to plain Python.

Why a module of its own: Turnout never depends on TensorFlow. The GraphDef, NodeDef, TensorProto and
Event messages come from a maintained package that ships TensorFlow's ``.proto`` files compiled for
Python (TensorBoard's ``tensorboard.compat.proto``); ``pip install turnout[tf]`` installs it. Only
this module imports it, on first use, so ``import turnout`` stays numpy-only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout.errors import GraphBuildError, UnsupportedError

# TensorFlow DataType enum values (tensorflow/core/framework/types.proto); the *_REF forms add 100.
TF_TO_DTYPE: dict[int, dt.DType] = {
    1: dt.float32, 2: dt.float64, 3: dt.int32, 9: dt.int64, 10: dt.bool_, 20: dt.resource,
}
DTYPE_TO_TF: dict[str, int] = {d.name: e for e, d in TF_TO_DTYPE.items()}
DT_VARIANT = 21
#: TensorFlow's DataType enum of ``resource``
DT_RESOURCE = 20
DT_UINT64 = 23
DT_STRING = 7
TF_TYPE_NAMES = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string",
                 9: "int64", 10: "bool", 14: "bfloat16", 17: "uint16", 19: "float16", 20: "resource", 21: "variant"}
#: the narrow integer DataTypes Turnout has no dtype of, with the range of their values: an input
#: placeholder of one of them (a uint8 image, an Atari frame) is fed as int32, where only casts read it
NARROW_INTS = {4: (0, 255), 5: (-2**15, 2**15 - 1), 6: (-128, 127), 17: (0, 2**16 - 1)}


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


def base_type(enum: int) -> int:
    """A TensorFlow DataType enum with its reference form (``*_REF``, the base plus 100) taken as the base."""
    return enum - 100 if enum > 100 else enum


def type_name(enum: int) -> str:
    """A TensorFlow DataType enum's name (``float32``; a reference type ``float32_ref``, as TensorFlow
    names it), or ``enum N`` for one Turnout does not name."""
    base = base_type(enum)
    name = TF_TYPE_NAMES.get(base)
    return f"enum {enum}" if name is None else name + ("_ref" if base != enum else "")


def tf_dtype(enum: int, where: str) -> dt.DType:
    """The Turnout dtype of a TensorFlow DataType enum (reference types count as their base type)."""
    base = base_type(enum)
    try:
        return TF_TO_DTYPE[base]
    except KeyError:
        name = type_name(base)
        raise UnsupportedError(f"{where}: TensorFlow dtype {name} has no Turnout counterpart "
                               "(supported: float32, float64, int32, int64, bool, resource)") from None


def shape_of(proto: Any) -> list[int | None] | None:
    """A TensorShapeProto as a list (None for an unknown dimension), or None for an unknown rank."""
    if proto.unknown_rank:
        return None
    bad = [int(d.size) for d in proto.dim if d.size < -1]
    if bad:  # (TensorFlow's TensorShapeProto: a size, or -1 for unknown)
        raise GraphBuildError(f"a shape has dimension {bad[0]}; a dimension is a size, or -1 for unknown")
    return [None if d.size < 0 else int(d.size) for d in proto.dim]


#: the typed field a TensorProto of each dtype lists its values in
_VAL_FIELDS = {"float32": "float_val", "float64": "double_val", "int32": "int_val", "int64": "int64_val",
               "bool": "bool_val"}


def tensor_to_numpy(t: Any, where: str) -> np.ndarray:
    """A TensorProto's value: from ``tensor_content`` bytes, or from the typed repeated field (one
    value broadcast to the whole shape, as TensorFlow writes splat constants).

    Every size is checked before an array is made, as TensorFlow's ``Tensor::FromProto`` checks it: a
    shape of unknown rank or with a negative dimension, ``tensor_content`` that is not exactly the
    shape's bytes, more values than the shape holds, or bool bytes other than 0 and 1 are a
    ``GraphBuildError`` naming the node; a shape numpy cannot index (``shapes.too_large_to_index``) is
    one too, and a splat over the allocation guard (``turnout.limits``, ``max_tensor_bytes``) a
    ``ResourceExhaustedError``, before anything is allocated."""
    from turnout.limits import check_allocation
    from turnout.shapes import too_large_to_index

    d = tf_dtype(t.dtype, where)
    if d.name not in _VAL_FIELDS:
        raise UnsupportedError(f"{where}: a constant tensor of dtype {d.name} (a handle has no value to import)")
    if t.tensor_shape.unknown_rank:
        raise GraphBuildError(f"{where}: its tensor has a shape of unknown rank")
    shape = [int(x.size) for x in t.tensor_shape.dim]
    if any(n < 0 for n in shape):
        raise GraphBuildError(f"{where}: its tensor has a negative dimension in shape {shape}")
    npd = np.dtype(d.numpy)
    why = too_large_to_index(shape, npd.itemsize)
    if why is not None:
        raise GraphBuildError(f"{where}: its tensor's shape {shape} cannot be made: {why}")
    n = math.prod(shape)
    if t.tensor_content:
        if len(t.tensor_content) != n * npd.itemsize:
            raise GraphBuildError(f"{where}: tensor_content holds {len(t.tensor_content)} bytes, but "
                                  f"{d.name}{shape} is {n * npd.itemsize}")
        arr = np.frombuffer(t.tensor_content, dtype=npd.newbyteorder("<"))
        if d.name == "bool" and not np.isin(arr.view(np.uint8), (0, 1)).all():
            raise GraphBuildError(f"{where}: tensor_content holds bool bytes other than 0 and 1")
        return arr.astype(npd).reshape(shape)
    vals = getattr(t, _VAL_FIELDS[d.name])
    if len(vals) > n:
        raise GraphBuildError(f"{where}: its tensor lists {len(vals)} values for shape {shape}, which holds {n}")
    check_allocation(where, shape, npd.itemsize)
    if len(vals) == n:
        return np.asarray(list(vals), dtype=npd).reshape(shape)
    arr = np.full(n, vals[-1] if len(vals) else 0, dtype=npd)  # no values: zeros, as TensorFlow reads it
    arr[: len(vals)] = list(vals)
    return arr.reshape(shape)


def numpy_to_tensor(value: Any, tensor: Any) -> None:
    """Fill a TensorProto from a numpy value (little-endian ``tensor_content``, as TensorFlow writes);
    a uint64 array (a stateless random op's key) is written as TensorFlow's uint64."""
    arr = np.asarray(value)
    if arr.dtype == np.uint64:
        tensor.dtype = DT_UINT64
        for n in arr.shape:
            tensor.tensor_shape.dim.add().size = int(n)
        tensor.tensor_content = arr.astype("<u8").tobytes()
        return
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
