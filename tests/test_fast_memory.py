"""Gradient stacks of a ``swap_memory=True`` loop stay within the configured chunk on the device,
whatever the trip count.

The loop ``y <- y * x`` run N = 100,000 times gives ``y = x**N`` and ``dy/dx = N x**(N-1)``; its
gradient needs every ``y_k`` (pushed by the forward loop, popped in reverse by the backward loop).
With ``stack_chunk=C`` the device holds at most C entries per stack plus the chunk whose copy to the
host is in flight, the rest is swapped to host memory in about N / C chunks, and the gradient is the
same as with one chunk big enough for all.
The numbers asserted are the executor's own accounting (``RunResult.stats``).
"""

from __future__ import annotations

import graphs
import numpy as np
import pytest

import turnout as tn

pytest.importorskip("jax")

N = 100_000
CHUNK = 2_000


def test_device_stack_memory_is_bounded_by_the_chunk() -> None:
    g, x, n, y, dx = graphs.power_loop(swap_memory=True)
    xv = 1.0 + 1e-6
    sess = tn.Session(g, backend="fast", stack_chunk=CHUNK)
    yv, dv = sess.run([y, dx], {x: xv, n: N})
    stats = sess.last_result.stats
    np.testing.assert_allclose([yv, dv], [xv**N, N * xv ** (N - 1)], rtol=1e-9)

    stacks = sum(1 for node in g.nodes if node.op == "StackNew")
    per_entry = 8 + 4  # a float64 value and its int32 iteration index (one enclosing loop)
    assert stacks >= 1
    assert 0 < stats["peak_device_stack_bytes"] <= 2 * stacks * CHUNK * per_entry  # filling + in flight
    assert stats["stack_chunks_swapped"] >= N // CHUNK - 1
    assert stats["peak_host_stack_bytes"] >= (N - CHUNK) * 8

    # the device footprint does not grow with the trip count
    sess.run([y, dx], {x: xv, n: 10 * CHUNK})
    assert sess.last_result.stats["peak_device_stack_bytes"] == stats["peak_device_stack_bytes"]

    # one chunk for everything: no swaps, the same gradient
    whole = tn.Session(g, backend="fast", stack_chunk=N + 1)
    yw, dw = whole.run([y, dx], {x: xv, n: N})
    assert whole.last_result.stats["stack_chunks_swapped"] == 0
    assert whole.last_result.stats["peak_device_stack_bytes"] > stats["peak_device_stack_bytes"]
    assert float(yw) == float(yv) and float(dw) == float(dv)


def test_stack_buffers_held_between_runs_can_be_freed() -> None:
    """By default the stack chunk stays on the device for the next run; ``keep_stack_buffers=False``
    frees it after every run and ``release_buffers()`` frees it on demand, with the same results."""
    g, x, n, y, dx = graphs.power_loop()
    feed = {x: 1.5, n: 20}
    chunk = 64
    kept = tn.Session(g, backend="fast", stack_chunk=chunk, inside_stack_bytes=0)  # every stack kept
    want = kept.run([y, dx], feed)
    np.testing.assert_allclose(want, [1.5**20, 20 * 1.5**19])
    held = kept.backend.held_bytes()
    # at least one stack of float64 values (the fused stage keeps no index record between runs)
    assert held >= chunk * 8
    kept.backend.release_buffers()
    assert kept.backend.held_bytes() == 0
    np.testing.assert_allclose(kept.run([y, dx], feed), want)  # runs again after a release
    assert kept.backend.held_bytes() == held

    freed = tn.Session(g, backend="fast", stack_chunk=chunk, keep_stack_buffers=False)
    for _ in range(2):
        np.testing.assert_allclose(freed.run([y, dx], feed), want)
        assert freed.backend.held_bytes() == 0
    with pytest.raises(ValueError, match="keep_stack_buffers"):
        tn.Session(g, backend="fast", keep_stack_buffers="no")


# ---- the fused attempt's capacity ladder (``FastBackend._run_fused_sized``) ----------------------------
def test_the_capacity_ladder_of_a_chunk() -> None:
    from turnout.fast.plan import capacity_ladder

    assert capacity_ladder(1024) == [128, 1024]
    assert capacity_ladder(8192) == [128, 1024, 8192]
    assert capacity_ladder(4096) == [512, 4096]
    assert capacity_ladder(1000) == [1000]  # not a multiple of the ratio: one rung
    assert capacity_ladder(64) == [64]


def test_stack_buffers_are_sized_to_the_runs_that_use_them() -> None:
    """With the default ``stack_chunk`` (1024), a loop of 50 iterations runs and keeps its stacks at
    the lower rung (128 entries); a run of 500 climbs to 1024 (one more compilation), and later runs of
    either length compile nothing. Every rung gives the reference backend's values."""
    g, x, n, y, dx = graphs.power_loop()
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0)  # every stack kept, however small
    ref = tn.Session(g, backend="reference")
    stacks = sum(1 for node in g.nodes if node.op == "StackNew")
    # a float64 value: the index records (int32 per entry) exist only within each fused call
    per_entry = 8

    def run(trips: int) -> None:
        feed = {x: 1.001, n: trips}
        np.testing.assert_allclose(sess.run([y, dx], feed), ref.run([y, dx], feed), rtol=1e-12)
        assert sess.last_result.stats["fused"] is True

    run(50)
    assert sess.last_result.stats["stack_capacity"] == 128
    small = sess.backend.held_bytes()
    assert stacks * 128 * per_entry <= small < stacks * 1024 * per_entry
    compiles = sess.backend.compile_count
    run(100)
    assert sess.backend.compile_count == compiles  # a trip count on a compiled rung
    run(500)
    assert sess.last_result.stats["stack_capacity"] == 1024
    assert sess.backend.compile_count == compiles + 1  # the top rung, once
    assert sess.backend.held_bytes() >= stacks * 1024 * per_entry  # the lower rung's buffers are gone
    assert sess.backend.held_bytes() < stacks * 1024 * per_entry + small
    compiles = sess.backend.compile_count
    run(50)
    run(700)
    assert sess.backend.compile_count == compiles
    assert sess.last_result.stats["stack_capacity"] == 1024  # the ladder climbs; it does not descend


def test_precompile_staged_keeps_one_rung() -> None:
    """``precompile_staged=True`` promises that no run after the first compiles: its plans have no
    lower rung to climb from."""
    g, x, n, y, dx = graphs.power_loop()
    sess = tn.Session(g, backend="fast", precompile_staged=True)
    sess.run([y, dx], {x: 1.001, n: 50})
    assert sess.last_result.stats["stack_capacity"] == 1024
    compiles = sess.backend.compile_count
    sess.run([y, dx], {x: 1.001, n: 900})
    assert sess.backend.compile_count == compiles
