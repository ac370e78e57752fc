"""A trivial-body loop: ``i += 1; x = x * 0.999 + 1`` for a run-time N.

Measures the per-iteration overhead of the fast backend's lowering against the same loop written
by hand as ``jax.jit(lax.while_loop)``; both receive N as a run-time value, so neither recompiles for
a new N. The reference interpreter runs the same graph with a small N and reports firings per second.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import turnout as tn
from benchmarks.common import timed, timed_pair


def build() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        _, x = tn.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 0.999 + 1.0),
                             [tn.constant(0), tn.constant(0.0)])
    return g, n, x


def run(quick: bool) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    N = 100_000 if quick else 1_000_000
    repeat = 3 if quick else 5
    g, n, x = build()
    sess = tn.Session(g, backend="fast")

    @jax.jit
    def hand(nv: Any) -> Any:
        return jax.lax.while_loop(lambda c: c[0] < nv, lambda c: (c[0] + 1, c[1] * jnp.float32(0.999) + 1.0),
                                  (jnp.int32(0), jnp.float32(0.0)))[1]

    fast, jx = timed_pair(lambda: sess.run(x, {n: N}), lambda: np.asarray(hand(jnp.int32(N))), repeat)
    got = float(sess.run(x, {n: N}))
    want = float(hand(jnp.int32(N)))

    ref_n = 200
    ref = tn.Session(g)
    r = timed(lambda: ref.run(x, {n: ref_n}), 1)
    firings = ref.last_result.stats.get("firings")
    return {
        "name": "loop_trivial", "N": N,
        "fast": fast, "jax_while_loop": jx,
        "fast_over_jax": fast["median_s"] / jx["median_s"],
        "fast_ns_per_iter": 1e9 * fast["median_s"] / N, "jax_ns_per_iter": 1e9 * jx["median_s"] / N,
        "agree": bool(abs(got - want) <= 1e-3 * abs(want)),
        "reference": {"N": ref_n, "seconds": r["median_s"], "firings": firings,
                      "firings_per_s": (firings / r["median_s"]) if firings else None},
    }
