"""The small-step transition system (semantics/smallstep.py) and its exhaustive explorer (explore.py).

Closed-form programs, built by hand from the raw primitives and with the builders, whose values and
firing counts a person can check: values are right, every key (node, tag) fires at most once
([T3-Exactly-Once]), a loop with trip count k fires each loop Merge k+1 times and each body op live k
times, every scheduler agrees ([T1-Confluence]), and the explorer, which walks every interleaving,
finds exactly one outcome for well-formed programs and a counterexample for a Merge with two live
inputs ([W-Merge-Unique] broken).
"""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import turnout as tn
from turnout.frames import static_frames
from turnout.kernels import KERNELS
from turnout.primitives import PRIMITIVES
from turnout.semantics import explore as ex
from turnout.semantics import smallstep as ss

SCHEDULES = [("fifo", 0), ("lifo", 0)] + [("random", s) for s in range(10)]


# ---- helpers ------------------------------------------------------------------------------------------
def run_all(g: tn.Graph, fetches, feeds=None, **kw) -> ss.SmallStepResult:
    """Run under FIFO, LIFO and 10 random seeds; check they agree and fire each key at most once."""
    results = [ss.run(g, fetches, feeds, scheduler=s, seed=seed, **kw) for s, seed in SCHEDULES]
    first = results[0]
    for (s, seed), r in zip(SCHEDULES, results, strict=True):
        for a, b in zip(first.values, r.values, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"scheduler {s} seed {seed} disagrees with fifo")
        assert set(r.counts) == set(first.counts), f"{s}/{seed} fired a different set of keys"
        assert max(r.counts.values()) == 1, [k for k, v in r.counts.items() if v > 1]
    return first


def fired(r: ss.SmallStepResult, name: str) -> list[tuple[str, ss.Tag, bool]]:
    """(rule, tag, dead) of every step of the node (or frame) called ``name``."""
    return [(rule, tag, dead) for rule, n, tag, dead in r.firings if n == name]


def live_count(r: ss.SmallStepResult, name: str) -> int:
    return sum(1 for _, _, dead in fired(r, name) if not dead)


def raw_counting_loop(limit: int, parallel_iterations: int = 10, start: int = 0):
    """i = start; while i < limit: i = i + 1 -- by hand, with named nodes."""
    g = tn.Graph()
    with g.as_default():
        pi = parallel_iterations
        e = tn.raw.enter(tn.constant(start), "L", parallel_iterations=pi, name="enter")
        lim = tn.raw.enter(tn.constant(limit), "L", is_constant=True, parallel_iterations=pi, name="lim")
        one = tn.raw.enter(tn.constant(1), "L", is_constant=True, parallel_iterations=pi, name="one")
        m, _ = tn.raw.merge([e, tn.raw.BACK_EDGE], name="merge")
        p = tn.raw.loop_cond(tn.less(m, lim, name="less"), name="loop_cond")
        f, t = tn.raw.switch(m, p, name="switch")
        tn.raw.close_back_edge(m, tn.raw.next_iteration(tn.add(t, one, name="inc"), name="next"))
        y = tn.raw.exit(f, name="exit")
    return g, y


def replay(g: tn.Graph, fetches, run: list[ss.Firing]) -> tuple:
    """Fire a counterexample's run step by step; each step must be enabled where it is taken."""
    c = ss.initial(g, fetches)
    for f in run:
        assert f in ss.enabled(c), f"{f.rule} {f.node} is not enabled where the run takes it"
        c = ss.fire(c, f)
    assert ss.is_quiescent(c)
    return ex.outcome(c)


# ---- raw primitives by hand ----------------------------------------------------------------------------
@pytest.mark.parametrize("pi", [1, 2, 10])
def test_raw_loop_counts_to_five(pi):
    g, y = raw_counting_loop(5, pi)
    r = run_all(g, [y])
    assert int(r.values[0]) == 5
    # trip count 5: the loop Merge fires live at iterations 0..5, the body op live at 0..4 and dead at 5
    merge = fired(r, "merge")
    assert sorted(tag[-1][1] for _, tag, _ in merge) == [0, 1, 2, 3, 4, 5]
    assert all(rule == "E-Merge-Live" for rule, _, _ in merge)
    assert live_count(r, "inc") == 5 and len(fired(r, "inc")) == 6
    nexts = Counter(rule for rule, _, _ in fired(r, "next"))
    assert nexts["E-Next-Live"] == 5 and nexts["E-Next-Dead"] == 1  # a parked value is delivered once too
    assert sorted(tag[-1][1] for name, tag in r.counts if name == "next") == [0, 1, 2, 3, 4, 5]
    exits = Counter(rule for rule, _, _ in fired(r, "exit"))
    assert exits == Counter({"E-Exit-Dead": 5, "E-Exit-Live": 1})
    # the live Exit fires at the last iteration and delivers at the root tag
    assert [tag for rule, tag, _ in fired(r, "exit") if rule == "E-Exit-Live"] == [(("L", 5),)]
    # six iterations start and retire, then the instance completes once
    frame_steps = Counter(rule for rule, _, _ in fired(r, "L"))
    assert frame_steps == Counter({"E-Iter-Retire": 6, "E-Frame-Done": 1})
    # each invariant reaches each of the six iterations exactly once: the Less at every iteration
    assert sorted(tag[-1][1] for _, tag, _ in fired(r, "less")) == [0, 1, 2, 3, 4, 5]


def test_parallel_iterations_one_parks_every_next_iteration_and_ten_parks_none():
    """With N=1 iteration k+1 lies outside the window until k retires, so every live NextIteration is
    parked ([E-Next-Park]) and delivered from Park; with N=10 and 5 trips nothing is parked."""
    g1, y1 = raw_counting_loop(5, 1)
    g10, y10 = raw_counting_loop(5, 10)
    r1 = ss.run(g1, [y1])
    r10 = ss.run(g10, [y10])
    assert int(r1.values[0]) == int(r10.values[0]) == 5
    assert Counter(rule for rule, _, _ in fired(r1, "next"))["E-Next-Park"] == 5
    assert Counter(rule for rule, _, _ in fired(r10, "next"))["E-Next-Park"] == 0


@pytest.mark.parametrize("pi", [1, 2, 3])
@pytest.mark.parametrize("retire", ["eagerly", "lazily"])
def test_window_never_holds_more_than_parallel_iterations(pi, retire):
    """Stepping by hand: at every configuration each instance has its started, unretired iterations
    inside [o, o + N). A scheduler that retires iterations only when nothing else can fire fills the
    window to exactly N; one that retires at once never needs more than two."""
    g, y = raw_counting_loop(6, pi)
    c = ss.initial(g, [y])
    widest = 0
    while en := ss.enabled(c):
        steps = [f for f in en if f.rule == "E-Iter-Retire"]
        others = [f for f in en if f.rule != "E-Iter-Retire"]
        c = ss.fire(c, (steps + others if retire == "eagerly" else others + steps)[0])
        for rec in c.instances.values():
            active = [k for k in rec.started if k >= rec.oldest]
            assert all(k < rec.oldest + rec.window for k in active)
            widest = max(widest, len(active))
    assert int(ss.outputs(c)[0]) == 6
    assert widest == (pi if retire == "lazily" else min(pi, 2))


def test_raw_switch_merge_with_a_dead_branch():
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        pred = tn.placeholder(tn.bool, shape=[], name="pred")
        f, t = tn.raw.switch(x, pred, name="switch")
        doubled = tn.multiply(t, 2.0, name="double")  # the constant is a root-frame source
        shifted = tn.add(f, 100.0, name="shift")
        m, idx = tn.raw.merge([shifted, doubled], name="merge")
    r = run_all(g, [m, idx], {x: 3.0, pred: True})
    assert float(r.values[0]) == 6.0 and int(r.values[1]) == 1 and r.values[1].dtype == np.int32
    assert fired(r, "shift") == [("E-Op-Dead", (), True)]
    assert fired(r, "double") == [("E-Op", (), False)]
    assert fired(r, "merge") == [("E-Merge-Live", (), False)]
    r = run_all(g, [m, idx], {x: 3.0, pred: False})
    assert float(r.values[0]) == 103.0 and int(r.values[1]) == 0
    assert fired(r, "double") == [("E-Op-Dead", (), True)]


def test_merge_with_only_dead_inputs_fires_dead_and_a_dead_control_input_kills_an_op():
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(1.0)
        f, t = tn.raw.switch(x, tn.constant(True), name="switch")
        m, _ = tn.raw.merge([f, tn.negative(f, name="neg")], name="merge")  # both inputs dead
        with tn.control_dependencies([tn.identity(f, name="pivot_f")]):
            c = tn.constant(5.0, name="guarded")  # control input dead: the constant is dead too
        out, _ = tn.raw.merge([m, t], name="out")
    r = run_all(g, [out])
    assert float(r.values[0]) == 1.0
    assert fired(r, "merge") == [("E-Merge-AllDead", (), True)]
    with pytest.raises(tn.DeadFetchError, match="guarded"):
        ss.run(g, [c])


def test_fetching_a_dead_tensor_is_an_error():
    g = tn.Graph()
    with g.as_default():
        f, t = tn.raw.switch(tn.constant(1.0), tn.constant(True), name="switch")
    assert float(ss.run(g, [t]).values[0]) == 1.0
    with pytest.raises(tn.DeadFetchError, match="switch:0"):
        ss.run(g, [f])


def test_raw_loop_entered_dead_ends_with_dead_exits_not_a_hang():
    """A loop whose Enter receives a dead token ([E-Merge-DeadEnter]): every node of the instance
    fires once, dead, at iteration 0, the Exit is remembered and released dead by [E-Frame-Done]."""
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(7)
        f, t = tn.raw.switch(x, tn.constant(False), name="route")  # t is dead
        e = tn.raw.enter(t, "L", name="enter")
        one = tn.raw.enter(tn.constant(1), "L", is_constant=True, name="one")
        lim = tn.raw.enter(tn.constant(10), "L", is_constant=True, name="lim")
        m, _ = tn.raw.merge([e, tn.raw.BACK_EDGE], name="merge")
        p = tn.raw.loop_cond(tn.less(m, lim), name="loop_cond")
        sf, st = tn.raw.switch(m, p, name="switch")
        tn.raw.close_back_edge(m, tn.raw.next_iteration(tn.add(st, one, name="inc"), name="next"))
        y = tn.raw.exit(sf, name="exit")
        joined, idx = tn.raw.merge([y, tn.negative(f, name="other")], name="join")
    r = run_all(g, [joined, idx])
    assert int(r.values[0]) == -7 and int(r.values[1]) == 1
    assert fired(r, "merge") == [("E-Merge-DeadEnter", (("L", 0),), True)]
    for name in ("loop_cond", "switch", "inc"):
        assert [(tag, dead) for _, tag, dead in fired(r, name)] == [((("L", 0),), True)]
    assert fired(r, "next") == [("E-Next-Dead", (("L", 0),), True)]
    assert fired(r, "exit") == [("E-Exit-Dead", (("L", 0),), True)]
    assert [rule for rule, _, _ in fired(r, "L")] == ["E-Iter-Retire", "E-Frame-Done"]
    with pytest.raises(tn.DeadFetchError, match="exit"):
        ss.run(g, [y])


def test_a_missing_input_deadlocks_and_the_report_names_the_blocked_node():
    """A Recv whose Send is in no graph never receives a token, so its consumer waits forever: the run
    is quiescent with the fetch missing, and the report names the blocked consumer and its input."""
    g = tn.Graph()
    with g.as_default():
        r = g.create_node("Recv", [], {"edge": "e", "src_device": "a", "dst_device": "b", "credit": 1,
                                       "control": False, "dtype": "int32", "shape": []}, name="lone_recv")
        z = tn.add(r.outputs[0], tn.constant(5), name="consumer")
    blocked = r'(?s)Add node "consumer".*at tag \(\).*missing: lone_recv:0'
    with pytest.raises(tn.DeadlockError, match=blocked):
        ss.run(g, [z])
    # every interleaving gets stuck the same way, and the explorer reports it
    ce = ex.check_confluence(g, [z])
    assert ce is not None and ce.kind == "stuck" and "consumer" in ce.outcome_a[1]


def test_an_exit_fed_by_a_next_iteration_is_refused_before_it_could_deadlock():
    """An Exit fed by a NextIteration would never receive a token (its consumer would wait forever):
    the small-step system refuses the graph before it runs, as every backend does ([W-Next-In-Frame])."""
    g = tn.Graph()
    with g.as_default():
        e = tn.raw.enter(tn.constant(0), "L")
        lim = tn.raw.enter(tn.constant(0), "L", is_constant=True)
        one = tn.raw.enter(tn.constant(1), "L", is_constant=True)
        m, _ = tn.raw.merge([e, tn.raw.BACK_EDGE])
        f, t = tn.raw.switch(m, tn.raw.loop_cond(tn.less(m, lim)))
        nxt = tn.raw.next_iteration(tn.add(t, one))
        tn.raw.close_back_edge(m, nxt)
        z = tn.add(tn.raw.exit(nxt, name="stray_exit"), tn.constant(5), name="consumer")
    for start in (ss.run, ex.check_confluence):
        with pytest.raises(tn.ValidationError, match="stray_exit") as info:
            start(g, [z])
        assert info.value.rule == "W-Next-In-Frame"


def test_unfed_placeholder_unbound_back_edge_and_fetch_inside_a_loop_are_rejected():
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="needed")
        y = x + 1.0
    with pytest.raises(tn.ExecutionError, match="needed"):
        ss.run(g, [y])
    g = tn.Graph()
    with g.as_default():
        m, _ = tn.raw.merge([tn.raw.enter(tn.constant(0), "L"), tn.raw.BACK_EDGE], name="open_merge")
    with pytest.raises(tn.ValidationError, match=r"W-Merge-Bound.*open_merge"):
        ss.run(g, [tn.raw.exit(m)])
    g, _ = raw_counting_loop(3)
    with pytest.raises(tn.ValidationError, match="W-Fetch-Root"):
        ss.run(g, [g.tensor("merge:0")])


def test_a_kernel_failure_names_the_node_and_its_tag():
    g, _ = raw_counting_loop(3)
    with g.as_default():
        t = g.node("switch").outputs[1]
        with g._no_capture():
            zero = tn.raw.enter(tn.constant(0), "L", is_constant=True)
        bad = tn.raw.exit(tn.divide(t, zero, name="bad_div"))
    with pytest.raises(tn.KernelError, match=r"bad_div.*L\[0\]"):
        ss.run(g, [bad])


# ---- builder-made programs -------------------------------------------------------------------------------
def _loop_merges(g: tn.Graph) -> list[tn.Node]:
    frames = static_frames(g).node_frame
    return [n for n in g.nodes if n.op == "Merge" and frames[n.id]]


@pytest.mark.parametrize("k", [0, 1, 4])
def test_while_loop_trip_count_k_fires_merges_k_plus_1_times_and_body_ops_k_times(k):
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, shape=[], name="n")
        i, acc = tn.while_loop(lambda i, acc: i < n,
                               lambda i, acc: (i + 1, tn.add(acc, i * 10, name="accumulate")),
                               [tn.constant(0), tn.constant(0)], parallel_iterations=2)
    r = run_all(g, [i, acc], {n: k})
    assert int(r.values[0]) == k and int(r.values[1]) == 10 * k * (k - 1) // 2
    merges = _loop_merges(g)
    assert len(merges) == 3  # the builder's counter, i and acc
    for m in merges:
        assert live_count(r, m.name) == k + 1 and len(fired(r, m.name)) == k + 1
    body = [nd.name for nd in g.nodes if nd.name.endswith("accumulate")]
    assert len(body) == 1
    assert live_count(r, body[0]) == k and len(fired(r, body[0])) == k + 1


def test_nested_loops_and_a_cond_in_the_body_agree_under_every_scheduler():
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, shape=[], name="x")

        def outer_body(i, acc):
            j, s = tn.while_loop(lambda j, s: j < i, lambda j, s: (j + 1, s + j),
                                 [tn.constant(0), tn.constant(0)], parallel_iterations=2)
            odd = tn.equal(tn.mod(i, 2), 1)
            return i + 1, tn.cond(odd, lambda: acc + s, lambda: acc - 1)

        i, acc = tn.while_loop(lambda i, acc: i < x, outer_body, [tn.constant(0), tn.constant(0)],
                               parallel_iterations=3)
    # i = 0..4: odd i adds sum(range(i)) (i=1: 0, i=3: 3), even i subtracts 1 (three times)
    r = run_all(g, [i, acc], {x: 5})
    assert int(r.values[0]) == 5 and int(r.values[1]) == 0 + 3 - 3
    # the inner loop runs i times in outer iteration i: its instances are keyed by the outer tag
    inner_merge = max(_loop_merges(g), key=lambda n: len(static_frames(g).node_frame[n.id]))
    # (live) and, at outer iteration 5, where the outer body is dead, once dead at its iteration 0
    steps = fired(r, inner_merge.name)
    live = Counter(tag[0][1] for _, tag, dead in steps if not dead)
    assert live == Counter({0: 1, 1: 2, 2: 3, 3: 4, 4: 5})
    dead = [(rule, tag[0][1], tag[1][1]) for rule, tag, dead in steps if dead]
    assert dead == [("E-Merge-DeadEnter", 5, 0)]


def test_loop_inside_an_untaken_cond_branch_dies_instead_of_hanging():
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, shape=[], name="x")
        z = tn.cond(x > 2, lambda: tn.while_loop(lambda k: k < 100, lambda k: k + 1, [x])[0], lambda: x * 10)
    assert int(run_all(g, [z], {x: 5}).values[0]) == 100
    r = run_all(g, [z], {x: 2})
    assert int(r.values[0]) == 20
    for m in _loop_merges(g):  # every loop Merge fires once, dead, at iteration 0
        assert fired(r, m.name) == [("E-Merge-DeadEnter", fired(r, m.name)[0][1], True)]
        assert fired(r, m.name)[0][1][-1][1] == 0
    assert sum(1 for rule, _, _, _ in r.firings if rule == "E-Frame-Done") == 1
    assert not [s for s in ss.stranded(r.final) if not s[3].is_dead]  # [T4-Quiescence]: no live token left


def test_parallel_iterations_1_and_10_give_the_same_values():
    def build(pi):
        g = tn.Graph()
        with g.as_default():
            i, y = tn.while_loop(lambda i, y: i < 6, lambda i, y: (i + 1, y * 2.0 + 1.0),
                                 [tn.constant(0), tn.constant(1.0)], parallel_iterations=pi)
        return g, [i, y]

    (g1, f1), (g10, f10) = build(1), build(10)
    r1, r10 = run_all(g1, f1), run_all(g10, f10)
    assert [float(v) for v in r1.values] == [float(v) for v in r10.values] == [6.0, 127.0]
    assert len(r1.counts) == len(r10.counts)  # the same keys fire, whatever the window


def test_fifty_iterations_take_firings_linear_in_the_trip_count():
    """Each iteration costs the same fixed number of firings (no per-iteration work that grows with the
    iteration number); speed itself is a benchmark's business, not a unit test's."""

    def firings(n: int) -> tuple[int, list[int]]:
        g = tn.Graph()
        with g.as_default():
            i, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y + 2),
                                 [tn.constant(0), tn.constant(1)])
        r = ss.run(g, [i, y])
        return (r.firings if isinstance(r.firings, int) else len(r.firings)), [int(v) for v in r.values]

    f10, v10 = firings(10)
    f11, _ = firings(11)
    f50, v50 = firings(50)
    assert v10 == [10, 21] and v50 == [50, 101]
    assert f11 > f10 and f50 - f10 == 40 * (f11 - f10)


def test_variables_are_read_and_written_in_dependency_order():
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(1.0, name="v")

        def body(i):
            with tn.control_dependencies([v.assign_add(2.0)]):
                return (i + 1,)

        (i,) = tn.while_loop(lambda i: i < 3, body, [tn.constant(0)])
        with tn.control_dependencies([i]):
            after = v.read()
    r = run_all(g, [i, after])
    assert float(r.values[1]) == 7.0 and float(r.variables["v"]) == 7.0
    r = ss.run(g, [i, after], variables={"v": np.float32(10.0)})
    assert float(r.values[1]) == 16.0


def test_stacks_are_keyed_by_index_not_by_push_order():
    g = tn.Graph()
    with g.as_default():
        h = g.create_node("StackNew", [], {"elem_dtype": "float32", "elem_shape": []}).outputs[0]
        p0 = g.create_node("StackPush", [h, tn.constant([0]), tn.constant(5.0)])
        p1 = g.create_node("StackPush", [h, tn.constant([1]), tn.constant(7.0)])
        pops = [g.create_node("StackPop", [h, tn.constant([k])], {"dtype": "float32", "shape": []},
                              control_inputs=[p0, p1]).outputs[0] for k in (0, 1)]
    r = run_all(g, pops)
    assert [float(v) for v in r.values] == [5.0, 7.0]


def test_a_fed_tensor_is_cut_out_of_the_graph():
    """Feeding replaces a root-frame tensor: its producer does not run for it, so a Placeholder behind
    it need not be fed, and a fed Placeholder never fires."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, shape=[], name="x")
        y = tn.multiply(x, 2, name="double")
        z = tn.add(y, 1, name="inc")
    r = ss.run(g, [z, y], {y: 10})
    assert [int(v) for v in r.values] == [11, 10]
    assert {name for name, _ in r.counts} == {"inc", "Const_1"}
    r = ss.run(g, [z], {"x:0": 4})
    assert int(r.values[0]) == 9 and ("x", ()) not in r.counts and ("double", ()) in r.counts
    with pytest.raises(tn.FeedError, match="x"):
        ss.run(g, [z])


def test_the_backend_adapter_runs_under_a_session_and_keeps_variables(monkeypatch):
    from turnout.session import BACKENDS

    monkeypatch.setitem(BACKENDS, "smallstep", "turnout.semantics.smallstep:SmallStepBackend")
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(1.0, name="v")
        x = tn.placeholder(tn.float32, shape=[], name="x")
        total = v.assign_add(x)
    sess = tn.Session(g, backend="smallstep")
    assert [float(sess.run(total, {x: 2.0})) for _ in range(3)] == [3.0, 5.0, 7.0]
    assert float(sess.variables["v"]) == 7.0
    assert sess.last_result.counts is not None and max(sess.last_result.counts.values()) == 1


# ---- the state space: exhaustive exploration -------------------------------------------------------------
def test_exploring_every_interleaving_of_a_cond_finds_one_outcome():
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        z = tn.cond(x > 1.0, lambda: x - 1.0, lambda: x * 2.0)
    r = ex.explore(g, [z], {x: 3.0})
    assert r.complete and not r.stuck_states
    assert r.final_outputs == {(("live", ("float32", (), 2.0)),)}
    assert r.n_states > 10  # the interleavings really were walked, not one run
    assert ex.check_confluence(g, [z], {x: 0.5}) is None


@pytest.mark.parametrize("build", ["raw", "builder"])
def test_exploring_a_two_iteration_loop_with_two_parallel_iterations_finds_one_outcome(build):
    if build == "raw":
        g, y = raw_counting_loop(2, parallel_iterations=2)
        fetches = [y]
    else:
        g = tn.Graph()
        with g.as_default():
            fetches = list(tn.while_loop(lambda i, s: i < 2, lambda i, s: (i + 1, s + i),
                                         [tn.constant(0), tn.constant(10)], parallel_iterations=2))
    r = ex.explore(g, fetches)
    assert r.complete and not r.stuck_states
    assert len(r.final_outputs) == 1
    (outcome,) = r.final_outputs
    assert outcome[0] == ("live", ("int32", (), 2))
    if build == "builder":
        assert outcome[1] == ("live", ("int32", (), 11))
    # iterations overlap: some reachable configuration has two iterations started and unretired
    assert r.n_states > 100


def test_a_merge_with_two_live_inputs_is_reported_with_a_counterexample():
    """Merge(const 1, const 2) breaks [W-Merge-Unique]: without [E-Merge-Conflict] the value it forwards
    would depend on the order the constants fire in. Every run now ends in MergeConflictError (whichever
    constant comes first), the explorer reports it with the run that reaches it, and the plain
    schedulers agree."""
    g = tn.Graph()
    with g.as_default():
        m, idx = tn.raw.merge([tn.constant(1, name="one"), tn.constant(2, name="two")], name="racy")
    r = ex.explore(g, [m, idx])
    assert r.complete and len(r.final_outputs) == 1  # one outcome under every schedule: the error
    ce = ex.check_confluence(g, [m, idx])
    assert ce is not None and ce.kind == "merge-conflict"
    assert ce.outcome_a[0][:2] == ("error", "MergeConflictError")
    assert "E-Merge-Conflict" in str(ce) and "racy" in str(ce)
    assert ce.run_a[-1].rule == "E-Merge-Conflict"
    for s in ("fifo", "lifo"):
        with pytest.raises(tn.MergeConflictError, match=r"\[E-Merge-Conflict\].*racy"):
            ss.run(g, [m], scheduler=s)


def test_exploration_that_hits_the_state_cap_says_so():
    g, y = raw_counting_loop(3, parallel_iterations=3)
    r = ex.explore(g, [y], max_states=20)
    assert not r.complete
    with pytest.raises(tn.NonTerminationError, match="max_states=20"):
        ex.check_confluence(g, [y], max_states=20)


# ---- the configuration is a value -------------------------------------------------------------------------
def test_fire_is_pure_and_configurations_compare_by_value():
    g, y = raw_counting_loop(2)
    c0 = ss.initial(g, [y])
    before = hash(c0)
    f = ss.enabled(c0)[0]
    c1, c1_again = ss.fire(c0, f), ss.fire(c0, f)
    assert c1 == c1_again and hash(c1) == hash(c1_again) and c1 != c0
    assert hash(c0) == hash(ss.initial(g, [y])) == before and not c0.fired
    with pytest.raises(ValueError, match="already fired"):
        ss.fire(c1, f)


def test_non_terminating_loop_hits_max_steps():
    g, y = raw_counting_loop(10, start=20)  # i < 10 fails at once: terminates
    assert int(ss.run(g, [y]).values[0]) == 20
    g = tn.Graph()
    with g.as_default():
        (i,) = tn.while_loop(lambda i: i >= 0, lambda i: (i + 1,), [tn.constant(0)])
    with pytest.raises(tn.NonTerminationError):
        ss.run(g, [i], max_steps=500)


# ---- coverage of the rule tables --------------------------------------------------------------------------
def test_every_rule_implemented_is_named_in_the_spec_and_every_primitive_is_handled():
    spec = Path(__file__).resolve().parents[1] / "specs" / "rules.toml"
    names = {r["name"] for r in tomllib.loads(spec.read_text())["rule"]}
    assert ss.RULES <= names
    assert {n for n in names if n.startswith("E-")} <= ss.RULES
    for p in PRIMITIVES.values():
        handled = p.name in ss._ENABLE or p.name in ss._LIVE_OPS or p.name in KERNELS
        assert handled, f"primitive {p.name} has no small-step rule"


def test_run_refuses_an_ill_typed_graph_with_the_validators_error() -> None:
    """``smallstep.run`` and ``initial`` check every well-formedness rule, as every backend does: a node
    that records another number of outputs than its op makes ([W-Types]) is a ``ValidationError``
    naming it, never a raw error from the rules' plumbing when it fires."""
    from turnout.graph import TensorSpec

    g = tn.Graph()
    with g.as_default():
        a = tn.constant(1.0)
        two = g.create_node("Identity", [a], name="two_outputs",
                            specs=[TensorSpec(tn.float32, ()), TensorSpec(tn.float32, ())])
    for start in (ss.run, ss.initial):
        with pytest.raises(tn.ValidationError, match="two_outputs") as e:
            start(g, [two.outputs[0]])
        assert e.value.rule == "W-Types"


def test_the_variable_store_holds_a_copy_of_what_was_assigned() -> None:
    """[E-Var-Assign] stores sigma(x) := v by value: the store never shares memory with the constant
    or the fed array assigned, so changing the run's returned store (or the fed array) later leaves
    the graph's constants and the next run as they were, as on the reference interpreter."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.zeros(3, np.float32), name="v")
        c = tn.constant(np.array([1.0, 2.0, 3.0], np.float32), name="c")
        x = tn.placeholder(tn.float32, [3], name="x")
        from_const, from_feed = v.assign(c), v.assign(x)
    fed = np.array([4.0, 5.0, 6.0], np.float32)
    r = ss.run(g, [from_const], variables={"v": np.zeros(3, np.float32)})
    r.variables["v"][:] = -1.0
    assert ss.run(g, [c]).values[0].tolist() == [1.0, 2.0, 3.0]
    r = ss.run(g, [from_feed], {x: fed}, variables={"v": np.zeros(3, np.float32)})
    fed[:] = 0.0
    assert r.variables["v"].tolist() == [4.0, 5.0, 6.0]


def test_a_runaway_loop_is_named_by_its_frames_first_enter_on_every_backend() -> None:
    """A loop stopped by ``max_iterations`` is named by the frame's Enter of lowest id, whichever Enter
    arrives first: here the second loop variable's Enter (its value is a constant) fires long before
    the first's (behind a chain of adds), and the reference interpreter, the small-step system and the
    fast backend all name the first; the two oracles word for word (the fast backend's message, made
    when the loop is traced, names neither the instance nor the body number)."""
    from turnout.errors import describe_node

    g = tn.Graph()
    with g.as_default():
        slow = tn.constant(1.0)
        for _ in range(6):
            slow = slow + 1.0
        a, b = tn.while_loop(lambda a, b: b > -1, lambda a, b: [a, b + 1], [slow, tn.constant(0)])
    first = min((n for n in g.nodes if n.op == "Enter"), key=lambda n: n.id)
    messages = []
    for backend in ("reference", "smallstep", "fast"):
        with pytest.raises(tn.NonTerminationError) as e:
            tn.Session(g, backend=backend).run([a, b], max_iterations=3)
        messages.append(str(e.value))
    assert all(f"entered by {describe_node(first)})" in m for m in messages)
    assert messages[1] == messages[0]
