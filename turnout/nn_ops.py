"""Op constructors of convolution and pooling over image batches, as ``tf.nn`` spells them
(``tn.conv2d``, ``tn.max_pool``, ``tn.avg_pool``; ``tn.import_graph_def`` imports TensorFlow's
``Conv2D``, ``MaxPool`` and ``AvgPool`` and their gradients to the same primitives).

Why a module beside ``turnout.ops``: these are window ops, whose geometry (``turnout.windows``) the
shape rules, the numpy kernels and the JAX lowering share; ``turnout.ops`` holds element-wise and
structure ops. Each builder is one primitive node over NHWC images; an NCHW image is transposed to
NHWC and back around it (TensorFlow's CPU kernels take NHWC only; the transposes cost one copy each
way).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np

from turnout import windows
from turnout.arguments import checked
from turnout.errors import ArgumentError
from turnout.graph import Tensor
from turnout.ops import convert_to_tensor, reshape, transpose

IntOrInts = Union[int, Sequence[int]]
_FORMATS = ("NHWC", "NCHW")


def _pair(value: Any, op: str, argument: str, data_format: str) -> list[int]:
    """``value`` as (rows, columns): one int for both, one or two ints, or four in the image's
    layout whose batch and channel entries are 1 (``tf.nn``'s forms). The shape rule then checks that
    both are positive ints."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return [value, value]  # type: ignore[list-item]
    v = list(value)
    if len(v) == 1:
        return [v[0], v[0]]
    if len(v) == 2:
        return v
    if len(v) == 4:
        batch, chan, hw = (0, 3, v[1:3]) if data_format == "NHWC" else (0, 1, v[2:4])
        if v[batch] != 1 or v[chan] != 1:
            raise ArgumentError(f"{op}: {argument} {v} must be 1 for the batch and the channels "
                                f"(entries {batch} and {chan} in {data_format})")
        return list(hw)
    raise ArgumentError(f"{op}: {argument} must be an int or 1, 2 or 4 ints, got {v}")


def _window_op(op: str, x: Any, extra: list[Any], attrs: dict[str, Any], data_format: str,
               name: Optional[str]) -> Tensor:
    """One window primitive over ``x`` (and ``extra`` inputs, a filter), in ``data_format``."""
    if data_format not in _FORMATS:
        raise ArgumentError(f"{op}: data_format must be 'NHWC' or 'NCHW', got {data_format!r}")
    x = convert_to_tensor(x)
    ins = [convert_to_tensor(e) for e in extra]
    if data_format == "NCHW":
        y = _window_op(op, transpose(x, [0, 2, 3, 1]), ins, attrs, "NHWC", None)
        return transpose(y, [0, 3, 1, 2], name=name)
    return x.graph.create_node(op, [x, *ins], attrs, name=name).outputs[0]


@checked
def conv2d(x: Any, filters: Any, strides: IntOrInts, padding: str, dilations: IntOrInts = 1,
           data_format: str = "NHWC", name: Optional[str] = None) -> Tensor:
    """TensorFlow's ``tf.nn.conv2d``: the cross-correlation of the image batch ``x`` (NHWC: batch,
    rows, columns, channels) with ``filters`` (rows, columns, in channels, out channels)::

        y[n, i, j, o] = sum over a, b, c of xp[n, i * sh + a * dh, j * sw + b * dw, c] * filters[a, b, c, o]

    where ``xp`` is ``x`` padded with zeros: ``padding="VALID"`` adds none (only whole windows),
    ``"SAME"`` gives ``ceil(size / stride)`` outputs per axis and splits the padding that needs,
    the odd element after. ``strides`` and ``dilations``: an int, or (rows, columns), or four in
    ``data_format`` with 1 for batch and channels. Its gradients are ``Conv2DBackpropInput`` and
    ``Conv2DBackpropFilter``, TensorFlow's names.

    A filter with fewer input channels than ``x`` has, a divisor of them, makes a grouped convolution,
    as in TensorFlow: ``channels / filter_in`` groups, each convolving its share of the channels with
    its share of the filter's output channels (``turnout.windows``; the counts must be known when the
    graph is built)."""
    x, filters = convert_to_tensor(x), convert_to_tensor(filters)
    attrs: dict[str, Any] = {"strides": _pair(strides, "Conv2D", "strides", data_format),
                             "dilations": _pair(dilations, "Conv2D", "dilations", data_format), "padding": padding}
    groups = _groups(x, filters, data_format)
    if groups > 1:
        attrs["groups"] = groups
    return _window_op("Conv2D", x, [filters], attrs, data_format, name)


def _groups(x: Tensor, filters: Tensor, data_format: str) -> int:
    """The feature groups of ``x`` convolved with ``filters`` (``windows.groups_of``)."""
    axis = 3 if data_format == "NHWC" else 1
    c = x.shape[axis] if x.shape is not None and len(x.shape) == 4 else None
    f = filters.shape[2] if filters.shape is not None and len(filters.shape) == 4 else None
    return windows.groups_of(c, f)


@checked
def depthwise_conv2d(x: Any, filters: Any, strides: IntOrInts, padding: str, dilations: IntOrInts = 1,
                     data_format: str = "NHWC", name: Optional[str] = None) -> Tensor:
    """TensorFlow's ``tf.nn.depthwise_conv2d``: each channel ``c`` of ``x`` convolved with its own
    filters ``filters[:, :, c, :]`` (rows, columns, channels, multiplier), output channel
    ``c * multiplier + m`` for filter ``m``::

        y[n, i, j, c * M + m] = sum over a, b of xp[n, i * sh + a * dh, j * sw + b * dw, c] * filters[a, b, c, m]

    ``strides``, ``padding``, ``dilations`` and ``data_format`` as in ``conv2d``. One ``Conv2D``
    with as many feature groups as channels, its filter read as (rows, columns, 1, channels * M): a
    depthwise convolution is that grouped convolution, so its gradients are Conv2D's (TensorFlow's
    ``DepthwiseConv2dNative`` imports to the same). The filter's shape must be known."""
    filters = convert_to_tensor(filters)
    fs = filters.shape
    if fs is None or len(fs) != 4 or any(d is None for d in fs):
        raise ArgumentError(f"depthwise_conv2d: the filter's shape (rows, columns, channels, multiplier) must be "
                            f"known when the graph is built, got {fs}")
    kh, kw, c, m = (int(d) for d in fs)  # type: ignore[arg-type]
    attrs = {"strides": _pair(strides, "Conv2D", "strides", data_format),
             "dilations": _pair(dilations, "Conv2D", "dilations", data_format), "padding": padding, "groups": c}
    return _window_op("Conv2D", x, [reshape(filters, [kh, kw, 1, c * m])], attrs, data_format, name)


def _pool(op: str, x: Any, ksize: IntOrInts, strides: IntOrInts, padding: str, data_format: str,
          name: Optional[str]) -> Tensor:
    attrs = {"ksize": _pair(ksize, op, "ksize", data_format), "strides": _pair(strides, op, "strides", data_format),
             "padding": padding}
    return _window_op(op, x, [], attrs, data_format, name)


@checked
def max_pool(x: Any, ksize: IntOrInts, strides: IntOrInts, padding: str, data_format: str = "NHWC",
             name: Optional[str] = None) -> Tensor:
    """TensorFlow's ``tf.nn.max_pool2d``: the largest element of each ``ksize`` window of ``x`` (NHWC),
    windows ``strides`` apart; ``padding`` as in ``conv2d`` (padded elements never win). Its gradient
    goes to the first largest element of each window in row-major order, as TensorFlow's does."""
    return _pool("MaxPool", x, ksize, strides, padding, data_format, name)


@checked
def avg_pool(x: Any, ksize: IntOrInts, strides: IntOrInts, padding: str, data_format: str = "NHWC",
             name: Optional[str] = None) -> Tensor:
    """TensorFlow's ``tf.nn.avg_pool2d``: the mean of each ``ksize`` window of ``x`` (NHWC, floating),
    counting only the elements inside the input (a ``SAME`` window at the border averages fewer)."""
    return _pool("AvgPool", x, ksize, strides, padding, data_format, name)


__all__ = ["avg_pool", "conv2d", "depthwise_conv2d", "max_pool"]
