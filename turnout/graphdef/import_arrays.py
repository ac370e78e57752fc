"""Import rules of TensorFlow's array-rearranging ops: ``LinSpace``, ``MatrixBandPart``, the
``MatrixDiag`` family (k = 0), ``Roll``, ``MirrorPad`` and ``MirrorPadGrad``, ``SpaceToDepth`` /
``DepthToSpace`` and ``SpaceToBatchND`` / ``BatchToSpaceND`` (the pair around a dilated convolution,
with their V1 forms ``SpaceToBatch`` / ``BatchToSpace``).

Each is a formula over existing primitives whose arguments TensorFlow passes as tensors but Turnout
needs at import (a shift, paddings, a block shape): a constant mask under ``Select`` for the band and
the diagonals, a ``Gather`` of constant indices along one axis for rolls and mirror pads (so the
gradient is the ``ScatterAddLike`` that TensorFlow's ``MirrorPadGrad`` computes), and reshapes
around a ``Transpose`` for the block moves. Why a module of its own: these share the static-argument
checks and nothing with the element-wise formulas (``import_math``) or the model ops.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.composite import checked_that
from turnout.errors import UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef.import_context import ImportContext, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs, _getitem, _t
from turnout.graphdef.import_structure import _block
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)


def _known_dims(ctx: ImportContext, x: Tensor, axes: list[int], what: str) -> list[int]:
    """The sizes of ``axes`` of ``x``, which must be known when importing (for ``what``)."""
    if x.shape is None:
        raise UnsupportedError(f"{ctx.where()}: needs the input's rank when importing")
    dims = [x.shape[a] for a in axes]
    if any(d is None for d in dims):
        raise UnsupportedError(f"{ctx.where()}: {what} needs the input's dimensions {axes} when importing, "
                               f"got shape {list(x.shape)}")
    return [int(d) for d in dims if d is not None]


def _int(ctx: ImportContext, k: int, what: str) -> int:
    """Input ``k``, a scalar known at import."""
    vals = ctx.static_int_list(ctx.data_inputs()[k], what)
    if len(vals) != 1:
        raise UnsupportedError(f"{ctx.where()}: {what} must be a scalar, got {len(vals)} values")
    return vals[0]


def _floating(ctx: ImportContext, x: Tensor) -> None:
    if not x.dtype.is_floating:
        raise UnsupportedError(f"{ctx.where()}: supported for floating inputs only, got {x.dtype.name}")


# ---- LinSpace ---------------------------------------------------------------------------------------
@_rule("LinSpace")
def _lin_space(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """TensorFlow's kernel: ``num`` values, ``start + step * i`` for ``i < num - 1`` with ``step =
    (stop - start) / (num - 1)`` in the values' type, then exactly ``stop`` (``num`` 1: ``[start]``).
    ``num`` must be known at import and positive (TensorFlow: "Requires num > 0"); start and stop are
    floating scalars, known or not. No gradient flows through it (a ``StopGradient``): TensorFlow
    registers none. (The fast backend's compiler may fuse ``start + step * i`` into
    one multiply-add, rounded once: a value may then differ from TensorFlow's in its last bit.)"""
    start, stop = _t(ins[0]), _t(ins[1])
    _floating(ctx, start)
    num = _int(ctx, 2, "num")
    if num < 1:
        raise UnsupportedError(f"{ctx.where()}: num must be > 0, got {num}")
    for t in (start, stop):
        if t.shape is not None and len(t.shape) != 0:
            raise UnsupportedError(f"{ctx.where()}: start and stop must be scalars, got shape {list(t.shape)}")
    first = ctx.create("Reshape", [start], {"shape": [1]}, suffix="first").outputs[0]
    if num == 1:
        return [ctx.create("StopGradient", [first]).outputs[0]]
    count = ctx.const(np.asarray(num - 1, start.dtype.numpy), [start], suffix="intervals")
    step = ctx.create("Div", [ctx.create("Sub", [stop, start], suffix="span").outputs[0], count],
                      suffix="step").outputs[0]
    steps = ctx.const(np.arange(num - 1).astype(start.dtype.numpy), [start], suffix="i")
    ramp = ctx.create("Add", [start, ctx.create("Mul", [step, steps], suffix="offsets").outputs[0]],
                      suffix="ramp").outputs[0]
    last = ctx.create("Reshape", [stop], {"shape": [1]}, suffix="last").outputs[0]
    values = ctx.create("Concat", [ramp, last], {"axis": 0}, suffix="values").outputs[0]
    return [ctx.create("StopGradient", [values]).outputs[0]]


# ---- band and diagonals: a constant mask over the last two axes, under Select -----------------------
def _matrix_dims(ctx: ImportContext, x: Tensor) -> tuple[int, int]:
    if x.shape is None or len(x.shape) < 2:
        raise UnsupportedError(f"{ctx.where()}: needs an input of rank >= 2 with a known rank")
    m, n = _known_dims(ctx, x, [len(x.shape) - 2, len(x.shape) - 1], "the matrix mask")
    return m, n


def _mask(ctx: ImportContext, value: np.ndarray, anchor: Tensor, suffix: str) -> Tensor:
    return ctx.const(np.asarray(value, np.bool_), [anchor], suffix=suffix)


def _counts(ctx: ImportContext, x: Tensor) -> tuple[Tensor, Tensor]:
    """Row and column numbers (from 1) of each entry of ``x``'s innermost matrices, as running sums of
    ones: the masks of a matrix whose size is known only when it runs."""
    ones = ctx.create("OnesLike", [x], suffix="ones").outputs[0]
    rows = ctx.create("Cumsum", [ones], {"axis": -2}, suffix="row_number").outputs[0]
    return rows, ctx.create("Cumsum", [ones], {"axis": -1}, suffix="column_number").outputs[0]


def _sizes_known(x: Tensor) -> bool:
    return x.shape is not None and len(x.shape) >= 2 and x.shape[-1] is not None and x.shape[-2] is not None


def _counts_fit(ctx: ImportContext, x: Tensor, lo: int, hi: int) -> Tensor:
    """``x`` once ``num_lower`` is at most its rows and ``num_upper`` its columns, as TensorFlow checks."""
    assert x.shape is not None
    shape = ctx.create("Shape", [x], suffix="shape").outputs[0]
    ok = None
    for side, count, k in (("lower", lo, 2), ("upper", hi, 1)):
        size = _getitem(ctx, shape, (len(x.shape) - k,), f"{side}_size")
        fits = ctx.create("LessEqual", [ctx.const(np.asarray(count, np.int32), [x], suffix=f"{side}_limit"), size],
                          suffix=f"{side}_fits").outputs[0]
        ok = fits if ok is None else ctx.create("LogicalAnd", [ok, fits], suffix="fit").outputs[0]
    assert ok is not None
    return checked_that(ctx, ok, x, f"MatrixBandPart: num_lower ({lo}) must be at most the rows and num_upper "
                        f"({hi}) at most the columns", "counts")


def _run_time_band(ctx: ImportContext, x: Tensor, lo: int, hi: int) -> Tensor:
    """The band mask of ``MatrixBandPart`` over matrices of run-time size."""
    rows, cols = _counts(ctx, x)
    keep = None
    for side, count, a, b in (("lower", lo, rows, cols), ("upper", hi, cols, rows)):
        if count < 0:
            continue
        gap = ctx.create("Sub", [a, b], suffix=f"{side}_gap").outputs[0]
        bound = ctx.const(np.asarray(count, x.dtype.numpy), [x], suffix=f"{side}_count")
        inside = ctx.create("LessEqual", [gap, bound], suffix=f"{side}_inside").outputs[0]
        keep = inside if keep is None else ctx.create("LogicalAnd", [keep, inside], suffix="band").outputs[0]
    assert keep is not None
    return keep


@_rule("MatrixBandPart")
def _matrix_band_part(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Entry ``(i, j)`` of each innermost matrix kept where ``(num_lower < 0 or i - j <= num_lower)
    and (num_upper < 0 or j - i <= num_upper)``, else 0 (a ``Select``, so an infinity outside the
    band reads 0). ``num_lower`` and ``num_upper`` must be known at import, at most the rows
    (columns), as TensorFlow checks. Gradient: the band of the gradient, as TensorFlow's."""
    x = _t(ins[0])
    lo, hi = _int(ctx, 1, "num_lower"), _int(ctx, 2, "num_upper")
    if not _sizes_known(x):
        if lo < 0 and hi < 0:
            return [ctx.create("Identity", [x]).outputs[0]]
        x = _counts_fit(ctx, x, lo, hi)
        zeros = ctx.create("ZerosLike", [x], suffix="zeros").outputs[0]
        return [ctx.create("Select", [_run_time_band(ctx, x, lo, hi), x, zeros]).outputs[0]]
    m, n = _matrix_dims(ctx, x)
    if lo > m or hi > n:
        raise UnsupportedError(f"{ctx.where()}: num_lower {lo} and num_upper {hi} must be at most the rows {m} "
                               f"and the columns {n}")
    i, j = np.arange(m)[:, None], np.arange(n)[None, :]
    keep = ((lo < 0) | (i - j <= lo)) & ((hi < 0) | (j - i <= hi))
    if keep.all():
        return [ctx.create("Identity", [x]).outputs[0]]
    zeros = ctx.create("ZerosLike", [x], suffix="zeros").outputs[0]
    return [ctx.create("Select", [_mask(ctx, keep, x, "band"), x, zeros]).outputs[0]]


def _k_is_zero(ctx: ImportContext, k_input: int) -> None:
    """The V2 / V3 ops' ``k``: only the main diagonal (0, or the pair ``[0, 0]``) is supported."""
    k = ctx.static_int_list(ctx.data_inputs()[k_input], "k (the diagonal offsets)")
    if any(v != 0 for v in k):
        raise UnsupportedError(f"{ctx.where()}: only the main diagonal (k = 0) is supported, got k = {k}")


def _on_diagonal(ctx: ImportContext, d: Tensor, m: int, n: int) -> Tensor:
    """The diagonal ``d`` (``[..., min(m, n)]``) with an axis of size 1 where it broadcasts over an
    ``m`` x ``n`` matrix so that entry ``(i, i)`` reads ``d[..., i]``: the columns when m <= n, else
    the rows."""
    if d.shape is not None and (len(d.shape) == 0 or d.shape[-1] not in (None, min(m, n))):
        raise UnsupportedError(f"{ctx.where()}: the diagonal has shape {list(d.shape)}, its last dimension "
                               f"must be {min(m, n)}")
    return ctx.create("ExpandDims", [d], {"axis": -1 if m <= n else -2}, suffix="diagonal").outputs[0]


@_rule("MatrixDiag", "MatrixDiagV2", "MatrixDiagV3")
def _matrix_diag(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``[..., n]`` -> ``[..., rows, cols]`` with the diagonal on the main diagonal and the padding value
    elsewhere (0 for V1; V2 / V3's ``padding_value``, a scalar, known or not). V2 / V3 need ``k = 0``
    and ``num_rows`` / ``num_cols`` known at import (-1: n), with ``min(rows, cols) = n``."""
    d = _t(ins[0])
    if d.shape is None or not d.shape:
        raise UnsupportedError(f"{ctx.where()}: needs the diagonal's rank when importing")
    if d.shape[-1] is None:
        return [_square_diag_at_run_time(ctx, nd, d, ins)]
    size = int(d.shape[-1])
    rows = cols = size
    if nd.op != "MatrixDiag":
        _k_is_zero(ctx, 1)
        r, c = _int(ctx, 2, "num_rows"), _int(ctx, 3, "num_cols")
        rows, cols = (r if r > 0 else size), (c if c > 0 else size)
        if min(rows, cols) != size:
            raise UnsupportedError(f"{ctx.where()}: num_rows {r} and num_cols {c} do not fit a main diagonal of "
                                   f"length {size}")
        pad = _t(ins[4])
        if pad.shape is not None and len(pad.shape) != 0:
            raise UnsupportedError(f"{ctx.where()}: padding_value must be a scalar, got shape {list(pad.shape)}")
    else:
        pad = ctx.const(np.zeros((), d.dtype.numpy), [d], suffix="zero")
    eye = _mask(ctx, np.eye(rows, cols, dtype=np.bool_), d, "eye")
    return [ctx.create("Select", [eye, _on_diagonal(ctx, d, rows, cols), pad]).outputs[0]]


def _square_diag_at_run_time(ctx: ImportContext, nd: Any, d: Tensor, ins: list[Value]) -> Tensor:
    """A main diagonal of a length known only when it runs (``tf.eye(n)`` of a computed ``n``): square
    ``[..., n, n]`` (V2 / V3's ``num_rows`` and ``num_cols`` must be -1), its identity pattern made where
    the running row and column counts of the square's ones meet."""
    pad = ctx.const(np.zeros((), d.dtype.numpy), [d], suffix="zero")
    if nd.op != "MatrixDiag":
        _k_is_zero(ctx, 1)
        if _int(ctx, 2, "num_rows") > 0 or _int(ctx, 3, "num_cols") > 0:
            raise UnsupportedError(f"{ctx.where()}: num_rows and num_cols need the diagonal's length when importing")
        pad = _t(ins[4])
        if pad.shape is not None and len(pad.shape) != 0:
            raise UnsupportedError(f"{ctx.where()}: padding_value must be a scalar, got shape {list(pad.shape)}")
    row = ctx.create("ExpandDims", [d], {"axis": -2}, suffix="row").outputs[0]
    square = ctx.create("Mul", [ctx.create("ExpandDims", [d], {"axis": -1}, suffix="column").outputs[0], row],
                        suffix="square").outputs[0]
    ones = ctx.create("OnesLike", [square], suffix="ones").outputs[0]
    counts = [ctx.create("Cumsum", [ones], {"axis": axis}, suffix=f"count{axis}").outputs[0] for axis in (-2, -1)]
    eye = ctx.create("Equal", counts, suffix="eye").outputs[0]
    spread = ctx.create("Mul", [row, ones], suffix="spread").outputs[0]
    return ctx.create("Select", [eye, spread, pad]).outputs[0]


@_rule("MatrixDiagPart", "MatrixDiagPartV2", "MatrixDiagPartV3")
def _matrix_diag_part(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``[..., m, n]`` -> the main diagonal ``[..., min(m, n)]``: each matrix flattened, and its
    entries ``i * (n + 1)`` gathered (exact for every value, -0 included; a masked sum would not
    be). V2 / V3 need ``k = 0``; their ``padding_value`` then fills nothing. At most one batch
    dimension may be unknown at import. Gradient: the gradient on the diagonal, zeros elsewhere,
    as TensorFlow's."""
    x = _t(ins[0])
    if nd.op != "MatrixDiagPart":
        _k_is_zero(ctx, 1)
    if not _sizes_known(x):
        return [_run_time_diag_part(ctx, _square(ctx, x))]
    m, n = _matrix_dims(ctx, x)
    assert x.shape is not None
    batch = [-1 if d is None else int(d) for d in x.shape[:-2]]
    if batch.count(-1) > 1:
        raise UnsupportedError(f"{ctx.where()}: at most one batch dimension may be unknown at import, got shape "
                               f"{list(x.shape)}")
    flat = ctx.create("Reshape", [x], {"shape": [*batch, m * n]}, suffix="flat").outputs[0]
    where = ctx.const(np.arange(min(m, n), dtype=np.int32) * (n + 1), [x], suffix="diagonal")
    return [ctx.create("Gather", [flat, where], {"axis": len(batch)}).outputs[0]]


def _square(ctx: ImportContext, x: Tensor) -> Tensor:
    """``x`` once its innermost matrices are square: where their size is known only when it runs, the
    diagonal ops are built for square ones (TensorFlow's gradients of the Cholesky factor and of
    ``tf.linalg.logdet`` make only such), and another is a ``KernelError``."""
    if x.shape is None or len(x.shape) < 2:
        raise UnsupportedError(f"{ctx.where()}: needs an input of rank >= 2 with a known rank")
    shape = ctx.create("Shape", [x], suffix="shape").outputs[0]
    rows, cols = (_getitem(ctx, shape, (len(x.shape) - k,), f"size{k}") for k in (2, 1))
    square = ctx.create("Equal", [rows, cols], suffix="is_square").outputs[0]
    return checked_that(ctx, square, x, f"{ctx.node.op}: a matrix whose size is known only when it runs must be "
                        "square", "square")


def _run_time_diag_part(ctx: ImportContext, x: Tensor) -> Tensor:
    """The main diagonal of square matrices of run-time size: each row's entry on the diagonal, the
    others made zero, summed (a diagonal ``-0`` reads ``+0`` here, unlike the gather at known sizes)."""
    rows, cols = _counts(ctx, x)
    eye = ctx.create("Equal", [rows, cols], suffix="eye").outputs[0]
    only = ctx.create("Select", [eye, x, ctx.create("ZerosLike", [x], suffix="zeros").outputs[0]],
                      suffix="diagonal_only").outputs[0]
    return ctx.create("Sum", [only], {"axis": [-1], "keepdims": False}).outputs[0]


@_rule("MatrixSetDiag", "MatrixSetDiagV2", "MatrixSetDiagV3")
def _matrix_set_diag(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``x`` with its main diagonal replaced by ``diagonal`` (``[..., min(m, n)]``). V2 / V3 need
    ``k = 0``. Gradients: the gradient off the diagonal for ``x``, its diagonal for ``diagonal``."""
    x, d = _t(ins[0]), _t(ins[1])
    if nd.op != "MatrixSetDiag":
        _k_is_zero(ctx, 2)
    if not _sizes_known(x):
        x = _square(ctx, x)
        rows, cols = _counts(ctx, x)
        eye = ctx.create("Equal", [rows, cols], suffix="eye").outputs[0]
        spread = ctx.create("Mul", [ctx.create("ExpandDims", [d], {"axis": -2}, suffix="row").outputs[0],
                                    ctx.create("OnesLike", [x], suffix="spread_ones").outputs[0]],
                            suffix="spread").outputs[0]
        return [ctx.create("Select", [eye, spread, x]).outputs[0]]
    m, n = _matrix_dims(ctx, x)
    eye = _mask(ctx, np.eye(m, n, dtype=np.bool_), x, "eye")
    return [ctx.create("Select", [eye, _on_diagonal(ctx, d, m, n), x]).outputs[0]]


# ---- Roll and MirrorPad: a Gather of constant indices along each axis ---------------------------------
def _axis(ctx: ImportContext, a: int, rank: int) -> int:
    if not -rank <= a < rank:
        raise UnsupportedError(f"{ctx.where()}: axis {a} is out of range for rank {rank}")
    return a % rank


def _gather(ctx: ImportContext, x: Tensor, idx: np.ndarray, axis: int, last: bool) -> Tensor:
    ids = ctx.const(np.asarray(idx, np.int32), [x], suffix=f"indices{axis}")
    return ctx.create("Gather", [x, ids], {"axis": axis}, suffix=None if last else f"axis{axis}").outputs[0]


@_rule("Roll")
def _roll(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``out[..., (i + shift) mod n, ...] = x[..., i, ...]`` along each axis; the shifts of an axis
    named twice add up, as in TensorFlow. ``shift`` and ``axis`` must be known at import, and the
    sizes of the rolled axes. Gradient: the roll back (a ``ScatterAddLike`` of the same indices)."""
    x = _t(ins[0])
    shifts = ctx.static_int_list(ctx.data_inputs()[1], "the shift")
    axes = ctx.static_int_list(ctx.data_inputs()[2], "the axis")
    if len(shifts) != len(axes):
        raise UnsupportedError(f"{ctx.where()}: shift {shifts} and axis {axes} differ in length")
    rank = len(x.shape) if x.shape is not None else None
    if rank is None:
        raise UnsupportedError(f"{ctx.where()}: needs the input's rank when importing")
    total: dict[int, int] = {}
    for s, a in zip(shifts, axes):
        a = _axis(ctx, a, rank)
        total[a] = total.get(a, 0) + s
    moved = {}
    for a, s in sorted(total.items()):
        (size,) = _known_dims(ctx, x, [a], "the roll")
        if size and s % size:
            moved[a] = (np.arange(size) - s) % size
    if not moved:
        return [ctx.create("Identity", [x]).outputs[0]]
    for k, (a, idx) in enumerate(moved.items()):
        x = _gather(ctx, x, idx, a, k == len(moved) - 1)
    return [x]


def _mirror_pads(ctx: ImportContext, x: Tensor) -> tuple[list[tuple[int, int]], bool]:
    """MirrorPad's (MirrorPadGrad's) ``paddings`` (input 1), one ``(before, after)`` pair per axis,
    and whether the mode is REFLECT (else SYMMETRIC)."""
    mode = str(ctx.attr("mode"))  # (string attrs come decoded: protos.attr)
    if mode not in ("REFLECT", "SYMMETRIC"):
        raise UnsupportedError(f"{ctx.where()}: mode {mode!r} is not supported (REFLECT or SYMMETRIC)")
    flat = ctx.static_int_list(ctx.data_inputs()[1], "the paddings")
    rank = len(x.shape) if x.shape is not None else None
    if rank is None or len(flat) != 2 * rank or min(flat, default=0) < 0:
        raise UnsupportedError(f"{ctx.where()}: paddings {flat} must be non-negative [before, after] pairs, one per "
                               f"axis of the input (rank {rank})")
    return [(flat[2 * a], flat[2 * a + 1]) for a in range(rank)], mode == "REFLECT"


def _mirror_indices(ctx: ImportContext, size: int, before: int, after: int, reflect: bool) -> np.ndarray:
    """Where each entry of a mirror-padded axis comes from. REFLECT mirrors about the edge entries
    (``[1, 2, 3]`` padded by 2 before is ``[3, 2, 1, 2, 3]``: at most ``size - 1`` per side);
    SYMMETRIC repeats them (``[2, 1, 1, 2, 3]``: at most ``size``), TensorFlow's limits."""
    most = size - 1 if reflect else size
    if before > most or after > most:
        raise UnsupportedError(f"{ctx.where()}: paddings ({before}, {after}) must be at most {most} for an axis "
                               f"of size {size} in {'REFLECT' if reflect else 'SYMMETRIC'} mode")
    p = np.arange(-before, size + after)
    shift = 0 if reflect else 1
    p = np.where(p < 0, -p - shift, p)
    return np.where(p >= size, 2 * size - 2 + shift - p, p)


@_rule("MirrorPad")
def _mirror_pad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Each padded axis a ``Gather`` of the mirrored indices (``_mirror_indices``); the paddings and
    the padded axes' sizes must be known at import. Its gradient is TensorFlow's ``MirrorPadGrad``:
    each padded entry's gradient added back to the entry it mirrors."""
    x = _t(ins[0])
    pads, reflect = _mirror_pads(ctx, x)
    axes = [a for a, (b, e) in enumerate(pads) if b or e]
    if not axes:
        return [ctx.create("Identity", [x]).outputs[0]]
    for k, a in enumerate(axes):
        (size,) = _known_dims(ctx, x, [a], "the mirror pad")
        x = _gather(ctx, x, _mirror_indices(ctx, size, *pads[a], reflect), a, k == len(axes) - 1)
    return [x]


@_rule("MirrorPadGrad")
def _mirror_pad_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The gradient of a MirrorPad (``tf.gradients`` writes it): along each padded axis, the padded
    gradient's entries added into the ones they mirror (``ScatterAddLike`` of MirrorPad's indices
    into a tensor shaped like the unpadded axis: the gradient's middle)."""
    g = _t(ins[0])
    pads, reflect = _mirror_pads(ctx, g)
    axes = [a for a, (b, e) in enumerate(pads) if b or e]
    if not axes:
        return [ctx.create("Identity", [g]).outputs[0]]
    for k, a in enumerate(axes):
        (padded,) = _known_dims(ctx, g, [a], "the mirror pad's gradient")
        before, after = pads[a]
        size = padded - before - after
        if size < 1:
            raise UnsupportedError(f"{ctx.where()}: paddings ({before}, {after}) are longer than the axis {a} "
                                   f"of size {padded}")
        idx = _mirror_indices(ctx, size, before, after, reflect)
        key = tuple([slice(None)] * a + [slice(before, before + size)])
        like = _getitem(ctx, g, key, f"like{a}")
        ids = ctx.const(idx.astype(np.int32), [g], suffix=f"indices{a}")
        g = ctx.create("ScatterAddLike", [like, ids, g], {"axis": a},
                       suffix=None if k == len(axes) - 1 else f"axis{a}").outputs[0]
    return [g]


# ---- blocks of space moved into depth or into the batch: reshapes around a Transpose ------------------
def _nhwc_only(ctx: ImportContext) -> None:
    fmt = str(ctx.attr("data_format", "NHWC"))
    if fmt != "NHWC":
        raise UnsupportedError(f"{ctx.where()}: data_format {fmt!r} is not supported (NHWC only, as TensorFlow's "
                               "CPU kernel)")


def _reshape(ctx: ImportContext, x: Tensor, shape: list[int], suffix: str | None) -> Tensor:
    return ctx.create("Reshape", [x], {"shape": shape}, suffix=suffix).outputs[0]


def _lead(x: Tensor) -> int:
    """The leading (batch) dimension for a Reshape: known, or -1 (every other one is known)."""
    d = x.shape[0] if x.shape else None
    return -1 if d is None else int(d)


def _image(ctx: ImportContext, x: Tensor) -> tuple[int, int, int, int]:
    if x.shape is None or len(x.shape) != 4:
        raise UnsupportedError(f"{ctx.where()}: needs an NHWC input of rank 4")
    h, w, c = _known_dims(ctx, x, [1, 2, 3], "the block move")
    b = int(ctx.attr("block_size"))
    if b < 2:
        raise UnsupportedError(f"{ctx.where()}: block_size must be > 1, got {b}")
    return h, w, c, b


@_rule("SpaceToDepth")
def _space_to_depth(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``[n, h, w, c]`` -> ``[n, h / b, w / b, b * b * c]``: output depth ``(i * b + j) * c + k`` is
    input ``(h * b + i, w * b + j, k)``, TensorFlow's order. Height, width and depth known at import."""
    _nhwc_only(ctx)
    x = _t(ins[0])
    h, w, c, b = _image(ctx, x)
    if h % b or w % b:
        raise UnsupportedError(f"{ctx.where()}: height {h} and width {w} must be multiples of block_size {b}")
    blocks = _reshape(ctx, x, [_lead(x), h // b, b, w // b, b, c], "blocks")
    moved = ctx.create("Transpose", [blocks], {"perm": [0, 1, 3, 2, 4, 5]}, suffix="moved").outputs[0]
    return [_reshape(ctx, moved, [_lead(x), h // b, w // b, b * b * c], None)]


@_rule("DepthToSpace")
def _depth_to_space(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``[n, h, w, b * b * c]`` -> ``[n, h * b, w * b, c]``, SpaceToDepth's inverse (TensorFlow's
    DCR order)."""
    _nhwc_only(ctx)
    x = _t(ins[0])
    h, w, d, b = _image(ctx, x)
    if d % (b * b):
        raise UnsupportedError(f"{ctx.where()}: depth {d} must be a multiple of block_size^2 = {b * b}")
    c = d // (b * b)
    blocks = _reshape(ctx, x, [_lead(x), h, w, b, b, c], "blocks")
    moved = ctx.create("Transpose", [blocks], {"perm": [0, 1, 3, 2, 4, 5]}, suffix="moved").outputs[0]
    return [_reshape(ctx, moved, [_lead(x), h * b, w * b, c], None)]


def _space_args(ctx: ImportContext, x: Tensor, block: list[int], pairs: list[int], what: str
                ) -> tuple[list[int], list[tuple[int, int]], list[int]]:
    """The block shape, the (before, after) pairs of ``what`` (paddings or crops) and the sizes of
    every axis after the batch (all known at import), checked as TensorFlow checks them."""
    m = len(block)
    if m < 1 or len(pairs) != 2 * m or min(block) < 1 or min(pairs, default=0) < 0:
        raise UnsupportedError(f"{ctx.where()}: block_shape {block} and {what} {pairs} must be positive sizes and "
                               "non-negative [before, after] pairs, one per block dimension")
    if x.shape is None or len(x.shape) < m + 1:
        raise UnsupportedError(f"{ctx.where()}: needs an input of known rank > {m}")
    dims = _known_dims(ctx, x, list(range(1, len(x.shape))), "the block move")
    return block, [(pairs[2 * i], pairs[2 * i + 1]) for i in range(m)], dims


def _space_to_batch(ctx: ImportContext, x: Tensor, block: list[int], pairs: list[int]) -> Tensor:
    """Zero-pad the block axes, cut each into ``(size / b, b)``, move the ``b`` parts before the
    batch and merge them into it: ``out[(i1 .. iM) * n + k, j1 .. jM, ...] = padded[k, j1 * b1 + i1,
    ...]``, TensorFlow's order."""
    block, pads, dims = _space_args(ctx, x, block, pairs, "paddings")
    m = len(block)
    padded = [d + b + a for d, (b, a) in zip(dims[:m], pads)]
    if any(p % b for p, b in zip(padded, block)):
        raise UnsupportedError(f"{ctx.where()}: the padded block axes {padded} must be multiples of the "
                               f"block_shape {block}")
    cur, shape = x, list(x.shape or ())
    for a, (b, e) in enumerate(pads, start=1):
        parts = []
        if b:
            parts.append(_block(ctx, cur, a, b, np.zeros((), x.dtype.numpy), None, f"before{a}"))
        parts.append(cur)
        if e:
            parts.append(_block(ctx, cur, a, e, np.zeros((), x.dtype.numpy), None, f"after{a}"))
        if len(parts) > 1:
            shape[a] = padded[a - 1]
            cur = ctx.create("Concat", parts, {"axis": a}, suffix=f"pad{a}", shapes=[list(shape)]).outputs[0]
    rest = dims[m:]
    split = [_lead(x)] + [v for p, b in zip(padded, block) for v in (p // b, b)] + rest
    cut = _reshape(ctx, cur, split, "blocks")
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + list(range(2 * m + 1, len(split)))
    moved = ctx.create("Transpose", [cut], {"perm": perm}, suffix="moved").outputs[0]
    n = _lead(x)
    total = -1 if n < 0 else n * int(np.prod(block))
    return _reshape(ctx, moved, [total] + [p // b for p, b in zip(padded, block)] + rest, None)


def _batch_to_space(ctx: ImportContext, x: Tensor, block: list[int], pairs: list[int]) -> Tensor:
    """SpaceToBatch's inverse: split the batch into the block parts and the batch, interleave each
    part after its axis, merge, and crop ``(before, after)`` entries off each block axis."""
    block, crops, dims = _space_args(ctx, x, block, pairs, "crops")
    m, whole = len(block), int(np.prod(block))
    n = _lead(x)
    if n >= 0 and n % whole:
        raise UnsupportedError(f"{ctx.where()}: the batch {n} must be a multiple of the block_shape's product {whole}")
    rest = dims[m:]
    cut = _reshape(ctx, x, [*block, -1 if n < 0 else n // whole, *dims[:m], *rest], "blocks")
    perm = [m] + [v for i in range(m) for v in (m + 1 + i, i)] + list(range(2 * m + 1, 2 * m + 1 + len(rest)))
    moved = ctx.create("Transpose", [cut], {"perm": perm}, suffix="moved").outputs[0]
    full = [d * b for d, b in zip(dims[:m], block)]
    if any(b + a > f for (b, a), f in zip(crops, full)):
        raise UnsupportedError(f"{ctx.where()}: crops {crops} are larger than the block axes {full}")
    cropped = any(b or a for b, a in crops)
    merged = _reshape(ctx, moved, [-1 if n < 0 else n // whole, *full, *rest], "merged" if cropped else None)
    if not cropped:
        return merged
    key = (slice(None), *(slice(b, f - a) for (b, a), f in zip(crops, full)))
    return _getitem(ctx, merged, key, None)


@_rule("SpaceToBatchND", "SpaceToBatch")
def _space_to_batch_nd(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tf.space_to_batch`` (``SpaceToBatch``: two block axes of ``block_size`` each): block shape and
    paddings known at import, and every axis after the batch. A dilated convolution is this, a
    convolution, then ``BatchToSpaceND``. Gradient: ``BatchToSpaceND`` of the gradient, as TensorFlow's."""
    x = _t(ins[0])
    names = ctx.data_inputs()
    if nd.op == "SpaceToBatch":
        block = [int(ctx.attr("block_size"))] * 2
        pairs = ctx.static_int_list(names[1], "the paddings")
    else:
        block = ctx.static_int_list(names[1], "the block_shape")
        pairs = ctx.static_int_list(names[2], "the paddings")
    return [_space_to_batch(ctx, x, block, pairs)]


@_rule("BatchToSpaceND", "BatchToSpace")
def _batch_to_space_nd(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tf.batch_to_space`` (``BatchToSpace``: two block axes of ``block_size``): block shape and crops
    known at import, and every axis after the batch."""
    x = _t(ins[0])
    names = ctx.data_inputs()
    if nd.op == "BatchToSpace":
        block = [int(ctx.attr("block_size"))] * 2
        pairs = ctx.static_int_list(names[1], "the crops")
    else:
        block = ctx.static_int_list(names[1], "the block_shape")
        pairs = ctx.static_int_list(names[2], "the crops")
    return [_batch_to_space(ctx, x, block, pairs)]
