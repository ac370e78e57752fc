"""Gradient rules of the ordinary primitives: one short function per primitive (``GRAD_RULES``).

A rule receives ``b`` (the backward builder, see ``turnout.gradients.core.Backward``), the forward node
and the gradients of its outputs (None where an output has none), and returns one gradient per data
input (None where there is none). Rules never read forward tensors directly: ``b.value(t)`` gives the
forward value ``t`` as seen from the backward code being built, which is where loop gradients pop saved
values off a stack (the paper, Sec. 5.2). Reading only what a rule needs is what keeps stacks small.

Builder-made conds and loops are differentiated as whole constructs (``turnout.gradients.control_flow``),
which is the Switch <-> Merge and Enter <-> Exit duality of the paper, Sec. 5. The Switch and Merge
rules below serve hand-built conditionals (``tn.raw``): the same duality, op by op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout import math_ops, ops
from turnout.errors import GradientError, describe_node, prevent_gradient_message
from turnout.gradients.grads import SlotGrad
from turnout.graph import Node, Tensor
from turnout.tables import registrar

if TYPE_CHECKING:
    from turnout.gradients.core import Backward

Grads = list[Optional[Tensor]]
Rule = Callable[["Backward", Node, Sequence[Optional[Tensor]]], Grads]
GRAD_RULES: dict[str, Rule] = {}

# Why each primitive below has no gradient rule. A reason must *hold*: the completeness test
# (tests/test_gradient_rules.py) checks that every primitive named "integer or boolean outputs" really
# gives a non-float output from float inputs, and every other primitive met on a gradient path without
# a rule raises GradientError naming it (never a silent None).
NO_INPUTS = "a source: it has no data inputs to differentiate"
INTEGER_OUTPUTS = "integer or boolean outputs: nothing differentiable comes out"
CONSTANT_IN_INPUT = "its output does not depend on the value of its input: the gradient is exactly zero"
PIECEWISE_CONSTANT = "piecewise constant: the derivative is zero wherever it exists (as in TensorFlow)"
BY_DEFINITION = "stops gradients by definition"
STATE_UPDATE = "a state update: it produces no value a gradient could flow back through"
GRADIENT_MACHINERY = "gradient machinery: saves forward values for the backward loop"

#: primitives without a gradient rule, each with the reason it has none: gradients stop here.
NON_DIFFERENTIABLE: dict[str, str] = {
    "Const": NO_INPUTS, "Placeholder": NO_INPUTS, "VarHandle": NO_INPUTS, "StackNew": NO_INPUTS,
    "NoOp": "no outputs",
    "LoopCond": INTEGER_OUTPUTS, "Shape": INTEGER_OUTPUTS, "Size": INTEGER_OUTPUTS,
    "TensorArraySize": INTEGER_OUTPUTS, "CheckpointSlots": NO_INPUTS, "CheckpointTrips": INTEGER_OUTPUTS,
    "Less": INTEGER_OUTPUTS, "LessEqual": INTEGER_OUTPUTS, "Greater": INTEGER_OUTPUTS,
    "GreaterEqual": INTEGER_OUTPUTS, "Equal": INTEGER_OUTPUTS, "NotEqual": INTEGER_OUTPUTS,
    "LogicalAnd": INTEGER_OUTPUTS, "LogicalOr": INTEGER_OUTPUTS, "LogicalNot": INTEGER_OUTPUTS,
    "All": INTEGER_OUTPUTS, "Any": INTEGER_OUTPUTS, "ArgMax": INTEGER_OUTPUTS, "ArgMin": INTEGER_OUTPUTS,
    "TensorArrayNew": "its only input is the integer size: a fresh TensorArray holds no values",
    "ZerosLike": CONSTANT_IN_INPUT, "OnesLike": CONSTANT_IN_INPUT,
    "Sign": PIECEWISE_CONSTANT, "Floor": PIECEWISE_CONSTANT, "Ceil": PIECEWISE_CONSTANT, "Round": PIECEWISE_CONSTANT,
    "StopGradient": BY_DEFINITION,
    "AssignVariable": STATE_UPDATE, "AssignAddVariable": STATE_UPDATE, "AssignSubVariable": STATE_UPDATE,
    "StackPush": GRADIENT_MACHINERY,
    "RandomDraw": "a random draw: its values do not depend on its inputs' values smoothly (TensorFlow "
                  "registers no gradient for its random ops)",
}

#: differentiated only as parts of whole builder-made loops (a hand-built loop has no trip count or
#: frame the backward loop could mirror): met on their own, they raise a GradientError.
STRUCTURED: frozenset[str] = frozenset({"Enter", "Exit", "NextIteration"})

#: a gradient path through these cannot be built
UNSUPPORTED: dict[str, str] = {
    "Send": "Send and Recv are made by partitioning (turnout.devices), after gradients are built; "
            "differentiate the unpartitioned graph",
    "Recv": "Send and Recv are made by partitioning (turnout.devices), after gradients are built; "
            "differentiate the unpartitioned graph",
    "MaxPoolGrad": "a second derivative through max pooling (TensorFlow's MaxPoolGradGrad) is not built",
    "Digamma": "its derivative is the trigamma function (TensorFlow's polygamma(1, x)), which is not built",
}


_grad = registrar(GRAD_RULES)


def _in(n: Node, i: int) -> Tensor:
    return n.inputs[i]


# ---- elementwise: d/dx f(x) -------------------------------------------------------------------------
@_grad("Identity", "Sleep")
def _identity(b, n, dys):
    return [dys[0]]  # d x = dy (a Sleep's gradient does not wait: only the forward op stands for I/O)


@_grad("PreventGradient")
def _prevent_gradient(b, n, dys):
    # TensorFlow's PreventGradient: the author of the op it guards said its gradient would be wrong (a
    # fused kernel's second derivative), so a gradient path through it is refused, not built
    raise GradientError(prevent_gradient_message(n))


@_grad("Assert")
def _assert(b, n, dys):
    # the value passes through; the condition and the data it shows have no gradient
    return [None, dys[0]] + [None] * (len(n.inputs) - 2)


@_grad("ReadVariable")
def _read_variable(b, n, dys):
    return [dys[0]]  # the gradient w.r.t. a Variable is the sum over its reads: it flows to the handle


@_grad("Neg")
def _neg(b, n, dys):
    return [-dys[0]]  # d(-x) = -dy


@_grad("Add")
def _add(b, n, dys):
    x, y = n.inputs
    return [b.unbroadcast(dys[0], x, n.outputs[0]), b.unbroadcast(dys[0], y, n.outputs[0])]


@_grad("Sub")
def _sub(b, n, dys):
    x, y = n.inputs
    return [b.unbroadcast(dys[0], x, n.outputs[0]), b.unbroadcast(-dys[0], y, n.outputs[0])]


@_grad("Mul")
def _mul(b, n, dys):
    x, y = n.inputs
    dy = dys[0]
    return [b.unbroadcast(dy * b.value(y), x, n.outputs[0]), b.unbroadcast(dy * b.value(x), y, n.outputs[0])]


@_grad("Div")
def _div(b, n, dys):
    x, y = n.inputs
    dy, yv = dys[0], b.value(y)
    dx = dy / yv  # d(x/y)/dx = 1/y
    dyy = -dy * b.value(n.outputs[0]) / yv  # d(x/y)/dy = -x/y^2 = -(x/y)/y
    return [b.unbroadcast(dx, x, n.outputs[0]), b.unbroadcast(dyy, y, n.outputs[0])]


@_grad("Pow")
def _pow(b, n, dys):
    x, y = n.inputs
    dy, xv, yv, zv = dys[0], b.value(x), b.value(y), b.value(n.outputs[0])
    dx = dy * yv * ops.pow(xv, yv - 1)  # d x^y / dx = y x^(y-1)
    safe = ops.where(xv > 0, xv, ops.ones_like(xv))
    dyy = dy * zv * ops.where(xv > 0, ops.log(safe), ops.zeros_like(xv))  # d x^y / dy = x^y log x (x > 0)
    return [b.unbroadcast(dx, x, n.outputs[0]), b.unbroadcast(dyy, y, n.outputs[0])]


@_grad("FloorMod")
def _floor_mod(b, n, dys):
    x, y = n.inputs
    if not n.outputs[0].dtype.is_floating:
        return [None, None]
    # z = x - floor(x / y) * y: dz/dx = 1, dz/dy = -floor(x / y) = -(x - z) / y
    dy, xv, yv, zv = dys[0], b.value(x), b.value(y), b.value(n.outputs[0])
    return [b.unbroadcast(dy, x, n.outputs[0]), b.unbroadcast(-dy * ((xv - zv) / yv), y, n.outputs[0])]


@_grad("Square")
def _square(b, n, dys):
    return [dys[0] * (b.value(_in(n, 0)) * 2)]  # d x^2 = 2 x dy


@_grad("Abs")
def _abs(b, n, dys):
    return [dys[0] * ops.sign(b.value(_in(n, 0)))]


@_grad("Relu")
def _relu(b, n, dys):
    y = b.value(n.outputs[0])
    return [ops.where(y > 0, dys[0], ops.zeros_like(dys[0]))]


@_grad("Tanh")
def _tanh(b, n, dys):
    y = b.value(n.outputs[0])
    return [dys[0] * (1 - y * y)]  # d tanh x = 1 - tanh^2 x


@_grad("Sigmoid")
def _sigmoid(b, n, dys):
    y = b.value(n.outputs[0])
    return [dys[0] * (y * (1 - y))]


@_grad("Exp")
def _exp(b, n, dys):
    return [dys[0] * b.value(n.outputs[0])]


@_grad("Log")
def _log(b, n, dys):
    return [dys[0] / b.value(_in(n, 0))]


@_grad("Sqrt")
def _sqrt(b, n, dys):
    return [dys[0] / (b.value(n.outputs[0]) * 2)]  # d sqrt x = 1 / (2 sqrt x)


@_grad("Log1p")
def _log1p(b, n, dys):
    return [dys[0] / (b.value(_in(n, 0)) + 1)]  # d log(1 + x) = 1 / (1 + x)


@_grad("Expm1")
def _expm1(b, n, dys):
    return [dys[0] * ops.exp(b.value(_in(n, 0)))]  # d (e^x - 1) = e^x


@_grad("Erf")
def _erf(b, n, dys):
    x = b.value(_in(n, 0))
    return [dys[0] * (ops.exp(-(x * x)) * (2 / np.sqrt(np.pi)))]  # d erf x = 2 / sqrt(pi) e^(-x^2)


@_grad("Sin")
def _sin(b, n, dys):
    return [dys[0] * math_ops.cos(b.value(_in(n, 0)))]


@_grad("Cos")
def _cos(b, n, dys):
    return [-(dys[0] * math_ops.sin(b.value(_in(n, 0))))]


@_grad("Tan")
def _tan(b, n, dys):
    return [dys[0] / ops.square(math_ops.cos(b.value(_in(n, 0))))]  # d tan x = 1 / cos^2 x, as TensorFlow


@_grad("Asin")
def _asin(b, n, dys):
    x = b.value(_in(n, 0))
    return [dys[0] / ops.sqrt(1 - x * x)]  # d asin x = 1 / sqrt(1 - x^2)


@_grad("Acos")
def _acos(b, n, dys):
    x = b.value(_in(n, 0))
    return [-(dys[0] / ops.sqrt(1 - x * x))]  # d acos x = -1 / sqrt(1 - x^2)


@_grad("Atan")
def _atan(b, n, dys):
    x = b.value(_in(n, 0))
    return [dys[0] / (1 + x * x)]  # d atan x = 1 / (1 + x^2)


@_grad("Atan2")
def _atan2(b, n, dys):
    y, x = n.inputs  # (TensorFlow's order: atan2(y, x) is the angle of the point (x, y))
    yv, xv = b.value(y), b.value(x)
    scaled = dys[0] / (xv * xv + yv * yv)  # d atan2(y, x) = (x dy - y dx) / (x^2 + y^2)
    return [b.unbroadcast(scaled * xv, y, n.outputs[0]), b.unbroadcast(-(scaled * yv), x, n.outputs[0])]


@_grad("Sinh")
def _sinh(b, n, dys):
    return [dys[0] * math_ops.cosh(b.value(_in(n, 0)))]


@_grad("Cosh")
def _cosh(b, n, dys):
    return [dys[0] * math_ops.sinh(b.value(_in(n, 0)))]


@_grad("Asinh")
def _asinh(b, n, dys):
    return [dys[0] / math_ops.cosh(b.value(n.outputs[0]))]  # d asinh x = 1 / cosh(asinh x), as TensorFlow


@_grad("Acosh")
def _acosh(b, n, dys):
    return [dys[0] / math_ops.sinh(b.value(n.outputs[0]))]  # d acosh x = 1 / sinh(acosh x), as TensorFlow


@_grad("Atanh")
def _atanh(b, n, dys):
    x = b.value(_in(n, 0))
    return [dys[0] / (1 - x * x)]  # d atanh x = 1 / (1 - x^2)


@_grad("Erfc")
def _erfc(b, n, dys):
    x = b.value(_in(n, 0))
    return [-(dys[0] * (ops.exp(-(x * x)) * (2 / np.sqrt(np.pi))))]  # d erfc x = -2 / sqrt(pi) e^(-x^2)


@_grad("Lgamma")
def _lgamma(b, n, dys):
    return [dys[0] * math_ops.digamma(b.value(_in(n, 0)))]  # d lgamma x = digamma x


def _select_where(b: Backward, n: Node, dy: Tensor, pick_x: Tensor) -> Grads:
    x, y = n.inputs
    z = ops.zeros_like(dy)
    return [b.unbroadcast(ops.where(pick_x, dy, z), x, n.outputs[0]),
            b.unbroadcast(ops.where(pick_x, z, dy), y, n.outputs[0])]


@_grad("Maximum")
def _maximum(b, n, dys):
    x, y = n.inputs
    return _select_where(b, n, dys[0], b.value(x) >= b.value(y))  # ties go to x, as in TensorFlow


@_grad("Minimum")
def _minimum(b, n, dys):
    x, y = n.inputs
    return _select_where(b, n, dys[0], b.value(x) <= b.value(y))


@_grad("Select")
def _select(b, n, dys):
    c, x, y = n.inputs
    dy = dys[0]
    cv = b.value(c)
    z = ops.zeros_like(dy)
    return [None, b.unbroadcast(ops.where(cv, dy, z), x, n.outputs[0]),
            b.unbroadcast(ops.where(cv, z, dy), y, n.outputs[0])]


@_grad("Cast")
def _cast(b, n, dys):
    x = _in(n, 0)
    if not (x.dtype.is_floating and n.outputs[0].dtype.is_floating):
        return [None]  # casts to or from integers carry no gradient
    return [ops.cast(dys[0], x.dtype)]


# ---- hand-built conditionals: Switch <-> Merge ------------------------------------------------------
@_grad("Merge")
def _merge(b, n, dys):
    """The gradient of Merge is a Switch: input i gets dy exactly when it was the live one
    (value_index == i); on the other inputs' paths the gradient is dead, as their values were."""
    if dys[0] is None:
        return [None] * len(n.inputs)
    idx = b.value(n.outputs[1])
    return [dys[0].graph.create_node("Switch", [dys[0], ops.equal(idx, i)], name="gradients/merge_grad").outputs[1]
            for i in range(len(n.inputs))]


@_grad("Switch")
def _switch(b, n, dys):
    """The gradient of Switch is a Merge of its outputs' gradients; an output without one contributes
    zeros that are live exactly when that output was (a Switch of zeros on the same predicate)."""
    x, p = n.inputs
    pv = b.value(p)
    ds = list(dys)
    for k in (0, 1):
        if ds[k] is None:
            ds[k] = pv.graph.create_node("Switch", [b.zeros_like(x), pv], name="gradients/switch_zeros").outputs[k]
    return [ds[0].graph.create_node("Merge", ds, name="gradients/switch_grad").outputs[0], None]


# ---- linear algebra and structure ---------------------------------------------------------------------
@_grad("MatMul")
def _matmul(b, n, dys):
    a, c = n.inputs
    dy, av, cv = dys[0], b.value(a), b.value(c)
    ta, tb = n.attrs.get("transpose_a", False), n.attrs.get("transpose_b", False)
    # z = op(a) @ op(c): d op(a) = dy @ op(c)^T, d op(c) = op(a)^T @ dy; transpose back where op transposed.
    if not ta and not tb:
        gs = [ops.matmul(dy, cv, transpose_b=True), ops.matmul(av, dy, transpose_a=True)]
    elif ta and not tb:
        gs = [ops.matmul(cv, dy, transpose_b=True), ops.matmul(av, dy)]
    elif not ta and tb:
        gs = [ops.matmul(dy, cv), ops.matmul(dy, av, transpose_a=True)]
    else:
        gs = [ops.matmul(cv, dy, transpose_a=True, transpose_b=True),
              ops.matmul(dy, av, transpose_a=True, transpose_b=True)]
    if all(x.shape is not None and len(x.shape) == 2 for x in (a, c)):
        return gs
    return [b.unbroadcast(g, x, n.outputs[0]) for g, x in zip(gs, (a, c))]  # batch axes one side broadcast


def _triangular(x: Tensor, attrs: dict[str, Any], rhs: Tensor) -> Tensor:
    return x.graph.create_node("MatrixTriangularSolve", [x, rhs], dict(attrs)).outputs[0]


@_grad("MatrixInverse")
def _matrix_inverse(b, n, dys):
    # TensorFlow's: y = A^-1 gives dA = -y^T dy y^T (with adjoint, y = A^-T: dA = -y dy^T y)
    y = b.value(n.outputs[0])
    if n.attrs.get("adjoint", False):
        return [ops.negative(ops.matmul(y, ops.matmul(dys[0], y, transpose_a=True)))]
    return [ops.negative(ops.matmul(y, ops.matmul(dys[0], y, transpose_b=True), transpose_a=True))]


@_grad("Cholesky")
def _cholesky(b, n, dys):
    # TensorFlow's: with L^-1 from a triangular solve, P = Phi(L^T dL) (the lower triangle, the diagonal
    # halved), dA = sym(L^-T P L^-1) (the average of it and its transpose: A is read as symmetric)
    from turnout.linalg import eye_like, lower_like

    low = b.value(n.outputs[0])
    eye = eye_like(low)
    inverse = _triangular(low, {"lower": True, "adjoint": False}, eye)
    middle = ops.matmul(low, dys[0], transpose_a=True)
    middle = (middle - middle * eye * ops.constant(0.5, low.dtype)) * lower_like(low)
    grad = ops.matmul(ops.matmul(inverse, middle, transpose_a=True), inverse)
    return [(grad + ops.transpose(grad, _swap_last(grad))) * ops.constant(0.5, low.dtype)]


@_grad("MatrixTriangularSolve")
def _triangular_solve(b, n, dys):
    # TensorFlow's: db solves the transposed system; dA = -db x^T (adjoint: -x db^T), in A's triangle
    from turnout.linalg import lower_like

    a, rhs = n.inputs
    av, x = b.value(a), b.value(n.outputs[0])
    lower, adjoint = bool(n.attrs.get("lower", True)), bool(n.attrs.get("adjoint", False))
    db = _triangular(av, {"lower": lower, "adjoint": not adjoint}, dys[0])
    da = ops.matmul(x, db, transpose_b=True) if adjoint else ops.matmul(db, x, transpose_b=True)
    da = ops.negative(da) * lower_like(da, lower)
    if all(t.shape is not None and len(t.shape) == 2 for t in (a, rhs)):
        return [da, db]
    return [b.unbroadcast(g, t, n.outputs[0]) for g, t in zip((da, db), (a, rhs))]


@_grad("MatrixSolve")
def _matrix_solve(b, n, dys):
    # TensorFlow's: db solves the transposed system; dA = -db x^T (adjoint: -x db^T)
    a = b.value(n.inputs[0])
    x = b.value(n.outputs[0])
    adjoint = bool(n.attrs.get("adjoint", False))
    db = a.graph.create_node("MatrixSolve", [a, dys[0]], {"adjoint": not adjoint}).outputs[0]
    da = ops.matmul(x, db, transpose_b=True) if adjoint else ops.matmul(db, x, transpose_b=True)
    return [ops.negative(da), db]


@_grad("MatrixDeterminant")
def _matrix_determinant(b, n, dys):
    # TensorFlow's: d det(A) / dA = det(A) A^-T (a singular A fails in the inverse, as there)
    a, det = b.value(n.inputs[0]), b.value(n.outputs[0])
    return [_per_matrix(dys[0] * det) * a.graph.create_node("MatrixInverse", [a], {"adjoint": True}).outputs[0]]


@_grad("LogMatrixDeterminant")
def _log_matrix_determinant(b, n, dys):
    # TensorFlow's: d log|det(A)| / dA = A^-T; the sign has no gradient
    if dys[1] is None:
        return [None]
    a = b.value(n.inputs[0])
    return [_per_matrix(dys[1]) * a.graph.create_node("MatrixInverse", [a], {"adjoint": True}).outputs[0]]


def _per_matrix(g: Tensor) -> Tensor:
    """A value per matrix with two axes of size 1 added, to scale each matrix."""
    return ops.expand_dims(ops.expand_dims(g, -1), -1)


def _swap_last(x: Tensor) -> list[int]:
    if x.shape is None:
        raise GradientError("Cholesky's gradient needs the rank of its input")
    r = len(x.shape)
    return [*range(r - 2), r - 1, r - 2]


@_grad("Reshape")
def _reshape(b, n, dys):
    return [b.reshape_like(dys[0], _in(n, 0))]


@_grad("ReshapeTo")
def _reshape_to(b, n, dys):
    """Back to the input's shape, read when it runs when it is not static."""
    x = _in(n, 0)
    return [dys[0].graph.create_node("ReshapeTo", [dys[0], b.shape_of(x)]).outputs[0], None]


@_grad("ExpandDims")
def _expand_dims(b, n, dys):
    return [b.reshape_like(dys[0], _in(n, 0))]


@_grad("Transpose")
def _transpose(b, n, dys):
    perm = n.attrs.get("perm")
    if perm is None:
        return [ops.transpose(dys[0])]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return [ops.transpose(dys[0], inv)]


@_grad("Concat")
def _concat(b, n, dys):
    """Slice dy back into the pieces; sizes along the axis come from the inputs' shapes. A negative
    axis of an output of unknown rank is counted from the end when it runs: each piece is then a
    gather of its run-time range of positions along that axis."""
    dy = dys[0]
    ax = n.attrs["axis"]
    rank = len(n.outputs[0].shape) if n.outputs[0].shape is not None else None
    if rank is not None:
        ax = ax % rank
    out: Grads = []
    start: Any = 0
    for x in n.inputs:
        d = x.shape[ax] if x.shape is not None else None
        size = d if d is not None else ops.getitem(b.shape_of(x), ax)
        stop = start + size
        if ax >= 0:
            out.append(ops.getitem(dy, tuple([slice(None)] * ax + [slice(start, stop)])))
        else:
            span = math_ops.cumsum(ops.fill(ops.expand_dims(size, 0), 1), exclusive=True) + start
            out.append(ops.gather(dy, span, axis=ax))
        start = stop
    return out


@_grad("Pack")
def _pack(b, n, dys):
    return [ops.getitem(dys[0], i) for i in range(len(n.inputs))]


@_grad("GetItem")
def _getitem(b, n, dys):
    x, *dyn = n.inputs
    like = b.zeros_like(x)
    node = like.graph.create_node("GetItemGrad", [like, dys[0], *[b.value(d) for d in dyn]], dict(n.attrs))
    return [node.outputs[0], *[None] * len(dyn)]


@_grad("GetItemGrad")
def _getitem_grad(b, n, dys):
    like, g, *dyn = n.inputs
    dyn_v = [b.value(d) for d in dyn]
    dg = dys[0].graph.create_node("GetItem", [dys[0], *dyn_v], dict(n.attrs)).outputs[0]
    return [None, dg, *[None] * len(dyn)]


@_grad("Gather")
def _gather(b, n, dys):
    x, idx = n.inputs
    node = dys[0].graph.create_node("ScatterAddLike", [b.zeros_like(x), b.value(idx), dys[0]],
                                    {"axis": n.attrs.get("axis", 0)})
    return [node.outputs[0], None]


@_grad("TopK")
def _top_k(b, n, dys):
    """Each selected value's gradient goes back to where it was taken from (TensorFlow's rule): dy
    spread over the last axis by a one-hot of the indices."""
    x = _in(n, 0)
    dy = dys[0]
    if dy is None:
        return [None]
    size = x.shape[-1] if x.shape else None
    if size is None:
        from turnout.errors import GradientError

        raise GradientError(f'TopK node "{n.name}": its gradient needs the size of the last axis')
    idx = b.value(n.outputs[1])
    hit = ops.equal(ops.expand_dims(idx, -1), ops.constant(np.arange(size, dtype=np.int32)))
    return [ops.reduce_sum(ops.cast(hit, dy.dtype) * ops.expand_dims(dy, -1), axis=-2)]


@_grad("ReverseSequence")
def _reverse_sequence(b, n, dys):
    """Reversing the same prefixes again puts each gradient back in place."""
    lengths = b.value(_in(n, 1))
    node = dys[0].graph.create_node("ReverseSequence", [dys[0], lengths], dict(n.attrs))
    return [node.outputs[0], None]


@_grad("ScatterAddLike")
def _scatter_add_like(b, n, dys):
    like, idx, upd = n.inputs
    return [None, None, ops.gather(dys[0], b.value(idx), axis=n.attrs.get("axis", 0))]


@_grad("UpdateSlot")
def _update_slot(b, n, dys):
    """The slot written takes its gradient from ``v``; the rest of ``x`` passes ``dy`` through."""
    x, i, v = n.inputs
    idx = b.value(i)
    dx = dys[0].graph.create_node("UpdateSlot", [dys[0], idx, b.zeros_like(v)]).outputs[0]
    return [dx, None, ops.gather(dys[0], idx)]


@_grad("Tile")
def _tile(b, n, dys):
    """dx = sum of dy over the tiles: reshape dy to (m0, d0, m1, d1, ...) and sum the m axes. Where a
    size of the input is known only at run time (a placeholder's, a TensorArray's stack), the split
    shape interleaves the multiples with the run-time shape (``b.shape_of``), as TensorFlow's Tile
    gradient does; its rank is always known, ``len(multiples)``."""
    x = _in(n, 0)
    mult = n.attrs["multiples"]
    axes = list(range(0, 2 * len(mult), 2))
    if x.shape is not None and all(d is not None for d in x.shape):
        split = [s for m, d in zip(mult, x.shape, strict=True) for s in (m, d)]
        return [ops.reduce_sum(ops.reshape(dys[0], split), axis=axes)]
    if not mult:
        return [dys[0]]
    pairs = ops.stack([ops.constant(np.asarray(mult, np.int32)), b.shape_of(x)])  # [[m0, m1, ...], [d0, d1, ...]]
    split = ops.reshape(ops.transpose(pairs), [2 * len(mult)])
    r = dys[0].graph.create_node("ReshapeTo", [dys[0], split]).outputs[0]
    return [ops.reduce_sum(r, axis=axes)]


@_grad("Sum")
def _sum(b, n, dys):
    x = _in(n, 0)
    return [b.broadcast_to(b.keepdims(dys[0], n), x)]


@_grad("Cumsum")
def _cumsum(b, n, dys):
    """Each input element reaches the sums after it (before it, reversed): the gradient's running sum
    in the other direction, exclusive when the forward sum was."""
    a = n.attrs
    return [math_ops.cumsum(dys[0], a["axis"], a.get("exclusive", False), not a.get("reverse", False))]


@_grad("Cumprod")
def _cumprod(b, n, dys):
    """Exact where ``x`` holds zeros, and so is its own gradient. TensorFlow's formula ``dx =
    cumsum(y * dy, the other direction) / x`` is exact at every element but a zero (TensorFlow's
    ``div_no_nan`` gives 0 at every zero, wrong at a line's first; the plain division gives NaN). At
    a line's first zero (in the product's direction) the same sum over the line with that zero read
    as 1 is the gradient. At its second, the gradient is 0 but depends on the first zero ``z``: it
    is ``z`` times the sum over the line with both read as 1, so the second derivative is exact too.
    Past the second zero the gradient is 0 to the second order (two zeros remain in every term)."""
    a = n.attrs
    axis, exclusive, reverse = a["axis"], a.get("exclusive", False), a.get("reverse", False)
    x, dy = b.value(_in(n, 0)), dys[0]
    zeros, ones = ops.zeros_like(x), ops.ones_like(x)
    zero = ops.equal(x, zeros)
    before = math_ops.cumsum(ops.where(zero, ones, zeros), axis, exclusive=True, reverse=reverse)
    first = ops.logical_and(zero, ops.equal(before, zeros))  # no zero before it
    second = ops.logical_and(zero, ops.equal(before, ones))  # one zero before it

    def summed(y: Tensor) -> Tensor:  # each element's sum of y * dy over the products it reaches
        return math_ops.cumsum(y * dy, axis, exclusive, not reverse)

    def read_as_one(mask: Tensor) -> Tensor:
        return summed(math_ops.cumprod(ops.where(mask, ones, x), axis, exclusive, reverse))

    z = ops.reduce_sum(ops.where(first, x, zeros), axis=axis, keepdims=True)  # the first zero (0), as x
    at_second = z * read_as_one(ops.logical_or(first, second))
    divided = summed(b.value(n.outputs[0])) / ops.where(zero, ones, x)
    rest = ops.where(second, at_second, ops.where(zero, zeros, divided))
    return [ops.where(first, read_as_one(first), rest)]


@_grad("Prod")
def _prod(b, n, dys):
    """Each element's gradient is ``dy`` times the product of the other elements of its group, exact
    where the group holds zeros (dividing the product by the element is not). Over the whole tensor
    (``axis`` None, rank possibly unknown) the group is its flattening."""
    x = _in(n, 0)
    dy = b.broadcast_to(b.keepdims(dys[0], n), x)
    axis = n.attrs.get("axis")
    if axis is None:
        flat = ops.reshape(b.value(x), [-1])
        return [b.reshape_like(_others_product(flat, [0]), x) * dy]
    axes = axis if isinstance(axis, list) else [axis]
    if not axes or x.shape == ():
        return [dy]  # a product over no axis (or of a scalar) is the element itself
    return [_others_product(b.value(x), axes) * dy]


def _others_product(x: Tensor, axes: list[int]) -> Tensor:
    """For each element of ``x``, the product of the other elements of its group over ``axes``. Along
    one axis: the exclusive running products from either end, multiplied. Over several: a product over
    the first axis then over the rest, so (chain rule) the first axis's others times the others of
    the element's line among the lines' products."""
    first = math_ops.cumprod(x, axes[0], exclusive=True) * math_ops.cumprod(x, axes[0], exclusive=True, reverse=True)
    if len(axes) == 1:
        return first
    lines = ops.reduce_prod(x, axis=axes[0], keepdims=True)
    return first * _others_product(lines, axes[1:])


@_grad("Mean")
def _mean(b, n, dys):
    x = _in(n, 0)
    g = b.broadcast_to(b.keepdims(dys[0], n), x)
    count = ops.cast(ops.size(b.value(x)), x.dtype) / ops.cast(ops.size(b.value(n.outputs[0])), x.dtype)
    return [g / count]


# ---- windows: each convolution gradient is a convolution again (the three ops are one bilinear form,
# <dy, Conv2D(x, w)> = <x, Conv2DBackpropInput(dy, w)> = <w, Conv2DBackpropFilter(x, dy)>) ---------------
def _window(op: str, ins: Sequence[Tensor], n: Node) -> Tensor:
    return ins[0].graph.create_node(op, list(ins), dict(n.attrs)).outputs[0]


@_grad("Conv2D")
def _conv2d(b, n, dys):
    x, w = b.value(_in(n, 0)), b.value(_in(n, 1))
    return [_window("Conv2DBackpropInput", [x, w, dys[0]], n), _window("Conv2DBackpropFilter", [x, w, dys[0]], n)]


@_grad("Conv2DBackpropInput")
def _conv2d_backprop_input(b, n, dys):
    """``(like, w, dy)``: linear in ``w`` and ``dy``; ``like`` gives only the shape."""
    w, dy = b.value(_in(n, 1)), b.value(_in(n, 2))
    return [None, _window("Conv2DBackpropFilter", [dys[0], w, dy], n), _window("Conv2D", [dys[0], w], n)]


@_grad("Conv2DBackpropFilter")
def _conv2d_backprop_filter(b, n, dys):
    """``(x, like, dy)``: linear in ``x`` and ``dy``; ``like`` gives only the shape."""
    x, dy = b.value(_in(n, 0)), b.value(_in(n, 2))
    return [_window("Conv2DBackpropInput", [x, dys[0], dy], n), None, _window("Conv2D", [x, dys[0]], n)]


@_grad("MaxPool")
def _max_pool(b, n, dys):
    """Each window's gradient goes to its first largest element (TensorFlow's ``MaxPoolGrad``)."""
    x = b.value(_in(n, 0))
    return [_window("MaxPoolGrad", [x, b.value(n.outputs[0]), dys[0]], n)]


@_grad("AvgPool")
def _avg_pool(b, n, dys):
    return [_window("AvgPoolGrad", [b.value(_in(n, 0)), dys[0]], n)]


@_grad("AvgPoolGrad")
def _avg_pool_grad(b, n, dys):
    """AvgPoolGrad is AvgPool's adjoint, so its own adjoint in ``dy`` is AvgPool (``like``: no gradient)."""
    return [None, _window("AvgPool", [dys[0]], n)]


@_grad("Max", "Min")
def _max(b, n, dys):
    """The gradient goes to the maxima (minima), shared equally among ties, as in TensorFlow."""
    x = _in(n, 0)
    xv = b.value(x)
    yk = b.broadcast_to(b.keepdims(b.value(n.outputs[0]), n), x)
    hit = ops.cast(ops.equal(xv, yk), x.dtype)
    count = b.broadcast_to(ops.reduce_sum(hit, axis=n.attrs.get("axis"), keepdims=True), x)
    return [hit / count * b.broadcast_to(b.keepdims(dys[0], n), x)]


@_grad("Fill")
def _fill(b, n, dys):
    return [None, ops.reduce_sum(dys[0])]  # every element is the scalar: its gradient is the sum of dy


@_grad("BroadcastLike")
def _broadcast_like(b, n, dys):
    x, like = n.inputs
    return [b.unbroadcast(dys[0], x, n.outputs[0]), None]


@_grad("SumToLike")
def _sum_to_like(b, n, dys):
    x, like = n.inputs
    return [b.broadcast_to(dys[0], x), None]


# ---- gradients of gradients through loops ------------------------------------------------------------
@_grad("StackPop")
def _stack_pop(b, n, dys):
    """A pop in a backward loop stands for the forward value pushed under the same index: its gradient
    belongs to that value, at that forward iteration. It is pushed, under the same index, on a
    gradient stack; the backward loop of the forward loop pops it there and adds it to the value's
    gradient (``Backward.stack_gradient``). Pushed in order of the forward iterations, popped in
    reverse: a LIFO, like every stack."""
    h, idx = n.inputs
    b.push_stack_gradient(h, b.value(idx), dys[0])
    return [None, None]


# ---- TensorArray: the gradient of a TensorArray value is a TensorArray of gradients ---------------------
@_grad("TensorArrayRead")
def _ta_read(b, n, dys):
    ta, i = n.inputs[0], n.inputs[1]  # also serves TensorArrayReadOrZeros (ta, i, shape)
    # slot i gets dy, the other slots are zero: kept symbolic, so summing it costs O(1) (SlotGrad)
    return [SlotGrad(lambda: b.zeros_like(ta), b.value(i), dys[0]), None]


@_grad("TensorArrayWrite")
def _ta_write(b, n, dys):
    if n.attrs.get("overwrite", False) or n.attrs.get("ragged", False):
        raise GradientError(f"{describe_node(n)}: the gradient of a TensorArray write that may overwrite a "
                            "slot or hold elements of several shapes (an imported TensorList's) is not built")
    ta, i, v = n.inputs
    dta = dys[0]
    static = None if v.shape is None else list(v.shape)  # the slot holds what was written: v's type
    dv = dta.graph.create_node("TensorArrayReadOrZeros", [dta, b.value(i), b.shape_of(v)],
                               {"static_shape": static}).outputs[0]
    return [dta, None, dv]  # slot i of ``ta`` was unwritten (slots are write-once): passing dta on is exact


@_grad("TensorArrayAccumulate")
def _ta_accumulate(b, n, dys):
    ta, i, v = n.inputs
    dta = dys[0]
    static = None if v.shape is None else list(v.shape)
    dv = dta.graph.create_node("TensorArrayReadOrZeros", [dta, b.value(i), b.shape_of(v)],
                               {"static_shape": static}).outputs[0]
    return [dta, None, dv]  # out = ta with slot i + v: both get slot i's gradient


@_grad("TensorArrayReadOrZeros")
def _ta_read_or_zeros(b, n, dys):
    return _ta_read(b, n, dys)[:2] + [None]


@_grad("TensorArrayStack")
def _ta_stack(b, n, dys):
    return [ops.convert_to_tensor(dys[0]).graph.create_node("TensorArrayUnstack", [dys[0]]).outputs[0]]


@_grad("TensorArrayStackOrZeros")
def _ta_stack_or_zeros(b, n, dys):
    return [_ta_stack(b, n, dys)[0], None]


@_grad("TensorArrayUnstack")
def _ta_unstack(b, n, dys):
    x = _in(n, 0)
    node = dys[0].graph.create_node("TensorArrayStackOrZeros", [dys[0], b.shape_of(x)],
                                    {"static_shape": None if x.shape is None else list(x.shape)})
    return [node.outputs[0]]


@_grad("TensorArrayAdd")
def _ta_add(b, n, dys):
    return [dys[0], dys[0]]


def is_differentiable_dtype(d: dt.DType) -> bool:
    """Gradients flow through floats, TensorArrays (of floats) and Variable handles."""
    return d.is_floating or d in (dt.tensor_array, dt.resource)
