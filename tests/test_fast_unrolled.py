"""Loops whose variables change shape, unrolled while tracing (``fast.unrolled``).

XLA loops keep one type, so a loop variable that grows (``shape_invariants``) has no
``lax.while_loop``; where the trace knows the loop's trip count (a counter against a constant or a
fed count, on which the plan is then specialised), the fast backend unrolls it, each body traced with
its own shapes. Every case compares with the reference interpreter and runs with ``fallback=False``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from programs import assert_same_outcome

import turnout as tn
from turnout.errors import NonTerminationError, UnsupportedError
from turnout.fast_options import UNROLL_MAX


def _growing(bound: Any = None) -> tuple[tn.Graph, dict[str, Any]]:
    """``acc`` grows by its last two entries doubled at each of ``n`` iterations (a fed count, or
    ``bound``), as TensorFlow's ``shape_invariants`` example does."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        n = tn.placeholder(tn.int32, [], name="n") if bound is None else tn.constant(bound)
        _, acc = tn.while_loop(lambda i, acc: i < n, lambda i, acc: (i + 1, tn.concat([acc, acc[-2:] * 2.0], 0)),
                               [tn.constant(0), x], shape_invariants=[[], [None]])
        total = tn.reduce_sum(acc * acc)
        (dx,) = tn.gradients(total, [x])
    return g, {"x": x, "n": n, "acc": acc, "total": total, "dx": dx}


def _compiled(g: tn.Graph, fetches: list[Any], feeds: dict[Any, Any], **options: Any) -> tuple[list[Any], dict]:
    """The fast backend's values (no fallback) checked against the reference's, and its stats."""
    want = tn.Session(g).run(fetches, feeds, **options)
    sess = tn.Session(g, backend="fast", fallback=False)
    got = sess.run(fetches, feeds, **options)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert sess.last_result is not None and sess.last_result.stats["executor"] == "compiled"
    return got, sess.last_result.stats


@pytest.mark.parametrize("n", [0, 1, 4])
def test_a_fed_trip_count_specialises_the_plan_and_unrolls_the_loop(n: int) -> None:
    g, t = _growing()
    got, stats = _compiled(g, [t["acc"], t["total"]], {t["x"]: np.array([1.0, -0.5], np.float32), t["n"]: n})
    assert got[0].shape == (2 + 2 * n,)
    assert stats["specialized_on"] == [t["n"].name]


def test_a_constant_trip_count_needs_no_specialisation() -> None:
    g, t = _growing(bound=3)
    _, stats = _compiled(g, [t["acc"]], {t["x"]: np.array([1.0, -0.5], np.float32)})
    assert "specialized_on" not in stats


def test_the_gradient_of_an_unrolled_loop() -> None:
    """The backward loop pops values of a different shape at each iteration: it is unrolled too."""
    g, t = _growing()
    _compiled(g, [t["total"], t["dx"]], {t["x"]: np.array([1.0, -0.5], np.float32), t["n"]: 3})


def test_the_gradient_of_an_unrolled_loop_that_reads_a_variable() -> None:
    """The Variable's value as the loop began is what the gradient's pops of it return (``fast.held``):
    the unrolled loop takes it at its start, as the lax forms do."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        v = tn.Variable(np.float32(1.5), name="v")
        _, acc = tn.while_loop(lambda i, a: i < 3,
                               lambda i, a: (i + 1, tn.concat([a, tn.tanh(a[-2:]) * v.read()], 0)),
                               [tn.constant(0), x], shape_invariants=[[], [None]])
        loss = tn.reduce_sum(acc * acc)
        grads = tn.gradients(loss, [x, v.handle])
    _compiled(g, [loss, *grads], {x: np.array([0.5, -1.0], np.float32)})


def test_an_unrolled_loop_meets_the_iteration_budget() -> None:
    g, t = _growing()
    feeds = {t["x"]: np.array([1.0, -0.5], np.float32), t["n"]: 5}
    for backend in ("reference", "fast"):
        with pytest.raises(NonTerminationError):
            tn.Session(g, backend=backend, **({"fallback": False} if backend == "fast" else {})).run(
                t["acc"], feeds, max_iterations=3)
    _compiled(g, [t["acc"]], feeds, max_iterations=5)


def test_more_bodies_than_unroll_max_are_not_compiled() -> None:
    g, t = _growing()
    feeds = {t["x"]: np.array([1.0, -0.5], np.float32), t["n"]: UNROLL_MAX + 1}
    with pytest.raises(UnsupportedError, match="too many to unroll"):
        tn.Session(g, backend="fast", fallback=False).run(t["total"], feeds)
    with pytest.warns(RuntimeWarning, match="too many to unroll"):
        got = tn.Session(g, backend="fast").run(t["total"], feeds)
    np.testing.assert_allclose(got, tn.Session(g).run(t["total"], feeds), rtol=1e-6)


def test_unroll_max_is_an_option() -> None:
    """``FastOptions.unroll_max`` bounds the bodies a loop is unrolled to: three bodies under a bound
    of two run on the interpreter; a bad value is refused by name."""
    g, t = _growing(bound=3)
    feeds = {t["x"]: np.array([1.0, -0.5], np.float32)}
    with pytest.raises(UnsupportedError, match="more than 2 bodies"):
        tn.Session(g, backend="fast", fallback=False, unroll_max=2).run(t["acc"], feeds)
    sess = tn.Session(g, backend="fast", fallback=False, options=tn.FastOptions(unroll_max=3))
    np.testing.assert_allclose(sess.run(t["acc"], feeds), tn.Session(g).run(t["acc"], feeds))
    for bad in (-1, 2.5, True):
        with pytest.raises(tn.ArgumentError, match="unroll_max"):
            tn.FastOptions(unroll_max=bad)


def test_a_trip_count_that_data_decide_is_not_compiled() -> None:
    """The sum of the growing values decides when the loop stops: known only when the program runs
    (a float feed is data: no plan is specialised on its values)."""
    g = tn.Graph()
    with g.as_default():
        w = tn.placeholder(tn.float32, [], name="w")
        _, x = tn.while_loop(lambda i, x: tn.reduce_sum(x) < 20.0, lambda i, x: (i + 1, tn.concat([x, x * w], 0)),
                             [tn.constant(0), tn.reshape(w, [1])], shape_invariants=[[], [None]])
    with pytest.raises(UnsupportedError, match="trip count is known only when the program runs"):
        tn.Session(g, backend="fast", fallback=False).run(x, {w: 2.0})


# half the loaded profile's budget: each example compiles a program (the default run's time)
@settings(deadline=None, max_examples=max(1, settings.default.max_examples // 4))
@given(n=st.integers(0, 5), step=st.sampled_from([1, 2]), bound=st.sampled_from(["fed", "constant", "nested"]),
       use=st.sampled_from(["value", "gradient"]))
def test_generated_growing_loops_agree_with_the_reference(n: int, step: int, bound: str, use: str) -> None:
    """A loop of ``n`` iterations (fed, constant, or the count of an outer loop that runs it once per
    outer iteration) appends ``step`` values computed from the last ones; its value or its gradient
    on the fast backend (compiled; the gradient of the nested one runs on the interpreter, see
    ``test_the_gradient_of_a_growing_loop_inside_a_loop_runs_on_the_interpreter``) is the reference's."""
    compiled = not (bound == "nested" and use == "gradient")
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        k = tn.placeholder(tn.int32, [], name="k")

        def grow(limit: Any, start: Any) -> Any:
            return tn.while_loop(lambda i, a: i < limit,
                                 lambda i, a: (i + 1, tn.concat([a, tn.tanh(a[-step:]) * 1.5], 0)),
                                 [tn.constant(0), start], shape_invariants=[[], [None]])[1]

        if bound == "nested":  # an outer loop of a fixed carry whose body runs a growing loop
            out = tn.while_loop(lambda j, s: j < k, lambda j, s: (j + 1, s + tn.reduce_sum(grow(2, x * s))),
                                [tn.constant(0), tn.constant(1.0)])[1]
        else:
            out = tn.reduce_sum(grow(k if bound == "fed" else n, x))
        fetches = [out] if use == "value" else [out, *tn.gradients(out, [x])]
    feeds = {x: np.array([0.5, -1.0], np.float32), k: n}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if not compiled else "error", RuntimeWarning)
        assert_same_outcome(lambda: tn.Session(g).run(fetches, feeds),
                            lambda: tn.Session(g, backend="fast").run(fetches, feeds),
                            f"n={n} step={step} bound={bound} use={use}")


def test_the_gradient_of_a_growing_loop_inside_a_loop_runs_on_the_interpreter() -> None:
    """The inner loop's pushes are made under an index that holds the outer loop's counter, which the
    trace does not know (the outer loop is a ``lax`` loop): the shapes its gradient pops are not
    known when compiling, and the program runs on the interpreter, with its values."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        k = tn.placeholder(tn.int32, [], name="k")
        inner = lambda s: tn.while_loop(lambda i, a: i < 2,  # noqa: E731
                                        lambda i, a: (i + 1, tn.concat([a, tn.tanh(a[-1:])], 0)),
                                        [tn.constant(0), x * s], shape_invariants=[[], [None]])[1]
        out = tn.while_loop(lambda j, s: j < k, lambda j, s: (j + 1, s + tn.reduce_sum(inner(s))),
                            [tn.constant(0), tn.constant(1.0)])[1]
        fetches = [out, *tn.gradients(out, [x])]
    feeds = {x: np.array([0.5, -1.0], np.float32), k: 2}
    with pytest.raises(UnsupportedError, match="must be known when compiling"):
        tn.Session(g, backend="fast", fallback=False).run(fetches, feeds)
    with pytest.warns(RuntimeWarning, match="reference interpreter"):
        got = tn.Session(g, backend="fast").run(fetches, feeds)
    for a, b in zip(got, tn.Session(g).run(fetches, feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
