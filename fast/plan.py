"""A plan: what the fast backend compiles for one run signature, and the functions it compiles.

Why a module of its own: the backend (``fast.backend``) decides *which* compiled code a run calls
and drives it; this module says *what* is compiled. A ``Plan`` is one model — the program's root
frame cut into **stages**, each a compiled segment of root items or one **driven loop** (a top-level
loop that pushes or pops gradient stacks, compiled to run at most a chunk of iterations per call, see
``stacks``) — and two properties of that model that let a run take a shorter route through it:

- ``Plan.direct_ok``: a plan of ONE compiled segment without gradient stacks is called through
  ``Plan.direct_fn`` with flat arguments and results (``Direct``, in the calling convention of
  ``fast.call_spec``): one jitted call per run;
- ``Plan.fused``: a plan with driven loops also has the whole root frame as one compiled stage, every
  loop a plain ``lax`` loop, which a run attempts first (on a ladder of stack capacities,
  ``capacity_ladder``, whose rungs ``FastOptions`` sets); it cannot swap stack chunks, so an attempt
  that outgrows its stacks is discarded and the stages run instead.

Each compiled function is built from the same ``Emitter`` (``fast.emit``), made by ``Plan.emitter``
(which counts traces in the backend's ``compile_count``), and compiled lazily, by the first run that
needs it: the ``Direct`` call and the fused stage here (``fast.call_spec.flat_call``), a stage as
the partitioned executor's steps are (``fast.step_plan.StepPlan.compiled``: a ``fast.segment.SegmentFn``
or a ``fast.driven.DrivenLoop``).

Stack buffers: gradient stacks whose pushes have static shapes (``Plan.prealloc``) are allocated
before the first stage and passed to every compiled stage as a separate, *donated* argument, so the
stages update them in place; the backend keeps them for the next run of the same plan (the pointer is
reset, entries above it are never read), so steady-state runs allocate no stack memory. The fused
stage makes the small ones inside its call instead (``Plan.inside``, ``inside_stacks``): for a small
buffer, making it costs the call less than taking it and handing it back, and nothing is kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout.fast import stacks as stk
from turnout.fast.call_spec import Body, CallArgs, CallSpec, Traced, flat_call
from turnout.fast.counted_stacks import counted_stacks
from turnout.fast.cut import one_device
from turnout.fast.emit import Emitter, stack_key, stack_key_of
from turnout.fast.held import held_reads
from turnout.fast.regions import CondRegion, Item, Key, Program, WhileRegion, key, nesting, program_nodes
from turnout.fast.stack_sizes import (
    StackMarks,
    capacity_ladder,
    filled_and_emptied_inside,
    inside_stacks,
    stack_bytes,
    stack_dtype,
    stack_infos,
    stack_source_var,
    static_stack_shapes,
)
from turnout.fast.step_plan import CompileCounter, StepPlan
from turnout.fast.values import Handle
from turnout.fast.xla_options import compiler_options
from turnout.graph import Node
from turnout.slot_sizes import SlotPlan

INT32_MAX = 2**31 - 1
INT32_MAX_NP = np.int32(INT32_MAX)


@dataclass
class FusedStage:
    """The whole root frame as one compiled stage (``Plan.fused``): the fused attempt."""

    items: list[Item]
    reads: list[Key]
    writes: list[Key] = field(default_factory=list)
    #: the attempt's compiled function (``fns["seg"]``, made by ``Plan.fused_fn``)
    fns: dict[str, Any] = field(default_factory=dict)
    passthrough: set[Key] = field(default_factory=set)  # set while tracing the fused stage, see _fused_body
    #: how the fused stage's function (``fns["seg"]``) is called and what it returns, set by that
    #: function's trace (``Plan.fused_fn``, ``fast.call_spec``)
    spec: Optional[CallSpec] = None


def positional_stacks(program: Program) -> set[str]:
    """The stacks whose entries the fused stage can check by position instead of by an index record:
    each is pushed by exactly one StackPush, found directly in the body of a loop of the root frame
    (not under a cond, not in a nested loop), with an index of one element or none.

    Why: such a push runs once in every iteration of a loop that runs once per run, so when its
    index is the loop's iteration number (as a gradient loop's is) every entry's index is its
    position, and a pop can compare its expected index with its position: the same check as reading
    the record, without writing one per push (a kernel per stack per forward iteration, 8 to 18% of
    the small LSTM step on the development machine). Whether the index is the position is known
    only at run time, so each push checks it (``stacks.positional``); one that is not sets the
    error word's ``unrecorded`` code, and the attempt is run again with index records
    (``FastBackend._run_fused``)."""
    found: dict[str, int] = {}

    def root(items: list[Item]) -> None:
        for it in items:
            if isinstance(it, WhileRegion):
                for n in it.body:
                    shape = n.inputs[1].shape if isinstance(n, Node) and n.op == "StackPush" else None
                    k = stack_key_of(n) if shape is not None and tuple(shape) in ((), (1,)) else None
                    if k is not None:
                        found[k] = found.get(k, 0) + 1
            elif isinstance(it, CondRegion):
                for b in (False, True):
                    root(it.branches[b])

    root(program.items)
    pushes = _stack_counts(program_nodes(program), "StackPush")
    return {k for k, c in found.items() if c == 1 and pushes.get(k) == 1}


def _stack_counts(nodes: list[Node], op: str) -> dict[str, int]:
    """Stack key -> how many of ``nodes`` are ``op`` (StackPush / StackPop) on that stack."""
    out: dict[str, int] = {}
    for n in nodes:
        k = stack_key_of(n) if n.op == op else None
        if k is not None:
            out[k] = out.get(k, 0) + 1
    return out


class Plan(StepPlan):
    """Everything compiled for one (graph version, fetches, feed signature, capacity): a ``StepPlan``
    of the one device, with its ``Direct`` call and its fused attempt."""

    def __init__(self, backend: CompileCounter, program: Program, fed: set[int], capacity: int,
                 swapped: frozenset[str], platform: Callable[[], str]) -> None:
        nodes = program_nodes(program)
        self._platform = platform  # (the platform whose memory the stacks use, found when ``budget`` asks)
        #: the checkpoint slots: every one their budgets hold until the backend sizes them as it makes
        #: the plan (``SlotSizes.plan``: this capacity until a run needed more, then what it learnt)
        super().__init__(backend, program, fed, capacity,
                         SlotPlan(tuple(n for n in nodes if n.op == "CheckpointSlots")))
        #: the backend's options: the thresholds this plan's stacks and traces follow
        self.options = backend.options
        #: a TensorArray of dynamic size grows with its writes: its buffer holds ``capacity`` entries,
        #: and one more asks for a ``Retry`` at twice the capacity, which only the stages act on
        self.grows = any(n.op == "TensorArrayNew" and n.attrs.get("dynamic_size") for n in nodes)
        self._find_stacks(program, nodes, swapped)
        #: some stack is pushed and popped within one root item (a loop whose body differentiates a
        #: loop of its own): the fused trace then takes the high-water mark as every loop leaves, at
        #: any depth; otherwise after each root item alone (``_fused_body``)
        self.marks_inside = filled_and_emptied_inside(program)
        self.nesting = nesting(program.items)
        #: the staged path: the program cut for one device (``fast.cut``), compiled segments and driven loops
        self.stages = one_device(program, fed, self.held)
        #: the fused attempt, for a program whose stages drive a loop or keep gradient stacks (a stage
        #: that pushes inside a loop compiled whole sizes its stacks by the ladder too, and has a lane)
        self.fused = (self._fused_stage() if any(st.driven is not None for st in self.stages) or self.stack_nodes
                      else None)
        self.fused_warm = False  # the fused stage has run once
        #: why the fused stage was dropped, where its trace refused (``Discard.refused``): what
        #: ``Session.explain`` says of a plan that runs its stages instead
        self.refused = ""
        # the capacity ladder of the fused attempt (``FastBackend._run_fused_sized``): its capacities,
        # smallest first, this plan's last; the plans of the rungs reached so far, by capacity; and
        # the rung that held the last run
        self.ladder: Optional[list[int]] = None
        self.rungs: dict[int, Plan] = {}
        self.rung: Optional[Plan] = None
        # the last staged run swapped stack chunks: the next run most likely overflows a chunk too, so
        # it skips the fused attempt (a loop of a million iterations would not fit either time)
        self.predict_overflow = False
        #: the high-water marks of the last runs of this plan's ladder (``stack_sizes.StackMarks``):
        #: they choose the rung a run starts on; made with the ladder (``FastBackend._ladder``)
        self.marks: Optional[StackMarks] = None
        #: the program this plan runs, as the backend names it (``BackendShell._program_key``)
        self.program_key: Any = None

    def _find_stacks(self, program: Program, nodes: list[Node], swapped: frozenset[str]) -> None:
        """The plan's gradient stacks: those it holds, those it gives buffers, where the fused stage
        keeps each and how it checks them (the attributes below, read by every trace and run)."""
        #: the stacks this plan holds (``fast.held``): no buffer, no chunk, no push; their pops return
        #: the Variable's value as their loop began
        self.held = held_reads(program)
        held_ids = {h.stack for h in self.held.values()}
        self.stack_nodes = [n for n in nodes if n.op == "StackNew" and n.id not in held_ids]
        self.stack_info = {k: v for k, v in stack_infos(nodes).items() if k not in self.held}
        #: the loops a run's memory plan swaps (``MemoryPlan.swapped``), besides those that ask for it
        self.swapped = swapped
        #: the stacks the fused stage keeps in host memory: those of the loops that swap
        #: (``swap_memory=True``, or ``swapped``). Where the platform's host memory is apart from its
        #: device's (``host_apart``), each push moves its value there inside the call and each pop
        #: brings it back (``StackValue.host``), so a swapping loop holds none of its stack on the
        #: device whatever its trip count, with no driver between chunks (the staged path's way)
        self.host = frozenset(k for k, v in self.stack_info.items() if v.swap or v.loop in swapped)
        #: whether the platform's host memory is apart from its device memory (not the CPU's, where
        #: JAX drops the moves): only there are host stacks made inside the call and moved at each
        #: push and pop; on the CPU they are kept between runs like any other stack, in what already
        #: is host memory, since making them at every run cost it 2 to 20% of the memory
        #: experiment's step (``benchmarks/paper/memory.py``)
        self.host_apart = stk.host_apart(jax.default_backend())
        self.prealloc = {i: v for i, v in static_stack_shapes(nodes).items() if i not in held_ids}
        self._lay_out_stacks()
        #: stacks the fused stage runs without an index record (``positional_stacks``), static or
        #: not (one whose shapes are known only when tracing makes no record at its first push);
        #: emptied for good by a run that pushed one of them away from its position
        #: (``record_every_stack``)
        self.positional = positional_stacks(program)
        #: the counted stacks (``fast.counted_stacks``) by the root loop heading their chains, less
        #: the held ones; the fused trace proves their pushes and pops
        self.counted = {head: kept for head, found in counted_stacks(program, stack_key_of).items()
                        if (kept := [cs for cs in found if cs.key not in self.held])}

    @property
    def push_limit(self) -> int:
        """The entries the fused attempt's stacks count up to before a push is an overflow: the top of
        the ladder this plan's rung may belong to (``FastOptions.stack_chunk``), or its own capacity
        when that is larger. Why count past the rung: the attempt's high-water mark then says which
        rung holds the run (``FastBackend._run_fused_sized`` goes there at once, compiling no rung
        between), where stopping at the rung said only that it did not."""
        return max(self.capacity, self.ladder_top)

    @property
    def ladder_top(self) -> int:
        """The top of the fused attempt's ladder of capacities: ``FastOptions.stack_chunk``, or, for a
        plan whose every gradient stack the fused stage keeps in host memory (``host``),
        ``FastOptions.host_stack_limit``. Why two: the chunk bounds what a stack holds on the device
        at once; a stack in host memory holds nothing there, and the staged path, which a run past
        the top takes, would only move the same entries to host memory chunk by chunk, driven from
        the host."""
        return self.options.host_stack_limit if self.all_host else self.options.stack_chunk

    @property
    def all_host(self) -> bool:
        """Whether the fused stage keeps every gradient stack of this plan in host memory (``host``)."""
        keys = [k for k, _, _ in self.stack_slots]
        return bool(keys) and all(k in self.host for k in keys)

    @property
    def index_bytes(self) -> dict[str, int]:
        """Per kept stack with an index record in the fused stage, the record's bytes: it exists on
        the device only within a call of that stage (the memory accounting counts it there)."""
        return {k: self.capacity * math.prod(shapes[1]) * 4 for k, (_, shapes) in self.kept.items()
                if k not in self.positional}

    @property
    def inside_bytes(self) -> dict[str, int]:
        """Per stack made inside the fused stage's call (``inside``), its device bytes: its buffer's
        and index record's, or its record's alone for a stack in host memory (``host_bytes``). They
        exist only within that call."""
        return {k: stack_bytes(self.capacity, dtype, shapes, k not in self.positional)
                - self.host_bytes.get(k, 0) for k, (dtype, shapes) in self.inside.items()}

    @property
    def host_bytes(self) -> dict[str, int]:
        """Per static stack the fused stage keeps in host memory (``host``), its value buffer's bytes."""
        return {k: stack_bytes(self.capacity, dtype, shapes, False)
                for k, (dtype, shapes) in self.inside.items() if k in self.host}

    def _lay_out_stacks(self) -> None:
        """The stacks' layout, from ``prealloc``: what each run allocates, passes and keeps."""
        #: per gradient stack, in ``stack_nodes`` order: its state key, element dtype and static shapes
        #: (``prealloc``; ``None``: known only when tracing), computed once for every run to read
        self.stack_slots: list[tuple[str, Any, Optional[tuple[Any, ...]]]] = [
            (stack_key(Handle("stack", sn.id)), stack_dtype(sn), self.prealloc.get(sn.id)) for sn in self.stack_nodes]
        #: the stacks of static shapes (``prealloc``): key -> (dtype, (element shape, index shape))
        self.static = static = {k: (dtype, shapes) for k, dtype, shapes in self.stack_slots if shapes is not None}
        #: the static stacks small enough to be made inside the fused stage's call (``inside_stacks``):
        #: key -> (dtype, (element shape, index shape)); they are neither passed in nor kept
        self.inside = inside_stacks(static, self.capacity, self.options.inside_limit(jax.default_backend()))
        # (and every stack it keeps in host memory: a host buffer kept between runs would only be
        # passed back in, and making it inside was the faster way on a GPU, ``benchmarks/host_memory_loop.py``)
        if self.host_apart:
            self.inside.update({k: v for k, v in static.items() if k in self.host})
        #: the stacks whose buffers are kept between runs (``prealloc``, less ``inside``): key ->
        #: (dtype, (element shape, index shape)). The fused stage takes and returns their value
        #: buffers alone.
        self.kept = {k: v for k, v in static.items() if k not in self.inside}

    def learn_stack_shapes(self) -> bool:
        """Take as static, for every stack ``prealloc`` lacks, the one shape a trace saw its pushes push
        (``push_shapes``), and lay the stacks out again; True when it did, and the
        fused stage is then traced again, with those stacks allocated before it and kept between runs
        (the fused attempt learns them from a trace before it compiles:
        ``FusedAttempts._learn_stack_shapes``). Why: a stack's shapes may be unknown in the graph (a placeholder of
        ``None`` batch, an imported TF1 model's loops) yet fixed for this plan, which is made for one
        signature of feeds; a stack made inside each call keeps a repeated run off its lane, which
        needs every stack's buffers kept (the imported LSTM training step took the general path at
        every run). False where a stack's shapes are still unknown, or differ between its pushes."""
        pending = self.unlearnt_stacks()
        if not pending or any(not isinstance(self.push_shapes.get(k), tuple) for k in pending.values()):
            return False
        self.prealloc.update({i: self.push_shapes[k] for i, k in pending.items()})
        self._lay_out_stacks()
        if self.fused is not None:
            self.fused.fns.pop("seg", None)
        return True

    def unlearnt_stacks(self) -> dict[int, str]:
        """The stacks whose shapes neither the graph nor a trace has told this plan yet (their
        ``StackNew`` node's id -> state key): made inside each call until ``learn_stack_shapes``."""
        return {sn.id: stack_key(Handle("stack", sn.id)) for sn in self.stack_nodes if sn.id not in self.prealloc}

    def record_every_stack(self) -> None:
        """From now on the fused stage keeps an index record for every stack (its function is traced
        again by the next attempt): a run pushed a positional stack away from its position."""
        self.positional = set()
        if self.fused is not None:
            self.fused.fns.pop("seg", None)

    def _fused_stage(self) -> FusedStage:
        """The whole root frame as one compiled stage, driven loops included as plain ``lax``
        loops: the fast path of a program with gradient stacks whose pushes all fit their chunk.

        Why: the staged path costs several jitted calls and Python driving per run (milliseconds),
        which dominates small models. The fused stage cannot swap: a push beyond the chunk sets the
        error word (``overflow``), the loops that push or pop stop there (``Emitter.stop_on_error``),
        and ``FastBackend._run_fused`` discards the attempt — values, Variables, errors — and runs
        the staged path instead.
        """
        ns = program_nodes(self.program)
        ids = {n.id for n in ns}
        reads = sorted({key(t) for n in ns for t in n.inputs if t.node.id not in ids or t.node.id in self.fed}
                       | {key(o) for n in ns if n.id in self.fed for o in n.outputs})
        produced = {key(o) for n in ns for o in n.outputs}
        return FusedStage(list(self.program.items), reads, sorted(produced & set(self.program.fetch_keys)))

    @property
    def direct_ok(self) -> bool:
        """Whether runs take the ``Direct`` call: one compiled segment, no gradient stacks, no
        TensorArray of dynamic size (whose growth past the capacity only the stages retry). (Any
        fetch fits its convention: a TensorArray or a handle crosses the call as it is, a value dead
        at trace time stays out of it and is refused on the host, as on every route.)"""
        return len(self.stages) == 1 and self.stages[0].driven is None and not self.stack_nodes and not self.grows

    # ---- compiled functions ---------------------------------------------------------------------
    @property
    def has_loops(self) -> bool:
        """Whether the program has a loop: only then does a run's ``max_iterations`` reach the
        compiled code (a loop-free ``Direct`` function takes no bound argument)."""
        return any(n.op == "LoopCond" for n in program_nodes(self.program))

    def direct_fn(self, args: CallArgs, fetch_keys: tuple[Key, ...], record: Callable[[CallSpec], None]) -> Any:
        """The ``Direct`` call (see ``Direct``): the plan's single stage as a function of the calling
        convention (``fast.call_spec``) for arguments laid out as ``args`` say (the fed values, the
        Variables' device copies, the bound only where the program has a loop: every argument costs
        the call's dispatch a few microseconds, which is what a small program's run is made of),
        returning each fetched key once and the Variables it changed; ``record`` takes the
        ``CallSpec`` of each trace. A Variable's new value that is also a fetched value (the output of
        an update step) is returned once (``CallSpec.aliases``)."""
        st = self.stages[0]
        outs = tuple(dict.fromkeys(fetch_keys))

        def body(feeds: dict[Key, Any], given: dict[str, Any], stacks: dict[str, Any], bound: Any) -> Traced:
            # a numpy 0, not a traced one: it stays a constant (and the flags go) unless a check sets it
            em = self.emitter({"err": np.int32(0), **given}, INT32_MAX_NP if bound is None else bound)
            env = dict(feeds)
            em.run_items(st.items, env)
            vals = {k: env[k] for k in outs}
            changed = {k: em.state[k] for k in given if em.state[k] is not given[k]}
            return Traced(vals, em.state["err"], {k: em.lives.get(k, True) for k in outs}, changed)

        return flat_call(args, body, self.jit, record)

    def budget_inputs(self) -> tuple[Iterable[Node], list[Node], str]:
        """The graph's nodes, the stacks this plan gives buffers (not those it holds) and its
        checkpoint slots, on the platform of the backend's device (``FastBackend.memory_platform``)."""
        return self.backend.graph.nodes, [*self.stack_nodes, *self.slots.nodes], self._platform()

    def jit(self, fn: Any, donate_argnums: tuple[int, ...] = ()) -> Any:
        """``jax.jit`` of one of this plan's functions, with the options the backend gives XLA
        (``fast.xla_options``, from ``FastOptions.gpu_command_buffers``)."""
        return jax.jit(fn, donate_argnums=donate_argnums,
                       compiler_options=compiler_options(self.options.gpu_command_buffers))

    def emitter(self, state: dict[str, Any], max_iter: Any, **options: Any) -> Emitter:
        """``StepPlan.emitter`` with the backend's frame height and unrolling bound, and the plan's
        held stacks (``options``: ``stop_on_error``, ``free_pointers``,
        ``push_limit``, see ``Emitter``)."""
        em = super().emitter(state, max_iter, frame_height=self.options.frame_height,
                             unroll_max=self.options.unroll_max, **options)
        em.held = self.held
        return em

    def fused_fn(self, args: CallArgs) -> Any:
        """The fused stage's jitted function for arguments laid out as ``args`` say (feeds, state,
        stacks, the bound), in the calling convention of ``fast.call_spec``; its trace records its
        results' layout in ``FusedStage.spec``. The stacks are donated."""
        st = self.fused
        assert st is not None

        def record(spec: CallSpec) -> None:
            st.spec = spec

        return flat_call(args, self._fused_body(st), self.jit, record)

    def _fused_body(self, st: FusedStage) -> Body:
        """The body of the fused stage (``fused_fn``): the whole root frame, its stack-pushing loops
        stopping on an error (``Emitter.stop_on_error``), so an attempt that overflows stops there.

        It runs a whole root frame, so it starts with no error and every stack empty: its state has no
        error word and its stacks' pointers are ``None``, both set to 0 here as constants, and its live
        flags come back after the error word in the call's one flags vector (``fast.call_spec``). Why:
        each argument costs the call a transfer and each result read back costs a wait (about 5 and
        20 to 50 µs on the development machine), which for the small LSTM step was a third of the run.

        For the same reason its stacks cross the call as little as they can: a kept stack
        (``Plan.kept``) comes in and goes out as its value buffer alone, and its index record (a few
        bytes per entry, read only by this run's pops) is made inside the call; a state entry that
        leaves as it came in (a Variable no op assigned) is not returned. For the small LSTM step this
        halved the call's arguments and results (24 and 26 to 14 and 14)."""
        fetch = set(self.program.fetch_keys)

        def body(feeds: dict[Key, Any], given: dict[str, Any], stacks: dict[str, Any], max_iter: Any) -> Traced:
            stacks = {k: self._fused_entry(k, v) for k, v in stacks.items()}
            stacks.update({k: self._fused_entry(k, None) for k in self.inside})
            inside = {"mark": np.int32(0)} if self.marks_inside else {}
            em = self.emitter({"err": np.int32(0), **inside, **given, **stacks}, max_iter,
                              stop_on_error=True, free_pointers=True, push_limit=self.push_limit)
            # its stacks all start empty: the counted ones are proved (``fast.counted_stacks``)
            em.counted, em.resizable = self.counted, set(self.inside)
            env = dict(feeds)
            mark: Any = np.int32(0)
            for it in st.items:  # the high-water mark: a stack is fullest as the root item that filled it ends
                em.run_items([it], env)
                mark = em.stack_mark(mark)
            st.passthrough = {k for k in st.writes if k in feeds and env[k] is feeds[k]}
            out = {k: env[k] for k in st.writes if k not in st.passthrough}
            # the pointers are not returned: the next attempt starts every stack empty again
            mark = em.stack_mark(em.state.pop("mark", mark))
            ended = {k: self._fused_exit(k, v) for k, v in em.state.items()
                     if k != "err" and v is not given.get(k) and not k.startswith(stk.HELD_PREFIX)
                     and k not in self.inside}
            return Traced(out, em.state["err"], {k: em.lives.get(k, True) for k in st.writes if k in fetch}, ended,
                          mark)

        return body

    def _fused_entry(self, k: str, v: Any) -> stk.StackValue:
        """A stack on its way into the fused stage (while tracing): a kept stack's value buffer gets
        a fresh index record (none for a positional stack) and the pointer 0, and a stack made inside
        (``v`` None, ``Plan.inside``) a fresh buffer too; any other stack is still pending (allocated
        at its first push inside the call) and comes as it is."""
        host = k in self.host and self.host_apart
        if isinstance(v, stk.StackValue):
            if v.pending:  # (a positional stack's first push makes no index record)
                return stk.StackValue(v.capacity, v.dtype, record=v.record and k not in self.positional, host=host)
            return v
        dtype, (elem_shape, index_shape) = self.static[k]
        if v is None:
            v = stk.placed(jnp.zeros((self.capacity, *elem_shape), dtype), host)
        record = None if k in self.positional else jnp.zeros((self.capacity, *index_shape), jnp.int32)
        return stk.StackValue(self.capacity, dtype, v, record, np.int32(0), host=host)

    def _fused_exit(self, k: str, v: Any) -> Any:
        """A state entry on its way out of the fused stage: a kept stack's value buffer alone, any
        other stack without its pointer (the next attempt starts every stack empty)."""
        if not isinstance(v, stk.StackValue):
            return v
        if k in self.kept:
            return v.buf
        return v.replace(v.buf, v.idx, None)


@dataclass
class Direct:
    """The one-call path of a plan with a single compiled stage and no gradient stacks.

    Why: for small programs the per-run Python work of the general path (building env and state
    dicts, ``jnp.asarray`` of every feed and scalar — each an eager dispatch of tens of
    microseconds —, reading the error word, the live flags and the outputs back one by one) costs more
    than the computation. Here everything that depends only on (graph version, fetches, feed
    signature, variable signature) is fixed once; a run is one jitted call (``Plan.direct_fn``) of the
    calling convention of ``fast.call_spec`` on the fed numpy arrays, and one ``np.asarray`` per output.
    """

    plan: Plan
    fn: Any
    #: the call's flat arguments: the feeds (sorted keys), the Variables (``var_names``' state keys)
    args: CallArgs
    var_names: tuple[str, ...]
    #: the stats of every run on this path but its ``stage_seconds`` (copied, never shared)
    stats: dict[str, Any] = field(default_factory=dict)
    #: the call's results, set by its trace (``Plan.direct_fn``)
    spec: Optional[CallSpec] = None

    def record(self, spec: CallSpec) -> None:
        """Keep the ``CallSpec`` of the call's trace."""
        self.spec = spec


__all__ = ["INT32_MAX", "INT32_MAX_NP", "CompileCounter", "Direct", "FusedStage", "Plan", "capacity_ladder",
           "inside_stacks", "positional_stacks", "stack_bytes", "stack_dtype", "stack_infos", "stack_source_var",
           "static_stack_shapes"]
