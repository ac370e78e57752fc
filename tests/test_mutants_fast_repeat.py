"""Laws of the repeated runs' bookkeeping (``turnout.fast.repeat.Repeats``): which lanes are made,
kept, refused and forgotten. Each law kills mutants of the full set of ``fast/repeat.py`` (issue 40,
part 3) that left every run's values right and only made lanes too often, too rarely, or kept them
too long: caches whose keys or refusals were wrong. The routes and the backend are stand-ins, since
``Repeats`` reads only their identity, a plan's ``slots.learns`` and the graph's ``version`` and
``edits``; ``make_lane`` is replaced by a counter."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from turnout.fast import repeat as repeat_module
from turnout.fast.repeat import HotFused, Repeats


def _route() -> Any:
    """A stand-in ``Direct`` route: a plan whose runs learn no checkpoint slots."""
    return SimpleNamespace(plan=SimpleNamespace(slots=SimpleNamespace(learns=False)))


@dataclass(frozen=True, eq=False)
class _Tensor:
    """A stand-in tensor: hashed by identity, as ``tn.Tensor`` is."""

    node: Any
    index: int = 0


def _tensor(node_id: int) -> Any:
    return _Tensor(SimpleNamespace(id=node_id))


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``make_lane`` replaced: each call is recorded; it refuses (None) while ``refuse`` is set, else
    makes a new stand-in lane of the graph's version."""
    state = SimpleNamespace(calls=[], refuse=False)

    def fake(backend: Any, d: Any, fetches: Any, feeds: Any, given: Any, bound: Any, ops: Any) -> Any:
        state.calls.append((d, dict(given), ops))
        return None if state.refuse else SimpleNamespace(version=backend.graph.version)

    monkeypatch.setattr(repeat_module, "make_lane", fake)
    return state


def _repeats() -> Repeats:
    return Repeats(SimpleNamespace(graph=SimpleNamespace(version=0, edits=0)))  # type: ignore[arg-type]


def test_a_refused_lane_is_asked_for_once_per_graph_version(made: Any) -> None:
    """A route whose lane was refused is not asked again while the graph is unchanged (a hot run must
    not pay for asking), and is asked again once the graph changed."""
    rep, d, x = _repeats(), _route(), _tensor(1)
    made.refuse = True
    for _ in range(3):
        assert rep.lane(d, [x], {x: 1.0}, {x: 1.0}) is None
    assert len(made.calls) == 1
    rep.backend.graph.version += 1
    assert rep.lane(d, [x], {x: 1.0}, {x: 1.0}) is None
    assert len(made.calls) == 2


def test_a_lane_is_made_once_per_feed_type_shape_and_ops(made: Any) -> None:
    """The lanes of one route are told apart by each feed's Python type (a Python int and a float
    have no dtype or shape), dtype and shape, and by the ops the session asks for; the same
    signature gets the lane already made."""
    rep, d, x = _repeats(), _route(), _tensor(1)
    signatures = [({x: 3}, None), ({x: 3.0}, None), ({x: np.zeros(2)}, None), ({x: np.zeros(3)}, None),
                  ({x: np.zeros(3, np.float32)}, None), ({x: 3}, [True]), ({x: 3}, [False])]
    lanes = [rep.lane(d, [x], dict(given), given, ops) for given, ops in signatures]
    assert len(made.calls) == len(signatures)
    assert len({id(lane) for lane in lanes}) == len(signatures)
    again = [rep.lane(d, [x], dict(given), given, ops) for given, ops in signatures]
    assert len(made.calls) == len(signatures)
    assert all(a is b for a, b in zip(again, lanes, strict=True))


def test_remembering_the_same_route_again_keeps_its_lanes(made: Any) -> None:
    """A route recorded again for the same fetches and feeds keeps the lanes made for it; a new route
    recorded there takes their place, and the old route's lanes and refusals go (others stay)."""
    rep, d, x = _repeats(), _route(), _tensor(1)
    feeds = {x: np.zeros(2)}
    rep.remember(d, [x], feeds)
    lane = rep.lane(d, [x], feeds, dict(feeds))
    rep.remember(d, [x], feeds)
    assert rep.lane(d, [x], feeds, dict(feeds)) is lane and len(made.calls) == 1
    made.refuse = True
    other, y = _route(), _tensor(2)
    assert rep.lane(d, [x], feeds, {x: 1.0}) is None  # (a refusal recorded for d)
    assert rep.lane(other, [y], {y: 1.0}, {y: 1.0}) is None  # (and one for another route)
    assert len(rep.no_lane) == 2
    rep.remember(_route(), [x], feeds)  # (a new route for d's fetches and feeds)
    assert not rep.lanes
    assert [v[0] is other for v in rep.no_lane.values()] == [True]  # (routes compare by identity)


def test_a_lane_is_given_only_for_the_run_that_recorded_the_route(made: Any) -> None:
    """The session asks for a lane after its run: it gets one only where that run (the same feed
    dict, the same fetch objects) recorded the route; another fetch list of the same length, or
    another feed dict with the same fetches, gets none and makes none."""
    rep, d, x, y = _repeats(), _route(), _tensor(1), _tensor(2)
    feeds = {x: np.zeros(2)}
    for fetches, asked in (([y], feeds), ([x], {x: np.zeros(2)})):
        rep.remember(d, [x], feeds)
        assert rep.lane_for(fetches, asked, dict(asked)) is None
    assert made.calls == []
    rep.remember(d, [x], feeds)
    assert rep.lane_for([x], feeds, dict(feeds)) is not None and len(made.calls) == 1


def test_a_fused_route_is_not_recognised_once_its_plan_left_the_rung() -> None:
    """A repeat of a fused attempt goes to its lane only while the rung that held the last run is
    still its plan's rung, nothing predicted an overflow and the rung's buffers are kept: after a
    climb (or a descent) the general path must choose the rung."""
    plan = SimpleNamespace()
    top = SimpleNamespace(predict_overflow=False, rung=plan)
    d = HotFused(plan, top, {}, [], (), False)  # type: ignore[arg-type]
    backend = SimpleNamespace(graph=SimpleNamespace(version=0, edits=0), _checked_version=0, _timeline=None,
                              _stack_bufs={id(plan): object()}, _dev_vars={})
    rep = Repeats(backend)  # type: ignore[arg-type]
    x = _tensor(1)
    feeds = {x: np.zeros(2)}
    rep.routes[rep.key([x], feeds)] = (d, 0)
    assert rep.recognise([x], feeds, {}) is d
    top.rung = SimpleNamespace()  # (the ladder's rung is another plan now)
    assert rep.recognise([x], feeds, {}) is None
    top.rung, top.predict_overflow = plan, True
    assert rep.recognise([x], feeds, {}) is None
    top.predict_overflow = False
    del backend._stack_bufs[id(plan)]
    assert rep.recognise([x], feeds, {}) is None


def test_a_hot_run_reports_the_compiles_so_far_and_its_call_time() -> None:
    """A repeat run by its lane after the session's checks (route ``"hot"``: a run with options)
    reports what a general run reports: the backend's compiles so far (none new) and the seconds of
    its one call."""
    import turnout as tn

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")
        y = x * 2.0 + 1.0
    sess = tn.Session(g, backend="fast")
    for k in range(3):
        sess.run(y, {x: np.arange(3, dtype=np.float32) + k}, options={})
    stats = sess.last_result.stats
    assert stats["route"] == "hot"
    assert stats["compiles"] == sess.backend.compile_count == 1
    (seconds,) = stats["stage_seconds"]
    assert 0.0 < seconds < 60.0
