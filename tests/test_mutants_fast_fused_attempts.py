"""Laws of the fused attempt (``turnout.fast.fused_attempts``) that the backend's runs do not state
on their own: what a traced run shows of it, and how a plan whose stacks' shapes only a trace tells
compiles. Each law kills mutants of the full set of ``fast/fused_attempts.py`` (issue 40, part 3).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from graphs import batch_loop

import turnout as tn

jax = pytest.importorskip("jax")


def _batch_loop() -> tuple[tn.Graph, dict[Any, Any], list[Any]]:
    """A loop over a batch of ``None`` rows and its gradient: stacks whose shapes only a trace tells."""
    g, x, w, loss, gx, gw = batch_loop(3, 3)
    feeds = {x: np.full((2, 3), 0.4, np.float32), w: np.eye(3, dtype=np.float32) * 0.8}
    return g, feeds, [loss, gx, gw]


def test_a_traced_first_run_shows_the_shapes_trace_then_the_one_call_that_compiled() -> None:
    """A traced first run of a plan whose stacks' shapes only a trace tells shows, on the compiled
    stages' track, the trace that learnt them and then the fused attempt's one call, which compiled
    and read an error word of 0; a traced repeat of the general path shows the call alone, compiling
    nothing."""
    g, feeds, fetches = _batch_loop()
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0)
    got = sess.run(fetches, feeds, trace=True)
    names = [s.name for s in sess.last_result.trace.spans if s.track == "compiled stages"]
    assert names == ["fused attempt: its stacks' shapes traced", "fused attempt (whole program, one call)"]
    (call,) = [s for s in sess.last_result.trace.spans if s.name.startswith("fused attempt (")]
    assert call.args["compiled"] is True and call.args["error_word"] == 0
    for a, b in zip(got, tn.Session(g).run(fetches, feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    sess.run(fetches, feeds, trace=True)
    spans = [(s.name, s.args) for s in sess.last_result.trace.spans if s.track == "compiled stages"]
    assert spans == [("fused attempt (whole program, one call)", {"compiled": False, "error_word": 0})]


def test_an_out_of_memory_in_the_fused_call_names_the_backend_and_the_whole_program() -> None:
    """XLA's own out-of-memory in the fused attempt's call (a GPU's allocator: here its error, raised
    by a stand-in of the rung's compiled function) is Turnout's ``ResourceExhaustedError``, naming the
    fast backend, the device and the whole program, and suggesting ``swap_memory``."""
    g, feeds, fetches = _batch_loop()
    sess = tn.Session(g, backend="fast")
    sess.run(fetches, feeds)
    _, rung = sess.backend._last_fused
    assert rung.fused is not None and "seg" in rung.fused.fns

    def out_of_memory(*args: Any) -> Any:
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 1024 bytes.")

    rung.fused.fns["seg"] = out_of_memory
    with pytest.raises(tn.ResourceExhaustedError,
                       match=r"^fast backend: the device ran out of memory running the whole program \(its fused "
                             r"call\): RESOURCE_EXHAUSTED: Out of memory.*swap_memory=True"):
        sess.run(fetches, feeds, trace=True)  # (a traced run takes the general path, not the lane)


def test_a_counted_stack_longer_than_the_first_rung_learns_its_shapes_on_the_rung_that_holds_it() -> None:
    """A loop of a constant 200 iterations over a batch of ``None`` rows: the trace that learns the
    stacks' shapes on the first rung (128 entries) finds the counted stacks longer than the rung, so
    the rung is passed over, not compiled, and the run climbs straight to the first rung that holds
    200 entries, where its shapes are learnt and its one program compiled and run."""
    g, x, w, loss, gx, gw = batch_loop(3, 200)
    feeds = {x: np.full((2, 3), 0.4, np.float32), w: np.eye(3, dtype=np.float32) * 0.8}
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0)
    got = sess.run([loss, gx, gw], feeds)
    stats = sess.last_result.stats
    assert stats["fused"] and stats["stack_capacity"] == 200, stats
    top, rung = sess.backend._last_fused
    assert sorted(top.rungs) == [128, 200] and top.rungs[128].fused is None and not rung.unlearnt_stacks()
    assert sess.backend.compile_count == 3  # refused at 128 as its shapes are learnt; learnt, then compiled, at 200
    for a, b in zip(got, tn.Session(g).run([loss, gx, gw], feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_plan_whose_stacks_the_graph_sizes_is_not_traced_to_learn_them() -> None:
    """The same loop on a batch of 2 rows: the graph says every stack's shapes, so the traced first
    run shows the fused attempt's one call alone, no trace to learn them."""
    g, x, w, loss, gx, gw = batch_loop(3, 3, rows=2)
    feeds = {x: np.full((2, 3), 0.4, np.float32), w: np.eye(3, dtype=np.float32) * 0.8}
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0)
    sess.run([loss, gx, gw], feeds, trace=True)
    names = [s.name for s in sess.last_result.trace.spans if s.track == "compiled stages"]
    assert names == ["fused attempt (whole program, one call)"] and sess.backend.compile_count == 1


def test_a_batch_of_unknown_size_read_with_a_variable_learns_its_shapes_from_the_whole_call() -> None:
    """The trace that learns the stacks' shapes takes the call's whole layout (feeds, the Variables'
    device copies, the stacks): a loop over a batch of ``None`` rows whose weights are a Variable
    learns them, compiles once and trains as the reference does."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 3], name="x")
        w = tn.Variable(np.eye(3, dtype=np.float32) * 0.8, name="w")
        wr = w.read()
        _, h = tn.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, tn.tanh(tn.matmul(h, wr))), [tn.constant(0), x])
        loss = tn.reduce_sum(h * h)
        step = tn.train.SGD(0.1).minimize(loss, var_list=[w])
    feeds = {x: np.full((2, 3), 0.4, np.float32)}
    sess, ref = tn.Session(g, backend="fast", inside_stack_bytes=0), tn.Session(g)
    sess.run([loss, step], feeds, trace=True)
    names = [s.name for s in sess.last_result.trace.spans if s.track == "compiled stages"]
    assert names == ["fused attempt: its stacks' shapes traced", "fused attempt (whole program, one call)"]
    ref.run([loss, step], feeds)
    np.testing.assert_allclose(sess.variables["w"], ref.variables["w"], rtol=1e-5, atol=1e-6)


def test_a_refusal_of_the_trace_that_learns_the_shapes_drops_the_one_call_with_its_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the trace that would learn the stacks' shapes refuses (an ``UnsupportedError`` of the
    fused body: here a stand-in's), the fused stage is dropped at once with that reason, which the
    schedule then gives, and the run takes the stages with the reference's values."""
    from turnout.errors import UnsupportedError
    from turnout.fast.plan import Plan

    def refusing(self: Plan, st: object) -> object:
        def body(*args: object) -> object:
            raise UnsupportedError("refused by the test")

        return body

    monkeypatch.setattr(Plan, "_fused_body", refusing)
    g, feeds, fetches = _batch_loop()
    sess = tn.Session(g, backend="fast")
    got = sess.run(fetches, feeds)
    assert not sess.last_result.stats["fused"]
    assert sess.explain(fetches, feeds).notes == (
        "the whole program as one call was refused when traced (refused by the test): the stages run instead",)
    for a, b in zip(got, tn.Session(g).run(fetches, feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _doubling_loop() -> tuple[tn.Graph, Any, Any, Any, Any]:
    """``y`` doubled while below a fed bound, and dy/dx: a loop whose trip count no feed says, so its
    stacks' entries are known only once the fused attempt has counted them."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        bound = tn.placeholder(tn.float64, [], name="bound")
        _, y = tn.while_loop(lambda i, y: y < bound, lambda i, y: (i + 1, y * x), [tn.constant(0), tn.ones_like(x)])
        (dx,) = tn.gradients(y, [x])
    return g, x, bound, y, dx


def test_a_climb_frees_the_rung_it_outgrew_before_handing_the_memory_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of the general path that outgrows the rung it started on (4 entries, on a ladder of 4, 8
    and 16) drops that
    rung's buffers, then hands the freed memory back once, for the home device's platform, before
    the rung that holds its 12 entries runs; the values are the reference's."""
    from turnout.fast import stacks

    g, x, bound, y, dx = _doubling_loop()
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0, stack_chunk=16, stack_first_rung=4,
                      stack_rung_ratio=2)
    trims: list[tuple[str, list[int]]] = []  # (the platform, the capacities of the buffers held then)

    def trim(platform: str) -> None:
        trims.append((platform, [b["capacity"] for b in sess.backend.stack_buffers()]))

    monkeypatch.setattr(stacks, "return_freed_memory", trim)
    sess.run([y, dx], {x: 2.0, bound: 2.0 ** 3 - 0.5})
    assert [b["capacity"] for b in sess.backend.stack_buffers()] == [4] and trims == []
    feed = {x: 2.0, bound: 2.0 ** 12 - 0.5}
    got = sess.run([y, dx], feed, trace=True)  # (the general path: a repeated run's lane hands an overflow back)
    assert sess.last_result.stats["fused"] and sess.last_result.stats["stack_capacity"] == 16
    assert trims == [(sess.backend._home_device().platform, [])]
    np.testing.assert_allclose(got, tn.Session(g).run([y, dx], feed), rtol=1e-12)

def test_a_run_that_starts_on_a_rung_passed_over_climbs_past_it_without_calling_it() -> None:
    """A rung passed over (the trace that learns the stacks' shapes found the counted stacks longer
    than it: no fused stage) is never called: a later run that starts there (its marks forgotten)
    climbs to the next rung, passed over too, and on to the one that holds the 200 entries, which
    runs the fused program with the reference's values."""
    g, x, w, loss, gx, gw = batch_loop(3, 200)
    feeds = {x: np.full((2, 3), 0.4, np.float32), w: np.eye(3, dtype=np.float32) * 0.8}
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0)
    sess.run([loss, gx, gw], feeds)
    top, _ = sess.backend._last_fused
    assert top.rungs[128].fused is None and top.marks is not None
    top.marks.recent.clear()
    top.rung = None
    assert top.marks.begin() == 128
    got = sess.run([loss, gx, gw], feeds)
    stats = sess.last_result.stats
    assert stats["fused"] and stats["stack_capacity"] == 200, stats
    assert sorted(top.rungs) == [128, 160, 200] and top.rungs[160].fused is None
    for a, b in zip(got, tn.Session(g).run([loss, gx, gw], feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_the_buffers_a_learning_run_allocates_are_kept_for_its_rung_alone() -> None:
    """The stacks whose shapes a trace learnt are allocated before the call and kept between runs
    as the buffers of the rung that ran, and of nothing else: the backend then holds one set of
    buffers, the first rung's (128 entries)."""
    g, feeds, fetches = _batch_loop()
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0)
    sess.run(fetches, feeds)
    _, rung = sess.backend._last_fused
    assert not rung.unlearnt_stacks()
    assert [b["capacity"] for b in sess.backend.stack_buffers()] == [rung.capacity] == [128]

