"""Laws of counted nests while tracing (``turnout.fast.counted_nests``): which inner bounds the head of
a nest can know (and so check before the nest), and what the counted stacks' pushes and pops record.
Each law kills mutants of the full set of ``fast/counted_nests.py`` (issue 40, part 3; ``python
tools/mutation.py --module fast/counted_nests.py --all``) in milliseconds, ahead of the fast
backend's programs of its list.

The bookkeeping of counted stacks (``note_push_range``, ``skip_push``, ``read_skipped``,
``pop_range``) is called directly on a fresh emitter, outside any trace. The bounds are read off
the ``Direct`` call's trace of a two-level nest (``tests/test_fast_counted_nests.py``'s
observation): a nest whose checks are made before it is entered has no loop body that selects a new
error word.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import pytest
from test_fast_counted_nests import _traced_bodies

import turnout as tn
from turnout.errors import UnsupportedError
from turnout.fast import counted_nests as cn
from turnout.fast.emit import Emitter
from turnout.fast.functionalize import functionalize
from turnout.fast.outcome import ErrorCodes
from turnout.fast.state_keys import stack_key
from turnout.fast.values import Handle

A, B = Handle("stack", "a"), Handle("stack", "b")


def _emitter() -> Any:
    """A fresh emitter over a one-placeholder program: the counted stacks' state as
    ``init_trace_state`` leaves it, and the trace's integer ranges."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
    return Emitter(functionalize(g, [x], [x]), ErrorCodes(), 16, np.int32(100))


def _traced(em: Any, lo: int, hi: int) -> Any:
    """A traced integer (a JAX array, not a constant of the trace) known to lie in ``[lo, hi]``."""
    v = jax.numpy.asarray(lo, jax.numpy.int32) + 0
    em.ranges.add(v, lo, hi)
    return v


def test_the_module_exports_what_it_defines() -> None:
    """``counted_nests.__all__`` names exactly the module's public names, each once
    (``tests/test_exports.py``'s law, for this module alone, and none of its own left out). Kills
    the ``__all__`` mutants without running the fast backend's programs of the list."""
    tree = ast.parse(inspect.getsource(cn))
    defined = [n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))]
    defined += [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
    own = {name for name in defined if not name.startswith("_")}
    assert sorted(cn.__all__) == sorted(own) and len(set(cn.__all__)) == len(cn.__all__)


def test_a_counted_stacks_range_is_the_hull_of_every_traced_push() -> None:
    """``note_push_range``: every entry of a counted stack lies in the smallest range holding the
    range of each trace of its push, so the range grows at both ends as pushes are traced; each
    stack keeps its own, and every noted push marks its stack pushed."""
    em = _emitter()
    em.note_push_range(A, _traced(em, 2, 4))
    assert em.push_ranges == {stack_key(A): (2, 4)} and em.pushed_counted == {stack_key(A)}
    em.note_push_range(A, _traced(em, 3, 6))
    assert em.push_ranges[stack_key(A)] == (2, 6)
    em.note_push_range(A, _traced(em, 1, 5))
    assert em.push_ranges[stack_key(A)] == (1, 6)
    em.note_push_range(B, np.int32(9))  # (a constant's range is its value)
    assert em.push_ranges == {stack_key(A): (1, 6), stack_key(B): (9, 9)}
    assert em.pushed_counted == {stack_key(A), stack_key(B)}


def test_one_push_of_unknown_range_leaves_the_stacks_range_unknown_for_good() -> None:
    """A push whose value has no known range (a float, a traced value nobody bounded) makes the
    stack's range unknown (``None``), and a later push of known range does not bring it back: the
    entries it pushed may lie anywhere. A stack whose first push is unknown is unknown too."""
    em = _emitter()
    em.note_push_range(A, _traced(em, 2, 4))
    em.note_push_range(A, jax.numpy.asarray(7, jax.numpy.int32) + 0)
    assert stack_key(A) in em.push_ranges and em.push_ranges[stack_key(A)] is None
    em.note_push_range(A, _traced(em, 2, 4))
    assert em.push_ranges[stack_key(A)] is None
    em.note_push_range(B, np.float32(1.0))
    assert em.push_ranges[stack_key(B)] is None and em.pushed_counted == {stack_key(A), stack_key(B)}


def test_a_pop_from_a_counted_stack_gets_the_range_of_everything_pushed() -> None:
    """``pop_range``: a value popped from a counted stack lies in the stack's range, when known; a
    stack whose range is unknown, or another stack's, tells nothing."""
    em = _emitter()
    em.note_push_range(A, _traced(em, 2, 4))
    em.note_push_range(B, np.float32(1.0))
    popped, other, unknown = (jax.numpy.asarray(k, jax.numpy.int32) + 0 for k in range(3))
    em.pop_range(A, popped)
    em.pop_range(Handle("stack", "c"), other)
    em.pop_range(B, unknown)
    assert em.ranges.get(popped) == (2, 4)
    assert em.ranges.get(other) is None and em.ranges.get(unknown) is None


def _pop_node() -> Any:
    """A node to name in an error (the pop that would read the stack)."""
    g = tn.Graph()
    with g.as_default():
        return tn.placeholder(tn.int32, [], name="the_pop").node


def test_a_pop_after_a_skipped_push_refuses_the_fused_trace_naming_the_pop() -> None:
    """``skip_push`` marks the stack pushed and skipped; a pop of that stack then raises
    ``UnsupportedError`` naming the pop and why (a later trace contradicted the constant), so the
    staged path runs. A pop of a stack whose pushes all wrote is not refused."""
    em = _emitter()
    node = _pop_node()
    em.read_skipped(node, A)
    em.skip_push(A)
    assert em.pushed_counted == {stack_key(A)} and em.skipped == {stack_key(A)}
    em.read_skipped(node, B)
    with pytest.raises(UnsupportedError, match=r'Placeholder node "the_pop"') as e:
        em.read_skipped(node, A)
    assert str(e.value).endswith("pops a stack whose pushes pushed a constant in one trace and another value "
                                 "in a later one")


def _nest(bound: Callable[[Any, Any, Any, Any], Any]) -> tuple[tn.Graph, Any, Any, Any]:
    """A loop ``outer`` of ``n`` bodies, each running a loop ``inner`` of ``bound(x, ta, i, n)``
    bodies, computed in the outer body from the fed ``[3]`` vector ``x``, a TensorArray ``ta`` of
    size 4, the fed ``n`` (all entered unchanged) and the outer counter ``i``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        ta = tn.TensorArray(tn.float32, size=4)

        def outer(i: Any, acc: Any) -> Any:
            b = bound(x, ta, i, n)
            _, a = tn.while_loop(lambda j, a: j < b, lambda j, a: (j + 1, a + 1.0), [tn.constant(0), acc],
                                 name="inner")
            return i + 1, a

        _, y = tn.while_loop(lambda i, acc: i < n, outer, [tn.constant(0), tn.constant(0.0)], name="outer")
    return g, x, n, y


def _length(x: Any) -> Any:
    return tn.shape(x)[0]


#: inner bounds computed in the outer body by each of ``BOUND_OPS`` (with ``Shape`` and ``GetItem``
#: to reach a static value from the entered vector), all known when tracing
KNOWN_BOUNDS = {
    "Const": lambda x, ta, i, n: tn.constant(3),
    "Identity": lambda x, ta, i, n: tn.identity(_length(x)),
    "Shape, GetItem": lambda x, ta, i, n: _length(x),
    "Size": lambda x, ta, i, n: tn.size(x),
    "TensorArraySize": lambda x, ta, i, n: ta.size(),
    "Add": lambda x, ta, i, n: _length(x) + 1,
    "Sub": lambda x, ta, i, n: _length(x) - 1,
    "Mul": lambda x, ta, i, n: _length(x) * 2,
    "Maximum": lambda x, ta, i, n: tn.maximum(_length(x), 2),
    "Minimum": lambda x, ta, i, n: tn.minimum(_length(x), 2),
}


def _selects(g: tn.Graph, x: Any, n: Any, y: Any) -> int:
    """How many ``select_n`` the loop bodies of the nest's trace hold (each a new error word)."""
    bodies = _traced_bodies(g, y, {x: np.zeros(3, np.float32), n: np.int32(2)})
    assert len(bodies) == 2
    return len([e for b in bodies for e in b.eqns if e.primitive.name == "select_n"])


@pytest.mark.parametrize("name", sorted(KNOWN_BOUNDS))
def test_an_inner_bound_computed_by_bound_ops_from_entered_values_is_checked_before_the_nest(name: str) -> None:
    """An inner loop's bound made in the outer body by ops with no effects and static results
    (``BOUND_OPS``) from values entered unchanged is known at the head of the nest, so both loops'
    checks are made before it and no body writes the error word; the values, and the runaway error
    of the inner loop alone over ``max_iterations`` with the loop it names, are the reference
    interpreter's."""
    g, x, n, y = _nest(KNOWN_BOUNDS[name])
    assert _selects(g, x, n, y) == 0
    feed = {x: np.zeros(3, np.float32), n: np.int32(2)}
    want = tn.Session(g).run(y, feed)
    assert float(tn.Session(g, backend="fast").run(y, feed)) == float(want)
    over = {x: np.zeros(3, np.float32), n: np.int32(1)}  # (every inner bound here is at least 2)
    want_error = _outcome("reference", g, y, over, 1)
    assert want_error[0] == "NonTerminationError" and "inner" in want_error[1]
    assert _outcome("fast", g, y, over, 1) == want_error


#: inner bounds the head of the nest does not follow: one reads the outer counter (not known at the
#: head), one is made by ``BOUND_OPS`` from a fed value (known at the head, but traced, not static),
#: the others are made by an op outside ``BOUND_OPS`` or by a ``GetItem`` whose index is a tensor
UNFOLLOWED_BOUNDS = {
    "the outer counter": lambda x, ta, i, n: _length(x) + i,
    "Sum": lambda x, ta, i, n: tn.reduce_sum(tn.shape(x)),
    "Abs": lambda x, ta, i, n: tn.abs(_length(x)),
    "GetItem at a tensor": lambda x, ta, i, n: tn.shape(x)[tn.constant(0)],
    "a fed value, traced at the head": lambda x, ta, i, n: n + 1,
}


@pytest.mark.parametrize("name", sorted(UNFOLLOWED_BOUNDS))
def test_an_inner_bound_the_head_does_not_follow_is_checked_after_its_loop(name: str) -> None:
    """The same nest with a bound the head does not follow (``UNFOLLOWED_BOUNDS``): the inner loop
    checks itself after it runs, which writes the error word in the bodies (so the observation
    above can fail)."""
    g, x, n, y = _nest(UNFOLLOWED_BOUNDS[name])
    assert _selects(g, x, n, y) > 0


def _from_start(bound: Callable[[Any], Any]) -> tuple[tn.Graph, Any, Any, Any]:
    """A loop ``outer`` of ``n`` bodies, each running a loop ``inner`` whose counter starts at 2 and
    runs while below ``bound(m)`` (``m`` fed)."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        m = tn.placeholder(tn.int32, [], name="m")

        def outer(i: Any, acc: Any) -> Any:
            b = bound(m)
            _, a = tn.while_loop(lambda j, a: j < b, lambda j, a: (j + 1, a + 1.0), [tn.constant(2), acc],
                                 name="inner")
            return i + 1, a

        _, y = tn.while_loop(lambda i, acc: i < n, outer, [tn.constant(0), tn.constant(0.0)], name="outer")
    return g, n, m, y


def _outcome(backend: str, g: tn.Graph, y: Any, feed: dict[Any, Any], mi: int) -> tuple[str, Any]:
    try:
        return "value", float(tn.Session(g, backend=backend).run(y, feed, max_iterations=mi))
    except tn.TurnoutError as e:  # the error and what it names (the interpreters add the tag it ran at)
        return type(e).__name__, str(e).split(" (")[0]


@pytest.mark.parametrize("bound", ["constant", "fed"])
def test_a_counter_from_start_runs_bound_minus_start_bodies_as_the_hoisted_check_counts(bound: str) -> None:
    """A counted loop whose counter starts at 2 runs ``bound - 2`` bodies, none where the bound is
    below 2: the check made before the nest (its bodies write no error word) compares that number,
    not the bound, with ``max_iterations``, for a constant bound (a number known when tracing) and a
    fed one (computed in the trace) alike; values and the loop named are the reference's."""
    g, n, m, y = _from_start((lambda m: tn.constant(5)) if bound == "constant" else (lambda m: m))
    feed = {n: np.int32(2), m: np.int32(5)}
    bodies = _traced_bodies(g, y, feed)
    assert len(bodies) == 2 and not [e for b in bodies for e in b.eqns if e.primitive.name == "select_n"]
    for mv, mi in [(5, 3), (5, 2), (1, 3), (6, 3)]:  # 3 bodies under 3 and under 2; none; 4 under 3
        run = {n: np.int32(2), m: np.int32(mv)}
        assert _outcome("fast", g, y, run, mi) == _outcome("reference", g, y, run, mi), (mv, mi)


def test_a_gradients_nest_reads_its_inner_bound_from_the_stack_of_forward_trip_counts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The gradient of a counted nest runs a backward nest whose inner bound is popped, in the outer
    body, from the stack onto which every forward iteration pushed the inner loop's trip count (one
    constant): the head knows it, so the backward nest's checks are made before it as the forward
    nest's are (both chains of two loops); values and gradient are the reference's."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def outer(i: Any, y: Any) -> Any:
            _, z = tn.while_loop(lambda j, z: j < 3, lambda j, z: (j + 1, z * x), [tn.constant(0), y], name="inner")
            return i + 1, z

        _, y = tn.while_loop(lambda i, y: i < 2, outer, [tn.constant(0), x], name="outer")
        (dx,) = tn.gradients(y, [x])
    hoisted: list[int] = []
    checks = cn.CountedNests._hoist_checks

    def spy(self: Any, chain: list[Any]) -> None:
        hoisted.append(len(chain))
        checks(self, chain)

    monkeypatch.setattr(cn.CountedNests, "_hoist_checks", spy)
    got = tn.Session(g, backend="fast").run([y, dx], {x: 1.5})
    np.testing.assert_allclose(got, tn.Session(g).run([y, dx], {x: 1.5}), rtol=1e-6)
    assert hoisted == [2, 2]


def _added(adds: int) -> Callable[[Any, Any, Any, Any], Any]:
    """An inner bound ``len(x) + 1 + ... + 1`` with ``adds`` Adds: the bound is the top Add (depth 0
    of the head's walk), and its deepest op, the Shape of the entered ``x``, lies ``adds + 1`` below."""

    def bound(x: Any, ta: Any, i: Any, n: Any) -> Any:
        v = _length(x)
        for _ in range(adds):
            v = v + 1
        return v

    return bound


@pytest.mark.parametrize("adds, known", [(cn.BOUND_DEPTH - 1, True), (cn.BOUND_DEPTH, False)])
def test_a_bound_is_followed_through_bound_depth_ops_and_no_further(adds: int, known: bool) -> None:
    """``BOUND_DEPTH`` caps how deep the head follows an inner bound's expression: a bound whose
    deepest op lies ``BOUND_DEPTH`` ops below it is known at the head (no body writes the error
    word), one whose deepest op lies one further is not, and its loop checks itself after it runs."""
    g, x, n, y = _nest(_added(adds))
    assert (_selects(g, x, n, y) == 0) == known
