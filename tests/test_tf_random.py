"""TensorFlow's random ops (``turnout.tf_random``) and the variable initializers built from
them: the draws equal TensorFlow's bit for bit (tests/data/tf_random_streams.json, written by
tools/tf_random_fixtures.py), imported models start from TensorFlow's initial values, random ops
of the run graph draw TensorFlow's stream, and random ops the importer cannot honour are refused,
naming the op."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout import tf_random
from turnout.errors import ArgumentError, UnsupportedError

DATA = Path(__file__).parent / "data"
DRAWS = json.loads((DATA / "tf_random_streams.json").read_text())["draws"]


def _by_op(op: str) -> list[dict[str, Any]]:
    return [d for d in DRAWS if d["op"] == op]


@pytest.mark.parametrize("op", ["RandomUniform", "RandomStandardNormal", "TruncatedNormal", "RandomUniformInt"])
def test_seeded_draws_equal_tensorflows_bit_for_bit(op: str) -> None:
    """Law: for every seed pair, shape and dtype, the first draw of a seeded op is TensorFlow's CPU
    kernel's output, byte for byte (Philox, its grouping and counter skips, the float conversions,
    Box-Muller and the truncation's rejections)."""
    for d in _by_op(op):
        got = tf_random.sample(op, op, np.asarray(d["shape"], np.int32), np.dtype(d["dtype"]), d["seed"],
                               d["seed2"], d.get("bounds", ()))
        want = np.frombuffer(bytes.fromhex(d["bits"]), np.dtype(d["dtype"]).newbyteorder("<")).reshape(d["shape"])
        assert got.dtype == np.dtype(d["dtype"]) and got.shape == tuple(d["shape"])
        assert got.tobytes() == want.astype(got.dtype).tobytes(), (op, d["dtype"], d["shape"], d["seed"], d["seed2"])


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_later_runs_draw_where_tensorflows_counter_moved(backend: str) -> None:
    """Law: run ``k`` of a stateful op of ``n`` outputs draws from Philox call ``256 n k`` on
    (TensorFlow reserves 256 calls per output): the fixture's second and third outputs of each op in
    one TensorFlow session are ``tf_random.draw``'s from there, and ``tn.random``'s ops of those seeds
    give them at their second and third runs on every backend (normals within rounding on the fast
    backend, docs/random.rst)."""
    later = [d for d in DRAWS if "later" in d]
    assert len(later) == 24
    build = {"RandomUniform": tn.random.uniform, "RandomStandardNormal": tn.random.normal,
             "TruncatedNormal": tn.random.truncated_normal}
    g = tn.Graph()
    with g.as_default():
        tn.random.set_random_seed(1)  # (the fixture's key is (1, 2): graph seed 1, op seed 2)
        ops = [tn.random.uniform(d["shape"], *d["bounds"], dtype=d["dtype"], seed=2) if "bounds" in d
               else build[d["op"]](d["shape"], dtype=d["dtype"], seed=2) for d in later]
    sess = tn.Session(g, backend=backend)
    runs = [sess.run(ops) for _ in range(3)]
    for i, d in enumerate(later):
        dtype = np.dtype(d["dtype"]).newbyteorder("<")
        for k, bits in enumerate([d["bits"], *d["later"]]):
            want = np.frombuffer(bytes.fromhex(bits), dtype).reshape(d["shape"])
            drawn = tf_random.draw(d["op"], d["op"], d["shape"], np.dtype(d["dtype"]), 1, 2,
                                   k * 256 * int(np.prod(d["shape"])), d.get("bounds", ()))
            assert drawn.tobytes() == want.astype(drawn.dtype).tobytes(), (d["op"], d["dtype"], d["shape"], k)
            if backend == "reference" or d["op"] == "RandomUniform" or "bounds" in d:
                assert runs[k][i].tobytes() == drawn.tobytes(), (d["op"], d["dtype"], d["shape"], k)
            else:
                np.testing.assert_allclose(runs[k][i], drawn, rtol=1e-6, atol=1e-7)


def test_philox_matches_the_published_known_answers() -> None:
    """Law: Philox4x32-10 is Salmon et al.'s generator: the known-answer vectors of Random123 (counter
    and key all zeros; all ones; the digits of pi)."""
    cases = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
             ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
             ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
              (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for ctr, key, want in cases:
        out = tf_random.philox(key[0] | key[1] << 32, ctr[2] | ctr[3] << 32, np.asarray([ctr[0] | ctr[1] << 32]))
        assert tuple(int(w) for w in out[0]) == want


def test_the_draws_are_what_tensorflow_draws() -> None:
    """Where TensorFlow is installed (``TURNOUT_TF_PYTHON`` names its Python, or this one has it),
    every draw of the fixture is made again in TensorFlow and compared with the checked-in bytes."""
    python = os.environ.get("TURNOUT_TF_PYTHON") or (sys.executable if importlib.util.find_spec("tensorflow")
                                                      else None)
    if python is None:
        pytest.skip("TensorFlow is not installed (set TURNOUT_TF_PYTHON to a Python with tensorflow)")
    tool = Path(__file__).resolve().parent.parent / "tools" / "tf_random_fixtures.py"
    done = subprocess.run([python, str(tool), "--check"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_unseeded_draws_differ_from_run_to_run() -> None:
    """Law: seed = seed2 = 0 is TensorFlow's "unseeded": a fresh key per draw, so two draws differ
    (as in TensorFlow), and each is still a uniform draw in [0, 1)."""
    a, b = (tf_random.sample("RandomUniform", "u", np.asarray([64]), np.dtype(np.float32), 0, 0) for _ in range(2))
    assert not np.array_equal(a, b)
    assert a.min() >= 0.0 and a.max() < 1.0 and 0.3 < a.mean() < 0.7


# ---- the importer -------------------------------------------------------------------------------------
def import_graph_def(source: Any) -> Any:
    """``tn.import_graph_def``, for the tests that need the ``tf`` extra's protobuf definitions."""
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")
    from turnout.graphdef import import_graph_def as imp

    return imp(source)

_SHAPE = ('node {{ name: "shape" op: "Const" attr {{ key: "dtype" value {{ type: {dt} }} }} attr {{ key: "value" '
          'value {{ tensor {{ dtype: {dt} tensor_shape {{ {dims} }} {vals} }} }} }} }}')
_RANDOM = ('node {{ name: "w/Initializer/r" op: "{op}" input: "shape" {extra} '
           'attr {{ key: "{key}" value {{ type: {dt} }} }} attr {{ key: "T" value {{ type: DT_INT32 }} }} '
           'attr {{ key: "seed" value {{ i: {seed} }} }} attr {{ key: "seed2" value {{ i: {seed2} }} }} }}')
_VAR = ('node { name: "w" op: "VarHandleOp" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" '
        'value { shape { unknown_rank: true } } } attr { key: "shared_name" value { s: "w" } } }\n'
        'node { name: "w/Assign" op: "AssignVariableOp" input: "w" input: "w/Initializer/r" attr { key: "dtype" '
        'value { type: DT_FLOAT } } }\n'
        'node { name: "read" op: "ReadVariableOp" input: "w" attr { key: "dtype" value { type: DT_FLOAT } } }')


def _graph(shape: list[Any], op: str = "RandomUniform", dt: str = "DT_FLOAT", shape_dt: str = "DT_INT32",
           seed: int = 1, seed2: int = 2, extra: str = "", nodes: str = _VAR, dims: str = "") -> Any:
    vals = " ".join(f"{'float' if shape_dt == 'DT_FLOAT' else 'int'}_val: {v}" for v in shape)
    text = "\n".join([_SHAPE.format(dt=shape_dt, dims=dims or f"dim {{ size: {len(shape)} }}", vals=vals),
                      _RANDOM.format(op=op, extra=extra, key="Tout" if op == "RandomUniformInt" else "dtype", dt=dt,
                                     seed=seed, seed2=seed2), nodes])
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")
    from google.protobuf import text_format

    from turnout.graphdef import protos

    return text_format.Parse(text, protos.pb().graph_pb2.GraphDef())


def test_a_seeded_initializer_imports_as_tensorflows_draw() -> None:
    """Law: a variable whose initializer is a seeded RandomUniform starts with TensorFlow's draw (the
    fixture's bytes), and its Assign writes those very values, on the reference and fast backends."""
    d = next(d for d in _by_op("RandomUniform") if d["dtype"] == "float32" and d["shape"] == [2, 7]
             and (d["seed"], d["seed2"]) == (1, 2))
    want = np.frombuffer(bytes.fromhex(d["bits"]), "<f4").reshape(2, 7)
    imp = import_graph_def(_graph([2, 7]))
    assert imp.graph.variables["w"].attrs["initial_value"].tobytes() == want.tobytes()
    for backend in ("reference", "fast"):
        sess = tn.Session(imp.graph, backend=backend)
        sess.run(imp.node("w/Assign"))
        assert sess.run(imp.tensor("read")).tobytes() == want.tobytes()


@pytest.mark.parametrize("case", ["mlp_random_init", "lstm_random_init"])
def test_imported_models_start_from_tensorflows_initial_values(case: str) -> None:
    """Law: the initial values of a model TF1 code initialised with its default random initializers
    (glorot_uniform, truncated_normal, random_normal, he_normal, under set_random_seed) are TensorFlow's
    bit for bit (the fixture's first run fetches them after TensorFlow's initializer), and running the
    imported ``init`` writes the same bits on every backend."""
    meta = json.loads((DATA / "tf" / f"{case}.json").read_text())
    imp = import_graph_def(DATA / "tf" / f"{case}.pbtxt")
    first = meta["runs"][0]
    got = tn.Session(imp.graph).run([imp.tensor(f) for f in first["fetches"]])  # nothing run before: the initial values
    assert len(got) >= 3
    for fetch, g, want in zip(first["fetches"], got, first["expected"], strict=True):
        assert g.tobytes() == np.asarray(want, g.dtype).tobytes(), fetch
    for backend in ("reference", "fast"):  # TensorFlow's ``init`` writes those very values again
        sess = tn.Session(imp.graph, backend=backend)
        sess.run(imp.node("init"))
        again = sess.run([imp.tensor(f) for f in first["fetches"]])
        assert all(a.tobytes() == g.tobytes() for a, g in zip(again, got, strict=True)), backend


def test_an_initializer_assign_writes_the_folded_draw() -> None:
    """Law: the Assign of a random initializer (glorot_uniform: ``RandomUniform * range + minval``)
    writes the value folded at import, a constant equal to the Variable's initial value, not the
    arithmetic again (which a backend may compute otherwise: a GPU contracts ``a * b + c`` into an FMA)."""
    imp = import_graph_def(DATA / "tf" / "mlp_random_init.pbtxt")
    assign = imp.node("hidden/kernel/Assign")
    written = assign.raw_inputs[1]
    assert written.node.op == "Const"
    initial = imp.graph.variables["hidden/kernel"].attrs["initial_value"]
    assert written.node.attrs["value"].tobytes() == initial.tobytes()


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"shape": [-1, 3]}, ArgumentError, "has a negative dimension"),
    ({"shape": [2.0, 3.0], "shape_dt": "DT_FLOAT"}, ArgumentError, "must be a 1-D int32 or int64 tensor"),
    ({"shape": [2, 3], "dims": "dim { size: 1 } dim { size: 2 }"}, ArgumentError, "must be a 1-D"),
    ({"shape": [2], "dt": "DT_HALF"}, UnsupportedError, "float16 has no Turnout counterpart"),
    ({"shape": [2], "dt": "DT_INT32"}, UnsupportedError, "dtype int32 is not supported"),
])
def test_bad_random_op_arguments_are_errors_naming_the_op(kwargs: dict[str, Any], error: type, match: str) -> None:
    """Law: a random op of a bad shape or dtype is a Turnout error naming the op, never numpy's."""
    with pytest.raises(error, match=match) as e:
        import_graph_def(_graph(**kwargs))
    assert 'node "w/Initializer/r"' in str(e.value)


def test_uniform_int_needs_minval_below_maxval() -> None:
    bounds = ('node { name: "lo" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "value" '
              'value { tensor { dtype: DT_INT32 tensor_shape {} int_val: 5 } } } }\n'
              'node { name: "hi" op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "value" '
              'value { tensor { dtype: DT_INT32 tensor_shape {} int_val: 5 } } } }\n')
    gd = _graph([3], op="RandomUniformInt", dt="DT_INT32", extra='input: "lo" input: "hi"',
                nodes=bounds + _VAR.replace("DT_FLOAT", "DT_INT32"))
    with pytest.raises(ArgumentError, match='RandomUniformInt node "w/Initializer/r": it needs minval < maxval'):
        import_graph_def(gd)


@pytest.mark.parametrize("use", [
    # the run graph draws from it (a dropout mask): a new draw every step in TensorFlow
    'node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }\n'
    'node { name: "y" op: "AddV2" input: "x" input: "w/Initializer/r" attr { key: "T" value { type: DT_FLOAT } } }',
    # an assign that is not the variable's initializer (a "re-randomize" op): each run draws again
    _VAR.replace('name: "w/Assign"', 'name: "reset"'),
])
def test_a_random_op_outside_initializers_draws_anew_at_each_run(use: str) -> None:
    """Law: a random op whose value the graph uses as it runs is TensorFlow's stateful op: its k-th
    run draws TensorFlow's k-th values (the stored first draw, then the stream 256 calls per output
    on), on the reference and fast backends; never a constant."""
    d = next(d for d in _by_op("RandomUniform") if d["dtype"] == "float32" and d["shape"] == [3]
             and (d["seed"], d["seed2"]) == (1, 2))
    first = np.frombuffer(bytes.fromhex(d["bits"]), "<f4")
    imp = import_graph_def(_graph([3], nodes=use if "reset" in use else _VAR + "\n" + use))
    fetch = imp.tensor("w/Initializer/r")
    for backend in ("reference", "fast"):
        sess = tn.Session(imp.graph, backend=backend)
        runs = [sess.run(fetch) for _ in range(3)]
        assert runs[0].tobytes() == first.tobytes(), backend
        for k in (1, 2):
            assert runs[k].tobytes() == tf_random.uniform(1, 2, 3, np.dtype(np.float32), k * 3 * 256).tobytes()


def test_an_empty_uniform_int_needs_no_range() -> None:
    """Law (TensorFlow's kernel): minval < maxval is checked only when there is an element to draw;
    the bounds must be scalars either way."""
    out = tf_random.sample("RandomUniformInt", "u", np.asarray([0, 3]), np.dtype(np.int32), 1, 2, (5, 5))
    assert out.shape == (0, 3) and out.dtype == np.int32
    with pytest.raises(ArgumentError, match="u: minval and maxval must be scalars"):
        tf_random.sample("RandomUniformInt", "u", np.asarray([2]), np.dtype(np.int32), 1, 2, ([5, 6], 9))


def test_a_random_op_in_a_cond_inside_a_tensorflow_loop_is_refused() -> None:
    """Law: a draw in a cond branch inside a TensorFlow while loop is refused, naming the op (its
    executions could not be ordered across iterations: docs/random.rst). The graph is TensorFlow
    2.21's ``while_loop`` whose body is ``cond(i > 1, lambda: nn.dropout(x, 0.5), lambda: x)``."""
    with pytest.raises(UnsupportedError, match='RandomUniform node "while/cond/dropout/random_uniform/RandomUniform": '
                                               "a random op in a cond inside a TensorFlow while loop"):
        import_graph_def(DATA / "random_in_loop_cond.pbtxt")
