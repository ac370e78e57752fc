"""Laws of specialising a compiled run (``turnout.fast.specialise``): what a ``Specialise`` outcome
teaches, when it is refused, how a run is cut and what it reports. Each law kills mutants of the full
set of ``fast/specialise.py`` (issue 40, part 3). The loop is driven by stand-in ``compile_run`` and
``compute`` callables on tiny graphs that are built but never run, so the whole file takes
milliseconds: the compiled runs that reach the module (``test_fast_dynamic_shapes.py`` and others)
take seconds each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.errors import DeadFetchError, UnsupportedError
from turnout.fast.lowering_base import Specialise
from turnout.fast.specialise import (
    NOTHING,
    Specialisation,
    computed,
    cut_refusal,
    run_specialised,
    specialisation_notes,
    specialisation_stats,
    static_signature,
    with_computed,
)
from turnout.graph import Tensor

X, Y, C = (1, 0), (2, 0), (3, 0)  # two fed keys and a computed one


def _compiler(needs: list[Specialise], limit: int = 6) -> tuple[Callable[..., Any], list[tuple[Any, Any]]]:
    """A stand-in ``compile_run`` that returns the outcomes of ``needs`` in turn, then ``"ran"``;
    every call's ``(computed, values)`` is recorded. Past ``limit`` calls it fails the test (a loop
    that never stops learning)."""
    calls: list[tuple[Any, Any]] = []

    def compile_run(computed_: dict[Any, Any], values: dict[Any, Any]) -> Any:
        calls.append((computed_, values))
        assert len(calls) <= limit, "run_specialised kept compiling"
        return needs[len(calls) - 1] if len(calls) <= len(needs) else "ran"

    return compile_run, calls


def test_a_fed_shape_argument_is_learnt_once_and_its_value_passed() -> None:
    """A ``Specialise`` naming fed keys makes them static for this signature: the next compile gets
    their values (as arrays), and ``known`` keeps what was learnt for that signature alone. Kills the
    mutants of ``run_specialised`` that lose ``known[sig]``, the values or the fed set, and those of
    ``_learn`` that drop or intersect the static keys."""
    compile_run, calls = _compiler([Specialise(frozenset({X}), "needs x")])
    known: dict[Any, Specialisation] = {"other": Specialisation(static=frozenset({Y}))}
    result, values = run_specialised(known, "sig", {X: 3, Y: 4}, compile_run)
    assert result == "ran"
    assert calls[0] == ({}, {})
    assert list(calls[1][1]) == [X] and calls[1][1][X].tolist() == 3 and isinstance(calls[1][1][X], np.ndarray)
    assert values == calls[1][1]
    assert known == {"other": Specialisation(static=frozenset({Y})), "sig": Specialisation(static=frozenset({X}))}


def test_static_keys_accumulate_over_runs_of_a_signature() -> None:
    """What earlier runs learnt is kept: a second key joins the first (their union), and a run that
    meets nothing new compiles once with both values."""
    compile_run, _ = _compiler([Specialise(frozenset({X}), "x"), Specialise(frozenset({Y}), "y")])
    known: dict[Any, Specialisation] = {}
    run_specialised(known, "sig", {X: 1, Y: 2}, compile_run)
    assert known["sig"] == Specialisation(static=frozenset({X, Y}))
    again, calls = _compiler([])
    _, values = run_specialised(known, "sig", {X: 5, Y: 6}, again)
    assert len(calls) == 1 and {k: v.tolist() for k, v in values.items()} == {X: 5, Y: 6}


@pytest.mark.parametrize("keys, why", [({X}, "already static"), ({X, (9, 0)}, "not all fed")])
def test_a_specialisation_that_teaches_nothing_is_refused_with_its_reason(keys: set[Any], why: str) -> None:
    """A ``Specialise`` whose keys are static already, or not all fed, teaches nothing: its reason is
    raised as ``UnsupportedError`` (the program falls back) instead of compiling again forever.
    Kills ``_learn``'s mutants that weaken either test or drop the reason."""
    compile_run, calls = _compiler([Specialise(frozenset(keys), why)] * 6)
    known = {"sig": Specialisation(static=frozenset({X}))} if why == "already static" else {}
    with pytest.raises(UnsupportedError, match=f"^{why}$"):
        run_specialised(known, "sig", {X: 1, Y: 2}, compile_run)
    assert len(calls) == 1


def test_exactly_the_fed_keys_can_be_learnt() -> None:
    """Keys equal to the whole set of fed tensors are all fed, so they are learnt (``<=``, not
    ``<``)."""
    compile_run, _ = _compiler([Specialise(frozenset({X, Y}), "both")])
    known: dict[Any, Specialisation] = {}
    run_specialised(known, "sig", {X: 1, Y: 2}, compile_run)
    assert known["sig"].static == frozenset({X, Y})


def test_a_cut_is_computed_fed_and_its_static_value_read_from_the_computed() -> None:
    """A ``Specialise`` with a ``cut`` is learnt where the executor can compute (``compute``): the
    next compile gets the computed values, fed, and a static key that is computed (not fed) takes
    its value from them. Kills the mutants that call ``compute`` without the cut, or never, that
    read a static value from the feeds alone, or that lose the cut."""
    asked: list[Any] = []

    def compute(cut: frozenset[Any]) -> dict[Any, Any]:
        asked.append(cut)
        return {C: np.arange(3)}

    compile_run, calls = _compiler([Specialise(frozenset(), "cut", cut=frozenset({C})),
                                    Specialise(frozenset({C}), "static c")])
    known: dict[Any, Specialisation] = {}
    _, values = run_specialised(known, "sig", {X: 1}, compile_run, compute)
    assert asked == [frozenset({C}), frozenset({C})]
    assert calls[1][0] == {C: calls[1][0][C]} and calls[1][0][C].tolist() == [0, 1, 2]
    assert {k: v.tolist() for k, v in values.items()} == {C: [0, 1, 2]}
    assert known["sig"] == Specialisation(static=frozenset({C}), cut=frozenset({C}))


def test_a_fed_static_value_comes_from_the_feeds_when_a_run_is_cut() -> None:
    """With a cut, a static key that is fed still takes the fed value."""
    compile_run, _ = _compiler([])
    known = {"sig": Specialisation(static=frozenset({X}), cut=frozenset({C}))}
    _, values = run_specialised(known, "sig", {X: 7}, compile_run, lambda cut: {C: 1})
    assert {k: v.tolist() for k, v in values.items()} == {X: 7}


def test_cuts_accumulate() -> None:
    """A second cut joins the first (their union): both are computed before the next compile."""
    compile_run, calls = _compiler([Specialise(frozenset(), "a", cut=frozenset({C})),
                                    Specialise(frozenset(), "b", cut=frozenset({Y}))])
    known: dict[Any, Specialisation] = {}
    run_specialised(known, "sig", {X: 1}, compile_run, lambda cut: {k: 0 for k in cut})
    assert known["sig"].cut == frozenset({C, Y}) and set(calls[2][0]) == {C, Y}


def test_no_compute_without_a_cut() -> None:
    """An executor's earlier run (``compute``) is asked for only where the run is cut: a run that is
    not cut pays for no second run."""
    compile_run, calls = _compiler([])

    def compute(cut: frozenset[Any]) -> dict[Any, Any]:
        raise AssertionError("computed without a cut")

    assert run_specialised({}, "sig", {X: 1}, compile_run, compute) == ("ran", {})
    assert calls == [({}, {})]


@pytest.mark.parametrize("can_cut", [False, True])
def test_a_cut_that_cannot_help_is_refused_with_its_reason(can_cut: bool) -> None:
    """A cut is refused (its reason raised as ``UnsupportedError``) where the executor cannot compute
    (no ``compute``), or where it was made already (the same cut again: computing it again would
    change nothing). Kills ``_learn``'s mutants of either test and of ``can_cut``."""
    compile_run, calls = _compiler([Specialise(frozenset(), "cut c", cut=frozenset({C}))] * 6)
    known = {"sig": Specialisation(cut=frozenset({C}))} if can_cut else {}
    with pytest.raises(UnsupportedError, match="^cut c$"):
        run_specialised(known, "sig", {X: 1}, compile_run, (lambda cut: {C: 0}) if can_cut else None)
    assert len(calls) == 1


def _writer(op: str) -> tuple[tn.Graph, Tensor, Tensor, Tensor]:
    """A graph whose tensor ``out`` is computed from the value a write ``op`` to a Variable returns
    (of a placeholder ``x``); also a tensor ``free`` that depends on ``x`` alone."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        v = tn.Variable(0.0, name="v")
        write = {"AssignVariable": v.assign, "AssignAddVariable": v.assign_add,
                 "AssignSubVariable": v.assign_sub}[op](x, name="write")
        out = tn.identity(write * 2.0, name="out")
        free = tn.identity(x + 1.0, name="free")
    return g, x, out, free


def _key(t: Tensor) -> tuple[int, int]:
    return (t.node.id, t.index)


@pytest.mark.parametrize("op", ["AssignVariable", "AssignAddVariable", "AssignSubVariable"])
def test_a_cut_whose_part_writes_a_variable_is_refused_naming_the_write(op: str) -> None:
    """Cutting a run computes its part up to the cut twice, so a part that writes a Variable (any of
    the three writes) is refused, naming the write; ``computed`` raises it as ``UnsupportedError``
    naming the executor, without running the fetch. Kills the mutants of ``_WRITES``' names, the
    inverted test and the refusal's message."""
    g, _, out, _ = _writer(op)
    refusal = cut_refusal(g, frozenset({_key(out)}), set())
    assert refusal is not None and f'{op} node "write"' in refusal

    def fetch(ts: list[Tensor]) -> list[Any]:
        raise AssertionError("fetched a refused cut")

    with pytest.raises(UnsupportedError, match=f'^ex: .*{op} node "write"'):
        computed(g, frozenset({_key(out)}), set(), fetch, "ex")


def test_a_cut_is_allowed_where_no_write_is_behind_it_or_the_write_is_fed_past() -> None:
    """A cut whose ancestors write nothing is allowed, and so is one whose only write lies behind a
    fed tensor (the part that runs stops at the feeds). ``computed`` then maps each cut key to the
    value the fetch returned for its tensor, in key order. Kills the mutants of ``cut_refusal`` that
    ignore ``fed`` and of ``computed`` that lose the keys or the pairing."""
    g, x, out, free = _writer("AssignVariable")
    assert cut_refusal(g, frozenset({_key(free)}), set()) is None
    write = next(n for n in g.nodes if n.name == "write")
    assert cut_refusal(g, frozenset({_key(out)}), {(write.id, 0)}) is None
    got = computed(g, frozenset({_key(free), _key(x)}), set(), lambda ts: [t.name for t in ts], "ex")
    assert got == {_key(x): x.name, _key(free): free.name}


def test_a_cut_at_a_dead_tensor_is_refused() -> None:
    """A cut tensor that is dead in the run (it lies on an untaken branch) has no value to feed: the
    fetch's ``DeadFetchError`` becomes an ``UnsupportedError`` naming the executor."""
    g, _, _, free = _writer("AssignVariable")

    def fetch(ts: list[Tensor]) -> list[Any]:
        raise DeadFetchError("free is dead")

    with pytest.raises(UnsupportedError, match="^ex: the run would be cut at a tensor that is dead"):
        computed(g, frozenset({_key(free)}), set(), fetch, "ex")


def test_a_cut_runs_with_its_values_fed_and_an_uncut_run_with_its_feeds_as_they_are() -> None:
    """``with_computed`` adds the computed values as feeds of their tensors; with nothing computed it
    passes the feeds on as they are (no copy per run)."""
    g, x, _, free = _writer("AssignVariable")
    feeds: dict[Tensor, Any] = {x: 1.0}
    assert with_computed(g, feeds, {}) is feeds
    assert with_computed(g, feeds, {_key(free): 5.0}) == {x: 1.0, free: 5.0}


def test_stats_and_notes_name_what_a_plan_is_specialised_on_and_cut_at() -> None:
    """A run's stats list the tensors its values specialise the plan on and those it is cut at, by
    name, leaving out what is empty; the schedule's notes say the same in words, the names joined by
    commas. Kills the mutants of the stats' keys, the names and the notes' text."""
    g, x, out, free = _writer("AssignVariable")
    spec = Specialisation(static=frozenset({_key(x), _key(free)}), cut=frozenset({_key(out), _key(free)}))
    assert specialisation_stats(g, spec, {_key(x): 1, _key(free): 2}) == {
        "specialized_on": sorted([x.name, free.name]), "cut_at": sorted([out.name, free.name])}
    assert specialisation_stats(g, NOTHING, {}) == {}
    static, cut = ", ".join(sorted([x.name, free.name])), ", ".join(sorted([out.name, free.name]))
    assert specialisation_notes(g, spec) == (
        f"specialised on the values of {static}: a plan per value",
        f"cut at {cut}, whose shape only a run tells: a run that fetches it first, then the program with it fed")
    assert specialisation_notes(g, NOTHING) == ()


def test_the_static_signature_tells_values_apart_by_their_bytes() -> None:
    """The cache key part of specialised values: one ``(key, bytes)`` pair per value in key order, so
    that equal values share a plan and different ones do not."""
    sig = static_signature({Y: np.asarray(2), X: np.asarray(1)})
    assert sig == ((X, np.asarray(1).tobytes()), (Y, np.asarray(2).tobytes()))
    assert static_signature({X: np.asarray(1)}) != static_signature({X: np.asarray(3)})


def test_the_module_exports_what_it_defines() -> None:
    """Every name in ``fast.specialise.__all__`` is defined by the module (``tests/test_exports.py``'s
    law, for this module alone). Kills the ``__all__`` mutants."""
    from test_exports import test_every_exported_name_exists

    test_every_exported_name_exists("turnout.fast.specialise")
