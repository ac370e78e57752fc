"""GraphDef import: TensorFlow-produced graphs (tests/data/tf, written by tools/tf_fixtures.py) run on
Turnout's backends with TensorFlow's values. Needs the ``tf`` extra (installed by ``.[dev]``), not
TensorFlow."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout import checkpoint
from turnout.errors import TurnoutError, UnsupportedError

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from turnout.graphdef import SUPPORTED_OPS, import_graph_def, parse_graph_def  # noqa: E402
from turnout.graphdef.input_pipeline import GET_NEXT_OPS  # noqa: E402
from turnout.graphdef.left_out import left_out  # noqa: E402

DATA = Path(__file__).parent / "data" / "tf"
CASES = sorted(p.stem for p in DATA.glob("*.pbtxt"))

# Known limits, each with the error it raises (so the test fails when one is lifted, or changes).
KNOWN: dict[tuple[str, str], tuple[type[Exception], str]] = {
    # a dynamic_size TensorArray made and stacked inside a map_fn body: its stacked shape is known only
    # when the program runs, inside a loop, so the fast backend runs this program on the interpreter
    ("while_case_map_fn", "fast"): (UnsupportedError, "reads the stack of a TensorArray of dynamic size"),
    # the teacher-forced scan's embedding gradient: IndexedSlices accumulated across the backward loop
    # (as in grad_gather_in_loop), a loop variable that grows
    ("seq2seq_greedy", "fast"): (UnsupportedError, "changes type or shape across iterations"),
    # the v2 gradient of a cond inside a loop saves the cond's Optionals on a list whose elements may
    # differ in shape (a stand-in where the branch that ran did not compute the value): no buffer
    ("v2_cond_in_loop_training", "fast"): (UnsupportedError, "elements of several shapes"),
    # sampled_softmax_loss removes its accidental hits through ComputeAccidentalHits, whose outputs are
    # as long as the hits found: a length known only when the program runs
    ("sampled_softmax_lm", "fast"): (UnsupportedError, "slices with a bound known only at run time"),
}


def _run_case(case: str, backend: str, fallback: bool = True, **opts: object) -> None:
    meta = json.loads((DATA / f"{case}.json").read_text())
    imp = import_graph_def(DATA / f"{case}.pbtxt")
    sess = tn.Session(imp.graph, backend=backend, **({} if fallback else {"fallback": False}))
    _replay(imp, sess, meta["runs"], case, backend, **opts)


def _replay(imp: Any, sess: tn.Session, runs: list[dict[str, Any]], case: str, backend: str, **opts: object) -> None:
    """The fixture's runs in ``sess``, each with TensorFlow's values (or its error); a ``save`` entry
    marks where TensorFlow's Saver wrote a checkpoint (test_saver_checkpoints_restore_...) and runs
    nothing."""
    for r in runs:
        if "save" in r:
            continue
        feeds = {imp.tensor(k): np.asarray(v) for k, v in r["feeds"].items()}
        fetches = [imp.tensor(f) for f in r["fetches"]] + [imp.node(t) for t in r.get("targets", [])]
        if "error" in r:  # TensorFlow refused this run (an Assert): a Turnout error with TF's message
            with pytest.raises(TurnoutError, match=re.escape(r["error"])):
                sess.run(fetches, feeds, **opts)
            continue
        out = sess.run(fetches, feeds, **opts)
        for name, got, want in zip(r["fetches"], out, r["expected"]):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5, err_msg=f"{case}: {name} on {backend}")


@pytest.mark.parametrize("backend", ["reference", "fast"])
@pytest.mark.parametrize("case", CASES)
def test_tensorflow_graph_runs_with_tensorflows_values(case: str, backend: str) -> None:
    if (case, backend) in KNOWN:
        err, msg = KNOWN[(case, backend)]
        with pytest.raises(err, match=msg):  # not compiled...
            _run_case(case, backend, fallback=False)
        with pytest.warns(RuntimeWarning, match=msg):  # ...so it runs on the interpreter, with TF's values
            _run_case(case, backend)
        return
    _run_case(case, backend, fallback=backend != "fast")  # (compiled on the fast backend, not its fallback)


SAVED = sorted(p.stem for p in DATA.glob("*.json") if any("save" in r for r in json.loads(p.read_text())["runs"]))


@pytest.mark.parametrize("backend", ["reference", "fast"])
@pytest.mark.parametrize("case", SAVED)
def test_saver_checkpoints_restore_into_the_imported_model(case: str, backend: str) -> None:
    """The checkpoint TensorFlow's ``Saver`` wrote mid-fixture (trained weights, optimizer slots,
    moving statistics and averages, the global step) restores by name into a fresh session of the
    imported model (``checkpoint.restore_tf``, strict: every Variable found), which then computes
    what TensorFlow computed after the save."""
    meta = json.loads((DATA / f"{case}.json").read_text())
    imp = import_graph_def(DATA / f"{case}.pbtxt")
    sess = tn.Session(imp.graph, backend=backend, **({} if backend == "reference" else {"fallback": False}))
    at = next(k for k, r in enumerate(meta["runs"]) if "save" in r)
    restored = checkpoint.restore_tf(sess, DATA / meta["runs"][at]["checkpoint"])
    assert restored == sorted(imp.graph.variables)
    _replay(imp, sess, meta["runs"][at + 1:], case, backend)


@pytest.mark.parametrize("scheduler", ["lifo", "random"])
@pytest.mark.parametrize("case", ["grad_cond_in_while", "grad_nested_while", "grad_scan", "rnn_variables", "lstm_sgd",
                                  "reference_variables"])
def test_stack_pairing_does_not_depend_on_the_schedule(case: str, scheduler: str) -> None:
    """Pushes and pops meet through depth counters: any firing order gives TensorFlow's values."""
    _run_case(case, "reference", scheduler=scheduler, seed=7)


def test_fixtures_cover_the_issue_s_op_list() -> None:
    used = set()
    for case in CASES:  # (a Saver's, summaries' and input pipeline's ops are left out: turnout.graphdef.left_out;
        gd = parse_graph_def(DATA / f"{case}.pbtxt")  # the get-next nodes stay, as placeholders)
        dropped = left_out(gd)
        used |= {nd.op for nd in gd.node if nd.name not in dropped and nd.op not in GET_NEXT_OPS}
    for op in ["Enter", "Exit", "Switch", "Merge", "NextIteration", "LoopCond", "StackV2", "StackPushV2",
               "StackPopV2", "ControlTrigger", "TensorArrayV3", "TensorArrayWriteV3", "TensorArrayReadV3",
               "TensorArrayGatherV3", "TensorArrayScatterV3", "TensorArrayGradV3", "VarHandleOp",
               "ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp", "VarIsInitializedOp", "AddV2", "AddN",
               "Mul", "Sub", "MatMul", "Tanh", "TanhGrad", "Less", "GreaterEqual", "LogicalAnd", "Fill", "Range",
               "Reshape", "StridedSlice", "Pack", "Tile", "Sum", "Cast", "FloorMod", "NoOp", "Identity", "Const",
               "Placeholder",
               # TF1 model code: nn.dynamic_rnn's LSTM with a sequence_length, trained by tf.compat.v1.train
               "BiasAdd", "BiasAddGrad", "Split", "Slice", "ConcatOffset", "InvertPermutation", "Select", "Assert",
               "All", "Min", "Max", "ResourceApplyGradientDescent", "ResourceApplyAdam", "ShapeN",
               # the other families: GRU, stacked LSTM, softmax classifier, beam search
               "ReverseSequence", "TopKV2", "ArgMax", "ArgMin", "Softmax", "LogSoftmax", "DynamicStitch",
               "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits", "StridedSliceGrad",
               "ResourceApplyMomentum", "ResourceApplyRMSProp", "ResourceApplyAdagrad", "ResourceGather",
               "UnsortedSegmentSum",
               # TF1's reference variables
               "VariableV2", "Assign", "AssignAdd", "AssignSub", "ApplyGradientDescent", "RefEnter", "RefSwitch",
               "ApplyMomentum", "ApplyAdam", "ApplyRMSProp", "ApplyAdagrad",
               # element-wise math and activations of TF1 model code, with their gradient ops
               "Rsqrt", "RsqrtGrad", "SqrtGrad", "Reciprocal", "ReciprocalGrad", "Softplus", "Elu",
               "EluGrad", "Selu", "SeluGrad", "LeakyRelu", "LeakyReluGrad", "Relu6", "Relu6Grad", "Floor", "Ceil",
               "Round", "Log1p", "Expm1", "Erf", "IsFinite", "SquaredDifference", "DivNoNan", "Sin", "Cos",
               "L2Loss",
               # structure ops of TF1 model code
               "BatchMatMulV2", "Squeeze", "Unpack", "PlaceholderWithDefault", "IdentityN", "CheckNumerics",
               "EnsureShape", "Pad", "PadV2", "OneHot", "Cumsum", "GatherNd", "ScatterNd",
               # sparse (IndexedSlices) updates of embeddings, einsum
               "Unique", "ResourceScatterAdd", "ResourceSparseApplyMomentum", "ResourceSparseApplyAdagrad",
               "ResourceSparseApplyRMSProp", "Einsum", "ResourceApplyCenteredRMSProp",
               # convolutional networks: windows, their gradients, batch normalisation in both modes
               "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MaxPool", "MaxPoolGrad", "AvgPool",
               "AvgPoolGrad", "FusedBatchNormV3", "FusedBatchNormGradV3", "VariableShape", "LRN", "LRNGrad",
               # TF1's other optimizers, dense and sparse, reference and resource
               "ApplyAdadelta", "ResourceSparseApplyAdadelta", "ApplyProximalGradientDescent",
               "SparseApplyProximalGradientDescent", "ResourceApplyProximalAdagrad",
               "ResourceSparseApplyProximalAdagrad", "ApplyFtrl", "SparseApplyFtrlV2", "ResourceApplyFtrlV2",
               "ResourceSparseApplyFtrl",
               # the fused recurrent cells of TF1's contrib.rnn, with their gradient ops
               "LSTMBlockCell", "LSTMBlockCellGrad", "GRUBlockCell", "GRUBlockCellGrad"]:
        assert op in used, op
    assert used <= SUPPORTED_OPS


def test_binary_pb_and_names_without_index() -> None:
    gd = parse_graph_def(DATA / "while_simple.pbtxt")
    imp = import_graph_def(gd.SerializeToString())
    out = imp.run(tn.Session(imp.graph), ["while/Exit_1"], {"x": 3.0})
    assert out[0] == pytest.approx(3.0 * 2**10)
    with pytest.raises(KeyError, match="no tensor"):
        imp.tensor("nope:0")


def test_unsupported_ops_are_listed_all_at_once() -> None:
    gd = parse_graph_def(DATA / "while_simple.pbtxt")
    for op, name in [("SelfAdjointEigV2", "decomp"), ("Svd", "svd1"), ("Svd", "svd2")]:
        nd = gd.node.add()
        nd.op, nd.name = op, name
    with pytest.raises(UnsupportedError) as e:
        import_graph_def(gd)
    msg = str(e.value)
    assert "SelfAdjointEigV2: 1 node(s), e.g. 'decomp'" in msg and "Svd: 2 node(s)" in msg


def test_dynamic_shape_argument_is_a_clear_error() -> None:
    gd = parse_graph_def(DATA / "while_simple.pbtxt")
    nd = gd.node.add()
    nd.op, nd.name = "Transpose", "r"
    nd.input.extend(["x", "x"])  # a run-time permutation
    nd.attr["T"].type = 1
    with pytest.raises(UnsupportedError, match='Transpose node "r": the permutation'):
        import_graph_def(gd)


@pytest.mark.parametrize("backend", ["reference", "smallstep", "fast"])
def test_a_range_whose_fed_step_is_zero_is_a_kernel_error_on_every_backend(backend: str) -> None:
    """A ``Range`` of a fed step imports as ``tn.range`` builds it, with its check: a step of 0 is the
    range's ``KernelError`` when the program runs, on every backend (TensorFlow refuses it too), not a
    division by zero or an endless range; the same graph with a step of 2 runs."""
    imp = import_graph_def(DATA / "runtime_ranges_top_k.pbtxt")
    sess = tn.Session(imp.graph, backend=backend)
    ints = imp.tensor("ints:0")
    feeds = {imp.tensor("x:0"): np.zeros((2, 6), np.float32), imp.tensor("a:0"): 3}
    np.testing.assert_array_equal(sess.run(ints, {**feeds, imp.tensor("s:0"): 20}), [3, 23])
    with pytest.raises(tn.KernelError, match="delta must not be 0"):
        sess.run(ints, {**feeds, imp.tensor("s:0"): 0})


@pytest.mark.parametrize("backend", ["reference", "smallstep", "fast"])
def test_a_partition_out_of_range_is_a_kernel_error_on_every_backend(backend: str) -> None:
    """``DynamicPartition`` checks its partitions as TensorFlow's kernel does: a row sent to partition
    3 of 3 is a ``KernelError`` naming the node, never a row dropped from every output."""
    imp = import_graph_def(DATA / "sharded_embedding.pbtxt")
    sess = tn.Session(imp.graph, backend=backend)
    ids = np.asarray([1, 7, 3], np.int32)
    pieces = [imp.tensor(f"DynamicPartition:{k}") for k in range(3)]
    got = sess.run(pieces, {imp.tensor("ids:0"): ids, imp.tensor("parts:0"): np.asarray([2, 0, 2], np.int32)})
    assert [len(p) for p in got] == [1, 0, 2]
    with pytest.raises(tn.KernelError, match=r"partitions must be in \[0, 3\)"):
        sess.run(pieces, {imp.tensor("ids:0"): ids, imp.tensor("parts:0"): np.asarray([0, 3, 1], np.int32)})


def test_interop_page_lists_exactly_the_supported_ops() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "interop.rst").read_text()
    listed = set(re.findall(r"``(\w+)``", text.split("The supported ops", 1)[1].split("How the import", 1)[0]))
    assert listed - {"turnout", "SUPPORTED_OPS"} == set(SUPPORTED_OPS)


# ---- shapes as TensorFlow keeps them (issue 38, item 2) -------------------------------------------
def test_a_loop_variable_tensorflow_relaxed_imports_as_shape_varying() -> None:
    """The GraphDef does not say that ``acc`` was declared with shape_invariants [None]; its back
    edge ([4] after entering with [2]) does, and the Merge is imported relaxed."""
    imp = import_graph_def(DATA / "while_shape_invariants.pbtxt")
    assert imp.tensor("while/Merge_1:0").shape == (None,)
    assert imp.tensor("while/Merge:0").shape == ()  # the counter keeps its shape


def test_relaxed_loops_import_once_into_a_given_graph() -> None:
    g = tn.Graph()
    imp = import_graph_def(DATA / "while_shape_invariants.pbtxt", graph=g)
    assert imp.graph is g
    assert len(g.nodes) == len(import_graph_def(DATA / "while_shape_invariants.pbtxt").graph.nodes)


def test_output_shapes_attributes_are_used() -> None:
    """With ``_output_shapes`` (``as_graph_def(add_shapes=True)``), a Merge takes TensorFlow's shape
    at once; elsewhere the recorded shape refines the rule's."""
    gd = parse_graph_def(DATA / "while_shape_invariants.pbtxt")
    for nd in gd.node:
        if nd.name == "while/Merge_1":
            out = nd.attr["_output_shapes"].list.shape
            out.add().dim.add().size = -1
            out.add()
    imp = import_graph_def(gd)
    assert imp.tensor("while/Merge_1:0").shape == (None,)
    meta = json.loads((DATA / "while_shape_invariants.json").read_text())
    sess = tn.Session(imp.graph)
    for r in meta["runs"]:
        got = imp.run(sess, r["fetches"], {k: np.asarray(v) for k, v in r["feeds"].items()})
        np.testing.assert_allclose(got[0], r["expected"][0])


def test_gradient_tensor_arrays_take_the_forward_element_shape() -> None:
    """scan and foldl declare no element shape; their gradient arrays take the forward writes' shape,
    so every loop variable of the backward loops keeps a static shape."""
    imp = import_graph_def(DATA / "grad_scan_foldl.pbtxt")
    news = [n for n in imp.graph.nodes if n.op == "TensorArrayNew" and n.name.startswith("gradients/")]
    assert news and all(n.outputs[0].spec.elem_shape == (2,) for n in news)
    merges = [n for n in imp.graph.nodes if n.op == "Merge" and n.outputs[0].dtype.name != "tensor_array"]
    assert all(n.outputs[0].shape is not None for n in merges)


def test_fixtures_are_what_tensorflow_computes() -> None:
    """Where TensorFlow is installed (with tf_keras for the RNN cells), every fixture is rebuilt in
    TensorFlow and its values compared with the checked-in ones."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("tf_keras") is None:
        pytest.skip("TensorFlow and tf_keras are not installed")
    tool = Path(__file__).resolve().parent.parent / "tools" / "tf_fixtures.py"
    done = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:]
