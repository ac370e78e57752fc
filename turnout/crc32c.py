"""CRC-32C (Castagnoli), the checksum of TensorFlow's file formats, with numpy alone.

Why a module of its own: TensorBoard event files (TFRecords) and TensorFlow checkpoints (their tables
and their tensor bytes) are all checksummed with CRC-32C, and Turnout reads and writes both without
TensorFlow or a C extension. The two users sit in different packages, so the checksum lives here, with
nothing but numpy beneath it.

A table-driven loop over bytes in Python runs at a few MB/s, too slow for a checkpoint's tensors, so
long inputs are cut into equal lanes whose CRCs numpy computes side by side (one vectorised table step
per byte position), then folded together: a CRC is linear over GF(2), so the CRC of ``a + b`` is the
CRC of ``a`` advanced over ``len(b)`` zero bytes, xor the CRC of ``b`` from a zero register.
"""

from __future__ import annotations

import math

import numpy as np

_POLY = 0x82F63B78  # CRC-32C, reflected
_MASK_DELTA = 0xA282EAD8


def _table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()
_NP_TABLE = np.array(_TABLE, dtype=np.uint32)
#: inputs shorter than this are checksummed byte by byte (numpy's set-up would cost more)
VECTOR_MIN_BYTES = 1 << 14


def _raw(c: int, data: bytes | memoryview) -> int:
    """The CRC register ``c`` after ``data``, without the initial and final inversion."""
    t = _TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c


def _zeros_operator(n: int) -> list[np.ndarray]:
    """Four 256-entry tables whose xor, indexed by the register's bytes, advances it over ``n`` zero
    bytes (the register update is linear, so it is fixed by the images of the 32 unit registers)."""
    basis = np.array([1 << k for k in range(32)], dtype=np.uint32)
    for _ in range(n):
        basis = _NP_TABLE[basis & 0xFF] ^ (basis >> 8)
    tables = []
    for byte in range(4):
        t = np.zeros(256, dtype=np.uint32)
        for bit in range(8):
            t[np.arange(256) & (1 << bit) != 0] ^= basis[byte * 8 + bit]
        tables.append(t)
    return tables


def _raw_lanes(c: int, data: bytes | memoryview) -> int:
    """``_raw`` for long inputs: lanes checksummed side by side, then folded in order."""
    size = len(data)
    width = max(64, math.isqrt(size // 8))  # balances numpy steps (width) against Python folds (lanes)
    lanes = size // width
    body = np.frombuffer(data, dtype=np.uint8, count=lanes * width).reshape(lanes, width)
    regs = np.zeros(lanes, dtype=np.uint32)
    for j in range(width):
        regs = _NP_TABLE[(regs ^ body[:, j]) & 0xFF] ^ (regs >> 8)
    t0, t1, t2, t3 = (t.tolist() for t in _zeros_operator(width))
    for r in regs.tolist():
        c = t0[c & 0xFF] ^ t1[(c >> 8) & 0xFF] ^ t2[(c >> 16) & 0xFF] ^ t3[c >> 24] ^ r
    return _raw(c, memoryview(data)[lanes * width:])


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """The CRC-32C of ``data``; pass a previous result as ``value`` to extend it over more bytes."""
    view = memoryview(data).cast("B")
    c = value ^ 0xFFFFFFFF
    c = _raw_lanes(c, view) if len(view) >= VECTOR_MIN_BYTES else _raw(c, view)
    return c ^ 0xFFFFFFFF


def mask(crc: int) -> int:
    """The masked form TensorFlow stores (a CRC of data that holds CRCs would otherwise be weak)."""
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    """The CRC that ``mask`` turned into ``masked``."""
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def masked_crc(data: bytes | bytearray | memoryview) -> int:
    """``mask(crc32c(data))``."""
    return mask(crc32c(data))
