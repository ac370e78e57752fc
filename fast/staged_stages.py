"""The staged path's stages: a compiled segment, or a top-level loop driven chunk by chunk.

Why a layer of its own (under ``FastBackend``, which runs the stages in order, ``_execute``): these
are how one stage of the staged path is called — a segment through ``fast.segment.SegmentFn`` in
the calling convention of ``fast.call_spec``, a driven loop through ``fast.driven.DrivenLoop``,
which moves full stack chunks between its calls — and what a stage comes to: its outputs and state,
or the outcome that ends the run (``Discard`` where the fused stage's trace refused, ``Retry`` where
a driven loop's stacks outgrew their chunk), returned, not raised.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

from turnout.fast import stacks as stk
from turnout.fast.cut import Segment
from turnout.fast.driven import Guard
from turnout.fast.fused_attempts import FusedAttempts
from turnout.fast.guards import device_oom
from turnout.fast.outcome import Discard, Raise, Retry
from turnout.fast.plan import FusedStage, Plan
from turnout.fast.regions import Key
from turnout.fast.run_state import WHO


class StagedStages(FusedAttempts):
    """One stage of a run (``FastBackend._execute``): the fused attempt's call (``FusedAttempts``), a
    compiled segment, or a driven loop."""

    def _stage(self, plan: Plan, st: Segment | FusedStage, i: int, env_in: dict[Key, Any], state: dict[str, Any],
               max_iter: Any, store: stk.ChunkStore) -> tuple[dict[Key, Any], Any, dict[str, Any]] | Discard | Retry:
        """One stage of ``_execute``: (its outputs, their live flags, the state after it), or the
        outcome that ends the run — the fused stage's trace refused (``Discard``), or a driven loop's
        stacks outgrew their chunk (``Retry``)."""
        if isinstance(st, FusedStage):
            return self._call_fused(plan, st, env_in, state, max_iter)
        if st.driven is None:
            return self._call_segment(plan, st, i, env_in, state, max_iter)
        with self._span(f"stage {i}: driven {st.driven.describe()}", "compiled stages") as args:
            before = self.compile_count
            got = self._drive(plan, st, env_in, state, max_iter, store)
            args["compiled"] = self.compile_count != before
        if isinstance(got, Retry):
            return got
        out, state = got
        return out, {}, state

    def _call_segment(self, plan: Plan, st: Segment, i: int, env_in: dict[Key, Any], state: dict[str, Any],
                      max_iter: Any) -> tuple[dict[Key, Any], Any, dict[str, Any]]:
        """One compiled segment of the stages (``_execute``), called in the convention of
        ``fast.call_spec`` through ``fast.segment.SegmentFn`` (``Plan.segment_fn``: its error word
        carried in its state): (its outputs, their live flags, the state after it)."""
        if st.fn is None:
            st.fn = plan.segment_fn(st)
        with self._span(f"stage {i}: compiled segment", "compiled stages") as args, device_oom(plan, st):
            before = self.compile_count
            out, lv, state = st.fn(env_in, state, max_iter)
            args["compiled"] = self.compile_count != before
            args["error_word"] = int(state["err"])
        return out, lv, state

    def _drive(self, plan: Plan, st: Segment, env_in: dict[Key, Any], state: dict[str, Any], max_iter: Any,
               store: stk.ChunkStore) -> tuple[dict[Key, Any], dict[str, Any]] | Retry:
        """Run a top-level loop chunk by chunk (``fast.driven.DrivenLoop.run``). Between chunks, a stack
        that outgrew its buffer hands the full chunk to ``store`` (to host memory, or kept on the
        device: the loop's ``swap_memory``), and a stack that runs low takes the chunk that ``store``
        brought back. ``Retry``: a chunk could make no progress at this capacity."""
        if st.fn is None:
            st.fn = plan.driven_loop(st)
        got = st.fn.run(env_in, state, max_iter, store, WHO, self._chunk_guard(plan, st))
        if isinstance(got, Raise):
            raise got.error
        if isinstance(got, Retry):
            return got
        out, _, state = got
        return out, state

    def _chunk_guard(self, plan: Plan, st: Segment) -> Guard:
        """The guard of ``drive_chunks`` for stage ``st``: each chunk call and each move of stack
        chunks is a span of the run's timeline (when traced), and XLA's out-of-memory in any of them
        is ``ResourceExhaustedError`` naming the loop (``device_oom``)."""
        @contextmanager
        def guard(what: str, stacks: Optional[list[str]]) -> Iterator[dict[str, Any]]:
            span: Any
            if what in ("init", "finish"):
                span = contextlib.nullcontext({})
            elif what == "chunk":
                span = self._span("chunk", "driven loops")
            else:
                span = self._span("stack chunks full" if what == "spill" else "stack chunks back", "host swaps",
                                  stacks=stacks)
            with span as args, device_oom(plan, st):
                yield args

        return guard


__all__ = ["StagedStages"]
