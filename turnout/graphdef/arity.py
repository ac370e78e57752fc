"""How many data inputs a GraphDef node of each op takes, and of which dtype its typed inputs are,
checked before its import rule runs.

Why: an import rule reads the inputs it needs by position, so a node with more inputs than its op
takes imported with the extra ones ignored (an ``Identity`` of two read the first, a ``Tan`` of two
took the tangent of the first), and one with fewer imported as another op (an ``AddV2`` of one input
ran as an ``Identity``), silently, where TensorFlow refuses such a GraphDef ("expected 2 inputs").
Likewise a rule computes in its inputs' dtypes, so a ``Neg`` declared int32 that read a float32
imported as a float32 ``Neg``, and a ``Reshape`` whose ``Tshape`` says int64 read an int32 shape,
where TensorFlow refuses the GraphDef ("expected int32, got float").

The tables are TensorFlow's op registry's, for every op the import supports: the number of inputs of
each op of fixed arity (``FIXED``), the ops whose ``N`` attr gives the count (``VARIADIC``) or the
length of a type list (``BY_TYPE_LIST``), and which inputs each type attr types (``typed_inputs``:
``T``, ``Tidx``, ``Tshape`` and the like).
They are data, written by ``tools/tf_op_signatures.py --tables`` and checked against TensorFlow by
it where TensorFlow is installed, so that Turnout never imports TensorFlow; a test fails when an op
is supported and in none of the count tables.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from turnout import dtypes as dt
from turnout.errors import DTypeError, GraphBuildError
from turnout.graph import Tensor
from turnout.graphdef import protos

_BY_COUNT = {
    0: """Const ControlTrigger NoOp OptionalNone Placeholder VarHandleOp Variable VariableV2""",
    1: """Abs Acos Acosh Asin Asinh Atan Atanh AvgPool AvgPool3D BiasAddGrad Bucketize Cast Ceil CheckNumerics
Cholesky Cos Cosh DepthToSpace DiagPart Digamma Elu EnsureShape Enter Erf Erfc Exit Exp Expm1 Floor
Identity Inv InvertPermutation IsFinite IsInf IsNan IsVariableInitialized L2Loss LRN LeakyRelu
Lgamma Log Log1p LogMatrixDeterminant LogSoftmax LogUniformCandidateSampler LogicalNot LoopCond
MatrixDeterminant MatrixDiag MatrixDiagPart MatrixInverse MaxPool MaxPool3D Neg NextIteration
OnesLike OptionalGetValue PlaceholderWithDefault PreventGradient Qr RandomStandardNormal
RandomUniform Rank ReadVariableOp Reciprocal RefEnter RefExit RefIdentity RefNextIteration Relu
Relu6 Rint Round Rsqrt Selu Shape Sigmoid Sign Sin Sinh Size Snapshot Softmax Softplus Softsign
SpaceToDepth Sqrt Square Squeeze StackCloseV2 StackPopV2 StackV2 StopGradient Tan Tanh
TensorArrayCloseV3 TensorArrayV3 TensorListElementShape TensorListLength TopK TruncatedNormal Unique
UniqueWithCounts Unpack VarIsInitializedOp VariableShape Where ZerosLike""",
    2: """Add AddV2 All Any ArgMax ArgMin Assign AssignAdd AssignAddVariableOp AssignSub AssignSubVariableOp
AssignVariableOp Atan2 AvgPool3DGrad AvgPoolGrad BatchMatMul BatchMatMulV2 BatchMatMulV3
BatchToSpace BiasAdd BiasAddV1 BroadcastArgs BroadcastGradientArgs BroadcastTo ComputeAccidentalHits
Conv2D Conv3D Cumprod Cumsum DepthwiseConv2dNative Div DivNoNan DynamicPartition EluGrad
EmptyTensorList Equal ExpandDims Fill FloorDiv FloorMod GatherNd Greater GreaterEqual InTopK InvGrad
LeakyReluGrad Less LessEqual ListDiff LogicalAnd LogicalOr MatMul MatrixSetDiag MatrixSolve
MatrixTriangularSolve Max Maximum Mean Min Minimum MirrorPad MirrorPadGrad Mod Mul MulNoNan
Multinomial NotEqual Pad Pow Prod RealDiv ReciprocalGrad RefSwitch Relu6Grad ReluGrad Reshape
ResizeBilinear ResizeBilinearGrad ResizeNearestNeighbor ResizeNearestNeighborGrad ResourceGather
Reverse ReverseSequence ReverseV2 RsqrtGrad SegmentMax SegmentMean SegmentMin SegmentProd SegmentSum
SeluGrad SigmoidGrad SoftmaxCrossEntropyWithLogits SoftplusGrad SoftsignGrad SpaceToBatch
SparseSoftmaxCrossEntropyWithLogits Split SqrtGrad SquaredDifference StackPushV2 Sub Sum Switch
TanhGrad TensorArrayConcatV3 TensorArrayGradV3 TensorArraySizeV3 TensorListFromTensor
TensorListPopBack TensorListPushBack TensorListReserve TensorListStack Tile TopKV2 Transpose
TruncateDiv TruncateMod Xdivy Xlog1py Xlogy""",
    3: """ApplyGradientDescent BatchToSpaceND ClipByValue Conv2DBackpropFilter Conv2DBackpropInput
Conv3DBackpropFilterV2 Conv3DBackpropInputV2 DenseBincount DepthwiseConv2dNativeBackpropFilter
DepthwiseConv2dNativeBackpropInput GatherV2 InTopKV2 LRNGrad LinSpace MatrixBandPart
MatrixDiagPartV2 MatrixDiagPartV3 MatrixSetDiagV2 MatrixSetDiagV3 MaxPool3DGrad MaxPoolGrad PadV2
RandomUniformInt Range ResourceApplyGradientDescent ResourceScatterAdd ResourceScatterSub Roll
ScatterAdd ScatterNd ScatterNdAdd ScatterNdSub ScatterNdUpdate ScatterSub ScatterUpdate Select
SelectV2 Slice SpaceToBatchND SparseSegmentMean SparseSegmentSqrtN SparseSegmentSum SplitV
TensorArrayGatherV3 TensorArrayReadV3 TensorListGetItem TensorListSetItem TensorScatterAdd
TensorScatterSub TensorScatterUpdate UnsortedSegmentMax UnsortedSegmentMin UnsortedSegmentProd
UnsortedSegmentSum""",
    4: """ApplyAdagrad CTCLoss CropAndResize CropAndResizeGradBoxes CropAndResizeGradImage OneHot
ResourceApplyAdagrad SparseSegmentMeanGrad SparseSegmentMeanWithNumSegments SparseSegmentSqrtNGrad
SparseSegmentSqrtNWithNumSegments SparseSegmentSumGrad SparseSegmentSumWithNumSegments SparseToDense
StridedSlice TensorArrayScatterV3 TensorArraySplitV3 TensorArrayWriteV3""",
    5: """ApplyAdagradV2 ApplyMomentum ApplyProximalGradientDescent FusedBatchNorm FusedBatchNormGrad
FusedBatchNormGradV2 FusedBatchNormV2 FusedBatchNormV3 MatrixDiagV2 MatrixDiagV3 NonMaxSuppressionV3
ResourceApplyAdagradV2 ResourceApplyMomentum ResourceApplyProximalGradientDescent
ResourceSparseApplyAdagrad SparseApplyAdagrad StridedSliceGrad""",
    6: """ApplyProximalAdagrad FusedBatchNormGradV3 GRUBlockCell NonMaxSuppressionV5
ResourceApplyProximalAdagrad ResourceSparseApplyAdagradV2 ResourceSparseApplyMomentum
ResourceSparseApplyProximalGradientDescent SparseApplyAdagradV2 SparseApplyMomentum
SparseApplyProximalGradientDescent""",
    7: """ApplyAdadelta ResourceApplyAdadelta ResourceSparseApplyProximalAdagrad SparseApplyProximalAdagrad""",
    8: """ApplyFtrl ApplyRMSProp LSTMBlockCell ResourceApplyFtrl ResourceApplyRMSProp
ResourceSparseApplyAdadelta SparseApplyAdadelta""",
    9: """ApplyCenteredRMSProp ApplyFtrlV2 ResourceApplyCenteredRMSProp ResourceApplyFtrlV2
ResourceSparseApplyFtrl ResourceSparseApplyRMSProp SparseApplyFtrl SparseApplyRMSProp""",
    10: """ApplyAdam GRUBlockCellGrad ResourceApplyAdam ResourceSparseApplyCenteredRMSProp
ResourceSparseApplyFtrlV2 SparseApplyCenteredRMSProp SparseApplyFtrlV2""",
    16: """LSTMBlockCellGrad""",
}
_EVERY_INPUT_T = """Abs Acos Acosh Add AddV2 ApplyAdadelta ApplyAdagrad ApplyAdagradV2 ApplyAdam ApplyCenteredRMSProp
ApplyFtrl ApplyFtrlV2 ApplyGradientDescent ApplyMomentum ApplyProximalAdagrad
ApplyProximalGradientDescent ApplyRMSProp Asin Asinh Assign AssignAdd AssignSub Atan Atan2 Atanh
AvgPool AvgPool3D BatchMatMul BatchMatMulV2 BiasAdd BiasAddGrad BiasAddV1 BroadcastArgs
BroadcastGradientArgs Bucketize Ceil CheckNumerics Cholesky ClipByValue Conv2D Conv3D Cos Cosh
DepthToSpace DepthwiseConv2dNative DiagPart Digamma Div DivNoNan Elu EluGrad EnsureShape Enter Equal
Erf Erfc Exit Exp Expm1 Floor FloorDiv FloorMod FusedBatchNorm FusedBatchNormGrad GRUBlockCell
GRUBlockCellGrad Greater GreaterEqual Identity Inv InvGrad InvertPermutation IsFinite IsInf IsNan
L2Loss LRN LRNGrad LSTMBlockCell LSTMBlockCellGrad LeakyRelu LeakyReluGrad Less LessEqual Lgamma
ListDiff Log Log1p LogMatrixDeterminant LogSoftmax MatMul MatrixDeterminant MatrixDiag
MatrixDiagPart MatrixInverse MatrixSetDiag MatrixSolve MatrixTriangularSolve MaxPool MaxPool3D
MaxPoolGrad Maximum Minimum Mod Mul MulNoNan Neg NextIteration NotEqual OnesLike Pow PreventGradient
Qr RandomStandardNormal RandomUniform Rank RealDiv Reciprocal ReciprocalGrad RefEnter RefExit
RefIdentity RefNextIteration Relu Relu6 Relu6Grad ReluGrad Rint Round Rsqrt RsqrtGrad Selu SeluGrad
Shape Sigmoid SigmoidGrad Sign Sin Sinh Size Snapshot Softmax SoftmaxCrossEntropyWithLogits Softplus
SoftplusGrad Softsign SoftsignGrad SpaceToDepth Sqrt SqrtGrad Square SquaredDifference Squeeze
StopGradient Sub Tan Tanh TanhGrad TopK TruncateDiv TruncateMod TruncatedNormal Unique
UniqueWithCounts Unpack Where Xdivy Xlog1py Xlogy ZerosLike"""
_TYPED_BY: dict[str, dict[str, tuple[int, ...]]] = {
    "All": {"Tidx": (1,)},
    "Any": {"Tidx": (1,)},
    "ArgMax": {"T": (0,), "Tidx": (1,)},
    "ArgMin": {"T": (0,), "Tidx": (1,)},
    "AssignAddVariableOp": {"dtype": (1,)},
    "AssignSubVariableOp": {"dtype": (1,)},
    "AssignVariableOp": {"dtype": (1,)},
    "AvgPool3DGrad": {"T": (1,)},
    "AvgPoolGrad": {"T": (1,)},
    "BatchMatMulV3": {"Ta": (0,), "Tb": (1,)},
    "BatchToSpace": {"T": (0,), "Tidx": (1,)},
    "BatchToSpaceND": {"T": (0,), "Tblock_shape": (1,), "Tcrops": (2,)},
    "BroadcastTo": {"T": (0,), "Tidx": (1,)},
    "CTCLoss": {"T": (0,)},
    "Cast": {"SrcT": (0,)},
    "Conv2DBackpropFilter": {"T": (0, 2)},
    "Conv2DBackpropInput": {"T": (1, 2)},
    "Conv3DBackpropFilterV2": {"T": (0, 2)},
    "Conv3DBackpropInputV2": {"T": (1, 2), "Tshape": (0,)},
    "CropAndResize": {"T": (0,)},
    "CropAndResizeGradBoxes": {"T": (1,)},
    "Cumprod": {"T": (0,), "Tidx": (1,)},
    "Cumsum": {"T": (0,), "Tidx": (1,)},
    "DenseBincount": {"T": (2,), "Tidx": (0, 1)},
    "DepthwiseConv2dNativeBackpropFilter": {"T": (0, 2)},
    "DepthwiseConv2dNativeBackpropInput": {"T": (1, 2)},
    "DynamicPartition": {"T": (0,)},
    "EmptyTensorList": {"shape_type": (0,)},
    "ExpandDims": {"T": (0,), "Tdim": (1,)},
    "Fill": {"T": (1,), "index_type": (0,)},
    "FusedBatchNormGradV2": {"T": (0, 1), "U": (3, 4)},
    "FusedBatchNormGradV3": {"T": (0, 1), "U": (3, 4, 5)},
    "FusedBatchNormV2": {"T": (0,), "U": (1, 2, 3, 4)},
    "FusedBatchNormV3": {"T": (0,), "U": (1, 2, 3, 4)},
    "GatherNd": {"Tindices": (1,), "Tparams": (0,)},
    "GatherV2": {"Taxis": (2,), "Tindices": (1,), "Tparams": (0,)},
    "InTopK": {"T": (1,)},
    "InTopKV2": {"T": (1, 2)},
    "IsVariableInitialized": {"dtype": (0,)},
    "LinSpace": {"T": (0, 1), "Tidx": (2,)},
    "MatrixBandPart": {"T": (0,), "Tindex": (1, 2)},
    "MatrixDiagPartV2": {"T": (0, 2)},
    "MatrixDiagPartV3": {"T": (0, 2)},
    "MatrixDiagV2": {"T": (0, 4)},
    "MatrixDiagV3": {"T": (0, 4)},
    "MatrixSetDiagV2": {"T": (0, 1)},
    "MatrixSetDiagV3": {"T": (0, 1)},
    "Max": {"T": (0,), "Tidx": (1,)},
    "MaxPool3DGrad": {"T": (2,), "TInput": (0, 1)},
    "Mean": {"T": (0,), "Tidx": (1,)},
    "Min": {"T": (0,), "Tidx": (1,)},
    "MirrorPad": {"T": (0,), "Tpaddings": (1,)},
    "MirrorPadGrad": {"T": (0,), "Tpaddings": (1,)},
    "Multinomial": {"T": (0,)},
    "NonMaxSuppressionV3": {"T": (0, 1), "T_threshold": (3, 4)},
    "NonMaxSuppressionV5": {"T": (0, 1, 3, 4, 5)},
    "OneHot": {"T": (2, 3), "TI": (0,)},
    "Pad": {"T": (0,), "Tpaddings": (1,)},
    "PadV2": {"T": (0, 2), "Tpaddings": (1,)},
    "PlaceholderWithDefault": {"dtype": (0,)},
    "Prod": {"T": (0,), "Tidx": (1,)},
    "RandomUniformInt": {"T": (0,), "Tout": (1, 2)},
    "Range": {"Tidx": (0, 1, 2)},
    "RefSwitch": {"T": (0,)},
    "Reshape": {"T": (0,), "Tshape": (1,)},
    "ResizeBilinear": {"T": (0,)},
    "ResizeBilinearGrad": {"T": (1,)},
    "ResizeNearestNeighbor": {"T": (0,)},
    "ResizeNearestNeighborGrad": {"T": (0,)},
    "ResourceApplyAdadelta": {"T": (3, 4, 5, 6)},
    "ResourceApplyAdagrad": {"T": (2, 3)},
    "ResourceApplyAdagradV2": {"T": (2, 3, 4)},
    "ResourceApplyAdam": {"T": (3, 4, 5, 6, 7, 8, 9)},
    "ResourceApplyCenteredRMSProp": {"T": (4, 5, 6, 7, 8)},
    "ResourceApplyFtrl": {"T": (3, 4, 5, 6, 7)},
    "ResourceApplyFtrlV2": {"T": (3, 4, 5, 6, 7, 8)},
    "ResourceApplyGradientDescent": {"T": (1, 2)},
    "ResourceApplyMomentum": {"T": (2, 3, 4)},
    "ResourceApplyProximalAdagrad": {"T": (2, 3, 4, 5)},
    "ResourceApplyProximalGradientDescent": {"T": (1, 2, 3, 4)},
    "ResourceApplyRMSProp": {"T": (3, 4, 5, 6, 7)},
    "ResourceGather": {"Tindices": (1,)},
    "ResourceScatterAdd": {"Tindices": (1,), "dtype": (2,)},
    "ResourceScatterSub": {"Tindices": (1,), "dtype": (2,)},
    "ResourceSparseApplyAdadelta": {"T": (3, 4, 5, 6), "Tindices": (7,)},
    "ResourceSparseApplyAdagrad": {"T": (2, 3), "Tindices": (4,)},
    "ResourceSparseApplyAdagradV2": {"T": (2, 3, 4), "Tindices": (5,)},
    "ResourceSparseApplyCenteredRMSProp": {"T": (4, 5, 6, 7, 8), "Tindices": (9,)},
    "ResourceSparseApplyFtrl": {"T": (3, 5, 6, 7, 8), "Tindices": (4,)},
    "ResourceSparseApplyFtrlV2": {"T": (3, 5, 6, 7, 8, 9), "Tindices": (4,)},
    "ResourceSparseApplyMomentum": {"T": (2, 3, 5), "Tindices": (4,)},
    "ResourceSparseApplyProximalAdagrad": {"T": (2, 3, 4, 5), "Tindices": (6,)},
    "ResourceSparseApplyProximalGradientDescent": {"T": (1, 2, 3, 4), "Tindices": (5,)},
    "ResourceSparseApplyRMSProp": {"T": (3, 4, 5, 6, 7), "Tindices": (8,)},
    "Reverse": {"T": (0,)},
    "ReverseSequence": {"T": (0,), "Tlen": (1,)},
    "ReverseV2": {"T": (0,), "Tidx": (1,)},
    "Roll": {"T": (0,), "Taxis": (2,), "Tshift": (1,)},
    "ScatterAdd": {"T": (0, 2), "Tindices": (1,)},
    "ScatterNd": {"T": (1,), "Tindices": (0, 2)},
    "ScatterNdAdd": {"T": (0, 2), "Tindices": (1,)},
    "ScatterNdSub": {"T": (0, 2), "Tindices": (1,)},
    "ScatterNdUpdate": {"T": (0, 2), "Tindices": (1,)},
    "ScatterSub": {"T": (0, 2), "Tindices": (1,)},
    "ScatterUpdate": {"T": (0, 2), "Tindices": (1,)},
    "SegmentMax": {"T": (0,), "Tindices": (1,)},
    "SegmentMean": {"T": (0,), "Tindices": (1,)},
    "SegmentMin": {"T": (0,), "Tindices": (1,)},
    "SegmentProd": {"T": (0,), "Tindices": (1,)},
    "SegmentSum": {"T": (0,), "Tindices": (1,)},
    "Select": {"T": (1, 2)},
    "SelectV2": {"T": (1, 2)},
    "Slice": {"Index": (1, 2), "T": (0,)},
    "SpaceToBatch": {"T": (0,), "Tpaddings": (1,)},
    "SpaceToBatchND": {"T": (0,), "Tblock_shape": (1,), "Tpaddings": (2,)},
    "SparseApplyAdadelta": {"T": (0, 1, 2, 3, 4, 5, 6), "Tindices": (7,)},
    "SparseApplyAdagrad": {"T": (0, 1, 2, 3), "Tindices": (4,)},
    "SparseApplyAdagradV2": {"T": (0, 1, 2, 3, 4), "Tindices": (5,)},
    "SparseApplyCenteredRMSProp": {"T": (0, 1, 2, 3, 4, 5, 6, 7, 8), "Tindices": (9,)},
    "SparseApplyFtrl": {"T": (0, 1, 2, 3, 5, 6, 7, 8), "Tindices": (4,)},
    "SparseApplyFtrlV2": {"T": (0, 1, 2, 3, 5, 6, 7, 8, 9), "Tindices": (4,)},
    "SparseApplyMomentum": {"T": (0, 1, 2, 3, 5), "Tindices": (4,)},
    "SparseApplyProximalAdagrad": {"T": (0, 1, 2, 3, 4, 5), "Tindices": (6,)},
    "SparseApplyProximalGradientDescent": {"T": (0, 1, 2, 3, 4), "Tindices": (5,)},
    "SparseApplyRMSProp": {"T": (0, 1, 2, 3, 4, 5, 6, 7), "Tindices": (8,)},
    "SparseSegmentMean": {"T": (0,), "Tidx": (1,), "Tsegmentids": (2,)},
    "SparseSegmentMeanGrad": {"T": (0,), "Tidx": (1,), "Tsegmentids": (2,)},
    "SparseSegmentMeanWithNumSegments": {"T": (0,), "Tidx": (1,), "Tnumsegments": (3,), "Tsegmentids": (2,)},
    "SparseSegmentSqrtN": {"T": (0,), "Tidx": (1,), "Tsegmentids": (2,)},
    "SparseSegmentSqrtNGrad": {"T": (0,), "Tidx": (1,), "Tsegmentids": (2,)},
    "SparseSegmentSqrtNWithNumSegments": {"T": (0,), "Tidx": (1,), "Tnumsegments": (3,), "Tsegmentids": (2,)},
    "SparseSegmentSum": {"T": (0,), "Tidx": (1,), "Tsegmentids": (2,)},
    "SparseSegmentSumGrad": {"T": (0,), "Tidx": (1,), "Tsegmentids": (2,)},
    "SparseSegmentSumWithNumSegments": {"T": (0,), "Tidx": (1,), "Tnumsegments": (3,), "Tsegmentids": (2,)},
    "SparseSoftmaxCrossEntropyWithLogits": {"T": (0,), "Tlabels": (1,)},
    "SparseToDense": {"T": (2, 3), "Tindices": (0, 1)},
    "Split": {"T": (1,)},
    "SplitV": {"T": (0,), "Tlen": (1,)},
    "StackPushV2": {"T": (1,)},
    "StridedSlice": {"Index": (1, 2, 3), "T": (0,)},
    "StridedSliceGrad": {"Index": (0, 1, 2, 3), "T": (4,)},
    "Sum": {"T": (0,), "Tidx": (1,)},
    "Switch": {"T": (0,)},
    "TensorArrayScatterV3": {"T": (2,)},
    "TensorArraySplitV3": {"T": (1,)},
    "TensorArrayWriteV3": {"T": (2,)},
    "TensorListFromTensor": {"element_dtype": (0,), "shape_type": (1,)},
    "TensorListGetItem": {"Tshape": (2,)},
    "TensorListPushBack": {"element_dtype": (1,)},
    "TensorListReserve": {"shape_type": (0,)},
    "TensorListSetItem": {"element_dtype": (2,)},
    "TensorScatterAdd": {"T": (0, 2), "Tindices": (1,)},
    "TensorScatterSub": {"T": (0, 2), "Tindices": (1,)},
    "TensorScatterUpdate": {"T": (0, 2), "Tindices": (1,)},
    "Tile": {"T": (0,), "Tmultiples": (1,)},
    "TopKV2": {"T": (0,), "Tk": (1,)},
    "Transpose": {"T": (0,), "Tperm": (1,)},
    "UnsortedSegmentMax": {"T": (0,), "Tindices": (1,), "Tnumsegments": (2,)},
    "UnsortedSegmentMin": {"T": (0,), "Tindices": (1,), "Tnumsegments": (2,)},
    "UnsortedSegmentProd": {"T": (0,), "Tindices": (1,), "Tnumsegments": (2,)},
    "UnsortedSegmentSum": {"T": (0,), "Tindices": (1,), "Tnumsegments": (2,)},
}


#: op -> its number of data inputs (control inputs aside)
FIXED: dict[str, int] = {op: n for n, ops in _BY_COUNT.items() for op in ops.split()}

#: op -> (how many inputs each of the ``N`` counts, how many besides): ``ConcatV2`` takes ``N`` values
#: and an axis, ``DynamicStitch`` ``N`` index tensors and ``N`` data tensors
VARIADIC: dict[str, tuple[int, int]] = {
    "AddN": (1, 0), "Pack": (1, 0), "Merge": (1, 0), "RefMerge": (1, 0), "ShapeN": (1, 0), "Einsum": (1, 0),
    "ConcatV2": (1, 1), "ConcatOffset": (1, 1), "DynamicStitch": (2, 0), "ParallelDynamicStitch": (2, 0),
}

#: op -> (the type-list attr whose length counts its inputs, how many besides): an ``If`` takes its
#: predicate and one input per entry of ``Tin``
BY_TYPE_LIST: dict[str, tuple[str, int]] = {
    "Assert": ("T", 1), "Print": ("U", 1), "IdentityN": ("T", 0), "OptionalFromValue": ("Toutput_types", 0),
    "If": ("Tin", 1), "StatelessIf": ("Tin", 1), "Case": ("Tin", 1), "StatelessCase": ("Tin", 1),
    "While": ("T", 0), "StatelessWhile": ("T", 0), "PartitionedCall": ("Tin", 0),
    "StatefulPartitionedCall": ("Tin", 0),
}

_EVERY = frozenset(_EVERY_INPUT_T.split())


def typed_inputs(op: str, count: int = 0) -> dict[str, tuple[int, ...]]:
    """``op``'s type attrs with the positions of the inputs each types: ``T`` for every input of an
    element-wise op; a ``Reshape``'s ``T`` its tensor and its ``Tshape`` its shape. For an op of
    ``VARIADIC`` arity, of a node with ``count`` data inputs: ``T`` types every value (a
    ``ConcatV2``'s ``Tidx`` its axis, a ``DynamicStitch``'s indices are int32; a ``ConcatOffset``'s
    ``shape_type`` its shapes)."""
    if op in _EVERY:
        return {"T": tuple(range(FIXED[op]))}
    if op in VARIADIC:
        return _VARIADIC_TYPED.get(op, _all_t)(count)
    return _TYPED_BY.get(op, {})


def _all_t(count: int) -> dict[str, tuple[int, ...]]:
    return {"T": tuple(range(count))}


def _stitch(count: int) -> dict[str, tuple[int, ...]]:
    return {"T": tuple(range(count // 2, count))}  # (the data; the indices before them are int32)


#: the variadic ops whose inputs are not all typed by ``T``, by the number of inputs of a node
_VARIADIC_TYPED: dict[str, Callable[[int], dict[str, tuple[int, ...]]]] = {
    "ConcatV2": lambda count: {"T": tuple(range(count - 1)), "Tidx": (count - 1,)} if count else {},
    "ConcatOffset": lambda count: {"shape_type": tuple(range(1, count))},
    "DynamicStitch": _stitch,
    "ParallelDynamicStitch": _stitch,
}


def _expected(nd: Any) -> tuple[int, str] | None:
    """How many data inputs NodeDef ``nd`` must have, and what of its attrs says so (None: unknown)."""
    if nd.op in FIXED:
        return FIXED[nd.op], ""
    if nd.op in VARIADIC and "N" in nd.attr and nd.attr["N"].WhichOneof("value") == "i":
        per, extra = VARIADIC[nd.op]
        return per * nd.attr["N"].i + extra, f"its N={nd.attr['N'].i} makes "
    if nd.op in BY_TYPE_LIST:
        attr, extra = BY_TYPE_LIST[nd.op]
        if attr in nd.attr and nd.attr[attr].WhichOneof("value") == "list":
            n = len(nd.attr[attr].list.type)
            return n + extra, f"its {attr} of {n} type{'' if n == 1 else 's'} makes "
    return None


def check_inputs(nd: Any, count: int) -> None:
    """Refuse NodeDef ``nd`` with ``count`` data inputs where its op takes another number (``FIXED``;
    ``VARIADIC`` by its ``N`` attr; ``BY_TYPE_LIST`` by its type list), naming the node, the op and
    both counts."""
    got = _expected(nd)
    if got is None:
        return
    want, why = got
    if count != want:
        raise GraphBuildError(f'{nd.op} node "{nd.name}" has {count} data input{"" if count == 1 else "s"}; '
                              f"{why}{nd.op} take{'' if why else 's'} {want}")


def check_input_types(nd: Any, ins: list[Any]) -> None:
    """Refuse NodeDef ``nd`` one of whose imported inputs ``ins`` is not of the dtype the type attr
    that types it declares (``typed_inputs``: ``T``, ``Tidx``, ``Tshape``, ...), naming the node,
    the attr, the input and both dtypes. Only plain tensors are compared (a TensorArray's flow, a
    TensorList, a Variable's ref stand for TensorFlow values the import represents in its own way),
    and only where the attr is a dtype Turnout has (a resource or variant declares nothing here)."""
    for attr, positions in typed_inputs(nd.op, len(ins)).items():
        if attr not in nd.attr or nd.attr[attr].WhichOneof("value") != "type":
            continue
        enum = nd.attr[attr].type
        for k in positions:
            v = ins[k] if k < len(ins) else None
            wrong = declared_mismatch(enum, v)
            if wrong is not None and v is not None:
                declared = protos.type_name(protos.base_type(enum))
                raise DTypeError(f'{nd.op} node "{nd.name}": its {attr} declares {declared}, but '
                                 f"input {k} ({v.name}) is {wrong}")


def declared_mismatch(enum: int, v: Any) -> str | None:
    """The dtype name of value ``v`` where the type it is declared to have (``enum``, a DataType: a
    node's type attr, a function's argument or output, an entry of a type list) cannot be it, else
    None. The one rule of the node checks above and of the function checks
    (``import_functions``). Only plain tensors are compared: a TensorArray's flow, a TensorList, a
    Variable's ref or resource stand for TensorFlow values the import represents in its own way; and
    only where the declared type is one Turnout has (a resource, a variant, a type of 0, which an
    attr-typed argument has, or a type Turnout does not import declares nothing it can check)."""
    if not isinstance(v, Tensor) or v.dtype.is_opaque:  # (a resource, a TensorArray, a TensorList: opaque)
        return None
    want = protos.TF_TO_DTYPE.get(protos.base_type(enum))
    if want is None or want == dt.resource or want == v.dtype:
        return None
    return v.dtype.name


__all__ = ["BY_TYPE_LIST", "FIXED", "VARIADIC", "check_input_types", "check_inputs", "declared_mismatch",
           "typed_inputs"]
