"""TensorFlow's stateful random ops as its CPU kernels compute them, in numpy, bit for bit.

Why: a TF1 model initialises its variables by random ops (``glorot_uniform``, ``truncated_normal``,
...), and draws dropout masks and noise from them at every step. For a ported or imported model to
see TensorFlow's numbers, the importer folds an initializer's ops once (``import_context``'s
constant folding) and ``RandomDraw``'s kernel (``turnout.random_rules``) draws each execution's
chunk of the stream (``draw``, from the counter ``base`` the op's earlier executions reached).

How TensorFlow draws them (``RandomUniform``, ``RandomStandardNormal``, ``TruncatedNormal``,
``RandomUniformInt``):

* The generator is Philox4x32-10: a 128-bit counter, a 64-bit key, ten rounds; each call returns
  four 32-bit words and adds one to the counter. The op's attrs ``seed`` and ``seed2`` are the key
  and the counter's upper half; the lower half starts at 0 the first time the op runs, and each
  execution of ``n`` outputs moves it ``256 n`` calls on (``reserved_calls``), so execution ``k``
  of an op of fixed size starts at call ``256 n k``.
* The output is cut into *groups* of as many elements as one draw of the distribution makes (four
  floats, two doubles). Group ``g`` of a distribution that takes one Philox call per draw uses the
  ``g``-th call. ``TruncatedNormal`` rejects samples, so it takes a variable number of calls; each
  of its groups starts at a counter reserved for it (256 words per element: call ``256 g`` for
  groups of four floats, ``128 g`` for groups of two doubles) whatever the groups before it took, so
  that the kernel's threads can fill groups independently.
* Words become floats by taking their low mantissa bits under the exponent of 1 (a value in
  [1, 2)) and subtracting 1; a double takes 20 bits of one word and all of the next.
  Normals are Box-Muller pairs, computed in the sample's precision with the C library's ``log``,
  ``sqrt`` and ``sincos`` (here glibc's, through ctypes, as TensorFlow on Linux calls them;
  elsewhere numpy's, which may differ in the last bit). ``TruncatedNormal`` keeps the samples of
  magnitude under 2, in order.

Unseeded ops (``seed = seed2 = 0``): TensorFlow picks a fresh random key each time the kernel is
built; so does this, from numpy's generator, so the values differ from run to run, as there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from turnout.errors import ArgumentError, UnsupportedError
from turnout.limits import check_allocation

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)  # Philox4x32's round multipliers
_W0, _W1 = 0x9E3779B9, 0xBB67AE85  # its key schedule (the golden ratio, sqrt(3) - 1)
_LO = np.uint64(0xFFFFFFFF)
_RESERVED = 256  # Philox words TruncatedNormal reserves per output element
_TRUNCATE_AT = 2.0


# ---- the generator -----------------------------------------------------------------------------------
def philox(seed: int, seed2: int, calls: np.ndarray) -> np.ndarray:
    """The four words of Philox calls number ``calls`` (1-D, counters from 0) of the stream keyed by
    ``seed`` with counter high half ``seed2``: shape ``(len(calls), 4)``, uint32."""
    n = np.asarray(calls, np.uint64)
    c = [n & _LO, n >> np.uint64(32), np.full_like(n, seed2 & 0xFFFFFFFF), np.full_like(n, (seed2 >> 32) & 0xFFFFFFFF)]
    k0, k1 = seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF
    for r in range(10):
        if r:
            k0, k1 = (k0 + _W0) & 0xFFFFFFFF, (k1 + _W1) & 0xFFFFFFFF
        p0, p1 = _M0 * c[0], _M1 * c[2]  # 32 x 32 -> 64 bits: exact in uint64
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & _LO,
             (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1), p0 & _LO]
    return np.stack(c, axis=1).astype(np.uint32)


# ---- words -> values -----------------------------------------------------------------------------------
def _unit_float(w: np.ndarray) -> np.ndarray:
    """[0, 1) floats from words: 23 low bits as the mantissa of a float in [1, 2), minus 1."""
    return ((w & np.uint32(0x7FFFFF)) | np.uint32(0x3F800000)).view(np.float32) - np.float32(1.0)


def _unit_double(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """[0, 1) doubles from word pairs: 20 bits of ``hi`` and all of ``lo`` as the mantissa."""
    bits = ((hi.astype(np.uint64) & np.uint64(0xFFFFF)) << np.uint64(32)) | lo.astype(np.uint64)
    return (bits | np.uint64(0x3FF0000000000000)).view(np.float64) - 1.0


class _Libm:
    """The C library's ``log`` and ``sincos`` in float and double, elementwise: glibc's when ctypes
    finds it (what TensorFlow's kernels call on Linux), else numpy's."""

    def __init__(self) -> None:
        self.fns: dict[str, Callable[..., Any]] = {}
        path = ctypes.util.find_library("m")
        lib = None
        if path is not None:
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                lib = None
        if lib is None or not all(hasattr(lib, f) for f in ("logf", "log", "sincosf", "sincos")):
            return
        for name, ct in (("logf", ctypes.c_float), ("log", ctypes.c_double)):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = ct, [ct]
            self.fns[name] = fn
        for name, ct in (("sincosf", ctypes.c_float), ("sincos", ctypes.c_double)):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = None, [ct, ctypes.POINTER(ct), ctypes.POINTER(ct)]
            self.fns[name] = fn

    def log(self, x: np.ndarray) -> np.ndarray:
        fn = self.fns.get("logf" if x.dtype == np.float32 else "log")
        if fn is None:
            return np.log(x.astype(np.float64)).astype(x.dtype)
        return np.fromiter((fn(float(v)) for v in x.ravel()), x.dtype, x.size).reshape(x.shape)

    def sincos(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        name = "sincosf" if x.dtype == np.float32 else "sincos"
        fn = self.fns.get(name)
        if fn is None:
            return np.sin(x.astype(np.float64)).astype(x.dtype), np.cos(x.astype(np.float64)).astype(x.dtype)
        ct = ctypes.c_float if name == "sincosf" else ctypes.c_double
        s, c = ct(), ct()
        ps, pc = ctypes.byref(s), ctypes.byref(c)
        sin, cos = np.empty(x.size, x.dtype), np.empty(x.size, x.dtype)
        for i, v in enumerate(x.ravel()):
            fn(float(v), ps, pc)
            sin[i], cos[i] = s.value, c.value
        return sin.reshape(x.shape), cos.reshape(x.shape)


_LIBM: _Libm | None = None


def _libm() -> _Libm:
    global _LIBM
    if _LIBM is None:
        _LIBM = _Libm()
    return _LIBM


def _box_muller(w: np.ndarray, double: bool) -> np.ndarray:
    """Normal pairs from Philox words: ``w`` is ``(n, 2)`` words (float) or ``(n, 4)`` (double);
    returns ``(n, 2)``: ``sin(2 pi u') * r`` then ``cos(2 pi u') * r``, ``r = sqrt(-2 log u)``."""
    if double:
        u, v = _unit_double(w[:, 0], w[:, 1]), _unit_double(w[:, 2], w[:, 3])
        u = np.maximum(u, 1.0e-7)
        angle = 2 * math.pi * v
        r = np.sqrt(-2.0 * _libm().log(u))
    else:
        u, v = _unit_float(w[:, 0]), _unit_float(w[:, 1])
        u = np.maximum(u, np.float32(1.0e-7))
        angle = (2.0 * math.pi * v.astype(np.float64)).astype(np.float32)  # 2.0f * M_PI is a double
        r = np.sqrt(np.float32(-2.0) * _libm().log(u))
    s, c = _libm().sincos(angle)
    return np.stack([s * r, c * r], axis=1)


# ---- the ops -----------------------------------------------------------------------------------------
def _words(seed: int, seed2: int, size: int, per_call: int, base: int = 0) -> np.ndarray:
    """The Philox words of calls ``base`` to ``base + ceil(size / per_call) - 1``, one row per call."""
    return philox(seed, seed2, np.arange(-(-size // per_call), dtype=np.uint64) + np.uint64(base))


def reserved_calls(size: int) -> int:
    """The Philox calls one execution of a random op of ``size`` outputs reserves: the next
    execution starts this many calls later. TensorFlow's kernels reserve 256 calls per output
    (``GuardedPhiloxRandom::ReserveRandomOutputs(size, 256)``), whatever the distribution uses."""
    return size * _RESERVED


def uniform(seed: int, seed2: int, size: int, dtype: np.dtype, base: int = 0) -> np.ndarray:
    """``RandomUniform``: ``size`` values in [0, 1), from Philox call ``base`` on."""
    if dtype == np.float64:
        w = _words(seed, seed2, size, 2, base).reshape(-1, 2, 2)
        return _unit_double(w[..., 0], w[..., 1]).ravel()[:size]
    return _unit_float(_words(seed, seed2, size, 4, base).ravel())[:size]


def normal(seed: int, seed2: int, size: int, dtype: np.dtype, base: int = 0) -> np.ndarray:
    """``RandomStandardNormal``: ``size`` standard normals, from Philox call ``base`` on."""
    if dtype == np.float64:
        return _box_muller(_words(seed, seed2, size, 2, base), True).ravel()[:size]
    return _box_muller(_words(seed, seed2, size, 4, base).reshape(-1, 2), False).ravel()[:size]


def truncated_normal(seed: int, seed2: int, size: int, dtype: np.dtype, base: int = 0) -> np.ndarray:
    """``TruncatedNormal``: standard normals of magnitude under 2. Group ``g`` (4 values, 2 for
    doubles) draws from call ``base + g * stride`` on (256 words per value, 4 words per call) and
    keeps the first of its samples that pass; the calls are drawn a few per group at a time, more
    only for the groups still short."""
    double = dtype == np.float64
    group = 2 if double else 4
    stride = group * _RESERVED // 4
    groups = -(-size // group)
    out = np.empty((groups, group), np.float64 if double else np.float32)
    todo, taken, drawn = np.arange(groups), np.zeros(groups, np.int64), 0
    while todo.size:
        batch = 2 if drawn == 0 else 1
        calls = (todo[:, None] * stride + drawn + np.arange(batch)).ravel() + base
        w = philox(seed, seed2, calls.astype(np.uint64))
        pairs = _box_muller(w if double else w.reshape(-1, 2), double).reshape(todo.size, -1)
        passed = np.abs(pairs) < _TRUNCATE_AT
        slot = taken[todo][:, None] + np.cumsum(passed, axis=1) - 1  # where each passing sample goes
        keep = passed & (slot < group)
        out[np.broadcast_to(todo[:, None], keep.shape)[keep], slot[keep]] = pairs[keep]
        taken[todo] = np.minimum(taken[todo] + passed.sum(axis=1), group)
        drawn += batch
        todo = todo[taken[todo] < group]
    return out.ravel()[:size]


def uniform_int(seed: int, seed2: int, size: int, lo: int, hi: int, dtype: np.dtype, base: int = 0) -> np.ndarray:
    """``RandomUniformInt``: ``lo + word % (hi - lo)``, a word of 32 bits (int32) or two (int64),
    from Philox call ``base`` on."""
    span = (hi - lo) % (1 << (32 if dtype == np.int32 else 64))
    if dtype == np.int32:
        w = _words(seed, seed2, size, 4, base).ravel()[:size].astype(np.uint64)
        return ((w % np.uint64(span)).astype(np.int64) + lo).astype(np.int32)
    w = _words(seed, seed2, size, 2, base).reshape(-1, 2).astype(np.uint64)
    bits = (w[:, 0] | (w[:, 1] << np.uint64(32)))[:size]
    return ((bits % np.uint64(span)) + np.uint64(lo % (1 << 64))).view(np.int64)


# ---- what the importer calls -------------------------------------------------------------------------
#: op -> the numpy dtypes its ``dtype`` (``Tout``) attr may name here (TensorFlow's kernels also make
#: half and bfloat16, which Turnout has no dtype for)
DTYPES: dict[str, tuple[Any, ...]] = {
    "RandomUniform": (np.float32, np.float64),
    "RandomStandardNormal": (np.float32, np.float64),
    "TruncatedNormal": (np.float32, np.float64),
    "RandomUniformInt": (np.int32, np.int64),
}


def stream_seeds(seed: int, seed2: int) -> tuple[int, int]:
    """The key TensorFlow's kernel uses: the attrs as 64-bit words, or fresh random ones when both
    are 0 (an unseeded op; a new pair each call, so such values differ from run to run)."""
    if seed == 0 and seed2 == 0:
        fresh = np.random.default_rng().integers(0, 1 << 64, size=2, dtype=np.uint64)
        return int(fresh[0]), int(fresh[1])
    return seed % (1 << 64), seed2 % (1 << 64)


def dims_of(where: str, shape: Any) -> list[int]:
    """The dimensions a random op's shape input gives: a 1-D integer tensor of sizes >= 0."""
    shp = np.asarray(shape)
    if shp.ndim != 1 or shp.dtype.kind not in "iu":
        raise ArgumentError(f"{where}: its shape must be a 1-D int32 or int64 tensor, got {shp.dtype.name} "
                            f"of shape {list(shp.shape)}")
    dims = [int(d) for d in shp]
    if any(d < 0 for d in dims):
        raise ArgumentError(f"{where}: its shape {dims} has a negative dimension")
    return dims


def draw(op: str, where: str, dims: Sequence[int], dtype: np.dtype, seed: int, seed2: int, base: int,
         bounds: Sequence[Any] = ()) -> np.ndarray:
    """The output of random op ``op`` (named by ``where`` in errors) of shape ``dims`` from Philox
    call ``base`` on of the stream keyed by ``(seed, seed2)``: its ``k``-th execution in a session
    has ``base`` = the calls its earlier executions reserved (``reserved_calls``)."""
    if np.dtype(dtype) not in [np.dtype(d) for d in DTYPES[op]]:
        raise UnsupportedError(f"{where}: dtype {np.dtype(dtype).name} is not supported (TensorFlow's kernel "
                               f"takes {', '.join(np.dtype(d).name for d in DTYPES[op])})")
    check_allocation(where, dims, np.dtype(dtype).itemsize)
    size = math.prod(dims)
    if op == "RandomUniformInt":
        lo, hi = (np.asarray(b) for b in bounds)
        if lo.shape != () or hi.shape != ():
            raise ArgumentError(f"{where}: minval and maxval must be scalars, got shapes {list(lo.shape)} "
                                f"and {list(hi.shape)}")
        if size and not int(lo) < int(hi):  # (as TensorFlow's kernel: an empty output needs no range)
            raise ArgumentError(f"{where}: it needs minval < maxval, got {int(lo)} >= {int(hi)}")
        flat = (uniform_int(seed, seed2, size, int(lo), int(hi), np.dtype(dtype), base) if size
                else np.zeros(0, dtype))
    else:
        fn = {"RandomUniform": uniform, "RandomStandardNormal": normal, "TruncatedNormal": truncated_normal}[op]
        flat = fn(seed, seed2, size, np.dtype(dtype), base) if size else np.zeros(0, dtype)
    return np.asarray(flat, dtype).reshape(dims)


def sample(op: str, where: str, shape: Any, dtype: np.dtype, seed: int, seed2: int,
           bounds: Sequence[Any] = ()) -> np.ndarray:
    """The output of random op ``op`` (named by ``where`` in errors) the first time it runs:
    ``shape`` is its shape input's value, ``bounds`` RandomUniformInt's (minval, maxval)."""
    dims = dims_of(where, shape)
    return draw(op, where, dims, dtype, *stream_seeds(seed, seed2), 0, bounds)


__all__ = ["DTYPES", "dims_of", "draw", "normal", "philox", "reserved_calls", "sample",
           "stream_seeds", "truncated_normal", "uniform", "uniform_int"]
