"""The shell of a compiled backend: what both compiled backends do around their compiled runs, once.

The one-device ``FastBackend`` and the fast partitioned executor (``devices.fast_executor``) each
wrapped their runs in the same four jobs, written twice almost line for line: the **run signature**
that plans, fallback and specialisation are keyed on; the **fallback** to the backend's reference
executor, warned once, of a program that cannot be compiled (``UnsupportedError``; ``fallback=False``
raises it); the **specialisation** on fed values that decide shapes (``fast.specialise``); and the
**sized retry**: a run starts at the stack chunk its memory budget allows and runs again at the
capacity each ``Retry`` names (``retried``). A backend supplies what differs: one specialised compiled
run (``_compile_run``), its reference executor and how its fallback is named, its name in errors
(``WHO``) and the graph stamp its plans stay valid for (``_graph_stamp``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, Optional, TypeVar

import jax
import numpy as np

from turnout.errors import UnsupportedError
from turnout.fast import specialise as sp
from turnout.fast.functionalize import program_key
from turnout.fast.lowering_base import NeedsStatic, Specialise
from turnout.fast.outcome import Retry
from turnout.fast.regions import Key, key
from turnout.fast.step_plan import StepPlan
from turnout.fast.variable_store import Deferred, initial_value, peeker
from turnout.fast_options import FastOptions
from turnout.frames import FrameAnalysis
from turnout.graph import Graph, Tensor, warn_user
from turnout.memory_plan import MemoryPlan, budgeted_loops
from turnout.session import RunOptions, RunResult
from turnout.slot_sizes import SlotPlan, SlotSizes, slot_notes
from turnout.validate import validate

R = TypeVar("R")


def variable_signature(graph: Graph, variables: dict[str, np.ndarray]) -> tuple[Any, ...]:
    """(name, dtype, shape) of every Variable of the graph, as plan signatures take them: a Variable
    the session has not set yet counts with its initial value."""
    gv = graph.variables
    if not gv:
        return ()
    out = []
    peek = peeker(variables)
    for name in sorted(gv):
        v = peek(name)
        if v is None:  # as the run will set it, in the Variable's dtype (a float64 initial value of a
            v = initial_value(gv[name])  # float32 Variable must not make the first run's plan another one's)
        if type(v) is not Deferred:  # (a deferred value's dtype and shape are its device array's)
            v = np.asarray(v)
        out.append((name, v.dtype.str, v.shape))
    return tuple(out)


class BackendShell(ABC):
    """What a compiled backend does around its compiled runs (the module docstring), and the state
    it keeps for them. ``FALLBACK_TO`` names the reference executor in the fallback's warning, and a
    run on it adds ``FALLBACK_STATS`` to its stats."""

    WHO: str
    FALLBACK_TO: str
    FALLBACK_STATS: dict[str, str]

    def __init__(self, graph: Graph, options: FastOptions) -> None:
        self.graph = graph
        #: the backend's options, fixed for its life (``turnout.fast_options.FastOptions``)
        self.options = options
        self.compile_count = 0  # traces made so far (tests and stats read it)
        #: per program, the checkpoint slots a recomputed loop gets, learnt from its runs (``turnout.slot_sizes``)
        self.slot_sizes = SlotSizes()
        self._fallback: dict[Any, str] = {}  # run signature -> why its program cannot be compiled
        # run signature -> the fed tensors whose values decide shapes: its plans are specialised on them
        self._static_keys: dict[Any, sp.Specialisation] = {}
        self._reference: Any = None  # the reference executor, made by the first run that falls back
        self._records: list[dict[str, Any]] = []  # per loop and device, the stack memory of the last run

    def memory_records(self) -> list[dict[str, Any]]:
        """Per loop and device, the gradient stack memory of the last run: ``loop``, ``device``,
        ``device_bytes`` and ``host_bytes`` (what the loop's stacks held on each when its forward
        loop ended), ``chunks_to_host`` / ``chunks_from_host`` (chunks copied out and back),
        ``peak_device_bytes``, and ``swap_memory``, ``stacks``, ``chunks_kept_on_device``.
        ``tn.memory_report(session)`` presents them."""
        return [dict(r) for r in self._records]

    def _learnt_notes(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any], slots: SlotPlan
                      ) -> tuple[str, ...]:
        """What runs of ``sig`` taught, as notes of its schedule (``Session.explain``): the values its
        plans are specialised on or the cut (``fast.specialise``), the checkpoint ``slots``."""
        return sp.specialisation_notes(self.graph, self._static_keys.get(sig, sp.NOTHING)) + slot_notes(
            slots.budgets, slots.counts, self.slot_sizes.capacity(self._program_key(fetches, feeds)))

    def _graph_stamp(self) -> int:
        """The graph's stamp in a run signature: ``edits``, so that nodes appended since (an op fetch's
        proxy) leave the plans valid."""
        return self.graph.edits

    def _run_signature(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, np.ndarray]
                       ) -> Any:
        """What a run's plans, fallback and specialisation are keyed on."""
        return (self._graph_stamp(), tuple([(t.node.id, t.index) for t in fetches]),
                tuple(sorted([(t.node.id, t.index, v.dtype.str, np.shape(v)) for t, v in feeds.items()])),
                variable_signature(self.graph, variables))

    def _validate(self, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> FrameAnalysis:
        """Reject ill-formed graphs before compiling, with the reference backend's ``ValidationError``
        (``turnout.validate`` caches the graph part per graph version): the graph's frames."""
        return validate(self.graph, fetches, list(feeds))

    def _program_key(self, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> Any:
        """The program of a run (``functionalize.program_key``): every plan of it nests alike."""
        return program_key(self.graph, fetches, feeds)

    def _plan_key(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any], cap: int,
                  static: dict[Key, np.ndarray]) -> tuple[Any, ...]:
        """What a plan is cached on: its run signature, stack chunk, the fed values it is specialised
        on, and the checkpoint slots its program's runs taught (``turnout.slot_sizes``)."""
        return sig, cap, sp.static_signature(static), self.slot_sizes.capacity(self._program_key(fetches, feeds))

    def _run_or_fall_back(self, sig: Any, compiled: Callable[..., RunResult], fetches: list[Tensor],
                          feeds: dict[Tensor, Any], variables: dict[str, np.ndarray], options: RunOptions
                          ) -> RunResult:
        """``compiled(sig, fetches, feeds, variables, options)``, or the run on the reference executor
        where the program of ``sig`` cannot be compiled: known already, or found now
        (``UnsupportedError``, warned once; raised where ``fallback=False``)."""
        if self._fallback and sig in self._fallback:
            return self._run_reference(sig, fetches, feeds, variables, options)
        try:
            return compiled(sig, fetches, feeds, variables, options)
        except UnsupportedError as e:
            if not self.options.fallback:
                raise
            self._fallback[sig] = str(e)
            warn_user(f"{e}; this program runs on {self.FALLBACK_TO} instead (at interpreter speed)",
                      RuntimeWarning)
            return self._run_reference(sig, fetches, feeds, variables, options)

    @abstractmethod
    def _reference_executor(self) -> Any:
        """The backend's oracle, which a program it cannot compile runs on."""

    def _run_reference(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                       variables: dict[str, np.ndarray], options: RunOptions) -> RunResult:
        """A run on the reference executor, for a program this backend cannot compile: the same values,
        Variables and errors at interpreter speed; its stats say so, and why (``fallback_reason``)."""
        if self._reference is None:
            self._reference = self._reference_executor()
        host = {t: (np.asarray(v) if isinstance(v, jax.Array) else v) for t, v in feeds.items()}
        result: RunResult = self._reference.run(fetches, host, variables, options)
        self._records = []  # the interpreter's stacks are Python objects, on no device
        result.stats.update({**self.FALLBACK_STATS, "fallback_reason": self._fallback[sig]})
        return result

    @abstractmethod
    def _compile_run(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                     variables: dict[str, np.ndarray], options: RunOptions, static: dict[Key, np.ndarray]
                     ) -> RunResult:
        """The backend's run on plans specialised on ``static`` (may raise ``NeedsStatic``)."""

    def _run_specialised(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                         variables: dict[str, np.ndarray], options: RunOptions) -> RunResult:
        """``_specialised``'s run, where a backend keeps something of it."""
        return self._specialised(sig, fetches, feeds, variables, options)[0]

    def _specialised(self, sig: Any, fetches: list[Tensor], feeds: dict[Tensor, Any],
                     variables: dict[str, np.ndarray], options: RunOptions
                     ) -> tuple[RunResult, dict[Key, np.ndarray]]:
        """A compiled run on the plan specialised on the values that decide shapes, and those values
        (``fast.specialise.run_specialised``; a cut's tensors are computed by ``_run_specialised``)."""
        def compile_run(cut_values: dict[Key, Any], values: dict[Key, np.ndarray]) -> RunResult | Specialise:
            fed = sp.with_computed(self.graph, feeds, cut_values)
            s = self._run_signature(fetches, fed, variables) if cut_values else sig
            try:
                return self._compile_run(s, fetches, fed, variables, options, values)
            except NeedsStatic as e:  # (only raising leaves a JAX trace; it goes no further than here)
                return Specialise.of(e)

        def compute(cut: frozenset[Key]) -> dict[Key, Any]:
            def fetch(ts: list[Tensor]) -> list[Any]:
                return self._run_specialised(self._run_signature(ts, feeds, variables), ts, feeds, variables,
                                             options).values
            return sp.computed(self.graph, cut, {key(t) for t in feeds}, fetch, self.WHO)

        result, values = sp.run_specialised(self._static_keys, sig, {key(t): v for t, v in feeds.items()}, compile_run,
                                         compute)
        result.stats.update(sp.specialisation_stats(self.graph, self._static_keys.get(sig, sp.NOTHING), values))
        return result, values

    def _budgeted(self, run_budget: Optional[int]) -> bool:
        """Whether a memory budget applies to a run: the run's, or a loop's own on its stacks."""
        return run_budget is not None or bool(budgeted_loops(self.graph))

    def _budgeted_chunk(self, run_budget: Optional[int], plan_at: Callable[[int], StepPlan]
                        ) -> tuple[int, Optional[MemoryPlan]]:
        """The stack chunk a run starts with and its memory plan: ``stack_chunk`` and None, or where a
        memory budget applies the smaller chunk whose buffers the plan ``plan_at(stack_chunk)`` holds
        under it, and that memory plan (a run that outgrows the chunk meets its check)."""
        chunk = self.options.stack_chunk
        if not self._budgeted(run_budget):
            return chunk, None
        with jax.enable_x64(True):
            budget = plan_at(chunk).budget(run_budget)
        cap = None if budget is None else budget.capacity()
        return (chunk if cap is None else min(chunk, cap)), budget


def retried(cap: int, run_at: Callable[[int], R | Retry]) -> tuple[R, int, int]:
    """``run_at(cap)``, again at the capacity each ``Retry`` names: (its result, the capacity that
    held, the retries). Past ``MAX_CAPACITY`` ``outcome.decode`` raises instead, so the loop ends."""
    retries = 0
    with jax.enable_x64(True):
        while True:
            got = run_at(cap)
            if not isinstance(got, Retry):
                return got, cap, retries
            cap, retries = got.capacity, retries + 1


__all__ = ["BackendShell", "retried", "variable_signature"]
