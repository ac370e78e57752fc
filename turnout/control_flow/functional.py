"""``scan``, ``map_fn``, ``foldl`` and ``foldr``, built on ``while_loop`` and TensorArray (as TensorFlow
does).

Meaning, as plain Python::

    def scan(fn, elems, initializer):          # ys[i] = carry after element i
        carry, ys = initializer, []
        for x in elems:
            carry = fn(carry, x); ys.append(carry)
        return stack(ys)

    def map_fn(fn, elems):  return stack([fn(x) for x in elems])

    def foldl(fn, elems, initializer):
        carry = initializer
        for x in elems:
            carry = fn(carry, x)
        return carry

    def foldr(fn, elems, initializer):  return foldl(fn, reversed(elems), initializer)

``elems`` may be a nested structure of tensors sharing their leading dimension; without an
initializer, ``scan`` and ``foldl`` start from ``elems[0]`` (and ``scan`` emits it as ``ys[0]``).
``foldr`` and ``scan(..., reverse=True)`` walk the elements from the last to the first, and start
from ``elems[-1]`` without an initializer; a reversed ``scan`` puts the carry after element ``i`` at
``ys[i]``, so ``ys[0]`` is the final carry.

Why the reversed walk is an index, not a reversed copy of ``elems``: the loop reads slot
``n - 1 - i`` of the same TensorArray, so a reversed fold costs what a forward one does, and its
gradient is the forward fold's machinery (the read's gradient writes the same slot back).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Optional, TypeVar

import numpy as np

from turnout import dtypes as dt
from turnout import nest
from turnout import shapes as sh
from turnout.arguments import check_arity, checked
from turnout.control_flow.tensor_array import TensorArray, unstack, with_length
from turnout.control_flow.while_loop import while_loop
from turnout.errors import DTypeError, GraphBuildError, ShapeError
from turnout.graph import Tensor, get_default_graph
from turnout.ops import concat, constant, convert_to_tensor, getitem, shape, stack


def _leading(flat: list[Tensor]) -> Optional[int]:
    """The static number of elements, when some leaf of ``elems`` knows it."""
    for t in flat:
        if t.shape is not None and t.shape[0] is not None:
            return t.shape[0]
    return None


def _stack_result(ta: TensorArray, n: Tensor, count: Optional[int], elem: sh.Shape) -> Tensor:
    """Stack the results with the static shape ``(count, *elem)`` the builder knows.

    Why not a plain ``ta.stack()``: a TensorArray carried through a loop forgets its length and (for
    map_fn) its element shape, so the stacked result would have an unknown shape, and a map_fn inside
    a loop body would give a loop variable that no longer fits its own Merge. When ``elem`` is fully
    known, the stack also works over zero elements (the result is ``(0, *elem)``, where a plain stack of
    an empty TensorArray cannot know its element shape); every slot is written, so "or zeros" never
    fills one.
    """
    if not sh.is_fully_defined(elem):
        return ta.stack()
    assert elem is not None
    dims = stack([n]) if not elem else concat([stack([n]), constant(list(elem), dtype=dt.int32)], axis=0)
    return ta.tensor.graph.create_node(
        "TensorArrayStackOrZeros", [ta.tensor, dims], {"static_shape": [count, *elem]}, name="ta_stack").outputs[0]


F = TypeVar("F", bound=Callable[..., Any])


def _all_or_nothing(builder: F) -> F:
    """``builder`` (``scan``, ``foldl``, ``foldr``, ``map_fn``) leaving the graph of its ``elems`` as it
    found it when it raises: the TensorArrays it made before its loop go too
    (``Graph._all_or_nothing``). A ``fn`` that is not callable is refused first, naming the builder
    (Python's own "object is not callable" would come from deep inside the loop's body)."""
    @functools.wraps(builder)
    def wrapper(fn: Any, elems: Any, *args: Any, **kwargs: Any) -> Any:
        if not callable(fn):
            raise GraphBuildError(f"{builder.__name__}: fn must be a callable, got {type(fn).__name__}")
        graphs = [e.graph for e in nest.flatten(elems, f"{builder.__name__}: elems") if isinstance(e, Tensor)]
        with (graphs[0] if graphs else get_default_graph())._all_or_nothing():
            return builder(fn, elems, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _elems(elems: Any, who: str) -> tuple[list[Tensor], Tensor]:
    """``elems``' tensors and their common length, checked for builder ``who`` (named in each error)."""
    flat = [convert_to_tensor(e) for e in nest.flatten(elems)]
    if not flat:
        raise GraphBuildError(f"{who}: elems must contain at least one tensor")
    for t in flat:
        if t.shape is not None and len(t.shape) == 0:
            raise GraphBuildError(f"{who}: elems must have a leading dimension to iterate over; {t.name} is a scalar")
    known = [(t.name, t.shape[0]) for t in flat if t.shape is not None and t.shape[0] is not None]
    if len({n for _, n in known}) > 1:
        raise ShapeError(f"{who}: elems must share their leading dimension (one element of each per step); got "
                         + ", ".join(f"{name} with {n}" for name, n in known))
    n = getitem(shape(flat[0]), 0)
    return [flat[0], *[t if _same_length(flat[0], t) else with_length(t, n, _UNEQUAL_ELEMS, name="elems_length")
                     for t in flat[1:]]], n


#: Why a run-time check for lengths known only then: the loop runs ``n`` steps, the first leaf's
#: length, so a longer other leaf lost its last elements silently (a shorter one met the read's range
#: check).
_UNEQUAL_ELEMS = "elems must share their leading dimension (one element of each per step)"


def _same_length(first: Tensor, t: Tensor) -> bool:
    """Whether ``t`` is known while building to have as many elements as ``first`` (the loop's
    count)."""
    return first.shape is not None and t.shape is not None and first.shape[0] is not None and t.shape[0] is not None


def _fold(fn: Callable[[Any, Any], Any], elems: Any, initializer: Any, keep: bool, kw: dict[str, Any],
          who: str, reverse: bool = False) -> Any:
    """The loop of ``scan`` (``keep``: every carry kept, stacked) and of ``foldl``/``foldr`` (``who``,
    named in its errors): step ``i`` reads element ``n - 1 - i`` when ``reverse``, else element ``i``,
    and ``scan`` writes its carry to the same slot."""
    flat, n = _elems(elems, who)
    xs = [unstack(t) for t in flat]

    def slot(i: Any) -> Any:
        return n - 1 - i if reverse else i

    if initializer is None:
        init = nest.pack_as(elems, [ta.read(slot(0)) for ta in xs])
        start = constant(1)
    else:
        init = initializer
        start = constant(0)
    flat_init = [convert_to_tensor(v) for v in nest.flatten(init)]
    outs = [TensorArray(t.dtype, size=n, element_shape=t.shape) for t in flat_init] if keep else []
    if keep and initializer is None:
        outs = [ta.write(slot(0), v) for ta, v in zip(outs, flat_init, strict=True)]

    def cond(i: Tensor, carry: Any, tas: Any) -> Tensor:
        return i < n

    def body(i: Tensor, carry: Any, tas: Any) -> Any:
        j = slot(i)
        x = nest.pack_as(elems, [ta.read(j) for ta in xs])
        check_arity(fn, [carry, x], kw["name"], "fn")
        new = fn(carry, x)
        nest.assert_same_structure(init, new, f"{who}: fn's output and the accumulator")
        flat_new = [convert_to_tensor(v) for v in nest.flatten(new)]
        _fits_carry(who, flat_new, flat_init)
        if keep:  # a fold carries no TensorArrays
            tas = [ta.write(j, v) for ta, v in zip(tas, flat_new, strict=True)]
        return i + 1, nest.pack_as(init, flat_new), tas

    _, carry, tas = while_loop(cond, body, (start, nest.pack_as(init, flat_init), outs), **kw)
    if not keep:
        return carry
    count = _leading(flat)
    return nest.pack_as(init, [_stack_result(ta, n, count, t.shape) for ta, t in zip(tas, flat_init, strict=True)])


def _fits_carry(who: str, new: list[Tensor], init: list[Tensor]) -> None:
    """Refuse ``fn``'s outputs (``new``) whose dtype, or static shape, is not its accumulator's
    (``init``), naming builder ``who``. Why here: the loop's own check, or ``scan``'s TensorArray
    write, found it, naming an op the user never wrote (``TensorArrayWrite``, ``while_loop "foldl"``)."""
    for k, (v, c) in enumerate(zip(new, init, strict=True)):
        if v.dtype != c.dtype:
            raise DTypeError(f"{who}: output {k} of fn is {v.dtype.name}, but the accumulator is {c.dtype.name} "
                             f"({v.name}); fn must return what it takes")
        if not sh.compatible(v.shape, c.shape):
            raise ShapeError(f"{who}: output {k} of fn has shape {sh.fmt(v.shape)}, but the accumulator has shape "
                             f"{sh.fmt(c.shape)} ({v.name}); fn must return what it takes")


@checked
@_all_or_nothing
def scan(fn: Callable[[Any, Any], Any], elems: Any, initializer: Any = None, parallel_iterations: int = 10,
         back_prop: bool = True, swap_memory: bool = False, name: Optional[str] = None, *,
         reverse: bool = False, memory_budget: Optional[int] = None) -> Any:
    """Accumulate ``fn(carry, x)`` over the leading dimension of ``elems``; returns every carry, stacked.

    With ``reverse=True`` the elements are taken from the last to the first (TensorFlow's
    ``tf.scan(..., reverse=True)``): ``ys[i]`` is still the carry after element ``i``, so ``ys[0]`` is
    the final one. ``memory_budget`` bounds the bytes the loop saves for its gradient, as
    ``tn.while_loop``'s does (``docs/memory_budgets.rst``)."""
    if not isinstance(reverse, (bool, np.bool_)):
        raise GraphBuildError(f"scan: reverse must be True or False, got {reverse!r}")
    kw = dict(parallel_iterations=parallel_iterations, back_prop=back_prop, swap_memory=swap_memory,
              name=name or "scan", memory_budget=memory_budget)
    return _fold(fn, elems, initializer, True, kw, "scan", bool(reverse))


@checked
@_all_or_nothing
def foldl(fn: Callable[[Any, Any], Any], elems: Any, initializer: Any = None, parallel_iterations: int = 10,
          back_prop: bool = True, swap_memory: bool = False, name: Optional[str] = None, *,
          memory_budget: Optional[int] = None) -> Any:
    """Fold ``fn(carry, x)`` over the leading dimension of ``elems``; returns the final carry.
    ``memory_budget`` bounds the bytes the loop saves for its gradient, as ``tn.while_loop``'s does."""
    kw = dict(parallel_iterations=parallel_iterations, back_prop=back_prop, swap_memory=swap_memory,
              name=name or "foldl", memory_budget=memory_budget)
    return _fold(fn, elems, initializer, False, kw, "foldl")


@checked
@_all_or_nothing
def foldr(fn: Callable[[Any, Any], Any], elems: Any, initializer: Any = None, parallel_iterations: int = 10,
          back_prop: bool = True, swap_memory: bool = False, name: Optional[str] = None, *,
          memory_budget: Optional[int] = None) -> Any:
    """Fold ``fn(carry, x)`` over the leading dimension of ``elems`` from the last element to the
    first (TensorFlow's ``tf.foldr``); returns the final carry. Without an initializer the carry
    starts from ``elems[-1]``. ``memory_budget`` as for ``foldl``."""
    kw = dict(parallel_iterations=parallel_iterations, back_prop=back_prop, swap_memory=swap_memory,
              name=name or "foldr", memory_budget=memory_budget)
    return _fold(fn, elems, initializer, False, kw, "foldr", reverse=True)


@checked
@_all_or_nothing
def map_fn(fn: Callable[[Any], Any], elems: Any, dtype: Any = None, parallel_iterations: int = 10,
           back_prop: bool = True, swap_memory: bool = False, name: Optional[str] = None, *,
           memory_budget: Optional[int] = None) -> Any:
    """Apply ``fn`` to each slice ``elems[i]``; returns the results stacked.

    ``dtype`` (a dtype or a structure of dtypes) describes ``fn``'s output when it differs from
    ``elems``' structure and dtypes. ``memory_budget`` bounds the bytes the loop saves for its
    gradient, as ``tn.while_loop``'s does.
    """
    flat, n = _elems(elems, "map_fn")
    xs = [unstack(t) for t in flat]
    if dtype is None:
        out_struct: Any = elems
        out_dtypes = [t.dtype for t in flat]
    else:
        out_struct = dtype
        out_dtypes = [dt.as_dtype(d) for d in nest.flatten(dtype)]
    outs = [TensorArray(d, size=n) for d in out_dtypes]
    out_shapes: list[sh.Shape] = []

    def body(i: Tensor, tas: Any) -> Any:
        x = nest.pack_as(elems, [ta.read(i) for ta in xs])
        check_arity(fn, [x], name or "map_fn", "fn")
        y = fn(x)
        flat_y = [convert_to_tensor(v) for v in nest.flatten(y)]
        out_shapes[:] = [v.shape for v in flat_y]
        if len(flat_y) != len(tas):
            raise GraphBuildError(
                f"map_fn: fn returned {len(flat_y)} tensors but {len(tas)} were expected; pass dtype= to "
                "describe fn's output"
            )
        # (as many tensors in another structure, a dict for a tuple, was packed as the tuple, silently)
        nest.assert_same_structure(out_struct, y, "map_fn: fn's output and " + ("elems (pass dtype= to describe "
                                   "fn's output)" if dtype is None else "dtype"))
        for k, (v, d) in enumerate(zip(flat_y, out_dtypes, strict=True)):
            if v.dtype != d:
                raise GraphBuildError(f"map_fn: output {k} of fn is {v.dtype.name}, expected {d.name}; pass dtype=")
        return i + 1, [ta.write(i, v) for ta, v in zip(tas, flat_y, strict=True)]

    _, tas = while_loop(lambda i, tas: i < n, body, (constant(0), outs), parallel_iterations=parallel_iterations,
                        back_prop=back_prop, swap_memory=swap_memory, name=name or "map",
                        memory_budget=memory_budget)
    count = _leading(flat)
    return nest.pack_as(out_struct, [_stack_result(ta, n, count, s) for ta, s in zip(tas, out_shapes, strict=True)])
