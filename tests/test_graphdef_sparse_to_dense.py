"""``SparseToDense`` (``tf.sparse_to_dense``, TF1's one-hot labels in old tutorials) as TensorFlow
defines it: the default everywhere but at the index rows, which hold their values (or the one scalar
value), the indices checked as TensorFlow's kernel checks them. Hand-written GraphDefs against the
values TensorFlow 2.21 gave for the same graphs. Needs the ``tf`` extra, not TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

import turnout as tn

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from test_graphdef_model_ops import BACKENDS, F32, I32, GraphDef  # noqa: E402

from turnout.graphdef import import_graph_def  # noqa: E402


def _graph(validate: bool = True) -> GraphDef:
    g = GraphDef()
    g.node("onehot", "SparseToDense", (g.placeholder("rows", I32, [4, 2]),
                                       g.const("shape2", np.asarray([4, 5], np.int32)),
                                       g.const("one", np.float32(1.0)), g.const("zero", np.float32(0.0))),
           T=F32, Tindices=I32, validate_indices=True)
    g.node("dense", "SparseToDense", (g.placeholder("vec", I32, [-1]), g.const("shape1", np.asarray([6], np.int32)),
                                      g.placeholder("vals", F32, [-1]), g.const("fill", np.float32(-1.0))),
           T=F32, Tindices=I32, validate_indices=validate)
    return g


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_index_rows_hold_their_values_and_the_rest_the_default(backend: str) -> None:
    imp = import_graph_def(_graph().gd)
    sess = tn.Session(imp.graph, backend=backend)
    rows = np.asarray([[0, 1], [1, 0], [2, 4], [3, 2]], np.int32)
    want = np.eye(5, dtype=np.float32)[[1, 0, 4, 2]]
    np.testing.assert_array_equal(imp.run(sess, ["onehot:0"], {"rows:0": rows})[0], want)
    got = imp.run(sess, ["dense:0"], {"vec:0": np.asarray([0, 2, 5], np.int32),
                                       "vals:0": np.asarray([1.5, 2.5, 3.5], np.float32)})[0]
    np.testing.assert_array_equal(got, [1.5, -1.0, 2.5, -1.0, -1.0, 3.5])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("vec, words", [([2, 0], "not in strictly increasing row-major order"),
                                        ([2, 2], "not in strictly increasing row-major order"),
                                        ([1, 6], r"indices do not index into output shape \[6\]")])
def test_indices_out_of_order_repeated_or_outside_are_refused_as_tensorflow_does(backend: str, vec: list[int],
                                                                                   words: str) -> None:
    imp = import_graph_def(_graph().gd)
    with pytest.raises(tn.KernelError, match=words):
        imp.run(tn.Session(imp.graph, backend=backend), ["dense:0"],
                {"vec:0": np.asarray(vec, np.int32), "vals:0": np.asarray([1.0, 2.0], np.float32)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_validation_any_order_places_and_a_repeat_is_refused(backend: str) -> None:
    """``validate_indices=False``: TensorFlow places indices in any order; it leaves a repeated
    index's value unspecified, which the import refuses rather than pick one."""
    imp = import_graph_def(_graph(validate=False).gd)
    sess = tn.Session(imp.graph, backend=backend)
    vals = np.asarray([1.0, 2.0], np.float32)
    got = imp.run(sess, ["dense:0"], {"vec:0": np.asarray([3, 1], np.int32), "vals:0": vals})
    np.testing.assert_array_equal(got[0], [-1.0, 2.0, -1.0, 1.0, -1.0, -1.0])
    with pytest.raises(tn.KernelError, match="an index is repeated"):
        imp.run(sess, ["dense:0"], {"vec:0": np.asarray([3, 3], np.int32), "vals:0": vals})
