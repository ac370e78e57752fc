"""``swap_memory`` per loop, the device memory cap, and the runtime memory report (fast backend).

A loop that pushes gradient stacks runs, on the staged path, in chunks of ``stack_chunk`` entries per
stack. With ``swap_memory=True`` each full chunk is copied to host memory and brought back before the
backward loop needs it, so the device holds at most one chunk per stack plus the one whose copy is in
flight, at any trip count. (The fused call keeps such a loop's stacks in host memory up to
``host_stack_limit`` pushes, ``tests/test_fast_host_stacks.py``; the sessions here set that limit
to the chunk, so that a run longer than one chunk takes the staged path.) With ``swap_memory=False``
(the default) full chunks stay on the device: the stack
grows there and nothing is copied to the host. ``device_memory_limit`` caps the stack bytes on the
device; crossing it is ``ResourceExhaustedError`` naming the loop. The figures asserted are the
backend's own accounting, read through ``tn.memory_report(session)``.
"""

from __future__ import annotations

from typing import Any

import graphs
import numpy as np
import pytest

import turnout as tn
from turnout.errors import ResourceExhaustedError

jax = pytest.importorskip("jax")

#: the default device, as memory reports name it ('cpu:0', 'gpu:0')
DEVICE = f"{jax.devices()[0].platform}:{jax.devices()[0].id}"

CHUNK = 16
PER_ENTRY = 8 + 4  # a float64 value and its int32 iteration index (one enclosing loop)


def rnn(swap: bool, nested: bool = False) -> dict[str, Any]:
    """``h <- tanh(h W + x_t)`` over a fed sequence, loss ``sum(h*h)``, gradients w.r.t. ``W`` and
    ``h0``. ``nested``: each step also runs an inner loop of ``t mod 3`` extra tanh steps (irregular
    pushes per outer iteration), in its own loop with the opposite ``swap_memory``."""
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float64, [None, 2], name="xs")
        n = tn.placeholder(tn.int32, [], name="n")
        h0 = tn.placeholder(tn.float64, [1, 2], name="h0")
        w = tn.Variable(np.array([[0.6, -0.3], [0.2, 0.5]]), name="w")
        wr = w.read()

        def body(t: Any, h: Any) -> Any:
            h2 = tn.tanh(tn.matmul(h, wr) + tn.reshape(xs[t], [1, 2]))
            if nested:
                _, h2 = tn.while_loop(lambda j, v: j < tn.mod(t, 3), lambda j, v: (j + 1, tn.tanh(v) * 0.9),
                                      [tn.constant(0), h2], swap_memory=not swap, name="inner")
            return t + 1, h2

        _, h = tn.while_loop(lambda t, h: t < n, body, [tn.constant(0), h0], swap_memory=swap, name="rnn")
        loss = tn.reduce_sum(h * h)
        dw, dh0 = tn.gradients(loss, [w, h0])
    return {"g": g, "xs": xs, "n": n, "h0": h0, "fetch": [loss, dw, dh0]}


_MODELS: dict[tuple[bool, bool, int], dict[str, Any]] = {}


def model(swap: bool, nested: bool = False, chunk: int = CHUNK) -> dict[str, Any]:
    """``rnn`` with a reference session and a fast one, built once per module: a new trip count
    runs the same compiled plan, so the trip-count cases below pay for compiling once."""
    k = (swap, nested, chunk)
    if k not in _MODELS:
        m = rnn(swap, nested)
        m["ref"] = tn.Session(m["g"])
        m["fast"] = tn.Session(m["g"], backend="fast", stack_chunk=chunk, host_stack_limit=chunk)
        _MODELS[k] = m
    return _MODELS[k]


def feed(m: dict[str, Any], steps: int) -> dict[Any, Any]:
    """Inputs padded to 300 steps, ``n`` of them used: one feed signature, one compiled plan."""
    rng = np.random.default_rng(steps)
    return {m["xs"]: rng.normal(size=(300, 2)) * 0.5, m["n"]: steps, m["h0"]: rng.normal(size=(1, 2))}


def stack_bytes_per_chunk(g: tn.Graph, frame_loop: str, chunk: int, records: bool = True) -> int:
    """One chunk of every stack of the loop named ``frame_loop``: values and, with ``records``, their
    int32 iteration indices (a run in one fused call checks these stacks by position and keeps no
    record: ``fast.plan.positional_stacks``)."""
    rep = tn.memory_report(g).loop(frame_loop)
    return sum(chunk * (s.bytes_per_iteration + 4 * records) for s in rep.stacked)  # type: ignore[operator]


def run_rnn(swap: bool, steps: int) -> tuple[dict[str, Any], tn.Session, Any, int]:
    """Run the RNN's gradient for ``steps`` on the fast backend, check it against the reference, and
    return (the model, the fast session, the loop's memory record, one chunk of its stacks in bytes)."""
    m = model(swap=swap)
    f = feed(m, steps)
    want = m["ref"].run(m["fetch"], f)
    sess = m["fast"]
    got = sess.run(m["fetch"], f)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    (rec,) = tn.memory_report(sess).loop("rnn")
    return m, sess, rec, stack_bytes_per_chunk(m["g"], "rnn", CHUNK)


@pytest.mark.parametrize("steps", [10, 64, 200])
def test_swapped_loop_holds_one_chunk_per_stack_on_the_device(steps: int) -> None:
    m, sess, rec, one_chunk = run_rnn(True, steps)
    assert rec.device == DEVICE and rec.swap_memory is True
    if steps <= CHUNK:  # the fused call: every stack in host memory, nothing on the device
        assert sess.last_result.stats["fused"] and rec.peak_device_bytes == 0 and rec.host_bytes > 0
        assert rec.chunks_to_host == rec.chunks_from_host == 0
        return
    assert 0 < rec.peak_device_bytes <= 2 * one_chunk  # the chunk being filled + the one in flight
    stacks = len(tn.memory_report(m["g"]).loop("rnn").stacked)
    full = steps // CHUNK - (1 if steps % CHUNK == 0 else 0)  # the last chunk never leaves the loop state
    assert rec.chunks_to_host == full * stacks  # counted per stack
    # the newest chunk of each stack comes back from the device copy it was made from (``end_pushes``)
    assert rec.chunks_from_host == max(full - 1, 0) * stacks
    assert rec.host_bytes == full * one_chunk and rec.chunks_kept_on_device == 0
    assert sess.last_result.stats["stack_chunks_swapped"] == full * stacks


def test_swapped_device_memory_does_not_grow_with_the_trip_count() -> None:
    g, x, n, y, dx = graphs.power_loop(swap_memory=True)
    sess = tn.Session(g, backend="fast", stack_chunk=64, host_stack_limit=64)
    peaks = []
    for steps in (200, 2_000, 8_000):
        yv, dv = sess.run([y, dx], {x: 1.0001, n: steps})
        np.testing.assert_allclose([yv, dv], [1.0001**steps, steps * 1.0001 ** (steps - 1)], rtol=1e-9)
        (rec,) = tn.memory_report(sess).records
        assert rec.chunks_to_host >= steps // 64 - 1 and rec.host_bytes >= (steps - 64) * PER_ENTRY
        peaks.append(rec.peak_device_bytes)
    assert peaks[0] == peaks[1] == peaks[2] <= 2 * 64 * PER_ENTRY


@pytest.mark.parametrize("steps", [10, 100])
def test_unswapped_stacks_never_leave_the_device(steps: int) -> None:
    m, sess, rec, one_chunk = run_rnn(False, steps)
    assert rec.swap_memory is False and rec.chunks_to_host == 0 and rec.chunks_from_host == 0
    assert rec.host_bytes == 0 and sess.last_result.stats["stack_chunks_swapped"] == 0
    chunks = -(-steps // CHUNK)
    assert rec.chunks_kept_on_device == (chunks - 1) * len(tn.memory_report(m["g"]).loop("rnn").stacked)
    if chunks == 1:  # one fused call: no index records (positional stacks)
        assert sess.last_result.stats["fused"]
        one_chunk = stack_bytes_per_chunk(m["g"], "rnn", CHUNK, records=False)
    assert rec.device_bytes == rec.peak_device_bytes == chunks * one_chunk  # grown on the device


def test_nested_loops_with_irregular_pushes() -> None:
    """Inner trip counts 0, 1, 2, ...: chunks end at uneven points and the backward loop refills a
    buffer that still has entries (rows are merged below them, LIFO order kept). The outer loop
    swaps, the inner one does not: each stack follows its own loop's ``swap_memory``."""
    m = model(swap=True, nested=True, chunk=8)
    f = feed(m, 24)
    want = m["ref"].run(m["fetch"], f)
    sess = m["fast"]
    got = sess.run(m["fetch"], f)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    rep = tn.memory_report(sess)
    assert {r.loop for r in rep.records} == {"rnn", "rnn/body/inner"}
    (outer,) = rep.loop("rnn")
    (inner,) = rep.loop("rnn/body/inner")
    # copied back: every chunk but the newest of each stack (kept on the device by end_pushes), a
    # partly consumed chunk counted at each refill it serves
    assert outer.chunks_to_host > 0 and outer.chunks_from_host > 0
    assert outer.chunks_kept_on_device == 0 and outer.host_bytes > 0
    assert inner.chunks_to_host == inner.chunks_from_host == inner.host_bytes == 0
    assert inner.chunks_kept_on_device > 0


def test_the_device_memory_cap_names_the_unswapped_loop() -> None:
    steps, chunk = 64 * 10, 64
    limit = 4 * chunk * PER_ENTRY  # room for four chunks of the power loop's one stack
    g, x, n, y, dx = graphs.power_loop(swap_memory=False)
    sess = tn.Session(g, backend="fast", stack_chunk=chunk, device_memory_limit=limit)
    np.testing.assert_allclose(sess.run([y, dx], {x: 1.5, n: 3 * chunk}), [1.5 ** 192, 192 * 1.5**191])
    with pytest.raises(ResourceExhaustedError, match=r'loop "while".*created at .*graphs\.py.*swap_memory=True'):
        sess.run([y, dx], {x: 1.0001, n: steps})

    g, x, n, y, dx = graphs.power_loop(swap_memory=True)
    sess = tn.Session(g, backend="fast", stack_chunk=chunk, device_memory_limit=limit, host_stack_limit=chunk)
    yv, dv = sess.run([y, dx], {x: 1.0001, n: steps})
    np.testing.assert_allclose([yv, dv], [1.0001**steps, steps * 1.0001 ** (steps - 1)], rtol=1e-9)
    (rec,) = tn.memory_report(sess).records
    assert rec.peak_device_bytes <= limit and rec.chunks_to_host >= 8


def test_a_cap_below_two_chunks_stops_a_swapped_loop_with_advice() -> None:
    g, x, n, y, dx = graphs.power_loop(swap_memory=True)
    sess = tn.Session(g, backend="fast", stack_chunk=64, device_memory_limit=64 * PER_ENTRY + 1, host_stack_limit=64)
    with pytest.raises(ResourceExhaustedError, match="lower stack_chunk"):
        sess.run([y, dx], {x: 1.5, n: 200})
    # one chunk of a loop that does not swap does not fit (a run of one fused call: its stacks are
    # checked by position and hold values alone, no index record)
    g, x, n, y, dx = graphs.power_loop(swap_memory=False)
    sess = tn.Session(g, backend="fast", stack_chunk=64, device_memory_limit=64 * 8 - 1)
    with pytest.raises(ResourceExhaustedError, match="device_memory_limit"):
        sess.run([y, dx], {x: 1.5, n: 10})


def test_the_cap_is_validated_and_rejected_where_it_cannot_be_honoured() -> None:
    g = graphs.power_loop().g
    for bad in (0, -5, 1.5, True, "1GB"):
        with pytest.raises(ValueError, match="device_memory_limit"):
            tn.Session(g, backend="fast", device_memory_limit=bad)
    for name in ("reference", "smallstep"):
        with pytest.raises(TypeError, match="device_memory_limit"):
            tn.Session(g, backend=name, device_memory_limit=2**20)


def test_xla_out_of_memory_becomes_resource_exhausted_naming_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU the allocator itself may run out first; XLA's RESOURCE_EXHAUSTED is translated."""
    import jax

    from turnout.fast import stacks

    def oom(self: Any, *args: Any) -> Any:
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB.")

    monkeypatch.setattr(stacks.ChunkStore, "spill", oom)
    g, x, n, y, dx = graphs.power_loop()
    sess = tn.Session(g, backend="fast", stack_chunk=8)
    with pytest.raises(ResourceExhaustedError, match=r'ran out of memory running loop "while".*swap_memory=True'):
        sess.run([y, dx], {x: 1.5, n: 100})


def test_memory_report_of_a_session() -> None:
    g, x, n, y, dx = graphs.power_loop(swap_memory=True)
    ref = tn.Session(g)
    ref.run([y, dx], {x: 1.5, n: 5})
    rep = tn.memory_report(ref)
    assert rep.records == [] and "no gradient stacks" in rep.summary()
    assert rep.static.loop("while").swap_memory is True
    fast = tn.Session(g, backend="fast", stack_chunk=4, host_stack_limit=4)
    fast.run([y, dx], {x: 1.5, n: 30})
    rep = tn.memory_report(fast)
    assert [r.loop for r in rep.records] == ["while"] and "chunks to host" in str(rep)
    rows = fast.backend.memory_records()
    assert set(rows[0]) >= {"loop", "device", "device_bytes", "host_bytes", "chunks_to_host", "chunks_from_host",
                            "peak_device_bytes"}
    fast = tn.Session(g, backend="fast", stack_chunk=4, host_stack_limit=4)
    fast.run([y, dx], {x: 1.5, n: 2})  # fits one chunk: the fused path, its stack in host memory, no chunk moved
    (rec,) = tn.memory_report(fast).records
    assert rec.chunks_to_host == 0 and rec.device_bytes == rec.peak_device_bytes == 0 and rec.host_bytes == 4 * 8
    with pytest.raises(TypeError, match="Graph or a Session"):
        tn.memory_report(42)


def test_a_swapped_chunk_is_copied_to_host_memory_and_back() -> None:
    """The store itself: a spilled chunk lives in the device's host memory kind (where the platform
    has one), the next empty buffer is the spare of the previous spill, and the backward loop gets
    the chunks back newest first, whole, with their pointers."""
    import jax
    import jax.numpy as jnp

    from turnout.fast import stacks

    store = stacks.ChunkStore({"s": stacks.StackInfo("l", 'loop "l"', True)})

    def full(value: float) -> Any:
        buf = jax.device_put(jnp.full((4, 3), value, jnp.float32), jax.devices()[0])
        idx = jax.device_put(jnp.arange(4, dtype=jnp.int32).reshape(4, 1), jax.devices()[0])
        return stacks.StackValue(4, np.float32, buf, idx, stacks.scalar_on(buf, 4))

    first = full(1.0)
    empty = store.spill({"s": first})["s"]
    assert int(empty.ptr) == 0 and empty.buf is not first.buf
    second = full(2.0)
    empty2 = store.spill({"s": second})["s"]
    assert empty2.buf is first.buf  # the spare, reused once its copy was done
    kinds = {m.kind for m in jax.devices()[0].addressable_memories()}
    for chunk, want in zip(store.chunks["s"], (1.0, 2.0), strict=True):
        buf, _ = chunk.data.get()
        if "pinned_host" in kinds and jax.devices()[0].platform != "cpu":  # a CPU copies through numpy
            assert buf.sharding.memory_kind == "pinned_host"
        np.testing.assert_array_equal(np.asarray(buf), np.full((4, 3), want))
    (lg,) = store.ledgers.values()
    assert lg.to_host == 2 and lg.host == 2 * first.nbytes()
    store.end_pushes(["s"])
    store.begin_pops({"s": empty2})
    for want in (2.0, 1.0):
        low = stacks.StackValue(4, np.float32, empty2.buf, empty2.idx, stacks.scalar_on(empty2.buf, 0))
        back = store.refill({"s": low})["s"]
        assert int(back.ptr) == 4
        np.testing.assert_array_equal(np.asarray(back.buf), np.full((4, 3), want))
    # the newest chunk (2.0) is taken from its device buffer, kept by end_pushes; only the older one is copied back
    assert lg.from_host == 1 and lg.host == 0 and not store.has("s")


def test_the_driver_reads_each_chunks_scalars_back_as_one_vector(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between chunks the host decides what to swap from the error word, the predicate, the
    iteration count and every stack's pointer and per-iteration count: one read-back per chunk
    (``stacks.ChunkReport``), not one per scalar, whatever the number of stacks. Runs the nested RNN
    (two loops' stacks) on the staged path and counts the scalars read back one by one."""
    from jax._src import array as jarray

    from turnout.fast import stacks as stk

    m = model(swap=True, nested=True)
    f = feed(m, 120)
    want = m["ref"].run(m["fetch"], f)
    m["fast"].run(m["fetch"], f)  # (compiles)
    reports: list[stk.ChunkReport] = []
    read = stk.ChunkReport.read

    def spy(*args: Any) -> stk.ChunkReport:
        reports.append(read(*args))
        return reports[-1]

    scalars = {"n": 0}
    value = jarray.ArrayImpl._value

    def counted(self: Any) -> Any:
        scalars["n"] += self.ndim == 0
        return value.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(stk.ChunkReport, "read", staticmethod(spy))
    monkeypatch.setattr(jarray.ArrayImpl, "_value", property(counted))
    got = m["fast"].run(m["fetch"], f)
    monkeypatch.undo()
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    stats = m["fast"].last_result.stats
    assert not stats["fused"] and stats["stack_chunks_swapped"] > 0
    assert len(reports) >= 2 * (120 // CHUNK)  # the forward loop's chunks and the backward loop's
    assert any(r.ptr and max(r.ptr.values()) > 0 for r in reports)
    # the error word after each stage and the run's (7 here): before, about 4 per stack and chunk
    assert scalars["n"] <= 10 < len(reports)


def test_a_chunk_report_decides_which_stacks_spill_and_which_refill() -> None:
    """``ChunkReport`` reads the vector ``report_vector`` lays out (error word, predicate, count, then
    per pushed stack its pointer and growth, per popped stack its pointer and shrinkage) and decides
    from it alone: a pushed stack spills when one more iteration might not fit, and only if it holds
    entries; a popped stack refills when one more iteration might empty it and the store has more."""
    from turnout.fast import stacks as stk

    push = {"stack:a": 1, "stack:b": 0}
    pop = {"stack:c": 1}
    vec = np.array([0, 1, 7, 15, 1, 0, 3, 1, 2], np.int32)
    r = stk.ChunkReport.read(vec, push, pop)
    assert (r.err, r.pred, r.iters) == (0, True, 7)
    assert r.ptr == {"stack:a": 15, "stack:b": 0, "stack:c": 1} and r.grow == {"stack:a": 1, "stack:b": 3}
    assert r.shrink == {"stack:c": 2} and not r.stopped(100) and r.stopped(7)
    assert stk.ChunkReport.read(np.array([3, 1, 0, 0, 0, 0, 0, 0, 0], np.int32), push, pop).stopped(100)
    assert stk.ChunkReport.read(np.array([0, 0, 1, 0, 0, 0, 0, 0, 0], np.int32), push, pop).stopped(100)
    state = {k: stk.StackValue(16, np.float32).materialize((2,), (1,)) for k in [*push, *pop]}
    assert list(r.full(push, state, 15)) == ["stack:a"]  # 15 + 1 > 15; b is empty
    assert list(r.full(push, state, 16)) == []  # 15 + 1 fits
    assert list(r.full({"stack:a": 2}, state, 16)) == ["stack:a"]  # the static count bounds it too
    one = stk.ChunkReport.read(np.array([0, 1, 1, 1, 16, 0, 0, 0, 0], np.int32), push, pop)
    assert list(one.full(push, state, 16)) == ["stack:a"]  # one entry, and an iteration may push 16
    # an empty stack is never full, even when one iteration may push more than a chunk holds (the
    # driver then retries with a larger capacity: spilling nothing would loop for ever)
    empty = stk.ChunkReport.read(np.array([0, 1, 1, 0, 32, 0, 0, 0, 0], np.int32), push, pop)
    assert list(empty.full(push, state, 16)) == []

    class Store:
        def __init__(self, has: bool) -> None:
            self.has_more = has

        def has(self, k: str) -> bool:
            return self.has_more

    assert list(r.low(pop, state, Store(True))) == ["stack:c"]  # 1 < shrink 2
    enough = stk.ChunkReport.read(np.array([0, 1, 7, 15, 1, 0, 3, 2, 2], np.int32), push, pop)
    assert list(enough.low(pop, state, Store(True))) == []  # 2 entries: one more iteration's pops fit
    assert list(r.low(pop, state, Store(False))) == []
    pending = {**state, "stack:c": stk.StackValue(16, np.float32)}
    assert list(r.low(pop, pending, Store(True))) == []


def test_the_report_vector_lays_out_what_the_chunk_report_reads() -> None:
    """``report_vector`` (traced inside a chunk) and ``ChunkReport.read`` agree on the layout, and a
    stack still pending (no buffer yet) reports pointer 0."""
    import jax.numpy as jnp

    from turnout.fast import stacks as stk

    live = stk.StackValue(16, np.float32).materialize((2,), (1,))
    live = stk.StackValue(16, np.float32, live.buf, live.idx, jnp.int32(5))
    state = {"err": jnp.int32(0), "stack:a": live, "stack:b": stk.StackValue(16, np.float32),
             "stack:c": stk.StackValue(16, np.float32, live.buf, live.idx, jnp.int32(3))}
    aux = ({"stack:a": jnp.int32(2), "stack:b": jnp.int32(0)}, {"stack:c": jnp.int32(1)})
    vec = stk.report_vector((None, jnp.bool_(True), state, jnp.int32(9)), aux,
                            {"stack:a": 1, "stack:b": 1}, {"stack:c": 1})
    assert vec.dtype == jnp.int32 and np.asarray(vec).tolist() == [0, 1, 9, 5, 2, 0, 0, 3, 1]
    r = stk.ChunkReport.read(vec, {"stack:a": 1, "stack:b": 1}, {"stack:c": 1})
    assert r.ptr == {"stack:a": 5, "stack:b": 0, "stack:c": 3} and r.grow["stack:a"] == 2 and r.shrink["stack:c"] == 1
