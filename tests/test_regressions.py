"""Named regression tests: each is a minimal closed-form program that once failed a property test.

Each docstring says which check found it, what went wrong and why the expected value is right.
"""

from __future__ import annotations

import numpy as np
from programs import assert_values_equal

import turnout as tn
from turnout.semantics import smallstep, structured
from turnout.session import RunOptions

GUARD = RunOptions(max_firings=20_000, max_iterations=100)


def _all_executors(g: tn.Graph, fetches: list[tn.Tensor], feeds: dict[tn.Tensor, object]) -> dict[str, list]:
    return {
        "reference": tn.Session(g).run(fetches, feeds, options=GUARD),
        "structured": structured.evaluate(g, fetches, feeds).values,
        "smallstep": smallstep.run(g, fetches, feeds, max_steps=5_000).values,
    }


def test_regression_loop_body_returning_a_loop_invariant_terminates() -> None:
    """Found by T2 (the generator's first loop program). A body that returns an outside tensor
    unchanged made ``NextIteration(Enter_const(x))``: an invariant is live at *every* iteration, so the
    NextIteration stayed live after the predicate turned false and the loop never ended in the dataflow
    executors (the structured evaluator, which reads the loop as a Python ``while``, was right).

    Two trips: ``v`` becomes ``x`` = 5."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        _, v = tn.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, x), [tn.constant(0), tn.constant(7)])
    for name, got in _all_executors(g, [v], {x: 5}).items():
        assert_values_equal(got, [np.asarray(5, np.int32)], name)


def test_regression_loop_body_op_on_invariants_only_terminates() -> None:
    """Same bug, one op later: ``x * x`` reads only loop invariants, so without a control dependency on
    the loop's pivot it fires live at every iteration, including the one where the loop exits.
    TensorFlow's builder adds that dependency (``_MaybeAddControlDependency``); so must Turnout's.

    Two trips: ``v`` becomes ``x * x`` = 25."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        _, v = tn.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, x * x), [tn.constant(0), tn.constant(7)])
    for name, got in _all_executors(g, [v], {x: 5}).items():
        assert_values_equal(got, [np.asarray(25, np.int32)], name)


def test_regression_zero_trip_loop_returning_invariant_keeps_initial_value() -> None:
    """Zero trips of the same shape of body: the result is the initial value 7, not ``x``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        _, v = tn.while_loop(lambda i, v: i < 0, lambda i, v: (i + 1, x), [tn.constant(0), tn.constant(7)])
    for name, got in _all_executors(g, [v], {x: 5}).items():
        assert_values_equal(got, [np.asarray(7, np.int32)], name)


def test_a_capture_captured_again_is_the_same_tensor() -> None:
    """Found while building recomputation (``tests/test_recompute.py``): a cond branch that captures a
    loop variable ``c`` by hand and passes it as ``grad_ys`` to ``tn.gradients`` had it captured a
    second time by the gradient's ops, a Switch of the branch's own Switch. The values were right, but
    a gradient of that gradient lost every contribution through ``c``: the gradient builder sees
    through one capture, not through a capture of a capture. Capturing a context's own capture now
    returns it. Here ``c`` ends as ``2 x^4 * 2 x^2 = 4 x^6`` (the inner loop squares ``x`` twice, then
    once), so ``dc/dx = 24 x^5``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def body(end: tn.Tensor, c: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            _, u = tn.while_loop(lambda j, u: j < end, lambda j, u: (j + 1, u * u), [tn.constant(0), x])

            def reverse() -> list[tn.Tensor]:
                branch = g.current_context
                assert branch is not None
                gy = branch.capture(c)
                assert branch.capture(gy) is gy
                return [tn.gradients([u * u], [u], grad_ys=[gy])[0]]

            (c,) = tn.cond(end > 0, reverse, lambda: [c])
            return end - 1, c

        _, c = tn.while_loop(lambda e, c: e > 0, body, [tn.constant(2), tn.constant(1.0)])
        (gx,) = tn.gradients(c, [x])
    got = tn.Session(g).run([c, gx], {x: 1.1})
    np.testing.assert_allclose(got, [4 * 1.1**6, 24 * 1.1**5], rtol=1e-5)


def test_a_difference_of_equal_terms_compares_as_zero_on_every_backend() -> None:
    """Found by ``tests/test_routes.py`` (the ``dev`` profile): ``exp(tanh(f0)) - exp(tanh(f0))`` in the
    untaken-by-default branch of a cond is exactly 0 on the interpreter and 1.1e-16 on the fast
    backend, whose two evaluations XLA computed differently. Both are right to a rounding; the
    comparison of the differential tests accepts a few units in the last place of a value near 1,
    not a relative error against an exact 0."""
    g = tn.Graph()
    with g.as_default():
        x0 = tn.placeholder(tn.int32, [], name="x0")
        f0 = tn.placeholder(tn.float64, [], name="f0")
        v0 = tn.cond(tn.logical_and(0 < x0, 0 < x0), lambda: f0,
                     lambda: tn.exp(tn.tanh(f0)) - tn.exp(tn.tanh(f0)))
    feeds = {x0: np.int32(0), f0: np.float64(0.7)}
    want = tn.Session(g, backend="reference").run([v0], feeds)
    assert float(want[0]) == 0.0
    for backend in ("fast", "reference"):
        got = tn.Session(g, backend=backend).run([v0], feeds)
        assert abs(float(got[0])) <= 4 * np.finfo(np.float64).eps
        assert_values_equal(got, want, backend)
