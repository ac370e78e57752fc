"""Control flow v2 imports: GraphDefs whose loops and conditionals are TensorFlow's functional ops.

The TensorFlow-made fixture ``v2_while_cond_case`` (``StatelessWhile``, ``While`` nested in a loop
body, ``If`` with a stateful branch, ``Case`` out of range, a ``tf.function`` call) runs with
TensorFlow's values in ``tests/test_graphdef_import.py``, and ``v2_rnn_training`` trains through a
v2 loop's own gradient there; here: ``tn.gradients`` through the imported loops on every route, a
v2 loop's ``tf.gradients`` (TensorList accumulators) against the chain rule, what the import refuses
(a cond inside a differentiated v2 loop, whose list holds Optionals; a call of a function the library
lacks; a GraphDef of its own ``_Arg`` node; an unknown op inside a function), and the table of ops
with several output arguments against TensorFlow's registry where TensorFlow is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from route_table import ROUTES, run_on

import turnout as tn

pytest.importorskip("google.protobuf")

DATA = Path(__file__).resolve().parent / "data"


def test_gradients_through_an_imported_v2_loop_match_the_closed_form() -> None:
    """The fixture's loops, conds, case and call import as Turnout's builders, so ``tn.gradients``
    differentiates their output on every route (the small-step system aside: slow on this nest), all
    agreeing, and agreeing with finite differences of the reference's forward values."""
    imp = tn.import_graph_def(DATA / "tf" / "v2_while_cond_case.pbtxt")
    x = imp.tensor("x:0")
    out = imp.tensor("out:0")
    (dx,) = tn.gradients(tn.reduce_sum(out), [x])
    xv = np.asarray([0.5, -1.0, 2.0], np.float32)
    feeds = {x: xv, imp.tensor("k:0"): np.int32(0)}
    want = None
    for route in ROUTES:
        if route == "smallstep":
            continue  # (the loop nest with its gradient runs there too, slowly: the reference stands for it)
        got = run_on(route, imp.graph, [out, dx], feeds)
        if want is None:
            want = got
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5)
    eps = 1e-2  # finite differences of the reference's values, in float32
    fd = []
    sess = tn.Session(imp.graph)
    for k in range(3):
        hi, lo = xv.copy(), xv.copy()
        hi[k] += eps
        lo[k] -= eps
        fd.append((float(np.sum(sess.run(out, {**feeds, x: hi}))) - float(np.sum(sess.run(out, {**feeds, x: lo}))))
                  / (2 * eps))
    assert want is not None
    np.testing.assert_allclose(want[1], fd, rtol=2e-2, atol=2e-2)


def test_a_v2_loop_s_own_gradient_imports_and_matches_the_closed_form() -> None:
    """``tf.gradients`` of a v2 loop (``y <- sin(y) y``, three steps) saves its forward values on
    TensorLists (``EmptyTensorList``, ``TensorListPushBack``, ``TensorListPopBack``), which import as
    TensorArrays with a length: the imported gradient is the chain rule's on every route."""
    imp = tn.import_graph_def(DATA / "v2_while_gradient.pbtxt")
    xv = np.asarray([0.5, -1.0, 2.0, 0.0], np.float32)
    y, d = xv.astype(np.float64), np.ones(4)
    for _ in range(3):
        d, y = d * (np.cos(y) * y + np.sin(y)), np.sin(y) * y
    for route in ROUTES:
        got = run_on(route, imp.graph, imp.tensor("dx:0"), {imp.tensor("x:0"): xv})
        np.testing.assert_allclose(got, d, rtol=1e-5, atol=1e-6, err_msg=route)


def test_a_cond_inside_a_differentiated_v2_loop_matches_the_chain_rule() -> None:
    """The gradient of a v2 loop around a cond (``y <- sin(y) y`` where ``sum(y) > 0``, else ``y``)
    saves the cond's Optionals on a list of variant elements: each is its value, or a stand-in where
    the branch that ran did not compute it, so the list's elements may differ in shape (ragged writes:
    the fast backend runs it on the interpreter). The imported gradient is the chain rule's, with
    the branch each step took."""
    imp = tn.import_graph_def(DATA / "v2_cond_in_loop_gradient.pbtxt")
    for xv in (np.asarray([0.5, -1.0, 2.0], np.float32), np.asarray([-0.5, -1.0, 0.75], np.float32)):
        y, d = xv.astype(np.float64), np.ones(3)
        for _ in range(3):
            if y.sum() > 0:
                d, y = d * (np.cos(y) * y + np.sin(y)), np.sin(y) * y
        for route in ROUTES:
            got = run_on(route, imp.graph, imp.tensor("dx:0"), {imp.tensor("x:0"): xv})
            np.testing.assert_allclose(got, d, rtol=1e-5, atol=1e-6, err_msg=route)


def test_a_tensor_list_op_of_an_unsupported_kind_is_listed_with_its_function() -> None:
    """An op no rule imports inside a library function is listed with ``<function>/<node>``."""
    from turnout.graphdef import protos

    gd = protos.pb().graph_pb2.GraphDef()
    f = gd.library.function.add()
    f.signature.name = "f"
    n = f.node_def.add()
    n.name, n.op = "odd", "TensorListConcatLists"
    with pytest.raises(tn.UnsupportedError, match="TensorListConcatLists: 1 node.*'f/odd'"):
        tn.import_graph_def(gd.SerializeToString())


def _with_placeholder() -> Any:
    """A GraphDef of one float32 Placeholder ``x``."""
    from turnout.graphdef import protos

    gd = protos.pb().graph_pb2.GraphDef()
    x = gd.node.add()
    x.name, x.op = "x", "Placeholder"
    x.attr["dtype"].type = 1
    return gd


def _one_call(fname: str, library: bool) -> bytes:
    gd = _with_placeholder()
    call = gd.node.add()
    call.name, call.op = "call", "PartitionedCall"
    call.input.append("x")
    call.attr["f"].func.name = fname
    call.attr["Tin"].list.type.append(1)
    call.attr["Tout"].list.type.append(1)
    if library:
        f = gd.library.function.add()
        f.signature.name = "double"
        a = f.signature.input_arg.add()
        a.name, a.type = "a", 1
        o = f.signature.output_arg.add()
        o.name, o.type = "y", 1
        n = f.node_def.add()
        n.name, n.op = "y", "AddV2"
        n.input.extend(["a", "a"])
        n.attr["T"].type = 1
        f.ret["y"] = "y:z:0"
    return gd.SerializeToString()


def test_a_function_call_imports_in_place_and_a_missing_function_is_refused() -> None:
    imp = tn.import_graph_def(_one_call("double", library=True))
    for route in ROUTES:
        got = run_on(route, imp.graph, imp.tensor("call:0"), {imp.tensor("x:0"): np.float32(1.25)})
        assert got == np.float32(2.5), route
    with pytest.raises(tn.UnsupportedError, match="'missing', which the GraphDef's library lacks"):
        tn.import_graph_def(_one_call("missing", library=True))


def test_a_graph_def_of_its_own_arg_node_is_refused() -> None:
    """``_Arg`` is how a function body's arguments import, not an op of a GraphDef."""
    from turnout.graphdef import protos

    gd = protos.pb().graph_pb2.GraphDef()
    n = gd.node.add()
    n.name, n.op = "a", "_Arg"
    with pytest.raises(tn.UnsupportedError, match="_Arg"):
        tn.import_graph_def(gd.SerializeToString())
    from turnout.graphdef import SUPPORTED_OPS

    assert "_Arg" not in SUPPORTED_OPS


TF_PYTHON = os.environ.get("TURNOUT_TF_PYTHON")


@pytest.mark.skipif(not TF_PYTHON, reason="TURNOUT_TF_PYTHON names no Python with TensorFlow (optional)")
def test_output_args_table_is_tensorflow_s() -> None:
    """Every supported op whose outputs are several arguments is in ``OUTPUT_ARGS`` with TensorFlow's
    names in order, and none has a list-valued argument beside another (so ``node:arg:k`` is the
    argument's position plus ``k``)."""
    from turnout.graphdef import SUPPORTED_OPS
    from turnout.graphdef.import_functions import OUTPUT_ARGS

    script = (
        "import json, sys\n"
        "from tensorflow.python.framework import op_def_registry\n"
        "out = {}\n"
        "for o in json.loads(sys.argv[1]):\n"
        "    d = op_def_registry.get(o)\n"
        "    if d is not None:\n"
        "        out[o] = [[a.name, bool(a.number_attr or a.type_list_attr)] for a in d.output_arg]\n"
        "print(json.dumps(out))\n")
    res = subprocess.run([str(TF_PYTHON), "-c", script, json.dumps(sorted(SUPPORTED_OPS))], capture_output=True,
                         text=True, timeout=600, check=True)
    registry = json.loads(res.stdout.strip().splitlines()[-1])
    for op, args in registry.items():
        if len(args) > 1:
            assert OUTPUT_ARGS.get(op) == tuple(a[0] for a in args), op
            assert not any(a[1] for a in args), op
        else:
            assert op not in OUTPUT_ARGS, op


def test_a_tensor_array_write_that_overwrites_sets_its_slot_on_every_route() -> None:
    """``TensorArrayWrite`` with ``overwrite`` (an imported TensorList's set) replaces what the slot
    held, on every route, where a plain write's second write to a slot is a KernelError; it has no
    gradient and no TensorFlow v1 form (both refused, never wrong)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        ta = tn.TensorArray(tn.float32, size=2).write(0, x).write(1, x * 2.0)
        t = ta.tensor
        over = g.create_node("TensorArrayWrite", [t, tn.constant(1), x * 5.0], {"overwrite": True}).outputs[0]
        twice = g.create_node("TensorArrayWrite", [t, tn.constant(1), x * 5.0]).outputs[0]
        stacked = g.create_node("TensorArrayStack", [over]).outputs[0]
        bad = g.create_node("TensorArrayStack", [twice]).outputs[0]
    for route in ROUTES:
        np.testing.assert_array_equal(run_on(route, g, stacked, {x: np.float32(1.5)}), [1.5, 7.5], err_msg=route)
        with pytest.raises(tn.KernelError, match="already written"):
            run_on(route, g, bad, {x: np.float32(1.5)})
    with g.as_default(), pytest.raises(tn.GradientError, match="overwrite"):
        tn.gradients(tn.reduce_sum(stacked), [x])
    with pytest.raises(tn.UnsupportedError, match="overwrites or holds"):
        tn.export_graph_def(g)


def test_a_qr_outside_an_initializer_is_refused() -> None:
    """``Qr`` and ``DiagPart`` are computed at import for ``orthogonal_initializer`` only (fixture
    ``orthogonal_init_rnn``); in the run graph they are an UnsupportedError naming the node."""
    gd = _with_placeholder()
    q = gd.node.add()
    q.name, q.op = "qr", "Qr"
    q.input.append("x")
    q.attr["T"].type = 1
    with pytest.raises(tn.UnsupportedError, match='"qr".*only in a variable\'s initializer'):
        tn.import_graph_def(gd.SerializeToString())
