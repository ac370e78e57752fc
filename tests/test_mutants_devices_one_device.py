"""Laws of the one-device tier (``turnout.devices.one_device``): a placed graph whose every node sits on
one device runs on the one-device fast backend, with that device as JAX's default. Each law kills
mutants of the full set of ``devices/one_device.py`` (issue 40, part 3; ``python tools/mutation.py
--module devices/one_device.py --all``): the backend built on the wrong graph or options, a call
handed a wrong argument or run outside its device's scope, the tier not named in the stats, a lane
offered before any run, wrapped afresh at each call (or never), or scoped when it was compiled ahead
of time (or not scoped when it was not), the module's exports.

The tier is built on a real graph (its ``FastBackend`` is checked once), then its backend is replaced
on the instance by a stand-in that records each call and the device JAX's default scope gives inside
it: no program is compiled or run, so each test takes milliseconds. The conftest forces 8 host
devices, so the tier's device (``cpu:3``) differs from the process's default (``cpu:0``). The runs
of this tier for real are in ``test_devices_fast.py``.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import pytest
import test_exports

import turnout as tn
from turnout.devices.one_device import TIER, OneDevice
from turnout.fast_options import FastOptions
from turnout.session import RunOptions, RunResult


def _here() -> Any:
    """The device an array made now lands on: JAX's default device in the current scope."""
    return next(iter(jnp.zeros(()).devices()))


class _Lane:
    """A lane that records where it was called and with what; ``ahead`` is its ``ahead_of_time``
    attribute (None: it has none, as a lane that is not ``fast.lane``'s)."""

    def __init__(self, ahead: Optional[bool], result: Optional[tuple[Any, dict[str, Any]]]) -> None:
        if ahead is not None:
            self.ahead_of_time = ahead
        self.result = result
        self.calls: list[tuple[Any, Any, Any]] = []

    def __call__(self, feed_dict: Any, variables: Any) -> Optional[tuple[Any, dict[str, Any]]]:
        self.calls.append((feed_dict, variables, _here()))
        return self.result


class _Backend:
    """Stands for the tier's ``FastBackend``: each call records its arguments and the device it ran
    under, and answers with what the test set."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], Any]] = []
        self.variable_store = object()
        self.lane: Optional[_Lane] = None

    def _record(self, name: str, *args: Any) -> None:
        self.calls.append((name, args, _here()))

    def run(self, *args: Any) -> RunResult:
        self._record("run", *args)
        return RunResult([1.0], stats={"executor": "compiled"})

    def explain(self, *args: Any) -> str:
        self._record("explain", *args)
        return "schedule"

    def lane_for(self, *args: Any) -> Optional[_Lane]:
        self._record("lane_for", *args)
        return self.lane

    def device_feed(self, value: Any) -> str:
        self._record("device_feed", value)
        return "fed"


def _tier() -> tuple[OneDevice, _Backend, Any, Any]:
    """The tier on 8 host devices with a stand-in backend, the graph's fetch, and ``cpu:3``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = x * 2.0
    devices = {f"cpu:{i}": d for i, d in enumerate(jax.devices("cpu"))}
    od = OneDevice(g, FastOptions(), devices)
    backend = _Backend()
    od.backend = backend  # type: ignore[assignment]
    return od, backend, y, devices["cpu:3"]


def test_the_tier_builds_the_fast_backend_on_its_graph_and_options() -> None:
    """Law: the tier's backend is the one-device ``FastBackend`` of the placed graph, with the session's
    options, and its store of Variables is the backend's. Kills the backend replaced by None or built
    on no graph or with no options."""
    g = tn.Graph()
    with g.as_default():
        tn.placeholder(tn.float32, [], name="x")
    options = FastOptions(stack_chunk=FastOptions().stack_chunk * 2)
    od = OneDevice(g, options, {})
    assert od.backend.graph is g and od.backend.options == options
    assert od.variable_store is od.backend.variable_store and od.device is None


def test_a_run_goes_to_the_backend_on_its_device_and_names_the_tier() -> None:
    """Law: a run hands the backend exactly its fetches, feeds, Variables and options, inside the
    default-device scope of the device it names, records that device, and names this tier in the
    result's stats. Kills each argument dropped or None, the scope's device None, the result None,
    the device not kept, and the tier's name or key changed."""
    assert len(jax.devices("cpu")) >= 4 and _here() != jax.devices("cpu")[3]
    od, backend, y, jd = _tier()
    fetches, feeds, variables, options = [y], {y: 1.0}, {"v": 2.0}, RunOptions()
    result = od.run("cpu:3", fetches, feeds, variables, options)  # type: ignore[arg-type]
    name, args, where = backend.calls[-1]
    assert name == "run" and where == jd
    assert all(a is b for a, b in zip(args, (fetches, feeds, variables, options), strict=True))
    assert result.stats == {"executor": "compiled", "tier": "one device"} and TIER == "one device"
    assert od.device == "cpu:3"


def test_explain_and_device_feed_go_to_the_backend_on_their_device() -> None:
    """Law: ``explain`` and ``device_feed`` hand the backend exactly their arguments, inside the
    default-device scope of the device they name. Kills each argument dropped or None and the
    scope's device None."""
    od, backend, y, jd = _tier()
    fetches, feeds, variables = [y], {y: 1.0}, {"v": 2.0}
    assert od.explain("cpu:3", fetches, feeds, variables, 1024) == "schedule"  # type: ignore[arg-type,comparison-overlap]
    name, args, where = backend.calls[-1]
    assert name == "explain" and where == jd
    assert all(a is b for a, b in zip(args, (fetches, feeds, variables, 1024), strict=True))
    value = object()
    assert od.device_feed("cpu:3", value) == "fed"
    assert backend.calls[-1] == ("device_feed", (value,), jd)


def test_no_lane_before_a_run_nor_where_the_backend_offers_none() -> None:
    """Law: before a run of this tier there is no lane (the tier's device is not known yet, and the
    backend is not asked); after one, the tier offers none where its backend offers none. Kills the
    ``device is None`` and ``lane is None`` tests negated."""
    od, backend, y, _ = _tier()
    assert od.lane_for([y], {}, {}) is None and backend.calls == []
    od.run("cpu:3", [y], {}, {}, RunOptions())
    assert od.lane_for([y], {}, {}) is None


def test_a_lane_is_asked_for_on_the_tiers_device_and_wrapped_once() -> None:
    """Law: after a run on ``cpu:3``, the tier asks its backend for the lane with exactly its
    arguments inside that device's scope, and wraps each lane once: asked again for the same lane, it
    gives the same wrapper (the session keeps each lane once); a different lane that lies at a
    recorded id (the old one gone) gets a wrapper of its own. Kills the lane's arguments dropped or
    None, the scope's device None, the look-up by a wrong key, the identity test changed, the wrapper
    not kept, and the wrong element returned."""
    od, backend, y, jd = _tier()
    od.run("cpu:3", [y], {}, {}, RunOptions())
    lane = backend.lane = _Lane(ahead=False, result=(["v"], {}))
    fetches, feeds, given, ops = [y], {y: 1.0}, {"x": 1.0}, [False]
    first = od.lane_for(fetches, feeds, given, ops)  # type: ignore[arg-type]
    name, args, where = backend.calls[-1]
    assert name == "lane_for" and where == jd
    assert all(a is b for a, b in zip(args, (fetches, feeds, given, ops), strict=True))
    assert first is not None and first is not lane
    assert od.lane_for(fetches, feeds, given, ops) is first  # type: ignore[arg-type]
    other = backend.lane = _Lane(ahead=False, result=(["w"], {}))
    od._lanes[id(other)] = od._lanes.pop(id(lane))  # (as if ``other`` took the id of a lane gone)
    second = od.lane_for(fetches, feeds, given, ops)  # type: ignore[arg-type]
    assert second is not None and second is not first
    assert second({}, {}) == (["w"], {"tier": TIER})


@pytest.mark.parametrize("ahead", [False, None, True])
def test_a_lane_runs_on_the_tiers_device_unless_compiled_there_ahead_of_time(ahead: Optional[bool]) -> None:
    """Law: the wrapper of a lane calls it with exactly its feeds and Variables, and names this tier
    in the stats of what it returns; it enters the device's scope only for a lane that calls the
    jitted function (``ahead_of_time`` false or absent): one compiled ahead of time runs where it was
    compiled, so it is called in the scope the caller is in (here the process's default). Kills the
    scope test negated, read from the wrong object or attribute, or with a wrong default, the
    wrapper's device None or its call given a wrong argument, and the stats not named."""
    od, backend, y, jd = _tier()
    od.run("cpu:3", [y], {}, {}, RunOptions())
    lane = backend.lane = _Lane(ahead=ahead, result=(["v"], {"route": "lane"}))
    placed = od.lane_for([y], {}, {})
    assert placed is not None
    feed_dict, variables = {"x": 1.0}, {"v": 2.0}
    assert placed(feed_dict, variables) == (["v"], {"route": "lane", "tier": TIER})
    (got_feeds, got_vars, where), = lane.calls
    assert got_feeds is feed_dict and got_vars is variables
    assert where == (_here() if ahead else jd)


@pytest.mark.parametrize("ahead", [False, True])
def test_a_lane_that_declines_returns_none_through_the_wrapper(ahead: bool) -> None:
    """Law: where the lane declines (returns None: the session then runs the general path), the
    wrapper returns None and names nothing. Kills the ``got is not None`` test negated."""
    od, backend, y, _ = _tier()
    od.run("cpu:3", [y], {}, {}, RunOptions())
    backend.lane = _Lane(ahead=ahead, result=None)
    placed = od.lane_for([y], {}, {})
    assert placed is not None and placed({}, {}) is None


def test_the_module_exports_what_it_defines() -> None:
    """Law: ``__all__`` names only what the module defines (``test_exports``'s law, for this module).
    Kills every mutant of ``__all__``."""
    test_exports.test_every_exported_name_exists("turnout.devices.one_device")
