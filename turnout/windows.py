"""The geometry of sliding windows: where the windows of a 2-D convolution or pooling op (NHWC) lie.

Why one module: the shape rules, the numpy kernels and the JAX lowering must agree to the element on
how big the output is and how much padding goes before and after each spatial axis, and TensorFlow's
``SAME`` padding is an uneven split (the extra row goes *after*). Each of them asks ``spatial`` here
rather than computing it again.

The attributes of the window ops (``turnout.primitives``): ``strides`` and ``dilations`` (conv only)
or ``ksize`` (pooling only), each two positive ints (rows, columns), and ``padding``, ``"SAME"`` or
``"VALID"``; a convolution may have ``groups`` (``feature_groups``: absent means 1), a positive int.
``check_attrs`` refuses anything else with an ``ArgumentError`` naming the op and the attribute, on
every backend alike (the shape rule calls it when the graph is built).

Feature groups: a convolution of ``groups`` G splits the input's channels and the filter's output
channels into G equal parts and convolves part g of the input with part g of the filter alone, so
the filter has ``channels / G`` input channels (XLA's ``feature_group_count``; TensorFlow's ``Conv2D``
reads the same from the filter's shape). A depthwise convolution (``DepthwiseConv2dNative``) is the
case ``G = channels``, its filter ``(rows, columns, channels, multiplier)`` read as
``(rows, columns, 1, channels * multiplier)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

import numpy as np

from turnout.errors import ArgumentError, ShapeError

PADDINGS = ("SAME", "VALID")
#: the window ops whose window is a filter's spatial size (``strides``, ``dilations``, ``padding``)
CONV_OPS = frozenset({"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"})
#: the window ops whose window is ``ksize`` (``ksize``, ``strides``, ``padding``; no dilation)
POOL_OPS = frozenset({"MaxPool", "MaxPoolGrad", "AvgPool", "AvgPoolGrad"})


class Axis(NamedTuple):
    """One spatial axis of a window op: ``out`` windows, ``before`` / ``after`` padded elements."""

    out: int
    before: int
    after: int


def _pair(op: str, attrs: dict[str, Any], name: str) -> tuple[int, int]:
    v: Any = attrs.get(name)
    ok = (isinstance(v, (list, tuple)) and len(v) == 2
          and all(isinstance(e, (int, np.integer)) and not isinstance(e, (bool, np.bool_)) and e >= 1 for e in v))
    if not ok:
        raise ArgumentError(f"{op}: {name} must be two positive ints (rows, columns), got {v!r}")
    return int(v[0]), int(v[1])


def feature_groups(op: str, attrs: dict[str, Any]) -> int:
    """The ``groups`` of a convolution (1 where absent, and for every pooling op)."""
    g: Any = attrs.get("groups", 1)
    if not isinstance(g, (int, np.integer)) or isinstance(g, (bool, np.bool_)) or g < 1:
        raise ArgumentError(f"{op}: groups must be a positive int, got {g!r}")
    return int(g)


def groups_of(channels: Optional[int], filter_in: Optional[int]) -> int:
    """The feature groups TensorFlow's ``Conv2D`` reads from the shapes: the image's channels over the
    filter's input channels, where both are known and the second divides the first; else 1 (the
    shape rule then says what does not fit)."""
    if channels is None or not filter_in or channels == filter_in or channels % filter_in:
        return 1
    return channels // filter_in


def check_attrs(op: str, attrs: dict[str, Any]) -> None:
    """Refuse a window op's attributes that are not two positive ints each, or an unknown padding."""
    _pair(op, attrs, "strides")
    _pair(op, attrs, "dilations" if op in CONV_OPS else "ksize")
    if op in CONV_OPS:
        feature_groups(op, attrs)
    if attrs.get("padding") not in PADDINGS:
        raise ArgumentError(f"{op}: padding must be 'SAME' or 'VALID', got {attrs.get('padding')!r}")


def window(op: str, attrs: dict[str, Any], kernel: Optional[Sequence[Optional[int]]] = None
           ) -> tuple[tuple[Optional[int], Optional[int]], tuple[int, int], tuple[int, int]]:
    """(window size, strides, dilations) of a window op: a conv's window is ``kernel`` (the filter's
    rows and columns), a pooling op's its ``ksize`` (and its dilations are 1)."""
    strides = _pair(op, attrs, "strides")
    if op in CONV_OPS:
        k = (None, None) if kernel is None else (kernel[0], kernel[1])
        return k, strides, _pair(op, attrs, "dilations")
    return _pair(op, attrs, "ksize"), strides, (1, 1)


def axis(op: str, size: int, k: int, stride: int, dilation: int, padding: str) -> Axis:
    """TensorFlow's ``GetWindowedOutputSize``: ``VALID`` fits whole windows in the input; ``SAME``
    gives ``ceil(size / stride)`` windows and pads ``(out - 1) * stride + k' - size`` elements
    (``k'`` the dilated window), half before and the odd one after."""
    eff = (k - 1) * dilation + 1
    if padding == "VALID":
        if size < eff:
            raise ShapeError(f"{op}: a window of {eff} (size {k}, dilation {dilation}) does not fit an input "
                             f"of {size} with padding 'VALID'")
        return Axis((size - eff) // stride + 1, 0, 0)
    out = -(-size // stride)
    total = max((out - 1) * stride + eff - size, 0)
    return Axis(out, total // 2, total - total // 2)


def spatial(op: str, attrs: dict[str, Any], hw: Sequence[int], kernel: Optional[Sequence[int]] = None
            ) -> tuple[Axis, Axis]:
    """The two spatial axes of a window op over an input of ``hw`` rows and columns."""
    k, s, d = window(op, attrs, kernel)
    return (axis(op, int(hw[0]), int(k[0]), s[0], d[0], attrs["padding"]),  # type: ignore[arg-type]
            axis(op, int(hw[1]), int(k[1]), s[1], d[1], attrs["padding"]))  # type: ignore[arg-type]


def out_hw(op: str, attrs: dict[str, Any], hw: Sequence[Optional[int]],
           kernel: Optional[Sequence[Optional[int]]] = None) -> tuple[Optional[int], Optional[int]]:
    """The output's rows and columns as far as they are known (None where an input size is not)."""
    k, s, d = window(op, attrs, kernel)
    out: list[Optional[int]] = []
    for i in range(2):
        if hw[i] is None or k[i] is None:
            out.append(None)
        else:
            out.append(axis(op, int(hw[i]), int(k[i]), s[i], d[i], attrs["padding"]).out)  # type: ignore[arg-type]
    return out[0], out[1]


__all__ = ["CONV_OPS", "PADDINGS", "POOL_OPS", "Axis", "axis", "check_attrs", "feature_groups", "groups_of", "out_hw",
           "spatial", "window"]
