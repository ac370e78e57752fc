"""Repeated runs of one fast session on generated programs: every run after the first takes the hot
path (``fast.repeat.Repeats.recognise``: the one-call ``Direct`` function, or the fused attempt of a plan
with gradient stacks on the rung that held the last run) or the session's lane (``fast.lane``), and
each must give what a fresh reading of the program gives.

Why a property of its own: the generated-program campaigns of ``test_fast.py`` and
``test_fast_gradients.py`` run each program once per session, so they never reach the hot path, which
skips the run signature, the plan lookup and validation and reuses the last run's device buffers.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import turnout as tn

pytest.importorskip("jax")

RUNS = 3


def _counting(sess: tn.Session) -> dict[str, int]:
    """Count the runs the backend recognised as repeated (an instance attribute shadows the method)
    or the session ran on a lane (``fast.lane``, which does not ask the backend)."""
    repeats = sess.backend.repeats
    calls = {"hot": 0}
    inner = repeats.recognise

    def counted(*a: object, **k: object) -> object:
        got = inner(*a, **k)
        calls["hot"] += got is not None
        return got

    repeats.recognise = counted  # type: ignore[method-assign]
    return calls


def _repeat_route(sess: tn.Session, calls: dict[str, int]) -> None:
    """After a run: count it when it took the lane."""
    calls["hot"] += sess.last_result.stats.get("route") == "lane"


@settings(max_examples=max(1, settings.default.max_examples // 2))  # (each example runs several times)
@given(st.data())
def test_repeated_runs_of_generated_programs_agree_with_the_ast_interpreter(data: st.DataObject) -> None:
    import programs
    import strategies

    p = data.draw(strategies.programs(loops=True, conds=True, max_depth=3))
    built = programs.build(p)
    sess = tn.Session(built.graph, backend="fast")
    calls = _counting(sess)
    for _ in range(RUNS):
        inputs = data.draw(strategies.inputs_for(p))
        got = sess.run(built.fetches, feed_dict=built.feed_dict(inputs))
        _repeat_route(sess, calls)
        programs.assert_values_equal(got, programs.interpret(p, inputs).values, "fast (repeated) vs AST")
    if sess.last_result.stats["executor"] == "compiled" and sess.backend.repeats.routes:
        assert calls["hot"] == RUNS - 1  # a one-call plan: every repeated run took the hot path


@settings(max_examples=max(1, settings.default.max_examples // 2))  # (each example runs several times)
@given(st.data())
def test_repeated_gradient_runs_of_generated_programs_agree_with_the_reference(data: st.DataObject) -> None:
    import strategies

    p = data.draw(strategies.float_programs(max_depth=2))
    b, grads = strategies.gradient_graph(p)
    fast = tn.Session(b.graph, backend="fast")
    ref = tn.Session(b.graph)
    calls = _counting(fast)
    for _ in range(RUNS):
        feeds = b.feed_dict(data.draw(strategies.inputs_for(p, wide=False)))
        for a, w in zip(fast.run(grads, feed_dict=feeds), ref.run(grads, feed_dict=feeds), strict=True):
            np.testing.assert_allclose(a, w, rtol=1e-9, atol=1e-12)
        _repeat_route(fast, calls)
    if fast.backend.repeats.routes:
        assert calls["hot"] >= 1  # the fused attempt was taken again without the general path


@settings(max_examples=max(1, settings.default.max_examples // 2))  # (each example runs several times)
@given(st.data())
def test_repeated_training_steps_of_generated_programs_train_as_the_reference(data: st.DataObject) -> None:
    """A generated program's gradients applied to a Variable on every run (``[grads..., update]``, a
    training step): the repeats run on lanes (the session's, or the backend's after its checks), which
    take the last run's stacks and write the Variable back; after every run the fetched gradients and
    the Variable are the reference's."""
    import strategies

    p = data.draw(strategies.float_programs(max_depth=2))
    b, grads = strategies.gradient_graph(p)
    with b.graph.as_default():
        acc = tn.Variable(np.float64(0.0), name="acc")
        step = sum((tn.reduce_sum(g) for g in grads[1:]), tn.reduce_sum(grads[0]))
        update = acc.assign_add(tn.cast(step, tn.float64) * 0.5)
    fast = tn.Session(b.graph, backend="fast")
    ref = tn.Session(b.graph)
    for _ in range(RUNS):
        feeds = b.feed_dict(data.draw(strategies.inputs_for(p, wide=False)))
        for a, w in zip(fast.run([*grads, update], feed_dict=feeds), ref.run([*grads, update], feed_dict=feeds),
                        strict=True):
            np.testing.assert_allclose(a, w, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(fast.variables["acc"], ref.variables["acc"], rtol=1e-9, atol=1e-12)
