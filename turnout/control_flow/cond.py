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

import numpy as np

from turnout import dtypes as dt
from turnout import nest
from turnout.arguments import check_arity, checked
from turnout.control_flow.contexts import CondContext, CondInfo, invariant_pivot
from turnout.control_flow.tensor_array import from_graph_value, to_graph_value
from turnout.errors import DTypeError, GraphBuildError, ShapeError
from turnout.graph import Node, Tensor, get_default_graph
from turnout.ops import (
    assert_true,
    cast,
    constant,
    convert_argument,
    equal,
    less,
    less_equal,
    reduce_sum,
    stack,
    where,
)


def _flat_deps(graph: Any) -> list[Node]:
    return [n for group in graph._control_deps for n in group]


@checked
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
            check_arity(fn, [], f'cond "{cname}"', "true_fn" if branch else "false_fn")
            out = fn()
            structures[branch] = out
            fname = "true_fn" if branch else "false_fn"
            flat = [convert_argument(to_graph_value(v), f'cond "{cname}"', f"output {i} of {fname}")
                    for i, v in enumerate(nest.flatten(out, f'cond "{cname}": the output of {fname}'))]
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
            if f.spec.elem_dtype != t.spec.elem_dtype:  # (TensorArrays: both are dtype tensor_array)
                raise DTypeError(
                    f'cond "{cname}": output {i} is a TensorArray of {t.spec.elem_dtype.name} in true_fn but of '  # type: ignore[union-attr]
                    f"{f.spec.elem_dtype.name} in false_fn"  # type: ignore[union-attr]
                )
            m = g.create_node("Merge", [f, t], name=f"{cname}/merge")
            info.merges.append(m)
            merged.append(from_graph_value(m.outputs[0]))
    return nest.pack_as(structures[1], merged)


@checked
def case(branch_index: Any = None, branch_fns: Optional[Sequence[Callable[[], Any]]] = None,
         default: Optional[Callable[[], Any]] = None, name: Optional[str] = None, exclusive: bool = False, *,
         pred_fn_pairs: Any = None) -> Any:
    """Run ``branch_fns[branch_index]()``, or ``default()`` when the index is out of range.
    ``branch_fns`` is a list of callables, or (as TensorFlow's ``tf.switch_case`` takes them) a dict
    of index -> callable or a list of ``(index, callable)`` pairs, the indices ``0 .. n-1``.

    Without ``default`` the last branch serves as default. Lowered to nested conds, so exactly one
    branch computes.

    The predicate form, ``case(pred_fn_pairs, default=None, exclusive=False)`` (TensorFlow's
    ``tf.case``): ``pred_fn_pairs`` is a list of ``(bool scalar, fn)`` pairs, or a dict of them in
    its order, and the first pair whose predicate is true runs, else ``default()``. With
    ``exclusive=True`` more than one true predicate is a ``KernelError``; without ``default`` the last
    pair's ``fn`` runs when no other predicate holds, and its own predicate false too is a
    ``KernelError`` (``tn.assert_true``). It is the index form over the first true predicate's index,
    so it lowers, differentiates and compiles as that does. The pairs may also be given by keyword,
    ``case(pred_fn_pairs=...)``, as TensorFlow code often does.
    """
    if default is not None and not callable(default):
        raise GraphBuildError(f"case: default must be a callable taking no arguments, got {default!r}")
    if pred_fn_pairs is not None:
        if branch_index is not None or branch_fns is not None:
            raise GraphBuildError("case: give pred_fn_pairs, or a branch index with its branch functions, not both")
        return _case_of_pairs(pred_fn_pairs, default, exclusive, name)
    if branch_fns is None:
        return _case_of_pairs(branch_index, default, exclusive, name)
    if exclusive:
        raise GraphBuildError("case: exclusive applies to the predicate form, case(pred_fn_pairs, ...), "
                              "where several predicates may hold")
    fns = _indexed_branches(branch_fns)
    idx = convert_argument(branch_index, "case", "branch_index")
    if idx.dtype != dt.int32 or (idx.shape is not None and idx.shape != ()):
        raise DTypeError(f"case: branch_index must be an int32 scalar, got {idx.dtype.name} {idx.shape}")
    if default is None:
        fns, default = fns[:-1], fns[-1]
    g = get_default_graph() if not isinstance(idx, Tensor) else idx.graph
    cname = g.unique_name(name or "case")

    def chain(k: int) -> Any:
        if k == len(fns):
            check_arity(default, [], f'case "{cname}"', "default")  # type: ignore[arg-type]
            return default()  # type: ignore[misc]
        return cond(equal(idx, k), fns[k], lambda: chain(k + 1), name=f"{cname}/branch{k}")

    with g._all_or_nothing():
        return chain(0)


def _indexed_branches(branch_fns: Any) -> list[Callable[[], Any]]:
    """``case``'s branch functions in index order, from what TensorFlow's ``tf.switch_case`` takes: a
    list of callables (branch ``k`` is item ``k``), a dict of index -> callable, or a list of
    ``(index, callable)`` pairs, the indices ``0 .. n-1`` each once. Why checked here: an item that
    is not callable used to be called when the branches were built, and a dict gave its keys as the
    branches, both Python's "'int' object is not callable" from deep inside ``cond``."""
    items = list(branch_fns.items()) if isinstance(branch_fns, dict) else list(branch_fns)
    if not items:
        raise GraphBuildError("case: needs at least one branch function")
    if not isinstance(items[0], tuple):  # a list of callables
        for k, f in enumerate(items):
            if not callable(f):
                raise GraphBuildError(f"case: branch_fns[{k}] must be a callable taking no arguments, got {f!r}")
        return items  # type: ignore[return-value]
    for k, item in enumerate(items):
        if not (isinstance(item, tuple) and len(item) == 2):
            raise GraphBuildError(f"case: branch_fns[{k}] must be an (index, callable) pair as the items before it "
                                  f"are, got {item!r}")
        if not isinstance(item[0], (int, np.integer)) or isinstance(item[0], (bool, np.bool_)):
            raise GraphBuildError(f"case: the index of branch_fns[{k}] must be an int, got {item[0]!r}")
        if not callable(item[1]):
            raise GraphBuildError(f"case: the branch function for index {item[0]} is not callable: {item[1]!r}")
    keys = sorted(int(i) for i, _ in items)
    if keys != list(range(len(items))):
        raise GraphBuildError(f"case: the branch indices must be 0 to {len(items) - 1}, each once; got {keys}")
    return [f for _, f in sorted(items, key=lambda p: int(p[0]))]


def _case_of_pairs(pairs: Any, default: Optional[Callable[[], Any]], exclusive: bool, name: Optional[str]) -> Any:
    """``case``'s predicate form: the index of the first true predicate (a chain of ``Select``s), with
    the checks ``exclusive`` and a missing ``default`` ask for, then the index form."""
    items = list(pairs.items()) if isinstance(pairs, dict) else pairs
    if not isinstance(items, (list, tuple)):
        raise GraphBuildError("case: pass a branch index and branch functions, case(i, [f0, f1, ...]), or a "
                              f"list of (predicate, fn) pairs, case([(p0, f0), ...]); got {type(pairs).__name__}")
    if not items and default is None:
        raise GraphBuildError("case: needs at least one (predicate, fn) pair or a default")
    preds: list[Tensor] = []
    fns: list[Callable[[], Any]] = []
    for k, item in enumerate(items):
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise GraphBuildError(f"case: pair {k} must be a (predicate, fn) pair, got {item!r}")
        if not callable(item[1]):
            raise GraphBuildError(f"case: the fn of pair {k} is not callable: {item[1]!r}")
        p = convert_argument(item[0], "case", f"the predicate of pair {k}")
        if p.dtype != dt.bool_ or (p.shape is not None and p.shape != ()):
            raise DTypeError(f"case: the predicate of pair {k} must be a bool scalar, got {p.dtype.name} {p.shape}")
        preds.append(p)
        fns.append(item[1])
    if not fns:
        check_arity(default, [], "case", "default")  # type: ignore[arg-type]
        return default()  # type: ignore[misc]
    g = preds[0].graph
    cname = g.unique_name(name or "case")
    with g._all_or_nothing():
        idx = constant(len(fns), name=f"{cname}/none")  # (no predicate holds)
        for k in reversed(range(len(fns))):
            idx = where(preds[k], constant(k), idx, name=f"{cname}/first{k}")
        if exclusive and len(fns) > 1:
            holding = reduce_sum(stack([cast(p, dt.int32) for p in preds]))
            idx = assert_true(less_equal(holding, 1), idx, "more than one predicate is true, and exclusive=True",
                              name=f"{cname}/exclusive")
        if default is None:
            idx = assert_true(less(idx, len(fns)), idx, "no predicate is true, and there is no default",
                              name=f"{cname}/some_true")
            # the last pair is the default; a single pair is its own default too, so that a cond still
            # reads the checked index (a case of one branch alone would never read it, nor check it)
            return case(idx, fns if len(fns) > 1 else fns * 2, name=cname)
        return case(idx, fns, default, name=cname)
