"""Import rules of TensorFlow's scatters and segment reductions beyond the sums: ``TensorScatterAdd``
/ ``TensorScatterSub``, ``UnsortedSegmentMax`` / ``Min`` / ``Prod``, the TF1 reference-variable
updates ``ScatterUpdate`` / ``ScatterAdd`` / ``ScatterSub`` and ``ScatterNdUpdate`` / ``ScatterNdAdd`` /
``ScatterNdSub`` (TF1's ``GradientDescentOptimizer`` applies an embedding's sparse gradient to a
``VariableV2`` with ``ScatterSub``), ``DynamicPartition`` with the ``DynamicStitch`` of run-time
indices that undoes it (a lookup in an embedding sharded by a partitioner), and the sorted segment
reductions ``SegmentSum`` / ``SegmentMean``.

Each is ``ScatterAddLike`` (updates added into zeros at their rows) or a mask under ``Select``, with
an ``Assert`` that the indices are in range (TensorFlow's kernels refuse them too), so no backend
drops or wraps one silently. The ``Scatter*`` ops take a ref, as ``Assign`` does
(``import_rules._ref_assign``): they update the Variable behind it and output its new value. Why a
module of its own: the rules share the row indexing and the range checks, and none of them is a
control-flow or TensorArray rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout.errors import UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef.import_context import ImportContext, Ref, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs, _getitem, _ref, _t, non_negative, segment_sum
from turnout.graphdef.import_structure import _linear_index
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)


def _int32(ctx: ImportContext, idx: Tensor, suffix: str) -> Tensor:
    if idx.dtype == dt.int32:
        return idx
    return ctx.create("Cast", [idx], {"dtype": "int32"}, suffix=suffix).outputs[0]


def _rows_in_range(ctx: ImportContext, idx: Tensor, rows: int, what: str = "indices") -> Tensor:
    """``idx`` (int32) once each entry is in ``[0, rows)``, TensorFlow's check of a scatter's indices
    (or of a partition's ids, ``what``)."""
    idx = _int32(ctx, idx, what)
    lo = ctx.const(np.zeros((), np.int32), [idx], suffix="zero")
    hi = ctx.const(np.asarray(rows, np.int32), [idx], suffix="rows")
    ok = ctx.create("LogicalAnd", [ctx.create("GreaterEqual", [idx, lo], suffix="ge").outputs[0],
                                   ctx.create("Less", [idx, hi], suffix="lt").outputs[0]], suffix="in_range").outputs[0]
    return ctx.checked(ok, idx, f"{what} must be in [0, {rows})", "check")


def _full_shape(x: Tensor) -> list[int]:
    """``x``'s shape for a Reshape: every dimension but the first is known (-1 there if it is not)."""
    assert x.shape is not None
    return [-1 if d is None else int(d) for d in x.shape]


# ---- TensorScatterAdd / TensorScatterSub ----------------------------------------------------------------
@_rule("TensorScatterAdd", "TensorScatterSub")
def _tensor_scatter_add(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tensor`` with each update added (subtracted) at its index row ``indices[..., :K]`` (repeated
    rows add up): ``ScatterAddLike`` along the linear indices of the first K axes flattened
    (``import_structure._linear_index``, which checks the range), added to the tensor. Gradients, as
    TensorFlow's: the gradient itself for ``tensor``, its rows at the indices (negated for Sub) for
    ``updates``."""
    x, idx, upd = (_t(v) for v in ins[:3])
    lin, rest = _linear_index(ctx, idx, x, "tensor")
    rows = ctx.create("Reshape", [x], {"shape": [-1, *rest]}, suffix="rows").outputs[0]
    summed = ctx.create("ScatterAddLike", [rows, lin, upd], {"axis": 0}, suffix="scattered").outputs[0]
    dense = ctx.create("Reshape", [summed], {"shape": _full_shape(x)}, suffix="dense").outputs[0]
    return [ctx.create("Add" if nd.op == "TensorScatterAdd" else "Sub", [x, dense]).outputs[0]]


# ---- UnsortedSegmentMax / Min / Prod: a segment-by-element mask, reduced --------------------------------
def _identity_of(op: str, dtype: dt.DType) -> Any:
    """What TensorFlow gives an empty segment: the lowest value of the type for Max, the highest for
    Min, 1 for Prod."""
    if op == "UnsortedSegmentProd":
        return np.ones((), dtype.numpy)
    info = np.finfo(dtype.numpy) if dtype.is_floating else np.iinfo(dtype.numpy)
    return np.asarray(info.min if op == "UnsortedSegmentMax" else info.max, dtype.numpy)


@_rule("UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd")
def _unsorted_segment(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``out[s] = reduce(data[i] for i where ids[i] == s)`` over ``num_segments`` segments, TensorFlow's
    kernel: an empty segment reads the lowest value of the type (Max), the highest (Min) or 1 (Prod);
    a negative id drops its row; an id >= num_segments is an error. Built as a mask ``ids == s`` of
    shape ``[num_segments, *ids.shape]`` selecting the data (else the empty segment's value), reduced
    over the ids' axes: memory ``num_segments`` times the data's, so meant for few segments.
    ``num_segments`` and the ranks must be known at import. Gradients: Max / Min's go to the
    elements equal to their segment's result, shared among ties; Prod's are the products of the
    other elements of the segment, exact where it holds zeros (TensorFlow's)."""
    data, ids = _t(ins[0]), _t(ins[1])
    num = ctx.static_int_list(ctx.data_inputs()[2], "num_segments")
    if len(num) != 1 or num[0] < 0:
        raise UnsupportedError(f"{ctx.where()}: num_segments must be a scalar >= 0, got {num}")
    if data.shape is None or ids.shape is None or len(ids.shape) > len(data.shape):
        raise UnsupportedError(f"{ctx.where()}: needs the ranks of the data and the segment ids, the ids' at most "
                               "the data's")
    r, extra = len(ids.shape), len(data.shape) - len(ids.shape)
    ids = _int32(ctx, ids, "ids")
    hi = ctx.const(np.asarray(num[0], np.int32), [ids], suffix="num")
    ids = ctx.checked(ctx.create("Less", [ids, hi], suffix="below").outputs[0], ids,
                   f"segment_ids must be < num_segments ({num[0]})", "check")
    seg = ctx.const(np.arange(num[0], dtype=np.int32).reshape([num[0]] + [1] * r), [ids], suffix="segments")
    return [_masked_reduce(ctx, nd.op.replace("Unsorted", ""), data, ids, seg, r, extra, None)]


def _masked_reduce(ctx: ImportContext, op: str, data: Tensor, ids: Tensor, seg: Tensor, r: int, extra: int,
                   empty: Any) -> Tensor:
    """``Segment{Max,Min,Prod}`` by a mask ``ids == s`` (``seg``: the segment numbers, ``[n, 1...]``)
    selecting the data, else the reduction's identity, reduced over the ids' axes; an empty segment
    then reads ``empty`` where it is given (the sorted ops' 0)."""
    mask = ctx.create("Equal", [ctx.create("ExpandDims", [ids], {"axis": 0}, suffix="ids_row").outputs[0], seg],
                      suffix="mask").outputs[0]
    for k in range(extra):
        mask = ctx.create("ExpandDims", [mask], {"axis": -1}, suffix=f"mask{k}").outputs[0]
    rows = ctx.create("ExpandDims", [data], {"axis": 0}, suffix="data_row").outputs[0]
    fill = ctx.const(_identity_of(f"Unsorted{op}", data.dtype), [data], suffix="identity")
    picked = ctx.create("Select", [mask, rows, fill], suffix="picked").outputs[0]
    axes = {"axis": list(range(1, r + 1)), "keepdims": False}
    reduce = {"SegmentMax": "Max", "SegmentMin": "Min", "SegmentProd": "Prod"}[op]
    if empty is None:
        return ctx.create(reduce, [picked], axes).outputs[0]
    out = ctx.create(reduce, [picked], axes, suffix="reduced").outputs[0]
    hit = ctx.create("Any", [mask], axes, suffix="hit").outputs[0]  # (broadcasts over the rows' axes)
    return ctx.create("Select", [hit, out, ctx.const(np.asarray(empty, data.dtype.numpy), [data], suffix="empty")]
                      ).outputs[0]


@_rule("SegmentMax", "SegmentMin", "SegmentProd")
def _sorted_segment(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``out[s]`` the largest, smallest or product of the rows whose sorted id is ``s``, for ``s`` up to
    the largest id (a count known when the program runs): ``UnsortedSegment*``'s mask over those
    segments, an empty segment 0 (TensorFlow's sorted kernels; 1 for the product)."""
    data, ids = _t(ins[0]), _sorted_ids(ctx, _t(ins[1]))
    if data.shape is None or ids.shape is None or len(ids.shape) != 1:
        raise UnsupportedError(f"{ctx.where()}: needs the rank of the data and vector segment ids")
    n = _one_past_the_largest(ctx, ids)
    ones = ctx.create("Fill", [ctx.create("Reshape", [n], {"shape": [1]}, suffix="n_vector").outputs[0],
                               ctx.const(np.asarray(1, np.int32), [ids], suffix="one")], suffix="ones").outputs[0]
    counted = ctx.create("Cumsum", [ones], {"axis": 0}, suffix="counted").outputs[0]
    back = ctx.const(np.asarray(1, np.int32), [ids], suffix="one_back")
    numbers = ctx.create("Sub", [counted, back], suffix="numbers").outputs[0]
    seg = ctx.create("ExpandDims", [numbers], {"axis": -1}, suffix="segments").outputs[0]
    return [_masked_reduce(ctx, nd.op, data, ids, seg, 1, len(data.shape) - 1, 1 if nd.op == "SegmentProd" else 0)]


# ---- Scatter* of TF1 reference variables --------------------------------------------------------------
def _scatter_rows(ctx: ImportContext, nd: Any, ins: list[Value]) -> tuple[Any, Tensor, Tensor, list[int]]:
    """The ref, the int32 row indices into the Variable viewed as rows (its first axis; for the
    ``Nd`` ops its first K axes flattened, K the indices' last dimension), the updates as rows of
    that view, and the view's shape. The Variable's shape must be known at import."""
    ref = _ref(ctx, ins[0])
    idx, upd = (_value(ctx, v, k) for k, v in ((1, ins[1]), (2, ins[2])))
    shape = ref.attrs["shape"]
    if shape is None or not shape or any(d is None for d in shape):
        raise UnsupportedError(f"{ctx.where()}: needs the variable's static shape, of rank >= 1")
    shape = [int(d) for d in shape]
    if upd.shape is not None and len(upd.shape) == 0:
        raise UnsupportedError(f"{ctx.where()}: scalar updates are not supported (give one row per index)")
    if nd.op.startswith("ScatterNd"):
        like = ctx.const(np.zeros(shape, upd.dtype.numpy), [upd], suffix="zeros")
        lin, rest = _linear_index(ctx, idx, like, "ref")
        return ref, lin, upd, [int(np.prod(shape[:len(shape) - len(rest)])), *rest]
    return ref, _rows_in_range(ctx, idx, shape[0]), upd, shape


def _value(ctx: ImportContext, v: Value, k: int) -> Tensor:
    """Input ``k`` of a ref op as a value: another Variable's ref (TensorFlow reads it) is read here
    (``import_nodes`` reads refs for the ops that take none)."""
    if isinstance(v, Ref):
        return ctx.create("ReadVariable", [v.handle], v.attrs, suffix=f"read{k}").outputs[0]
    return _t(v)


def _dense(ctx: ImportContext, view: list[int], idx: Tensor, upd: Tensor, suffix: str) -> Tensor:
    zeros = ctx.const(np.zeros(view, upd.dtype.numpy), [upd], suffix=f"{suffix}_zeros")
    return ctx.create("ScatterAddLike", [zeros, idx, upd], {"axis": 0}, suffix=suffix).outputs[0]


@_rule("ScatterAdd", "ScatterSub", "ScatterNdAdd", "ScatterNdSub")
def _scatter_add(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``ref[indices] += updates`` (``-=``), repeated indices adding up, as TensorFlow's kernel: the
    updates summed into zeros of the Variable's shape, added to it in one ``AssignAddVariable``
    (``AssignSubVariable``). Outputs the Variable's new value (TensorFlow's ``output_ref``)."""
    ref, idx, upd, view = _scatter_rows(ctx, nd, ins)
    dense = _dense(ctx, view, idx, upd, "dense")
    shape = ref.attrs["shape"]
    if view != list(shape):
        dense = ctx.create("Reshape", [dense], {"shape": [int(d) for d in shape]}, suffix="dense_shape").outputs[0]
    op = "AssignSubVariable" if nd.op.endswith("Sub") else "AssignAddVariable"
    return [ctx.create(op, [ref.handle, dense], ref.attrs).outputs[0]]


def _last_of_each(ctx: ImportContext, idx: Tensor) -> Tensor:
    """For each position of the vector ``idx``, whether no later position holds the same index: the
    update that TensorFlow's CPU kernel, writing in order, leaves in place. Quadratic in the number
    of updates (as ``Unique``), not in the Variable's rows."""
    pos = ctx.create("Cumsum", [ctx.create("OnesLike", [idx], suffix="ones").outputs[0]], {"axis": 0},
                     suffix="position").outputs[0]
    col = {"axis": 1}
    same = ctx.create("Equal", [ctx.create("ExpandDims", [idx], col, suffix="idx_col").outputs[0],
                                ctx.create("ExpandDims", [idx], {"axis": 0}, suffix="idx_row").outputs[0]],
                      suffix="same").outputs[0]
    later = ctx.create("Less", [ctx.create("ExpandDims", [pos], col, suffix="pos_col").outputs[0],
                                ctx.create("ExpandDims", [pos], {"axis": 0}, suffix="pos_row").outputs[0]],
                       suffix="later").outputs[0]
    again = ctx.create("Any", [ctx.create("LogicalAnd", [same, later], suffix="same_later").outputs[0]],
                       {"axis": [1], "keepdims": False}, suffix="written_again").outputs[0]
    return ctx.create("LogicalNot", [again], suffix="last").outputs[0]


@_rule("ScatterUpdate", "ScatterNdUpdate")
def _scatter_update(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``ref[indices] = updates``. TensorFlow leaves the order of repeated indices undefined; its CPU
    kernel writes in order, so the last update of a row wins, and so here: the updates that are the
    last of their row (``_last_of_each``) summed into zeros, taken where some update touches the row,
    the old value elsewhere, assigned in one ``AssignVariable``. Outputs the Variable's new value."""
    ref, idx, upd, view = _scatter_rows(ctx, nd, ins)
    if idx.shape is None or upd.shape is None:
        raise UnsupportedError(f"{ctx.where()}: needs the ranks of the indices and the updates")
    rest = view[1:]
    flat = ctx.create("Reshape", [idx], {"shape": [-1]}, suffix="flat_indices").outputs[0]
    rows = ctx.create("Reshape", [upd], {"shape": [-1, *rest]}, suffix="flat_updates").outputs[0]
    last = _last_of_each(ctx, flat)
    for k in range(len(rest)):
        last = ctx.create("ExpandDims", [last], {"axis": -1}, suffix=f"last{k}").outputs[0]
    kept = ctx.create("Select", [last, rows, ctx.create("ZerosLike", [rows], suffix="no_update").outputs[0]],
                      suffix="kept").outputs[0]
    new = _dense(ctx, view, flat, kept, "scattered")
    hit = _dense(ctx, view, flat, ctx.create("OnesLike", [rows], suffix="ones").outputs[0], "count")
    touched = ctx.create("Greater", [hit, ctx.const(np.zeros((), upd.dtype.numpy), [hit], suffix="zero")],
                         suffix="touched").outputs[0]
    shape = [int(d) for d in ref.attrs["shape"]]
    if view != shape:
        new = ctx.create("Reshape", [new], {"shape": shape}, suffix="scattered_shape").outputs[0]
        touched = ctx.create("Reshape", [touched], {"shape": shape}, suffix="touched_shape").outputs[0]
    old = ctx.create("ReadVariable", [ref.handle], ref.attrs, suffix="old").outputs[0]
    value = ctx.create("Select", [touched, new, old], suffix="value").outputs[0]
    return [ctx.create("AssignVariable", [ref.handle, value], ref.attrs).outputs[0]]


# ---- DynamicPartition, and the DynamicStitch of run-time indices ----------------------------------------
def true_positions(ctx: ImportContext, mask: Tensor, suffix: str) -> Tensor:
    """The positions of the ones of the int32 0/1 vector ``mask``, in order (as many as there are: a
    length known when the program runs). A running count gives each one its slot; the positions are
    scattered to their slots and the first ``count`` kept (a zero adds 0 to slot 0)."""
    one = ctx.const(np.asarray(1, np.int32), [mask], suffix=f"{suffix}_one")
    ones = ctx.create("OnesLike", [mask], suffix=f"{suffix}_ones").outputs[0]
    pos = ctx.create("Sub", [ctx.create("Cumsum", [ones], {"axis": 0}, suffix=f"{suffix}_counted").outputs[0], one],
                     suffix=f"{suffix}_position").outputs[0]
    slot = ctx.create("Sub", [ctx.create("Cumsum", [mask], {"axis": 0}, suffix=f"{suffix}_count").outputs[0], one],
                      suffix=f"{suffix}_slot").outputs[0]
    at = ctx.create("Mul", [slot, mask], suffix=f"{suffix}_at").outputs[0]
    value = ctx.create("Mul", [pos, mask], suffix=f"{suffix}_value").outputs[0]
    slots = ctx.create("ScatterAddLike", [ctx.create("ZerosLike", [value], suffix=f"{suffix}_zeros").outputs[0],
                                          at, value], suffix=f"{suffix}_slots").outputs[0]
    n = ctx.create("Sum", [mask], {"axis": None, "keepdims": False}, suffix=f"{suffix}_n").outputs[0]
    return _getitem(ctx, slots, (slice(None, n, None),), f"{suffix}_kept")


def _rows_after(ctx: ImportContext, x: Tensor, lead: Tensor, what: str) -> list[int]:
    """The static shape of ``x`` after the leading dimensions of ``lead`` (the rows a partition or a
    stitch moves), which the import must know."""
    if x.shape is None or lead.shape is None or len(x.shape) < len(lead.shape):
        raise UnsupportedError(f"{ctx.where()}: needs the ranks of {what} (the ranks of its indices and more)")
    rest = x.shape[len(lead.shape):]
    if any(d is None for d in rest):
        raise UnsupportedError(f"{ctx.where()}: needs the shape of {what} past its indices' dimensions, "
                               f"got {x.shape}")
    return [int(d) for d in rest if d is not None]


@_rule("DynamicPartition")
def _dynamic_partition(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``outputs[i] = data[partitions == i]``, the rows in order: the partitions flattened, checked to
    be in ``[0, num_partitions)`` as TensorFlow's kernel checks them, and each output the rows at the
    ``true_positions`` of its partition (a length known when the program runs)."""
    data, parts = (_t(ctx.range_tensor(x)) for x in ins[:2])
    rest = _rows_after(ctx, data, parts, "the data")
    num = int(ctx.attr("num_partitions"))
    flat = ctx.create("Reshape", [parts], {"shape": [-1]}, suffix="flat_partitions").outputs[0]
    flat = _rows_in_range(ctx, flat, num, "partitions")
    rows = ctx.create("Reshape", [data], {"shape": [-1, *rest]}, suffix="rows").outputs[0]
    outs = []
    for i in range(num):
        k = ctx.const(np.asarray(i, np.int32), [flat], suffix=f"id{i}")
        hit = ctx.create("Cast", [ctx.create("Equal", [flat, k], suffix=f"is{i}").outputs[0]], {"dtype": "int32"},
                         suffix=f"hit{i}").outputs[0]
        where = true_positions(ctx, hit, f"part{i}")
        outs.append(ctx.create("Gather", [rows, where], {"axis": 0}, suffix=f"out{i}").outputs[0])
    return outs


def stitched(ctx: ImportContext, indices: list[Tensor], data: list[Tensor]) -> Tensor:
    """``merged[indices[m][i]] = data[m][i]`` for indices known when the program runs: every index and
    row flattened into one list in order, the last of each index kept (``_last_of_each``: where an
    index repeats, the later wins, as in TensorFlow's ``DynamicStitch``), scattered into zeros of
    ``max(indices) + 1`` rows (a row no index names stays zero)."""
    rest = _rows_after(ctx, data[0], indices[0], "the data")
    for x, idx in zip(data[1:], indices[1:], strict=True):
        if _rows_after(ctx, x, idx, "the data") != rest:
            raise UnsupportedError(f"{ctx.where()}: the data's rows differ in shape")
    # (TensorFlow's kernel bounds each index by ``[0, max + 1)``; a scatter would count -1 from the end)
    checked = [_t(non_negative(ctx, _int32(ctx, idx, f"idx{m}"), None, "indices")) for m, idx in enumerate(indices)]
    flat_idx = [ctx.create("Reshape", [idx], {"shape": [-1]}, suffix=f"flat_idx{m}").outputs[0]
                for m, idx in enumerate(checked)]
    flat_rows = [ctx.create("Reshape", [x], {"shape": [-1, *rest]}, suffix=f"flat_rows{m}").outputs[0]
                 for m, x in enumerate(data)]
    idx, rows = flat_idx[0], flat_rows[0]
    if len(flat_idx) > 1:
        idx = ctx.create("Concat", flat_idx, {"axis": 0}, suffix="all_indices").outputs[0]
        rows = ctx.create("Concat", flat_rows, {"axis": 0}, suffix="all_rows").outputs[0]
    kept = true_positions(ctx, ctx.create("Cast", [_last_of_each(ctx, idx)], {"dtype": "int32"},
                                          suffix="last_int").outputs[0], "kept")
    idx = ctx.create("Gather", [idx, kept], {"axis": 0}, suffix="kept_indices").outputs[0]
    rows = ctx.create("Gather", [rows, kept], {"axis": 0}, suffix="kept_rows").outputs[0]
    return segment_sum(ctx, rows, idx, _one_past_the_largest(ctx, idx), None)


def _one_past_the_largest(ctx: ImportContext, idx: Tensor) -> Tensor:
    """``max(idx) + 1`` of an int32 vector, 0 where it is empty (a -1 beside its entries)."""
    neg = ctx.const(np.asarray([-1], np.int32), [idx], suffix="minus_one")
    top = ctx.create("Max", [ctx.create("Concat", [idx, neg], {"axis": 0}, suffix="with_minus_one").outputs[0]],
                     {"axis": None, "keepdims": False}, suffix="top").outputs[0]
    return ctx.create("Add", [top, ctx.const(np.asarray(1, np.int32), [top], suffix="one")], suffix="count").outputs[0]


# ---- SegmentSum, SegmentMean: sorted segments, as many as the largest id says --------------------------------
def _non_negative_vector(ctx: ImportContext, x: Tensor, message: str) -> Tensor:
    """An integer vector as int32, once none of its entries is negative (a ``KernelError`` with
    ``message`` otherwise)."""
    x = _int32(ctx, x, "as_int32")
    zero = ctx.const(np.zeros((), np.int32), [x], suffix="zero")
    return ctx.checked(ctx.create("GreaterEqual", [x, zero], suffix="non_negative").outputs[0], x, message,
                       "check_sign")


def _sorted_ids(ctx: ImportContext, ids: Tensor) -> Tensor:
    """The segment ids of a ``Segment*`` op as int32, checked as TensorFlow's CPU kernel checks them:
    a vector, each at least 0 and none smaller than the one before."""
    if ids.shape is None or len(ids.shape) != 1:
        raise UnsupportedError(f"{ctx.where()}: the segment ids must be a vector, got shape {ids.shape}")
    ids = _non_negative_vector(ctx, ids, "segment ids must be >= 0")
    before = _getitem(ctx, ids, (slice(None, -1, None),), "before")
    after = _getitem(ctx, ids, (slice(1, None, None),), "after")
    return ctx.checked(ctx.create("LessEqual", [before, after], suffix="increasing").outputs[0], ids,
                    "segment ids are not increasing", "check_order")


@_rule("SegmentSum", "SegmentMean")
def _segment(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``out[s]`` the sum (``SegmentSum``) or the mean (``SegmentMean``, 0 for an empty segment) of
    the rows of ``data`` whose sorted id is ``s``, for ``s`` up to the largest id: the sum of
    ``UnsortedSegmentSum`` (``segment_sum``) into ``max(ids) + 1`` segments, a length known when the
    program runs; the mean divides it by each segment's count."""
    data = _t(ins[0])
    ids = _sorted_ids(ctx, _t(ins[1]))
    n = _one_past_the_largest(ctx, ids)
    total = segment_sum(ctx, data, ids, n, None)
    if nd.op == "SegmentSum":
        return [total]
    return [ctx.create("Div", [total, _per_segment(ctx, data, ids, n, None, "mean")]).outputs[0]]


# ---- SparseSegmentSum / Mean / SqrtN (embedding_lookup_sparse, feature columns) and their gradients ----------
_SPARSE_SEGMENT = {"SparseSegmentSum": "sum", "SparseSegmentMean": "mean", "SparseSegmentSqrtN": "sqrtn"}


@_rule(*_SPARSE_SEGMENT, *(f"{op}WithNumSegments" for op in _SPARSE_SEGMENT))
def _sparse_segment(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``out[s]`` the sum, the mean or the sum over the square root of the count of the rows
    ``data[indices[i]]`` whose sorted ``segment_ids[i]`` is ``s`` (``tf.nn.embedding_lookup_sparse``'s
    combiners): the gathered rows summed into ``max(ids) + 1`` segments, or ``num_segments``; an
    empty segment is 0. The indices are checked (``non_negative``, then the gather's range), and the
    ids as ``Segment*``'s are, each below ``num_segments`` where it is given."""
    data, idx = _t(ins[0]), _t(non_negative(ctx, ins[1], ctx.data_inputs()[1], "indices"))
    ids = _sorted_ids(ctx, _t(ins[2]))
    combiner = _SPARSE_SEGMENT[nd.op.replace("WithNumSegments", "")]
    if nd.op.endswith("WithNumSegments"):
        n = _int32(ctx, _t(ins[3]), "num_segments")
        ids = ctx.checked(ctx.create("Less", [ids, n], suffix="below").outputs[0], ids,
                          "segment ids must be < num_segments", "check_count")
        known = ctx.static(ctx.data_inputs()[3])
        num = None if known is None else int(known)
    else:
        n, num = _one_past_the_largest(ctx, ids), None
    rows = ctx.create("Gather", [data, _int32(ctx, idx, "indices32")], {"axis": 0}, suffix="rows").outputs[0]
    total = segment_sum(ctx, rows, ids, n, num)
    if combiner == "sum":
        return [total]
    return [ctx.create("Div", [total, _per_segment(ctx, data, ids, n, num, combiner)]).outputs[0]]


def _per_segment(ctx: ImportContext, data: Tensor, ids: Tensor, n: Tensor, num: Any, combiner: str) -> Tensor:
    """Each segment's divisor, its count (``mean``) or the count's square root (``sqrtn``), at least 1,
    with axes of size 1 to broadcast over rows shaped as ``data``'s."""
    if data.shape is None:
        raise UnsupportedError(f"{ctx.where()}: needs the rank of the data")
    ones = ctx.create("Cast", [ctx.create("OnesLike", [ids], suffix="ones").outputs[0]], {"dtype": data.dtype.name},
                      suffix="ones_data").outputs[0]
    count = segment_sum(ctx, ones, ids, n, num)
    count = ctx.create("Maximum", [count, ctx.create("OnesLike", [count], suffix="at_least").outputs[0]],
                       suffix="count_or_one").outputs[0]
    if combiner == "sqrtn":
        count = ctx.create("Sqrt", [count], suffix="root").outputs[0]
    for k in range(len(data.shape) - 1):
        count = ctx.create("ExpandDims", [count], {"axis": -1}, suffix=f"count{k}").outputs[0]
    return count


@_rule("SparseSegmentSumGrad", "SparseSegmentMeanGrad", "SparseSegmentSqrtNGrad")
def _sparse_segment_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The gradient of a sparse segment reduction with respect to its data (``output_dim0`` rows): each
    segment's gradient row, divided as the reduction divided it, added at every index that read into
    that segment."""
    grad, idx, ids, rows = _t(ins[0]), _t(ins[1]), _int32(ctx, _t(ins[2]), "ids32"), _t(ins[3])
    combiner = _SPARSE_SEGMENT[nd.op[:-len("Grad")]]
    picked = ctx.create("Gather", [grad, ids], {"axis": 0}, suffix="picked").outputs[0]
    if combiner != "sum":
        n = ctx.create("Shape", [grad], suffix="grad_shape").outputs[0]
        segments = _getitem(ctx, n, (0,), "segments")
        divisor = _per_segment(ctx, grad, ids, segments, None, combiner)
        picked = ctx.create("Div", [picked, ctx.create("Gather", [divisor, ids], {"axis": 0}, suffix="by").outputs[0]],
                            suffix="scaled").outputs[0]
    known = ctx.static(ctx.data_inputs()[3])
    idx = _t(non_negative(ctx, idx, ctx.data_inputs()[1], "indices"))
    return [segment_sum(ctx, picked, _int32(ctx, idx, "indices32"), _int32(ctx, rows, "rows32"),
                        None if known is None else int(known))]


@_rule("DenseBincount")
def _dense_bincount(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tf.math.bincount`` of a vector: ``out[v]`` the number of entries equal to ``v`` (or the sum of
    their weights; with ``binary_output``, 1 where any), for ``v < size``, a larger entry dropped and
    a negative one an error, as TensorFlow's kernel. Weights of no elements (TensorFlow's stand-in for
    none) count ones."""
    arr, size, weights = _t(ins[0]), _t(ins[1]), _t(ins[2])
    if arr.shape is None or len(arr.shape) != 1:
        raise UnsupportedError(f"{ctx.where()}: supported for a vector input, got shape {arr.shape}")
    arr = _non_negative_vector(ctx, arr, "Input arr must be non-negative!")
    out_dtype = ctx.dtype("T")
    if weights.shape is not None and len(weights.shape) == 1 and weights.shape[0] == 0:
        weights = ctx.create("Cast", [ctx.create("OnesLike", [arr], suffix="ones").outputs[0]],
                             {"dtype": out_dtype.name}, suffix="unit_weights").outputs[0]
    size = _int32(ctx, size, "size32")
    inside = ctx.create("Less", [arr, size], suffix="inside").outputs[0]
    kept = ctx.create("Select", [inside, weights, ctx.create("ZerosLike", [weights], suffix="dropped").outputs[0]],
                      suffix="kept").outputs[0]
    at = ctx.create("Select", [inside, arr, ctx.create("ZerosLike", [arr], suffix="nowhere").outputs[0]],
                    suffix="at").outputs[0]
    size_vector = ctx.create("Reshape", [size], {"shape": [1]}, suffix="size_vector").outputs[0]
    empty = ctx.const(np.zeros((), out_dtype.numpy), [arr], suffix="empty")
    bins = ctx.create("Fill", [size_vector, empty], suffix="bins").outputs[0]
    counts = ctx.create("ScatterAddLike", [bins, at, kept], {"axis": 0},
                        suffix=None if not ctx.attr("binary_output", False) else "counts").outputs[0]
    if not ctx.attr("binary_output", False):
        return [counts]
    some = ctx.create("Greater", [counts, ctx.create("ZerosLike", [counts], suffix="none").outputs[0]],
                      suffix="some").outputs[0]
    return [ctx.create("Cast", [some], {"dtype": out_dtype.name}).outputs[0]]
