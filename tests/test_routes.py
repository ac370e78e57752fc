"""Every route gives the same answer: one generated program, forced down each way a run can execute.

Why: the compiled side reaches its speed by shortening the route a run takes through one model — a
repeated run's lane, the one ``Direct`` call of a program without stacks, the fused attempt on the
capacity ladder, the staged path that drives loops chunk by chunk, a graph placed on one device
through the partitioned backend, per-device compiled and host-driven tiers, the SPMD program over a
mesh. A shortcut that disagrees with the model on one plain program is a silent wrong answer, so each
route is *forced* here (by the options that select it, checked from the run's own statistics) on
generated programs — with gradients and with Variables — and must give the reference interpreter's
values, Variables and error types. The reference fallback route is the interpreter itself; the
programs below all compile, so a run that fell back would fail the ``warnings`` filter.

The ``ci`` profile keeps this to a few dozen programs; ``TURNOUT_HYPOTHESIS_PROFILE=dev`` or
``nightly`` runs many more.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from programs import assert_same_outcome, build, to_source
from strategies import gradient_cases, placements, programs_with_inputs
from test_stateful_properties import ACTIONS
from test_stateful_properties import _build as stateful_program

import turnout as tn
from turnout.session import RunOptions

pytest.importorskip("jax")

GUARD = dict(max_iterations=1_000)
BUDGET = settings.default.max_examples
DEVICES = ("cpu:0", "cpu:1", "cpu:2")


@dataclass(frozen=True)
class Route:
    """One way a run executes: how to make a session that takes it, how many runs it takes to get
    there (a repeated run's lane is the second run of one signature), and what the run's statistics
    say when it was taken."""

    name: str
    session: Callable[[tn.Graph, dict[str, str]], tn.Session]
    runs: int
    taken: Callable[[dict[str, Any]], bool]


def _spread(stats: dict[str, Any]) -> bool:
    """A placed run took a several-device tier, unless its placement put every node on one device
    (a small program whose colocation groups all drew one device: that run is the one-device route)."""
    return stats.get("executor") == "fast partitioned" or stats.get("tier") == "one device"


def _fast(**kw: Any) -> Callable[[tn.Graph, dict[str, str]], tn.Session]:
    return lambda g, _req: tn.Session(g, backend="fast", **kw)


def _placed(**kw: Any) -> Callable[[tn.Graph, dict[str, str]], tn.Session]:
    return lambda g, req: tn.Session(g, backend="fast", devices=list(DEVICES), requests=req, **kw)


ROUTES = [
    Route("first run (one call: Direct or the fused attempt)", _fast(), 1,
          lambda s: s["route"] == "general" and s["executor"] == "compiled" and s["stages"] == 1),
    Route("repeated run (its lane)", _fast(), 2, lambda s: s["route"] in ("lane", "hot")),
    Route("staged, chunks of one entry", _fast(options=tn.FastOptions(stack_chunk=1, stack_ladder=False)), 1,
          lambda s: s["executor"] == "compiled" and (not s["fused"] or s["stack_capacity"] == 1)),
    Route("one device, through the partitioned backend", _fast(devices=["cpu:0"]), 2,
          lambda s: s["tier"] == "one device"),
    Route("several devices, per-device tiers", _placed(whole_program="never"), 1,
          lambda s: _spread(s) and s["tier"] != "spmd"),
    Route("several devices, SPMD", _placed(whole_program="always"), 1,
          lambda s: _spread(s) and (s["tier"] in ("spmd", "one device") or "whole_program_declined" in s)),
    Route("several devices, partitioned reference", lambda g, req: tn.Session(g, devices=list(DEVICES),
                                                                               requests=req), 1,
          lambda s: "firings_per_device" in s),
]


def _run_route(route: Route, graph: tn.Graph, req: dict[str, str], fetches: list[Any],
               feeds: dict[tn.Tensor, Any]) -> Callable[[], list[Any]]:
    def run() -> list[Any]:
        sess = route.session(graph, req)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a fallback to the interpreter is no route here
            for _ in range(route.runs):
                got = sess.run(fetches, feeds, options=RunOptions(**GUARD))
        stats = sess.last_result.stats
        assert route.taken(stats), f"{route.name}: the run took another route ({stats})"
        return list(got)

    return run


def _check(graph: tn.Graph, fetches: list[Any], feeds: dict[tn.Tensor, Any], req: dict[str, str], what: str) -> None:
    def want() -> list[Any]:
        return list(tn.Session(graph).run(fetches, feeds, options=RunOptions(**GUARD)))

    for route in ROUTES:
        assert_same_outcome(want, _run_route(route, graph, req, fetches, feeds), f"{what}{route.name}")


@settings(max_examples=max(1, BUDGET // 8))
@given(st.data())
def test_every_route_gives_the_reference_gradients(data: st.DataObject) -> None:
    case = data.draw(gradient_cases())
    req = data.draw(placements(case.graph, min_devices=3, max_devices=3)).requests
    req = {k: DEVICES[int(v[-1])] for k, v in req.items()}
    _check(case.graph, case.grads, case.feeds, req, to_source(case.program) + "\n")


@settings(max_examples=max(1, BUDGET // 8))
@given(programs_with_inputs(loops=True), st.data())
def test_every_route_gives_the_reference_values_and_errors(pi: tuple[Any, dict[str, Any]],
                                                           data: st.DataObject) -> None:
    p, inputs = pi
    b = build(p)
    req = data.draw(placements(b.graph, min_devices=3, max_devices=3)).requests
    req = {k: DEVICES[int(v[-1])] for k, v in req.items()}
    _check(b.graph, b.fetches, b.feed_dict(inputs), req, to_source(p) + "\n")


@settings(max_examples=max(1, BUDGET // 10))
@given(st.lists(ACTIONS, min_size=1, max_size=3), st.integers(0, 4), st.booleans(), st.data())
def test_every_route_gives_the_reference_variables(actions: list[Any], trips: int, grad: bool,
                                                   data: st.DataObject) -> None:
    """Variable effects on each route: the values fetched and the Variables read back after the run."""
    want_g, want_f, want_n, want_vs = stateful_program(actions, grad)
    ref = tn.Session(want_g)
    want = [*ref.run(want_f, {want_n: trips}), *ref.run(want_vs)]
    placement = data.draw(placements(want_g, min_devices=3, max_devices=3)).requests
    for route in ROUTES:
        g, fetches, n, vs = stateful_program(actions, grad)
        req = {name: DEVICES[int(d[-1])] for name, d in placement.items()}
        sess = route.session(g, req)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            for _ in range(route.runs):
                # a Variable is initialised once per session: each run applies its effects again, so
                # a route that runs twice is compared with the reference run twice
                got = sess.run(fetches, {n: trips})
        assert route.taken(sess.last_result.stats), f"{route.name}: took another route"
        got_vars = sess.run(vs)
        expect = want
        if route.runs == 2:
            twice = tn.Session(want_g)
            twice.run(want_f, {want_n: trips})
            expect = [*twice.run(want_f, {want_n: trips}), *twice.run(want_vs)]
        for a, b in zip(expect, [*got, *got_vars], strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12, err_msg=route.name)


#: what each route's statistics must say when the program below is forced down it (no degenerate case)
STRICT = {
    "first run (one call: Direct or the fused attempt)": lambda s: s["fused"] and s["stack_capacity"] == 128,
    "repeated run (its lane)": lambda s: s["route"] == "lane",
    "staged, chunks of one entry": lambda s: not s["fused"] and s["stages"] > 1,
    "one device, through the partitioned backend": lambda s: s["tier"] == "one device" and s["route"] == "hot",
    "several devices, per-device tiers": lambda s: s["tier"] == "host-driven",
    "several devices, SPMD": lambda s: s["tier"] == "spmd",
    "several devices, partitioned reference": lambda s: s["messages"] > 0 and len(s["firings_per_device"]) == 3,
}


def test_each_route_is_forced_on_a_loop_with_its_gradient() -> None:
    """The options of ``ROUTES`` really select their routes (the property tests above accept a
    degenerate placement as the one-device route): a loop with its gradient, its nodes placed round
    robin over three devices, takes each route by name and gives the reference's values."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: [i + 1, tn.tanh(y * x) + y], [tn.constant(0), x])
        (dx,) = tn.gradients(y, [x])
    req = {node.name: DEVICES[k % len(DEVICES)] for k, node in enumerate(g.nodes)}
    feeds = {x: 0.3, n: 5}
    want = tn.Session(g).run([y, dx], feeds)
    for route in ROUTES:
        sess = route.session(g, req)
        for _ in range(route.runs):
            got = sess.run([y, dx], feeds)
        assert STRICT[route.name](sess.last_result.stats), (route.name, sess.last_result.stats)
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=route.name)
