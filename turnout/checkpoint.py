"""Checkpoints: save a session's Variables to a file and restore them, so training resumes where it
stopped (the TensorFlow paper's answer to failures: restart from the last checkpoint).

Why a format of its own, and not pickle or ``np.save`` of objects: a checkpoint is read back from disk,
possibly from another machine, so reading one must never run code. The format is a short text header
and raw bytes, and every field is checked before a byte of it is used.

The format (version 1), all in one file::

    TURNOUT-CHECKPOINT 1\\n                  magic line and format version
    <header length, 12 ASCII digits>\\n      the byte length of the JSON header that follows
    <JSON header>                            {"format": "turnout.checkpoint", "version": 1,
                                              "variables": [{"name", "dtype", "shape", "offset",
                                                             "nbytes", "sha256"}, ...],
                                              "header_sha256": "..."}
    <data>                                   each variable's bytes, little-endian, C order, at
                                             ``offset`` from the start of the data section

``dtype`` is a Turnout dtype name (``float32``, ``int64``, ``bool`` ...). ``sha256`` is the hex digest
of the variable's bytes, so a truncated or corrupted file is an error naming the variable, never a
silently wrong value. ``header_sha256`` is the hex digest of the ``variables`` list written as
canonical JSON (``json.dumps(variables, sort_keys=True)``), so a damaged name (``"v"`` read as ``"w"``,
which no variable's digest covers) is an error too; files written before it was added (it is
optional, and version 1 is unchanged) are read without it. Writes go to a temporary file that
replaces the target only when complete, so a crash during a save leaves the previous checkpoint
intact.

TensorFlow v1 checkpoints (``tf.compat.v1.train.Saver``'s format) are read and written by
``turnout.tf_checkpoint``; its ``read_tf``, ``write_tf``, ``list_tf``, ``restore_tf`` and ``save_tf``
are re-exported here, so ``tn.checkpoint.restore_tf(session, prefix)`` brings a TF1 model's weights.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout.arguments import name_list, session_argument
from turnout.errors import SerializationError
from turnout.files import file_path
from turnout.shapes import too_large_to_index
from turnout.tf_checkpoint import list_tf, read_tf, restore_tf, save_tf, write_tf

__all__ = ["save", "read", "restore", "list_tf", "read_tf", "write_tf", "restore_tf", "save_tf"]

MAGIC = b"TURNOUT-CHECKPOINT 1\n"
FORMAT = "turnout.checkpoint"
VERSION = 1
#: a header larger than this is refused before it is read (a checkpoint of a million variables fits)
MAX_HEADER_BYTES = 64 * 1024 * 1024
_HEADER_LEN = re.compile(rb"^[0-9]{12}\n$")
_DTYPES = {d.name: d for d in (dt.bool_, dt.int32, dt.int64, dt.float32, dt.float64)}


def save(session: Any, path: str | os.PathLike[str], variables: Optional[Iterable[str]] = None) -> list[str]:
    """Write the current values of ``session``'s Variables (all of the graph's, or the names given) to
    ``path``; returns the names saved. A Variable that no run has touched yet is saved with its
    initial value, so a checkpoint always holds every Variable asked for."""
    session_argument(session, "checkpoint.save")
    graph = session.graph
    names = sorted(graph.variables) if variables is None else name_list(variables, "checkpoint.save", "variables")
    entries: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    offset = 0
    for name in names:
        node = graph.variables.get(name)
        if node is None:
            raise SerializationError(f"checkpoint save: the graph has no Variable named {name!r}")
        value = session.variables.get(name)
        if value is None:
            value = node.attrs["initial_value"]
        d = dt.as_dtype(node.attrs["dtype"])
        arr = np.array(value, dtype=np.dtype(d.numpy).newbyteorder("<"), order="C")  # 0-d stays 0-d
        raw = arr.tobytes(order="C")
        entries.append({"name": name, "dtype": d.name, "shape": list(arr.shape), "offset": offset,
                        "nbytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()})
        chunks.append(raw)
        offset += len(raw)
    header = json.dumps({"format": FORMAT, "version": VERSION, "variables": entries,
                         "header_sha256": _header_digest(entries)}, sort_keys=True).encode("utf-8")
    target = file_path(path, "checkpoint.save")
    tmp = f"{target}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC)
            f.write(b"%012d\n" % len(header))
            f.write(header)
            for raw in chunks:
                f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as e:
        raise SerializationError(f"cannot write a checkpoint to {target!r}: {e}") from None
    return names


def read(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The values stored in a checkpoint, by Variable name, each checked against its header entry and
    digest. Raises SerializationError naming what is wrong (and the variable, where one is at fault)."""
    where = file_path(path, "checkpoint.read")
    try:
        return _read(where)
    except OSError as e:
        raise SerializationError(f"cannot read a checkpoint from {path!r}: {e}") from None


def _read(where: str) -> dict[str, np.ndarray]:
    with open(where, "rb") as f:
        magic = f.read(len(MAGIC))
        if magic != MAGIC:
            raise SerializationError(f"{where}: not a Turnout checkpoint (expected the line {MAGIC!r})")
        size_line = f.read(13)
        if not _HEADER_LEN.match(size_line):
            raise SerializationError(f"{where}: malformed header length line {size_line!r}")
        size = int(size_line[:12])
        if size > MAX_HEADER_BYTES:
            raise SerializationError(f"{where}: header of {size} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
        raw_header = f.read(size)
        if len(raw_header) != size:
            raise SerializationError(f"{where}: the file ends inside its header")
        data = f.read()
    try:
        header = json.loads(raw_header.decode("utf-8"))
    except (ValueError, RecursionError) as err:  # bad UTF-8 or JSON, an int over Python's digit limit, deep nesting
        raise SerializationError(f"{where}: the header is not valid JSON ({err})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SerializationError(f"{where}: the header does not describe a {FORMAT}")
    if header.get("version") != VERSION:
        raise SerializationError(f"{where}: checkpoint version {header.get('version')!r}; this Turnout reads {VERSION}")
    unknown = sorted(set(header) - {"format", "version", "variables", "header_sha256"})
    if unknown:
        raise SerializationError(f"{where}: unknown header field {unknown[0][:80]!r}")
    entries = header.get("variables")
    if not isinstance(entries, list):
        raise SerializationError(f"{where}: 'variables' must be a list")
    out: dict[str, np.ndarray] = {}
    for entry in entries:
        name, arr = _entry(where, entry, data)
        if name in out:
            raise SerializationError(f"{where}: variable {name!r} is stored twice")
        out[name] = arr
    if "header_sha256" in header and header["header_sha256"] != _header_digest(entries):
        raise SerializationError(f"{where}: the header does not match its digest (a damaged name?)")
    return out


def _header_digest(entries: list[Any]) -> str:
    """The digest of the header's variable entries, written as canonical JSON: it covers what the
    variables' own digests do not, their names, dtypes, shapes and places."""
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode("utf-8")).hexdigest()


def _entry(where: str, e: Any, data: bytes) -> tuple[str, np.ndarray]:
    """One header entry, checked field by field, and the array it describes."""
    if not isinstance(e, dict) or set(e) != {"name", "dtype", "shape", "offset", "nbytes", "sha256"}:
        raise SerializationError(f"{where}: malformed variable entry {e!r}")
    name = e["name"]
    if not isinstance(name, str) or not name:
        raise SerializationError(f"{where}: a variable entry has no valid name: {e!r}")
    d = _DTYPES.get(e["dtype"]) if isinstance(e["dtype"], str) else None
    if d is None:
        raise SerializationError(f"{where}: variable {name!r} has unknown dtype {e['dtype']!r}")
    shape = e["shape"]
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                              for s in shape):
        raise SerializationError(f"{where}: variable {name!r} has a malformed shape {shape!r}")
    offset, nbytes = e["offset"], e["nbytes"]
    for field, v in (("offset", offset), ("nbytes", nbytes)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise SerializationError(f"{where}: variable {name!r} has a malformed {field} {v!r}")
    itemsize = np.dtype(d.numpy).itemsize
    # math.prod of Python ints, not np.prod: int64 arithmetic wraps, and a wrapped count could match
    # (numpy also refuses a shape whose nonzero dimensions multiply past its index range, [2**40, 2**40, 0])
    why = too_large_to_index(shape, itemsize)
    if why is not None:
        raise SerializationError(f"{where}: variable {name!r} declares shape {shape}: {why}")
    if nbytes != math.prod(shape) * itemsize:
        raise SerializationError(f"{where}: variable {name!r}: {nbytes} bytes do not hold {d.name}{shape}")
    if offset + nbytes > len(data):
        raise SerializationError(f"{where}: variable {name!r} lies past the end of the file (truncated?)")
    raw = data[offset:offset + nbytes]
    if not isinstance(e["sha256"], str) or hashlib.sha256(raw).hexdigest() != e["sha256"]:
        raise SerializationError(f"{where}: variable {name!r}: its bytes do not match their digest (corrupted?)")
    arr = np.frombuffer(raw, dtype=np.dtype(d.numpy).newbyteorder("<")).reshape(shape)
    if d.name == "bool" and arr.size and not np.isin(arr.view(np.uint8), (0, 1)).all():
        raise SerializationError(f"{where}: variable {name!r}: bool bytes other than 0 and 1")
    return name, arr.astype(np.dtype(d.numpy), copy=True)


def restore(session: Any, path: str | os.PathLike[str], strict: bool = True) -> list[str]:
    """Load a checkpoint into ``session``'s Variables; returns the names restored.

    Every stored Variable must exist in the session's graph with the same dtype and shape, or nothing
    is restored (a checkpoint of another model is an error, not a partial load). With ``strict`` (the
    default) every Variable of the graph must also be in the checkpoint."""
    session_argument(session, "checkpoint.restore")
    where = file_path(path, "checkpoint.restore")
    values = read(where)
    graph = session.graph
    for name, arr in values.items():
        node = graph.variables.get(name)
        if node is None:
            raise SerializationError(f"{where}: stores variable {name!r}, which this graph does not have")
        want_dtype, want_shape = node.attrs["dtype"], tuple(node.attrs["shape"])
        if dt.as_dtype(want_dtype).name != _dtype_name(arr) or arr.shape != want_shape:
            raise SerializationError(
                f"{where}: variable {name!r} is stored as {_dtype_name(arr)}{list(arr.shape)}, but the graph "
                f"declares {dt.as_dtype(want_dtype).name}{list(want_shape)}")
    if strict:
        missing = sorted(set(graph.variables) - set(values))
        if missing:
            raise SerializationError(f"{where}: has no value for the graph's variables {missing} "
                                     f"(pass strict=False to restore the others)")
    session.variables.update(values)
    return sorted(values)


def _dtype_name(arr: np.ndarray) -> str:
    return dt.as_dtype(arr.dtype).name
