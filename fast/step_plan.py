"""What every plan of a cut program is: the program, how its traces start, and its steps' compiled functions.

Why a module of its own: the one-device backend's plan (``fast.plan.Plan``) and the partitioned
executor's (``devices.plan_run.DevicePlan``) both cut a program into steps (``fast.cut``) and run
them with the one runner (``fast.runner.StepRunner``). Each once set up its emitters and built its
segments and driven loops itself, the partitioned executor through wrappers of its own; kept here,
a trace of either starts from the same emitter, each step is compiled by the same two builders
(``fast.segment.SegmentFn``, ``fast.driven.DrivenLoop``), and the runner asks any plan for a step's
compiled function and for the meaning of its error word.

What a plan adds is passed in or overridden: the backend whose trace counter it bumps and whose
options it follows (``CompileCounter``), the fed values it is specialised on, its checkpoint slots,
how it jits (``jit``: the one-device backend gives XLA its options) and what its emitters carry
besides (``emitter``: the one-device plan's held and counted stacks).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional, Protocol

import jax

from turnout.fast.chunk_store import budget_plan
from turnout.fast.cut import Segment
from turnout.fast.driven import DrivenLoop
from turnout.fast.emit import Emitter
from turnout.fast.outcome import ErrorCodes, Outcome, decode
from turnout.fast.regions import Key, Program, program_nodes
from turnout.fast.segment import SegmentFn
from turnout.fast.stack_sizes import variables_of
from turnout.fast_options import FastOptions
from turnout.graph import Graph, Node
from turnout.memory_plan import MemoryPlan
from turnout.slot_sizes import SlotPlan


class CompileCounter(Protocol):
    """What a plan needs of its backend: the trace counter that tests and stats read, the backend's
    options (``turnout.fast_options.FastOptions``) and its graph."""

    compile_count: int
    options: FastOptions
    graph: Graph


class StepPlan:
    """A program planned for one run signature and stack capacity: what its traces share (error
    codes, the constants its stacks' only pushes pushed and the shapes of their pushes, the fed
    values it is specialised on, its checkpoint slots) and the compiled function of each of its
    steps."""

    platform: str  # where the stacks live, for the memory plan (``budget_inputs``; set by a plan that reads it)

    def __init__(self, backend: CompileCounter, program: Program, fed: set[int], capacity: int,
                 slots: SlotPlan, static_feeds: Optional[dict[Key, Any]] = None) -> None:
        self.backend = backend
        self.program = program
        self.fed = fed
        self.capacity = capacity
        self.codes = ErrorCodes()
        #: fed tensors the plan is specialised on, with their values (``fast.specialise``): constants
        #: of its traces
        self.static_feeds: dict[Key, Any] = dict(static_feeds or {})
        #: the constants that stacks' only pushes pushed, shared by every trace of the plan
        #: (``Emitter.note_push``): a step traced later (a gradient's, perhaps on another device) pops
        #: them as constants
        self.pushed: dict[Any, Any] = {}
        #: stack key -> (element shape, index shape) of its pushes as traced (``Emitter.note_push_shape``),
        #: or ``MIXED``, shared by every trace of the plan: a pop traced where no push has made its
        #: stack yet takes its shape (``Emitter.pending_shape``); the one-device plan lays its stacks
        #: out by it (``Plan.learn_stack_shapes``)
        self.push_shapes: dict[str, Any] = {}
        self.var_nodes, self.written_vars = variables_of(program_nodes(program))
        #: the checkpoint slots of the loops reversed from checkpoints (``turnout.slot_sizes.SlotPlan``)
        self.slots = slots
        self._budgets: dict[Optional[int], Optional[MemoryPlan]] = {}  # run budget -> its memory plan

    def jit(self, fn: Any, donate_argnums: tuple[int, ...] = ()) -> Any:
        """``jax.jit`` of one of this plan's functions."""
        return jax.jit(fn, donate_argnums=donate_argnums)

    def emitter(self, state: dict[str, Any], max_iter: Any, **options: Any) -> Emitter:
        """A fresh ``Emitter`` over the program, starting from ``state`` (``options``: the emitter's,
        see ``Emitter``), with the plan's feeds, the fed values it is specialised on as constants, its
        stacks' pushed constants and its checkpoint slots. Called only while tracing, so it counts a
        trace in the backend's ``compile_count``."""
        self.backend.compile_count += 1  # runs only while tracing
        em = Emitter(self.program, self.codes, self.capacity, max_iter, **options)
        em.state = dict(state)
        em.fed = self.fed
        em.static = self.static_feeds
        em.pushed = self.pushed
        em.push_shapes = self.push_shapes
        em.slot_capacity, em.learn_slots = self.slots.capacity, self.slots.learn
        return em

    def compiled(self, seg: Segment, free_pointers: bool) -> SegmentFn | DrivenLoop:
        """The compiled function of step ``seg``: its ``SegmentFn`` (``f(env_in, state, max_iter) ->
        (writes, live flags of fetched writes, state)``, in the calling convention of
        ``fast.call_spec``, its stacks donated), or for a driven segment its ``DrivenLoop`` (run chunk
        by chunk, its full chunks moved between calls). ``free_pointers``: a driven chunk's pointers
        run free, for a runner that reads each step's error word before any pointer
        (``RunPolicy.check_each_step``); otherwise they stop at the capacity."""
        if seg.driven is None:
            return SegmentFn(seg.items, list(seg.writes), set(seg.fetched), self.emitter, self.jit)
        return DrivenLoop(seg.driven, seg.writes, set(seg.fetched), seg.push, seg.pop, self.capacity, self.emitter,
                          self.jit, seg.measured, free_pointers=free_pointers)

    def budget(self, run_budget: Optional[int]) -> Optional[MemoryPlan]:
        """The memory plan a run of this plan under ``run_budget`` honours (None: no budget applies,
        or the plan has neither stacks nor checkpoint slots), made once per run budget: the plan of
        ``budget_inputs`` (``chunk_store.budget_plan``). The one place both backends make it."""
        if run_budget not in self._budgets:
            nodes, stacks, platform = self.budget_inputs()
            self._budgets[run_budget] = budget_plan(nodes, stacks, platform, run_budget) if stacks else None
        return self._budgets[run_budget]

    def budget_inputs(self) -> tuple[Iterable[Node], list[Node], str]:
        """What the memory plan (``budget``) reads: the nodes whose pushes size the stacks, the plan's
        stacks and checkpoint slots (its ``StackNew`` and ``CheckpointSlots`` nodes), and the
        platform whose memory they use; here the program's, on the plan's ``platform``."""
        nodes = program_nodes(self.program)
        return nodes, [n for n in nodes if n.op in ("StackNew", "CheckpointSlots")], self.platform

    def outcome_of(self, code: int, who: str, moved: int = 0, attempt: bool = False, mark: int = 0) -> Outcome:
        """What error word ``code`` (and, for a fused attempt, high-water mark ``mark``) of a call of
        this plan means (``outcome.decode``), in the words of executor ``who``; ``moved``: stack
        chunks moved out of the devices so far."""
        return decode(self.codes, code, capacity=self.capacity, who=who, moved=moved, attempt=attempt, mark=mark)


__all__ = ["CompileCounter", "StepPlan"]
