"""Nests of counted loops while tracing: the nest a loop heads with each level's number of bodies
(``_counted_chain``), their iteration-bound checks made once before the nest (``_hoist_checks``),
and the counted gradient stacks whose pushes such a nest proves (``fast.counted_stacks``).

Why: a check after each loop writes the error word, which then is a loop variable of every loop
around it; XLA:CPU compiled a 64-level nest in twice the time of JAX's own. A counted loop (counter
from a constant advanced by 1, ``counter < bound`` with the bound fixed on entry, ``facts.counted_bound``)
runs a number of bodies known at its entry, so whether it goes over ``max_iterations`` is known
before it starts.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout.errors import TurnoutError, UnsupportedError, describe_node, runaway_message
from turnout.fast import stacks as stk
from turnout.fast.counted_stacks import RungTooSmall
from turnout.fast.emitter_core import MIXED, Env
from turnout.fast.facts import counted_bound, light_header
from turnout.fast.loops import LoopEmitter
from turnout.fast.outcome import NONTERM
from turnout.fast.regions import WhileRegion, key, loop_number
from turnout.fast.state_keys import stack_key, stack_key_of
from turnout.fast.values import DEAD, Handle, is_static
from turnout.graph import Node, Tensor

#: ops from which an inner loop's bound may be computed at the head of its nest
#: (``CountedNests._bound_at_head``): no effects, and static results from static inputs
BOUND_OPS = frozenset({"Const", "Identity", "Shape", "Size", "GetItem", "TensorArraySize", "Add", "Sub", "Mul",
                       "Maximum", "Minimum"})
#: how deep a bound's expression is followed (its hops from one loop of the nest to the loop around
#: it not counted)
BOUND_DEPTH = 16


class CountedNests(LoopEmitter):
    """The emitter's counted nests: their chains, their hoisted checks, their counted stacks."""

    # the core's trace state this layer writes, declared for mypy, which reads the layers below as ``Any``
    # (it checks fast/ as the package ``fast``, and ``turnout.fast`` is installed, not found by path)
    state: dict[str, Any]

    hoisted: set[int]
    no_hoist: set[int]
    unbounded: set[int]
    _inside: dict[int, frozenset[int]]
    counted: dict[int, list[Any]]
    dense: set[str]
    full: dict[str, tuple[int, ...]]
    pushed_counted: set[str]
    resizable: set[str]
    skipped: set[str]
    counter_pushes: dict[str, tuple[int, int]]
    push_ranges: dict[str, Optional[tuple[int, int]]]

    def init_trace_state(self) -> None:
        """The loops' state, and the hoisted nests' and counted stacks' (below)."""
        super().init_trace_state()
        #: counted loops whose iteration-bound check was made before the nest they head was entered
        #: (``_hoist_checks``), by id; the ids of loops in whose nests hoisting was tried and refuted
        #: while tracing (``LightLoops.run_light_while``), never tried again
        self.hoisted = set()
        self.no_hoist = set()
        #: the hoisted loops whose tests leave out the iteration bound (``LightLoops.run_light_while``)
        self.unbounded = set()
        #: id(WhileRegion) -> the ids of the nodes in it (``_bound_at_head``)
        self._inside = {}
        #: the counted stacks of the program by the root loop heading their chains
        #: (``fast.counted_stacks``); set by the plan for its fused trace only, whose stacks start empty
        self.counted = {}
        #: counted stacks whose chain is being traced, proved (their pushes check nothing); and those
        #: whose chain has ended: stack key -> the chain's trip counts (their pops read the entry at
        #: their index's position, ``counted_stacks.read``)
        self.dense = set()
        self.full = {}
        #: the counted stacks whose push was traced while their chain was (``note_push_range``): a
        #: push that was not (its input dead when traced) pushed nothing, and its stack is not full
        self.pushed_counted = set()
        #: the stacks the fused call makes inside itself (``Plan.inside``): a counted one is made
        #: there with as many entries as its chain pushes, not the rung's capacity
        self.resizable = set()
        #: counted stacks some push of which wrote nothing (``skip_push``)
        self.skipped = set()
        #: counted stacks whose push pushes a counter of their chain (``CountedStack.counter``):
        #: stack key -> (the loop's level in the chain, the counter's start)
        self.counter_pushes = {}
        #: counted stack key -> the range of every integer value its push pushed (``note_push_range``),
        #: or None where one was not known
        self.push_ranges = {}

    # ---- counted stacks, as the lowering rules see them (LoweringContext) --------------------------
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

    # ---- nests ----------------------------------------------------------------------------------
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
                return got if got is not None and got is not MIXED else None
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
        docs/missing.rst). Only a nest in which nothing else can fail is checked so
        (``facts.hoistable``, decided before it is traced; what the trace alone can tell is traced
        again without this, ``LightLoops._emit_hoisted``): which error comes first would otherwise
        depend on where it is raised."""
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
            if not isinstance(s, stk.StackValue) or not (s.pending or is_static(s.ptr) and int(s.ptr) == 0):
                continue  # (not a stack known empty here)
            if math.prod(dims) > s.capacity:  # (its head is a root item: every run that gets this far pushes
                raise RungTooSmall(cs.key, math.prod(dims), s.capacity)  # them, its shapes known or not)
            if s.pending:
                continue
            if cs.key in self.resizable:  # (zeroing and carrying a buffer of the rung's capacity cost the call)
                n = max(math.prod(dims), 1)
                buf = stk.placed(jnp.zeros((n, *s.buf.shape[1:]), s.dtype), s.host)
                self.state[cs.key] = stk.StackValue(n, s.dtype, buf, None, np.int32(0), host=s.host)
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
        ``LightLoops.run_light_while``.)"""
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
            self.state[k] = s.replace(s.buf, s.idx, np.int32(math.prod(dims)))
            self.full[k] = dims


__all__ = ["BOUND_DEPTH", "BOUND_OPS", "CountedNests"]
