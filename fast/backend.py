"""``FastBackend``: ``tn.Session(graph, backend="fast")``.

One execution model. A run signature (graph edits, fetches, feed signature, Variables' types, stack
capacity) has a ``Plan`` (``fast.plan``): the root frame cut into **stages** — compiled segments, and
*driven loops* (top-level loops that push or pop gradient stacks, compiled to run at most a chunk of
iterations per call and re-entered by a Python loop, ``_drive``, that hands full stack chunks to a
``stacks.ChunkStore``: to host memory for a loop with ``swap_memory=True``, kept on the device
otherwise). ``_execute`` runs a list of stages in order and finishes the run (fetches to the host,
Variables written back, the stack buffers kept for the next run). Everything else is a property of
the plan that shortens the route through the same model:

- ``Plan.fused``: a plan with driven loops also has its whole root frame as ONE stage, every loop a
  plain ``lax`` loop. ``_execute`` attempts it first (``[plan.fused]``, ``attempt=True``), on a
  ladder of stack capacities (``_run_fused_sized``: 128, 256, 512 entries, then ``stack_chunk``, by
  default; ``FastOptions.stack_first_rung`` and ``stack_rung_ratio`` set the rungs); an attempt
  that outgrows its stacks stops (the error word's ``overflow``), is discarded and the stages run.
  Why: the stages cost a few jitted calls and Python driving per run (2 to 3 ms for a small LSTM
  step), which dominates small models. A run right after one that swapped chunks skips the attempt.
- ``Plan.direct_ok``: a plan of one compiled segment without gradient stacks is called through
  ``Direct`` (flat tuples in and out, the error word and live flags in one read-back), and a repeated
  run of it is recognised by its fetches and feed signature alone: a small program's run is the
  jitted call and little else (``benchmarks/run_overhead.py``).

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
value that decides a shape (``lowering.NeedsStatic``) specialises the plan on that value.

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
import time
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Optional

import jax
import numpy as np

from turnout.errors import DeadFetchError, UnsupportedError, dead_fetch_message
from turnout.fast import stacks as stk
from turnout.fast.call_spec import CallArgs, copy_static
from turnout.fast.counted_stacks import RungTooSmall
from turnout.fast.deep import DEEP_NESTING, NeedsDeep, call_deep, on_deep_thread
from turnout.fast.driven import Guard, drive_chunks, split_carry
from turnout.fast.emit import var_key
from turnout.fast.explain import fallback_schedule, plan_schedule
from turnout.fast.functionalize import functionalize
from turnout.fast.guards import device_oom, iteration_bound, refuse_firing_budget
from turnout.fast.lane import Lane, holds_wide, write_variables
from turnout.fast.lowering import NeedsStatic
from turnout.fast.outcome import Discard, Outcome, StacksOutgrown, decode, enforce
from turnout.fast.plan import (
    Direct,
    Plan,
    Stage,
    capacity_ladder,
)
from turnout.fast.regions import Key, key
from turnout.fast.repeat import HotFused, Repeats
from turnout.fast.timeline import Timeline
from turnout.fast.values import DEAD, start_reads, to_host, wrap_static
from turnout.fast.variable_store import Deferred, DeviceVariables, peeker
from turnout.fast_options import FastOptions, fast_options
from turnout.graph import Graph, Tensor
from turnout.memory_plan import MemoryPlan, budgeted_loops
from turnout.run_schedule import RunSchedule
from turnout.session import RunOptions, RunResult
from turnout.validate import frame_analysis

_NO_SPAN: AbstractContextManager[dict[str, Any]] = nullcontext({})
#: how errors of this backend name it (``outcome.decode``)
WHO = "fast backend"


def variable_signature(graph: Graph, variables: dict[str, np.ndarray]) -> tuple[Any, ...]:
    """(name, dtype, shape) of every Variable of the graph, as plan signatures take them: a Variable
    the session has not set yet counts with its initial value."""
    gv = graph.variables
    if not gv:
        return ()
    out = []
    peek = peeker(variables)
    for name in sorted(gv):
        v = peek(name)
        if v is None:  # as the run will set it: the initial value in the Variable's dtype (a float64
            # initial value of a float32 Variable must not make the first run's plan another one's)
            attrs = gv[name].attrs
            v = np.asarray(attrs.get("initial_value"), dtype=np.dtype(attrs["dtype"]) if "dtype" in attrs else None)
        if type(v) is not Deferred:  # (a deferred value's dtype and shape are its device array's)
            v = np.asarray(v)
        out.append((name, v.dtype.str, v.shape))
    return tuple(out)


class FastBackend:
    """The JAX executor. Its options are one ``FastOptions`` value (``turnout.fast_options``), given
    as ``options=`` or as keywords naming its fields, and kept as ``self.options``: ``stack_chunk``,
    ``keep_stack_buffers``, ``fallback``, ``device_memory_limit``, ``precompile_staged``,
    ``stack_ladder``, and the tuning fields ``inside_stack_bytes``, ``frame_height`` and
    ``gpu_command_buffers`` (``FastOptions`` says what each does, ``docs/fast_backend.rst`` why)."""

    #: runs honour ``RunOptions.memory_budget`` (``turnout.memory_plan``)
    memory_budgets = True

    def __init__(self, graph: Graph, options: Optional[FastOptions] = None, **fields: Any) -> None:
        #: the backend's options, fixed for its life (``turnout.fast_options.FastOptions``)
        self.options = fast_options(options, fields)
        self._records: list[dict[str, Any]] = []
        self._budgets: dict[tuple[int, Optional[int]], Optional[MemoryPlan]] = {}  # (id(plan), run budget) -> it
        self._fallback: dict[Any, str] = {}  # run signature -> why it cannot be compiled
        # run signature -> fed tensors whose values decide shapes: plans are specialised on them
        self._static_keys: dict[Any, frozenset[Key]] = {}
        self._static_now: dict[Key, np.ndarray] = {}  # their values in the run being planned
        self._home: Any = None  # the device fed jax.Arrays are placed on (``device_feed``), found once
        self._reference: Any = None
        self.graph = graph
        self.compile_count = 0
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
        self._deep_nesting = 0  # > 0 once a plan nests deeper than DEEP_NESTING: runs use call_deep
        self._nesting_cache: Optional[tuple[int, int]] = None  # (graph version, _nesting_bound)
        self._checked_version = -1  # the graph version whose validation the last run saw pass

    def held_bytes(self) -> int:
        """Device bytes this backend holds between runs: kept gradient stack buffers and the device
        copies of Variables."""
        stacks = sum(stk.stack_nbytes(v) for bufs in self._stack_bufs.values() for v in bufs.values())
        return stacks + sum(int(dev.nbytes) for _, dev in self._dev_vars.values())

    def stack_buffers(self) -> list[dict[str, Any]]:
        """The gradient stack buffers this backend keeps between runs, per plan (rung) holding them:
        ``capacity`` (entries per stack), ``ladder`` (the capacities of the ladder that rung belongs
        to, ``capacity_ladder``; None for a plan not run on one) and ``stacks`` (stack key -> bytes
        kept: the value buffer, and after a staged run its index record). ``held_bytes`` counts them.

        Why: how stacks are sized is a policy (``FastOptions.stack_ladder``, ``stack_first_rung``,
        ``stack_rung_ratio``) whose effect a user, a test or a benchmark checks from the backend's own
        accounting, not from the process's memory."""
        plans = {id(p): p for p in self._plans.values()}
        tops = {id(r): top for top in self._plans.values() for r in top.rungs.values()}
        out = []
        for pid, bufs in self._stack_bufs.items():
            plan, top = plans.get(pid), tops.get(pid)
            out.append({"capacity": None if plan is None else plan.capacity,
                        "ladder": None if top is None or top.ladder is None else list(top.ladder),
                        "stacks": {k: stk.stack_nbytes(v) for k, v in bufs.items()}})
        return out

    def memory_records(self) -> list[dict[str, Any]]:
        """Per loop and device, the gradient stack memory of the last run: ``loop``, ``device``,
        ``device_bytes`` and ``host_bytes`` (what the loop's stacks held on each when its forward
        loop ended), ``chunks_to_host`` / ``chunks_from_host`` (chunks copied out and back),
        ``peak_device_bytes``, and ``swap_memory``, ``stacks``, ``chunks_kept_on_device``.
        ``tn.memory_report(session)`` presents them."""
        return [dict(r) for r in self._records]

    def release_buffers(self) -> None:
        """Free the device buffers held between runs (see ``held_bytes``). Compiled plans are kept;
        the next run allocates its stacks afresh and copies Variables from the session again."""
        self._stack_bufs.clear()
        self._dev_vars.clear()
        self.variable_store.settle()

    def _validate(self, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> None:
        """Reject ill-formed graphs before compiling, with the reference backend's ValidationError
        (``turnout.validate`` caches the graph part per graph version)."""
        try:
            from turnout.validate import validate
        except ImportError:  # pragma: no cover - validation is part of turnout
            return
        validate(self.graph, fetches, list(feeds))

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
        if self._deep_nesting and not on_deep_thread():
            result = call_deep(self._run_any, fetches, feeds, variables, options, nesting=self._deep_nesting)
        else:
            try:
                result = self._run_any(fetches, feeds, variables, options)
            except NeedsDeep as e:
                result = call_deep(self._run_any, fetches, feeds, variables, options, nesting=e.nesting)
        result.stats.setdefault("route", "general")
        return result

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
            bound = self._nesting_bound()
            def planned() -> tuple[Plan, Optional[MemoryPlan]]:
                cap, budget = self._budgeted_chunk(fetches, feeds, variables, RunOptions(memory_budget=memory_budget))
                return self._plan(fetches, feeds, variables, cap), budget

            with jax.enable_x64(True):
                plan, budget = call_deep(planned, nesting=bound) if bound > DEEP_NESTING else planned()
        except UnsupportedError as e:
            return fallback_schedule(str(e))
        return plan_schedule(plan, self._ladder(plan), budget.swapped_frames() if budget is not None else frozenset(),
                             lane=memory_budget is None)

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
        try:
            with tl.span("Session.run", "run") as args:
                before = self.compile_count
                result = self.run(fetches, feeds, variables, untraced)
                args["compiled"] = self.compile_count != before
                args["compiles"] = self.compile_count - before
        finally:
            self._timeline = None
        result.trace = tl
        return result

    def _span(self, name: str, row: str, **args: Any) -> AbstractContextManager[dict[str, Any]]:
        """A timeline span while tracing; otherwise nothing (one attribute read)."""
        tl = self._timeline
        return tl.span(name, row, **args) if tl is not None else _NO_SPAN

    def _run_any(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
                 options: Any) -> Any:
        if self.graph.version != self._checked_version:
            # nodes were appended: the plans stay valid (they are keyed on ``edits``), but the graph as a
            # whole must still pass validation, as it must on every backend (a node appended since can
            # make it ill-formed)
            self._validate(fetches, feeds)
            self._checked_version = self.graph.version
        dsig = self._run_signature(fetches, feeds, variables)
        if self._fallback and dsig in self._fallback:
            return self._run_reference(dsig, fetches, feeds, variables, options)
        try:
            d = self._direct.get(dsig) if dsig not in self._static_keys else None
            if d is not None:  # the common repeated run: straight to its one compiled call
                with jax.enable_x64(True):
                    result = self._run_direct(d, fetches, feeds, variables, options)
                self.repeats.remember(d, fetches, feeds)
                return result
            while True:  # specialise on the fed values that decide shapes (lowering.NeedsStatic)
                static = self._static_keys.get(dsig, frozenset())
                by_key = {key(t): v for t, v in feeds.items()}
                self._static_now = {k: np.asarray(by_key[k]) for k in sorted(static)}
                vsig = dsig + (tuple((k, v.tobytes()) for k, v in self._static_now.items()),) if static else dsig
                try:
                    result = self._run_compiled(vsig, fetches, feeds, variables, options)
                    result.stats["executor"] = "compiled"
                    d = self._direct.get(vsig)
                    if d is not None and not static:  # it ran on the Direct path
                        self.repeats.remember(d, fetches, feeds)
                    elif result.stats.get("fused") and not static and self._last_fused is not None:
                        top, rung = self._last_fused
                        if all(sn.id in rung.prealloc for sn in rung.stack_nodes) and self.options.keep_stack_buffers:
                            stats = {k: v for k, v in result.stats.items() if k not in ("compiles", "stage_seconds")}
                            self.repeats.remember(HotFused(rung, top, stats, self.memory_records(),
                                                           tuple(rung.var_nodes), holds_wide(list(feeds))),
                                                  fetches, feeds)
                    if static:
                        result.stats["specialized_on"] = sorted(self.graph.nodes[k[0]].outputs[k[1]].name
                                                                for k in static)
                    return result
                except NeedsStatic as e:
                    if e.keys <= static or not e.keys <= set(by_key):
                        raise UnsupportedError(str(e)) from None
                    self._static_keys[dsig] = static | e.keys
        except UnsupportedError as e:
            if not self.options.fallback:
                raise
            self._fallback[dsig] = str(e)
            warnings.warn(f"{e}; this program runs on the reference interpreter instead (at interpreter speed)",
                          RuntimeWarning, stacklevel=4)
            return self._run_reference(dsig, fetches, feeds, variables, options)

    def _run_signature(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray]
                       ) -> Any:
        """What a run's plans and fallback are keyed on. ``edits``, not ``version``: nodes appended
        since (an op fetch's proxy) leave the plan valid."""
        return (self.graph.edits, tuple([(t.node.id, t.index) for t in fetches]),
                tuple(sorted([(t.node.id, t.index, v.dtype.str, v.shape) for t, v in feeds.items()])),
                variable_signature(self.graph, variables))

    def _run_reference(self, dsig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                       variables: dict[str, np.ndarray], options: Any) -> Any:
        """Run a program the fast backend cannot compile on the reference interpreter: the same
        values, Variables and errors, at interpreter speed. ``stats['executor']`` says so."""
        if self._reference is None:
            from turnout.reference.executor import ReferenceBackend

            self._reference = ReferenceBackend(self.graph)
        host = {t: (np.asarray(v) if isinstance(v, jax.Array) else v) for t, v in feeds.items()}
        result = self._reference.run(fetches, host, variables, options)
        self._records = []  # the interpreter's stacks are Python objects, on no device
        result.stats.update({"backend": "fast", "executor": "reference interpreter (fallback)",
                             "fallback_reason": self._fallback[dsig]})
        return result

    def _run_compiled(self, dsig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                      variables: dict[str, np.ndarray], options: Any) -> Any:
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
        cap, budget = self._budgeted_chunk(fetches, feeds, variables, options)
        retries = 0
        with jax.enable_x64(True):
            while True:
                try:
                    values, stats = self._run(fetches, feeds, variables, options, cap, budget)
                    break
                except StacksOutgrown as e:  # (past MAX_CAPACITY, ``decode`` raised instead)
                    cap = e.retry.capacity
                    retries += 1
        stats["stack_capacity_retries"] = retries
        return RunResult(values=values, stats=stats)

    def _budgeted_chunk(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
                        options: Any) -> tuple[int, Optional[MemoryPlan]]:
        """The stack chunk of a run and its memory plan: ``stack_chunk`` and None, or a smaller chunk
        where a memory budget applies (``turnout.memory_plan``), so that the buffers fit it, and the
        plan that the run's ``ChunkStore`` checks and whose swaps it makes."""
        chunk = self.options.stack_chunk
        if options.memory_budget is None and not budgeted_loops(self.graph):  # (nor has any loop one)
            return chunk, None
        with jax.enable_x64(True):
            plan = self._plan(fetches, feeds, variables, chunk)
        k = (id(plan), options.memory_budget)  # (plans live as long as the backend)
        if k not in self._budgets:
            self._budgets[k] = None if not plan.stack_nodes else stk.budget_plan(
                self.graph.nodes, plan.stack_nodes, self.memory_platform(), options.memory_budget)
        budget = self._budgets[k]
        cap = None if budget is None else budget.capacity()
        return (chunk if cap is None else min(chunk, cap)), budget

    def memory_platform(self) -> str:
        """The platform whose memory the stacks use (``jax.default_backend()``'s name for the backend's
        device): what ``turnout.memory_plan`` plans for."""
        return str(self._home_device().platform)

    def _make_direct(self, plan: Plan, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> Direct:
        var_names = tuple(plan.var_nodes)
        args = CallArgs(tuple(sorted(key(t) for t in feeds)), tuple(var_key(n) for n in var_names), (), plan.has_loops)
        stats = {
            "backend": "fast", "stages": 1, "fused": False,
            "stack_capacity": plan.capacity, "stack_chunks_kept": 0, "stack_chunks_from_host": 0,
            "peak_device_stack_bytes": 0, "stack_chunks_swapped": 0, "peak_host_stack_bytes": 0,
            "stack_capacity_retries": 0, "executor": "compiled",
        }
        d = Direct(plan, None, args, var_names, stats)
        d.fn = plan.direct_fn(args, tuple(key(t) for t in fetches), d.record)
        return d

    def _run_direct(self, d: Direct, fetches: list[Tensor], feeds: dict[Tensor, Any],
                    variables: dict[str, np.ndarray], options: Any) -> Any:
        """One run on the ``Direct`` path; the same checks, errors and variable updates as ``_run``."""
        t0 = time.perf_counter()
        by_key = {(t.node.id, t.index): v for t, v in feeds.items()}
        var_vals = {var_key(name): self._device_var(d.plan, name, variables) for name in d.var_names}
        flat = d.args.flat(by_key, var_vals, {}, iteration_bound(options))
        if self._timeline is None:
            res = d.fn(*flat)
        else:
            with self._span("one compiled call", "compiled stages") as args:
                before = self.compile_count
                res = d.fn(*flat)
                args["compiled"] = self.compile_count != before
        return self._direct_result(d, fetches, res, var_vals, variables, t0, "general")

    def _direct_result(self, d: Direct, fetches: list[Tensor], res: Any, var_vals: dict[str, Any],
                       variables: dict[str, np.ndarray], t0: float, route: str) -> RunResult:
        """The fetched values on the host, errors raised, Variables written back: the end of a
        ``Direct`` run (``var_vals``: the Variables' device copies it started from, by state key)."""
        spec = d.spec
        assert spec is not None  # (set by its trace)
        out, flags, state = spec.split(res)
        if self.overlap_reads:
            start_reads(out.values())
        out, code, lives = spec.read_flags(out, flags)
        if code:
            self._raise_errors(d.plan, {"err": code}, 0)
        values = self._fetched(fetches, {**out, **{k: copy_static(v) for k, v in spec.static.items()}}, lives)
        fetched = {key(t): i for i, t in reversed(list(enumerate(fetches)))}
        aliases = dict(spec.aliases)
        var_plan = tuple((name, spec.returns(var_key(name)), fetched.get(aliases.get(var_key(name))))
                         for name in d.var_names)
        write_variables(var_plan, [state.get(k, v) for k, v in var_vals.items()], values, variables, self._dev_vars)
        self._records = []
        stats = dict(d.stats)
        stats["compiles"] = self.compile_count
        stats["stage_seconds"] = [time.perf_counter() - t0]
        stats["route"] = route
        return RunResult(values=values, stats=stats)

    def _plan(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
              cap: int) -> Plan:
        sig = (
            id(self.graph), self.graph.edits, tuple(key(t) for t in fetches),
            tuple(sorted((key(t), v.dtype.str, np.shape(v)) for t, v in feeds.items())),
            variable_signature(self.graph, variables), cap,
            tuple((k, v.tobytes()) for k, v in self._static_now.items()),
        )
        plan = self._plans.get(sig)
        if plan is None:
            deep = on_deep_thread()
            if not deep and self._nesting_bound() > DEEP_NESTING:
                raise NeedsDeep(self._nesting_bound())  # raising may recurse once per nested cond
            program = functionalize(self.graph, fetches, feeds)
            plan = self._plans[sig] = Plan(self, program, {t.node.id for t in feeds}, cap)
            plan.static_feeds = dict(self._static_now)
            if plan.nesting > DEEP_NESTING:
                self._deep_nesting = max(self._deep_nesting, plan.nesting)
                if not deep:
                    raise NeedsDeep(plan.nesting)
        return plan

    def _nesting_bound(self) -> int:
        """A bound on how deep the graph's regions can nest, found without raising them (which
        recurses per level): the deepest loop frame, plus every Switch that a ``LoopCond`` does not
        drive (each cond level needs one). Why not every Switch and ``LoopCond``, as before: a loop
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

    def _device_var(self, plan: Plan, name: str, variables: dict[str, np.ndarray]) -> Any:
        """The device copy of Variable ``name`` a run starts from: the one the last run handed back while
        the session's host value is still the one it wrote, else the host value (its initial value the
        first time) put on the device, committed as a run's outputs are, or the next run compiles again.
        ``jax.device_put``, not ``jnp.asarray``: the latter compiles a small copy program for every new
        shape (about 35 ms each on the development machine, so a model's first run paid it once per
        Variable shape); ``device_put`` copies the host array as it is."""
        peek = peeker(variables)
        slot = peek(name)
        if slot is None:
            vn = plan.var_nodes[name]
            variables[name] = np.array(vn.attrs["initial_value"], dtype=np.dtype(vn.attrs["dtype"]))
            slot = peek(name)
        cached = self._dev_vars.get(name)
        if cached is not None and cached[0] is slot:
            return cached[1]
        return stk.committed(jax.device_put(variables[name]))

    def _initial_state(self, plan: Plan, variables: dict[str, np.ndarray], fused: bool = False) -> dict[str, Any]:
        """The state a run starts from: the error word, the Variables' device copies, the stacks (the
        last run's buffers, donated: no allocation; entries above the pointer are never read, as
        [E-Stack-Pop] reads only what this run pushed). For the fused stage (``fused``) there is no
        error word, and a kept stack is its value buffer alone: the stage sets the error word and
        the pointers to 0 and makes the index records itself (``Plan._segment``)."""
        # numpy scalars, not jnp: a jnp scalar is an eager dispatch (tens of microseconds) per value,
        # and the compiled stages take numpy leaves as the same int32 / bool arguments
        state: dict[str, Any] = {} if fused else {"err": np.int32(0)}
        for name in plan.var_nodes:
            state[var_key(name)] = self._device_var(plan, name, variables)
        reuse = self._stack_bufs.pop(id(plan), {})
        for k, dtype, shapes in plan.stack_slots:
            if shapes is None:
                state[k] = stk.StackValue(plan.capacity, dtype)
                continue
            if fused and k in plan.inside:  # (made inside the call)
                continue
            buf, idx = stk.kept_arrays(reuse.get(k))
            if buf is None:
                buf = stk.device_zeros((plan.capacity, *shapes[0]), dtype)
            if fused:
                state[k] = buf
                continue
            if idx is None:  # (kept by the fused stage, which keeps no index record)
                idx = stk.device_zeros((plan.capacity, *shapes[1]), np.int32)
            state[k] = stk.StackValue(plan.capacity, dtype, buf, idx, np.int32(0))
        return state

    @staticmethod
    def _kept_stacks(plan: Plan, state: dict[str, Any]) -> dict[str, Any]:
        """The stacks of ``state`` kept for the next run of ``plan``: those it preallocates, as a
        ``StackValue`` (after the stages) or a value buffer alone (after the fused stage)."""
        return {k: state[k] for k in plan.kept if k in state and stk.kept_arrays(state[k])[0] is not None}

    def _run(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
             options: Any, cap: int, budget: Optional[MemoryPlan] = None) -> tuple[list[Any], dict[str, Any]]:
        """A run of the plan at capacity ``cap`` (under the memory plan ``budget``, if any): its fused
        attempt first when it has one (and the last run did not swap), else, or when the attempt is
        discarded, its stages."""
        plan = self._plan(fetches, feeds, variables, cap)
        max_iter = iteration_bound(options)
        if plan.fused is not None and not plan.predict_overflow:
            got = self._run_fused_sized(plan, fetches, feeds, variables, max_iter, budget)
            if got is not None:
                return got
        done = self._execute(plan, plan.stages, fetches, feeds, variables, max_iter, attempt=False, budget=budget)
        assert done is not None  # only an attempt is ever discarded
        return done

    def _execute(self, plan: Plan, stages: list[Stage], fetches: list[Tensor], feeds: dict[Tensor, Any],
                 variables: dict[str, np.ndarray], max_iter: Any, attempt: bool,
                 budget: Optional[MemoryPlan] = None) -> Optional[tuple[list[Any], dict[str, Any]]]:
        """Run ``stages`` of ``plan`` in order, and finish the run: the one way a plan with gradient
        stacks runs. Its stages (``plan.stages``: compiled segments and driven loops, in root order)
        or, as an ``attempt``, its fused stage alone (``[plan.fused]``).

        An attempt cannot swap stack chunks: when a stack outgrew (or underflowed) its capacity, it is
        discarded — ``None``, no Variable written, no error raised — and the caller runs the stages.
        Its stack buffers are kept either way (the stages, or the next attempt, reuse them). Otherwise
        each stage's errors are raised after it, as the interpreter raises them during the run.
        """
        t0 = time.perf_counter()
        first = attempt and not plan.fused_warm
        state = self._initial_state(plan, variables, fused=attempt)
        store = stk.ChunkStore(plan.stack_info, self.options.device_memory_limit, budget)
        store.observe(state)
        # An attempt is one call, to which the fed numpy arrays go as they are (the call transfers them,
        # as a jitted JAX function does). Stages share the feeds, placed once with device_put, not
        # jnp.asarray: on CPU it aliases a 64-byte-aligned host array (such as the host view of a jax
        # array) instead of copying it; the run reads it only until it returns.
        env: dict[Key, Any] = {key(t): (v if attempt else jax.device_put(v)) for t, v in feeds.items()}
        lives: dict[Key, Any] = {}
        stage_s: list[float] = []
        for i, st in enumerate(stages):
            t1 = time.perf_counter()
            env_in = {k: (env[k] if attempt else wrap_static(env[k])) for k in st.reads if k in env}
            if st.driven is None:
                out, lv, state = self._call_segment(plan, st, i, env_in, state, max_iter, attempt)
                lives.update(lv)
            else:
                with self._span(f"stage {i}: driven {st.driven.describe()}", "compiled stages") as args:
                    before = self.compile_count
                    out, state = self._drive(plan, st, env_in, state, max_iter, store)
                    args["compiled"] = self.compile_count != before
            if attempt:
                plan.fused_warm = True
                if plan.prealloc:
                    self._stack_bufs[id(plan)] = self._kept_stacks(plan, state)
                outcome = self._decode(plan, int(state["err"]), attempt=True)
                if isinstance(outcome, Discard) and outcome.rerecord:
                    self._record_every_stack(plan)
                if (first and self.options.precompile_staged) or isinstance(outcome, Discard):
                    return None
            store.observe(state, plan.index_bytes if attempt else None)
            if attempt and plan.inside:
                store.observe_inside(plan.inside_bytes, stk.device_label(self._home_device()))
            enforce(outcome if attempt else self._decode(plan, int(state["err"]), store.moved()))
            env.update(out)
            if attempt:
                # (constants of the fused stage: they do not cross the call)
                env.update({k: copy_static(v) for k, v in (st.spec.static if st.spec is not None else {}).items()})
            stage_s.append(time.perf_counter() - t1)
        if attempt:
            store.saved(store.ledgers)
        else:
            plan.predict_overflow = store.moved() > 0
        if self.overlap_reads and not attempt:  # (an attempt started its reads before its error word)
            start_reads([env[(t.node.id, t.index)] for t in fetches])
        values = self._finish(plan, fetches, env, lives, state, variables)
        self._records = store.records()
        stats = {
            "backend": "fast", "compiles": self.compile_count, "stages": len(stages), "fused": attempt,
            "stack_capacity": plan.capacity, "stage_seconds": stage_s if not attempt else [time.perf_counter() - t0],
            **store.stats(),
        }
        return values, stats

    def _call_segment(self, plan: Plan, st: Stage, i: int, env_in: dict[Key, Any], state: dict[str, Any],
                      max_iter: Any, attempt: bool) -> tuple[dict[Key, Any], Any, dict[str, Any]]:
        """One compiled segment of ``_execute``: (its outputs, their live flags, the state after it).
        Both are called in the convention of ``fast.call_spec``: a segment of the stages through
        ``fast.segment.SegmentFn`` (``Plan.segment_fn``: its error word carried in its state); the fused
        attempt with flat arguments laid out once per function (``Plan.fused_fn``), its error word and
        live flags read back at once, behind a fetched value where ``fast.packing`` put them there."""
        rest, stacks = stk.split_state(state)
        if attempt:
            call_args = CallArgs(tuple(env_in), tuple(rest), tuple(stacks))
            if "seg" not in st.fns or st.spec is None or st.spec.args != call_args:
                st.fns["seg"] = plan.fused_fn(call_args)
        elif "seg" not in st.fns:
            st.fns["seg"] = plan.segment_fn(st)
        name = "fused attempt (whole program, one call)" if attempt else f"stage {i}: compiled segment"
        with self._span(name, "compiled stages") as args, device_oom(plan, st):
            before = self.compile_count
            if not attempt:
                out, lv, state = st.fns["seg"](env_in, state, max_iter)
                args["compiled"] = self.compile_count != before
                args["error_word"] = int(state["err"])
                return out, lv, state
            res = st.fns["seg"](*env_in.values(), *rest.values(), *stacks.values(), max_iter)
            spec = st.spec
            assert spec is not None  # (set by its trace)
            out, flags, state = spec.split(res)
            args["compiled"] = self.compile_count != before
            if self.overlap_reads:
                start_reads(out.values())
            state = {**rest, **state}  # (what came back unchanged is not returned)
            out, state["err"], lv = spec.read_flags(out, flags)
            args["error_word"] = int(state["err"])
        return out, lv, state

    def _run_fused_sized(self, plan: Plan, fetches: list[Tensor], feeds: dict[Tensor, Any],
                         variables: dict[str, np.ndarray], max_iter: Any, budget: Optional[MemoryPlan] = None
                         ) -> Optional[tuple[list[Any], dict[str, Any]]]:
        """The fused attempt with stack buffers sized to what the runs use: ``plan``'s own capacity
        (``stack_chunk``) is the last of a ladder of capacities (``capacity_ladder``: 128, 256, 512,
        1024 by default), each a plan of its own, made and compiled by the first run that needs it. A
        run starts at the rung that held the last run and climbs when a stack overflows; only an
        overflow of the top rung goes to the staged path. ``None``: the staged path must run.

        Why: a fused program's stacks have the capacity it was compiled for, and the backend keeps
        them between runs. At ``stack_chunk`` (1024) every run of the benchmark LSTM held 640 MiB of
        stacks (a peak of 1.0 GiB at T = 100, against 450 MiB for JAX); on a ladder whose rungs grow by
        ``stack_rung_ratio`` a run holds at most that ratio times the entries it pushes. The price is
        one compilation per rung climbed, at most once per rung in a plan's life: a trip count in a
        rung already compiled never compiles. Only the rung that ran keeps buffers.
        """
        caps = plan.ladder if plan.ladder is not None else self._ladder(plan)
        start = caps.index(plan.rung.capacity) if plan.rung is not None else 0
        for c in caps[start:]:
            p = self._rung(plan, c, fetches, feeds, variables)
            if p.fused is None:
                continue
            got = self._run_fused(p, fetches, feeds, variables, max_iter, budget)
            if got is not None:
                plan.rung = p
                self._last_fused = (plan, p)
                for other in plan.rungs.values():  # only the rung that ran keeps its buffers
                    if other is not p:
                        self._stack_bufs.pop(id(other), None)
                got[1]["stack_ladder"] = list(caps)
                return got
            if p is not plan:
                self._stack_bufs.pop(id(p), None)
                stk.return_freed_memory(self._home_device().platform)
        return None

    def _ladder(self, plan: Plan) -> list[int]:
        """The capacities of ``plan``'s rungs (``capacity_ladder`` with the options' first rung and
        ratio), smallest first, ending with its own. With ``stack_ladder=False`` there is one rung; with
        ``precompile_staged`` too: that option promises that no run after the first compiles, which
        climbing would break; a plan retried at twice the chunk (a nested loop's stack outgrew it on
        the staged path) has one too."""
        o = self.options
        one = o.precompile_staged or not o.stack_ladder or plan.capacity != o.stack_chunk
        plan.ladder = [plan.capacity] if one else capacity_ladder(plan.capacity, o.stack_first_rung,
                                                                  o.stack_rung_ratio)
        return plan.ladder

    def _rung(self, plan: Plan, capacity: int, fetches: list[Tensor], feeds: dict[Tensor, Any],
              variables: dict[str, np.ndarray]) -> Plan:
        """The plan of ``plan``'s rung at ``capacity`` (``plan`` itself at its own), made by the first
        run that reaches it: a run that fits the first rung never raises the program for the others."""
        p = plan.rungs.get(capacity)
        if p is None:
            p = plan.rungs[capacity] = plan if capacity == plan.capacity else self._plan(fetches, feeds, variables,
                                                                                         capacity)
        return p

    def _run_fused(self, plan: Plan, fetches: list[Tensor], feeds: dict[Tensor, Any],
                   variables: dict[str, np.ndarray], max_iter: Any, budget: Optional[MemoryPlan] = None
                   ) -> Optional[tuple[list[Any], dict[str, Any]]]:
        """The attempt of ``plan.fused`` (``_execute``); ``None``: the stages must run instead.

        They must when a stack overflowed its capacity (or underflowed: the stages decide whether that
        is an error). The stages' functions are compiled only then, by the first run that needs them:
        a plan whose loops always fit never compiles them (with ``precompile_staged`` the plan's first
        run discards its attempt, to compile the stages up front). A fused stage that cannot be lowered
        (``UnsupportedError`` while tracing it) is dropped: the plan runs its stages from then on. An
        attempt that pushed a positional stack away from its position is run again at once, traced
        with every index record (``_record_every_stack``).
        """
        assert plan.fused is not None
        try:
            positional = bool(plan.positional)
            got = self._execute(plan, [plan.fused], fetches, feeds, variables, max_iter, attempt=True, budget=budget)
            if got is None and positional and not plan.positional:
                got = self._execute(plan, [plan.fused], fetches, feeds, variables, max_iter, attempt=True,
                                    budget=budget)
            return got
        except (UnsupportedError, RungTooSmall):  # (a rung too small for a counted stack: the next one)
            plan.fused = None
            return None

    def _record_every_stack(self, plan: Plan) -> None:
        """A fused attempt pushed a positional stack away from its position (``plan.positional_stacks``):
        its pops could not be checked by position, so the attempt is discarded and the fused stage is
        traced again with every record (``_run_fused`` runs it again at once), for
        this and every later run; hot routes made for the old trace are forgotten."""
        plan.record_every_stack()
        self.repeats.forget()

    @staticmethod
    def _fetched(fetches: list[Tensor], env: dict[Key, Any], lives: dict[Key, Any]) -> list[Any]:
        """The fetched values on the host; a fetch that is dead (``DEAD``, or its live flag false)
        raises ``DeadFetchError``."""
        values = []
        for t in fetches:
            k = (t.node.id, t.index)
            v = env[k]
            if v is DEAD or not bool(lives.get(k, True)):
                raise DeadFetchError(dead_fetch_message(t.name, t.node))
            values.append(to_host(v))
        return values

    def _finish(self, plan: Plan, fetches: list[Tensor], env: dict[Key, Any], lives: dict[Key, Any],
                state: dict[str, Any], variables: dict[str, np.ndarray]) -> list[Any]:
        """The fetched values on the host, and the Variables written back: the last step of a run."""
        values = self._fetched(fetches, env, lives)
        if plan.prealloc and self.options.keep_stack_buffers:
            self._stack_bufs[id(plan)] = self._kept_stacks(plan, state)
        else:
            self._stack_bufs.pop(id(plan), None)
        names = list(plan.var_nodes)
        write_variables(tuple((name, name in plan.written_vars, None) for name in names),
                        [state[var_key(name)] for name in names], values, variables, self._dev_vars)
        return values

    def _drive(self, plan: Plan, st: Stage, env_in: dict[Key, Any], state: dict[str, Any], max_iter: Any,
               store: stk.ChunkStore) -> tuple[dict[Key, Any], dict[str, Any]]:
        """Run a top-level loop chunk by chunk (``fast.driven.drive_chunks``). Between chunks, a stack
        that outgrew its buffer hands the full chunk to ``store`` (to host memory, or kept on the
        device: the loop's ``swap_memory``), and a stack that runs low takes the chunk that ``store``
        brought back."""
        if not st.fns:
            st.fns["init"], st.fns["chunk"], st.fns["finish"] = plan.loop_fns(st)
        store.begin_pops({s: state[s] for s in st.pop_stacks if s in state})
        rest, stacks = stk.split_state(state)
        with device_oom(plan, st):
            c, state = st.fns["init"](env_in, rest, stacks, max_iter)
        if c is not None:
            c = drive_chunks(st.fns["chunk"], env_in, c, max_iter, st.push_stacks, st.pop_stacks, plan.capacity,
                             store, WHO, self._chunk_guard(plan, st))
        with device_oom(plan, st):
            if c is None:
                rest, stacks = stk.split_state(state)
                out, _, state = st.fns["finish"](env_in, None, stacks, rest, max_iter)
            else:
                c_rest, c_stacks = split_carry(c)
                out, _, state = st.fns["finish"](env_in, c_rest, c_stacks, {}, max_iter)
        store.end_pushes(st.push_stacks)
        return out, state

    def _chunk_guard(self, plan: Plan, st: Stage) -> Guard:
        """The guard of ``drive_chunks`` for stage ``st``: each chunk call and each move of stack
        chunks is a span of the run's timeline (when traced), and XLA's out-of-memory in any of them
        is ``ResourceExhaustedError`` naming the loop (``device_oom``)."""
        @contextmanager
        def guard(what: str, stacks: Optional[list[str]]) -> Iterator[dict[str, Any]]:
            if what == "chunk":
                span = self._span("chunk", "driven loops")
            else:
                span = self._span("stack chunks full" if what == "spill" else "stack chunks back", "host swaps",
                                  stacks=stacks)
            with span as args, device_oom(plan, st):
                yield args

        return guard

    @staticmethod
    def _decode(plan: Plan, code: int, swapped: int = 0, attempt: bool = False) -> Outcome:
        """What error word ``code`` of a call of ``plan`` means (``outcome.decode``)."""
        return decode(plan.codes, code, capacity=plan.capacity, who=WHO, moved=swapped, attempt=attempt)

    def _raise_errors(self, plan: Plan, state: dict[str, Any], swapped: int) -> None:
        """The error word of a stage (or a Direct call) acted on: raised, or a retry with larger
        stacks (``outcome.StacksOutgrown``, caught by the capacity loop of ``_run_compiled``)."""
        enforce(self._decode(plan, int(state["err"]), swapped))
