"""Tests that kill what mutation testing found surviving in the small-step system
(``python tools/mutation.py --module semantics/smallstep.py``): its run loop's options and errors,
the variable store it starts from and returns, and its adapter's trace.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.semantics import smallstep as ss
from turnout.semantics.explore import value_repr
from turnout.session import RunOptions


def _counter() -> tuple[tn.Graph, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        (k,) = tn.while_loop(lambda k: k < 3, lambda k: k + 1, [tn.constant(0)])
    return g, k


def test_run_rejects_an_unknown_scheduler_by_name() -> None:
    g, k = _counter()
    with pytest.raises(ValueError, match=r"unknown scheduler 'bogus'; choose one of \('fifo', 'lifo', 'random'\)"):
        ss.run(g, [k], scheduler="bogus")


def test_max_steps_is_exact_and_its_error_names_the_last_step() -> None:
    g, k = _counter()
    r = ss.run(g, [k])
    n = len(r.firings)
    assert ss.run(g, [k], max_steps=n).values == [3]
    with pytest.raises(tn.NonTerminationError, match=rf"exceeded max_steps={n - 1} firings .*last: \('E-"):
        ss.run(g, [k], max_steps=n - 1)


def test_every_scheduler_gives_the_same_values_and_counts() -> None:
    g, k = _counter()
    runs = [ss.run(g, [k], scheduler=s, seed=seed) for s, seed in (("fifo", 0), ("lifo", 0), ("random", 5))]
    assert all(r.values == [3] for r in runs)
    assert all(r.counts == runs[0].counts for r in runs)
    assert len({tuple(r.firings) for r in runs}) > 1  # the schedulers really differ
    assert all(v == 1 for v in runs[0].counts.values())
    assert len(runs[0].firings) > sum(runs[0].counts.values())  # instance steps are logged, not counted


def test_variables_start_from_the_given_store_and_come_back() -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(2.0, name="v")
        a = v.assign_add(3.0)
        s = v.assign_sub(1.0)
    r = ss.run(g, [a])
    assert r.values == [5.0] and float(r.variables["v"]) == 5.0
    r = ss.run(g, [a], variables={"v": np.float32(10.0)})
    assert r.values == [13.0] and float(r.variables["v"]) == 13.0
    assert r.variables["v"].dtype == np.float32
    assert ss.run(g, [s], variables={"v": np.float32(10.0)}).values == [9.0]
    assert ss.run(g, [v.read()]).values == [2.0]


def test_the_adapter_returns_the_trace_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from turnout.session import BACKENDS

    monkeypatch.setitem(BACKENDS, "smallstep", "turnout.semantics.smallstep:SmallStepBackend")
    g, k = _counter()
    sess = tn.Session(g, backend="smallstep")
    assert sess.run(k) == 3
    assert sess.last_result is not None and sess.last_result.trace is None
    assert sess.run(k, options=RunOptions(trace=True)) == 3
    trace = sess.last_result.trace
    assert trace is not None and len(trace) == sess.last_result.stats["firings"]
    assert {rule for rule, *_ in trace} >= {"E-Enter", "E-Merge-Live", "E-LoopCond", "E-Exit-Live", "E-Iter-Retire"}
    with pytest.raises(tn.NonTerminationError):
        sess.run(k, options=RunOptions(max_firings=5))


def test_stranded_lists_the_tokens_left_waiting() -> None:
    """A loop body that reads a non-constant Enter strands iteration 1's token at the Add (the Enter
    delivers to iteration 0 only); ``stranded`` names the consumer, its tag, its slot and the live token."""
    from turnout import raw

    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([raw.enter(tn.constant(0.0), "f"), raw.BACK_EDGE])
        p = raw.loop_cond(m < raw.enter(tn.constant(3.0), "f", is_constant=True))
        sf, st = raw.switch(m, p)
        step = raw.enter(tn.constant(1.0), "f", name="step")
        raw.close_back_edge(m, raw.next_iteration(tn.add(st, step, name="stalled")))
        out = raw.exit(sf)
    c = ss.initial(g, [out])
    while en := ss.enabled(c):
        c = ss.fire(c, en[0])
    assert ss.is_quiescent(c)
    left = [(name, tag, slot, tok.is_dead) for name, tag, slot, tok in ss.stranded(c)]
    assert left == [("stalled", (("f", 1),), 0, False)]


def test_a_deadlock_report_lists_the_open_frame_instances() -> None:
    """A hand-built loop whose body reads the loop's (non-constant) Enter, which exists at iteration 0
    only: from iteration 1 on, that op and the inner frame fed by it wait forever. The report ends
    with every frame instance still open, the iterations each started, its oldest active iteration
    and how many of its Enters never arrived."""
    from turnout import raw

    g = tn.Graph()
    with g.as_default():
        e = raw.enter(tn.constant(0), "outer", name="entry")
        m, _ = raw.merge([e, raw.BACK_EDGE], name="m")
        p = raw.loop_cond(tn.less(m, raw.enter(tn.constant(2), "outer", is_constant=True)), name="p")
        _, t = raw.switch(m, p, name="sw")
        raw.close_back_edge(m, raw.next_iteration(t + raw.enter(tn.constant(1), "outer", is_constant=True)))
        w = tn.add(e, t, name="needs_entry")
        inner = tn.add(raw.enter(t, "inner"), raw.enter(w, "inner"), name="inner_sum")
        xf, _ = raw.switch(raw.exit(inner, name="inner_exit"), p, name="sw_x")
        out = raw.exit(xf, name="out")
    with pytest.raises(tn.DeadlockError) as ei:
        ss.run(g, [out])
    lines = str(ei.value).splitlines()
    assert lines[0] == "deadlock: no firing is enabled, yet fetches out:0 were never produced"
    assert [ln for ln in lines if ln.startswith("  open frame instance")] == [
        "  open frame instance 'outer' entered at tag (): started [0, 1, 2], oldest active 1, Enters still to arrive 0",
        "  open frame instance 'inner' entered at tag outer[1]: started [0], oldest active 0, Enters still to arrive 1",
        "  open frame instance 'inner' entered at tag outer[2]: started [0], oldest active 0, Enters still to arrive 1",
    ]
    blocked = [ln.split(" (created")[0] for ln in lines if ln.startswith("  blocked:")]
    assert blocked.count('  blocked: Add node "needs_entry"') == 2


def test_an_inner_runaway_loop_is_named_by_its_own_frame_and_instance() -> None:
    """``check_loop_cond`` names the frame whose LoopCond is still true in iteration max_iterations: in
    a nest, the inner loop's frame and the outer iteration it runs in, not the outer frame. The first
    outer iteration's inner loop runs 2 bodies, the second's 6: ``max_iterations=5`` stops the second."""
    g = tn.Graph()
    with g.as_default():
        def outer_body(i: tn.Tensor, s: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            _, t = tn.while_loop(lambda j, t: j < 2 + 4 * i, lambda j, t: (j + 1, t + 1), [tn.constant(0), s],
                                 name="inner")
            return i + 1, t

        _, total = tn.while_loop(lambda i, s: i < 2, outer_body, [tn.constant(0), tn.constant(0)], name="outer")
    with pytest.raises(tn.NonTerminationError, match=r"loop frame 'outer/body/inner/frame\d+' \(instance "
                                                     r"outer/frame\d+\[1\].*would run body 6, over the limit "
                                                     r"max_iterations=5") as info:
        ss.run(g, [total], {}, max_iterations=5)
    assert "'outer/frame" not in str(info.value).split("(instance")[0]
    assert int(ss.run(g, [total], {}, max_iterations=6).values[0]) == 8


# ---- Exits of nested frames, the tags of tokens in Q, Send and Recv -----------------------------------
@pytest.mark.parametrize("wrapped", [False, True])
def test_a_control_edge_leaving_a_nested_exit_fires_its_waiter_once_per_outer_iteration(wrapped: bool) -> None:
    """Law [E-Exit-Live] / [E-Frame-Done] in the small-step system: an Exit at tag u = t.(f, k) emits
    at t, its data and its control edges alike, so a node tied to a nested loop only by a control edge
    from its Exit fires once per iteration of the enclosing loop, at that iteration's tag (live while
    the loop runs its body, dead in the iteration that ends it), and never at another tag. The firings
    and the values equal the reference interpreter's."""
    import graphs

    from turnout.reference.executor import run_graph

    w = graphs.nested_exit_waiter(wrapped)
    feeds = {w.n: np.int32(3)}
    r = ss.run(w.g, [w.total, w.inner_sum], feeds)
    ref = run_graph(w.g, [w.total, w.inner_sum], feeds, RunOptions(trace=True))
    assert [int(v) for v in r.values] == [int(v) for v in ref.values] == [w.rounds * 3] * 2
    waits = sorted((tag, dead) for rule, node, tag, dead in r.firings if node.endswith("/waiter"))
    assert ref.trace is not None
    assert waits == sorted((e.tag, e.dead) for e in ref.trace.events if e.node.endswith("/waiter"))
    assert all(tag[-1][0] == w.outer_frame for tag, _ in waits) and len(waits) == len(set(waits))
    assert [dead for _, dead in waits].count(False) == 3 * w.rounds  # one live firing per outer iteration
    assert all(c == 1 for (name, _), c in r.counts.items() if name.endswith("/waiter"))


def _q_tags_match(c: ss.Config) -> None:
    for (nid, tag), toks in c.pending.items():
        for slot, tok in toks:
            assert tok.tag == tag, (c.program.nodes[nid].name, slot, tok, tag)


def test_every_token_waiting_in_q_carries_the_tag_it_waits_at() -> None:
    """Well-formedness of configurations: a token in Q under key (n, t) has tag t, from the initial
    configuration on (fed values at the root tag, and the live control token standing for a fed
    Placeholder that a node needs only through a control edge) through every step of a run."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        gate = tn.placeholder(tn.int32, [], name="gate")
        with tn.control_dependencies([gate]):
            one = tn.constant(1, name="one")
        (k,) = tn.while_loop(lambda k: k < x, lambda k: k + one, [tn.constant(0)])
    c = ss.initial(g, [k], {x: np.int32(2), gate: np.int32(7)})
    assert c.pending, "the fed values wait in Q at the start"
    steps = 0
    while True:
        _q_tags_match(c)
        firings = ss.enabled(c)
        if not firings:
            break
        c = ss.fire(c, firings[0])
        steps += 1
    assert steps > 0 and ss.outputs(c) == [2]


@pytest.mark.parametrize("pv", [True, False])
def test_send_and_recv_move_each_token_once_under_its_edge_and_tag(pv: bool) -> None:
    """Laws [E-Send], [E-Recv] and [E-Recv-Dead] over a set of partitions: a Send fires once its inputs
    are full at t, live or dead, and puts exactly that token into the rendezvous under (edge, t); a
    Recv is enabled only once the token under its own (edge, t) is there, takes it (by the rule naming
    its deadness) and emits it at t. Every key is sent once and received once, nothing is left in a
    mailbox, and the fetched value is the unpartitioned run's, on the taken and the untaken branch."""
    from turnout.devices import partition, place
    from turnout.devices import smallstep as pss

    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        x = tn.placeholder(tn.int32, [], name="x")

        def far() -> tn.Tensor:
            with tn.device("cpu:1"):
                return x * 10

        z = tn.cond(p, far, lambda: x - 1)
    feeds = {p: np.bool_(pv), x: np.int32(3)}
    s = pss.system(partition(g, place(g, ["cpu:0", "cpu:1"]), [z], {(t.node.id, t.index) for t in feeds}), feeds)
    pc = s.initial
    sent: list[tuple[Any, bool]] = []
    received: list[tuple[Any, bool]] = []
    while True:
        nxt = pss.steps(s, pc)
        if not nxt:
            break
        i, f = nxt[-1]  # the partition enabled last: Recvs are tried as soon as they could be
        before = pc.configs
        pc = pss.step(s, pc, i, f)
        node = before[i].program.nodes[f.node_id] if f.node_id is not None else None
        if f.rule == "E-Send":
            assert node is not None and node.op == "Send"
            key = (node.attrs["edge"], f.tag)
            j = s.route[node.attrs["edge"]]
            (new,) = pc.configs[j].mailbox - before[j].mailbox
            assert new[0] == key and new[1].is_dead == f.dead == any(t.is_dead for t in f.inputs)
            sent.append((key, f.dead))
        elif f.rule in ("E-Recv", "E-Recv-Dead"):
            assert node is not None and node.op == "Recv"
            key = (node.attrs["edge"], f.tag)
            assert (f.rule == "E-Recv-Dead") == f.dead
            (gone,) = before[i].mailbox - pc.configs[i].mailbox
            assert gone[0] == key and gone[1].is_dead == f.dead
            received.append((key, f.dead))
        else:
            assert node is None or node.op not in ("Send", "Recv"), f
    assert sent and sorted(sent) == sorted(received) and len({k for k, _ in sent}) == len(sent)
    assert any(dead for _, dead in sent) == (not pv)  # the untaken branch's transfer crosses dead
    want = tn.Session(g).run(z, feeds)
    assert pss.outcome(s, pc) == (("live", value_repr(np.asarray(want))),)


def test_a_direct_run_bounds_loops_as_a_session_does() -> None:
    """``ss.run`` called directly bounds every frame instance by the same default ``max_iterations`` as
    a session (``RunOptions``), so the semantics and every backend call the same loop runaway. (Checked
    on the signature: a loop that long would take the small-step system hours to reach the bound.)"""
    import inspect

    assert inspect.signature(ss.run).parameters["max_iterations"].default == RunOptions().max_iterations


# ---- seed 202 ----------------------------------------------------------------------------------------
def test_an_unclosed_back_edge_is_refused_as_the_validator_refuses_it() -> None:
    """[W-Merge-Bound]: a Merge whose back edge was never closed cannot run. ``ss.initial`` (reached by a
    direct ``ss.run``, which skips the shared validator) refuses it with the validator's error: the
    same rule, naming the same Merge in ``ValidationError.node``."""
    from turnout import raw
    from turnout.validate import validate

    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([raw.enter(tn.constant(0), "loop"), raw.BACK_EDGE], name="open")
        out = raw.exit(m)
    with pytest.raises(tn.ValidationError) as by_validator:
        validate(g, [out])
    with pytest.raises(tn.ValidationError, match=r'^\[W-Merge-Bound\] Merge node "open"') as by_semantics:
        ss.run(g, [out])
    assert by_semantics.value.rule == by_validator.value.rule == "W-Merge-Bound"
    assert by_semantics.value.node is by_validator.value.node is m.node


def test_a_live_noop_fires_by_e_op_and_releases_its_control_waiters() -> None:
    """[E-Op] with no data: a NoOp (``tn.group``) whose inputs are live fires live, named E-Op as the
    reference names it, and its control token lets the ops that wait on it fire."""
    g = tn.Graph()
    with g.as_default():
        a = tn.constant(2.0, name="a")
        grp = tn.group(a * 3.0, name="grp")
        with tn.control_dependencies([grp]):
            y = tn.add(a, 1.0, name="y")
    r = ss.run(g, [y])
    assert [float(v) for v in r.values] == [3.0]
    assert ("E-Op", "grp", (), False) in r.firings and r.counts[("grp", ())] == 1
    ref = tn.Session(g).run(y, options=RunOptions(trace=True))
    assert float(ref) == 3.0


def test_stranded_lists_every_token_of_q_several_at_one_slot_included() -> None:
    """Q is a multiset of tokens: a node that fired at a tag no longer consumes there, so tokens that
    reach it later stay in Q, several at one slot if they come. A hand-built Exit that reads the Merge
    leaks the loop value of every iteration to the root; the Add fired on the first (0 + 10), and the
    values of iterations 1, 2 and 3 stay at its slot 0, each listed by ``stranded`` in slot order."""
    from turnout import raw

    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([raw.enter(tn.constant(0.0), "loop"), raw.BACK_EDGE])
        sf, st = raw.switch(m, raw.loop_cond(m < raw.enter(tn.constant(3.0), "loop", is_constant=True)))
        raw.close_back_edge(m, raw.next_iteration(st + raw.enter(tn.constant(1.0), "loop", is_constant=True)))
        leaky = raw.exit(m, name="leaky")
        raw.exit(sf)
        waits = tn.add(leaky, tn.constant(10.0), name="waits")
    r = ss.run(g, [waits])
    assert [float(v) for v in r.values] == [10.0]
    left = ss.stranded(r.final)
    assert [(name, tag, slot) for name, tag, slot, _ in left] == [("waits", (), 0)] * 3
    assert sorted(float(tok.value) for *_, tok in left) == [1.0, 2.0, 3.0]


def test_max_seconds_bounds_a_direct_run() -> None:
    """``ss.run(..., max_seconds=s)`` stops a run that does not end with NonTerminationError naming
    ``max_seconds``, as a session's ``RunOptions.max_seconds`` does, well before ``max_steps``."""
    g = tn.Graph()
    with g.as_default():
        (k,) = tn.while_loop(lambda k: k >= 0, lambda k: k + 1, [tn.constant(0)])
    with pytest.raises(tn.NonTerminationError, match=r"more than max_seconds=0\.05 seconds"):
        ss.run(g, [k], max_seconds=0.05, max_steps=20_000)


@pytest.mark.parametrize("nested", [False, True])
def test_a_merge_conflict_gives_the_reference_message_word_for_word(nested: bool) -> None:
    """[E-Merge-Conflict] has one message whichever interpreter runs the graph
    (``errors.merge_conflict_message``), tag included: the small-step system writes the tag as the
    reference does, ``root`` at the root and ``loop:0`` at iteration 0 of a loop, so that a user who
    matches the message reads the same words from either oracle."""
    from turnout import raw
    from turnout.reference.executor import run_graph

    g = tn.Graph()
    with g.as_default():
        if nested:
            m, _ = raw.merge([raw.enter(tn.constant(0.0), "loop"), raw.BACK_EDGE])
            _, t = raw.switch(m, raw.loop_cond(m < raw.enter(tn.constant(3.0), "loop", is_constant=True)))
            racy, _ = raw.merge([t, t + raw.enter(tn.constant(1.0), "loop", is_constant=True)], name="racy")
            raw.close_back_edge(m, raw.next_iteration(racy))
            out = raw.exit(m)
        else:
            out, _ = raw.merge([tn.constant(1.0), tn.constant(2.0)], name="racy")
    with pytest.raises(tn.MergeConflictError) as by_reference:
        run_graph(g, [out])
    with pytest.raises(tn.MergeConflictError) as by_smallstep:
        ss.run(g, [out])
    assert f"at tag {'loop:0' if nested else 'root'};" in str(by_reference.value)
    assert str(by_smallstep.value) == str(by_reference.value)
