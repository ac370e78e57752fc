"""Tests that kill what mutation testing found surviving in the reference interpreter.

``python tools/mutation.py --module reference/rules.py --module reference/executor.py`` mutates the
oracle one expression at a time; each test here fails under mutants that the rest of the suite let
through (docs/checking.rst gives the scores). They check behaviour a user sees: values, feeds, the
store of Variables, the words of each error and the op it names, and the order a scheduler picks.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from graphs import recomputed_tanh_loop

import turnout as tn
from turnout import raw
from turnout.reference.executor import ReferenceBackend, run_graph
from turnout.reference.scheduler import ReadyQueue
from turnout.reference.trace import fmt_tag
from turnout.session import RunOptions


# ---- feeds ------------------------------------------------------------------------------------------
def test_run_graph_uses_its_feeds_and_options() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        y = x * 2.0 + 1.0
    r = run_graph(g, [y], {x: np.float32(3.0)}, RunOptions(trace=True))
    assert r.values == [np.float32(7.0)]
    assert r.trace is not None and len(r.trace) == r.stats["firings"] > 0
    assert run_graph(g, [y], {x: np.float32(-1.0)}).values == [np.float32(-1.0)]
    with pytest.raises(tn.FeedError, match="x.*must be fed"):
        run_graph(g, [y])


def test_a_fed_tensor_is_fetched_as_fed_and_its_producer_does_not_run() -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.constant(1.0, name="a")
        b = tn.add(a, 1.0, name="b")
        c = tn.multiply(b, 3.0, name="c")
    sess = tn.Session(g)
    assert sess.run([b, c], {b: np.float32(10.0)}, options=RunOptions(trace=True)) == [10.0, 30.0]
    assert sess.last_result is not None and sess.last_result.trace is not None
    fired = {e.node for e in sess.last_result.trace.events}
    assert "c" in fired and not fired & {"a", "b"}


def test_feeding_a_tensor_inside_a_loop_frame_is_a_feed_error() -> None:
    g = tn.Graph()
    with g.as_default():
        inside: list[tn.Tensor] = []

        def body(i: Any) -> Any:
            j = i + 1
            inside.append(j)
            return j

        r = tn.while_loop(lambda i: i < 3, body, [tn.constant(0)])
    with pytest.raises(tn.FeedError, match="inside a loop frame"):
        tn.Session(g).run(r, {inside[0]: np.int32(1)})


def test_the_reference_backend_takes_no_options() -> None:
    with pytest.raises(TypeError, match="takes no options.*bogus"):
        ReferenceBackend(tn.Graph(), bogus=1)


# ---- Variables: a fetched value never aliases the store ----------------------------------------------
def test_fetched_variable_values_are_copies_of_the_store() -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.array([1.0, 2.0], np.float32), name="v")
        read = v.read()
        bump = v.assign_add(np.array([1.0, 1.0], np.float32))
    sess = tn.Session(g)
    got = sess.run(read)
    got[...] = 99.0  # a caller scribbling on a fetched array must not change the Variable
    np.testing.assert_array_equal(sess.run(read), [1.0, 2.0])
    out = sess.run(bump)
    out[...] = -5.0
    np.testing.assert_array_equal(sess.run(read), [2.0, 3.0])
    np.testing.assert_array_equal(sess.variables["v"], [2.0, 3.0])
    # nor does the store share memory with the graph's initial value
    assert not np.shares_memory(sess.variables["v"], g.variables["v"].attrs["initial_value"])
    np.testing.assert_array_equal(tn.Session(g).run(read), [1.0, 2.0])


def test_assign_sub_and_assign_write_the_store() -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(10, name="v")
        sub = v.assign_sub(3)
        put = v.assign(4)
    sess = tn.Session(g)
    assert sess.run(sub) == 7
    assert sess.run(sub) == 4
    assert sess.run(put) == 4 and sess.variables["v"] == 4
    assert sess.variables["v"].dtype == np.int32


def test_assigning_a_run_time_shape_mismatch_names_the_op() -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.zeros(2, np.float32), name="v")
        x = tn.placeholder(tn.float32, shape=None, name="x")
        a = v.assign(x, name="bad_assign")
    with pytest.raises(tn.ExecutionError, match=r"bad_assign.*shape \(3,\).*shape \(2,\)"):
        tn.Session(g).run(a, {x: np.zeros(3, np.float32)})


# ---- stacks --------------------------------------------------------------------------------------------
def _stack_graph(push_at: int, pop_at: int) -> tuple[tn.Graph, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        s = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []}, name="stk")
        push = g.create_node("StackPush", [s.outputs[0], tn.constant([push_at]), tn.constant(5.0)], name="psh")
        with g.control_dependencies([push]):
            pop = g.create_node("StackPop", [s.outputs[0], tn.constant([pop_at])], {"dtype": "float32", "shape": []},
                                name="pop_it").outputs[0]
    return g, pop


def test_stack_pop_returns_what_was_pushed_under_its_index() -> None:
    g, pop = _stack_graph(2, 2)
    assert tn.Session(g).run(pop) == 5.0


def test_two_stacks_of_one_run_keep_their_values_apart() -> None:
    """[E-Stack-Push] / [E-Stack-Pop] act on the stack their handle names, and each StackNew makes its own
    stack (its handle is derived from its node and tag): two stacks pushed under the same index give
    back, each, the value pushed to it."""
    g = tn.Graph()
    with g.as_default():
        pops = []
        for name, value in (("a", 5.0), ("b", 7.0)):
            s = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []}, name=f"stk_{name}")
            push = g.create_node("StackPush", [s.outputs[0], tn.constant([0]), tn.constant(value)], name=f"psh_{name}")
            pops.append((s, push))
        outs = []
        with g.control_dependencies([push for _, push in pops]):
            for s, _ in pops:
                outs.append(g.create_node("StackPop", [s.outputs[0], tn.constant([0])],
                                          {"dtype": "float32", "shape": []}).outputs[0])
    assert [float(v) for v in tn.Session(g).run(outs)] == [5.0, 7.0]


def test_stack_pop_of_an_index_never_pushed_names_the_op_and_index() -> None:
    g, pop = _stack_graph(2, 1)
    with pytest.raises(tn.ExecutionError, match=r"pop_it.*no value was pushed for index \(1,\)"):
        tn.Session(g).run(pop)


# ---- Merge's value index, Switch's two outputs -----------------------------------------------------------
@pytest.mark.parametrize("pred, want", [(True, 1), (False, 0)])
def test_merge_value_index_is_the_slot_of_the_live_input(pred: bool, want: int) -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")
        sf, st = raw.switch(tn.constant(4.0), p)
        value, index = raw.merge([sf * 10.0, st + 1.0])
    v, i = tn.Session(g).run([value, index], {p: np.bool_(pred)})
    assert i == want and i.dtype == np.int32
    assert v == (5.0 if pred else 40.0)


def test_switch_on_an_integer_predicate_takes_the_true_side_for_nonzero() -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")
        sf, st = raw.switch(tn.constant(4.0), p)
    sess = tn.Session(g)
    assert sess.run(st, {p: np.bool_(True)}) == 4.0
    with pytest.raises(tn.DeadFetchError, match="not taken"):
        sess.run(sf, {p: np.bool_(True)})
    assert sess.run(sf, {p: np.bool_(False)}) == 4.0


# ---- errors name what they are about -----------------------------------------------------------------
def _stalled_loop(control: bool) -> tuple[tn.Graph, tn.Tensor]:
    """A loop whose body reads a NON-constant Enter (delivered to iteration 0 only): iteration 1 waits
    forever, for a data input (``control=False``) or for a control input."""
    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([raw.enter(tn.constant(0.0), "f"), raw.BACK_EDGE])
        p = raw.loop_cond(m < raw.enter(tn.constant(3.0), "f", is_constant=True))
        sf, st = raw.switch(m, p)
        step = raw.enter(tn.constant(1.0), "f", name="step")
        if control:
            one = raw.enter(tn.constant(1.0), "f", is_constant=True)
            with g.control_dependencies([step]):
                nxt = tn.add(st, one, name="stalled")
        else:
            nxt = tn.add(st, step, name="stalled")
        raw.close_back_edge(m, raw.next_iteration(nxt))
        out = raw.exit(sf, name="out")
    return g, out


def test_deadlock_report_says_which_input_is_missing() -> None:
    # the loop's Exit fired dead at iteration 0 and iteration 1 stalled: a dead fetch whose message
    # carries the report of what was left waiting
    g, out = _stalled_loop(control=False)
    with pytest.raises(tn.DeadFetchError) as e:
        tn.Session(g).run(out)
    msg = str(e.value)
    assert "waiting for inputs that never came" in msg
    assert "stalled" in msg and "at f:1 waits for input 1 (step:0)" in msg
    assert "control input" not in msg


def test_deadlock_report_counts_missing_control_inputs() -> None:
    g, out = _stalled_loop(control=True)
    with pytest.raises(tn.DeadFetchError) as e:
        tn.Session(g).run(out)
    msg = str(e.value)
    assert "at f:1 waits for 1 control input(s)" in msg
    assert "waits for input" not in msg


def test_dead_fetch_error_names_the_tensor_and_its_node() -> None:
    g = tn.Graph()
    with g.as_default():
        sf, st = raw.switch(tn.constant(1.0), tn.constant(True))
        y = tn.identity(sf, name="on_false")
    with pytest.raises(tn.DeadFetchError, match=r"fetched tensor on_false:0 is dead: .*on_false.*not taken"):
        tn.Session(g).run(y)


def test_non_termination_errors_name_the_frame_and_the_last_node() -> None:
    g = tn.Graph()
    with g.as_default():
        r = tn.while_loop(lambda k: k >= 0, lambda k: k + 1, [tn.constant(0)], name="forever")
    with pytest.raises(tn.NonTerminationError, match=r"frame '.*forever.*' \(instance root; entered by Enter node "
                                                     r"\"forever/enter.*\) would run body 8, over the limit "
                                                     r"max_iterations=7"):
        tn.Session(g).run(r, max_iterations=7)
    with pytest.raises(tn.NonTerminationError, match=r"more than max_firings=30 firings \(last: .* at .*\)"):
        tn.Session(g).run(r, max_firings=30, max_iterations=None)


def test_iteration_limit_counts_bodies_exactly() -> None:
    """A loop of 5 bodies: max_iterations=5 is enough, 4 is not (the LoopCond of iteration 4 is true)."""
    g = tn.Graph()
    with g.as_default():
        (r,) = tn.while_loop(lambda k: k < 5, lambda k: k + 1, [tn.constant(0)])
    assert tn.Session(g).run(r, max_iterations=5) == 5
    with pytest.raises(tn.NonTerminationError, match="would run body 5, over the limit max_iterations=4"):
        tn.Session(g).run(r, max_iterations=4)


def test_iteration_limit_of_a_frame_without_a_loop_cond_counts_started_iterations() -> None:
    """A hand-built loop with no LoopCond (its predicate a constant Enter, always true) is bounded where
    its iterations start: iteration ``max_iterations`` may start (it would find a false predicate, if
    the loop had one), iteration ``max_iterations + 1`` may not."""
    g = tn.Graph()
    with g.as_default():
        go = raw.enter(tn.constant(True), "spin", is_constant=True)
        m, _ = raw.merge([raw.enter(tn.constant(0), "spin"), raw.BACK_EDGE], name="spin_merge")
        out_f, out_t = raw.switch(m, go, name="spin_switch")
        y = raw.exit(out_f)
        one = raw.enter(tn.constant(1), "spin", is_constant=True)
        raw.close_back_edge(m, raw.next_iteration(tn.add(out_t, one)))
    with pytest.raises(tn.NonTerminationError, match="started iteration 8, over the limit max_iterations=7"):
        tn.Session(g).run(y, max_iterations=7, max_firings=None)


def test_firing_limit_is_exact() -> None:
    g = tn.Graph()
    with g.as_default():
        y = tn.add(tn.constant(1), tn.constant(2))
    sess = tn.Session(g)
    assert sess.run(y, max_firings=3) == 3
    assert sess.last_result is not None and sess.last_result.stats["firings"] == 3
    with pytest.raises(tn.NonTerminationError):
        sess.run(y, max_firings=2)


# ---- schedulers ------------------------------------------------------------------------------------------
def test_ready_queue_policies() -> None:
    for policy, want in (("fifo", [0, 1, 2, 3]), ("lifo", [3, 2, 1, 0])):
        q = ReadyQueue(policy)
        for k in range(4):
            q.push(k)
        assert len(q) == 4
        assert [q.pop() for _ in range(4)] == want
        assert len(q) == 0
    orders = set()
    for seed in range(6):
        q = ReadyQueue("random", seed)
        for k in range(6):
            q.push(k)
        order = tuple(q.pop() for _ in range(6))
        assert sorted(order) == list(range(6))
        orders.add(order)
    assert len(orders) > 1, "the random scheduler ignores its seed"
    q1, q2 = ReadyQueue("random", 3), ReadyQueue("random", 3)
    for k in range(6):
        q1.push(k)
        q2.push(k)
    assert [q1.pop() for _ in range(6)] == [q2.pop() for _ in range(6)]
    with pytest.raises(ValueError, match="unknown scheduler 'bogus'"):
        ReadyQueue("bogus")


def test_schedulers_change_the_firing_order_not_the_firings() -> None:
    g = tn.Graph()
    with g.as_default():
        xs = [tn.constant(float(k), name=f"c{k}") for k in range(4)]
        y = tn.add_n(xs) if hasattr(tn, "add_n") else xs[0] + xs[1] + xs[2] + xs[3]
    orders = {}
    for opts in (RunOptions("fifo", trace=True), RunOptions("lifo", trace=True)):
        sess = tn.Session(g)
        assert sess.run(y, options=opts) == 6.0
        assert sess.last_result is not None and sess.last_result.trace is not None
        orders[opts.scheduler] = [e.node for e in sess.last_result.trace.events]
    assert Counter(orders["fifo"]) == Counter(orders["lifo"])
    assert orders["fifo"] != orders["lifo"]
    assert orders["fifo"][:4] == ["c0", "c1", "c2", "c3"]


def test_random_schedules_follow_their_seed_through_a_session() -> None:
    """``RunOptions(scheduler="random", seed=s)`` reaches the ready queue: different seeds give different
    firing orders (with the same firings), one seed always the same order."""
    g = tn.Graph()
    with g.as_default():
        xs = [tn.constant(float(k), name=f"c{k}") for k in range(6)]
        y = ((xs[0] + xs[1]) * (xs[2] + xs[3])) - (xs[4] * xs[5])

    def order(seed: int) -> tuple[str, ...]:
        sess = tn.Session(g)
        assert sess.run(y, options=RunOptions("random", seed=seed, trace=True)) == 5.0 * 1.0 - 20.0 + 0.0 * 0
        assert sess.last_result is not None and sess.last_result.trace is not None
        return tuple(e.node for e in sess.last_result.trace.events)

    orders = {order(s) for s in range(6)}
    assert len(orders) > 1
    assert order(4) == order(4)


def test_a_long_deadlock_report_is_cut_after_twenty_lines() -> None:
    def stalled(n: int) -> tuple[tn.Graph, tn.Tensor]:
        g = tn.Graph()
        with g.as_default():
            m, _ = raw.merge([raw.enter(tn.constant(0.0), "f"), raw.BACK_EDGE])
            p = raw.loop_cond(m < raw.enter(tn.constant(3.0), "f", is_constant=True))
            sf, st = raw.switch(m, p)
            step = raw.enter(tn.constant(1.0), "f", name="step")
            adds = [tn.add(st, step, name=f"stalled{k}") for k in range(n)]
            with g.control_dependencies(adds):  # one more blocked node: it waits for the adds
                nxt = tn.identity(st, name="waiter")
            raw.close_back_edge(m, raw.next_iteration(nxt))
            out = raw.exit(sf)
        return g, out

    for n, cut in ((19, False), (20, True)):  # n adds + the waiter: 20 lines fit, 21 do not
        g, out = stalled(n)
        with pytest.raises(tn.DeadFetchError) as e:
            tn.Session(g).run(out)
        lines = str(e.value).split("stalled?):\n", 1)[1].splitlines()
        assert len([ln for ln in lines if " waits for " in ln]) == 20
        assert str(e.value).endswith("\n  ...") == cut
        assert any("waiter\" (created" in ln and f"waits for {n} control input(s)" in ln for ln in lines) != cut


def test_the_store_never_shares_memory_with_the_initial_value() -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.array([1.0, 2.0], np.float32), name="v")
        read = v.read()
    sess = tn.Session(g)
    np.testing.assert_array_equal(sess.run(read), [1.0, 2.0])
    # the store as first created by VarHandle: its own memory, which nobody can write in place
    # (``turnout.store.owned``), so the graph's initial value and the next session stay as they were
    held = sess.variables["v"]
    assert not np.shares_memory(held, g.variables["v"].attrs["initial_value"]) and not held.flags.writeable
    sess.variables["v"] = np.array([7.0, 7.0], np.float32)
    np.testing.assert_array_equal(sess.run(read), [7.0, 7.0])
    np.testing.assert_array_equal(tn.Session(g).run(read), [1.0, 2.0])


def test_kernel_errors_name_the_op_and_its_tag() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, shape=[], name="x")
        _, s = tn.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s + tn.divide(10, x - i, name="the_div")),
                             [tn.constant(0), tn.constant(0)], name="lp")
    with pytest.raises(tn.KernelError, match=r'Div node ".*the_div" .* at .*lp.*:2: Div: integer division by zero'):
        tn.Session(g).run(s, {x: np.int32(2)})
    with pytest.raises(tn.KernelError, match=r'Div node "root_div" .* at root: Div: integer division by zero'):
        with g.as_default():
            r = tn.divide(tn.constant(1), x, name="root_div")
        tn.Session(g).run(r, {x: np.int32(0)})


def test_every_rule_table_entry_says_what_it_does() -> None:
    """The rule tables are the reference's documentation (``rules`` module docstring): every entry,
    including the ones ``_stateful`` wraps, carries a docstring."""
    from turnout.reference import rules

    for table in (rules.ARRIVE, rules.FIRE, rules.ROUTE):
        for op, fn in table.items():
            assert fn.__doc__ and fn.__doc__.strip(), f"{op}: {fn.__name__} has no docstring"
    for fn in (rules.arrive_ordinary, rules.fire_compute, rules.fire_switch, rules.route_enter):
        assert fn.__doc__ and "[E-" in fn.__doc__


def test_an_interpreter_given_an_unfed_placeholder_says_it_must_be_fed() -> None:
    """Session and run_graph refuse an unfed Placeholder before the run; the interpreter's own rule is
    the guard for direct callers of ``Interpreter``."""
    from turnout.reference.executor import Interpreter, make_plan

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="lonely")
        y = x + 1.0
    it = Interpreter(make_plan(g, [y], set()), {}, {}, RunOptions())
    with pytest.raises(tn.ExecutionError, match=r'Placeholder node "lonely".*must be fed a value'):
        it.run()


def test_a_ready_queue_without_a_policy_is_fifo() -> None:
    """Kills ``scheduler.__init__:2a090d53`` and ``:8848badc`` (the default policy changed to an unknown
    name): the default is first in, first out, as ``RunOptions.scheduler`` documents."""
    q = ReadyQueue()
    for item in range(4):
        q.push(item)
    assert [q.pop() for _ in range(4)] == [0, 1, 2, 3]
    assert q.policy == "fifo"


def test_a_chrome_trace_names_its_rows_and_keeps_each_firings_rule() -> None:
    """Kills the survivors of the reference/trace.py campaign in ``to_chrome`` (a firing's ``rule``
    written under another key; the row-naming metadata events renamed or put in another process; the
    display unit misspelt): in
    the Chrome trace-event format a viewer (Perfetto) names a row only from a ``thread_name`` metadata
    event of the same ``pid``, and the rule a firing used is what a reader looks for."""
    g = tn.Graph()
    with g.as_default():
        _, y = tn.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, y * 2.0), [tn.constant(0), tn.constant(1.0)])
    sess = tn.Session(g)
    sess.run(y, options=tn.RunOptions(trace=True))
    trace = sess.last_result.trace
    chrome = trace.to_chrome()
    assert chrome["displayTimeUnit"] == "ns"  # the format knows "ms" and "ns" only
    events = chrome["traceEvents"]
    meta = [e for e in events if e["ph"] == "M"]
    fired = [e for e in events if e["ph"] == "X"]
    assert len(fired) == len(trace.events)
    assert [e["args"] for e in fired] == [{"tag": fmt_tag(ev.tag), "dead": ev.dead, "rule": ev.rule}
                                         for ev in trace.events]
    assert {e["pid"] for e in fired} == {0}
    assert all(m == {"name": "thread_name", "ph": "M", "pid": 0, "tid": m["tid"], "args": m["args"]} for m in meta)
    rows = {m["tid"]: m["args"]["name"] for m in meta}
    assert len(rows) == len(meta) and {e["tid"] for e in fired} == set(rows)
    assert "root" in rows.values() and any("frame" in name for name in rows.values())


# ---- a control edge leaving the Exit of a nested frame ------------------------------------------------
@pytest.mark.parametrize(("n", "wrapped"), [(0, False), (1, False), (4, False), (3, True)])
def test_a_control_edge_leaving_a_nested_exit_fires_its_waiter_once_per_outer_iteration(n: int, wrapped: bool) -> None:
    """Law [E-Exit-Live] / [E-Frame-Done]: an Exit of a frame instance entered at tag t sends its data
    *and its control* tokens at t, the tag minus its last level. For a loop nested in a loop, t is the
    enclosing loop's iteration (not the root, nor the first level of a deeper tag), so a node whose only
    tie to the inner loop is a control edge from its Exit fires exactly once in every outer iteration,
    at that iteration's tag: live while the outer loop runs its body, dead in the iteration that ends it
    (the inner loop, entered dead, releases its Exit dead at [E-Frame-Done]). ``wrapped`` runs it all in
    a third loop, twice. The values agree with the small-step semantics and the fast backend."""
    import graphs

    from turnout.semantics import smallstep as ss

    w = graphs.nested_exit_waiter(wrapped)
    feeds = {w.n: np.int32(n)}
    r = run_graph(w.g, [w.total, w.inner_sum], feeds, RunOptions(trace=True))
    want = w.rounds * sum(range(n))  # the waiter adds i in iteration i; inner loop i ends with j == i
    assert [int(v) for v in r.values] == [want, want]
    assert r.trace is not None
    rounds = [((w.top_frame, a),) for a in range(w.rounds)] if w.top_frame else [()]
    live = [(*p, (w.outer_frame, k)) for p in rounds for k in range(n)]
    dead = [(*p, (w.outer_frame, n)) for p in rounds]  # the iteration that finds i < n false
    if w.top_frame:  # and the wrapping loop's last iteration, whose body runs dead: the outer loop too
        dead.append(((w.top_frame, w.rounds), (w.outer_frame, 0)))
    waits = sorted((e.tag, e.dead) for e in r.trace.events if e.node.endswith("/waiter"))
    assert waits == sorted([(t, False) for t in live] + [(t, True) for t in dead])
    assert all(c == 1 for (name, _), c in r.counts.items() if name.endswith("/waiter"))
    live_exits = sorted(e.tag for e in r.trace.events if e.node == w.exit_node.name and not e.dead)
    assert [t[:-1] for t in live_exits] == sorted(live)  # inner loop i exits live once, in outer iteration i
    released = sorted(e.tag for e in r.trace.events if e.rule == "E-Frame-Done" and e.node == w.exit_node.name)
    assert released == sorted(dead)
    small = ss.run(w.g, [w.total, w.inner_sum], feeds)
    fast = tn.Session(w.g, backend="fast").run([w.total, w.inner_sum], feeds)
    assert [int(v) for v in small.values] == [int(v) for v in fast] == [want, want]


@pytest.mark.parametrize("taken", [True, False])
def test_a_loop_exit_released_dead_kills_a_control_waiter_whose_data_is_live(taken: bool) -> None:
    """Law [E-Frame-Done] with [E-Op-Dead]: a loop on an untaken branch sends nothing live, and when
    its instance completes each of its Exits is released *dead*, on its data and its control edges.
    A node whose data inputs are all live but which waits on that Exit by a control edge is killed by
    the dead control token: fetching it is a dead fetch (on the taken branch it computes its value).
    The small-step semantics and the fast backend agree."""
    from turnout.semantics import smallstep as ss

    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        x = tn.placeholder(tn.int32, [], name="x")
        exits: list[Any] = []

        def with_loop() -> tn.Tensor:
            (k,) = tn.while_loop(lambda k: k < x, lambda k: k + 1, [tn.constant(0)], name="loop")
            exits.append(k.node)
            return k

        tn.cond(p, with_loop, lambda: x)
        with tn.control_dependencies([exits[0]]):
            waiter = tn.multiply(x, 3, name="waiter")
    feeds = {p: np.bool_(taken), x: np.int32(4)}
    runs = [lambda: run_graph(g, [waiter], feeds).values, lambda: ss.run(g, [waiter], feeds).values,
            lambda: tn.Session(g, backend="fast").run([waiter], feeds)]
    for run in runs:
        if taken:
            assert [int(v) for v in run()] == [12]
        else:
            with pytest.raises(tn.DeadFetchError, match="waiter"):
                run()


# ---- Send and Recv: the rules of a partitioned run ------------------------------------------------------
@pytest.mark.parametrize("order", ["round_robin", "random", "threads"])
def test_send_and_recv_carry_each_value_live_or_dead_once_per_tag(order: str) -> None:
    """Laws [E-Send], [E-Recv] and [E-Recv-Dead] in the reference interpreter of each partition: a Send
    fires once its inputs are full at t (a control Send: its control inputs) and sends that token, live
    or dead, under (edge, t); a Recv fires only once the token under its own (edge, t) has come, and
    emits it at t, dead if it was sent dead. So a loop whose body crosses devices in every iteration,
    and a cond whose untaken branch sits on the other device, give the unpartitioned run's values
    under every order of the partitions, with every key sent once and received once, and no more
    messages of an edge unconsumed at a time than its credit."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        p = tn.placeholder(tn.bool, [], name="p")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = y * 2 + i
            return i + 1, y2

        _, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), tn.constant(1)])

        def far() -> tn.Tensor:
            with tn.device("cpu:1"):
                return y * 10

        near: list[tn.Tensor] = []

        def close() -> tn.Tensor:
            near.append(y - 1)
            return near[0]

        z = tn.cond(p, far, close)
        with tn.device("cpu:1"):
            with tn.control_dependencies([z]):
                after = tn.identity(y, name="after")  # a control edge that crosses devices, live
            with tn.control_dependencies([near[0]]):
                waiter = tn.multiply(y, 3, name="waiter")  # one that is dead when ``close`` is untaken
    for nv, pv in ((3, True), (2, False), (0, False)):
        feeds = {n: np.int32(nv), p: np.bool_(pv)}
        want = tn.Session(g).run([y, z, after], feeds)
        sess = tn.Session(g, devices=["cpu:0", "cpu:1"], order=order, seed=nv)
        got = sess.run([y, z, after], feeds)
        assert [int(v) for v in got] == [int(v) for v in want]
        rv = sess.backend.last_run.rv
        assert rv.sent and dict(rv.sent) == dict(rv.received) and set(rv.sent.values()) == {1}
        assert not rv.unconsumed()
        # a Send fires only with a credit of its edge ([E-Send] asks the rendezvous as it arrives), so
        # every message counts against its edge's credit while it waits to be received
        credit = max(int(nd.attrs["credit"]) for part in sess.backend.last_run.parted.partitions.values()
                     for nd in part.graph.nodes if nd.op == "Send")
        assert 1 <= sess.last_result.stats["peak_unconsumed_per_edge"] <= credit  # type: ignore[union-attr]
        if pv:  # the control Send from the untaken ``close`` carries its deadness to the waiter
            with pytest.raises(tn.DeadFetchError, match="waiter"):
                sess.run(waiter, feeds)
        else:
            assert int(sess.run(waiter, feeds)) == 3 * int(want[0])
    assert any(nd.op == "Send" and nd.attrs.get("control") for part in sess.backend.last_run.parted.partitions.values()
               for nd in part.graph.nodes)


def test_a_transfer_outside_a_partitioned_run_names_the_op() -> None:
    """A Send or Recv fires only under a rendezvous (``turnout.devices``): the reference interpreter
    of an unpartitioned run refuses it by name, as it arrives or, for a Send with no inputs at all
    (a source, which nothing makes arrive), as it fires."""
    for op, inputs in (("Recv", 0), ("Send", 1), ("Send", 0)):
        g = tn.Graph()
        with g.as_default():
            x = tn.constant(1.0, name="x")
        node = g.create_node(op, [x][:inputs], {
            "edge": "e", "src_device": "cpu:1", "dst_device": "cpu:0", "credit": 1, "control": not inputs,
            "dtype": "float32", "shape": []}, name=f"my{op}")
        with g.as_default():
            if op == "Recv":
                fetch = tn.identity(node.outputs[0])
            else:
                with tn.control_dependencies([node]):
                    fetch = tn.identity(x)
        with pytest.raises(tn.ExecutionError, match=rf'^{op} node "my{op}" .* runs only in a partitioned run'):
            run_graph(g, [fetch])


def test_an_input_delivered_twice_at_one_tag_is_refused_by_name() -> None:
    """[T3-Exactly-Once] guarded at delivery: a node takes each input once per tag. A hand-built loop
    whose Exit reads the Merge (not the Switch's exit branch) sends a live value out at every
    iteration, so a consumer still waiting for its other input would get input 0 twice at the root;
    the interpreter stops with an error naming the node, the slot and the tag."""
    g = tn.Graph()
    with g.as_default():
        e = raw.enter(tn.constant(0), "loop")
        three = raw.enter(tn.constant(3), "loop", is_constant=True)
        one = raw.enter(tn.constant(1), "loop", is_constant=True)
        m, _ = raw.merge([e, raw.BACK_EDGE])
        f, t = raw.switch(m, raw.loop_cond(m < three))
        raw.close_back_edge(m, raw.next_iteration(t + one))
        leaky, done = raw.exit(m, name="leaky"), raw.exit(f, name="done")
        both = tn.add(leaky, done, name="both")
    with pytest.raises(tn.ExecutionError, match=r'Add node "both" .*received input 0 twice at root'):
        run_graph(g, [both])


def test_a_fed_placeholder_satisfies_its_control_consumers_at_the_root_tag() -> None:
    """A fed Placeholder does not run: its value stands for it, and a node that needs it only through
    a control edge gets a live control token at the root tag ``()``, the tag of every root firing, so
    it meets its data inputs there and fires once at ``()``."""
    g = tn.Graph()
    with g.as_default():
        gate = tn.placeholder(tn.int32, [], name="gate")
        c = tn.constant(2, name="c")
        with tn.control_dependencies([gate]):
            y = tn.add(c, 1, name="y")
    r = run_graph(g, [y], {gate: np.int32(5)}, RunOptions(trace=True))
    assert [int(v) for v in r.values] == [3]
    assert r.trace is not None and {e.tag for e in r.trace.events} == {()}
    assert [e.node for e in r.trace.events].count("y") == 1 and r.counts[("y", ())] == 1


# ---- kernel errors name the op and its tag, wherever the kernel runs ---------------------------------
def test_a_loop_predicate_that_is_not_one_boolean_names_the_loop_cond_and_its_iteration() -> None:
    """[E-LoopCond] takes the truth of a live predicate, which must be one boolean (``kernels.truth``).
    A predicate of unknown static shape fed a vector is a KernelError that names, as every kernel error
    does, the LoopCond and the tag it fired at: iteration 0 of its loop, not the root."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=None, name="p")
        [out] = tn.while_loop(lambda i: tn.logical_and(p, i < 3), lambda i: i + 1, [tn.constant(0)], name="lp")
    with pytest.raises(tn.KernelError, match=r'^LoopCond node "[^"]*" .* at [^ ]*lp[^ ]*:0: the predicate must be'):
        run_graph(g, [out], {p: np.array([True, False])})
    assert [int(v) for v in run_graph(g, [out], {p: np.bool_(True)}).values] == [3]


def test_a_source_whose_kernel_fails_is_named_with_its_tag() -> None:
    """[E-Op] with no data inputs (``fire_source``): a Const whose value does not convert to its dtype
    fails in its kernel, and the KernelError names the Const and its tag, as for any other op."""
    g = tn.Graph()
    with g.as_default():
        bad = g.create_node("Const", [], {"value": "abc", "dtype": tn.float32}, name="bad").outputs[0]
        y = tn.add(bad, 1.0, name="y")
    with pytest.raises(tn.KernelError, match=r'^Const node "bad" .* at root: kernel failed: could not convert'):
        run_graph(g, [y])


# ---- seed 202: the executor's errors and limits -------------------------------------------------------
def test_two_live_inputs_at_one_merge_are_a_conflict_named_by_the_merge_and_its_tag() -> None:
    """[E-Merge-Conflict]: a Merge takes at most one live data input per tag ([W-Merge-Unique]). A hand-built
    Merge of two constants receives two at the root; the run stops with MergeConflictError, whose
    message (``errors.merge_conflict_message``) names the rule, the Merge and the tag."""
    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([tn.constant(1.0), tn.constant(2.0)], name="both_live")
    want = r'^\[E-Merge-Conflict\] Merge node "both_live" .* received two live data inputs at tag root'
    with pytest.raises(tn.MergeConflictError, match=want):
        run_graph(g, [m])


def test_max_seconds_bounds_a_reference_run() -> None:
    """``RunOptions.max_seconds`` bounds a run's wall-clock time: a loop that never ends stops with
    NonTerminationError naming ``max_seconds``, long before a firing limit set far above it."""
    g = tn.Graph()
    with g.as_default():
        (k,) = tn.while_loop(lambda k: k >= 0, lambda k: k + 1, [tn.constant(0)])
    with pytest.raises(tn.NonTerminationError, match=r"more than max_seconds=0\.05 seconds"):
        run_graph(g, [k], options=RunOptions(max_seconds=0.05, max_firings=200_000))


def test_run_graph_runs_variables_on_a_fresh_store_each_call() -> None:
    """``run_graph`` has no persistent variables: each call starts a fresh store, initialized by the
    VarHandles, so an update reads the initial value every time."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.float32(1.0), name="v")
        upd = v.assign_add(2.0)
    assert [float(x) for x in run_graph(g, [upd]).values] == [3.0]
    assert [float(x) for x in run_graph(g, [upd]).values] == [3.0]


# ---- the full set of reference/rules.py -----------------------------------------------------------------
def test_a_switch_predicate_that_is_not_one_boolean_names_the_switch_and_its_iteration() -> None:
    """[E-Switch] takes the truth of its predicate, which must be one boolean: a cond inside a loop whose
    predicate is fed a vector is a KernelError naming the Switch and the tag it fired at (iteration 0
    of the loop)."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=None, name="p")
        [out] = tn.while_loop(lambda i: i < 2, lambda i: tn.cond(p, lambda: i + 1, lambda: i + 2), [tn.constant(0)],
                              name="lp")
    with pytest.raises(tn.KernelError, match=r'^Switch node "[^"]*" .* at [^ ]*lp[^ ]*:0: the predicate must be'):
        run_graph(g, [out], {p: np.array([True, False])})


def test_a_dead_control_input_kills_an_enter_and_so_its_loop() -> None:
    """A dead control input kills an op whatever it is ([E-Op-Dead]); for an Enter (``fire_forward``)
    the loop it enters then runs dead: its Merge fires [E-Merge-DeadEnter] and its Exit is dead, in
    the reference and in the small-step system alike."""
    from turnout.semantics import smallstep as ss

    g = tn.Graph()
    with g.as_default():
        _, taken = raw.switch(tn.constant(5.0), tn.constant(False))
        dead = tn.identity(taken, name="dead")
        zero = tn.constant(0.0)  # made outside the block: only the Enter waits on the dead op
        with tn.control_dependencies([dead]):
            e = raw.enter(zero, "loop", name="gated")
        m, _ = raw.merge([e, raw.BACK_EDGE])
        sf, st = raw.switch(m, raw.loop_cond(m < raw.enter(tn.constant(3.0), "loop", is_constant=True)))
        raw.close_back_edge(m, raw.next_iteration(st + raw.enter(tn.constant(1.0), "loop", is_constant=True)))
        out = raw.exit(sf, name="out")
    assert e.node.control_inputs == (dead.node,) and zero.node.control_inputs == ()
    with pytest.raises(tn.DeadFetchError, match="out"):
        run_graph(g, [out])
    with pytest.raises(tn.DeadFetchError):
        ss.run(g, [out])


def test_a_recomputed_loops_slots_are_counted_where_they_are_made() -> None:
    """Kills ``rules._checkpoint_slots:41c7a430`` (the slots' count skipped where a budget applies). The
    ``CheckpointSlots`` node of a loop whose gradient recomputes gives its forward loop the slots its
    budget holds, and the interpreter counts them as what the loop saves (``saved_bytes``), so that a
    run's budget below them stops with ``ResourceExhaustedError`` naming the loop's checkpoints."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tn.tanh(v)), [tn.constant(0), x], name="rnn",
                             memory_budget=3 * 24)  # three states of 24 bytes: the counter, v, the position
        (gx,) = tn.gradients(tn.reduce_sum(y), [x])
    sess = tn.Session(g, backend="reference")
    feeds = {x: np.ones(4, np.float32), n: 7}
    sess.run(gx, feeds)
    assert sess.last_result.stats["saved_bytes"] == {"rnn": 72}
    with pytest.raises(tn.ResourceExhaustedError, match='the checkpoints of loop "rnn" \\(3 slots of 24 bytes'):
        sess.run(gx, feeds, memory_budget=71)


def test_the_checkpoint_slots_rule_gives_what_the_runs_slot_plan_allows() -> None:
    """``[CheckpointSlots]`` on the reference interpreter: the count a recomputed loop's slots get is
    its budget's count cut to the run's ``SlotPlan`` capacity (``slot_sizes.slots_given``): a first
    run's 64 of the 1000 the budget holds, then, after a run of 70 steps needed more, 128; the
    gradient is the same at every count. Kills the capacity dropped (every slot given), which the
    rules' own list, holding no test of ``tests/test_slot_sizes.py``, let through."""
    g, x, gx = recomputed_tanh_loop(70, slots=1000)
    (slots,) = [n.outputs[0] for n in g.nodes if n.op == "CheckpointSlots"]
    sess, feed = tn.Session(g), {x: np.array([0.1, -0.4, 0.7, 1.2], np.float32)}
    first, g1 = sess.run([slots, gx], feed)
    second, g2 = sess.run([slots, gx], feed)
    assert (int(first), int(second)) == (64, 128)
    np.testing.assert_allclose(g1, g2, rtol=1e-6)
