"""Shapes known only at run time meet the same shape rules as shapes known when the graph is built.

A placeholder of unknown shape lets an op be built whatever its operands turn out to be. When the
run brings shapes the op's shape rule refuses (``matmul`` of two vectors, ``gather`` along an axis
the value lacks, ``a[0]`` of a scalar), every backend raises ``KernelError`` with the rule's own
message (``shape_rules.concrete_shape_error``): the interpreters before the kernel runs, the fast
backend when it traces, as an error raised only if the op runs. Before, numpy computed a dot
product for the first on the interpreters while XLA computed it on the fast backend, and the other
two failed with "tuple index out of range" (a raw ``IndexError`` on the fast backend).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from test_bad_inputs import ALL_BACKENDS
from test_bad_inputs import session as _session

import turnout as tn

#: name -> (the op on placeholders a and b, the value of a, the value of b)
CASES: dict[str, tuple[Callable[[Any, Any], Any], Any, Any]] = {
    "matmul of vectors": (lambda a, b: tn.matmul(a, b), np.ones(3, np.float32), np.ones(3, np.float32)),
    "gather along a missing axis": (lambda a, b: tn.gather(a, tn.constant([0]), axis=1) * b,
                                    np.ones(3, np.float32), np.float32(2.0)),
    "gather from a scalar": (lambda a, b: tn.gather(a, tn.constant(0)) * b, np.float32(1.0), np.float32(2.0)),
    "index into a scalar": (lambda a, b: a[0] * b, np.float32(1.0), np.float32(2.0)),
    "two indices into a vector": (lambda a, b: a[0, 1] * b, np.ones(3, np.float32), np.float32(2.0)),
    "tile by more multiples than axes": (lambda a, b: tn.tile(a, [2, 2]) * b, np.ones(3, np.float32), np.float32(2.0)),
    "expand_dims past the rank": (lambda a, b: tn.expand_dims(a, 3) * b, np.ones(3, np.float32), np.float32(2.0)),
    "transpose by a longer perm": (lambda a, b: tn.transpose(a, [1, 0]) * b, np.ones(3, np.float32), np.float32(2.0)),
}


def _graph(op: Callable[[Any, Any], Any], static: Any = None) -> tuple[tn.Graph, Any, Any, Any]:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, static[0] if static else None, name="a")
        b = tn.placeholder(tn.float32, static[1] if static else None, name="b")
        return g, a, b, op(a, b)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_run_time_shapes_meet_the_build_time_rule(backend: str, case: str) -> None:
    """The run fails with ``KernelError`` naming the op, and its message is the ``ShapeError`` the
    same shapes get when they are known at build time."""
    op, av, bv = CASES[case]
    with pytest.raises(tn.ShapeError) as built:
        _graph(op, (list(np.shape(av)), list(np.shape(bv))))
    g, a, b, y = _graph(op)
    with pytest.raises(tn.KernelError) as ran:
        _session(g, backend).run(y, {a: av, b: bv})
    assert str(built.value) in str(ran.value)
    assert "created at test_runtime_shapes.py" in str(ran.value)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_an_op_refused_on_an_untaken_branch_costs_nothing(backend: str) -> None:
    """The refusal is raised where the op runs: on the untaken side of a cond the run gives the other
    side's value, on every backend (the fast backend traces both sides)."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, None, name="a")
        p = tn.placeholder(tn.bool, [], name="p")
        y = tn.cond(p, lambda: tn.reduce_sum(tn.matmul(a, a)), lambda: tn.reduce_sum(a) * 2.0)
    sess = _session(g, backend)
    assert float(sess.run(y, {a: np.ones(3, np.float32), p: False})) == 6.0
    with pytest.raises(tn.KernelError, match="operands must be matrices"):
        sess.run(y, {a: np.ones(3, np.float32), p: True})
    assert float(sess.run(y, {a: np.ones((2, 2), np.float32), p: True})) == 8.0


@pytest.mark.parametrize("backend", ["reference", "fast", "smallstep"])
def test_the_gradient_of_a_refused_index_fails_alike(backend: str) -> None:
    """``a[0]`` of a scalar and its gradient: the forward op's refusal, not a crash in the gradient's
    lowering (the fast backend raised a raw ``IndexError`` tracing ``GetItemGrad``)."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, None, name="a")
        (da,) = tn.gradients(a[0] * 3.0, [a])
    with pytest.raises(tn.KernelError, match="GetItem: 1 indices for a tensor of rank 0"):
        tn.Session(g, backend=backend).run(da, {a: np.float32(1.0)})
    np.testing.assert_array_equal(tn.Session(g, backend=backend).run(da, {a: np.ones(2, np.float32)}), [3.0, 0.0])


def test_shapes_the_rule_takes_still_run_in_a_loop() -> None:
    """A loop whose body indexes a fed value of unknown shape: the rule is asked once per shape (the
    verdict is remembered), and the values are the reference's on the fast backend."""
    g = tn.Graph()
    with g.as_default():
        m = tn.placeholder(tn.float32, None, name="m")
        _, acc = tn.while_loop(lambda i, acc: i < 3,
                               lambda i, acc: (i + 1, acc + tn.reduce_sum(tn.gather(m, i, axis=0))),
                               [tn.constant(0), tn.constant(0.0)])
    mv = np.array([1.0, 2.0, 4.0], np.float32)
    assert float(tn.Session(g).run(acc, {m: mv})) == 7.0
    assert float(tn.Session(g, backend="fast").run(acc, {m: mv})) == 7.0
    assert float(tn.Session(g, backend="fast").run(acc, {m: np.ones((3, 2), np.float32)})) == 6.0
    for backend in ("reference", "fast"):
        with pytest.raises(tn.KernelError, match="Gather: cannot gather from a scalar"):
            tn.Session(g, backend=backend).run(acc, {m: np.float32(1.0)})
