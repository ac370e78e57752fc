"""Laws of the small-step system's driver and its reports, found missing by mutation testing
(``python tools/mutation.py --module semantics/smallstep.py``, places 1380-2208 of the full set): how a
run under a memory budget counts the stack store's entries (as the reference interpreter counts its
pushes, per loop, with the same plan and the same message), the scheduler's three policies and their
seeded choice, the ``max_steps`` / ``max_seconds`` messages, ``deadlock_report``'s text, the error a
Switch or LoopCond gives for a predicate that is not a bool scalar, where the control token an
emitting rule sends goes, and what ``SmallStepBackend`` passes on to ``run``. Each test names the
mutant ids it kills.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout import memory_plan as mp
from turnout import raw
from turnout.errors import ResourceExhaustedError
from turnout.reference.executor import run_graph
from turnout.semantics import smallstep as ss

X0 = np.array([0.1, -0.4, 0.7], np.float32)


# ---- memory budgets: the stack store's entries, counted as the reference counts its pushes ----------------
def _nested_model() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """``v <- 1.1 tanh(v)``, two inner steps per outer step, two outer steps, and its gradient: the inner
    loop's stacks are indexed by two ints (outer and inner iteration), the outer loop's by one."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")

        def outer(i: Any, v: Any) -> Any:
            _, w = tn.while_loop(lambda j, w: j < 2, lambda j, w: (j + 1, tn.tanh(w) * 1.1), [tn.constant(0), v],
                                 name="inner")
            return i + 1, w

        _, y = tn.while_loop(lambda i, v: i < 2, outer, [tn.constant(0), x], name="outer")
        (gx,) = tn.gradients(tn.reduce_sum(y), [x])
    return g, x, gx


def _both(g: tn.Graph, fetch: tn.Tensor, feed: dict[Any, Any], **opts: Any) -> list[tuple[Any, Any]]:
    """(value, stats) of one run on the reference interpreter and one on the small-step system."""
    out = []
    for backend in ("reference", "smallstep"):
        sess = tn.Session(g, backend=backend)
        out.append((sess.run(fetch, feed, **opts), sess.last_result.stats))
    return out


def test_a_budgeted_run_counts_each_push_under_its_loop_as_the_reference_does() -> None:
    """Under a memory budget, every live [E-Stack-Push] into a loop's stack (a ``StackNew`` with a
    ``loop_name``) is counted under that loop as the reference interpreter counts its pushes: the
    value's bytes plus 4 bytes per int of its index (two for the inner loop of a nest), as ints. The
    stats' ``saved_bytes`` per loop and ``peak_saved_bytes`` equal the reference's, the values too,
    and the plan the run honours is the one ``Session.explain`` reports for the cpu platform.

    Kills smallstep.run:e2bbf0a1 a612d276 e161d75b 02d1ac70 691521e8 2bb015e1 9e156fea 6bed8443
    e161d75b.2 02d1ac70.2 cdea6bbf.2 610135ff 0b7b6808 5801f355 3ca84d45 98a5ec41 f4cdcd53 c9b1b2f5
    46011ff6 d0a19123 a4fb19ae 60d05592 94615df1 659d12e4 b406357d 58ce2f13;
    smallstep._saved_bytes:e0d799c3 e97e3f98 c38e6424 9e264f1d 613eead3 b5f7ec84 a143ac89 fc5a2ced
    a95d2977 3d98aaa9; smallstep._count_push:80131664 b102f406 2d3aa1dd 7aa9b276 b102f406.2 cd6ed192
    d2567638 378b947d 248d8841 c704b623 942c4ec5 13db4d98 96fd7ccf ac893a7c ea45e725 179b97c8 7817141e
    667d5555 b6c991ad 71090124 44e7cc8f; smallstep.<module>:6f235b97 f4e3ca15."""
    g, x, gx = _nested_model()
    budget = 10**6
    (want, ref_stats), (got, ss_stats) = _both(g, gx, {x: X0}, memory_budget=budget)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert ref_stats["saved_bytes"] == {"outer/body/inner": 128, "outer": 16}  # 4 x (4+8 + 12+8), 2 x (4+4)
    for key in ("saved_bytes", "peak_saved_bytes"):
        assert ss_stats[key] == ref_stats[key]
    assert all(type(b) is int for b in (*ss_stats["saved_bytes"].values(), ss_stats["peak_saved_bytes"]))
    r = ss.run(g, [gx], {x: X0}, memory_budget=budget)
    assert r.saved is not None and r.saved.stats() == {k: ref_stats[k] for k in ("peak_saved_bytes", "saved_bytes")}
    assert r.saved.plan == mp.graph_plan(g, [gx], "cpu", budget)


def test_a_run_over_its_budget_stops_with_the_references_message() -> None:
    """A run whose pushes would hold more than the run's memory budget stops with
    ``ResourceExhaustedError``, at the same push as the reference interpreter and with its message,
    naming the small-step system where the reference names itself.

    Kills smallstep.run:8dd01a63 58ce2f13 b406357d; smallstep._saved_bytes:7f8641e1 7a31bf64 9f4455c3
    6ae4ce0c; smallstep._count_push:667d5555 (a float count reads ``116.0 bytes``)."""
    g, x, gx = _nested_model()
    g.gradient_calls.clear()  # (the stacks' own stop: no record of the gradient call to rebuild)
    msgs = []
    for backend in ("reference", "smallstep"):
        with pytest.raises(ResourceExhaustedError) as e:
            tn.Session(g, backend=backend).run(gx, {x: X0}, memory_budget=100)
        msgs.append(str(e.value))
    assert msgs[0].startswith('reference interpreter: the saved values of loop "outer/body/inner" (32 bytes per '
                              "iteration) would hold 116 bytes on the device (the values pushed so far), over the "
                              "run's memory_budget of 100 bytes")
    assert msgs[1] == msgs[0].replace("reference interpreter: ", "small-step system: ", 1)


def test_a_run_without_a_budget_counts_nothing() -> None:
    """With no budget (none for the run, none of the loops' own) nothing is counted: the run of a
    gradient with stacks gives the right values, ``saved`` is None and the stats carry no
    ``saved_bytes``, as on the reference interpreter.

    Kills smallstep.run:0ef7c0cb cdea6bbf.2 e161d75b 02d1ac70; smallstep._saved_bytes:9acc9c2f."""
    g, x, gx = _nested_model()
    (want, ref_stats), (got, ss_stats) = _both(g, gx, {x: X0})
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert "saved_bytes" not in ref_stats and "saved_bytes" not in ss_stats and "peak_saved_bytes" not in ss_stats
    assert ss.run(g, [gx], {x: X0}).saved is None


# ---- the scheduler: fifo, lifo, and a seeded random choice ------------------------------------------------
def _chains(n: int = 4) -> tuple[tn.Graph, list[tn.Tensor]]:
    """Three independent chains ``a0 -> a1 -> ... -> a{n-1}`` (a constant, then Neg ops), b and c alike."""
    g = tn.Graph()
    ends = []
    with g.as_default():
        for c in "abc":
            t = tn.constant(1.0, name=f"{c}0")
            for i in range(1, n):
                t = tn.negative(t, name=f"{c}{i}")
            ends.append(t)
    return g, ends


def _order(r: ss.SmallStepResult) -> list[str]:
    return [node for _, node, _, _ in r.firings]


def test_fifo_fires_by_enabling_age_and_lifo_the_newest_first() -> None:
    """``fifo`` takes the firing enabled longest ago: the three constants (enabled at the start, in the
    order ``enabled`` lists them), then each chain's first Neg in the order their constants fired, and
    so on level by level. ``lifo`` takes the one enabled most recently: the last constant listed, then
    the Neg it just enabled, its whole chain, before the next chain. Both through ``SmallStepBackend``
    too (its trace is ``run``'s log under the session's scheduler). Values never depend on the policy.

    Kills smallstep.run:c3c2e1f5 3a9ca798 3fff1ce0.2 13892f66.2 cffe5967 9eb25d59 67d5d927
    847a3994 bdbf5748."""
    g, ends = _chains()
    first = [f.node for f in ss.enabled(ss.initial(g, ends))]
    assert sorted(first) == ["a0", "b0", "c0"]
    fifo = [f"{c[0]}{i}" for i in range(4) for c in first]
    lifo = [f"{c[0]}{i}" for c in reversed(first) for i in range(4)]
    for scheduler, want in (("fifo", fifo), ("lifo", lifo)):
        r = ss.run(g, ends, scheduler=scheduler)
        assert _order(r) == want
        assert [float(v) for v in r.values] == [-1.0, -1.0, -1.0]
        sess = tn.Session(g, backend="smallstep")
        sess.run(ends, scheduler=scheduler, trace=True)
        assert [node for _, node, _, _ in sess.last_result.trace] == want


def test_the_random_scheduler_is_a_seeded_choice() -> None:
    """``random`` is a uniform choice from ``random.Random(seed)``: one seed gives one schedule, run
    after run and through ``SmallStepBackend`` (which passes the session's seed on); different seeds
    give different schedules (more than two among six seeds: not all fifo's or lifo's). ``run``'s
    default seed is ``RunOptions``' (0), so a direct call and a session's run take one schedule.

    Kills smallstep.run:1ce886fb 37471441 9eb25d59 b636e1fd e9897094 a8908532."""
    g, ends = _chains()
    logs = {seed: _order(ss.run(g, ends, scheduler="random", seed=seed)) for seed in range(6)}
    assert len(set(map(tuple, logs.values()))) > 2  # so not all of them are fifo's or lifo's
    for seed in (0, 3):
        assert _order(ss.run(g, ends, scheduler="random", seed=seed)) == logs[seed]
        sess = tn.Session(g, backend="smallstep")
        sess.run(ends, scheduler="random", seed=seed, trace=True)
        assert [node for _, node, _, _ in sess.last_result.trace] == logs[seed]
    assert logs[0] != logs[3]
    # the default seed is 0 on both paths (``run``'s and ``RunOptions``'): a direct call schedules as a session
    assert _order(ss.run(g, ends, scheduler="random")) == logs[0]
    sess = tn.Session(g, backend="smallstep")
    sess.run(ends, scheduler="random", trace=True)
    assert [node for _, node, _, _ in sess.last_result.trace] == logs[0]


def test_a_firings_age_counts_from_when_it_became_enabled() -> None:
    """``fifo``'s age of a firing is the step at which it became enabled, not when its first input
    arrived: ``x = a0 + b3`` holds a0's token from the first step, yet it becomes enabled only when b3
    fires, after c3 (enabled when c2 fired, before b3 did); so fifo fires c3 before x.

    Kills smallstep.run:7196291d (which ages every firing afresh at every step, in ``enabled``'s order:
    x's pending entry, made when a0 fired, is listed before c3's)."""
    g, ends = _chains()
    with g.as_default():
        a0, b3 = (next(n for n in g.nodes if n.name == name).outputs[0] for name in ("a0", "b3"))
        x = tn.add(a0, b3, name="x")
    first = [f.node for f in ss.enabled(ss.initial(g, [*ends, x]))]
    want = [f"{c[0]}{i}" for i in range(4) for c in first] + ["x"]
    assert _order(ss.run(g, [*ends, x], scheduler="fifo")) == want


# ---- max_steps and max_seconds: the messages name the last firing and the option that raises the limit ----
def _counting_loop(n: int = 60) -> tuple[tn.Graph, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        (out,) = tn.while_loop(lambda i: i < n, lambda i: i + 1, [tn.constant(0)], name="count")
    return g, out


def test_max_steps_names_the_last_firing_taken() -> None:
    """After ``max_steps`` firings with more enabled the run stops with ``NonTerminationError`` naming
    the limit and the last firing taken (the ``max_steps``-th of the same fifo run left unbounded),
    and the run option that raises it (``max_firings``, which ``SmallStepBackend`` passes on as
    ``max_steps``; None there is no bound: the run ends).

    Kills smallstep.run:be2b1d47 ed21ca22 eb7eea39 bddb1213."""
    g, out = _counting_loop()
    full = ss.run(g, [out]).firings
    assert len(full) > 100
    for n in (5, 40):
        want = (f"small-step run exceeded max_steps={n} firings (a loop that does not end?); "
                f"last: {full[n - 1]}; raise the limit with sess.run(..., max_firings=N)")
        with pytest.raises(tn.NonTerminationError, match=f"^{re.escape(want)}$"):
            ss.run(g, [out], max_steps=n)
        with pytest.raises(tn.NonTerminationError, match=f"^{re.escape(want)}$"):
            tn.Session(g, backend="smallstep").run(out, max_firings=n)
    sess = tn.Session(g, backend="smallstep")
    assert int(sess.run(out, max_firings=None)) == 60
    assert sess.last_result.stats["firings"] == len(full)


class _Clock:
    """A stand-in for the ``time`` module whose ``monotonic()`` advances one second per call."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 1.0
        return self.now


def test_max_seconds_is_checked_every_256_firings_and_names_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """``max_seconds`` is checked before the first firing and then before every 256th (the clock is
    read only then), and the run stops once the time is strictly past the deadline; the message names
    the limit, the last firing taken (None before the first), and the option that raises it. With a
    clock that advances one second per reading: a limit of 0.5 s stops the run before any firing; of
    1 s, not at the first check (exactly at the deadline) but at the next, after 256 firings; of 1.5 s,
    after 256 firings too. ``SmallStepBackend`` passes the session's ``max_seconds`` on.

    Kills smallstep.run:066315d6 04215c51 111b7161 f938da5b aa8c8ce9 be2b1d47.2 ed21ca22.2 edcf3423 3e95558c."""
    g, out = _counting_loop()
    full = ss.run(g, [out]).firings
    assert len(full) > 300

    def want(limit: float, last: Any) -> str:
        text = (f"small-step run took more than max_seconds={limit} seconds (a loop that does not end?); "
                f"last: {last}; raise the limit with sess.run(..., max_seconds=N)")
        return f"^{re.escape(text)}$"

    for limit, last in ((0.5, None), (1.0, full[255]), (1.5, full[255])):
        monkeypatch.setattr(ss, "time", _Clock())
        with pytest.raises(tn.NonTerminationError, match=want(limit, last)):
            ss.run(g, [out], max_seconds=limit)
        monkeypatch.setattr(ss, "time", _Clock())
        with pytest.raises(tn.NonTerminationError, match=want(limit, last)):
            tn.Session(g, backend="smallstep").run(out, max_seconds=limit)


# ---- deadlock_report, outputs, is_final, and a firing taken twice ----------------------------------------
_RECV = {"src_device": "a", "dst_device": "b", "credit": 1, "control": False, "dtype": "float32", "shape": []}


def _lone_recv(g: tn.Graph, edge: str, name: str) -> tn.Tensor:
    """A Recv whose Send is in no graph: it never receives a token."""
    return g.create_node("Recv", [], {**_RECV, "edge": edge}, name=name).outputs[0]


def test_a_deadlock_report_reads_exactly() -> None:
    """``deadlock_report`` (the ``DeadlockError`` text): a first line naming every fetch never produced,
    comma-separated; then per blocked key (pending, not fired) its node at its tag, the inputs that
    arrived and those missing by their sources, comma-separated, ``nothing`` where none is missing (a
    Recv whose control input came but whose message never will); then each open frame instance.

    Kills smallstep.deadlock_report:a46df45c 5c23369f a46df45c.3 1613ca9e.2 20da1589.2."""
    from turnout.errors import describe_node

    g = tn.Graph()
    with g.as_default():
        r1, r2 = _lone_recv(g, "e1", "lone1"), _lone_recv(g, "e2", "lone2")
        five = tn.constant(5.0, name="five")
        with tn.control_dependencies([five]):
            both = tn.add(r1, r2, name="both")
            gated = g.create_node("Recv", [], {**_RECV, "edge": "e3"}, name="gated").outputs[0]
        inner = tn.add(raw.enter(r1, "f", name="enter_r"), raw.enter(five, "f", name="enter_five"), name="inner")
        out = raw.exit(inner, name="out")
    with pytest.raises(tn.DeadlockError) as e:
        ss.run(g, [both, out, gated])
    lines = str(e.value).splitlines()
    assert lines[0] == "deadlock: no firing is enabled, yet fetches both:0, out:0, gated:0 were never produced"
    assert sorted(lines[1:4]) == sorted([
        f"  blocked: {describe_node(both.node)} at tag (); arrived: ^five; missing: lone1:0, lone2:0",
        f"  blocked: {describe_node(gated.node)} at tag (); arrived: ^five; missing: nothing",
        f"  blocked: {describe_node(inner.node)} at tag f[0]; arrived: enter_five:0; missing: enter_r:0",
    ])
    assert lines[4:] == ["  open frame instance 'f' entered at tag (): started [0], oldest active 0, "
                         "Enters still to arrive 1"]


def _fire_named(c: ss.Config, *names: str) -> ss.Config:
    """Fire, in order, the enabled node firing of each named node."""
    for name in names:
        c = ss.fire(c, next(f for f in ss.enabled(c) if f.node == name))
    return c


def test_a_deadlock_report_skips_a_fired_key_and_lists_the_keys_after_it() -> None:
    """``deadlock_report`` lists the keys of Q that have not fired; a key that has (a Merge that fired,
    holding a late live input: [E-Merge-Conflict] is what it enables) is skipped, and the listing goes
    on past it: here the Merge's key entered Q again (with c2's token) before z's did, and z, waiting for
    a Recv that never receives, is still reported.

    Kills smallstep.deadlock_report:92e20f51."""
    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([tn.constant(1.0, name="c1"), tn.constant(2.0, name="c2")], name="m")
        z = tn.add(_lone_recv(g, "e1", "lone"), tn.constant(5.0, name="five"), name="z")
    c = _fire_named(ss.initial(g, [m, z]), "c1", "m", "c2", "five")
    assert [f.rule for f in ss.enabled(c)] == ["E-Merge-Conflict"]
    blocked = [ln for ln in ss.deadlock_report(c).splitlines() if ln.startswith("  blocked:")]
    assert len(blocked) == 1 and blocked[0].endswith("at tag (); arrived: five:0; missing: lone:0")
    assert 'Add node "z"' in blocked[0]


def test_a_dead_fetch_names_its_node_as_the_reference_does() -> None:
    """``outputs``: a fetched tensor whose token is dead raises ``DeadFetchError`` with the message every
    backend gives, naming the tensor and the node it is an output of (here output 1 of a Switch that is
    not the program's first node), word for word the reference interpreter's.

    Kills smallstep.outputs:96f72336 20d59a20."""
    g = tn.Graph()
    with g.as_default():
        tn.constant(0.0, name="first")
        sf, st = raw.switch(tn.constant(2.0, name="v"), tn.constant(False, name="p"), name="sw")
        both = tn.add(sf, tn.constant(1.0, name="one"), name="after")
    msgs = []
    for run in (lambda: ss.run(g, [both, st]), lambda: run_graph(g, [both, st])):
        with pytest.raises(tn.DeadFetchError) as e:
            run()
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]
    assert msgs[0].startswith('fetched tensor sw:1 is dead: Switch node "sw"')


def test_is_final_needs_every_fetch_and_quiescence() -> None:
    """``is_final``: quiescent with every fetch edge holding a token. Not at the start (nothing
    produced, firings enabled), not once the fetch is produced while other firings are still enabled,
    not at a deadlock (quiescent, a fetch missing); at the end of a run that ended normally it is.

    Kills smallstep.is_final:89ac81fa 0984de26 e66bb6f6 8f942b03."""
    g = tn.Graph()
    with g.as_default():
        a = tn.constant(1.0, name="a")
        tn.negative(tn.constant(2.0, name="b"), name="nb")
    c = ss.initial(g, [a], whole_graph=True)  # b and nb are kept, though the fetch does not need them
    assert not ss.is_final(c)
    c = _fire_named(c, "a")
    assert a.node.id in {nid for nid, _ in c.produced} and ss.enabled(c) and not ss.is_final(c)
    c = _fire_named(c, "b", "nb")
    assert not ss.enabled(c) and ss.is_final(c)
    g2 = tn.Graph()
    with g2.as_default():
        z = tn.add(_lone_recv(g2, "e", "lone"), tn.constant(5.0, name="five"), name="z")
    c = _fire_named(ss.initial(g2, [z]), "five")
    assert not ss.enabled(c) and not ss.is_final(c)


def test_a_firing_taken_twice_is_refused_naming_its_node_and_tag() -> None:
    """``fire`` takes a node firing once per key (n, t): firing it again raises ``ArgumentError``
    naming the node and the tag (inside a frame: ``f[0]``).

    Kills smallstep.fire_sending:6b09ebf7."""
    g = tn.Graph()
    with g.as_default():
        out = raw.exit(tn.negative(raw.enter(tn.constant(1.0), "f"), name="neg"))
    c = ss.initial(g, [out])
    while not any(f.node == "neg" for f in ss.enabled(c)):
        c = ss.fire(c, ss.enabled(c)[0])
    f = next(f for f in ss.enabled(c) if f.node == "neg")
    with pytest.raises(tn.ArgumentError, match=r"^neg has already fired at tag f\[0\]$"):
        ss.fire(ss.fire(c, f), f)


# ---- a predicate that is not a bool scalar -----------------------------------------------------------------
def test_a_predicate_that_is_not_a_scalar_names_the_switch_or_loop_cond_and_its_tag() -> None:
    """[E-Switch] and [E-LoopCond] take the truth of a 0-d predicate; a vector fed where the static shape
    is unknown is a ``KernelError`` naming the node and the tag it fired at (``f[0]`` here, inside a
    frame) and the value's shape. The reference interpreter refuses the same value with the same
    words after the node (it writes the tag its own way, ``at f:0``).

    Kills smallstep._fire_switch:3bff2b22 5b74d281 25f77ad5 61a54557 e6f57f2e 973d4351;
    smallstep._fire_loop_cond:8fbfdd08 46f1afac c21c5ee9 c45a4107 c96cc47e d350c31c."""
    from turnout.errors import KernelError, describe_node
    from turnout.kernels import predicate_shape_message

    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, None, name="p")
        ep = raw.enter(p, "f", name="ep")
        sf, _ = raw.switch(raw.enter(tn.constant(1.0), "f"), ep, name="sw")
        via_switch = raw.exit(sf, name="out")
        lc = raw.loop_cond(ep, name="lc")
        via_loop_cond = raw.exit(lc, name="out2")
    feed = {p: np.array([True, False])}
    for fetch, node in ((via_switch, sf.node), (via_loop_cond, lc.node)):
        want = predicate_shape_message(f"{describe_node(node)} at tag f[0]", (2,))
        with pytest.raises(KernelError) as e:
            ss.run(g, [fetch], feed)
        assert str(e.value) == want
        with pytest.raises(KernelError) as ref:
            run_graph(g, [fetch], feed)
        assert str(ref.value) == want.replace(" at tag f[0]: ", " at f:0: ")


# ---- where an emitting rule's control token goes ----------------------------------------------------------
def test_a_control_edge_carries_the_firings_liveness_at_its_tag() -> None:
    """emit(n, u, ...; c): every control edge of n gets one token at n's tag, live when the firing is.
    [E-Switch] fires live whatever the predicate (a node gated on the Switch runs); [E-LoopCond] passes
    its predicate's liveness (gated on a live LoopCond inside frame ``f``, the node runs at ``f[0]``;
    on a LoopCond of a dead predicate, it is dead); [E-Send] fires live (a node gated on a Send runs);
    and [E-Merge-Live]'s index output goes at the Merge's tag (``h[0]`` inside frame ``h``) to whatever
    reads it. As the reference
    interpreter computes, where it runs the graph.

    Kills smallstep._fire_switch:6c0d2704 653095b2 d0a84732; smallstep._fire_loop_cond:6e23dfae d2580513
    446da76b ff6fe2f2.2; smallstep._fire_send:9dd5a113 b7d2a84a aaa00cea; smallstep._fire_merge_live:112bb29a."""
    g = tn.Graph()
    with g.as_default():
        seven = tn.constant(7.0, name="seven")
        sw_f, sw_t = raw.switch(tn.constant(True), tn.constant(False), name="sw")
        with tn.control_dependencies([sw_f.node]):
            after_switch = tn.identity(seven, name="after_switch")
        live_p = raw.enter(tn.constant(True), "f", name="live_p")
        lc = raw.loop_cond(live_p, name="lc")
        seven_f = raw.enter(seven, "f", is_constant=True)
        with tn.control_dependencies([lc.node]):
            in_f = tn.identity(seven_f, name="in_f")
        after_lc = raw.exit(tn.add(in_f, tn.cast(lc, tn.float32)), name="after_lc")
        dead_p = raw.enter(sw_t, "g", name="dead_p")  # the Switch's true output is dead
        lc_dead = raw.loop_cond(dead_p, name="lc_dead")
        seven_g = raw.enter(seven, "g", is_constant=True)
        with tn.control_dependencies([lc_dead.node]):
            in_g = tn.identity(seven_g, name="in_g")
        after_dead_lc = raw.exit(in_g, name="after_dead_lc")
        lc_dead_out = raw.exit(lc_dead, name="lc_dead_out")
        _, idx = raw.merge([sw_f, sw_t], name="m")  # the live input is the first: index 0
        index = tn.identity(idx, name="index")
        h_f, h_t = raw.switch(raw.enter(tn.constant(True), "h"), raw.enter(tn.constant(False), "h"), name="sw_h")
        _, idx_h = raw.merge([h_f, h_t], name="m_h")
        index_h = raw.exit(tn.add(idx_h, raw.enter(tn.constant(10), "h", is_constant=True)), name="index_h")
    fetches = [after_switch, after_lc, index, index_h]
    r = ss.run(g, fetches)
    want = run_graph(g, fetches).values
    assert [float(v) for v in r.values] == [float(v) for v in want] == [7.0, 8.0, 0.0, 10.0]
    for fetch in (after_dead_lc, lc_dead_out):
        with pytest.raises(tn.DeadFetchError):
            ss.run(g, [fetch])
        with pytest.raises(tn.DeadFetchError):
            run_graph(g, [fetch])
    g2 = tn.Graph()
    with g2.as_default():
        send = g2.create_node("Send", [tn.constant(1.0)], {**_RECV, "edge": "e"}, name="send")
        seven = tn.constant(7.0, name="seven")
        with tn.control_dependencies([send]):
            after_send = tn.identity(seven, name="after_send")
    assert float(ss.run(g2, [after_send]).values[0]) == 7.0


# ---- an Enter without parallel_iterations ------------------------------------------------------------------
def _window_loop(pi: int | None) -> tuple[tn.Graph, tn.Tensor]:
    """A loop over a counter m (to 20) and an accumulator a whose every step waits for a slow invariant
    (a chain of 60 Negs at the root): the counter runs ahead of iteration 0, which cannot retire. Every
    Enter is built by hand, with ``parallel_iterations=pi`` or (None) without the attribute."""
    g = tn.Graph()
    with g.as_default():
        def enter(x: tn.Tensor, const: bool, name: str | None = None) -> tn.Tensor:
            attrs: dict[str, Any] = {"frame_name": "f", "is_constant": const}
            if pi is not None:
                attrs["parallel_iterations"] = pi
            return g.create_node("Enter", [x], attrs, name=name).outputs[0]

        slow = tn.constant(0)
        for _ in range(60):
            slow = tn.negative(slow)
        m, _ = raw.merge([enter(tn.constant(0), False, "e"), raw.BACK_EDGE], name="m")
        p = raw.loop_cond(tn.less(m, enter(tn.constant(20), True)), name="p")
        _, st = raw.switch(m, p, name="sw")
        a, _ = raw.merge([enter(tn.constant(0), False, "ea"), raw.BACK_EDGE], name="a")
        af, at = raw.switch(a, p, name="swa")
        raw.close_back_edge(a, raw.next_iteration(tn.add(at, enter(slow, True), name="side")))
        raw.close_back_edge(m, raw.next_iteration(st + enter(tn.constant(1), True)))
        out = raw.exit(af, name="out")
    return g, out


def test_an_enter_without_parallel_iterations_opens_a_window_of_ten() -> None:
    """[E-Enter] opens the frame instance with the window its ``parallel_iterations`` gives, 10 (as
    ``raw.enter``'s default and TensorFlow's) where the attribute is absent: iteration 0 waits for the
    slow invariant while the counter runs on, so the counter's NextIteration at iteration 9 parks
    ([E-Next-Park]: iteration 10 lies outside the window), exactly as with ``parallel_iterations=10``
    and unlike 11. The value is the reference interpreter's.

    Kills smallstep._fire_enter:f0713f69 f7fa1d17 280b59f1."""
    def parks(pi: int | None) -> list[Any]:
        g, out = _window_loop(pi)
        r = ss.run(g, [out])
        assert int(r.values[0]) == int(run_graph(g, [out]).values[0]) == 0
        return [(node, tag) for rule, node, tag, _ in r.firings if rule == "E-Next-Park"]

    ten = parks(10)
    assert [tag for _, tag in ten] == [(("f", 9),)]
    assert parks(None) == ten
    assert parks(11) == []


# ---- SmallStepBackend's options ----------------------------------------------------------------------------
def test_the_small_step_backend_refuses_every_backend_option_by_name() -> None:
    """``SmallStepBackend`` honours no backend option, so it refuses any (an option no one honours must
    not be silently ignored) with an ``ArgumentError`` listing them sorted; built without any, it keeps
    the (empty) options it was given, as the other backends keep theirs in ``backend.options``.

    Kills smallstep.__init__:95d43607 db47d52b 50ac79b6."""
    g, ends = _chains(2)
    with pytest.raises(tn.ArgumentError) as e:
        ss.SmallStepBackend(g, stack_chunk=8, device_memory_limit=1)
    assert str(e.value) == "the small-step backend takes no options, got ['device_memory_limit', 'stack_chunk']"
    sess = tn.Session(g, backend="smallstep")
    assert sess.backend.options == {}
    assert [float(v) for v in sess.run(ends)] == [-1.0, -1.0, -1.0]


def test_a_push_of_a_value_without_bytes_or_under_a_control_input_is_counted_as_the_reference_does() -> None:
    """``_count_push`` reads a live [E-Stack-Push]'s first three inputs (handle, index, value), whatever
    control inputs follow them, and counts the value's ``nbytes``, 0 for a value that has none (a
    variable's handle), plus 4 bytes per int of the index: here a float32 scalar under a control input
    (4 + 4) and a handle (0 + 4), 12 bytes under loop ``L``, as the reference interpreter counts them.

    Kills smallstep._count_push:2a128c40 773c3a00 6ccc9ba7 6cdf1195."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(1.0, name="v")
        h = g.create_node("StackNew", [], {"elem_dtype": "float32", "elem_shape": [], "loop_name": "L"},
                          name="stack").outputs[0]
        gate = tn.constant(1.0, name="gate")
        with tn.control_dependencies([gate.node]):
            pushed = g.create_node("StackPush", [h, tn.constant(np.array([0], np.int32)), tn.constant(2.5)], {},
                                   name="push").outputs[0]
        handle = g.create_node("StackPush", [h, tn.constant(np.array([1], np.int32)), v.handle], {},
                               name="push_handle").outputs[0]
    (_, ref_stats), (got, ss_stats) = _both(g, [pushed, handle], {}, memory_budget=1000)
    assert float(got[0]) == 2.5
    assert ss_stats["saved_bytes"] == ref_stats["saved_bytes"] == {"L": 12}
    assert ss_stats["peak_saved_bytes"] == ref_stats["peak_saved_bytes"] == 12


def test_a_direct_run_bounds_each_loop_instance_as_a_sessions_default_does() -> None:
    """``run``'s default ``max_iterations`` is ``RunOptions``' (1,000,000): the program a direct call
    runs carries the same iteration bound as a session's run with default options, and None lifts it.

    Kills smallstep.run:152e42c4."""
    g, out = _counting_loop()
    default = tn.RunOptions().max_iterations
    assert ss.run(g, [out]).final.program.max_iterations == default
    assert ss.run(g, [out], max_iterations=None).final.program.max_iterations is None
    assert ss.run(g, [out], max_iterations=60).final.program.max_iterations == 60


def test_the_small_step_system_counts_a_recomputed_loops_slots() -> None:
    """``_count_saved``: a live ``CheckpointSlots`` firing counts the slots its loop's checkpoints take
    (``SavedBytes.checkpoints``), as the reference interpreter counts them; a push counts its entry;
    other firings count nothing. A run's budget below the slots stops with the reference's message."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        _, y = tn.while_loop(lambda i, v: i < 5, lambda i, v: (i + 1, tn.tanh(v)), [tn.constant(0), x], name="rnn",
                             memory_budget=2 * 24)
        (gx,) = tn.gradients(tn.reduce_sum(y), [x])
    feeds = {x: np.ones(4, np.float32)}
    r = ss.run(g, [gx], feeds)
    assert r.saved is not None and r.saved.stats() == {"peak_saved_bytes": 48, "saved_bytes": {"rnn": 48}}
    np.testing.assert_allclose(r.values[0], run_graph(g, [gx], feeds).values[0], rtol=1e-6)
    msgs = []
    for run in (lambda: ss.run(g, [gx], feeds, memory_budget=47),
                lambda: tn.Session(g).run(gx, feeds, memory_budget=47)):
        with pytest.raises(ResourceExhaustedError) as e:
            run()
        msgs.append(str(e.value).split(": ", 1)[1])
    assert msgs[0] == msgs[1] and msgs[0].startswith('the checkpoints of loop "rnn" (2 slots of 24 bytes')
