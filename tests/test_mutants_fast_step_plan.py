"""Laws of what every plan of a cut program is (``turnout.fast.step_plan.StepPlan``): what its traces
share, how each step is compiled, the memory plan a budget gets, and what an error word means. Each
law kills mutants of the full set of ``fast/step_plan.py`` (issue 40, part 3). The one-device plan
(``fast.plan.Plan``) overrides ``jit`` and ``budget_inputs``, so only the partitioned runs reach
those, in seconds a test; here a ``StepPlan`` is made directly, on small programs raised by
``functionalize`` and a stand-in backend (a plan reads only its ``compile_count``), and each law takes
milliseconds (a compiled call a few tens)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import test_exports

import turnout as tn
from turnout.errors import KernelError
from turnout.fast.cut import Segment
from turnout.fast.driven import DrivenLoop
from turnout.fast.functionalize import functionalize
from turnout.fast.outcome import MAX_CAPACITY, OK, Discard, Raise, Retry
from turnout.fast.regions import Key, Program, WhileRegion, key, program_nodes
from turnout.fast.segment import SegmentFn
from turnout.fast.step_plan import StepPlan
from turnout.slot_sizes import SlotPlan

jax = pytest.importorskip("jax")


def _backend() -> Any:
    """A stand-in backend: the trace counter is all a ``StepPlan`` reads of it."""
    return SimpleNamespace(compile_count=0)


def _tanh() -> tuple[Program, Key, Key]:
    """``y = 2 tanh(x)``, no loop: the program, the key of ``x`` and of ``y``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        y = tn.tanh(x) * 2.0
    return functionalize(g, [y], [x]), key(x), key(y)


def _two_loops() -> Program:
    """A loop whose gradient pops stacks (``kept``) and a loop with a memory budget whose gradient
    recomputes from checkpoint slots (``budgeted``): both kinds of saved values a budget counts."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, a = tn.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tn.tanh(h) * 1.1), [tn.constant(0), x],
                             name="kept")
        _, b = tn.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tn.sin(h)), [tn.constant(0), a],
                             name="budgeted", memory_budget=64)
        (dx,) = tn.gradients(b, [x])
    return functionalize(g, [b, dx], [x, n])


def _variables() -> Program:
    """A program that reads Variable ``v`` and assigns ``w``."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.float32(1.0), name="v")
        w = tn.Variable(np.float32(0.0), name="w")
        y = w.assign(v.read() * 2.0)
    return functionalize(g, [y])


def test_a_plan_keeps_what_it_was_given_and_the_variables_its_program_uses() -> None:
    """A plan holds its backend, program, fed nodes, capacity and slots as given, a copy of the fed
    values it is specialised on (a caller's later change to its dict does not reach the plan's
    traces; none given: none), a fresh error-code table, and the Variables its program reads and
    assigns. Kills ``__init__``'s mutants (an attribute dropped, ``static_feeds or {}`` as ``and``,
    ``variables_of`` of nothing)."""
    program, kx, _ = _tanh()
    backend, slots, static = _backend(), SlotPlan(capacity=3), {kx: np.ones(3, np.float32)}
    plan = StepPlan(backend, program, {kx[0]}, 16, slots, static)
    assert (plan.backend, plan.program, plan.fed, plan.capacity, plan.slots) == (backend, program, {kx[0]}, 16, slots)
    assert list(plan.static_feeds) == [kx] and plan.static_feeds is not static
    static.clear()
    assert list(plan.static_feeds) == [kx]
    assert StepPlan(backend, program, set(), 16, slots).static_feeds == {}
    assert plan.codes.code("kernel", "a") == 1 and plan.pushed == {} and plan.push_shapes == {}
    held = StepPlan(backend, _variables(), set(), 16, slots)
    assert sorted(held.var_nodes) == ["v", "w"] and held.written_vars == {"w"}


def test_every_trace_of_a_plan_starts_from_its_state_and_shares_what_the_plan_keeps() -> None:
    """Each emitter is one trace (the backend's counter goes up by one), of the plan's program with
    its error codes, capacity and the bound given, starting from a copy of the state given; it reads
    the plan's fed nodes, specialised values and checkpoint slots, and what one trace notes of the
    stacks' pushes (constants, shapes) the next one sees. Kills ``emitter``'s mutants."""
    program, kx, _ = _tanh()

    def learn(_: Any) -> None:
        """Where a trace says it needed more checkpoint slots (not called: nothing here learns)."""

    plan = StepPlan(_backend(), program, {kx[0]}, 16, SlotPlan(capacity=5, learn=learn), {kx: np.zeros(3)})
    state = {"err": np.int32(0)}
    first = plan.emitter(state, 7, stop_on_error=True)
    assert plan.backend.compile_count == 1
    assert (first.program, first.codes, first.capacity, first.max_iter, first.stop_on_error) == (
        program, plan.codes, 16, 7, True)
    assert first.state == state and first.state is not state
    first.state["err"] = np.int32(3)
    assert state["err"] == 0
    assert (first.fed, first.static, first.slot_capacity, first.learn_slots) == ({kx[0]}, plan.static_feeds, 5, learn)
    first.pushed["s"], first.push_shapes["s"] = 1.0, ((), (1,))
    second = plan.emitter({}, 9)
    assert plan.backend.compile_count == 2
    assert second.pushed == {"s": 1.0} and second.push_shapes == {"s": ((), (1,))} and not second.stop_on_error


def test_a_compiled_step_runs_its_items_and_gives_back_its_writes() -> None:
    """A step that drives no loop compiles to a ``SegmentFn`` that runs the step's items on what it
    reads and gives back its writes, each fetched write with its live flag. Kills the mutants of
    ``compiled``'s first return (each argument dropped or None, the test of ``driven``)."""
    program, kx, ky = _tanh()
    plan = StepPlan(_backend(), program, {kx[0]}, 16, SlotPlan())
    fn = plan.compiled(Segment("cpu:0", list(program.items), reads=[kx], writes=[ky], fetched=[ky]), False)
    assert isinstance(fn, SegmentFn)
    out, lives, state = fn({kx: np.array([0.0, 0.5, -1.0], np.float32)}, {"err": np.int32(0)}, np.int32(100))
    np.testing.assert_allclose(out[ky], 2.0 * np.tanh([0.0, 0.5, -1.0]), rtol=1e-6)
    assert list(out) == [ky] and {k: bool(v) for k, v in lives.items()} == {ky: True} and int(state["err"]) == 0
    assert plan.backend.compile_count == 1


@pytest.mark.parametrize("free", [False, True])
def test_a_driven_step_compiles_to_its_loop_run_chunk_by_chunk(free: bool) -> None:
    """A step that drives a loop compiles to a ``DrivenLoop`` of that loop, its writes and fetched
    writes, its stacks' pushes and pops per iteration and the stacks measured as chunks run, at the
    plan's capacity, traced by the plan's emitters and jitted by its ``jit``; its pointers run free
    only where the runner asks. Kills the mutants of ``compiled``'s second return."""
    program = _two_loops()
    loop = next(it for it in program.items if isinstance(it, WhileRegion))
    writes, fetched = [(loop.exits[0].id, 0)], [(loop.exits[0].id, 0)]
    seg = Segment("cpu:0", [loop], writes=writes, fetched=fetched, driven=loop, push={"stack:1": 1},
                  pop={"stack:2": 2}, measured={"stack:3"})
    plan = StepPlan(_backend(), program, set(), 32, SlotPlan())
    fn = plan.compiled(seg, free)
    assert isinstance(fn, DrivenLoop)
    assert (fn.region, fn.writes, fn.fetched, fn.push, fn.pop, fn.capacity, fn.measured, fn.free_pointers) == (
        loop, writes, set(fetched), {"stack:1": 1}, {"stack:2": 2}, 32, {"stack:3"}, free)
    assert fn.emitter == plan.emitter and fn.init.jit == plan.jit


def test_a_plans_jit_donates_the_arguments_it_is_told_to() -> None:
    """``StepPlan.jit`` is ``jax.jit`` with the donated arguments given: a donated stack buffer is
    updated in place (the caller's array is gone after the call), one not donated is kept. Kills
    ``jit``'s mutants (the function or the donation dropped)."""
    program, _, _ = _tanh()
    plan = StepPlan(_backend(), program, set(), 16, SlotPlan())
    a, b = jax.numpy.ones(3), jax.numpy.ones(3)
    np.testing.assert_allclose(plan.jit(lambda u, v: u + v, donate_argnums=(0,))(a, b), [2.0, 2.0, 2.0])
    assert a.is_deleted() and not b.is_deleted()
    c = jax.numpy.ones(3)
    np.testing.assert_allclose(plan.jit(lambda u: u * 3.0)(c), [3.0, 3.0, 3.0])
    assert not c.is_deleted()


def test_a_budget_gets_one_memory_plan_of_the_plans_stacks_and_slots() -> None:
    """``budget_inputs``: the program's nodes, its ``StackNew`` and ``CheckpointSlots`` nodes, and the
    plan's platform; ``budget``: the memory plan of those for a run budget, made once per budget
    (the same object again), covering the loop whose gradient pops stacks and the loop whose
    gradient recomputes from slots; no memory plan where the program has neither. Kills
    ``budget``'s and ``budget_inputs``' mutants."""
    program = _two_loops()
    plan = StepPlan(_backend(), program, set(), 8, SlotPlan())
    plan.platform = "cpu"
    nodes, stacks, platform = plan.budget_inputs()
    assert list(nodes) == program_nodes(program) and platform == "cpu"
    assert sorted(n.op for n in stacks) == sorted(n.op for n in program_nodes(program)
                                                  if n.op in ("StackNew", "CheckpointSlots"))
    assert {n.op for n in stacks} == {"StackNew", "CheckpointSlots"}
    got = plan.budget(10**6)
    assert got is not None and got.run_budget == 10**6 and got.platform.name == "cpu"
    assert sorted(lp.loop for lp in got.loops) == ["budgeted", "kept"]
    assert plan.budget(10**6) is got and plan.budget(None) is not got
    assert plan.budget(None) is plan.budget(None) and plan.budget(None).run_budget is None  # type: ignore[union-attr]
    tanh = StepPlan(_backend(), _tanh()[0], set(), 8, SlotPlan())
    tanh.platform = "cpu"
    assert tanh.budget(10**6) is None


def test_an_error_word_means_what_the_plans_table_and_capacity_say() -> None:
    """``outcome_of`` reads a word by the plan's own table and capacity: nothing set is ``Ok``; a stack
    past its chunk is a retry with twice the capacity, or past ``MAX_CAPACITY`` an error naming the
    route; a stack run empty is the interpreters' error unless chunks were moved out (then a
    retry); in a fused attempt the same words discard it, and a mark past the capacity says how many
    entries it needed. Kills ``outcome_of``'s mutants (each argument, the defaults of ``moved`` and
    ``attempt``)."""
    program, _, _ = _tanh()
    plan = StepPlan(_backend(), program, set(), 16, SlotPlan())
    over, under = plan.codes.code("overflow", "stack s full"), plan.codes.code("underflow", "stack s empty")
    assert plan.outcome_of(0, "fast backend") is OK
    assert plan.outcome_of(over, "fast backend") == Retry(32)
    empty = plan.outcome_of(under, "fast backend")
    assert isinstance(empty, Raise) and isinstance(empty.error, KernelError) and "stack s empty" in str(empty.error)
    assert plan.outcome_of(under, "fast backend", moved=2) == Retry(32)
    assert plan.outcome_of(over, "fast backend", attempt=True) == Discard()
    assert plan.outcome_of(0, "fast backend", attempt=True, mark=17) == Discard(needed=17)
    top = StepPlan(_backend(), program, set(), MAX_CAPACITY, SlotPlan())
    big = top.outcome_of(top.codes.code("overflow", "full"), "SPMD tier")
    assert isinstance(big, Raise) and big.outgrown and str(big.error).startswith("SPMD tier: ")


def test_the_module_exports_what_it_defines() -> None:
    """``tests/test_exports.py``'s law for this module alone: its ``__all__`` is a list of the names
    it defines. Here so that a mutant of ``__all__`` (which runs every test of the module's list) is
    killed by this file in seconds, not after the backend's runs."""
    test_exports.test_every_exported_name_exists("turnout.fast.step_plan")
