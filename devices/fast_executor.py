"""The fast partitioned executor: ``tn.Session(graph, backend="fast", devices=[...])`` on JAX devices.

Why this shape. The graph is placed exactly as the partitioned reference executor places it
(``devices.placement.place``), so both run the same placement and the reference one is the oracle.
It is then raised once, unpartitioned, to the fast backend's region tree (``fast.functionalize``),
and the tree is cut by device (``devices.segments``). Cross-device values move with
``jax.device_put`` instead of Send/Recv nodes: inside one process a transfer is a copy between device
buffers, and a copy is what a Send/Recv pair would do.

A graph placed wholly on one device is simply the unpartitioned fast backend's program, and runs on
that backend with the device as JAX's default (``stats['tier'] == "one device"``,
``devices.one_device``: its lanes, device feeds and deferred Variables too). Otherwise three tiers,
tried in this order:

1. **Whole program**: ``turnout.devices.spmd.spmd_choice(graph, placement, fetches, fed)`` compiles a
   program whose every op lowers as ONE ``shard_map`` program, in which the devices run each spanning
   loop in lockstep. It is tried where lockstep costs nothing — every loop spanning devices has
   ``parallel_iterations == 1`` (``whole_program="auto"``, see ``wants_whole_program``; ``"always"`` and
   ``"never"`` force the choice) — and when it declines the run goes on below. A traced run takes
   the tier its untraced twin takes, so its trace shows how the run executes.
2. **Compiled regions**: a region (a loop, a cond, any straight-line run of ops) whose nodes all sit on
   one device is compiled whole by the fast backend's emitter and committed to that device. A loop
   inside one partition therefore stays one ``lax.while_loop`` with no host work per iteration.
3. **Host-driven regions**: a loop spanning devices runs per iteration as per-device *segments*, each a
   jitted function committed to its device. The host thread dispatches them asynchronously and reads
   back only what it must: a loop's predicate, a spanning cond's predicate. So device A starts iteration
   i+1 while device B still runs iteration i; the host bounds the iterations in flight by the loop's
   ``parallel_iterations``, waiting on iteration ``i - P``'s error words before dispatching iteration i.
   This host driver *is* the control-loop state machine of every partition of the frame: where the
   graph-level partitioner gives each device a control loop whose predicate arrives by Send/Recv, here
   the host "sends" the predicate by dispatching the next iteration's segments (or not). One thread with
   asynchronous dispatch suffices: executions on different devices run concurrently on their own.

Gradient stacks live in the device state of the device of their pushes (placement colocates every
StackPush and StackPop with its StackNew), as the fast backend's chunked stack buffers. Between the
segment calls of a host-driven loop, ``devices.swap.SpanningStacks`` moves a full chunk to host memory
(the loop's ``swap_memory=True``) or keeps it on its device and goes on in a new buffer, and brings
chunks back for the backward loop; ``device_memory_limit`` caps each device's stack bytes. A loop with
stacks on one device, outside the loops the host drives, is a segment of its own run chunk by chunk
(``devices.region_driver``), so its chunks move the same way. A stack that outgrows its chunk inside
one call (an inner loop compiled whole in a host-driven iteration) runs the program again with twice
the chunk (``stats['stack_capacity_retries']``). ``memory_records()`` reports the stack bytes per loop and
device of the last run. The SPMD tier keeps a swapping loop's stacks in host memory inside its program
and, under a ``device_memory_limit``, grows its stacks only as far as the limit lets every device
hold them (``SpmdPlan.room``): a run that outgrows that is left to the per-device tiers, which move
chunks between calls (or name the loop that crossed the limit).

What the fast path cannot run (``UnsupportedError`` while raising or tracing) runs on the partitioned
reference executor with a ``RuntimeWarning``, as the unpartitioned fast backend falls back to the
reference interpreter; ``fallback=False`` raises instead. ``stats['executor']`` and ``stats['tier']`` say
which ran. Errors keep the reference types: kernel failures come back in a per-device error word,
``max_iterations`` is counted by compiled loops and by the host driver alike, and ``max_firings`` (a
count of firings, which compiled code does not make) is rejected unless left at its default.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, Union

import jax
import numpy as np

from turnout.devices.jax_device import jax_device
from turnout.devices.names import DeviceSpec, canonical, parse
from turnout.devices.one_device import OneDevice
from turnout.devices.placement import Placement, Placer
from turnout.devices.plan_run import WHO, DevicePlan, PlanRun
from turnout.devices.segments import placed_schedule, steps_of
from turnout.devices.spmd import spmd_choice, wants_whole_program
from turnout.errors import ArgumentError, FeedError, PlacementError
from turnout.fast.emit import var_key
from turnout.fast.explain import fallback_schedule
from turnout.fast.functionalize import functionalize
from turnout.fast.guards import refuse_firing_budget
from turnout.fast.host_env import fetched
from turnout.fast.lane import Lane, write_variables
from turnout.fast.outcome import MAX_CAPACITY, Discard, Retry
from turnout.fast.regions import Key, Program, key, program_nodes
from turnout.fast.shell import BackendShell, retried
from turnout.fast.timeline import Timeline
from turnout.fast_options import FastOptions, fast_options
from turnout.graph import Graph, Tensor
from turnout.run_schedule import RunSchedule
from turnout.run_schedule import Step as RunStep
from turnout.session import RunOptions, RunResult
from turnout.slot_sizes import SlotPlan

#: when a plan dispatches its segments from per-device threads: ``"auto"``, when a segment holds a host
#: callback (``devices.plan_run.HOST_CALLBACK_OPS``); ``"always"``, every plan with segments (to test that dispatch)
THREADS = ("auto", "always")


class FastPartitionedBackend(BackendShell):
    """``tn.Session(graph, backend="fast", devices=[...])``: place the graph, compile what sits on one
    device, drive from the host what spans devices (see the module docstring).

    Options: ``devices`` (names, at least one; each must be a JAX device of this process), ``requests``
    (soft placement, as for the reference partitioned executor), ``allow_soft_placement`` (as for the
    reference partitioned executor: a colocation conflict or an absent device resolved by the rules of
    ``devices.placement``), and of the fast backend's
    ``FastOptions`` (``options=`` or keywords, as for ``backend="fast"``) those of ``PARTITIONED_FIELDS``:
    ``stack_chunk`` (gradient stack capacity per chunk, default 1024), ``host_stack_limit`` (as for
    ``backend="fast"``: the entries a swapping loop's stacks may hold in host memory inside the
    one-device tier's fused call, the only tier with one), ``fallback`` (default True: run
    on the partitioned reference executor what cannot be compiled, with a RuntimeWarning; False raises
    the UnsupportedError),
    ``whole_program`` (``"auto"``, ``"always"`` or ``"never"``: when the SPMD tier runs, see
    ``wants_whole_program``), ``device_memory_limit`` (bytes of gradient stacks a run may hold on each
    device, as for the one-device fast backend; crossing it is ``ResourceExhaustedError`` naming the
    loop), ``threads`` (``"auto"``, default: a plan dispatches its segments from per-device threads when
    one holds a host callback; ``"always"``: every plan does, see ``THREADS``), and ``order`` / ``seed``,
    passed to the partitioned reference executor when it runs.

    Memory budgets (``RunOptions.memory_budget`` and a loop's own on its stacks) bound what each
    device's gradient stacks hold, counted by that device's ``ChunkStore`` as the one-device backend
    counts its own (``turnout.memory_plan``: a loop the plan swaps is swapped); a run that would go
    over stops with ``ResourceExhaustedError`` naming the loop and the device. A graph on one device
    takes the one-device backend's budget handling; a budget passes over the SPMD tier, which never
    moves a stack chunk (under a ``device_memory_limit`` it runs what fits, ``SpmdPlan.room``).
    """

    #: runs honour memory budgets, per device (each device's chunk store counts its stack buffers)
    memory_budgets = True
    WHO = WHO
    FALLBACK_TO = "the partitioned reference executor"
    FALLBACK_STATS = {"executor": "partitioned reference executor (fallback)", "tier": "reference"}

    def __init__(self, graph: Graph, devices: Sequence[str | DeviceSpec] = (),
                 requests: Optional[dict[str, str]] = None, order: str = "round_robin", seed: int = 0,
                 whole_program: str = "auto", threads: str = "auto", options: Optional[FastOptions] = None,
                 allow_soft_placement: bool = False, **fields: Any) -> None:
        # only ``PARTITIONED_FIELDS`` of the options may differ from their defaults: the per-device
        # tiers honour no other
        super().__init__(graph, fast_options(options, fields, "FastPartitionedBackend"))
        other = [f for f in dataclasses.fields(FastOptions)
                 if f.name not in PARTITIONED_FIELDS and getattr(self.options, f.name) != f.default]
        if other:
            raise ArgumentError(f"FastPartitionedBackend: {other[0].name} is an option of backend='fast' without "
                                f"devices; with devices=[...] the options are {list(PARTITIONED_FIELDS)}")
        if whole_program not in WHOLE_PROGRAM:
            raise ArgumentError(f"whole_program must be one of {list(WHOLE_PROGRAM)}, got {whole_program!r}")
        if not isinstance(threads, str) or threads not in THREADS:
            raise ArgumentError(f"threads must be one of {list(THREADS)}, got {threads!r}")
        if not isinstance(allow_soft_placement, bool):
            raise ArgumentError(f"allow_soft_placement must be True or False, got {allow_soft_placement!r}")
        self.threads = threads
        self.requests = dict(requests or {})
        self.allow_soft_placement = allow_soft_placement
        self.whole_program = whole_program
        self.order = order
        self.seed = seed
        if not devices:
            raise PlacementError("the fast partitioned executor needs at least one device (devices=[...])")
        self.devices = [canonical(d) for d in devices]
        self.jax_devices = {d: jax_device(d) for d in self.devices}
        self.placer = Placer(graph, self.devices, self.requests, allow_soft_placement)
        self._plans: dict[Any, DevicePlan] = {}
        #: the whole-program (SPMD) plan per run signature, None where the program is not eligible
        self._whole: dict[Any, Any] = {}
        #: why the SPMD tier was not tried although ``whole_program`` asked for it (``spmd_choice``)
        self._whole_declined: dict[Any, str] = {}
        #: the unpartitioned fast backend, for graphs placed wholly on one device (``devices.one_device``)
        self._single = OneDevice(graph, self.options, self.jax_devices)
        self._single_ran = False  # the last run was the one-device tier's
        #: ``session.variables``: the one-device backend's store, on every tier (Variables a one-device
        #: run wrote stay on its device until read)
        self.variable_store = self._single.variable_store
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self.placement  # noqa: B018 - unknown devices and conflicts are reported when the Session is made

    def pools(self) -> dict[str, ThreadPoolExecutor]:
        """One single-thread worker per device, made on first use, for plans whose segments run host
        callbacks (see ``devices.plan_run.HOST_CALLBACK_OPS``); ``close()`` stops them."""
        if not self._pools:
            self._pools = {d: ThreadPoolExecutor(1, thread_name_prefix=f"turnout-{parse(d).short}")
                           for d in self.devices}
        return self._pools

    def close(self) -> None:
        """Stop the per-device workers (``Session.close`` calls this)."""
        for p in self._pools.values():
            p.shutdown(wait=True)
        self._pools = {}

    @property
    def placement(self) -> Placement:
        """The placement of the current graph version (the partitioned reference executor's rules)."""
        return self.placer()

    def memory_records(self) -> list[dict[str, Any]]:
        """Gradient stack memory of the last run, one record per (loop, device): ``device_bytes`` (held
        when the forward loop ended), ``peak_device_bytes``, ``host_bytes`` (held in host memory then),
        ``chunks_to_host``, ``chunks_from_host`` and ``chunks_kept_on_device`` (see ``devices.swap``)."""
        return self._single.backend.memory_records() if self._single_ran else super().memory_records()

    def explain(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
                memory_budget: Optional[int] = None) -> RunSchedule:
        """How a run of ``fetches`` executes (``Session.explain``), read from the plans the run would
        take, with nothing compiled: the one-device backend's schedule on a graph placed on one
        device, the SPMD program where that tier takes the run, else the per-device segments with the
        loops and conds the host drives (``devices.segments.steps_of``). ``memory_budget``: the run's
        (the SPMD program runs what it lets every device hold)."""
        placement, used = self.placer.placed()
        if len(used) == 1:
            (device,) = used
            inner = self._single.explain(device, fetches, feeds, variables, memory_budget)
            step = RunStep("one device", "every node is placed here: the one-device fast backend's schedule",
                        parse(device).short, (*inner.steps, *inner.otherwise))
            return RunSchedule("fast (partitioned)", (step,), notes=inner.notes)
        sig = self._run_signature(fetches, feeds, variables)
        if sig in self._fallback:
            return fallback_schedule(self._fallback[sig], "fast (partitioned)", "the partitioned reference executor")
        whole = self._whole_program(sig, placement, fetches, feeds)
        with jax.enable_x64(True):
            plan = self._plan(sig, fetches, feeds, self.options.stack_chunk)
        per_device = steps_of(plan)
        notes: tuple[str, ...] = ((f"the SPMD tier declined: {self._whole_declined[sig]}",)
                                  if sig in self._whole_declined else ())
        slots = plan.slots if whole is None else self._slot_plan(fetches, feeds, whole.program, whole.stack_capacity)
        notes += self._learnt_notes(sig, fetches, feeds, slots)
        room = None if whole is None else self._budget_room(whole, sig, fetches, feeds, memory_budget, slots)
        if self._budgeted(memory_budget):
            held = ("" if whole is None or room is None else
                    f"; the SPMD program holds the {room} entries a stack it lets every device hold, and a run "
                    "that needs more takes the per-device steps" if room >= 1 else
                    "; it holds no entry of the SPMD program's stacks on one device: the per-device steps run")
            notes += ("a memory budget applies: each device's gradient stacks are counted against it" + held,)
            whole = whole if room is None or room >= 1 else None
        if whole is not None:
            over = ", ".join(parse(d).short for d in sorted(used))
            spmd = RunStep("spmd program", f"one shard_map program over {over}, spanning loops in lockstep")
            if self.options.device_memory_limit is not None and whole.stacks:
                notes += (f"device_memory_limit={self.options.device_memory_limit} lets the SPMD program hold "
                          f"{whole.room} entries a stack on each device; a run that needs more takes the "
                          "per-device steps",)
            return RunSchedule("fast (partitioned)", (spmd,), per_device, notes)
        return RunSchedule("fast (partitioned)", per_device, notes=notes)

    def _graph_stamp(self) -> int:
        """``version``, not ``edits``: the placement is made per graph version (``Placer``)."""
        return self.graph.version

    # ---- run --------------------------------------------------------------------------------------
    def run(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
            options: RunOptions) -> RunResult:
        """One ``Session.run``: the whole-program tier if available, else compiled and host-driven
        segments, each specialised on the fed values that decide shapes (``_run_specialised``), else
        (fallback) the partitioned reference executor."""
        refuse_firing_budget("fast partitioned executor", options)
        used = self.placer.used()
        if len(used) == 1:
            self._single_ran = True
            return self._single.run(next(iter(used)), fetches, feeds, variables, options)
        self._single_ran = False
        return self._run_or_fall_back(self._run_signature(fetches, feeds, variables), self._run_tiers, fetches, feeds,
                                      variables, options)

    def _run_tiers(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                   variables: dict[str, np.ndarray], options: RunOptions) -> RunResult:
        """A compiled run, specialised as its signature needs (``fast.shell``), on the SPMD tier or the
        per-device tiers (``_compile_run``)."""
        result = self._run_specialised(sig, fetches, feeds, variables, options)
        if self.slot_sizes.needs:  # (a recomputed loop needed more slots: later plans give it more)
            self.slot_sizes.take()
        if self._whole_declined.get(sig):
            result.stats["whole_program_declined"] = self._whole_declined[sig]
        return result

    def _compile_run(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                     variables: dict[str, np.ndarray], options: RunOptions, static: dict[Key, np.ndarray]
                     ) -> RunResult:
        """The run as one SPMD program where that tier takes it, else on the per-device tiers, each
        specialised on ``static`` (``NeedsStatic`` goes on to the shell's specialisation)."""
        whole = self._run_whole(sig, fetches, feeds, variables, options, static)
        if isinstance(whole, RunResult):
            return whole
        result = self._run_compiled(sig, fetches, feeds, variables, options, static)
        if whole:  # (this run outgrew the SPMD program: say so in its stats)
            result.stats["whole_program_declined"] = whole
        return result

    def _run_whole(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
                   options: RunOptions, static: dict[Key, np.ndarray]) -> Union[RunResult, str]:
        """The run as one SPMD program (``devices.spmd``), specialised on ``static`` as the other tiers
        are; else why this run is left to the per-device tiers: empty where the tier is absent,
        declines the program, or finds while tracing an op that does not lower inside one
        multi-device program (before anything ran: this signature no longer tries the tier), or the
        run's stacks outgrew what the ``device_memory_limit`` or the memory budgets let the program
        hold (its ``Discard``; the next run tries the tier again). ``NeedsStatic`` goes on to the
        specialisation loop (``BackendShell._specialised``)."""
        placement = self.placer()
        whole = self._whole_program(sig, placement, fetches, feeds)
        if whole is None:
            return ""
        slots = self._slot_plan(fetches, feeds, whole.program, whole.stack_capacity)
        room = self._budget_room(whole, sig, fetches, feeds, options.memory_budget, slots, static)
        limits = "the memory budgets" if room is not None and room < whole.room else \
            f"device_memory_limit={self.options.device_memory_limit}"
        if room is not None and room < 1:
            return "the memory budgets hold no entry of the stacks on one device (with the checkpoint slots)"
        result = whole.run(feeds, variables, options, static, slots=slots, room=room)
        if isinstance(result, Discard) and result.refused:
            self._whole[sig] = None
            self._whole_declined[sig] = result.refused
            return ""
        if isinstance(result, Discard):
            return (f"this run's stacks outgrew the {min(whole.room, room or MAX_CAPACITY)} entries a stack that "
                    f"{limits} let the SPMD program hold on each device")
        result.stats.setdefault("executor", "fast partitioned")
        result.stats.setdefault("tier", "spmd")
        self._records = whole.memory_records()
        return result

    def _budget_room(self, whole: Any, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                     run_budget: Optional[int], slots: SlotPlan, static: Optional[dict[Key, np.ndarray]] = None
                     ) -> Optional[int]:
        """The entries a stack of the SPMD program ``whole`` may hold under a run's memory budgets and
        the loops' own (``SpmdPlan.budget_room``, with the checkpoint ``slots``); None: none apply."""
        if not self._budgeted(run_budget):
            return None
        with jax.enable_x64(True):
            budgets = self._plan(sig, fetches, feeds, self.options.stack_chunk, static).budget(run_budget)
        return MAX_CAPACITY if budgets is None else int(whole.budget_room(budgets, slots.bytes()))

    def lane_for(self, fetches: list[Tensor], feeds: dict[Tensor, Any], given: dict[Any, Any],
                 ops: Optional[list[bool]] = None) -> Optional[Lane]:
        """After a ``Session.run``: where the run was the one-device tier's, that backend's lane for
        repeating it, on the graph's device (``devices.one_device``); else None (the other tiers'
        runs are not repeated by a lane)."""
        return self._single.lane_for(fetches, feeds, given, ops) if self._single_ran else None

    def memory_platform(self) -> str:
        """The platform whose memory the stacks use, which ``turnout.memory_plan`` plans for:
        ``FastOptions.memory_platform`` where given, else that of the first of the backend's devices
        (the mesh is of one kind: ``devices.spmd`` refuses mixed kinds)."""
        return self.options.memory_platform or str(self.jax_devices[self.devices[0]].platform)

    def device_feed(self, value: Any) -> Any:
        """A fed ``jax.Array`` the session passes as it is: where the graph is placed on one device,
        as that tier's backend takes it (on that device); else None (read through numpy)."""
        used = self.placer.used()
        return self._single.device_feed(next(iter(used)), value) if len(used) == 1 else None

    def _whole_program(self, sig: Any, placement: Placement, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> Any:
        """The whole-program tier's plan for this run signature, made once (its traces are cached in it),
        or None where the tier is absent or the program is not eligible."""
        if sig not in self._whole:
            wanted = wants_whole_program(self.whole_program, self.graph, placement)
            got = (spmd_choice(self.graph, placement, fetches, list(feeds),
                               device_memory_limit=self.options.device_memory_limit) if wanted else None)
            if isinstance(got, str):
                self._whole_declined[sig] = got
            self._whole[sig] = None if got is None or isinstance(got, str) else got
        return self._whole[sig]

    def _reference_executor(self) -> Any:
        from turnout.devices.executor import PartitionedBackend

        return PartitionedBackend(self.graph, self.devices, self.requests, self.order, self.seed,
                                  self.allow_soft_placement)

    def _plan(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any], cap: int,
              static: Optional[dict[Key, np.ndarray]] = None) -> DevicePlan:
        """The plan of run signature ``sig`` at stack chunk ``cap``, specialised on the fed values
        ``static`` (``fast.specialise``), made once."""
        static = static or {}
        pkey = self._plan_key(sig, fetches, feeds, cap, static)
        plan = self._plans.get(pkey)
        if plan is None:
            fa = self._validate(fetches, feeds)
            for t in feeds:
                if fa.node_frame.get(t.node.id, ()) != ():
                    raise FeedError(f"cannot feed {t.name}: it is inside a loop frame; feed root-frame tensors only")
            program = functionalize(self.graph, fetches, feeds)
            fed = {t.node.id for t in feeds}
            device_of = self.placement.device_of
            sched = placed_schedule(program, device_of, fed)
            plan = self._plans[pkey] = DevicePlan(self, program, sched, fed, cap, device_of, self.threads,
                                                  self.memory_platform(),
                                                  static, slots=self._slot_plan(fetches, feeds, program, cap))
        return plan

    def _slot_plan(self, fetches: list[Tensor], feeds: dict[Tensor, Any], program: Program, capacity: int) -> SlotPlan:
        """The checkpoint slots a plan of ``program`` (the per-device tiers' or the SPMD program's)
        gives its recomputed loops at stack capacity ``capacity``: what this program's runs taught
        (``turnout.slot_sizes``), the one rule of every fast backend."""
        return self.slot_sizes.plan(self._program_key(fetches, feeds), program_nodes(program), capacity)

    def _run_compiled(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                      variables: dict[str, np.ndarray], options: RunOptions,
                      static: dict[Key, np.ndarray]) -> RunResult:
        cap, _ = self._budgeted_chunk(options.memory_budget, lambda c: self._plan(sig, fetches, feeds, c, static))
        t0 = time.perf_counter()
        tl = Timeline() if options.trace else None  # (the attempts of a run retried record on one timeline)
        compiles = self.compile_count

        def run_at(cap: int) -> tuple[DevicePlan, dict[str, np.ndarray], list[Any], PlanRun] | Retry:
            plan = self._plan(sig, fetches, feeds, cap, static)
            scratch = dict(variables)  # (dropped where the run ends in a ``Retry``)
            values, run = self._run_plan(plan, fetches, feeds, scratch, options, tl)
            return run.retry if run.retry is not None else (plan, scratch, values, run)

        (plan, scratch, values, run), cap, retries = retried(cap, run_at)
        if tl is not None:
            tl.finished(self.compile_count - compiles)
        variables.update(scratch)
        sched = plan.schedule
        self._records = run.stacks.records()
        tier = "host-driven" if sched.host_loops or sched.host_conds else "compiled"
        stats = {
            "backend": "fast", "executor": "fast partitioned", "tier": tier,
            "devices": list(self.devices), "segments": len(sched.segments),
            "segments_per_device": {d: sum(1 for s in sched.segments if s.device == d) for d in self.devices},
            "compiled_loops": sched.compiled_loops, "host_loops": len(sched.host_loops),
            "host_conds": len(sched.host_conds), "host_iterations": dict(run.host_iterations),
            "compiles": self.compile_count, "stack_capacity": cap, "stack_capacity_retries": retries,
            **run.stacks.stats(), **_slot_counts(plan.slots), "seconds": time.perf_counter() - t0,
        }
        return RunResult(values=values, trace=run.tl, stats=stats)

    def _run_plan(self, plan: DevicePlan, fetches: list[Tensor], feeds: dict[Tensor, Any],
                  variables: dict[str, np.ndarray], options: RunOptions,
                  tl: Optional[Timeline]) -> tuple[list[Any], PlanRun]:
        """One run of ``plan``: the fetched values and the run; no values where the run ended in a
        ``Retry`` (``run.retry``: nothing of it is kept, and ``variables``, the caller's scratch copy,
        is dropped)."""
        run = PlanRun(self, plan, variables, options, tl)
        device_of = self.placement.device_of
        env = run.run(plan.schedule.steps, [(key(t), v, device_of[t.node.id]) for t, v in feeds.items()])
        if env is None:
            return [], run
        values = fetched(fetches, env.vals, run.lives)
        names = [n for n in plan.written_vars if n is not None and n in plan.var_device]
        write_variables(tuple((n, True, None) for n in names),
                        [run.state[plan.var_device[n]][var_key(n)] for n in names], values, variables, {})
        return values, run


#: when the whole-program (SPMD) tier runs a program it accepts
WHOLE_PROGRAM = ("auto", "always", "never")
#: the fields of ``FastOptions`` the partitioned backend honours on every tier
PARTITIONED_FIELDS = ("stack_chunk", "fallback", "device_memory_limit", "host_stack_limit", "memory_platform")


def _slot_counts(slots: SlotPlan) -> dict[str, Any]:
    """A run's stats of its checkpoint slots: per loop, how many its plan gave (``checkpoint_slots``;
    their bytes per device are the stacks' stats, ``checkpoint_bytes``)."""
    return {"checkpoint_slots": slots.counts} if slots.nodes else {}


__all__ = ["FastPartitionedBackend"]
