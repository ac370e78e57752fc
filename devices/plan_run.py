"""One run of the fast partitioned executor's per-device tiers: the plan it runs and the run itself.

Why a module of its own: ``devices.fast_executor`` decides which tier takes a run and reports it;
this module makes the per-device tiers' plan (``DevicePlan``: the program cut by device,
``fast.cut``, a ``fast.step_plan.StepPlan`` as the one-device plan is, whose steps it compiles as
that plan compiles its stages) and runs it with the one runner (``fast.runner.StepRunner``), adding what only a run
over several devices has: each device's state placed there, the segment calls dispatched from
per-device workers when a segment holds a host callback.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Optional

import jax
import numpy as np

from turnout.devices.names import parse
from turnout.fast import stacks as stk
from turnout.fast.cut import Schedule, Segment
from turnout.fast.device_stacks import DeviceStacks
from turnout.fast.emit import var_key
from turnout.fast.host_env import HostEnv, Lazy
from turnout.fast.outcome import Retry
from turnout.fast.plan import stack_dtype, stack_infos, static_stack_shapes
from turnout.fast.regions import Key, Program, item_nodes, program_nodes
from turnout.fast.runner import RunPolicy, StepRunner
from turnout.fast.step_plan import CompileCounter, StepPlan
from turnout.fast.timeline import Timeline, device_track
from turnout.fast.values import DEAD, wrap_static
from turnout.fast.variable_store import start_entry
from turnout.session import RunOptions
from turnout.slot_sizes import SlotPlan

if TYPE_CHECKING:
    from turnout.devices.fast_executor import FastPartitionedBackend

#: ops lowered to host callbacks: on CPU a compiled call that contains one runs synchronously (the
#: call returns only when it has run), so a plan with such a segment dispatches from per-device threads
#: (``FastPartitionedBackend(threads="always")`` makes every plan dispatch so)
HOST_CALLBACK_OPS = frozenset({"Sleep"})
#: how errors of this executor name it (``outcome.decode``)
WHO = "fast partitioned executor"


class DevicePlan(StepPlan):
    """Everything made once per (graph version, fetches, feed signature, variable signature, capacity)."""

    def __init__(self, backend: CompileCounter, program: Program, sched: Schedule, fed: set[int], capacity: int,
                 device_of: dict[int, str], threads: str = "auto", platform: str = "cpu",
                 static_feeds: Optional[dict[Key, np.ndarray]] = None, *, slots: SlotPlan) -> None:
        super().__init__(backend, program, fed, capacity, slots, static_feeds)
        self.platform = platform  # where the stacks live, for the memory plan (``budget``)
        self.schedule = sched
        nodes = {n.id: n for n in program_nodes(program)}
        self.var_device = {name: device_of[n.id] for name, n in self.var_nodes.items()}
        self.threaded = bool(sched.segments) if threads == "always" else any(
            n.op in HOST_CALLBACK_OPS for seg in sched.segments for it in seg.items for n in item_nodes(it))
        # stack key -> (device, dtype, (element shape, index shape), or None where its pushes' shapes are
        # not static): in its device's state before the run, as the one-device backend does, allocated
        # or pending, so that a loop compiled whole on one device carries it from its first iteration
        # (a stack made inside the loop, at its first push or at a pop of a stack nothing pushed, would
        # change the loop carry's type)
        static = static_stack_shapes(list(nodes.values()))
        self.stack_alloc: dict[str, tuple[str, Any, Any]] = {
            stk.state_key(sid): (device_of[sid], stack_dtype(n), static.get(sid))
            for sid, n in nodes.items() if n.op == "StackNew"}
        # the stacks' loops and swap_memory (``fast.device_stacks``)
        self.stack_info = stack_infos(nodes.values())
        #: per device, the bytes of the checkpoint slots (sized as the one-device backend sizes them,
        #: ``turnout.slot_sizes``: the backend's ``SlotSizes.plan``) its forward loops keep there, counted
        #: with the stacks
        self.slot_bytes: dict[str, dict[str, int]] = self.slots.bytes_by_device(device_of)


class PlanRun(StepRunner):
    """One run of a plan: the one runner (``fast.runner``) over the plan's devices, dispatching from
    per-device worker threads where the plan holds a host callback."""

    retry: Optional[Retry]

    def __init__(self, backend: FastPartitionedBackend, plan: DevicePlan, variables: dict[str, np.ndarray],
                 options: RunOptions, timeline: Optional[Timeline]) -> None:
        self.b = backend
        jdev = backend.jax_devices
        state: dict[str, dict[str, Any]] = {d: {"err": jax.device_put(np.int32(0), jdev[d])} for d in backend.devices}
        for name, vn in plan.var_nodes.items():
            start_entry(variables, vn)
            d = plan.var_device[name]
            state[d][var_key(name)] = jax.device_put(variables[name], jdev[d])
        for k, (d, dtype, shapes) in plan.stack_alloc.items():
            pending = stk.StackValue(plan.capacity, dtype)
            state[d][k] = pending if shapes is None else pending.allocate(*shapes, jdev[d])
        # full stack chunks to host memory or kept on their device, per loop's swap_memory (or the memory
        # plan's); the cap and the budgets, counted per device
        stacks = DeviceStacks(plan.stack_info, backend.devices, plan.capacity, backend.options.device_memory_limit,
                              plan.budget(options.memory_budget), plan.slot_bytes, who=WHO,
                              label=lambda d: parse(d).short)
        super().__init__(plan, state, stacks, jdev, options, RunPolicy(WHO), timeline)
        self.plan: DevicePlan = plan
        # threaded runs (plan.threaded): each device's segment calls go to its own worker, in order
        self.pools = backend.pools() if plan.threaded else {}
        self.futures: list[Future[Any]] = []

    # ---- steps ------------------------------------------------------------------------------------
    def segment(self, seg: Segment, env: HostEnv) -> None:
        """A segment call: handed to its device's worker in a threaded run, else the runner's."""
        if self.pools:
            self.segment_threaded(seg, env)
            return
        super().segment(seg, env)

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
            t0 = tl.now() if tl is not None else 0.0
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
                tl.ran(device_track(dev), name, t0, tl.now(), iteration=iteration)
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

    def finish(self) -> None:
        """Wait for every call, then act on the first error word of any device."""
        self.drain()
        super().finish()

    def settle(self) -> None:
        """After a run, however it ended: every call handed to a worker waited for (the run's own
        error, or its result, is what is reported), then the runner's settling."""
        if self.pools:
            try:
                self.drain()
            except BaseException:  # noqa: BLE001 - the run's own error (or result) is what is reported
                pass
        super().settle()


__all__ = ["HOST_CALLBACK_OPS", "WHO", "DevicePlan", "PlanRun"]
