"""``tn.random`` and ``tn.nn.dropout``: random ops drawn anew at every execution, the same numbers on
every executor.

Laws: a random op's ``k``-th execution in a session draws the ``k``-th chunk of its Philox stream
(TensorFlow's: ``256 n`` calls per execution of ``n`` outputs; ``turnout.tf_random`` is
checked against TensorFlow in tests/test_tf_random.py); executions are counted across runs and
across loop iterations in iteration order, whatever the scheduler; every route gives the reference
interpreter's uniform numbers bit for bit and its normals to float32 rounding (docs/random.rst).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from route_table import ROUTES

import turnout as tn
from turnout import tf_random
from turnout.errors import ArgumentError, DTypeError, KernelError, ShapeError, UnsupportedError

pytest.importorskip("jax")

F32 = np.dtype(np.float32)
DEVICES = ["cpu:0", "cpu:1", "cpu:2"]


def chunk(seed: int, seed2: int, n: int, k: int, draw: Any = tf_random.uniform) -> np.ndarray:
    """The ``k``-th execution's ``n`` float32 values of the stream ``(seed, seed2)``."""
    return draw(seed, seed2, n, F32, k * n * 256)


def test_kth_run_draws_the_kth_chunk(backend: str) -> None:
    """Law: run ``k`` of a seeded op (op seed 7, no graph seed: TensorFlow's key 87654321, 7) draws
    the Philox calls from ``256 n k`` on; a new session starts the stream again."""
    g = tn.Graph()
    with g.as_default():
        u = tn.random.uniform([5], seed=7)
        n = tn.random.normal([4], seed=8, dtype=tn.float64)
        i = tn.random.uniform([3], minval=-4, maxval=9, dtype=tn.int64, seed=9)
    for _ in range(2):
        sess = tn.Session(g, backend=backend)
        for k in range(3):
            a, b, c = sess.run([u, n, i])
            assert a.tobytes() == chunk(87654321, 7, 5, k).tobytes()
            np.testing.assert_allclose(b, tf_random.normal(87654321, 8, 4, np.dtype(np.float64), k * 4 * 256),
                                       rtol=1e-15)
            want = tf_random.uniform_int(87654321, 9, 3, -4, 9, np.dtype(np.int64), k * 3 * 256)
            np.testing.assert_array_equal(c, want)


def test_graph_seed_and_op_seed_follow_tensorflow_1() -> None:
    """Law (TensorFlow 1's get_seed): the graph seed is the key, the op seed the counter's high half;
    an op without a seed under a graph seed takes the number of nodes built before it (so the same
    program draws the same numbers, and two such ops differ)."""
    def build() -> tuple[tn.Graph, list[tn.Tensor]]:
        g = tn.Graph()
        with g.as_default():
            tn.random.set_random_seed(5)
            outs = [tn.random.uniform([2], seed=3), tn.random.uniform([2]), tn.random.uniform([2])]
        return g, outs

    g, outs = build()
    a, b, c = tn.Session(g).run(outs)
    assert a.tobytes() == chunk(5, 3, 2, 0).tobytes()
    draws = [n for n in g.nodes if n.op == "RandomDraw"]
    assert [n.attrs["seed"] for n in draws] == [5, 5, 5]
    assert draws[0].id < draws[1].attrs["seed2"] < draws[1].id < draws[2].attrs["seed2"] < draws[2].id
    assert b.tobytes() == chunk(5, draws[1].attrs["seed2"], 2, 0).tobytes() and b.tobytes() != c.tobytes()
    g2, outs2 = build()
    assert [x.tobytes() for x in tn.Session(g2).run(outs2)] == [a.tobytes(), b.tobytes(), c.tobytes()]


def test_seeds_are_taken_modulo_2_31_minus_1_as_tensorflows() -> None:
    """Found by the bug hunt of 2026-12-06: TensorFlow's ``get_seed`` takes each seed modulo
    ``2**31 - 1`` before the kernel sees it (``_truncate_seed``), and only then turns (0, 0) into
    (0, 2**31 - 1); Turnout took them modulo ``2**64``, so an op seed of -1 or ``2**31`` or a graph
    seed of ``2**31 - 1`` drew other numbers than TensorFlow's."""
    m = 2**31 - 1
    g = tn.Graph()
    with g.as_default():
        outs = [tn.random.uniform([3], seed=s) for s in (-1, 2**31, 2**64 + 5)]
        tn.random.set_random_seed(m)
        outs += [tn.random.uniform([3], seed=m), tn.random.uniform([3], seed=m + 7)]
    keys = [(n.attrs["seed"], n.attrs["seed2"]) for n in g.nodes if n.op == "RandomDraw"]
    assert keys == [(87654321, m - 1), (87654321, 1), (87654321, (2**64 + 5) % m), (0, m), (0, 7)]
    for got, key in zip(tn.Session(g).run(outs), keys, strict=True):
        assert got.tobytes() == chunk(*key, 3, 0).tobytes()


def test_scaled_draws(backend: str) -> None:
    """Law: ``uniform(minval, maxval) = u * (maxval - minval) + minval`` and ``normal(mean, stddev) =
    z * stddev + mean``, ``truncated_normal`` likewise with ``|z| < 2``."""
    g = tn.Graph()
    with g.as_default():
        u = tn.random.uniform([6], minval=-2.0, maxval=3.0, seed=1)
        t = tn.random.truncated_normal([50], mean=1.0, stddev=0.5, seed=2)
    a, b = tn.Session(g, backend=backend).run([u, t])
    np.testing.assert_allclose(a, chunk(87654321, 1, 6, 0) * 5.0 - 2.0, rtol=1e-6)
    np.testing.assert_allclose(b, chunk(87654321, 2, 50, 0, tf_random.truncated_normal) * 0.5 + 1.0, rtol=1e-6)
    assert np.all(np.abs(b - 1.0) < 1.0)


# ---- loops --------------------------------------------------------------------------------------------
def _loop_program() -> tuple[tn.Graph, list[tn.Tensor], tn.Tensor]:
    """Draws at the root, in a while loop (nested in another), in a scan, in a cond; and dropout's
    gradient through the loop."""
    g = tn.Graph()
    with g.as_default():
        tn.random.set_random_seed(11)
        n = tn.placeholder(tn.int32, shape=[], name="n")
        w = tn.Variable(np.full((3, 3), 0.3, np.float32), name="w")

        def body(i: Any, h: Any, ta: Any) -> Any:
            def inner(j: Any, a: Any) -> Any:
                return j + 1, a + tn.random.uniform([3], seed=3)

            _, a2 = tn.while_loop(lambda j, a: j < 2, inner, [tn.constant(0), tn.zeros([3])])
            h2 = tn.tanh(tn.matmul(tn.nn.dropout(h, rate=0.5, seed=4), w))
            return i + 1, h2, ta.write(i, tn.concat([tn.random.uniform([2], seed=5), a2], 0))

        _, h, ta = tn.while_loop(lambda i, h, ta: i < n, body,
                                 [tn.constant(0), tn.ones([2, 3]), tn.TensorArray(tn.float32, size=n)])
        ys = tn.scan(lambda c, x: c + tn.random.normal([2], seed=6) * x, tn.constant([1.0, 2.0, 3.0]), tn.zeros([2]))
        pick = tn.placeholder(tn.bool, shape=[], name="pick")
        c = tn.cond(pick, lambda: tn.random.uniform([2], seed=7), lambda: tn.zeros([2]))
        loss = tn.reduce_sum(h * h)
        gw = tn.gradients(loss, [w])[0]
    return g, [ta.stack(), ys, c, loss, gw], n


def test_draws_in_loops_follow_the_iterations() -> None:
    """Law: in a loop the op's executions are counted in iteration order (the nested loop's too, its
    second outer iteration continuing where the first left), and a second run continues the stream;
    an untaken cond branch draws nothing."""
    g, fetches, n = _loop_program()
    pick = g.tensor("pick:0")
    sess = tn.Session(g)
    runs = [sess.run(fetches, {n: 3, pick: True}) for _ in range(2)]
    outer = [chunk(11, 5, 2, k) for k in range(6)]
    inner = [chunk(11, 3, 3, k) for k in range(12)]
    for r, run in enumerate(runs):
        for i in range(3):
            assert run[0][i, :2].tobytes() == outer[3 * r + i].tobytes()
            np.testing.assert_array_equal(run[0][i, 2:], inner[6 * r + 2 * i] + inner[6 * r + 2 * i + 1])
    assert runs[0][2].tobytes() == chunk(11, 7, 2, 0).tobytes()
    assert sess.run(fetches[2], {pick: False}).tolist() == [0.0, 0.0]
    assert sess.run(fetches[2], {pick: True}).tobytes() == chunk(11, 7, 2, 2).tobytes()


@pytest.mark.parametrize("scheduler", ["fifo", "lifo", "random"])
def test_loop_draws_do_not_depend_on_the_schedule(scheduler: str) -> None:
    """Law: whatever order the interpreter fires in (parallel_iterations 10), a loop's draws are the
    iterations' chunks in order: the op's token orders each read after the last iteration's assign."""
    g, fetches, n = _loop_program()
    want = tn.Session(g).run(fetches[:2], {n: 4, g.tensor("pick:0"): True})
    got = tn.Session(g).run(fetches[:2], {n: 4, g.tensor("pick:0"): True}, scheduler=scheduler, seed=3)
    for a, b in zip(want, got, strict=True):
        assert a.tobytes() == b.tobytes()


def _sessions() -> dict[str, Any]:
    """Every route of route_table, and the fast backend's staged path and SPMD and per-device tiers."""
    routes: dict[str, Any] = dict(ROUTES)
    routes["fast, staged in chunks of one entry"] = lambda g: tn.Session(
        g, backend="fast", options=tn.FastOptions(stack_chunk=1, stack_ladder=False))
    spread = lambda g: {nd.name: DEVICES[k % 3] for k, nd in enumerate(g.nodes)}  # noqa: E731
    routes["fast, three devices, SPMD"] = lambda g: tn.Session(g, backend="fast", devices=DEVICES, requests=spread(g),
                                                               whole_program="always")
    routes["fast, three devices, per-device tiers"] = lambda g: tn.Session(
        g, backend="fast", devices=DEVICES, requests=spread(g), whole_program="never")
    return routes


@pytest.mark.parametrize("route", sorted(_sessions()))
def test_every_route_draws_the_reference_stream(route: str) -> None:
    """Law: each route gives the reference's values over two runs of one session: uniform draws
    (the loop's TensorArray, the cond's draw, the dropout masks behind the loss) bit for bit, the
    scan's float32 normals and what depends on float arithmetic to rounding."""
    g, fetches, n = _loop_program()
    feeds = {n: 3, g.tensor("pick:0"): True}
    ref = tn.Session(g)
    want = [ref.run(fetches, feeds) for _ in range(2)]
    sess = _sessions()[route](g)
    got = [sess.run(fetches, feeds) for _ in range(2)]
    for w, o in zip(want, got, strict=True):
        np.testing.assert_array_equal(o[0][:, :2], w[0][:, :2], err_msg=route)
        np.testing.assert_allclose(o[0], w[0], rtol=1e-6, err_msg=route)
        np.testing.assert_array_equal(o[2], w[2], err_msg=route)
        for a, b in zip(o[1:], w[1:], strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=route)


# ---- dropout ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("keep", [False, True])
def test_dropout_keeps_with_the_uniform_mask_and_its_gradient_is_the_mask(backend: str, keep: bool) -> None:
    """Law: ``dropout(x, rate) = x / (1 - rate) * (u >= rate)`` with ``u`` the op's uniform draw
    (``keep_prob = 1 - rate`` the same), and ``d sum(c * dropout(x)) / dx = c * mask / (1 - rate)``;
    a tensor rate works too. Each run draws a new mask."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[4, 5], name="x")
        r = tn.placeholder(tn.float32, shape=[], name="r")
        y = tn.nn.dropout(x, keep_prob=1.0 - r, seed=2) if keep else tn.nn.dropout(x, rate=r, seed=2)
        c = tn.constant(np.arange(20, dtype=np.float32).reshape(4, 5))
        gx = tn.gradients(tn.reduce_sum(c * y), [x])[0]
    xv = np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32)
    sess = tn.Session(g, backend=backend)
    for k in range(2):
        out, grad = sess.run([y, gx], {x: xv, r: 0.3})
        u = chunk(87654321, 2, 20, k).reshape(4, 5)
        rate = np.float32(1.0) - np.float32(0.7) if keep else np.float32(0.3)
        mask = (u >= rate).astype(np.float32)
        scale = np.float32(1.0) / (np.float32(1.0) - rate)
        np.testing.assert_allclose(out, xv * scale * mask, rtol=1e-6)
        np.testing.assert_allclose(grad, np.arange(20, dtype=np.float32).reshape(4, 5) * scale * mask, rtol=1e-6)
        assert 0 < mask.sum() < 20


def test_dropout_noise_shape_broadcasts_one_mask(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        y = tn.nn.dropout(tn.ones([3, 4]), rate=0.5, noise_shape=[1, 4], seed=1)
    out = tn.Session(g, backend=backend).run(y)
    assert np.all(out == out[:1]) and set(np.unique(out)) <= {0.0, 2.0}


def test_random_ops_have_no_gradient() -> None:
    """Law (as TensorFlow): the draw does not depend on its arguments smoothly, so a gradient through
    ``uniform``'s scaling reaches ``maxval`` by the product rule only, never through the draw."""
    g = tn.Graph()
    with g.as_default():
        hi = tn.placeholder(tn.float32, shape=[], name="hi")
        u = tn.random.uniform([3], maxval=hi, seed=1)
        dhi = tn.gradients(tn.reduce_sum(u), [hi])[0]
    sess = tn.Session(g)
    got, grad = sess.run([u, dhi], {hi: 2.0})
    np.testing.assert_allclose(grad, np.sum(got) / 2.0, rtol=1e-6)


# ---- errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("build", "error", "match"), [
    (lambda: tn.random.uniform([-1, 2]), ArgumentError, "random_uniform: shape .* negative"),
    (lambda: tn.random.uniform([2.5]), ArgumentError, "random_uniform: shape must be a list of ints"),
    (lambda: tn.random.uniform(tn.constant([2.0])), ArgumentError, "shape must be an int32 or int64 vector"),
    (lambda: tn.random.normal([2], dtype=tn.int32), ArgumentError, "random_normal: dtype must be float32 or float64"),
    (lambda: tn.random.uniform([2], dtype=tn.int32), ArgumentError, "an integer draw needs maxval"),
    (lambda: tn.random.uniform([2], seed="1"), ArgumentError, "seed"),
    (lambda: tn.random.uniform([2], dtype=tn.bool), ArgumentError, "dtype must be float32 or float64"),
    (lambda: tn.nn.dropout(tn.ones([2]), rate=1.0), ArgumentError, "dropout: rate must give a rate in"),
    (lambda: tn.nn.dropout(tn.ones([2]), rate=0.5, keep_prob=0.5), ArgumentError, "exactly one of rate and keep_prob"),
    (lambda: tn.nn.dropout(tn.ones([2]), rate="x"), ArgumentError, "rate must be a number"),
    (lambda: tn.nn.dropout(tn.constant([1, 2]), rate=0.5), DTypeError, "dropout: x must be floating"),
    (lambda: tn.nn.dropout(tn.ones([2]), rate=tn.constant([0.5, 0.5])), ArgumentError, "must be a float32 scalar"),
    # found by the bug hunt of 2026-12-06: a rate below 1 that float32 rounds to 1 (NaN on the reference,
    # 0 on the fast backend); a noise_shape of higher rank (the result was not x's shape); a graph seed
    # that is not an int (truncated or parsed by int()); a size past int32 (numpy's OverflowError)
    (lambda: tn.nn.dropout(tn.ones([2]), rate=0.999999999), ArgumentError, "rate in \\[0, 1\\) in float32"),
    (lambda: tn.nn.dropout(tn.ones([2]), keep_prob=1e-9), ArgumentError, "rate in \\[0, 1\\) in float32"),
    (lambda: tn.nn.dropout(tn.ones([2, 3]), rate=0.5, noise_shape=[4, 2, 3]), ShapeError,
     "noise_shape \\[4, 2, 3\\] does not broadcast to x's shape \\[2, 3\\]"),
    (lambda: tn.nn.dropout(tn.ones([1, 3]), rate=0.5, noise_shape=[2, 3]), ShapeError, "does not broadcast"),
    (lambda: tn.random.set_random_seed(1.5), ArgumentError, "set_random_seed: seed must be an int"),
    (lambda: tn.random.set_random_seed("1"), ArgumentError, "set_random_seed: seed must be an int"),
    (lambda: tn.random.uniform([2**31]), ArgumentError, "random_uniform: shape .* past int32's range"),
])
def test_bad_arguments_are_turnout_errors_naming_the_op(build: Any, error: type, match: str) -> None:
    with tn.Graph().as_default(), pytest.raises(error, match=match):
        build()


@pytest.mark.parametrize(("feeds", "match"), [
    ({"r": 1.0}, "dropout: the rate must lie in \\[0, 1\\)"),
    ({"lo": 5, "hi": 5}, "it needs minval < maxval"),
    ({"shape": [-2]}, "negative dimension"),
])
def test_bad_run_time_values_are_kernel_errors_on_every_backend(backend: str, feeds: dict[str, Any],
                                                                match: str) -> None:
    g = tn.Graph()
    with g.as_default():
        r = tn.placeholder(tn.float32, shape=[], name="r")
        lo = tn.placeholder(tn.int32, shape=[], name="lo")
        hi = tn.placeholder(tn.int32, shape=[], name="hi")
        shape = tn.placeholder(tn.int32, shape=[1], name="shape")
        outs = {"r": tn.nn.dropout(tn.ones([3]), rate=r), "lo": tn.random.uniform([3], lo, hi, dtype=tn.int32),
                "shape": tn.random.uniform(shape)}
    which = next(iter(feeds))
    fed = {g.tensor(f"{k}:0"): np.asarray(v, np.float32 if k == "r" else np.int32)
           for k, v in feeds.items()}
    with pytest.raises(KernelError, match=match):
        tn.Session(g, backend=backend).run(outs[which], fed)


def test_a_random_op_in_a_cond_inside_a_loop_is_refused() -> None:
    """Its executions could not be ordered across iterations (docs/missing.rst)."""
    with tn.Graph().as_default():
        with pytest.raises(UnsupportedError, match="inside a while_loop is not built"):
            tn.while_loop(lambda i: i < 3, lambda i: tn.cond(i > 1, lambda: i + tn.cast(
                tn.random.uniform([], maxval=2, dtype=tn.int32), tn.int32), lambda: i + 1), [tn.constant(0)])
        with pytest.raises(UnsupportedError, match="in the predicate of while_loop"):
            tn.while_loop(lambda i: tn.random.uniform([]) < 2.0, lambda i: i + 1, [tn.constant(0)])


def test_dropout_in_nested_loops_differentiates_alike_on_every_backend() -> None:
    """Law: dropout in the inner of two nested loops (the inner's token entered from the outer's)
    gives the same loss and weight gradient on the reference, small-step and fast backends, and the
    second run draws new masks."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.full((2, 2), 0.5, np.float32), name="w")

        def outer(i: Any, h: Any) -> Any:
            def inner(j: Any, a: Any) -> Any:
                return j + 1, tn.tanh(tn.matmul(tn.nn.dropout(a, rate=0.3, seed=2), w))

            return i + 1, tn.while_loop(lambda j, a: j < 2, inner, [tn.constant(0), h])[1]

        h = tn.while_loop(lambda i, h: i < 3, outer, [tn.constant(0), tn.ones([1, 2])])[1]
        loss = tn.reduce_sum(h * h)
        gw = tn.gradients(loss, [w])[0]
    runs = {}
    for backend in ("reference", "smallstep", "fast"):
        sess = tn.Session(g, backend=backend)
        runs[backend] = [sess.run([loss, gw]) for _ in range(2)]
    ref = runs["reference"]
    assert ref[0][0] != ref[1][0]
    for backend, got in runs.items():
        for a, b in zip(got, ref, strict=True):
            np.testing.assert_allclose(a[0], b[0], rtol=1e-6, err_msg=backend)
            np.testing.assert_allclose(a[1], b[1], rtol=1e-5, err_msg=backend)


def test_a_loop_in_an_untaken_branch_draws_nothing(backend: str) -> None:
    """Law: a loop of draws inside a cond branch runs only when the branch is taken; a run that takes
    the other branch leaves the stream where it was (the third run draws the second run of three)."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")

        def loop() -> Any:
            return tn.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a + tn.random.uniform([2], seed=1)),
                                 [tn.constant(0), tn.zeros([2])])[1]

        y = tn.cond(p, loop, lambda: tn.ones([2]))
    sess = tn.Session(g, backend=backend)
    runs = [sess.run(y, {p: v}) for v in (True, False, True)]
    want = [sum(chunk(87654321, 1, 2, k) for k in range(r, r + 3)) for r in (0, 3)]
    np.testing.assert_allclose(runs[0], want[0], rtol=1e-6)
    assert runs[1].tolist() == [1.0, 1.0]
    np.testing.assert_allclose(runs[2], want[1], rtol=1e-6)


def test_a_draw_exports_as_tensorflows_stateless_philox_op() -> None:
    """Law: ``RandomDraw`` exports as ``StatelessRandom*V2`` with the Philox algorithm, key ``[seed]``
    and counter ``[counter, seed2]`` (TensorFlow then draws the same numbers: the dropout fixtures
    run so in tests/test_tf_round_trips.py where TensorFlow is installed)."""
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")
    g = tn.Graph()
    with g.as_default():
        tn.random.set_random_seed(3)
        tn.random.uniform([2], seed=4)
        tn.random.truncated_normal([2], seed=5, dtype=tn.float64)
        tn.random.uniform([2], minval=0, maxval=7, dtype=tn.int64, seed=6)
    gd = tn.export_graph_def(g).graph_def
    by_name = {nd.name: nd for nd in gd.node}
    ops = {nd.op: nd for nd in gd.node if nd.op.startswith("Stateless")}
    wanted = {"StatelessRandomUniformV2": 4, "StatelessTruncatedNormalV2": 5, "StatelessRandomUniformIntV2": 6}
    assert sorted(ops) == sorted(wanted)
    for op, seed2 in wanted.items():
        nd = ops[op]
        key = by_name[nd.input[1].split(":")[0]].attr["value"].tensor
        assert key.dtype == 23 and np.frombuffer(key.tensor_content, "<u8").tolist() == [3]
        pack = by_name[nd.input[2].split(":")[0]]
        high = by_name[pack.input[1].split(":")[0]].attr["value"].tensor
        assert pack.op == "Pack" and np.frombuffer(high.tensor_content, "<u8").tolist() == [seed2]
        assert int(by_name[nd.input[3].split(":")[0]].attr["value"].tensor.tensor_content[0]) == 1  # Philox
