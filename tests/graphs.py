"""Small graphs that several test files build alike (imported by bare name: conftest puts tests/ on
sys.path, as for programs.py and strategies.py)."""

from __future__ import annotations

from typing import Any, NamedTuple

import turnout as tn


class PowerLoop(NamedTuple):
    g: tn.Graph
    x: tn.Tensor
    n: tn.Tensor
    y: tn.Tensor
    dx: tn.Tensor


def power_loop(swap_memory: bool = False) -> PowerLoop:
    """``y = x**n`` by a while_loop whose trip count ``n`` is fed at run time, and ``dy/dx = n x**(n-1)``:
    one stacked value per iteration, the smallest gradient that exercises the stacks. ``swap_memory`` is
    the loop's (where full stack chunks go on the fast backend)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * x), [tn.constant(0), tn.ones_like(x)],
                             swap_memory=swap_memory)
        (dx,) = tn.gradients(y, [x])
    return PowerLoop(g, x, n, y, dx)


def nested_loops(depth: int) -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    """``benchmarks/compile_time.py``'s nest: ``depth`` while loops named ``level{depth}`` (outermost)
    to ``level1``, each running ``trips`` iterations (fed), around ``v * 1.5 + 1.0``. Returns (graph,
    x, trips, y)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        trips = tn.placeholder(tn.int32, [], name="trips")

        def loops(d: int, v: Any) -> Any:
            if d == 0:
                return v * 1.5 + 1.0
            return tn.while_loop(lambda i, w: i < trips, lambda i, w: (i + 1, loops(d - 1, w)),
                                 [tn.constant(0), v], name=f"level{d}")[1]

        y = loops(depth, x)
    return g, x, trips, y
