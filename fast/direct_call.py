"""The ``Direct`` call: a plan of one compiled segment without gradient stacks, called with flat
arguments and results (``fast.call_spec``), its error word and live flags read back at once.

Why a layer of its own: it is the route of most small programs, whose run is the jitted call and
little else (``benchmarks/run_overhead.py``), and the route their lanes repeat (``fast.lane``);
it shares only the run's first and last steps with the others (``fast.run_state``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from turnout.fast import stacks as stk
from turnout.fast.call_spec import CallArgs, copy_static
from turnout.fast.guards import iteration_bound
from turnout.fast.host_env import fetched
from turnout.fast.lane import write_variables
from turnout.fast.plan import Direct, Plan
from turnout.fast.regions import key
from turnout.fast.run_state import RunState
from turnout.fast.specialise import NOTHING, specialisation_stats
from turnout.fast.state_keys import var_key
from turnout.fast.values import start_reads
from turnout.graph import Tensor
from turnout.session import RunResult


class DirectCalls(RunState):
    """The backend's ``Direct`` calls: made from a plan (``_make_direct``), run (``_run_direct``)
    and finished (``_direct_result``, which the lanes call too)."""

    def _make_direct(self, plan: Plan, fetches: list[Tensor], feeds: dict[Tensor, Any]) -> Direct:
        var_names = tuple(plan.var_nodes)
        args = CallArgs(tuple(sorted(key(t) for t in feeds)), tuple(var_key(n) for n in var_names), (), plan.has_loops)
        stats = {
            "backend": "fast", "stages": 1, "fused": False,
            "stack_capacity": plan.capacity, "stack_chunks_kept": 0, "stack_chunks_from_host": 0,
            "peak_device_stack_bytes": 0, "stack_chunks_swapped": 0, "peak_host_stack_bytes": 0,
            "stack_capacity_retries": 0, "executor": "compiled",
            **plan.slots.stats, **specialisation_stats(self.graph, NOTHING, plan.static_feeds),
        }
        d = Direct(plan, None, args, var_names, stats)
        d.fn = plan.direct_fn(args, tuple(key(t) for t in fetches), d.record)
        return d

    def _run_direct(self, d: Direct, fetches: list[Tensor], feeds: dict[Tensor, Any],
                    variables: dict[str, np.ndarray], options: Any) -> Any:
        """One run on the ``Direct`` path; the same checks, errors and variable updates as ``_run``."""
        t0 = time.perf_counter()
        if options.memory_budget is not None and d.plan.slots.nodes:  # (a loop's own budget holds its slots)
            stk.check_slots(d.plan.budget(options.memory_budget), d.plan.slots.bytes(), "fast backend")
        by_key = {(t.node.id, t.index): v for t, v in feeds.items()}
        var_vals = {var_key(name): self._device_var(d.plan, name, variables) for name in d.var_names}
        flat = d.args.flat(by_key, var_vals, {}, iteration_bound(options))
        if self._timeline is None:
            res = d.fn(*flat)
        else:
            with self._span("one compiled call", "compiled stages") as args:
                before = self.compile_count
                res = d.fn(*flat)
                args["compiled"] = self.compile_count != before
        return self._direct_result(d, fetches, res, var_vals, variables, t0, "general")

    def _direct_result(self, d: Direct, fetches: list[Tensor], res: Any, var_vals: dict[str, Any],
                       variables: dict[str, np.ndarray], t0: float, route: str) -> RunResult:
        """The fetched values on the host, errors raised, Variables written back: the end of a
        ``Direct`` run (``var_vals``: the Variables' device copies it started from, by state key)."""
        spec = d.spec
        assert spec is not None  # (set by its trace)
        out, flags, state = spec.split(res)
        if self.overlap_reads:
            start_reads(out.values())
        out, code, lives, _ = spec.read_flags(out, flags)
        if code:
            self._raise_errors(d.plan, code)
        values = fetched(fetches, {**out, **{k: copy_static(v) for k, v in spec.static.items()}}, lives)
        position = {key(t): i for i, t in reversed(list(enumerate(fetches)))}
        aliases = dict(spec.aliases)
        var_plan = tuple((name, spec.returns(var_key(name)), position.get(aliases.get(var_key(name))))
                         for name in d.var_names)
        write_variables(var_plan, [state.get(k, v) for k, v in var_vals.items()], values, variables, self._dev_vars)
        self._records: list[dict[str, Any]] = []
        stats = dict(d.stats)
        stats["compiles"] = self.compile_count
        stats["stage_seconds"] = [time.perf_counter() - t0]
        stats["route"] = route
        return RunResult(values=values, stats=stats)
