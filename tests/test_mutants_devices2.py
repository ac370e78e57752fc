"""More of ``devices/`` that mutation testing found unchecked (``python tools/mutation.py --module
devices/rendezvous.py`` and the other device modules): the rule names a partitioned run records for
its Sends and Recvs, which must be the rules of ``specs/rules.toml`` that the rendezvous implements.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_devices import D2, _loop_graph

import turnout as tn

RULES = tomllib.loads((Path(__file__).parents[1] / "specs" / "rules.toml").read_text())["rule"]
DYNAMIC = {r["name"] for r in RULES if r["kind"] == "dynamic"}


def _cond_across_devices() -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    """A cond whose true branch runs on cpu:1: when it is not taken, the Switch's dead output crosses
    to cpu:1 as a dead token, and the branch's dead result crosses back."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        x = tn.placeholder(tn.float32, [], name="x")

        def on_cpu1() -> tn.Tensor:
            with tn.device("cpu:1"):
                return x * 2.0

        r = tn.cond(p, on_cpu1, lambda: x + 1.0)
    return g, p, x, r


def _traced(g: tn.Graph, fetch: tn.Tensor, feeds: dict[Any, Any], order: str) -> tuple[Any, list[Any]]:
    sess = tn.Session(g, devices=D2, order=order, seed=3)
    got = sess.run(fetch, feeds, trace=True)
    res = sess.last_result
    assert res is not None and res.trace is not None
    return got, [e for _, e in res.trace.events]


@pytest.mark.parametrize("order", ["round_robin", "threads"])
@pytest.mark.parametrize("pred", [True, False])
def test_sends_and_recvs_record_their_rules_live_and_dead(order: str, pred: bool) -> None:
    """[E-Send] for every Send, live or dead; [E-Recv] for a Recv that takes a live token and
    [E-Recv-Dead] for one that takes a dead token. Every rule name recorded is a dynamic rule of
    specs/rules.toml."""
    g, p, x, r = _cond_across_devices()
    feeds = {p: np.bool_(pred), x: np.float32(3.0)}
    got, events = _traced(g, r, feeds, order)
    assert float(got) == (6.0 if pred else 4.0)
    assert {e.rule for e in events} <= DYNAMIC, {e.rule for e in events} - DYNAMIC
    sends = [e for e in events if e.op == "Send"]
    recvs = [e for e in events if e.op == "Recv"]
    assert sends and recvs
    assert all(e.rule == "E-Send" for e in sends), [(e.node, e.rule) for e in sends]
    assert all(e.rule == ("E-Recv-Dead" if e.dead else "E-Recv") for e in recvs), \
        [(e.node, e.dead, e.rule) for e in recvs]
    assert all(e.dead for e in recvs) == (not pred)  # the untaken branch's values cross dead
    assert all(not e.dead for e in recvs) == pred


@pytest.mark.parametrize("order", ["round_robin", "threads"])
def test_a_loop_across_devices_records_one_send_and_one_recv_rule_per_message(order: str) -> None:
    """A loop whose body runs on cpu:1 sends at every iteration: one [E-Send] and one [E-Recv] per
    rendezvous message, including the Sends that waited for a credit (``parallel_iterations``)."""
    g, x, y = _loop_graph()
    got, events = _traced(g, y, {x: np.float32(1.0)}, order)
    assert float(got) == 32.0
    assert {e.rule for e in events} <= DYNAMIC
    sends = [e for e in events if e.op == "Send"]
    recvs = [e for e in events if e.op == "Recv"]
    assert len(sends) == len(recvs) > 0
    assert {e.rule for e in sends} == {"E-Send"}
    assert {e.rule for e in recvs if not e.dead} == {"E-Recv"}
    assert all(e.rule == "E-Recv-Dead" for e in recvs if e.dead)


# ---- the rendezvous protocol, step by step ------------------------------------------------------------
class _Owner:
    """Stands for the PartitionInterpreter that owns a Send or Recv: the rendezvous posts its wake-ups
    to the owner's mailbox and names it by ``short`` in reports."""

    def __init__(self, short: str) -> None:
        self.short = short
        self.mailbox: list[Any] = []


def _send_recv(credit: int, edge: str = "a->b") -> tuple[Any, Any]:
    g = tn.Graph()
    base = {"edge": edge, "src_device": "cpu:0", "dst_device": "cpu:1", "credit": credit, "control": False}
    with g.as_default():
        x = tn.constant(1.0)
    send = g.create_node("Send", [x], base, name="snd")
    recv = g.create_node("Recv", [], {**base, "dtype": "float32", "shape": []}, name="rcv")
    return send, recv


def test_a_send_without_credit_blocks_until_a_recv_takes_a_token_of_its_frame_instance() -> None:
    """Credits are counted per frame instance (the tag without its last iteration): with a credit of
    1, a second Send in instance A blocks until A's first token is taken, and is then posted back to
    its owner as [E-Send]; a Send of another instance B is not held back by A. The report names the
    blocked Send and the waiting Recv while they wait."""
    from turnout.devices.rendezvous import Rendezvous
    from turnout.reference.rules import Token

    send, recv = _send_recv(credit=1)
    src, dst = _Owner("cpu:0"), _Owner("cpu:1")
    rv = Rendezvous()
    a0, a1 = (("outer", 0), ("inner", 0)), (("outer", 0), ("inner", 1))
    b0 = (("outer", 1), ("inner", 0))
    assert rv.arrive_recv(dst, recv, a0) is None  # nothing sent yet: the Recv waits
    assert rv.arrive_send(src, send, a0) == "E-Send"
    assert rv.arrive_send(src, send, a1) is None  # instance A has no credit left
    assert rv.arrive_send(src, send, b0) == "E-Send"  # instance B has its own
    assert rv.report() == [
        "  Recv 'rcv' on cpu:1 waits for (edge 'a->b', tag outer:0/inner:0)",
        "  Send 'snd' on cpu:0 is blocked at (edge 'a->b', tag outer:0/inner:1): 1 tokens of this edge "
        "are unconsumed",
    ]
    rv.send(send, a0, Token(np.float32(2.0)))
    assert dst.mailbox == [(recv, a0, "E-Recv")]  # the waiting Recv is woken with its rule
    assert src.mailbox == []
    rv.send(send, b0, Token(np.float32(5.0)))
    assert rv.unconsumed() == [("a->b", a0), ("a->b", b0)]  # sent, not yet taken
    assert rv.take(recv, a0).value == np.float32(2.0)
    assert src.mailbox == [(send, a1, "E-Send")]  # the blocked Send is woken, holding the credit
    assert rv.report() == []
    rv.send(send, a1, Token(None, True))
    assert rv.arrive_recv(dst, recv, a1) == "E-Recv-Dead"
    assert rv.take(recv, a1).dead
    assert rv.arrive_send(src, send, (("outer", 0), ("inner", 2))) == "E-Send"  # A's credit came back
    assert rv.unconsumed() == [("a->b", b0)]
    assert rv.stats() == {"messages": 3, "peak_unconsumed_per_edge": 1}


def test_the_report_lists_blocked_sends_by_edge_and_frame_instance() -> None:
    """Several edges with blocked Sends: the report lists them in (edge, instance) order, whatever
    order they blocked in."""
    from turnout.devices.rendezvous import Rendezvous

    rv = Rendezvous()
    owner = _Owner("cpu:0")
    late, _ = _send_recv(credit=1, edge="z->b")
    early, _ = _send_recv(credit=1, edge="a->b")
    for send in (late, early):
        for it in range(2):
            rv.arrive_send(owner, send, (("loop", it),))
    for send in (late, early):
        rv.arrive_send(owner, send, (("other", 0), ("loop", 0)))
        rv.arrive_send(owner, send, (("other", 0), ("loop", 1)))
    assert [line.split(" is blocked at ")[1].split(":")[0] for line in rv.report()] == [
        "(edge 'a->b', tag loop", "(edge 'a->b', tag other", "(edge 'z->b', tag loop", "(edge 'z->b', tag other"]


# ---- placement ----------------------------------------------------------------------------------------
def test_a_conflict_names_every_rule_that_tied_the_group() -> None:
    """A Variable read on cpu:0 and assigned on cpu:1: both ops are tied to the VarHandle, so the
    group joins three nodes by two rules, and the error gives both."""
    from turnout.devices import place

    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(1.0, name="v")
        with tn.device("cpu:0"):
            v.read()
        with tn.device("cpu:1"):
            v.assign(2.0)
    with pytest.raises(tn.PlacementError) as ei:
        place(g, D2)
    msg = str(ei.value)
    assert msg.startswith('conflicting placement: ReadVariable node "v/read"'), msg
    assert msg.endswith("must share one device, because v/read (ReadVariable) uses the resource made by v "
                        "(VarHandle); v/AssignVariable (AssignVariable) uses the resource made by v (VarHandle) "
                        "(allow_soft_placement=True resolves it by the colocation rule)"), msg


def test_a_resource_handle_is_traced_back_through_stop_gradient() -> None:
    """StopGradient forwards its input unchanged, so a handle passed through it still belongs to the
    VarHandle that made it (and an op using it is colocated with that VarHandle)."""
    from turnout.devices.placement import resource_creator

    g = tn.Graph()
    with g.as_default():
        tn.Variable(1.0, name="v")
    vh = next(n for n in g.nodes if n.op == "VarHandle")
    sg = g.create_node("StopGradient", [vh.outputs[0]], name="sg")
    assert resource_creator(sg.outputs[0]) is vh
    assert resource_creator(vh.outputs[0]) is vh


def test_describe_lists_each_devices_nodes_and_the_empty_ones() -> None:
    from test_devices import D3

    from turnout.devices import place

    g = tn.Graph()
    with g.as_default():
        a = tn.constant(1.0, name="a")
        with tn.device("cpu:1"):
            tn.add(a, 2.0, name="b")
    lines = place(g, D3).describe().splitlines()
    assert lines[0].startswith("cpu:0: a") and lines[1].startswith("cpu:1: ") and "b" in lines[1].split(", ")
    assert lines[2] == "cpu:2: (nothing)"


def test_only_the_ops_that_use_a_resource_are_tied_to_its_maker() -> None:
    """An Identity that forwards a Variable's handle is not a resource user: it takes its own device
    scope, while the ReadVariable after it is tied to the VarHandle, wherever the handle went."""
    from turnout.devices import place

    g = tn.Graph()
    with g.as_default():
        with tn.device("cpu:0"):
            tn.Variable(1.0, name="v")
    vh = next(n for n in g.nodes if n.op == "VarHandle")
    with g.as_default(), tn.device("cpu:1"):
        ident = tn.identity(vh.outputs[0], name="fwd")
    read = g.create_node("ReadVariable", [ident], {"dtype": "float32", "shape": []}, name="rd")
    p = place(g, D2)
    assert p.why(ident) == "device scope of fwd" and p[ident].endswith("CPU:1")
    assert p[read] == p[vh] and p[vh].endswith("CPU:0")
    assert "rd (ReadVariable) uses the resource made by v (VarHandle)" in p.why(read)


def test_a_scope_or_request_outside_the_device_list_names_the_node_and_the_rule() -> None:
    from turnout.devices import place

    g = tn.Graph()
    with g.as_default():
        a = tn.constant(1.0, name="a")
        with tn.device("cpu:5"):
            tn.add(a, a, name="far")
    with pytest.raises(tn.PlacementError, match=r'Add node "far" .*is scoped to device \'cpu:5\' \(.*CPU:5\), which is '
                                               r"not one of the devices \['cpu:0', 'cpu:1'\]"):
        place(g, D2)
    g2 = tn.Graph()
    with g2.as_default():
        tn.constant(1.0, name="a")
    with pytest.raises(tn.PlacementError, match=r'Const node "a" .*is requested on device \'gpu:x\': .*device name'):
        place(g2, D2, requests={"a": "gpu:x"})


# ---- the drivers of a partitioned run -----------------------------------------------------------------
def _two_independent_chains() -> tuple[tn.Graph, list[tn.Tensor]]:
    """One chain of five Adds on each device, with no edge between them: both partitions can always fire."""
    g = tn.Graph()
    with g.as_default():
        outs = []
        for d in D2:
            with tn.device(d):
                x = tn.constant(1.0)
                for _ in range(4):
                    x = x + 1.0
                outs.append(x)
    return g, outs


def _device_sequence(g: tn.Graph, outs: list[tn.Tensor], order: str, seed: int = 0) -> list[tuple[str, str]]:
    sess = tn.Session(g, devices=D2, order=order, seed=seed)
    assert [float(v) for v in sess.run(outs, trace=True)] == [5.0, 5.0]
    res = sess.last_result
    assert res is not None and res.trace is not None
    return [(d, e.node) for d, e in res.trace.events]


def test_round_robin_takes_the_partitions_in_turn() -> None:
    g, outs = _two_independent_chains()
    devices = [d for d, _ in _device_sequence(g, outs, "round_robin")]
    assert len(devices) == 18
    assert devices == [devices[0], devices[1]] * 9 and devices[0] != devices[1]


def test_the_random_order_is_drawn_from_its_seed() -> None:
    g, outs = _two_independent_chains()
    assert _device_sequence(g, outs, "random", seed=1) == _device_sequence(g, outs, "random", seed=1)
    assert len({tuple(_device_sequence(g, outs, "random", seed=s)) for s in range(4)}) > 1


@pytest.mark.parametrize("order", ["round_robin", "threads"])
def test_an_error_in_one_partition_is_raised_as_on_one_device(order: str) -> None:
    """A StackPop of a stack never pushed fails on cpu:1; every driver raises that error (naming the
    pop), the one the unpartitioned run raises, and not a deadlock of the partitions left waiting."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        s = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []}, name="stk").outputs[0]
        with tn.device("cpu:1"):
            popped = g.create_node("StackPop", [s, tn.constant([0])], {"dtype": "float32", "shape": []},
                                   name="pop_it").outputs[0]
        out = popped + x
    with pytest.raises(tn.ExecutionError, match=r'StackPop node "pop_it"'):
        tn.Session(g).run(out, {x: np.float32(1.0)})
    with pytest.raises(tn.ExecutionError, match=r'StackPop node "pop_it"') as ei:
        tn.Session(g, devices=D2, order=order).run(out, {x: np.float32(1.0)})
    assert not isinstance(ei.value, tn.DeadlockError)
