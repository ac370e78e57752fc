"""Import rules of TensorFlow's element-wise math and activation ops (``Softsign``, ``Xlogy``,
``Xdivy``, ``MulNoNan``, ``Rint`` among them), of the gradient ops
``tf.gradients`` emits for them (``RsqrtGrad``, ``EluGrad``, ...), and of the truncating divisions.

Each rule is the formula TensorFlow's CPU kernel evaluates, written with Turnout primitives in the
kernel's order (``Elu`` is ``exp(x) - 1`` below zero, not ``expm1``, because TensorFlow's is), so the
imported graph computes TensorFlow's numbers. The ops with a Turnout primitive of their own
(``Log1p``, ``Erf``, ``Floor``, ...) are one node each (``import_rules``). Why a module of its own:
``import_rules`` holds the structural rules; these are one formula each and share nothing with them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout.array_ops import clip_part
from turnout.errors import UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef.import_context import ImportContext, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs, _Formula, _t
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)


def _floating(ctx: ImportContext, x: Tensor) -> _Formula:
    """The formula builder of a rule whose TensorFlow kernel exists for floating types only (or
    whose integer form, like ``Reciprocal``'s truncating ``1 / x``, Turnout does not compute)."""
    if not x.dtype.is_floating:
        raise UnsupportedError(f"{ctx.where()}: supported for floating inputs only, got {x.dtype.name}")
    return _Formula(ctx, x)


def _select(ctx: ImportContext, cond: Tensor, a: Tensor, b: Tensor) -> Outs:
    return [ctx.create("Select", [cond, a, b]).outputs[0]]


def _zero_where_dy_is(ctx: ImportContext, f: _Formula, dy: Tensor, grad: Tensor) -> Outs:
    """``grad``, but 0 where the incoming gradient ``dy`` is 0: TensorFlow's ``SqrtGrad``,
    ``RsqrtGrad`` and ``ReciprocalGrad`` kernels give 0 there whatever the forward output is, so the
    gradient of ``where(x > 0, sqrt(x), x)`` at a negative x is finite (``0 * 0.5 / nan`` would be
    NaN, and the NaN would reach the taken side's sum)."""
    return _select(ctx, f.op("Equal", dy, 0.0), f.op("ZerosLike", dy), grad)


# ---- powers and reciprocals -------------------------------------------------------------------------
@_rule("Rsqrt")
def _rsqrt(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    x = _t(ins[0])
    f = _floating(ctx, x)
    return [ctx.create("Div", [f.c(1.0), f.op("Sqrt", x)]).outputs[0]]


@_rule("RsqrtGrad")
def _rsqrt_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``-0.5 * (dy * y) * (y * y)`` from the forward output y (TensorFlow's order), 0 where dy is."""
    y, dy = _t(ins[0]), _t(ins[1])
    f = _floating(ctx, y)
    return _zero_where_dy_is(ctx, f, dy, f.op("Mul", f.op("Mul", -0.5, f.op("Mul", dy, y)), f.op("Mul", y, y)))


@_rule("SqrtGrad")
def _sqrt_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``0.5 * dy / y`` from the forward output y, 0 where dy is."""
    y, dy = _t(ins[0]), _t(ins[1])
    f = _floating(ctx, y)
    return _zero_where_dy_is(ctx, f, dy, f.op("Div", f.op("Mul", 0.5, dy), y))


@_rule("Reciprocal", "Inv")
def _reciprocal(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    x = _t(ins[0])
    f = _floating(ctx, x)
    return [ctx.create("Div", [f.c(1.0), x]).outputs[0]]


@_rule("ReciprocalGrad", "InvGrad")
def _reciprocal_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``-dy * y * y`` from the forward output y, 0 where dy is."""
    y, dy = _t(ins[0]), _t(ins[1])
    f = _floating(ctx, y)
    return _zero_where_dy_is(ctx, f, dy, f.op("Mul", f.op("Mul", f.op("Neg", dy), y), y))


@_rule("Round")
def _round(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Turnout's Round (half to even); of an integer, TensorFlow's Round is the value itself."""
    x = _t(ins[0])
    return [ctx.create("Round" if x.dtype.is_floating else "Identity", [x]).outputs[0]]


@_rule("SquaredDifference")
def _squared_difference(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    d = ctx.create("Sub", ins[:2], suffix="difference").outputs[0]
    return [ctx.create("Mul", [d, d]).outputs[0]]


@_rule("DivNoNan")
def _div_no_nan(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``0 where y == 0, else x / y``; the division reads 1 where y is 0, so no inf or NaN is made."""
    x, y = _t(ins[0]), _t(ins[1])
    f = _floating(ctx, x)
    zero = f.op("Equal", y, 0.0)
    q = f.op("Div", x, ctx.create("Select", [zero, f.op("OnesLike", y), y], suffix="safe").outputs[0])
    return _select(ctx, zero, f.op("ZerosLike", q), q)


@_rule("IsFinite")
def _is_finite(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``x - x == 0``: 0 for every finite x, NaN for an infinity or a NaN."""
    x = _t(ins[0])
    f = _floating(ctx, x)
    return [ctx.create("Equal", [f.op("Sub", x, x), f.op("ZerosLike", x)]).outputs[0]]


@_rule("IsNan")
def _is_nan(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``x != x``, as ``tn.is_nan``: NaN alone is unequal to itself."""
    x = _t(ins[0])
    _floating(ctx, x)
    return [ctx.create("NotEqual", [x, x]).outputs[0]]


@_rule("IsInf")
def _is_inf(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``not (is_nan(x) or is_finite(x))``, as ``tn.is_inf``."""
    x = _t(ins[0])
    f = _floating(ctx, x)
    nan = ctx.create("NotEqual", [x, x], suffix="nan").outputs[0]
    finite = ctx.create("Equal", [f.op("Sub", x, x), f.op("ZerosLike", x)], suffix="finite").outputs[0]
    either = ctx.create("LogicalOr", [nan, finite], suffix="either").outputs[0]
    return [ctx.create("LogicalNot", [either]).outputs[0]]


@_rule("L2Loss")
def _l2_loss(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``sum(x^2 * 0.5)`` (TensorFlow halves each square, then sums)."""
    x = _t(ins[0])
    f = _floating(ctx, x)
    return [ctx.create("Sum", [f.op("Mul", f.op("Square", x), 0.5)], {"axis": None, "keepdims": False}).outputs[0]]


@_rule("ClipByValue")
def _clip_by_value(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``max(min(t, hi), lo)``, TensorFlow's order (it decides where lo > hi), as ``tn.clip_by_value``."""
    t, lo, hi = (_t(v) for v in ins[:3])
    return [clip_part(ctx, t, lo, hi)]


# ---- activations ------------------------------------------------------------------------------------
@_rule("Relu6")
def _relu6(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``min(6, max(0, x))``, the bounds first: a tie's gradient goes to a ``Maximum``'s or
    ``Minimum``'s first input, so x gets none at 0 and at 6, as TensorFlow's ``Relu6Grad`` gives
    (``0 < x < 6``); a NaN stays NaN."""
    x = _t(ins[0])
    f = _Formula(ctx, x)
    return [ctx.create("Minimum", [f.c(6), f.op("Maximum", f.c(0), x)]).outputs[0]]


@_rule("Relu6Grad")
def _relu6_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """dy where 0 < x < 6 (x: the forward input, or its output, as tf.gradients passes it)."""
    dy, x = _t(ins[0]), _t(ins[1])
    f = _Formula(ctx, x)
    inside = f.op("LogicalAnd", f.op("Greater", x, 0), f.op("Less", x, 6))
    return _select(ctx, inside, dy, f.op("ZerosLike", dy))


def _alpha(ctx: ImportContext, f: _Formula) -> Tensor:
    return f.c(float(ctx.attr("alpha", 0.2)))


@_rule("LeakyRelu")
def _leaky_relu(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``x where x > 0, else x * alpha``."""
    x = _t(ins[0])
    f = _floating(ctx, x)
    return _select(ctx, f.op("Greater", x, 0.0), x, f.op("Mul", x, _alpha(ctx, f)))


@_rule("LeakyReluGrad")
def _leaky_relu_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    dy, x = _t(ins[0]), _t(ins[1])
    f = _floating(ctx, x)
    return _select(ctx, f.op("Greater", x, 0.0), dy, f.op("Mul", dy, _alpha(ctx, f)))


#: SELU's constants, as TensorFlow's kernel writes them
_SELU_SCALE, _SELU_SCALE_ALPHA = 1.0507009873554804934193349852946, 1.7580993408473768599402175208123


@_rule("Elu", "Selu")
def _elu(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``exp(x) - 1`` below zero, else x; SELU scales the two sides (TensorFlow's kernels). The
    exponential reads ``min(x, 0)``: the side not taken above zero never overflows, so its zero
    gradient times ``exp(x)`` is never ``0 * inf`` (a NaN gradient at x = 89 in float32)."""
    x = _t(ins[0])
    f = _floating(ctx, x)
    neg, below = f.op("Less", x, 0.0), f.op("Sub", f.op("Exp", f.op("Minimum", x, 0.0)), 1.0)
    if nd.op == "Selu":
        return _select(ctx, neg, f.op("Mul", _SELU_SCALE_ALPHA, below), f.op("Mul", _SELU_SCALE, x))
    return _select(ctx, neg, below, x)


@_rule("EluGrad", "SeluGrad")
def _elu_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """From the forward output y: ``dy * (y + 1)`` below zero, else dy (SELU: ``dy * (y + scale *
    alpha)``, else ``dy * scale``)."""
    dy, y = _t(ins[0]), _t(ins[1])
    f = _floating(ctx, y)
    neg = f.op("Less", y, 0.0)
    if nd.op == "SeluGrad":
        return _select(ctx, neg, f.op("Mul", dy, f.op("Add", y, _SELU_SCALE_ALPHA)), f.op("Mul", dy, _SELU_SCALE))
    return _select(ctx, neg, f.op("Mul", f.op("Add", y, 1.0), dy), dy)


@_rule("Softplus")
def _softplus(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """TensorFlow's kernel: x above ``-t``, ``exp(x)`` below ``t``, else ``log1p(exp(x))``, with
    ``t = log(eps) + 2`` of the dtype (where the other two forms are already exact). The
    exponential reads ``min(x, -t)``, what the two forms below ``-t`` need: above, it never
    overflows, so the zero gradient of the side not taken is never ``0 * inf`` (a NaN gradient at
    large x; TensorFlow's is 1)."""
    x = _t(ins[0])
    f = _floating(ctx, x)
    t = float(np.log(np.finfo(x.dtype.numpy).eps) + 2)
    e = f.op("Exp", f.op("Minimum", x, -t))
    small = ctx.create("Select", [f.op("Less", x, t), e, f.op("Log1p", e)], suffix="small").outputs[0]
    return _select(ctx, f.op("Greater", x, -t), x, small)


@_rule("SoftplusGrad")
def _softplus_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``dy / (exp(-x) + 1)`` from the forward input x."""
    dy, x = _t(ins[0]), _t(ins[1])
    f = _floating(ctx, x)
    return [ctx.create("Div", [dy, f.op("Add", f.op("Exp", f.op("Neg", x)), 1.0)]).outputs[0]]


# ---- truncating division ----------------------------------------------------------------------------
def _truncation_fix(f: _Formula, x: Tensor, y: Tensor, r: Tensor) -> Tensor:
    """Where a floored division and a truncated one differ: a remainder, and operands of opposite signs."""
    return f.op("LogicalAnd", f.op("NotEqual", r, 0), f.op("NotEqual", f.op("Less", x, 0), f.op("Less", y, 0)))


@_rule("TruncateDiv")
def _truncate_div(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``x / y`` rounded toward zero. Floats: the ceiling of a negative quotient, else its floor;
    integers: Turnout's Div floors, so the quotients the floor took one below get it back."""
    x, y = _t(ins[0]), _t(ins[1])
    f = _Formula(ctx, x)
    q = f.op("Div", x, y)
    if x.dtype.is_floating:
        return _select(ctx, f.op("Less", q, 0.0), f.op("Ceil", q), f.op("Floor", q))
    return _select(ctx, _truncation_fix(f, x, y, f.op("FloorMod", x, y)), f.op("Add", q, 1), q)


@_rule("Div")
def _div(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """TensorFlow's ``Div``: exact on floats; on integers C's ``/``, the kernel ``TruncateDiv`` runs
    too, which rounds toward zero where Turnout's ``Div`` floors (-7 / 2 is -3, not -4)."""
    if _t(ins[0]).dtype.is_floating:
        return [ctx.create("Div", ins[:2]).outputs[0]]
    return _truncate_div(ctx, nd, ins)


@_rule("TruncateMod", "Mod")
def _truncate_mod(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The remainder of the truncated division (C's ``%``; TensorFlow's ``Mod`` is this one), for
    integers: the floored remainder, less ``y`` where the two divisions differ. Floats are refused:
    the same step on a floored float remainder rounds, where TensorFlow's ``fmod`` is exact."""
    x, y = _t(ins[0]), _t(ins[1])
    if not x.dtype.is_integer:
        raise UnsupportedError(f"{ctx.where()}: supported for integer inputs only, got {x.dtype.name}")
    f = _Formula(ctx, x)
    r = f.op("FloorMod", x, y)
    return _select(ctx, _truncation_fix(f, x, y, r), f.op("Sub", r, y), r)


# ---- softsign, and the products and quotients that read 0 where x (or y) is 0 -------------------------
@_rule("Softsign")
def _softsign(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``x / (|x| + 1)``, TensorFlow's kernel: an infinity gives NaN there, and so here."""
    x = _t(ins[0])
    f = _floating(ctx, x)
    return [ctx.create("Div", [x, f.op("Add", f.op("Abs", x), 1.0)]).outputs[0]]


@_rule("SoftsignGrad")
def _softsign_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``gradients / (|features| + 1)^2`` (the gradient first, then the forward input)."""
    dy, x = _t(ins[0]), _t(ins[1])
    f = _floating(ctx, x)
    return [ctx.create("Div", [dy, f.op("Square", f.op("Add", f.op("Abs", x), 1.0))]).outputs[0]]


def _where_x_is_zero(ctx: ImportContext, nd: Any, ins: list[Value], op: str) -> Outs:
    """``0 where x == 0, else op(x, y)``, whatever y is there (NaN and 0 included). y reads 1 where x
    is 0, so the untaken side makes no infinity or NaN, and none reaches a gradient: there both
    partial derivatives are 0, as in TensorFlow's gradients of these ops."""
    x, y = _t(ins[0]), _t(ins[1])
    f = _floating(ctx, x)
    zero = f.op("Equal", x, 0.0)
    safe = ctx.create("Select", [zero, f.op("OnesLike", y), y], suffix="safe_y").outputs[0]
    q = f.op("Div", x, safe) if op == "Xdivy" else f.op("Mul", x, f.op(_LOGS[op], safe))
    return _select(ctx, zero, f.op("ZerosLike", q), q)


_LOGS = {"Xlogy": "Log", "Xlog1py": "Log1p"}


@_rule("Xlogy")
def _xlogy(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """TensorFlow's Xlogy: ``0 where x == 0`` (so ``Xlogy(0, 0)`` and ``Xlogy(0, NaN)`` are 0), else
    ``x * log(y)`` (``Xlogy(1, 0)`` is -inf; a NaN x gives NaN). Floating types only, as TensorFlow's
    kernel. Gradients: ``log(y)`` and ``x / y`` where x is not 0, else 0."""
    return _where_x_is_zero(ctx, nd, ins, "Xlogy")


@_rule("Xlog1py")
def _xlog1py(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """TensorFlow's Xlog1py: ``0 where x == 0``, else ``x * log1p(y)`` (``Xlog1py(1, -1)`` is -inf).
    Floating types only. Gradients: ``log1p(y)`` and ``x / (1 + y)`` where x is not 0, else 0."""
    return _where_x_is_zero(ctx, nd, ins, "Xlog1py")


@_rule("Xdivy")
def _xdivy(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """TensorFlow's Xdivy: ``0 where x == 0`` (``Xdivy(0, 0)`` is 0), else ``x / y`` (``Xdivy(1, 0)``
    is inf). Floating types only. Gradients: ``1 / y`` and ``-x / y^2`` where x is not 0, else 0."""
    return _where_x_is_zero(ctx, nd, ins, "Xdivy")


@_rule("MulNoNan")
def _mul_no_nan(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """TensorFlow's MulNoNan: ``+0 where y == 0`` even where x is infinite or NaN, else ``x * y``
    (so ``MulNoNan(0, NaN)`` is NaN: only y is tested). Floating types only.

    Built as ``p = (y == 0 ? finite(x) : x) * y`` (``finite(x)``: x, or 0 where it is infinite or
    NaN), then ``p - stop_gradient(p)`` (+0) where y is 0, else p. The gradients are TensorFlow's:
    ``dz * y`` for x (0 where y is 0) and ``dz * x`` for y, also where y is 0 (TensorFlow's
    ``mul_no_nan(x, dz)``); where y is 0 and x is not finite it is 0 here, where TensorFlow's is
    infinite or NaN."""
    x, y = _t(ins[0]), _t(ins[1])
    f = _floating(ctx, x)
    zero = f.op("Equal", y, 0.0)
    finite = f.op("Equal", f.op("Sub", x, x), 0.0)
    xf = ctx.create("Select", [finite, x, f.op("ZerosLike", x)], suffix="finite_x").outputs[0]
    p = f.op("Mul", ctx.create("Select", [zero, xf, x], suffix="safe_x").outputs[0], y)
    plus_zero = f.op("Sub", p, f.op("StopGradient", p))
    return _select(ctx, zero, plus_zero, p)


@_rule("Rint")
def _rint(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The nearest integer, halves to even (``Rint(2.5)`` is 2, ``Rint(-0.5)`` is -0): Turnout's
    ``Round``. Floating types only, as TensorFlow's kernel; no gradient, as in TensorFlow."""
    x = _t(ins[0])
    _floating(ctx, x)
    return [ctx.create("Round", [x]).outputs[0]]
