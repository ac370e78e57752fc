"""A driven loop: its three compiled functions, and the host's side that calls its chunk again and
again, moving full gradient-stack chunks out and bringing emptied ones back between calls.

A driven loop (a loop that pushes or pops gradient stacks, run so that one call holds at most what
the stacks have room for) is compiled as three functions: ``init``, ``chunk`` and ``finish``, made by
one builder, ``loop_fns``, for both drivers (``Plan.loop_fns``,
``devices.region_driver.RegionDriver``). ``drive_chunks`` is the loop between ``init`` and
``finish``. After each chunk it reads the chunk's report (``stacks.ChunkReport``: one transfer),
then asks the run's ``ChunkStore`` to take the chunks of stacks that are full and to give back
chunks to stacks that run low. It ends when the loop's predicate is false, an error is recorded, or
the iteration budget is spent.

Why one function: the one-device fast backend drives its top-level loops, and the partitioned
executor drives a loop on one device of a graph that spans devices. Both make the same decisions.
Two things differ, and they are passed in: the name of the route its errors give (``who``), and a
``guard`` around each call (the fast backend's trace spans and its out-of-memory message).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

import jax.numpy as jnp
import numpy as np

from turnout.fast import stacks as stk
from turnout.fast.emit import Emitter
from turnout.fast.outcome import larger
from turnout.fast.regions import Key, WhileRegion
from turnout.fast.tracing import jnp_tree
from turnout.fast.values import wrap_static

#: ``guard(what, stacks)``: a context around one host step, ``what`` being ``"chunk"`` (a compiled
#: chunk call), ``"spill"`` or ``"refill"`` (``stacks``: the keys it moves). It yields a dict for the
#: step's trace arguments, or ``None``.
Guard = Callable[[str, Optional[list[str]]], Any]


@contextmanager
def no_guard(what: str, stacks: Optional[list[str]]) -> Iterator[None]:
    """The guard of a driver that neither traces nor translates errors."""
    yield None


#: ``emitter(state, bound, free_pointers=...)``: a fresh emitter over the program starting from
#: ``state`` (made only while tracing: the caller counts its traces there)
MakeEmitter = Callable[..., Emitter]


def loop_fns(region: WhileRegion, writes: list[Key], fetched: set[Key], push: dict[str, int], pop: dict[str, int],
             capacity: int, emitter: MakeEmitter, jit: Callable[..., Any], measured: Optional[set[str]] = None,
             free_pointers: bool = False) -> tuple[Any, Any, Any]:
    """The jitted ``(init, chunk, finish)`` of a driven loop, the one builder of both drivers (the fast
    backend's, ``Plan.loop_fns``; the partitioned executor's, ``devices.region_driver``):

    - ``init(env_in, state, stacks, max_iter) -> (carry or None, state or None)``: the loop's entry up
      to its first carry (``None`` where it does not run: the donated state goes back for ``finish``);
    - ``chunk(env_in, c_rest, stacks, aux, max_iter, host_has) -> (carry, aux, report)``: iterations
      until a push could overflow a stack's chunk or a pop find it empty while the host holds more
      (``stacks.chunk_loop``; ``push`` / ``pop``: pushes / pops per iteration counted statically,
      ``measured``: stacks whose counts are measured as the chunk runs);
    - ``finish(env_in, c_rest, stacks, state, max_iter) -> (writes, live flags of fetched writes,
      state)``: the exit side.

    The stacks are donated to each call, so pushes update the buffers in place. With
    ``free_pointers`` a chunk's pointers run free (``ptr + 1`` per push): ``chunk_loop`` stops before
    a push of this loop could overflow, a nested loop's stack that does overflow sets the error word,
    and the caller reads no pointer of a call whose word is set; XLA then merges the pointers of
    stacks pushed in lockstep. (The partitioned executor reads a device's word only when it must wait,
    after later calls, so its pointers stop at the capacity.)"""
    r = region

    def init(env_in: dict[Key, Any], state: dict[str, Any], stacks: dict[str, Any], max_iter: Any) -> Any:
        em = emitter({**state, **stacks}, max_iter)
        start, body, _ = em.while_fns(r, dict(env_in))
        c0 = start(em.state)
        if c0 is None:  # the loop does not run: hand the (donated) state back for ``finish``
            return None, em.state
        return em.discover(body, jnp_tree(c0), r)[0], None

    def chunk(env_in: dict[Key, Any], c_rest: Any, stacks: dict[str, Any], aux: Any, max_iter: Any,
              host_has: dict[str, Any]) -> Any:
        c = join_carry(c_rest, stacks)
        em = emitter(c[2], max_iter, free_pointers=free_pointers)
        _, body, _ = em.while_fns(r, dict(env_in))
        return stk.chunk_loop(body, c, aux, push, pop, capacity, max_iter, host_has, measured)

    def finish(env_in: dict[Key, Any], c_rest: Any, stacks: dict[str, Any], state: dict[str, Any],
               max_iter: Any) -> Any:
        c = None if c_rest is None else join_carry(c_rest, stacks)
        em = emitter(c[2] if c is not None else {**state, **stacks}, max_iter)
        _, _, fin = em.while_fns(r, dict(env_in))
        out_env: dict[Key, Any] = {}
        fin(c, out_env)
        out = {k: wrap_static(out_env[k]) for k in writes if k in out_env}
        lives = {k: jnp.asarray(em.lives.get(k, True)) for k in writes if k in fetched and k in out_env}
        return out, lives, em.state

    return jit(init, donate_argnums=(2,)), jit(chunk, donate_argnums=(2,)), jit(finish, donate_argnums=(2,))


def split_carry(c: Any) -> tuple[Any, dict[str, Any]]:
    """A driven loop's carry ``(values, predicate, state, iterations)`` as (the rest, its stacks):
    the compiled calls take the stacks as their own, donated, argument."""
    vals, pred, state, iters = c
    rest, stacks = stk.split_state(state)
    return (vals, pred, rest, iters), stacks


def join_carry(c_rest: Any, stacks: dict[str, Any]) -> Any:
    """``split_carry`` undone."""
    vals, pred, rest, iters = c_rest
    return vals, pred, {**rest, **stacks}, iters


def drive_chunks(chunk: Callable[..., Any], env_in: dict[Any, Any], c: Any, max_iter: Any,
                 push: dict[str, int], pop: dict[str, int], capacity: int, store: stk.ChunkStore,
                 who: str, guard: Guard = no_guard) -> Any:
    """Run ``chunk`` from the carry ``c`` (``init``'s) until the loop stops; return the carry
    ``finish`` takes.

    ``push`` and ``pop`` are the stacks the loop pushes and pops, with the most entries one
    iteration moves as traced; ``capacity`` is their buffers' size. A chunk that neither ran an
    iteration nor left a stack to move cannot make progress at this capacity: the run must be retried
    with larger chunks, and that outcome is returned instead of a carry (``outcome.larger``: a
    ``Retry``, or past ``MAX_CAPACITY`` a ``Raise`` of the error naming ``who``).
    """
    budget = int(max_iter)
    # committed to the stacks' device like the chunk outputs that replace them (``stk.scalar_on``)
    like = next((v.buf for v in c[2].values() if isinstance(v, stk.StackValue) and not v.pending), None)
    zeros = stk.scalars_on(like, [0] * (len(push) + len(pop)))
    aux = ({s: zeros[i] for i, s in enumerate(push)}, {s: zeros[len(push) + i] for i, s in enumerate(pop)})
    before = 0  # (``init`` begins the count at 0)
    while True:
        host_has = {s: np.bool_(store.has(s)) for s in pop}
        c_rest, c_stacks = split_carry(c)
        with guard("chunk", None) as args:
            c, aux, vector = chunk(env_in, c_rest, c_stacks, aux, max_iter, host_has)
            report = stk.ChunkReport.read(vector, push, pop)
            if args is not None:
                args["iterations"] = report.iters - before
        vals, pred, state, iters = c
        store.observe({s: v for s, v in state.items() if isinstance(v, stk.StackValue)})
        if report.stopped(budget):
            return c
        full = report.full(push, state, capacity)
        low = report.low(pop, state, store)
        if full:
            with guard("spill", sorted(full)):
                state = {**state, **store.spill(full, report.ptr)}
        if low:
            with guard("refill", sorted(low)):
                state = {**state, **store.refill(low, report.ptr)}
        if not (full or low) and report.iters == before:
            return larger(capacity, who)
        before = report.iters
        c = (vals, pred, state, iters)


__all__ = ["Guard", "MakeEmitter", "drive_chunks", "join_carry", "loop_fns", "no_guard", "split_carry"]
