"""Stateful loop bodies: random chains of Variable assignments and reads, some under conds, cases and
inner loops, some waiting on an op outside the loop, in a loop (and differentiated), give the reference
interpreter's values and Variables on the fast backend.

Why a property of its own: the generated programs of ``tests/strategies.py`` have no Variables, and
the fast backend orders a loop's effects by compiling the loop whole, where the interpreter fires
them one by one. Every effect here is chained to the one before it by a control edge, so the program
has one meaning (no race), and the chain ends in the loop's value, so every effect is an ancestor of
the fetch. Found with it: a cond branch that waited on an outside op by control made the untaken
branch's constants live (``tests/test_builders.py``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import turnout as tn

pytest.importorskip("jax")

#: one effect: (kind, Variable, factor) — an assignment, a read, or ("outer", _, factor) arithmetic
#: that waits on an op outside the loop —, or ("cond" / "case", effects, effects), or ("loop", effects,
#: []) run twice in an inner loop
ACTIONS = st.recursive(
    st.tuples(st.sampled_from(["add", "sub", "set", "read", "outer"]), st.sampled_from(["a", "b"]),
              st.sampled_from([0.5, -1.0, 2.0])),
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["cond", "case"]), st.lists(inner, max_size=3), st.lists(inner, max_size=3)),
        st.tuples(st.just("loop"), st.lists(inner, max_size=3), st.just([]))),
    max_leaves=6)


def _build(actions: list[Any], grad: bool) -> tuple[tn.Graph, list[tn.Tensor], tn.Tensor, list[tn.Variable]]:
    g = tn.Graph()
    with g.as_default():
        vs = {"a": tn.Variable(np.float64(1.0), name="a"), "b": tn.Variable(np.float64(-0.5), name="b")}
        n = tn.placeholder(tn.int32, [], name="n")
        outside = tn.identity(tn.constant(1.0, tn.float64))

        def chain(acts: list[Any], prev: Any, acc: Any, i: Any) -> tuple[Any, Any]:
            for act in acts:
                with tn.control_dependencies([prev]):
                    if act[0] in ("cond", "case"):
                        _, first, second = act

                        def side(effects: list[Any], before: Any = prev, value: Any = acc) -> Any:
                            return lambda: chain(effects, before, value, i)[1]

                        if act[0] == "cond":
                            acc = tn.cond(tn.equal(tn.mod(i, 2), 0), side(first), side(second))
                        else:
                            acc = tn.case(tn.mod(i, 3), [side(first), side(second)], default=side([]))
                    elif act[0] == "loop":
                        def inner(j: Any, value: Any, effects: list[Any] = act[1]) -> Any:
                            return j + 1, chain(effects, tn.identity(value), value, i + j)[1]

                        _, acc = tn.while_loop(lambda j, value: j < 2, inner, [tn.constant(0), acc])
                    elif act[0] == "outer":
                        with tn.control_dependencies([outside]):
                            acc = acc * act[2] + tn.constant(0.25, tn.float64)
                    elif act[0] == "read":
                        acc = acc * 0.5 + vs[act[1]].read() * tn.tanh(acc)
                    else:
                        kind, v, c = act
                        assign = {"add": vs[v].assign_add, "sub": vs[v].assign_sub, "set": vs[v].assign}[kind]
                        acc = acc + assign(acc * c) * 0.1
                prev = acc
            return prev, acc

        def body(i: Any, h: Any) -> Any:
            _, acc = chain(actions, tn.identity(h), h, i)
            return i + 1, acc

        _, h = tn.while_loop(lambda i, h: i < n, body, [tn.constant(0), tn.constant(0.3, tn.float64)])
        fetches = [h]
        if grad:
            fetches += [d for d in tn.gradients(h, [vs["a"], vs["b"]]) if d is not None]
    return g, fetches, n, [vs["a"], vs["b"]]


# a third of the loaded profile's budget: tests/test_routes.py runs the same generator down every route
@settings(max_examples=max(1, settings.default.max_examples // 3))
@given(st.lists(ACTIONS, min_size=1, max_size=4), st.lists(st.integers(0, 4), min_size=1, max_size=2),
       st.booleans())
def test_stateful_loop_bodies_agree_with_the_reference(actions: list[Any], trips: list[int], grad: bool) -> None:
    _agree(actions, trips, grad)


@pytest.mark.parametrize("trips", [[0], [0, 3], [4]])
def test_a_case_holding_a_loop_in_a_loop_that_may_run_no_iteration(trips: list[int]) -> None:
    """Regression (the ``dev`` profile of the test above): a ``tn.case`` whose second branch holds a
    loop, in the body of a loop that runs no iteration. The fast backend traced the case as one
    ``lax.switch`` with each branch's decision forced; the inner loop's hoisted bound check conflicted
    and the enclosing nest was traced again, but the decisions forced for the switch were not undone
    when the trace was abandoned, and the second trace raised ``KeyError`` from deep in the emitter."""
    _agree([("case", [], [("loop", [], [])])], trips, False)
    _agree([("case", [], [("loop", [], [])]), ("cond", [], [("cond", [("read", "a", 0.5)], [("read", "a", 0.5)])])],
           trips, False)


def _agree(actions: list[Any], trips: list[int], grad: bool) -> None:
    """The program of ``actions`` run on both backends, once per trip count of ``trips`` on one session:
    the same fetched values and Variables after each run."""
    got: dict[str, list[Any]] = {}
    for backend in ("reference", "fast"):
        g, fetches, n, vs = _build(actions, grad)
        sess = tn.Session(g, backend=backend)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the fast backend compiles every such program: no fallback
            got[backend] = [(sess.run(fetches, {n: t}), sess.run(vs)) for t in trips]
    for (rv, rvars), (fv, fvars) in zip(got["reference"], got["fast"], strict=True):
        for a, b in zip([*rv, *rvars], [*fv, *fvars], strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)
