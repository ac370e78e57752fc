"""The fast partitioned executor: ``tn.Session(graph, backend="fast", devices=[...])`` on JAX devices.

Why this shape. The graph is placed exactly as the partitioned reference executor places it
(``devices.placement.place``), so both run the same placement and the reference one is the oracle.
It is then raised once, unpartitioned, to the fast backend's region tree (``fast.functionalize``),
and the tree is cut by device (``devices.segments``). Cross-device values move with
``jax.device_put`` instead of Send/Recv nodes: inside one process a transfer is a copy between device
buffers, and a copy is what a Send/Recv pair would do.

A graph placed wholly on one device is simply the unpartitioned fast backend's program, and runs on
that backend with the device as JAX's default (``stats['tier'] == "one device"``). Otherwise three
tiers, tried in this order:

1. **Whole program**: ``turnout.devices.spmd.spmd_choice(graph, placement, fetches, fed)`` compiles a
   program whose every op lowers as ONE ``shard_map`` program, in which the devices run each spanning
   loop in lockstep. It is tried where lockstep costs nothing — every loop spanning devices has
   ``parallel_iterations == 1`` (``whole_program="auto"``, see ``wants_whole_program``; ``"always"`` and
   ``"never"`` force the choice) — and when it declines (or a traced run asks for a per-device
   timeline) the run goes on below.
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
device of the last run. The SPMD tier cannot swap or count bytes per device, so it is passed over when
either is asked for (``cannot_swap``).

What the fast path cannot run (``UnsupportedError`` while raising or tracing) runs on the partitioned
reference executor with a ``RuntimeWarning``, as the unpartitioned fast backend falls back to the
reference interpreter; ``fallback=False`` raises instead. ``stats['executor']`` and ``stats['tier']`` say
which ran. Errors keep the reference types: kernel failures come back in a per-device error word,
``max_iterations`` is counted by compiled loops and by the host driver alike, and ``max_firings`` (a
count of firings, which compiled code does not make) is rejected unless left at its default.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
import warnings
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout.devices.jax_device import jax_device
from turnout.devices.names import DeviceSpec, canonical, parse
from turnout.devices.placement import Placement, place
from turnout.devices.region_driver import RegionDriver
from turnout.devices.segments import HostCond, HostLoop, Schedule, Segment, Step, schedule, steps_of
from turnout.devices.spmd import spmd_choice
from turnout.devices.swap import SpanningStacks, pushed_in, stack_infos, traffic
from turnout.errors import (
    ArgumentError,
    DeadFetchError,
    FeedError,
    NonTerminationError,
    PlacementError,
    UnsupportedError,
    dead_fetch_message,
    describe_node,
    runaway_message,
)
from turnout.fast import stacks as stk
from turnout.fast.backend import variable_signature
from turnout.fast.emit import Emitter, var_key
from turnout.fast.functionalize import functionalize
from turnout.fast.guards import iteration_bound, refuse_firing_budget
from turnout.fast.outcome import ErrorCodes, StacksOutgrown, decode, enforce
from turnout.fast.plan import stack_dtype, stack_source_var, static_stack_shapes
from turnout.fast.regions import Key, Program, WhileRegion, item_nodes, key, pred_reader, program_nodes
from turnout.fast.values import DEAD, Handle, to_host, wrap_static
from turnout.fast_options import FastOptions, fast_options
from turnout.graph import Graph, Tensor
from turnout.kernels import truth
from turnout.run_schedule import RunSchedule
from turnout.run_schedule import Step as RunStep
from turnout.session import RunOptions, RunResult

#: how errors of this executor name it (``outcome.decode``)
WHO = "fast partitioned executor"


class _Env:
    """A scope's values on the host side, with the device each lives on, and the copies already made
    to other devices (so a value read by two segments on one device crosses once)."""

    def __init__(self, vals: Optional[dict[Key, Any]] = None, where: Optional[dict[Key, Optional[str]]] = None,
                 copies: Optional[dict[Key, dict[str, Any]]] = None) -> None:
        self.vals: dict[Key, Any] = dict(vals or {})
        self.where: dict[Key, Optional[str]] = dict(where or {})
        self.copies: dict[Key, dict[str, Any]] = dict(copies or {})

    def child(self) -> _Env:
        return _Env(self.vals, self.where, self.copies)

    def set(self, k: Key, v: Any, device: Optional[str]) -> None:
        self.vals[k] = v
        self.where[k] = _where(v, device)
        self.copies.pop(k, None)

    def take(self, k: Key, other: _Env, src: Key) -> None:
        """``self[k] = other[src]``, keeping where it lives."""
        self.set(k, other.vals[src], other.where.get(src))

    def on(self, k: Key, device: str, jdev: Any) -> Any:
        v = self.vals[k]
        w = self.where.get(k)
        if w is None or w == device:
            return v
        per = self.copies.get(k)
        got = per.get(device) if per is not None else None
        if got is None:
            got = jax.device_put(v, jdev)
            # a fresh dict: a child scope's copy must not show up in its parent's cache
            self.copies[k] = {**(per or {}), device: got}
        return got


def _where(v: Any, device: Optional[str]) -> Optional[str]:
    """The device a value lives on; None for values known on the host (numpy, dead, handles)."""
    if v is DEAD or isinstance(v, (np.ndarray, np.generic, Handle)) or device is None:
        return None
    return device if jax.tree_util.tree_leaves(v) else None


#: ops lowered to host callbacks: on CPU a compiled call that contains one runs synchronously (the
#: call returns only when it has run), so a plan with such a segment dispatches from per-device threads
#: (``FastPartitionedBackend(threads="always")`` makes every plan dispatch so)
HOST_CALLBACK_OPS = frozenset({"Sleep"})
#: when a plan dispatches its segments from per-device threads: ``"auto"``, when a segment holds a host
#: callback (``HOST_CALLBACK_OPS``); ``"always"``, every plan with segments (to test that dispatch)
THREADS = ("auto", "always")


class _Lazy:
    """A segment output the host has not needed yet, in a threaded run: the future of the segment's
    call and the key. ``get`` waits for the call (not for the device: the value may still be computing)."""

    __slots__ = ("data", "fut", "k", "live")

    def __init__(self, fut: Future[Any], k: Key, live: bool = False, data: bool = False) -> None:
        # data: a loop variable, which enters the next iteration as a device value even when it was
        # known at trace time (as the host driver does for values it holds), so segments trace once
        self.fut, self.k, self.live, self.data = fut, k, live, data

    def get(self) -> Any:
        out, lives, _ = self.fut.result()
        if self.live:
            return lives.get(self.k, True)
        if self.k[1] == -1:  # a node's deadness marker: absent means the node fired live
            return out.get(self.k)
        return out.get(self.k, DEAD)


def _now(v: Any) -> Any:
    """The value itself, waiting for the segment call that makes it if need be."""
    return v.get() if isinstance(v, _Lazy) else v


class _Plan:
    """Everything made once per (graph version, fetches, feed signature, variable signature, capacity)."""

    def __init__(self, program: Program, sched: Schedule, fed: set[int], capacity: int,
                 device_of: dict[int, str], threads: str = "auto") -> None:
        self.program = program
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


class DeviceTimeline:
    """The trace of a fast partitioned run: one track per device, plus the host's track.

    Why watcher threads and not callbacks: under asynchronous dispatch the host's call returns before
    the device runs, so a host-side span says when work was *dispatched*, not when it ran; and a host
    callback inside a compiled segment makes its dispatch synchronous on CPU (measured: the call returns
    only when the segment has run), which would hide the very overlap the trace is meant to show. So a
    traced run dispatches the same compiled segments, and one watcher thread per device waits for each
    segment's error word (every output of one execution becomes ready together) and stamps its end.
    A segment's start is inferred as the latest of its dispatch, the end of the previous segment on its
    device (a device runs its segments in order) and the ends of the segments that produced its inputs.
    In a threaded run (segments with host callbacks, dispatched by per-device workers) the worker itself
    waits for each traced call, so those spans are measured, not inferred.
    Exports to the Chrome trace-event format (ui.perfetto.dev, chrome://tracing): one row per device.
    """

    def __init__(self) -> None:
        self._t0 = time.perf_counter()
        self.spans: list[dict[str, Any]] = []
        self._queues: dict[str, Any] = {}
        self._threads: list[threading.Thread] = []
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()

    def now(self) -> float:
        """Seconds since the run started."""
        return time.perf_counter() - self._t0

    def host(self, name: str, start: float, **args: Any) -> None:
        """A span on the host track, from ``start`` to now."""
        with self._lock:
            self.spans.append({"track": "host", "name": name, "start_s": start, "dur_s": self.now() - start,
                               "args": args})

    def dispatched(self, device: str, name: str, iteration: int, done: Any, inputs: list[int]) -> int:
        """Record a segment just dispatched on ``device``; ``done`` becomes ready when it has run,
        ``inputs`` are the spans that produced its inputs. Returns the new span's index."""
        with self._lock:
            i = len(self.spans)
            self.spans.append({"track": device, "name": name, "start_s": self.now(),
                               "dur_s": 0.0, "args": {"iteration": iteration}, "_inputs": inputs,
                               "_prev": self._last.get(device), "_end": None})
            self._last[device] = i
            q = self._queues.get(device)
            if q is None:
                q = self._queues[device] = queue.SimpleQueue()
                t = threading.Thread(target=self._watch, args=(q,), name=f"turnout-trace-{device}", daemon=True)
                t.start()
                self._threads.append(t)
        q.put((i, done))
        return i

    def ran(self, device: str, name: str, iteration: int, start: float, end: float) -> None:
        """A segment whose start and end are known (a threaded run's worker waited for it)."""
        with self._lock:
            self.spans.append({"track": device, "name": name, "start_s": start, "dur_s": end - start,
                               "args": {"iteration": iteration}})

    def _watch(self, q: Any) -> None:
        while True:
            item = q.get()
            if item is None:
                return
            i, done = item
            try:
                jax.block_until_ready(done)
            finally:
                self.spans[i]["_end"] = self.now()

    def close(self) -> None:
        """Wait for the watchers, then settle every device span's start and duration."""
        for q in self._queues.values():
            q.put(None)
        for t in self._threads:
            t.join()
        self._queues.clear()
        self._threads.clear()
        for s in self.spans:
            if "_end" not in s:
                continue
            end = s.pop("_end")
            deps = [self.spans[j] for j in s.pop("_inputs")]
            prev = s.pop("_prev")
            if prev is not None:
                deps.append(self.spans[prev])
            start = max([s["start_s"]] + [d["start_s"] + d["dur_s"] for d in deps])
            s["start_s"] = min(start, end)
            s["dur_s"] = end - s["start_s"]

    def device_spans(self, device: str) -> list[dict[str, Any]]:
        """The spans of one device, in start order."""
        return sorted((s for s in self.spans if s["track"] == device), key=lambda s: s["start_s"])

    def summary(self) -> dict[str, Any]:
        """Spans and busy seconds per track."""
        tracks = sorted({s["track"] for s in self.spans})
        return {t: {"spans": sum(1 for s in self.spans if s["track"] == t),
                    "seconds": sum(s["dur_s"] for s in self.spans if s["track"] == t)} for t in tracks}

    def to_chrome(self) -> dict[str, Any]:
        """The Chrome trace-event format: one row (thread) per device and one for the host."""
        tracks = ["host"] + sorted({s["track"] for s in self.spans} - {"host"})
        tid = {t: i for i, t in enumerate(tracks)}
        meta = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": t}} for t, i in tid.items()]
        out = [{"name": s["name"], "cat": s["track"], "ph": "X", "ts": 1e6 * s["start_s"], "dur": 1e6 * s["dur_s"],
                "pid": 0, "tid": tid[s["track"]], "args": s["args"]} for s in self.spans]
        return {"traceEvents": meta + out, "displayTimeUnit": "ms"}

    def save_chrome(self, path: str) -> None:
        """Write ``to_chrome()`` as JSON."""
        import json

        with open(path, "w") as f:
            json.dump(self.to_chrome(), f)

    def __len__(self) -> int:
        return len(self.spans)


def _switched(env: _Env, switches: Sequence[Any], taken: int) -> _Env:
    """A child of ``env`` past ``switches``: each forwards its input to output ``taken``; the other
    output is dead (a cond's branch, a loop's body with 1, its exit side with 0)."""
    out = env.child()
    for s in switches:
        out.take(key(s.outputs[taken]), env, key(s.inputs[0]))
        out.set(key(s.outputs[1 - taken]), DEAD, None)
    return out


class _Run:
    """One run of a plan: per-device state (error word, Variables, stacks) and the host driver."""

    def __init__(self, backend: FastPartitionedBackend, plan: _Plan, variables: dict[str, np.ndarray],
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
        # full stack chunks to host memory or kept on their device, per loop's swap_memory; the cap
        self.stacks = SpanningStacks(plan.stack_info, backend.devices, plan.capacity,
                                     backend.options.device_memory_limit)
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

    # ---- steps ------------------------------------------------------------------------------------
    def steps(self, steps: list[Step], env: _Env) -> None:
        for s in steps:
            if isinstance(s, Segment):
                self.segment(s, env)
            elif isinstance(s, HostCond):
                self.cond(s, env)
            else:
                self.loop(s, env)

    def segment(self, seg: Segment, env: _Env) -> None:
        if self.pools:
            self.segment_threaded(seg, env)
            return
        dev = seg.device
        jd = self.jdev[dev]
        env_in = {k: wrap_static(env.on(k, dev, jd)) for k in seg.reads if k in env.vals}
        t0 = self.tl.now() if self.tl else 0.0
        out, lives, state = self.call(seg, env_in, self.state[dev])
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
        (``devices.swap``); a driven segment runs its loop chunk by chunk (``devices.region_driver``)."""
        dev = seg.device
        if seg.fn is None:
            seg.fn = self.b.driver(self.plan, seg) if seg.driven else self.b.segment_fn(self.plan, seg)
        moves = self.plan.traffic.get(seg.index)
        with self.stacks.device_oom(moves, dev, seg.describe):
            if seg.driven:
                return seg.fn.run(env_in, state, self.max_iter, self.stacks, dev)
            rest, stacks = stk.split_state(state)
            if moves:
                stacks = self.stacks.before(moves, dev, stacks)
            out, lives, new = seg.fn(env_in, rest, stacks, self.max_iter)
        if moves:
            self.stacks.after(moves, dev, new)
        return out, lives, new

    def segment_threaded(self, seg: Segment, env: _Env) -> None:
        """Hand the segment's call to its device's worker; its outputs become ``_Lazy`` values. The
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
                if isinstance(v, _Lazy):
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
            out, lives, state = self.call(seg, env_in, self.state[dev])
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
            env.set(k, _Lazy(fut, k), dev)
        for k in seg.fetched:
            self.lives[k] = _Lazy(fut, k, live=True)

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

    def cond(self, hc: HostCond, env: _Env) -> None:
        """A cond whose branches span devices: the host reads the predicate, runs the taken branch's
        steps, and joins its Merges and exports into ``env`` (all dead for a dead predicate)."""
        r = hc.region
        p = _now(env.vals[key(r.pred)])
        exports = self._cond_exports(hc)
        if p is DEAD:
            for m, _ in r.merges:
                env.set(key(m.outputs[0]), DEAD, None)
                env.set(key(m.outputs[1]), DEAD, None)
            for k in exports:
                env.set(k, DEAD, None)
            return
        t0 = self.tl.now() if self.tl else 0.0
        b = truth(p, lambda: describe_node(pred_reader(r)))  # the one value the host must read
        if self.tl:
            self.tl.host(f"read predicate of {r.describe()}", t0, value=b)
        benv = _switched(env, r.switches, int(b))
        self.steps(hc.branches[b], benv)
        self._join(hc, b, benv, env, exports)

    def _cond_exports(self, hc: HostCond) -> list[Key]:
        """What leaves a host cond besides its Merges: its exports and the fetches it computes."""
        r = hc.region
        joins = {m.id for m, _ in r.merges}
        return sorted({key(o) for n in r.nodes if n.id not in joins for o in n.outputs
                       if key(o) in self.plan.program.fetch_keys} | set(r.exports))

    @staticmethod
    def _join(hc: HostCond, b: bool, benv: _Env, env: _Env, exports: list[Key]) -> None:
        """Branch ``b``'s results into ``env``: each Merge forwards the input of that branch (and its
        index), or is dead where the branch has none; an export the branch did not make is dead."""
        for m, slots in hc.region.merges:
            if b in slots:
                env.take(key(m.outputs[0]), benv, key(m.inputs[slots[b]]))
                env.set(key(m.outputs[1]), np.asarray(slots[b], np.int32), None)
            else:
                env.set(key(m.outputs[0]), DEAD, None)
                env.set(key(m.outputs[1]), DEAD, None)
        for k in exports:
            if k in benv.vals:
                env.take(k, benv, k)
            else:
                env.set(k, DEAD, None)

    def loop(self, hl: HostLoop, env: _Env) -> None:
        """A loop whose body spans devices, driven by the host one iteration at a time: the header's
        steps, a read of the predicate, the body's steps; then the exit side, into ``env``. The loop
        variables stay where they are between iterations, and at most ``parallel_iterations``
        iterations run ahead of the ones whose error words have been read."""
        r = hl.region
        base = env.child()
        for inv in r.invariants:
            base.take(key(inv.outputs[0]), env, key(inv.inputs[0]))
        vals = [(_now(env.vals[key(e.inputs[0])]), env.where.get(key(e.inputs[0]))) for e, _, _, _, _ in r.loop_vars]
        if any(v is DEAD for v, _ in vals):
            for x in r.exits:
                env.set(key(x.outputs[0]), DEAD, None)
            return
        outer_iteration = self.iteration
        henv, iters = self._iterate(hl, base, vals)
        self.iteration = outer_iteration
        pushed = self.plan.loop_pushes.get(id(hl))
        if pushed:
            self.on_workers(lambda: self.stacks.loop_ended(pushed))
        name = str(r.frame[-1])
        self.host_iterations[name] = self.host_iterations.get(name, 0) + iters
        eenv = _switched(henv, r.switches, 0)
        self.steps(hl.exit_side, eenv)
        for x in r.exits:
            env.take(key(x.outputs[0]), eenv, key(x.inputs[0]))

    def _iterate(self, hl: HostLoop, base: _Env, vals: list[tuple[Any, Optional[str]]]) -> tuple[_Env, int]:
        """Run iterations until the predicate is false: the environment of the last header (where the
        exit side starts) and the number of iterations run."""
        r = hl.region
        window: deque[list[Any]] = deque()
        depth = max(1, int(r.parallel_iterations))
        iters = 0
        while True:
            henv = self._enter_iteration(hl, base, vals, first=iters == 0)
            self.iteration = iters
            self.steps(hl.header, henv)
            if not self._go(hl, henv, iters):
                return henv, iters
            if self.max_iter_py is not None and iters >= self.max_iter_py:
                raise NonTerminationError(runaway_message(r.describe(), self.max_iter_py))
            while len(window) >= depth:  # at most parallel_iterations iterations in flight
                self._retire(window.popleft())
            benv = _switched(henv, r.switches, 1)
            self.steps(hl.body, benv)
            vals = [(benv.vals[key(nx.inputs[0])], benv.where.get(key(nx.inputs[0]))) for _, _, nx, _, _ in
                    r.loop_vars]
            if self.pools:
                window.append([self.last_fut[d] for d in hl.devices if d in self.last_fut])
            else:
                window.append([self.state[d]["err"] for d in hl.devices])
            iters += 1

    def _enter_iteration(self, hl: HostLoop, base: _Env, vals: list[tuple[Any, Optional[str]]],
                         first: bool) -> _Env:
        """One iteration's environment: each loop variable's Merge holds its value (from the Enter at
        the first iteration, from the NextIteration after) and which input it came from."""
        henv = base.child()
        for (_, m, _, es, ns), (v, w) in zip(hl.region.loop_vars, vals, strict=True):
            if isinstance(v, (np.ndarray, np.generic)):
                # a loop variable known on the host enters as a device value, so the segments are
                # traced once for the loop, not once per value
                v, w = jax.device_put(np.asarray(v), self.jdev[hl.home]), hl.home
            elif isinstance(v, _Lazy):
                v = _Lazy(v.fut, v.k, data=True)
            henv.set(key(m.outputs[0]), v, w)
            henv.set(key(m.outputs[1]), np.asarray(es if first else ns, np.int32), None)
        return henv

    def _go(self, hl: HostLoop, henv: _Env, iters: int) -> bool:
        """The host reads the predicate, and nothing else; the LoopCond forwards it."""
        r = hl.region
        pkey = key(r.loop_cond.inputs[0])
        pred = _now(henv.vals[pkey])
        t0 = self.tl.now() if self.tl else 0.0
        go = pred is not DEAD and truth(pred, lambda: describe_node(r.loop_cond))
        if self.tl:
            self.tl.host(f"read predicate of {r.describe()}", t0, iteration=iters, value=go)
        henv.take(key(r.loop_cond.outputs[0]), henv, pkey)
        return go

    def _retire(self, errs: list[Any]) -> None:
        """Wait for an iteration's segments (their error words) and stop at its first error."""
        t0 = self.tl.now() if self.tl else 0.0
        codes = [int(np.asarray(e.result()[2] if isinstance(e, Future) else e)) for e in errs]
        if self.tl:
            self.tl.host("wait: parallel_iterations window", t0)
        for c in codes:
            if c:
                self.b.raise_code(self.plan, c, self.stacks.moved())

    def finish(self) -> None:
        self.drain()
        for d in self.b.devices:
            c = int(np.asarray(self.state[d]["err"]))
            if c:
                self.b.raise_code(self.plan, c, self.stacks.moved())


class FastPartitionedBackend:
    """``tn.Session(graph, backend="fast", devices=[...])``: place the graph, compile what sits on one
    device, drive from the host what spans devices (see the module docstring).

    Options: ``devices`` (names, at least one; each must be a JAX device of this process), ``requests``
    (soft placement, as for the reference partitioned executor), ``allow_soft_placement`` (as for the
    reference partitioned executor: a colocation conflict or an absent device resolved by the rules of
    ``devices.placement``), and of the fast backend's
    ``FastOptions`` (``options=`` or keywords, as for ``backend="fast"``) those of ``PARTITIONED_FIELDS``:
    ``stack_chunk`` (gradient stack capacity per chunk, default 1024), ``fallback`` (default True: run
    on the partitioned reference executor what cannot be compiled, with a RuntimeWarning; False raises
    the UnsupportedError),
    ``whole_program`` (``"auto"``, ``"always"`` or ``"never"``: when the SPMD tier runs, see
    ``wants_whole_program``), ``device_memory_limit`` (bytes of gradient stacks a run may hold on each
    device, as for the one-device fast backend; crossing it is ``ResourceExhaustedError`` naming the
    loop), ``threads`` (``"auto"``, default: a plan dispatches its segments from per-device threads when
    one holds a host callback; ``"always"``: every plan does, see ``THREADS``), and ``order`` / ``seed``,
    passed to the partitioned reference executor when it runs.
    """

    def __init__(self, graph: Graph, devices: Sequence[str | DeviceSpec] = (),
                 requests: Optional[dict[str, str]] = None, order: str = "round_robin", seed: int = 0,
                 whole_program: str = "auto", threads: str = "auto", options: Optional[FastOptions] = None,
                 allow_soft_placement: bool = False, **fields: Any) -> None:
        #: the fast backend's options (``turnout.fast_options``); only ``PARTITIONED_FIELDS`` may differ
        #: from their defaults, as the per-device tiers honour no other
        self.options = fast_options(options, fields, "FastPartitionedBackend")
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
        self.graph = graph
        self.requests = dict(requests or {})
        self.allow_soft_placement = allow_soft_placement
        self.whole_program = whole_program
        self.order = order
        self.seed = seed
        if not devices:
            raise PlacementError("the fast partitioned executor needs at least one device (devices=[...])")
        self.devices = [canonical(d) for d in devices]
        self.jax_devices = {d: jax_device(d) for d in self.devices}
        self.compile_count = 0
        self._placement: Optional[tuple[int, Placement, frozenset[str]]] = None
        self._plans: dict[Any, _Plan] = {}
        self._fallback: dict[Any, str] = {}
        #: the whole-program (SPMD) plan per run signature, None where the program is not eligible
        self._whole: dict[Any, Any] = {}
        #: why the SPMD tier was not tried although ``whole_program`` asked for it (``cannot_swap``)
        self._whole_declined: dict[Any, str] = {}
        #: the unpartitioned fast backend, for graphs placed wholly on one device (``_run_one_device``)
        self._single: Any = None
        self._single_ran = False
        self._reference: Any = None
        self._records: list[dict[str, Any]] = []
        self._pools: dict[str, ThreadPoolExecutor] = {}
        self.placement  # noqa: B018 - unknown devices and conflicts are reported when the Session is made

    def pools(self) -> dict[str, ThreadPoolExecutor]:
        """One single-thread worker per device, made on first use, for plans whose segments run host
        callbacks (see ``HOST_CALLBACK_OPS``); ``close()`` stops them."""
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
        return self._placed()[1]

    def _placed(self) -> tuple[int, Placement, frozenset[str]]:
        """(graph version, its placement, the devices that placement uses), made once per version: a
        run asks which devices are used, and that must not cost a pass over the graph each time."""
        if self._placement is None or self._placement[0] != self.graph.version:
            placement = place(self.graph, self.devices, self.requests, self.allow_soft_placement)
            self._placement = (self.graph.version, placement, frozenset(placement.device_of.values()))
        return self._placement

    def memory_records(self) -> list[dict[str, Any]]:
        """Gradient stack memory of the last run, one record per (loop, device): ``device_bytes`` (held
        when the forward loop ended), ``peak_device_bytes``, ``host_bytes`` (held in host memory then),
        ``chunks_to_host``, ``chunks_from_host`` and ``chunks_kept_on_device`` (see ``devices.swap``)."""
        if self._single_ran:
            return self._single.memory_records()  # type: ignore[no-any-return]
        return [dict(r) for r in self._records]

    def explain(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray]
                ) -> RunSchedule:
        """How a run of ``fetches`` executes (``Session.explain``), read from the plans the run would
        take, with nothing compiled: the one-device backend's schedule on a graph placed on one
        device, the SPMD program where that tier takes the run, else the per-device segments with the
        loops and conds the host drives (``devices.segments.steps_of``)."""
        _, placement, used = self._placed()
        if len(used) == 1:
            (device,) = used
            inner = self._one_device().explain(fetches, feeds, variables)
            step = RunStep("one device", "every node is placed here: the one-device fast backend's schedule",
                        parse(device).short, (*inner.steps, *inner.otherwise))
            return RunSchedule("fast (partitioned)", (step,), notes=inner.notes)
        sig = self._signature(fetches, feeds, variables)
        if sig in self._fallback:
            return RunSchedule("fast (partitioned)", (RunStep("interpreter", "the partitioned reference executor "
                                                                          f"(fallback: {self._fallback[sig]})"),))
        whole = self._whole_program(sig, placement, fetches, feeds)
        with jax.enable_x64(True):
            plan = self._plan(sig, fetches, feeds, self.options.stack_chunk)
        per_device = steps_of(plan.schedule.steps)
        notes = (f"the SPMD tier declined: {self._whole_declined[sig]}",) if sig in self._whole_declined else ()
        if whole is not None:
            over = ", ".join(parse(d).short for d in sorted(used))
            spmd = RunStep("spmd program", f"one shard_map program over {over}, spanning loops in lockstep")
            return RunSchedule("fast (partitioned)", (spmd,), per_device, notes)
        return RunSchedule("fast (partitioned)", per_device, notes=notes)

    def _signature(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray]) -> Any:
        return (self.graph.version, tuple(key(t) for t in fetches),
                tuple(sorted((key(t), np.asarray(v).dtype.str, np.shape(v)) for t, v in feeds.items())),
                variable_signature(self.graph, variables))

    # ---- run --------------------------------------------------------------------------------------
    def run(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
            options: RunOptions) -> RunResult:
        """One ``Session.run``: the whole-program tier if available, else compiled and host-driven
        segments, else (fallback) the partitioned reference executor."""
        refuse_firing_budget("fast partitioned executor", options)
        _, placement, used = self._placed()
        if len(used) == 1:
            return self._run_one_device(next(iter(used)), fetches, feeds, variables, options)
        self._single_ran = False
        sig = self._signature(fetches, feeds, variables)
        if sig in self._fallback:
            return self._run_reference(sig, fetches, feeds, variables, options)
        whole = None if options.trace else self._whole_program(sig, placement, fetches, feeds)
        if whole is not None:
            try:
                result: RunResult = whole.run(feeds, variables, options)
            except UnsupportedError as e:
                # An op that does not lower inside one multi-device program: found while tracing,
                # before anything ran, so the per-device tiers run the program instead.
                self._whole[sig] = None
                self._whole_declined[sig] = str(e)
            else:
                result.stats.setdefault("executor", "fast partitioned")
                result.stats.setdefault("tier", "spmd")
                return result
        try:
            result = self._run_compiled(sig, fetches, feeds, variables, options)
            if self._whole_declined.get(sig):
                result.stats["whole_program_declined"] = self._whole_declined[sig]
            return result
        except UnsupportedError as e:
            if not self.options.fallback:
                raise
            self._fallback[sig] = str(e)
            warnings.warn(f"{e}; this program runs on the partitioned reference executor instead (at interpreter "
                          "speed)", RuntimeWarning, stacklevel=4)
            return self._run_reference(sig, fetches, feeds, variables, options)

    def _run_one_device(self, device: str, fetches: list[Tensor], feeds: dict[Tensor, Any],
                        variables: dict[str, np.ndarray], options: RunOptions) -> RunResult:
        """A graph placed wholly on one device is the unpartitioned fast backend's program: it runs
        there, with that device as JAX's default, so it gets everything that backend does (driven
        loops whose gradient stacks follow ``swap_memory``, the fused path, traces) at its speed."""
        with jax.default_device(self.jax_devices[device]):
            result: RunResult = self._one_device().run(fetches, feeds, variables, options)
        self._single_ran = True
        result.stats.setdefault("executor", "fast partitioned")
        result.stats["tier"] = "one device"
        return result

    def _one_device(self) -> Any:
        """The one-device fast backend that runs (and explains) a graph placed wholly on one device,
        made on first use."""
        if self._single is None:
            from turnout.fast.backend import FastBackend

            self._single = FastBackend(self.graph, options=self.options)
        return self._single

    def _whole_program(self, sig: Any, placement: Placement, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> Any:
        """The whole-program tier's plan for this run signature, made once (its traces are cached in it),
        or None where the tier is absent or the program is not eligible."""
        if sig not in self._whole:
            wanted = wants_whole_program(self.whole_program, self.graph, placement)
            why = cannot_swap(self.graph, self.options.device_memory_limit) if wanted else None
            got = spmd_choice(self.graph, placement, fetches, list(feeds)) if wanted and why is None else why
            if isinstance(got, str):
                self._whole_declined[sig] = got
            self._whole[sig] = None if got is None or isinstance(got, str) else got
        return self._whole[sig]

    def _run_reference(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                       variables: dict[str, np.ndarray], options: RunOptions) -> RunResult:
        if self._reference is None:
            from turnout.devices.executor import PartitionedBackend

            self._reference = PartitionedBackend(self.graph, self.devices, self.requests, self.order, self.seed,
                                                 self.allow_soft_placement)
        result: RunResult = self._reference.run(fetches, feeds, variables, options)
        result.stats.update({"executor": "partitioned reference executor (fallback)", "tier": "reference",
                             "fallback_reason": self._fallback[sig]})
        self._records = []
        return result

    def _plan(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any], cap: int) -> _Plan:
        plan = self._plans.get((sig, cap))
        if plan is None:
            from turnout.validate import validate

            fa = validate(self.graph, fetches, list(feeds))
            for t in feeds:
                if fa.node_frame.get(t.node.id, ()) != ():
                    raise FeedError(f"cannot feed {t.name}: it is inside a loop frame; feed root-frame tensors only")
            program = functionalize(self.graph, fetches, feeds)
            fed = {t.node.id for t in feeds}
            device_of = self.placement.device_of
            plan = self._plans[(sig, cap)] = _Plan(program, schedule(program, device_of, fed), fed, cap, device_of,
                                                    self.threads)
        return plan

    def _run_compiled(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                      variables: dict[str, np.ndarray], options: RunOptions) -> RunResult:
        cap = self.options.stack_chunk
        retries = 0
        t0 = time.perf_counter()
        with jax.enable_x64(True):
            while True:
                plan = self._plan(sig, fetches, feeds, cap)
                tl = DeviceTimeline() if options.trace else None
                scratch = dict(variables)
                try:
                    values, run = self._run_plan(plan, fetches, feeds, scratch, options, tl)
                    break
                except StacksOutgrown as e:  # (past MAX_CAPACITY, ``decode`` raised instead)
                    cap = e.retry.capacity
                    retries += 1
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
            **run.stacks.stats(), "seconds": time.perf_counter() - t0,
        }
        return RunResult(values=values, trace=run.tl, stats=stats)

    def _run_plan(self, plan: _Plan, fetches: list[Tensor], feeds: dict[Tensor, Any],
                  variables: dict[str, np.ndarray], options: RunOptions,
                  tl: Optional[DeviceTimeline]) -> tuple[list[Any], _Run]:
        run = _Run(self, plan, variables, options, tl)
        env = _Env()
        for t, v in feeds.items():
            d = self.placement.device_of[t.node.id]
            env.set(key(t), jax.device_put(v, self.jax_devices[d]), d)
        try:
            run.steps(plan.schedule.steps, env)
            run.finish()
        finally:
            if run.pools:
                try:
                    run.drain()
                except BaseException:  # noqa: BLE001 - the run's own error (or result) is what is reported
                    pass
            if tl is not None:
                tl.close()
        values = []
        for t in fetches:
            k = key(t)
            v = _now(env.vals.get(k, DEAD))
            live = _now(run.lives.get(k, True))
            if v is DEAD or not bool(np.asarray(live)):
                raise DeadFetchError(dead_fetch_message(t.name, t.node))
            values.append(to_host(v))
        for name in plan.written_vars:
            if name is not None and name in plan.var_device:
                variables[name] = np.asarray(run.state[plan.var_device[name]][var_key(name)])
        return values, run

    def raise_code(self, plan: _Plan, code: int, moved: int = 0) -> None:
        """Raise the error an error word holds (``outcome.decode``). A stack that overflowed its chunk
        inside one call (an inner loop compiled whole), or ran empty inside one after chunks were moved
        out of it: run again with twice the chunk (``StacksOutgrown``), as the one-device backend does."""
        enforce(decode(plan.codes, code, capacity=plan.capacity, who=WHO, moved=moved))

    # ---- compiled segments ------------------------------------------------------------------------
    def driver(self, plan: _Plan, seg: Segment) -> RegionDriver:
        """The chunk-by-chunk runner of a driven segment's loop (``devices.region_driver``)."""
        assert isinstance(seg.items[0], WhileRegion)

        def traced() -> None:
            self.compile_count += 1

        return RegionDriver(plan.program, plan.codes, plan.capacity, seg.items[0], plan.fed, list(seg.writes),
                            list(seg.fetched), traced, WHO)

    def segment_fn(self, plan: _Plan, seg: Segment) -> Any:
        """``f(env_in, state, stacks, max_iter) -> (writes, live flags of fetched writes, state)``: the
        segment's items run by the fast backend's emitter, jitted; it runs on the device its inputs are
        committed to (every segment receives its device's error word, so there is always one). The
        stacks argument is donated: a push updates the buffer in place."""
        writes = list(seg.writes)
        fetched = set(seg.fetched)

        def body(env_in: dict[Key, Any], state: dict[str, Any], stacks: dict[str, Any], max_iter: Any) -> Any:
            self.compile_count += 1  # runs only while tracing
            em = Emitter(plan.program, plan.codes, plan.capacity, max_iter)
            em.state = {**state, **stacks}
            em.fed = plan.fed
            env = dict(env_in)
            em.run_items(seg.items, env)
            out = {k: wrap_static(env[k]) for k in writes if k in env}
            lives = {k: jnp.asarray(em.lives.get(k, True)) for k in writes if k in fetched and k in env}
            return out, lives, em.state

        return jax.jit(body, donate_argnums=(2,))


#: when the whole-program (SPMD) tier runs a program it accepts
WHOLE_PROGRAM = ("auto", "always", "never")
#: the fields of ``FastOptions`` the partitioned backend honours on every tier
PARTITIONED_FIELDS = ("stack_chunk", "fallback", "device_memory_limit")


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
    from turnout.validate import validate

    fa = validate(graph)
    spans: dict[Any, set[str]] = {}
    for n in graph.nodes:
        f = fa.node_frame.get(n.id, ())
        for i in range(1, len(f) + 1):  # a node is in its frame and in every enclosing one
            spans.setdefault(f[:i], set()).add(placement.device_of.get(n.id, ""))
    return all(fa.frames[f].parallel_iterations == 1 for f, ds in spans.items() if len(ds) > 1)


def cannot_swap(graph: Graph, device_memory_limit: Optional[int]) -> Optional[str]:
    """Why the SPMD tier must not run this graph although ``whole_program`` would take it, or None.

    Why: one ``shard_map`` program keeps every gradient stack's whole history on its device (it has no
    host between iterations to move a chunk) and does not count stack bytes per device. So a loop
    that asks for ``swap_memory=True``, or a ``device_memory_limit``, is run by the per-device tiers,
    which honour both (``devices.swap``); the reason is in ``stats["whole_program_declined"]``."""
    stacks = [n for n in graph.nodes if n.op == "StackNew"]
    swapped = sorted({n.attrs.get("loop_name") or n.attrs.get("frame_name", "?") for n in stacks
                      if n.attrs.get("swap_memory")})
    if swapped:
        return (f"loop(s) {', '.join(repr(x) for x in swapped)} ask for swap_memory=True, and the SPMD tier cannot "
                "swap stack chunks to host memory; the per-device tiers run the program")
    if device_memory_limit is not None and stacks:
        return (f"device_memory_limit={device_memory_limit} is counted per device by the per-device tiers only; the "
                "SPMD tier does not count stack bytes")
    return None


__all__ = ["DeviceTimeline", "FastPartitionedBackend", "cannot_swap"]
