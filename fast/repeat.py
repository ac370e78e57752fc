"""Repeated runs: a ``Session.run`` with the last run's fetches and feed signature skips the general
path's work and goes to the compiled call the last run made.

Why: the general path (``FastBackend._run_any``) builds a run signature (every feed's dtype and shape,
every Variable's), looks the plan up, validates the graph if it changed and keeps memory accounts.
For a small program that costs as much as its compiled call (tens of microseconds on the
development machine; about 0.4 ms a run for the quick LSTM step). A repeat needs less to be
recognised: its fetches and its feeds' (tensor, dtype, shape) in the feed dict's order, the graph's
``edits`` and ``version`` unchanged (no validation pending, no plan stale), and each Variable of the
plan still the session's entry that the backend's device copy stands for (a Variable the user
replaced may have another shape).

A repeat takes one of three routes, each a property of the plan the last run used, not a model of
its own: the same compiled function is called with the same arguments, and the same checks and
errors follow it.

- ``Repeats.run_direct``: a plan of one compiled segment (``Direct``), called with the feeds by
  position and the Variables' device copies as the last run left them;
- ``Repeats.run_fused``: a plan with gradient stacks, its fused attempt on the rung of the capacity
  ladder that held the last run, with that run's stack buffers (donated) and without the general
  path's plan lookup and accounting; a run that outgrows the rung is handed back (``None``) and the
  general path climbs the ladder;
- the session's lane (``fast.lane``): a repeat of either route recognised by the session before its
  own feed checks, for feeds that need none beyond the signature, with the route's work written out
  for that signature (``make_lane`` for a ``Direct`` run, ``make_fused_lane`` for a fused attempt).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import jax
import numpy as np

from turnout.fast import stacks as stk
from turnout.fast.emit import var_key
from turnout.fast.guards import DEFAULT_BOUND, DISCARDED, device_oom, iteration_bound
from turnout.fast.lane import Lane, ahead_of_time, cpp_entry, make_fused_lane, make_lane
from turnout.fast.plan import Direct, Plan, Stage
from turnout.fast.regions import Key
from turnout.fast.values import start_reads
from turnout.fast.variable_store import keep, peeker
from turnout.graph import Tensor
from turnout.session import RunOptions, RunResult

if TYPE_CHECKING:
    from turnout.fast.backend import FastBackend


@dataclass
class HotFused:
    """A repeated run's route to a plan's fused attempt: the rung that held the last run (``plan``),
    the plan whose ladder it is (``top``), and the stats and memory records of that run, which a run on
    the same rung with the same buffers repeats."""

    plan: Plan
    top: Plan
    stats: dict[str, Any]
    records: list[dict[str, Any]]
    var_names: tuple[str, ...]

    wide: bool  # a fed tensor holds 64-bit values (JAX would narrow them outside 64-bit mode)

    def __post_init__(self) -> None:
        #: (name, state key) of every Variable of the plan, and of those it assigns (written back)
        self.var_keys = tuple((n, var_key(n)) for n in self.var_names)
        self.written = tuple((n, k) for n, k in self.var_keys if n in self.plan.written_vars)
        #: the fused stage as an ahead-of-time executable (``None``: not made yet; ``False``: the
        #: jitted function is called, in 64-bit mode), and the default iteration bound on the device
        self.call: Any = None
        self.bound: Any = None

    def executable(self, st: Stage, args: tuple[Any, ...], backend: FastBackend) -> Any:
        """The fused stage's ahead-of-time executable for these arguments (made on the first hot run),
        or ``False`` to call the jitted function. Why: the jitted function must be called in 64-bit
        mode, the mode it was traced in, which costs JAX's dispatch 7 to 10 µs a call and the
        context itself a few more (``fast.lane``); the executable is bound to its argument types and
        called outside it. Not for 64-bit feeds, or when lowering would trace again."""
        if self.call is None:
            compiled = None if self.wide else ahead_of_time(st.fns["seg"], args, backend)
            self.call = False if compiled is None else compiled
            if compiled is not None:
                self.bound = jax.device_put(DEFAULT_BOUND)
        return self.call


#: what a repeat is recognised by, and where it goes: hot key -> (the route, the graph's edits when
#: it was recorded, the permutation from the feed dict's order to the Direct function's)
Route = tuple[Direct | HotFused, int, Optional[tuple[int, ...]]]


class Repeats:
    """A backend's routes for repeated runs (see the module docstring), and the session's lanes."""

    def __init__(self, backend: FastBackend) -> None:
        self.backend = backend
        self.routes: dict[Any, Route] = {}
        # the last Direct run's or hot fused run's (route, fetches, feeds), until the session asks for
        # its lane
        self.lane_ready: Optional[tuple[Direct | HotFused, list[Tensor], dict[Tensor, Any]]] = None
        # (id of the Direct, which its lane holds; fetches; feed signature) -> the lane: a lane is
        # made once (its executable fetched from JAX's caches), however often the session's few
        # lanes per fetch give it up
        self.lanes: dict[Any, Lane] = {}
        self.no_lane: dict[Any, int] = {}  # the same keys -> the graph version make_lane refused them at

    @staticmethod
    def key(fetches: list[Tensor], feeds: dict[Tensor, Any]) -> Any:
        """What a repeated run is recognised by: its fetches and its feeds' (tensor, dtype, shape), in
        the feed dict's order (the order ``remember`` recorded the feeds' permutation for)."""
        return (tuple([(t.node.id, t.index) for t in fetches]),
                tuple([(t.node.id, t.index, v.dtype, v.shape) for t, v in feeds.items()]))

    def remember(self, d: Direct | HotFused, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> None:
        """After a run on ``d`` (a ``Direct`` call, or a plan's fused attempt): the next run of the same
        fetches and feed signature goes straight to it (``run_direct``, ``run_fused``) while the
        graph's edits and the plan's Variables are unchanged."""
        perm: Optional[tuple[int, ...]] = None
        if isinstance(d, Direct):
            order = [(t.node.id, t.index) for t in feeds]
            perm = tuple([order.index(k) for k in d.feed_keys])
            if perm == tuple(range(len(order))):
                perm = None
        self.routes[self.key(fetches, feeds)] = (d, self.backend.graph.edits, perm)
        if isinstance(d, Direct):  # the session may ask for a lane for this run (``lane_for``)
            self.lane_ready = (d, fetches, feeds)

    def forget(self, d: Optional[Direct] = None) -> None:
        """Drop the routes to ``d`` (a ``Direct`` that turned out not to fit its plan), or every route
        (a plan traced again, with another stack layout)."""
        self.routes = {} if d is None else {k: v for k, v in self.routes.items() if v[0] is not d}

    def lane_for(self, fetches: list[Tensor], feeds: dict[Tensor, Any], given: dict[Any, Any],
                 ops: Optional[list[bool]] = None) -> Optional[Lane]:
        """``FastBackend.lane_for``: the lane of the ``Direct`` run or the hot fused run just made
        (``make_lane``, ``make_fused_lane``), made once per signature."""
        ready, self.lane_ready = self.lane_ready, None
        if ready is None:
            return None
        d, ran_fetches, ran_feeds = ready
        if ran_feeds is not feeds or len(ran_fetches) != len(fetches) or any(
                a is not b for a, b in zip(ran_fetches, fetches)):
            return None  # the Direct run was another one (a run made by something else than this session)
        version = self.backend.graph.version
        try:  # a Python number has no dtype or shape: its type stands for them
            made = (id(d), tuple(fetches),
                    tuple([(t, type(v), getattr(v, "dtype", None), getattr(v, "shape", None))
                           for t, v in given.items()]),
                    None if ops is None else tuple(ops))
            lane = self.lanes.get(made)
        except TypeError:  # an unhashable feed signature: no lane
            return None
        if lane is None or lane.version != version:  # type: ignore[attr-defined]
            if self.no_lane.get(made) == version:
                return None  # refused before: a hot run must not pay for asking again
            lane = (make_fused_lane(self.backend, d, fetches, feeds, given, ops) if isinstance(d, HotFused)
                    else make_lane(self.backend, d, fetches, feeds, given, iteration_bound(RunOptions()), ops))
            if lane is None:
                self.no_lane[made] = version
            else:
                self.lanes[made] = lane
        return lane

    def recognise(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray]
                  ) -> Optional[tuple[Direct | HotFused, Optional[tuple[int, ...]]]]:
        """The route of a repeated run and its feed permutation, or None when the run must take the
        general path (see the module docstring for what a repeat must keep)."""
        b = self.backend
        if b.graph.version != b._checked_version or b._timeline is not None:
            return None
        got = self.routes.get(self.key(fetches, feeds))
        if got is None or got[1] != b.graph.edits:
            return None
        d = got[0]
        if isinstance(d, HotFused) and (d.top.predict_overflow or d.top.rung is not d.plan
                                        or id(d.plan) not in b._stack_bufs):
            return None  # the last run swapped or climbed, or its buffers were released
        dev_vars = b._dev_vars
        peek = peeker(variables)
        for name in d.var_names:
            rec = dev_vars.get(name)
            if rec is None or rec[0] is not peek(name):
                return None
        return d, got[2]

    def run_direct(self, d: Direct, perm: Optional[tuple[int, ...]], fetches: list[Tensor],
                   feeds: dict[Tensor, Any], variables: dict[str, np.ndarray], options: Any) -> RunResult:
        """The ``Direct`` call of a recognised repeat: the feeds by position, the Variables' device
        copies as the last run left them, and the end of a ``Direct`` run (``_direct_result``)."""
        b = self.backend
        t0 = time.perf_counter()
        if perm is None:  # the feed dict's order is the plan's
            feed_vals = tuple(feeds.values())
        else:
            given = list(feeds.values())
            feed_vals = tuple([given[i] for i in perm])
        dev_vars = b._dev_vars
        var_vals = tuple([dev_vars[name][1] for name in d.var_names]) if d.var_names else ()
        self.lane_ready = (d, fetches, feeds)  # the session may ask for a lane for this signature
        with jax.enable_x64(True):
            vals, flags, var_out = b._call_direct(d, feed_vals, var_vals, options)
            return b._direct_result(d, fetches, vals, flags, var_out, variables, t0, "hot")

    def run_fused(self, h: HotFused, fetches: list[Tensor], feeds: dict[Tensor, Any],
                  variables: dict[str, np.ndarray], options: Any) -> Optional[RunResult]:
        """The fused attempt of a recognised repeat on the rung that held the last run, repeating that
        run's stats and memory records (``h.stats``, ``h.records``). ``None``: a stack outgrew the
        rung; nothing was applied (the buffers are kept), and the general path runs, climbing the
        ladder.

        It builds only the call's arguments: the last run's stack buffers as they came back (donated
        to this run), the Variables' device copies ``recognise`` found current, the fed values the
        stage reads; it reads back the error word and live flags at once, and writes back only the
        Variables the program assigns."""
        b = self.backend
        t0 = time.perf_counter()
        p = h.plan
        st = p.fused
        assert st is not None
        stacks = b._stack_bufs.pop(id(p))
        if any(type(v) is stk.StackValue for v in stacks.values()):  # kept by a staged run: buffers alone
            stacks = {k: stk.kept_arrays(v)[0] for k, v in stacks.items()}
        dev_vars = b._dev_vars
        rest = {vk: dev_vars[name][1] for name, vk in h.var_keys}
        env: dict[Key, Any] = {(t.node.id, t.index): v for t, v in feeds.items()}
        env_in = {k: env[k] for k in st.reads if k in env}
        bound = iteration_bound(options)
        call = h.call if h.call is not None else h.executable(st, (env_in, rest, stacks, bound), b)
        with device_oom(p, st):
            if call is False:
                with jax.enable_x64(True):
                    out, flags, ended = st.fns["seg"](env_in, rest, stacks, bound)
            else:
                out, flags, ended = call(env_in, rest, stacks, h.bound if bound == DEFAULT_BOUND else bound)
                if isinstance(call, jax.stages.Compiled):  # JAX made its C++ entry point on this first call
                    h.call = cpp_entry(call)
        b._stack_bufs[id(p)] = {k: ended[k] for k in p.kept}
        if b.overlap_reads:
            start_reads(out.values())
        code, lives = b._fused_flags(st, flags)
        if code:
            if p.codes.lookup(code)[0] in DISCARDED:
                return None  # (the general path's attempt meets it again and handles it)
            b._raise_errors(p, {"err": code}, 0)
        env.update(out)
        env.update(st.static_out)
        values = b._fetched(fetches, env, lives)
        for name, vk in h.written:
            dev = ended[vk]
            dev_vars[name] = (keep(variables, name, dev), dev)
        b._records = h.records
        if h.call is not False:  # the session may ask for a lane for this signature
            self.lane_ready = (h, fetches, feeds)
        stats = dict(h.stats)
        stats["compiles"] = b.compile_count
        stats["stage_seconds"] = [time.perf_counter() - t0]
        stats["route"] = "hot"
        return RunResult(values=values, stats=stats)
