"""Gradient stacks: saving forward loop values for the backward loop (the paper, Sec. 5.2).

A forward value ``t`` computed in iteration ``k`` of loop ``W`` and needed by the gradient is pushed
with ``StackPush(handle, index, t)`` inside ``W`` and read back with ``StackPop(handle, index)``
inside the backward loop. The index is the int32 vector of the iteration counters of every enclosing
forward loop, outermost first; stacks are keyed, not push-ordered, so overlapping iterations
(``parallel_iterations > 1``) cannot mix values up ([E-Stack-Push], [E-Stack-Pop]).

Race-freedom (every pop happens after its push, through a chain of tokens) is made explicit by a
*sync* loop variable added to ``W``: its body value depends, by control edges, on every push of the
iteration, so its ``Exit`` fires only after all pushes of all iterations; the backward loop computes
its pop indices from the trip count gated on that ``Exit``. This is TensorFlow's ``forward_sync``,
expressed with the paper's own primitives and without editing existing nodes (graphs are append-only).
"""

from __future__ import annotations

from typing import Any

from turnout import dtypes as dt
from turnout import shapes as sh
from turnout.control_flow.contexts import LoopVar, WhileContext
from turnout.gradients.budgets import LoopBudget
from turnout.graph import Graph, Node, Tensor


def new_stack(g: Graph, t: Tensor, loop: WhileContext, budget: LoopBudget) -> Node:
    """A StackNew in the root frame for forward tensor ``t`` of ``loop``, whose gradient keeps stacks
    under ``budget`` (the loop's own, or its share of the gradient's: ``Backward.budget_of``). Its
    attrs tell the backends and ``memory_report`` what is stacked, for which frame, whether to swap
    it out and within what budget."""
    attrs: dict[str, Any] = {
        "elem_dtype": t.dtype.name,
        "elem_shape": None if t.shape is None else list(t.shape),
        "forward_tensor": t.name,
        "frame_name": loop.frame_name,
        "loop_name": loop.name,
        "swap_memory": loop.swap_memory,
        "parallel_iterations": loop.parallel_iterations,
    }
    if budget.bytes is not None:  # recorded only when set: older graphs read the same
        attrs["memory_budget"] = budget.bytes
        if budget.budget_from != "loop":
            attrs["budget_from"] = budget.budget_from
    if t.dtype == dt.tensor_array:
        attrs["ta_elem_dtype"] = t.spec.elem_dtype.name if t.spec.elem_dtype else None
        attrs["ta_elem_shape"] = None if t.spec.elem_shape is None else list(t.spec.elem_shape)
    with g._in_context(None), g.control_dependencies(None), g._no_capture(), g._root_scope():
        return g.create_node("StackNew", (), attrs, name=f"gradients/stack/{t.node.name}")


def push(g: Graph, handle: Tensor, index: Tensor, t: Tensor, loop: WhileContext) -> Node:
    """StackPush inside the forward loop body (the handle is captured into the frame)."""
    with g._in_context(loop), g.control_dependencies(None), g._root_scope():
        return g.create_node("StackPush", [handle, index, t], name=f"gradients/push/{t.node.name}")


def pop(g: Graph, stack: Node, index: Tensor) -> Tensor:
    """StackPop in the current (backward) context; its static type is the stacked tensor's."""
    a = stack.attrs
    attrs: dict[str, Any] = {"dtype": a["elem_dtype"], "shape": a["elem_shape"],
                             "stack": stack.name, "forward_tensor": a["forward_tensor"]}
    if a.get("ta_elem_dtype"):
        attrs["elem_dtype"] = a["ta_elem_dtype"]
        attrs["elem_shape"] = a["ta_elem_shape"]
    with g.control_dependencies(None):
        return g.create_node("StackPop", [stack.outputs[0], index], attrs,
                             name=f"gradients/pop/{a['forward_tensor'].split(':')[0]}").outputs[0]


def add_sync_var(g: Graph, loop: WhileContext) -> LoopVar:
    """A new int32 loop variable of ``loop`` (``WhileContext.add_loop_var``) whose back edge stays
    open until ``close_sync_var``."""
    return loop.add_loop_var(loop.counter.enter.inputs[0], f"{loop.name}/gradient_sync", gradient_sync=True)


def close_sync_var(g: Graph, loop: WhileContext, lv: LoopVar, pushes: list[Node]) -> None:
    """Close the sync variable: its next value waits (control edges) for every push of the iteration."""
    assert lv.body_input is not None
    with g._in_context(loop), g._no_capture(), g.control_dependencies(None), g._root_scope():
        s = g.create_node("Identity", [lv.body_input.outputs[0]], control_inputs=pushes,
                          name=f"{loop.name}/gradient_sync/after_pushes")
    loop.close_loop_var(lv, s.outputs[0], f"{loop.name}/gradient_sync/next_iteration")


def bytes_per_iteration(dtype: dt.DType, shape: sh.Shape) -> int | None:
    """Bytes one pushed value takes, when its static shape is known."""
    n = sh.num_elements(shape)
    if n is None or dtype.is_opaque:
        return None
    return n * dtype.itemsize
