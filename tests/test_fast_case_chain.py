"""A ``tn.case`` chain of nested conds is raised to one ``lax.switch`` on the fast backend, and means
exactly what the nested conds mean (index in and out of range, gradients, Variables, fetches inside a
branch, a case inside a loop and inside another case's branch)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn


def both(g: tn.Graph, fetch: Any, feeds: dict[Any, Any]) -> tuple[Any, Any]:
    return (tn.Session(g).run(fetch, feeds), tn.Session(g, backend="fast").run(fetch, feeds))


def _case_graph(n: int) -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, (), name="i")
        x = tn.placeholder(tn.float32, (3,), name="x")
        fns = [(lambda k=k: tn.tanh(x * float(k + 1)) + float(k)) for k in range(n)]
        y = tn.case(i, fns, default=lambda: x - 100.0)
    return g, i, x, y


@pytest.mark.parametrize("n", [2, 3, 7, 16])
def test_case_runs_as_one_switch_and_agrees_at_every_index(n: int, switches: list[int]) -> None:
    g, i, x, y = _case_graph(n)
    fast = tn.Session(g, backend="fast")
    ref = tn.Session(g)
    xv = np.array([0.5, -1.0, 2.0], np.float32)
    for k in [-3, -1, *range(n), n, n + 5]:
        np.testing.assert_allclose(fast.run(y, {i: k, x: xv}), ref.run(y, {i: k, x: xv}), rtol=1e-6)
    assert switches and max(switches) == n + 1  # one flat switch: n branches and the default


def test_a_case_of_one_branch_stays_a_cond(switches: list[int]) -> None:
    g, i, x, y = _case_graph(1)
    ref, fast = both(g, y, {i: 0, x: np.ones(3, np.float32)})
    np.testing.assert_allclose(fast, ref)
    assert switches == []


def test_gradients_through_a_raised_case() -> None:
    g, i, x, y = _case_graph(5)
    with g.as_default():
        (dx,) = tn.gradients(tn.reduce_sum(y * y), [x])
    xv = np.array([0.3, -0.7, 1.1], np.float32)
    for k in (-1, 0, 2, 4, 9):
        ref, fast = both(g, dx, {i: k, x: xv})
        np.testing.assert_allclose(fast, ref, rtol=1e-4, atol=1e-5)


def test_variables_assigned_in_case_branches() -> None:
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, (), name="i")
        v = tn.Variable(np.zeros(2, np.float32), name="v")

        def branch(k: int) -> Any:
            return lambda: v.assign_add(np.full(2, k + 1, np.float32))

        y = tn.case(i, [branch(k) for k in range(4)], default=lambda: v.assign_sub(np.ones(2, np.float32)))
    sessions = [tn.Session(g), tn.Session(g, backend="fast")]
    for k in (2, 0, 7, 3, -1):
        outs = [s.run(y, {i: k}) for s in sessions]
        np.testing.assert_allclose(outs[1], outs[0])


def test_fetching_a_value_of_an_untaken_case_branch_is_a_dead_fetch() -> None:
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, (), name="i")
        inside: list[tn.Tensor] = []

        def branch(k: int) -> Any:
            def fn() -> Any:
                t = tn.constant(float(k)) * 2.0
                inside.append(t)
                return t
            return fn

        y = tn.case(i, [branch(k) for k in range(4)], default=lambda: tn.constant(-1.0))
    for backend in ("reference", "fast"):
        s = tn.Session(g, backend=backend)
        assert s.run([y, inside[2]], {i: 2}) == [4.0, 4.0]
        with pytest.raises(tn.DeadFetchError):
            s.run([y, inside[2]], {i: 1})


def test_case_inside_a_loop_and_inside_a_case_branch(switches: list[int]) -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, (), name="n")
        j = tn.placeholder(tn.int32, (), name="j")

        def inner(t: tn.Tensor) -> Any:
            return tn.case(j, [lambda: t + 1.0, lambda: t * 2.0], default=lambda: t - 3.0)

        def body(k: tn.Tensor, t: tn.Tensor) -> Any:
            t2 = tn.case(k % 4, [lambda: t + 0.5, lambda: inner(t), lambda: t * 0.5], default=lambda: -t)
            return k + 1, t2

        _, out = tn.while_loop(lambda k, t: k < n, body, [tn.constant(0), tn.constant(1.0)])
    for nv in (0, 1, 5, 11):
        for jv in (-1, 0, 1, 2, 3):
            ref, fast = both(g, out, {n: nv, j: jv})
            np.testing.assert_allclose(fast, ref, rtol=1e-6)
    assert 4 in switches and 3 in switches  # the loop's case and the nested one, each one switch


def test_tracing_a_case_grows_quadratically_not_cubically(monkeypatch: pytest.MonkeyPatch) -> None:
    """Function ``k`` of a raised chain runs the ``k`` outer conds again with their decisions fixed,
    so tracing a case of ``n`` branches touches about ``n^2`` nodes. Each of those conds once searched
    every node nested below it for the values it exports, at every visit: ``n^3``, the larger part
    of a 64-branch case's compile time. Counted in key lookups (exact), not seconds (noise)."""
    from turnout.fast import conds, counted_nests, emitter_core, light_loops, loops

    counted = [0]
    orig = emitter_core.key

    def counting(t: Any) -> Any:
        counted[0] += 1
        return orig(t)

    for layer in (emitter_core, conds, loops, counted_nests, light_loops):  # (each layer of the emitter)
        monkeypatch.setattr(layer, "key", counting)
    lookups = {}
    for n in (16, 32):
        g, i, x, y = _case_graph(n)
        counted[0] = 0
        got = tn.Session(g, backend="fast").run(y, {i: n - 1, x: np.ones(3, np.float32)})
        np.testing.assert_allclose(got, np.tanh(np.ones(3) * n) + n - 1, rtol=1e-6)
        lookups[n] = counted[0]
    assert lookups[32] < 4.6 * lookups[16], lookups  # cubic growth gives about 8


def test_a_case_whose_branches_give_different_constants_is_not_folded_to_one(switches: list[int]) -> None:
    """A raised case whose levels give constants: where every level gives the same one the result is
    it, and where they differ (of one dtype) the switch chooses among them at run time, at every
    index and the default, as the reference does."""
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        same = tn.case(k, [lambda: tn.constant(5.0), lambda: tn.constant(5.0)], default=lambda: tn.constant(5.0))
        differ = tn.case(k, [lambda: tn.constant(1.0), lambda: tn.constant(2.0), lambda: tn.constant(1.0)],
                         default=lambda: tn.constant(3.0))
        out = [same * 2.0, differ * 2.0]
    fast = tn.Session(g, backend="fast")
    for v in range(5):
        got, want = fast.run(out, {k: v}), tn.Session(g).run(out, {k: v})
        assert [float(a) for a in got] == [float(b) for b in want] == [10.0, [2.0, 4.0, 2.0, 6.0, 6.0][v]]
    assert switches, "the case was raised to a switch"
