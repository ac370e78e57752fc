"""Mutation tests: break one rule of the reference interpreter and show the property checks notice.

A property suite that passes proves little unless it can fail. Each test here monkeypatches one
entry of the reference interpreter's rule tables (``turnout.reference.rules.ARRIVE`` / ``FIRE`` /
``ROUTE``) or one method of its frame instances, runs the checks of ``test_properties.py`` over a
fixed corpus (closed-form programs plus derandomized generated ones), and asserts that they FAIL under
the mutant, while the same corpus passes unmutated (``test_corpus_passes_unmutated``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from programs import INT, Bin, Block, Cmp, Const, If, InputDecl, Let, Loop, Program, Ref
from strategies import programs_with_inputs
from test_properties import (
    check_adequacy,
    check_confluence_schedulers,
    check_deadness,
    check_quiescence,
    check_window,
)

from turnout.errors import TurnoutError
from turnout.reference import executor, rules
from turnout.reference.rules import DEAD, Token

Check = Callable[[Program, dict[str, Any]], None]


# ---- the corpus -------------------------------------------------------------------------------------
def _loop(lid: str, n: int, bound: int, step: Any, pi: int = 1, init: Any = None) -> Loop:
    """``for i < bound: v = step(v, i)`` (counter i{n}, variable v{n}) starting from ``init``."""
    i, v = f"i{n}", f"v{n}"
    return Loop(lid, (f"t{n}", f"r{n}"), i, bound, ((v, init or Const(0, INT)),),
                Block((), (Cmp("ge", Ref(i, INT), Const(0, INT)),)),
                Block((), (step(Ref(v, INT), Ref(i, INT)),)), pi)


X0, X1 = Ref("x0", INT), Ref("x1", INT)
INPUTS = (InputDecl("x0", INT), InputDecl("x1", INT))

#: v = sum over 4 iterations of (x0 + i): reads the invariant x0 in every iteration.
INVARIANT_LOOP = Program(INPUTS, Block(
    (_loop("loop0", 0, 4, lambda v, i: Bin("add", v, Bin("add", X0, i)), pi=2),),
    (Ref("r0", INT),)))

#: A loop on the untaken branch of a cond (x0 > 100 is false for the corpus inputs): its Exits are dead.
LOOP_ON_UNTAKEN_BRANCH = Program(INPUTS, Block(
    (If("cond0", ("c",), Cmp("gt", X0, Const(100, INT)),
        Block((_loop("loop0", 0, 3, lambda v, i: Bin("add", v, X1)),), (Ref("r0", INT),)),
        Block((Let("w", Bin("mul", X1, Const(3, INT))),), (Ref("w", INT),))),),
    (Ref("c", INT),)))

#: Nested loops; the inner one runs io times in outer iteration io (zero trips in iteration 0), with
#: parallel_iterations 3. From vo = x1 = 5: 5 -> 5 + 0 -> (5 + 2) + 1 = 8 -> (8 + 4) + 2 = 14.
INNER = Loop("inner", ("t1", "r1"), "i1", 4, (("v1", Ref("vo", INT)),),
             Block((), (Cmp("lt", Ref("i1", INT), Ref("io", INT)),)),
             Block((), (Bin("add", Ref("v1", INT), Const(2, INT)),)), 3)
NESTED = Program(INPUTS, Block(
    (Loop("outer", ("to", "ro"), "io", 3, (("vo", X1),), Block((), (Cmp("ge", X0, Const(0, INT)),)),
          Block((INNER,), (Bin("add", Ref("r1", INT), Ref("io", INT)),)), 3),),
    (Ref("ro", INT), Ref("to", INT))))

CLOSED_FORM = [INVARIANT_LOOP, LOOP_ON_UNTAKEN_BRANCH, NESTED]
CLOSED_INPUTS = {"x0": np.asarray(2, np.int32), "x1": np.asarray(5, np.int32)}


@functools.lru_cache(maxsize=1)
def corpus() -> list[tuple[Program, dict[str, Any]]]:
    """The closed-form programs plus 30 derandomized generated programs with loops and conds."""
    out: list[tuple[Program, dict[str, Any]]] = [(p, CLOSED_INPUTS) for p in CLOSED_FORM]

    @settings(derandomize=True, max_examples=30, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(programs_with_inputs(loops=True, conds=True, max_depth=2))
    def collect(pi: tuple[Program, dict[str, Any]]) -> None:
        out.append(pi)

    collect()
    return out


ALL_CHECKS: list[Check] = [check_adequacy, check_confluence_schedulers, check_deadness, check_window]


def failures(checks: list[Check], first_only: bool = False) -> list[str]:
    """Run every check on every corpus program; the failures, described (only the first one when
    ``first_only``: a mutant needs to be caught once)."""
    found = []
    for p, inputs in corpus():
        for check in checks:
            try:
                check(p, inputs)
            except (AssertionError, TurnoutError) as e:
                found.append(f"{check.__name__}: {type(e).__name__}: {str(e)[:200]}")
                if first_only:
                    return found
    return found


def test_corpus_passes_unmutated() -> None:
    assert failures(ALL_CHECKS) == []


def test_closed_form_corpus_values() -> None:
    """The hand-written programs mean what their comments say (checked on the AST interpreter)."""
    from programs import interpret

    assert [int(v) for v in interpret(INVARIANT_LOOP, CLOSED_INPUTS).values] == [0 + 2 + 3 + 4 + 5]
    assert [int(v) for v in interpret(LOOP_ON_UNTAKEN_BRANCH, CLOSED_INPUTS).values] == [15]
    out = interpret(NESTED, CLOSED_INPUTS)
    assert [int(v) for v in out.values] == [14, 3] and out.trips == {"inner": [0, 1, 2], "outer": [3]}


# ---- the mutants ------------------------------------------------------------------------------------
def _merge_waits_for_all(it: Any, node: Any, tag: Any, box: rules.Inbox) -> Any:
    """Mutant of [E-Merge-Live]: a Merge waits for every input, like an ordinary op."""
    if not box.arrived_all(node):
        return None
    return "E-Merge-Live" if any(v is not None and not v.dead for v in box.values) else "E-Merge-AllDead"


def _exit_drops_dead(it: Any, node: Any, tag: Any, outs: list[Token]) -> None:
    """Mutant of [E-Exit-Dead]: a dead Exit is dropped instead of remembered for [E-Frame-Done]."""
    if outs[0].dead:
        return
    rules.route_exit(it, node, tag, outs)


def _next_propagates_dead(it: Any, node: Any, tag: Any, outs: list[Token]) -> None:
    """Mutant of [E-Next-Dead]: a dead NextIteration value goes on to the next iteration."""
    it.frame_of(tag).send_to_next(node, tag, outs[0])


def _switch_swapped(it: Any, node: Any, tag: Any, box: rules.Inbox) -> list[Token]:
    """Mutant of [E-Switch]: the data goes to the output the predicate does NOT select."""
    return list(reversed(rules.fire_switch(it, node, tag, box)))


_original_fire_compute = rules.fire_compute


def _dead_not_propagated(it: Any, node: Any, tag: Any, box: rules.Inbox) -> list[Token]:
    """Mutant of [E-Op-Dead]: an ordinary op with a dead input emits live zeros instead of dead."""
    if box.any_dead():
        return [DEAD if o.dtype.is_opaque else Token(np.zeros(o.shape or (), o.dtype.numpy)) for o in node.outputs]
    return _original_fire_compute(it, node, tag, box)


_original_start = executor.FrameInstance.start_iteration
_original_add_invariant = executor.FrameInstance.add_invariant


def _invariants_only_iteration_0(self: Any, k: int) -> None:
    """Mutant of [E-Enter-Const]: loop invariants reach iteration 0 only."""
    saved = self.invariants
    if k > 0:
        self.invariants = []
    try:
        _original_start(self, k)
    finally:
        self.invariants = saved


def _add_invariant_iteration_0(self: Any, enter: Any, tok: Token) -> None:
    self.invariants.append((enter, tok))
    if self.started and self.oldest == 0:
        self.it.emit(enter, 0, self.tag(0), tok)
        self.it.emit_control(enter, self.tag(0), tok)


def _window_ignored(self: Any, node: Any, tag: Any, tok: Token) -> None:
    """Mutant of [E-Next-Park]: the parallel_iterations window is ignored (every iteration starts at once)."""
    k = tag[-1][1] + 1
    if k == self.started:
        self.start_iteration(k)
    self._deliver_next(node, k, tok)


MUTANTS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], list[Check]]] = {
    "merge_waits_for_all_inputs": (
        lambda mp: mp.setitem(rules.ARRIVE, "Merge", _merge_waits_for_all), [check_adequacy]),
    # A run whose fetches were produced ends at quiescence even with nodes left waiting (TensorFlow's
    # executor does), so a dropped dead Exit shows as a stranded inbox: [T4-Quiescence] catches it.
    "dead_exit_dropped": (
        lambda mp: mp.setitem(rules.ROUTE, "Exit", _exit_drops_dead), [check_adequacy, check_quiescence]),
    "dead_next_iteration_propagated": (
        lambda mp: mp.setitem(rules.ROUTE, "NextIteration", _next_propagates_dead), [check_adequacy]),
    "switch_sends_to_wrong_output": (
        lambda mp: mp.setitem(rules.FIRE, "Switch", _switch_swapped), [check_adequacy]),
    "enter_const_only_iteration_0": (
        lambda mp: (mp.setattr(executor.FrameInstance, "start_iteration", _invariants_only_iteration_0),
                    mp.setattr(executor.FrameInstance, "add_invariant", _add_invariant_iteration_0)),
        [check_adequacy]),
    "parallel_iterations_window_ignored": (
        lambda mp: mp.setattr(executor.FrameInstance, "send_to_next", _window_ignored), [check_window]),
    "dead_inputs_not_propagated": (
        lambda mp: mp.setattr(rules, "fire_compute", _dead_not_propagated), [check_deadness, check_adequacy]),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mutate, checks = MUTANTS[name]
    corpus()  # generate before mutating (generation does not run the interpreter, but keep it clean)
    mutate(monkeypatch)
    found = failures(checks, first_only=True)
    assert found, f"mutant {name!r} survived every check on {len(corpus())} programs"
