"""What one ``gradients`` call passes between its rules: gradient contributions (``Grads``, with the
symbolic slot gradients of TensorArray reads, ``SlotGrad``) and the forward region being
differentiated (``Frame``).

Why a module of its own: the reverse-mode walk (``core``), the rules of ordinary ops (``rules``) and
those of whole conds and loops (``control_flow``) all make and read these values, and the walk calls
the rules; kept here, the values import none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional, Union

from turnout import dtypes as dt
from turnout import ops
from turnout.control_flow.contexts import CondInfo, ControlFlowContext
from turnout.graph import Tensor

Key = tuple[int, int]


def key(t: Tensor) -> Key:
    """The (node id, output index) a gradient is kept under."""
    return (t.node.id, t.index)


@dataclass
class SlotGrad:
    """The gradient of a TensorArray that is zero except at slot ``index`` (the gradient of one
    TensorArrayRead), kept symbolic until it is summed.

    Why: materialized, it is a full-size TensorArray of zeros with one slot written, and adding it to
    an accumulator costs O(size): in a backward loop over n iterations that is O(n^2). Kept symbolic,
    it is added into the accumulator by ``TensorArrayAccumulate`` at O(1) TensorArray work.
    """

    zeros: Callable[[], Tensor]  # a zero TensorArray of the right size and type, built where called
    index: Tensor
    value: Tensor


Part = Union[Tensor, SlotGrad]


def accumulate(acc: Tensor, p: Part) -> Tensor:
    """``acc + p``: slotwise for a SlotGrad (in place of one slot), else ``add_grads``."""
    if isinstance(p, SlotGrad):
        return acc.graph.create_node("TensorArrayAccumulate", [acc, p.index, p.value],
                                     name="gradients/ta_accumulate").outputs[0]
    return add_grads(acc, p)


class Grads:
    """Gradient contributions per forward tensor; summed once, when first read."""

    def __init__(self) -> None:
        self._parts: dict[Key, list[Part]] = {}

    def add(self, t: Tensor, g: Part) -> None:
        """Add the contribution ``g`` to the gradient of ``t``; it is summed with the others when first read."""
        self._parts.setdefault(key(t), []).append(g)

    def total(self, t: Tensor) -> Optional[Tensor]:
        """The gradient of ``t``: its contributions summed (SlotGrads added into a dense one slotwise) and kept as
        one, or None when nothing reaches ``t``."""
        parts = self._parts.get(key(t))
        if not parts:
            return None
        if len(parts) > 1 or isinstance(parts[0], SlotGrad):
            dense: list[Part] = [p for p in parts if not isinstance(p, SlotGrad)]
            slots: list[SlotGrad] = [p for p in parts if isinstance(p, SlotGrad)]
            s = dense[0] if dense else slots[0].zeros()
            rest: list[Part] = [*dense[1:], *slots]
            for p in rest:
                s = accumulate(s, p)  # type: ignore[arg-type]
            self._parts[key(t)] = [s]
        return self._parts[key(t)][0]  # type: ignore[return-value]

    def accumulate_into(self, t: Tensor, acc: Tensor) -> Tensor:
        """``acc`` plus the gradient of ``t``, each slot gradient added in place (loop invariants)."""
        for p in self._parts.get(key(t), []):
            acc = accumulate(acc, p)
        return acc


def add_grads(a: Tensor, b: Tensor) -> Tensor:
    """Sum two gradient contributions (slotwise for TensorArray gradients)."""
    if a.dtype == dt.tensor_array:
        return a.graph.create_node("TensorArrayAdd", [a, b], name="gradients/ta_add").outputs[0]
    return ops.add(a, b)


@dataclass
class Frame:
    """One forward region being differentiated, and the backward context its gradient is built in."""

    kind: str  # "loop" or "cond"
    fwd: ControlFlowContext
    bwd: ControlFlowContext
    info: Optional[CondInfo] = None
    branch: int = 0
    k: Optional[Tensor] = None  # loops: the forward iteration this backward iteration undoes
    index: Optional[Tensor] = None  # loops: the stack index in the backward body


__all__ = ["Frame", "Grads", "Key", "Part", "SlotGrad", "accumulate", "add_grads", "key"]
