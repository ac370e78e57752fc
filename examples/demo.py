"""Turnout demo: a while loop with a conditional inside (the Collatz sequence), checked against plain Python.

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
the branch not taken in an iteration receives dead values instead of running. The trace printed for
each run counts those firings. On the fast backend (``--backend fast``) the same graph is compiled
with JAX; its trace is a timeline of compiled calls instead of firings.

The first line printed says the task and the backend; the last is the verdict: whether every answer
agrees with the plain-Python function above.

Run: ``python examples/demo.py [--backend {reference,fast}] [n ...]``.
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
    parser.add_argument("n", nargs="*", type=int, default=[6, 27, 97], help="starting numbers (default: 6 27 97)")
    parser.add_argument("--backend", choices=["reference", "fast"], default="reference",
                        help="reference: the interpreter, whose trace lists every firing (default); "
                             "fast: compiled with JAX, traced as a timeline of compiled calls")
    args = parser.parse_args(argv)
    for value in args.n:
        if value < 1:
            parser.error(f"n must be positive, got {value}")
    print(f"Task: Collatz steps and peak of n = {' '.join(map(str, args.n))} with a while loop around a cond; "
          f"backend: {args.backend}")
    g, n, fetches = build()
    ops: dict[str, int] = {}
    for node in g.nodes:
        ops[node.op] = ops.get(node.op, 0) + 1
    control = ("Enter", "Merge", "LoopCond", "Switch", "NextIteration", "Exit")
    print(f"graph: {len(g.nodes)} nodes; control-flow primitives: "
          + ", ".join(f"{op} x{ops.get(op, 0)}" for op in control))
    sess = tn.Session(g, backend=args.backend)
    wrong = []
    for value in args.n:
        steps, peak = sess.run(fetches, feed_dict={n: value}, trace=True)
        if (int(steps), int(peak)) != collatz_reference(value):
            wrong.append(value)
        summary = sess.last_result.trace.summary()  # type: ignore[union-attr]
        print(f"n={value}: {int(steps)} steps, peak {int(peak)}")
        if args.backend == "reference":
            frames = ", ".join(f"{name}: {k}" for name, k in summary["iterations_per_frame"].items())
            print(f"  trace: {summary['firings']} firings ({summary['live']} live, {summary['dead']} dead); "
                  f"iterations per frame: {frames}")
        else:
            print(f"  trace: {summary['spans'].get('compiled stages', 0)} compiled call(s), "
                  f"{summary['compiles_this_run']} compiled on this run, {1e3 * summary['seconds']['run']:.1f} ms")
    if wrong:
        print(f"Verdict: WRONG: the dataflow run disagrees with plain Python's collatz() for n = {wrong}")
        return 1
    print(f"Verdict: correct: all {len(args.n)} answers (steps, peak) equal plain Python's collatz()")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
