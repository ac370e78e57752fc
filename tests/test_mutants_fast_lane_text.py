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


# -- the whole text of a lane, run on stand-ins ------------------------------------------------------


class _Top:
    """The stand-in of a plan's ladder state (``top``): no overflow predicted, on the rung ``plan``."""

    def __init__(self, rung: Any) -> None:
        self.predict_overflow, self.rung = False, rung


class _Marks:
    """The stand-in of a plan's ``StackMarks``: where the general path would start (``start``)."""

    def __init__(self, start: int) -> None:
        self._start, self.pending = start, None

    def start(self) -> int:
        return self._start


class _Dead(Exception):
    """What the stand-in ``refuse_dead`` raises, as the real one raises ``DeadFetchError``."""


def _refuse(calls: list[Any]) -> Any:
    def refuse_dead(fetches: list[Any], flags: tuple[Any, ...]) -> None:
        calls.append(("refuse_dead", flags))
        raise _Dead

    return refuse_dead


class _Kept:
    """The stand-in of a ``StackValue`` a staged run left (its buffer alone is the call's argument)."""


def _attempt_spec(marked: bool, live: int) -> Any:
    """A stand-in ``CallSpec`` of a fused attempt with one stack taken and given back (result 0), one
    output (result 1), and its flags apart (result 2): the error word, the mark where ``marked``,
    then ``live`` live flags."""
    args = SimpleNamespace(stacks=("s0",), bounded=False)
    return SimpleNamespace(args=args, marked=marked, packed=None, flags=True, live=tuple(range(live)),
                           outputs=lambda: slice(1, 2), position=lambda k: 1)


def _attempt_lane(marked: bool, sources: tuple[tuple[str, Optional[int]], ...], env: dict[str, Any],
                  kept: tuple[int, ...] = (0,)) -> tuple[Any, dict[str, Any]]:
    """A fused attempt's lane, ``lane_text``'s whole text with no feeds and no Variables, made on
    stand-ins (``env`` over the defaults below): it returns the lane and the namespace it reads."""
    from turnout.fast.lane_text import LaneCall, lane_text

    lc = LaneCall(spec=_attempt_spec(marked, sum(j is not None for _, j in sources)), sig=(), feeds=(),
                  n_vars=0, state=(), stores=(), sources=sources, attempt=True, kept=kept, overlap=False,
                  fixed=())
    plan, seg = object(), object()
    calls: list[Any] = []
    names: dict[str, Any] = {
        "graph": SimpleNamespace(_version=1, _edits=0), "version": 1, "edits": 0, "top": _Top(plan),
        "plan": plan, "stage": SimpleNamespace(fns={"seg": seg}), "seg": seg, "pid": 4,
        "stack_bufs": {4: {"s0": "buffer"}}, "StackValue": _Kept,
        "buffers_of": lambda stacks: {k: ("buffer of", v) for k, v in stacks.items()}, "b0": "s0", "p0": "s0",
        "clock": lambda: 0.0, "pending": False, "cpp_entry": None, "JaxRuntimeError": RuntimeError,
        "out_of_memory": None, "asarray": np.asarray, "backend": SimpleNamespace(_records=None),
        "fail": lambda *a: calls.append(("fail", a)), "marks": _Marks(8), "recent": [], "stats": {},
        "lower": 2, "cap": 16, "fetches": ["f0", "f1"], "records": "records",
        "refuse_dead": _refuse(calls), "calls": calls,
        "call": None, **env}
    order = list(names)
    text = lane_text(lc, order)
    exec(compile(text, "<lane>", "exec"), names)
    return names["make"](*[names[n] for n in order]), names


def test_an_attempt_lane_hands_back_a_run_whose_stack_buffers_are_gone() -> None:
    """A fused attempt's lane takes the stack buffers the last run left (``stack_bufs[pid]``); when
    there are none (released, or taken by a run that failed), it hands the run back (``None``) and
    calls nothing."""
    called: list[Any] = []
    lane, names = _attempt_lane(True, (("asarray(res[1])", None),),
                                {"call": lambda *a: called.append(a) or ("s", 1.0, [0, 3])})
    assert lane(None, None) is not None and len(called) == 1
    names["stack_bufs"].clear()
    assert lane(None, None) is None and len(called) == 1


def test_an_attempt_lane_passes_the_buffers_of_stacks_a_staged_run_kept() -> None:
    """Stacks a staged run kept as ``StackValue`` records go into the call as their buffers alone
    (``buffers_of``), and the call's kept stacks are what the lane leaves for the next run."""
    called: list[Any] = []
    lane, names = _attempt_lane(True, (("asarray(res[1])", None),),
                                {"call": lambda *a: called.append(a) or ("new", 1.0, [0, 3])})
    kept = _Kept()
    names["stack_bufs"][4] = {"s0": kept}
    values, _, _ = lane(None, None)
    assert called == [(("buffer of", kept),)] and names["stack_bufs"][4] == {"s0": "new"}
    assert values == [np.asarray(1.0)]


def test_an_attempt_lane_below_the_rung_it_ran_on_sends_the_next_run_to_the_general_path() -> None:
    """A fused attempt's run whose mark is at most ``lower`` while the marks say a lower rung would
    do (``marks.start() < cap``) clears ``top.rung``, so the next run starts on the general path;
    a run whose mark is above ``lower`` leaves the rung, and both record their mark."""
    mark = [3]
    lane, names = _attempt_lane(True, (("asarray(res[1])", None),),
                                {"call": lambda *a: ("s", 1.0, [0, mark[0]])})
    assert lane(None, None) is not None and names["top"].rung is names["plan"]
    mark[0] = 2
    assert lane(None, None) is not None and names["top"].rung is None
    assert names["recent"] == [3, 2] and names["stats"]["stack_mark"] == 2


def test_an_attempt_whose_trace_kept_no_mark_reads_its_flags_as_word_then_live_flags() -> None:
    """A fused attempt whose trace kept no high-water mark (``spec.marked`` false) reads its flags as
    the error word, then one live flag per fetch that has one: no mark between them."""
    lane, names = _attempt_lane(False, (("asarray(res[1])", 0),), {"call": lambda *a: ("s", 1.0, [0, 1])})
    assert lane(None, None) is not None and names["calls"] == []
    lane, names = _attempt_lane(False, (("asarray(res[1])", 0),), {"call": lambda *a: ("s", 1.0, [0, 0])})
    with pytest.raises(_Dead):
        lane(None, None)
    assert names["calls"] == [("refuse_dead", (0,))]


def test_a_lane_hands_back_a_run_whose_error_word_fail_does_not_raise() -> None:
    """A nonzero error word goes to ``fail``; where it returns (a stack outgrew an attempt's rung),
    the lane hands the run back (``None``) before reading any fetch."""
    lane, names = _attempt_lane(False, (("asarray(res[1])", 0),), {"call": lambda *a: ("s", 1.0, [5, 1])})
    assert lane(None, None) is None
    assert [c[0] for c in names["calls"]] == ["fail"]


def test_a_dead_fetch_is_refused_with_a_flag_per_fetch_and_one_for_those_always_live() -> None:
    """``refuse_dead`` gets one flag per fetch, in the fetches' order: a fetch with a live flag gives
    its flag, one with none (always live) gives 1, so the first dead fetch is the one named."""
    sources = (("asarray(res[1])", 0), ("to_host(v0)", None), ("asarray(res[1])", 1))
    lane, names = _attempt_lane(False, sources, {"call": lambda *a: ("s", 1.0, [0, 1, 0])})
    with pytest.raises(_Dead):
        lane(None, None)
    assert names["calls"] == [("refuse_dead", (1, 1, 0))]


def test_a_lane_s_text_is_registered_under_its_digest_and_reads_back_whole() -> None:
    """``lane_filename`` names a text by the first twelve hex digits of its SHA-1 and registers its
    lines, ends kept, with ``linecache``: what a traceback reads back is the text as compiled."""
    import hashlib
    import linecache
    import re

    from turnout.fast.lane_text import lane_filename

    source = "def make():\n    return 1\n"
    name = lane_filename(source)
    digest = re.fullmatch(r"<turnout\.fast\.lane ([0-9a-f]+)>", name)
    assert digest is not None and hashlib.sha1(source.encode()).hexdigest().startswith(digest.group(1))
    assert len(digest.group(1)) == 12
    assert "".join(linecache.getlines(name)) == source and linecache.getline(name, 2) == "    return 1\n"
