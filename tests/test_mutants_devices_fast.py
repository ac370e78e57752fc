"""``devices/fast_executor.py`` where mutation testing found it unchecked (``python tools/mutation.py
--module devices/fast_executor.py``): tests that fail under a surviving mutant.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from graphs import host_shape_filled_on_the_second_device

import turnout as tn

D2 = ["cpu:0", "cpu:1"]


def test_a_value_known_on_the_host_stays_static_when_another_device_reads_it() -> None:
    """A shape computed on cpu:0 is a host (numpy) value, known while tracing; ``fill`` on cpu:1 needs
    it so. It must not be recorded as living on cpu:0 and copied to cpu:1 as a device array: the fill
    would then have a run-time shape, which the fast backend does not compile (``fallback=False``
    makes that an error instead of a quiet run on the reference executor)."""
    g, x, y = host_shape_filled_on_the_second_device()
    sess = tn.Session(g, backend="fast", devices=D2, fallback=False)
    got = sess.run(y, {x: np.zeros((2, 3), np.float32)})
    np.testing.assert_array_equal(got, np.full((4, 6), 1.5, np.float32))
    assert sess.last_result is not None and sess.last_result.stats["executor"] == "fast partitioned"
    assert sess.last_result.stats["segments_per_device"] == {tn.devices.parse(d).name: 1 for d in D2}


def test_each_devices_segments_run_on_that_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """A segment whose inputs are all known on the host still runs on its own device: the device's
    state (its error word) is committed there, so the compiled call goes where the state is. The
    fill on cpu:1 above has no device input at all; its outputs and state must be on JAX's cpu:1."""
    import jax

    from turnout.devices import plan_run

    runs: list[Any] = []
    init = plan_run.PlanRun.__init__

    def keep(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        runs.append(self)

    monkeypatch.setattr(plan_run.PlanRun, "__init__", keep)
    g, x, filled = host_shape_filled_on_the_second_device()
    with g.as_default(), tn.device("cpu:1"):
        y = filled * 2.0
    sess = tn.Session(g, backend="fast", devices=D2, fallback=False)
    np.testing.assert_array_equal(sess.run(y, {x: np.zeros((2, 3), np.float32)}), np.full((4, 6), 3.0))
    (run,) = runs
    cpus = jax.devices("cpu")
    for d, want in zip(D2, cpus[:2]):
        assert run.state[tn.devices.parse(d).name]["err"].devices() == {want}, d
