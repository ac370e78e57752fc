"""Control flow v2 imports: GraphDefs whose loops and conditionals are TensorFlow's functional ops.

The TensorFlow-made fixture ``v2_while_cond_case`` (``StatelessWhile``, ``While`` nested in a loop
body, ``If`` with a stateful branch, ``Case`` out of range, a ``tf.function`` call) runs with
TensorFlow's values in ``tests/test_graphdef_import.py``, and ``v2_rnn_training`` trains through a
v2 loop's own gradient there; here: ``tn.gradients`` through the imported loops on every route, a
v2 loop's ``tf.gradients`` (TensorList accumulators) against the chain rule, what the import refuses
(a cond inside a differentiated v2 loop, whose list holds Optionals; a call of a function the library
lacks; a GraphDef of its own ``_Arg`` node; an unknown op inside a function a node calls, where one
in a function no node calls imports, as in TensorFlow; a battery of malformed functions built by
hand: recursion, wrong arity, branches that disagree), TensorLists outside their length, random ops
in function bodies, a property that mutated function GraphDefs give only Turnout errors, and the
table of ops with several output arguments against TensorFlow's registry where TensorFlow is
installed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
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
    """An op no rule imports inside a library function a node calls is listed with ``<function>/<node>``."""
    gd = _calls()
    _function(gd, "f", [("a", F32)], [("o", F32)], [("odd", "TensorListConcatLists", ["a"], {})],
              {"o": "odd:output:0"})
    with pytest.raises(tn.UnsupportedError, match="TensorListConcatLists: 1 node.*'f/odd'"):
        tn.import_graph_def(gd.SerializeToString())


def _frobnicate(gd: Any, name: str) -> Any:
    """A function of an op no rule imports (nor TensorFlow knows)."""
    return _function(gd, name, [("a", F32)], [("o", F32)], [("y", "FrobnicateV9", ["a"], {"T": F32})], {"o": "y:y:0"})


def test_a_function_no_node_calls_is_not_imported_whatever_its_ops() -> None:
    """TensorFlow imports a GraphDef whose library also holds a function no node calls, whatever its
    ops (a SavedModel's graph keeps every function it traced): so does Turnout, and the graph runs on
    every route. An unknown op in a function called only through another, or as a ``Case``'s branch
    (a list of functions), is still refused, naming it."""
    from turnout.graphdef import unsupported_ops

    gd = _calls(("f", "g"))
    _negate(gd, "g")
    _frobnicate(gd, "unused")
    assert unsupported_ops(gd) == {}
    imp = tn.import_graph_def(gd.SerializeToString())
    for route in ROUTES:
        got = run_on(route, imp.graph, imp.tensor("call:0"), {imp.tensor("x:0"): np.float32(1.5)})
        assert got == np.float32(-1.5), route
    deep = _calls(("f", "g"))
    _frobnicate(deep, "g")
    with pytest.raises(tn.UnsupportedError, match="FrobnicateV9: 1 node.*'g/y'"):
        tn.import_graph_def(deep.SerializeToString())
    branch = _conditional("Case", ["b0", "b1"], lambda gd: (_negate(gd, "b0"), _frobnicate(gd, "b1")))
    with pytest.raises(tn.UnsupportedError, match="FrobnicateV9: 1 node.*'b1/y'"):
        tn.import_graph_def(branch.SerializeToString())


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


# ---- malformed functions: a battery found by the bug hunt of 2026-12-06 -----------------------------
# Each case is a GraphDef built by hand with what no TensorFlow writes. Before, a recursive function
# ran Python out of stack (a RecursionError reported as a "malformed" node), a loop's body or cond
# returning the wrong number of values, a missing ``ret`` entry or a branch count mismatch read as a
# zip's or a dict's error (or, for a branch of no outputs, as a bool output), ``output_shapes`` longer
# than the loop's inputs was ignored, and a library holding two functions of one name used the last.

F32, I32, BOOL = 1, 3, 10


def _function(gd: Any, name: str, ins: list[tuple[str, int]], outs: list[tuple[str, int]],
              nodes: list[tuple[str, str, list[str], dict[str, Any]]], rets: dict[str, str]) -> Any:
    """Add function ``name`` to ``gd``'s library: its arguments and outputs (name, DataType enum),
    NodeDefs (name, op, inputs, attrs: an int is a type, a str a function, a float a scalar float32
    tensor) and its ``ret`` map."""
    f = gd.library.function.add()
    f.signature.name = name
    for names, args in ((ins, f.signature.input_arg), (outs, f.signature.output_arg)):
        for n, t in names:
            a = args.add()
            a.name, a.type = n, t
    for nm, op, inputs, attrs in nodes:
        nd = f.node_def.add()
        nd.name, nd.op = nm, op
        nd.input.extend(inputs)
        _set_attrs(nd, attrs)
    for k, v in rets.items():
        f.ret[k] = v
    return f


def _set_attrs(nd: Any, attrs: dict[str, Any]) -> None:
    for k, v in attrs.items():
        if isinstance(v, bool) or not isinstance(v, (int, str, float, list)):
            raise TypeError(k)
        if isinstance(v, int):
            nd.attr[k].type = v
        elif isinstance(v, str):
            nd.attr[k].func.name = v
        elif isinstance(v, float):
            t = nd.attr[k].tensor
            t.dtype = F32
            t.float_val.append(v)
            t.tensor_shape.SetInParent()
        elif v and isinstance(v[0], str):
            for s in v:
                nd.attr[k].list.func.add().name = s
        else:
            nd.attr[k].list.type.extend(v)


def _node(gd: Any, name: str, op: str, inputs: list[str], **attrs: Any) -> Any:
    nd = gd.node.add()
    nd.name, nd.op = name, op
    nd.input.extend(inputs)
    _set_attrs(nd, attrs)
    return nd


def _under_ten(arg: str) -> list[tuple[str, str, list[str], dict[str, Any]]]:
    """The NodeDefs of ``arg < 10`` (node ``lt``)."""
    return [("lim", "Const", [], {"dtype": F32, "value": 10.0}), ("lt", "Less", [arg, "lim:output:0"], {"T": F32})]


def _less_than_ten(gd: Any, name: str = "cond", nargs: int = 2, nouts: int = 1) -> Any:
    """A loop condition ``a0 < 10`` over ``nargs`` float32 arguments, returning it ``nouts`` times."""
    outs = [(f"p{k}", BOOL) for k in range(nouts)]
    return _function(gd, name, [(f"a{k}", F32) for k in range(nargs)], outs, _under_ten("a0"),
                     {n: "lt:z:0" for n, _ in outs})


def _step(gd: Any, name: str = "body", nouts: int = 2) -> Any:
    """A loop body ``(a0 + 1, a1 + a1)``, its first ``nouts`` outputs."""
    outs = [("o0", F32), ("o1", F32)][:nouts]
    rets = {"o0": "inc:z:0", "o1": "dbl:z:0"}
    nodes = [("one", "Const", [], {"dtype": F32, "value": 1.0}),
             ("inc", "AddV2", ["a0", "one:output:0"], {"T": F32}), ("dbl", "AddV2", ["a1", "a1"], {"T": F32})]
    return _function(gd, name, [("a0", F32), ("a1", F32)], outs, nodes, {n: rets[n] for n, _ in outs})


def _loop(shapes: Any = None, cond: Any = _less_than_ten, body: Any = _step) -> Any:
    """``x`` doubled while a counter from 0 stays under 10 (``StatelessWhile``; ``out`` is 1024 x)."""
    gd = _with_placeholder()
    _node(gd, "zero", "Const", [], dtype=F32, value=0.0)
    w = _node(gd, "w", "StatelessWhile", ["zero", "x"], T=[F32, F32], cond="cond", body="body")
    for dims in shapes or []:
        shape = w.attr["output_shapes"].list.shape.add()
        for d in dims:
            shape.dim.add().size = d
    _node(gd, "out", "Identity", ["w:1"], T=F32)
    cond(gd)
    body(gd)
    return gd


def _calling(callee: str, op: str = "PartitionedCall") -> tuple[str, str, list[str], dict[str, Any]]:
    return ("c", op, ["a"], {"f": callee, "Tin": [F32], "Tout": [F32]})


def _negate(gd: Any, name: str) -> Any:
    return _function(gd, name, [("a", F32)], [("o", F32)], [("y", "Neg", ["a"], {"T": F32})], {"o": "y:y:0"})


def _calls(*pairs: tuple[str, str]) -> Any:
    """A top-level call of ``f``; each (function, callee) pair a function that calls its callee."""
    gd = _with_placeholder()
    _node(gd, "call", "PartitionedCall", ["x"], f="f", Tin=[F32], Tout=[F32])
    for fname, callee in pairs:
        _function(gd, fname, [("a", F32)], [("o", F32)], [_calling(callee)], {"o": "c:output:0"})
    return gd


def _recursive_loop_body() -> Any:
    """A loop whose body is a loop over the same body."""
    gd = _with_placeholder()
    _node(gd, "w", "StatelessWhile", ["x"], T=[F32], cond="c", body="b")
    _function(gd, "c", [("a", F32)], [("p", BOOL)], _under_ten("a"), {"p": "lt:z:0"})
    inner = ("w2", "StatelessWhile", ["a"], {"T": [F32], "cond": "c", "body": "b"})
    _function(gd, "b", [("a", F32)], [("o", F32)], [inner], {"o": "w2:output:0"})
    return gd


def _conditional(op: str, branches: list[str], add: Any) -> Any:
    """``op`` (``StatelessIf`` or ``Case``) over ``branches`` of ``x``, the functions ``add(gd)`` makes."""
    gd = _with_placeholder()
    _node(gd, "p", "Placeholder", [], dtype=BOOL if op == "StatelessIf" else I32)
    if op == "StatelessIf":
        _node(gd, "c", op, ["p", "x"], Tcond=BOOL, Tin=[F32], Tout=[F32], then_branch=branches[0],
              else_branch=branches[1])
    else:
        _node(gd, "c", op, ["p", "x"], Tin=[F32], Tout=[F32], branches=branches)
    add(gd)
    return gd


def _two_outputs(gd: Any, name: str) -> Any:
    return _function(gd, name, [("a", F32)], [("o", F32), ("q", F32)], [("y", "Neg", ["a"], {"T": F32})],
                     {"o": "y:y:0", "q": "y:y:0"})


def _no_output(gd: Any, name: str) -> Any:
    return _function(gd, name, [("a", F32)], [], [("y", "Neg", ["a"], {"T": F32})], {})


def _to_int(gd: Any, name: str) -> Any:
    return _function(gd, name, [("a", F32)], [("o", I32)], [("y", "Cast", ["a"], {"SrcT": F32, "DstT": I32})],
                     {"o": "y:y:0"})


def _missing_ret(gd: Any) -> None:
    del _step(gd).ret["o1"]


def _ret_of_no_node(gd: Any) -> None:
    _step(gd).ret["o1"] = "nothere:z:0"


BAD_FUNCTIONS: list[tuple[str, Any, type, str]] = [
    ("a function calls itself", lambda: _calls(("f", "f")), tn.UnsupportedError, r"'f' calls itself \(f -> f\)"),
    ("two functions call each other", lambda: _calls(("f", "g"), ("g", "f")), tn.UnsupportedError,
     r"'f' calls itself \(f -> g -> f\)"),
    ("a loop's body is a loop over it", _recursive_loop_body, tn.UnsupportedError, r"'b' calls itself \(b -> b\)"),
    ("a branch calls its conditional's function",
     lambda: _conditional("StatelessIf", ["f", "e"], lambda gd: (_negate(gd, "e"), _function(
         gd, "f", [("a", F32)], [("o", F32)], [_calling("f")], {"o": "c:output:0"}))),
     tn.UnsupportedError, r"'f' calls itself"),
    ("a loop body returns one value for two", lambda: _loop(body=lambda gd: _step(gd, nouts=1)), tn.GraphBuildError,
     "function 'body' returns 1 values; a loop's body over 2 variables returns 2"),
    ("a loop cond returns two values", lambda: _loop(cond=lambda gd: _less_than_ten(gd, nouts=2)), tn.GraphBuildError,
     "function 'cond' returns 2 values; a loop's condition returns 1"),
    ("a loop cond returns nothing", lambda: _loop(cond=lambda gd: _less_than_ten(gd, nouts=0)), tn.GraphBuildError,
     "function 'cond' returns 0 values"),
    ("a loop cond takes one argument of two", lambda: _loop(cond=lambda gd: _less_than_ten(gd, nargs=1)),
     tn.UnsupportedError, "calls 'cond' with 2 arguments; it takes 1"),
    ("a ret map without an output", lambda: _loop(body=_missing_ret), tn.GraphBuildError,
     "function 'body': its ret map names no value for output 'o1'"),
    ("a ret of no node", lambda: _loop(body=_ret_of_no_node), tn.GraphBuildError,
     "function 'body' returns 'nothere:0', which none of its nodes outputs"),
    ("output_shapes of three for two", lambda: _loop(shapes=[[], [], []]), tn.GraphBuildError,
     "output_shapes holds 3 shapes for 2 loop variables"),
    ("output_shapes of one for two", lambda: _loop(shapes=[[]]), tn.GraphBuildError,
     "output_shapes holds 1 shapes for 2 loop variables"),
    ("output_shapes that disagree", lambda: _loop(shapes=[[2], []]), tn.ShapeError, "shape invariant"),
    ("a library of two functions of one name", lambda: _loop(body=lambda gd: (_step(gd), _step(gd))),
     tn.GraphBuildError, "defines function 'body' twice"),
    ("If branches of two and one outputs",
     lambda: _conditional("StatelessIf", ["t", "e"], lambda gd: (_two_outputs(gd, "t"), _negate(gd, "e"))),
     tn.GraphBuildError, "branch 'e' returns 1 values and branch 't' 2"),
    ("an If branch of no outputs",
     lambda: _conditional("StatelessIf", ["t", "e"], lambda gd: (_no_output(gd, "t"), _negate(gd, "e"))),
     tn.GraphBuildError, "branch 'e' returns 1 values and branch 't' 0"),
    ("If branches of float32 and int32",
     lambda: _conditional("StatelessIf", ["t", "e"], lambda gd: (_negate(gd, "t"), _to_int(gd, "e"))),
     tn.DTypeError, "output 0 of branch 'e' is of dtype int32, of branch 't' float32"),
    ("Case branches of float32 and int32",
     lambda: _conditional("Case", ["b0", "b1"], lambda gd: (_negate(gd, "b0"), _to_int(gd, "b1"))),
     tn.DTypeError, "output 0 of branch 'b1' is of dtype int32, of branch 'b0' float32"),
    ("Case branches of one and two outputs",
     lambda: _conditional("Case", ["b0", "b1"], lambda gd: (_negate(gd, "b0"), _two_outputs(gd, "b1"))),
     tn.GraphBuildError, "branch 'b1' returns 2 values and branch 'b0' 1"),
    ("a Case branch the library lacks", lambda: _conditional("Case", ["b0", "gone"], lambda gd: _negate(gd, "b0")),
     tn.UnsupportedError, "'gone', which the GraphDef's library lacks"),
    ("an unknown op in a loop body",
     lambda: _loop(body=lambda gd: setattr(_step(gd).node_def[1], "op", "FrobnicateV9")),
     tn.UnsupportedError, "FrobnicateV9: 1 node.*'body/inc'"),
]


@pytest.mark.parametrize("case,make,error,words", BAD_FUNCTIONS, ids=[c[0] for c in BAD_FUNCTIONS])
def test_malformed_functions_are_turnout_errors_naming_node_and_function(case: str, make: Any, error: type,
                                                                         words: str) -> None:
    """Each is the Turnout error of its kind, naming the function at fault and the op's node (but for
    the library's and the unsupported-op check's, which come before any node imports)."""
    with pytest.raises(error, match=words) as info:
        tn.import_graph_def(make().SerializeToString())
    assert case in BEFORE_ANY_NODE or 'node "' in str(info.value)


#: the cases refused before the import of the GraphDef's nodes
BEFORE_ANY_NODE = {"a library of two functions of one name", "an unknown op in a loop body"}


def test_the_battery_s_well_formed_twins_import_and_run() -> None:
    """The loop, the call chain and the Case the battery breaks run as written: 1024 x; -x; the last
    branch for an index out of range either way, as TensorFlow's Case, on every route."""
    x = np.float32(1.5)
    imp = tn.import_graph_def(_loop(shapes=[[], []]).SerializeToString())
    chain = _calls(("f", "g"))
    _negate(chain, "g")
    imp2 = tn.import_graph_def(chain.SerializeToString())
    case = _conditional("Case", ["b0", "b1", "b2"], lambda gd: (_negate(gd, "b0"), _negate(gd, "b1"), _function(
        gd, "b2", [("a", F32)], [("o", F32)], [("y", "Square", ["a"], {"T": F32})], {"o": "y:y:0"})))
    imp3 = tn.import_graph_def(case.SerializeToString())
    for route in ROUTES:
        assert run_on(route, imp.graph, imp.tensor("out:0"), {imp.tensor("x:0"): x}) == np.float32(1536.0), route
        assert run_on(route, imp2.graph, imp2.tensor("call:0"), {imp2.tensor("x:0"): x}) == -x, route
        got = [run_on(route, imp3.graph, imp3.tensor("c:0"), {imp3.tensor("x:0"): x, imp3.tensor("p:0"): np.int32(k)})
               for k in (0, 2, 3, -1)]
        assert got == [-x, x * x, x * x, x * x], route


def _int_const(gd: Any, name: str, value: Any) -> None:
    nd = _node(gd, name, "Const", [], dtype=I32)
    t = nd.attr["value"].tensor
    t.dtype = I32
    arr = np.asarray(value, np.int32)
    for d in arr.shape:
        t.tensor_shape.dim.add().size = d
    t.int_val.extend(arr.ravel().tolist())


def _lists() -> Any:
    """TensorLists of scalars at a GraphDef's top level: ``full`` = [x, 2x, 3x] (reserved, then set),
    ``g`` its element ``k``, ``s`` it with element ``k`` set to 0, ``popped`` = [x, x] pushed, less one."""
    gd = _with_placeholder()
    gd.node[0].attr["shape"].shape.SetInParent()
    _node(gd, "k", "Placeholder", [], dtype=I32)
    _int_const(gd, "es", [])
    _int_const(gd, "three", 3)
    _int_const(gd, "none", -1)
    _node(gd, "l", "TensorListReserve", ["es", "three"], element_dtype=F32, shape_type=I32)
    prev = "l"
    for j in range(3):
        _int_const(gd, f"c{j}", j)
        _int_const(gd, f"m{j}", j + 1)
        _node(gd, f"mf{j}", "Cast", [f"m{j}"], SrcT=I32, DstT=F32)
        _node(gd, f"v{j}", "Mul", ["x", f"mf{j}"], T=F32)
        _node(gd, f"s{j}", "TensorListSetItem", [prev, f"c{j}", f"v{j}"], element_dtype=F32)
        prev = f"s{j}"
    _node(gd, "g", "TensorListGetItem", ["s2", "k", "es"], element_dtype=F32)
    _node(gd, "zero", "ZerosLike", ["x"], T=F32)
    _node(gd, "s", "TensorListSetItem", ["s2", "k", "zero"], element_dtype=F32)
    _node(gd, "e", "EmptyTensorList", ["es", "none"], element_dtype=F32, shape_type=I32)
    _node(gd, "a", "TensorListPushBack", ["e", "x"], element_dtype=F32)
    _node(gd, "a2", "TensorListPushBack", ["a", "x"], element_dtype=F32)
    _node(gd, "p", "TensorListPopBack", ["a2", "es"], element_dtype=F32)
    for name, src in (("full", "s2"), ("set", "s"), ("popped", "p")):
        _node(gd, name, "TensorListStack", [src, "es"], element_dtype=F32).attr["num_elements"].i = -1
    return gd


@pytest.mark.parametrize("route", ROUTES)
def test_a_tensor_list_index_outside_its_length_and_a_popped_stack_are_refused(route: str) -> None:
    """Found by the bug hunt of 2026-12-06: a list's array grows at a write past its size and reads
    zeros past its writes, so ``TensorListGetItem`` of element 3 of a list of 3 read 0.0, a
    ``TensorListSetItem`` there made a stack of 4 under a length of 3, and the stack of a popped
    list held the popped element. Each is TensorFlow's error now (a KernelError naming the node),
    on every route; in range, the values are TensorFlow's."""
    imp = tn.import_graph_def(_lists().SerializeToString())
    x, k = imp.tensor("x:0"), imp.tensor("k:0")
    full, get, set_, popped = (imp.tensor(f"{n}:0") for n in ("full", "g", "set", "popped"))
    sess = ROUTES[route](imp.graph)
    got = sess.run([full, get, set_], {x: np.float32(1.5), k: np.int32(1)})
    np.testing.assert_array_equal(got[0], [1.5, 3.0, 4.5])
    assert got[1] == np.float32(3.0)
    np.testing.assert_array_equal(got[2], [1.5, 0.0, 4.5])
    with pytest.raises(tn.KernelError, match="g: Trying to access an element outside"):
        sess.run(get, {x: np.float32(1.5), k: np.int32(3)})
    with pytest.raises(tn.KernelError, match="s: Trying to modify an element outside"):
        sess.run(set_, {x: np.float32(1.5), k: np.int32(-1)})
    with pytest.raises(tn.KernelError, match="popped: a TensorList that was popped"):
        sess.run(popped, {x: np.float32(1.5)})


@pytest.mark.parametrize("dtype", [F32, I32])
def test_an_if_of_a_number_predicate_is_true_where_it_is_not_zero(dtype: int) -> None:
    """Found by the bug hunt of 2026-12-06: an If whose predicate is a float or int scalar (TensorFlow
    reads it as ``!= 0``) failed to import as "malformed" (the zero it compares with was built with
    a numpy attribute that does not exist); it takes the then branch where the predicate is not 0."""
    gd = _with_placeholder()
    _node(gd, "p", "Placeholder", [], dtype=dtype).attr["shape"].shape.SetInParent()
    _node(gd, "c", "StatelessIf", ["p", "x"], Tcond=dtype, Tin=[F32], Tout=[F32], then_branch="t", else_branch="e")
    _negate(gd, "t")
    _function(gd, "e", [("a", F32)], [("o", F32)], [("y", "Square", ["a"], {"T": F32})], {"o": "y:y:0"})
    imp = tn.import_graph_def(gd.SerializeToString())
    number = np.float32 if dtype == F32 else np.int32
    for route in ("reference", "fast"):
        sess = ROUTES[route](imp.graph)
        got = [sess.run(imp.tensor("c:0"), {imp.tensor("x:0"): np.float32(3.0), imp.tensor("p:0"): number(p)})
               for p in (2, 0, -1)]
        assert got == [-3.0, 9.0, -3.0], route


def _loop_of_draws() -> Any:
    """``While`` (stateful) of ``(i, y) -> (i + 1, y + u)`` for three steps from ``(0, x)``, ``u`` a
    ``RandomUniform`` scalar of seeds (1, 2) drawn in the body."""
    gd = _with_placeholder()
    gd.node[0].attr["shape"].shape.SetInParent()
    _node(gd, "zero", "Const", [], dtype=F32, value=0.0)
    _node(gd, "w", "While", ["zero", "x"], T=[F32, F32], cond="cond", body="body")
    f = _function(gd, "cond", [("a0", F32), ("a1", F32)], [("p", BOOL)], _under_ten("a0"), {"p": "lt:z:0"})
    f.node_def[0].attr["value"].tensor.float_val[0] = 3.0
    body = _step(gd)
    shape = body.node_def.add()
    shape.name, shape.op = "shape", "Const"
    shape.attr["dtype"].type = I32
    shape.attr["value"].tensor.dtype = I32
    shape.attr["value"].tensor.tensor_shape.dim.add().size = 0
    u = body.node_def.add()
    u.name, u.op = "u", "RandomUniform"
    u.input.append("shape:output:0")
    u.attr["dtype"].type, u.attr["T"].type, u.attr["seed"].i, u.attr["seed2"].i = F32, I32, 1, 2
    body.node_def[2].op = "AddV2"
    body.node_def[2].input[:] = ["a1", "u:output:0"]
    _node(gd, "out", "Identity", ["w:1"], T=F32)
    return gd


@pytest.mark.parametrize("route", ROUTES)
def test_a_random_op_in_a_v2_loop_body_draws_tensorflow_s_stream(route: str) -> None:
    """Found by the bug hunt of 2026-12-06: a random op inside a v2 loop's body got the token loop
    variable of a TensorFlow v1 frame, built by hand beside the builder's own, and every run failed
    validation (a Switch reading two frames). It takes the builder's token now, as ``tn.random`` in a
    body written by hand: the ``k``-th iteration draws TensorFlow's ``k``-th chunk, across runs too."""
    from turnout import tf_random

    imp = tn.import_graph_def(_loop_of_draws().SerializeToString())
    sess = ROUTES[route](imp.graph)
    seeds = tf_random.stream_seeds(1, 2)
    draws = [tf_random.uniform(*seeds, 1, np.dtype(np.float32), 256 * k)[0] for k in range(6)]
    for run in range(2):
        want = np.float32(0.5)
        for u in draws[3 * run: 3 * run + 3]:
            want = np.float32(want + u)
        assert sess.run(imp.tensor("out:0"), {imp.tensor("x:0"): np.float32(0.5)}) == want


def test_an_output_shape_of_unknown_rank_lets_a_v2_loop_variable_change_rank() -> None:
    """Found by the bug hunt of 2026-12-06: TensorFlow records a loop variable relaxed to any shape
    (``shape_invariants=[tf.TensorShape(None)]``) as an ``output_shapes`` entry of unknown rank, which
    the import read as "no invariant", so a body that stacks the variable was a ShapeError. It is
    ``tn.ANY_SHAPE`` now: ``y <- [y, y]`` three times from a scalar is a ``[2, 2, 2]`` of it."""
    def stacking(gd: Any) -> None:
        body = _step(gd)
        body.node_def[2].op = "Pack"
        body.node_def[2].attr["N"].i = 2
    gd = _loop(shapes=[[], []], body=stacking)
    gd.node[0].attr["shape"].shape.SetInParent()  # (x: a scalar)
    gd.node[2].attr["output_shapes"].list.shape[1].unknown_rank = True  # (node 2: the While)
    gd.library.function[0].node_def[0].attr["value"].tensor.float_val[0] = 3.0  # (cond: a0 < 3)
    imp = tn.import_graph_def(gd.SerializeToString())
    for route in ("reference", "fast"):
        got = run_on(route, imp.graph, imp.tensor("out:0"), {imp.tensor("x:0"): np.float32(1.5)})
        np.testing.assert_array_equal(got, np.full((2, 2, 2), 1.5, np.float32), err_msg=route)


def _v1_loop_calling(body: list[tuple[str, str, list[str], dict[str, Any]]], ret: str) -> Any:
    """A TensorFlow v1 while loop (Turnout's own, exported) of ``y <- f(y)`` three times from ``x``,
    ``f`` a ``PartitionedCall`` of a function of ``body`` NodeDefs returning ``ret``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        _, y = tn.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, tn.identity(y, name="hook")), [tn.constant(0), x])
        tn.identity(y, name="out")
    gd = tn.export_graph_def(g).graph_def
    (hook,) = [nd for nd in gd.node if nd.name.endswith("/hook")]
    hook.op = "PartitionedCall"
    del hook.attr["T"]
    _set_attrs(hook, {"f": "f", "Tin": [F32], "Tout": [F32]})
    _function(gd, "f", [("a", F32)], [("o", F32)], body, {"o": ret})
    return gd


@pytest.mark.parametrize("route", ["reference", "fast"])
def test_a_call_in_a_v1_loop_makes_its_constants_and_draws_in_the_loop(route: str) -> None:
    """Found by the bug hunt of 2026-12-06: a ``PartitionedCall`` inside a TensorFlow v1 loop inlined
    its function's constants at the root, outside the loop's frame, and every run failed validation.
    They wait for the call's argument now, as TensorFlow's inliner makes them wait for the call: ``y
    + 0.25`` three times, and a ``RandomUniform`` in the function draws TensorFlow's stream, one
    chunk per iteration."""
    from turnout import tf_random

    plus = _v1_loop_calling([("c", "Const", [], {"dtype": F32, "value": 0.25}),
                             ("y", "AddV2", ["a", "c:output:0"], {"T": F32})], "y:z:0")
    imp = tn.import_graph_def(plus.SerializeToString())
    assert run_on(route, imp.graph, imp.tensor("out:0"), {imp.tensor("x:0"): np.float32(0.5)}) == np.float32(1.25)
    draws = _v1_loop_calling([("s", "Const", [], {"dtype": I32}), ("u", "RandomUniform", ["s:output:0"], {
        "dtype": F32, "T": I32}), ("y", "AddV2", ["a", "u:output:0"], {"T": F32})], "y:z:0")
    shape = draws.library.function[0].node_def[0].attr["value"].tensor
    shape.dtype = I32
    shape.tensor_shape.dim.add().size = 0
    u = draws.library.function[0].node_def[1]
    u.attr["seed"].i, u.attr["seed2"].i = 1, 2
    imp = tn.import_graph_def(draws.SerializeToString())
    want = np.float32(0.5)
    for k in range(3):
        want = np.float32(want + tf_random.uniform(*tf_random.stream_seeds(1, 2), 1, np.dtype(np.float32), 256 * k)[0])
    assert run_on(route, imp.graph, imp.tensor("out:0"), {imp.tensor("x:0"): np.float32(0.5)}) == want


def test_a_tensor_list_where_a_tensor_is_due_is_a_turnout_error() -> None:
    """Found by the bug hunt's fuzzing of function GraphDefs (2026-12-06): an ``AddV2`` reading a
    TensorList handle stopped the import on a bare ``assert`` (Python's ``AssertionError``); it is an
    UnsupportedError naming the node and what it read."""
    gd = _lists()
    _node(gd, "bad", "AddV2", ["l", "x"], T=F32)
    with pytest.raises(tn.UnsupportedError, match='AddV2 node "bad": an input is a TensorFlow stack or TensorList'):
        tn.import_graph_def(gd.SerializeToString())


# ---- a property: mutated function GraphDefs give only Turnout errors --------------------------------
#: ops a mutation may put in a node's place
_OPS = ["Identity", "AddV2", "Neg", "Const", "StatelessWhile", "PartitionedCall", "StatelessIf", "Case",
        "TensorListGetItem", "TensorListSetItem", "Pack", "RandomUniform", "Less", "Cast"]


def _bases() -> list[Any]:
    """Well-formed GraphDefs of every construct above: a loop, a call chain, a Case, an If, lists, a
    loop of draws."""
    chain = _calls(("f", "g"))
    _negate(chain, "g")
    return [_loop(shapes=[[], []]), chain, _lists(), _loop_of_draws(),
            _conditional("Case", ["b0", "b1"], lambda gd: (_negate(gd, "b0"), _negate(gd, "b1"))),
            _conditional("StatelessIf", ["b0", "b1"], lambda gd: (_negate(gd, "b0"), _negate(gd, "b1")))]


def _mutate(gd: Any, rng: Any) -> None:
    """One structural mutation of ``gd``'s functions: a node's op or input, a node or ``ret`` entry
    removed or redirected, a function attribute naming another function (so recursion too), an
    argument's type, an argument added or dropped, a loop's ``output_shapes``; with no functions, a
    top-level node's op."""
    if not gd.library.function:
        rng.choice(list(gd.node)).op = rng.choice(_OPS)
        return
    f = rng.choice(list(gd.library.function))
    nds = list(f.node_def)
    refs = [a.name for a in f.signature.input_arg] + [f"{n.name}:{rng.choice(['output', 'z', 'y'])}:{rng.randint(0, 1)}"
                                                     for n in nds]
    kind = rng.choice(["op", "input", "drop", "ret", "func", "type", "arg", "shape"])
    if kind == "op" and nds:
        rng.choice(nds).op = rng.choice(_OPS)
    elif kind == "input" and nds:
        rng.choice(nds).input.append(rng.choice(refs))
    elif kind == "drop" and nds:
        f.node_def.remove(rng.choice(nds))
    elif kind == "ret" and f.ret:
        key = rng.choice(list(f.ret))
        if rng.random() < 0.5:
            del f.ret[key]
        else:
            f.ret[key] = rng.choice(refs)
    elif kind == "func":
        holders = [n.attr[k] for n in [*nds, *gd.node] for k in n.attr if n.attr[k].HasField("func")]
        if holders:
            rng.choice(holders).func.name = rng.choice([g.signature.name for g in gd.library.function] + ["nope"])
    elif kind == "type":
        args = [*f.signature.input_arg, *f.signature.output_arg]
        if args:
            rng.choice(args).type = rng.choice([1, 2, 3, 9, 10, 20, 21, 7, 99])
    elif kind == "arg":
        if f.signature.input_arg and rng.random() < 0.5:
            del f.signature.input_arg[-1]
        else:
            a = f.signature.input_arg.add()
            a.name, a.type = "extra", F32
    else:
        shapes = rng.choice(list(gd.node)).attr["output_shapes"].list
        if shapes.shape and rng.random() < 0.5:
            del shapes.shape[-1]
        else:
            shapes.shape.add().dim.add().size = rng.choice([-1, 0, 2])


@settings(max_examples=max(1, settings.default.max_examples // 2), deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 3))
@example(544568, 1)  # an AddV2 reading a TensorList: a bare assert in the rule (found by the nightly profile)
def test_mutated_function_graph_defs_give_only_turnout_errors(seed: int, mutations: int) -> None:
    """Any GraphDef of the constructs above, its functions mutated (found the ``assert`` a rule read a
    TensorList with, test_a_tensor_list_where_a_tensor_is_due_is_a_turnout_error), imports and runs
    on the reference to a value or a Turnout error: never another exception, never a hang."""
    import random

    rng = random.Random(seed)
    gd = rng.choice(_bases())
    for _ in range(mutations):
        _mutate(gd, rng)
    try:
        imp = tn.import_graph_def(gd.SerializeToString())
    except tn.TurnoutError:
        return
    g = imp.graph
    fetch = [t for n in g.nodes for t in n.outputs if not t.dtype.is_opaque][-1:]
    feeds = {t: np.ones([d or 1 for d in (t.shape or ())], t.dtype.numpy)
             for n in g.nodes if n.op == "Placeholder" for t in n.outputs if not t.dtype.is_opaque}
    try:
        tn.Session(g).run(fetch, feeds, max_seconds=2.0, max_tensor_bytes=2**24)
    except tn.TurnoutError:
        pass
