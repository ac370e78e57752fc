"""Laws of the small-step system's stateful kernels and enabling rules, found missing by mutation
testing (``python tools/mutation.py --module semantics/smallstep.py``): which variable a
``ReadVariable`` or an assignment names ([E-Var-Read], [E-Var-Assign]), what an assignment stores
(its dtype, its shape, a variable with no value yet), the rule each stateful op cites, what a
``StackPop`` of a missing entry says ([E-Stack-Pop]). Where a law is about values, the reference
interpreter is run beside it.
"""

from __future__ import annotations

import re

import graphs
import numpy as np
import pytest

import turnout as tn
from turnout import dtypes as dt
from turnout import raw
from turnout.devices import partition, place
from turnout.devices import smallstep as pss
from turnout.errors import ExecutionError, KernelError, MergeConflictError, describe_node
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
    """A variable op whose handle input is a fed resource Placeholder, so no handle value reaches it;
    the op sits in frame ``f`` (its tag is ``f[0]``) and its output leaves by an Exit."""
    g = tn.Graph()
    with g.as_default():
        tn.Variable(2.0, name="v")
        h = tn.placeholder(dt.resource, [], name="h")
        inputs = [raw.enter(h, "f")]
        if op != "ReadVariable":
            inputs.append(raw.enter(tn.constant(3.0), "f"))
        out = raw.exit(_var_op(g, op, inputs, var_name, "op"))
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


def _no_value_message(g: tn.Graph, verb: str, name: str) -> str:
    node = next(n for n in g.nodes if n.name == "op")
    return re.escape(f"{describe_node(node)} at tag {ss.fmt_tag((('f', 0),))} {verb} variable {name!r}, "
                     "which has no value")


def test_reading_a_variable_with_no_value_is_an_execution_error() -> None:
    """[E-Var-Read] needs sigma(x) defined: reading a variable the store lacks stops the run with
    ExecutionError naming the node, its tag and the variable."""
    g, h, out = _fed_handle_graph("ghost")
    with pytest.raises(ExecutionError, match=_no_value_message(g, "reads", "ghost")):
        ss.run(g, [out], feeds={h: np.float32(0.0)})


def test_updating_a_variable_with_no_value_is_an_execution_error() -> None:
    """[E-Var-Assign] for AssignAdd/AssignSub computes f_n(sigma(x), v), so it needs sigma(x): updating
    a variable the store lacks stops the run with ExecutionError naming the node, its tag and the
    variable."""
    for op in ("AssignAddVariable", "AssignSubVariable"):
        g, h, out = _fed_handle_graph("ghost", op)
        with pytest.raises(ExecutionError, match=_no_value_message(g, "updates", "ghost")):
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
    run with ExecutionError naming the node, its tag (here ``f[0]``, inside a frame) and both shapes."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable([1.0, 2.0], name="v")
        put = g.create_node("AssignVariable", [raw.enter(v.handle, "f"), raw.enter(tn.constant([3.0, 4.0]), "f")],
                            v._attrs(), name="put").outputs[0]
        out = raw.exit(put)
    r = ss.run(g, [out])
    assert r.values[0].tolist() == r.variables["v"].tolist() == [3.0, 4.0]
    want = (f"{describe_node(put.node)} at tag {ss.fmt_tag((('f', 0),))}: assigning shape (2,) to a variable "
            "of shape (3,)")
    with pytest.raises(ExecutionError, match=re.escape(want)):
        ss.run(g, [out], variables={"v": np.zeros(3, np.float32)})


# ---- stacks: the handle and a missing entry ----------------------------------------------------------
def test_popping_a_missing_entry_names_the_stack_and_the_key() -> None:
    """[E-Stack-Pop] needs Sigma(h)(tuple(index)) defined: a pop under an index nothing was pushed at
    stops the run with KernelError naming the node, its tag (``f[0]``), the stack handle (the creating
    key (StackNew node, tag), [E-Stack-Push]) and the missing key; the pushed index pops its value."""
    g = tn.Graph()
    with g.as_default():
        h = raw.enter(g.create_node("StackNew", [], {"elem_dtype": "float32", "elem_shape": []},
                                    name="stack").outputs[0], "f")
        push = g.create_node("StackPush", [h, raw.enter(tn.constant([0]), "f"), raw.enter(tn.constant(5.0), "f")],
                             name="push")
        pops = [g.create_node("StackPop", [h, raw.enter(tn.constant([k]), "f")], _F32, control_inputs=[push],
                              name=f"pop{k}").outputs[0] for k in (0, 1)]
        outs = [raw.exit(p) for p in pops]
    assert float(ss.run(g, [outs[0]]).values[0]) == 5.0
    handle = ss.StackHandleValue("stack", ())
    want = f"{describe_node(pops[1].node)} at tag {ss.fmt_tag((('f', 0),))}: stack {handle} has no entry under key (1,)"
    with pytest.raises(KernelError, match=re.escape(want)):
        ss.run(g, [outs[1]])


# ---- what the firing log records --------------------------------------------------------------------------
def test_a_loops_iteration_steps_are_logged_live_and_its_frame_done_at_the_parent_tag() -> None:
    """The run's log records (rule, node, tag, dead) per firing: every [E-Next-Live] is live, fresh or
    delivered out of Park (here ``parallel_iterations=1`` parks each next iteration until the one
    before retires), and [E-Frame-Done] is keyed by the instance's parent tag (the root here, ``()``).
    The loop's value is the reference interpreter's."""
    g = tn.Graph()
    with g.as_default():
        out = tn.while_loop(lambda i: i < 4, lambda i: i + 1, [tn.constant(0)], parallel_iterations=1)
    out = out[0] if isinstance(out, (list, tuple)) else out
    r = ss.run(g, [out])
    assert int(r.values[0]) == int(run_graph(g, [out]).values[0]) == 4
    nexts = [dead for rule, _, _, dead in r.firings if rule == "E-Next-Live"]
    assert nexts and set(nexts) == {False}
    assert [tag for rule, _, tag, _ in r.firings if rule == "E-Frame-Done"] == [()]


# ---- a live input reaching a Merge after it fired --------------------------------------------------------
def test_a_late_live_input_enables_a_merge_conflict_firing() -> None:
    """[E-Merge-Conflict]: a live data token reaching a Merge that already fired at its tag enables one
    live conflict firing of that Merge at that tag (consuming nothing), and firing it stops the run with
    MergeConflictError; the reference interpreter stops alike."""
    g = tn.Graph()
    with g.as_default():
        slow = tn.constant(2.0)
        for i in range(3):
            slow = tn.identity(slow, name=f"slow{i}")
        out, _ = raw.merge([tn.constant(1.0), slow], name="m")
    c = ss.initial(g, [out])
    en = ss.enabled(c)
    while not any(f.rule == "E-Merge-Conflict" for f in en):
        c = ss.fire(c, next((f for f in en if f.node == "m"), en[0]))  # the Merge fires as soon as it can
        en = ss.enabled(c)
    nid = _node(g, "m").id
    assert [f for f in en if f.rule == "E-Merge-Conflict"] == [ss.Firing("E-Merge-Conflict", "m", (), False, nid, ())]
    with pytest.raises(MergeConflictError):
        ss.fire(c, next(f for f in en if f.rule == "E-Merge-Conflict"))
    with pytest.raises(MergeConflictError):
        run_graph(g, [out])


def _node(g: tn.Graph, name: str) -> tn.Node:
    return next(n for n in g.nodes if n.name == name)


# ---- Send and Recv across partitions --------------------------------------------------------------------
def test_send_and_recv_firings_name_their_node() -> None:
    """[E-Send], [E-Recv] and [E-Recv-Dead] firings name their node, as every node firing does (the
    log, the trace and the deadlock report read it): in every configuration of a run of a cond split
    over two devices, each enabled node firing names the node its id is."""
    g, p, x, z = graphs.cond_split_over_two_devices()
    seen = set()
    for pv in (True, False):
        feeds = {p: pv, x: 3}
        parted = partition(g, place(g, ["cpu:0", "cpu:1"]), [z], {(t.node.id, t.index) for t in feeds})
        s = pss.system(parted, feeds)
        pc = s.initial
        while nxt := pss.steps(s, pc):
            for i, f in nxt:
                if f.is_node_firing:
                    assert f.node == pc.configs[i].program.nodes[f.node_id].name
                    seen.add(f.rule)
            pc = pss.step(s, pc, *nxt[0])
        assert pss.outcome(s, pc) is not None
    assert {"E-Send", "E-Recv", "E-Recv-Dead"} <= seen


# ---- a Merge whose data inputs are all dead ---------------------------------------------------------------
def _run_to_quiescence(c: ss.Config, skip: str | None = None) -> ss.Config:
    """Fire the first enabled firing until none is left (none of node ``skip``, where given)."""
    while en := [f for f in ss.enabled(c) if f.node != skip]:
        c = ss.fire(c, en[0])
    return c


def test_a_merge_of_dead_data_inputs_consumes_its_control_tokens() -> None:
    """[E-Merge-AllDead] (a): a Merge whose every data input is dead goes dead once its control inputs
    (Guard(m, t)) hold a token; the firing consumes those control tokens (its ``inputs``), live here,
    and fetching it fails as on the reference interpreter."""
    g = tn.Graph()
    with g.as_default():
        dead, _ = raw.switch(tn.constant(1.0), tn.constant(True))
        gate = tn.identity(tn.constant(2.0), name="gate")
        with tn.control_dependencies([gate]):
            out, _ = raw.merge([dead], name="m")
    c = _run_to_quiescence(ss.initial(g, [out]), skip="m")
    ctl = ss.Token(None, False, ())
    assert [f for f in ss.enabled(c) if f.node == "m"] == [
        ss.Firing("E-Merge-AllDead", "m", (), True, _node(g, "m").id, (ctl,))]
    with pytest.raises(tn.DeadFetchError):
        run_graph(g, [out])
    with pytest.raises(tn.DeadFetchError):
        ss.run(g, [out])


# ---- instance steps of one loop while another waits ------------------------------------------------------
def test_a_loop_retires_and_finishes_while_another_waits_for_an_enter() -> None:
    """[E-Iter-Retire] and [E-Frame-Done] are about one frame instance and the tags busy under it: an
    instance still waiting for one of its Enters (pend > 0) holds back only itself, so a sibling loop
    opened after it retires each iteration and finishes meanwhile. Both loops then give the reference
    interpreter's values."""
    g = tn.Graph()
    with g.as_default():
        slow = tn.identity(tn.constant(2), name="slow")
        a = tn.while_loop(lambda i, j: i < j, lambda i, j: (i + 1, j + 0), [tn.constant(0), slow], name="a")
        b0 = tn.constant(0)
        for k in range(3):  # b opens after a
            b0 = tn.identity(b0, name=f"b{k}")
        b = tn.while_loop(lambda i: i < 2, lambda i: i + 1, [b0], name="b")
    b = b[0] if isinstance(b, (list, tuple)) else b
    c = ss.initial(g, [a[0], b])
    steps = []
    while en := [f for f in ss.enabled(c) if f.node != "slow"]:
        c = ss.fire(c, en[0])
        steps.append((en[0].rule, en[0].node))
    assert [frame.split("/")[0] for (_, frame), rec in c.instances.items() if rec.pend] == ["a"]
    assert [node.split("/")[0] for rule, node in steps if rule == "E-Frame-Done"] == ["b"]
    assert [node.split("/")[0] for rule, node in steps if rule == "E-Iter-Retire"] == ["b"] * 3
    c = _run_to_quiescence(c)
    assert [int(v) for v in ss.outputs(c)] == [int(v) for v in run_graph(g, [a[0], b]).values] == [2, 2]


def test_a_send_is_enabled_once_per_choice_of_its_inputs() -> None:
    """[E-Send] fires once its inputs are full at t, one firing per way Full(n, t) picks a token per slot:
    where an edge holds several tokens at t (a graph that breaks [W-Merge-Unique]: here an Exit taken
    from a hand-built loop's true branch fires in every iteration and delivers at the root tag each
    time), each token is a firing of its own, as for every other strict rule."""
    g = tn.Graph()
    with g.as_default():
        each = graphs.exit_every_iteration()
        g.create_node("Send", [each], {"edge": "e", "src_device": "a", "dst_device": "b", "credit": 1,
                                       "control": False}, name="send")
    c = _run_to_quiescence(ss.initial(g, [each], whole_graph=True), skip="send")
    sends = [f for f in ss.enabled(c) if f.node == "send"]
    assert {f.rule for f in sends} == {"E-Send"}
    assert sorted(int(f.inputs[0].value) for f in sends) == [0, 1, 2]
