"""The keys of the run-time state a trace threads (``var:NAME``, ``stack:ID``), and how a stack op's
handle is followed back to the ``StackNew`` that made it.

Why a module of its own: the emitter, the plan, the held and swapped stacks and the SPMD tier all name
state by these keys; kept apart from the emitter, none of them need import it for a key.
"""

from __future__ import annotations

import weakref
from typing import Optional

from turnout.fast import stacks as stk
from turnout.fast.values import Handle
from turnout.graph import Graph, Node, Tensor

#: graph -> (its version, the StackNew ids that exactly one StackPush of the graph pushes)
_ONE_PUSH: weakref.WeakKeyDictionary[Graph, tuple[int, frozenset[int]]] = weakref.WeakKeyDictionary()


def stack_key(h: Handle) -> str:
    """The state key of the stack ``h`` names."""
    return stk.state_key(h.name)


def var_key(name: str) -> str:
    """The state key of Variable ``name``."""
    return f"var:{name}"


def stack_source(t: Tensor) -> Optional[Node]:
    """The StackNew a handle tensor comes from (through Enter / Switch / Identity / Merge)."""
    seen = 0
    n = t.node
    while n.op != "StackNew" and seen < 10_000:
        if n.op in ("Enter", "Switch", "Identity", "Merge", "Exit", "NextIteration") and n.raw_inputs:
            n = n.inputs[0].node
            seen += 1
        else:
            return None
    return n if n.op == "StackNew" else None


def stack_key_of(n: Node) -> Optional[str]:
    """The run-state key of the stack that StackPush or StackPop ``n`` uses, ``None`` where its
    handle cannot be followed to its StackNew."""
    src = stack_source(n.inputs[0])
    return None if src is None else stk.state_key(src.id)



def pushed_once(graph: Graph) -> frozenset[int]:
    """The stacks of ``graph`` that one StackPush node pushes (a gradient's stacks), counted over the
    whole graph, not one program or partition of it, and once per graph version."""
    got = _ONE_PUSH.get(graph)
    if got is None or got[0] != graph.version:
        counts: dict[int, int] = {}
        for n in graph.nodes:
            src = stack_source(n.inputs[0]) if n.op == "StackPush" else None
            if src is not None:
                counts[src.id] = counts.get(src.id, 0) + 1
        got = _ONE_PUSH[graph] = (graph.version, frozenset(i for i, c in counts.items() if c == 1))
    return got[1]



__all__ = ["pushed_once", "stack_key", "stack_key_of", "stack_source", "var_key"]
