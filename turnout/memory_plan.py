"""How a run keeps the values its loops save for their gradients within a memory budget: a plan, as a value.

Every value a loop's gradient needs is pushed on a gradient stack, one entry per iteration, and held
until the backward loop pops it (``turnout.gradients.stacks``). A loop of ``n`` iterations that saves
``e`` bytes per iteration holds ``n * e`` bytes on the device, and ``n`` is known only when it stops.
A *memory budget* bounds those bytes: per loop (``tn.while_loop(..., memory_budget=B)``, recorded on
each of its ``StackNew`` nodes) and per run (``Session.run(..., memory_budget=B)``, all loops together).

Three ways honour a budget at any trip count, and this module chooses one per loop:

- **keep** the values on the device (the fastest; fits only ``budget // e`` iterations);
- **swap** full chunks of them to host memory while the forward loop runs, and bring them back ahead
  of the backward loop (the paper's ``swap_memory``): the device holds two chunks per stack, so a
  chunk of ``budget // (2 e)`` entries fits any trip count; it costs ``e`` bytes of transfer each way
  per iteration, and frees device memory only where the host has a memory of its own (GPU, TPU);
- **recompute** the values from checkpoints of the loop state (``turnout.checkpoint_schedule``): fits
  any budget that holds one state, for about one extra forward pass with ``sqrt(2n)`` checkpoints.

What runs today (``docs/memory_budgets.rst``): keep and swap on the graph backends, and recomputation
where the gradient graph is built, for a loop with a budget of its own or a share of its gradient's
(``tn.gradients(..., memory_budget=)``, ``shares``; ``checkpointing`` decides, and
``turnout.control_flow.checkpoints`` keeps checkpoints in the forward loop and
``turnout.gradients.recompute`` builds a backward loop from them, with no stacks at all); and
``turnout.jax.while_loop``. A run's budget comes after the graph is built, so where it calls for
recomputation of a loop that keeps stacks, its plan says so (``built=False``), the run keeps the
values while they fit (``max_iterations``), and a run that goes further stops with
``ResourceExhaustedError`` (``check``), never over the budget in silence; the session then repeats
it on the ``tn.gradients`` call rebuilt to recompute (``turnout.rebuild``), where it can.

Why a pure function over small records: the planner's rules are the design, so they are written once
(``plan_memory``), tested without running anything, printed by ``tn.memory_report`` and
``Session.explain``, and read by the backends that honour the plan (the fast backend sizes its stack
chunks from it and swaps what it says; both it and the reference interpreter ``check`` their own
accounting against it while the run goes).
"""

from __future__ import annotations

import dataclasses
import functools
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from turnout import checkpoint_schedule as schedule
from turnout import dtypes as dt
from turnout import shapes as sh
from turnout.errors import ResourceExhaustedError

KEEP, SWAP, RECOMPUTE = "keep", "swap", "recompute"

#: device <-> host bandwidth in bytes per second, per platform (``jax.default_backend()``), used to
#: estimate what swapping costs. GPU: PCIe 4.0 x16 carries 32 GB/s per direction in theory and about
#: 25 GB/s from pinned host memory in practice (NVIDIA's bandwidthTest figures); a TPU host link is of
#: the same order. The CPU has no memory apart from the device's: nothing to move to.
HOST_BANDWIDTH: Mapping[str, float] = {"gpu": 25e9, "cuda": 25e9, "rocm": 25e9, "tpu": 25e9}

#: the platform names a user may plan for (``tn.memory_report(..., platform=)``): the CPU and those of
#: ``HOST_BANDWIDTH``. Why a list: any other name plans as a platform without host memory, so a
#: misspelt ``"gpus"`` would report what the CPU does, silently.
PLATFORM_NAMES: tuple[str, ...] = ("cpu", *HOST_BANDWIDTH)


@dataclass(frozen=True)
class Platform:
    """Where a run's stacks live. ``host_memory``: a memory space apart from the device's exists, so
    swapping frees device memory; ``bandwidth``: bytes per second between them (None: no such memory)."""

    name: str
    host_memory: bool
    bandwidth: Optional[float] = None


def platform(name: str) -> Platform:
    """The ``Platform`` named by JAX's platform name (``"cpu"``, ``"gpu"``, ``"cuda"``, ``"tpu"``); the
    reference interpreter runs on ``"cpu"``."""
    bw = HOST_BANDWIDTH.get(name)
    return Platform(name, bw is not None, bw)


@dataclass(frozen=True)
class CostModel:
    """What the planner may know of a loop's cost: ``iteration_seconds``, the time of one iteration,
    forward or backward (None: not known). With it, a plan says whether a swap's transfers hide behind
    the compute (each iteration's bytes move while the next iteration runs). ``measured_over``: the
    iterations of a run it was measured over (``measured_costs``); 0 where it was given."""

    iteration_seconds: Optional[float] = None
    measured_over: int = 0

    def words(self) -> str:
        """How a plan line names the compute: its time per iteration, and where it comes from."""
        assert self.iteration_seconds is not None
        src = (f" (measured: the session's last run, {self.measured_over} iterations each way)"
               if self.measured_over else "")
        return f"{self.iteration_seconds * 1e6:.1f} us of compute{src}"


#: the routes of the fast backend whose runs compile nothing (a repeated run's lane), so that their
#: time is the program's alone
_UNCOMPILED_ROUTES = frozenset({"lane", "hot"})


def measured_costs(stats: Mapping[str, Any]) -> CostModel:
    """The cost per iteration a run's stats measure (``Session.last_result.stats``): the seconds of
    its compiled call (``stage_seconds``) over twice the most entries a gradient stack held
    (``stack_mark``, the forward loop's iterations, each reversed once). Only a repeated run of the
    fast backend's one compiled call is read (its lane: ``route`` ``"lane"`` or ``"hot"``), which
    compiles nothing, so that its time is the program's. Where a run reverses several loops, it is the
    whole run's time over the longest loop's iterations, which bounds each loop's from above. Nothing
    (``CostModel()``) where the stats measure none of that."""
    seconds, mark = stats.get("stage_seconds"), stats.get("stack_mark")
    if stats.get("route") not in _UNCOMPILED_ROUTES or not seconds or not isinstance(mark, int) or mark < 1:
        return CostModel()
    return CostModel(float(sum(seconds)) / (2 * mark), mark)


@dataclass(frozen=True)
class StackSize:
    """One gradient stack as the planner sees it: its ``StackNew`` node's name, its forward loop, the
    bytes one entry takes (the value and its iteration index; None: a shape known only at run time),
    and what its loop asked for."""

    stack: str
    loop: str
    entry_bytes: Optional[int]
    swap_memory: bool = False
    memory_budget: Optional[int] = None
    frame: str = ""
    #: whose ``memory_budget`` is: the loop's own (``"loop"``) or its share of a gradient's (``"gradient"``)
    budget_from: str = "loop"


#: the budgets a loop's own saved values must fit (``LoopPlan.budget_from``): also the values of the
#: ``budget_from`` attr a node may record, which loading checks against this set (``turnout.serialize``;
#: the checkpoint nodes' shape rule spells them out, since ``turnout.graph``, which this module reads,
#: imports the shape rules)
PER_LOOP = frozenset({"loop", "gradient"})
#: how a plan line says whose a budget is
WHOSE = {"loop": "loop", "gradient": "its share of the gradient's", "run": "run", "none": "none"}


@dataclass(frozen=True)
class LoopPlan:
    """The plan of one loop's saved values.

    ``action``: ``"keep"``, ``"swap"`` or ``"recompute"`` — what meets the budget; ``built``: whether
    the graph backends do it for these stacks (see the module docstring); ``entry_bytes``:
    bytes saved per iteration, all its stacks together (None: unknown until run time); ``budget``:
    the bytes its saved values may hold on the device (None: no budget) and ``budget_from`` whose it
    is (``"loop"``: its own; ``"gradient"``: its share of a gradient's, which binds it as its own
    would; ``"run"``; or ``"none"``); ``chunk``: a swapped loop's entries per device chunk;
    ``max_iterations``: the most iterations the run can save within the budget (None: any);
    ``transfer_seconds``: a swapped loop's estimated transfer time per iteration, each way; ``frame``:
    the loop's frame name; ``slots``: the checkpoints of a loop whose gradient was built to recompute
    (``recomputed``; its ``entry_bytes`` are then the bytes of one checkpoint, not of an iteration)."""

    loop: str
    stacks: int
    entry_bytes: Optional[int]
    budget: Optional[int]
    budget_from: str
    action: str
    built: bool
    reason: str
    chunk: Optional[int] = None
    max_iterations: Optional[int] = None
    transfer_seconds: Optional[float] = None
    frame: str = ""
    slots: Optional[int] = None

    def peak_bytes(self, n: int) -> Optional[int]:
        """The bound this plan gives on the device bytes of the loop's saved values after ``n``
        iterations: ``n * e`` kept, two chunks at most swapped, the slots of a recomputed loop. None:
        unknown (no static entry size), or past ``max_iterations``, where the run stops with
        ``ResourceExhaustedError`` instead."""
        e = self.entry_bytes
        if e is None or (self.max_iterations is not None and n > self.max_iterations):
            return None
        if self.slots is not None:
            return self.slots * e  # the backward loop's slots, whatever n
        if self.action == SWAP and self.chunk is not None:
            return min(n, 2 * self.chunk) * e
        return n * e

    @property
    def per_loop(self) -> bool:
        """Whether the budget is the loop's alone (its own, or its share of a gradient's), which its
        own saved values must fit, not only the run's together."""
        return self.budget is not None and self.budget_from in PER_LOOP

    def line(self) -> str:
        """One line: the loop, its action and why."""
        e = "?" if self.entry_bytes is None else self.entry_bytes
        whose = WHOSE[self.budget_from]
        if self.slots is not None:
            return f'loop "{self.loop}": {self.action}; budget {self.budget} B ({whose}): {self.reason}'
        budget = "no budget" if self.budget is None else f"budget {self.budget} B ({whose})"
        act = self.action if self.built else f"{self.action} (after the stacks, by a rebuilt gradient)"
        return f'loop "{self.loop}": {act}; {e} B per iteration, {budget}: {self.reason}'


@dataclass(frozen=True)
class MemoryPlan:
    """Per loop, how its saved values are held (``loops``), for a run budget and a platform."""

    loops: tuple[LoopPlan, ...]
    run_budget: Optional[int]
    platform: Platform

    def loop(self, name: str) -> LoopPlan:
        """The plan of the loop named ``name``."""
        for lp in self.loops:
            if lp.loop == name:
                return lp
        from turnout.errors import NotFoundError

        raise NotFoundError(f"the memory plan has no loop named {name!r}; it has {[lp.loop for lp in self.loops]}")

    @property
    def budgeted(self) -> bool:
        """Whether any budget applies (the run's or a loop's)."""
        return self.run_budget is not None or any(lp.budget is not None for lp in self.loops)

    def capacity(self) -> Optional[int]:
        """The most entries a device buffer of any stack may have so that every budget holds: a
        swapped loop's chunk, a kept loop's ``max_iterations`` (at least 1). None: no bound."""
        caps = [lp.chunk if lp.action == SWAP and lp.chunk else lp.max_iterations for lp in self.loops]
        known = [c for c in caps if c is not None]
        return max(1, min(known)) if known else None

    def swapped(self) -> frozenset[str]:
        """The loops whose stacks swap: kept in host memory by the fast backend's fused call, their
        full chunks moved there on the staged path and the partitioned tiers."""
        return frozenset(lp.loop for lp in self.loops if lp.action == SWAP)

    def lines(self) -> list[str]:
        """One line per loop (``LoopPlan.line``), after the run budget's."""
        head = [f"run memory_budget={self.run_budget} B on {self.platform.name}"] if self.run_budget else []
        return head + [lp.line() for lp in self.loops]

    def __str__(self) -> str:
        return "\n".join(self.lines()) if self.loops else "no gradient stacks"


def plan_memory(stacks: Sequence[StackSize], where: Platform, run_budget: Optional[int] = None,
                costs: CostModel = CostModel()) -> MemoryPlan:
    """The plan of a run whose gradient stacks are ``stacks`` on platform ``where`` under ``run_budget``
    (bytes, all loops together; None: none). Each loop's budget is its own (``memory_budget`` of its
    ``tn.while_loop``, at most the run's), or else its share of what the run budget leaves, in
    proportion to its bytes per iteration. Then ``plan_loop`` decides."""
    loops: dict[str, list[StackSize]] = {}
    for s in stacks:
        loops.setdefault(s.loop, []).append(s)
    entry = {name: _total([s.entry_bytes for s in ss]) for name, ss in loops.items()}
    own: dict[str, int] = {}
    own_from: dict[str, str] = {}
    for name, ss in loops.items():
        given = [s for s in ss if s.memory_budget is not None]
        if given:
            least = min(given, key=lambda s: s.memory_budget or 0)
            own[name], own_from[name] = least.memory_budget or 0, least.budget_from
    out = []
    for name, ss in loops.items():
        b, src = _budget_of(name, own, entry, run_budget)
        src = own_from[name] if src == "loop" else src
        lp = plan_loop(name, len(ss), entry[name], b, src, any(s.swap_memory for s in ss), where, costs)
        out.append(dataclasses.replace(lp, frame=ss[0].frame))
    return MemoryPlan(tuple(out), run_budget, where)


def _budget_of(name: str, own: Mapping[str, int], entry: Mapping[str, Optional[int]], run_budget: Optional[int]
               ) -> tuple[Optional[int], str]:
    """(the budget of loop ``name``, whose it is): its own, unless the run's is smaller; else its share
    of what the run budget leaves after the loops with their own, in proportion to bytes per iteration;
    else (a loop whose bytes per iteration are unknown) the run's whole budget, which the run's check
    bounds together with the others."""
    if name in own:
        return (own[name], "loop") if run_budget is None or own[name] <= run_budget else (run_budget, "run")
    if run_budget is None:
        return None, "none"
    e = entry[name]
    if e is None:
        return run_budget, "run"
    weights = [x for n, x in entry.items() if n not in own and x is not None]
    left = max(0, run_budget - sum(own.values()))
    return left * e // max(1, sum(weights)), "run"


def plan_loop(loop: str, stacks: int, e: Optional[int], budget: Optional[int], source: str, swap_asked: bool,
              where: Platform, costs: CostModel = CostModel()) -> LoopPlan:
    """The rules, in order: (1) no budget: keep, or swap if the loop asked (``swap_memory=True``);
    (2) bytes per iteration unknown: keep, checked at run time; (3) a budget under two iterations'
    bytes: recompute; (4) swapping asked, or a host memory space exists: swap in chunks of
    ``budget // (2 e)`` entries; (5) otherwise (the CPU): recompute, since swapping frees nothing."""
    def plan(action: str, reason: str, **kw: Any) -> LoopPlan:
        return LoopPlan(loop, stacks, e, budget, source, action, action != RECOMPUTE, reason, **kw)

    if budget is None:
        return plan(SWAP if swap_asked else KEEP, "asked for (swap_memory=True)" if swap_asked else
                    "no memory budget: every iteration's values stay on the device")
    if e is None:
        return plan(SWAP if swap_asked else KEEP, "its bytes per iteration are known only at run time: the run "
                    "checks its stacks against the budget as they grow")
    fits = budget // e
    if budget < 2 * e:
        return plan(RECOMPUTE, f"the budget holds {fits} iteration(s) and swapping needs two chunks on the "
                    f"device: only recomputation from checkpoints meets it; {_AFTER.format(fits=fits)}",
                    max_iterations=fits)
    chunk = budget // (2 * e)
    if swap_asked or where.host_memory:
        secs = None if where.bandwidth is None else e / where.bandwidth
        why = "asked for (swap_memory=True)" if swap_asked else f"{where.name} has host memory"
        if not where.host_memory:
            why += f"; on the {where.name} host and device memory are one, so this moves values and frees nothing"
        elif secs is not None and costs.iteration_seconds is not None:
            hidden = secs <= costs.iteration_seconds
            why += (f"; {secs * 1e6:.1f} us of transfer per iteration each way "
                    + ("hides behind" if hidden else "exceeds") + f" {costs.words()}"
                    + ("" if hidden else ": recomputation would be cheaper (a loop's own budget without "
                                          "swap_memory=True)"))
        return plan(SWAP, f"{why}: two chunks of {chunk} iterations on the device at any trip count (none in "
                    "the fast backend's one compiled call, which keeps the stacks in host memory)", chunk=chunk,
                    transfer_seconds=secs)
    return plan(RECOMPUTE, f"on the {where.name} host and device memory are one, so swapping frees nothing; only "
                f"recomputation from checkpoints meets the budget at any trip count; {_AFTER.format(fits=fits)}",
                max_iterations=fits)


#: what a run does for a loop whose plan recomputes and whose gradient was built with stacks
_AFTER = ("a loop's or a gradient's budget builds its gradient that way; under a run's budget these stacks keep "
          "the values of {fits} iteration(s), and a run that goes further is repeated on the tn.gradients call "
          "rebuilt to recompute (turnout.rebuild), or stops with ResourceExhaustedError where it cannot "
          "be rebuilt")


@dataclass(frozen=True)
class Checkpointing:
    """How ``tn.gradients`` reverses a loop that recomputes: ``slots`` loop states of ``state_bytes``
    each (its loop variables and the int32 position of the state) within the loop's ``budget``. Zero
    slots: the budget holds no state, and the gradient builder refuses it."""

    loop: str
    budget: int
    state_bytes: int
    slots: int
    #: whose ``budget`` is: the loop's own (``"loop"``) or its share of a gradient's (``"gradient"``)
    budget_from: str = "loop"


#: bytes of bookkeeping per checkpointed state: the int32 position (iteration) it was taken before
POSITION_BYTES = 4


def checkpointing(loop: str, budget: Optional[int], state_bytes: Optional[int], swap_asked: bool,
                  budget_from: str = "loop") -> Optional[Checkpointing]:
    """The build-time half of the plan: whether ``tn.gradients`` differentiates loop ``loop`` by
    recomputation from checkpoints (``turnout.gradients.recompute``) instead of gradient stacks, and
    in how many slots. None: it keeps stacks, and the run-time plan (``plan_memory``) honours them.

    Why these rules: the gradient graph is built before any run, so its platform is not known, and
    ``plan_loop`` on the graph's default platform (the CPU, where swapping frees nothing) calls for
    recomputation wherever a loop's own budget and a static size meet. A loop that asked to swap
    (``swap_memory=True``, rule 4) keeps its stacks and swaps them; one whose state has no static size
    (rule 2: a TensorArray the body reads, a dynamic shape) keeps them too, checked as the run goes. A
    run's budget (``Session.run``) comes after the graph is built; a run that outgrows the stacks is
    repeated on a gradient built again with a budget (``turnout.rebuild``), which this rule
    decides for as for any gradient's."""
    if budget is None or swap_asked or state_bytes is None:
        return None
    per_state = state_bytes + POSITION_BYTES
    return Checkpointing(loop, budget, per_state, schedule.slots_for_budget(budget, per_state), budget_from)


def shares(weights: Mapping[str, Optional[int]], own: Mapping[str, int], budget: int) -> dict[str, int]:
    """How ``tn.gradients(..., memory_budget=budget)`` divides its budget among the loops it reverses
    (``weights``: each loop's bytes per checkpointed state, None where it has no static size; ``own``:
    the loops' own budgets). The loops with budgets of their own keep them where they fit together
    (else they share the whole budget in proportion to them); the others share what is left in
    proportion to their bytes per state, so that a loop with the larger state gets the larger share
    and each about as many checkpoints. A loop of no static size counts as the mean of the others.

    Why the shares sum to at most ``budget``: each becomes that loop's own budget, which every
    backend checks on its own (the slots of a loop that recomputes, the stacks of one that keeps
    them), and no check sees the loops together unless a run's budget is given too."""
    mine = {n: own[n] for n in weights if n in own}
    held = sum(mine.values())
    out = dict(mine) if held <= budget else {n: budget * b // held for n, b in mine.items()}
    left = budget - sum(out.values())
    scale = _scale(weights, mine)
    total = max(1, sum(scale.values()))
    out.update({n: left * s // total for n, s in scale.items()})
    return out


def smallest_shared(weights: Mapping[str, Optional[int]], own: Mapping[str, int]) -> int:
    """The smallest budget whose ``shares`` give each loop with a static state one state, where
    the loops' own budgets fit it: their own budgets and the others' bytes per state (a loop of no
    static size counted as the mean, as ``shares`` counts it)."""
    mine = {n: own[n] for n in weights if n in own}
    return sum(mine.values()) + sum(_scale(weights, mine).values())


def _scale(weights: Mapping[str, Optional[int]], mine: Mapping[str, int]) -> dict[str, int]:
    """The weights ``shares`` divides a budget by among the loops without their own (``mine``):
    their bytes per state, the mean of those for a loop of no static size (1 where none has one)."""
    rest = [n for n in weights if n not in mine]
    known = [w for n in rest if (w := weights[n]) is not None]
    fill = sum(known) // len(known) if known else 1
    return {n: w if (w := weights[n]) is not None else fill for n in rest}


def _total(sizes: Iterable[Optional[int]]) -> Optional[int]:
    got = list(sizes)
    return None if any(b is None for b in got) else sum(got)  # type: ignore[arg-type]


def entry_bytes(attrs: Mapping[str, Any], depth: Optional[int]) -> Optional[int]:
    """Bytes one entry of a stack with ``StackNew`` attrs ``attrs`` takes: its value, and its iteration
    index (``depth`` int32s; None: unknown, counted as one). None when the value's shape or size is
    not static (a TensorArray's, a dynamic shape)."""
    d = dt.as_dtype(attrs["elem_dtype"])
    n = sh.num_elements(sh.as_shape(attrs.get("elem_shape")))
    if n is None or d.is_opaque:
        return None
    return int(n) * d.itemsize + 4 * (depth if depth is not None else 1)


def stack_sizes(nodes: Iterable[Any]) -> list[StackSize]:
    """The ``StackSize`` of every ``StackNew`` among ``nodes`` (a graph's, or a run's) made for a forward
    loop: read from its attrs and its pushes' index shape (pushes among ``nodes``). (Graphs imported
    from TensorFlow keep LIFO stacks of no loop, which no budget covers.)"""
    nodes = list(nodes)
    depth: dict[int, Optional[int]] = {}
    for n in nodes:
        if n.op == "StackPush" and n.raw_inputs:
            shape = n.inputs[1].shape
            src = n.inputs[0].node
            while src.op == "Enter" and src.raw_inputs:  # the handle is captured into each enclosing frame
                src = src.inputs[0].node
            depth[src.id] = None if shape is None or len(shape) != 1 else shape[0]
    out = []
    for n in nodes:
        a = n.attrs
        if n.op == "StackNew" and "loop_name" in a:
            out.append(StackSize(n.name, str(a["loop_name"]), entry_bytes(a, depth.get(n.id)),
                                 bool(a.get("swap_memory", False)), a.get("memory_budget"),
                                 str(a.get("frame_name", "")), str(a.get("budget_from", "loop"))))
    return out


#: graph -> (its version, the loops with a budget of their own): read once per graph version
_BUDGETED: weakref.WeakKeyDictionary[Any, tuple[int, tuple[str, ...]]] = weakref.WeakKeyDictionary()


def swapped_loops(plan: Optional[MemoryPlan]) -> frozenset[str]:
    """The loops whose stacks ``plan`` swaps (``MemoryPlan.swapped``); none without a plan."""
    return plan.swapped() if plan is not None else frozenset()


def budgeted_loops(graph: Any) -> tuple[str, ...]:
    """The names of ``graph``'s loops that have a memory budget of their own (``tn.while_loop(...,
    memory_budget=)``, recorded on their stacks), in build order, without repeats. Why memoised per
    graph version: every run asks (a backend to know whether any budget applies, a session to refuse
    budgets on a backend that cannot honour them), and the answer changes only with the graph."""
    got = _BUDGETED.get(graph)
    if got is None or got[0] != graph.version:
        loops = dict.fromkeys(n.attrs["loop_name"] for n in graph.nodes
                              if n.op == "StackNew" and "memory_budget" in n.attrs)
        got = _BUDGETED[graph] = (graph.version, tuple(loops))
    return got[1]


def run_plan(nodes: Iterable[Any], where: Platform, run_budget: Optional[int]) -> Optional[MemoryPlan]:
    """The plan a backend honours for a run of ``nodes`` under ``run_budget``, or None when no budget
    applies (no run budget, and no loop among them has one): the run then needs no checks. The
    loops among them whose gradient recomputes (``recomputed_loops``) have a budget of their own."""
    nodes = list(nodes)
    sizes = stack_sizes(nodes)
    done = recomputed_loops(nodes)
    if not done and (not sizes or (run_budget is None and all(s.memory_budget is None for s in sizes))):
        return None
    plan = plan_memory(sizes, where, run_budget)
    return dataclasses.replace(plan, loops=plan.loops + done)


def graph_plan(graph: Any, fetches: Optional[Sequence[Any]] = None, platform_name: str = "cpu",
               run_budget: Optional[int] = None, costs: CostModel = CostModel()) -> MemoryPlan:
    """The plan of a run of ``fetches`` (every loop of ``graph`` when None) on ``platform_name``
    under ``run_budget``, knowing ``costs``: what ``tn.memory_report`` and ``Session.explain`` print."""
    from turnout.graph import ancestors

    nodes = graph.nodes if fetches is None else list(ancestors(list(fetches)).values())
    plan = plan_memory(stack_sizes(nodes), platform(platform_name), run_budget, costs)
    return dataclasses.replace(plan, loops=plan.loops + recomputed_loops(nodes))


def recomputed_loops(nodes: Iterable[Any]) -> tuple[LoopPlan, ...]:
    """The plan lines (``recomputed``) of the loops among ``nodes`` whose gradient recomputes, one per
    loop, read from the attrs (the loop's ``Checkpointing``) of their ``CheckpointSlots`` (its
    forward loop's slots) or ``CheckpointTrips`` (its backward loop's trip count) nodes, so that a
    graph loaded from a file has them too, and a device of a partitioned run holding either."""
    got = {str(a["loop"]): Checkpointing(str(a["loop"]), int(a["memory_budget"]), int(a["state_bytes"]),
                                         int(a["slots"]), str(a.get("budget_from", "loop")))
           for n in nodes if n.op in ("CheckpointSlots", "CheckpointTrips") for a in [n.attrs]}
    return tuple(recomputed(cp) for cp in got.values())


def recomputed(cp: Checkpointing) -> LoopPlan:
    """The plan line of a loop whose gradient was built to recompute (``checkpointing``): it saves no
    stacks; its forward loop keeps, and its backward loop holds, ``cp.slots`` states of
    ``cp.state_bytes`` each."""
    return LoopPlan(cp.loop, 0, cp.state_bytes, cp.budget, cp.budget_from, RECOMPUTE, True,
                    f"its gradient recomputes from {cp.slots} checkpoint(s) of {cp.state_bytes} B, "
                    f"{cp.slots * cp.state_bytes} B at any trip count; {recompute_cost(cp.slots)}", slots=cp.slots)


#: the trip counts at which a plan line says what recomputation costs
COST_AT = (1_000, 10_000)


@functools.lru_cache(maxsize=256)
def recompute_cost(slots: int) -> str:
    """What reversing a loop in ``slots`` slots costs at the trip counts ``COST_AT``, in forward passes
    of the body recomputed (``checkpoint_schedule.cost``, exact: it runs the schedule), for a plan
    line: a user weighing a budget sees what it buys without running it.

    Cached: running the schedule at ``COST_AT`` takes about 0.1 s, and every run that plans its
    memory writes the line of each recomputing loop again (``recomputed_loops``)."""
    first, *more = [f"{schedule.cost(n, slots).recomputed / n:.2g}" for n in COST_AT]
    rest = "".join(f", {p} at {n}" for p, n in zip(more, COST_AT[1:], strict=True))
    return f"its backward loop recomputes {first} forward passes at {COST_AT[0]} steps{rest}"


def backend_platform(backend: Any) -> str:
    """The platform a session's backend keeps its stacks on (its ``memory_platform()``; the
    interpreters run on the host: ``"cpu"``)."""
    get = getattr(backend, "memory_platform", None)
    return str(get()) if callable(get) else "cpu"


class SavedBytes:
    """A run's count of the bytes its loops have saved, checked against a plan at every push: the
    reference interpreter's accounting (it holds every pushed value until the run ends), and the
    slots of loops' checkpoints (``checkpoints``)."""

    def __init__(self, plan: MemoryPlan, backend: str) -> None:
        self.plan, self.backend = plan, backend
        self.pushed: dict[str, int] = {}  # per loop, the bytes of the values its stacks hold
        self.slots: dict[str, int] = {}  # per loop, the bytes of one entry's checkpoint slots
        self.peak = 0

    @property
    def by_loop(self) -> dict[str, int]:
        """Per loop, the bytes it holds: what its stacks saved and its checkpoints' slots."""
        return {k: self.pushed.get(k, 0) + self.slots.get(k, 0) for k in {**self.pushed, **self.slots}}

    def push(self, loop: str, nbytes: int) -> None:
        """``nbytes`` more saved by ``loop``: raise ``ResourceExhaustedError`` if a budget is now exceeded."""
        self.pushed[loop] = self.pushed.get(loop, 0) + nbytes
        self._check("the values pushed so far")

    def checkpoints(self, attrs: Mapping[str, Any], count: int) -> None:
        """A ``CheckpointSlots`` node with these attrs gave its loop ``count`` slots, which the slot
        buffers of its forward loop then take (``checkpoint_bytes``). They count once per loop, the
        largest of its entries': the slots an entry of a nested loop leaves at its exit are saved by
        the loops around it, which count them as theirs."""
        loop, nbytes = checkpoint_bytes(attrs, count)
        self.slots[loop] = max(self.slots.get(loop, 0), nbytes)
        self._check("")

    def _check(self, what: str) -> None:
        held = self.by_loop
        self.peak = max(self.peak, sum(held.values()))
        check(self.plan, held, self.backend, what)

    def stats(self) -> dict[str, Any]:
        """What a run's stats report of it: the peak bytes held and the bytes per loop."""
        return {"peak_saved_bytes": self.peak, "saved_bytes": self.by_loop}


def device_saved_stats(per_device: Mapping[str, SavedBytes]) -> dict[str, Any]:
    """What a partitioned run's stats report of the counts its devices kept (``SavedBytes`` per
    device, each its own interpreter's; nothing without one): the most any device held
    (``peak_saved_bytes``), each device's peak, and each loop's bytes summed over devices
    (``saved_bytes``). One function for the partitioned reference executor and the cluster, whose
    tasks hand their devices' counts to the driver."""
    if not per_device:
        return {}
    by_loop: dict[str, int] = {}
    for saved in per_device.values():
        for loop, b in saved.by_loop.items():
            by_loop[loop] = by_loop.get(loop, 0) + b
    peaks = {d: saved.peak for d, saved in per_device.items()}
    return {"peak_saved_bytes": max(peaks.values()), "peak_saved_bytes_per_device": peaks, "saved_bytes": by_loop}


def checkpoint_bytes(attrs: Mapping[str, Any], count: int) -> tuple[str, int]:
    """The loop, and the bytes its checkpoints hold, of a ``CheckpointSlots`` node with these attrs
    that gave ``count`` slots: each holds one state of the loop and its position (``state_bytes``),
    the unit its budget counts (``Checkpointing``)."""
    return str(attrs["loop"]), int(count) * int(attrs["state_bytes"])


def check(plan: MemoryPlan, loop_bytes: Mapping[str, int], backend: str, what: str = "") -> None:
    """Raise ``ResourceExhaustedError`` when a run's own accounting (``loop_bytes``: loop -> the bytes
    its saved values hold on the device now) is over a loop's budget or the run's. ``what`` says which
    accounting (the reference interpreter's values, the fast backend's buffers)."""
    for lp in plan.loops:
        got = loop_bytes.get(lp.loop, 0)
        if lp.per_loop and lp.budget is not None and got > lp.budget:
            whose = ("the loop's memory_budget" if lp.budget_from == "loop" else
                     "its share of the gradient's memory_budget")
            raise ResourceExhaustedError(over_budget(lp, got, lp.budget, whose, backend, what))
    total = sum(loop_bytes.values())
    if plan.run_budget is not None and total > plan.run_budget:
        worst = max(loop_bytes, key=lambda k: loop_bytes[k])
        lp = next((x for x in plan.loops if x.loop == worst), LoopPlan(worst, 0, None, plan.run_budget, "run", KEEP,
                                                                       True, ""))
        raise ResourceExhaustedError(over_budget(lp, total, plan.run_budget, "the run's memory_budget", backend, what))


def over_budget(lp: LoopPlan, got: int, budget: int, whose: str, backend: str, what: str) -> str:
    """The message of a run stopped by a budget: the loop, its bytes per iteration, the budget, and
    what would meet it."""
    if lp.slots is not None:  # (a loop whose gradient was built to recompute: its slots are fixed)
        return (f"{backend}: the checkpoints of loop \"{lp.loop}\" ({lp.slots} slots of {lp.entry_bytes} bytes, "
                f"which its gradient was built to recompute from) and the values the run's other loops saved "
                f"would hold {got} bytes on the device{f' ({what})' if what else ''}, over {whose} of {budget} "
                "bytes. A run's budget cannot change slots already built: give the loop (or the gradient) a "
                "memory_budget that fits within the run's (fewer slots, more recomputation), or raise the run's "
                "budget")
    e = "an unknown number of" if lp.entry_bytes is None else str(lp.entry_bytes)
    fits = "" if lp.entry_bytes is None else f" (it fits {budget // max(1, lp.entry_bytes)} iterations)"
    return (f"{backend}: the saved values of loop \"{lp.loop}\" ({e} bytes per iteration) would hold {got} bytes "
            f"on the device{f' ({what})' if what else ''}, over {whose} of {budget} bytes{fits}. Recomputing "
            "them from checkpoints would meet it at any trip count: a loop's or a gradient's budget builds the "
            "gradient that way (tn.while_loop(..., memory_budget=B) without swap_memory=True, or "
            "tn.gradients(..., memory_budget=B)), and a run's budget rebuilds a tn.gradients call that way where "
            "it can (turnout.rebuild); raise the budget, give the loop or the gradient a budget, or on "
            "a platform with host memory let the loop swap (swap_memory=True)")


__all__ = [
    "HOST_BANDWIDTH", "KEEP", "POSITION_BYTES", "RECOMPUTE", "SWAP", "Checkpointing", "CostModel", "LoopPlan",
    "MemoryPlan", "PLATFORM_NAMES", "Platform", "SavedBytes", "StackSize", "backend_platform", "check",
    "checkpoint_bytes", "checkpointing", "device_saved_stats", "entry_bytes", "recomputed", "recomputed_loops",
    "graph_plan", "measured_costs", "over_budget", "plan_loop", "plan_memory", "platform", "run_plan", "shares",
    "smallest_shared", "stack_sizes", "swapped_loops"
]
