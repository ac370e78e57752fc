"""``tn.random.log_uniform_candidate_sampler`` (TensorFlow's ``LogUniformCandidateSampler``) on every
route, against the kernel's loop written here in numpy over ``turnout.tf_random``'s stream
(tests/test_graphdef_import.py replays the TensorFlow-made fixture ``word2vec_nce``, whose negatives
are TensorFlow's own).

Laws: execution ``k`` reads float64 uniforms from the Philox call its counter reached, which moves
``512 * num_sampled`` calls each execution however many it read; try ``t`` turns double ``t`` into the
class ``int(exp(u log1p(range))) - 1``, kept (with ``unique``) only when not drawn before, until
``num_sampled`` are kept; the expected counts are ``p * num_sampled`` where every try was kept, else
``1 - (1 - p)^tries``; bad arguments are Turnout errors naming the op.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from route_table import ROUTES, run_on

import turnout as tn
from turnout import tf_random
from turnout.errors import ArgumentError, KernelError

pytest.importorskip("jax")


def want(classes: np.ndarray, num_sampled: int, unique: bool, range_max: int, seed: int, seed2: int,
         base: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernel's loop: doubles in order from call ``base``, a class per try, the expected counts."""
    log_range = math.log1p(range_max)
    doubles = tf_random.uniform(seed, seed2, 64 * num_sampled + 64, np.dtype(np.float64), base)
    out: list[int] = []
    tries = 0
    while len(out) < num_sampled:
        c = (int(math.exp(doubles[tries] * log_range)) - 1) % range_max
        tries += 1
        if not unique or c not in out:
            out.append(c)

    def expected(cs: np.ndarray) -> np.ndarray:
        p = (np.log((cs + 2.0) / (cs + 1.0)) / log_range).astype(np.float32)
        if tries == num_sampled:
            return p * np.float32(num_sampled)
        return -np.expm1(np.float32(tries) * np.log1p(-p))

    samples = np.asarray(out, np.int64)
    return samples, expected(classes.astype(np.float64)), expected(samples.astype(np.float64))


def _keys(g: tn.Graph) -> list[tuple[int, int]]:
    return sorted({(int(nd.attrs["seed"]), int(nd.attrs["seed2"])) for nd in g.nodes if nd.op == "RandomDraw"},
                  key=lambda k: k[1])


def _check(got: Any, wanted: Any) -> None:
    np.testing.assert_array_equal(got[0], wanted[0])
    np.testing.assert_allclose(got[1], wanted[1], rtol=1e-6)
    np.testing.assert_allclose(got[2], wanted[2], rtol=1e-6)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_each_run_samples_the_kernels_classes_at_its_counter(route: str) -> None:
    """Law: run ``k`` reads from call ``512 * num_sampled * k`` on: 6 unique classes of 20 (which
    takes more tries than samples, so the counts are ``1 - (1 - p)^tries``) and 4 with repeats of
    1000 (``p * 4``)."""
    classes = np.array([[0, 3], [19, 7]], np.int64)
    g = tn.Graph()
    with g.as_default():
        tn.random.set_random_seed(8)
        t = tn.placeholder(tn.int64, [None, 2], name="t")
        a = tn.random.log_uniform_candidate_sampler(t, 2, 6, True, 20, seed=1)
        b = tn.random.log_uniform_candidate_sampler(t, 2, 4, False, 1000, seed=2)
    (ka, kb), sess = _keys(g), ROUTES[route](g)
    for k in range(3):
        got_a, got_b = sess.run([list(a), list(b)], {t: classes})
        _check(got_a, want(classes, 6, True, 20, *ka, 512 * 6 * k))
        _check(got_b, want(classes, 4, False, 1000, *kb, 512 * 4 * k))
        assert len(set(got_a[0].tolist())) == 6 and got_a[1].dtype == np.float32


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_every_class_of_the_range_can_be_drawn(backend: str) -> None:
    """Law: unique samples of the whole range are a permutation of it (the loop ends however many
    tries the last classes take)."""
    g = tn.Graph()
    with g.as_default():
        s, _, counts = tn.random.log_uniform_candidate_sampler(tn.constant([[0]], tn.int64), 1, 12, True, 12, seed=5)
    got, c = tn.Session(g, backend=backend).run([s, counts])
    assert sorted(got.tolist()) == list(range(12))
    assert (c > 0).all() and (c <= 1).all()


@pytest.mark.parametrize("backend", ["reference", "smallstep", "fast"])
def test_samples_in_a_loop_follow_the_iterations(backend: str) -> None:
    """Law: iteration ``i`` of a loop around the sampler is its ``i``-th execution."""
    g = tn.Graph()
    with g.as_default():
        def body(i: Any, acc: Any) -> Any:
            s, _, _ = tn.random.log_uniform_candidate_sampler(tn.constant([[1]], tn.int64), 1, 3, True, 30, seed=4)
            return [i + 1, acc * 31 + tn.reduce_sum(s)]

        _, code = tn.while_loop(lambda i, a: i < 3, body, [tn.constant(0), tn.constant(0, tn.int64)])
    (key,) = _keys(g)
    acc = 0
    for k in range(3):
        acc = acc * 31 + int(want(np.array([[1]]), 3, True, 30, *key, 512 * 3 * k)[0].sum())
    assert int(tn.Session(g, backend=backend).run(code)) == acc


@pytest.mark.parametrize(("classes", "args", "match"), [
    ([[1]], (1, 2, True, 5), "must be int64"),
    ([1], (1, 2, True, 5), "a matrix"),
    ([[1]], (2, 2, True, 5), "has 1 columns"),
    ([[1]], (1, 6, True, 5), "range is too small"),
    ([[1]], (1, 0, True, 5), "num_sampled"),
    ([[1]], (1, 2, 1, 5), "unique must be"),
    ([[1]], (1, 2, True, 0), "range_max"),
])
def test_bad_arguments_are_errors_naming_the_op(classes: Any, args: tuple[Any, ...], match: str) -> None:
    with tn.Graph().as_default(), pytest.raises(ArgumentError, match=f"log_uniform_candidate_sampler: .*{match}"):
        t = tn.constant(classes, tn.int32 if match == "must be int64" else tn.int64)
        tn.random.log_uniform_candidate_sampler(t, *args)


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("classes", [[[3, 9]], [[-1]], [[2], [5]]], ids=["wide", "negative", "past_range"])
def test_bad_true_classes_are_kernel_errors(route: str, classes: list[list[int]]) -> None:
    """Law: the kernel checks the width and every class; so does a run here, whatever the route."""
    g = tn.Graph()
    with g.as_default():
        t = tn.placeholder(tn.int64, [None, None], name="t")
        s, e, _ = tn.random.log_uniform_candidate_sampler(t, 1, 2, True, 5)
    with pytest.raises(KernelError, match="true_classes must have 1 columns, each class in \\[0, 5\\)"):
        run_on(route, g, [s, e], {t: np.asarray(classes, np.int64)})


@pytest.mark.parametrize("backend", ["reference", "smallstep"])
def test_accidental_hits_name_each_true_class_sampled_at_its_last_position(backend: str) -> None:
    """Law (``ComputeAccidentalHits``): for each true class in row-major order that was sampled, its
    row, the position of its last occurrence among the samples (the kernel's map keeps the last) and
    ``-FLT_MAX``; as many as there are hits, none giving empty outputs."""
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")
    from test_graphdef_model_ops import GraphDef

    from turnout.graphdef import import_graph_def

    g = GraphDef()
    g.placeholder("t", 9, [-1, 2])
    g.placeholder("s", 9, [-1])
    g.node("h", "ComputeAccidentalHits", ("t", "s"), num_true=2)
    imp = import_graph_def(g.gd)
    sess = tn.Session(imp.graph, backend=backend)
    true = np.array([[4, 1], [7, 4], [0, 2]], np.int64)
    rows, ids, weights = imp.run(sess, ["h:0", "h:1", "h:2"], {"t:0": true, "s:0": np.array([4, 2, 9, 4], np.int64)})
    assert rows.tolist() == [0, 1, 2] and ids.tolist() == [3, 3, 1] and ids.dtype == np.int64
    np.testing.assert_array_equal(weights, np.full(3, -np.finfo(np.float32).max, np.float32))
    rows, ids, weights = imp.run(sess, ["h:0", "h:1", "h:2"], {"t:0": true, "s:0": np.array([5, 6], np.int64)})
    assert rows.shape == ids.shape == weights.shape == (0,)
