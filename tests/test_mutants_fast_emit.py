"""Laws of the emitter's top (``turnout.fast.emit``): ``Emitter.run_while`` lowers a loop in the light
form where the emitter works on one device and the loop's header may be recomputed (chosen from the
emitter's own ``read_at_1``), else in the full form; a loop neither form lowers is unrolled on one
device, from the trace as the loop found it, unless the refusal is a ``CarryChanges`` of another
(nested) loop, which its own ``run_while`` handles; an emitter that shares predicates between devices
never unrolls. And the names the module exports are their home modules' own. Each law kills mutants
of the full set of ``fast/emit.py`` (issue 40, part 3; ``python tools/mutation.py --module
fast/emit.py --all``).

``run_while`` is called directly on a stand-in emitter, with the form chooser, ``LightLoop`` and
``run_unrolled`` replaced by recorders, so each test takes milliseconds.
"""

from __future__ import annotations

from typing import Any

import pytest

from turnout.errors import UnsupportedError
from turnout.fast import emit, state_keys, tracing
from turnout.fast.emitter_core import EmitterCore
from turnout.fast.loops import CarryChanges


class _OneDevice:
    """A stand-in emitter on one device (its ``read_pred`` the core's): it records each call, and its
    two loop forms raise what the test asks."""

    read_pred = EmitterCore.read_pred

    def __init__(self, light_raises: Exception | None = None, full_raises: Exception | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.light_raises = light_raises
        self.full_raises = full_raises
        self.point = object()
        self.at_1 = {7, 11}

    def trace_point(self) -> object:
        self.calls.append(("trace_point",))
        return self.point

    def read_at_1(self) -> set[int]:
        return self.at_1

    def run_light_while(self, r: Any, env: Any) -> None:
        self.calls.append(("light", r, env))
        if self.light_raises is not None:
            raise self.light_raises

    def run_full_while(self, r: Any, env: Any) -> None:
        self.calls.append(("full", r, env))
        if self.full_raises is not None:
            raise self.full_raises

    def back_to(self, point: object) -> None:
        self.calls.append(("back_to", point))

    def note_mark(self) -> None:
        self.calls.append(("note_mark",))


class _Shared(_OneDevice):
    """A stand-in emitter that shares predicates between devices (its own ``read_pred``, as the SPMD
    tier's)."""

    def read_pred(self, *args: Any) -> Any:  # pragma: no cover - never called: only its identity counts
        raise AssertionError("not called")


@pytest.fixture
def chooser(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Replace the form chooser (``light_header``), ``LightLoop`` and ``run_unrolled`` in ``emit`` by
    recorders; ``rec["light"]`` is what the chooser answers."""
    rec: dict[str, Any] = {"light": True, "header": [], "loops": [], "unrolled": []}

    def light_header(r: Any, read_at_1: Any = None) -> bool:
        rec["header"].append((r, read_at_1))
        return bool(rec["light"])

    class Loop:
        def __init__(self, em: Any, r: Any, env: Any) -> None:
            self.args = (em, r, env)
            rec["loops"].append(self)

    def run_unrolled(em: Any, loop: Any, refusal: Any) -> None:
        rec["unrolled"].append((em, loop, refusal))

    monkeypatch.setattr(emit, "light_header", light_header)
    monkeypatch.setattr(emit, "LightLoop", Loop)
    monkeypatch.setattr(emit, "run_unrolled", run_unrolled)
    return rec


R, ENV = object(), {"env": 1}


def _forms(em: _OneDevice) -> list[tuple[Any, ...]]:
    return [c for c in em.calls if c[0] in ("light", "full")]


def test_a_light_header_on_one_device_takes_the_light_form_chosen_from_the_emitters_reads(
        chooser: dict[str, Any]) -> None:
    """Law: on one device, a loop whose header may be recomputed (``light_header`` of the region and
    of the emitter's own ``read_at_1``) is lowered by ``run_light_while`` on its region and
    environment, once, and the emitter's mark is noted after it."""
    em = _OneDevice()
    emit.Emitter.run_while(em, R, ENV)  # type: ignore[arg-type]
    assert chooser["header"] == [(R, em.at_1)]
    assert _forms(em) == [("light", R, ENV)]
    assert em.calls[-1] == ("note_mark",) and not chooser["unrolled"]


def test_a_header_that_is_not_light_takes_the_full_form(chooser: dict[str, Any]) -> None:
    """Law: on one device, a loop whose header may not be recomputed is lowered by
    ``run_full_while`` on its region and environment, and never by the light form."""
    chooser["light"] = False
    em = _OneDevice()
    emit.Emitter.run_while(em, R, ENV)  # type: ignore[arg-type]
    assert _forms(em) == [("full", R, ENV)]
    assert em.calls[-1] == ("note_mark",)


def test_an_emitter_sharing_predicates_takes_the_full_form_even_for_a_light_header(
        chooser: dict[str, Any]) -> None:
    """Law: an emitter whose ``read_pred`` is not the core's (the SPMD tier's: it keeps the predicate
    in the body) lowers every loop in the full form, light header or not."""
    em = _Shared()
    emit.Emitter.run_while(em, R, ENV)  # type: ignore[arg-type]
    assert _forms(em) == [("full", R, ENV)]


@pytest.mark.parametrize("light", [True, False])
def test_a_loop_whose_carry_changes_type_is_unrolled_on_one_device_from_the_trace_as_it_found_it(
        chooser: dict[str, Any], light: bool) -> None:
    """Law: on one device, a ``CarryChanges`` of this very loop, raised by either form, abandons the
    loop's trace (``back_to`` the trace point taken before it) and unrolls it: ``run_unrolled`` on
    the emitter, a ``LightLoop`` over the emitter, the region and the environment, and the
    refusal."""
    chooser["light"] = light
    e = CarryChanges("carry changes", R)  # type: ignore[arg-type]
    em = _OneDevice(light_raises=e, full_raises=e)
    emit.Emitter.run_while(em, R, ENV)  # type: ignore[arg-type]
    assert em.calls[0] == ("trace_point",)
    assert ("back_to", em.point) in em.calls
    [loop] = chooser["loops"]
    assert loop.args == (em, R, ENV)
    assert chooser["unrolled"] == [(em, loop, e)]
    assert em.calls[-1] == ("note_mark",)


def test_any_other_refusal_of_a_loop_on_one_device_is_unrolled_too(chooser: dict[str, Any]) -> None:
    """Law: on one device an ``UnsupportedError`` that is not a ``CarryChanges`` (what the loop
    computes has no static shape) is unrolled as well, with that refusal."""
    chooser["light"] = False
    e = UnsupportedError("no static shape")
    em = _OneDevice(full_raises=e)
    emit.Emitter.run_while(em, R, ENV)  # type: ignore[arg-type]
    assert [u[2] for u in chooser["unrolled"]] == [e]


def test_a_nested_loops_carry_change_is_left_to_that_loop(chooser: dict[str, Any]) -> None:
    """Law: a ``CarryChanges`` naming another loop (one nested inside, whose own ``run_while`` decides)
    leaves this loop's ``run_while`` unchanged: nothing is unrolled here, the trace is not rewound."""
    inner = object()
    e = CarryChanges("inner carry changes", inner)  # type: ignore[arg-type]
    em = _OneDevice(light_raises=e)
    with pytest.raises(CarryChanges) as got:
        emit.Emitter.run_while(em, R, ENV)  # type: ignore[arg-type]
    assert got.value is e
    assert not chooser["unrolled"] and not any(c[0] == "back_to" for c in em.calls)


@pytest.mark.parametrize("make", [lambda: UnsupportedError("no static shape"),
                                  lambda: CarryChanges("carry changes", R)])  # type: ignore[arg-type]
def test_an_emitter_sharing_predicates_never_unrolls_a_refused_loop(chooser: dict[str, Any], make: Any) -> None:
    """Law: on an emitter sharing predicates between devices, a refused loop (its carry changing type
    or not) stays refused: the error leaves ``run_while`` as it was raised."""
    e = make()
    em = _Shared(full_raises=e)
    with pytest.raises(UnsupportedError) as got:
        emit.Emitter.run_while(em, R, ENV)  # type: ignore[arg-type]
    assert got.value is e and not chooser["unrolled"]


def test_every_name_emit_exports_is_bound_there_and_the_old_spellings_are_tracings() -> None:
    """Law: every name of ``emit.__all__`` is bound in ``emit`` (the other tiers import them from
    here), and the former private spellings ``_jnp_tree`` and ``_zeros_of`` (the SPMD emitter's
    imports) are ``tracing``'s functions."""
    for name in emit.__all__:
        assert hasattr(emit, name), name
    assert emit.stack_key is state_keys.stack_key and emit.var_key is state_keys.var_key
    assert emit._jnp_tree is tracing.jnp_tree and emit._zeros_of is tracing.zeros_of
