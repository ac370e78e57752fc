"""The one-device tier: a placed graph whose every node sits on one device is the fast backend's program.

Why a module of its own: such a graph needs nothing of the partitioned executor — no cut by device,
no transfers — so it runs on the one-device fast backend with that device as JAX's default, and gets
all that backend gives the same graph: the fused attempt, driven loops whose stacks follow
``swap_memory``, traces, and for repeated runs the session's lane, fed ``jax.Array`` values taken as
they are, and Variables left on the device until read (the backend's ``variable_store``). Each entry
point enters the device's default-device scope, so that everything the backend makes — its device
copies of Variables and feeds, its stacks, its compiled calls — lives on that device, a lane's calls
included.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import numpy as np

from turnout.fast.backend import FastBackend
from turnout.fast.lane import Lane, LaneResult
from turnout.fast.variable_store import DeviceVariables
from turnout.fast_options import FastOptions
from turnout.graph import Graph, Tensor
from turnout.run_schedule import RunSchedule
from turnout.session import RunOptions, RunResult

#: the tier a run of this tier names in its stats
TIER = "one device"


class OneDevice:
    """The one-device fast backend of a partitioned session, run on the device its graph is placed on."""

    def __init__(self, graph: Graph, options: FastOptions, jax_devices: dict[str, Any]) -> None:
        self.backend = FastBackend(graph, options=options)
        self.jax_devices = jax_devices
        #: the device of the last run of this tier (its lanes run there), None before one
        self.device: Optional[str] = None
        # id of a backend lane -> (it, the lane that runs it on this tier's device): one wrapper per
        # lane, so that the session keeps each lane once
        self._lanes: dict[int, tuple[Lane, Lane]] = {}

    @property
    def variable_store(self) -> DeviceVariables:
        """The backend's store of Variables (``fast.variable_store``): the session's, on every tier."""
        return self.backend.variable_store

    def run(self, device: str, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
            options: RunOptions) -> RunResult:
        """A run of the backend on ``device``, its stats naming this tier."""
        with jax.default_device(self.jax_devices[device]):
            result: RunResult = self.backend.run(fetches, feeds, variables, options)
        self.device = device
        _name_tier(result.stats)
        return result

    def explain(self, device: str, fetches: list[Tensor], feeds: dict[Tensor, Any],
                variables: dict[str, np.ndarray], memory_budget: Optional[int]) -> RunSchedule:
        """The backend's schedule of a run on ``device`` (``Session.explain``)."""
        with jax.default_device(self.jax_devices[device]):
            return self.backend.explain(fetches, feeds, variables, memory_budget)

    def lane_for(self, fetches: list[Tensor], feeds: dict[Tensor, Any], given: dict[Any, Any],
                 ops: Optional[list[bool]] = None) -> Optional[Lane]:
        """After a run of this tier: the backend's lane for repeating it (``fast.lane``), run on the
        tier's device; None where the backend offers none."""
        if self.device is None:
            return None
        jd = self.jax_devices[self.device]
        with jax.default_device(jd):
            lane = self.backend.lane_for(fetches, feeds, given, ops)
        if lane is None:
            return None
        got = self._lanes.get(id(lane))
        if got is None or got[0] is not lane:
            got = self._lanes[id(lane)] = (lane, _on_device(lane, jd))
        return got[1]

    def device_feed(self, device: str, value: Any) -> Any:
        """A fed ``jax.Array`` as the backend takes it, on ``device`` (``FastBackend.device_feed``)."""
        with jax.default_device(self.jax_devices[device]):
            return self.backend.device_feed(value)


def _name_tier(stats: dict[str, Any]) -> None:
    """The tier named in a run's stats (the executor is the backend's: compiled, or its fallback)."""
    stats["tier"] = TIER


def _on_device(lane: Lane, jd: Any) -> Lane:
    """``lane`` run on device ``jd``, its stats naming the tier. A lane whose call is an executable
    compiled ahead of time runs where it was compiled (on ``jd``: ``lane_for`` made it in that scope),
    so only a lane that calls the jitted function enters the scope on every call (about 1 µs)."""
    scoped = not getattr(lane, "ahead_of_time", False)

    def placed(feed_dict: Any, variables: Any) -> Optional[LaneResult]:
        if scoped:
            with jax.default_device(jd):
                got = lane(feed_dict, variables)
        else:
            got = lane(feed_dict, variables)
        if got is not None:
            _name_tier(got[1])
        return got

    return placed


__all__ = ["TIER", "OneDevice"]
