"""The ``jax.Device`` a Turnout device name means, in this process.

Why a module of its own: the per-device tiers (``fast_executor``) and the whole-program tier
(``spmd``) both place their work on JAX devices by name, and the first chooses the second; kept here,
neither imports the other back.
"""

from __future__ import annotations

from typing import Any

import jax

from turnout.devices.names import DeviceSpec, parse
from turnout.errors import PlacementError


def jax_device(name: str | DeviceSpec) -> Any:
    """The ``jax.Device`` a device name means: ``/device:CPU:k`` is ``jax.devices("cpu")[k]``, GPU and
    TPU likewise. A device of another job or task, or one this process does not have, is a
    PlacementError naming it."""
    spec = parse(name)
    if spec.job != "localhost" or spec.task != 0:
        raise PlacementError(f"device {spec.name} belongs to another task; the fast partitioned executor runs the "
                             "devices of this process only (a cluster runs with cluster=...)")
    kind = spec.type.lower()
    have = process_devices(kind)
    if spec.index >= len(have):
        hint = (" (more CPU devices: set XLA_FLAGS=--xla_force_host_platform_device_count=N before jax is "
                "imported)" if kind == "cpu" else "")
        raise PlacementError(f"device {spec.short} does not exist in this process: JAX has {len(have)} {spec.type} "
                             f"device(s){hint}")
    return have[spec.index]


def process_devices(kind: str) -> list[Any]:
    """JAX's devices of ``kind`` (``"cpu"``, ``"gpu"``, ...) in this process; none where JAX has no such
    platform. Every executor that places work by device name looks devices up here (``jax_device``,
    a cluster task's compiled partitions)."""
    try:
        return jax.devices(kind.lower())
    except RuntimeError:
        return []


__all__ = ["jax_device", "process_devices"]
