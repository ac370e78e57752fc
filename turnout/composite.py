"""One construction per composite op, shared by its builder and its GraphDef import rule.

Why: ``tn.softmax`` and the importer's ``Softmax`` rule (likewise squeeze, unstack, split, slice,
one-hot, clipping) build the same nodes from the same primitives. Each construction is written once,
against a ``Maker``: something that creates a node (``create``) and a constant (``const``). The
builders pass a ``GraphMaker`` (nodes named after the builder); import rules pass their
``ImportContext``, which already has both methods and names the nodes after the NodeDef (the node made
with ``suffix=None`` carries its name, helpers get ``<name>/_tn/<suffix>``) and puts constants in the
frame of their anchors. The constructions only build; each caller checks its arguments first and
raises its own errors (a builder's name its argument, a rule's name its NodeDef).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Protocol

import numpy as np

from turnout import dtypes as dt
from turnout.graph import Graph, Node, Tensor


class Maker(Protocol):
    """What a construction builds with: ``create`` one node (``suffix=None`` for the node that stands
    for the whole op), ``const`` a constant (in the frame of ``anchors``, where that matters)."""

    def create(self, op: str, inputs: Sequence[Any], attrs: Optional[dict[str, Any]] = None,
               suffix: Optional[str] = None) -> Node:
        """Create one ``op`` node; ``suffix=None`` for the node that stands for the whole op (it carries the op's
        name), else a helper named with ``suffix``."""
        ...

    def const(self, value: Any, anchors: Sequence[Any] = (), suffix: Optional[str] = "const") -> Tensor:
        """A constant ``value``, placed in the frame of ``anchors`` (where the maker must place it itself, as an
        import rule's does) and named with ``suffix``."""
        ...


class GraphMaker:
    """The ``Maker`` of a builder: nodes in ``graph`` (captured into the current cond branch or loop
    body as ``create_node`` does for every op), the op's node named ``name`` (None: the op's default
    name), helpers ``<scope>/<suffix>``."""

    def __init__(self, graph: Graph, name: Optional[str], scope: str) -> None:
        self.graph, self.name, self.scope = graph, name, name or scope

    def create(self, op: str, inputs: Sequence[Any], attrs: Optional[dict[str, Any]] = None,
               suffix: Optional[str] = None) -> Node:
        """Create ``op`` through ``Graph.create_node``, which captures its inputs into the current cond branch or
        loop body; named ``name`` for the op's own node, ``<scope>/<suffix>`` for a helper."""
        name = self.name if suffix is None else f"{self.scope}/{suffix}"
        return self.graph.create_node(op, list(inputs), attrs or {}, name=name)

    def const(self, value: Any, anchors: Sequence[Any] = (), suffix: Optional[str] = "const") -> Tensor:
        """A ``Const`` of ``value``. ``anchors`` are not needed here: ``create_node`` puts an input-less node in the
        current branch or loop body by a control dependency on its pivot."""
        arr = np.asarray(value)
        return self.create("Const", [], {"value": arr, "dtype": dt.as_dtype(arr.dtype).name},
                           suffix=suffix or "const").outputs[0]


def last_suffix(k: int, n: int, what: str) -> Optional[str]:
    """The suffix of output ``k`` of ``n``: the last carries the op's name."""
    return None if k == n - 1 else f"{what}{k}"


def getitem_spec(key: tuple[Any, ...], dyn: list[Tensor]) -> list[dict[str, Any]]:
    """GetItem's ``spec`` of a key of ints, slices and int32 scalar tensors (appended to ``dyn``)."""
    def entry(x: Any) -> Any:
        if isinstance(x, Tensor):
            dyn.append(x)
            return {"input": len(dyn) - 1}
        return x

    spec: list[dict[str, Any]] = []
    for k in key:
        if isinstance(k, slice):
            spec.append({"kind": "slice", "start": entry(k.start), "stop": entry(k.stop), "step": k.step})
        else:
            spec.append({"kind": "index", "value": entry(k)})
    return spec


def basic_index(key: tuple[Any, ...], rank: Optional[int]) -> tuple[tuple[Any, ...], list[int]]:
    """A numpy index with ``...`` and ``None`` as ``GetItem`` takes it, ints and slices only, and the
    axes of the result at which a ``None`` adds a dimension of size 1 (in increasing order, so that
    ``ExpandDims`` at each in turn rebuilds numpy's result: ``new_axes``). ``...`` stands for as many
    full slices as the axes the other entries leave, so expanding it needs the rank of the indexed
    tensor; the caller refuses an ellipsis of unknown rank, and more than one, with its own error.
    Shared by ``x[key]`` and the importer's ``StridedSlice`` (its new-axis and ellipsis bits)."""
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    at = [i for i, k in enumerate(key) if k is Ellipsis]  # (by identity: entries may be tensors)
    if at:
        assert rank is not None, "the caller refuses an ellipsis of unknown rank"
        i = at[0]
        key = (*key[:i], *[slice(None)] * max(rank - consumed, 0), *key[i + 1:])
    plain: list[Any] = []
    new_axes: list[int] = []
    out = 0  # axes of the result so far
    for k in key:
        if k is None:
            new_axes.append(out)
            out += 1
        else:
            plain.append(k)
            out += isinstance(k, slice)
    return tuple(plain), new_axes


def index_with_new_axes(m: Maker, x: Tensor, spec: list[dict[str, Any]], dyn: Sequence[Tensor],
                        new_axes: Sequence[int]) -> Tensor:
    """``x[key]`` for a ``basic_index`` result: one ``GetItem`` of the plain part (``spec``, its
    run-time entries ``dyn``), then an ``ExpandDims`` at each new axis; the last node built carries
    the op's name. Gradients and every backend need nothing beyond those two primitives."""
    if not new_axes:
        return m.create("GetItem", [x, *dyn], {"spec": spec}).outputs[0]
    out = m.create("GetItem", [x, *dyn], {"spec": spec}, suffix="basic").outputs[0]
    for k, axis in enumerate(new_axes):
        out = m.create("ExpandDims", [out], {"axis": axis}, suffix=last_suffix(k, len(new_axes), "new_axis")).outputs[0]
    return out


def getitem(m: Maker, x: Tensor, key: tuple[Any, ...], suffix: Optional[str]) -> Tensor:
    """``x[key]`` as one GetItem node (numpy's basic indexing)."""
    dyn: list[Tensor] = []
    spec = getitem_spec(key, dyn)
    return m.create("GetItem", [x, *dyn], {"spec": spec}, suffix=suffix).outputs[0]


def dim(m: Maker, x: Tensor, axis: int, suffix: str) -> Any:
    """Dimension ``axis`` of ``x``: an int when its static shape says so, else an int32 scalar read
    from its shape when it runs."""
    d = None if x.shape is None else x.shape[axis]
    if d is not None:
        return int(d)
    shp = m.create("Shape", [x], suffix=f"{suffix}_shape").outputs[0]
    return getitem(m, shp, (axis,), suffix)


def int32(m: Maker, v: int, anchor: Tensor, suffix: str) -> Tensor:
    """An int32 scalar constant in ``anchor``'s frame."""
    return m.const(np.asarray(v, np.int32), [anchor], suffix=suffix)


def checked_that(m: Maker, ok: Tensor, x: Tensor, message: str, suffix: str) -> Tensor:
    """``x`` once the bool scalar ``ok`` holds when it runs; else a KernelError with ``message`` (an
    ``Assert``, so every backend fails the same way). Why: a fact a construction relies on but cannot
    see when building (an axis of unknown size is 1) would otherwise give a wrong value, not an error."""
    return m.create("Assert", [ok, x], {"message": message}, suffix=suffix).outputs[0]


__all__ = ["GraphMaker", "Maker", "checked_that", "dim", "getitem", "getitem_spec", "int32", "last_suffix"]
