"""Op constructors: the user-facing functions that add compute ops to the default graph.

Each constructor converts its arguments to tensors, creates one node (shape and dtype are inferred by
``turnout.shape_rules``) and returns its output tensor(s). Python scalars combined with a tensor take
that tensor's dtype, as in TensorFlow, so ``x * 2`` works for float and int ``x`` alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout import shapes as sh
from turnout.errors import GraphBuildError
from turnout.graph import Graph, Node, Tensor, TensorSpec, get_default_graph


def _graph_of(*xs: Any) -> Graph:
    for x in xs:
        if isinstance(x, Tensor):
            return x.graph
        if hasattr(x, "_graph"):
            return x._graph
        if isinstance(x, (list, tuple)):
            for y in x:
                if isinstance(y, Tensor):
                    return y.graph
    return get_default_graph()


def constant(value: Any, dtype: Any = None, name: Optional[str] = None) -> Tensor:
    """A constant tensor. Python floats become float32 and ints int32 unless ``dtype`` says otherwise."""
    d = dt.as_dtype(dtype) if dtype is not None else dt.infer_from_python(value)
    if d.is_opaque:
        raise GraphBuildError(f"cannot make a constant of dtype {d.name}")
    arr = np.asarray(value)
    if arr.dtype == object:
        raise GraphBuildError(f"constant: cannot convert {value!r} to a tensor")
    cast = arr.astype(d.numpy)
    if d.is_integer and arr.dtype.kind == "f" and not np.all(cast == arr):
        raise GraphBuildError(f"constant: {value!r} is not exactly representable as {d.name}")
    g = get_default_graph()
    return g.create_node("Const", (), {"value": cast, "dtype": d.name}, name=name or "Const").outputs[0]


def convert_to_tensor(x: Any, dtype: Any = None, name: Optional[str] = None) -> Tensor:
    """Tensors pass through (dtype checked); Variables are read; anything else becomes a constant."""
    if isinstance(x, Tensor):
        if dtype is not None and x.dtype != dt.as_dtype(dtype):
            raise GraphBuildError(f"expected a {dt.as_dtype(dtype).name} tensor, got {x.name} of {x.dtype.name}")
        return x
    if hasattr(x, "_as_tensor"):
        return x._as_tensor()
    return constant(x, dtype=dtype, name=name)


def _pair(a: Any, b: Any) -> tuple[Tensor, Tensor]:
    """Convert two operands, letting a Python scalar take the dtype of the tensor operand."""
    ta = a if isinstance(a, Tensor) else (a._as_tensor() if hasattr(a, "_as_tensor") else None)
    tb = b if isinstance(b, Tensor) else (b._as_tensor() if hasattr(b, "_as_tensor") else None)
    if ta is None and tb is None:
        ta = convert_to_tensor(a)
    if ta is None:
        assert tb is not None
        ta = constant(a, dtype=tb.dtype if not tb.dtype.is_opaque else None)
    if tb is None:
        tb = constant(b, dtype=ta.dtype if not ta.dtype.is_opaque else None)
    return ta, tb


def _op1(op: str, x: Any, name: Optional[str] = None, **attrs: Any) -> Tensor:
    x = convert_to_tensor(x)
    return x.graph.create_node(op, [x], attrs, name=name).outputs[0]


def _op2(op: str, a: Any, b: Any, name: Optional[str] = None, **attrs: Any) -> Tensor:
    a, b = _pair(a, b)
    return a.graph.create_node(op, [a, b], attrs, name=name).outputs[0]


def identity(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("Identity", x, name)


def add(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    return _op2("Add", a, b, name)


def subtract(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    return _op2("Sub", a, b, name)


def multiply(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    return _op2("Mul", a, b, name)


def divide(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise division; on integers it is floor division."""
    return _op2("Div", a, b, name)


def mod(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Floor modulo (the sign follows the divisor, as Python's ``%``)."""
    return _op2("FloorMod", a, b, name)


def pow(a: Any, b: Any, name: Optional[str] = None) -> Tensor:  # noqa: A001
    return _op2("Pow", a, b, name)


def maximum(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    return _op2("Maximum", a, b, name)


def minimum(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    return _op2("Minimum", a, b, name)


def negative(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("Neg", x, name)


def tanh(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("Tanh", x, name)


def sigmoid(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("Sigmoid", x, name)


def exp(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("Exp", x, name)


def log(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("Log", x, name)


def sqrt(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("Sqrt", x, name)


def square(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("Square", x, name)


def abs(x: Any, name: Optional[str] = None) -> Tensor:  # noqa: A001
    return _op1("Abs", x, name)


def sign(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("Sign", x, name)


def relu(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("Relu", x, name)


def less(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    return _op2("Less", a, b, name)


def less_equal(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    return _op2("LessEqual", a, b, name)


def greater(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    return _op2("Greater", a, b, name)


def greater_equal(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    return _op2("GreaterEqual", a, b, name)


def equal(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    return _op2("Equal", a, b, name)


def not_equal(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    return _op2("NotEqual", a, b, name)


def logical_and(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    return _op2("LogicalAnd", a, b, name)


def logical_or(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    return _op2("LogicalOr", a, b, name)


def logical_not(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("LogicalNot", x, name)


def where(cond: Any, x: Any, y: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise select: ``x`` where ``cond`` else ``y`` (both computed; no control flow)."""
    x, y = _pair(x, y)
    c = convert_to_tensor(cond)
    return x.graph.create_node("Select", [c, x, y], name=name).outputs[0]


select = where


def cast(x: Any, dtype: Any, name: Optional[str] = None) -> Tensor:
    return _op1("Cast", x, name, dtype=dt.as_dtype(dtype).name)


def stop_gradient(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("StopGradient", x, name)


def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False, name: Optional[str] = None) -> Tensor:
    return _op2("MatMul", a, b, name, transpose_a=bool(transpose_a), transpose_b=bool(transpose_b))


def reshape(x: Any, shape: Sequence[int], name: Optional[str] = None) -> Tensor:
    return _op1("Reshape", x, name, shape=[int(d) for d in shape])


def transpose(x: Any, perm: Optional[Sequence[int]] = None, name: Optional[str] = None) -> Tensor:
    return _op1("Transpose", x, name, perm=None if perm is None else [int(p) for p in perm])


def expand_dims(x: Any, axis: int, name: Optional[str] = None) -> Tensor:
    return _op1("ExpandDims", x, name, axis=int(axis))


def concat(values: Sequence[Any], axis: int, name: Optional[str] = None) -> Tensor:
    if not values:
        raise GraphBuildError("concat: needs at least one tensor")
    ts = [convert_to_tensor(v) for v in values]
    return ts[0].graph.create_node("Concat", ts, {"axis": int(axis)}, name=name).outputs[0]


def stack(values: Sequence[Any], name: Optional[str] = None) -> Tensor:
    """Stack equally shaped tensors along a new leading axis."""
    if not values:
        raise GraphBuildError("stack: needs at least one tensor")
    ts = [convert_to_tensor(v) for v in values]
    return ts[0].graph.create_node("Pack", ts, name=name).outputs[0]


def _index_entry(e: Any, dyn: list[Tensor]) -> Any:
    if e is None or isinstance(e, (int, np.integer)) and not isinstance(e, bool):
        return None if e is None else int(e)
    t = convert_to_tensor(e)
    if not t.dtype.is_integer or (t.shape is not None and t.shape != ()):
        raise GraphBuildError(f"indices must be Python ints or integer scalar tensors, got {t!r}")
    dyn.append(t)
    return {"input": len(dyn) - 1}


def getitem(x: Any, key: Any, name: Optional[str] = None) -> Tensor:
    """Basic indexing ``x[i]``, ``x[i:j:k]`` and tuples of them, with ints or int32 scalar tensors."""
    x = convert_to_tensor(x)
    keys = key if isinstance(key, tuple) else (key,)
    spec: list[dict[str, Any]] = []
    dyn: list[Tensor] = []
    for k in keys:
        if isinstance(k, slice):
            if isinstance(k.step, Tensor):
                raise GraphBuildError("slice steps must be Python ints")
            if k.step == 0:
                raise GraphBuildError("slice step cannot be zero")
            spec.append({"kind": "slice", "start": _index_entry(k.start, dyn), "stop": _index_entry(k.stop, dyn),
                         "step": k.step})
        elif k is Ellipsis or k is None:
            raise GraphBuildError("indexing with ... or None is not supported; use reshape/expand_dims")
        else:
            v = _index_entry(k, dyn)
            if v is None:
                raise GraphBuildError("invalid index None")
            spec.append({"kind": "index", "value": v})
    return x.graph.create_node("GetItem", [x, *dyn], {"spec": spec}, name=name).outputs[0]


def gather(x: Any, indices: Any, axis: int = 0, name: Optional[str] = None) -> Tensor:
    x = convert_to_tensor(x)
    idx = convert_to_tensor(indices)
    return x.graph.create_node("Gather", [x, idx], {"axis": int(axis)}, name=name).outputs[0]


def tile(x: Any, multiples: Sequence[int], name: Optional[str] = None) -> Tensor:
    return _op1("Tile", x, name, multiples=[int(m) for m in multiples])


def _axis_attr(axis: Any) -> Any:
    if axis is None:
        return None
    if isinstance(axis, (list, tuple)):
        return [int(a) for a in axis]
    return int(axis)


def reduce_sum(x: Any, axis: Any = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    return _op1("Sum", x, name, axis=_axis_attr(axis), keepdims=bool(keepdims))


def reduce_mean(x: Any, axis: Any = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    return _op1("Mean", x, name, axis=_axis_attr(axis), keepdims=bool(keepdims))


def reduce_max(x: Any, axis: Any = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    return _op1("Max", x, name, axis=_axis_attr(axis), keepdims=bool(keepdims))


def zeros_like(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("ZerosLike", x, name)


def ones_like(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("OnesLike", x, name)


def zeros(shape: Sequence[int], dtype: Any = dt.float32, name: Optional[str] = None) -> Tensor:
    return constant(np.zeros(tuple(shape), dt.as_dtype(dtype).numpy), dtype=dtype, name=name)


def ones(shape: Sequence[int], dtype: Any = dt.float32, name: Optional[str] = None) -> Tensor:
    return constant(np.ones(tuple(shape), dt.as_dtype(dtype).numpy), dtype=dtype, name=name)


def fill(shape: Any, value: Any, name: Optional[str] = None) -> Tensor:
    s = convert_to_tensor(shape, dtype=dt.int32)
    v = convert_to_tensor(value)
    known = _constant_vector(s)
    specs = None
    if known is not None and v.shape == () and s.dtype == dt.int32:
        # A constant shape gives a static shape (the shape rule sees only specs): gradients and the
        # fast backend then need no run-time Shape of the result, even inside loops.
        specs = [TensorSpec(v.dtype, known)]
    return s.graph.create_node("Fill", [s, v], name=name, specs=specs).outputs[0]


def _constant_vector(t: Tensor) -> Optional[tuple[int, ...]]:
    """The value of an int vector that is a Const (possibly entered into a loop), else None."""
    n = t.node
    while n.op == "Enter" and n.attrs.get("is_constant"):
        n = n.inputs[0].node
    if n.op != "Const":
        return None
    a = np.asarray(n.attrs["value"])
    if a.ndim != 1 or (a.size and a.min() < 0):
        return None
    return tuple(int(d) for d in a)


def shape(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("Shape", x, name)


def size(x: Any, name: Optional[str] = None) -> Tensor:
    return _op1("Size", x, name)


def broadcast_like(x: Any, like: Any, name: Optional[str] = None) -> Tensor:
    return _op2("BroadcastLike", x, like, name)


def sum_to_like(x: Any, like: Any, name: Optional[str] = None) -> Tensor:
    return _op2("SumToLike", x, like, name)


def no_op(name: Optional[str] = None) -> Node:
    return get_default_graph().create_node("NoOp", (), name=name)


def group(*inputs: Any, name: Optional[str] = None) -> Node:
    """A NoOp that runs after all ``inputs`` (tensors or nodes): use it as one control dependency."""
    flat: list[Any] = []
    for i in inputs:
        flat.extend(i if isinstance(i, (list, tuple)) else [i])
    g = _graph_of(*flat)
    with g.control_dependencies(flat):
        return g.create_node("NoOp", (), name=name or "group")


def control_dependencies(deps: Optional[Sequence[Any]]) -> Any:
    """``with tn.control_dependencies([a, b]):`` ops created inside run after ``a`` and ``b``."""
    return _graph_of(*(deps or [])).control_dependencies(deps)


def placeholder(dtype: Any, shape: Any = None, name: Optional[str] = None) -> Tensor:
    """A value fed at run time through ``feed_dict``."""
    d = dt.as_dtype(dtype)
    return get_default_graph().create_node(
        "Placeholder", (), {"dtype": d.name, "shape": None if shape is None else list(sh.as_shape(shape) or ())},
        name=name or "Placeholder",
    ).outputs[0]


# ---- operator overloading on Tensor ---------------------------------------------------------------
def _install_operators() -> None:
    def rev(f: Any) -> Any:
        return lambda self, other: f(other, self)

    ops = {
        "__add__": add, "__radd__": rev(add),
        "__sub__": subtract, "__rsub__": rev(subtract),
        "__mul__": multiply, "__rmul__": rev(multiply),
        "__truediv__": divide, "__rtruediv__": rev(divide),
        "__floordiv__": divide, "__rfloordiv__": rev(divide),
        "__mod__": mod, "__rmod__": rev(mod),
        "__pow__": pow, "__rpow__": rev(pow),
        "__matmul__": matmul, "__rmatmul__": rev(matmul),
        "__lt__": less, "__le__": less_equal, "__gt__": greater, "__ge__": greater_equal,
        "__and__": logical_and, "__rand__": rev(logical_and),
        "__or__": logical_or, "__ror__": rev(logical_or),
        "__neg__": lambda self: negative(self),
        "__abs__": lambda self: abs(self),
        "__invert__": lambda self: logical_not(self),
        "__getitem__": lambda self, key: getitem(self, key),
    }
    for k, f in ops.items():
        setattr(Tensor, k, f)


_install_operators()
