"""The compiled partition executor (``partition_executor="fast"``): a task's partitions with fused groups.

Every run is compared with the unpartitioned reference run of the same graph (T7): generated programs
under random placements over two tasks of two devices, their gradients, and closed-form cases for what
the groups must keep: deadness per member, the reference's kernel errors, the convexity that keeps
fusing from adding a deadlock, and programs that cannot be compiled. The tasks run in threads of this
process (``cluster_programs.run_in_process``); the Ray runs live in ``test_ray.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from cluster_programs import SPEC, cond_across_tasks, dev, fetched, loop_across_tasks, run_in_process
from hypothesis import given, settings
from hypothesis import strategies as st
from programs import assert_same_outcome, build, to_source
from strategies import gradient_cases, programs_with_inputs

import turnout as tn
from turnout.devices import check_partitions, partition, place
from turnout.devices.compiled_partition import fused_groups, fusible, prepare
from turnout.devices.task_runner import TaskOutcome
from turnout.errors import RecvTimeoutError, TaskFailedError
from turnout.session import RunOptions

#: examples per T7 test: a quarter of the profile's (each example starts two task runners)
EXAMPLES = max(10, settings.default.max_examples // 4)
# max_firings stays at its default, which compiled code accepts (a budget would send every partition
# to the interpreter with fused groups, never to the whole-program tier)
GUARD = dict(max_iterations=1_000)


def run_tasks(g: tn.Graph, fetches: list[tn.Tensor], feeds: dict[tn.Tensor, Any], executor: str = "fast",
              requests: dict[str, str] | None = None, options: RunOptions | None = None) -> list[Any]:
    """The fetched values of a run over the two tasks, or the error a task raised (the root cause, not
    the failure it caused in its peer)."""
    out = run_in_process(g, fetches, feeds, executor=executor, requests=requests, options=options or RunOptions())
    errors = [o for o in out.values() if isinstance(o, BaseException)]
    if errors:
        errors.sort(key=lambda e: isinstance(e, (TaskFailedError, RecvTimeoutError)))
        raise errors[0]
    values = fetched(out)
    for t, v in zip(fetches, values, strict=True):
        if v is None:
            raise tn.DeadFetchError(f"fetched tensor {t.name} is dead")
    return values


def stats_of(out: dict[str, Any]) -> dict[str, int]:
    total: dict[str, int] = {}
    for o in out.values():
        assert isinstance(o, TaskOutcome), o
        for per in (o.executor_stats or {}).values():
            for k, v in per.items():
                total[k] = total.get(k, 0) + v
    return total


def _random_requests(graph: tn.Graph, data: st.DataObject) -> dict[str, str]:
    devices = SPEC.devices
    idx = data.draw(st.lists(st.integers(0, len(devices) - 1), min_size=len(graph.nodes),
                             max_size=len(graph.nodes)), label="placement")
    return {n.name: devices[i] for n, i in zip(graph.nodes, idx)}


def _check(graph: tn.Graph, fetches: list[tn.Tensor], feeds: dict[tn.Tensor, Any], data: st.DataObject,
           what: str, alone: bool = False) -> None:
    """T7 under a random placement; with ``alone``, every node on one device (drawn), so that device's
    partition talks to no other and runs whole on the fast backend."""
    if alone:
        device = data.draw(st.sampled_from(SPEC.devices), label="the one device")
        requests = {n.name: device for n in graph.nodes}
    else:
        requests = _random_requests(graph, data)
    scheduler = data.draw(st.sampled_from(("fifo", "lifo", "random")), label="scheduler")
    assert_same_outcome(lambda: tn.Session(graph).run(fetches, feeds, options=RunOptions(**GUARD)),
                        lambda: run_tasks(graph, fetches, feeds, requests=requests,
                                          options=RunOptions(scheduler, 7, **GUARD)),
                        what + "compiled partitions over two tasks")


# ---- T7: generated programs ---------------------------------------------------------------------------
@settings(max_examples=EXAMPLES, deadline=None)
@given(programs_with_inputs(loops=True), st.data())
def test_T7_compiled_partitions_equal_the_reference(pi: tuple[Any, dict[str, Any]], data: st.DataObject) -> None:
    p, inputs = pi
    b = build(p)
    _check(b.graph, b.fetches, b.feed_dict(inputs), data, to_source(p) + "\n")


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.data())
def test_T7_compiled_partitions_of_gradient_programs(data: st.DataObject) -> None:
    case = data.draw(gradient_cases())
    _check(case.graph, case.grads, case.feeds, data, to_source(case.program) + "\n")


@settings(max_examples=EXAMPLES, deadline=None)
@given(programs_with_inputs(loops=True), st.data())
def test_T7_a_partition_that_talks_to_no_other_runs_whole(pi: tuple[Any, dict[str, Any]],
                                                           data: st.DataObject) -> None:
    p, inputs = pi
    b = build(p)
    _check(b.graph, b.fetches, b.feed_dict(inputs), data, to_source(p) + "\n", alone=True)


# ---- closed-form cases -------------------------------------------------------------------------------
def _cell_across_tasks(n: int = 6, loop: str = dev(0, 0), body_on: str = dev(1, 0)) -> tuple[tn.Graph, tn.Tensor,
                                                                                             tn.Tensor]:
    """A loop on task 0 whose body's arithmetic (a small recurrent cell) runs on task 1 (or wherever
    ``loop`` and ``body_on`` say)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[2, 3], name="x")
        w = tn.constant(np.linspace(-0.5, 0.5, 9, dtype=np.float32).reshape(3, 3))

        def body(i: tn.Tensor, h: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device(body_on):
                a = tn.matmul(h, w) + x
                h2 = tn.tanh(a) * tn.sigmoid(a - 0.5) + 0.1 * h
            return i + 1, h2

        with tn.device(loop):
            _, h = tn.while_loop(lambda i, h: i < n, body, [tn.constant(0), x], name="cell")
    return g, x, h


def test_a_loop_body_on_another_task_runs_as_one_compiled_call_per_iteration() -> None:
    g, x, h = _cell_across_tasks(6)
    value = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
    want = tn.Session(g).run(h, {x: value})
    out = run_in_process(g, [h], {x: value}, executor="fast")
    np.testing.assert_allclose(fetched(out)[0], want, rtol=1e-6)
    body = out["/job:worker/task:1"].executor_stats[dev(1, 0)]
    # the body's matmul, add, tanh, sub, sigmoid, muls and add, and its constants 0.5 and 0.1 (which fire
    # at every iteration, under the loop's control): one group on task 1, one call per iteration
    assert body["groups"] == 1 and body["fused_ops"] == 10 and body["compiled_calls"] == 6
    s = stats_of(out)  # with task 0's groups: the loop test (Const, Less) and the counter's updates
    assert s["compiles"] == s["groups"] and s["interpreted_calls"] == 0 and s["check_reruns"] == 0
    # the loop test runs 7 times, live; every other group runs 6 times live, and once dead after the
    # last test (no kernel runs then)
    assert s["compiled_calls"] == 7 + 6 * (s["groups"] - 1) and s["dead_calls"] == s["groups"] - 1
    # fewer firings than the reference interpreter, which fires every op
    ref = run_in_process(g, [h], {x: value}, executor="reference")
    firings = {t: sum(o.firings.values()) for t, o in out.items()}
    assert firings == {t: sum(o.firings.values()) for t, o in ref.items()}, "a group counts one firing per member"


@pytest.mark.parametrize("value", [2.0, -2.0])
def test_an_untaken_branch_is_dead_member_by_member(value: float) -> None:
    g, x, out = cond_across_tasks()
    want = tn.Session(g).run(out, {x: value})
    got = run_in_process(g, [out], {x: value}, executor="fast")
    np.testing.assert_allclose(fetched(got), [want], rtol=1e-6)


def test_a_group_with_one_dead_input_keeps_its_live_members_live() -> None:
    """Two chains fused into one group (joined by a third op) where only one chain's input is dead: the
    other chain's member is live and fetched, computed on the reference kernels."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        with tn.device(dev(0)):
            f, t = tn.raw.switch(x, x > 0.0)
        with tn.device(dev(1)):
            live = (x + 1.0) * 2.0
            dead_side = (t - 1.0) * 3.0
            joined = tn.add(live, dead_side, name="joined")
    gr = tn.Session(g)
    want = gr.run(live, {x: -1.0})
    out = run_in_process(g, [live], {x: -1.0}, executor="fast")
    np.testing.assert_allclose(fetched(out), [want])
    with pytest.raises(tn.DeadFetchError):
        run_tasks(g, [joined], {x: -1.0})
    np.testing.assert_allclose(run_tasks(g, [joined], {x: 2.0}), gr.run([joined], {x: 2.0}), rtol=1e-6)


def test_a_kernel_error_inside_a_group_is_the_reference_error_naming_the_op() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, shape=[], name="x")
        with tn.device(dev(0)):
            x1 = x * 1  # computed on task 0: task 1's partition receives it, so it runs with fused groups
        with tn.device(dev(1)):
            y = tn.divide(x1 + 1, x1 - 3, name="divide") * 2 + 1
    with pytest.raises(tn.KernelError) as ref:
        tn.Session(g).run(y, {x: 3})
    with pytest.raises(tn.KernelError) as got:
        run_tasks(g, [y], {x: 3})
    assert "divide" in str(got.value) and str(got.value) == str(ref.value)
    assert run_tasks(g, [y], {x: 5}) == tn.Session(g).run([y], {x: 5})


def test_a_group_whose_checks_hold_runs_compiled() -> None:
    """A group with a check decided at run time (an integer division's divisor) runs as its compiled
    call while the check holds, its error word 0 (no interpreted call, no rerun); where it fails,
    the call's word says so and the group runs again on the reference kernels, which raise."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, shape=[], name="x")
        with tn.device(dev(0)):
            x1 = x * 1
        with tn.device(dev(1)):
            y = tn.divide(x1 + 1, x1 - 3, name="divide") * 2 + 1
    out = run_in_process(g, [y], {x: 5}, executor="fast", options=RunOptions())
    assert fetched(out) == tn.Session(g).run([y], {x: 5})
    s = stats_of(out)
    assert s["compiled_calls"] > 0 and s["interpreted_calls"] == 0 and s["check_reruns"] == 0, s
    out = run_in_process(g, [y], {x: 3}, executor="fast", options=RunOptions())
    assert any(isinstance(o, tn.KernelError) for o in out.values())


def test_shapes_the_rule_refuses_in_a_group_fail_as_on_the_reference() -> None:
    """A fused group meets a ``matmul`` of two vectors (shapes unknown when built): the group's
    checks fail and its members run on the reference kernels, which raise the shape rule's error
    (``shape_rules.concrete_shape_error``), not XLA's dot product."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, None, name="x")
        with tn.device(dev(0)):
            x1 = x * 1.0
        with tn.device(dev(1)):
            y = tn.matmul(x1 + 1.0, x1 - 1.0, name="mm") * 2.0
    with pytest.raises(tn.KernelError) as ref:
        tn.Session(g).run(y, {x: np.ones(3, np.float32)})
    with pytest.raises(tn.KernelError) as got:
        run_tasks(g, [y], {x: np.ones(3, np.float32)})
    assert "operands must be matrices" in str(got.value) and str(got.value) == str(ref.value)
    np.testing.assert_allclose(run_tasks(g, [y], {x: np.ones((2, 2), np.float32)}),
                               tn.Session(g).run([y], {x: np.ones((2, 2), np.float32)}))


def test_a_group_that_cannot_be_compiled_runs_on_the_reference_kernels() -> None:
    """A fill whose shape is a run-time value: jax cannot trace it, the group is interpreted."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, shape=[], name="n")
        with tn.device(dev(0)):
            m = n * 1  # computed on task 0: task 1's partition receives it, so it runs with fused groups
        with tn.device(dev(1)):
            filled = tn.fill(tn.stack([m + 1, m]), 2.5) * 2.0
            y = tn.reduce_sum(filled) + 1.0
    want = tn.Session(g).run(y, {n: 3})
    out = run_in_process(g, [y], {n: 3}, executor="fast")
    np.testing.assert_allclose(fetched(out), [want])
    s = stats_of(out)
    assert s["interpreted_calls"] >= 1


def _plan_of(g: tn.Graph, fetches: list[tn.Tensor], device: str, requests: dict[str, str]) -> Any:
    parted = partition(g, place(g, SPEC.devices, requests), fetches, set())
    check_partitions(parted)
    return prepare(parted.partitions[device])


def test_groups_are_convex_so_fusing_adds_no_wait() -> None:
    """a -> (other device) -> c and a -> b -> c: a, b and c cannot be one group, or the group would wait
    for the other device, which waits for the group."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        with tn.device(dev(0)):
            a = tn.multiply(x, 2.0, name="a")
            b = tn.add(a, 1.0, name="b")
        with tn.device(dev(1)):
            far = tn.multiply(a, 3.0, name="far")
        with tn.device(dev(0)):
            c = tn.add(b, far, name="c")
            d = tn.multiply(c, c, name="d")
    prepared = _plan_of(g, [d], dev(0), {})
    groups = [{m.name for m in grp.members} for grp in prepared.groups]
    assert not any({"a", "c"} <= grp for grp in groups), groups
    assert any({"a", "b"} <= grp for grp in groups) and any({"c", "d"} <= grp for grp in groups), groups
    np.testing.assert_allclose(run_tasks(g, [d], {x: 1.5}), tn.Session(g).run([d], {x: 1.5}))


def test_only_pure_compute_ops_of_one_frame_are_fused() -> None:
    g, x, h = _cell_across_tasks(3)
    prepared = _plan_of(g, [h], dev(1, 0), {})
    frames = prepared.plan.frames.node_frame
    for grp in prepared.groups:
        assert all(fusible(m) for m in grp.members)
        assert len({frames[m.id] for m in grp.members}) == 1
        assert len(grp.members) >= 2
    assert not any(n.op in ("Sleep", "Merge", "Switch", "Send", "Recv", "Enter") for grp in prepared.groups
                   for n in grp.members)
    # every fusible node lies in at most one group
    seen = [m.id for grp in prepared.groups for m in grp.members]
    assert len(seen) == len(set(seen))
    assert fused_groups(prepared.plan, min_size=1)


def test_the_fast_kind_is_named_in_the_table_and_loaded_lazily() -> None:
    from turnout.devices.partition_executors import PARTITION_EXECUTORS, executor_kind

    assert isinstance(PARTITION_EXECUTORS["fast"], str)
    assert executor_kind("fast").name == "fast"


def test_a_loop_across_tasks_gives_the_reference_values_with_every_order() -> None:
    g, x, y = loop_across_tasks(12, parallel_iterations=4)
    want = tn.Session(g).run(y, {x: 2.0})
    for scheduler in ("fifo", "lifo", "random"):
        got = run_tasks(g, [y], {x: 2.0}, options=RunOptions(scheduler, 3))
        np.testing.assert_allclose(got, [want], rtol=1e-6)


def test_backend_fast_with_a_cluster_asks_for_the_fast_partition_executor() -> None:
    from turnout.session import _cluster_options

    assert _cluster_options("fast", {"cluster": SPEC})["partition_executor"] == "fast"
    assert _cluster_options("reference", {"cluster": SPEC}) == {"cluster": SPEC}
    with pytest.raises(tn.UnsupportedError, match="partition_executor='fast', not 'reference'"):
        _cluster_options("fast", {"cluster": SPEC, "partition_executor": "reference"})


def test_regression_a_fetched_tensor_that_its_group_also_reads_is_produced() -> None:
    """Found by the nightly T7 campaign (``v1 = reduce_sum(scan(...)); return v1, v1 + 0``): a root-frame
    output read only inside its group was not returned by the compiled function, so its fetch read as
    dead. In the root frame every member output is returned."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, shape=[3], name="x")
        with tn.device(dev(1)):
            total = tn.reduce_sum(x * 2, name="total")
            shifted = tn.add(total, 1, name="shifted")
    for fetches in ([total, shifted], [shifted, total], [total]):
        assert run_tasks(g, fetches, {x: [1, 2, 3]}) == tn.Session(g).run(fetches, {x: [1, 2, 3]})


# ---- a partition with no Send or Recv: one fast-backend program ---------------------------------------
def test_a_partition_alone_runs_as_one_fast_program_and_compiles_once() -> None:
    g, x, h = _cell_across_tasks(5, dev(1, 1), dev(1, 1))
    requests = {n.name: dev(1, 1) for n in g.nodes}
    value = np.ones((2, 3), np.float32)
    want = tn.Session(g).run(h, {x: value})
    out = run_in_process(g, [h], {x: value}, executor="fast", requests=requests)
    np.testing.assert_allclose(fetched(out)[0], want, rtol=1e-6)
    s = out["/job:worker/task:1"].executor_stats[dev(1, 1)]
    assert s["whole_runs"] == 1 and s["compiles"] >= 1 and s["compiled_calls"] == 0
    assert out["/job:worker/task:1"].firings[dev(1, 1)] == 0, "nothing was interpreted"


def test_a_traced_run_of_a_partition_alone_fires_its_nodes_and_keeps_their_trace() -> None:
    g, x, h = _cell_across_tasks(3, dev(1, 1), dev(1, 1))
    requests = {n.name: dev(1, 1) for n in g.nodes}
    value = np.ones((2, 3), np.float32)
    want = tn.Session(g).run(h, {x: value})
    out = run_in_process(g, [h], {x: value}, executor="fast", requests=requests, options=RunOptions(trace=True))
    np.testing.assert_allclose(fetched(out)[0], want, rtol=1e-6)
    task = out["/job:worker/task:1"]
    assert task.traces and task.traces[dev(1, 1)], "a traced run lists its firings"
    assert task.executor_stats[dev(1, 1)].get("whole_runs", 0) == 0
    assert task.executor_stats[dev(1, 1)]["compiled_calls"] > 0


def test_a_partition_alone_that_cannot_compile_raises_the_reference_error() -> None:
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        y = tn.TensorArray(tn.float32, size=3).read(k) * 2.0
    requests = {n.name: dev(0, 1) for n in g.nodes}
    with pytest.raises(tn.KernelError, match="never written"):
        run_tasks(g, [y], {k: 1}, requests=requests)


#: the placement the ``dev`` profile drew for the program below: a device index per graph node, in order
_SENT_BACK_PLACEMENT = ("000000000000000000000000030003121220120020113331333213301201130001212031033230332130310102300"
                        "123302023030212220132313002310122011202001112111232231123103232321132331003")


def test_a_value_sent_into_a_loop_on_another_task_and_its_gradient_sent_back() -> None:
    """Regression (the ``dev`` profile of ``test_T7_compiled_partitions_of_gradient_programs``, its
    program and placement as drawn): ``exp(tanh(f0))`` is made on task 1 and starts a scan placed on
    task 0, and the gradient comes back to task 1, where the gradients of ``exp`` and ``tanh`` run. The
    forward ops and the gradient's ops on task 1 are connected only through the loop on task 0, and
    only round its back edges (the scan's result leaves the loop after its iterations), which
    ``partition.recv_waits`` did not follow: the compiled partition fused ``Tanh``, ``Exp`` and the
    gradient's ``Mul`` into one group, which waited for the gradient before sending the forward value,
    and both tasks waited for each other (``RecvTimeoutError``). An Exit now waits for its frame's
    NextIterations."""
    from programs import Bin, Block, Const, InputDecl, Program, Ref, Scan, Unary

    f64, i32 = "float64", "int32"
    p = Program(
        inputs=(InputDecl("x0", i32, None), InputDecl("x1", i32, None), InputDecl("f0", f64, None),
                InputDecl("xs", i32, 3), InputDecl("fs", f64, 1)),
        body=Block(stmts=(
            Scan(id="scan0", target="v0", elems="xs", carry="c0", elem="e0", init=Ref("x0", i32),
                 body=Block(stmts=(), results=(Ref("x0", i32),)), parallel_iterations=2, reverse=True),
            Scan(id="scan1", target="v1", elems="fs", carry="c1", elem="e1",
                 init=Bin("add", Unary("exp", Unary("tanh", Ref("f0", f64))), Const(0.0, f64)),
                 body=Block(stmts=(), results=(Bin("add", Ref("c1", f64), Ref("f0", f64)),)),
                 parallel_iterations=2, reverse=False)),
            results=(Ref("v0", i32), Ref("v1", f64), Ref("x0", i32))))
    b = build(p)  # with the gradients ``strategies.gradient_graph`` builds (written out: no ``assume``)
    with b.graph.as_default():
        grads = [g for g in tn.gradients(b.fetches[1], [b.placeholders["f0"], b.placeholders["fs"]]) if g is not None]
    feeds = b.feed_dict({"x0": np.asarray(2, np.int32), "x1": np.asarray(0, np.int32), "f0": np.asarray(0.0),
                         "xs": np.array([3, -3, 2], np.int32), "fs": np.array([0.54004568])})
    assert len(b.graph.nodes) == len(_SENT_BACK_PLACEMENT)
    requests = {n.name: SPEC.devices[int(c)] for n, c in zip(b.graph.nodes, _SENT_BACK_PLACEMENT)}
    want = tn.Session(b.graph).run(grads, feeds)
    for scheduler in ("fifo", "lifo"):
        got = run_tasks(b.graph, grads, feeds, requests=requests, options=RunOptions(scheduler, 7, **GUARD))
        np.testing.assert_allclose(got, want, rtol=1e-9)
