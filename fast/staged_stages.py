"""The staged path: the fast backend's cut for one device, run by the one runner.

Why a layer of its own (under ``FastBackend``): a plan whose fused attempt cannot hold its run (its
stacks outgrow the largest rung, or it has none) runs as its stages — compiled segments and top-level
loops driven chunk by chunk, the program cut for one device (``fast.cut.one_device``, ``Plan.stages``)
— and those are run by the runner every run of steps takes (``fast.runner.StepRunner``), the
partitioned executor's per-device tiers included, which compiles each stage as the plan says
(``fast.step_plan.StepPlan``). What this layer gives it is what is particular to one device of this
backend: its state and stack store, the policy that reads each stage's word at once (which lets a
driven loop's pointers run free) and the times of its stages. It reads each
stage's error word as the stage returns (``RunPolicy.check_each_step``): a stage's error is raised
after it, as the interpreter raises it during the run, and stacks that outgrew their chunk within one
call end the run with the outcome ``Retry``, which the caller (``_run_compiled``) runs again with
larger chunks.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np

from turnout.fast.cut import ONE, Segment
from turnout.fast.device_stacks import DeviceStacks
from turnout.fast.fused_attempts import FusedAttempts
from turnout.fast.outcome import Retry
from turnout.fast.plan import Plan
from turnout.fast.regions import Key, key
from turnout.fast.run_state import WHO
from turnout.fast.runner import Called, RunPolicy, StepRunner
from turnout.fast.values import start_reads
from turnout.graph import Tensor
from turnout.memory_plan import MemoryPlan
from turnout.session import RunOptions


class StagedRun(StepRunner):
    """One run of a plan's stages: the one runner on this backend's one device (``fast.cut.ONE``)."""

    def __init__(self, backend: StagedStages, plan: Plan, state: dict[str, Any], stacks: DeviceStacks,
                 options: RunOptions) -> None:
        super().__init__(plan, {ONE: state}, stacks, {ONE: None}, options, RunPolicy(WHO, check_each_step=True),
                         backend._timeline)
        #: the seconds of each stage's call, in order (``stats["stage_seconds"]``)
        self.seconds: list[float] = []

    def call(self, seg: Segment, env_in: dict[Key, Any], state: dict[str, Any]) -> Called:
        """The stage's call, timed (``stats["stage_seconds"]``)."""
        t0 = time.perf_counter()
        got = super().call(seg, env_in, state)
        self.seconds.append(time.perf_counter() - t0)
        return got


class StagedStages(FusedAttempts):
    """The staged path of ``FastBackend`` (``_run_stages``), over its fused attempts."""

    def _run_stages(self, plan: Plan, fetches: list[Tensor], feeds: dict[Tensor, Any],
                    variables: dict[str, np.ndarray], options: RunOptions, budget: Optional[MemoryPlan] = None
                    ) -> tuple[list[Any], dict[str, Any]] | Retry:
        """Run ``plan.stages`` in order and finish the run: (the fetched values, the run's stats), or
        the ``Retry`` of stacks that outgrew their chunk (the runner's ``StepRunner.run``)."""
        stacks = DeviceStacks(plan.stack_info, [ONE], plan.capacity, self.options.device_memory_limit, budget,
                              {ONE: plan.slots.bytes()}, who=WHO, label=lambda _: "")
        run = StagedRun(self, plan, self._initial_state(plan, variables), stacks, options)
        env = run.run(plan.stages, [(key(t), v, ONE) for t, v in feeds.items()])
        if env is None:
            assert run.retry is not None
            return run.retry
        plan.predict_overflow = stacks.moved() > 0
        if self.overlap_reads:
            start_reads([env.vals[key(t)] for t in fetches if key(t) in env.vals])
        values = self._finish(plan, fetches, env.vals, run.lives, run.state[ONE], variables)
        self._keep_buffers_of(plan, plan)  # (the rungs' buffers go: this run held its own)
        self._records = stacks.records()
        return values, self._run_stats(plan, len(plan.stages), False, run.seconds, stacks.stats())


__all__ = ["StagedRun", "StagedStages"]
