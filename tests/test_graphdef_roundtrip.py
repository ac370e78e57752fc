"""GraphDef export: Turnout graphs (gradients included) exported, imported back and run on every
backend with the original's values; where TensorFlow is installed, the exported GraphDef runs in
TensorFlow v1 with the same values and TensorFlow-built graphs run on Turnout with TensorFlow's."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from programs import assert_same_outcome, run_outcome, to_source
from strategies import GradientCase, gradient_cases

import turnout as tn
from turnout.session import RunOptions

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from turnout.errors import UnsupportedError  # noqa: E402
from turnout.graphdef import export_graph_def, import_graph_def  # noqa: E402

Built = tuple[tn.Graph, list[tn.Tensor], dict[tn.Tensor, Any]]
BUDGET = settings.default.max_examples


def _while_grad() -> Built:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        n = tn.placeholder(tn.int32, shape=[], name="n")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tn.tanh(y * x) + y), [tn.constant(0), x])
        (gx,) = tn.gradients(y, [x])
    return g, [y, gx], {x: 0.7, n: 4}


def _nested_grad() -> Built:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")

        def outer(i: Any, y: Any) -> Any:
            _, y2 = tn.while_loop(lambda j, v: j < i, lambda j, v: (j + 1, v * x), [tn.constant(0), y])
            return i + 1, y2 + 1.0

        _, y = tn.while_loop(lambda i, y: i < 3, outer, [tn.constant(0), x])
        (gx,) = tn.gradients(y, [x])
    return g, [y, gx], {x: 1.1}


def _cond_in_while() -> Built:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[3], name="x")

        def body(i: Any, s: Any) -> Any:
            return i + 1, tn.cond(i < 2, lambda: s * x, lambda: s + x)

        _, s = tn.while_loop(lambda i, s: i < 5, body, [tn.constant(0), x])
        loss = tn.reduce_sum(s * s)
        (gx,) = tn.gradients(loss, [x])
    return g, [s, loss, gx], {x: np.array([0.5, -1.0, 2.0], np.float32)}


def _tensor_array_and_slices() -> Built:
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, shape=[4, 2], name="xs")
        ta = tn.TensorArray(tn.float32, size=4, element_shape=[2])

        def body(i: Any, ta: Any) -> Any:
            return i + 1, ta.write(i, tn.tanh(xs[i]) * 2.0)

        _, ta = tn.while_loop(lambda i, ta: i < 4, body, [tn.constant(0), ta])
        out = ta.stack()
        c = tn.scan(lambda a, v: a * 0.5 + v, xs, initializer=tn.zeros([2]))
        m = tn.map_fn(lambda v: tn.reduce_sum(v * v), xs)
    return g, [out, c, m], {xs: np.arange(8, dtype=np.float32).reshape(4, 2) / 4}


def _variables() -> Built:
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), name="w")
        x = tn.placeholder(tn.float32, shape=[1, 2], name="x")
        y = tn.reduce_sum(tn.matmul(x, w.read()))
        (gw,) = tn.gradients(y, [w])
        step = w.assign_sub(gw * 0.1)
    return g, [y, gw, step], {x: np.array([[1.0, -1.0]], np.float32)}


def _tensor_array_grad() -> Built:
    """The gradient of a TensorArray written in a loop and stacked: a slot-or-zeros read of the
    gradient array per iteration (``TensorArrayReadOrZeros``, exported as a gather of one slot)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[3], name="x")
        ta = tn.TensorArray(tn.float32, size=4, element_shape=[3])
        _, ta = tn.while_loop(lambda i, ta: i < 4,
                              lambda i, ta: (i + 1, ta.write(i, tn.tanh(x * tn.cast(i + 1, tn.float32)))),
                              [tn.constant(0), ta])
        s = ta.stack()
        loss = tn.reduce_sum(s * s)
        (gx,) = tn.gradients(loss, [x])
    return g, [loss, gx], {x: np.array([0.5, -1.0, 0.25], np.float32)}


def _tensor_array_grads_summed() -> Built:
    """A TensorArray written in a loop and stacked twice: its gradient is the slotwise sum of two
    gradient arrays (``TensorArrayAdd``, exported as a new array scattered with both arrays' gathers)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[3], name="x")
        ta = tn.TensorArray(tn.float32, size=4, element_shape=[3])
        _, ta = tn.while_loop(lambda i, ta: i < 4,
                              lambda i, ta: (i + 1, ta.write(i, tn.tanh(x * tn.cast(i + 1, tn.float32)))),
                              [tn.constant(0), ta])
        loss = tn.reduce_sum(ta.stack() ** 2) + tn.reduce_sum(ta.stack() * 3.0)
        (gx,) = tn.gradients(loss, [x])
    return g, [loss, gx], {x: np.array([0.5, -1.0, 0.25], np.float32)}


def _recomputed_loop() -> Built:
    """A loop under its own memory budget, differentiated: its forward loop keeps checkpoints in slot
    buffers written one slot a step (``UpdateSlot``, exported as TensorFlow's ``TensorScatterUpdate``)
    and its backward loop recomputes from them."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[3], name="x")
        n = tn.placeholder(tn.int32, shape=[], name="n")
        _, y = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tn.tanh(v * 1.1) + 0.1), [tn.constant(0), x],
                             memory_budget=3 * 16)
        (gx,) = tn.gradients(tn.reduce_sum(y * y), [x])
    assert any(nd.op == "UpdateSlot" for nd in g.nodes)
    return g, [y, gx], {x: np.array([0.5, -1.0, 0.25], np.float32), n: 7}


def _gather_grads() -> Built:
    """Gathers along every axis, with repeated and negative indices, and their gradients (a
    ``ScatterAddLike`` each, exported as TensorFlow's ``UnsortedSegmentSum``)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[2, 3, 4], name="x")
        loss = tn.constant(0.0)
        for axis, idx in [(0, [1, -1, 0]), (1, [[0, -1], [2, 2]]), (2, [3, 0, -4])]:
            y = tn.gather(x, tn.constant(np.array(idx, np.int32)), axis=axis)
            loss = loss + tn.reduce_sum(y * y) * float(axis + 1)
        (gx,) = tn.gradients(loss, [x])
    return g, [loss, gx], {x: np.linspace(-1.0, 1.0, 24, dtype=np.float32).reshape(2, 3, 4)}


def _scan_and_map_grads() -> Built:
    """Gradients of ``scan``, ``map_fn`` and a loop reading one element twice per iteration: each read
    of an element array in a loop adds its gradient into an accumulator carried by the backward loop
    (``TensorArrayAccumulate``), exported as writes to one TensorFlow gradient array, whose writes to
    a written slot add."""
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, shape=[4, 2], name="xs")
        c = tn.scan(lambda a, v: tn.tanh(a * 0.5 + v), xs, initializer=tn.zeros([2]))
        m = tn.map_fn(lambda v: tn.reduce_sum(v * v * v), xs)
        ta = tn.TensorArray(tn.float32, size=4, element_shape=[2]).unstack(xs)

        def body(i: Any, s: Any) -> Any:  # slot i read twice, slot 0 in every iteration
            return i + 1, s * ta.read(i) + ta.read(i) * ta.read(0)

        _, s = tn.while_loop(lambda i, s: i < 4, body, [tn.constant(0), tn.ones([2])])
        loss = tn.reduce_sum(c * c) + tn.reduce_sum(m) + tn.reduce_sum(s)
        (gx,) = tn.gradients(loss, [xs])
    assert any(nd.op == "TensorArrayAccumulate" for nd in g.nodes)
    return g, [loss, gx], {xs: np.linspace(-1.0, 1.0, 8, dtype=np.float32).reshape(4, 2)}


BUILDERS: dict[str, Callable[[], Built]] = {f.__name__[1:]: f for f in
                                            (_while_grad, _nested_grad, _cond_in_while, _tensor_array_and_slices,
                                             _variables, _gather_grads, _scan_and_map_grads,
                                             _tensor_array_grad, _tensor_array_grads_summed, _recomputed_loop)}


@pytest.mark.parametrize("backend", ["reference", "fast"])
@pytest.mark.parametrize("case", sorted(BUILDERS))
def test_export_then_import_gives_the_same_values(case: str, backend: str) -> None:
    g, fetches, feeds = BUILDERS[case]()
    want = tn.Session(g).run(fetches, feeds)
    ex = export_graph_def(g)
    imp = import_graph_def(ex.graph_def)
    got = imp.run(tn.Session(imp.graph, backend=backend), [ex.tf_name(t) for t in fetches],
                  {ex.tf_name(k): v for k, v in feeds.items()})
    for a, b, t in zip(got, want, fetches):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"{case}: {t.name}")


def test_export_keeps_frames_and_scopes() -> None:
    g, _, _ = _while_grad()
    gd = export_graph_def(g).graph_def
    enters = [nd for nd in gd.node if nd.op == "Enter"]
    frames = {nd.attr["frame_name"].s.decode() for nd in enters}
    assert len(frames) == 2  # the forward loop and its gradient loop
    # loops with stack pushes or pops run one iteration at a time, so LIFO stacks pair up
    assert {nd.attr["parallel_iterations"].i for nd in enters} == {1}
    assert any(nd.name.startswith("gradients/while/") for nd in gd.node)


def test_summed_gradient_arrays_export_only_in_tensorflows_form() -> None:
    """A TensorArrayAdd in the frame its arrays were made in exports; one that sums, in each iteration,
    an array made outside the loop into an array carried by the loop has no TensorFlow form (its
    gradient-array form needs the array summed in to be made in the iteration, written, and read by
    nothing else) and is refused, naming it, rather than exported as a new array per iteration that
    the loop's reads would never see."""
    g, _, _ = _tensor_array_grads_summed()
    assert any(n.op == "TensorArrayAdd" for n in g.nodes)
    export_graph_def(g)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[3], name="x")
        ta = tn.TensorArray(tn.float32, size=3, element_shape=[]).unstack(x)

        def body(i: Any, acc: Any) -> Any:  # acc + ta each iteration, as a gradient accumulator sums
            total = g.create_node("TensorArrayAdd", [acc.tensor, ta.tensor], name="sum").outputs[0]
            return i + 1, tn.TensorArray(_tensor=total)

        tn.while_loop(lambda i, acc: i < 2, body, [tn.constant(0), ta])
    with pytest.raises(UnsupportedError, match="TensorArrayAdd"):
        export_graph_def(g)


def test_an_accumulator_read_between_its_sums_is_refused() -> None:
    """``TensorArrayAccumulate`` exports as a write to one TensorFlow gradient array, which holds every
    sum made so far: where a version of the accumulator is read before a later sum into it, no such
    array gives Turnout's value, so the export refuses, naming the op."""
    g = tn.Graph()
    with g.as_default():
        v = tn.placeholder(tn.float32, shape=[2], name="v")
        acc = tn.TensorArray(tn.float32, size=2, element_shape=[2])
        once = g.create_node("TensorArrayAccumulate", [acc.tensor, tn.constant(0), v], name="once").outputs[0]
        seen = tn.TensorArray(_tensor=once).read(0)
        g.create_node("TensorArrayAccumulate", [once, tn.constant(0), v * 2.0], name="twice")
    assert seen.shape is not None
    with pytest.raises(UnsupportedError, match="TensorArrayAccumulate"):
        export_graph_def(g)


def test_unexportable_primitives_are_listed() -> None:
    """A device's partition holds Send and Recv, Turnout's transfers, which TensorFlow's GraphDef of a
    whole graph has no form of: the export names them and refuses."""
    from turnout.devices import partition, place

    g = tn.Graph()
    with g.as_default():
        with tn.device("cpu:0"):
            x = tn.placeholder(tn.float32, shape=[3], name="x")
        with tn.device("cpu:1"):
            y = tn.reduce_sum(x * 2.0)
    parts = partition(g, place(g, ["cpu:0", "cpu:1"]), [y])
    cut = next(p.graph for p in parts.partitions.values() if any(n.op == "Recv" for n in p.graph.nodes))
    with pytest.raises(UnsupportedError, match="(?s)no TensorFlow v1 form.*Recv"):
        export_graph_def(cut)


# ---- with TensorFlow ------------------------------------------------------------------------------
def _tf() -> Any:
    tf = pytest.importorskip("tensorflow")
    tf.compat.v1.disable_v2_behavior()
    tf.compat.v1.enable_resource_variables()
    return tf


@pytest.mark.parametrize("case", sorted(BUILDERS))
def test_exported_graph_runs_in_tensorflow(case: str) -> None:
    tf = _tf()
    g, fetches, feeds = BUILDERS[case]()
    want = tn.Session(g).run(fetches, feeds)
    ex = export_graph_def(g)
    gd = tf.compat.v1.GraphDef.FromString(ex.graph_def.SerializeToString())  # TensorFlow's own class
    with tf.Graph().as_default() as tg:
        tf.compat.v1.import_graph_def(gd, name="")
        with tf.compat.v1.Session(graph=tg) as sess:
            if ex.init_op:
                sess.run(tg.get_operation_by_name(ex.init_op))
            got = sess.run([ex.tf_name(t) for t in fetches], {ex.tf_name(k): v for k, v in feeds.items()})
    for a, b, t in zip(got, want, fetches):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"{case}: {t.name}")


def _fixture_module() -> Any:
    path = Path(__file__).resolve().parent.parent / "tools" / "tf_fixtures.py"
    spec = importlib.util.spec_from_file_location("tf_fixtures", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("case", ["while_nested", "cond_in_while", "while_in_cond", "scan_map_fn", "grad_while",
                                  "grad_cond_in_while",
                                  "grad_nested_while", "grad_scan", "rnn_variables"])
def test_graph_built_in_tensorflow_runs_on_turnout(case: str) -> None:
    """Built and run live in TensorFlow (not from the checked-in fixture), imported, run on Turnout."""
    tf = _tf()
    text, runs = _fixture_module().build(tf, case)
    from google.protobuf import text_format
    from tensorboard.compat.proto import graph_pb2

    imp = import_graph_def(text_format.Parse(text, graph_pb2.GraphDef()))
    sess = tn.Session(imp.graph)
    for r in runs:
        got = imp.run(sess, r["fetches"], r["feeds"], r.get("targets", []))
        for a, b in zip(got, r["expected"]):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-5)


def test_lstm_example_trains_identically_in_tensorflow() -> None:
    """The LSTM example (a while loop over a fed length, its gradient stacks, Adam) exported: two
    training steps in TensorFlow give Turnout's losses."""
    tf = _tf()
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import lstm  # type: ignore[import-not-found]

    m = lstm.build(seed=0)
    ex = export_graph_def(m["graph"])
    rng = np.random.default_rng(1)
    xs, target = lstm.batch_for(rng, m["batch"], m["inputs"], 7)
    feeds = {m["xs"]: xs, m["length"]: 7, m["target"]: target}
    sess = tn.Session(m["graph"])
    want = [sess.run([m["loss"], m["train_op"]], feeds)[0] for _ in range(2)]
    gd = tf.compat.v1.GraphDef.FromString(ex.graph_def.SerializeToString())
    with tf.Graph().as_default() as tg:
        tf.compat.v1.import_graph_def(gd, name="")
        with tf.compat.v1.Session(graph=tg) as s:
            s.run(tg.get_operation_by_name(ex.init_op))
            tf_feeds = {ex.tf_name(k): v for k, v in feeds.items()}
            got = [s.run([ex.tf_name(m["loss"]), ex.tf_op(m["train_op"])], tf_feeds)[0] for _ in range(2)]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_an_array_handle_enters_a_loop_with_the_loops_parallel_iterations() -> None:
    """Regression (found by the generated round trip below): a TensorArray's handle entered into a
    ``scan`` of ``parallel_iterations=1`` must say 1, as the loop's own Enters do; it said 10, and
    the import back refused the frame ([W-Frame-Name])."""
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, [3], name="xs")
        s = tn.reduce_sum(tn.scan(lambda c, e: c + e * e, xs, initializer=tn.constant(0.0), parallel_iterations=1))
        (d,) = tn.gradients(s, [xs])
    feeds = {xs: np.array([1.0, -2.0, 0.5], np.float32)}
    ex = export_graph_def(g)
    pis = {nd.attr["parallel_iterations"].i for nd in ex.graph_def.node
           if nd.op == "Enter" and nd.attr["frame_name"].s.decode().startswith("scan/")}
    assert pis == {1}
    imp = import_graph_def(ex.graph_def)
    got = imp.run(tn.Session(imp.graph), [ex.tf_name(s), ex.tf_name(d)], {ex.tf_name(xs): feeds[xs]})
    for a, b in zip(got, tn.Session(g).run([s, d], feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@settings(max_examples=max(1, BUDGET // 4), deadline=None)
@given(gradient_cases())
def test_generated_gradients_export_and_import_back_with_their_values(case: GradientCase) -> None:
    """A generated program's gradients (loops, conds, scans: stacks, TensorArrays and sums of
    gradient arrays across iterations) export, import back, and give the original's values, or its
    error type, on the reference interpreter."""
    fetches = [t for t in case.grads if t is not None]
    ex = export_graph_def(case.graph)
    imp = import_graph_def(ex.graph_def)
    guard = RunOptions(max_iterations=1000)
    back = [imp.tensor(ex.tf_name(t)) for t in fetches]
    feeds = {imp.tensor(ex.tf_name(k)): v for k, v in case.feeds.items()}
    assert_same_outcome(lambda: tn.Session(case.graph).run(fetches, case.feeds, options=guard),
                        lambda: tn.Session(imp.graph).run(back, feeds, options=guard),
                        to_source(case.program) + "\nexported and imported back")


@settings(max_examples=max(1, BUDGET // 10), deadline=None)
@given(gradient_cases())
def test_generated_gradients_run_in_tensorflow_with_turnouts_values(case: GradientCase) -> None:
    """Where TensorFlow is installed: a generated program's gradients, exported, run in TensorFlow's
    v1 ``Session`` with the values Turnout's reference interpreter gives (programs it refuses are
    left out: TensorFlow's errors are its own). TensorFlow's executor runs the graph as written: its
    graph optimizers are off, since they make a cond whose predicate folds to a constant dead
    (``tf.cond(tf.logical_and(0 < 1, 0 < 1), ...)`` built by TensorFlow itself fetches no value with
    them on)."""
    tf = _tf()
    fetches = [t for t in case.grads if t is not None]
    want, err = run_outcome(lambda: tn.Session(case.graph).run(fetches, case.feeds,
                                                               options=RunOptions(max_iterations=1000)))
    assume(err is None)
    ex = export_graph_def(case.graph)
    gd = tf.compat.v1.GraphDef.FromString(ex.graph_def.SerializeToString())
    rewrite = importlib.import_module("tensorflow.core.protobuf.rewriter_config_pb2")
    as_written = tf.compat.v1.ConfigProto(graph_options=tf.compat.v1.GraphOptions(
        rewrite_options=rewrite.RewriterConfig(disable_meta_optimizer=True),
        optimizer_options=tf.compat.v1.OptimizerOptions(opt_level=tf.compat.v1.OptimizerOptions.L0,
                                                        do_constant_folding=False)))
    with tf.Graph().as_default() as tg:
        tf.compat.v1.import_graph_def(gd, name="")
        with tf.compat.v1.Session(graph=tg, config=as_written) as sess:
            got = sess.run([ex.tf_name(t) for t in fetches], {ex.tf_name(k): v for k, v in case.feeds.items()})
    assert want is not None
    for a, b, t in zip(got, want, fetches, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9, err_msg=f"{to_source(case.program)}\n{t.name}")
