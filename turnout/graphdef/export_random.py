"""Export rule of ``RandomDraw``: TensorFlow's stateless random ops of version 2 with the Philox
algorithm, which draw exactly its numbers.

Why they agree: ``StatelessRandomUniformV2`` (``...NormalV2``, ``StatelessTruncatedNormalV2``,
``StatelessRandomUniformIntV2``) with ``alg`` 1 (Philox) fills its output with the same
distribution code as the stateful kernels, from a generator whose key is the uint64 ``key`` input
and whose 128-bit counter is the uint64 pair ``counter`` (low half first): key ``[seed]`` and
counter ``[counter, seed2]`` give ``RandomDraw``'s values from Philox call ``counter`` on (checked
in TensorFlow 2.21 for every distribution and dtype). The counter Variable, its read and update
export as any Variable's ops, so the exported graph draws the same stream step after step.
"""

from __future__ import annotations

import numpy as np

from turnout import dtypes as dt
from turnout.graph import Node
from turnout.graphdef.export_context import Dt, ExportContext, TfType, Value
from turnout.graphdef.export_context import Rule as _Rule
from turnout.graphdef.export_rules import Outs
from turnout.graphdef.protos import DT_UINT64
from turnout.tables import registrar

#: RandomDraw -> its export rule (merged into the exporter's table)
RANDOM_RULES: dict[str, _Rule] = {}
_rule = registrar(RANDOM_RULES)

_STATELESS = {"RandomUniform": "StatelessRandomUniformV2", "RandomStandardNormal": "StatelessRandomNormalV2",
              "TruncatedNormal": "StatelessTruncatedNormalV2", "RandomUniformInt": "StatelessRandomUniformIntV2"}
_PHILOX = 1  # TensorFlow's RNG_ALG_PHILOX


@_rule("RandomDraw")
def _random_draw(ctx: ExportContext, n: Node) -> Outs:
    shape, counter, *bounds = (ctx.t(t) for t in n.inputs)
    anchor = counter.split(":")[0]
    frame = [anchor] if ctx.frame() else []
    u64 = TfType(DT_UINT64)

    def const(value: np.ndarray, dtype: object, suffix: str) -> str:
        return f'{ctx.add("Const", [], {"dtype": dtype, "value": Value(value)}, suffix=suffix, control=frame)}:0'

    key = const(np.asarray([n.attrs["seed"]], np.uint64), u64, "key")
    low = f'{ctx.add("Cast", [counter], {"SrcT": Dt(dt.int64), "DstT": u64, "Truncate": False}, suffix="low")}:0'
    high = const(np.asarray(n.attrs["seed2"], np.uint64), u64, "high")
    pair = f'{ctx.add("Pack", [low, high], {"T": u64, "N": 2, "axis": 0}, suffix="counter")}:0'
    alg = const(np.asarray(_PHILOX, np.int32), Dt(dt.int32), "alg")
    attrs = {"dtype": Dt(dt.as_dtype(n.attrs["dtype"])), "Tshape": Dt(n.inputs[0].dtype)}
    return [f'{ctx.add(_STATELESS[n.attrs["distribution"]], [shape, key, pair, alg, *bounds], attrs)}:0']


__all__ = ["RANDOM_RULES"]
