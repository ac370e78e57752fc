"""Bad inputs, third battery: each a mistake that reached the user as a raw Python error or as a silent
wrong answer, now a Turnout error naming the op and the argument, the same on every backend.

Found by a battery of bad inputs against what users touch (files, ``Session.run``, the builders,
``turnout.graph_replace``, ``turnout.jax.while_loop``); the cases the earlier batteries
(``tests/test_bad_inputs.py``, ``tests/test_only_turnout_errors.py``, ``tests/test_bad_files.py``)
already cover are not repeated. Each class of mistake is fixed where its kind of value enters:

* a dict whose keys cannot be ordered (``{1: a, "b": b}``): ``nest.flatten`` sorts a dict's keys, and
  Python's ``TypeError`` of the sort reached the user from ``Session.run``'s fetches, a loop's
  variables, a branch's outputs and ``tn.gradients``' ``ys``; now an ``ArgumentError`` naming the keys;
* a TensorFlow v2 function whose values disagree with the types it declares (its signature's
  arguments and outputs, the calling op's ``Tin`` / ``Tout`` / ``T``): the import took the body's
  dtypes, so a float32 output computed as int32 ran, silently, as an int32; now a ``DTypeError`` at
  import naming the function, the argument and the node (``graphdef.import_functions``);
* a GraphDef ``Const`` whose ``dtype`` attr disagrees with its tensor's: the tensor's dtype won,
  silently (TensorFlow refuses it, "Type mismatch between value and dtype"); now a ``DTypeError``;
* a GraphDef node with more or fewer data inputs than its op takes (an ``AddV2`` of one input ran as
  an ``Identity``; an ``Identity`` of two read the first; a ``Pack`` whose ``N`` says 3 stacked 2):
  each ran, silently; now a ``GraphBuildError`` naming the node, its op and the count
  (``graphdef.arity``); and an element-wise math node whose ``T`` attr is not the dtype of its inputs
  (a ``Neg`` declared int32 reading a float32) computed in the inputs' dtype; now a ``DTypeError``;
* ``turnout.graph_replace.replaced`` given fetches or a map of the wrong kind: Python's
  ``AttributeError``; now an ``ArgumentError`` naming the parameter;
* ``turnout.jax.while_loop`` given a function of the wrong arity, a state of no arrays, or an array of
  Python objects: Python's or JAX's ``TypeError``; now an ``ArgumentError``;
* ``scan``, ``foldl``, ``foldr`` and ``map_fn`` given a function whose output does not fit the
  accumulator (its structure, dtype or shape), or ``elems`` of no leading dimension: the error named
  an inner op (``TensorArrayWrite``, ``while_loop "foldl"``) or no builder at all; now each names
  the builder and what of it is at fault;
* ``None`` where a dtype is due (``tn.placeholder(None, [])``, ``tn.cast(x, None)``,
  ``tn.zeros(shape, dtype=None)``): numpy reads ``None`` as float64, so each made a float64 tensor,
  silently; now refused (``dtypes.as_dtype``);
* ``tn.memory_report(graph, platform=...)`` given a platform name it does not know (``"gpus"``,
  ``"GPU"``): planned as a platform without host memory, so the report said what a CPU would do,
  silently; now an ``ArgumentError`` listing the names;
* the checkpoint functions given a session that is none, names that are no list of strings (a string
  was read as a list of its characters), values or a name map that are no mapping, or a value numpy
  cannot make an array of: Python's ``AttributeError``, ``TypeError`` or ``ValueError``; now an
  ``ArgumentError`` naming the function and the parameter.

One finding lives where its class is tested already: a runaway loop on the partitioned reference
executor named the partitioner's control-loop ``Enter``, without the user's source line
(``tests/test_error_parity.py``, which exempted that backend, now checks it there too).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_only_turnout_errors import ALL_BACKENDS, session

import turnout as tn
from turnout import checkpoint


# ---- 1. a dict whose keys cannot be ordered ----------------------------------------------------------
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_fetches_in_a_dict_of_unorderable_keys_are_an_argument_error(backend: str) -> None:
    """``{1: y, "b": y}``: a dict's leaves are taken in the order of its sorted keys, which ``1`` and
    ``"b"`` have none of; the error names the keys, on every backend, before anything runs."""
    g = tn.Graph()
    with g.as_default():
        y = tn.constant(2.0)
    words = r"Session.run: fetches: a dict of keys 1 and 'b' cannot be ordered"
    with session(g, backend) as s, pytest.raises(tn.ArgumentError, match=words):
        s.run({1: y, "b": y})


def _map_over_dict() -> Any:
    return tn.map_fn(lambda d: d[1] + d["b"], {1: tn.constant([1]), "b": tn.constant([2])})


def _loop_over_dict() -> Any:
    return tn.while_loop(lambda d: d[1] < 3, lambda d: {1: d[1] + 1, "b": d["b"]},
                         [{1: tn.constant(0), "b": tn.constant(0)}])


def _cond_of_dict() -> Any:
    return tn.cond(tn.constant(True), lambda: {1: tn.constant(0), "b": tn.constant(1)},
                   lambda: {1: tn.constant(2), "b": tn.constant(3)})


def _gradient_of_dict() -> Any:
    x = tn.placeholder(tn.float32, [], name="x")
    return tn.gradients({1: x * 2.0, "b": x}, [x])


UNORDERABLE: list[tuple[str, Callable[[], Any], str]] = [
    ("while_loop", _loop_over_dict, "while_loop: loop_vars"),
    ("cond", _cond_of_dict, 'cond "cond": the output of true_fn'),
    ("gradients", _gradient_of_dict, "gradients: ys"),
    ("map_fn", _map_over_dict, "map_fn: elems"),
]


@pytest.mark.parametrize("case,build,where", UNORDERABLE, ids=[c[0] for c in UNORDERABLE])
def test_a_builder_given_a_dict_of_unorderable_keys_names_them(case: str, build: Callable[[], Any], where: str) -> None:
    with tn.Graph().as_default(), pytest.raises(tn.ArgumentError) as info:
        build()
    assert str(info.value).startswith(f"{where}: a dict of keys 1 and 'b' cannot be ordered"), str(info.value)


def test_a_dict_of_keys_of_one_kind_still_flattens_in_sorted_order() -> None:
    """The twin that must keep working: string keys, taken sorted (``"a"`` before ``"b"``)."""
    g = tn.Graph()
    with g.as_default():
        out = tn.while_loop(lambda d: d["b"] < 3, lambda d: {"b": d["b"] + 1, "a": d["a"] * 2},
                            [{"b": tn.constant(0), "a": tn.constant(1)}])
    got = tn.Session(g).run(out)
    assert (int(got[0]["a"]), int(got[0]["b"])) == (8, 3)


# ---- 2. a TensorFlow v2 function whose values disagree with the types it declares ---------------------
F32, I32, BOOL, I64 = 1, 3, 10, 9


def _graph_def() -> Any:
    """An empty GraphDef message (the ``tf`` extra's protobufs)."""
    from turnout.graphdef import protos

    return protos.pb().graph_pb2.GraphDef()


def _node(gd: Any, name: str, op: str, inputs: list[str], types: dict[str, int] | None = None,
          lists: dict[str, list[int]] | None = None, funcs: dict[str, str | list[str]] | None = None) -> Any:
    """A NodeDef of ``gd``: its type attrs, type-list attrs and function attrs."""
    nd = gd.node.add()
    nd.name, nd.op = name, op
    nd.input.extend(inputs)
    for k, v in (types or {}).items():
        nd.attr[k].type = v
    for k, vs in (lists or {}).items():
        nd.attr[k].list.type.extend(vs)
    for k, f in (funcs or {}).items():
        if isinstance(f, list):
            for name_ in f:
                nd.attr[k].list.func.add().name = name_
        else:
            nd.attr[k].func.name = f
    return nd


def _function(gd: Any, name: str, arg: int, out: int, body_op: str) -> None:
    """Function ``name(a: arg) -> o: out`` of one node: ``Neg`` of ``a``, or ``Cast`` of a float32 ``a``
    to int32 (the body's own dtypes, whatever the signature declares)."""
    f = gd.library.function.add()
    f.signature.name = name
    a = f.signature.input_arg.add()
    a.name, a.type = "a", arg
    o = f.signature.output_arg.add()
    o.name, o.type = "o", out
    nd = f.node_def.add()
    nd.name, nd.op = "y", body_op
    nd.input.append("a")
    if body_op == "Cast":
        nd.attr["SrcT"].type, nd.attr["DstT"].type = F32, I32
    else:
        nd.attr["T"].type = F32
    f.ret["o"] = "y:y:0"


def _call(tout: int = F32, tin: int = F32, arg: int = F32, out: int = F32, body_op: str = "Neg") -> Any:
    """``call = PartitionedCall[f](x)`` of a float32 placeholder ``x``."""
    gd = _graph_def()
    _node(gd, "x", "Placeholder", [], types={"dtype": F32})
    _node(gd, "call", "PartitionedCall", ["x"], lists={"Tin": [tin], "Tout": [tout]}, funcs={"f": "f"})
    _function(gd, "f", arg, out, body_op)
    return gd


def _conditional(op: str, body_op: str) -> Any:
    """``c = op(p, x)`` over two branches ``t`` and ``e``, each declared float32 -> float32."""
    gd = _graph_def()
    _node(gd, "x", "Placeholder", [], types={"dtype": F32})
    _node(gd, "p", "Placeholder", [], types={"dtype": BOOL if op == "StatelessIf" else I32})
    funcs: dict[str, str | list[str]] = ({"then_branch": "t", "else_branch": "e"} if op == "StatelessIf"
                                         else {"branches": ["t", "e"]})
    _node(gd, "c", op, ["p", "x"], lists={"Tin": [F32], "Tout": [F32]}, funcs=funcs)
    _function(gd, "t", F32, F32, body_op)
    _function(gd, "e", F32, F32, body_op)
    return gd


def _loop(t: int) -> Any:
    """``w = StatelessWhile(x)`` with ``T=[t]``: ``x`` negated while it is above zero (cond ``0 < a``)."""
    gd = _graph_def()
    _node(gd, "x", "Placeholder", [], types={"dtype": F32})
    _node(gd, "w", "StatelessWhile", ["x"], lists={"T": [t]}, funcs={"cond": "cond", "body": "body"})
    f = gd.library.function.add()
    f.signature.name = "cond"
    a = f.signature.input_arg.add()
    a.name, a.type = "a", F32
    o = f.signature.output_arg.add()
    o.name, o.type = "p", BOOL
    zero = f.node_def.add()
    zero.name, zero.op = "zero", "Const"
    zero.attr["dtype"].type = F32
    zero.attr["value"].tensor.dtype = F32
    zero.attr["value"].tensor.float_val.append(0.0)
    lt = f.node_def.add()
    lt.name, lt.op = "lt", "Less"
    lt.input.extend(["zero:output:0", "a"])
    lt.attr["T"].type = F32
    f.ret["p"] = "lt:z:0"
    _function(gd, "body", F32, F32, "Neg")
    return gd


BAD_SIGNATURES: list[tuple[str, Callable[[], Any], str]] = [
    ("a function's body returns int32 for its float32 output", lambda: _call(body_op="Cast"),
     r"PartitionedCall node \"call\": function 'f' declares output 'o' float32, but its body returns int32"),
    ("a function is called with float32 for its int32 argument", lambda: _call(arg=I32),
     r"PartitionedCall node \"call\": function 'f' declares argument 'a' int32, but the call passes float32"),
    ("a call's Tout says int32 for a float32 output", lambda: _call(tout=I32),
     r"PartitionedCall node \"call\": its Tout declares output 0 int32, but function 'f' returns float32"),
    ("a call's Tin says int32 for a float32 input", lambda: _call(tin=I32),
     r"PartitionedCall node \"call\": its Tin declares input 0 int32, but it reads float32"),
    ("both branches of an If return int32 for float32", lambda: _conditional("StatelessIf", "Cast"),
     r"StatelessIf node \"c\": function 't' declares output 'o' float32, but its body returns int32"),
    ("both branches of a Case return int32 for float32", lambda: _conditional("Case", "Cast"),
     r"Case node \"c\": function 't' declares output 'o' float32, but its body returns int32"),
    ("a loop's T says int32 for a float32 input", lambda: _loop(I32),
     r"StatelessWhile node \"w\": its T declares input 0 int32, but it reads float32"),
]


@pytest.mark.parametrize("case,make,words", BAD_SIGNATURES, ids=[c[0] for c in BAD_SIGNATURES])
def test_a_v2_function_whose_values_disagree_with_its_declared_types_is_refused(case: str, make: Callable[[], Any],
                                                                                words: str) -> None:
    """Each imported silently, the body's dtype winning over the declared one (a float32 output ran as
    an int32); TensorFlow refuses each when it instantiates the function or builds the op."""
    pytest.importorskip("google.protobuf")
    with pytest.raises(tn.DTypeError, match=words):
        tn.import_graph_def(make().SerializeToString())


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_the_well_typed_twins_import_and_run_on_every_backend(backend: str) -> None:
    """The call, the If, the Case and the loop the battery breaks, typed as they declare: ``-x``;
    ``-x`` from either branch; ``x`` negated while above zero (once, for 1.5)."""
    pytest.importorskip("google.protobuf")
    x = np.float32(1.5)
    for gd, fetch, extra in ((_call(), "call:0", {}), (_conditional("StatelessIf", "Neg"), "c:0", {"p:0": True}),
                             (_conditional("Case", "Neg"), "c:0", {"p:0": np.int32(1)}), (_loop(F32), "w:0", {})):
        imp = tn.import_graph_def(gd.SerializeToString())
        feeds = {imp.tensor("x:0"): x, **{imp.tensor(k): v for k, v in extra.items()}}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the fast backend's fallback notice, if any
            with session(imp.graph, backend) as s:
                assert s.run(imp.tensor(fetch), feeds) == np.float32(-1.5), (backend, fetch)


def test_one_rule_says_where_a_declared_type_cannot_be_a_value() -> None:
    """``arity.declared_mismatch``, the rule of the node checks (a type attr) and of the function
    checks (a signature, a ``Tin``/``Tout``/``T`` list) alike: a plain tensor of another Turnout dtype
    than the declared one is named; a ``_ref`` type is its base type; nothing is named where the
    declared type says nothing Turnout can check (0, an attr-typed argument; a resource; a variant; a
    type Turnout does not import, float16) or where the value stands for a TensorFlow value the
    import represents in its own way (a resource, a TensorArray), or is no tensor. (The two checks
    had rules of their own, which differed on the types Turnout does not import.)"""
    pytest.importorskip("google.protobuf")
    from turnout.graphdef.arity import declared_mismatch

    g = tn.Graph()
    with g.as_default():
        f, i = tn.constant(1.0), tn.constant(1)
        ta = tn.TensorArray(tn.float32, size=1).write(0, f).tensor
        tn.Variable(np.float32(0.0), name="v")
    handle = next(n.outputs[0] for n in g.nodes if n.op == "VarHandle")
    assert declared_mismatch(1, i) == "int32" and declared_mismatch(3, f) == "float32"
    assert declared_mismatch(101, i) == "int32" and declared_mismatch(101, f) is None  # (float32_ref)
    for enum in (0, 20, 21, 19):
        assert declared_mismatch(enum, i) is None, enum
    assert declared_mismatch(1, f) is None and declared_mismatch(3, i) is None
    for other in (handle, ta, None, 3):
        assert declared_mismatch(3, other) is None, other


def test_a_messages_type_name_says_a_reference_type_as_tensorflow_does() -> None:
    """``protos.type_name``, the name every GraphDef message gives a declared type: a ``_ref`` type
    (the base plus 100) is named as TensorFlow names it (``float32_ref``), not by its number, as the
    function checks said it; a type Turnout does not name keeps its number, reference or not."""
    pytest.importorskip("google.protobuf")
    from turnout.graphdef import protos

    assert [protos.type_name(e) for e in (1, 3, 101, 103, 120)] == [
        "float32", "int32", "float32_ref", "int32_ref", "resource_ref"]
    assert protos.type_name(99) == "enum 99" and protos.type_name(199) == "enum 199"


# ---- 3. GraphDef nodes: a Const's dtype, the number and dtypes of a node's inputs ----------------------
def test_a_graph_def_const_whose_dtype_disagrees_with_its_value_is_refused() -> None:
    """``Const[dtype=float32]`` holding an int32 tensor imported as the int32 3, silently."""
    pytest.importorskip("google.protobuf")
    gd = _graph_def()
    c = _node(gd, "c", "Const", [], types={"dtype": F32})
    c.attr["value"].tensor.dtype = I32
    c.attr["value"].tensor.int_val.append(3)
    with pytest.raises(tn.DTypeError, match=r'Const node "c": its dtype attr is float32, but its value is int32'):
        tn.import_graph_def(gd.SerializeToString())


def _one_node(op: str, inputs: list[str], n: int | None = None) -> Any:
    """A GraphDef of a float32 placeholder ``x``, the int32 scalar ``ax`` and node ``y = op(inputs)``."""
    gd = _graph_def()
    _node(gd, "x", "Placeholder", [], types={"dtype": F32})
    ax = _node(gd, "ax", "Const", [], types={"dtype": I32})
    ax.attr["value"].tensor.dtype = I32
    ax.attr["value"].tensor.int_val.append(0)
    y = _node(gd, "y", op, inputs, types={"T": F32})
    if n is not None:
        y.attr["N"].i = n
    return gd


BAD_ARITIES: list[tuple[str, Callable[[], Any], str]] = [
    ("an AddV2 of one input", lambda: _one_node("AddV2", ["x"]), r'AddV2 node "y" has 1 data input; AddV2 takes 2'),
    ("an Identity of two inputs", lambda: _one_node("Identity", ["x", "x"]),
     r'Identity node "y" has 2 data inputs; Identity takes 1'),
    ("a Neg of no input", lambda: _one_node("Neg", []), r'Neg node "y" has 0 data inputs; Neg takes 1'),
    ("a Select of two inputs", lambda: _one_node("Select", ["x", "x"]), r'Select node "y" has 2 data inputs; Select '
                                                                         r"takes 3"),
    ("a Pack whose N says 3 for 2", lambda: _one_node("Pack", ["x", "x"], n=3),
     r'Pack node "y" has 2 data inputs; its N=3 makes Pack take 3'),
    ("a ConcatV2 whose N says 1 for 2 values", lambda: _one_node("ConcatV2", ["x", "x", "ax"], n=1),
     r'ConcatV2 node "y" has 3 data inputs; its N=1 makes ConcatV2 take 2'),
]


BAD_ARITIES += [
    ("a Tan of two inputs", lambda: _one_node("Tan", ["x", "x"]), r'Tan node "y" has 2 data inputs; Tan takes 1'),
    ("an Atan2 of one input", lambda: _one_node("Atan2", ["x"]), r'Atan2 node "y" has 1 data input; Atan2 takes 2'),
    ("a FusedBatchNormV3 of six inputs", lambda: _one_node("FusedBatchNormV3", ["x"] * 6),
     r'FusedBatchNormV3 node "y" has 6 data inputs; FusedBatchNormV3 takes 5'),
    ("a FusedBatchNormGradV3 of five inputs", lambda: _one_node("FusedBatchNormGradV3", ["x"] * 5),
     r'FusedBatchNormGradV3 node "y" has 5 data inputs; FusedBatchNormGradV3 takes 6'),
    ("a PlaceholderWithDefault of two inputs", lambda: _one_node("PlaceholderWithDefault", ["x", "x"]),
     r'PlaceholderWithDefault node "y" has 2 data inputs; PlaceholderWithDefault takes 1'),
    ("an IdentityN whose T lists one type for two inputs", lambda: _listed_node("IdentityN", "T", 1, 2),
     r'IdentityN node "y" has 2 data inputs; its T of 1 type makes IdentityN take 1'),
    ("a Print whose U lists two types for one datum", lambda: _listed_node("Print", "U", 2, 2),
     r'Print node "y" has 2 data inputs; its U of 2 types makes Print take 3'),
]


def _listed_node(op: str, attr: str, types: int, inputs: int) -> Any:
    """``y = op(x, ...)`` of ``inputs`` inputs, its type-list attr ``attr`` listing ``types`` float32s."""
    gd = _graph_def()
    _node(gd, "x", "Placeholder", [], types={"dtype": F32})
    _node(gd, "y", op, ["x"] * inputs, lists={attr: [F32] * types})
    return gd


def test_every_supported_op_has_its_number_of_inputs() -> None:
    """The import checks the input count of every op it supports: each is of fixed arity
    (``arity.FIXED``) or counted by its ``N`` (``VARIADIC``) or by a type list (``BY_TYPE_LIST``).
    Why a test: an op added to the import without its count would take extra inputs silently (a
    ``Tan`` of two took the tangent of the first)."""
    from turnout.graphdef import SUPPORTED_OPS, arity

    counted = set(arity.FIXED) | set(arity.VARIADIC) | set(arity.BY_TYPE_LIST)
    assert sorted(set(SUPPORTED_OPS) - counted) == []


def test_the_input_tables_are_tensorflow_s() -> None:
    """Where TensorFlow is installed (``TURNOUT_TF_PYTHON`` names its Python): for every supported op,
    its number of inputs and the inputs each type attr types are those of TensorFlow's op registry
    (``tools/tf_op_signatures.py``), and an op of variable arity is counted by ``N`` or a type list."""
    import json
    import os
    import subprocess
    from pathlib import Path

    from turnout.graphdef import SUPPORTED_OPS, arity

    python = os.environ.get("TURNOUT_TF_PYTHON")
    if python is None:
        pytest.skip("TensorFlow's Python is not given (set TURNOUT_TF_PYTHON)")
    tool = Path(__file__).resolve().parent.parent / "tools" / "tf_op_signatures.py"
    done = subprocess.run([python, str(tool)], input="\n".join(sorted(SUPPORTED_OPS)), capture_output=True,
                          text=True, timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    sigs = json.loads(done.stdout)
    wrong = [op for op, sg in sigs.items() if sg["inputs"] is not None
             and (arity.FIXED.get(op) != sg["inputs"]
                  or arity.typed_inputs(op) != {k: tuple(v) for k, v in sg["typed"].items()})]
    unlisted = [op for op, sg in sigs.items() if sg["inputs"] is None
                and op not in arity.VARIADIC and op not in arity.BY_TYPE_LIST]
    assert (wrong, unlisted) == ([], [])


@pytest.mark.parametrize("case,make,words", BAD_ARITIES, ids=[c[0] for c in BAD_ARITIES])
def test_a_graph_def_node_of_the_wrong_number_of_inputs_is_refused(case: str, make: Callable[[], Any],
                                                                   words: str) -> None:
    pytest.importorskip("google.protobuf")
    with pytest.raises(tn.GraphBuildError, match=words):
        tn.import_graph_def(make().SerializeToString())


def _typed_node(op: str, t: int, n_inputs: int) -> Any:
    """``y = op(x, ...)`` of the float32 placeholder ``x``, its ``T`` attr saying ``t``."""
    gd = _graph_def()
    _node(gd, "x", "Placeholder", [], types={"dtype": F32})
    _node(gd, "y", op, ["x"] * n_inputs, types={"T": t})
    return gd


BAD_T: list[tuple[str, Callable[[], Any], str]] = [
    ("a Neg declared int32 reading float32", lambda: _typed_node("Neg", I32, 1),
     r'Neg node "y": its T declares int32, but input 0 \(x:0\) is float32'),
    ("an AddV2 declared int32 reading float32", lambda: _typed_node("AddV2", I32, 2),
     r'AddV2 node "y": its T declares int32, but input 0 \(x:0\) is float32'),
    ("a Less declared bool reading float32", lambda: _typed_node("Less", BOOL, 2),
     r'Less node "y": its T declares bool, but input 0 \(x:0\) is float32'),
    ("an Atan2 declared int32 reading float32", lambda: _typed_node("Atan2", I32, 2),
     r'Atan2 node "y": its T declares int32, but input 0 \(x:0\) is float32'),
    ("a Tan declared bool reading float32", lambda: _typed_node("Tan", BOOL, 1),
     r'Tan node "y": its T declares bool, but input 0 \(x:0\) is float32'),
    ("a Reshape whose tensor is declared int32", lambda: _reshaped(I32),
     r'Reshape node "y": its T declares int32, but input 0 \(x:0\) is float32'),
    ("a Pack of two declared int32 reading float32", lambda: _one_node_typed("Pack", ["x", "x"], {"T": I32}, n=2),
     r'Pack node "y": its T declares int32, but input 0 \(x:0\) is float32'),
    ("a ConcatV2 whose axis is declared int64", lambda: _one_node_typed("ConcatV2", ["x", "x", "ax"],
                                                                         {"T": F32, "Tidx": I64}, n=2),
     r'ConcatV2 node "y": its Tidx declares int64, but input 2 \(ax:0\) is int32'),
    ("a Reshape whose shape is declared int64", lambda: _reshaped(F32, tshape=I64),
     r'Reshape node "y": its Tshape declares int64, but input 1 \(s:0\) is int32'),
]


def _one_node_typed(op: str, inputs: list[str], types: dict[str, int], n: int) -> Any:
    """``_one_node``'s graph with ``y``'s type attrs set to ``types`` and its ``N`` to ``n``."""
    gd = _one_node(op, inputs, n=n)
    for k, v in types.items():
        gd.node[-1].attr[k].type = v
    return gd


def _reshaped(t: int, tshape: int = 3) -> Any:
    """``y = Reshape(x, [-1])`` of the float32 placeholder ``x`` and an int32 shape, its ``T`` attr
    saying ``t`` and its ``Tshape`` ``tshape``: ``T`` types the tensor, ``Tshape`` the shape."""
    gd = _graph_def()
    _node(gd, "x", "Placeholder", [], types={"dtype": F32})
    s = _node(gd, "s", "Const", [], types={"dtype": I32})
    s.attr["value"].tensor.dtype = I32
    s.attr["value"].tensor.tensor_shape.dim.add().size = 1
    s.attr["value"].tensor.int_val.append(-1)
    _node(gd, "y", "Reshape", ["x", "s"], types={"T": t, "Tshape": tshape})
    return gd


@pytest.mark.parametrize("case,make,words", BAD_T, ids=[c[0] for c in BAD_T])
def test_a_node_whose_t_is_not_its_typed_inputs_dtype_is_refused(case: str, make: Callable[[], Any],
                                                                         words: str) -> None:
    pytest.importorskip("google.protobuf")
    with pytest.raises(tn.DTypeError, match=words):
        tn.import_graph_def(make().SerializeToString())


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_the_well_formed_arities_import_and_run(backend: str) -> None:
    """The twins: ``AddV2(x, x)``, ``AddN`` of one input (``N=1``: the input itself), ``Pack`` of two
    with ``N=2``, ``ConcatV2`` of two vectors with ``N=2``."""
    pytest.importorskip("google.protobuf")
    cases = [(_one_node("AddV2", ["x", "x"]), 3.0), (_one_node("AddN", ["x"], n=1), 1.5),
             (_one_node("Pack", ["x", "x"], n=2), [1.5, 1.5]), (_reshaped(F32), [1.5])]
    for gd, want in cases:
        imp = tn.import_graph_def(gd.SerializeToString())
        with session(imp.graph, backend) as s:
            np.testing.assert_array_equal(s.run(imp.tensor("y:0"), {imp.tensor("x:0"): np.float32(1.5)}), want)


# ---- 4. turnout.graph_replace given arguments of the wrong kind -------------------------------------
def _replace(fetches: Callable[[Any], Any], mapping: Callable[[Any, Any], Any]) -> Callable[[], Any]:
    def go() -> Any:
        from turnout.graph_replace import replaced

        x = tn.placeholder(tn.float32, [], name="x")
        return replaced(fetches(x * 2.0), mapping(x, tn.constant(1.0)))
    return go


BAD_REPLACE: list[tuple[str, Callable[[], Any], str]] = [
    ("a key that is a name", _replace(lambda y: [y], lambda x, z: {"x:0": z}), "old_to_new"),
    ("a value that is a number", _replace(lambda y: [y], lambda x, z: {x: 3.0}), "old_to_new"),
    ("a map that is a list of pairs", _replace(lambda y: [y], lambda x, z: [(x, z)]), "old_to_new"),
    ("a fetch that is a number", _replace(lambda y: [y, 3], lambda x, z: {x: z}), "fetches"),
    ("fetches that are one tensor", _replace(lambda y: y, lambda x, z: {x: z}), "fetches"),
]


@pytest.mark.parametrize("case,call,param", BAD_REPLACE, ids=[c[0] for c in BAD_REPLACE])
def test_graph_replace_given_arguments_of_the_wrong_kind_names_the_parameter(case: str, call: Callable[[], Any],
                                                                             param: str) -> None:
    with tn.Graph().as_default(), pytest.raises(tn.ArgumentError, match=f"graph_replace: {param} "):
        call()


# ---- 5. turnout.jax.while_loop given arguments of the wrong kind -------------------------------------
BAD_JAX_LOOPS: list[tuple[str, Callable[[Any], Any], str]] = [
    ("a body of no parameters", lambda wl: wl(lambda x: x < 3, lambda: 1.0, 0.0),
     "body_fun is called with 1 positional argument, which it cannot take"),
    ("a cond of two parameters", lambda wl: wl(lambda x, y: x < 3, lambda x: x + 1, 0.0),
     "cond_fun is called with 1 positional argument, which it cannot take"),
    ("a state of no arrays", lambda wl: wl(lambda x: True, lambda x: x, None),
     "init_val holds no array"),
    ("an array of Python objects", lambda wl: wl(lambda x: x[0] < 3, lambda x: x + 1, np.array([1, "a"], dtype=object)),
     r"init_val is an array of dtype object"),
    ("an array of strings", lambda wl: wl(lambda x: x[0] < 3, lambda x: x, {"s": np.array(["a"])}),
     r"init_val\['s'\] is an array of dtype <U1"),
]


@pytest.mark.parametrize("case,call,words", BAD_JAX_LOOPS, ids=[c[0] for c in BAD_JAX_LOOPS])
def test_jax_while_loop_given_arguments_of_the_wrong_kind_is_an_argument_error(case: str, call: Callable[[Any], Any],
                                                                               words: str) -> None:
    import turnout.jax as tj

    with pytest.raises(tn.ArgumentError, match=f"while_loop: (.*; )?{words}"):
        call(tj.while_loop)


def test_a_type_error_raised_inside_a_jax_loop_body_is_the_user_s() -> None:
    """The twin that must pass unchanged: a ``TypeError`` the body raises of its own (its arity fits)."""
    import turnout.jax as tj

    def body(x: Any) -> Any:
        raise TypeError("the user's own")

    with pytest.raises(TypeError, match="the user's own"):
        tj.while_loop(lambda x: x < 3, body, 0.0)


# ---- 6. the functional builders name themselves --------------------------------------------------------
def _ints() -> tn.Tensor:
    return tn.constant([1, 2])


BAD_FOLDS: list[tuple[str, Callable[[], Any], type, str]] = [
    ("scan: fn's output of another dtype", lambda: tn.scan(lambda a, x: tn.cast(a, tn.float32), _ints(),
                                                             initializer=tn.constant(0)),
     tn.DTypeError, "scan: output 0 of fn is float32, but the accumulator is int32"),
    ("foldl: fn's output of another dtype", lambda: tn.foldl(lambda a, x: tn.cast(a, tn.float32), _ints(),
                                                               initializer=tn.constant(0)),
     tn.DTypeError, "foldl: output 0 of fn is float32, but the accumulator is int32"),
    ("scan: fn's output of another shape", lambda: tn.scan(lambda a, x: tn.stack([a, x]), _ints(),
                                                             initializer=tn.constant(0)),
     tn.ShapeError, r"scan: output 0 of fn has shape \[2\], but the accumulator has shape \[\]"),
    ("foldr: fn's output of another structure", lambda: tn.foldr(lambda a, x: (a, x), _ints(),
                                                                   initializer=tn.constant(0)),
     tn.GraphBuildError, "foldr: fn's output and the accumulator: structures differ"),
    ("scan: elems a scalar", lambda: tn.scan(lambda a, x: a + x, tn.constant(1), initializer=tn.constant(0)),
     tn.GraphBuildError, "scan: elems must have a leading dimension to iterate over"),
    ("map_fn: elems of no tensor", lambda: tn.map_fn(lambda x: x, []),
     tn.GraphBuildError, "map_fn: elems must contain at least one tensor"),
    ("map_fn: elems of two lengths", lambda: tn.map_fn(lambda e: e[0] + e[1], (_ints(), tn.constant([1, 2, 3]))),
     tn.ShapeError, "map_fn: elems must share their leading dimension"),
]


@pytest.mark.parametrize("case,build,error,words", BAD_FOLDS, ids=[c[0] for c in BAD_FOLDS])
def test_a_functional_builder_names_itself_and_what_does_not_fit(case: str, build: Callable[[], Any], error: type,
                                                                  words: str) -> None:
    with tn.Graph().as_default(), pytest.raises(error) as info:
        build()
    assert re.match(words, str(info.value)), str(info.value)


# ---- 7. None where a dtype is due, and a platform no one knows -------------------------------------
NONE_DTYPES: list[tuple[str, Callable[[], Any]]] = [
    ("placeholder", lambda: tn.placeholder(None, [])),
    ("cast", lambda: tn.cast(tn.constant(1), None)),
    ("zeros", lambda: tn.zeros([2], dtype=None)),
    ("ones", lambda: tn.ones([2], dtype=None)),
]


@pytest.mark.parametrize("case,build", NONE_DTYPES, ids=[c[0] for c in NONE_DTYPES])
def test_none_where_a_dtype_is_due_is_refused_not_float64(case: str, build: Callable[[], Any]) -> None:
    """A ``GraphBuildError`` (an ``ArgumentError`` where the builder does not restate it), naming the
    builder where it says which argument it converts."""
    with tn.Graph().as_default(), pytest.raises(tn.GraphBuildError, match="a dtype is needed here, got None"):
        build()


@pytest.mark.parametrize("name", ["gpus", "GPU", ""])
def test_memory_report_of_an_unknown_platform_is_refused(name: str) -> None:
    with tn.Graph().as_default() as g, pytest.raises(tn.ArgumentError, match=f"memory_report: platform {name!r} is "
                                                                            "none of"):
        tn.memory_report(g, platform=name)


def test_memory_report_of_a_known_platform_plans_for_it() -> None:
    """The twin: on ``"gpu"`` the plan has host memory to swap to, on ``"cpu"`` none."""
    with tn.Graph().as_default() as g:
        assert tn.memory_report(g, platform="gpu").plan.platform.host_memory
        assert not tn.memory_report(g, platform="cpu").plan.platform.host_memory


# ---- 8. the checkpoint functions given arguments of the wrong kind ------------------------------------
def _saved(tmp: Path) -> tuple[tn.Session, str, str]:
    """A session of one Variable ``w`` and the two checkpoints of it: Turnout's and TensorFlow's."""
    g = tn.Graph()
    with g.as_default():
        tn.Variable(np.zeros((2, 3), np.float32), name="w")
    s = tn.Session(g)
    ours, theirs = str(tmp / "m.ckpt"), str(tmp / "tf")
    checkpoint.save(s, ours)
    checkpoint.save_tf(s, theirs)
    return s, ours, theirs


BAD_CHECKPOINT_CALLS: list[tuple[str, Callable[[tn.Session, str, str], Any], str]] = [
    ("restore of no session", lambda s, ours, tf: checkpoint.restore(None, ours),
     "checkpoint.restore: session must be a tn Session, got NoneType"),
    ("restore_tf of no session", lambda s, ours, tf: checkpoint.restore_tf("s", tf),
     "restore_tf: session must be a tn Session, got str"),
    ("save_tf of no session", lambda s, ours, tf: checkpoint.save_tf(None, tf),
     "save_tf: session must be a tn Session, got NoneType"),
    ("save of variables that are an int", lambda s, ours, tf: checkpoint.save(s, ours, variables=5),
     "checkpoint.save: variables must be a list of names, got int 5"),
    ("save of variables that are one string", lambda s, ours, tf: checkpoint.save(s, ours, variables="w"),
     "checkpoint.save: variables must be a list of names, got str 'w'"),
    ("read_tf of names that are an int", lambda s, ours, tf: checkpoint.read_tf(tf, names=5),
     "read_tf: names must be a list of names, got int 5"),
    ("read_tf of a name that is an int", lambda s, ours, tf: checkpoint.read_tf(tf, names=["w", 3]),
     "read_tf: names must be a list of names, got int 3 among them"),
    ("write_tf of values that are a list", lambda s, ours, tf: checkpoint.write_tf(tf, [("w", np.zeros(2))]),
     "write_tf: values must be a mapping from tensor names to arrays, got list"),
    ("write_tf of a ragged value", lambda s, ours, tf: checkpoint.write_tf(tf, {"w": [[1.0], [1.0, 2.0]]}),
     "write_tf: tensor 'w' is no array"),
    ("restore_tf of a name map that is a list", lambda s, ours, tf: checkpoint.restore_tf(s, tf, name_map=[("w", "w")]),
     "restore_tf: name_map must be a mapping from checkpoint names to Variable names, got list"),
]


@pytest.mark.parametrize("case,call,words", BAD_CHECKPOINT_CALLS, ids=[c[0] for c in BAD_CHECKPOINT_CALLS])
def test_a_checkpoint_function_given_an_argument_of_the_wrong_kind_names_it(
        case: str, call: Callable[[tn.Session, str, str], Any], words: str, tmp_path: Path) -> None:
    s, ours, theirs = _saved(tmp_path)
    with pytest.raises(tn.ArgumentError) as info:
        call(s, ours, theirs)
    assert str(info.value).startswith(words), str(info.value)


def test_the_checkpoints_of_the_battery_read_back(tmp_path: Path) -> None:
    """The twins that must keep working: each file the battery's calls meet holds ``w``'s zeros."""
    s, ours, theirs = _saved(tmp_path)
    assert checkpoint.restore(s, ours) == ["w"]
    assert checkpoint.restore_tf(s, theirs, name_map={"w": "w"}) == ["w"]
    np.testing.assert_array_equal(checkpoint.read_tf(theirs, names=["w"])["w"], np.zeros((2, 3), np.float32))
