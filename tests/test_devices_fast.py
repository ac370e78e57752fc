"""The fast partitioned executor (``tn.Session(graph, backend="fast", devices=[...])``) on forced CPU devices.

T7 on this executor: generated programs (gradients included) under random placements over 2 to 4
devices give the values and error types of the unpartitioned reference run. Closed-form cases check
each tier: a loop spanning two devices is driven by the host, a loop inside one partition stays one
compiled ``lax.while_loop``, a cond whose branches sit on another device than its predicate is
decided on the host, gradient stacks stay on the device of their pushes, Variables persist, the
``parallel_iterations`` window bounds the iterations in flight, and a trace shows device B's iteration
i overlapping device A's iteration i+1. (tests/conftest.py forces eight host devices.)
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from graphs import inner_loop_on_the_second_device, vector_loop_round_robin
from hypothesis import given, settings
from hypothesis import strategies as st
from programs import Built, assert_same_outcome, build, to_source
from strategies import PlacementDraw, gradient_cases, placements, programs_with_inputs

import turnout as tn
from turnout.devices import canonical
from turnout.devices.plan_run import PlanRun
from turnout.fast.timeline import Span, Timeline
from turnout.session import RunOptions

D2 = ["cpu:0", "cpu:1"]
D4 = ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
GUARD = dict(max_iterations=1_000)
BUDGET = settings.default.max_examples


def check_fast_partitioned(graph: tn.Graph, fetches: list[tn.Tensor], feeds: dict[tn.Tensor, Any],
                           draw: PlacementDraw, what: str = "", stack_chunk: int = 1024,
                           **options: Any) -> tn.Session:
    """T7 on the fast partitioned executor: the values (or the error type) of the unpartitioned
    reference run, under the drawn placement (``options``: more of the backend's options)."""
    sess = tn.Session(graph, backend="fast", devices=list(draw.devices), requests=draw.requests,
                      stack_chunk=stack_chunk, **options)

    def got() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a fallback run is still checked for its values
            return sess.run(fetches, feeds, options=RunOptions(**GUARD))

    assert_same_outcome(lambda: tn.Session(graph).run(fetches, feeds, options=RunOptions(**GUARD)), got,
                        f"{what}fast partitioned run ({len(draw.devices)} devices)")
    return sess


@settings(max_examples=max(1, BUDGET // 10))
@given(programs_with_inputs(loops=True), st.data())
def test_T7_fast_partitioned_equals_reference(pi: tuple[Any, dict[str, Any]], data: st.DataObject) -> None:
    p, inputs = pi
    b: Built = build(p)
    draw = data.draw(placements(b.graph))
    check_fast_partitioned(b.graph, b.fetches, b.feed_dict(inputs), draw, to_source(p) + "\n")


@settings(max_examples=max(1, BUDGET // 20))
@given(st.data())
def test_T7_fast_partitioned_gradient_programs(data: st.DataObject) -> None:
    case = data.draw(gradient_cases())
    draw = data.draw(placements(case.graph))
    check_fast_partitioned(case.graph, case.grads, case.feeds, draw, to_source(case.program) + "\n", stack_chunk=2)


@settings(max_examples=max(1, BUDGET // 20))
@given(programs_with_inputs(loops=True), st.data())
def test_T7_with_every_segment_dispatched_from_per_device_workers(pi: tuple[Any, dict[str, Any]],
                                                                   data: st.DataObject) -> None:
    """The threaded dispatch that plans with host callbacks use, forced on for every plan
    (``threads="always"``): the same values and errors."""
    p, inputs = pi
    b: Built = build(p)
    draw = data.draw(placements(b.graph))
    sess = check_fast_partitioned(b.graph, b.fetches, b.feed_dict(inputs), draw, to_source(p) + "\n",
                                  threads="always")
    plans = list(sess.backend._plans.values())
    assert all(pl.threaded for pl in plans if pl.schedule.segments)
    sess.close()


def test_a_dead_fetch_of_a_threaded_run_raises_as_on_the_host_thread() -> None:
    """A fetch that a compiled cond leaves dead carries a live flag out of its segment; a run whose
    segments are dispatched from per-device workers reads that flag from the worker's result
    (``host_env.Lazy``) as the host thread reads it: ``DeadFetchError``, never the zeros that stand
    for the dead value inside the compiled call. A live one is the reference's value."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        c = tn.placeholder(tn.bool, [], name="c")
        with tn.device("cpu:0"):
            _, t = tn.raw.switch(x, c)
            y = t * 2.0
        with tn.device("cpu:1"):
            z = x + 1.0
    for threads in ("auto", "always"):
        sess = tn.Session(g, backend="fast", devices=D2, fallback=False, threads=threads, whole_program="never")
        np.testing.assert_allclose(sess.run([y, z], {x: 3.0, c: True}), [6.0, 4.0])
        # (the message names the tensor, its node and the user's line, as on every backend)
        with pytest.raises(tn.DeadFetchError, match=r'tensor Mul:0 is dead: Mul node "Mul" \(created at test_devices'):
            sess.run([y, z], {x: 3.0, c: False})
        sess.close()


# ---- closed-form cases -----------------------------------------------------------------------------
def _spanning_loop(n_default: int = 10, parallel_iterations: int = 10) -> tuple[tn.Graph, Any, Any, Any]:
    """``y = x * 2**n`` by a loop whose counter sits on cpu:0 and whose multiply sits on cpu:1."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        n = tn.constant(n_default, name="n")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = y * 2.0
            return i + 1, y2

        with tn.device("cpu:0"):
            i, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), x],
                                 parallel_iterations=parallel_iterations, name="span")
    return g, x, i, y


def test_loop_spanning_two_devices_is_host_driven() -> None:
    g, x, i, y = _spanning_loop()
    sess = tn.Session(g, backend="fast", devices=D2)
    got = sess.run([i, y], {x: 3.0})
    assert int(got[0]) == 10 and float(got[1]) == 3.0 * 2**10
    stats = sess.last_result.stats
    assert stats["executor"] == "fast partitioned" and stats["tier"] == "host-driven"
    assert stats["host_loops"] == 1 and stats["host_iterations"] == {"span/frame0": 10}
    assert all(v >= 1 for v in stats["segments_per_device"].values())
    # equal to the partitioned reference executor on the same placement
    ref = tn.Session(g, devices=D2).run([i, y], {x: 3.0})
    np.testing.assert_equal(got, ref)
    # a new fed value (and a new trip count) reuses the compiled segments
    compiles = sess.backend.compile_count
    assert float(sess.run([i, y], {x: 1.0})[1]) == 2.0**10
    assert sess.backend.compile_count == compiles


def test_loop_inside_one_partition_is_one_compiled_while_loop() -> None:
    """A loop whose nodes all sit on cpu:1, between ops on cpu:0: one lax.while_loop in one segment,
    no host iteration at all."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        a = x + 1.0
        with tn.device("cpu:1"):
            _, y = tn.while_loop(lambda i, y: i < 100, lambda i, y: (i + 1, y * 1.01), [tn.constant(0), a])
        with tn.device("cpu:0"):
            z = y - 1.0
    sess = tn.Session(g, backend="fast", devices=D2)
    got = float(sess.run(z, {x: 1.0}))
    assert got == pytest.approx(float(tn.Session(g).run(z, {x: 1.0})), rel=1e-6)
    stats = sess.last_result.stats
    assert stats["tier"] == "compiled" and stats["compiled_loops"] == 1 and stats["host_loops"] == 0
    assert stats["host_iterations"] == {}
    assert stats["segments_per_device"] == {canonical(d): n for d, n in (("cpu:0", 2), ("cpu:1", 1))}


def test_cond_with_branches_on_another_device_than_its_predicate() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        with tn.device("cpu:0"):
            p = x > 0.0

        def yes() -> tn.Tensor:
            with tn.device("cpu:1"):
                return x * 10.0

        def no() -> tn.Tensor:
            with tn.device("cpu:2"):
                return x - 10.0

        z = tn.cond(p, yes, no)
    sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1", "cpu:2"])
    for v in (2.0, -2.0):
        assert float(sess.run(z, {x: v})) == float(tn.Session(g).run(z, {x: v}))
        assert sess.last_result.stats["host_conds"] == 1


def test_gradient_of_a_spanning_loop_keeps_stacks_on_the_push_device() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        w = tn.placeholder(tn.float32, shape=[], name="w")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                h = tn.tanh(y * w)
            with tn.device("cpu:2"):
                y2 = h + y * y * 0.1
            return i + 1, y2

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < 24, body, [tn.constant(0), x], name="fwd")
        dx, dw = tn.gradients(y, [x, w])
    feeds = {x: np.float32(0.3), w: np.float32(0.7)}
    want = tn.Session(g).run([y, dx, dw], feeds)
    sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1", "cpu:2"], stack_chunk=16)
    got = sess.run([y, dx, dw], feeds)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    stats = sess.last_result.stats
    assert stats["tier"] == "host-driven" and stats["host_loops"] == 2  # the forward and the backward loop
    # 24 pushes outgrew a chunk of 16: the full chunk stays on its device (swap_memory=False) and the stack
    # goes on in a second buffer there; the run is not repeated
    assert stats["stack_capacity_retries"] == 0 and stats["stack_chunks_kept"] >= 1
    recs = sess.backend.memory_records()
    assert recs and all(r["host_bytes"] == 0 and r["chunks_to_host"] == 0 for r in recs)
    by_device = {r["device"] for r in recs if r["device_bytes"] > 0}
    # the values saved for tanh(y * w) live on cpu:1, those of y * y on cpu:2: where they were pushed
    assert {"cpu:1", "cpu:2"} <= by_device  # named as tn.memory_report names devices


def test_variables_persist_and_are_updated_on_their_device() -> None:
    g = tn.Graph()
    with g.as_default():
        with tn.device("cpu:1"):
            v = tn.Variable(np.float32(1.0), name="v")

        def body(i: tn.Tensor, acc: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                r = v.read()
            return i + 1, acc + r

        with tn.device("cpu:0"):
            _, acc = tn.while_loop(lambda i, a: i < 3, body, [tn.constant(0), tn.constant(0.0)])
        step = v.assign_add(acc)
    sess = tn.Session(g, backend="fast", devices=D2)
    ref = tn.Session(g)
    for _ in range(3):
        np.testing.assert_allclose(sess.run(step), ref.run(step))
    assert float(sess.variables["v"]) == float(ref.variables["v"]) == 64.0


def test_parallel_iterations_bounds_the_iterations_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before dispatching iteration i the host waits for iteration i - P: with P = 1 it waits before
    every iteration but the first, with P = 4 before all but the first four."""
    waits: list[int] = []
    orig = PlanRun._retire

    def counting(self: Any, errs: list[Any]) -> None:
        waits.append(len(errs))
        orig(self, errs)

    monkeypatch.setattr(PlanRun, "_retire", counting)
    for p, want in ((1, 9), (4, 6), (20, 0)):
        g, x, i, y = _spanning_loop(10, parallel_iterations=p)
        waits.clear()
        # the host-driven tier (with parallel_iterations=1, "auto" would take the lockstep SPMD tier)
        sess = tn.Session(g, backend="fast", devices=D2, whole_program="never")
        assert float(sess.run(y, {x: 1.0})) == 2.0**10
        assert len(waits) == want, (p, waits)


def _overlap_graph(iterations: int = 6) -> tuple[tn.Graph, Any, Any]:
    """A two-stage pipeline: a short stage on cpu:0 feeds a long one (an inner compiled loop) on cpu:1,
    which also keeps the running sum; nothing on cpu:0 waits for cpu:1 within an iteration."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[64, 64], name="x")

        def body(i: tn.Tensor, y: tn.Tensor, acc: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor, tn.Tensor]:
            with tn.device("cpu:0"):
                a = tn.tanh(y)
            with tn.device("cpu:1"):
                _, b = tn.while_loop(lambda k, b: k < 300, lambda k, b: (k + 1, tn.tanh(tn.matmul(b, x))),
                                     [tn.constant(0), a], name="work")
                acc2 = acc + tn.reduce_sum(b)
            return i + 1, y, acc2

        with tn.device("cpu:0"):
            i0, y0 = tn.constant(0), tn.identity(x)
        with tn.device("cpu:1"):
            acc0 = tn.constant(0.0)
        with tn.device("cpu:0"):
            _, _, acc = tn.while_loop(lambda i, y, a: i < iterations, body, [i0, y0, acc0],
                                      parallel_iterations=4, name="pipe")
    return g, x, acc


def test_trace_shows_device_b_iteration_i_overlapping_device_a_iteration_i_plus_1() -> None:
    g, x, acc = _overlap_graph()
    feed = {x: (np.eye(64, dtype=np.float32) * 0.5)}
    sess = tn.Session(g, backend="fast", devices=D2)
    want = sess.run(acc, feed)
    # (an overlap is what the devices can do, not what a loaded machine always schedules: a few traced
    # runs, of which one must show it)
    for _ in range(5):
        got = sess.run(acc, feed, trace=True)
        np.testing.assert_allclose(got, want)
        tl = sess.last_result.trace
        assert isinstance(tl, Timeline)
        a_by_it: dict[int, Span] = {}
        for s in tl.track_spans(canonical("cpu:0")):
            a_by_it.setdefault(s.args["iteration"], s)
        b = [s for s in tl.track_spans(canonical("cpu:1")) if s.dur_s > 0]
        overlaps = [s.args["iteration"] for s in b if s.args["iteration"] + 1 in a_by_it
                    and a_by_it[s.args["iteration"] + 1].start_s < s.start_s + s.dur_s]
        if overlaps:
            break
    assert overlaps, "no iteration of cpu:1 overlapped the next iteration of cpu:0"
    chrome = tl.to_chrome()
    names = {e["args"]["name"] for e in chrome["traceEvents"] if e["ph"] == "M"}
    assert {"host", canonical("cpu:0"), canonical("cpu:1")} <= names


# ---- errors, options, fallback ---------------------------------------------------------------------
def test_a_device_jax_does_not_have_is_a_placement_error() -> None:
    g, x, i, y = _spanning_loop()
    with pytest.raises(tn.PlacementError, match="cpu:99 does not exist.*xla_force_host_platform_device_count"):
        tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1", "cpu:99"])
    with pytest.raises(tn.PlacementError, match="another task"):
        tn.Session(g, backend="fast", devices=["/job:worker/task:1/device:CPU:0"])


def test_max_iterations_is_honoured_by_the_host_driver_and_max_firings_rejected() -> None:
    g, x, i, y = _spanning_loop(50)
    sess = tn.Session(g, backend="fast", devices=D2)
    with pytest.raises(tn.NonTerminationError, match="max_iterations") as err:
        sess.run(y, {x: 1.0}, max_iterations=20)
    # the loop named as the user wrote it (its frame and the Enter's source line), with its limit
    assert "loop frame 'span/frame0'" in str(err.value) and "test_devices_fast.py" in str(err.value)
    assert "would run body 21, over the limit max_iterations=20" in str(err.value)
    with pytest.raises(tn.UnsupportedError, match="max_firings"):
        sess.run(y, {x: 1.0}, max_firings=100)
    assert float(sess.run(y, {x: 1.0}, max_iterations=50)) == 2.0**50


def test_kernel_error_inside_a_host_driven_loop() -> None:
    g = tn.Graph()
    with g.as_default():
        d = tn.placeholder(tn.int32, shape=[], name="d")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = y + tn.divide(tn.constant(7), d - i)
            return i + 1, y2

        _, y = tn.while_loop(lambda i, y: i < 5, body, [tn.constant(0), tn.constant(0)])
    sess = tn.Session(g, backend="fast", devices=D2)
    with pytest.raises(tn.KernelError):
        sess.run(y, {d: 3})
    assert int(sess.run(y, {d: 10})) == int(tn.Session(g).run(y, {d: 10}))


def test_what_cannot_be_compiled_runs_on_the_partitioned_reference_executor() -> None:
    """A loop variable that changes shape has no XLA loop: a RuntimeWarning, then the partitioned
    reference executor's values; ``fallback=False`` raises the UnsupportedError instead."""
    g = tn.Graph()
    with g.as_default():
        w = tn.placeholder(tn.float32, [], name="w")
        with tn.device("cpu:1"):
            # (for as many iterations as w decides: not unrolled either)
            _, x = tn.while_loop(lambda i, x: tn.reduce_sum(x) < 20.0,
                                 lambda i, x: (i + 1, tn.concat([x, x * w], 0)),
                                 [tn.constant(0), tn.reshape(w, [1])], shape_invariants=[[], [None]])
        s = tn.reduce_sum(x)
    sess = tn.Session(g, backend="fast", devices=D2)
    with pytest.warns(RuntimeWarning, match="partitioned reference executor"):
        got = sess.run(s, {w: 2.0})
    assert float(got) == float(tn.Session(g).run(s, {w: 2.0}))
    assert sess.last_result.stats["executor"] == "partitioned reference executor (fallback)"
    assert sess.last_result.stats["tier"] == "reference"
    with pytest.raises(tn.UnsupportedError):
        tn.Session(g, backend="fast", devices=D2, fallback=False).run(s, {w: 2.0})


def _longest_per_iteration(tl: Timeline, track: str, n: int) -> dict[int, Span]:
    """The longest span of each of the loop's ``n`` iterations on ``track``: its sleeping stage (a
    segment outside the loop, or a short one in it, is not picked even when a loaded machine slows
    it past a fixed threshold)."""
    out: dict[int, Span] = {}
    for s in tl.track_spans(track):
        it = s.args["iteration"]
        if it < n and (it not in out or s.dur_s > out[it].dur_s):
            out[it] = s
    return out


def _sleeping_pipeline(parallel_iterations: int, n: int = 6, seconds: float = 0.02) -> tuple[tn.Graph, Any, Any]:
    """Three stages on three devices, each waiting ``seconds`` (``tn.sleep``); iteration i feeds
    stage 0 with ``x + i``, and the last device keeps the sum."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def body(i: tn.Tensor, acc: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:0"):
                h = tn.cast(i, tn.float32) + x
                i2 = i + 1
            for k in range(3):
                with tn.device(f"cpu:{k}"):
                    h = tn.sleep(h * 0.5 + 1.0, seconds, name=f"stage{k}")
            with tn.device("cpu:2"):
                acc2 = acc + h
            return i2, acc2

        with tn.device("cpu:0"):
            i0 = tn.constant(0)
        with tn.device("cpu:2"):
            a0 = tn.constant(0.0)
        _, acc = tn.while_loop(lambda i, a: i < n, body, [i0, a0], parallel_iterations=parallel_iterations)
    return g, x, acc


def test_sleeping_stages_run_from_per_device_workers_and_overlap() -> None:
    """A segment with a host callback (Sleep) runs synchronously on CPU, so such a plan dispatches
    every segment from its device's worker thread: values equal the reference, and with
    parallel_iterations=4 the trace shows stage 1 of iteration i running while stage 0 of iteration
    i+1 runs; with parallel_iterations=1 no two iterations overlap."""
    for p in (4, 1):
        g, x, acc = _sleeping_pipeline(p)
        # (the per-device tiers: with parallel_iterations=1 the SPMD program would take the loop)
        sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1", "cpu:2"], whole_program="never")
        assert float(sess.run(acc, {x: 1.0})) == float(tn.Session(g).run(acc, {x: 1.0}))
        sess.run(acc, {x: 1.0}, trace=True)
        tl = sess.last_result.trace
        first, second = (_longest_per_iteration(tl, canonical(d), 6) for d in ("cpu:0", "cpu:1"))
        assert len(first) == len(second) == 6
        assert all(s.dur_s >= 0.02 for s in [*first.values(), *second.values()])  # the sleeping stages
        overlapping = [i for i in range(5) if first[i + 1].start_s < second[i].start_s + second[i].dur_s]
        if p == 4:
            assert overlapping, "no overlap with parallel_iterations=4"
        else:
            assert not overlapping, f"iterations overlapped with parallel_iterations=1: {overlapping}"
        sess.close()


def test_whole_program_tier_choice() -> None:
    """``whole_program="auto"`` takes the SPMD tier for a spanning loop with parallel_iterations=1 (lockstep
    costs nothing there) and the host-driven tier when the loop asks for overlap; "always" / "never"
    force the choice; an unknown mode is refused."""
    for p, mode, tier in ((1, "auto", "spmd"), (8, "auto", "host-driven"), (8, "always", "spmd"),
                          (1, "never", "host-driven")):
        g, x, i, y = _spanning_loop(10, parallel_iterations=p)
        sess = tn.Session(g, backend="fast", devices=D2, whole_program=mode)
        assert float(sess.run(y, {x: 1.0})) == 2.0**10
        assert sess.last_result.stats["tier"] == tier, (p, mode)
    with pytest.raises(ValueError, match="whole_program"):
        tn.Session(g, backend="fast", devices=D2, whole_program="sometimes")


def test_threaded_plans_compute_in_64_bits_like_the_others() -> None:
    """The per-device workers of a plan with a host callback compute float64 and int64 as the host
    thread does (x64 is a thread-local JAX setting)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        k = tn.placeholder(tn.int64, [], name="k")

        def body(i: tn.Tensor, y: tn.Tensor, z: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = tn.sleep(y * 1.0000001 + 1e-9, 0.0)
                z2 = z * 3
            return i + 1, y2, z2

        _, y, z = tn.while_loop(lambda i, y, z: i < 5, body, [tn.constant(0), x, k])
    feeds = {x: np.float64(1.0) / 3.0, k: np.int64(2**40)}
    want = tn.Session(g).run([y, z], feeds)
    got = tn.Session(g, backend="fast", devices=D2).run([y, z], feeds)
    assert got[0].dtype == np.float64 and got[1].dtype == np.int64
    np.testing.assert_allclose(got[0], want[0], rtol=1e-14)  # float32 would be off by about 1e-8
    assert int(got[1]) == int(want[1]) == 2**40 * 3**5


def test_a_graph_on_one_device_runs_as_the_unpartitioned_fast_backend() -> None:
    """Everything placed on one device: the unpartitioned fast backend's program (driven loops, swap_memory)
    on that device. Regression: the layered LSTM's gradient on one device fell back to the interpreter."""
    g = tn.Graph()
    with g.as_default(), tn.device("cpu:1"):
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tn.tanh(y * 1.1)), [tn.constant(0), x],
                             swap_memory=True)
        (dx,) = tn.gradients(y, [x])
    want = tn.Session(g).run([y, dx], {x: 0.5, n: 40})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback
        sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"], stack_chunk=16)
        got = sess.run([y, dx], {x: 0.5, n: 40})
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert sess.last_result.stats["tier"] == "one device"
    (rec,) = tn.memory_report(sess).records
    # 40 pushes in one fused call, past the chunk of 16: the swapping loop's stacks in host memory
    assert rec.device == "cpu:1" and rec.swap_memory and rec.host_bytes > 0 and rec.peak_device_bytes == 0
    # past the one-device tier's host_stack_limit, its staged path swaps chunks of 16
    sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"], stack_chunk=16, host_stack_limit=16)
    np.testing.assert_allclose(sess.run([y, dx], {x: 0.5, n: 40}), want, rtol=1e-5)
    (rec,) = tn.memory_report(sess).records
    assert sess.last_result.stats["tier"] == "one device" and rec.chunks_to_host >= 2


def test_a_graph_on_one_device_explains_itself_as_the_one_device_backend() -> None:
    """``Session.explain`` of a graph placed on one device: one step on that device holding the
    one-device backend's schedule of the same run (its steps, then what runs otherwise), with its
    notes; the run then names the tier and the executor in its stats."""
    g = tn.Graph()
    with g.as_default(), tn.device("cpu:1"):
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, v * 1.5), [tn.constant(0), x])
        (dx,) = tn.gradients(y, [x])
    feed = {x: 2.0, n: 5}
    sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"])
    want = tn.Session(g, backend="fast").explain([y, dx], feed)
    got = sess.explain([y, dx], feed)
    assert got.backend == "fast (partitioned)" and got.notes == want.notes
    (step,) = got.steps
    assert step.kind == "one device" and step.device == "cpu:1"
    assert step.steps == (*want.steps, *want.otherwise)
    sess.run([y, dx], feed)
    stats = sess.last_result.stats
    assert stats["tier"] == "one device" and stats["executor"] == "compiled"


def test_a_graph_on_one_device_takes_the_backends_lane_device_feeds_and_deferred_variables() -> None:
    """The one-device tier gives a placed graph what ``backend="fast"`` gives it (``devices.one_device``):
    a repeated run goes through the session's lane (``stats["route"] == "lane"``), on the graph's device;
    a fed ``jax.Array`` is taken as it is, on that device; a Variable a run assigns stays on the device
    until read (``session.variables`` is the backend's store). Each value equals the reference's."""
    import jax

    g = tn.Graph()
    with g.as_default(), tn.device("cpu:1"):
        x = tn.placeholder(tn.float32, [3], name="x")
        v = tn.Variable(np.zeros(3, np.float32), name="v")
        y = tn.reduce_sum(x * 2.0 + v.read())
        step = v.assign_add(x)
    ref = tn.Session(g)
    sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"])
    cpu1 = sess.backend.jax_devices[canonical("cpu:1")]
    for k in range(4):
        feed = np.arange(3, dtype=np.float32) + k
        got, want = sess.run([y, step], {x: feed}), ref.run([y, step], {x: feed})
        np.testing.assert_allclose(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1])
        stats = sess.last_result.stats
        assert stats["tier"] == "one device"
        if k >= 2:
            assert stats["route"] == "lane", stats
    np.testing.assert_allclose(sess.variables["v"], ref.variables["v"])
    assert type(sess.variables).__name__ == "DeviceVariables"
    # the Variable's device copy, and a lane's outputs, live on the graph's device
    (dev,) = sess.backend._single.backend._dev_vars["v"][1].devices()
    assert dev == cpu1
    # a fed jax.Array on another device goes to the graph's device as it is
    on0 = jax.device_put(np.ones(3, np.float32), sess.backend.jax_devices[canonical("cpu:0")])
    placed = sess.backend.device_feed(on0)
    assert placed is not None and placed.devices() == {cpu1}
    np.testing.assert_allclose(sess.run(y, {x: on0}), ref.run(y, {x: np.ones(3, np.float32)}))
    # a graph over two devices keeps the session's numpy path: no device feed, no lane
    with g.as_default(), tn.device("cpu:0"):
        z = y * 3.0
    assert sess.backend.device_feed(on0) is None
    for _ in range(3):
        np.testing.assert_allclose(sess.run(z, {x: np.ones(3, np.float32)}), ref.run(z, {x: np.ones(3, np.float32)}))
    assert sess.last_result.stats.get("route") != "lane" and sess.last_result.stats["tier"] != "one device"


def test_a_gradient_loop_inside_one_partition_is_compiled_whole() -> None:
    """Regression: a loop with gradient stacks compiled whole on one device while its inputs come from
    another. Its stacks are allocated before the run (static push shapes), so the loop carry keeps one
    type; it used to fall back to the interpreter ("a loop variable changes type or shape")."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        with tn.device("cpu:1"):
            _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tn.tanh(y * 1.1)), [tn.constant(0), x])
            (dx,) = tn.gradients(y, [x])
    want = tn.Session(g).run([y, dx], {x: 0.5, n: 40})
    for chunk in (1024, 16):  # 16: 40 pushes outgrow the chunk, and the run is repeated, larger
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"], stack_chunk=chunk)
            got = sess.run([y, dx], {x: 0.5, n: 40})
        np.testing.assert_allclose(got, want, rtol=1e-5)
        assert sess.last_result.stats["tier"] == "compiled"


@pytest.mark.parametrize("whole_program", ["never", "always"])
def test_a_backward_loop_fills_with_a_shape_its_forward_loop_pushed_on_another_device(whole_program: str) -> None:
    """A loop over a vector whose length is fed: its gradient pushes the shape of each step's value
    and its backward loop fills a gradient of that shape. With every node placed round robin, the
    push and the pop lie in segments of different devices, each traced on its own; the plan shares
    what the pushes pushed across its traces (``DevicePlan.pushed``), as the one-device plan does
    across its stages, so the pop is that shape while tracing. It ran on the interpreter before (the
    Fill's shape unknown). The SPMD program (``"always"``) declines a stack of run-time shape and says so."""
    g, p, req = vector_loop_round_robin(["cpu:0", "cpu:1", "cpu:2"])
    x, n, y, dx = p.x, p.n, p.y, p.dx
    devices = ["cpu:0", "cpu:1", "cpu:2"]
    sess = tn.Session(g, backend="fast", devices=devices, requests=req, whole_program=whole_program)
    for xv, steps in ((np.array([0.5, -0.25]), 5), (np.array([0.1, 0.2, 0.3]), 0), (np.array([0.7]), 12)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (a fallback to the interpreter would fail here)
            got = sess.run([y, dx], {x: xv, n: steps})
        np.testing.assert_allclose(got, tn.Session(g).run([y, dx], {x: xv, n: steps}), rtol=1e-12)
        stats = sess.last_result.stats
        assert stats["tier"] == "host-driven"
        assert ("run-time shape" in stats.get("whole_program_declined", "")) == (whole_program == "always")


def test_device_memory_limit_on_the_fast_partitioned_executor() -> None:
    """Honoured for a graph placed on one device (it runs as the one-device fast backend, whose cap names
    the loop); validated like the fast backend's. (Graphs spanning devices: tests/test_devices_swap.py.)"""
    g = tn.Graph()
    with g.as_default(), tn.device("cpu:1"):
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tn.tanh(y * 1.1)), [tn.constant(0), x],
                             name="capped")
        (dx,) = tn.gradients(y, [x])
    sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"], stack_chunk=16, device_memory_limit=600)
    assert sess.run(dx, {x: 0.5, n: 4}) == pytest.approx(tn.Session(g).run(dx, {x: 0.5, n: 4}), rel=1e-5)
    with pytest.raises(tn.ResourceExhaustedError, match='loop "capped".*swap_memory=True'):
        sess.run(dx, {x: 0.5, n: 200})
    g2 = _spanning_loop(4, parallel_iterations=1)[0]
    for bad in (0, True, "1GB"):
        with pytest.raises(ValueError, match="device_memory_limit"):
            tn.Session(g2, backend="fast", devices=D2, device_memory_limit=bad)


def test_the_fast_partitioned_executor_takes_the_fast_backend_s_options() -> None:
    """One ``FastOptions`` value, as for ``backend="fast"``: keywords or ``options=``, checked by field
    name; the one-device tier is given it whole; a field that only the one-device backend honours is
    refused with devices rather than ignored."""
    g = _spanning_loop(4, parallel_iterations=1)[0]
    a = tn.Session(g, backend="fast", devices=D2, options=tn.FastOptions(stack_chunk=8, fallback=False))
    b = tn.Session(g, backend="fast", devices=D2, stack_chunk=8, fallback=False)
    assert a.backend.options == b.backend.options == tn.FastOptions(stack_chunk=8, fallback=False)
    with pytest.raises(tn.ArgumentError, match="FastOptions.stack_chunk must be a positive int"):
        tn.Session(g, backend="fast", devices=D2, stack_chunk=0)
    with pytest.raises(tn.ArgumentError, match="unknown options"):
        tn.Session(g, backend="fast", devices=D2, stack_chunks=8)
    for field, value in (("frame_height", 0), ("keep_stack_buffers", False), ("inside_stack_bytes", 0)):
        with pytest.raises(tn.ArgumentError, match=f"{field} is an option of backend='fast' without devices"):
            tn.Session(g, backend="fast", devices=D2, **{field: value})
    one = tn.Graph()
    with one.as_default(), tn.device("cpu:1"):
        x = tn.placeholder(tn.float32, [], name="x")
        y = x * 2.0
    sess = tn.Session(one, backend="fast", devices=D2, stack_chunk=8)
    assert sess.run(y, {x: 1.5}) == 3.0
    assert sess.backend._single.backend.options is sess.backend.options  # the one-device tier: the same value


@pytest.mark.parametrize("threads", ["auto", "always"])
def test_a_stack_outgrowing_its_chunk_within_one_call_reruns_the_plan(threads: str) -> None:
    """A stack that outgrows its chunk inside one segment call (an inner loop compiled whole, pushed 5
    times into a chunk of 1) gives the run a ``Retry``: the host stops dispatching, its loops and conds
    return, and the executor runs the plan again with the larger chunk, the values those of the
    reference, from the host thread and from per-device workers alike."""
    g, fetches, feeds = inner_loop_on_the_second_device(inner=5, outer=3)
    sess = tn.Session(g, backend="fast", devices=D2, stack_chunk=1, threads=threads)
    got = sess.run(fetches, feeds)
    np.testing.assert_allclose(got, [1.01**15, 15 * 1.01**14], rtol=1e-12)
    stats = sess.last_result.stats
    assert stats["tier"] == "host-driven" and stats["stack_capacity_retries"] > 0, stats
    assert stats["stack_capacity"] >= 5, stats
    np.testing.assert_allclose(sess.run(fetches, feeds), got, rtol=0)  # the plan of the larger chunk, again


@pytest.mark.parametrize("threads", ["auto", "always"])
def test_a_driven_loop_whose_iteration_outgrows_the_chunk_reruns_the_plan(threads: str) -> None:
    """A loop on one device that pushes gradient stacks is driven chunk by chunk from the host
    (the one runner, ``fast.runner``); an outer iteration whose inner loop pushes more than the chunk holds
    (trip counts 1, 2, ..., 6: more each iteration than the last) leaves an overflow in its device's
    error word, the run's ``Retry`` once read, and the plan runs again with the larger chunk: the
    reference's values."""
    g = tn.Graph()
    with g.as_default():
        with tn.device("cpu:1"):
            x = tn.placeholder(tn.float64, [], name="x")

        def outer(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            _, y2 = tn.while_loop(lambda j, y: j <= i, lambda j, y: (j + 1, y * x), [tn.constant(0), y])
            return i + 1, y2

        with tn.device("cpu:1"):
            _, y = tn.while_loop(lambda i, y: i < 6, outer, [tn.constant(0), tn.ones_like(x)])
        with tn.device("cpu:0"):
            z = y * 2.0
        with tn.device("cpu:1"):  # both loops on cpu:1: each a driven segment
            (dx,) = tn.gradients(z, [x])
    feeds = {x: 1.01}
    want = tn.Session(g).run([z, dx], feeds)
    sess = tn.Session(g, backend="fast", devices=D2, stack_chunk=2, threads=threads)
    np.testing.assert_allclose(sess.run([z, dx], feeds), want, rtol=1e-12)
    stats = sess.last_result.stats
    assert stats["tier"] == "compiled" and stats["host_loops"] == 0 and stats["stack_capacity_retries"] > 0, stats
