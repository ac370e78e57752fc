"""A gradient program whose stacks fit their chunk runs as one fused call on the fast backend.

Why: the staged path (a Python driver between several compiled calls, able to swap stack chunks to
host memory) costs milliseconds per run, which dominates small models. The fused call cannot swap: a
push beyond the chunk discards the attempt and the staged path runs instead. These tests check that
both paths give the same closed-form results, that a discarded attempt applies no Variable update,
and that neither a new trip count nor a switch between the paths recompiles.

The program is ``y <- y * x`` run ``n`` times: ``y = x**n``, ``dy/dx = n x**(n-1)``.
"""

from __future__ import annotations

import graphs
import numpy as np
import pytest

import turnout as tn
from turnout.fast import stacks as tn_stacks

pytest.importorskip("jax")


def power_loop(with_variables: bool = False) -> dict[str, object]:
    base = graphs.power_loop()
    out: dict[str, object] = base._asdict()
    if with_variables:
        with base.g.as_default():
            runs = tn.Variable(np.int32(0), name="runs")
            acc = tn.Variable(np.float64(0.0), name="acc")
            out["count"] = runs.assign_add(np.int32(1))
            out["acc"] = acc.assign_add(base.dx)
    return out


def test_stacks_that_fit_run_fused_and_agree_with_the_staged_path() -> None:
    p = power_loop()
    fused = tn.Session(p["g"], backend="fast", stack_chunk=64, precompile_staged=True)
    staged = tn.Session(p["g"], backend="fast", stack_chunk=4, precompile_staged=True)
    fetch, x, n = [p["y"], p["dx"]], p["x"], p["n"]
    fused.run(fetch, {x: 1.5, n: 2})  # first run of a plan: compiles both paths (precompile_staged)
    staged.run(fetch, {x: 1.5, n: 2})
    compiles = fused.backend.compile_count, staged.backend.compile_count
    kinds = []
    for nv in (7, 30, 1, 2):
        yf, df = fused.run(fetch, {x: 1.5, n: nv})
        sf = fused.last_result.stats
        assert sf["fused"] and sf["stages"] == 1 and sf["stack_chunks_swapped"] == 0
        assert sf["peak_device_stack_bytes"] > 0
        assert float(yf) == pytest.approx(1.5**nv, rel=1e-12)
        assert float(df) == pytest.approx(nv * 1.5 ** (nv - 1), rel=1e-12)
        ys, ds = staged.run(fetch, {x: 1.5, n: nv})
        st = staged.last_result.stats
        kinds.append(st["fused"])
        # more pushes than the chunk holds: full chunks stay on the device (the loop's swap_memory=False)
        assert (st["stack_chunks_kept"] > 0) == (nv > 4) and st["stack_chunks_swapped"] == 0
        assert float(ys) == float(yf) and float(ds) == float(df)
    # n = 7: the fused attempt overflows a chunk of 4 and the staged path runs; after a run that
    # swapped, the next one (n = 30, then n = 1) skips the attempt; after one that did not, it is fused
    assert kinds == [False, False, False, True]
    assert (fused.backend.compile_count, staged.backend.compile_count) == compiles


def test_a_discarded_fused_attempt_applies_no_variable_update() -> None:
    # ``runs`` counts runs and ``acc`` sums dy/dx: after runs with n = 30, 3, 3, 30 on a chunk of 4,
    # runs == 4 and acc == 2 (30 x**29) + 2 (3 x**2). The first run of a plan and the last run
    # (a fused attempt that overflows) are fused attempts that are discarded, then run staged.
    p = power_loop(with_variables=True)
    sess = tn.Session(p["g"], backend="fast", stack_chunk=4)
    fetch = [p["dx"], p["count"], p["acc"]]
    kinds = []
    for nv in (30, 3, 3, 30):
        sess.run(fetch, {p["x"]: 1.5, p["n"]: nv})
        kinds.append(sess.last_result.stats["fused"])
    assert kinds == [False, False, True, False]
    assert int(sess.variables["runs"]) == 4
    assert float(sess.variables["acc"]) == pytest.approx(2 * 30 * 1.5**29 + 2 * 3 * 1.5**2, rel=1e-12)


def test_errors_of_a_fused_run_are_the_staged_errors() -> None:
    # max_iterations stops the forward loop: NonTerminationError on both paths, no Variable update
    p = power_loop(with_variables=True)
    for chunk in (1024, 4):
        sess = tn.Session(p["g"], backend="fast", stack_chunk=chunk)
        fetch = [p["dx"], p["count"], p["acc"]]
        sess.run(fetch, {p["x"]: 1.5, p["n"]: 3})
        with pytest.raises(tn.NonTerminationError):
            sess.run(fetch, {p["x"]: 1.5, p["n"]: 30}, max_iterations=10)
        assert int(sess.variables["runs"]) == 1
        assert float(sess.variables["acc"]) == pytest.approx(3 * 1.5**2, rel=1e-12)


def test_the_staged_path_is_compiled_by_the_first_run_that_needs_it() -> None:
    """By default a plan compiles only what its runs need: a first run whose loop fits the chunk
    compiles the fused program alone (one trace); the first run whose loop outgrows the chunk compiles
    the staged path, once; no later trip count compiles anything. ``precompile_staged=True`` compiles
    both on the first run instead."""
    p = power_loop()
    fetch, x, n = [p["y"], p["dx"]], p["x"], p["n"]
    lazy = tn.Session(p["g"], backend="fast", stack_chunk=4)
    eager = tn.Session(p["g"], backend="fast", stack_chunk=4, precompile_staged=True)
    lazy.run(fetch, {x: 1.5, n: 2})
    eager.run(fetch, {x: 1.5, n: 2})
    assert lazy.backend.compile_count == 1 < eager.backend.compile_count
    assert lazy.last_result.stats["fused"] and not eager.last_result.stats["fused"]
    lazy.run(fetch, {x: 1.5, n: 7})  # outgrows the chunk: the staged path runs, compiled now
    assert not lazy.last_result.stats["fused"] and lazy.backend.compile_count == eager.backend.compile_count
    counts = lazy.backend.compile_count, eager.backend.compile_count
    for nv in (30, 1, 9, 3):
        for sess in (lazy, eager):
            y, d = sess.run(fetch, {x: 1.5, n: nv})
            assert float(y) == pytest.approx(1.5**nv, rel=1e-12) and float(d) == pytest.approx(nv * 1.5 ** (nv - 1),
                                                                                               rel=1e-12)
    assert (lazy.backend.compile_count, eager.backend.compile_count) == counts


def test_every_path_reports_its_stage_times() -> None:
    """``stats['stage_seconds']``: one time per stage on the staged path (segments and driven loops),
    one for the whole call on the fused and one-call paths; every path's stats name the backend."""
    g, x, n, y, dx = graphs.power_loop()
    staged = tn.Session(g, backend="fast", stack_chunk=4)  # 20 pushes outgrow the chunk: the stages run
    staged.run([y, dx], {x: 1.5, n: 20})
    stats = staged.last_result.stats
    assert stats["fused"] is False and stats["backend"] == "fast"
    assert len(stats["stage_seconds"]) == stats["stages"] >= 2
    assert all(isinstance(t, float) and t > 0 for t in stats["stage_seconds"])
    fused = tn.Session(g, backend="fast")
    for _ in range(2):  # the general path, then the hot one
        fused.run([y, dx], {x: 1.5, n: 20})
        stats = fused.last_result.stats
        assert stats["fused"] is True and len(stats["stage_seconds"]) == 1 and stats["stage_seconds"][0] > 0
    direct = tn.Session(g, backend="fast")
    for _ in range(2):
        direct.run(y, {x: 1.5, n: 20})
        assert len(direct.last_result.stats["stage_seconds"]) == 1


def test_a_fused_run_hands_over_only_what_it_changed() -> None:
    """The fused call's arguments and results are its cost on a small model (``Plan.fused_fn``): a
    kept stack crosses it as its value buffer alone (the index record is made inside the call), and
    a Variable no op assigns is not returned, so its device copy is the same array run after run
    instead of a fresh copy each time. The staged path, which needs the index records, still takes
    over from such buffers, and every run gives the closed form."""
    p = graphs.power_loop()
    with p.g.as_default():
        k = tn.Variable(np.float64(3.0), name="k")
        out = p.y * k.read()
    sess = tn.Session(p.g, backend="fast", stack_chunk=8, stack_ladder=False, inside_stack_bytes=0)
    x, n = p.x, p.n
    got = sess.run([out, p.dx], {x: 1.5, n: 5})
    assert sess.last_result.stats["fused"]
    np.testing.assert_allclose(got, [3 * 1.5**5, 5 * 1.5**4], rtol=1e-12)
    kept = sess.backend._dev_vars["k"][1]
    (bufs,) = sess.backend._stack_bufs.values()
    assert bufs and all(not isinstance(b, tn_stacks.StackValue) and b.shape == (8,) for b in bufs.values())
    sess.run([out, p.dx], {x: 1.5, n: 6})
    assert sess.backend._dev_vars["k"][1] is kept  # passed through, not copied
    # 20 outgrows the chunk: the staged path runs from the fused run's buffers (and the run after it
    # skips the attempt, as after every run that kept full chunks), then a fused run from the stages'
    for nv, fused in ((20, False), (3, False), (3, True)):
        got = sess.run([out, p.dx], {x: 1.5, n: nv})
        assert sess.last_result.stats["fused"] == fused
        np.testing.assert_allclose(got, [3 * 1.5**nv, nv * 1.5 ** (nv - 1)], rtol=1e-12)


def test_a_fused_trace_refused_for_a_reason_no_capacity_changes_is_traced_once(monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    """A fused trace that refuses without saying how many entries it needed (an ``UnsupportedError``
    of its own, not a rung too small) would refuse on every rung: the fused stage is dropped at once,
    the run takes the stages, and no later run traces it again (it was traced once per rung of the
    ladder, eleven times, in the one run)."""
    from turnout.errors import UnsupportedError
    from turnout.fast.plan import Plan

    traces = []

    def refusing(self: Plan, st: object) -> object:
        def body(*args: object) -> object:
            traces.append(self.capacity)
            raise UnsupportedError("refused by the test")

        return body

    monkeypatch.setattr(Plan, "_fused_body", refusing)
    p = power_loop()
    sess = tn.Session(p["g"], backend="fast")
    for _ in range(2):
        got = sess.run([p["y"], p["dx"]], {p["x"]: 1.5, p["n"]: 20})
        np.testing.assert_allclose(got, [1.5**20, 20 * 1.5**19])
        assert not sess.last_result.stats["fused"]
    assert traces == [128]
    schedule = sess.explain([p["y"], p["dx"]], {p["x"]: 1.5, p["n"]: 20})
    assert [s.kind for s in schedule.steps] == ["staged"]
    assert schedule.notes == ("the whole program as one call was refused when traced (refused by the test): the "
                              "stages run instead",)
