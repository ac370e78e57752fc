"""What a loop with a run-time trip count costs per iteration, against one of static length.

Why: on a GPU, a ``while_loop`` whose trip count is known only at run time ends each iteration by
copying its predicate to the host and waiting for it, unless XLA runs the loop as a command buffer
(``fast/xla_options.py``). Every loop of the paper's programs has such a trip count, so this cost
decides how close the fast backend's LSTM step comes to ``jax.grad`` of a ``scan``, whose length is
fixed when it is traced. This benchmark prints, per iteration (the difference between T = 500 and
T = 100, divided by 400):

- a forward LSTM loop in JAX, as a ``scan`` and as a ``while_loop`` of fed length;
- the LSTM training step of ``benchmarks/lstm.py`` on the fast backend and as ``jax.grad`` of a
  ``scan`` (batch 64, hidden 256).

Run it twice on a GPU to see the command buffers' effect: ``python benchmarks/loop_predicate.py``
and ``python benchmarks/loop_predicate.py --no-command-buffers`` (the fast backend made with
``FastOptions(gpu_command_buffers=None)``). On a CPU it runs too
(there are no command buffers, and the two loop forms cost about the same).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

H, B, LENGTHS = 256, 64, (100, 500)


def _best(f: Callable[[], Any], n: int = 5) -> float:
    f()
    f()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def _per_iteration(t: dict[int, float]) -> float:
    return (t[LENGTHS[1]] - t[LENGTHS[0]]) / (LENGTHS[1] - LENGTHS[0])


def forward_loops() -> dict[str, dict[int, float]]:
    """Seconds of a forward LSTM loop in JAX at each length: ``scan`` and ``while_loop`` of fed length."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.normal(size=(2 * H, 4 * H)).astype(np.float32) * 0.05)

    def cell(h: Any, c: Any, x: Any) -> tuple[Any, Any]:
        z = jnp.concatenate([x, h], 1) @ w
        i, f = jax.nn.sigmoid(z[:, :H]), jax.nn.sigmoid(z[:, H:2 * H])
        o, g = jax.nn.sigmoid(z[:, 2 * H:3 * H]), jnp.tanh(z[:, 3 * H:])
        c2 = f * c + i * g
        return o * jnp.tanh(c2), c2

    xs = jnp.asarray(rng.normal(size=(max(LENGTHS), B, H)).astype(np.float32))
    z0 = jnp.zeros((B, H), jnp.float32)

    @jax.jit
    def scan_fwd(xt: Any) -> Any:
        return jax.lax.scan(lambda hc, x: (cell(*hc, x), None), (z0, z0), xt)[0][0]

    @jax.jit
    def while_fwd(xt: Any, n: Any) -> Any:
        def body(s: Any) -> Any:
            i, h, c = s
            h, c = cell(h, c, xt[i])
            return i + 1, h, c

        return jax.lax.while_loop(lambda s: s[0] < n, body, (jnp.int32(0), z0, z0))[1]

    out: dict[str, dict[int, float]] = {"scan": {}, "while": {}}
    for t in LENGTHS:
        out["scan"][t] = _best(lambda: np.asarray(scan_fwd(xs[:t])))  # noqa: B023
        out["while"][t] = _best(lambda: np.asarray(while_fwd(xs, np.int32(t))))  # noqa: B023
    return out


def lstm_steps(command_buffers: Optional[str]) -> dict[str, dict[int, float]]:
    """Seconds of the LSTM training step at each length: Turnout's fast backend and JAX's scan."""
    import jax
    import jax.numpy as jnp

    import turnout as tn
    from benchmarks.lstm import build, jax_step

    m = build(B, H, H, max(LENGTHS))
    xs = jax.device_put(np.random.default_rng(1).normal(size=(max(LENGTHS), B, H)).astype(np.float32))
    sess = tn.Session(m["graph"], backend="fast", gpu_command_buffers=command_buffers)
    fetch = [m["loss"], *m["grads"]]
    step, _ = jax_step(H)
    params = (jnp.asarray(m["w0"]), jnp.zeros(4 * H, jnp.float32))
    out: dict[str, dict[int, float]] = {"turnout": {}, "jax": {}}
    for t in LENGTHS:
        feed = {m["xs"]: xs, m["T"]: t}
        out["turnout"][t] = _best(lambda: sess.run(fetch, feed))  # noqa: B023
        xt = xs[:t]
        out["jax"][t] = _best(lambda: [np.asarray(a) for a in jax.tree_util.tree_leaves(step(params, xt))])  # noqa: B023
    return out


def main() -> int:
    import jax

    from turnout.fast.xla_options import compiler_options
    from turnout.fast_options import GPU_COMMAND_BUFFERS

    command_buffers = None if "--no-command-buffers" in sys.argv[1:] else GPU_COMMAND_BUFFERS
    print(f"devices {jax.devices()}; the fast backend's XLA options: {compiler_options(command_buffers) or 'none'}")
    for what, res in (("JAX forward loop", forward_loops()), ("LSTM training step", lstm_steps(command_buffers))):
        for name, t in res.items():
            print(f"{what:>18} {name:>7}: T={LENGTHS[0]} {t[LENGTHS[0]] * 1e3:.2f} ms, "
                  f"T={LENGTHS[1]} {t[LENGTHS[1]] * 1e3:.2f} ms, {_per_iteration(t) * 1e6:.1f} us per iteration")
    return 0


if __name__ == "__main__":
    sys.exit(main())
