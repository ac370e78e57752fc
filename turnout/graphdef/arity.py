"""How many data inputs a GraphDef node of each op takes, and of which dtype for the element-wise
ops, checked before its import rule runs.

Why: an import rule reads the inputs it needs by position, so a node with more inputs than its op
takes imported with the extra ones ignored (an ``Identity`` of two read the first), and one with
fewer imported as another op (an ``AddV2`` of one input ran as an ``Identity``), silently, where
TensorFlow refuses such a GraphDef ("expected 2 inputs"). The counts are TensorFlow's op registry's,
for the ops of fixed arity and for those whose ``N`` attr gives the count (``VARIADIC``); the ops of
neither table (a function call, ``IdentityN``, the optimizer updates) are not checked here, their
rules reading what they need.

The element-wise math ops (``ALL_T``) take every data input of the dtype their ``T`` attr declares;
their rules compute in the inputs' dtype, so a ``Neg`` declared int32 that read a float32 imported as
a float32 ``Neg``, where TensorFlow refuses the GraphDef ("expected int32, got float"). The other
ops' type attrs are not compared (which input a ``T`` types is each op's own signature).
"""

from __future__ import annotations

from typing import Any

from turnout.errors import DTypeError, GraphBuildError
from turnout.graph import Tensor
from turnout.graphdef import protos

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

#: the element-wise ops whose every data input is of the dtype their ``T`` attr declares
ALL_T = frozenset("""Abs Ceil CheckNumerics Cos Elu Erf Exp Expm1 Floor Inv IsFinite IsInf IsNan L2Loss LeakyRelu
Log Log1p LogSoftmax Neg OnesLike Reciprocal Relu Relu6 Round Rsqrt Selu Sigmoid Sign Sin Softmax Softplus Sqrt
Square Tanh ZerosLike Add AddV2 AddN Sub Mul Div RealDiv DivNoNan FloorDiv FloorMod Mod TruncateDiv TruncateMod
Maximum Minimum Pow SquaredDifference Equal NotEqual Less LessEqual Greater GreaterEqual MatMul BatchMatMul
BatchMatMulV2 BiasAdd BiasAddV1 EluGrad InvGrad LeakyReluGrad ReciprocalGrad Relu6Grad ReluGrad RsqrtGrad
SeluGrad SigmoidGrad SoftplusGrad SqrtGrad TanhGrad""".split())

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


def check_input_types(nd: Any, ins: list[Any]) -> None:
    """Refuse an element-wise NodeDef ``nd`` (``ALL_T``) one of whose imported inputs ``ins`` is not of
    the dtype its ``T`` attr declares, naming the node, the input and both dtypes. Only plain tensors
    are compared (a TensorArray's flow, a TensorList, a Variable's ref stand for TensorFlow values
    the import represents in its own way); a node without a ``T`` type declares nothing."""
    if nd.op not in ALL_T or "T" not in nd.attr or nd.attr["T"].WhichOneof("value") != "type":
        return
    enum = nd.attr["T"].type
    base = enum - 100 if enum > 100 else enum
    want = protos.TF_TO_DTYPE.get(base)
    for k, v in enumerate(ins):
        if isinstance(v, Tensor) and not v.dtype.is_opaque and v.dtype != want:
            declared = protos.TF_TYPE_NAMES.get(base, f"enum {base}")
            raise DTypeError(f'{nd.op} node "{nd.name}": its T declares {declared}, but input {k} ({v.name}) is '
                             f"{v.dtype.name}")


__all__ = ["ALL_T", "FIXED", "VARIADIC", "check_input_types", "check_inputs"]
