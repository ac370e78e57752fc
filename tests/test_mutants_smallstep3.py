"""Laws of the small-step system's updates and enabling rules, found missing by mutation testing
(``python tools/mutation.py --module semantics/smallstep.py``): what ``put`` discards at a Merge that
has fired, what ``emit`` records as produced, how ``open`` and ``start`` bound and feed iterations, the
rule each ordinary op cites, the tokens a firing names, and the Guard, conflict and dead cases of a
Merge. Where a law is about values, the reference interpreter is run beside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import graphs
import numpy as np
import pytest

import turnout as tn
from turnout import raw
from turnout.errors import MAX_ITERATIONS_HINT, describe_node
from turnout.reference.executor import run_graph
from turnout.semantics import smallstep as ss
from turnout.session import RunOptions


def _run_to_quiescence(c: ss.Config, skip: str | None = None) -> ss.Config:
    """Fire the first enabled firing until none is left (none of node ``skip``, where given)."""
    while en := [f for f in ss.enabled(c) if f.node != skip]:
        c = ss.fire(c, en[0])
    return c


def _node(g: tn.Graph, name: str) -> tn.Node:
    return next(n for n in g.nodes if n.name == name)


# ---- put: what reaches a Merge after it fired -----------------------------------------------------------
def test_a_dead_input_reaching_a_merge_after_it_fired_is_discarded() -> None:
    """``put`` at a Merge that has already fired at the tag: a dead data token (the untaken branch of a
    cond, arriving after the taken one fired the Merge) is discarded, so the run ends with Q empty
    ([T4-Quiescence]) and the value the reference interpreter gives."""
    g = tn.Graph()
    with g.as_default():
        sf, st = raw.switch(tn.constant(4.0), tn.constant(True))
        slow = sf
        for i in range(4):
            slow = tn.identity(slow, name=f"slow{i}")
        out, _ = raw.merge([slow, tn.identity(st, name="fast")], name="m")
    for sched in ("fifo", "lifo"):
        r = ss.run(g, [out], scheduler=sched)
        assert float(r.values[0]) == float(run_graph(g, [out]).values[0]) == 4.0
        assert ss.stranded(r.final) == []
    fired = [(rule, node) for rule, node, *_ in ss.run(g, [out]).firings]
    assert fired.index(("E-Merge-Live", "m")) < fired.index(("E-Op-Dead", "slow3"))  # the dead one came late


def test_a_control_token_reaching_a_merge_after_it_fired_is_discarded() -> None:
    """``put``: a control token that reaches a Merge at a tag where it already fired is discarded, live
    or dead; only a live *data* token stays (it is a conflict). Here an Exit taken from a hand-built
    loop's true branch fires live in every body iteration, so its control edge delivers at the root tag
    once per iteration: the Merge waiting on it fires at the first and the later ones leave Q empty."""
    g = tn.Graph()
    with g.as_default():
        each = graphs.exit_every_iteration()
        five = tn.constant(5.0)
        with tn.control_dependencies([each]):
            out, _ = raw.merge([five], name="waiter")
    r = ss.run(g, [out])
    assert float(r.values[0]) == 5.0
    assert [rule for rule, node, *_ in r.firings if node == "each"].count("E-Exit-Live") == 3
    assert ss.stranded(r.final) == []


# ---- emit: the fetch edges ------------------------------------------------------------------------------
def test_produced_holds_the_fetch_edges_only() -> None:
    """``emit`` records a token in ``produced`` for the fetch edges only (the configuration's fetch
    edges, ``<.., produced>``): a run ends with exactly the fetched outputs there, however many other
    outputs fired."""
    g = tn.Graph()
    with g.as_default():
        (k,) = tn.while_loop(lambda k: k < 3, lambda k: k + 1, [tn.constant(0)])
        y = k * 2
    r = ss.run(g, [y])
    assert set(r.final.produced) == {(y.node.id, y.index)} and int(r.values[0]) == 6


# ---- open and start: the iteration bound ----------------------------------------------------------------
def _zero_trip(limit_value: int) -> tuple[tn.Graph, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        (k,) = tn.while_loop(lambda k: k < limit_value, lambda k: k + 1, [tn.constant(0)])
    return g, k


def test_every_iteration_start_is_bounded_iteration_zero_included() -> None:
    """``RunOptions.max_iterations`` bounds every iteration a frame instance starts: iteration ``limit``
    may start (to find the predicate false), so ``max_iterations=0`` runs a loop that does no body;
    opening an instance starts iteration 0, so a limit below 0 (reachable by calling ``run`` directly)
    stops the run there, naming the frame instance."""
    g, k = _zero_trip(0)
    assert int(ss.run(g, [k], max_iterations=0).values[0]) == 0
    g1, k1 = _zero_trip(1)
    with pytest.raises(tn.NonTerminationError, match=r"would run body 1, over the limit max_iterations=0"):
        ss.run(g1, [k1], max_iterations=0)
    enter = min((n for n in g.nodes if n.op == "Enter"), key=lambda n: n.id)
    words = f"loop frame {enter.attrs['frame_name']!r} (instance root; entered by {describe_node(enter)})"
    with pytest.raises(tn.NonTerminationError) as info:
        ss.run(g, [k], max_iterations=-1)
    assert str(info.value) == (f"{words} started iteration 0, over the limit max_iterations=-1; "
                               f"{MAX_ITERATIONS_HINT}")


def _no_loop_cond_loop() -> tuple[tn.Graph, tn.Tensor]:
    """i = 0; while i < 6: i += 1, by hand, its Switch predicate not passed through a LoopCond."""
    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([raw.enter(tn.constant(0), "f", name="entry"), raw.BACK_EDGE])
        sf, st = raw.switch(m, m < raw.enter(tn.constant(6), "f", is_constant=True))
        raw.close_back_edge(m, raw.next_iteration(st + raw.enter(tn.constant(1), "f", is_constant=True)))
        out = raw.exit(sf)
    return g, out


def test_a_frame_without_a_loop_cond_stops_at_the_first_iteration_over_the_limit() -> None:
    """``_check_limit`` at ``start``: a frame without a LoopCond is bounded where it starts iteration
    ``limit + 1``; the run stops with the reference interpreter's message word for word (the frame, its
    instance, its first Enter, the iteration and the limit). Under a limit it does not reach, it runs."""
    g, out = _no_loop_cond_loop()
    assert int(ss.run(g, [out], max_iterations=6).values[0]) == 6
    with pytest.raises(tn.NonTerminationError) as ref:
        run_graph(g, [out], options=RunOptions(max_iterations=2))
    with pytest.raises(tn.NonTerminationError) as info:
        ss.run(g, [out], max_iterations=2)
    assert str(info.value) == str(ref.value)
    assert "'f' (instance root; entered by " in str(info.value) and "started iteration 3" in str(info.value)
    assert describe_node(_node(g, "entry")) in str(info.value)


# ---- start: invariants reach every iteration, control edges included --------------------------------------
def test_a_constant_enters_control_edge_releases_its_waiter_in_every_iteration() -> None:
    """[E-Enter-Const] through ``start``: a new iteration receives each invariant on its data *and*
    control edges, live at that iteration's tag, so a body op waiting on a constant Enter only by a
    control edge fires live in every iteration, not in iteration 0 alone. Same value and firings as the
    reference interpreter."""
    g = tn.Graph()
    with g.as_default():
        gate = raw.enter(tn.constant(0), "f", is_constant=True, name="gate")
        one = raw.enter(tn.constant(1), "f", is_constant=True)
        m, _ = raw.merge([raw.enter(tn.constant(0), "f"), raw.BACK_EDGE])
        sf, st = raw.switch(m, raw.loop_cond(m < raw.enter(tn.constant(4), "f", is_constant=True)))
        with tn.control_dependencies([gate]):
            inc = tn.add(st, one, name="inc")
        raw.close_back_edge(m, raw.next_iteration(inc))
        out = raw.exit(sf)
    r = ss.run(g, [out])
    ref = run_graph(g, [out], options=RunOptions(trace=True))
    assert int(r.values[0]) == int(ref.values[0]) == 4
    assert ref.trace is not None
    incs = sorted((tag, dead) for _, node, tag, dead in r.firings if node == "inc")
    assert incs == sorted((e.tag, e.dead) for e in ref.trace.events if e.node == "inc")
    assert [dead for _, dead in incs].count(False) == 4


def test_a_dead_invariant_reaches_every_iteration_dead() -> None:
    """[E-Enter-Const] through ``start``: an invariant entered dead (the untaken output of a Switch) is
    delivered dead to every iteration, so a body Merge of it and a live value forwards the live one in
    iteration of the body (no [E-Merge-Conflict]) and fires dead in the exit iteration; the loop's value
    equals the reference interpreter's."""
    g = tn.Graph()
    with g.as_default():
        untaken, _ = raw.switch(tn.constant(7), tn.constant(True))
        dead_inv = raw.enter(untaken, "f", is_constant=True, name="dead_inv")
        one = raw.enter(tn.constant(1), "f", is_constant=True)
        m, _ = raw.merge([raw.enter(tn.constant(0), "f"), raw.BACK_EDGE])
        sf, st = raw.switch(m, raw.loop_cond(m < raw.enter(tn.constant(3), "f", is_constant=True)))
        pick, _ = raw.merge([dead_inv, st + one], name="pick")
        raw.close_back_edge(m, raw.next_iteration(pick))
        out = raw.exit(sf)
    r = ss.run(g, [out])
    assert int(r.values[0]) == int(run_graph(g, [out]).values[0]) == 3
    picks = sorted((rule, tag[-1][1]) for rule, node, tag, _ in r.firings if node == "pick")
    assert picks == [("E-Merge-AllDead", 3)] + [("E-Merge-Live", k) for k in range(3)]  # 3: the exit iteration


# ---- the rule an ordinary op cites --------------------------------------------------------------------
def test_stateful_ops_fire_by_their_own_rules() -> None:
    """[E-Var-Read], [E-Var-Assign], [E-Stack-Push] and [E-Stack-Pop]: a live stateful op's firing is
    logged under its own rule, not the pure [E-Op] (the trace, the rule coverage and the memory budget's
    count of pushes all read the rule); a pure op and a StackNew cite [E-Op]."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(1.0, name="v")
        a = v.assign_add(2.0)
        with tn.control_dependencies([a]):
            read = v.read()
        h = g.create_node("StackNew", [], {"elem_dtype": "float32", "elem_shape": []}, name="stack").outputs[0]
        push = g.create_node("StackPush", [h, tn.constant([0]), read], name="push")
        pop = g.create_node("StackPop", [h, tn.constant([0])], {"dtype": "float32", "shape": []},
                            control_inputs=[push], name="pop").outputs[0]
        out = tn.multiply(pop, 2.0, name="double")
    r = ss.run(g, [out])
    assert float(r.values[0]) == 6.0
    rules = {node: rule for rule, node, *_ in r.firings}
    assert rules[a.node.name] == "E-Var-Assign" and rules[read.node.name] == "E-Var-Read"
    assert (rules["push"], rules["pop"], rules["stack"], rules["double"]) == (
        "E-Stack-Push", "E-Stack-Pop", "E-Op", "E-Op")


# ---- Merge: Guard, conflict, the dead cases ---------------------------------------------------------------
def _merge_waiting_on(control_dead: bool) -> tuple[tn.Graph, tn.Tensor]:
    """A root Merge of one live constant with a control input from a node that fires live or dead."""
    g = tn.Graph()
    with g.as_default():
        sf, st = raw.switch(tn.constant(1.0), tn.constant(not control_dead))
        gate = tn.identity(st, name="gate")  # live when the switch takes its true side, else dead
        x = tn.constant(5.0, name="x")
        with tn.control_dependencies([gate]):
            out, _ = raw.merge([x], name="m")
    return g, out


def test_a_merge_waits_for_its_control_inputs() -> None:
    """Guard(m, t): a Merge with control inputs fires only once every control input holds a token at
    t; its live data input alone enables nothing. Once the control token comes, live, it forwards the
    live input ([E-Merge-Live]), as the reference interpreter does."""
    g, out = _merge_waiting_on(control_dead=False)
    c = _run_to_quiescence(ss.initial(g, [out]), skip="gate")
    assert any(node == "m" for node, *_ in ss.stranded(c))  # the data token waits
    assert [f for f in ss.enabled(c) if f.node == "m"] == []
    c = _run_to_quiescence(c)
    assert float(ss.outputs(c)[0]) == float(run_graph(g, [out]).values[0]) == 5.0


def test_a_dead_control_input_kills_a_merge_with_a_live_data_input() -> None:
    """[E-Merge-AllDead] (b): a Merge whose control input is dead goes dead where it would have fired
    live; the firing is dead, names the Merge and its tag and consumes the control tokens (its
    ``inputs``), and its outputs are dead, so fetching it fails as on the reference interpreter."""
    g, out = _merge_waiting_on(control_dead=True)
    c = _run_to_quiescence(ss.initial(g, [out]), skip="m")
    m = _node(g, "m")
    ctl = ss.Token.dead(())
    assert [f for f in ss.enabled(c) if f.node == "m"] == [ss.Firing("E-Merge-AllDead", "m", (), True, m.id, (ctl,))]
    with pytest.raises(tn.DeadFetchError):
        run_graph(g, [out])
    with pytest.raises(tn.DeadFetchError):
        ss.outputs(_run_to_quiescence(c))
    with pytest.raises(tn.DeadFetchError):
        ss.run(g, [out])


def test_two_live_data_inputs_enable_only_a_live_merge_conflict() -> None:
    """[E-Merge-Conflict]: when a Merge holds two live data inputs at t, the one firing the rules allow
    for it is the conflict: live (no input of it is dead), naming the Merge and its tag, consuming
    nothing; firing it stops the run with MergeConflictError, as on the reference interpreter."""
    g = tn.Graph()
    with g.as_default():
        out, _ = raw.merge([tn.constant(1.0), tn.constant(2.0)], name="m")
    c = _run_to_quiescence(ss.initial(g, [out]), skip="m")
    conflicts = [f for f in ss.enabled(c) if f.node == "m"]
    assert conflicts == [ss.Firing("E-Merge-Conflict", "m", (), False, _node(g, "m").id, ())]
    with pytest.raises(tn.MergeConflictError):
        ss.fire(c, conflicts[0])
    with pytest.raises(tn.MergeConflictError):
        run_graph(g, [out])


# ---- hand-built configurations: the rules read any configuration -----------------------------------------
def _counting_loop(limit: int = 3, window: int = 10) -> tuple[tn.Graph, tn.Tensor]:
    """i = 0; while i < limit: i += 1, by hand: a loop Merge "m" (slot 0 the Enter, slot 1 the back
    edge) and a NextIteration "next"."""
    g = tn.Graph()
    with g.as_default():
        e = raw.enter(tn.constant(0), "f", parallel_iterations=window)
        m, _ = raw.merge([e, raw.BACK_EDGE], name="m")
        lim = raw.enter(tn.constant(limit), "f", is_constant=True, parallel_iterations=window)
        sf, st = raw.switch(m, raw.loop_cond(m < lim))
        one = raw.enter(tn.constant(1), "f", is_constant=True, parallel_iterations=window)
        raw.close_back_edge(m, raw.next_iteration(st + one, name="next"))
        out = raw.exit(sf)
    return g, out


def _until(g: tn.Graph, out: tn.Tensor, found: Callable[[ss.Firing], bool]) -> tuple[ss.Config, ss.Firing]:
    """Run the loop step by step up to the first configuration where a firing ``found`` is enabled."""
    c = ss.initial(g, [out])
    while en := ss.enabled(c):
        hit = [f for f in en if found(f)]
        if hit:
            return c, hit[0]
        c = ss.fire(c, en[0])
    raise AssertionError("never enabled")


def _with_pending(c: ss.Config, key: tuple[int, ss.Tag], toks: set[tuple[int, ss.Token]]) -> ss.Config:
    return dataclasses.replace(c, pending={**c.pending, key: frozenset(toks)}, _key_cache=[])


def test_a_loop_merge_goes_dead_by_its_back_edges_after_iteration_zero() -> None:
    """Arr(m, t) and [E-Merge-AllDead] (a) / [E-Merge-DeadEnter]: in iteration 0 a loop Merge can hear
    only from its Enter, and a dead one fires it by [E-Merge-DeadEnter]; in an iteration k > 0 it can
    hear only from its back edges: every back edge dead fires it by [E-Merge-AllDead], while a token on
    its Enter's slot there enables nothing."""
    g, out = _counting_loop()
    m = _node(g, "m")

    def merge_firings(c: ss.Config, tag: ss.Tag, toks: set[tuple[int, ss.Token]]) -> list[ss.Firing]:
        return [f for f in ss.enabled(_with_pending(c, (m.id, tag), toks)) if f.node == "m" and f.tag == tag]

    c, live = _until(g, out, lambda f: f.node == "m" and f.tag == (("f", 1),))
    assert live.rule == "E-Merge-Live" and live.slot == 1
    dead = ss.Token.dead(live.tag)
    assert merge_firings(c, live.tag, {(1, dead)}) == [ss.Firing("E-Merge-AllDead", "m", live.tag, True, m.id, ())]
    assert merge_firings(c, live.tag, {(0, dead)}) == []
    c, first = _until(g, out, lambda f: f.node == "m")
    assert first.tag == (("f", 0),) and first.slot == 0
    dead = ss.Token.dead(first.tag)
    assert merge_firings(c, first.tag, {(0, dead)}) == [
        ss.Firing("E-Merge-DeadEnter", "m", first.tag, True, m.id, ())]


def test_every_node_firing_names_the_tokens_it_consumes() -> None:
    """A firing's ``inputs`` are the tokens it consumes, one per slot, each waiting in Q at the firing's
    tag: for every step of a loop run that consumes a node's inputs by a strict rule, the NextIteration's
    [E-Next-Dead] in the exit iteration included."""
    g, out = _counting_loop()
    c = ss.initial(g, [out])
    seen = set()
    while en := ss.enabled(c):
        for f in en:
            if f.is_node_firing and not f.rule.startswith("E-Merge"):
                assert len(f.inputs) == c.program.n_slots[f.node_id], f
                assert set(enumerate(f.inputs)) <= c.pending.get((f.node_id, f.tag), frozenset()), f
                seen.add(f.rule)
        c = ss.fire(c, en[0])
    assert {"E-Next-Dead", "E-Next-Live", "E-Op", "E-Op-Dead", "E-Switch", "E-LoopCond"} <= seen


def test_a_next_iteration_holding_several_tokens_enables_one_firing_for_each() -> None:
    """``enabled`` lists every firing the rules allow: where a NextIteration's input holds two tokens at
    one tag (a graph breaking [W-Merge-Unique]), a dead and a live one, it enables [E-Next-Dead] for the
    dead one and [E-Next-Live] for the live one, whichever of them the rules look at first."""
    g, out = _counting_loop()
    c, nxt = _until(g, out, lambda f: f.node == "next")
    key = (nxt.node_id, nxt.tag)
    for v in range(24):  # the order Q holds the two tokens in varies with the values' hashes
        live = ss.Token.live(np.int32(v), nxt.tag)
        rules = sorted(f.rule for f in ss.enabled(_with_pending(c, key, {(0, live), (0, ss.Token.dead(nxt.tag))}))
                       if f.node == "next")
        assert rules == ["E-Next-Dead", "E-Next-Live"], v


def test_a_next_iteration_delivers_at_once_into_an_iteration_already_started() -> None:
    """[E-Next-Live] / [E-Next-Park]: a NextIteration in iteration k delivers now when iteration k+1 has
    started (k+1 in S(I)) or lies inside the window (k+1 < o(I) + N(I)); only otherwise does it park.
    With the window at 1 and iteration 1 recorded as started, it delivers; not started, it parks."""
    g, out = _counting_loop(window=1)
    c, nxt = _until(g, out, lambda f: f.node == "next" and not f.dead)
    inst = nxt.instance
    assert nxt.rule == "E-Next-Park" and inst is not None and nxt.tag == (("f", 0),)
    rec = c.instances[inst]
    for started, rule in (({0, 1}, "E-Next-Live"), ({0}, "E-Next-Park")):
        c2 = dataclasses.replace(c, instances={**c.instances, inst: dataclasses.replace(
            rec, started=frozenset(started))}, _key_cache=[])
        assert [f.rule for f in ss.enabled(c2) if f.node == "next"] == [rule]


def test_a_live_next_iteration_whose_frame_instance_is_gone_is_an_execution_error() -> None:
    """``enabled`` on a configuration where a live NextIteration waits in a frame instance that no longer
    exists (no run reaches one: an instance is deleted only once nothing in it waits) refuses it with
    ExecutionError naming the node and its tag, rather than guessing the window."""
    g, out = _counting_loop()
    c, nxt = _until(g, out, lambda f: f.node == "next" and not f.dead)
    gone = dataclasses.replace(c, instances={}, _key_cache=[])
    with pytest.raises(tn.ExecutionError, match=r'NextIteration node "next" .*at tag f\[0\]: its frame '
                                                 r"instance is gone"):
        ss.enabled(gone)
