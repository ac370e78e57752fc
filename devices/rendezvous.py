"""The rendezvous: a keyed table of tokens between partitions, with a credit per edge.

A Send puts its token (live or dead) under ``(edge, tag)``; the Recv of the same edge at the same tag
takes it. Either may come first: a Recv that finds nothing registers as *waiting* and is woken when the
token arrives; a Send whose edge has no credit left (``parallel_iterations`` unconsumed tokens of one
frame instance) registers as *blocked* and is woken when a Recv consumes one. Wake-ups go to the owning
partition's mailbox, so in the threaded driver only a partition's own thread ever touches its
interpreter. One lock guards the table; its condition variable is what idle threads wait on.

The table also keeps the log of every key sent and received, from which the tests check that every
``(edge, tag)`` message is sent once and received once.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from typing import TYPE_CHECKING, Any, Optional

from turnout.errors import ExecutionError, describe_node
from turnout.graph import Node
from turnout.reference.rules import Tag, Token
from turnout.reference.trace import fmt_tag

if TYPE_CHECKING:
    from turnout.devices.executor import PartitionInterpreter

Key = tuple[str, Tag]


def key_of(node: Node, tag: Tag) -> Key:
    """The rendezvous key of a Send or Recv firing at ``tag``: (edge, tag)."""
    return (node.attrs["edge"], tag)


def fmt_key(key: Key) -> str:
    """A key as the errors and reports print it: its edge and its tag."""
    return f"(edge {key[0]!r}, tag {fmt_tag(key[1])})"


class Rendezvous:
    """The shared table. All methods take the lock; wake-ups are posted to mailboxes."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.messages: dict[Key, Token] = {}
        self.waiting: dict[Key, tuple[PartitionInterpreter, Node, Tag]] = {}
        self.outstanding: Counter[tuple[str, Tag]] = Counter()
        self.blocked: dict[tuple[str, Tag], deque[tuple[PartitionInterpreter, Node, Tag]]] = {}
        self.sent: Counter[Key] = Counter()
        self.received: Counter[Key] = Counter()
        self.peak_outstanding = 0

    def _post(self, it: PartitionInterpreter, node: Node, tag: Tag, rule: str) -> None:
        it.mailbox.append((node, tag, rule))
        self.cond.notify_all()

    # ---- called by the owning partition's thread, through its Port --------------------------------------
    def arrive_send(self, it: PartitionInterpreter, node: Node, tag: Tag) -> Optional[str]:
        """A Send needs a credit on the edge for this frame instance; otherwise the Send blocks."""
        edge_inst = (node.attrs["edge"], tag[:-1])
        with self.cond:
            if self.outstanding[edge_inst] < int(node.attrs["credit"]):
                self.outstanding[edge_inst] += 1
                self.peak_outstanding = max(self.peak_outstanding, self.outstanding[edge_inst])
                return "E-Send"
            self.blocked.setdefault(edge_inst, deque()).append((it, node, tag))
            return None

    def arrive_recv(self, it: PartitionInterpreter, node: Node, tag: Tag) -> Optional[str]:
        """A Recv fires once the token is there; otherwise the Recv waits."""
        key = key_of(node, tag)
        with self.cond:
            tok = self.messages.get(key)
            if tok is not None:
                return "E-Recv-Dead" if tok.dead else "E-Recv"
            if key in self.waiting:
                raise ExecutionError(f"{describe_node(node)}: two Recvs wait for {fmt_key(key)}")
            self.waiting[key] = (it, node, tag)
            return None

    def send(self, node: Node, tag: Tag, tok: Token) -> None:
        """Put a Send's token under its key, waking the Recv that waits for it; a key sent twice raises
        ``ExecutionError`` (exactly-once)."""
        key = key_of(node, tag)
        with self.cond:
            if self.sent[key]:
                raise ExecutionError(f"{describe_node(node)} sent {fmt_key(key)} twice (exactly-once violated)")
            self.sent[key] += 1
            self.messages[key] = tok
            w = self.waiting.pop(key, None)
            if w is not None:
                self._post(w[0], w[1], w[2], "E-Recv-Dead" if tok.dead else "E-Recv")

    def take(self, node: Node, tag: Tag) -> Token:
        """Take the token a Recv at ``tag`` receives, giving its edge's credit back: the first Send blocked on that
        edge and frame instance is woken."""
        key = key_of(node, tag)
        edge_inst = (node.attrs["edge"], tag[:-1])
        with self.cond:
            tok = self.messages.pop(key)
            self.received[key] += 1
            self.outstanding[edge_inst] -= 1
            q = self.blocked.get(edge_inst)
            if q:
                it, n, t = q.popleft()
                self.outstanding[edge_inst] += 1
                self._post(it, n, t, "E-Send")
            return tok

    # ---- reports ------------------------------------------------------------------------------------
    def report(self) -> list[str]:
        """The Recvs still waiting and the Sends still blocked, with their keys."""
        with self.cond:
            lines = [f"  Recv {n.name!r} on {it.short} waits for {fmt_key(k)}" for k, (it, n, _) in
                     sorted(self.waiting.items(), key=lambda kv: (kv[0][0], kv[0][1]))]
            for (edge, inst), q in sorted(self.blocked.items(), key=lambda kv: kv[0]):
                for it, n, t in q:
                    lines.append(f"  Send {n.name!r} on {it.short} is blocked at {fmt_key((edge, t))}: "
                                 f"{self.outstanding[(edge, inst)]} tokens of this edge are unconsumed")
            return lines

    def unconsumed(self) -> list[Key]:
        """The keys of messages sent and not yet taken by their Recv, in order (a finished run has
        none: what is left names the edges whose Recv never fired)."""
        with self.cond:
            return sorted(self.messages, key=lambda k: (k[0], k[1]))

    def stats(self) -> dict[str, Any]:
        """A run's counts of its messages: how many were sent, and the most of one edge waiting
        unconsumed at a time (bounded by the edge's credit)."""
        return {"messages": sum(self.sent.values()), "peak_unconsumed_per_edge": self.peak_outstanding}
