"""Laws of the host's conds and loops (``turnout.fast.host_control``): a cond or a loop whose nodes
span devices is decided on the host, between compiled calls, and gives the reference's values. Each
law kills mutants of the full set of ``fast/host_control.py`` (issue 40, part 3; ``python
tools/mutation.py --module fast/host_control.py --all``) that the partitioned fast backend's tests of
its list leave alive.

Each law runs a tiny program on the partitioned fast backend with ``fallback=False`` (so a broken
host rule raises rather than sending the run to the partitioned interpreter, whose values are the
same), against the reference interpreter. Where a law is about a step no functionalized program
reaches (a predicate or a loop entry that is dead, a walk whose errors are dropped), the host's
method is called again on the cond or loop of a real run, captured as it ran, with the environment
the law names.
"""

from __future__ import annotations

import re
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout import raw
from turnout.devices.plan_run import PlanRun
from turnout.fast import plumbing
from turnout.fast.cut import HostCond, HostLoop, Segment, Step
from turnout.fast.host_control import HostControl
from turnout.fast.regions import cond_exports, cond_outputs, key
from turnout.fast.segment import SegmentFn
from turnout.fast.values import DEAD

D2 = ["cpu:0", "cpu:1"]
D3 = ["cpu:0", "cpu:1", "cpu:2"]
GUARD = 100  # more iterations than any loop here runs


def _both(g: tn.Graph, fetches: list[Any], feeds: dict[Any, Any], devices: list[str],
          **options: Any) -> tn.Session:
    """The partitioned fast run (no fallback, traced) checked against the reference run; the
    session, for its stats and trace. Both under ``max_iterations``, so that a loop that would
    not stop fails at once."""
    want = tn.Session(g).run(fetches, feeds, max_iterations=GUARD)
    sess = tn.Session(g, backend="fast", devices=devices, fallback=False, **options)
    got = sess.run(fetches, feeds, trace=True, max_iterations=GUARD)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5)
    assert sess.last_result is not None and sess.last_result.stats["executor"] == "fast partitioned"
    return sess


def _spanning(n: int, sleep: bool = False, parallel_iterations: int = 10, home: str = "cpu:0",
              on: str = "cpu:1") -> tuple[tn.Graph, Any, Any, Any]:
    """``y = x * 2**n`` by a loop named ``span`` whose counter sits on ``home`` and whose multiply sits
    on ``on`` (then a zero ``Sleep``, a host callback, where ``sleep``: the run then dispatches from
    per-device workers)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device(on):
                y2 = y * 2.0
                if sleep:
                    y2 = tn.sleep(y2, 0.0)
            return i + 1, y2

        with tn.device(home):
            i, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), x], name="span",
                                 parallel_iterations=parallel_iterations)
    return g, x, i, y


def _cond_on_three_devices(x: tn.Tensor, p: tn.Tensor) -> tn.Tensor:
    """``x * 10`` on cpu:1 where ``p`` holds, else ``x - 10`` on cpu:2: a cond whose branches live on
    other devices than its predicate, which the host runs."""

    def yes() -> tn.Tensor:
        with tn.device("cpu:1"):
            return x * 10.0

    def no() -> tn.Tensor:
        with tn.device("cpu:2"):
            return x - 10.0

    return tn.cond(p, yes, no)


@pytest.mark.parametrize("v", [2.0, -2.0])
def test_a_cond_whose_branches_span_devices_gives_the_taken_branchs_value(v: float) -> None:
    """Law: the host reads the predicate and runs the taken branch's steps; the Merge forwards that
    branch's value, on either side."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        with tn.device("cpu:0"):
            p = x > 0.0
        z = _cond_on_three_devices(x, p)
    sess = _both(g, [z], {x: v}, D3)
    assert sess.last_result.stats["host_conds"] == 1


@pytest.mark.parametrize("n", [0, 1, 3])
def test_a_loop_spanning_devices_runs_its_trip_count_from_the_host(n: int) -> None:
    """Law: the host runs the header, reads the predicate and runs the body until the predicate is
    false; the loop's exits give the last values, and the iterations run are counted per loop."""
    g, x, i, y = _spanning(n)
    sess = _both(g, [i, y], {x: 3.0}, D2, whole_program="never")
    stats = sess.last_result.stats
    assert stats["host_loops"] == 1 and stats["host_iterations"] == {"span/frame0": n}


def _nest(outer: int, inner: int, grad: bool = False) -> tuple[tn.Graph, Any, Any, list[Any]]:
    """An outer loop (counter on cpu:0, ``n`` fed) whose body runs a cond whose branches sit on cpu:1
    and cpu:2, then an inner loop of ``inner`` trips spanning cpu:1 and cpu:2, then an add on cpu:2
    named ``after`` and a loop of two halvings all on cpu:2 (compiled whole in its segment): every
    control structure of the body but the last decided on the host."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        n = tn.placeholder(tn.int32, shape=[], name="n")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = tn.tanh(y) * 2.0
            with tn.device("cpu:0"):
                p = tn.greater(y2, 0.5, name="p")

            def yes() -> tn.Tensor:
                with tn.device("cpu:1"):
                    return y2 * y2

            def no() -> tn.Tensor:
                with tn.device("cpu:2"):
                    return y2 * 3.0

            y3 = tn.cond(p, yes, no)

            def ibody(j: tn.Tensor, z: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
                with tn.device("cpu:2"):
                    z2 = tn.sin(z)
                return j + 1, z2

            with tn.device("cpu:1"):
                _, y4 = tn.while_loop(lambda j, z: j < inner, ibody, [tn.constant(0), y3], name="inner")
            with tn.device("cpu:2"):
                y5 = tn.add(y4, 0.25, name="after")
                _, y6 = tn.while_loop(lambda k, v: k < 2, lambda k, v: (k + 1, v * 0.5), [tn.constant(0), y5],
                                      name="compiled")
            return i + 1, y6

        with tn.device("cpu:0"):
            i, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), x], name="outer")
        fetches = [i, y]
        if grad:
            fetches.append(tn.gradients(y, [x])[0])
    return g, x, n, fetches


def test_every_predicate_the_host_reads_is_one_host_span_with_the_value_read() -> None:
    """Law: each read of a predicate by the host is one span of the host's track, named after the cond
    or loop it decides, with the value read (and, for a loop, its iteration); a segment after an inner
    host loop is labelled with the outer loop's iteration again; each loop's iterations add up over
    its runs."""
    outer, inner = 3, 2
    g, x, n, fetches = _nest(outer, inner)
    sess = _both(g, fetches, {x: 0.3, n: outer}, D3)
    stats = sess.last_result.stats
    assert stats["host_iterations"] == {"outer/frame0": outer, "outer/body/inner/frame1": outer * inner}
    tl = sess.last_result.trace
    reads = [s for s in tl.track_spans("host") if s.name.startswith("read predicate of ")]
    assert all(s.dur_s >= 0.0 for s in reads)
    # each span starts when its read starts: the reads follow one another
    starts = [s.start_s for s in tl.spans if s.track == "host" and s.name.startswith("read predicate of ")]
    assert starts == sorted(starts) and starts[0] > 0.0
    outer_reads = [(s.args["iteration"], s.args["value"]) for s in reads
                   if s.name.startswith("read predicate of loop frame 'outer/frame0'")]
    assert outer_reads == [(k, k < outer) for k in range(outer + 1)]
    inner_reads = [(s.args["iteration"], s.args["value"]) for s in reads
                   if s.name.startswith("read predicate of loop frame 'outer/body/inner/frame1'")]
    assert inner_reads == [(k, k < inner) for k in range(inner + 1)] * outer
    cond_reads = [s.args for s in reads if s.name.startswith("read predicate of cond on ")]
    assert len(cond_reads) == outer and all(set(a) == {"value"} for a in cond_reads)
    # the values read are the reference's predicates, iteration by iteration
    y = 0.3
    for a in cond_reads:
        y2 = np.tanh(np.float32(y)) * 2.0
        assert a["value"] == bool(y2 > 0.5)
        y3 = y2 * y2 if y2 > 0.5 else y2 * 3.0
        for _ in range(inner):
            y3 = np.sin(y3)
        y = (y3 + 0.25) * 0.25
    after = [s.args["iteration"] for t in tl.tracks() for s in tl.track_spans(t)
             if t != "host" and "outer/body/after" in s.name]
    assert after == list(range(outer))


def _captured(monkeypatch: pytest.MonkeyPatch, name: str, result: bool = False) -> list[tuple[Any, ...]]:
    """The positional arguments of every call of ``HostControl.<name>`` in the runs that follow
    (and, with ``result``, what it returned, last)."""
    seen: list[tuple[Any, ...]] = []
    orig = getattr(HostControl, name)

    def keep(self: Any, *args: Any, **kwargs: Any) -> Any:
        got = orig(self, *args, **kwargs)
        seen.append((self, *args, got) if result else (self, *args))
        return got

    monkeypatch.setattr(HostControl, name, keep)
    return seen


def _no_steps(*_: Any) -> None:
    raise AssertionError("a dead cond or loop runs no step")


def test_a_host_cond_whose_predicate_is_dead_runs_nothing_and_makes_its_outputs_dead(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Law ([E-Switch-Dead], [E-Merge-AllDead]): a cond the host decides, entered with a dead
    predicate, runs no step and leaves each Merge output and export dead. (No functionalized
    program enters one so, its cond being nested in the dead one's region: the cond of a real run
    is called again, its predicate made dead.)"""
    seen = _captured(monkeypatch, "cond")
    g, x, n, fetches = _nest(1, 1)
    _both(g, fetches, {x: 0.3, n: 1}, D3)
    (run, hc, env), = seen
    env2 = env.child()
    env2.set(key(hc.region.pred), DEAD, None)
    run.steps = _no_steps
    HostControl.cond(run, hc, env2)
    outs = cond_outputs(hc.region, cond_exports(hc.region, run.program.fetch_keys))
    assert outs and all(env2.vals[k] is DEAD for k in outs)


def test_a_host_loop_entered_with_a_dead_value_runs_nothing_and_its_exits_are_dead(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Law ([E-Merge-AllDead] at the loop's entry): a loop the host drives, one of whose variables
    enters dead, runs no step, counts no iteration and leaves each Exit dead (a real run's loop
    called again with its first entry made dead)."""
    seen = _captured(monkeypatch, "loop")
    g, x, i, y = _spanning(2)
    _both(g, [i, y], {x: 3.0}, D2, whole_program="never")
    (run, hl, env), = seen
    for t, _ in plumbing.entries(hl.region):
        env2 = env.child()
        env2.set(key(t), DEAD, None)
        run.steps = _no_steps
        before = dict(run.host_iterations)
        HostControl.loop(run, hl, env2)
        exits = plumbing.exit_keys(hl.region)
        assert exits and all(env2.vals[k] is DEAD for k in exits)
        assert run.host_iterations == before


def _segments(steps: list[Step]) -> list[Segment]:
    """Every segment of ``steps``, through their conds' branches and their loops' parts."""
    out: list[Segment] = []
    for s in steps:
        if isinstance(s, HostCond):
            for b in s.branches.values():
                out += _segments(b)
        elif isinstance(s, HostLoop):
            out += _segments(s.header) + _segments(s.body) + _segments(s.exit_side)
        else:
            out.append(s)
    return out


def test_a_loop_that_pushes_and_runs_no_iteration_traces_its_whole_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """Law: the body of a loop that pushes stacks and ran no iteration is traced, not run, segment by
    segment, through the conds and loops it holds (so its pushes' constants are known to the pops
    traced later), and that walk raises nothing (``learn_unrun`` drops what it raises: the walk is
    called again directly)."""
    seen = _captured(monkeypatch, "learn_unrun")
    traced: list[Any] = []
    orig = SegmentFn.trace

    def trace(self: Any, *args: Any) -> Any:
        traced.append(self)
        return orig(self, *args)

    monkeypatch.setattr(SegmentFn, "trace", trace)
    g, x, n, fetches = _nest(2, 2, grad=True)
    sess = _both(g, fetches, {x: 0.3, n: 0}, D3)
    ran = sess.last_result.stats["host_iterations"]  # the forward loop and its gradient's, no trip
    assert len(ran) == 2 and ran["outer/frame0"] == 0 and set(ran.values()) == {0}
    (run, steps, env), = seen
    segs = _segments(steps)
    assert any(isinstance(s, HostCond) for s in steps) and any(isinstance(s, HostLoop) for s in steps)
    assert segs and all(s.fn is not None and s.fn in traced for s in segs)
    traced.clear()
    entered = _captured(monkeypatch, "_enter_iteration", result=True)
    walked = env.child()
    run._learn_steps(steps, walked)
    assert {id(f) for f in traced} == {id(s.fn) for s in segs}
    # joined as a run would: the branch the walk traced last gives the cond's Merges, a loop's
    # Exits pass on its exit side's values, and a loop is entered at its first iteration (each
    # Merge's index says the Enter)
    for s in steps:
        if isinstance(s, HostCond):
            merged = [key(m.outputs[0]) for m, _ in s.region.merges]
            assert merged and all(walked.vals[k] is not DEAD for k in merged)
        elif isinstance(s, HostLoop):
            exits = plumbing.exit_keys(s.region)
            assert exits and all(walked.vals[k] is not DEAD for k in exits)
    assert entered
    for _, hl, _, _, henv in entered:
        for _, m, _, es, _ in hl.region.loop_vars:
            assert int(henv.vals[key(m.outputs[1])]) == es


@pytest.mark.parametrize("sleep", [False, True])
def test_the_window_waits_on_each_device_of_the_loop_for_the_iteration_p_back(
        monkeypatch: pytest.MonkeyPatch, sleep: bool) -> None:
    """Law: before iteration i the host waits for iteration i - P on every device of the loop: their
    error words (on the host thread) or their last calls (on per-device workers)."""
    waits: list[list[Any]] = []
    orig = PlanRun._retire

    def keep(self: Any, errs: list[Any]) -> None:
        waits.append(list(errs))
        orig(self, errs)

    monkeypatch.setattr(PlanRun, "_retire", keep)
    g, x, i, y = _spanning(4, sleep=sleep, parallel_iterations=1)
    _both(g, [i, y], {x: 1.0}, D2, whole_program="never")
    assert len(waits) == 3
    for errs in waits:
        assert len(errs) == 2
        assert all(isinstance(e, Future) == sleep for e in errs)


def test_a_loop_variable_known_on_the_host_is_traced_once_for_the_loop() -> None:
    """Law: a loop variable known on the host (the counter's constant 0) enters the loop as a device
    value, so each segment is compiled once for the loop, not once per iteration's value."""
    g, x, i, y = _spanning(5)
    sess = _both(g, [i, y], {x: 1.0}, D2, whole_program="never")
    stats = sess.last_result.stats
    assert stats["compiles"] == stats["segments"]


def _vector_predicates() -> tuple[tn.Graph, Any, Any, Any, Any, Any]:
    """A cond (branches on cpu:1 and cpu:2) and a loop (spanning cpu:0 and cpu:1) whose predicates
    have no static shape, so a fed vector reaches the host's read."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        with tn.device("cpu:0"):
            p = tn.placeholder(tn.bool, shape=None, name="p")
        z = _cond_on_three_devices(x, p)
        n = tn.placeholder(tn.int32, shape=None, name="n")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = y * 2.0
            return i + 1, y2

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), x], name="span")
    return g, x, p, z, n, y


@pytest.mark.parametrize("which", ["cond", "loop"])
def test_a_predicate_that_is_not_one_value_is_a_kernel_error_naming_its_reader(which: str) -> None:
    """Law: the host reads a predicate as the interpreter does: a vector fed where a scalar bool is
    read is a ``KernelError`` naming the node that reads it (the cond's Switch, the loop's LoopCond),
    as the reference names it."""
    g, x, p, z, n, y = _vector_predicates()
    fetch, feeds = (z, {x: 1.0, p: np.array([True, False])}) if which == "cond" else (y, {x: 1.0, n: np.array([1, 2])})
    with pytest.raises(tn.KernelError) as want:
        tn.Session(g).run(fetch, feeds)
    reader = re.search(r'node "[^"]+" \(created at [^)]*\)', str(want.value))
    assert reader is not None
    sess = tn.Session(g, backend="fast", devices=D3, fallback=False)
    with pytest.raises(tn.KernelError, match="the predicate must be a scalar bool") as got:
        sess.run(fetch, feeds)
    assert reader.group(0) in str(got.value)


def test_a_value_a_branch_did_not_make_is_present_and_dead_after_the_join(monkeypatch: pytest.MonkeyPatch) -> None:
    """Law: after the host joins the branch it ran, every export of the cond (here a fetched value of
    the other branch) is in the cond's scope, dead where the branch did not make it (a dead value is
    present as ``DEAD``: what the fetches and later segments read), and the fetch of it is a
    ``DeadFetchError`` as on the reference."""
    joins: list[tuple[Any, ...]] = []
    orig = HostControl._join

    def keep(*args: Any) -> None:
        joins.append(args)
        orig(*args)

    monkeypatch.setattr(HostControl, "_join", staticmethod(keep))
    g = tn.Graph()
    inside: list[tn.Tensor] = []
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        with tn.device("cpu:0"):
            p = x > 0.0

        def yes() -> tn.Tensor:
            with tn.device("cpu:1"):
                inside.append(tn.multiply(x, 10.0, name="inyes"))
                return inside[0] + 1.0

        def no() -> tn.Tensor:
            with tn.device("cpu:2"):
                return x - 10.0

        z = tn.cond(p, yes, no)
    with pytest.raises(tn.DeadFetchError):
        tn.Session(g).run([z, inside[0]], {x: -1.0})
    sess = tn.Session(g, backend="fast", devices=D3, fallback=False)
    with pytest.raises(tn.DeadFetchError, match="inyes"):
        sess.run([z, inside[0]], {x: -1.0})
    (hc, b, benv, env, exports), = joins
    assert b is False and key(inside[0]) in exports
    env2 = env.child()
    HostControl._join(hc, b, benv, env2, exports)
    assert key(inside[0]) in env2.vals and env2.vals[key(inside[0])] is DEAD


@pytest.mark.parametrize("sleep", [False, True])
def test_a_loop_variable_whose_next_value_is_a_constant_enters_as_a_device_value(sleep: bool) -> None:
    """Law: a loop variable whose NextIteration value is known at trace time (a constant of the body)
    enters the next iteration as a device value, on the host thread and from per-device workers
    alike (there a ``Lazy`` marked as data), so each segment compiles once for the loop, not once
    for the constant's iteration as well."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")

        def body(i: tn.Tensor, y: tn.Tensor, s: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = y * s
                if sleep:
                    y2 = tn.sleep(y2, 0.0)
                s2 = tn.constant(1.5)
            return i + 1, y2, s2

        with tn.device("cpu:0"):
            i, y, s = tn.while_loop(lambda i, y, s: i < 4, body, [tn.constant(0), x, tn.constant(2.0)],
                                    name="span")
    sess = _both(g, [i, y, s], {x: 1.0}, D2, whole_program="never")
    stats = sess.last_result.stats
    assert stats["host_iterations"] == {"span/frame0": 4}
    assert stats["compiles"] == stats["segments"]


@pytest.mark.parametrize("swap", [False, True])
def test_when_a_pushing_loop_ends_its_stacks_are_noted_and_its_newest_chunk_stays(swap: bool) -> None:
    """Law: when a host loop that pushes stacks ends, the stores note what they hold (the memory
    report's bytes: all on the device without ``swap_memory``, the spilled chunks on the host with
    it), and the newest spilled chunk of each stack stays on the device for the backward loop,
    which brings back one chunk fewer per stack than went to the host."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        w = tn.placeholder(tn.float32, shape=[], name="w")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                h = tn.tanh(y * w)
            return i + 1, h

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < 12, body, [tn.constant(0), x], name="fwd", swap_memory=swap)
        dx, dw = tn.gradients(y, [x, w])
    sess = _both(g, [y, dx, dw], {x: np.float32(0.3), w: np.float32(0.7)}, D2, stack_chunk=4)
    (rec,) = sess.backend.memory_records()
    assert rec["loop"] == "fwd" and rec["stacks"] >= 1
    if swap:
        assert rec["chunks_to_host"] > 0 and rec["host_bytes"] > 0
        assert rec["chunks_from_host"] == rec["chunks_to_host"] - rec["stacks"]
    else:
        assert rec["host_bytes"] == 0 and rec["device_bytes"] == rec["peak_device_bytes"] > 0


def test_a_loops_exit_side_runs_in_the_scope_of_its_last_header(monkeypatch: pytest.MonkeyPatch) -> None:
    """Law: the nodes between a loop's Switch and its Exit (the exit side, which a raw loop may have)
    run once, after the last predicate read, on the values of the last header, and the Exit passes
    on what they give; the walk that traces an unrun loop (``_learn_steps``) traces the exit side
    too, and its Exit is live."""
    seen = _captured(monkeypatch, "loop")
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        with tn.device("cpu:0"):
            e = raw.enter(x, "loop")
            ten = raw.enter(tn.constant(10.0), "loop", is_constant=True)
            two = raw.enter(tn.constant(2.0), "loop", is_constant=True)
            m, _ = raw.merge([e, raw.BACK_EDGE])
            f, t = raw.switch(m, raw.loop_cond(m < ten))
        with tn.device("cpu:1"):
            nxt = t * two
            out = f - two  # the exit side
        with tn.device("cpu:0"):
            raw.close_back_edge(m, raw.next_iteration(nxt))
            y = raw.exit(out)
    sess = _both(g, [y], {x: 1.0}, D2)
    assert sess.last_result.stats["host_iterations"] == {"loop": 4}
    (run, hl, env), = seen
    assert hl.exit_side
    walked = env.child()
    run._learn_steps([hl], walked)
    assert walked.vals[key(y)] is not DEAD


def test_a_loops_merge_index_says_the_enter_first_and_the_next_iteration_after() -> None:
    """Law ([E-Merge-Live] at a loop's header): the index output of a loop variable's Merge is the
    Enter's slot at the first iteration and the NextIteration's after; a body that reads it sees
    the same sequence on the host-driven loop as on the reference."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        with tn.device("cpu:0"):
            e = raw.enter(x, "loop")
            hundred = raw.enter(tn.constant(100.0), "loop", is_constant=True)
            two = raw.enter(tn.constant(2.0), "loop", is_constant=True)
            tens = raw.enter(tn.constant(10.0), "loop", is_constant=True)
            m, idx = raw.merge([e, raw.BACK_EDGE])
            p = raw.loop_cond(m < hundred)
            f, t = raw.switch(m, p)
            _, t_i = raw.switch(idx, p)
        with tn.device("cpu:1"):
            nxt = t * two + tn.cast(t_i, tn.float32) * tens
        with tn.device("cpu:0"):
            raw.close_back_edge(m, raw.next_iteration(nxt))
            y = raw.exit(f)
    sess = _both(g, [y], {x: 1.0}, D2)
    assert sess.last_result.stats["host_iterations"] == {"loop": 5}


def test_a_loop_of_n_trips_runs_under_max_iterations_n_and_stops_under_n_minus_1() -> None:
    """Law: ``max_iterations`` bounds the bodies a host loop runs: a loop of ``n`` trips runs under
    ``max_iterations=n`` and is a ``NonTerminationError`` under ``n - 1`` (before its last body), as
    on the reference."""
    n = 3
    g, x, i, y = _spanning(n)
    sess = tn.Session(g, backend="fast", devices=D2, fallback=False, whole_program="never")
    for s in (tn.Session(g), sess):
        with pytest.raises(tn.NonTerminationError, match=f"max_iterations={n - 1}"):
            s.run(y, {x: 1.0}, max_iterations=n - 1)
    _both(g, [i, y], {x: 1.0}, D2, whole_program="never")
    assert float(sess.run(y, {x: 1.0}, max_iterations=n)) == 2.0**n


def test_a_host_known_loop_variable_enters_on_the_loops_home_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Law: a loop variable known on the host (the counter's constant 0) enters the loop as a device
    value on the loop's home device (that of its Merges, here cpu:1, not JAX's default device), and
    the environment says so: every device value of an iteration's Merges lives where the environment
    records it, which is what spares a segment there a copy at each call."""
    entered = _captured(monkeypatch, "_enter_iteration", result=True)
    g, x, i, y = _spanning(3, home="cpu:1", on="cpu:2")
    _both(g, [i, y], {x: 3.0}, ["cpu:1", "cpu:2"], whole_program="never")
    assert entered
    counter = key(entered[0][1].region.loop_vars[0][1].outputs[0])  # the Merge of ``i``, entered from 0
    assert entered[0][4].where[counter] == entered[0][1].home != tn.devices.parse("cpu:0").name
    for run, hl, _, _, henv in entered:
        for _, m, _, _, _ in hl.region.loop_vars:
            v, w = henv.vals[key(m.outputs[0])], henv.where.get(key(m.outputs[0]))
            assert w is not None and v.devices() == {run.jdev[w]}
