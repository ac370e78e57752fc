"""Light loops while tracing: a loop whose header may be recomputed (``facts.light_header``) as
``lax.while_loop`` in the shape a hand-written JAX loop has — the loop variables and the run-time
state in the carry, the predicate computed by the loop's test — with its form (which counters are
carried, which ranges are known, whether a nest's bound checks are made before it) chosen before its
body is traced.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout.errors import runaway_message
from turnout.fast import plumbing
from turnout.fast.counted_nests import CountedNests
from turnout.fast.emitter_core import Env
from turnout.fast.facts import (
    cannot_fail,
    counted_range,
    counter_merges,
    counter_starts,
    exit_counts,
    fresh_writes,
    hoistable,
    nest_loops,
    own_writes,
)
from turnout.fast.outcome import NONTERM
from turnout.fast.regions import WhileRegion, item_nodes, key, loop_height, loop_number
from turnout.fast.tracing import jnp_tree
from turnout.fast.values import DEAD, TA, is_static

#: the most bodies (all levels together) a hoisted nest with static bounds may run after its checks
#: failed, instead of being skipped by a cond (``LightLoops.run_light_while``)
SMALL_NEST = 4096


class LightLoops(CountedNests):
    """The emitter's light loops: ``run_light_while``."""

    # the core's trace state this layer writes, declared for mypy, which reads the layers below as ``Any``
    # (it checks fast/ as the package ``fast``, and ``turnout.fast`` is installed, not found by path)
    state: dict[str, Any]
    refuted: bool
    hoist_depth: int
    fresh_writes: dict[int, frozenset[int]]
    max_iter: Any

    def run_light_while(self, r: WhileRegion, env: Env) -> None:
        """A loop whose header is speculable (``light_header``), as ``lax.while_loop`` in the shape a
        hand-written JAX loop has: the carry is the loop variables and the run-time state, the
        predicate is computed by the loop's test (not carried), and the iteration bound reads the
        counter ``while_loop`` already keeps (``counters``) instead of adding one.

        Why: every extra element of a loop carry (the predicate, an iteration count) costs XLA
        copies and kernels at every nesting level; with them, nested loops took 3 to 7 times as long
        to compile as the same loops written in JAX. The header runs again at the start of the body
        and after the loop, which is invisible because it has no effects and cannot fail.

        In three steps: the loop's trace context (``LightLoop``: header, sides, exit), the form of
        its carry decided from the facts known before its body is traced (``_light_form``, with
        ``facts.hoistable`` for a nest's checks), and the emission (``_emit_light``, or
        ``_emit_hoisted`` for a nest whose checks are made before it). A hoisted nest's trace may
        still refute the form (an index the trace cannot prove, ``facts.hoistable``): the outcome is
        ``None``, and the nest is traced once more without hoisting, which is then never tried inside
        it again.
        """
        self.hold(r, self.state)
        loop = LightLoop(self, r, env)
        vals0 = [self.read(env, t, m) for t, m in plumbing.entries(r)]
        if any(v is DEAD for v in vals0):
            self.wire(plumbing.dead(plumbing.exit_keys(r)), env)
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
        kept = self._emit_hoisted(loop, form, vals0) if form.chain else self._emit_light(loop, form, vals0)
        if kept is None:  # the trace refuted the hoisted checks: trace the nest again without them
            self.dense.difference_update(counted)
            self.run_light_while(r, env)
            return
        loop.finish(form.full(kept, len(vals0)), False)
        self.fill_counted_stacks(counted)
        # the nest's checks hold for this trace of it only: a loop of it traced again elsewhere (a case
        # chain traces its outer regions once per branch) is checked there as that trace decides
        self.hoisted.difference_update(id(c) for c, _ in form.chain)
        self.unbounded.difference_update(id(c) for c, _ in form.chain)

    def trace_point(self) -> tuple[dict[str, Any], set[str]]:
        """What a loop's trace changes of the emitter (its run-time state, the counted stacks it
        entered), as it is now: a trace abandoned inside the loop goes back to it (``back_to``)."""
        return dict(self.state), set(self.dense)

    def back_to(self, point: tuple[dict[str, Any], set[str]]) -> None:
        """The emitter as it was at ``point`` (``trace_point``)."""
        self.state, self.dense = dict(point[0]), set(point[1])

    def _emit_hoisted(self, loop: LightLoop, form: LoopForm, vals0: list[Any]) -> Optional[list[Any]]:
        """The nest ``loop`` heads with its bound checks made before it (``_hoist_checks``): its
        carried loop variables after it, or ``None`` where its trace wrote the error word (something
        ``facts.hoistable`` could not see fails inside), with the state as before and no hoisting
        tried in the nest again."""
        ids = [id(c) for c, _ in form.chain]
        saved_state = dict(self.state)
        if form.small or form.wrapped:
            self.unbounded.update(ids)
        self._hoist_checks(form.chain)
        loop.before = self.state["err"]  # (the hoisted codes count from the enclosing loop already)
        self.hoist_depth += 1
        try:
            kept = self._emit_light(loop, form, vals0)
        finally:
            self.hoist_depth -= 1
            was_refuted = self.refuted
            self.refuted = False
        if not was_refuted:
            return kept
        self.hoisted.difference_update(ids)
        self.unbounded.difference_update(ids)
        self.no_hoist.update(nest_loops(loop.r))
        self.state = saved_state
        return None

    def _light_form(self, r: WhileRegion, env: Env, loop: LightLoop, vals0: list[Any],
                    nest: Optional[list[tuple[WhileRegion, Any]]]) -> LoopForm:
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
        starts = counter_starts(r, vals0)
        twin = {j: next(k for k in starts if starts[k] == v) for j, v in starts.items()}
        keep = [j for j in range(len(vals0)) if twin.get(j, j) == j]
        count = next((j for j in keep if starts.get(j) == 0), None)
        head = self.hoist_depth == 0 and id(r) not in self.no_hoist and loop.number > 0 \
            and cannot_fail(r.nodes, counter_merges(r), self._proved_stack_ops(r))
        ranged = counted_range(r, starts, loop.base)
        fresh: dict[int, frozenset[int]] = {}
        if ranged is not None:
            fresh = {w.id: vals0[j].written for j, w in fresh_writes(r)
                     if isinstance(vals0[j], TA) and vals0[j].written is not None}
            loop.exits.update(exit_counts(starts, ranged))
        chain = (nest if nest is not None else self._counted_chain(r, env)) if head else []
        if chain and not hoistable(r, chain):
            chain = []
        bodies = [int(b) for _, b in chain if is_static(b)]
        small = bool(chain) and len(bodies) == len(chain) and math.prod(bodies) <= SMALL_NEST
        wrapped = not small and any(is_static(b) for _, b in chain)
        return LoopForm(keep, twin, count, ranged, fresh, chain, small, wrapped)

    def _emit_light(self, loop: LightLoop, form: LoopForm, vals0: list[Any]) -> list[Any]:
        """The ``lax.while_loop`` of a light loop in ``form``; its carried loop variables after it.

        A loop of a nest whose bounds were checked before it (``_hoist_checks``) and that runs inside a
        ``lax.cond`` on that check needs no iteration bound of its own: its test is its header alone,
        where XLA sees its trip count when the bound is static. (With every bound fed, XLA sees none,
        and the cond costs 5 to 10 ms of compile time: such a nest's loops test their bounds.)"""
        r = loop.r
        c0 = ([vals0[j] for j in form.keep], self.state, None if form.counter is not None else np.int32(0),
              ([loop.base[k] for k in loop.hkeys], self.max_iter))
        # (nothing in a hoisted nest writes the error word, ``facts.hoistable``: its loops need not test it)
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

        c0, traced = self.loop_body(lambda c: loop.body(form, c), jnp_tree(c0), r)
        if not form.wrapped:
            kept, self.state, _, _ = self._while_loop(r, cond, traced, c0)
            return kept  # type: ignore[no-any-return]
        # the nest runs only when its checks (and everything before it) passed: a run with the error
        # word set returns no value, and nothing in the nest has an effect (``cannot_fail``) but
        # pushes onto counted stacks, which such a run never reads, so skipping it is invisible
        ok = jax.lax.eq(jnp.asarray(self.state["err"], jnp.int32), np.int32(0))
        kept, self.state, _, _ = jax.lax.cond(ok, lambda c: self._while_loop(r, cond, traced, c), lambda c: c, c0)
        return kept  # type: ignore[no-any-return]


class LoopForm(NamedTuple):
    """How a light loop is carried, decided before its body is traced (``LightLoops._light_form``):
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


class LightLoop:
    """One light loop's trace context: its header, its two sides, its body and its exit, over the
    environment it was entered in (``LightLoops.run_light_while``)."""

    #: the error word as the loop began (``EmitterCore._leave_frame``)
    before: Any

    def __init__(self, em: LightLoops, r: WhileRegion, env: Env) -> None:
        self.em: LightLoops = em
        self.r: WhileRegion = r
        self.env: Env = env
        self.base = dict(env)
        em.wire(plumbing.invariant_wires(r), env, self.base)
        self.pkey = key(r.loop_cond.inputs[0])
        self.lck = key(r.loop_cond.outputs[0])
        # The invariants the header reads (and the iteration bound) travel in the carry: the loop's
        # test then closes over nothing, so they are not passed to XLA's loop twice (once for the
        # test, once for the body).
        self.hkeys = sorted({key(t) for it in r.header for n in item_nodes(it) for t in n.inputs
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
        for (kv, ki, idx), v in zip(plumbing.merge_outputs(self.r, first), vals, strict=True):
            henv[kv], henv[ki] = v, idx
        self.em.run_items(self.r.header, henv)
        return henv, self.em.predicate(henv, self.r.loop_cond.inputs[0], self.r.loop_cond)

    def side(self, henv: Env, pred: Any, taken: int) -> Env:
        """The loop's environment on one side of its Switches ([E-Switch] with the predicate
        decided): output ``taken`` carries the loop value, the other output is dead."""
        senv = dict(henv)
        senv[self.pkey] = senv[self.lck] = pred
        self.em.wire(plumbing.switch_wires(self.r.switches, taken), senv)
        return senv

    def body(self, form: LoopForm, c: Any) -> Any:
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
            nexts = plumbing.next_values(r)
            nxt = [em.read(benv, *nexts[j]) for j in form.keep]
        finally:
            em.max_iter = saved
            if self.framed:
                em.frames.pop()
            em.ranges.forget(mark)
            em.fresh_writes = writes
        return jnp_tree((nxt, em.state, None if iters is None else iters + 1, (hvals, mi)))

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
        em.wire(plumbing.exit_wires(r), eenv, self.env)


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


__all__ = ["SMALL_NEST", "LightLoop", "LightLoops", "LoopForm", "exit_counts"]
