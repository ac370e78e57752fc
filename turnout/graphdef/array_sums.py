"""Which TensorArrays a GraphDef export writes as TensorFlow gradient arrays, whose writes add up.

Why: a gradient sums TensorArray gradients, and Turnout writes the sums as values — ``TensorArrayAdd``
(two arrays, slotwise) and ``TensorArrayAccumulate`` (one slot of an accumulator, ``acc[i] += v``).
TensorFlow v1 has neither op. Its own form of such a sum is one *gradient array*
(``TensorArrayGradV3``), whose writes to a slot already written add to it, and whose flows are summed
by ``AddV2`` only to order the writes. That form is exact where nothing reads an array between
its sums: every version of the accumulator is consumed by the next sum alone (or leaves its loop), so
the one mutable TensorFlow array holds, whenever it is read, the value Turnout's last sum made.

This module finds the sums that have that form (``array_sums``, a pure analysis of the graph and its
frames) and says how each array is written (``ArraySums``); the export rules of
``graphdef.export_tensor_arrays`` follow it. Two shapes qualify:

- ``TensorArrayAccumulate(acc, i, v)``: a write of ``v`` to slot ``i`` of the accumulator's array, the
  array a gradient array;
- a loop-carried ``TensorArrayAdd(acc, fresh)`` (TensorFlow's own gradients, imported: the sum of a
  gradient array made in each iteration into one carried from outside the loop): the fresh array's
  writes go to the accumulator's array, and the sum is ``AddV2`` of the two flows.

A sum of another shape is left to the rules, which refuse it by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from turnout.frames import FrameAnalysis
from turnout.graph import Graph, Node, Tensor

#: ops a TensorArray value passes through keeping its array: the export traces a value to the node
#: that made its array through them (a write or an accumulation changes slots, not the array)
PASS = frozenset({"Enter", "Exit", "Merge", "Switch", "NextIteration", "Identity", "TensorArrayWrite",
                  "TensorArrayAccumulate"})


@dataclass(frozen=True)
class ArraySums:
    """How the export writes the arrays of gradient sums (node ids of the graph).

    ``aggregate``: the ``TensorArrayNew`` nodes written as TensorFlow gradient arrays (made by
    ``TensorArrayGradV3``: writes to a written slot add to it). ``merged``: a fresh array made inside
    a loop -> the accumulator array whose handle it writes to instead of an array of its own.
    ``carried``: a loop-carried ``TensorArrayAdd`` -> the index of its input that is the accumulator."""

    aggregate: frozenset[int] = frozenset()
    merged: dict[int, int] = field(default_factory=dict)
    carried: dict[int, int] = field(default_factory=dict)


def source(t: Tensor) -> tuple[Node, list[Tensor]]:
    """The node that made the array of TensorArray value ``t`` (through ``PASS``), and the values on the
    way, ``t`` first."""
    seen: set[int] = set()
    chain = [t]
    node = t.node
    while node.op in PASS and node.id not in seen:
        seen.add(node.id)
        chain.append(node.inputs[0])
        node = node.inputs[0].node
    return node, chain


def array_sums(graph: Graph, fa: FrameAnalysis) -> ArraySums:
    """The sums of ``graph`` that the export writes in TensorFlow's gradient-array form (module
    docstring)."""
    users = graph.consumers()
    fits: dict[int, bool] = {}  # an accumulator's array -> every sum into it has the form
    sums: dict[int, tuple[int, int, int]] = {}  # a carried TensorArrayAdd -> (input index, accumulator, fresh)
    for n in graph.nodes:
        if n.op == "TensorArrayAccumulate":
            src, chain = source(n.inputs[0])
            fits[src.id] = fits.get(src.id, True) and _fixed_new(src) and _only_summed(chain, users)
        elif n.op == "TensorArrayAdd":
            found = _carried_sum(n, fa, users)
            if found is not None:
                c, acc, fresh = found
                fits.setdefault(acc.id, True)
                sums[n.id] = (c, acc.id, fresh.id)
            else:  # an array summed into across iterations in another form: none of its sums exports so
                for t in n.inputs:
                    src = source(t)[0]
                    if len(fa.node_frame[src.id]) < len(fa.node_frame[n.id]):
                        fits[src.id] = False
    aggregate = frozenset(k for k, ok in fits.items() if ok)
    kept = {k: v for k, v in sums.items() if v[1] in aggregate}
    return ArraySums(aggregate, {fresh: acc for _, acc, fresh in kept.values()}, {k: v[0] for k, v in kept.items()})


def _carried_sum(n: Node, fa: FrameAnalysis, users: dict[int, list[tuple[Node, int]]]
                 ) -> Optional[tuple[int, Node, Node]]:
    """For ``TensorArrayAdd`` ``n`` carried by its loop: (the accumulator input's index, the
    accumulator's ``TensorArrayNew``, the fresh one's); None for a sum of another shape."""
    frame = fa.node_frame[n.id]
    found = [source(t) for t in n.inputs]
    outer = [k for k, (src, _) in enumerate(found) if len(fa.node_frame[src.id]) < len(frame)]
    if len(outer) != 1:
        return None
    c = outer[0]
    (acc, acc_chain), (fresh, fresh_chain) = found[c], found[1 - c]
    if not (_fixed_new(acc) and _fixed_new(fresh) and fa.node_frame[fresh.id] == frame):
        return None
    if not (_only_summed(acc_chain, users) and _only_summed(fresh_chain, users)):
        return None
    return c, acc, fresh


def _only_summed(chain: list[Tensor], users: dict[int, list[tuple[Node, int]]]) -> bool:
    """Whether every version of the array on ``chain`` (from the sum's input back to the array's
    making) has one reader, the next step of the chain (the sum, for the first): no read that
    TensorFlow's one mutable array could answer with a later sum's slots, and no second loop or
    branch summing into the same array."""
    return all(_uses(users, t) == 1 for t in chain)


def _uses(users: dict[int, list[tuple[Node, int]]], t: Tensor) -> int:
    """How many data inputs read ``t``."""
    return sum(1 for user, slot in users[t.node.id] if user.raw_inputs[slot] is t)


def _fixed_new(n: Node) -> bool:
    """Whether ``n`` makes a TensorArray of fixed size (a growing one's missing slots read as zeros
    in Turnout, which a TensorFlow gather does not give)."""
    return n.op == "TensorArrayNew" and not n.attrs.get("dynamic_size", False)


__all__ = ["PASS", "ArraySums", "array_sums", "source"]
