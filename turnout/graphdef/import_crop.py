"""Import rules of TensorFlow's ``CropAndResize`` (``tf.image.crop_and_resize``: the region crops of
two-stage detectors) and its two gradient ops, built from gathers.

The kernel samples each box ``(y1, x1, y2, x2)`` (coordinates normalised to ``[0, 1]`` of the image)
on a ``crop_height`` x ``crop_width`` grid: row ``i`` at ``y1 (H - 1) + i (y2 - y1) (H - 1) /
(crop_height - 1)`` (the box's middle for one row), and likewise for columns; a sample inside the
image is the bilinear mix of its four neighbours (top row first, as the kernel mixes them), one
outside it is ``extrapolation_value``. Here the four neighbours of every sample are ``Gather`` s of
the image's rows by linear index (never a copy of the image per box). Where both inputs' gradient
ops appear (TensorFlow's gradient of the op makes both), they are ``tn.gradients`` of that same
formula: the image's is the transposed gathers, the boxes' the derivative of the sampling positions
(the kernel computes the same sums, and skips the samples outside the image, whose value here is the
constant extrapolation). Only the ``bilinear`` method is built.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout import array_ops, math_ops, ops
from turnout import dtypes as dt
from turnout.errors import UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef.import_builders import held_gradient, with_builders
from turnout.graphdef.import_context import ImportContext, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs, _partial_shape
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)


def _built(ctx: ImportContext, nd: Any, ins: list[Value], make: Any) -> Any:
    """``make()`` run with builders in the import graph, under the node's name; refused inside a
    TensorFlow v1 loop and for a method other than bilinear."""
    if not all(isinstance(t, Tensor) for t in ins):
        raise UnsupportedError(f"{ctx.where()}: every input must be a tensor")
    method = ctx.attr("method", "bilinear")
    if method != "bilinear":
        raise UnsupportedError(f"{ctx.where()}: only method='bilinear' is built, got {method!r}")
    with with_builders(ctx, ins):
        return make()


@_rule("CropAndResize")
def _crop_and_resize(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    image, boxes, box_ind, size = ins
    extrapolation = float(ctx.attr("extrapolation_value", 0.0))

    def make() -> Tensor:
        crop = ctx.static_int_list(ctx.data_inputs()[3], "the crop size")
        return crops(image, boxes, box_ind, crop, extrapolation)  # type: ignore[arg-type]

    out = _built(ctx, nd, ins, make)
    return [ctx.create("Identity", [out]).outputs[0]]


@_rule("CropAndResizeGradImage")
def _crop_grad_image(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    grads, boxes, box_ind, image_size = ins
    known = _partial_shape(ctx, ctx.data_inputs()[3])
    if known is None or len(known) != 4 or known[3] is None or not isinstance(image_size, Tensor):
        raise UnsupportedError(f"{ctx.where()}: needs the image's channels when importing")
    out_dtype = ctx.dtype("T")
    size = image_size if image_size.dtype == dt.int32 else \
        ctx.create("Cast", [image_size], {"dtype": "int32"}, suffix="size32").outputs[0]
    zero = ctx.const(np.zeros((), out_dtype.numpy), [size], suffix="zero")
    image = ctx.create("Fill", [size, zero], suffix="image", shapes=[known]).outputs[0]

    def make() -> Tensor:
        return held_gradient(crops(image, boxes, box_ind, _crop_size(grads), 0.0), grads, image)  # type: ignore[arg-type]

    return [ctx.create("Identity", [_built(ctx, nd, ins, make)]).outputs[0]]


@_rule("CropAndResizeGradBoxes")
def _crop_grad_boxes(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    grads, image, boxes, box_ind = ins

    def make() -> Tensor:
        return held_gradient(crops(image, boxes, box_ind, _crop_size(grads), 0.0), grads, boxes)  # type: ignore[arg-type]

    return [ctx.create("Identity", [_built(ctx, nd, ins, make)]).outputs[0]]


def _crop_size(grads: Value) -> list[Any]:
    """The crops' height and width, read off the gradient's shape (ints where it knows them)."""
    assert isinstance(grads, Tensor)
    if grads.shape is None or len(grads.shape) != 4:
        raise UnsupportedError(f"CropAndResize's gradient: needs gradients of rank 4, got {grads.shape}")
    return [int(d) if d is not None else ops.gather(ops.shape(grads), ops.constant(k))
            for k, d in ((1, grads.shape[1]), (2, grads.shape[2]))]


def crops(image: Tensor, boxes: Tensor, box_ind: Tensor, crop: list[Any], extrapolation: float) -> Tensor:
    """The ``[boxes, crop_height, crop_width, channels]`` float32 crops (see the module docstring); the
    crop's sizes ints, or int32 scalars known when the program runs."""
    if image.shape is None or len(image.shape) != 4 or image.shape[3] is None:
        raise UnsupportedError(f"CropAndResize: needs an image of rank 4 with known channels, got {image.shape}")
    if len(crop) != 2 or any(isinstance(c, int) and c <= 0 for c in crop):
        raise UnsupportedError(f"CropAndResize: crop_size must be two positive sizes, got {crop}")
    img = ops.cast(image, dt.float32)
    shape = ops.shape(img)
    batch, height, width = (ops.gather(shape, ops.constant(k)) for k in range(3))
    box_ind = ops.assert_true(
        ops.reduce_all(ops.logical_and(ops.greater_equal(box_ind, ops.constant(0)), ops.less(box_ind, batch))),
        box_ind, "CropAndResize: box_index has values outside [0, batch_size)", data=[box_ind])
    b = ops.cast(boxes, dt.float32)
    ys, y_in = _positions(b, 0, height, crop[0])
    xs, x_in = _positions(b, 1, width, crop[1])
    top, left = math_ops.floor(ys), math_ops.floor(xs)
    y_lerp, x_lerp = ys - top, xs - left
    rows = ops.reshape(img, [-1, int(image.shape[3])])
    base = ops.expand_dims(ops.expand_dims(box_ind * height, 1), 2)

    def at(y: Tensor, x: Tensor) -> Tensor:  # the pixels at rows y [N, ch] and columns x [N, cw]
        yi = ops.cast(array_ops.clip_by_value(y, 0.0, ops.cast(height - 1, dt.float32)), dt.int32)
        xi = ops.cast(array_ops.clip_by_value(x, 0.0, ops.cast(width - 1, dt.float32)), dt.int32)
        linear = (base + ops.expand_dims(yi, 2)) * width + ops.expand_dims(xi, 1)
        return ops.gather(rows, linear)

    bottom, right = math_ops.ceil(ys), math_ops.ceil(xs)
    xl = ops.expand_dims(ops.expand_dims(x_lerp, 1), 3)
    upper = at(top, left) + (at(top, right) - at(top, left)) * xl
    lower = at(bottom, left) + (at(bottom, right) - at(bottom, left)) * xl
    mixed = upper + (lower - upper) * ops.expand_dims(ops.expand_dims(y_lerp, 2), 3)
    inside = ops.logical_and(ops.expand_dims(ops.expand_dims(y_in, 2), 3), ops.expand_dims(ops.expand_dims(x_in, 1), 3))
    return ops.where(inside, mixed, ops.constant(np.float32(extrapolation)))


def _positions(boxes: Tensor, axis: int, size: Tensor, n: Any) -> tuple[Tensor, Tensor]:
    """The sampling positions along one axis of every box ``[boxes, n]`` and whether each lies inside
    (``n`` an int, or an int32 scalar known when the program runs: a gradient op's crop size)."""
    start = ops.expand_dims(ops.gather(boxes, ops.constant(axis), axis=1), 1)
    stop = ops.expand_dims(ops.gather(boxes, ops.constant(axis + 2), axis=1), 1)
    last = ops.cast(size - 1, dt.float32)
    middle = (start + stop) * ops.constant(np.float32(0.5)) * last
    if isinstance(n, int):
        steps = ops.constant(np.arange(n, dtype=np.float32))
        gaps = ops.constant(np.float32(max(n - 1, 1)))
    else:
        steps = ops.cast(array_ops.range(n), dt.float32)
        gaps = ops.cast(ops.maximum(n - 1, ops.constant(1)), dt.float32)
    # (the kernel's arithmetic, in its order: start * last + i * ((stop - start) * (last / gaps)); the
    # middle for one sample)
    pos = start * last + steps * ((stop - start) * (last / gaps))
    if isinstance(n, int) and n == 1:
        pos = middle
    elif not isinstance(n, int):
        pos = ops.where(ops.equal(n, ops.constant(1)), middle, pos)
    return pos, ops.logical_and(ops.greater_equal(pos, ops.constant(np.float32(0))), ops.less_equal(pos, last))


__all__ = ["crops"]
