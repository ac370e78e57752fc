"""``trace=True`` on the fast backends: one timeline (``fast.timeline``) of compiled calls,
driven-loop chunks, host swaps and the host's dispatches, recorded by the one runner on one device and
on several, exportable to Perfetto like the reference trace."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import turnout as tn

jax = pytest.importorskip("jax")

from turnout.fast.timeline import TRACKS, Span, Timeline  # noqa: E402


def test_a_one_call_program_traces_one_compiled_stage() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = tn.cond(x > 0.0, lambda: x * 2.0, lambda: -x)
    sess = tn.Session(g, backend="fast")
    assert float(sess.run(y, {x: 3.0}, trace=True)) == 6.0
    tl = sess.last_result.trace
    assert isinstance(tl, Timeline)
    rows = [s.track for s in tl.spans]
    assert rows.count("compiled stages") == 1 and rows.count("run") == 1
    compiles = sess.last_result.stats["compiles"]  # the session's running total
    assert compiles >= 1 and tl.summary()["compiles_this_run"] == compiles  # traced and compiled on this first run
    assert tl.summary()["compiled_stages"] == 1
    sess.run(y, {x: 3.0}, trace=True)
    assert sess.last_result.stats["compiles"] == compiles
    assert sess.last_result.trace.summary()["compiles_this_run"] == 0
    assert sess.last_result.trace.summary()["compiled_stages"] == 0
    # the stage is the Direct call, named as such, and says whether this run compiled it
    (stage,) = [s for s in tl.spans if s.track == "compiled stages"]
    assert (stage.name, stage.args["compiled"]) == ("one compiled call", True)
    (again,) = [s for s in sess.last_result.trace.spans if s.track == "compiled stages"]
    assert (again.name, again.args["compiled"]) == ("one compiled call", False)
    sess.run(y, {x: 3.0})
    assert sess.last_result.trace is None  # untraced runs record nothing


def test_driven_loops_show_chunks_and_host_swaps(tmp_path: Path) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 1.1), [tn.constant(0), x])
        dx = tn.gradients(y, x)[0]
    sess = tn.Session(g, backend="fast", stack_chunk=4)
    want = sess.run([y, dx], {x: 1.0, n: 10})
    got = sess.run([y, dx], {x: 1.0, n: 10}, trace=True)
    np.testing.assert_allclose(got, want)
    tl = sess.last_result.trace
    chunks = [s for s in tl.spans if s.track == "driven loops"]
    assert sum(s.args["iterations"] for s in chunks) == 20  # 10 forward + 10 backward iterations
    swaps = [s for s in tl.spans if s.track == "host swaps"]  # 10 pushes do not fit a chunk of 4
    # full chunks leave while the forward loop pushes, and come back while the backward loop pops
    assert {s.name for s in swaps} == {"stack chunks full", "stack chunks back"}
    path = tmp_path / "fast_trace.json"
    tl.save_chrome(str(path))
    doc = json.loads(path.read_text())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M"}
    assert names == set(TRACKS) - {"host"}  # (the host waits for each stage: no dispatch spans of its own)
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(tl.spans) and all(e["dur"] >= 0 for e in slices)
    run = next(e for e in slices if e["cat"] == "run")
    assert all(run["ts"] <= e["ts"] and e["ts"] + e["dur"] <= run["ts"] + run["dur"] + 1 for e in slices)


def test_every_fast_route_records_one_timeline() -> None:
    """The one-device backend, its tier of the partitioned backend and the partitioned per-device
    tiers run their steps on the one runner, which records the trace: each traced run is a
    ``Timeline`` with one ``run`` span counting its compiles, its driven loop's chunks (the forward
    loop's 10 iterations in chunks of 4, named by device where there are several), and, where calls
    run ahead of the host, one host dispatch per call on a device's track (the first call too)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 1.1), [tn.constant(0), x])
        with tn.device("cpu:1"):
            z = y * 2.0
        dx = tn.gradients(z, x)[0]
    feed = {x: 1.0, n: 10}
    want = tn.Session(g).run([z, dx], feed)
    routes = {"fast": {}, "one device": {"devices": ["cpu:0"], "allow_soft_placement": True},
              "two devices": {"devices": ["cpu:0", "cpu:1"]}}
    for route, kw in routes.items():
        sess = tn.Session(g, backend="fast", stack_chunk=4, **kw)
        np.testing.assert_allclose(sess.run([z, dx], feed, trace=True), want, rtol=1e-6)
        tl = sess.last_result.trace
        assert isinstance(tl, Timeline), route
        summary = tl.summary()
        assert summary["spans"]["run"] == 1 and summary["compiles_this_run"] == sess.last_result.stats["compiles"] > 0
        run = tl.track_spans("run")[0]  # every span within the run's, on the run's clock
        assert 0 <= run.start_s < 1 and all(run.start_s - 1e-3 <= s.start_s and s.start_s + s.dur_s
                                            <= run.start_s + run.dur_s + 1e-3 for s in tl.spans), route
        chunks = [s for s in tl.spans if s.track == "driven loops"]
        forward = [s.args["iterations"] for s in chunks][:3]
        assert forward == [4, 4, 2], (route, forward)
        devices = [t for t in tl.tracks() if t not in TRACKS]
        if route == "two devices":
            assert len(devices) == 2 and all(s.args["device"] == "cpu:0" for s in chunks)
            calls = [s for t in devices for s in tl.track_spans(t) if ": driven " not in s.name]
            dispatches = [s for s in tl.spans if s.track == "host" and s.name.startswith("dispatch ")]
            assert sorted(s.name for s in dispatches) == sorted(f"dispatch {s.name}" for s in calls)
            # and the predicate reads of the host-driven backward loop: true for each of its 10
            # iterations, then false
            reads = [s.args["value"] for s in tl.spans if s.track == "host" and s.name.startswith("read predicate")]
            assert reads == [True] * 10 + [False]
        else:
            assert devices == [] and "device" not in chunks[0].args
            assert sum(s.args["iterations"] for s in chunks) == 20  # the backward loop is driven too
        sess.close()


def test_a_timeline_exports_every_field_a_trace_viewer_reads() -> None:
    """``Timeline.summary`` and ``to_chrome`` on spans made by hand: the tracks in display order (the
    fixed ones first, then the devices by name), spans and seconds per track, the compiles counted
    from the ``run`` track only and the compiled calls from every other; one ``thread_name`` event
    per track naming its row, and per span a complete event (``ph`` ``X``) on its track's row with
    its name, category, times in microseconds and arguments."""
    tl = Timeline()
    made = [tl.ran("dev:b", "segment 2", 0.5, 0.75, iteration=1, compiled=True),
            tl.ran("host", "dispatch segment 2", 0.25, 0.5),
            tl.ran("dev:a", "segment 1", 0.0, 0.5, iteration=0, compiled=False),
            tl.ran("compiled stages", "fused attempt", 0.0, 0.125, compiled=True),
            tl.ran("run", "Session.run", 0.0, 1.0, compiles=2, compiled=True)]
    assert made == [0, 1, 2, 3, 4]  # (each span's index: a call's inputs name the spans that made them)
    assert tl.tracks() == ["run", "host", "compiled stages", "dev:a", "dev:b"]
    assert [s.name for s in tl.track_spans("dev:a")] == ["segment 1"]
    assert tl.summary() == {
        "spans": {"run": 1, "host": 1, "compiled stages": 1, "dev:a": 1, "dev:b": 1},
        "seconds": {"run": 1.0, "host": 0.25, "compiled stages": 0.125, "dev:a": 0.5, "dev:b": 0.25},
        "compiles_this_run": 2, "compiled_stages": 2}
    doc = tl.to_chrome()
    assert doc["displayTimeUnit"] == "ms"
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    assert meta == [{"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": t}}
                    for i, t in enumerate(tl.tracks())]
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert slices[0] == {"name": "segment 2", "cat": "dev:b", "ph": "X", "ts": 5e5, "dur": 2.5e5, "pid": 0,
                         "tid": 4, "args": {"iteration": 1, "compiled": True}}
    assert [(e["name"], e["tid"]) for e in slices] == [(s.name, tl.tracks().index(s.track)) for s in tl.spans]
    assert tl.as_dicts()[1] == {"name": "dispatch segment 2", "track": "host", "start_s": 0.25, "dur_s": 0.25,
                                "args": {}}
    assert len(tl) == 5


def test_a_dispatched_call_starts_after_what_it_waits_for() -> None:
    """``Timeline.dispatched``: a call's span starts at the latest of its dispatch, the end of the
    call before it on its track and the ends of the calls that made its inputs, and ends when its
    result is ready (a call whose result was ready before those ends, as a watcher may stamp on
    another track, gets an empty span at its end); ``close`` settles every such span and a later
    dispatch starts a new watcher."""
    import jax.numpy as jnp

    tl = Timeline()
    a = tl.dispatched("dev:a", "a", jnp.ones(3), [])
    b = tl.dispatched("dev:a", "b", jnp.ones(3), [])
    c = tl.dispatched("dev:b", "c", jnp.ones(3), [a])
    tl.close()
    sa, sb, sc = tl.spans[a], tl.spans[b], tl.spans[c]
    assert all(s.dur_s >= 0 for s in (sa, sb, sc))
    def after(s: Span, *deps: Span) -> bool:
        return s.start_s >= max(d.start_s + d.dur_s for d in deps) or s.dur_s == 0

    assert after(sb, sa) and after(sc, sa)
    d = tl.dispatched("dev:a", "d", jnp.ones(3), [c])
    tl.close()
    assert after(tl.spans[d], sb, sc) and len(tl) == 4


def test_a_dispatched_call_is_timed_by_a_watcher_until_its_result_is_ready() -> None:
    """Calls that run ahead of the host: each span ends when its result is ready, not when it was
    dispatched (a call of some 30 ms, dispatched in microseconds), and a call dispatched while its
    track is busy starts when the call before it ends (a device runs its calls in order). The
    watchers are daemon threads named by their track, so a timeline never keeps a process alive."""
    import threading

    import jax.numpy as jnp
    from jax import lax

    @jax.jit
    def slow(x: Any) -> Any:
        return lax.fori_loop(0, 40, lambda i, a: jnp.tanh(a @ a), x)

    x = jnp.ones((400, 400), jnp.float32) * 1e-3
    slow(x).block_until_ready()  # (compiled)
    times = []
    for _ in range(3):
        t = time.perf_counter()
        slow(x).block_until_ready()
        times.append(time.perf_counter() - t)
    alone = min(times)  # (a loaded machine only makes the traced calls longer)
    before = set(threading.enumerate())  # (other tests' timelines may have watchers of their own)

    def started() -> list[threading.Thread]:
        return [th for th in threading.enumerate() if th not in before and th.name.startswith("turnout-trace-")]

    tl = Timeline()
    first = slow(x)
    one = tl.dispatched("dev:a", "one", first, [])
    watchers = started()
    try:
        assert [th.name for th in watchers] == ["turnout-trace-dev:a"] and watchers[0].daemon
        first.block_until_ready()  # (the host waits too, and lets the watcher run meanwhile)
    finally:
        tl.close()
    assert tl.spans[one].dur_s >= 0.5 * alone
    a = tl.dispatched("dev:a", "a", slow(x), [])
    b = tl.dispatched("dev:a", "b", slow(x), [])
    tl.close()
    sa, sb = tl.spans[a], tl.spans[b]
    assert sa.dur_s > 0 and sb.dur_s > 0
    assert sb.start_s >= sa.start_s + sa.dur_s  # after the call before it on its track
    assert not started()  # (close ended every watcher this timeline started)


def test_a_traced_run_takes_the_tier_its_untraced_twin_takes() -> None:
    """Tracing does not change the route: a loop spanning two devices in lockstep runs as one SPMD
    program traced or not, with the same values; its timeline holds the program's span on both
    devices' tracks (one call, measured, within the run's span) and the run's compiles."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = y * 1.5
            return i + 1, y2

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < 6, body, [tn.constant(0), x], parallel_iterations=1)
    sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"])
    traced = sess.run(y, {x: 2.0}, trace=True)
    stats, tl = sess.last_result.stats, sess.last_result.trace
    assert stats["tier"] == "spmd" and isinstance(tl, Timeline)
    assert float(traced) == float(sess.run(y, {x: 2.0})) == 2.0 * 1.5**6
    assert sess.last_result.stats["tier"] == "spmd" and sess.last_result.trace is None
    devices = [t for t in tl.tracks() if t not in TRACKS]
    assert len(devices) == 2
    calls = [s for t in devices for s in tl.track_spans(t)]
    assert [s.name for s in calls] == ["SPMD program over 2 devices"] * 2 and calls[0].args["compiled"]
    run = tl.track_spans("run")[0]
    assert all(run.start_s <= s.start_s and s.start_s + s.dur_s <= run.start_s + run.dur_s for s in calls)
    assert tl.summary()["compiles_this_run"] == stats["compiles"] > 0
