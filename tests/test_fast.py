"""The fast (JAX) backend agrees with the reference interpreter on closed-form programs.

Every case runs on both backends (``backend`` parameter); expectations are closed forms a person can
check by hand. Fast-only tests at the end check what only the fast backend has: compilation caching,
the lowering table's completeness, ``to_jax``, and graphs it refuses to raise.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from example_counts import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import turnout as tn
from turnout import raw

pytest.importorskip("jax")

BACKENDS = ["reference", "fast"]


def run(g: tn.Graph, backend: str, fetches: Any, feed: dict[Any, Any] | None = None, **kw: Any) -> Any:
    return tn.Session(g, backend=backend).run(fetches, feed_dict=feed, **kw)


# ---- conditionals ----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("xv,want", [(5.0, 50.0), (-2.0, -3.0)])
def test_cond_runs_one_branch(backend: str, xv: float, want: float) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = tn.cond(x > 0.0, lambda: x * 10.0, lambda: x - 1.0)
    assert float(run(g, backend, y, {x: xv})) == want


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k,want", [(0, 100), (1, 201), (2, 302), (7, -1), (-3, -1)])
def test_case_picks_branch_or_default(backend: str, k: int, want: int) -> None:
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        base = tn.constant(100)
        y = tn.case(i, [lambda: base, lambda: base * 2 + 1, lambda: base * 3 + 2], default=lambda: tn.constant(-1))
    assert int(run(g, backend, y, {i: k})) == want


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("a,b,want", [(True, True, 1), (True, False, 2), (False, True, 3), (False, False, 3)])
def test_nested_conds(backend: str, a: bool, b: bool, want: int) -> None:
    g = tn.Graph()
    with g.as_default():
        pa = tn.placeholder(tn.bool, [], name="a")
        pb = tn.placeholder(tn.bool, [], name="b")
        y = tn.cond(pa, lambda: tn.cond(pb, lambda: tn.constant(1), lambda: tn.constant(2)), lambda: tn.constant(3))
    assert int(run(g, backend, y, {pa: a, pb: b})) == want


# ---- loops ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_while_loop_doubling(backend: str) -> None:
    # 3 * 2**10 = 3072 > 100, so the cond subtracts 100
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        i, y = tn.while_loop(lambda i, y: i < 10, lambda i, y: (i + 1, y * 2.0), [tn.constant(0), x])
        z = tn.cond(y > 100.0, lambda: y - 100.0, lambda: y)
    zi, ii = run(g, backend, [z, i], {x: 3.0})
    assert float(zi) == 2972.0 and int(ii) == 10


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_assignment_in_a_loop_body_that_no_fetch_needs_does_not_run(backend: str) -> None:
    """Only the fetches' ancestors run, inside loop frames too: an assignment in a body that nothing
    fetched depends on is pruned, as TensorFlow prunes it (the loop's result does not read it). The
    fast backend once ran every assignment of a loop it ran (``u`` became 3); found by the held-read
    property (``tests/test_fast_held.py``)."""
    g = tn.Graph()
    with g.as_default():
        u = tn.Variable(np.float64(0.0), name="u")
        n = tn.placeholder(tn.int32, [], name="n")

        def body(i: Any, h: Any) -> Any:
            u.assign_add(tn.constant(1.0, tn.float64))  # nothing reads it
            with tn.control_dependencies([u.assign_add(tn.constant(10.0, tn.float64))]):
                h2 = h * 2.0  # this one is an ancestor of the result: it runs every iteration
            return i + 1, h2

        _, h = tn.while_loop(lambda i, h: i < n, body, [tn.constant(0), tn.constant(0.5, tn.float64)])
    sess = tn.Session(g, backend=backend)
    assert float(sess.run(h, {n: 3})) == 4.0
    assert float(sess.run(u)) == 30.0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [0, 1, 5, 9])
def test_nested_loops_count_pairs(backend: str, n: int) -> None:
    # sum_{i<n} sum_{j<i} 1 = n(n-1)/2
    g = tn.Graph()
    with g.as_default():
        N = tn.placeholder(tn.int32, [], name="n")

        def outer(i, acc):
            _, inner = tn.while_loop(lambda j, a: j < i, lambda j, a: (j + 1, a + 1), [tn.constant(0), acc])
            return i + 1, inner

        _, total = tn.while_loop(lambda i, a: i < N, outer, [tn.constant(0), tn.constant(0)])
    assert int(run(g, backend, total, {N: n})) == n * (n - 1) // 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("take,want", [(True, 45), (False, -7)])
def test_loop_inside_cond_taken_and_untaken(backend: str, take: bool, want: int) -> None:
    # taken: 0 + 1 + ... + 9 = 45; untaken: the loop never runs (it would not end: i += 0)
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        step = tn.placeholder(tn.int32, [], name="step")

        def loop():
            _, s = tn.while_loop(lambda i, s: i < 10, lambda i, s: (i + step, s + i), [tn.constant(0), tn.constant(0)])
            return s

        y = tn.cond(p, loop, lambda: tn.constant(-7))
    assert int(run(g, backend, y, {p: take, step: 1 if take else 0}, max_iterations=1000)) == want


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("start,steps", [(6, 8), (7, 16), (1, 0), (27, 111)])
def test_cond_inside_loop_collatz(backend: str, start: int, steps: int) -> None:
    g = tn.Graph()
    with g.as_default():
        x0 = tn.placeholder(tn.int32, [], name="x0")
        _, n = tn.while_loop(
            lambda x, n: tn.not_equal(x, 1),
            lambda x, n: (tn.cond(tn.equal(x % 2, 0), lambda: tn.divide(x, 2),
                                  lambda: 3 * x + 1), n + 1),
            [x0, tn.constant(0)])
    assert int(run(g, backend, n, {x0: start})) == steps


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_map_fn_foldl(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, [4], name="xs")
        cum = tn.scan(lambda c, x: c + x, xs, initializer=tn.constant(0.0))
        sq = tn.map_fn(lambda x: x * x, xs)
        tot = tn.foldl(lambda c, x: c + x, xs, initializer=tn.constant(10.0))
    c, s, t = run(g, backend, [cum, sq, tot], {xs: np.array([1, 2, 3, 4], np.float32)})
    np.testing.assert_array_equal(c, [1, 3, 6, 10])
    np.testing.assert_array_equal(s, [1, 4, 9, 16])
    assert float(t) == 20.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_array_written_in_a_loop(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        ta = tn.TensorArray(tn.int32, size=5, element_shape=[])
        _, ta = tn.while_loop(lambda i, ta: i < 5, lambda i, ta: (i + 1, ta.write(i, i * i)), [tn.constant(0), ta])
        out = ta.stack()
        third = ta.read(3)
    o, r = run(g, backend, [out, third])
    np.testing.assert_array_equal(o, [0, 1, 4, 9, 16])
    assert int(r) == 9


@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_array_read_out_of_range_is_a_kernel_error(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        ta = tn.TensorArray(tn.float32, size=3, element_shape=[]).unstack(tn.constant([1.0, 2.0, 3.0]))
        r = ta.read(i)
    assert float(run(g, backend, r, {i: 2})) == 3.0
    with pytest.raises(tn.KernelError):
        run(g, backend, r, {i: 3})


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_division_floor_and_mod_and_dtypes(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int64, [], name="a")
        b = tn.placeholder(tn.int64, [], name="b")
        x = tn.placeholder(tn.float64, [], name="x")
        q, m, s = tn.divide(a, b), a % b, tn.sigmoid(x)
    qv, mv, sv = run(g, backend, [q, m, s], {a: np.int64(-7), b: np.int64(2), x: 0.0})
    assert int(qv) == -4 and int(mv) == 1 and float(sv) == 0.5
    assert qv.dtype == np.int64 and sv.dtype == np.float64
    with pytest.raises(tn.KernelError):
        run(g, backend, q, {a: np.int64(1), b: np.int64(0), x: 0.0})


@pytest.mark.parametrize("backend", BACKENDS)
def test_variables_persist_across_runs(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(1.0, name="v")
        inc = v.assign_add(2.0)
    sess = tn.Session(g, backend=backend)
    assert [float(sess.run(inc)) for _ in range(3)] == [3.0, 5.0, 7.0]
    assert float(sess.variables["v"]) == 7.0
    sess.variables["v"] = np.asarray(100.0, np.float32)  # an outside write is seen by the next run
    assert float(sess.run(inc)) == 102.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_variable_updated_inside_a_loop(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(0, name="acc")

        def body(i):
            with tn.control_dependencies([v.assign_add(i)]):
                return i + 1

        done = tn.while_loop(lambda i: i < 5, body, [tn.constant(0)])
    sess = tn.Session(g, backend=backend)
    sess.run(done)
    assert int(sess.variables["acc"]) == 10  # 0+1+2+3+4


# ---- hand-built graphs ---------------------------------------------------------------------------------
def raw_loop() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """Count from x up to 10, built from the paper's primitives (constants entered by hand)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        e = raw.enter(x, "loop")
        m, _ = raw.merge([e, raw.BACK_EDGE])
        p = raw.loop_cond(m < raw.enter(tn.constant(10), "loop", is_constant=True))
        f, t = raw.switch(m, p)
        raw.close_back_edge(m, raw.next_iteration(t + raw.enter(tn.constant(1), "loop", is_constant=True)))
        y = raw.exit(f)
    return g, x, y


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x0,want", [(0, 10), (7, 10), (12, 12)])
def test_hand_built_raw_loop(backend: str, x0: int, want: int) -> None:
    g, x, y = raw_loop()
    assert not g.contexts  # no builder metadata: the fast backend raises it from the primitives alone
    assert int(run(g, backend, y, {x: x0})) == want


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pred,value,index", [(True, 30.0, 1), (False, 2.0, 0)])
def test_hand_built_switch_merge(backend: str, pred: bool, value: float, index: int) -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        f, t = raw.switch(tn.constant(3.0), p)
        m, idx = raw.merge([f - 1.0, t * 10.0])
    mv, iv = run(g, backend, [m, idx], {p: pred})
    assert float(mv) == value and int(iv) == index


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pred", [True, False])
def test_dead_fetch_raises(backend: str, pred: bool) -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        f, t = raw.switch(tn.constant(3.0), p)
        tt = t * 2.0
    live, dead = (tt, f) if pred else (f, tt)
    assert float(run(g, backend, live, {p: pred})) in (6.0, 3.0)
    with pytest.raises(tn.DeadFetchError):
        run(g, backend, dead, {p: pred})


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_loaded_from_json(backend: str) -> None:
    from turnout import serialize

    g, x, y = raw_loop()
    g2 = serialize.loads(serialize.dumps(g))
    x2, y2 = g2.tensor(x.name), g2.tensor(y.name)
    assert int(run(g2, backend, y2, {x2: 3})) == 10

    h = tn.Graph()
    with h.as_default():
        a = tn.placeholder(tn.float32, [], name="a")
        _, s = tn.while_loop(lambda i, s: i < 4, lambda i, s: (i + 1, tn.cond(s > 5.0, lambda: s, lambda: s + a)),
                             [tn.constant(0), tn.constant(0.0)])
    h2 = serialize.loads(serialize.dumps(h))
    assert not h2.contexts
    assert float(run(h2, backend, h2.tensor(s.name), {h2.tensor(a.name): 2.0})) == 6.0  # 2, 4, 6, 6


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_termination_guard(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        _, y = tn.while_loop(lambda i, y: i >= 0, lambda i, y: (i + 1, y + 1), [tn.constant(0), tn.constant(0)])
    with pytest.raises(tn.NonTerminationError):
        run(g, backend, y, max_iterations=50)


# ---- fast only ---------------------------------------------------------------------------------------
def test_no_recompilation_for_new_values_or_trip_counts() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        x = tn.placeholder(tn.float32, [], name="x")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 0.5 + 1.0), [tn.constant(0), x])
    sess = tn.Session(g, backend="fast")
    sess.run(y, {n: 1, x: 0.0})
    compiles = sess.backend.compile_count
    for nv, xv in [(2, 0.0), (50, 3.0), (1000, -1.0)]:
        got = float(sess.run(y, {n: nv, x: xv}))
        want = xv
        for _ in range(nv):
            want = want * 0.5 + 1.0
        assert got == pytest.approx(want, rel=1e-5)
    assert sess.backend.compile_count == compiles


def test_lowering_table_is_complete() -> None:
    from turnout.fast.lowering import LOWERING_RULES, UNSUPPORTED, missing_rules
    from turnout.primitives import PRIMITIVES

    assert missing_rules() == []
    assert set(LOWERING_RULES) | set(UNSUPPORTED) >= set(PRIMITIVES)
    assert all(isinstance(reason, str) and reason for reason in UNSUPPORTED.values())


def test_merge_of_two_live_paths_is_rejected_naming_it(backend: str) -> None:
    """[E-Merge-Conflict]: the same error type on both backends (the fast one finds it when compiling)."""
    g = tn.Graph()
    with g.as_default():
        a = tn.constant(1.0)
        m, _ = raw.merge([a + 1.0, a * 3.0], name="both_live")
    with pytest.raises(tn.MergeConflictError, match=r"E-Merge-Conflict.*both_live"):
        run(g, backend, m)


def test_merge_of_unrelated_predicates_is_rejected() -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        q = tn.placeholder(tn.bool, [], name="q")
        _, t = raw.switch(tn.constant(1.0), p)
        f, _ = raw.switch(tn.constant(2.0), q)
        m, _ = raw.merge([t, f], name="mixed")
    with pytest.raises(tn.UnsupportedError, match="mixed"):
        tn.Session(g, backend="fast", fallback=False).run(m, {p: True, q: False})


def test_to_jax_inside_jit_and_vmap() -> None:
    import jax
    import jax.numpy as jnp

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        _, y = tn.while_loop(lambda i, y: y < 100.0, lambda i, y: (i + 1, y * 2.0), [tn.constant(0), x])
        z = tn.cond(y > 150.0, lambda: y - 150.0, lambda: y)
    from turnout.fast import to_jax

    f = to_jax(g, [x], z)
    assert float(jax.jit(f)(jnp.float32(3.0))) == 192.0 - 150.0  # 3 -> 6 -> ... -> 192
    got = jax.vmap(f)(jnp.array([3.0, 30.0, 100.0], jnp.float32))
    np.testing.assert_array_equal(np.asarray(got), [42.0, 120.0, 100.0])


def test_run_stats_report_the_backend() -> None:
    g, x, y = raw_loop()
    sess = tn.Session(g, backend="fast")
    sess.run(y, {x: 0})
    stats = sess.last_result.stats
    assert stats["backend"] == "fast" and stats["stages"] == 1 and stats["stack_chunks_swapped"] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_ill_formed_graph_is_rejected_before_running(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([raw.enter(tn.constant(0), "f"), raw.BACK_EDGE])  # the back edge is never bound
        y = raw.exit(m)
    with pytest.raises(tn.ValidationError):
        run(g, backend, y)


@settings(max_examples=examples(15))
@given(st.data())
def test_generated_programs_agree_with_the_ast_interpreter(data: st.DataObject) -> None:
    """Generated nested loops / conds / cases / scans (tests/strategies.py): the fast backend gives the
    values of ``programs.interpret``, a direct Python reading of the program's AST."""
    import programs
    import strategies

    p = data.draw(strategies.programs(loops=True, conds=True, max_depth=3))
    built = programs.build(p)
    inputs = data.draw(strategies.inputs_for(p))
    want = programs.interpret(p, inputs)
    got = tn.Session(built.graph, backend="fast").run(built.fetches, feed_dict=built.feed_dict(inputs))
    programs.assert_values_equal(got, want.values, "fast vs AST")


# ---- programs that cannot be compiled run on the reference interpreter ------------------------------
def _fallback_run(g: tn.Graph, fetches: Any, feed: dict[Any, Any] | None = None) -> tuple[Any, tn.Session]:
    sess = tn.Session(g, backend="fast")
    with pytest.warns(RuntimeWarning, match="reference interpreter"):
        got = sess.run(fetches, feed_dict=feed)
    assert sess.last_result.stats["executor"] == "reference interpreter (fallback)"
    assert sess.last_result.stats["fallback_reason"]
    return got, sess


def test_growing_loop_variable_with_gradient_falls_back() -> None:
    """A loop variable that doubles its length (shape_invariants) and its gradient: no fixed-shape
    XLA carry exists, so the program runs on the reference interpreter, with the reference's values."""
    g = tn.Graph()
    with g.as_default():
        w = tn.placeholder(tn.float32, [], name="w")
        _, x = tn.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, tn.concat([x, x * w], 0)),
                             [tn.constant(0), tn.reshape(w, [1])], shape_invariants=[[], [None]])
        loss = tn.reduce_sum(x)
        (dw,) = tn.gradients(loss, [w])
    feed = {w: np.float32(2.0)}
    (xv, dv), sess = _fallback_run(g, [x, dw], feed)
    want = tn.Session(g).run([x, dw], feed)
    np.testing.assert_allclose(xv, want[0])
    np.testing.assert_allclose(dv, want[1])
    assert xv.shape == (8,) and float(np.sum(xv)) == pytest.approx(2.0 * 3**3)
    # the decision is remembered: the same fetches and feed signature neither retrace nor warn again
    compiles = sess.backend.compile_count
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(sess.run([x, dw], {w: np.float32(1.0)})[0], np.ones(8, np.float32))
    assert sess.backend.compile_count == compiles


def test_fallback_keeps_errors_and_variables() -> None:
    """A fallen-back program raises the reference's error types and updates the session's Variables."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        v = tn.Variable(0.0, name="v")
        # a loop variable that grows by n each iteration (no fixed-shape XLA carry) until its sum, which
        # only the run knows (it reads the Variable), passes 10: not unrolled either, so a fallback
        _, x = tn.while_loop(lambda i, x: tn.reduce_sum(x) < 10.0,
                             lambda i, x: (i + 1, tn.concat([x, tn.fill(tn.stack([n]), 2.0 + v.read() * 0.0)], 0)),
                             [tn.constant(0), tn.zeros([0])], shape_invariants=[[], [None]])
        step = v.assign_add(tn.reduce_sum(x))
    sess = tn.Session(g, backend="fast")
    with pytest.warns(RuntimeWarning, match="trip count is known only when the program runs"):
        assert float(sess.run(step, {n: np.int32(3)})) == 12.0
    assert sess.last_result.stats["executor"] == "reference interpreter (fallback)"
    assert float(sess.run(step, {n: np.int32(2)})) == 24.0
    with pytest.raises(tn.FeedError):
        sess.run(step)
