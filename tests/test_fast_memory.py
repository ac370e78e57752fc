"""Gradient stacks of a ``swap_memory=True`` loop stay within the configured chunk on the device,
whatever the trip count.

The loop ``y <- y * x`` run N = 100,000 times gives ``y = x**N`` and ``dy/dx = N x**(N-1)``; its
gradient needs every ``y_k`` (pushed by the forward loop, popped in reverse by the backward loop).
With ``stack_chunk=C`` the device holds at most C entries per stack plus the chunk whose copy to the
host is in flight, the rest is swapped to host memory in about N / C chunks, and the gradient is the
same as with one chunk big enough for all.
The numbers asserted are the executor's own accounting (``RunResult.stats``).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import graphs
import numpy as np
import pytest
from graphs import batch_loop
from hypothesis import given
from hypothesis import strategies as st

import turnout as tn

pytest.importorskip("jax")

N = 100_000
CHUNK = 2_000
#: the default capacity ladder of the default chunk (1024 entries)
LADDER = [128, 160, 200, 250, 313, 392, 490, 613, 767, 959, 1024]


def test_device_stack_memory_is_bounded_by_the_chunk() -> None:
    """The staged path (a run past ``host_stack_limit`` pushes, which the fused call would hold in host
    memory) swaps full chunks out and holds at most two on the device."""
    g, x, n, y, dx = graphs.power_loop(swap_memory=True)
    xv = 1.0 + 1e-6
    sess = tn.Session(g, backend="fast", stack_chunk=CHUNK, host_stack_limit=CHUNK)
    yv, dv = sess.run([y, dx], {x: xv, n: N})
    stats = sess.last_result.stats
    np.testing.assert_allclose([yv, dv], [xv**N, N * xv ** (N - 1)], rtol=1e-9)

    stacks = sum(1 for node in g.nodes if node.op == "StackNew")
    per_entry = 8 + 4  # a float64 value and its int32 iteration index (one enclosing loop)
    assert stacks >= 1
    assert 0 < stats["peak_device_stack_bytes"] <= 2 * stacks * CHUNK * per_entry  # filling + in flight
    assert stats["stack_chunks_swapped"] >= N // CHUNK - 1
    assert stats["peak_host_stack_bytes"] >= (N - CHUNK) * 8

    # the device footprint does not grow with the trip count
    sess.run([y, dx], {x: xv, n: 10 * CHUNK})
    assert sess.last_result.stats["peak_device_stack_bytes"] == stats["peak_device_stack_bytes"]

    # the loop without swap_memory, one chunk for everything: no swaps, the same gradient
    g, x, n, y, dx = graphs.power_loop(swap_memory=False)
    whole = tn.Session(g, backend="fast", stack_chunk=N + 1)
    yw, dw = whole.run([y, dx], {x: xv, n: N})
    assert whole.last_result.stats["stack_chunks_swapped"] == 0
    assert whole.last_result.stats["peak_device_stack_bytes"] > stats["peak_device_stack_bytes"]
    assert float(yw) == float(yv) and float(dw) == float(dv)


def test_stack_buffers_held_between_runs_can_be_freed() -> None:
    """By default the stack chunk stays on the device for the next run; ``keep_stack_buffers=False``
    frees it after every run and ``release_buffers()`` frees it on demand, with the same results."""
    g, x, n, y, dx = graphs.power_loop()
    feed = {x: 1.5, n: 20}
    chunk = 64
    kept = tn.Session(g, backend="fast", stack_chunk=chunk, inside_stack_bytes=0)  # every stack kept
    want = kept.run([y, dx], feed)
    np.testing.assert_allclose(want, [1.5**20, 20 * 1.5**19])
    held = kept.backend.held_bytes()
    # at least one stack of float64 values (the fused stage keeps no index record between runs)
    assert held >= chunk * 8
    kept.backend.release_buffers()
    assert kept.backend.held_bytes() == 0
    np.testing.assert_allclose(kept.run([y, dx], feed), want)  # runs again after a release
    assert kept.backend.held_bytes() == held

    freed = tn.Session(g, backend="fast", stack_chunk=chunk, keep_stack_buffers=False)
    for _ in range(2):
        np.testing.assert_allclose(freed.run([y, dx], feed), want)
        assert freed.backend.held_bytes() == 0
    with pytest.raises(ValueError, match="keep_stack_buffers"):
        tn.Session(g, backend="fast", keep_stack_buffers="no")


def test_a_run_without_stacks_reports_none_after_one_with_them() -> None:
    """``memory_report(session)`` is what the *last* run held: a run of the forward loop alone (no
    gradient stacks, one compiled call) after a gradient run reports no stack records, on its first
    run and on the lane that repeats it."""
    g, x, n, y, dx = graphs.power_loop()
    sess = tn.Session(g, backend="fast")
    sess.run([y, dx], {x: 1.5, n: 20})
    assert len(tn.memory_report(sess).records) == 1
    for route in ("general", "lane"):
        np.testing.assert_allclose(sess.run(y, {x: 1.5, n: 20}), 1.5**20)
        assert sess.last_result.stats["route"] == route
        assert tn.memory_report(sess).records == []


def test_stacks_of_shapes_known_only_when_traced_are_kept_from_the_first_run() -> None:
    """A loop over a batch of ``None`` rows pushes values whose shapes the graph does not know, but
    every run of one plan (one feed signature) does: before its fused stage compiles, the plan traces
    it and takes the shapes the trace saw as static (``FusedAttempts._learn_stack_shapes``), so its
    one compile (two traces, one XLA compile) takes those stacks allocated before the call; the
    buffers are kept between runs and every later run repeats on a lane (the session's, or the
    backend's hot route) and compiles nothing. A plan of another batch learns its own. The values are
    the reference's at every run."""
    g, x, w, loss, gx, gw = batch_loop(3, 6)
    assert any(nd.op == "StackPush" and nd.inputs[2].shape[0] is None for nd in g.nodes)
    rng = np.random.default_rng(0)
    wv = rng.standard_normal((3, 3)).astype(np.float32) * 0.5
    ref = tn.Session(g)
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0)  # every static stack kept, none made inside
    for rows in (4, 7):
        feed = {x: rng.standard_normal((rows, 3)).astype(np.float32), w: wv}
        want = ref.run([loss, gx, gw], feed)
        routes, compiles = [], []
        for _ in range(4):
            before = sess.backend.compile_count
            for a, b in zip(sess.run([loss, gx, gw], feed), want, strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
            routes.append(sess.last_result.stats["route"])
            compiles.append(sess.backend.compile_count - before)
        assert routes[0] == "general" and set(routes[1:]) <= {"hot", "lane"}, routes
        assert compiles == [2, 0, 0, 0], compiles  # traced to learn the shapes, then traced with them
        assert sess.backend.held_bytes() > 0


# ---- the fused attempt's capacity ladder (``FastBackend._run_fused_sized``) ----------------------------
def test_the_capacity_ladder_of_a_chunk() -> None:
    from turnout.fast.plan import capacity_ladder

    assert capacity_ladder(1024) == LADDER  # the default: ratio 1.25 from 128
    assert capacity_ladder(8192, ratio=2) == [128, 256, 512, 1024, 2048, 4096, 8192]
    assert capacity_ladder(1000, ratio=2) == [128, 256, 512, 1000]  # the top is the chunk, whatever it is
    assert capacity_ladder(128) == [128] and capacity_ladder(64) == [64]
    assert capacity_ladder(1024, first=128, ratio=8) == [128, 1024]  # the ladder before issue 37
    assert capacity_ladder(1024, first=100, ratio=1.5) == [100, 150, 225, 338, 507, 761, 1024]
    assert capacity_ladder(20, first=2, ratio=1.1) == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 20]
    # the bound on compilations the options document: 1 + ceil(log(top / first) / log(ratio)) rungs
    for top, first, ratio in ((1024, 128, 2.0), (8192, 128, 2.0), (1000, 128, 2.0), (1024, 100, 1.5), (5000, 7, 1.3)):
        assert len(capacity_ladder(top, first, ratio)) <= 1 + math.ceil(math.log(top / first) / math.log(ratio))


def _entry_bytes(sess: tn.Session) -> int:
    """The bytes per entry of the stacks a session keeps, from the backend's own report."""
    (held,) = sess.backend.stack_buffers()
    return sum(held["stacks"].values()) // held["capacity"]


def test_stack_buffers_are_sized_to_the_runs_that_use_them() -> None:
    """With the default ``stack_chunk`` (1024), a loop of 50 iterations runs and keeps its stacks at
    the first rung (128 entries); a run of 200 climbs to 200, one of 500 to 613 (one compilation per
    rung used), and later runs of any length up to 613 compile nothing. Every rung gives the
    reference backend's values, and the backend keeps the buffers of one rung: capacity times the
    bytes of an entry."""
    g, x, n, y, dx = graphs.power_loop()
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0)  # every stack kept, however small
    ref = tn.Session(g, backend="reference")

    def run(trips: int) -> None:
        feed = {x: 1.001, n: trips}
        np.testing.assert_allclose(sess.run([y, dx], feed), ref.run([y, dx], feed), rtol=1e-12)
        assert sess.last_result.stats["fused"] is True
        assert sess.last_result.stats["stack_ladder"] == LADDER

    run(50)
    assert sess.last_result.stats["stack_capacity"] == 128
    entry = _entry_bytes(sess)
    assert entry >= 8  # at least one stack of float64 values (no index record is kept by the fused stage)
    assert sess.backend.stack_buffers() == [{"capacity": 128, "ladder": LADDER,
                                             "stacks": sess.backend.stack_buffers()[0]["stacks"]}]
    assert sess.backend.held_bytes() == 128 * entry
    compiles = sess.backend.compile_count
    run(100)
    assert sess.backend.compile_count == compiles  # a trip count on a compiled rung
    for trips, rung, climbed in ((200, 200, 1), (500, 613, 1), (129, 613, 0)):
        run(trips)
        assert sess.last_result.stats["stack_capacity"] == rung
        assert sess.backend.compile_count == compiles + climbed  # one compilation per rung used
        compiles = sess.backend.compile_count
        (held,) = sess.backend.stack_buffers()  # the lower rungs' buffers are gone
        assert held["capacity"] == rung and sess.backend.held_bytes() == rung * entry
    run(50)
    assert sess.backend.compile_count == compiles
    assert sess.last_result.stats["stack_capacity"] == 613  # (it descends only after several short runs)


def test_every_rung_of_a_fine_ladder_gives_the_same_values() -> None:
    """A ladder of ratio 1.5 from 16 entries: each trip count runs on the first rung that holds it
    (gone to at once by a run that starts below), with the reference's values."""
    g, x, n, y, dx = graphs.power_loop()
    ref = tn.Session(g, backend="reference")
    ladder = [16, 24, 36, 54, 81, 100]
    for trips, rung in ((10, 16), (17, 24), (30, 36), (54, 54), (55, 81), (99, 100)):
        sess = tn.Session(g, backend="fast", stack_chunk=100, stack_first_rung=16, stack_rung_ratio=1.5,
                          inside_stack_bytes=0)
        feed = {x: 0.999, n: trips}
        np.testing.assert_allclose(sess.run([y, dx], feed), ref.run([y, dx], feed), rtol=1e-12)
        stats = sess.last_result.stats
        assert stats["fused"] and stats["stack_capacity"] == rung and stats["stack_ladder"] == ladder
        assert [b["capacity"] for b in sess.backend.stack_buffers()] == [rung]
        assert sess.backend.held_bytes() == rung * _entry_bytes(sess)
    # past the top rung: the staged path, at the chunk, as without a ladder
    sess = tn.Session(g, backend="fast", stack_chunk=100, stack_first_rung=16, stack_rung_ratio=1.5)
    feed = {x: 0.999, n: 150}
    np.testing.assert_allclose(sess.run([y, dx], feed), ref.run([y, dx], feed), rtol=1e-12)
    assert sess.last_result.stats["fused"] is False and sess.last_result.stats["stack_capacity"] == 100


def test_an_attempt_that_outgrows_its_rung_goes_at_once_to_the_rung_that_holds_it() -> None:
    """The attempt on the first rung counts on past its capacity and reports the most entries its
    stacks held (``stack_mark``): the run goes straight to the rung that holds them, and no rung
    between is compiled. A run past the top rung goes to the stages after that one attempt, with the
    compilations of a ladder of one rung."""
    g, x, n, y, dx = graphs.power_loop()
    ref = tn.Session(g, backend="reference")
    opts = {"stack_chunk": 100, "stack_first_rung": 16, "stack_rung_ratio": 1.5, "inside_stack_bytes": 0}
    sess = tn.Session(g, backend="fast", **opts)
    feed = {x: 0.999, n: 99}
    np.testing.assert_allclose(sess.run([y, dx], feed), ref.run([y, dx], feed), rtol=1e-12)
    stats = sess.last_result.stats
    assert stats["stack_capacity"] == 100 and stats["stack_mark"] == 99  # one entry per iteration
    assert sess.backend.compile_count == 2  # rungs 16 and 100; not 24, 36, 54 and 81
    for trips in (150, 1000):  # past the top: one attempt, then the stages, as one rung would
        sess = tn.Session(g, backend="fast", **opts)
        one = tn.Session(g, backend="fast", **{**opts, "stack_ladder": False})
        feed = {x: 0.999, n: trips}
        want = ref.run([y, dx], feed)
        for s in (sess, one):
            np.testing.assert_allclose(s.run([y, dx], feed), want, rtol=1e-12)
            assert s.last_result.stats["fused"] is False
        assert sess.backend.compile_count == one.backend.compile_count


def test_the_backend_keeps_the_buffers_of_the_plan_that_ran_last_alone() -> None:
    """A run past the top rung goes from the first rung's attempt straight to the stages, which keep
    the plan's own buffers (at the chunk) and drop the rung's; the next run takes the stages too (the
    last one swapped), and the one after it fits the first rung again and drops the stages' buffers.
    At every step the backend holds the buffers of the plan that ran, and no others."""
    g, x, n, y, dx = graphs.power_loop()
    ref = tn.Session(g, backend="reference")
    sess = tn.Session(g, backend="fast", stack_chunk=100, stack_first_rung=16, stack_rung_ratio=1.5,
                      inside_stack_bytes=0)
    entry = 0
    for trips, fused, rung in ((10, True, 16), (150, False, 100), (10, False, 100), (10, True, 16), (10, True, 16)):
        feed = {x: 0.999, n: trips}
        np.testing.assert_allclose(sess.run([y, dx], feed), ref.run([y, dx], feed), rtol=1e-12)
        stats = sess.last_result.stats
        assert stats["fused"] is fused and stats["stack_capacity"] == rung
        assert [b["capacity"] for b in sess.backend.stack_buffers()] == [rung]
        entry = entry or _entry_bytes(sess)  # (the stages keep each stack's index record too)
        assert (sess.backend.held_bytes() == rung * entry) is fused


def _nested_power(depth_first: bool = True) -> tuple[tn.Graph, Any, Any, Any, Any, Any]:
    """``y = x ** (n * m)`` by a loop of ``m`` iterations inside one of ``n`` (both fed), and dy/dx."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        m = tn.placeholder(tn.int32, [], name="m")

        def outer(i: Any, y: Any) -> Any:
            _, z = tn.while_loop(lambda j, z: j < m, lambda j, z: (j + 1, z * x), [tn.constant(0), y])
            return i + 1, z

        _, y = tn.while_loop(lambda i, y: i < n, outer, [tn.constant(0), tn.ones_like(x)])
        (dx,) = tn.gradients(y, [x])
    return g, x, n, m, y, dx


def test_the_mark_counts_the_entries_of_a_nested_loop() -> None:
    """A loop inside a loop pushes its entries once per inner iteration of every outer one: the mark
    is their product (the inner loop's stack is the fullest), and the run is on the rung that holds
    it, with the reference's values."""
    g, x, n, m, y, dx = _nested_power()
    ref = tn.Session(g, backend="reference")
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0, stack_rung_ratio=2)  # (128, 256, 512, 1024)
    for outer, inner, rung in ((3, 4, 128), (7, 30, 256), (20, 40, 1024), (2, 5, 1024)):
        feed = {x: 1.0001, n: outer, m: inner}
        np.testing.assert_allclose(sess.run([y, dx], feed), ref.run([y, dx], feed), rtol=1e-12)
        stats = sess.last_result.stats
        assert stats["fused"] is True and stats["stack_mark"] == outer * inner
        assert stats["stack_capacity"] == rung


def test_the_mark_sees_a_stack_filled_and_emptied_inside_an_outer_loop() -> None:
    """Gradient descent written as a loop: each outer iteration runs a loop of ``m`` iterations and its
    gradient, so the inner loop's stack fills and empties within one outer iteration and is empty
    whenever the root frame could look. The mark still says ``m`` (it is taken as each loop leaves,
    at any depth), and the run is on the rung that holds it."""
    g = tn.Graph()
    with g.as_default():
        x0 = tn.placeholder(tn.float64, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        m = tn.placeholder(tn.int32, [], name="m")

        def step(i: Any, x: Any) -> Any:
            _, y = tn.while_loop(lambda j, z: j < m, lambda j, z: (j + 1, z * x), [tn.constant(0), tn.ones_like(x)])
            (dx,) = tn.gradients(y, [x])
            return i + 1, x - 0.01 * dx

        _, xf = tn.while_loop(lambda i, x: i < n, step, [tn.constant(0), x0])
    ref = tn.Session(g, backend="reference")
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0, stack_rung_ratio=2)
    for outer, inner, rung in ((3, 50, 128), (4, 300, 512)):
        feed = {x0: 0.99, n: outer, m: inner}
        np.testing.assert_allclose(sess.run(xf, feed), ref.run(xf, feed), rtol=1e-12)
        stats = sess.last_result.stats
        assert stats["fused"] is True and stats["stack_mark"] == inner and stats["stack_capacity"] == rung


def test_a_plan_starts_lower_after_runs_that_fit_a_lower_rung() -> None:
    """After a long run, a plan holds the long run's rung until ``stack_descend_after`` runs in a row
    fitted a lower one; the next run starts there (compiling nothing where the rung was compiled
    before) and the backend keeps only its buffers. Repeated runs of one length go through the lane,
    which reads the mark as the general path does."""
    g, x, n, y, dx = graphs.power_loop()
    ref = tn.Session(g, backend="reference")
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0, stack_descend_after=3, stack_rung_ratio=2)

    def run(trips: int) -> dict[str, Any]:
        feed = {x: 1.001, n: trips}
        np.testing.assert_allclose(sess.run([y, dx], feed), ref.run([y, dx], feed), rtol=1e-12)
        return dict(sess.last_result.stats)

    assert run(50)["stack_capacity"] == 128
    entry = _entry_bytes(sess)
    assert run(500)["stack_capacity"] == 512
    compiles = sess.backend.compile_count
    got = [run(50) for _ in range(5)]
    assert [s["stack_capacity"] for s in got] == [512, 512, 512, 128, 128]
    assert [s["stack_mark"] for s in got] == [50] * 5
    assert "lane" in [s.get("route") for s in got[:3]]  # (a repeated run's own route)
    assert sess.backend.compile_count == compiles
    assert sess.backend.held_bytes() == 128 * entry
    # alternating lengths keep the longer rung: every window holds a long run
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0, stack_rung_ratio=2)
    caps = [run(t)["stack_capacity"] for t in (500, 50) * 6]
    assert caps == [512] * 12


class _RungModel:
    """What ``FastBackend`` should do with a run of ``t`` iterations of ``graphs.power_loop`` (one
    entry per iteration): past the ladder's top, or right after a staged run that moved chunks, the
    stages; else the fused program on the smallest rung holding the marks of the last ``window``
    fused runs and its own."""

    def __init__(self, ladder: list[int], window: int) -> None:
        self.ladder, self.recent, self.predict = ladder, deque(maxlen=window), False

    def run(self, t: int) -> tuple[bool, int]:
        """(fused, stack_capacity) the run should report."""
        top = self.ladder[-1]
        if self.predict or t > top:
            self.predict = t > top  # (a staged run past the chunk moves chunks: the next skips the attempt)
            return False, top
        need = max([*self.recent, t])
        self.recent.append(t)
        return True, next(c for c in self.ladder if c >= need)


_MARKED: dict[int, tuple[tn.Session, _RungModel, Any]] = {}


@given(trips=st.lists(st.sampled_from([0, 1, 7, 8, 9, 13, 18, 19, 27, 30, 40, 41, 55]), min_size=1, max_size=8),
       window=st.integers(1, 3))
def test_each_run_takes_the_rung_its_plans_marks_say(trips: list[int], window: int) -> None:
    """Any sequence of trip counts, on a session that keeps running across examples (whatever came
    before is in the model too): each run has ``x**n``'s value and gradient, reports its trip count as
    its mark, and runs where the model of the marks' window says (``_RungModel``), through the lane
    or the general path alike, keeping the buffers of that run's plan alone."""
    if window not in _MARKED:
        g, x, n, y, dx = graphs.power_loop()
        sess = tn.Session(g, backend="fast", stack_chunk=40, stack_first_rung=8, stack_rung_ratio=1.5,
                          stack_descend_after=window, inside_stack_bytes=0)
        _MARKED[window] = (sess, _RungModel([8, 12, 18, 27, 40], window), (x, n, y, dx))
    sess, model, (x, n, y, dx) = _MARKED[window]
    for t in trips:
        got = sess.run([y, dx], {x: 1.01, n: t})
        np.testing.assert_allclose(got, [1.01**t, t * 1.01 ** (t - 1)], rtol=1e-12)
        stats = sess.last_result.stats
        fused, capacity = model.run(t)
        assert (stats["fused"], stats["stack_capacity"]) == (fused, capacity), (t, stats.get("route"))
        if fused:
            assert stats["stack_mark"] == t
        # the backend keeps the buffers of the plan that ran (a rung, or the stages at the chunk) alone
        assert [b["capacity"] for b in sess.backend.stack_buffers()] in ([capacity], [])


def test_stack_marks_choose_the_rung_that_holds_the_window() -> None:
    """``StackMarks``: the smallest rung holding every mark of the last ``window`` runs (the first rung
    before any), the top past them all."""
    from turnout.fast.stack_sizes import StackMarks

    marks = StackMarks([16, 24, 36, 100], window=2)
    assert marks.start() == 16
    assert marks.note(17) == 24 and marks.note(3) == 24  # (17 is still in the window)
    assert marks.note(5) == 16
    assert marks.note(500) == 100  # (past every rung: the top, whose attempt sends the run to the stages)
    marks = StackMarks([16, 24, 36, 100], window=2)
    marks.pending = 30  # (a run a lane handed back: the general path starts where it fits)
    assert marks.start() == 36 and marks.note(30) == 36 and marks.pending == 0
    marks.pending = 200  # (one past the top: the stages run it, and it is never noted)
    assert marks.begin() == 100 and marks.pending == 0 and marks.start() == 36


def test_one_rung_options_keep_the_chunk() -> None:
    """``stack_ladder=False``, and a first rung at the chunk, run every attempt at ``stack_chunk``."""
    g, x, n, y, dx = graphs.power_loop()
    for opts in ({"stack_ladder": False}, {"stack_first_rung": 1024}):
        sess = tn.Session(g, backend="fast", inside_stack_bytes=0, **opts)
        np.testing.assert_allclose(sess.run([y, dx], {x: 1.5, n: 5}), [1.5**5, 5 * 1.5**4])
        assert sess.last_result.stats["stack_capacity"] == 1024
        assert sess.last_result.stats["stack_ladder"] == [1024]
        assert [b["capacity"] for b in sess.backend.stack_buffers()] == [1024]


def test_precompile_staged_keeps_one_rung() -> None:
    """``precompile_staged=True`` promises that no run after the first compiles: its plans have no
    lower rung to climb from."""
    g, x, n, y, dx = graphs.power_loop()
    sess = tn.Session(g, backend="fast", precompile_staged=True)
    sess.run([y, dx], {x: 1.001, n: 50})
    assert sess.last_result.stats["stack_capacity"] == 1024
    compiles = sess.backend.compile_count
    sess.run([y, dx], {x: 1.001, n: 900})
    assert sess.backend.compile_count == compiles


def test_freed_stack_memory_goes_back_where_the_platform_allows() -> None:
    """``return_freed_memory`` (called when a climb drops a rung's buffers) trims glibc's heaps on
    the CPU and does nothing elsewhere; without glibc it does nothing either."""
    from turnout.fast import stacks as stk

    stk.return_freed_memory("cpu")
    stk.return_freed_memory("gpu")
