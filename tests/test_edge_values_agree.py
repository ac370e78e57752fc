"""Ops on edge values (NaN, infinities, signed zeros) give one answer on every backend.

``TopK`` picks the same entries whatever the input holds. The order is the one XLA's ``top_k``
gives a NaN and TensorFlow's kernel gives equal values: largest first, a NaN above every number
(infinities included), equal values (``-0.0`` and ``0.0`` among them) by their lower index.
numpy's sort puts a NaN last and XLA's ranks ``0.0`` above ``-0.0``, so without care the
interpreters and the compiled backend would return other entries for one input. Checked against a
sort written out here, on inputs with NaNs, infinities, signed zeros and ties.

``Pow`` is IEEE's ``pow`` everywhere: numpy's loop takes a square root for a scalar exponent of 0.5,
NaN at ``-inf`` and ``-0.0`` at ``-0.0``, where ``pow`` (and XLA) give ``inf`` and ``0.0``."""

from __future__ import annotations

import numpy as np
import pytest

import turnout as tn

BACKENDS = ["reference", "fast", "smallstep"]
NAN, INF = float("nan"), float("inf")
ROWS = [
    [1.0, NAN, 3.0, INF, NAN, 3.0, -0.0, 0.0],
    [0.0, -0.0, 0.0, -0.0, -INF, 2.0, 2.0, NAN],
    [-1.0, -INF, -1.0, -0.0, 5.0, NAN, INF, 0.0],
]


def _order(row: list[float]) -> list[int]:
    """The indices of ``row`` largest first: NaNs first (by index), then by value, ties by index."""
    return sorted(range(len(row)), key=lambda j: (0, 0.0, j) if np.isnan(row[j]) else (1, -row[j], j))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [1, 3, 8])
def test_top_k_orders_nans_first_and_equal_values_by_index_on_every_backend(backend: str, k: int) -> None:
    x_val = np.asarray(ROWS, np.float32)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [len(ROWS), 8])
        values, indices = g.create_node("TopK", [x], {"k": k}).outputs
    got_v, got_i = tn.Session(g, backend=backend).run([values, indices], {x: x_val})
    want_i = np.asarray([_order(r)[:k] for r in ROWS], np.int32)
    np.testing.assert_array_equal(got_i, want_i)
    want_v = np.take_along_axis(x_val, want_i, axis=-1)
    np.testing.assert_array_equal(got_v, want_v)  # (NaN where NaN)
    np.testing.assert_array_equal(np.signbit(got_v), np.signbit(want_v))  # a zero's sign is its entry's


@pytest.mark.parametrize("backend", BACKENDS)
def test_top_k_of_integers_keeps_ties_in_index_order(backend: str) -> None:
    """Ties by index, and the type's least and greatest values in their places (a key of ``-x``
    would overflow at the least and rank it first)."""
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    x_val = np.asarray([[3, lo, 3, 2, -5, 3, hi]], np.int32)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [1, 7])
        values, indices = g.create_node("TopK", [x], {"k": 7}).outputs
    got_v, got_i = tn.Session(g, backend=backend).run([values, indices], {x: x_val})
    np.testing.assert_array_equal(got_i, [[6, 0, 2, 5, 3, 4, 1]])
    np.testing.assert_array_equal(got_v, [[hi, 3, 3, 3, 2, -5, lo]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_pow_is_ieee_pow_whatever_the_exponents_shape(backend: str) -> None:
    """``x ** 0.5`` at ``-inf`` is ``inf`` and at ``-0.0`` is ``+0.0``, with the exponent a scalar or
    a vector of halves alike; other exponents as ``math.pow`` gives them."""
    import math

    x_val = np.asarray([-INF, -4.0, -0.0, 0.0, 4.0, INF], np.float32)
    exps = [0.5, 2.0, -1.0, 3.0]
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [6])
        outs = [tn.pow(x, tn.constant(e)) for e in exps] + [tn.pow(x, tn.constant([0.5] * 6))]
    got = tn.Session(g, backend=backend).run(outs, {x: x_val})

    def ieee(a: float, e: float) -> float:
        if a == 0 and e < 0:  # (an infinity, with the zero's sign for an odd integer power)
            return math.copysign(INF, a) if float(e).is_integer() and int(e) % 2 else INF
        try:
            return math.pow(a, e)
        except ValueError:  # (a negative number to a fractional power)
            return NAN

    for e, out in zip(exps + [0.5], got, strict=True):
        want = np.asarray([ieee(float(a), e) for a in x_val], np.float32)
        np.testing.assert_array_equal(out, want, err_msg=f"x ** {e}")
        finite_or_zero = ~np.isnan(want)
        np.testing.assert_array_equal(np.signbit(out[finite_or_zero]), np.signbit(want[finite_or_zero]),
                                      err_msg=f"x ** {e}: signs")


@pytest.mark.parametrize("backend", BACKENDS)
def test_signed_zeros_of_sign_and_floor_mod_are_tensorflows(backend: str) -> None:
    """``sign`` of either zero is ``+0.0`` (numpy's and TensorFlow's; XLA's keeps the sign), and a
    float ``FloorMod`` is C's ``fmod`` moved into the divisor's sign where it is not zero
    (TensorFlow's and XLA's; numpy's gives a zero remainder the divisor's sign)."""
    import math

    x_val = np.asarray([-0.0, 0.0, -1.0, 7.0, -0.0, 1.0, -1.0, 5.5, -5.5, INF, 3.0], np.float32)
    y_val = np.asarray([1.0, -1.0, 0.5, -7.0, INF, -INF, INF, -2.0, 2.0, 2.0, 0.0], np.float32)
    g = tn.Graph()
    with g.as_default():
        x, y = tn.placeholder(tn.float32, [11]), tn.placeholder(tn.float32, [11])
        outs = [tn.sign(x), tn.mod(x, y)]
    sign, mod = tn.Session(g, backend=backend).run(outs, {x: x_val, y: y_val})

    def floor_mod(a: float, b: float) -> float:
        if math.isnan(a) or math.isnan(b) or math.isinf(a) or b == 0:
            return NAN
        r = math.fmod(a, b)
        return r + b if r != 0 and (r < 0) != (b < 0) else r

    want = np.asarray([floor_mod(float(a), float(b)) for a, b in zip(x_val, y_val)], np.float32)
    np.testing.assert_array_equal(mod, want)
    np.testing.assert_array_equal(np.signbit(mod[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))
    np.testing.assert_array_equal(np.signbit(sign[:2]), [False, False])
    np.testing.assert_array_equal(sign, np.sign(x_val))
