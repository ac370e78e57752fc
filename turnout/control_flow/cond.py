"""``cond`` and ``case``, lowered to Switch and Merge (the paper, Sec. 4.1).

Meaning, as plain Python::

    def cond(pred, true_fn, false_fn):
        return true_fn() if pred else false_fn()

    def case(branch_index, branch_fns, default):
        return branch_fns[branch_index]() if 0 <= branch_index < len(branch_fns) else default()

Lowering: ``Switch(pred, pred)`` gives the two pivots; every outside tensor a branch reads is routed
through ``Switch(value, pred)[branch]``; ops without inputs get a control dependency on their branch's
pivot; each pair of branch outputs is joined by a ``Merge``. Only the taken branch computes: the other
receives dead values. ``case`` is a chain of conds on ``branch_index == k``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

from turnout import dtypes as dt
from turnout import nest
from turnout.control_flow.contexts import CondContext, CondInfo, invariant_pivot
from turnout.control_flow.tensor_array import from_graph_value, to_graph_value
from turnout.errors import DTypeError, GraphBuildError, ShapeError
from turnout.graph import Node, Tensor, get_default_graph
from turnout.ops import convert_argument, equal


def _flat_deps(graph: Any) -> list[Node]:
    return [n for group in graph._control_deps for n in group]


def cond(pred: Any, true_fn: Callable[[], Any], false_fn: Callable[[], Any], name: Optional[str] = None) -> Any:
    """Run ``true_fn()`` if ``pred`` else ``false_fn()``; both must return the same structure of tensors."""
    if not callable(true_fn) or not callable(false_fn):
        raise GraphBuildError("cond: true_fn and false_fn must be callables taking no arguments")
    p = convert_argument(pred, "cond", "pred")
    if p.dtype != dt.bool_:
        raise DTypeError(f"cond: the predicate must be a bool tensor, got {p.dtype.name} ({p.name})")
    if p.shape is not None and p.shape != ():
        raise ShapeError(f"cond: the predicate must be a scalar, got shape {p.shape} ({p.name})")
    g = p.graph
    with g._all_or_nothing():  # a cond that fails to build leaves nothing behind
        return _build(g, p, true_fn, false_fn, name)


def _build(g: Any, p: Tensor, true_fn: Callable[[], Any], false_fn: Callable[[], Any], name: Optional[str]) -> Any:
    """``cond`` in graph ``g`` on the checked predicate ``p``: Switches, the two branches, Merges."""
    outer = g.current_context
    if outer is not None:
        p = outer.capture(p)
    elif p.node.context is not None:
        raise GraphBuildError(f"cond: predicate {p.name} was created inside {p.node.context.describe()}")
    deps = _flat_deps(g)
    cname = g.unique_name(name or "cond")
    with g._no_capture():
        sw = g.create_node("Switch", [p, p], name=f"{cname}/switch_pred",
                           control_inputs=deps + invariant_pivot(outer, [p]))
    info = CondInfo(pred=p, pivot_switch=sw, name=cname)
    structures: dict[int, Any] = {}
    for branch, fn in ((1, true_fn), (0, false_fn)):
        ctx = CondContext(g, outer, info, branch, deps)
        with g._in_context(ctx), g._no_capture():
            ctx.pivot = g.create_node("Identity", [sw.outputs[branch]], name=f"{cname}/pivot_{'t' if branch else 'f'}")
        with g._in_context(ctx), g.control_dependencies(None), g.name_scope(f"{cname}/{'true' if branch else 'false'}"):
            out = fn()
            structures[branch] = out
            fname = "true_fn" if branch else "false_fn"
            flat = [convert_argument(to_graph_value(v), f'cond "{cname}"', f"output {i} of {fname}")
                    for i, v in enumerate(nest.flatten(out))]
            flat = [ctx.capture(t) for t in flat]
        info.branch_outputs[branch] = flat
    nest.assert_same_structure(structures[1], structures[0], f'cond "{cname}": true_fn and false_fn outputs')
    merged = []
    with g._no_capture():
        for i, (f, t) in enumerate(zip(info.branch_outputs[0], info.branch_outputs[1], strict=True)):
            if f.dtype != t.dtype:
                raise DTypeError(
                    f'cond "{cname}": output {i} is {t.dtype.name} in true_fn but {f.dtype.name} in false_fn'
                )
            m = g.create_node("Merge", [f, t], name=f"{cname}/merge")
            info.merges.append(m)
            merged.append(from_graph_value(m.outputs[0]))
    return nest.pack_as(structures[1], merged)


def case(branch_index: Any, branch_fns: Sequence[Callable[[], Any]], default: Optional[Callable[[], Any]] = None,
         name: Optional[str] = None) -> Any:
    """Run ``branch_fns[branch_index]()``, or ``default()`` when the index is out of range.

    Without ``default`` the last branch serves as default. Lowered to nested conds, so exactly one
    branch computes.
    """
    fns = list(branch_fns)
    if not fns:
        raise GraphBuildError("case: needs at least one branch function")
    idx = convert_argument(branch_index, "case", "branch_index")
    if idx.dtype != dt.int32 or (idx.shape is not None and idx.shape != ()):
        raise DTypeError(f"case: branch_index must be an int32 scalar, got {idx.dtype.name} {idx.shape}")
    if default is None:
        fns, default = fns[:-1], fns[-1]
    g = get_default_graph() if not isinstance(idx, Tensor) else idx.graph
    cname = g.unique_name(name or "case")

    def chain(k: int) -> Any:
        if k == len(fns):
            return default()  # type: ignore[misc]
        return cond(equal(idx, k), fns[k], lambda: chain(k + 1), name=f"{cname}/branch{k}")

    with g._all_or_nothing():
        return chain(0)
