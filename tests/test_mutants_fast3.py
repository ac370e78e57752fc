"""Fast-backend behaviour that the seed-4 mutation campaigns found unchecked (``tools/mutation.py``,
see docs/checking.rst): the gradient stacks' chunk store (``fast/stacks.py``: which loop a device
memory cap error names and what needed the bytes, the accounting of a chunk copied back from host
memory when the backward loop reaches it, the copier thread).

Each test runs the fast backend with ``fallback=False`` where a graph could fall back: a program the
fast backend refuses must fail the test, not quietly run on the reference interpreter and pass.
"""

from __future__ import annotations

import threading

import graphs
import numpy as np
import pytest

import turnout as tn
from turnout.errors import ResourceExhaustedError

pytest.importorskip("jax")

PER_ENTRY = 8 + 4  # a float64 value of the power loop and its int32 iteration index


# ---- fast/stacks.py: the chunk store ------------------------------------------------------------------
@pytest.mark.parametrize("swap, chunk, limit, steps, what", [
    # one chunk does not fit at all: the buffers in the loop state are over the cap (ChunkStore.observe)
    (True, 64, 64 * PER_ENTRY - 1, 10, "its stack buffers"),
    # a swapped stack needs a second buffer while its full chunk is copied out (ChunkStore._swap_out)
    (True, 64, 64 * PER_ENTRY + 1, 200, "a second buffer while a full chunk is copied to host memory"),
    # an unswapped stack keeps full chunks on the device until they no longer fit (ChunkStore.spill)
    (False, 64, 4 * 64 * PER_ENTRY, 640, "a new device chunk: swap_memory=False keeps full chunks on the device"),
])
def test_each_device_memory_cap_error_names_the_loop_its_device_and_what_needed_the_bytes(
        swap: bool, chunk: int, limit: int, steps: int, what: str) -> None:
    """A cap error must say which loop's stacks crossed it, on which device, how many bytes they
    needed and what asked for them: without the loop a user cannot tell which ``swap_memory`` to set."""
    g, x, n, y, dx = graphs.power_loop(swap_memory=swap)
    sess = tn.Session(g, backend="fast", stack_chunk=chunk, device_memory_limit=limit, fallback=False)
    with pytest.raises(ResourceExhaustedError) as info:
        sess.run([y, dx], {x: 1.5, n: steps})
    msg = str(info.value)
    assert 'the gradient stacks of loop "while"' in msg and "graphs.py" in msg
    assert f"on device cpu:0 ({what}), over device_memory_limit={limit} bytes" in msg
    need = int(msg.split(" need ")[1].split(" bytes")[0])
    assert need > limit


def test_an_inner_swapped_loop_refilled_from_several_host_chunks_keeps_its_accounting() -> None:
    """Irregular inner trip counts leave partly full chunks; a backward refill that needs more rows
    than the newest chunk holds takes the next one too, copied back on demand (only the newest is
    prefetched). That copy is counted on its own stack: every row of the memory report belongs to a
    loop of the program, every chunk sent to the host comes back, and nothing is left on the host."""
    import test_swap_memory as sm

    m = sm.rnn(swap=False, nested=True)  # the inner loop swaps, the outer one keeps its chunks
    ref = tn.Session(m["g"])
    sess = tn.Session(m["g"], backend="fast", stack_chunk=8, fallback=False)
    for steps in (24, 60):
        f = sm.feed(m, steps)
        for a, b in zip(sess.run(m["fetch"], f), ref.run(m["fetch"], f), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
        rows = {r.loop: r for r in tn.memory_report(sess).records}
        assert set(rows) == {"rnn", "rnn/body/inner"}
        inner = rows["rnn/body/inner"]
        assert inner.swap_memory is True and inner.chunks_to_host > 0
        assert inner.chunks_from_host == inner.chunks_to_host
        assert rows["rnn"].chunks_to_host == rows["rnn"].chunks_from_host == 0
        stats = sess.last_result.stats
        assert stats["stack_chunks_swapped"] == stats["stack_chunks_from_host"] == inner.chunks_to_host


def test_stack_chunks_are_copied_by_one_named_worker_thread() -> None:
    """The copies to and from host memory run on one worker thread (in order: a chunk's copy out
    before its copy back), named so that a profiler or a thread dump shows what it is."""
    g, x, n, y, dx = graphs.power_loop(swap_memory=True)
    sess = tn.Session(g, backend="fast", stack_chunk=8, fallback=False)
    yv, dv = sess.run([y, dx], {x: 1.01, n: 50})
    np.testing.assert_allclose([yv, dv], [1.01**50, 50 * 1.01**49], rtol=1e-9)
    assert sess.last_result.stats["stack_chunks_swapped"] > 0
    copiers = [t for t in threading.enumerate() if t.name.startswith("turnout-stack-copy")]
    assert len(copiers) == 1 and copiers[0] is not threading.current_thread()
