"""``Session.explain``: how a run will execute, as a value, on every backend, without running it.

Why tested apart from the routes: the schedule is read from the plan a run takes, so it must name
the route the run then takes (checked against the run's own statistics), and making it must compile
nothing and change nothing a later run does.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import numpy as np
import pytest
from graphs import batch_loop, power_loop, recomputed_tanh_loop, vector_loop_round_robin

import turnout as tn
from turnout.run_schedule import INTERPRETER_STEP, STEP_KINDS, RunSchedule, Step

pytest.importorskip("jax")

DEVICES = ["cpu:0", "cpu:1", "cpu:2"]


def _loop_with_gradient() -> tuple[tn.Graph, list[tn.Tensor], dict[tn.Tensor, object], dict[str, str]]:
    """``graphs.power_loop`` with its nodes requested round robin over three devices."""
    p = power_loop()
    req = {node.name: DEVICES[k % len(DEVICES)] for k, node in enumerate(p.g.nodes)}
    return p.g, [p.y, p.dx], {p.x: 1.5, p.n: 5}, req


def test_the_reference_interpreter_explains_itself_in_one_step() -> None:
    g, fetches, feeds, _ = _loop_with_gradient()
    got = tn.Session(g).explain(fetches, feeds)
    assert isinstance(got, RunSchedule) and got.kinds() == {"interpreter"}
    assert str(got).splitlines()[:2] == ["backend 'reference':", f"  interpreter: {INTERPRETER_STEP}"]


def test_fast_backend_names_the_fused_attempt_its_ladder_and_the_staged_path() -> None:
    g, fetches, feeds, _ = _loop_with_gradient()
    sess = tn.Session(g, backend="fast")
    got = sess.explain(fetches, feeds)
    assert sess.backend.compile_count == 0  # planning only: nothing compiled
    assert [s.kind for s in got.steps] == ["compiled call"]
    assert "(128, 160, 200, 250, 313, 392, 490, 613, 767, 959, 1024 entries)" in got.steps[0].what
    staged = got.otherwise[0]
    assert staged.kind == "staged"
    assert [s.kind for s in staged.steps].count("driven loop") == 2  # the forward loop and its gradient
    sess.run(fetches, feeds)
    assert sess.last_result.stats["fused"]  # the route the schedule put first
    assert sess.explain(fetches, feeds) == got  # explaining changes nothing, and neither did the run


@pytest.mark.parametrize("swap", [False, True])
def test_the_fast_schedule_says_where_each_loops_stacks_go(swap: bool) -> None:
    """A swapping loop's stacks: in host memory in the fused call, whose ladder then goes on to
    ``host_stack_limit`` (said in short), and swapped chunk by chunk on the staged path; a loop that
    does not swap keeps them on the device in both. The gradient loop pushes nothing: its chunks stay."""
    p = power_loop(swap_memory=swap)
    got = tn.Session(p.g, backend="fast").explain([p.y, p.dx], {p.x: 1.5, p.n: 5})
    assert got.backend == "fast"
    fused = got.steps[0].what
    assert ("host memory" in fused) == swap
    assert ("those of loop(s) 'while' in host memory (a copy at each push and pop)" in fused) == swap
    limit = tn.FastOptions().host_stack_limit
    assert (f"(128, 160, 200, ..., {limit} entries: 42 rungs)" if swap else "959, 1024 entries)") in fused
    forward, backward = [st.what for st in got.otherwise[0].steps if st.kind == "driven loop"]
    assert forward.endswith("chunks swapped to host memory" if swap else "chunks kept on the device")
    assert backward.endswith("full stack chunks kept on the device") and "at most 1024 iterations per call" in backward
    assert got.otherwise[-1] == Step("interpreter", "the reference interpreter, if tracing finds an op the compiler "
                                                    "refuses")
    assert got.notes == ("a repeated run of this signature calls the rung that held the last run directly (its lane)",)


def test_a_plan_whose_fused_stage_was_dropped_is_explained_as_its_stages() -> None:
    """A fused trace that refused for a reason no capacity changes drops the fused stage for good
    (``FusedAttempts._run_fused_sized``): the schedule is then the stages in order."""
    p = power_loop(swap_memory=True)
    sess = tn.Session(p.g, backend="fast")
    feeds = {p.x: 1.5, p.n: 5}
    sess.explain([p.y, p.dx], feeds)
    (plan,) = sess.backend._plans.values()
    plan.fused = None
    got = sess.explain([p.y, p.dx], feeds)
    (staged,) = got.steps
    assert staged == Step("staged", "the stages in order", steps=staged.steps)
    assert got.otherwise[-1].kind == "interpreter"
    assert [st.kind for st in staged.steps].count("driven loop") == 2
    assert "swapped to host memory" in staged.steps[1].what


def test_a_program_without_stacks_is_one_direct_call_and_the_run_takes_it() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        y = tn.reduce_sum(tn.tanh(x))
    sess = tn.Session(g, backend="fast")
    got = sess.explain(y, {x: np.ones(3, np.float32)})
    assert [s.kind for s in got.steps] == ["compiled call"] and "Direct" in got.steps[0].what
    assert got.backend == "fast" and "is its lane" in got.notes[0]
    sess.run(y, {x: np.ones(3, np.float32)})
    assert sess.last_result.stats["stages"] == 1 and not sess.last_result.stats["fused"]


def test_a_program_that_fell_back_is_explained_as_the_interpreter_with_the_reason() -> None:
    """A loop variable that grows each iteration, for as many iterations as its fed values decide, is
    refused while tracing, not while planning: before the first run the schedule says the
    interpreter runs *otherwise*; after it, that it runs, and why."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        c = tn.placeholder(tn.float32, [], name="c")
        _, x = tn.while_loop(lambda i, x: tn.reduce_sum(x) < 10.0,
                             lambda i, x: (i + 1, tn.concat([x, tn.fill(tn.stack([n]), c)], 0)),
                             [tn.constant(0), tn.zeros([0])], shape_invariants=[[], [None]])
        y = tn.reduce_sum(x)
    sess = tn.Session(g, backend="fast")
    feeds = {n: 3, c: 2.0}
    before = sess.explain(y, feeds)
    assert before.steps[0].kind == "compiled call" and before.otherwise[-1].kind == "interpreter"
    with pytest.warns(RuntimeWarning, match="reference interpreter"):
        sess.run(y, feeds)
    after = sess.explain(y, feeds)
    assert after.kinds() == {"interpreter"} and after.backend == "fast"
    assert after.steps[0].what == f"the reference interpreter (fallback: {sess.last_result.stats['fallback_reason']})"


def test_partitioned_fast_backend_explains_each_tier_and_the_run_takes_it() -> None:
    g, fetches, feeds, req = _loop_with_gradient()
    never = tn.Session(g, backend="fast", devices=DEVICES, requests=req, whole_program="never")
    got = never.explain(fetches, feeds)
    assert "host loop" in got.kinds() and {s.device for s in got.walk()} >= {"cpu:0", "cpu:1", "cpu:2"}
    never.run(fetches, feeds)
    assert never.last_result.stats["tier"] == "host-driven"
    spmd = tn.Session(g, backend="fast", devices=DEVICES, requests=req, whole_program="always")
    got = spmd.explain(fetches, feeds)
    assert got.steps[0].kind == "spmd program" and "host loop" in {s.kind for o in got.otherwise for s in o.walk()}
    spmd.run(fetches, feeds)
    assert spmd.last_result.stats["tier"] == "spmd"
    one = tn.Session(g, backend="fast", devices=["cpu:1"])
    got = one.explain(fetches, feeds)
    assert got.steps[0].kind == "one device" and got.steps[0].device == "cpu:1"
    assert "driven loop" in got.kinds()


def test_the_host_driven_tier_prints_each_loop_with_its_parts_and_devices() -> None:
    """The host-driven schedule as a tree: each host loop on its home device, over the devices it
    spans, with its header and body (no exit side where nothing follows the loop there) as the
    compiled calls of each part, each on its device, in the order they run."""
    g, fetches, feeds, req = _loop_with_gradient()
    got = tn.Session(g, backend="fast", devices=DEVICES, requests=req, whole_program="never").explain(fetches, feeds)
    lines = str(got).splitlines()
    loops = [k for k, line in enumerate(lines) if "host loop" in line]
    assert [lines[k] for k in loops] == [
        "  host loop [cpu:1]: loop 'while/frame0' over cpu:0, cpu:1, cpu:2",
        "  host loop [cpu:0]: loop 'gradients/while/frame1' over cpu:0, cpu:1, cpu:2"]
    forward = lines[loops[0] + 1:loops[1]]
    assert forward[:2] == ["    staged: header",
                           "      compiled call [cpu:0]: segment 3 on cpu:0: while/cond/Less"]
    assert forward[2] == "    staged: body" and "staged: exit" not in str(got)
    assert [line.split(":")[0].strip() for line in forward[3:8]] == ["compiled call [cpu"] * 5
    assert [line[len("      compiled call "):][:7] for line in forward[3:8]] == [
        "[cpu:0]", "[cpu:2]", "[cpu:1]", "[cpu:0]", "[cpu:2]"]
    assert forward[8] == "  compiled call [cpu:2]: segment 9 on cpu:2: while/gradient_sync/trip_count (+1 more)"


def test_the_spmd_tier_says_why_it_declined() -> None:
    """``whole_program="always"`` on a program the SPMD tier refuses (a gradient stack of values whose
    shape the graph does not know: each device allocates its stacks before the program runs): the
    schedule and the run's statistics both carry the reason, instead of the run silently taking the
    per-device tiers."""
    g, p, req = vector_loop_round_robin(DEVICES)
    y, dx, x, n = p.y, p.dx, p.x, p.n
    fetches, feeds = [y, dx], {x: np.array([0.5, -0.25]), n: 5}
    sess = tn.Session(g, backend="fast", devices=DEVICES, requests=req, whole_program="always")
    got = sess.explain(fetches, feeds)
    assert any("declined" in note and "run-time shape" in note for note in got.notes), got.notes
    np.testing.assert_allclose(sess.run(fetches, feeds), tn.Session(g).run(fetches, feeds))
    assert "run-time shape" in sess.last_result.stats["whole_program_declined"]


def test_partitioned_reference_explains_its_partitions() -> None:
    g, fetches, feeds, req = _loop_with_gradient()
    got = tn.Session(g, devices=DEVICES, requests=req).explain(fetches, feeds)
    assert [s.kind for s in got.steps] == ["partition"] * 3
    assert all("Send" in s.what for s in got.steps)


@pytest.mark.parametrize("devices", [None, DEVICES], ids=["one device", "partitioned"])
def test_the_interpreters_say_how_many_checkpoint_slots_the_next_run_gives(devices: Any) -> None:
    """The reference interpreter, one device or partitioned, explains what it sizes
    (``turnout.slot_sizes``): a recomputed loop gets a first run's 64 of the 1000 slots its budget
    holds, then what an earlier run needed, learnt; a budget that holds fewer than the first
    capacity gives them all, and says nothing of learning."""
    for budget, first, then in ((1000 * 24, "keeps at most 64 checkpoint slots of the 1000 its memory_budget holds "
                                 "(a first run's 64;", "keeps at most 128 checkpoint slots of the 1000 its "
                                 "memory_budget holds (learnt from an earlier run's trip count;"),
                                (10 * 24, "keeps at most 10 checkpoint slots of the 10 its memory_budget holds",
                                 "keeps at most 10 checkpoint slots of the 10 its memory_budget holds")):
        g, x, gx = recomputed_tanh_loop(70, slots=budget // 24)
        sess = tn.Session(g, **({"devices": devices} if devices else {}))
        feeds = {x: np.ones(4, np.float32)}
        for want in (first, then):
            notes = [n for n in sess.explain(gx, feeds).notes if "checkpoint slots" in n]
            assert len(notes) == 1 and want in notes[0] and ("(" in notes[0]) == (budget > 10 * 24), notes
            sess.run(gx, feeds)


def test_explain_checks_its_arguments_as_run_does() -> None:
    g, fetches, feeds, _ = _loop_with_gradient()
    sess = tn.Session(g, backend="fast")
    with pytest.raises(tn.GraphBuildError):
        sess.explain([object()], feeds)
    with pytest.raises(tn.FeedError):
        sess.explain(fetches, {"nothing:0": 1.0})
    with pytest.raises(tn.FeedError):
        sess.explain(fetches, [1, 2])  # type: ignore[arg-type]


def test_steps_print_as_an_indented_tree_and_refuse_unknown_kinds() -> None:
    s = RunSchedule("fast", (Step("staged", "outer", steps=(Step("compiled call", "inner", "cpu:0"),)),),
                    notes=("n",))
    assert str(s).splitlines() == ["backend 'fast':", "  staged: outer", "    compiled call [cpu:0]: inner",
                                   "  note: n"]
    assert set(STEP_KINDS) >= s.kinds()
    with pytest.raises(tn.ArgumentError):
        Step("teleport", "x")


def test_the_fast_schedules_words() -> None:
    """What the one-device schedule says, word for word, of its usual plans: the ``Direct`` call and
    its lane, the fused attempt on the ladder's rungs (or on one rung where the ladder is off), the
    staged path after it, and the lane of a plan with stacks."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        y = tn.reduce_sum(tn.tanh(x))
    got = tn.Session(g, backend="fast").explain(y, {x: np.ones(3, np.float32)})
    assert got.backend == "fast" and got.steps == (Step(
        "compiled call", "one jitted call: feeds and Variables in, fetches, the error word and live flags out "
        "(Direct)"),)
    assert got.notes == ("a repeated run of this signature is its lane: the same call, without the general "
                         "path's checks",)
    p = power_loop()
    for options, rungs in (({}, "on the rung of the capacity ladder (128, 160, 200, 250, 313, 392, 490, 613, 767, "
                                "959, 1024 entries) that holds the run"),
                           ({"stack_ladder": False}, "of 1024 entries")):
        got = tn.Session(p.g, backend="fast", **options).explain([p.y, p.dx], {p.x: 1.5, p.n: 5})
        assert got.steps[0].what == ("the whole program in one call, every loop a lax loop, gradient stacks "
                                     + rungs)
        assert got.otherwise[0].what == "when the stacks outgrow the largest rung: the stages in order"
        assert got.backend == "fast"


def test_the_ladder_is_written_out_up_to_twelve_rungs_and_in_short_beyond() -> None:
    """Twelve rungs are still read at a glance; from thirteen the schedule names the first three, the
    last and the count, so a host-memory ladder of forty rungs stays one line."""
    from turnout.fast.explain import _rungs

    twelve = [10 * (k + 1) for k in range(12)]
    assert _rungs(twelve) == ("on the rung of the capacity ladder (10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, "
                              "120 entries) that holds the run")
    assert _rungs([*twelve, 130]) == "on the rung of the capacity ladder (10, 20, 30, ..., 130 entries: 13 rungs) " \
                                     "that holds the run"
    assert _rungs([64]) == "of 64 entries"


def test_two_swapping_loops_are_named_in_order_beside_one_that_keeps_its_stacks() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        _, a = tn.while_loop(lambda i, v: i < 3, lambda i, v: [i + 1, v * x], [tn.constant(0), x],
                             swap_memory=True, name="second")
        _, b = tn.while_loop(lambda i, v: i < 2, lambda i, v: [i + 1, tn.sin(v)], [tn.constant(0), a],
                             swap_memory=True, name="first")
        _, c = tn.while_loop(lambda i, v: i < 2, lambda i, v: [i + 1, tn.cos(v)], [tn.constant(0), b], name="kept")
        dx = tn.gradients(c, [x])[0]
    got = tn.Session(g, backend="fast").explain([c, dx], {x: 1.1})
    assert got.steps[0].what.endswith(", those of loop(s) 'first', 'second' in host memory (a copy at each push "
                                      "and pop)")
    driven = {st.what.split(":")[0]: st.what.split(", full stack chunks ")[1]
              for st in got.otherwise[0].steps if st.kind == "driven loop"}
    assert driven == {"loop 'second/frame0'": "swapped to host memory", "loop 'first/frame1'": "swapped to host memory",
                      "loop 'kept/frame2'": "kept on the device",
                      **{f"loop 'gradients/{n}'": "kept on the device" for n in ("kept/frame3", "first/frame4",
                                                                                   "second/frame5")}}


def test_a_cond_across_devices_is_a_host_cond_with_its_branches_in_order() -> None:
    """A cond whose nodes span devices: the host reads the predicate, then runs the true branch's
    calls or the false branch's, each on its device; the schedule says so as a tree."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        z = tn.cond(x > 0, lambda: tn.sin(x) * 2.0, lambda: tn.cos(x) + 1.0) * 3.0
    req = {n.name: DEVICES[k % 3] for k, n in enumerate(g.nodes)}
    sess = tn.Session(g, backend="fast", devices=DEVICES, requests=req, whole_program="never")
    lines = str(sess.explain(z, {x: 1.0})).splitlines()
    at = lines.index("  host cond: predicate Greater:0")
    assert lines[at + 1:at + 9] == [
        "    staged: branch True",
        "      compiled call [cpu:1]: segment 6 on cpu:1: cond/pivot_t (+1 more)",
        "      compiled call [cpu:0]: segment 7 on cpu:0: cond/true/Sin",
        "      compiled call [cpu:2]: segment 8 on cpu:2: cond/true/Mul",
        "    staged: branch False",
        "      compiled call [cpu:0]: segment 3 on cpu:0: cond/pivot_f (+1 more)",
        "      compiled call [cpu:2]: segment 4 on cpu:2: cond/false/Cos",
        "      compiled call [cpu:1]: segment 5 on cpu:1: cond/false/Add"]
    for v in (1.0, -1.0):
        np.testing.assert_allclose(sess.run(z, {x: v}), tn.Session(g).run(z, {x: v}), rtol=1e-6)


@pytest.mark.parametrize("swap", [False, True])
def test_a_loop_on_one_device_is_driven_there(swap: bool) -> None:
    """A forward loop whose frame sits on one device, beside its gradient loop on another: the loop is
    driven on its device, its full chunks swapped to host memory where it asks, and the gradient loop,
    which spans both (it pops the forward loop's stacks), is a host loop on its own device."""
    p = power_loop(swap_memory=swap)

    def device(n: tn.Node) -> str:
        return "cpu:0" if n.op == "Placeholder" else \
            "cpu:2" if n.name.startswith(("gradients/while", "gradients/Ones")) else "cpu:1"
    sess = tn.Session(p.g, backend="fast", devices=DEVICES, requests={n.name: device(n) for n in p.g.nodes},
                      whole_program="never")
    got = sess.explain([p.y, p.dx], {p.x: 1.5, p.n: 5})
    driven = [st for st in got.steps if st.kind == "driven loop"]
    assert driven == [Step("driven loop", "loop 'while/frame0': at most 1024 iterations per call, full stack chunks "
                           + ("swapped to host memory" if swap else "kept on the device"), "cpu:1")]
    (host,) = [st for st in got.steps if st.kind == "host loop"]
    assert host.what == "loop 'gradients/while/frame1' over cpu:1, cpu:2" and host.device == "cpu:2"
    np.testing.assert_allclose(sess.run([p.y, p.dx], {p.x: 1.5, p.n: 5}), [7.59375, 25.3125])


@pytest.mark.parametrize("rows", [None, 2])
def test_a_plan_whose_fused_trace_refused_says_why_its_stages_run(rows: Optional[int]) -> None:
    """A loop of a constant 200 iterations with a stack chunk of 128: its counted stacks are longer
    than every rung, so the fused trace refuses (``RungTooSmall``) and the run takes the stages. The
    schedule of the next run is the stages, with a note that says why the one call was dropped; a
    plan never refused has no such note. On a batch of ``None`` rows the trace that refuses is the
    one that learns the stacks' shapes; on a batch of 2, the call's own."""
    g, x, w, loss, gx, gw = batch_loop(3, 200, rows)
    feeds = {x: np.full((2, 3), 0.4, np.float32), w: np.eye(3, dtype=np.float32) * 0.8}
    sess = tn.Session(g, backend="fast", stack_chunk=128)
    before = sess.explain([loss, gx, gw], feeds)
    assert before.steps[0].kind == "compiled call" and before.notes == (
        "a repeated run of this signature calls the rung that held the last run directly (its lane)",)
    sess.run([loss, gx, gw], feeds)
    assert not sess.last_result.stats["fused"]
    after = sess.explain([loss, gx, gw], feeds)
    assert after.steps[0].kind == "staged" and len(after.notes) == 1
    assert re.fullmatch(r"the whole program as one call was refused when traced \(stack:\d+: 200 entries for a "
                        r"capacity of 128\): the stages run instead", after.notes[0]), after.notes
