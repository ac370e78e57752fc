"""Import rules of the ops TF1 training and decoding code emits beyond its control flow: the
optimizers' fused updates (``Apply*``, dense, and ``SparseApply*`` for ``IndexedSlices`` gradients,
with ``Unique``, ``ResourceScatterAdd``/``Sub`` and ``ResourceGather``), ``DynamicStitch``, softmax and
its losses, the decoders' ``ArgMax``/``ArgMin``, ``TopKV2`` and ``ReverseSequence``, and ``InTopKV2``.

Each is the formula TensorFlow's kernel computes, written on existing Turnout primitives
(``import_rules._Formula``). Why a module of its own: ``import_rules`` holds the rules of the
control-flow, variable and TensorArray machinery; these only read Variables through it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout.composite import dim
from turnout.composite import int32 as _int32
from turnout.errors import UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef.import_context import ImportContext, Ref, Value
from turnout.graphdef.import_context import Rule as _Rule
from turnout.graphdef.import_rules import (
    IMPORT_RULES,
    Outs,
    _Formula,
    _getitem,
    _t,
    _var_attrs,
    _var_node,
    non_negative,
)
from turnout.graphdef.import_scatter import stitched, true_positions
from turnout.nn import log_softmax_part, log_softmax_parts, softmax_part
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)


# ---- optimizers' update ops: TensorFlow's fused kernels, as the update formulas they compute -------
#: the optimizers whose update op takes the gradient (and a sparse one its indices right after it)
#: at this position, before its scalars; the others take it last (a sparse one its indices after it)
_GRADIENT_AT = {"Momentum": 3, "Ftrl": 3, "FtrlV2": 3}


#: the hyperparameter checks of TensorFlow's kernels (an InvalidArgument error when the op runs), by
#: the optimizer and whether its update is sparse (the dense FTRL and every proximal gradient descent
#: kernel make none): (the scalar's position among the op's scalars, the comparison with 0 it must
#: pass, TensorFlow's words, with the shape it shows, a scalar's)
_NON_NEGATIVE_L1_L2 = [(1, "GreaterEqual", "l1 regularization strength is not a non-negative scalar: []"),
                       (2, "GreaterEqual", "l2 regularization strength is not a non-negative scalar: []")]
_FTRL_CHECKS = [(0, "Greater", "lr is not a positive scalar (or zero if multiply_linear_by_lr is set): []"),
                *_NON_NEGATIVE_L1_L2, (-1, "LessEqual", "lr_power is not a non-positive scalar: []")]
_SCALAR_CHECKS: dict[tuple[str, bool], list[tuple[int, str, str]]] = {
    **{("ProximalAdagrad", sparse): [(0, "Greater", "lr is not a positive scalar: []"), *_NON_NEGATIVE_L1_L2]
       for sparse in (False, True)},
    ("Ftrl", True): _FTRL_CHECKS,
    ("FtrlV2", True): [*_FTRL_CHECKS, (3, "GreaterEqual", "l2 shrinkage regularization strength is not a "
                                                          "non-negative scalar: []")],
}


def _checked_scalars(ctx: ImportContext, f: _Formula, family: str, sparse: bool, scalars: list[Tensor]) -> list[Tensor]:
    """``scalars`` through the checks ``_SCALAR_CHECKS`` lists for the op (a ``KernelError`` with
    TensorFlow's words where one fails, on every backend); ``multiply_linear_by_lr`` lets FTRL's rate
    be 0."""
    out = list(scalars)
    for at, compare, words in _SCALAR_CHECKS.get((family, sparse), []):
        if at == 0 and family.startswith("Ftrl") and ctx.attr("multiply_linear_by_lr", False):
            compare = "GreaterEqual"
        ok = f.op(compare, out[at], 0.0)
        out[at] = ctx.checked(ok, out[at], words, f"check{at % len(out)}")
    return out


def _family(op: str) -> str:
    """``ResourceSparseApplyFtrlV2`` -> ``FtrlV2``."""
    return op.removeprefix("Resource").removeprefix("Sparse").removeprefix("Apply")


def _apply_update(ctx: ImportContext, nd: Any, ins: list[Value], n_slots: int,
                  formula: Any, sparse: bool = False, reads_var: bool = False) -> Outs:
    """The resource form of an ``Apply*`` op: read the variable's slots (inputs 1..n_slots-1), compute
    ``formula(f, slots, scalars, grad) -> (new slot values, the variable's decrement)`` and assign
    them; the op's control output waits for every assign. ``reads_var``: the formula's first slot is
    the variable's own value (the proximal and FTRL updates compute the new value, not a step).

    ``sparse`` (a ``SparseApply*`` op, the update of an ``IndexedSlices`` gradient): the input after
    the gradient's rows is their indices. The formula runs densely on the rows
    scattered into zeros of the variable's shape, and only the rows named change (``Select`` on the
    rows the indices touch): TensorFlow's kernel updates each named row by the same formula. The
    optimizers deduplicate the indices first; for repeated ones this sums their rows, where the
    kernel would apply them one after the other."""
    names = ctx.data_inputs()
    touched = None
    family = _family(nd.op)
    at = _GRADIENT_AT.get(family)
    if sparse:  # the indices follow the gradient
        k = len(ins) - 1 if at is None else at + 1
        indices, ins, names = ins[k], [*ins[:k], *ins[k + 1:]], [*names[:k], *names[k + 1:]]
    if at is not None:  # the gradient moved after the scalars, where the formulas read it
        ins, names = [*ins[:at], *ins[at + 1:], ins[at]], [*names[:at], *names[at + 1:], names[at]]
    grad = _t(ins[-1])
    handles = [x.handle if isinstance(x, Ref) else x for x in ins[:n_slots]]
    slot_attrs = [x.attrs if isinstance(x, Ref) else _var_attrs(ctx, _var_node(ctx, t))
                  for x, t in zip(ins[:n_slots], names[:n_slots])]
    if sparse:
        shape = slot_attrs[0]["shape"]
        if shape is None or any(d is None for d in shape):
            raise UnsupportedError(f"{ctx.where()}: needs the variable's static shape")
        zeros = ctx.const(np.zeros(shape, grad.dtype.numpy), [grad], suffix="zeros")
        ones = ctx.create("OnesLike", [grad], suffix="ones").outputs[0]
        count = ctx.create("ScatterAddLike", [zeros, indices, ones], suffix="count").outputs[0]
        touched = ctx.create("Greater", [count, zeros], suffix="touched").outputs[0]
        grad = ctx.create("ScatterAddLike", [zeros, indices, grad], suffix="dense").outputs[0]
    reads = [ctx.create("ReadVariable", [h], a, suffix=f"read{k}").outputs[0]
             for k, (h, a) in enumerate(zip(handles[1:], slot_attrs[1:]))]
    if reads_var:
        reads.insert(0, ctx.create("ReadVariable", [handles[0]], slot_attrs[0], suffix="read_var").outputs[0])
    f = _Formula(ctx, grad)
    scalars = _checked_scalars(ctx, f, family, sparse, [_t(x) for x in ins[n_slots:-1]])
    new_slots, decrement = formula(f, reads, scalars, grad)
    if touched is not None:
        new_slots = [f.op("Select", touched, v, old) for v, old in zip(new_slots, reads)]
        decrement = f.op("Select", touched, decrement, zeros)
    done = []
    for k, v in enumerate(new_slots):
        done.append(ctx.create("AssignVariable", [handles[1 + k], v], slot_attrs[1 + k], suffix=f"assign{k}"))
    update = ctx.create("AssignSubVariable", [handles[0], decrement], slot_attrs[0], suffix="update")
    if isinstance(ins[0], Ref):  # the reference form outputs the updated variable
        return [ctx.create("Identity", [update.outputs[0]], control=ctx.ctrl_inputs() + done).outputs[0]]
    ctx.create("NoOp", [], control=ctx.ctrl_inputs() + done + [update])
    return []


def _toward(f: _Formula, old: Tensor, target: Tensor, decay: Tensor) -> Tensor:
    """``old + (target - old)(1 - decay)``: a moving average's step, as TensorFlow's kernels write it."""
    return f.op("Add", old, f.op("Mul", f.op("Sub", target, old), f.op("Sub", 1.0, decay)))


def _sgd(f: _Formula, slots: list[Tensor], s: list[Tensor], g: Tensor) -> Any:
    (alpha,) = s
    return [], f.op("Mul", alpha, g)


def _momentum(f: _Formula, slots: list[Tensor], s: list[Tensor], g: Tensor) -> Any:
    (accum,), (lr, momentum) = slots, s
    acc = f.op("Add", f.op("Mul", accum, momentum), g)
    if f.ctx.attr("use_nesterov", False):
        return [acc], f.op("Add", f.op("Mul", g, lr), f.op("Mul", f.op("Mul", acc, momentum), lr))
    return [acc], f.op("Mul", acc, lr)


def _adam(f: _Formula, slots: list[Tensor], s: list[Tensor], g: Tensor) -> Any:
    """TensorFlow's ApplyAdam kernel: m += (g - m)(1 - b1); v += (g^2 - v)(1 - b2);
    var -= lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps) (Nesterov: m replaced by (1 - b1) g + b1 m)."""
    (m, v), (b1p, b2p, lr, b1, b2, eps) = slots, s
    m2 = _toward(f, m, g, b1)
    v2 = _toward(f, v, f.op("Mul", g, g), b2)
    lr_t = f.op("Div", f.op("Mul", lr, f.op("Sqrt", f.op("Sub", 1.0, b2p))), f.op("Sub", 1.0, b1p))
    mm = m2
    if f.ctx.attr("use_nesterov", False):
        mm = f.op("Add", f.op("Mul", g, f.op("Sub", 1.0, b1)), f.op("Mul", b1, m2))
    return [m2, v2], f.op("Div", f.op("Mul", mm, lr_t), f.op("Add", f.op("Sqrt", v2), eps))


def _rmsprop(f: _Formula, slots: list[Tensor], s: list[Tensor], g: Tensor) -> Any:
    """ms += (g^2 - ms)(1 - rho); mom = momentum mom + lr g / sqrt(ms + eps); var -= mom."""
    (ms, mom), (lr, rho, momentum, eps) = slots, s
    ms2 = _toward(f, ms, f.op("Mul", g, g), rho)
    mom2 = f.op("Add", f.op("Mul", momentum, mom), f.op("Div", f.op("Mul", lr, g), f.op("Sqrt", f.op("Add", ms2, eps))))
    return [ms2, mom2], mom2


def _centered_rmsprop(f: _Formula, slots: list[Tensor], s: list[Tensor], g: Tensor) -> Any:
    """RMSProp that also keeps the mean gradient ``mg`` and divides by the variance's root, TensorFlow's
    ``ApplyCenteredRMSProp``: ms += (g^2 - ms)(1 - rho); mg += (g - mg)(1 - rho);
    mom = momentum mom + lr g / sqrt(ms - mg^2 + eps); var -= mom."""
    (mg, ms, mom), (lr, rho, momentum, eps) = slots, s
    ms2 = _toward(f, ms, f.op("Mul", g, g), rho)
    mg2 = _toward(f, mg, g, rho)
    denom = f.op("Add", f.op("Sub", ms2, f.op("Mul", mg2, mg2)), eps)
    mom2 = f.op("Add", f.op("Mul", momentum, mom), f.op("Div", f.op("Mul", lr, g), f.op("Sqrt", denom)))
    return [mg2, ms2, mom2], mom2


def _adagrad(f: _Formula, slots: list[Tensor], s: list[Tensor], g: Tensor) -> Any:
    """accum += g^2 (when update_slots); var -= lr g / sqrt(accum) (V2: / (sqrt(accum) + eps))."""
    (accum,), lr = slots, s[0]
    acc = f.op("Add", accum, f.op("Mul", g, g)) if f.ctx.attr("update_slots", True) else accum
    denom = f.op("Sqrt", acc)
    if len(s) > 1:
        denom = f.op("Add", denom, s[1])
    return [acc], f.op("Div", f.op("Mul", lr, g), denom)


def _adadelta(f: _Formula, slots: list[Tensor], s: list[Tensor], g: Tensor) -> Any:
    """TensorFlow's ApplyAdadelta kernel: accum = rho accum + (1 - rho) g^2;
    update = sqrt(accum_update + eps) / sqrt(accum + eps) g; accum_update = rho accum_update + (1 - rho)
    update^2; var -= lr update."""
    (accum, accum_update), (lr, rho, eps) = slots, s
    acc = f.op("Add", f.op("Mul", accum, rho), f.op("Mul", f.op("Mul", g, g), f.op("Sub", 1.0, rho)))
    ratio = f.op("Div", f.op("Sqrt", f.op("Add", accum_update, eps)), f.op("Sqrt", f.op("Add", acc, eps)))
    update = f.op("Mul", ratio, g)
    upd = f.op("Add", f.op("Mul", accum_update, rho), f.op("Mul", f.op("Mul", update, update), f.op("Sub", 1.0, rho)))
    return [acc, upd], f.op("Mul", update, lr)


def _shrunk(f: _Formula, var: Tensor, prox: Tensor, rate: Tensor, l1: Tensor, l2: Tensor) -> Tensor:
    """The proximal step's decrement: the new value ``sign(prox) max(|prox| - rate l1, 0) / (1 + rate
    l2)`` where ``l1 > 0``, else ``prox / (1 + rate l2)`` (TensorFlow's kernels' branch, which the
    proximal gradient descent kernels take for a negative ``l1`` too), as ``var - new``."""
    soft = f.op("Mul", f.op("Sign", prox), f.op("Maximum", f.op("Sub", f.op("Abs", prox), f.op("Mul", rate, l1)), 0.0))
    kept = f.op("Select", f.op("Greater", f.op("Add", f.op("ZerosLike", prox), l1), 0.0), soft, prox)
    return f.op("Sub", var, f.op("Div", kept, f.op("Add", 1.0, f.op("Mul", rate, l2))))


def _proximal_sgd(f: _Formula, slots: list[Tensor], s: list[Tensor], g: Tensor) -> Any:
    """ApplyProximalGradientDescent: prox = var - alpha g, then the soft threshold (``_shrunk``)."""
    (var,), (alpha, l1, l2) = slots, s
    return [], _shrunk(f, var, f.op("Sub", var, f.op("Mul", g, alpha)), alpha, l1, l2)


def _proximal_adagrad(f: _Formula, slots: list[Tensor], s: list[Tensor], g: Tensor) -> Any:
    """ApplyProximalAdagrad: accum += g^2; rate = lr / sqrt(accum); prox = var - rate g, then the soft
    threshold at that rate (``_shrunk``)."""
    (var, accum), (lr, l1, l2) = slots, s
    acc = f.op("Add", accum, f.op("Mul", g, g))
    rate = f.op("Div", lr, f.op("Sqrt", acc))
    return [acc], _shrunk(f, var, f.op("Sub", var, f.op("Mul", g, rate)), rate, l1, l2)


def _ftrl(f: _Formula, slots: list[Tensor], s: list[Tensor], g: Tensor) -> Any:
    """TensorFlow's ApplyFtrl / ApplyFtrlV2 kernel (FTRL-proximal): with ``new = accum + g^2`` and
    ``p = -lr_power``, ``sigma = (new^p - accum^p) / lr``; ``linear += g' - sigma var`` (``g' = g +
    2 l2_shrinkage var`` for V2); the new value is ``(l1 sign(linear) - linear) / (new^p / lr + 2 l2)``
    where ``|linear| > l1``, else 0. ``multiply_linear_by_lr`` keeps ``linear`` times ``lr``: the
    same update with ``g' lr`` added, ``l1 lr`` the threshold and ``new^p + 2 l2 lr`` the divisor."""
    (var, accum, linear), (lr, l1, l2, *shrinkage, lr_power) = slots, s
    new = f.op("Add", accum, f.op("Mul", g, g))
    p = f.op("Neg", lr_power)
    grown = f.op("Sub", f.op("Pow", new, p), f.op("Pow", accum, p))
    shrunk_g = f.op("Add", g, f.op("Mul", f.op("Mul", 2.0, shrinkage[0]), var)) if shrinkage else g
    if f.ctx.attr("multiply_linear_by_lr", False):
        lin = f.op("Add", linear, f.op("Sub", f.op("Mul", shrunk_g, lr), f.op("Mul", grown, var)))
        threshold = f.op("Mul", l1, lr)
        divisor = f.op("Add", f.op("Pow", new, p), f.op("Mul", f.op("Mul", 2.0, l2), lr))
    else:
        lin = f.op("Add", linear, f.op("Sub", shrunk_g, f.op("Mul", f.op("Div", grown, lr), var)))
        threshold, divisor = l1, f.op("Add", f.op("Div", f.op("Pow", new, p), lr), f.op("Mul", 2.0, l2))
    value = f.op("Div", f.op("Sub", f.op("Mul", threshold, f.op("Sign", lin)), lin), divisor)
    kept = f.op("Greater", f.op("Abs", lin), threshold)
    return [new, lin], f.op("Sub", var, f.op("Select", kept, value, f.op("ZerosLike", value)))


#: (the ops, how many of their inputs are the variable and its slots, the formula, whether it reads the
#: variable's value)
_UPDATES = [(("ResourceApplyGradientDescent", "ApplyGradientDescent"), 1, _sgd, False),
            (("ResourceApplyMomentum", "ApplyMomentum"), 2, _momentum, False),
            (("ResourceApplyAdam", "ApplyAdam"), 3, _adam, False),
            (("ResourceApplyRMSProp", "ApplyRMSProp"), 3, _rmsprop, False),
            (("ResourceApplyCenteredRMSProp", "ApplyCenteredRMSProp"), 4, _centered_rmsprop, False),
            (("ResourceApplyAdagrad", "ResourceApplyAdagradV2", "ApplyAdagrad", "ApplyAdagradV2"), 2, _adagrad, False),
            (("ResourceApplyAdadelta", "ApplyAdadelta"), 3, _adadelta, False),
            (("ResourceApplyProximalGradientDescent", "ApplyProximalGradientDescent"), 1, _proximal_sgd, True),
            (("ResourceApplyProximalAdagrad", "ApplyProximalAdagrad"), 2, _proximal_adagrad, True),
            (("ResourceApplyFtrl", "ResourceApplyFtrlV2", "ApplyFtrl", "ApplyFtrlV2"), 3, _ftrl, True)]

for _ops, _n, _f, _reads in _UPDATES:
    def _make(n: int, formula: Any, sparse: bool, reads_var: bool) -> _Rule:
        def rule(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
            return _apply_update(ctx, nd, ins, n, formula, sparse, reads_var)

        return rule

    _rule(*_ops)(_make(_n, _f, False, _reads))
    if _f not in (_sgd, _adam):  # (SGD's and Adam's sparse updates are scatters: ``import_scatter``)
        _rule(*(o.replace("Apply", "SparseApply", 1) for o in _ops))(_make(_n, _f, True, _reads))


@_rule("ResourceScatterAdd", "ResourceScatterSub")
def _resource_scatter_add(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``var[indices] += updates`` (repeated indices add up): the updates scattered into zeros of the
    variable's shape, added to it (SGD's and Adam's updates of an ``IndexedSlices`` gradient)."""
    attrs = _var_attrs(ctx, _var_node(ctx, ctx.data_inputs()[0]))
    upd = _t(ins[2])
    if attrs["shape"] is None or any(d is None for d in attrs["shape"]):
        raise UnsupportedError(f"{ctx.where()}: needs the variable's static shape")
    zeros = ctx.const(np.zeros(attrs["shape"], upd.dtype.numpy), [upd], suffix="zeros")
    dense = ctx.create("ScatterAddLike", [zeros, ins[1], upd], suffix="dense").outputs[0]
    op = "AssignAddVariable" if nd.op == "ResourceScatterAdd" else "AssignSubVariable"
    ctx.create(op, [ins[0], dense], attrs)
    return []


@_rule("Unique", "UniqueWithCounts")
def _unique(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``y, idx = unique(x)`` of a vector (``UniqueWithCounts``: and each value's count): ``y`` its
    distinct values in order of first appearance,
    ``x == y[idx]`` (how the optimizers deduplicate an ``IndexedSlices`` gradient's indices). With
    ``eq = x[:, None] == x[None, :]``, element ``i`` is a first appearance when the first ``j`` with
    ``eq[i, j]`` is ``i``; ``idx`` counts the first appearances before that ``j``; ``y`` scatters
    the first appearances to their ``idx`` and keeps as many entries as there are (a length known
    when the program runs). Quadratic in the length of ``x``: it is meant for a batch's ids."""
    x = _t(ins[0])
    if x.shape is None or len(x.shape) != 1:
        raise UnsupportedError(f"{ctx.where()}: needs a vector input")
    out_idx = ctx.dtype("out_idx").name if ctx.attr("out_idx") else "int32"
    col = ctx.create("ExpandDims", [x], {"axis": 1}, suffix="col").outputs[0]
    row = ctx.create("ExpandDims", [x], {"axis": 0}, suffix="row").outputs[0]
    eq = ctx.create("Equal", [col, row], suffix="eq").outputs[0]
    first = ctx.create("ArgMax", [ctx.create("Cast", [eq], {"dtype": "int32"}, suffix="eq_int").outputs[0]],
                       {"axis": 1, "dtype": "int32"}, suffix="first").outputs[0]
    pos = ctx.create("Cumsum", [ctx.create("OnesLike", [first], suffix="ones").outputs[0]], {"axis": 0},
                     suffix="pos").outputs[0]
    one = ctx.const(np.asarray(1, np.int32), [pos], suffix="one")
    pos = ctx.create("Sub", [pos, one], suffix="position").outputs[0]
    is_first = ctx.create("Cast", [ctx.create("Equal", [first, pos], suffix="is_first").outputs[0]],
                          {"dtype": "int32"}, suffix="first_int").outputs[0]
    rank = ctx.create("Sub", [ctx.create("Cumsum", [is_first], {"axis": 0}, suffix="firsts").outputs[0], one],
                      suffix="rank").outputs[0]
    idx = ctx.create("Gather", [rank, first], {"axis": 0}, suffix="idx32").outputs[0]
    kept = ctx.create("Mul", [x, ctx.create("Cast", [is_first], {"dtype": x.dtype.name}, suffix="keep").outputs[0]],
                      suffix="kept").outputs[0]
    padded = ctx.create("ScatterAddLike", [ctx.create("ZerosLike", [x], suffix="zeros").outputs[0], idx, kept],
                        suffix="padded").outputs[0]
    n = ctx.create("Sum", [is_first], {"axis": None, "keepdims": False}, suffix="count").outputs[0]
    y = _getitem(ctx, padded, (slice(None, n, None),), None if nd.op == "Unique" else "y")
    if nd.op == "UniqueWithCounts":  # (each distinct value's count: ones summed at its idx)
        ones = ctx.create("OnesLike", [idx], suffix="one_each").outputs[0]
        counted = ctx.create("ScatterAddLike", [ctx.create("ZerosLike", [idx], suffix="no_count").outputs[0], idx,
                                                ones], {"axis": 0}, suffix="counted").outputs[0]
        counts = _getitem(ctx, counted, (slice(None, n, None),), "counts")
    if out_idx != "int32":
        idx = ctx.create("Cast", [idx], {"dtype": out_idx}, suffix="idx").outputs[0]
        if nd.op == "UniqueWithCounts":
            counts = ctx.create("Cast", [counts], {"dtype": out_idx}, suffix="counts_cast").outputs[0]
    if nd.op == "Unique":
        return [y, idx]
    values = ctx.create("Identity", [y], suffix="values").outputs[0]
    index = ctx.create("Identity", [idx], suffix="index").outputs[0]
    return [values, index, ctx.create("Identity", [counts]).outputs[0]]


@_rule("Where")
def _where(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """TensorFlow's one-argument ``Where`` (``tf.where(x)``, inside ``tf.boolean_mask``): the
    coordinates of the true (non-zero) elements of ``x``, one int64 row each in row-major order, as
    many rows as there are (a length known when the program runs). The formula of ``Unique``: a
    running count gives each true element its row, the elements' flat indices are scattered to their
    rows and the first ``count`` rows kept (``import_scatter.true_positions``); the strides of ``x``'s
    shape (its rank must be known at import, its sizes may be known only when it runs) split a flat
    index into coordinates."""
    x = _t(ins[0])
    if x.shape is None or len(x.shape) == 0:
        raise UnsupportedError(f"{ctx.where()}: needs the condition's rank (1 or more) when importing, "
                               f"got {x.shape}")
    flat = ctx.create("Reshape", [x], {"shape": [-1]}, suffix="flat").outputs[0]
    if x.dtype != dt.bool_:
        flat = ctx.create("NotEqual", [flat, ctx.create("ZerosLike", [flat], suffix="zero").outputs[0]],
                          suffix="nonzero").outputs[0]
    mask = ctx.create("Cast", [flat], {"dtype": "int32"}, suffix="mask").outputs[0]
    kept = true_positions(ctx, mask, "true")
    coords, stride = [], None
    for k in reversed(range(len(x.shape))):
        d = _int_tensor(ctx, dim(ctx, x, k, f"dim{k}"), x, f"dim{k}")
        over = kept if stride is None else ctx.create("Div", [kept, stride], suffix=f"over{k}").outputs[0]
        coords.append(ctx.create("FloorMod", [over, d], suffix=f"coord{k}").outputs[0])
        stride = d if stride is None else ctx.create("Mul", [stride, d], suffix=f"stride{k}").outputs[0]
    packed = ctx.create("Pack", coords[::-1], suffix="packed").outputs[0]
    t = ctx.create("Transpose", [packed], {"perm": [1, 0]}, suffix="rows_first").outputs[0]
    return [ctx.create("Cast", [t], {"dtype": "int64"}).outputs[0]]


def _int_tensor(ctx: ImportContext, d: Any, anchor: Tensor, suffix: str) -> Tensor:
    """A size from ``composite.dim`` as an int32 tensor: a constant where the import knows it."""
    return _int32(ctx, d, anchor, suffix) if isinstance(d, int) else d


@_rule("ResourceGather")
def _resource_gather(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``tf.gather`` of a resource Variable (an embedding lookup): a read of the Variable, gathered
    along axis 0 (``batch_dims`` 0 only, as TF1's ``embedding_lookup`` uses it)."""
    if ctx.attr("batch_dims", 0):
        raise UnsupportedError(f"{ctx.where()}: batch_dims is not supported")
    attrs = _var_attrs(ctx, _var_node(ctx, ctx.data_inputs()[0]))
    value = ctx.create("ReadVariable", ins[:1], attrs, suffix="read").outputs[0]
    idx = non_negative(ctx, ins[1], ctx.data_inputs()[1], "indices")
    return [ctx.create("Gather", [value, idx], {"axis": 0}).outputs[0]]


@_rule("ArgMax", "ArgMin")
def _arg_reduce(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    (axis,) = ctx.static_int_list(ctx.data_inputs()[1], "the axis")
    attrs = {"axis": axis, "dtype": ctx.dtype("output_type").name if ctx.attr("output_type") else "int64"}
    return [ctx.create(nd.op, ins[:1], attrs).outputs[0]]


@_rule("TopKV2", "TopK")
def _top_k_rule(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The k largest along the last axis, largest first (``sorted=False`` allows any order: this one)."""
    k = ctx.attr("k") if nd.op == "TopK" else ctx.static_int_list(ctx.data_inputs()[1], "k")[0]
    n = ctx.create("TopK", ins[:1], {"k": int(k)})
    return [n.outputs[0], n.outputs[1]]


_LINALG_ATTRS = {"MatrixInverse": ("adjoint",), "Cholesky": (), "MatrixTriangularSolve": ("adjoint", "lower"),
                 "MatrixSolve": ("adjoint",), "MatrixDeterminant": (), "LogMatrixDeterminant": ()}


@_rule(*_LINALG_ATTRS)
def _linalg(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The primitive of the same name (``turnout.linalg_rules``), with the node's ``adjoint`` and
    ``lower`` attrs."""
    attrs: dict[str, Any] = {a: bool(ctx.attr(a, a == "lower")) for a in _LINALG_ATTRS[nd.op]}
    return list(ctx.create(nd.op, ins, attrs).outputs)


@_rule("InTopKV2", "InTopK")
def _in_top_k(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """Whether each row's target class is among its ``k`` largest predictions, TensorFlow's kernel:
    true when fewer than ``k`` predictions of the row are strictly larger than the target's (so
    classes tied with it count in its favour), false when the row holds an infinity or a NaN, or
    the target is outside ``[0, classes)``. The number of classes must be known at import; ``k``
    (an input of InTopKV2, an attribute of InTopK) may be a run-time scalar."""
    pred, targets = _t(ins[0]), _t(ins[1])
    if pred.shape is None or len(pred.shape) != 2 or pred.shape[1] is None or not pred.dtype.is_floating:
        raise UnsupportedError(f"{ctx.where()}: needs floating predictions [batch, classes] with the classes known "
                               "when importing")
    classes = int(pred.shape[1])
    f = _Formula(ctx, targets)
    k = ins[2] if nd.op == "InTopKV2" else f.c(int(ctx.attr("k")))
    hot = f.op("Equal", ctx.create("ExpandDims", [targets], {"axis": -1}, suffix="col").outputs[0],
               ctx.const(np.arange(classes).astype(targets.dtype.numpy), [targets], suffix="classes"))
    zero = ctx.const(np.zeros((), pred.dtype.numpy), [pred], suffix="zero")
    row = {"axis": [-1], "keepdims": False}
    target = ctx.create("Sum", [f.op("Select", hot, pred, zero)], row, suffix="target").outputs[0]
    above = f.op("Greater", pred, ctx.create("ExpandDims", [target], {"axis": -1}, suffix="target_col").outputs[0])
    count = ctx.create("Sum", [ctx.create("Cast", [above], {"dtype": targets.dtype.name}, suffix="above_count"
                                          ).outputs[0]], row, suffix="count").outputs[0]
    finite = ctx.create("All", [f.op("Equal", f.op("Sub", pred, pred), zero)], row, suffix="finite").outputs[0]
    inside = ctx.create("Any", [hot], row, suffix="in_range").outputs[0]
    ok = f.op("LogicalAnd", finite, inside)
    return [ctx.create("LogicalAnd", [ok, f.op("Less", count, k)]).outputs[0]]


@_rule("ReverseSequence")
def _reverse_sequence_rule(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    attrs = {"seq_axis": int(ctx.attr("seq_dim")), "batch_axis": int(ctx.attr("batch_dim", 0))}
    x = _t(ins[0])
    if x.shape is not None:
        attrs = {k: v % len(x.shape) for k, v in attrs.items()}
    elif any(v < 0 for v in attrs.values()):
        raise UnsupportedError(f"{ctx.where()}: a negative axis needs the input's rank")
    return [ctx.create("ReverseSequence", ins[:2], attrs).outputs[0]]


# ---- softmax and its losses: TensorFlow's kernels compute these formulas (max subtracted first), built
# as tn.nn builds them ---------------------------------------------------------------------------------
@_rule("Softmax")
def _softmax(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    return [softmax_part(ctx, _t(ins[0]), -1)]


@_rule("LogSoftmax")
def _log_softmax(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    return [log_softmax_part(ctx, _t(ins[0]), -1)]


def _softmax_loss(ctx: ImportContext, x: Tensor, labels: Tensor) -> Outs:
    """The loss ``sum(-labels * log_softmax(x))`` per row and TensorFlow's second output, the
    gradient ``softmax(x) - labels`` (which TensorFlow's gradient of this op reads)."""
    f = _Formula(ctx, x)
    shifted, log_total = log_softmax_parts(ctx, x, -1)
    logp = f.op("Sub", shifted, log_total)
    loss = ctx.create("Neg", [ctx.create("Sum", [f.op("Mul", labels, logp)], {"axis": [-1], "keepdims": False},
                                         suffix="dot").outputs[0]], suffix="loss").outputs[0]
    backprop = ctx.create("Sub", [f.op("Exp", logp), labels]).outputs[0]
    return [loss, backprop]


@_rule("SoftmaxCrossEntropyWithLogits")
def _softmax_xent(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    return _softmax_loss(ctx, _t(ins[0]), _t(ins[1]))


@_rule("SparseSoftmaxCrossEntropyWithLogits")
def _sparse_softmax_xent(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The dense loss of one-hot labels (an out-of-range label makes a zero row, where TensorFlow
    raises on the CPU: the classes must be known when importing, and the labels are checked)."""
    x, labels = _t(ins[0]), _t(ins[1])
    classes = None if x.shape is None else x.shape[-1]
    if classes is None:
        raise UnsupportedError(f"{ctx.where()}: the number of classes must be known when importing")
    lab = labels if labels.dtype == dt.int32 else ctx.create("Cast", [labels], {"dtype": "int32"},
                                                             suffix="labels").outputs[0]
    lo = ctx.const(np.asarray(0, np.int32), [lab], suffix="lo")
    hi = ctx.const(np.asarray(classes, np.int32), [lab], suffix="hi")
    ok = ctx.create("LogicalAnd", [ctx.create("GreaterEqual", [lab, lo], suffix="ge").outputs[0],
                                   ctx.create("Less", [lab, hi], suffix="lt").outputs[0]], suffix="in_range").outputs[0]
    every = ctx.create("All", [ok], {"axis": None, "keepdims": False}, suffix="all_in_range").outputs[0]
    checked = ctx.create("Assert", [every, lab], {"message": f"{nd.name}: Received a label value outside the "
                                                  f"valid range of [0, {classes})"}, suffix="check").outputs[0]
    hot = ctx.create("Equal", [ctx.create("ExpandDims", [checked], {"axis": -1}, suffix="col").outputs[0],
                               ctx.const(np.arange(classes, dtype=np.int32), [lab], suffix="classes")],
                     suffix="hot").outputs[0]
    dense = ctx.create("Cast", [hot], {"dtype": x.dtype.name}, suffix="one_hot").outputs[0]
    return _softmax_loss(ctx, x, dense)


@_rule("DynamicStitch", "ParallelDynamicStitch")
def _dynamic_stitch(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``merged[indices[m][i]] = data[m][i]``. With indices known at import time and vector data (how
    tf.gradients computes a reduction's kept-dims shape from a run-time shape): a Pack of elements;
    with indices known when it runs (``DynamicPartition`` undone): ``import_scatter.stitched``.
    A scalar index stitches its scalar datum whole (a reduction over one axis given as a scalar,
    ``tf.reduce_sum(x, axis=1)``, whose gradient stitches the scalar ``1`` in at that axis)."""
    n = len(ins) // 2
    if any(ctx.static(t) is None for t in ctx.data_inputs()[:n]):  # (indices known when it runs)
        vals = [_t(ctx.range_tensor(x)) for x in ins]
        return [stitched(ctx, vals[:n], vals[n:])]
    index_lists = [ctx.static_int_list(t, "the indices") for t in ctx.data_inputs()[:n]]
    scalar = [v is not None and np.ndim(v) == 0 for v in (ctx.static(t) for t in ctx.data_inputs()[:n])]
    if ctx.static(f"{nd.name}:0") is not None:
        return [ctx.const(ctx.static(f"{nd.name}:0"), [x for x in ins if isinstance(x, Tensor)], suffix=None)]
    where: dict[int, tuple[int, int]] = {}
    for m, idx in enumerate(index_lists):
        for i, j in enumerate(idx):
            where[j] = (m, i)  # a later list wins, as in TensorFlow
    if sorted(where) != list(range(len(where))):
        raise UnsupportedError(f"{ctx.where()}: the indices must cover 0..n-1")
    for m in range(n):
        s = _t(ins[n + m]).shape
        if s is None or len(s) != (0 if scalar[m] else 1):
            raise UnsupportedError(f"{ctx.where()}: supported for vector data only")
    parts = [_t(ins[n + m]) if scalar[m] else _getitem(ctx, _t(ins[n + m]), (i,), f"part{j}")
             for j, (m, i) in sorted(where.items())]
    return [ctx.create("Pack", parts).outputs[0]]
