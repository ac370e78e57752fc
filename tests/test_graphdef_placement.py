"""Placement as TensorFlow had it: an imported GraphDef's device annotations and colocation attrs stay
on the Turnout nodes, export writes them back, and ``tn.Session(graph, devices=[...])`` places the
model where TensorFlow did, on the reference and the fast backend, with TensorFlow's values.
``allow_soft_placement`` resolves what TensorFlow resolves with its option of that name.

Hand-made GraphDefs for the name mapping and the closed forms; TensorFlow-made fixtures
(``placed_rnn``, ``placed_lstm_adam`` of tools/tf_fixtures.py, run by TensorFlow on two CPU devices) for
real models, and ``placed_gpu_fallback``, a model written for a GPU that TensorFlow ran on its CPU
with soft placement. Needs the ``tf`` extra, not TensorFlow."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.devices import canonical, place
from turnout.devices.placement import RESOURCE_USERS

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from turnout.graphdef import export_graph_def, import_graph_def, protos  # noqa: E402
from turnout.graphdef.placement import tf_device  # noqa: E402

DATA = Path(__file__).parent / "data" / "tf"
F32 = 1
D2 = ["cpu:0", "cpu:1"]


# ---- the names ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("tf_name", "turnout_name"), [
    ("", None),
    ("/device:CPU:0", "/device:CPU:0"),  # read as Turnout reads it: kept as written
    ("/cpu:1", "/cpu:1"),
    ("/job:worker/task:1/device:CPU:0", "/job:worker/task:1/device:CPU:0"),
    ("/job:localhost/replica:0/task:0/device:CPU:1", "/job:localhost/replica:0/task:0/device:CPU:1"),
    ("/device:XLA_CPU:1", "/job:localhost/task:0/device:CPU:1"),  # the CPU XLA compiles for
    ("/device:GPU:*", "/job:localhost/task:0/device:GPU:0"),  # any index: the first
    ("/task:1/job:worker/device:CPU:2", "/job:worker/task:1/device:CPU:2"),  # parts in any order
    ("/job:*/replica:*/task:*/device:CPU:0", "/job:localhost/task:0/device:CPU:0"),
])
def test_tensorflow_device_names_map_to_turnout_devices(tf_name: str, turnout_name: str | None) -> None:
    got = tf_device(tf_name)
    assert got == turnout_name
    if got is not None:
        assert canonical(got) == canonical(turnout_name)  # type: ignore[arg-type]


@pytest.mark.parametrize(("tf_name", "why"), [
    ("/device:CPU", "needs a type and an index"),
    ("/job:worker/replica:1/task:0/device:CPU:0", "no replicas"),
    ("/device:CPU:x", "not a number"),
    ("/task:one", "not a number"),
    ("gpu0", "has no ':'"),
    ("/job:a/job:b", "given twice"),
    ("/device:TPU_SYSTEM:0", "no Turnout counterpart"),
    ("/job:9lives", "job name"),
])
def test_an_unreadable_device_name_is_a_placement_error_naming_the_node(tf_name: str, why: str) -> None:
    g = GraphDef()
    g.node("x", "Const", value=np.float32(1), dtype=F32, device=tf_name)
    with pytest.raises(tn.PlacementError, match=f'Const node "x": cannot read TensorFlow device .*{why}'):
        import_graph_def(g.gd)


# ---- hand-made GraphDefs -----------------------------------------------------------------------------
class GraphDef:
    """A GraphDef written by hand: ``node(name, op, inputs, device=..., **attrs)``."""

    def __init__(self) -> None:
        self.gd = protos.pb().graph_pb2.GraphDef()

    def node(self, name: str, op: str, inputs: tuple[str, ...] = (), device: str = "",
             colocate: str | tuple[str, ...] = "", **attrs: Any) -> str:
        nd = self.gd.node.add()
        nd.name, nd.op, nd.device = name, op, device
        nd.input.extend(inputs)
        for target in (colocate,) if isinstance(colocate, str) and colocate else colocate:
            nd.attr["_class"].list.s.append(f"loc:@{target}".encode())
        for k, v in attrs.items():
            if k == "value":
                protos.numpy_to_tensor(np.asarray(v), nd.attr[k].tensor)
            elif k == "shape":
                nd.attr[k].shape.SetInParent()
                for d in v:
                    nd.attr[k].shape.dim.add().size = d
            else:
                nd.attr[k].type = v
        return name


W = np.asarray([[1.0, 2.0], [3.0, -1.0]], np.float32)
X = np.asarray([[0.5, -1.0]], np.float32)


def _model(conflict: bool = False, absent: bool = False) -> GraphDef:
    """x @ w on CPU:1, then + b and tanh on CPU:0, a Variable v on CPU:0 that the result is added to;
    v's read asks for CPU:1, which TensorFlow ignores (a resource op runs with its Variable).
    ``conflict``: the tanh is colocated with the MatMul on CPU:1 (``_class``) but asks for CPU:0, which
    TensorFlow runs only with soft placement. ``absent``: the tanh asks for a GPU the session lacks."""
    g = GraphDef()
    g.node("x", "Placeholder", dtype=F32, shape=[1, 2], device="/device:CPU:0")
    g.node("w", "Const", value=W, dtype=F32, device="/job:localhost/replica:0/task:0/device:CPU:1")
    g.node("b", "Const", value=np.float32(0.25), dtype=F32, device="/cpu:0")
    g.node("mm", "MatMul", ("x", "w"), T=F32, device="/device:CPU:1")
    g.node("add", "AddV2", ("mm", "b"), T=F32, device="/device:CPU:0")
    g.node("t", "Tanh", ("add",), T=F32, device="/device:GPU:0" if absent else "/device:CPU:0",
           colocate="mm" if conflict else "")
    g.node("v", "VarHandleOp", dtype=F32, shape=[1, 2], device="/device:CPU:0")
    g.node("init_value", "Const", value=np.ones((1, 2), np.float32), dtype=F32, device="/device:CPU:0")
    g.node("v/init", "AssignVariableOp", ("v", "init_value"), dtype=F32, device="/device:CPU:0")
    g.node("v/read", "ReadVariableOp", ("v",), dtype=F32, device="/device:CPU:1", colocate="v")
    g.node("y", "AddV2", ("t", "v/read"), T=F32, device="/device:CPU:1")
    return g


def _want() -> np.ndarray:
    return np.tanh(X @ W + 0.25) + 1.0


def _session(imp: Any, backend: str, devices: list[str], **options: Any) -> tn.Session:
    sess = tn.Session(imp.graph, backend=backend, devices=devices, **options)
    sess.run(imp.node("v/init"))
    return sess


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_imported_devices_place_the_model_where_tensorflow_did(backend: str) -> None:
    imp = import_graph_def(_model().gd)
    assert imp.node("mm").device == "/device:CPU:1"
    assert imp.node("w").device == "/job:localhost/replica:0/task:0/device:CPU:1"
    assert imp.node("v/read").device == "/device:CPU:0"  # TensorFlow ignores its CPU:1: it reads v
    sess = _session(imp, backend, D2)
    p = sess.backend.placement
    assert [parse_short(p[imp.node(n)]) for n in ("x", "mm", "add", "t", "v", "v/read", "y")] == \
        ["cpu:0", "cpu:1", "cpu:0", "cpu:0", "cpu:0", "cpu:0", "cpu:1"]
    (y,) = imp.run(sess, ["y:0"], {"x:0": X})
    np.testing.assert_allclose(y, _want(), rtol=1e-5)


def parse_short(name: str) -> str:
    from turnout.devices import parse

    return parse(name).short


def test_an_outer_device_scope_places_the_nodes_without_annotations() -> None:
    g = GraphDef()
    g.node("a", "Const", value=np.float32(2), dtype=F32)
    g.node("b", "Neg", ("a",), T=F32, device="/cpu:0")
    graph = tn.Graph()
    with graph.as_default(), tn.device("cpu:1"):
        imp = import_graph_def(g.gd, graph=graph)
    assert imp.node("a").device == "cpu:1" and imp.node("b").device == "/cpu:0"


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_soft_placement_resolves_a_colocation_conflict_by_the_colocation_rule(backend: str) -> None:
    """t is colocated with mm (CPU:1) but asks for CPU:0: an error as it stands; with
    allow_soft_placement t goes with mm (the earliest member of its group that asked for a device)."""
    imp = import_graph_def(_model(conflict=True).gd)
    with pytest.raises(tn.PlacementError, match=r'conflicting placement.*"t".*colocate_with\(mm\).*'
                                                r"allow_soft_placement=True"):
        tn.Session(imp.graph, backend=backend, devices=D2)
    sess = _session(imp, backend, D2, allow_soft_placement=True)
    p = sess.backend.placement
    assert parse_short(p[imp.node("t")]) == "cpu:1"
    assert "yields to mm on cpu:1" in p.why(imp.node("t")) and "allow_soft_placement" in p.why(imp.node("t"))
    (y,) = imp.run(sess, ["y:0"], {"x:0": X})
    np.testing.assert_allclose(y, _want(), rtol=1e-5)


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_soft_placement_moves_an_absent_device_to_one_of_its_task(backend: str) -> None:
    imp = import_graph_def(_model(absent=True).gd)
    with pytest.raises(tn.PlacementError, match=r'Tanh node "t"|"t".*not one of the devices'):
        tn.Session(imp.graph, backend=backend, devices=D2)
    sess = _session(imp, backend, D2, allow_soft_placement=True)
    assert parse_short(sess.backend.placement[imp.node("t")]) == "cpu:0"
    (y,) = imp.run(sess, ["y:0"], {"x:0": X})
    np.testing.assert_allclose(y, _want(), rtol=1e-5)


def test_soft_placement_drops_a_request_for_another_task() -> None:
    """A device of a task the session does not list: the request is dropped, the defaults place it."""
    g = GraphDef()
    g.node("a", "Const", value=np.float32(2), dtype=F32, device="/cpu:1")
    g.node("b", "Neg", ("a",), T=F32, device="/job:worker/task:3/device:CPU:0")
    imp = import_graph_def(g.gd)
    with pytest.raises(tn.PlacementError, match="not one of the devices"):
        place(imp.graph, D2)
    p = place(imp.graph, D2, allow_soft_placement=True)
    assert parse_short(p[imp.node("b")]) == "cpu:1"  # follows its input, as an unscoped node does
    assert "request is dropped" in p.why(imp.node("b"))


def test_soft_placement_must_be_a_flag() -> None:
    imp = import_graph_def(_model().gd)
    with pytest.raises(tn.ArgumentError, match="allow_soft_placement"):
        tn.Session(imp.graph, devices=D2, allow_soft_placement="yes")


def test_a_partial_annotation_merges_into_the_device_scope_of_the_import() -> None:
    """As TensorFlow merges a node's device into the scope of ``tf.import_graph_def``: the parts an
    annotation does not name come from the scope; a full annotation is kept as written."""
    g = GraphDef()
    g.node("a", "Const", value=np.float32(2), dtype=F32, device="/device:CPU:0")
    g.node("b", "Neg", ("a",), T=F32, device="/job:ps")
    g.node("c", "Neg", ("b",), T=F32, device="/job:localhost/replica:0/task:0/device:CPU:0")
    g.node("d", "Neg", ("c",), T=F32)
    graph = tn.Graph()
    with graph.as_default(), tn.device("/job:worker/task:1/device:CPU:1"):
        imp = import_graph_def(g.gd, graph=graph)
    assert [imp.node(n).device for n in "abcd"] == [
        "/job:worker/task:1/device:CPU:0", "/job:ps/task:1/device:CPU:1",
        "/job:localhost/replica:0/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:1"]
    assert tf_device("/cpu:0", scope="/job:worker/task:2") == "/job:worker/task:2/device:CPU:0"
    assert tf_device("/device:CPU:0", scope="cpu:0") == "/device:CPU:0"  # nothing to merge: as written


def test_devices_and_colocation_round_trip_through_export() -> None:
    imp = import_graph_def(_model(conflict=True).gd)
    assert imp.graph.colocation[imp.node("v/read").id] == (imp.node("v").id,)
    out = export_graph_def(imp.graph).graph_def
    by_name = {nd.name: nd for nd in out.node}
    for nd in _model(conflict=True).gd.node:  # as written, but the device TensorFlow gives v/read
        assert by_name[nd.name].device == ("/device:CPU:0" if nd.name == "v/read" else nd.device), nd.name
    assert list(by_name["v/read"].attr["_class"].list.s) == [b"loc:@v"]
    assert list(by_name["t"].attr["_class"].list.s) == [b"loc:@mm"]
    again = import_graph_def(out)
    for name in ("x", "mm", "add", "t", "v", "v/read", "y"):
        assert again.node(name).device == imp.node(name).device
    assert again.graph.colocation[again.node("v/read").id] == (again.node("v").id,)
    assert again.graph.colocation[again.node("t").id] == (again.node("mm").id,)


def _tied(b_device: str) -> GraphDef:
    """c = a + b with ``_class: ["loc:@a", "loc:@b"]``: a on CPU:1, b on ``b_device`` ("" for none)."""
    g = GraphDef()
    g.node("a", "Const", value=np.float32(2), dtype=F32, device="/cpu:1")
    g.node("b", "Const", value=np.float32(3), dtype=F32, device=b_device)
    g.node("c", "AddV2", ("a", "b"), T=F32, colocate=("a", "b"))
    g.node("d", "Neg", ("c",), T=F32, device="/cpu:0")
    return g


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_every_entry_of_a_colocation_attr_ties(backend: str) -> None:
    """A ``_class`` naming two nodes ties the node to both, so the two share its device too (as
    TensorFlow's placer groups them): b, which asked for nothing, goes with a to CPU:1. If they ask
    for different devices, that is a conflict, resolved by the colocation rule under soft placement
    (the three take the device of the earliest-built of a and b). Export writes both entries back."""
    imp = import_graph_def(_tied("").gd)
    assert imp.graph.colocation[imp.node("c").id] == (imp.node("a").id, imp.node("b").id)
    sess = tn.Session(imp.graph, backend=backend, devices=D2)
    p = sess.backend.placement
    assert [parse_short(p[imp.node(n)]) for n in ("a", "b", "c", "d")] == ["cpu:1", "cpu:1", "cpu:1", "cpu:0"]
    assert imp.run(sess, ["d:0"], {}) == [-5.0]
    out = export_graph_def(imp.graph).graph_def
    assert list({nd.name: nd for nd in out.node}["c"].attr["_class"].list.s) == [b"loc:@a", b"loc:@b"]
    clash = import_graph_def(_tied("/cpu:0").gd)
    with pytest.raises(tn.PlacementError, match=r'conflicting placement.*(("a".*"b")|("b".*"a")).*colocate_with\(b\)'):
        tn.Session(clash.graph, backend=backend, devices=D2)
    soft = tn.Session(clash.graph, backend=backend, devices=D2, allow_soft_placement=True)
    assert len({soft.backend.placement[clash.node(n)] for n in ("a", "b", "c")}) == 1
    assert clash.run(soft, ["d:0"], {}) == [-5.0]


# ---- TensorFlow-made models, placed on two CPU devices ---------------------------------------------------
def _replay(case: str, backend: str, devices: list[str], **options: Any) -> tn.Session:
    meta = json.loads((DATA / f"{case}.json").read_text())
    imp = import_graph_def(DATA / f"{case}.pbtxt")
    sess = tn.Session(imp.graph, backend=backend, devices=devices, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a fallback to the interpreter is still checked
        sess.run(imp.node("init"))
        for r in meta["runs"]:
            feeds = {imp.tensor(k): np.asarray(v) for k, v in r["feeds"].items()}
            fetches = [imp.tensor(f) for f in r["fetches"]] + [imp.node(t) for t in r.get("targets", [])]
            out = sess.run(fetches, feeds)
            for name, got, want in zip(r["fetches"], out, r["expected"]):
                np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5, err_msg=f"{case}: {name} on {backend}")
    return sess


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_tensorflow_placed_rnn_trains_on_two_devices(backend: str) -> None:
    sess = _replay("placed_rnn", backend, D2)
    used = {parse_short(d) for d in sess.backend.placement.device_of.values()}
    assert used == {"cpu:0", "cpu:1"}


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_tensorflow_lstm_placed_over_two_devices_trains_with_tensorflows_values(backend: str) -> None:
    """TensorFlow ran this model only with allow_soft_placement: its gradient TensorArrays are
    colocated with the forward arrays on CPU:1 but scoped to CPU:0. A Turnout TensorArray is a value
    on its flow edge, not a resource, so nothing ties them here: the model runs as placed, and the
    optimizer's updates (scoped to CPU:0) run with their Variables on CPU:1, as TensorFlow runs them."""
    assert json.loads((DATA / "placed_lstm_adam.json").read_text())["session_config"]["allow_soft_placement"]
    sess = _replay("placed_lstm_adam", backend, D2)
    used = {parse_short(d) for d in sess.backend.placement.device_of.values()}
    assert used == {"cpu:0", "cpu:1"}


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_model_written_for_a_gpu_runs_on_cpus_with_soft_placement(backend: str) -> None:
    """TensorFlow ran this GPU-annotated model on a CPU-only machine only with allow_soft_placement;
    Turnout refuses it on CPU devices without the option, and with it moves the GPU's ops to CPU:0 (the
    first listed device of their task) and gives TensorFlow's losses and weights."""
    assert json.loads((DATA / "placed_gpu_fallback.json").read_text())["session_config"]["allow_soft_placement"]
    imp = import_graph_def(DATA / "placed_gpu_fallback.pbtxt")
    assert imp.node("w").device == "/device:GPU:0"
    with pytest.raises(tn.PlacementError, match=r"GPU:0.*not one of the devices.*allow_soft_placement=True"):
        tn.Session(imp.graph, backend=backend, devices=D2)
    sess = _replay("placed_gpu_fallback", backend, D2, allow_soft_placement=True)
    p = sess.backend.placement
    assert parse_short(p[imp.node("w")]) == "cpu:0"
    assert "asked for gpu:0" in p.why(imp.node("w"))


def test_the_tensorflow_fixtures_keep_every_annotation() -> None:
    for case in ("placed_rnn", "placed_lstm_adam", "placed_gpu_fallback"):
        gd = protos.pb().graph_pb2.GraphDef()
        from google.protobuf import text_format

        text_format.Parse((DATA / f"{case}.pbtxt").read_text(), gd)
        imp = import_graph_def(gd)
        moved = 0
        for nd in gd.node:
            if nd.name in imp.controls and imp.node(nd.name).device != (nd.device or None):
                # only where TensorFlow ignores the annotation: a resource op scoped away from its Variable
                n = imp.node(nd.name)
                assert n.op in RESOURCE_USERS, nd.name
                moved += 1
        assert moved < len(gd.node) // 10
