"""The float model: a result that underflows below the smallest normal number is zero on every backend.

XLA on the CPU (the fast backend) and TensorFlow's CPU kernels run with subnormal results flushed to
zero; numpy keeps them. The interpreters' kernels flush every arithmetic result
(``turnout.kernels.flush_subnormals``), so a program whose values underflow computes the same on
every backend instead of differing by far more than rounding (``exp(x) * 1e30`` is ``0`` or
``8e-10``; ``sign(exp(x))`` is ``0`` or ``1``). Ops that only move a value's bits keep a subnormal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.kernels import flush_subnormals

pytest.importorskip("jax")

BACKENDS = ["reference", "fast", "smallstep"]

#: per dtype, an input whose exp underflows into the subnormal range, and a normal one
UNDER = {np.float32: (-90.0, -80.0), np.float64: (-740.0, -700.0)}


def run(build: Callable[[Any], Any], x: np.ndarray, backend: str, loop: bool = False) -> np.ndarray:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.as_dtype(x.dtype), list(x.shape), name="x")
        if loop:  # (inside a loop body: the fast backend's loop lowering, the interpreters' frames)
            _, y = tn.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, build(p)), [tn.constant(0), build(p)])
        else:
            y = build(p)
    return np.asarray(tn.Session(g, backend=backend).run(y, {p: x}))


PROGRAMS: dict[str, Callable[[Any], Any]] = {
    "exp scaled": lambda x: tn.exp(x) * 1e30,
    "sign of exp": lambda x: tn.sign(tn.exp(x)),
    "square": lambda x: tn.square(tn.exp(x * 0.5)) * 1e30,
    "sigmoid": lambda x: tn.sigmoid(x) * 1e30,
    "sum": lambda x: tn.reduce_sum(tn.exp(x)) * 1e30,
    "mean": lambda x: tn.reduce_mean(tn.exp(x)) * 1e30,
    "matmul": lambda x: tn.matmul(tn.reshape(tn.exp(x), [1, 2]), tn.ones([2, 1], x.dtype)) * 1e30,
    "divide": lambda x: tn.exp(x) / 2.0 * 1e30,
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_an_underflowing_result_is_zero_on_every_backend(backend: str, dtype: Any, name: str) -> None:
    x = np.array(UNDER[dtype], dtype)
    got = run(PROGRAMS[name], x, backend, loop=name in ("exp scaled", "sum"))
    # the first input underflows: its value is 0 (a sign of 0, a scaled 0)
    assert got.dtype == dtype
    first = got.reshape(-1)[0]
    if name in ("sum", "mean", "matmul"):  # (reductions: the normal element survives alone)
        want = {"sum": np.exp(dtype(UNDER[dtype][1])), "mean": np.exp(dtype(UNDER[dtype][1])) / 2,
                "matmul": np.exp(dtype(UNDER[dtype][1]))}[name] * dtype(1e30)
        np.testing.assert_allclose(first, want, rtol=1e-5)
    else:
        assert first == 0.0, got
        assert got.reshape(-1)[1] != 0.0  # the normal one is not touched


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_float64_value_cast_to_float32_below_its_normal_range_is_zero(backend: str) -> None:
    got = run(lambda x: tn.cast(x * 1.0, tn.float32), np.array([1e-40, -1e-40, 1e-30]), backend)
    np.testing.assert_array_equal(got, np.array([0.0, -0.0, 1e-30], np.float32))
    assert np.signbit(got[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_ops_that_move_a_value_keep_a_subnormal(backend: str) -> None:
    tiny = np.float32(1e-45)
    x = np.array([tiny, -tiny, 1.0], np.float32)
    np.testing.assert_array_equal(run(lambda v: tn.reshape(tn.negative(v), [3]), x, backend), -x)
    np.testing.assert_array_equal(run(lambda v: tn.abs(v), x, backend), np.abs(x))


def test_flush_subnormals_keeps_signs_non_finite_values_and_other_dtypes() -> None:
    for dt in (np.float16, np.float32, np.float64):
        tiny = np.finfo(dt).tiny
        x = np.array([tiny / 2, -tiny / 4, tiny, 0.0, -0.0, np.nan, np.inf, -np.inf, 1.5], dt)
        got = flush_subnormals(x)
        np.testing.assert_array_equal(got, np.array([0, 0, tiny, 0, 0, np.nan, np.inf, -np.inf, 1.5], dt))
        assert list(np.signbit(got[:5])) == [False, True, False, False, True]
        half = dt(tiny / 2)
        assert flush_subnormals(np.asarray(half)) == 0 and np.signbit(flush_subnormals(np.asarray(-half)))
        same = np.array([1.0, 0.0, np.nan], dt)
        assert flush_subnormals(same) is same  # nothing to flush: the array itself, no copy
    ints = np.array([0, 1], np.int32)
    assert flush_subnormals(ints) is ints
