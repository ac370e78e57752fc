"""Graphs placed across two tasks (``/job:worker/task:0`` and ``task:1``, two CPU devices each), shared by
the Ray-free task-runner tests and the Ray tests."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

import turnout as tn
from turnout.devices import check_partitions, partition, place
from turnout.devices.cluster import ClusterSpec
from turnout.devices.partition_executors import REFERENCE, ExecutorKind
from turnout.devices.task_runner import TaskOutcome, TaskRunner, split_by_task, split_feeds
from turnout.session import RunOptions

T0 = "/job:worker/task:0"
T1 = "/job:worker/task:1"
SPEC = ClusterSpec({"worker": [{"devices": 2}, {"devices": 2}]})


def dev(task: int, index: int = 0) -> str:
    return f"/job:worker/task:{task}/device:CPU:{index}"


def loop_across_tasks(n: int = 20, parallel_iterations: int = 10) -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """A while loop whose LoopCond sits on task 0 and whose body runs on both devices of task 1."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device(dev(1, 1)):
                y2 = y * 1.5
            with tn.device(dev(1, 0)):
                y3 = y2 - 0.25
            return i + 1, y3

        with tn.device(dev(0, 1)):
            _, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), x], name="loop",
                                 parallel_iterations=parallel_iterations)
    return g, x, y


def gradient_across_tasks(n: int = 8, budget: int | None = None) -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """``loop_across_tasks`` with a body whose gradient saves values (a ``tanh`` and a product) on
    both devices of task 1, under the loop's own ``memory_budget`` (None: none), and the gradient of
    its result with respect to ``x``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[3], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device(dev(1, 1)):
                y2 = tn.tanh(y) * 1.5
            with tn.device(dev(1, 0)):
                y3 = y2 * y + 0.25
            return i + 1, y3

        with tn.device(dev(0, 1)):
            _, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), x], name="loop", memory_budget=budget)
            (gx,) = tn.gradients(tn.reduce_sum(y), [x])
    return g, x, gx


def cond_across_tasks() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """A cond whose predicate is computed on task 0 and whose branches run on task 1."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        with tn.device(dev(0)):
            p = x > 0.0
        with tn.device(dev(1, 1)):
            out = tn.cond(p, lambda: x * 3.0, lambda: x - 7.0)
        with tn.device(dev(0, 1)):
            out = out + 1.0
    return g, x, out


def run_in_process(g: tn.Graph, fetches: list[tn.Tensor], feeds: dict[tn.Tensor, Any],
                   recv_timeout: float = 10.0, only: Any = None, options: RunOptions | None = None,
                   executor: str = "reference", requests: dict[str, str] | None = None,
                   messages: list[tuple[str, str, str]] | None = None, frozen: bool = False,
                   runners_out: dict[str, Any] | None = None, slot_capacity: int | None = None) -> dict[str, Any]:
    """Run a graph on one ``TaskRunner`` per task, in threads of this process, wired by direct calls
    (no Ray): task -> TaskOutcome, or the exception it raised. ``only``: run just these tasks;
    ``executor``: the partition executor kind of every task; ``requests``: soft placement;
    ``messages``: a list that gets (sender, receiver, method) for every message; ``frozen``: deliver
    arrays read-only, as Ray's object store hands them over; ``runners_out``: a dict that gets the
    runners (the run's id is 1); ``slot_capacity``: the most checkpoint slots a recomputed loop gets
    (None: every one its budget holds), as a cluster session's driver says."""
    parted = partition(g, place(g, SPEC.devices, requests), fetches, {(t.node.id, t.index) for t in feeds})
    check_partitions(parted)

    def task_of(d: str) -> str:
        return SPEC.task_of(d).name

    plans = split_by_task(parted, task_of)
    fed = {(t.node.id, t.index): np.asarray(v, t.dtype.numpy) for t, v in feeds.items()}
    task_feeds = split_feeds(parted, task_of, fed)
    runners: dict[str, TaskRunner] = {}

    def outbox_of(src: str) -> Any:
        def outbox(dst: str, method: str, *args: Any) -> None:
            if messages is not None:
                messages.append((src, dst, method))
            if frozen and method == "deliver":
                args = (args[0], [(key, _read_only(v), dead) for key, v, dead in args[1]], *args[2:])
            if dst in runners:
                getattr(runners[dst], method)(*args)
        return outbox

    for t, plan in plans.items():
        if only is None or t in only:
            runners[t] = TaskRunner(t, outbox_of(t))
            runners[t].prepare(0, plan, executor)
    out: dict[str, Any] = {}
    if runners_out is not None:
        runners_out.update(runners)

    def go(t: str) -> None:
        try:
            out[t] = runners[t].run(1, 0, task_feeds.get(t, {}), options or RunOptions(), recv_timeout, detail=True,
                                    slot_capacity=slot_capacity)
        except Exception as e:  # noqa: BLE001 - returned to the test
            out[t] = e

    threads = [threading.Thread(target=go, args=(t,)) for t in runners]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    return out


def _read_only(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        value = value.copy()
        value.setflags(write=False)
    return value


def fetched(outcomes: dict[str, Any]) -> list[Any]:
    """The fetched values of a run, in fetch order (raises the first task's exception)."""
    got: dict[int, Any] = {}
    for o in outcomes.values():
        if isinstance(o, BaseException):
            raise o
        assert isinstance(o, TaskOutcome)
        for i, v, dead in o.values:
            got[i] = None if dead else v
    return [got[i] for i in sorted(got)]


class _Counted:
    """The reference partition executor, counting how often the task runner prepares and makes one."""

    prepared = 0
    made = 0

    @classmethod
    def prepare(cls, part: Any) -> Any:
        cls.prepared += 1
        return REFERENCE.prepare(part)

    @classmethod
    def make(cls, *args: Any) -> Any:
        cls.made += 1
        return REFERENCE.make(*args)


#: a partition executor kind for the seam's tests, loaded by path ("cluster_programs:COUNTING")
COUNTING = ExecutorKind("counting", _Counted.prepare, _Counted.make)
