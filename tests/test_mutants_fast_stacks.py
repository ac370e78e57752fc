"""Laws of the chunked loop and its report (``turnout.fast.stacks``): one call of a driven loop
(``chunk_loop``) runs while the loop's predicate holds, its iteration budget lasts and its error word
is clear, and stops before an iteration that could push past a stack's chunk (by the most one
iteration has pushed, measured where asked) or pop a stack the host still holds more of below what one
iteration has popped; what the host reads after it comes back as one vector (``report_vector``,
a pending stack's pointer 0) that ``ChunkReport.read`` reads back, and the report decides which
stacks spill (``full``) and which take chunks back (``low``), and whether the loop is over
(``stopped``). Each law kills mutants of the full set of ``fast/stacks.py`` (issue 40, part 3;
``python tools/mutation.py --module fast/stacks.py --all``).

``chunk_loop`` is called directly on a tiny body that moves stack pointers (no real program); the
report's methods on reports and stand-in stacks built by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, Optional

import jax.numpy as jnp
import numpy as np
import pytest

from turnout.fast import stacks as stk
from turnout.fast.stacks import ChunkReport, StackValue

CAP = 8


def _stack(ptr: int) -> StackValue:
    return StackValue(CAP, np.float32, jnp.zeros((CAP,), jnp.float32), None, jnp.int32(ptr))


def _pending() -> StackValue:
    return StackValue(CAP, np.float32)


def _body(moves: dict[str, Callable[[Any], Any]], pred: Optional[Callable[[Any], Any]] = None) -> Any:
    """A loop body moving each stack's pointer by ``moves[s](iteration)`` (positive: pushes, negative:
    pops), its predicate ``pred(next iteration)`` (default: always true)."""
    def body(c: Any) -> Any:
        vals, p, state, iters = c
        new = dict(state)
        for s, move in moves.items():
            sv = state[s]
            new[s] = sv.replace(sv.buf, sv.idx, sv.ptr + jnp.int32(move(iters)))
        nxt = iters + 1
        return vals, (jnp.asarray(True) if pred is None else pred(nxt)), new, nxt
    return body


def _run(moves: dict[str, Any], ptrs: dict[str, int], push: dict[str, int], pop: dict[str, int],
         max_iter: int = 100, host_has: Optional[dict[str, bool]] = None, measured: Optional[set[str]] = None,
         grow: Optional[dict[str, int]] = None, shrink: Optional[dict[str, int]] = None,
         pred: Any = None, pred0: bool = True, err: int = 0) -> tuple[Any, Any, ChunkReport]:
    """One ``chunk_loop`` call on stacks at ``ptrs``; returns the carry, ``aux`` and the report read
    back from its vector."""
    state: dict[str, Any] = {"err": jnp.int32(err), **{s: _stack(p) for s, p in ptrs.items()}}
    c = (jnp.float32(0), jnp.asarray(pred0), state, jnp.int32(0))
    aux = ({s: jnp.int32((grow or {}).get(s, 0)) for s in push}, {s: jnp.int32((shrink or {}).get(s, 0)) for s in pop})
    has = {s: jnp.asarray((host_has or {}).get(s, True)) for s in pop}
    c2, aux2, vec = stk.chunk_loop(_body(moves, pred), c, aux, push, pop, CAP, max_iter, has, measured)
    return c2, aux2, ChunkReport.read(vec, push, pop)


def _ptr(c: Any, s: str) -> int:
    return int(c[2][s].ptr)


@pytest.mark.parametrize("case", ["pred", "budget", "error", "false_at_entry"])
def test_the_predicate_the_budget_and_the_error_word_stop_a_chunk_whatever_room_its_stacks_have(case: str) -> None:
    """Law: with room in every stack, the chunk still stops when the loop's predicate turns false
    (after 2 iterations here), when its iteration budget (3) is spent, or, at entry, when the error
    word is set or the predicate is false (no iteration). (First in the file: a mutant that loses the
    budget or the predicate fails here, before a test whose loop only the budget ends would hang.)"""
    moves = {"a": lambda i: 1, "b": lambda i: -1}
    kw: dict[str, Any] = {}
    if case == "pred":
        kw["pred"] = lambda i: i < 2
    if case == "budget":
        kw["max_iter"] = 3
    if case == "error":
        kw["err"] = 1
    if case == "false_at_entry":
        kw["pred0"] = False
    c2, _, rep = _run(moves, {"a": 0, "b": CAP}, {"a": 1}, {"b": 1}, **kw)
    want = {"pred": 2, "budget": 3, "error": 0, "false_at_entry": 0}[case]
    assert int(c2[3]) == want and rep.iters == want
    assert rep.err == (1 if case == "error" else 0) and rep.pred == (case not in ("pred", "false_at_entry"))


def test_a_chunk_of_pushes_stops_before_a_push_could_pass_the_chunk() -> None:
    """Law: pushing one value an iteration into an empty chunk of ``CAP`` entries, the chunk runs
    exactly ``CAP`` iterations: it goes on while ``ptr + 1 <= CAP``, and fills the chunk."""
    c2, aux2, rep = _run({"a": lambda i: 1}, {"a": 0}, {"a": 1}, {})
    assert int(c2[3]) == CAP and _ptr(c2, "a") == CAP and int(aux2[0]["a"]) == 1
    assert (rep.err, rep.pred, rep.iters, rep.ptr, rep.grow, rep.shrink) == (0, True, CAP, {"a": CAP}, {"a": 1}, {})


def test_a_chunk_leaves_room_for_the_most_one_iteration_has_pushed() -> None:
    """Law: a stack's ``grow`` is the most one iteration has pushed so far (here 3, at iteration 1),
    and the chunk stops once the free room is less than that: pointers 1, 4, 5, 6, then 6 + 3 > 8."""
    c2, aux2, rep = _run({"a": lambda i: jnp.where(i == 1, 3, 1)}, {"a": 0}, {"a": 1}, {})
    assert int(c2[3]) == 4 and _ptr(c2, "a") == 6
    assert int(aux2[0]["a"]) == 3 and rep.grow == {"a": 3} and rep.ptr == {"a": 6}


def test_a_stack_not_measured_keeps_its_counts_and_is_bounded_by_its_static_count() -> None:
    """Law: a stack outside ``measured`` is bounded by its static count alone (its ``grow`` or
    ``shrink`` given is neither read nor updated): here it pushes (pops) one an iteration up to the
    chunk's end (down to empty), its count of 3 passed through unchanged, and a count of 0 stays 0
    where it moves two an iteration."""
    c2, aux2, rep = _run({"a": lambda i: 1}, {"a": 0}, {"a": 1}, {}, measured=set(), grow={"a": 3})
    assert int(c2[3]) == CAP and _ptr(c2, "a") == CAP and int(aux2[0]["a"]) == 3 and rep.grow == {"a": 3}
    c2, aux2, rep = _run({"b": lambda i: -1}, {"b": 5}, {}, {"b": 1}, measured=set(), shrink={"b": 3})
    assert int(c2[3]) == 5 and _ptr(c2, "b") == 0 and int(aux2[1]["b"]) == 3 and rep.shrink == {"b": 3}
    # (a count below what the stack moves an iteration stays as given too: it is not measured)
    _, aux2, rep = _run({"a": lambda i: 2, "b": lambda i: -2}, {"a": 0, "b": CAP}, {"a": 2}, {"b": 2},
                        measured=set(), grow={"a": 0}, shrink={"b": 0})
    assert (int(aux2[0]["a"]), int(aux2[1]["b"]), rep.grow, rep.shrink) == (0, 0, {"a": 0}, {"b": 0})


def test_a_chunk_of_pops_stops_before_a_pop_could_find_the_stack_empty_while_the_host_holds_more() -> None:
    """Law: popping one value an iteration from 3 entries while the host holds more of the stack, the
    chunk stops at 0 after 3 iterations (it goes on while ``ptr >= 1``), its ``shrink`` 1; where the
    host holds nothing more the pops are not bounded by the chunk (the budget stops it)."""
    c2, aux2, rep = _run({"b": lambda i: -1}, {"b": 3}, {}, {"b": 1})
    assert int(c2[3]) == 3 and _ptr(c2, "b") == 0 and int(aux2[1]["b"]) == 1
    assert (rep.ptr, rep.shrink, rep.grow) == ({"b": 0}, {"b": 1}, {})
    c2, _, rep = _run({"b": lambda i: -1}, {"b": 3}, {}, {"b": 1}, max_iter=5, host_has={"b": False})
    assert int(c2[3]) == 5 and rep.iters == 5


def test_a_chunk_of_pops_keeps_the_most_one_iteration_has_popped() -> None:
    """Law: a popped stack's ``shrink`` is the most one iteration has popped (2, at iteration 0), and
    the chunk stops below it: pointers 8, 6, 5, 4, 3, 2, then 1 < 2."""
    c2, aux2, rep = _run({"b": lambda i: jnp.where(i == 0, -2, -1)}, {"b": CAP}, {}, {"b": 1})
    assert _ptr(c2, "b") == 1 and int(aux2[1]["b"]) == 2 and rep.shrink == {"b": 2}
    assert int(c2[3]) == 6


def test_the_report_reads_back_every_scalar_in_the_order_of_the_dicts() -> None:
    """Law: ``report_vector`` is one int32 vector of the error word, the predicate, the iteration
    count, then each pushed stack's pointer and ``grow``, then each popped stack's pointer and
    ``shrink``, a pending stack's pointer 0; ``ChunkReport.read`` reads each back under its stack."""
    state = {"err": jnp.int32(7), "a": _stack(5), "p": _pending(), "b": _stack(2), "q": _stack(4)}
    c = (jnp.float32(0), jnp.asarray(False), state, jnp.int32(9))
    push, pop = {"a": 1, "p": 1}, {"b": 1, "q": 2}
    aux = ({"a": jnp.int32(3), "p": jnp.int32(6)}, {"b": jnp.int32(11), "q": jnp.int32(13)})
    vec = stk.report_vector(c, aux, push, pop)
    assert vec.dtype == jnp.int32 and vec.shape == (11,)
    assert np.asarray(vec).tolist() == [7, 0, 9, 5, 3, 0, 6, 2, 11, 4, 13]
    rep = ChunkReport.read(vec, push, pop)
    assert rep == ChunkReport(7, False, 9, {"a": 5, "p": 0, "b": 2, "q": 4}, {"a": 3, "p": 6}, {"b": 11, "q": 13})
    assert isinstance(rep.pred, bool)
    c = (jnp.float32(0), jnp.asarray(True), {"err": jnp.int32(0)}, jnp.int32(4))
    assert ChunkReport.read(stk.report_vector(c, ({}, {}), {}, {}), {}, {}) == ChunkReport(0, True, 4, {}, {}, {})


def _report(err: int = 0, pred: bool = True, iters: int = 0, ptr: Optional[dict[str, int]] = None,
            grow: Optional[dict[str, int]] = None, shrink: Optional[dict[str, int]] = None) -> ChunkReport:
    return ChunkReport(err, pred, iters, ptr or {}, grow or {}, shrink or {})


def test_a_loop_is_over_on_an_error_a_false_predicate_or_its_budget_spent() -> None:
    """Law: ``stopped(max_iter)`` holds exactly when the error word is set (any code), the predicate
    is false, or ``iters >= max_iter``."""
    assert not _report(iters=4).stopped(5)
    assert _report(err=1, iters=4).stopped(5) and _report(err=2, iters=4).stopped(5)
    assert _report(pred=False, iters=4).stopped(5)
    assert _report(iters=5).stopped(5) and _report(iters=6).stopped(5)


def _sv(pending: bool) -> Any:
    return SimpleNamespace(pending=pending)


def test_the_stacks_that_spill_are_the_pushed_ones_with_entries_and_no_room_for_one_more_iteration() -> None:
    """Law: ``full`` names the pushed stacks that have a buffer, hold at least one entry, and whose
    pointer plus the most one iteration may push (the static count or ``grow``, the larger) passes
    the capacity; a stack exactly filled by one more iteration does not spill."""
    push = {"over_by_n": 3, "over_by_grow": 1, "one_entry": CAP, "exact": 2, "room": 1, "empty": 9, "pending": 9}
    ptr = {"over_by_n": 6, "over_by_grow": 6, "one_entry": 1, "exact": 6, "room": 2, "empty": 0, "pending": 0}
    grow = {"over_by_n": 0, "over_by_grow": 3, "one_entry": 0, "exact": 1, "room": 2, "empty": 0, "pending": 0}
    state = {s: _sv(s == "pending") for s in push}
    got = _report(ptr=ptr, grow=grow).full(push, state, CAP)
    assert set(got) == {"over_by_n", "over_by_grow", "one_entry"}
    assert all(got[s] is state[s] for s in got)


def test_the_stacks_that_take_chunks_back_are_the_popped_ones_below_one_iteration_with_more_in_the_store() -> None:
    """Law: ``low`` names the popped stacks that have a buffer, hold fewer entries than the most one
    iteration may pop (the static count or ``shrink``, the larger), and of which the store holds
    more; a stack holding exactly that many does not."""
    pop = {"below_n": 3, "below_shrink": 1, "exact": 2, "stored_none": 3, "pending": 3}
    ptr = {"below_n": 2, "below_shrink": 2, "exact": 2, "stored_none": 0, "pending": 0}
    shrink = {"below_n": 0, "below_shrink": 3, "exact": 1, "stored_none": 0, "pending": 0}
    state = {s: _sv(s == "pending") for s in pop}
    store = SimpleNamespace(has=lambda s: s != "stored_none")
    got = _report(ptr=ptr, shrink=shrink).low(pop, state, store)  # type: ignore[arg-type]
    assert set(got) == {"below_n", "below_shrink"}
    assert all(got[s] is state[s] for s in got)


def test_every_name_stacks_exports_is_bound_there() -> None:
    """Law: every name of ``stacks.__all__`` is bound in the module (it re-exports the stack values'
    and the chunk store's names, which the rest of the backend imports from here)."""
    assert len(stk.__all__) == len(set(stk.__all__))
    for name in stk.__all__:
        assert hasattr(stk, name), name
