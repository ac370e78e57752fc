"""Automatic differentiation, graph to graph, through cond and while_loop (the paper, Sec. 5).

``gradients(ys, xs)`` returns ``d(sum ys)/dx`` for each ``x`` as new tensors of the same graph;
``memory_report(graph)`` lists what the gradient stacks of each loop hold per iteration, and
``memory_report(session)`` what the last run held per loop and device.
Modules: ``rules`` (one gradient rule per primitive), ``control_flow`` (conds and loops as whole
constructs), ``stacks`` (StackNew / StackPush / StackPop and the sync variable), ``grads`` (the values they
pass: gradient contributions and frames), ``core`` (the reverse-mode walk), ``memory`` (the report). Each
top-level call is recorded on its graph (``turnout.rebuild``), to be built again where a run's memory
budget needs it to recompute.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Optional

import numpy as np

from turnout import nest, ops, rebuild, shapes
from turnout.arguments import checked, positive_int
from turnout.errors import ArgumentError, GradientError
from turnout.gradients.core import Backward
from turnout.gradients.grads import Grads, key
from turnout.gradients.memory import LoopDeviceMemory, MemoryReport, RunMemoryReport, memory_report
from turnout.gradients.rules import GRAD_RULES, NON_DIFFERENTIABLE
from turnout.graph import Graph, Tensor, user_source_line

__all__ = ["GRAD_RULES", "NON_DIFFERENTIABLE", "LoopDeviceMemory", "MemoryReport", "RunMemoryReport", "gradients",
           "memory_report"]


def _as_x(x: Any) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if hasattr(x, "handle_node"):  # a Variable: its gradient is the sum over its reads
        return x.handle  # type: ignore[no-any-return]
    raise GradientError(f"gradients: xs must be tensors or Variables, got {type(x).__name__}")


def _backprop_outward(b: Backward, root: Any, grads: Grads) -> None:
    """Called inside a cond branch or loop body, a target may reach a source only through tensors
    computed outside it (captured through a Switch or a constant Enter). Carry the gradients of those
    captures to the outside tensors, then differentiate the enclosing regions too, one level at a time,
    building the backward ops here (they read forward values of the outer regions, which are visible
    here by capture). Without this, such a gradient would silently be None."""
    c = root
    while c is not None:
        for inner in list(c._captured.values()):
            d = grads.total(inner)
            if d is not None and inner.node.op in ("Switch", "Enter"):
                outer = inner.node.inputs[0]
                if b.wants(outer):
                    grads.add(outer, d)
        b.backprop_region(c.outer, grads)
        c = c.outer


@checked
def gradients(ys: Any, xs: Any, grad_ys: Any = None, unconnected_gradients: str = "none",
              memory_budget: Optional[int] = None, stop_gradients: Any = None) -> list[Optional[Tensor]]:
    """Gradients of ``sum(ys)`` (weighted by ``grad_ys``, default ones) with respect to each of ``xs``.

    ``xs`` may hold Variables (the gradient w.r.t. all reads of the Variable). A gradient that does not
    exist (no differentiable path) is ``None``, or zeros with ``unconnected_gradients="zero"``. Call it
    inside a loop body or cond branch to differentiate within that iteration / branch.

    ``memory_budget``: the bytes that the loops this gradient reverses may save for it, all together,
    at any trip count (``docs/memory_budgets.rst``): each loop gets a share (``gradients.budgets``),
    reversed as a loop with that budget of its own is, by recomputation from checkpoints where its
    state has a static size. Why here and not only per run: a run's budget comes after the gradient
    graph is built; a run that outgrows the stacks is repeated on this call built again under the
    run's budget (``turnout.rebuild``, recorded for a call at the top level), after the stacks
    stopped it, and a loop holds one set of slots, made by the first budget that recomputes it.

    ``stop_gradients`` (a tensor or a list of them), as TensorFlow's: no gradient passes through
    them, as if each were ``tn.stop_gradient`` of itself for this call alone; one that is also in
    ``xs`` still gets its own gradient (``gradients(a + 2a, [a, 2a], stop_gradients=[a, 2a])`` is
    ``[1, 1]``).
    """
    if unconnected_gradients not in ("none", "zero"):
        raise GradientError(f'unconnected_gradients must be "none" or "zero", got {unconnected_gradients!r}')
    if memory_budget is not None and not positive_int(memory_budget):
        raise ArgumentError(f"gradients: memory_budget must be a positive int (bytes) or None, got {memory_budget!r}")
    y_list = [ops.convert_to_tensor(y) for y in nest.flatten(ys, "gradients: ys")]
    x_list = [_as_x(x) for x in (xs if isinstance(xs, (list, tuple)) else [xs])]
    stops = [] if stop_gradients is None else nest.flatten(stop_gradients)
    for t in stops:
        if not isinstance(t, Tensor):
            raise GradientError(f"gradients: stop_gradients must be tensors, got {type(t).__name__}")
    if not y_list:
        raise GradientError("gradients: ys is empty")
    g = y_list[0].graph
    for t in [*y_list, *x_list, *stops]:
        if t.graph is not g:
            raise GradientError(f"gradients: {t.name} belongs to another graph than {y_list[0].name}; "
                                "ys and xs must all be tensors of one graph")
    root = g.current_context
    for t in [*y_list, *x_list]:
        c = t.node.context
        if c is not None and not (root is not None and root.is_within(c)) and c is not root:
            raise GradientError(
                f"gradients: {t.name} was created inside {c.describe()}; call tn.gradients inside it"
            )
    # (built in the graph of ys and xs, whichever graph is the default: the one place it can go)
    with g.as_default():
        gy_list = _weights(y_list, ys, grad_ys)
        start = len(g.nodes)
        out = _build(g, root, y_list, x_list, gy_list, unconnected_gradients, memory_budget, stops)
    if root is None:  # a top-level call: a run under a memory budget may build it again (``rebuild``)
        rebuild.record(g, start, out, user_source_line(),
                       partial(_twin, g, y_list, x_list, gy_list, unconnected_gradients, stops))
    return out


def _twin(g: Graph, y_list: list[Tensor], x_list: list[Tensor], gy_list: list[Any], unconnected_gradients: str,
          stops: list[Tensor], memory_budget: Optional[int]) -> list[Optional[Tensor]]:
    """A recorded top-level call built again under ``memory_budget`` (``rebuild.GradientCall.build``),
    at the top level of its graph whatever is being built when it is asked for."""
    with g.as_default(), g._in_context(None), g.control_dependencies(None):
        return _build(g, None, y_list, x_list, gy_list, unconnected_gradients, memory_budget, stops)


def _weights(y_list: list[Tensor], ys: Any, grad_ys: Any) -> list[Any]:
    """The weight of each tensor of ``y_list`` (None: ones), a tensor of its dtype."""
    if grad_ys is None:
        return [None] * len(y_list)
    given = _grad_ys_up_to(ys, grad_ys)
    if len(given) != len(y_list):
        raise GradientError(f"gradients: {len(given)} grad_ys for {len(y_list)} ys")
    # (a value that is not yet a tensor takes the dtype of the y it weights, as in TensorFlow)
    return [v if v is None or isinstance(v, Tensor) else ops.convert_to_tensor(v, dtype=y.dtype)
            for v, y in zip(given, y_list, strict=True)]


def _grad_ys_up_to(ys: Any, grad_ys: Any) -> list[Any]:
    """The weight of each tensor of ``ys``: ``grad_ys`` taken apart only as deep as ``ys`` is nested,
    as TensorFlow does (a single ``y`` may have its weight in a one-item list). Why not flattened
    whole: a weight given as a Python list (``grad_ys=[[1.0, 2.0]]`` for ``ys=[y]`` of shape [2]) is one
    value, which flattening split into two ("2 grad_ys for 1 ys")."""
    if not nest.is_nested(ys):
        return list(grad_ys) if isinstance(grad_ys, (list, tuple)) else [grad_ys]

    def up_to(s: Any, v: Any) -> list[Any]:
        if not nest.is_nested(s):
            return [v]
        if isinstance(s, dict):
            keys = nest.sorted_keys(s)
            if not isinstance(v, dict) or set(v) != set(keys):
                raise GradientError(f"gradients: grad_ys must have the structure of ys: a dict with keys {keys} "
                                    f"where ys has one, got {type(v).__name__}")
            return [w for k in keys for w in up_to(s[k], v[k])]
        if not isinstance(v, (list, tuple)) or len(v) != len(s):
            n = len(v) if isinstance(v, (list, tuple)) else 1
            raise GradientError(f"gradients: {n} grad_ys for {len(s)} ys")
        return [w for a, b in zip(s, v, strict=True) for w in up_to(a, b)]

    return up_to(ys, grad_ys)


def _build(g: Graph, root: Any, y_list: list[Tensor], x_list: list[Tensor], gy_list: list[Any],
           unconnected_gradients: str, memory_budget: Optional[int], stops: list[Tensor]) -> list[Optional[Tensor]]:
    """``gradients``, its arguments checked and its weights made tensors, with ``g`` the default graph."""
    b = Backward(g, root, x_list, y_list, stops)
    b.share(None if memory_budget is None else int(memory_budget))
    grads = Grads()
    # (all or nothing: a gradient that fails to build, say an op without a gradient rule in a loop,
    # leaves no half-built backward loop behind, see ``Graph._all_or_nothing``)
    with g._all_or_nothing(), g.name_scope("gradients"):
        for y, gy in zip(y_list, gy_list, strict=True):
            if gy is not None and gy.dtype != y.dtype:
                raise GradientError(f"gradients: grad_ys for {y.name} is {gy.dtype.name}, expected {y.dtype.name}")
            if gy is not None and not shapes.compatible(gy.shape, y.shape):
                raise GradientError(f"gradients: grad_ys for {y.name} has shape {shapes.fmt(gy.shape)}, expected "
                                    f"{shapes.fmt(y.shape)} (the shape of the tensor it weights)")
            grads.add(y, gy if gy is not None else ops.ones_like(y))
        b.backprop_region(root, grads)
        _backprop_outward(b, root, grads)
        out: list[Optional[Tensor]] = []
        for x in x_list:
            seen = x
            d = grads.total(seen)
            if d is None and unconnected_gradients == "zero":
                d = b.zeros_like(x)
            out.append(d)
    return out
