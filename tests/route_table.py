"""The routes a test program runs on, in one table, and how the differential tests call them.

Why one module: the closed-form cases, TensorFlow's suite cases and the differential tests against
JAX each ran the same six routes (the reference interpreter, the small-step system, the fast
backend, the fast backend partitioned on one device, and over two devices with every node placed
round robin, so loops and their gradients span both: the partitioned reference and the fast
partitioned executor), each spelled out in its own file. A route added or renamed here reaches
every one of them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from long_run import LONG

import turnout as tn
from turnout.session import RunOptions


def round_robin(g: tn.Graph) -> dict[str, str]:
    """Every node of ``g`` requested on ``cpu:0`` and ``cpu:1`` in turn."""
    return {nd.name: f"cpu:{k % 2}" for k, nd in enumerate(g.nodes)}


ROUTES: dict[str, Callable[[tn.Graph], tn.Session]] = {
    "reference": lambda g: tn.Session(g),
    "smallstep": lambda g: tn.Session(g, backend="smallstep"),
    "fast": lambda g: tn.Session(g, backend="fast"),
    "fast, one device partitioned": lambda g: tn.Session(g, backend="fast", devices=["cpu:0"]),
    "reference, two devices": lambda g: tn.Session(g, devices=["cpu:0", "cpu:1"], requests=round_robin(g)),
    "fast, two devices": lambda g: tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"],
                                              requests=round_robin(g)),
}
#: the three executors, which every case of a case table runs on
EXECUTORS = ("reference", "smallstep", "fast")
#: the partitioned routes: one device through the partitioned backend, and two devices round robin
PARTITIONED = tuple(sorted(set(ROUTES) - set(EXECUTORS)))


def case_routes(names: Any, every_route: bool = LONG) -> list[tuple[str, str]]:
    """The (case, route) pairs a case table runs: each case on the three executors and on one of the
    partitioned routes, taken in turn down the sorted cases, so each partitioned route runs a third of
    every table and a case added shifts no more than the cases after it; with ``every_route`` (by
    default, in the long run: ``tests/long_run.py``), each case on every route.

    Why not every pair by default: a case on two devices costs several times its run on one (two
    programs compiled, Send/Recv between them), and the pairs left out say little the others do not:
    the routes share their lowering and their partitioner, and ``tests/test_routes.py`` forces every
    route on generated programs."""
    pairs = []
    for k, name in enumerate(sorted(names)):
        partitioned = PARTITIONED if every_route else (PARTITIONED[k % len(PARTITIONED)],)
        pairs += [(name, route) for route in sorted(EXECUTORS + partitioned)]
    return pairs


#: the routes the differential tests against JAX compare (the compiled ones and their oracle)
COMPILED_ROUTES = {k: ROUTES[k] for k in ("reference", "fast", "fast, one device partitioned")}
#: a bound on every loop of a case, so a wrong predicate fails instead of hanging
GUARD = RunOptions(max_iterations=10_000)
#: the wall-clock bound of an interpreted run that recomputes a loop under a budget (quadratic in its
#: trip count with few slots): RunOptions' 10 s default is tripped by a machine loaded with other
#: work, and a run that really does not end still fails, later
SLOW_RUN = 120.0


def run_on(route: str, g: tn.Graph, fetches: Any, feeds: Any = None) -> Any:
    """A run of ``g`` on ``route`` under ``GUARD``; the fast routes' warning that they run a program
    on the interpreter is allowed (some cases are such programs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return ROUTES[route](g).run(fetches, feeds, options=GUARD)


def run_strictly(route: str, g: tn.Graph, fetches: Any, feeds: Any) -> Any:
    """A run of ``g`` on ``route`` where any warning fails the test: a fallback to the interpreter, or
    numpy's warning from a kernel."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return ROUTES[route](g).run(fetches, feeds)


def in_jax(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn`` of ``args`` in JAX with 64-bit types, its results as numpy arrays."""
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):
        out = fn(*[jnp.asarray(a) for a in args])
        return jax.tree_util.tree_map(np.asarray, out)
