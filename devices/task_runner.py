"""One task of a cluster: the partitions of its devices, run by one driver thread, with a keyed
rendezvous that other tasks feed by messages. No Ray here: the runtime (``ray_runtime``) wraps a
``TaskRunner`` in an actor and gives it an *outbox* that turns calls into actor messages; the tests
wire two runners together in one process instead.

Why a task runs all its devices in one rendezvous: an edge between two devices of one task stays a
local Send/Recv pair (no serialization, no message). Only an edge whose ends sit in different tasks
becomes a message, and only two kinds of message exist, both fire-and-forget:

* ``deliver(run, [(key, value, dead), ...], credits)``: the tokens of cross-task Sends, each keyed
  ``(edge, tag)``. Every token carries its key, because messages between two processes may arrive in
  any order (a threaded actor does not keep call order); the receiver files it under the key, waking
  the Recv if it waits. The tokens a task sends to one peer during one round of firings travel in one
  message, with the credits it owes that peer.
* ``credit(run, [(edge, frame instance, n), ...])``: the receiver consumed ``n`` tokens of an edge.
  The sender counts the tokens of each edge and frame instance in flight and blocks a Send past the
  edge's credit (``parallel_iterations`` of its frame), exactly as the in-process rendezvous does, so
  a fast sender never floods a slow receiver. Credits owed to a task that gets no tokens go back in
  their own message once an edge owes half its credit, and always before the task waits or finishes
  (so batching cannot deadlock; see ``TaskRendezvous.flush``).

When is a task done? When none of its partitions can fire, no Recv waits for a message and no Send
waits for a credit: nothing can then make it fire again (a Recv only starts waiting once its own
partition reaches it). A task that waits longer than ``recv_timeout`` with no event at all raises
``RecvTimeoutError`` naming the keys it waits for and the tasks that should send them.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, cast

import numpy as np

from turnout.devices.cluster_trace import WallClock
from turnout.devices.executor import check_firings, limited, stuck_report
from turnout.devices.partition import Partition, Partitioned
from turnout.devices.partition_executors import ExecutorKind, PartitionExecutor, executor_kind
from turnout.devices.rendezvous import Key, Rendezvous, fmt_key, key_of
from turnout.errors import DeadlockError, ExecutionError, RecvTimeoutError, TaskFailedError
from turnout.graph import Node
from turnout.memory_plan import SavedBytes
from turnout.reference.rules import Tag, Token
from turnout.reference.trace import Event
from turnout.session import RunOptions
from turnout.slot_sizes import SlotPlan

#: ``outbox(task, method, *args)``: send one fire-and-forget message to another task
Outbox = Callable[..., None]

#: firings of one partition per round, before the task flushes its messages and turns to the next
#: partition: large enough that a message carries several iterations' tokens, small enough that a
#: peer waiting on them is not kept waiting long (16 halves the loop benchmark's rate, 64 to 128 are
#: alike)
ROUND = 64


@dataclass
class TaskPlan:
    """What one task needs to run its share of a partitioned graph (shipped once per fetch signature).

    ``fetches``: (fetch index, device, (node id, output)) of the fetches this task produces;
    ``remote_out`` / ``remote_in``: cross-task edges leaving / entering this task, with the peer task;
    ``credits``: the credit of each cross-task edge."""

    task: str
    partitions: dict[str, Partition]
    fetches: list[tuple[int, str, tuple[int, int]]]
    remote_out: dict[str, str] = field(default_factory=dict)
    remote_in: dict[str, str] = field(default_factory=dict)
    credits: dict[str, int] = field(default_factory=dict)


@dataclass
class TaskOutcome:
    """What a task returns from a run: its fetched tokens and its counters."""

    values: list[tuple[int, Any, bool]]  # (fetch index, value, dead)
    firings: dict[str, int]
    counts: dict[tuple[str, tuple[Any, ...]], int]  # firing counts, with ``detail`` only
    sent: int
    received: int
    remote_sent: int
    peak_unconsumed: int
    message_log: Optional[tuple[list[Key], list[Key]]] = None  # (keys sent, keys received) with ``detail``
    remote_calls: int = 0  # deliver messages sent to other tasks (each holds one or more tokens)
    credit_calls: int = 0  # credit messages sent to other tasks (credits not piggybacked on a deliver)
    traces: Optional[dict[str, list[Event]]] = None  # device -> events stamped by a WallClock, if traced
    busy_s: float = 0.0  # seconds spent firing and sending messages
    wait_s: float = 0.0  # seconds spent waiting for a message from another task
    waits: int = 0  # times the task ran out of work and waited
    executor_stats: Optional[dict[str, dict[str, int]]] = None  # device -> its executor's counters, if it keeps any
    #: device -> what its interpreter counted of the values its loops saved, under a memory budget
    #: (``memory_plan.SavedBytes``; the driver merges them, ``memory_plan.device_saved_stats``)
    saved: Optional[dict[str, SavedBytes]] = None
    #: what the run's stats say of the checkpoint slots the task's loops got (``checkpoint_slots`` and
    #: ``checkpoint_bytes``, per loop: ``SlotPlan.stats``), and the most slots a loop needed that it did
    #: not get (its trip count; 0: none), which the driver learns from (``turnout.slot_sizes``)
    slot_stats: dict[str, dict[str, int]] = field(default_factory=dict)
    slots_needed: int = 0


def split_by_task(parted: Partitioned, task_of: Callable[[str], str]) -> dict[str, TaskPlan]:
    """Group the partitions of ``parted`` by task (``task_of(device)`` names a device's task), with each
    task's fetches and the cross-task edges it sends and receives. Edges inside a task are not listed:
    they stay local Send/Recv pairs."""
    plans: dict[str, TaskPlan] = {}
    for d, part in parted.partitions.items():
        t = task_of(d)
        plans.setdefault(t, TaskPlan(t, {}, [])).partitions[d] = part
    for i, (d, tensor) in enumerate(parted.fetches):
        plans[task_of(d)].fetches.append((i, d, (tensor.node.id, tensor.index)))
    for tr in parted.transfers:
        src, dst = task_of(tr.src_device), task_of(tr.dst_device)
        if src != dst:
            plans[src].remote_out[tr.edge] = dst
            plans[src].credits[tr.edge] = tr.credit
            plans[dst].remote_in[tr.edge] = src
            plans[dst].credits[tr.edge] = tr.credit
    return plans


def split_feeds(parted: Partitioned, task_of: Callable[[str], str],
                feeds: dict[tuple[int, int], Any]) -> dict[str, dict[str, dict[tuple[int, int], Any]]]:
    """The fed values each task needs: task -> device -> {(Placeholder id, 0): value}."""
    out: dict[str, dict[str, dict[tuple[int, int], Any]]] = {}
    for d, part in parted.partitions.items():
        local = {(ph.id, 0): feeds[key] for key, ph in part.feeds.items()}
        out.setdefault(task_of(d), {})[d] = local
    return out


class TaskRendezvous(Rendezvous):
    """The in-process rendezvous, extended to edges whose other end lives in another task.

    A Send on an outgoing cross-task edge takes its credit locally, then goes out as a ``deliver``
    message; ``credit`` messages give credits back. A Recv on an incoming cross-task edge takes a
    delivered token and owes the sender a credit. Local edges use the base class unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self.plan: Optional[TaskPlan] = None
        self.outbox: Optional[Outbox] = None
        self.run_id: Any = None
        self.owed: Counter[tuple[str, str, Tag]] = Counter()  # (src task, edge, frame instance) -> credits
        self.pending: dict[str, list[tuple[Key, Any, bool]]] = {}  # destination task -> tokens not yet sent
        self.credit_of: dict[str, int] = {}
        self.remote_sent = 0
        self.remote_calls = 0
        self.credit_calls = 0
        self.delivered = 0
        self.aborted: Optional[BaseException] = None
        self.events = 0  # bumped by every message; the idle loop's timeout restarts when it moves

    def attach(self, plan: TaskPlan, outbox: Outbox, run_id: Any) -> None:
        """Set the rendezvous up for run ``run_id`` of ``plan``: its cross-task edges and their credits, and the
        outbox its messages leave by."""
        with self.cond:
            self.plan = plan
            self.outbox = outbox
            self.run_id = run_id
            self.credit_of = plan.credits

    # ---- messages from other tasks (any thread) -------------------------------------------------
    def deliver(self, key: Key, tok: Token) -> None:
        """A token from another task under ``key``, waking the Recv that waits for it. A key delivered twice aborts
        the run (raised in the run, since a fire-and-forget message has no caller to raise to)."""
        with self.cond:
            self.events += 1
            if key in self.messages or self.received[key]:
                # raised in the run, not here: a fire-and-forget message has no caller to raise to
                self.aborted = ExecutionError(f"{fmt_key(key)} was delivered twice (exactly-once violated)")
                self.cond.notify_all()
                return
            self.delivered += 1
            self.messages[key] = tok
            w = self.waiting.pop(key, None)
            if w is not None:
                self._post(w[0], w[1], w[2], "E-Recv-Dead" if tok.dead else "E-Recv")
            else:
                self.cond.notify_all()

    def credit(self, edge: str, inst: Tag, n: int) -> None:
        """``n`` credits of ``edge`` in frame instance ``inst`` given back by the receiving task; Sends blocked on
        that edge are woken while credit lasts."""
        with self.cond:
            self.events += 1
            edge_inst = (edge, inst)
            self.outstanding[edge_inst] -= n
            q = self.blocked.get(edge_inst)
            while q and self.outstanding[edge_inst] < self.credit_of.get(edge, 1):
                it, node, tag = q.popleft()
                self.outstanding[edge_inst] += 1
                self._post(it, node, tag, "E-Send")
            self.cond.notify_all()

    def abort(self, error: BaseException) -> None:
        """Stop the run with ``error`` (another task failed), waking the task's idle wait so that it raises."""
        with self.cond:
            self.aborted = error
            self.cond.notify_all()

    # ---- the owning task's thread -----------------------------------------------------------------
    def send(self, node: Node, tag: Tag, tok: Token) -> None:
        """``Rendezvous.send`` for a local edge; a Send on an edge to another task queues its token for that task
        (sent by ``flush``), exactly once per key."""
        assert self.plan is not None and self.outbox is not None
        dst = self.plan.remote_out.get(node.attrs["edge"])
        if dst is None:
            super().send(node, tag, tok)
            return
        key = key_of(node, tag)
        with self.cond:
            if self.sent[key]:
                raise ExecutionError(f"{node.name} sent {fmt_key(key)} twice (exactly-once violated)")
            self.sent[key] += 1
            self.remote_sent += 1
            self.pending.setdefault(dst, []).append((key, None if tok.dead else tok.value, tok.dead))

    def take(self, node: Node, tag: Tag) -> Token:
        """``Rendezvous.take`` for a local edge; a Recv on an edge from another task takes the delivered token and
        owes the sender a credit (given back by ``flush``)."""
        assert self.plan is not None
        edge = node.attrs["edge"]
        src = self.plan.remote_in.get(edge)
        if src is None:
            return super().take(node, tag)
        key = key_of(node, tag)
        with self.cond:
            tok = self.messages.pop(key)
            self.received[key] += 1
            self.owed[(src, edge, tag[:-1])] += 1
        return tok

    def flush(self, force: bool) -> None:
        """Send what this task owes its peers: one ``deliver`` message per task that has tokens coming,
        holding them all (each under its own key) and, piggybacked, every credit owed to that task;
        then a ``credit`` message to each other task owed credits, but only when ``force`` (the task
        is about to wait or finish) or when one of its edges has half its credit (or more) owed. The
        driver flushes after every round of firings, forced when the round fired nothing, so a token
        waits at most one round, and credits always go back before a task waits: batching cannot
        deadlock. Holding small credits back while busy, as a hand-written sender would (TCP's
        delayed acknowledgements), saves a message per round in each direction that carries tokens."""
        with self.cond:
            pending, self.pending = self.pending, {}
            by_src: dict[str, list[tuple[str, Tag, int]]] = {}
            due: set[str] = set(pending)
            for (src, edge, inst), n in self.owed.items():
                by_src.setdefault(src, []).append((edge, inst, n))
                if force or 2 * n >= self.credit_of.get(edge, 1):
                    due.add(src)
            for src in due & set(by_src):
                for edge, inst, _ in by_src[src]:
                    del self.owed[(src, edge, inst)]
        assert self.outbox is not None
        for dst, items in pending.items():
            self.remote_calls += 1
            self.outbox(dst, "deliver", self.run_id, items, by_src.pop(dst, []))
        for src in due & set(by_src):
            self.credit_calls += 1
            self.outbox(src, "credit", self.run_id, by_src[src])

    def stuck(self) -> bool:
        """Whether something here still waits on another task (a Recv on a message, a Send on a credit)."""
        return bool(self.waiting) or any(self.blocked.values())


class TaskRunner:
    """Runs the partitions of one task, run after run, and keeps the task's Variables between runs.

    ``outbox(task, method, *args)`` sends a message to another task's ``deliver`` / ``credit``.
    Messages for a run that has not started here yet are kept until it does. Several sessions may share
    one runner (a pool of actors): each keeps its Variables in its own *store*, named by the session."""

    #: finished runs remembered, so that late credits for them are dropped quietly
    REMEMBER = 64

    def __init__(self, task: str, outbox: Outbox) -> None:
        self.task = task
        self.outbox = outbox
        self.stores: dict[Any, dict[str, np.ndarray]] = {}
        self.plans: dict[Any, tuple[TaskPlan, ExecutorKind, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._runs: dict[Any, TaskRendezvous] = {}
        self._finished: list[Any] = []
        #: run id -> (store, the store's entries before the run), for a run that ended well here, in
        #: case the driver says the whole run failed (``settle``); the next run on the store drops it
        self._before: dict[Any, tuple[Any, dict[str, np.ndarray]]] = {}

    # ---- setup ----------------------------------------------------------------------------------------
    def prepare(self, plan_key: Any, plan: TaskPlan, executor: str = "reference") -> None:
        """Keep ``plan`` under ``plan_key``, its partitions to be run by the executor kind named
        ``executor`` (``partition_executors``), which prepares each partition once here."""
        kind = executor_kind(executor)
        self.plans[plan_key] = (plan, kind, {d: kind.prepare(p) for d, p in plan.partitions.items()})

    def _rendezvous(self, run_id: Any) -> Optional[TaskRendezvous]:
        with self._lock:
            if run_id in self._finished:
                return None
            rv = self._runs.get(run_id)
            if rv is None:
                rv = self._runs[run_id] = TaskRendezvous()
            return rv

    # ---- messages ---------------------------------------------------------------------------------
    def deliver(self, run_id: Any, items: list[tuple[Key, Any, bool]],
                credits: Sequence[tuple[str, Tag, int]] = ()) -> None:
        """Tokens from another task (fire-and-forget): each ``(key, value, dead)`` carries its own key;
        ``credits``: the credits the sender owed this task, piggybacked (as in ``credit``)."""
        rv = self._rendezvous(run_id)
        if rv is None:
            return
        for key, value, dead in items:
            if isinstance(value, np.ndarray) and not value.flags.writeable:
                value = np.array(value, copy=True)  # arrays from the object store are read-only
            rv.deliver(key, Token(None, True) if dead else Token(value))
        for edge, inst, n in credits:
            rv.credit(edge, inst, n)

    def credit(self, run_id: Any, items: list[tuple[str, Tag, int]]) -> None:
        """``(edge, frame instance, n)``: ``n`` tokens of ``edge`` sent from here were consumed."""
        rv = self._rendezvous(run_id)
        if rv is not None:
            for edge, inst, n in items:
                rv.credit(edge, inst, n)

    def abort(self, run_id: Any, reason: str) -> None:
        """Stop this task's share of ``run_id`` (another task failed): its ``run`` raises TaskFailedError."""
        rv = self._rendezvous(run_id)
        if rv is not None:
            rv.abort(TaskFailedError(reason))

    # ---- a run ----------------------------------------------------------------------------------------
    def run(self, run_id: Any, plan_key: Any, feeds: dict[str, dict[tuple[int, int], Any]], options: RunOptions,
            recv_timeout: float = 60.0, detail: bool = False, store: Any = None,
            slot_capacity: Optional[int] = None) -> TaskOutcome:
        """Run this task's partitions of ``plan_key`` with the given per-device feeds; returns the task's
        fetched tokens (with ``detail``, also firing counts and the keys sent and received, for tests).
        With ``options.trace``, each partition's events are stamped by the wall clock and returned for
        the driver to merge (``cluster_trace``). ``slot_capacity``: the most checkpoint slots a
        recomputed loop gets (``turnout.slot_sizes``; None: every one its budget holds), which the
        driver learns from the ``slots_needed`` of earlier runs: the loop and its backward loop may
        sit on different tasks, so only the driver sees both.
        Raises what the partitions raise, RecvTimeoutError, or TaskFailedError if aborted."""
        plan, kind, prepared = self.plans[plan_key]
        rv = self._rendezvous(run_id)
        if rv is None:
            raise ExecutionError(f"run {run_id!r} already ran on task {self.task}")
        rv.attach(plan, self.outbox, run_id)
        before: Optional[dict[str, np.ndarray]] = None
        try:
            # a traced task stamps events with the wall clock, so that the driver can merge the tasks
            clock = cast("itertools.count[int]", WallClock() if options.trace else itertools.count())
            variables = self.stores.setdefault(store, {})
            before = dict(variables)  # (shallow: no run changes an array in place)
            with self._lock:  # a session runs one run at a time: its last run here is settled by now
                for old in [r for r, (s, _) in self._before.items() if s == store]:
                    del self._before[old]
            needed: list[int] = []
            parts = [kind.make(d, prepared[d], feeds.get(d, {}), variables, options, rv, clock,
                               _slot_plan(part, slot_capacity, needed)) for d, part in plan.partitions.items()]
            for p in parts:
                p.start()
            busy, wait, waits = self._drive(parts, rv, options, recv_timeout)
            self._check_finished(plan, parts, rv)
            by_device = {p.device: p for p in parts}
            values: list[tuple[int, Any, bool]] = []
            for i, d, key in plan.fetches:
                it = by_device[d]
                tok = Token(it.feeds[key]) if key in it.feeds else it.produced[key]
                values.append((i, tok.value, tok.dead))
            counts: Counter[tuple[str, tuple[Any, ...]]] = Counter()
            if detail:
                for p in parts:
                    counts.update(p.counts)
            log = (list(rv.sent), list(rv.received)) if detail else None
            traces = {p.device: list(p.trace.events) for p in parts if p.trace is not None} if options.trace else None
            with self._lock:
                self._before[run_id] = (store, before)
            return TaskOutcome(values, {p.device: p.firings for p in parts}, dict(counts), sum(rv.sent.values()),
                               sum(rv.received.values()), rv.remote_sent, rv.peak_outstanding, log,
                               rv.remote_calls, rv.credit_calls, traces, busy, wait, waits,
                               {p.device: dict(s) for p in parts if (s := getattr(p, "stats", None)) is not None},
                               {p.device: s for p in parts if (s := getattr(p, "saved", None)) is not None} or None,
                               merged_slot_stats(p.slot_stats for p in parts), max(needed, default=0))
        except BaseException:
            if before is not None:  # the run failed here, or was aborted: it changes no Variable
                _put_back(variables, before)
            raise
        finally:
            with self._lock:
                self._runs.pop(run_id, None)
                self._finished.append(run_id)
                del self._finished[: -self.REMEMBER]

    def settle(self, run_id: Any, keep: bool) -> None:
        """How run ``run_id`` ended on every task: ``keep`` its Variable updates here, or put back what
        the store held before it (another task failed after this one ended well, or the driver raised
        on the results). A run is all or nothing for Variables across the cluster, as in one process
        (``Session._backend_run``); a task whose own run failed has put its store back already. The
        driver says only the failures: a run it says nothing of is kept, its snapshot dropped by the
        next run on the store."""
        with self._lock:
            got = self._before.pop(run_id, None)
        if got is not None and not keep:
            store, before = got
            variables = self.stores.get(store)
            if variables is not None:  # (a store the session deleted meanwhile has nothing to put back)
                _put_back(variables, before)

    def _drive(self, parts: list[PartitionExecutor], rv: TaskRendezvous, options: RunOptions,
               recv_timeout: float) -> tuple[float, float, int]:
        """Fire the task's partitions in turn; when none can fire, flush owed credits and wait for a
        message. Ends when nothing waits on another task (see the module docstring). Returns the
        seconds spent busy and waiting, and the number of waits (the benchmark's diagnosis: a task
        that waits often is starved by its peers, one that never waits is the bottleneck)."""
        fired = 0
        busy = wait = 0.0
        waits = 0
        t_busy = time.perf_counter()
        while True:
            progressed = False
            for p in parts:
                if p.mailbox:
                    with rv.cond:
                        p.drain()
                for _ in range(ROUND):
                    if not p.queue:
                        break
                    p.step()
                    fired += 1
                    progressed = True
            rv.flush(force=not progressed)
            if rv.aborted is not None:
                raise rv.aborted
            check_firings(fired, options, f"task {self.task}: ", "")
            if progressed:
                continue
            with rv.cond:
                if any(p.mailbox for p in parts):
                    continue
                if not rv.stuck():
                    return busy + time.perf_counter() - t_busy, wait, waits
                t_wait = time.perf_counter()
                busy += t_wait - t_busy
                waits += 1
                deadline = time.monotonic() + recv_timeout
                seen = rv.events
                while not any(p.mailbox for p in parts) and rv.aborted is None:
                    left = deadline - time.monotonic()
                    if rv.events != seen:  # a credit or an early message: something moved, wait afresh
                        seen, deadline = rv.events, time.monotonic() + recv_timeout
                        if not rv.stuck():
                            return busy, wait + time.perf_counter() - t_wait, waits
                        continue
                    if left <= 0:
                        raise RecvTimeoutError(self._timeout_message(rv, recv_timeout))
                    rv.cond.wait(min(left, 0.5))
                t_busy = time.perf_counter()
                wait += t_busy - t_wait

    def _timeout_message(self, rv: TaskRendezvous, timeout: float) -> str:
        assert rv.plan is not None
        lines = []
        for key, (it, node, _) in sorted(rv.waiting.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            src = rv.plan.remote_in.get(key[0], self.task)
            lines.append(f"  Recv {node.name!r} on {it.device} waits for {fmt_key(key)} from task {src}")
        for (edge, _inst), q in sorted(rv.blocked.items(), key=lambda kv: kv[0]):
            for it, node, tag in q:
                dst = rv.plan.remote_out.get(edge, self.task)
                lines.append(f"  Send {node.name!r} on {it.device} waits for a credit of {fmt_key((edge, tag))} "
                             f"from task {dst}")
        body = limited(lines)
        return (f"task {self.task}: no message for {timeout:g} s (recv_timeout); is a sending task dead, stopped "
                f"or stuck?\n{body}")

    def _check_finished(self, plan: TaskPlan, parts: list[PartitionExecutor], rv: TaskRendezvous) -> None:
        """DeadlockError if a fetch of this task is missing or something still waits on the rendezvous.
        Nodes left half-fed inside a partition do not stop a run whose fetches were all produced: it
        ends at quiescence, as the unpartitioned and the in-process partitioned runs do (TensorFlow's
        ``testLoop_false``), so a dead fetch is a DeadFetchError on the driver, as there."""
        missing, body = stuck_report(rv.report(), parts, ((f"#{i}", d, key) for i, d, key in plan.fetches))
        if body is not None:
            head = f"fetches {', '.join(missing)} were never produced. " if missing else ""
            raise DeadlockError(f"task {self.task}: {head}no partition can fire. Blocked:\n{body}")

    # ---- Variables ------------------------------------------------------------------------------------
    def get_variables(self, names: list[str], store: Any = None) -> dict[str, np.ndarray]:
        """The current values of the named Variables this task holds (missing names are left out)."""
        variables = self.stores.get(store, {})
        return {n: variables[n] for n in names if n in variables}

    def set_variables(self, values: dict[str, np.ndarray], store: Any = None) -> None:
        """Overwrite Variables held by this task (checkpoint restore, or an explicit assignment)."""
        variables = self.stores.setdefault(store, {})
        for n, v in values.items():
            variables[n] = np.array(v, copy=True)

    def variable_names(self, store: Any = None) -> list[str]:
        """The Variables this task has initialized."""
        return sorted(self.stores.get(store, {}))

    def delete_variables(self, names: Optional[list[str]] = None, store: Any = None) -> None:
        """Forget the named Variables (all of them, and the store, for ``None``): the next run
        re-initializes them."""
        if names is None:
            self.stores.pop(store, None)
        for n in names or ():
            self.stores.get(store, {}).pop(n, None)


def _slot_plan(part: Partition, capacity: Optional[int], needed: list[int]) -> SlotPlan:
    """The checkpoint slots of one partition's run: its ``CheckpointSlots`` nodes, at most ``capacity``
    each (None: all their budgets hold). A need beyond what a loop got goes to ``needed`` from
    whichever partition holds the loop's ``CheckpointTrips``, which need not be the one that holds its
    slots."""
    nodes = tuple(n for n in part.graph.nodes if n.op == "CheckpointSlots")
    return SlotPlan(nodes) if capacity is None else SlotPlan(nodes, capacity, lambda n: needed.append(int(n)))


def merged_slot_stats(reports: Iterable[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """``checkpoint_slots`` and ``checkpoint_bytes``, per loop, of several reports (a task's
    partitions; the driver's tasks): each loop's slots sit on one device, so the reports add loops."""
    out: dict[str, dict[str, int]] = {}
    for report in reports:
        for k, per_loop in report.items():
            out.setdefault(k, {}).update(per_loop)
    return out


def _put_back(variables: dict[str, np.ndarray], before: dict[str, np.ndarray]) -> None:
    """The store ``variables`` as ``before`` held it, in place (the partitions of a later run share it)."""
    variables.clear()
    variables.update(before)
