"""Lowering rules of linear algebra and structure: matrix products, reshapes, indexing (``GetItem``
and its gradient), gathers, reductions, shapes and broadcasts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout import dtypes as dt
from turnout.errors import UnsupportedError, describe_node
from turnout.fast.lowering_base import (
    LOWERING_RULES,
    LoweringContext,
    Rule,
    fails_when_run,
    guard,
    lowering_rule,
    not_static,
    np_dtype,
)
from turnout.fast.ranges import known_within
from turnout.fast.values import MASK_DTYPE, TA, is_static
from turnout.graph import Node
from turnout.kernels import extremum_identity, sums_to
from turnout.shape_rules import SHAPE_RULES, reduced_shape, scalar_operand_error, spec_shape_error


# ---- linear algebra and structure ------------------------------------------------------------------
@lowering_rule("MatMul")
def _matmul(ctx, n, xs):
    a, b = xs
    if n.attrs.get("transpose_a"):
        a = jnp.swapaxes(a, -1, -2)
    if n.attrs.get("transpose_b"):
        b = jnp.swapaxes(b, -1, -2)
    return [jnp.matmul(a, b)]


@lowering_rule("Reshape")
def _reshape(ctx, n, xs):
    return [jnp.reshape(xs[0], n.attrs["shape"])]


@lowering_rule("ReshapeTo")
def _reshape_to(ctx, n, xs):
    x, shp = xs
    if not is_static(shp):
        not_static(ctx, n, 1, f"fast backend: {describe_node(n)}: the target shape must be known when compiling")
    target = [int(d) for d in np.ravel(shp)]
    size, known = int(np.prod(jnp.shape(x))), int(np.prod([d for d in target if d != -1]))
    fits = (size == known if -1 not in target else target.count(-1) == 1 and known > 0 and size % known == 0)
    if not fits or any(d < -1 for d in target):  # the kernel's refusal (numpy's), if the op runs
        message = f"ReshapeTo: cannot reshape array of size {size} into shape {tuple(target)}"
        return fails_when_run(ctx, n, message, [0] * len(target), jnp.result_type(x))
    return [jnp.reshape(x, target)]


@lowering_rule("Transpose")
def _transpose(ctx, n, xs):
    return [jnp.transpose(xs[0], n.attrs.get("perm"))]


@lowering_rule("ExpandDims")
def _expand(ctx, n, xs):
    return [jnp.expand_dims(xs[0], n.attrs["axis"])]


@lowering_rule("Concat")
def _concat(ctx, n, xs):
    return [jnp.concatenate(xs, axis=n.attrs["axis"])]


@lowering_rule("Pack")
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
                not_static(ctx, n, len(n.inputs) - len(dyn) + v["input"],
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


@lowering_rule("GetItem")
def _getitem(ctx, n, xs):
    x = jnp.asarray(xs[0])
    idx = _index(ctx, n, x.shape, xs[1:])
    if _indexes_empty(n, x.shape):
        idx, like = _clamped(idx, x.shape)
        return [jnp.zeros(like, x.dtype)[idx]]
    return [x[idx]]


@lowering_rule("GetItemGrad")
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


@lowering_rule("Gather")
def _gather(ctx, n, xs):
    x, idx = xs
    ax = n.attrs.get("axis", 0)
    size = jnp.shape(x)[ax]
    message = f"Gather: index out of range for axis {ax} of size {size}"
    if size == 0 and np.size(idx) > 0:  # every index is out of range (and JAX refuses to trace the take)
        shape = list(jnp.shape(x))
        shape[ax:ax + 1] = list(jnp.shape(idx))
        return fails_when_run(ctx, n, message, shape, jnp.result_type(x))
    ctx.check(jnp.all((idx >= -size) & (idx < size)), f"{describe_node(n)}: {message}")
    return [jnp.take(x, jnp.where(idx < 0, idx + size, idx), axis=ax)]


@lowering_rule("ScatterAddLike")
def _scatter_add_like(ctx, n, xs):
    like, idx, upd = xs
    upd = jnp.asarray(upd)
    idx = jnp.asarray(idx)
    ax = n.attrs.get("axis", 0) % max(jnp.ndim(like), 1)  # (``kernels._scatter_add_like``: from the end)
    size = jnp.shape(like)[ax] if jnp.ndim(like) else 1
    # (XLA would drop an update out of range: the interpreters' error instead, as Gather's)
    ctx.check(jnp.all((idx >= -size) & (idx < size)),
              f"{describe_node(n)}: ScatterAddLike: index out of range for axis {ax} of size {size}")
    out = jnp.moveaxis(jnp.zeros(jnp.shape(like), upd.dtype), ax, 0)
    upd_m = jnp.moveaxis(upd, list(range(ax, ax + idx.ndim)), list(range(idx.ndim)))
    return [jnp.moveaxis(out.at[idx].add(upd_m), 0, ax)]


@lowering_rule("UpdateSlot")
def _update_slot(ctx, n, xs):
    """``lax.dynamic_update_index_in_dim``: XLA writes the slot in place when ``x`` is not read again."""
    x, i, v = jnp.asarray(xs[0]), jnp.asarray(xs[1]), jnp.asarray(xs[2])
    size = x.shape[0]
    ctx.check((i >= -size) & (i < size), f"{describe_node(n)}: UpdateSlot: index out of range for axis 0 of "
                                         f"size {size}")
    return [jax.lax.dynamic_update_index_in_dim(x, v.astype(x.dtype), jnp.where(i < 0, i + size, i), 0)]


@lowering_rule("Tile")
def _tile(ctx, n, xs):
    x = jnp.asarray(xs[0])
    reps = list(n.attrs["multiples"])
    shape = [1] * (len(reps) - x.ndim) + list(x.shape)
    reps = [1] * (len(shape) - len(reps)) + reps
    guard(n, [d * r for d, r in zip(shape, reps, strict=True)], x.dtype)
    return [jnp.tile(x, n.attrs["multiples"])]


def _axis(n: Node) -> Any:
    a = n.attrs.get("axis")
    return tuple(a) if isinstance(a, list) else a


def _reduce(fn: Callable[..., Any], extremum: Optional[str] = None) -> Rule:
    """A reduction's rule. Its axes are checked against the rank seen when tracing (a placeholder of
    unknown rank gets its rank only then): an axis out of range is refused, and the program runs on
    the reference interpreter, which raises its ``KernelError`` if the op runs. A scalar takes axis 0
    only, and is its own reduction (``kernels._axis_arg``, the shape rule's choice). ``extremum``
    (``Max`` or ``Min``): an empty input gives the reduction's identity wherever an output element
    reduces no elements (``kernels.extremum_identity``, the interpreters' value), which ``jnp.max``
    would refuse to trace."""
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
        if extremum is not None and x.size == 0:
            shape = reduced_shape(x.shape, axis, keep)  # (the shape rule's answer, now that the rank is known)
            assert shape is not None
            return [jnp.full(shape, extremum_identity(extremum, x.dtype), x.dtype)]
        return [fn(x, axis=axis, keepdims=keep).astype(x.dtype)]

    return rule


def _mean(x: Any, axis: Any, keepdims: bool) -> Any:
    """``jnp.mean``; integers as ``kernels._mean`` takes them (TensorFlow's kernel): summed in their
    dtype, divided by the count rounding toward zero (``lax.div``), 0 over no elements. Why not
    ``jnp.mean`` and a cast: it sums integers as floats (inexact past 2^24 in float32) and gives NaN,
    then garbage, over no elements."""
    if not jnp.issubdtype(x.dtype, jnp.integer):
        return jnp.mean(x, axis=axis, keepdims=keepdims)
    total = jnp.sum(x, axis=axis, keepdims=keepdims, dtype=x.dtype)
    count = x.size // total.size if total.size else 0
    return jnp.zeros_like(total) if count == 0 else jax.lax.div(total, jnp.asarray(count, x.dtype))


LOWERING_RULES.update({"Sum": _reduce(jnp.sum), "Prod": _reduce(jnp.prod), "Mean": _reduce(_mean)})
LOWERING_RULES.update({"Max": _reduce(jnp.max, "Max"), "Min": _reduce(jnp.min, "Min")})
LOWERING_RULES.update({"All": _reduce(jnp.all), "Any": _reduce(jnp.any)})


def _arg_reduce(fn: Callable[..., Any]) -> Rule:
    def rule(ctx, n, xs):
        x = jnp.asarray(xs[0])
        ax = n.attrs.get("axis", 0)
        d = np_dtype(n.attrs.get("dtype", "int64"))
        if x.ndim == 0 or x.shape[ax] == 0:  # the kernel's refusal, if the op runs
            shape = [s for i, s in enumerate(x.shape) if i != ax % max(x.ndim, 1)]
            return fails_when_run(ctx, n, f"{n.op}: reduction over an empty axis {ax} of shape {list(x.shape)}",
                                   shape, d)
        return [fn(x, axis=ax).astype(d)]

    return rule


LOWERING_RULES.update({"ArgMax": _arg_reduce(jnp.argmax), "ArgMin": _arg_reduce(jnp.argmin)})


@lowering_rule("TopK")
def _top_k(ctx, n, xs):
    """``lax.top_k``: largest first, a NaN above every number, the lower index first among equal
    values, as the kernel. ``lax.top_k`` orders ``0.0`` above ``-0.0``, which are equal: it ranks
    the input with its zeros made one, and the values are read back from the input, signs kept."""
    x = jnp.asarray(xs[0])
    k = int(n.attrs["k"])
    if x.ndim == 0 or x.shape[-1] < k:
        raise UnsupportedError(f"fast backend: {describe_node(n)}: fewer than k={k} entries in shape {list(x.shape)}")
    ranked = jnp.where(x == 0, jnp.zeros_like(x), x) if jnp.issubdtype(x.dtype, jnp.floating) else x
    _, idx = jax.lax.top_k(ranked, k)
    return [jnp.take_along_axis(x, idx, axis=-1), idx.astype(jnp.int32)]


@lowering_rule("ReverseSequence")
def _reverse_sequence(ctx, n, xs):
    from turnout.kernels import reverse_sequence_index

    x, lengths = jnp.asarray(xs[0]), jnp.asarray(xs[1])
    sa, ba = n.attrs["seq_axis"], n.attrs["batch_axis"]
    ctx.check(jnp.all((lengths >= 0) & (lengths <= x.shape[sa])),
              f"{describe_node(n)}: ReverseSequence: lengths must lie in [0, {x.shape[sa]}]")
    return [jnp.take_along_axis(x, reverse_sequence_index(x.shape, lengths, sa, ba, jnp), axis=sa)]


@lowering_rule("ZerosLike")
def _zeros_like(ctx, n, xs):
    return [jnp.zeros_like(xs[0])]


@lowering_rule("OnesLike")
def _ones_like(ctx, n, xs):
    return [jnp.ones_like(xs[0])]


@lowering_rule("Fill")
def _fill(ctx, n, xs):
    shp, v = xs
    if not is_static(shp):
        not_static(ctx, n, 0, f"fast backend: {describe_node(n)}: the shape of Fill must be known when compiling")
    guard(n, [int(d) for d in np.ravel(shp)], jnp.result_type(v))
    return [jnp.full(tuple(int(d) for d in shp), v, dtype=jnp.result_type(v))]


@lowering_rule("Shape")
def _shape(ctx, n, xs):
    return [np.asarray(jnp.shape(xs[0]), dtype=np.int32)]


@lowering_rule("Size")
def _size(ctx, n, xs):
    return [np.asarray(int(np.prod(jnp.shape(xs[0]))), dtype=np.int32)]


def refused_by_shape_rule(ctx: LoweringContext, n: Node, xs: Sequence[Any]) -> Optional[list[Any]]:
    """When ``n``'s shape rule refuses the shapes its inputs have in this trace
    (``shape_rules.spec_shape_error``, the check the interpreters make at run time): the rule's
    message as an error raised if ``n`` runs, and zeros of ``n``'s static output types standing in,
    so a node on a branch that is not taken costs nothing. ``None`` when the rule takes them (or
    an input is not an array: a TensorArray, a handle, a dead value; an op with a TensorArray is
    asked only whether its ``shape_rules.SCALAR_OPERANDS`` are scalars)."""
    arrays = [hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, TA) for x in xs]
    refused = scalar_operand_error(n.op, [tuple(x.shape) if a else None for x, a in zip(xs, arrays, strict=True)])
    if refused is None and n.op in SHAPE_RULES and xs and all(arrays):
        refused = spec_shape_error(n.op, [(np.dtype(x.dtype), tuple(x.shape)) for x in xs], n.attrs)
    if refused is None:
        return None
    ctx.check(np.asarray(False), f"{describe_node(n)}: {refused}")
    return [_stand_in(o.spec) for o in n.outputs]


def _stand_in(spec: Any) -> Any:
    """A value of ``spec`` standing in for the output of a node whose shape rule refused its inputs:
    zeros, and for a TensorArray (``TensorArrayUnstack`` of a scalar) an empty one of its element
    type. Why not zeros for that too: the ops that read the array take a ``TA``, and a bare array
    in its place made them fail with Python's ``AttributeError`` while tracing, before the check
    above could say what was wrong (``tn.scan`` of a fed scalar reads slot 0 at once)."""
    if spec.dtype == dt.tensor_array:
        es = tuple(d or 0 for d in (spec.elem_shape or ()))
        d = spec.elem_dtype.numpy
        return TA(0, d, es, jnp.zeros((0, *es), d), jnp.zeros((0,), MASK_DTYPE), full=True)
    return jnp.zeros(tuple(d or 0 for d in (spec.shape or ())), spec.dtype.numpy)


@lowering_rule("BroadcastLike")
def _broadcast_like(ctx, n, xs):
    shape, dtype = tuple(jnp.shape(xs[1])), jnp.result_type(xs[0])
    guard(n, shape, dtype)
    if not sums_to(shape, tuple(jnp.shape(xs[0]))):
        return fails_when_run(ctx, n, f"BroadcastLike: shape {list(jnp.shape(xs[0]))} does not broadcast to "
                                       f"{list(shape)}", shape, dtype)
    return [jnp.broadcast_to(xs[0], shape)]


def sum_to_shape(x: Any, shape: tuple[int, ...]) -> Any:
    """``kernels.sum_to_shape`` in jax.numpy."""
    x = jnp.asarray(x)
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(shape) if d == 1 and x.shape[i + lead] != 1)
    r = jnp.sum(x, axis=axes, keepdims=True) if axes else x
    return jnp.reshape(r, shape).astype(x.dtype)


@lowering_rule("SumToLike")
def _sum_to_like(ctx, n, xs):
    shape = tuple(jnp.shape(xs[1]))
    if not sums_to(tuple(jnp.shape(xs[0])), shape):
        return fails_when_run(ctx, n, f"SumToLike: a tensor of shape {list(jnp.shape(xs[0]))} cannot be summed "
                                       f"to shape {list(shape)}", shape, jnp.result_type(xs[0]))
    return [sum_to_shape(xs[0], shape)]
