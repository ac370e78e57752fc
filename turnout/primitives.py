"""The one place where every primitive of the language is declared.

Why: each interpreter (reference kernels, the structured evaluator, the small-step rules, JAX lowering,
gradient rules, z3 encodings, shape inference) is a *table keyed by primitive name*. A test walks this
declaration and checks that every primitive has an entry in every table, or is listed as deliberately
unsupported there. Adding a primitive therefore starts here.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnout.errors import NotFoundError


@dataclass(frozen=True)
class Primitive:
    """A primitive op.

    kind: ``compute`` (pure kernel over values), ``control`` (the paper's control-flow primitives),
    ``state`` (reads or writes run-time state: Variables, gradient stacks), ``source`` (Const,
    Placeholder), ``structural`` (NoOp), ``transfer`` (Send and Recv: made only by partitioning, they
    move a token, live or dead, between devices through the rendezvous).
    """

    name: str
    kind: str
    differentiable: bool = True
    doc: str = ""


_P = Primitive
_DECLS: list[Primitive] = [
    # sources
    _P("Const", "source", False, "a constant value (attr value)"),
    _P("Placeholder", "source", False, "a value that must be fed"),
    # control flow: the paper, Sec. 3
    _P("Switch", "control", True, "forward data to output pred; the other output is dead"),
    _P("Merge", "control", True, "forward the first live input, with its index"),
    _P("Enter", "control", True, "move a value into a child frame"),
    _P("Exit", "control", True, "move a value out of a frame to its parent"),
    _P("NextIteration", "control", True, "move a value to the next iteration"),
    _P("LoopCond", "control", False, "the loop predicate: the pivot"),
    _P("NoOp", "structural", False, "does nothing; used to group control dependencies"),
    # elementwise
    _P("Identity", "compute"),
    _P("Sleep", "compute", True, "its input, after the host waits attr seconds: a stand-in for I/O in benchmarks"),
    _P("Assert", "compute", True, "input 1, once input 0 (a bool scalar) is true; else a KernelError (attr message, "
                                  "then the inputs after 1 shown as attrs shown and summarize say)"),
    _P("Add", "compute"),
    _P("Sub", "compute"),
    _P("Mul", "compute"),
    _P("Div", "compute"),
    _P("Neg", "compute"),
    _P("Tanh", "compute"),
    _P("Sigmoid", "compute"),
    _P("Exp", "compute"),
    _P("Log", "compute"),
    _P("Sqrt", "compute"),
    _P("Log1p", "compute", True, "log(1 + x), exact for small x (TensorFlow's softplus and log1p)"),
    _P("Expm1", "compute", True, "exp(x) - 1, exact for small x (TensorFlow's elu and selu)"),
    _P("Erf", "compute", True, "the error function (TensorFlow's gelu)"),
    _P("Sin", "compute"),
    _P("Cos", "compute"),
    _P("Tan", "compute"),
    _P("Asin", "compute"),
    _P("Acos", "compute"),
    _P("Atan", "compute"),
    _P("Atan2", "compute", True, "the angle of the point (x, y) for inputs (y, x), in [-pi, pi] (TensorFlow's atan2)"),
    _P("Sinh", "compute"),
    _P("Cosh", "compute"),
    _P("Asinh", "compute"),
    _P("Acosh", "compute"),
    _P("Atanh", "compute"),
    _P("Erfc", "compute", True, "1 - erf(x), exact where erf(x) is near 1 (TensorFlow's erfc)"),
    _P("Lgamma", "compute", True, "log |Gamma(x)| (TensorFlow's lgamma)"),
    _P("Digamma", "compute", True, "the derivative of lgamma (no gradient: TensorFlow's is polygamma, not built)"),
    _P("Floor", "compute", False, "round toward -inf (piecewise constant: no gradient, as in TensorFlow)"),
    _P("Ceil", "compute", False, "round toward +inf (piecewise constant: no gradient, as in TensorFlow)"),
    _P("Round", "compute", False, "round half to even, as TensorFlow (piecewise constant: no gradient)"),
    _P("Square", "compute"),
    _P("Abs", "compute"),
    _P("Sign", "compute", False),
    _P("Relu", "compute"),
    _P("Maximum", "compute"),
    _P("Minimum", "compute"),
    _P("Pow", "compute"),
    _P("FloorMod", "compute"),
    _P("Less", "compute", False),
    _P("LessEqual", "compute", False),
    _P("Greater", "compute", False),
    _P("GreaterEqual", "compute", False),
    _P("Equal", "compute", False),
    _P("NotEqual", "compute", False),
    _P("LogicalAnd", "compute", False),
    _P("LogicalOr", "compute", False),
    _P("LogicalNot", "compute", False),
    _P("Select", "compute"),
    _P("Cast", "compute"),
    _P("StopGradient", "compute", False, "identity whose gradient is not propagated"),
    _P("PreventGradient", "compute", False,
       "identity whose gradient is refused: a gradient through it is an error quoting attr message"),
    # linear algebra and structure
    _P("MatMul", "compute"),
    _P("MatrixInverse", "compute", True,
       "the inverse of each square matrix of the last two axes (of its transpose with attr adjoint); a zero "
       "pivot of its LU factorisation is a KernelError"),
    _P("Cholesky", "compute", True,
       "the lower factor L of each symmetric positive-definite matrix A = L L^T of the last two axes, read from "
       "A's lower triangle; one that is not positive definite is a KernelError"),
    _P("MatrixTriangularSolve", "compute", True,
       "x with tri(a) x = b (tri(a)^T x = b with attr adjoint), tri the attr lower (else upper) triangle of each "
       "square matrix a; the batch axes of a and b broadcast"),
    _P("MatrixSolve", "compute", True,
       "x with a x = b (a^T x = b with attr adjoint) for each square matrix a and right-hand side b of the same "
       "batch; a zero pivot of a's LU factorisation is a KernelError"),
    _P("MatrixDeterminant", "compute", True, "the determinant of each square matrix of the last two axes"),
    _P("LogMatrixDeterminant", "compute", True,
       "the sign and the log of the magnitude of the determinant of each square matrix of the last two axes"),
    _P("Reshape", "compute"),
    _P("ReshapeTo", "compute", True, "reshape x to a run-time shape (an int32 vector; one -1 takes the rest)"),
    _P("Transpose", "compute"),
    _P("ExpandDims", "compute"),
    _P("Concat", "compute"),
    _P("Pack", "compute", True, "stack equally shaped tensors along a new axis 0"),
    _P("GetItem", "compute", True, "numpy-style basic indexing: x[i], x[i:j], with static or tensor bounds"),
    _P("GetItemGrad", "compute", True, "scatter a gradient into zeros shaped like x, at a GetItem index"),
    _P("Gather", "compute"),
    _P("ScatterAddLike", "compute", True, "zeros like x with updates added at indices (Gather's gradient)"),
    _P("UpdateSlot", "compute", True, "x with its slot i along axis 0 replaced by v (a write in place where compiled)"),
    _P("Tile", "compute"),
    # random numbers: a pure draw; the stream's position is a Variable (turnout.random, turnout.random_rules)
    _P("RandomDraw", "compute", False,
       "attr distribution's values (TensorFlow's RandomUniform, RandomStandardNormal, TruncatedNormal or "
       "RandomUniformInt) of the shape input 0 gives, from Philox call input 1 (int64) on of the stream keyed "
       "by attrs seed, seed2 (RandomUniformInt: minval, maxval as inputs 2, 3)"),
    # checkpoint slots of a loop under its own memory budget (turnout.control_flow.checkpoints)
    _P("CheckpointSlots", "compute", False,
       "how many checkpoint slots a loop's buffers get: attr slots, the most its budget holds (a compiled "
       "backend may give fewer; the gradient's values do not depend on it)"),
    _P("CheckpointTrips", "compute", False,
       "its input, a recomputed loop's trip count, passed on (a compiled backend sizes later runs' slots by it)"),
    _P("ArgMax", "compute", False, "the index of the largest element along attr axis (the first among ties)"),
    _P("ArgMin", "compute", False, "the index of the smallest element along attr axis (the first among ties)"),
    _P("TopK", "compute", True, "the k largest entries along the last axis and their indices, largest first"),
    _P("ReverseSequence", "compute", True,
       "reverse the first lengths[b] entries along attr seq_axis of each slice b along attr batch_axis"),
    _P("Cumsum", "compute", True,
       "running sum along attr axis (attr exclusive: each element left out of its sum; attr reverse: from the end)"),
    _P("Cumprod", "compute", True,
       "running product along attr axis (attr exclusive: each element left out of its product; attr reverse: "
       "from the end)"),
    _P("Sum", "compute"),
    _P("Prod", "compute", True, "product over axes (over none, a product of no elements: 1)"),
    _P("Mean", "compute"),
    _P("Max", "compute"),
    _P("Min", "compute"),
    _P("All", "compute", False, "logical and over axes (a bool reduction)"),
    _P("Any", "compute", False, "logical or over axes (a bool reduction)"),
    _P("ZerosLike", "compute", False),
    _P("OnesLike", "compute", False),
    _P("Fill", "compute", True, "a tensor of a run-time shape filled with a scalar"),
    _P("Shape", "compute", False),
    _P("Size", "compute", False),
    _P("BroadcastLike", "compute", True, "broadcast x to the shape of another tensor"),
    _P("SumToLike", "compute", True, "sum x down to the shape of another tensor (undo broadcasting)"),
    # windows over NHWC images (geometry: turnout.windows; attrs strides, padding, and dilations or ksize)
    _P("Conv2D", "compute", True, "x (NHWC) cross-correlated with filters w (HWIO), as TensorFlow's Conv2D"),
    _P("Conv2DBackpropInput", "compute", True,
       "(like, w, dy): Conv2D's gradient with respect to its input, shaped like like (the transposed convolution)"),
    _P("Conv2DBackpropFilter", "compute", True,
       "(x, like, dy): Conv2D's gradient with respect to its filters, shaped like like"),
    _P("MaxPool", "compute", True, "the largest element of each window"),
    _P("MaxPoolGrad", "compute", True,
       "(x, y, dy): each window's gradient added at the first largest element of x in it (TensorFlow's choice)"),
    _P("AvgPool", "compute", True, "the mean of each window, over its elements inside the input"),
    _P("AvgPoolGrad", "compute", True, "(like, dy): each window's gradient spread evenly over its elements"),
    # TensorArray: a per-iteration accumulator, as an immutable value
    _P("TensorArrayNew", "compute", False),
    _P("TensorArrayWrite", "compute"),
    _P("TensorArrayRead", "compute"),
    _P("TensorArrayStack", "compute"),
    _P("TensorArrayUnstack", "compute"),
    _P("TensorArraySize", "compute", False),
    # TensorArray gradients (turnout.gradients): unwritten slots of a gradient TensorArray count as zero
    _P("TensorArrayAdd", "compute", True, "slotwise sum of two TensorArrays; an unwritten slot counts as zero"),
    _P("TensorArrayAccumulate", "compute", True,
       "add a value into slot i (an unwritten slot counts as zero): O(1) gradient accumulation per read"),
    _P("TensorArrayReadOrZeros", "compute", True, "read slot i, or zeros of the given shape if it is unwritten"),
    _P("TensorArrayStackOrZeros", "compute", True, "stack to the given shape; unwritten slots are zeros"),
    # state
    _P("VarHandle", "state", False, "a handle to a Variable (attr name, dtype, shape, initial value)"),
    _P("ReadVariable", "state"),
    _P("AssignVariable", "state", False),
    _P("AssignAddVariable", "state", False),
    _P("AssignSubVariable", "state", False),
    _P("StackNew", "state", False, "a gradient stack (the paper, Sec. 5)"),
    _P("StackPush", "state", False, "save a forward value under an iteration index"),
    _P("StackPop", "state", False, "read back a saved forward value in the backward loop"),
    # transfer: made by turnout.devices.partition, never by the builders
    _P("Send", "transfer", False, "put its input token, live or dead, into the rendezvous under (edge, tag)"),
    _P("Recv", "transfer", False, "take the token sent under (edge, tag) from the rendezvous, live or dead"),
]

PRIMITIVES: dict[str, Primitive] = {p.name: p for p in _DECLS}

CONTROL_FLOW = frozenset(p.name for p in _DECLS if p.kind == "control")
STATEFUL = frozenset(p.name for p in _DECLS if p.kind == "state")
COMPUTE = frozenset(p.name for p in _DECLS if p.kind == "compute")
TRANSFER = frozenset(p.name for p in _DECLS if p.kind == "transfer")


def get(name: str) -> Primitive:
    """The primitive named ``name``, or ``NotFoundError``."""
    try:
        return PRIMITIVES[name]
    except KeyError:
        raise NotFoundError(f"unknown primitive {name!r}") from None
