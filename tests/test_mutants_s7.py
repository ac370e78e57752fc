"""Tests written for survivors of the 2026-11-26 mutation sample of ``fast/emit.py``
(``bash scripts/py.sh tools/mutation.py --module fast/emit.py --sample 15 --seed 5``); each names the
mutant it kills and the law it pins."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import turnout as tn

pytest.importorskip("jax")


def test_a_constant_predicate_traces_only_the_taken_branch() -> None:
    """Kills ``emit.run_cond:0324def7.2`` (a predicate known while tracing no longer picks its branch
    then). Law: a cond whose predicate is a constant is the taken branch alone, so a program whose
    other branch could not be compiled with it (here: results of another shape, which one ``lax.cond``
    cannot return) still compiles, with no fallback."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")
        y = tn.cond(tn.constant(True), lambda: x * 2.0, lambda: tn.concat([x, x], 0))
    sess = tn.Session(g, backend="fast")
    feed = {x: np.array([1.0, 2.0], np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fallback warns
        got = sess.run(y, feed)
    np.testing.assert_allclose(got, tn.Session(g).run(y, feed))
    assert sess.last_result.stats["executor"] == "compiled"


@pytest.mark.parametrize("light", [True, False])
def test_a_loop_over_its_budget_says_which_option_and_asks_whether_it_ends(light: bool) -> None:
    """Kills ``emit.run_light_while:9866a901`` (the hint of a light loop's message). Law: the fast
    backend's NonTerminationError names the loop, the option that bounds it, and asks whether the loop
    ends, in both loop forms (a speculable header and one with a Sleep)."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")

        def cond(i: Any) -> Any:
            return i < n if light else tn.sleep(i, 0.0) < n

        y = tn.while_loop(cond, lambda i: i + 1, [tn.constant(0)], name="spin")
    with pytest.raises(tn.NonTerminationError,
                       match=r"spin.*created at .*more bodies than max_iterations.*does the loop terminate\?.*"
                             r"RunOptions\.max_iterations"):
        tn.Session(g, backend="fast").run(y, {n: 100}, max_iterations=5)


def test_only_a_scalar_counter_stands_for_the_iteration_count() -> None:
    """Kills ``emit.counters:8459a424`` (a counter's increment no longer required to be a scalar).
    Law: a loop variable counts iterations only when it is a scalar int32 advanced by the scalar 1; a
    one-element vector advanced by ``[1]`` is an ordinary loop variable, and the loop still compiles
    (with an iteration count of its own) and gives the reference's value."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        v0 = tn.constant(np.zeros(1, np.int32))
        _, v = tn.while_loop(lambda i, v: i < n, lambda i, v: (i * 1 + 2, v + tn.constant(np.ones(1, np.int32))),
                             [tn.constant(0), v0])
    sess = tn.Session(g, backend="fast")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fallback warns
        got = sess.run(v, {n: 7})
    np.testing.assert_array_equal(got, tn.Session(g).run(v, {n: 7}))
    assert sess.last_result.stats["executor"] == "compiled"
