"""Bad files: every reader of outside data ends in a Turnout error that names the file, or reads what
was written; never a raw ``IndexError``/``struct.error``/``UnicodeDecodeError``/protobuf error, a
hang, or a silent partial load.

The readers: ``tn.load`` (Turnout's saved graphs), ``tn.checkpoint.read`` (Turnout checkpoints),
``tn.checkpoint.read_tf`` (TensorFlow v1 checkpoints: the index and the data file),
``tn.import_graph_def`` of ``.pb`` and ``.pbtxt`` files and ``read_events`` (TensorBoard event files).
Each file is damaged systematically: cut at every ``STEP``-th byte and one byte flipped at every
``STEP``-th position (``STEP`` is chosen per file so the default run tries about a hundred of each;
``TURNOUT_BAD_FILES_EVERY_BYTE=1`` tries every byte), and through hypothesis's ``byte_mutations``
in the ``ci`` profile (``TURNOUT_HYPOTHESIS_PROFILE=nightly`` for a long run).

The law for a cut file is the same for every reader but one: refused naming the file, or read whole
(only a cut of what follows the data, a trailing newline, may read whole); an event file is a log
read while it grows, so a cut where a record ends reads the whole records before it. For a flipped byte the law
depends on the format: the checkpoints and event files carry checksums, so a flip is refused or
(where it lands in bytes the checksums do not cover and that carry no value) reads the same values;
a saved graph and a GraphDef carry none, so a flip may make another valid graph, and the law is a
Turnout error naming the file, or a graph.

Below them, one named regression test per bug this battery found.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import graphs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import byte_mutations

import turnout as tn
from turnout import checkpoint, serialize
from turnout import tf_checkpoint as tfc
from turnout.errors import TurnoutError

EVERY_BYTE = bool(os.environ.get("TURNOUT_BAD_FILES_EVERY_BYTE"))


def _positions(n: int, tries: int = 100) -> range:
    """Every ``n // tries``-th position of an ``n``-byte file (every one under ``EVERY_BYTE``)."""
    return range(0, n, 1 if EVERY_BYTE else max(1, n // tries))


# ---- one entry per reader: (write a good file, the file to damage, read it, what reading gives) ----------
def _same_arrays(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)


def _saved_graph(d: Path) -> tuple[Path, Callable[[Path], Any], Callable[[Any, Any], bool], bool]:
    path = d / "graph.json"
    serialize.save(graphs.every_kind_of_node(), path)
    return path, tn.load, lambda a, b: serialize.dumps(a) == serialize.dumps(b), False


def _turnout_checkpoint(d: Path) -> tuple[Path, Callable[[Path], Any], Callable[[Any, Any], bool], bool]:
    path = d / "model.ckpt"
    s = tn.Session(graphs.every_kind_of_node())
    s.variables["v"] = np.array([1.5, -2.0], np.float32)
    checkpoint.save(s, path)
    return path, checkpoint.read, _same_arrays, True


def _tf_values() -> dict[str, np.ndarray]:
    return {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([True, False]), "n": np.int64(-7),
            "e": np.zeros((0, 4), np.float64)}


def _tf_index(d: Path) -> tuple[Path, Callable[[Path], Any], Callable[[Any, Any], bool], bool]:
    tfc.write_tf(d / "m", _tf_values(), num_shards=2, block_bytes=40)  # several blocks, two data files
    return d / "m.index", lambda p: tfc.read_tf(str(p)[: -len(".index")]), _same_arrays, True


def _tf_data(d: Path) -> tuple[Path, Callable[[Path], Any], Callable[[Any, Any], bool], bool]:
    tfc.write_tf(d / "m", _tf_values(), num_shards=2)
    return Path(tfc.data_path(d / "m", 0, 2)), lambda p: tfc.read_tf(d / "m"), _same_arrays, True


def _graph_def(suffix: str) -> Callable[[Path], tuple[Path, Callable[[Path], Any], Callable[[Any, Any], bool], bool]]:
    def make(d: Path) -> tuple[Path, Callable[[Path], Any], Callable[[Any, Any], bool], bool]:
        pytest.importorskip("google.protobuf")
        from google.protobuf import text_format

        gd = tn.export_graph_def(graphs.every_kind_of_node()).graph_def
        path = d / f"graph{suffix}"
        path.write_bytes(text_format.MessageToString(gd).encode() if suffix == ".pbtxt" else gd.SerializeToString())

        def whole_nodes(got: Any, expected: Any) -> bool:
            """A GraphDef has no length or checksum and its ``versions`` are optional, so a cut where
            a node ends reads the nodes before it: never a part of one."""
            got, expected = [(n.name, n.op) for n in got.graph.nodes], [(n.name, n.op) for n in expected.graph.nodes]
            return got == expected[:len(got)]

        return path, tn.import_graph_def, whole_nodes, False
    return make


def _events(d: Path) -> tuple[Path, Callable[[Path], Any], Callable[[Any, Any], bool], bool]:
    pytest.importorskip("google.protobuf")
    from turnout.graphdef.events import EventWriter, read_events

    with EventWriter(d) as w:
        w.add_scalar("loss", 1.5, 0)
        w.add_scalar("loss", 0.5, 1)
    def whole_records(got: Any, expected: Any) -> bool:
        """An event file is a log that grows a record at a time (TensorBoard reads it while it is
        written), so a cut where a record ends reads the records before it: never a part of one."""
        got, expected = [e.SerializeToString() for e in got], [e.SerializeToString() for e in expected]
        return got == expected[:len(got)]

    return next(d.iterdir()), read_events, whole_records, True


#: reader -> its maker; the flag says whether the format is checksummed (a flip is refused or harmless)
READERS: dict[str, Callable[[Path], tuple[Path, Callable[[Path], Any], Callable[[Any, Any], bool], bool]]] = {
    "saved graph": _saved_graph, "turnout checkpoint": _turnout_checkpoint, "tf checkpoint index": _tf_index,
    "tf checkpoint data": _tf_data, "graph def .pb": _graph_def(".pb"), "graph def .pbtxt": _graph_def(".pbtxt"),
    "event file": _events,
}


def _refused_naming_the_file_or_read(read: Callable[[Path], Any], path: Path) -> tuple[bool, Any]:
    """``(True, None)`` when reading ``path`` is refused with a Turnout error that names it; ``(False,
    value)`` when it reads. Any other exception fails the test as it is."""
    try:
        return False, read(path)
    except TurnoutError as e:
        assert path.name in str(e), f"the error does not name the file {path.name}: {e}"
        return True, None


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_cut_file_is_refused_naming_it_or_read_whole(reader: str, tmp_path: Path) -> None:
    path, read, same, _ = READERS[reader](tmp_path)
    good = path.read_bytes()
    expected = read(path)
    for k in _positions(len(good)):
        path.write_bytes(good[:k])
        refused, got = _refused_naming_the_file_or_read(read, path)
        assert refused or same(got, expected), f"{reader} cut at byte {k} of {len(good)} read as something else"


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_flipped_byte_is_refused_naming_the_file_or_read_as_the_format_allows(reader: str, tmp_path: Path) -> None:
    path, read, same, checksummed = READERS[reader](tmp_path)
    good = path.read_bytes()
    expected = read(path)
    for k in _positions(len(good)):
        for mask in (0x01, 0x80):
            path.write_bytes(good[:k] + bytes([good[k] ^ mask]) + good[k + 1:])
            refused, got = _refused_naming_the_file_or_read(read, path)
            if checksummed and not refused:
                assert same(got, expected), f"{reader} with byte {k} flipped ({mask:#x}) read other values"


# a fifth of the profile's examples (the systematic tests above carry the default run): 20 in ``ci``
@settings(max_examples=max(20, settings.default.max_examples // 5))
@given(data=st.data())
@pytest.mark.parametrize("reader", ["graph def .pbtxt", "tf checkpoint index"])
def test_mutated_files_give_turnout_errors_naming_them(reader: str, data: st.DataObject,
                                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    """The readers the other fuzzers (tests/test_only_turnout_errors.py) do not mutate byte by byte."""
    path, read, _, _ = READERS[reader](tmp_path_factory.mktemp("mutated"))
    path.write_bytes(data.draw(byte_mutations(path.read_bytes())))
    _refused_naming_the_file_or_read(read, path)


# ---- regressions, one per bug --------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2**62, 0), (2**62, 2**62, 0), (2**31, 2**31, 2**31, 0)])
def test_an_empty_tf_checkpoint_tensor_declaring_huge_dimensions_is_refused(shape: tuple[int, ...],
                                                                           tmp_path: Path) -> None:
    """numpy refuses such a shape with a ``ValueError`` naming nothing; the reader refuses it first."""
    from turnout.crc32c import crc32c, mask

    entry = tfc.Entry(1, shape, 0, 0, 0, mask(crc32c(b"")))
    (tmp_path / "m.index").write_bytes(tfc._write_table([(b"", tfc._encode_header(1)),
                                                         (b"w", tfc._encode_entry(entry))], 1024))
    Path(tfc.data_path(tmp_path / "m", 0, 1)).write_bytes(b"")
    assert tfc.list_tf(tmp_path / "m") == {"w": ("float32", shape)}
    with pytest.raises(tn.SerializationError, match="tensor 'w' declares shape .*too large to index"):
        tfc.read_tf(tmp_path / "m")


def test_a_damaged_name_in_a_turnout_checkpoint_is_refused_not_read_as_another(tmp_path: Path) -> None:
    """The variables' digests cover their bytes, not their names: a flipped bit read ``"v"`` as ``"w"``
    (and ``restore(strict=False)`` would have loaded it into another Variable of that shape). The
    header's own digest (``header_sha256``) now covers the entries; a file without it still reads."""
    import json

    path, read, same, _ = _turnout_checkpoint(tmp_path)
    good = path.read_bytes()
    path.write_bytes(good.replace(b'"name": "v"', b'"name": "w"'))
    with pytest.raises(tn.SerializationError, match="model.ckpt: the header does not match its digest"):
        read(path)
    m = len(checkpoint.MAGIC)
    size = int(good[m:m + 12])
    header = json.loads(good[m + 13:m + 13 + size])
    del header["header_sha256"]  # as files written before the field was added
    old = json.dumps(header).encode()
    path.write_bytes(checkpoint.MAGIC + b"%012d\n" % len(old) + old + good[m + 13 + size:])
    assert _same_arrays(read(path), {"v": np.array([1.5, -2.0], np.float32)})


def _const_graph_def(shape: list[int], content: bytes | None = None, values: list[Any] | None = None,
                     dtype: int = 1, unknown_rank: bool = False) -> Any:
    pytest.importorskip("google.protobuf")
    from turnout.graphdef import protos

    gd = protos.pb().graph_pb2.GraphDef()
    gd.versions.producer = 1205
    nd = gd.node.add(name="c", op="Const")
    nd.attr["dtype"].type = dtype
    t = nd.attr["value"].tensor
    t.dtype = dtype
    t.tensor_shape.unknown_rank = unknown_rank
    for n in shape:
        t.tensor_shape.dim.add().size = n
    if content is not None:
        t.tensor_content = content
    if values is not None:
        (t.bool_val if dtype == 10 else t.float_val).extend(values)
    return gd


@pytest.mark.parametrize("case, gd, words", [
    ("bytes short", lambda: _const_graph_def([3], content=b"\0" * 8), "holds 8 bytes, but float32\\[3\\] is 12"),
    ("bytes long", lambda: _const_graph_def([1], content=b"\0" * 8), "holds 8 bytes, but float32\\[1\\] is 4"),
    ("negative dim", lambda: _const_graph_def([-1], content=b"\0" * 4), "negative dimension"),
    ("negative dim, values", lambda: _const_graph_def([-1], values=[1.0]), "negative dimension"),
    ("too many values", lambda: _const_graph_def([2], values=[1.0, 2.0, 3.0]), "lists 3 values for shape \\[2\\]"),
    ("bool byte 2", lambda: _const_graph_def([1], content=b"\x02", dtype=10), "bool bytes other than 0 and 1"),
    ("unknown rank", lambda: _const_graph_def([], values=[1.0], unknown_rank=True), "unknown rank"),
    ("huge beside a zero", lambda: _const_graph_def([2**62, 0], values=[]), "too large to index"),
    ("rank 100", lambda: _const_graph_def([1] * 100, values=[1.0]), "100 dimensions"),
])
def test_a_graph_def_constant_whose_bytes_do_not_make_its_shape_is_refused(case: str, gd: Callable[[], Any],
                                                                         words: str) -> None:
    """As TensorFlow's ``Tensor::FromProto`` refuses it; the one "negative dimension with bytes"
    case used to import silently as a constant of shape [1]."""
    with pytest.raises(tn.GraphBuildError, match=f'Const node "c": .*{words}'):
        tn.import_graph_def(gd())


def test_a_graph_def_splat_constant_over_the_allocation_guard_is_refused_before_allocating() -> None:
    """A 4 TiB splat (one value, a huge shape) reached numpy's ``MemoryError``; it meets the allocation
    guard of ``turnout.limits`` instead, which ``allocation_limit`` raises."""
    from turnout.limits import allocation_limit

    with pytest.raises(tn.ResourceExhaustedError, match='Const node "c".*max_tensor_bytes'):
        tn.import_graph_def(_const_graph_def([2**20, 2**20], values=[1.0]))
    with allocation_limit(2**30):
        small = tn.import_graph_def(_const_graph_def([2, 3], values=[7.0]))
    assert tn.Session(small.graph).run(small.tensor("c")).tolist() == [[7.0] * 3] * 2


def test_a_graph_def_shape_dimension_below_minus_one_is_refused() -> None:
    """-1 is TensorFlow's unknown dimension; -7 is no dimension (it used to import as unknown)."""
    pytest.importorskip("google.protobuf")
    from turnout.graphdef import protos

    gd = protos.pb().graph_pb2.GraphDef()
    gd.versions.producer = 1205
    nd = gd.node.add(name="x", op="Placeholder")
    nd.attr["dtype"].type = 1
    nd.attr["shape"].shape.dim.add().size = -7
    with pytest.raises(tn.GraphBuildError, match='Placeholder node "x".*dimension -7'):
        tn.import_graph_def(gd)
    nd.attr["shape"].shape.dim[0].size = -1
    assert tn.import_graph_def(gd).tensor("x").shape == (None,)


@pytest.mark.parametrize("suffix", [".pb", ".pbtxt"])
def test_a_graph_def_without_versions_imports_and_a_missing_node_is_named(suffix: str, tmp_path: Path) -> None:
    """A GraphDef has no length or checksum, and its ``versions`` field is optional (TensorFlow imports
    one without it, and hand-written ones often lack it), so a file holding only some nodes (as one cut
    where a node ends would) imports as those nodes; a fetch of a node it lacks is a NotFoundError
    naming it, never a value of another."""
    pytest.importorskip("google.protobuf")
    from google.protobuf import text_format

    g = tn.Graph()
    with g.as_default():
        tn.identity(tn.identity(tn.placeholder(tn.float32, [], name="x"), name="y"), name="z")
    gd = tn.export_graph_def(g).graph_def
    assert [nd.name for nd in gd.node] == ["x", "y", "z"]
    short = type(gd)()
    short.node.extend(gd.node[:2])  # no versions, and the last node missing
    path = tmp_path / f"short{suffix}"
    path.write_bytes(text_format.MessageToString(short).encode() if suffix == ".pbtxt" else short.SerializeToString())
    imp = tn.import_graph_def(path)
    assert [n.name for n in imp.graph.nodes] == ["x", "y"]
    assert imp.run(tn.Session(imp.graph), ["y:0"], {"x:0": 2.0}) == [2.0]
    with pytest.raises(tn.NotFoundError, match="'z:0'"):
        imp.run(tn.Session(imp.graph), ["z:0"], {"x:0": 2.0})


def test_an_error_found_importing_a_graph_def_file_names_the_file(tmp_path: Path) -> None:
    """Errors found after parsing (a malformed node) named the node but not the file it came from."""
    path = tmp_path / "bad_const.pb"
    path.write_bytes(_const_graph_def([3], content=b"\0" * 8).SerializeToString())
    with pytest.raises(tn.GraphBuildError, match=f'^{path}: Const node "c"'):
        tn.import_graph_def(path)


def _readers_and_writers(tmp_path: Path) -> dict[str, Callable[[Any], Any]]:
    pytest.importorskip("google.protobuf")
    from turnout.graphdef.events import EventWriter, read_events

    g = graphs.every_kind_of_node()
    s = tn.Session(g)
    return {
        "tn.load": tn.load, "tn.save": lambda p: tn.save(g, p), "checkpoint.read": checkpoint.read,
        "checkpoint.save": lambda p: checkpoint.save(s, p), "checkpoint.restore": lambda p: checkpoint.restore(s, p),
        "read_tf": tfc.read_tf, "list_tf": tfc.list_tf, "write_tf": lambda p: tfc.write_tf(p, {"a": np.ones(2)}),
        "restore_tf": lambda p: tfc.restore_tf(s, p), "save_tf": lambda p: tfc.save_tf(s, p),
        "import_graph_def": lambda p: tn.import_graph_def(Path(p) if isinstance(p, str) else p),
        "read_events": read_events, "EventWriter": EventWriter,
    }


FILE_FUNCTIONS = ["tn.load", "tn.save", "checkpoint.read", "checkpoint.save", "checkpoint.restore", "read_tf",
                  "list_tf", "write_tf", "restore_tf", "save_tf", "import_graph_def", "read_events", "EventWriter"]


@pytest.mark.parametrize("function", FILE_FUNCTIONS)
def test_a_path_that_is_no_file_name_is_an_argument_error(function: str, tmp_path: Path) -> None:
    """An int was opened as that file descriptor by some readers, others raised Python's TypeError."""
    call = _readers_and_writers(tmp_path)[function]
    for bad in (3, None, 1.5):
        with pytest.raises(tn.ArgumentError, match="file name|GraphDef, its bytes, a path"):
            call(bad)


@pytest.mark.parametrize("function", FILE_FUNCTIONS)
def test_a_path_with_a_nul_byte_is_a_serialization_error(function: str, tmp_path: Path) -> None:
    """Python's ``ValueError`` "embedded null byte" reached the user from every one but ``tn.load``."""
    with pytest.raises(tn.SerializationError, match="cannot hold a NUL byte"):
        _readers_and_writers(tmp_path)[function](str(tmp_path / "a\0b"))
    if function == "EventWriter":  # (the file name is the log directory and a suffix)
        from turnout.graphdef.events import EventWriter

        with pytest.raises(tn.SerializationError, match="cannot hold a NUL byte"):
            EventWriter(tmp_path, filename_suffix="\0")


def test_a_write_that_the_file_system_refuses_is_a_serialization_error(tmp_path: Path) -> None:
    """checkpoint.save and write_tf raised ``FileNotFoundError``/``NotADirectoryError``."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    s = tn.Session(graphs.every_kind_of_node())
    with pytest.raises(tn.SerializationError, match="cannot write a checkpoint"):
        checkpoint.save(s, blocker / "model.ckpt")
    with pytest.raises(tn.SerializationError, match="cannot write the checkpoint"):
        tfc.save_tf(s, blocker / "model")


def test_a_bytes_prefix_reads_the_same_tf_checkpoint_as_its_str(tmp_path: Path) -> None:
    """A ``bytes`` prefix became the text ``"b'...'"`` in the file names built from it."""
    tfc.write_tf(tmp_path / "m", _tf_values())
    assert _same_arrays(tfc.read_tf(os.fsencode(tmp_path / "m")), _tf_values())


# ---- names that cannot round-trip --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["a:b", "a:0", "^a"])
def test_a_node_name_that_cannot_read_back_is_an_argument_error(name: str) -> None:
    """':' separates a node from an output index and a leading '^' marks a control input, in tensor
    names, GraphDef inputs and saved graphs: ``tn.Variable(..., name="a:b")`` used to be accepted, and
    read back from an exported GraphDef as output ``b`` of a node ``a``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        makers: list[Callable[[], Any]] = [
            lambda: tn.Variable(1.0, name=name), lambda: tn.identity(x, name=name),
            lambda: tn.while_loop(lambda i: i < 3, lambda i: i + 1, [tn.constant(0)], name=name),
            lambda: tn.cond(x > 0.0, lambda: x, lambda: -x, name=name),
        ]
        for make in makers:
            with pytest.raises(tn.ArgumentError, match=f"node name '.*{re.escape(name)}.*' cannot be used"):
                make()
        with pytest.raises(tn.ArgumentError, match="cannot be used"), tn.name_scope(name):
            pass
        ok = tn.Variable(1.0, name="a/b.c-d_e")
    assert ok.name == "a/b.c-d_e" and not any(n.name.startswith(name) for n in g.nodes)


@pytest.mark.parametrize("prefix, error", [("a:b/", "cannot be used"), ("^p/", "cannot be used"),
                                           (3, "prefix must be a string")])
def test_an_import_prefix_that_cannot_begin_a_node_name_is_an_argument_error(prefix: Any, error: str) -> None:
    """The prefix begins every imported node's name; ``"a:b/"`` made nodes ``"a:b/x"``, and an int
    reached Python's ``TypeError`` inside the first rule."""
    pytest.importorskip("google.protobuf")
    with pytest.raises(tn.ArgumentError, match=error):
        tn.import_graph_def(_const_graph_def([2], values=[1.0]), prefix=prefix)
    assert [n.name for n in tn.import_graph_def(_const_graph_def([2], values=[1.0]), prefix="ok/").graph.nodes] \
        == ["ok/c"]


# ---- options and call signatures ---------------------------------------------------------------------
@pytest.mark.parametrize("options", [tn.RunOptions, tn.FastOptions])
def test_every_options_class_refuses_a_misspelt_option_by_name(options: Any) -> None:
    """``FastOptions(bogus=1)`` raised the dataclass's ``TypeError`` where ``RunOptions`` raised
    ``ArgumentError``; both now refuse through ``arguments.option_fields``."""
    with pytest.raises(tn.ArgumentError, match=f"unknown .* option\\(s\\) \\['bogus'\\]; {options.__name__} has"):
        options(bogus=1)
    with pytest.raises(tn.ArgumentError, match=f"{options.__name__} takes at most"):
        options(*range(40))


def test_a_missing_fetches_argument_is_pythons_type_error_naming_it() -> None:
    """Kept on purpose: ``Session.run`` and ``Session.explain`` are not ``checked`` (``run`` is the hot
    path), so a call that leaves out ``fetches`` is a wrong call signature, Python's ``TypeError``
    naming the method and the parameter, as for any Python method. (A misspelt run option is an
    ``ArgumentError``, a ``TypeError`` too: ``run`` takes options as keywords and checks them.)"""
    g = tn.Graph()
    with g.as_default():
        tn.constant(1.0)
    s = tn.Session(g)
    with pytest.raises(TypeError, match=r"Session\.run\(\) missing 1 required positional argument: 'fetches'"):
        s.run()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"Session\.explain\(\) missing 1 required positional argument: 'fetches'"):
        s.explain()  # type: ignore[call-arg]
