"""What the gradient stacks of each forward loop hold per iteration: the basis for memory swapping.

Every value the backward pass needs from a loop iteration is pushed on a stack (one ``StackNew`` per
forward tensor, in the root frame, its attrs naming the forward tensor and frame). A loop that runs
``N`` iterations therefore keeps ``N x bytes_per_iteration`` alive until the backward loop pops it;
this is what ``swap_memory`` moves to host memory (the paper, Sec. 5.3).

Two reports: ``memory_report(graph)`` is static — what each loop saves per iteration, read from the
graph alone — and ``memory_report(session)`` is what the last run actually held, per loop and per
device, as the session's backend accounted it (``backend.memory_records()``): device and host bytes,
chunks moved to host memory and back, peak device bytes. The first says what a trip count will cost;
the second whether ``swap_memory`` and a device memory cap did what they say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, overload

from turnout import dtypes as dt
from turnout import shapes as sh
from turnout.arguments import checked
from turnout.errors import ArgumentError, NotFoundError
from turnout.gradients.stacks import bytes_per_iteration
from turnout.graph import Graph
from turnout.memory_plan import (
    PLATFORM_NAMES,
    CostModel,
    MemoryPlan,
    backend_platform,
    graph_plan,
    measured_costs,
)


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


def _plan_lines(plan: Optional[MemoryPlan]) -> list[str]:
    """The summary lines of a memory plan: none without a budget (every loop then keeps: nothing to
    say), else a header and the plan's line per loop."""
    if plan is None or not plan.budgeted:
        return []
    return ["memory plan:", *(f"  {line}" for line in plan.lines())]


@dataclass
class MemoryReport:
    """``memory_report(graph)``: per forward loop, what it saves per iteration (``loops``), and how a
    run under the budgets would hold it (``plan``, ``turnout.memory_plan``)."""

    loops: list[LoopMemory]
    plan: Optional[MemoryPlan] = None

    def loop(self, name: str) -> LoopMemory:
        """The entry of the loop whose name or frame name is ``name``."""
        for lp in self.loops:
            if name in (lp.loop_name, lp.frame_name):
                return lp
        raise NotFoundError(f"no gradient stacks for a loop named {name!r}")

    def summary(self) -> str:
        """The loops' stacked tensors, then the plan's line per loop where a budget applies."""
        if not self.loops:
            return "\n".join(["no gradient stacks", *_plan_lines(self.plan)])
        lines = []
        for lp in self.loops:
            total = lp.bytes_per_iteration
            lines.append(f'loop "{lp.loop_name}" (frame {lp.frame_name}, swap_memory={lp.swap_memory}): '
                         f"{len(lp.stacked)} stacked tensors, "
                         f"{'?' if total is None else total} bytes per iteration")
            for s in lp.stacked:
                b = "?" if s.bytes_per_iteration is None else s.bytes_per_iteration
                lines.append(f"  {s.tensor:40s} {s.dtype:9s} {sh.fmt(s.shape):14s} {b} B/iter")
        return "\n".join([*lines, *_plan_lines(self.plan)])

    def __str__(self) -> str:
        return self.summary()


@dataclass(frozen=True)
class LoopDeviceMemory:
    """What one loop's gradient stacks held on one device during the last run.

    ``device_bytes`` / ``host_bytes``: bytes of stack buffers on the device and in host memory when the
    forward loop ended (every value it saves is held then); ``chunks_to_host`` / ``chunks_from_host``:
    full chunks copied to host memory and back; ``chunks_kept_on_device``: full chunks that stayed on
    the device (``swap_memory=False``); ``peak_device_bytes``: the most the stacks held on the device
    at once during the run.
    """

    loop: str
    device: str
    device_bytes: int
    host_bytes: int
    chunks_to_host: int
    chunks_from_host: int
    peak_device_bytes: int
    swap_memory: Optional[bool] = None
    chunks_kept_on_device: int = 0


@dataclass
class RunMemoryReport:
    """``memory_report(session)``: per loop and device, the last run's stack memory (``records``),
    next to the static per-iteration report of the session's graph (``static``), and the gradients
    the last run took rebuilt to recompute under its budget (``rebuilt``, ``turnout.rebuild``)."""

    records: list[LoopDeviceMemory]
    static: MemoryReport
    rebuilt: list[str] = field(default_factory=list)

    @property
    def plan(self) -> Optional[MemoryPlan]:
        """The memory plan of the session's graph (``MemoryReport.plan``)."""
        return self.static.plan

    def loop(self, name: str) -> list[LoopDeviceMemory]:
        """The records of the loop named ``name`` (one per device its stacks lived on)."""
        got = [r for r in self.records if r.loop == name]
        if not got:
            raise NotFoundError(f"the last run held no gradient stacks of a loop named {name!r}")
        return got

    def summary(self) -> str:
        """Per loop and device, what the last run held; then the memory plan where a budget applies."""
        plan = _plan_lines(self.plan) + [f"the last run took {line}" for line in self.rebuilt]
        if not self.records:
            return "\n".join(["the last run held no gradient stacks on a device", *plan])
        lines = []
        for r in self.records:
            lines.append(f'loop "{r.loop}" on {r.device} (swap_memory={r.swap_memory}): device {r.device_bytes} B '
                         f"(peak {r.peak_device_bytes} B), host {r.host_bytes} B, chunks to host {r.chunks_to_host}, "
                         f"back {r.chunks_from_host}, kept on device {r.chunks_kept_on_device}")
        return "\n".join([*lines, *plan])

    def __str__(self) -> str:
        return self.summary()


_RECORD_KEYS = ("loop", "device", "device_bytes", "host_bytes", "chunks_to_host", "chunks_from_host",
                "peak_device_bytes")


@overload
def memory_report(target: Graph, fetches: Any = None, memory_budget: Optional[int] = None,
                  platform: Optional[str] = None) -> MemoryReport: ...


@overload
def memory_report(target: Any, fetches: Any = None, memory_budget: Optional[int] = None,
                  platform: Optional[str] = None) -> RunMemoryReport: ...


@checked
def memory_report(target: Any, fetches: Any = None, memory_budget: Optional[int] = None,
                  platform: Optional[str] = None) -> MemoryReport | RunMemoryReport:
    """``memory_report(graph)``: for each forward loop that has gradient stacks, the tensors stacked per
    iteration and their size. ``memory_report(session)``: what the session's last run held, per loop and
    device (``RunMemoryReport``), from ``session.backend.memory_records()``; a backend without device
    stacks (the reference interpreter keeps its stacks in Python objects) reports no records.

    Both carry ``plan``: per loop, whether a run keeps, swaps or would recompute its saved values and
    why (``turnout.memory_plan``), for the loops ``fetches`` need (a tensor or a list of them; None:
    every loop), under the run budget ``memory_budget`` and each loop's own, on ``platform`` (JAX's
    platform name; default: the session backend's, or ``"cpu"`` for a graph)."""
    from turnout.session import RunOptions

    RunOptions(memory_budget=memory_budget)  # checked as a run checks it
    if platform is not None and not isinstance(platform, str):
        raise ArgumentError(f"memory_report: platform must be a platform name such as 'cpu' or 'gpu', got {platform!r}")
    if platform is not None and platform not in PLATFORM_NAMES:
        raise ArgumentError(f"memory_report: platform {platform!r} is none of {list(PLATFORM_NAMES)} (JAX's platform "
                            "names, lower case)")
    if isinstance(target, Graph):
        return _static_report(target, _plan(target, fetches, platform or "cpu", memory_budget))
    backend = getattr(target, "backend", None)
    graph = getattr(target, "graph", None)
    if backend is None or not isinstance(graph, Graph):
        raise ArgumentError(f"memory_report takes a Graph or a Session, got {type(target).__name__}")
    get = getattr(backend, "memory_records", None)
    rows = get() if get is not None else []
    records = []
    for r in rows:
        missing = [k for k in _RECORD_KEYS if k not in r]
        if missing:
            raise ArgumentError(f"{type(backend).__name__}.memory_records() gave a record without {missing}")
        records.append(LoopDeviceMemory(
            loop=str(r["loop"]), device=str(r["device"]), device_bytes=int(r["device_bytes"]),
            host_bytes=int(r["host_bytes"]), chunks_to_host=int(r["chunks_to_host"]),
            chunks_from_host=int(r["chunks_from_host"]), peak_device_bytes=int(r["peak_device_bytes"]),
            swap_memory=r.get("swap_memory"), chunks_kept_on_device=int(r.get("chunks_kept_on_device", 0))))
    where = platform or backend_platform(backend)
    last = getattr(target, "last_result", None)
    rebuilt = [str(x) for x in (last.stats.get("rebuilt_gradients") or [])] if last is not None else []
    costs = measured_costs(last.stats) if last is not None else CostModel()
    return RunMemoryReport(records, _static_report(graph, _plan(graph, fetches, where, memory_budget, costs)), rebuilt)


def _plan(graph: Graph, fetches: Any, where: str, budget: Optional[int], costs: CostModel = CostModel()
          ) -> MemoryPlan:
    """``graph_plan`` of the tensors in ``fetches`` (a tensor or a structure of them; None: all loops),
    knowing ``costs`` (a session's measured cost per iteration, ``memory_plan.measured_costs``)."""
    if fetches is None:
        return graph_plan(graph, None, where, budget, costs)
    from turnout import nest
    from turnout.graph import Tensor, fetched_tensor

    tensors = [fetched_tensor(f) if hasattr(f, "_as_tensor") else f for f in nest.flatten(fetches)]
    if not all(isinstance(t, Tensor) and t.graph is graph for t in tensors):
        raise ArgumentError("memory_report: fetches must be tensors of the graph (or a structure of them)")
    return graph_plan(graph, tensors, where, budget, costs)


def _static_report(graph: Graph, plan: Optional[MemoryPlan] = None) -> MemoryReport:
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
    return MemoryReport(list(loops.values()), plan)
