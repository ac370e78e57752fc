"""The fast backend's options are one frozen value (``turnout.fast_options.FastOptions``).

Why: options that were module constants (``INSIDE_STACK_BYTES``, ``FRAME_HEIGHT``, the command-buffer
list) changed every backend of the process when a test patched them, and options set on objects after
construction could disagree with what the backend was made with. These tests hold that the value is
checked once, by field name, that keywords and ``options=`` are one request, and that two backends
in one process keep their own values.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import turnout as tn
from turnout.fast_options import FRAME_HEIGHT, GPU_COMMAND_BUFFERS, FastOptions, fast_options

BAD = [
    ("stack_chunk", 0), ("stack_chunk", True), ("stack_chunk", 2.0),
    ("keep_stack_buffers", "no"), ("fallback", 1), ("precompile_staged", None), ("stack_ladder", "yes"),
    ("device_memory_limit", 0), ("device_memory_limit", False),
    ("inside_stack_bytes", -1), ("inside_stack_bytes", 1.5),
    ("frame_height", -1), ("frame_height", None),
    ("gpu_command_buffers", 7), ("gpu_command_buffers", ["WHILE"]),
    ("stack_first_rung", 0), ("stack_first_rung", 1.5), ("stack_first_rung", True),
    ("stack_rung_ratio", 1.0), ("stack_rung_ratio", 1.05), ("stack_rung_ratio", float("nan")),
    ("stack_rung_ratio", "2"), ("stack_rung_ratio", True),
    ("stack_descend_after", 0), ("stack_descend_after", 2.0), ("stack_descend_after", False),
    ("memory_platform", "gpus"), ("memory_platform", "CPU"), ("memory_platform", 0),
]


@pytest.mark.parametrize("field, value", BAD, ids=[f"{f}={v!r}" for f, v in BAD])
def test_a_bad_field_is_an_argument_error_naming_it(field: str, value: object) -> None:
    with pytest.raises(tn.ArgumentError, match=f"FastOptions.{field} must be"):
        FastOptions(**{field: value})


def test_the_defaults_are_the_measured_values() -> None:
    o = FastOptions()
    assert (o.stack_chunk, o.keep_stack_buffers, o.fallback, o.device_memory_limit) == (1024, True, True, None)
    assert (o.precompile_staged, o.stack_ladder) == (False, True)
    assert (o.stack_first_rung, o.stack_rung_ratio, o.stack_descend_after) == (128, 1.25, 8)
    assert (o.inside_stack_bytes, o.frame_height, o.gpu_command_buffers) == (None, FRAME_HEIGHT, GPU_COMMAND_BUFFERS)
    assert o.inside_limit("cpu") == 32 * 1024 and o.inside_limit("gpu") == 0 and o.memory_platform is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.stack_chunk = 8  # type: ignore[misc]


def test_keywords_and_options_are_one_request() -> None:
    base = FastOptions(stack_chunk=256, frame_height=0)
    assert fast_options(base, {}) is base
    assert fast_options(None, {"stack_chunk": 256, "frame_height": 0}) == base
    assert fast_options(base, {"frame_height": 3}) == FastOptions(stack_chunk=256, frame_height=3)
    assert fast_options(None, {"stack_chunk": np.int64(8)}).stack_chunk == 8
    assert type(fast_options(None, {"stack_chunk": np.int64(8)}).stack_chunk) is int
    assert fast_options(None, {"stack_rung_ratio": 2}) == FastOptions(stack_rung_ratio=2.0)  # 2 and 2.0: one plan key
    assert type(fast_options(None, {"stack_rung_ratio": np.float32(1.5)}).stack_rung_ratio) is float
    with pytest.raises(tn.ArgumentError, match=r"unknown options \['stack_chunks'\]"):
        fast_options(None, {"stack_chunks": 8})
    with pytest.raises(tn.ArgumentError, match="options must be a FastOptions"):
        fast_options({"stack_chunk": 8}, {})  # type: ignore[arg-type]


def test_two_backends_in_one_process_keep_their_own_options() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        n = tn.placeholder(tn.int32, shape=[], name="n")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * x), [tn.constant(0), x])
        (dx,) = tn.gradients(y, [x])
    small = tn.Session(g, backend="fast", options=FastOptions(stack_chunk=128, inside_stack_bytes=0))
    plain = tn.Session(g, backend="fast")
    ref = tn.Session(g)
    feed = {x: np.float32(1.01), n: 20}
    for sess in (small, plain):
        np.testing.assert_allclose(sess.run(dx, feed), ref.run(dx, feed), rtol=1e-5)
    assert all(p.options.inside_stack_bytes == 0 and not p.inside for p in small.backend._plans.values())
    assert all(p.options == FastOptions() for p in plain.backend._plans.values())
    assert small.backend.options.stack_chunk == 128 and plain.backend.options.stack_chunk == 1024


def test_the_memory_platform_is_what_both_fast_backends_plan_for() -> None:
    """``memory_platform`` names the platform the memory planner plans for, on one device and on the
    partitioned tiers alike (``memory_plan.backend_platform`` reads it, as ``tn.memory_report`` and
    ``Session.explain`` do): under a run's budget a GPU's plan swaps the loop where the CPU's
    recomputes it, and without the option each backend plans for its device's platform."""
    from graphs import power_loop

    from turnout.memory_plan import backend_platform

    g, x, n, y, dx = power_loop(swap_memory=False)
    feeds = {x: 1.0001, n: 300}
    for kw in ({}, {"devices": ["cpu:0", "cpu:1"]}):
        for platform, action in ((None, "recompute"), ("gpu", "swap")):
            sess = tn.Session(g, backend="fast", memory_platform=platform, **kw)
            assert backend_platform(sess.backend) == (platform or "cpu"), kw
            notes = " ".join(sess.explain([y, dx], feeds, memory_budget=1200).notes)
            assert f'loop "while": {action}' in notes and f"on {platform or 'cpu'}" in notes, (kw, platform, notes)
