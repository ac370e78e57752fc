"""Laws of the staged path (``turnout.fast.staged_stages``): a plan whose fused attempt cannot hold
its run runs its stages with the one runner on the one device, reading each stage's error word at
once, over a stack store that holds the plan's checkpoint slots; it predicts overflow for the next
run exactly when a chunk moved, starts the copies of the fetched values where the device copies
asynchronously, and ends in the ``Retry`` of stacks that outgrew their chunk within one call. Each
law kills mutants of the full set of ``fast/staged_stages.py`` (issue 40, part 3; ``python
tools/mutation.py --module fast/staged_stages.py --all``): the runner's policy, executor name or
plan passed wrongly, the store made without the plan's slots or for other devices, the
prediction taken at two chunks instead of one, the fetched values' copies started for the wrong
fetches, the stats that say how many stages ran and that they were not the fused call, and the
retry taken for success or success for the retry.

Two small programs run on the fast backend with ``stack_chunk=2`` and no ladder, so that the fused
attempt overflows and the stages run: one of two loops (one storing its one stack, one recomputed
from checkpoint slots) reading and then training a Variable, run once for all the laws it checks
(a module fixture, with the recorders put back before any test reads them), and one nested loop
whose inner loop outgrows its chunk within one call. Each is compared with the reference
interpreter.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
import pytest

import turnout as tn
from turnout.fast import staged_stages
from turnout.fast.cut import ONE
from turnout.fast.device_stacks import DeviceStacks
from turnout.fast.outcome import Retry
from turnout.fast.regions import key
from turnout.fast.run_state import WHO
from turnout.fast.runner import RunPolicy

LIMIT = 1 << 30  # a device memory cap the runs never reach, to see it handed to the store


@dataclass
class Seen:
    """What the recorders saw during the runs of one program."""

    runs: list[Any] = field(default_factory=list)       # each StagedRun made, with its returned env
    stores: list[tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)  # DeviceStacks args
    reads: list[list[Any]] = field(default_factory=list)  # each start_reads call's values
    outcomes: list[Any] = field(default_factory=list)     # each _run_stages result
    stats: list[dict[str, Any]] = field(default_factory=list)
    budgets: list[Any] = field(default_factory=list)      # each _run_stages call's memory plan
    records: list[dict[str, Any]] = field(default_factory=list)  # the backend's memory_records after
    trace: Any = None    # the run's timeline (``trace=True``)
    wall: float = 0.0    # the seconds of the whole ``Session.run``
    values: list[list[Any]] = field(default_factory=list)  # the fast backend's, then the reference's
    plan: Any = None         # the program's one plan
    predicted: bool = False  # its ``predict_overflow`` after the run


def _recorders(m: pytest.MonkeyPatch, seen: Seen) -> None:
    """Record the runners, stores, reads and outcomes of the staged path (put back with ``m``)."""
    class Run(staged_stages.StagedRun):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.env: Any = None
            seen.runs.append(self)

        def run(self, *args: Any) -> Any:
            self.env = super().run(*args)
            return self.env

    class Stacks(DeviceStacks):
        def __init__(self, *args: Any, **kw: Any) -> None:
            seen.stores.append((args, kw))
            super().__init__(*args, **kw)

    real = staged_stages.StagedStages._run_stages

    def run_stages(self: Any, *args: Any, **kw: Any) -> Any:
        seen.budgets.append(args[5] if len(args) > 5 else kw.get("budget"))
        got = real(self, *args, **kw)
        seen.outcomes.append(got)
        return got

    m.setattr(staged_stages, "StagedRun", Run)
    m.setattr(staged_stages, "DeviceStacks", Stacks)
    m.setattr(staged_stages, "start_reads", lambda vals: seen.reads.append(list(vals)))
    m.setattr(staged_stages.StagedStages, "_run_stages", run_stages)


def _two_loops() -> tuple[tn.Graph, dict[str, Any]]:
    """``a``: ``h <- sin h`` for ``k`` steps from ``x0`` (one stack); ``b``: ``v <- tanh(v) * w`` from
    ``a`` for ``k`` steps, recomputed from checkpoint slots; the gradients of ``b`` w.r.t. ``x0`` and
    the Variable ``w``, and a training step of ``w``."""
    g = tn.Graph()
    with g.as_default():
        x0 = tn.placeholder(tn.float32, [], name="x0")
        k = tn.placeholder(tn.int32, [], name="k")
        w = tn.Variable(np.float32(0.9), name="w")
        _, a = tn.while_loop(lambda i, h: i < k, lambda i, h: (i + 1, tn.sin(h)), [tn.constant(0), x0], name="a")
        _, b = tn.while_loop(lambda i, v: i < k, lambda i, v: (i + 1, tn.tanh(v) * w), [tn.constant(0), a],
                             name="b", memory_budget=48)
        gx, gw = tn.gradients(b, [x0, w])
        step = w.assign_sub(0.1 * gw)
    return g, {"x0": x0, "k": k, "fetches": [b, gx, gw, step]}


@pytest.fixture(scope="module")
def two_loops() -> Iterator[tuple[Seen, Seen, Any, tn.Session, tn.Session]]:
    """The two-loop program run twice, recorded: 3 steps (one chunk of ``a``'s stack moves), traced,
    then 1 step (none moves) under a run's memory budget. With ``overlap_reads`` set, as on a GPU.
    Also the reference's runs."""
    g, t = _two_loops()
    fast = tn.Session(g, backend="fast", stack_chunk=2, stack_ladder=False, device_memory_limit=LIMIT,
                      fallback=False)
    ref = tn.Session(g)
    fast.backend.overlap_reads = True
    runs = []
    for n, opts in ((3, {"trace": True}), (1, {"memory_budget": 1 << 20})):
        seen = Seen()
        feeds = {t["x0"]: np.float32(0.7), t["k"]: n}
        with pytest.MonkeyPatch.context() as m:
            _recorders(m, seen)
            t0 = time.perf_counter()
            seen.values.append(fast.run(t["fetches"], feeds, **opts))
            seen.wall = time.perf_counter() - t0
        assert fast.last_result is not None
        seen.stats.append(fast.last_result.stats)
        seen.trace = fast.last_result.trace
        seen.records = fast.backend.memory_records()
        (seen.plan,) = fast.backend._plans.values()
        seen.predicted = seen.plan.predict_overflow
        seen.values.append(ref.run(t["fetches"], feeds))
        runs.append(seen)
    yield runs[0], runs[1], t, fast, ref


def test_the_stages_give_the_reference_s_values_and_train_the_variable(two_loops: Any) -> None:
    """The staged run's fetches and the Variable it trains are the reference interpreter's. Kills
    every argument of the runner, the store, the initial state (its Variables), the run, the finish
    (its environment, live flags, state, Variables) and the stats dropped or set to None, and the
    retry taken for a run that succeeded."""
    first, second, _, fast, ref = two_loops
    for seen in (first, second):
        got, want = seen.values
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5)
        assert seen.stats[0]["fused"] is False and len(seen.outcomes) == 1
    np.testing.assert_allclose(fast.variables["w"], ref.variables["w"], rtol=1e-5)


def test_the_one_runner_reads_each_stage_s_word_at_once_on_the_one_device(two_loops: Any) -> None:
    """``StagedRun`` is the one runner (``StepRunner``) over the plan, on ``fast.cut.ONE``, with the
    policy of the one-device backend: errors named by ``WHO``, each stage's error word read as it
    returns (``check_each_step``), the devices' JAX devices (none to copy to: one device), and the
    backend's timeline where the run is traced. Kills the policy's name set to None and its flag set
    to None, False or left to its default, the JAX devices set to None, and the timeline dropped."""
    first = two_loops[0]
    (run,) = first.runs
    plan = first.plan
    assert run.policy == RunPolicy(WHO, check_each_step=True)
    assert run.plan is plan and list(run.state) == [ONE] and run.jdev == {ONE: None}
    assert run.tl is not None and run.tl is first.trace  # (a traced run: the backend's timeline)


def test_the_store_holds_the_plan_s_stacks_and_checkpoint_slots_on_the_one_device(two_loops: Any) -> None:
    """The stages' stack store is made for ``ONE`` alone (unlabelled, as one device needs no name in
    its errors), at the plan's capacity, under the backend's device memory cap, and holds the
    checkpoint slots of the plan's recomputed loop (``SlotPlan.bytes``), which it counts against a
    budget. Kills the slots left out (None), the devices or the capacity set to None, the cap
    dropped, the run's memory plan not handed on, the executor's name set to None, and the label
    set to None or to a name."""
    first = two_loops[0]
    ((args, kw),) = first.stores
    plan = first.plan
    assert args[1] == [ONE] and args[2] == plan.capacity == 2 and args[3] == LIMIT
    held = args[5]
    assert held == {ONE: plan.slots.bytes()} and held[ONE]["b"] > 0
    assert kw["who"] == WHO and kw["label"](ONE) == ""
    assert first.stats[0]["checkpoint_bytes"] == held[ONE]
    second = two_loops[1]
    ((args, _),) = second.stores
    assert second.budgets[0] is not None and args[4] is second.budgets[0]


def test_overflow_is_predicted_exactly_when_a_chunk_moved(two_loops: Any) -> None:
    """A run that moved a full chunk out of its state (here exactly one: ``a``'s one stack, three
    values in chunks of two) marks the plan so that the next run skips the fused attempt; a run that
    moved none clears the mark. Kills the prediction taken from two chunks (``> 1``)."""
    first, second = two_loops[0], two_loops[1]
    moved = first.stats[0]["stack_chunks_kept"] + first.stats[0]["stack_chunks_swapped"]
    assert moved == 1 and first.predicted is True
    assert second.stats[0]["stack_chunks_kept"] + second.stats[0]["stack_chunks_swapped"] == 0
    assert second.predicted is False


def test_the_stats_count_the_stages_and_time_each_call(two_loops: Any) -> None:
    """The stats of a staged run: the plan's number of stages, not the fused call, and the seconds
    of each stage's call, one entry a call (``StagedRun.call``), within the run's own time; the
    backend's ``memory_records`` are the staged run's (loop ``a``'s one chunk kept on the device).
    Kills the count set to None, ``fused`` set to True or None, a call's seconds added to its start
    instead of subtracted, and the records set to None."""
    first = two_loops[0]
    stats, plan, (run,) = first.stats[0], first.plan, first.runs
    assert stats["stages"] == len(plan.stages) > 1 and stats["fused"] is False
    assert stats["stage_seconds"] == run.seconds and len(run.seconds) >= len(plan.stages)
    assert all(isinstance(s, float) and s > 0 for s in run.seconds) and sum(run.seconds) <= first.wall
    (row,) = [r for r in first.records if r["loop"] == "a"]
    assert row["chunks_kept_on_device"] == 1 == stats["stack_chunks_kept"]


def test_the_module_exports_its_two_classes() -> None:
    """``__all__`` names exactly the classes this module defines (what ``test_exports.py`` checks of
    every module, here at once). Kills every mutant of the list."""
    own = {n for n, v in vars(staged_stages).items() if isinstance(v, type) and v.__module__ == staged_stages.__name__}
    assert own and sorted(staged_stages.__all__) == sorted(own)


def test_the_fetched_values_copies_start_before_they_are_read(two_loops: Any) -> None:
    """Where the device copies to the host asynchronously (``overlap_reads``), the copy of each
    fetched value the stages left in the environment is started once, before the values are read:
    those values and no others. Kills the filter inverted (``not in``) and the fetch's key taken of
    None."""
    first, _, t, _, _ = two_loops
    (run,) = first.runs
    (reads,) = first.reads
    held = [run.env.vals[key(f)] for f in t["fetches"] if key(f) in run.env.vals]
    assert reads and len(reads) == len(held) and all(a is b for a, b in zip(reads, held, strict=True))
    assert all(isinstance(v, jax.Array) for v in reads)


def test_stacks_that_outgrow_their_chunk_in_one_call_end_the_run_in_a_retry() -> None:
    """An inner loop that pushes more than a chunk within one call of the outer loop's body ends the
    staged run with the runner's ``Retry`` (``StepRunner.retry``), which the backend runs again with
    larger chunks; the run that follows gives the reference's values. Kills the retry's check
    inverted (an ``AssertionError`` on the retry)."""
    g = tn.Graph()
    with g.as_default():
        h0 = tn.placeholder(tn.float32, [], name="h0")
        k = tn.placeholder(tn.int32, [], name="k")

        def body(i: Any, h: Any) -> Any:
            _, h2 = tn.while_loop(lambda j, h: j < k, lambda j, h: (j + 1, tn.sin(h)), [tn.constant(0), h])
            return i + 1, h2

        _, h = tn.while_loop(lambda i, h: i < 2, body, [tn.constant(0), h0])
        (dh,) = tn.gradients(h, [h0])
    feeds = {h0: np.float32(0.7), k: 3}
    fast = tn.Session(g, backend="fast", stack_chunk=2, stack_ladder=False, fallback=False)
    seen = Seen()
    with pytest.MonkeyPatch.context() as m:
        _recorders(m, seen)
        got = fast.run([h, dh], feeds)
    for a, b in zip(got, tn.Session(g).run([h, dh], feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    assert isinstance(seen.outcomes[0], Retry) and isinstance(seen.outcomes[-1], tuple)
    assert seen.outcomes[0] is seen.runs[0].retry and seen.runs[0].env is None
    assert fast.last_result is not None and fast.last_result.stats["stack_capacity_retries"] >= 1
