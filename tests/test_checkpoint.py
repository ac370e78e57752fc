"""Checkpoints: Variables saved to a file and restored, so training resumes where it stopped.

The resumed run must match an uninterrupted one exactly, on every backend; every malformed file is
an error naming what is wrong, and nothing in a checkpoint is ever executed (no pickle).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import turnout as tn
from turnout import checkpoint


def _model() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """w <- w - 0.1 * d/dw sum((w*x - 3)^2), five times per run inside a while loop; returns the step
    and a read of w."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.array([0.5, -1.0], np.float64), name="w")
        n = tn.Variable(0, name="steps", trainable=False)
        x = tn.constant(np.array([1.0, 2.0]))

        def body(i: tn.Tensor) -> tn.Tensor:
            gw = 2.0 * (w.read() * x - 3.0) * x  # d/dw of sum((w*x - 3)^2)
            upd = w.assign_sub(0.1 * gw)
            cnt = n.assign_add(1)
            with tn.control_dependencies([upd, cnt]):
                return i + 1

        (out,) = tn.while_loop(lambda i: i < 5, body, [tn.constant(0)])
        with tn.control_dependencies([out]):
            step = tn.identity(out)
        read = w.read()
    return g, step, read


def test_resume_from_a_checkpoint_equals_an_uninterrupted_run(backend: str, tmp_path: Path) -> None:
    g, step, read = _model()
    straight = tn.Session(g, backend=backend)
    for _ in range(4):
        straight.run(step)
    expected = straight.run(read)

    first = tn.Session(g, backend=backend)
    first.run(step)
    first.run(step)
    path = tmp_path / "model.ckpt"
    assert checkpoint.save(first, path) == ["steps", "w"]
    resumed = tn.Session(g, backend=backend)  # a fresh session, as after a restart
    assert checkpoint.restore(resumed, path) == ["steps", "w"]
    resumed.run(step)
    resumed.run(step)
    np.testing.assert_array_equal(resumed.run(read), expected)
    assert int(resumed.variables["steps"]) == 20


def test_saving_an_untouched_session_stores_initial_values(tmp_path: Path) -> None:
    g, _, _ = _model()
    sess = tn.Session(g)
    checkpoint.save(sess, tmp_path / "c")
    values = checkpoint.read(tmp_path / "c")
    np.testing.assert_array_equal(values["w"], [0.5, -1.0])
    assert values["w"].dtype == np.float64 and values["steps"].dtype == np.int32


def test_the_format_is_a_text_header_and_raw_bytes(tmp_path: Path) -> None:
    g = tn.Graph()
    with g.as_default():
        tn.Variable(np.array([[1, 2], [3, 4]], np.int64), name="m")
        tn.Variable(np.array([True, False]), name="flags")
    sess = tn.Session(g)
    checkpoint.save(sess, tmp_path / "c")
    blob = (tmp_path / "c").read_bytes()
    assert blob.startswith(b"TURNOUT-CHECKPOINT 1\n")
    size = int(blob[21:33])
    header = blob[34:34 + size]
    assert b'"name": "m"' in header and b'"dtype": "int64"' in header
    data = blob[34 + size:]
    assert data == b"\x01\x00" + np.array([1, 2, 3, 4], "<i8").tobytes()  # "flags" sorts first


def _saved(tmp_path: Path) -> tuple[tn.Session, Path, bytes]:
    g, _, _ = _model()
    sess = tn.Session(g)
    path = tmp_path / "c"
    checkpoint.save(sess, path)
    return sess, path, path.read_bytes()


def _rewrite_header(blob: bytes, edit) -> bytes:  # type: ignore[no-untyped-def]
    import json

    size = int(blob[21:33])
    header = json.loads(blob[34:34 + size])
    edit(header)
    new = json.dumps(header).encode()
    return blob[:21] + b"%012d\n" % len(new) + new + blob[34 + size:]


BAD_FILES = {
    "not a checkpoint": (lambda b: b"PK\x03\x04" + b[4:], "not a Turnout checkpoint"),
    "malformed length": (lambda b: b[:21] + b"12x456789012\n" + b[34:], "malformed header length"),
    "header past the end": (lambda b: b[:21] + b"%012d\n" % (len(b)) + b[34:], "ends inside its header"),
    "huge header": (lambda b: b[:21] + b"999999999999\n" + b[34:], "exceeds"),
    "truncated data": (lambda b: b[:-3], "past the end"),
    "flipped byte": (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "digest"),
    "not json": (lambda b: b[:21] + b"%012d\n" % 3 + b"{x:" + b, "not valid JSON"),
    "wrong format": (lambda b: _rewrite_header(b, lambda h: h.update(format="graph")), "does not describe"),
    "future version": (lambda b: _rewrite_header(b, lambda h: h.update(version=2)), "version 2"),
    "unknown dtype": (lambda b: _rewrite_header(b, lambda h: h["variables"][0].update(dtype="object")),
                      "unknown dtype"),
    "negative dim": (lambda b: _rewrite_header(b, lambda h: h["variables"][1].update(shape=[-2])),
                     "malformed shape"),
    "size mismatch": (lambda b: _rewrite_header(b, lambda h: h["variables"][1].update(shape=[3])),
                      "do not hold"),
    "extra field": (lambda b: _rewrite_header(b, lambda h: h["variables"][0].update(pickle="x")),
                    "malformed variable entry"),
    "stored twice": (lambda b: _rewrite_header(b, lambda h: h["variables"].append(h["variables"][0])),
                     "stored twice"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_malformed_checkpoints_are_rejected_with_a_reason(case: str, tmp_path: Path) -> None:
    sess, path, blob = _saved(tmp_path)
    mutate, message = BAD_FILES[case]
    path.write_bytes(mutate(blob))
    before = dict(sess.variables)
    with pytest.raises(tn.SerializationError, match=message):
        checkpoint.restore(sess, path)
    assert sess.variables.keys() == before.keys()


def test_a_checkpoint_of_another_model_restores_nothing(tmp_path: Path) -> None:
    g1 = tn.Graph()
    with g1.as_default():
        tn.Variable(np.zeros(3, np.float32), name="w")
    s1 = tn.Session(g1)
    checkpoint.save(s1, tmp_path / "c")
    g2 = tn.Graph()
    with g2.as_default():
        tn.Variable(np.zeros(4, np.float32), name="w")
        tn.Variable(0.0, name="b")
    s2 = tn.Session(g2)
    with pytest.raises(tn.SerializationError, match=r"'w' is stored as float32\[3\].*declares float32\[4\]"):
        checkpoint.restore(s2, tmp_path / "c")
    g3 = tn.Graph()
    with g3.as_default():
        tn.Variable(np.zeros(3, np.float32), name="w")
        tn.Variable(0.0, name="b")
    s3 = tn.Session(g3)
    with pytest.raises(tn.SerializationError, match=r"no value for the graph's variables \['b'\]"):
        checkpoint.restore(s3, tmp_path / "c")
    assert s3.variables == {}
    assert checkpoint.restore(s3, tmp_path / "c", strict=False) == ["w"]
    g4 = tn.Graph()
    with g4.as_default():
        tn.Variable(np.zeros(3, np.float32), name="v")
    with pytest.raises(tn.SerializationError, match="'w', which this graph does not have"):
        checkpoint.restore(tn.Session(g4), tmp_path / "c")


def test_saving_an_unknown_variable_is_an_error(tmp_path: Path) -> None:
    g, _, _ = _model()
    with pytest.raises(tn.SerializationError, match="no Variable named 'nope'"):
        checkpoint.save(tn.Session(g), tmp_path / "c", variables=["nope"])
    assert not (tmp_path / "c").exists()
