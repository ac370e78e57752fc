"""The shape rule and the numpy kernel of ``RandomDraw``, the one random primitive.

Why a pure primitive: a random op that runs every step (a dropout mask) must draw the same numbers on
every executor, inside loops and conds and across ``Session.run`` calls. ``RandomDraw`` is a function
of its inputs alone: the values of TensorFlow's random op ``distribution`` (``RandomUniform``,
``RandomStandardNormal``, ``TruncatedNormal``, ``RandomUniformInt``) of the shape input 0 gives, drawn
from Philox call ``counter`` (input 1, an int64) on of the stream keyed by attrs ``seed`` and
``seed2`` (``turnout.tf_random``, bit for bit TensorFlow's CPU kernels). The stream's
position is state kept elsewhere, in an ordinary Variable that ``turnout.random`` reads, passes here
and advances (by ``tf_random.reserved_calls``), so every executor's Variable semantics orders the
draws, and this rule table needs nothing stateful. ``RandomUniformInt`` takes minval and maxval as
inputs 2 and 3.

``turnout.shape_rules`` and ``turnout.kernels`` take these rules into their tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout import shapes as sh
from turnout import tf_random
from turnout.errors import DTypeError, GraphBuildError, KernelError, ShapeError
from turnout.specs import TensorSpec

#: the distributions (TensorFlow's op names) and the Turnout dtypes each may draw
DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    op: tuple(np.dtype(d).name for d in dts) for op, dts in tf_random.DTYPES.items()
}
SEED_LIMIT = 1 << 64  # seeds are 64-bit words, as TensorFlow's attrs


def check_attrs(attrs: dict[str, Any]) -> None:
    """``distribution`` one of ``DISTRIBUTIONS``, ``dtype`` one it draws, ``seed`` and ``seed2``
    ints in [0, 2**64): a GraphBuildError naming the attr otherwise."""
    d = attrs.get("distribution")
    if d not in DISTRIBUTIONS:
        raise GraphBuildError(f"RandomDraw: attr distribution must be one of {sorted(DISTRIBUTIONS)}, got {d!r}")
    if attrs.get("dtype") not in DISTRIBUTIONS[d]:
        raise DTypeError(f"RandomDraw: {d} draws {' or '.join(DISTRIBUTIONS[d])}, got dtype {attrs.get('dtype')!r}")
    for a in ("seed", "seed2"):
        v = attrs.get(a)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) < SEED_LIMIT:
            raise GraphBuildError(f"RandomDraw: attr {a} must be an int in [0, 2**64), got {v!r}")


def shape_rule(op: str, specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    """Output: attr ``dtype``, of rank the length of the shape vector (its sizes known only from its
    value: builders that know them give the node its spec). The shape is an int32 or int64 vector,
    the counter an int64 scalar, the bounds scalars of the output's dtype."""
    check_attrs(attrs)
    d = attrs["distribution"]
    want = 4 if d == "RandomUniformInt" else 2
    if len(specs) != want:
        raise GraphBuildError(f"RandomDraw: {d} takes {want} inputs, got {len(specs)}")
    shp, counter = specs[0], specs[1]
    if shp.dtype not in (dt.int32, dt.int64):
        raise DTypeError(f"RandomDraw: the shape must be an int32 or int64 vector, got {shp.dtype.name}")
    if shp.shape is not None and len(shp.shape) != 1:
        raise ShapeError(f"RandomDraw: the shape must be a vector, got a tensor of shape {sh.fmt(shp.shape)}")
    if counter.dtype != dt.int64 or (counter.shape is not None and counter.shape != ()):
        raise DTypeError(f"RandomDraw: the counter must be an int64 scalar, got {counter.dtype.name} "
                         f"of shape {sh.fmt(counter.shape)}")
    out = dt.as_dtype(attrs["dtype"])
    for name, b in zip(("minval", "maxval"), specs[2:], strict=False):
        if b.dtype != out or (b.shape is not None and b.shape != ()):
            raise DTypeError(f"RandomDraw: {name} must be a {out.name} scalar, got {b.dtype.name} of shape "
                             f"{sh.fmt(b.shape)}")
    n = None if shp.shape is None else shp.shape[0]
    return [TensorSpec(out, None if n is None else (None,) * n)]


def runtime_error(inputs: Sequence[Any], attrs: dict[str, Any]) -> str | None:
    """What makes a draw fail when it runs (a negative size, a negative counter: a stream run past
    2**63 calls, or minval >= maxval of a non-empty RandomUniformInt), or None. Why one function:
    the compiled backend checks the same conditions and must say the same words."""
    dims = [int(x) for x in np.ravel(inputs[0])]
    if any(x < 0 for x in dims):
        return f"RandomDraw: its shape {dims} has a negative dimension"
    if int(inputs[1]) < 0:
        return "RandomDraw: its stream's counter ran past 2**63 Philox calls (start a new Session)"
    if attrs["distribution"] == "RandomUniformInt" and int(np.prod(dims)) and not int(inputs[2]) < int(inputs[3]):
        return f"RandomDraw: it needs minval < maxval, got {int(inputs[2])} >= {int(inputs[3])}"
    return None


def kernel(inputs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    """The draw, as ``tf_random.draw`` makes it from call ``counter`` on."""
    refused = runtime_error(inputs, attrs)
    if refused is not None:
        raise KernelError(refused)
    dims = [int(x) for x in np.ravel(inputs[0])]
    return [tf_random.draw(attrs["distribution"], "RandomDraw", dims, np.dtype(attrs["dtype"]),
                           int(attrs["seed"]), int(attrs["seed2"]), int(inputs[1]), inputs[2:])]


RANDOM_SHAPE_RULES = {"RandomDraw": shape_rule}
RANDOM_KERNELS = {"RandomDraw": kernel}

__all__ = ["DISTRIBUTIONS", "RANDOM_KERNELS", "RANDOM_SHAPE_RULES", "check_attrs", "runtime_error", "shape_rule",
           "kernel"]
