"""Cluster specs: which tasks (processes) exist, which devices each owns, and what each needs to start.

Why a spec of its own, checked before anything starts: a mistake in it (a task with no devices, a GPU
device on a task that asks for no GPU, a negative resource) would otherwise surface minutes later as a
Ray scheduling hang or a placement error deep inside a run. ``ClusterSpec`` reads the description once,
rejects every malformed field with a ``ClusterSpecError`` naming the job, task and field, and from then
on answers the two questions the runtime asks: the full list of device names (for placement) and the
task that owns a device (for routing Send/Recv pairs).

The description follows TensorFlow's ``ClusterSpec``: a job name maps to the list of its tasks, task
``i`` being the ``i``-th entry. Each task entry says which devices the task owns and which Ray resources
its actor asks for::

    {"worker": [{"devices": ["CPU:0", "CPU:1"], "resources": {"node_a": 0.01}},
                {"devices": ["CPU:0", "GPU:0"], "num_gpus": 1}]}

``devices`` is a list of local device names (``CPU:0``, ``gpu:1``, or the full name of a device of that
very task) or a count ``n`` meaning ``CPU:0`` to ``CPU:n-1``. ``num_cpus`` (default 0: a task mostly
waits on messages, so it holds no CPU slot), ``num_gpus`` (default 0) and ``resources`` (custom Ray
resources, for pinning a task to a node) are what the task's actor asks Ray for.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from turnout.devices.names import DeviceSpec, parse
from turnout.errors import ClusterSpecError, PlacementError

_JOB = re.compile(r"^[A-Za-z0-9_.-]+$")
_TASK_KEYS = frozenset({"devices", "num_cpus", "num_gpus", "resources"})


@dataclass(frozen=True)
class TaskSpec:
    """One task of the cluster: its name (``/job:worker/task:1``), its devices (canonical full names)
    and the Ray resources its actor asks for."""

    job: str
    task: int
    devices: tuple[str, ...]
    num_cpus: float = 0.0
    num_gpus: float = 0.0
    resources: Mapping[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``/job:worker/task:1``: how errors and traces name the task."""
        return f"/job:{self.job}/task:{self.task}"


def _number(where: str, key: str, value: Any, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ClusterSpecError(f"{where}: {key} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ClusterSpecError(f"{where}: {key} must be {'positive' if positive else 'non-negative'}, got {value!r}")
    return float(value)


def _devices(where: str, job: str, task: int, value: Any) -> tuple[str, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ClusterSpecError(f"{where}: devices must be at least 1, got {value}")
        value = [f"CPU:{i}" for i in range(value)]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise ClusterSpecError(f"{where}: devices must be a non-empty list of device names or a count, got {value!r}")
    out: list[str] = []
    for d in value:
        try:
            spec = parse(d)
        except PlacementError as e:
            raise ClusterSpecError(f"{where}: {e}") from None
        explicit = isinstance(d, str) and ("/job:" in d or "/task:" in d)
        if explicit and (spec.job, spec.task) != (job, task):
            raise ClusterSpecError(f"{where}: device {d!r} belongs to another task (/job:{spec.job}/task:{spec.task})")
        name = DeviceSpec(job, task, spec.type, spec.index).name
        if name in out:
            raise ClusterSpecError(f"{where}: device {d!r} is listed twice")
        out.append(name)
    return tuple(out)


def _task(job: str, index: int, entry: Any) -> TaskSpec:
    where = f"cluster spec, task /job:{job}/task:{index}"
    if not isinstance(entry, Mapping):
        raise ClusterSpecError(f"{where}: a task is a mapping with a 'devices' entry, got {entry!r}")
    unknown = sorted(set(map(str, entry)) - _TASK_KEYS)
    if unknown:
        raise ClusterSpecError(f"{where}: unknown field(s) {unknown}; a task has {sorted(_TASK_KEYS)}")
    if "devices" not in entry:
        raise ClusterSpecError(f"{where}: missing 'devices'")
    devices = _devices(where, job, index, entry["devices"])
    num_cpus = _number(where, "num_cpus", entry.get("num_cpus", 0))
    num_gpus = _number(where, "num_gpus", entry.get("num_gpus", 0))
    resources = entry.get("resources", {})
    if not isinstance(resources, Mapping):
        raise ClusterSpecError(f"{where}: resources must be a mapping name -> amount, got {resources!r}")
    res: dict[str, float] = {}
    for k, v in resources.items():
        if not isinstance(k, str) or not k or k in ("CPU", "GPU"):
            raise ClusterSpecError(f"{where}: bad resource name {k!r} (CPU and GPU go in num_cpus / num_gpus)")
        res[k] = _number(where, f"resources[{k!r}]", v, positive=True)
    gpus = [d for d in devices if parse(d).type == "GPU"]
    if gpus and num_gpus < len(gpus):
        raise ClusterSpecError(f"{where}: owns {len(gpus)} GPU device(s) but asks for num_gpus={num_gpus:g}")
    return TaskSpec(job, index, devices, num_cpus, num_gpus, res)


class ClusterSpec:
    """A validated cluster description (see the module docstring for the format)."""

    def __init__(self, jobs: Mapping[str, Sequence[Any]] | ClusterSpec) -> None:
        if isinstance(jobs, ClusterSpec):
            self.tasks: list[TaskSpec] = list(jobs.tasks)
        else:
            self.tasks = self._read(jobs)
        self._task_of = {d: t for t in self.tasks for d in t.devices}

    @staticmethod
    def _read(jobs: Any) -> list[TaskSpec]:
        if not isinstance(jobs, Mapping) or not jobs:
            raise ClusterSpecError(f"a cluster spec maps job names to lists of tasks, got {jobs!r}")
        tasks: list[TaskSpec] = []
        for job, entries in jobs.items():
            if not isinstance(job, str) or not _JOB.match(job):
                raise ClusterSpecError(f"cluster spec: bad job name {job!r} (letters, digits, '_', '.', '-')")
            if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence) or not entries:
                raise ClusterSpecError(f"cluster spec, job {job!r}: a job is a non-empty list of tasks, "
                                       f"got {entries!r}")
            tasks += [_task(job, i, e) for i, e in enumerate(entries)]
        return tasks

    @property
    def devices(self) -> list[str]:
        """Every device of the cluster, canonical full names, task by task (placement's device list: the
        first one is the default device)."""
        return [d for t in self.tasks for d in t.devices]

    def task_of(self, device: str | DeviceSpec) -> TaskSpec:
        """The task that owns ``device``; PlacementError for a device of no task."""
        name = parse(device).name
        try:
            return self._task_of[name]
        except KeyError:
            raise PlacementError(f"device {name} belongs to no task of the cluster "
                                 f"(tasks: {', '.join(t.name for t in self.tasks)})") from None

    def task(self, name: str) -> TaskSpec:
        """The task named ``/job:worker/task:1``."""
        for t in self.tasks:
            if t.name == name:
                return t
        raise ClusterSpecError(f"the cluster has no task {name!r}")

    def __repr__(self) -> str:
        return f"ClusterSpec({', '.join(f'{t.name}: {len(t.devices)} devices' for t in self.tasks)})"
