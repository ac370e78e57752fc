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

import contextlib
from collections.abc import Iterator
from typing import Any

from turnout import dtypes as dt
from turnout import shapes as sh
from turnout.control_flow.contexts import LoopVar, WhileContext
from turnout.graph import BACK_EDGE, Graph, Node, Tensor, TensorSpec


@contextlib.contextmanager
def no_scope(g: Graph) -> Iterator[None]:
    """Name gradient plumbing from the root, not from whatever name scope is open while it is built."""
    saved = g._scope
    g._scope = []
    try:
        yield
    finally:
        g._scope = saved


def new_stack(g: Graph, t: Tensor, loop: WhileContext) -> Node:
    """A StackNew in the root frame for forward tensor ``t`` of ``loop``. Its attrs tell the fast
    backend and ``memory_report`` what is stacked, for which frame, and whether to swap it out."""
    attrs: dict[str, Any] = {
        "elem_dtype": t.dtype.name,
        "elem_shape": None if t.shape is None else list(t.shape),
        "forward_tensor": t.name,
        "frame_name": loop.frame_name,
        "loop_name": loop.name,
        "swap_memory": loop.swap_memory,
        "parallel_iterations": loop.parallel_iterations,
    }
    if getattr(loop, "memory_budget", None) is not None:  # recorded only when set: older graphs read the same
        attrs["memory_budget"] = loop.memory_budget
    if t.dtype == dt.tensor_array:
        attrs["ta_elem_dtype"] = t.spec.elem_dtype.name if t.spec.elem_dtype else None
        attrs["ta_elem_shape"] = None if t.spec.elem_shape is None else list(t.spec.elem_shape)
    with g._in_context(None), g.control_dependencies(None), g._no_capture(), no_scope(g):
        return g.create_node("StackNew", (), attrs, name=f"gradients/stack/{t.node.name}")


def push(g: Graph, handle: Tensor, index: Tensor, t: Tensor, loop: WhileContext) -> Node:
    """StackPush inside the forward loop body (the handle is captured into the frame)."""
    with g._in_context(loop), g.control_dependencies(None), no_scope(g):
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
    """A new int32 loop variable of ``loop`` whose back edge stays open until ``close_sync_var``.

    Enter -> Merge(enter, <back edge>) -> Switch(merge, pivot) -> (Identity, Exit): the lowering of
    one more loop variable (the paper, Sec. 4.2), registered in ``loop.loop_vars`` so structured
    passes see an ordinary loop variable.
    """
    assert loop.pivot is not None
    init = loop.counter.enter.inputs[0]
    # control_dependencies(None): the forward loop's own dependencies are ``outer_deps`` (on its Enter);
    # a tn.control_dependencies open around tn.gradients must not reach into the forward frame.
    with g._in_context(loop), g._no_capture(), g.control_dependencies(None), no_scope(g):
        e = g.create_node("Enter", [init], {"frame_name": loop.frame_name, "is_constant": False,
                                            "parallel_iterations": loop.parallel_iterations,
                                            "gradient_sync": True},
                          name=f"{loop.name}/gradient_sync/enter", control_inputs=loop.outer_deps)
        m = g.create_node("Merge", [e.outputs[0], BACK_EDGE], name=f"{loop.name}/gradient_sync/merge",
                          specs=[TensorSpec(dt.int32, ()), TensorSpec(dt.int32, ())])
        sw = g.create_node("Switch", [m.outputs[0], loop.pivot.outputs[0]], name=f"{loop.name}/gradient_sync/switch")
        bi = g.create_node("Identity", [sw.outputs[1]], name=f"{loop.name}/gradient_sync/body_in")
    with g._in_context(loop.outer), g._no_capture(), g.control_dependencies(None), no_scope(g):
        ex = g.create_node("Exit", [sw.outputs[0]], name=f"{loop.name}/gradient_sync/exit")
    lv = LoopVar(enter=e, merge=m, switch=sw, body_input=bi, exit=ex)
    loop.loop_vars.append(lv)
    loop.pred_nodes.extend([e, m, sw, bi])  # as the builder records them: created before the body
    return lv


def close_sync_var(g: Graph, loop: WhileContext, lv: LoopVar, pushes: list[Node]) -> None:
    """Close the sync variable: its next value waits (control edges) for every push of the iteration."""
    assert lv.body_input is not None
    with g._in_context(loop), g._no_capture(), g.control_dependencies(None), no_scope(g):
        s = g.create_node("Identity", [lv.body_input.outputs[0]], control_inputs=pushes,
                          name=f"{loop.name}/gradient_sync/after_pushes")
        lv.next_iteration = g.create_node("NextIteration", [s.outputs[0]],
                                          name=f"{loop.name}/gradient_sync/next_iteration")
    lv.merge.close_back_edge(lv.next_iteration.outputs[0])


def bytes_per_iteration(dtype: dt.DType, shape: sh.Shape) -> int | None:
    """Bytes one pushed value takes, when its static shape is known."""
    n = sh.num_elements(shape)
    if n is None or dtype.is_opaque:
        return None
    return n * dtype.itemsize
