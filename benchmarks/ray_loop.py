"""A loop whose body spans two tasks of a Ray cluster, against a hand-written pair of Ray actors.

Usage: ``python benchmarks/ray_loop.py [--n N] [--repeat R]`` (needs the ``ray`` extra). Starts a local
two-node cluster on 127.0.0.1 (``LocalCluster``), runs both sides with their timed calls interleaved,
writes ``benchmarks/results/ray_loop.json`` and prints a table. Not part of ``benchmarks/run.py``: it
starts processes of its own.

The loop is ``while i < N: y = y * 0.999 + 1``. Turnout places ``i`` and the ``LoopCond`` on task 0 and
everything of ``y`` on task 1, so the predicate crosses from task 0 to task 1 every iteration (with the
control edge that starts task 1's iteration), and ``parallel_iterations=10`` lets task 0 run ahead by
up to 10 unconsumed messages. The baseline does the same by hand: actor A computes the predicate and
sends it to actor B fire-and-forget with its key, B applies the update in key order and gives credits
back every 5 messages, A never has more than 10 messages unconsumed. Both report iterations per second
of the whole run (driver call to result).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.common import timed_pair  # noqa: E402

RESULTS = os.path.join(ROOT, "benchmarks", "results")
WINDOW = 10


class Sender:
    """Actor A: owns ``i`` and the predicate; sends it to B every iteration, at most WINDOW unconsumed."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.outstanding = 0
        self.peer: Any = None

    def connect(self, peer: Any) -> None:
        self.peer = peer

    def credit(self, n: int) -> None:
        with self.cond:
            self.outstanding -= n
            self.cond.notify_all()

    def run(self, n: int) -> int:
        with self.cond:
            self.outstanding = 0
        for k in range(n + 1):
            with self.cond:
                while self.outstanding >= WINDOW:
                    self.cond.wait()
                self.outstanding += 1
            self.peer.deliver.remote(k, k < n)
        return n


class Receiver:
    """Actor B: owns ``y``; applies the update for every true predicate, in key order."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.box: dict[int, bool] = {}
        self.peer: Any = None

    def connect(self, peer: Any) -> None:
        self.peer = peer

    def deliver(self, k: int, pred: bool) -> None:
        with self.cond:
            self.box[k] = pred
            self.cond.notify_all()

    def run(self) -> float:
        y, k, owed = 0.0, 0, 0
        while True:
            with self.cond:
                while k not in self.box:
                    self.cond.wait()
                pred = self.box.pop(k)
            k += 1
            owed += 1
            if owed >= WINDOW // 2 or not pred:
                self.peer.credit.remote(owed)
                owed = 0
            if not pred:
                return y
            y = y * 0.999 + 1.0


def turnout_graph(n_task0: str, n_task1: str) -> tuple[Any, Any, Any, dict[str, str]]:
    import turnout as tn

    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, shape=[], name="n")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 0.999 + 1.0),
                             [tn.constant(0), tn.constant(0.0)], parallel_iterations=WINDOW, name="loop")
    # everything of y (float tensors) on task 1; i, the predicate and the LoopCond on task 0
    requests = {node.name: (n_task1 if node.outputs and node.outputs[0].dtype.is_floating else n_task0)
                for node in g.nodes}
    return g, n, y, requests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="loop iterations per run")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each side (interleaved)")
    args = ap.parse_args()

    import ray

    import turnout as tn
    from turnout.devices.local_cluster import LocalCluster, node_resource

    with LocalCluster(nodes=2, num_cpus=1) as lc:
        spec = lc.spec(tasks=2, devices=1)
        t0, t1 = spec.tasks[0].devices[0], spec.tasks[1].devices[0]
        g, n, y, requests = turnout_graph(t0, t1)
        sess = tn.Session(g, cluster=spec, requests=requests)
        want = tn.Session(g).run(y, {n: args.n})
        got = sess.run(y, {n: args.n})
        assert abs(float(got) - float(want)) <= 1e-3 * abs(float(want)), (got, want)
        stats = dict(sess.backend.last_stats)

        a = ray.remote(Sender).options(num_cpus=0, max_concurrency=4,  # type: ignore[attr-defined]
                                       resources={node_resource(0): 0.01}).remote()
        b = ray.remote(Receiver).options(num_cpus=0, max_concurrency=4,  # type: ignore[attr-defined]
                                         resources={node_resource(1): 0.01}).remote()
        ray.get([a.connect.remote(b), b.connect.remote(a)])

        def hand() -> float:
            ref_b = b.run.remote()
            ray.get(a.run.remote(args.n))
            return float(ray.get(ref_b))

        def turnout_run() -> Any:
            return sess.run(y, {n: args.n})

        tt, th = timed_pair(turnout_run, hand, args.repeat)
        sess.close()
        ray.kill(a)
        ray.kill(b)
    res = {
        "n": args.n, "repeat": args.repeat, "load_avg": os.getloadavg(),
        "turnout": {**tt, "iterations_per_s": args.n / tt["median_s"]},
        "hand_written": {**th, "iterations_per_s": args.n / th["median_s"]},
        "ratio_turnout_over_hand": th["median_s"] / tt["median_s"],
        "messages_between_tasks_per_iteration": stats["messages_between_tasks"] / args.n,
        "deliver_calls_per_iteration": stats["deliver_calls_between_tasks"] / args.n,
        "credit_calls_per_iteration": stats["credit_calls_between_tasks"] / args.n,
        "firings_per_iteration": stats["firings"] / args.n,
        # where each task's time went in the checked run: firing (busy) or waiting for the other task
        "busy_s_per_task": stats["busy_s_per_task"],
        "wait_s_per_task": stats["wait_s_per_task"],
    }
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "ray_loop.json"), "w") as f:
        json.dump(res, f, indent=2)
    print(f"loop of {args.n} iterations spanning two tasks (median of {args.repeat}, load {res['load_avg'][0]:.1f})")
    print(f"  Turnout on Ray     : {res['turnout']['iterations_per_s']:8.0f} iterations/s "
          f"({res['messages_between_tasks_per_iteration']:.2f} tokens in "
          f"{res['deliver_calls_per_iteration']:.2f} deliver and {res['credit_calls_per_iteration']:.2f} credit "
          f"calls between tasks and "
          f"{res['firings_per_iteration']:.1f} firings per iteration)")
    print(f"  hand-written actors: {res['hand_written']['iterations_per_s']:8.0f} iterations/s")
    print(f"  ratio              : {res['ratio_turnout_over_hand']:.2f}x the hand-written rate")
    for t in sorted(res["busy_s_per_task"]):
        print(f"  {t}: busy {res['busy_s_per_task'][t]:.2f} s, waiting {res['wait_s_per_task'][t]:.2f} s")


if __name__ == "__main__":
    main()
