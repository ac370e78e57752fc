"""TensorBoard event files written without TensorFlow, read back by TensorBoard's own reader."""

from __future__ import annotations

from pathlib import Path

import pytest

import turnout as tn

pytest.importorskip("tensorboard.compat.proto.event_pb2")

from turnout.graphdef.events import EventWriter, crc32c, read_events  # noqa: E402


def test_crc32c_known_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def test_scalars_and_graph_read_back_by_tensorboard(tmp_path: Path) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        tn.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), [tn.constant(0), x])
    with EventWriter(tmp_path) as w:
        for step, loss in enumerate([2.0, 1.5, 0.25]):
            w.add_scalar("loss", loss, step)
        w.add_graph(g)
    events = read_events(w.path)
    assert events[0].file_version == "brain.Event:2"
    assert [(e.step, e.summary.value[0].simple_value) for e in events if e.HasField("summary")] == [
        (0, 2.0), (1, 1.5), (2, 0.25)]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [(s.step, s.value) for s in acc.Scalars("loss")] == [(0, 2.0), (1, 1.5), (2, 0.25)]
    gd = acc.Graph()
    assert any(nd.op == "Enter" for nd in gd.node)
