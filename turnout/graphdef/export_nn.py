"""Export rules of the window primitives (``turnout.windows``): TensorFlow's ``Conv2D`` and its two
backprops, ``MaxPool`` / ``MaxPoolGrad`` and ``AvgPool`` / ``AvgPoolGrad``, in NHWC.

Where a gradient primitive takes a ``like`` tensor for its result's shape, TensorFlow takes the
shape itself: the rule exports the ``Shape`` of ``like`` (``turnout.graphdef.import_nn`` reads it
back as zeros of that shape).
"""

from __future__ import annotations

from typing import Any

from turnout import dtypes as dt
from turnout.graph import Node
from turnout.graphdef.export_context import Dt, ExportContext
from turnout.graphdef.export_context import Rule as _Rule
from turnout.graphdef.export_rules import _T, Outs
from turnout.tables import registrar

#: window primitive -> export rule (merged into the exporter's table)
WINDOW_RULES: dict[str, _Rule] = {}
_rule = registrar(WINDOW_RULES)


def _four(hw: Any) -> list[int]:
    return [1, int(hw[0]), int(hw[1]), 1]


def _attrs(n: Node, k: int) -> dict[str, Any]:
    """TensorFlow's attributes of a window op whose element type is that of input ``k``."""
    a = n.attrs
    window = {"dilations": _four(a["dilations"])} if "dilations" in a else {"ksize": _four(a["ksize"])}
    return {"T": _T(n, k), "strides": _four(a["strides"]), **window, "padding": str(a["padding"]),
            "data_format": "NHWC"}


def _shape_of(ctx: ExportContext, n: Node, k: int) -> str:
    """The TensorFlow tensor of the shape of input ``k`` (a ``like``), as int32."""
    s = ctx.add("Shape", [ctx.t(n.inputs[k])], {"T": _T(n, k), "out_type": Dt(dt.int32)}, suffix=f"shape{k}")
    return f"{s}:0"


@_rule("Conv2D", "MaxPool", "AvgPool", "MaxPoolGrad")
def _direct(ctx: ExportContext, n: Node) -> Outs:
    """Ops whose inputs are TensorFlow's: (input, filter), (value), (orig_input, orig_output, grad)."""
    return [f'{ctx.add(n.op, [ctx.t(t) for t in n.inputs], _attrs(n, 0))}:0']


@_rule("Conv2DBackpropInput")
def _conv2d_backprop_input(ctx: ExportContext, n: Node) -> Outs:
    ins = [_shape_of(ctx, n, 0), ctx.t(n.inputs[1]), ctx.t(n.inputs[2])]
    return [f'{ctx.add(n.op, ins, _attrs(n, 2))}:0']


@_rule("Conv2DBackpropFilter")
def _conv2d_backprop_filter(ctx: ExportContext, n: Node) -> Outs:
    ins = [ctx.t(n.inputs[0]), _shape_of(ctx, n, 1), ctx.t(n.inputs[2])]
    return [f'{ctx.add(n.op, ins, _attrs(n, 2))}:0']


@_rule("AvgPoolGrad")
def _avg_pool_grad(ctx: ExportContext, n: Node) -> Outs:
    return [f'{ctx.add(n.op, [_shape_of(ctx, n, 0), ctx.t(n.inputs[1])], _attrs(n, 1))}:0']
