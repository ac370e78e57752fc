"""Full while loops while tracing: a ``WhileRegion`` as ``lax.while_loop`` whose carry holds the loop
state the header computed, the predicate, the run-time state and an iteration count.

The header runs once before the loop and at the end of each body, so the predicate is computed once
per iteration. A body is traced once (``loop_body``, ``discover``): when its carry is settled
(``tracing.settled``), ``lax.while_loop`` traces it itself; otherwise it is traced into a jaxpr until
its carry keeps its type, and the loop replays that jaxpr. Loops whose headers may be recomputed take
the lighter form of ``fast.light_loops``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout.errors import UnsupportedError, runaway_message
from turnout.fast import plumbing
from turnout.fast.conds import CondEmitter
from turnout.fast.emitter_core import Env
from turnout.fast.facts import counter_exits
from turnout.fast.regions import WhileRegion, key, program_nodes
from turnout.fast.tracing import Traced, jnp_tree, reconcile, settled
from turnout.fast.values import DEAD, is_static


class _BodyFault(Exception):
    """Carries a ``TypeError`` of a settled loop body's own lowering out of ``lax.while_loop``'s trace
    (``loop_body``) to ``_while_loop``, past its handler of the loop's own type errors, which raises
    the ``TypeError`` again as itself: a fault in a lowering must surface, not send the program to
    the interpreter as if its loop variable changed shape.

    Why an exception: it crosses a JAX trace boundary (the body runs inside ``lax.while_loop``, which
    can only be left by raising) and goes no further than the method around that call; it steers no
    layer (nothing retries, falls back or deepens on it)."""


class CarryChanges(UnsupportedError):
    """Loop ``region``'s carry changes type across iterations (a loop variable with
    ``shape_invariants``): it has no ``lax.while_loop``. Raised inside the loop's trace (only raising
    leaves it) and caught around that one loop (``Emitter.run_while``), which unrolls it where the
    trace knows its trip count (``fast.unrolled``); elsewhere it is the ``UnsupportedError`` it is."""

    def __init__(self, message: str, region: Optional[WhileRegion]) -> None:
        super().__init__(message)
        self.region = region


class LoopEmitter(CondEmitter):
    """The emitter's full while loops (``run_full_while``) and the body tracing every loop form shares
    (``loop_body``, ``_while_loop``)."""

    # the core's trace state this layer writes, declared for mypy, which reads the layers below as ``Any``
    # (it checks fast/ as the package ``fast``, and ``turnout.fast`` is installed, not found by path)
    state: dict[str, Any]

    _read_at_1: Optional[set[int]]

    def init_trace_state(self) -> None:
        """The conds' state, and the nodes whose output 1 some node reads (``read_at_1``), found once."""
        super().init_trace_state()
        self._read_at_1 = None

    def while_fns(self, r: WhileRegion, env: Env) -> tuple[Callable[..., Any], ...]:
        """(start, body, finish) of a While region closed over ``env``.

        The carry is ``(carried values, predicate, state, iteration count)``: the header runs once
        before the loop and at the end of each body, so the predicate is computed once per iteration.
        """
        base = dict(env)
        self.wire(plumbing.invariant_wires(r), env, base)
        pkey = key(r.loop_cond.inputs[0])
        ckeys = [key(t) for t in r.carried if key(t) != pkey]  # the predicate has its own slot
        lck = key(r.loop_cond.outputs[0])
        exits: Env = {}  # the counters' values after the loop, where it is counted (``facts.counter_exits``)

        def header(vals: list[Any], first: bool, state: dict[str, Any]) -> tuple[Any, ...]:
            self.state = dict(state)
            henv = dict(base)
            for (kv, ki, idx), v in zip(plumbing.merge_outputs(r, first), vals, strict=True):
                henv[kv], henv[ki] = v, idx
            self.run_items(r.header, henv)
            return [henv[k] for k in ckeys], self.predicate(henv, r.loop_cond.inputs[0], r.loop_cond), self.state

        def start(state: dict[str, Any]) -> Any:
            self.hold(r, state)  # (before a dead entry: the backward loop's pops read it even then)
            vals0 = [self.read(env, t, m) for t, m in plumbing.entries(r)]
            if any(v is DEAD for v in vals0):
                return None
            exits.update({key(r.loop_vars[j][1].outputs[0]): v for j, v in counter_exits(r, vals0, base).items()})
            vals, pred, st = header(vals0, True, state)
            return (vals, pred, st, np.asarray(0, np.int32))

        def side_env(vals: Any, pred: Any, taken: int, known: Optional[Env] = None) -> Env:
            """The loop's environment on one side of its Switches ([E-Switch], the predicate decided), with
            the values ``known`` while tracing in place of carried ones (the counters after the loop)."""
            env = {**base, **dict(zip(ckeys, vals, strict=True)), **(known or {}), pkey: pred, lck: pred}
            self.wire(plumbing.switch_wires(r.switches, taken), env)
            return env

        def body(c: Any) -> Any:
            vals, pred, state, iters = c
            self.state = dict(state)
            benv = side_env(vals, pred, 1)
            self.run_items(r.body, benv)
            nxt = [self.read(benv, t, m) for t, m in plumbing.next_values(r)]
            vals2, pred2, st2 = header(nxt, False, self.state)
            return jnp_tree((vals2, pred2, st2, iters + 1))

        def finish(c: Any, out_env: Env) -> None:
            if c is None:
                self.wire(plumbing.dead(plumbing.exit_keys(r)), out_env)
                return
            vals, pred, state, iters = c
            self.state = dict(state)
            eenv = side_env(vals, pred, 0, exits)
            self.run_items(r.exit_side, eenv)
            # The loop stops when its predicate is false, when the iteration budget is spent, or (in a fused
            # attempt) on an error, which the error word holds: a true predicate here means the budget was spent.
            self.check(~jnp.asarray(pred), runaway_message(r.describe()), code="nonterm")
            self.wire(plumbing.exit_wires(r), eenv, out_env)

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
                    # not reach the handler around lax.while_loop, which reports that (see ``_BodyFault``)
                    raise _BodyFault() from e
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
            raise CarryChanges(
                f"fast backend: a loop variable of {region.describe() if region else 'a loop'} changes "
                "type or shape across iterations (shape_invariants); XLA loops need a fixed shape", region)

    def read_at_1(self) -> set[int]:
        """The ids of the program's nodes whose output 1 some node reads (``light_header``), found once."""
        if self._read_at_1 is None:
            self._read_at_1 = {t.node.id for n in program_nodes(self.program) for t in n.inputs if t.index == 1}
        return self._read_at_1

    def run_full_while(self, r: WhileRegion, env: Env) -> None:
        """Loop ``r`` as ``lax.while_loop`` whose carry holds the values the header computed and the
        predicate, the run-time state and an iteration count (``while_fns``): the form of every loop
        whose header is not light (``facts.light_header``), and of every loop of an emitter that
        shares predicates between devices."""
        start, body, finish = self.while_fns(r, env)
        c0 = start(self.state)
        if c0 is None or (is_static(c0[1]) and not bool(c0[1])):
            finish(c0, env)
            return
        c0, traced = self.loop_body(body, jnp_tree(c0), r)
        stop = self.stop_on_error and any(n.op in ("StackPush", "StackPop") for n in r.nodes)

        def cond(c: Any) -> Any:
            ok = c[1] & (c[3] < self.max_iter)
            return ok & (c[2]["err"] == 0) if stop else ok

        finish(self._while_loop(r, cond, traced, c0), env)

    @staticmethod
    def _while_loop(r: WhileRegion, cond: Callable[[Any], Any], body: Callable[[Any], Any], c0: Any) -> Any:
        """``lax.while_loop`` of loop ``r``: a ``TypeError`` of the loop itself (its carry changing
        type) is ``UnsupportedError`` naming the loop; one raised by the body's own lowering
        (carried out as ``_BodyFault``) surfaces as itself."""
        try:
            return jax.lax.while_loop(cond, body, c0)
        except _BodyFault as e:
            raise e.__cause__ from None  # type: ignore[misc]
        except TypeError as e:
            raise CarryChanges(
                f"fast backend: a loop variable of {r.describe()} changes type or shape across iterations "
                f"(shape_invariants); XLA loops need a fixed shape: {e}", r) from None


__all__ = ["CarryChanges", "LoopEmitter"]
