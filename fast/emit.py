"""Lower a region tree to ``jax.lax`` while tracing: the heart of the fast backend.

Why tracing an interpreter: a Turnout program becomes one JAX function by *running* the region tree
on tracers. A ``CondRegion`` becomes ``lax.cond`` (or, when its predicate is known at trace time,
just the taken branch); a ``WhileRegion`` becomes ``lax.while_loop`` whose carry holds the loop
variables and the run-time state. Run-time state — Variables, gradient stacks, and an error word — is
threaded functionally through every region, so effects inside untaken branches or unrun loops simply
do not happen.

Dead values only exist at trace time here (``DEAD``: the other output of a Switch inside a branch).
A fetched tensor that lies on a branch leaves its ``lax.cond`` with a *live* flag, so fetching it when
its branch did not run still raises ``DeadFetchError`` ([T5-Deadness-Soundness]).

The emitter is a stack of layers, one module each, every layer adding one kind of region to the one
below: ``fast.emitter_core`` (the trace state, the error word, Variables and stacks, reads, one node),
``fast.conds`` (conds and case chains), ``fast.loops`` (full while loops), ``fast.counted_nests``
(nests of counted loops, their hoisted checks and counted stacks) and ``fast.light_loops`` (light
loops, their form chosen before tracing). ``Emitter`` here is the top, and picks each loop's form.
"""

from __future__ import annotations

from turnout.errors import UnsupportedError
from turnout.fast.conds import SMALL_DECISION
from turnout.fast.counted_nests import BOUND_DEPTH, BOUND_OPS
from turnout.fast.emitter_core import EmitterCore, Env
from turnout.fast.facts import light_header
from turnout.fast.light_loops import SMALL_NEST, LightLoop, LightLoops, exit_counts
from turnout.fast.loops import CarryChanges
from turnout.fast.regions import WhileRegion
from turnout.fast.state_keys import stack_key, stack_key_of, stack_source, var_key
from turnout.fast.tracing import Traced, jnp_tree, reconcile, settled, zeros_of
from turnout.fast.unrolled import run_unrolled

#: the names the rest of the code imports from here under their former private spellings
_jnp_tree = jnp_tree
_zeros_of = zeros_of


class Emitter(LightLoops):
    """Runs region trees on tracers (``fast.emitter_core.EmitterCore`` and the layers above it).
    ``state`` is the current run-time state (a dict of pytrees: ``var:NAME``, ``stack:ID``,
    ``err``); rules update it through the LoweringContext methods."""

    def run_while(self, r: WhileRegion, env: Env) -> None:
        """Loop ``r`` in its form: light (``run_light_while``) where its header may be recomputed,
        else full (``run_full_while``). The light form computes the predicate in the loop's test; an
        emitter that shares predicates between devices (the SPMD tier's ``read_pred``, a collective)
        keeps it in the body instead. A loop that neither form can lower (its carry changes type
        across iterations, or what it computes from that has no static shape) is unrolled where the
        trace knows its trip count (``fast.unrolled``; on one device), else refused as it was."""
        one_device = type(self).read_pred is EmitterCore.read_pred
        before = self.trace_point()
        try:
            if one_device and light_header(r, self.read_at_1()):
                self.run_light_while(r, env)
            else:
                self.run_full_while(r, env)
        except UnsupportedError as e:  # (its carry changes type, or it computes what no lax loop can)
            if not one_device or (isinstance(e, CarryChanges) and e.region is not r):
                raise
            self.back_to(before)  # (as the loop found them: its trace is abandoned)
            run_unrolled(self, LightLoop(self, r, env), e)
        self.note_mark()


__all__ = ["BOUND_DEPTH", "BOUND_OPS", "SMALL_DECISION", "SMALL_NEST", "Emitter", "Env", "Traced",
           "WhileRegion", "exit_counts", "reconcile", "settled", "stack_key", "stack_key_of", "stack_source",
           "var_key"]
