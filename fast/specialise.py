"""Specialising a compiled run on the values that decide its shapes: one loop for every executor.

XLA needs static shapes, and some shapes are known only at run time. Two kinds are compiled anyway:

- a shape argument computed from root-frame feeds alone (a ``fill`` shape, a TensorArray size, a
  slice bound): the program compiles once those feeds are constants of its plan. A trace that meets
  one raises ``lowering_base.NeedsStatic`` naming them (only raising leaves a JAX trace), the
  executor's compile returns it as the outcome ``Specialise``, and ``run_specialised`` plans and
  traces again with those feeds as constants. Their values join the plan's cache key
  (``static_signature``), so a value seen before never recompiles.
- a value whose shape the run computes (the stack of a TensorArray of dynamic size, whose length
  is its loop's trip count): the run is *cut* at it. ``NeedsStatic`` then names the computed
  root-frame tensors (``cut``); an earlier run of the same executor fetches them (its program ends
  there, and the host cuts the stack to its length), and the program runs with them fed, so that
  their shapes are those of the fed arrays. Where the run up to the cut writes a Variable, running
  its part twice would write it twice, and the program is refused (``cut_refusal``); what the two
  runs share is computed twice, the price of compiling the rest.

Why one function: the one-device fast backend (``FastBackend``) and the fast partitioned executor
(``devices.fast_executor``) both specialise, and a rule of when it helps kept twice would drift.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Optional, TypeVar

import numpy as np

from turnout.errors import DeadFetchError, UnsupportedError, describe_node
from turnout.fast.lowering_base import Specialise
from turnout.fast.regions import Key, tensor_of
from turnout.graph import Graph, Tensor, ancestors

R = TypeVar("R")

#: what writes state that outlives a run: a run cut in two must not do it twice (``cut_refusal``)
_WRITES = frozenset({"AssignVariable", "AssignAddVariable", "AssignSubVariable"})


@dataclass(frozen=True)
class Specialisation:
    """What the plans of one run signature are specialised on: fed tensors whose values are
    constants of the plan (``static``), and computed tensors an earlier run fetches and the program
    then takes as fed (``cut``)."""

    static: frozenset[Key] = frozenset()
    cut: frozenset[Key] = frozenset()


NOTHING = Specialisation()

#: ``compute``: the values of computed tensors, fetched by a run of the same program cut short
Compute = Callable[[frozenset[Key]], dict[Key, Any]]


def run_specialised(known: dict[Any, Specialisation], sig: Any, feeds: Mapping[Key, Any],
                    compile_run: Callable[[dict[Key, Any], dict[Key, np.ndarray]], R | Specialise],
                    compute: Optional[Compute] = None) -> tuple[R, dict[Key, np.ndarray]]:
    """Run ``compile_run(computed, values)`` until it returns a result, and return it with ``values``:
    ``computed``, the values of the tensors the run is cut at (``compute``, the executor's earlier
    run; none where it passes no ``compute``), to be fed; ``values``, those of the fed (or computed)
    tensors the plan is specialised on. ``known`` holds what earlier runs of signature ``sig``
    learnt, and is updated in place by every ``Specialise`` that teaches something new; one that
    does not (its feeds are static already, or not all fed; a cut made already, or no ``compute``)
    raises its refusal as ``UnsupportedError``: the program then falls back."""
    while True:
        spec = known.get(sig, NOTHING)
        computed = compute(spec.cut) if spec.cut and compute is not None else {}
        values = {k: np.asarray(computed[k] if k in computed else feeds[k]) for k in sorted(spec.static)}
        result = compile_run(computed, values)
        if not isinstance(result, Specialise):
            return result, values
        known[sig] = _learn(spec, result, set(feeds) | set(computed), compute is not None)


def _learn(spec: Specialisation, result: Specialise, fed: set[Key], can_cut: bool) -> Specialisation:
    """``spec`` with what ``result`` teaches, or its refusal raised where it teaches nothing."""
    if result.cut:
        if not can_cut or result.cut <= spec.cut:
            raise UnsupportedError(result.reason)
        return replace(spec, cut=spec.cut | result.cut)
    if result.keys <= spec.static or not result.keys <= fed:
        raise UnsupportedError(result.reason)
    return replace(spec, static=spec.static | result.keys)


def with_computed(graph: Graph, feeds: dict[Tensor, Any], computed: Mapping[Key, Any]) -> dict[Tensor, Any]:
    """The feeds of a run cut at the tensors ``computed`` holds values of: ``feeds`` and those values."""
    return {**feeds, **{tensor_of(graph, k): v for k, v in computed.items()}} if computed else feeds


def computed(graph: Graph, cut: frozenset[Key], fed: set[Key], fetch: Callable[[list[Tensor]], list[Any]],
             who: str) -> dict[Key, Any]:
    """The values of the tensors ``cut`` of ``graph``, computed by ``fetch`` (a run of the executor
    ``who`` that fetches them, with the tensors ``fed`` fed): the ``compute`` of ``run_specialised``.
    Refused (``UnsupportedError``: the program falls back) where their part of the program writes a
    Variable (``cut_refusal``), or where one of them is dead in the run."""
    refusal = cut_refusal(graph, cut, fed)
    if refusal is not None:
        raise UnsupportedError(f"{who}: {refusal}")
    keys = sorted(cut)
    try:
        got = fetch([tensor_of(graph, k) for k in keys])
    except DeadFetchError as e:
        raise UnsupportedError(f"{who}: the run would be cut at a tensor that is dead ({e})") from None
    return dict(zip(keys, got, strict=True))


def cut_refusal(graph: Graph, cut: frozenset[Key], fed: set[Key]) -> Optional[str]:
    """Why a run cannot be cut at ``cut`` (``None`` where it can): the part of the program that
    computes them (their ancestors, along data, control and back edges, short of the ``fed``
    tensors: ``graph.ancestors``) writes a Variable, which the run and the earlier one that fetches
    them would both do."""
    for n in ancestors([tensor_of(graph, k) for k in sorted(cut)], fed).values():
        if n.op in _WRITES:
            return (f"the run would be cut where a TensorArray of dynamic size is stacked, but what "
                    f"computes it writes a Variable ({describe_node(n)})")
    return None


def specialisation_stats(graph: Graph, spec: Specialisation, values: Mapping[Key, Any]) -> dict[str, list[str]]:
    """A run's stats of what its plan was specialised on: the tensors whose values it is specialised
    on (``specialized_on``) and those it was cut at (``cut_at``), by name, where there are any."""
    stats = {"specialized_on": sorted(tensor_of(graph, k).name for k in values),
             "cut_at": sorted(tensor_of(graph, k).name for k in spec.cut)}
    return {k: v for k, v in stats.items() if v}


def specialisation_notes(graph: Graph, spec: Specialisation) -> tuple[str, ...]:
    """What earlier runs of a signature learnt, as notes of its schedule (``Session.explain``): the
    feeds its plans are specialised on, and the tensors its runs are cut at."""
    notes = []
    if spec.static:
        names = ", ".join(sorted(tensor_of(graph, k).name for k in spec.static))
        notes.append(f"specialised on the values of {names}: a plan per value")
    if spec.cut:
        names = ", ".join(sorted(tensor_of(graph, k).name for k in spec.cut))
        notes.append(f"cut at {names}, whose shape only a run tells: a run that fetches it first, then the program "
                     "with it fed")
    return tuple(notes)


def static_signature(values: Mapping[Key, np.ndarray]) -> tuple[tuple[Key, bytes], ...]:
    """The part of a plan's cache key that the specialised values make (their dtypes and shapes are
    in the feed signature already)."""
    return tuple((k, v.tobytes()) for k, v in sorted(values.items()))


__all__ = ["NOTHING", "Compute", "Specialisation", "computed", "cut_refusal", "run_specialised", "specialisation_notes",
           "specialisation_stats", "static_signature", "with_computed"]
