"""What the gradient stacks of each forward loop hold per iteration: the basis for memory swapping.

Every value the backward pass needs from a loop iteration is pushed on a stack (one ``StackNew`` per
forward tensor, in the root frame, its attrs naming the forward tensor and frame). A loop that runs
``N`` iterations therefore keeps ``N x bytes_per_iteration`` alive until the backward loop pops it;
this is what ``swap_memory`` moves to host memory (the paper, Sec. 5.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from turnout import dtypes as dt
from turnout import shapes as sh
from turnout.gradients.stacks import bytes_per_iteration
from turnout.graph import Graph


@dataclass(frozen=True)
class StackedTensor:
    """One forward tensor saved per iteration."""

    tensor: str
    dtype: str
    shape: sh.Shape
    bytes_per_iteration: Optional[int]
    stack: str


@dataclass
class LoopMemory:
    """The stacks of one forward loop (frame)."""

    frame_name: str
    loop_name: str
    swap_memory: bool
    stacked: list[StackedTensor] = field(default_factory=list)

    @property
    def bytes_per_iteration(self) -> Optional[int]:
        """Total bytes pushed per iteration; None when some stacked shape is not known statically."""
        sizes = [s.bytes_per_iteration for s in self.stacked]
        return None if any(b is None for b in sizes) else sum(sizes)  # type: ignore[arg-type]


@dataclass
class MemoryReport:
    loops: list[LoopMemory]

    def loop(self, name: str) -> LoopMemory:
        """The entry of the loop whose name or frame name is ``name``."""
        for lp in self.loops:
            if name in (lp.loop_name, lp.frame_name):
                return lp
        raise KeyError(f"no gradient stacks for a loop named {name!r}")

    def summary(self) -> str:
        if not self.loops:
            return "no gradient stacks"
        lines = []
        for lp in self.loops:
            total = lp.bytes_per_iteration
            lines.append(f'loop "{lp.loop_name}" (frame {lp.frame_name}, swap_memory={lp.swap_memory}): '
                         f"{len(lp.stacked)} stacked tensors, "
                         f"{'?' if total is None else total} bytes per iteration")
            for s in lp.stacked:
                b = "?" if s.bytes_per_iteration is None else s.bytes_per_iteration
                lines.append(f"  {s.tensor:40s} {s.dtype:9s} {sh.fmt(s.shape):14s} {b} B/iter")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def memory_report(graph: Graph) -> MemoryReport:
    """For each forward loop that has gradient stacks: the tensors stacked per iteration and their size."""
    loops: dict[str, LoopMemory] = {}
    for n in graph.nodes:
        if n.op != "StackNew":
            continue
        a = n.attrs
        lp = loops.setdefault(a["frame_name"], LoopMemory(a["frame_name"], a.get("loop_name", "?"),
                                                          bool(a.get("swap_memory", False))))
        d = dt.as_dtype(a["elem_dtype"])
        shape = sh.as_shape(a.get("elem_shape"))
        lp.stacked.append(StackedTensor(a["forward_tensor"], d.name, shape, bytes_per_iteration(d, shape), n.name))
    return MemoryReport(list(loops.values()))
