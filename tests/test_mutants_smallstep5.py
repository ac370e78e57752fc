"""Laws of the small-step system's driver and its reports, found missing by mutation testing
(``python tools/mutation.py --module semantics/smallstep.py``, places 1380-2208 of the full set): how a
run under a memory budget counts the stack store's entries (as the reference interpreter counts its
pushes, per loop, with the same plan and the same message), the scheduler's three policies and their
seeded choice, the ``max_steps`` / ``max_seconds`` messages, ``deadlock_report``'s text, the error a
Switch or LoopCond gives for a predicate that is not a bool scalar, where the control token an
emitting rule sends goes, and what ``SmallStepBackend`` passes on to ``run``. Each test names the
mutant ids it kills.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout import memory_plan as mp
from turnout.errors import ResourceExhaustedError
from turnout.semantics import smallstep as ss

X0 = np.array([0.1, -0.4, 0.7], np.float32)


# ---- memory budgets: the stack store's entries, counted as the reference counts its pushes ----------------
def _nested_model() -> tuple[tn.Graph, tn.Tensor, tn.Tensor]:
    """``v <- 1.1 tanh(v)``, two inner steps per outer step, two outer steps, and its gradient: the inner
    loop's stacks are indexed by two ints (outer and inner iteration), the outer loop's by one."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")

        def outer(i: Any, v: Any) -> Any:
            _, w = tn.while_loop(lambda j, w: j < 2, lambda j, w: (j + 1, tn.tanh(w) * 1.1), [tn.constant(0), v],
                                 name="inner")
            return i + 1, w

        _, y = tn.while_loop(lambda i, v: i < 2, outer, [tn.constant(0), x], name="outer")
        (gx,) = tn.gradients(tn.reduce_sum(y), [x])
    return g, x, gx


def _both(g: tn.Graph, fetch: tn.Tensor, feed: dict[Any, Any], **opts: Any) -> list[tuple[Any, Any]]:
    """(value, stats) of one run on the reference interpreter and one on the small-step system."""
    out = []
    for backend in ("reference", "smallstep"):
        sess = tn.Session(g, backend=backend)
        out.append((sess.run(fetch, feed, **opts), sess.last_result.stats))
    return out


def test_a_budgeted_run_counts_each_push_under_its_loop_as_the_reference_does() -> None:
    """Under a memory budget, every live [E-Stack-Push] into a loop's stack (a ``StackNew`` with a
    ``loop_name``) is counted under that loop as the reference interpreter counts its pushes: the
    value's bytes plus 4 bytes per int of its index (two for the inner loop of a nest), as ints. The
    stats' ``saved_bytes`` per loop and ``peak_saved_bytes`` equal the reference's, the values too,
    and the plan the run honours is the one ``Session.explain`` reports for the cpu platform.

    Kills smallstep.run:e2bbf0a1 a612d276 e161d75b 02d1ac70 691521e8 2bb015e1 9e156fea 6bed8443
    e161d75b.2 02d1ac70.2 cdea6bbf.2 610135ff 0b7b6808 5801f355 3ca84d45 98a5ec41 f4cdcd53 c9b1b2f5
    46011ff6 d0a19123 a4fb19ae 60d05592 94615df1 659d12e4 b406357d 58ce2f13;
    smallstep._saved_bytes:e0d799c3 e97e3f98 c38e6424 9e264f1d 613eead3 b5f7ec84 a143ac89 fc5a2ced
    a95d2977 3d98aaa9; smallstep._count_push:80131664 b102f406 2d3aa1dd 7aa9b276 b102f406.2 cd6ed192
    d2567638 378b947d 248d8841 c704b623 942c4ec5 13db4d98 96fd7ccf ac893a7c ea45e725 179b97c8 7817141e
    667d5555 b6c991ad 71090124 44e7cc8f; smallstep.<module>:6f235b97 f4e3ca15."""
    g, x, gx = _nested_model()
    budget = 10**6
    (want, ref_stats), (got, ss_stats) = _both(g, gx, {x: X0}, memory_budget=budget)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert ref_stats["saved_bytes"] == {"outer/body/inner": 128, "outer": 16}  # 4 x (4+8 + 12+8), 2 x (4+4)
    for key in ("saved_bytes", "peak_saved_bytes"):
        assert ss_stats[key] == ref_stats[key]
    assert all(type(b) is int for b in (*ss_stats["saved_bytes"].values(), ss_stats["peak_saved_bytes"]))
    r = ss.run(g, [gx], {x: X0}, memory_budget=budget)
    assert r.saved is not None and r.saved.stats() == {k: ref_stats[k] for k in ("peak_saved_bytes", "saved_bytes")}
    assert r.saved.plan == mp.graph_plan(g, [gx], "cpu", budget)


def test_a_run_over_its_budget_stops_with_the_references_message() -> None:
    """A run whose pushes would hold more than the run's memory budget stops with
    ``ResourceExhaustedError``, at the same push as the reference interpreter and with its message,
    naming the small-step system where the reference names itself.

    Kills smallstep.run:8dd01a63 58ce2f13 b406357d; smallstep._saved_bytes:7f8641e1 7a31bf64 9f4455c3
    6ae4ce0c; smallstep._count_push:667d5555 (a float count reads ``116.0 bytes``)."""
    g, x, gx = _nested_model()
    msgs = []
    for backend in ("reference", "smallstep"):
        with pytest.raises(ResourceExhaustedError) as e:
            tn.Session(g, backend=backend).run(gx, {x: X0}, memory_budget=100)
        msgs.append(str(e.value))
    assert msgs[0].startswith('reference interpreter: the saved values of loop "outer/body/inner" (32 bytes per '
                              "iteration) would hold 116 bytes on the device (the values pushed so far), over the "
                              "run's memory_budget of 100 bytes")
    assert msgs[1] == msgs[0].replace("reference interpreter: ", "small-step system: ", 1)


def test_a_run_without_a_budget_counts_nothing() -> None:
    """With no budget (none for the run, none of the loops' own) nothing is counted: the run of a
    gradient with stacks gives the right values, ``saved`` is None and the stats carry no
    ``saved_bytes``, as on the reference interpreter.

    Kills smallstep.run:0ef7c0cb cdea6bbf.2 e161d75b 02d1ac70; smallstep._saved_bytes:9acc9c2f."""
    g, x, gx = _nested_model()
    (want, ref_stats), (got, ss_stats) = _both(g, gx, {x: X0})
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert "saved_bytes" not in ref_stats and "saved_bytes" not in ss_stats and "peak_saved_bytes" not in ss_stats
    assert ss.run(g, [gx], {x: X0}).saved is None
