"""Cluster specs and the per-task runner, without Ray: the runners of two tasks run in threads of this
process, wired by direct calls, and must give the unpartitioned reference's results."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from cluster_programs import T0, T1, cond_across_tasks, fetched, loop_across_tasks, run_in_process

import turnout as tn
from turnout.devices.cluster import ClusterSpec


# ---- cluster specs -----------------------------------------------------------------------------------
def test_spec_devices_and_tasks() -> None:
    spec = ClusterSpec({"worker": [{"devices": 2, "resources": {"node_a": 0.5}},
                                   {"devices": ["CPU:0", "/job:worker/task:1/device:GPU:0"], "num_gpus": 1}],
                        "ps": [{"devices": ["cpu:0"], "num_cpus": 1}]})
    assert spec.devices == ["/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:1",
                            "/job:worker/task:1/device:CPU:0", "/job:worker/task:1/device:GPU:0",
                            "/job:ps/task:0/device:CPU:0"]
    assert spec.task_of("/job:worker/task:1/device:GPU:0").name == "/job:worker/task:1"
    assert spec.task("/job:ps/task:0").num_cpus == 1 and spec.tasks[0].resources == {"node_a": 0.5}
    with pytest.raises(tn.PlacementError, match="belongs to no task"):
        spec.task_of("/job:worker/task:7/device:CPU:0")


@pytest.mark.parametrize("bad, match", [
    ({}, "maps job names"),
    ([{"devices": 1}], "maps job names"),
    ({"wor ker": [{"devices": 1}]}, "bad job name"),
    ({"worker": []}, "non-empty list of tasks"),
    ({"worker": {"devices": 1}}, "non-empty list of tasks"),
    ({"worker": [{"devices": 0}]}, "at least 1"),
    ({"worker": [{"devices": []}]}, "non-empty list"),
    ({"worker": [{}]}, "missing 'devices'"),
    ({"worker": [{"devices": 1, "gpus": 1}]}, r"unknown field\(s\) \['gpus'\]"),
    ({"worker": [{"devices": ["cpu:0", "CPU:0"]}]}, "listed twice"),
    ({"worker": [{"devices": ["/job:worker/task:1/device:CPU:0"]}]}, "belongs to another task"),
    ({"worker": [{"devices": ["tpu"]}]}, "cannot parse device name"),
    ({"worker": [{"devices": ["GPU:0"]}]}, "num_gpus=0"),
    ({"worker": [{"devices": 1, "num_cpus": -1}]}, "non-negative"),
    ({"worker": [{"devices": 1, "num_cpus": float("nan")}]}, "finite number"),
    ({"worker": [{"devices": 1, "resources": {"node_a": 0}}]}, "positive"),
    ({"worker": [{"devices": 1, "resources": {"CPU": 1}}]}, "bad resource name"),
    ({"worker": [{"devices": 1, "resources": ["node_a"]}]}, "mapping"),
])
def test_malformed_specs_are_rejected(bad: Any, match: str) -> None:
    with pytest.raises(tn.ClusterSpecError, match=match):
        ClusterSpec(bad)


def test_malformed_spec_is_rejected_before_ray_is_needed() -> None:
    g, x, y = loop_across_tasks(3)
    with pytest.raises(tn.ClusterSpecError, match="task /job:worker/task:1: missing 'devices'"):
        tn.Session(g, cluster={"worker": [{"devices": 2}, {"num_cpus": 1}]})


def test_import_turnout_does_not_import_ray() -> None:
    import subprocess
    import sys

    code = "import sys, turnout, turnout.devices, turnout.devices.cluster, turnout.devices.task_runner; " \
           "print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# ---- task runners in one process ---------------------------------------------------------------------
@pytest.mark.parametrize("parallel_iterations", [1, 10])
def test_loop_spanning_two_tasks_in_process(parallel_iterations: int) -> None:
    g, x, y = loop_across_tasks(30, parallel_iterations)
    want = tn.Session(g).run(y, {x: 2.0})
    out = run_in_process(g, [y], {x: 2.0})
    np.testing.assert_equal(fetched(out), [want])
    sent = sum((o.message_log[0] for o in out.values()), [])
    received = sum((o.message_log[1] for o in out.values()), [])
    assert sorted(sent) == sorted(received) and len(set(sent)) == len(sent)
    # the predicate reaches task 1 every iteration; the unconsumed tokens of an edge never pass its credit
    assert out[T0].remote_sent >= 31 and out[T1].remote_sent >= 30
    assert max(o.peak_unconsumed for o in out.values()) <= parallel_iterations


@pytest.mark.parametrize("value", [2.0, -2.0])
def test_cond_across_two_tasks_in_process(value: float) -> None:
    g, x, out_t = cond_across_tasks()
    want = tn.Session(g).run(out_t, {x: value})
    np.testing.assert_equal(fetched(run_in_process(g, [out_t], {x: value})), [want])


def test_recv_timeout_names_key_and_sending_task() -> None:
    g, x, y = loop_across_tasks(3)
    out = run_in_process(g, [y], {x: 1.0}, recv_timeout=0.5, only={T1})  # task 0 never runs
    err = out[T1]
    assert isinstance(err, tn.RecvTimeoutError)
    msg = str(err)
    assert "task /job:worker/task:1: no message for 0.5 s" in msg
    assert "loop/loop_cond:0->/job:worker/task:1" in msg and f"from task {T0}" in msg


def test_a_token_delivered_twice_fails_the_run_not_the_message() -> None:
    from turnout.devices.task_runner import TaskRendezvous
    from turnout.reference.rules import Token

    rv = TaskRendezvous()
    key = ("a:0->/job:worker/task:1/device:CPU:0", ())
    rv.deliver(key, Token(np.float32(1)))
    assert rv.aborted is None
    rv.deliver(key, Token(np.float32(1)))
    assert isinstance(rv.aborted, tn.ExecutionError) and "delivered twice" in str(rv.aborted)
