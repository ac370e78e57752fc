"""TensorBoard event files: scalar summaries (a training loss) and the graph, without TensorFlow.

An event file is a sequence of TFRecords, each an ``Event`` protobuf: a length, a masked CRC-32C of
the length, the bytes, a masked CRC-32C of the bytes. TensorBoard reads any file named
``events.out.tfevents.*`` under ``--logdir``. The CRC comes from ``turnout.crc32c`` (numpy only), so
nothing beyond the ``tf`` extra's protobufs is needed.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any, Optional

from turnout.crc32c import crc32c, masked_crc  # noqa: F401 - crc32c stays importable from here
from turnout.errors import ExecutionError, SerializationError
from turnout.files import file_path
from turnout.graphdef import protos


def record(data: bytes) -> bytes:
    """One TFRecord framing ``data``."""
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked_crc(n)) + data + struct.pack("<I", masked_crc(data))


class EventWriter:
    """``EventWriter(logdir)``: ``add_scalar(tag, value, step)``, ``add_graph(graph)``, ``flush()``,
    ``close()`` (also a context manager). Writes ``<logdir>/events.out.tfevents.<time>.<host>``,
    which ``tensorboard --logdir <logdir>`` shows (scalars under Scalars, the graph under Graphs)."""

    def __init__(self, logdir: str | Path, filename_suffix: str = "") -> None:
        self.p = protos.pb()
        self.logdir = Path(file_path(logdir, "EventWriter", "logdir"))
        self.path = Path(file_path(str(self.logdir / f"events.out.tfevents.{int(time.time())}."
                                                     f"{socket.gethostname()}{filename_suffix}"),
                                   "EventWriter", "filename_suffix"))
        try:
            self.logdir.mkdir(parents=True, exist_ok=True)
            self._f: Optional[Any] = open(self.path, "ab")  # noqa: SIM115 - closed by close()
        except OSError as e:
            raise SerializationError(f"EventWriter: cannot write an event file in {str(self.logdir)!r}: {e}") from None
        ev = self.p.event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
        self._write(ev)

    def _write(self, ev: Any) -> None:
        if self._f is None:
            raise ExecutionError("EventWriter is closed")
        self._f.write(record(ev.SerializeToString()))

    def add_scalar(self, tag: str, value: float, step: int, wall_time: Optional[float] = None) -> None:
        """Record ``value`` for ``tag`` at ``step`` (a training loss per step, say)."""
        summary = self.p.summary_pb2.Summary(value=[self.p.summary_pb2.Summary.Value(tag=tag,
                                                                                      simple_value=float(value))])
        self._write(self.p.event_pb2.Event(wall_time=wall_time or time.time(), step=int(step), summary=summary))

    def add_graph(self, graph: Any) -> None:
        """Record a Turnout graph (exported with ``export_graph_def``) or a GraphDef for the Graphs tab."""
        from turnout.graph import Graph

        gd = graph
        if isinstance(graph, Graph):
            from turnout.graphdef.exporter import export_graph_def

            gd = export_graph_def(graph).graph_def
        self._write(self.p.event_pb2.Event(wall_time=time.time(), graph_def=gd.SerializeToString()))

    def flush(self) -> None:
        """Write what is buffered to the event file, so that TensorBoard sees it while training goes on."""
        if self._f is not None:
            self._f.flush()

    def close(self) -> None:
        """Flush and close the event file; later writes raise ``ExecutionError``. Closing twice does nothing."""
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_events(path: str | Path) -> list[Any]:
    """The Event messages of an event file, with every checksum verified (for tests and tools). A
    file that cannot be read, a truncated record, a checksum that does not match or a body that is
    not an Event is a ``SerializationError`` naming the file and the record's byte offset."""
    from google.protobuf.message import DecodeError

    p = protos.pb()
    path = file_path(path, "read_events")
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise SerializationError(f"cannot read an event file from {path!r}: {e}") from None
    out, i = [], 0
    while i < len(data):
        if i + 12 > len(data):
            raise SerializationError(f"{path}: truncated record header at byte {i}")
        (n,) = struct.unpack_from("<Q", data, i)
        (c1,) = struct.unpack_from("<I", data, i + 8)
        if c1 != masked_crc(data[i: i + 8]):
            raise SerializationError(f"{path}: corrupt record length at byte {i}")
        if i + 16 + n > len(data):
            raise SerializationError(f"{path}: record at byte {i} runs past the end of the file (truncated?)")
        body = data[i + 12: i + 12 + n]
        (c2,) = struct.unpack_from("<I", data, i + 12 + n)
        if c2 != masked_crc(body):
            raise SerializationError(f"{path}: corrupt record at byte {i}")
        try:
            out.append(p.event_pb2.Event.FromString(body))
        except (DecodeError, RecursionError, ValueError) as e:
            raise SerializationError(f"{path}: the record at byte {i} is not an Event ({e})") from None
        i += 16 + n
    return out
