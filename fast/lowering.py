"""Lowering rules: one JAX rule per primitive, keyed by primitive name (``LOWERING_RULES``).

Why a table: every interpreter of Turnout is a table keyed by primitive, and a test checks that
every primitive of ``turnout.primitives`` is here or in ``UNSUPPORTED`` with a reason. The arithmetic
has the same meaning as ``turnout.kernels`` (the reference kernels): integer ``Div`` is floor
division, ``FloorMod`` is numpy's ``mod``, ``Sigmoid`` is ``1 / (1 + exp(-x))``, reductions keep the
input dtype. Run-time kernel errors that numpy raises (integer division by zero, an out-of-range
TensorArray read) cannot raise inside compiled code: ``ctx.check(ok, message)`` records them in an
error word that the backend turns into ``KernelError`` after the run.

Rules take ``(ctx, node, inputs)`` and return the list of output values. Values are numpy arrays
when known at trace time (constants, shapes) — the emitter then folds pure ops with the reference
kernels themselves — or jax arrays, ``TA`` TensorArrays and ``Handle`` s. The control-flow primitives
have rules that the region emitter (``emit``) applies as part of a Cond or While region.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, Optional, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from turnout import dtypes as dt
from turnout import shapes as sh
from turnout.errors import FeedError, ResourceExhaustedError, UnsupportedError, describe_node
from turnout.fast import counted_stacks
from turnout.fast import stacks as stk
from turnout.fast.indexing import put, slot
from turnout.fast.ranges import first_write, known_within
from turnout.fast.values import DEAD, MASK_DTYPE, TA, Handle, is_static
from turnout.graph import Node, Tensor
from turnout.kernels import sums_to, ta_element_mismatch
from turnout.limits import check_allocation
from turnout.primitives import PRIMITIVES
from turnout.shape_rules import SHAPE_RULES, reduced_shape, spec_shape_error
from turnout.tables import registrar


class LoweringContext(Protocol):
    #: the fused stage's trace: loops stop at the first error
    stop_on_error: bool
    #: stack pointers run free (``stk.push``): no pointer of a run whose error word is set is read
    free_pointers: bool

    def check(self, ok: Any, message: str, code: str = "kernel") -> None: ...
    def read_var(self, node: Node, h: Handle) -> Any: ...
    def write_var(self, h: Handle, value: Any) -> None: ...
    def get_stack(self, node: Node, h: Handle) -> stk.StackValue: ...
    def set_stack(self, h: Handle, s: stk.StackValue) -> None: ...
    def note_push(self, node: Node, h: Handle, value: Any) -> None: ...
    def pushed_constant(self, h: Handle) -> Any: ...
    def holds(self, h: Handle) -> bool: ...
    def held_value(self, node: Node, h: Handle) -> Any: ...


Rule = Callable[[LoweringContext, Node, Sequence[Any]], list[Any]]
LOWERING_RULES: dict[str, Rule] = {}

#: primitives the fast backend deliberately does not lower, with the reason.
UNSUPPORTED: dict[str, str] = {
    "Send": "unsupported: partitioned fast execution is a later issue (run partitions with backend='reference')",
    "Recv": "unsupported: partitioned fast execution is a later issue (run partitions with backend='reference')",
}


_r = registrar(LOWERING_RULES)


class NeedsStatic(UnsupportedError):
    """A shape argument (a ``fill`` shape, a TensorArray size, a slice bound) known only at run time,
    computed from root-frame feeds alone.

    Why an error of its own: XLA needs static shapes, but such a program still compiles once those
    feeds are constants of the plan. The backend catches this error, makes the feeds in ``keys``
    static (their values become part of the plan's cache key, so a value seen before never
    recompiles) and traces again. Where nothing is learned (no feed behind the value) it is an
    ordinary ``UnsupportedError`` and the program runs on the interpreter fallback.
    """

    def __init__(self, message: str, keys: frozenset[tuple[int, int]]) -> None:
        super().__init__(message)
        self.keys = keys


#: ops through which a shape argument is not traced back to feeds: their value is not a function of
#: the root frame's feeds alone (loop state, branches, effects)
_NOT_FROM_FEEDS = frozenset({"Merge", "Switch", "NextIteration", "Exit", "LoopCond", "Placeholder", "Sleep"})


def feeds_behind(t: Tensor, fed: set[int], through_switch: bool = False) -> Optional[frozenset[tuple[int, int]]]:
    """The fed tensors whose values alone decide ``t`` (through constants, loop invariants and pure
    ops), or None when something else does: then making feeds static cannot make ``t`` static.
    ``through_switch`` follows a Switch to its value and predicate too: right for the predicate of a
    cond nested in the branch of one whose predicate the same feeds decide (static, that branch is
    taken while tracing and its Switches pass static values on)."""
    keys: set[tuple[int, int]] = set()
    work, seen = [t], set()
    while work:
        u = work.pop()
        n = u.node
        if (n.id, u.index) in seen:
            continue
        seen.add((n.id, u.index))
        if n.id in fed:
            keys.add((n.id, u.index))
        elif through_switch and n.op == "Switch":
            work += list(n.inputs)
        elif (n.op in _NOT_FROM_FEEDS or n.op.startswith(("TensorArray", "Stack", "Assign", "Var"))
              or (n.op == "Enter" and not n.attrs.get("is_constant"))):
            return None
        else:
            work += list(n.inputs)
    return frozenset(keys) if keys else None


def _not_static(ctx: LoweringContext, n: Node, i: int, message: str) -> NoReturn:
    """Refuse a shape argument (input ``i`` of ``n``) that is not static while tracing: ``NeedsStatic``
    when feeds decide it (the backend specialises the plan on their values), else ``UnsupportedError``."""
    keys = feeds_behind(n.inputs[i], getattr(ctx, "fed", set()))
    if keys:
        raise NeedsStatic(message, keys)
    raise UnsupportedError(message)


def _np(d: Any) -> Any:
    return dt.as_dtype(d).numpy


def _is_int(x: Any) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.integer)


# ---- sources and control flow --------------------------------------------------------------------
@_r("Const")
def _const(ctx, n, xs):
    return [np.asarray(n.attrs["value"], dtype=_np(n.attrs["dtype"]))]


@_r("Placeholder")
def _placeholder(ctx, n, xs):
    raise FeedError(f"{describe_node(n)} must be fed: pass a value for {n.outputs[0].name} in feed_dict")


@_r("Switch", "Enter", "Exit", "NextIteration")
def _structural(ctx, n, xs):
    # Applied by the region emitter: a Switch is part of a CondRegion or of its loop's WhileRegion,
    # Enter / Exit / NextIteration are the edges of a WhileRegion ([E-Enter], [E-Exit-Live], [E-Next-Live]).
    raise UnsupportedError(f"fast backend: {describe_node(n)} is not part of any structured region")


@_r("Merge")
def _merge(ctx, n, xs):
    # A Merge that is not the join of a CondRegion has at most one input that can be live
    # ([E-Merge-Live]); the others are statically dead.
    for i, x in enumerate(xs):
        if x is not DEAD:
            return [x, np.asarray(i, np.int32)]
    return [DEAD, DEAD]


@_r("LoopCond", "Identity")
def _identity(ctx, n, xs):
    return [xs[0]]


@_r("Assert")
def _assert(ctx, n, xs):
    # (the value leaves as it came; a false condition sets the error word, raised after the run)
    ctx.check(jnp.asarray(xs[0], bool), f"{describe_node(n)}: Assert: {n.attrs['message']}")
    return [xs[1]]


@_r("Sleep")
def _sleep(ctx, n, xs):
    # A host callback that waits and returns a token; the value passes through an optimization barrier
    # tied to the token, so it leaves the op only after the wait. (The value itself does not go
    # through the callback: a callback's results are checked against the x64 setting of the thread
    # that runs it, which for 64-bit values on a worker thread is not the tracing thread's.) On CPU a
    # compiled call that contains a host callback runs synchronously, so the fast partitioned executor
    # dispatches such segments from per-device threads (devices/fast_executor.py).
    seconds = float(n.attrs["seconds"])
    x = jnp.asarray(xs[0])

    def wait(_: Any) -> Any:
        time.sleep(seconds)
        return np.zeros((), np.int32)

    token = io_callback(wait, jax.ShapeDtypeStruct((), np.int32), jnp.zeros((), jnp.int32) + jnp.sum(x != x))
    out, _ = jax.lax.optimization_barrier((x, token))
    return [out]


@_r("StopGradient")
def _stop_gradient(ctx, n, xs):
    return [xs[0] if is_static(xs[0]) else jax.lax.stop_gradient(xs[0])]


@_r("NoOp")
def _noop(ctx, n, xs):
    return []


# ---- elementwise -----------------------------------------------------------------------------------
def _ew(fn: Callable[..., Any]) -> Rule:
    def rule(ctx, n, xs):
        r = fn(*xs)
        if r.dtype != jnp.bool_:
            r = r.astype(jnp.result_type(*xs))
        return [r]

    return rule


def _holds(ctx: LoweringContext, ok: Any, message: str) -> bool:
    """Check ``ok`` on every element, and say whether it is known to hold: a static ``ok`` (a constant
    divisor or exponent) that holds costs nothing and writes no error word (``facts.cannot_fail``
    counts on it), and the rule needs no guard against the values it excludes."""
    if is_static(ok):
        ok = np.all(ok)
        ctx.check(ok, message)
        return bool(ok)
    ctx.check(jnp.all(ok), message)
    return False


def _div_rule(ctx, n, xs):
    a, b = xs
    if _is_int(a):
        if not _holds(ctx, b != 0, f"{describe_node(n)}: Div: integer division by zero"):
            b = jnp.where(b == 0, 1, b)
        return [jnp.floor_divide(a, b).astype(jnp.result_type(*xs))]
    return [jnp.divide(a, b).astype(jnp.result_type(a, b))]


def _mod_rule(ctx, n, xs):
    a, b = xs
    if _is_int(a) and not _holds(ctx, b != 0, f"{describe_node(n)}: FloorMod: integer modulo by zero"):
        b = jnp.where(b == 0, 1, b)
    return [jnp.mod(a, b).astype(jnp.result_type(*xs))]


def _pow_rule(ctx, n, xs):
    a, b = xs
    if _is_int(a) and not _holds(ctx, b >= 0,
                                 f"{describe_node(n)}: Pow: integers to negative integer powers are not allowed"):
        b = jnp.maximum(b, 0)
    return [jnp.power(a, b).astype(jnp.result_type(*xs))]


LOWERING_RULES.update({
    "Add": _ew(jnp.add), "Sub": _ew(jnp.subtract), "Mul": _ew(jnp.multiply),
    "Div": _div_rule, "FloorMod": _mod_rule, "Pow": _pow_rule,
    "Maximum": _ew(jnp.maximum), "Minimum": _ew(jnp.minimum), "Neg": _ew(jnp.negative),
    "Abs": _ew(jnp.abs), "Sign": _ew(jnp.sign), "Square": _ew(jnp.square),
    "Relu": _ew(lambda x: jnp.maximum(x, jnp.zeros((), jnp.result_type(x)))),
    "Tanh": _ew(jnp.tanh), "Sigmoid": _ew(lambda x: 1 / (1 + jnp.exp(-x))),
    "Exp": _ew(jnp.exp), "Log": _ew(jnp.log), "Sqrt": _ew(jnp.sqrt),
    "Less": _ew(jnp.less), "LessEqual": _ew(jnp.less_equal), "Greater": _ew(jnp.greater),
    "GreaterEqual": _ew(jnp.greater_equal), "Equal": _ew(jnp.equal), "NotEqual": _ew(jnp.not_equal),
    "LogicalAnd": _ew(jnp.logical_and), "LogicalOr": _ew(jnp.logical_or), "LogicalNot": _ew(jnp.logical_not),
})


@_r("Select")
def _select(ctx, n, xs):
    c, a, b = xs
    return [jnp.where(c, a, b)]


@_r("Cast")
def _cast(ctx, n, xs):
    """float -> int has the reference kernels' meaning (``kernels.cast_float_to_int``): truncation
    where representable, else a KernelError (through the error word), never XLA's arbitrary integer."""
    x = jnp.asarray(xs[0])
    target = _np(n.attrs["dtype"])
    if jnp.issubdtype(x.dtype, jnp.floating) and np.issubdtype(target, np.integer):
        info = np.iinfo(target)
        t = jnp.trunc(x)
        ok = jnp.isfinite(t) & (t >= float(info.min)) & (t < -float(info.min))
        ctx.check(jnp.all(ok), f"{describe_node(n)}: Cast: a NaN, infinite or out-of-range value cannot be cast "
                  f"to {np.dtype(target).name} (range [{info.min}, {info.max}]); clip it first")
        return [jnp.where(ok, t, 0).astype(target)]
    return [x.astype(target)]


# ---- linear algebra and structure ------------------------------------------------------------------
@_r("MatMul")
def _matmul(ctx, n, xs):
    a, b = xs
    if n.attrs.get("transpose_a"):
        a = a.T
    if n.attrs.get("transpose_b"):
        b = b.T
    return [jnp.matmul(a, b)]


@_r("Reshape")
def _reshape(ctx, n, xs):
    return [jnp.reshape(xs[0], n.attrs["shape"])]


@_r("ReshapeTo")
def _reshape_to(ctx, n, xs):
    x, shp = xs
    if not is_static(shp):
        _not_static(ctx, n, 1, f"fast backend: {describe_node(n)}: the target shape must be known when compiling")
    target = [int(d) for d in np.ravel(shp)]
    size, known = int(np.prod(jnp.shape(x))), int(np.prod([d for d in target if d != -1]))
    fits = (size == known if -1 not in target else target.count(-1) == 1 and known > 0 and size % known == 0)
    if not fits or any(d < -1 for d in target):  # the kernel's refusal (numpy's), if the op runs
        message = f"ReshapeTo: cannot reshape array of size {size} into shape {tuple(target)}"
        return _fails_when_run(ctx, n, message, [0] * len(target), jnp.result_type(x))
    return [jnp.reshape(x, target)]


@_r("Transpose")
def _transpose(ctx, n, xs):
    return [jnp.transpose(xs[0], n.attrs.get("perm"))]


@_r("ExpandDims")
def _expand(ctx, n, xs):
    return [jnp.expand_dims(xs[0], n.attrs["axis"])]


@_r("Concat")
def _concat(ctx, n, xs):
    return [jnp.concatenate(xs, axis=n.attrs["axis"])]


@_r("Pack")
def _pack(ctx, n, xs):
    return [jnp.stack(xs, axis=0)]


def _index(ctx: LoweringContext, n: Node, shape: Sequence[int], dyn: Sequence[Any]) -> tuple[Any, ...]:
    """A GetItem spec as a JAX index; dynamic indices are bounds-checked like ``kernels.build_index``."""

    def val(v: Any, what: str) -> Any:
        if isinstance(v, dict):
            d = dyn[v["input"]]
            if is_static(d):
                return int(d)
            if what == "slice":
                _not_static(ctx, n, len(n.inputs) - len(dyn) + v["input"],
                            f"fast backend: {describe_node(n)} slices with a bound known only at run time; XLA "
                            "needs static slice sizes")
            return d
        return v

    idx: list[Any] = []
    for i, e in enumerate(n.attrs["spec"]):
        if e["kind"] == "index":
            v = val(e["value"], "index")
            if not known_within(ctx, v, -shape[i], shape[i] - 1):
                ctx.check((v >= -shape[i]) & (v < shape[i]),
                          f"{describe_node(n)}: GetItem: index out of range for dimension {i} of size {shape[i]}")
            idx.append(v)
        else:
            idx.append(slice(val(e["start"], "slice"), val(e["stop"], "slice"), val(e["step"], "slice")))
    return tuple(idx)


def _indexes_empty(n: Node, shape: Sequence[int]) -> bool:
    """Whether a GetItem takes an integer index into a dimension of size 0. Its bounds check
    (``_index``) then always fails when it runs, and JAX refuses to trace the indexing at all; the rule
    returns zeros of the result's shape instead, so a GetItem that never runs (on an untaken branch)
    costs nothing, and one that runs raises the interpreters' ``KernelError``."""
    return any(e["kind"] == "index" and shape[i] == 0 for i, e in enumerate(n.attrs["spec"]))


def _clamped(idx: tuple[Any, ...], shape: Sequence[int]) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """``idx`` and ``shape`` with every integer index into a dimension of size 0 made index 0 of a
    dimension of size 1: the same result shape, indexing JAX can trace (see ``_indexes_empty``)."""
    out, like = [], []
    for i, size in enumerate(shape):
        e = idx[i] if i < len(idx) else slice(None)
        empty = size == 0 and not isinstance(e, slice)
        out.append(0 if empty else e)
        like.append(1 if empty else size)
    return tuple(out), tuple(like)


@_r("GetItem")
def _getitem(ctx, n, xs):
    x = jnp.asarray(xs[0])
    idx = _index(ctx, n, x.shape, xs[1:])
    if _indexes_empty(n, x.shape):
        idx, like = _clamped(idx, x.shape)
        return [jnp.zeros(like, x.dtype)[idx]]
    return [x[idx]]


@_r("GetItemGrad")
def _getitem_grad(ctx, n, xs):
    like, g = xs[0], jnp.asarray(xs[1])
    shape = tuple(jnp.shape(like))
    idx = _index(ctx, n, shape, xs[2:])
    if _indexes_empty(n, shape):  # the forward GetItem failed if it ran (``_indexes_empty``)
        return [jnp.zeros(shape, g.dtype)]
    padding = _pad_config(idx, shape)
    if padding is not None:
        return [jax.lax.pad(g.reshape(padding[1]), np.zeros((), g.dtype), padding[0])]
    out = jnp.zeros(shape, g.dtype)
    return [out.at[idx].add(g)]


def _pad_config(idx: tuple[Any, ...], shape: tuple[int, ...]
                ) -> Optional[tuple[list[tuple[int, int, int]], tuple[int, ...]]]:
    """For an index of static integers and forward slices: the ``lax.pad`` configuration that puts a
    gradient back where the index took it from, and the shape to give the gradient first (its
    indexed dimensions restored as 1); ``None`` for any other index (the scatter-add handles it).

    Why: ``zeros.at[idx].add(g)`` becomes a scatter that XLA lowers to a pad and a select on its
    bounds check, a kernel more per sliced gate in every backward iteration of an LSTM. A static
    slice's gradient is exactly a pad with zeros, as ``jax.grad`` of a slice gives it."""
    config: list[tuple[int, int, int]] = []
    inner: list[int] = []
    for d, size in enumerate(shape):
        e = idx[d] if d < len(idx) else slice(None)
        if isinstance(e, slice):
            if not all(v is None or isinstance(v, (int, np.integer)) for v in (e.start, e.stop, e.step)):
                return None
            start, stop, step = e.indices(size)
            if step < 1:
                return None
            count = len(range(start, stop, step))
            if count == 0:
                return None
            last = start + (count - 1) * step
            config.append((start, size - 1 - last, step - 1))
            inner.append(count)
        elif isinstance(e, (int, np.integer)):
            i = int(e) + size if e < 0 else int(e)
            config.append((i, size - 1 - i, 0))
            inner.append(1)
        else:
            return None
    return config, tuple(inner)


@_r("Gather")
def _gather(ctx, n, xs):
    x, idx = xs
    ax = n.attrs.get("axis", 0)
    size = jnp.shape(x)[ax]
    message = f"Gather: index out of range for axis {ax} of size {size}"
    if size == 0 and np.size(idx) > 0:  # every index is out of range (and JAX refuses to trace the take)
        shape = list(jnp.shape(x))
        shape[ax:ax + 1] = list(jnp.shape(idx))
        return _fails_when_run(ctx, n, message, shape, jnp.result_type(x))
    ctx.check(jnp.all((idx >= -size) & (idx < size)), f"{describe_node(n)}: {message}")
    return [jnp.take(x, jnp.where(idx < 0, idx + size, idx), axis=ax)]


@_r("ScatterAddLike")
def _scatter_add_like(ctx, n, xs):
    like, idx, upd = xs
    upd = jnp.asarray(upd)
    idx = jnp.asarray(idx)
    ax = n.attrs.get("axis", 0)
    out = jnp.moveaxis(jnp.zeros(jnp.shape(like), upd.dtype), ax, 0)
    upd_m = jnp.moveaxis(upd, list(range(ax, ax + idx.ndim)), list(range(idx.ndim)))
    return [jnp.moveaxis(out.at[idx].add(upd_m), 0, ax)]


def _guard(n: Node, shape: Sequence[int], dtype: Any) -> None:
    """The allocation guard (``turnout.limits``), applied when the program is traced: shapes are static."""
    try:
        check_allocation(n.op, shape, np.dtype(dtype).itemsize)
    except ResourceExhaustedError as e:
        raise ResourceExhaustedError(f"{describe_node(n)}: {e}") from None


@_r("Tile")
def _tile(ctx, n, xs):
    x = jnp.asarray(xs[0])
    reps = list(n.attrs["multiples"])
    shape = [1] * (len(reps) - x.ndim) + list(x.shape)
    reps = [1] * (len(shape) - len(reps)) + reps
    _guard(n, [d * r for d, r in zip(shape, reps, strict=True)], x.dtype)
    return [jnp.tile(x, n.attrs["multiples"])]


def _axis(n: Node) -> Any:
    a = n.attrs.get("axis")
    return tuple(a) if isinstance(a, list) else a


def _reduce(fn: Callable[..., Any], empty_fails: bool = False) -> Rule:
    """A reduction's rule. Its axes are checked against the rank seen when tracing (a placeholder of
    unknown rank gets its rank only then): an axis out of range is refused, and the program runs on
    the reference interpreter, which raises its ``KernelError`` if the op runs. A scalar takes axis 0
    only, and is its own reduction (``kernels._axis_arg``, the shape rule's choice). ``empty_fails``: a
    reduction with no identity (``Max``) fails on an empty tensor when it runs, as the interpreters'
    kernel does (``kernels._max``); JAX would refuse to trace it, so zeros of the result's shape stand in."""
    def rule(ctx, n, xs):
        x = jnp.asarray(xs[0])
        axis = _axis(n)
        axes = axis if isinstance(axis, tuple) else () if axis is None else (axis,)
        if x.ndim == 0:  # a scalar: axis 0 reduces over nothing (``kernels._axis_arg``)
            bad = [a for a in axes if a != 0]
            axis = None
        else:
            bad = [a for a in axes if not -x.ndim <= a < x.ndim]
        if bad or (x.ndim and len({a % x.ndim for a in axes}) != len(axes)):
            what = f"axis {bad[0]} is out of range" if bad else f"axes {list(axes)} repeat a dimension"
            raise UnsupportedError(f"fast backend: {describe_node(n)}: {what} for a tensor of rank {x.ndim}")
        keep = n.attrs.get("keepdims", False)
        if empty_fails and x.size == 0:
            shape = reduced_shape(x.shape, axis, keep)  # (the shape rule's answer, now that the rank is known)
            assert shape is not None
            return _fails_when_run(ctx, n, f"{n.op}: reduction over an empty tensor", shape, x.dtype)
        return [fn(x, axis=axis, keepdims=keep).astype(x.dtype)]

    return rule


LOWERING_RULES.update({"Sum": _reduce(jnp.sum), "Mean": _reduce(jnp.mean), "Max": _reduce(jnp.max, empty_fails=True)})
LOWERING_RULES.update({"Min": _reduce(jnp.min, empty_fails=True), "All": _reduce(jnp.all), "Any": _reduce(jnp.any)})


def _arg_reduce(fn: Callable[..., Any]) -> Rule:
    def rule(ctx, n, xs):
        x = jnp.asarray(xs[0])
        ax = n.attrs.get("axis", 0)
        d = _np(n.attrs.get("dtype", "int64"))
        if x.ndim == 0 or x.shape[ax] == 0:  # the kernel's refusal, if the op runs
            shape = [s for i, s in enumerate(x.shape) if i != ax % max(x.ndim, 1)]
            return _fails_when_run(ctx, n, f"{n.op}: reduction over an empty axis {ax} of shape {list(x.shape)}",
                                   shape, d)
        return [fn(x, axis=ax).astype(d)]

    return rule


LOWERING_RULES.update({"ArgMax": _arg_reduce(jnp.argmax), "ArgMin": _arg_reduce(jnp.argmin)})


@_r("TopK")
def _top_k(ctx, n, xs):
    """``lax.top_k``: largest first, the lower index first among equal values, as the kernel."""
    x = jnp.asarray(xs[0])
    k = int(n.attrs["k"])
    if x.ndim == 0 or x.shape[-1] < k:
        raise UnsupportedError(f"fast backend: {describe_node(n)}: fewer than k={k} entries in shape {list(x.shape)}")
    values, idx = jax.lax.top_k(x, k)
    return [values, idx.astype(jnp.int32)]


@_r("ReverseSequence")
def _reverse_sequence(ctx, n, xs):
    from turnout.kernels import reverse_sequence_index

    x, lengths = jnp.asarray(xs[0]), jnp.asarray(xs[1])
    sa, ba = n.attrs["seq_axis"], n.attrs["batch_axis"]
    ctx.check(jnp.all((lengths >= 0) & (lengths <= x.shape[sa])),
              f"{describe_node(n)}: ReverseSequence: lengths must lie in [0, {x.shape[sa]}]")
    return [jnp.take_along_axis(x, reverse_sequence_index(x.shape, lengths, sa, ba, jnp), axis=sa)]


@_r("ZerosLike")
def _zeros_like(ctx, n, xs):
    return [jnp.zeros_like(xs[0])]


@_r("OnesLike")
def _ones_like(ctx, n, xs):
    return [jnp.ones_like(xs[0])]


@_r("Fill")
def _fill(ctx, n, xs):
    shp, v = xs
    if not is_static(shp):
        _not_static(ctx, n, 0, f"fast backend: {describe_node(n)}: the shape of Fill must be known when compiling")
    _guard(n, [int(d) for d in np.ravel(shp)], jnp.result_type(v))
    return [jnp.full(tuple(int(d) for d in shp), v, dtype=jnp.result_type(v))]


@_r("Shape")
def _shape(ctx, n, xs):
    return [np.asarray(jnp.shape(xs[0]), dtype=np.int32)]


@_r("Size")
def _size(ctx, n, xs):
    return [np.asarray(int(np.prod(jnp.shape(xs[0]))), dtype=np.int32)]


def refused_by_shape_rule(ctx: LoweringContext, n: Node, xs: Sequence[Any]) -> Optional[list[Any]]:
    """When ``n``'s shape rule refuses the shapes its inputs have in this trace
    (``shape_rules.spec_shape_error``, the check the interpreters make at run time): the rule's
    message as an error raised if ``n`` runs, and zeros of ``n``'s static output types standing in,
    so a node on a branch that is not taken costs nothing. ``None`` when the rule takes them (or
    an input is not an array: a TensorArray, a handle, a dead value)."""
    if n.op not in SHAPE_RULES or not xs or not all(hasattr(x, "shape") and hasattr(x, "dtype") for x in xs):
        return None
    refused = spec_shape_error(n.op, [(np.dtype(x.dtype), tuple(x.shape)) for x in xs], n.attrs)
    if refused is None:
        return None
    ctx.check(np.asarray(False), f"{describe_node(n)}: {refused}")
    return [jnp.zeros(tuple(d or 0 for d in (o.shape or ())), o.dtype.numpy) for o in n.outputs]


def _fails_when_run(ctx: LoweringContext, n: Node, message: str, shape: Sequence[int], dtype: Any) -> list[Any]:
    """An op whose operands' shapes (known once traced) make it fail whenever it runs: the error word
    says so if it runs, and zeros of its result's shape stand in, so an op on a branch that is not
    taken costs nothing (the interpreters raise ``KernelError`` only where it runs)."""
    ctx.check(np.asarray(False), f"{describe_node(n)}: {message}")
    return [jnp.zeros(tuple(shape), dtype)]


@_r("BroadcastLike")
def _broadcast_like(ctx, n, xs):
    shape, dtype = tuple(jnp.shape(xs[1])), jnp.result_type(xs[0])
    _guard(n, shape, dtype)
    if not sums_to(shape, tuple(jnp.shape(xs[0]))):
        return _fails_when_run(ctx, n, f"BroadcastLike: shape {list(jnp.shape(xs[0]))} does not broadcast to "
                                       f"{list(shape)}", shape, dtype)
    return [jnp.broadcast_to(xs[0], shape)]


def sum_to_shape(x: Any, shape: tuple[int, ...]) -> Any:
    """``kernels.sum_to_shape`` in jax.numpy."""
    x = jnp.asarray(x)
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(shape) if d == 1 and x.shape[i + lead] != 1)
    r = jnp.sum(x, axis=axes, keepdims=True) if axes else x
    return jnp.reshape(r, shape).astype(x.dtype)


@_r("SumToLike")
def _sum_to_like(ctx, n, xs):
    shape = tuple(jnp.shape(xs[1]))
    if not sums_to(tuple(jnp.shape(xs[0])), shape):
        return _fails_when_run(ctx, n, f"SumToLike: a tensor of shape {list(jnp.shape(xs[0]))} cannot be summed "
                                       f"to shape {list(shape)}", shape, jnp.result_type(xs[0]))
    return [sum_to_shape(xs[0], shape)]


# ---- TensorArray -----------------------------------------------------------------------------------
def _ta_index(ctx: LoweringContext, n: Node, ta: TA, i: Any, op: str) -> Any:
    """Slot ``i`` of ``ta``, checked to be in range (a constant, or an index the trace has proved in
    range, needs no check: ``fast.ranges``), clamped into it: a Python int when it is a constant,
    so that indexing with it is static."""
    if is_static(i):
        ctx.check(np.asarray(0 <= int(i) < ta.size), f"{describe_node(n)}: {op}: index out of range for a "
                  f"TensorArray of size {ta.size}")
        return min(max(int(i), 0), max(ta.size - 1, 0))
    if known_within(ctx, i, 0, ta.size - 1):  # a fold's counter (``fast.ranges``): nothing to check
        return i
    ctx.check((i >= 0) & (i < ta.size), f"{describe_node(n)}: {op}: index out of range for a TensorArray of "
              f"size {ta.size}")
    return jnp.clip(i, 0, max(ta.size - 1, 0))


@_r("TensorArrayNew")
def _ta_new(ctx, n, xs):
    if n.attrs.get("dynamic_size"):
        raise UnsupportedError(f"fast backend: {describe_node(n)}: a TensorArray of dynamic size grows with its "
                               "writes, and an XLA buffer cannot")
    if not is_static(xs[0]):
        _not_static(ctx, n, 0,
                    f"fast backend: {describe_node(n)}: a TensorArray's size must be known when compiling (it may "
                    "depend on the shapes and values of fed tensors, not on loop state)")
    size = int(xs[0])
    _guard(n, [max(size, 0)], np.int64)  # the slot table, counted as in the reference kernels
    if size < 0:
        ctx.check(np.asarray(False), f"{describe_node(n)}: TensorArrayNew: negative size {size}")
        size = 0
    es = n.attrs.get("element_shape")
    ta = TA(size, _np(n.attrs["dtype"]), None, written=frozenset())
    if es is not None and all(d is not None for d in es):
        ta = ta.materialize(tuple(es), n)
    return [ta]


@_r("TensorArrayWrite")
def _ta_write(ctx, n, xs):
    ta, i, v = xs
    v = jnp.asarray(v, ta.dtype)
    # the element shape the graph declares (or earlier writes fixed), checked as the reference kernel
    # checks it; a mismatch fails when the write runs (it may sit in a branch never taken)
    declared = n.inputs[0].spec.elem_shape if ta.pending else ta.elem_shape
    if not sh.compatible(declared, tuple(v.shape)):
        ctx.check(np.asarray(False), f"{describe_node(n)}: {ta_element_mismatch(tuple(v.shape), declared)}")
        if not ta.pending:
            return [ta]
    if ta.pending:
        ta = ta.materialize(tuple(v.shape), n)
    j = _ta_index(ctx, n, ta, i, "TensorArrayWrite")
    if ta.size:
        if first_write(ctx, n, ta.written, i):  # (``fast.ranges``: no slot is written twice)
            mask = put(ta.mask, j, np.ones((), MASK_DTYPE))
        else:
            mask = ta.mask.at[j].add(1)  # the check reads the updated count: the update stays in place (TA)
            ctx.check(mask[j] == 1, f"{describe_node(n)}: TensorArrayWrite: a slot was already written (TensorArray "
                      "slots are write-once)")
        return [TA(ta.size, ta.dtype, ta.elem_shape, put(ta.buf, j, v), mask, written=_written(ta, i))]
    return [ta]


#: the most constant slots whose writes a TensorArray's ``written`` records
_WRITTEN_MAX = 64


def _written(ta: TA, i: Any) -> Optional[frozenset[int]]:
    """The slots known written after ``ta`` is written at ``i``: ``None`` (unknown) unless the
    slots before were known and ``i`` is a constant."""
    if ta.written is None or not is_static(i) or len(ta.written) >= _WRITTEN_MAX:
        return None
    return ta.written | {int(i)}


@_r("TensorArrayRead")
def _ta_read(ctx, n, xs):
    ta, i = xs
    if ta.pending:
        raise UnsupportedError(f"fast backend: {describe_node(n)} reads a TensorArray whose element shape is unknown "
                               "(nothing was written to it); give element_shape")
    j = _ta_index(ctx, n, ta, i, "TensorArrayRead")
    if not ta.size:
        return [jnp.zeros(ta.elem_shape, ta.dtype)]
    if not ta.full:
        ctx.check(slot(ta.mask, j) > 0, f"{describe_node(n)}: TensorArrayRead: slot was never written")
    return [slot(ta.buf, j)]


@_r("TensorArrayStack")
def _ta_stack(ctx, n, xs):
    (ta,) = xs
    if ta.pending:
        if ta.size:
            raise UnsupportedError(f"fast backend: {describe_node(n)} stacks a TensorArray nothing was written to")
        raise UnsupportedError(f"fast backend: {describe_node(n)}: empty TensorArray with an unknown element shape")
    if ta.size:
        ctx.check(jnp.all(ta.mask > 0), f"{describe_node(n)}: TensorArrayStack: some slots were never written")
    return [ta.buf]


@_r("TensorArrayUnstack")
def _ta_unstack(ctx, n, xs):
    v = jnp.asarray(xs[0])
    return [TA(v.shape[0], v.dtype, tuple(v.shape[1:]), v, jnp.ones((v.shape[0],), MASK_DTYPE), full=True)]


@_r("TensorArraySize")
def _ta_size(ctx, n, xs):
    return [np.asarray(xs[0].size, np.int32)]


# ---- state: Variables and gradient stacks ----------------------------------------------------------
@_r("VarHandle")
def _var_handle(ctx, n, xs):
    return [Handle("var", n.attrs["var_name"])]


@_r("ReadVariable")
def _read_var(ctx, n, xs):
    return [ctx.read_var(n, xs[0])]


def _assign(combine: Callable[[Any, Any], Any]) -> Rule:
    def rule(ctx, n, xs):
        h, v = xs
        new = jnp.asarray(combine(ctx.read_var(n, h), v)).astype(_np(n.attrs["dtype"]))
        ctx.write_var(h, new)
        return [new]

    return rule


LOWERING_RULES.update({
    "AssignVariable": _assign(lambda old, v: v),
    "AssignAddVariable": _assign(lambda old, v: old + v),
    "AssignSubVariable": _assign(lambda old, v: old - v),
})


@_r("StackNew")
def _stack_new(ctx, n, xs):
    return [Handle("stack", n.id)]


@_r("StackPush")
def _stack_push(ctx, n, xs):
    h, index, v = xs
    if ctx.holds(h):  # its one value is taken as its loop starts (``fast.held``)
        return [v]
    s0 = ctx.get_stack(n, h)
    # a counted stack whose chain of loops is being traced: the push is proved to fit and to land at
    # its index's position, and no pop reads its index record (``fast.counted_stacks``)
    key = stk.state_key(h.name)
    proved = key in getattr(ctx, "dense", ())
    if proved and key in ctx.counter_pushes:  # it pushes a counter: its pops compute the value from their index
        ctx.note_push(n, h, v)
        ctx.note_push_range(h, v)
        return [v]
    if proved and is_static(v):
        ctx.note_push(n, h, v)
        if ctx.pushed_constant(h) is not None:  # every pop returns the constant: nothing to write
            ctx.skip_push(h)
            return [v]
    try:
        s, ok = stk.push(s0, index, v, free=ctx.free_pointers, proved=proved)
    except UnsupportedError as e:  # a value whose shape differs from the stack's elements: name the push
        raise UnsupportedError(f"{describe_node(n)}: {e}") from None
    if proved:
        ctx.note_push_range(h, v)
    else:
        # one message for every positional push: a failed one only sends the run back to index records
        ctx.check(stk.positional(s0, index), "a positional stack pushed away from its position", code="unrecorded")
        ctx.check(ok, f"{describe_node(n)}: stack chunk overflow", code="overflow")
    ctx.set_stack(h, s)
    ctx.note_push(n, h, v)
    return [v]


@_r("StackPop")
def _stack_pop(ctx, n, xs):
    h, index = xs
    if ctx.holds(h):
        return [ctx.held_value(n, h)]
    s0 = ctx.get_stack(n, h)
    if s0.pending:
        ctx.check(np.asarray(False), f"{describe_node(n)}: StackPop on an empty stack", code="underflow")
        shape = tuple(d or 0 for d in (n.outputs[0].shape or ()))
        return [jnp.zeros(shape, _np(n.attrs["dtype"]))]
    const = ctx.pushed_constant(h)  # every push pushed this constant: the pop's value is known (a shape)
    dims = getattr(ctx, "full", {}).get(stk.state_key(h.name))
    if dims is not None:  # a counted stack after its chain: an entry at every position (``fast.counted_stacks``)
        safe = counted_stacks.proved(ctx.ranges.each(index), dims)
        if not safe:
            ctx.check(counted_stacks.in_range(index, dims), f"{describe_node(n)}: StackPop: the popped value was "
                      "pushed under another iteration index (pushes and pops are not in reverse order)")
        if const is not None:
            return [const]
        counter = ctx.counter_pushes.get(stk.state_key(h.name))
        if counter is not None:  # the entry under the index is the counter's value there
            v = counted_stacks.value_of_counter(index, *counter)
            ctx.pop_range(h, v)
            return [v]
        ctx.read_skipped(n, h)  # (a push that wrote nothing, for a constant a later trace contradicted)
        v = counted_stacks.read(s0.buf, index, dims)
        ctx.pop_range(h, v)
        return [v]
    s, v, ok, match = stk.pop(s0, index, free=ctx.free_pointers)
    ctx.check(ok, f"{describe_node(n)}: StackPop on an empty stack", code="underflow")
    ctx.check(match, f"{describe_node(n)}: StackPop: the popped value was pushed under another iteration index "
              "(pushes and pops are not in reverse order)")
    ctx.set_stack(h, s)
    return [v if const is None else const]


def missing_rules() -> list[str]:
    """Primitives with neither a rule nor an UNSUPPORTED reason (the completeness test wants [])."""
    return sorted(p for p in PRIMITIVES if p not in LOWERING_RULES and p not in UNSUPPORTED)


# ---- TensorArray gradients: unwritten slots count as zeros -----------------------------------------
def _zeroed(ta: TA) -> Any:
    """The buffer with unwritten slots as zeros (buffers start as zeros, but say so explicitly)."""
    m = ta.mask.reshape(ta.mask.shape + (1,) * (ta.buf.ndim - 1))
    return jnp.where(m > 0, ta.buf, jnp.zeros((), ta.dtype))


@_r("TensorArrayAdd")
def _ta_add(ctx, n, xs):
    a, b = xs
    if a.size != b.size:
        raise UnsupportedError(f"fast backend: {describe_node(n)}: TensorArrayAdd of sizes {a.size} and {b.size}")
    if a.pending:
        return [b]
    if b.pending:
        return [a]
    return [TA(a.size, a.dtype, a.elem_shape, _zeroed(a) + _zeroed(b), jnp.maximum(a.mask, b.mask))]


@_r("TensorArrayAccumulate")
def _ta_accumulate(ctx, n, xs):
    """Slot i += v in place (an unwritten slot counts as zero): O(element) work per call, so the
    gradient of a scan over n elements stays O(n) in all.

    The old value is ``buf[j]`` alone, without ``mask[j]``: every TA keeps its unwritten slots zero
    (``materialize`` starts from zeros, ``TensorArrayAdd`` adds zeroed buffers). Why it matters: XLA
    fuses a read of ``mask[j]`` into the buffer update, which then reads the whole mask while the
    mask update writes it in place; with nothing ordering the two, XLA copied the mask twice in every
    iteration of the backward loop (seen in the optimized HLO of the scan gradient), O(n) per
    iteration."""
    ta, i, v = xs
    v = jnp.asarray(v, ta.dtype)
    if ta.pending:
        ta = ta.materialize(tuple(v.shape), n)
    if not ta.size:
        return [ta]
    j = _ta_index(ctx, n, ta, i, "TensorArrayAccumulate")
    return [TA(ta.size, ta.dtype, ta.elem_shape, ta.buf.at[j].add(v), ta.mask.at[j].set(1))]


def _static_shape(ctx: LoweringContext, n: Node, shp: Any, i: int) -> tuple[int, ...]:
    if not is_static(shp):
        _not_static(ctx, n, i, f"fast backend: {describe_node(n)}: the shape must be known when compiling")
    return tuple(int(d) for d in np.asarray(shp))


@_r("TensorArrayReadOrZeros")
def _ta_read_or_zeros(ctx, n, xs):
    ta, i, shp = xs
    shape = _static_shape(ctx, n, shp, 2)
    if ta.pending or not ta.size:
        if not known_within(ctx, i, 0, ta.size - 1):
            ctx.check((i >= 0) & (i < ta.size), f"{describe_node(n)}: TensorArrayReadOrZeros: index out of range "
                      f"for a TensorArray of size {ta.size}")
        return [jnp.zeros(shape, ta.dtype)]
    j = _ta_index(ctx, n, ta, i, "TensorArrayReadOrZeros")
    return [jnp.where(slot(ta.mask, j) > 0, slot(ta.buf, j), jnp.zeros((), ta.dtype)).reshape(shape)]


@_r("TensorArrayStackOrZeros")
def _ta_stack_or_zeros(ctx, n, xs):
    ta, shp = xs
    shape = _static_shape(ctx, n, shp, 1)
    if shape[0] != ta.size:
        raise UnsupportedError(f"fast backend: {describe_node(n)}: {ta.size} slots for a leading dimension of "
                               f"{shape[0]}")
    if ta.pending:
        return [jnp.zeros(shape, ta.dtype)]
    return [_zeroed(ta).reshape(shape)]
