"""The fused attempt on the capacity ladder: a plan's whole root frame as ONE compiled call, tried
before its stages, at the smallest stack capacity that held the last run.

A plan with driven loops also has its root frame as one stage (``Plan.fused``), every loop a plain
``lax`` loop. A run attempts it first, on a ladder of capacities (``stack_sizes.capacity_ladder``),
each rung a plan of its own made and compiled by the first run that climbs to it. What an attempt
comes to is an outcome (``fast.outcome``): kept, or ``Discard`` — its stacks outgrew the rung (the
next rung, then the stages, run), a positional stack left its position (traced again with every
index record, at once), or its trace refused (``Discard.refused``: the rung's fused stage is dropped
for good).

Why a layer of its own: an attempt is one compiled call, not a run of steps (those are the one
runner's, ``fast.runner``, which the staged path takes), and the ladder is a policy over it: which
capacity to call it at, and what its outcome asks for next.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Optional, TypeVar

import numpy as np

from turnout.errors import UnsupportedError
from turnout.fast import stacks as stk
from turnout.fast.call_spec import CallArgs, copy_static
from turnout.fast.counted_stacks import RungTooSmall
from turnout.fast.direct_call import DirectCalls
from turnout.fast.guards import fused_oom
from turnout.fast.outcome import Discard, Outcome, enforce
from turnout.fast.plan import FusedStage, Plan
from turnout.fast.regions import Key, key
from turnout.fast.run_state import WHO
from turnout.fast.stack_sizes import StackMarks, capacity_ladder
from turnout.fast.values import start_reads
from turnout.graph import Tensor
from turnout.memory_plan import MemoryPlan

T = TypeVar("T")


def _refused_as_discard(trace: Callable[[], T]) -> T | Discard:
    """``trace()`` (a call or a trace of the fused stage's function), or the ``Discard`` its refusal
    comes to: ``RungTooSmall`` (a counted stack longer than the rung, with the entries it needs) or
    ``UnsupportedError``. Both must leave JAX's trace by raising; they stop here."""
    try:
        return trace()
    except RungTooSmall as e:
        return Discard(refused=str(e), needed=e.entries)
    except UnsupportedError as e:
        return Discard(refused=str(e))


class FusedAttempts(DirectCalls):
    """The fused attempt of a run and its ladder of rungs. It runs an attempt through the backend's
    ``_attempt`` and makes a rung's plan with its ``_plan`` (``FastBackend``, the layer above)."""

    def _call_fused(self, plan: Plan, st: FusedStage, env_in: dict[Key, Any], state: dict[str, Any], max_iter: Any
                    ) -> tuple[dict[Key, Any], Any, dict[str, Any]] | Discard:
        """The fused attempt's one call (``_attempt``): (its outputs, their live flags, the state after
        it), with flat arguments laid out once per function (``Plan.fused_fn``), its error word, live
        flags and stacks' high-water mark read back at once, behind a fetched value where
        ``fast.packing`` put them there (the word as ``state["err"]``, the mark as ``state["mark"]``).

        A trace that refuses (``UnsupportedError``, or ``RungTooSmall``: a counted stack longer than
        this rung) is the outcome ``Discard(refused=...)``: the caller drops the fused stage. Those
        exceptions must leave JAX's trace by raising; they stop here, at the call that traced. A
        shape that fed values decide (``NeedsStatic``) goes on to the compile of the run, which
        specialises the plan (``FastBackend._run_compiled``), as it does from every other trace."""
        rest, stacks = stk.split_state(state)
        with self._span("fused attempt (whole program, one call)", "compiled stages") as args, fused_oom(WHO):
            before = self.compile_count
            if "seg" not in st.fns:  # (a plan lays its call out one way: its stage's function is made once)
                st.fns["seg"] = plan.fused_fn(CallArgs(tuple(env_in), tuple(rest), tuple(stacks)))
            fn = st.fns["seg"]
            res = _refused_as_discard(lambda: fn(*env_in.values(), *rest.values(), *stacks.values(), max_iter))
            if isinstance(res, Discard):
                return res
            spec = st.spec
            assert spec is not None  # (set by its trace)
            out, flags, state = spec.split(res)
            args["compiled"] = self.compile_count != before
            if self.overlap_reads:
                start_reads(out.values())
            state = {**rest, **state}  # (what came back unchanged is not returned)
            out, state["err"], lv, state["mark"] = spec.read_flags(out, flags)
            args["error_word"] = int(state["err"])
        return out, lv, state

    def _run_fused_sized(self, plan: Plan, fetches: list[Tensor], feeds: dict[Tensor, Any],
                         variables: dict[str, np.ndarray], max_iter: Any, budget: Optional[MemoryPlan] = None
                         ) -> Optional[tuple[list[Any], dict[str, Any]]]:
        """The fused attempt with stack buffers sized to what the runs use: ``plan``'s own capacity
        (``stack_chunk``) is the last of a ladder of capacities (``capacity_ladder``: 128, 160, 200,
        ..., 959, 1024 by default), each a plan of its own, made and compiled by the first run that needs it. A
        run starts at the rung that held the high-water marks of the last runs (``StackMarks``); an
        attempt that outgrows its rung counts on (``Plan.push_limit``) and says how many entries it
        needed, and the run goes at once to the first rung that holds them. Only a run past the top
        rung goes to the staged path. ``None``: the staged path must run.

        Why: a fused program's stacks have the capacity it was compiled for, and the backend keeps
        them between runs. At ``stack_chunk`` (1024) every run of the benchmark LSTM held 640 MiB of
        stacks (a peak of 1.0 GiB at T = 100, against 450 MiB for JAX); on a ladder whose rungs grow by
        ``stack_rung_ratio`` a run holds at most that ratio times the entries it pushes. The price is
        one compilation per rung used, at most once per rung in a plan's life: a rung between the one
        an attempt outgrew and the one that holds it is never compiled, and a trip count in a rung
        already compiled never compiles. Only the rung that ran keeps buffers; a plan whose runs
        became shorter starts lower once ``stack_descend_after`` runs in a row fitted there.
        """
        caps = plan.ladder if plan.ladder is not None else self._ladder(plan)
        marks = plan.marks
        assert marks is not None  # (made with the ladder)
        c: Optional[int] = marks.begin()
        while c is not None:
            p = self._rung(plan, c, fetches, feeds, variables)
            got = self._run_fused(p, fetches, feeds, variables, max_iter, budget) if p.fused is not None else None
            if isinstance(got, tuple):
                # the rung the next run starts on: this one, unless the marks now fit a lower one (then
                # no rung is the plan's, and its repeated run's lane hands the next run back)
                plan.rung = p if marks.note(got[1]["stack_mark"]) >= c else None
                self._last_fused = (plan, p)
                self._keep_buffers_of(plan, p)
                got[1]["stack_ladder"] = list(caps)
                return got
            if p is not plan:
                self._stack_bufs.pop(id(p), None)
                stk.return_freed_memory(self._home_device().platform)
            if got is not None and got.refused and not got.needed:
                plan.fused, plan.refused = None, got.refused  # (its trace refused for a reason no capacity
                return None  # changes: the stages run, now and from now on, and no other rung is traced to learn it)
            if got is not None and got.any_rung:
                return None  # (it would end so on every rung: the stages run this run, and decide)
            # the next rung: the first above this one that holds what the attempt counted
            needed = got.needed if got is not None else 0
            c = next((r for r in caps if r > c and r >= needed), None)
        return None

    def _keep_buffers_of(self, top: Plan, ran: Plan) -> None:
        """Drop the kept stack buffers of every rung of ``top`` (``top`` itself included) but ``ran``,
        the plan whose run just ended: a fused attempt on one of the rungs, or ``top``'s stages.

        Why both ends: a run past the top rung reaches the stages from the rung its attempt started
        on, without passing through ``top``'s rung, and the stages keep ``top``'s buffers at the chunk;
        a rung's buffers held beside them, or theirs beside the rung's of a later shorter run, would
        hold two capacities' worth of memory for the one run that can use it."""
        for other in (*top.rungs.values(), top):
            if other is not ran:
                self._stack_bufs.pop(id(other), None)

    def _ladder(self, plan: Plan) -> list[int]:
        """The capacities of ``plan``'s rungs (``capacity_ladder`` with the options' first rung and
        ratio), smallest first, ending with its own: the chunk, or the smaller capacity a memory budget
        allows (``MemoryPlan.capacity``), whose runs are then sized to what they push as well. With
        ``stack_ladder=False`` there is one rung; with ``precompile_staged`` too: that option promises
        that no run after the first compiles, which climbing would break; a plan retried at twice the
        chunk (a nested loop's stack outgrew it on the staged path) has one too."""
        o = self.options
        one = o.precompile_staged or not o.stack_ladder or plan.capacity > o.stack_chunk
        # (a plan whose stacks all live in host memory climbs past its own capacity: ``Plan.ladder_top``)
        top = max(plan.capacity, plan.ladder_top) if plan.all_host else plan.capacity
        plan.ladder = [plan.capacity] if one else capacity_ladder(top, o.stack_first_rung, o.stack_rung_ratio)
        plan.marks = StackMarks(plan.ladder, o.stack_descend_after)
        return plan.ladder

    def _rung(self, plan: Plan, capacity: int, fetches: list[Tensor], feeds: dict[Tensor, Any],
              variables: dict[str, np.ndarray]) -> Plan:
        """The plan of ``plan``'s rung at ``capacity`` (``plan`` itself at its own), made by the first
        run that reaches it: a run that fits the first rung never raises the program for the others."""
        p = plan.rungs.get(capacity)
        if p is None:
            p = plan.rungs[capacity] = plan if capacity == plan.capacity else self._plan(fetches, feeds, variables,
                                                                                         capacity, plan.swapped)
        return p

    def _run_fused(self, plan: Plan, fetches: list[Tensor], feeds: dict[Tensor, Any],
                   variables: dict[str, np.ndarray], max_iter: Any, budget: Optional[MemoryPlan] = None
                   ) -> tuple[list[Any], dict[str, Any]] | Discard:
        """The attempt of ``plan.fused`` (``_attempt``), or the ``Discard`` that says why the next rung,
        or the stages, must run instead (``needed``: how many entries its stacks counted).

        They must when a stack overflowed its capacity (or underflowed: the stages decide whether that
        is an error). The stages' functions are compiled only then, by the first run that needs them:
        a plan whose loops always fit never compiles them (with ``precompile_staged`` the plan's first
        run discards its attempt, to compile the stages up front). A fused stage whose trace refused
        (``Discard.refused``, ``_call_fused``) is dropped: the plan runs its stages from then on. An
        attempt that pushed a positional stack away from its position is run again at once, traced
        with every index record (``_record_every_stack``).
        """
        assert plan.fused is not None
        got = self._attempt(plan, fetches, feeds, variables, max_iter, budget)
        if isinstance(got, Discard) and got.rerecord:  # (run again at once, traced with every record)
            self._record_every_stack(plan)
            got = self._attempt(plan, fetches, feeds, variables, max_iter, budget)
        if isinstance(got, Discard) and got.refused:  # (its trace refused at this rung: the stages, or
            plan.fused, plan.refused = None, got.refused  # the next rung, from now on)
        return got

    def _attempt(self, plan: Plan, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray],
                 max_iter: Any, budget: Optional[MemoryPlan]) -> tuple[list[Any], dict[str, Any]] | Discard:
        """One attempt of ``plan.fused`` and the run's end: (the fetched values, the run's stats), or
        ``Discard`` — a stack outgrew (or underflowed) its capacity, or the trace refused — with no
        Variable written and no error raised. Its stack buffers are kept either way (the stages, or
        the next attempt, reuse them). The fed numpy arrays go to the call as they are (the call
        transfers them, as a jitted JAX function does)."""
        t0 = time.perf_counter()
        st = plan.fused
        assert st is not None
        first = not plan.fused_warm
        state = self._initial_state(plan, variables, fused=True)
        env: dict[Key, Any] = {key(t): v for t, v in feeds.items()}
        reads = {k: env[k] for k in st.reads if k in env}
        learnt = self._learn_stack_shapes(plan, st, reads, state, max_iter)
        if isinstance(learnt, Discard):  # (its trace refused)
            return learnt
        if learnt:  # (the stacks it learnt are allocated before the call now, and kept between runs)
            self._stack_bufs[id(plan)] = self._kept_stacks(plan, state)
            state = self._initial_state(plan, variables, fused=True)
        store = stk.ChunkStore(plan.stack_info, self.options.device_memory_limit, budget, held=plan.slots.bytes())
        store.observe(state, None, plan.host)
        got = self._call_fused(plan, st, reads, state, max_iter)
        if isinstance(got, Discard):  # (its trace refused)
            return got
        out, lives, state = got
        mark = state.pop("mark")
        outcome = self._attempt_outcome(plan, state, mark, first)
        if isinstance(outcome, Discard):
            return outcome
        store.observe(state, plan.index_bytes, plan.host)
        if plan.inside:
            store.observe_inside(plan.inside_bytes, stk.device_label(self._home_device()), plan.host_bytes)
        enforce(outcome)
        env.update(out)
        # (constants of the fused stage: they do not cross the call)
        env.update({k: copy_static(v) for k, v in (st.spec.static if st.spec is not None else {}).items()})
        store.saved(store.ledgers)
        values = self._finish(plan, fetches, env, lives, state, variables)
        self._records = store.records()
        stats = self._run_stats(plan, 1, True, [time.perf_counter() - t0], store.stats())
        return values, {**stats, "stack_mark": mark}

    def _learn_stack_shapes(self, plan: Plan, st: FusedStage, reads: dict[Key, Any], state: dict[str, Any],
                            max_iter: Any) -> bool | Discard:
        """Before the first compile of ``plan``'s fused stage, where the graph does not say the shapes
        of some of its stacks (a batch of ``None`` rows, an imported model's loops): its function
        traced and not compiled, and the shapes its pushes pushed taken as static
        (``Plan.learn_stack_shapes``). True when they were: the caller lays its state out again, so
        that the one compile takes those stacks' buffers as arguments, allocated before the call and
        kept between runs, and the next run repeats on a lane. ``Discard`` where the trace refused, as
        the call's own trace would (``_call_fused``).

        Why trace first: a trace costs less than XLA's lowering and compile of it (for the imported
        bidirectional GRU training step, 1.3 s of tracing against about 2 s of lowering and compiling),
        and without it the first run compiled the stage with those stacks made inside the call and
        the second compiled it again with them kept."""
        if "seg" in st.fns or not plan.unlearnt_stacks():
            return False
        rest, stacks = stk.split_state(state)
        fn = plan.fused_fn(CallArgs(tuple(reads), tuple(rest), tuple(stacks)))
        with self._span("fused attempt: its stacks' shapes traced", "compiled stages"):
            got = _refused_as_discard(lambda: fn.trace(*reads.values(), *rest.values(), *stacks.values(), max_iter))
        if isinstance(got, Discard):
            return got
        if plan.learn_stack_shapes():
            return True
        st.fns["seg"] = fn  # (its trace is JAX's: the call compiles it without tracing it again)
        return False

    def _record_every_stack(self, plan: Plan) -> None:
        """A fused attempt pushed a positional stack away from its position (``plan.positional_stacks``):
        its pops could not be checked by position, so the attempt is discarded and the fused stage is
        traced again with every record (``_run_fused`` runs it again at once), for
        this and every later run; hot routes made for the old trace are forgotten."""
        plan.record_every_stack()
        self.repeats.forget()

    def _attempt_outcome(self, plan: Plan, state: dict[str, Any], mark: int, first: bool) -> Outcome:
        """What a fused attempt that ran comes to (``outcome.decode`` of its word and mark), its stack
        buffers kept for the next attempt or the stages either way. With ``precompile_staged`` a plan's
        first attempt is discarded, so that its stages compile up front."""
        plan.fused_warm = True
        if plan.prealloc:
            self._stack_bufs[id(plan)] = self._kept_stacks(plan, state)
        outcome = self._decode(plan, int(state["err"]), attempt=True, mark=mark)
        if first and self.options.precompile_staged and not isinstance(outcome, Discard):
            return Discard()
        return outcome
