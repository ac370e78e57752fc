"""The checkpoint slots of a recomputed loop, sized by the fast backend to what its runs need.

A loop under its own ``memory_budget`` keeps checkpoints of its state in ``CheckpointSlots`` slots:
every slot the budget holds on the small-step system; on the fast backends (one device, and the
partitioned executor's per-device tiers and SPMD program) at most the plan's slot capacity (its
stack capacity, ``stack_chunk``, until a run needed more, then the smallest power of two holding
what it needed, learnt from the ``CheckpointTrips`` the backward loop reads; ``turnout.slot_sizes``),
and on the reference interpreter, one device or partitioned, by the same rule from
``FIRST_CAPACITY``.
The gradient's values do not depend on the count: every case compares them with the store-everything
gradients of the same loop, run by run, while the count changes between runs.

The model: ``v <- tanh(v) * w`` for ``n`` steps (``n`` fed, or a constant), 4 float32s of state, so
a budget of ``24 k`` bytes holds ``k`` slots (the counter, the state and its position).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import turnout as tn
from turnout.errors import DTypeError, GraphBuildError
from turnout.slot_sizes import FIRST_CAPACITY

pytest.importorskip("jax")

X0 = np.array([0.1, -0.4, 0.7, 1.2], np.float32)
W0 = np.array([1.1, 0.9, -1.2, 1.05], np.float32)
STATE = 24


def model(budget: Optional[int], steps: Optional[int] = None, bound: Optional[int] = None) -> dict[str, Any]:
    """The loop and its gradients w.r.t. ``x`` and ``w``: ``n`` steps fed (``steps`` None) or a
    constant count, under ``budget`` (None: store everything), with ``maximum_iterations=bound``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        n = tn.placeholder(tn.int32, [], name="n") if steps is None else tn.constant(steps)
        w = tn.placeholder(tn.float32, [4], name="w")
        _, y = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tn.tanh(v) * w), [tn.constant(0), x],
                             name="rnn", memory_budget=budget, maximum_iterations=bound)
        gx, gw = tn.gradients(tn.reduce_sum(y * y), [x, w])
    return {"g": g, "x": x, "n": n, "w": w, "grads": [gx, gw], "fed": steps is None}


def feed(m: dict[str, Any], n: int) -> dict[Any, Any]:
    return {m["x"]: X0, m["w"]: W0, **({m["n"]: n} if m["fed"] else {})}


_STORED: dict[int, list[np.ndarray]] = {}


def stored(n: int) -> list[np.ndarray]:
    """The store-everything gradients after ``n`` steps, on the reference interpreter."""
    if n not in _STORED:
        m = model(None)
        _STORED[n] = list(tn.Session(m["g"]).run(m["grads"], feed(m, n)))
    return _STORED[n]


def check(got: list[Any], n: int) -> None:
    for a, b in zip(got, stored(n), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def slots_of(sess: tn.Session) -> int:
    return int(sess.last_result.stats["checkpoint_slots"]["rnn"])


def test_the_primitives_are_the_budgets_count_and_the_trip_count_on_the_interpreters() -> None:
    m = model(64 * STATE)
    (slots,) = [nd for nd in m["g"].nodes if nd.op == "CheckpointSlots"]
    (trips,) = [nd for nd in m["g"].nodes if nd.op == "CheckpointTrips"]
    attrs = {"slots": 64, "loop": "rnn", "state_bytes": STATE, "memory_budget": 64 * STATE}
    assert slots.attrs == attrs and trips.attrs == attrs
    for backend in ("reference", "smallstep"):
        got = tn.Session(m["g"], backend=backend).run([slots.outputs[0], trips.outputs[0]], feed(m, 7))
        assert [int(v) for v in got] == [64, 7]


@pytest.mark.parametrize("devices", [None, ["cpu:0", "cpu:1"]], ids=["one device", "partitioned"])
def test_the_reference_interpreter_sizes_the_slots_by_the_rule_of_the_compiled_backends(
        devices: Optional[list[str]]) -> None:
    """Law: on the reference interpreter, one device or partitioned, a plan's first run gives a loop
    ``FIRST_CAPACITY`` slots of the 1000 its budget holds, and each later run the smallest power of
    two holding the most any earlier run needed (its trip count), never fewer; the slots it gives are
    what its accounting counts (``saved_bytes``), and the gradients are the store-everything ones
    whatever the count. Why: the buffers are allocated and zero-filled whole at every run, so a budget
    that holds far more states than the runs take made every run of the interpreter pay for them all."""
    m = model(1000 * STATE)
    sess = tn.Session(m["g"], backend="reference", **({"devices": devices} if devices else {}))
    for n, want in ((70, FIRST_CAPACITY), (70, 128), (10, 128), (130, 128), (5, 256)):
        check(sess.run(m["grads"], feed(m, n)), n)
        assert slots_of(sess) == want, (n, sess.last_result.stats)
        assert sess.last_result.stats["saved_bytes"] == {"rnn": want * STATE}


def test_the_small_step_system_gives_every_slot_the_budget_holds() -> None:
    """The small-step system, which specifies, sizes nothing: its runs keep every slot the budget
    holds (100 here), however few the loop needed, and its gradients are the store-everything ones."""
    m = model(100 * STATE)
    (slots,) = [nd.outputs[0] for nd in m["g"].nodes if nd.op == "CheckpointSlots"]
    got = tn.Session(m["g"], backend="smallstep").run([*m["grads"], slots], feed(m, 3))
    check(got[:2], 3)
    assert int(got[2]) == 100


def test_a_run_gets_at_most_the_stack_capacity_and_the_next_run_what_it_needed() -> None:
    """A budget of 64 slots with ``stack_chunk=8``: the first runs get 8 slots; a run of 30 steps thins
    them (values unchanged) and teaches 32, which the next run gets (compiled once); one of 100 steps
    teaches the whole budget, after which nothing is learnt and repeated runs take a lane."""
    m = model(64 * STATE)
    sess = tn.Session(m["g"], backend="fast", stack_chunk=8)
    for n, want in ((5, 8), (30, 8), (30, 32), (20, 32), (100, 32), (100, 64), (3, 64)):
        check(sess.run(m["grads"], feed(m, n)), n)
        assert slots_of(sess) == want, (n, want)
    for _ in range(3):
        check(sess.run(m["grads"], feed(m, 3)), 3)
    assert sess.last_result.stats["route"] in ("hot", "lane")


def test_a_plan_that_may_still_learn_takes_no_lane() -> None:
    """A lane repeats one plan: a run through it that needed more slots would teach nothing. So a plan
    that gives a loop fewer slots than its budget holds runs on the general path every time."""
    m = model(64 * STATE)
    sess = tn.Session(m["g"], backend="fast", stack_chunk=8)
    for _ in range(4):
        check(sess.run(m["grads"], feed(m, 4)), 4)
        assert sess.last_result.stats["route"] == "general" and slots_of(sess) == 8
    check(sess.run(m["grads"], feed(m, 12)), 12)
    check(sess.run(m["grads"], feed(m, 4)), 4)
    assert slots_of(sess) == 16


def test_a_trip_count_known_while_tracing_is_learnt_by_the_trace() -> None:
    """A loop of a constant 40 steps: its backward loop's ``CheckpointTrips`` is a constant of the
    trace, which learns from it at once (no host callback); the run after the first gets 64."""
    m = model(100 * STATE, steps=40)
    sess = tn.Session(m["g"], backend="fast", stack_chunk=4)
    check(sess.run(m["grads"], feed(m, 40)), 40)
    assert slots_of(sess) == 4
    check(sess.run(m["grads"], feed(m, 40)), 40)
    assert slots_of(sess) == 64


def test_a_bounded_loop_keeps_its_bound_below_what_was_learnt() -> None:
    """``maximum_iterations`` still bounds the count: ``min(slots given, max(1, bound))``."""
    m = model(64 * STATE, bound=10)
    sess = tn.Session(m["g"], backend="fast", stack_chunk=4)
    (count,) = [nd.outputs[0] for nd in m["g"].nodes if nd.op == "Minimum" and "checkpoints" in nd.name]
    for n, want in ((3, 4), (12, 4), (12, 10)):
        got = sess.run([*m["grads"], count], feed(m, n))
        check(got[:2], min(n, 10))
        assert int(got[2]) == want, (n, want)


def test_explain_says_how_many_slots_and_why() -> None:
    m = model(64 * STATE)
    sess = tn.Session(m["g"], backend="fast", stack_chunk=8)
    notes = " ".join(sess.explain(m["grads"], feed(m, 5)).notes)
    assert "keeps at most 8 checkpoint slots of the 64 its memory_budget holds (the plan's stack capacity" in notes
    sess.run(m["grads"], feed(m, 20))
    notes = " ".join(sess.explain(m["grads"], feed(m, 5)).notes)
    assert "at most 32 checkpoint slots of the 64" in notes and "learnt from an earlier run" in notes


@pytest.mark.parametrize("whole_program, tier", [("always", "spmd"), ("never", "host-driven")])
def test_the_partitioned_tiers_size_the_slots_as_the_one_device_backend(whole_program: str, tier: str) -> None:
    """The partitioned fast executor's tiers (the SPMD program, the per-device segments) size the
    slots by the one rule (``turnout.slot_sizes``): at most the plan's stack capacity (``stack_chunk=4``
    for the per-device tiers; the SPMD program's own, 64 at first), until a run needed more, then the
    smallest power of two that holds what it needed. The gradients are the store-everything ones at
    every count."""
    m = model(200 * STATE)
    (slots,) = [nd.outputs[0] for nd in m["g"].nodes if nd.op == "CheckpointSlots"]
    spread = {nd.name: f"cpu:{k % 2}" for k, nd in enumerate(m["g"].nodes)}
    sess = tn.Session(m["g"], backend="fast", devices=["cpu:0", "cpu:1"], requests=spread, stack_chunk=4,
                      whole_program=whole_program, fallback=False)
    first = 64 if tier == "spmd" else 4
    learnt = 1 << (first + 4).bit_length()  # (the smallest power of two holding the first + 5 slots needed)
    long = 150 if tier == "spmd" else 40  # (past what was learnt; the host drives each iteration of the other)
    after = min(200, 1 << (long - 1).bit_length())  # (what the long run needed, as a power of two, within the budget)
    for n, want in ((3, first), (first + 5, first), (6, learnt), (long, learnt), (5, after)):
        notes = " ".join(sess.explain([*m["grads"], slots], feed(m, n)).notes)  # (what the run will give)
        assert f"keeps at most {want} checkpoint slots of the 200" in notes, notes
        got = sess.run([*m["grads"], slots], feed(m, n))
        check(got[:2], n)
        stats = sess.last_result.stats
        assert stats["tier"] == tier and int(got[2]) == want == stats["checkpoint_slots"]["rnn"], (n, stats)
        assert stats["checkpoint_bytes"] == {"rnn": want * STATE}  # (the slots given, not the budget's)


def test_a_run_budget_below_what_a_loop_holds_is_refused_on_every_fast_route() -> None:
    """The checkpoint slots a recomputed loop holds count against a run's ``memory_budget`` on the
    one-device backend and on the partitioned tiers alike (there, on the device that holds them, and
    named): 96 bytes of slots (4 of 24) pass a budget of 500 and are refused under one of 50, as
    ``ResourceExhaustedError``, never run past the budget; so are the stacks of the same loop when it
    stores every iteration (50 iterations under 200 bytes)."""
    m = model(200 * STATE)
    spread = {nd.name: f"cpu:{k % 2}" for k, nd in enumerate(m["g"].nodes)}
    routes = {"fast": {}, "per-device tiers": {"devices": ["cpu:0", "cpu:1"], "requests": spread,
                                               "whole_program": "never"}}
    for route, kw in routes.items():
        sess = tn.Session(m["g"], backend="fast", stack_chunk=4, fallback=False, **kw)
        check(sess.run(m["grads"], feed(m, 3), memory_budget=500), 3)
        with pytest.raises(tn.ResourceExhaustedError, match='checkpoints of loop "rnn"') as err:
            sess.run(m["grads"], feed(m, 3), memory_budget=50)
        assert ("(device cpu:" in str(err.value)) == (route != "fast"), route
        # and the same loop storing everything: its stacks (20 bytes an iteration) under the run's budget
        kept = model(None)
        kept["g"].gradient_calls.clear()  # (the stacks' own stop: no record of the gradient call to rebuild)
        sess = tn.Session(kept["g"], backend="fast", stack_chunk=4, fallback=False, **kw)
        check(sess.run(kept["grads"], feed(kept, 50), memory_budget=10**6), 50)
        with pytest.raises(tn.ResourceExhaustedError, match='saved values of loop "rnn"'):
            sess.run(kept["grads"], feed(kept, 50), memory_budget=200)


def test_a_slot_plan_counts_each_loops_slots_on_its_own_device() -> None:
    """``SlotPlan.bytes_by_device``: each device holds the slots of the loops whose ``CheckpointSlots``
    it runs, as many as the plan gives them (``capacity``), not every loop's nor every slot the budgets
    hold."""
    from turnout.slot_sizes import SlotPlan

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        _, a = tn.while_loop(lambda i, v: i < 5, lambda i, v: (i + 1, tn.tanh(v)), [tn.constant(0), x], name="a",
                             memory_budget=40 * STATE)
        _, b = tn.while_loop(lambda i, v: i < 5, lambda i, v: (i + 1, tn.tanh(v)), [tn.constant(0), a], name="b",
                             memory_budget=7 * STATE)
        tn.gradients(tn.reduce_sum(b), [x])
    na, nb = sorted((nd for nd in g.nodes if nd.op == "CheckpointSlots"), key=lambda nd: nd.attrs["loop"])
    plan = SlotPlan((na, nb), capacity=16)
    assert plan.counts == {"a": 16, "b": 7} and plan.bytes() == {"a": 16 * STATE, "b": 7 * STATE}
    assert plan.bytes_by_device({na.id: "cpu:0", nb.id: "cpu:1"}) == {"cpu:0": {"a": 16 * STATE},
                                                                       "cpu:1": {"b": 7 * STATE}}
    assert SlotPlan((na, nb)).bytes() == {"a": 40 * STATE, "b": 7 * STATE} and not SlotPlan((na, nb)).learns
    assert plan.learns and plan.stats == {"checkpoint_slots": plan.counts, "checkpoint_bytes": plan.bytes()}


def test_one_device_through_the_partitioned_backend_sizes_them_too() -> None:
    """A graph placed on one device runs as the one-device backend, which sizes them (``stack_chunk=4``)."""
    m = model(6 * STATE)
    (slots,) = [nd.outputs[0] for nd in m["g"].nodes if nd.op == "CheckpointSlots"]
    sess = tn.Session(m["g"], backend="fast", devices=["cpu:0"], stack_chunk=4, fallback=False)
    got = sess.run([*m["grads"], slots], feed(m, 9))
    check(got[:2], 9)
    assert int(got[2]) == 4


@pytest.mark.parametrize("chunk", [1, 2, 3, 5])
def test_the_fewest_slots_a_backend_gives(chunk: int) -> None:
    """However small the stack capacity, a loop gets at least three slots (two where its budget holds
    two, one where one: ``checkpoints.fewest_slots``), and thins in them to the same gradients."""
    for budget_slots in (1, 2, 3, 7):
        m = model(budget_slots * STATE)
        sess = tn.Session(m["g"], backend="fast", stack_chunk=chunk)
        for n in (0, 1, 6, 17):
            check(sess.run(m["grads"], feed(m, n)), n)
        assert slots_of(sess) <= budget_slots


# an eighth of the loaded profile's budget (6 in the default run): each example runs several sessions
@settings(max_examples=max(1, settings.default.max_examples // 8), deadline=None)
@given(runs=st.lists(st.integers(0, 45), min_size=1, max_size=5), budget_slots=st.integers(1, 40),
       chunk=st.sampled_from([1, 3, 4, 8, 16, 1024]), bounded=st.booleans())
def test_any_runs_under_any_budget_and_capacity(runs: list[int], budget_slots: int, chunk: int, bounded: bool) -> None:
    """Runs of any trip counts, one after another on one session (each may teach the next a larger
    count), give the store-everything gradients; the count given is never more than the budget's."""
    m = model(budget_slots * STATE, bound=30 if bounded else None)
    sess = tn.Session(m["g"], backend="fast", stack_chunk=chunk)
    for n in runs:
        check(sess.run(m["grads"], feed(m, n)), min(n, 30) if bounded else n)
        assert slots_of(sess) <= budget_slots


GOOD = {"slots": 3, "loop": "l", "state_bytes": 8, "memory_budget": 24}


def test_the_primitives_shape_rules_refuse_bad_arguments() -> None:
    g = tn.Graph()
    with g.as_default():
        for attr, top in (("slots", 2**31), ("state_bytes", 2**63), ("memory_budget", 2**63)):
            for bad in (0, -3, 2.5, True, None, top, "7"):
                with pytest.raises(GraphBuildError, match=f"CheckpointSlots: attr {attr} must be a positive int"):
                    g.create_node("CheckpointSlots", [], {**GOOD, attr: bad})
        for op, ins in (("CheckpointSlots", []), ("CheckpointTrips", [tn.constant(1)])):
            with pytest.raises(GraphBuildError, match=f"{op}: attr loop must be the loop's name"):
                g.create_node(op, ins, {k: v for k, v in GOOD.items() if k != "loop"})
            g.create_node(op, ins, GOOD)  # (the good ones are taken)
        with pytest.raises(DTypeError, match="CheckpointTrips: the trip count must be int32"):
            g.create_node("CheckpointTrips", [tn.constant(1.0)], GOOD)
        with pytest.raises(tn.ShapeError, match="must be a scalar"):
            g.create_node("CheckpointTrips", [tn.constant([1, 2])], GOOD)


def test_a_budgeted_loop_survives_saving_and_exporting() -> None:
    """Saved (``tn.save``), the graph gives the same gradients, its slots sized as before; exported to
    a TensorFlow GraphDef, the count is the budget's constant and the trip count an ``Identity``, and
    imported back it gives the same gradients on the reference interpreter."""
    import os
    import tempfile

    from turnout.graphdef import export_graph_def, import_graph_def

    m = model(8 * STATE)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "g.json")
        tn.save(m["g"], path)
        g2 = tn.load(path)
    x, n, w = (g2.tensor(t.name) for t in (m["x"], m["n"], m["w"]))
    sess = tn.Session(g2, backend="fast", stack_chunk=4)
    check(sess.run([g2.tensor(t.name) for t in m["grads"]], {x: X0, n: 11, w: W0}), 11)
    assert slots_of(sess) == 4
    ex = export_graph_def(m["g"])
    ops = {nd.op for nd in ex.graph_def.node}
    assert not ops & {"CheckpointSlots", "CheckpointTrips"}
    imp = import_graph_def(ex.graph_def)
    back = {imp.tensor(ex.tf_name(t)): v for t, v in feed(m, 11).items()}
    check(tn.Session(imp.graph).run([imp.tensor(ex.tf_name(t)) for t in m["grads"]], back), 11)


def test_the_largest_need_of_the_runs_decides_a_power_of_two() -> None:
    """``SlotSizes``: what the runs reported (a loop inside another reports once per outer iteration,
    any order) becomes the smallest power of two holding the largest; ``take`` names the programs whose
    capacity grew, and a need the capacity holds already grows nothing."""
    from turnout.slot_sizes import SlotSizes

    s = SlotSizes()
    learn, other = s.learner("p"), s.learner("q")
    learn(20)
    learn(np.int32(9))
    other(32)
    assert s.take() == {"p", "q"} and s.learnt == {"p": 32, "q": 32} and not s.needs
    learn(17)
    other(33)
    assert s.take() == {"q"} and s.learnt == {"p": 32, "q": 64}
    learn(2)
    assert s.take() == set() and s.capacity("p") == 32 and s.capacity("r") is None
    s.learner("r")(1)
    assert s.take() == {"r"} and s.learnt["r"] == 1


def test_the_notes_say_why_only_where_a_loop_gets_fewer_than_its_budget_holds() -> None:
    from turnout.slot_sizes import slot_notes

    assert slot_notes({"rnn": 64, "inner": 6}, {"rnn": 8, "inner": 6}, None) == (
        "loop 'rnn' keeps at most 8 checkpoint slots of the 64 its memory_budget holds (the plan's stack "
        "capacity; a longer run teaches more)",
        "loop 'inner' keeps at most 6 checkpoint slots of the 6 its memory_budget holds")
    assert slot_notes({"rnn": 64}, {"rnn": 32}, 32) == (
        "loop 'rnn' keeps at most 32 checkpoint slots of the 64 its memory_budget holds (learnt from an "
        "earlier run's trip count; a longer run teaches more)",)
