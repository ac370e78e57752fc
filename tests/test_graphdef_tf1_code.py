"""Import rules that TF1 model code as people write it needs (the fixtures of
tools/tf_fixtures_tf1_code.py): StridedSlice's new-axis and ellipsis bits (``mask[:, None, None, :]``
of an attention mask), the gradient of a batch matmul with run-time batch dimensions, and the
``initialized_value()`` guard of an ``ExponentialMovingAverage`` shadow's initializer. Hand-written
GraphDefs against numpy on both backends, and the fixture the guard comes from. Needs the ``tf``
extra, not TensorFlow."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import turnout as tn
from turnout.errors import UnsupportedError

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from test_graphdef_model_ops import BACKENDS, F32, I32, GraphDef, _run  # noqa: E402

from turnout.graphdef import import_graph_def  # noqa: E402

DATA = Path(__file__).parent / "data" / "tf"
X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def _slice(g: GraphDef, name: str, x: str, begin: list[int], end: list[int], t: int = F32, **masks: int) -> str:
    """``x[begin:end]`` as a StridedSlice of ``x``, whose dtype ``t`` declares."""
    consts = [g.const(f"{name}/{k}", np.asarray(v, np.int32)) for k, v in
              (("begin", begin), ("end", end), ("strides", [1] * len(begin)))]
    return g.node(name, "StridedSlice", (x, *consts), T=t, Index=I32, **masks)


@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_slice_new_axis_and_ellipsis_bits_index_as_numpy(backend: str) -> None:
    """Law: a StridedSlice is numpy's ``x[key]``, a new-axis bit ``None`` (winning over a shrink bit on
    the same entry, as in TensorFlow) and the ellipsis bit ``...``; its gradient puts ``dy`` back
    where the slice read, the new axes dropped."""
    g = GraphDef()
    x = g.placeholder("x", F32, [-1, 3, 4])
    _slice(g, "a", x, [0, 0, 1], [0, 0, 3], ellipsis_mask=1, new_axis_mask=2)  # x[..., None, 1:3]
    _slice(g, "b", x, [0, 0, 0], [0, 0, 1], begin_mask=1, end_mask=1, new_axis_mask=2, shrink_axis_mask=4)
    _slice(g, "c", x, [0, 1], [0, 2], new_axis_mask=1, shrink_axis_mask=3)  # x[None, 1]
    _slice(g, "d", x, [0, 0, 0, 0], [0, 0, 0, 0], begin_mask=15, end_mask=15, new_axis_mask=9)  # x[None,:,:,None]
    dy = g.placeholder("dy", F32, [-1, 1, 4])
    shape = g.node("shape", "Shape", (x,), T=F32, out_type=I32)
    g.node("db", "StridedSliceGrad", (shape, "b/begin", "b/end", "b/strides", dy), T=F32, Index=I32,
           begin_mask=1, end_mask=1, new_axis_mask=2, shrink_axis_mask=4)
    dyv = np.arange(8, dtype=np.float32).reshape(2, 1, 4) + 1.0
    a, b, c, d, db = _run(g, ["a:0", "b:0", "c:0", "d:0", "db:0"], {"x:0": X, "dy:0": dyv}, backend)
    for got, want in [(a, X[..., None, 1:3]), (b, X[:, None, 0]), (c, X[None, 1]), (d, X[None, :, :, None])]:
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    want_db = np.zeros_like(X)
    want_db[:, 0] = dyv[:, 0]
    np.testing.assert_array_equal(db, want_db)


def test_an_ellipsis_needs_the_rank_of_the_sliced_tensor() -> None:
    g = GraphDef()
    g.node("x", "Placeholder", dtype=F32)  # no shape at all
    _slice(g, "a", "x", [0, 1], [0, 2], ellipsis_mask=1)
    with pytest.raises(UnsupportedError, match='StridedSlice node "a".*ellipsis'):
        import_graph_def(g.gd)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_matmul_gradient_sums_to_the_reshape_s_shape(backend: str) -> None:
    """Law: ``reshape(sum(dz, BroadcastGradientArgs(shape(x)[:-2], shape(y)[:-2])[0]), shape(x))``,
    which tf.gradients builds for a batch matmul, is dz summed down to x's whole shape (the batch
    axes broadcast, the matrix axes kept), though the broadcast axes were computed from the batch
    part of the shapes only."""
    g = GraphDef()
    x = g.placeholder("x", F32, [-1, 3])  # a matrix, broadcast against y's batch of matrices
    y = g.placeholder("y", F32, [-1, -1, 3, 5])
    dz = g.placeholder("dz", F32, [-1, -1, -1, 3])
    batch = []
    for t in (x, y):
        s = g.node(f"{t}_shape", "Shape", (t,), T=F32, out_type=I32)
        batch.append(_slice(g, f"{t}_batch", s, [0], [-2], t=I32, begin_mask=1))
    g.node("bga", "BroadcastGradientArgs", tuple(batch), T=I32)
    g.node("sum", "Sum", (dz, "bga:0"), T=F32, Tidx=I32)
    g.node("dx", "Reshape", ("sum", "x_shape"), T=F32, Tshape=I32)
    dzv = np.random.default_rng(0).normal(size=(2, 4, 2, 3)).astype(np.float32)
    feeds = {"x:0": np.ones((2, 3), np.float32), "y:0": np.ones((2, 4, 3, 5), np.float32), "dz:0": dzv}
    (dx,) = _run(g, ["dx:0"], feeds, backend)
    np.testing.assert_allclose(dx, dzv.sum(axis=(0, 1)), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_moving_average_shadow_starts_from_its_variable_s_drawn_initial_value(backend: str) -> None:
    """Law: an ``ExponentialMovingAverage`` shadow's initializer is ``cond(is_initialized(w), read(w),
    w.initial_value)``; when initializers run both branches give w's initial value, so the shadow
    starts equal to ``w`` (here drawn by glorot_uniform, a random op that reaches the shadow's
    initializer through the guard, not only w's)."""
    imp = import_graph_def(DATA / "while_training_loop.pbtxt")
    sess = tn.Session(imp.graph, backend=backend)
    names = ("w", "w/ExponentialMovingAverage", "b", "b/ExponentialMovingAverage")
    reads = [f"{v}/Read/ReadVariableOp:0" for v in names]
    w, shadow, b, b_shadow = imp.run(sess, reads, {})
    assert np.all(w != 0)
    np.testing.assert_array_equal(shadow, w)
    np.testing.assert_array_equal(b_shadow, b)


def test_a_saver_s_nodes_are_left_out_and_name_where_the_weights_go() -> None:
    """A GraphDef written after ``tf.compat.v1.train.Saver()`` holds SaveV2 / RestoreV2, string
    constants and the restore's assigns: the import leaves exactly those out (the model's Variables
    and their initializers stay), and a fetch of one says to use turnout.checkpoint."""
    from turnout.errors import NotFoundError
    from turnout.graphdef import parse_graph_def, unsupported_ops
    from turnout.graphdef.left_out import saver_nodes

    gd = parse_graph_def(DATA / "resnet_block_bn.pbtxt")
    left = saver_nodes(gd)
    assert {"save/SaveV2", "save/RestoreV2", "save/Const", "save/restore_all", "save/control_dependency"} <= left
    assert all(n.startswith("save/") for n in left)
    assert not any(nd.op == "VarHandleOp" for nd in gd.node if nd.name in left)
    assert unsupported_ops(gd) == {}
    imp = import_graph_def(gd)
    with pytest.raises(NotFoundError, match="belongs to TensorFlow's Saver.*restore_tf"):
        imp.node("save/restore_all")
    with pytest.raises(NotFoundError, match="has no tensor 'nope:0'"):
        imp.tensor("nope:0")
    assert "conv1/kernel" in imp.graph.variables


@pytest.mark.parametrize("backend", BACKENDS)
def test_summaries_are_left_out_and_their_values_listed_to_write_with_the_event_writer(backend: str,
                                                                                      tmp_path: Path) -> None:
    """A TF1 graph with ``summary.scalar``, ``summary.histogram`` and ``merge_all`` (the fixture
    ``summaries_sgd``, made by TensorFlow) imports: the summary ops, their tag constants and the merged
    summary are left out, ``summaries`` maps each tag to the tensor it read, whose fetched values go to
    an event file; fetching the merged summary says so. (The fixture's training runs are checked with
    TensorFlow's values by test_graphdef_import.py.)"""
    from turnout.errors import NotFoundError
    from turnout.graphdef import parse_graph_def, unsupported_ops
    from turnout.graphdef.events import EventWriter
    from turnout.graphdef.left_out import left_out

    gd = parse_graph_def(DATA / "summaries_sgd.pbtxt")
    parts = left_out(gd)
    assert {n for n, p in parts.items() if p == "summary"} == {
        "loss_1", "loss_1/tags", "weights", "weights/tag", "stats/weight_norm", "stats/weight_norm/tags",
        "merged/merged"}
    assert unsupported_ops(gd) == {}
    imp = import_graph_def(gd)
    # (the tags TensorFlow wrote: a summary's tag is its node's name, made unique: "loss" was the loss's)
    assert imp.summaries == {"loss_1": "loss:0", "weights": "weights/ReadVariableOp:0",
                             "stats/weight_norm": "stats/norm/Squeeze:0"}
    with pytest.raises(NotFoundError, match="belongs to TensorFlow's summaries.*ImportedGraph.summaries.*EventWriter"):
        imp.tensor("merged/merged:0")
    sess = tn.Session(imp.graph, backend=backend)
    imp.run(sess, [], targets=["init"])
    x = np.asarray([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], np.float32)
    y = np.asarray([[1.0], [-2.0]], np.float32)
    loss, w, norm = imp.run(sess, list(imp.summaries.values()), {"x:0": x, "y:0": y})
    np.testing.assert_allclose(norm, np.linalg.norm(w), rtol=1e-6)
    np.testing.assert_allclose(loss, np.mean(np.square(x @ w - y)), rtol=1e-6)
    with EventWriter(tmp_path) as ew:
        ew.add_scalar("loss_1", float(loss), 0)
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_rnn_stopping_before_the_time_dimension_stacks_zeros(backend: str) -> None:
    """dynamic_rnn's loop runs to the longest sequence length; its output arrays' later slots stay
    unwritten, and TensorFlow gathers them as zeros (their element shape is known): so past every
    row's length the read-out is the read-out of zeros, the bias, as for a row of length 0 (it was a
    KernelError, "slots were never written"; the fixture's third run has TensorFlow's values)."""
    imp = import_graph_def(DATA / "bilstm_seq_lengths.pbtxt")
    sess = tn.Session(imp.graph, backend=backend)
    feeds = {"x:0": np.ones((2, 3, 2), np.float32), "seq:0": np.asarray([2, 0], np.int32)}
    (pred,) = imp.run(sess, ["readout/BiasAdd:0"], feeds)
    bias = pred[1, 0]
    np.testing.assert_array_equal(pred[1], np.broadcast_to(bias, pred[1].shape))
    np.testing.assert_array_equal(pred[0, 2], bias)
    assert not np.array_equal(pred[0, 1], bias)


def test_an_input_pipeline_is_left_out_and_its_batches_are_placeholders_to_feed() -> None:
    """``input_pipelines`` reads a ``tf.data`` iterator and a queue pipeline: the dataset, iterator,
    queue and reader ops and the producer queue's slicing are left out, the two get-next nodes the
    model reads are placeholders of their declared dtypes and shapes (the batching queue's dequeue of
    4 adds that batch dimension), a fetch of the pipeline says to feed them, and ``init_all``, which
    grouped the iterator's initializer with the Variables', still initialises the Variables."""
    from turnout.errors import NotFoundError
    from turnout.graphdef import parse_graph_def, unsupported_ops
    from turnout.graphdef.input_pipeline import pipeline_nodes

    gd = parse_graph_def(DATA / "input_pipelines.pbtxt")
    left = pipeline_nodes(gd)
    assert {"IteratorV2", "MakeIterator", "MapDataset", "batch/fifo_queue", "input_producer/input_producer_Dequeue",
            "input_producer/GatherV2", "batch/n"} <= left
    assert "IteratorGetNext" not in left and "batch" not in left and "w" not in left
    assert unsupported_ops(gd) == {}
    imp = import_graph_def(gd)
    assert imp.batches == ["IteratorGetNext:0", "IteratorGetNext:1", "batch:0", "batch:1"]
    got = [(imp.tensor(b).node.op, imp.tensor(b).dtype.name, imp.tensor(b).shape) for b in imp.batches]
    assert got == [("Placeholder", "float32", (None, 3)), ("Placeholder", "int32", (None,)),
                   ("Placeholder", "float32", (4, 3)), ("Placeholder", "float32", (4,))]
    for name in ("MakeIterator", "input_producer/input_producer_Dequeue:0"):
        with pytest.raises(NotFoundError, match="belongs to the input pipeline.*ImportedGraph.batches"):
            imp.tensor(name)
    sess = tn.Session(imp.graph)
    sess.run(imp.node("init_all"))
    assert np.asarray(sess.run(imp.tensor("w/Read/ReadVariableOp:0"))).shape == (3, 2)


def _queue_graph(op: str, shapes: list[list[int]] | None) -> GraphDef:
    g = GraphDef()
    q = g.node("queue", "FIFOQueueV2", component_types=[F32])
    if shapes is not None:
        for s in shapes:
            g.gd.node[-1].attr["shapes"].list.shape.add().dim.extend([])
            for d in s:
                g.gd.node[-1].attr["shapes"].list.shape[-1].dim.add().size = d
    deq = g.node("deq", op, (q, g.const("n", np.int32(3))) if "Many" in op or "UpTo" in op else (q,))
    g.gd.node[-1].attr["component_types"].list.type.append(F32)
    g.node("out", "Mul", (f"{deq}:0", g.const("two", np.float32(2.0))), T=F32)
    return g


@pytest.mark.parametrize("op, shapes, expected", [
    ("QueueDequeueManyV2", [[2]], (3, 2)), ("QueueDequeueUpToV2", [[2]], (None, 2)),
    ("QueueDequeueV2", [[2]], (2,)), ("QueueDequeueManyV2", None, None)])
def test_a_queue_s_dequeue_is_a_placeholder_of_its_batch(op: str, shapes: list[list[int]] | None,
                                                        expected: tuple[int | None, ...] | None) -> None:
    """A dequeue of many is batched by its count where that is a constant, by an unknown size for up
    to; a single dequeue has the queue's shape; a queue that declares no shapes gives a placeholder
    of unknown shape. The model computes on what is fed, on both backends."""
    imp = import_graph_def(_queue_graph(op, shapes).gd)
    assert imp.batches == ["deq:0"] and imp.tensor("deq:0").shape == expected
    x = np.ones((3, 2), np.float32) if expected != (2,) else np.ones(2, np.float32)
    for backend in BACKENDS:
        (got,) = imp.run(tn.Session(imp.graph, backend=backend), ["out:0"], {"deq:0": x})
        np.testing.assert_array_equal(got, 2 * x)


def test_a_batch_component_of_a_dtype_turnout_lacks_is_an_error_only_where_it_is_read() -> None:
    """A pipeline that passes a file name (a string) along with each batch: the model that reads only
    the numbers imports and runs, the string is not among the batches to feed, and a model reading it
    is refused naming what it is."""
    g = GraphDef()
    it = g.node("it", "IteratorV2")
    g.node("next", "IteratorGetNext", (it,))
    g.gd.node[-1].attr["output_types"].list.type.extend([7, F32])
    for dims in ([], [2]):
        g.gd.node[-1].attr["output_shapes"].list.shape.add().dim.extend([])
        for d in dims:
            g.gd.node[-1].attr["output_shapes"].list.shape[-1].dim.add().size = d
    g.node("out", "Mul", ("next:1", g.const("two", np.float32(2.0))), T=F32)
    imp = import_graph_def(g.gd)
    assert imp.batches == ["next:1"]
    (got,) = imp.run(tn.Session(imp.graph), ["out:0"], {"next:1": np.ones(2, np.float32)})
    np.testing.assert_array_equal(got, [2.0, 2.0])
    with pytest.raises(UnsupportedError, match="a TensorFlow string tensor"):
        imp.tensor("next:0")
    g.node("reads_name", "Identity", ("next:0",), T=7)
    with pytest.raises(UnsupportedError, match=r'reads_name.*a TensorFlow string tensor \(Turnout has no string'):
        import_graph_def(g.gd)


@pytest.mark.parametrize("enum, name, lo, hi", [(4, "uint8", 0, 255), (6, "int8", -128, 127),
                                                (5, "int16", -2**15, 2**15 - 1), (17, "uint16", 0, 2**16 - 1)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_narrow_integer_placeholder_read_by_casts_is_fed_as_int32(enum: int, name: str, lo: int, hi: int,
                                                                    backend: str) -> None:
    """A ``uint8`` frame placeholder (TF1 reinforcement-learning code feeds its frames so) read only
    by a ``Cast``: every value of the type casts exactly; a value out of its range is a
    ``KernelError`` naming the range, where TensorFlow refuses to feed it."""
    g = GraphDef()
    g.node("frames", "Placeholder", dtype=enum, shape=[3])
    g.node("x", "Cast", ("frames",), SrcT=enum, DstT=F32)
    imp = import_graph_def(g.gd)
    sess = tn.Session(imp.graph, backend=backend)
    edge = np.asarray([lo, 0, hi], np.int32)
    np.testing.assert_array_equal(imp.run(sess, ["x:0"], {"frames:0": edge})[0], edge.astype(np.float32))
    with pytest.raises(tn.KernelError, match=rf"out of the range of {name}, \[{lo}, {hi}\], was fed"):
        imp.run(sess, ["x:0"], {"frames:0": np.asarray([lo - 1, 0, hi], np.int32)})


def test_a_narrow_integer_placeholder_with_arithmetic_on_it_is_refused_naming_the_reader() -> None:
    """``frames + frames`` in uint8 wraps at 256 where int32 would not: refused, not widened."""
    g = GraphDef()
    g.node("frames", "Placeholder", dtype=4, shape=[3])
    g.node("twice", "AddV2", ("frames", "frames"), T=4)
    with pytest.raises(UnsupportedError, match=r'uint8 .* but AddV2 node "twice" reads it'):
        import_graph_def(g.gd)
