"""Lowering of ``RandomDraw``: TensorFlow's Philox4x32-10 draws in ``jax.numpy``, the numbers of
``turnout.tf_random`` (the interpreters' kernel, ``turnout.random_rules``).

Why they agree: Philox is 32-bit integer arithmetic (a 32 x 32 -> 64-bit product is exact in uint64,
and the backend traces with 64-bit types on), and a uniform float is the word's low bits put under the
exponent of 1 by a bit cast, then minus 1: exact in any arithmetic. So uniform floats and integers are
the same bits on every executor. Normals go through ``log``, ``sqrt``, ``sin`` and ``cos``: XLA's
may differ from the C library's (which the kernel calls, as TensorFlow does) in the last bit of a
float, so normals here agree with the interpreters' to rounding, not bit for bit (docs/random.rst).
``TruncatedNormal``'s rejection is the kernel's: group ``g`` draws from call ``g * stride`` on and
keeps its first passing samples, in a ``lax.while_loop`` that draws one more call for the groups
still short.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from turnout.errors import describe_node
from turnout.fast.lowering_base import fails_when_run, guard, lowering_rule, not_static
from turnout.fast.values import is_static
from turnout.random_rules import runtime_error

_U64 = jnp.uint64
_LO = 0xFFFFFFFF
_RESERVED = 256  # Philox words TruncatedNormal reserves per output element (tf_random._RESERVED)


def philox(seed: int, seed2: int, calls: Any) -> Any:
    """The four words of Philox calls ``calls`` (uint64) of the stream ``(seed, seed2)``:
    ``tf_random.philox`` in jnp, shape ``(len(calls), 4)``, uint32."""
    lo = _U64(_LO)
    c = [calls & lo, calls >> _U64(32), jnp.full_like(calls, seed2 & _LO), jnp.full_like(calls, (seed2 >> 32) & _LO)]
    k0, k1 = seed & _LO, (seed >> 32) & _LO
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & _LO, (k1 + 0xBB67AE85) & _LO
        p0, p1 = _U64(0xD2511F53) * c[0], _U64(0xCD9E8D57) * c[2]
        c = [(p1 >> _U64(32)) ^ c[1] ^ _U64(k0), p1 & lo, (p0 >> _U64(32)) ^ c[3] ^ _U64(k1), p0 & lo]
    return jnp.stack(c, axis=1).astype(jnp.uint32)


def _unit_float(w: Any) -> Any:
    bits = (w & jnp.uint32(0x7FFFFF)) | jnp.uint32(0x3F800000)
    return lax.bitcast_convert_type(bits, jnp.float32) - jnp.float32(1.0)


def _unit_double(hi: Any, lo: Any) -> Any:
    bits = ((hi.astype(_U64) & _U64(0xFFFFF)) << _U64(32)) | lo.astype(_U64)
    return lax.bitcast_convert_type(bits | _U64(0x3FF0000000000000), jnp.float64) - 1.0


def _box_muller(w: Any, double: bool) -> Any:
    """``tf_random._box_muller``: ``(n, 2)`` words (float) or ``(n, 4)`` (double) -> ``(n, 2)``."""
    if double:
        u, v = _unit_double(w[:, 0], w[:, 1]), _unit_double(w[:, 2], w[:, 3])
        u = jnp.maximum(u, 1.0e-7)
        angle = 2 * math.pi * v
        r = jnp.sqrt(-2.0 * jnp.log(u))
    else:
        u, v = _unit_float(w[:, 0]), _unit_float(w[:, 1])
        u = jnp.maximum(u, jnp.float32(1.0e-7))
        angle = (2.0 * math.pi * v.astype(jnp.float64)).astype(jnp.float32)
        r = jnp.sqrt(jnp.float32(-2.0) * jnp.log(u))
    return jnp.stack([jnp.sin(angle) * r, jnp.cos(angle) * r], axis=1)


def _calls(base: Any, n: int) -> Any:
    return base + jnp.arange(n, dtype=_U64)


def _uniform(key: tuple[int, int], size: int, double: bool, base: Any) -> Any:
    if double:
        w = philox(*key, _calls(base, -(-size // 2))).reshape(-1, 2, 2)
        return _unit_double(w[..., 0], w[..., 1]).ravel()[:size]
    return _unit_float(philox(*key, _calls(base, -(-size // 4))).ravel())[:size]


def _normal(key: tuple[int, int], size: int, double: bool, base: Any) -> Any:
    if double:
        return _box_muller(philox(*key, _calls(base, -(-size // 2))), True).ravel()[:size]
    return _box_muller(philox(*key, _calls(base, -(-size // 4))).reshape(-1, 2), False).ravel()[:size]


def _truncated_normal(key: tuple[int, int], size: int, double: bool, base: Any) -> Any:
    """Each group takes its first ``group`` samples of magnitude under 2, one Philox call at a time."""
    group = 2 if double else 4
    stride = group * _RESERVED // 4
    groups = -(-size // group)
    first = base + jnp.arange(groups, dtype=_U64) * _U64(stride)
    slots = jnp.arange(group)

    def step(state: Any) -> Any:
        out, taken, drawn = state
        w = philox(*key, first + drawn)
        vals = _box_muller(w if double else w.reshape(-1, 2), double).reshape(groups, -1)
        passed = (jnp.abs(vals) < 2.0) & (taken < group)[:, None]
        slot = taken[:, None] + jnp.cumsum(passed, axis=1, dtype=jnp.int32) - 1
        for j in range(vals.shape[1]):
            hit = passed[:, j:j + 1] & (slots[None, :] == slot[:, j:j + 1])
            out = jnp.where(hit, vals[:, j:j + 1], out)
        return out, jnp.minimum(taken + passed.sum(axis=1, dtype=jnp.int32), group), drawn + _U64(1)

    out0 = jnp.zeros((groups, group), jnp.float64 if double else jnp.float32)
    state = (out0, jnp.zeros(groups, jnp.int32), _U64(0))
    out, _, _ = lax.while_loop(lambda s: jnp.any(s[1] < group), step, state)
    return out.ravel()[:size]


def _uniform_int(key: tuple[int, int], size: int, double: bool, base: Any, lo: Any, hi: Any) -> Any:
    """``tf_random.uniform_int``: ``lo + word % (hi - lo)`` (a zero span, refused when run, reads 1)."""
    if not double:
        span = (hi.astype(jnp.int64) - lo.astype(jnp.int64)).astype(_U64)
        w = philox(*key, _calls(base, -(-size // 4))).ravel()[:size].astype(_U64)
        return ((w % jnp.maximum(span, _U64(1))).astype(jnp.int64) + lo.astype(jnp.int64)).astype(jnp.int32)
    span = hi.astype(_U64) - lo.astype(_U64)
    w = philox(*key, _calls(base, -(-size // 2))).reshape(-1, 2).astype(_U64)
    bits = (w[:, 0] | (w[:, 1] << _U64(32)))[:size]
    return lax.bitcast_convert_type((bits % jnp.maximum(span, _U64(1))) + lo.astype(_U64), jnp.int64)


_DRAW = {"RandomUniform": _uniform, "RandomStandardNormal": _normal, "TruncatedNormal": _truncated_normal}


@lowering_rule("RandomDraw")
def _random_draw(ctx, n, xs):
    """The draw of a static shape; a negative size fails where it runs, as on the interpreters, and a
    negative counter (a stream run past 2**63 calls) or an empty integer range is an error-word check."""
    shp, counter = xs[0], xs[1]
    if not is_static(shp):
        not_static(ctx, n, 0, f"fast backend: {describe_node(n)}: the shape of a random op must be known when "
                              "compiling")
    dims = [int(d) for d in np.ravel(shp)]
    d, dtype = n.attrs["distribution"], np.dtype(n.attrs["dtype"])
    if any(x < 0 for x in dims):
        return fails_when_run(ctx, n, runtime_error([shp, 0], n.attrs) or "", [0] * len(dims), dtype)
    guard(n, dims, dtype)
    counter = jnp.asarray(counter, jnp.int64)
    ctx.check(counter >= 0, f"{describe_node(n)}: {runtime_error([shp, -1], n.attrs)}")
    size = math.prod(dims)
    if size == 0:
        return [jnp.zeros(tuple(dims), dtype)]
    key = (int(n.attrs["seed"]), int(n.attrs["seed2"]))
    double, base = dtype.itemsize == 8, counter.astype(_U64)
    if d == "RandomUniformInt":
        lo, hi = jnp.asarray(xs[2]), jnp.asarray(xs[3])
        ctx.check(lo < hi, f"{describe_node(n)}: RandomDraw: it needs minval < maxval")
        flat = _uniform_int(key, size, double, base, lo, hi)
    else:
        flat = _DRAW[d](key, size, double, base)
    return [flat.reshape(tuple(dims)).astype(dtype)]


__all__ = ["philox"]
