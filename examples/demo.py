"""Turnout demo: a while loop with a conditional inside, run by the reference interpreter.

The program counts the steps of the Collatz sequence (halve an even number, map an odd one to 3n + 1,
stop at 1) and tracks the largest value seen. As plain Python::

    def collatz(n):
        steps, peak = 0, n
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            steps, peak = steps + 1, max(peak, n)
        return steps, peak

Built with ``tn.while_loop`` and ``tn.cond``, it is lowered to the paper's primitives (Enter, Merge,
LoopCond, Switch, NextIteration, Exit for the loop; Switch and Merge for the conditional), and the
reference interpreter runs it as tagged tokens: every value carries the iteration it belongs to, and
the branch not taken in an iteration receives dead values instead of running. The trace printed at the
end counts those firings.

Run: ``python examples/demo.py [n ...]``.
"""

from __future__ import annotations

import argparse
from typing import Any

import turnout as tn


def collatz_reference(n: int) -> tuple[int, int]:
    """The plain-Python meaning of the graph below; the demo checks the two agree."""
    steps, peak = 0, n
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps, peak = steps + 1, max(peak, n)
    return steps, peak


def build() -> tuple[tn.Graph, tn.Tensor, Any]:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")

        def body(v: tn.Tensor, steps: tn.Tensor, peak: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor, tn.Tensor]:
            nxt = tn.cond(tn.equal(v % 2, 0), lambda: v // 2, lambda: 3 * v + 1, name="step")
            return nxt, steps + 1, tn.maximum(peak, nxt)

        _, steps, peak = tn.while_loop(lambda v, steps, peak: tn.not_equal(v, 1), body,
                                       [n, tn.constant(0), n], name="collatz")
    return g, n, (steps, peak)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="*", type=int, default=[6, 27, 97])
    args = parser.parse_args(argv)
    g, n, fetches = build()
    ops: dict[str, int] = {}
    for node in g.nodes:
        ops[node.op] = ops.get(node.op, 0) + 1
    control = ("Enter", "Merge", "LoopCond", "Switch", "NextIteration", "Exit")
    print(f"graph: {len(g.nodes)} nodes; control-flow primitives: "
          + ", ".join(f"{op} x{ops.get(op, 0)}" for op in control))
    sess = tn.Session(g, backend="reference")
    for value in args.n:
        if value < 1:
            parser.error(f"n must be positive, got {value}")
        steps, peak = sess.run(fetches, feed_dict={n: value}, trace=True)
        if (int(steps), int(peak)) != collatz_reference(value):
            raise SystemExit(f"n={value}: the dataflow run disagrees with plain Python")
        summary = sess.last_result.trace.summary()  # type: ignore[union-attr]
        frames = ", ".join(f"{name}: {k}" for name, k in summary["iterations_per_frame"].items())
        print(f"n={value}: {int(steps)} steps, peak {int(peak)}")
        print(f"  trace: {summary['firings']} firings ({summary['live']} live, {summary['dead']} dead); "
              f"iterations per frame: {frames}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
