"""Where an import rule builds with builders, and how: which TensorFlow v1 loop frame (or cond inside
one) a tensor lies in, whether the rule runs inside a builder's loop or branch (a control flow v2
function body), the scope in which builders (``tn`` ops, ``while_loop``, ``tn.gradients``) create an
imported node's nodes, and the gradient of such a formula with the upstream gradient held constant.

Why a module of its own: the random ops (their draws' ordering across loop iterations) and every rule
whose op holds a loop or differentiates its formula (a candidate sampler, CTC, crops, 3-D
convolutions and pools, non-maximum suppression) ask the same questions of the import graph.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

from turnout import ops
from turnout.errors import UnsupportedError
from turnout.graph import Node, Tensor
from turnout.graphdef.import_context import ImportContext


def loop_enter(t: Tensor) -> Optional[Node]:
    """The Enter into the innermost loop frame ``t`` lies in, or None at the root: walking back from
    it along first inputs (data, else control), the first Enter met with the Exits passed on the way
    matched (a node without inputs, reached first, is in the root frame)."""
    depth, n = 0, t.node
    while True:
        if n.op == "Enter":
            if depth == 0:
                return n
            depth -= 1
        elif n.op == "Exit":
            depth += 1
        up = _upstream(n)
        if up is None:
            return None
        n = up


def in_loop_cond(t: Tensor) -> bool:
    """Whether ``t`` lies in a branch of a cond inside the innermost loop around it: walking back
    along first inputs, a cond's Switch (one whose predicate is not a LoopCond) is met before the
    loop's own Switch or Enter, counting the cond Merges passed on the way."""
    open_conds, n = 0, t.node
    while n.op != "Enter":
        if n.op == "Switch":
            if n.raw_inputs[1].node.op == "LoopCond":  # type: ignore[union-attr]
                return False
            if open_conds == 0:
                return True
            open_conds -= 1
        elif n.op == "Merge" and not n.has_pending_back_edge:
            open_conds += 1
        up = _upstream(n)
        if up is None:
            return False
        n = up
    return False


def _upstream(n: Node) -> Optional[Node]:
    """The node of ``n``'s first input (data, else control; None for a node without inputs): the
    step of the walks above, which follow a value back to the frame it was made in."""
    ins = [x for x in n.raw_inputs if isinstance(x, Tensor)] or [c.outputs[0] for c in n.control_inputs if c.outputs]
    return ins[0].node if ins else None


@contextmanager
def with_builders(ctx: ImportContext, anchors: list[Any]) -> Iterator[None]:
    """Builders (``tn`` ops, ``while_loop``, ``tn.gradients``) creating their nodes in the import graph,
    in the flow context of the node being imported and under its name: how a rule whose op holds a
    loop (a sampler's tries, CTC's forward variables) or differentiates its formula (a gradient op)
    is written. Inside a TensorFlow v1 while loop the builders' frames would not be the GraphDef's:
    refused, naming the op."""
    if not in_builder(ctx) and any(isinstance(t, Tensor) and loop_enter(t) is not None for t in anchors):
        raise UnsupportedError(f"{ctx.where()}: {ctx.node.op} inside a TensorFlow v1 while loop is not built")
    with ctx.graph.as_default(), ctx.graph._in_context(ctx.flow_context), \
            ctx.graph.name_scope(f"{ctx.prefix}{ctx.node.name}"):
        yield


def in_builder(ctx: ImportContext) -> bool:
    """Whether the op is imported inside a builder's loop or branch (a v2 function body)."""
    return ctx.capture and ctx.flow_context is not None


def held_gradient(out: Tensor, upstream: Tensor, x: Tensor) -> Tensor:
    """``d sum(out * upstream) / d x`` with ``upstream`` held constant: what a TensorFlow gradient op
    gives (its value is the product with the upstream gradient, which may itself depend on ``x``, not
    that product's derivative); zeros where nothing of ``out`` depends on ``x``."""
    from turnout.gradients import gradients

    (g,) = gradients(ops.reduce_sum(out * ops.stop_gradient(ops.cast(upstream, out.dtype))), [x])
    return ops.zeros_like(x) if g is None else ops.cast(g, x.dtype)


__all__ = ["held_gradient", "in_builder", "in_loop_cond", "loop_enter", "with_builders"]
