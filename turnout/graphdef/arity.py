"""How many data inputs a GraphDef node of each op takes, checked before its import rule runs.

Why: an import rule reads the inputs it needs by position, so a node with more inputs than its op
takes imported with the extra ones ignored (an ``Identity`` of two read the first), and one with
fewer imported as another op (an ``AddV2`` of one input ran as an ``Identity``), silently, where
TensorFlow refuses such a GraphDef ("expected 2 inputs"). The counts are TensorFlow's op registry's,
for the ops of fixed arity and for those whose ``N`` attr gives the count (``VARIADIC``); the ops of
neither table (a function call, ``IdentityN``, the optimizer updates) are not checked here, their
rules reading what they need.
"""

from __future__ import annotations

from typing import Any

from turnout.errors import GraphBuildError

_UNARY = """Abs BiasAddGrad Ceil CheckNumerics Cos DiagPart Elu EnsureShape Enter Erf Exit Exp Expm1 Floor
Identity Inv InvertPermutation IsFinite IsInf IsNan L2Loss LeakyRelu Log Log1p LogSoftmax LogicalNot
LoopCond Neg NextIteration OnesLike Rank ReadVariableOp Reciprocal RefEnter RefExit RefIdentity
RefNextIteration Relu Relu6 Round Rsqrt Selu Shape Sigmoid Sign Sin Size Snapshot Softmax Softplus Sqrt
Square StopGradient Tanh Unique Unpack VariableShape ZerosLike Cast"""

_BINARY = """Add AddV2 All Any ArgMax ArgMin BatchMatMul BatchMatMulV2 BatchMatMulV3 BiasAdd BiasAddV1
BroadcastGradientArgs BroadcastTo Cumprod Cumsum Div DivNoNan EluGrad Equal ExpandDims Fill FloorDiv
FloorMod GatherNd Greater GreaterEqual InvGrad LeakyReluGrad Less LessEqual ListDiff LogicalAnd
LogicalOr MatMul Max Maximum Mean Min Minimum Mod Mul NotEqual Pad Pow Prod RealDiv ReciprocalGrad
Relu6Grad ReluGrad Reshape ReverseSequence ReverseV2 RsqrtGrad SeluGrad SigmoidGrad
SoftmaxCrossEntropyWithLogits SoftplusGrad SparseSoftmaxCrossEntropyWithLogits Split SqrtGrad
SquaredDifference Sub Sum Switch TanhGrad Tile TopKV2 Transpose TruncateDiv TruncateMod"""

_TERNARY = """ClipByValue GatherV2 PadV2 Range Select SelectV2 Slice SplitV UnsortedSegmentSum ScatterNd"""

#: op -> its number of data inputs (control inputs aside)
FIXED: dict[str, int] = {
    **{op: 1 for op in _UNARY.split()},
    **{op: 2 for op in _BINARY.split()},
    **{op: 3 for op in _TERNARY.split()},
    "OneHot": 4,
    "StridedSlice": 4,
    "StridedSliceGrad": 5,
}

#: op -> (how many inputs each of the ``N`` counts, how many besides): ``ConcatV2`` takes ``N`` values
#: and an axis, ``DynamicStitch`` ``N`` index tensors and ``N`` data tensors
VARIADIC: dict[str, tuple[int, int]] = {
    "AddN": (1, 0), "Pack": (1, 0), "Merge": (1, 0), "RefMerge": (1, 0), "ShapeN": (1, 0),
    "ConcatV2": (1, 1), "ConcatOffset": (1, 1), "DynamicStitch": (2, 0), "ParallelDynamicStitch": (2, 0),
}


def check_inputs(nd: Any, count: int) -> None:
    """Refuse NodeDef ``nd`` with ``count`` data inputs where its op takes another number (``FIXED``,
    or ``VARIADIC`` by its ``N`` attr, where it has one), naming the node, the op and both counts."""
    if nd.op in FIXED:
        want, why = FIXED[nd.op], ""
    elif nd.op in VARIADIC and "N" in nd.attr and nd.attr["N"].WhichOneof("value") == "i":
        per, extra = VARIADIC[nd.op]
        want, why = per * nd.attr["N"].i + extra, f"its N={nd.attr['N'].i} makes "
    else:
        return
    if count != want:
        raise GraphBuildError(f'{nd.op} node "{nd.name}" has {count} data input{"" if count == 1 else "s"}; '
                              f"{why}{nd.op} take{'' if why else 's'} {want}")


__all__ = ["FIXED", "VARIADIC", "check_inputs"]
