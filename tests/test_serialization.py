"""Serialization (``turnout.serialize``): round trips and hostile input.

Round trips: builder-made graphs (nested loops, conds, TensorArrays, Variables, GetItem with tensor
indices, scan) and hand-built raw loops come back with the same text (``dumps(loads(dumps(g))) ==
dumps(g)``) and compute the same values on the reference interpreter. Malformed documents: each is a
small, valid document with one defect, rejected with a SerializationError whose message names what is
wrong (and, for a node, its index and name).
"""

from __future__ import annotations

import copy
import functools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import strategies
from hypothesis import given
from hypothesis import strategies as st
from programs import build

import turnout as tn
from turnout import primitives, raw
from turnout import serialize as ser
from turnout.errors import SerializationError
from turnout.graph import BACK_EDGE, TensorSpec


def nested(depth: int) -> Any:
    v: Any = 0
    for _ in range(depth):
        v = [v]
    return v


def roundtrip(g: tn.Graph) -> tn.Graph:
    text = ser.dumps(g)
    g2 = ser.loads(text)
    assert ser.dumps(g2) == text
    assert [n.name for n in g2.nodes] == [n.name for n in g.nodes]
    return g2


def same(g2: tn.Graph, ts: list[tn.Tensor]) -> list[tn.Tensor]:
    return [g2.tensor(t.name) for t in ts]


def outcome(g: tn.Graph, fetches: list[tn.Tensor], feeds: dict[tn.Tensor, Any]) -> Any:
    """The fetched values, or the type of the error the run ended with. Loops of the programs here
    run at most a few iterations, so a frame that reaches 50 has run away."""
    try:
        return tn.Session(g, backend="reference").run(fetches, feeds, max_iterations=50)
    except tn.TurnoutError as e:
        return type(e)


def run_both(g: tn.Graph, fetches: list[tn.Tensor], feeds: dict[tn.Tensor, Any] | None = None) -> None:
    """The loaded graph computes exactly what the original computes, on the reference interpreter
    (or fails the same way)."""
    g2 = roundtrip(g)
    want = outcome(g, fetches, feeds or {})
    got = outcome(g2, same(g2, fetches), {g2.tensor(k.name): v for k, v in (feeds or {}).items()})
    if isinstance(want, type) or isinstance(got, type):
        assert got == want
        return
    for w, h in zip(want, got, strict=True):
        assert np.asarray(w).dtype == np.asarray(h).dtype
        np.testing.assert_array_equal(np.asarray(h), np.asarray(w))


# ---- round trips ----------------------------------------------------------------------------------
def test_nested_loops_and_conds_round_trip() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def outer_body(i: Any, y: Any) -> Any:
            _, z = tn.while_loop(lambda j, z: j < 2,
                                 lambda j, z: (j + 1, tn.cond(z > 5.0, lambda: z * 2.0, lambda: z + 1.0)),
                                 [tn.constant(0), y])
            return i + 1, z

        i, y = tn.while_loop(lambda i, y: i < 3, outer_body, [tn.constant(0), x], parallel_iterations=3)
        c = tn.case(i, [lambda: y, lambda: -y], default=lambda: y * 10.0)
    run_both(g, [i, y, c], {x: 1.0})
    # by hand: 1 -> 2 -> 3 -> 4 -> 5 -> 6 -> 12, three outer iterations; case(3) takes the default
    assert tn.Session(g).run(c, {x: 1.0}) == 120.0


def test_tensor_arrays_variables_and_tensor_indices_round_trip() -> None:
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        v = tn.Variable(np.array([1.0, 2.0, 3.0], np.float32), name="v")
        ta = tn.TensorArray(tn.float32, size=3, element_shape=[3])
        _, ta = tn.while_loop(lambda j, ta: j < 3,
                              lambda j, ta: (j + 1, ta.write(j, v.read() * tn.cast(j, tn.float32))),
                              [tn.constant(0), ta])
        s = ta.stack()                      # [[0,0,0],[1,2,3],[2,4,6]]
        row = s[k]                          # a tensor index
        tail = s[k:, 1]                     # a tensor slice bound and a static index
        scanned = tn.scan(lambda a, e: a + e, s)
        bump = v.assign_add(tn.constant([1.0, 1.0, 1.0]))
    run_both(g, [s, row, tail, scanned], {k: 1})
    g2 = roundtrip(g)
    assert g2.variables["v"].attrs["initial_value"].tolist() == [1.0, 2.0, 3.0]
    sess = tn.Session(g2)
    np.testing.assert_array_equal(sess.run(g2.tensor(bump.name)), [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(sess.run(g2.tensor(row.name), {g2.tensor(k.name): 2}), [4.0, 6.0, 8.0])


def test_hand_built_raw_loop_round_trips_and_runs() -> None:
    g = tn.Graph()
    with g.as_default():
        e = raw.enter(tn.constant(1.0, name="one"), "loop", parallel_iterations=2)
        lim = raw.enter(tn.constant(100.0), "loop", is_constant=True, parallel_iterations=2)
        two = raw.enter(tn.constant(2.0), "loop", is_constant=True, parallel_iterations=2)
        m, _ = raw.merge([e, raw.BACK_EDGE])
        f, t = raw.switch(m, raw.loop_cond(m < lim))
        raw.close_back_edge(m, raw.next_iteration(t * two))
        out = raw.exit(f)
    g2 = roundtrip(g)
    merge = next(n for n in g2.nodes if n.op == "Merge")
    assert merge.inputs[1].node.op == "NextIteration" and not merge.has_pending_back_edge
    assert float(tn.Session(g2).run(g2.tensor(out.name))) == 128.0  # 1, 2, 4, ..., 128 >= 100


def test_merge_keeps_a_shape_invariant_more_general_than_its_entry() -> None:
    """A loop variable whose shape changes: the Merge records [?] while its entry is [1]."""
    g = tn.Graph()
    with g.as_default(), g._no_capture():
        e = raw.enter(tn.ones([1]), "grow")
        lim = raw.enter(tn.constant(8.0), "grow", is_constant=True)
        m = g.create_node("Merge", [e, BACK_EDGE], specs=[TensorSpec(tn.float32, (None,)), TensorSpec(tn.int32, ())])
        v = m.outputs[0]
        f, t = raw.switch(v, raw.loop_cond(tn.reduce_sum(v) < lim))
        raw.close_back_edge(m, raw.next_iteration(tn.concat([t, t], 0)))
        out = raw.exit(f)
    g2 = roundtrip(g)
    assert g2.node(m.name).outputs[0].shape == (None,)
    np.testing.assert_array_equal(tn.Session(g2).run(g2.tensor(out.name)), np.ones(8, np.float32))


def test_recorded_specs_more_precise_than_inference_are_kept() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, None, name="x")
        g.create_node("Identity", [x], name="known", specs=[TensorSpec(tn.float32, (2,))])
    g2 = roundtrip(g)
    assert g2.node("known").outputs[0].shape == (2,) and g2.node("x").outputs[0].shape is None


def test_non_finite_constants_and_tagged_attrs_round_trip() -> None:
    g = tn.Graph()
    with g.as_default():
        c = tn.constant(np.array([math.nan, math.inf, -math.inf, 0.5], np.float64), name="weird")
        g.create_node("NoOp", [], {"note": {"ndarray": 5}, "when": ("a", 1), "scale": math.inf}, name="tagged")
    text = ser.dumps(g)
    assert '"nan", "inf", "-inf", 0.5' in text and '{"dict": {"ndarray": 5}}' in text
    g2 = roundtrip(g)
    got = g2.node("weird").attrs["value"]
    assert got.dtype == np.float64 and np.isnan(got[0]) and list(got[1:]) == [math.inf, -math.inf, 0.5]
    assert g2.node("tagged").attrs == {"note": {"ndarray": 5}, "when": ["a", 1], "scale": math.inf}
    np.testing.assert_array_equal(tn.Session(g2).run(g2.tensor(c.name)), c.node.attrs["value"])


def test_devices_and_control_inputs_round_trip() -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.constant(1.0, name="a")
        with tn.device("cpu:1"):
            b = tn.multiply(a, 3.0, name="b")
        with tn.control_dependencies([b]):
            c = tn.identity(a, name="c")
    g2 = roundtrip(g)
    assert g2.node("b").device == "cpu:1" and [n.name for n in g2.node("c").control_inputs] == ["b"]
    assert float(tn.Session(g2).run(g2.tensor(c.name))) == 1.0


def test_save_and_load_name_the_file(tmp_path: Path) -> None:
    g = tn.Graph()
    with g.as_default():
        tn.square(tn.constant(3.0), name="sq")
    path = tmp_path / "model.json"
    tn.save(g, path)
    g2 = tn.load(path)
    assert float(tn.Session(g2).run(g2.tensor("sq:0"))) == 9.0
    assert "model.json" in g2.node("sq").source
    doc = json.loads(path.read_text())
    doc["nodes"][1]["op"] = "Cube"
    path.write_text(json.dumps(doc))
    with pytest.raises(SerializationError, match=r"model\.json: node 1 \(\"sq\"\).*unknown op 'Cube'"):
        tn.load(path)


def test_unbound_back_edge_loads_only_without_validation() -> None:
    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([raw.enter(tn.constant(0), "F"), raw.BACK_EDGE], name="open")
    text = ser.dumps(g)
    assert '"^BACK_EDGE"' in text
    with pytest.raises(SerializationError, match=r"\[W-Merge-Bound\].*\"open\""):
        ser.loads(text)
    g2 = ser.loads(text, validate=False)
    assert g2.node("open").has_pending_back_edge and ser.dumps(g2) == text


@pytest.mark.parametrize("attrs,expected", [
    ({"callback": print}, "a value of type builtin_function_or_method has no JSON form"),
    ({"meta": {"__class__": "x"}}, "dict keys must be strings not starting with '__'"),
    ({"__reduce__": 1}, "attr name '__reduce__' is not allowed"),
    ({"big": 2**64}, "outside the int64 range"),
    ({"deep": nested(20)}, "nested deeper than 16 levels"),
])
def test_dumps_rejects_what_loads_would_reject(attrs: dict[str, Any], expected: str) -> None:
    g = tn.Graph()
    with g.as_default():
        g.create_node("NoOp", [], attrs, name="odd")
    with pytest.raises(SerializationError, match=r"node 0 \(\"odd\"\), field 'attrs'") as info:
        ser.dumps(g)
    assert expected in str(info.value)


@given(st.data())
def test_generated_programs_round_trip(data: st.DataObject) -> None:
    prog = data.draw(strategies.programs(loops=True, conds=True, max_depth=3))
    inputs = data.draw(strategies.inputs_for(prog))
    built = build(prog)
    run_both(built.graph, built.fetches, built.feed_dict(inputs))


# ---- malformed documents -------------------------------------------------------------------------
def base_document() -> dict[str, Any]:
    """A small valid document: a counting loop with a GetItem, a Cast, a reduction and a Variable."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        v = tn.Variable(np.zeros(3, np.float32), name="v")
        idx = tn.constant(1, name="idx")
        tn.cast(x[idx], tn.int32, name="cast")
        tn.reduce_sum(x + v.read(), axis=0, name="sum")
        tn.transpose(tn.reshape(x, [1, 3], name="reshape"), [1, 0], name="transpose")
        tn.tile(x, [2], name="tile")
        e = raw.enter(tn.constant(0, name="zero"), "F", name="enter")
        lim = raw.enter(tn.constant(3, name="three"), "F", is_constant=True, name="lim")
        m, _ = raw.merge([e, raw.BACK_EDGE], name="merge")
        f, t = raw.switch(m, raw.loop_cond(tn.less(m, lim, name="less"), name="pivot"), name="switch")
        raw.close_back_edge(m, raw.next_iteration(tn.add(t, lim, name="step"), name="next"))
        raw.exit(f, name="exit")
    doc = json.loads(ser.dumps(g))
    ser.loads(json.dumps(doc))  # the base itself is well-formed
    return doc


def node(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in doc["nodes"] if n["name"] == name)


def set_(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation: ``node_name.field[.key]`` = value."""
    name, field, *key = path.split(".")

    def mutate(doc: dict[str, Any]) -> None:
        target = node(doc, name)
        if key:
            target[field][key[0]] = value
        else:
            target[field] = value

    return mutate


def _swap_order(doc: dict[str, Any]) -> None:
    nodes = doc["nodes"]
    i, j = nodes.index(node(doc, "x")), nodes.index(node(doc, "cast"))
    nodes[i], nodes[j] = nodes[j], nodes[i]


def _merge_entry_from_step(doc: dict[str, Any]) -> None:
    node(doc, "merge")["inputs"][0] = "step:0"


def _bad_back_edge_dtype(doc: dict[str, Any]) -> None:
    nxt = node(doc, "next")
    nxt["inputs"] = ["sum:0"]  # float32, while the loop variable is int32
    nxt["outputs"][0]["dtype"] = "float32"


def top(make: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """A mutation that replaces the whole document (the others edit it in place)."""
    return lambda doc: ("replace", make(doc))


MALFORMED: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    # the top level
    "top_level_list": (top(lambda d: [d]), "a serialized graph is a JSON object, got a list"),
    "wrong_format": (top(lambda d: {**d, "format": "tf-graphdef"}), "field 'format' must be 'turnout-graph'"),
    "future_version": (top(lambda d: {**d, "version": 2}),
                       "unsupported format version 2; this Turnout reads version 1"),
    "version_as_string": (top(lambda d: {**d, "version": "1"}), "field 'version' must be an integer"),
    "missing_nodes": (top(lambda d: {"format": d["format"], "version": 1}), "missing field 'nodes'"),
    "extra_top_field": (top(lambda d: {**d, "metadata": {}}), "unknown field 'metadata'"),
    "nodes_not_a_list": (top(lambda d: {**d, "nodes": {"x": 1}}), "field 'nodes' must be a list"),
    # node fields
    "node_not_object": (lambda d: d["nodes"].insert(0, "Const"), "node 0: a node is a JSON object, got a string"),
    "missing_outputs": (lambda d: node(d, "cast").pop("outputs"), "(\"cast\"): missing field 'outputs'"),
    "extra_node_field": (set_("cast.source", "evil.py:1"), "(\"cast\"): unknown field 'source'"),
    "unknown_op": (set_("cast.op", "SystemCall"), "field 'op': unknown op 'SystemCall'"),
    "empty_name": (set_("cast.name", ""), "the node name must be a non-empty string"),
    "duplicate_name": (set_("sum.name", "cast"), "duplicate node name (node"),
    "inputs_not_list": (set_("cast.inputs", "x:0"), "field 'inputs': inputs must be a list of strings"),
    "input_unknown_node": (lambda d: node(d, "cast")["inputs"].__setitem__(0, "ghost:0"), "unknown node 'ghost'"),
    "input_output_out_of_range": (lambda d: node(d, "sum")["inputs"].__setitem__(0, "x:5"),
                                  "refers to output 5 of 'x', which has 1 outputs"),
    "input_without_index": (lambda d: node(d, "sum")["inputs"].__setitem__(0, "x"), "'node_name:output_index'"),
    "input_negative_index": (lambda d: node(d, "sum")["inputs"].__setitem__(0, "x:-1"), "'node_name:output_index'"),
    "forward_reference": (_swap_order, "refers to node"),
    "self_reference": (lambda d: node(d, "step")["inputs"].__setitem__(0, "step:0"), "refers to itself"),
    "merge_forward_to_non_next": (_merge_entry_from_step, "only a Merge may refer forward, to the NextIteration"),
    "back_edge_marker_on_add": (lambda d: node(d, "step")["inputs"].__setitem__(0, "^BACK_EDGE"),
                                "only a Merge has back-edge slots"),
    "control_input_unknown": (set_("cast.control_inputs", ["nobody"]), "control input 'nobody' is unknown"),
    "control_input_later": (set_("x.control_inputs", ["exit"]), "control input 'exit' is not an earlier node"),
    "device_not_string": (set_("cast.device", 3), "device must be a non-empty string"),
    # output specs
    "bad_output_dtype": (lambda d: node(d, "cast")["outputs"][0].__setitem__("dtype", "float16"),
                         "outputs[0].dtype must be one of"),
    "negative_dimension": (lambda d: node(d, "x")["outputs"][0].__setitem__("shape", [-1]),
                           "outputs[0].shape has dimension -1"),
    "nan_string_dimension": (lambda d: node(d, "x")["outputs"][0].__setitem__("shape", ["nan"]),
                             "outputs[0].shape has dimension 'nan'"),
    "bool_dimension": (lambda d: node(d, "x")["outputs"][0].__setitem__("shape", [True]),
                       "outputs[0].shape has dimension True"),
    "huge_rank": (lambda d: node(d, "x")["outputs"][0].__setitem__("shape", [1] * 40), "rank 40, over the limit"),
    "spec_missing_field": (lambda d: node(d, "x")["outputs"][0].pop("elem_shape"), "missing 'elem_shape'"),
    "recorded_shape_disagrees": (lambda d: node(d, "sum")["outputs"][0].__setitem__("shape", [3]),
                                 "output 0 is recorded as float32[3] but its inputs and attrs give float32[]"),
    "recorded_dtype_disagrees": (lambda d: node(d, "sum")["outputs"][0].__setitem__("dtype", "float64"),
                                 "output 0 is recorded as float64[] but its inputs and attrs give float32[]"),
    "too_many_outputs_recorded": (lambda d: node(d, "cast")["outputs"].append(node(d, "cast")["outputs"][0]),
                                  "the op produces 1 outputs but the node records 2"),
    # attrs: types the kernels rely on
    "hostile_class_attr": (set_("zero.attrs.value", {"__class__": "os.system", "args": ["rm -rf /"]}),
                           "object key '__class__' is reserved"),
    "hostile_attr_name": (set_("zero.attrs.__reduce__", "os.system"), "attr name '__reduce__' is not allowed"),
    "yaml_python_object_dtype": (set_("zero.attrs.dtype", "!!python/object/apply:os.system"),
                                 "attr dtype must be one of"),
    "const_value_not_array": (set_("zero.attrs.value", [0]), "attr value must be an array"),
    "const_dtype_disagrees": (set_("zero.attrs.value", {"ndarray": {"dtype": "int64", "shape": [], "data": [0]}}),
                              "attr value holds int64 values but attr dtype says int32"),
    "ndarray_length_mismatch": (set_("zero.attrs.value", {"ndarray": {"dtype": "int32", "shape": [2], "data": [0]}}),
                                "ndarray data has 1 elements but shape [2] needs 2"),
    "enormous_array": (set_("zero.attrs.value", {"ndarray": {"dtype": "int32", "shape": [100000, 100000],
                                                             "data": []}}),
                       "has 10000000000 elements, over the limit"),
    "ndarray_float_in_int": (set_("zero.attrs.value", {"ndarray": {"dtype": "int32", "shape": [], "data": [0.5]}}),
                             "data[0] = 0.5 is not a valid int32 element"),
    "ndarray_int32_overflow": (set_("zero.attrs.value", {"ndarray": {"dtype": "int32", "shape": [], "data": [2**40]}}),
                               "is not a valid int32 element"),
    "ndarray_extra_field": (set_("zero.attrs.value", {"ndarray": {"dtype": "int32", "shape": [], "data": [0],
                                                                  "order": "F"}}),
                            "exactly the fields dtype, shape, data"),
    "bad_float_tag": (set_("cast.attrs.note", {"float": "NaN!"}), "holds \"nan\", \"inf\" or \"-inf\""),
    "attr_nested_too_deep": (set_("cast.attrs.note", nested(40)), "nested deeper than 16 levels"),
    "placeholder_shape_string": (set_("x.attrs.shape", "3"), "attr shape must be a list of dimensions"),
    "enter_parallel_iterations_zero": (set_("enter.attrs.parallel_iterations", 0),
                                       "attr parallel_iterations must be an integer >= 1, got 0"),
    "enter_is_constant_string": (set_("lim.attrs.is_constant", "yes"), "attr is_constant must be a bool"),
    "enter_missing_frame_name": (lambda d: node(d, "enter")["attrs"].pop("frame_name"), "needs attr 'frame_name'"),
    "reshape_shape_float": (set_("reshape.attrs.shape", [1.0, 3]), "attr shape must hold integers >= -1"),
    "cast_to_resource": (set_("cast.attrs.dtype", "resource"), "attr dtype must be a value dtype"),
    "sum_axis_string": (set_("sum.attrs.axis", "0"), "attr axis must be a list"),
    "sum_keepdims_int": (set_("sum.attrs.keepdims", 1), "attr keepdims must be a bool"),
    "transpose_perm_mixed": (set_("transpose.attrs.perm", [1, "0"]), "attr perm must hold integers >= 0"),
    "tile_multiples_missing": (lambda d: node(d, "tile")["attrs"].pop("multiples"), "Tile needs attr 'multiples'"),
    "getitem_bad_kind": (lambda d: next(n for n in d["nodes"] if n["op"] == "GetItem")["attrs"].__setitem__(
        "spec", [{"kind": "ellipsis"}]), '"kind": "index" or "slice"'),
    "getitem_input_refs": (lambda d: next(n for n in d["nodes"] if n["op"] == "GetItem")["attrs"].__setitem__(
        "spec", [{"kind": "index", "value": {"input": 1}}]), "refers to tensor indices [1] but the node has 1"),
    "int_beyond_int64": (set_("tile.attrs.multiples", [2**70]), "integer 1180591620717411303424 is outside the int64"),
    "reshape_absurd_target": (set_("reshape.attrs.shape", [2**62, 2**62]), "the Reshape shape rule rejects"),
    "var_initial_value_shape": (set_("v.attrs.shape", [4]), "attr initial_value has shape [3] but attr shape says [4]"),
    # graph-level checks after rebuilding
    "back_edge_dtype": (_bad_back_edge_dtype, "cannot bind back edge next:0"),
    "not_well_formed": (lambda d: node(d, "exit")["inputs"].__setitem__(0, "zero:0"),
                        "the loaded graph is not well-formed: [W-Exit-In-Frame] Exit node \"exit\""),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_documents_are_rejected(case: str) -> None:
    mutate, expected = MALFORMED[case]
    doc = base_document()
    result = mutate(doc)
    if isinstance(result, tuple) and result[:1] == ("replace",):
        doc = result[1]
    with pytest.raises(SerializationError) as info:
        ser.loads(json.dumps(doc))
    assert expected in str(info.value), str(info.value)


@pytest.mark.parametrize("text,expected", [
    ("", "invalid JSON"),
    ('{"format": "turnout-graph", "version": 1, "nodes": [], "nodes": []}', "duplicate key 'nodes'"),
    ('{"format": "turnout-graph", "version": 1, "nodes": [NaN]}', "NaN is not valid JSON"),
    ('{"format": "turnout-graph", "version": 1e999, "nodes": []}', "overflows a float"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    (b"\xff\xfe{}", "not UTF-8"),
], ids=["empty", "duplicate_key", "nan_literal", "float_overflow", "deep_nesting", "not_utf8"])
def test_malformed_text_is_rejected(text: str | bytes, expected: str) -> None:
    with pytest.raises(SerializationError) as info:
        ser.loads(text)
    assert expected in str(info.value)


def test_text_size_limit(tmp_path: Path) -> None:
    doc = json.dumps(base_document())
    ser.loads(doc, max_chars=len(doc))
    for text in (doc, doc.encode()):
        with pytest.raises(SerializationError, match=f"exceeds the limit of {len(doc) - 1}"):
            ser.loads(text, max_chars=len(doc) - 1)
    path = tmp_path / "g.json"
    path.write_text(doc, encoding="utf-8")
    ser.load(path, max_chars=len(doc))
    with pytest.raises(SerializationError, match=f"file of {len(doc)} bytes exceeds the limit of {len(doc) - 1}"):
        ser.load(path, max_chars=len(doc) - 1)
    for bad in (0, True, 1.5):
        with pytest.raises(tn.ArgumentError, match="max_chars must be a positive int"):
            ser.loads(doc, max_chars=bad)


def test_duplicate_variable_names_are_rejected() -> None:
    doc = base_document()
    clone = copy.deepcopy(node(doc, "v"))
    clone["name"] = "v_again"
    doc["nodes"].insert(doc["nodes"].index(node(doc, "v")) + 1, clone)
    with pytest.raises(SerializationError, match="variable 'v' is declared twice"):
        ser.loads(json.dumps(doc))


def test_loading_never_calls_into_python_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    """Belt and braces: whatever the document says, loading never imports or evaluates anything."""
    import builtins
    import pickle

    doc = base_document()
    node(doc, "cast")["attrs"]["note"] = {"dict": {"py/object": "os.system", "!!python/object": "os.system"}}
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("pickle.loads called"))
    monkeypatch.setattr(builtins, "eval", lambda *a, **k: pytest.fail("eval called"))
    g = ser.loads(json.dumps(doc))
    assert g.node("cast").attrs["note"] == {"py/object": "os.system", "!!python/object": "os.system"}


# ---- the JSON Schema --------------------------------------------------------------------------------
SCHEMA = Path(ser.__file__).parent / "schema" / "graph.schema.json"
SCHEMA_REJECTS = ["top_level_list", "wrong_format", "future_version", "missing_nodes", "extra_top_field",
                  "missing_outputs", "extra_node_field", "unknown_op", "empty_name", "input_without_index",
                  "bad_output_dtype", "negative_dimension", "nan_string_dimension", "hostile_class_attr",
                  "hostile_attr_name", "yaml_python_object_dtype", "const_value_not_array", "ndarray_extra_field",
                  "bad_float_tag", "enter_parallel_iterations_zero", "enter_is_constant_string",
                  "enter_missing_frame_name", "cast_to_resource", "sum_keepdims_int",
                  "transpose_perm_mixed", "tile_multiples_missing", "getitem_bad_kind", "device_not_string"]


@functools.cache
def _validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_validator() -> Any:
    pytest.importorskip("jsonschema")  # an optional checking tool, not a dependency of Turnout
    return _validator()


def test_schema_accepts_what_dumps_writes() -> None:
    validator = schema_validator()
    validator.validate(base_document())
    g = tn.Graph()
    with g.as_default():
        ta = tn.TensorArray(tn.float32, size=2).write(0, 1.0).write(1, 2.0)
        tn.scan(lambda a, e: a + e, ta.stack())
        tn.constant([math.nan, 1.0])
        g.create_node("NoOp", [], {"note": {"ndarray": 5}, "inf": math.inf})
    validator.validate(json.loads(ser.dumps(g)))


def test_schema_names_every_primitive() -> None:
    """The schema's list of ops is the primitive table's: a file holding an op added to the table
    later (a convolution, a max pool) must not fail the schema that other tools check files with."""
    schema = json.loads(SCHEMA.read_text())
    assert set(schema["$defs"]["node"]["properties"]["op"]["enum"]) == set(primitives.PRIMITIVES)


@pytest.mark.parametrize("case", SCHEMA_REJECTS)
def test_schema_rejects_malformed_documents(case: str) -> None:
    validator = schema_validator()
    doc = base_document()
    result = MALFORMED[case][0](doc)
    if isinstance(result, tuple) and result[:1] == ("replace",):
        doc = result[1]
    assert not validator.is_valid(doc)
