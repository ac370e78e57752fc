"""Lowering rules of the window primitives: convolution (``lax.conv_general_dilated``), pooling
(``lax.reduce_window``) and their gradients.

Each gradient is lowered as the ``jax.vjp`` of the forward lowering, so XLA's transposed convolution
and its select-and-scatter do the work, with the padding ``turnout.windows`` gives (TensorFlow's
split, the same the numpy kernels use). Max pooling's gradient is XLA's select-and-scatter with a
``>=`` selection, which keeps the first largest element of each window in row-major order: the
element TensorFlow's kernel and ``turnout.window_kernels.first_argmax`` choose. Convolutions ask
for the highest precision, so a float32 convolution on a GPU is not rounded through TF32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from turnout import windows
from turnout.fast.lowering_base import lowering_rule

_DIMS = ("NHWC", "HWIO", "NHWC")


def _pads(axes: tuple[windows.Axis, windows.Axis]) -> list[tuple[int, int]]:
    return [(axes[0].before, axes[0].after), (axes[1].before, axes[1].after)]


def _conv(attrs: dict[str, Any], hw: Any, w: Any) -> Callable[[Any, Any], Any]:
    """``x, w -> Conv2D(x, w)`` for inputs of ``hw`` rows and columns."""
    axes = windows.spatial("Conv2D", attrs, hw, jnp.shape(w)[:2])
    groups = windows.feature_groups("Conv2D", attrs)
    return lambda x, f: lax.conv_general_dilated(x, f, tuple(attrs["strides"]), _pads(axes),
                                                 rhs_dilation=tuple(attrs["dilations"]), dimension_numbers=_DIMS,
                                                 feature_group_count=groups, precision=lax.Precision.HIGHEST)


@lowering_rule("Conv2D")
def _conv2d(ctx, n, xs):
    x, w = xs
    return [_conv(n.attrs, jnp.shape(x)[1:3], w)(x, w)]


def _conv_vjp(attrs: dict[str, Any], x: Any, w: Any, dy: Any, wrt: int) -> Any:
    """The cotangent of Conv2D's input (``wrt`` 0) or filter (1) for ``dy``: the ``jax.vjp`` of the
    forward lowering at ``x`` and ``w``, one of which stands in for the other's shape only."""
    conv = _conv(attrs, jnp.shape(x)[1:3], w)
    _, back = jax.vjp(lambda a: conv(a, w) if wrt == 0 else conv(x, a), w if wrt else x)
    return back(dy)[0]


@lowering_rule("Conv2DBackpropInput")
def _conv2d_backprop_input(ctx, n, xs):
    like, w, dy = xs
    return [_conv_vjp(n.attrs, jnp.zeros(jnp.shape(like), jnp.result_type(like)), w, dy, 0)]


@lowering_rule("Conv2DBackpropFilter")
def _conv2d_backprop_filter(ctx, n, xs):
    x, like, dy = xs
    return [_conv_vjp(n.attrs, x, jnp.zeros(jnp.shape(like), jnp.result_type(like)), dy, 1)]


def _window_sum(op: str, attrs: dict[str, Any], x: Any, init: Any, reducer: Any) -> Any:
    axes = windows.spatial(op, attrs, jnp.shape(x)[1:3])
    return lax.reduce_window(x, init, reducer, (1, *attrs["ksize"], 1), (1, *attrs["strides"], 1),
                             [(0, 0), *_pads(axes), (0, 0)])


def _lowest(dtype: Any) -> Any:
    d = np.dtype(dtype)
    return np.asarray(-np.inf if d.kind == "f" else np.iinfo(d).min, d)


def _max_pool_fn(op: str, attrs: dict[str, Any]) -> Callable[[Any], Any]:
    return lambda x: _window_sum(op, attrs, x, _lowest(jnp.result_type(x)), lax.max)


def _avg_pool_fn(op: str, attrs: dict[str, Any], shape: Any, dtype: Any) -> Callable[[Any], Any]:
    """The window sums over the counts of elements inside the input (static: from the shape alone)."""
    counts = _window_sum(op, attrs, np.ones((1, *shape[1:3], 1), dtype), np.asarray(0, dtype), lax.add)
    return lambda x: _window_sum(op, attrs, x, np.asarray(0, jnp.result_type(x)), lax.add) / counts


@lowering_rule("MaxPool")
def _max_pool(ctx, n, xs):
    return [_max_pool_fn("MaxPool", n.attrs)(xs[0])]


@lowering_rule("MaxPoolGrad")
def _max_pool_grad(ctx, n, xs):
    x, _, dy = xs
    _, back = jax.vjp(_max_pool_fn("MaxPoolGrad", n.attrs), jnp.asarray(x))
    return [back(dy)[0]]


@lowering_rule("AvgPool")
def _avg_pool(ctx, n, xs):
    x = xs[0]
    return [_avg_pool_fn("AvgPool", n.attrs, jnp.shape(x), jnp.result_type(x))(x)]


@lowering_rule("AvgPoolGrad")
def _avg_pool_grad(ctx, n, xs):
    like, dy = xs
    dtype = jnp.result_type(like)
    _, back = jax.vjp(_avg_pool_fn("AvgPoolGrad", n.attrs, jnp.shape(like), dtype), jnp.zeros(jnp.shape(like), dtype))
    return [back(dy)[0]]
