"""``tn.random.categorical`` (TensorFlow's ``Multinomial``) on every route, against the kernel's
formula computed here from ``turnout.tf_random``'s stream (tests/test_graphdef_import.py replays the
TensorFlow-made fixture ``categorical_sampling``, whose draws are TensorFlow's own).

Laws: execution ``k`` of an op of ``batch`` rows and ``n`` samples draws float64 uniforms from the
Philox call its counter reached, which moves ``256 * 2 * batch * ceil4(n)`` calls each execution
(none when the output is empty); a sample is the number of the row's running sums of
``exp(logit - max)`` at or below ``u * total``, so a non-finite logit's class is never drawn and a row
of only non-finite logits gives the number of classes; bad arguments are Turnout errors naming the op,
at build time where they are known and as ``KernelError``s with TensorFlow's words when fed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from route_table import ROUTES, run_on

import turnout as tn
from turnout import tf_random
from turnout.errors import ArgumentError, KernelError

pytest.importorskip("jax")

F64 = np.dtype(np.float64)


def want(logits: np.ndarray, n: int, seed: int, seed2: int, base: int) -> np.ndarray:
    """The kernel's samples, written as its loops are: per row the maximum over finite logits, the
    running sum in float64, and ``std::upper_bound`` of each ``u * total``."""
    b, c = logits.shape
    u = tf_random.uniform(seed, seed2, b * n, F64, base).reshape(b, n)
    out = np.zeros((b, n), np.int64)
    for r in range(b):
        row = logits[r]
        finite = np.isfinite(row)
        top = row[finite].max() if finite.any() else np.finfo(row.dtype).min
        sums, total = np.zeros(c), 0.0
        for j in range(c):
            if finite[j]:
                total += float(np.exp(np.float64(row[j]) - np.float64(top)))
            sums[j] = total
        for s in range(n):
            out[r, s] = np.searchsorted(sums, u[r, s] * total, side="right")
    return out


def reserved(b: int, n: int) -> int:
    return 256 * 2 * b * (-(-n // 4) * 4)


def _keys(g: tn.Graph) -> list[tuple[int, int]]:
    return [(int(nd.attrs["seed"]), int(nd.attrs["seed2"])) for nd in g.nodes if nd.op == "RandomDraw"]


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_each_run_draws_the_kernels_samples_at_its_counter(route: str) -> None:
    """Law: run ``k`` draws from call ``k * reserved(batch, n)`` on: samples of 3 and 5 a row (4 and 8
    outputs reserved a row), a non-finite logit never drawn, a row of no finite logit giving 4."""
    logits = np.array([[0.5, -1.0, 2.0, 0.0], [1.0, np.inf, np.nan, 1.0], [-np.inf, np.nan, np.inf, np.nan]],
                      np.float32)
    g = tn.Graph()
    with g.as_default():
        tn.random.set_random_seed(3)
        x = tn.placeholder(tn.float32, [None, 4], name="x")
        three = tn.random.categorical(x, 3, seed=1)
        five = tn.random.categorical(x * 0.5, 5, dtype=tn.int32, seed=2)
    (k3, k5), sess = _keys(g), ROUTES[route](g)
    for k in range(3):
        a, b = sess.run([three, five], {x: logits})
        assert a.dtype == np.int64 and b.dtype == np.int32
        np.testing.assert_array_equal(a, want(logits, 3, *k3, k * reserved(3, 3)))
        np.testing.assert_array_equal(b, want(logits * np.float32(0.5), 5, *k5, k * reserved(3, 5)))
        assert (a[1] != 1).all() and (a[1] != 2).all() and (a[2] == 4).all()


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_the_frequencies_are_the_softmax(backend: str) -> None:
    """Law: a class is drawn with probability ``softmax(logits)``: 40 000 float64-logit samples of
    two rows are within 0.01 of it (the draws are seeded, so this holds or fails for good)."""
    p = np.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]])
    g = tn.Graph()
    with g.as_default():
        s = tn.random.categorical(tn.constant(np.log(p) + 3.0), 40_000, seed=11)
    got = tn.Session(g, backend=backend).run(s)
    freq = np.stack([np.bincount(row, minlength=3) / row.size for row in got])
    np.testing.assert_allclose(freq, p, atol=0.01)


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_an_empty_output_moves_no_counter(backend: str) -> None:
    """Law: TensorFlow's kernel reserves nothing when the output is empty (no rows, or no samples),
    so the next run of the same op draws what a first run would."""
    logits = np.array([[0.0, 1.0], [2.0, 0.0]], np.float32)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 2], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        s = tn.random.categorical(x, n, seed=4)
    (key,), sess = _keys(g), tn.Session(g, backend=backend)
    assert sess.run(s, {x: logits, n: 0}).shape == (2, 0)
    assert sess.run(s, {x: logits[:0], n: 3}).shape == (0, 3)
    np.testing.assert_array_equal(sess.run(s, {x: logits, n: 2}), want(logits, 2, *key, 0))
    np.testing.assert_array_equal(sess.run(s, {x: logits, n: 2}), want(logits, 2, *key, reserved(2, 2)))


@pytest.mark.parametrize("backend", ["reference", "smallstep", "fast"])
def test_draws_in_a_loop_follow_the_iterations(backend: str) -> None:
    """Law: iteration ``i`` of a loop around the op is its ``i``-th execution, whose logits here are
    the last iteration's sample (a sequence sampled token by token)."""
    g = tn.Graph()
    with g.as_default():
        table = tn.constant(np.array([[0.0, 2.0, -1.0], [1.0, 0.0, 0.5], [0.3, 0.3, 3.0]], np.float32))

        def body(i: Any, tok: Any, acc: Any) -> Any:
            nxt = tn.random.categorical(tn.gather(table, tok), 1, dtype=tn.int32, seed=9)[:, 0]
            return [i + 1, nxt, acc * 3 + nxt]

        _, _, code = tn.while_loop(lambda i, t, a: i < 4, body, [tn.constant(0), tn.constant([0, 2]),
                                                                 tn.constant([0, 0])])
    (key,) = _keys(g)
    tok, acc = np.array([0, 2]), np.array([0, 0])
    rows = np.array([[0.0, 2.0, -1.0], [1.0, 0.0, 0.5], [0.3, 0.3, 3.0]], np.float32)
    for k in range(4):
        tok = want(rows[tok], 1, *key, k * reserved(2, 1))[:, 0]
        acc = acc * 3 + tok
    np.testing.assert_array_equal(tn.Session(g, backend=backend).run(code, options=tn.session.RunOptions(
        max_iterations=100)), acc)


def test_samples_have_no_gradient() -> None:
    """Law: a sample is an integer, so nothing flows back to the logits through it."""
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(np.zeros((1, 3), np.float32))
        s = tn.random.categorical(x, 2)
        (dx,) = tn.gradients(tn.reduce_sum(tn.cast(s, tn.float32)), [x])
    assert dx is None


@pytest.mark.parametrize(("build", "match"), [
    (lambda: tn.random.categorical(tn.constant([[1, 2]]), 1), "categorical: logits must be float32 or float64"),
    (lambda: tn.random.categorical(tn.constant([1.0, 2.0]), 1), "logits must be a matrix"),
    (lambda: tn.random.categorical(tn.zeros([2, 0]), 1), "at least one class"),
    (lambda: tn.random.categorical(tn.zeros([2, 3]), -1), "num_samples must be an int in \\[0, 2\\*\\*31\\)"),
    (lambda: tn.random.categorical(tn.zeros([2, 3]), 2.0), "num_samples must be an int or an int32 scalar"),
    (lambda: tn.random.categorical(tn.zeros([2, 3]), tn.constant([2])), "an int32 scalar tensor"),
    (lambda: tn.random.categorical(tn.zeros([2, 3]), 1, dtype=tn.float32), "dtype must be int32 or int64"),
    (lambda: tn.random.categorical(tn.zeros([2, 3]), 1, seed=1.5), "seed"),
])
def test_bad_arguments_are_errors_naming_the_op(build: Any, match: str) -> None:
    with tn.Graph().as_default(), pytest.raises(ArgumentError, match=match):
        build()


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize(("shape", "n", "match"), [
    ((2, 0), 1, "num_classes should be positive, got \\[0\\]"),
    ((2, 3), -2, "num_samples should be non-negative, got \\[-2\\]"),
])
def test_bad_fed_values_are_kernel_errors_with_tensorflows_words(route: str, shape: tuple[int, int], n: int,
                                                                 match: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, None], name="x")
        k = tn.placeholder(tn.int32, [], name="k")
        s = tn.random.categorical(x, k)
    with pytest.raises(KernelError, match=match):
        run_on(route, g, s, {x: np.zeros(shape, np.float32), k: n})


def _multinomial_graph_def(logits_shape: list[int], seed: int, seed2: int) -> Any:
    """A GraphDef of one ``Multinomial`` (int32 samples) of fed logits and a fed count."""
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")
    from test_graphdef_model_ops import F32, I32, GraphDef

    g = GraphDef()
    g.placeholder("logits", F32, logits_shape)
    g.placeholder("n", I32, [])
    g.node("s", "Multinomial", ("logits", "n"), T=F32, seed=seed, seed2=seed2)
    g.gd.node[-1].attr["output_dtype"].type = I32
    return g.gd


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_an_imported_multinomial_draws_from_its_nodes_key(backend: str) -> None:
    """Law: the imported op keys its stream by the node's ``(seed, seed2)`` and draws as the builder's."""
    from turnout.graphdef import import_graph_def

    imp = import_graph_def(_multinomial_graph_def([-1, 3], 5, 6))
    sess = tn.Session(imp.graph, backend=backend)
    logits = np.array([[0.0, 1.0, -1.0], [2.0, 2.0, 0.0]], np.float32)
    for k in range(2):
        (got,) = imp.run(sess, ["s:0"], {"logits:0": logits, "n:0": 6})
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want(logits, 6, 5, 6, k * reserved(2, 6)))


def test_an_imported_multinomial_of_a_vector_is_refused_naming_the_node() -> None:
    from turnout.graphdef import import_graph_def

    with pytest.raises(ArgumentError, match="s.*logits should be a matrix, got shape \\[3\\]"):
        import_graph_def(_multinomial_graph_def([3], 1, 2))
