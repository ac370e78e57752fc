"""TensorFlow's array functions that are compositions of primitives: ``range``, ``squeeze``,
``unstack``, ``split``, ``slice``, ``one_hot``, ``argmax``/``argmin``, ``rank``, ``clip_by_value``.

Why a module beside ``turnout.ops``: none of these is a primitive of its own. Each builder checks its
arguments (errors name the function and the argument), then calls a construction (the functions
``*_parts``, ``squeeze_axes``, ...) that the GraphDef import rule of the same TensorFlow op calls too
(``turnout.composite``), so a program written with ``tn`` and one imported from TensorFlow compute
the same nodes. Gradients, the backends and export need nothing new: the nodes are ``GetItem``,
``Equal``/``Select``, ``Minimum``/``Maximum``, ``Fill``/``Cumsum`` and ``Assert`` for the facts that
are known only when the program runs (a squeezed axis of unknown size is 1).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np

from turnout import dtypes as dt
from turnout.arguments import checked
from turnout.composite import GraphMaker, Maker, checked_that, dim, getitem, int32, last_suffix
from turnout.errors import ArgumentError, DTypeError, GraphBuildError, ResourceExhaustedError, ShapeError
from turnout.graph import Tensor
from turnout.limits import check_allocation
from turnout.ops import (
    _pair,
    bad_value,
    constant,
    convert_to_tensor,
    int_attr,
    int_list_attr,
    shape,
    size,
)

_Axes = Union[int, Sequence[int], None]


def normalize_axis(axis: Any, rank: int, fn: str, argument: str = "axis", extra: int = 0) -> int:
    """``axis`` (an int from ``-(rank + extra)`` to ``rank + extra - 1``) as a non-negative axis; a
    ShapeError naming the function and the argument otherwise."""
    a = int_attr(axis, fn, argument)
    n = rank + extra
    if not -n <= a < n:
        raise ShapeError(f"{fn}: {argument} {a} is out of range for a tensor of rank {rank} "
                         f"(from {-n} to {n - 1})")
    return a % n


def _along(axis: int, index: Any) -> tuple[Any, ...]:
    """The GetItem key of ``index`` (an int or a slice) on ``axis``, every axis before it whole."""
    return (*[builtins.slice(None)] * axis, index)


def _rank_of(x: Tensor, fn: str) -> int:
    if x.shape is None:
        raise ShapeError(f"{fn}: needs the rank of {x.name} when building, which is unknown")
    return len(x.shape)


# ---- squeeze and unstack ----------------------------------------------------------------------------
def squeeze_axes(m: Maker, x: Tensor, axes: Sequence[int], what: str) -> Tensor:
    """``x[..., 0, ...]`` at each of ``axes`` (non-negative). An axis whose size is unknown when
    building is checked to be 1 when the program runs: GetItem alone would take the first slice of a
    longer axis, a wrong value rather than an error."""
    cur = x
    for a in sorted(axes):
        if x.shape is None or x.shape[a] is None:
            ok = m.create("Equal", [dim(m, x, a, f"dim{a}"), int32(m, 1, x, f"one{a}")], suffix=f"is_one{a}")
            cur = checked_that(m, ok.outputs[0], cur, f"{what}: axis {a} must have size 1 to be squeezed",
                               f"check{a}")
    if not axes:
        return m.create("Identity", [cur]).outputs[0]
    assert x.shape is not None
    return getitem(m, cur, tuple(0 if k in axes else builtins.slice(None) for k in builtins.range(len(x.shape))), None)


@checked
def squeeze(x: Any, axis: _Axes = None, name: Optional[str] = None) -> Tensor:
    """``x`` without the axes of size 1 in ``axis`` (an int or a list; None: every axis whose size is
    1), as ``tf.squeeze``. An axis whose size is not 1 is a ShapeError when building, or a KernelError
    when the program runs if its size is unknown until then. ``axis=None`` needs the whole shape when
    building (which axes go decides the result's rank)."""
    x = convert_to_tensor(x)
    r = _rank_of(x, "squeeze")
    assert x.shape is not None
    if axis is None:
        if None in x.shape:
            raise ShapeError(f"squeeze: axis=None needs the whole shape of x when building, got "
                             f"{list(x.shape)}; pass the axes to squeeze")
        axes = [k for k, d in enumerate(x.shape) if d == 1]
    else:
        listed = axis if isinstance(axis, (list, tuple)) else [axis]
        axes = sorted({normalize_axis(a, r, "squeeze") for a in listed})
        for a in axes:
            if x.shape[a] not in (None, 1):
                raise ShapeError(f"squeeze: axis {a} of x has size {x.shape[a]}, not 1")
    return squeeze_axes(GraphMaker(x.graph, name, "squeeze"), x, axes, "squeeze")


def unstack_parts(m: Maker, x: Tensor, num: int, axis: int, what: str) -> list[Tensor]:
    """The ``num`` slices ``x[..., k, ...]`` along ``axis``; an axis of size unknown when building is
    checked to be ``num`` long when the program runs (a longer one would lose slices silently)."""
    cur = x
    if x.shape is None or x.shape[axis] is None:
        ok = m.create("Equal", [dim(m, x, axis, "dim"), int32(m, num, x, "num")], suffix="has_num").outputs[0]
        cur = checked_that(m, ok, x, f"{what}: axis {axis} must have size num={num}", "check")
    return [getitem(m, cur, _along(axis, k), last_suffix(k, num, "part")) for k in builtins.range(num)]


@checked
def unstack(x: Any, num: Optional[int] = None, axis: int = 0, name: Optional[str] = None) -> list[Tensor]:
    """The slices of ``x`` along ``axis``, as a list: ``[x[k] for k in range(num)]`` on axis 0, as
    ``tf.unstack``. ``num`` defaults to the axis' size, which must then be known when building; a
    given ``num`` that is not the size is a ShapeError (a KernelError when the size is known only
    when the program runs)."""
    x = convert_to_tensor(x)
    r = _rank_of(x, "unstack")
    assert x.shape is not None
    ax = normalize_axis(axis, r, "unstack")
    size_ = x.shape[ax]
    if num is None:
        if size_ is None:
            raise ShapeError(f"unstack: num is not given and axis {ax} of x has no size known when building")
        num = int(size_)
    n = int_attr(num, "unstack", "num")
    if n < 0 or size_ is not None and n != size_:
        raise ShapeError(f"unstack: num={n} does not match the size {size_} of axis {ax} of x")
    return unstack_parts(GraphMaker(x.graph, name, "unstack"), x, n, ax, "unstack")


# ---- split and slice --------------------------------------------------------------------------------
def split_parts(m: Maker, x: Tensor, sizes: Sequence[int], axis: int, what: str) -> list[Tensor]:
    """The consecutive slices of ``sizes`` along ``axis`` (one size may be -1: the rest). Sizes the
    caller checked against a known axis; where the axis' size is unknown when building, it is
    checked when the program runs (to be the sum, or at least the sum of the others where a -1
    takes the rest), and the slices after a -1 are placed from the end."""
    assert x.shape is not None
    total = x.shape[axis]
    cur = x
    known = sum(s for s in sizes if s != -1)
    if total is None:
        d = dim(m, x, axis, "dim")
        op, rel = ("GreaterEqual", "at least") if -1 in sizes else ("Equal", "exactly")
        ok = m.create(op, [d, int32(m, known, x, "total")], suffix="fits").outputs[0]
        cur = checked_that(m, ok, x, f"{what}: axis {axis} must have {rel} {known} entries to split into "
                           f"sizes {list(sizes)}", "check")
    elif -1 in sizes:
        sizes = [int(total) - known if s == -1 else s for s in sizes]
    bounds: list[tuple[Any, Any]] = []
    at: Any = 0
    for k, s in enumerate(sizes):
        if s == -1:  # the size is unknown: this slice ends, and the next ones start, counted from the end
            after = sum(sizes[k + 1:])
            bounds.append((at, -after if after else None))
            at = -after
        else:
            stop = at + s
            bounds.append((at, None if stop == 0 and at < 0 else stop))
            at = stop
    return [getitem(m, cur, _along(axis, builtins.slice(b, e, None)), last_suffix(k, len(sizes), "part"))
            for k, (b, e) in enumerate(bounds)]


def equal_split_parts(m: Maker, x: Tensor, num: int, axis: int, what: str) -> list[Tensor]:
    """``num`` equal slices along ``axis``; of an axis of unknown size, the slices' bounds are
    multiples of ``size // num``, read when the program runs, which checks that ``num`` divides it."""
    assert x.shape is not None
    total = x.shape[axis]
    if total is not None:
        return split_parts(m, x, [int(total) // num] * num, axis, what)
    d = dim(m, x, axis, "dim")
    n = int32(m, num, x, "num")
    rest = m.create("FloorMod", [d, n], suffix="rest").outputs[0]
    ok = m.create("Equal", [rest, int32(m, 0, x, "zero")], suffix="divides").outputs[0]
    cur = checked_that(m, ok, x, f"{what}: num_or_size_splits={num} does not divide axis {axis}", "check")
    step = m.create("Div", [d, n], suffix="step").outputs[0]
    ends = [m.create("Mul", [step, int32(m, k, x, f"k{k}")], suffix=f"end{k}").outputs[0]
            for k in builtins.range(1, num)]
    starts: list[Any] = [0, *ends]
    stops: list[Any] = [*ends, None]
    return [getitem(m, cur, _along(axis, builtins.slice(b, e, None)), last_suffix(k, num, "part"))
            for k, (b, e) in enumerate(zip(starts, stops, strict=True))]


@checked
def split(x: Any, num_or_size_splits: Union[int, Sequence[int]], axis: int = 0,
          name: Optional[str] = None) -> list[Tensor]:
    """``x`` cut along ``axis`` into ``num_or_size_splits`` equal slices (an int), or slices of the
    listed sizes (one may be -1: the rest), as ``tf.split``. Sizes that do not fit the axis are a
    ShapeError, or a KernelError when the program runs if the axis' size is unknown until then."""
    x = convert_to_tensor(x)
    ax = normalize_axis(axis, _rank_of(x, "split"), "split")
    assert x.shape is not None
    total = x.shape[ax]
    m = GraphMaker(x.graph, name, "split")
    if not isinstance(num_or_size_splits, (list, tuple, np.ndarray)):
        num = int_attr(num_or_size_splits, "split", "num_or_size_splits")
        if num < 1 or total is not None and total % num:
            raise ShapeError(f"split: num_or_size_splits={num} does not divide axis {ax} of size {total} into "
                             "equal slices")
        return equal_split_parts(m, x, num, ax, "split")
    sizes = int_list_attr(num_or_size_splits, "split", "num_or_size_splits")
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes) or not sizes:
        raise ShapeError(f"split: num_or_size_splits {sizes} must be sizes >= 0, at most one of them -1")
    known = sum(s for s in sizes if s != -1)
    if total is not None and (known > total if -1 in sizes else known != total):
        raise ShapeError(f"split: sizes {sizes} do not sum to the size {total} of axis {ax}")
    return split_parts(m, x, sizes, ax, "split")


def slice_part(m: Maker, x: Tensor, begin: Sequence[Any], size: Sequence[Any]) -> Tensor:
    """``x[begin:begin + size]`` on each axis (a size of -1: to the end); each entry an int or an
    int32 scalar tensor (a run-time size of -1 still means the rest of the axis)."""
    key = []
    for k, (b, n) in enumerate(zip(begin, size, strict=True)):
        if isinstance(n, int):
            stop: Any = None if n == -1 else _add_int(m, b, n, f"stop{k}")
        else:
            d = dim(m, x, k, f"dim{k}")
            dim_t = d if isinstance(d, Tensor) else int32(m, d, n, f"dim{k}")
            neg = m.create("Less", [n, int32(m, 0, n, f"zero{k}")], suffix=f"rest{k}").outputs[0]
            end = _add_int(m, b, n, f"end{k}")
            stop = m.create("Select", [neg, dim_t, end], suffix=f"stop{k}").outputs[0]
        key.append(builtins.slice(b, stop, None))
    return getitem(m, x, tuple(key), None)


def _add_int(m: Maker, a: Any, b: Any, suffix: str) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    ta = a if isinstance(a, Tensor) else int32(m, a, b, f"{suffix}_c")
    tb = b if isinstance(b, Tensor) else int32(m, b, a, f"{suffix}_c")
    return m.create("Add", [ta, tb], suffix=suffix).outputs[0]


@checked
def slice(x: Any, begin: Sequence[int], size: Sequence[int], name: Optional[str] = None) -> Tensor:  # noqa: A001
    """``x[begin[0]:begin[0] + size[0], ...]``, as ``tf.slice`` (a size of -1: the rest of the axis);
    ``begin`` and ``size`` are lists of ints, one per axis of ``x``. A slice that does not lie
    inside ``x`` is a ShapeError (numpy would clip it silently), or a KernelError when the program
    runs if an axis' size is unknown until then."""
    x = convert_to_tensor(x)
    r = _rank_of(x, "slice")
    assert x.shape is not None
    b = int_list_attr(begin, "slice", "begin")
    s = int_list_attr(size, "slice", "size")
    if len(b) != r or len(s) != r:
        raise ShapeError(f"slice: begin {b} and size {s} must have one entry per axis of x (rank {r})")
    m = GraphMaker(x.graph, name, "slice")
    cur = x
    for k, (bk, sk, d) in enumerate(zip(b, s, x.shape, strict=True)):
        need = bk if sk == -1 else bk + sk
        if bk < 0 or sk < -1 or d is not None and need > d:
            raise ShapeError(f"slice: begin[{k}]={bk}, size[{k}]={sk} do not lie in axis {k} of x "
                             f"(size {'unknown' if d is None else d})")
        if d is None and need > 0:
            ok = m.create("GreaterEqual", [dim(m, x, k, f"dim{k}"), int32(m, need, x, f"need{k}")],
                          suffix=f"fits{k}").outputs[0]
            cur = checked_that(m, ok, cur, f"slice: begin[{k}]={bk}, size[{k}]={sk} do not lie in axis {k} of x",
                               f"check{k}")
    return slice_part(m, cur, b, s)


# ---- one-hot, arg reductions, clipping, rank --------------------------------------------------------
def one_hot_part(m: Maker, idx: Tensor, depth: int, on: Tensor, off: Tensor, axis: int) -> Tensor:
    """``on where index == class else off``, the classes along ``axis`` (from 0 to the indices'
    rank): an index outside ``[0, depth)`` gives a row of ``off``, as in TensorFlow."""
    assert idx.shape is not None
    r = len(idx.shape)
    col = m.create("ExpandDims", [idx], {"axis": axis}, suffix="index").outputs[0]
    classes = m.const(np.arange(depth, dtype=idx.dtype.numpy).reshape([depth] + [1] * (r - axis)), [idx],
                      suffix="classes")
    hot = m.create("Equal", [col, classes], suffix="hot").outputs[0]
    return m.create("Select", [hot, on, off]).outputs[0]


@checked
def one_hot(indices: Any, depth: int, on_value: Any = 1, off_value: Any = 0, axis: int = -1,
            dtype: Any = dt.float32, name: Optional[str] = None) -> Tensor:
    """``on_value`` where ``indices == c`` else ``off_value``, for each class ``c`` in
    ``range(depth)`` along a new axis ``axis`` (-1: last), as ``tf.one_hot``; an index outside
    ``[0, depth)`` gives a row of ``off_value``. ``depth`` is an int (the classes are a constant)."""
    idx = convert_to_tensor(indices)
    if not idx.dtype.is_integer:
        raise DTypeError(f"one_hot: indices must be integers, got {idx.dtype.name}")
    n = int_attr(depth, "one_hot", "depth")
    if n < 0:
        raise ShapeError(f"one_hot: depth must be >= 0, got {n}")
    ax = normalize_axis(axis, _rank_of(idx, "one_hot"), "one_hot", extra=1)
    try:
        d = dt.as_dtype(dtype)
    except TypeError as e:
        raise ArgumentError(f"one_hot: dtype: {e}") from None
    on, off = (convert_to_tensor(v, dtype=d) for v in (on_value, off_value))
    if on.shape not in ((), None) or off.shape not in ((), None):
        raise ShapeError("one_hot: on_value and off_value must be scalars")
    return one_hot_part(GraphMaker(idx.graph, name, "one_hot"), idx, n, on, off, ax)


def _arg_reduce(op: str, fn: str, x: Any, axis: int, output_type: Any, name: Optional[str]) -> Tensor:
    x = convert_to_tensor(x)
    ax = int_attr(axis, fn, "axis")
    if x.shape is not None:
        ax = normalize_axis(ax, len(x.shape), fn)
    try:
        d = dt.as_dtype(output_type)
    except TypeError as e:
        raise ArgumentError(f"{fn}: output_type: {e}") from None
    if d not in (dt.int32, dt.int64):
        raise DTypeError(f"{fn}: output_type must be int32 or int64, got {d.name}")
    return x.graph.create_node(op, [x], {"axis": ax, "dtype": d.name}, name=name).outputs[0]


@checked
def argmax(x: Any, axis: int, output_type: Any = dt.int64, name: Optional[str] = None) -> Tensor:
    """The index of the largest entry along ``axis`` (the first among ties), as ``tf.argmax``: the
    ArgMax primitive. It has no gradient (indices are piecewise constant)."""
    return _arg_reduce("ArgMax", "argmax", x, axis, output_type, name)


@checked
def argmin(x: Any, axis: int, output_type: Any = dt.int64, name: Optional[str] = None) -> Tensor:
    """The index of the smallest entry along ``axis`` (the first among ties), as ``tf.argmin``."""
    return _arg_reduce("ArgMin", "argmin", x, axis, output_type, name)


def clip_part(m: Maker, t: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """``max(min(t, hi), lo)``: TensorFlow's order, which decides the value where ``lo > hi``."""
    upper = m.create("Minimum", [t, hi], suffix="upper").outputs[0]
    return m.create("Maximum", [upper, lo]).outputs[0]


@checked
def clip_by_value(x: Any, clip_value_min: Any, clip_value_max: Any, name: Optional[str] = None) -> Tensor:
    """``x`` with each entry limited to ``[clip_value_min, clip_value_max]`` (broadcast), as
    ``tf.clip_by_value``; the gradient passes where ``x`` is inside (at a bound, to the bound
    ``Maximum``/``Minimum`` pick)."""
    x, hi = _pair(x, clip_value_max, "clip_by_value")
    x, lo = _pair(x, clip_value_min, "clip_by_value")
    if lo.dtype != x.dtype or hi.dtype != x.dtype:
        raise DTypeError(f"clip_by_value: the bounds must have x's dtype {x.dtype.name}, got {lo.dtype.name} "
                         f"and {hi.dtype.name}")
    return clip_part(GraphMaker(x.graph, name, "clip_by_value"), x, lo, hi)


@checked
def rank(x: Any, name: Optional[str] = None) -> Tensor:
    """The number of axes of ``x`` as an int32 scalar, as ``tf.rank``: a constant when the rank is
    known when building, else the size of its run-time shape."""
    x = convert_to_tensor(x)
    if x.shape is not None:
        return constant(np.int32(len(x.shape)), name=name)
    return size(shape(x), name=name)


# ---- range ------------------------------------------------------------------------------------------
def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@checked
def range(start: Any, limit: Any = None, delta: Any = 1, dtype: Any = None,  # noqa: A001
          name: Optional[str] = None) -> Tensor:
    """``[start, start + delta, ...]`` up to, not including, ``limit``, as ``tf.range``
    (``range(n)`` is ``range(0, n)``). Of Python numbers it is a constant (int32, or float32 if one
    is a float, unless ``dtype`` says otherwise). Any bound may be a scalar tensor: the length is
    then known only when the program runs, ``max(0, ceil((limit - start) / delta))``, and the value
    is ``start + k * delta`` over a ``Fill`` of that length counted by an exclusive ``Cumsum``.
    ``delta`` 0 is a GraphBuildError, or a KernelError when the program runs. The fast backend
    compiles a length that depends on fed values by specialising the program on them (one compile
    per length: *Shapes decided by fed values* on the fast backend's page)."""
    if limit is None:
        start, limit = 0, start
    bounds = (start, limit, delta)
    if all(_is_number(v) for v in bounds):
        return _constant_range(start, limit, delta, dtype, name)
    try:
        d = dt.as_dtype(dtype) if dtype is not None else next(
            convert_to_tensor(v).dtype for v in bounds if not _is_number(v))
    except TypeError as e:
        raise ArgumentError(f"range: dtype: {e}") from None
    if not (d.is_integer or d.is_floating):
        raise DTypeError(f"range: the bounds must be numbers, got {d.name}")
    s, lim, dl = (_bound(v, d, arg) for v, arg in zip(bounds, ("start", "limit", "delta"), strict=True))
    if _is_number(delta) and delta == 0:
        raise bad_value("range: delta must not be 0")
    return range_part(GraphMaker(s.graph, name, "range"), s, lim, dl, "range", check_delta=not _is_number(delta))


def range_part(m: Maker, start: Tensor, limit: Tensor, delta: Tensor, what: str, check_delta: bool) -> Tensor:
    """``start + k * delta`` for ``k`` in ``range(n)``, ``n = max(0, ceil((limit - start) / delta))``
    read when the program runs (scalars of one dtype): ``k`` is an exclusive ``Cumsum`` of a
    ``Fill`` of ones of that length. The length is ``-((start - limit) // delta)`` on integers (exact;
    a float division would round large bounds). ``check_delta``: an ``Assert`` that ``delta`` is not
    0 first (whose division would fail with a message about division, not about the range)."""
    if check_delta:
        zero = m.const(np.zeros((), delta.dtype.numpy), [delta], suffix="zero")
        ok = m.create("NotEqual", [delta, zero], suffix="delta_nonzero").outputs[0]
        delta = checked_that(m, ok, delta, f"{what}: delta must not be 0", "check_delta")
    if start.dtype.is_integer:
        q = m.create("Div", [m.create("Sub", [start, limit], suffix="span").outputs[0], delta], suffix="quotient")
        n = m.create("Neg", [q.outputs[0]], suffix="length").outputs[0]
    else:
        q = m.create("Div", [m.create("Sub", [limit, start], suffix="span").outputs[0], delta], suffix="quotient")
        n = m.create("Ceil", [q.outputs[0]], suffix="length").outputs[0]
    if n.dtype != dt.int32:
        n = m.create("Cast", [n], {"dtype": "int32"}, suffix="length_int32").outputs[0]
    n = m.create("Maximum", [n, int32(m, 0, n, "none")], suffix="count").outputs[0]
    ones = m.create("Fill", [m.create("Pack", [n], suffix="shape").outputs[0], int32(m, 1, n, "one")],
                    suffix="ones").outputs[0]
    k = m.create("Cumsum", [ones], {"axis": 0, "exclusive": True, "reverse": False}, suffix="k").outputs[0]
    if start.dtype != dt.int32:
        k = m.create("Cast", [k], {"dtype": start.dtype.name}, suffix="k_cast").outputs[0]
    steps = m.create("Mul", [k, delta], suffix="steps").outputs[0]
    return m.create("Add", [start, steps]).outputs[0]


def _bound(v: Any, d: dt.DType, argument: str) -> Tensor:
    if isinstance(v, Tensor) or hasattr(v, "_as_tensor"):
        t = convert_to_tensor(v)
        if t.dtype != d:
            raise DTypeError(f"range: {argument} is {t.dtype.name}, the range is {d.name}")
        if t.shape not in ((), None):
            raise ShapeError(f"range: {argument} must be a scalar, got shape {list(t.shape)}")
        return t
    try:
        return constant(dt.as_checked_array(v, d, f"range: {argument}"), dtype=d)
    except ValueError as e:
        raise bad_value(str(e)) from None


def _constant_range(start: Any, limit: Any, delta: Any, dtype: Any, name: Optional[str]) -> Tensor:
    if delta == 0:
        raise bad_value("range: delta must not be 0")
    try:
        d = dt.as_dtype(dtype) if dtype is not None else (
            dt.float32 if any(isinstance(v, (float, np.floating)) for v in (start, limit, delta)) else dt.int32)
    except TypeError as e:
        raise ArgumentError(f"range: dtype: {e}") from None
    n = builtins.max(0, int(np.ceil((limit - start) / delta)))
    try:
        check_allocation("range", (n,), d.itemsize)
    except ResourceExhaustedError as e:
        raise GraphBuildError(str(e)) from None
    wide = d.numpy if d.is_floating else np.int64  # TensorFlow computes start + k * delta in the dtype
    value = np.asarray(start, wide) + np.arange(n).astype(wide) * np.asarray(delta, wide)
    return constant(value, dtype=d, name=name)


__all__ = ["argmax", "argmin", "clip_by_value", "clip_part", "equal_split_parts", "normalize_axis", "one_hot",
           "one_hot_part", "range", "range_part", "rank", "slice", "slice_part", "split", "split_parts", "squeeze",
           "squeeze_axes", "unstack", "unstack_parts"]
