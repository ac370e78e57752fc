"""Programs whose shapes depend on fed values, compiled by specialising the plan on those values.

Why these tests: XLA needs static shapes, so a ``fill`` from a fed shape, a slice with fed bounds or
a TensorArray of fed size used to run on the reference interpreter (the fallback). The fast backend
now makes such feeds constants of the plan (``lowering.NeedsStatic``), with their values in the
compile-cache key: each case below must say ``stats['executor'] == 'compiled'``, give the reference's
values (gradients included), never recompile for a value already seen, and leave programs with
static shapes as they were. What still falls back (shapes decided by loop state) is checked too.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import turnout as tn

pytest.importorskip("jax")


def compiled(sess: tn.Session, fetches: Any, feed: dict[Any, Any]) -> Any:
    """Run on the fast backend, requiring the compiled executor (a fallback warning fails the test)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = sess.run(fetches, feed)
    assert sess.last_result.stats["executor"] == "compiled"
    return got


def reference(g: tn.Graph, fetches: Any, feed: dict[Any, Any]) -> Any:
    return tn.Session(g, backend="reference").run(fetches, feed)


def test_fill_from_a_fed_shape_compiles_once_per_shape() -> None:
    g = tn.Graph()
    with g.as_default():
        shp = tn.placeholder(tn.int32, [2], name="shp")
        v = tn.placeholder(tn.float32, [], name="v")
        y = tn.fill(shp, v) * 2.0
    sess = tn.Session(g, backend="fast")
    counts = []
    for s in ([2, 3], [4, 1], [2, 3], [4, 1]):
        feed = {shp: np.array(s, np.int32), v: np.float32(1.5)}
        np.testing.assert_array_equal(compiled(sess, y, feed), reference(g, y, feed))
        assert sess.last_result.stats["specialized_on"] == ["shp:0"]
        counts.append(sess.backend.compile_count)
    assert counts[2] == counts[1] and counts[3] == counts[1]  # seen values: no recompile
    assert counts[1] == counts[0] + 1  # a new value: one compile
    # the schedule of a later run says what the plans are specialised on (the runs above learnt it)
    assert sess.explain(y, feed).notes == ("specialised on the values of shp:0: a plan per value",)


def test_slices_with_fed_bounds_compile() -> None:
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int32, [], name="a")
        b = tn.placeholder(tn.int32, [], name="b")
        xs = tn.placeholder(tn.float32, [6, 4], name="xs")
        y = xs[a:b] * 2.0
        z = tn.reduce_sum(xs[a + 1:])
    sess = tn.Session(g, backend="fast")
    for lo, hi in ((1, 4), (0, 6), (1, 4), (3, 3)):
        yv, zv = compiled(sess, [y, z], {a: np.int32(lo), b: np.int32(hi), xs: x})
        np.testing.assert_array_equal(yv, x[lo:hi] * 2.0)
        assert float(zv) == float(x[lo + 1:].sum())
    assert sess.last_result.stats["specialized_on"] == ["a:0", "b:0"]


def test_tensor_array_of_fed_size_with_gradient_compiles() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        w = tn.placeholder(tn.float32, [], name="w")
        ta0 = tn.TensorArray(tn.float32, size=n)
        _, ta = tn.while_loop(lambda i, ta: i < n, lambda i, ta: (i + 1, ta.write(i, w * tn.cast(i, tn.float32))),
                              [tn.constant(0), ta0])
        total = tn.reduce_sum(ta.stack() * ta.stack())
        (dw,) = tn.gradients(total, [w])
    sess = tn.Session(g, backend="fast")
    counts = []
    for size in (5, 8, 5):
        feed = {n: np.int32(size), w: np.float32(3.0)}
        got = compiled(sess, [total, dw], feed)
        want = reference(g, [total, dw], feed)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
        counts.append(sess.backend.compile_count)
    assert counts[1] > counts[0] and counts[2] == counts[1]  # a new size compiles; the repeat of 5 does not


def test_map_fn_over_fed_elements_compiles() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        elems = tn.fill(tn.stack([n, 3]), 1.0) * tn.cast(tn.reshape(n, [1, 1]), tn.float32)
        y = tn.map_fn(lambda e: tn.reduce_sum(e * e), elems)
    sess = tn.Session(g, backend="fast")
    for size in (2, 4):
        np.testing.assert_allclose(compiled(sess, y, {n: np.int32(size)}), np.full(size, 3.0 * size * size))


def test_a_specialised_plan_updates_variables_and_keeps_errors() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        v = tn.Variable(0.0, name="v")
        step = v.assign_add(tn.reduce_sum(tn.fill(tn.stack([n]), 2.0)))
    sess = tn.Session(g, backend="fast")
    assert float(compiled(sess, step, {n: np.int32(3)})) == 6.0
    assert float(compiled(sess, step, {n: np.int32(2)})) == 10.0
    with pytest.raises(tn.FeedError):
        sess.run(step)


def test_static_shapes_are_not_specialised() -> None:
    """A program whose shapes are all static keeps one plan for every fed value."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        y = tn.fill([3], 1.0) * tn.cast(n, tn.float32)
    sess = tn.Session(g, backend="fast")
    for k in (1, 2, 3):
        np.testing.assert_array_equal(compiled(sess, y, {n: np.int32(k)}), np.full(3, float(k)))
        assert "specialized_on" not in sess.last_result.stats
    assert sess.backend.compile_count == 1


def test_a_shape_from_feeds_and_the_shape_of_computed_values_is_specialised() -> None:
    """A shape the feeds decide together with the ``Shape`` of a value computed from a Variable (every
    traced shape is static, so nothing behind a ``Shape`` needs a feed): the plan is specialised on
    the feeds alone and compiles, inside a loop too, where the walk once stopped at the Variable and
    the program ran on the interpreter."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int32, [], name="a")
        s = tn.placeholder(tn.int32, [], name="s")
        w = tn.Variable(np.arange(6, dtype=np.float32), name="w")
        row = tn.tanh(w * 0.5)
        n = tn.shape(row)[0]
        _, acc = tn.while_loop(lambda i, c: i < 3,
                               lambda i, c: (i + 1, c + tn.reduce_sum(tn.gather(row, tn.range(a, n, s)))),
                               [tn.constant(0), tn.constant(0.0)])
    sess = tn.Session(g, backend="fast")
    for k, step in ((1, 2), (0, 4)):
        feed = {a: np.int32(k), s: np.int32(step)}
        np.testing.assert_allclose(compiled(sess, acc, feed), reference(g, acc, feed), rtol=1e-6)
        assert sess.last_result.stats["specialized_on"] == ["a:0", "s:0"]


def test_a_shape_decided_by_loop_state_still_falls_back() -> None:
    """Feeds cannot make a shape static when a loop variable decides it: that program runs on the
    interpreter fallback, with the reference's values."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        _, acc = tn.while_loop(lambda i, a: i < n,
                               lambda i, a: (i + 1, a + tn.reduce_sum(tn.fill(tn.stack([i]), 1.0))),
                               [tn.constant(0), tn.constant(0.0)])
    sess = tn.Session(g, backend="fast")
    with pytest.warns(RuntimeWarning, match="reference interpreter"):
        assert float(sess.run(acc, {n: np.int32(4)})) == 6.0
    assert sess.last_result.stats["executor"] == "reference interpreter (fallback)"


def test_a_negative_fed_dimension_is_the_reference_error() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        y = tn.fill(tn.stack([n]), 1.0)
    with pytest.raises(tn.KernelError):
        tn.Session(g, backend="reference").run(y, {n: np.int32(-2)})
    with pytest.raises(tn.KernelError), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        tn.Session(g, backend="fast").run(y, {n: np.int32(-2)})


def test_a_ragged_cond_in_a_loop_compiles_when_a_feed_decides_its_predicate() -> None:
    """A cond whose branches give different shapes, inside a loop, with a predicate that a feed alone
    decides (a loop invariant): the plan is specialised on that feed and compiled. With a predicate
    the loop decides, the loop is unrolled where the trace knows its trip count (``fast.unrolled``),
    and the program runs on the interpreter where it does not (the same values)."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        x = tn.placeholder(tn.float32, [None], name="x")

        def body(i: tn.Tensor, s: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            part = tn.cond(p, lambda: x[:2], lambda: x * 3.0)
            return i + 1, s + tn.reduce_sum(part)

        _, s = tn.while_loop(lambda i, s: i < 3, body, [tn.constant(0), tn.constant(0.0)])
        ragged = lambda i, s: (i + 1, s + tn.reduce_sum(tn.cond(i > 1, lambda: x[:2], lambda: x)))  # noqa: E731
        _, t = tn.while_loop(lambda i, s: i < 3, ragged, [tn.constant(0), tn.constant(0.0)])
        _, u = tn.while_loop(lambda i, s: s < 12.0, ragged, [tn.constant(0), tn.constant(0.0)])  # (data decide)
    xv = np.array([1.0, 2.0, 4.0], np.float32)
    sess = tn.Session(g, backend="fast", fallback=False)
    for pv, want in ((True, 9.0), (False, 63.0)):
        assert float(sess.run(s, {p: pv, x: xv})) == want
        assert sess.last_result.stats["specialized_on"] == ["p:0"]
    assert float(sess.run(t, {x: xv})) == 17.0  # unrolled: three bodies
    with pytest.raises(tn.UnsupportedError, match="different types or shapes"):
        sess.run(u, {x: xv})
    with pytest.warns(RuntimeWarning, match="different types or shapes"):
        assert float(tn.Session(g, backend="fast").run(u, {x: xv})) == float(tn.Session(g).run(u, {x: xv}))


def test_a_ragged_cond_decided_by_data_is_not_specialised_on_it() -> None:
    """A ragged cond whose predicate a float feed decides (data, as a batch is) would compile a plan
    per fed value: the fast backend refuses to specialise on it and runs the program on the
    interpreter; a flag or index (a bool or integer of a few elements) is specialised on."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        r = tn.cond(tn.reduce_sum(x) > 0.0, lambda: x[:1], lambda: x * 2.0)
    sess = tn.Session(g, backend="fast")
    for k in range(3):
        xv = np.array([1.0, -2.0, float(k)], np.float32)
        with pytest.warns(RuntimeWarning, match="different types or shapes") if k == 0 else warnings.catch_warnings():
            np.testing.assert_array_equal(sess.run(r, {x: xv}), tn.Session(g).run(r, {x: xv}))
        assert sess.last_result.stats["executor"] == "reference interpreter (fallback)"


@pytest.mark.parametrize("whole_program", ["auto", "never"])
def test_the_partitioned_executor_specialises_as_the_one_device_backend_does(whole_program: str) -> None:
    """Over two devices the fast partitioned executor specialises too (``fast.specialise``): a
    TensorArray of fed size written by a loop on ``cpu:1`` and a ``fill`` of a fed shape on
    ``cpu:0``, with a gradient, run compiled (no fallback) with the reference's values, on the
    per-device tiers and (``auto``) after the SPMD tier declines; a value seen before never
    recompiles, a new one compiles again."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        w = tn.placeholder(tn.float32, [], name="w")
        with tn.device("cpu:1"):
            ta0 = tn.TensorArray(tn.float32, size=n)
            _, ta = tn.while_loop(lambda i, ta: i < n,
                                  lambda i, ta: (i + 1, ta.write(i, w * tn.cast(i + 1, tn.float32))),
                                  [tn.constant(0), ta0])
        with tn.device("cpu:0"):
            total = tn.reduce_sum(ta.stack() * tn.fill(tn.expand_dims(n, 0), w))
            (dw,) = tn.gradients(total, [w])
    sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"], whole_program=whole_program)
    counts = []
    for k in (3, 5, 3):
        feed = {n: np.int32(k), w: np.float32(0.5)}
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            got = sess.run([total, dw], feed)
        stats = sess.last_result.stats
        assert stats["executor"] == "fast partitioned" and stats["tier"] != "reference", stats
        assert stats["specialized_on"] == ["n:0"]
        np.testing.assert_allclose(got, reference(g, [total, dw], feed), rtol=1e-6)
        counts.append(sess.backend.compile_count)
    assert counts[2] == counts[1] > counts[0]


def test_the_spmd_program_specialises_on_fed_shapes() -> None:
    """The SPMD tier (one ``shard_map`` program over both devices) takes part in the one specialisation
    loop: a ``fill`` of a fed shape before a loop spanning ``cpu:0`` and ``cpu:1`` runs there,
    specialised on the feed, with the reference's values; a value seen before never recompiles."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        x = tn.placeholder(tn.float32, [], name="x")
        with tn.device("cpu:0"):
            v0 = tn.fill(tn.expand_dims(n, 0), x)

        def body(i: Any, v: Any) -> Any:
            with tn.device("cpu:1"):
                v = tn.tanh(v) * 1.5
            return i + 1, v

        with tn.device("cpu:0"):
            _, v = tn.while_loop(lambda i, v: i < 3, body, [tn.constant(0), v0])
            total = tn.reduce_sum(v)
    sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"], whole_program="always", fallback=False)
    counts = []
    for k in (2, 4, 2):
        feed = {n: np.int32(k), x: np.float32(0.3)}
        got = sess.run([total, v], feed)
        stats = sess.last_result.stats
        assert stats["tier"] == "spmd" and stats["specialized_on"] == ["n:0"], stats
        np.testing.assert_allclose(got[1], reference(g, [v], feed)[0], rtol=1e-5)
        assert got[1].shape == (k,)
        counts.append(sess.backend.compile_count)
    assert counts[2] == counts[1]


def test_a_fed_shape_inside_a_differentiated_loop_keeps_the_fused_program() -> None:
    """A shape that feeds decide is a reason to specialise, never a refusal: the fused attempt (whose
    refusals drop it for the stages) and the loop forms (whose refusals try another form) let it pass
    to the one loop that specialises, so the run stays one fused call, specialised on the feed."""
    g = tn.Graph()
    with g.as_default():
        shp = tn.placeholder(tn.int32, [2], name="shp")
        x = tn.placeholder(tn.float32, [], name="x")

        def body(i: Any, acc: Any) -> Any:
            return i + 1, acc + tn.reduce_sum(tn.fill(shp, x) * acc)

        _, y = tn.while_loop(lambda i, a: i < 4, body, [tn.constant(0), x])
        dx, = tn.gradients(y, [x])
    sess = tn.Session(g, backend="fast")
    for s in ([2, 3], [1, 5]):
        feed = {shp: np.array(s, np.int32), x: np.float32(0.5)}
        got = compiled(sess, [y, dx], feed)
        for a, b in zip(got, reference(g, [y, dx], feed), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        stats = sess.last_result.stats
        assert stats["fused"] is True and stats["specialized_on"] == ["shp:0"], stats
    assert not issubclass(tn.fast.lowering_base.NeedsStatic, tn.UnsupportedError)
