"""Laws of a cluster description (``turnout.devices.cluster.ClusterSpec``): what a well-formed spec
reads as (each task's canonical devices and the Ray resources it asks for) and the exact words of each
refusal, which name the job, the task and the field. They kill mutants of the full set of
``devices/cluster.py`` (issue 40, part 3): the cluster runs build one well-formed spec, so a refusal
reworded, a default changed or a check loosened passed them all. Specs only: nothing starts."""

from __future__ import annotations

import re
from typing import Any

import pytest

from turnout.devices.cluster import ClusterSpec, TaskSpec
from turnout.errors import ClusterSpecError, PlacementError

W0 = "cluster spec, task /job:worker/task:0"


def _refused(jobs: Any, message: str) -> None:
    """``ClusterSpec(jobs)`` raises ``ClusterSpecError`` whose message is exactly ``message``."""
    with pytest.raises(ClusterSpecError) as e:
        ClusterSpec(jobs)
    assert str(e.value) == message


def _one(**entry: Any) -> TaskSpec:
    """The one task of job ``worker`` described by ``entry``."""
    (task,) = ClusterSpec({"worker": [entry]}).tasks
    return task


def test_a_task_reads_as_its_canonical_devices_and_its_requests() -> None:
    """Every field of a task entry lands in its ``TaskSpec``: devices as canonical full names of that
    task (short names, any case, or the task's own full names), the CPU and GPU requests as floats
    and the custom resources as floats. Kills ``_task`` and ``_devices`` mutants that drop, blank or
    shift a field."""
    spec = ClusterSpec({"worker": [{"devices": 1}, {"devices": ["cpu:1", "/job:worker/task:1/device:GPU:0"],
                                                     "num_cpus": 2, "num_gpus": 1, "resources": {"node_a": 1}}]})
    t0, t1 = spec.tasks
    assert t0 == TaskSpec("worker", 0, ("/job:worker/task:0/device:CPU:0",), 0.0, 0.0, {})
    assert t1 == TaskSpec("worker", 1, ("/job:worker/task:1/device:CPU:1", "/job:worker/task:1/device:GPU:0"),
                          2.0, 1.0, {"node_a": 1.0})
    assert all(type(v) is float for v in (t1.num_cpus, t1.num_gpus, t1.resources["node_a"]))
    assert t1.name == "/job:worker/task:1"


def test_a_task_asks_for_no_cpu_no_gpu_and_no_resource_by_default() -> None:
    """A task mostly waits on messages: unless its entry says otherwise it holds no CPU slot, no GPU
    and no custom resource, as a ``TaskSpec`` made directly does. Kills the defaults of ``TaskSpec``
    and of ``_task`` set to None or 1."""
    t = _one(devices=2)
    assert (t.num_cpus, t.num_gpus, dict(t.resources)) == (0.0, 0.0, {})
    assert t.devices == ("/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:1")
    made = TaskSpec("worker", 0, t.devices)
    assert (made.num_cpus, made.num_gpus, dict(made.resources)) == (0.0, 0.0, {}) and made == t


def test_job_names_take_letters_of_either_case_digits_and_three_marks() -> None:
    """A job name is letters (either case), digits, ``_``, ``.`` and ``-``; anything else, or a name
    that is not a string, is refused by name. Kills ``_JOB`` mutated (one case only, or never
    matching) and ``_read`` mutants that loosen or invert the test."""
    spec = ClusterSpec({"Ps-1.a_b": [{"devices": 1}], "worker": [{"devices": 1}]})
    assert [t.name for t in spec.tasks] == ["/job:Ps-1.a_b/task:0", "/job:worker/task:0"]
    _refused({"a b": [{"devices": 1}]}, "cluster spec: bad job name 'a b' (letters, digits, '_', '.', '-')")
    _refused({1: [{"devices": 1}]}, "cluster spec: bad job name 1 (letters, digits, '_', '.', '-')")


def test_a_spec_is_a_non_empty_mapping_of_non_empty_task_lists() -> None:
    """The description maps job names to non-empty lists of tasks: no jobs, a list for the whole spec,
    a string, a single task mapping, a number or an empty list for a job's tasks are each refused with
    what was given. Kills ``_read`` mutants of either test."""
    _refused({}, "a cluster spec maps job names to lists of tasks, got {}")
    _refused([{"devices": 1}], "a cluster spec maps job names to lists of tasks, got [{'devices': 1}]")
    for entries in ("ab", {"devices": 1}, 3, []):
        _refused({"worker": entries},
                 f"cluster spec, job 'worker': a job is a non-empty list of tasks, got {entries!r}")


def test_every_job_contributes_its_tasks_in_order() -> None:
    """Tasks are listed job by job, task ``i`` of a job being its ``i``-th entry. Kills ``_read``
    keeping only the last job's tasks or passing ``_task`` a blank job, index or entry."""
    spec = ClusterSpec({"ps": [{"devices": 1}], "worker": [{"devices": 1}, {"devices": 2}]})
    assert [(t.job, t.task, len(t.devices)) for t in spec.tasks] == [("ps", 0, 1), ("worker", 0, 1), ("worker", 1, 2)]
    assert spec.devices[:2] == ["/job:ps/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:0"]


def test_a_task_entry_is_a_mapping_with_known_fields_and_devices() -> None:
    """A task entry is a mapping whose fields are among the four known ones (all four together are
    fine) and include ``devices``; anything else is refused, naming the task. Kills ``_task`` mutants
    of those tests and ``_TASK_KEYS`` with a key renamed."""
    t = _one(devices=1, num_cpus=1, num_gpus=0, resources={})
    assert t.num_cpus == 1.0
    _refused({"worker": [["CPU:0"]]}, f"{W0}: a task is a mapping with a 'devices' entry, got ['CPU:0']")
    _refused({"worker": [{"devices": 1, "gpus": 1, 3: 0}]},
             f"{W0}: unknown field(s) ['3', 'gpus']; a task has ['devices', 'num_cpus', 'num_gpus', 'resources']")
    _refused({"worker": [{"num_cpus": 1}]}, f"{W0}: missing 'devices'")


@pytest.mark.parametrize("devices, why", [
    (0, "devices must be at least 1, got 0"),
    (True, "devices must be a non-empty list of device names or a count, got True"),
    ("CPU:0", "devices must be a non-empty list of device names or a count, got 'CPU:0'"),
    ([], "devices must be a non-empty list of device names or a count, got []"),
    ({"CPU:0"}, "devices must be a non-empty list of device names or a count, got {'CPU:0'}"),
    (["CPU:0", "cpu:0"], "device 'cpu:0' is listed twice"),
    (["/job:worker/task:1/device:CPU:0"], "device '/job:worker/task:1/device:CPU:0' belongs to another task "
                                          "(/job:worker/task:1)"),
    (["/job:ps/device:CPU:0"], "device '/job:ps/device:CPU:0' belongs to another task (/job:ps/task:0)"),
    (["/task:1/device:CPU:0"], "device '/task:1/device:CPU:0' belongs to another task (/job:localhost/task:1)"),
])
def test_devices_are_a_count_or_a_list_of_this_tasks_devices(devices: Any, why: str) -> None:
    """``devices`` is a count of at least 1 or a non-empty list (not a string, not a set) of device
    names, each a local name or a full name of this very task (a name giving only a job, or only a
    task, still names that task), none twice; each refusal names the task and what was wrong. Kills
    the ``_devices`` mutants of each test and of its messages."""
    _refused({"worker": [{"devices": devices}]}, f"{W0}: {why}")


def test_a_count_of_one_device_and_a_task_s_own_full_names_are_accepted() -> None:
    """One device is enough, and a full name naming this task (job and task, or a task alone on job
    ``localhost``) is its own device. Kills ``_devices`` refusing a count of 1 and refusing the
    task's own full names."""
    assert _one(devices=1).devices == ("/job:worker/task:0/device:CPU:0",)
    (t,) = ClusterSpec({"localhost": [{"devices": ["/task:0/device:GPU:1", "/job:localhost/task:0/cpu:0"],
                                       "num_gpus": 1}]}).tasks
    assert t.devices == ("/job:localhost/task:0/device:GPU:1", "/job:localhost/task:0/device:CPU:0")


def test_a_device_name_that_does_not_parse_is_refused_naming_the_task() -> None:
    """A malformed device name is refused as a spec error (not a placement error), with the task in
    front of the parser's own words. Kills the ``_devices`` re-raise without its message."""
    with pytest.raises(ClusterSpecError, match=rf"^{re.escape(W0)}: .*'CPU:x'") as e:
        ClusterSpec({"worker": [{"devices": ["CPU:x"]}]})
    assert not isinstance(e.value, PlacementError)


@pytest.mark.parametrize("key, value, why", [
    ("num_cpus", True, "num_cpus must be a finite number, got True"),
    ("num_cpus", "2", "num_cpus must be a finite number, got '2'"),
    ("num_cpus", float("inf"), "num_cpus must be a finite number, got inf"),
    ("num_cpus", -1, "num_cpus must be non-negative, got -1"),
    ("num_gpus", float("nan"), "num_gpus must be a finite number, got nan"),
    ("num_gpus", -0.5, "num_gpus must be non-negative, got -0.5"),
])
def test_cpu_and_gpu_requests_are_finite_and_non_negative(key: str, value: Any, why: str) -> None:
    """``num_cpus`` and ``num_gpus`` are finite numbers (a bool is not one) of at least 0; the refusal
    names the task, the field and the value. Kills the ``_number`` mutants of each test and the
    ``_task`` mutants that pass it no place, no field name or another value."""
    _refused({"worker": [{"devices": 1, key: value}]}, f"{W0}: {why}")


def test_zero_and_fractions_are_fine_requests() -> None:
    """0 is a valid request (the default, and a task that holds no slot), and so is half a CPU or a
    fractional GPU. Kills ``_number`` refusing 0 (``<=``) or anything under 1, and treating every
    request as one that must be positive."""
    t = _one(devices=1, num_cpus=0, num_gpus=0.25)
    assert (t.num_cpus, t.num_gpus) == (0.0, 0.25)
    assert _one(devices=1, num_cpus=0.5).num_cpus == 0.5


@pytest.mark.parametrize("resources, why", [
    ([("node_a", 1)], "resources must be a mapping name -> amount, got [('node_a', 1)]"),
    ({"CPU": 1}, "bad resource name 'CPU' (CPU and GPU go in num_cpus / num_gpus)"),
    ({"GPU": 1}, "bad resource name 'GPU' (CPU and GPU go in num_cpus / num_gpus)"),
    ({"": 1}, "bad resource name '' (CPU and GPU go in num_cpus / num_gpus)"),
    ({1: 1}, "bad resource name 1 (CPU and GPU go in num_cpus / num_gpus)"),
    ({"node_a": 0}, "resources['node_a'] must be positive, got 0"),
    ({"node_a": -1}, "resources['node_a'] must be positive, got -1"),
    ({"node_a": "x"}, "resources['node_a'] must be a finite number, got 'x'"),
])
def test_custom_resources_are_named_and_positive(resources: Any, why: str) -> None:
    """``resources`` maps a non-empty name other than ``CPU`` and ``GPU`` to a positive amount (0 would
    ask for nothing and pin nothing); each refusal names the task and the resource. Kills the
    ``_task`` mutants of those tests and of the call that checks an amount."""
    _refused({"worker": [{"devices": 1, "resources": resources}]}, f"{W0}: {why}")


def test_a_resource_of_one_or_a_fraction_is_accepted() -> None:
    """Any positive amount pins a task, a whole node's worth or a sliver. Kills ``_number`` refusing
    an amount of 1 (``value == 1`` for ``value == 0``) or every positive amount."""
    assert dict(_one(devices=1, resources={"node_a": 1, "node_b": 0.01}).resources) == {"node_a": 1.0, "node_b": 0.01}


def test_a_task_that_owns_gpus_asks_for_at_least_as_many() -> None:
    """A task owning GPU devices must ask Ray for at least that many GPUs (else its actor could be
    placed where they are not); CPU devices need no GPU, and asking for exactly as many is enough.
    Kills ``_task`` counting the CPU devices, never finding a GPU, or refusing an exact request."""
    _refused({"worker": [{"devices": ["CPU:0", "GPU:0", "GPU:1"], "num_gpus": 1}]},
             f"{W0}: owns 2 GPU device(s) but asks for num_gpus=1")
    assert _one(devices=["GPU:0", "CPU:0"], num_gpus=1).num_gpus == 1.0
    assert _one(devices=["CPU:0", "CPU:1"]).num_gpus == 0.0


def test_a_spec_made_from_a_spec_is_a_copy_that_answers_the_same() -> None:
    """``ClusterSpec(spec)`` takes the tasks as they are (no second reading) into a list of its own,
    and answers ``task_of`` as the original does. Kills ``__init__`` mutants that blank the tasks or
    the device index."""
    spec = ClusterSpec({"worker": [{"devices": 1}, {"devices": 2}]})
    copy = ClusterSpec(spec)
    assert copy.tasks == spec.tasks and copy.tasks is not spec.tasks
    assert copy.task_of("/job:worker/task:1/device:CPU:1") is spec.tasks[1]
    assert spec.task_of("/job:worker/task:0/cpu:0") is spec.tasks[0]


def test_a_device_of_no_task_and_an_unknown_task_are_refused_by_name() -> None:
    """``task_of`` names the device and lists the tasks there are; ``task`` finds a task by its name
    and refuses one the cluster lacks. Kills ``task_of`` and ``task`` mutants of their messages and
    ``task`` returning the first task whose name differs."""
    spec = ClusterSpec({"worker": [{"devices": 1}, {"devices": 1}]})
    with pytest.raises(PlacementError) as e:
        spec.task_of("/job:worker/task:2/device:CPU:0")
    assert str(e.value) == ("device /job:worker/task:2/device:CPU:0 belongs to no task of the cluster "
                            "(tasks: /job:worker/task:0, /job:worker/task:1)")
    assert spec.task("/job:worker/task:1") is spec.tasks[1]
    with pytest.raises(ClusterSpecError) as f:
        spec.task("/job:worker/task:7")
    assert str(f.value) == "the cluster has no task '/job:worker/task:7'"


def test_a_spec_prints_its_tasks_and_device_counts() -> None:
    """The repr lists each task with its number of devices. Kills ``__repr__`` joining with another
    separator or nothing."""
    spec = ClusterSpec({"worker": [{"devices": 2}, {"devices": 1}]})
    assert repr(spec) == "ClusterSpec(/job:worker/task:0: 2 devices, /job:worker/task:1: 1 devices)"
