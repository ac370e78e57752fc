"""Running a partitioned graph on a Ray cluster: one actor per task, the session on the driver.

``tn.Session(graph, cluster=spec)`` loads this backend (Ray is an optional extra; nothing else in
Turnout imports this module). What happens:

* **Before anything starts**, the cluster spec is validated (``ClusterSpec``) and the graph placed on
  the cluster's devices, so a malformed spec or an impossible placement is an error with no process
  started.
* **One actor per task**, with the resources its spec asks for. The actor is a thin shell around a
  Ray-free ``TaskRunner`` (``task_runner``): all the logic — the task's partitions, its keyed
  rendezvous, its Variables — lives there. The actor is threaded, so messages from peers are handled
  while a run is in progress; Ray calls on a threaded actor may run in any order, which is why every
  message carries its key.
* **A run**: the driver partitions the graph for the fetches (cached per fetch and feed signature),
  ships each task its share once, then starts the run on every task that holds a partition and waits.
  Cross-task Sends go straight from actor to actor (``deliver``, fire-and-forget); the driver is not on
  the data path. Values come back from the tasks that produce the fetches.
* **Faults**: if a task dies, the wait on its run fails; the driver stops the other tasks' share of the
  run, kills every actor of the session, and raises ``TaskFailedError`` naming the task. The session is
  then closed (restore Variables from a checkpoint into a new one). A task that is alive but silent is
  caught by the receivers' ``recv_timeout`` (``RecvTimeoutError`` naming the key and the sending task).
* **Variables** live in the actor of the task that holds them and stay there between runs;
  ``session.variables`` on the driver is a view that fetches or writes them on demand (this is what
  ``tn.checkpoint.save`` / ``restore`` read and write).
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections import Counter
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any, Optional

import numpy as np
import ray

from turnout.devices.cluster import ClusterSpec
from turnout.devices.cluster_trace import merge
from turnout.devices.executor import budget_notes, check_fed, check_feeds, partition_step, partitions_of
from turnout.devices.partition import Partitioned
from turnout.devices.partition_executors import executor_kind
from turnout.devices.placement import Placement, Placer
from turnout.devices.task_runner import (
    TaskOutcome,
    TaskPlan,
    TaskRunner,
    merged_slot_stats,
    split_by_task,
    split_feeds,
)
from turnout.errors import (
    DeadFetchError,
    ExecutionError,
    NotFoundError,
    TaskFailedError,
    TurnoutError,
    UnsupportedError,
    dead_fetch_message,
)
from turnout.graph import Graph, Tensor
from turnout.memory_plan import device_saved_stats
from turnout.reference.executor import run_key
from turnout.run_schedule import RunSchedule, Step
from turnout.session import RunOptions, RunResult
from turnout.slot_sizes import FIRST_CAPACITY, SlotSizes
from turnout.store import check_variable


class TaskActor:
    """The Ray actor of one task: forwards every call to its ``TaskRunner``; its outbox turns the
    runner's messages into fire-and-forget calls on the peer actors."""

    def __init__(self, task: str) -> None:
        self.peers: dict[str, Any] = {}
        self.runner = TaskRunner(task, self._send)

    def _send(self, task: str, method: str, *args: Any) -> None:
        getattr(self.peers[task], method).remote(*args)

    def connect(self, peers: dict[str, Any]) -> int:
        """Learn the other tasks' actor handles; returns this process's id (for fault tests)."""
        self.peers = dict(peers)
        return os.getpid()

    def prepare(self, plan_key: Any, plan: TaskPlan, executor: str) -> None:
        """``TaskRunner.prepare`` in the task's process: keep ``plan`` under ``plan_key``, run by the executor kind
        named ``executor``."""
        self.runner.prepare(plan_key, plan, executor)

    def run(self, run_id: Any, plan_key: Any, feeds: dict[str, dict[tuple[int, int], Any]], options: RunOptions,
            recv_timeout: float, detail: bool, store: Any, slot_capacity: Optional[int] = None) -> TaskOutcome:
        """``TaskRunner.run`` in the task's process: run this task's partitions of one step and return its outcome."""
        return self.runner.run(run_id, plan_key, feeds, options, recv_timeout, detail, store, slot_capacity)

    def deliver(self, run_id: Any, items: list[tuple[Any, Any, bool]], credits: list[tuple[str, Any, int]]) -> None:
        """``TaskRunner.deliver``: tokens (and piggybacked credits) from another task, fire-and-forget."""
        self.runner.deliver(run_id, items, credits)

    def credit(self, run_id: Any, items: list[tuple[str, Any, int]]) -> None:
        """``TaskRunner.credit``: credits given back by a task that consumed this task's tokens."""
        self.runner.credit(run_id, items)

    def abort(self, run_id: Any, reason: str) -> None:
        """``TaskRunner.abort``: stop this task's share of ``run_id`` because another task failed."""
        self.runner.abort(run_id, reason)

    def settle(self, run_id: Any, keep: bool) -> None:
        """``TaskRunner.settle``: keep or put back this task's Variable updates of ``run_id``, as the whole run
        ended."""
        self.runner.settle(run_id, keep)

    def get_variables(self, names: list[str], store: Any) -> dict[str, np.ndarray]:
        """``TaskRunner.get_variables``: the values of the named Variables this task holds in ``store``."""
        return self.runner.get_variables(names, store)

    def set_variables(self, values: dict[str, np.ndarray], store: Any) -> None:
        """``TaskRunner.set_variables``: overwrite Variables this task holds in ``store``."""
        self.runner.set_variables(values, store)

    def variable_names(self, store: Any) -> list[str]:
        """``TaskRunner.variable_names``: the Variables this task has initialized in ``store``."""
        return self.runner.variable_names(store)

    def delete_variables(self, names: Optional[list[str]], store: Any) -> None:
        """``TaskRunner.delete_variables``: forget the named Variables of ``store`` (all of them for None)."""
        self.runner.delete_variables(names, store)


#: concurrent calls per actor: one long ``run`` plus the messages that arrive meanwhile
MAX_CONCURRENCY = 8


class RemoteVariables(MutableMapping[str, np.ndarray]):
    """``session.variables`` of a cluster session: each Variable is read from, and written to, the actor
    of the task that holds it (the task of its VarHandle's device). Nothing is cached on the driver."""

    def __init__(self, backend: RayBackend) -> None:
        self.backend = backend

    def _owner(self, name: str) -> Any:
        handle = self.backend.graph.variables.get(name)
        if handle is None:
            raise NotFoundError(name)
        return self.backend.actor_of(self.backend.placement[handle])

    def __getitem__(self, name: str) -> np.ndarray:
        got = ray.get(self._owner(name).get_variables.remote([name], self.backend.uid))
        if name not in got:
            raise NotFoundError(name)
        return got[name]  # type: ignore[no-any-return]

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        value = check_variable(self.backend.graph, name, value)  # as every session.variables checks it
        ray.get(self._owner(name).set_variables.remote({name: np.asarray(value)}, self.backend.uid))

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise NotFoundError(name)
        ray.get(self._owner(name).delete_variables.remote([name], self.backend.uid))

    def __iter__(self) -> Iterator[str]:
        if not self.backend.actors:
            return iter(())
        names = ray.get([a.variable_names.remote(self.backend.uid) for a in self.backend.actors.values()])
        return iter(sorted({n for ns in names for n in ns}))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in list(self)

    def clear(self) -> None:
        """Forget every Variable of this session on every task; the next run initializes them again."""
        if self.backend.actors:
            ray.get([a.delete_variables.remote(None, self.backend.uid) for a in self.backend.actors.values()])


class RayBackend:
    """``tn.Session(graph, cluster=spec)``: run the graph partitioned over the tasks of a Ray cluster.

    Options: ``cluster`` (a ``ClusterSpec`` or its dict form, or a started ``TaskPool`` to share),
    ``requests`` (soft placement: node name -> device), ``allow_soft_placement`` (as for the partitioned
    executors: see ``devices.placement``), ``recv_timeout`` (seconds a task waits with no
    message before RecvTimeoutError),
    ``start_timeout`` (seconds to wait for the actors to start, e.g. for resources to free up),
    ``detail`` (return firing counts and the message log of each run, for tests),
    ``partition_executor`` (which executor each task runs its partitions on: a name of
    ``partition_executors.PARTITION_EXECUTORS``, default the reference interpreter; ``"fast"`` is the
    compiled one, which ``tn.Session(graph, backend="fast", cluster=...)`` selects). Ray must already be
    running in this process: ``ray.init(address=...)`` for an existing cluster, or ``LocalCluster``.

    Memory budgets (``RunOptions.memory_budget`` and a loop's own) bound what each device holds, as on
    the partitioned executors: each task's partitions count what their loops save (the interpreter's
    ``SavedBytes``; a partition run whole, the fast backend's own stacks) and stop the run with
    ``ResourceExhaustedError`` where a device would go over. Stats: ``peak_saved_bytes``, per device
    and per loop, as the partitioned reference executor reports them. A partition executor plugged in
    by name counts them only where its kind says so (``ExecutorKind.memory_budgets``); the session
    refuses a budget otherwise.
    """

    def __init__(self, graph: Graph, cluster: Any, requests: Optional[dict[str, str]] = None,
                 recv_timeout: float = 60.0, start_timeout: float = 120.0, detail: bool = False,
                 devices: Any = None, partition_executor: str = "reference", allow_soft_placement: bool = False,
                 ) -> None:
        if devices is not None:
            raise UnsupportedError("pass either devices=... (one process) or cluster=... (its tasks own the "
                                   "devices), not both")
        #: whether runs honour memory budgets, per device (each task's partitions count their own): where
        #: the partition executor's kind does (``ExecutorKind.memory_budgets``), else the session refuses them
        self.memory_budgets = executor_kind(partition_executor).memory_budgets  # (an unknown kind: refused here)
        self.partition_executor = partition_executor
        self.own_pool = not isinstance(cluster, TaskPool)
        self.spec = cluster.spec if isinstance(cluster, TaskPool) else (
            cluster if isinstance(cluster, ClusterSpec) else ClusterSpec(cluster))
        self.graph = graph
        self.uid = uuid.uuid4().hex
        self.requests = dict(requests or {})
        self.allow_soft_placement = allow_soft_placement  # (place() refuses a non-bool)
        self.recv_timeout = float(recv_timeout)
        self.detail = detail
        self.placer = Placer(graph, self.spec.devices, self.requests, allow_soft_placement)
        self._plans: dict[Any, tuple[Partitioned, dict[str, TaskPlan], Any]] = {}
        self._shipped: set[tuple[str, Any]] = set()
        self._plan_ids = itertools.count()
        self._run_ids = itertools.count()
        self.last_stats: dict[str, Any] = {}
        #: per fetch signature, the checkpoint slots a recomputed loop gets, learnt from the tasks' reports
        #: of their runs (``turnout.slot_sizes``, as the partitioned reference executor learns them)
        self.slot_sizes = SlotSizes()
        self.last_message_log: Optional[tuple[Counter[Any], Counter[Any]]] = None
        self.placement  # noqa: B018 - placement errors before any process starts
        self.variable_store = RemoteVariables(self)
        self.pool = TaskPool(self.spec, start_timeout) if self.own_pool else cluster

    # ---- actors -----------------------------------------------------------------------------------
    @property
    def actors(self) -> dict[str, Any]:
        """Task name -> actor handle (empty once the pool is closed)."""
        return self.pool.actors

    def actor_of(self, device: str) -> Any:
        """The actor of the task that owns ``device``."""
        if self.pool.closed is not None:
            raise TaskFailedError(self.pool.closed)
        return self.pool.actors[self.spec.task_of(device).name]

    def close(self) -> None:
        """Stop the actors if this session started them; forget this session's Variables otherwise."""
        if self.own_pool:
            self.pool.close()
        elif self.pool.closed is None:
            ray.get([a.delete_variables.remote(None, self.uid) for a in self.pool.actors.values()])

    # ---- placement and plans ----------------------------------------------------------------------
    @property
    def placement(self) -> Placement:
        """The placement over the cluster's devices, for the current graph version."""
        return self.placer()

    def _task_of(self, device: str) -> str:
        return self.spec.task_of(device).name

    def _plan(self, fetches: list[Tensor], fed: set[tuple[int, int]]) -> tuple[Partitioned, dict[str, TaskPlan], Any]:
        key = run_key(self.graph, fetches, fed)
        if key not in self._plans:
            parted, _ = partitions_of(self.graph, self.placement, fetches, fed)  # (errors come from the driver)
            self._plans[key] = (parted, split_by_task(parted, self._task_of), (self.uid, next(self._plan_ids)))
        return self._plans[key]

    def explain(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: Any,
                memory_budget: Optional[int] = None) -> RunSchedule:
        """How a run of ``fetches`` executes (``Session.explain``), made on the driver alone (no task is
        asked): one step per task, the partitions of its devices below it, each with what runs it (the
        partition executor's kind, ``ExecutorKind.describe``); the notes say how many Send/Recv pairs
        become messages between tasks, the checkpoint slots the next run gives, and the budget."""
        fed = {(t.node.id, t.index) for t in feeds}
        parted, plans, pid = self._plan(fetches, fed)
        kind = executor_kind(self.partition_executor)
        steps = tuple(Step("task", f"{len(plan.partitions)} partition(s) on the {kind.name!r} partition executor, "
                           f"{len(plan.remote_out)} edge(s) out to other tasks", task,
                           tuple(partition_step(p, kind.describe(p)) for p in plan.partitions.values()))
                      for task, plan in plans.items())
        between = sum(len(plan.remote_out) for plan in plans.values())
        slots = [n for p in parted.partitions.values() for n in p.graph.nodes if n.op == "CheckpointSlots"]
        notes = (f"{len(parted.transfers)} Send/Recv pair(s) carry values between devices, {between} of them as "
                 "messages between tasks", *self.slot_sizes.notes(pid, slots),
                 *budget_notes(memory_budget))
        return RunSchedule("ray cluster", steps, notes=notes)

    # ---- a run ------------------------------------------------------------------------------------
    def run(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: Any, options: RunOptions) -> RunResult:
        """Run one step on the cluster: ship each task its plan once, send each task its feeds, gather the tasks'
        outcomes, and return the fetched values. A failed run stops the other tasks and has every task put its
        Variables back (all or nothing, as in one process)."""
        if self.pool.closed is not None:
            raise TaskFailedError(self.pool.closed)
        fed = check_feeds(self.graph, fetches, feeds)
        parted, plans, pid = self._plan(fetches, set(fed))
        check_fed(parted)
        shipping = [self.actors[t].prepare.remote(pid, plan, self.partition_executor) for t, plan in plans.items()
                    if (t, pid) not in self._shipped]
        if shipping:
            self._wait_all(dict(zip([t for t in plans if (t, pid) not in self._shipped], shipping)), None)
            self._shipped.update((t, pid) for t in plans)
        run_id = (self.uid, next(self._run_ids))
        task_feeds = split_feeds(parted, self._task_of, fed)
        capacity = self.slot_sizes.capacity(pid) or FIRST_CAPACITY
        refs = {t: self.actors[t].run.remote(run_id, pid, task_feeds.get(t, {}), options, self.recv_timeout,
                                             self.detail, self.uid, capacity) for t in plans}
        try:
            outcomes = self._wait_all(refs, run_id)
            self._learn_slots(pid, outcomes)
            return self._result(parted, fetches, outcomes, options.trace)
        except BaseException:
            self._put_back(list(plans), run_id)
            raise

    def _put_back(self, tasks: list[str], run_id: Any) -> None:
        """Tell every task of a failed run to put its Variables back (``TaskRunner.settle``): all or
        nothing, as in one process. Waited for, so the next run starts from the Variables as they
        were; a run that ended well costs no call (its snapshots go with the next run). A pool whose
        actors were stopped has nothing to put back. A task that does not answer within
        ``recv_timeout`` (the session's bound on a silent task) may still hold the failed run's
        Variables, so no later run could be all or nothing: the pool is stopped, as when a task dies."""
        if self.pool.closed is not None:
            return
        calls = {self.actors[t].settle.remote(run_id, False): t for t in tasks if t in self.actors}
        if not calls:
            return
        _, late = ray.wait(list(calls), num_returns=len(calls), timeout=self.recv_timeout)
        if late:
            silent = ", ".join(sorted(calls[c] for c in late))
            self.pool.close(f"task {silent} did not answer within recv_timeout={self.recv_timeout:g} s after a "
                            "failed run, so its Variables may not be put back; the cluster's actors were stopped "
                            "(start a new Session and restore its Variables from a checkpoint)")

    def _wait_all(self, refs: dict[str, Any], run_id: Any) -> dict[str, Any]:
        """Wait for every task's call; on the first failure stop the others and raise a clear error."""
        task_of_ref = {ref: t for t, ref in refs.items()}
        pending = list(refs.values())
        out: dict[str, Any] = {}
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                t = task_of_ref[ref]
                try:
                    out[t] = ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    self._fail(t, list(refs), pending, run_id)
                    raise TaskFailedError(f"task {t} died during the run ({type(e).__name__}); the session's "
                                          "actors were stopped: start a new Session and restore its Variables "
                                          "from a checkpoint") from None
                except ray.exceptions.RayTaskError as e:
                    cause = e.cause if isinstance(e.cause, BaseException) else None
                    self._stop_others(t, list(refs), pending, run_id, f"task {t} failed: {type(cause).__name__}")
                    if isinstance(cause, TurnoutError):
                        raise cause from None
                    raise ExecutionError(f"task {t} failed: {cause!r}") from None
        return out

    def _stop_others(self, failed: str, tasks: Sequence[str], pending: Sequence[Any], run_id: Any,
                     reason: str) -> None:
        """Abort the run on the other tasks in it, and wait (briefly) for them to stop."""
        if run_id is None:
            return
        for t in tasks:
            if t != failed and t in self.actors:
                self.actors[t].abort.remote(run_id, reason)
        if pending:
            ray.wait(list(pending), num_returns=len(pending), timeout=3.0)

    def _fail(self, task: str, tasks: Sequence[str], pending: Sequence[Any], run_id: Any) -> None:
        self._stop_others(task, tasks, pending, run_id, f"task {task} died")
        self.pool.close(f"task {task} died during a run; the cluster's actors were stopped (start a new "
                        "Session and restore its Variables from a checkpoint)")

    def _learn_slots(self, pid: Any, outcomes: dict[str, TaskOutcome]) -> None:
        """What the tasks' loops needed sizes the next runs of these fetches (``SlotSizes.take``)."""
        learn = self.slot_sizes.learner(pid)
        for o in outcomes.values():
            if o.slots_needed:
                learn(o.slots_needed)
        self.slot_sizes.take()

    def _result(self, parted: Partitioned, fetches: list[Tensor], outcomes: dict[str, TaskOutcome],
                traced: bool = False) -> RunResult:
        got: dict[int, tuple[Any, bool]] = {}
        for o in outcomes.values():
            for i, value, dead in o.values:
                got[i] = (value, dead)
        values = []
        for i, orig in enumerate(fetches):
            value, dead = got[i]
            if dead:
                raise DeadFetchError(dead_fetch_message(orig.name, orig.node))
            if isinstance(value, np.ndarray) and not value.flags.writeable:
                value = np.array(value, copy=True)
            values.append(value)
        firings = {d: n for o in outcomes.values() for d, n in o.firings.items()}
        stats: dict[str, Any] = {
            "firings": sum(firings.values()), "firings_per_device": firings,
            "messages": sum(o.sent for o in outcomes.values()),
            "messages_between_tasks": sum(o.remote_sent for o in outcomes.values()),
            "deliver_calls_between_tasks": sum(o.remote_calls for o in outcomes.values()),
            "credit_calls_between_tasks": sum(o.credit_calls for o in outcomes.values()),
            "peak_unconsumed_per_edge": max((o.peak_unconsumed for o in outcomes.values()), default=0),
            "tasks": sorted(outcomes),
            "busy_s_per_task": {t: o.busy_s for t, o in outcomes.items()},
            "wait_s_per_task": {t: o.wait_s for t, o in outcomes.items()},
            "waits_per_task": {t: o.waits for t, o in outcomes.items()},
            "partition_executor": self.partition_executor,
        }
        stats.update(merged_slot_stats(o.slot_stats for o in outcomes.values()))
        stats.update(device_saved_stats({d: s for o in outcomes.values() for d, s in (o.saved or {}).items()}))
        per_device = {d: c for o in outcomes.values() for d, c in (o.executor_stats or {}).items()}
        if per_device:  # a compiled kind's counters (``compiled_partition``), summed and per device
            stats["executor_stats"] = per_device
            for d_stats in per_device.values():
                for k, v in d_stats.items():
                    stats[k] = stats.get(k, 0) + v
        self.last_stats = stats
        counts: Optional[dict[tuple[str, tuple[Any, ...]], int]] = None
        if self.detail:
            c: Counter[tuple[str, tuple[Any, ...]]] = Counter()
            sent: Counter[Any] = Counter()
            received: Counter[Any] = Counter()
            for o in outcomes.values():
                c.update(o.counts)
                if o.message_log is not None:
                    sent.update(o.message_log[0])
                    received.update(o.message_log[1])
            counts = dict(c)
            self.last_message_log = (sent, received)
        trace = merge({d: evs for o in outcomes.values() for d, evs in (o.traces or {}).items()}) if traced else None
        return RunResult(values=values, trace=trace, counts=counts, stats=stats)


class TaskPool:
    """The started actors of a cluster spec, one per task. A ``Session(graph, cluster=spec)`` starts its
    own pool and stops it on close; a pool passed as ``cluster=pool`` is shared by several sessions (each
    keeps its own Variables in it), which saves the actors' start-up for many small graphs."""

    def __init__(self, cluster: Any, start_timeout: float = 120.0) -> None:
        self.spec = cluster if isinstance(cluster, ClusterSpec) else ClusterSpec(cluster)
        self.actors: dict[str, Any] = {}
        self.pids: dict[str, int] = {}
        self.closed: Optional[str] = None
        if not ray.is_initialized():
            raise TaskFailedError("Ray is not running in this process: call ray.init(address=...) to join an "
                                  "existing cluster, or start one with turnout.devices.local_cluster.LocalCluster")
        remote = ray.remote(TaskActor)
        for t in self.spec.tasks:
            opts: dict[str, Any] = {"num_cpus": t.num_cpus, "num_gpus": t.num_gpus, "max_concurrency": MAX_CONCURRENCY,
                                    "max_restarts": 0, "max_task_retries": 0}
            if t.resources:
                opts["resources"] = dict(t.resources)
            self.actors[t.name] = remote.options(**opts).remote(t.name)  # type: ignore[attr-defined]
        refs = {t: a.connect.remote(self.actors) for t, a in self.actors.items()}
        try:
            ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=start_timeout)
            for t, ref in refs.items():
                if ref not in ready:
                    want = self.spec.task(t)
                    raise TaskFailedError(f"task {t} did not start within {start_timeout:g} s: does the cluster "
                                          f"have num_cpus={want.num_cpus:g}, num_gpus={want.num_gpus:g}, "
                                          f"resources={dict(want.resources)} free for it?")
                self.pids[t] = ray.get(ref)
        except BaseException:
            self.close()
            raise

    def close(self, reason: str = "the cluster's actors were stopped (the session is closed)") -> None:
        """Kill every actor of the pool (idempotent)."""
        if self.closed is None:
            self.closed = reason
        actors, self.actors = self.actors, {}
        for a in actors.values():
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead is fine
                pass

    def __enter__(self) -> TaskPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
