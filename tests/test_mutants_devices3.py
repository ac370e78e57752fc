"""More of ``devices/`` that mutation testing found unchecked (``python tools/mutation.py --module
devices/placement.py`` and ``--module devices/smallstep.py``): tests that fail under a surviving mutant.
"""

from __future__ import annotations

import numpy as np
from test_devices import CPU, D2, run_both

import turnout as tn
from turnout.devices.placement import place
from turnout.frames import topological_order


def test_backward_ops_go_with_their_forward_op_in_a_graph_with_a_loop() -> None:
    """The gradient-aware placement order must skip a loop's back edges. With ``grad_ys`` fed, the
    backward ops of ``m = x * w`` do not depend on ``m``, and the plain topological order puts one of
    them before ``m``; placed in that order it would follow its input to cpu:0 instead of going with
    ``m`` to cpu:1. A loop elsewhere in the graph must not make placement fall back to that order
    (placement._order:8954fdaa)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, shape=[], name="x")
        gy = tn.placeholder(tn.float64, shape=[], name="gy")
        w = tn.constant(2.0, tn.float64, name="w")
        with tn.device("cpu:1"):
            m = tn.multiply(x, w, name="m")
        y = m * 3.0
        (dx,) = tn.gradients(y, [x], grad_ys=[gy])
        _, acc = tn.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a + 1.0),
                               [tn.constant(0), tn.constant(0.0)])
    base = [n.id for n in topological_order(g)]
    backward = [n for n in g.nodes if g.gradient_of.get(n.id) == m.node.id]
    assert backward and any(base.index(n.id) < base.index(m.node.id) for n in backward), \
        "the graph no longer shows the difference between the two orders"
    p = place(g, D2)
    assert all(p[n] == CPU[1] for n in backward), p.describe()
    assert all(p.why(n) == "with its forward op m" for n in backward)
    np.testing.assert_allclose(run_both(g, [dx, acc], {x: 0.5, gy: 0.25}), [0.25 * 3.0 * 2.0, 3.0])


def test_every_interleaving_of_a_dead_fetch_across_devices_reports_it_dead() -> None:
    """The partitioned small-step system's outcome of a fetch on an untaken branch is ("dead", its
    name) under every interleaving, where the reference run raises DeadFetchError; the taken side is
    live (devices/smallstep.outcome)."""
    import pytest

    from turnout import raw
    from turnout.devices import partition
    from turnout.devices import smallstep as pss

    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")
        x = tn.placeholder(tn.int32, shape=[], name="x")
        _, on_true = raw.switch(x, p)
        with tn.device("cpu:1"):
            y = tn.multiply(on_true, tn.constant(10), name="y")
    with pytest.raises(tn.DeadFetchError):
        tn.Session(g).run(y, {p: False, x: 3})
    for pv, want in ((False, {(("dead", "y:0"),)}), (True, {(("live", ("int32", (), 30)),)})):
        feeds = {p: pv, x: 3}
        parted = partition(g, place(g, D2), [y], {(t.node.id, t.index) for t in feeds})
        assert set(parted.partitions) == set(CPU[:2])
        r = pss.explore(pss.system(parted, feeds))
        assert r.complete and not r.stuck and r.outcomes == want, r.outcomes
