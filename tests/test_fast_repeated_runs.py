"""Repeated runs of one session on the fast backend behave like fresh runs.

Why: to cut per-run overhead the session and the fast backend cache what depends only on the fetches
and the feed signature (feed checks, the one-call ``Direct`` plan) and reuse gradient-stack buffers
from one run to the next (donated to the compiled stages). These tests run the same session again with
values that must fail, or with trip counts that shrink, and check the same errors and closed-form
results as a fresh session.
"""

from __future__ import annotations

import graphs
import numpy as np
import pytest

import turnout as tn
from turnout import raw

pytest.importorskip("jax")


def _feed_error(sess: tn.Session, fetch: tn.Tensor, feed: dict) -> str:
    with pytest.raises(tn.FeedError) as e:
        sess.run(fetch, feed)
    return str(e.value)


def test_feed_checks_still_run_after_a_good_feed() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [2], name="n")
        y = n * 2
    sess = tn.Session(g, backend="fast")
    assert sess.run(y, {n: np.array([1, 2], np.int32)}).tolist() == [2, 4]
    assert sess.run(y, {n: np.array([3, 4], np.int32)}).tolist() == [6, 8]
    for bad in (np.array([1.5, 2.0]), np.array([1, 2, 3], np.int32), [1.5, 2.0]):
        fresh = tn.Session(g, backend="fast")
        assert _feed_error(sess, y, {n: bad}) == _feed_error(fresh, y, {n: bad})


def test_fetch_structures_are_kept() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        a, b = x + 1.0, x * 3.0
    sess = tn.Session(g, backend="fast")
    for _ in range(2):
        got_t = sess.run((a, b), {x: 2.0})
        got_l = sess.run([a, b], {x: 2.0})
        got_d = sess.run({"p": a, "q": [b]}, {"x:0": 2.0})
        assert isinstance(got_t, tuple) and [float(v) for v in got_t] == [3.0, 6.0]
        assert isinstance(got_l, list) and [float(v) for v in got_l] == [3.0, 6.0]
        assert float(got_d["p"]) == 3.0 and float(got_d["q"][0]) == 6.0


def test_run_time_errors_after_a_good_run() -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        d = tn.placeholder(tn.int32, [], name="d")
        _, t = raw.switch(tn.constant(3.0), p)
        tt = t * 2.0
        q = tn.constant(7) // d
    sess = tn.Session(g, backend="fast")
    assert float(sess.run(tt, {p: True})) == 6.0
    with pytest.raises(tn.DeadFetchError, match="is dead"):
        sess.run(tt, {p: False})
    assert float(sess.run(tt, {p: True})) == 6.0
    assert int(sess.run(q, {d: 2})) == 3
    with pytest.raises(tn.KernelError):
        sess.run(q, {d: 0})
    assert int(sess.run(q, {d: -2})) == -4


def test_statically_dead_fetch_still_raises() -> None:
    # the predicate is a constant, so the fetched branch is dead while tracing: the one-call plan
    # refuses it and the general path raises DeadFetchError
    g = tn.Graph()
    with g.as_default():
        _, t = raw.switch(tn.constant(3.0), tn.constant(False))
        tt = t * 2.0
    sess = tn.Session(g, backend="fast")
    for _ in range(2):
        with pytest.raises(tn.DeadFetchError):
            sess.run(tt)


def test_max_iterations_is_read_on_every_run() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y + 2), [tn.constant(0), tn.constant(0)])
    sess = tn.Session(g, backend="fast")
    assert int(sess.run(y, {n: 100})) == 200
    with pytest.raises(tn.NonTerminationError):
        sess.run(y, {n: 100}, max_iterations=50)
    assert int(sess.run(y, {n: 100})) == 200


def test_fed_arrays_and_variables_survive_runs() -> None:
    # stack buffers are donated to the compiled stages; fed arrays and Variables must not be
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float64, [4], name="xs")
        w = tn.Variable(np.float64(2.0), name="w")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * w.read()), [tn.constant(0), xs])
        loss = tn.reduce_sum(y)
        (dw,) = tn.gradients(loss, [w])
    sess = tn.Session(g, backend="fast")
    feed = np.array([1.0, 2.0, 3.0, 4.0])
    for nv in (3, 1, 3):
        lv, dv = sess.run([loss, dw], {xs: feed, n: nv})
        # loss = 10 w**n, d loss / dw = 10 n w**(n-1)
        assert float(lv) == 10 * 2.0**nv and float(dv) == pytest.approx(10 * nv * 2.0 ** (nv - 1))
    assert feed.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert float(sess.variables["w"]) == 2.0


@pytest.mark.parametrize("chunk", [1024, 4])
def test_stack_buffers_reused_for_shorter_and_failed_runs(chunk: int) -> None:
    # y = x**n, dy/dx = n x**(n-1): the second run pushes fewer values than the first left in the
    # reused buffers, and a run stopped by max_iterations must not spoil the next one
    g, x, n, y, dx = graphs.power_loop()
    sess = tn.Session(g, backend="fast", stack_chunk=chunk)
    for nv in (30, 3, 30):
        yv, dv = sess.run([y, dx], {x: 1.5, n: nv})
        assert float(yv) == pytest.approx(1.5**nv, rel=1e-12)
        assert float(dv) == pytest.approx(nv * 1.5 ** (nv - 1), rel=1e-12)
    compiles = sess.backend.compile_count
    with pytest.raises(tn.NonTerminationError):
        sess.run([y, dx], {x: 1.5, n: 30}, max_iterations=10)
    yv, dv = sess.run([y, dx], {x: 1.5, n: 5})
    assert float(dv) == pytest.approx(5 * 1.5**4, rel=1e-12)
    assert sess.backend.compile_count == compiles


@pytest.mark.parametrize("dtype", [tn.float32, tn.float64])
def test_repeated_fused_runs_take_the_executable_outside_64_bit_mode(dtype: tn.DType) -> None:
    """A repeat of a fused gradient run calls its ahead-of-time executable, made once from the jitted
    function's own compilation (no trace more), outside 64-bit mode; a 64-bit feed, which JAX would
    narrow there, keeps the jitted function. Either way the runs give the reference's values, read
    the run's ``max_iterations``, and compile nothing after the first."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(dtype, [3], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        w = tn.Variable(np.array([0.5, -1.0, 2.0], dtype.numpy), name="w")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tn.tanh(y * w.read() + x)),
                             [tn.constant(0), tn.zeros([3], dtype)])
        loss = tn.reduce_sum(y * y)
        dx, dw = tn.gradients(loss, [x, w])
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    xv = np.array([0.3, -0.2, 0.1], dtype.numpy)
    for trips in (4, 9, 1, 9):
        feed = {x: xv, n: trips}
        for a, b in zip(fast.run([loss, dx, dw], feed), ref.run([loss, dx, dw], feed), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    repeat = "lane"
    assert fast.last_result.stats["route"] == repeat
    # a lane with 64-bit feeds calls the jitted function (in 64-bit mode), any other its executable
    lanes = [lane for _, lane in fast.backend.repeats.lanes.values()]
    assert lanes and all(lane.ahead_of_time == (dtype is not tn.float64) for lane in lanes)
    compiles = fast.backend.compile_count
    with pytest.raises(tn.NonTerminationError):
        fast.run([loss, dx, dw], {x: xv, n: 9}, max_iterations=5)
    got, want = fast.run([loss, dx, dw], {x: xv, n: 2}), ref.run([loss, dx, dw], {x: xv, n: 2})
    np.testing.assert_allclose(got[2], want[2], rtol=1e-5, atol=1e-7)
    assert fast.last_result.stats["route"] == repeat
    assert fast.backend.compile_count == compiles


def test_a_repeated_training_step_reaches_jax_c_plus_plus_dispatch() -> None:
    """A training step whose fetches include the update op and a constant (the fused stage has outputs
    known while tracing) must call its executable through JAX's C++ dispatch on repeats. A constant
    output once crossed the call wrapped for JAX, came back as a numpy array, and that kept every
    call on JAX's Python path (about 150 µs more a run on the development machine, six times a small
    RNN step's JAX twin). The count of Python-path calls is read from JAX's own dispatch
    (``jax._src.stages.Compiled.call``, the function an ahead-of-time executable's call falls back to):
    a JAX without it fails here, so that this check is moved to its new place, not skipped."""
    from jax._src import stages
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2, 4, 8], name="x")
        w = tn.Variable(np.full((8, 8), 0.05, np.float32), name="w")
        h = tn.foldl(lambda h, e: tn.tanh(tn.matmul(h, w.read()) + e), x, initializer=tn.zeros([4, 8], tn.float32))
        loss = tn.reduce_sum(h * h)
        step = tn.train.SGD(0.01).minimize(loss)
        const = tn.constant(3.0) * 2.0
    sess = tn.Session(g, backend="fast")
    feed = {x: np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(2, 4, 8)}
    for _ in range(3):
        sess.run([loss, step, const], feed)
    assert sess.last_result.stats["route"] == "lane"
    calls = [0]
    python_path = stages.Compiled.call

    def counted(*a: object, **k: object) -> object:
        calls[0] += 1
        return python_path(*a, **k)

    stages.Compiled.call = staticmethod(counted)
    try:
        for _ in range(5):
            got = sess.run([loss, step, const], feed)
    finally:
        stages.Compiled.call = python_path
    assert got[1] is None and float(got[2]) == 6.0
    assert calls[0] == 0, f"{calls[0]} of 5 repeated runs took JAX's Python dispatch"
