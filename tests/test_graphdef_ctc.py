"""TensorFlow's ``CTCLoss`` imported (``turnout.graphdef.import_ctc``) against its definition: the
negative log of the summed probabilities of every path that collapses to the labels (repeats merged,
then blanks dropped; without ``ctc_merge_repeated`` only blanks dropped), enumerated here by brute
force over tiny alphabets, and its gradient output against finite differences of that sum. The
kernel's checks are ``KernelError`` s with its words. Needs the ``tf`` extra, not TensorFlow
(tests/test_graphdef_import.py replays the TensorFlow-made fixture ``ctc_speech``)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from turnout.errors import KernelError

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from test_graphdef_model_ops import BACKENDS, F32, I32, GraphDef, _run  # noqa: E402

I64 = 9
C = 4  # three characters and the blank (the last class)


def _graph(merge: bool = True, ignore: bool = False) -> GraphDef:
    g = GraphDef()
    ins = (g.placeholder("x", F32, [-1, -1, C]), g.placeholder("idx", I64, [-1, 2]), g.placeholder("vals", I32, [-1]),
           g.placeholder("lens", I32, [-1]))
    g.node("ctc", "CTCLoss", ins, ctc_merge_repeated=merge, ignore_longer_outputs_than_inputs=ignore,
           preprocess_collapse_repeated=False)
    return g


def _sparse(labels: list[list[int]]) -> dict[str, Any]:
    idx = [[b, i] for b, row in enumerate(labels) for i in range(len(row))]
    return {"idx:0": np.asarray(idx, np.int64).reshape(-1, 2), "vals:0": np.asarray(sum(labels, []), np.int32)}


def brute_force(logits: np.ndarray, labels: list[int], merge: bool) -> float:
    """``-log`` of the summed probability of the paths that collapse to ``labels``."""
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    total = -np.inf
    for path in itertools.product(range(C), repeat=len(logits)):
        kept = [k for k, _ in itertools.groupby(path)] if merge else list(path)
        if [k for k in kept if k != C - 1] == labels:
            total = np.logaddexp(total, sum(logp[t, k] for t, k in enumerate(path)))
    return float(-total)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("merge", [True, False])
def test_the_loss_sums_every_path_that_collapses_to_the_labels(backend: str, merge: bool) -> None:
    """Law: per batch entry, over its own length; a repeated label needs a blank between its two
    occurrences when repeats merge (and none otherwise)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 3, C)).astype(np.float32)
    labels, lens = [[0, 0, 2], [1], [2, 1]], [5, 3, 4]
    loss, _ = _run(_graph(merge), ["ctc:0", "ctc:1"], {"x:0": x, "lens:0": np.asarray(lens, np.int32),
                                                       **_sparse(labels)}, backend)
    want = [brute_force(x[:n, b], lab, merge) for b, (lab, n) in enumerate(zip(labels, lens))]
    np.testing.assert_allclose(loss, want, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_gradient_output_is_the_losss_derivative(backend: str) -> None:
    """Law: output 1 is ``d loss_b / d inputs[t, b, :]``, zero past each entry's length."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 2, C))
    labels, lens = [[1, 2], [0]], [4, 2]
    feeds = {"x:0": x.astype(np.float32), "lens:0": np.asarray(lens, np.int32), **_sparse(labels)}
    _, grad = _run(_graph(), ["ctc:0", "ctc:1"], feeds, backend)
    eps = 1e-5
    for b, t, k in [(0, 0, 1), (0, 3, 3), (1, 1, 0), (1, 0, 3)]:
        up, down = x.copy(), x.copy()
        up[t, b, k] += eps
        down[t, b, k] -= eps
        n = lens[b]
        want = (brute_force(up[:n, b], labels[b], True) - brute_force(down[:n, b], labels[b], True)) / (2 * eps)
        np.testing.assert_allclose(grad[t, b, k], want, rtol=1e-3, atol=1e-4)
    assert (grad[2:, 1] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_empty_sequence_and_an_ignored_long_label_give_zero(backend: str) -> None:
    """Law (the kernel): a length of 0 gives loss 0 and gradient 0; with
    ``ignore_longer_outputs_than_inputs``, so do labels longer than the sequence."""
    x = np.random.default_rng(3).normal(size=(3, 2, C)).astype(np.float32)
    feeds = {"x:0": x, "lens:0": np.asarray([0, 2], np.int32), **_sparse([[1], [0, 1, 2]])}
    loss, grad = _run(_graph(ignore=True), ["ctc:0", "ctc:1"], feeds, backend)
    assert loss.tolist() == [0.0, 0.0] and not grad.any()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("labels", "lens", "match"), [
    ([[0, 1, 2], [1]], [2, 3], "Not enough time for target transition sequence"),
    ([[0], [1]], [4, 3], "every sequence length must be in \\[0, num_time_steps\\]"),
    ([[0, 3, 1], [1]], [3, 3], "Saw a non-null label \\(index >= num_classes - 1\\) following a null label"),
    ([[0, -1], [1]], [3, 3], "All labels must be nonnegative integers"),
    ([[0], []], [3, 3], "Labels length is zero"),
], ids=["too_long", "past_inputs", "after_blank", "negative", "empty"])
def test_bad_labels_and_lengths_are_the_kernels_errors(backend: str, labels: list[list[int]], lens: list[int],
                                                       match: str) -> None:
    x = np.zeros((3, 2, C), np.float32)
    with pytest.raises(KernelError, match=match):
        _run(_graph(), ["ctc:0"], {"x:0": x, "lens:0": np.asarray(lens, np.int32), **_sparse(labels)}, backend)
