"""Import rules of the ops of TF1 convolutional networks: ``Conv2D`` with its gradients
``Conv2DBackpropInput`` / ``Conv2DBackpropFilter``, ``MaxPool`` / ``MaxPoolGrad``, ``AvgPool`` /
``AvgPoolGrad``, batch normalisation (``FusedBatchNorm``, V2, V3 and their gradients), local
response normalisation (``LRN``, ``LRNGrad``) and ``VariableShape``.

The window ops map one to one onto Turnout's window primitives (``turnout.windows``). Where
TensorFlow passes a gradient's result shape as a tensor (``input_sizes``, ``filter_sizes``,
``orig_input_shape``), the primitive takes a tensor of that shape (``like``): zeros filled to the
sizes, which no backend reads but for its shape. An NCHW op is its NHWC primitive between transposes.
Batch normalisation is no primitive: it is the formula TensorFlow's CPU kernel computes, written on
means, sums and square roots (``import_rules._Formula``), in training mode (batch statistics, the
running statistics' update by ``exponential_avg_factor``) and in inference mode. Local response
normalisation is the formula of TensorFlow's CPU kernel too: the sums of squares over a window of
channels are a product with a band matrix.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from turnout import windows
from turnout.errors import GraphBuildError, UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef.import_context import ImportContext, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs, _Formula, _partial_shape, _t, _var_attrs, _var_node
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)

#: NHWC -> NCHW and back
_TO_NCHW, _TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def _nchw(ctx: ImportContext) -> bool:
    fmt = ctx.attr("data_format", "NHWC")
    if fmt not in ("NHWC", "NCHW"):
        raise UnsupportedError(f"{ctx.where()}: data_format {fmt!r} is not supported (NHWC or NCHW)")
    return fmt == "NCHW"


def _hw(ctx: ImportContext, key: str, default: Optional[list[int]] = None) -> list[int]:
    """A four-entry attribute (``strides``, ``ksize``, ``dilations``) as its rows and columns; its
    batch and channel entries must be 1, as TensorFlow's CPU kernels require."""
    v = ctx.attr(key, default)
    if not isinstance(v, list) or len(v) != 4:
        raise UnsupportedError(f"{ctx.where()}: {key} must have 4 entries, got {v!r}")
    batch, chan, hw = (v[0], v[1], v[2:4]) if _nchw(ctx) else (v[0], v[3], v[1:3])
    if batch != 1 or chan != 1:
        raise UnsupportedError(f"{ctx.where()}: {key} {v} moves along the batch or the channels; only rows "
                               "and columns are supported")
    return [int(e) for e in hw]


def _attrs(ctx: ImportContext, pool: bool) -> dict[str, Any]:
    padding = ctx.attr("padding")
    if padding == "EXPLICIT":
        raise UnsupportedError(f"{ctx.where()}: padding EXPLICIT (explicit_paddings) is not supported")
    window = {"ksize": _hw(ctx, "ksize")} if pool else {"dilations": _hw(ctx, "dilations", [1, 1, 1, 1])}
    return {"strides": _hw(ctx, "strides"), **window, "padding": padding}


def _in_nhwc(ctx: ImportContext, t: Tensor, k: int) -> Tensor:
    if not _nchw(ctx):
        return t
    return ctx.create("Transpose", [t], {"perm": _TO_NHWC}, suffix=f"nhwc{k}").outputs[0]


def _like(ctx: ImportContext, sizes: Value, dtype: Any, k: int, image: bool = True) -> Tensor:
    """Zeros of the run-time shape ``sizes`` (input ``k``, an int32 vector): the ``like`` input of a
    gradient primitive, in NHWC where it is an ``image`` (a filter is HWIO in both layouts). Where
    the sizes are known when importing, a Reshape gives it that static shape; where some are (the
    Shape of a tensor of a run-time batch), the Fill has them."""
    zero = ctx.const(np.asarray(0, dtype.numpy), [sizes], suffix=f"zero{k}")
    like = ctx.create("Fill", [sizes, zero], suffix=f"like{k}",
                      shapes=[_partial_shape(ctx, ctx.data_inputs()[k])]).outputs[0]
    static = ctx.static(ctx.data_inputs()[k])
    if static is not None:
        like = ctx.create("Reshape", [like], {"shape": [int(d) for d in np.ravel(static)]},
                          suffix=f"like_shape{k}").outputs[0]
    return _in_nhwc(ctx, like, k) if image else like


def _window_op(ctx: ImportContext, op: str, ins: list[Tensor], attrs: dict[str, Any]) -> Outs:
    """The window primitive ``op`` over NHWC inputs; its result back in the NodeDef's layout."""
    if not _nchw(ctx):
        return [ctx.create(op, ins, attrs).outputs[0]]
    y = ctx.create(op, ins, attrs, suffix="nhwc_out").outputs[0]
    return [ctx.create("Transpose", [y], {"perm": _TO_NCHW}).outputs[0]]


def _grouped(ctx: ImportContext, image: Optional[list[Any]], filter_shape: Optional[list[Any]]) -> dict[str, Any]:
    """The convolution's attributes with the feature groups TensorFlow reads from the shapes: the
    image's channels (of its shape ``image``, in the NodeDef's layout) over the filter's input channels
    (axis 2 of ``filter_shape``), where both are known; else one group, and the shape rule says what
    does not fit."""
    attrs = _attrs(ctx, pool=False)
    c = image[1 if _nchw(ctx) else 3] if image is not None and len(image) == 4 else None
    f = filter_shape[2] if filter_shape is not None and len(filter_shape) == 4 else None
    groups = windows.groups_of(c, f)
    return {**attrs, "groups": groups} if groups > 1 else attrs


def _shape(t: Tensor) -> Optional[list[Any]]:
    return None if t.shape is None else list(t.shape)


@_rule("Conv2D")
def _conv2d(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    x, w = _t(ins[0]), _t(ins[1])
    return _window_op(ctx, "Conv2D", [_in_nhwc(ctx, x, 0), w], _grouped(ctx, _shape(x), _shape(w)))


@_rule("Conv2DBackpropInput")
def _conv2d_backprop_input(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(input_sizes, filter, out_backprop)``."""
    w, dy = _t(ins[1]), _t(ins[2])
    attrs = _grouped(ctx, _partial_shape(ctx, ctx.data_inputs()[0]), _shape(w))
    return _window_op(ctx, "Conv2DBackpropInput", [_like(ctx, ins[0], dy.dtype, 0), w, _in_nhwc(ctx, dy, 2)], attrs)


@_rule("Conv2DBackpropFilter")
def _conv2d_backprop_filter(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(input, filter_sizes, out_backprop)``; the filter is HWIO in both layouts."""
    x, dy = _t(ins[0]), _t(ins[2])
    like = _like(ctx, ins[1], dy.dtype, 1, image=False)
    attrs = _grouped(ctx, _shape(x), _partial_shape(ctx, ctx.data_inputs()[1]))
    return [ctx.create("Conv2DBackpropFilter", [_in_nhwc(ctx, x, 0), like, _in_nhwc(ctx, dy, 2)], attrs).outputs[0]]


# ---- depthwise convolution: Conv2D with a feature group per channel (``turnout.windows``) -------------
def _depthwise(ctx: ImportContext, shape: Any) -> tuple[list[int], dict[str, Any]]:
    """A depthwise filter's shape (rows, columns, channels, multiplier), which must be known, as the
    grouped filter's (rows, columns, 1, channels * multiplier), and the convolution's attributes."""
    if shape is None or len(shape) != 4 or any(d is None for d in shape):
        raise UnsupportedError(f"{ctx.where()}: the depthwise filter's shape must be known when importing, "
                               f"got {shape}")
    kh, kw, c, m = (int(d) for d in shape)
    return [kh, kw, 1, c * m], {**_attrs(ctx, pool=False), "groups": c}


@_rule("DepthwiseConv2dNative")
def _depthwise_conv2d(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(input, filter)``: Conv2D of ``channels`` groups over the filter read as one group each."""
    w = _t(ins[1])
    grouped, attrs = _depthwise(ctx, w.shape)
    flat = ctx.create("Reshape", [w], {"shape": grouped}, suffix="grouped_filter").outputs[0]
    return _window_op(ctx, "Conv2D", [_in_nhwc(ctx, _t(ins[0]), 0), flat], attrs)


@_rule("DepthwiseConv2dNativeBackpropInput")
def _depthwise_backprop_input(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(input_sizes, filter, out_backprop)``: the grouped Conv2D's input gradient."""
    w, dy = _t(ins[1]), _t(ins[2])
    grouped, attrs = _depthwise(ctx, w.shape)
    flat = ctx.create("Reshape", [w], {"shape": grouped}, suffix="grouped_filter").outputs[0]
    return _window_op(ctx, "Conv2DBackpropInput", [_like(ctx, ins[0], dy.dtype, 0), flat, _in_nhwc(ctx, dy, 2)],
                      attrs)


@_rule("DepthwiseConv2dNativeBackpropFilter")
def _depthwise_backprop_filter(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(input, filter_sizes, out_backprop)``: the grouped Conv2D's filter gradient, read back as a
    depthwise filter (``filter_sizes`` must be known when importing)."""
    x, dy = _t(ins[0]), _t(ins[2])
    sizes = ctx.static_int_list(ctx.data_inputs()[1], "filter_sizes")
    grouped, attrs = _depthwise(ctx, sizes)
    zero = ctx.const(np.zeros(grouped, dy.dtype.numpy), [x], suffix="grouped_like")
    dw = ctx.create("Conv2DBackpropFilter", [_in_nhwc(ctx, x, 0), zero, _in_nhwc(ctx, dy, 2)], attrs,
                    suffix="grouped").outputs[0]
    return [ctx.create("Reshape", [dw], {"shape": sizes}).outputs[0]]


@_rule("MaxPool", "AvgPool")
def _pool(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    return _window_op(ctx, nd.op, [_in_nhwc(ctx, _t(ins[0]), 0)], _attrs(ctx, pool=True))


@_rule("MaxPoolGrad")
def _max_pool_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(orig_input, orig_output, grad)``."""
    return _window_op(ctx, "MaxPoolGrad", [_in_nhwc(ctx, _t(x), k) for k, x in enumerate(ins[:3])],
                      _attrs(ctx, pool=True))


@_rule("AvgPoolGrad")
def _avg_pool_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(orig_input_shape, grad)``."""
    dy = _t(ins[1])
    return _window_op(ctx, "AvgPoolGrad", [_like(ctx, ins[0], dy.dtype, 0), _in_nhwc(ctx, dy, 1)],
                      _attrs(ctx, pool=True))


# ---- batch normalisation: TensorFlow's CPU kernels' formulas, per channel over N, H and W -------------
_AXES = {"axis": [0, 1, 2], "keepdims": False}


class _Norm(_Formula):
    """The formula helper with the per-channel reductions batch normalisation needs."""

    def mean(self, x: Tensor) -> Tensor:
        self.k += 1
        return self.ctx.create("Mean", [x], _AXES, suffix=f"mean{self.k}").outputs[0]

    def sum(self, x: Tensor) -> Tensor:
        self.k += 1
        return self.ctx.create("Sum", [x], _AXES, suffix=f"sum{self.k}").outputs[0]

    def rsqrt(self, x: Tensor, eps: float) -> Tensor:
        return self.op("Div", 1.0, self.op("Sqrt", self.op("Add", x, eps)))

    def empty(self, k: int) -> Tensor:
        """TensorFlow's unused reserve outputs: an empty vector."""
        return self.ctx.const(np.zeros((0,), self.anchor.dtype.numpy), [self.anchor], suffix=f"reserve{k}")


def _epsilon(ctx: ImportContext) -> float:
    return float(ctx.attr("epsilon", 1e-4))


@_rule("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
def _fused_batch_norm(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(x, scale, offset, mean, variance)`` -> ``(y, batch_mean, batch_variance, reserve_space_1,
    reserve_space_2[, reserve_space_3])``. Training: ``y`` normalised by the batch's mean and biased
    variance; ``batch_variance`` is the unbiased variance (times ``n / (n - 1)``), and with an
    ``exponential_avg_factor`` f other than 1 both statistics are ``(1 - f) * running + f * batch``;
    the reserve spaces keep the batch's mean and biased variance for the gradient. Inference: ``y``
    normalised by the given mean and variance, which pass through."""
    x = _in_nhwc(ctx, _t(ins[0]), 0)
    scale, offset, mean_in, var_in = (_t(v) for v in ins[1:5])
    f = _Norm(ctx, x)
    eps = _epsilon(ctx)
    if ctx.attr("is_training", True):
        mean = f.mean(x)
        centred = f.op("Sub", x, mean)
        var = f.mean(f.op("Mul", centred, centred))
        n = f.op("Div", ctx.create("Cast", [ctx.create("Size", [x], suffix="size").outputs[0]],
                                   {"dtype": x.dtype.name}, suffix="count").outputs[0],
                 ctx.create("Cast", [ctx.create("Size", [scale], suffix="channels").outputs[0]],
                            {"dtype": x.dtype.name}, suffix="channel_count").outputs[0])
        unbiased = f.op("Mul", var, f.op("Div", n, f.op("Maximum", f.op("Sub", n, 1.0), 1.0)))
        factor = float(ctx.attr("exponential_avg_factor", 1.0))
        new_mean, new_var = mean, unbiased
        if factor != 1.0:
            new_mean = f.op("Add", f.op("Mul", 1.0 - factor, mean_in), f.op("Mul", factor, mean))
            new_var = f.op("Add", f.op("Mul", 1.0 - factor, var_in), f.op("Mul", factor, unbiased))
        stats = [new_mean, new_var, mean, var]
    else:
        centred = f.op("Sub", x, mean_in)
        var = var_in
        stats = [mean_in, var_in, mean_in, var_in]
    y = f.op("Add", f.op("Mul", centred, f.op("Mul", f.rsqrt(var, eps), scale)), offset)
    if _nchw(ctx):
        y = ctx.create("Transpose", [y], {"perm": _TO_NCHW}, suffix="nchw").outputs[0]
    reserve3 = [f.empty(3)] if nd.op == "FusedBatchNormV3" else []
    return [f.last(y), *stats, *reserve3]


@_rule("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3")
def _fused_batch_norm_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(dy, x, scale, reserve_space_1, reserve_space_2[, reserve_space_3])`` -> ``(dx, dscale,
    doffset, reserve_space_4, reserve_space_5)``. The reserves are the batch's mean and biased
    variance (training) or the running mean and variance (inference). Training:
    ``dx = scale / sqrt(var + eps) * (dy - mean(dy) - (x - mean) * mean(dy * (x - mean)) / (var + eps))``;
    inference: ``dx = dy * scale / sqrt(var + eps)``. Both: ``dscale = sum(dy * (x - mean)) / sqrt(var + eps)``,
    ``doffset = sum(dy)``."""
    dy, x = _in_nhwc(ctx, _t(ins[0]), 0), _in_nhwc(ctx, _t(ins[1]), 1)
    scale, mean, var = (_t(v) for v in ins[2:5])
    f = _Norm(ctx, x)
    inv = f.rsqrt(var, _epsilon(ctx))
    centred = f.op("Sub", x, mean)
    dy_centred = f.op("Mul", dy, centred)
    dscale = f.op("Mul", f.sum(dy_centred), inv)
    doffset = f.sum(dy)
    if ctx.attr("is_training", True):
        tail = f.op("Mul", centred, f.op("Mul", f.mean(dy_centred), f.op("Mul", inv, inv)))
        dx = f.op("Mul", f.op("Mul", scale, inv), f.op("Sub", f.op("Sub", dy, f.mean(dy)), tail))
    else:
        dx = f.op("Mul", dy, f.op("Mul", scale, inv))
    if _nchw(ctx):
        dx = ctx.create("Transpose", [dx], {"perm": _TO_NCHW}, suffix="nchw").outputs[0]
    return [f.last(dx), dscale, doffset, f.empty(4), f.empty(5)]


# ---- local response normalisation: TensorFlow's CPU kernel's formula, over the channels ----------------
def _lrn_norm(ctx: ImportContext, f: _Formula, x: Tensor) -> tuple[Tensor, Tensor, float, float]:
    """``(bias + alpha * window_sum(x * x), band, alpha, beta)`` for an NHWC ``x``: the sum over the
    ``depth_radius`` channels each side is a product with the band matrix of ones where two channels
    are that near (TensorFlow's CPU kernel contracts with that matrix too), so the channel count
    must be known when importing."""
    channels = x.shape[-1] if x.shape is not None and len(x.shape) == 4 else None
    if channels is None:
        raise UnsupportedError(f"{ctx.where()}: local response normalisation needs a 4-D input whose channel "
                               f"count is known at import, got shape {_shape(x)}")
    radius = int(ctx.attr("depth_radius", 5))
    if not 0 <= radius < 2**31:  # (TensorFlow's kernel refuses it too)
        raise GraphBuildError(f"{ctx.where()}: depth_radius {radius} is not in [0, 2**31)")
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 0.5))
    k = np.arange(channels)
    band = ctx.const((np.abs(k[:, None] - k[None, :]) <= radius).astype(x.dtype.numpy), [x], suffix="band")
    sums = ctx.create("MatMul", [f.op("Mul", x, x), band], suffix="window_sums").outputs[0]
    return f.op("Add", f.op("Mul", sums, alpha), float(ctx.attr("bias", 1.0))), band, alpha, beta


@_rule("LRN")
def _lrn(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``x * (bias + alpha * sum of x**2 over the window) ** -beta`` (``tf.nn.lrn``, the CIFAR-10 and
    AlexNet models' normalisation)."""
    x = _t(ins[0])
    f = _Formula(ctx, x)
    norm, _, _, beta = _lrn_norm(ctx, f, x)
    return [f.last(f.op("Mul", x, f.op("Pow", norm, -beta)))]


@_rule("LRNGrad")
def _lrn_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(dy, x, y)`` -> ``dx = dy * norm ** -beta - 2 alpha beta x * window_sum(dy * y / norm)``, as
    TensorFlow's kernel computes it from the forward output ``y`` (the window is symmetric, so the
    sum over the outputs a channel feeds is the same band product)."""
    dy, x, y = (_t(v) for v in ins[:3])
    f = _Formula(ctx, x)
    norm, band, alpha, beta = _lrn_norm(ctx, f, x)
    spread = ctx.create("MatMul", [f.op("Div", f.op("Mul", dy, y), norm), band], suffix="spread").outputs[0]
    dx = f.op("Sub", f.op("Mul", dy, f.op("Pow", norm, -beta)), f.op("Mul", f.op("Mul", x, spread), 2.0 * alpha * beta))
    return [f.last(dx)]


@_rule("VariableShape")
def _variable_shape(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The shape of a resource Variable's value: the Shape of a read of it (what the read would give)."""
    attrs = _var_attrs(ctx, _var_node(ctx, ctx.data_inputs()[0]))
    value = ctx.create("ReadVariable", ins[:1], attrs, suffix="read").outputs[0]
    if ctx.attr("out_type", 3) == 3:
        return [ctx.create("Shape", [value]).outputs[0]]
    s = ctx.create("Shape", [value], suffix="int32").outputs[0]
    return [ctx.create("Cast", [s], {"dtype": ctx.dtype("out_type").name}).outputs[0]]


# ---- image resizing: TensorFlow's interpolation as gathers of rows and columns ---------------------
def _resize_sizes(ctx: ImportContext, k: int) -> tuple[int, int]:
    """The (rows, columns) of input ``k`` (``size`` of a resize, or of its gradient's original image),
    which must be known at import: the interpolation's indices and weights are constants."""
    hw = ctx.static_int_list(ctx.data_inputs()[k], "the size")
    if len(hw) != 2 or min(hw) < 1:
        raise UnsupportedError(f"{ctx.where()}: the size must be two positive ints, got {hw}")
    return hw[0], hw[1]


def _in_sizes(ctx: ImportContext, image: Tensor) -> tuple[int, int]:
    """The rows and columns of an NHWC ``image``, which must be known at import."""
    if image.shape is None or len(image.shape) != 4 or image.shape[1] is None or image.shape[2] is None:
        raise UnsupportedError(f"{ctx.where()}: the image's rows and columns must be known when importing, "
                               f"got shape {image.shape}")
    return int(image.shape[1]), int(image.shape[2])


def _scale(ctx: ImportContext, size_in: int, size_out: int) -> np.float32:
    """TensorFlow's ``CalculateResizeScale``, in float32 as its kernels compute it."""
    if ctx.attr("align_corners", False) and size_out > 1:
        return np.float32(size_in - 1) / np.float32(size_out - 1)
    return np.float32(size_in) / np.float32(size_out)


def bilinear_weights(size_in: int, size_out: int, scale: np.float32, half_pixel: bool
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TensorFlow's ``compute_interpolation_weights`` of one axis: for each output index, the lower
    and upper input indices and the weight of the upper one, in float32: the source position is
    ``(i + 0.5) * scale - 0.5`` with half-pixel centers, else ``i * scale``; the lower index is its
    floor, at least 0, the upper its ceiling, at most the last; the weight its fraction."""
    i = np.arange(size_out, dtype=np.float32)
    src = (i + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel else i * scale
    low = np.floor(src)
    lower = np.maximum(low, 0).astype(np.int32)
    upper = np.minimum(np.ceil(src), size_in - 1).astype(np.int32)
    return lower, upper, (src - low).astype(np.float32)


def nearest_index(size_in: int, size_out: int, scale: np.float32, half_pixel: bool, align: bool) -> np.ndarray:
    """TensorFlow's nearest-neighbour source index of each output index, in float32: ``(i + 0.5) *
    scale`` with half-pixel centers, else ``i * scale``; rounded half away from zero (C's ``roundf``,
    not numpy's half-to-even) where ``align_corners``, else floored; at most the last index (and at
    least 0)."""
    i = np.arange(size_out, dtype=np.float32)
    src = (i + np.float32(0.5)) * scale if half_pixel else i * scale
    low = np.floor(src)
    picked = np.where(src - low >= np.float32(0.5), low + 1, low) if align else low  # (src >= 0: roundf)
    return np.clip(picked, 0, size_in - 1).astype(np.int32)


class _Resize(_Formula):
    """The formula helper of the resize rules: gathers and scatters along an image axis, and weights
    shaped to broadcast along it."""

    def const(self, v: np.ndarray) -> Tensor:
        self.k += 1
        return self.ctx.const(v, [self.anchor], suffix=f"k{self.k}")

    def gather(self, x: Tensor, idx: np.ndarray, axis: int) -> Tensor:
        self.k += 1
        return self.ctx.create("Gather", [x, self.const(idx)], {"axis": axis}, suffix=f"gather{self.k}").outputs[0]

    def scatter(self, like: Tensor, idx: np.ndarray, upd: Tensor, axis: int) -> Tensor:
        self.k += 1
        return self.ctx.create("ScatterAddLike", [like, self.const(idx), upd], {"axis": axis},
                               suffix=f"scatter{self.k}").outputs[0]

    def weight(self, w: np.ndarray, axis: int, dtype: Any) -> Tensor:
        """``w`` as a constant that broadcasts along ``axis`` (1: rows, 2: columns) of an NHWC image."""
        return self.const(w.astype(dtype.numpy).reshape((-1, 1, 1) if axis == 1 else (-1, 1)))

    def lerp(self, a: Tensor, b: Tensor, w: Tensor, last: bool = False) -> Tensor:
        """``a + (b - a) * w``, TensorFlow's order of operations (``last``: the rule's result, which
        carries the NodeDef's name)."""
        step = self.op("Mul", self.op("Sub", b, a), w)
        return self.ctx.create("Add", [a, step]).outputs[0] if last else self.op("Add", a, step)


def _float_image(ctx: ImportContext, x: Tensor) -> Tensor:
    """``x`` as float32 (TensorFlow's bilinear resize computes and returns float32 of any input)."""
    if x.dtype.name == "float32":
        return x
    return ctx.create("Cast", [x], {"dtype": "float32"}, suffix="float").outputs[0]


@_rule("ResizeBilinear")
def _resize_bilinear(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(images, size)``: each output pixel interpolated between its four nearest input pixels,
    columns first (``top = tl + (tr - tl) * x_w``, ``bottom`` alike, then ``top + (bottom - top) *
    y_w``), TensorFlow's order, so float32 results match its kernel's."""
    x = _float_image(ctx, _t(ins[0]))
    (h, w), (oh, ow) = _in_sizes(ctx, x), _resize_sizes(ctx, 1)
    half = bool(ctx.attr("half_pixel_centers", False))
    y0, y1, yw = bilinear_weights(h, oh, _scale(ctx, h, oh), half)
    x0, x1, xw = bilinear_weights(w, ow, _scale(ctx, w, ow), half)
    f = _Resize(ctx, x)
    top_rows, bottom_rows = f.gather(x, y0, 1), f.gather(x, y1, 1)
    cw = f.weight(xw, 2, x.dtype)
    top = f.lerp(f.gather(top_rows, x0, 2), f.gather(top_rows, x1, 2), cw)
    bottom = f.lerp(f.gather(bottom_rows, x0, 2), f.gather(bottom_rows, x1, 2), cw)
    return [f.lerp(top, bottom, f.weight(yw, 1, x.dtype), last=True)]


@_rule("ResizeBilinearGrad")
def _resize_bilinear_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(grads, original_image)``: the adjoint of ``ResizeBilinear``, each output pixel's gradient
    added to its four input pixels by their weights (rows' shares first, then columns')."""
    dy, orig = _t(ins[0]), _t(ins[1])
    (h, w) = _in_sizes(ctx, orig)
    if dy.shape is None or len(dy.shape) != 4 or dy.shape[1] is None or dy.shape[2] is None:
        raise UnsupportedError(f"{ctx.where()}: the gradient's rows and columns must be known when importing")
    oh, ow = int(dy.shape[1]), int(dy.shape[2])
    half = bool(ctx.attr("half_pixel_centers", False))
    y0, y1, yw = bilinear_weights(h, oh, _scale(ctx, h, oh), half)
    x0, x1, xw = bilinear_weights(w, ow, _scale(ctx, w, ow), half)
    f = _Resize(ctx, dy)
    ry = f.weight(yw, 1, dy.dtype)
    d_bottom = f.op("Mul", dy, ry)
    d_top = f.op("Sub", dy, d_bottom)
    cx = f.weight(xw, 2, dy.dtype)
    like = _float_image(ctx, orig)  # (N, H, W, C): a shape only
    like_rows = f.gather(like, np.zeros(oh, np.int32), 1)  # (N, OH, W, C): a shape only

    def columns(d: Tensor) -> Tensor:  # (N, OH, OW, C) -> (N, OH, W, C)
        right = f.op("Mul", d, cx)
        return f.op("Add", f.scatter(like_rows, x0, f.op("Sub", d, right), 2), f.scatter(like_rows, x1, right, 2))

    rows = f.op("Add", f.scatter(like, y0, columns(d_top), 1), f.scatter(like, y1, columns(d_bottom), 1))
    return [ctx.create("Cast", [rows], {"dtype": orig.dtype.name}).outputs[0] if orig.dtype != dy.dtype else
            ctx.create("Identity", [rows]).outputs[0]]


@_rule("ResizeNearestNeighbor")
def _resize_nearest(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(images, size)``: each output pixel the input pixel ``nearest_index`` picks, in the input's
    dtype."""
    x = _t(ins[0])
    (h, w), (oh, ow) = _in_sizes(ctx, x), _resize_sizes(ctx, 1)
    half, align = bool(ctx.attr("half_pixel_centers", False)), bool(ctx.attr("align_corners", False))
    f = _Resize(ctx, x)
    rows = f.gather(x, nearest_index(h, oh, _scale(ctx, h, oh), half, align), 1)
    cols = nearest_index(w, ow, _scale(ctx, w, ow), half, align)
    return [ctx.create("Gather", [rows, f.const(cols)], {"axis": 2}).outputs[0]]


@_rule("ResizeNearestNeighborGrad")
def _resize_nearest_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(grads, size)``: each output pixel's gradient added to the input pixel it was read from
    (``size``: the input's rows and columns)."""
    dy = _t(ins[0])
    h, w = _resize_sizes(ctx, 1)
    if dy.shape is None or len(dy.shape) != 4 or dy.shape[1] is None or dy.shape[2] is None:
        raise UnsupportedError(f"{ctx.where()}: the gradient's rows and columns must be known when importing")
    oh, ow = int(dy.shape[1]), int(dy.shape[2])
    half, align = bool(ctx.attr("half_pixel_centers", False)), bool(ctx.attr("align_corners", False))
    f = _Resize(ctx, dy)
    # zeros of the input's shape, the batch read from the gradient (a shape only)
    first = f.gather(dy, np.zeros(1, np.int32), 1)
    col_like = f.gather(first, np.zeros(w, np.int32), 2)  # (N, 1, W, C)
    like = f.gather(col_like, np.zeros(h, np.int32), 1)  # (N, H, W, C)
    rows_like = f.gather(col_like, np.zeros(oh, np.int32), 1)  # (N, OH, W, C)
    cols = f.scatter(rows_like, nearest_index(w, ow, _scale(ctx, w, ow), half, align), dy, 2)
    return [ctx.create("ScatterAddLike", [like, f.const(nearest_index(h, oh, _scale(ctx, h, oh), half, align)),
                                          cols], {"axis": 1}).outputs[0]]
