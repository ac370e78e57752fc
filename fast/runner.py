"""The one runner: the steps of a run's cut (``fast.cut``) executed on one device or many.

Why one runner. A run that is not one compiled call is a list of steps: compiled segments, loops
driven chunk by chunk, and, where a cond or a loop spans devices, the host's decisions between
per-device segments (``fast.host_control``, mixed in here). The one-device backend's staged path is
the case of one device and no host decisions; the partitioned executor's per-device tiers are the
case of several. Both are this runner, so what a step does is written once: how its inputs are read
from the host's environment (a value that lives on another device is copied once, ``fast.host_env``),
how a segment is called and a driven loop driven, how full stack chunks move around the calls
(``fast.device_stacks``), what an error word means (``outcome_of``) and when it is read
(``RunPolicy``), the run's first ``Retry``, after which no step runs, and, in a traced run, the
spans of its timeline (``fast.timeline``: each call dispatched on its device's track, each chunk of a
driven loop and each move of stack chunks, the host's dispatches, reads and waits).

What an executor gives it: its plan (``fast.step_plan.StepPlan``: the program, the compiled function
of each segment, made once per plan and kept on the segment, what an error word means, and the
backend whose count of traces a traced call's span reads), the per-device state a run starts from
(error word, Variables, stacks) and the stacks' store. What an executor adds — the partitioned
executor's worker threads, the staged path's stage times — it adds in a subclass, by overriding the
hooks ``call`` and ``on_workers``, or ``segment`` itself.

A run, as plain Python::

    run = StepRunner(plan, state, stacks, devices, options, policy)   # or a subclass
    env = run.run(cut.steps, feeds)   # feeds: (key, value, device); every error word acted on
    if env is not None:               # (None: the run ended in a ``Retry``)
        values = fetched(fetches, env.vals, run.lives)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Optional, Union

import jax
import numpy as np

from turnout.fast import stacks as stk
from turnout.fast.cut import HostCond, Segment, Step
from turnout.fast.device_stacks import DeviceStacks
from turnout.fast.driven import Guard, no_guard
from turnout.fast.guards import iteration_bound
from turnout.fast.host_control import HostControl
from turnout.fast.host_env import HostEnv
from turnout.fast.outcome import Raise, Retry, enforce
from turnout.fast.regions import Key
from turnout.fast.step_plan import StepPlan
from turnout.fast.timeline import Timeline, device_track
from turnout.fast.values import wrap_static
from turnout.session import RunOptions

#: what a step's call gives back: its writes, their live flags, its device's state after it; or the
#: ``Retry`` of stacks that outgrew their chunk within one call
Called = Union[tuple[dict[Key, Any], dict[Key, Any], dict[str, Any]], Retry]


@dataclass(frozen=True)
class RunPolicy:
    """How a run reads its error words. ``who``: the executor its errors name. ``check_each_step``:
    read a segment's error word as soon as it returns and act on it there, as the one-device backend
    does (a step's error is raised after that step, as the interpreter raises it during the run, and a
    ``Retry`` stops the run at once); otherwise a device's word is read only when the host must wait
    for it (a loop's ``parallel_iterations`` window, the end of the run), so that devices run ahead
    of the host."""

    who: str
    check_each_step: bool = False


class StepRunner(HostControl):
    """One run of a cut's steps of ``plan`` over per-device state (see the module docstring)."""

    def __init__(self, plan: StepPlan, state: dict[str, dict[str, Any]], stacks: DeviceStacks,
                 jdev: dict[str, Any], options: RunOptions, policy: RunPolicy,
                 timeline: Optional[Timeline] = None) -> None:
        self.plan = plan
        self.program = plan.program
        #: device -> its state: the error word, the Variables placed there, its gradient stacks
        self.state = state
        self.stacks = stacks
        #: device name -> its JAX device (values of other devices are copied there once)
        self.jdev = jdev
        self.policy = policy
        self.max_iter_py = options.max_iterations
        self.max_iter = iteration_bound(options)
        #: a traced run's timeline (``fast.timeline``), where the executor keeps one
        self.tl = timeline
        # traced runs: id(value) -> (value, the span that produced it); the value is kept alive so
        # that its id is not reused during the run
        self.producer: dict[int, tuple[Any, int]] = {}
        #: the live flags of fetched writes (a fetch inside a compiled cond can be dead)
        self.lives: dict[Key, Any] = {}
        self.host_iterations: dict[str, int] = {}
        self.iteration = 0  # the innermost host loop's iteration, for trace labels
        #: worker threads per device, where an executor dispatches from them (none here)
        self.pools: dict[str, Any] = {}
        self.last_fut: dict[str, Future[Any]] = {}
        #: the first ``Retry`` of the run (stacks that outgrew their chunk within one call, read from an
        #: error word or returned by a driven loop): nothing of the run is kept from then on, no further
        #: step runs, and the executor runs it again with the larger chunk
        self.retry: Optional[Retry] = None
        for d, st in state.items():
            stacks.observe(d, st)

    # ---- steps ------------------------------------------------------------------------------------
    def run(self, steps: list[Step], feeds: Iterable[tuple[Key, Any, str]]) -> Optional[HostEnv]:
        """The whole run, as both executors run it: the feeds ``(key, value, device)`` placed on their
        devices, the steps, every device's error word acted on; then the host environment that holds
        the fetches, or None where the run ended in a ``Retry`` (``self.retry``: nothing of it is
        kept). Why ``jax.device_put``, not ``jnp.asarray``: on the CPU it aliases a 64-byte-aligned
        host array (such as the host view of a JAX array) instead of copying it; the run reads it only
        until it returns. Whatever ends the run, ``settle`` runs after it."""
        env = HostEnv()
        for k, v, d in feeds:
            env.set(k, jax.device_put(v, self.jdev[d]), d)
        try:
            self.steps(steps, env)
            self.finish()
        finally:
            self.settle()
        return None if self.retry is not None else env

    def settle(self) -> None:
        """After a run, however it ended: the spans it dispatched settled (``Timeline.close``), so
        that a traced run's timeline is complete, and a run tried again records on it afresh."""
        if self.tl is not None:
            self.tl.close()

    def steps(self, steps: list[Step], env: HostEnv) -> None:
        """Run a scope's steps in order: segment calls, and the conds and loops the host drives.
        Nothing after a ``Retry`` (``self.retry``)."""
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
        """One segment: its inputs from ``env`` (on its device), its call, its outputs into ``env``."""
        dev = seg.device
        jd = self.jdev[dev]
        env_in = {k: wrap_static(env.on(k, dev, jd)) for k in seg.reads if k in env.vals}
        tl = self.tl
        t0, before = (tl.now(), self.compiles()) if tl is not None else (0.0, 0)
        got = self.call(seg, env_in, self.state[dev])
        if isinstance(got, Retry):
            self.retry = self.retry or got
            return
        out, lives, state = got
        self.state[dev] = state
        code = int(np.asarray(state["err"])) if self.policy.check_each_step else 0  # (waits for the call)
        if tl is not None:
            self._traced(seg, env, out, state, t0, self.compiles() != before)
        for k, v in out.items():
            env.set(k, v, dev)
        self.lives.update(lives)
        if code:
            self.check(code)

    def call(self, seg: Segment, env_in: dict[Key, Any], state: dict[str, Any]) -> Called:
        """One call of ``seg`` on its device's ``state``. The stacks it pushes or pops are spilled or
        refilled first where the call needs it (``DeviceStacks.before``); a driven segment runs its
        loop chunk by chunk, moving its own chunks between its calls."""
        self.fn_of(seg)
        dev, t = seg.device, seg.traffic
        with self.stacks.device_oom(t, dev, seg.describe):
            if seg.driven is not None:
                return self._drive(seg, env_in, state)
            if t is not None:
                rest, stacks = stk.split_state(state)
                state = {**rest, **self.stacks.before(t, dev, stacks)}
            out, lives, new = seg.fn(env_in, state, self.max_iter)
        if t is not None:
            self.stacks.after(t, dev, new)
        return out, lives, new

    def fn_of(self, seg: Segment) -> Any:
        """``seg``'s compiled function, made on first use (a driven loop's pointers run free where
        each step's word is read before any pointer)."""
        if seg.fn is None:
            seg.fn = self.plan.compiled(seg, free_pointers=self.policy.check_each_step)
        return seg.fn

    def _traced(self, seg: Segment, env: HostEnv, out: dict[Key, Any], state: dict[str, Any], t0: float,
                compiled: bool) -> None:
        """A traced call's span on its device's track. A call the host has waited for (its error word
        read at once, or a driven loop, whose chunks ran during the call) is measured; a call
        dispatched to run ahead of the host is recorded with its dispatch, on the host's track, and
        its run is timed by the timeline's watcher, after the spans that made its inputs."""
        assert self.tl is not None
        name, track = seg.describe(), device_track(seg.device)
        if self.policy.check_each_step or seg.driven is not None:
            span = self.tl.ran(track, name, t0, self.tl.now(), iteration=self.iteration, compiled=compiled)
        else:
            self.tl.host(f"dispatch {name}", t0, iteration=self.iteration)
            inputs = sorted({self.producer[id(env.vals[k])][1] for k in seg.reads
                             if k in env.vals and id(env.vals[k]) in self.producer})
            span = self.tl.dispatched(track, name, state["err"], inputs, iteration=self.iteration, compiled=compiled)
        for v in out.values():
            self.producer[id(v)] = (v, span)

    def _drive(self, seg: Segment, env_in: dict[Key, Any], state: dict[str, Any]) -> Called:
        """A driven segment's loop (``fast.driven.DrivenLoop.run``), its full chunks handed to its
        device's store between chunk calls; then its stacks' pointers are known to the host."""
        got = seg.fn.run(env_in, state, self.max_iter, self.stacks.stores[seg.device], self.policy.who,
                         self.guard(seg))
        if isinstance(got, Retry):
            return got
        if isinstance(got, Raise):
            enforce(got)
        assert not isinstance(got, Raise)
        out, lives, new = got
        self.stacks.settle(seg.device, {s: v for s, v in new.items() if s in seg.push or s in seg.pop})
        return out, lives, new

    def compiles(self) -> int:
        """The backend's running count of traces (a traced call's span says whether it compiled)."""
        return self.plan.backend.compile_count

    # ---- hooks ------------------------------------------------------------------------------------
    def guard(self, seg: Segment) -> Guard:
        """The guard around each call and move of a driven segment (``fast.driven``): in a traced
        run, a span per chunk call (``driven loops``) and per move of full stack chunks (``host
        swaps``), naming the device where there are several; else none."""
        tl = self.tl
        if tl is None:
            return no_guard
        where = {"device": self.stacks.labels[seg.device]} if len(self.state) > 1 else {}

        @contextmanager
        def guard(what: str, stacks: Optional[list[str]]) -> Iterator[Any]:
            span: Any = nullcontext({})
            if what == "chunk":
                span = tl.span("chunk", "driven loops", **where)
            elif what in ("spill", "refill"):
                span = tl.span("stack chunks full" if what == "spill" else "stack chunks back", "host swaps",
                               stacks=stacks, **where)
            with span as args:
                yield args

        return guard

    def on_workers(self, fn: Any) -> None:
        """Run ``fn`` once every call dispatched so far may be touched (at once, with no workers)."""
        fn()

    # ---- error words ------------------------------------------------------------------------------
    def _retire(self, errs: list[Any]) -> None:
        """Wait for an iteration's segments (their error words) and act on its first error (the
        lowest code, ``_lowest_first``)."""
        t0 = self.tl.now() if self.tl is not None else 0.0
        codes = [int(np.asarray(e.result()[2] if isinstance(e, Future) else e)) for e in errs]
        if self.tl is not None:
            self.tl.host("wait: parallel_iterations window", t0)
        failed = _lowest_first(codes)
        if failed:
            self.check(failed[0])

    def finish(self) -> None:
        """Act on the error words of every device, once every call has returned, the lowest first."""
        for c in _lowest_first([int(np.asarray(st["err"])) for st in self.state.values()]):
            if self.retry is None:
                self.check(c)

    def check(self, code: int) -> None:
        """Act on a nonzero error word: its error raised, or, for stacks that outgrew their chunk
        within one call (or ran empty inside one after chunks were moved out of it), the ``Retry``
        kept (``self.retry``)."""
        got = self.plan.outcome_of(code, self.policy.who, self.stacks.moved())
        if isinstance(got, Retry):
            self.retry = self.retry or got
        else:
            enforce(got)


def _lowest_first(codes: list[int]) -> list[int]:
    """The nonzero error words of several devices (or segments), the lowest code first. Why the
    lowest, not the first device's: codes are numbered as their checks are traced, and the steps are
    traced as the run first reaches them (a forward loop's checks before its gradient's), so where
    devices that ran ahead of the host failed in two places, the error raised is the one the
    interpreters raise, not that of whichever device came first in the table (a gradient's
    accumulate past the end of a TensorArray, after the forward read that went there). The SPMD
    program's words are read in this order too (``devices.spmd``)."""
    return sorted(c for c in codes if c)


__all__ = ["Called", "RunPolicy", "StepRunner"]
