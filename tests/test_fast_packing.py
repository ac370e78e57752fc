"""A checked ``Direct`` call, and the fused stage, return their flags behind a small fetched value (``fast.packing``).

The error word and the live flags then come back in the same array as a fetch: these tests hold that
the values are still the reference backend's, bit for bit, in every carrier dtype; that every error the
flags carry is still raised (a kernel error, a runaway loop, whose code needs more than a float32's
24 bits of mantissa, and a dead fetch), on the first run and on the lane's repeats; and that a value
too large, of another dtype, or that is also a Variable's new value carries nothing. The fused
stage (a gradient through a loop) packs the same way: its values, its errors and a dead fetch, on the
general path and on its lane.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import turnout as tn
from turnout.fast import packing
from turnout.fast.outcome import NONTERM

DTYPES = [tn.int32, tn.int64, tn.float32, tn.float64]


def _packings(sess: tn.Session) -> list[Any]:
    """Per compiled call, where its flags ride: (the carrier's index among its outputs, how), or None."""
    return [d.spec.packed and (d.spec.out.index(d.spec.packed[0]), d.spec.packed[1])
            for d in sess.backend._direct.values()]


def _loop(dtype: Any, shape: tuple[int, ...] = ()) -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    """``s = sum over i < n of (i + 7) // k`` (integer division: the run can fail), as ``dtype``,
    broadcast to ``shape``; returns (graph, n, k, s)."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        k = tn.placeholder(tn.int32, [], name="k")
        zero = tn.zeros(shape, dtype) if shape else tn.constant(0, dtype)
        _, s = tn.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + tn.cast((i + 7) // k, dtype)),
                             [tn.constant(0), zero])
    return g, n, k, s


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_the_value_carries_the_flags_and_stays_the_reference_value(dtype: Any) -> None:
    g, n, k, s = _loop(dtype)
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    for nv, kv in [(8, 3), (0, 1), (5, -2), (8, 3), (8, 3)]:  # the repeats take the lane
        got, want = fast.run(s, {n: nv, k: kv}), ref.run(s, {n: nv, k: kv})
        assert got.dtype == want.dtype and got.shape == want.shape == () and got.tobytes() == want.tobytes()
        assert isinstance(got, np.ndarray)
    assert fast.last_result.stats["route"] == "lane"
    (p,) = _packings(fast)
    assert p is not None and p[0] == 0 and p[1].shape == ()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_errors_behind_a_value_are_raised_on_the_first_run_and_on_repeats(dtype: Any) -> None:
    g, n, k, s = _loop(dtype, (2, 3))
    fast = tn.Session(g, backend="fast")
    np.testing.assert_array_equal(fast.run(s, {n: 4, k: 2}), np.full((2, 3), 3 + 4 + 4 + 5))
    for _ in range(3):
        with pytest.raises(tn.KernelError, match="division by zero"):
            fast.run(s, {n: 4, k: 0})
        # a runaway loop's code is NONTERM + its number: more than a float32 holds as a number
        with pytest.raises(tn.NonTerminationError, match="more bodies than max_iterations"):
            fast.run(s, {n: 50, k: 1}, max_iterations=5)
        np.testing.assert_array_equal(fast.run(s, {n: 1, k: 7}), np.full((2, 3), 1))
    (p,) = _packings(fast)
    assert p is not None and p[1].shape == (2, 3) and p[1].size == 6


def test_a_dead_fetch_behind_a_value_is_refused() -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        k = tn.placeholder(tn.int32, [], name="k")
        x = tn.constant(10) // k  # a check, so the call has flags
        sw = tn.raw.switch(x, p)
        alive = sw[1] + 1  # live only when p is true
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    for _ in range(3):
        assert int(fast.run([x, alive], {p: True, k: 2})[1]) == 6
        for sess in (fast, ref):
            with pytest.raises(tn.DeadFetchError):
                sess.run([x, alive], {p: False, k: 2})
    assert any(q is not None for q in _packings(fast))


def test_what_cannot_carry_the_flags_carries_nothing() -> None:
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        big = tn.fill([packing.PACK_MAX_ELEMENTS + 1], tn.constant(1.0)) * tn.cast(10 // k, tn.float32)
        flag = tn.greater(10 // k, 3)  # a bool: no carrier dtype
        v = tn.Variable(np.int32(0), name="v")
        upd = v.assign_add(10 // k)  # the Variable's new value, fetched: must stay its own array
    fast = tn.Session(g, backend="fast")
    for fetch in ([big], [flag], [upd]):
        for _ in range(2):
            fast.run(fetch, {k: 2})
        with pytest.raises(tn.KernelError, match="division by zero"):
            fast.run(fetch, {k: 0})
    assert _packings(fast) == [None, None, None]
    assert int(fast.run(v.read(), {})) == 10


def test_the_smallest_value_carries_the_flags() -> None:
    """Packing copies its carrier inside the call: of several fetched values that could carry the
    flags, the one with the fewest elements does."""
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        q = 10 // k
        big = tn.fill([100], q)
        mid = tn.fill([3], q)
    fast = tn.Session(g, backend="fast")
    for _ in range(2):
        got = fast.run([big, q, mid], {k: 2})
        assert [np.shape(v) for v in got] == [(100,), (), (3,)] and int(got[1]) == 5
    (p,) = _packings(fast)
    assert p is not None and p[0] == 1


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_pack_and_unpack_keep_every_bit(dtype: Any) -> None:
    """Codes whose float32 bit patterns are denormals (small codes) or need all 32 bits."""
    flags = np.array([0, 1, 7, NONTERM + 12345, 2**31 - 1, -1], np.int32)
    if np.issubdtype(dtype, np.floating):
        value = np.array([[1.5, np.nan], [np.inf, -0.0]], dtype)
    else:
        value = np.array([[1, -5], [np.iinfo(dtype).max, 0]], dtype)
    with jax.enable_x64(True):
        packed = jax.jit(lambda v, f: packing.pack(v, f)[0])(jnp.asarray(value), jnp.asarray(flags))
        p = packing.pack(jnp.asarray(value), jnp.asarray(flags))[1]
        got, words = packing.unpack(np.asarray(packed), p)
    assert got.dtype == value.dtype and got.tobytes() == value.tobytes()
    assert words == flags.tolist()


# ---- the fused stage ------------------------------------------------------------------------------
def _fused(dtype: Any) -> tuple[tn.Graph, tn.Tensor, tn.Tensor, list[tn.Tensor]]:
    """A gradient through a loop (the fused stage), ``v`` times 1.5 three times, with an integer
    division in the body (the run can fail: ``k = 0``): fetches the result as ``dtype`` and the
    gradient."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        k = tn.placeholder(tn.int32, [], name="k")
        _, y = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 1.5 + tn.cast(7 // k, tn.float32)),
                             [tn.constant(0), x])
        (dx,) = tn.gradients(y, [x])
    return g, x, k, [tn.cast(y, dtype), dx]


def _fused_stage(sess: tn.Session) -> Any:
    (plan,) = {id(h.plan): h.plan for h, _ in sess.backend.repeats.routes.values()}.values()
    return plan.fused


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_fused_stage_returns_its_flags_behind_a_fetch(dtype: Any) -> None:
    """The fused attempt (a training step through a loop) packs its flags as a ``Direct`` call does:
    the values stay the reference backend's on the first run and on the lane's repeats, and a kernel
    error behind them is raised on both."""
    g, x, k, fetches = _fused(dtype)
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    for _ in range(3):
        for a, b in zip(fast.run(fetches, {x: 1.0, k: 2}), ref.run(fetches, {x: 1.0, k: 2}), strict=True):
            np.testing.assert_array_equal(a, b)
    assert fast.last_result.stats["fused"]
    st = _fused_stage(fast)
    assert st.spec.packed is not None and st.spec.packed[0] in st.spec.live
    for _ in range(2):  # the general path, then the lane
        with pytest.raises(tn.KernelError, match="division by zero"):
            fast.run(fetches, {x: 1.0, k: 0})
        assert np.allclose(fast.run(fetches, {x: 1.0, k: 2})[0], ref.run(fetches, {x: 1.0, k: 2})[0])


def test_a_fused_stage_with_no_small_fetch_returns_its_flags_apart() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [packing.PACK_MAX_ELEMENTS + 1], name="x")
        _, y = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 1.5), [tn.constant(0), x])
        (dx,) = tn.gradients(y, [x])
    xv = np.linspace(-1.0, 1.0, packing.PACK_MAX_ELEMENTS + 1).astype(np.float32)
    fast, ref = tn.Session(g, backend="fast"), tn.Session(g, backend="reference")
    for _ in range(2):
        for a, b in zip(fast.run([y, dx], {x: xv}), ref.run([y, dx], {x: xv}), strict=True):
            np.testing.assert_array_equal(a, b)
    assert _fused_stage(fast).spec.packed is None


def test_a_dead_fetch_of_a_fused_stage_behind_its_flags_is_refused() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        p = tn.placeholder(tn.bool, [], name="p")
        _, y = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 1.5), [tn.constant(0), x])
        (dx,) = tn.gradients(y, [x])
        sw = g.create_node("Switch", [dx, p], name="sw")
        dead_or_not = tn.identity(sw.outputs[1])
    fast = tn.Session(g, backend="fast")
    for _ in range(3):  # the general path, then the lane
        assert float(fast.run([dead_or_not], {x: 1.0, p: True})[0]) == pytest.approx(3.375)
        with pytest.raises(tn.DeadFetchError):
            fast.run([dead_or_not], {x: 1.0, p: False})
    assert _fused_stage(fast).spec.packed is not None


def test_the_carrier_is_the_first_smallest_array_of_at_most_the_limit() -> None:
    """``carrier`` read as a rule: values that are not traced arrays of a carrier dtype are passed
    over (the scan goes on past them), so are those in ``taken`` and those of more than
    ``PACK_MAX_ELEMENTS`` elements (exactly the limit may carry), and of equal sizes the first wins."""
    lim = packing.PACK_MAX_ELEMENTS
    at_limit, past = jnp.zeros(lim, jnp.float32), jnp.zeros(lim + 1, jnp.float32)
    small, other = jnp.zeros(3, jnp.int32), jnp.zeros(3, jnp.float32)
    assert packing.carrier((past,), set()) is None
    assert packing.carrier((at_limit,), set()) == 0
    assert packing.carrier((np.float32(1.0), jnp.zeros(2, jnp.bool_), small), set()) == 2
    assert packing.carrier((small, other), set()) == 0 and packing.carrier((other, small), set()) == 0
    assert packing.carrier((small, other), {0}) == 1
