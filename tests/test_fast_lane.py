"""The session's lane for repeated fast runs (``turnout.fast.lane``).

A lane skips the session's feed checks and the backend's run signature, so each test here changes one
thing a lane depends on and checks that the run is still what the general route gives: the same
values, the same errors, the same Variables. ``stats["route"]`` says which route ran.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from graphs import rnn_training_step

import turnout as tn
from turnout.errors import FeedError, KernelError, NonTerminationError, ValidationError

pytest.importorskip("jax")


def _route(sess: tn.Session) -> str:
    return str(sess.last_result.stats["route"])


def _affine() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")
        y = x * 2.0 + 1.0
    return g, x, y


def test_a_repeated_run_takes_the_lane_and_compiles_nothing() -> None:
    g, x, y = _affine()
    sess = tn.Session(g, backend="fast")
    a = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(sess.run(y, {x: a}), a * 2 + 1)
    assert _route(sess) == "general"
    compiles = sess.backend.compile_count
    for k in range(3):
        b = a + k
        np.testing.assert_allclose(sess.run(y, {x: b}), b * 2 + 1)
        assert _route(sess) == "lane"
    assert sess.backend.compile_count == compiles  # building the lane took the executable from JAX's caches
    stats = sess.last_result.stats
    assert stats["compiles"] == compiles and len(stats["stage_seconds"]) == 1 and stats["backend"] == "fast"


def test_the_lane_returns_the_structure_asked_for() -> None:
    g, x, y = _affine()
    with g.as_default():
        z = y * 3.0
    sess = tn.Session(g, backend="fast")
    a = np.ones(2, np.float32)
    for fetches, kind in (([y, z], list), ((y, z), tuple)):
        for _ in range(2):
            got = sess.run(fetches, {x: a})
            assert type(got) is kind and len(got) == 2
            np.testing.assert_allclose(got[1], (a * 2 + 1) * 3)
        assert _route(sess) == "lane"


def test_a_tensor_array_fetched_on_the_lane_is_the_references_value() -> None:
    # (the lane reads an output that is not a plain array, a TensorArray, as the general path does)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        ta = tn.TensorArray(tn.float32, size=3).write(0, x).write(2, x * 2.0)
        y = tn.reduce_sum(x)
    a = np.arange(2, dtype=np.float32)
    want = tn.Session(g).run(ta, {x: a})
    sess = tn.Session(g, backend="fast")
    routes = []
    for _ in range(3):
        got, total = sess.run([ta, y], {x: a})
        routes.append(_route(sess))
        assert type(got) is type(want) and (got.dtype, got.element_shape, got.dynamic) == (
            want.dtype, want.element_shape, want.dynamic)
        assert got.items[1] is None and all(np.array_equal(u, v) for u, v in zip(got.items[::2], want.items[::2]))
        assert float(total) == 1.0
    assert routes[-1] in ("lane", "hot") and routes[0] not in ("lane", "hot")


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_fetching_a_variable_after_lanes_exist(backend: str) -> None:
    """A Variable is no list of fetches: looking its lane up must not iterate it. ``tuple(v)`` once
    indexed the Variable element by element, adding ``GetItem`` nodes to the graph until one fell
    out of range (a ``ShapeError`` from a plain ``sess.run(v)``). And a fetched Variable is read by
    one node, made once: a read node per fetch changed the graph's version on every fetch, so the
    next training step compiled its plan again."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        v = tn.Variable(np.arange(3, dtype=np.float32), name="v")
        upd = v.assign_add(x)
    sess = tn.Session(g, backend=backend)
    one = np.ones(3, np.float32)
    for _ in range(3):  # a lane for [upd]
        sess.run([upd], {x: one})
    np.testing.assert_allclose(sess.run(v), np.arange(3) + 3.0)
    nodes = len(g.nodes)
    compiles = getattr(sess.backend, "compile_count", 0)
    for k in range(3):
        np.testing.assert_allclose(sess.run(v), np.arange(3) + 3.0 + k)
        np.testing.assert_allclose(sess.run([upd], {x: one})[0], np.arange(3) + 4.0 + k)
    np.testing.assert_allclose(sess.run([v, upd], {x: one})[1], np.arange(3) + 7.0)
    assert len(g.nodes) == nodes
    if backend == "fast":  # [upd] and v each compiled once before; [v, upd] is the one new plan
        assert sess.backend.compile_count == compiles + 1


def test_a_new_shape_leaves_the_lane_and_runs_right() -> None:
    g, x, y = _affine()
    sess = tn.Session(g, backend="fast")
    sess.run(y, {x: np.ones(3, np.float32)})
    sess.run(y, {x: np.ones(3, np.float32)})
    assert _route(sess) == "lane"
    b = np.arange(5, dtype=np.float32)
    np.testing.assert_allclose(sess.run(y, {x: b}), b * 2 + 1)
    assert _route(sess) != "lane"


@pytest.mark.parametrize("value", [np.array([1.5, 2.5]), [1.0, 2.0], np.array([1, 2], np.int32)])
def test_a_feed_that_needs_converting_never_takes_the_lane(value: object) -> None:
    g, x, y = _affine()
    sess = tn.Session(g, backend="fast")
    sess.run(y, {x: np.ones(2, np.float32)})
    for _ in range(2):
        np.testing.assert_allclose(sess.run(y, {x: value}), np.asarray(value, np.float32) * 2 + 1)
        assert _route(sess) != "lane"


def test_an_out_of_range_feed_is_refused_after_a_lane_was_built() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        out = n + 1
    sess = tn.Session(g, backend="fast")
    for _ in range(2):
        assert int(sess.run(out, {n: np.int32(4)})) == 5
    assert _route(sess) == "lane"
    with pytest.raises(FeedError, match="n"):
        sess.run(out, {n: np.int64(2**40)})
    with pytest.raises(FeedError):
        sess.run(out, {n: np.float32(1.5)})
    assert int(sess.run(out, {n: np.int32(7)})) == 8


def test_feeds_in_another_order_take_the_right_values() -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, [2], name="a")
        b = tn.placeholder(tn.float32, [2], name="b")
        d = a - b
    sess = tn.Session(g, backend="fast")
    u, v = np.array([5.0, 6.0], np.float32), np.array([1.0, 1.0], np.float32)
    for _ in range(2):
        np.testing.assert_allclose(sess.run(d, {b: v, a: u}), u - v)
    assert _route(sess) == "lane"
    np.testing.assert_allclose(sess.run(d, {a: u, b: v}), u - v)
    np.testing.assert_allclose(sess.run(d, {a: u, b: v}), u - v)
    np.testing.assert_allclose(sess.run(d, {b: u, a: v}), v - u)


def test_a_graph_edit_leaves_the_lane_and_is_validated() -> None:
    g, x, y = _affine()
    sess = tn.Session(g, backend="fast")
    a = np.ones(2, np.float32)
    sess.run(y, {x: a})
    sess.run(y, {x: a})
    assert _route(sess) == "lane"
    with g.as_default():
        tn.raw.exit(tn.constant(1.0), name="lost_exit")  # an Exit in no frame: the graph no longer validates
    with pytest.raises(ValidationError, match="lost_exit"):
        sess.run(y, {x: a})


def test_the_lane_writes_variables_and_sees_a_replaced_one() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        v = tn.Variable(np.zeros(2, np.float32), name="v")
        upd = v.assign_add(x)
        read = v.read() * 1.0
    sess = tn.Session(g, backend="fast")
    ones = np.ones(2, np.float32)
    for k in range(1, 4):
        np.testing.assert_allclose(sess.run(upd, {x: ones}), np.full(2, k))
    assert _route(sess) == "lane"
    np.testing.assert_allclose(sess.variables["v"], np.full(2, 3.0))
    sess.variables["v"] = np.full(2, 10.0, np.float32)  # the user replaces it: the lane must see it
    np.testing.assert_allclose(sess.run(upd, {x: ones}), np.full(2, 11.0))
    np.testing.assert_allclose(sess.run(upd, {x: ones}), np.full(2, 12.0))
    sess.backend.release_buffers()
    np.testing.assert_allclose(sess.run(upd, {x: ones}), np.full(2, 13.0))
    np.testing.assert_allclose(sess.run(read), np.full(2, 13.0))
    ref = tn.Session(g)
    ref.variables.update(sess.variables)
    np.testing.assert_allclose(ref.run(upd, {x: ones}), np.full(2, 14.0))


def test_a_kernel_error_on_the_lane_is_raised_and_writes_no_variable() -> None:
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        v = tn.Variable(np.int32(100), name="v")
        upd = v.assign(v.read() // k)
    sess = tn.Session(g, backend="fast")
    assert int(sess.run(upd, {k: np.int32(2)})) == 50
    assert int(sess.run(upd, {k: np.int32(5)})) == 10
    assert _route(sess) == "lane"
    with pytest.raises(KernelError, match="division"):
        sess.run(upd, {k: np.int32(0)})
    assert int(sess.variables["v"]) == 10
    assert int(sess.run(upd, {k: np.int32(2)})) == 5


def _counting_loop() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        _, s = tn.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + i), [tn.constant(0), tn.constant(0)])
    return g, n, s


def test_options_other_than_the_defaults_never_take_the_lane() -> None:
    g, n, s = _counting_loop()
    sess = tn.Session(g, backend="fast")
    for _ in range(2):
        assert int(sess.run(s, {n: np.int32(10)})) == 45
    assert _route(sess) == "lane"
    with pytest.raises(NonTerminationError):
        sess.run(s, {n: np.int32(10)}, options={"max_iterations": 3})
    traced = sess.run(s, {n: np.int32(10)}, options={"trace": True})
    assert int(traced) == 45 and sess.last_result.trace is not None
    assert int(sess.run(s, {n: np.int32(10)})) == 45
    assert _route(sess) == "lane"


def _int_and_float(int_type: tn.DType, float_type: tn.DType, factor: float, int_name: str
                   ) -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tuple[tn.Tensor, tn.Tensor]]:
    """Two scalar placeholders and a tuple fetch ``(i + 1, f * factor)``: the smallest program whose
    feeds' dtypes and kinds a lane must check."""
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(int_type, [], name=int_name)
        f = tn.placeholder(float_type, [], name="f")
        out = (i + 1, f * factor)
    return g, i, f, out


def test_a_lane_with_64_bit_feeds_keeps_their_precision() -> None:
    g, i, f, out = _int_and_float(tn.int64, tn.float64, 3.0, "i")
    sess = tn.Session(g, backend="fast")
    for k in range(3):
        big = np.int64(2**40 + k)
        got_i, got_f = sess.run(out, {i: big, f: np.float64(1 / 3)})
        assert int(got_i) == 2**40 + k + 1 and got_i.dtype == np.int64
        assert float(got_f) == 1 / 3 * 3.0 and got_f.dtype == np.float64
    assert _route(sess) == "lane"


def test_a_program_without_feeds_takes_the_lane() -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.float32(1.0), name="v")
        out = v.assign(v.read() * 2.0)
    sess = tn.Session(g, backend="fast")
    assert [float(sess.run(out)) for _ in range(4)] == [2.0, 4.0, 8.0, 16.0]
    assert _route(sess) == "lane"
    assert float(sess.run(out, {})) == 32.0
    assert _route(sess) == "lane"


@pytest.mark.parametrize("kind", [list, tuple])
def test_a_training_step_with_an_op_fetch_takes_the_lane_and_trains_as_the_reference(kind: type) -> None:
    def build() -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor, object]:
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.float32, [4, 3], name="x")
            y = tn.placeholder(tn.float32, [4], name="y")
            w = tn.Variable(np.ones(3, np.float32) * 0.5, name="w")
            err = tn.reduce_sum(x * w.read(), axis=1) - y
            loss = tn.reduce_mean(err * err)
            step = tn.train.SGD(0.1).minimize(loss)
        return g, x, y, loss, step

    rng = np.random.default_rng(0)
    batches = [(rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=4).astype(np.float32)) for _ in range(4)]
    results = {}
    for backend in ("reference", "fast"):
        g, x, y, loss, step = build()
        sess = tn.Session(g, backend=backend)
        got = []
        for xb, yb in batches:
            out = sess.run(kind([loss, step]), {x: xb, y: yb})
            assert type(out) is kind and out[1] is None
            got.append(float(out[0]))
        results[backend] = (got, sess.variables["w"].copy())
        if backend == "fast":
            assert _route(sess) == "lane"
    np.testing.assert_allclose(results["fast"][0], results["reference"][0], rtol=1e-6)
    np.testing.assert_allclose(results["fast"][1], results["reference"][1], rtol=1e-6)


def test_python_numbers_take_the_lane_with_the_sessions_per_value_checks() -> None:
    g, n, f, out = _int_and_float(tn.int32, tn.float32, 2.0, "n")
    sess = tn.Session(g, backend="fast")
    for k in range(3):
        got_n, got_f = sess.run(out, {n: 40 + k, f: 0.25})
        assert int(got_n) == 41 + k and got_n.dtype == np.int32 and float(got_f) == 0.5
    assert _route(sess) == "lane"
    with pytest.raises(FeedError, match="n"):
        sess.run(out, {n: 2**40, f: 0.25})  # out of int32's range: refused, as on the general route
    with pytest.raises(FeedError, match="f"):
        sess.run(out, {n: 1, f: 1e39})  # does not fit a float32
    with pytest.raises(FeedError):
        sess.run(out, {n: 1.5, f: 0.25})  # a float fed to an int tensor
    got_n, got_f = sess.run(out, {n: -7, f: float("inf")})
    assert int(got_n) == -6 and np.isinf(got_f)
    assert _route(sess) == "lane"
    ref = tn.Session(g)
    np.testing.assert_array_equal(sess.run(out, {n: 2**31 - 2, f: -3.5}), ref.run(out, {n: 2**31 - 2, f: -3.5}))


def test_a_dead_fetch_beside_a_live_one_is_refused_on_the_lane() -> None:
    """Two fetches, one on each side of a Switch: whichever side the predicate leaves untaken is dead,
    and the lane raises ``DeadFetchError`` for it although the other fetch is live (the lane's shortcut
    for runs whose fetches are all live must not take such a run)."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        x = tn.placeholder(tn.float32, [], name="x")
        f, t = tn.raw.switch(x, p)
        k = tn.placeholder(tn.int32, [], name="k")
        q = tn.constant(8) // k  # a check that can fail: the run reads its error word and live flags
        yt, yf = t * 3.0, f * 3.0
    sess = tn.Session(g, backend="fast")
    for fetches, p_live in (([q, yt], True), ([q, yf], False)):
        for _ in range(2):
            got = sess.run(fetches, {p: p_live, x: 2.0, k: 2})
            assert got[0] == 4 and got[1] == 6.0
        assert _route(sess) == "lane"
        with pytest.raises(tn.DeadFetchError, match="is dead"):
            sess.run(fetches, {p: not p_live, x: 2.0, k: 2})
        assert sess.run(fetches, {p: p_live, x: 1.0, k: 4})[1] == 3.0


def test_a_lane_of_mixed_feeds_checks_each_one_as_the_session_does() -> None:
    """The lane's code is written for its feeds (``fast.lane_text.lane_text``): an array, a numpy scalar,
    a Python int and a Python float, each checked in its own way. Every change to one of them leaves
    the lane and gets the general route's answer: a value, or the session's error."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        k = tn.placeholder(tn.int32, [], name="k")
        m = tn.placeholder(tn.int32, [], name="m")
        s = tn.placeholder(tn.float32, [], name="s")
        y = x * s + tn.cast(k * m, tn.float32)
    sess = tn.Session(g, backend="fast")
    a = np.arange(3, dtype=np.float32)

    def want(xv: np.ndarray, kv: int, mv: int, sv: float) -> np.ndarray:
        return np.asarray(xv, np.float32) * np.float32(sv) + np.float32(kv * mv)

    for j in range(3):
        np.testing.assert_allclose(sess.run(y, {x: a + j, k: np.int32(j), m: 5, s: 0.5}), want(a + j, j, 5, 0.5))
    assert _route(sess) == "lane"
    changed = [
        ({x: a, k: np.int32(2), s: 0.5, m: 5}, want(a, 2, 5, 0.5)),  # another order
        ({x: a.astype(np.float64), k: np.int32(2), m: 5, s: 0.5}, want(a, 2, 5, 0.5)),  # an array to convert
        ({x: a, k: 2, m: 5, s: 0.5}, want(a, 2, 5, 0.5)),  # a Python int for the numpy scalar
        ({x: a, k: np.int32(2), m: np.int32(5), s: 2}, want(a, 2, 5, 2.0)),  # an int into a float
    ]
    for feeds, expected in changed:
        np.testing.assert_allclose(sess.run(y, feeds), expected)
        assert _route(sess) != "lane" or list(feeds) == [x, k, m, s]
    for bad, error in (({x: a, k: np.int32(1), m: 2**31, s: 0.5}, FeedError),  # out of int32's range
                       ({x: a, k: np.int32(1), m: 1, s: 1e39}, FeedError),  # beyond float32's range
                       ({x: a[:2], k: np.int32(1), m: 1, s: 0.5}, FeedError),  # another shape
                       ({x: a, k: np.float32(1), m: 1, s: 0.5}, FeedError)):  # a float for an int
        with pytest.raises(error):
            sess.run(y, bad)
    np.testing.assert_allclose(sess.run(y, {x: a, k: np.int32(3), m: 5, s: 0.5}), want(a, 3, 5, 0.5))
    np.testing.assert_allclose(sess.run(y, {x: a, k: np.int32(3), m: 5, s: 0.5}), want(a, 3, 5, 0.5))
    assert _route(sess) == "lane"


# ---- the lane of a plan's fused attempt (a gradient through a loop: ``make_fused_lane``) --------------
def _both(g: tn.Graph) -> tuple[tn.Session, tn.Session]:
    return tn.Session(g, backend="fast"), tn.Session(g, backend="reference")


def test_a_repeated_training_step_through_a_loop_takes_the_fused_lane_and_trains_as_the_reference() -> None:
    """Runs two and later of the same signature take the fused attempt's lane; every run's loss and
    the trained Variable match the reference, and nothing is compiled after the first run."""
    g, t = rnn_training_step()
    fast, ref = _both(g)
    xv = np.array([0.1, -0.2, 0.3, 0.05], np.float32)
    routes = []
    for k in range(6):
        feed = {t["x"]: xv + k, t["n"]: 3}
        got, want = fast.run([t["loss"], t["step"]], feed), ref.run([t["loss"], t["step"]], feed)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        assert got[1] is None
        routes.append(_route(fast))
        if k == 0:
            compiles = fast.backend.compile_count
    assert routes == ["general", "lane", "lane", "lane", "lane", "lane"]
    assert fast.backend.compile_count == compiles
    np.testing.assert_allclose(fast.variables["w"], ref.variables["w"], rtol=1e-5)
    assert fast.last_result.stats["fused"]


@pytest.mark.parametrize("n", [3, 128])
def test_a_fused_lane_lays_out_its_flat_arguments_as_the_stage_does(n: int) -> None:
    """The fused stage takes its arguments by position (``Plan.fused_fn``): feeds, Variables, stacks.
    A step with three feeds of distinct shapes given in another order than the stage reads them, two
    Variables declared in the other order than they are read (one trained, one only read), and three
    fetches (the loss, which carries the flags, a vector and the op) repeats on the lane with the
    reference's values: an argument put in another's place would fail on its shape or give other
    values. At width 3 its stacks are made inside the call; at 128 they are kept between runs (more
    than ``plan.inside_stacks`` makes inside), donated to the call and handed back, each in its own
    buffer (``CallSpec``: a stack handed back in another's place would be copied every run; the
    body's ``tanh`` and ``sigmoid`` save two stacks of one shape)."""
    g = tn.Graph()
    rng = np.random.default_rng(3)
    with g.as_default():
        scale = tn.Variable(rng.normal(size=n).astype(np.float32), name="scale")
        w = tn.Variable((rng.normal(size=(n, n)) * 0.3 / np.sqrt(n)).astype(np.float32), name="w")
        x = tn.placeholder(tn.float32, [n], name="x")
        b = tn.placeholder(tn.float32, [2, n], name="b")
        k = tn.placeholder(tn.int32, [], name="k")
        _, h = tn.while_loop(lambda i, h: i < k,
                             lambda i, h: (i + 1, tn.tanh(tn.matmul(tn.reshape(h, [1, n]), w.read())[0] + x)
                                           * tn.sigmoid(h - x)),
                             [tn.constant(0), tn.zeros([n], tn.float32)])
        v = h * scale.read() + tn.reduce_sum(b, axis=0)
        loss = tn.reduce_sum(v * v)
        step = tn.train.SGD(0.05).minimize(loss, var_list=[w])
    fast, ref = _both(g)
    xv, bv = rng.normal(size=n).astype(np.float32), rng.normal(size=(2, n)).astype(np.float32)
    routes, pointers = [], []
    for j in range(4):
        feed = {b: bv + j, k: 4, x: xv - j}  # (not the order the stage reads them in)
        got, want = fast.run([loss, v, step], feed), ref.run([loss, v, step], feed)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-5)
        assert got[2] is None
        routes.append(_route(fast))
        (kept,) = fast.backend._stack_bufs.values()
        pointers.append({key: a.unsafe_buffer_pointer() for key, a in kept.items()})
    assert routes == ["general", "lane", "lane", "lane"]
    np.testing.assert_allclose(fast.variables["w"], ref.variables["w"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(fast.variables["scale"], ref.variables["scale"])
    import jax

    from turnout.fast.repeat import HotFused

    (hot,) = [d for d, _ in fast.backend.repeats.routes.values() if isinstance(d, HotFused)]
    layout = hot.plan.fused.spec.args
    assert layout is not None and len(layout.feeds) == 3 and len(layout.state) == 2
    assert len(layout.stacks) == len(hot.plan.kept) and (n == 3 or len(layout.stacks) >= 2)
    if n == 3 and hot.plan.options.inside_limit(jax.default_backend()) > 0:  # (the CPU's: made inside)
        assert not layout.stacks
    assert all(p == pointers[1] for p in pointers[2:])  # each stack back in its own buffer


def test_a_fused_lane_hands_a_run_that_outgrows_its_stacks_back_to_the_general_path() -> None:
    """The lane runs on the stack capacity that held the last run (128 entries): a run of 300
    iterations outgrows it, the lane hands it back, and the general path climbs to the next rung
    and gives the reference's values; Variables are trained once per run, never twice."""
    g, t = rnn_training_step()
    fast, ref = _both(g)
    xv = np.array([0.1, -0.2, 0.3, 0.05], np.float32)
    for trips in (3, 3, 3, 300, 300, 300, 4):
        feed = {t["x"]: xv, t["n"]: trips}
        got, want = fast.run([t["loss"], t["step"]], feed), ref.run([t["loss"], t["step"]], feed)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-4)
        np.testing.assert_allclose(fast.variables["w"], ref.variables["w"], rtol=1e-4)
        if trips == 300 and _route(fast) == "general":
            assert fast.last_result.stats["stack_capacity"] > 128


def _a_branch_tensor(g: tn.Graph, t: dict[str, Any]) -> tuple[tn.Tensor, tn.Tensor]:
    """``(p, picked)``: a fed predicate ``p`` added to ``graphs.rnn_training_step``'s graph, and a tensor of a cond's
    true branch on it (``h * 2``), dead when ``p`` is false."""
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        inside: list[tn.Tensor] = []

        def doubled() -> tn.Tensor:
            inside.append(t["h"] * 2.0)
            return inside[0] + 0.0

        tn.cond(p, doubled, lambda: t["h"] - 1.0)
    return p, inside[0]


def test_a_fused_lane_sees_released_buffers_a_replaced_variable_and_a_dead_fetch() -> None:
    """Each thing the fused lane depends on, changed between runs: stack buffers released
    (``release_buffers``), a Variable set from outside, a fetch on a branch that does not run. The
    run after each is the reference's, and a dead fetch is refused as on the general path."""
    g, t = rnn_training_step()
    p, picked = _a_branch_tensor(g, t)
    fast, ref = _both(g)
    xv = np.array([0.1, -0.2, 0.3, 0.05], np.float32)

    def both(fetches: list[Any], extra: dict[Any, Any]) -> None:
        feed = {t["x"]: xv, t["n"]: 3, **extra}
        for a, b in zip(fast.run(fetches, feed), ref.run(fetches, feed), strict=True):
            if b is not None:
                np.testing.assert_allclose(a, b, rtol=1e-5)
        np.testing.assert_allclose(fast.variables["w"], ref.variables["w"], rtol=1e-5)

    for _ in range(3):
        both([t["loss"], t["step"]], {})
    assert _route(fast) == "lane"
    fast.backend.release_buffers()
    both([t["loss"], t["step"]], {})
    assert _route(fast) == "general"
    for sess in (fast, ref):
        sess.variables["w"] = np.array([1.0, 0.5, -0.5, 0.25], np.float32)
    both([t["loss"], t["step"]], {})
    assert _route(fast) != "lane"
    for _ in range(3):
        both([t["loss"], picked, t["step"]], {p: True})
    assert _route(fast) == "lane"
    with pytest.raises(tn.DeadFetchError):
        fast.run([t["loss"], picked, t["step"]], {t["x"]: xv, t["n"]: 3, p: False})
    with pytest.raises(tn.DeadFetchError):
        ref.run([t["loss"], picked, t["step"]], {t["x"]: xv, t["n"]: 3, p: False})
    np.testing.assert_allclose(fast.variables["w"], ref.variables["w"], rtol=1e-5)


def test_a_fused_lane_returns_a_fetched_feed() -> None:
    """Regression (found by the ``dev`` profile of
    ``test_generated_gradients_over_batches_of_unknown_size_compile_and_agree``): a fed tensor fetched
    beside a gradient through a loop does not cross the fused call (``FusedStage.passthrough``). Making the
    lane failed on the first run, looking for it among the call's results (and before the flat call,
    the lane's repeat raised ``KeyError``). The lane returns the fed value, as the general path does,
    as an array or a Python number, and a dead fetch beside it is still refused."""
    g, t = rnn_training_step()
    p, picked = _a_branch_tensor(g, t)
    fast, ref = _both(g)
    xv = np.array([0.1, -0.2, 0.3, 0.05], np.float32)
    for n in (3, np.int32(3)):
        for _ in range(3):
            feed = {t["x"]: xv, t["n"]: n, p: True}
            fetches = [t["loss"], t["x"], t["n"], picked, t["step"]]
            got, want = fast.run(fetches, feed), ref.run(fetches, feed)
            for a, b in zip(got[:4], want[:4], strict=True):
                np.testing.assert_allclose(a, b, rtol=1e-5)
            assert got[1].dtype == np.float32 and got[2].dtype == np.int32 and got[2].shape == ()
        assert _route(fast) == "lane"
        for sess in (fast, ref):
            with pytest.raises(tn.DeadFetchError):
                sess.run(fetches, {**feed, p: False})
    np.testing.assert_allclose(fast.variables["w"], ref.variables["w"], rtol=1e-5)


def test_a_fused_lane_raises_a_runaway_loop_as_the_general_path_does() -> None:
    """The lane calls with the default iteration bound: a loop that runs past it raises
    ``NonTerminationError`` there, and no Variable is trained by that run."""
    g, t = rnn_training_step()
    fast = tn.Session(g, backend="fast")
    xv = np.array([0.1, -0.2, 0.3, 0.05], np.float32)
    for _ in range(3):
        fast.run([t["loss"], t["step"]], {t["x"]: xv, t["n"]: 3})
    assert _route(fast) == "lane"
    before = np.array(fast.variables["w"])
    with pytest.raises(NonTerminationError):
        fast.run([t["loss"], t["step"]], {t["x"]: xv, t["n"]: 2**31 - 1})
    np.testing.assert_array_equal(fast.variables["w"], before)


def test_a_device_array_feed_takes_the_lane_until_it_is_deleted() -> None:
    """A ``jax.Array`` fed on the backend's device goes to the compiled call as it is, on the lane too
    (a Direct run and a fused training step): each run checks that it still holds a value, so a
    deleted one is the session's ``FeedError``, never a crash inside JAX, and another live array of
    the same signature takes the lane again."""
    jax = pytest.importorskip("jax")
    g, t = rnn_training_step()
    with g.as_default():
        doubled = t["x"] * 2.0
    fast, ref = _both(g)
    host = np.array([0.1, -0.2, 0.3, 0.05], np.float32)
    for fetches, extra in (([doubled], {}), ([t["loss"], t["step"]], {t["n"]: 3})):
        dev = jax.device_put(host)
        for _ in range(3):
            got, want = fast.run(fetches, {t["x"]: dev, **extra}), ref.run(fetches, {t["x"]: host, **extra})
            np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        assert _route(fast) == "lane"
        dev.delete()
        with pytest.raises(FeedError, match="deleted"):
            fast.run(fetches, {t["x"]: dev, **extra})
        again = jax.device_put(host)
        for _ in range(2):
            got, want = fast.run(fetches, {t["x"]: again, **extra}), ref.run(fetches, {t["x"]: host, **extra})
            np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        assert _route(fast) == "lane"
    np.testing.assert_allclose(fast.variables["w"], ref.variables["w"], rtol=1e-5)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_fused_lane_with_overlapped_reads_trains_as_the_reference(overlap: bool) -> None:
    """``overlap_reads`` (on for a GPU; forced here) makes a lane start every read-back before
    waiting for the first; the fused lane's runs still give the reference's losses and Variables,
    and raise a runaway loop."""
    g, t = rnn_training_step()
    fast, ref = _both(g)
    fast.backend.overlap_reads = overlap
    xv = np.array([0.1, -0.2, 0.3, 0.05], np.float32)
    for k in range(4):
        feed = {t["x"]: xv * k, t["n"]: 3}
        np.testing.assert_allclose(fast.run([t["loss"], t["step"]], feed)[0],
                                   ref.run([t["loss"], t["step"]], feed)[0], rtol=1e-5)
    assert _route(fast) == "lane"
    np.testing.assert_allclose(fast.variables["w"], ref.variables["w"], rtol=1e-5)
    with pytest.raises(NonTerminationError):
        fast.run([t["loss"], t["step"]], {t["x"]: xv, t["n"]: 2**31 - 1})


def test_no_fused_lane_is_made_for_a_stage_not_compiled_again_yet() -> None:
    """A fused stage traced again (``Plan.record_every_stack`` drops its function until the next
    attempt compiles it) has no executable to repeat: ``make_fused_lane`` makes no lane for it, and
    makes one again once a run has compiled the stage."""
    from turnout.fast.fused_lane import make_fused_lane
    from turnout.fast.repeat import HotFused

    g, t = rnn_training_step()
    fast = tn.Session(g, backend="fast")
    xv = np.array([0.1, -0.2, 0.3, 0.05], np.float32)
    fetches = [t["loss"], t["step"]]
    fast.run(fetches, {t["x"]: xv, t["n"]: 3})
    (h,) = [d for d, _ in fast.backend.repeats.routes.values() if isinstance(d, HotFused)]
    feeds = {t["x"]: xv, t["n"]: np.asarray(3, np.int32)}
    assert make_fused_lane(fast.backend, h, [t["loss"]], feeds, feeds) is not None
    seg = h.plan.fused.fns.pop("seg")
    assert make_fused_lane(fast.backend, h, [t["loss"]], feeds, feeds) is None
    h.plan.fused.fns["seg"] = seg
    assert make_fused_lane(fast.backend, h, [t["loss"]], feeds, feeds) is not None


def test_a_signature_refused_a_lane_does_not_refuse_another_dtype() -> None:
    """A float64 array fed to a float32 tensor needs converting, so the session makes no lane for it
    (the backend's route runs it, after the conversion); a float32 array of the same shape fed next
    is another signature, and gets its lane."""
    g, x, y = _affine()
    sess = tn.Session(g, backend="fast")
    wide = np.arange(4, dtype=np.float64)
    for _ in range(3):
        np.testing.assert_allclose(sess.run(y, {x: wide}), wide * 2 + 1)
    assert _route(sess) == "hot"
    narrow = wide.astype(np.float32)
    for _ in range(3):
        np.testing.assert_allclose(sess.run(y, {x: narrow}), narrow * 2 + 1)
    assert _route(sess) == "lane"


def test_a_fused_lane_is_made_once_per_signature(monkeypatch: Any) -> None:
    """Making a lane looks its executable up in JAX's caches and compiles Python text: the backend
    keeps each lane it made (by route, fetches and feed signature) and repeats reuse it. Here two
    lanes are made in all: the session's, for the feed dict as given (a Python int), and the
    backend's, for the feeds as the session converted them (runs given options)."""
    import turnout.fast.repeat as repeat_module

    made = {"n": 0}
    inner = repeat_module.make_fused_lane

    def counted(*a: Any, **k: Any) -> Any:
        made["n"] += 1
        return inner(*a, **k)

    monkeypatch.setattr(repeat_module, "make_fused_lane", counted)
    g, t = rnn_training_step()
    fast = tn.Session(g, backend="fast")
    xv = np.array([0.1, -0.2, 0.3, 0.05], np.float32)
    for k in range(5):
        fast.run([t["loss"], t["step"]], {t["x"]: xv + k, t["n"]: 3})
    assert _route(fast) == "lane"
    for k in range(3):
        fast.run([t["loss"], t["step"]], {t["x"]: xv - k, t["n"]: 3}, options={})
    assert _route(fast) == "hot"
    assert made["n"] == 2


def test_lanes_of_replaced_routes_are_not_kept() -> None:
    """A Variable set from outside before every run sends every run to the general path, which records
    a new route for a fused plan each time; the backend keeps the lanes of the current routes only,
    not one per run, and every run trains as the reference does."""
    g, t = rnn_training_step()
    fast, ref = _both(g)
    xv = np.array([0.1, -0.2, 0.3, 0.05], np.float32)
    for k in range(8):
        for sess in (fast, ref):
            sess.variables["w"] = np.array([0.5, -0.4, 0.3, 0.2], np.float32) * (1 + 0.1 * k)
        feed = {t["x"]: xv, t["n"]: 3}
        np.testing.assert_allclose(fast.run([t["loss"], t["step"]], feed)[0],
                                   ref.run([t["loss"], t["step"]], feed)[0], rtol=1e-5)
        np.testing.assert_allclose(fast.variables["w"], ref.variables["w"], rtol=1e-5)
    repeats = fast.backend.repeats
    routes = {id(d) for d, _ in repeats.routes.values()}
    assert all(id(d) in routes for d, _ in repeats.lanes.values())
    assert len(repeats.lanes) <= 2


def test_a_deeply_nested_training_step_takes_a_lane_that_calls_the_jitted_function() -> None:
    """A program nested more deeply than ``fast.deep.DEEP_NESTING`` is traced on a large stack; its
    lanes call the jitted function (in 64-bit mode) rather than lowering it again for an
    ahead-of-time executable, and its repeats give the reference's values."""
    from turnout.fast.deep import DEEP_NESTING

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")

        def nest(v: Any, depth: int) -> Any:
            if depth == 0:
                return v * 1.0
            return tn.cond(v > 100.0 + depth, lambda: nest(v * 0.5, depth - 1), lambda: v + 0.001)

        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tn.tanh(nest(y * x, DEEP_NESTING + 6))),
                             [tn.constant(0), tn.constant(0.3)])
        (dx,) = tn.gradients(y, [x])
    fast, ref = _both(g)
    for k in range(3):
        feed = {x: 0.9 + 0.01 * k, n: 3}
        for a, b in zip(fast.run([y, dx], feed), ref.run([y, dx], feed), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5)
    assert _route(fast) == "lane" and fast.backend._deep_nesting > DEEP_NESTING
    lanes = [lane for _, lane in fast.backend.repeats.lanes.values()]
    assert lanes and not any(lane.ahead_of_time for lane in lanes)


def test_a_lanes_text_is_registered_so_tracebacks_show_it() -> None:
    """A lane is generated text: its file name is registered with ``linecache`` (``lane_filename``),
    so a traceback through it shows its lines instead of a frame without source."""
    import linecache

    g, x, y = _affine()
    sess = tn.Session(g, backend="fast")
    for k in range(3):
        sess.run(y, {x: np.arange(3, dtype=np.float32) + k})
    assert _route(sess) == "lane"
    lanes = [lane for made in sess._lanes.values() for lane, _ in made]
    assert lanes
    for lane in lanes:
        code = lane.__code__
        assert code.co_filename.startswith("<turnout.fast.lane ")
        first = linecache.getline(code.co_filename, code.co_firstlineno)
        assert first.lstrip().startswith("def "), first


@pytest.mark.parametrize("kind", [int, np.int32, lambda v: np.array([v, 1], np.int32)],
                         ids=["python int", "numpy scalar", "small array"])
def test_a_plan_specialised_on_a_feed_takes_the_lane_for_that_value_only(kind: Any) -> None:
    """A plan specialised on a fed size (``fast.specialise``: its value is a constant of the trace) is
    repeated by a lane that checks the feed holds that value (``LaneCall.fixed``); a run with another
    value is handed back to the general path (its own plan, then its own lane), and each gives the
    reference's values."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [] if kind in (int, np.int32) else [2], name="n")
        x = tn.placeholder(tn.float32, [], name="x")
        y = tn.fill(tn.reshape(tn.reduce_sum(n), [1]), x) * 2.0
    sess, ref = tn.Session(g, backend="fast"), tn.Session(g)
    routes = []
    for v, xv in ((3, 1.0), (3, 2.0), (3, 3.0), (4, 1.0), (4, 1.5), (3, 0.5), (3, 0.25)):
        feed = {n: kind(v), x: xv}
        np.testing.assert_array_equal(sess.run(y, feed), ref.run(y, feed))
        routes.append(_route(sess))
        assert sess.last_result.stats["specialized_on"] == ["n:0"]
    # (back to 3: the session still holds the lane of the plan for 3, and takes it)
    assert routes == ["general", "lane", "lane", "general", "lane", "lane", "lane"]


def test_a_fused_lane_of_a_specialised_plan_checks_the_value_it_is_specialised_on() -> None:
    """The same for a plan with gradient stacks (its fused attempt's lane): a loop whose state is
    filled to a fed length, with its gradient."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        x = tn.placeholder(tn.float32, [], name="x")
        v0 = tn.fill(tn.reshape(n, [1]), x)
        _, v = tn.while_loop(lambda i, v: i < 4, lambda i, v: (i + 1, tn.tanh(v) * 1.5), [tn.constant(0), v0])
        (dx,) = tn.gradients(tn.reduce_sum(v), [x])
    sess, ref = tn.Session(g, backend="fast"), tn.Session(g)
    routes = []
    for k, size in enumerate((2, 2, 2, 5, 5, 2)):
        feed = {n: size, x: 0.1 * (k + 1)}
        got, want = sess.run([v, dx], feed), ref.run([v, dx], feed)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        routes.append(_route(sess))
    assert sess.last_result.stats["fused"] and sess.last_result.stats["specialized_on"] == ["n:0"]
    # (a plan learns its stacks' shapes from a trace before its one compile,
    # ``FusedAttempts._learn_stack_shapes``: the second run of a size is on the lane; back to 2, the
    # session still holds that size's lane)
    assert routes == ["general", "lane", "lane", "general", "lane", "lane"]


def test_a_lane_specialised_on_a_python_int_refuses_another_value_or_one_out_of_range() -> None:
    """The lane of a plan specialised on a Python int compares the feed with the Python value (equal,
    it fits the feed's dtype): a value out of the dtype's range, or equal only after conversion, is
    the general path's, which refuses the first as the reference does and runs the second on its own
    plan."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        y = tn.fill(tn.reshape(n, [1]), 2.0)
    sess, ref = tn.Session(g, backend="fast"), tn.Session(g)
    for _ in range(2):
        np.testing.assert_array_equal(sess.run(y, {n: 3}), [2.0, 2.0, 2.0])
    assert _route(sess) == "lane"
    with pytest.raises(FeedError) as fast_error:
        sess.run(y, {n: 3 + 2**32})  # (3 after a wrapping conversion to int32)
    with pytest.raises(FeedError) as ref_error:
        ref.run(y, {n: 3 + 2**32})
    assert str(fast_error.value) == str(ref_error.value)
    np.testing.assert_array_equal(sess.run(y, {n: 3}), [2.0, 2.0, 2.0])
    assert _route(sess) == "lane"
    np.testing.assert_array_equal(sess.run(y, {n: np.int32(2)}), [2.0, 2.0])


def test_a_gradient_whose_stacks_live_in_a_cond_branch_takes_the_fused_lane() -> None:
    """Regression (found by the ``dev`` profile of tests/test_routes.py): a program whose gradient
    stacks are pushed only by a scan inside a ``cond`` branch is one stage with no driven loop. It had
    no fused attempt, so every run took the general path with its stacks at the full chunk (1024
    entries), and none took a lane. It now has one: its repeats take the lane, its stacks start on
    the ladder's first rung, and its values are the reference's whichever branch runs."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        fs = tn.placeholder(tn.float64, [2], name="fs")
        one = tn.constant(1.0, tn.float64)
        y = tn.cond(x > 0, lambda: tn.constant(0.0, tn.float64),
                    lambda: tn.reduce_sum(tn.scan(lambda c, e: c * e + e, fs, initializer=one)))
        (d,) = tn.gradients(y, [fs])
    fast, ref = _both(g)
    for xv in (2, 2, 2, -1, -1, -1):
        feed = {x: np.int32(xv), fs: np.array([0.5, 3.0])}
        got = fast.run(d, feed)
        np.testing.assert_array_equal(got, ref.run(d, feed))
    stats = fast.last_result.stats
    assert _route(fast) in ("lane", "hot") and stats.get("stack_capacity", 0) <= 128, stats
