"""A swapping loop's gradient stacks in host memory inside the fused call (``Plan.host``).

A loop that swaps (``swap_memory=True``, or a memory plan that swaps it) keeps its stacks in the
device's host memory inside the one compiled call: each push moves its value there and each pop brings
it back (``fast.stack_values.to_host_memory``). The device then holds none of its stacks, so the call is not
bounded by ``stack_chunk``: a plan whose every stack swaps climbs its ladder up to
``host_stack_limit`` entries, and only a run past that takes the staged path, which moves chunks.

On the CPU, where host and device memory are one, JAX drops the moves: what is checked here is that
the runs take that route, give the reference's values, and are counted where they live (the
backend's own accounting, ``tn.memory_report``), on chosen programs and on generated ones with
gradients, every loop built swapping. Whether a GPU really moves the buffer is checked
there (``test_a_gpu_keeps_the_stacks_out_of_device_memory``) and measured by
``benchmarks/host_memory_loop.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from typing import Any

import graphs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from programs import assert_same_outcome, run_outcome, to_source
from strategies import float_programs, gradient_graph, inputs_for

import turnout as tn
from turnout.errors import ResourceExhaustedError
from turnout.session import RunOptions

jax = pytest.importorskip("jax")

CHUNK = 32


def power(steps: int) -> list[float]:
    """``y = x**n`` and ``dy/dx`` at ``x = 1.0001``: what ``graphs.power_loop`` computes."""
    return [1.0001**steps, steps * 1.0001 ** (steps - 1)]


def test_a_swapping_loop_runs_in_one_call_past_the_chunk_with_nothing_on_the_device() -> None:
    g, x, n, y, dx = graphs.power_loop(swap_memory=True)
    sess = tn.Session(g, backend="fast", stack_chunk=CHUNK)
    for steps in (5, CHUNK * 10, CHUNK * 40):
        np.testing.assert_allclose(sess.run([y, dx], {x: 1.0001, n: steps}), power(steps), rtol=1e-9)
        stats = sess.last_result.stats
        assert stats["fused"] and stats["stack_chunks_swapped"] == 0
        assert stats["stack_mark"] == steps and stats["stack_capacity"] >= steps
        (rec,) = tn.memory_report(sess).records
        assert rec.swap_memory and rec.peak_device_bytes == rec.device_bytes == 0
        assert rec.host_bytes == stats["stack_capacity"] * 8  # one float64 per entry, no index record
        assert rec.chunks_to_host == rec.chunks_from_host == 0
    # its ladder goes past the chunk, up to host_stack_limit
    assert stats["stack_ladder"][-1] == tn.FastOptions().host_stack_limit
    what = sess.explain([y, dx], {x: 1.0001, n: 5}).steps[0].what
    assert "loop(s) 'while' in host memory" in what and f"{tn.FastOptions().host_stack_limit} entries" in what


def test_where_host_memory_is_the_devices_the_stacks_are_kept_between_runs() -> None:
    """The CPU's device memory is host memory (``stack_values.host_apart``): a swapping loop's large
    stacks are kept between runs there, as any stack of their size, since making them at every run
    costs the allocation; where host memory is apart they are made in it inside every call, and
    nothing is held."""
    from turnout.fast import stacks as stk

    assert not stk.host_apart("cpu") and stk.host_apart("gpu") and stk.host_apart("tpu")
    g, x, n, y, dx = graphs.power_loop(swap_memory=True)
    sess = tn.Session(g, backend="fast")
    np.testing.assert_allclose(sess.run([y, dx], {x: 1.0001, n: 5000}), power(5000), rtol=1e-9)
    held = sess.backend.held_bytes()
    assert held >= 5000 * 8 if jax.default_backend() == "cpu" else held == 0
    assert sess.last_result.stats["peak_device_stack_bytes"] == 0  # (counted as host memory either way)


def test_past_host_stack_limit_the_staged_path_swaps_chunks() -> None:
    g, x, n, y, dx = graphs.power_loop(swap_memory=True)
    sess = tn.Session(g, backend="fast", stack_chunk=CHUNK, host_stack_limit=4 * CHUNK)
    np.testing.assert_allclose(sess.run([y, dx], {x: 1.0001, n: 3 * CHUNK}), power(3 * CHUNK), rtol=1e-9)
    assert sess.last_result.stats["fused"] and sess.last_result.stats["stack_ladder"][-1] == 4 * CHUNK
    np.testing.assert_allclose(sess.run([y, dx], {x: 1.0001, n: 5 * CHUNK}), power(5 * CHUNK), rtol=1e-9)
    stats = sess.last_result.stats
    assert not stats["fused"] and stats["stack_chunks_swapped"] > 0
    assert 0 < stats["peak_device_stack_bytes"] <= 2 * CHUNK * (8 + 4)  # the chunk filling + the one in flight
    with pytest.raises(ValueError, match="host_stack_limit"):
        tn.Session(g, backend="fast", host_stack_limit=0)


def test_a_plan_with_a_loop_that_keeps_its_stacks_climbs_no_further_than_the_chunk() -> None:
    """One loop swaps, the one inside it does not: the swapping loop's stacks live in host memory in
    the fused call, the other's on the device, and the ladder stops at the chunk, which bounds them.
    A cond in the swapping loop's body pushes under its branches (host stacks through a ``lax.cond``)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")

        def body(i: Any, y: Any) -> Any:
            _, z = tn.while_loop(lambda j, v: j < 2, lambda j, v: (j + 1, v * x), [tn.constant(0), y], name="inner")
            z = tn.cond(tn.equal(tn.mod(i, 2), 0), lambda: tn.sin(z), lambda: tn.cos(z) * x)
            return i + 1, tn.sin(z)

        _, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), x], swap_memory=True, name="outer")
        (dx,) = tn.gradients(y, [x])
    ref = tn.Session(g)
    sess = tn.Session(g, backend="fast", stack_chunk=CHUNK)
    for steps in (3, 12):
        np.testing.assert_allclose(sess.run([y, dx], {x: 0.9, n: steps}), ref.run([y, dx], {x: 0.9, n: steps}),
                                   rtol=1e-12)
        assert sess.last_result.stats["fused"]
    assert sess.last_result.stats["stack_ladder"][-1] == CHUNK
    rep = tn.memory_report(sess)
    (outer,), (inner,) = rep.loop("outer"), rep.loop("outer/body/inner")
    assert outer.host_bytes > 0 and outer.peak_device_bytes < outer.host_bytes  # (index records stay)
    assert inner.host_bytes == 0 and inner.device_bytes > 0


def test_a_swapping_loop_fits_a_device_cap_its_stacks_would_not() -> None:
    """``device_memory_limit`` counts the device: a cap below one rung of the unswapped loop's stack
    stops that loop, while the swapping loop runs in one call within it."""
    limit = 16 * 8
    g, x, n, y, dx = graphs.power_loop(swap_memory=False)
    with pytest.raises(ResourceExhaustedError, match="device_memory_limit"):
        tn.Session(g, backend="fast", device_memory_limit=limit).run([y, dx], {x: 1.0001, n: 500})
    g, x, n, y, dx = graphs.power_loop(swap_memory=True)
    sess = tn.Session(g, backend="fast", device_memory_limit=limit)
    np.testing.assert_allclose(sess.run([y, dx], {x: 1.0001, n: 500}), power(500), rtol=1e-9)
    assert sess.last_result.stats["fused"] and sess.last_result.stats["peak_device_stack_bytes"] == 0


def test_a_loop_a_memory_plan_swaps_keeps_its_stacks_in_host_memory() -> None:
    """On a platform with a host memory space the planner swaps a loop over a run's budget; its
    stacks then live in host memory in the fused call (here the plan is made for a GPU,
    ``FastOptions.memory_platform``: the CPU has no such space, so its planner recomputes instead)."""
    g, x, n, y, dx = graphs.power_loop(swap_memory=False)
    sess = tn.Session(g, backend="fast", stack_chunk=CHUNK, memory_platform="gpu")
    budget = 4 * CHUNK * (8 + 4)
    np.testing.assert_allclose(sess.run([y, dx], {x: 1.0001, n: 300}, memory_budget=budget), power(300), rtol=1e-9)
    stats = sess.last_result.stats
    assert stats["fused"] and stats["peak_device_stack_bytes"] == 0 and stats["stack_chunks_swapped"] == 0
    assert "swap" in tn.memory_report(sess).summary()
    what = sess.explain([y, dx], {x: 1.0001, n: 300}, memory_budget=budget).steps[0].what
    assert "loop(s) 'while' in host memory" in what


def test_stacks_whose_shapes_only_the_trace_knows_are_made_in_host_memory() -> None:
    """A batch of ``None`` rows: the stacks are made at their first push, inside the loop's carry
    (``tracing.reconcile``), in host memory like the static ones; runs within and past the chunk,
    repeated ones on the lane, all in one call, all the reference's values. Regression: the carry's
    zeros were made on the device, and the trace refused the host-memory push into them."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 3], name="x")
        w = tn.placeholder(tn.float32, [3, 3], name="w")
        n = tn.placeholder(tn.int32, [], name="n")
        _, h = tn.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tn.tanh(tn.matmul(h, w))), [tn.constant(0), x],
                             swap_memory=True)
        loss = tn.reduce_sum(h * h)
        gx, gw = tn.gradients(loss, [x, w])
    rng = np.random.default_rng(0)
    wv = rng.standard_normal((3, 3)).astype(np.float32) * 0.5
    ref = tn.Session(g)
    sess = tn.Session(g, backend="fast", stack_chunk=CHUNK)
    routes = []
    for rows, steps in ((4, 6), (4, 300), (4, 300), (4, 300), (7, 5)):
        feed = {x: rng.standard_normal((rows, 3)).astype(np.float32), w: wv, n: steps}
        for a, b in zip(sess.run([loss, gx, gw], feed), ref.run([loss, gx, gw], feed), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        stats = sess.last_result.stats
        assert stats["fused"] and stats["peak_device_stack_bytes"] == 0 and stats["peak_host_stack_bytes"] > 0
        routes.append(stats["route"])
    assert "lane" in routes


def test_a_host_stack_pushes_and_pops_what_a_device_stack_does() -> None:
    """The stack value itself, inside one jitted function: the same entries and pointers whether its
    buffer lives on the device or in host memory, its pops in reverse order of the pushes."""
    from turnout.fast import stacks as stk

    def run(host: bool) -> Any:
        def f(xs: Any) -> Any:
            s = stk.StackValue(8, np.float32, host=host)
            for t in range(5):
                s, _ = stk.push(s, np.int32(t), xs[t], free=True)
            outs = []
            for t in reversed(range(5)):
                s, v, ok, match = stk.pop(s, np.int32(t), free=True)
                outs.append(v * ok * match)
            return jax.numpy.stack(outs), s.ptr, s.buf, outs[0]

        return jax.jit(f)(np.arange(10, dtype=np.float32).reshape(5, 2))

    (dev, p_dev, _, _), (host, p_host, buf, popped) = run(False), run(True)
    np.testing.assert_array_equal(np.asarray(dev), np.arange(10, dtype=np.float32).reshape(5, 2)[::-1])
    np.testing.assert_array_equal(np.asarray(host), np.asarray(dev))
    assert int(p_dev) == int(p_host) == 0
    # where it lives (JAX keeps the memory kinds of a program's results on the CPU too)
    assert buf.sharding.memory_kind == "pinned_host" and popped.sharding.memory_kind == "device"


@settings(max_examples=max(1, settings.default.max_examples // 6))
@given(st.data())
def test_swapping_generated_programs_give_the_reference_gradients(data: st.DataObject) -> None:
    """Generated programs with gradients, every loop and scan built with ``swap_memory=True``: the
    fused call with every stack in host memory, and the staged path past a ``host_stack_limit`` of
    one entry (every chunk of one entry swapped out and back), each the reference's values."""
    p = data.draw(float_programs(max_depth=2))
    b, grads = gradient_graph(p, swap_memory=True)
    feeds = b.feed_dict(data.draw(inputs_for(p, wide=False)))
    guard = RunOptions(max_iterations=1_000)
    want = run_outcome(lambda: tn.Session(b.graph).run(grads, feeds, options=guard))
    for opts in ({}, {"stack_chunk": 1, "host_stack_limit": 1, "stack_ladder": False}):
        def run(opts: dict[str, Any] = opts) -> list[Any]:
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)  # (no fallback to the interpreter)
                sess = tn.Session(b.graph, backend="fast", **opts)
                got = list(sess.run(grads, feeds, options=guard))
            records = tn.memory_report(sess).records
            assert all(r.swap_memory for r in records), records
            if not opts:  # the fused call: every stack buffer in host memory
                assert all(r.host_bytes > 0 for r in records), records
            return got

        assert_same_outcome(lambda: _given(want), run, f"{to_source(p)}\n{opts}")


def _given(outcome: tuple[Any, Any]) -> list[Any]:
    values, err = outcome
    if err is not None:
        raise err("the reference run raised this")
    return list(values)


_PEAK = """
import sys; sys.path.insert(0, {tests!r})
import jax, numpy as np, turnout as tn
g = tn.Graph()
with g.as_default():
    x = tn.placeholder(tn.float32, [256, 256], name="x")
    n = tn.placeholder(tn.int32, [], name="n")
    _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, tn.tanh(y) * 0.9), [tn.constant(0), x],
                         swap_memory={swap})
    (dx,) = tn.gradients(tn.reduce_sum(y), [x])
sess = tn.Session(g, backend="fast")
sess.run(dx, {{x: np.ones((256, 256), np.float32), n: 800}})
print(jax.devices()[0].memory_stats()["peak_bytes_in_use"])
"""


@pytest.mark.skipif(jax.default_backend() == "cpu", reason="the CPU's host and device memory are one")
def test_a_gpu_keeps_the_stacks_out_of_device_memory() -> None:
    """Where the platform has a host memory space, the stacks of a swapping loop (800 entries of
    256 KiB: 200 MiB) take no device memory: each side runs in a fresh process, whose peak device
    bytes the allocator reports."""
    tests = os.path.dirname(os.path.abspath(__file__))
    peaks = {}
    for swap in (False, True):
        env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(_PEAK.format(tests=tests, swap=swap))],
                             capture_output=True, text=True, env=env, timeout=300, check=True)
        peaks[swap] = int(out.stdout.split()[-1])
    assert peaks[False] > 200 * 2**20
    assert peaks[True] < peaks[False] - 150 * 2**20, peaks
