"""Import rules of the structure ops of TF1 model code: Squeeze, Unpack, IdentityN, Print,
PlaceholderWithDefault, CheckNumerics, EnsureShape, Pad / PadV2 (at paddings known at import, or
zero pads at run-time ones), OneHot, Cumsum, the batched
matrix products, Einsum, GatherNd and its gradient ScatterNd.

Each is existing Turnout primitives put together (``GetItem`` for squeezes and unstacks, ``Concat``
of filled blocks for pads, ``Equal`` against the class indices for one-hot, ``Gather`` and
``ScatterAddLike`` along linear indices for GatherNd and ScatterNd, ``Assert`` for the run-time
checks, with TensorFlow's messages), except ``Cumsum`` (its own primitive, as a running sum
is no composition of the others) and the batched products (Turnout's ``MatMul`` takes batches of
matrices). Why a module of its own: ``import_rules`` holds the rules of the control-flow, variable
and TensorArray machinery; these share none of it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout.array_ops import one_hot_part, squeeze_axes, unstack_parts
from turnout.composite import checked_that, getitem, getitem_spec, last_suffix
from turnout.errors import UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef.import_context import ImportContext, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs, _dim, _getitem, _like_shape, _partial_shape, _t
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)


def _rank(ctx: ImportContext, x: Tensor) -> int:
    if x.shape is None:
        raise UnsupportedError(f"{ctx.where()}: needs the input's rank when importing")
    return len(x.shape)


_last = last_suffix


# ---- pass-throughs ----------------------------------------------------------------------------------
@_rule("IdentityN")
def _identity_n(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    return [ctx.create("Identity", [x], suffix=_last(k, len(ins), "out")).outputs[0] for k, x in enumerate(ins)]


@_rule("Print")
def _print(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """TF1's ``tf.Print``: its first input, passed on (its gradient passes too, as TensorFlow's). The
    log line it writes to standard error when it runs is dropped: Turnout has no string tensors, and a
    print is no value of the program."""
    return [ctx.create("Identity", [_t(ins[0])]).outputs[0]]


@_rule("PlaceholderWithDefault")
def _placeholder_with_default(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The default, through an Identity that a feed replaces (every root-frame tensor can be fed).
    The Identity has the default's shape, so a declared shape less specific than it (a feed of
    another shape) is refused rather than narrowed."""
    x = _t(ins[0])
    declared = ctx.attr("shape")
    if declared is not None and (x.shape is None or len(declared) != len(x.shape)
                                 or any(d is None and s is not None for d, s in zip(declared, x.shape))):
        raise UnsupportedError(f"{ctx.where()}: its shape {declared} is less specific than its default's "
                               f"{None if x.shape is None else list(x.shape)}; Turnout feeds it with the default's")
    return [ctx.create("Identity", [x]).outputs[0]]


@_rule("CheckNumerics")
def _check_numerics(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The input, once three ``Assert`` s pass, each failing with one of TensorFlow's messages:
    ``<message> : Tensor had Inf and NaN values`` (or ``Inf`` or ``NaN``). NaN is ``x != x``; an
    infinity is a non-NaN ``x`` with ``x - x != 0``."""
    x = _t(ins[0])
    if not x.dtype.is_floating:
        raise UnsupportedError(f"{ctx.where()}: supported for floating inputs only, got {x.dtype.name}")
    every = {"axis": None, "keepdims": False}
    nan_at = ctx.create("NotEqual", [x, x], suffix="nan_at").outputs[0]
    zero = ctx.create("ZerosLike", [x], suffix="zero").outputs[0]
    inf_at = ctx.create("LogicalAnd", [ctx.create("LogicalNot", [nan_at], suffix="not_nan").outputs[0],
                                       ctx.create("NotEqual", [ctx.create("Sub", [x, x], suffix="x_minus_x").outputs[0],
                                                               zero], suffix="nonzero").outputs[0]],
                        suffix="inf_at").outputs[0]
    nan = ctx.create("Any", [nan_at], every, suffix="nan").outputs[0]
    inf = ctx.create("Any", [inf_at], every, suffix="inf").outputs[0]
    both = ctx.create("LogicalAnd", [nan, inf], suffix="both").outputs[0]
    out = x
    for k, (bad, what) in enumerate([(both, "Inf and NaN"), (inf, "Inf"), (nan, "NaN")]):
        ok = ctx.create("LogicalNot", [bad], suffix=f"no_{k}").outputs[0]
        message = f"{nd.name}: {ctx.attr('message', '')} : Tensor had {what} values"
        out = ctx.create("Assert", [ok, out], {"message": message}, suffix=None if k == 2 else f"check{k}").outputs[0]
    return [out]


# ---- shapes -----------------------------------------------------------------------------------------
@_rule("Squeeze")
def _squeeze(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``x[..., 0, ...]`` at each squeezed axis, built as ``tn.squeeze`` builds it (an axis of
    run-time size is checked to be 1 when the program runs)."""
    x = _t(ins[0])
    r = _rank(ctx, x)
    assert x.shape is not None
    dims = list(ctx.attr("squeeze_dims") or [])
    if any(not -r <= d < r for d in dims):
        raise UnsupportedError(f"{ctx.where()}: squeeze_dims {dims} out of range for rank {r}")
    axes = {d % r for d in dims} if dims else {k for k, d in enumerate(x.shape) if d == 1}
    if not dims and None in x.shape:
        raise UnsupportedError(f"{ctx.where()}: squeezing every axis of size 1 (no squeeze_dims) needs the input's "
                               f"shape when importing, got {list(x.shape)}")
    for a in sorted(axes):
        if x.shape[a] not in (None, 1):
            raise UnsupportedError(f"{ctx.where()}: squeeze_dims axis {a} must have size 1, got {x.shape[a]}")
    return [squeeze_axes(ctx, x, sorted(axes), ctx.where())]


@_rule("Unpack")
def _unpack(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    x = _t(ins[0])
    r, n = _rank(ctx, x), int(ctx.attr("num"))
    axis = int(ctx.attr("axis", 0)) % r
    assert x.shape is not None
    if x.shape[axis] not in (None, n):
        raise UnsupportedError(f"{ctx.where()}: num={n} does not match the size {x.shape[axis]} of axis {axis}")
    return unstack_parts(ctx, x, n, axis, ctx.where())


@_rule("EnsureShape")
def _ensure_shape(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """A run-time check of the dimensions the ``shape`` attribute gives that the input's static shape
    does not (an ``Assert`` with TensorFlow's message); none when the static shape has them all."""
    x, want = _t(ins[0]), ctx.attr("shape")
    if want is None:  # an unknown rank: nothing is checked
        return [ctx.create("Identity", [x]).outputs[0]]
    if _rank(ctx, x) != len(want):
        raise UnsupportedError(f"{ctx.where()}: rank {len(x.shape or ())} does not match the shape {want}")
    assert x.shape is not None
    if any(d is not None and s is not None and d != s for d, s in zip(want, x.shape)):
        raise UnsupportedError(f"{ctx.where()}: shape {list(x.shape)} is not compatible with {want}")
    open_dims = [k for k, (d, s) in enumerate(zip(want, x.shape)) if d is not None and s is None]
    if not open_dims:
        return [ctx.create("Identity", [x], shapes=[want]).outputs[0]]
    shp = ctx.create("Shape", [x], suffix="shape").outputs[0]
    got = ctx.create("Pack", [_getitem(ctx, shp, (k,), f"dim{k}") for k in open_dims], suffix="dims").outputs[0]
    need = ctx.const(np.asarray([want[k] for k in open_dims], np.int32), [x], suffix="expected")
    ok = ctx.create("All", [ctx.create("Equal", [got, need], suffix="equal").outputs[0]],
                    {"axis": None, "keepdims": False}, suffix="ok").outputs[0]
    fmt = ",".join("?" if d is None else str(d) for d in want)
    message = f"{nd.name}: Shape of tensor {nd.input[0]} is not compatible with expected shape [{fmt}]."
    return [ctx.create("Assert", [ok, x], {"message": message}, shapes=[want]).outputs[0]]


@_rule("Pad", "PadV2")
def _pad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Blocks of the pad value concatenated before and after each padded axis (``mode`` is not an
    attribute of these ops: ``MirrorPad`` is another op). The value is 0 for Pad."""
    x = _t(ins[0])
    names = ctx.data_inputs()
    r = _rank(ctx, x)
    if ctx.static(names[1]) is None:
        return [_pad_at_run_time(ctx, nd, x, _t(ins[1]), r)]
    pads = ctx.static_int_list(names[1], "the paddings")
    assert x.shape is not None
    if len(pads) != 2 * r or min(pads, default=0) < 0:
        raise UnsupportedError(f"{ctx.where()}: paddings {pads} must be {r} non-negative [before, after] pairs")
    value = np.zeros((), x.dtype.numpy) if nd.op == "Pad" else ctx.static(names[2])
    fill = ins[2] if nd.op == "PadV2" and value is None else None
    cur, shape = x, list(x.shape)
    padded = [a for a in range(r) if pads[2 * a] or pads[2 * a + 1]]
    if not padded:
        return [ctx.create("Identity", [x]).outputs[0]]
    for a in padded:
        blocks = []
        for side, n in (("before", pads[2 * a]), ("after", pads[2 * a + 1])):
            if n:
                blocks.append(_block(ctx, cur, a, n, value, fill, f"{side}{a}"))
        blocks.insert(1 if pads[2 * a] else 0, cur)
        size = shape[a]
        shape[a] = None if size is None else size + pads[2 * a] + pads[2 * a + 1]
        cur = ctx.create("Concat", blocks, {"axis": a}, suffix=None if a == padded[-1] else f"axis{a}",
                         shapes=[list(shape)]).outputs[0]
    return [cur]


def _pad_at_run_time(ctx: ImportContext, nd: Any, x: Tensor, paddings: Tensor, r: int) -> Tensor:
    """A zero pad of paddings known only at run time (the gradient of a ``Slice`` whose begin is
    computed, as ``nce_loss``'s of its true and sampled weights): ``x`` written, as a slice's gradient
    is, at ``[before : before + size]`` on each axis of zeros of the padded shape (``GetItemGrad`` into
    a ``Fill``). TensorFlow's kernel refuses a negative padding, and so does a ``KernelError`` here. A
    pad value other than zero, at run-time paddings, is refused."""
    value = np.zeros((), x.dtype.numpy) if nd.op == "Pad" else ctx.static(ctx.data_inputs()[2])
    if value is None or np.any(np.asarray(value) != 0):
        raise UnsupportedError(f"{ctx.where()}: a pad value other than zero needs paddings known when importing")
    if paddings.dtype != dt.int32:
        paddings = ctx.create("Cast", [paddings], {"dtype": "int32"}, suffix="paddings32").outputs[0]
    zero = ctx.const(np.asarray(0, np.int32), [paddings], suffix="zero")
    ok = ctx.create("All", [ctx.create("GreaterEqual", [paddings, zero], suffix="nonnegative").outputs[0]],
                    {"axis": None, "keepdims": False}, suffix="all_nonnegative").outputs[0]
    paddings = checked_that(ctx, ok, paddings, f"Pad: paddings must be non-negative (node {nd.name})", "checked")
    grown = ctx.create("Sum", [paddings], {"axis": 1, "keepdims": False}, suffix="grown").outputs[0]
    shape = ctx.create("Shape", [x], suffix="shape").outputs[0]
    padded = ctx.create("Add", [shape, grown], suffix="padded_shape").outputs[0]
    zeros = ctx.create("Fill", [padded, ctx.const(np.zeros((), x.dtype.numpy), [x], suffix="zero_value")],
                       suffix="zeros").outputs[0]
    key = []
    for k in range(r):
        before = getitem(ctx, paddings, (k, 0), f"before{k}")
        size = _dim(ctx, x, k, f"size{k}")
        size_t = size if isinstance(size, Tensor) else ctx.const(np.asarray(size, np.int32), [x], suffix=f"size{k}")
        key.append(slice(before, ctx.create("Add", [before, size_t], suffix=f"stop{k}").outputs[0], None))
    dyn: list[Tensor] = []
    spec = getitem_spec(tuple(key), dyn)
    return ctx.create("GetItemGrad", [zeros, x, *dyn], {"spec": spec}).outputs[0]


def _block(ctx: ImportContext, x: Tensor, axis: int, n: int, value: Any, fill: Value | None, suffix: str) -> Tensor:
    """A block shaped like ``x`` but ``n`` long on ``axis``, of the pad value: a constant when every
    dimension and the value are known, else a Fill of the run-time shape."""
    assert x.shape is not None
    dims = [n if k == axis else _dim(ctx, x, k, f"{suffix}_dim{k}") for k in range(len(x.shape))]
    if value is not None and all(isinstance(d, int) for d in dims):
        return ctx.const(np.full(dims, value, x.dtype.numpy), [x], suffix=suffix)
    parts = [d if isinstance(d, Tensor) else ctx.const(np.asarray(d, np.int32), [x], suffix=f"{suffix}_n{k}")
             for k, d in enumerate(dims)]
    shp = ctx.create("Pack", parts, suffix=f"{suffix}_shape").outputs[0]
    v = fill if value is None else ctx.const(np.asarray(value, x.dtype.numpy), [x], suffix=f"{suffix}_value")
    return ctx.create("Fill", [shp, v], suffix=suffix).outputs[0]


# ---- one-hot, running sums --------------------------------------------------------------------------
@_rule("OneHot")
def _one_hot(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``on where index == class else off``, the classes along ``axis``: an index outside
    ``[0, depth)`` gives a row of ``off``, as in TensorFlow (built as ``tn.one_hot`` builds it)."""
    idx, on, off = _t(ins[0]), _t(ins[2]), _t(ins[3])
    (depth,) = ctx.static_int_list(ctx.data_inputs()[1], "the depth")
    r = _rank(ctx, idx)
    axis = int(ctx.attr("axis", -1))
    if not -1 <= axis <= r:
        raise UnsupportedError(f"{ctx.where()}: axis {axis} out of range for indices of rank {r}")
    if depth < 0:
        raise UnsupportedError(f"{ctx.where()}: depth must be >= 0, got {depth}")
    return [one_hot_part(ctx, idx, depth, on, off, r if axis == -1 else axis)]


@_rule("ReverseV2", "Reverse")
def _reverse(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tf.reverse``: ``x[..., ::-1, ...]`` along the static ``axis`` list (the old ``Reverse``: a
    bool per dimension), one ``GetItem`` (numpy's basic index with step -1), whose gradient is the
    same reversal."""
    x = _t(ins[0])
    rank = None if x.shape is None else len(x.shape)
    if nd.op == "Reverse":
        dims = ctx.static(ctx.data_inputs()[1])
        if dims is None:
            raise UnsupportedError(f"{ctx.where()}: the dims must be known when importing")
        if rank is not None and np.size(dims) != rank:
            raise UnsupportedError(f"{ctx.where()}: dims has {np.size(dims)} entries for a tensor of rank {rank}")
        axes = [k for k, flip in enumerate(np.ravel(dims)) if flip]
    else:
        axes = ctx.static_int_list(ctx.data_inputs()[1], "the axes")
    if rank is None and any(a < 0 for a in axes):
        raise UnsupportedError(f"{ctx.where()}: a negative axis needs the rank, unknown at import")
    bad = [a for a in axes if rank is not None and not -rank <= a < rank]
    if bad:
        raise UnsupportedError(f"{ctx.where()}: axis {bad[0]} is out of range for rank {rank}")
    flipped = {a % rank if rank else a for a in axes}
    if len(flipped) != len(axes):
        raise UnsupportedError(f"{ctx.where()}: axes {axes} repeat a dimension")
    if not flipped:
        return [ctx.create("Identity", [x]).outputs[0]]
    key = tuple(slice(None, None, -1) if k in flipped else slice(None) for k in range(max(flipped) + 1))
    return [_getitem(ctx, x, key, None)]


@_rule("Cumsum", "Cumprod")
def _cumsum(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    (axis,) = ctx.static_int_list(ctx.data_inputs()[1], "the axis")
    attrs = {"axis": axis, "exclusive": bool(ctx.attr("exclusive", False)), "reverse": bool(ctx.attr("reverse", False))}
    return [ctx.create(nd.op, ins[:1], attrs).outputs[0]]


# ---- batched products and gathers -------------------------------------------------------------------
@_rule("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
def _batch_matmul(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Turnout's MatMul of batches (batch dimensions broadcast; BatchMatMul's equal ones are a case
    of that); ``adj_x`` / ``adj_y`` transpose, which for real types is the adjoint. ``grad_x`` and
    ``grad_y`` only tell TensorFlow that this product is a gradient: they leave its value alone."""
    a, b = _t(ins[0]), _t(ins[1])
    if nd.op == "BatchMatMulV3":
        for key in ("Ta", "Tb", "Tout"):
            if ctx.attr(key) is not None and ctx.dtype(key) != a.dtype:
                raise UnsupportedError(f"{ctx.where()}: {key} {ctx.dtype(key).name} differs from the operands' "
                                       f"{a.dtype.name}; Turnout multiplies in one dtype")
    attrs = {"transpose_a": bool(ctx.attr("adj_x", False)), "transpose_b": bool(ctx.attr("adj_y", False))}
    return [ctx.create("MatMul", [a, b], attrs).outputs[0]]


@_rule("Einsum")
def _einsum(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tf.einsum`` of one or two operands (its gradients are Einsums too). Two operands that share a
    summed label are a contraction, a batched ``MatMul`` (``_contraction``: attention's ``bhqd,bhkd->bhqk``
    costs its product, not a ``[b, h, q, k, d]`` intermediate); otherwise each operand is transposed to
    the order of its labels among all labels (the output's first, then the summed ones) and given axes
    of size 1 for the labels it lacks, the two multiplied with broadcasting and the summed labels' axes
    reduced. An ellipsis is spelled out in labels of its own (``_without_ellipsis``); no label twice in
    one operand (a diagonal), no implicit output."""
    eq = str(ctx.attr("equation")).replace(" ", "")
    if "->" not in eq:
        raise UnsupportedError(f"{ctx.where()}: equation {eq!r}: an implicit output is not supported")
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if "." in eq:
        terms, out = _without_ellipsis(ctx, eq, terms, out, [_t(x) for x in ins])
    if len(terms) != len(ins) or len(terms) > 2 or any(len(set(t)) != len(t) for t in [*terms, out]):
        raise UnsupportedError(f"{ctx.where()}: equation {eq!r}: one or two operands, each label once per operand")
    labels = list(out) + [c for c in dict.fromkeys("".join(terms)) if c not in out]
    if any(c not in "".join(terms) for c in out):
        raise UnsupportedError(f"{ctx.where()}: equation {eq!r}: an output label no operand has")
    for k, (term, x) in enumerate(zip(terms, ins)):
        if _rank(ctx, _t(x)) != len(term):
            raise UnsupportedError(f"{ctx.where()}: operand {k} has rank {_rank(ctx, _t(x))}, the equation {len(term)}")
    if len(terms) == 2 and set(terms[0]) & set(terms[1]) - set(out):
        return [_contraction(ctx, terms, out, [_t(x) for x in ins])]
    parts = []
    for k, (term, x) in enumerate(zip(terms, ins)):
        x = _t(x)
        order = sorted(range(len(term)), key=lambda j: labels.index(term[j]))
        if order != list(range(len(term))):
            x = ctx.create("Transpose", [x], {"perm": order}, suffix=f"perm{k}").outputs[0]
        for j, c in enumerate(labels):
            if c not in term:
                x = ctx.create("ExpandDims", [x], {"axis": j}, suffix=f"axis{k}_{j}").outputs[0]
        parts.append(x)
    prod = parts[0] if len(parts) == 1 else ctx.create("Mul", parts, suffix="product").outputs[0]
    summed = list(range(len(out), len(labels)))
    if not summed:
        return [ctx.create("Identity", [prod]).outputs[0]]
    return [ctx.create("Sum", [prod], {"axis": summed, "keepdims": False}).outputs[0]]


def _without_ellipsis(ctx: ImportContext, eq: str, terms: list[str], out: str,
                      xs: list[Tensor]) -> tuple[list[str], str]:
    """The equation with each ``...`` spelled out in labels of its own (letters the equation does not
    use): an operand's ``...`` stands for the axes its other labels leave, right-aligned with the
    other operands' (numpy's broadcasting), and the output's for the longest of them."""
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in eq]
    counts = []
    for k, (term, x) in enumerate(zip(terms, xs)):
        if term.count("...") > 1 or term.replace("...", "").count(".") or (term.count("...") == 0 and "." in term):
            raise UnsupportedError(f"{ctx.where()}: equation {eq!r}: a malformed ellipsis")
        counts.append(_rank(ctx, x) - len(term.replace("...", "")) if "..." in term else 0)
        if counts[-1] < 0:
            raise UnsupportedError(f"{ctx.where()}: equation {eq!r}: operand {k} has too few axes for its labels")
    longest = max(counts)
    if longest > len(free):
        raise UnsupportedError(f"{ctx.where()}: equation {eq!r}: too many axes under the ellipsis")
    labels = free[:longest]
    spelled = [t.replace("...", "".join(labels[longest - n:])) for t, n in zip(terms, counts)]
    return spelled, out.replace("...", "".join(labels))


def _contraction(ctx: ImportContext, terms: list[str], out: str, xs: list[Tensor]) -> Tensor:
    """A two-operand einsum with summed labels as one batched ``MatMul``: the labels of both operands
    and the output are the batch, those of both only are contracted, those of one only and the output
    are its free ones (one only and not in the output: summed first). Each operand is transposed to
    (batch, free, contracted) or (batch, contracted, free) and its free and contracted axes merged,
    the product split back into the free axes and transposed to the output's order."""
    ta, tb = terms
    for k, t in enumerate(terms):  # (a label of one operand, summed: reduced before the product)
        alone = [j for j, c in enumerate(t) if c not in terms[1 - k] and c not in out]
        if alone:
            xs[k] = ctx.create("Sum", [xs[k]], {"axis": alone, "keepdims": False}, suffix=f"alone{k}").outputs[0]
            terms[k] = "".join(c for c in t if c not in terms[1 - k] and c in out or c in terms[1 - k])
    ta, tb = terms
    batch = [c for c in out if c in ta and c in tb]
    summed = [c for c in ta if c in tb and c not in out]
    free_a, free_b = [c for c in ta if c not in tb], [c for c in tb if c not in ta]
    a = _grouped(ctx, xs[0], ta, [batch, free_a, summed], "a")
    b = _grouped(ctx, xs[1], tb, [batch, summed, free_b], "b")
    prod = ctx.create("MatMul", [a, b], {"transpose_a": False, "transpose_b": False}, suffix="contracted").outputs[0]
    # (a batch label may be 1 in one operand and broadcast: its size is the product's)
    sizes = [*(_dim(ctx, prod, k, f"size_{c}") for k, c in enumerate(batch)),
             *(_dim(ctx, xs[0], ta.index(c), f"size_{c}") for c in free_a),
             *(_dim(ctx, xs[1], tb.index(c), f"size_{c}") for c in free_b)]
    split = _reshaped(ctx, prod, sizes, "split")
    order = [c for c in [*batch, *free_a, *free_b]]
    perm = [order.index(c) for c in out]
    if perm == list(range(len(perm))):
        return ctx.create("Identity", [split]).outputs[0]
    return ctx.create("Transpose", [split], {"perm": perm}).outputs[0]


def _grouped(ctx: ImportContext, x: Tensor, term: str, groups: list[list[str]], name: str) -> Tensor:
    """``x`` (labelled by ``term``) transposed to the labels of ``groups`` in order, the first group's
    axes kept and each later group merged into one axis (an empty group: an axis of size 1)."""
    order = [term.index(c) for g in groups for c in g]
    if order != list(range(len(order))):
        x = ctx.create("Transpose", [x], {"perm": order}, suffix=f"{name}_perm").outputs[0]
    labels = [c for g in groups for c in g]
    sizes: list[Any] = [_dim(ctx, x, labels.index(c), f"{name}_{c}") for c in groups[0]]
    for k, g in enumerate(groups[1:]):
        parts = [_dim(ctx, x, labels.index(c), f"{name}_{c}") for c in g]
        sizes.append(_product(ctx, parts, x, f"{name}_group{k}"))
    return _reshaped(ctx, x, sizes, f"{name}_merged")


def _product(ctx: ImportContext, parts: list[Any], anchor: Tensor, suffix: str) -> Any:
    """The product of axis sizes (ints, or int32 scalars known when the program runs)."""
    if all(isinstance(p, int) for p in parts):
        return int(np.prod(parts, dtype=np.int64))
    tensors = [p if isinstance(p, Tensor) else ctx.const(np.asarray(p, np.int32), [anchor], suffix=f"{suffix}_{k}")
               for k, p in enumerate(parts)]
    packed = ctx.create("Pack", tensors, suffix=f"{suffix}_sizes").outputs[0]
    return ctx.create("Prod", [packed], {"axis": [0], "keepdims": False}, suffix=suffix).outputs[0]


def _reshaped(ctx: ImportContext, x: Tensor, sizes: list[Any], suffix: str) -> Tensor:
    """``x`` reshaped to ``sizes`` (ints, or int32 scalars known when the program runs)."""
    if all(isinstance(d, int) for d in sizes):
        return ctx.create("Reshape", [x], {"shape": [int(d) for d in sizes]}, suffix=suffix).outputs[0]
    parts = [d if isinstance(d, Tensor) else ctx.const(np.asarray(d, np.int32), [x], suffix=f"{suffix}_{k}")
             for k, d in enumerate(sizes)]
    shape = ctx.create("Pack", parts, suffix=f"{suffix}_shape").outputs[0]
    known = [d if isinstance(d, int) else None for d in sizes]
    return ctx.create("ReshapeTo", [x, shape], suffix=suffix, shapes=[known]).outputs[0]


def _linear_index(ctx: ImportContext, idx: Tensor, like: Tensor, what: str) -> tuple[Tensor, list[int]]:
    """The index rows ``idx[..., :K]`` into a tensor shaped like ``like`` as linear indices into its
    first K axes flattened into one, after an ``Assert`` that each index is within its axis (a
    linear index could otherwise land in range); and the shape of ``like`` past those K axes.
    Every dimension of ``like`` but the first must be known when importing."""
    ri, rl = _rank(ctx, idx), _rank(ctx, like)
    assert idx.shape is not None and like.shape is not None
    k = idx.shape[-1] if ri else None
    if k is None or k > rl or any(d is None for d in like.shape[1:]):
        raise UnsupportedError(f"{ctx.where()}: needs the indices' last dimension and the {what} shape past the "
                               f"first axis when importing, got {k} and {list(like.shape)}")
    if idx.dtype != dt.int32:
        idx = ctx.create("Cast", [idx], {"dtype": "int32"}, suffix="indices").outputs[0]
    sizes = [_dim(ctx, like, j, f"dim{j}") for j in range(k)]  # (only the first may be a run-time size)
    lo = ctx.const(np.zeros((), np.int32), [idx], suffix="zero")
    hi = ctx.create("Pack", [d if isinstance(d, Tensor) else ctx.const(np.asarray(d, np.int32), [idx],
                                                                        suffix=f"size{j}")
                             for j, d in enumerate(sizes)], suffix="sizes").outputs[0]
    ok = ctx.create("LogicalAnd", [ctx.create("GreaterEqual", [idx, lo], suffix="ge").outputs[0],
                                   ctx.create("Less", [idx, hi], suffix="lt").outputs[0]], suffix="in_range").outputs[0]
    shown = ",".join("?" if d is None else str(d) for d in like.shape)
    idx = ctx.checked(ok, idx, f"indices do not index into {what} shape [{shown}]", "check")
    rest = [int(d or 0) for d in like.shape[1:]]  # (all known: checked above)
    strides = [int(np.prod(rest[j:k - 1])) for j in range(k)]
    flat = ctx.const(np.asarray(strides, np.int32), [idx], suffix="strides")
    lin = ctx.create("Sum", [ctx.create("Mul", [idx, flat], suffix="scaled").outputs[0]],
                     {"axis": [-1], "keepdims": False}, suffix="linear").outputs[0]
    return lin, rest[k - 1:]


@_rule("GatherNd")
def _gather_nd(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``params[tuple(indices[..., :])]``: a ``Gather`` of the linear indices (``_linear_index``)
    from the params with their first K axes flattened (K: the indices' last dimension)."""
    params = _t(ins[0])
    if ctx.attr("bad_indices_policy", "") not in ("", "DEFAULT", "ERROR"):
        raise UnsupportedError(f"{ctx.where()}: bad_indices_policy {ctx.attr('bad_indices_policy')!r} is not "
                               "supported (out-of-range indices are an error)")
    lin, rest = _linear_index(ctx, _t(ins[1]), params, "param")
    rows = ctx.create("Reshape", [params], {"shape": [-1, *rest]}, suffix="rows").outputs[0]
    return [ctx.create("Gather", [rows, lin], {"axis": 0}).outputs[0]]


@_rule("ScatterNd")
def _scatter_nd(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Zeros of ``shape`` with each update added at its index row (GatherNd's gradient): Turnout's
    ``ScatterAddLike`` along the linear indices of ``_linear_index`` into the rows of the first K
    axes flattened, reshaped back. ``shape`` is known when importing, or read by a Shape op (the
    gradient's ``shape(params)``), whose input then stands for it."""
    idx, upd = _t(ins[0]), _t(ins[1])
    if ctx.attr("bad_indices_policy", "") not in ("", "DEFAULT", "ERROR"):
        raise UnsupportedError(f"{ctx.where()}: bad_indices_policy {ctx.attr('bad_indices_policy')!r} is not "
                               "supported (out-of-range indices are an error)")
    tname = ctx.data_inputs()[2]
    shape = ctx.static(tname)
    if shape is not None:
        like = ctx.const(np.zeros([int(d) for d in np.ravel(shape)], upd.dtype.numpy), [upd], suffix="zeros")
    else:
        like = _like_shape(ctx, tname, _t(ins[2]))
    lin, rest = _linear_index(ctx, idx, like, "output")
    rows = ctx.create("Reshape", [like], {"shape": [-1, *rest]}, suffix="rows").outputs[0]
    summed = ctx.create("ScatterAddLike", [rows, lin, upd], {"axis": 0}, suffix="sum").outputs[0]
    assert like.shape is not None
    return [ctx.create("Reshape", [summed], {"shape": [-1 if d is None else int(d) for d in like.shape]}).outputs[0]]


@_rule("SparseToDense")
def _sparse_to_dense(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tf.sparse_to_dense`` (TF1's one-hot labels of old tutorials): ``default_value`` everywhere but
    at each index row of ``sparse_indices`` (a vector or a scalar: indices into a 1-D output), which
    holds its entry of ``sparse_values`` (or the one scalar value). The indices are checked as
    TensorFlow's kernel checks them: inside the output (``_linear_index``) and, with
    ``validate_indices`` (the default), in strictly increasing row-major order; without it a
    repeated index, whose value TensorFlow leaves unspecified, is refused too. The output's shape
    must be known at import past its first axis (``sampled_softmax_loss`` removes its accidental hits
    into ``[batch, num_sampled]``, the batch known when it runs)."""
    idx, values, default = _t(ins[0]), _t(ins[2]), _t(ins[3])
    dims = _partial_shape(ctx, ctx.data_inputs()[1])
    if dims is None or any(d is None for d in dims[1:]):
        raise UnsupportedError(f"{ctx.where()}: needs the output shape past its first axis when importing")
    if idx.shape is None or len(idx.shape) > 2:
        raise UnsupportedError(f"{ctx.where()}: needs indices of rank 0, 1 or 2, got shape {idx.shape}")
    if len(idx.shape) < 2:
        idx = ctx.create("Reshape", [idx], {"shape": [-1, 1]}, suffix="index_rows").outputs[0]
    if idx.shape is None or idx.shape[-1] != len(dims):
        raise UnsupportedError(f"{ctx.where()}: needs each index row to name all {len(dims)} dimensions of the "
                               f"output, got indices of shape {idx.shape}")
    if dims[0] is not None:
        like = ctx.const(np.zeros(dims, values.dtype.numpy), [values], suffix="zeros")
    else:
        zero = ctx.const(np.zeros((), values.dtype.numpy), [values], suffix="zero")
        like = ctx.create("Fill", [_shape32(ctx, _t(ins[1])), zero], suffix="zeros", shapes=[dims]).outputs[0]
    lin, _ = _linear_index(ctx, idx, like, "output")
    upd = ctx.create("Add", [ctx.create("ZerosLike", [ctx.create("Cast", [lin], {"dtype": values.dtype.name},
                                                                  suffix="lin_float").outputs[0]],
                                        suffix="value_zeros").outputs[0], values], suffix="values").outputs[0]
    flat = ctx.create("Reshape", [like], {"shape": [-1]}, suffix="flat").outputs[0]
    placed = ctx.create("ScatterAddLike", [flat, lin, upd], {"axis": 0}, suffix="placed").outputs[0]
    ones = ctx.create("OnesLike", [lin], suffix="ones").outputs[0]
    count = ctx.create("ScatterAddLike", [ctx.create("ZerosLike", [ctx.create("Cast", [flat], {"dtype": "int32"},
                                                                               suffix="flat_int").outputs[0]],
                                                     suffix="count_zeros").outputs[0], lin, ones], {"axis": 0},
                       suffix="count").outputs[0]
    if ctx.attr("validate_indices", True):
        later, earlier = (_getitem(ctx, lin, (s,), f"lin_{k}") for k, s in
                          (("later", slice(1, None)), ("earlier", slice(None, -1))))
        ok = ctx.create("Greater", [later, earlier], suffix="increasing").outputs[0]
        words = "indices are not in strictly increasing row-major order (an index out of order or repeated)"
    else:
        one = ctx.const(np.asarray(1, np.int32), [count], suffix="one")
        ok = ctx.create("LessEqual", [count, one], suffix="once").outputs[0]
        words = "an index is repeated (its value would be unspecified)"
    count = ctx.checked(ok, count, words, "order")
    hit = ctx.create("Greater", [count, ctx.const(np.asarray(0, np.int32), [count], suffix="zero")],
                     suffix="hit").outputs[0]
    fill = ctx.create("Add", [ctx.create("ZerosLike", [placed], suffix="fill_zeros").outputs[0], default],
                      suffix="fill").outputs[0]
    dense = ctx.create("Select", [hit, placed, fill], suffix="dense").outputs[0]
    if dims[0] is None:
        return [ctx.create("ReshapeTo", [dense, _shape32(ctx, _t(ins[1]))], shapes=[dims]).outputs[0]]
    return [ctx.create("Reshape", [dense], {"shape": dims}).outputs[0]]


def _shape32(ctx: ImportContext, shape: Tensor) -> Tensor:
    """A run-time shape vector as the int32 one ``Fill`` and ``ReshapeTo`` take."""
    if shape.dtype == dt.int32:
        return shape
    return ctx.create("Cast", [shape], {"dtype": "int32"}, suffix="shape32").outputs[0]


@_rule("Bucketize")
def _bucketize(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tf.raw_ops.Bucketize`` (bucketized feature columns): each value's bucket, the number of
    ``boundaries`` it is not below (``std::upper_bound``, TensorFlow's kernel: a NaN is past every
    boundary), counted over a last axis of the boundaries. The kernel compares in the wider of float32
    (the attr's type) and the input's type: an integer input is compared as float32."""
    x = _t(ins[0])
    bounds = np.asarray(ctx.attr("boundaries", []) or [], np.float32)
    if x.dtype != dt.float64:
        x = x if x.dtype == dt.float32 else ctx.create("Cast", [x], {"dtype": "float32"}, suffix="as_float").outputs[0]
    else:
        bounds = bounds.astype(np.float64)
    col = ctx.create("ExpandDims", [x], {"axis": -1}, suffix="column").outputs[0]
    below = ctx.create("Less", [col, ctx.const(bounds, [x], suffix="boundaries")], suffix="below").outputs[0]
    passed = ctx.create("Cast", [ctx.create("LogicalNot", [below], suffix="passed").outputs[0]], {"dtype": "int32"},
                        suffix="counted").outputs[0]
    return [ctx.create("Sum", [passed], {"axis": [-1], "keepdims": False}).outputs[0]]
