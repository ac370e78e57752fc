"""numpy kernels of the window primitives: convolution, pooling and their gradients (``WINDOW_KERNELS``,
merged into ``turnout.kernels.KERNELS``).

Each forward op reads the padded input through a strided view of its windows (``patches``: no copy
until it is multiplied), and each gradient adds back along the same windows (``scatter_windows``),
so the forward op and its adjoint cannot disagree about where a window lies: both ask
``turnout.windows.spatial``. A convolution is one matrix product of the windows (im2col), as
TensorFlow's CPU kernel computes it, in the input's dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from turnout import windows
from turnout.limits import check_allocation
from turnout.tables import registrar

#: primitive name -> its numpy kernel (the signature of ``turnout.kernels.Kernel``)
WINDOW_KERNELS: dict[str, Any] = {}
_k = registrar(WINDOW_KERNELS)


def _geometry(op: str, attrs: dict[str, Any], hw: Sequence[int], kernel: Sequence[int] | None = None
              ) -> tuple[tuple[windows.Axis, windows.Axis], tuple[int, int], tuple[int, int], tuple[int, int]]:
    k, s, d = windows.window(op, attrs, kernel)
    return windows.spatial(op, attrs, hw, kernel), (int(k[0]), int(k[1])), s, d  # type: ignore[arg-type]


def _pad(x: np.ndarray, axes: Sequence[windows.Axis], value: Any) -> np.ndarray:
    return np.pad(x, [(0, 0), (axes[0].before, axes[0].after), (axes[1].before, axes[1].after), (0, 0)],
                  constant_values=value)


def patches(xp: np.ndarray, axes: Sequence[windows.Axis], k: Sequence[int], s: Sequence[int],
            d: Sequence[int]) -> np.ndarray:
    """The windows of the padded batch ``xp`` as a view of shape (N, OH, OW, C, KH, KW)."""
    eff = [(k[i] - 1) * d[i] + 1 for i in range(2)]
    if not (axes[0].out and axes[1].out):  # no window (an empty input under SAME may be shorter than one)
        return np.zeros((xp.shape[0], axes[0].out, axes[1].out, xp.shape[3], k[0], k[1]), xp.dtype)
    v = sliding_window_view(xp, eff, axis=(1, 2))
    return v[:, ::s[0], ::s[1], :, ::d[0], ::d[1]][:, :axes[0].out, :axes[1].out]


def scatter_windows(cols: np.ndarray, hw: Sequence[int], axes: Sequence[windows.Axis], k: Sequence[int],
                    s: Sequence[int], d: Sequence[int]) -> np.ndarray:
    """The adjoint of ``patches``: ``cols`` (N, OH, OW, KH, KW, C) added into the padded input at
    the windows' places, the padding cut off again: shape (N, H, W, C)."""
    n, c = cols.shape[0], cols.shape[-1]
    hp = hw[0] + axes[0].before + axes[0].after
    wp = hw[1] + axes[1].before + axes[1].after
    check_allocation("window gradient", [n, hp, wp, c], cols.dtype.itemsize)
    out = np.zeros((n, hp, wp, c), cols.dtype)
    if axes[0].out and axes[1].out:
        for i in range(k[0]):
            for j in range(k[1]):
                r0, c0 = i * d[0], j * d[1]
                out[:, r0:r0 + (axes[0].out - 1) * s[0] + 1:s[0],
                    c0:c0 + (axes[1].out - 1) * s[1] + 1:s[1], :] += cols[:, :, :, i, j, :]
    return out[:, axes[0].before:axes[0].before + hw[0], axes[1].before:axes[1].before + hw[1], :]


def _im2col(op: str, x: np.ndarray, axes: Any, k: Any, s: Any, d: Any) -> np.ndarray:
    """The windows of ``x`` as rows of a matrix (N*OH*OW, KH*KW*C), in the filter's HWI order."""
    p = patches(_pad(x, axes, 0), axes, k, s, d)
    rows = p.shape[0] * p.shape[1] * p.shape[2]
    check_allocation(op, [rows, k[0] * k[1] * x.shape[3]], x.dtype.itemsize)
    return np.ascontiguousarray(p.transpose(0, 1, 2, 4, 5, 3)).reshape(rows, k[0] * k[1] * x.shape[3])


def _matrix(w: np.ndarray) -> np.ndarray:
    """An HWIO filter as the matrix (KH*KW*I, O) the windows multiply. Why no ``-1`` in the reshapes:
    numpy cannot infer it when a filter or a batch is empty (0 out channels, an empty batch)."""
    return w.reshape(w.shape[0] * w.shape[1] * w.shape[2], w.shape[3])


def _rows(dy: np.ndarray) -> np.ndarray:
    """An NHWC output gradient as one row per output position, (N*OH*OW, C)."""
    return dy.reshape(dy.shape[0] * dy.shape[1] * dy.shape[2], dy.shape[3])


def _grouped(kernel: Any) -> Any:
    """A convolution kernel over feature groups (``turnout.windows``): every input split into
    ``groups`` equal parts along axis 3 (an image's channels, a filter's output channels), the kernel
    run on each group's parts alone, and the results joined along axis 3 again. The same split serves
    the three ops, because each reads its image by channels and its filter and gradient by output
    channels."""
    def k(xs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
        g = windows.feature_groups("Conv2D", attrs)
        if g == 1:
            return kernel(xs, attrs)  # type: ignore[no-any-return]
        one = {a: v for a, v in attrs.items() if a != "groups"}
        parts = zip(*(np.split(np.asarray(x), g, axis=3) for x in xs))
        return [np.concatenate([kernel(list(p), one)[0] for p in parts], axis=3)]

    return k


@_k("Conv2D")
@_grouped
def _conv2d(xs, attrs):
    x, w = np.asarray(xs[0]), np.asarray(xs[1])
    axes, k, s, d = _geometry("Conv2D", attrs, x.shape[1:3], w.shape[:2])
    cols = _im2col("Conv2D", x, axes, k, s, d)
    y = cols @ _matrix(w)
    return [y.reshape(x.shape[0], axes[0].out, axes[1].out, w.shape[3]).astype(x.dtype, copy=False)]


@_k("Conv2DBackpropInput")
@_grouped
def _conv2d_backprop_input(xs, attrs):
    like, w, dy = np.asarray(xs[0]), np.asarray(xs[1]), np.asarray(xs[2])
    axes, k, s, d = _geometry("Conv2DBackpropInput", attrs, like.shape[1:3], w.shape[:2])
    cols = _rows(dy) @ _matrix(w).T
    cols = cols.reshape(*dy.shape[:3], k[0], k[1], w.shape[2])
    return [scatter_windows(cols, like.shape[1:3], axes, k, s, d).astype(like.dtype, copy=False)]


@_k("Conv2DBackpropFilter")
@_grouped
def _conv2d_backprop_filter(xs, attrs):
    x, like, dy = np.asarray(xs[0]), np.asarray(xs[1]), np.asarray(xs[2])
    axes, k, s, d = _geometry("Conv2DBackpropFilter", attrs, x.shape[1:3], like.shape[:2])
    cols = _im2col("Conv2DBackpropFilter", x, axes, k, s, d)
    dw = cols.T @ _rows(dy)
    return [dw.reshape(like.shape).astype(like.dtype, copy=False)]


def _lowest(dtype: np.dtype) -> Any:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


@_k("MaxPool")
def _max_pool(xs, attrs):
    x = np.asarray(xs[0])
    axes, k, s, d = _geometry("MaxPool", attrs, x.shape[1:3])
    p = patches(_pad(x, axes, _lowest(x.dtype)), axes, k, s, d)
    return [np.max(p, axis=(4, 5), initial=_lowest(x.dtype)).astype(x.dtype, copy=False)]


def first_argmax(p: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """The index (row-major in the window) of the first largest element inside the input of each
    window of ``p`` (N, OH, OW, C, KH, KW): TensorFlow's CPU kernel scans a window in that order and
    keeps an element only when a later one is strictly larger. Where a window holds NaN or only
    ``-inf``, the first element inside the input."""
    size = p.shape[4] * p.shape[5]  # not -1: numpy cannot infer it when the batch or the channels are empty
    flat = p.reshape(*p.shape[:4], size)
    ok = np.broadcast_to(valid.reshape(*valid.shape[:4], size), flat.shape)
    best = np.max(np.where(ok, flat, _lowest(p.dtype)), axis=-1, keepdims=True)
    hit = ok & (flat == best)
    hit = np.where(hit.any(axis=-1, keepdims=True), hit, ok)
    return np.argmax(hit, axis=-1)  # type: ignore[no-any-return]


@_k("MaxPoolGrad")
def _max_pool_grad(xs, attrs):
    x, dy = np.asarray(xs[0]), np.asarray(xs[2])
    axes, k, s, d = _geometry("MaxPoolGrad", attrs, x.shape[1:3])
    p = patches(_pad(x, axes, _lowest(x.dtype)), axes, k, s, d)
    valid = patches(_pad(np.ones((1, *x.shape[1:3], 1), bool), axes, False), axes, k, s, d)
    a = first_argmax(p, valid)  # (N, OH, OW, C)
    n, oh, ow, c = np.indices(a.shape, sparse=True)
    rows = oh * s[0] + a // k[1] - axes[0].before
    cols = ow * s[1] + a % k[1] - axes[1].before
    dx = np.zeros_like(x)
    np.add.at(dx, (n, rows, cols, c), dy)
    return [dx]


def _counts(hw: Sequence[int], axes: Any, k: Any, s: Any, d: Any, dtype: np.dtype) -> np.ndarray:
    """How many elements of each window lie inside the input, shape (1, OH, OW, 1)."""
    ones = _pad(np.ones((1, *hw, 1), dtype), axes, 0)
    return np.sum(patches(ones, axes, k, s, d), axis=(4, 5))  # type: ignore[no-any-return]


@_k("AvgPool")
def _avg_pool(xs, attrs):
    x = np.asarray(xs[0])
    axes, k, s, d = _geometry("AvgPool", attrs, x.shape[1:3])
    total = np.sum(patches(_pad(x, axes, 0), axes, k, s, d), axis=(4, 5))
    return [(total / _counts(x.shape[1:3], axes, k, s, d, x.dtype)).astype(x.dtype, copy=False)]


@_k("AvgPoolGrad")
def _avg_pool_grad(xs, attrs):
    like, dy = np.asarray(xs[0]), np.asarray(xs[1])
    axes, k, s, d = _geometry("AvgPoolGrad", attrs, like.shape[1:3])
    share = dy / _counts(like.shape[1:3], axes, k, s, d, dy.dtype)
    cols = np.broadcast_to(share[:, :, :, None, None, :], (*dy.shape[:3], k[0], k[1], dy.shape[3]))
    return [scatter_windows(cols, like.shape[1:3], axes, k, s, d).astype(like.dtype, copy=False)]


__all__ = ["WINDOW_KERNELS", "first_argmax", "patches", "scatter_windows"]
