"""Differential testing campaign: run generated programs through every executor for a time budget.

    python tools/campaign.py --seconds 60 [--seed N] [--fast] [--partitioned-only]

Each generated program (``tests/strategies.py``, swarm generation) runs on the reference interpreter
(several schedulers), the structured evaluator, the small-step semantics and the direct AST
interpreter (``tests/programs.py``), and with ``--fast`` on the JAX backend too; the exactly-once,
window and deadness checks of ``tests/test_properties.py`` run on it as well. Every program also runs
partitioned (``turnout.devices``) under a random placement over 2-4 devices, a random partition order
and scheduler, against the unpartitioned run (T7, ``tests/test_devices_properties.py``);
``--partitioned-only`` runs that check alone. Any disagreement is
re-run through hypothesis to shrink it, and the shrunk program is printed as source; where the
replay does not meet that disagreement again, the program as the search found it is printed.

How the budget works: the search runs in chunks of hypothesis' generate phase (no shrinking, a fresh
seed per chunk) and stops when the time is up; failing examples land in an in-memory example
database, from which a second hypothesis run (reuse + shrink phases, same test function, hence same
database key) shrinks each distinct failure and keeps the smallest failing program of each kind.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.database import InMemoryExampleDatabase  # noqa: E402
from programs import Program, assert_values_equal, build, interpret, summarize, to_source  # noqa: E402
from strategies import programs_with_inputs  # noqa: E402
from test_devices_properties import check_partition_equivalence  # noqa: E402
from test_properties import (  # noqa: E402
    check_adequacy,
    check_confluence_schedulers,
    check_deadness,
    check_exactly_once,
    check_window,
)


class _Stop(Exception):
    """Raised inside the hypothesis test once the time budget is spent."""


class Disagreement(AssertionError):
    """Two executors (or an executor and a check) disagree on a program."""


def check_fast(p: Program, inputs: dict[str, Any]) -> None:
    """The fast (JAX) backend agrees with the AST interpreter (float results up to float32-ish rounding)."""
    import turnout as tn

    b = build(p)
    got = tn.Session(b.graph, backend="fast").run(b.fetches, b.feed_dict(inputs))
    want = interpret(p, inputs).values
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=f"fast: result {k}")
        else:
            assert_values_equal([g], [w], f"fast: result {k}")


def random_placement(graph: Any, rng: Any) -> Any:
    """A random placement draw (the same shape as ``strategies.placements``) from a seeded generator."""
    from strategies import DEVICE_ORDERS, PlacementDraw

    n = rng.randint(2, 4)
    devices = tuple(f"/job:localhost/task:0/device:CPU:{i}" for i in range(n))
    requests = {node.name: devices[rng.randrange(n)] for node in graph.nodes}
    return PlacementDraw(devices, requests, rng.choice(DEVICE_ORDERS), rng.randrange(2**16),
                         rng.choice(("fifo", "lifo", "random")))


def make_check_partitioned(seed: int) -> Any:
    from random import Random

    rng = Random(seed)

    def check_partitioned(p: Program, inputs: dict[str, Any]) -> None:
        """T7: the partitioned reference run (random placement, order, scheduler) equals the unpartitioned run."""
        b = build(p)
        draw = random_placement(b.graph, rng)
        check_partition_equivalence(b.graph, b.fetches, b.feed_dict(inputs), draw, f"{draw.devices} {draw.order}\n")

    return check_partitioned


class Campaign:
    def __init__(self, seconds: float, base_seed: int, fast: bool, partitioned_only: bool = False) -> None:
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.seed = base_seed
        self.checks = [check_adequacy, check_confluence_schedulers, check_exactly_once, check_window, check_deadness]
        if fast:
            self.checks.append(check_fast)
        self.checks.append(make_check_partitioned(base_seed))
        if partitioned_only:
            self.checks = self.checks[-1:]
        self.tried = 0
        self.features: Counter[str] = Counter()
        self.max_depth = 0
        self.pis: set[int] = set()
        #: kind -> the first failing program the search met, its inputs and its message; the program
        #: is printed when the shrink phase does not meet that kind again (hypothesis keeps a failing
        #: example in its database only once it has shrunk it, which the search phase does not do,
        #: so a replay may find nothing)
        self.failures: dict[str, tuple[Program, dict[str, Any], str]] = {}
        self.shrunk: dict[str, tuple[Program, dict[str, Any], str]] = {}
        self.db = InMemoryExampleDatabase()
        self.stop_enabled = True
        self.bar: Any = None

    # The one test function every hypothesis run wraps (so they share a database key).
    def body(self, pi: tuple[Program, dict[str, Any]]) -> None:
        if self.stop_enabled and time.monotonic() > self.deadline:
            raise _Stop
        p, inputs = pi
        if self.stop_enabled:
            self.tried += 1
        for check in self.checks:
            try:
                check(p, inputs)
            except Exception as e:  # noqa: BLE001 - any exception from an executor is a finding
                kind = f"{check.__name__}: {type(e).__name__}"
                msg = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
                if self.stop_enabled:
                    self.failures.setdefault(kind, (p, inputs, msg))
                else:  # shrinking: keep the smallest failing program of each kind
                    best = self.shrunk.get(kind)
                    if best is None or len(to_source(p)) < len(to_source(best[0])):
                        self.shrunk[kind] = (p, inputs, f"{kind}: {msg}")
                raise Disagreement(kind) from e
        if self.stop_enabled:
            self._record(p, inputs)

    def _record(self, p: Program, inputs: dict[str, Any]) -> None:
        s = summarize(p, interpret(p, inputs))
        self.max_depth = max(self.max_depth, s["max_depth"])
        self.pis.update(s["parallel_iterations"])
        for k in ("loops", "conds", "cases", "scans", "zero_trip_loops", "maximum_iterations", "conds_in_preds",
                  "loop_instances"):
            self.features[k] += s[k]
        self.features["programs with floats"] += int(s["floats"])
        if self.bar is not None:
            self.bar.n = min(self.seconds, round(self.seconds - (self.deadline - time.monotonic()), 1))
            self.bar.set_postfix(programs=self.tried, failures=len(self.failures), refresh=False)
        elif self.tried % 25 == 0:
            left = max(0.0, self.deadline - time.monotonic())
            print(f"  {self.tried} programs, {len(self.failures)} failure kinds, {left:.0f}s left", flush=True)

    def search(self) -> None:
        # Reproducible search: hypothesis draws each run's seed from this generator. (An explicit
        # @seed would switch the example database off, and the shrink phase needs it.)
        from random import Random

        from hypothesis.core import threadlocal

        threadlocal._hypothesis_global_random = Random(self.seed)
        chunk = 0
        while time.monotonic() < self.deadline:
            run = settings(max_examples=200, database=self.db, deadline=None, phases=[Phase.generate],
                           suppress_health_check=list(HealthCheck), derandomize=False)(
                given(programs_with_inputs())(self.body))
            try:
                run()
            except _Stop:
                break
            except Exception:  # noqa: BLE001 - recorded in self.failures by body
                pass
            chunk += 1

    def shrink(self) -> None:
        """Replay the saved failures with hypothesis' shrinker and keep the minimal program per kind."""
        self.stop_enabled = False
        run = settings(max_examples=1, database=self.db, deadline=None, phases=[Phase.reuse, Phase.shrink],
                       suppress_health_check=list(HealthCheck), report_multiple_bugs=True)(
            given(programs_with_inputs())(self.body))
        try:
            run()
        except Exception:  # noqa: BLE001 - the shrunk failures were recorded by body
            pass

    def report(self) -> None:
        print("\n=== Turnout differential campaign ===")
        print(f"programs tried: {self.tried} (the feature counts below are over those that passed every check)")
        print(f"checks: {', '.join(c.__name__ for c in self.checks)}")
        print(f"max nesting depth: {self.max_depth}")
        for k, v in sorted(self.features.items()):
            print(f"{k}: {v}")
        print(f"parallel_iterations values: {sorted(self.pis)}")
        if not self.failures:
            print("disagreements: none")
            return
        print(f"disagreements: {len(self.failures)} kind(s)")
        for kind, (_, _, msg) in self.failures.items():
            print(f"- {kind}: {msg}")
        for p, inputs, msg in self.shrunk.values():
            print(f"\nshrunk example ({msg[:200]}):\n{to_source(p)}\ninputs: {inputs}")
        for kind, (p, inputs, msg) in self.failures.items():
            if kind not in self.shrunk:
                head = f"{kind}: {msg}"
                print(f"\nexample, not shrunk ({head[:200]}):\n{to_source(p)}\ninputs: {inputs}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="time budget for the search")
    ap.add_argument("--seed", type=int, default=0, help="base seed of the search")
    ap.add_argument("--fast", action="store_true", help="also compare the fast (JAX) backend")
    ap.add_argument("--partitioned-only", action="store_true",
                    help="run only the partition-equivalence check (T7) on each program")
    args = ap.parse_args(argv)
    if args.fast:
        try:
            import turnout.fast.backend  # noqa: F401
        except ImportError as e:
            print(f"--fast: the fast backend cannot be imported ({e}); running without it")
            args.fast = False
    c = Campaign(args.seconds, args.seed, args.fast, args.partitioned_only)
    try:
        from tqdm import tqdm

        c.bar = tqdm(total=args.seconds, unit="s", desc="campaign", mininterval=1.0,
                     bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f}s {postfix}")
    except ImportError:
        c.bar = None
    c.search()
    if c.bar is not None:
        c.bar.close()
    if c.failures:
        print("shrinking ...", flush=True)
        c.shrink()
    c.report()
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
