"""TensorFlow v1 checkpoints, read and written without TensorFlow.

Why: a team moving a TF1 model to Turnout has its trained weights in the checkpoint that
``tf.compat.v1.train.Saver`` wrote, and wants what Turnout trains back in a form TensorFlow restores.
This module speaks that format (TensorFlow's "V2" tensor bundle) with numpy alone: no TensorFlow, no
protobuf package. ``turnout.checkpoint`` re-exports the public functions (``tn.checkpoint.read_tf``).

The format. A checkpoint with prefix ``P`` is one index file ``P.index`` and ``N`` data files
``P.data-0000i-of-0000N``. A data file is the tensors' raw bytes (little-endian, C order, one tensor
after another). The index file is a sorted string table, the layout of LevelDB's tables:

* data blocks, each a run of entries ``(shared, unshared, value length, key suffix, value)`` whose
  key shares ``shared`` leading bytes with the previous key, then an array of restart offsets (entries
  stored with their whole key) and their count, all 32-bit little-endian;
* after every block a trailer: a compression byte (0: none) and the masked CRC-32C of the block and
  that byte;
* a meta-index block (empty here) and an index block whose entries map a key at or past the last key
  of each data block to that block's position ("block handle": offset and size as varints);
* a 48-byte footer: the meta-index and index handles, zero padding, and a fixed 64-bit magic number.

The table maps the empty key to a header message (the number of data files, the byte order, a format
version) and each tensor's name to an entry message (dtype, shape, data file, offset, size, masked
CRC-32C of the bytes). Both are protocol-buffer messages with a handful of integer fields, decoded and
encoded here by a small varint codec.

Reading trusts nothing: every length and offset is checked against the file's size before a byte is
read, every checksum is verified, and anything malformed or truncated is a ``SerializationError``
naming the file and what is wrong. Nothing in a checkpoint is executed.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal, Optional

import numpy as np

from turnout import dtypes as dt
from turnout.arguments import name_list, session_argument
from turnout.crc32c import crc32c, mask, unmask
from turnout.errors import ArgumentError, NotFoundError, SerializationError
from turnout.files import file_path
from turnout.shapes import too_large_to_index

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_BYTES = 48
TRAILER_BYTES = 5
#: the format version this module writes and the newest it reads (TensorFlow's is the same)
BUNDLE_VERSION = 1
#: the most dimensions TensorFlow allows a tensor
MAX_RANK = 254
#: how large a data block grows before the writer starts another (TensorFlow's default)
BLOCK_BYTES = 256 * 1024
_RESTART_INTERVAL = 16

#: TensorFlow's DataType numbers of the dtypes a checkpoint may hold here, and their numpy types
TF_DTYPES: dict[int, np.dtype[Any]] = {
    1: np.dtype(np.float32), 2: np.dtype(np.float64), 3: np.dtype(np.int32), 4: np.dtype(np.uint8),
    5: np.dtype(np.int16), 6: np.dtype(np.int8), 8: np.dtype(np.complex64), 9: np.dtype(np.int64),
    10: np.dtype(np.bool_), 17: np.dtype(np.uint16), 18: np.dtype(np.complex128), 19: np.dtype(np.float16),
    22: np.dtype(np.uint32), 23: np.dtype(np.uint64),
}
_TF_NUMBER = {d: n for n, d in TF_DTYPES.items()}
#: names of TensorFlow's other DataTypes, for messages about what is refused
_OTHER_TF_TYPES = {7: "string", 11: "qint8", 12: "quint8", 13: "qint32", 14: "bfloat16", 15: "qint16",
                   16: "quint16", 20: "resource", 21: "variant"}


def _supported() -> str:
    return ", ".join(sorted(d.name for d in TF_DTYPES.values()))


def tf_dtype_name(number: int) -> str:
    """A readable name of a TensorFlow DataType number (``"float32"``, ``"string"``, ``"DataType 99"``)."""
    if number in TF_DTYPES:
        return TF_DTYPES[number].name
    return _OTHER_TF_TYPES.get(number, f"DataType {number}")


# ---- protocol-buffer wire format ---------------------------------------------------------------------
def _varint(buf: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    """The unsigned varint at ``pos`` (at most 10 bytes, below 2**64) and the position after it."""
    value = shift = 0
    while True:
        if pos >= end:
            raise SerializationError(f"{what}: a varint runs past the end of its message")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift >= 70:
            raise SerializationError(f"{what}: a varint longer than 10 bytes")
    if value >= 1 << 64:
        raise SerializationError(f"{what}: a varint beyond 64 bits")
    return value, pos


def _fields(buf: bytes, what: str) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` for each field of a message: an int for varint and fixed
    fields, bytes for length-delimited ones. Groups (wire types 3 and 4, unused by these messages) and
    unknown wire types are malformed."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos, end, what)
        number, wire = key >> 3, key & 7
        if number == 0 or number >= 1 << 29:
            raise SerializationError(f"{what}: field number {number} is out of range")
        value: Any
        if wire == 0:
            value, pos = _varint(buf, pos, end, what)
        elif wire == 1 or wire == 5:
            n = 8 if wire == 1 else 4
            if pos + n > end:
                raise SerializationError(f"{what}: field {number} runs past the end of its message")
            value = int.from_bytes(buf[pos:pos + n], "little")
            pos += n
        elif wire == 2:
            n, pos = _varint(buf, pos, end, what)
            if n > end - pos:
                raise SerializationError(f"{what}: field {number} declares {n} bytes, "
                                         f"{end - pos} remain in its message")
            value = bytes(buf[pos:pos + n])
            pos += n
        else:
            raise SerializationError(f"{what}: field {number} has wire type {wire}, which these messages never use")
        yield number, wire, value


def _int(value: int, wire: int, want: int, bits: int, what: str, field: str) -> int:
    """A varint field as the signed integer of ``bits`` bits that protobuf's int32/int64 decode it to."""
    if wire != want:
        raise SerializationError(f"{what}: field {field} has wire type {wire}, expected {want}")
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _enc_varint(v: int) -> bytes:
    v &= (1 << 64) - 1  # negative int32/int64 values are written as their 64-bit two's complement
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _enc_int(number: int, v: int) -> bytes:
    return _enc_varint(number << 3) + _enc_varint(v) if v else b""  # proto3 leaves zeros out


def _enc_bytes(number: int, b: bytes) -> bytes:
    return _enc_varint(number << 3 | 2) + _enc_varint(len(b)) + b


# ---- the two messages --------------------------------------------------------------------------------
class _Header:
    """The message under the empty key: data-file count, byte order, format version."""

    def __init__(self, num_shards: int, big_endian: bool) -> None:
        self.num_shards = num_shards
        self.big_endian = big_endian


def _decode_header(buf: bytes, what: str) -> _Header:
    what = f"{what}: the header"
    num_shards, endianness = 0, 0
    producer, min_consumer, bad = 0, 0, []
    for number, wire, value in _fields(buf, what):
        if number == 1:
            num_shards = _int(value, wire, 0, 32, what, "num_shards")
        elif number == 2:
            endianness = _int(value, wire, 0, 32, what, "endianness")
        elif number == 3:
            if wire != 2:
                raise SerializationError(f"{what}: field version has wire type {wire}, expected 2")
            for vn, vw, vv in _fields(value, f"{what} version"):
                if vn == 1:
                    producer = _int(vv, vw, 0, 32, what, "version.producer")
                elif vn == 2:
                    min_consumer = _int(vv, vw, 0, 32, what, "version.min_consumer")
                elif vn == 3 and vw == 2:  # packed
                    pos = 0
                    while pos < len(vv):
                        b, pos = _varint(vv, pos, len(vv), what)
                        bad.append(_int(b, 0, 0, 32, what, "version.bad_consumers"))
                elif vn == 3:
                    bad.append(_int(vv, vw, 0, 32, what, "version.bad_consumers"))
    if num_shards < 1:
        raise SerializationError(f"{what}: num_shards is {num_shards}; a checkpoint has at least one data file")
    if endianness not in (0, 1):
        raise SerializationError(f"{what}: unknown byte order {endianness}")
    if producer < 0 or min_consumer > BUNDLE_VERSION or BUNDLE_VERSION in bad:
        raise SerializationError(f"{what}: format version {producer} (readers from {min_consumer}, "
                                 f"not {bad}); this Turnout reads version {BUNDLE_VERSION}")
    return _Header(num_shards, endianness == 1)


def _encode_header(num_shards: int) -> bytes:
    return _enc_int(1, num_shards) + _enc_bytes(3, _enc_int(1, BUNDLE_VERSION))


class Entry:
    """Where a tensor lies and what it is: TensorFlow's DataType number, its shape, its data file
    (``shard``), ``offset`` and ``size`` in bytes there, and the CRC-32C of those bytes."""

    def __init__(self, dtype: int, shape: tuple[int, ...], shard: int, offset: int, size: int, crc: int,
                 sliced: bool = False) -> None:
        self.dtype, self.shape, self.shard, self.offset, self.size, self.crc = dtype, shape, shard, offset, size, crc
        #: stored in slices under other keys (a partitioned variable), which this module does not read
        self.sliced = sliced

    @property
    def dtype_name(self) -> str:
        """A readable name of ``dtype`` (``"float32"``), for messages."""
        return tf_dtype_name(self.dtype)


def _decode_entry(buf: bytes, what: str) -> Entry:
    dtype, shard, offset, size, crc = 0, 0, 0, 0, 0
    shape: tuple[int, ...] = ()
    sliced = False
    for number, wire, value in _fields(buf, what):
        if number == 1:
            dtype = _int(value, wire, 0, 32, what, "dtype")
        elif number == 2:
            if wire != 2:
                raise SerializationError(f"{what}: field shape has wire type {wire}, expected 2")
            shape = _decode_shape(value, what)
        elif number == 3:
            shard = _int(value, wire, 0, 32, what, "shard_id")
        elif number == 4:
            offset = _int(value, wire, 0, 64, what, "offset")
        elif number == 5:
            size = _int(value, wire, 0, 64, what, "size")
        elif number == 6:
            if wire != 5:
                raise SerializationError(f"{what}: field crc32c has wire type {wire}, expected 5")
            crc = value
        elif number == 7:
            sliced = True
    if shard < 0 or offset < 0 or size < 0:
        raise SerializationError(f"{what}: negative shard_id, offset or size ({shard}, {offset}, {size})")
    return Entry(dtype, shape, shard, offset, size, crc, sliced)


def _decode_shape(buf: bytes, what: str) -> tuple[int, ...]:
    dims: list[int] = []
    for number, wire, value in _fields(buf, f"{what} shape"):
        if number == 2:
            if wire != 2:
                raise SerializationError(f"{what}: a shape dimension has wire type {wire}, expected 2")
            size = 0
            for dn, dw, dv in _fields(value, f"{what} shape dimension"):
                if dn == 1:
                    size = _int(dv, dw, 0, 64, what, "dim.size")
            if size < 0:
                raise SerializationError(f"{what}: a stored tensor has an unknown dimension ({size})")
            dims.append(size)
            if len(dims) > MAX_RANK:
                raise SerializationError(f"{what}: more than {MAX_RANK} dimensions")
        elif number == 3 and wire == 0 and value:
            raise SerializationError(f"{what}: a stored tensor has an unknown rank")
    return tuple(dims)


def _encode_entry(e: Entry) -> bytes:
    dims = b"".join(_enc_bytes(2, _enc_int(1, d)) for d in e.shape)
    out = _enc_int(1, e.dtype) + _enc_bytes(2, dims) + _enc_int(3, e.shard) + _enc_int(4, e.offset)
    out += _enc_int(5, e.size)
    return out + _enc_varint(6 << 3 | 5) + struct.pack("<I", e.crc)


# ---- the sorted string table -------------------------------------------------------------------------
def _handle(buf: bytes, pos: int, end: int, what: str) -> tuple[int, int, int]:
    offset, pos = _varint(buf, pos, end, what)
    size, pos = _varint(buf, pos, end, what)
    return offset, size, pos


def _block(data: bytes, offset: int, size: int, where: str, what: str) -> bytes:
    """The contents of the block at ``offset`` (``size`` bytes, then its trailer), checksum verified."""
    limit = len(data) - FOOTER_BYTES
    if offset > limit or size > limit - offset - TRAILER_BYTES:
        raise SerializationError(f"{where}: the {what} (at byte {offset}, {size} bytes) lies past the end of "
                                 f"the table ({limit} bytes; truncated?)")
    contents = data[offset:offset + size]
    kind = data[offset + size]
    (stored,) = struct.unpack_from("<I", data, offset + size + 1)
    if unmask(stored) != crc32c(data[offset + size:offset + size + 1], crc32c(contents)):
        raise SerializationError(f"{where}: the {what} at byte {offset} does not match its checksum (corrupted?)")
    if kind != 0:
        raise SerializationError(f"{where}: the {what} at byte {offset} is compressed (type {kind}); "
                                 "only uncompressed tables are supported")
    return contents


def _block_entries(block: bytes, where: str, what: str) -> Iterator[tuple[bytes, bytes]]:
    """The ``(key, value)`` entries of a block, keys rebuilt from their shared prefixes."""
    if len(block) < 4:
        raise SerializationError(f"{where}: the {what} is {len(block)} bytes, too short for its restart count")
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    if restarts > (len(block) - 4) // 4:
        raise SerializationError(f"{where}: the {what} declares {restarts} restart points, more than fit")
    end = len(block) - 4 - 4 * restarts
    for k in range(restarts):
        (r,) = struct.unpack_from("<I", block, end + 4 * k)
        if r > end:
            raise SerializationError(f"{where}: the {what} has a restart point past its entries")
    pos, key = 0, b""
    while pos < end:
        shared, pos = _varint(block, pos, end, f"{where}: the {what}")
        unshared, pos = _varint(block, pos, end, f"{where}: the {what}")
        vlen, pos = _varint(block, pos, end, f"{where}: the {what}")
        if shared > len(key) or unshared > end - pos or vlen > end - pos - unshared:
            raise SerializationError(f"{where}: an entry of the {what} at byte {pos} runs past its block")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + vlen]
        pos += vlen


def _table(data: bytes, where: str) -> list[tuple[bytes, bytes]]:
    """Every ``(key, value)`` of a table, in order; keys must increase strictly."""
    if len(data) < FOOTER_BYTES:
        raise SerializationError(f"{where}: {len(data)} bytes, too short for a table footer (truncated?)")
    (magic,) = struct.unpack_from("<Q", data, len(data) - 8)
    if magic != TABLE_MAGIC:
        raise SerializationError(f"{where}: not a checkpoint index (the table's magic number is missing)")
    foot = len(data) - FOOTER_BYTES
    meta_off, meta_size, pos = _handle(data, foot, foot + 40, f"{where}: the footer")
    index_off, index_size, _ = _handle(data, pos, foot + 40, f"{where}: the footer")
    _block(data, meta_off, meta_size, where, "meta-index block")
    index = _block(data, index_off, index_size, where, "index block")
    out: list[tuple[bytes, bytes]] = []
    for sep, value in _block_entries(index, where, "index block"):
        off, size, used = _handle(value, 0, len(value), f"{where}: a block handle")
        if used != len(value):
            raise SerializationError(f"{where}: a block handle has {len(value) - used} trailing bytes")
        for key, val in _block_entries(_block(data, off, size, where, "data block"), where, "data block"):
            if out and key <= out[-1][0]:
                raise SerializationError(f"{where}: key {key!r} is out of order (after {out[-1][0]!r})")
            if key > sep:
                raise SerializationError(f"{where}: key {key!r} lies past its block's index key {sep!r}")
            out.append((key, val))
    return out


class _BlockWriter:
    def __init__(self, restart_interval: int) -> None:
        self.buf = bytearray()
        self.restarts = [0]
        self.count = 0
        self.last = b""
        self.interval = restart_interval

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.count < self.interval:
            limit = min(len(key), len(self.last))
            while shared < limit and key[shared] == self.last[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buf))
            self.count = 0
        self.buf += _enc_varint(shared) + _enc_varint(len(key) - shared) + _enc_varint(len(value))
        self.buf += key[shared:] + value
        self.last = key
        self.count += 1

    def finish(self) -> bytes:
        return bytes(self.buf) + b"".join(struct.pack("<I", r) for r in self.restarts) + struct.pack(
            "<I", len(self.restarts))


def _write_table(items: list[tuple[bytes, bytes]], block_bytes: int) -> bytes:
    """A table of ``items`` (sorted by key): data blocks, an empty meta-index, the index, the footer."""
    out = bytearray()

    def emit(contents: bytes) -> bytes:
        handle = _enc_varint(len(out)) + _enc_varint(len(contents))
        out.extend(contents + b"\x00" + struct.pack("<I", mask(crc32c(b"\x00", crc32c(contents)))))
        return handle

    index = _BlockWriter(1)
    block = _BlockWriter(_RESTART_INTERVAL)
    for k, (key, value) in enumerate(items):
        block.add(key, value)
        if len(block.buf) >= block_bytes or k == len(items) - 1:
            index.add(key, emit(block.finish()))
            block = _BlockWriter(_RESTART_INTERVAL)
    meta = emit(_BlockWriter(_RESTART_INTERVAL).finish())
    idx = emit(index.finish())
    footer = (meta + idx).ljust(FOOTER_BYTES - 8, b"\x00") + struct.pack("<Q", TABLE_MAGIC)
    return bytes(out + footer)


# ---- reading -----------------------------------------------------------------------------------------
def data_path(prefix: str | os.PathLike[str], shard: int, num_shards: int) -> str:
    """The name of data file ``shard`` of ``num_shards`` of the checkpoint ``prefix``."""
    return f"{os.fspath(prefix)}.data-{shard:05d}-of-{num_shards:05d}"


def _index(prefix: str) -> tuple[str, _Header, dict[str, Entry]]:
    where = f"{prefix}.index"
    try:
        with open(where, "rb") as f:
            data = f.read()
    except OSError as err:
        raise SerializationError(f"cannot read the checkpoint index {where!r}: {err}") from None
    items = _table(data, where)
    if not items or items[0][0] != b"":
        raise SerializationError(f"{where}: the table has no header (the entry under the empty key)")
    header = _decode_header(items[0][1], where)
    entries: dict[str, Entry] = {}
    for key, value in items[1:]:
        if key.startswith(b"\x00"):
            continue  # a slice of a partitioned tensor, under TensorFlow's encoded key (never a name)
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            raise SerializationError(f"{where}: tensor name {key!r} is not UTF-8") from None
        e = _decode_entry(value, f"{where}: tensor {name!r}")
        if e.shard >= header.num_shards:
            raise SerializationError(f"{where}: tensor {name!r} lies in data file {e.shard}, but the checkpoint "
                                     f"has {header.num_shards}")
        entries[name] = e
    return where, header, entries


def list_tf(prefix: str | os.PathLike[str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The tensors of the TensorFlow checkpoint ``prefix`` (the path without ``.index``), by name:
    ``(dtype name, shape)``, read from the index alone (like ``tf.train.list_variables``). A dtype this
    module cannot read is listed by TensorFlow's name for it (``"string"``)."""
    _, _, entries = _index(file_path(prefix, "list_tf", "prefix"))
    return {name: (e.dtype_name, e.shape) for name, e in entries.items()}


def read_tf(prefix: str | os.PathLike[str], names: Optional[Iterable[str]] = None) -> dict[str, np.ndarray]:
    """The tensors of the TensorFlow v1 checkpoint ``prefix`` (as ``tf.compat.v1.train.Saver`` wrote
    it: ``prefix.index`` and ``prefix.data-*``), by TensorFlow name (``"rnn/lstm_cell/kernel"``), as
    numpy arrays in native byte order; only ``names`` when given (``NotFoundError`` for a name the
    checkpoint lacks). Every tensor's size, place and checksum are verified; a malformed or truncated
    file, or a dtype outside ``TF_DTYPES``, is a ``SerializationError`` naming the file and the
    tensor."""
    if names is not None:
        names = name_list(names, "read_tf", "names")
    prefix = file_path(prefix, "read_tf", "prefix")
    where, header, entries = _index(prefix)
    if names is not None:
        missing = [n for n in names if n not in entries]
        if missing:
            raise NotFoundError(f"{where}: the checkpoint has no tensors named {missing}")
        entries = {n: entries[n] for n in names}
    order: Literal["<", ">"] = ">" if header.big_endian else "<"
    by_shard: dict[int, list[tuple[str, Entry]]] = {}
    for name, e in entries.items():
        by_shard.setdefault(e.shard, []).append((name, e))
    out: dict[str, np.ndarray] = {}
    for shard, group in sorted(by_shard.items()):
        path = data_path(prefix, shard, header.num_shards)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                for name, e in sorted(group, key=lambda ne: ne[1].offset):
                    out[name] = _tensor(f, size, path, name, e, order)
        except OSError as err:
            raise SerializationError(f"cannot read the checkpoint data file {path!r}: {err}") from None
    return {name: out[name] for name in entries}


def _tensor(f: Any, file_size: int, path: str, name: str, e: Entry, order: Literal["<", ">"]) -> np.ndarray:
    what = f"{path}: tensor {name!r}"
    if e.sliced:
        raise SerializationError(f"{what} is stored in slices (a partitioned variable); only whole tensors "
                                 "are read")
    base = TF_DTYPES.get(e.dtype)
    if base is None:
        raise SerializationError(f"{what} has dtype {e.dtype_name}, which Turnout does not read "
                                 f"(supported: {_supported()})")
    want = math.prod(e.shape) * base.itemsize
    if e.size != want:
        raise SerializationError(f"{what}: {e.size} bytes do not hold {base.name}{list(e.shape)} ({want} bytes)")
    why = too_large_to_index(e.shape, base.itemsize)  # (an empty tensor may still declare huge dimensions)
    if why is not None:
        raise SerializationError(f"{what} declares shape {list(e.shape)}: {why}")
    if e.offset > file_size or e.size > file_size - e.offset:
        raise SerializationError(f"{what} lies at bytes {e.offset} to {e.offset + e.size}, past the end of the "
                                 f"{file_size}-byte file (truncated?)")
    f.seek(e.offset)
    raw = f.read(e.size)
    if len(raw) != e.size:
        raise SerializationError(f"{what}: the file ended while reading it (truncated?)")
    if crc32c(raw) != unmask(e.crc):
        raise SerializationError(f"{what}: its bytes do not match their checksum (corrupted?)")
    arr = np.frombuffer(raw, dtype=base.newbyteorder(order)).reshape(e.shape)
    if base.kind == "b" and arr.size and not np.isin(arr.view(np.uint8), (0, 1)).all():
        raise SerializationError(f"{what}: bool bytes other than 0 and 1")
    return arr.astype(base, copy=True)


# ---- writing -----------------------------------------------------------------------------------------
def write_tf(prefix: str | os.PathLike[str], values: Mapping[str, Any], num_shards: int = 1,
             block_bytes: int = BLOCK_BYTES) -> list[str]:
    """Write ``values`` (TensorFlow name -> array) as a TensorFlow v1 checkpoint that
    ``tf.compat.v1.train.Saver.restore`` (and ``read_tf``) reads: ``prefix.index`` and
    ``num_shards`` data files (tensors dealt to them in name order). Returns the names written. Each
    file is written to a temporary name and renamed when complete; the prefix's directory is made if
    it does not exist."""
    if not isinstance(num_shards, int) or isinstance(num_shards, bool) or not 1 <= num_shards <= 99999:
        raise ArgumentError(f"write_tf: num_shards must be an int from 1 to 99999, got {num_shards!r}")
    if not isinstance(block_bytes, int) or isinstance(block_bytes, bool) or block_bytes < 1:
        raise ArgumentError(f"write_tf: block_bytes must be a positive int, got {block_bytes!r}")
    if not isinstance(values, Mapping):
        raise ArgumentError(f"write_tf: values must be a mapping from tensor names to arrays, got "
                            f"{type(values).__name__}")
    arrays: dict[bytes, tuple[str, np.ndarray]] = {}
    for name, value in values.items():
        if not isinstance(name, str) or not name:
            raise ArgumentError(f"write_tf: tensor names must be non-empty strings, got {name!r}")
        arr = _array(name, value)
        arr = arr.astype(arr.dtype.newbyteorder("="), copy=False)  # a big-endian array, by its values
        if arr.dtype not in _TF_NUMBER:
            raise ArgumentError(f"write_tf: tensor {name!r} has dtype {arr.dtype}, which a checkpoint cannot "
                                f"hold here (supported: {_supported()})")
        arrays[name.encode("utf-8")] = (name, arr)
    keys = sorted(arrays)
    shards: list[list[bytes]] = [[] for _ in range(num_shards)]
    items: list[tuple[bytes, bytes]] = [(b"", _encode_header(num_shards))]
    offsets = [0] * num_shards
    for k, key in enumerate(keys):
        _, arr = arrays[key]
        raw = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes(order="C")
        shard = k % num_shards
        items.append((key, _encode_entry(Entry(_TF_NUMBER[arr.dtype], tuple(arr.shape), shard, offsets[shard],
                                               len(raw), mask(crc32c(raw))))))
        shards[shard].append(raw)
        offsets[shard] += len(raw)
    target = file_path(prefix, "write_tf", "prefix")
    parent = os.path.dirname(target)
    try:
        if parent:
            os.makedirs(parent, exist_ok=True)
        for shard, chunks in enumerate(shards):
            _replace(data_path(target, shard, num_shards), chunks)
        _replace(f"{target}.index", [_write_table(items, block_bytes)])
    except OSError as e:
        raise SerializationError(f"cannot write the checkpoint {target!r}: {e}") from None
    return [arrays[k][0] for k in keys]


def _array(name: str, value: Any) -> np.ndarray:
    """``value`` as the array ``write_tf`` writes for tensor ``name``, or an ``ArgumentError`` naming
    it where numpy makes none (a ragged list: numpy's ``ValueError`` reached the user)."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as e:
        raise ArgumentError(f"write_tf: tensor {name!r} is no array: {e}") from None


def _replace(path: str, chunks: list[bytes]) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(c)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ---- sessions ----------------------------------------------------------------------------------------
def _mapping(graph: Any, name_map: Optional[Mapping[str, str]], where: str) -> dict[str, str]:
    """checkpoint name -> Turnout Variable name: ``name_map`` checked against the graph, or every
    Variable under its own name."""
    if name_map is None:
        return {n: n for n in sorted(graph.variables)}
    if not isinstance(name_map, Mapping):
        raise ArgumentError(f"{where}: name_map must be a mapping from checkpoint names to Variable names, got "
                            f"{type(name_map).__name__}")
    out: dict[str, str] = {}
    for tf_name, tn_name in name_map.items():
        if not isinstance(tf_name, str) or not isinstance(tn_name, str):
            raise ArgumentError(f"{where}: name_map must map strings to strings, got {tf_name!r}: {tn_name!r}")
        if tn_name not in graph.variables:
            raise NotFoundError(f"{where}: name_map names Variable {tn_name!r}, which the graph does not have")
        out[tf_name] = tn_name
    return out


def restore_tf(session: Any, prefix: str | os.PathLike[str], name_map: Optional[Mapping[str, str]] = None,
               strict: bool = True) -> list[str]:
    """Load the TensorFlow v1 checkpoint ``prefix`` into ``session``'s Variables; returns the Turnout
    names restored.

    Names: without ``name_map`` each Variable of the graph takes the tensor of its own name. A
    GraphDef imported with ``tn.import_graph_def`` keeps TensorFlow's variable names (a
    ``VarHandleOp``'s shared name, which ``Saver`` also uses as the checkpoint key), so its
    checkpoint restores as it is; pass ``name_map`` (checkpoint name -> Turnout Variable name) for
    an import with a ``prefix`` or a model built in Turnout under other names. Tensors the checkpoint
    holds beyond those asked for are ignored, as ``Saver`` ignores them. With ``strict`` (the default)
    every Variable asked for must be in the checkpoint; each must match its Variable's dtype and shape.
    On any error nothing is restored."""
    session_argument(session, "restore_tf")
    where = prefix = file_path(prefix, "restore_tf", "prefix")
    mapping = _mapping(session.graph, name_map, "restore_tf")
    listed = list_tf(prefix)
    wanted = {tf: tn for tf, tn in mapping.items() if tf in listed}
    missing = sorted(set(mapping) - set(wanted))
    if missing and (strict or name_map is not None):
        raise SerializationError(f"{where}: the checkpoint has no tensors named {missing}"
                                 + ("" if name_map is not None else " (pass strict=False to restore the others)"))
    values = read_tf(prefix, sorted(wanted))
    out: dict[str, np.ndarray] = {}
    for tf_name, tn_name in wanted.items():
        node = session.graph.variables[tn_name]
        d, shape = dt.as_dtype(node.attrs["dtype"]), tuple(node.attrs["shape"])
        arr = values[tf_name]
        if arr.dtype != np.dtype(d.numpy) or arr.shape != shape:
            raise SerializationError(f"{where}: tensor {tf_name!r} is {arr.dtype}{list(arr.shape)}, but Variable "
                                     f"{tn_name!r} is {d.name}{list(shape)}")
        out[tn_name] = arr
    session.variables.update(out)
    return sorted(out)


def save_tf(session: Any, prefix: str | os.PathLike[str], name_map: Optional[Mapping[str, str]] = None,
            num_shards: int = 1) -> list[str]:
    """Write the current values of ``session``'s Variables as a TensorFlow v1 checkpoint that
    ``tf.compat.v1.train.Saver.restore`` loads; returns the checkpoint names written. Names as in
    ``restore_tf``: each Variable under its own name, or the ``name_map`` (checkpoint name -> Turnout
    Variable name) entries only. A Variable no run has touched is saved with its initial value."""
    session_argument(session, "save_tf")
    mapping = _mapping(session.graph, name_map, "save_tf")
    values: dict[str, np.ndarray] = {}
    for tf_name, tn_name in mapping.items():
        node = session.graph.variables[tn_name]
        value = session.variables.get(tn_name)
        if value is None:
            value = node.attrs["initial_value"]
        values[tf_name] = np.asarray(value, dtype=dt.as_dtype(node.attrs["dtype"]).numpy)
    return write_tf(prefix, values, num_shards=num_shards)
