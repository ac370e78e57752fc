"""Laws of the small-step system's stateful kernels and enabling rules, found missing by mutation
testing (``python tools/mutation.py --module semantics/smallstep.py``): which variable a
``ReadVariable`` or an assignment names ([E-Var-Read], [E-Var-Assign]), what an assignment stores
(its dtype, its shape, a variable with no value yet), the rule each stateful op cites, what a
``StackPop`` of a missing entry says ([E-Stack-Pop]). Where a law is about values, the reference
interpreter is run beside it.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import turnout as tn
from turnout import dtypes as dt
from turnout.errors import ExecutionError, KernelError, describe_node
from turnout.reference.executor import run_graph
from turnout.semantics import smallstep as ss

_F32 = {"dtype": "float32", "shape": []}


def _var_op(g: tn.Graph, op: str, inputs: list[tn.Tensor], var_name: str, name: str) -> tn.Tensor:
    """A variable op built by hand, so its ``var_name`` attribute can differ from its handle's."""
    return g.create_node(op, inputs, {**_F32, "var_name": var_name}, name=name).outputs[0]


# ---- which variable: the handle, else the var_name attribute ---------------------------------------------
def test_the_handle_input_names_the_variable() -> None:
    """[E-Var-Read] and [E-Var-Assign] act on the variable the handle input names (sigma(h)); the
    node's ``var_name`` attribute does not override it, as in the reference interpreter, which keys
    its store by the handle value alone."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(2.0, name="v")
        tn.Variable(5.0, name="w")
        read = _var_op(g, "ReadVariable", [v.handle], "w", "read")
        add = _var_op(g, "AssignAddVariable", [v.handle, tn.constant(1.0)], "w", "add")
        put = _var_op(g, "AssignVariable", [v.handle, tn.constant(7.0)], "w", "put")
    for fetch, want, stored in ((read, 2.0, 2.0), (add, 3.0, 3.0), (put, 7.0, 7.0)):
        r = ss.run(g, [fetch])
        assert float(r.values[0]) == float(run_graph(g, [fetch]).values[0]) == want
        assert (float(r.variables["v"]), float(r.variables["w"])) == (stored, 5.0)


def _fed_handle_graph(var_name: str, op: str = "ReadVariable") -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """A variable op whose handle input is a fed resource Placeholder: no handle value reaches it."""
    g = tn.Graph()
    with g.as_default():
        tn.Variable(2.0, name="v")
        h = tn.placeholder(dt.resource, [], name="h")
        inputs = [h] if op == "ReadVariable" else [h, tn.constant(3.0)]
        out = _var_op(g, op, inputs, var_name, "op")
    return g, h, out


def test_a_handle_that_is_not_a_handle_value_falls_back_to_the_var_name_attribute() -> None:
    """Where the handle input carries no handle value (it was fed), the variable is the one the node's
    ``var_name`` attribute names: a read gives its value and an update writes it."""
    g, h, out = _fed_handle_graph("v")
    r = ss.run(g, [out], feeds={h: np.float32(0.0)})
    assert float(r.values[0]) == 2.0
    g, h, out = _fed_handle_graph("v", "AssignAddVariable")
    r = ss.run(g, [out], feeds={h: np.float32(0.0)})
    assert float(r.values[0]) == float(r.variables["v"]) == 5.0


def _no_value_message(node: tn.Node, verb: str, name: str) -> str:
    return re.escape(f"{describe_node(node)} at tag {ss.fmt_tag(())} {verb} variable {name!r}, which has no value")


def test_reading_a_variable_with_no_value_is_an_execution_error() -> None:
    """[E-Var-Read] needs sigma(x) defined: reading a variable the store lacks stops the run with
    ExecutionError naming the node, its tag and the variable."""
    g, h, out = _fed_handle_graph("ghost")
    with pytest.raises(ExecutionError, match=_no_value_message(out.node, "reads", "ghost")):
        ss.run(g, [out], feeds={h: np.float32(0.0)})


def test_updating_a_variable_with_no_value_is_an_execution_error() -> None:
    """[E-Var-Assign] for AssignAdd/AssignSub computes f_n(sigma(x), v), so it needs sigma(x): updating
    a variable the store lacks stops the run with ExecutionError naming the node, its tag and the
    variable."""
    for op in ("AssignAddVariable", "AssignSubVariable"):
        g, h, out = _fed_handle_graph("ghost", op)
        with pytest.raises(ExecutionError, match=_no_value_message(out.node, "updates", "ghost")):
            ss.run(g, [out], feeds={h: np.float32(0.0)})


def test_assigning_a_variable_with_no_value_gives_it_one() -> None:
    """[E-Var-Assign] for AssignVariable is sigma(x) := v, which needs no old value: it gives a variable
    the store lacks its first value, cited under [E-Var-Assign]."""
    g, h, out = _fed_handle_graph("ghost", "AssignVariable")
    r = ss.run(g, [out], feeds={h: np.float32(0.0)})
    assert float(r.values[0]) == float(r.variables["ghost"]) == 3.0
    assert [rule for rule, node, *_ in r.firings if node == "op"] == ["E-Var-Assign"]


# ---- what an assignment stores ------------------------------------------------------------------------
def test_an_assignment_stores_the_value_and_cites_its_rule() -> None:
    """[E-Var-Assign] for AssignVariable: sigma(x) := v, the new value is the output, and the firing is
    logged under [E-Var-Assign]; as in the reference interpreter."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(2.0, name="v")
        put = v.assign(7.0, name="put")
    r = ss.run(g, [put])
    assert float(r.values[0]) == float(r.variables["v"]) == float(run_graph(g, [put]).values[0]) == 7.0
    assert [rule for rule, node, *_ in r.firings if node == "put"] == ["E-Var-Assign"]


def test_an_update_stores_the_variables_declared_dtype() -> None:
    """[E-Var-Assign]: the new value takes the variable's declared dtype (the node's ``dtype``
    attribute), whatever the store held: a float32 Variable started from a float64 or int value
    (``variables=``) is updated, stored and output as float32, as a float32 Variable is."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(2.0, name="v")
        add = v.assign_add(1.0)
    for start in (np.float64(1.0), 1):
        r = ss.run(g, [add], variables={"v": start})
        assert r.values[0].dtype == r.variables["v"].dtype == np.float32
        assert float(r.values[0]) == 2.0


def test_an_assignment_keeps_the_variables_shape() -> None:
    """A Variable keeps its shape ([E-Var-Assign], as on every backend): a value of its shape is stored;
    one of another shape (the store started from a value of another shape, ``variables=``) stops the
    run with ExecutionError naming the node, its tag and both shapes."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable([1.0, 2.0], name="v")
        put = v.assign(tn.constant([3.0, 4.0]), name="put")
    r = ss.run(g, [put])
    assert r.values[0].tolist() == r.variables["v"].tolist() == [3.0, 4.0]
    want = f"{describe_node(put.node)} at tag {ss.fmt_tag(())}: assigning shape (2,) to a variable of shape (3,)"
    with pytest.raises(ExecutionError, match=re.escape(want)):
        ss.run(g, [put], variables={"v": np.zeros(3, np.float32)})
