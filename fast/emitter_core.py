"""The emitter's core: the trace state of one run of a region tree, and what every region reads and
writes through it (the ``LoweringContext`` of the lowering rules): the run-time state (Variables,
gradient stacks, the error word), the environment's reads along control-flow edges, and the
lowering of one node.

Why a module of its own: conditionals (``fast.conds``), full loops (``fast.loops``), counted nests
(``fast.counted_nests``) and light loops (``fast.light_loops``) each add one kind of region on top
of this core, as classes stacked in that order; ``fast.emit.Emitter`` is the top of the stack.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import partial
from typing import Any, NoReturn, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout import kernels
from turnout.errors import UnsupportedError, describe_node
from turnout.fast import stacks as stk
from turnout.fast.lower_node import lower_node
from turnout.fast.lowering_base import NeedsStatic, Shows
from turnout.fast.outcome import NONTERM, ErrorCodes
from turnout.fast.plumbing import Wire
from turnout.fast.ranges import Ranges, propagate
from turnout.fast.regions import CondRegion, Item, Key, Program, WhileRegion, key
from turnout.fast.state_keys import pushed_once, stack_key, var_key
from turnout.fast.tracing import same_constant
from turnout.fast.values import DEAD, Handle, Stacked, is_static
from turnout.fast_options import FRAME_HEIGHT, UNROLL_MAX
from turnout.graph import Node, Tensor

Env = dict[Key, Any]

#: ``EmitterCore.pushed``'s mark of a stack pushed a traced value, or different constants
MIXED = object()


class EmitterCore(ABC):
    """Runs region trees on tracers. ``state`` is the current run-time state (a dict of pytrees:
    ``var:NAME``, ``stack:ID``, ``err``); rules update it through the LoweringContext methods.

    The configuration is given when the emitter is made; the trace state each layer keeps is made
    by its ``init_trace_state``, which every layer extends."""

    def __init__(self, program: Program, codes: ErrorCodes, capacity: int, max_iter: Any,
                 frame_height: int = FRAME_HEIGHT, stop_on_error: bool = False, free_pointers: bool = False,
                 push_limit: Optional[int] = None, unroll_max: int = UNROLL_MAX) -> None:
        self.program = program
        #: the most bodies a loop is unrolled to (``fast.unrolled``, ``FastOptions.unroll_max``)
        self.unroll_max = unroll_max
        #: light loops with more than this many levels of loops in them are frames (``FastOptions.frame_height``).
        #: Why not all of them: XLA:CPU compiles the innermost levels of a nest, as long as they access
        #: under 1 kB (``small-while-loop-hoisting``), to one kernel, where a check's constant costs
        #: nothing but every byte counts (a frame's check reads the word the loop began with, which XLA
        #: copies); above them every distinct kernel is compiled on its own, and only frames keep the
        #: checks of a nest one kernel. About eight levels of a plain nest fit.
        self.frame_height = frame_height
        self.codes = codes
        self.capacity = capacity
        self.max_iter = max_iter
        self.fetch_set = set(program.fetch_keys)
        #: Set for the fused trace of a program with gradient stacks (``backend.Plan.fused``): a loop
        #: that pushes or pops stops as soon as the error word is set, so a fused attempt whose stack
        #: overflows costs at most one chunk of iterations before the staged path takes over. Given
        #: when the emitter is made (``Plan.emitter``), fixed for its trace.
        self.stop_on_error = stop_on_error
        #: Stack pointers updated by ``ptr + 1`` / ``ptr - 1`` whether or not the push or pop fitted
        #: (``stacks.push``), where no pointer of a run with an error set is ever read: the fused trace,
        #: and a driven loop's chunk on one device (``StepPlan.compiled``). Given when the emitter is made.
        self.free_pointers = free_pointers
        #: With ``free_pointers``: a push overflows only at this many entries (``stacks.push``); the
        #: fused attempt counts past its rung up to the top of its ladder, and its high-water mark
        #: (``note_mark``) then says which rung holds the run. ``None``: at the capacity.
        self.push_limit = push_limit
        self.state: dict[str, Any] = {}
        self.lives: dict[Key, Any] = {}
        self.fed: set[int] = set()  # nodes whose outputs were fed: never computed
        # fed tensors the plan is specialised on (``lowering.NeedsStatic``): their values, as constants
        self.static: dict[Key, Any] = {}
        # the speculable nodes a raised case chain already computed up front (never computed again)
        self.known: set[int] = set()
        #: held stacks (``fast.held``): stack key -> its ``HeldRead`` (the Variable, the loop at whose
        #: start it is taken). Empty unless the plan asks (``Plan.emitter``): a trace that holds must
        #: run the loop and the pops in one state.
        self.held: dict[str, Any] = {}
        #: the numbers (``regions.loop_number``) of the light loops whose bodies are being traced,
        #: innermost last: a light loop's nonterm code counts from the innermost (``NONTERM``)
        self.frames: list[int] = []
        #: > 0 while the body of a nest whose bound checks were made before it is traced
        #: (``CountedNests.hoist_checks``); ``refuted`` once something in it wrote the error word
        self.hoist_depth: int = 0
        self.refuted: bool = False
        #: stack key -> the constant its one push pushed while tracing (``note_push``); a plan shares
        #: one dict between its traces, so a stage traced later (a driven backward loop) sees what an
        #: earlier one pushed
        self.pushed: dict[Any, Any] = {}
        #: stack key -> (element shape, index shape) its pushes pushed while tracing, ``MIXED`` where
        #: two differ (``note_push_shape``); a plan shares one across its traces (``Plan.learn_stack_shapes``)
        self.push_shapes: dict[str, Any] = {}
        #: the integer ranges of traced values (``fast.ranges``): the counters of the counted loops
        #: whose bodies are being traced, and what is computed from them
        self.ranges: Ranges = Ranges()
        #: TensorArrayWrite node id -> the slots its array was known to hold written when the loop
        #: that writes it was entered, while that loop's body is traced (``fresh_write``,
        #: ``ranges.first_write``)
        self.fresh_writes: dict[int, frozenset[int]] = {}
        #: the most checkpoint slots a recomputed loop gets, and where a run that needed more says so
        #: (``fast.lower_state``: ``CheckpointSlots``, ``CheckpointTrips``); ``None``, every slot its
        #: budget holds, and nowhere, unless the plan sizes them (``Plan.emitter``)
        self.slot_capacity: Optional[int] = None
        self.learn_slots: Optional[Callable[[Any], None]] = None
        #: id of a high-water mark -> (the mark, the stack pointers already folded into it): ``stack_mark``
        self.marks: dict[int, tuple[Any, dict[str, Any]]] = {}
        self.init_trace_state()

    def init_trace_state(self) -> None:  # noqa: B027 (a hook each layer extends, empty at the core)
        """The trace state of the layers above the core (each extends this, calling it first): the
        core's own is made by ``__init__``."""

    # ---- LoweringContext ------------------------------------------------------------------------
    def check(self, ok: Any, message: str, code: str = "kernel", shows: Optional[Shows] = None) -> None:
        """The error word set to the code of ``message`` where ``ok`` does not hold. ``shows``: a
        message that depends on run-time values (an ``Assert``'s data), made on the host from them
        when this check is the run's first failure (``ErrorCodes.detail``; the error word carries a
        code, not values)."""
        if is_static(ok) and bool(ok):
            return
        bad, c = ~jnp.asarray(ok, bool), self.codes.code(code, message)
        if shows is not None:
            text, values = shows
            record = partial(self.codes.detail, c, text)
            jax.lax.cond(self._first_failure(bad), lambda vs: jax.debug.callback(record, *vs), lambda vs: None,
                         [jnp.asarray(v) for v in values])
        self._set_err(bad, c)

    def _set_err(self, bad: Any, code: int) -> None:
        """The error word set to ``code`` where ``bad`` holds and no earlier error set it."""
        if self.hoist_depth:  # an error inside a nest whose bound checks were made first
            self.refuted = True  # (the nest is traced again without them: ``LightLoops.run_light_while``)
        err = jnp.asarray(self.state["err"], jnp.int32)
        self.state["err"] = jax.lax.select(self._first_failure(bad), jnp.full_like(err, code), err)

    def _first_failure(self, bad: Any) -> Any:
        """Where ``bad`` holds and no earlier check has set the error word: the run's first failure.
        (lax ops, not jnp.where and operators: each of those is a nested jit call, one more function
        per check to trace and lower.)"""
        err = jnp.asarray(self.state["err"], jnp.int32)
        return jax.lax.bitwise_and(jax.lax.eq(err, np.int32(0)), jnp.asarray(bad, bool))

    def stack_mark(self, mark: Any) -> Any:
        """``mark`` raised to the most entries any gradient stack of the state holds now (one scalar
        ``max`` per stack that holds any). A stack holds the most entries just after the forward
        loop that pushed them exits, before its backward loop pops any: the fused trace asks after
        each root item, and, where a root item both fills and empties a stack
        (``Plan.marks_inside``), as each loop leaves (``note_mark``).

        A pointer is folded into a mark once: each mark remembers the pointers it is already at least
        (``marks``), so a root item that leaves a stack's pointer as it was adds no op. Why: ``max``
        is idempotent, and folding every stack after every root item made a model with many stacks
        and many root items trace, lower and compile one ``max`` per stack per item (about 20 000 for
        an imported bidirectional GRU, seconds of its first run)."""
        held, folded = self.marks.pop(id(mark), (None, {}))  # (popped: this call's to extend)
        folded = folded if held is mark else {}
        for k, v in self.state.items():
            if k.startswith(stk.STACK_PREFIX) and isinstance(v, stk.StackValue) and v.ptr is not None \
                    and folded.get(k) is not v.ptr and not (is_static(v.ptr) and int(v.ptr) == 0):
                mark = jax.lax.max(jnp.asarray(mark, jnp.int32), jnp.asarray(v.ptr, jnp.int32))
                folded[k] = v.ptr
        self.marks[id(mark)] = (mark, folded)
        return mark

    def note_mark(self) -> None:
        """The state's high-water mark (``"mark"``, where the trace keeps one) raised to what the
        stacks hold now (``stack_mark``). Called as each loop leaves (``emit.Emitter.run_while``), at
        any depth; a trace whose state has no mark (every trace but a fused one whose root items
        fill and empty a stack) does nothing. Why the mark is then state: the loop that empties the
        stack runs inside the same root item, so only a value carried through the loops (and conds)
        between sees the stack full."""
        if "mark" in self.state:
            self.state["mark"] = self.stack_mark(self.state["mark"])

    def _leave_frame(self, before: Any, off: int) -> None:
        """The error word as a light loop leaves it, its nonterm codes counted from the enclosing
        loop: a code set inside the loop (the word was 0 when the loop began, ``before``) counted
        from this loop is ``off`` more counted from the enclosing one (``NONTERM``)."""
        err = self.state["err"]
        if err is before or (is_static(before) and int(before) != 0):
            return  # nothing inside could set it, or an error before the loop did
        err = jnp.asarray(err, jnp.int32)
        inner = jax.lax.ge(err, np.int32(NONTERM))
        if not is_static(before):
            inner = jax.lax.bitwise_and(inner, jax.lax.eq(jnp.asarray(before, jnp.int32), np.int32(0)))
        self.state["err"] = jax.lax.select(inner, jax.lax.add(err, np.int32(off)), err)

    def read_var(self, node: Node, h: Handle) -> Any:
        """The traced value of the Variable behind handle ``h``, read by ``node``; an unknown Variable raises
        ``UnsupportedError``."""
        try:
            return self.state[var_key(h.name)]
        except KeyError:
            raise UnsupportedError(f"fast backend: {describe_node(node)} reads unknown Variable {h.name!r}") from None

    def write_var(self, h: Handle, value: Any) -> None:
        """Set the Variable behind handle ``h`` to ``value`` in the traced state. A Variable keeps its shape: a
        compiled program's state has fixed shapes, so an assign that changes it raises ``UnsupportedError``."""
        old = self.state[var_key(h.name)]
        if jnp.shape(old) != jnp.shape(value):
            raise UnsupportedError(f"fast backend: Variable {h.name!r} changes shape from {jnp.shape(old)} to "
                                   f"{jnp.shape(value)}")
        self.state[var_key(h.name)] = value

    def get_stack(self, node: Node, h: Handle) -> stk.StackValue:
        """The gradient stack behind handle ``h``, read by ``node``: made pending on first use, of the trace's
        ``capacity`` and the dtype a StackPush pushes (else the node's ``dtype`` attr)."""
        k = stack_key(h)
        if k not in self.state:
            dtype = node.inputs[2].dtype.numpy if node.op == "StackPush" else np.dtype(node.attrs["dtype"])
            self.state[k] = stk.StackValue(self.capacity, dtype)
        return self.state[k]  # type: ignore[no-any-return]

    def set_stack(self, h: Handle, s: stk.StackValue) -> None:
        """Put the stack behind handle ``h`` back into the traced state after a push or pop."""
        self.state[stack_key(h)] = s

    def holds(self, h: Handle) -> bool:
        """Whether stack ``h`` is held (``fast.held``): its pushes do nothing."""
        return stack_key(h) in self.held

    def held_value(self, node: Node, h: Handle) -> Any:
        """What a pop of held stack ``h`` returns: the Variable's value as its loop began (``hold``)."""
        try:
            return self.state[stk.HELD_PREFIX + stack_key(h)]
        except KeyError:  # the loop that takes it was not traced before this pop: a fault of ours
            raise UnsupportedError(f"fast backend: {describe_node(node)} pops a held stack before its loop "
                                   "ran") from None

    def hold(self, r: WhileRegion, state: dict[str, Any]) -> None:
        """Take the values of the stacks held at loop ``r``'s start into ``state``: the Variables
        they read, as they are now (nothing in ``r`` assigns them, ``fast.held``)."""
        for k, h in self.held.items():
            if h.loop is r and var_key(h.var_name) in state:
                state[stk.HELD_PREFIX + k] = state[var_key(h.var_name)]

    def note_push(self, node: Node, h: Handle, value: Any, index: Any = None) -> None:
        """Record a push of ``value`` on stack ``h`` by StackPush ``node``: a constant while tracing (a
        forward value's shape, which a compiled loop keeps fixed) pushed by the only StackPush of that
        stack in the whole graph is what every pop of it returns, and ``pushed_constant`` says so.
        Why: the gradient of a value of partly known shape saves its shape on a stack and builds
        zeros of it in the backward loop (``Fill``); XLA needs that shape when compiling, and here it
        is known. A constant pushed under an ``index`` known while tracing (a loop unrolled while
        tracing, ``fast.unrolled``, whose shapes differ per iteration) is what a pop under that index
        returns."""
        if h.name not in pushed_once(node.graph):
            return
        k = stack_key(h)
        self._note_constant(k, value)
        if index is not None and is_static(index):
            self._note_constant((k, np.asarray(index).tobytes()), value)

    def _note_constant(self, k: Any, value: Any) -> None:
        """``pushed[k]``: the constant pushed under ``k``, or ``MIXED`` where traced or different values were."""
        prev = self.pushed.get(k)
        if not is_static(value):
            self.pushed[k] = MIXED
        elif prev is None:
            self.pushed[k] = np.array(value)  # (a copy: the pushed value is never changed after)
        elif prev is not MIXED and not same_constant(prev, value):
            self.pushed[k] = MIXED  # (one push node traced twice to different constants: a case chain's)

    def note_push_shape(self, h: Handle, value: Any, index: Any) -> None:
        """Record the shapes of a push of ``value`` at ``index`` on stack ``h``, as traced."""
        k = stack_key(h)
        got = (tuple(int(d) for d in jnp.shape(value)), tuple(int(d) for d in jnp.shape(index)))
        prev = self.push_shapes.get(k)
        self.push_shapes[k] = got if prev is None or prev == got else MIXED

    def pending_shape(self, n: Node, h: Handle) -> tuple[int, ...]:
        """The element shape that StackPop ``n`` returns, traced where no push has made stack ``h``
        (it raises underflow if it runs): the one shape a trace of the plan saw pushed there, else
        its static shape with 0 for each unknown dimension. Why the pushed one: a backward loop
        keeps its carries' shapes only with it where its forward loop ran no iteration in another
        call (on another device, or driven from the host; ``HostControl.learn_unrun``)."""
        got = self.push_shapes.get(stack_key(h))
        if isinstance(got, tuple):
            return got[0]
        return tuple(d or 0 for d in (n.outputs[0].shape or ()))

    def pushed_constant(self, h: Handle, index: Any = None) -> Any:
        """The constant every push of stack ``h`` pushed, or every push under ``index`` where that is
        known while tracing (see ``note_push``), or ``None``. Every push of a forward loop is traced
        before any pop of its gradient (program order within a trace, stage order across a plan's
        traces), so a pop never reads a constant that a later push contradicts."""
        k = stack_key(h)
        v = self.pushed.get(k)
        if (v is None or v is MIXED) and index is not None and is_static(index):
            v = self.pushed.get((k, np.asarray(index).tobytes()))
        return None if v is None or v is MIXED else v

    # ---- reads along control-flow edges ---------------------------------------------------------
    def wire(self, wires: list[Wire], src: Env, dst: Optional[Env] = None) -> None:
        """Apply the plumbing's ``wires`` (``fast.plumbing``) from ``src`` into ``dst`` (``src``
        itself when None): each output takes its source as ``read`` passes it on, or the constant."""
        out = src if dst is None else dst
        for w in wires:
            out[w.dst] = w.value if w.src is None else self.read(src, w.src, w.reader)

    def read(self, env: Env, t: Tensor, reader: Node) -> Any:
        """The value of ``t`` as the structural node ``reader`` (a Switch, Merge, Enter, Exit) passes
        it on. Why a method: on one device it is just the environment's value, but the SPMD tier
        (``turnout.devices.spmd``) overrides it to move the value to ``reader``'s device first."""
        return env[key(t)]

    def read_pred(self, env: Env, t: Tensor) -> Any:
        """The value of predicate ``t`` as a ``lax.cond`` or loop test reads it: on one device the
        environment's value; the SPMD tier overrides it to share the predicate with every device, so
        that all of them take the same branch and run the same number of iterations."""
        return env[key(t)]

    def predicate(self, env: Env, t: Tensor, user: Node) -> Any:
        """Predicate ``t`` as ``user`` (a cond's Switch or a loop's LoopCond) reads it (``read_pred``),
        checked to be one boolean. Why: a predicate whose static shape is unknown can be fed a
        vector, which ``lax.cond`` would refuse with an error naming nothing of the user's. Such a
        predicate writes the error word with the interpreters' message
        (``kernels.predicate_shape_message``) and reads as false, so the run raises ``KernelError``
        as the interpreters do, and only where the Switch runs (a check in an untaken branch is
        dropped with it)."""
        p = self.read_pred(env, t)
        if p is DEAD or jnp.shape(p) == ():
            return p
        self.check(False, kernels.predicate_shape_message(describe_node(user), jnp.shape(p)))
        return np.asarray(False)

    # ---- items ----------------------------------------------------------------------------------
    def run_items(self, items: list[Item], env: Env) -> None:
        """Trace ``items`` in order on ``env``: nodes by their lowering rules, conds and loops by the hooks
        ``run_cond`` and ``run_while``; fed values the plan is specialised on are taken as constants first
        (``take_static``)."""
        self.take_static(env)
        for it in items:
            if isinstance(it, Node):
                self.run_node(it, env)
            elif isinstance(it, CondRegion):
                self.run_cond(it, env)
            else:
                self.run_while(it, env)

    def take_static(self, env: Env) -> None:
        """The fed values the plan is specialised on (``static``) in place of those fed: constants of
        the trace. Every emitter's ``run_items`` starts so."""
        for k, v in self.static.items():
            if k in env:
                env[k] = v

    @abstractmethod
    def run_cond(self, r: CondRegion, env: Env) -> None:
        """Conditional ``r`` on ``env``: the hook ``run_items`` calls, filled by the conds layer
        (``conds.CondEmitter.run_cond``)."""

    @abstractmethod
    def run_while(self, r: WhileRegion, env: Env) -> None:
        """Loop ``r`` on ``env``: the hook ``run_items`` calls, filled by the top layer, which picks
        each loop's form (``emit.Emitter.run_while``)."""

    def run_node(self, n: Node, env: Env) -> None:
        """Trace node ``n`` on ``env``: skipped when its outputs were fed or a raised case chain computed it up front
        (``known``); dead outputs where a control input or, for any op but Merge, a data input is dead ([E-Op-Dead]);
        else its lowering rule's outputs, with their ranges noted. A read of a dynamic TensorArray's stack cuts the
        run there (``_cut_at``)."""
        if n.id in self.fed or n.id in self.known:
            return
        xs = [env[key(t)] for t in n.inputs]
        dead_ctrl = any(env.get((c.id, -1)) is DEAD for c in n.control_inputs)
        if dead_ctrl or (n.op != "Merge" and any(x is DEAD for x in xs)):
            env[(n.id, -1)] = DEAD
            for o in n.outputs:
                env[key(o)] = DEAD
            return
        if any(isinstance(x, Stacked) for x in xs):
            self._cut_at(n, [t for t, x in zip(n.inputs, xs, strict=True) if isinstance(x, Stacked)])
        outs = lower_node(self, n, xs)
        for o, v in zip(n.outputs, outs, strict=True):
            env[key(o)] = v
        if self.ranges:
            propagate(self.ranges, n, xs, outs)

    def _cut_at(self, n: Node, stacks: list[Tensor]) -> NoReturn:
        """``n`` reads ``stacks``, stacks of TensorArrays of dynamic size (``values.Stacked``), whose shape
        only the run tells: the run is cut there (``NeedsStatic`` with ``cut``: ``fast.specialise``),
        where that tensor is computed unconditionally in the root frame (a node of the program's
        root items), which an earlier run can fetch; elsewhere (in a loop or a branch) the program
        cannot be compiled."""
        roots = {it.id for it in self.program.items if isinstance(it, Node)}
        cut = frozenset(key(t) for t in stacks if t.node.id in roots)
        message = (f"fast backend: {describe_node(n)} reads the stack of a TensorArray of dynamic size, whose shape "
                   "is known only when the program runs")
        if len(cut) < len(stacks):
            raise UnsupportedError(message + " (inside a loop or a branch)")
        raise NeedsStatic(message, frozenset(), cut)


__all__ = ["MIXED", "Env", "EmitterCore"]
