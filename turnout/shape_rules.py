"""Build-time shape and dtype inference: one rule per primitive (``SHAPE_RULES``).

Why at build time: a mismatch found while the graph is built points at the user's source line; the
same mismatch found at run time inside a loop would surface as a numpy or XLA error far from its cause.
Rules take the input specs and the node attrs and return the output specs, raising ShapeError /
DTypeError with the op named.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout import shapes as sh
from turnout import windows
from turnout.errors import DTypeError, GraphBuildError, ShapeError
from turnout.linalg_rules import LINALG_SHAPE_RULES
from turnout.random_rules import RANDOM_SHAPE_RULES
from turnout.specs import TensorSpec
from turnout.tables import registrar

if TYPE_CHECKING:
    from turnout.graph import Node, Tensor

Rule = Callable[[str, Sequence[TensorSpec], dict[str, Any]], list[TensorSpec]]
SHAPE_RULES: dict[str, Rule] = {}


_rule = registrar(SHAPE_RULES)
SHAPE_RULES.update(RANDOM_SHAPE_RULES)  # RandomDraw, with its kernel
SHAPE_RULES.update(LINALG_SHAPE_RULES)  # inverse, Cholesky, triangular solve, with their kernels


def infer(op: str, inputs: Sequence[Tensor], attrs: dict[str, Any]) -> list[TensorSpec]:
    """The output specs of ``op`` on ``inputs``, by its rule in ``SHAPE_RULES`` (a primitive without one is a
    ``GraphBuildError``); a negative dimension is refused (``_no_negative_size``)."""
    try:
        rule = SHAPE_RULES[op]
    except KeyError:
        raise GraphBuildError(f"no shape rule for primitive {op}") from None
    return _no_negative_size(op, rule(op, [t.spec for t in inputs], attrs))


def _no_negative_size(op: str, out: list[TensorSpec]) -> list[TensorSpec]:
    """``out``, refused when a dimension is negative. Why one check after every rule rather than one
    per op: a size that an attribute gives (``tile``'s multiples, ``reshape``'s target, a fill's
    static shape) reaches numpy and XLA through many rules, and each would give its own raw error
    ("negative dimensions are not allowed", an MLIR "invalid tensor dimension size"); the same
    ``ShapeError`` from here names the op on every backend, when built and when run."""
    for o in out:
        if o.shape is not None and any(d is not None and d < 0 for d in o.shape):
            raise ShapeError(f"{op}: the result would have the negative dimension in {sh.fmt(o.shape)}; "
                             "every size must be >= 0")
    return out


def _same_dtype(op: str, specs: Sequence[TensorSpec]) -> dt.DType:
    d = specs[0].dtype
    for s in specs[1:]:
        if s.dtype != d:
            raise DTypeError(
                f"{op}: operands have different dtypes {d.name} and {s.dtype.name}; use tn.cast to convert"
            )
    return d


def _numeric(op: str, d: dt.DType) -> None:
    if not d.is_numeric:
        raise DTypeError(f"{op}: expected a numeric dtype, got {d.name}")


def _floating(op: str, d: dt.DType) -> None:
    if not d.is_floating:
        raise DTypeError(f"{op}: expected a floating dtype (float32/float64), got {d.name}; use tn.cast")


def _bcast(op: str, a: sh.Shape, b: sh.Shape) -> sh.Shape:
    try:
        return sh.broadcast(a, b)
    except ValueError as e:
        raise ShapeError(f"{op}: {e}") from None


def _axis(op: str, axis: int, rank: int | None) -> int:
    if rank is None:
        return axis
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{op}: axis {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


# ---- sources ---------------------------------------------------------------------------------------
@_rule("Const")
def _const(op, specs, attrs):
    v = np.asarray(attrs["value"])
    return [TensorSpec(dt.as_dtype(attrs["dtype"]), sh.from_value(v))]


@_rule("Placeholder")
def _placeholder(op, specs, attrs):
    return [TensorSpec(dt.as_dtype(attrs["dtype"]), sh.as_shape(attrs.get("shape")))]


# ---- control flow ----------------------------------------------------------------------------------
def _bool_scalar(what: str, spec: TensorSpec) -> None:
    """``spec`` (``what``, as the error names it: ``"Switch: the predicate"``) is a bool scalar, or
    as far as its shape is known; else a DTypeError or ShapeError."""
    if spec.dtype != dt.bool_:
        raise DTypeError(f"{what} must be bool, got {spec.dtype.name}")
    if spec.shape is not None and spec.shape != ():
        raise ShapeError(f"{what} must be a scalar, got shape {sh.fmt(spec.shape)}")


@_rule("Switch")
def _switch(op, specs, attrs):
    data, pred = specs
    _bool_scalar("Switch: the predicate", pred)
    return [data, data]


@_rule("Merge")
def _merge(op, specs, attrs):
    if not specs:
        raise GraphBuildError("Merge needs at least one bound input")
    d = _same_dtype("Merge", specs)
    shape = specs[0].shape
    for s in specs[1:]:
        shape = sh.most_specific_common(shape, s.shape)
    out = specs[0]
    elem_shape = out.elem_shape
    for s in specs[1:]:
        _same_elements("Merge", out, s)
        elem_shape = sh.most_specific_common(elem_shape, s.elem_shape)
    return [TensorSpec(d, shape, out.elem_dtype, elem_shape), TensorSpec(dt.int32, ())]


def _same_elements(what: str, a: TensorSpec, b: TensorSpec) -> None:
    """Two TensorArray values that may flow to one place (a Merge's inputs) hold one element dtype.
    Why checked: a TensorArray's dtype is ``tensor_array`` whatever its elements are, so the dtype
    check let a cond whose branches return a float32 and an int32 array through, its result typed as
    one branch's array (int32) while it held the other's floats on every backend."""
    if a.elem_dtype is not None and b.elem_dtype is not None and a.elem_dtype != b.elem_dtype:
        raise DTypeError(f"{what}: TensorArrays of {a.elem_dtype.name} and {b.elem_dtype.name} elements; both must "
                         "hold one dtype")


@_rule("Enter", "Exit", "NextIteration", "Identity", "StopGradient", "PreventGradient", "Sleep")
def _identity(op, specs, attrs):
    return [specs[0]]


@_rule("Assert")
def _assert(op, specs, attrs):
    c, v = specs[:2]  # (the data it shows when it fails, any shape, follow)
    _bool_scalar("Assert: the condition", c)
    return [v]


@_rule("LoopCond")
def _loopcond(op, specs, attrs):
    (p,) = specs
    _bool_scalar("LoopCond: the loop predicate", p)
    return [p]


@_rule("NoOp")
def _noop(op, specs, attrs):
    return []


@_rule("Send")
def _send(op, specs, attrs):
    """A Send has no outputs: its token leaves through the rendezvous. A data Send takes one input; a
    control Send (for a cross-device control edge) takes none and carries only its control inputs."""
    if len(specs) > 1:
        raise GraphBuildError(f"Send takes at most one input, got {len(specs)}")
    return []


@_rule("Recv")
def _recv(op, specs, attrs):
    """A Recv's output type is the type of the edge it stands for, recorded in its attrs."""
    if specs:
        raise GraphBuildError(f"Recv takes no data inputs, got {len(specs)}")
    return [TensorSpec(dt.as_dtype(attrs["dtype"]), sh.as_shape(attrs.get("shape")),
                       dt.as_dtype(attrs["elem_dtype"]) if attrs.get("elem_dtype") else None,
                       sh.as_shape(attrs.get("elem_shape")))]


def check_merge_input(merge: Node, t: Tensor) -> None:
    """A back edge's dtype and shape must fit the Merge's (shape_invariants decide the Merge shape)."""
    out = merge.outputs[0].spec
    if t.dtype != out.dtype:
        raise DTypeError(
            f'Merge "{merge.name}": back edge {t.name} has dtype {t.dtype.name}, the loop variable {out.dtype.name}'
        )
    if not sh.fits_invariant(out.shape, t.shape):
        raise ShapeError(
            f'Merge "{merge.name}": the loop variable has shape {sh.fmt(out.shape)} on entry but '
            f"{sh.fmt(t.shape)} after one iteration ({t.name}); pass shape_invariants to while_loop "
            "to allow a shape that changes across iterations"
        )
    _same_elements(f'Merge "{merge.name}": the loop variable and back edge {t.name} are', out, t.spec)
    if not sh.compatible(out.elem_shape, t.spec.elem_shape):  # (an array's elements never change shape)
        raise ShapeError(
            f'Merge "{merge.name}": the loop variable is a TensorArray of elements {sh.fmt(out.elem_shape)} on '
            f"entry but of {sh.fmt(t.spec.elem_shape)} after one iteration ({t.name})"
        )


# ---- elementwise -----------------------------------------------------------------------------------
@_rule("Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "Pow", "FloorMod")
def _binary(op, specs, attrs):
    a, b = specs
    d = _same_dtype(op, specs)
    _numeric(op, d)
    return [TensorSpec(d, _bcast(op, a.shape, b.shape))]


@_rule("Atan2")
def _binary_float(op, specs, attrs):
    a, b = specs
    d = _same_dtype(op, specs)
    _floating(op, d)
    return [TensorSpec(d, _bcast(op, a.shape, b.shape))]


@_rule("Less", "LessEqual", "Greater", "GreaterEqual")
def _compare(op, specs, attrs):
    a, b = specs
    d = _same_dtype(op, specs)
    _numeric(op, d)
    return [TensorSpec(dt.bool_, _bcast(op, a.shape, b.shape))]


@_rule("Equal", "NotEqual")
def _equal(op, specs, attrs):
    a, b = specs
    _same_dtype(op, specs)
    return [TensorSpec(dt.bool_, _bcast(op, a.shape, b.shape))]


@_rule("LogicalAnd", "LogicalOr")
def _logical(op, specs, attrs):
    a, b = specs
    for s in specs:
        if s.dtype != dt.bool_:
            raise DTypeError(f"{op}: expected bool operands, got {s.dtype.name}")
    return [TensorSpec(dt.bool_, _bcast(op, a.shape, b.shape))]


@_rule("LogicalNot")
def _lnot(op, specs, attrs):
    if specs[0].dtype != dt.bool_:
        raise DTypeError(f"{op}: expected a bool operand, got {specs[0].dtype.name}")
    return [specs[0]]


@_rule("Neg", "Abs", "Square", "Sign", "Relu")
def _unary_numeric(op, specs, attrs):
    _numeric(op, specs[0].dtype)
    return [TensorSpec(specs[0].dtype, specs[0].shape)]


@_rule("Tanh", "Sigmoid", "Exp", "Log", "Sqrt", "Log1p", "Expm1", "Erf", "Sin", "Cos", "Floor", "Ceil", "Round",
       "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Erfc", "Lgamma", "Digamma")
def _unary_float(op, specs, attrs):
    _floating(op, specs[0].dtype)
    return [TensorSpec(specs[0].dtype, specs[0].shape)]


@_rule("Select")
def _select(op, specs, attrs):
    c, a, b = specs
    if c.dtype != dt.bool_:
        raise DTypeError(f"Select: the condition must be bool, got {c.dtype.name}")
    d = _same_dtype(op, [a, b])
    return [TensorSpec(d, _bcast(op, c.shape, _bcast(op, a.shape, b.shape)))]


@_rule("Cast")
def _cast(op, specs, attrs):
    d = dt.as_dtype(attrs["dtype"])
    if d.is_opaque or specs[0].dtype.is_opaque:
        raise DTypeError(f"Cast: cannot cast {specs[0].dtype.name} to {d.name}")
    return [TensorSpec(d, specs[0].shape)]


# ---- structure -------------------------------------------------------------------------------------
@_rule("MatMul")
def _matmul(op, specs, attrs):
    a, b = specs
    d = _same_dtype(op, specs)
    _numeric(op, d)
    if a.shape is not None and len(a.shape) < 2 or b.shape is not None and len(b.shape) < 2:
        raise ShapeError(f"MatMul: operands must be matrices or batches of them, got {sh.fmt(a.shape)} @ "
                         f"{sh.fmt(b.shape)}")
    ta, tb = attrs.get("transpose_a", False), attrs.get("transpose_b", False)
    if a.shape is None or b.shape is None:  # (an operand of unknown rank may be a batch: so may the product)
        return [TensorSpec(d, None)]
    m, k1 = (a.shape[-1], a.shape[-2]) if ta else a.shape[-2:]
    k2, n = (b.shape[-1], b.shape[-2]) if tb else b.shape[-2:]
    if k1 is not None and k2 is not None and k1 != k2:
        raise ShapeError(f"MatMul: inner dimensions differ: {sh.fmt(a.shape)} @ {sh.fmt(b.shape)}")
    return [TensorSpec(d, (*_bcast(op, a.shape[:-2], b.shape[:-2]), m, n))]


@_rule("Reshape")
def _reshape(op, specs, attrs):
    x = specs[0]
    target = list(attrs["shape"])
    if any(d < -1 for d in target):
        raise ShapeError(f"Reshape: a dimension of the target {target} is below -1 (-1 alone means 'the rest')")
    if target.count(-1) > 1:
        raise ShapeError("Reshape: at most one dimension may be -1")
    n = sh.num_elements(x.shape)
    known = int(np.prod([d for d in target if d != -1])) if target else 1
    if -1 in target:
        out = [None if d == -1 else d for d in target]
        if n is not None:
            if known == 0 or n % known:
                raise ShapeError(f"Reshape: cannot reshape {sh.fmt(x.shape)} to {target}")
            out[target.index(-1)] = n // known
        return [TensorSpec(x.dtype, tuple(out))]
    if n is not None and n != known:
        raise ShapeError(f"Reshape: cannot reshape {sh.fmt(x.shape)} ({n} elements) to {target} ({known})")
    return [TensorSpec(x.dtype, tuple(target))]


@_rule("ReshapeTo")
def _reshape_to(op, specs, attrs):
    """The rank is the length of the shape vector; the sizes are known only when it runs."""
    x, shp = specs
    if not shp.dtype.is_integer or (shp.shape is not None and len(shp.shape) != 1):
        raise DTypeError(f"ReshapeTo: the shape must be an integer vector, got {shp.dtype.name}{sh.fmt(shp.shape)}")
    n = None if shp.shape is None else shp.shape[0]
    if n == 1 and sh.num_elements(x.shape) is not None:
        return [TensorSpec(x.dtype, (sh.num_elements(x.shape),))]
    return [TensorSpec(x.dtype, None if n is None else (None,) * n)]


@_rule("Transpose")
def _transpose(op, specs, attrs):
    x = specs[0]
    perm = attrs.get("perm")
    if x.shape is None:
        return [TensorSpec(x.dtype, None)]
    if perm is None:
        return [TensorSpec(x.dtype, tuple(reversed(x.shape)))]
    if sorted(perm) != list(range(len(x.shape))):
        raise ShapeError(f"Transpose: perm {perm} is not a permutation of the {len(x.shape)} axes")
    return [TensorSpec(x.dtype, tuple(x.shape[p] for p in perm))]


@_rule("ExpandDims")
def _expand(op, specs, attrs):
    x = specs[0]
    if x.shape is None:
        return [TensorSpec(x.dtype, None)]
    ax = attrs["axis"]
    r = len(x.shape) + 1
    if not -r <= ax < r:
        raise ShapeError(f"ExpandDims: axis {ax} out of range for rank {len(x.shape)}")
    s = list(x.shape)
    s.insert(ax % r, 1)
    return [TensorSpec(x.dtype, tuple(s))]


@_rule("Concat")
def _concat(op, specs, attrs):
    d = _same_dtype(op, specs)
    ax = attrs["axis"]
    ranks = {len(s.shape) for s in specs if s.shape is not None}
    if len(ranks) > 1:
        raise ShapeError(f"Concat: operands have different ranks {sorted(ranks)}")
    if not ranks:
        return [TensorSpec(d, None)]
    r = ranks.pop()
    ax = _axis(op, ax, r)
    out: list[Any] = [None] * r
    for i in range(r):
        dims = [s.shape[i] for s in specs if s.shape is not None]
        if i == ax:
            out[i] = None if any(x is None for x in dims) or len(dims) < len(specs) else sum(dims)
        else:
            known = {x for x in dims if x is not None}
            if len(known) > 1:
                raise ShapeError(f"Concat: dimension {i} differs among operands: {sorted(known)}")
            out[i] = known.pop() if known else None
    return [TensorSpec(d, tuple(out))]


@_rule("Pack")
def _pack(op, specs, attrs):
    d = _same_dtype(op, specs)
    shape = specs[0].shape
    for s in specs[1:]:
        if not sh.compatible(shape, s.shape):
            raise ShapeError(f"Pack: operands have different shapes {sh.fmt(shape)} and {sh.fmt(s.shape)}")
        shape = sh.merge(shape, s.shape)
    return [TensorSpec(d, None if shape is None else (len(specs), *shape))]


def getitem_shape(shape: sh.Shape, spec: Sequence[dict[str, Any]]) -> sh.Shape:
    """Static result shape of basic indexing (see ops.getitem for the spec format)."""
    if shape is None:
        return None
    if len(spec) > len(shape):
        raise ShapeError(f"GetItem: {len(spec)} indices for a tensor of rank {len(shape)}")
    out: list[Any] = []
    for i, e in enumerate(spec):
        n = shape[i]
        if e["kind"] == "index":
            v = e["value"]
            if isinstance(v, int) and n is not None and not -n <= v < n:
                raise ShapeError(f"GetItem: index {v} out of range for dimension {i} of size {n}")
        else:
            start, stop, step = e["start"], e["stop"], e["step"]
            if n is not None and all(isinstance(x, int) or x is None for x in (start, stop)):
                out.append(len(range(*slice(start, stop, step).indices(n))))
            else:
                out.append(None)
    out.extend(shape[len(spec):])
    return tuple(out)


@_rule("GetItem")
def _getitem(op, specs, attrs):
    x = specs[0]
    for s in specs[1:]:
        if not s.dtype.is_integer or (s.shape is not None and s.shape != ()):
            raise DTypeError(f"GetItem: tensor indices must be integer scalars, got {s.dtype.name}{sh.fmt(s.shape)}")
    return [TensorSpec(x.dtype, getitem_shape(x.shape, attrs["spec"]))]


@_rule("GetItemGrad")
def _getitem_grad(op, specs, attrs):
    getitem_shape(specs[0].shape, attrs["spec"])  # the forward GetItem's check, on the shape it indexed
    return [TensorSpec(specs[1].dtype, specs[0].shape)]


@_rule("Gather")
def _gather(op, specs, attrs):
    x, idx = specs
    if not idx.dtype.is_integer:
        raise DTypeError(f"Gather: indices must be integers, got {idx.dtype.name}")
    ax = attrs.get("axis", 0)
    if x.shape is not None and len(x.shape) == 0:
        raise ShapeError("Gather: cannot gather from a scalar: it has no axis to take elements along")
    if x.shape is None or idx.shape is None:
        return [TensorSpec(x.dtype, None)]
    ax = _axis(op, ax, len(x.shape))
    return [TensorSpec(x.dtype, (*x.shape[:ax], *idx.shape, *x.shape[ax + 1:]))]


@_rule("ScatterAddLike")
def _scatter_add_like(op, specs, attrs):
    like, idx, upd = specs
    return [TensorSpec(upd.dtype, like.shape)]


@_rule("UpdateSlot")
def _update_slot(op, specs, attrs):
    """``x`` keeps its type; ``i`` is an int32 scalar and ``v`` has ``x``'s dtype and the shape of one slot."""
    x, i, v = specs
    if i.shape is not None and len(i.shape) != 0:
        raise ShapeError(f"UpdateSlot: the index must be a scalar, got shape {list(i.shape)}")
    if x.shape is not None and len(x.shape) == 0:
        raise ShapeError("UpdateSlot: cannot update a slot of a scalar: it has no axis 0")
    if v.dtype != x.dtype:
        raise DTypeError(f"UpdateSlot: the value is {v.dtype.name}, the tensor {x.dtype.name}")
    if x.shape is not None and v.shape is not None and not sh.compatible(tuple(x.shape[1:]), tuple(v.shape)):
        raise ShapeError(f"UpdateSlot: a value of shape {list(v.shape)} does not fit a slot of shape "
                         f"{list(x.shape[1:])}")
    return [TensorSpec(x.dtype, x.shape)]


@_rule("Tile")
def _tile(op, specs, attrs):
    x = specs[0]
    mult = attrs["multiples"]
    if any(m < 0 for m in mult):
        raise ShapeError(f"Tile: multiples must be >= 0, got {list(mult)}")
    if x.shape is None:
        return [TensorSpec(x.dtype, None)]
    if len(mult) != len(x.shape):
        raise ShapeError(f"Tile: {len(mult)} multiples for a tensor of rank {len(x.shape)}")
    return [TensorSpec(x.dtype, tuple(None if d is None else d * m for d, m in zip(x.shape, mult)))]


def reduced_shape(shape: sh.Shape, axis: Any, keepdims: bool) -> sh.Shape:
    """The shape of a reduction's result. A tensor of unknown rank reduced over every axis is a
    scalar all the same (a loop variable summed that way keeps its shape)."""
    if shape is None:
        return () if axis is None and not keepdims else None
    r = len(shape)
    listed = [] if axis is None else (list(axis) if isinstance(axis, (list, tuple)) else [axis])
    for a in listed:
        if not -r <= a < max(r, 1):
            raise ShapeError(f"reduction axis {a} out of range for rank {r}")
    axes = set(range(r)) if axis is None else {a % r if r else 0 for a in listed}
    if len(axes) < len(listed):  # (the kernels refuse it when they run: refused here, where it is known)
        raise ShapeError(f"reduction axes {listed} name an axis twice for rank {r}")
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


@_rule("Sum", "Prod", "Mean", "Max", "Min", "All", "Any")
def _reduce(op, specs, attrs):
    x = specs[0]
    if op in ("All", "Any"):
        if x.dtype != dt.bool_:
            raise DTypeError(f"{op}: expected a bool operand, got {x.dtype.name}")
    else:
        _numeric(op, x.dtype)
    try:
        return [TensorSpec(x.dtype, reduced_shape(x.shape, attrs.get("axis"), attrs.get("keepdims", False)))]
    except ShapeError as e:
        raise ShapeError(f"{op}: {e}") from None


@_rule("Cumsum", "Cumprod")
def _cumsum(op, specs, attrs):
    x = specs[0]
    _numeric(op, x.dtype)
    rank = None if x.shape is None else len(x.shape)
    if rank == 0:
        raise ShapeError(f"{op}: the input must have rank 1 or more, got a scalar")
    _axis(op, attrs["axis"], rank)
    return [TensorSpec(x.dtype, x.shape)]


@_rule("ArgMax", "ArgMin")
def _arg_reduce(op, specs, attrs):
    x = specs[0]
    _numeric(op, x.dtype)
    d = dt.as_dtype(attrs.get("dtype", "int64"))
    if not d.is_integer:
        raise DTypeError(f"{op}: the index dtype must be an integer, got {d.name}")
    if x.shape is None:
        return [TensorSpec(d, None)]
    ax = _axis(op, attrs.get("axis", 0), len(x.shape))
    return [TensorSpec(d, tuple(s for i, s in enumerate(x.shape) if i != ax))]


@_rule("TopK")
def _top_k(op, specs, attrs):
    x = specs[0]
    _numeric(op, x.dtype)
    k = int(attrs["k"])
    if k < 0:
        raise ShapeError(f"TopK: k must be >= 0, got {k}")
    if x.shape is None:
        return [TensorSpec(x.dtype, None), TensorSpec(dt.int32, None)]
    if not x.shape or x.shape[-1] is not None and x.shape[-1] < k:
        raise ShapeError(f"TopK: input must have at least k={k} entries along its last axis, got {sh.fmt(x.shape)}")
    out = (*x.shape[:-1], k)
    return [TensorSpec(x.dtype, out), TensorSpec(dt.int32, out)]


@_rule("ReverseSequence")
def _reverse_sequence(op, specs, attrs):
    x, n = specs
    if not n.dtype.is_integer or n.shape is not None and len(n.shape) != 1:
        raise DTypeError(f"ReverseSequence: the lengths must be an integer vector, got {n.dtype.name}{sh.fmt(n.shape)}")
    if x.shape is not None:
        sa, ba = attrs["seq_axis"], attrs["batch_axis"]
        if not (0 <= sa < len(x.shape) and 0 <= ba < len(x.shape)) or sa == ba:
            raise ShapeError(f"ReverseSequence: seq_axis {sa} and batch_axis {ba} must be two axes of "
                             f"{sh.fmt(x.shape)}")
        if n.shape is not None and not sh.compatible((x.shape[ba],), n.shape):
            raise ShapeError(f"ReverseSequence: {n.shape[0]} lengths for a batch of {x.shape[ba]}")
    return [x]


@_rule("ZerosLike", "OnesLike")
def _like(op, specs, attrs):
    return [TensorSpec(specs[0].dtype, specs[0].shape)]


@_rule("Fill")
def _fill(op, specs, attrs):
    """A tensor of the shape ``dims`` gives, filled with the scalar ``val`` (TensorFlow's Fill). Why
    ShapeErrors for the ranks: the interpreters and the fast backend re-ask this rule when the
    program runs, so a ``dims`` or ``val`` of the wrong rank known only then (``tn.range`` of a fed
    [1] limit) is refused with these words, not numpy's, nor broadcast silently (a vector value)."""
    shp, val = specs
    if shp.dtype != dt.int32:
        raise DTypeError(f"Fill: the shape must be an int32 vector, got {shp.dtype.name}")
    if shp.shape is not None and len(shp.shape) != 1:
        raise ShapeError(f"Fill: the shape must be a vector, got a tensor of shape {sh.fmt(shp.shape)}")
    if val.shape is not None and val.shape != ():
        raise ShapeError(f"Fill: the value must be a scalar, got shape {sh.fmt(val.shape)}")
    n = None if shp.shape is None else shp.shape[0]
    return [TensorSpec(val.dtype, None if n is None else (None,) * n)]


def _checkpoint_attrs(op: str, attrs: dict[str, Any]) -> None:
    """``slots``, the most slots a loop's budget holds (a positive int32), ``loop``, its name,
    ``state_bytes`` and ``memory_budget``, the bytes of one checkpoint and the loop's budget
    (positive ints: ``memory_plan.Checkpointing``), and ``budget_from``, whose budget it is."""
    for a, top in (("slots", 2**31 - 1), ("state_bytes", 2**63 - 1), ("memory_budget", 2**63 - 1)):
        v = attrs.get(a)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= top:
            raise GraphBuildError(f"{op}: attr {a} must be a positive {'int32' if a == 'slots' else 'int'}, got {v!r}")
    if not isinstance(attrs.get("loop"), str):
        raise GraphBuildError(f"{op}: attr loop must be the loop's name (a string), got {attrs.get('loop')!r}")
    if attrs.get("budget_from", "loop") not in ("loop", "gradient"):
        raise GraphBuildError(f"{op}: attr budget_from must be 'loop' or 'gradient' (whose memory_budget), got "
                              f"{attrs.get('budget_from')!r}")


@_rule("CheckpointSlots")
def _checkpoint_slots(op, specs, attrs):
    _checkpoint_attrs(op, attrs)
    return [TensorSpec(dt.int32, ())]


@_rule("CheckpointTrips")
def _checkpoint_trips(op, specs, attrs):
    _checkpoint_attrs(op, attrs)
    (n,) = specs
    if n.dtype != dt.int32:
        raise DTypeError(f"CheckpointTrips: the trip count must be int32, got {n.dtype.name}")
    if n.shape is not None and n.shape != ():
        raise ShapeError(f"CheckpointTrips: the trip count must be a scalar, got shape {sh.fmt(n.shape)}")
    return [TensorSpec(dt.int32, ())]


# ---- windows: convolution and pooling over NHWC images (geometry in turnout.windows) -----------------
def _image(op: str, what: str, spec: TensorSpec) -> tuple[Any, ...]:
    """``spec``'s shape as four entries (None where unknown): an NHWC image batch or an HWIO filter."""
    if spec.shape is None:
        return (None,) * 4
    if len(spec.shape) != 4:
        raise ShapeError(f"{op}: {what} must have rank 4, got shape {sh.fmt(spec.shape)}")
    return tuple(spec.shape)


def _same_size(op: str, what: str, a: Any, b: Any) -> None:
    if a is not None and b is not None and a != b:
        raise ShapeError(f"{op}: {what}: {a} against {b}")


def _conv_shapes(op: str, specs: Sequence[TensorSpec], attrs: dict[str, Any], x: TensorSpec, w: TensorSpec,
                 dy: Optional[TensorSpec] = None) -> tuple[Any, Any]:
    """Check a convolution's input ``x`` (NHWC) against its filter ``w`` (HWIO) and, for the two
    backprops, the gradient ``dy`` against the output they imply; the output's shape."""
    windows.check_attrs(op, attrs)
    d = _same_dtype(op, specs)
    _floating(op, d)
    xs, ws = _image(op, "the input", x), _image(op, "the filter", w)
    if any(k is not None and k < 1 for k in ws[:2]):
        raise ShapeError(f"{op}: the filter must have at least one row and column, got shape {sh.fmt(w.shape)}")
    g = windows.feature_groups(op, attrs)
    if g == 1:
        _same_size(op, "the input's channels differ from the filter's input channels (axis 2)", xs[3], ws[2])
    else:
        _same_size(op, f"the input's channels differ from the filter's input channels (axis 2) times groups={g}",
                   xs[3], None if ws[2] is None else ws[2] * g)
        if ws[3] is not None and ws[3] % g:
            raise ShapeError(f"{op}: the filter's output channels (axis 3), {ws[3]}, are not a multiple of "
                             f"groups={g}")
    oh, ow = windows.out_hw(op, attrs, xs[1:3], ws[:2])
    out = (xs[0], oh, ow, ws[3])
    if dy is not None:
        ds = _image(op, "the output gradient", dy)
        for k, what in enumerate(("batch", "rows", "columns", "channels")):
            _same_size(op, f"the output gradient's {what} differ from the convolution's output {sh.fmt(out)}",
                       ds[k], out[k])
    return d, out


@_rule("Conv2D")
def _conv2d(op, specs, attrs):
    """``x`` (NHWC) convolved with ``w`` (HWIO): TensorFlow's ``Conv2D``, a cross-correlation."""
    d, out = _conv_shapes(op, specs, attrs, specs[0], specs[1])
    return [TensorSpec(d, out)]


@_rule("Conv2DBackpropInput")
def _conv2d_backprop_input(op, specs, attrs):
    """``(like, w, dy)``: the gradient of Conv2D with respect to its input, shaped like ``like``."""
    like, w, dy = specs
    d, _ = _conv_shapes(op, specs, attrs, like, w, dy)
    return [TensorSpec(d, like.shape)]


@_rule("Conv2DBackpropFilter")
def _conv2d_backprop_filter(op, specs, attrs):
    """``(x, like, dy)``: the gradient of Conv2D with respect to its filter, shaped like ``like``."""
    x, like, dy = specs
    d, _ = _conv_shapes(op, specs, attrs, x, like, dy)
    return [TensorSpec(d, like.shape)]


def _pool_shape(op: str, specs: Sequence[TensorSpec], attrs: dict[str, Any], floating: bool) -> tuple[Any, Any]:
    """Check a pooling op's input (NHWC, ``specs[0]``) and the rest against the pooled shape."""
    windows.check_attrs(op, attrs)
    d = _same_dtype(op, specs)
    (_floating if floating else _numeric)(op, d)
    xs = _image(op, "the input", specs[0])
    oh, ow = windows.out_hw(op, attrs, xs[1:3])
    out = (xs[0], oh, ow, xs[3])
    for s in specs[1:]:
        ss = _image(op, "the pooled value and its gradient", s)
        for k in range(4):
            _same_size(op, f"a pooled value or gradient of shape {sh.fmt(s.shape)} for a pooling of shape "
                       f"{sh.fmt(out)}", ss[k], out[k])
    return d, out


@_rule("MaxPool", "AvgPool")
def _pool(op, specs, attrs):
    """The largest (the mean) of each window; an average counts only the elements inside the input."""
    d, out = _pool_shape(op, specs, attrs, floating=op == "AvgPool")
    return [TensorSpec(d, out)]


@_rule("MaxPoolGrad")
def _max_pool_grad(op, specs, attrs):
    """``(x, y, dy)``: each window's gradient goes to the first largest element of ``x`` in it."""
    d, _ = _pool_shape(op, specs, attrs, floating=True)
    return [TensorSpec(d, specs[0].shape)]


@_rule("AvgPoolGrad")
def _avg_pool_grad(op, specs, attrs):
    """``(like, dy)``: each window's gradient spread evenly over its elements inside the input."""
    d, _ = _pool_shape(op, specs, attrs, floating=True)
    return [TensorSpec(d, specs[0].shape)]


@_rule("Shape")
def _shape(op, specs, attrs):
    return [TensorSpec(dt.int32, (None if specs[0].shape is None else len(specs[0].shape),))]


@_rule("Size")
def _size(op, specs, attrs):
    return [TensorSpec(dt.int32, ())]


def _one_way(op: str, small: sh.Shape, big: sh.Shape, what: str) -> None:
    """Refuse ``small`` where it cannot broadcast to ``big`` as far as both are known: more dimensions,
    or a trailing dimension that is neither 1 nor ``big``'s. Why: broadcasting is one way here (the
    result has ``big``'s shape), so ``sh.broadcast``'s two-way check would take [3, 1] against [3];
    without this the mismatch surfaced when the op ran, as numpy's "operand has more dimensions than
    allowed by the axis remapping" on the interpreters and another message on the fast backend."""
    if small is None or big is None:
        return
    lead = len(big) - len(small)
    if lead < 0 or any(a not in (1, None) and big[i + lead] is not None and a != big[i + lead]
                       for i, a in enumerate(small)):
        raise ShapeError(what)


@_rule("BroadcastLike")
def _broadcast_like(op, specs, attrs):
    x, like = specs[0].shape, specs[1].shape
    _one_way(op, x, like, f"BroadcastLike: shape {sh.fmt(x)} does not broadcast to {sh.fmt(like)}")
    return [TensorSpec(specs[0].dtype, like)]


@_rule("SumToLike")
def _sum_to_like(op, specs, attrs):
    x, like = specs[0].shape, specs[1].shape
    _one_way(op, like, x, f"SumToLike: a tensor of shape {sh.fmt(x)} cannot be summed to shape {sh.fmt(like)}")
    return [TensorSpec(specs[0].dtype, like)]


# ---- TensorArray -----------------------------------------------------------------------------------
def _ta_spec(d: dt.DType, shape: sh.Shape) -> TensorSpec:
    return TensorSpec(dt.tensor_array, (), d, shape)


def _need_ta(op: str, s: TensorSpec) -> None:
    if s.dtype != dt.tensor_array:
        raise DTypeError(f"{op}: expected a TensorArray, got a {s.dtype.name} tensor")


#: the operands of the TensorArray ops that must be scalars, by position, with what each is. Why a
#: table: a fed size or index of unknown shape is known to be a vector only when it runs, and these
#: ops' rules are not asked then (their other operand, a TensorArray, is no array), so numpy's
#: "only 0-dimensional arrays can be converted to Python scalars" was the interpreters' message, and
#: the fast backend gave up lowering the op. ``scalar_operand_error`` reads this table for every
#: backend, at run time as at build time.
SCALAR_OPERANDS: dict[str, dict[int, str]] = {
    "TensorArrayNew": {0: "size"},
    "TensorArrayWrite": {1: "index"},
    "TensorArrayRead": {1: "index"},
    "TensorArrayReadOrZeros": {1: "index"},
    "TensorArrayAccumulate": {1: "index"},
}


def scalar_operand_error(op: str, shapes: Sequence[Optional[tuple[Optional[int], ...]]]) -> Optional[str]:
    """The error of ``op`` whose operand of ``SCALAR_OPERANDS`` has a shape in ``shapes`` (one per
    operand, None where unknown or not an array) that is not a scalar's, else None."""
    for k, what in SCALAR_OPERANDS.get(op, {}).items():
        shape = shapes[k] if k < len(shapes) else None
        if shape is not None and tuple(shape) != ():
            return f"{op}: the {what} must be a scalar, got shape {sh.fmt(tuple(shape))}"
    return None


def _need_index(op: str, s: TensorSpec, k: int = 1) -> None:
    """Operand ``k`` of ``op`` is an int32 scalar (``SCALAR_OPERANDS`` names it)."""
    what = SCALAR_OPERANDS[op][k]
    if s.dtype != dt.int32:
        raise DTypeError(f"{op}: the {what} must be an int32 scalar, got {s.dtype.name}{sh.fmt(s.shape)}")
    bad = scalar_operand_error(op, [None] * k + [s.shape])
    if bad is not None:
        raise ShapeError(bad)


@_rule("TensorArrayNew")
def _ta_new(op, specs, attrs):
    _need_index(op, specs[0], 0)
    return [_ta_spec(dt.as_dtype(attrs["dtype"]), sh.as_shape(attrs.get("element_shape")))]


@_rule("TensorArrayWrite")
def _ta_write(op, specs, attrs):
    ta, i, v = specs
    _need_ta(op, ta)
    _need_index(op, i)
    if v.dtype != ta.elem_dtype:
        raise DTypeError(f"{op}: writing {v.dtype.name} into a TensorArray of {ta.elem_dtype.name}")  # type: ignore[union-attr]
    if attrs.get("ragged", False):  # elements of any shape (an imported list of Optionals)
        return [_ta_spec(ta.elem_dtype, None)]  # type: ignore[arg-type]
    if not sh.compatible(ta.elem_shape, v.shape):
        raise ShapeError(f"{op}: writing shape {sh.fmt(v.shape)} into a TensorArray of {sh.fmt(ta.elem_shape)}")
    return [_ta_spec(ta.elem_dtype, sh.merge(ta.elem_shape, v.shape))]  # type: ignore[arg-type]


@_rule("TensorArrayRead")
def _ta_read(op, specs, attrs):
    ta, i = specs
    _need_ta(op, ta)
    _need_index(op, i)
    return [TensorSpec(ta.elem_dtype, ta.elem_shape)]  # type: ignore[arg-type]


@_rule("TensorArrayStack")
def _ta_stack(op, specs, attrs):
    (ta,) = specs
    _need_ta(op, ta)
    es = ta.elem_shape
    n = attrs.get("static_size")  # the array's size, when the builder knew it (TensorArray.stack)
    return [TensorSpec(ta.elem_dtype, None if es is None else (n, *es))]  # type: ignore[arg-type]


@_rule("TensorArrayUnstack")
def _ta_unstack(op, specs, attrs):
    (v,) = specs
    if v.shape is not None and len(v.shape) == 0:
        raise ShapeError("TensorArrayUnstack: cannot unstack a scalar")
    return [_ta_spec(v.dtype, None if v.shape is None else tuple(v.shape[1:]))]


@_rule("TensorArraySize")
def _ta_size(op, specs, attrs):
    _need_ta(op, specs[0])
    return [TensorSpec(dt.int32, ())]


@_rule("TensorArrayAdd")
def _ta_add(op, specs, attrs):
    a, b = specs
    _need_ta(op, a)
    _need_ta(op, b)
    if a.elem_dtype != b.elem_dtype:
        raise DTypeError(f"{op}: TensorArrays of {a.elem_dtype.name} and {b.elem_dtype.name}")  # type: ignore[union-attr]
    return [_ta_spec(a.elem_dtype, sh.most_specific_common(a.elem_shape, b.elem_shape))]  # type: ignore[arg-type]


@_rule("TensorArrayAccumulate")
def _ta_accumulate(op, specs, attrs):
    return _ta_write(op, specs, attrs)  # the same types as a write: slot i gets a value of v's type


@_rule("TensorArrayReadOrZeros")
def _ta_read_or_zeros(op, specs, attrs):
    ta, i, shp = specs
    _need_ta(op, ta)
    _need_index(op, i)
    known = sh.as_shape(attrs.get("static_shape"))  # the written value's static shape, when the builder knew it
    return [TensorSpec(ta.elem_dtype, sh.merge(ta.elem_shape, known))]  # type: ignore[arg-type]


@_rule("TensorArrayStackOrZeros")
def _ta_stack_or_zeros(op, specs, attrs):
    ta, shp = specs
    _need_ta(op, ta)
    es = ta.elem_shape
    known = sh.as_shape(attrs.get("static_shape"))  # the unstacked tensor's static shape, when known
    return [TensorSpec(ta.elem_dtype, sh.merge(None if es is None else (None, *es), known))]  # type: ignore[arg-type]


# ---- state -----------------------------------------------------------------------------------------
@_rule("VarHandle", "StackNew")
def _handle(op, specs, attrs):
    return [TensorSpec(dt.resource, ())]


def _need_resource(op: str, s: TensorSpec) -> None:
    if s.dtype != dt.resource:
        raise DTypeError(f"{op}: expected a Variable or stack handle, got a {s.dtype.name} tensor")


@_rule("ReadVariable")
def _read(op, specs, attrs):
    _need_resource(op, specs[0])
    return [TensorSpec(dt.as_dtype(attrs["dtype"]), sh.as_shape(attrs.get("shape")))]


@_rule("AssignVariable", "AssignAddVariable", "AssignSubVariable")
def _assign(op, specs, attrs):
    h, v = specs
    _need_resource(op, h)
    want = dt.as_dtype(attrs["dtype"])
    if v.dtype != want:
        raise DTypeError(f"{op}: assigning {v.dtype.name} to a {want.name} variable")
    vshape = sh.as_shape(attrs.get("shape"))
    if not sh.compatible(vshape, v.shape):
        raise ShapeError(f"{op}: assigning shape {sh.fmt(v.shape)} to a variable of shape {sh.fmt(vshape)}")
    return [TensorSpec(want, vshape)]


@_rule("StackPush")
def _push(op, specs, attrs):
    h, idx, v = specs
    _need_resource(op, h)
    return [v]


@_rule("StackPop")
def _pop(op, specs, attrs):
    _need_resource(op, specs[0])
    return [TensorSpec(dt.as_dtype(attrs["dtype"]), sh.as_shape(attrs.get("shape")),
                       dt.as_dtype(attrs["elem_dtype"]) if attrs.get("elem_dtype") else None,
                       sh.as_shape(attrs.get("elem_shape")))]


# ---- the rules at run time --------------------------------------------------------------------------
#: (op, id(attrs), input dtypes and shapes) -> (attrs, the rule's refusal or None): the verdict on
#: shapes already seen, so an interpreter's loop pays a dict lookup per firing, not the rule
_CONCRETE: dict[tuple[Any, ...], tuple[dict[str, Any], Any]] = {}
_CONCRETE_MAX = 4096


def concrete_shape_error(op: str, inputs: Sequence[Any], attrs: dict[str, Any]) -> str | None:
    """The shape rule of ``op`` applied to the concrete shapes of ``inputs`` (arrays) at run time:
    the rule's ``ShapeError`` message when it refuses them, else ``None``.

    Why: a rule can only check the shapes it knows when the graph is built. A placeholder of unknown
    shape lets ``matmul`` of two vectors, ``gather`` along an axis the value lacks or ``a[0]`` of a
    scalar be built; numpy would then compute a dot product, or fail deep inside with "tuple index
    out of range". Every backend asks the same rule of the shapes the op meets (the interpreters in
    ``kernels.run_kernel``, the fast backend when it traces, ``spec_shape_error``), so the same
    program fails alike on every backend, with the message it gets when the shapes are known at
    build time. Inputs that are not arrays (TensorArrays, handles) are not checked, and an op with
    one is asked only whether its ``SCALAR_OPERANDS`` are scalars."""
    if not inputs or op not in SHAPE_RULES:
        return None
    if op in SCALAR_OPERANDS:  # checked whatever the other operands are (a TensorArray)
        bad = scalar_operand_error(op, [x.shape if isinstance(x, (np.ndarray, np.generic)) else None for x in inputs])
        if bad is not None:
            return bad
    sig = []
    for x in inputs:
        if not isinstance(x, (np.ndarray, np.generic)):
            return None
        sig.append((x.dtype, x.shape))
    return spec_shape_error(op, sig, attrs)


def spec_shape_error(op: str, sig: Sequence[tuple[Any, tuple[int, ...]]], attrs: dict[str, Any]) -> str | None:
    """``concrete_shape_error`` for the inputs' (numpy dtype, shape) pairs, remembered per op, attrs and
    pairs: an interpreter's loop pays a dict lookup per firing, not the rule."""
    rule = SHAPE_RULES.get(op)
    if rule is None:
        return None
    key = (op, id(attrs), tuple(sig))
    hit = _CONCRETE.get(key)
    if hit is not None and hit[0] is attrs:
        return hit[1]  # type: ignore[no-any-return]
    verdict: str | None = None
    try:
        specs = [TensorSpec(dt.as_dtype(np.dtype(d)), tuple(int(s) for s in shape)) for d, shape in sig]
        _no_negative_size(op, rule(op, specs, attrs))
    except ShapeError as e:
        verdict = str(e)
    except (GraphBuildError, TypeError, ValueError, KeyError, IndexError):
        pass  # a dtype the rules do not name, or a rule that needs what only the graph knows
    if len(_CONCRETE) >= _CONCRETE_MAX:
        _CONCRETE.clear()
    _CONCRETE[key] = (attrs, verdict)  # (attrs kept alive with it, so its id is not reused)
    return verdict
