"""Raise a chain of nested conds — what ``tn.case`` lowers to — to ONE ``lax.switch``.

Why: ``case`` is lowered as in TensorFlow, to conds nested in each other's false branch
(``cond(i == 0, f0, lambda: cond(i == 1, f1, ...))``). Traced as it stands, a case of ``n`` branches is
an XLA conditional nested ``n`` deep, and XLA's compile time grows much faster than the program
(5.7x a flat ``lax.switch`` at 64 branches). The chain has a flat meaning: run branch ``k`` for the
first ``k`` whose predicate holds. Computing that index needs the predicates of the inner conds, which
sit *inside* the outer false branches; they can be computed up front exactly when what computes them
is *speculable*: ops without effects that cannot fail (comparisons, logic, constants, identities),
so computing them when their branch would not have run changes nothing a program can observe.

A chain is therefore: a ``CondRegion`` whose false branch holds speculable nodes and, last, one nested
``CondRegion`` — repeated. The emitter computes every predicate (``speculate``), the index of the
first true one (``first_true``), and calls ``lax.switch`` on ``n + 1`` functions; function ``k``
replays the ordinary nested emission with the chain's predicates fixed (false above level ``k``,
true at ``k``), so each branch means exactly what the nested conds meant.
"""

from __future__ import annotations

from typing import Any, Optional

import jax.numpy as jnp

from turnout.fast.plumbing import switch_wires
from turnout.fast.regions import CondRegion, Item, Key, key, pred_reader
from turnout.fast.values import DEAD
from turnout.graph import Node

#: ops that have no effect and cannot fail, so running them when their branch is not taken is invisible
SPECULABLE = frozenset({"Const", "Identity", "Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual",
                        "LogicalNot", "LogicalAnd", "LogicalOr"})
#: a shorter chain is left as nested conds (a two-way switch is a cond)
MIN_LEVELS = 2


def _prefix(r: CondRegion) -> Optional[tuple[list[Node], CondRegion]]:
    """The speculable nodes of ``r``'s false branch and the cond nested last in it, if it has that form."""
    items: list[Item] = r.branches[False]
    if not items or not isinstance(items[-1], CondRegion):
        return None
    nodes = items[:-1]
    if not all(isinstance(n, Node) and n.op in SPECULABLE for n in nodes):
        return None
    return nodes, items[-1]  # type: ignore[return-value]


def find_chain(r: CondRegion) -> list[CondRegion]:
    """The conds of the chain that starts at ``r`` (outermost first); a lone cond is a chain of one."""
    chain = [r]
    while (nxt := _prefix(chain[-1])) is not None:
        chain.append(nxt[1])
    return chain


def speculate(chain: list[CondRegion], env: dict[Key, Any], emitter: Any
              ) -> Optional[tuple[list[Any], dict[Key, Any], set[int]]]:
    """Every predicate of the chain, computed outside any branch: level ``j + 1``'s predicate is computed
    as if levels ``0..j`` took their false branch. Returns the predicates, the environment with the
    speculated values, and the ids of the nodes computed (the chain's functions reuse them rather than
    computing them again in every branch, which would make tracing quadratic in the chain's length).
    None when a predicate is dead (the nested emission then handles the chain as it stands)."""
    senv = dict(env)
    preds: list[Any] = []
    computed: set[int] = set()
    for j, r in enumerate(chain):
        p = emitter.predicate(senv, r.pred, pred_reader(r)) if key(r.pred) in senv else DEAD
        if p is DEAD:
            return None
        preds.append(p)
        if j + 1 == len(chain):
            break
        emitter.wire(switch_wires(r.switches, 0), senv)
        nodes, _ = _prefix(r)  # type: ignore[misc]
        # through the emitter's own runner, not node by node: the SPMD emitter runs each node on its
        # device and moves the values it reads there (``devices.spmd_emitter``); run one by one, a
        # node read another device's copy of its input and the chain took the wrong level. A node
        # whose outputs the runner kept inside one device's batch is not counted as computed: the
        # chain's functions compute it again.
        emitter.run_items(list(nodes), senv)
        computed.update(n.id for n in nodes if all(key(o) in senv for o in n.outputs))
    return preds, senv, computed


def first_true(preds: list[Any]) -> Any:
    """The index of the first true predicate, ``len(preds)`` when none holds (the innermost false branch)."""
    idx = jnp.int32(len(preds))
    for k in range(len(preds) - 1, -1, -1):
        idx = jnp.where(jnp.asarray(preds[k], bool), jnp.int32(k), idx)
    return idx
