"""Hypothesis profiles for the whole test suite.

- ``ci`` (the default): derandomized, so every run of the default suite tries the same examples and a
  failure reproduces; few examples, no deadline (the first run of a graph pays for validation and
  planning), and the ``too_slow`` health check off (generated programs are deliberately nested).
- ``dev``: random, six times the examples, prints statistics-friendly output; for local exploration.
- ``nightly``: random, thousands of examples; select it with ``TURNOUT_HYPOTHESIS_PROFILE=nightly``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

# Several host devices for the partitioned fast executor's tests: XLA reads this flag once, when jax is
# first imported, so it is set here, before any test module imports jax. Device 0 stays the default, so
# unpartitioned tests run exactly as on a one-device process.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# XLA's compilations, kept for one test file at a time: a file builds the same program many times (a
# case on each route, a plan rebuilt by a later test), and a compilation read back from the cache is
# the same executable, for a fraction of the time. Why per file: a file runs whole, in its own order,
# on one worker (``--dist loadfile``), so what it reads back does not depend on which files a worker
# ran before it, and a run repeats exactly. Each compile request still reaches JAX's compiler front
# end, so what a test counts of traces and compile requests is unchanged
# (``tests/test_fast_no_hidden_recompile.py`` counts a read from the cache as a compilation).


def pytest_configure(config: pytest.Config) -> None:
    """Cache every compilation however short (JAX's defaults keep only those over a second)."""
    import jax

    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@pytest.fixture(autouse=True, scope="module")
def _xla_cache_of_this_file() -> Iterator[None]:
    """A fresh persistent compilation cache for the test file, removed when the file ends."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    where = tempfile.mkdtemp(prefix="turnout-tests-xla-")
    jax.config.update("jax_compilation_cache_dir", where)
    compilation_cache.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_compilation_cache_dir", None)
        compilation_cache.reset_cache()
        shutil.rmtree(where, ignore_errors=True)


# tests/ holds shared helper modules (programs.py, strategies.py) imported by bare name.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from example_counts import CI_EXAMPLES  # noqa: E402

_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile("ci", derandomize=True, max_examples=CI_EXAMPLES, deadline=None, suppress_health_check=_SLOW,
                          print_blob=True)
settings.register_profile("dev", max_examples=300, deadline=None, suppress_health_check=_SLOW, print_blob=True)
settings.register_profile("nightly", max_examples=5000, deadline=None, suppress_health_check=_SLOW,
                          print_blob=True)
settings.load_profile(os.environ.get("TURNOUT_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(params=["reference", "fast"])
def backend(request: pytest.FixtureRequest) -> str:
    """The backend a closed-form test runs on: every such test runs on both, so the fast (JAX) backend
    is held to the reference interpreter's expectations (and error types) case by case. A test that
    inspects reference-only machinery (traces, firing counts, schedulers) does not take this fixture."""
    return request.param


@pytest.fixture
def switches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The branch counts of every ``lax.switch`` the fast backend emits while the test runs."""
    import jax

    seen: list[int] = []
    orig = jax.lax.switch

    def counting(index: Any, branches: Any, *operands: Any) -> Any:
        seen.append(len(branches))
        return orig(index, branches, *operands)

    monkeypatch.setattr(jax.lax, "switch", counting)
    return seen
