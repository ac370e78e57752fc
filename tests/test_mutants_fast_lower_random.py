"""Laws of the fast backend's random draws (``turnout.fast.lower_random``): the ``RandomDraw`` rule
gives the interpreters' kernel (``turnout.random_rules.kernel``) for the same inputs: the same
uniform floats and integers bit for bit, normals to rounding, of the same dtype and shape, for every
distribution, dtype, key and counter (a key and a counter past 32 bits included); a draw that fails
when it runs records the interpreters' words as its error word; an empty draw is never refused.
Each law kills mutants of the full set of ``fast/lower_random.py`` (issue 40, part 3;
``python tools/mutation.py --module fast/lower_random.py --all``, ``"decorated"`` in the tool's list
since ``@lowering_rule`` registers the rule).

The rule is called eagerly (64-bit types on, as the backend traces) with a stand-in context that
records its checks; one session on the fast backend checks the whole path against the reference.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_exports
from stand_ins import CheckRecorder

import turnout as tn
from turnout import random_rules, tf_random
from turnout.errors import KernelError, ResourceExhaustedError, UnsupportedError, describe_node
from turnout.fast import lower_random
from turnout.fast.lowering_base import LOWERING_RULES, NeedsStatic
from turnout.limits import allocation_limit

#: keys and counters with bits above 32 (the stream's high words) and at the ends of their ranges
KEYS = [(87654321, 7), (2**40 + 3, 2**33 + 5), (2**64 - 1, 2**64 - 1)]
CALLS = [0, 1, 5, 2**32 - 1, 2**32, 2**32 + 1, 2**40 + 17, 2**63 - 1, 2**64 - 1]




def _draw(dist: str, dtype: Any, shape: Any, seed: int = 3) -> Any:
    """A graph's draw of ``dist`` (the op's name in ``random_rules``) and its node."""
    g = tn.Graph()
    with g.as_default():
        if dist == "RandomUniformInt":
            tn.random.uniform(shape, minval=-4, maxval=9, dtype=dtype, seed=seed)
        else:
            make = {"RandomUniform": tn.random.uniform, "RandomStandardNormal": tn.random.normal,
                    "TruncatedNormal": tn.random.truncated_normal}[dist]
            make(shape, dtype=dtype, seed=seed)
    return next(n for n in g.nodes if n.op == "RandomDraw")


def _lowered(n: Any, xs: list[Any], ctx: Any = None) -> Any:
    with jax.enable_x64(True):
        (out,) = LOWERING_RULES["RandomDraw"](ctx or CheckRecorder(), n, xs)
        return np.asarray(out)


DISTS = [("RandomUniform", tn.float32), ("RandomUniform", tn.float64), ("RandomStandardNormal", tn.float32),
         ("RandomStandardNormal", tn.float64), ("TruncatedNormal", tn.float32), ("TruncatedNormal", tn.float64),
         ("RandomUniformInt", tn.int32), ("RandomUniformInt", tn.int64)]


def test_philox_is_tf_randoms_for_any_key_and_counter() -> None:
    """Law: ``philox`` gives ``tf_random.philox``'s four words per call, for keys and counters with
    bits above 32 and at their ends (kills the round constants, masks, shifts and word order)."""
    with jax.enable_x64(True):
        for seed, seed2 in KEYS:
            got = np.asarray(lower_random.philox(seed, seed2, jnp.asarray(CALLS, jnp.uint64)))
            want = tf_random.philox(seed, seed2, np.asarray(CALLS, np.uint64))
            assert got.dtype == np.uint32 and got.shape == (len(CALLS), 4)
            np.testing.assert_array_equal(got, want)


def _set_key_and_counter(g: tn.Graph, draw: Any, key: tuple[int, int], counter: int) -> None:
    """Give ``draw``'s node the stream ``key`` and start its counter Variable at ``counter``."""
    n = next(t.node for t in _above(draw) if t.node.op == "RandomDraw")
    n.attrs["seed"], n.attrs["seed2"] = key
    handle = n.inputs[1].node.inputs[0].node
    handle.attrs["initial_value"] = np.asarray(counter, np.int64)


def _above(t: Any) -> list[Any]:
    out, work = [], [t]
    while work:
        u = work.pop()
        out.append(u)
        work.extend(u.node.inputs)
    return out


def _same_as_reference(g: tn.Graph, outs: list[tn.Tensor], exact: list[bool]) -> None:
    """Two runs of ``outs`` on the fast backend (compiled: no fallback to the interpreter) and on the
    reference: the same dtypes and shapes, the ``exact`` ones bit for bit, the others to rounding."""
    fast, ref = tn.Session(g, backend="fast", fallback=False), tn.Session(g)
    for _ in range(2):
        for a, b, bits in zip(fast.run(outs), ref.run(outs), exact, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            if bits:
                assert a.tobytes() == b.tobytes()
            else:
                np.testing.assert_allclose(a, b, rtol=1e-5 if a.dtype == np.float32 else 1e-12, atol=1e-6)
                assert np.all(np.isfinite(a))


def test_a_fast_session_draws_the_reference_stream() -> None:
    """Law: on the fast backend each execution draws the next chunk of the reference's stream, for
    uniform, normal and integer draws of each dtype, sizes that are not a multiple of the words a
    call gives, keys and counters past 32 bits, a scalar, integer spans past 32 bits, int32's whole
    span and a span of one: uniforms and integers bit for bit, normals to rounding, the same dtypes
    and shapes. (Ahead of the truncated normals: a mutant that breaks the words or the normals makes
    their rejection loop run for ever.)"""
    g = tn.Graph()
    with g.as_default():
        shape: list[int] = [2, 3]
        draws = [tn.random.uniform(shape, seed=1), tn.random.uniform(shape, dtype=tn.float64, seed=2),
                 tn.random.normal(shape, seed=3), tn.random.normal(shape, dtype=tn.float64, seed=4),
                 tn.random.uniform(shape, minval=-3, maxval=40, dtype=tn.int32, seed=7),
                 tn.random.uniform(shape, minval=-(2**40), maxval=2**41 + 3, dtype=tn.int64, seed=8)]
        shape = [5]  # (a size of 5: fewer calls than it needs would show)
        draws += [tn.random.uniform(shape, seed=1), tn.random.uniform(shape, dtype=tn.float64, seed=2),
                  tn.random.normal(shape, seed=3),
                  tn.random.uniform(shape, minval=-3, maxval=40, dtype=tn.int32, seed=7),
                  tn.random.uniform(shape, minval=-(2**40), maxval=2**41 + 3, dtype=tn.int64, seed=8)]
        for d in draws[:6]:
            _set_key_and_counter(g, d, KEYS[1], 2**40 + 17)
        for d in draws[6:]:
            _set_key_and_counter(g, d, KEYS[2], 2**33 + 1)
        draws += [tn.random.uniform([9], minval=-(2**31), maxval=2**31 - 1, dtype=tn.int32, seed=10),
                  tn.random.uniform([9], minval=-(2**62), maxval=2**62 + 5, dtype=tn.int64, seed=11),
                  tn.random.uniform([9], minval=7, maxval=8, dtype=tn.int32, seed=12),
                  tn.random.uniform([9], minval=7, maxval=8, dtype=tn.int64, seed=13)]
        # scalars: one call, fewer words than some reshapes need
        draws += [tn.random.uniform([], seed=14), tn.random.uniform([], dtype=tn.float64, seed=15),
                  tn.random.normal([], seed=16), tn.random.normal([], dtype=tn.float64, seed=17),
                  tn.random.uniform([], minval=-3, maxval=40, dtype=tn.int32, seed=18),
                  tn.random.uniform([], minval=-(2**40), maxval=2**41 + 3, dtype=tn.int64, seed=19)]
    _same_as_reference(g, draws, [True, True, False, False, True, True, True, True, False, True, True,
                                  True, True, True, True, True, True, False, False, True, True])


def test_a_fast_truncated_normal_keeps_each_groups_first_passing_samples() -> None:
    """Law: a truncated normal on the fast backend is the reference's, group by group (about 5% of
    normals lie past 2, so some groups of 61 values draw more than one call), in float32 and float64,
    of a key and counter past 32 bits too; every value lies within 2."""
    g = tn.Graph()
    with g.as_default():
        draws = [tn.random.truncated_normal([2, 3], seed=5), tn.random.truncated_normal([2, 3], dtype=tn.float64,
                                                                                       seed=6)]
        for d in draws:
            _set_key_and_counter(g, d, KEYS[1], 2**40 + 17)
        draws.append(tn.random.truncated_normal([61], seed=9))
    _same_as_reference(g, draws, [False] * 3)
    assert all(np.all(np.abs(v) < 2.0) for v in tn.Session(g).run(draws))


def test_a_draw_that_fails_when_run_records_the_interpreters_words() -> None:
    """Law: a negative dimension gives zeros of no elements, one per dimension, and its check
    fails with the kernel's words; a negative counter (a stream run past 2**63 calls) and an empty
    integer range fail their checks with the interpreters' words too, naming the node."""
    n = _draw("RandomUniform", tn.float32, [1])
    ctx = CheckRecorder()
    xs = [np.asarray([2, -3], np.int32), np.asarray(0, np.int64)]
    got = _lowered(n, xs, ctx)
    assert got.shape == (0, 0) and got.dtype == np.float32
    with pytest.raises(KernelError) as e:
        random_rules.kernel(xs, n.attrs)
    assert ctx.failed() == [f"{describe_node(n)}: {e.value}"]

    ctx = CheckRecorder()
    xs = [np.asarray([3], np.int32), np.asarray(-1, np.int64)]
    _lowered(n, xs, ctx)
    with pytest.raises(KernelError) as e:
        random_rules.kernel(xs, n.attrs)
    assert ctx.failed() == [f"{describe_node(n)}: {e.value}"]

    n = _draw("RandomUniformInt", tn.int32, [1])
    for lo, hi in [(5, 5), (6, 5)]:
        ctx = CheckRecorder()
        xs = [np.asarray([3], np.int32), np.asarray(0, np.int64), np.asarray(lo, np.int32), np.asarray(hi, np.int32)]
        _lowered(n, xs, ctx)
        assert ctx.failed() == [f"{describe_node(n)}: RandomDraw: it needs minval < maxval"]
        with pytest.raises(KernelError, match="it needs minval < maxval"):
            random_rules.kernel(xs, n.attrs)


def test_an_empty_draw_is_zeros_and_never_refused() -> None:
    """Law: a draw of no elements (a zero dimension) is an empty array of its shape and dtype and
    fails no check, of an empty integer range too (the kernel refuses only a non-empty one)."""
    for dist, dtype in DISTS:
        n = _draw(dist, dtype, [1])
        xs = [np.asarray([3, 0], np.int32), np.asarray(0, np.int64)]
        if dist == "RandomUniformInt":
            xs += [np.asarray(5, dtype.numpy), np.asarray(5, dtype.numpy)]
        ctx = CheckRecorder()
        got = _lowered(n, xs, ctx)
        (want,) = random_rules.kernel(xs, n.attrs)
        assert ctx.failed() == []
        assert got.shape == want.shape == (3, 0) and got.dtype == want.dtype


def test_a_shape_known_only_when_run_is_refused_or_specialised() -> None:
    """Law: a traced shape is ``NeedsStatic`` naming the fed shape's key where feeds decide it (the
    backend then specialises on them), else an ``UnsupportedError`` naming the node; a shape over
    the allocation limit is a ``ResourceExhaustedError`` naming the node."""
    g = tn.Graph()
    with g.as_default():
        s = tn.placeholder(tn.int32, [1], name="s")
        tn.random.uniform(s, seed=1)
    n = next(m for m in g.nodes if m.op == "RandomDraw")
    xs = [jnp.asarray([3], jnp.int32), np.asarray(0, np.int64)]
    with pytest.raises(NeedsStatic) as e:
        _lowered(n, xs, CheckRecorder(fed={s.node.id}))
    assert e.value.keys == frozenset({(s.node.id, 0)})
    with pytest.raises(UnsupportedError) as refused:
        _lowered(n, xs, CheckRecorder())
    assert str(refused.value) == (f"fast backend: {describe_node(n)}: the shape of a random op must be known "
                                  "when compiling")
    with pytest.raises(ResourceExhaustedError, match=re.escape(describe_node(n))):
        with allocation_limit(1024):
            _lowered(n, [np.asarray([257], np.int32), np.asarray(0, np.int64)])


@pytest.mark.parametrize("dtype,fits", [(tn.float32, 256), (tn.int64, 128)])
def test_the_allocation_guard_counts_the_draws_own_dtype(dtype: Any, fits: int) -> None:
    """Law: the allocation guard sizes a draw by its own dtype's bytes: under a 1024-byte limit a
    draw of ``1024 // itemsize`` elements is made, one more is a ``ResourceExhaustedError`` naming
    the node. Kills the guard given no dtype (``np.dtype(None)`` is float64's 8 bytes, refusing a
    float32 draw of 256) or none of its arguments."""
    dist = "RandomUniformInt" if dtype in (tn.int32, tn.int64) else "RandomUniform"
    n = _draw(dist, dtype, [1])
    extra = [np.asarray(-4, dtype.numpy), np.asarray(9, dtype.numpy)] if dist == "RandomUniformInt" else []
    with allocation_limit(1024):
        got = _lowered(n, [np.asarray([fits], np.int32), np.asarray(0, np.int64), *extra])
        assert got.shape == (fits,) and got.dtype == dtype.numpy
        with pytest.raises(ResourceExhaustedError, match=re.escape(describe_node(n))):
            _lowered(n, [np.asarray([fits + 1], np.int32), np.asarray(0, np.int64), *extra])


def test_the_module_exports_what_it_defines() -> None:
    """Law: ``__all__`` names only what the module defines, ``philox`` (``test_exports``'s law, for this
    module). Kills every mutant of ``__all__`` (``None``, the name renamed)."""
    test_exports.test_every_exported_name_exists("turnout.fast.lower_random")
    assert lower_random.__all__ == ["philox"]
