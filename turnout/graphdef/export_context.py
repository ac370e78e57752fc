"""What an export rule sees (``ExportContext``) and the attr values it writes (``Dt``, ``Value``,
``Shape``).

Why a module of its own: the rules (``export_rules``, one per Turnout primitive) write NodeDefs through
the context, and the driver (``exporter``) makes the context and calls the rules; kept here, the context
imports neither.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout.errors import UnsupportedError, describe_node
from turnout.frames import Frame, static_frames
from turnout.graph import Graph, Node, Tensor
from turnout.graphdef import protos
from turnout.graphdef.array_sums import ArraySums, array_sums

Rule = Callable[["ExportContext", Node], Sequence[str]]

_BAD = re.compile(r"[^A-Za-z0-9_.\-/>]")


def tf_node_name(name: str) -> str:
    """A Turnout node name as a legal TensorFlow node name."""
    s = _BAD.sub("_", name)
    return s if re.match(r"[A-Za-z0-9.]", s) else f"n{s}"


class ExportContext:
    """What an export rule sees: the GraphDef being written, the TensorFlow name of every exported
    Turnout tensor, each node's frame, and ``add`` / ``const`` to write NodeDefs."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.p = protos.pb()
        self.gd = self.p.graph_pb2.GraphDef()
        self.gd.versions.producer = 1205  # a GraphDef version TensorFlow 2.x reads
        self.names: dict[str, str] = {}  # Turnout tensor name -> TF tensor name
        self.node_names: dict[int, str] = {}  # Turnout node id -> TF node name (for control edges)
        self.used: set[str] = set()
        self.fa = static_frames(graph)
        #: the arrays written as TensorFlow gradient arrays, whose writes add (``array_sums``)
        self.sums: ArraySums = array_sums(graph, self.fa)
        self.node: Node = graph.nodes[0] if graph.nodes else None  # type: ignore[assignment]
        self.ta_handles: dict[str, str] = {}  # Turnout TensorArray tensor -> TF handle tensor (its frame)
        self.enter_cache: dict[tuple[str, Frame], str] = {}
        self.serial_frames: set[Frame] = set()
        self.initializers: list[str] = []
        self.reserved: dict[int, str] = {}

    # ---- names -------------------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        """A TensorFlow node name from ``base`` that no node of the GraphDef has yet, reserved."""
        name = tf_node_name(base)
        k, out = 0, name
        while out in self.used:
            k += 1
            out = f"{name}_{k}"
        self.used.add(out)
        return out

    def t(self, x: Tensor) -> str:
        """The TensorFlow name of an exported Turnout tensor."""
        return self.names[x.name]

    def frame(self, n: Optional[Node] = None) -> Frame:
        """The frame of ``n`` (by default the node being exported)."""
        return self.fa.node_frame[(n or self.node).id]

    def parallel_iterations(self, frame: Frame) -> int:
        """What every ``Enter`` of ``frame`` says (TensorFlow refuses a frame whose Enters differ): the
        loop's own, or 1 for a frame that pushes or pops stacks (``serial_frames``)."""
        return 1 if frame in self.serial_frames else int(self.fa.frames[frame].parallel_iterations)

    # ---- writing -----------------------------------------------------------------------------------
    def add(self, op: str, inputs: Sequence[str], attrs: Optional[dict[str, Any]] = None,
            suffix: Optional[str] = None, control: Sequence[str] = (), name: Optional[str] = None,
            own_control: bool = True) -> str:
        """Write a NodeDef for the current node (named after it, or ``<name>/<suffix>``); every one
        carries the node's control inputs, but where ``own_control`` is False (an ``Enter`` of a value
        from an outer frame, which a control edge from the node's own frame would contradict).
        Returns the TensorFlow node name."""
        name = name or self.fresh(self.node.name if suffix is None else f"{self.node.name}/{suffix}")
        nd = self.gd.node.add()
        nd.name, nd.op = name, op
        nd.input.extend(list(inputs))
        ctrl = [f"^{self.node_names[c.id]}" for c in self.node.control_inputs
                if own_control and c.id in self.node_names]
        nd.input.extend(dict.fromkeys(ctrl + [f"^{c}" for c in control]))
        for k, v in (attrs or {}).items():
            set_attr(self, nd.attr[k], v)
        if self.node.device:
            nd.device = str(self.node.device)
        return name

    def const(self, value: Any, suffix: str = "const", anchor: Optional[str] = None) -> str:
        """A constant in the current node's frame: a control edge from ``anchor`` (a TF tensor of that
        frame, by default the node's first input) puts it there, as TensorFlow does."""
        arr = np.asarray(value)
        if anchor is None and self.node.inputs:
            anchor = self.t(self.node.inputs[0])
        control = [anchor.split(":")[0].lstrip("^")] if anchor and self.frame() else []
        name = self.add("Const", [], {"dtype": Dt(dt.as_dtype(arr.dtype)), "value": Value(arr)}, suffix=suffix,
                        control=control)
        return f"{name}:0"

    def dtype_of(self, x: Tensor) -> Dt:
        """``x``'s dtype as an attr value (``Dt``)."""
        return Dt(x.dtype)


@dataclass(frozen=True)
class Dt:
    """An attr value that is a TensorFlow DataType."""

    dtype: dt.DType


@dataclass(frozen=True)
class Value:
    """An attr value that is a TensorProto."""

    value: Any


@dataclass(frozen=True)
class Shape:
    """An attr value that is a TensorShapeProto (None: unknown rank; None dims: unknown size)."""

    dims: Optional[Sequence[Optional[int]]]


@dataclass(frozen=True)
class TfType:
    """An attr value that is a TensorFlow DataType Turnout has no dtype for, by its enum (uint64, 23:
    the key and counter of TensorFlow's stateless random ops, ``export_random``)."""

    enum: int


def set_attr(ctx: ExportContext, a: Any, v: Any) -> None:
    """Write the attr value ``v`` (a ``TfType``, ``Dt``, ``Value``, ``Shape``, bool, int, float, str or list of ints
    or ``Dt``) into the AttrValue proto ``a``. A dtype TensorFlow has no counterpart for raises ``UnsupportedError``
    naming the node; a TensorArray value is written as its float flow."""
    if isinstance(v, TfType):
        a.type = v.enum
    elif isinstance(v, Dt):
        if v.dtype == dt.tensor_array:  # a TensorArray value travels as its float flow
            a.type = protos.DTYPE_TO_TF["float32"]
        elif v.dtype.name not in protos.DTYPE_TO_TF:
            raise UnsupportedError(f"{describe_node(ctx.node)}: dtype {v.dtype.name} has no TensorFlow counterpart")
        else:
            a.type = protos.DTYPE_TO_TF[v.dtype.name]
    elif isinstance(v, Value):
        protos.numpy_to_tensor(v.value, a.tensor)
    elif isinstance(v, Shape):
        a.shape.SetInParent()  # a scalar's shape has no dims, but it is set
        if v.dims is None:
            a.shape.unknown_rank = True
        else:
            for d in v.dims:
                a.shape.dim.add().size = -1 if d is None else int(d)
    elif isinstance(v, bool):
        a.b = v
    elif isinstance(v, int):
        a.i = v
    elif isinstance(v, float):
        a.f = v
    elif isinstance(v, str):
        a.s = v.encode()
    elif isinstance(v, list):
        if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            a.list.i.extend(v)
        elif v and all(isinstance(x, Dt) for x in v):  # a list of types (``Assert``'s ``T``)
            for x in v:
                if x.dtype.name not in protos.DTYPE_TO_TF:
                    raise UnsupportedError(f"{describe_node(ctx.node)}: dtype {x.dtype.name} has no TensorFlow "
                                           "counterpart")
                a.list.type.append(protos.DTYPE_TO_TF[x.dtype.name])
        else:
            raise UnsupportedError(f"unsupported list attr {v!r}")
    else:
        raise UnsupportedError(f"unsupported attr {v!r}")


__all__ = ["Dt", "ExportContext", "Rule", "Shape", "Value", "set_attr", "tf_node_name"]
