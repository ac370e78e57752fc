"""Every gradient rule, checked against central finite differences and, where JAX can express the
primitive, against ``jax.grad`` — generated over all primitives of ``turnout.primitives``.

Why generated: a primitive added without a rule, or with a wrong one, must fail here rather than give
a silently wrong gradient. ``CASES`` holds one small program per primitive with a gradient rule, and
the first test checks that the cases cover exactly ``GRAD_RULES``; each primitive without a rule must
be declared in ``NON_DIFFERENTIABLE`` for a reason the last tests check where it can be checked
(integer or boolean outputs really are non-float).

Each case is ``(inputs, build, jax_fn)``: ``inputs`` are float64 arrays (chosen away from kinks and
ties, where a derivative is not defined), ``build(*placeholders)`` returns the output tensor (the
program must contain the primitive under test), ``jax_fn`` the same function in ``jax.numpy`` or None.
The loss is ``sum(w * out)`` with fixed random weights ``w``, so every output element matters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import turnout as tn
from turnout.gradients import rules as gr
from turnout.primitives import PRIMITIVES

jax.config.update("jax_enable_x64", True)
F = tn.float64
RNG = np.random.default_rng(7)

#: the attrs of a checkpoint primitive made by hand: four slots of 8 bytes under a budget of 32
CHECKPOINT_ATTRS = {"slots": 4, "loop": "l", "state_bytes": 8, "memory_budget": 32}


def _arr(*shape: int, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape)


def _away_from_zero(*shape: int) -> np.ndarray:
    a = _arr(*shape, lo=0.3, hi=1.2)
    return a * np.where(RNG.uniform(size=shape) < 0.5, -1.0, 1.0)


@dataclass
class Case:
    inputs: list[np.ndarray]
    build: Callable[..., Any]
    jax_fn: Optional[Callable[..., Any]] = None
    op: Optional[str] = None  # the primitive exercised, when the case key is not it
    fd_eps: float = 1e-6
    fd_rtol: float = 1e-5
    fast_unsupported: Optional[str] = None  # why the fast backend refuses this program (it must, clearly)


def _ta_unstack_stack(x: Any) -> Any:
    return tn.TensorArray(F, size=3).unstack(x).stack() * 2.0


def _ta_write(x: Any, y: Any) -> Any:
    ta = tn.TensorArray(F, size=2, element_shape=[2]).write(0, x * 3.0).write(1, y)
    return ta.stack()


def _ta_read(x: Any) -> Any:
    ta = tn.TensorArray(F, size=3).unstack(x)
    return ta.read(1) * ta.read(2)


def _ta_add(x: Any, y: Any) -> Any:
    g = x.graph
    a = tn.TensorArray(F, size=2).unstack(x).tensor
    b = tn.TensorArray(F, size=2).unstack(y * y).tensor
    s = g.create_node("TensorArrayAdd", [a, b]).outputs[0]
    return tn.TensorArray(_tensor=s).stack()


def _ta_accumulate(x: Any, v: Any) -> Any:
    g = x.graph
    ta = tn.TensorArray(F, size=3).unstack(x).tensor
    a = g.create_node("TensorArrayAccumulate", [ta, tn.constant(1), v * v]).outputs[0]
    b = g.create_node("TensorArrayAccumulate", [a, tn.constant(1), tn.tanh(v)]).outputs[0]
    return tn.TensorArray(_tensor=b).stack()


def _ta_read_or_zeros(x: Any) -> Any:
    g = x.graph
    ta = tn.TensorArray(F, size=3, element_shape=[2]).write(1, x * x).tensor
    shape = tn.constant(np.array([2], np.int32))
    r1 = g.create_node("TensorArrayReadOrZeros", [ta, tn.constant(1), shape], {"static_shape": [2]}).outputs[0]
    r0 = g.create_node("TensorArrayReadOrZeros", [ta, tn.constant(0), shape], {"static_shape": [2]}).outputs[0]
    return r1 + r0


def _ta_stack_or_zeros(x: Any) -> Any:
    g = x.graph
    ta = tn.TensorArray(F, size=3, element_shape=[2]).write(2, tn.tanh(x)).tensor
    shape = tn.constant(np.array([3, 2], np.int32))
    return g.create_node("TensorArrayStackOrZeros", [ta, shape], {"static_shape": [3, 2]}).outputs[0]


def _getitem_grad(x: Any, v: Any) -> Any:
    """GetItemGrad is GetItem's gradient: scatter ``v`` into zeros like ``x`` at ``x[1:3, 0]``."""
    y = x[1:3, 0]
    attrs = dict(y.node.attrs)
    return x.graph.create_node("GetItemGrad", [tn.zeros_like(x), v * x[0, 0]], attrs).outputs[0]


def _scatter_add_like(u: Any) -> Any:
    """ScatterAddLike is Gather's gradient: ``like`` gives only the shape (its gradient is None)."""
    idx = tn.constant(np.array([2, 0, 2], np.int32))
    like = tn.zeros([4, 2], F)
    return u.graph.create_node("ScatterAddLike", [like, idx, u * u], {"axis": 0}).outputs[0]


def _switch_merge(x: Any, y: Any) -> Any:
    """A hand-built conditional: Switch both values on x > y, compute per branch, Merge."""
    p = tn.reduce_sum(x) > tn.reduce_sum(y)
    xf, xt = tn.raw.switch(x, p)
    yf, yt = tn.raw.switch(y, p)
    out, _ = tn.raw.merge([xf * yf, tn.tanh(xt) + yt])
    return out


def _floor_mod_inputs() -> list[np.ndarray]:
    # x / y kept away from integers, where FloorMod jumps
    y = np.array([1.3, -0.7, 2.1, 0.9])
    q = np.array([1.25, -2.4, 0.6, 3.3])
    return [q * y, y]


#: the windows of the convolution cases: TensorFlow's uneven SAME padding, a stride and a dilation
CONV = {"strides": [2, 1], "dilations": [1, 2], "padding": "SAME"}
POOL = {"ksize": [2, 3], "strides": [2, 1], "padding": "SAME"}


def _jax_conv(x: Any, w: Any) -> Any:
    return jax.lax.conv_general_dilated(x, w, (2, 1), [(0, 0), (1, 1)], rhs_dilation=(1, 2),
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _window(op: str, attrs: dict[str, Any], *ins: Any) -> Any:
    return ins[0].graph.create_node(op, list(ins), attrs).outputs[0]


def _jax_pool(x: Any, init: float, reducer: Any) -> Any:
    return jax.lax.reduce_window(x, init, reducer, (1, 2, 3, 1), (1, 2, 1, 1), [(0, 0), (0, 0), (1, 1), (0, 0)])


def _jax_avg_pool(x: Any) -> Any:
    return _jax_pool(x, 0.0, jax.lax.add) / _jax_pool(jnp.ones_like(x), 0.0, jax.lax.add)


HAND_BUILT = ("fast backend: the gradient of a hand-built (tn.raw) Switch/Merge is a Switch on the Merge's "
              "value_index, which the fast backend cannot raise to a conditional")


SQ = 2, 3
CASES: dict[str, Case] = {
    "Identity": Case([_arr(*SQ)], lambda x: tn.identity(x), lambda x: x),
    "Sleep": Case([_arr(*SQ)], lambda x: tn.sleep(x * x, 0.001), lambda x: x * x),
    # the value's gradient passes through; the condition (on the same input) has none
    "Assert": Case([_arr(*SQ)], lambda x: tn.assert_true(tn.greater(tn.reduce_sum(x * x), -1.0), tn.tanh(x) * 2.0,
                                                          "a sum of squares is never negative"),
                   lambda x: jnp.tanh(x) * 2.0),
    "Neg": Case([_arr(*SQ)], lambda x: -x, lambda x: -x),
    "Add": Case([_arr(*SQ), _arr(3)], lambda x, y: x + y, lambda x, y: x + y),
    "Sub": Case([_arr(*SQ), _arr(1, 3)], lambda x, y: x - y, lambda x, y: x - y),
    "Mul": Case([_arr(*SQ), _arr(2, 1)], lambda x, y: x * y, lambda x, y: x * y),
    "Div": Case([_arr(*SQ), _away_from_zero(3)], lambda x, y: x / y, lambda x, y: x / y),
    "Pow": Case([_arr(*SQ, lo=0.5, hi=2.0), _arr(*SQ)], lambda x, y: tn.pow(x, y), lambda x, y: x**y),
    "FloorMod": Case(_floor_mod_inputs(), lambda x, y: tn.mod(x, y), lambda x, y: jnp.mod(x, y)),
    "Square": Case([_arr(*SQ)], tn.square, jnp.square),
    "Abs": Case([_away_from_zero(*SQ)], tn.abs, jnp.abs),
    "Relu": Case([_away_from_zero(*SQ)], tn.relu, jax.nn.relu),
    "Tanh": Case([_arr(*SQ)], tn.tanh, jnp.tanh),
    "Sigmoid": Case([_arr(*SQ)], tn.sigmoid, jax.nn.sigmoid),
    "Exp": Case([_arr(*SQ)], tn.exp, jnp.exp),
    "Log": Case([_arr(*SQ, lo=0.5, hi=2.0)], tn.log, jnp.log),
    "Sqrt": Case([_arr(*SQ, lo=0.5, hi=2.0)], tn.sqrt, jnp.sqrt),
    "Log1p": Case([_arr(*SQ, lo=-0.5, hi=2.0)], tn.log1p, jnp.log1p),
    "Expm1": Case([_arr(*SQ)], tn.expm1, jnp.expm1),
    "Erf": Case([_arr(*SQ, lo=-2.0, hi=2.0)], tn.erf, jax.scipy.special.erf),
    "Sin": Case([_arr(*SQ, lo=-3.0, hi=3.0)], tn.sin, jnp.sin),
    "Cos": Case([_arr(*SQ, lo=-3.0, hi=3.0)], tn.cos, jnp.cos),
    "Tan": Case([_arr(*SQ, lo=-1.2, hi=1.2)], tn.tan, jnp.tan),
    "Asin": Case([_arr(*SQ, lo=-0.8, hi=0.8)], tn.asin, jnp.arcsin),
    "Acos": Case([_arr(*SQ, lo=-0.8, hi=0.8)], tn.acos, jnp.arccos),
    "Atan": Case([_arr(*SQ, lo=-3.0, hi=3.0)], tn.atan, jnp.arctan),
    "Atan2": Case([_arr(*SQ, lo=-2.0, hi=2.0), _away_from_zero(1, 3)], tn.atan2, jnp.arctan2),
    "Sinh": Case([_arr(*SQ, lo=-2.0, hi=2.0)], tn.sinh, jnp.sinh),
    "Cosh": Case([_arr(*SQ, lo=-2.0, hi=2.0)], tn.cosh, jnp.cosh),
    "Asinh": Case([_arr(*SQ, lo=-3.0, hi=3.0)], tn.asinh, jnp.arcsinh),
    "Acosh": Case([_arr(*SQ, lo=1.2, hi=3.0)], tn.acosh, jnp.arccosh),
    "Atanh": Case([_arr(*SQ, lo=-0.8, hi=0.8)], tn.atanh, jnp.arctanh),
    "Erfc": Case([_arr(*SQ, lo=-2.0, hi=2.0)], tn.erfc, jax.scipy.special.erfc),
    "Lgamma": Case([_arr(*SQ, lo=0.3, hi=4.0)], tn.lgamma, jax.scipy.special.gammaln),
    "Cumsum": Case([_arr(3, 4)],
                   lambda x: tn.cumsum(x, axis=1) + tn.cumsum(x * x, axis=0, exclusive=True, reverse=True),
                   lambda x: jnp.cumsum(x, axis=1) + jnp.flip(jnp.cumsum(jnp.flip(x * x, 0), 0), 0) - x * x),
    "Cumprod": Case([_arr(3, 4, lo=0.5, hi=2.0)],
                    lambda x: tn.cumprod(x, axis=1) + tn.cumprod(x * x, axis=0, exclusive=True, reverse=True),
                    lambda x: jnp.cumprod(x, axis=1) + jnp.flip(jnp.cumprod(jnp.flip(x * x, 0), 0), 0) / (x * x)),
    "Prod": Case([np.array([[0.5, 0.0, -1.5], [2.0, 0.0, 0.7], [1.1, -0.3, 0.9], [0.0, 1.2, 2.0]])],
                 lambda x: tn.reduce_prod(x, axis=1) * tn.reduce_prod(x, axis=[0, 1], keepdims=True)[0]
                 + tn.reduce_sum(tn.reduce_prod(x, axis=-2)) + tn.reduce_prod(x + 1.0),
                 lambda x: jnp.prod(x, axis=1) * jnp.prod(x) + jnp.prod(x, axis=-2).sum() + jnp.prod(x + 1.0)),
    "Maximum": Case([np.array([0.1, 0.9, -0.4]), np.array([0.5, 0.2, -0.3])], tn.maximum, jnp.maximum),
    "Minimum": Case([np.array([0.1, 0.9, -0.4]), np.array([0.5, 0.2, -0.3])], tn.minimum, jnp.minimum),
    "Select": Case([_arr(*SQ), _arr(*SQ)], lambda x, y: tn.where(x > y, x * 2.0, y * y),
                   lambda x, y: jnp.where(x > y, x * 2.0, y * y)),
    "Cast": Case([_arr(*SQ)], lambda x: tn.cast(tn.cast(x, tn.float32) * 3.0, F) * x,
                 lambda x: (x.astype(jnp.float32) * 3.0).astype(jnp.float64) * x,
                 fd_eps=1e-3, fd_rtol=1e-3),  # float32 rounding: a larger step
    "MatMul": Case([_arr(2, 3), _arr(3, 4)], tn.matmul, jnp.matmul),
    "Reshape": Case([_arr(*SQ)], lambda x: tn.reshape(x, [3, 2]) * tn.constant(np.arange(6.0).reshape(3, 2)),
                    lambda x: jnp.reshape(x, (3, 2)) * jnp.arange(6.0).reshape(3, 2)),
    "ExpandDims": Case([_arr(*SQ)], lambda x: tn.expand_dims(x, 1),
                       lambda x: jnp.expand_dims(x, 1)),
    "Transpose": Case([_arr(2, 3, 4)], lambda x: tn.transpose(x, [2, 0, 1]), lambda x: jnp.transpose(x, (2, 0, 1))),
    "Concat": Case([_arr(2, 3), _arr(2, 2)], lambda x, y: tn.concat([x, y * y], axis=1),
                   lambda x, y: jnp.concatenate([x, y * y], axis=1)),
    "Pack": Case([_arr(3), _arr(3)], lambda x, y: tn.stack([x, y, x * y]), lambda x, y: jnp.stack([x, y, x * y])),
    "GetItem": Case([_arr(3, 4)], lambda x: x[1:, 2] * x[0, 0], lambda x: x[1:, 2] * x[0, 0]),
    "GetItemGrad": Case([_arr(3, 2), _arr(2)], _getitem_grad,
                        lambda x, v: jnp.zeros_like(x).at[1:3, 0].set(v * x[0, 0])),
    "Gather": Case([_arr(4, 2)], lambda x: tn.gather(x, tn.constant(np.array([3, 0, 3], np.int32))),
                   lambda x: x[jnp.array([3, 0, 3])]),
    "ScatterAddLike": Case([_arr(3, 2)], _scatter_add_like,
                           lambda u: jnp.zeros((4, 2)).at[jnp.array([2, 0, 2])].add(u * u)),
    "UpdateSlot": Case([_arr(4, 2), _arr(2)], lambda x, v: tn.update_slot(x, -2, v * v),
                       lambda x, v: x.at[2].set(v * v)),
    "Tile": Case([_arr(2, 3)], lambda x: tn.tile(x, [2, 3]), lambda x: jnp.tile(x, (2, 3))),
    "Sum": Case([_arr(2, 3, 2)], lambda x: tn.reduce_sum(x, axis=[0, 2]), lambda x: jnp.sum(x, axis=(0, 2))),
    "Mean": Case([_arr(2, 3)], lambda x: tn.reduce_mean(x, axis=1, keepdims=True),
                 lambda x: jnp.mean(x, axis=1, keepdims=True)),
    "Max": Case([np.array([[0.1, 0.7, -0.2], [0.4, -0.9, 0.3]])], lambda x: tn.reduce_max(x, axis=1),
                lambda x: jnp.max(x, axis=1)),
    "ReshapeTo": Case([_arr(2, 3)], lambda x: x.graph.create_node(
        "ReshapeTo", [x, tn.shape(tn.transpose(x))]).outputs[0] * tn.constant(np.arange(6.0).reshape(3, 2)),
        lambda x: jnp.reshape(x, (3, 2)) * jnp.arange(6.0).reshape(3, 2)),
    "TopK": Case([np.array([[0.1, 0.7, -0.2, 0.5], [0.4, -0.9, 0.3, 0.8]])],
                 lambda x: x.graph.create_node("TopK", [x], {"k": 2}).outputs[0],
                 lambda x: jax.lax.top_k(x, 2)[0]),
    "ReverseSequence": Case([_arr(2, 4, 3)], lambda x: x.graph.create_node(
        "ReverseSequence", [x, tn.constant(np.asarray([3, 1], np.int32))], {"seq_axis": 1, "batch_axis": 0}
    ).outputs[0], lambda x: jnp.stack([x[0, jnp.asarray([2, 1, 0, 3])], x[1]])),
    "Min": Case([np.array([[0.1, 0.7, -0.2], [0.4, -0.9, 0.3]])], lambda x: tn.reduce_min(x, axis=1),
                lambda x: jnp.min(x, axis=1)),
    "Fill": Case([np.array(0.7)], lambda x: tn.fill([2, 3], x) * tn.constant(np.arange(6.0).reshape(2, 3)),
                 lambda x: jnp.full((2, 3), x) * jnp.arange(6.0).reshape(2, 3)),
    "BroadcastLike": Case([_arr(3), _arr(2, 3)], lambda x, y: tn.broadcast_like(x, y) * y,
                          lambda x, y: jnp.broadcast_to(x, (2, 3)) * y),
    "SumToLike": Case([_arr(2, 3), _arr(1, 3)], lambda x, y: tn.sum_to_like(x * x, y) * y,
                      lambda x, y: jnp.sum(x * x, axis=0, keepdims=True) * y),
    "Switch": Case([_arr(3), _arr(3)], _switch_merge, fast_unsupported=HAND_BUILT),
    "Merge": Case([_arr(3) + 2.0, _arr(3)], _switch_merge, fast_unsupported=HAND_BUILT),
    "TensorArrayUnstack": Case([_arr(3, 2)], _ta_unstack_stack, lambda x: x * 2.0),
    "TensorArrayStack": Case([_arr(3, 2)], _ta_unstack_stack, lambda x: x * 2.0),
    "TensorArrayWrite": Case([_arr(2), _arr(2)], _ta_write, lambda x, y: jnp.stack([x * 3.0, y])),
    "TensorArrayRead": Case([_arr(3, 2)], _ta_read, lambda x: x[1] * x[2]),
    "TensorArrayAdd": Case([_arr(2, 3), _arr(2, 3)], _ta_add, lambda x, y: x + y * y),
    "TensorArrayAccumulate": Case([_arr(3, 2), _arr(2)], _ta_accumulate,
                                  lambda x, v: x.at[1].add(v * v + jnp.tanh(v))),
    "TensorArrayReadOrZeros": Case([_arr(2)], _ta_read_or_zeros, lambda x: x * x),
    # windows: x is (1, 4, 3, 2), the filter (2, 2, 2, 3), the convolution's output (1, 2, 3, 3)
    "Conv2D": Case([_arr(1, 4, 3, 2), _arr(2, 2, 2, 3)], lambda x, w: tn.conv2d(x, w, [2, 1], "SAME", dilations=[1, 2]),
                   _jax_conv),
    "Conv2DBackpropInput": Case([_arr(2, 2, 2, 3), _arr(1, 2, 3, 3)],
                                lambda w, dy: _window("Conv2DBackpropInput", CONV, tn.zeros([1, 4, 3, 2], F), w, dy),
                                lambda w, dy: jax.vjp(lambda x: _jax_conv(x, w), jnp.zeros((1, 4, 3, 2)))[1](dy)[0]),
    "Conv2DBackpropFilter": Case([_arr(1, 4, 3, 2), _arr(1, 2, 3, 3)],
                                 lambda x, dy: _window("Conv2DBackpropFilter", CONV, x, tn.zeros([2, 2, 2, 3], F), dy),
                                 lambda x, dy: jax.vjp(lambda w: _jax_conv(x, w), jnp.zeros((2, 2, 2, 3)))[1](dy)[0]),
    # distinct values, so no window has a tie (a max's derivative is not defined there)
    "MaxPool": Case([RNG.permutation(24).reshape(1, 4, 3, 2) / 10.0], lambda x: tn.max_pool(x, [2, 3], [2, 1], "SAME"),
                    lambda x: _jax_pool(x, -jnp.inf, jax.lax.max)),
    "AvgPool": Case([_arr(1, 4, 3, 2)], lambda x: tn.avg_pool(x, [2, 3], [2, 1], "SAME"), _jax_avg_pool),
    "AvgPoolGrad": Case([_arr(1, 2, 3, 2)], lambda dy: _window("AvgPoolGrad", POOL, tn.zeros([1, 4, 3, 2], F), dy * dy),
                        lambda dy: jax.vjp(_jax_avg_pool, jnp.zeros((1, 4, 3, 2)))[1](dy * dy)[0]),
    # linear algebra, of well-conditioned matrices (3 on the diagonal); the Cholesky case symmetrises its
    # input, as the factor's gradient is TensorFlow's symmetric one
    "MatrixInverse": Case([_arr(2, 3, 3)], lambda x: tn.linalg.inv(x + 3.0 * tn.constant(np.eye(3)))
                          + tn.linalg.inv(x + 3.0 * tn.constant(np.eye(3)), adjoint=True) * 2.0,
                          lambda x: jnp.linalg.inv(x + 3.0 * jnp.eye(3))
                          + jnp.linalg.inv(jnp.swapaxes(x, -1, -2) + 3.0 * jnp.eye(3)) * 2.0),
    "Cholesky": Case([_arr(3, 3)],
                     lambda x: tn.linalg.cholesky((x + tn.transpose(x)) * 0.5 + 3.0 * tn.constant(np.eye(3))),
                     lambda x: jnp.linalg.cholesky((x + x.T) * 0.5 + 3.0 * jnp.eye(3))),
    "MatrixTriangularSolve": Case([_arr(2, 3, 3), _arr(3, 2)], lambda a, b: tn.linalg.triangular_solve(
        a + 3.0 * tn.constant(np.eye(3)), b) + tn.linalg.triangular_solve(a + 3.0 * tn.constant(np.eye(3)), b * b,
                                                                          lower=False, adjoint=True),
        lambda a, b: jax.scipy.linalg.solve_triangular(a + 3.0 * jnp.eye(3), jnp.broadcast_to(b, (2, 3, 2)), lower=True)
        + jax.scipy.linalg.solve_triangular(a + 3.0 * jnp.eye(3), jnp.broadcast_to(b * b, (2, 3, 2)), lower=False,
                                            trans=1)),
    "MatrixSolve": Case([_arr(2, 3, 3), _arr(2, 3, 2)], lambda a, b: tn.linalg.solve(
        a + 3.0 * tn.constant(np.eye(3)), b) + tn.linalg.solve(a + 3.0 * tn.constant(np.eye(3)), b * b, adjoint=True),
        lambda a, b: jnp.linalg.solve(a + 3.0 * jnp.eye(3), b)
        + jnp.linalg.solve(jnp.swapaxes(a, -1, -2) + 3.0 * jnp.eye(3), b * b)),
    "MatrixDeterminant": Case([_arr(2, 3, 3)], lambda x: tn.linalg.det(x + 2.0 * tn.constant(np.eye(3))),
                              lambda x: jnp.linalg.det(x + 2.0 * jnp.eye(3))),
    "LogMatrixDeterminant": Case([_arr(2, 3, 3)], lambda x: tn.linalg.slogdet(x + 2.0 * tn.constant(np.eye(3)))[1],
                                 lambda x: jnp.linalg.slogdet(x + 2.0 * jnp.eye(3))[1]),
    "TensorArrayStackOrZeros": Case([_arr(2)], _ta_stack_or_zeros,
                                    lambda x: jnp.zeros((3, 2)).at[2].set(jnp.tanh(x))),
}

#: rules checked elsewhere, with where and why not here
ELSEWHERE = {
    "PreventGradient": "a rule that refuses, by design: tests/test_prevent_gradient.py checks the refusal, on "
                       "every path through it, and the gradients of the paths around it",
    "ReadVariable": "the gradient w.r.t. a Variable (tests/test_variables.py, tests/test_train.py): a read of "
                    "state has no input array to perturb",
    "StackPop": "a pop exists only in a backward loop: its rule is what makes second-order gradients through "
                "loops, checked against jax.grad(jax.grad(...)) in tests/test_gradients_second_order.py",
}


def test_cases_cover_every_gradient_rule() -> None:
    assert set(CASES) | set(ELSEWHERE) == set(gr.GRAD_RULES), (
        f"missing: {sorted(set(gr.GRAD_RULES) - set(CASES) - set(ELSEWHERE))}; "
        f"stale: {sorted(set(CASES) - set(gr.GRAD_RULES))}"
    )


def test_every_primitive_without_a_rule_has_a_reason() -> None:
    for name in PRIMITIVES:
        if name in gr.GRAD_RULES or name in gr.STRUCTURED or name in gr.UNSUPPORTED:
            continue
        assert name in gr.NON_DIFFERENTIABLE, f"{name}: no gradient rule and no reason"
        assert isinstance(gr.NON_DIFFERENTIABLE[name], str) and gr.NON_DIFFERENTIABLE[name]
        assert not PRIMITIVES[name].differentiable, f"{name} is declared differentiable in turnout.primitives"


def _integer_output_examples(x: Any) -> dict[str, Any]:
    ta = tn.TensorArray(F, size=2).unstack(tn.stack([x, x]))
    b = x > 0.0
    return {
        "Less": x < 1.0, "LessEqual": x <= 1.0, "Greater": x > 1.0, "GreaterEqual": x >= 1.0,
        "Equal": tn.equal(x, 1.0), "NotEqual": tn.not_equal(x, 1.0),
        "LogicalAnd": tn.logical_and(b, b), "LogicalOr": tn.logical_or(b, b), "LogicalNot": tn.logical_not(b),
        "All": tn.reduce_all(b), "Any": tn.reduce_any(b),
        "ArgMax": x.graph.create_node("ArgMax", [x], {"axis": 0, "dtype": "int64"}).outputs[0],
        "ArgMin": x.graph.create_node("ArgMin", [x], {"axis": 0, "dtype": "int32"}).outputs[0],
        "Shape": tn.shape(x), "Size": tn.size(x), "TensorArraySize": ta.size(),
        "LoopCond": tn.raw.loop_cond(tn.reduce_sum(x) > 0.0),
        "CheckpointTrips": x.graph.create_node("CheckpointTrips", [tn.size(x)], CHECKPOINT_ATTRS).outputs[0],
    }


def test_integer_output_reasons_hold() -> None:
    """A primitive declared non-differentiable for its integer or boolean outputs gives no float output
    even from float inputs."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(F, [3], name="x")
        ex = _integer_output_examples(x)
    declared = {n for n, why in gr.NON_DIFFERENTIABLE.items() if why == gr.INTEGER_OUTPUTS}
    assert declared == set(ex)
    for name, t in ex.items():
        assert t.node.op == name
        assert not any(o.dtype.is_floating for o in t.node.outputs), name


def _ops_of(g: tn.Graph) -> set[str]:
    return {n.op for n in g.nodes}


def _build(case: Case) -> tuple[tn.Graph, list[Any], Any, Any, list[Any]]:
    g = tn.Graph()
    with g.as_default():
        phs = [tn.placeholder(F, list(a.shape), name=f"x{i}") for i, a in enumerate(case.inputs)]
        out = case.build(*phs)
        w = tn.placeholder(F, None, name="w")
        loss = tn.reduce_sum(out * w)
        grads = tn.gradients(loss, phs)
    return g, phs, out, loss, grads


def _fd(sess: tn.Session, phs: list[Any], loss: Any, inputs: list[np.ndarray], w_feed: Any,
        eps: float = 1e-6) -> list[np.ndarray]:
    out = []
    for k, a in enumerate(inputs):
        d = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            vals = []
            for s in (1.0, -1.0):
                b = a.copy()
                b[idx] += s * eps
                feeds = {p: v for p, v in zip(phs, inputs, strict=True)}
                feeds[phs[k]] = b
                feeds.update(w_feed)
                vals.append(sess.run(loss, feed_dict=feeds))
            d[idx] = (vals[0] - vals[1]) / (2 * eps)
        out.append(d)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_rule_matches_finite_differences_and_jax(name: str, backend: str) -> None:
    case = CASES[name]
    g, phs, out, loss, grads = _build(case)
    assert (case.op or name) in _ops_of(g), f"the case for {name} does not use it"
    for p, d in zip(phs, grads, strict=True):
        assert d is not None, f"{name}: no gradient for {p.name}"
    feeds = {p: v for p, v in zip(phs, case.inputs, strict=True)}
    w_ph = next(n.outputs[0] for n in g.nodes if n.name == "w")
    out_shape = np.shape(tn.Session(g, backend="reference").run(out, feed_dict=feeds))
    w = np.random.default_rng(1).uniform(0.5, 1.5, out_shape)
    w_feed = {w_ph: w}
    if backend == "fast" and case.fast_unsupported is not None:
        # not compiled (fallback=False says so); by default it runs on the interpreter instead
        with pytest.raises(tn.UnsupportedError):
            tn.Session(g, backend=backend, fallback=False).run(grads, feed_dict={**feeds, **w_feed})
        with pytest.warns(RuntimeWarning, match="reference interpreter"):
            got = tn.Session(g, backend=backend).run(grads, feed_dict={**feeds, **w_feed})
        want = tn.Session(g, backend="reference").run(grads, feed_dict={**feeds, **w_feed})
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        return
    got = tn.Session(g, backend=backend).run(grads, feed_dict={**feeds, **w_feed})
    if backend == "reference":
        fd = _fd(tn.Session(g, backend="reference"), phs, loss, case.inputs, w_feed, case.fd_eps)
        for k, (a, b) in enumerate(zip(got, fd, strict=True)):
            np.testing.assert_allclose(a, b, rtol=case.fd_rtol, atol=case.fd_rtol * 0.1,
                                       err_msg=f"{name}: input {k} vs finite differences")
    if case.jax_fn is not None:
        def f(*xs: Any) -> Any:
            return jnp.sum(case.jax_fn(*xs) * w)  # type: ignore[misc]

        ref = jax.grad(f, argnums=tuple(range(len(case.inputs))))(*[jnp.asarray(a) for a in case.inputs])
        for k, (a, b) in enumerate(zip(got, ref, strict=True)):
            np.testing.assert_allclose(a, np.asarray(b), rtol=1e-9, atol=1e-12,
                                       err_msg=f"{name}: input {k} vs jax.grad")
