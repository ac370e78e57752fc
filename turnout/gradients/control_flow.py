"""Gradients of builder-made conds and loops, as whole constructs (the paper, Sec. 5.1-5.2).

cond: the gradient of ``Merge`` is a ``Switch`` on the same predicate and the gradient of ``Switch``
is a ``Merge``. Built with ``tn.cond(pred, ...)``, that is exactly what appears: the incoming
gradients of the cond's outputs enter each backward branch through a Switch on ``pred``, each branch
differentiates its forward branch, and the gradients of the values the branches read leave through
Merges. Only the branch that ran forward runs backward.

while_loop: the gradient of ``Exit`` is an ``Enter`` into the backward frame, of ``NextIteration``
an identity to the previous iteration, of ``Enter`` an ``Exit``. Built with ``tn.while_loop``: a
backward loop whose loop variables are the gradients of the forward loop variables plus one
accumulator per loop invariant (``Enter is_constant``), running ``maximum_iterations = N``, the forward
trip count read from the builder's counter (loop variable 0). Its body differentiates one forward
iteration, popping the forward values it needs off the stacks. A loop whose own ``memory_budget``
calls for recomputation gets a backward loop of another kind instead (``recompute``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from turnout import ops
from turnout.control_flow.cond import cond as build_cond
from turnout.control_flow.contexts import CondInfo, WhileContext
from turnout.control_flow.tensor_array import to_graph_value
from turnout.control_flow.while_loop import while_loop as build_while_loop
from turnout.gradients import recompute
from turnout.gradients.grads import Frame, Grads, key
from turnout.gradients.rules import is_differentiable_dtype
from turnout.graph import Tensor

if TYPE_CHECKING:
    from turnout.gradients.core import Backward

Pairs = list[tuple[Tensor, Tensor]]


def cond_grad(b: Backward, info: CondInfo, dys: Sequence[Optional[Tensor]]) -> Pairs:
    """Gradients of the tensors a cond reads from outside, given those of its outputs (its Merges)."""
    g = b.g
    live = [(i, d) for i, d in enumerate(dys) if d is not None]
    captured: dict[int, dict[Any, Tensor]] = {0: {}, 1: {}}  # branch -> key(outer x) -> Switch output
    inputs: list[Tensor] = []
    for br in (1, 0):
        for sw in info.branches[br]._captured.values():
            x = sw.node.inputs[0]
            if sw.node.id in b.on_path and is_differentiable_dtype(x.dtype) and b.wants(x):
                captured[br][key(x)] = sw
                if all(key(x) != key(y) for y in inputs):
                    inputs.append(x)
    if not inputs:
        return []
    pred = b.value(info.pred)

    def branch(br: int) -> Any:
        def fn() -> list[Tensor]:
            bctx = g.current_context
            assert bctx is not None
            b.frames.append(Frame("cond", info.branches[br], bctx, info=info, branch=br))
            try:
                grads = Grads()
                for i, d in live:
                    grads.add(info.branch_outputs[br][i], d)
                b.backprop_region(info.branches[br], grads)
                outs = []
                for x in inputs:
                    sw = captured[br].get(key(x))
                    gx = grads.total(sw) if sw is not None else None
                    outs.append(gx if gx is not None else b.zeros_like(x))
                return outs
            finally:
                b.frames.pop()

        return fn

    res = build_cond(pred, branch(1), branch(0), name=f"gradients/{info.name}")
    return [(x, to_graph_value(r)) for x, r in zip(inputs, res, strict=True)]


def loop_grad(b: Backward, w: WhileContext, dys: Sequence[Optional[Tensor]]) -> Pairs:
    """Gradients of a loop's initial values and invariants, given those of its Exits."""
    if not w.back_prop:
        return []  # back_prop=False: the loop is a constant for gradients (as in TensorFlow)
    cp = recompute.plan(w, b.budget_of(w))
    if cp is not None:  # under its budget: a backward loop that recomputes, no stacks
        return recompute.loop_grad(b, w, dys, cp)
    extra = b.stack_gradients(w)
    vars_ = [(i, lv) for i, lv in enumerate(w.loop_vars)
             if i > 0 and lv.next_iteration is not None and lv.merge.id in b.on_path
             and is_differentiable_dtype(lv.merge.outputs[0].dtype)]
    invs = [e for e in w.invariants.values() if e.id in b.on_path and b.wants(e.inputs[0])]
    if not vars_ and not invs:
        return []
    trip_count = b.trip_count(w)
    init: list[Tensor] = []
    shapes: list[Any] = []
    for i, lv in vars_:
        assert lv.exit is not None
        d = dys[i]
        init.append(d if d is not None else b.zeros_like(lv.exit.outputs[0]))
        shapes.append(lv.merge.outputs[0].shape)
    for e in invs:
        init.append(b.zeros_like(e.outputs[0]))
        shapes.append(init[-1].shape)
    nv = len(vars_)

    def body(*vs: Any) -> list[Tensor]:
        vals = [to_graph_value(v) for v in vs]
        bctx = b.g.current_context
        assert isinstance(bctx, WhileContext)
        b.frames.append(Frame("loop", w, bctx))
        try:
            grads = Grads()
            for (_, lv), d in zip(vars_, vals[:nv], strict=True):
                assert lv.next_iteration is not None
                grads.add(lv.next_iteration.inputs[0], d)
            for t, gs, gate in extra:  # second order: gradients of this iteration's values popped later
                grads.add(t, b.pop_stack_gradient(len(b.frames) - 1, gs, gate, t))
            b.backprop_region(w, grads)
            outs = []
            for _, lv in vars_:
                assert lv.body_input is not None
                gv = grads.total(lv.body_input.outputs[0])
                gv = gv if gv is not None else b.zeros_like(lv.body_input.outputs[0])
                outs.append(b.refine_shape(gv, lv.merge.outputs[0].shape))
            for e, acc in zip(invs, vals[nv:], strict=True):
                new = grads.accumulate_into(e.outputs[0], acc)  # invariants: sum over iterations, in place
                outs.append(b.refine_shape(new, acc.shape))
            return outs
        finally:
            b.frames.pop()

    built: list[WhileContext] = []

    def body_and_context(*vs: Any) -> list[Tensor]:
        c = b.g.current_context
        assert isinstance(c, WhileContext)
        built.append(c)
        return body(*vs)

    res = build_while_loop(lambda *vs: ops.constant(True), body_and_context, init,
                           parallel_iterations=w.parallel_iterations, maximum_iterations=trip_count,
                           shape_invariants=shapes, swap_memory=w.swap_memory, memory_budget=b.budget_of(w).bytes,
                           name=f"gradients/{w.name}")
    b.close_sync(w)
    b.close_stack_gradients(built[0], w)
    res = [to_graph_value(r) for r in res]
    pairs: Pairs = [(lv.enter.inputs[0], r) for (_, lv), r in zip(vars_, res[:nv], strict=True)]
    pairs += [(e.inputs[0], r) for e, r in zip(invs, res[nv:], strict=True)]
    return pairs
