"""The paper's control-flow primitives, for building graphs by hand (``tn.raw.*``).

These create exactly one node each, with no capture and no pivots: what you build is what runs.
A loop needs a cycle, so create its Merge with a pending slot (``BACK_EDGE``) and bind it with
``close_back_edge`` once the NextIteration exists. With no capture, a constant used inside the
frame must be entered too (``is_constant=True``), or validation rejects the graph
([W-Frame-Consistent])::

    e = raw.enter(x, "loop")
    ten = raw.enter(tn.constant(10), "loop", is_constant=True)
    one = raw.enter(tn.constant(1), "loop", is_constant=True)
    m, _ = raw.merge([e, raw.BACK_EDGE])
    p = raw.loop_cond(m < ten)
    f, t = raw.switch(m, p)
    raw.close_back_edge(m, raw.next_iteration(t + one))
    y = raw.exit(f)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from turnout.arguments import checked
from turnout.errors import GraphBuildError
from turnout.graph import BACK_EDGE, Node, Tensor, _PendingBackEdge
from turnout.ops import convert_to_tensor

__all__ = ["BACK_EDGE", "switch", "merge", "enter", "exit", "next_iteration", "loop_cond", "close_back_edge"]


def _create(op: str, inputs: Sequence[Any], attrs: Optional[dict[str, Any]] = None, name: Optional[str] = None) -> Node:
    ins = [t if isinstance(t, _PendingBackEdge) else convert_to_tensor(t) for t in inputs]
    g = next((t.graph for t in ins if isinstance(t, Tensor)), None)
    if g is None:
        raise GraphBuildError(f"{op}: needs at least one tensor input")
    with g._no_capture():
        return g.create_node(op, ins, attrs or {}, name=name)


@checked
def switch(data: Any, pred: Any, name: Optional[str] = None) -> tuple[Tensor, Tensor]:
    """``Switch(data, pred)`` -> ``(output_false, output_true)``; the untaken output is dead."""
    n = _create("Switch", [data, pred], name=name)
    return n.outputs[0], n.outputs[1]


@checked
def merge(inputs: Sequence[Any], name: Optional[str] = None) -> tuple[Tensor, Tensor]:
    """``Merge(inputs)`` -> ``(output, value_index)``: forwards the first live input. Pass
    ``BACK_EDGE`` for a slot to be bound later by ``close_back_edge``."""
    if not inputs:
        raise GraphBuildError("merge: needs at least one input")
    n = _create("Merge", list(inputs), name=name)
    return n.outputs[0], n.outputs[1]


@checked
def enter(data: Any, frame_name: str, is_constant: bool = False, parallel_iterations: int = 10,
          name: Optional[str] = None) -> Tensor:
    """Move ``data`` into child frame ``frame_name`` (iteration 0), or to every iteration if constant."""
    if not isinstance(frame_name, str) or not frame_name:
        raise GraphBuildError("enter: frame_name must be a non-empty string")
    if not isinstance(parallel_iterations, int) or parallel_iterations < 1:
        raise GraphBuildError("enter: parallel_iterations must be a positive int")
    attrs = {"frame_name": frame_name, "is_constant": bool(is_constant), "parallel_iterations": parallel_iterations}
    return _create("Enter", [data], attrs, name=name).outputs[0]


@checked
def exit(data: Any, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """Move ``data`` from its frame to the parent frame."""
    return _create("Exit", [data], name=name).outputs[0]


@checked
def next_iteration(data: Any, name: Optional[str] = None) -> Tensor:
    """Move ``data`` to the next iteration of its frame."""
    return _create("NextIteration", [data], name=name).outputs[0]


@checked
def loop_cond(pred: Any, name: Optional[str] = None) -> Tensor:
    """Mark ``pred`` as a loop's predicate (the pivot)."""
    return _create("LoopCond", [pred], name=name).outputs[0]


@checked
def close_back_edge(merge_output: Tensor | Node, tensor: Tensor, slot: Optional[int] = None) -> None:
    """Bind the pending slot of a Merge (given by its node or an output) to ``tensor``."""
    node = merge_output.node if isinstance(merge_output, Tensor) else merge_output
    node.close_back_edge(tensor, slot)
