"""An LSTM training step (forward + gradient w.r.t. the weights) over a run-time sequence length.

Turnout: one graph with a ``while_loop`` whose trip count ``T`` is fed, over inputs padded to the
longest length; ``tn.gradients`` builds the backward loop with stacks, which the fast backend lowers
to chunked device buffers. It compiles once for every length. Baseline: ``jax.value_and_grad`` of a
``lax.scan`` over ``xs[:T]`` — the length is a static shape there, so every new length recompiles.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np

import turnout as tn
from benchmarks.common import timed, timed_pair


def build(batch: Optional[int], inp: int, hidden: int, t_max: int, seed: int = 0, swap_memory: bool = False,
          memory_budget: Optional[int] = None, bounded: bool = False) -> dict[str, Any]:
    """The LSTM training step's graph; ``batch`` None leaves the batch to the feed (as a TF1 model's
    placeholder of ``None`` rows does: the gradient stacks' shapes are then known only when a plan
    traces them); ``swap_memory`` and ``memory_budget`` are its loop's (see
    benchmarks/paper/memory.py and benchmarks/lstm_budget.py: with a budget, its gradient recomputes
    from checkpoints instead of keeping stacks). ``bounded``: the loop also says it runs at most
    ``t_max`` steps (``maximum_iterations``, as TensorFlow's ``dynamic_rnn`` does), which bounds the
    checkpoints a budget keeps."""
    rng = np.random.default_rng(seed)
    w0 = (rng.normal(size=(inp + hidden, 4 * hidden)) * 0.05).astype(np.float32)
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, [t_max, batch, inp], name="xs")
        T = tn.placeholder(tn.int32, [], name="T")
        W = tn.Variable(w0, name="W")
        b = tn.Variable(np.zeros(4 * hidden, np.float32), name="b")
        H = hidden
        # Read the weights once, outside the loop: they are then loop invariants (Enter(is_constant)),
        # which the backward loop accumulates into, instead of a ReadVariable per iteration whose value
        # the gradient saves on a stack every iteration (the fast backend holds that stack as one
        # value, ``turnout.fast.held``; the interpreters keep every push).
        w, bb = W.read(), b.read()

        def body(t, h, c, loss):
            z = tn.matmul(tn.concat([xs[t], h], 1), w) + bb
            i, f = tn.sigmoid(z[:, 0:H]), tn.sigmoid(z[:, H:2 * H])
            o, gg = tn.sigmoid(z[:, 2 * H:3 * H]), tn.tanh(z[:, 3 * H:])
            c2 = f * c + i * gg
            h2 = o * tn.tanh(c2)
            return t + 1, h2, c2, loss + tn.reduce_mean(h2 * h2)

        zeros = (tn.zeros([batch, hidden], tn.float32) if batch is not None
                 else tn.fill(tn.stack([tn.shape(xs)[1], tn.constant(hidden)]), 0.0))
        _, _, _, loss = tn.while_loop(lambda t, h, c, loss: t < T, body,
                                      [tn.constant(0), zeros, zeros, tn.constant(0.0)], swap_memory=swap_memory,
                                      memory_budget=memory_budget, name="lstm",
                                      maximum_iterations=t_max if bounded else None)
        dW, db = tn.gradients(loss, [W, b])
    return {"graph": g, "xs": xs, "T": T, "loss": loss, "grads": [dW, db], "w0": w0}


def jax_step(hidden: int) -> Any:
    import jax
    import jax.numpy as jnp

    traces = {"n": 0}

    def loss_fn(params: Any, xs: Any) -> Any:
        traces["n"] += 1
        W, b = params
        batch = xs.shape[1]

        def cell(carry: Any, x: Any) -> Any:
            h, c = carry
            z = jnp.concatenate([x, h], 1) @ W + b
            H = hidden
            i, f = jax.nn.sigmoid(z[:, :H]), jax.nn.sigmoid(z[:, H:2 * H])
            o, gg = jax.nn.sigmoid(z[:, 2 * H:3 * H]), jnp.tanh(z[:, 3 * H:])
            c2 = f * c + i * gg
            h2 = o * jnp.tanh(c2)
            return (h2, c2), jnp.mean(h2 * h2)

        zeros = jnp.zeros((batch, hidden), jnp.float32)
        _, losses = jax.lax.scan(cell, (zeros, zeros), xs)
        return jnp.sum(losses)

    return jax.jit(jax.value_and_grad(loss_fn)), traces


def run(quick: bool) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    # ``chunk``: the fast backend's stack capacity for the main rows (None: its default, 1024, so
    # every length fits on the device and each step is one fused call); ``swap_chunk``: a second
    # session with a small capacity, run at the longest length, to show the cost of swapping stack
    # chunks to host memory (the staged path: its ``host_stack_limit`` is the chunk too, or the fused
    # call would keep the swapping loop's stacks in host memory whole).
    if quick:
        batch, inp, hidden, lengths, repeat, chunk, swap_chunk = 16, 32, 32, [10, 20, 50], 9, None, 8
    else:
        batch, inp, hidden, lengths, repeat, chunk, swap_chunk = 64, 256, 256, [100, 200, 500, 1000], 5, None, 128
    t_max = max(lengths)
    m = build(batch, inp, hidden, t_max)
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(t_max, batch, inp)).astype(np.float32)
    # Both sides get the inputs already in device memory: the baseline's ``xs[:T]`` is placed before
    # timing, and Turnout is fed a jax.Array of the padded sequence (the session reads it through a
    # host view and the fast backend's device_put aliases it; a numpy feed would add a host-to-device
    # copy of the whole padded sequence to every step).
    xs_dev = jax.device_put(xs)
    opts: dict[str, Any] = {} if chunk is None else {"stack_chunk": chunk}
    sess = tn.Session(m["graph"], backend="fast", **opts)
    step, traces = jax_step(hidden)
    params = (jnp.asarray(m["w0"]), jnp.zeros(4 * hidden, jnp.float32))
    rows = []
    compiles0 = None
    for T in lengths:
        print(f"  lstm T={T}", flush=True)
        fetch = [m["loss"], *m["grads"]]
        feed = {m["xs"]: xs_dev, m["T"]: T}
        t0 = time.perf_counter()
        got = sess.run(fetch, feed)
        first = time.perf_counter() - t0
        if compiles0 is None:
            compiles0 = sess.backend.compile_count
        xs_t = jnp.asarray(xs[:T])
        tt, jt = timed_pair(lambda: sess.run(fetch, feed),  # noqa: B023
                            lambda: [np.asarray(a) for a in jax_tree_leaves(step(params, xs_t))],  # noqa: B023
                            repeat, block_s=0.05 if quick else 0.0)
        tt["first_s"] = first
        # peak memory growth per step: the process's peak RSS before and after two more Turnout steps
        rss0 = _max_rss()
        for _ in range(2):
            sess.run(fetch, feed)
        rss_growth = (_max_rss() - rss0) / 2
        stats = sess.last_result.stats
        (jl, (jdw, jdb)) = step(params, xs_t)
        agree = bool(np.allclose(got[0], jl, rtol=2e-3) and np.allclose(got[1], jdw, rtol=2e-2, atol=1e-5))
        rows.append({
            "T": T, "fast": tt, "jax_scan": jt, "fast_over_jax": tt["median_s"] / jt["median_s"], "agree": agree,
            "stack_chunks_swapped": stats["stack_chunks_swapped"],
            "peak_device_stack_bytes": stats["peak_device_stack_bytes"],
            "peak_host_stack_bytes": stats["peak_host_stack_bytes"],
            "max_rss_growth_bytes_per_step": rss_growth,
        })
    recompiles = sess.backend.compile_count - (compiles0 or 0)
    # the same step with a small stack capacity: device stack memory bounded by ``swap_chunk``
    T = t_max
    print(f"  lstm T={T} stack_chunk={swap_chunk}", flush=True)
    # the same model with swap_memory=True, so that full chunks go to host memory (without it they
    # would stay on the device, see docs/fast_backend.rst)
    ms = build(batch, inp, hidden, t_max, swap_memory=True)
    small = tn.Session(ms["graph"], backend="fast", stack_chunk=swap_chunk, host_stack_limit=swap_chunk)
    fetch, feed = [ms["loss"], *ms["grads"]], {ms["xs"]: xs_dev, ms["T"]: T}
    got = small.run(fetch, feed)
    st = timed(lambda: small.run(fetch, feed), repeat)
    stats = small.last_result.stats
    swap = {"T": T, "stack_chunk": swap_chunk, "fast": st,
            "fast_over_jax": st["median_s"] / rows[-1]["jax_scan"]["median_s"],
            "agree": bool(np.allclose(got[0], jl, rtol=2e-3) and np.allclose(got[1], jdw, rtol=2e-2, atol=1e-5)),
            "stack_chunks_swapped": stats["stack_chunks_swapped"],
            "peak_device_stack_bytes": stats["peak_device_stack_bytes"],
            "peak_host_stack_bytes": stats["peak_host_stack_bytes"]}
    return {
        "name": "lstm", "batch": batch, "input": inp, "hidden": hidden, "lengths": lengths,
        "stack_chunk": sess.backend.options.stack_chunk, "rows": rows, "swapping": swap,
        "fast_recompiles_after_first_length": recompiles,
        "jax_traces": traces["n"],
    }


def _max_rss() -> int:
    """The process's peak resident memory so far, in bytes (Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def jax_tree_leaves(x: Any) -> list[Any]:
    import jax

    return jax.tree_util.tree_leaves(x)
