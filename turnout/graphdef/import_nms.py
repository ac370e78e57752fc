"""Import rules of TensorFlow's greedy non-maximum suppression (``tf.image.non_max_suppression``:
``NonMaxSuppressionV3``, and ``V5`` without soft suppression), built as a loop over the boxes in
score order.

The kernel keeps, in order of decreasing score (an equal score: the lower index first), each box whose
score is above ``score_threshold`` and whose intersection over union with every box kept before is at
most ``iou_threshold``, until ``max_output_size`` are kept; a box's corners may come in either order,
and a box of no area overlaps nothing. Here one trip of a ``while_loop`` decides one box of the sorted
order against the boxes kept so far (a mask), and the kept boxes' indices are the mask's true positions
in that order: as many as the kernel keeps, a length known when the program runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout import ops
from turnout.control_flow.while_loop import while_loop
from turnout.errors import UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef.import_builders import with_builders
from turnout.graphdef.import_context import ImportContext, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs
from turnout.graphdef.import_scatter import true_positions
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)


@_rule("NonMaxSuppressionV3", "NonMaxSuppressionV5")
def _non_max_suppression(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The kept boxes' indices (``V5``: and their scores, and how many)."""
    boxes, scores, limit, iou, threshold = ins[:5]
    if nd.op == "NonMaxSuppressionV5":
        sigma = ctx.static(ctx.data_inputs()[5])
        if sigma is None or float(sigma) != 0.0:
            raise UnsupportedError(f"{ctx.where()}: soft suppression (soft_nms_sigma other than 0) is not built")
        if ctx.attr("pad_to_max_output_size", False):
            raise UnsupportedError(f"{ctx.where()}: pad_to_max_output_size=True is not built")
    if not all(isinstance(t, Tensor) for t in ins):
        raise UnsupportedError(f"{ctx.where()}: every input must be a tensor")
    assert isinstance(boxes, Tensor) and isinstance(scores, Tensor)
    with with_builders(ctx, ins):
        kept, order = _kept(boxes, scores, limit, iou, threshold)  # type: ignore[arg-type]
    positions = true_positions(ctx, ctx.create("Cast", [kept], {"dtype": "int32"}, suffix="kept32").outputs[0],
                               "kept")
    picked = ctx.create("Gather", [order, positions], {"axis": 0}, suffix="picked" if nd.op != "NonMaxSuppressionV3"
                        else None).outputs[0]
    if nd.op == "NonMaxSuppressionV3":
        return [picked]
    chosen = ctx.create("Gather", [scores, picked], {"axis": 0}, suffix="scores").outputs[0]
    count = ctx.create("Size", [picked], suffix="count").outputs[0]
    indices = ctx.create("Identity", [picked], suffix="indices").outputs[0]
    kept_scores = ctx.create("Identity", [chosen], suffix="kept_scores").outputs[0]
    return [indices, kept_scores, ctx.create("Identity", [count]).outputs[0]]


def _kept(boxes: Tensor, scores: Tensor, limit: Tensor, iou: Tensor, threshold: Tensor) -> tuple[Tensor, Tensor]:
    """Which boxes of the score order are kept (a bool vector in that order) and the order (indices)."""
    n = ops.gather(ops.shape(scores), ops.constant(0))
    order = boxes.graph.create_node("TopK", [scores], {"k": int(scores.shape[0])}).outputs[1] \
        if scores.shape is not None and scores.shape[0] is not None else None
    if order is None:
        raise UnsupportedError("NonMaxSuppression: needs the number of boxes when importing")
    sorted_boxes = ops.gather(ops.cast(boxes, dt.float32), order)
    sorted_scores = ops.gather(ops.cast(scores, dt.float32), order)
    y1, x1, y2, x2 = (ops.gather(sorted_boxes, ops.constant(k), axis=1) for k in range(4))
    top, bottom = ops.minimum(y1, y2), ops.maximum(y1, y2)
    left, right = ops.minimum(x1, x2), ops.maximum(x1, x2)
    area = (bottom - top) * (right - left)
    zero = ops.constant(np.float32(0))

    def body(i: Tensor, kept: Tensor, count: Tensor) -> list[Tensor]:
        at = lambda v: ops.gather(v, i)  # noqa: E731
        inter = ops.maximum(ops.minimum(at(bottom), bottom) - ops.maximum(at(top), top), zero) * \
            ops.maximum(ops.minimum(at(right), right) - ops.maximum(at(left), left), zero)
        union = at(area) + area - inter
        overlap = ops.where(ops.logical_and(ops.greater(at(area), zero), ops.greater(area, zero)),
                            inter / ops.where(ops.greater(union, zero), union, ops.ones_like(union)),
                            ops.zeros_like(inter))
        clear = ops.logical_not(ops.reduce_any(ops.logical_and(kept, ops.greater(overlap, ops.cast(iou, dt.float32)))))
        keep = ops.logical_and(ops.logical_and(clear, ops.greater(at(sorted_scores), ops.cast(threshold, dt.float32))),
                               ops.less(count, ops.cast(limit, dt.int32)))
        here = ops.equal(_positions(n), i)
        return [i + 1, ops.logical_or(kept, ops.logical_and(here, keep)), count + ops.cast(keep, dt.int32)]

    start = [ops.constant(0), ops.fill(ops.stack([n]), ops.constant(False)), ops.constant(0)]
    _, kept, _ = while_loop(lambda i, k, c: ops.less(i, n), body, start, name="greedy")
    return kept, order


def _positions(n: Tensor) -> Tensor:
    from turnout.array_ops import range as positions

    return positions(n)


__all__: list[str] = []
