"""A driven loop: its three compiled functions, and the host's side that calls its chunk again and
again, moving full gradient-stack chunks out and bringing emptied ones back between calls.

A driven loop (a loop that pushes or pops gradient stacks, run so that one call holds at most what
the stacks have room for) is compiled as three calls: ``init``, ``chunk`` and ``finish``, made by one
builder, ``DrivenLoop``, for both executors' driven segments (``fast.step_plan.StepPlan.compiled``),
run by the one runner (``fast.runner``), in the one calling
convention of the compiled side (``fast.call_spec``): the loop's carry crosses each call as state
entries (``VALS``, ``PRED``, ``ITERS``), the stacks as its donated stacks. ``drive_chunks`` is the
loop between ``init`` and ``finish``. After each chunk it reads the chunk's report
(``stacks.ChunkReport``: one transfer), then asks the run's ``ChunkStore`` to take the chunks of
stacks that are full and to give back chunks to stacks that run low. It ends when the loop's
predicate is false, an error is recorded, or the iteration budget is spent.

Why one function: the one-device fast backend drives its top-level loops, and the partitioned
executor drives a loop on one device of a graph that spans devices. Both make the same decisions.
Two things differ, and they are passed in: the name of the route its errors give (``who``), and a
``guard`` around each call (the runner's trace spans, ``fast.runner``);
``DrivenLoop.run`` is the sequence both take.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

import numpy as np

from turnout.fast import stacks as stk
from turnout.fast.call_spec import LayoutCalls, Traced
from turnout.fast.emit import Emitter
from turnout.fast.outcome import Raise, Retry, larger
from turnout.fast.regions import Key, WhileRegion
from turnout.fast.tracing import jnp_tree

#: ``guard(what, stacks)``: a context around one host step, ``what`` being ``"init"``, ``"chunk"`` or
#: ``"finish"`` (a compiled call), ``"spill"`` or ``"refill"`` (``stacks``: the keys it moves). It
#: yields a dict for the step's trace arguments, or ``None``.
Guard = Callable[[str, Optional[list[str]]], Any]


@contextmanager
def no_guard(what: str, stacks: Optional[list[str]]) -> Iterator[None]:
    """The guard of a driver that neither traces nor translates errors."""
    yield None


#: ``emitter(state, bound, free_pointers=...)``: a fresh emitter over the program starting from
#: ``state`` (made only while tracing: the caller counts its traces there)
MakeEmitter = Callable[..., Emitter]

#: the state entries that carry a driven loop's carry between its calls, beside the loop's state
#: (``(values, predicate, state, iterations)``, ``fast.loops``), the chunk's counts of pushes and pops
#: (``stacks.chunk_loop``'s ``aux``), what the host holds of each stack and the chunk's report
VALS, PRED, ITERS, AUX, HOST_HAS, REPORT = ("carry:vals", "carry:pred", "carry:iters", "chunk:aux", "chunk:host_has",
                                            "chunk:report")
CARRY = (VALS, PRED, ITERS)


class DrivenLoop:
    """A driven loop: its three compiled calls, made by one builder for both drivers (the fast
    backend's and the partitioned executor's, ``StepPlan.compiled``), each in
    the one calling convention (``fast.call_spec``, through ``LayoutCalls``: the fed values, the
    state with the loop's carry in it, the stacks, donated, the iteration bound), and ``run``, the
    host's side between them:

    - ``init``: the loop's entry up to its first carry (none where the loop does not run);
    - ``chunk``: iterations until a push could overflow a stack's chunk or a pop find it empty while
      the host holds more (``stacks.chunk_loop``; ``push`` / ``pop``: pushes / pops per iteration
      counted statically, ``measured``: stacks whose counts are measured as the chunk runs);
    - ``finish``: the exit side, the loop's ``writes`` (and the live flags of those ``fetched``).

    The stacks are donated to each call, so pushes update the buffers in place. With
    ``free_pointers`` a chunk's pointers run free (``ptr + 1`` per push): ``chunk_loop`` stops before
    a push of this loop could overflow, a nested loop's stack that does overflow sets the error word,
    and the caller reads no pointer of a call whose word is set; XLA then merges the pointers of
    stacks pushed in lockstep. (The partitioned executor reads a device's word only when it must wait,
    after later calls, so its pointers stop at the capacity.)"""

    def __init__(self, region: WhileRegion, writes: list[Key], fetched: set[Key], push: dict[str, int],
                 pop: dict[str, int], capacity: int, emitter: MakeEmitter, jit: Callable[..., Any],
                 measured: Optional[set[str]], free_pointers: bool) -> None:
        self.region, self.writes, self.fetched = region, writes, fetched
        self.push, self.pop, self.capacity, self.measured = push, pop, capacity, measured
        self.emitter, self.free_pointers = emitter, free_pointers
        self.init, self.chunk, self.finish = (LayoutCalls(self._init, jit), LayoutCalls(self._chunk, jit),
                                              LayoutCalls(self._finish, jit))

    # ---- the traced bodies ---------------------------------------------------------------------------
    def _init(self, feeds: dict[Key, Any], state: dict[str, Any], stacks: dict[str, Any], bound: Any) -> Traced:
        em = self.emitter({**state, **stacks}, bound)
        start, body, _ = em.while_fns(self.region, dict(feeds))
        c0 = start(em.state)
        # (where the loop does not run, no carry: the state, the donated stacks among it, goes to ``finish``)
        st, carry = em.state, {}
        if c0 is not None:
            vals, pred, st, iters = em.discover(body, jnp_tree(c0), self.region)[0]
            carry = {VALS: vals, PRED: pred, ITERS: iters}
        return Traced({}, 0, {}, {**_changed(st, state, stacks), **carry})

    def _chunk(self, feeds: dict[Key, Any], state: dict[str, Any], stacks: dict[str, Any], bound: Any) -> Traced:
        rest = {k: v for k, v in state.items() if k not in (*CARRY, AUX, HOST_HAS)}
        c = (state[VALS], state[PRED], {**rest, **stacks}, state[ITERS])
        em = self.emitter(c[2], bound, free_pointers=self.free_pointers)
        _, body, _ = em.while_fns(self.region, dict(feeds))
        (vals, pred, st, iters), aux, report = stk.chunk_loop(body, c, state[AUX], self.push, self.pop,
                                                              self.capacity, bound, state[HOST_HAS], self.measured)
        return Traced({}, 0, {}, {**st, VALS: vals, PRED: pred, ITERS: iters, AUX: aux, REPORT: report})

    def _finish(self, feeds: dict[Key, Any], state: dict[str, Any], stacks: dict[str, Any], bound: Any) -> Traced:
        rest = {k: v for k, v in state.items() if k not in CARRY}
        c = (state[VALS], state[PRED], {**rest, **stacks}, state[ITERS]) if VALS in state else None
        em = self.emitter({**rest, **stacks}, bound)
        _, _, fin = em.while_fns(self.region, dict(feeds))
        out_env: dict[Key, Any] = {}
        fin(c, out_env)
        out = {k: out_env[k] for k in self.writes if k in out_env}
        lives = {k: em.lives.get(k, True) for k in self.writes if k in self.fetched and k in out_env}
        return Traced(out, 0, lives, _changed(em.state, rest, stacks))

    # ---- the host's side -----------------------------------------------------------------------------
    def run(self, env_in: dict[Key, Any], state: dict[str, Any], max_iter: Any, store: stk.ChunkStore, who: str,
            guard: Guard = no_guard) -> tuple[dict[Key, Any], dict[Key, Any], dict[str, Any]] | Retry | Raise:
        """The loop from ``state``: ``init``, chunks until it stops (``drive_chunks``), ``finish``;
        ``(writes, their live flags, the state after it)``, or the outcome of a chunk that could make
        no progress (``Retry``, or past ``MAX_CAPACITY`` a ``Raise`` naming ``who``). ``store`` takes
        the full chunks and gives back the emptied ones; ``guard`` wraps each call and move."""
        store.begin_pops({s: state[s] for s in self.pop if s in state})
        rest, stacks = stk.split_state(state)
        with guard("init", None):
            _, _, new = self.init(env_in, rest, stacks, max_iter)
        state = {**rest, **new}
        if VALS in state:
            got = drive_chunks(self.chunk, env_in, state, max_iter, self.push, self.pop, self.capacity, store, who,
                               guard)
            if isinstance(got, (Retry, Raise)):
                return got
            state = {k: v for k, v in got.items() if k != AUX}
        rest, stacks = stk.split_state(state)
        with guard("finish", None):
            out, lives, new = self.finish(env_in, rest, stacks, max_iter)
        store.end_pushes(self.push)
        return out, lives, {k: v for k, v in {**rest, **new}.items() if k not in CARRY}


def _changed(after: dict[str, Any], given: dict[str, Any], stacks: dict[str, Any]) -> dict[str, Any]:
    """The state entries a call hands back: every stack (donated), the error word, and any other entry
    that is not what the call was given (one that left as it came is not returned: it would be copied)."""
    return {k: v for k, v in after.items() if k == "err" or k in stacks or v is not given.get(k)}


def drive_chunks(chunk: LayoutCalls, env_in: dict[Any, Any], state: dict[str, Any], max_iter: Any,
                 push: dict[str, int], pop: dict[str, int], capacity: int, store: stk.ChunkStore,
                 who: str, guard: Guard = no_guard) -> dict[str, Any] | Retry | Raise:
    """Run ``chunk`` from ``state`` (``init``'s, the carry in it) until the loop stops; return the
    state ``finish`` takes.

    ``push`` and ``pop`` are the stacks the loop pushes and pops, with the most entries one
    iteration moves as traced; ``capacity`` is their buffers' size. A chunk that neither ran an
    iteration nor left a stack to move cannot make progress at this capacity: the run must be retried
    with larger chunks, and that outcome is returned instead of a state (``outcome.larger``: a
    ``Retry``, or past ``MAX_CAPACITY`` a ``Raise`` of the error naming ``who``).
    """
    budget = int(max_iter)
    # committed to the stacks' device like the chunk outputs that replace them (``stk.scalar_on``)
    like = next((v.buf for v in state.values() if isinstance(v, stk.StackValue) and not v.pending), None)
    zeros = stk.scalars_on(like, [0] * (len(push) + len(pop)))
    state = {**state, AUX: ({s: zeros[i] for i, s in enumerate(push)},
                            {s: zeros[len(push) + i] for i, s in enumerate(pop)})}
    before = 0  # (``init`` begins the count at 0)
    while True:
        rest, stacks = stk.split_state(state)
        with guard("chunk", None) as args:
            _, _, new = chunk(env_in, {**rest, HOST_HAS: {s: np.bool_(store.has(s)) for s in pop}}, stacks, max_iter)
            state = {**rest, **new}
            report = stk.ChunkReport.read(state.pop(REPORT), push, pop)
            if args is not None:
                args["iterations"] = report.iters - before
        store.observe({s: v for s, v in state.items() if isinstance(v, stk.StackValue)})
        if report.stopped(budget):
            return state
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


__all__ = ["AUX", "CARRY", "DrivenLoop", "Guard", "HOST_HAS", "ITERS", "MakeEmitter", "PRED", "REPORT", "VALS",
           "drive_chunks", "no_guard"]
