"""A gradient's memory budget (``tn.gradients(..., memory_budget=B)``, ``Optimizer.minimize``).

The loops a gradient reverses share ``B`` (``memory_plan.shares``, ``gradients.budgets``), each
reversed as a loop with its share as a budget of its own: by recomputation from checkpoints where
its state has a static size, else with stacks checked against the share. The gradients are the
store-everything ones on every backend, each backend's own accounting of what a loop holds stays
within its share, and a run under the same budget goes on at trip counts where the store-everything
gradient stops with ``ResourceExhaustedError``.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import numpy as np
import pytest
from example_counts import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from route_table import SLOW_RUN

import turnout as tn
from turnout import memory_plan
from turnout.errors import ArgumentError, ResourceExhaustedError, UnsupportedError

X0 = np.array([0.1, -0.4, 0.7, 1.2], np.float32)
H0 = np.linspace(-1.0, 1.0, 16).astype(np.float32)
A_STATE, B_STATE = 24, 72  # bytes per checkpoint: int32 counter, the floats, the int32 position


def two_loops(budget: Optional[int], own: Optional[int] = None, nested: bool = False,
              inner_own: Optional[int] = None) -> dict[str, Any]:
    """Loop ``a`` over four floats (``own``: its own budget; ``nested``: an inner loop in its body,
    ``inner_own`` its own budget), loop ``b`` over sixteen, both ``n`` steps; the gradient w.r.t. both
    inputs under ``budget``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        h = tn.placeholder(tn.float32, [16], name="h")
        n = tn.placeholder(tn.int32, [], name="n")

        def body_a(i: Any, v: Any) -> Any:
            if nested:  # (the inner loop's state, 28 bytes with its position, is not "a"'s 24)
                _, v, _ = tn.while_loop(lambda j, u, s: j < 2, lambda j, u, s: (j + 1, tn.tanh(u) * 1.1, s + 1.0),
                                        [tn.constant(0), v, tn.constant(0.0)], name="inner",
                                        memory_budget=inner_own)
                return i + 1, v
            return i + 1, tn.tanh(v) * 1.1

        _, y = tn.while_loop(lambda i, v: i < n, body_a, [tn.constant(0), x], name="a", memory_budget=own)
        _, z = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tn.sin(v) * 0.9), [tn.constant(0), h],
                             name="b")
        grads = tn.gradients(tn.reduce_sum(y * y) + tn.reduce_sum(z), [x, h], memory_budget=budget)
    return {"g": g, "feeds": lambda k: {x: X0, h: H0, n: k}, "grads": grads}


def slots(g: tn.Graph) -> dict[str, dict[str, Any]]:
    return {nd.attrs["loop"]: nd.attrs for nd in g.nodes if nd.op == "CheckpointSlots"}


def session(m: dict[str, Any], backend: str) -> tn.Session:
    if backend.startswith("fast ") and backend != "fast":  # round robin over two devices: the loops span both
        req = {nd.name: f"cpu:{k % 2}" for k, nd in enumerate(m["g"].nodes)}
        whole = "always" if backend == "fast spmd" else "never"
        return tn.Session(m["g"], backend="fast", devices=["cpu:0", "cpu:1"], requests=req, whole_program=whole)
    kw = {"devices": ["cpu:0", "cpu:1"]} if backend == "partitioned" else {}
    return tn.Session(m["g"], backend=backend, **kw)


def held(sess: tn.Session) -> dict[str, int]:
    stats = sess.last_result.stats
    return dict(stats["checkpoint_bytes"] if "checkpoint_bytes" in stats else stats["saved_bytes"])


def test_the_loops_share_the_budget_in_proportion_to_their_state() -> None:
    m = two_loops(2000)
    got = slots(m["g"])
    assert {k: a["memory_budget"] for k, a in got.items()} == {"a": 500, "b": 1500}
    assert {k: a["slots"] for k, a in got.items()} == {"a": 500 // A_STATE, "b": 1500 // B_STATE}
    assert not [nd for nd in m["g"].nodes if nd.op == "StackNew"]  # both recompute: no stacks at all
    lines = str(tn.memory_report(m["g"]))
    share = "(its share of the gradient's)"
    assert f'loop "a": recompute; budget 500 B {share}' in lines
    assert f'loop "b": recompute; budget 1500 B {share}' in lines
    assert {a.get("budget_from") for a in got.values()} == {"gradient"}


def test_a_loop_whose_own_budget_is_kept_is_reported_as_its_own() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        _, v = tn.while_loop(lambda i, v: i < 9, lambda i, v: (i + 1, tn.tanh(v)), [tn.constant(0), x], name="own",
                             memory_budget=200)
        _, w = tn.while_loop(lambda i, v: i < 9, lambda i, v: (i + 1, tn.sin(v)), [tn.constant(0), v], name="shared")
        tn.gradients(tn.reduce_sum(w), [x], memory_budget=1000)
    lines = str(tn.memory_report(g))
    assert 'loop "own": recompute; budget 200 B (loop)' in lines
    assert 'loop "shared": recompute; budget 800 B (its share of the gradient\'s)' in lines


@pytest.mark.parametrize("backend", ["reference", "partitioned", "fast", "fast partitioned", "fast spmd", "smallstep"])
def test_every_backend_gives_the_store_everything_gradients_within_the_shares(backend: str) -> None:
    if backend.startswith("fast"):
        pytest.importorskip("jax")
    want_m = two_loops(None)
    ref = tn.Session(want_m["g"])
    m = two_loops(2000)
    sess = session(m, backend)
    # (the tiers of several devices pay a host dispatch per step: a shorter longest run, past 20 slots)
    for n in (0, 1, 3) if backend == "smallstep" else (0, 1, 7, 25) if backend.startswith("fast ") else (0, 1, 7, 60):
        want = ref.run(want_m["grads"], want_m["feeds"](n))
        got = sess.run(m["grads"], m["feeds"](n), memory_budget=2000)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
        mine = held(sess)
        assert mine["a"] <= 500 and mine["b"] <= 1500
        if backend in ("fast partitioned", "fast spmd"):  # (the SPMD program too, under the run's budget)
            assert sess.last_result.stats["tier"] == ("spmd" if backend == "fast spmd" else "host-driven")


def test_a_run_under_the_same_budget_goes_where_stacks_stop() -> None:
    """The point of a gradient's budget: the store-everything gradient under a run's budget of 2000
    bytes keeps stacks and stops once they outgrow it (where the graph keeps no record of the call:
    with one, the run is repeated on the call rebuilt under the run's budget); built under that
    budget, the run goes on from its first step."""
    kept = two_loops(None)
    sess = tn.Session(kept["g"])
    sess.run(kept["grads"], kept["feeds"](60), memory_budget=2000)
    assert sess.last_result.stats["rebuilt_gradients"]
    kept = two_loops(None)
    kept["g"].gradient_calls.clear()
    with pytest.raises(ResourceExhaustedError):
        tn.Session(kept["g"]).run(kept["grads"], kept["feeds"](60), memory_budget=2000)
    m = two_loops(2000)
    for backend in ("reference", "fast"):
        sess = tn.Session(m["g"], backend=backend)
        sess.run(m["grads"], m["feeds"](150), memory_budget=2000)
        assert "rebuilt_gradients" not in sess.last_result.stats


def test_a_loop_keeps_its_own_budget_and_the_others_share_what_is_left() -> None:
    assert {k: a["memory_budget"] for k, a in slots(two_loops(2000, own=300)["g"]).items()} == {"a": 300, "b": 1700}
    # own budgets over the gradient's: scaled into it, nothing left for the others
    with pytest.raises(UnsupportedError, match='leaves while_loop "b" none of it'):
        two_loops(200, own=300)


def test_an_inner_loop_is_reversed_within_its_outer_loops_share() -> None:
    want_m = two_loops(None, nested=True)
    m = two_loops(2000, nested=True)
    # the inner loop shares the budget too; made again in the reversed step of "a", it recomputes there
    shares = {k: a["memory_budget"] for k, a in slots(m["g"]).items()}
    total = A_STATE + B_STATE + 28
    assert shares == {"a": 2000 * A_STATE // total, "b": 2000 * B_STATE // total,
                      "gradients/a/body/inner": 2000 * 28 // total}
    for n in (0, 2, 9):
        want = tn.Session(want_m["g"]).run(want_m["grads"], want_m["feeds"](n))
        got = tn.Session(m["g"]).run(m["grads"], m["feeds"](n))
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def _reading_loop(budget: int, swap: bool = False) -> dict[str, Any]:
    """A loop whose state has no static size (a TensorArray its body reads), or that asks to swap:
    it keeps stacks, checked against its share."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        if swap:
            _, y = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tn.tanh(v)), [tn.constant(0), x],
                                 name="kept", swap_memory=True)
            loss = tn.reduce_sum(y)
        else:
            ta = tn.TensorArray(tn.float32, size=0, dynamic_size=True)

            def body(i: Any, v: Any, t: Any) -> Any:
                return i + 1, tn.tanh(v), t.write(i, v * tn.cast(t.size(), tn.float32))

            _, y, t = tn.while_loop(lambda i, v, t: i < n, body, [tn.constant(0), x, ta], name="kept")
            loss = tn.reduce_sum(y) + tn.reduce_sum(t.stack())
        (gx,) = tn.gradients(loss, [x], memory_budget=budget)
    return {"g": g, "gx": gx, "x": x, "n": n}


@pytest.mark.parametrize("swap", [False, True])
def test_a_loop_that_keeps_stacks_is_checked_against_its_share(swap: bool) -> None:
    m = _reading_loop(1000, swap)
    assert {(nd.attrs["memory_budget"], nd.attrs["budget_from"]) for nd in m["g"].nodes
            if nd.op == "StackNew"} == {(1000, "gradient")}
    assert not slots(m["g"])
    assert "budget 1000 B (its share of the gradient's)" in str(tn.memory_report(m["g"]))
    sess = tn.Session(m["g"])
    sess.run(m["gx"], {m["x"]: X0, m["n"]: 3})
    with pytest.raises(ResourceExhaustedError, match="kept.*over its share of the gradient's memory_budget of 1000"):
        sess.run(m["gx"], {m["x"]: X0, m["n"]: 200})


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "1000"])
def test_a_budget_that_is_not_a_positive_int_is_refused(bad: Any) -> None:
    with pytest.raises(ArgumentError, match="memory_budget"):
        two_loops(bad)


def test_a_share_that_holds_no_state_names_the_loop_and_the_share() -> None:
    with pytest.raises(UnsupportedError, match='"b" has a share of 30 bytes of the gradient.s memory_budget=40.*'
                                               f"holds no loop state.*give the gradient at least {A_STATE + B_STATE}"):
        two_loops(40)
    two_loops(A_STATE + B_STATE)


def test_a_second_gradient_recomputes_from_the_slots_the_first_made() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        _, y = tn.while_loop(lambda i, v: i < 9, lambda i, v: (i + 1, tn.tanh(v)), [tn.constant(0), x], name="r")
        (g1,) = tn.gradients(tn.reduce_sum(y), [x], memory_budget=4 * A_STATE)
        (g2,) = tn.gradients(tn.reduce_sum(y * y), [x], memory_budget=10 * A_STATE)  # holds the 4: reuses them
        assert [a["slots"] for a in slots(g).values()] == [4]
        with pytest.raises(UnsupportedError, match='"r".*earlier gradient gave its forward loop 4 checkpoint.*'
                                                   f"at least {4 * A_STATE} bytes"):
            tn.gradients(tn.reduce_sum(tn.sin(y)), [x], memory_budget=2 * A_STATE)
        (k1,) = tn.gradients(tn.reduce_sum(y), [x])
        (k2,) = tn.gradients(tn.reduce_sum(y * y), [x])
    sess = tn.Session(g)
    got, want = sess.run([g1, g2], {x: X0}), sess.run([k1, k2], {x: X0})
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5)


def test_minimize_under_a_budget_trains_as_without() -> None:
    pytest.importorskip("jax")

    def step(budget: Optional[int]) -> list[float]:
        g = tn.Graph()
        with g.as_default():
            w = tn.Variable(np.full(4, 0.5, np.float32), name="w")
            _, y = tn.while_loop(lambda i, v: i < 30, lambda i, v: (i + 1, tn.tanh(v * w.read())),
                                 [tn.constant(0), tn.constant(X0)], name="rnn")
            loss = tn.reduce_sum(y * y)
            train = tn.train.SGD(0.1).minimize(loss, memory_budget=budget)
            assert bool(slots(g)) == (budget is not None)
        sess = tn.Session(g, backend="fast")
        return [float(sess.run([loss, train])[0]) for _ in range(3)]

    np.testing.assert_allclose(step(6 * A_STATE), step(None), rtol=1e-5)


@given(weights=st.dictionaries(st.sampled_from("abcdef"), st.one_of(st.none(), st.integers(1, 10**4)), min_size=1),
       own=st.dictionaries(st.sampled_from("abcdef"), st.integers(1, 10**4)), budget=st.integers(1, 10**5))
def test_the_shares_never_sum_past_the_budget(weights: dict[str, Optional[int]], own: dict[str, int],
                                              budget: int) -> None:
    own = {k: v for k, v in own.items() if k in weights}
    got = memory_plan.shares(weights, own, budget)
    assert set(got) == set(weights) and sum(got.values()) <= budget and min(got.values()) >= 0
    if sum(own.values()) <= budget:
        assert all(got[k] == v for k, v in own.items())
    rest = [k for k in weights if k not in own and weights[k] is not None]
    for p in rest:  # the larger state, the larger share
        for q in rest:
            if weights[p] > weights[q]:  # type: ignore[operator]
                assert got[p] >= got[q]


_WANT: dict[bool, dict[str, Any]] = {}


@settings(max_examples=examples(12))
@given(n=st.integers(0, 25), extra=st.integers(0, 30 * (A_STATE + B_STATE)), nested=st.booleans())
def test_any_trip_count_under_any_gradient_budget(n: int, extra: int, nested: bool) -> None:
    """Any budget that holds a state of each loop (the inner loop's too, where there is one): the
    store-everything gradients, each loop within its share, and a run under the same budget."""
    budget = A_STATE + B_STATE + (28 if nested else 0) + extra
    if nested not in _WANT:
        _WANT[nested] = two_loops(None, nested=nested)
    want_m = _WANT[nested]
    m = two_loops(budget, nested=nested)
    shares = {k: a["memory_budget"] for k, a in slots(m["g"]).items()}
    assert sum(shares.values()) <= budget
    sess = tn.Session(m["g"])
    got = sess.run(m["grads"], m["feeds"](n), memory_budget=budget, max_seconds=SLOW_RUN)
    want = tn.Session(want_m["g"]).run(want_m["grads"], want_m["feeds"](n), max_seconds=SLOW_RUN)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    assert all(held(sess)[k] <= shares[k] for k in ("a", "b"))


def test_a_loop_inside_one_that_keeps_stacks_is_checked_against_its_own_share() -> None:
    """The outer loop reads a TensorArray (no static size): it keeps stacks; the inner one, reversed
    by the same gradient within each step, recomputes under its own share, and the slots of each of
    its runs are among the values the outer loop's stacks save, checked against the outer share; the
    inner loop's ``maximum_iterations``, a constant of the outer body, bounds its slots
    (``checkpoints.static_able`` follows data edges only)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        ta = tn.TensorArray(tn.float32, size=0, dynamic_size=True)

        def body(i: Any, v: Any, t: Any) -> Any:
            _, u = tn.while_loop(lambda j, u: j < 3, lambda j, u: (j + 1, tn.tanh(u)), [tn.constant(0), v],
                                 name="inner", maximum_iterations=3)
            return i + 1, u, t.write(i, v * tn.cast(t.size(), tn.float32))

        _, y, t = tn.while_loop(lambda i, v, t: i < n, body, [tn.constant(0), x, ta], name="outer")
        (gx,) = tn.gradients(tn.reduce_sum(y) + tn.reduce_sum(t.stack()), [x], memory_budget=40_000)
    kept = {nd.attrs["loop_name"]: nd.attrs["memory_budget"] for nd in g.nodes if nd.op == "StackNew"}
    made = {k: a["memory_budget"] for k, a in slots(g).items()}  # the inner loop's state is static: it recomputes
    assert set(kept) == {"outer"} and set(made) == {"outer/body/inner"}
    assert sum([*kept.values(), *made.values()]) <= 40_000
    with g.as_default():
        (plain,) = tn.gradients(tn.reduce_sum(y) + tn.reduce_sum(t.stack()), [x])
    sess = tn.Session(g)
    want = sess.run(plain, {x: X0, n: 2})
    np.testing.assert_allclose(sess.run(gx, {x: X0, n: 2}), want, rtol=2e-5)
    # the inner loop's bound, a constant in the outer body, sizes its slots: three, not the share's 833,
    # so what the outer loop's stacks save of them each step is three states
    assert sess.last_result.stats["saved_bytes"]["outer"] < 2 * (16 * 3 + 400)
    with pytest.raises(ResourceExhaustedError, match="inner|outer"):
        sess.run(gx, {x: X0, n: 300})


def test_a_graph_built_under_a_gradient_budget_is_saved_with_its_shares() -> None:
    """The shares live in the graph (the slots' ``CheckpointSlots`` attrs, a stack's
    ``memory_budget``), so a graph saved and loaded runs the same plan and reports it."""
    m = two_loops(2000)
    back = tn.loads(tn.dumps(m["g"]))
    assert slots(back) == slots(m["g"])
    assert str(tn.memory_report(back)) == str(tn.memory_report(m["g"]))
    names = [t.name for t in m["grads"]]
    feeds = {back.tensor(t.name): v for t, v in m["feeds"](9).items()}
    got = tn.Session(back).run([back.tensor(nm) for nm in names], feeds, memory_budget=2000)
    for a, b in zip(got, tn.Session(m["g"]).run(m["grads"], m["feeds"](9)), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("op", ["CheckpointSlots", "StackNew"])
def test_a_file_that_says_a_budget_is_nobodys_is_refused(op: str) -> None:
    m = two_loops(2000) if op == "CheckpointSlots" else _reading_loop(1000)
    doc = json.loads(tn.dumps(m["g"]))
    node = next(nd for nd in doc["nodes"] if nd["op"] == op)
    assert node["attrs"]["budget_from"] == "gradient"
    node["attrs"]["budget_from"] = "run"
    with pytest.raises(tn.SerializationError, match="budget_from must be 'loop' or 'gradient'"):
        tn.loads(json.dumps(doc))


def _one_loop(own: Optional[int], budget: int, back_prop_loop: bool = False) -> tn.Graph:
    """Loop "r" over four floats (``own``: its own budget); with ``back_prop_loop``, a loop with
    ``back_prop=False`` ("still") on the gradient's path too. The gradient under ``budget``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        if back_prop_loop:
            _, x2 = tn.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * 2.0), [tn.constant(0), x],
                                  back_prop=False, name="still")
            x2 = x2 + x
        else:
            x2 = x
        _, y = tn.while_loop(lambda i, v: i < 9, lambda i, v: (i + 1, tn.tanh(v)), [tn.constant(0), x2], name="r",
                             memory_budget=own)
        tn.gradients(tn.reduce_sum(y), [x], memory_budget=budget)
    return g


def test_an_own_budget_is_named_as_the_loops_and_a_scaled_one_as_a_share() -> None:
    with pytest.raises(UnsupportedError, match='"r" has memory_budget=10 bytes,.*give at least 24'):
        _one_loop(10, 2000)
    # its own budget over the gradient's: scaled into it, and then a share
    with pytest.raises(UnsupportedError, match='"r" has a share of 20 bytes of the gradient.s memory_budget=20'):
        _one_loop(300, 20)


def test_a_loop_that_is_not_differentiated_takes_no_share() -> None:
    """``back_prop=False``: a constant for gradients, so the budget is the other loop's whole."""
    assert slots(_one_loop(None, 2000, back_prop_loop=True))["r"]["memory_budget"] == 2000


def test_a_share_of_one_byte_is_a_share() -> None:
    """The rule refuses a share under one byte; a loop that keeps stacks with one byte stops at its
    first push, as any budget it outgrows."""
    m = _reading_loop(1)
    assert {nd.attrs["memory_budget"] for nd in m["g"].nodes if nd.op == "StackNew"} == {1}
    with pytest.raises(ResourceExhaustedError, match="kept"):
        tn.Session(m["g"]).run(m["gx"], {m["x"]: X0, m["n"]: 1})


def test_a_gradient_inside_a_loop_body_shares_its_budget_among_the_loops_inside() -> None:
    """Called inside a loop's body, a gradient reverses the loops inside that body (they get its
    budget); the loop around it is not reversed by it, and a loop outside that the gradient reaches
    (through a value the body captures) keeps its own budget (none: stacks)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        _, r = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tn.sin(v)), [tn.constant(0), x], name="before")

        def outer(j: Any, acc: Any) -> Any:
            _, h = tn.while_loop(lambda i, v: i < 4, lambda i, v: (i + 1, tn.tanh(v) * 1.1), [tn.constant(0), acc + r],
                                 name="inside")
            (dx,) = tn.gradients(tn.reduce_sum(h), [x], memory_budget=1000)
            return j + 1, acc + dx

        _, got = tn.while_loop(lambda j, acc: j < 2, outer, [tn.constant(0), tn.zeros([4])], name="around")
    assert {k: a["memory_budget"] for k, a in slots(g).items()} == {"around/body/inside": 1000}
    assert all("memory_budget" not in nd.attrs for nd in g.nodes if nd.op == "StackNew")
    want = tn.Session(g).run(got, {x: X0})
    assert np.all(np.isfinite(want))


def test_an_inner_loop_keeps_its_own_budget_in_each_reversed_step() -> None:
    """The inner loop's own budget is kept (it fits the gradient's) and is what the reversed step of
    "a" gives the loop it makes again; "a" and "b" share the rest."""
    m = two_loops(3000, nested=True, inner_own=200)
    shares = {k: a["memory_budget"] for k, a in slots(m["g"]).items()}
    assert shares == {"a": 2800 * A_STATE // 96, "b": 2800 * B_STATE // 96, "gradients/a/body/inner": 200}
    want_m = two_loops(None, nested=True)
    got = tn.Session(m["g"]).run(m["grads"], m["feeds"](5))
    for a, b in zip(got, tn.Session(want_m["g"]).run(want_m["grads"], want_m["feeds"](5)), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
