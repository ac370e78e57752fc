"""The SPMD tier: a program whose loops span devices of one process, compiled as ONE program.

Why one program: a loop whose iterations hop between devices costs, when the host drives it, one
dispatch and one host round trip per device per iteration (tens of microseconds each). If every op
of the program lowers to JAX, the whole placed program can instead be one ``jax.jit`` of a
``shard_map`` over a ``Mesh`` of the devices it uses. Every device runs the same program (SPMD) on
the region tree that ``fast.functionalize`` raises the graph to, and the placement decides which
device does what:

* **an op runs only on its owner device**: consecutive ops of one scope are grouped into *batches*
  (a batch ends where an op reads a value that another device computed in the same batch); a batch
  becomes one ``lax.switch`` on ``lax.axis_index``, whose branch ``d`` runs the batch's ops of device
  ``d`` (a ``lax.cond`` when only one device has ops). The other devices' copies of those outputs are
  zeros: a value is only meaningful on its owner device.
* **a value that crosses devices moves by** ``lax.ppermute`` from its owner to the device of the op
  that reads it: the Send/Recv pair of the partitioned graph. The moves a batch needs are made before
  it, as few ``ppermute`` calls as possible (moves with distinct sources and destinations share one);
  a moved value is remembered in its scope, so it crosses once per scope (once per loop entry for a
  loop invariant, once per iteration for a loop variable).
* **the predicates are shared**: a cond's predicate and a loop's ``LoopCond`` input are broadcast from
  their owner by a ``psum``, so every device takes the same branch and runs the loop in lockstep
  (collectives inside ``lax.cond`` and ``lax.while_loop`` need that).
* **fetches come back from their owner device**, as do Variables: each device keeps a copy of every
  Variable, updated only on the device of the Variable's ops (placement colocates them).

Constants, values known at trace time, fed values and Variable handles are the same on every device
and never move. ``parallel_iterations`` has no effect here: the devices run each iteration in
lockstep, so device A cannot start iteration i+1 while device B runs iteration i.

Gradient stacks (the backward loops of ``tn.gradients`` over loops) are state like Variables: each
device allocates every stack, and a run whose pushes overflow the buffer is repeated with a larger
one. Their pushes and pops are the one exception to "only on the owner": they run on every device,
outside any branch, each device updating its own copy (a buffer passed through a conditional would
be copied at every push); only the owner's copy holds real values, only its checks count, and only
it is read. A loop that asks for ``swap_memory=True`` keeps its stacks' value buffers in each
device's host memory inside the program (``StackValue.host``), as the one-device fused call does.

What is not eligible (``spmd_choice`` says why; the caller runs another tier instead): a stack whose
pushes have run-time shapes, ops without a JAX lowering, devices not of this process or of mixed
kinds, programs the fast backend cannot raise to regions, and (by default) programs in which no loop
spans two devices — those run as well or better as per-device compiled segments.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax import shard_map
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from turnout.devices.jax_device import jax_device
from turnout.devices.names import parse
from turnout.devices.placement import Placement
from turnout.devices.spmd_emitter import AXIS, SpmdEmitter
from turnout.errors import (
    PlacementError,
    TurnoutError,
    UnsupportedError,
    describe_node,
)
from turnout.fast.call_spec import CallArgs, CallSpec, Traced, flat_call
from turnout.fast.chunk_store import memory_row
from turnout.fast.emit import stack_source
from turnout.fast.functionalize import functionalize
from turnout.fast.guards import iteration_bound, refuse_firing_budget
from turnout.fast.host_env import fetched
from turnout.fast.lane import write_variables
from turnout.fast.lowering import LOWERING_RULES
from turnout.fast.outcome import MAX_CAPACITY, Discard, ErrorCodes, Retry, decode, enforce, first
from turnout.fast.regions import Key, WhileRegion, key, program_nodes, walk
from turnout.fast.shell import retried
from turnout.fast.specialise import static_signature
from turnout.fast.stack_sizes import stack_bytes, stack_infos, static_push_shapes, variables_of
from turnout.fast.stacks import StackValue, state_key
from turnout.fast.state_keys import var_key
from turnout.fast.timeline import Timeline, device_track
from turnout.fast.values import DEAD, is_static
from turnout.fast.variable_store import cached_copy, start_entry
from turnout.graph import Graph, Node, Tensor
from turnout.memory_plan import MemoryPlan
from turnout.session import RunOptions, RunResult
from turnout.slot_sizes import SlotPlan
from turnout.validate import validate


# ---- eligibility ---------------------------------------------------------------------------------------
@dataclass
class _Analysis:
    program: Any
    nodes: list[Node]
    mesh_names: list[str]
    loc: dict[int, int]
    #: StackNew id -> (element dtype, element shape, index shape)
    stacks: dict[int, tuple[Any, tuple[int, ...], tuple[int, ...]]]


def _stack_layouts(nodes: list[Node]) -> dict[int, tuple[Any, tuple[int, ...], tuple[int, ...]]] | str:
    """Every gradient stack's element dtype and the static shapes of its elements and iteration
    indices, from its pushes; or why a stack has none. Why static: each device allocates its stacks
    before the program runs, so that every ``lax.switch`` branch carries state of one fixed type."""
    out: dict[int, Any] = {}
    for n in nodes:
        if n.op != "StackPush":
            continue
        src, shapes = stack_source(n.inputs[0]), static_push_shapes(n)
        if src is None or shapes is None:
            return f"{describe_node(n)} pushes a value of run-time shape; stacks need static shapes in the SPMD tier"
        got = (n.inputs[2].dtype.numpy, *shapes)
        if out.setdefault(src.id, got) != got:
            return f"{describe_node(src)} receives pushes of different shapes"
    for n in nodes:
        if n.op == "StackPop":
            src = stack_source(n.inputs[0])
            if src is None or src.id not in out:
                return f"{describe_node(n)} pops a stack with no push in the program"
    return out


def _analyse(graph: Graph, placement: Placement, fetches: list[Tensor], fed: Iterable[Tensor],
             only_spanning: bool) -> _Analysis | str:
    """The raised program and its device map, or the reason the SPMD tier cannot run it."""
    for t in fetches:
        if t.dtype.is_opaque:
            return f"fetch {t.name} is a {t.dtype.name} value; the SPMD tier fetches arrays only"
    try:
        program = functionalize(graph, list(fetches), list(fed))
    except TurnoutError as e:
        return f"no structured form: {e}"
    nodes = {n.id: n for n in program_nodes(program)}
    spanning = any(len({placement.device_of.get(n.id) for n in it.nodes}) > 1
                   for it in walk(program.items) if isinstance(it, WhileRegion))
    for n in nodes.values():
        if n.op in ("Send", "Recv"):
            return f"{describe_node(n)}: the graph is already partitioned; give the SPMD tier the placed graph"
        if n.op not in LOWERING_RULES:
            return f"{describe_node(n)} has no JAX lowering"
        if n.id not in placement.device_of:
            return f"{describe_node(n)} has no device in the placement"
    if only_spanning and not spanning:
        return "no loop spans two devices (a program without one runs as per-device compiled segments)"
    used = {placement.device_of[i] for i in nodes}
    names = [d for d in placement.devices if d in used]
    specs = [parse(d) for d in names]
    if len({(s.job, s.task) for s in specs}) > 1:
        return "the devices belong to several tasks; one SPMD program runs in one process"
    if len({s.type for s in specs}) > 1:
        return f"the devices are of several kinds ({sorted({s.type for s in specs})}); one mesh holds one kind"
    try:
        for d in names:
            jax_device(d)
    except PlacementError as e:
        return str(e)
    stacks = _stack_layouts(list(nodes.values()))
    if isinstance(stacks, str):
        return stacks
    pos = {d: i for i, d in enumerate(names)}
    loc = {i: pos[placement.device_of[i]] for i in nodes}
    return _Analysis(program, list(nodes.values()), names, loc, stacks)


def spmd_choice(graph: Graph, placement: Placement, fetches: list[Tensor], fed: Iterable[Tensor] = (),
                stack_capacity: int = 64, device_memory_limit: Optional[int] = None,
                only_spanning: bool = True) -> Union[SpmdPlan, str]:
    """The SPMD tier's plan for running ``fetches`` of the placed ``graph`` with ``fed`` tensors fed, or
    the reason it declines the program: one analysis gives either, so the partitioned backend can say
    in a run's statistics why the tier it was asked for did not run. ``device_memory_limit``: the
    stack bytes each device may hold (``SpmdPlan.room``); a limit that holds no entry of the stacks
    declines the program. ``only_spanning=False`` also accepts programs in which no loop spans two
    devices (benchmarks run one program on one device so). A program that turns out not to lower
    is refused by its first ``SpmdPlan.run``, which returns ``Discard(refused=...)``."""
    got = _analyse(graph, placement, list(fetches), list(fed), only_spanning)
    if isinstance(got, str):
        return got
    plan = SpmdPlan(graph, list(fetches), got, stack_capacity, device_memory_limit)
    if plan.room < 1:
        return (f"device_memory_limit={device_memory_limit} bytes holds no entry of the stacks on one device "
                f"({plan.entry_bytes} bytes an entry); the per-device tiers move stack chunks instead")
    return plan


def wants_whole_program(mode: str, graph: Graph, placement: Placement) -> bool:
    """Whether to try the SPMD tier first. Why ``"auto"`` looks at ``parallel_iterations``: one
    multi-device program runs every spanning loop in lockstep (the predicate is shared each
    iteration), which is the cheapest per iteration but overlaps nothing; a loop that asks for
    ``parallel_iterations > 1`` asks for device A to run ahead of device B — the pipelining of model
    parallelism — which only the host-driven tier gives. So ``"auto"`` takes the SPMD tier when every
    loop that spans devices has ``parallel_iterations == 1``; ``"always"`` whenever it accepts the
    program; ``"never"`` not at all."""
    if mode != "auto":
        return mode == "always"
    fa = validate(graph)
    spans: dict[Any, set[str]] = {}
    for n in graph.nodes:
        f = fa.node_frame.get(n.id, ())
        for i in range(1, len(f) + 1):  # a node is in its frame and in every enclosing one
            spans.setdefault(f[:i], set()).add(placement.device_of.get(n.id, ""))
    return all(fa.frames[f].parallel_iterations == 1 for f, ds in spans.items() if len(ds) > 1)


# ---- the plan ----------------------------------------------------------------------------------------------
@dataclass
class _Compiled:
    """One trace of the program: its calling convention (``fast.call_spec``), jitted function and,
    once traced, the ``CallSpec`` of its results and what the emitter counted."""

    args: CallArgs
    fn: Any = None
    spec: Optional[CallSpec] = None
    meta: dict[str, Any] = field(default_factory=dict)


class MeshCopies:
    """A Variable's copies on every mesh device after a run (stacked on a leading axis), standing for
    its owner device's copy, the Variable's value.

    Why: the session's store keeps a run's new value on the device until someone reads it
    (``fast.variable_store``), and the write-back of every backend is one function
    (``lane.write_variables``). That function stores the device value it is given and records it
    as the device copy the next run starts from; here those are one object, whose dtype and shape
    are one copy's and whose host value (``numpy.asarray``) is the owner device's shard alone,
    copied to the host only when read."""

    __slots__ = ("stacked", "owner")

    def __init__(self, stacked: Any, owner: Any) -> None:
        self.stacked = stacked
        self.owner = owner

    @property
    def dtype(self) -> np.dtype[Any]:
        """One copy's numpy dtype."""
        return np.dtype(self.stacked.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        """One copy's shape (the stacked array's without its leading mesh axis)."""
        return tuple(self.stacked.shape[1:])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """The owner device's copy on the host (only its shard is copied)."""
        for s in self.stacked.addressable_shards:
            if s.device == self.owner:
                return np.asarray(np.asarray(s.data)[0, ...], dtype=dtype)
        raise PlacementError(f"SPMD tier: device {self.owner} holds no copy this process can read"
                             )  # pragma: no cover - the tier runs on devices of this process only


class SpmdPlan:
    """One placed program compiled as one ``shard_map`` program (see the module docstring).

    ``devices`` are the canonical names of the mesh, in mesh order; ``run`` takes the fed values, the
    session's Variable store (updated in place, as every backend does) and the run options.

    The program is called in the one calling convention of the compiled side (``fast.call_spec``),
    each device returning its own copy of every result: the fed values (the same on every device),
    the error word, carried (``CallArgs.carries_word``: every device returns its own, and a stack
    that outgrew its buffer on any of them decides) and the Variables (one copy per device), then the
    iteration bound; the results, laid out by ``call_spec.lay_out``, have the devices on their leading
    axis, and the run reads an output and its live flag from its owner device's copy.

    Gradient stacks are device buffers of ``stack_capacity`` entries (64 to start with: every run
    allocates and zeroes every stack on every device, so room never used costs time). A run that
    pushes more is repeated with twice the capacity (a new compilation; later runs keep it,
    ``stats["stack_capacity"]``), up to ``outcome.MAX_CAPACITY``, ``room`` (the entries
    ``device_memory_limit`` lets every stack hold on one device) and, under memory budgets, the
    entries they hold (``budget_room``). A run that outgrows them returns ``Discard``: nothing of it
    is kept, and the caller runs the per-device tiers, which move stack chunks between calls, as a
    fused attempt that outgrows its rung leaves the run to the staged path. The loops that keep their
    stacks in host memory (the module docstring) are ``stats["stacks_in_host_memory"]``.
    """

    def __init__(self, graph: Graph, fetches: list[Tensor], analysis: _Analysis, stack_capacity: int = 64,
                 device_memory_limit: Optional[int] = None) -> None:
        self.graph = graph
        self.fetches = fetches
        self.program = analysis.program
        self.devices = analysis.mesh_names
        self.loc = analysis.loc
        self.jax_devices = [jax_device(d) for d in self.devices]
        self.mesh = Mesh(np.array(self.jax_devices, dtype=object), (AXIS,))
        self.codes = ErrorCodes()
        self.var_nodes, self.written = variables_of(analysis.nodes)
        self.readers: dict[Any, set[int]] = {}
        for n in analysis.nodes:
            for t in n.inputs:
                self.readers.setdefault(key(t), set()).add(n.id)
        self.stacks = analysis.stacks
        #: each stack's loop and ``swap_memory`` (by state key), as every executor names them: a
        #: swapping loop's stacks are kept in host memory
        self.stack_info = stack_infos(analysis.nodes)
        #: the bytes one entry of every stack takes on each device (every device allocates every stack),
        #: and the most entries ``device_memory_limit`` lets each stack hold there (unbounded: none)
        self.entry_bytes = sum(self._stack_bytes(sid, 1)[0] for sid in self.stacks)
        self.room = (MAX_CAPACITY if device_memory_limit is None or not self.entry_bytes
                     else device_memory_limit // self.entry_bytes)
        self.stack_capacity = min(stack_capacity, self.room)
        self.last_capacity = self.stack_capacity  # (the capacity of the last run: its stats and memory records)
        self._dev_vars: dict[str, tuple[Any, MeshCopies]] = {}  # name -> (the store's entry, its copies)
        self._compiled: dict[Any, _Compiled] = {}
        self._memory_rows: dict[int, list[dict[str, Any]]] = {}  # stack capacity -> memory_records
        self.compile_count = 0

    def describe(self) -> str:
        """The mesh, in order, with the number of graph nodes each device owns."""
        counts = Counter(self.loc.values())
        return ", ".join(f"{parse(n).short}: {counts[d]} nodes" for d, n in enumerate(self.devices))

    def _build(self, feed_keys: tuple[Any, ...], var_names: tuple[str, ...], capacity: int,
               static: dict[Any, np.ndarray], slots: SlotPlan) -> _Compiled:
        """The program for these feeds, Variables, stack capacity and specialisation, in the calling
        convention of ``fast.call_spec`` (built by its one builder, ``flat_call``)."""
        comp = _Compiled(CallArgs(feed_keys, ("err", *(var_key(n) for n in var_names))))
        fetch_keys = [key(t) for t in self.fetches]

        def body(feeds: dict[Any, Any], state: dict[str, Any], stacks: dict[str, Any], bound: Any) -> Traced:
            self.compile_count += 1
            em = SpmdEmitter(self.program, self.codes, capacity, bound, loc=self.loc, ndev=len(self.devices),
                             readers=self.readers)
            em.fed = {k[0] for k in feed_keys}
            em.static = static  # (fed values the plan is specialised on: constants of the trace)
            em.slot_capacity, em.learn_slots = slots.capacity, slots.learn
            # each Variable arrives as one copy per device (leading axis of the mesh): this device's is [0]
            em.state = {k: v if k == "err" else v[0] for k, v in state.items()}
            for sid, (dtype, elem, index) in self.stacks.items():
                k = state_key(sid)
                em.state[k] = StackValue(capacity, dtype, host=self.stack_info[k].swap).materialize(elem, index)
            env: dict[Any, Any] = dict(feeds)
            em.run_items(self.program.items, env)
            for k in fetch_keys:
                if not (env[k] is DEAD or is_static(env[k]) or isinstance(env[k], jax.Array)):
                    raise UnsupportedError(f"SPMD tier: fetch {k} is not an array ({type(env[k]).__name__})")
            comp.meta = {"moves": em.moves, "broadcasts": em.broadcasts, "batches": em.batches}
            written = {var_key(n): em.state[var_key(n)] for n in var_names if n in self.written}
            return Traced({k: env[k] for k in fetch_keys}, 0, {k: em.lives.get(k, True) for k in fetch_keys},
                          {"err": em.state["err"], **written})

        def per_device(fn: Any, donate_argnums: tuple[int, ...]) -> Any:
            """``fn`` over the mesh: the Variables split by device, the rest the same on each, every
            result given a leading axis of one (the device's row of the whole)."""
            specs = tuple(P(AXIS) if k.startswith("var:") else P() for k in comp.args.state)
            in_specs = (*(P(),) * len(feed_keys), *specs, P())
            sm = shard_map(lambda *flat: tuple(jnp.asarray(r)[None] for r in fn(*flat)), mesh=self.mesh,
                           in_specs=in_specs, out_specs=P(AXIS), check_vma=False)
            return jax.jit(sm, donate_argnums=donate_argnums)

        def record(spec: CallSpec) -> None:
            comp.spec = spec

        comp.fn = flat_call(comp.args, body, per_device, record)
        return comp

    def run(self, feeds: dict[Tensor, Any], variables: dict[str, np.ndarray], options: RunOptions,
            static: Optional[dict[Any, np.ndarray]] = None, *, slots: Optional[SlotPlan] = None,
            room: Optional[int] = None) -> Union[RunResult, Discard]:
        """Run the compiled program once, specialised on the fed values ``static`` (by key: constants
        of its trace, as ``fast.specialise`` decides; a trace that meets a shape other feeds decide
        raises ``NeedsStatic``, which the caller's specialisation loop takes). Errors keep the
        reference backend's types: a kernel error in compiled code is ``KernelError``, a loop past
        ``options.max_iterations`` is ``NonTerminationError``, a fetch whose branch did not run is
        ``DeadFetchError``. ``slots``: the checkpoint slots the program gives its recomputed loops (the
        backend's ``SlotSizes.plan``; every slot their budgets hold where None, for a plan run on its
        own). ``room``: the entries a stack may hold under this run's memory budgets
        (``budget_room``; None: none apply). A run whose stacks outgrow ``room`` or the plan's
        returns ``Discard`` (the class docstring); so does a trace that meets an op or a value one
        multi-device program cannot hold, with the reason as ``Discard.refused`` (nothing ran: the
        caller runs the per-device tiers from then on), as the one-device fused attempt's does."""
        static = static or {}
        slots = slots if slots is not None else SlotPlan(tuple(n for n in program_nodes(self.program)
                                                               if n.op == "CheckpointSlots"))
        refuse_firing_budget("SPMD tier", options)
        tl = Timeline() if options.trace else None
        t0 = time.perf_counter()
        names = tuple(sorted(self.var_nodes))
        copies = {n: self._copies(n, variables) for n in names}
        before = self.compile_count
        got = self._call(feeds, copies, options, static, slots, room, tl)
        if isinstance(got, Discard):
            return got
        comp, out, flags, state = got
        values = fetched(self.fetches, *self._owners_view(comp.spec, out, flags))
        write_variables(tuple((n, var_key(n) in state, None) for n in names),
                        [self._mesh_copies(n, state[var_key(n)]) if var_key(n) in state else copies[n] for n in names],
                        values, variables, self._dev_vars)
        if tl is not None:
            tl.finished(self.compile_count - before)
        return RunResult(values=values, trace=tl, stats=self._stats(comp, before, slots, t0))

    def _call(self, feeds: dict[Tensor, Any], copies: dict[str, MeshCopies], options: RunOptions,
              static: dict[Any, np.ndarray], slots: SlotPlan, room: Optional[int], tl: Optional[Timeline]
              ) -> Union[tuple[_Compiled, dict[Any, Any], Any, dict[str, Any]], Discard]:
        """The program called on the fed values and the Variables' ``copies``, from ``stack_capacity``
        up to the capacity that holds the run (each a trace of its own, ``_build``; the sized retry of
        every compiled backend, ``fast.shell.retried``, each ``Retry`` capped at ``room``): its trace, its
        outputs, live flags and changed state; or ``Discard`` where the stacks outgrow ``room`` or the
        plan's (the class docstring). Its error words are acted on (``outcome.enforce``)."""
        by_key = {key(t): np.asarray(v) for t, v in feeds.items()}
        feed_keys = tuple(sorted(by_key))
        var_dev = {var_key(n): c.stacked for n, c in copies.items()}
        var_sig = tuple((np.dtype(c.dtype).str, tuple(c.shape)) for c in var_dev.values())
        mi = iteration_bound(options)
        most = self.room if room is None else min(self.room, room)

        def run_at(capacity: int) -> Union[tuple[_Compiled, dict[Any, Any], Any, dict[str, Any]], Discard, Retry]:
            sig = (feed_keys, tuple((by_key[k].dtype.str, by_key[k].shape) for k in feed_keys), var_sig,
                   capacity, static_signature(static), slots.capacity)
            comp = self._compiled.get(sig)
            if comp is None:
                validate(self.graph, self.fetches, list(feeds))
                comp = self._compiled[sig] = self._build(feed_keys, tuple(copies), capacity, static, slots)
            called, compiles = tl.now() if tl is not None else 0.0, self.compile_count
            try:
                res = comp.fn(*comp.args.flat(by_key, {"err": np.int32(0), **var_dev}, {}, mi))
            except UnsupportedError as e:  # (raised by its trace, at the first call: the tier refuses the program)
                del self._compiled[sig]
                return Discard(refused=str(e))
            assert comp.spec is not None
            out, flags, state = comp.spec.split(res)
            words = np.asarray(state["err"])  # (the host waits for the program: its span is measured)
            if tl is not None:
                self._traced(tl, called, self.compile_count != compiles)
            # one error word per device: a stack that outgrew its buffer on any of them decides
            outcome = first([decode(self.codes, c, capacity=capacity, who="SPMD tier", unit="")
                             for c in sorted({int(c) for c in words if int(c)})])
            if isinstance(outcome, Retry):
                if capacity >= most:  # (the device memory limit or the budgets hold no more)
                    return Discard()
                # nothing of this run is kept; run again with room for twice as many, or as many as fit
                again = min(outcome.capacity, most)
                self.stack_capacity = max(self.stack_capacity, again)  # (later runs start there)
                return Retry(again)
            enforce(outcome)
            return comp, out, flags, state

        got, capacity, _ = retried(min(self.stack_capacity, most), run_at)
        if not isinstance(got, Discard):
            self.last_capacity = capacity
        return got

    def budget_room(self, plan: MemoryPlan, slot_bytes: Mapping[str, int]) -> int:
        """The most entries every stack may hold on each device under ``plan``'s budgets, the
        checkpoint slots ``slot_bytes`` (per loop) held beside them, as the per-device tiers count
        (``memory_plan.check``): each loop's own budget against its stacks and slots, the run's
        against them all. Every device holds every stack whole and every slot, so capacity ``c``
        holds ``c`` times each loop's bytes an entry there. Zero: the budgets hold no entry (or the
        slots alone overrun them), and the per-device tiers, which count chunk by chunk, take the run
        and say which budget it outgrew."""
        def entries(budget: int, slots: int, entry: int) -> int:  # (entry 0: no stack, the slots alone)
            return (budget - slots) // entry if entry else (MAX_CAPACITY if budget >= slots else 0)

        per_loop: dict[str, int] = {}
        for sid in self.stacks:
            loop = self.stack_info[state_key(sid)].loop
            per_loop[loop] = per_loop.get(loop, 0) + self._stack_bytes(sid, 1)[0]
        caps = [MAX_CAPACITY]
        caps += [entries(lp.budget, slot_bytes.get(lp.loop, 0), per_loop.get(lp.loop, 0)) for lp in plan.loops
                 if lp.per_loop and lp.budget is not None]
        if plan.run_budget is not None:
            caps.append(entries(plan.run_budget, sum(slot_bytes.values()), self.entry_bytes))
        return max(0, min(caps))

    def _stats(self, comp: _Compiled, before: int, slots: SlotPlan, t0: float) -> dict[str, Any]:
        """A run's stats: its tier and mesh, what its trace moved and batched, its stacks' capacity
        and where the swapping loops keep them, its checkpoint slots and its time since ``t0``."""
        return {
            "backend": "fast", "tier": "spmd", "devices": list(self.devices), "compiled": self.compile_count != before,
            "compiles": self.compile_count, "moves_per_trace": comp.meta.get("moves"),
            "broadcasts_per_trace": comp.meta.get("broadcasts"), "batches_per_trace": comp.meta.get("batches"),
            "stack_capacity": self.last_capacity, **slots.stats,
            "stacks_in_host_memory": sorted({i.loop for i in self.stack_info.values() if i.swap}),
            "seconds": time.perf_counter() - t0,
        }

    def memory_records(self) -> list[dict[str, Any]]:
        """The stacks' memory of a run at the present capacity, one record per (loop, device) in the
        terms of ``memory_report`` (``FastPartitionedBackend.memory_records``): every device allocates
        every stack whole (``stack_capacity`` entries, zeroed at the start of each run), so what each
        holds is the buffers' size, whatever the trip count; a swapping loop's value buffers in host
        memory (``host_bytes``), their index records and the other stacks on the device. No chunk
        moves between calls: the program is one call. Made once per capacity (runs read it after
        every call)."""
        kept = self._memory_rows.get(self.last_capacity)
        if kept is not None:
            return kept
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for sid in sorted(self.stacks):
            info = self.stack_info[state_key(sid)]
            on_device, on_host = self._stack_bytes(sid, self.last_capacity)
            for d in self.devices:
                r = rows.setdefault((info.loop, d), memory_row(info.loop, parse(d).short, info.swap))
                r["stacks"] += 1
                r["device_bytes"] += on_device
                r["peak_device_bytes"] += on_device
                r["host_bytes"] += on_host
        kept = self._memory_rows[self.last_capacity] = list(rows.values())
        return kept

    def _stack_bytes(self, sid: int, capacity: int) -> tuple[int, int]:
        """The bytes stack ``sid`` holds on each device at ``capacity`` entries, and in its host memory:
        a swapping loop's value buffer in host memory and its index record on the device, any other
        stack whole on the device."""
        dtype, elem, index = self.stacks[sid]
        both = stack_bytes(capacity, dtype, (elem, index))
        if not self.stack_info[state_key(sid)].swap:
            return both, 0
        values = stack_bytes(capacity, dtype, (elem, index), record=False)
        return both - values, values

    def _traced(self, tl: Timeline, start: float, compiled: bool) -> None:
        """A traced call of the program: one span on every mesh device's track (each runs the whole
        program, in lockstep), measured from its call to its error words read back."""
        end = tl.now()
        for d in self.devices:
            tl.ran(device_track(d), f"SPMD program over {len(self.devices)} devices", start, end, compiled=compiled)

    def _owners_view(self, spec: CallSpec, out: dict[Any, Any], flags: Any) -> tuple[dict[Key, Any], dict[Key, Any]]:
        """The fetches as their owner devices hold them, with the owners' live flags, for the one
        reader of every run's fetches (``fast.host_env.fetched``): a constant of the trace as a copy
        (``DEAD`` where the trace found it dead), else the owner device's copy (only that shard comes
        to the host) and its flag."""
        vals: dict[Key, Any] = {}
        lives: dict[Key, Any] = {}
        for t in self.fetches:
            k, owner = key(t), self.loc.get(t.node.id, 0)
            if k in spec.static:
                vals[k] = DEAD if spec.static[k] is DEAD else np.array(spec.static[k])
                continue
            vals[k] = np.asarray(MeshCopies(out[k], self.jax_devices[owner]))  # (only that shard is copied)
            if flags is not None and k in spec.live:
                lives[k] = np.asarray(flags)[owner, 1 + spec.live.index(k)]
        return vals, lives

    def _copies(self, name: str, variables: dict[str, np.ndarray]) -> MeshCopies:
        """Variable ``name``'s per-device copies a run starts from (one per mesh device, stacked on a
        leading axis; set to its initial value the first time): the last run's while the session still
        holds the entry that run left (``variable_store.cached_copy``), so that steady-state runs copy
        no weights from the host and read none back; otherwise the host value, copied to every device."""
        cached: Optional[MeshCopies] = cached_copy(self._dev_vars, name, start_entry(variables, self.var_nodes[name]))
        if cached is not None:
            return cached
        arr = np.asarray(variables[name])
        stacked = np.ascontiguousarray(np.broadcast_to(arr[None], (len(self.devices), *arr.shape)))
        with jax.enable_x64(True):  # as the program runs: a float64 Variable stays float64 on the devices
            return self._mesh_copies(name, jax.device_put(stacked, NamedSharding(self.mesh, P(AXIS))))

    def _mesh_copies(self, name: str, stacked: Any) -> MeshCopies:
        """Variable ``name``'s copies after a run, standing for its owner device's copy."""
        return MeshCopies(stacked, self.jax_devices[self.loc.get(self.var_nodes[name].id, 0)])


__all__ = ["AXIS", "MeshCopies", "SpmdPlan", "spmd_choice", "wants_whole_program"]
