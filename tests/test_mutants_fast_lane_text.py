"""Laws of the lanes' text generator (``turnout.fast.lane_text``) that the repeated runs of
``tests/test_fast_lane.py`` do not reach: the checks every lane starts with, run on feeds a repeated
run does not give (a graph edited since, feeds to a program that takes none, feeds of another
count), and where each fetch's value is read from. Each law kills mutants of the full set of
``fast/lane_text.py`` (issue 40, part 3).

The checks are compiled from ``check_source``'s lines, as ``lane_text`` writes them, in a namespace of
stand-ins for the names the lane's ``make`` gives; the sources come from a stand-in ``CallSpec``.
Nothing is traced or compiled, so the file takes milliseconds.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Optional

import numpy as np
import pytest

from turnout.fast.lane_text import check_source, sources_of

PASSED = "passed"


def _lane(sig: tuple[Any, ...], env: dict[str, Any], n_vars: int = 0, fixed: tuple[int, ...] = ()) -> Any:
    """A lane of ``check_source(sig, n_vars, fixed)``'s checks alone, returning ``PASSED`` past them,
    its names those of ``env`` plus a graph at version 3 with 5 edits."""
    graph = SimpleNamespace(_version=3, _edits=5)
    names = {"graph": graph, "version": 3, "edits": 5, **env}
    text = "\n".join(["def make():", "    def lane(feed_dict, variables, run_bound=None):",
                      *check_source(sig, n_vars, fixed), f"        return {PASSED!r}", "    return lane"])
    exec(compile(text, "<lane checks>", "exec"), names)
    lane = names["make"]()
    lane.graph = graph
    return lane


@pytest.mark.parametrize("feeds", [0, 1])
def test_every_lane_first_checks_that_the_graph_is_unchanged(feeds: int) -> None:
    """A lane, with feeds or without, hands the run back (``None``) once the graph has a new version
    or another edit count than when it was made: its text was written for the graph as it was."""
    x = object()
    sig = ((x, float, None, None),) if feeds else ()
    env = {"t0": x, "c0": float, "d0": (np.dtype(np.float32), np.float32), "fits": lambda d, v: True}
    run = {x: 1.5} if feeds else None
    lane = _lane(sig, env)
    assert lane(run, None) == PASSED
    lane.graph._version += 1
    assert lane(run, None) is None
    lane.graph._version -= 1
    lane.graph._edits += 1
    assert lane(run, None) is None


def test_a_lane_of_a_program_without_feeds_hands_back_a_run_given_feeds() -> None:
    """With no feeds in its signature, a lane runs for ``feed_dict`` None or ``{}`` and hands back any
    other: a dict holding a feed, or something that is not a dict (the general path says why)."""
    lane = _lane((), {})
    assert lane(None, None) == PASSED and lane({}, None) == PASSED
    assert lane({"x": 1.0}, None) is None
    assert lane([], None) is None


def test_a_lane_hands_back_a_run_whose_feeds_are_not_its_signature_s_count() -> None:
    """With one feed in its signature, a lane hands back a run fed none, two, or not by a dict."""
    x, y = object(), object()
    env = {"t0": x, "c0": float, "d0": (np.dtype(np.float32), np.float32), "fits": lambda d, v: True}
    lane = _lane(((x, float, None, None),), env)
    assert lane({x: 2.0}, None) == PASSED
    assert lane({}, None) is None
    assert lane({x: 2.0, y: 1.0}, None) is None
    assert lane(None, None) is None


def test_a_feed_after_one_the_plan_is_specialised_on_is_checked_too() -> None:
    """A Python int the plan took as a constant is compared with that constant (``x0``) and replaced
    by its converted value (``e0``); the feeds after it are still checked, each in turn."""
    x, y = object(), object()
    f32 = (np.dtype(np.float32), np.float32)
    env = {"t0": x, "c0": int, "d0": (np.dtype(np.int32), np.int32), "x0": 2, "e0": np.int32(2),
           "t1": y, "c1": float, "d1": f32, "fits": lambda d, v: True}
    lane = _lane(((x, int, None, None), (y, float, None, None)), env, fixed=(0,))
    assert lane({x: 2, y: 1.0}, None) == PASSED
    assert lane({x: 3, y: 1.0}, None) is None
    assert lane({x: 2, y: "not a float"}, None) is None
    assert lane({x: 2, object(): 1.0}, None) is None


class _DeviceVariables:
    """The stand-in store whose Variables' device copies a lane checks (``DeviceVariables``)."""

    def __init__(self, slots: dict[str, Any]) -> None:
        self._slots = slots


def test_a_lane_that_reads_variables_hands_back_a_run_on_another_store_or_a_changed_entry() -> None:
    """With Variables, a lane runs only on the store kind whose device copies it keeps, and only while
    each Variable is still the entry its device copy was made from; otherwise it hands the run back."""
    entry = object()
    env = {"DeviceVariables": _DeviceVariables, "w0": "v", "dev_vars": {"v": (entry, "copy")}}
    lane = _lane((), env, n_vars=1)
    assert lane(None, _DeviceVariables({"v": entry})) == PASSED
    assert lane(None, {"v": entry}) is None
    assert lane(None, _DeviceVariables({"v": object()})) is None
    assert lane(None, _DeviceVariables({})) is None


def _spec(live: tuple[Any, ...] = (), out: tuple[Any, ...] = (), opaque: frozenset[Any] = frozenset(),
          static: Optional[dict[Any, Any]] = None) -> Any:
    """A stand-in ``CallSpec``: ``out`` at positions 2, 3, ... of the results (two stacks first)."""
    return SimpleNamespace(live=live, out=out, opaque=opaque, static=static or {}, packed=None,
                           position=lambda k: 2 + out.index(k))


def _tensor(node: int) -> Any:
    return SimpleNamespace(node=SimpleNamespace(id=node), index=0)


def test_a_fed_value_fetched_has_no_live_flag_and_is_read_from_its_feed() -> None:
    """A fetch that the call does not compute but the run feeds (a fused attempt's flags hold live
    flags only for what its stage writes) is read from the feed (``v{j}``) with no live flag; a
    fetch with a flag names its index in the flags."""
    a, b = _tensor(7), _tensor(8)
    spec = _spec(live=((8, 0),), out=((8, 0),))
    got = sources_of(spec, [a, b], [(5, 0), (7, 0)], None, {})
    assert got == (("to_host(v1)", None), ("asarray(res[2])", 0))


def test_an_array_is_read_back_as_an_array_and_a_handle_as_the_host_makes_it() -> None:
    """An output that is an array is read with ``asarray`` (the host's copy of it, which a Variable
    fetched too reuses: ``lane.describe`` looks for that text); a TensorArray or a handle (``opaque``)
    goes through ``to_host``."""
    a, b = _tensor(1), _tensor(2)
    spec = _spec(out=((1, 0), (2, 0)), opaque=frozenset({(2, 0)}))
    got = sources_of(spec, [a, b], [], None, {})
    assert got == (("asarray(res[2])", None), ("to_host(res[3])", None))
