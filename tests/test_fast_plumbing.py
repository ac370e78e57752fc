"""The control-flow plumbing (``fast.plumbing``): the wiring of Switch, Merge, Enter, NextIteration
and Exit that the emitter applies in a trace and the host applies between compiled calls.

Each law is the semantics' rule it writes down; the last tests check that the two environments apply
the same wires to the same effect, and that one program gives one answer whether the emitter or the
host does its cond and its loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn

jax = pytest.importorskip("jax")

from turnout.fast import plumbing  # noqa: E402
from turnout.fast.functionalize import functionalize  # noqa: E402
from turnout.fast.host_env import HostEnv  # noqa: E402
from turnout.fast.regions import CondRegion, WhileRegion, key, walk  # noqa: E402
from turnout.fast.values import DEAD  # noqa: E402


def _program() -> tuple[tn.Graph, Any, list[Any]]:
    """A cond (a Merge of each branch, a Switch per branch input) and a loop (two variables and an
    invariant) in one program."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        c = tn.cond(x > 0.0, lambda: x * 2.0, lambda: x - 1.0, name="pick")
        _, y = tn.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, v * c + 1.0), [tn.constant(0), x],
                             name="grow")
    return g, functionalize(g, [c, y], [x, n]), [x, n, c, y]


def _regions() -> tuple[CondRegion, WhileRegion]:
    _, program, _ = _program()
    items = walk(program.items)
    (cr,) = [r for r in items if isinstance(r, CondRegion)]
    (wr,) = [r for r in items if isinstance(r, WhileRegion)]
    return cr, wr


@pytest.mark.parametrize("taken", [0, 1])
def test_a_switch_passes_its_data_to_the_taken_output_and_kills_the_other(taken: int) -> None:
    """[E-Switch]: output ``taken`` carries the data input, read through the Switch; the other is dead."""
    cr, wr = _regions()
    for switches in (cr.switches, wr.switches):
        wires = plumbing.switch_wires(switches, taken)
        assert len(wires) == 2 * len(switches)
        for s in switches:
            live = [w for w in wires if w.dst == key(s.outputs[taken])]
            off = [w for w in wires if w.dst == key(s.outputs[1 - taken])]
            assert [(w.src, w.reader) for w in live] == [(s.inputs[0], s)]
            assert [(w.src, w.value) for w in off] == [(None, DEAD)]


@pytest.mark.parametrize("b", [False, True])
def test_a_merge_forwards_the_input_of_the_branch_that_ran_with_its_index(b: bool) -> None:
    """[E-Merge-Live]: after branch ``b`` each Merge forwards the input that branch gives it and reports its
    slot; a Merge the branch gives nothing is dead, its index too."""
    cr, _ = _regions()
    joins = plumbing.branch_joins(cr, b)
    assert [m for m, _, _ in joins] == [m for m, _ in cr.merges]
    for (m, slots), (_, src, idx) in zip(cr.merges, joins, strict=True):
        assert src is m.inputs[slots[b]] and int(idx) == slots[b] and idx.dtype == np.int32
    one_sided = CondRegion(cr.pred, cr.scope, cr.switches, [(m, {not b: s[not b]}) for m, s in cr.merges],
                           cr.branches)
    assert all(src is None and idx is DEAD for _, src, idx in plumbing.branch_joins(one_sided, b))
    wires = plumbing.join_wires(one_sided, b)
    assert all(w.src is None and w.value is DEAD for w in wires)
    assert [w.dst for w in wires] == [key(o) for m, _ in cr.merges for o in m.outputs[:2]]
    live = plumbing.join_wires(cr, b)
    assert [w.dst for w in live] == [w.dst for w in wires]
    assert [(w.src, w.reader) for w in live[::2]] == [(m.inputs[s[b]], m) for m, s in cr.merges]


def test_a_loops_merges_report_the_enter_first_and_the_next_iteration_after() -> None:
    """[E-Merge-Live] at a loop's header: the Enter's input slot at the first iteration, the
    NextIteration's after; [E-Enter] and [E-Next-Live] read what enters and what the body hands on."""
    _, wr = _regions()
    for first in (True, False):
        got = plumbing.merge_outputs(wr, first)
        assert [(kv, ki) for kv, ki, _ in got] == [(key(m.outputs[0]), key(m.outputs[1]))
                                                  for _, m, _, _, _ in wr.loop_vars]
        assert [int(i) for _, _, i in got] == [es if first else ns for _, _, _, es, ns in wr.loop_vars]
        assert all(i.dtype == np.int32 for _, _, i in got)  # (a Merge's value_index is int32)
    assert plumbing.entries(wr) == [(e.inputs[0], m) for e, m, _, _, _ in wr.loop_vars]
    assert plumbing.next_values(wr) == [(nx.inputs[0], m) for _, m, nx, _, _ in wr.loop_vars]
    assert [(w.dst, w.src, w.reader) for w in plumbing.invariant_wires(wr)] == [
        (key(inv.outputs[0]), inv.inputs[0], inv) for inv in wr.invariants]
    assert wr.invariants  # (the loop reads the cond's value from outside)
    assert [(w.dst, w.src, w.reader) for w in plumbing.exit_wires(wr)] == [
        (key(x.outputs[0]), x.inputs[0], x) for x in wr.exits]
    assert plumbing.exit_keys(wr) == [key(x.outputs[0]) for x in wr.exits]
    assert all(w.value is DEAD and w.src is None for w in plumbing.dead(plumbing.exit_keys(wr)))


def test_the_host_and_a_plain_environment_apply_the_same_wires_alike() -> None:
    """``HostEnv.wire`` and the emitter's ``wire`` (a dict read key by key, as on one device) give
    every output the same value: the data where a wire has a source, the constant where not."""
    from turnout.fast.emitter_core import EmitterCore

    cr, wr = _regions()
    wires = [*plumbing.switch_wires(cr.switches, 1), *plumbing.invariant_wires(wr),
             *plumbing.switch_wires(wr.switches, 0), *plumbing.join_wires(cr, True)]
    srcs = {key(w.src): np.float32(k) for k, w in enumerate(wires) if w.src is not None}
    host = HostEnv(srcs)
    host.wire(wires, HostEnv(srcs))
    plain = dict(srcs)
    EmitterCore.wire(_Plain(), wires, plain)  # type: ignore[arg-type]
    assert set(plain) == set(host.vals)
    for k, v in plain.items():
        assert v is host.vals[k] or (v is not DEAD and np.array_equal(v, host.vals[k])), k


def test_a_value_crosses_to_another_device_once_per_scope() -> None:
    """``HostEnv.on``: a value that lives on one device and is read on another is copied there once
    (two segments there read the same copy, and so does a child scope, a branch or an iteration), a
    copy made in a child scope stays out of its parent's cache, and a value set again is copied
    afresh."""
    d0, d1 = jax.devices()[:2]
    k = ("x", 0)
    env = HostEnv()
    env.set(k, jax.device_put(np.float32(2.0), d0), "a")
    first = env.on(k, "b", d1)
    assert first.devices() == {d1} and env.on(k, "b", d1) is first
    assert env.on(k, "a", d0) is env.vals[k]  # (read where it lives: no copy)
    assert env.child().on(k, "b", d1) is first  # (a child scope reads its parent's copy)
    inner = HostEnv()
    inner.set(k, jax.device_put(np.float32(3.0), d0), "a")
    scope = inner.child()
    copy = scope.on(k, "b", d1)
    assert scope.on(k, "b", d1) is copy and "b" not in inner.copies.get(k, {})
    env.set(k, jax.device_put(np.float32(4.0), d0), "a")
    assert float(env.on(k, "b", d1)) == 4.0


class _Plain:
    """The emitter's ``read`` on one device: the environment's value."""

    def read(self, env: dict[Any, Any], t: Any, reader: Any) -> Any:
        return env[key(t)]


@pytest.mark.parametrize("x, n", [(0.5, 3), (-2.0, 0), (-0.25, 5)])
def test_one_answer_whether_the_emitter_or_the_host_does_the_control_flow(x: float, n: int) -> None:
    """The cond and the loop traced by the emitter (one device) and driven by the host (their nodes
    spread over two devices, so neither is one compiled call) give the reference's values."""
    g, _, (xt, nt, c, y) = _program()
    feeds = {xt: np.float32(x), nt: np.int32(n)}
    want = tn.Session(g).run([c, y], feeds)
    req = {nd.name: f"cpu:{k % 2}" for k, nd in enumerate(g.nodes)}
    for sess, tier in ((tn.Session(g, backend="fast"), None),
                       (tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"], requests=req,
                                   whole_program="never"), "host-driven")):
        got = sess.run([c, y], feeds)
        assert sess.last_result.stats.get("tier") == tier
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)
