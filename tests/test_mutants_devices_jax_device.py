"""Laws of device lookup (``turnout.devices.jax_device``): which ``jax.Device`` a Turnout device name
means in this process, and the errors for a name that means none here. Each law kills mutants of the
full set of ``devices/jax_device.py`` (issue 40, part 3; ``python tools/mutation.py --module
devices/jax_device.py --all``): a lookup that accepts another task's device or refuses its own, an
index one past the last device let through, a platform looked up under the wrong name, an error
whose words lost the device, the count or the hint.

The lookups call the module directly (JAX's forced host devices, eight under the test suite's
``conftest.py``); nothing is compiled, so each test takes milliseconds. What JAX has is read here
from ``jax.devices`` itself, not from the module under test.
"""

from __future__ import annotations

from typing import Any

import jax
import pytest

from turnout.devices.jax_device import jax_device, process_devices
from turnout.devices.names import canonical, parse
from turnout.errors import PlacementError

_HINT = " (more CPU devices: set XLA_FLAGS=--xla_force_host_platform_device_count=N before jax is imported)"


def _jax_has(platform: str) -> list[Any]:
    """JAX's devices of ``platform`` (lower case), none where JAX has no such platform."""
    try:
        return list(jax.devices(platform))
    except RuntimeError:
        return []


def test_every_cpu_device_of_this_process_is_found_by_each_form_of_its_name() -> None:
    """``cpu:k`` is ``jax.devices("cpu")[k]`` for every k this process has, written short, in full,
    upper case or as a parsed ``DeviceSpec``. Kills the name not parsed (``parse(None)``), this
    process's own job or task refused (the job compared with ``==`` or a misspelt ``localhost``),
    the platform looked up under another name or none."""
    cpus = _jax_has("cpu")
    assert len(cpus) >= 2  # (conftest forces eight host devices)
    for k, dev in enumerate(cpus):
        for name in (f"cpu:{k}", canonical(f"cpu:{k}"), f"/device:CPU:{k}", parse(f"cpu:{k}")):
            assert jax_device(name) is dev


@pytest.mark.parametrize("name", ["/job:worker/task:0/device:CPU:0", "/job:localhost/task:1/device:CPU:0",
                                  "/job:worker/task:1/device:CPU:1", "/job:ps/task:2/device:CPU:0"])
def test_a_device_of_another_job_or_task_is_refused_with_its_full_name(name: str) -> None:
    """The law of one process: a device of another job *or* of another task of this job is not this
    process's, and the error names it in full and says how such devices run (``cluster=``). Kills
    the two conditions joined by ``and``, the task compared with ``==`` or with 1, and the message
    lost or its words mutated."""
    with pytest.raises(PlacementError) as e:
        jax_device(name)
    assert str(e.value) == (f"device {canonical(name)} belongs to another task; the fast partitioned executor "
                            "runs the devices of this process only (a cluster runs with cluster=...)")


def test_a_cpu_index_past_the_last_device_names_the_device_the_count_and_the_flag() -> None:
    """``cpu:n`` where the process has n CPU devices (the first index past the last) and any larger
    index are PlacementErrors naming the device and the count, with the hint that raises the count
    (the XLA flag, set before JAX is imported). Kills ``>`` for ``>=`` (an IndexError at exactly
    n), the hint lost, inverted or mutated, the platform compared in upper case or misspelt, and the
    message lost."""
    n = len(_jax_has("cpu"))
    for index in (n, n + 5):
        with pytest.raises(PlacementError) as e:
            jax_device(f"cpu:{index}")
        assert str(e.value) == f"device cpu:{index} does not exist in this process: JAX has {n} CPU device(s){_HINT}"


def test_a_missing_device_of_another_platform_has_no_cpu_hint() -> None:
    """A GPU (or TPU) index this process does not have is a PlacementError naming it and JAX's count
    of that platform (0 where JAX has no such platform), without the CPU flag's hint, which cannot
    make GPUs. Kills the hint given for every platform (``or True``, ``!=``) and its empty
    alternative mutated."""
    for platform in ("gpu", "tpu"):
        n = len(_jax_has(platform))
        with pytest.raises(PlacementError) as e:
            jax_device(f"{platform}:{n}")
        assert str(e.value) == (f"device {platform}:{n} does not exist in this process: JAX has {n} "
                                f"{platform.upper()} device(s)")


def test_process_devices_are_jaxs_devices_of_the_platform_in_any_case_and_none_for_an_unknown_one() -> None:
    """``process_devices(kind)`` is ``jax.devices(kind)`` for the platform ``kind`` names in any case
    (JAX knows its platforms by lower-case names only), and an empty list (not an error) for a
    platform JAX does not have. Kills the platform looked up in upper case or as None (JAX's default
    platform, which has devices)."""
    cpus = _jax_has("cpu")
    assert process_devices("cpu") == cpus and process_devices("CPU") == cpus
    assert process_devices("no_such_platform") == []
