"""The options the fast backend gives XLA (``fast/xla_options.py``): command buffers for loops and
conditionals on a GPU, nothing on a CPU, and never over a user's own choice.

Why these tests: the options change how XLA runs every loop on a GPU (the predicate tested on the
device instead of on the host), and CI has no GPU. What can be checked here is which options are
asked for on which platform and under which environment, and that every kind of compiled function
the backend makes (the one-call ``Direct`` function, the fused stage, a driven loop's functions)
is given them and hands them to XLA. The GPU figures are in ``docs/benchmarks.rst``.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

import turnout as tn
from turnout.fast import plan as plan_mod
from turnout.fast.xla_options import compiler_options, wanted
from turnout.fast_options import GPU_COMMAND_BUFFERS


def test_command_buffers_are_asked_for_on_a_gpu_only() -> None:
    assert wanted("cpu", environ={}) == {}
    assert wanted("gpu", environ={}) == {"xla_gpu_enable_command_buffer": GPU_COMMAND_BUFFERS}
    assert "WHILE" in GPU_COMMAND_BUFFERS.split(",") and "CONDITIONAL" in GPU_COMMAND_BUFFERS.split(",")


def test_the_user_s_choice_is_left_alone() -> None:
    """Set in ``XLA_FLAGS`` (XLA's own choice) or turned off by the option: nothing is asked."""
    assert wanted("gpu", GPU_COMMAND_BUFFERS, {"XLA_FLAGS": "--xla_gpu_enable_command_buffer=FUSION"}) == {}
    assert wanted("gpu", None, {}) == wanted("gpu", "", {}) == {}
    assert wanted("gpu", "FUSION,WHILE", {}) == {"xla_gpu_enable_command_buffer": "FUSION,WHILE"}


def test_the_option_turns_them_off_per_backend() -> None:
    """``gpu_command_buffers=None`` is the backend's option, not the process's: the plans of that
    backend ask nothing, another backend in the same process still asks the default."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        y = x + 1.0
    off = tn.Session(g, backend="fast", gpu_command_buffers=None)
    on = tn.Session(g, backend="fast")
    assert off.backend.options.gpu_command_buffers is None
    assert on.backend.options == tn.FastOptions()
    for sess in (off, on):
        np.testing.assert_array_equal(sess.run(y, {x: np.ones(3, np.float32)}), np.full(3, 2.0, np.float32))
    (plan,) = off.backend._plans.values()
    assert plan.options.gpu_command_buffers is None


def test_the_process_environment_is_read_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_command_buffer=")
    assert wanted("gpu") == {}
    monkeypatch.delenv("XLA_FLAGS")
    assert wanted("gpu") == {"xla_gpu_enable_command_buffer": GPU_COMMAND_BUFFERS}


def test_this_process_asks_what_its_platform_wants() -> None:
    got = compiler_options()
    assert got in ({}, wanted(jax.default_backend()))
    if jax.default_backend() == "cpu":
        assert got == {}


def _programs() -> list[tuple[str, Any]]:
    """(kind, a function that runs a fresh program of that kind on the fast backend)."""
    def direct() -> Any:
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.float32, [3], name="x")
            y = x * 2.0 + 1.0
        return tn.Session(g, backend="fast").run(y, {x: np.ones(3, np.float32)})

    def looped(**opts: Any) -> Any:
        g = tn.Graph()
        with g.as_default():
            x = tn.placeholder(tn.float32, [], name="x")
            _, h = tn.while_loop(lambda i, h: i < 5, lambda i, h: (i + 1, tn.tanh(h * x + 0.5)),
                                 [tn.constant(0), tn.constant(0.1)])
            (dx,) = tn.gradients(h, [x])
        return tn.Session(g, backend="fast", **opts).run(dx, {x: np.float32(0.7)})

    return [("direct", direct), ("fused", looped),
            ("staged", lambda: looped(stack_chunk=2, stack_ladder=False))]


def test_every_compiled_function_is_given_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ``jax.jit`` of a plan asks for the options: the Direct function, the fused stage, and the
    staged path's segments and driven loops (more functions than the fused attempt alone)."""
    asked: list[int] = []

    def recorded(command_buffers: Any) -> dict[str, Any]:
        asked.append(1)
        return {}

    monkeypatch.setattr(plan_mod, "compiler_options", recorded)
    counts = {}
    for kind, run in _programs():
        asked.clear()
        run()
        counts[kind] = len(asked)
    assert counts["direct"] >= 1 and counts["fused"] >= 1
    assert counts["staged"] >= counts["fused"] + 3  # a driven loop's init, chunk and finish


def test_the_options_reach_xla(monkeypatch: pytest.MonkeyPatch) -> None:
    """An option XLA refuses fails the compile: the backend's functions hand the options over."""
    monkeypatch.setattr(plan_mod, "compiler_options",
                        lambda command_buffers: {"xla_gpu_enable_command_buffer": "NOT_A_COMMAND_KIND"})
    for _, run in _programs()[:2]:
        with pytest.raises(Exception, match="NOT_A_COMMAND_KIND"):
            run()


def test_the_choice_is_checked_once_by_compiling_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a GPU would be, a list is tried on a trivial function first: taken when XLA accepts it
    (this CPU build parses the option), dropped when it refuses a kind, and checked once per list."""
    from turnout.fast import xla_options

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    xla_options.accepted.cache_clear()
    try:
        assert xla_options.compiler_options() == {}  # (this process's platform: the CPU asks for nothing)
        assert xla_options.compiler_options(platform="gpu") == {"xla_gpu_enable_command_buffer": GPU_COMMAND_BUFFERS}
        assert xla_options.compiler_options("FUSION,NOT_A_COMMAND_KIND", "gpu") == {}
        assert xla_options.compiler_options(None, "gpu") == {}
        before = xla_options.accepted.cache_info()
        assert xla_options.compiler_options(platform="gpu") == {"xla_gpu_enable_command_buffer": GPU_COMMAND_BUFFERS}
        assert xla_options.compiler_options("FUSION,NOT_A_COMMAND_KIND", "gpu") == {}
        after = xla_options.accepted.cache_info()
        assert (after.misses, after.hits) == (before.misses, before.hits + 2)  # decided: no compile
    finally:
        xla_options.accepted.cache_clear()  # what was decided as if on a GPU is not this process's
