"""Laws of the schedule's words (``turnout.fast.explain``): what ``Session.explain`` says of each route
and of each step of a cut, word for word. Each law kills mutants of the full set of
``fast/explain.py`` (issue 40, part 3) that the sessions' tests reach only in part: a host cond's
branches, a driven loop inside a host loop's parts or a cond's branch, a compiled segment with loops
inside, a ladder of exactly twelve or thirteen rungs, the host-memory stacks of several loops, a
fallback named by another backend. A schedule is a value a user reads to learn why a run is slow; a
wrong word there (a swapping loop said to keep its stacks, a branch run twice, a device dropped) is
a silent wrong answer to that question, so the laws compare whole schedules.

The plans are stand-ins (``plan_schedule`` reads only ``fused``, ``direct_ok``, ``stages``,
``capacity``, ``host`` and ``stack_info[k].loop``), and the cuts are made of ``fast.cut``'s own
records around stand-in regions and items (``cut_steps`` reads a region's ``frame`` and ``pred.name``
and an item's ``nodes``), so each law runs in milliseconds."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Optional

from turnout.fast import cut
from turnout.fast.explain import _rungs, cut_steps, fallback_schedule, plan_schedule
from turnout.fast.regions import WhileRegion
from turnout.run_schedule import RunSchedule, Step

INTERPRETER = Step("interpreter", "the reference interpreter, if tracing finds an op the compiler refuses")


def _loop(*frame: str) -> WhileRegion:
    """A loop region of frame ``frame`` (its name is the last entry) holding nothing."""
    return WhileRegion(frame=tuple(frame), loop_cond=None, loop_vars=[], invariants=[], switches=[],  # type: ignore[arg-type]
                       exits=[], header=[], body=[], exit_side=[], carried=[], parallel_iterations=1,
                       nodes=[SimpleNamespace(name=f"{frame[-1]}/Enter")])  # type: ignore[list-item]


def _op(name: str) -> Any:
    """An item that is one op (``item_nodes`` reads its ``nodes``)."""
    return SimpleNamespace(nodes=[SimpleNamespace(name=name)])


def _driven(device: str, name: str, *push: str) -> cut.Segment:
    """A segment that drives the loop ``name`` (in a frame whose other entries differ) chunk by chunk,
    pushing the stacks ``push``."""
    return cut.Segment(device, [], driven=_loop(f"{name}-outer", f"{name}-mid", name), push={k: 1 for k in push})


def _call(device: str, index: int, *items: Any) -> cut.Segment:
    return cut.Segment(device, list(items), index=index, label=device)


def _dev(d: Optional[str]) -> Optional[str]:
    """A device label that tells each device apart from ``None`` (the backend's one device)."""
    return f"<{d}>"


def test_a_fallback_names_its_backend_its_executor_and_its_reason() -> None:
    """[fallback] A signature the compiler refused runs on the backend's reference executor, the one
    step of its schedule, with the reason; the one-device backend's defaults name ``fast`` and the
    reference interpreter. Kills every mutant of ``fallback_schedule`` (its defaults, the step's kind
    and words, the schedule's backend and steps)."""
    assert fallback_schedule("a growing loop variable") == RunSchedule(
        "fast", (Step("interpreter", "the reference interpreter (fallback: a growing loop variable)"),))
    assert fallback_schedule("r", "fast (partitioned)", "the partitioned reference executor") == RunSchedule(
        "fast (partitioned)", (Step("interpreter", "the partitioned reference executor (fallback: r)"),))


def _plan(fused: Any = None, direct_ok: bool = False, stages: Any = (), host: Any = (),
          loops: Optional[dict[str, str]] = None, capacity: int = 64, refused: str = "") -> Any:
    """A stand-in ``Plan``: ``loops`` maps each stack to the frame name of its loop; ``refused``: why
    its fused trace refused (empty: it never did)."""
    info = {k: SimpleNamespace(loop=lp) for k, lp in (loops or {}).items()}
    return SimpleNamespace(fused=fused, direct_ok=direct_ok, stages=list(stages), capacity=capacity, host=set(host),
                           stack_info=info, refused=refused)


def test_a_direct_plan_is_one_call_and_its_lane() -> None:
    """[Direct] A plan without stacks runs as one jitted call, the interpreter otherwise, and (unless
    the run may not take a lane) a repeated run is its lane; a plan with a fused stage is not
    Direct even where ``direct_ok``. Kills the Direct branch's mutants (kind, words, notes, the lane
    flag and its default) and the swapped test of ``plan.fused``."""
    call = Step("compiled call", "one jitted call: feeds and Variables in, fetches, the error word and live flags out "
                                 "(Direct)")
    lane = ("a repeated run of this signature is its lane: the same call, without the general path's checks",)
    assert plan_schedule(_plan(direct_ok=True), [64]) == RunSchedule("fast", (call,), (INTERPRETER,), lane)
    assert plan_schedule(_plan(direct_ok=True), [64], lane=False) == RunSchedule("fast", (call,), (INTERPRETER,))
    fused = plan_schedule(_plan(fused=object(), direct_ok=True), [64])
    assert fused.steps[0].what.startswith("the whole program in one call")


def test_the_fused_attempt_names_its_ladder_its_host_stacks_and_the_stages_after_it() -> None:
    """[fused] A plan with a fused stage: one call on the rung that holds the run, the host-memory
    stacks of its loops named once each, in order of name; otherwise the stages of its cut (a driven
    loop swapping a host stack, one keeping its stacks), then the interpreter; the lane note unless
    the run may not take one. Kills the fused branch's mutants, ``_host``'s and ``_stages``'."""
    stages = [_driven("cpu:0", "b", "s1"), _driven("cpu:0", "c", "k1")]
    plan = _plan(fused=object(), stages=stages, host={"s1", "s2", "s3"}, loops={"s1": "b", "s2": "a", "s3": "b",
                                                                              "k1": "c"}, capacity=32)
    fused = Step("compiled call", "the whole program in one call, every loop a lax loop, gradient stacks on the rung "
                                  "of the capacity ladder (32, 64 entries) that holds the run, those of loop(s) 'a', "
                                  "'b' in host memory (a copy at each push and pop)")
    staged = Step("staged", "when the stacks outgrow the largest rung: the stages in order", steps=(
        Step("driven loop", "loop 'b': at most 32 iterations per call, full stack chunks swapped to host memory"),
        Step("driven loop", "loop 'c': at most 32 iterations per call, full stack chunks kept on the device")))
    note = ("a repeated run of this signature calls the rung that held the last run directly (its lane)",)
    assert plan_schedule(plan, [32, 64]) == RunSchedule("fast", (fused,), (staged, INTERPRETER), note)
    assert plan_schedule(plan, [32, 64], lane=False) == RunSchedule("fast", (fused,), (staged, INTERPRETER))
    kept = plan_schedule(_plan(fused=object(), stages=stages, loops={"s1": "b", "k1": "c"}, capacity=32), [32])
    assert kept.steps[0].what == "the whole program in one call, every loop a lax loop, gradient stacks of 32 entries"
    assert [s.what.rsplit(" chunks ", 1)[1] for s in kept.otherwise[0].steps] == ["kept on the device"] * 2


def test_a_staged_plan_is_its_one_stage_or_its_stages_in_order() -> None:
    """[staged] A plan with neither a fused stage nor a Direct call: a single stage is the schedule's
    one step, two or more run as "the stages in order"; no lane note (its runs take the general
    path). Kills the last branch's mutants (the one-stage test, the staged step's words)."""
    one = _call("cpu:0", 1, _op("a/Sin"))
    assert plan_schedule(_plan(stages=[one]), [64]) == RunSchedule(
        "fast", (Step("compiled call", "segment 1 on cpu:0: a/Sin"),), (INTERPRETER,))
    assert plan_schedule(_plan(stages=[one], refused="why"), [64]).notes == (
        "the whole program as one call was refused when traced (why): the stages run instead",)
    two = [one, _driven("cpu:0", "w", "s")]
    assert plan_schedule(_plan(stages=two, host={"s"}, capacity=16), [16]) == RunSchedule("fast", (Step(
        "staged", "the stages in order", steps=(
            Step("compiled call", "segment 1 on cpu:0: a/Sin"),
            Step("driven loop", "loop 'w': at most 16 iterations per call, full stack chunks swapped to host "
                                "memory"))),),
        (INTERPRETER,))


def test_the_ladder_names_every_rung_up_to_twelve_and_the_last_one_right() -> None:
    """[ladder] One rung is "of N entries"; two to twelve are each named; from thirteen, the first
    three, the last and the count. Kills ``_rungs``' mutants at the bounds (two rungs, twelve,
    thirteen) and at the last rung's index."""
    assert _rungs([7]) == "of 7 entries"
    assert _rungs([7, 9]) == "on the rung of the capacity ladder (7, 9 entries) that holds the run"
    twelve = list(range(1, 13))
    assert _rungs(twelve) == ("on the rung of the capacity ladder (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 entries) "
                              "that holds the run")
    assert _rungs([*twelve, 99]) == "on the rung of the capacity ladder (1, 2, 3, ..., 99 entries: 13 rungs) that " \
                                    "holds the run"


def test_a_compiled_segment_counts_the_loops_it_compiles_whole() -> None:
    """[compiled call] A segment's step is its description, on its device, with the number of loops
    compiled whole inside it where there are any. Kills the compiled-call mutants (the loop count,
    its words, the device label)."""
    got = cut_steps([_call("cpu:1", 4, _op("x/Mul"), _loop("f", "l1"), _loop("f", "l2")), _call("cpu:2", 5, _op("y"))],
                    8, lambda k: False, _dev)
    assert got == (Step("compiled call", "segment 4 on cpu:1: x/Mul (+2 more), 2 loop(s) compiled whole", "<cpu:1>"),
                   Step("compiled call", "segment 5 on cpu:2: y", "<cpu:2>"))
    (one,) = cut_steps([_call("cpu:0", 2, _loop("f", "l1"))], 8, lambda k: False)
    assert one == Step("compiled call", "segment 2 on cpu:0: l1/Enter, 1 loop(s) compiled whole")


def test_a_driven_loop_swaps_where_any_of_its_stacks_swaps() -> None:
    """[driven loop] A driven loop runs at most ``capacity`` iterations per call on its device; its
    full chunks go to host memory where any stack it pushes swaps, else stay on the device. Kills
    the driven-loop mutants (the test of ``swaps``, its words, the loop's name, the device label)."""
    got = cut_steps([_driven("cpu:1", "w", "k", "s"), _driven("cpu:2", "v", "k")], 5, lambda k: k == "s", _dev)
    assert got == (
        Step("driven loop", "loop 'w': at most 5 iterations per call, full stack chunks swapped to host memory",
             "<cpu:1>"),
        Step("driven loop", "loop 'v': at most 5 iterations per call, full stack chunks kept on the device", "<cpu:2>"))


def test_a_host_cond_runs_its_true_branch_then_its_false_branch_each_step_on_its_device() -> None:
    """[host cond] A cond across devices: the host reads the predicate, then runs one branch, True
    listed first, each branch's steps with the same capacity, swaps and device labels as the cut's
    own. Kills the host cond's mutants (the branch order, each argument passed down, the words)."""
    cond = cut.HostCond(SimpleNamespace(pred=SimpleNamespace(name="Greater:0")),  # type: ignore[arg-type]
                        {True: [_driven("cpu:1", "t", "s")], False: [_call("cpu:2", 3, _op("f/Cos"))]})
    assert cut_steps([cond], 6, lambda k: k == "s", _dev) == (Step("host cond", "predicate Greater:0", steps=(
        Step("staged", "branch True", steps=(Step(
            "driven loop", "loop 't': at most 6 iterations per call, full stack chunks swapped to host memory",
            "<cpu:1>"),)),
        Step("staged", "branch False", steps=(Step("compiled call", "segment 3 on cpu:2: f/Cos", "<cpu:2>"),)))),)


def test_a_host_loop_lists_its_parts_on_its_home_device_over_the_devices_it_spans() -> None:
    """[host loop] A loop across devices: on its home device, over each device it spans (in order),
    its header, body and exit side as staged parts (an empty part left out), each part's steps cut
    with the same capacity, swaps and device labels. Kills the host loop's mutants (the part names,
    each argument passed down, the loop's name, the devices and the home label)."""
    loop = cut.HostLoop(_loop("outer", "mid", "inner"), header=[_call("cpu:0", 1, _op("h/Less"))],
                        body=[_driven("cpu:1", "nested", "s"), _call("cpu:2", 2, _op("b/Add"))],
                        exit_side=[_call("cpu:0", 3, _op("e/Exit"))], devices=["cpu:0", "cpu:1", "cpu:2"], home="cpu:1")
    staged = Step("staged", "body", steps=(
        Step("driven loop", "loop 'nested': at most 9 iterations per call, full stack chunks swapped to host memory",
             "<cpu:1>"),
        Step("compiled call", "segment 2 on cpu:2: b/Add", "<cpu:2>")))
    assert cut_steps([loop], 9, lambda k: k == "s", _dev) == (Step(
        "host loop", "loop 'inner' over <cpu:0>, <cpu:1>, <cpu:2>", "<cpu:1>", (
            Step("staged", "header", steps=(Step("compiled call", "segment 1 on cpu:0: h/Less", "<cpu:0>"),)),
            staged,
            Step("staged", "exit", steps=(Step("compiled call", "segment 3 on cpu:0: e/Exit", "<cpu:0>"),)))),)
    loop.exit_side, loop.header = [], []
    (got,) = cut_steps([loop], 9, lambda k: k == "s", _dev)
    assert got.steps == (staged,)
    (plain,) = cut_steps([loop], 9, lambda k: k == "s")
    assert plain.what == "loop 'inner' over None, None, None" and plain.device is None
