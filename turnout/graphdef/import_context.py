"""What an import rule sees (``ImportContext``: the graph being built, the NodeDefs, constant folding
over them, the flow labels) and the values it passes (``Bundle``, ``RangeMarker``, ``Text``,
``BroadcastAxes``, ``Ref``).

Why a module of its own: the rules (``import_rules``, one per TensorFlow op name) build Turnout nodes
through the context, and the driver (``importer``) makes the context and calls the rules; kept here,
the context imports neither. Constant folding lives with it, since the context folds on demand
(``ImportContext.static``), StridedSlice's masks included (``strided_slice_index``, which its rule uses
too).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout import tf_random
from turnout.array_ops import range_part
from turnout.errors import UnsupportedError
from turnout.graph import BACK_EDGE, Graph, Node, Tensor, TensorSpec
from turnout.graphdef import protos
from turnout.graphdef.flows import FlowAnalysis, tensor_name


@dataclass(frozen=True)
class Bundle:
    """Several Turnout tensors standing for one TensorFlow tensor (a LIFO stack: its keyed stack and
    its depth counter). Pass-through ops apply to each part."""

    parts: tuple[Tensor, ...]


@dataclass(frozen=True)
class RangeMarker:
    """``Range(start, limit, delta)`` with run-time bounds, kept symbolic: TensorArray gather / scatter
    read ``range(0, n)`` as a whole prefix; another op reads it as the tensor ``tn.range`` builds
    (``ImportContext._range_tensor``). ``start`` and ``delta`` are ints where known at import time;
    where they are not, ``start_tensor`` / ``delta_tensor`` are the imported tensors that hold them."""

    start: Any
    limit: Any
    delta: Any
    limit_node: str
    start_tensor: Any = None
    delta_tensor: Any = None


@dataclass(frozen=True)
class Text:
    """A string constant. Turnout has no string tensors; TF1 model code makes them only for the
    messages of ``Assert``, which reads them when it is imported."""

    value: str


@dataclass(frozen=True)
class Foreign:
    """A run-time value of a TensorFlow dtype Turnout has no counterpart of (``dtype``, its name): a
    string component of an input pipeline's batch, which the model may leave unread."""

    dtype: str


@dataclass(frozen=True)
class BroadcastAxes:
    """The axes along which operand ``like`` of a broadcasting op was broadcast, when its shape is
    known only at run time (a BroadcastGradientArgs output): accepted only by the Sum that
    tf.gradients applies to them, which becomes a SumToLike."""

    like: Tensor


@dataclass(frozen=True)
class Ref:
    """A TF1 reference variable's ref tensor (``VariableV2``): the Turnout Variable's handle. An op
    that takes refs (``Assign``, ``ApplyGradientDescent``, the ``Ref*`` control flow) gets the
    handle; any other op reads the Variable where it runs (``read``: a read at the root, for fetches)."""

    handle: Tensor
    attrs: dict[str, Any]
    read: Tensor


#: ops whose inputs may be refs; every other op reads a ref input's Variable when it runs
REF_OPS = frozenset({"RefEnter", "RefExit", "RefIdentity", "RefSwitch", "RefMerge", "RefNextIteration", "Assign",
                     "AssignAdd", "AssignSub", "ApplyGradientDescent", "ApplyMomentum", "ApplyAdam",
                     "ApplyRMSProp", "ApplyCenteredRMSProp", "ApplyAdagrad", "ApplyAdagradV2",
                     "IsVariableInitialized", "ScatterUpdate", "ScatterAdd", "ScatterSub", "ScatterNdUpdate",
                     "ScatterNdAdd", "ScatterNdSub", "SparseApplyMomentum", "SparseApplyRMSProp",
                     "SparseApplyCenteredRMSProp", "SparseApplyAdagrad", "SparseApplyAdagradV2",
                     "ApplyAdadelta", "SparseApplyAdadelta", "ApplyProximalGradientDescent",
                     "SparseApplyProximalGradientDescent", "ApplyProximalAdagrad", "SparseApplyProximalAdagrad",
                     "ApplyFtrl", "SparseApplyFtrl", "ApplyFtrlV2", "SparseApplyFtrlV2"})

#: Tensor | Bundle | RangeMarker | Text | BroadcastAxes | Ref | None (or BACK_EDGE for a Merge input not yet built)
Value = Any
Rule = Callable[["ImportContext", Any, list[Value]], Sequence[Value]]



class ImportContext:
    """What a rule sees while its NodeDef is imported: the graph, the node's control inputs, constant
    folding over the GraphDef, the flow labels, and ``create`` (which names and wires Turnout nodes)."""

    def __init__(self, graph: Graph, nodes: dict[str, Any], flows: FlowAnalysis, prefix: str) -> None:
        self.graph = graph
        self.nodes = nodes
        self.flows = flows
        self.prefix = prefix
        self.values: dict[str, Value] = {}  # TF tensor name -> imported value
        self.control: dict[str, Node] = {}  # TF node name -> the Turnout node a control edge waits for
        self.back_edges: list[tuple[Node, int, str]] = []
        self.node: Any = None
        self.created: list[Node] = []
        #: names of tf.cond ``pred_id`` Identity nodes that Switches read past (``import_rules._switch``)
        self.looked_through: set[str] = set()
        #: StackPushV2 name -> what it pushes when that is not its input (a TensorArray flow's stand-in)
        self.pushed: dict[str, Tensor] = {}
        #: StackV2 name -> the ``range(start, n, delta)`` its pushes save (the indices of a stack() in a
        #: loop body, which the gradient's scatter pops): the stack holds ``n``, a pop rebuilds the range
        self.pushed_ranges: dict[str, tuple[Optional[int], Optional[int], str]] = {}
        #: loop Merge name -> the shape it is imported with: TensorFlow's loop variable was relaxed
        #: (``shape_invariants``), found when its back edge did not fit (see ``_import``)
        self.relaxed: dict[str, list[Any]] = {}
        self._static: dict[str, Optional[np.ndarray]] = {}
        #: id of a RangeMarker -> (it, the tensor it was read as): one Range, one set of nodes
        self._ranges: dict[int, tuple[RangeMarker, Tensor]] = {}
        #: folding for a variable's initial value (``initial_value``), where random ops fold too: its
        #: own cache, so that a random draw never becomes a static attribute of the run graph, and
        #: each random op is drawn once (the Variable's value and its Assign see the same draw)
        self._initial: dict[str, Optional[np.ndarray]] = {}
        self.initializing = False
        self._users: Optional[dict[str, list[tuple[Any, int]]]] = None
        #: the Turnout device of the current NodeDef's annotation (``placement.tf_device``), given to
        #: every node its rule creates; None keeps the device scope of the import, if any
        self.device: Optional[str] = None
        #: the GraphDef's functions by name (control flow v2 calls them: ``import_functions``)
        self.library: dict[str, Any] = {}
        #: a function body's arguments: ``_Arg`` NodeDef name -> the value the call passes
        self.args: dict[str, Value] = {}
        #: the functions whose bodies are being imported around this one, outermost first (a call of
        #: one of them again is a recursion, which inlining cannot end)
        self.calls: tuple[str, ...] = ()
        #: where created nodes go: a GraphDef's top level builds its own frames (Enter, Exit, ...) at
        #: the root, without capture; a function body called by a builder (``tn.while_loop``'s body)
        #: goes into the builder's context, which captures outside tensors as the builder does
        self.flow_context: Any = None
        self.capture = False

    def child(self, nodes: dict[str, Any], prefix: str, args: dict[str, Value], fname: str) -> ImportContext:
        """The context of the NodeDefs ``nodes`` of function ``fname``'s body called with ``args``, built
        into the control-flow context current now (a builder's branch or loop body) under ``prefix``."""
        sub = ImportContext(self.graph, nodes, FlowAnalysis(nodes), prefix)
        sub.library, sub.args, sub.device = self.library, args, self.device
        sub.calls = (*self.calls, fname)
        sub.flow_context, sub.capture = self.graph._context, True
        return sub

    # ---- building --------------------------------------------------------------------------------
    def ctrl_inputs(self) -> list[Node]:
        """The Turnout nodes the current NodeDef's control inputs (``^name``) stand for, those that have one."""
        return [self.control[i[1:]] for i in self.node.input if i.startswith("^") and i[1:] in self.control]

    def create(self, op: str, inputs: Sequence[Any], attrs: Optional[dict[str, Any]] = None,
               suffix: Optional[str] = None, control: Optional[Sequence[Node]] = None,
               shapes: Optional[Sequence[Any]] = None) -> Node:
        """A Turnout node for the current NodeDef. The last node a rule creates carries the NodeDef's
        name; helpers get ``<name>/_tn/<suffix>``. Every node gets the NodeDef's control inputs.

        ``shapes`` (one per output, None where nothing is known) are what TensorFlow recorded of
        the outputs' shapes; they refine the shape rule's answer. The node that carries the
        NodeDef's name takes the NodeDef's ``_output_shapes`` so, where TensorFlow wrote them."""
        name = self.prefix + self.node.name + (f"/_tn/{suffix or op}" if suffix is not None else "")
        ctrl = list(self.ctrl_inputs()) if control is None else list(control)
        inputs = [self.range_tensor(t) for t in inputs]
        for t in inputs:
            if isinstance(t, (Bundle, RangeMarker, Text, BroadcastAxes, Ref, Foreign)) or t is None:
                raise UnsupportedError(f'{self.where()}: an input of this op is {self.describe(t)}')
        if shapes is None and suffix is None:
            shapes = self.relaxed.get(self.node.name) or protos.attr(self.node, "_output_shapes")
        specs = self._refined(op, inputs, attrs or {}, shapes) if shapes else None
        capture = contextlib.nullcontext() if self.capture else self.graph._no_capture()
        with self.graph._in_context(self.flow_context), capture, self.graph.control_dependencies(None), \
                self.graph.device(self.device) if self.device is not None else contextlib.nullcontext():
            n = self.graph.create_node(op, list(inputs), attrs or {}, name=name, control_inputs=ctrl, specs=specs)
        self.created.append(n)
        return n

    def _range_tensor(self, r: RangeMarker) -> Any:
        """A Range of a run-time bound read as a tensor (not as TensorArray indices, which read the
        marker), built as ``tn.range`` builds it (``array_ops.range_part``) once per Range, its nodes
        named after the NodeDef that reads it first (``<name>/_tn/range``). A run-time ``delta`` is
        checked not to be 0 when the program runs, as ``tn.range`` checks it. The marker itself (an
        error below) where the limit is not an imported tensor of integers or floats, or a run-time
        bound's dtype is not the limit's."""
        limit = r.limit
        if not isinstance(limit, Tensor) or not (limit.dtype.is_integer or limit.dtype.is_floating):
            return r
        start = r.start if r.start is not None else r.start_tensor
        delta = r.delta if r.delta is not None else r.delta_tensor
        if start is None or delta is None or any(isinstance(v, Tensor) and v.dtype != limit.dtype
                                                 for v in (start, delta)):
            return r
        if isinstance(delta, int) and delta == 0:
            raise UnsupportedError(f"{self.where()}: reads a Range whose delta is 0")
        if id(r) not in self._ranges:
            m = _Within(self, "range")
            start_t, delta_t = (v if isinstance(v, Tensor) else m.const(np.asarray(v, limit.dtype.numpy), [limit],
                                                                        suffix=what)
                                for v, what in ((start, "start"), (delta, "delta")))
            self._ranges[id(r)] = (r, range_part(m, start_t, limit, delta_t, f"Range {r.limit_node}",
                                                 check_delta=isinstance(delta, Tensor)))
        return self._ranges[id(r)][1]

    def range_tensor(self, v: Any) -> Any:
        """``v`` read as a tensor where it is a ``RangeMarker`` (``_range_tensor``); any other value as it is."""
        return self._range_tensor(v) if isinstance(v, RangeMarker) else v

    def _refined(self, op: str, inputs: Sequence[Any], attrs: dict[str, Any],
                 shapes: Sequence[Any]) -> Optional[list[TensorSpec]]:
        """The shape rule's output specs, each made as specific as TensorFlow's recorded shape where
        the two agree. A Merge of a loop takes TensorFlow's shape as it is: a loop variable declared
        with a relaxed shape (``shape_invariants``) is shape-varying, whatever it entered with."""
        from turnout import shapes as sh
        from turnout.shape_rules import infer

        specs = infer(op, [t for t in inputs if isinstance(t, Tensor)], attrs)
        out = []
        for k, s in enumerate(specs):
            tf_shape = sh.as_shape(shapes[k]) if k < len(shapes) else None
            if s.dtype.is_opaque or k >= len(shapes) or shapes[k] is None and op != "Merge":
                out.append(s)
            elif op == "Merge" and k == 0 and any(t is BACK_EDGE for t in inputs):
                out.append(TensorSpec(s.dtype, tf_shape, s.elem_dtype, s.elem_shape))
            elif sh.compatible(s.shape, tf_shape):
                out.append(TensorSpec(s.dtype, sh.merge(s.shape, tf_shape), s.elem_dtype, s.elem_shape))
            else:
                out.append(s)
        return out

    def const(self, value: Any, anchors: Sequence[Any] = (), suffix: Optional[str] = "const") -> Tensor:
        """A constant in the frame of ``anchors`` (tensors or nodes): TensorFlow puts a constant into a
        loop frame by a control edge from a node of that frame, and so does this."""
        arr = np.asarray(value)
        ctrl = self.ctrl_inputs() + [a.node if isinstance(a, Tensor) else a for a in anchors
                                     if isinstance(a, (Tensor, Node))]
        return self.create("Const", [], {"value": arr, "dtype": dt.as_dtype(arr.dtype).name}, suffix=suffix,
                           control=ctrl).outputs[0]

    def checked(self, ok: Tensor, x: Tensor, message: str, suffix: str) -> Tensor:
        """``x`` once every entry of ``ok`` holds, else a ``KernelError`` with ``message`` when the
        program runs: an ``Assert`` that passes ``x`` on. Where TensorFlow's kernel refuses an input
        (an index out of range), the imported graph refuses it too, on every backend, rather than
        wrap or drop it as a Turnout op would."""
        every = self.create("All", [ok], {"axis": None, "keepdims": False}, suffix=f"{suffix}_all").outputs[0]
        return self.create("Assert", [every, x], {"message": f"{self.node.name}: {message}"}, suffix=suffix).outputs[0]

    def where(self) -> str:
        """``Op node "name"`` of the current NodeDef, the start of every import error."""
        return f'{self.node.op} node "{self.node.name}"'

    @staticmethod
    def describe(v: Any) -> str:
        """What an imported value that is no tensor is, in words, for the error of an op that reads it as one."""
        if isinstance(v, Bundle):
            return "a TensorFlow stack or TensorList handle"
        if isinstance(v, Ref):
            return "a reference variable's ref (only ops that take refs may use it)"
        if isinstance(v, BroadcastAxes):
            return "run-time broadcast axes (supported only as the axes of tf.gradients' Sum)"
        if isinstance(v, Text):
            return "a string constant (Turnout has no string tensors; only Assert's message may read one)"
        if isinstance(v, Foreign):
            return f"a TensorFlow {v.dtype} tensor (Turnout has no {v.dtype} tensors)"
        if isinstance(v, RangeMarker):
            return ("a Range of a run-time limit that this op cannot read as a tensor (its limit is not an imported "
                    "tensor of numbers, or a run-time bound's dtype is not the limit's)")
        return "an output TensorFlow defines but the importer does not produce"

    # ---- attributes and constant folding ---------------------------------------------------------
    def attr(self, key: str, default: Any = None) -> Any:
        """The current NodeDef's attr ``key`` as a Python value (``default`` when it has none)."""
        return protos.attr(self.node, key, default)

    @staticmethod
    def attr_of(nd: Any, key: str, default: Any = None) -> Any:
        """The attr ``key`` of NodeDef ``nd`` as a Python value (``default`` when it has none)."""
        return protos.attr(nd, key, default)

    def dtype(self, key: str = "T") -> dt.DType:
        """The Turnout dtype of the current NodeDef's type attr ``key``; a type Turnout has not raises, naming the
        node."""
        return protos.tf_dtype(self.attr(key), self.where())

    def data_inputs(self, nd: Any = None) -> list[str]:
        """The data inputs of ``nd`` (by default the current NodeDef) as tensor names, control inputs left out."""
        nd = nd if nd is not None else self.node
        return [tensor_name(i) for i in nd.input if not i.startswith("^")]

    def users(self, name: str) -> list[tuple[Any, int]]:
        """The NodeDefs that read an output of node ``name``, each with the input slot it reads."""
        if self._users is None:
            self._users = {}
            for nd in self.nodes.values():
                for slot, t in enumerate(self.data_inputs(nd)):
                    self._users.setdefault(t.rpartition(":")[0], []).append((nd, slot))
        return self._users.get(name, [])

    def static(self, tname: str) -> Optional[np.ndarray]:
        """The value of a TensorFlow tensor when it is known at import time, else None."""
        v = self.folded(tname)
        return None if v is DEAD else v

    def folded(self, tname: str) -> Any:
        """``static``, or ``DEAD`` for a tensor on the untaken side of a Switch whose predicate an
        initializer folds (``_fold_guard``): what folding needs to pass a Merge."""
        tname = tensor_name(tname)
        cache = self._initial if self.initializing else self._static
        if tname not in cache:
            cache[tname] = None  # cycles (loops) are not constant
            cache[tname] = _fold(self, tname)
        return cache[tname]

    def initial_value(self, tname: str) -> Optional[np.ndarray]:
        """The value a variable initializer computes, when it can be computed at import time: constant
        folding in which TensorFlow's random ops fold too, to what their kernels draw the first time
        they run (``tf_random``). Only initializers fold so; in the run graph a random op is a new
        draw every step, never a constant."""
        before, self.initializing = self.initializing, True
        try:
            return self.static(tname)
        finally:
            self.initializing = before

    def static_int_list(self, tname: str, what: str) -> list[int]:
        """The ints of ``tname``'s value known at import time, for an input that Turnout takes as a static attribute
        (paddings, axes, a depth); ``UnsupportedError`` naming ``what`` when it is only known at run time."""
        v = self.static(tname)
        if v is None:
            raise UnsupportedError(f"{self.where()}: {what} ({tname}) must be known when importing; "
                                   "Turnout takes it as a static attribute")
        return [int(x) for x in np.ravel(v)]

    def spec_shape(self, tname: str) -> Optional[tuple[Any, ...]]:
        """The static shape of the imported tensor ``tname``, None when it has not been imported as a tensor."""
        v = self.values.get(tensor_name(tname))
        return v.shape if isinstance(v, Tensor) else None


class _Within:
    """The ``Maker`` (``turnout.composite``) of a construction built for an input of the current
    NodeDef: its nodes are helpers named ``<what>_<suffix>``, so the NodeDef's own node keeps its name."""

    def __init__(self, ctx: ImportContext, what: str) -> None:
        self.ctx, self.what = ctx, what

    def create(self, op: str, inputs: Sequence[Any], attrs: Optional[dict[str, Any]] = None,
               suffix: Optional[str] = None) -> Node:
        return self.ctx.create(op, inputs, attrs, suffix=self.what if suffix is None else f"{self.what}_{suffix}")

    def const(self, value: Any, anchors: Sequence[Any] = (), suffix: Optional[str] = "const") -> Tensor:
        return self.ctx.const(value, anchors, suffix=f"{self.what}_{suffix}")


# ---- constant folding ------------------------------------------------------------------------------
class _Dead:
    """The fold of a dead tensor (the paper's dead value): the untaken output of a Switch whose
    predicate folds, and whatever reads it, up to a Merge."""

    def __repr__(self) -> str:
        return "DEAD"


DEAD = _Dead()

_FOLD: dict[str, Optional[Callable[..., Any]]] = {
    "Identity": lambda x: x, "Snapshot": lambda x: x, "StopGradient": lambda x: x,
    "PreventGradient": lambda x: x,
    "Add": np.add, "AddV2": np.add, "Sub": np.subtract, "Mul": np.multiply, "Maximum": np.maximum,
    "Minimum": np.minimum, "FloorDiv": np.floor_divide, "FloorMod": np.mod, "Neg": np.negative,
    "Prod": None, "Pack": None, "ConcatV2": None, "Range": None, "StridedSlice": None, "Cast": None,
    "Fill": None, "Reshape": None, "BroadcastGradientArgs": None, "Size": None, "Rank": None, "Shape": None,
    "InvertPermutation": lambda p: np.argsort(p).astype(p.dtype), "ConcatOffset": None, "DynamicStitch": None,
    "ListDiff": None, "Sign": np.sign, "Transpose": None, "DiagPart": None, "Qr": None, "GatherV2": None,
    "ExpandDims": lambda x, axis: np.expand_dims(x, int(axis)),
    "BroadcastArgs": lambda a, b: np.asarray(np.broadcast_shapes(tuple(int(d) for d in a), tuple(int(d) for d in b)),
                                             a.dtype),
}

#: the ops folding evaluates that have two outputs
TWO_OUTPUTS = frozenset({"BroadcastGradientArgs", "ListDiff", "Qr"})

#: the ops constant folding evaluates from their inputs (``Const`` and the shape ops aside)
FOLDED_OPS = frozenset(_FOLD)


def _sliced_shape(ctx: ImportContext, nd: Any) -> Optional[np.ndarray]:
    """A ``StridedSlice`` of a ``Shape`` whose slice picks only dimensions known at import (the
    ``shape(x)[-1]`` of ``tf.sort`` and ``tf.argsort`` of a batch of unknown size), folded; None
    otherwise."""
    src = tensor_name(ctx.data_inputs(nd)[0])
    shape_nd = ctx.nodes.get(src.rpartition(":")[0])
    if shape_nd is None or shape_nd.op not in ("Shape", "ShapeN"):
        return None
    k = int(src.rpartition(":")[2]) if shape_nd.op == "ShapeN" else 0
    dims = ctx.spec_shape(ctx.data_inputs(shape_nd)[k])
    bounds = [ctx.static(t) for t in ctx.data_inputs(nd)[1:4]]
    if dims is None or any(b is None for b in bounds):
        return None
    key = strided_slice_index(nd, *([int(x) for x in np.ravel(b)] for b in bounds))  # type: ignore[arg-type]
    try:
        picked = np.asarray([-1 if d is None else int(d) for d in dims], np.int64)[key]
    except (IndexError, ValueError):
        return None
    if (np.asarray(picked) < 0).any():
        return None
    dtype = np.int64 if protos.attr(shape_nd, "out_type") == 9 else np.int32
    return np.asarray(picked, dtype)


def _fold(ctx: ImportContext, tname: str) -> Optional[np.ndarray]:
    node_name, _, idx = tname.rpartition(":")
    nd = ctx.nodes.get(node_name)
    if nd is None:
        return None
    op = nd.op
    if op == "Const":
        return protos.tensor_to_numpy(protos.attr(nd, "value"), f'Const node "{nd.name}"')
    if op in ("Enter", "RefEnter") and protos.attr(nd, "is_constant", False):
        return ctx.static(ctx.data_inputs(nd)[0])
    if op in ("Shape", "Size", "Rank", "ShapeN"):
        shp = ctx.spec_shape(ctx.data_inputs(nd)[int(idx) if op == "ShapeN" else 0])
        op = "Shape" if op == "ShapeN" else op
        if shp is None or (op != "Rank" and any(d is None for d in shp)):
            return None
        out = {"Shape": np.asarray(shp, np.int32), "Size": np.asarray(int(np.prod(shp)), np.int32),
               "Rank": np.asarray(len(shp), np.int32)}[op]
        return out.astype(np.int64) if protos.attr(nd, "out_type") == 9 else out
    if op == "StridedSlice":
        part = _sliced_shape(ctx, nd)
        if part is not None:
            return part
    if op in tf_random.DTYPES:
        return _draw(ctx, nd) if ctx.initializing else None
    if ctx.initializing:
        guarded = _fold_guard(ctx, nd, int(idx or 0))
        if guarded is not _NOT_A_GUARD:
            return guarded
    if op not in _FOLD:
        return None
    ins = [ctx.static(t) for t in ctx.data_inputs(nd)]
    if any(v is None for v in ins):
        return None
    vals: list[np.ndarray] = ins  # type: ignore[assignment]
    try:
        if op == "Pack":
            return np.stack(vals, axis=protos.attr(nd, "axis", 0))
        if op == "ConcatV2":
            return np.concatenate(vals[:-1], axis=int(vals[-1]))
        if op == "Range":
            return np.arange(int(vals[0]), int(vals[1]), int(vals[2])).astype(vals[0].dtype)
        if op == "Cast":
            return vals[0].astype(protos.tf_dtype(protos.attr(nd, "DstT"), op).numpy)
        if op == "Fill":
            return np.full([int(d) for d in vals[0]], vals[1])
        if op == "Reshape":
            return vals[0].reshape([int(d) for d in vals[1]])
        if op == "Prod":
            return np.prod(vals[0], axis=tuple(np.ravel(vals[1]).tolist()),
                           keepdims=bool(protos.attr(nd, "keep_dims", False))).astype(vals[0].dtype)
        if op == "StridedSlice":
            key = strided_slice_index(nd, [int(x) for x in vals[1]], [int(x) for x in vals[2]],
                                      [int(x) for x in vals[3]])
            return np.asarray(vals[0][key])
        if op == "DynamicStitch":
            n = len(vals) // 2
            merged: dict[int, Any] = {}
            for ids, data in zip(vals[:n], vals[n:]):
                for i, j in enumerate(np.ravel(ids)):
                    merged[int(j)] = np.reshape(data, (np.size(ids), *np.shape(data)[np.ndim(ids):]))[i]
            return np.stack([merged[j] for j in range(len(merged))])
        if op == "ConcatOffset":  # where input k of a Concat starts: the sizes before it, on the axis
            axis, shapes = int(vals[0]), vals[1:]
            off = np.zeros_like(shapes[0])
            for s in shapes[: int(idx)]:
                off[axis % len(off)] += s[axis % len(off)]
            return off
        if op == "BroadcastGradientArgs":
            return broadcast_gradient_args(vals[0], vals[1])[int(idx)]
        if op == "Transpose":
            return np.transpose(vals[0], [int(a) for a in np.ravel(vals[1])])
        if op == "GatherV2":  # (an entry of a static shape: the last dimension, in top_k's gradient)
            if protos.attr(nd, "batch_dims", 0):
                return None
            axis = int(vals[2])
            n = vals[0].shape[axis]
            if np.any(vals[1] < -n) or np.any(vals[1] >= n):  # (numpy wraps a negative index; TF refuses it)
                return None
            return np.take(vals[0], vals[1], axis=axis)
        if op == "DiagPart":  # (an input of shape [d..., d...]: its diagonal, of shape [d...])
            half = vals[0].shape[: vals[0].ndim // 2]
            n = int(np.prod(half))
            return np.diagonal(vals[0].reshape(n, n)).reshape(half).copy()
        if op == "Qr":  # (numpy's LAPACK factorisation: TensorFlow's Eigen one agrees to rounding)
            full = bool(protos.attr(nd, "full_matrices", False))
            q, r = np.linalg.qr(vals[0], mode="complete" if full else "reduced")
            return np.asarray((q, r)[int(idx or 0)], dtype=vals[0].dtype)
        if op == "ListDiff":  # the entries of x not in y, in x's order, and where they are in x (Prod's gradient)
            kept = [k for k, v in enumerate(np.ravel(vals[0])) if v not in set(np.ravel(vals[1]).tolist())]
            out = np.ravel(vals[0])[kept] if int(idx or 0) == 0 else np.asarray(kept)
            return out.astype(protos.tf_dtype(protos.attr(nd, "out_idx"), op).numpy) if int(idx or 0) else out
        fn = _FOLD[op]
        return None if fn is None else np.asarray(fn(*vals))
    except (ValueError, IndexError, TypeError):
        return None


_NOT_A_GUARD = object()


def _fold_guard(ctx: ImportContext, nd: Any, port: int) -> Any:
    """Folding inside an initializer, where TensorFlow's ``initialized_value()`` guard appears: an
    initial value computed from another Variable's (an ``ExponentialMovingAverage`` shadow, a slot
    made from its primary) is ``cond(is_initialized(v), read(v), v.initial_value)``. When initializers
    run, ``v`` holds its initial value or nothing, so both branches give the initial value: the
    ``VarIsInitializedOp`` / ``IsVariableInitialized`` folds to False, a ``Switch`` on a folded
    predicate passes its data to the taken output and ``DEAD`` to the other, an op with a dead input is
    dead, and a ``Merge`` is its one live input. ``_NOT_A_GUARD`` leaves the op to ``_fold``."""
    op = nd.op
    if op in ("VarIsInitializedOp", "IsVariableInitialized"):
        return np.asarray(False)
    ins = [ctx.folded(t) for t in ctx.data_inputs(nd)]
    if op in ("Switch", "RefSwitch"):
        if ins[1] is None or ins[1] is DEAD:
            return ins[1]
        return ins[0] if port == int(bool(ins[1])) else DEAD
    if op in ("Merge", "RefMerge"):
        live = [v for v in ins if v is not DEAD]
        return DEAD if not live else live[0] if len(live) == 1 and port == 0 else None
    return DEAD if any(v is DEAD for v in ins) else _NOT_A_GUARD


def _draw(ctx: ImportContext, nd: Any) -> Optional[np.ndarray]:
    """What random op ``nd`` outputs the first time it runs, if its arguments are known at import."""
    ins = [ctx.static(t) for t in ctx.data_inputs(nd)]
    if any(v is None for v in ins):
        return None
    where = f'{nd.op} node "{nd.name}"'
    dtype = protos.tf_dtype(protos.attr(nd, "Tout" if nd.op == "RandomUniformInt" else "dtype"), where)
    return tf_random.sample(nd.op, where, ins[0], dtype.numpy, int(protos.attr(nd, "seed", 0)),
                            int(protos.attr(nd, "seed2", 0)), ins[1:])


def broadcast_gradient_args(s0: Any, s1: Any) -> tuple[np.ndarray, np.ndarray]:
    """The axes along which each operand of a broadcasting binary op was broadcast (its gradient
    is summed over them), as TensorFlow's BroadcastGradientArgs computes them."""
    a, b = [int(x) for x in s0], [int(x) for x in s1]
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    r0 = [i for i in range(n) if a[i] == 1 and b[i] != 1]
    r1 = [i for i in range(n) if b[i] == 1 and a[i] != 1]
    return np.asarray(r0, np.int32), np.asarray(r1, np.int32)

def strided_slice_index(nd: Any, begin: Sequence[Any], end: Sequence[Any], strides: Sequence[int]) -> tuple[Any, ...]:
    """The numpy index of a StridedSlice (masks decoded); entries of begin/end may be tensors. A
    new-axis bit is ``None`` (it wins over a shrink bit, as in TensorFlow) and the ellipsis bit is
    ``...`` (its begin, end and stride ignored): ``x[:, None, ..., 0]`` as numpy reads it."""
    from turnout.graphdef import protos

    a = {k: int(protos.attr(nd, k, 0)) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                                   "shrink_axis_mask")}
    key: list[Any] = []
    for i, (b, e, s) in enumerate(zip(begin, end, strides)):
        if a["ellipsis_mask"] >> i & 1:
            key.append(Ellipsis)
        elif a["new_axis_mask"] >> i & 1:
            key.append(None)
        elif a["shrink_axis_mask"] >> i & 1:
            key.append(b)
        else:
            key.append(slice(None if a["begin_mask"] >> i & 1 else b, None if a["end_mask"] >> i & 1 else e, s))
    if sum(k is Ellipsis for k in key) > 1:  # (by identity: entries may be tensors, which compare elementwise)
        raise UnsupportedError(f'StridedSlice node "{nd.name}": more than one ellipsis bit in ellipsis_mask')
    return tuple(key)


__all__ = ["FOLDED_OPS", "REF_OPS", "BroadcastAxes", "Bundle", "ImportContext", "RangeMarker", "Ref", "Rule", "Text",
           "Value", "broadcast_gradient_args", "strided_slice_index"]
