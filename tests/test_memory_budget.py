"""Memory budgets for the values loops save for their gradients (``turnout.memory_plan``).

A loop's ``memory_budget`` (``tn.while_loop``) and a run's (``Session.run(..., memory_budget=)``)
bound the bytes of its gradient stacks on the device. (A loop's own budget without ``swap_memory=True``
is met by recomputation, with no stacks at all: ``tests/test_recompute.py``; here the loops that keep
stacks under a budget: a run's budget, or a loop's own with ``swap_memory=True``.) The planner's rules
are tested as a pure function; the runs on the reference and fast backends are checked against each backend's own
accounting (``peak_saved_bytes``, ``peak_device_stack_bytes``), and a run that would go over a budget
must raise ``ResourceExhaustedError`` naming the loop, never finish over it.

The model: ``v <- 1.1 tanh(v)`` for ``n`` steps from ``x`` (4 float32s); the gradient of ``sum(v_n)``
is the product of ``1.1 (1 - tanh(v_k)**2)``, computed here in numpy.
"""

from __future__ import annotations

from typing import Any, Optional

import graphs
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import turnout as tn
from turnout import memory_plan as mp
from turnout.errors import ArgumentError, ResourceExhaustedError

BACKENDS = ["reference", "fast"]
X0 = np.array([0.1, -0.4, 0.7, 1.2], np.float32)


def build(budget: Optional[int] = None, swap: bool = False) -> dict[str, Any]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tn.tanh(v) * 1.1), [tn.constant(0), x],
                             name="rnn", swap_memory=swap, memory_budget=budget)
        (gx,) = tn.gradients(tn.reduce_sum(y), [x])
    # (these tests check the stacks' own accounting: with no record of the gradient call, a run that
    # outgrows them stops; with one, it is repeated on the call rebuilt to recompute, tests/test_run_budget.py)
    g.gradient_calls.clear()
    return {"g": g, "x": x, "n": n, "gx": gx}


def expected_grad(n: int) -> np.ndarray:
    v, grad = X0.astype(np.float64), np.ones(4)
    for _ in range(n):
        t = np.tanh(v)
        grad, v = grad * 1.1 * (1 - t * t), 1.1 * t
    return grad


_SESSIONS: dict[Any, tuple[dict[str, Any], Any]] = {}


def session(backend: str, budget: Optional[int] = None, swap: bool = False, **opts: Any) -> tuple[dict[str, Any], Any]:
    """One model and session per configuration, for the module (a fast session compiles once per plan)."""
    k = (backend, budget, swap, tuple(sorted(opts.items())))
    if k not in _SESSIONS:
        m = build(budget, swap)
        _SESSIONS[k] = (m, tn.Session(m["g"], backend=backend, **opts))
    return _SESSIONS[k]


def entry_bytes(m: dict[str, Any]) -> int:
    """Bytes the loop saves per iteration: its stacked values (the static report) and one int32 index each."""
    lp = tn.memory_report(m["g"]).loop("rnn")
    assert lp.bytes_per_iteration is not None
    return lp.bytes_per_iteration + 4 * len(lp.stacked)


# ---- the budget as a value ----------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -5, True, 2.5, "1k"])
def test_bad_budgets_are_refused_by_name(bad: Any) -> None:
    with pytest.raises(ArgumentError, match="memory_budget"):
        tn.RunOptions(memory_budget=bad)
    with pytest.raises(ArgumentError, match="memory_budget"):
        build(bad)
    m, sess = session("reference")
    with pytest.raises(ArgumentError, match="memory_budget"):
        sess.run(m["gx"], {m["x"]: X0, m["n"]: 2}, memory_budget=bad)


def test_a_loop_budget_is_recorded_on_its_stacks_printed_and_saved() -> None:
    m = build(4096, swap=True)
    stacks = [nd for nd in m["g"].nodes if nd.op == "StackNew"]
    assert stacks and all(nd.attrs["memory_budget"] == 4096 for nd in stacks)
    assert "memory_budget=4096" in tn.pretty(m["g"])
    back = tn.loads(tn.dumps(m["g"]))
    assert [nd.attrs.get("memory_budget") for nd in back.nodes if nd.op == "StackNew"] == [4096] * len(stacks)
    assert all("memory_budget" not in nd.attrs for nd in build()["g"].nodes if nd.op == "StackNew")
    assert not [nd for nd in build(4096)["g"].nodes if nd.op == "StackNew"]  # recomputed: nothing stacked


def test_a_gradient_loop_takes_its_forward_loops_budget() -> None:
    """The backward loop of a budgeted loop saves values too (for a second-order gradient): they are
    under the same budget, so its stacks carry it."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        _, y = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tn.tanh(v) * x), [tn.constant(0), x],
                             name="rnn", memory_budget=2048, swap_memory=True)
        (gx,) = tn.gradients(y, [x])
        before = {nd.id for nd in g.nodes}
        tn.gradients(gx, [x])  # its stacks are pushed in the first gradient's loop
    second = [nd for nd in g.nodes if nd.op == "StackNew" and nd.id not in before]
    assert second and all(nd.attrs.get("memory_budget") == 2048 for nd in second)


FUNCTIONAL = {"scan": "scan", "map_fn": "map", "foldl": "foldl", "foldr": "foldr"}


def build_functional(kind: str, budget: Optional[int]) -> dict[str, Any]:
    """``sum`` of a ``scan``/``map_fn``/fold of ``tanh(c * x)`` over the rows of ``xs``, and its gradient."""
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, [None, 4], name="xs")
        c0 = tn.constant(np.full(4, 0.5, np.float32))
        step = lambda c, x: tn.tanh(c * x + 0.1)  # noqa: E731
        if kind == "map_fn":
            y = tn.map_fn(lambda x: tn.tanh(x * x), xs, memory_budget=budget)
        else:
            y = getattr(tn, kind)(step, xs, initializer=c0, memory_budget=budget)
        (gx,) = tn.gradients(tn.reduce_sum(y), [xs])
    return {"g": g, "xs": xs, "gx": gx}


@pytest.mark.parametrize("kind", sorted(FUNCTIONAL))
def test_scan_map_fn_and_folds_take_a_loop_budget(kind: str) -> None:
    """``memory_budget`` on the functional builders is their loop's own budget, and each recomputes
    (``tests/test_recompute.py``): a fold's state is its accumulator, a scan's its carry and the
    TensorArray of its results, a map's its counter and that array, and an array the body only writes
    is no part of a checkpoint (``checkpoints.accumulators``). So no stacks, and the
    store-everything gradient at any length, past what storing everything would fit."""
    lp = tn.memory_report(build_functional(kind, None)["g"]).loop(FUNCTIONAL[kind])
    assert lp.bytes_per_iteration is not None
    e = lp.bytes_per_iteration + 4 * len(lp.stacked)
    m = build_functional(kind, 5 * e)
    stacks = [nd for nd in m["g"].nodes if nd.op == "StackNew"]
    plain = build_functional(kind, None)
    sess = tn.Session(m["g"])
    assert not stacks and tn.memory_report(m["g"]).plan.loop(FUNCTIONAL[kind]).action == "recompute"  # type: ignore[union-attr]
    for rows in (5, 6, 40):
        xs = np.linspace(-1.0, 1.0, 4 * rows, dtype=np.float32).reshape(rows, 4)
        want = tn.Session(plain["g"]).run(plain["gx"], {plain["xs"]: xs})
        np.testing.assert_allclose(sess.run(m["gx"], {m["xs"]: xs}), want, rtol=1e-6)
    with pytest.raises(ArgumentError, match="memory_budget"):
        build_functional(kind, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hand_built_stack_runs_under_a_run_budget(backend: str) -> None:
    """A stack built by hand (a ``StackNew`` of no loop, so of no loop's budget) beside a loop whose
    gradient is counted under a run budget: its pushes are not a loop's saved values, and the run
    gives what it gives without a budget, the loop's saved bytes counted as for the loop alone."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        x = tn.placeholder(tn.float32, [4], name="x")
        s = g.create_node("StackNew", (), {"elem_dtype": "float64", "elem_shape": []}, name="stk").outputs[0]

        def push(i: Any, c: Any) -> Any:
            p = g.create_node("StackPush", [s, tn.reshape(i, [1]), tn.cast(i, tn.float64)]).outputs[0]
            return i + 1, c + p

        _, out = tn.while_loop(lambda i, c: i < n, push, [tn.constant(0), tn.constant(0.0, tn.float64)])
        _, y = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tn.tanh(v) * 1.1), [tn.constant(0), x],
                             name="rnn")
        (gx,) = tn.gradients(tn.reduce_sum(y), [x])
    sess = tn.Session(g, backend=backend)
    feed = {n: 5, x: X0}
    got = sess.run([out, gx], feed, memory_budget=1 << 20)
    want = sess.run([out, gx], feed)
    assert float(got[0]) == float(want[0]) == 10.0
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)
    np.testing.assert_allclose(got[1], expected_grad(5), rtol=1e-5)


# ---- the planner's rules -------------------------------------------------------------------------
CPU, GPU = mp.platform("cpu"), mp.platform("gpu")


def one(e: Optional[int], budget: Optional[int], where: mp.Platform, swap: bool = False,
        run: Optional[int] = None, costs: mp.CostModel = mp.CostModel()) -> mp.LoopPlan:
    plan = mp.plan_memory([mp.StackSize("s", "rnn", e, swap, budget)], where, run, costs)
    return plan.loop("rnn")


def test_planner_rules() -> None:
    assert one(100, None, CPU).action == "keep" and one(100, None, CPU).max_iterations is None
    assert one(100, None, GPU, swap=True).action == "swap"
    cpu = one(100, 1050, CPU)  # the CPU: swapping frees nothing, so only recomputation meets a budget
    assert (cpu.action, cpu.built, cpu.max_iterations) == ("recompute", False, 10)
    assert "frees nothing" in cpu.reason and cpu.peak_bytes(10) == 1000 and cpu.peak_bytes(11) is None
    gpu = one(100, 1050, GPU)  # a host memory space: two chunks of 5 on the device at any trip count
    assert (gpu.action, gpu.built, gpu.chunk, gpu.max_iterations) == ("swap", True, 5, None)
    assert gpu.transfer_seconds == pytest.approx(100 / mp.HOST_BANDWIDTH["gpu"])
    asked = one(100, 1050, CPU, swap=True)  # asked for, it swaps on the CPU too, and says what it saves
    assert asked.action == "swap" and "frees nothing" in asked.reason
    tiny = one(100, 150, GPU)  # two iterations do not fit: nothing but recomputation
    assert (tiny.action, tiny.built, tiny.max_iterations) == ("recompute", False, 1)
    unknown = one(None, 1000, CPU)
    assert unknown.action == "keep" and "run time" in unknown.reason and unknown.peak_bytes(5) is None
    slow = one(10_000, 10**6, GPU, costs=mp.CostModel(iteration_seconds=1e-7))
    assert "recomputation would be cheaper" in slow.reason
    fast_enough = one(10_000, 10**6, GPU, costs=mp.CostModel(iteration_seconds=1e-3))
    assert "hides behind" in fast_enough.reason


def test_a_repeated_runs_time_per_iteration_is_the_cost_the_plan_weighs_swapping_against() -> None:
    """``measured_costs`` reads a run's stats: the seconds of its one compiled call over twice the
    iterations its stacks held (each iteration runs forward and backward once), and only for a repeated
    run's lane, which compiles nothing; a first run (it compiled) and a run that pushed nothing measure
    nothing. ``Session.explain`` and ``tn.memory_report`` weigh a swap's transfers against the session's
    last such run (here the plan a GPU gets, ``memory_platform="gpu"``, on the CPU)."""
    assert mp.measured_costs({"route": "lane", "stage_seconds": [0.003], "stack_mark": 50}) == mp.CostModel(3e-5, 50)
    for stats in ({"route": "general", "stage_seconds": [0.003], "stack_mark": 50},
                  {"route": "lane", "stage_seconds": [0.003], "stack_mark": 0},
                  {"route": "hot", "stack_mark": 50}, {}):
        assert mp.measured_costs(stats) == mp.CostModel(), stats
    pytest.importorskip("jax")
    g, x, n, y, dx = graphs.power_loop(swap_memory=False)
    sess = tn.Session(g, backend="fast", memory_platform="gpu")
    notes = " ".join(sess.explain([y, dx], {x: 1.0001, n: 300}, memory_budget=1200).notes)
    assert 'loop "while": swap' in notes and "us of compute" not in notes  # (nothing measured yet)
    for _ in range(2):
        sess.run([y, dx], {x: 1.0001, n: 300})
    stats = sess.last_result.stats
    assert stats["route"] in ("lane", "hot") and stats["stack_mark"] == 300, stats
    words = mp.CostModel(sum(stats["stage_seconds"]) / 600, 300).words()
    assert "measured: the session's last run, 300 iterations each way" in words
    notes = " ".join(sess.explain([y, dx], {x: 1.0001, n: 300}, memory_budget=1200).notes)
    assert words in notes, notes
    assert words in tn.memory_report(sess, [y, dx], memory_budget=1200).plan.loop("while").reason


def test_a_run_budget_is_shared_by_bytes_per_iteration_after_the_loops_own() -> None:
    sizes = [mp.StackSize("a1", "a", 100), mp.StackSize("a2", "a", 200), mp.StackSize("b", "b", 100),
             mp.StackSize("c", "c", 50, memory_budget=400)]
    plan = mp.plan_memory(sizes, CPU, run_budget=4400)
    a, b, c = plan.loop("a"), plan.loop("b"), plan.loop("c")
    assert (a.entry_bytes, a.budget, a.budget_from) == (300, 3000, "run")
    assert (b.budget, c.budget, c.budget_from) == (1000, 400, "loop")
    assert plan.capacity() == min(a.max_iterations, b.max_iterations, c.max_iterations) == 8  # type: ignore[type-var]
    small = mp.plan_memory([mp.StackSize("c", "c", 50, memory_budget=400)], CPU, run_budget=100).loop("c")
    assert (small.budget, small.budget_from) == (100, "run")  # a loop's budget is at most the run's


@pytest.mark.parametrize("e", [1, 28, 100, 4096])
@pytest.mark.parametrize("budget", [2 * 4096, 10_000, 10**6])
def test_a_swap_plan_bounds_the_device_bytes_at_every_trip_count(e: int, budget: int) -> None:
    lp = one(e, budget, GPU)
    assert lp.action == "swap" and lp.chunk is not None
    c = lp.chunk
    for n in [0, 1, c - 1, c, c + 1, 2 * c - 1, 2 * c, 2 * c + 1, 3 * c, 10 * c + 7, 10**9]:
        got = lp.peak_bytes(n)
        assert got is not None and got <= budget


def test_the_chunk_store_swaps_the_loops_the_plan_swaps() -> None:
    pytest.importorskip("jax")
    from turnout.fast import stacks as stk

    info = {"stack:1": stk.StackInfo("rnn", 'loop "rnn"', False), "stack:2": stk.StackInfo("other", "", False)}
    sizes = [mp.StackSize("s1", "rnn", 100, memory_budget=1000), mp.StackSize("s2", "other", 100)]
    store = stk.ChunkStore(info, None, mp.plan_memory(sizes, GPU))
    assert store.swaps("stack:1") and not store.swaps("stack:2")
    assert not stk.ChunkStore(info, None, mp.plan_memory(sizes, CPU)).swaps("stack:1")


# ---- honoured, and checked against each backend's accounting -----------------------------------------
def saved_peak(backend: str, stats: dict[str, Any]) -> int:
    return int(stats["peak_device_stack_bytes"] if backend == "fast" else stats["peak_saved_bytes"])


@pytest.mark.parametrize("backend", [*BACKENDS, "smallstep"])
def test_a_run_budget_holds_and_a_longer_run_is_an_error(backend: str) -> None:
    m, sess = session(backend)
    e = entry_bytes(m)
    got = sess.run(m["gx"], {m["x"]: X0, m["n"]: 8}, memory_budget=10 * e)
    np.testing.assert_allclose(got, expected_grad(8), rtol=1e-5)
    assert saved_peak(backend, sess.last_result.stats) <= 10 * e
    with pytest.raises(ResourceExhaustedError, match="the run's memory_budget of"):
        sess.run(m["gx"], {m["x"]: X0, m["n"]: 11}, memory_budget=10 * e)
    np.testing.assert_allclose(sess.run(m["gx"], {m["x"]: X0, m["n"]: 30}), expected_grad(30), rtol=1e-5)


@given(fits=st.integers(1, 30), slack=st.integers(0, 27), n=st.integers(0, 40))
def test_the_reference_keeps_within_any_budget_or_stops(fits: int, slack: int, n: int) -> None:
    """Under a run budget of ``fits`` iterations (and less than one more), a run of ``n`` iterations
    gives the store-everything gradient with at most ``n e`` bytes saved, or stops when ``n > fits``."""
    e = entry_bytes(build())
    budget = fits * e + slack % e
    m, sess = session("reference")
    feed, opts = {m["x"]: X0, m["n"]: n}, {"memory_budget": budget}
    if n > fits:
        with pytest.raises(ResourceExhaustedError, match='loop "rnn"'):
            sess.run(m["gx"], feed, **opts)
        return
    np.testing.assert_allclose(sess.run(m["gx"], feed, **opts), expected_grad(n), rtol=1e-5)
    assert sess.last_result.stats["peak_saved_bytes"] == n * e <= budget


@pytest.mark.parametrize("fits", [1, 7])
def test_the_fast_backend_keeps_within_a_budget_or_stops_as_the_reference_does(fits: int) -> None:
    pytest.importorskip("jax")
    e = entry_bytes(build())
    m, sess = session("fast")
    budget = {"memory_budget": fits * e + e // 2}
    for n in (0, fits, fits + 1, 3 * fits + 2):
        feed = {m["x"]: X0, m["n"]: n}
        if n > fits:
            with pytest.raises(ResourceExhaustedError, match='loop "rnn"'):
                sess.run(m["gx"], feed, **budget)
            continue
        np.testing.assert_allclose(sess.run(m["gx"], feed, **budget), expected_grad(n), rtol=1e-5)
        assert sess.last_result.stats["peak_device_stack_bytes"] <= fits * e + e // 2


def test_a_run_under_a_budget_holds_buffers_sized_to_the_run() -> None:
    """A budget that keeps 500 iterations caps the stacks at 500 entries, and below the cap a run
    takes the rung of the capacity ladder that holds what it pushes, as a run without a budget does
    (the ladder ends at the cap: 128, 160, ..., 490, 500): a run of 50 iterations holds 128 entries
    per stack, not 500, and one of 300 holds 313."""
    pytest.importorskip("jax")
    e = entry_bytes(build())
    m, sess = session("fast", inside_stack_bytes=0)
    for n, rung in ((50, 128), (300, 313), (500, 500)):
        got = sess.run(m["gx"], {m["x"]: X0, m["n"]: n}, memory_budget=500 * e)
        np.testing.assert_allclose(got, expected_grad(n), rtol=1e-3, atol=1e-30)  # (float32, hundreds of steps)
        stats = sess.last_result.stats
        assert stats["fused"] and stats["stack_capacity"] == rung and stats["stack_mark"] == n
        assert stats["stack_ladder"][-1] == 500
        assert stats["peak_device_stack_bytes"] <= 500 * e
    with pytest.raises(ResourceExhaustedError, match='loop "rnn"'):
        sess.run(m["gx"], {m["x"]: X0, m["n"]: 501}, memory_budget=500 * e)


def test_a_swapped_loop_under_a_budget_runs_at_any_length_within_it() -> None:
    """In one call, its stacks in host memory; past ``host_stack_limit``, on the staged path in chunks
    of the budget's size, swapped out."""
    pytest.importorskip("jax")
    e = entry_bytes(build())
    budget = 2 * 6 * e  # two chunks of 6 iterations
    m, sess = session("fast", budget, swap=True)
    got = sess.run(m["gx"], {m["x"]: X0, m["n"]: 50})
    np.testing.assert_allclose(got, expected_grad(50), rtol=1e-5)
    stats = sess.last_result.stats
    assert stats["fused"] and stats["stack_chunks_swapped"] == 0 and stats["peak_device_stack_bytes"] == 0
    m, sess = session("fast", budget, swap=True, host_stack_limit=6)
    got = sess.run(m["gx"], {m["x"]: X0, m["n"]: 50})
    np.testing.assert_allclose(got, expected_grad(50), rtol=1e-5)
    stats = sess.last_result.stats
    assert stats["stack_capacity"] == 6 and stats["stack_chunks_swapped"] > 0
    assert 0 < stats["peak_device_stack_bytes"] <= budget


def nested(budget: Optional[int]) -> tuple[Any, Any, Any]:
    """Two outer iterations of an inner loop of three ``tanh`` steps, the inner loop under ``budget``
    (with ``swap_memory=True``, so that it keeps stacks: the reference holds them all, and counts them)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def outer(t: Any, v: Any) -> Any:
            _, w = tn.while_loop(lambda j, u: j < 3, lambda j, u: (j + 1, tn.tanh(u)), [tn.constant(0), v],
                                 name="inner", memory_budget=budget, swap_memory=budget is not None)
            return t + 1, w

        _, y = tn.while_loop(lambda t, v: t < 2, outer, [tn.constant(0), x], name="outer")
        (gx,) = tn.gradients(y, [x])
    return g, x, gx


def test_an_inner_loop_is_counted_with_its_two_level_index() -> None:
    g, x, gx = nested(None)
    lp = tn.memory_report(g).loop("outer/body/inner")
    e = tn.memory_report(g, memory_budget=10**6).plan.loop("outer/body/inner").entry_bytes  # type: ignore[union-attr]
    assert e == lp.bytes_per_iteration + 8 * len(lp.stacked)  # each entry's index: two int32 counters
    want = tn.Session(g).run(gx, {x: 0.5})
    for backend in BACKENDS:
        g, x, gx = nested(6 * e)  # 2 x 3 pushes fit exactly
        sess = tn.Session(g, backend=backend)
        np.testing.assert_allclose(sess.run(gx, {x: 0.5}), want, rtol=1e-6)
        if backend == "reference":
            assert sess.last_result.stats["saved_bytes"]["outer/body/inner"] == 6 * e
        else:
            (rec,) = tn.memory_report(sess).loop("outer/body/inner")
            assert 0 < rec.peak_device_bytes <= 6 * e
    g, x, gx = nested(6 * e - 1)
    with pytest.raises(ResourceExhaustedError, match='loop "outer/body/inner"'):
        tn.Session(g, backend="reference").run(gx, {x: 0.5})


# ---- reported ----------------------------------------------------------------------------------
def test_explain_and_the_report_say_what_each_loop_does() -> None:
    m, sess = session("reference", 1000, swap=True)
    notes = sess.explain(m["gx"], {m["x"]: X0, m["n"]: 3}).notes
    assert any('memory plan: loop "rnn": swap' in n for n in notes)
    m2, plain = session("reference")
    assert not any("memory plan" in n for n in plain.explain(m2["gx"], {m2["x"]: X0, m2["n"]: 3}).notes)
    under = plain.explain(m2["gx"], {m2["x"]: X0, m2["n"]: 3}, memory_budget=500).notes
    assert any("run memory_budget=500" in n for n in under)
    assert any('memory plan: loop "rnn": recompute (after the stacks, by a rebuilt gradient)' in n for n in under)
    rep = tn.memory_report(m2["g"], memory_budget=500, platform="gpu")
    assert rep.plan is not None and rep.plan.loop("rnn").action == "swap" and "memory plan" in str(rep)
    assert tn.memory_report(sess).plan.loop("rnn").budget == 1000  # type: ignore[union-attr]
    assert "memory plan" not in str(tn.memory_report(m2["g"]))  # no budget: every loop keeps, said nothing


def test_the_fast_schedule_sizes_its_stacks_from_the_budget() -> None:
    pytest.importorskip("jax")
    e = entry_bytes(build())
    m, sess = session("fast")
    feed = {m["x"]: X0, m["n"]: 3}
    text = str(sess.explain(m["gx"], feed, memory_budget=7 * e))
    assert "gradient stacks of 7 entries" in text and "at most 7 iterations per call" in text
    under_run = sess.explain(m["gx"], feed, memory_budget=3 * e)
    assert "gradient stacks of 3 entries" in str(under_run)
    assert not any("lane" in n for n in under_run.notes)  # a run under a run budget takes no lane


def _partitioned(m: dict[str, Any]) -> Any:
    """A session of the partitioned reference backend with the model's nodes round robin over two
    devices, so the loop, its gradient and its stacks span both."""
    req = {node.name: f"cpu:{k % 2}" for k, node in enumerate(m["g"].nodes)}
    return tn.Session(m["g"], devices=["cpu:0", "cpu:1"], requests=req)


def test_the_partitioned_reference_counts_each_devices_saved_values_against_the_budget() -> None:
    """A budget bounds what each device holds: the devices' peaks add up to the one-device run's,
    each within the budget, and a run that would put more on a device stops, naming the loop."""
    e = entry_bytes(build())
    m = build(12 * e, swap=True)  # swap_memory: it keeps its stacks (without, it recomputes)
    sess = _partitioned(m)
    got = sess.run(m["gx"], {m["x"]: X0, m["n"]: 12})
    np.testing.assert_allclose(got, expected_grad(12), rtol=1e-5)
    stats = sess.last_result.stats
    peaks = stats["peak_saved_bytes_per_device"]
    assert len(peaks) == 2 and all(p > 0 and p % 12 == 0 for p in peaks.values()), peaks
    assert sum(peaks.values()) == 12 * e == stats["saved_bytes"]["rnn"]
    assert stats["peak_saved_bytes"] == max(peaks.values()) <= 12 * e
    most = max(peaks.values()) // 12  # bytes per iteration on the device that holds most
    fits = 12 * e // most  # iterations that device's share of the budget holds
    np.testing.assert_allclose(sess.run(m["gx"], {m["x"]: X0, m["n"]: fits}), expected_grad(fits), rtol=1e-5)
    with pytest.raises(ResourceExhaustedError, match='loop "rnn"'):
        sess.run(m["gx"], {m["x"]: X0, m["n"]: fits + 1})
    m = build()
    sess = _partitioned(m)
    np.testing.assert_allclose(sess.run(m["gx"], {m["x"]: X0, m["n"]: 5}, memory_budget=10**6), expected_grad(5),
                               rtol=1e-5)
    assert sess.last_result.stats["peak_saved_bytes"] <= 10**6
    with pytest.raises(ResourceExhaustedError, match="the run's memory_budget of"):
        sess.run(m["gx"], {m["x"]: X0, m["n"]: 5}, memory_budget=e // 2)
    assert "bounds what each device's gradient stacks hold" in str(
        sess.explain(m["gx"], {m["x"]: X0, m["n"]: 5}, memory_budget=10**6))


def _fast_partitioned(m: dict[str, Any], **opts: Any) -> Any:
    """The model on the fast partitioned backend, round robin over two devices as ``_partitioned``:
    the loop and its gradient span both, driven from the host."""
    req = {node.name: f"cpu:{k % 2}" for k, node in enumerate(m["g"].nodes)}
    return tn.Session(m["g"], backend="fast", devices=["cpu:0", "cpu:1"], requests=req, **opts)


def test_the_fast_partitioned_backend_counts_each_devices_stacks_against_the_budget() -> None:
    """The fast partitioned backend honours budgets as the partitioned reference does: each device's
    stack buffers are counted against the run's budget and the loop's own, its chunks sized from the
    budget; a run within it gives the reference's gradient, one that would go over stops with the
    reference's error type, naming the loop and the device."""
    pytest.importorskip("jax")
    e = entry_bytes(build())
    m = build()
    sess = _fast_partitioned(m)
    np.testing.assert_allclose(sess.run(m["gx"], {m["x"]: X0, m["n"]: 5}, memory_budget=10**6), expected_grad(5),
                               rtol=1e-5)
    stats = sess.last_result.stats
    assert stats["tier"] == "host-driven" and 0 < stats["peak_device_stack_bytes"] <= 10**6, stats
    with pytest.raises(ResourceExhaustedError, match=r"(?s)device cpu:\d.*the run's memory_budget of"):
        sess.run(m["gx"], {m["x"]: X0, m["n"]: 40}, memory_budget=e)
    with pytest.raises(ResourceExhaustedError):  # the partitioned reference stops it too
        _partitioned(m).run(m["gx"], {m["x"]: X0, m["n"]: 40}, memory_budget=e)
    assert "each device's gradient stacks are counted" in str(
        sess.explain(m["gx"], {m["x"]: X0, m["n"]: 5}, memory_budget=10**6))
    m = build(12 * e, swap=True)  # a loop's own budget on stacks it swaps: any length, within the budget
    sess = _fast_partitioned(m)
    for n in (6, 200):
        np.testing.assert_allclose(sess.run(m["gx"], {m["x"]: X0, m["n"]: n}), expected_grad(n), rtol=1e-4)  # float32
        stats = sess.last_result.stats
        assert 0 < stats["peak_device_stack_bytes"] <= 12 * e, stats
    assert stats["stack_chunks_swapped"] > 0, stats


def test_a_graph_on_one_device_of_the_fast_partitioned_backend_takes_the_one_device_budget() -> None:
    """Placed wholly on one device, the run is the one-device fast backend's, budget included."""
    pytest.importorskip("jax")
    e = entry_bytes(build())
    m = build()
    sess = tn.Session(m["g"], backend="fast", devices=["cpu:0"])
    np.testing.assert_allclose(sess.run(m["gx"], {m["x"]: X0, m["n"]: 5}, memory_budget=10**6), expected_grad(5),
                               rtol=1e-5)
    assert sess.last_result.stats["tier"] == "one device"
    with pytest.raises(ResourceExhaustedError, match="the run's memory_budget of"):
        sess.run(m["gx"], {m["x"]: X0, m["n"]: 40}, memory_budget=e)
