"""The rule names a trace records are the rules of ``specs/rules.toml`` the small-step system fires.

A trace is evidence only if its labels are right: the deadness and exactly-once checks, the Chrome
export and ``Trace.summary`` all read them. Two laws, on generated programs and on closed-form ones:

* every rule name in a reference trace, and every rule the small-step system fires, is a *dynamic*
  rule of ``specs/rules.toml``;
* node by node and tag by tag, the reference interpreter's trace and the small-step system's node
  firings carry the same rule name and the same deadness. One naming difference is by design: the
  reference fires a NextIteration whose iteration is outside the ``parallel_iterations`` window as
  ``E-Next-Live`` and parks the value in its frame bookkeeping, while the small-step system names the
  firing ``E-Next-Park`` (which one happens depends on the schedule, so both map to one name).
  Iteration retirements ([E-Iter-Retire]) match one for one as well.
"""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from example_counts import examples
from hypothesis import given, settings
from programs import Program, build
from strategies import programs_with_inputs

import turnout as tn
from turnout import raw
from turnout.semantics import smallstep
from turnout.session import RunOptions

RULES = tomllib.loads((Path(__file__).parents[1] / "specs" / "rules.toml").read_text())["rule"]
DYNAMIC = {r["name"] for r in RULES if r["kind"] == "dynamic"}
TRACED = RunOptions(trace=True, max_firings=200_000, max_iterations=1_000)
Key = tuple[str, str, tuple[tuple[str, int], ...], bool]


def reference_events(graph: tn.Graph, fetches: Any, feeds: dict[Any, Any] | None = None,
                     options: RunOptions = TRACED) -> list[Any]:
    sess = tn.Session(graph)
    sess.run(fetches, feeds, options=options)
    assert sess.last_result is not None and sess.last_result.trace is not None
    return list(sess.last_result.trace.events)


def smallstep_steps(graph: tn.Graph, fetches: Any, feeds: dict[Any, Any] | None = None) -> list[Any]:
    """Every step of one small-step run (first enabled firing each time), as ``Firing`` objects."""
    c = smallstep.initial(graph, fetches, feeds)
    steps = []
    while en := smallstep.enabled(c):
        assert len(steps) < 100_000, "small-step run did not end"
        c = smallstep.fire(c, en[0])
        steps.append(en[0])
    return steps


def _norm(rule: str) -> str:
    return "E-Next-Live" if rule == "E-Next-Park" else rule


def reference_keys(events: list[Any]) -> tuple[Counter[Key], Counter[tuple[str, Any]]]:
    """(rule, node, tag, dead) of each node firing, and (frame, tag) of each retirement."""
    fires = Counter((_norm(e.rule), e.node, e.tag, e.dead) for e in events
                    if e.rule not in ("E-Iter-Retire", "E-Frame-Done"))
    retires = Counter((e.node.removesuffix("#retire"), e.tag) for e in events if e.rule == "E-Iter-Retire")
    return fires, retires


def smallstep_keys(steps: list[Any]) -> tuple[Counter[Key], Counter[tuple[str, Any]]]:
    fires = Counter((_norm(f.rule), f.node, f.tag, f.dead) for f in steps if f.is_node_firing)
    retires = Counter((f.node, f.tag) for f in steps if f.rule == "E-Iter-Retire")
    return fires, retires


def check_trace_rules(graph: tn.Graph, fetches: Any, feeds: dict[Any, Any] | None = None) -> list[Any]:
    """Both laws on one run; returns the reference events for further closed-form checks."""
    fetches = fetches if isinstance(fetches, list) else [fetches]
    events = reference_events(graph, fetches, feeds)
    steps = smallstep_steps(graph, fetches, feeds)
    ref_rules, ss_rules = {e.rule for e in events}, {f.rule for f in steps}
    assert ref_rules <= DYNAMIC, f"the reference trace records rules not in specs/rules.toml: {ref_rules - DYNAMIC}"
    assert ss_rules <= DYNAMIC, f"the small-step system fires rules not in specs/rules.toml: {ss_rules - DYNAMIC}"
    (rf, rr), (sf, sr) = reference_keys(events), smallstep_keys(steps)
    assert rf == sf, f"reference only: {sorted(rf - sf)[:5]}; small-step only: {sorted(sf - rf)[:5]}"
    assert rr == sr, f"retirements differ: reference only {sorted(rr - sr)[:5]}, small-step only {sorted(sr - rr)[:5]}"
    for e in events:
        if e.rule == "E-Frame-Done":  # the reference records the dead token an Exit receives at the end
            assert e.op == "Exit" and e.dead, e
    return events


# ---- the law on generated programs --------------------------------------------------------------------
@settings(max_examples=examples(40))
@given(programs_with_inputs(loops=True, conds=True, max_depth=2))
def test_trace_rule_names_match_the_smallstep_firings(pi: tuple[Program, dict[str, Any]]) -> None:
    p, inputs = pi
    b = build(p)
    check_trace_rules(b.graph, b.fetches, b.feed_dict(inputs))


# ---- closed-form: each control-flow rule by name -------------------------------------------------------
def _rules_of(events: list[Any], node: str) -> list[tuple[str, bool]]:
    """(rule, dead) of every firing of the node called ``node`` (builders prefix names with scopes)."""
    return [(e.rule, e.dead) for e in events if e.node == node or e.node.endswith("/" + node)]


def test_cond_rules_by_name_including_noop_on_the_untaken_branch() -> None:
    """[E-Switch] live, [E-Merge-Live], and [E-Op-Dead] for everything on the untaken branch, NoOps
    made by ``tn.group`` and ops under ``tn.control_dependencies`` included (a NoOp there that fired
    live would let its dependents run on a branch that was not taken)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")

        def taken() -> Any:
            return x + 1.0

        def untaken() -> Any:
            y = tn.multiply(x, 2.0, name="y")
            gr = tn.group(y, name="grp")
            with tn.control_dependencies([gr]):
                return tn.identity(y, name="after_grp")

        out = tn.cond(x > 0.0, taken, untaken)
    events = check_trace_rules(g, out, {x: np.float32(3.0)})
    assert _rules_of(events, "grp") == [("E-Op-Dead", True)]
    assert _rules_of(events, "after_grp") == [("E-Op-Dead", True)]
    assert _rules_of(events, "y") == [("E-Op-Dead", True)]
    merges = [e for e in events if e.op == "Merge"]
    assert merges and all((e.rule, e.dead) == ("E-Merge-Live", False) for e in merges)
    switches = [e for e in events if e.op == "Switch"]
    assert switches and all((e.rule, e.dead) == ("E-Switch", False) for e in switches)
    assert tn.Session(g).run(out, {x: np.float32(3.0)}) == np.float32(4.0)


def test_loop_rules_by_name() -> None:
    """A three-trip loop: [E-Enter] and [E-Enter-Const] once each, [E-LoopCond] four times,
    [E-Next-Live] three times and [E-Next-Dead] once, [E-Exit-Dead] three times then [E-Exit-Live]
    once, and a dead Switch ([E-Switch-Dead]) nowhere, since every iteration's predicate is live."""
    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([raw.enter(tn.constant(0), "f", name="e0"), raw.BACK_EDGE], name="m")
        lim = raw.enter(tn.constant(3), "f", is_constant=True, name="lim")
        p = raw.loop_cond(tn.less(m, lim), name="lc")
        sf, st = raw.switch(m, p, name="sw")
        one = raw.enter(tn.constant(1), "f", is_constant=True, name="one")
        raw.close_back_edge(m, raw.next_iteration(tn.add(st, one), name="ni"))
        out = raw.exit(sf, name="ex")
    events = check_trace_rules(g, out)
    assert _rules_of(events, "e0") == [("E-Enter", False)]
    assert _rules_of(events, "lim") == [("E-Enter-Const", False)]
    assert Counter(_rules_of(events, "lc")) == {("E-LoopCond", False): 4}
    assert Counter(_rules_of(events, "ni")) == {("E-Next-Live", False): 3, ("E-Next-Dead", True): 1}
    assert Counter(_rules_of(events, "ex")) == {("E-Exit-Dead", True): 3, ("E-Exit-Live", False): 1}
    assert Counter(_rules_of(events, "m")) == {("E-Merge-Live", False): 4}
    assert Counter(_rules_of(events, "sw")) == {("E-Switch", False): 4}
    retired = [e.tag[-1][1] for e in events if e.rule == "E-Iter-Retire"]
    assert retired == [0, 1, 2, 3]
    assert tn.Session(g).run(out) == 3


def test_dead_switch_dead_merge_and_dead_loop_entry_by_name() -> None:
    """A cond inside the untaken branch of a cond: its Switch fires [E-Switch-Dead] and its Merge
    [E-Merge-AllDead]; a loop on the untaken branch is entered dead ([E-Merge-DeadEnter]) and its Exit
    is released dead when the frame instance completes ([E-Frame-Done])."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, shape=[], name="x")

        def untaken() -> Any:
            inner = tn.cond(x > 5, lambda: x + 1, lambda: x - 1)
            _, r = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v + inner), [tn.constant(0), inner])
            return r

        out = tn.cond(x > 0, lambda: x * 10, untaken)
    events = check_trace_rules(g, out, {x: np.int32(2)})
    rules = Counter(e.rule for e in events)
    for name in ("E-Switch-Dead", "E-Merge-AllDead", "E-Merge-DeadEnter", "E-Frame-Done", "E-Exit-Dead"):
        assert rules[name] >= 1, (name, rules)
    assert all(e.dead for e in events if e.rule in ("E-Switch-Dead", "E-Merge-AllDead", "E-Merge-DeadEnter"))
    assert tn.Session(g).run(out, {x: np.int32(2)}) == 20


def test_parked_iterations_are_named_by_both_executors() -> None:
    """With ``parallel_iterations=1`` the reference parks every NextIteration value until the previous
    iteration retires; the laws still hold (see the module docstring) and the value is right."""
    g = tn.Graph()
    with g.as_default():
        _, s = tn.while_loop(lambda i, s: i < 4, lambda i, s: (i + 1, s + i), [tn.constant(0), tn.constant(0)],
                             parallel_iterations=1)
    check_trace_rules(g, s)
    assert tn.Session(g).run(s) == 6


def test_trace_summary_counts_rules_and_frames() -> None:
    """``Trace.summary`` counts firings, live and dead firings, iterations per frame and firings per rule
    from the events themselves."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, shape=[], name="x")
        _, s = tn.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s + x), [tn.constant(0), tn.constant(0)])
        out = tn.cond(s > 100, lambda: s + 1, lambda: s - 1)
    events = reference_events(g, out, {x: np.int32(2)})
    sess = tn.Session(g)
    assert sess.run(out, {x: np.int32(2)}, options=TRACED) == 5
    assert sess.last_result is not None and sess.last_result.trace is not None
    summary = sess.last_result.trace.summary()
    fired = [e for e in events if e.rule not in ("E-Iter-Retire", "E-Frame-Done")]  # node firings only
    assert summary["firings"] == len(fired) == sess.last_result.stats["firings"] > 0
    assert summary["live"] == sum(not e.dead for e in fired) > 0
    assert summary["dead"] == sum(e.dead for e in fired) > 0
    assert summary["retirements"] == sum(e.rule == "E-Iter-Retire" for e in events) == 4
    assert summary["events"] == len(events)
    assert summary["live"] + summary["dead"] == summary["firings"]
    assert summary["rules"] == dict(Counter(e.rule for e in events))
    (frame,) = summary["iterations_per_frame"]
    assert summary["iterations_per_frame"][frame] == 4  # iterations 0..3; the 4th ends the loop
