"""Tests that kill what the full mutant set of the reference interpreter's main loop let through.

``python tools/mutation.py --module reference/executor.py --all`` mutates ``reference/executor.py`` one
expression at a time (docs/checking.rst gives the score); each test here fails under mutants that the
rest of the suite let through, and states the law of the interpreter it checks: where a token goes and
at which tag, when an iteration retires and a frame ends, and what a run reports.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np
import pytest
from graphs import recomputed_tanh_loop

import turnout as tn
from turnout import raw
from turnout.reference.executor import run_graph
from turnout.reference.trace import fmt_tag
from turnout.semantics import smallstep as ss
from turnout.session import RunOptions


def _counted_loop(n: int, name: str = "loop") -> tuple[tn.Graph, tn.Tensor]:
    """``i = 0; while i < n: i = i + 1`` by hand, with the body's add waiting on the constant Enter of
    ``n`` through a control edge (``step``), so that an invariant's control output has a consumer."""
    g = tn.Graph()
    with g.as_default():
        e = raw.enter(tn.constant(0), name)
        lim = raw.enter(tn.constant(n), name, is_constant=True, name="lim")
        one = raw.enter(tn.constant(1), name, is_constant=True)
        m, _ = raw.merge([e, raw.BACK_EDGE], name="m")
        f, t = raw.switch(m, raw.loop_cond(m < lim))
        with tn.control_dependencies([lim]):
            step = tn.add(t, one, name="step")
        raw.close_back_edge(m, raw.next_iteration(step))
        out = raw.exit(f, name="out")
    return g, out


# ---- invariants: [E-Enter-Const] ---------------------------------------------------------------------
def test_a_constant_enter_satisfies_its_control_consumers_at_every_iteration() -> None:
    """[E-Enter-Const]: a loop invariant reaches every iteration, its control output included: a body
    op that waits on the constant Enter through a control edge fires once at each iteration's tag
    (iteration 1 onwards gets it when the iteration starts, ``start_iteration``), so the loop runs its
    ``n`` bodies, as in the small-step system."""
    for n in (1, 3):
        g, out = _counted_loop(n)
        r = run_graph(g, [out], options=RunOptions(trace=True))
        small = ss.run(g, [out])
        assert [int(v) for v in r.values] == [n] == [int(v) for v in small.values]
        assert r.trace is not None
        steps = Counter(e.tag for e in r.trace.events if e.node == "step" and not e.dead)
        assert steps == Counter({(("loop", k),): 1 for k in range(n)})
        assert {k: c for k, c in r.counts.items() if k[0] == "step"} == {
            k: c for k, c in small.counts.items() if k[0] == "step"}
        assert r.stats["stranded_inboxes"] == 0


# ---- the parallel_iterations window: [E-Next-Park], [E-Iter-Retire] ---------------------------------------
def _window_loop(pi: int | None, n: int, chain: int = 12) -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """``i, acc = 0, 0.0; while i < n: i, acc = i + 1, acc + 1.0 + ... + 1.0`` (``chain`` adds), built by
    hand with Enters of ``parallel_iterations=pi`` (None: the attribute left out). The counter runs
    ahead of the slow accumulator, so its NextIteration reaches the edge of the window and parks."""
    g = tn.Graph()
    with g.as_default():
        def enter(x: Any, const: bool = False) -> tn.Tensor:
            attrs: dict[str, Any] = {"frame_name": "win", "is_constant": const}
            if pi is not None:
                attrs["parallel_iterations"] = pi
            return g.create_node("Enter", [x], attrs).outputs[0]

        lim, one, onef = enter(tn.constant(n), True), enter(tn.constant(1), True), enter(tn.constant(1.0), True)
        mi, _ = raw.merge([enter(tn.constant(0)), raw.BACK_EDGE])
        ma, _ = raw.merge([enter(tn.constant(0.0)), raw.BACK_EDGE])
        go = raw.loop_cond(mi < lim)
        fi, ti = raw.switch(mi, go)
        fa, acc = raw.switch(ma, go)
        for _ in range(chain):
            acc = acc + onef
        raw.close_back_edge(mi, raw.next_iteration(ti + one))
        raw.close_back_edge(ma, raw.next_iteration(acc))
    return g, raw.exit(fi), raw.exit(fa)


def _widest_lead(pi: int | None, n: int) -> int:
    """Run the loop; check that iterations retire oldest first, one at a time, and return the most
    iterations any firing ran ahead of the oldest unretired one."""
    g, i, acc = _window_loop(pi, n)
    r = run_graph(g, [i, acc], options=RunOptions(trace=True))
    assert [float(v) for v in r.values] == [n, 12.0 * n]
    assert r.trace is not None
    retired, lead = 0, 0
    for e in r.trace.events:
        if e.rule == "E-Iter-Retire":
            assert e.tag == (("win", retired),)
            retired += 1
        elif e.tag:
            lead = max(lead, e.tag[-1][1] - retired)
    assert retired == n + 1  # iterations 0..n: the last finds the predicate false
    return lead


def test_no_iteration_runs_before_the_one_parallel_iterations_back_has_retired() -> None:
    """[E-Next-Park]: iteration k of a loop of ``parallel_iterations=pi`` may run only once iterations
    0 .. k-pi have retired; a value for it is parked until then. Here the counter would run far ahead,
    so the window is used to the full and never overrun: the widest lead of a firing over the oldest
    unretired iteration is pi-1."""
    for pi in (1, 2, 3):
        assert _widest_lead(pi, 6) == pi - 1, pi


def test_an_enter_without_parallel_iterations_gets_a_window_of_ten() -> None:
    """An Enter made without the ``parallel_iterations`` attribute (by hand: the builders always set
    it) runs in a window of 10, the default of ``raw.enter``, of the validator and of TensorFlow."""
    assert _widest_lead(None, 25) == 9


def test_an_iteration_retires_after_every_loop_nested_in_it() -> None:
    """[E-Iter-Retire]: an iteration retires once nothing in it can fire, the loop instances nested in
    it included. Each outer iteration here runs two sibling inner loops, of 1 and of 5 iterations; the
    retirement of outer iteration k comes after every firing tagged inside it, at any depth."""
    g = tn.Graph()
    with g.as_default():
        def body(i: Any, acc: Any) -> tuple[Any, Any]:
            (a,) = tn.while_loop(lambda j: j < 1, lambda j: j + 1, [tn.constant(0)], name="short")
            (b,) = tn.while_loop(lambda j: j < 5, lambda j: j + 1, [tn.constant(0)], name="long")
            return i + 1, acc + a + b

        _, acc = tn.while_loop(lambda i, acc: i < 3, body, [tn.constant(0), tn.constant(0)], name="outer")
    r = run_graph(g, [acc], options=RunOptions(trace=True))
    assert [int(v) for v in r.values] == [18]
    assert r.trace is not None
    last: dict[int, int] = {}
    retired: dict[int, int] = {}
    for e in r.trace.events:
        if not e.tag or "outer" not in e.tag[0][0]:
            continue
        k = e.tag[0][1]
        if e.rule == "E-Iter-Retire" and len(e.tag) == 1:
            retired[k] = e.seq
        else:
            last[k] = e.seq
    assert sorted(retired) == [0, 1, 2, 3]
    assert all(last[k] < retired[k] for k in last), (last, retired)



def _gated_loop() -> tuple[tn.Graph, tn.Tensor]:
    """``i = 0; while i < 3: i = i + 1`` by hand, whose Merge ``m`` and increment ``step`` also wait for
    the control token of a non-constant Enter (``gate``), which delivers to iteration 0 only: iteration 1
    starts (its back-edge value arrives) but none of its nodes can ever fire. ``step`` waits on the
    constant Enter ``lim`` too, which reaches every iteration."""
    g = tn.Graph()
    with g.as_default():
        gate = raw.enter(tn.constant(0), "loop", name="gate")
        lim = raw.enter(tn.constant(3), "loop", is_constant=True, name="lim")
        one = raw.enter(tn.constant(1), "loop", is_constant=True)
        start = raw.enter(tn.constant(0), "loop", name="start")
        with tn.control_dependencies([gate]):
            m, _ = raw.merge([start, raw.BACK_EDGE], name="m")
        f, t = raw.switch(m, raw.loop_cond(tn.less(m, lim, name="less")), name="sw")
        with tn.control_dependencies([lim, gate]):
            step = tn.add(t, one, name="step")
        raw.close_back_edge(m, raw.next_iteration(step))
        out = raw.exit(f, name="out")
    return g, out


def test_an_iteration_in_which_nothing_can_fire_retires_and_its_loop_ends_dead() -> None:
    """[E-Iter-Retire] / [E-Frame-Done]: an iteration retires once nothing in it is ready, even if nothing
    in it ever was. In ``_gated_loop`` iteration 1 starts but none of its nodes can fire: it retires at
    once, the frame completes and its Exit, dead at iteration 0, releases its dead token, so the fetch is
    dead (with the stall noted), as in the small-step system, instead of the loop instance hanging on
    incomplete."""
    g, out = _gated_loop()
    want = r'^fetched tensor out:0 is dead: .*a loop that ended because its next iteration stalled\?'
    with pytest.raises(tn.DeadFetchError, match=want):
        run_graph(g, [out])
    with pytest.raises(tn.DeadFetchError, match="^fetched tensor out:0 is dead"):
        ss.run(g, [out])

    from turnout.reference.executor import Interpreter, make_plan

    it = Interpreter(make_plan(g, [out], set()), {}, {}, RunOptions(trace=True))
    it.run()
    assert it.trace is not None
    assert [ev.tag for ev in it.trace.events if ev.rule == "E-Iter-Retire"] == [(("loop", 0),), (("loop", 1),)]
    assert [(ev.node, ev.tag) for ev in it.trace.events if ev.rule == "E-Frame-Done"] == [("out", ())]
    assert it.frames == {}


def test_a_loop_instance_keeps_counts_only_for_its_unretired_iterations(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop instance's per-iteration counts (nodes ready, nested instances incomplete) cover only its
    iterations ``oldest .. started-1``: a retired iteration leaves nothing behind, so what a long loop
    holds is bounded by its ``parallel_iterations`` window, not by how many iterations it ran. Checked
    after every retirement check of a loop of 12 iterations (window 2) that runs a nested loop in each."""
    from turnout.reference import executor

    seen: list[tuple[str, int, int, list[int], list[int]]] = []
    real = executor.Interpreter.check_retire

    def checked(self: Any, inst: Any) -> None:
        real(self, inst)
        seen.append((inst.name, inst.oldest, inst.started, sorted(inst.ready), sorted(inst.children)))

    monkeypatch.setattr(executor.Interpreter, "check_retire", checked)
    g = tn.Graph()
    with g.as_default():
        def body(i: Any, acc: Any) -> tuple[Any, Any]:
            (a,) = tn.while_loop(lambda j: j < 3, lambda j: j + 1, [tn.constant(0)], name="inner")
            return i + 1, acc + a

        _, acc = tn.while_loop(lambda i, acc: i < 12, body, [tn.constant(0), tn.constant(0)], name="outer",
                               parallel_iterations=2)
    assert [int(v) for v in run_graph(g, [acc]).values] == [36]
    for name, oldest, started, ready, children in seen:
        live = set(range(oldest, started))
        assert set(ready) <= live and set(children) <= live, (name, oldest, started, ready, children)
    assert max(s[2] for s in seen if "outer" in s[0]) == 13  # iterations 0..12 (the 13th finds i < 12 false)
    assert any(s[4] for s in seen)  # the outer loop did count its nested instances


# ---- what a trace records ------------------------------------------------------------------------------
def test_every_trace_event_says_what_it_is() -> None:
    """A trace holds node firings and two kinds of bookkeeping (``Trace.summary``): a node firing carries
    its node's op; a retirement ([E-Iter-Retire]) is a live event of op ``Retire`` named
    ``<frame>#retire`` at the retired iteration's tag; the dead token an Exit sends when its frame ends
    having sent nothing live ([E-Frame-Done]) is a dead ``Exit`` event at the tag the loop was entered
    from. Here a loop on the untaken side of a cond runs dead, so its Exit ends that way."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        out = tn.cond(x > 100, lambda: tn.while_loop(lambda i: i < 3, lambda i: i + 1, [x], name="lp")[0],
                      lambda: x * 2)
    r = run_graph(g, [out], {x: np.int32(2)}, RunOptions(trace=True))
    assert [int(v) for v in r.values] == [4]
    assert r.trace is not None
    ops = {n.name: n.op for n in g.nodes}
    kinds = Counter()
    for e in r.trace.events:
        if e.rule == "E-Iter-Retire":
            assert (e.op, e.dead) == ("Retire", False) and e.node == e.tag[-1][0] + "#retire", e
            assert len(e.tag) == 1 and "lp" in e.tag[-1][0], e
        elif e.rule == "E-Frame-Done":
            assert (e.op, e.dead, e.tag) == ("Exit", True, ()) and ops[e.node] == "Exit", e
        else:
            assert e.op == ops[e.node], e
        kinds[e.rule] += 1
    assert kinds["E-Iter-Retire"] == 1 and kinds["E-Frame-Done"] == 1  # a dead loop runs iteration 0 only


# ---- runaway runs: max_firings and max_seconds ------------------------------------------------------------
def _hint(option: str) -> str:
    return (r"\. Does a loop fail to terminate\? If the program really needs more, raise the limit with "
            rf"sess\.run\(\.\.\., {option}=N\) \(RunOptions\.{option}; None: no limit\)$")


def test_a_runaway_run_without_loops_names_its_last_firing_and_the_option() -> None:
    """A run past ``max_firings`` names the firing that went over (FIFO: the two constants, then the
    Add), says what to raise, and names no loop when none is running."""
    g = tn.Graph()
    with g.as_default():
        y = tn.add(tn.constant(1), tn.constant(2), name="y")
    want = r'^more than max_firings=2 firings \(last: Add node "y"[^)]*\) at root\)' + _hint("max_firings")
    with pytest.raises(tn.NonTerminationError, match=want):
        run_graph(g, [y], options=RunOptions(max_firings=2))


def test_a_runaway_loop_is_named_with_the_iteration_it_reached() -> None:
    """A run past ``max_firings`` inside loops names the busiest loop instance (the one that started the
    most iterations: here the endless inner loop, not the outer loop that holds it, which was made
    first) and the last iteration it started, which is one past the last iteration whose NextIteration
    fired live ([E-Next-Live] starts iteration k+1)."""
    from turnout.reference.executor import Interpreter, make_plan

    g = tn.Graph()
    with g.as_default():
        def outer(i: Any) -> Any:
            (k,) = tn.while_loop(lambda k: k >= 0, lambda k: k + 1, [i], name="inner")
            return k

        (out,) = tn.while_loop(lambda i: i < 2, outer, [tn.constant(0)], name="outer")
    for limit in (200, 333):
        it = Interpreter(make_plan(g, [out], set()), {}, {}, RunOptions(max_firings=limit, trace=True))
        with pytest.raises(tn.NonTerminationError) as e:
            it.run()
        assert it.trace is not None
        nexts = [ev.tag[-1][1] for ev in it.trace.events
                 if ev.op == "NextIteration" and not ev.dead and "inner" in ev.tag[-1][0]]
        inner = next(ev.tag for ev in it.trace.events if ev.tag and "inner" in ev.tag[-1][0])
        frame, parent = inner[-1][0], fmt_tag(inner[:-1])
        want = (rf"^more than max_firings={limit} firings \(last: .* at {parent}/{frame}:\d+\); the busiest "
                rf"loop is loop frame '{frame}' \(instance {parent}; entered by Enter node "
                rf"[^)]*\)\), at iteration {max(nexts) + 1}" + _hint("max_firings"))
        assert re.match(want, str(e.value)), (want, str(e.value))


def test_a_run_past_max_seconds_says_which_option_to_raise() -> None:
    """``max_seconds`` is checked every 1024 firings: a run past it names the loop and the option (long
    before a firing limit set far above it)."""
    g = tn.Graph()
    with g.as_default():
        (k,) = tn.while_loop(lambda k: k >= 0, lambda k: k + 1, [tn.constant(0)], name="forever")
    want = (r"^the run took more than max_seconds=0\.02 seconds \(last: .*\); the busiest loop is loop frame "
            r"'[^']*forever[^']*' \(instance root; entered by Enter node .*\), at iteration \d+" + _hint("max_seconds"))
    with pytest.raises(tn.NonTerminationError, match=want):
        run_graph(g, [k], options=RunOptions(max_seconds=0.02, max_firings=100_000))



def test_the_wall_clock_guard_names_the_firing_it_stopped_at_as_the_firing_guard_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run stopped by ``max_seconds`` names its last firing (node and tag) and the busiest loop in the
    same words as one stopped by ``max_firings``. With a clock that passes the deadline at its first
    check (firing 1024), the run stops where ``max_firings=1023`` stops it: at the same firing."""
    from turnout.reference import executor

    g = tn.Graph()
    with g.as_default():
        (k,) = tn.while_loop(lambda k: k >= 0, lambda k: k + 1, [tn.constant(0)], name="forever")
    clock = iter([0.0])  # the deadline is set at 0.0 + max_seconds; every later read is far past it
    monkeypatch.setattr(executor.time, "monotonic", lambda: next(clock, 1e9))
    with pytest.raises(tn.NonTerminationError, match="^the run took more than max_seconds=1.0 seconds") as by_clock:
        run_graph(g, [k], options=RunOptions(max_seconds=1.0, max_firings=10_000))
    with pytest.raises(tn.NonTerminationError, match="^more than max_firings=1023 firings") as by_count:
        run_graph(g, [k], options=RunOptions(max_firings=1023))
    last = re.compile(r"\(last: (\w+ node .*) at (forever/frame0:\d+)\); the busiest loop is (.*), "
                      r"at iteration (\d+)\.")
    a, b = last.search(str(by_clock.value)), last.search(str(by_count.value))
    assert a is not None and b is not None, (str(by_clock.value), str(by_count.value))
    assert a.groups() == b.groups()


# ---- exactly once: [T3-Exactly-Once], [E-Merge-Live] -------------------------------------------------------
def _leaky_loop(consume: Any) -> tuple[tn.Graph, tn.Tensor]:
    """A hand-built loop of three bodies whose Exit ``leaky`` reads the Merge (not the Switch's exit
    branch), so it sends a live value to the root at every iteration; ``consume`` makes the fetch."""
    g = tn.Graph()
    with g.as_default():
        e = raw.enter(tn.constant(0), "loop")
        three = raw.enter(tn.constant(3), "loop", is_constant=True)
        one = raw.enter(tn.constant(1), "loop", is_constant=True)
        m, _ = raw.merge([e, raw.BACK_EDGE])
        _, t = raw.switch(m, raw.loop_cond(m < three))
        raw.close_back_edge(m, raw.next_iteration(t + one))
        fetch = consume(raw.exit(m, name="leaky"))
    return g, fetch


def test_a_node_fed_twice_at_one_tag_is_refused_where_it_would_fire_twice() -> None:
    """[T3-Exactly-Once]: a node fires at most once per tag. The leaky Exit sends its consumer a value
    at the root at every iteration; a one-input op fires on the first, so the second would fire it again
    at the root: the interpreter stops with an error naming the node and the tag."""
    g, y = _leaky_loop(lambda leaky: tn.identity(leaky, name="once"))
    want = r'^Identity node "once" .*fired twice at root \(exactly-once violated\)$'
    with pytest.raises(tn.ExecutionError, match=want):
        run_graph(g, [y])


def test_a_merge_ignores_what_arrives_after_it_fired() -> None:
    """[E-Merge-Live]: a Merge fires once, on its first live input, and what reaches it later at that tag
    (the dead token of a cond's untaken branch) is dropped, whether it comes while the Merge waits in
    the ready queue (branches of equal length) or after it fired (an untaken branch three ops longer):
    the Merge fires once, live, and nothing is left waiting at the end of the run."""
    for longer in (False, True):
        g = tn.Graph()
        with g.as_default():
            p = tn.placeholder(tn.bool, [], name="p")
            x = tn.constant(2.0)
            ops = 3 if longer else 1

            def false_branch(x: Any = x, ops: int = ops) -> Any:
                for _ in range(ops):
                    x = x * 2.0
                return x

            out = tn.cond(p, lambda x=x: x + 1.0, false_branch)
        for pred, want in ((True, 3.0), (False, 16.0 if longer else 4.0)):
            r = run_graph(g, [out], {p: np.bool_(pred)}, RunOptions(trace=True))
            assert [float(v) for v in r.values] == [want]
            assert r.stats["stranded_inboxes"] == 0
            assert r.trace is not None
            merges = [e for e in r.trace.events if e.op == "Merge"]
            assert [(e.rule, e.dead) for e in merges] == [("E-Merge-Live", False)]


# ---- run_graph: one run without a Session ----------------------------------------------------------------
def test_run_graph_bounds_every_tensor_by_max_tensor_bytes() -> None:
    """``run_graph`` runs under its options' allocation guard, as a Session does: a tensor larger than
    ``max_tensor_bytes`` is refused with ResourceExhaustedError naming the limit; the default lets the
    same small tensor through."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")
        y = tn.tile(x, [100], name="big")
    feed = {x: np.ones(4, np.float32)}
    assert run_graph(g, [y], feed).values[0].shape == (400,)
    with pytest.raises(tn.ResourceExhaustedError, match="max_tensor_bytes=1,000"):
        run_graph(g, [y], feed, RunOptions(max_tensor_bytes=1000))


# ---- the end of a run: what a deadlock report says ---------------------------------------------------------
def test_a_deadlock_report_names_parked_values_and_missing_enters() -> None:
    """When a run ends with a fetch never produced, the report lists every node left waiting (and for
    what), every loop instance holding parked values (for which iterations), and every loop instance
    that did not receive all its Enters. Here an outer loop (``parallel_iterations=1``) stalls at
    iteration 1 on a non-constant Enter, which delivers to iteration 0 only; its counter runs on and
    parks a value for iteration 2; and the inner loop of iteration 1 waits for its Enter of the stalled
    value, with the other two arrived."""
    g = tn.Graph()
    with g.as_default():
        def enter(x: Any, frame: str, const: bool = False, name: str | None = None) -> tn.Tensor:
            return raw.enter(x, frame, is_constant=const, parallel_iterations=1, name=name)

        m, _ = raw.merge([enter(tn.constant(0), "o"), raw.BACK_EDGE])
        sf, st = raw.switch(m, raw.loop_cond(m < enter(tn.constant(3), "o", True)))
        stalled = tn.add(st, enter(tn.constant(5), "o", name="once"), name="stalled")
        one = enter(tn.constant(1), "o", True)
        mi, _ = raw.merge([enter(stalled, "i"), raw.BACK_EDGE], name="mi")
        inner_f, inner_t = raw.switch(mi, raw.loop_cond(tn.less(mi, enter(st, "i", True), name="less")), name="si")
        raw.close_back_edge(mi, raw.next_iteration(tn.add(inner_t, enter(one, "i", True), name="inc")))
        raw.close_back_edge(m, raw.next_iteration(st + one))
        out, out2 = raw.exit(sf, name="out"), raw.exit(tn.negative(sf), name="out2")
        side = raw.exit(raw.exit(inner_f), name="side")  # keeps the inner loop in the run
    with pytest.raises(tn.DeadlockError) as e:
        run_graph(g, [out, side, out2])
    msg = re.sub(r" \(created at [^)]*\)", "", str(e.value))
    assert msg == (
        "no node can fire, but fetches out:0, out2:0 were never produced. The run stalled: some nodes received only "
        "part of their inputs (for example an op in iteration k > 0 reading a non-constant Enter, which only "
        "delivers to iteration 0). Blocked:\n"
        '  Add node "stalled" at o:1 waits for input 1 (once:0)\n'
        '  Less node "less" at o:1/i:0 waits for input 0 (mi:0)\n'
        '  Add node "inc" at o:1/i:0 waits for input 0 (si:1)\n'
        "  frame 'o' at root has parked values for iterations [2]\n"
        "  frame 'i' at o:1 received 2 of 3 Enters")



def test_a_stall_report_names_each_missing_input_and_counts_the_missing_control_inputs() -> None:
    """The report of nodes left waiting gives, for each (in node order), every data input it still lacks
    (slot and producer) and how many of its control inputs have not arrived (those that did are not
    counted), separated by commas. In ``_gated_loop``'s stalled iteration 1, ``step`` holds its
    constant input and the control token of ``lim``, and lacks its Switch input and ``gate``'s token."""
    g, out = _gated_loop()
    with pytest.raises(tn.DeadFetchError) as e:
        run_graph(g, [out])
    msg = re.sub(r" \(created at [^)]*\)", "", str(e.value))
    assert msg.endswith(":\n"
                        '  Merge node "m" at loop:1 waits for input 0 (start:0), 1 control input(s)\n'
                        '  Less node "less" at loop:1 waits for input 0 (m:0)\n'
                        '  Add node "step" at loop:1 waits for input 0 (sw:1), 1 control input(s)'), msg


def test_a_node_made_ready_is_not_stranded_even_when_a_limit_stops_the_run_first() -> None:
    """``stranded()`` lists the nodes that received part of their inputs and can never fire; a node made
    ready has all it needs, so it is not among them, even when ``max_firings`` stops the run as it is
    about to fire (here the Add, the third firing of a run limited to two)."""
    from turnout.reference.executor import Interpreter, make_plan

    g = tn.Graph()
    with g.as_default():
        y = tn.add(tn.constant(1), tn.constant(2), name="y")
    it = Interpreter(make_plan(g, [y], set()), {}, {}, RunOptions(max_firings=2))
    with pytest.raises(tn.NonTerminationError, match='last: Add node "y"'):
        it.run()
    assert (y.node.id, ()) in it.inboxes and it.stranded() == []


def test_the_wall_clock_guard_reads_the_clock_once_per_1024_firings(monkeypatch: pytest.MonkeyPatch) -> None:
    """``max_seconds`` costs the interpreter's hot loop one clock read per 1024 firings (and one to set
    the deadline); with ``max_seconds=None`` it reads no clock at all."""
    from turnout.reference import executor

    reads = []
    real = executor.time.monotonic

    def counted() -> float:
        reads.append(1)
        return real()

    monkeypatch.setattr(executor.time, "monotonic", counted)
    g = tn.Graph()
    with g.as_default():
        (k,) = tn.while_loop(lambda k: k < 500, lambda k: k + 1, [tn.constant(0)])
    for budget in (100.0, None):
        reads.clear()
        r = run_graph(g, [k], options=RunOptions(max_seconds=budget))
        assert [int(v) for v in r.values] == [500]
        firings = r.stats["firings"]
        assert firings > 3 * 1024
        assert len(reads) == (0 if budget is None else 1 + firings // 1024), (budget, firings, len(reads))


def test_a_dead_fetch_is_reported_in_the_words_every_backend_uses() -> None:
    """A dead fetch raises DeadFetchError in the one message every backend gives
    (``errors.dead_fetch_message``); the reference adds, only when the run left nodes waiting, a note
    with the report of what waits (here a hand-built loop whose body reads a non-constant Enter, so
    iteration 1 stalls and the loop's Exit is released dead)."""
    g = tn.Graph()
    with g.as_default():
        _, taken = raw.switch(tn.constant(1.0), tn.constant(False))
        untaken = tn.identity(taken, name="untaken")
        m, _ = raw.merge([raw.enter(tn.constant(0.0), "f"), raw.BACK_EDGE])
        sf, st = raw.switch(m, raw.loop_cond(m < raw.enter(tn.constant(3.0), "f", is_constant=True)))
        raw.close_back_edge(m, raw.next_iteration(tn.add(st, raw.enter(tn.constant(1.0), "f", name="step"),
                                                         name="stalled")))
        out = raw.exit(sf, name="out")
    with pytest.raises(tn.DeadFetchError) as e:
        run_graph(g, [untaken])
    assert re.sub(r" \(created at [^)]*\)", "", str(e.value)) == (
        'fetched tensor untaken:0 is dead: Identity node "untaken" lies on a branch that was not taken in this run')
    with pytest.raises(tn.DeadFetchError) as e:
        run_graph(g, [out])
    assert re.sub(r" \(created at [^)]*\)", "", str(e.value)) == (
        'fetched tensor out:0 is dead: Exit node "out" lies on a branch that was not taken in this run; note that '
        "the run left nodes waiting for inputs that never came (a loop that ended because its next iteration "
        'stalled?):\n  Add node "stalled" at f:1 waits for input 1 (step:0)')


def test_a_run_over_its_memory_budget_is_stopped_by_name() -> None:
    """A run whose loop saves more for its gradient than ``RunOptions.memory_budget`` allows stops with
    ResourceExhaustedError that says who stopped it (the reference interpreter) and which loop; within
    the budget it runs and reports the bytes it saved."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        _, y = tn.while_loop(lambda i, v: i < 6, lambda i, v: (i + 1, tn.tanh(v)), [tn.constant(0), x], name="rnn")
        (gx,) = tn.gradients(tn.reduce_sum(y), [x])
    feed = {x: np.ones(4, np.float32)}
    r = run_graph(g, [gx], feed, RunOptions(memory_budget=1 << 20))
    assert 0 < r.stats["peak_saved_bytes"] == sum(r.stats["saved_bytes"].values())
    with pytest.raises(tn.ResourceExhaustedError, match=r'^reference interpreter: the saved values of loop "rnn"'):
        run_graph(g, [gx], feed, RunOptions(memory_budget=64))


def test_the_firing_counts_are_one_per_node_and_tag_and_sum_to_the_firings() -> None:
    """Exactly once: every node fires at most once at a tag, so a run's ``counts`` (per node name and
    tag) are all 1 and add up to its ``firings``; a loop's body node is counted at each iteration's tag,
    the last time dead (the iteration whose predicate was false still fires its body, on dead values)."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, v * 2.0), [tn.constant(0), tn.constant(1.0)])
    r = run_graph(g, [y], {n: 4})
    assert r.values[0] == 16.0
    assert set(r.counts.values()) == {1}
    assert sum(r.counts.values()) == r.stats["firings"]
    body = [tag for (name, tag) in r.counts if name.endswith("/body/Mul")]
    assert body == [(("while/frame0", k),) for k in range(5)], sorted(r.counts)


def test_the_reference_backend_explains_its_run_as_one_interpreter_step_with_its_slots() -> None:
    """``ReferenceBackend.explain`` (``Session.explain`` on the reference interpreter): one
    ``interpreter`` step saying how the graph's ops fire, under the backend's own name, and a note per
    recomputed loop on the checkpoint slots its next run gives (a first run's 64 of the 1000 its
    budget holds, then the 128 a run of 70 steps taught, learnt under the run's key). Kills the
    schedule's backend name, the step's words and the run's key mutated, which the
    campaign's own list (it holds no explain test of ``tests/test_explain.py``) let through."""
    from turnout.run_schedule import INTERPRETER_STEP

    g, x, gx = recomputed_tanh_loop(70, slots=1000)
    sess, feed = tn.Session(g), {x: np.ones(4, np.float32)}
    got = sess.explain(gx, feed)
    assert (got.backend, [(s.kind, s.what, s.device) for s in got.steps]) == (
        "reference", [("interpreter", INTERPRETER_STEP, None)])
    assert got.notes[0] == ("loop 'rnn' keeps at most 64 checkpoint slots of the 1000 its memory_budget holds "
                            "(a first run's 64; a longer run teaches more)")
    sess.run(gx, feed)  # (70 steps: the run's key learns 128)
    assert sess.explain(gx, feed).notes[0] == (
        "loop 'rnn' keeps at most 128 checkpoint slots of the 1000 its memory_budget holds (learnt from an earlier "
        "run's trip count; a longer run teaches more)")
