"""Control flow v2 imports: GraphDefs whose loops and conditionals are TensorFlow's functional ops.

The TensorFlow-made fixture ``v2_while_cond_case`` (``StatelessWhile``, ``While`` nested in a loop
body, ``If`` with a stateful branch, ``Case`` out of range, a ``tf.function`` call) runs with
TensorFlow's values in ``tests/test_graphdef_import.py``; here: ``tn.gradients`` through its imported
loop on every route against the closed form, what the import refuses (a v2 loop's own gradient, whose
TensorList ops Turnout lacks; a call of a function the library lacks; a GraphDef of its own ``_Arg``
node), and the table of ops with several output arguments against TensorFlow's registry where
TensorFlow is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

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


def test_a_v2_loop_s_own_gradient_is_refused_naming_its_tensor_list_ops() -> None:
    """``tf.gradients`` of a v2 loop saves its values in TensorLists (``EmptyTensorList``,
    ``TensorListPushBack``, ``TensorListPopBack``), which Turnout does not import: one error names
    each, with the function body that holds it."""
    with pytest.raises(tn.UnsupportedError) as e:
        tn.import_graph_def(DATA / "v2_while_gradient.pbtxt")
    msg = str(e.value)
    for op in ("EmptyTensorList", "TensorListPushBack", "TensorListPopBack"):
        assert op in msg
    assert "/" in msg.split("TensorListPushBack", 1)[1].split("\n", 1)[0]  # <function>/<node>


def _one_call(fname: str, library: bool) -> bytes:
    from turnout.graphdef import protos

    pb = protos.pb()
    gd = pb.graph_pb2.GraphDef()
    x = gd.node.add()
    x.name, x.op = "x", "Placeholder"
    x.attr["dtype"].type = 1
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
