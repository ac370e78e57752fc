"""The reference interpreter's own machinery: the parallel_iterations window, in-order retirement,
frame deletion, dead-exit release, traces and their Chrome export. (Values of programs are tested
in test_builders / test_raw; here we look inside.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

import turnout as tn
from turnout.reference.executor import Interpreter, make_plan
from turnout.session import RunOptions


def _loop_graph(pi: int, n: int = 6):
    g = tn.Graph()
    with g.as_default():
        i, x = tn.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 2.0 + 1.0),
                             [tn.constant(0), tn.constant(1.0)], parallel_iterations=pi, name="loop")
    return g, i, x


def _run(g, fetches, scheduler="fifo", seed=0, feeds=None):
    plan = make_plan(g, fetches, set())
    it = Interpreter(plan, feeds or {}, {}, RunOptions(scheduler=scheduler, seed=seed, trace=True))
    it.run()
    return it, it.result(fetches)


def _iteration(tag):
    return tag[-1][1] if tag else None


@pytest.mark.parametrize("scheduler", ["fifo", "lifo", "random"])
def test_parallel_iterations_one_runs_iterations_strictly_in_sequence(scheduler):
    g, i, x = _loop_graph(pi=1)
    it, (iv, xv) = _run(g, [i, x], scheduler, seed=7)
    assert int(iv) == 6 and float(xv) == 127.0  # x_{k+1} = 2 x_k + 1 from 1: 2^(k+1) - 1
    frame_events = [e for e in it.trace.events if e.tag and e.op != "Retire"]
    iters = [_iteration(e.tag) for e in frame_events]
    # [E-Next-Park] with N = 1: no event of iteration k+1 before iteration k retired
    retired = [_iteration(e.tag) for e in it.trace.events if e.rule == "E-Iter-Retire"]
    assert retired == sorted(retired) == list(range(7))
    last_seen = -1
    for k in iters:
        assert k >= last_seen
        last_seen = k


def test_window_bounds_outstanding_iterations():
    """With N = 2, at no point are more than 2 iterations started and not retired."""
    g, i, x = _loop_graph(pi=2, n=10)
    it, _ = _run(g, [i, x], "lifo")
    started: set[int] = set()
    retired: set[int] = set()
    for e in it.trace.events:
        if not e.tag:
            continue
        k = _iteration(e.tag)
        if e.rule == "E-Iter-Retire":
            retired.add(k)
        else:
            started.add(k)
        assert len(started - retired) <= 2


def test_frames_are_deleted_and_nothing_is_stranded():
    g, i, x = _loop_graph(pi=10)
    it, _ = _run(g, [i, x], "random", seed=3)
    assert it.frames == {}
    assert all(b.fired for b in it.inboxes.values())


def test_dead_exits_are_released_when_a_loop_on_an_untaken_branch_completes():
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        r = tn.cond(p, lambda: tn.while_loop(lambda k: k < 3, lambda k: k + 1, [tn.constant(0)], name="inner")[0],
                    lambda: tn.constant(-1))
    plan = make_plan(g, [r], {(p.node.id, 0)})
    it = Interpreter(plan, {(p.node.id, 0): np.asarray(False)}, {}, RunOptions(trace=True))
    it.run()
    assert int(it.result([r])[0]) == -1
    rules = [e.rule for e in it.trace.events]
    assert "E-Merge-DeadEnter" in rules and "E-Frame-Done" in rules
    # the loop ran zero live iterations: nothing in its frame fired live
    assert not [e for e in it.trace.events if e.tag and not e.dead and e.op != "Retire"]


def test_each_node_fires_at_most_once_per_tag_and_merge_fires_trip_count_plus_one():
    g, i, x = _loop_graph(pi=4, n=5)
    it, _ = _run(g, [i, x], "random", seed=11)
    assert max(it.counts.values()) == 1
    merges = [n for n in g.nodes if n.op == "Merge"]
    for m in merges:
        assert sum(1 for (name, tag) in it.counts if name == m.name) == 5 + 1
    body_mul = [n for n in g.nodes if n.op == "Mul"][0]
    live = {(e.node, e.tag) for e in it.trace.events if not e.dead}
    assert sum(1 for (name, _) in live if name == body_mul.name) == 5


def test_chrome_trace_export_is_valid_json_with_one_slice_per_firing(tmp_path):
    g, i, x = _loop_graph(pi=2, n=3)
    sess = tn.Session(g)
    sess.run(x, options=RunOptions(trace=True))
    trace = sess.last_result.trace
    path = tmp_path / "trace.json"
    trace.save_chrome(str(path))
    doc = json.loads(path.read_text())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(trace.events)
    assert {e["args"]["dead"] for e in slices} == {True, False}
    summary = trace.summary()
    assert summary["firings"] == summary["live"] + summary["dead"]
    assert list(summary["iterations_per_frame"].values()) == [4]  # 3 live iterations + the final test


def test_firing_limit_and_iteration_limit_raise_non_termination():
    g = tn.Graph()
    with g.as_default():
        r = tn.while_loop(lambda k: k >= 0, lambda k: k + 1, [tn.constant(0)])
    with pytest.raises(tn.NonTerminationError, match="max_iterations=50"):
        tn.Session(g).run(r, max_iterations=50)
    with pytest.raises(tn.NonTerminationError, match="max_firings=200"):
        tn.Session(g).run(r, max_firings=200, max_iterations=None)


def test_deadlock_names_the_blocked_node_and_its_tag():
    """A hand-built loop whose body reads a NON-constant Enter: it delivers to iteration 0 only, so the
    Add of iteration 1 waits forever. Iteration 1 then retires with nothing left to fire ([E-Iter-Retire]),
    the instance completes and the Exit, dead at iteration 0, releases its dead token ([E-Frame-Done]):
    the fetch is dead, as on the small-step system and in TensorFlow. The error names the stalled Add
    and its tag rather than hanging."""
    from turnout import raw

    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([raw.enter(tn.constant(0.0), "f"), raw.BACK_EDGE])
        p = raw.loop_cond(m < raw.enter(tn.constant(3.0), "f", is_constant=True))
        sf, st = raw.switch(m, p)
        step = raw.enter(tn.constant(1.0), "f")  # should have been is_constant=True
        raw.close_back_edge(m, raw.next_iteration(tn.add(st, step, name="stalled_add")))
        out = raw.exit(sf)
    with pytest.raises(tn.DeadFetchError, match=r'(?s)stalled_add.*f:1'):
        tn.Session(g).run(out)
    with pytest.raises(tn.DeadFetchError):
        tn.Session(g, backend="smallstep").run(out)


def test_feeding_an_intermediate_tensor_cuts_the_graph_above_it():
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = x * 3.0
        z = y + 1.0
    # x is not fed: y is, so x's placeholder is not needed
    assert float(tn.Session(g).run(z, {y: 2.0})) == 3.0
