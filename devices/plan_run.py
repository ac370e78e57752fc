"""One run of the fast partitioned executor's per-device tiers: the plan it runs and the run itself.

Why a module of its own: ``devices.fast_executor`` decides which tier takes a run and reports it;
this module runs the per-device tiers' plan (``DevicePlan``): each device's state (error word,
Variables, gradient stacks), the segment calls committed to their devices (from the host thread, or
from per-device workers when a segment holds a host callback), the stacks moved between calls
(``devices.swap``), and, mixed in from ``devices.host_control``, the conds and loops the host
drives between them.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Optional

import jax
import numpy as np

from turnout.devices.host_control import HostControl
from turnout.devices.host_env import HostEnv, Lazy
from turnout.devices.swap import SpanningStacks, pushed_in, stack_infos, traffic
from turnout.fast import stacks as stk
from turnout.fast.chunk_store import budget_plan
from turnout.fast.cut import HostCond, Schedule, Segment, Step
from turnout.fast.emit import Emitter, var_key
from turnout.fast.guards import iteration_bound
from turnout.fast.outcome import ErrorCodes, Retry, enforce
from turnout.fast.plan import stack_dtype, stack_source_var, static_stack_shapes
from turnout.fast.regions import Key, Program, item_nodes, program_nodes
from turnout.fast.slot_sizes import SlotPlan
from turnout.fast.values import DEAD, wrap_static
from turnout.memory_plan import MemoryPlan
from turnout.session import RunOptions

if TYPE_CHECKING:
    from turnout.devices.fast_executor import FastPartitionedBackend
    from turnout.devices.timeline import DeviceTimeline

#: ops lowered to host callbacks: on CPU a compiled call that contains one runs synchronously (the
#: call returns only when it has run), so a plan with such a segment dispatches from per-device threads
#: (``FastPartitionedBackend(threads="always")`` makes every plan dispatch so)
HOST_CALLBACK_OPS = frozenset({"Sleep"})


class DevicePlan:
    """Everything made once per (graph version, fetches, feed signature, variable signature, capacity)."""

    def __init__(self, program: Program, sched: Schedule, fed: set[int], capacity: int,
                 device_of: dict[int, str], threads: str = "auto", platform: str = "cpu",
                 static_feeds: Optional[dict[Key, np.ndarray]] = None, *, slots: SlotPlan) -> None:
        self.program = program
        #: fed tensors the plan is specialised on, with their values (``fast.specialise``)
        self.static_feeds = dict(static_feeds or {})
        self.platform = platform  # where the stacks live, for the memory plan (``budget``)
        self.schedule = sched
        self.fed = fed
        self.capacity = capacity
        self.codes = ErrorCodes()
        nodes = {n.id: n for n in program_nodes(program)}
        self.var_nodes = {n.attrs["var_name"]: n for n in nodes.values() if n.op == "VarHandle"}
        self.written_vars = {stack_source_var(n) for n in nodes.values() if n.op.startswith("Assign")} - {None}
        self.var_device = {name: device_of[n.id] for name, n in self.var_nodes.items()}
        self.threaded = bool(sched.segments) if threads == "always" else any(
            n.op in HOST_CALLBACK_OPS for seg in sched.segments for it in seg.items for n in item_nodes(it))
        # stack key -> (device, dtype, (element shape, index shape)) for stacks whose pushes have static
        # shapes: allocated on their device before the run, as the one-device backend does, so that a
        # loop compiled whole on one device carries them from its first iteration (a stack made at its
        # first push inside the loop would change the loop carry's type)
        self.stack_alloc: dict[str, tuple[str, Any, Any]] = {
            f"stack:{sid}": (device_of[sid], stack_dtype(nodes[sid]), shapes)
            for sid, shapes in static_stack_shapes(list(nodes.values())).items() if sid in nodes}
        # the stacks' loops and swap_memory, what each segment's call does to them, and the stacks each
        # host-driven loop pushes (``devices.swap``)
        self.stack_info = stack_infos(nodes.values())
        self.traffic = {seg.index: t for seg in sched.segments if (t := traffic(seg.items))}
        self.loop_pushes = {id(hl): ks for hl in sched.host_loops if (ks := pushed_in(hl.region))}
        self._budgets: dict[Optional[int], Optional[MemoryPlan]] = {}
        #: the checkpoint slots of the loops reversed from checkpoints, sized as the one-device backend
        #: sizes them (``fast.slot_sizes``: the backend's ``SlotSizes.plan``), and per device the bytes
        #: of those its forward loops keep there, counted with the stacks
        self.slots = slots
        self.slot_bytes: dict[str, dict[str, int]] = self.slots.bytes_by_device(device_of)

    def emitter(self, state: dict[str, Any], max_iter: Any, free_pointers: bool = False) -> Emitter:
        """A fresh emitter over the program from ``state``, for a segment's trace or a driven loop's
        (made only while tracing): the plan's error codes and capacity, its feeds, and the fed values
        it is specialised on as constants."""
        em = Emitter(self.program, self.codes, self.capacity, max_iter, free_pointers=free_pointers)
        em.state = dict(state)
        em.fed = self.fed
        em.static = self.static_feeds
        em.slot_capacity, em.learn_slots = self.slots.capacity, self.slots.learn
        return em

    def budget(self, run_budget: Optional[int]) -> Optional[MemoryPlan]:
        """The memory plan a run under ``run_budget`` honours (None: no budget applies), made once per
        run budget: the plan of the program's stacks and pushes and its checkpoint slots
        (``chunk_store.budget_plan``) on the devices' platform."""
        if run_budget not in self._budgets:
            nodes = program_nodes(self.program)
            stacks = [n for n in nodes if n.op in ("StackNew", "CheckpointSlots")]
            self._budgets[run_budget] = budget_plan(nodes, stacks, self.platform, run_budget)
        return self._budgets[run_budget]


class PlanRun(HostControl):
    """One run of a plan: per-device state (error word, Variables, stacks) and the host driver."""

    def __init__(self, backend: FastPartitionedBackend, plan: DevicePlan, variables: dict[str, np.ndarray],
                 options: RunOptions, timeline: Optional[DeviceTimeline]) -> None:
        self.b = backend
        self.plan = plan
        self.tl = timeline
        mi = options.max_iterations
        self.max_iter_py = mi
        self.max_iter = iteration_bound(options)
        self.jdev = backend.jax_devices
        self.state: dict[str, dict[str, Any]] = {
            d: {"err": jax.device_put(np.int32(0), self.jdev[d])} for d in backend.devices}
        for name, vn in plan.var_nodes.items():
            if name not in variables:
                variables[name] = np.array(vn.attrs["initial_value"], dtype=np.dtype(vn.attrs["dtype"]))
            d = plan.var_device[name]
            self.state[d][var_key(name)] = jax.device_put(variables[name], self.jdev[d])
        for k, (d, dtype, shapes) in plan.stack_alloc.items():
            self.state[d][k] = stk.StackValue(plan.capacity, dtype).allocate(*shapes, self.jdev[d])
        # full stack chunks to host memory or kept on their device, per loop's swap_memory (or the memory
        # plan's); the cap and the budgets, counted per device
        self.stacks = SpanningStacks(plan.stack_info, backend.devices, plan.capacity,
                                     backend.options.device_memory_limit, plan.budget(options.memory_budget),
                                     plan.slot_bytes)
        for d in backend.devices:
            self.stacks.observe(d, self.state[d])
        self.lives: dict[Key, Any] = {}
        self.host_iterations: dict[str, int] = {}
        self.iteration = 0  # the innermost host loop's iteration, for trace labels
        # traced runs: id(value) -> (value, the span that produced it); the value is kept alive so
        # that its id is not reused during the run
        self.producer: dict[int, tuple[Any, int]] = {}
        # threaded runs (plan.threaded): each device's segment calls go to its own worker, in order
        self.pools = backend.pools() if plan.threaded else {}
        self.futures: list[Future[Any]] = []
        self.last_fut: dict[str, Future[Any]] = {}
        #: the first ``Retry`` of the run (stacks that outgrew their chunk within one call, read from an
        #: error word or returned by a driven loop): nothing of the run is kept from then on, the host
        #: dispatches no further step, and the executor runs it again with the larger chunk
        self.retry: Optional[Retry] = None

    # ---- steps ------------------------------------------------------------------------------------
    def steps(self, steps: list[Step], env: HostEnv) -> None:  # type: ignore[override]
        """Run a scope's steps in order: segment calls, and the conds and loops the host drives. None
        after a ``Retry`` (``self.retry``)."""
        for s in steps:
            if self.retry is not None:
                return
            if isinstance(s, Segment):
                self.segment(s, env)
            elif isinstance(s, HostCond):
                self.cond(s, env)
            else:
                self.loop(s, env)

    def segment(self, seg: Segment, env: HostEnv) -> None:
        if self.pools:
            self.segment_threaded(seg, env)
            return
        dev = seg.device
        jd = self.jdev[dev]
        env_in = {k: wrap_static(env.on(k, dev, jd)) for k in seg.reads if k in env.vals}
        t0 = self.tl.now() if self.tl else 0.0
        got = self.call(seg, env_in, self.state[dev])
        if isinstance(got, Retry):
            self.retry = self.retry or got
            return
        out, lives, state = got
        if self.tl is not None:
            self.tl.host(f"dispatch {seg.describe()}", t0, iteration=self.iteration)
            inputs = sorted({self.producer[id(env.vals[k])][1] for k in seg.reads
                             if k in env.vals and id(env.vals[k]) in self.producer})
            span = self.tl.dispatched(dev, seg.describe(), self.iteration, state["err"], inputs)
            for v in out.values():
                self.producer[id(v)] = (v, span)
        self.state[dev] = state
        for k, v in out.items():
            env.set(k, v, dev)
        self.lives.update(lives)

    def call(self, seg: Segment, env_in: dict[Key, Any], state: dict[str, Any]) -> Any:
        """One call of ``seg`` on its device's ``state``: ``(writes, live flags, new state)``. The
        stacks it pushes or pops are spilled or refilled first where the call needs it
        (``devices.swap``); a driven segment runs its loop chunk by chunk (``devices.region_driver``),
        and returns a ``Retry`` where its stacks outgrew their chunk within one call."""
        dev = seg.device
        if seg.fn is None:
            seg.fn = self.b.driver(self.plan, seg) if seg.driven else self.b.segment_fn(self.plan, seg)
        moves = self.plan.traffic.get(seg.index)
        with self.stacks.device_oom(moves, dev, seg.describe):
            if seg.driven:
                return seg.fn.run(env_in, state, self.max_iter, self.stacks, dev)
            if moves:
                rest, stacks = stk.split_state(state)
                state = {**rest, **self.stacks.before(moves, dev, stacks)}
            out, lives, new = seg.fn(env_in, state, self.max_iter)
        if moves:
            self.stacks.after(moves, dev, new)
        return out, lives, new

    def segment_threaded(self, seg: Segment, env: HostEnv) -> None:
        """Hand the segment's call to its device's worker; its outputs become ``Lazy`` values. The
        worker resolves the inputs (waiting for the calls that make them), copies those from other
        devices, and calls the segment on the device state it holds."""
        dev = seg.device
        jd = self.jdev[dev]
        inputs = {k: (env.vals[k], env.where.get(k)) for k in seg.reads if k in env.vals}
        tl, name, iteration = self.tl, seg.describe(), self.iteration

        def job() -> Any:
            with jax.enable_x64(True):  # thread-local: the worker computes as the host thread does
                return work()

        def work() -> Any:
            env_in = {}
            for k, (v, w) in inputs.items():
                if isinstance(v, Lazy):
                    data = v.data
                    v = v.get()
                    if isinstance(v, (np.ndarray, np.generic)):
                        if data:
                            v = jax.device_put(v, jd)
                    elif v is not DEAD and w != dev:
                        v = jax.device_put(v, jd)
                elif w is not None and w != dev:
                    v = jax.device_put(v, jd)
                env_in[k] = wrap_static(v)
            t0 = tl.now() if tl else 0.0
            # on this device's worker, the only thread that touches its state and stacks
            got = self.call(seg, env_in, self.state[dev])
            if isinstance(got, Retry):  # the host stops dispatching; what waits on this call reads dead values
                self.retry = self.retry or got
                return {}, {}, self.state[dev]["err"]
            out, lives, state = got
            self.state[dev] = state
            if tl is not None:
                # a traced worker waits for its call: the span is then exactly the segment's run
                jax.block_until_ready(state["err"])
                tl.ran(dev, name, iteration, t0, tl.now())
            return out, lives, state["err"]

        fut = self.pools[dev].submit(job)
        self.futures.append(fut)
        self.last_fut[dev] = fut
        for k in seg.writes:
            env.set(k, Lazy(fut, k), dev)
        for k in seg.fetched:
            self.lives[k] = Lazy(fut, k, live=True)

    def on_workers(self, fn: Any) -> None:
        """Run ``fn`` now, or in a threaded run after every segment call handed to the workers so far
        (on one worker, once the others have drained: the device stores are theirs until then)."""
        if not self.pools:
            fn()
            return
        pending = list(self.futures)

        def job() -> None:
            for f in pending:
                if not f.done():
                    f.exception()  # wait; a failure is raised by drain
            fn()

        fut = next(iter(self.pools.values())).submit(job)
        self.futures.append(fut)

    def drain(self) -> None:
        """Wait for every segment call handed to a worker; raise the first failure."""
        first: Optional[BaseException] = None
        for f in self.futures:
            try:
                f.result()
            except BaseException as e:  # noqa: BLE001 - the first one is raised below
                first = first or e
        self.futures.clear()
        if first is not None:
            raise first

    def _retire(self, errs: list[Any]) -> None:
        """Wait for an iteration's segments (their error words) and act on its first error."""
        t0 = self.tl.now() if self.tl else 0.0
        codes = [int(np.asarray(e.result()[2] if isinstance(e, Future) else e)) for e in errs]
        if self.tl:
            self.tl.host("wait: parallel_iterations window", t0)
        for c in codes:
            if c:
                self.check(c)
                return

    def finish(self) -> None:
        """Wait for every call and act on the first error word of any device."""
        self.drain()
        for d in self.b.devices:
            c = int(np.asarray(self.state[d]["err"]))
            if c and self.retry is None:
                self.check(c)

    def check(self, code: int) -> None:
        """Act on a nonzero error word (``outcome.decode``): its error raised, or, for stacks that
        outgrew their chunk within one call (an inner loop compiled whole), or ran empty inside one
        after chunks were moved out of it, the ``Retry`` kept (``self.retry``), as the one-device
        backend returns it."""
        got = self.b.outcome_of(self.plan, code, self.stacks.moved())
        if isinstance(got, Retry):
            self.retry = self.retry or got
        else:
            enforce(got)



__all__ = ["HOST_CALLBACK_OPS", "DevicePlan", "PlanRun"]
