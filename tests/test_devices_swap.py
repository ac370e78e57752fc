"""Gradient stacks of graphs that span devices (``turnout.fast.device_stacks``), on forced CPU devices.

A loop spanning devices pushes the values its gradient needs on stacks that live on the device of
their pushes. With ``swap_memory=True`` its full chunks go to host memory and come back for the
backward loop, so each device's stack bytes stay bounded (two chunks per stack) at any trip count;
with ``swap_memory=False`` the full chunks stay on their device and the stack grows there, without
repeating the run. ``device_memory_limit`` caps each device on its own, and crossing it is a
``ResourceExhaustedError`` naming the loop and suggesting ``swap_memory=True``. Every result is
checked against the partitioned reference executor, gradients included. The byte figures are the
executor's own accounting, read through ``tn.memory_report(session)``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from programs import assert_same_outcome

import turnout as tn
from turnout.session import RunOptions

pytest.importorskip("jax")

D3 = ["cpu:0", "cpu:1", "cpu:2"]
CHUNK = 8
#: bytes of one chunk of one stack: a float64 value and its int32 iteration index per entry
ONE_CHUNK = CHUNK * (8 + 4)


_MODELS: dict[tuple[Any, ...], dict[str, Any]] = {}


def spanning_rnn(swap: bool, parallel_iterations: int = 8, inner: bool = False,
                 sleep: bool = False, cond: bool = False) -> dict[str, Any]:
    """``y <- tanh(y w) + 0.1 y^2 + 0.3`` (float64) for ``n`` steps, the ``tanh`` on cpu:1 and the
    rest of the step on cpu:2, the loop's control on cpu:0; gradients with respect to ``x`` (the start)
    and ``w``. Its stacks: one on cpu:1 and two on cpu:2. ``inner``: the step
    on cpu:1 also runs an inner loop of ``i mod 3`` steps there (compiled whole: pushes the host cannot
    bound). ``sleep``: a ``tn.sleep`` in the step (segments dispatched from per-device workers).
    ``cond``: the ``tanh`` is one branch of a cond on cpu:1 (``tanh(y w)`` or ``y w / 2``, by the sign
    of ``y - 0.5``), so the gradient pushes in one branch only. Built
    once per module, with the reference executor's results cached per trip count (``run_checked``)."""
    k = (swap, parallel_iterations, inner, sleep, cond)
    if k in _MODELS:
        return _MODELS[k]
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, shape=[], name="x")
        w = tn.placeholder(tn.float64, shape=[], name="w")
        n = tn.placeholder(tn.int32, shape=[], name="n")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                h = tn.cond(y > 0.5, lambda: tn.tanh(y * w), lambda: y * w * 0.5) if cond else tn.tanh(y * w)
                if inner:
                    _, h = tn.while_loop(lambda j, v: j < tn.mod(i, 3), lambda j, v: (j + 1, tn.tanh(v) * 0.9),
                                         [tn.constant(0), h], swap_memory=swap, name="inner")
                if sleep:
                    h = tn.sleep(h, 0.0)
            with tn.device("cpu:2"):
                y2 = h + y * y * 0.1 + 0.3
            return i + 1, y2

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), x], name="fwd", swap_memory=swap,
                                 parallel_iterations=parallel_iterations)
        dx, dw = tn.gradients(y, [x, w])
    m = _MODELS[k] = {"g": g, "x": x, "w": w, "n": n, "fetch": [y, dx, dw], "want": {}}
    return m


def feeds(m: dict[str, Any], steps: int) -> dict[tn.Tensor, Any]:
    out = {m["x"]: np.float64(0.3), m["n"]: np.int32(steps)}
    if "w" in m:
        out[m["w"]] = np.float64(0.7)
    return out


def fast(m: dict[str, Any], **kw: Any) -> tn.Session:
    kw.setdefault("stack_chunk", CHUNK)
    return tn.Session(m["g"], backend="fast", devices=D3, **kw)


def run_checked(sess: tn.Session, m: dict[str, Any], steps: int, memory_budget: Any = None) -> dict[str, Any]:
    """Run ``steps`` steps on ``sess`` (no fallback allowed) and on the partitioned reference executor,
    under ``memory_budget``: the same values, or the same error; returns the fast run's stats."""
    def want() -> Any:
        if (steps, memory_budget) not in m["want"]:
            m["want"][steps, memory_budget] = tn.Session(m["g"], devices=D3).run(
                m["fetch"], feeds(m, steps), memory_budget=memory_budget)
        return m["want"][steps, memory_budget]

    def got() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a fallback to the reference executor would prove nothing
            return sess.run(m["fetch"], feeds(m, steps),
                            options=RunOptions(max_iterations=10_000, memory_budget=memory_budget))

    assert assert_same_outcome(want, got, f"{steps} steps")
    return sess.last_result.stats


def by_device(sess: tn.Session) -> dict[str, Any]:
    recs = tn.memory_report(sess).records
    assert all(r.loop == "fwd" for r in recs), recs
    return {r.device: r for r in recs}


@pytest.mark.parametrize("parallel_iterations", [1, 8])
def test_a_swapped_spanning_loop_holds_two_chunks_per_stack_at_any_trip_count(parallel_iterations: int) -> None:
    m = spanning_rnn(swap=True, parallel_iterations=parallel_iterations)
    sess = fast(m, whole_program="never")  # (the host-driven tier's chunks; the SPMD tier's: below)
    run_checked(sess, m, 3)  # fits one chunk: each device holds one chunk of each of its stacks
    one = {d: r.peak_device_bytes for d, r in by_device(sess).items()}
    assert set(one) == {"cpu:1", "cpu:2"}  # the tanh's stack on cpu:1, the rest of the step's on cpu:2
    peaks = []
    for steps in (40, 120):
        stats = run_checked(sess, m, steps)
        assert stats["tier"] == "host-driven" and stats["stack_capacity_retries"] == 0
        recs = by_device(sess)
        assert set(recs) == set(one)
        for d, r in recs.items():
            stacks = one[d] // ONE_CHUNK
            assert r.swap_memory and r.chunks_kept_on_device == 0
            assert r.peak_device_bytes <= 2 * one[d], (steps, r)  # the chunk being filled, one in flight
            full = steps // CHUNK  # chunks filled per stack; the last one may stay in its buffer
            assert stacks * (full - 1) <= r.chunks_to_host <= stacks * full, (steps, r)
            # every chunk came back for the backward loop, the newest of each stack from its device buffer
            assert r.chunks_from_host == r.chunks_to_host - stacks
            assert r.host_bytes == r.chunks_to_host * ONE_CHUNK  # held on the host when the forward loop ended
        peaks.append(sum(r.peak_device_bytes for r in recs.values()))
    assert peaks[0] == peaks[1]  # 40 or 120 steps: the same device bytes


def test_an_unswapped_spanning_loop_never_leaves_its_devices_and_grows_there() -> None:
    m = spanning_rnn(swap=False)
    sess = fast(m)
    peaks = []
    for steps in (40, 120):
        stats = run_checked(sess, m, steps)
        assert stats["stack_capacity_retries"] == 0  # the stack grew chunk by chunk: no second run
        assert stats["stack_chunks_swapped"] == 0 and stats["peak_host_stack_bytes"] == 0
        recs = by_device(sess)
        for r in recs.values():
            assert not r.swap_memory and r.host_bytes == 0 and r.chunks_to_host == 0 and r.chunks_from_host == 0
            assert r.chunks_kept_on_device >= steps // CHUNK - 1
        peaks.append(sum(r.peak_device_bytes for r in recs.values()))
    # every saved value stays on a device: 120 steps hold about three times the bytes of 40
    assert peaks[1] >= 2.5 * peaks[0]


def test_device_memory_limit_caps_each_device_and_names_the_loop() -> None:
    """A cap of 5 chunks per device: cpu:2 (two stacks) crosses it first when the stacks stay on the
    device; the swapped loop needs 2 chunks per stack at any length and runs under the same cap."""
    limit = 5 * ONE_CHUNK
    unswapped, swapped = spanning_rnn(swap=False), spanning_rnn(swap=True)
    sess = fast(unswapped, device_memory_limit=limit)
    run_checked(sess, unswapped, 12)  # 12 steps: 2 chunks per stack fit
    with pytest.raises(tn.ResourceExhaustedError, match=r'loop "fwd".*device cpu:2.*swap_memory=True'):
        sess.run(unswapped["fetch"], feeds(unswapped, 120))
    sess = fast(swapped, device_memory_limit=limit)
    stats = run_checked(sess, swapped, 120)
    assert stats["stack_chunks_swapped"] > 0
    assert all(r.peak_device_bytes <= limit for r in by_device(sess).values())
    # a cap below one chunk per stack is exhausted before anything is pushed, swapped or not
    with pytest.raises(tn.ResourceExhaustedError, match='loop "fwd"'):
        fast(swapped, device_memory_limit=ONE_CHUNK).run(swapped["fetch"], feeds(swapped, 3))


def test_the_cap_is_counted_per_device() -> None:
    """cpu:2 holds twice cpu:1's stack bytes; a cap between the two devices' needs and below their sum
    is not crossed, since each device has its own memory."""
    m = spanning_rnn(swap=False)
    steps = 40
    need = {"cpu:1": 5 * ONE_CHUNK, "cpu:2": 10 * ONE_CHUNK}  # 40 steps: 5 chunks per stack
    sess = fast(m, device_memory_limit=need["cpu:2"])
    run_checked(sess, m, steps)
    recs = by_device(sess)
    assert {d: r.peak_device_bytes for d, r in recs.items()} == need
    assert sum(need.values()) > need["cpu:2"]


def test_under_a_device_memory_limit_the_spmd_program_runs_what_fits() -> None:
    """The SPMD program allocates every stack on every device (here three, of a float64 value and an
    int32 index: 36 bytes an entry), so under a ``device_memory_limit`` it grows them only as far as
    that lets each device hold (``SpmdPlan.room``: 100 entries here). A run that fits is the SPMD
    tier's, its stacks counted under the limit; a longer one is left to the per-device tiers, which
    keep chunks per device and name the loop that crosses the limit, with the reason in the run's
    stats, and the next run that fits is the SPMD tier's again. A limit that holds no entry passes
    the tier over for every run, saying why."""
    m = spanning_rnn(swap=False, parallel_iterations=1)
    assert run_checked(fast(m), m, 20)["tier"] == "spmd"
    entry, room = 3 * (8 + 4), 100
    sess = fast(m, device_memory_limit=room * entry)
    assert any(f"hold {room} entries" in n for n in sess.explain(m["fetch"], feeds(m, 20)).notes)
    stats = run_checked(sess, m, 20)
    assert stats["tier"] == "spmd" and stats["stack_capacity"] == 64 and "whole_program_declined" not in stats
    stats = run_checked(sess, m, 90)  # (past 64: once more at the room's 100, not at 128)
    assert stats["tier"] == "spmd" and stats["stack_capacity"] == room
    assert all(r.peak_device_bytes == room * entry for r in by_device(sess).values())
    # 120 steps: past the room; the per-device tiers keep 15 chunks of 8 on cpu:2 for its two stacks
    stats = run_checked(sess, m, 120)
    assert stats["tier"] == "host-driven" and "device_memory_limit" in stats["whole_program_declined"]
    assert max(r.peak_device_bytes for r in by_device(sess).values()) == 2 * 15 * ONE_CHUNK <= room * entry
    with pytest.raises(tn.ResourceExhaustedError, match=r'loop "fwd".*device cpu:2'):
        sess.run(m["fetch"], feeds(m, 300))
    stats = run_checked(sess, m, 30)
    assert stats["tier"] == "spmd" and "whole_program_declined" not in stats
    # (one step in chunks of one entry: cpu:2 holds 24 bytes of its two stacks, the SPMD program 36 on each)
    stats = run_checked(fast(m, device_memory_limit=entry - 1, stack_chunk=1), m, 1)
    assert stats["tier"] == "host-driven" and "holds no entry" in stats["whole_program_declined"]
    assert "whole_program_declined" not in run_checked(fast(m, whole_program="never"), m, 20)


def test_under_a_memory_budget_the_spmd_program_runs_what_fits() -> None:
    """A run's memory budget caps the SPMD program's stacks as a ``device_memory_limit`` does
    (``SpmdPlan.budget_room``): every device allocates every stack (36 bytes an entry), so a budget of
    50 entries' bytes lets it hold 50 entries a stack. A run that fits is the SPMD tier's; a longer
    one is left to the per-device tiers, which count each device's own stacks (cpu:2 holds 24 bytes
    an entry, so they fit 75 steps where the program fits 50) and stop a run that crosses the budget
    on a device. A budget that holds no entry passes the tier over (``Session.explain`` says so).
    (The per-device tiers hold no stack of the pushed constant 0.1, which the partitioned reference
    executor holds, so they fit runs of 51 to 74 steps that it stops.)"""
    m = spanning_rnn(swap=False, parallel_iterations=1)
    m["g"].gradient_calls.clear()  # (the stacks' own stop: no record of the gradient call to rebuild)
    entry, room = 3 * (8 + 4), 50
    budget = room * entry
    sess = fast(m)
    assert any(f"holds the {room} entries" in n for n in sess.explain(m["fetch"], feeds(m, 20), budget).notes)
    stats = run_checked(sess, m, 20, budget)
    assert stats["tier"] == "spmd" and stats["stack_capacity"] == room and "whole_program_declined" not in stats
    assert all(r.peak_device_bytes == budget for r in by_device(sess).values())
    # past the program's 50 the per-device tiers run it
    got = sess.run(m["fetch"], feeds(m, 60), memory_budget=budget)
    np.testing.assert_allclose(got, tn.Session(m["g"], devices=D3).run(m["fetch"], feeds(m, 60)), rtol=1e-12)
    stats = sess.last_result.stats
    assert stats["tier"] == "host-driven" and "the memory budgets" in stats["whole_program_declined"]
    assert max(r.peak_device_bytes for r in by_device(sess).values()) <= budget
    with pytest.raises(tn.ResourceExhaustedError, match=r'loop "fwd"'):
        sess.run(m["fetch"], feeds(m, 100), memory_budget=budget)
    with pytest.raises(tn.ResourceExhaustedError, match=r'loop "fwd"'):  # (as the partitioned reference does)
        tn.Session(m["g"], devices=D3).run(m["fetch"], feeds(m, 100), memory_budget=budget)
    stats = run_checked(sess, m, 30, budget)
    assert stats["tier"] == "spmd" and stats["stack_capacity"] == room
    stats = run_checked(sess, m, 30)  # without the budget: the ladder where it was, 64
    assert stats["tier"] == "spmd" and stats["stack_capacity"] == 64
    small = fast(m, stack_chunk=1)  # (11 bytes: not one entry of a stack, on any device, on any route)
    assert any("holds no entry of the SPMD program's stacks" in n
               for n in small.explain(m["fetch"], feeds(m, 1), 11).notes)
    for sess in (small, tn.Session(m["g"], devices=D3)):
        with pytest.raises(tn.ResourceExhaustedError, match=r'loop "fwd"'):
            sess.run(m["fetch"], feeds(m, 1), memory_budget=11)


@pytest.mark.parametrize("swap", [True, False])
def test_an_inner_loop_compiled_on_one_device_inside_a_spanning_loop(swap: bool) -> None:
    """The inner loop's pushes happen inside one segment call, so the host cannot bound them: it reads
    the stack pointers before each such call and moves chunks between calls all the same."""
    m = spanning_rnn(swap=swap, inner=True)
    sess = fast(m)
    stats = run_checked(sess, m, 40)
    moved = stats["stack_chunks_swapped"] if swap else stats["stack_chunks_kept"]
    assert moved > 0 and stats["stack_pointer_reads"] > 0
    if swap:
        assert 0 < stats["stack_chunks_from_host"] < stats["stack_chunks_swapped"]


def test_swapping_in_a_plan_dispatched_from_per_device_workers() -> None:
    m = spanning_rnn(swap=True, sleep=True)
    sess = fast(m)
    stats = run_checked(sess, m, 50)
    assert 0 < stats["stack_chunks_from_host"] < stats["stack_chunks_swapped"]
    assert all(r.peak_device_bytes <= 2 * ONE_CHUNK * 2 for r in by_device(sess).values())


def test_an_xla_out_of_memory_in_a_segment_names_the_loop_and_its_device() -> None:
    """XLA's RESOURCE_EXHAUSTED (a GPU allocator's; CPUs do not raise it here, so a segment is made to)
    becomes ResourceExhaustedError naming the loop whose stacks the segment pushes."""
    import jax

    m = spanning_rnn(swap=False)
    sess = fast(m)
    run_checked(sess, m, 3)
    (plan,) = sess.backend._plans.values()
    pushing = [seg for seg in plan.schedule.segments if seg.traffic]
    assert pushing

    def oom(*args: Any) -> Any:
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1 bytes")

    for seg in pushing:
        seg.fn = oom
    with pytest.raises(tn.ResourceExhaustedError, match=r'device cpu:[12] ran out of memory running loop "fwd"'
                       r'.*swap_memory=True'):
        sess.run(m["fetch"], feeds(m, 3))


_ONE: dict[bool, dict[str, Any]] = {}


def loop_on_one_device(swap: bool) -> dict[str, Any]:
    """A loop and its gradient wholly on cpu:1, read by an op on cpu:0: the loop is compiled on its
    device and run chunk by chunk there (a driven segment), so its stacks can move between calls."""
    if swap not in _ONE:
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.float64, [], name="x")
            n = tn.placeholder(tn.int32, [], name="n")
            with tn.device("cpu:1"):
                _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tn.tanh(y * 1.1) + 0.2),
                                     [tn.constant(0), x], swap_memory=swap, name="fwd")
                (dx,) = tn.gradients(y, [x])
            with tn.device("cpu:0"):
                z = dx * 2.0
        _ONE[swap] = {"g": g, "x": x, "n": n, "fetch": [y, z], "want": {}}
    return _ONE[swap]


@pytest.mark.parametrize("swap", [True, False])
def test_a_loop_compiled_on_one_device_of_a_spanning_graph_moves_its_chunks(swap: bool) -> None:
    m = loop_on_one_device(swap)
    sess = fast(m)
    run_checked(sess, m, 3)
    (one,) = tn.memory_report(sess).records  # one chunk of each stack
    peaks = []
    for steps in (40, 120):
        stats = run_checked(sess, m, steps)
        assert stats["tier"] == "compiled" and stats["stack_capacity_retries"] == 0
        (r,) = tn.memory_report(sess).records
        assert r.loop == "fwd" and r.device == "cpu:1" and r.swap_memory == swap
        stacks = one.peak_device_bytes // ONE_CHUNK
        full = steps // CHUNK
        if swap:
            assert r.peak_device_bytes <= 2 * one.peak_device_bytes
            assert stacks * (full - 1) <= r.chunks_to_host <= stacks * full
            assert r.chunks_from_host == r.chunks_to_host - stacks
            assert r.chunks_kept_on_device == 0
        else:
            assert r.host_bytes == 0 and r.chunks_to_host == 0 and r.chunks_from_host == 0
            assert stacks * (full - 1) <= r.chunks_kept_on_device <= stacks * full
        peaks.append(r.peak_device_bytes)
    assert (peaks[0] == peaks[1]) if swap else (peaks[1] >= 2.5 * peaks[0])
    # the cap names the loop on its device when its chunks stay there; the swapped loop fits under it
    capped = fast(m, device_memory_limit=4 * one.peak_device_bytes)
    if swap:
        run_checked(capped, m, 120)
    else:
        with pytest.raises(tn.ResourceExhaustedError, match=r'loop "fwd".*device cpu:1.*swap_memory=True'):
            capped.run(m["fetch"], feeds(m, 120))


def test_the_spmd_program_keeps_a_swapping_loops_stacks_in_host_memory() -> None:
    """A swapping loop that spans devices in lockstep is the SPMD tier's: one program whose swapping
    stacks' value buffers live in each device's host memory (each push moves its value there, each
    pop brings it back: device_put to the host memory space in the program), within and past the
    first capacity, with the reference's gradients; ``memory_report`` counts them as host bytes, their
    index records on the device. The same loop without ``swap_memory`` keeps them on the device, and a
    ``device_memory_limit`` counts only what stays on the device (``SpmdPlan.room``)."""
    import jax

    from turnout.fast.regions import key

    def host_moves(sess: tn.Session, m: dict[str, Any]) -> int:
        """Moves to the host memory space in the jaxpr of the session's last SPMD program."""
        (whole,) = [w for w in sess.backend._whole.values() if w is not None]
        comp = list(whole._compiled.values())[-1]
        fed = {key(t): np.asarray(v) for t, v in feeds(m, 3).items()}
        args = comp.args.flat(fed, {"err": np.int32(0)}, {}, np.int32(10**6))
        with jax.enable_x64(True):  # (as the program runs: float64 stacks)
            return str(jax.make_jaxpr(comp.fn)(*args)).count("MemorySpace.Host")

    for swap in (True, False):
        m = spanning_rnn(swap=swap, parallel_iterations=1)
        sess = fast(m, whole_program="always")
        for steps in (3, 100):  # (100 outgrows the tier's first capacity, 64: one run again at 128)
            stats = run_checked(sess, m, steps)
            assert stats["tier"] == "spmd", stats.get("whole_program_declined")
            assert stats["stacks_in_host_memory"] == (["fwd"] if swap else [])
        moves = host_moves(sess, m)
        assert moves > 0 if swap else moves == 0, moves
        recs = by_device(sess)
        assert set(recs) == {"cpu:0", "cpu:1", "cpu:2"}  # (every device allocates every stack)
        for r in recs.values():
            assert r.swap_memory is swap and r.chunks_to_host == 0
            cap = stats["stack_capacity"]
            assert r.host_bytes == (3 * cap * 8 if swap else 0)  # three float64 stacks' values
            assert r.device_bytes == r.peak_device_bytes == 3 * cap * 4 + (0 if swap else 3 * cap * 8)
    # index records alone on the device: 3 stacks of 4 bytes an entry, so 12 * 100 bytes hold 100 entries
    m = spanning_rnn(swap=True, parallel_iterations=1)
    limited = fast(m, whole_program="always", device_memory_limit=12 * 100)
    stats = run_checked(limited, m, 90)
    assert stats["tier"] == "spmd" and stats["stack_capacity"] == 100
    assert all(r.device_bytes == 12 * 100 and r.host_bytes == 3 * 8 * 100 for r in by_device(limited).values())


def test_a_gpus_plan_swaps_the_chunks_of_a_loop_over_its_run_budget_on_the_per_device_tiers() -> None:
    """Planned for a GPU (``memory_platform="gpu"``), a loop over the run's budget swaps where the
    CPU's plan rebuilds its gradient to recompute: the per-device tiers move its full stack chunks to
    host memory, and the gradients are the store-everything ones either way."""
    from graphs import power_loop

    g, x, n, y, dx = power_loop(swap_memory=False)
    feeds = {x: 1.0001, n: 60}
    want = tn.Session(g).run([y, dx], feeds)
    spread = {nd.name: f"cpu:{k % 2}" for k, nd in enumerate(g.nodes)}
    for platform, swapped in ((None, False), ("gpu", True)):
        sess = tn.Session(g, backend="fast", devices=D3[:2], requests=spread, whole_program="never",
                          memory_platform=platform)
        np.testing.assert_allclose(sess.run([y, dx], feeds, memory_budget=300), want, rtol=1e-9)
        stats = sess.last_result.stats
        assert stats["tier"] == "host-driven" and bool(stats.get("rebuilt_gradients")) != swapped, stats
        assert (stats["stack_chunks_swapped"] > 0) == swapped, stats
