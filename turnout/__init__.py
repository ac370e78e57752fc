"""Turnout: dynamic control flow in dataflow machine learning.

The language of the EuroSys 2018 paper "Dynamic Control Flow in Large-Scale Machine Learning":
dataflow graphs of tensor ops plus the control-flow primitives Switch, Merge, Enter, Exit,
NextIteration and LoopCond, built by hand (``tn.raw``) or by the builders ``cond``, ``case``,
``while_loop``, ``scan``, ``map_fn``, ``foldl``, ``foldr``. Importing ``turnout`` needs only numpy; the fast
backend (JAX) and the z3 encodings load on first use.
"""

from typing import Any as _Any

from turnout import linalg, nn, random, raw
from turnout.array_ops import (
    argmax,
    argmin,
    clip_by_value,
    one_hot,
    range,
    rank,
    slice,
    split,
    squeeze,
    unstack,
)
from turnout.control_flow.cond import case, cond
from turnout.control_flow.functional import foldl, foldr, map_fn, scan
from turnout.control_flow.tensor_array import TensorArray
from turnout.control_flow.while_loop import while_loop
from turnout.dtypes import DType, as_dtype, float32, float64, int32, int64
from turnout.dtypes import bool_ as bool  # noqa: A001
from turnout.errors import (
    ArgumentError,
    ClusterSpecError,
    DeadFetchError,
    DeadlockError,
    DTypeError,
    ExecutionError,
    FeedError,
    GradientError,
    GraphBuildError,
    KernelError,
    MergeConflictError,
    NonTerminationError,
    NotFoundError,
    PartitionError,
    PlacementError,
    RecvTimeoutError,
    ResourceExhaustedError,
    SerializationError,
    ShapeError,
    TaskFailedError,
    TurnoutError,
    UnsupportedError,
    ValidationError,
)

# Eager, not lazy: a lazy name would be shadowed by the submodule of the same name once it is imported.
from turnout.gradients import gradients, memory_report
from turnout.graph import Graph, Node, Tensor, get_default_graph, reset_default_graph
from turnout.math_ops import (
    acos,
    acosh,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    ceil,
    cos,
    cosh,
    cumprod,
    cumsum,
    digamma,
    erf,
    erfc,
    expm1,
    floor,
    lgamma,
    log1p,
    round,
    sin,
    sinh,
    tan,
)
from turnout.nn_ops import avg_pool, conv2d, depthwise_conv2d, max_pool
from turnout.ops import (
    abs,
    add,
    assert_true,
    broadcast_like,
    cast,
    concat,
    constant,
    control_dependencies,
    convert_to_tensor,
    divide,
    equal,
    exp,
    expand_dims,
    fill,
    floordiv,
    gather,
    greater,
    greater_equal,
    group,
    identity,
    is_finite,
    is_inf,
    is_nan,
    less,
    less_equal,
    log,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    matmul,
    maximum,
    minimum,
    mod,
    multiply,
    negative,
    no_op,
    not_equal,
    ones,
    ones_like,
    placeholder,
    pow,
    prevent_gradient,
    reduce_all,
    reduce_any,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    relu,
    reshape,
    select,
    shape,
    sigmoid,
    sign,
    size,
    sleep,
    sqrt,
    square,
    stack,
    stop_gradient,
    subtract,
    sum_to_like,
    tanh,
    tile,
    transpose,
    truediv,
    update_slot,
    where,
    zeros,
    zeros_like,
)
from turnout.shapes import ANY_SHAPE
from turnout.validate import validate
from turnout.variables import Variable, global_variables, trainable_variables

__version__ = "0.1.0"


def device(name: str | None):  # type: ignore[no-untyped-def]
    """``with tn.device("cpu:1"):`` places the ops created inside on that device."""
    return get_default_graph().device(name)


def colocate_with(op: _Any):  # type: ignore[no-untyped-def]
    """``with tn.colocate_with(x):`` places the ops created inside on the device of ``x`` (a tensor, a
    node or a Variable); ``None`` clears an outer colocation."""
    if op is not None and hasattr(op, "_as_tensor"):
        op = op._as_tensor()
    if op is not None and hasattr(op, "node"):
        op = op.node
    return get_default_graph().colocate_with(op)


def name_scope(name: str):  # type: ignore[no-untyped-def]
    """``with tn.name_scope("layer"):`` prefixes the names of the ops created inside with ``layer/``."""
    return get_default_graph().name_scope(name)


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    # Lazy entry points: they import heavier modules (or jax / z3) only when used.
    lazy = {
        "Session": ("turnout.session", "Session"),
        "RunOptions": ("turnout.session", "RunOptions"),
        "FastOptions": ("turnout.fast_options", "FastOptions"),
        "train": ("turnout.train", None),
        "checkpoint": ("turnout.checkpoint", None),
        "pretty": ("turnout.inspect", "pretty"),
        "to_dot": ("turnout.inspect", "to_dot"),
        "save": ("turnout.serialize", "save"),
        "load": ("turnout.serialize", "load"),
        "dumps": ("turnout.serialize", "dumps"),
        "loads": ("turnout.serialize", "loads"),
        "static_frames": ("turnout.frames", "static_frames"),
        "import_graph_def": ("turnout.graphdef", "import_graph_def"),
        "export_graph_def": ("turnout.graphdef", "export_graph_def"),
    }
    if name in lazy:
        import importlib

        mod, attr = lazy[name]
        m = importlib.import_module(mod)
        return m if attr is None else getattr(m, attr)
    raise AttributeError(f"module 'turnout' has no attribute {name!r}")
