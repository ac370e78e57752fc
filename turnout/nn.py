"""``tn.nn``: TensorFlow's ``tf.nn`` functions that are compositions of primitives (``softmax``,
``log_softmax``, ``dropout``).

Why a namespace of its own: TensorFlow programs call them as ``tf.nn.softmax``, so a port changes
only the module prefix. Each is a construction shared with the GraphDef import rule of the same
TensorFlow op (``turnout.composite``).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from turnout.arguments import checked
from turnout.array_ops import normalize_axis
from turnout.composite import GraphMaker, Maker
from turnout.errors import ArgumentError, DTypeError, ShapeError
from turnout.graph import Tensor
from turnout.ops import convert_to_tensor, int_attr


def log_softmax_parts(m: Maker, x: Tensor, axis: int) -> tuple[Tensor, Tensor]:
    """``(x - max(x), log(sum(exp(x - max(x)))))`` over ``axis`` (the sum kept as an axis). Why the
    shift: ``exp`` of a large logit overflows, and the shift changes neither result. The max is a
    constant to the gradient (``StopGradient``): the shift cancels, so its gradient is zero by the
    algebra, and this makes it zero exactly."""
    top = m.create("Max", [x], {"axis": [axis], "keepdims": True}, suffix="max").outputs[0]
    shifted = m.create("Sub", [x, m.create("StopGradient", [top], suffix="max_const").outputs[0]],
                       suffix="shifted").outputs[0]
    total = m.create("Sum", [m.create("Exp", [shifted], suffix="exp").outputs[0]], {"axis": [axis], "keepdims": True},
                     suffix="sum").outputs[0]
    return shifted, m.create("Log", [total], suffix="log_sum").outputs[0]


def softmax_part(m: Maker, x: Tensor, axis: int) -> Tensor:
    """``exp(x - max(x) - log(sum(exp(x - max(x)))))``: each entry in (0, 1], summing to 1 on ``axis``."""
    shifted, log_total = log_softmax_parts(m, x, axis)
    return m.create("Exp", [m.create("Sub", [shifted, log_total], suffix="log_softmax").outputs[0]]).outputs[0]


def log_softmax_part(m: Maker, x: Tensor, axis: int) -> Tensor:
    """``x - max(x) - log(sum(exp(x - max(x))))``, finite wherever ``x`` is."""
    shifted, log_total = log_softmax_parts(m, x, axis)
    return m.create("Sub", [shifted, log_total]).outputs[0]


def _floating(x: Any, fn: str, axis: int) -> tuple[Tensor, int]:
    t = convert_to_tensor(x)
    if not t.dtype.is_floating:
        raise DTypeError(f"{fn}: x must be floating, got {t.dtype.name}")
    ax = int_attr(axis, fn, "axis")
    if t.shape is not None:
        ax = normalize_axis(ax, len(t.shape), fn)
    return t, ax


@checked
def softmax(x: Any, axis: int = -1, name: Optional[str] = None) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``axis``, as ``tf.nn.softmax``, computed after subtracting the
    largest entry so that large logits do not overflow."""
    t, ax = _floating(x, "softmax", axis)
    return softmax_part(GraphMaker(t.graph, name, "softmax"), t, ax)


@checked
def log_softmax(x: Any, axis: int = -1, name: Optional[str] = None) -> Tensor:
    """``x - log(sum(exp(x)))`` along ``axis``, as ``tf.nn.log_softmax``: finite even where
    ``softmax`` underflows to 0 (the largest entry is subtracted first)."""
    t, ax = _floating(x, "log_softmax", axis)
    return log_softmax_part(GraphMaker(t.graph, name, "log_softmax"), t, ax)


@checked
def dropout(x: Any, rate: Any = None, keep_prob: Any = None, noise_shape: Any = None, seed: Optional[int] = None,
            name: Optional[str] = None) -> Tensor:
    """``x`` with each element kept with probability ``1 - rate`` (scaled by ``1 / (1 - rate)``) and
    zeroed otherwise, a new mask at each execution: ``tf.nn.dropout``. The mask is
    ``tn.random.uniform(noise_shape) >= rate`` (TensorFlow's draw, bit for bit; ``noise_shape``
    defaults to ``x``'s shape and broadcasts against it), so the result is
    ``x * (1 / (1 - rate)) * cast(mask)`` and its gradient the upstream gradient times the same.
    Give ``rate`` or TensorFlow 1's ``keep_prob`` (``rate = 1 - keep_prob``), a number in [0, 1)
    in ``x``'s dtype or a float scalar tensor (checked when it runs); ``noise_shape`` must broadcast
    to ``x``'s shape."""
    from turnout import random as tr
    from turnout.ops import assert_true, cast, convert_to_tensor, logical_and, shape

    who = name or "dropout"
    t = convert_to_tensor(x)
    if not t.dtype.is_floating:
        raise DTypeError(f"{who}: x must be floating, got {t.dtype.name}")
    if (rate is None) == (keep_prob is None):
        raise ArgumentError(f"{who}: give exactly one of rate and keep_prob")
    given, what = (rate, "rate") if rate is not None else (keep_prob, "keep_prob")
    if not isinstance(given, Tensor):
        if isinstance(given, bool) or not isinstance(given, (int, float, np.integer, np.floating)):
            raise ArgumentError(f"{who}: {what} must be a number or a float scalar tensor, got {given!r}")
        r = float(given) if rate is not None else 1.0 - float(given)
        if not 0.0 <= r < 1.0 or not t.dtype.numpy(r) < 1:  # (0.999999999 is 1 in float32)
            raise ArgumentError(f"{who}: {what} must give a rate in [0, 1) in {t.dtype.name}, got {what}={given!r}")
        p = convert_to_tensor(r, t.dtype)
    else:
        if given.dtype != t.dtype or (given.shape is not None and given.shape != ()):
            raise ArgumentError(f"{who}: {what} must be a {t.dtype.name} scalar, got a {given.dtype.name} tensor "
                                f"of shape {given.shape}")
        p = given if rate is not None else 1.0 - given
        p = assert_true(logical_and(p >= 0.0, p < 1.0), p, f"{who}: the rate must lie in [0, 1)", [p])
    if noise_shape is None:
        noise_shape = list(t.shape) if t.shape is not None and None not in t.shape else shape(t)
    u = tr.uniform(noise_shape, dtype=t.dtype, seed=seed, name=f"{who}/random_uniform")
    out = t * (1.0 / (1.0 - p)) * cast(u >= p, t.dtype)
    _check_noise_shape(out, t, noise_shape, who)
    return out


def _check_noise_shape(out: Tensor, x: Tensor, noise_shape: Any, who: str) -> None:
    """Refuse a ``noise_shape`` that broadcasts ``x`` to another shape (of higher rank, or a size 1 of
    ``x`` where the mask has more): the result is ``x``'s shape, as TensorFlow's ``set_shape`` holds
    it. (A size of ``x`` known only when it runs is taken on trust.)"""
    from turnout import shapes as sh

    if out.shape is None or x.shape is None:
        return
    if not sh.compatible(out.shape, x.shape):
        raise ShapeError(f"{who}: noise_shape {noise_shape!r} does not broadcast to x's shape {list(x.shape)}")


__all__ = ["dropout", "log_softmax", "log_softmax_part", "log_softmax_parts", "softmax", "softmax_part"]
