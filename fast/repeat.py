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

A repeat takes one of two routes, each a property of the plan the last run used, and both run by a
*lane* (``fast.lane``): the route's work written out once for the run's signature, which checks that
signature again and calls the compiled function the last run called, with the same checks and
errors after it.

- a plan of one compiled segment (``Direct``): its function, called with the feeds by position and
  the Variables' device copies as the last run left them (``make_lane``);
- a plan with gradient stacks: its fused attempt on the rung of the capacity ladder that held the
  last run, with that run's stack buffers (donated) and without the general path's plan lookup and
  accounting (``make_fused_lane``); a run that outgrows the rung is handed back and the general path
  climbs the ladder.

The backend calls the lane after the session's feed checks (``Repeats.run_hot``, with the run's
iteration bound, route ``"hot"``); the session calls the same kind of lane before its checks, for
default options and feeds that need none beyond the signature (route ``"lane"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from turnout.fast.emit import var_key
from turnout.fast.fused_lane import make_fused_lane
from turnout.fast.guards import DEFAULT_BOUND, iteration_bound
from turnout.fast.lane import Lane, make_lane
from turnout.fast.plan import Direct, Plan
from turnout.fast.variable_store import peeker
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
        #: (name, state key) of every Variable of the plan
        self.var_keys = tuple((n, var_key(n)) for n in self.var_names)


#: what a repeat is recognised by, and where it goes: hot key -> (the route, the graph's edits when
#: it was recorded)
Route = tuple[Direct | HotFused, int]


class Repeats:
    """A backend's routes for repeated runs (see the module docstring), and the lanes that run them."""

    def __init__(self, backend: FastBackend) -> None:
        self.backend = backend
        self.routes: dict[Any, Route] = {}
        # the last Direct run's or hot fused run's (route, fetches, feeds), until the session asks for
        # its lane
        self.lane_ready: Optional[tuple[Direct | HotFused, list[Tensor], dict[Tensor, Any]]] = None
        # (id of the route, fetches, feed signature, ops) -> (the route, its lane): a lane is made once
        # (its executable fetched from JAX's caches), however often the session's few lanes per fetch
        # give it up; the route is kept beside it, so that its id names no other route
        self.lanes: dict[Any, tuple[Direct | HotFused, Lane]] = {}
        # the same keys -> (the route, the graph version) no lane could be made at
        self.no_lane: dict[Any, tuple[Direct | HotFused, int]] = {}

    @staticmethod
    def key(fetches: list[Tensor], feeds: dict[Tensor, Any]) -> Any:
        """What a repeated run is recognised by: its fetches and its feeds' (tensor, dtype, shape), in
        the feed dict's order."""
        return (tuple([(t.node.id, t.index) for t in fetches]),
                tuple([(t.node.id, t.index, v.dtype, v.shape) for t, v in feeds.items()]))

    def remember(self, d: Direct | HotFused, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> None:
        """After a run on ``d`` (a ``Direct`` call, or a plan's fused attempt): the next run of the same
        fetches and feed signature goes straight to its lane (``run_hot``) while the graph's edits and
        the plan's Variables are unchanged, and the session may ask for that lane (``lane_for``).
        Not for a plan whose runs may learn that a loop needs more checkpoint slots
        (``SlotPlan.learns``): its runs take the general path, which plans them with what they learnt."""
        if d.plan.slots.learns:
            return
        k = self.key(fetches, feeds)
        old = self.routes.get(k)
        if old is not None and old[0] is not d:  # its lanes go with it (a fused route is new per general run)
            self._drop_lanes(old[0])
        self.routes[k] = (d, self.backend.graph.edits)
        self.lane_ready = (d, fetches, feeds)

    def _drop_lanes(self, d: Direct | HotFused) -> None:
        """Forget the lanes made for route ``d`` and the refusals recorded for it: each general run of a
        fused plan records a new route, so without this a session whose runs keep taking the general
        path (a Variable set from outside before every run) would keep a lane per run."""
        self.lanes = {k: v for k, v in self.lanes.items() if v[0] is not d}
        self.no_lane = {k: v for k, v in self.no_lane.items() if v[0] is not d}

    def forget(self) -> None:
        """Drop every route (a plan traced again, with another stack layout)."""
        self.routes = {}

    def lane(self, d: Direct | HotFused, fetches: list[Tensor], feeds: dict[Tensor, Any], given: dict[Any, Any],
             ops: Optional[list[bool]] = None) -> Optional[Lane]:
        """The lane of route ``d`` for these fetches and feeds (``given``: the feed dict as the lane will
        be given it), made once per signature (``make_lane``, ``make_fused_lane``); ``None`` where no
        lane can repeat the run (``fast.lane`` says when)."""
        version = self.backend.graph.version
        try:  # a Python number has no dtype or shape: its type stands for them
            made = (id(d), tuple(fetches),
                    tuple([(t, type(v), getattr(v, "dtype", None), getattr(v, "shape", None))
                           for t, v in given.items()]),
                    None if ops is None else tuple(ops))
            got = self.lanes.get(made)
        except TypeError:  # an unhashable feed signature: no lane
            return None
        if got is not None and got[1].version == version:  # type: ignore[attr-defined]
            return got[1]
        refused = self.no_lane.get(made)
        if refused is not None and refused[0] is d and refused[1] == version:
            return None  # refused before: a hot run must not pay for asking again
        lane = (make_fused_lane(self.backend, d, fetches, feeds, given, ops) if isinstance(d, HotFused)
                else make_lane(self.backend, d, fetches, feeds, given, iteration_bound(RunOptions()), ops))
        if lane is None:
            self.no_lane[made] = (d, version)
        else:
            self.lanes[made] = (d, lane)
        return lane

    def lane_for(self, fetches: list[Tensor], feeds: dict[Tensor, Any], given: dict[Any, Any],
                 ops: Optional[list[bool]] = None) -> Optional[Lane]:
        """``FastBackend.lane_for``: the lane of the route the run just made took or recorded."""
        ready, self.lane_ready = self.lane_ready, None
        if ready is None:
            return None
        d, ran_fetches, ran_feeds = ready
        if ran_feeds is not feeds or len(ran_fetches) != len(fetches) or any(
                a is not b for a, b in zip(ran_fetches, fetches)):
            return None  # the route's run was another one (a run made by something else than this session)
        return self.lane(d, fetches, feeds, given, ops)

    def recognise(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray]
                  ) -> Optional[Direct | HotFused]:
        """The route of a repeated run, or None when the run must take the general path (see the
        module docstring for what a repeat must keep)."""
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
        return d

    def run_hot(self, d: Direct | HotFused, fetches: list[Tensor], feeds: dict[Tensor, Any],
                variables: dict[str, np.ndarray], options: Any) -> Optional[RunResult]:
        """A recognised repeat (feeds as the session checked and converted them, any options) run by
        its route's lane, with the options' iteration bound; ``None`` when the lane hands the run back
        (no lane, or a fused attempt that outgrew its rung: nothing was applied) and the general path
        must run it."""
        lane = self.lane(d, fetches, feeds, feeds)
        if lane is None:
            return None
        bound = iteration_bound(options)
        got = lane(feeds, variables, None if bound == DEFAULT_BOUND else bound)
        if got is None:
            return None
        values, stats, seconds = got
        self.lane_ready = (d, fetches, feeds)  # the session may ask for a lane for this signature
        full = dict(stats)
        full["compiles"] = self.backend.compile_count
        full["stage_seconds"] = [seconds]
        full["route"] = "hot"
        return RunResult(values=values, stats=full)
