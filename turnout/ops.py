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
from turnout.arguments import checked
from turnout.composite import GraphMaker, basic_index, getitem_spec, index_with_new_axes
from turnout.errors import GraphBuildError, ResourceExhaustedError, ShapeError
from turnout.graph import Graph, Node, Tensor, TensorSpec, get_default_graph, user_source_line
from turnout.limits import check_allocation


def bad_value(message: str) -> GraphBuildError:
    """A GraphBuildError for a value that cannot enter the graph, with the user's source line."""
    where = user_source_line()
    return GraphBuildError(f"{message} (at {where})" if where else message)


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


@checked
def constant(value: Any, dtype: Any = None, name: Optional[str] = None) -> Tensor:
    """A constant tensor. Python floats become float32 and ints int32 unless ``dtype`` says otherwise.

    The value is kind- and range-checked (``dtypes.as_checked_array``): ``constant(2**40)`` is a
    GraphBuildError, not 0, and a string or complex value is refused rather than converted."""
    d, cast = checked_constant_value(value, dtype, f"constant {name!r}" if name else "constant")
    g = get_default_graph()
    return g.create_node("Const", (), {"value": cast, "dtype": d.name}, name=name or "Const").outputs[0]


def checked_constant_value(value: Any, dtype: Any, what: str) -> tuple[dt.DType, np.ndarray]:
    """The dtype and array of a constant value (a ``constant``, a Variable's initial value), kind- and
    range-checked by ``dtypes.as_checked_array``; a GraphBuildError naming ``what`` otherwise."""
    try:
        d = dt.as_dtype(dtype) if dtype is not None else _infer(value, what)
    except TypeError as e:
        raise bad_value(f"{what}: {e}") from None
    if d.is_opaque:
        raise bad_value(f"{what}: cannot make a constant of dtype {d.name}")
    try:
        return d, dt.as_checked_array(value, d, what)
    except ValueError as e:
        hint = ("; pass dtype=tn.int64 for a larger integer" if d == dt.int32 and dtype is None
                and "does not fit" in str(e) else "")
        raise bad_value(f"{e}{hint}") from None


def _infer(value: Any, what: str) -> dt.DType:
    """``dtypes.infer_from_python``, with values of no Turnout dtype reported as a GraphBuildError."""
    try:
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    except (ValueError, TypeError, OverflowError) as e:
        raise bad_value(f"{what}: cannot convert {value!r:.60} to a tensor ({e})") from None
    if arr.dtype.kind in "OUSacMmV" or arr.dtype.kind == "u" and arr.dtype.itemsize >= 8:
        try:
            dt.as_checked_array(value, dt.int64 if arr.dtype.kind in "uO" else dt.float32, what)
        except ValueError as e:
            raise bad_value(str(e)) from None
    try:
        return dt.infer_from_python(value)
    except TypeError as e:
        raise bad_value(f"{what}: {e}") from None


def checked_scalar(value: Any, like: Tensor, op: str) -> Tensor:
    """A Python scalar combined with tensor ``like`` in op ``op``: a constant of ``like``'s dtype,
    checked to hold the same value (``x + 2**40`` on an int32 ``x`` is an error, not ``x``)."""
    try:
        arr = dt.as_checked_array(value, like.dtype, f"{op}: operand {value!r:.60} combined with {like.name}")
    except ValueError as e:
        raise bad_value(str(e)) from None
    return constant(arr, dtype=like.dtype)


def int_attr(value: Any, op: str, argument: str) -> int:
    """An integer attribute (an axis, a dim, a multiple). Floats and bools are refused rather than
    truncated: ``reshape(x, [2.9])`` is a GraphBuildError naming the op and the argument."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        if isinstance(value, Tensor):
            raise bad_value(f"{op}: {argument} must be a Python int (a static attribute), got tensor {value.name}")
        raise bad_value(f"{op}: {argument} must be an int, got {value!r:.60} ({type(value).__name__})")
    v = int(value)
    if not -(2**63) <= v < 2**63:
        raise bad_value(f"{op}: {argument} {v} is out of the int64 range")
    return v


def int_list_attr(values: Any, op: str, argument: str) -> list[int]:
    """A list of integer attributes (a shape, a permutation, multiples), each checked by ``int_attr``."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, np.ndarray)):
        if isinstance(values, Tensor):
            raise bad_value(f"{op}: {argument} must be a list of Python ints, got tensor {values.name}")
        raise bad_value(f"{op}: {argument} must be a list of ints, got {values!r:.60}")
    return [int_attr(v, op, f"{argument}[{i}]") for i, v in enumerate(values)]


@checked
def convert_to_tensor(x: Any, dtype: Any = None, name: Optional[str] = None) -> Tensor:
    """Tensors pass through (dtype checked); Variables are read; a list or tuple that holds tensors is
    packed (``_autopack``); anything else becomes a constant."""
    if isinstance(x, Tensor):
        if dtype is not None and x.dtype != dt.as_dtype(dtype):
            raise GraphBuildError(f"expected a {dt.as_dtype(dtype).name} tensor, got {x.name} of {x.dtype.name}")
        return x
    if hasattr(x, "_as_tensor"):
        return x._as_tensor()
    if _holds_tensor(x):
        return _autopack(x, dtype, name)
    return constant(x, dtype=dtype, name=name)


def _holds_tensor(x: Any) -> bool:
    """Whether ``x`` is a list or tuple with a tensor (or a Variable) among its entries, at any depth."""
    return isinstance(x, (list, tuple)) and any(
        isinstance(e, Tensor) or hasattr(e, "_as_tensor") or _holds_tensor(e) for e in x)


def _first_tensor(x: Any) -> Tensor:
    for e in x:
        if isinstance(e, Tensor) or hasattr(e, "_as_tensor"):
            return convert_to_tensor(e)
        if _holds_tensor(e):
            return _first_tensor(e)
    raise AssertionError("_first_tensor of a list that holds no tensor")


def _autopack(x: Sequence[Any], dtype: Any, name: Optional[str]) -> Tensor:
    """TensorFlow's autopacking: ``[n, 2]`` where a tensor is due, ``n`` a tensor, is ``stack([n, 2])``
    (``tf.fill([n, 2], v)``, ``tf.gather(x, [i, j])``, ``tf.reduce_sum([a, b])``); its Python entries
    take the dtype asked for, else the first tensor's, and nested lists pack inner first. Why: a
    list that held a tensor was numpy's conversion of a tensor, a ``GraphBuildError`` where
    TensorFlow gives a value; a ``Pack`` needs nothing new on any backend, gradient or export."""
    d = dt.as_dtype(dtype) if dtype is not None else _first_tensor(x).dtype
    return stack([convert_to_tensor(e, dtype=d) for e in x], name=name)


def convert_argument(x: Any, builder: str, argument: str, dtype: Any = None) -> Tensor:
    """``convert_to_tensor`` for an argument of a builder: None, a string or a ragged list where a
    tensor is due is a GraphBuildError naming the builder and the argument (``cond "c": output 0 of
    true_fn``), not numpy's message about object arrays."""
    if x is None:
        raise bad_value(f"{builder}: {argument} is None, where a tensor is due")
    try:
        return convert_to_tensor(x, dtype=dtype)
    except (GraphBuildError, TypeError, ValueError) as e:
        if isinstance(e, GraphBuildError) and str(e).startswith(builder):
            raise
        msg = f"{builder}: {argument}: {e}"
        raise (GraphBuildError(msg) if " (at " in str(e) else bad_value(msg)) from None


def _pair(a: Any, b: Any, op: str = "operator") -> tuple[Tensor, Tensor]:
    """Convert two operands, letting a Python scalar take the dtype of the tensor operand."""
    ta = a if isinstance(a, Tensor) else (a._as_tensor() if hasattr(a, "_as_tensor") else None)
    tb = b if isinstance(b, Tensor) else (b._as_tensor() if hasattr(b, "_as_tensor") else None)
    if ta is None and _holds_tensor(a):  # a list that holds tensors packs to a tensor of its own dtype
        ta = convert_to_tensor(a)
    if tb is None and _holds_tensor(b):
        tb = convert_to_tensor(b)
    if ta is None and tb is None:
        ta = convert_to_tensor(a)
    if ta is None:
        assert tb is not None
        ta = checked_scalar(a, tb, op) if not tb.dtype.is_opaque else constant(a)
    if tb is None:
        tb = checked_scalar(b, ta, op) if not ta.dtype.is_opaque else constant(b)
    return ta, tb


def _op1(op: str, x: Any, name: Optional[str] = None, **attrs: Any) -> Tensor:
    x = convert_to_tensor(x)
    return x.graph.create_node(op, [x], attrs, name=name).outputs[0]


def _op2(op: str, a: Any, b: Any, name: Optional[str] = None, **attrs: Any) -> Tensor:
    a, b = _pair(a, b, op)
    return a.graph.create_node(op, [a, b], attrs, name=name).outputs[0]


@checked
def identity(x: Any, name: Optional[str] = None) -> Tensor:
    """The same value, as a new node (a name to fetch, or a point to hang control edges on)."""
    return _op1("Identity", x, name)


@checked
def sleep(x: Any, seconds: float, name: Optional[str] = None) -> Tensor:
    """``x`` unchanged, after the host waits ``seconds`` when the op runs: a stand-in for a stage that
    waits on I/O, so benchmarks can measure overlap (pipelining across devices) without depending on
    how many CPU cores are free. Its gradient is the identity, without the wait."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 60:
        raise GraphBuildError(f"sleep: seconds must be a number in [0, 60], got {seconds!r}")
    return _op1("Sleep", x, name, seconds=float(seconds))


@checked
def assert_true(condition: Any, value: Any, message: str, data: Sequence[Any] = (), summarize: int = 3,
                name: Optional[str] = None) -> Tensor:
    """``value``, once the bool scalar ``condition`` is true; a ``KernelError`` naming the op, its
    source line and ``message`` when it is false, on every backend, followed by the values of the
    tensors ``data`` as TensorFlow's ``Assert`` shows them (each in brackets, at most ``summarize``
    elements of each, all of them when negative: ``turnout.summarize``).

    Why a value passes through (TensorFlow's ``Assert`` has no output and is waited on by control
    edges): whatever reads the result cannot run before the check, and a check inside a branch or a
    loop body runs exactly when its value is computed (an untaken branch's check is dead and never
    fails). Its gradient passes ``value``'s through."""
    if not isinstance(message, str) or not message:
        raise GraphBuildError(f"assert_true: message must be a non-empty string, got {message!r}")
    if isinstance(summarize, bool) or not isinstance(summarize, int):
        raise GraphBuildError(f"assert_true: summarize must be an int, got {summarize!r}")
    if not isinstance(data, (list, tuple)):
        raise GraphBuildError(f"assert_true: data must be a list of tensors, got {type(data).__name__}")
    c, v = convert_to_tensor(condition), convert_to_tensor(value)
    shown = [convert_to_tensor(d) for d in data]
    attrs: dict[str, Any] = {"message": message}
    if shown:
        attrs.update(shown=[None] * len(shown), summarize=summarize)
    return c.graph.create_node("Assert", [c, v, *shown], attrs, name=name).outputs[0]


@checked
def add(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``a + b`` with numpy broadcasting; a Python scalar takes the other operand's dtype."""
    return _op2("Add", a, b, name)


@checked
def subtract(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``a - b`` with numpy broadcasting."""
    return _op2("Sub", a, b, name)


@checked
def multiply(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``a * b`` with numpy broadcasting."""
    return _op2("Mul", a, b, name)


@checked
def divide(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise division; on integers it is floor division."""
    return _op2("Div", a, b, name)


@checked
def truediv(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Division as Python's ``/`` (``a / b``): integers are divided as float64 (as TensorFlow's
    ``truediv`` and numpy divide them), floats exactly. Why not ``Div`` alone: it floors integers, so
    ``i / n`` of two int32 counters would be 0 for every ``i < n``, a silent wrong answer for a
    program written for TensorFlow or numpy; ``tn.divide`` and ``//`` keep the floor."""
    tensors = [t for t in (a, b) if isinstance(t, Tensor)]  # (a Python number follows the tensor it meets)
    if tensors and all(t.dtype.is_integer for t in tensors):
        a, b = (cast(t, dt.float64) if isinstance(t, Tensor) else convert_to_tensor(t, dt.float64) for t in (a, b))
    return _op2("Div", a, b, name)


@checked
def floordiv(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Division rounded toward minus infinity (``a // b``): ``Div`` on integers, which floors, and the
    ``Floor`` of the quotient on floats, as TensorFlow's ``floordiv`` computes it. Why not ``Div``
    alone: on floats it divides exactly, so ``-7.5 // 2.0`` would be -3.75, not -4."""
    q = _op2("Div", a, b, name)
    return _op1("Floor", q) if q.dtype.is_floating else q


@checked
def mod(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Floor modulo (the sign follows the divisor, as Python's ``%``)."""
    return _op2("FloorMod", a, b, name)


@checked
def pow(a: Any, b: Any, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """Elementwise ``a ** b``."""
    return _op2("Pow", a, b, name)


@checked
def maximum(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise maximum of ``a`` and ``b``."""
    return _op2("Maximum", a, b, name)


@checked
def minimum(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise minimum of ``a`` and ``b``."""
    return _op2("Minimum", a, b, name)


@checked
def negative(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``-x``."""
    return _op1("Neg", x, name)


@checked
def tanh(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise hyperbolic tangent (floating dtypes only; its gradient rule reuses the output)."""
    return _op1("Tanh", x, name)


@checked
def sigmoid(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise logistic function ``1 / (1 + exp(-x))`` (floating dtypes only)."""
    return _op1("Sigmoid", x, name)


@checked
def exp(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``e ** x`` (floating dtypes only)."""
    return _op1("Exp", x, name)


@checked
def log(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise natural logarithm (floating dtypes only)."""
    return _op1("Log", x, name)


@checked
def sqrt(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise square root (floating dtypes only)."""
    return _op1("Sqrt", x, name)


@checked
def square(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``x * x``."""
    return _op1("Square", x, name)


@checked
def abs(x: Any, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """Elementwise absolute value."""
    return _op1("Abs", x, name)


@checked
def sign(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise sign: -1, 0 or 1 (it has no gradient: its derivative is zero wherever defined)."""
    return _op1("Sign", x, name)


@checked
def relu(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``max(x, 0)``."""
    return _op1("Relu", x, name)


@checked
def less(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``a < b`` as a bool tensor (a typical loop or cond predicate)."""
    return _op2("Less", a, b, name)


@checked
def less_equal(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``a <= b`` as a bool tensor."""
    return _op2("LessEqual", a, b, name)


@checked
def greater(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``a > b`` as a bool tensor."""
    return _op2("Greater", a, b, name)


@checked
def greater_equal(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``a >= b`` as a bool tensor."""
    return _op2("GreaterEqual", a, b, name)


@checked
def equal(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``a == b`` as a bool tensor."""
    return _op2("Equal", a, b, name)


@checked
def not_equal(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``a != b`` as a bool tensor."""
    return _op2("NotEqual", a, b, name)


@checked
def logical_and(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``a and b`` on bool tensors (both sides are computed: no short circuit)."""
    return _op2("LogicalAnd", a, b, name)


@checked
def logical_or(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``a or b`` on bool tensors (both sides are computed: no short circuit)."""
    return _op2("LogicalOr", a, b, name)


@checked
def logical_xor(a: Any, b: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``a != b`` on bool tensors (``a ^ b``), built as TensorFlow's ``logical_xor``
    builds it, ``(a or b) and not (a and b)``: three existing primitives, so every backend, the
    gradients (none) and the GraphDef export need nothing new."""
    a, b = _pair(a, b, "LogicalOr")
    either = _op2("LogicalOr", a, b, None)
    both = _op2("LogicalAnd", a, b, None)
    return _op2("LogicalAnd", either, _op1("LogicalNot", both, None), name)


def _floating(x: Any, what: str) -> Tensor:
    """``x`` as a tensor of a floating dtype, else the build error naming ``what`` (TensorFlow's
    ``is_nan``, ``is_inf`` and ``is_finite`` exist for floating types only)."""
    t = convert_to_tensor(x)
    if not t.dtype.is_floating:
        raise GraphBuildError(f"{what}: expected a floating tensor, got {t.name} of {t.dtype.name}")
    return t


@checked
def is_nan(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise: whether ``x`` is NaN (TensorFlow's ``is_nan``), as ``x != x``: by IEEE 754 NaN
    alone is unequal to itself. One existing primitive, so every backend, the gradients (none) and
    the GraphDef export need nothing new (floating dtypes only)."""
    x = _floating(x, "is_nan")
    return _op2("NotEqual", x, x, name)


@checked
def is_finite(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise: whether ``x`` is neither infinite nor NaN (TensorFlow's ``is_finite``), as
    ``x - x == 0``: the difference is 0 for a finite ``x`` and NaN for an infinity or a NaN. It is
    how a mixed-precision step decides to skip an update whose gradient overflowed, and how
    ``tn.import_graph_def`` imports TensorFlow's ``IsFinite`` (floating dtypes only)."""
    x = _floating(x, "is_finite")
    return _op2("Equal", _op2("Sub", x, x, None), _op1("ZerosLike", x, None), name)


@checked
def is_inf(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise: whether ``x`` is +inf or -inf (TensorFlow's ``is_inf``): neither finite nor NaN
    (floating dtypes only)."""
    x = _floating(x, "is_inf")
    either = _op2("LogicalOr", is_nan(x), is_finite(x), None)
    return _op1("LogicalNot", either, name)


@checked
def logical_not(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``not x`` on a bool tensor."""
    return _op1("LogicalNot", x, name)


@checked
def where(cond: Any, x: Any, y: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise select: ``x`` where ``cond`` else ``y`` (both computed; no control flow)."""
    x, y = _pair(x, y, "Select")
    c = convert_to_tensor(cond)
    return x.graph.create_node("Select", [c, x, y], name=name).outputs[0]


select = where


@checked
def cast(x: Any, dtype: Any, name: Optional[str] = None) -> Tensor:
    """Convert ``x`` to ``dtype``. Float to int truncates toward zero and is an error (KernelError) for
    NaN, infinities and values out of range, on every backend (``docs/limits.rst``)."""
    try:
        d = dt.as_dtype(dtype)
    except TypeError as e:
        raise bad_value(f"cast: dtype: {e}") from None
    return _op1("Cast", x, name, dtype=d.name)


@checked
def stop_gradient(x: Any, name: Optional[str] = None) -> Tensor:
    """The same value, but ``tn.gradients`` treats it as a constant (no gradient flows through it)."""
    return _op1("StopGradient", x, name)


@checked
def prevent_gradient(x: Any, message: str = "", name: Optional[str] = None) -> Tensor:
    """The same value, but a gradient through it is a ``GradientError`` quoting ``message``: for an op
    whose gradient would be wrong (TensorFlow's ``PreventGradient``, which its fused losses write
    before their second derivative)."""
    return _op1("PreventGradient", x, name, message=message)


@checked
def matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False, name: Optional[str] = None) -> Tensor:
    """Matrix product of two rank-2 tensors, optionally transposing either operand first; of batches
    of matrices (rank 3 or more) it is ``np.matmul``'s: one product per batch entry, the batch
    dimensions broadcast, a transpose swapping the last two axes."""
    return _op2("MatMul", a, b, name, transpose_a=bool(transpose_a), transpose_b=bool(transpose_b))


@checked
def reshape(x: Any, shape: Sequence[int], name: Optional[str] = None) -> Tensor:
    """``x`` with a new static ``shape`` (at most one -1, inferred); the element count must match."""
    return _op1("Reshape", x, name, shape=int_list_attr(shape, "reshape", "shape"))


@checked
def transpose(x: Any, perm: Optional[Sequence[int]] = None, name: Optional[str] = None) -> Tensor:
    """``x`` with its axes permuted by ``perm`` (reversed when ``perm`` is None)."""
    return _op1("Transpose", x, name, perm=None if perm is None else int_list_attr(perm, "transpose", "perm"))


@checked
def expand_dims(x: Any, axis: int, name: Optional[str] = None) -> Tensor:
    """``x`` with a new axis of size 1 inserted at ``axis``."""
    return _op1("ExpandDims", x, name, axis=int_attr(axis, "expand_dims", "axis"))


@checked
def concat(values: Sequence[Any], axis: int, name: Optional[str] = None) -> Tensor:
    """Join ``values`` (same rank and dtype) along the existing axis ``axis``."""
    if not values:
        raise GraphBuildError("concat: needs at least one tensor")
    ts = [convert_to_tensor(v) for v in values]
    return ts[0].graph.create_node("Concat", ts, {"axis": int_attr(axis, "concat", "axis")}, name=name).outputs[0]


@checked
def stack(values: Sequence[Any], axis: int = 0, name: Optional[str] = None) -> Tensor:
    """Stack equally shaped tensors along a new axis ``axis`` (as ``tf.stack``: for inputs of rank
    ``r``, from ``-(r + 1)`` to ``r``). The new leading axis is the ``Pack`` primitive; another is
    each value given that axis (``expand_dims``) and joined along it (``concat``), so gradients, the
    backends and export need nothing new."""
    if not values:
        raise GraphBuildError("stack: needs at least one tensor")
    ts = [convert_to_tensor(v) for v in values]
    ax = int_attr(axis, "stack", "axis")
    if ax == 0:
        return ts[0].graph.create_node("Pack", ts, name=name).outputs[0]
    rank = None if ts[0].shape is None else len(ts[0].shape)
    if rank is not None and not -(rank + 1) <= ax <= rank:
        raise ShapeError(f"stack: axis {ax} is out of range for values of rank {rank} (from {-(rank + 1)} "
                         f"to {rank})")
    return concat([expand_dims(t, ax) for t in ts], ax, name=name)


def _index_entry(e: Any) -> Any:
    """An index or slice bound of ``getitem``'s key as ``composite.getitem_spec`` takes it: None, an
    int, or an integer scalar tensor."""
    if e is None or isinstance(e, (int, np.integer)) and not isinstance(e, bool):
        return None if e is None else int(e)
    t = convert_to_tensor(e)
    if not t.dtype.is_integer or (t.shape is not None and t.shape != ()):
        raise GraphBuildError(f"indices must be Python ints or integer scalar tensors, got {t!r}")
    return t


def getitem(x: Any, key: Any, name: Optional[str] = None) -> Tensor:
    """Basic indexing ``x[i]``, ``x[i:j:k]``, ``x[..., i]``, ``x[:, None]`` and tuples of them, with
    ints or int32 scalar tensors, as numpy (and TensorFlow's ``StridedSlice``) read them: ``None``
    adds an axis of size 1, ``...`` stands for the full slices of the axes the other entries leave
    (so it needs ``x``'s rank). Built by ``composite.index_with_new_axes``, the importer's
    construction of ``StridedSlice``'s new-axis and ellipsis bits, so the two build the same nodes."""
    x = convert_to_tensor(x)
    keys = key if isinstance(key, tuple) else (key,)
    checked_key: list[Any] = []
    for k in keys:
        if isinstance(k, slice):
            if k.step is not None:
                int_attr(k.step, "getitem", "slice step")
            if k.step == 0:
                raise GraphBuildError("slice step cannot be zero")
            checked_key.append(slice(_index_entry(k.start), _index_entry(k.stop), k.step))
        elif k is Ellipsis or k is None:
            checked_key.append(k)
        else:
            checked_key.append(_index_entry(k))
    ellipses = sum(1 for k in checked_key if k is Ellipsis)
    if ellipses > 1:
        raise GraphBuildError(f"getitem of {x.name}: an index can have only one ellipsis (...), got {ellipses}")
    rank = None if x.shape is None else len(x.shape)
    if ellipses and rank is None:
        raise ShapeError(f"getitem of {x.name}: an ellipsis (...) needs the rank of the indexed tensor, which is "
                         "not known while building; give it a shape (a placeholder's shape=) or index without one")
    plain, new_axes = basic_index(tuple(checked_key), rank)
    dyn: list[Tensor] = []
    spec = getitem_spec(plain, dyn)
    return index_with_new_axes(GraphMaker(x.graph, name, "GetItem"), x, spec, dyn, new_axes)


@checked
def gather(x: Any, indices: Any, axis: int = 0, name: Optional[str] = None) -> Tensor:
    """The slices of ``x`` at integer ``indices`` along ``axis`` (indices may be a tensor). An index
    counts from the end when negative, as in numpy (``-1`` is the last slice; TensorFlow's ``gather``
    refuses negative indices); one outside ``[-n, n)`` is a ``KernelError`` on every backend."""
    x = convert_to_tensor(x)
    idx = convert_to_tensor(indices)
    return x.graph.create_node("Gather", [x, idx], {"axis": int_attr(axis, "gather", "axis")}, name=name).outputs[0]


def update_slot(x: Any, index: Any, value: Any, name: Optional[str] = None) -> Tensor:
    """``x`` with its slot ``index`` along axis 0 replaced by ``value`` (``x[index] = value`` without
    changing ``x``): a new tensor by its meaning, written in place where compiled (XLA reuses ``x``'s
    buffer when nothing reads ``x`` afterwards), so a loop that keeps a buffer of slots pays for one
    slot a step, not for the buffer. ``index`` counts from the end when negative; outside
    ``[-n, n)`` it is a ``KernelError`` on every backend."""
    x = convert_to_tensor(x)
    i = convert_to_tensor(index, dtype=dt.int32)
    v = convert_to_tensor(value, dtype=x.dtype)
    return x.graph.create_node("UpdateSlot", [x, i, v], name=name).outputs[0]


@checked
def tile(x: Any, multiples: Sequence[int], name: Optional[str] = None) -> Tensor:
    """``x`` repeated ``multiples[i]`` times along each axis ``i``."""
    return _op1("Tile", x, name, multiples=int_list_attr(multiples, "tile", "multiples"))


def _axis_attr(axis: Any, op: str) -> Any:
    if axis is None:
        return None
    if isinstance(axis, (list, tuple)):
        return int_list_attr(axis, op, "axis")
    return int_attr(axis, op, "axis")


@checked
def reduce_sum(x: Any, axis: Any = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """Sum over ``axis`` (an int, a list, or None for all axes), keeping reduced axes if ``keepdims``."""
    return _op1("Sum", x, name, axis=_axis_attr(axis, "reduce_sum"), keepdims=bool(keepdims))


@checked
def reduce_prod(x: Any, axis: Any = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """Product over ``axis``, like ``reduce_sum`` (over no elements 1). Its gradient is exact where
    the product holds zeros: each element's is the product of the others, taken from running
    products from either end rather than by dividing the product by the element."""
    return _op1("Prod", x, name, axis=_axis_attr(axis, "reduce_prod"), keepdims=bool(keepdims))


@checked
def reduce_mean(x: Any, axis: Any = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """Mean over ``axis``, like ``reduce_sum``; NaN over no elements. Integers as TensorFlow's kernel
    takes them: the sum (in their dtype) divided by the count rounding toward zero, 0 over no
    elements."""
    return _op1("Mean", x, name, axis=_axis_attr(axis, "reduce_mean"), keepdims=bool(keepdims))


@checked
def reduce_max(x: Any, axis: Any = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """Maximum over ``axis``, like ``reduce_sum``."""
    return _op1("Max", x, name, axis=_axis_attr(axis, "reduce_max"), keepdims=bool(keepdims))


@checked
def reduce_min(x: Any, axis: Any = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """Minimum over ``axis``, like ``reduce_sum``."""
    return _op1("Min", x, name, axis=_axis_attr(axis, "reduce_min"), keepdims=bool(keepdims))


@checked
def reduce_all(x: Any, axis: Any = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """Logical and over ``axis`` of a bool tensor (True over no elements), like ``reduce_sum``."""
    return _op1("All", x, name, axis=_axis_attr(axis, "reduce_all"), keepdims=bool(keepdims))


@checked
def reduce_any(x: Any, axis: Any = None, keepdims: bool = False, name: Optional[str] = None) -> Tensor:
    """Logical or over ``axis`` of a bool tensor (False over no elements), like ``reduce_sum``."""
    return _op1("Any", x, name, axis=_axis_attr(axis, "reduce_any"), keepdims=bool(keepdims))


@checked
def zeros_like(x: Any, name: Optional[str] = None) -> Tensor:
    """Zeros of the shape and dtype of ``x`` (shape taken at run time)."""
    return _op1("ZerosLike", x, name)


@checked
def ones_like(x: Any, name: Optional[str] = None) -> Tensor:
    """Ones of the shape and dtype of ``x`` (shape taken at run time)."""
    return _op1("OnesLike", x, name)


def _static_shape(shape: Any, op: str, d: dt.DType) -> tuple[int, ...]:
    """A build-time shape: ints >= 0, under the allocation guard (the array is made now)."""
    dims = tuple(int_list_attr(shape, op, "shape"))
    if any(x < 0 for x in dims):
        raise GraphBuildError(f"{op}: negative dimension in shape {list(dims)}")
    try:
        check_allocation(op, dims, d.itemsize)
    except ResourceExhaustedError as e:
        raise GraphBuildError(str(e)) from None
    return dims


@checked
def zeros(shape: Sequence[int], dtype: Any = dt.float32, name: Optional[str] = None) -> Tensor:
    """A constant of zeros with a static ``shape``."""
    d = dt.as_dtype(dtype)
    return constant(np.zeros(_static_shape(shape, "zeros", d), d.numpy), dtype=dtype, name=name)


@checked
def ones(shape: Sequence[int], dtype: Any = dt.float32, name: Optional[str] = None) -> Tensor:
    """A constant of ones with a static ``shape``."""
    d = dt.as_dtype(dtype)
    return constant(np.ones(_static_shape(shape, "ones", d), d.numpy), dtype=dtype, name=name)


@checked
def fill(shape: Any, value: Any, name: Optional[str] = None) -> Tensor:
    """A tensor of run-time ``shape`` (an int32 vector tensor) filled with the scalar ``value``."""
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


@checked
def shape(x: Any, name: Optional[str] = None) -> Tensor:
    """The run-time shape of ``x`` as an int32 vector."""
    return _op1("Shape", x, name)


@checked
def size(x: Any, name: Optional[str] = None) -> Tensor:
    """The run-time number of elements of ``x`` as an int32 scalar."""
    return _op1("Size", x, name)


@checked
def broadcast_like(x: Any, like: Any, name: Optional[str] = None) -> Tensor:
    """``x`` broadcast to the run-time shape of ``like`` (the gradient of ``sum_to_like``)."""
    return _op2("BroadcastLike", x, like, name)


@checked
def sum_to_like(x: Any, like: Any, name: Optional[str] = None) -> Tensor:
    """``x`` summed down to the shape of ``like``, undoing broadcasting (used by gradients)."""
    return _op2("SumToLike", x, like, name)


@checked
def no_op(name: Optional[str] = None) -> Node:
    """A node that computes nothing: run it as a target, or group control edges through it."""
    return get_default_graph().create_node("NoOp", (), name=name)


@checked
def group(*inputs: Any, name: Optional[str] = None) -> Node:
    """A NoOp that runs after all ``inputs`` (tensors or nodes): use it as one control dependency."""
    flat: list[Any] = []
    for i in inputs:
        flat.extend(i if isinstance(i, (list, tuple)) else [i])
    g = _graph_of(*flat)
    with g.control_dependencies(flat):
        return g.create_node("NoOp", (), name=name or "group")


@checked
def control_dependencies(deps: Optional[Sequence[Any]]) -> Any:
    """``with tn.control_dependencies([a, b]):`` ops created inside run after ``a`` and ``b``."""
    return _graph_of(*(deps or [])).control_dependencies(deps)


@checked
def placeholder(dtype: Any, shape: Any = None, name: Optional[str] = None) -> Tensor:
    """A value fed at run time through ``feed_dict``."""
    try:
        d = dt.as_dtype(dtype)
        shp = None if shape is None else list(sh.as_shape(shape) or ())
    except TypeError as e:
        raise bad_value(f"placeholder {name or ''}: {e}".replace(" :", ":")) from None
    return get_default_graph().create_node(
        "Placeholder", (), {"dtype": d.name, "shape": shp},
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
        "__truediv__": truediv, "__rtruediv__": rev(truediv),
        "__floordiv__": floordiv, "__rfloordiv__": rev(floordiv),
        "__mod__": mod, "__rmod__": rev(mod),
        "__pow__": pow, "__rpow__": rev(pow),
        "__matmul__": matmul, "__rmatmul__": rev(matmul),
        "__lt__": less, "__le__": less_equal, "__gt__": greater, "__ge__": greater_equal,
        "__and__": logical_and, "__rand__": rev(logical_and),
        "__or__": logical_or, "__ror__": rev(logical_or),
        "__xor__": logical_xor, "__rxor__": rev(logical_xor),
        "__neg__": lambda self: negative(self),
        "__abs__": lambda self: abs(self),
        "__invert__": lambda self: logical_not(self),
        "__getitem__": lambda self, key: getitem(self, key),
    }
    for k, f in ops.items():
        setattr(Tensor, k, f)


_install_operators()
