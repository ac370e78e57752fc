"""Negative indices in imported graphs mean what they mean in TensorFlow, not what they mean in numpy.

Turnout's ``Gather`` and ``ScatterAddLike`` count a negative index from the end, as numpy does; the
TensorFlow ops imported as them do not: ``GatherV2``, ``ResourceGather`` (an embedding lookup) and
``DynamicStitch`` refuse a negative index, and ``UnsortedSegmentSum`` drops the row of a negative
segment id (how a model leaves a padding row out). An imported graph must fail or drop where
TensorFlow does, on every backend, never read or add at the other end (``import_rules.non_negative``,
``import_rules._negative_ids_dropped``). Hand-written GraphDefs against numpy closed forms of
TensorFlow's definitions, and one TensorFlow-made model fed a padding id. Needs the ``tf`` extra, not
TensorFlow."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import turnout as tn
from turnout.errors import KernelError

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from test_graphdef_model_ops import BACKENDS, F32, I32, GraphDef, _run  # noqa: E402

from turnout.graphdef import import_graph_def  # noqa: E402

DATA = Path(__file__).parent / "data" / "tf"


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_imported_gather_refuses_a_negative_index_as_tensorflow_does(backend: str) -> None:
    """``GatherV2`` of run-time indices: the rows asked for while every index is in ``[0, n)``; a
    ``KernelError`` naming the node for ``-1``, where Turnout's own ``gather`` would read the last row."""
    g = GraphDef()
    g.node("rows", "GatherV2", (g.const("table", np.arange(6, dtype=np.float32).reshape(3, 2)),
                                g.placeholder("idx", I32, [2]), g.const("axis", np.int32(0))),
           Tparams=F32, Tindices=I32, Taxis=I32)
    table = np.arange(6, dtype=np.float32).reshape(3, 2)
    (got,) = _run(g, ["rows:0"], {"idx:0": np.asarray([2, 0], np.int32)}, backend)
    np.testing.assert_array_equal(got, table[[2, 0]])
    with pytest.raises(KernelError, match=r"rows: indices must be >= 0"):
        _run(g, ["rows:0"], {"idx:0": np.asarray([1, -1], np.int32)}, backend)


def test_a_gather_of_known_indices_gets_no_check() -> None:
    """Where the import folds the indices and none is negative, nothing is added to the graph: the
    check costs a run only where an index can be negative."""
    g = GraphDef()
    g.node("rows", "GatherV2", (g.placeholder("table", F32, [3, 2]), g.const("idx", np.asarray([2, 0], np.int32)),
                                g.const("axis", np.int32(0))), Tparams=F32, Tindices=I32, Taxis=I32)
    ops = {n.op for n in import_graph_def(g.gd).graph.nodes}
    assert "Gather" in ops and "Assert" not in ops


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_imported_unsorted_segment_sum_drops_the_rows_of_negative_ids(backend: str) -> None:
    """``UnsortedSegmentSum`` with a run-time id of ``-1``: that row is in no segment (TensorFlow's
    kernel drops it), the others summed as ever, rows of several axes too; an id at or past
    ``num_segments`` is still an error; and the gradient of a dropped row is zero."""
    data = np.asarray([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], np.float32)
    g = GraphDef()
    g.node("sums", "UnsortedSegmentSum", (g.placeholder("x", F32, [4, 2]), g.placeholder("ids", I32, [4]),
                                          g.const("n", np.int32(3))), T=F32, Tindices=I32)
    ids = np.asarray([2, -1, 0, 2], np.int32)
    want = np.zeros((3, 2), np.float32)
    for row, s in zip(data, ids, strict=True):
        if s >= 0:
            want[s] += row
    (got,) = _run(g, ["sums:0"], {"x:0": data, "ids:0": ids}, backend)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(KernelError):
        _run(g, ["sums:0"], {"x:0": data, "ids:0": np.asarray([0, 3, 0, 0], np.int32)}, backend)
    imp = import_graph_def(g.gd)
    with imp.graph.as_default():
        (gx,) = tn.gradients(tn.reduce_sum(imp.tensor("sums:0")), [imp.tensor("x:0")])
    got_grad = tn.Session(imp.graph, backend=backend).run(gx, {imp.tensor("x:0"): data, imp.tensor("ids:0"): ids})
    np.testing.assert_array_equal(got_grad, np.where((ids >= 0)[:, None], 1.0, 0.0).astype(np.float32) + 0 * data)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_imported_dynamic_stitch_refuses_a_negative_index(backend: str) -> None:
    """``DynamicStitch`` of run-time indices: each row lands at its index while all are at least 0;
    ``-1`` is a ``KernelError``, where a scatter counting from the end would write the last row."""
    g = GraphDef()
    g.node("merged", "DynamicStitch", (g.placeholder("i0", I32, [2]), g.placeholder("i1", I32, [1]),
                                       g.placeholder("d0", F32, [2]), g.placeholder("d1", F32, [1])), N=2, T=F32)
    feeds = {"i0:0": np.asarray([2, 0], np.int32), "i1:0": np.asarray([1], np.int32),
             "d0:0": np.asarray([5.0, 6.0], np.float32), "d1:0": np.asarray([7.0], np.float32)}
    (got,) = _run(g, ["merged:0"], feeds, backend)
    np.testing.assert_array_equal(got, [6.0, 7.0, 5.0])
    with pytest.raises(KernelError, match=r"merged: indices must be >= 0"):
        _run(g, ["merged:0"], {**feeds, "i1:0": np.asarray([-1], np.int32)}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tensorflow_made_embedding_refuses_a_padding_id_it_cannot_look_up(backend: str) -> None:
    """A TensorFlow-made training step whose embedding lookup is a ``ResourceGather``: its recorded
    run gives TensorFlow's values, and the same run with an id of ``-1`` is an error naming the lookup
    (TensorFlow's CPU kernel refuses it too), where reading the table's last row would train on it."""
    meta = json.loads((DATA / "embedding_sparse_optimizers.json").read_text())
    imp = import_graph_def(DATA / "embedding_sparse_optimizers.pbtxt")
    run = meta["runs"][0]
    sess = tn.Session(imp.graph, backend=backend)
    feeds = {imp.tensor(k): np.asarray(v) for k, v in run["feeds"].items()}
    (total,) = sess.run([imp.tensor(f) for f in run["fetches"]], feeds)
    np.testing.assert_allclose(total, run["expected"][0], rtol=2e-5)
    ids = np.asarray(run["feeds"]["ids:0"]).copy()
    ids[1, 2] = -1
    with pytest.raises(KernelError, match=r"indices must be >= 0"):
        sess.run([imp.tensor(f) for f in run["fetches"]], {**feeds, imp.tensor("ids:0"): ids})


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_segment_sum_of_known_negative_ids_over_data_of_unknown_rank_drops_their_rows(backend: str) -> None:
    """The ids folded at import, one of them ``-1``, and data whose rank is known only when the
    program runs: the row of ``-1`` is still dropped (it goes to a segment past the last, left out),
    whatever the data's rank."""
    g = GraphDef()
    ids = g.const("ids", np.asarray([0, -1, 1, 1], np.int32))
    g.node("sums", "UnsortedSegmentSum", (g.node("x", "Placeholder", dtype=F32), ids, g.const("n", np.int32(2))),
           T=F32, Tindices=I32)
    for data in (np.asarray([1.0, 2.0, 3.0, 4.0], np.float32), np.arange(8, dtype=np.float32).reshape(4, 2)):
        (got,) = _run(g, ["sums:0"], {"x:0": data}, backend)
        np.testing.assert_array_equal(got, np.stack([data[0], data[2] + data[3]]))
