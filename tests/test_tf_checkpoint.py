"""TensorFlow v1 checkpoints without TensorFlow (``turnout.tf_checkpoint``).

Checkpoints that TensorFlow 2.21's ``tf.compat.v1.train.Saver`` wrote (``tests/data/tf/ckpt/``, made
by ``tools/tf_checkpoint_fixtures.py``) are read with numpy alone and compared with the values
TensorFlow reported; what Turnout writes reads back exactly, for every dtype, and byte for byte as
TensorFlow wrote it; damaged files are only ``SerializationError``. Where TensorFlow is installed,
TensorFlow restores what Turnout wrote.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import byte_mutations

import turnout as tn
from turnout import checkpoint, crc32c
from turnout import tf_checkpoint as tfc

FIXTURES = Path(__file__).resolve().parent / "data" / "tf" / "ckpt"
SHAPES = [(), (0,), (3,), (2, 0, 4), (2, 3), (1, 1, 1, 2)]


def _values(dtype: np.dtype[Any], shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    if dtype.kind == "c":
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)
    return rng.normal(size=shape).astype(dtype)


def _expected(entry: dict[str, Any]) -> np.ndarray:
    dtype = np.dtype(entry["dtype"].replace("half", "float16"))
    value = np.array(entry["value"])
    if dtype.kind == "c":
        value = value[..., 0] + 1j * value[..., 1]
    return value.astype(dtype).reshape(entry["shape"])


def _fixture(case: str) -> tuple[Path, dict[str, Any]]:
    return FIXTURES / case / "model", json.loads((FIXTURES / f"{case}.json").read_text())["tensors"]


# ---- CRC-32C -------------------------------------------------------------------------------------------
def test_crc32c_of_the_standard_check_string() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283
    assert crc32c.crc32c(b"") == 0
    assert crc32c.unmask(crc32c.mask(0x12345678)) == 0x12345678


@given(data=st.binary(max_size=3000), cut=st.integers(0, 3000))
def test_crc32c_lanes_equal_the_byte_loop(data: bytes, cut: int) -> None:
    """The vectorised path (lanes folded together) against the plain table loop, on inputs split at
    any point and extended (the lanes path is forced for every size here)."""
    want = crc32c._raw(0xFFFFFFFF, data) ^ 0xFFFFFFFF
    assert crc32c._raw_lanes(0xFFFFFFFF, data) ^ 0xFFFFFFFF == want
    cut = min(cut, len(data))
    assert crc32c.crc32c(data[cut:], crc32c.crc32c(data[:cut])) == want


def test_crc32c_of_a_long_input_uses_lanes_and_agrees() -> None:
    data = np.random.default_rng(0).integers(0, 256, size=crc32c.VECTOR_MIN_BYTES * 3 + 17, dtype=np.uint8).tobytes()
    assert crc32c.crc32c(data) == crc32c._raw(0xFFFFFFFF, data) ^ 0xFFFFFFFF


# ---- round trips ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", sorted(tfc.TF_DTYPES.values(), key=str), ids=str)
def test_every_dtype_and_shape_round_trips(dtype: np.dtype[Any], tmp_path: Path) -> None:
    values = {f"v/{k}": _values(dtype, shape, k) for k, shape in enumerate(SHAPES)}
    prefix = tmp_path / "model"
    assert tfc.write_tf(prefix, values) == sorted(values)
    back = tfc.read_tf(prefix)
    assert sorted(back) == sorted(values)
    for name, want in values.items():
        assert back[name].dtype == dtype and back[name].shape == want.shape, name
        np.testing.assert_array_equal(back[name], want)
    assert tfc.list_tf(prefix) == {n: (dtype.name, v.shape) for n, v in values.items()}


def test_many_blocks_and_shards_round_trip(tmp_path: Path) -> None:
    """Tiny data blocks (one or two entries each, shared key prefixes) and three data files."""
    values = {f"layer_{k // 3}/cell/w{k}": _values(np.dtype(np.float32), (k % 4, 2), k) for k in range(40)}
    prefix = tmp_path / "sub" / "model"
    tfc.write_tf(prefix, values, num_shards=3, block_bytes=40)
    assert sorted(os.listdir(tmp_path / "sub")) == ["model.data-00000-of-00003", "model.data-00001-of-00003",
                                                    "model.data-00002-of-00003", "model.index"]
    back = tfc.read_tf(prefix)
    for name, want in values.items():
        np.testing.assert_array_equal(back[name], want)
    assert list(tfc.read_tf(prefix, ["layer_2/cell/w7", "layer_0/cell/w1"])) == ["layer_2/cell/w7", "layer_0/cell/w1"]
    with pytest.raises(tn.NotFoundError, match="nope"):
        tfc.read_tf(prefix, ["nope"])


def test_big_endian_checkpoints_are_read(tmp_path: Path) -> None:
    """The header's byte order is honoured (TensorFlow writes little-endian; a big-endian machine's
    checkpoint says so in its header)."""
    values = {"a": np.arange(6, dtype=np.int32).reshape(2, 3), "b": np.float64(-1.5)}
    prefix = tmp_path / "m"
    tfc.write_tf(prefix, {k: np.asarray(v).byteswap() for k, v in values.items()})
    index = (tmp_path / "m.index").read_bytes()
    header = tfc._encode_header(1)
    items = [(k, v) for k, v in tfc._table(index, "x")]
    items[0] = (b"", header + tfc._enc_int(2, 1))
    (tmp_path / "m.index").write_bytes(tfc._write_table(items, tfc.BLOCK_BYTES))
    back = tfc.read_tf(prefix)
    for name, want in values.items():
        np.testing.assert_array_equal(back[name], want)


def test_arrays_of_either_byte_order_are_written_by_value(tmp_path: Path) -> None:
    big = np.array([1, -2, 300], dtype=">i4")
    tfc.write_tf(tmp_path / "m", {"big": big, "little": big.astype("<i4")})
    back = tfc.read_tf(tmp_path / "m")
    assert back["big"].dtype == np.int32
    np.testing.assert_array_equal(back["big"], [1, -2, 300])
    np.testing.assert_array_equal(back["little"], [1, -2, 300])


def test_write_refuses_what_a_checkpoint_cannot_hold(tmp_path: Path) -> None:
    with pytest.raises(tn.ArgumentError, match="supported: bool, complex128"):
        tfc.write_tf(tmp_path / "m", {"s": np.array(["a"])})
    with pytest.raises(tn.ArgumentError, match="non-empty"):
        tfc.write_tf(tmp_path / "m", {"": np.zeros(2)})
    with pytest.raises(tn.ArgumentError, match="num_shards"):
        tfc.write_tf(tmp_path / "m", {"a": np.zeros(2)}, num_shards=0)


# ---- TensorFlow's own checkpoints ----------------------------------------------------------------------
@pytest.mark.parametrize("case", ["dtypes", "sharded"])
def test_tensorflow_checkpoints_read_without_tensorflow(case: str) -> None:
    prefix, tensors = _fixture(case)
    got = checkpoint.read_tf(prefix)
    assert sorted(got) == sorted(tensors)
    for name, entry in tensors.items():
        want = _expected(entry)
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        np.testing.assert_array_equal(got[name], want)
    assert checkpoint.list_tf(prefix) == {n: (_expected(e).dtype.name, tuple(e["shape"])) for n, e in tensors.items()}


def test_the_sharded_fixture_has_two_data_files() -> None:
    prefix, tensors = _fixture("sharded")
    files = sorted(p.name for p in prefix.parent.iterdir())
    assert files == ["model.data-00000-of-00002", "model.data-00001-of-00002", "model.index"]
    _, header, entries = tfc._index(prefix)
    assert header.num_shards == 2 and {e.shard for e in entries.values()} == {0, 1}


def test_turnout_writes_the_bytes_tensorflow_wrote(tmp_path: Path) -> None:
    """Rewriting TensorFlow's checkpoint gives TensorFlow's data file byte for byte, and an index
    holding the same header and entries (TensorFlow shortens its index keys; Turnout keeps them)."""
    prefix, _ = _fixture("dtypes")
    ours = tmp_path / "model"
    tfc.write_tf(ours, tfc.read_tf(prefix))
    assert (tmp_path / "model.data-00000-of-00001").read_bytes() == Path(
        f"{prefix}.data-00000-of-00001").read_bytes()
    theirs_items = tfc._table(Path(f"{prefix}.index").read_bytes(), "tf")
    ours_items = tfc._table((tmp_path / "model.index").read_bytes(), "ours")
    assert ours_items == theirs_items


def test_a_string_tensor_is_listed_and_refused_by_name() -> None:
    prefix, tensors = _fixture("strings")
    assert checkpoint.list_tf(prefix)["vocab"] == ("string", (2,))
    with pytest.raises(tn.SerializationError, match=r"'vocab' has dtype string.*supported: bool, complex128"):
        checkpoint.read_tf(prefix)
    np.testing.assert_array_equal(checkpoint.read_tf(prefix, ["w"])["w"], _expected(tensors["w"]))


def test_a_partitioned_variable_is_listed_whole_and_refused_by_name() -> None:
    """TensorFlow stores a partitioned Variable as an entry listing its slices plus one entry per
    slice under encoded keys; Turnout lists the whole Variable, hides the slice keys, and refuses to
    read it (the other tensors still read)."""
    prefix, tensors = _fixture("partitioned")
    assert checkpoint.list_tf(prefix) == {"emb": ("float32", (4, 2)), "w": ("float32", (2,))}
    with pytest.raises(tn.SerializationError, match=r"'emb' is stored in slices"):
        checkpoint.read_tf(prefix)
    np.testing.assert_array_equal(checkpoint.read_tf(prefix, ["w"])["w"], _expected(tensors["w"]))


# ---- sessions ------------------------------------------------------------------------------------------
def _turnout_model() -> tuple[tn.Graph, tn.Tensor]:
    """Variables named as the fixture's, in Turnout's dtypes, and an update of two of them."""
    g = tn.Graph()
    with g.as_default():
        k = tn.Variable(np.zeros((5, 8), np.float32), name="rnn/lstm_cell/kernel")
        tn.Variable(np.zeros(8, np.float32), name="rnn/lstm_cell/bias")
        tn.Variable(np.zeros((2, 3)), name="dense/w")
        step = tn.Variable(np.int64(0), name="global_step", trainable=False)
        tn.Variable(np.zeros(3, np.int32), name="counts", trainable=False)
        tn.Variable(np.zeros((2, 2), bool), name="mask", trainable=False)
        train = tn.group(k.assign_add(tn.ones([5, 8])), step.assign_add(tn.constant(np.int64(1))))
    return g, train


def test_restore_a_tensorflow_checkpoint_train_and_save_it_back(backend: str, tmp_path: Path) -> None:
    prefix, tensors = _fixture("dtypes")
    g, train = _turnout_model()
    s = tn.Session(g, backend=backend)
    restored = checkpoint.restore_tf(s, prefix)
    assert restored == sorted(g.variables)
    for name in g.variables:
        np.testing.assert_array_equal(s.run(_variable(g, name)), _expected(tensors[name]))
    s.run(train)
    out = tmp_path / "trained"
    assert checkpoint.save_tf(s, out) == sorted(g.variables)
    back = checkpoint.read_tf(out)
    np.testing.assert_array_equal(back["rnn/lstm_cell/kernel"], _expected(tensors["rnn/lstm_cell/kernel"]) + 1)
    assert back["global_step"] == 8 and back["global_step"].dtype == np.int64
    np.testing.assert_array_equal(back["mask"], _expected(tensors["mask"]))


def _variable(g: tn.Graph, name: str) -> tn.Variable:
    (v,) = [v for v in g.variable_objects if v.name == name]
    return v


def test_restore_checks_names_dtypes_and_shapes(tmp_path: Path) -> None:
    prefix, tensors = _fixture("dtypes")
    g = tn.Graph()
    with g.as_default():
        a = tn.Variable(np.zeros(8, np.float32), name="bias")
        b = tn.Variable(np.zeros(3), name="absent")
    s = tn.Session(g)
    with pytest.raises(tn.SerializationError, match=r"no tensors named \['absent', 'bias'\].*strict=False"):
        checkpoint.restore_tf(s, prefix)
    assert checkpoint.restore_tf(s, prefix, strict=False) == []
    assert checkpoint.restore_tf(s, prefix, name_map={"rnn/lstm_cell/bias": "bias"}) == ["bias"]
    np.testing.assert_array_equal(s.run(a), _expected(tensors["rnn/lstm_cell/bias"]))
    with pytest.raises(tn.SerializationError, match=r"'dense/w' is float64\[2, 3\], but Variable 'absent' is "
                                                    r"float64\[3\]"):
        checkpoint.restore_tf(s, prefix, name_map={"rnn/lstm_cell/bias": "bias", "dense/w": "absent"})
    np.testing.assert_array_equal(s.run(b), np.zeros(3))  # nothing restored on an error
    with pytest.raises(tn.NotFoundError, match="'nothing'"):
        checkpoint.restore_tf(s, prefix, name_map={"dense/w": "nothing"})
    with pytest.raises(tn.SerializationError, match=r"no tensors named \['gone'\]"):
        checkpoint.restore_tf(s, prefix, name_map={"gone": "bias"})


def test_save_with_a_name_map_writes_tensorflow_names(tmp_path: Path) -> None:
    g = tn.Graph()
    with g.as_default():
        tn.Variable(np.arange(4.0, dtype=np.float32), name="w")
        tn.Variable(3, name="unsaved")
    s = tn.Session(g)
    assert checkpoint.save_tf(s, tmp_path / "m", name_map={"model/dense/kernel": "w"}) == ["model/dense/kernel"]
    assert checkpoint.list_tf(tmp_path / "m") == {"model/dense/kernel": ("float32", (4,))}


def test_an_imported_graph_restores_under_tensorflow_names(backend: str, tmp_path: Path) -> None:
    """A GraphDef's Variables keep TensorFlow's names on import, so a checkpoint of the same model
    restores without a name map (here one TensorFlow's SGD step would also read)."""
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")  # the tf extra, for the GraphDef
    data = Path(__file__).resolve().parent / "data" / "tf"
    imp = tn.import_graph_def(data / "rnn_variables.pbtxt")
    g = imp.graph
    assert {"w", "u", "steps"} <= set(g.variables)
    w = np.full((3, 4), 0.25, np.float32)
    u = np.eye(4, dtype=np.float32) * 0.5
    tfc.write_tf(tmp_path / "m", {"w": w, "u": u, "steps": np.int32(41)})
    s = tn.Session(g, backend=backend)
    assert checkpoint.restore_tf(s, tmp_path / "m") == ["steps", "u", "w"]
    run = json.loads((data / "rnn_variables.json").read_text())["runs"][0]
    feeds = {imp.tensor(k): np.array(v, np.float32 if k == "xs:0" else np.int32) for k, v in run["feeds"].items()}
    (loss,) = s.run([imp.tensor(run["fetches"][0])], feed_dict=feeds)
    xs, n = feeds[imp.tensor("xs:0")], int(feeds[imp.tensor("n:0")])
    h = np.zeros((1, 4), np.float32)
    for i in range(n):
        h = np.tanh(xs[i] @ w + h @ u)
    np.testing.assert_allclose(loss, np.sum(h * h), rtol=1e-5)
    assert int(s.variables["steps"]) == 41


# ---- damaged files -------------------------------------------------------------------------------------


_FUZZ_VALUES = {"a/kernel": np.arange(6, dtype=np.float32).reshape(2, 3), "a/bias": np.array([1, -2], np.int64),
                "flag": np.array(True), "empty": np.zeros((0, 2)), "b/kernel": np.ones((2, 2), np.float16)}


@given(data=st.data(), which=st.sampled_from(["model.index", "model.data-00000-of-00002",
                                              "model.data-00001-of-00002"]))
def test_damaged_files_give_serialization_errors_or_the_true_values(data: st.DataObject, which: str) -> None:
    """Whatever is done to either file, reading is a ``SerializationError`` or the values written:
    never another exception and never a wrong value (every byte that matters is checksummed)."""
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "model")
        tfc.write_tf(prefix, _FUZZ_VALUES, num_shards=2, block_bytes=48)
        path = os.path.join(tmp, which)
        with open(path, "rb") as f:
            good = f.read()
        bad = data.draw(byte_mutations(good, max_flips=4))
        with open(path, "wb") as f:
            f.write(bad)
        try:
            got = tfc.read_tf(prefix)
        except tn.SerializationError as e:
            assert tmp in str(e)
            return
        assert sorted(got) == sorted(_FUZZ_VALUES)
        for name, want in _FUZZ_VALUES.items():
            assert got[name].dtype == want.dtype
            np.testing.assert_array_equal(got[name], want)


def _rewrite(prefix: Path, items: list[tuple[bytes, bytes]]) -> None:
    Path(f"{prefix}.index").write_bytes(tfc._write_table(items, tfc.BLOCK_BYTES))


def test_well_checksummed_lies_are_named(tmp_path: Path) -> None:
    """Entries that pass every checksum but say what cannot be: each a SerializationError saying why."""
    prefix = tmp_path / "m"
    tfc.write_tf(prefix, {"w": np.zeros((2, 3), np.float32)})
    items = tfc._table(Path(f"{prefix}.index").read_bytes(), "x")
    header, (key, good) = items[0], items[1]
    e = tfc._decode_entry(good, "x")

    def entry(**kw: Any) -> bytes:
        fields = {"dtype": e.dtype, "shape": e.shape, "shard": e.shard, "offset": e.offset, "size": e.size,
                  "crc": e.crc, **kw}
        return tfc._encode_entry(tfc.Entry(**fields))

    lies = [
        (entry(size=2**62), "do not hold float32"),
        (entry(shape=(2**40, 2**40), size=2**62), "do not hold"),
        (entry(offset=2**40), "past the end"),
        (entry(dtype=7), "dtype string.*supported"),
        (entry(dtype=99), "DataType 99"),
        (entry(shard=3), "data file 3, but the checkpoint has 1"),
        (entry(crc=e.crc ^ 1), "checksum"),
        (entry(shape=(-1, 3)), "unknown dimension"),
        (good + tfc._enc_bytes(7, b""), "slices"),
        (good[:-2], "past the end of its message"),
        (b"\x0b", "wire type 3"),
    ]
    for value, match in lies:
        _rewrite(prefix, [header, (key, value)])
        with pytest.raises(tn.SerializationError, match=match):
            tfc.read_tf(prefix)
    one = tfc._enc_int(1, 1)
    for head, match in [(tfc._enc_int(1, 0), "at least one data file"), (one + tfc._enc_int(2, 5), "byte order"),
                        (one + tfc._enc_bytes(3, tfc._enc_int(2, 9)), "format version"),
                        (one + tfc._enc_bytes(3, tfc._enc_bytes(3, b"\x01")), "format version")]:
        _rewrite(prefix, [(b"", head), (key, good)])
        with pytest.raises(tn.SerializationError, match=match):
            tfc.read_tf(prefix)
    _rewrite(prefix, [(key, good)])
    with pytest.raises(tn.SerializationError, match="no header"):
        tfc.read_tf(prefix)


def test_keys_out_of_order_or_past_their_index_key_are_refused(tmp_path: Path) -> None:
    """TensorFlow finds a tensor by seeking the index, so a table whose keys are unsorted, or lie past
    the key its index gives their block, would read differently there: refused, though checksummed."""
    prefix = tmp_path / "m"
    tfc.write_tf(prefix, {"a": np.zeros(1), "b": np.ones(1)})
    header, a, b = tfc._table(Path(f"{prefix}.index").read_bytes(), "x")

    def table(blocks: list[tuple[list[tuple[bytes, bytes]], bytes]]) -> bytes:
        out = bytearray()

        def emit(contents: bytes) -> bytes:
            handle = tfc._enc_varint(len(out)) + tfc._enc_varint(len(contents))
            out.extend(contents + b"\x00" + crc32c.mask(crc32c.crc32c(contents + b"\x00")).to_bytes(4, "little"))
            return handle

        index = tfc._BlockWriter(1)
        for entries, sep in blocks:
            w = tfc._BlockWriter(16)
            for k, v in entries:
                w.add(k, v)
            index.add(sep, emit(w.finish()))
        meta, idx = emit(tfc._BlockWriter(16).finish()), emit(index.finish())
        return bytes(out) + (meta + idx).ljust(40, b"\x00") + tfc.TABLE_MAGIC.to_bytes(8, "little")

    Path(f"{prefix}.index").write_bytes(table([([header, a], b"a"), ([b], b"b")]))
    assert sorted(tfc.read_tf(prefix)) == ["a", "b"]  # the same table, in two blocks: fine
    Path(f"{prefix}.index").write_bytes(table([([header, a, b], b"a")]))
    with pytest.raises(tn.SerializationError, match="past its block's index key"):
        tfc.read_tf(prefix)
    Path(f"{prefix}.index").write_bytes(table([([header, b], b"b"), ([a], b"b")]))
    with pytest.raises(tn.SerializationError, match="out of order"):
        tfc.read_tf(prefix)


def test_missing_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(tn.SerializationError, match="nothing_here.index"):
        checkpoint.read_tf(tmp_path / "nothing_here")
    tfc.write_tf(tmp_path / "m", {"w": np.zeros(2)})
    os.remove(tmp_path / "m.data-00000-of-00001")
    with pytest.raises(tn.SerializationError, match="m.data-00000-of-00001"):
        checkpoint.read_tf(tmp_path / "m")
    assert checkpoint.list_tf(tmp_path / "m") == {"w": ("float64", (2,))}


# ---- TensorFlow restores what Turnout wrote (only where TensorFlow is installed) ---------------------
def test_tensorflow_restores_a_turnout_checkpoint(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    tf.compat.v1.disable_v2_behavior()
    values = {"rnn/lstm_cell/kernel": _values(np.dtype(np.float32), (5, 8), 1),
              "dense/w": _values(np.dtype(np.float64), (2, 3), 2), "step": np.int64(99),
              "counts": np.array([1, 2], np.int32), "mask": np.array([True, False]),
              "empty": np.zeros((0, 3), np.float32), "half": np.array([1.5, -2.0], np.float16),
              "small": np.array([-5, 5], np.int8), "waves": np.array([1 - 1j], np.complex64),
              "ref/w": np.array([0.5, 0.25], np.float32)}
    for shards in (1, 3):
        prefix = str(tmp_path / f"turnout{shards}" / "model")
        tfc.write_tf(prefix, values, num_shards=shards, block_bytes=64)
        g = tf.Graph()
        with g.as_default():
            vs = {name: tf.compat.v1.get_variable(name, initializer=np.zeros_like(v),
                                                  use_resource=not name.startswith("ref/"))
                  for name, v in values.items()}
            saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=g) as sess:
            saver.restore(sess, prefix)
            for name, v in vs.items():
                got = sess.run(v)
                assert got.dtype == values[name].dtype, name
                np.testing.assert_array_equal(got, values[name])
    # a trained Turnout session's Variables, saved under their names
    tg, train = _turnout_model()
    s = tn.Session(tg)
    checkpoint.restore_tf(s, _fixture("dtypes")[0])
    s.run(train)
    prefix = str(tmp_path / "trained" / "model")
    checkpoint.save_tf(s, prefix)
    g = tf.Graph()
    with g.as_default():
        vs = {v.name: tf.compat.v1.get_variable(v.name, initializer=np.zeros(v.shape, v.dtype.numpy))
              for v in tg.variable_objects}
        saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session(graph=g) as sess:
        saver.restore(sess, prefix)
        for name, v in vs.items():
            np.testing.assert_array_equal(sess.run(v), s.run(_variable(tg, name)))
