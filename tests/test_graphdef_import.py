"""GraphDef import: TensorFlow-produced graphs (tests/data/tf, written by tools/tf_fixtures.py) run on
Turnout's backends with TensorFlow's values. Needs the ``tf`` extra (installed by ``.[dev]``), not
TensorFlow."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import turnout as tn
from turnout.errors import UnsupportedError

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from turnout.graphdef import SUPPORTED_OPS, import_graph_def, parse_graph_def  # noqa: E402

DATA = Path(__file__).parent / "data" / "tf"
CASES = sorted(p.stem for p in DATA.glob("*.pbtxt"))

# Known limits, each with the error it raises (so the test fails when one is lifted, or changes).
KNOWN: dict[tuple[str, str], tuple[type[Exception], str]] = {}


def _run_case(case: str, backend: str, fallback: bool = True, **opts: object) -> None:
    meta = json.loads((DATA / f"{case}.json").read_text())
    imp = import_graph_def(DATA / f"{case}.pbtxt")
    sess = tn.Session(imp.graph, backend=backend, **({} if fallback else {"fallback": False}))
    for r in meta["runs"]:
        feeds = {imp.tensor(k): np.asarray(v) for k, v in r["feeds"].items()}
        fetches = [imp.tensor(f) for f in r["fetches"]] + [imp.node(t) for t in r.get("targets", [])]
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
    _run_case(case, backend)


@pytest.mark.parametrize("scheduler", ["lifo", "random"])
@pytest.mark.parametrize("case", ["grad_cond_in_while", "grad_nested_while", "grad_scan", "rnn_variables"])
def test_stack_pairing_does_not_depend_on_the_schedule(case: str, scheduler: str) -> None:
    """Pushes and pops meet through depth counters: any firing order gives TensorFlow's values."""
    _run_case(case, "reference", scheduler=scheduler, seed=7)


def test_fixtures_cover_the_issue_s_op_list() -> None:
    used = set()
    for case in CASES:
        used |= {nd.op for nd in parse_graph_def(DATA / f"{case}.pbtxt").node}
    for op in ["Enter", "Exit", "Switch", "Merge", "NextIteration", "LoopCond", "StackV2", "StackPushV2",
               "StackPopV2", "ControlTrigger", "TensorArrayV3", "TensorArrayWriteV3", "TensorArrayReadV3",
               "TensorArrayGatherV3", "TensorArrayScatterV3", "TensorArrayGradV3", "VarHandleOp",
               "ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp", "VarIsInitializedOp", "AddV2", "AddN",
               "Mul", "Sub", "MatMul", "Tanh", "TanhGrad", "Less", "GreaterEqual", "LogicalAnd", "Fill", "Range",
               "Reshape", "StridedSlice", "Pack", "Tile", "Sum", "Cast", "FloorMod", "NoOp", "Identity", "Const",
               "Placeholder",
               # TF1 model code: nn.dynamic_rnn's LSTM with a sequence_length, trained by tf.compat.v1.train
               "BiasAdd", "BiasAddGrad", "Split", "Slice", "ConcatOffset", "InvertPermutation", "Select", "Assert",
               "All", "Min", "Max", "ResourceApplyGradientDescent", "ResourceApplyAdam"]:
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
    for op, name in [("Qr", "decomp"), ("Svd", "svd1"), ("Svd", "svd2")]:
        nd = gd.node.add()
        nd.op, nd.name = op, name
    with pytest.raises(UnsupportedError) as e:
        import_graph_def(gd)
    msg = str(e.value)
    assert "Qr: 1 node(s), e.g. 'decomp'" in msg and "Svd: 2 node(s)" in msg


def test_dynamic_shape_argument_is_a_clear_error() -> None:
    gd = parse_graph_def(DATA / "while_simple.pbtxt")
    nd = gd.node.add()
    nd.op, nd.name = "Transpose", "r"
    nd.input.extend(["x", "x"])  # a run-time permutation
    nd.attr["T"].type = 1
    with pytest.raises(UnsupportedError, match='Transpose node "r": the permutation'):
        import_graph_def(gd)


def test_interop_page_lists_exactly_the_supported_ops() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "interop.rst").read_text()
    listed = set(re.findall(r"``(\w+)``", text.split("The supported ops", 1)[1].split("How the import", 1)[0]))
    assert listed - {"turnout", "SUPPORTED_OPS"} == set(SUPPORTED_OPS)
