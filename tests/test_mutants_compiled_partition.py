"""Tests written to kill the survivors of the mutation campaign on ``devices/compiled_partition.py``
(``tools/mutation.py --module devices/compiled_partition.py --sample 15 --seed 5``; see docs/checking.rst).

Each test checks a law of the compiled partition executor that ``tests/test_compiled_partition.py``
left open: where a partition's compiled code runs (a task's CPU devices share its host; an
accelerator partition runs on its JAX device), and that a partition run whole on the fast backend
reads and updates the task's Variables, run after run, as the reference interpreter does.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from cluster_programs import SPEC, T1, dev, fetched, run_in_process
from test_compiled_partition import _cell_across_tasks, stats_of

import turnout as tn
from turnout.devices import check_partitions, partition, place
from turnout.devices import compiled_partition as cp
from turnout.devices.task_runner import TaskOutcome, TaskRunner, split_by_task, split_feeds
from turnout.errors import PlacementError
from turnout.session import RunOptions


def _task_of(d: str) -> str:
    return SPEC.task_of(d).name


def _runs_on_one_task(g: tn.Graph, fetches: list[tn.Tensor], feeds: list[dict[tn.Tensor, Any]],
                      device: str) -> tuple[TaskRunner, list[TaskOutcome]]:
    """Every node of ``g`` on ``device``: one ``TaskRunner`` for its task, prepared once with the fast
    partition executor and run once per feed dict (its Variables stay in the runner's store between
    runs, as in a cluster session)."""
    parted = partition(g, place(g, SPEC.devices, {n.name: device for n in g.nodes}), fetches,
                       {(t.node.id, t.index) for f in feeds for t in f})
    check_partitions(parted)
    plans = split_by_task(parted, _task_of)
    (task,) = plans
    runner = TaskRunner(task, lambda *args: None)  # a task alone sends no message
    runner.prepare(0, plans[task], "fast")
    outcomes = []
    for run_id, f in enumerate(feeds):
        fed = {(t.node.id, t.index): np.asarray(v, t.dtype.numpy) for t, v in f.items()}
        outcomes.append(runner.run(run_id, 0, split_feeds(parted, _task_of, fed).get(task, {}), RunOptions(),
                                   10.0, detail=True))
    return runner, outcomes


def _accumulator(device: str) -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """``w += 2x; return 3w`` with the Variable ``w`` (0.5 at first), all on ``device``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        with tn.device(device):
            w = tn.Variable(0.5, name="w")
            y = w.assign_add(x * 2.0) * 3.0
    return g, x, y


@pytest.fixture
def second_cpu_as_accelerator(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Stand in for an accelerator: every partition is told to run on JAX's second CPU device (the
    tests' conftest gives the process 8), so the accelerator's path (``jax.default_device``) runs here."""
    target = jax.devices("cpu")[1]
    asked: list[str] = []

    def on_accelerator(device: str) -> Any:
        asked.append(device)
        return target

    monkeypatch.setattr(cp, "_jax_device", on_accelerator)
    return asked


# ---- kills _jax_device:47c8bad8 (CPU partitions looked up among JAX's CPU devices by index) -------------
def test_a_cpu_partition_of_any_index_runs_on_the_process_default_device() -> None:
    """A task's CPU devices share its host: a CPU partition's compiled code runs on the process's default
    device (``None``), whatever the partition's index, even one beyond JAX's count of CPU devices. Only
    an accelerator partition is placed on the JAX device of its index, which must exist."""
    n_cpu = len(jax.devices("cpu"))
    for index in (0, 1, n_cpu, n_cpu + 3):
        assert cp._jax_device(dev(0, index)) is None, index
        assert cp._jax_device(f"/job:worker/task:1/device:cpu:{index}") is None, index
    try:
        n_gpu = len(jax.devices("gpu"))
    except RuntimeError:
        n_gpu = 0
    with pytest.raises(PlacementError, match=f"has {n_gpu} JAX GPU device"):
        cp._jax_device(f"/job:worker/task:0/device:GPU:{n_gpu}")


# ---- kills _run_whole:e9fd1edf and _run_whole:966efaad (the accelerator's whole run) -------------------
@pytest.mark.parametrize("on", ["cpu", "accelerator"])
def test_a_partition_alone_reads_and_updates_the_tasks_variables_run_after_run(
        on: str, request: pytest.FixtureRequest) -> None:
    """A partition with no Send or Recv, run whole on the fast backend, reads its Variable from the task's
    store and writes the update back: three runs give the reference session's three values, and the
    task's store ends with the reference's Variable. On an accelerator (stood in for by a second JAX
    CPU device) the program runs under that device, with the same Variables."""
    asked = request.getfixturevalue("second_cpu_as_accelerator") if on == "accelerator" else None
    g, x, y = _accumulator(dev(1, 1))
    ref = tn.Session(g)
    inputs = [1.0, -0.25, 2.0]
    want = [ref.run(y, {x: v}) for v in inputs]
    runner, outcomes = _runs_on_one_task(g, [y], [{x: v} for v in inputs], dev(1, 1))
    got = [o.values[0][1] for o in outcomes]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(runner.stores[None]["w"], ref.variables["w"], rtol=1e-6)
    for o in outcomes:
        s = o.executor_stats[dev(1, 1)]
        assert s["whole_runs"] == 1 and s["compiled_calls"] == 0, s
    assert sum(o.executor_stats[dev(1, 1)]["compiles"] for o in outcomes) == 1, "later runs reuse the program"
    if asked is not None:
        assert asked and set(asked) == {dev(1, 1)}


def test_fused_groups_on_an_accelerator_give_the_reference_values(second_cpu_as_accelerator: list[str]) -> None:
    """The fused groups of partitions that send and receive, on an accelerator (the second JAX CPU device
    stands in for it), are compiled and called under that device and give the reference's values."""
    g, x, h = _cell_across_tasks(4)
    value = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
    want = tn.Session(g).run(h, {x: value})
    out = run_in_process(g, [h], {x: value}, executor="fast")
    np.testing.assert_allclose(fetched(out)[0], want, rtol=1e-6)
    s = stats_of(out)
    assert s["compiled_calls"] > 0 and s["interpreted_calls"] == 0
    assert T1 in out and dev(1, 0) in second_cpu_as_accelerator
