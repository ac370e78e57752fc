"""Conditionals while tracing: a ``CondRegion`` as ``lax.cond`` (or, when its predicate is known at
trace time, just the taken branch), and a chain of nested conds on one decision (``tn.case``) raised
to one ``lax.switch`` (``fast.case_chain``).

Each branch is traced once, into a jaxpr, and ``lax.cond`` replays it: its result types (a dead value
on one side becomes zeros of the other side's type) are read off that trace. A fetched tensor that
lies on a branch leaves the ``lax.cond`` with a *live* flag, so fetching it when its branch did not
run still raises ``DeadFetchError`` ([T5-Deadness-Soundness]).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout import shapes as sh
from turnout.errors import UnsupportedError, describe_node
from turnout.fast.case_chain import MIN_LEVELS, find_chain, first_true, speculate
from turnout.fast.emitter_core import EmitterCore, Env
from turnout.fast.lowering import NeedsStatic, feeds_behind
from turnout.fast.plumbing import branch_joins, switch_wires
from turnout.fast.regions import CondRegion, Key, cond_exports, cond_outputs, key, pred_reader
from turnout.fast.tracing import Traced, jnp_tree, reconcile, same_constant
from turnout.fast.values import DEAD, is_static
from turnout.graph import Graph, Node, Tensor

#: the most elements a fed tensor that decides a ragged cond may have to be specialised on
SMALL_DECISION = 8


def small_decision(t: Tensor) -> bool:
    """Whether a plan may be specialised on the values of fed tensor ``t`` to decide control flow (a
    ragged cond's branch, ``CondEmitter._refuse_ragged``; an unrolled loop's trip count,
    ``fast.unrolled``): a bool or integer of at most ``SMALL_DECISION`` elements (a flag, an index,
    a count), whose values are few. A float, or a larger tensor, is data: a plan per value
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
                and all(same_constant(np.asarray(v), np.asarray(got[0])) for v in got)):
            out[i] = got[0]
    return out


#: ops whose value is the size of a value that exists: never negative, never more than is held
_SIZE_OPS = frozenset({"Shape", "Size", "TensorArraySize"})


def _a_size(t: Tensor) -> bool:
    """Whether ``t`` is a size (``_SIZE_OPS``, or a gradient's constant standing for one,
    ``gradient_shape``), through the Switches and Identities that carry it."""
    while t.node.op in ("Switch", "Identity"):
        t = t.node.inputs[0]
    return t.node.op in _SIZE_OPS or bool(t.node.op == "Const" and t.node.attrs.get("gradient_shape"))



#: a traced branch: (Merge values with their value indices, exports, their live flags, the state)
Branch = tuple[list[Any], list[Any], list[Any], Any]


class CondEmitter(EmitterCore):
    """The emitter's conditionals: ``run_cond`` and ``run_case_chain``."""

    # the core's trace state this layer writes, declared for mypy, which reads the layers below as ``Any``
    # (it checks fast/ as the package ``fast``, and ``turnout.fast`` is installed, not found by path)
    state: dict[str, Any]
    lives: dict[Key, Any]
    known: set[int]

    #: whether a chain of nested conds on one decision (``tn.case``) is raised to one ``lax.switch``
    #: (``run_case_chain``); an emitter that cannot emit the raised form emits the nested conds
    raise_case_chains = True

    forced: dict[int, bool]
    _exports_of: dict[int, list[Key]]

    def init_trace_state(self) -> None:
        """The core's state, and: inside one function of a raised case chain, the chain's predicates,
        fixed, by region id (``forced``); each cond's exports, found once (``_exports``)."""
        super().init_trace_state()
        self.forced = {}
        self._exports_of = {}

    def _exports(self, r: CondRegion) -> list[Key]:
        """The keys a cond hands out besides its Merges: fetched values of its branches and its
        ``exports``. Found once per region: a raised case chain runs its outer conds again in every
        one of its functions, and each search walks every node nested below, so searching on every
        run made tracing a case of ``n`` branches cubic in ``n``."""
        got = self._exports_of.get(id(r))
        if got is None:
            got = self._exports_of[id(r)] = cond_exports(r, self.fetch_set)
        return got

    def run_cond(self, r: CondRegion, env: Env) -> None:
        """Conditional ``r`` on ``env``: a dead predicate kills its outputs; a predicate known while
        tracing runs the taken branch alone; a chain of conds on one decision is one ``lax.switch``
        (``run_case_chain``); any other is one ``lax.cond`` (``_lax_cond``)."""
        p = np.asarray(self.forced[id(r)]) if id(r) in self.forced else self.predicate(env, r.pred, pred_reader(r))
        exports = self._exports(r)
        if p is DEAD:
            env.update(dict.fromkeys(cond_outputs(r, exports), DEAD))
            return
        # a gradient's export Merge (a value of one branch, a filler on the other) whose value is a
        # constant while tracing (a shape): Merge id -> that constant, recorded by ``_cond_branch``
        fixed: dict[int, Any] = {}
        # per export, the values the branches traced that are not dead (``_fold_exports``)
        seen: dict[Key, list[Any]] = {}
        chain = find_chain(r) if not is_static(p) else [r]
        preds = speculate(chain, env, self) if len(chain) >= MIN_LEVELS and self.raise_case_chains else None
        if is_static(p):  # (a link of a case chain, its decision fixed: its fillers are filled there)
            merges, vals, flags, st = self._cond_branch(r, env, exports, fixed, seen, bool(p),
                                                      fill=id(r) in self.forced)(self.state)
            self.state = st
        elif preds is not None:
            merges, vals, flags = self.run_case_chain(chain, preds, env, exports)
        else:
            merges, vals, flags = self._lax_cond(r, env, exports, fixed, seen, p)
        for (m, _), (v, idx) in zip(r.merges, merges, strict=True):
            env[key(m.outputs[0])] = fixed.get(m.id, v)
            env[key(m.outputs[1])] = idx
        if not is_static(p):
            vals = _fold_exports(r.pred.graph, seen, exports, vals)
        for k, v, live in zip(exports, vals, flags, strict=True):
            env[k] = v
            self.lives[k] = live

    def _cond_branch(self, r: CondRegion, env: Env, exports: list[Key], fixed: dict[int, Any],
                seen: dict[Key, list[Any]], b: bool, fill: bool = False) -> Callable[[Any], Branch]:
        """Branch ``b`` of ``r`` as a function of the state; with ``fill``, a gradient's filler that a
        Merge takes from this branch is left dead, so ``reconcile`` makes it zeros of the other
        branch's type: its value is never read, and its shape (unknown sizes as 0) may not be the
        other's. For the same reason a Merge of a filler and a constant is that constant (``fixed``)."""
        def fn(state: Any) -> Branch:
            self.state = dict(state)
            benv = dict(env)
            self.wire(switch_wires(r.switches, int(b)), benv)
            saved = self.lives
            self.lives = {}
            try:  # (restored however the trace ends)
                self.run_items(r.branches[b], benv)
                merges = []
                for m, src, idx in branch_joins(r, b):
                    if src is None:
                        merges.append((DEAD, DEAD))
                        continue
                    v = DEAD if fill and _is_filler(src) else self.read(benv, src, m)
                    if fill and is_static(v) and _exports_for_gradient(m):
                        fixed[m.id] = v
                    merges.append((v, idx))
                vals = [benv.get(k, DEAD) for k in exports]
                flags = self._live_flags(exports, vals)
            finally:
                self.lives = saved
            _note_exports(seen, exports, vals)
            return merges, vals, flags, self.state

        return fn

    def _live_flags(self, exports: list[Key], vals: list[Any]) -> list[Any]:
        """The live flag of each export a branch traced: false where it is dead, else the flag the
        branch gave it (true unless it lies on a cond nested in the branch)."""
        return [np.asarray(False) if v is DEAD else self.lives.get(k, np.asarray(True))
                for k, v in zip(exports, vals, strict=True)]

    def _lax_cond(self, r: CondRegion, env: Env, exports: list[Key], fixed: dict[int, Any],
                  seen: dict[Key, list[Any]], p: Any) -> tuple[Any, Any, Any]:
        """``r`` as one ``lax.cond`` on traced predicate ``p``: its Merges' values, its exports and
        their live flags. Each branch is traced ONCE, into a jaxpr: its result types (a dead value on
        one side becomes zeros of the other side's type) are read off that trace, and ``lax.cond``
        replays the jaxpr instead of tracing the Python again. Tracing twice (once to learn the
        shapes, once inside ``lax.cond``) doubles the work at every nesting level: 2^depth."""
        state0 = self.state
        traced = {b: Traced(self._cond_branch(r, env, exports, fixed, seen, b, fill=True), state0)
                  for b in (False, True)}
        self.state = state0

        def filled(b: bool) -> Callable[[Any], Any]:
            def fn(state: Any) -> Any:
                out, _ = reconcile(traced[b](state), traced[not b].shapes)
                return jnp_tree(out)

            return fn

        try:
            merges, vals, flags, st = jax.lax.cond(jnp.asarray(p, bool), filled(True), filled(False), state0)
        except TypeError as e:
            m = r.merges[0][0] if r.merges else r.nodes[0]
            self._refuse_ragged(
                [r], f"fast backend: the two branches of the {r.describe()} near {describe_node(m)} produce "
                f"values of different types or shapes: {e}")
        self.state = st
        return merges, vals, flags

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
        if not all(small_decision(graph.nodes[i].outputs[j]) for i, j in keys):
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
        consts: dict[int, Optional[list[Any]]] = {m.id: [] for m, _ in r.merges if _exports_for_gradient(m)}
        exported: dict[Key, list[Any]] = {}  # per export, the values the levels traced that are not dead
        state0 = self.state
        traced = [Traced(self._chain_level(chain, k, senv, computed, exports, consts, exported), state0)
                  for k in range(len(chain) + 1)]
        self.state = state0

        def filled(k: int) -> Callable[[Any], Any]:
            def fn(state: Any) -> Any:
                out = traced[k](state)
                for j, other in enumerate(traced):
                    if j != k:
                        out, _ = reconcile(out, other.shapes)
                return jnp_tree(out)

            return fn

        try:
            fns = [filled(k) for k in range(len(traced))]
            merges, vals, flags, st = jax.lax.switch(first_true(values), fns, state0)
        except TypeError as e:
            m = r.merges[0][0] if r.merges else r.nodes[0]
            self._refuse_ragged(
                chain, f"fast backend: the branches of the case chain of {r.describe()} near {describe_node(m)} "
                f"produce values of different types or shapes: {e}")
        for j, (m, _) in enumerate(r.merges):  # an export every level gave as one constant is that constant
            got = consts.get(m.id)
            if got and all(same_constant(v, got[0]) for v in got):
                merges[j] = (got[0], merges[j][1])
        self.state = st
        return merges, _fold_exports(r.pred.graph, exported, exports, vals), flags

    def _chain_level(self, chain: list[CondRegion], k: int, senv: Env, computed: set[int], exports: list[Key],
                     consts: dict[int, Optional[list[Any]]], exported: dict[Key, list[Any]]
                     ) -> Callable[[Any], Branch]:
        """Function ``k`` of a raised case chain: the chain's outermost cond with its decisions forced
        (false above level ``k``, true at ``k``), noting the constants its gradient export Merges
        take (``consts``) and the exports it traced (``exported``)."""
        r = chain[0]
        forced = {id(c): j == k for j, c in enumerate(chain[:k + 1])}

        def fn(state: Any) -> Branch:
            saved = self.forced, self.known, self.lives
            self.forced = {**self.forced, **forced}
            self.known = self.known | computed
            self.lives = {}
            try:  # (restored however the trace ends: a decision forced here is forced nowhere else)
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
                flags = self._live_flags(exports, vals)
            finally:
                self.forced, self.known, self.lives = saved[0], saved[1], saved[2]
            _note_exports(exported, exports, vals)
            return merges, vals, flags, self.state

        return fn


__all__ = ["SMALL_DECISION", "Branch", "CondEmitter", "small_decision"]
