"""Devices, placement, partitioning and the partitioned reference executor: one closed-form test per rule.

Every partitioned run is compared with the unpartitioned reference run of the same graph, under each
partition order (round robin, seeded random, one thread per partition).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.devices import check_partitions, parse, partition, place
from turnout.devices.executor import PartitionedRun, partition_plan
from turnout.devices.partition import Partition, Partitioned
from turnout.session import RunOptions

D2 = ["cpu:0", "cpu:1"]
D3 = ["cpu:0", "cpu:1", "cpu:2"]
ORDERS = ["round_robin", "random", "threads"]
CPU = [parse(d).name for d in D3]


def run_both(g: tn.Graph, fetches: Any, feeds: Any = None, devices: list[str] = D2, **kw: Any) -> list[Any]:
    """The partitioned results under every order, checked equal to the unpartitioned run; returns them."""
    want = tn.Session(g).run(fetches, feeds)
    for order in ORDERS:
        sess = tn.Session(g, devices=devices, order=order, seed=3, **kw)
        got = sess.run(fetches, feeds)
        np.testing.assert_equal(got, want)
        run = sess.backend.last_run
        assert set(run.rv.sent) == set(run.rv.received) and not run.rv.unconsumed()
        assert all(v == 1 for v in run.rv.sent.values())
    return want  # type: ignore[no-any-return]


# ---- device names ----------------------------------------------------------------------------------
def test_device_names_full_and_short_forms() -> None:
    assert parse("cpu:1").name == "/job:localhost/task:0/device:CPU:1"
    assert parse("/cpu:1") == parse("CPU:1") == parse("/job:localhost/task:0/device:CPU:1")
    w = parse("/job:worker/task:1/device:GPU:0")
    assert (w.job, w.task, w.type, w.index) == ("worker", 1, "GPU", 0)
    assert w.short == "/job:worker/task:1/device:GPU:0" and parse("cpu:2").short == "cpu:2"
    assert parse("/job:ps").name == "/job:ps/task:0/device:CPU:0"


@pytest.mark.parametrize("bad", ["", "cpu", "cpu:x", "/job:/task:1", "device:CPU", 3])
def test_bad_device_names_are_errors(bad: Any) -> None:
    with pytest.raises(tn.PlacementError, match="device name"):
        parse(bad)


# ---- placement -------------------------------------------------------------------------------------
def _loop_graph() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = y * 2.0
            return i + 1, y2

        _, y = tn.while_loop(lambda i, y: i < 5, body, [tn.constant(0), x], name="loop")
    return g, x, y


def test_placement_scopes_defaults_and_colocation() -> None:
    g, x, y = _loop_graph()
    p = place(g, D2)
    assert p[x] == CPU[0] and p.why(x) == "default device"
    mul = next(n for n in g.nodes if n.op == "Mul")
    assert p[mul] == CPU[1] and "device scope" in p.why(mul)
    for n in g.nodes:
        if n.op == "NextIteration":
            merge = next(m for m in g.nodes if m.op == "Merge" and any(t.node is n for t in m.inputs))
            assert p[n] == p[merge]
    # the loop variable's NextIteration reads the Mul on cpu:1 but sits with its Merge on cpu:0
    assert {p[n] for n in g.nodes if n.op == "NextIteration"} == {CPU[0]}
    assert "cpu:1: " in p.describe() and mul in p.nodes_on("cpu:1")


def test_unknown_device_is_an_error_naming_the_node() -> None:
    g = tn.Graph()
    with g.as_default(), tn.device("gpu:0"):
        tn.constant(1.0, name="c")
    with pytest.raises(tn.PlacementError, match=r'Const node "c".*gpu:0.*not one of the devices'):
        place(g, D2)
    with pytest.raises(tn.PlacementError, match="at least one device"):
        place(g, [])
    with pytest.raises(tn.PlacementError, match="listed twice"):
        place(g, ["cpu:0", "/cpu:0"])


def test_resource_ops_sit_with_the_variable_and_a_conflicting_scope_is_an_error() -> None:
    g = tn.Graph()
    with g.as_default():
        with tn.device("cpu:1"):
            v = tn.Variable(1.0, name="v")
        r = v.read()
    p = place(g, D2)
    assert p[r] == CPU[1] and "uses the resource" in p.why(r)
    g2 = tn.Graph()
    with g2.as_default():
        with tn.device("cpu:1"):
            v = tn.Variable(1.0, name="v")
        with tn.device("cpu:0"):
            v.read(name="bad_read")
    with pytest.raises(tn.PlacementError, match=r"conflicting placement.*bad_read.*cpu:0.*uses the resource made by"):
        place(g2, D2)


def test_colocate_with_and_its_conflict() -> None:
    g = tn.Graph()
    with g.as_default():
        with tn.device("cpu:1"):
            a = tn.constant(1.0, name="a")
        b = tn.constant(2.0, name="b")
        with tn.colocate_with(a):
            c = tn.add(b, 1.0, name="c")
            with tn.colocate_with(None):
                d = tn.add(b, 2.0, name="d")
    p = place(g, D2)
    assert p[c] == CPU[1] and p[d] == CPU[0]
    with g.as_default(), tn.colocate_with(a), tn.device("cpu:0"):
        tn.add(b, 3.0, name="e")
    with pytest.raises(tn.PlacementError, match=r'conflicting placement.*"e".*colocate_with\(a\)'):
        place(g, D2)


def test_session_devices_errors() -> None:
    g, x, y = _loop_graph()
    with pytest.raises(tn.PlacementError, match="not one of the devices"):
        tn.Session(g, devices=["cpu:0"])
    with pytest.raises(tn.UnsupportedError, match="cannot run a graph partitioned"):
        tn.Session(g, backend="smallstep", devices=D2)
    with pytest.raises(ValueError, match="unknown partition order"):
        tn.Session(g, devices=D2, order="sideways")


# ---- partitioning ----------------------------------------------------------------------------------
def test_partition_of_a_loop_spanning_two_devices() -> None:
    g, x, y = _loop_graph()
    pl = place(g, D2)
    parted = partition(g, pl, [y], {(x.node.id, 0)})
    check_partitions(parted)
    assert set(parted.partitions) == set(CPU[:2])
    loops = parted.control_loops()
    assert {c.device for c in loops} == set(CPU[:2])  # a control loop on the source device too
    ops = {d: sorted(n.op for n in p.graph.nodes) for d, p in parted.partitions.items()}
    assert "LoopCond" in ops[CPU[0]] and "LoopCond" not in ops[CPU[1]]
    # cpu:1 receives the predicate every iteration, and its Recvs hang off its control Merge
    pred = [t for t in parted.transfers if t.edge.startswith("loop/loop_cond")]
    assert pred and pred[0].dst_device == CPU[1] and pred[0].credit == 10
    cl1 = parted.partitions[CPU[1]].control_loops[("loop/frame0",)] if ("loop/frame0",) in \
        parted.partitions[CPU[1]].control_loops else next(iter(parted.partitions[CPU[1]].control_loops.values()))
    for n in parted.partitions[CPU[1]].graph.nodes:
        if n.op == "Recv" and parted.partitions[CPU[1]].graph is n.graph and n.control_inputs:
            assert n.control_inputs == (cl1.merge,)
    assert run_both(g, y, {x: 3.0}) == 96.0


def test_loop_constant_enter_is_copied_per_consuming_device() -> None:
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.float32, shape=[], name="k")

        def body(i: tn.Tensor, a: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                b = k * 2.0  # reads only a loop constant on cpu:1
            with tn.device("cpu:2"):
                c = k + 1.0
            return i + 1, a + b + c

        _, a = tn.while_loop(lambda i, a: i < 4, body, [tn.constant(0), tn.constant(0.0)], name="w")
    parted = partition(g, place(g, D3), [a], {(k.node.id, 0)})
    check_partitions(parted)
    k_enter = next(n for n in g.nodes if n.op == "Enter" and n.inputs[0].node is k.node)
    copies = [d for d, p in parted.partitions.items() if any(n.name == k_enter.name for n in p.graph.nodes)]
    assert sorted(copies) == CPU[1:]
    # k crosses to cpu:1 and cpu:2 once, in the root frame, not once per iteration
    k_edges = [t for t in parted.transfers if t.edge.startswith("k:0") or "_feed" in t.edge]
    assert all(t.frame == () for t in k_edges)
    assert run_both(g, a, {k: 1.5}, devices=D3) == 4 * (3.0 + 2.5)


def test_cond_with_branches_on_two_devices_the_untaken_recv_is_dead() -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")
        x = tn.placeholder(tn.float32, shape=[], name="x")

        def t() -> tn.Tensor:
            with tn.device("cpu:1"):
                return x * 10.0

        def f() -> tn.Tensor:
            with tn.device("cpu:2"):
                return x - 1.0

        z = tn.cond(p, t, f)
    for pv, want in [(True, 30.0), (False, 2.0)]:
        assert run_both(g, z, {p: pv, x: 3.0}, devices=D3) == want
        sess = tn.Session(g, devices=D3)
        sess.run(z, {p: pv, x: 3.0}, trace=True)
        events = sess.last_result.trace.events  # type: ignore[union-attr]
        recvs = [e for _, e in events if e.op == "Recv"]
        dead = {e.node for e in recvs if e.dead}
        untaken, taken = ("f", "t") if pv else ("t", "f")
        assert f"_recv/^cond/pivot_{untaken}->cpu:{2 if pv else 1}" in dead
        assert f"_recv/^cond/pivot_{taken}->cpu:{1 if pv else 2}" not in dead
        assert {e.rule for e in recvs if e.dead} == {"E-Recv-Dead"}


def test_loop_body_spanning_three_devices() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                a = y * 2.0
            with tn.device("cpu:2"):
                b = a + tn.cast(i, tn.float32)
            return i + 1, b

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < 6, body, [tn.constant(0), x], parallel_iterations=3)
    assert run_both(g, y, {x: 1.0}, devices=D3) == tn.Session(g).run(y, {x: 1.0})
    parted = tn.Session(g, devices=D3).backend.partitioned([y], {(x.node.id, 0)})[0]
    assert {c.device for c in parted.control_loops()} == set(CPU)
    assert all(t.credit == 3 for t in parted.transfers if t.frame)


def test_nested_loops_with_the_inner_loop_on_another_device() -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, shape=[], name="n")

        def outer(i: tn.Tensor, acc: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                _, s = tn.while_loop(lambda j, s: j < i, lambda j, s: (j + 1, s + j), [tn.constant(0), tn.constant(0)])
            return i + 1, acc + s

        _, acc = tn.while_loop(lambda i, acc: i < n, outer, [tn.constant(0), tn.constant(0)])
    assert run_both(g, acc, {n: 5}) == sum(sum(range(i)) for i in range(5))
    parted = tn.Session(g, devices=D2).backend.partitioned([acc], {(n.node.id, 0)})[0]
    frames = {c.frame for c in parted.control_loops()}
    assert any(len(f) == 2 for f in frames) or any(len(f) == 1 for f in frames)


def test_loop_on_the_untaken_branch_of_a_cond_on_another_device() -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")
        x = tn.placeholder(tn.int32, shape=[], name="x")

        def looping() -> tn.Tensor:
            with tn.device("cpu:1"):
                _, y = tn.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2), [tn.constant(0), x])
            return y

        z = tn.cond(p, looping, lambda: x + 100)
    assert run_both(g, z, {p: False, x: 5}) == 105
    assert run_both(g, z, {p: True, x: 5}) == 40


def test_a_device_whose_only_loop_work_reads_loop_constants() -> None:
    g = tn.Graph()
    with g.as_default():
        c = tn.placeholder(tn.float32, shape=[], name="c")

        def body(i: tn.Tensor, acc: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                k = tn.exp(c)  # reads only the loop constant c
            return i + 1, acc + k

        _, acc = tn.while_loop(lambda i, acc: i < 3, body, [tn.constant(0), tn.constant(0.0)])
    np.testing.assert_allclose(run_both(g, acc, {c: 0.0}), 3.0)


def test_gradient_of_a_loop_spanning_devices() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, shape=[], name="x")

        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = tn.tanh(y) * 1.5
            return i + 1, y2

        _, y = tn.while_loop(lambda i, y: i < 4, body, [tn.constant(0), x])
        (dx,) = tn.gradients(y, [x])
    want = run_both(g, [y, dx], {x: 0.3})
    assert want[1] != 0.0
    parted = tn.Session(g, devices=D2).backend.partitioned([y, dx], {(x.node.id, 0)})[0]
    # the stacks live on one device each: every StackPush and StackPop sits with its StackNew
    for part in parted.partitions.values():
        news = {n.name for n in part.graph.nodes if n.op == "StackNew"}
        for n in part.graph.nodes:
            if n.op in ("StackPush", "StackPop"):
                from turnout.devices.placement import resource_creator
                maker = resource_creator(n.inputs[0])
                assert maker is not None and maker.name in news


def test_variables_updated_in_a_partitioned_loop() -> None:
    g = tn.Graph()
    with g.as_default():
        with tn.device("cpu:1"):
            v = tn.Variable(0.0, name="v")

        def body(i: tn.Tensor) -> tn.Tensor:
            with tn.control_dependencies([v.assign_add(tn.cast(i, tn.float32))]):
                return i + 1

        (n,) = tn.while_loop(lambda i: i < 5, body, [tn.constant(0)])  # on cpu:0, the default device
    for order in ORDERS:
        sess = tn.Session(g, devices=D2, order=order)
        sess.run(n)
        sess.run(n)
        assert sess.variables["v"] == 20.0
        parted = sess.backend.partitioned([n], set())[0]
        assigns = [d for d, p in parted.partitions.items() for m in p.graph.nodes if m.op == "AssignAddVariable"]
        assert assigns == [CPU[1]]


# ---- the executor: deadlock report, traces, counts ----------------------------------------------------
def test_deadlock_names_the_waiting_recv_and_its_key() -> None:
    g = tn.Graph()
    with g.device(CPU[0]):
        r = g.create_node("Recv", [], {"edge": "lost->cpu:0", "src_device": CPU[1], "dst_device": CPU[0],
                                       "credit": 1, "control": False, "dtype": "float32", "shape": []})
    parted = Partitioned(g, place(g, D2), {CPU[0]: Partition(CPU[0], g)}, [], [(CPU[0], r.outputs[0])], {})
    run = PartitionedRun(parted, {}, {}, RunOptions(), {CPU[0]: partition_plan(g)}, [r.outputs[0]])
    run.run()
    with pytest.raises(tn.DeadlockError, match=r"Recv 'Recv' on cpu:0 waits for \(edge 'lost->cpu:0', tag root\)"):
        run.check_finished()


def test_recv_outside_a_partitioned_run_is_an_error() -> None:
    g = tn.Graph()
    r = g.create_node("Recv", [], {"edge": "e", "src_device": CPU[1], "dst_device": CPU[0], "credit": 1,
                                   "control": False, "dtype": "float32", "shape": []})
    with g.as_default():
        y = tn.identity(r.outputs[0])
    with pytest.raises(tn.ExecutionError, match="runs only in a partitioned run"):
        tn.Session(g).run(y)


def test_per_device_trace_perfetto_export_and_firing_counts(tmp_path: Any) -> None:
    g, x, y = _loop_graph()
    sess = tn.Session(g, devices=D2)
    sess.run(y, {x: 1.0}, trace=True)
    res = sess.last_result
    assert res is not None and res.trace is not None
    assert set(res.trace.tracks) == set(CPU[:2])
    per = res.stats["firings_per_device"]
    assert sum(per.values()) == res.stats["firings"] and all(v > 0 for v in per.values())
    fired = [e for _, e in res.trace.events if e.op != "Retire" and e.rule != "E-Frame-Done"]
    assert len(fired) == res.stats["firings"]
    summary = res.trace.summary()  # the same count, the same key as the run's stats, per device too
    assert summary["firings"] == res.stats["firings"] < summary["events"] == len(res.trace)
    assert {d: s["firings"] for d, s in summary["devices"].items()} == per
    seqs = [e.seq for _, e in res.trace.events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    path = tmp_path / "trace.json"
    res.trace.save_chrome(str(path))
    doc = json.loads(path.read_text())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert names == set(CPU[:2])
    # iterations of the loop on both devices: cpu:1 runs the Mul at every iteration tag
    mul_tags = {e.tag for d, e in res.trace.events if e.op == "Mul"}
    assert len(mul_tags) == 6 and res.trace.summary()["sends"] == res.stats["messages"]


def test_the_credit_bounds_unconsumed_messages() -> None:
    g = tn.Graph()
    with g.as_default():
        def body(i: tn.Tensor, y: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            with tn.device("cpu:1"):
                y2 = y + tn.cast(i, tn.float32)
            return i + 1, y2

        _, y = tn.while_loop(lambda i, y: i < 30, body, [tn.constant(0), tn.constant(0.0)], parallel_iterations=2)
    for order in ORDERS:
        sess = tn.Session(g, devices=D2, order=order)
        assert sess.run(y) == sum(range(30))
        assert sess.last_result.stats["peak_unconsumed_per_edge"] <= 2  # type: ignore[union-attr]


def test_partitions_serialize_and_validate() -> None:
    g, x, y = _loop_graph()
    parted = partition(g, place(g, D2), [y], {(x.node.id, 0)})
    jsonschema = pytest.importorskip("jsonschema")
    from pathlib import Path

    import turnout.serialize as ser

    schema = json.loads((Path(ser.__file__).parent / "schema" / "graph.schema.json").read_text())
    for part in parted.partitions.values():
        jsonschema.validate(json.loads(tn.dumps(part.graph)), schema)
        back = tn.loads(tn.dumps(part.graph))
        assert [n.op for n in back.nodes] == [n.op for n in part.graph.nodes]
        tn.validate(back)


def test_pretty_and_dot_show_partitions_frames_and_transfers() -> None:
    from turnout.inspect import partitions_to_dot, pretty_partitions

    g, x, y = _loop_graph()
    parted = partition(g, place(g, D2), [y], {(x.node.id, 0)})
    text = pretty_partitions(parted)
    assert "device 'cpu:0' {" in text and "device 'cpu:1' {" in text
    assert text.count('frame "loop/') >= 2  # the loop frame appears in both partitions
    assert "_cloop/" in text and "transfers {" in text
    assert sum(1 for line in text.splitlines() if "@cpu:" in line and "->" in line) == len(parted.transfers)
    sess = tn.Session(g, devices=D2)
    sess.run(y, {x: 1.0}, trace=True)
    dot = partitions_to_dot(parted, sess.last_result.trace)  # type: ignore[union-attr]
    assert dot.startswith("digraph") and dot.count('color="red"') == len(parted.transfers)
    assert 'label="device cpu:0"' in dot and "live x" in dot


def test_backward_ops_go_with_their_forward_op() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, shape=[], name="x")
        with tn.device("cpu:1"):
            t = tn.tanh(x, name="t")
        y = t * 3.0
        (dx,) = tn.gradients(y, [x])
    p = place(g, D2)
    backward = [n for n in g.nodes if g.gradient_of.get(n.id) == t.node.id]
    assert backward and all(p[n] == CPU[1] for n in backward)
    assert any("with its forward op t" in p.why(n) for n in backward)
    np.testing.assert_allclose(run_both(g, dx, {x: 0.2}), 3.0 * (1 - np.tanh(0.2) ** 2))


def test_a_loop_spanning_devices_without_a_loop_cond_is_a_partition_error() -> None:
    from turnout import raw

    g = tn.Graph()
    with g.as_default():
        x = tn.constant(1.0, name="x")
        e = raw.enter(x, "f", name="e")
        with tn.device("cpu:1"):
            y = tn.identity(e, name="y")
        with tn.device("cpu:0"):
            out = raw.exit(y, name="out")
    with pytest.raises(tn.PartitionError, match=r"loop frame 'f' spans devices .'cpu:0', 'cpu:1'. but has 0 LoopCond"):
        partition(g, place(g, D2), [out], set())
    with pytest.raises(tn.PartitionError, match="another graph"):
        partition(tn.Graph(), place(g, D2), [out], set())


def test_a_dead_send_is_traced_dead() -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")

        def t() -> tn.Tensor:
            with tn.device("cpu:1"):
                return tn.constant(1.0) * 2.0

        z = tn.cond(p, t, lambda: tn.constant(0.0))
    sess = tn.Session(g, devices=D2)
    for pv in (False, True):
        sess.run(z, {p: pv}, trace=True)
        sends = [e.dead for _, e in sess.last_result.trace.events if e.op == "Send"]  # type: ignore[union-attr]
        assert len(sends) == 2 and all(dead == (not pv) for dead in sends)
