"""What the platform gives a loop that saves its values in host memory inside one compiled program.

A reverse-mode loop saves a value per iteration on a stack and pops them in reverse. Inside one
compiled program the stack can live in device memory (a carried buffer) or, on platforms with a host
memory kind (JAX's ``pinned_host``), in host memory: each push moves its value to the host and each
pop brings it back, with no driver between chunks. This benchmark measures four ways in plain JAX,
side by side in one run, for ``h <- tanh(h W)`` over ``T`` steps and its hand-written backward loop
(two sizes of ``h``): the stack on the device; in host memory, made inside the program; in host
memory, passed in as an argument; and in host memory reached through a device block of ``BLOCK``
entries (one copy per block each way instead of one per entry). It reports, per way and length, the
time per iteration (best of ``--repeat``), the compiled program's device and host temporary bytes
(XLA's memory analysis), and whether the gradient equals ``jax.grad`` of the same ``lax.scan``.

Why: this is the mechanism a swapping gradient stack uses inside the fused program
(``turnout.fast.stack_values``), and whether a platform honours it (moves the buffer, or drops the
annotation, as the CPU does, where host and device memory are one) decides what swapping buys there.
Run: ``python benchmarks/host_memory_loop.py [--quick]``; results go to
``benchmarks/results/host_memory_loop.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import SingleDeviceSharding

WAYS = ("device", "host_inside", "host_argument", "host_blocked")
#: entries per device block of the ``host_blocked`` way
BLOCK = 16


def _program(way: str, steps: int, shape: tuple[int, int]) -> Any:
    """The forward loop pushing ``h`` on a stack and the backward loop popping it, as one function of
    ``(W, h0, buf)`` giving ``dW`` of ``sum(h_T)``; ``buf`` is used only by ``host_argument``.
    ``host_blocked``: pushes fill a device block of ``BLOCK`` entries, copied to host memory when full;
    pops read it back, refilled from host memory a block at a time (one copy per ``BLOCK`` entries
    instead of one per entry)."""
    dev = jax.devices()[0]
    host = SingleDeviceSharding(dev, memory_kind="pinned_host")
    on_dev = SingleDeviceSharding(dev, memory_kind="device")
    to_host = (lambda x: jax.device_put(x, host)) if way != "device" else (lambda x: x)
    to_dev = (lambda x: jax.device_put(x, on_dev)) if way != "device" else (lambda x: x)
    rows = -(-steps // BLOCK) * BLOCK if way == "host_blocked" else steps

    def push(st: Any, i: Any, h: Any) -> Any:
        b, blk = st
        if way != "host_blocked":
            return lax.dynamic_update_slice(b, to_host(h[None]), (i, 0, 0)), blk
        blk = lax.dynamic_update_slice(blk, h[None], (i % BLOCK, 0, 0))
        b = lax.cond(i % BLOCK == BLOCK - 1,
                     lambda: lax.dynamic_update_slice(b, to_host(blk), (i - (BLOCK - 1), 0, 0)), lambda: b)
        return b, blk

    def pop(st: Any, ptr: Any) -> Any:  # the entry at ptr - 1
        b, blk = st
        if way != "host_blocked":
            return to_dev(lax.dynamic_slice(b, (ptr - 1, 0, 0), (1, *shape)))[0], st
        blk = lax.cond(ptr % BLOCK == 0,
                       lambda: to_dev(lax.dynamic_slice(b, (ptr - BLOCK, 0, 0), (BLOCK, *shape))), lambda: blk)
        return lax.dynamic_slice(blk, ((ptr - 1) % BLOCK, 0, 0), (1, *shape))[0], (b, blk)

    def f(w: Any, h0: Any, buf: Any) -> Any:
        if way != "host_argument":
            buf = to_host(jnp.zeros((rows, *shape), h0.dtype))
        st = (buf, jnp.zeros((BLOCK, *shape), h0.dtype))

        def fwd(c: Any) -> Any:
            i, h, st = c
            return i + 1, jnp.tanh(h @ w), push(st, i, h)

        i, h, st = lax.while_loop(lambda c: c[0] < steps, fwd, (0, h0, st))

        def bwd(c: Any) -> Any:
            i, hi, g, dw, st = c
            hp, st = pop(st, i)
            gz = g * (1 - hi * hi)
            return i - 1, hp, gz @ w.T, dw + hp.T @ gz, st

        _, _, _, dw, _ = lax.while_loop(lambda c: c[0] > 0, bwd, (i, h, jnp.ones_like(h0), jnp.zeros_like(w), st))
        return dw

    return jax.jit(f, donate_argnums=(2,) if way == "host_argument" else ())


def _reference(w: Any, h0: Any, steps: int) -> Any:
    def loss(w: Any) -> Any:
        h, _ = lax.scan(lambda h, _: (jnp.tanh(h @ w), None), h0, None, length=steps)
        return h.sum()
    return jax.jit(jax.grad(loss))(w)


def measure(steps: int, batch: int, hidden: int, repeat: int) -> list[dict[str, Any]]:
    """One row per way at one length: seconds per iteration, XLA's byte counts, agreement."""
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.normal(scale=0.5 / np.sqrt(hidden), size=(hidden, hidden)), jnp.float32)
    h0 = jnp.asarray(rng.normal(size=(batch, hidden)), jnp.float32)
    want = np.asarray(_reference(w, h0, steps))
    dev = jax.devices()[0]
    host = SingleDeviceSharding(dev, memory_kind="pinned_host")
    rows = []
    for way in WAYS:
        fn = _program(way, steps, (batch, hidden))

        def fresh() -> Any:
            return jax.device_put(np.zeros((steps, batch, hidden), np.float32), host)

        row: dict[str, Any] = {"way": way, "T": steps}
        try:
            compiled = fn.lower(w, h0, fresh()).compile()
            mem = compiled.memory_analysis()
            row["device_temp_bytes"] = getattr(mem, "temp_size_in_bytes", None)
            row["host_temp_bytes"] = getattr(mem, "host_temp_size_in_bytes", None)
            row["host_argument_bytes"] = getattr(mem, "host_argument_size_in_bytes", None)
            times = []
            got = None
            for _ in range(repeat):
                buf = fresh()
                t0 = time.perf_counter()
                got = fn(w, h0, buf).block_until_ready()
                times.append(time.perf_counter() - t0)
            row["us_per_iter"] = min(times) / steps * 1e6
            row["agree"] = bool(np.allclose(np.asarray(got), want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max())))
        except Exception as e:  # noqa: BLE001 - a platform that refuses a way is a result, recorded as such
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args()
    lengths = [100, 1000] if a.quick else [100, 1000, 10000]
    sizes = [(8, 32)] if a.quick else [(16, 64), (64, 256)]
    print(jax.devices(), jax.devices()[0].addressable_memories())
    rows = [{**r, "batch": b, "hidden": h} for b, h in sizes for t in lengths for r in measure(t, b, h, a.repeat)]
    print(f"h <- tanh(h W); best of {a.repeat}; {BLOCK} entries per block")
    print("| batch x hidden | way | T | us/iter | device temp MiB | host temp MiB | agree | error |")
    print("|---|---|---|---|---|---|---|---|")
    def mib(b: Any) -> str:
        return "-" if b is None else f"{b / 2**20:.2f}"

    for r in rows:
        us = f"{r['us_per_iter']:.2f}" if "us_per_iter" in r else "-"
        print(f"| {r['batch']} x {r['hidden']} | {r['way']} | {r['T']} | {us} | {mib(r.get('device_temp_bytes'))} | "
              f"{mib(r.get('host_temp_bytes'))} | {r.get('agree', '-')} | {r.get('error', '')} |")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "host_memory_loop.json"), "w") as fh:
        json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
