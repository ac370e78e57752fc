"""Device names: the TensorFlow syntax, parsed once into a ``DeviceSpec``.

Why TensorFlow's syntax: the paper's users write ``/job:worker/task:1/device:CPU:0``, and short forms
such as ``cpu:1`` or ``/gpu:0``. Every part is optional; a missing job or task means the local one
(``localhost``, task 0), so ``cpu:1`` and ``/job:localhost/task:0/device:CPU:1`` name the same device.
Names are compared in their canonical full form, which is also how partitions are labelled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from turnout.errors import PlacementError

_FULL = re.compile(r"^(?:/job:(?P<job>[A-Za-z0-9_.-]+))?(?:/replica:(?P<replica>\d+))?(?:/task:(?P<task>\d+))?"
                   r"(?:/(?:device:)?(?P<type>[A-Za-z]+):(?P<index>\d+))?$")


@dataclass(frozen=True, order=True)
class DeviceSpec:
    """One device: job, task, device type (upper case, e.g. ``CPU``) and index."""

    job: str = "localhost"
    task: int = 0
    type: str = "CPU"
    index: int = 0

    @property
    def name(self) -> str:
        """The canonical full name, ``/job:localhost/task:0/device:CPU:1``."""
        return f"/job:{self.job}/task:{self.task}/device:{self.type}:{self.index}"

    @property
    def short(self) -> str:
        """``cpu:1`` for a device of the local task, else the full name (for pictures and traces)."""
        if self.job == "localhost" and self.task == 0:
            return f"{self.type.lower()}:{self.index}"
        return self.name

    def __str__(self) -> str:
        return self.name


def parse(name: str | DeviceSpec) -> DeviceSpec:
    """Parse a device name in full (``/job:worker/task:1/device:CPU:0``), short (``cpu:1``, ``/cpu:1``,
    ``CPU:1``) or mixed form; raises PlacementError on anything else."""
    if isinstance(name, DeviceSpec):
        return name
    if not isinstance(name, str) or not name.strip():
        raise PlacementError(f"a device name must be a non-empty string, got {name!r}")
    text = name.strip()
    if not text.startswith("/"):
        text = "/" + text
    m = _FULL.match(text)
    if m is None or not any(m.groupdict().values()):
        raise PlacementError(
            f"cannot parse device name {name!r}; write it like '/job:worker/task:1/device:CPU:0' or 'cpu:1'"
        )
    g = m.groupdict()
    return DeviceSpec(
        job=g["job"] or "localhost",
        task=int(g["task"]) if g["task"] is not None else 0,
        type=(g["type"] or "CPU").upper(),
        index=int(g["index"]) if g["index"] is not None else 0,
    )


def canonical(name: str | DeviceSpec) -> str:
    """The canonical full name of a device name in any accepted form."""
    return parse(name).name
