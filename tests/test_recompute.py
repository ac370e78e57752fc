"""Recomputation on the graph backends: the gradient of a loop under its own ``memory_budget``.

``tn.while_loop(..., memory_budget=B)`` without ``swap_memory=True`` is differentiated by a
checkpointed backward loop (``turnout.gradients.recompute``) that saves nothing in the forward loop
and keeps at most ``slots = B // (state bytes + 4)`` loop states. Recomputation changes where values
come from, not what they are: every case here compares the gradients with those of the same graph
built without a budget (the store-everything gradients), on every backend that runs graphs, and
counts the body's evaluations against ``checkpoint_schedule.cost``.

The model: ``v <- tanh(v) * w`` for ``n`` steps from ``x`` (4 float32s), ``w`` a weight vector read
from outside the loop (a loop invariant, whose gradient sums over iterations). Its state is the
counter ``i`` and ``v``: 20 bytes, 24 with the position, so a budget of ``24 k`` holds ``k`` slots.
Variants put a cond or a loop inside the body.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pytest
from example_counts import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from long_run import sweep
from route_table import SLOW_RUN

import turnout as tn
from turnout import checkpoint_schedule as schedule
from turnout.control_flow.contexts import WhileContext
from turnout.errors import UnsupportedError
from turnout.slot_sizes import FIRST_CAPACITY

X0 = np.array([0.1, -0.4, 0.7, 1.2], np.float32)
W0 = np.array([1.1, 0.9, -1.2, 1.05], np.float32)
STATE = 24  # bytes per slot: int32 counter, four float32s, the int32 position
KINDS = ["plain", "cond", "nested"]


def body_of(kind: str, w: Any) -> Any:
    def body(i: Any, v: Any) -> Any:
        if kind == "cond":
            v = tn.cond(tn.reduce_sum(v) > 0, lambda: tn.tanh(v) * w, lambda: v * w + 0.1)
        elif kind == "nested":
            _, v = tn.while_loop(lambda j, u: j < 2, lambda j, u: (j + 1, tn.tanh(u) * w + 0.05),
                                 [tn.constant(0), v], name="inner")
        else:
            v = tn.tanh(v) * w
        return i + 1, v

    return body


_MODELS: dict[Any, dict[str, Any]] = {}


def model(budget: Optional[int], kind: str = "plain") -> dict[str, Any]:
    """The graph with gradients w.r.t. ``x`` and ``w``, one per (budget, kind) for the module."""
    if (budget, kind) not in _MODELS:
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.float32, [4], name="x")
            n = tn.placeholder(tn.int32, [], name="n")
            w = tn.placeholder(tn.float32, [4], name="w")
            _, y = tn.while_loop(lambda i, v: i < n, body_of(kind, w), [tn.constant(0), x], name="rnn",
                                 memory_budget=budget)
            gx, gw = tn.gradients(tn.reduce_sum(y * y), [x, w])
        _MODELS[(budget, kind)] = {"g": g, "x": x, "n": n, "w": w, "grads": [gx, gw], "sessions": {}}
    return _MODELS[(budget, kind)]


def run(m: dict[str, Any], backend: str, n: int, **opts: Any) -> list[np.ndarray]:
    sessions = m["sessions"]
    if backend not in sessions:
        if backend == "fast partitioned":  # round robin over two devices: the loops span both
            req = {nd.name: f"cpu:{k % 2}" for k, nd in enumerate(m["g"].nodes)}
            sessions[backend] = tn.Session(m["g"], backend="fast", devices=["cpu:0", "cpu:1"], requests=req)
        else:
            kw = {"devices": ["cpu:0", "cpu:1"]} if backend == "partitioned" else {}
            sessions[backend] = tn.Session(m["g"], backend=backend, **kw)
    opts = {"max_seconds": SLOW_RUN, **opts}
    return list(sessions[backend].run(m["grads"], {m["x"]: X0, m["n"]: n, m["w"]: W0}, **opts))


def assert_same_gradients(kind: str, slots: int, backend: str, n: int) -> None:
    """The gradients under a budget of ``slots`` states are the store-everything ones, and the
    backend's own accounting of what the loop holds (``held``) is its slots, within the budget."""
    want = run(model(None, kind), "reference", n)
    m = model(slots * STATE, kind)
    got = run(m, backend, n)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    assert held(m["sessions"][backend])["rnn"] == slots * STATE


def held(sess: tn.Session) -> dict[str, int]:
    """Per loop, the bytes the last run held for its gradient, as the backend counts them: the
    interpreters' ``saved_bytes`` (the values pushed and the checkpoints' slots), the compiled
    backends' ``checkpoint_bytes`` (the slots their programs allocate)."""
    stats = sess.last_result.stats
    return dict(stats["checkpoint_bytes"] if "checkpoint_bytes" in stats else stats["saved_bytes"])


def live_tanh(sess: tn.Session) -> int:
    """Evaluations of the plain body (one Tanh each), from the reference interpreter's trace."""
    return sum(1 for e in sess.last_result.trace.events if e.op == "Tanh" and not e.dead)


# ---- equal to the store-everything gradients --------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("slots", [1, 2, 3])
@pytest.mark.parametrize("backend", ["reference", "partitioned"])
def test_the_interpreters_give_the_store_everything_gradients(backend: str, slots: int, kind: str) -> None:
    for n in (0, 1, 2, 7):
        assert_same_gradients(kind, slots, backend, n)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("slots", [1, 3])
def test_the_fast_backend_gives_the_store_everything_gradients(slots: int, kind: str) -> None:
    pytest.importorskip("jax")
    for n in (0, 1, 2, 9):
        assert_same_gradients(kind, slots, "fast", n)
    assert run(model(slots * STATE, kind), "fast", 9) is not None
    stats = model(slots * STATE, kind)["sessions"]["fast"].last_result.stats
    if kind != "nested":  # the recomputed loop saves nothing: no stack at all (the inner loop has its own)
        assert stats["peak_device_stack_bytes"] == 0


@pytest.mark.parametrize("kind", ["plain", "cond"])
def test_the_small_step_system_gives_the_store_everything_gradients(kind: str) -> None:
    for n in (0, 1, 3):
        assert_same_gradients(kind, 2, "smallstep", n)


def test_slots_beyond_the_trip_count_recompute_nothing() -> None:
    """With ``slots >= n`` the forward loop keeps every state, and the backward loop recomputes none:
    the body runs ``2 n`` times (forward, and once in each step's vector-Jacobian product)."""
    m = model(16 * STATE)
    for n in (0, 1, 2, 5, 11, 16):
        assert_same_gradients("plain", 16, "reference", n)
        run(m, "reference", n, trace=True)
        assert schedule.cost(n, 16).recomputed == 0
        assert live_tanh(m["sessions"]["reference"]) == 2 * n


def test_a_closed_form_case() -> None:
    """TensorFlow's test: squaring 2.0 until it reaches 100 takes three steps, ``x ** 8``, whose
    gradient at 2 is ``8 * 2 ** 7 = 1024``, under a budget of one slot (8 bytes)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        (y,) = tn.while_loop(lambda v: v < 100.0, lambda v: [v * v], [x], memory_budget=8)
        (gx,) = tn.gradients(y, [x])
    assert not [nd for nd in g.nodes if nd.op == "StackNew"]
    assert float(tn.Session(g).run(gx, {x: 2.0})) == 1024.0


def test_a_budgeted_loop_inside_a_differentiated_loop() -> None:
    """The inner loop recomputes inside the outer loop's backward loop: its initial state and trip
    count come from the outer loop's stacks, and the weight it reads from the outer body too."""

    def build(budget: Optional[int]) -> tuple[Any, ...]:
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.float32, [], name="x")

            def outer(t: Any, v: Any) -> Any:
                a = v * 0.5 + 1.0  # made in the outer body, read by the inner one
                _, u = tn.while_loop(lambda j, u: j < t + 2, lambda j, u: (j + 1, tn.tanh(u) * a),
                                     [tn.constant(0), v], name="inner", memory_budget=budget)
                return t + 1, u

            _, y = tn.while_loop(lambda t, v: t < 3, outer, [tn.constant(0), x], name="outer")
            (gx,) = tn.gradients(y, [x])
        return g, x, gx

    g, x, gx = build(None)
    want = tn.Session(g).run(gx, {x: 0.3})
    for backend in ("reference", "fast"):
        g, x, gx = build(2 * 8)
        assert not [nd for nd in g.nodes if nd.op == "StackNew" and nd.attrs.get("loop_name") == "outer/body/inner"]
        np.testing.assert_allclose(tn.Session(g, backend=backend).run(gx, {x: 0.3}), want, rtol=1e-5)


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_budgeted_loop_in_a_cond_reading_a_variable(backend: str) -> None:
    """The loop sits in a cond branch and its body reads a Variable: the body names the Variable's
    handle, which the loop captured through the branch's Switch; the recomputed body must meet the same
    value under either name, or the Variable's gradient is lost (it was, once: zeros)."""
    if backend == "fast":
        pytest.importorskip("jax")

    def build(budget: Optional[int]) -> tuple[Any, ...]:
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.float32, [3], name="x")
            p = tn.placeholder(tn.bool, [], name="p")
            v = tn.Variable(np.array([0.9, 1.1, -0.8], np.float32), name="V")

            def loop() -> Any:
                return tn.while_loop(lambda i, u: i < 5, lambda i, u: (i + 1, tn.tanh(u * v.value())),
                                     [tn.constant(0), x * 2.0], memory_budget=budget)[1]

            y = tn.cond(p, loop, lambda: x * 3.0)
            grads = tn.gradients(tn.reduce_sum(y * y), [x, v])
        return g, x, p, grads

    xs = np.array([0.3, -0.2, 0.5], np.float32)
    for taken in (True, False):
        g, x, p, grads = build(None)
        want = tn.Session(g).run(grads, {x: xs, p: taken})
        g, x, p, grads = build(2 * 20)
        got = tn.Session(g, backend=backend).run(grads, {x: xs, p: taken})
        assert taken is False or np.abs(want[1]).sum() > 0.1
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5)


# ---- what it costs, and what it holds ---------------------------------------------------------------------
@pytest.mark.parametrize("slots", [1, 2, 3, 5, 64])
def test_the_body_is_evaluated_as_often_as_the_schedule_says(slots: int) -> None:
    m = model(slots * STATE)
    sess = m["sessions"].get("reference") or tn.Session(m["g"])
    m["sessions"]["reference"] = sess
    for n in (0, 1, 2, 13, 40):
        run(m, "reference", n, trace=True)
        assert live_tanh(sess) == schedule.cost(n, slots).body_calls  # forward, recomputed, in the vjps


def slot_bytes(g: tn.Graph, loop: str) -> int:
    """The bytes of the backward loop's slot buffers and positions, from their static types (the loop
    variables of rank one more than the state's, and the int32 positions) at the count of slots the
    interpreters give (the ``CheckpointSlots`` node's ``slots``: the buffers' static shape leaves the
    count to the run, which a compiled backend may size down)."""
    (w,) = [c for c in g.contexts if isinstance(c, WhileContext) and c.name == f"gradients/{loop}"]
    (most,) = [nd.attrs["slots"] for nd in g.nodes if nd.op == "CheckpointSlots" and nd.attrs["loop"] == loop]
    total = 0
    for lv in w.loop_vars[3:6]:  # after the counter, top and end: the positions, then one buffer per variable
        t = lv.merge.outputs[0]
        total += int(np.prod([most if d is None else d for d in t.shape])) * t.dtype.itemsize
    return total


@pytest.mark.parametrize("budget", [STATE, 2 * STATE + 23, 10 * STATE + 1])
def test_nothing_is_stacked_and_the_slots_fit_the_budget(budget: int) -> None:
    m = model(budget)
    assert not [nd for nd in m["g"].nodes if nd.op == "StackNew"]
    assert "rnn" not in {lp.loop_name for lp in tn.memory_report(m["g"]).loops}
    assert slot_bytes(m["g"], "rnn") == (budget // STATE) * STATE <= budget
    _, ck = forward_slots(m)  # the forward loop's buffers: the states without their positions
    assert all(lv.merge.outputs[0].shape[0] is None for lv in ck.bufs)  # (their count is the run's)
    elem = sum(int(np.prod(lv.merge.outputs[0].shape[1:])) * lv.merge.outputs[0].dtype.itemsize for lv in ck.bufs)
    assert ck.plan.slots * elem == (budget // STATE) * (STATE - 4)


@pytest.mark.parametrize("backend", ["reference", "smallstep", "partitioned", "fast", "fast partitioned"])
def test_a_runs_budget_counts_the_checkpoints_slots(backend: str) -> None:
    """Under a run's budget too, what a loop whose gradient recomputes holds is its slots: a run whose
    budget holds them runs (the backend's own accounting shows them); one whose budget is below them
    stops with ``ResourceExhaustedError`` naming the loop's checkpoints, on every backend (a run's
    budget cannot change a gradient already built)."""
    if backend.startswith("fast"):
        pytest.importorskip("jax")
    m = model(3 * STATE)
    for a, b in zip(run(m, backend, 6, memory_budget=3 * STATE), run(model(None), "reference", 6), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    assert held(m["sessions"][backend]) == {"rnn": 3 * STATE}
    who = {"reference": "reference interpreter", "smallstep": "small-step system", "partitioned":
           "reference interpreter", "fast": "fast backend", "fast partitioned": "fast partitioned executor"}[backend]
    with pytest.raises(tn.ResourceExhaustedError, match=rf'^{who}\b.*: the checkpoints of loop "rnn" \(3 slots of '
                                                        r"24 bytes.*over the run's memory_budget of 71 bytes"):
        run(m, backend, 6, memory_budget=3 * STATE - 1)


def test_the_fast_backends_program_holds_the_slots_within_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """XLA's own count of the compiled step's temporaries (``memory_analysis``), which on the CPU the
    program allocates whole for every call, is within the loop's budget plus what the same step holds
    without a budget, and two states: the slots are what the budget bounds, and nothing else of that
    size is live (the thinning once gathered every other slot into new buffers: twice the budget,
    found by ``benchmarks/lstm_budget.py``). The two states are the recomputing step's own working
    set (a recomputed state and its cotangent), which the store-everything step does not have."""
    pytest.importorskip("jax")
    from turnout.fast import plan as fast_plan

    temps: list[int] = []
    jit = fast_plan.Plan.jit

    def counting_jit(self: Any, fn: Any, donate_argnums: tuple[int, ...] = ()) -> Any:
        jitted = jit(self, fn, donate_argnums)

        def call(*args: Any) -> Any:
            analysis = jitted.lower(*args).compile().memory_analysis()
            if analysis is None:
                pytest.skip("XLA reports no memory analysis on this platform")
            temps.append(int(analysis.temp_size_in_bytes))
            return jitted(*args)

        return call

    monkeypatch.setattr(fast_plan.Plan, "jit", counting_jit)
    size = 1024  # float32s of the state v: 4 100 bytes a state, 4 104 a slot

    def temp_bytes(budget: Optional[int]) -> int:
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.float32, [size], name="x")
            n = tn.placeholder(tn.int32, [], name="n")
            _, y = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, tn.tanh(v) * 1.1), [tn.constant(0), x],
                                 name="rnn", memory_budget=budget)
            (gx,) = tn.gradients(tn.reduce_sum(y * y), [x])
        temps.clear()
        tn.Session(g, backend="fast").run(gx, {x: np.full(size, 0.3, np.float32), n: 5})
        assert len(temps) == 1, temps  # one compiled call
        return temps[0]

    budget = 256 * (8 + 4 * size)
    assert temp_bytes(budget) <= budget + temp_bytes(None) + 2 * 4 * size


def test_the_slots_are_made_where_the_program_runs_not_folded_into_a_constant() -> None:
    """The slots start as ``tn.fill`` of zeros, whose inputs are constants: folding it while tracing
    made a constant as large as the budget, which the compiled program held beside the buffers it
    copied it into (a 256 MiB budget's step peaked at 796 MiB of RSS where 539 do). Values larger
    than ``FOLD_BYTES`` are not folded; small ones still are."""
    pytest.importorskip("jax")
    from turnout.fast.lower_node import FOLD_BYTES, fold

    g = tn.Graph()
    with g.as_default():
        big = tn.fill(tn.constant(np.array([FOLD_BYTES // 4 + 1], np.int32)), tn.constant(np.float32(0)))
        small = tn.fill(tn.constant(np.array([16], np.int32)), tn.constant(np.float32(2)))
    args = {t: [np.array([t.shape[0]], np.int32), np.float32(v)] for t, v in ((big, 0), (small, 2))}
    assert fold(big.node, args[big]) is None
    (got,) = fold(small.node, args[small])  # type: ignore[misc]
    np.testing.assert_array_equal(got, np.full(16, 2, np.float32))
    m = model(4 * STATE)
    ck = next(c.checkpoints for c in m["g"].contexts if isinstance(c, WhileContext) and c.checkpoints)
    (start,) = {lv.enter.inputs[0].node for lv in ck.bufs[:1]}
    assert start.op == "Reshape" and start.inputs[0].node.op == "Fill"  # (what the slots start as: the node
    # the bound keeps from folding, when large; its count is ``CheckpointSlots``, which is never folded)


def test_the_report_and_explain_say_the_loop_recomputes() -> None:
    m = model(3 * STATE + 5)
    lp = tn.memory_report(m["g"]).plan.loop("rnn")  # type: ignore[union-attr]
    assert (lp.action, lp.built, lp.slots, lp.entry_bytes, lp.budget) == ("recompute", True, 3, STATE, 3 * STATE + 5)
    assert lp.peak_bytes(10**6) == 3 * STATE
    assert 'loop "rnn": recompute; budget 77 B (loop): its gradient recomputes from 3 checkpoint(s)' in str(
        tn.memory_report(m["g"]))
    # what the budget costs, from the schedule itself, at two trip counts
    again = [schedule.cost(n, 3).recomputed / n for n in (1000, 10_000)]
    assert f"its backward loop recomputes {again[0]:.2g} forward passes at 1000 steps, {again[1]:.2g} at 10000" in str(
        tn.memory_report(m["g"]))
    assert again[0] > 10  # (three slots: a quadratic schedule's cost, not the sqrt budget's one pass)
    sess = tn.Session(m["g"])
    notes = sess.explain(m["grads"], {m["x"]: X0, m["n"]: 3, m["w"]: W0}).notes
    assert any('loop "rnn": recompute' in n for n in notes)
    assert tn.memory_report(model(None)["g"]).plan.loops[0].action == "keep"


# ---- the forward loop's online checkpoints ---------------------------------------------------------------
def forward_slots(m: dict[str, Any]) -> Any:
    """The forward loop's slots (``control_flow.checkpoints``) of model ``m``."""
    (w,) = [c for c in m["g"].contexts if isinstance(c, WhileContext) and c.name == "rnn"]
    return w, w.checkpoints


def states(n: int) -> list[np.ndarray]:
    """The plain model's state before each step, ``0 .. n``, in numpy float32."""
    out, v = [X0], X0
    for _ in range(n):
        v = (np.tanh(v) * W0).astype(np.float32)
        out.append(v)
    return out


@pytest.mark.parametrize("slots", sweep(range(1, 13), [1, 2, 3, 4, 5, 8]))
def test_the_forward_loop_keeps_the_schedules_checkpoints(slots: int) -> None:
    """After ``n`` steps the forward loop holds the states at the positions
    ``forward_checkpoints(n, slots)`` gives, in order, and its stride is the schedule's: for every
    trip count up to past the third thinning (so every thinning of one step, two at most, is met)."""
    m = model(slots * STATE)
    w, ck = forward_slots(m)
    assert len(ck.bufs) == 2 and ck.plan.slots == slots
    fetch = [ck.count.exit.outputs[0], ck.stride.exit.outputs[0], ck.bufs[1].exit.outputs[0]]
    sess = tn.Session(m["g"])
    for n in range(0, 4 * slots + 3):
        count, stride, buf = sess.run(fetch, {m["x"]: X0, m["n"]: n, m["w"]: W0})
        kept, want_stride = schedule.forward_checkpoints(n, slots)
        assert (int(count), int(stride)) == (len(kept), want_stride), n
        want = states(n)
        for k, p in enumerate(kept):
            np.testing.assert_allclose(buf[k], want[p], rtol=1e-6)


def test_a_loop_without_a_budget_or_that_keeps_stacks_keeps_no_checkpoints() -> None:
    """Only a loop whose gradient recomputes carries slots: without a budget, with
    ``swap_memory=True`` or ``back_prop=False``, the loop has its counter and its own variables only."""
    for kw in ({}, {"memory_budget": 10 * STATE, "swap_memory": True}, {"memory_budget": 10 * STATE,
                                                                        "back_prop": False}):
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.float32, [4], name="x")
            tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tn.tanh(v)), [tn.constant(0), x], **kw)
        (w,) = [c for c in g.contexts if isinstance(c, WhileContext)]
        assert w.checkpoints is None and len(w.loop_vars) == 3, kw
        assert not [nd for nd in g.nodes if "checkpoints" in nd.name or "thin" in nd.name]
    w, ck = forward_slots(model(3 * STATE))
    assert len(w.loop_vars) == 1 + 2 + 2 + 2  # the counter, i and v, their buffers, the count and stride


def _slot_nodes(g: tn.Graph) -> list[Any]:
    return [nd for nd in g.nodes if "checkpoints" in nd.name or "thin" in nd.name]


def test_the_slots_are_built_by_the_first_gradient_that_recomputes() -> None:
    """A budgeted loop carries no slots until a gradient that recomputes it is built (as the
    store-everything gradient adds its pushes then): its forward graph is the unbudgeted loop's,
    node for node. The first gradient adds them; a second gradient of the same loop reuses them."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        w0 = tn.placeholder(tn.float32, [4], name="w")
        _, y = tn.while_loop(lambda i, v: i < 5, body_of("plain", w0), [tn.constant(0), x], name="rnn",
                             memory_budget=3 * STATE)
    (w,) = [c for c in g.contexts if isinstance(c, WhileContext)]
    assert w.checkpoints is None and len(w.loop_vars) == 3 and not _slot_nodes(g)
    forward = len(g.nodes)
    with g.as_default():
        (gx,) = tn.gradients(tn.reduce_sum(y * y), [x])
    ck = w.checkpoints
    assert ck is not None and ck.plan.slots == 3 and len(w.loop_vars) == 7 and _slot_nodes(g)
    assert all(nd.id >= forward for nd in _slot_nodes(g))
    with g.as_default():
        (gw,) = tn.gradients(tn.reduce_sum(tn.tanh(y)), [w0])
    assert w.checkpoints is ck and len(w.loop_vars) == 7
    assert not [nd for nd in g.nodes if nd.op == "StackNew"]
    feeds = {x: X0, w0: W0}
    got = tn.Session(g).run([gx, gw], feeds)
    g2 = tn.Graph()
    with g2.as_default():
        x2 = tn.placeholder(tn.float32, [4], name="x")
        w2 = tn.placeholder(tn.float32, [4], name="w")
        _, y2 = tn.while_loop(lambda i, v: i < 5, body_of("plain", w2), [tn.constant(0), x2], name="rnn")
        want = tn.Session(g2).run([tn.gradients(tn.reduce_sum(y2 * y2), [x2])[0],
                                   tn.gradients(tn.reduce_sum(tn.tanh(y2)), [w2])[0]], {x2: X0, w2: W0})
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_a_gradient_refused_past_the_slots_leaves_the_loop_without_them() -> None:
    """A gradient that fails after it built one loop's slots (here: the later loop recomputes, the
    earlier one writes state and is refused) leaves the graph as it was: no slots, no loop variable
    of them, and the loop's gradient can still be built alone."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        count = tn.Variable(0.0, name="count")

        def counted(v: Any) -> Any:
            with tn.control_dependencies([count.assign_add(1.0)]):
                return [tn.tanh(v)]

        (a,) = tn.while_loop(lambda v: tn.reduce_sum(v) > 10.0, counted, [x], name="counted", memory_budget=1000)
        _, y = tn.while_loop(lambda i, v: i < 4, lambda i, v: (i + 1, tn.tanh(v) * 0.9), [tn.constant(0), a],
                             name="rnn", memory_budget=3 * STATE)
        loss = tn.reduce_sum(y)
    (w,) = [c for c in g.contexts if isinstance(c, WhileContext) and c.name == "rnn"]
    before = len(g.nodes)
    with g.as_default(), pytest.raises(UnsupportedError, match='"counted".*writes state'):
        tn.gradients(loss, [x])
    assert len(g.nodes) == before and w.checkpoints is None and len(w.loop_vars) == 3 and not _slot_nodes(g)
    with g.as_default():
        (ga,) = tn.gradients(loss, [a])
    assert w.checkpoints is not None and len(w.loop_vars) == 7
    got = tn.Session(g).run(ga, {a: np.array([0.1, -0.2, 0.3, 0.05], np.float32)})
    want = np.ones(4, np.float32)
    u = np.array([0.1, -0.2, 0.3, 0.05], np.float32)
    us = []
    for _ in range(4):
        us.append(u)
        u = np.tanh(u) * 0.9
    for u in reversed(us):
        want = want * 0.9 * (1 - np.tanh(u) ** 2)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def thinning_boundaries(slots: int, upto: int) -> list[int]:
    """The trip counts just before, at and after each step at which the forward loop thins."""
    out = set()
    for n in range(1, upto):
        if schedule.forward_checkpoints(n + 1, slots)[1] != schedule.forward_checkpoints(n, slots)[1]:
            out |= {n - 1, n, n + 1}
    return sorted(out)


@pytest.mark.parametrize("backend", ["reference", "fast", "partitioned"])
@pytest.mark.parametrize("slots", [2, 4])
def test_trip_counts_around_each_thinning(backend: str, slots: int) -> None:
    if backend == "fast":
        pytest.importorskip("jax")
    for n in thinning_boundaries(slots, 20):
        assert_same_gradients("plain", slots, backend, n)


@pytest.mark.parametrize("kind", ["cond", "nested"])
def test_bodies_with_a_cond_or_a_loop_around_each_thinning(kind: str) -> None:
    for n in thinning_boundaries(3, 14):
        assert_same_gradients(kind, 3, "reference", n)


def test_the_small_step_system_across_a_thinning() -> None:
    """Two slots thin at steps 2 and 4: the small-step system runs the same forward slots."""
    for n in (2, 3, 5):
        assert_same_gradients("plain", 2, "smallstep", n)


# ---- where it cannot apply --------------------------------------------------------------------------------
@pytest.mark.parametrize("whose", ["loop", "gradient"])
def test_a_body_that_writes_state_is_refused_by_name(whose: str) -> None:
    """The loop's own budget, or its share of a gradient's (``tn.gradients(..., memory_budget=)``)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        count = tn.Variable(0.0, name="count")

        def body(v: Any) -> Any:
            with tn.control_dependencies([count.assign_add(1.0)]):
                return [tn.tanh(v)]

        (y,) = tn.while_loop(lambda v: v > 10.0, body, [x], name="counted",
                             memory_budget=1000 if whose == "loop" else None)
        words = "memory_budget=1000 bytes" if whose == "loop" else "a share of 1000 bytes of the gradient's"
        with pytest.raises(UnsupportedError, match=f'while_loop "counted" has {words}.*writes state.*swap_memory=True'):
            tn.gradients(y, [x], memory_budget=None if whose == "loop" else 1000)
        if whose == "gradient":
            tn.gradients(y, [x])  # (without the budget: stacks, as ever)


def test_a_budget_that_holds_no_state_is_refused() -> None:
    with pytest.raises(UnsupportedError, match='"rnn".*holds no loop state.*give at least 24'):
        model(STATE - 1)


def test_a_loop_without_its_python_body_is_refused() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        (y,) = tn.while_loop(lambda v: v < 1.0, lambda v: [v * 2.0], [x], name="lost", memory_budget=100)
        (w,) = [c for c in g.contexts if isinstance(c, WhileContext) and c.name == "lost"]
        w.body_fn = None  # as a loop whose body function is not at hand
        with pytest.raises(UnsupportedError, match='"lost".*no Python body'):
            tn.gradients(y, [x])


def _second_order(kind: str, budget: Optional[int], n: int = 4) -> dict[str, Any]:
    """The loop of ``body_of(kind)`` on a vector, its gradient and the gradient of that gradient's
    squared norm, both w.r.t. ``x``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        w = tn.constant(W0)
        _, y = tn.while_loop(lambda i, v: i < n, body_of(kind, w), [tn.constant(0), x], name="rnn",
                             memory_budget=budget)
        (gx,) = tn.gradients(tn.reduce_sum(y * y), [x])
        (hx,) = tn.gradients(tn.reduce_sum(gx * gx), [x])
    return {"g": g, "x": x, "fetch": [gx, hx]}


@pytest.mark.parametrize("kind", ["plain", "cond", "nested"])
@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_second_order_gradient_through_a_recomputing_loop(kind: str, backend: str) -> None:
    """The gradient of a recomputed loop's gradient equals the store-everything one, for bodies with
    a cond or a loop inside, with slots enough for every state or thinned to one: the backward loop
    is differentiated like any loop (it keeps stacks, having no budget of its own), and the
    cotangents of the checkpoints it starts from go back into the forward states they hold
    (``recompute.Kept``; without them the second order was wrong for every body). The graph is the
    same rewrite on every backend: the fast backend, where each slot count is a compile, runs the
    two ends (thinned to one, and a slot for every state)."""
    if backend == "fast":
        pytest.importorskip("jax")
    ref = _second_order(kind, None)
    want = tn.Session(ref["g"]).run(ref["fetch"], {ref["x"]: X0})
    for slots in (1, 8) if backend == "fast" else (1, 2, 3, 8):
        m = _second_order(kind, slots * STATE)
        assert not [nd for nd in m["g"].nodes if nd.op == "StackNew" and "rnn" in nd.attrs.get("forward_tensor", "")
                    and "gradients/" not in nd.attrs.get("forward_tensor", "")]
        got = tn.Session(m["g"], backend=backend).run(m["fetch"], {m["x"]: X0})
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_a_loop_that_swaps_or_reads_its_tensor_array_keeps_its_stacks() -> None:
    """Rules 4 and 2 of the planner: swapping asked for, or a state with no static size (a
    TensorArray the body reads, not only writes: ``checkpoints.accumulators``): the gradient keeps
    stacks under the loop's budget, as without recomputation."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        ta = tn.TensorArray(tn.float32, size=3)

        def body(i: Any, v: Any, t: Any) -> Any:
            return i + 1, tn.tanh(v), t.write(i, v * tn.cast(t.size(), tn.float32))

        _, y, t = tn.while_loop(lambda i, v, t: i < 3, body, [tn.constant(0), x, ta], memory_budget=10**6)
        (gx,) = tn.gradients(tn.reduce_sum(y) + tn.reduce_sum(t.stack()), [x])
    assert [nd.attrs["memory_budget"] for nd in g.nodes if nd.op == "StackNew"][:1] == [10**6]
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        _, y = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tn.tanh(v)), [tn.constant(0), x],
                             memory_budget=10**6, swap_memory=True)
        tn.gradients(tn.reduce_sum(y), [x])
    assert {nd.attrs["memory_budget"] for nd in g.nodes if nd.op == "StackNew"} == {10**6}


# ---- property: any trip count, any budget -----------------------------------------------------------------
@settings(max_examples=examples(30))
@given(n=st.integers(0, 30), slots=st.integers(1, 12), slack=st.integers(0, STATE - 1),
       kind=st.sampled_from(["plain", "cond"]))
def test_any_trip_count_under_any_budget(n: int, slots: int, slack: int, kind: str) -> None:
    """Under a budget of ``slots`` states and less than one more, the gradient is the store-everything
    one, and the plain body is evaluated exactly as often as the schedule says."""
    m = model(slots * STATE + slack, kind)
    got = run(m, "reference", n, trace=True)
    for a, b in zip(got, run(model(None, kind), "reference", n), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    if kind == "plain":
        assert live_tanh(m["sessions"]["reference"]) == schedule.cost(n, slots).body_calls


# a sixteenth of the loaded profile's budget (3 in the default run): each example compiles
@settings(max_examples=max(1, settings.default.max_examples // 16))
@given(n=st.integers(0, 40), slots=st.sampled_from([1, 2, 3, 5]),
       backend=st.sampled_from(["fast", "partitioned", "fast partitioned"]), kind=st.sampled_from(KINDS))
def test_any_trip_count_on_the_compiled_and_partitioned_backends(n: int, slots: int, backend: str, kind: str) -> None:
    if backend.startswith("fast"):
        pytest.importorskip("jax")
    assert_same_gradients(kind, slots, backend, n)


# ---- slots sized by the loop's own bound ---------------------------------------------------------------
def _bounded(bound: Any, budget: int = 1000 * STATE) -> dict[str, Any]:
    """The plain model with ``maximum_iterations=bound`` under a budget of 1000 states."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        w = tn.placeholder(tn.float32, [4], name="w")
        m = bound(g) if callable(bound) else bound
        _, y = tn.while_loop(lambda i, v: i < n, body_of("plain", w), [tn.constant(0), x], name="rnn",
                             memory_budget=budget, maximum_iterations=m)
        gx, gw = tn.gradients(tn.reduce_sum(y * y), [x, w])
    (loop,) = [c for c in g.contexts if getattr(c, "checkpoints", None) is not None]
    return {"g": g, "x": x, "n": n, "w": w, "grads": [gx, gw], "slots": loop.checkpoints.slots, "m": m}


@pytest.mark.parametrize("backend", ["reference", "smallstep", "fast"])
def test_a_loop_bounded_by_maximum_iterations_keeps_no_more_slots_than_its_bound(backend: str) -> None:
    """A loop's ``maximum_iterations`` bounds its trip count, so its forward loop never keeps more
    states than that: its buffers get ``min(slots, max(1, maximum_iterations))`` slots
    (``checkpoints.slot_count``), not every one the budget holds, whether the bound is a constant or
    fed (the fast backend then compiles a plan per bound). The gradients are the store-everything ones
    below, at and past the bound (where the loop stops at the bound)."""
    if backend == "fast":
        pytest.importorskip("jax")
    for bound, feeds in ((6, {}), (lambda g: tn.placeholder(tn.int32, [], name="m"), {"m": 6}),
                         (lambda g: tn.placeholder(tn.int32, [], name="m"), {"m": 9})):
        mdl = _bounded(bound)
        sess = tn.Session(mdl["g"], backend=backend)
        extra = {mdl["m"]: feeds["m"]} if feeds else {}
        m = feeds.get("m", 6)
        for n in (0, m - 1, m, m + 3):
            feed = {mdl["x"]: X0, mdl["n"]: n, mdl["w"]: W0, **extra}
            got = sess.run([*mdl["grads"], mdl["slots"]], feed)
            want = run(model(None), "reference", min(n, m))
            for a, b in zip(got[:2], want, strict=True):
                np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
            assert int(got[2]) == m, got[2]


def test_a_bound_a_compiled_backend_cannot_know_keeps_the_budgets_slots() -> None:
    """A ``maximum_iterations`` read from a Variable is known only when the run reads it: the buffers
    are not bounded by it (a compiled backend could not size them by it) but keep what the backend
    gives the loop, every slot the budget holds on the small-step system and at most
    ``FIRST_CAPACITY`` on a first run of the reference interpreter (``turnout.slot_sizes``), and the
    gradient is unchanged."""
    def from_variable(g: tn.Graph) -> Any:
        return tn.Variable(5, name="bound").read()

    mdl = _bounded(from_variable)
    assert int(tn.Session(mdl["g"], backend="smallstep").run(mdl["slots"])) == 1000
    assert int(tn.Session(mdl["g"]).run(mdl["slots"])) == FIRST_CAPACITY
    sess = tn.Session(mdl["g"])
    got = sess.run(mdl["grads"], {mdl["x"]: X0, mdl["n"]: 8, mdl["w"]: W0})
    for a, b in zip(got, run(model(None), "reference", 5), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


# ---- arrays the body only writes: a scan's and a map's results ----------------------------------------
def _accumulating(kind: str, budget: Optional[int]) -> dict[str, Any]:
    """``kind``: a ``tn.scan`` (carry and the array of results), a ``tn.map_fn`` (the counter and the
    array), a ``tn.while_loop`` writing two arrays, one twice per step (``writes``), or one whose body
    also reads its array (``reads``: not an accumulator, so its gradient keeps stacks); the gradients of
    ``sum(results ** 2)`` with respect to ``xs`` and ``w``."""
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, [None, 3], name="xs")
        w = tn.placeholder(tn.float32, [3], name="w")
        n = tn.shape(xs)[0]
        if kind == "scan":
            ys = tn.scan(lambda c, x: tn.tanh(c * w + x), xs, tn.zeros([3]), memory_budget=budget)
        elif kind == "map":
            ys = tn.map_fn(lambda x: tn.tanh(x * w), xs, memory_budget=budget)
        else:
            rows = tn.TensorArray(tn.float32, size=n).unstack(xs)
            out = [tn.TensorArray(tn.float32, size=2 * n, element_shape=[3]),
                   tn.TensorArray(tn.float32, size=n, element_shape=[3])]

            def body(i: Any, v: Any, a: Any, b: Any) -> Any:
                v = tn.tanh(v * w + rows.read(i))
                if kind == "reads":
                    v = v + 0.01 * tn.cast(a.size(), tn.float32)
                return i + 1, v, a.write(2 * i, v).write(2 * i + 1, v * v), b.write(i, tn.sin(v))

            _, _, a, b = tn.while_loop(lambda i, *_: i < n, body, [tn.constant(0), tn.zeros([3]), *out],
                                       memory_budget=budget, name="acc")
            ys = [a.stack(), b.stack()]
        parts = [tn.reduce_sum(y * y) for y in (ys if isinstance(ys, list) else [ys])]
        loss = parts[0] if len(parts) == 1 else parts[0] + parts[1]
        grads = tn.gradients(loss, [xs, w])
    return {"g": g, "xs": xs, "w": w, "fetch": [loss, *grads]}


_ACC: dict[Any, dict[str, Any]] = {}


def accumulating(kind: str, budget: Optional[int]) -> dict[str, Any]:
    if (kind, budget) not in _ACC:
        _ACC[(kind, budget)] = _accumulating(kind, budget)
    return _ACC[(kind, budget)]


def _run_acc(m: dict[str, Any], backend: str, rows: int) -> list[np.ndarray]:
    xs = np.sin(np.arange(3 * rows, dtype=np.float32) * 0.7).reshape(rows, 3)
    sess = m.setdefault("sessions", {}).get(backend)
    if sess is None:
        kw = {"devices": ["cpu:0", "cpu:1"]} if backend == "partitioned" else {}
        sess = m["sessions"][backend] = tn.Session(m["g"], backend=backend, **kw)
    return list(sess.run(m["fetch"], {m["xs"]: xs, m["w"]: np.array([0.9, -1.1, 0.6], np.float32)},
                         max_seconds=SLOW_RUN))


@pytest.mark.parametrize("kind", ["scan", "map", "writes"])
def test_an_array_the_body_only_writes_is_no_part_of_a_checkpoint(kind: str) -> None:
    """A TensorArray the body only writes (``checkpoints.accumulators``: write after write, the last
    its next value) is left out of the checkpoints: its loop recomputes under a budget, the slots hold
    the other variables only, and a recomputed step is given the loop's initial array, its writes
    dropped. Its gradient is the store-everything one, on every backend, thinning included."""
    m = accumulating(kind, 40 * 3)
    (w,) = [c for c in m["g"].contexts if isinstance(c, WhileContext) and c.checkpoints is not None]
    arrays = [i for i, lv in enumerate(w.loop_vars[1:1 + w.num_state])
              if lv.merge.outputs[0].dtype.name == "tensor_array"]
    assert w.accumulators == frozenset(arrays) and arrays
    assert len(w.checkpoints.bufs) == w.num_state - len(arrays)
    assert not [nd for nd in m["g"].nodes if nd.op == "StackNew"]
    for rows in (0, 1, 5, 17):
        want = _run_acc(accumulating(kind, None), "reference", rows)
        for backend in ("reference", "fast", "smallstep" if rows < 6 else "partitioned"):
            for a, b in zip(_run_acc(m, backend, rows), want, strict=True):
                np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def test_an_array_the_body_reads_keeps_its_stacks() -> None:
    """A body that reads its array (its size) could depend on what it holds: it is no accumulator,
    the state has no static size, and the gradient keeps stacks under the budget."""
    m = accumulating("reads", 10**6)
    (w,) = [c for c in m["g"].contexts if isinstance(c, WhileContext) and c.name == "acc"]
    assert w.checkpoints is None and w.accumulators == frozenset({3})  # (the array it does not read)
    assert [nd for nd in m["g"].nodes if nd.op == "StackNew"]
    for a, b in zip(_run_acc(m, "fast", 4), _run_acc(accumulating("reads", None), "reference", 4), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


@settings(max_examples=examples(10), deadline=None)
@given(rows=st.integers(0, 25), slots=st.integers(1, 9), kind=st.sampled_from(["scan", "map", "writes"]),
       backend=st.sampled_from(["reference", "fast"]))
def test_any_trip_count_of_an_accumulating_loop(rows: int, slots: int, kind: str, backend: str) -> None:
    if backend == "fast":
        pytest.importorskip("jax")
    per = {"scan": 20, "map": 8, "writes": 20}[kind]  # bytes of a checkpoint: its state and position
    want = _run_acc(accumulating(kind, None), "reference", rows)
    m = accumulating(kind, slots * per)
    for a, b in zip(_run_acc(m, backend, rows), want, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    assert sum(held(m["sessions"][backend]).values()) == slots * per  # (the backend's own count: the slots)


@pytest.mark.parametrize("backend", ["reference", "smallstep", "fast", "partitioned"])
def test_a_body_that_returns_an_outside_tensor_unchanged(backend: str) -> None:
    """Found by the routes property under a gradient budget: ``lambda i, v: (i + 1, x)`` reads ``x``
    in no op, so the recomputed step captured nothing and its gradient to ``x`` was lost (0 for
    every trip count past 0; 1 is right). The recomputed body's results are now captured where it is
    called (``recompute.call_body``)."""
    if backend == "fast":
        pytest.importorskip("jax")
    def gradients(budget: Optional[int]) -> list[float]:
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.float64, [], name="x")
            n = tn.placeholder(tn.int32, [], name="n")
            _, v = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, x), [tn.constant(0), x * 3.0],
                                 memory_budget=budget)
            (gx,) = tn.gradients(v * v, [x])
        kw = {"devices": ["cpu:0", "cpu:1"]} if backend == "partitioned" else {}
        sess = tn.Session(g, backend=backend, **kw)
        return [float(sess.run(gx, {x: 2.0, n: k})) for k in (0, 1, 3)]

    assert gradients(None) == gradients(1000) == [36.0, 4.0, 4.0]
