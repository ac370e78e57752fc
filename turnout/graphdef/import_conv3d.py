"""Import rules of TensorFlow's ``Conv3D`` (``tf.nn.conv3d``, ``layers.conv3d``: video and volume
models) and its two gradient ops, as ``Conv2D`` s over depth slices; and of the 3-D pools
(``MaxPool3D``, ``AvgPool3D`` and their gradients) as 2-D pools of the slices.

A 3-D cross-correlation is a sum over the filter's depth taps of 2-D ones: output depth ``d`` adds,
for each tap ``k``, the ``Conv2D`` of input depth ``d * stride + k * dilation - pad`` (a depth inside
the input; the padding's are zeros and add nothing) with the filter's slice ``k``, the rows and
columns padded, strided and dilated as the ``Conv2D`` does it (``turnout.windows``, TensorFlow's
rule per axis); the depth's padding is the same rule's. So the op needs its input's depth and its
filter's known at import (the slices are unrolled), and NDHWC data. Its gradient ops are
``tn.gradients`` of that sum with the upstream gradient held constant (the sum is linear in the input
and in the filter, so zeros of the sizes the op is given stand for the other operand).

A 3-D max pool is the largest, over the window's depth taps inside the input, of the 2-D max pools of
those slices (the maximum is separable; taken tap by tap in depth order, the first largest element in
row-major order of depth, rows, columns gets a tie's gradient, as TensorFlow's kernel gives it); a
3-D average pool is the mean, over those taps, of the 2-D average pools (each slice's window holds as
many elements inside the input, so the mean of their means is the mean over the 3-D window's
elements inside the input). Their gradient ops are ``tn.gradients`` of these formulas.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout import ops, windows
from turnout.errors import UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef.flows import tensor_name
from turnout.graphdef.import_builders import held_gradient, with_builders
from turnout.graphdef.import_context import ImportContext, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs, _partial_shape
from turnout.nn_ops import avg_pool, conv2d, max_pool
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)


def _window(ctx: ImportContext, first: str, second: str) -> tuple[list[int], list[int], str]:
    """The op's two five-entry window attrs ``first`` and ``second`` (strides and dilations, or ksize
    and strides) over depth, rows and columns, and its padding; NDHWC data only, and no window along
    the batch or the channels (a missing ``dilations`` is ones)."""
    if ctx.attr("data_format", "NDHWC") != "NDHWC":
        raise UnsupportedError(f"{ctx.where()}: only data_format NDHWC is built, got {ctx.attr('data_format')!r}")
    one, two = ([int(v) for v in (ctx.attr(k) or [1, 1, 1, 1, 1] if k == "dilations" else ctx.attr(k))]
                for k in (first, second))
    if one[0] != 1 or one[4] != 1 or two[0] != 1 or two[4] != 1:
        raise UnsupportedError(f"{ctx.where()}: {first} and {second} along the batch or the channels are not built")
    return one[1:4], two[1:4], str(ctx.attr("padding"))


def conv3d(x: Tensor, w: Tensor, strides: list[int], dilations: list[int], padding: str) -> Tensor:
    """``Conv3D`` of NDHWC ``x`` and DHWIO ``w`` as a sum of ``Conv2D`` s over depth slices (module
    docstring); ``x``'s depth and ``w``'s must be known."""
    if x.shape is None or len(x.shape) != 5 or x.shape[1] is None or w.shape is None or len(w.shape) != 5 \
            or w.shape[0] is None:
        raise UnsupportedError(f"Conv3D: needs the input's depth and the filter's when importing, got {x.shape} "
                               f"and {w.shape}")
    depth, taps = int(x.shape[1]), int(w.shape[0])
    ax = windows.axis("Conv3D", depth, taps, strides[0], dilations[0], padding)
    planes = []
    for d in range(ax.out):
        terms = [conv2d(x[:, k_in], w[k], strides[1:], padding, dilations[1:])
                 for k in range(taps) if 0 <= (k_in := d * strides[0] + k * dilations[0] - ax.before) < depth]
        if not terms:  # (every tap in the padding: a plane of zeros of the 2-D output's shape)
            terms = [conv2d(x[:, 0] * ops.constant(np.zeros((), x.dtype.numpy)), w[0], strides[1:], padding,
                            dilations[1:])]
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        planes.append(total)
    return ops.stack(planes, axis=1)


def _zeros(ctx: ImportContext, k: int, like: Value) -> Tensor:
    """Zeros of the sizes input ``k`` gives (a shape vector: known at import as far as it can be)."""
    sizes = ctx.values.get(tensor_name(ctx.data_inputs()[k]))
    known = _partial_shape(ctx, ctx.data_inputs()[k])
    if not isinstance(sizes, Tensor) or known is None or not isinstance(like, Tensor):
        raise UnsupportedError(f"{ctx.where()}: needs the rank of the sizes when importing")
    if sizes.dtype != dt.int32:
        sizes = ctx.create("Cast", [sizes], {"dtype": "int32"}, suffix="sizes32").outputs[0]
    zero = ctx.const(np.zeros((), like.dtype.numpy), [sizes], suffix="zero")
    return ctx.create("Fill", [sizes, zero], suffix="zeros", shapes=[known]).outputs[0]


@_rule("Conv3D")
def _conv3d(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    strides, dilations, padding = _window(ctx, "strides", "dilations")
    with with_builders(ctx, ins):
        out = conv3d(ins[0], ins[1], strides, dilations, padding)  # type: ignore[arg-type]
    return [ctx.create("Identity", [out]).outputs[0]]


@_rule("Conv3DBackpropInputV2", "Conv3DBackpropFilterV2")
def _conv3d_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The gradient with respect to the input (``...InputV2``: its sizes are input 0) or the filter
    (``...FilterV2``: input 1), zeros of those sizes standing for it."""
    strides, dilations, padding = _window(ctx, "strides", "dilations")
    k = 0 if nd.op == "Conv3DBackpropInputV2" else 1
    wrt = _zeros(ctx, k, ins[1 - k])
    x, w = (wrt, ins[1]) if k == 0 else (ins[0], wrt)
    with with_builders(ctx, ins):
        g = held_gradient(conv3d(x, w, strides, dilations, padding), ins[2], wrt)  # type: ignore[arg-type]
    return [ctx.create("Identity", [g]).outputs[0]]


def pool3d(op: str, x: Tensor, ksize: list[int], strides: list[int], padding: str) -> Tensor:
    """``MaxPool3D`` / ``AvgPool3D`` of NDHWC ``x`` (module docstring); ``x``'s depth must be known."""
    if x.shape is None or len(x.shape) != 5 or x.shape[1] is None:
        raise UnsupportedError(f"{op}: needs the input's depth when importing, got {x.shape}")
    depth = int(x.shape[1])
    ax = windows.axis(op, depth, ksize[0], strides[0], 1, padding)
    pool = max_pool if op == "MaxPool3D" else avg_pool
    planes = []
    for d in range(ax.out):
        taps = [pool(x[:, k_in], ksize[1:], strides[1:], padding)
                for k in range(ksize[0]) if 0 <= (k_in := d * strides[0] + k - ax.before) < depth]
        total = taps[0]
        for t in taps[1:]:
            total = ops.maximum(total, t) if op == "MaxPool3D" else total + t
        planes.append(total if op == "MaxPool3D" else total / ops.constant(np.asarray(len(taps), x.dtype.numpy)))
    return ops.stack(planes, axis=1)


@_rule("MaxPool3D", "AvgPool3D")
def _pool3d(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    ksize, strides, padding = _window(ctx, "ksize", "strides")
    with with_builders(ctx, ins):
        out = pool3d(nd.op, ins[0], ksize, strides, padding)  # type: ignore[arg-type]
    return [ctx.create("Identity", [out]).outputs[0]]


@_rule("MaxPool3DGrad", "AvgPool3DGrad")
def _pool3d_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The pool's gradient: of the max pool at its original input (input 0), of the average pool at
    zeros of its input's sizes (input 0; the pool is linear); the upstream gradient is the last input."""
    ksize, strides, padding = _window(ctx, "ksize", "strides")
    op = nd.op[:-len("Grad")]
    x = ins[0] if op == "MaxPool3D" else _zeros(ctx, 0, ins[-1])
    with with_builders(ctx, ins):
        g = held_gradient(pool3d(op, x, ksize, strides, padding), ins[-1], x)  # type: ignore[arg-type]
    return [ctx.create("Identity", [g]).outputs[0]]


__all__ = ["conv3d", "pool3d"]
