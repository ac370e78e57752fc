"""Import rules of TensorFlow's fused recurrent cells and their gradient ops: ``LSTMBlockCell`` /
``LSTMBlockCellGrad`` (TF1's ``LSTMBlockCell``, which the CPU builds of TF1 language models such as
the PTB tutorial chose for speed) and ``GRUBlockCell`` / ``GRUBlockCellGrad``.

Each is the formula TensorFlow's CPU kernel computes, written on existing Turnout primitives: the
gates come from one product of ``[x, h_prev]`` with the cell's weights, sliced by columns in the
kernel's order (``i, ci, f, o`` for the LSTM; ``r, u`` then ``c`` for the GRU). A training graph
holds the gradient ops beside them, as TF1's registered gradients wrote them; ``tn.gradients`` of an
imported cell differentiates its formula instead, with the same values.
"""

from __future__ import annotations

from typing import Any

from turnout.errors import UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef.import_context import ImportContext, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs, _Formula, _getitem, _t
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)


class _Cell(_Formula):
    """The formula helper with the column slices, concatenations and batch sums the cells need."""

    def cols(self, t: Tensor, start: int, stop: int) -> Tensor:
        self.k += 1
        return _getitem(self.ctx, t, (slice(None), slice(start, stop)), f"cols{self.k}")

    def concat(self, *ts: Tensor) -> Tensor:
        self.k += 1
        return self.ctx.create("Concat", list(ts), {"axis": 1}, suffix=f"concat{self.k}").outputs[0]

    def matmul(self, a: Tensor, b: Tensor, transpose_b: bool = False) -> Tensor:
        self.k += 1
        return self.ctx.create("MatMul", [a, b], {"transpose_a": False, "transpose_b": transpose_b},
                               suffix=f"matmul{self.k}").outputs[0]

    def batch_sum(self, t: Tensor) -> Tensor:
        self.k += 1
        return self.ctx.create("Sum", [t], {"axis": [0], "keepdims": False}, suffix=f"sum{self.k}").outputs[0]

    def gate_grad(self, y: Tensor) -> Tensor:
        """``y (1 - y)``: a sigmoid's derivative from its output."""
        return self.op("Mul", y, self.op("Sub", 1.0, y))

    def tanh_grad(self, y: Tensor) -> Tensor:
        """``1 - y^2``: a tanh's derivative from its output."""
        return self.op("Sub", 1.0, self.op("Mul", y, y))


def _sizes(ctx: ImportContext, w: Tensor, gates: int) -> tuple[int, int]:
    """The input's and the cell's widths, read off the weight matrix ``w`` (``[input + cell, gates *
    cell]``), whose shape a Variable's read knows: the kernel's column slices need them."""
    rows, cols = w.shape if w.shape is not None and len(w.shape) == 2 else (None, None)
    if rows is None or cols is None or cols % gates:
        raise UnsupportedError(f"{ctx.where()}: needs the weights as a matrix of known shape [input + cell, "
                               f"{gates} * cell], got shape {w.shape}")
    return rows - cols // gates, cols // gates


# ---- LSTM -------------------------------------------------------------------------------------------
@_rule("LSTMBlockCell")
def _lstm_block_cell(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(x, cs_prev, h_prev, w, wci, wcf, wco, b)`` -> ``(i, cs, f, o, ci, co, h)``: with
    ``icfo = [x, h_prev] w + b``, ``i = sigmoid(icfo_i + cs_prev wci)``, ``ci = tanh(icfo_c)``,
    ``f = sigmoid(icfo_f + forget_bias + cs_prev wcf)``, ``cs = ci i + cs_prev f`` (clipped to
    ``cell_clip`` where that is positive), ``co = tanh(cs)``, ``o = sigmoid(icfo_o + cs wco)``,
    ``h = co o`` (the peephole terms only with ``use_peephole``)."""
    x, cs_prev, h_prev, w, wci, wcf, wco, b = (_t(v) for v in ins[:8])
    f = _Cell(ctx, x)
    _, n = _sizes(ctx, w, 4)
    peephole = bool(ctx.attr("use_peephole", False))
    icfo = f.op("Add", f.matmul(f.concat(x, h_prev), w), b)
    i_in, c_in, f_in, o_in = (f.cols(icfo, k * n, (k + 1) * n) for k in range(4))
    if peephole:
        i_in, f_in = f.op("Add", i_in, f.op("Mul", cs_prev, wci)), f.op("Add", f_in, f.op("Mul", cs_prev, wcf))
    i = f.op("Sigmoid", i_in)
    ci = f.op("Tanh", c_in)
    fg = f.op("Sigmoid", f.op("Add", f_in, float(ctx.attr("forget_bias", 1.0))))
    cs = f.op("Add", f.op("Mul", ci, i), f.op("Mul", cs_prev, fg))
    clip = float(ctx.attr("cell_clip", 3.0))
    if clip > 0:
        cs = f.op("Minimum", f.op("Maximum", cs, -clip), clip)
    co = f.op("Tanh", cs)
    o = f.op("Sigmoid", f.op("Add", o_in, f.op("Mul", cs, wco)) if peephole else o_in)
    h = f.op("Mul", co, o)
    return [f.last(i), cs, fg, o, ci, co, h]


@_rule("LSTMBlockCellGrad")
def _lstm_block_cell_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(x, cs_prev, h_prev, w, wci, wcf, wco, b, i, cs, f, o, ci, co, cs_grad, h_grad)`` ->
    ``(cs_prev_grad, dicfo, wci_grad, wcf_grad, wco_grad)``, the kernel's backward step from the
    forward outputs: ``do = o (1 - o) h_grad co``; ``dcs = (1 - co^2) h_grad o + cs_grad`` (plus
    ``do wco``); ``dci = (1 - ci^2) dcs i``; ``df = f (1 - f) dcs cs_prev``; ``di = i (1 - i) dcs ci``;
    ``dicfo = [di, dci, df, do]``; ``cs_prev_grad = dcs f`` (plus ``di wci + df wcf``); the peephole
    weights' gradients summed over the batch (zeros without peepholes)."""
    _, cs_prev, _, _, wci, wcf, wco, _, i, cs, fg, o, ci, co, cs_grad, h_grad = (_t(v) for v in ins[:16])
    f = _Cell(ctx, cs_prev)
    peephole = bool(ctx.attr("use_peephole", False))
    do = f.op("Mul", f.op("Mul", f.gate_grad(o), h_grad), co)
    dcs = f.op("Add", f.op("Mul", f.op("Mul", f.tanh_grad(co), h_grad), o), cs_grad)
    if peephole:
        dcs = f.op("Add", dcs, f.op("Mul", do, wco))
    dci = f.op("Mul", f.op("Mul", f.tanh_grad(ci), dcs), i)
    df = f.op("Mul", f.op("Mul", f.gate_grad(fg), dcs), cs_prev)
    di = f.op("Mul", f.op("Mul", f.gate_grad(i), dcs), ci)
    cs_prev_grad = f.op("Mul", dcs, fg)
    if peephole:
        cs_prev_grad = f.op("Add", cs_prev_grad, f.op("Add", f.op("Mul", di, wci), f.op("Mul", df, wcf)))
        peeps = [f.batch_sum(f.op("Mul", di, cs_prev)), f.batch_sum(f.op("Mul", df, cs_prev)),
                 f.batch_sum(f.op("Mul", do, cs))]
    else:
        peeps = [f.op("ZerosLike", v) for v in (wci, wcf, wco)]
    return [f.last(cs_prev_grad), f.concat(di, dci, df, do), *peeps]


# ---- GRU --------------------------------------------------------------------------------------------
@_rule("GRUBlockCell")
def _gru_block_cell(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(x, h_prev, w_ru, w_c, b_ru, b_c)`` -> ``(r, u, c, h)``: ``[r, u] = sigmoid([x, h_prev] w_ru
    + b_ru)``, ``c = tanh([x, h_prev r] w_c + b_c)``, ``h = u h_prev + (1 - u) c``."""
    x, h_prev, w_ru, w_c, b_ru, b_c = (_t(v) for v in ins[:6])
    f = _Cell(ctx, x)
    _, n = _sizes(ctx, w_c, 1)
    ru = f.op("Sigmoid", f.op("Add", f.matmul(f.concat(x, h_prev), w_ru), b_ru))
    r, u = f.cols(ru, 0, n), f.cols(ru, n, 2 * n)
    c = f.op("Tanh", f.op("Add", f.matmul(f.concat(x, f.op("Mul", h_prev, r)), w_c), b_c))
    h = f.op("Add", f.op("Mul", u, h_prev), f.op("Mul", f.op("Sub", 1.0, u), c))
    return [f.last(r), u, c, h]


@_rule("GRUBlockCellGrad")
def _gru_block_cell_grad(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """``(x, h_prev, w_ru, w_c, b_ru, b_c, r, u, c, d_h)`` -> ``(d_x, d_h_prev, d_c_bar,
    d_r_bar_u_bar)``, the kernel's backward step: ``d_c_bar = d_h (1 - u) (1 - c^2)``; ``d_u_bar = d_h
    (h_prev - c) u (1 - u)``; with ``d_xhr = d_c_bar w_c^T``, ``d_r_bar = d_xhr_h h_prev r (1 - r)``;
    with ``d_xh = [d_r_bar, d_u_bar] w_ru^T``, ``d_x = d_xh_x + d_xhr_x`` and ``d_h_prev = d_xhr_h r
    + d_h u + d_xh_h``."""
    x, h_prev, w_ru, w_c, _, _, r, u, c, d_h = (_t(v) for v in ins[:10])
    f = _Cell(ctx, x)
    m, n = _sizes(ctx, w_c, 1)
    d_c_bar = f.op("Mul", f.op("Mul", d_h, f.op("Sub", 1.0, u)), f.tanh_grad(c))
    d_u_bar = f.op("Mul", f.op("Mul", d_h, f.op("Sub", h_prev, c)), f.gate_grad(u))
    d_xhr = f.matmul(d_c_bar, w_c, transpose_b=True)
    d_hr = f.cols(d_xhr, m, m + n)
    d_r_bar = f.op("Mul", f.op("Mul", d_hr, h_prev), f.gate_grad(r))
    d_ru = f.concat(d_r_bar, d_u_bar)
    d_xh = f.matmul(d_ru, w_ru, transpose_b=True)
    d_x = f.op("Add", f.cols(d_xh, 0, m), f.cols(d_xhr, 0, m))
    d_h_prev = f.op("Add", f.op("Add", f.op("Mul", d_hr, r), f.op("Mul", d_h, u)), f.cols(d_xh, m, m + n))
    return [f.last(d_x), d_h_prev, d_c_bar, d_ru]


__all__: list[str] = []
