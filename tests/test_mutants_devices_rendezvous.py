"""Laws of the rendezvous (``turnout.devices.rendezvous``): the keyed table of tokens between
partitions, with a credit per edge and frame instance. Each law kills mutants of the full set of
``devices/rendezvous.py`` (issue 40, part 3; ``python tools/mutation.py --module devices/rendezvous.py
--all``): a key or a frame instance cut from the wrong part of the tag, a credit taken or given back
twice (or never), a Recv or a blocked Send woken with the wrong node, tag or rule (or never), a
token lost on its way, a message log that miscounts, a report or a listing in the wrong order, an
error that names the wrong node or key.

The rendezvous is called here as the partitions' Ports call it, one step at a time, with stand-in
owners (the rendezvous only appends wake-ups to an owner's ``mailbox`` and names it by ``short``) and
Send and Recv nodes made with ``Graph.create_node``: no interpreter, no thread, no run, so each test
takes milliseconds. The runs that drive it for real are in ``test_devices.py`` and
``test_mutants_devices2.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from turnout.devices.rendezvous import Rendezvous, fmt_key, key_of
from turnout.dtypes import float32
from turnout.errors import ExecutionError, describe_node
from turnout.graph import Graph, Node
from turnout.reference.rules import Tag, Token
from turnout.specs import TensorSpec


class _Owner:
    """Stands for the PartitionInterpreter that owns a Send or Recv: the rendezvous posts its wake-ups
    to ``mailbox`` and names the owner by ``short`` in its report."""

    def __init__(self, short: str) -> None:
        self.short = short
        self.mailbox: list[tuple[Node, Tag, str]] = []


def _pair(g: Graph, edge: str, credit: int = 1) -> tuple[Node, Node]:
    """The Send and the Recv of ``edge`` (what ``devices.partition`` makes for a cut edge)."""
    attrs = {"edge": edge, "src_device": "cpu:0", "dst_device": "cpu:1", "credit": credit, "control": False}
    x = g.create_node("Const", [], {"value": np.float32(1.0)}, name=f"x{edge}", specs=[TensorSpec(float32, ())])
    send = g.create_node("Send", [x.outputs[0]], attrs, name=f"send {edge}")
    recv = g.create_node("Recv", [], {**attrs, "dtype": "float32", "shape": []}, name=f"recv {edge}")
    return send, recv


def _tags(inst: Tag, n: int, start: int = 0) -> list[Tag]:
    """Iterations ``start`` .. ``start + n - 1`` of the innermost frame ``loop`` of instance ``inst``."""
    return [(*inst, ("loop", i)) for i in range(start, start + n)]


#: a frame instance at each depth (the root frame's loop, a loop inside an outer one, a loop two deep)
#: and, beside it, another instance of the same loop (the root loop has only one instance)
INSTANCES: list[tuple[Tag, Tag | None]] = [
    ((), None),
    ((("outer", 0),), (("outer", 1),)),
    ((("outer", 0), ("mid", 0)), (("outer", 0), ("mid", 1))),
]


# ---- keys -----------------------------------------------------------------------------------------------
def test_a_key_is_the_edge_and_the_whole_tag_and_prints_both() -> None:
    """A message's key is (edge, tag), the tag whole (frame instance and iteration), and errors and
    reports print it as both. Kills the edge attribute misspelt in ``key_of`` and ``fmt_key`` printing
    the tag as the edge, no tag, or an element past the pair."""
    send, recv = _pair(Graph(), "a->b")
    tag = (("outer", 2), ("loop", 5))
    assert key_of(send, tag) == key_of(recv, tag) == ("a->b", tag)
    assert fmt_key(("a->b", tag)) == "(edge 'a->b', tag outer:2/loop:5)"
    assert fmt_key(("a->b", ())) == "(edge 'a->b', tag root)"


# ---- credits ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("credit", [1, 2, 3])
@pytest.mark.parametrize(("inst", "other"), INSTANCES)
def test_a_send_takes_one_credit_of_its_frame_instance_and_blocks_when_none_is_left(
        credit: int, inst: Tag, other: Tag | None) -> None:
    """[E-Send] needs a credit of its edge in its frame instance (the tag without its last
    iteration): ``credit`` Sends of one instance fire, the next blocks, and another instance of the
    same loop has credits of its own. Kills the comparison made ``<=``, the credit read from a
    misspelt attribute, a credit taken as ``= 1``, ``-= 1`` or ``+= 2``, the instance cut as
    ``tag[:+1]`` or ``tag[:-2]``, and the rule's name mutated."""
    send, _ = _pair(Graph(), "a->b", credit)
    owner = _Owner("cpu:0")
    rv = Rendezvous()
    first = _tags(inst, credit + 1)
    assert [rv.arrive_send(owner, send, t) for t in first] == ["E-Send"] * credit + [None]
    if other is not None:
        assert rv.arrive_send(owner, send, _tags(other, 1)[0]) == "E-Send"
    assert owner.mailbox == []
    assert rv.stats() == {"messages": 0, "peak_unconsumed_per_edge": credit}


@pytest.mark.parametrize("credit", [1, 2])
@pytest.mark.parametrize("inst", [i for i, _ in INSTANCES])
def test_a_take_gives_the_credit_back_to_the_first_send_blocked_in_its_instance(credit: int, inst: Tag) -> None:
    """A Recv that takes a token gives its instance's credit back; a Send blocked there (the first
    to block, first) is woken as [E-Send] in its owner's mailbox and holds that credit, so the next
    Send still blocks. Kills the instance cut from the wrong part of the tag in ``take``, the credit
    not given back (or twice, or set to 1), the woken Send not holding it (or holding two, or set to
    1), the blocked queue lost or keyed wrongly, and the wake-up posted to the wrong owner, node or
    tag or under the wrong rule."""
    send, recv = _pair(Graph(), "a->b", credit)
    src, dst = _Owner("cpu:0"), _Owner("cpu:1")
    rv = Rendezvous()
    tags = _tags(inst, credit + 3)
    late = _tags(inst, 3, start=100)
    assert [rv.arrive_send(src, send, t) for t in tags] == ["E-Send"] * credit + [None] * 3
    for t in tags[:credit]:
        rv.send(send, t, Token(np.float32(len(t))))
    for k in range(3):
        rv.take(recv, tags[k])
        assert src.mailbox == [(send, t, "E-Send") for t in tags[credit:credit + k + 1]]  # in blocking order
        assert rv.arrive_send(src, send, late[k]) is None  # the credit is held by the Send woken
        rv.send(send, tags[credit + k], Token(np.float32(k)))
    for t in tags[3:]:
        rv.take(recv, t)
    assert src.mailbox[3:] == [(send, t, "E-Send") for t in late[:credit]]
    assert dst.mailbox == []
    assert rv.stats()["peak_unconsumed_per_edge"] == credit


def test_a_take_with_nothing_blocked_frees_its_credit() -> None:
    """With no Send blocked, a take returns the credit to the pool: the next Send of the instance
    fires at once, and the one after it blocks again. Kills the credit given back as ``= 1``, ``+= 1``
    or ``-= 2``."""
    send, recv = _pair(Graph(), "a->b", credit=2)
    owner = _Owner("cpu:0")
    rv = Rendezvous()
    t0, t1, t2, t3 = _tags((("outer", 0),), 4)
    assert rv.arrive_send(owner, send, t0) == rv.arrive_send(owner, send, t1) == "E-Send"
    rv.send(send, t0, Token(np.float32(0.0)))
    rv.take(recv, t0)
    assert rv.arrive_send(owner, send, t2) == "E-Send"
    assert rv.arrive_send(owner, send, t3) is None
    assert owner.mailbox == []


def test_credits_are_counted_per_edge() -> None:
    """Two edges of one frame instance have a credit each: a Send blocked on one edge is not woken
    by a take on the other. Kills the blocked queue or the credit keyed without its edge."""
    g = Graph()
    (s1, _), (s2, r2) = _pair(g, "a->b"), _pair(g, "c->d")
    owner = _Owner("cpu:0")
    rv = Rendezvous()
    t0, t1 = _tags((), 2)
    assert rv.arrive_send(owner, s1, t0) == rv.arrive_send(owner, s2, t0) == "E-Send"
    assert rv.arrive_send(owner, s1, t1) is None
    rv.send(s2, t0, Token(np.float32(1.0)))
    rv.take(r2, t0)
    assert owner.mailbox == []
    assert rv.arrive_send(owner, s2, t1) == "E-Send"


# ---- messages --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dead", [False, True])
def test_a_recv_after_its_send_fires_at_once_and_takes_the_very_token_sent(dead: bool) -> None:
    """A Recv that arrives after its message fires at once: [E-Recv] for a live token,
    [E-Recv-Dead] for a dead one; nobody is woken, and ``take`` hands over the token that was sent,
    live or dead. Kills the key made from no node or no tag, the message looked up under None (or
    never), the test inverted, the deadness test forced either way, the rule names mutated, and the
    token stored or taken as None."""
    send, recv = _pair(Graph(), "a->b")
    src, dst = _Owner("cpu:0"), _Owner("cpu:1")
    rv = Rendezvous()
    tag = (("outer", 1), ("loop", 3))
    tok = Token(None, True) if dead else Token(np.float32(7.0))
    assert rv.arrive_send(src, send, tag) == "E-Send"
    rv.send(send, tag, tok)
    assert rv.arrive_recv(dst, recv, tag) == ("E-Recv-Dead" if dead else "E-Recv")
    assert rv.take(recv, tag) is tok
    assert src.mailbox == dst.mailbox == []
    assert rv.unconsumed() == [] and rv.report() == []


@pytest.mark.parametrize("dead", [False, True])
def test_a_recv_before_its_send_waits_and_the_send_wakes_it_with_its_rule(dead: bool) -> None:
    """A Recv that finds nothing waits (``arrive_recv`` answers None and the report names it); the
    Send of its key posts it to its own owner's mailbox as [E-Recv] or [E-Recv-Dead], and a Send of
    another key wakes nobody. Kills the waiting entry lost or stored as None, the wake-up never
    posted (or posted with no owner, node, tag or rule, or with the wrong ones), and the rule's
    deadness test forced either way or its names mutated."""
    g = Graph()
    send, recv = _pair(g, "a->b")
    other, _ = _pair(g, "c->d")
    src, dst = _Owner("cpu:0"), _Owner("cpu:1")
    rv = Rendezvous()
    tag = (("loop", 4),)
    tok = Token(None, True) if dead else Token(np.float32(7.0))
    assert rv.arrive_recv(dst, recv, tag) is None
    assert rv.report() == ["  Recv 'recv a->b' on cpu:1 waits for (edge 'a->b', tag loop:4)"]
    rv.send(other, tag, Token(np.float32(1.0)))
    rv.send(send, (("loop", 5),), Token(np.float32(1.0)))
    assert dst.mailbox == []
    rv.send(send, tag, tok)
    assert dst.mailbox == [(recv, tag, "E-Recv-Dead" if dead else "E-Recv")]
    assert src.mailbox == [] and rv.report() == []
    assert rv.take(recv, tag) is tok


def test_two_recvs_waiting_for_one_key_are_an_error_naming_the_recv_and_the_key() -> None:
    """A key has one Recv: a second one waiting for it is an ExecutionError naming that Recv and the
    key, and a Recv of the same edge at another tag is no second. Kills the membership test
    inverted and the message's node or key dropped."""
    send, recv = _pair(Graph(), "a->b")
    dst = _Owner("cpu:1")
    rv = Rendezvous()
    assert rv.arrive_recv(dst, recv, (("loop", 0),)) is None
    assert rv.arrive_recv(dst, recv, (("loop", 1),)) is None
    with pytest.raises(ExecutionError) as e:
        rv.arrive_recv(dst, recv, (("loop", 0),))
    assert str(e.value) == f"{describe_node(recv)}: two Recvs wait for (edge 'a->b', tag loop:0)"
    assert describe_node(recv).startswith('Recv node "recv a->b"')


def test_a_key_sent_twice_is_an_error_naming_the_send_and_the_key() -> None:
    """Exactly once: a second Send of one key is an ExecutionError naming the Send and the key, and
    it neither replaces the first token nor counts as a message. Kills the message's node or key
    dropped and the log counting a send as ``-= 1`` (which the guard still reads as sent) or
    ``+= 2``."""
    send, recv = _pair(Graph(), "a->b")
    rv = Rendezvous()
    tag = (("loop", 2),)
    first = Token(np.float32(1.0))
    rv.send(send, tag, first)
    with pytest.raises(ExecutionError) as e:
        rv.send(send, tag, Token(np.float32(2.0)))
    assert str(e.value) == f"{describe_node(send)} sent (edge 'a->b', tag loop:2) twice (exactly-once violated)"
    assert describe_node(send).startswith('Send node "send a->b"')
    assert rv.stats()["messages"] == 1 and dict(rv.sent) == {("a->b", tag): 1}
    assert rv.take(recv, tag) is first


def test_the_log_counts_every_key_sent_once_and_received_once() -> None:
    """The log the tests check exactly-once against: each key sent once and, once taken, received
    once; ``stats`` counts the messages; ``unconsumed`` lists the keys sent and not taken in (edge,
    tag) order, whatever order they were sent in. Kills the counts mutated, the listing sorted by the
    tag alone, unsorted or by a missing element, and the stats' keys renamed."""
    g = Graph()
    (sa, ra), (sz, _) = _pair(g, "a->b"), _pair(g, "z->b")
    rv = Rendezvous()
    t0, t1, t2 = _tags((("outer", 0),), 3)
    for send, t in ((sz, t0), (sa, t2), (sa, t1), (sa, t0)):
        rv.send(send, t, Token(np.float32(1.0)))
    rv.take(ra, t2)
    assert dict(rv.sent) == {("a->b", t0): 1, ("a->b", t1): 1, ("a->b", t2): 1, ("z->b", t0): 1}
    assert dict(rv.received) == {("a->b", t2): 1}
    assert rv.unconsumed() == [("a->b", t0), ("a->b", t1), ("z->b", t0)]
    assert rv.stats() == {"messages": 4, "peak_unconsumed_per_edge": 0}  # (no Send asked for a credit)


def test_a_fresh_rendezvous_is_empty() -> None:
    """Before any Send or Recv: no message, no peak, nothing waiting or unconsumed. Kills the peak
    starting at 1."""
    rv = Rendezvous()
    assert rv.stats() == {"messages": 0, "peak_unconsumed_per_edge": 0}
    assert rv.report() == [] and rv.unconsumed() == []


# ---- the report of a stuck run -----------------------------------------------------------------------------
def test_the_report_lists_waiting_recvs_by_key_then_blocked_sends_by_edge_and_instance() -> None:
    """What a stuck run prints: first every waiting Recv in (edge, tag) order, then every blocked
    Send in (edge, frame instance) order, each with its node, its owner, its key and (for a Send) the
    tokens of its edge and instance left unconsumed, whatever order they arrived in. Kills each sort
    key mutated (by owner or node, by the tag alone, by a missing element, by nothing, by the blocked
    queue), the lines or keys dropped, and the count read from the wrong counter."""
    g = Graph()
    (sa, ra), (sz, rz) = _pair(g, "a->b", credit=2), _pair(g, "z->b", credit=2)
    owner = _Owner("cpu:1")
    rv = Rendezvous()
    for recv, t in ((rz, (("loop", 0),)), (ra, (("loop", 1),)), (ra, (("loop", 0),))):
        assert rv.arrive_recv(owner, recv, t) is None
    for send in (sz, sa):
        for outer in (1, 0):
            for t in _tags((("outer", outer),), 3):
                rv.arrive_send(owner, send, t)
    assert rv.report() == [
        "  Recv 'recv a->b' on cpu:1 waits for (edge 'a->b', tag loop:0)",
        "  Recv 'recv a->b' on cpu:1 waits for (edge 'a->b', tag loop:1)",
        "  Recv 'recv z->b' on cpu:1 waits for (edge 'z->b', tag loop:0)",
        *[f"  Send 'send {e}' on cpu:1 is blocked at (edge '{e}', tag outer:{o}/loop:2): 2 tokens of this edge "
          "are unconsumed" for e in ("a->b", "z->b") for o in (0, 1)],
    ]
