"""Lower a region tree to ``jax.lax`` while tracing: the heart of the fast backend.

Why tracing an interpreter: a Turnout program becomes one JAX function by *running* the region tree
on tracers. A ``CondRegion`` becomes ``lax.cond`` (or, when its predicate is known at trace time,
just the taken branch); a ``WhileRegion`` becomes ``lax.while_loop`` whose carry holds the values the
header computed (the loop state) and the predicate, plus the run-time state. Run-time state —
Variables, gradient stacks, and an error word — is threaded functionally through every region, so
effects inside untaken branches or unrun loops simply do not happen.

Dead values only exist at trace time here (``DEAD``: the other output of a Switch inside a branch).
A fetched tensor that lies on a branch leaves its ``lax.cond`` with a *live* flag, so fetching it when
its branch did not run still raises ``DeadFetchError`` ([T5-Deadness-Soundness]).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout import kernels
from turnout import shapes as sh
from turnout.errors import KernelError, TurnoutError, UnsupportedError, describe_node, runaway_message
from turnout.fast import stacks as stk
from turnout.fast.case_chain import MIN_LEVELS, find_chain, first_true, speculate
from turnout.fast.counted_stacks import RungTooSmall
from turnout.fast.facts import (
    bounded_counter,
    cannot_fail,
    counted_bound,
    counter_merges,
    counters,
    fresh_writes,
    light_header,
    own_writes,
)
from turnout.fast.lowering import LOWERING_RULES, UNSUPPORTED, NeedsStatic, feeds_behind, refused_by_shape_rule
from turnout.fast.outcome import NONTERM, ErrorCodes
from turnout.fast.ranges import Ranges, propagate
from turnout.fast.regions import (
    CondRegion,
    Item,
    Key,
    Program,
    WhileRegion,
    key,
    loop_height,
    loop_number,
    pred_reader,
    program_nodes,
    walk,
)
from turnout.fast.values import DEAD, TA, Handle, is_static
from turnout.fast_options import FRAME_HEIGHT
from turnout.graph import Graph, Node, Tensor
from turnout.primitives import COMPUTE

#: never folded while tracing: TensorArrays (their values are built up in place) and Sleep (its wait
#: must happen when the program runs, not when it is traced)
_NO_FOLD = frozenset(p for p in COMPUTE if p.startswith("TensorArray")) | {"Sleep"}

Env = dict[Key, Any]




def stack_key(h: Handle) -> str:
    return stk.state_key(h.name)


def var_key(name: str) -> str:
    return f"var:{name}"


def stack_source(t: Tensor) -> Optional[Node]:
    """The StackNew a handle tensor comes from (through Enter / Switch / Identity / Merge)."""
    seen = 0
    n = t.node
    while n.op != "StackNew" and seen < 10_000:
        if n.op in ("Enter", "Switch", "Identity", "Merge", "Exit", "NextIteration") and n.raw_inputs:
            n = n.inputs[0].node
            seen += 1
        else:
            return None
    return n if n.op == "StackNew" else None


def stack_key_of(n: Node) -> Optional[str]:
    """The run-state key of the stack that StackPush or StackPop ``n`` uses, ``None`` where its
    handle cannot be followed to its StackNew."""
    src = stack_source(n.inputs[0])
    return None if src is None else stk.state_key(src.id)


def _jnp_tree(tree: Any) -> Any:
    return jax.tree_util.tree_map(lambda x: jnp.asarray(x), tree)


def _zeros_of(aval_tree: Any) -> Any:
    return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), aval_tree)


def reconcile(value: Any, other: Any) -> tuple[Any, bool]:
    """``value`` with its pending TensorArrays / stacks and dead slots made concrete like ``other``
    (an abstract value of the same place). Why: a loop carry or a cond result must have one type, but
    a TensorArray's element shape is only known after its first write."""
    if isinstance(value, (TA, stk.StackValue)) and value.pending and not getattr(other, "pending", True):
        return _zeros_of(other), True
    if value is DEAD and other is not DEAD:
        return _zeros_of(other), True
    if isinstance(value, dict) and isinstance(other, dict):
        out, ch = {}, False
        for k, v in value.items():
            out[k], c = reconcile(v, other[k]) if k in other else (v, False)
            ch |= c
        return out, ch
    if isinstance(value, (list, tuple)) and isinstance(other, (list, tuple)) and len(value) == len(other):
        pairs = [reconcile(v, o) for v, o in zip(value, other, strict=True)]
        return type(value)(p[0] for p in pairs), any(p[1] for p in pairs)
    return value, False


class Traced:
    """A Python function traced once into a jaxpr, callable again at the cost of replaying the jaxpr.

    Why: ``lax.cond`` and ``lax.while_loop`` trace the functions they are given; a region whose result
    types must be known *before* the ``lax`` call (to fill dead values and pending TensorArrays) would
    otherwise be traced twice, and a region nested ``k`` deep ``2^k`` times. Replaying binds the
    jaxpr's top-level equations only: nested ``cond`` / ``while`` equations carry their own, already
    traced, jaxprs. ``shapes`` is the result as a pytree of ``jax.ShapeDtypeStruct`` (dead values and
    pending TensorArrays keep their leafless structure), as ``jax.eval_shape`` would give it.
    """

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.closed, self.shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
        self.out_tree = jax.tree_util.tree_structure(self.shapes)

    def __call__(self, *args: Any) -> Any:
        flat = jax.tree_util.tree_leaves(args)
        out = jax.core.eval_jaxpr(self.closed.jaxpr, self.closed.consts, *flat)
        return jax.tree_util.tree_unflatten(self.out_tree, out)


#: ``Emitter.pushed``'s mark of a stack pushed a traced value, or different constants
_MIXED = object()

#: graph -> (its version, the StackNew ids that exactly one StackPush of the graph pushes)
_ONE_PUSH: weakref.WeakKeyDictionary[Graph, tuple[int, frozenset[int]]] = weakref.WeakKeyDictionary()


#: the most elements a fed tensor that decides a ragged cond may have to be specialised on
SMALL_DECISION = 8


def _small_decision(t: Tensor) -> bool:
    """Whether a plan may be specialised on the values of fed tensor ``t`` to pick a ragged cond's
    branch (``Emitter._refuse_ragged``): a bool or integer of at most ``SMALL_DECISION`` elements (a
    flag, an index), whose values are few. A float, or a larger tensor, is data: a plan per value
    would compile on every run."""
    d = t.dtype
    n = sh.num_elements(t.shape)
    return (d.is_bool or d.is_integer) and n is not None and n <= SMALL_DECISION


def _is_filler(t: Tensor) -> bool:
    """Whether ``t`` is a gradient's stand-in for a value on the branch that did not compute it (a
    ``Const`` marked ``gradient_filler`` by ``tn.gradients``): never read, so any value of the
    other branch's type may take its place."""
    return bool(t.node.attrs.get("gradient_filler"))


def _exports_for_gradient(m: Node) -> bool:
    """Whether Merge ``m`` hands a branch's value to a gradient: one of its inputs is a stand-in."""
    return any(_is_filler(t) for t in m.inputs)


def _same_constant(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two constants met while tracing are one value (dtype and elements)."""
    return a.dtype == b.dtype and np.array_equal(a, b)


def _note_exports(seen: dict[Key, list[Any]], exports: list[Key], vals: list[Any]) -> None:
    """Record in ``seen`` the values one branch of a conditional traced for its ``exports`` (the
    values it hands out besides its Merges), those that are not dead (``_fold_exports``)."""
    for k, v in zip(exports, vals, strict=True):
        if v is not DEAD:
            seen.setdefault(k, []).append(v)


def _fold_exports(graph: Graph, seen: dict[Key, list[Any]], exports: list[Key], vals: list[Any]) -> list[Any]:
    """A conditional's exports after it (``vals``, as ``lax.cond`` or ``lax.switch`` gave them), each
    one that is a size (``_a_size``) and that every branch where it is not dead traced as one
    constant made that constant again.

    Why: the conditional hands its exports out as traced values, and a constant that crossed it
    stopped being one, though it was one in every branch where it lives. A gradient switches a
    forward value's *shape* through the conds that share the forward cond's predicate, which the
    regions group with the forward cond: a ``Fill`` of that shape after it could not be compiled
    (found by the generated gradients of a nested ``tn.case`` over a batch of unknown size). Only
    sizes: where an export is dead its consumers run on the fast backend with its live flag false
    (the interpreter does not run them), so a constant there must be one that no consumer can
    refuse while tracing, and a size of a value that exists is such a constant."""
    out = list(vals)
    for i, k in enumerate(exports):
        got = seen.get(k)
        if (got and all(is_static(v) for v in got) and _a_size(graph.nodes[k[0]].outputs[k[1]])
                and all(_same_constant(np.asarray(v), np.asarray(got[0])) for v in got)):
            out[i] = got[0]
    return out


#: ops whose value is the size of a value that exists: never negative, never more than is held
_SIZE_OPS = frozenset({"Shape", "Size", "Rank", "TensorArraySize"})


def _a_size(t: Tensor) -> bool:
    """Whether ``t`` is a size (``_SIZE_OPS``), through the Switches and Identities that carry it."""
    while t.node.op in ("Switch", "Identity"):
        t = t.node.inputs[0]
    return t.node.op in _SIZE_OPS


def _pushed_once(graph: Graph) -> frozenset[int]:
    """The stacks of ``graph`` that one StackPush node pushes (a gradient's stacks), counted over the
    whole graph, not one program or partition of it, and once per graph version."""
    got = _ONE_PUSH.get(graph)
    if got is None or got[0] != graph.version:
        counts: dict[int, int] = {}
        for n in graph.nodes:
            src = stack_source(n.inputs[0]) if n.op == "StackPush" else None
            if src is not None:
                counts[src.id] = counts.get(src.id, 0) + 1
        got = _ONE_PUSH[graph] = (graph.version, frozenset(i for i, c in counts.items() if c == 1))
    return got[1]


class Emitter:
    """Runs region trees on tracers. ``state`` is the current run-time state (a dict of pytrees:
    ``var:NAME``, ``stack:ID``, ``err``); rules update it through the LoweringContext methods."""

    #: whether a chain of nested conds on one decision (``tn.case``) is raised to one ``lax.switch``
    #: (``run_case_chain``); an emitter that cannot emit the raised form emits the nested conds
    raise_case_chains = True

    def __init__(self, program: Program, codes: ErrorCodes, capacity: int, max_iter: Any,
                 frame_height: int = FRAME_HEIGHT, stop_on_error: bool = False, free_pointers: bool = False) -> None:
        self.program = program
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
        self.state: dict[str, Any] = {}
        self.lives: dict[Key, Any] = {}
        self.fed: set[int] = set()  # nodes whose outputs were fed: never computed
        # fed tensors the plan is specialised on (``lowering.NeedsStatic``): their values, as constants
        self.static: dict[Key, Any] = {}
        # Inside one function of a raised case chain (``case_chain``): the chain's predicates, fixed,
        # by region id, and the speculable nodes already computed up front (never computed again).
        self.forced: dict[int, bool] = {}
        self.known: set[int] = set()
        #: id(CondRegion) -> its exports (``_exports``)
        self._exports_of: dict[int, list[Key]] = {}
        #: held stacks (``fast.held``): stack key -> its ``HeldRead`` (the Variable, the loop at whose
        #: start it is taken). Empty unless the plan asks (``Plan.emitter``): a trace that holds must
        #: run the loop and the pops in one state.
        self.held: dict[str, Any] = {}
        #: Set for the fused trace of a program with gradient stacks (``backend.Plan.fused``): a loop
        #: that pushes or pops stops as soon as the error word is set, so a fused attempt whose stack
        #: overflows costs at most one chunk of iterations before the staged path takes over. Given
        #: when the emitter is made (``Plan.emitter``), fixed for its trace.
        self.stop_on_error = stop_on_error
        #: Stack pointers updated by ``ptr + 1`` / ``ptr - 1`` whether or not the push or pop fitted
        #: (``stacks.push``), where no pointer of a run with an error set is ever read: the fused trace,
        #: and a driven loop's chunk (``Plan.loop_fns``). Given when the emitter is made.
        self.free_pointers = free_pointers
        #: the numbers (``regions.loop_number``) of the light loops whose bodies are being traced,
        #: innermost last: a light loop's nonterm code counts from the innermost (``NONTERM``)
        self.frames: list[int] = []
        #: counted loops whose iteration-bound check was made before the nest they head was entered
        #: (``_hoist_checks``), by id; > 0 while such a nest's body is traced; the ids of loops in
        #: whose nests hoisting was tried and given up (``HoistConflict``)
        self.hoisted: set[int] = set()
        #: the hoisted loops whose nest runs in a cond on its checks: their tests leave out the
        #: iteration bound (``run_light_while``)
        self.unbounded: set[int] = set()
        self.hoist_depth = 0
        self.no_hoist: set[int] = set()
        self._read_at_1: Optional[set[int]] = None
        #: stack key -> the constant its one push pushed while tracing (``note_push``); a plan shares
        #: one dict between its traces, so a stage traced later (a driven backward loop) sees what an
        #: earlier one pushed
        self.pushed: dict[str, Any] = {}
        #: the integer ranges of traced values (``fast.ranges``): the counters of the counted loops
        #: whose bodies are being traced, and what is computed from them
        self.ranges = Ranges()
        #: TensorArrayWrite node id -> the slots its array was known to hold written when the loop
        #: that writes it was entered, while that loop's body is traced (``fresh_write``,
        #: ``ranges.first_write``)
        self.fresh_writes: dict[int, frozenset[int]] = {}
        #: id(WhileRegion) -> the ids of the nodes in it (``_bound_at_head``)
        self._inside: dict[int, frozenset[int]] = {}
        #: the counted stacks of the program by the root loop heading their chains
        #: (``fast.counted_stacks``); set by the plan for its fused trace only, whose stacks start empty
        self.counted: dict[int, list[Any]] = {}
        #: counted stacks whose chain is being traced, proved (their pushes check nothing); and those
        #: whose chain has ended: stack key -> the chain's trip counts (their pops read the entry at
        #: their index's position, ``counted_stacks.read``)
        self.dense: set[str] = set()
        self.full: dict[str, tuple[int, ...]] = {}
        #: the counted stacks whose push was traced while their chain was (``note_push_range``): a
        #: push that was not (its input dead when traced) pushed nothing, and its stack is not full
        self.pushed_counted: set[str] = set()
        #: the stacks the fused call makes inside itself (``Plan.inside``): a counted one is made
        #: there with as many entries as its chain pushes, not the rung's capacity
        self.resizable: set[str] = set()
        #: counted stacks some push of which wrote nothing (``skip_push``)
        self.skipped: set[str] = set()
        #: counted stacks whose push pushes a counter of their chain (``CountedStack.counter``):
        #: stack key -> (the loop's level in the chain, the counter's start)
        self.counter_pushes: dict[str, tuple[int, int]] = {}
        #: counted stack key -> the range of every integer value its push pushed (``note_push_range``),
        #: or None where one was not known
        self.push_ranges: dict[str, Optional[tuple[int, int]]] = {}

    # ---- LoweringContext ------------------------------------------------------------------------
    def check(self, ok: Any, message: str, code: str = "kernel") -> None:
        if is_static(ok) and bool(ok):
            return
        self._set_err(~jnp.asarray(ok, bool), self.codes.code(code, message))

    def _set_err(self, bad: Any, code: int) -> None:
        """The error word set to ``code`` where ``bad`` holds and no earlier error set it."""
        if self.hoist_depth:  # an error inside a nest whose bound checks were made first: see HoistConflict
            raise HoistConflict()
        err = jnp.asarray(self.state["err"], jnp.int32)
        # lax ops, not jnp.where and operators: each of those is a nested jit call, one more function
        # per check to trace and lower
        unset = jax.lax.bitwise_and(jax.lax.eq(err, np.int32(0)), jnp.asarray(bad, bool))
        self.state["err"] = jax.lax.select(unset, jnp.full_like(err, code), err)

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
        try:
            return self.state[var_key(h.name)]
        except KeyError:
            raise UnsupportedError(f"fast backend: {describe_node(node)} reads unknown Variable {h.name!r}") from None

    def write_var(self, h: Handle, value: Any) -> None:
        old = self.state[var_key(h.name)]
        if jnp.shape(old) != jnp.shape(value):
            raise UnsupportedError(f"fast backend: Variable {h.name!r} changes shape from {jnp.shape(old)} to "
                                   f"{jnp.shape(value)}")
        self.state[var_key(h.name)] = value

    def get_stack(self, node: Node, h: Handle) -> stk.StackValue:
        k = stack_key(h)
        if k not in self.state:
            dtype = node.inputs[2].dtype.numpy if node.op == "StackPush" else np.dtype(node.attrs["dtype"])
            self.state[k] = stk.StackValue(self.capacity, dtype)
        return self.state[k]  # type: ignore[no-any-return]

    def set_stack(self, h: Handle, s: stk.StackValue) -> None:
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

    def note_push(self, node: Node, h: Handle, value: Any) -> None:
        """Record a push of ``value`` on stack ``h`` by StackPush ``node``: a constant while tracing (a
        forward value's shape, which a compiled loop keeps fixed) pushed by the only StackPush of that
        stack in the whole graph is what every pop of it returns, and ``pushed_constant`` says so.
        Why: the gradient of a value of partly known shape saves its shape on a stack and builds
        zeros of it in the backward loop (``Fill``); XLA needs that shape when compiling, and here it
        is known."""
        if h.name not in _pushed_once(node.graph):
            return
        k = stack_key(h)
        prev = self.pushed.get(k)
        if not is_static(value):
            self.pushed[k] = _MIXED
        elif prev is None:
            self.pushed[k] = np.array(value)  # (a copy: the pushed value is never changed after)
        elif prev is not _MIXED and not _same_constant(prev, value):
            self.pushed[k] = _MIXED  # (one push node traced twice to different constants: a case chain's)

    def note_push_range(self, h: Handle, value: Any) -> None:
        """Record the range of ``value`` (``fast.ranges``), pushed by the one push of counted stack
        ``h`` while its chain is traced: with the ranges of the other traces of that push, the range
        of every entry. Why: a gradient pops the index a forward TensorArray read used (a fold's
        counter) to accumulate at it; with its range the accumulation needs no index check."""
        k = stack_key(h)
        self.pushed_counted.add(k)
        got = self.ranges.get(value)
        if got is None or (k in self.push_ranges and self.push_ranges[k] is None):
            self.push_ranges[k] = None
            return
        prev = self.push_ranges.get(k)
        self.push_ranges[k] = got if prev is None else (min(prev[0], got[0]), max(prev[1], got[1]))

    def skip_push(self, h: Handle) -> None:
        """Record that a push onto counted stack ``h`` wrote nothing: it pushed the constant every
        push of the stack has pushed (``pushed_constant``), which its pops return without reading."""
        self.pushed_counted.add(stack_key(h))
        self.skipped.add(stack_key(h))

    def read_skipped(self, node: Node, h: Handle) -> None:
        """Refuse a pop that would read counted stack ``h`` after a push skipped its write
        (``skip_push``): a later trace of the push contradicted the constant. The fused stage is then
        dropped (``UnsupportedError``), and the staged path, which writes every push, runs."""
        if stack_key(h) in self.skipped:
            raise UnsupportedError(f"fast backend: {describe_node(node)} pops a stack whose pushes pushed a "
                                   "constant in one trace and another value in a later one")

    def pop_range(self, h: Handle, value: Any) -> None:
        """Give ``value``, popped from full counted stack ``h``, the range of everything pushed on it
        (``note_push_range``), when known."""
        got = self.push_ranges.get(stack_key(h))
        if got is not None:
            self.ranges.add(value, *got)

    def pushed_constant(self, h: Handle) -> Any:
        """The constant every push of stack ``h`` pushed (see ``note_push``), or ``None``. Every push of
        a forward loop is traced before any pop of its gradient (program order within a trace, stage
        order across a plan's traces), so a pop never reads a constant that a later push contradicts."""
        v = self.pushed.get(stack_key(h))
        return None if v is None or v is _MIXED else v

    # ---- reads along control-flow edges ---------------------------------------------------------
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
        for k, v in self.static.items():
            if k in env:
                env[k] = v
        for it in items:
            if isinstance(it, Node):
                self.run_node(it, env)
            elif isinstance(it, CondRegion):
                self.run_cond(it, env)
            else:
                self.run_while(it, env)

    def run_node(self, n: Node, env: Env) -> None:
        if n.id in self.fed or n.id in self.known:
            return
        xs = [env[key(t)] for t in n.inputs]
        dead_ctrl = any(env.get((c.id, -1)) is DEAD for c in n.control_inputs)
        if dead_ctrl or (n.op != "Merge" and any(x is DEAD for x in xs)):
            env[(n.id, -1)] = DEAD
            for o in n.outputs:
                env[key(o)] = DEAD
            return
        outs = None
        if n.op in COMPUTE and n.op not in _NO_FOLD and all(is_static(x) for x in xs):
            try:  # constant folding with the reference kernels themselves
                outs = [np.asarray(v) for v in kernels.run_kernel(n.op, [np.asarray(x) for x in xs], n.attrs)]
            except KernelError:
                outs = None
        if outs is None:
            outs = refused_by_shape_rule(self, n, xs)
        if outs is None:
            rule = LOWERING_RULES.get(n.op)
            if rule is None:  # a primitive the fast backend does not lower: say why (UNSUPPORTED), naming it
                raise UnsupportedError(f"fast backend: cannot lower {describe_node(n)}: "
                                       f"{UNSUPPORTED.get(n.op, 'no lowering rule')}")
            try:
                outs = rule(self, n, xs)
            except TurnoutError:
                raise  # already says what is wrong (e.g. FeedError for an unfed Placeholder)
            except (TypeError, ValueError, IndexError) as e:
                raise UnsupportedError(f"fast backend: cannot lower {describe_node(n)}: {e}") from None
        for o, v in zip(n.outputs, outs, strict=True):
            env[key(o)] = v
        if self.ranges:
            propagate(self.ranges, n, xs, outs)

    # ---- conditionals ---------------------------------------------------------------------------
    def _exports(self, r: CondRegion) -> list[Key]:
        """The keys a cond hands out besides its Merges: fetched values of its branches and its
        ``exports``. Found once per region: a raised case chain runs its outer conds again in every
        one of its functions, and each search walks every node nested below, so searching on every
        run made tracing a case of ``n`` branches cubic in ``n``."""
        got = self._exports_of.get(id(r))
        if got is None:
            joins = {m.id for m, _ in r.merges}
            got = self._exports_of[id(r)] = sorted(
                {key(o) for n in r.nodes if n.id not in joins for o in n.outputs if key(o) in self.fetch_set}
                | set(r.exports))
        return got

    def run_cond(self, r: CondRegion, env: Env) -> None:
        p = np.asarray(self.forced[id(r)]) if id(r) in self.forced else self.predicate(env, r.pred, pred_reader(r))
        exports = self._exports(r)
        if p is DEAD:
            for m, _ in r.merges:
                env[key(m.outputs[0])] = env[key(m.outputs[1])] = DEAD
            for k in exports:
                env[k] = DEAD
            return

        # a gradient's export Merge (a value of one branch, a filler on the other) whose value is a
        # constant while tracing (a shape): Merge id -> that constant, recorded by ``branch``
        known: dict[int, Any] = {}
        # per export, the values the branches traced that are not dead (``_fold_exports``)
        seen: dict[Key, list[Any]] = {}

        def branch(b: bool, fill: bool = False) -> Callable[[Any], Any]:
            """Branch ``b`` as a function of the state; with ``fill``, a gradient's filler that a Merge
            takes from this branch is left dead, so ``reconcile`` makes it zeros of the other branch's
            type: its value is never read, and its shape (unknown sizes as 0) may not be the other's.
            For the same reason a Merge of a filler and a constant is that constant (``known``)."""
            def fn(state: Any) -> Any:
                self.state = dict(state)
                benv = dict(env)
                for s in r.switches:
                    benv[key(s.outputs[int(b)])] = self.read(benv, s.inputs[0], s)
                    benv[key(s.outputs[1 - int(b)])] = DEAD
                saved, self.lives = self.lives, {}
                try:  # (restored however the trace ends: a ``HoistConflict`` traces the nest again)
                    self.run_items(r.branches[b], benv)
                    merges = []
                    for m, slots in r.merges:
                        if b in slots:
                            src = m.inputs[slots[b]]
                            v = DEAD if fill and _is_filler(src) else self.read(benv, src, m)
                            if fill and is_static(v) and _exports_for_gradient(m):
                                known[m.id] = v
                            merges.append((v, np.asarray(slots[b], np.int32)))
                        else:
                            merges.append((DEAD, DEAD))
                    vals = [benv.get(k, DEAD) for k in exports]
                    lives = [np.asarray(False) if v is DEAD else self.lives.get(k, np.asarray(True))
                             for k, v in zip(exports, vals, strict=True)]
                finally:
                    self.lives = saved
                _note_exports(seen, exports, vals)
                return merges, vals, lives, self.state

            return fn

        chain = find_chain(r) if not is_static(p) else [r]
        preds = speculate(chain, env, self) if len(chain) >= MIN_LEVELS and self.raise_case_chains else None
        if is_static(p):  # (a link of a case chain, its decision fixed: its fillers are filled there)
            merges, vals, lives, self.state = branch(bool(p), fill=id(r) in self.forced)(self.state)
        elif preds is not None:
            merges, vals, lives = self.run_case_chain(chain, preds, env, exports)
        else:
            state0 = self.state
            # Each branch is traced ONCE, into a jaxpr: its result types (a dead value on one side
            # becomes zeros of the other side's type) are read off that trace, and ``lax.cond``
            # replays the jaxpr instead of tracing the Python again. Tracing twice (once to learn the
            # shapes, once inside ``lax.cond``) doubles the work at every nesting level: 2^depth.
            traced = {b: Traced(branch(b, fill=True), state0) for b in (False, True)}
            self.state = state0

            def filled(b: bool) -> Callable[[Any], Any]:
                def fn(state: Any) -> Any:
                    out, _ = reconcile(traced[b](state), traced[not b].shapes)
                    return _jnp_tree(out)

                return fn

            try:
                merges, vals, lives, self.state = jax.lax.cond(jnp.asarray(p, bool), filled(True), filled(False),
                                                               state0)
            except TypeError as e:
                m = r.merges[0][0] if r.merges else r.nodes[0]
                self._refuse_ragged(
                    [r], f"fast backend: the two branches of the {r.describe()} near {describe_node(m)} produce "
                    f"values of different types or shapes: {e}")
        for (m, _), (v, idx) in zip(r.merges, merges, strict=True):
            env[key(m.outputs[0])] = known.get(m.id, v)
            env[key(m.outputs[1])] = idx
        if not is_static(p):
            vals = _fold_exports(r.pred.graph, seen, exports, vals)
        for k, v, live in zip(exports, vals, lives, strict=True):
            env[k] = v
            self.lives[k] = live

    def _refuse_ragged(self, conds: list[CondRegion], message: str) -> NoReturn:
        """Branches whose results differ in type or shape have no ``lax.cond``; but where the root
        frame's feeds alone decide every predicate of ``conds``, the plan is specialised on those
        feeds (``NeedsStatic``): the predicates fold while tracing and only the branch taken is
        compiled, as the reference interpreter runs only that branch. Otherwise the program cannot be
        compiled (``UnsupportedError``)."""
        keys: set[tuple[int, int]] = set()
        for c in conds:
            behind = feeds_behind(c.pred, self.fed, through_switch=True)
            if behind is None:
                raise UnsupportedError(message) from None
            keys |= behind
        graph = conds[0].pred.graph
        if not all(_small_decision(graph.nodes[i].outputs[j]) for i, j in keys):
            raise UnsupportedError(message) from None  # (one plan per value of a data tensor: never)
        raise NeedsStatic(message, frozenset(keys)) from None

    def run_case_chain(self, chain: list[CondRegion], preds: tuple[list[Any], Env, set[int]], env: Env,
                       exports: list[Key]) -> tuple[Any, Any, Any]:
        """A chain of nested conds as ONE ``lax.switch`` (see ``case_chain``): function ``k`` runs the
        outermost cond with the chain's predicates fixed — false above level ``k``, true at ``k`` — so
        it is the ordinary nested emission with the decisions taken; each function is traced once."""
        values, senv, computed = preds
        r = chain[0]
        # per gradient export Merge of the chain (a value and a filler, see ``run_cond``): the
        # constants its levels gave, or None once one gave a traced value
        consts: dict[int, Optional[list[Any]]] = {
            m.id: [] for m, _ in r.merges if _exports_for_gradient(m)}
        exported: dict[Key, list[Any]] = {}  # per export, the values the levels traced that are not dead

        def level(k: int) -> Callable[[Any], Any]:
            forced = {id(c): j == k for j, c in enumerate(chain[:k + 1])}

            def fn(state: Any) -> Any:
                saved = self.forced, self.known, self.lives
                self.forced, self.known, self.lives = {**self.forced, **forced}, self.known | computed, {}
                # (restored however the trace ends: a ``HoistConflict`` traces the enclosing nest again,
                # and a decision forced here must not be forced there)
                try:
                    self.state = dict(state)
                    benv = dict(senv)
                    self.run_cond(r, benv)
                    merges = [(benv[key(m.outputs[0])], benv[key(m.outputs[1])]) for m, _ in r.merges]
                    for (m, _), (v, _) in zip(r.merges, merges, strict=True):
                        seen = consts.get(m.id)
                        if seen is not None and v is not DEAD:
                            if is_static(v):
                                seen.append(v)
                            else:
                                consts[m.id] = None
                    vals = [benv.get(k2, DEAD) for k2 in exports]
                    lives = [np.asarray(False) if v is DEAD else self.lives.get(k2, np.asarray(True))
                             for k2, v in zip(exports, vals, strict=True)]
                finally:
                    self.forced, self.known, self.lives = saved
                _note_exports(exported, exports, vals)
                return merges, vals, lives, self.state

            return fn

        state0 = self.state
        traced = [Traced(level(k), state0) for k in range(len(chain) + 1)]
        self.state = state0

        def filled(k: int) -> Callable[[Any], Any]:
            def fn(state: Any) -> Any:
                out = traced[k](state)
                for j, other in enumerate(traced):
                    if j != k:
                        out, _ = reconcile(out, other.shapes)
                return _jnp_tree(out)

            return fn

        try:
            fns = [filled(k) for k in range(len(traced))]
            merges, vals, lives, self.state = jax.lax.switch(first_true(values), fns, state0)
        except TypeError as e:
            m = r.merges[0][0] if r.merges else r.nodes[0]
            self._refuse_ragged(
                chain, f"fast backend: the branches of the case chain of {r.describe()} near {describe_node(m)} "
                f"produce values of different types or shapes: {e}")
        for j, (m, _) in enumerate(r.merges):  # an export every level gave as one constant is that constant
            got = consts.get(m.id)
            if got and all(_same_constant(v, got[0]) for v in got):
                merges[j] = (got[0], merges[j][1])
        return merges, _fold_exports(r.pred.graph, exported, exports, vals), lives

    # ---- loops ----------------------------------------------------------------------------------
    def while_fns(self, r: WhileRegion, env: Env) -> tuple[Callable[..., Any], ...]:
        """(start, body, finish) of a While region closed over ``env``.

        The carry is ``(carried values, predicate, state, iteration count)``: the header runs once
        before the loop and at the end of each body, so the predicate is computed once per iteration.
        """
        base = dict(env)
        for inv in r.invariants:
            base[key(inv.outputs[0])] = self.read(env, inv.inputs[0], inv)
        pkey = key(r.loop_cond.inputs[0])
        ckeys = [key(t) for t in r.carried if key(t) != pkey]  # the predicate has its own slot
        lck = key(r.loop_cond.outputs[0])

        def header(vals: list[Any], first: bool, state: dict[str, Any]) -> tuple[Any, ...]:
            self.state = dict(state)
            henv = dict(base)
            for (_, m, _, es, ns), v in zip(r.loop_vars, vals, strict=True):
                henv[key(m.outputs[0])] = v
                henv[key(m.outputs[1])] = np.asarray(es if first else ns, np.int32)
            self.run_items(r.header, henv)
            return [henv[k] for k in ckeys], self.predicate(henv, r.loop_cond.inputs[0], r.loop_cond), self.state

        def start(state: dict[str, Any]) -> Any:
            self.hold(r, state)  # (before a dead entry: the backward loop's pops read it even then)
            vals0 = [self.read(env, e.inputs[0], m) for e, m, _, _, _ in r.loop_vars]
            if any(v is DEAD for v in vals0):
                return None
            vals, pred, st = header(vals0, True, state)
            return (vals, pred, st, np.asarray(0, np.int32))

        def side_env(vals: Any, pred: Any, taken: int) -> Env:
            """The loop's environment on one side of its Switches ([E-Switch] with the predicate
            decided): output ``taken`` carries the loop value, the other output is dead."""
            env = dict(base)
            env.update(zip(ckeys, vals, strict=True))
            env[pkey] = pred
            env[lck] = pred
            for s in r.switches:
                env[key(s.outputs[taken])] = self.read(env, s.inputs[0], s)
                env[key(s.outputs[1 - taken])] = DEAD
            return env

        def body(c: Any) -> Any:
            vals, pred, state, iters = c
            self.state = dict(state)
            benv = side_env(vals, pred, 1)
            self.run_items(r.body, benv)
            nxt = [self.read(benv, nx.inputs[0], m) for _, m, nx, _, _ in r.loop_vars]
            vals2, pred2, st2 = header(nxt, False, self.state)
            return _jnp_tree((vals2, pred2, st2, iters + 1))

        def finish(c: Any, out_env: Env) -> None:
            if c is None:
                for x in r.exits:
                    out_env[key(x.outputs[0])] = DEAD
                return
            vals, pred, state, iters = c
            self.state = dict(state)
            eenv = side_env(vals, pred, 0)
            self.run_items(r.exit_side, eenv)
            # The loop stops when its predicate is false, when the iteration budget is spent, or (in a
            # fused attempt) on an error, which the error word already holds: a predicate still true
            # here therefore means the budget was spent.
            self.check(~jnp.asarray(pred), runaway_message(r.describe()), code="nonterm")
            for x in r.exits:
                out_env[key(x.outputs[0])] = self.read(eenv, x.inputs[0], x)

        return start, body, finish

    def discover(self, body: Callable[[Any], Any], c0: Any, region: Optional[WhileRegion] = None
                 ) -> tuple[Any, Traced]:
        """The initial carry with its pending TensorArrays / stacks made concrete (a loop carry must
        keep one type), and the body traced once for that carry.

        The body is traced into a jaxpr; when the trace shows that the body writes a pending value,
        the carry is made concrete and the body traced again (once per pending value that becomes
        concrete, in practice once). The loop then replays the last trace, so a loop nested ``k``
        deep is traced once, not ``2^k`` times.
        """
        saved = self.state
        traced = Traced(body, c0)
        for _ in range(8):
            c0, changed = reconcile(c0, traced.shapes)
            if not changed:
                break
            traced = Traced(body, c0)
        self.state = saved
        self._check_carry(c0, traced.shapes, region)
        return c0, traced

    def loop_body(self, body: Callable[[Any], Any], c0: Any, region: WhileRegion) -> tuple[Any, Callable[[Any], Any]]:
        """The initial carry and the body function to give ``lax.while_loop``: ``body`` itself where
        the carry is settled (``settled``), else the body ``discover`` traced.

        Why: ``while_loop`` traces its body once when the carry keeps its type; tracing it first into
        a jaxpr (to learn its result types) and replaying that jaxpr doubles the trace work of every
        level of a nest for nothing.
        """
        if settled(c0):
            def checked(c: Any) -> Any:
                try:
                    out = body(c)
                except TypeError as e:
                    # a TypeError of the body's own lowering is not the carry changing type: it must
                    # not reach the handler around lax.while_loop, which reports that (see ``BodyTypeError``)
                    raise BodyTypeError() from e
                self._check_carry(c, out, region)
                return out

            return c0, checked
        return self.discover(body, c0, region)

    @staticmethod
    def _check_carry(c0: Any, out: Any, region: Optional[WhileRegion]) -> None:
        """A loop carry keeps one type: a value whose shape or dtype changes across iterations (a
        loop variable with ``shape_invariants``) has no XLA loop; say so, naming the loop."""
        ins, tin = jax.tree_util.tree_flatten(c0)
        outs, tout = jax.tree_util.tree_flatten(out)
        same_tree: bool = tin == tout  # type: ignore[operator]
        bad = not same_tree or any(jnp.shape(a) != tuple(b.shape) or jnp.result_type(a) != b.dtype
                                   for a, b in zip(ins, outs, strict=True))
        if bad:
            raise UnsupportedError(
                f"fast backend: a loop variable of {region.describe() if region else 'a loop'} changes "
                "type or shape across iterations (shape_invariants); XLA loops need a fixed shape")

    def read_at_1(self) -> set[int]:
        """The ids of the program's nodes whose output 1 some node reads (``light_header``), found once."""
        if self._read_at_1 is None:
            self._read_at_1 = {t.node.id for n in program_nodes(self.program) for t in n.inputs if t.index == 1}
        return self._read_at_1

    def run_while(self, r: WhileRegion, env: Env) -> None:
        # The light form computes the predicate in the loop's test; an emitter that shares predicates
        # between devices (the SPMD tier's ``read_pred``, a collective) keeps it in the body instead.
        if type(self).read_pred is Emitter.read_pred and light_header(r, self.read_at_1()):
            self.run_light_while(r, env)
            return
        start, body, finish = self.while_fns(r, env)
        c0 = start(self.state)
        if c0 is None or (is_static(c0[1]) and not bool(c0[1])):
            finish(c0, env)
            return
        c0, traced = self.loop_body(body, _jnp_tree(c0), r)
        stop = self.stop_on_error and any(n.op in ("StackPush", "StackPop") for n in r.nodes)

        def cond(c: Any) -> Any:
            ok = c[1] & (c[3] < self.max_iter)
            return ok & (c[2]["err"] == 0) if stop else ok

        finish(self._while_loop(r, cond, traced, c0), env)

    @staticmethod
    def _while_loop(r: WhileRegion, cond: Callable[[Any], Any], body: Callable[[Any], Any], c0: Any) -> Any:
        """``lax.while_loop`` of loop ``r``: a ``TypeError`` of the loop itself (its carry changing
        type) is ``UnsupportedError`` naming the loop; one raised by the body's own lowering
        (``BodyTypeError``) surfaces as itself."""
        try:
            return jax.lax.while_loop(cond, body, c0)
        except BodyTypeError as e:
            raise e.__cause__ from None  # type: ignore[misc]
        except TypeError as e:
            raise UnsupportedError(
                f"fast backend: a loop variable of {r.describe()} changes type or shape across iterations "
                f"(shape_invariants); XLA loops need a fixed shape: {e}") from None

    def _counted_chain(self, r: WhileRegion, env: Env) -> list[tuple[WhileRegion, Any]]:
        """The nest of counted loops that ``r`` heads, with the number of bodies each loop runs as a
        value here, at ``r``'s entry: ``r`` itself when it is counted (``counted_bound``), then,
        while the loop has exactly one loop among its body's items and that loop is counted too with
        a bound that is a constant, entered unchanged through every loop around it, or computed in
        their bodies from such values and known when tracing (``_bound_at_head``), that loop. Empty
        when ``r`` is not counted."""
        chain: list[tuple[WhileRegion, Any]] = []
        loop: Optional[WhileRegion] = r
        levels: list[WhileRegion] = []
        while loop is not None:
            if loop is not r and not light_header(loop, self.read_at_1()):
                break
            counted = counted_bound(loop)
            if counted is None or not loop_number(self.program, loop):
                break
            inv, start = counted
            t = inv.inputs[0] if inv.op != "Const" else inv.outputs[0]
            # the bound as the chain's head sees it
            for outer in reversed(levels if inv.op != "Const" else []):
                if t.index != 0 or t.node not in outer.invariants:
                    bound = self._bound_at_head(inv.inputs[0], levels, env)
                    if bound is None:
                        return chain
                    break
                t = t.node.inputs[0]
            else:
                bound = self.read(env, t, inv) if inv.op != "Const" else np.asarray(inv.attrs["value"], np.int32)
            if start and is_static(bound):  # the number of bodies
                bound = np.asarray(max(int(bound), start) - start, np.int32)
            elif start:  # (no overflow: both are at least ``start >= 0``)
                b = jnp.asarray(bound, jnp.int32)
                bound = jax.lax.sub(jax.lax.max(b, np.int32(start)), np.int32(start))
            chain.append((loop, bound))
            levels.append(loop)
            inner = [it for it in loop.body if isinstance(it, WhileRegion)]
            loop = inner[0] if len(inner) == 1 else None
        return chain

    def _bound_at_head(self, t: Tensor, levels: list[WhileRegion], env: Env) -> Any:
        """The value of ``t``, computed inside the bodies of the nest ``levels`` (outermost first),
        as the nest's head can know it: when ``t`` is made by ``BOUND_OPS`` from values entered
        unchanged into those loops and comes out static (the shape of a traced value is).
        ``None`` otherwise.

        Why: a fold nested in a fold takes the length of its elements inside the outer body
        (``shape(x)[0]``); the value is known when tracing, but it is not one entered from the head,
        and without it the inner loop's bound is checked after the inner loop, so every level of
        the nest carries the error word."""
        inside = self._inside.get(id(levels[0]))
        if inside is None:
            inside = self._inside[id(levels[0])] = frozenset(n.id for n in levels[0].nodes)
        invariants = {n.id for lv in levels for n in lv.invariants}
        done: Env = {}

        def value(u: Tensor, depth: int) -> Any:
            while u.node.op == "Enter" and u.node.id in invariants:  # (one hop per level of the nest)
                u = u.node.inputs[0]
            n = u.node
            if n.id not in inside:
                return env.get(key(u))
            if depth > BOUND_DEPTH or n.op == "Enter":
                return None
            if n.op == "StackPop":  # every push pushed one constant (a nested loop's trip count)
                k = stack_key_of(n)
                got = None if k is None else self.pushed.get(k)
                return got if got is not None and got is not _MIXED else None
            # (control inputs are left out: inside a body they tie a node to its frame, and the bound
            # is only needed where the loops around it run a body, ``_hoist_checks``)
            if n.op not in BOUND_OPS or (n.op == "GetItem" and len(n.inputs) > 1):
                return None
            if key(u) not in done:
                xs = [value(i, depth + 1) for i in n.inputs]
                if any(x is None or x is DEAD for x in xs):
                    return None
                senv = {key(i): x for i, x in zip(n.inputs, xs, strict=True)}
                state = self.state
                try:  # (whatever a failing op would write to the error word is dropped)
                    self.run_node(n, senv)
                except TurnoutError:
                    return None
                finally:
                    self.state = state
                done.update((key(o), senv.get(key(o))) for o in n.outputs)
            return done[key(u)]

        got = value(t, 0)
        return got if got is not None and is_static(got) else None

    def _hoist_checks(self, chain: list[tuple[WhileRegion, Any]]) -> None:
        """The iteration-bound checks of a nest of counted loops, made once, before its head is
        entered: loop ``j`` runs ``bound`` bodies (the chain gives each loop's number of bodies,
        ``counted_bound``), so it goes over ``max_iterations`` exactly when ``bound > max_iterations``
        and the loops around it each run a body (``bound > 0``). Of several such loops the innermost
        entered is named: run in order, it is the first to spend its budget (in the first iteration
        of the loops around it), as it was when each loop checked after itself. (The interpreters
        let outer iterations run ahead, up to ``parallel_iterations``, and may name an outer loop
        that is over its bound too.)

        Why: a check after each loop writes the error word, which then is a loop variable of every
        loop around it, and XLA:CPU compiled a 64-level nest in twice the time of JAX's own (see
        docs/missing.rst). A nest whose bodies can fail in other ways is traced again without this
        (``HoistConflict``): which error comes first would then depend on where it is raised."""
        code: Any = np.int32(0)
        entered: Any = np.bool_(True)
        mi = jnp.asarray(self.max_iter, jnp.int32)
        outer = self.frames[-1] if self.frames else 0
        for loop, bound in chain:
            number = loop_number(self.program, loop)
            self.codes.name_loop(number, runaway_message(loop.describe()))
            b = jnp.asarray(bound, jnp.int32)
            bad = jax.lax.bitwise_and(jnp.asarray(entered, bool), jax.lax.gt(b, mi))
            code = jax.lax.select(bad, np.int32(NONTERM + number - outer), jnp.asarray(code, jnp.int32))
            entered = jax.lax.bitwise_and(jnp.asarray(entered, bool), jax.lax.gt(b, np.int32(0)))
            self.hoisted.add(id(loop))
        err = jnp.asarray(self.state["err"], jnp.int32)
        unset = jax.lax.bitwise_and(jax.lax.eq(err, np.int32(0)), jax.lax.ne(code, np.int32(0)))
        self.state["err"] = jax.lax.select(unset, code, err)

    def enter_counted_stacks(self, r: WhileRegion, chain: list[tuple[WhileRegion, Any]]) -> dict[str, tuple[int, ...]]:
        """The counted stacks (``fast.counted_stacks``) whose chain loop ``r`` heads and whose pushes
        are proved as ``r`` is entered, each with its chain's trip counts: every loop of the chain
        counted with a trip count known when tracing (``chain``: ``_counted_chain`` of ``r``), the
        stack empty, and all its entries fitting its buffer. Their pushes check nothing while ``r``
        is traced (``dense``)."""
        found = self.counted.get(id(r))
        if not found:
            return {}
        out: dict[str, tuple[int, ...]] = {}
        for cs in found:
            k = len(cs.loops)
            if len(chain) < k or any(c is not lp for (c, _), lp in zip(chain, cs.loops, strict=False)):
                continue
            bodies = [b for _, b in chain[:k]]
            if not all(is_static(b) for b in bodies):
                continue
            dims = tuple(int(b) for b in bodies)
            s = self.state.get(cs.key)
            if not isinstance(s, stk.StackValue) or s.pending or not is_static(s.ptr) or int(s.ptr) != 0:
                continue
            if math.prod(dims) > s.capacity:  # (its head is a root item: every run that gets this far pushes them)
                raise RungTooSmall(cs.key, math.prod(dims), s.capacity)
            if cs.key in self.resizable:  # (zeroing and carrying a buffer of the rung's capacity cost the call)
                n = max(math.prod(dims), 1)
                self.state[cs.key] = stk.StackValue(n, s.dtype, jnp.zeros((n, *s.buf.shape[1:]), s.dtype), None,
                                                    np.int32(0))
            self.dense.add(cs.key)
            if cs.counter is not None:
                self.counter_pushes[cs.key] = cs.counter
            out[cs.key] = dims
        return out

    def _proved_stack_ops(self, r: WhileRegion) -> frozenset[int]:
        """The ids of the stack ops of loop ``r`` (at any depth) that write nothing to the error word
        when traced, as far as can be told before: the pushes of counted stacks whose chains are
        being traced (``dense``), the pops of full counted stacks (``full``), whose indices the
        counters' ranges usually prove, and the ops of held stacks (``fast.held``). (A pop they do
        not prove is checked, and the nest traced again with its checks after each loop,
        ``HoistConflict``.)"""
        ids = set()
        if self.dense or self.full or self.held:
            for n in r.nodes:
                if n.op == "StackPush" or n.op == "StackPop":
                    k = stack_key_of(n)
                    if k in self.held or k in (self.dense if n.op == "StackPush" else self.full):
                        ids.add(n.id)
        return frozenset(ids)

    def fill_counted_stacks(self, counted: dict[str, tuple[int, ...]]) -> None:
        """After the loop that heads their chains: the stacks ``counted`` (``enter_counted_stacks``)
        whose push was traced hold an entry at every position, and their pointers stand at the number
        of entries (a constant: a run in which the loops ended otherwise has its error word set)."""
        for k, dims in counted.items():
            self.dense.discard(k)
            if k not in self.pushed_counted:  # its push never ran: it pushed nothing, and its pops check
                continue
            s = self.state[k]
            self.state[k] = stk.StackValue(s.capacity, s.dtype, s.buf, s.idx, np.int32(math.prod(dims)))
            self.full[k] = dims

    def run_light_while(self, r: WhileRegion, env: Env) -> None:
        """A loop whose header is speculable (``light_header``), as ``lax.while_loop`` in the shape a
        hand-written JAX loop has: the carry is the loop variables and the run-time state, the
        predicate is computed by the loop's test (not carried), and the iteration bound reads the
        counter ``while_loop`` already keeps (``counters``) instead of adding one.

        Why: every extra element of a loop carry (the predicate, an iteration count) costs XLA
        copies and kernels at every nesting level; with them, nested loops took 3 to 7 times as long
        to compile as the same loops written in JAX. The header runs again at the start of the body
        and after the loop, which is invisible because it has no effects and cannot fail.

        In three steps: the loop's trace context (``_LightLoop``: header, sides, exit), the form of
        its carry decided from the facts known before tracing (``_light_form``), and the emission
        (``_emit_light``), which a nest whose hoisted checks met an error retraces once without them.
        """
        self.hold(r, self.state)
        loop = _LightLoop(self, r, env)
        vals0 = [self.read(env, e.inputs[0], m) for e, m, _, _, _ in r.loop_vars]
        if any(v is DEAD for v in vals0):
            for x in r.exits:
                env[key(x.outputs[0])] = DEAD
            return
        vals0 = _settled_arrays(r, vals0)
        _, p0 = loop.header(vals0, True)
        if is_static(p0) and not bool(p0):
            loop.finish(vals0, True)
            return
        # the nest ``r`` heads, as far as its loops are counted: computed once, for its counted stacks
        # and for the hoisted checks (whose proof reads the stacks entered here, ``dense``)
        nest = self._counted_chain(r, env) if self.counted.get(id(r)) else None
        counted = self.enter_counted_stacks(r, nest or [])
        form = self._light_form(r, env, loop, vals0, nest)
        saved_state = dict(self.state)
        if form.chain:
            if form.small or form.wrapped:
                self.unbounded.update(id(c) for c, _ in form.chain)
            self._hoist_checks(form.chain)
            loop.before = self.state["err"]  # (the hoisted codes count from the enclosing loop already)
        self.hoist_depth += bool(form.chain)
        try:
            try:
                kept = self._emit_light(loop, form, vals0)
            finally:
                self.hoist_depth -= bool(form.chain)
        except HoistConflict:
            if not form.chain:
                raise
            # something inside the nest may fail before a bound does: trace it again, checking each
            # loop's bound after it as before, and try no hoisting anywhere inside it again
            self.hoisted.difference_update(id(c) for c, _ in form.chain)
            self.unbounded.difference_update(id(c) for c, _ in form.chain)
            self.no_hoist.update(id(w) for w in walk([r]) if isinstance(w, WhileRegion))
            self.state = saved_state
            self.dense.difference_update(counted)
            self.run_light_while(r, env)
            return
        loop.finish(form.full(kept, len(vals0)), False)
        self.fill_counted_stacks(counted)
        # the nest's checks hold for this trace of it only: a loop of it traced again elsewhere (a case
        # chain traces its outer regions once per branch) is checked there as that trace decides
        self.hoisted.difference_update(id(c) for c, _ in form.chain)
        self.unbounded.difference_update(id(c) for c, _ in form.chain)

    def _light_form(self, r: WhileRegion, env: Env, loop: _LightLoop, vals0: list[Any],
                    nest: Optional[list[tuple[WhileRegion, Any]]]) -> _LoopForm:
        """How the light loop ``r`` is carried, from what is known before its body is traced.

        Counters (next = self + 1) that start equal stay equal: one of them is carried for all
        (``while_loop``'s own counter and a user's ``i`` are usually such twins), and one that starts
        at 0 is the iteration count the bound tests. The counter's range in every body
        (``fast.ranges``): from its start to the bound less one; with it, the loop variables each body
        writes at a slot that moves with it, whose entry values say which slots they hold written,
        and the counters' values after the loop (``exit_counts``, into ``loop.exits``).

        Where XLA may see a trip count (a static bound), the nest's loops test their headers alone
        (``unbounded``). A small nest (``SMALL_NEST`` bodies at most, every bound static) then runs
        whole even after its checks failed: a run with the error word set returns nothing, and
        nothing in the nest has an effect (``cannot_fail``) but pushes onto counted stacks, which such
        a run never reads. A larger one runs in a cond on its checks, so that it is skipped
        (``wrapped``). Why not always the cond: it costs each run about a microsecond on the CPU (a
        small RNN training step, two one-loop nests, 1.62 times JAX's fixed cost with them and 1.55
        without), and without a known trip count XLA:CPU evaluates each loop's test computation at
        every iteration."""
        starts = {j: int(vals0[j]) for j in counters(r) if is_static(vals0[j])}
        twin = {j: next(k for k in starts if starts[k] == v) for j, v in starts.items()}
        keep = [j for j in range(len(vals0)) if twin.get(j, j) == j]
        count = next((j for j in keep if starts.get(j) == 0), None)
        head = self.hoist_depth == 0 and id(r) not in self.no_hoist and loop.number > 0 \
            and cannot_fail(r.nodes, counter_merges(r), self._proved_stack_ops(r))
        found = bounded_counter(r)
        ranged: Optional[tuple[int, int, int]] = None
        fresh: dict[int, frozenset[int]] = {}
        if found is not None and twin.get(found[0], found[0]) in starts:
            b = found[1].node
            bound = loop.base.get(key(found[1])) if b.op != "Const" else np.asarray(b.attrs["value"])
            if bound is not None and is_static(bound) and np.asarray(bound).shape == ():
                ranged = (found[0], starts[twin.get(found[0], found[0])], int(bound) - 1)
                fresh = {w.id: vals0[j].written for j, w in fresh_writes(r)
                         if isinstance(vals0[j], TA) and vals0[j].written is not None}
                loop.exits.update(exit_counts(starts, ranged))
        chain = (nest if nest is not None else self._counted_chain(r, env)) if head else []
        bodies = [int(b) for _, b in chain if is_static(b)]
        small = bool(chain) and len(bodies) == len(chain) and math.prod(bodies) <= SMALL_NEST
        wrapped = not small and any(is_static(b) for _, b in chain)
        return _LoopForm(keep, twin, count, ranged, fresh, chain, small, wrapped)

    def _emit_light(self, loop: _LightLoop, form: _LoopForm, vals0: list[Any]) -> list[Any]:
        """The ``lax.while_loop`` of a light loop in ``form``; its carried loop variables after it.

        A loop of a nest whose bounds were checked before it (``_hoist_checks``) and that runs inside a
        ``lax.cond`` on that check needs no iteration bound of its own: its test is its header alone,
        where XLA sees its trip count when the bound is static. (With every bound fed, XLA sees none,
        and the cond costs 5 to 10 ms of compile time: such a nest's loops test their bounds.)"""
        r = loop.r
        c0 = ([vals0[j] for j in form.keep], self.state, None if form.counter is not None else np.int32(0),
              ([loop.base[k] for k in loop.hkeys], self.max_iter))
        # (nothing in a hoisted nest writes the error word, ``HoistConflict``: its loops need not test it)
        stop = self.stop_on_error and id(r) not in self.hoisted and any(n.op in ("StackPush", "StackPop")
                                                                         for n in r.nodes)
        bounded = id(r) not in self.unbounded
        n = len(vals0)

        def cond(c: Any) -> Any:
            kept, state, iters, (hvals, mi) = c
            vals = form.full(kept, n)
            _, pred = loop.header(vals, False, hvals)
            ok = jnp.asarray(pred, bool)
            if bounded:
                ok = ok & ((vals[form.counter] if form.counter is not None else iters) < mi)
            return ok & (state["err"] == 0) if stop else ok

        c0, traced = self.loop_body(lambda c: loop.body(form, c), _jnp_tree(c0), r)
        if not form.wrapped:
            kept, self.state, _, _ = self._while_loop(r, cond, traced, c0)
            return kept  # type: ignore[no-any-return]
        # the nest runs only when its checks (and everything before it) passed: a run with the error
        # word set returns no value, and nothing in the nest has an effect (``cannot_fail``) but
        # pushes onto counted stacks, which such a run never reads, so skipping it is invisible
        ok = jax.lax.eq(jnp.asarray(self.state["err"], jnp.int32), np.int32(0))
        kept, self.state, _, _ = jax.lax.cond(ok, lambda c: self._while_loop(r, cond, traced, c), lambda c: c, c0)
        return kept  # type: ignore[no-any-return]



class _LoopForm(NamedTuple):
    """How a light loop is carried, decided before its body is traced (``Emitter._light_form``):
    the loop variables carried (``keep``; each other counter is the ``twin`` it starts equal to),
    the carried counter that counts iterations from 0 (``counter``, else an iteration count is
    carried), the bounded counter's range (``ranged``: its index, start, last value) and the slots
    each TensorArray holds written (``fresh``), the nest whose checks are hoisted before it
    (``chain``), and whether it runs whole (``small``) or in a cond on those checks (``wrapped``)."""

    keep: list[int]
    twin: dict[int, int]
    counter: Optional[int]
    ranged: Optional[tuple[int, int, int]]
    fresh: dict[int, frozenset[int]]
    chain: list[tuple[WhileRegion, Any]]
    small: bool
    wrapped: bool

    def full(self, kept: list[Any], n: int) -> list[Any]:
        """Every loop variable's value from the carried ones (a twin reads the counter it twins)."""
        vals: list[Any] = [None] * n
        for j, v in zip(self.keep, kept, strict=True):
            vals[j] = v
        return [vals[self.twin.get(j, j)] for j in range(n)]


class _LightLoop:
    """One light loop's trace context: its header, its two sides, its body and its exit, over the
    environment it was entered in (``Emitter.run_light_while``)."""

    def __init__(self, em: Emitter, r: WhileRegion, env: Env) -> None:
        self.em, self.r, self.env = em, r, env
        self.base = dict(env)
        for inv in r.invariants:
            self.base[key(inv.outputs[0])] = em.read(env, inv.inputs[0], inv)
        self.pkey = key(r.loop_cond.inputs[0])
        self.lck = key(r.loop_cond.outputs[0])
        # The invariants the header reads (and the iteration bound) travel in the carry: the loop's
        # test then closes over nothing, so they are not passed to XLA's loop twice (once for the
        # test, once for the body).
        self.hkeys = sorted({key(t) for n in r.header for t in n.inputs
                             if key(t) in self.base and not is_static(self.base[key(t)])})
        # The nonterm code names this loop counted from the enclosing light loop (``NONTERM``): in a
        # nest it is the same constant at every level, so every level's check is the same kernel.
        self.message = runaway_message(r.describe())
        self.number = loop_number(em.program, r)
        self.off = self.number - (em.frames[-1] if em.frames else 0)
        self.framed = bool(self.number) and loop_height(em.program, r) > em.frame_height
        if self.number:
            em.codes.name_loop(self.number, self.message)
        self.before = em.state["err"]
        #: loop variable index -> its value after the loop, known when tracing (``exit_counts``)
        self.exits: dict[int, Any] = {}

    def header(self, vals: list[Any], first: bool, hvals: Optional[list[Any]] = None) -> tuple[Env, Any]:
        """The header's environment and the predicate, from the loop variables ``vals``."""
        henv = dict(self.base)
        if hvals is not None:
            henv.update(zip(self.hkeys, hvals, strict=True))
        for (_, m, _, es, ns), v in zip(self.r.loop_vars, vals, strict=True):
            henv[key(m.outputs[0])] = v
            henv[key(m.outputs[1])] = np.asarray(es if first else ns, np.int32)
        self.em.run_items(self.r.header, henv)
        return henv, self.em.predicate(henv, self.r.loop_cond.inputs[0], self.r.loop_cond)

    def side(self, henv: Env, pred: Any, taken: int) -> Env:
        """The loop's environment on one side of its Switches ([E-Switch] with the predicate
        decided): output ``taken`` carries the loop value, the other output is dead."""
        senv = dict(henv)
        senv[self.pkey] = senv[self.lck] = pred
        for s in self.r.switches:
            senv[key(s.outputs[taken])] = self.em.read(senv, s.inputs[0], s)
            senv[key(s.outputs[1 - taken])] = DEAD
        return senv

    def body(self, form: _LoopForm, c: Any) -> Any:
        """One iteration on the carry ``c``: the header again, the body on the true side, the next
        values of the carried loop variables."""
        em, r = self.em, self.r
        kept, state, iters, (hvals, mi) = c
        em.state = dict(state)
        saved, em.max_iter = em.max_iter, mi
        if self.framed:
            em.frames.append(self.number)
        vals = form.full(kept, len(r.loop_vars))
        mark = em.ranges.mark()
        writes = em.fresh_writes
        if form.ranged is not None:
            em.ranges.add(vals[form.ranged[0]], form.ranged[1], form.ranged[2])
            em.fresh_writes = {**writes, **form.fresh}
        try:
            henv, pred = self.header(vals, False, hvals)
            benv = self.side(henv, pred, 1)
            em.run_items(r.body, benv)
            nxt = [em.read(benv, r.loop_vars[j][2].inputs[0], r.loop_vars[j][1]) for j in form.keep]
        finally:
            em.max_iter = saved
            if self.framed:
                em.frames.pop()
            em.ranges.forget(mark)
            em.fresh_writes = writes
        return _jnp_tree((nxt, em.state, None if iters is None else iters + 1, (hvals, mi)))

    def finish(self, vals: list[Any], first: bool) -> None:
        """After the loop: the header on its last values, the exit side on the false side, the check
        that the iteration budget was not spent, and the Exits' values into the entry environment."""
        em, r = self.em, self.r
        henv, pred = self.header(vals, first)
        if self.framed:
            em._leave_frame(self.before, self.off)
        for j, v in self.exits.items():  # (after the header: its predicate is the traced one)
            henv[key(r.loop_vars[j][1].outputs[0])] = v
        eenv = self.side(henv, pred, 0)
        em.run_items(r.exit_side, eenv)
        # a predicate still true after the loop means the iteration budget was spent (or, in a fused
        # attempt, an error stopped the loop, which the error word already holds)
        if id(r) in em.hoisted:
            pass  # checked before the nest was entered (``_hoist_checks``)
        elif not self.number:  # a loop outside the program's tree: a code of the table
            em.check(~jnp.asarray(pred), self.message, code="nonterm")
        elif not (is_static(pred) and not bool(pred)):
            em._set_err(jnp.asarray(pred, bool), NONTERM + self.off)
        for x in r.exits:
            self.env[key(x.outputs[0])] = em.read(eenv, x.inputs[0], x)


def _settled_arrays(r: WhileRegion, vals0: list[Any]) -> list[Any]:
    """The loop's entry values, a TensorArray that enters still without an element shape (a map's
    output) given the one its writes have in the graph, when that is known: the carry is then
    settled, and the body is traced once (``loop_body``). Learnt by tracing the body
    (``discover``), it cost a second trace of the body, and of every loop in it: 2^k traces of a nest
    of k maps."""
    vals = list(vals0)
    for j, w in own_writes(r):
        v, shape = vals[j], w.inputs[2].shape
        if isinstance(v, TA) and v.pending and shape is not None and all(d is not None for d in shape):
            vals[j] = v.materialize(tuple(shape), w)
    return vals


def exit_counts(starts: dict[int, int], ranged: tuple[int, int, int]) -> dict[int, Any]:
    """The values the counters of a loop whose header is ``counter < bound`` hold when it ends, both
    known when tracing (``ranged``: the header's counter, its start, ``bound - 1``): the loop runs
    ``max(bound - start, 0)`` bodies, and each counter (``starts``: loop variable index -> its
    start) ends that many past its start.

    Why they may be constants: a run in which the loop ends otherwise (its iteration budget spent,
    or an error that stops a fused attempt's loop) has its error word set, and none of its values
    is returned. As constants, the trip count that a gradient reads from the loop's counter is known
    when its backward loop is traced: that loop is counted too (its counter's range proves the
    indices it pops, ``fast.ranges``), and a nested loop's trip count, pushed as a constant, pops as
    one (``Emitter.pushed_constant``)."""
    bodies = max(ranged[2] + 1 - ranged[1], 0)
    return {j: np.int32(s + bodies) for j, s in starts.items()}


class HoistConflict(Exception):
    """Raised while a nest of counted loops whose bound checks were made before it
    (``Emitter._hoist_checks``) is traced, when something inside it writes the error word: the nest is
    traced again with each loop's check after it, so errors keep the order the interpreters raise
    them in."""


#: ops from which an inner loop's bound may be computed at the head of its nest
#: (``Emitter._bound_at_head``): no effects, and static results from static inputs
BOUND_OPS = frozenset({"Const", "Identity", "Shape", "Size", "GetItem", "TensorArraySize", "Add", "Sub", "Mul",
                       "Maximum", "Minimum"})
#: how deep a bound's expression is followed (its hops from one loop of the nest to the loop around
#: it not counted)
BOUND_DEPTH = 16
#: the most bodies (all levels together) a hoisted nest with static bounds may run after its checks
#: failed, instead of being skipped by a cond (``Emitter.run_light_while``)
SMALL_NEST = 4096


class BodyTypeError(Exception):
    """A ``TypeError`` raised while tracing a loop body inside ``lax.while_loop`` (``loop_body``),
    carried past the handler that turns the loop's own type errors into ``UnsupportedError`` and
    raised again as itself: a fault in a lowering must surface, not send the program to the
    interpreter as if its loop variable changed shape."""


def settled(carry: Any) -> bool:
    """Whether a loop's initial carry already has the type its body gives it back: no pending
    TensorArray or stack (their first write fixes their shape), no dead value, no weakly typed leaf
    (``lax.while_loop`` traces the body a second time to promote one, and a nest of such loops
    would be traced ``2^depth`` times)."""
    def special(v: Any) -> bool:
        return v is DEAD or isinstance(v, (TA, stk.StackValue))

    for v in jax.tree_util.tree_leaves(carry, is_leaf=special):
        if v is DEAD or (isinstance(v, (TA, stk.StackValue)) and v.pending):
            return False
        if not special(v) and jax.typeof(v).weak_type:
            return False
    return True
