"""numpy kernels of the pure compute primitives (``KERNELS``), keyed by primitive name.

Why here and not in ``reference/``: the reference interpreter and the structured evaluator in
``semantics/`` must be independent statements of the *control-flow* meaning, yet compute the same
arithmetic. They share these kernels and nothing else of each other.

A kernel takes a list of input values and the node attrs and returns a list of output values. Values
are numpy arrays (0-d for scalars) or ``TensorArrayValue``. Kernels never see dead values.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout import shapes as sh
from turnout.errors import KernelError, ResourceExhaustedError
from turnout.limits import check_allocation
from turnout.linalg_rules import LINALG_KERNELS
from turnout.random_rules import RANDOM_KERNELS
from turnout.shape_rules import concrete_shape_error, reduced_shape
from turnout.summarize import assert_message
from turnout.tables import registrar
from turnout.window_kernels import WINDOW_KERNELS

Kernel = Callable[[Sequence[Any], dict[str, Any]], list[Any]]
#: primitive name -> its numpy kernel, shared by the reference interpreter and the structured evaluator
KERNELS: dict[str, Kernel] = {}


def predicate_shape_message(user: str, shape: tuple[int, ...]) -> str:
    """The one message every backend gives for a predicate that is not one boolean: ``user`` names the
    Switch or LoopCond that reads it. Why one function: the interpreters and the compiled backend
    check the predicate in different places, and the user must read the same sentence from each."""
    return (f"{user}: the predicate must be a scalar bool, got a value of shape {tuple(shape)} "
            "(reduce it with tn.reduce_all or tn.reduce_any, or index one element)")


def truth(value: Any, user: str | Callable[[], str]) -> bool:
    """The truth of a predicate value read by a Switch or a LoopCond ([E-Switch], [E-LoopCond]).
    A predicate whose static shape is unknown can be fed a vector; numpy would then refuse to take
    its truth with an error that names nothing of the user's, so a value that is not 0-d is a
    ``KernelError`` naming ``user`` (a string, or a function giving it only when it fails)."""
    a = np.asarray(value)
    if a.shape != ():
        raise KernelError(predicate_shape_message(_desc(user), a.shape))
    return bool(a)


@dataclass(frozen=True)
class TensorArrayValue:
    """An immutable TensorArray: ``size`` slots, each None (unwritten) or an array.

    Writes return a new value, so TensorArrays are ordinary values flowing on edges: this keeps them
    deterministic under non-strict execution and lets them be loop variables.
    """

    dtype: str
    element_shape: Any
    items: tuple[Any, ...]
    #: ``dynamic_size``: a write past the end grows the array (TensorFlow's TensorArray of dynamic size)
    dynamic: bool = False

    @property
    def size(self) -> int:
        """The number of slots, written or not."""
        return len(self.items)


_k = registrar(KERNELS)
KERNELS.update(WINDOW_KERNELS)  # convolution and pooling, in a module of their own
KERNELS.update(LINALG_KERNELS)  # inverse, Cholesky, triangular solve
KERNELS.update(RANDOM_KERNELS)  # RandomDraw, with its shape rule

#: Bytes counted per TensorArray slot by the allocation guard (one reference in the slot table).
TA_SLOT_BYTES = 8


def _np(d: Any) -> Any:
    return dt.as_dtype(d).numpy


#: float dtype -> its smallest normal number (``np.finfo`` costs a microsecond a call)
_TINY = {np.dtype(t): np.finfo(t).tiny for t in (np.float16, np.float32, np.float64)}


def flush_subnormals(x: np.ndarray) -> np.ndarray:
    """[Float model] ``x`` with every subnormal element replaced by a zero of the same sign.

    Why: XLA on the CPU, and TensorFlow's CPU kernels, run with the processor flushing subnormal
    results to zero, so a value that underflows below the smallest normal number (``exp(-90.0)`` in
    float32, a product of tiny probabilities) is 0 there, where numpy keeps it. Every arithmetic
    kernel's float result passes through here so that the interpreters compute what the fast backend
    and those frameworks do: otherwise ``exp(x) * 1e30`` or ``x / x`` of an underflowed ``x``
    differ between backends by far more than rounding. Ops that only move values (reshape, gather,
    select, ``Neg``, ``Abs``) keep them, as XLA does."""
    tiny = _TINY.get(x.dtype)
    if tiny is None:  # not a float
        return x
    if x.ndim == 0:
        v = abs(float(x))
        if v >= tiny or v == 0 or v != v:
            return x
    a = np.abs(x)
    small = a < tiny
    if not small.any():  # (the common case: two passes, without the mask of the exact test)
        return x
    sub = small & (a != 0)
    if not sub.any():  # zeros only
        return x
    return np.where(sub, np.copysign(np.zeros((), x.dtype), x), x)


def _elementwise(fn: Callable[..., Any], flush: bool = True) -> Kernel:
    """An elementwise kernel in the result dtype of its inputs; ``flush``: its float results pass
    through ``flush_subnormals`` (every arithmetic op; not the ops that only copy a value's bits)."""
    def k(xs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
        with np.errstate(all="ignore"):
            r = np.asarray(fn(*xs))
        if r.dtype == np.bool_:
            return [r]
        r = r.astype(np.result_type(*xs), copy=False)
        return [flush_subnormals(r) if flush else r]

    return k


def _compare(fn: Callable[..., Any]) -> Kernel:
    return lambda xs, attrs: [np.asarray(fn(*xs))]


@_k("Const")
def _const(xs, attrs):
    return [np.asarray(attrs["value"], dtype=_np(attrs["dtype"]))]


@_k("Identity", "StopGradient", "PreventGradient")
def _identity(xs, attrs):
    return [xs[0]]


@_k("Assert")
def _assert(xs, attrs):
    if not bool(xs[0]):  # the message, then the data it shows, as TensorFlow prints them
        shown = assert_message(attrs["message"], attrs.get("shown"), xs[2:], attrs.get("summarize", 3))
        raise KernelError(f"Assert: {shown}")
    return [xs[1]]


@_k("Sleep")
def _sleep(xs, attrs):
    time.sleep(float(attrs["seconds"]))  # a stand-in for waiting on I/O: the value passes unchanged
    return [xs[0]]


def _div(a: Any, b: Any) -> Any:
    if np.issubdtype(np.asarray(a).dtype, np.integer):
        if np.any(np.asarray(b) == 0):
            raise KernelError("Div: integer division by zero")
        return np.floor_divide(a, b)
    return np.divide(a, b)


def _mod(a: Any, b: Any) -> Any:
    """The floored remainder. Floats: C's ``fmod``, moved into the divisor's sign where it is not
    zero, as TensorFlow's kernel and XLA compute it; numpy's ``mod`` gives a zero remainder the
    divisor's sign instead (``-1.0 % 0.5`` is ``0.0`` there, ``-0.0`` here)."""
    if np.issubdtype(np.asarray(a).dtype, np.integer):
        if np.any(np.asarray(b) == 0):
            raise KernelError("FloorMod: integer modulo by zero")
        return np.mod(a, b)
    r = np.fmod(a, b)
    return np.where((r != 0) & ((r < 0) != (np.asarray(b) < 0)), r + b, r)


def _pow(a: Any, b: Any) -> Any:
    """IEEE's ``pow``, as XLA computes it. numpy's float loop takes a square root for an exponent of
    0.5 that is the same for every element (a scalar), which is NaN at ``-inf`` and ``-0.0`` at
    ``-0.0`` where ``pow`` gives ``inf`` and ``0.0``: those two are put right, so the answer depends
    neither on the exponent's shape nor on the backend."""
    if np.issubdtype(np.asarray(a).dtype, np.integer) and np.any(np.asarray(b) < 0):
        raise KernelError("Pow: integers to negative integer powers are not allowed")
    r = np.power(a, b)
    if np.asarray(r).dtype.kind == "f":
        half = np.asarray(b) == 0.5
        if np.any(half):
            a_ = np.asarray(a)
            r = np.where(half & (a_ == -np.inf), np.inf, r)
            r = np.where(half & (a_ == 0), np.zeros((), np.asarray(r).dtype), r)
    return r


def _lgamma_of(v: float) -> float:
    """``log |Gamma(v)|``, with TensorFlow's values where ``math.lgamma`` raises: inf at the poles
    (0 and the negative integers) and NaN for NaN."""
    if math.isnan(v):
        return v
    try:
        return math.lgamma(v)
    except ValueError:  # (a pole)
        return math.inf


def _digamma_of(v: float) -> float:
    """The digamma function (numpy and ``math`` have none): NaN at the poles (0 and the negative
    integers, as TensorFlow) and for NaN; below 0 by the reflection ``psi(1 - v) - pi / tan(pi v)``;
    above, raised past 6 by ``psi(v) = psi(v + 1) - 1 / v`` and then the asymptotic series, whose
    terms to ``v^-14`` leave an error below 1e-15 there."""
    if math.isinf(v):
        return v if v > 0 else math.nan
    if math.isnan(v) or (v <= 0 and v == math.floor(v)):
        return math.nan
    if v < 0:
        return _digamma_of(1.0 - v) - math.pi / math.tan(math.pi * v)
    acc = 0.0
    while v < 6.0:
        acc -= 1.0 / v
        v += 1.0
    w = 1.0 / (v * v)
    series = w * (1 / 12 - w * (1 / 120 - w * (1 / 252 - w * (1 / 240 - w * (1 / 132 - w * (691 / 32760 - w / 12))))))
    return acc + math.log(v) - 0.5 / v - series


def _by_element(f: Any) -> Any:
    """An elementwise kernel from a function of one Python float, in the input's dtype (computed in
    double precision, then rounded once)."""
    uf = np.frompyfunc(f, 1, 1)
    return lambda x: np.asarray(uf(np.asarray(x, dtype=np.float64)), dtype=np.result_type(x))

KERNELS.update({
    "Add": _elementwise(np.add),
    "Sub": _elementwise(np.subtract),
    "Mul": _elementwise(np.multiply),
    "Div": _elementwise(_div),
    "FloorMod": _elementwise(_mod),
    "Pow": _elementwise(_pow),
    "Maximum": _elementwise(np.maximum),
    "Minimum": _elementwise(np.minimum),
    "Neg": _elementwise(np.negative, flush=False),
    "Abs": _elementwise(np.abs, flush=False),
    "Sign": _elementwise(np.sign),
    "Square": _elementwise(np.square),
    "Relu": _elementwise(lambda x: np.maximum(x, np.zeros((), x.dtype))),
    "Tanh": _elementwise(np.tanh),
    "Sigmoid": _elementwise(lambda x: 1 / (1 + np.exp(-x))),
    "Exp": _elementwise(np.exp),
    "Log": _elementwise(np.log),
    "Sqrt": _elementwise(np.sqrt),
    "Log1p": _elementwise(np.log1p),
    "Expm1": _elementwise(np.expm1),
    "Erf": _elementwise(_by_element(math.erf)),  # (numpy has no erf)
    "Sin": _elementwise(np.sin),
    "Cos": _elementwise(np.cos),
    "Tan": _elementwise(np.tan),
    "Asin": _elementwise(np.arcsin),
    "Acos": _elementwise(np.arccos),
    "Atan": _elementwise(np.arctan),
    "Atan2": _elementwise(np.arctan2),
    "Sinh": _elementwise(np.sinh),
    "Cosh": _elementwise(np.cosh),
    "Asinh": _elementwise(np.arcsinh),
    "Acosh": _elementwise(np.arccosh),
    "Atanh": _elementwise(np.arctanh),
    "Erfc": _elementwise(_by_element(math.erfc)),
    "Lgamma": _elementwise(_by_element(_lgamma_of)),
    "Digamma": _elementwise(_by_element(_digamma_of)),
    "Floor": _elementwise(np.floor, flush=False),
    "Ceil": _elementwise(np.ceil, flush=False),
    "Round": _elementwise(np.round, flush=False),  # half to even, as TensorFlow's Round
    "Less": _compare(np.less),
    "LessEqual": _compare(np.less_equal),
    "Greater": _compare(np.greater),
    "GreaterEqual": _compare(np.greater_equal),
    "Equal": _compare(np.equal),
    "NotEqual": _compare(np.not_equal),
    "LogicalAnd": _compare(np.logical_and),
    "LogicalOr": _compare(np.logical_or),
    "LogicalNot": _compare(np.logical_not),
})


@_k("Select")
def _select(xs, attrs):
    c, a, b = xs
    return [np.where(c, a, b)]


def cast_float_to_int(x: np.ndarray, target: Any) -> np.ndarray:
    """[Cast float -> int]: truncation toward zero, defined only where the result is representable.

    NaN, an infinity or a value whose truncation lies outside the target's range is a KernelError
    (numpy and XLA would each return a different arbitrary integer). The fast backend checks the
    same condition (``fast/lowering.py``), so both backends agree: an error, never a value."""
    info = np.iinfo(target)
    with np.errstate(all="ignore"):
        t = np.trunc(x.astype(np.float64))
        bad = ~np.isfinite(t) | (t < info.min) | (t >= -float(info.min))
    if np.any(bad):
        v = np.asarray(x)[bad].flat[0]
        raise KernelError(f"Cast: {float(v)!r} cannot be cast to {np.dtype(target).name} (NaN, infinite or out of "
                          f"range [{info.min}, {info.max}]); clip it first")
    return t.astype(target)


@_k("Cast")
def _cast(xs, attrs):
    x = np.asarray(xs[0])
    target = _np(attrs["dtype"])
    if x.dtype.kind == "f" and np.issubdtype(target, np.integer):
        return [cast_float_to_int(x, target)]
    with np.errstate(over="ignore"):  # float64 -> float32 overflows to inf, as on every backend, with no warning
        return [flush_subnormals(x.astype(target))]  # (and may underflow)


@_k("MatMul")
def _matmul(xs, attrs):
    """Matrices, or batches of them whose batch dimensions broadcast; a transpose swaps the last two axes."""
    a, b = xs
    if attrs.get("transpose_a"):
        a = np.swapaxes(a, -1, -2)
    if attrs.get("transpose_b"):
        b = np.swapaxes(b, -1, -2)
    if a.shape[-1] != b.shape[-2]:
        raise KernelError(f"MatMul: inner dimensions differ at run time: {a.shape} @ {b.shape}")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise KernelError(f"MatMul: batch dimensions do not broadcast at run time: {a.shape} @ {b.shape}") from None
    return [flush_subnormals(np.matmul(a, b))]


@_k("Reshape")
def _reshape(xs, attrs):
    try:
        return [np.reshape(xs[0], attrs["shape"])]
    except ValueError as e:
        raise KernelError(f"Reshape: {e}") from None


@_k("ReshapeTo")
def _reshape_to(xs, attrs):
    x, shp = xs
    try:
        return [np.reshape(x, [int(d) for d in np.ravel(shp)])]
    except ValueError as e:
        raise KernelError(f"ReshapeTo: {e}") from None


@_k("Transpose")
def _transpose(xs, attrs):
    return [np.transpose(xs[0], attrs.get("perm"))]


@_k("ExpandDims")
def _expand(xs, attrs):
    return [np.expand_dims(xs[0], attrs["axis"])]


@_k("Concat")
def _concat(xs, attrs):
    try:
        return [np.concatenate(xs, axis=attrs["axis"])]
    except ValueError as e:
        raise KernelError(f"Concat: {e}") from None


@_k("Pack")
def _pack(xs, attrs):
    try:
        return [np.stack(xs, axis=0)]
    except ValueError as e:
        raise KernelError(f"Pack: {e}") from None


def build_index(x_shape: Sequence[int], spec: Sequence[dict[str, Any]], dyn: Sequence[Any]) -> tuple[Any, ...]:
    """Turn a GetItem spec (+ dynamic scalar inputs) into a numpy index tuple, bounds-checking indices."""

    def val(v: Any) -> Any:
        if isinstance(v, dict):
            return int(dyn[v["input"]])
        return v

    idx: list[Any] = []
    for i, e in enumerate(spec):
        if e["kind"] == "index":
            v = val(e["value"])
            n = x_shape[i]
            if not -n <= v < n:
                raise KernelError(f"GetItem: index {v} out of range for dimension {i} of size {n}")
            idx.append(v)
        else:
            idx.append(slice(val(e["start"]), val(e["stop"]), val(e["step"])))
    return tuple(idx)


@_k("GetItem")
def _getitem(xs, attrs):
    x = np.asarray(xs[0])
    return [np.asarray(x[build_index(x.shape, attrs["spec"], xs[1:])])]


@_k("GetItemGrad")
def _getitem_grad(xs, attrs):
    like, g = np.asarray(xs[0]), xs[1]
    out = np.zeros(like.shape, dtype=np.asarray(g).dtype)
    out[build_index(like.shape, attrs["spec"], xs[2:])] += g
    return [out]


@_k("Gather")
def _gather(xs, attrs):
    x, idx = xs
    ax = attrs.get("axis", 0)
    n = np.shape(x)[ax]
    if np.any((idx < -n) | (idx >= n)):
        raise KernelError(f"Gather: index out of range for axis {ax} of size {n}: {idx}")
    return [np.take(x, idx, axis=ax)]


@_k("ScatterAddLike")
def _scatter_add_like(xs, attrs):
    like, idx, upd = xs
    ax = attrs.get("axis", 0) % max(np.ndim(like), 1)  # (a negative axis, as Gather's, counts from the end)
    n = np.shape(like)[ax] if np.ndim(like) else 1
    if np.any((np.asarray(idx) < -n) | (np.asarray(idx) >= n)):  # (as Gather: from -n, counted from the end)
        raise KernelError(f"ScatterAddLike: index out of range for axis {ax} of size {n}: {idx}")
    out = np.zeros(np.shape(like), dtype=np.asarray(upd).dtype)
    moved = np.moveaxis(out, ax, 0)
    upd_m = np.asarray(upd)
    idx = np.asarray(idx)
    # bring the indexed axes of upd to the front, matching moved's layout
    upd_m = np.moveaxis(upd_m, list(range(ax, ax + idx.ndim)), list(range(idx.ndim)))
    np.add.at(moved, idx, upd_m)
    return [out]


@_k("UpdateSlot")
def _update_slot(xs, attrs):
    x, i, v = np.asarray(xs[0]), int(np.asarray(xs[1])), np.asarray(xs[2])
    n = x.shape[0]
    if not -n <= i < n:
        raise KernelError(f"UpdateSlot: index {i} out of range for axis 0 of size {n}")
    if v.shape != x.shape[1:]:
        raise KernelError(f"UpdateSlot: a value of shape {list(v.shape)} does not fit a slot of shape "
                          f"{list(x.shape[1:])}")
    out = x.copy()
    out[i] = v
    return [out]


@_k("Tile")
def _tile(xs, attrs):
    x = np.asarray(xs[0])
    reps = list(attrs["multiples"])
    shape = [1] * (len(reps) - x.ndim) + list(x.shape)
    reps = [1] * (len(shape) - len(reps)) + reps
    check_allocation("Tile", [d * r for d, r in zip(shape, reps, strict=True)], x.dtype.itemsize)
    return [np.tile(x, attrs["multiples"])]


def _axis_arg(attrs: dict[str, Any], x: Any = None) -> Any:
    """A reduction's axis attribute as numpy takes it. A scalar has nothing to reduce: axis 0 (what
    the shape rule accepts for rank 0, ``shape_rules.reduced_shape``) reduces over nothing, the
    same for every reduction (numpy accepts it for ``sum`` and ``max`` but refuses it for ``mean``)."""
    a = attrs.get("axis")
    if x is not None and np.ndim(x) == 0 and a is not None:
        if any(v != 0 for v in (a if isinstance(a, list) else [a])):
            raise KernelError(f"reduction axis {a} is out of range for a scalar")
        return None
    return tuple(a) if isinstance(a, list) else a


@_k("Sum")
def _sum(xs, attrs):
    x = np.asarray(xs[0])
    return [flush_subnormals(np.asarray(np.sum(x, axis=_axis_arg(attrs, x), keepdims=attrs.get("keepdims", False)),
                                        dtype=x.dtype))]


@_k("Prod")
def _prod(xs, attrs):
    x = np.asarray(xs[0])
    return [flush_subnormals(np.asarray(np.prod(x, axis=_axis_arg(attrs, x), keepdims=attrs.get("keepdims", False),
                                                 dtype=x.dtype), dtype=x.dtype))]


def _scan(run: Callable[..., Any], unit: int) -> Kernel:
    """The kernel of ``Cumsum`` (``unit`` 0) or ``Cumprod`` (1). ``exclusive`` shifts the inclusive
    results by one slot (a leading ``unit``), as TensorFlow's scan does, rather than taking each
    element out again (which would round differently, and divide by zero for a product)."""
    def kernel(xs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
        x = np.asarray(xs[0])
        ax = attrs["axis"] % x.ndim
        y = np.flip(x, ax) if attrs.get("reverse", False) else x
        s = run(y, axis=ax, dtype=x.dtype)
        if attrs.get("exclusive", False) and x.shape[ax]:
            lead = np.full_like(np.take(s, [0], axis=ax), unit)
            s = np.concatenate([lead, np.delete(s, -1, axis=ax)], axis=ax)
        return [flush_subnormals(np.flip(s, ax) if attrs.get("reverse", False) else s)]

    return kernel


_k("Cumsum")(_scan(np.cumsum, 0))
_k("Cumprod")(_scan(np.cumprod, 1))


@_k("Mean")
def _mean(xs, attrs):
    """The sum over the count, as ``np.mean`` computes it; over no elements 0/0, NaN, as TensorFlow
    gives, without the warning ``np.mean`` prints there. Integers as TensorFlow's kernel takes them:
    summed in their own dtype (wrapping), the sum divided by the count rounding toward zero, and 0
    over no elements (the identity its ``MeanReducer`` fills, NaN for floats and 0 for integers)."""
    x = np.asarray(xs[0])
    axis, keep = _axis_arg(attrs, x), attrs.get("keepdims", False)
    if x.dtype.kind in "iu":
        total = np.sum(x, axis=axis, keepdims=keep, dtype=x.dtype)
        count = x.size // total.size if total.size else 0
        if count == 0:
            return [np.zeros_like(total)]
        q = total // count  # the floor; one more where a negative sum leaves a remainder: toward zero
        return [np.asarray(q + ((total < 0) & (q * count != total)), dtype=x.dtype)]
    total = np.sum(x, axis=axis, keepdims=keep)
    count = x.size // total.size if total.size else 0
    with np.errstate(all="ignore"):
        return [flush_subnormals(np.asarray(np.true_divide(total, count), dtype=x.dtype))]


def extremum_identity(op: str, dtype: Any) -> Any:
    """What ``Max`` (``Min``) gives for an output element over no elements: the identity of the
    reduction, the least (greatest) value of the dtype, -inf (inf) for floats, as TensorFlow's
    kernels give. Why not an error (numpy's): ``tn.nn.softmax`` along an axis of size 0 shifts by
    such a maximum and has an empty result, as TensorFlow's has; the compiled backends share this."""
    d = np.dtype(dtype)
    if d.kind == "f":
        return d.type(-np.inf if op == "Max" else np.inf)
    info = np.iinfo(d)
    return d.type(info.min if op == "Max" else info.max)


def _extremum(op: str, reduce: Callable[..., Any]) -> Kernel:
    """The kernel of ``Max`` or ``Min``; an output element over no elements is the reduction's
    identity (``extremum_identity``), and an empty tensor reduced along axes that are not empty has an
    empty result, as in TensorFlow."""
    def kernel(xs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
        x = np.asarray(xs[0])
        axis, keep = _axis_arg(attrs, x), attrs.get("keepdims", False)
        if x.size == 0:
            shape = tuple(int(d or 0) for d in reduced_shape(x.shape, axis, keep) or ())
            return [np.full(shape, extremum_identity(op, x.dtype), x.dtype)]
        return [np.asarray(reduce(x, axis=axis, keepdims=keep), dtype=x.dtype)]

    return kernel


_k("Max")(_extremum("Max", np.max))
_k("Min")(_extremum("Min", np.min))


def _bool_reduction(fn: Any) -> Kernel:
    """``All`` / ``Any``: bool in, bool out; an empty reduction is the identity (True / False), as in TensorFlow."""
    def kernel(xs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
        x = np.asarray(xs[0])
        return [np.asarray(fn(x, axis=_axis_arg(attrs, x), keepdims=attrs.get("keepdims", False)), dtype=np.bool_)]

    return kernel


KERNELS.update({"All": _bool_reduction(np.all), "Any": _bool_reduction(np.any)})


def _arg_reduction(fn: Any, op: str) -> Kernel:
    """ArgMax / ArgMin: the first index among ties (numpy's and TensorFlow's choice), as attr dtype."""
    def kernel(xs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
        x = np.asarray(xs[0])
        ax = attrs.get("axis", 0)
        if x.ndim == 0 or x.shape[ax] == 0:
            raise KernelError(f"{op}: reduction over an empty axis {ax} of shape {list(x.shape)}")
        return [np.asarray(fn(x, axis=ax), dtype=_np(attrs.get("dtype", "int64")))]

    return kernel


KERNELS.update({"ArgMax": _arg_reduction(np.argmax, "ArgMax"), "ArgMin": _arg_reduction(np.argmin, "ArgMin")})


@_k("TopK")
def _top_k(xs, attrs):
    """The ``k`` largest along the last axis, largest first; among equal values (``-0.0`` and ``0.0``
    among them) the lower index first; a NaN above every number, as XLA's ``top_k`` orders it (numpy's
    sort would put it last, so the interpreters and the compiled backends would pick other entries)."""
    x = np.asarray(xs[0])
    k = int(attrs["k"])
    if x.ndim == 0 or k > x.shape[-1] or k < 0:
        raise KernelError(f"TopK: input must have at least k={k} entries along its last axis, "
                          f"got shape {list(x.shape)}")
    # (the last key sorts first; lexsort is stable; an integer's ``~x`` orders it as ``-x`` would,
    # without the overflow of ``-x`` at the type's least value)
    keys = (-x, ~np.isnan(x)) if x.dtype.kind == "f" else (np.invert(x),)
    idx = np.lexsort(keys, axis=-1)[..., :k].astype(np.int32)
    return [np.take_along_axis(x, idx, axis=-1), idx]


def reverse_sequence_index(shape: Sequence[int], lengths: Any, seq_axis: int, batch_axis: int, xp: Any = np) -> Any:
    """Where each element of ReverseSequence's output comes from along ``seq_axis``: ``len - 1 - t``
    for ``t < len`` of its batch entry, else ``t`` (``xp``: numpy or jax.numpy)."""
    t = xp.arange(shape[seq_axis]).reshape([-1 if a == seq_axis else 1 for a in range(len(shape))])
    n = xp.reshape(lengths, [-1 if a == batch_axis else 1 for a in range(len(shape))])
    return xp.broadcast_to(xp.where(t < n, n - 1 - t, t), tuple(shape))


@_k("ReverseSequence")
def _reverse_sequence(xs, attrs):
    x, lengths = np.asarray(xs[0]), np.asarray(xs[1])
    sa, ba = attrs["seq_axis"], attrs["batch_axis"]
    if np.any(lengths < 0) or np.any(lengths > x.shape[sa]):
        raise KernelError(f"ReverseSequence: lengths must lie in [0, {x.shape[sa]}], got {lengths.tolist()}")
    return [np.take_along_axis(x, reverse_sequence_index(x.shape, lengths, sa, ba), axis=sa)]


@_k("ZerosLike")
def _zeros_like(xs, attrs):
    return [np.zeros_like(xs[0])]


@_k("OnesLike")
def _ones_like(xs, attrs):
    return [np.ones_like(xs[0])]


@_k("Fill")
def _fill(xs, attrs):
    shp, v = xs
    if np.any(np.asarray(shp) < 0):
        raise KernelError(f"Fill: negative dimension in shape {shp}")
    check_allocation("Fill", [int(d) for d in np.ravel(shp)], np.asarray(v).dtype.itemsize)
    return [np.full(tuple(int(d) for d in shp), v, dtype=np.asarray(v).dtype)]


@_k("CheckpointSlots")
def _checkpoint_slots(xs, attrs):
    return [np.asarray(attrs["slots"], dtype=np.int32)]


@_k("CheckpointTrips")
def _checkpoint_trips(xs, attrs):
    return [xs[0]]


@_k("Shape")
def _shape(xs, attrs):
    return [np.asarray(np.shape(xs[0]), dtype=np.int32)]


@_k("Size")
def _size(xs, attrs):
    return [np.asarray(np.size(xs[0]), dtype=np.int32)]


@_k("BroadcastLike")
def _broadcast_like(xs, attrs):
    x, like = xs
    check_allocation("BroadcastLike", np.shape(like), np.asarray(x).dtype.itemsize)
    try:
        return [np.array(np.broadcast_to(x, np.shape(like)))]
    except ValueError as e:
        raise KernelError(f"BroadcastLike: {e}") from None


def sums_to(x_shape: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``x_shape`` (no more dimensions, and each of its trailing
    dimensions 1 or equal to ``x``'s), so that ``sum_to_shape`` can undo that broadcast. Shared with
    the fast backend's lowering, which decides it when it traces."""
    lead = len(x_shape) - len(shape)
    return lead >= 0 and all(d in (1, x_shape[i + lead]) for i, d in enumerate(shape))


def sum_to_shape(x: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``x`` over the axes that broadcasting to ``x.shape`` added to ``shape``."""
    x = np.asarray(x)
    if not sums_to(x.shape, tuple(shape)):
        raise KernelError(f"SumToLike: a tensor of shape {list(x.shape)} cannot be summed to shape {list(shape)}")
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(shape) if d == 1 and x.shape[i + lead] != 1)
    r = np.sum(x, axis=axes, keepdims=True) if axes else x
    return np.reshape(r, shape).astype(x.dtype, copy=False)


@_k("SumToLike")
def _sum_to_like(xs, attrs):
    return [sum_to_shape(xs[0], np.shape(xs[1]))]


# ---- TensorArray -----------------------------------------------------------------------------------
def _check_ta_index(op: str, ta: TensorArrayValue, i: Any, grows: bool = False) -> int:
    """Slot ``i`` of ``ta``; with ``grows``, a slot past the end of a dynamic array is allowed."""
    i = int(i)
    if grows and ta.dynamic and i >= 0:
        return i
    if not 0 <= i < ta.size:
        raise KernelError(f"{op}: index {i} out of range for a TensorArray of size {ta.size}")
    return i


@_k("TensorArrayNew")
def _ta_new(xs, attrs):
    n = int(xs[0])
    if n < 0:
        raise KernelError(f"TensorArrayNew: negative size {n}")
    check_allocation("TensorArrayNew (its slot table)", [n], TA_SLOT_BYTES)
    es = attrs.get("element_shape")
    if es is not None and all(d is not None for d in es):
        check_ta_capacity(n, tuple(es), attrs["dtype"])
    return [TensorArrayValue(dt.as_dtype(attrs["dtype"]).name, es, (None,) * n, bool(attrs.get("dynamic_size")))]


def _grown(items: Sequence[Any], i: int) -> list[Any]:
    """The slots of a dynamic array with slot ``i`` in it (unwritten slots added as None)."""
    return list(items) + [None] * (i + 1 - len(items))


def check_ta_capacity(size: int, elements: tuple[int, ...], dtype: Any) -> None:
    """The allocation guard for a TensorArray of ``size`` slots of ``elements``, applied once its
    element shape is known (declared, or fixed by the first write). Why its whole capacity and not
    what is written: a compiled backend allocates every slot at once, and the guard must give the
    same verdict on every backend (here the slots are filled one by one)."""
    check_allocation("TensorArray", (size, *elements), np.dtype(dt.as_dtype(dtype).numpy).itemsize)


def ta_element_mismatch(shape: tuple[int, ...], elements: sh.Shape) -> str:
    """The error of a TensorArrayWrite whose value's ``shape`` is not the TensorArray's element shape
    (``elements``: declared, or fixed by the first write), as every backend words it."""
    return (f"TensorArrayWrite: writing a value of shape {sh.fmt(shape)} into a TensorArray of elements "
            f"{sh.fmt(elements)} (every element has the same shape)")


@_k("TensorArrayWrite")
def _ta_write(xs, attrs):
    ta, i, v = xs
    i = _check_ta_index("TensorArrayWrite", ta, i, grows=True)
    if i < ta.size and ta.items[i] is not None and not attrs.get("overwrite", False):
        raise KernelError(f"TensorArrayWrite: slot {i} was already written (TensorArray slots are write-once)")
    v = np.asarray(v)
    es = ta.element_shape
    if attrs.get("ragged", False):  # elements of any shape (an imported list of Optionals): none fixed
        check_ta_capacity(len(ta.items), v.shape, ta.dtype)
        items = _grown(ta.items, i)
        items[i] = v
        return [TensorArrayValue(ta.dtype, None, tuple(items), ta.dynamic)]
    if es is not None and not sh.compatible(tuple(es), v.shape):
        raise KernelError(ta_element_mismatch(v.shape, tuple(es)))
    if es is None or any(d is None for d in es):  # its first write fixes the element shape
        check_ta_capacity(len(ta.items), v.shape, ta.dtype)
    items = _grown(ta.items, i)
    items[i] = v
    # the first write fixes the element shape (as TensorFlow's TensorArrays infer it): a later write of
    # another shape is refused here, at the write, not at a stack that may never come
    return [TensorArrayValue(ta.dtype, v.shape, tuple(items), ta.dynamic)]


@_k("TensorArrayRead")
def _ta_read(xs, attrs):
    ta, i = xs
    i = _check_ta_index("TensorArrayRead", ta, i)
    if ta.items[i] is None:
        raise KernelError(f"TensorArrayRead: slot {i} was never written")
    return [ta.items[i]]


@_k("TensorArrayStack")
def _ta_stack(xs, attrs):
    (ta,) = xs
    missing = [i for i, v in enumerate(ta.items) if v is None]
    if missing and attrs.get("unwritten_zeros"):
        return [_stack_with_zeros(ta, missing)]
    if missing:
        raise KernelError(f"TensorArrayStack: slots {missing[:5]} were never written")
    if not ta.items:  # (the element shape the array declares, else the one its writes have while building)
        es = ta.element_shape if ta.element_shape is not None else attrs.get("element_shape")
        if es is None or any(d is None for d in es):
            raise KernelError("TensorArrayStack: empty TensorArray with an unknown element shape")
        return [np.zeros((0, *es), dtype=_np(ta.dtype))]
    return [np.stack(ta.items, axis=0)]


def _stack_with_zeros(ta: TensorArrayValue, missing: list[int]) -> np.ndarray:
    """The stack of ``ta`` with its unwritten slots (``missing``) as zeros of its element shape, known
    from a write or declared whole: TensorFlow's gather of an array whose element shape is known
    (``dynamic_rnn`` stacks an output array of the time dimension's size that its loop, stopped at
    the longest sequence, wrote only in part)."""
    written = next((v for v in ta.items if v is not None), None)
    es = ta.element_shape if written is None else written.shape
    if es is None or any(d is None for d in es):
        raise KernelError(f"TensorArrayStack: slots {missing[:5]} were never written, and the element shape "
                          "that would make them zeros is not known")
    return _zero_filled(ta, (len(ta.items), *es))


def _zero_filled(ta: TensorArrayValue, shape: tuple[int, ...]) -> np.ndarray:
    """The written slots of ``ta`` in an array of zeros of ``shape`` (its size, then its elements')."""
    out = np.zeros(shape, dtype=_np(ta.dtype))
    for i, v in enumerate(ta.items):
        if v is not None:
            out[i] = v
    return out


@_k("TensorArrayUnstack")
def _ta_unstack(xs, attrs):
    v = np.asarray(xs[0])
    return [TensorArrayValue(dt.as_dtype(v.dtype).name, tuple(v.shape[1:]), tuple(v[i] for i in range(v.shape[0])))]


@_k("TensorArraySize")
def _ta_size(xs, attrs):
    return [np.asarray(xs[0].size, dtype=np.int32)]


def _slot_sum(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return np.asarray(a + b)


@_k("TensorArrayAdd")
def _ta_add(xs, attrs):
    """Gradients of a TensorArray-valued tensor are TensorArrays; contributions add slotwise."""
    a, b = xs
    if a.size != b.size and not (a.dynamic or b.dynamic):
        raise KernelError(f"TensorArrayAdd: sizes differ ({a.size} and {b.size})")
    n = max(a.size, b.size)  # (a dynamic array counts its missing slots as unwritten)
    items = tuple(_slot_sum(x, y) for x, y in zip(_grown(a.items, n - 1), _grown(b.items, n - 1), strict=True))
    return [TensorArrayValue(a.dtype, a.element_shape, items, a.dynamic or b.dynamic)]


@_k("TensorArrayAccumulate")
def _ta_accumulate(xs, attrs):
    """Slot i += v, an unwritten slot counting as zero: the gradient of one TensorArrayRead, added into
    the gradient accumulator without building a full-size TensorArray (only the tuple of slot
    references is copied, never the slots' arrays)."""
    ta, i, v = xs
    i = _check_ta_index("TensorArrayAccumulate", ta, i, grows=True)
    items = _grown(ta.items, i)
    items[i] = _slot_sum(items[i], np.asarray(v))
    return [TensorArrayValue(ta.dtype, ta.element_shape, tuple(items), ta.dynamic)]


@_k("TensorArrayReadOrZeros")
def _ta_read_or_zeros(xs, attrs):
    ta, i, shp = xs
    i = _check_ta_index("TensorArrayReadOrZeros", ta, i, grows=True)
    v = ta.items[i] if i < ta.size else None
    if v is None:
        check_allocation("TensorArrayReadOrZeros", [int(d) for d in shp], dt.as_dtype(ta.dtype).itemsize)
    return [np.zeros(tuple(int(d) for d in shp), dtype=_np(ta.dtype)) if v is None else v]


@_k("TensorArrayStackOrZeros")
def _ta_stack_or_zeros(xs, attrs):
    ta, shp = xs
    shape = tuple(int(d) for d in shp)
    if shape[0] != ta.size:
        raise KernelError(f"TensorArrayStackOrZeros: {ta.size} slots for a leading dimension of {shape[0]}")
    check_allocation("TensorArrayStackOrZeros", shape, dt.as_dtype(ta.dtype).itemsize)
    return [_zero_filled(ta, shape)]


def run_kernel(op: str, inputs: Sequence[Any], attrs: dict[str, Any],
               node_desc: str | Callable[[], str] = "") -> list[Any]:
    """Run a compute kernel, turning numpy failures into KernelError naming the node. ``node_desc`` may
    be a function returning the description: the interpreters pass one, so that the string (node,
    source line, tag) is formatted only when a kernel fails, not at every firing. The op's shape rule
    sees the inputs' shapes first (``shape_rules.concrete_shape_error``): shapes it would refuse at
    build time are refused at run time with its message, rather than given to numpy. Floating-point
    overflow and invalid operations give IEEE's inf and NaN without numpy's RuntimeWarning, as the
    compiled backends give them (a matmul of an infinity warned "invalid value encountered")."""
    try:
        refused = concrete_shape_error(op, inputs, attrs)
        if refused is not None:
            raise KernelError(refused)
        with np.errstate(all="ignore"):
            return KERNELS[op](inputs, attrs)
    except KernelError as e:
        desc = _desc(node_desc)
        raise KernelError(f"{desc}: {e}" if desc else str(e)) from None
    except ResourceExhaustedError as e:
        desc = _desc(node_desc)
        raise ResourceExhaustedError(f"{desc}: {e}" if desc else str(e)) from None
    except MemoryError:
        raise ResourceExhaustedError(f"{_desc(node_desc) or op}: out of memory (the allocation guard's limit, "
                                     "max_tensor_bytes, is above what this machine has)") from None
    except (ValueError, TypeError, IndexError, FloatingPointError) as e:
        raise KernelError(f"{_desc(node_desc) or op}: kernel failed: {e}") from None


def _desc(node_desc: str | Callable[[], str]) -> str:
    return node_desc() if callable(node_desc) else node_desc
