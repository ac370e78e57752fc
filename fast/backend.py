"""``FastBackend``: ``tn.Session(graph, backend="fast")``.

One execution model. A run signature (graph edits, fetches, feed signature, Variables' types, stack
capacity) has a ``Plan`` (``fast.plan``): the root frame cut into **stages** (``fast.cut``, the one
cut of every placement, here for one device) — compiled segments, and *driven loops* (top-level loops
that push or pop gradient stacks, compiled to run at most a chunk of iterations per call and
re-entered by the host, which hands full stack chunks to a ``stacks.ChunkStore``: to host memory for
a loop with ``swap_memory=True``, kept on the device otherwise). The one runner of the compiled side
(``fast.runner``, ``StagedStages._run_stages``) runs the stages in order and the run finishes
(fetches to the host, Variables written back, the stack buffers kept for the next run). Everything
else is a property of the plan that shortens the route through the same model:

- ``Plan.fused``: a plan with driven loops also has its whole root frame as ONE stage, every loop a
  plain ``lax`` loop. A run attempts it first (``FusedAttempts._attempt``: one call), on a
  ladder of stack capacities (``fast.fused_attempts``: 128, 256, 512 entries, then ``stack_chunk``,
  by default; ``FastOptions.stack_first_rung`` and ``stack_rung_ratio`` set the rungs); an attempt
  that outgrows its stacks stops (the error word's ``overflow``), is discarded and the stages run.
  Why: the stages cost a few jitted calls and Python driving per run (2 to 3 ms for a small LSTM
  step), which dominates small models. A run right after one that swapped chunks skips the attempt.
- ``Plan.direct_ok``: a plan of one compiled segment without gradient stacks is called through
  ``Direct`` (``fast.direct_call``: flat tuples in and out, the error word and live flags in one
  read-back), and a repeated run of it is recognised by its fetches and feed signature alone: a
  small program's run is the jitted call and little else (``benchmarks/run_overhead.py``).

A repeated run (the last run's fetches and feed signature, the graph and the Variables unchanged)
skips the general path's signature, plan lookup and accounting: its *lane* calls the ``Direct``
function, or the fused attempt on the rung that held the last run, with the arguments the last run
left. A lane is that route's work written out once for the run's signature (``fast.lane``); the
backend calls it after the session's feed checks, and the session calls it before them where the
feeds need none. The routes live in ``fast.repeat``; the rules every route applies alike (the
iteration bound, the refused firing budget, XLA's out-of-memory) in ``fast.guards``; the session's
Variables, which stay on the device until read, in ``fast.variable_store``.

Each compiled function is compiled by the first run that needs it: a plan whose loops fit never
compiles its stages (``precompile_staged=True`` compiles them up front), a rung of the ladder is
compiled by the first run that climbs to it. Plans are cached per signature; new fed values and new
trip counts never recompile what was compiled, and ``compile_count`` counts traces, for tests. A fed
value that decides a shape (``lowering.NeedsStatic``, returned as the outcome ``Specialise``)
specialises the plan on that value.

The backend is built in layers, one job each: what every run starts from and leaves
(``fast.run_state``), the ``Direct`` call (``fast.direct_call``), the fused attempt on its ladder
(``fast.fused_attempts``), and here the plans, the stages and the choices between routes. The steps
that choose return values, not exceptions: a compile's ``Specialise``, an attempt's ``Discard``, an
error word's outcome (``fast.outcome``), and the thread a run takes (``_thread_nesting``), decided
before it starts.

How device partitions plug in: the fast partitioned executor (``turnout.devices.fast_executor``) runs
a graph placed on one device as this backend, and otherwise cuts the unpartitioned region tree by
device and compiles each device's regions with the same ``Emitter``; a cluster task runs a partition
that sends and receives nothing as this backend, whole (``turnout.devices.compiled_partition``), and
fuses the arithmetic of the others with the lowering rules. Both reuse this module's plan pieces
(``fast.plan``: stack shapes, Variables written) rather than a second model.

Errors keep the reference backend's types: kernel failures detected in compiled code (integer division
by zero, out-of-range TensorArray reads) are recorded in an error word and raised as ``KernelError``
after the stage; ``RunOptions.max_iterations`` is enforced by the compiled loops' iteration counters
(``NonTerminationError``); a fetch whose branch did not run raises ``DeadFetchError``; a program that
cannot be compiled runs on the reference interpreter (``fallback``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import numpy as np

from turnout.errors import UnsupportedError
from turnout.fast import stacks as stk
from turnout.fast.deep import DEEP_NESTING, call_deep, on_deep_thread
from turnout.fast.explain import fallback_schedule, plan_schedule
from turnout.fast.functionalize import functionalize
from turnout.fast.guards import iteration_bound, refuse_firing_budget
from turnout.fast.lane import Lane, holds_wide
from turnout.fast.outcome import Retry
from turnout.fast.plan import Direct, Plan
from turnout.fast.regions import Key
from turnout.fast.repeat import HotFused, Repeats
from turnout.fast.run_state import WHO
from turnout.fast.shell import retried
from turnout.fast.specialise import NOTHING, static_signature
from turnout.fast.staged_stages import StagedStages
from turnout.fast.timeline import Timeline
from turnout.fast.variable_store import DeviceVariables
from turnout.fast_options import FastOptions, fast_options
from turnout.graph import Graph, Tensor
from turnout.memory_plan import MemoryPlan, swapped_loops
from turnout.run_schedule import RunSchedule
from turnout.session import RunResult
from turnout.validate import frame_analysis


class FastBackend(StagedStages):
    """The JAX executor. Its options are one ``FastOptions`` value (``turnout.fast_options``), given
    as ``options=`` or as keywords naming its fields, and kept as ``self.options``: ``stack_chunk``,
    ``keep_stack_buffers``, ``fallback``, ``device_memory_limit``, ``precompile_staged``,
    ``stack_ladder``, and the tuning fields ``inside_stack_bytes``, ``frame_height`` and
    ``gpu_command_buffers`` (``FastOptions`` says what each does, ``docs/fast_backend.rst`` why)."""

    #: runs honour ``RunOptions.memory_budget`` (``turnout.memory_plan``)
    memory_budgets = True
    WHO = WHO
    FALLBACK_TO = "the reference interpreter"
    FALLBACK_STATS = {"backend": "fast", "executor": "reference interpreter (fallback)"}

    def __init__(self, graph: Graph, options: Optional[FastOptions] = None, **fields: Any) -> None:
        super().__init__(graph, fast_options(options, fields))
        self._static_now: dict[Key, np.ndarray] = {}  # the values a plan is specialised on, in the run being planned
        self._home: Any = None  # the device fed jax.Arrays are placed on (``device_feed``), found once
        self._plans: dict[Any, Plan] = {}
        # name -> (the session's entry for the Variable, its device copy): the copy a run starts from
        # while the entry is still the one it stands for (``_device_var``)
        self._dev_vars: dict[str, tuple[Any, Any]] = {}
        #: ``session.variables``: a run's new values stay on the device until read (``fast.variable_store``)
        self.variable_store = DeviceVariables(graph)
        #: whether a run starts its read-backs together (``fast.values.start_reads``): off on the CPU,
        #: where device arrays are host memory already
        self.overlap_reads = jax.devices()[0].platform != "cpu"
        self._direct: dict[Any, Direct] = {}
        #: the routes of repeated runs and the lanes that run them (``fast.repeat``)
        self.repeats = Repeats(self)
        # (plan, rung) of the last kept fused attempt: set by every run whose result is fused, which
        # is the only kind of run that reads it (``_run_any``)
        self._last_fused: Optional[tuple[Plan, Plan]] = None
        self._stack_bufs: dict[int, dict[str, stk.StackValue]] = {}
        self._timeline: Optional[Timeline] = None  # the trace of the run in progress (trace=True)
        self._deep_nesting = 0  # the deepest nesting past DEEP_NESTING of a plan made (lanes read it)
        #: program (``_program_key``) -> how deep its regions nest, recorded by its first plan
        self._nestings: dict[Any, int] = {}
        self._nesting_cache: Optional[tuple[int, int]] = None  # (graph version, _nesting_bound)
        self._checked_version = -1  # the graph version whose validation the last run saw pass

    def run(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
            options: Any) -> Any:
        """One ``Session.run``. Programs whose regions nest deeper than ``deep.DEEP_NESTING`` run on
        a thread with a large stack (``deep.call_deep``): tracing them recurses once per level."""
        refuse_firing_budget("fast backend", options)
        if options.trace:
            return self._run_traced(fetches, feeds, variables, options)
        # (a run budget is checked on the general path: a repeated run's lane checks nothing)
        hot = self.repeats.recognise(fetches, feeds, variables) if options.memory_budget is None else None
        if hot is not None:  # a repeated run, by its route's lane (no deep stack needed to call it)
            result = self.repeats.run_hot(hot, fetches, feeds, variables, options)
            if result is not None:
                return result
        nesting = self._thread_nesting(fetches, feeds)
        if nesting:
            result = call_deep(self._run_any, fetches, feeds, variables, options, nesting=nesting)
        else:
            result = self._run_any(fetches, feeds, variables, options)
        result.stats.setdefault("route", "general")
        if self.slot_sizes.needs:  # (a recomputed loop needed more slots than its plan gave it)
            self._slots_learnt(self.slot_sizes.take())
        return result

    def _slots_learnt(self, grown: set[Any]) -> None:
        """After a run that learnt that programs ``grown`` need more checkpoint slots: their plans are
        made again by their next runs (the slot capacity is in a plan's key, ``_plan``), so their
        ``Direct`` calls, which a run would find first, are dropped."""
        self._direct = {k: d for k, d in self._direct.items() if d.plan.program_key not in grown}

    def explain(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
                memory_budget: Optional[int] = None) -> RunSchedule:
        """How a run of ``fetches`` with ``feeds``' signature executes (``Session.explain``): the plan
        the run would take, read by ``fast.explain.plan_schedule``, at the stack chunk a memory budget
        gives (``memory_budget``: the run's). Planning is what a first run does before it compiles;
        nothing is compiled or run here."""
        dsig = self._run_signature(fetches, feeds, variables)
        if dsig in self._fallback:
            return fallback_schedule(self._fallback[dsig])
        self._validate(fetches, feeds)
        self._static_now = {}
        try:
            nesting = self._thread_nesting(fetches, feeds)
            def planned() -> tuple[Plan, Optional[MemoryPlan]]:
                cap, budget = self._budgeted_chunk(memory_budget, lambda c: self._plan(fetches, feeds, variables, c))
                return self._plan(fetches, feeds, variables, cap, swapped_loops(budget)), budget

            with jax.enable_x64(True):
                plan, budget = call_deep(planned, nesting=nesting) if nesting else planned()
        except UnsupportedError as e:
            return fallback_schedule(str(e))
        lane = memory_budget is None and self._static_keys.get(dsig, NOTHING) == NOTHING
        schedule = plan_schedule(plan, self._ladder(plan), lane=lane)
        learnt = self._learnt_notes(dsig, fetches, feeds, plan.slots)
        return dataclasses.replace(schedule, notes=schedule.notes + learnt) if learnt else schedule

    def device_feed(self, value: Any) -> Any:
        """A fed array the session passes to this backend as it is (``Session._check_feed``, for an
        array of exactly its tensor's dtype): a ``jax.Array``, on the device the backend's own arrays
        go to (JAX's default device; a copy for one that lies elsewhere, which a compiled call could
        not take beside the Variables and stacks). ``None`` for any other value: the session reads it
        through numpy, with every check."""
        if not isinstance(value, jax.Array):
            return None
        home = self._home_device()
        return value if value.devices() == {home} else jax.device_put(value, home)

    def _home_device(self) -> Any:
        """The device the backend's own arrays go to (JAX's default device), found once: where fed
        arrays are placed, and where a compiled call makes the stacks it makes inside itself."""
        if self._home is None:
            (self._home,) = jax.device_put(np.zeros((), np.int32)).devices()
        return self._home

    def lane_for(self, fetches: list[Tensor], feeds: dict[Tensor, Any], given: dict[Any, Any],
                 ops: Optional[list[bool]] = None) -> Optional[Lane]:
        """After a ``Session.run`` with default options: a lane (``fast.lane``) that repeats it for
        the cost of its compiled call, when the run was a ``Direct`` call whose feeds the session
        passed through unconverted (``given``: the user's feed dict); else ``None``. ``ops`` marks
        the fetches that stand for ops (not read back). Kept with the other repeated-run routes
        (``fast.repeat``)."""
        return self.repeats.lane_for(fetches, feeds, given, ops)

    def _run_traced(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
                    options: Any) -> Any:
        """A run that records its timeline (``fast.timeline``): the same run, with each compiled call
        waited for so that its span covers its device time."""
        tl = self._timeline = Timeline()
        untraced = dataclasses.replace(options, trace=False)
        before = self.compile_count
        try:
            result = self.run(fetches, feeds, variables, untraced)
        finally:
            self._timeline = None
            tl.close()  # (every call of one device is waited for; this settles any span left to a watcher)
        tl.finished(self.compile_count - before)
        result.trace = tl
        return result

    def _run_any(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
                 options: Any) -> Any:
        if self.graph.version != self._checked_version:
            # nodes were appended: the plans stay valid (they are keyed on ``edits``), but the graph as a
            # whole must still pass validation, as it must on every backend (a node appended since can
            # make it ill-formed)
            self._validate(fetches, feeds)
            self._checked_version = self.graph.version
        dsig = self._run_signature(fetches, feeds, variables)
        return self._run_or_fall_back(dsig, self._run_specialised, fetches, feeds, variables, options)

    def _run_specialised(self, dsig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                         variables: dict[str, np.ndarray], options: Any) -> RunResult:
        """A compiled run: straight to its ``Direct`` call where it has one (the common repeated run),
        else specialised as its signature needs (``fast.shell``), the route its repeats take
        remembered (``_remember_route``)."""
        d = self._direct.get(dsig) if dsig not in self._static_keys else None
        if d is not None:
            with jax.enable_x64(True):
                result = self._run_direct(d, fetches, feeds, variables, options)
            self.repeats.remember(d, fetches, feeds)
            return result
        result, values = self._specialised(dsig, fetches, feeds, variables, options)
        result.stats["executor"] = "compiled"
        if not self._static_keys.get(dsig, NOTHING).cut:  # (a run cut short first is two runs: no route repeats it)
            self._remember_route(_with_values(dsig, values), fetches, feeds, result)
        return result

    def _remember_route(self, dsig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any], result: RunResult) -> None:
        """After a compiled run of run signature ``dsig`` (with the values its plan is specialised on,
        where it is: a repeat with other values is handed back by the lane, which checks them): the
        route its repeats take (``fast.repeat``), its ``Direct`` call, or the fused attempt on the rung
        that held it, where its stacks were all kept."""
        d = self._direct.get(dsig)
        if d is not None:  # it ran on the Direct path
            self.repeats.remember(d, fetches, feeds)
        elif result.stats.get("fused") and self._last_fused is not None:
            top, rung = self._last_fused
            if rung.learn_stack_shapes():  # (a shape its pre-compile trace did not tell: the next run traces again)
                self.repeats.forget()
            elif all(sn.id in rung.prealloc for sn in rung.stack_nodes) and self.options.keep_stack_buffers:
                stats = {k: v for k, v in result.stats.items() if k not in ("compiles", "stage_seconds")}
                self.repeats.remember(HotFused(rung, top, stats, self.memory_records(), tuple(rung.var_nodes),
                                               holds_wide(list(feeds))), fetches, feeds)

    def _reference_executor(self) -> Any:
        from turnout.reference.executor import ReferenceBackend

        return ReferenceBackend(self.graph)

    def _compile_run(self, dsig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                     variables: dict[str, np.ndarray], options: Any, static: dict[Key, np.ndarray]) -> RunResult:
        """A run of run signature ``dsig`` on its plans specialised on ``static``, compiled by the
        first run that needs them: its ``Direct`` call, or its stages (and fused attempt) with the
        stacks sized again while they outgrow their chunk (``shell.retried``)."""
        self._static_now = static
        dsig = _with_values(dsig, static)
        d = self._direct.get(dsig)
        if d is None:
            self._validate(fetches, feeds)
            with jax.enable_x64(True):
                plan = self._plan(fetches, feeds, variables, self.options.stack_chunk)
            if plan.direct_ok:
                d = self._direct[dsig] = self._make_direct(plan, fetches, feeds)
        if d is not None:
            with jax.enable_x64(True):
                return self._run_direct(d, fetches, feeds, variables, options)
        self._validate(fetches, feeds)
        cap, budget = self._budgeted_chunk(options.memory_budget, lambda c: self._plan(fetches, feeds, variables, c))
        (values, stats), _, retries = retried(cap, lambda c: self._run(fetches, feeds, variables, options, c, budget))
        stats["stack_capacity_retries"] = retries
        return RunResult(values=values, stats=stats)

    def memory_platform(self) -> str:
        """The platform whose memory the stacks use (``jax.default_backend()``'s name for the backend's
        device, or ``FastOptions.memory_platform`` where given): what ``turnout.memory_plan`` plans for."""
        return self.options.memory_platform or str(self._home_device().platform)

    def _plan(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
              cap: int, swapped: frozenset[str] = frozenset()) -> Plan:
        """The plan of a run at stack capacity ``cap`` whose memory plan swaps the loops ``swapped``
        (their stacks in host memory in the fused stage: ``Plan.host``), made by the first run that
        needs it and kept."""
        sig = (*self._plan_key(self._run_signature(fetches, feeds, variables), fetches, feeds, cap, self._static_now),
               swapped)
        plan = self._plans.get(sig)
        if plan is None:  # (on the deep thread where the program may nest deeply: ``_thread_nesting``)
            pk = self._program_key(fetches, feeds)
            program = functionalize(self.graph, fetches, feeds)
            fed = {t.node.id for t in feeds}
            plan = self._plans[sig] = Plan(self, program, fed, cap, swapped, self.memory_platform)
            plan.static_feeds = dict(self._static_now)
            plan.program_key = pk
            plan.slots = self.slot_sizes.plan(pk, plan.slots.nodes, cap)
            self._nestings[pk] = plan.nesting
            if plan.nesting > DEEP_NESTING:
                self._deep_nesting = max(self._deep_nesting, plan.nesting)
        return plan

    def _thread_nesting(self, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> int:
        """The thread a run (or an ``explain``) takes, decided before it starts: the nesting to give
        ``deep.call_deep`` where its program may nest deeper than ``DEEP_NESTING``, else 0 (this
        thread). What is known of the program decides: the nesting its first plan recorded, or,
        before it has one, the graph's bound (``_nesting_bound``), which no program of the graph
        exceeds.

        Why decided first: making a plan and tracing it recurse once per level, and a run that learnt
        it only while planning, deep inside itself, could but be abandoned by an exception and started
        again on the deep thread."""
        if self._nesting_bound() <= DEEP_NESTING or on_deep_thread():
            return 0
        n = self._nestings.get(self._program_key(fetches, feeds), self._nesting_bound())
        return n if n > DEEP_NESTING else 0

    def _nesting_bound(self) -> int:
        """A bound on how deep the graph's regions can nest, found without raising them (which
        recurses per level): the deepest loop frame, plus every Switch that a ``LoopCond`` does not
        drive (each cond level needs one, each loop level a frame, so no program of the graph nests
        deeper). Why not every Switch and ``LoopCond``, as before: a loop
        has one Switch per loop variable, so eight nested loops of two variables counted 24, and
        their first run went to the deep thread, whose first start in a process costs about 40 ms."""
        got = self._nesting_cache
        if got is None or got[0] != self.graph.version:
            fa = frame_analysis(self.graph)
            depth = max((len(f) for f in fa.node_frame.values()), default=0)
            conds = sum(1 for nd in self.graph.nodes
                        if nd.op == "Switch" and not (len(nd.inputs) > 1 and nd.inputs[1].node.op == "LoopCond"))
            got = self._nesting_cache = (self.graph.version, depth + conds)
        return got[1]

    def _run(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
             options: Any, cap: int, budget: Optional[MemoryPlan] = None
             ) -> tuple[list[Any], dict[str, Any]] | Retry:
        """A run of the plan at capacity ``cap`` (under the memory plan ``budget``, if any): its fused
        attempt first when it has one (and the last run did not swap), else, or when the attempt is
        discarded, its stages; ``Retry`` where a stage's stacks outgrew ``cap``."""
        plan = self._plan(fetches, feeds, variables, cap, swapped_loops(budget))
        max_iter = iteration_bound(options)
        if plan.fused is not None and not plan.predict_overflow:
            got = self._run_fused_sized(plan, fetches, feeds, variables, max_iter, budget)
            if got is not None:
                return got
        return self._run_stages(plan, fetches, feeds, variables, options, budget)


def _with_values(sig: Any, values: dict[Key, np.ndarray]) -> Any:
    """Run signature ``sig`` of a plan specialised on ``values`` (the key its compile and its route
    are kept under): ``sig`` itself where the plan is specialised on nothing."""
    return sig + (static_signature(values),) if values else sig
