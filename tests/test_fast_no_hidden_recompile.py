"""A repeated run of a compiled plan compiles nothing: no retrace, and no XLA compilation either.

Why a test of its own: ``FastBackend.compile_count`` counts traces, and a plan can be recompiled by
XLA without being retraced. A compiled function's cache key includes whether each argument array is
*committed* to its device; the outputs of a compiled call are committed, and the next run passes them
back (kept gradient stack buffers, a Variable's device copy). Fresh arrays were not committed, so the
second run of every plan with Variables or stacks compiled the whole program again (about 1 s for a
small LSTM step, invisible in ``compile_count``). JAX's monitoring events count real compilations.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from graphs import batch_loop

import turnout as tn

jax = pytest.importorskip("jax")


@contextmanager
def xla_compilations() -> Iterator[list[str]]:
    """The compilations JAX performs inside the block (one entry each): a backend compilation, or an
    executable read back from the persistent compilation cache (which the test suite turns on,
    ``tests/conftest.py``), both of which a run that reuses its executables never asks for."""
    import jax.monitoring as monitoring

    seen: list[str] = []

    def listen(name: str, duration: float, **kwargs: Any) -> None:
        if name in ("/jax/core/compile/backend_compile_duration", "/jax/compilation_cache/cache_retrieval_time_sec"):
            seen.append(name)

    monitoring.register_event_duration_secs_listener(listen)
    try:
        yield seen
    finally:
        monitoring.unregister_event_duration_listener(listen)


def _rnn_training_step(rows: int = 4, width: int = 3, w0: Any = None, steps: int = 5
                       ) -> tuple[tn.Graph, dict[Any, Any], list[Any]]:
    """A loop over a fed number of steps (``steps``), its gradient (stacks) and an SGD update of two
    Variables, on a ``rows`` x ``width`` input; ``w0``: the weights' initial value (default: half
    the identity)."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        x = tn.placeholder(tn.float32, [rows, width], name="x")
        w = tn.Variable(np.eye(width, dtype=np.float32) * 0.5 if w0 is None else w0, name="w")
        b = tn.Variable(np.zeros(width, np.float32), name="b")
        wr, br = w.read(), b.read()
        _, h = tn.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tn.tanh(tn.matmul(h, wr) + br)),
                             [tn.constant(0), x])
        loss = tn.reduce_sum(h * h)
        step = tn.train.SGD(0.1).minimize(loss, var_list=[w, b])
    return g, {n: steps, x: np.ones((rows, width), np.float32)}, [loss, step]


def _rnn_gradient() -> tuple[tn.Graph, dict[Any, Any], list[Any]]:
    """The loss of a loop over a fed number of steps and its gradient (stacks), Variables only read."""
    g, feeds, fetches = _rnn_training_step()
    with g.as_default():
        wr = next(n for n in g.nodes if n.op == "ReadVariable").outputs[0]
        (dw,) = tn.gradients(fetches[0], [wr])
    return g, feeds, [fetches[0], dw]


@pytest.mark.parametrize("stack_chunk", [1024, 2])
def test_the_second_run_of_a_gradient_compiles_nothing(stack_chunk: int) -> None:
    """With the default chunk every run is one fused call (the first run also compiles the staged
    path); with a chunk of 2 the loop of 5 steps runs on the staged path, chunk by chunk. Either way
    only the first run compiles. (Before fresh stack buffers were committed, the second run compiled
    the fused program again.)"""
    g, feeds, fetches = _rnn_gradient()
    sess = tn.Session(g, backend="fast", stack_chunk=stack_chunk)
    with xla_compilations() as first:
        got = sess.run(fetches, feeds)
    assert first, "the first run compiles"
    for a, b in zip(got, tn.Session(g).run(fetches, feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    with xla_compilations() as later:
        for _ in range(3):
            sess.run(fetches, feeds)
    assert later == [], f"{len(later)} XLA compilation(s) in runs of a plan already compiled"


def test_the_second_training_step_compiles_nothing() -> None:
    """A training step (the loss and the update op in one run) writes its Variables back; their device
    copies come back committed and the next run compiles nothing."""
    g, feeds, fetches = _rnn_training_step()
    sess = tn.Session(g, backend="fast")
    ref = tn.Session(g)
    sess.run(fetches, feeds)
    ref.run(fetches, feeds)
    with xla_compilations() as later:
        for _ in range(3):
            got = sess.run(fetches, feeds)[0]
            want = ref.run(fetches, feeds)[0]
    assert later == [], f"{len(later)} XLA compilation(s) in runs of a plan already compiled"
    np.testing.assert_allclose(got, want, rtol=1e-4)
    np.testing.assert_allclose(sess.variables["w"], ref.variables["w"], rtol=1e-4)


def test_nodes_appended_after_a_plan_was_compiled_leave_it_compiled() -> None:
    """Fetching an op (``step``) for the first time adds a proxy node to the graph (``Graph.version``
    changes); plans are keyed on ``Graph.edits`` instead, which appending leaves alone, so the loss's
    plan, built before, is not compiled again."""
    g, feeds, fetches = _rnn_training_step()
    sess = tn.Session(g, backend="fast")
    sess.run(fetches[0], feeds)
    version, edits, count = g.version, g.edits, sess.backend.compile_count
    sess.run(fetches[1], feeds)  # the step's own plan compiles
    assert g.version > version and g.edits == edits
    with xla_compilations() as later:
        sess.run(fetches[0], feeds)
    assert later == [] and sess.backend.compile_count == count + 1


def test_a_node_appended_that_makes_the_graph_ill_formed_fails_a_compiled_plan_too() -> None:
    """A plan compiled before stays valid for what it computes, but the graph as a whole must still
    validate on every run, as on the reference backend: a reused session raises the same error."""
    from turnout import raw

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = x * 2.0
    sessions = [tn.Session(g, backend=b) for b in ("reference", "fast")]
    for sess in sessions:
        assert sess.run(y, {x: 1.0}) == 2.0
    with g.as_default():
        raw.exit(raw.enter(tn.constant(1.0), "frame") * 2.0)  # an Exit of a frame without LoopCond
    for sess in sessions:
        with pytest.raises(tn.ValidationError, match="W-Frame"):
            sess.run(y, {x: 1.0})


def test_a_repeated_run_reading_a_variable_compiles_nothing() -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.arange(3, dtype=np.float32), name="v")
        y = v.read() * 2.0
        bump = v.assign_add(tn.ones([3]))
    sess = tn.Session(g, backend="fast")
    sess.run(y)
    sess.run(bump)
    sess.run(y)
    with xla_compilations() as later:
        for _ in range(3):
            sess.run(bump)
            out = sess.run(y)
    assert later == []
    np.testing.assert_allclose(out, (np.arange(3) + 4) * 2.0)


def test_a_first_run_compiles_its_program_alone() -> None:
    """The first run of a training step with gradient stacks compiles one XLA program: the fused one.
    Its fresh stack buffers and its Variables' first device copies are made without compiling (an eager
    ``jnp.zeros`` or ``jnp.asarray`` compiles a small program per new shape and dtype, which cost the
    benchmark LSTM's first run 0.3 s). The shapes here are unusual on purpose: no other test has
    compiled a program for them, so a compilation of one would be seen."""
    g, feeds, (loss, step) = _rnn_training_step(5, 13, np.full((13, 13), 0.05, np.float32), steps=3)
    sess = tn.Session(g, backend="fast")
    with xla_compilations() as first:
        got = sess.run([loss, step], feeds)[0]
    assert sess.last_result.stats["fused"] is True
    assert len(first) == 1, f"{len(first)} XLA compilations in a first run that needs one"
    # (the tolerance allows a GPU's TF32 matrix products, JAX's default there: 3e-4 apart on an H100;
    # with jax_default_matmul_precision="highest" they agree to 1e-5, see docs/fast_backend.rst)
    ref = tn.Session(g)
    np.testing.assert_allclose(got, ref.run([loss, step], feeds)[0], rtol=2e-3)
    np.testing.assert_allclose(sess.variables["w"], ref.variables["w"], rtol=2e-3)


def test_a_training_step_after_an_initializer_compiles_its_program_once() -> None:
    """An initializer (an assign of constants, as every imported TF1 model runs first) is a compiled
    call with no committed argument, whose results JAX leaves uncommitted. A training step that
    starts from those device copies and from committed ones (``b``, put on the device from its host
    value) commits them all first, so its one XLA compilation serves its lane too: before, the step
    compiled for the mix and its lane compiled again for the committed copies its own run handed
    back."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4, 7], name="x")
        w = tn.Variable(np.zeros((7, 7), np.float32), name="w")
        b = tn.Variable(np.full(7, 0.1, np.float32), name="b")
        init = tn.group(w.assign(tn.constant(np.eye(7, dtype=np.float32) * 0.5)))
        wr, br = w.read(), b.read()
        _, h = tn.while_loop(lambda i, h: i < 5, lambda i, h: (i + 1, tn.tanh(tn.matmul(h, wr) + br)),
                             [tn.constant(0), x])
        loss = tn.reduce_sum(h * h)
        step = tn.train.SGD(0.1).minimize(loss, var_list=[w, b])
    feeds = {x: np.full((4, 7), 0.3, np.float32)}
    sess, ref = tn.Session(g, backend="fast"), tn.Session(g)
    sess.run(init)
    ref.run(init)
    with xla_compilations() as first:
        sess.run([loss, step], feeds)
    with xla_compilations() as later:
        for _ in range(3):
            sess.run([loss, step], feeds)
    assert len(first) == 1 and later == [], (len(first), len(later))
    assert sess.last_result.stats["route"] in ("lane", "hot")
    for _ in range(4):
        want = ref.run([loss, step], feeds)[0]
    np.testing.assert_allclose(sess.run(loss, feeds), ref.run(loss, feeds), rtol=1e-5)
    np.testing.assert_allclose(sess.variables["w"], ref.variables["w"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sess.variables["b"], ref.variables["b"], rtol=1e-5, atol=1e-6)
    assert np.isfinite(want)


def test_stacks_of_a_batch_of_unknown_size_compile_the_program_once() -> None:
    """A loop over a batch of ``None`` rows pushes values whose shapes only a trace tells: the plan
    traces its fused stage before compiling it, learns them, and compiles once with those stacks
    kept; the second run is on the lane and compiles nothing (before, it compiled the stage again)."""
    g, x, w, loss, gx, gw = batch_loop(5, 4)
    feeds = {x: np.full((6, 5), 0.2, np.float32), w: np.eye(5, dtype=np.float32) * 0.7}
    sess = tn.Session(g, backend="fast", inside_stack_bytes=0)
    with xla_compilations() as first:
        got = sess.run([loss, gx, gw], feeds)
    with xla_compilations() as later:
        for _ in range(3):
            sess.run([loss, gx, gw], feeds)
    assert len(first) == 1 and later == [], (len(first), len(later))
    assert sess.last_result.stats["route"] in ("lane", "hot")
    for a, b in zip(got, tn.Session(g).run([loss, gx, gw], feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
