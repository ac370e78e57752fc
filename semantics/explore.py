"""Exhaustive exploration of every interleaving of the small-step rules, for small graphs.

Why: ``[T1-Confluence]`` claims that every scheduler gives the same outcome. Running a few schedulers
samples that claim; this module checks it outright for a small graph by visiting every configuration
reachable from the initial one (depth-first, memoising visited configurations by value, so the
exponentially many interleavings collapse to the much smaller set of states they pass through). It
reports every distinct outcome of a maximal run, every stuck (quiescent, non-final) state, and, for
two runs with different outcomes, the two firing sequences that witness it.

No partial-order reduction: reducing by the independence of firings would assume the commutation
that confluence is about, so the explorer walks the plain state space and says ``complete=False``
when it stops at ``max_states``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from turnout.errors import NonTerminationError, TurnoutError
from turnout.graph import Graph
from turnout.kernels import TensorArrayValue
from turnout.semantics.smallstep import (
    Config,
    Firing,
    deadlock_report,
    enabled,
    fire,
    fmt_tag,
    freeze,
    initial,
)


def value_repr(v: Any) -> Hashable:
    """A hashable, readable form of a fetched value: (dtype, shape, nested tuples of Python scalars)."""
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)

        def tup(x: Any) -> Any:
            return tuple(tup(e) for e in x) if isinstance(x, list) else x

        return (a.dtype.name, a.shape, tup(a.tolist()))
    if isinstance(v, TensorArrayValue):
        return ("TensorArray", v.dtype, tuple(value_repr(x) for x in v.items))
    return freeze(v)


def outcome(config: Config) -> tuple[Hashable, ...]:
    """The outcome of a quiescent configuration: per fetch ``("live", value)`` or ``("dead", name)``."""
    p = config.program
    out: list[Hashable] = []
    for f, name in zip(p.fetches, p.fetch_names, strict=True):
        tok = config.produced[f]
        out.append(("dead", name) if tok.is_dead else ("live", value_repr(tok.value)))
    return tuple(out)


@dataclass
class ExplorationResult:
    """``final_outputs``: the outcomes of all maximal runs that produced every fetch (a kernel error
    on some path shows up as ``(("error", type name, message),)``). ``stuck_states``: quiescent
    configurations with a fetch missing. ``complete``: every reachable state was visited."""

    final_outputs: set[tuple[Hashable, ...]]
    n_states: int
    stuck_states: list[Config]
    complete: bool
    witnesses: dict[tuple[Hashable, ...], list[Firing]] = field(default_factory=dict)
    stuck_paths: list[list[Firing]] = field(default_factory=list)


def _path(parent: dict[Config, tuple[Config, Firing] | None], c: Config,
          last: Firing | None = None) -> list[Firing]:
    """The firing sequence that first reached ``c`` (then ``last``, if given)."""
    steps: list[Firing] = [] if last is None else [last]
    while True:
        link = parent[c]
        if link is None:
            break
        c, f = link
        steps.append(f)
    return steps[::-1]


def explore(graph: Graph, fetches: Sequence[Any], feeds: Mapping[Any, Any] | None = None,
            variables: Mapping[str, Any] | None = None, max_states: int = 50_000) -> ExplorationResult:
    """Visit every configuration reachable from ``initial(graph, fetches, feeds, variables)``."""
    start = initial(graph, fetches, feeds, variables)
    parent: dict[Config, tuple[Config, Firing] | None] = {start: None}
    stack = [start]
    result = ExplorationResult(set(), 0, [], True)
    while stack:
        c = stack.pop()
        result.n_states += 1
        en = enabled(c)
        if not en:
            if all(f in c.produced for f in c.program.fetches):
                o = outcome(c)
                result.final_outputs.add(o)
                result.witnesses.setdefault(o, _path(parent, c))
            else:
                result.stuck_states.append(c)
                result.stuck_paths.append(_path(parent, c))
            continue
        for f in en:
            try:
                nxt = fire(c, f)
            except TurnoutError as e:
                o = (("error", type(e).__name__, str(e)),)
                result.final_outputs.add(o)
                result.witnesses.setdefault(o, _path(parent, c, f))
                continue
            if nxt in parent:
                continue
            if len(parent) >= max_states:
                result.complete = False
                continue
            parent[nxt] = (c, f)
            stack.append(nxt)
    return result


@dataclass
class Counterexample:
    """Two maximal runs from the same initial configuration with different outcomes
    (``kind="divergent"``), one run that ends stuck (``kind="stuck"``; ``run_b`` is then a run to a
    final state if one exists, else empty), or one run that ends in ``[E-Merge-Conflict]``
    (``kind="merge-conflict"``: a Merge received two live inputs at one tag; ``run_b`` is empty).
    Runs are the firing sequences, as ``Firing`` records: feed them to ``smallstep.fire`` one by one
    from ``smallstep.initial`` to replay them."""

    kind: str
    outcome_a: Hashable
    run_a: list[Firing]
    outcome_b: Hashable
    run_b: list[Firing]

    def __str__(self) -> str:
        def show(run: list[Firing]) -> str:
            return "\n".join(
                f"    [{f.rule}] {f.node} at {fmt_tag(f.tag)}{' (dead)' if f.dead else ''}"
                f"{f' forwarding input {f.slot}' if f.rule == 'E-Merge-Live' else ''}" for f in run)

        return (f"{self.kind} counterexample\n  run A -> {self.outcome_a}:\n{show(self.run_a)}\n"
                f"  run B -> {self.outcome_b}:\n{show(self.run_b)}")


def _is_merge_conflict(outcome: Any) -> bool:
    """An outcome that is the error of [E-Merge-Conflict]."""
    return bool(outcome) and tuple(outcome[0][:2]) == ("error", "MergeConflictError")


def check_confluence(graph: Graph, fetches: Sequence[Any], feeds: Mapping[Any, Any] | None = None,
                     max_states: int = 50_000,
                     variables: Mapping[str, Any] | None = None) -> Counterexample | None:
    """``[T1-Confluence]`` for one small program: None if every maximal run has the same outcome and
    none gets stuck and no Merge receives two live inputs at one tag; otherwise a ``Counterexample``.
    Raises ``NonTerminationError`` if the state space exceeds ``max_states`` before any counterexample
    was found (no verdict can be given then)."""
    r = explore(graph, fetches, feeds, variables, max_states)
    outs = sorted(r.final_outputs, key=repr)
    conflicts = [o for o in outs if _is_merge_conflict(o)]
    if conflicts:  # [E-Merge-Conflict]: the graph breaks [W-Merge-Unique]; show the run that finds it
        return Counterexample("merge-conflict", conflicts[0], r.witnesses[conflicts[0]], None, [])
    if len(outs) > 1:
        a, b = outs[0], outs[1]
        return Counterexample("divergent", a, r.witnesses[a], b, r.witnesses[b])
    if r.stuck_states:
        other = outs[0] if outs else None
        return Counterexample("stuck", ("deadlock", deadlock_report(r.stuck_states[0])), r.stuck_paths[0],
                              other, r.witnesses[other] if other is not None else [])
    if not r.complete:
        raise NonTerminationError(
            f"exploration stopped at max_states={max_states} with no counterexample among the "
            f"{r.n_states} states visited; no verdict (raise max_states or shrink the program)")
    return None
