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
    kept = tn.Session(g, backend="fast", stack_chunk=chunk)
    want = kept.run([y, dx], feed)
    np.testing.assert_allclose(want, [1.5**20, 20 * 1.5**19])
    held = kept.backend.held_bytes()
    assert held >= chunk * (8 + 4)  # at least one stack of float64 values and int32 indices
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
