"""Variables: state that persists across runs of one Session, updated by ops ordered by edges only.

Expected values are sums a person can do by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

import turnout as tn


def test_variables_persist_across_runs_of_one_session(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(1.0, name="v")
        inc = v.assign_add(2.0)
        read = v.read()
    sess = tn.Session(g, backend=backend)
    assert [float(sess.run(inc)) for _ in range(3)] == [3.0, 5.0, 7.0]
    assert float(sess.run(read)) == 7.0
    assert float(tn.Session(g, backend=backend).run(read)) == 1.0  # a new session starts from the initial value
    assert float(sess.run(read)) == 7.0


def test_assign_assign_add_assign_sub(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.array([1, 2, 3], np.int32), name="w")
        a = v.assign([10, 20, 30])
        b = v.assign_add([1, 1, 1])
        c = v.assign_sub(tn.constant([5, 5, 5]))
        r = v.read()
    assert v.dtype == tn.int32 and v.shape == (3,)
    assert r.dtype == tn.int32 and r.shape == (3,)
    sess = tn.Session(g, backend=backend)
    np.testing.assert_array_equal(sess.run(a), [10, 20, 30])
    np.testing.assert_array_equal(sess.run(b), [11, 21, 31])
    np.testing.assert_array_equal(sess.run(c), [6, 16, 26])
    np.testing.assert_array_equal(sess.run(r), [6, 16, 26])


def test_read_after_write_under_a_control_dependency(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(0, name="v")
        w = v.assign(5)
        with tn.control_dependencies([w]):
            after = v.read()
        doubled = after * 2
    assert int(tn.Session(g, backend=backend).run(doubled)) == 10


def test_updates_inside_a_loop_under_control_dependencies(backend: str) -> None:
    """for i in range(5): total += i  ->  0+1+2+3+4 = 10; the assign runs once per iteration."""
    g = tn.Graph()
    with g.as_default():
        total = tn.Variable(0, name="total")

        def body(i: tn.Tensor) -> tn.Tensor:
            with tn.control_dependencies([total.assign_add(i)]):
                return i + 1

        out = tn.while_loop(lambda i: i < 5, body, tn.constant(0), parallel_iterations=1)
        read = total.read()
    sess = tn.Session(g, backend=backend)
    assert int(sess.run(out)) == 5
    assert int(sess.run(read)) == 10
    assert int(sess.run(out)) == 5
    assert int(sess.run(read)) == 20  # state persists: a second run adds another 10


def test_loop_reads_a_variable_as_an_invariant(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        step = tn.Variable(3, name="step")
        out = tn.while_loop(lambda x: x < 10, lambda x: x + step.read(), tn.constant(0))  # 0 3 6 9 12
        bump = step.assign(5)
    sess = tn.Session(g, backend=backend)
    assert int(sess.run(out)) == 12
    sess.run(bump)
    assert int(sess.run(out)) == 10  # 0 5 10


def test_assign_in_an_untaken_branch_does_not_run(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        v = tn.Variable(1.0, name="v")
        y = tn.cond(p, lambda: v.assign(100.0), lambda: v.read())
        r = v.read()
    sess = tn.Session(g, backend=backend)
    assert float(sess.run(y, {p: False})) == 1.0 and float(sess.run(r)) == 1.0
    assert float(sess.run(y, {p: True})) == 100.0 and float(sess.run(r)) == 100.0


def test_variable_operators_read_the_variable(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(4.0, name="v")
        outs = [v + 1.0, 2.0 * v, v - 1.0, -v, v ** 2, v / 2.0]
    assert [float(x) for x in tn.Session(g, backend=backend).run(outs)] == [5.0, 8.0, 3.0, -4.0, 16.0, 2.0]


def test_variable_build_errors() -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable([1.0, 2.0], name="v")
        with pytest.raises(tn.GraphBuildError):
            tn.Variable(tn.constant(1.0))
        with pytest.raises(tn.DTypeError, match="AssignVariable"):
            v.assign(tn.constant([1, 2]))
        with pytest.raises(tn.ShapeError, match="AssignAddVariable"):
            v.assign_add(tn.constant([1.0, 2.0, 3.0]))


def test_variable_names_and_collections() -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.Variable(1.0, name="x")
        b = tn.Variable(2.0, name="x")
        c = tn.Variable(3.0, name="frozen", trainable=False)
    assert a.name != b.name
    assert set(g.variables) == {a.name, b.name, c.name}
    assert tn.global_variables(g) == [a, b, c]
    assert tn.trainable_variables(g) == [a, b]
    assert a.handle.node.op == "VarHandle" and a.handle.node.attrs["var_name"] == a.name


def test_feeding_a_variable_is_refused(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(1.0, name="v")
        r = v.read()
    with pytest.raises(tn.FeedError, match="assign"):
        tn.Session(g, backend=backend).run(r, {v: 2.0})


def test_outer_control_dependencies_order_a_whole_loop_and_cond(backend: str) -> None:
    """Ops inside a builder created under ``tn.control_dependencies`` run after those dependencies:
    the builder hangs them on its Enters and Switches, so every read inside sees the write."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        limit = tn.Variable(0, name="limit")
        with tn.control_dependencies([limit.assign(7)]):
            count = tn.while_loop(lambda i: i < limit.read(), lambda i: i + 1, tn.constant(0))
        with tn.control_dependencies([limit.assign(3)]):
            picked = tn.cond(p, lambda: limit.read() * 1, lambda: limit.read() * 2)
    sess = tn.Session(g, backend=backend)
    assert int(sess.run(count)) == 7
    assert int(tn.Session(g, backend=backend).run(picked, {p: True})) == 3
    assert int(tn.Session(g, backend=backend).run(picked, {p: False})) == 6
