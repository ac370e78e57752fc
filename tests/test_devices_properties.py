"""[T7-Partition-Equivalence]: a partitioned run equals the unpartitioned run, for any placement.

Generated programs (``tests/strategies.py``; gradient programs included) are placed at random over 2 to
4 devices (``strategies.placements``: soft requests, so the colocation constraints still hold), and run
on the partitioned reference executor under a random partition order (round robin, seeded random,
threads) and a random ready-queue scheduler. Values, dead fetches and error types must equal the
unpartitioned reference run, and every ``(edge, tag)`` message must be sent once and received once.
The ``ci`` profile keeps this to a few seconds; ``TURNOUT_HYPOTHESIS_PROFILE=nightly`` runs thousands.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from programs import Built, assert_same_outcome, build, to_source
from strategies import PlacementDraw, gradient_cases, placements, programs_with_inputs

import turnout as tn
from turnout.session import RunOptions

GUARD = dict(max_firings=200_000, max_iterations=1_000)
#: the loaded profile's budget (100 in ``ci``, thousands in ``nightly``); the narrower tests take a share
BUDGET = settings.default.max_examples


def check_partition_equivalence(graph: tn.Graph, fetches: list[tn.Tensor], feeds: dict[tn.Tensor, Any],
                                draw: PlacementDraw, what: str = "") -> None:
    """The check behind T7 (shared with tools/campaign.py)."""
    sess = tn.Session(graph, devices=list(draw.devices), requests=draw.requests, order=draw.order, seed=draw.seed)
    opts = RunOptions(draw.scheduler, draw.seed, **GUARD)
    if assert_same_outcome(lambda: tn.Session(graph).run(fetches, feeds, options=RunOptions(**GUARD)),
                           lambda: sess.run(fetches, feeds, options=opts),
                           f"{what}partitioned run ({draw.order}, {len(draw.devices)} devices)"):
        run = sess.backend.last_run
        assert run is not None
        assert set(run.rv.sent) == set(run.rv.received), "a message was sent but not received, or the reverse"
        assert all(c == 1 for c in run.rv.sent.values()), "a message was sent twice"
        assert all(c == 1 for c in run.rv.received.values()), "a message was received twice"
        assert not run.rv.unconsumed()


def _check_program(p: Any, inputs: dict[str, Any], data: st.DataObject) -> None:
    b: Built = build(p)
    draw = data.draw(placements(b.graph))
    check_partition_equivalence(b.graph, b.fetches, b.feed_dict(inputs), draw, to_source(p) + "\n")


@given(programs_with_inputs(), st.data())
def test_T7_partition_equivalence(pi: tuple[Any, dict[str, Any]], data: st.DataObject) -> None:
    _check_program(*pi, data)


@settings(max_examples=max(1, BUDGET // 4))
@given(programs_with_inputs(loops=True, nesting=True), st.data())
def test_T7_partition_equivalence_nested_loops(pi: tuple[Any, dict[str, Any]], data: st.DataObject) -> None:
    _check_program(*pi, data)


@settings(max_examples=max(1, BUDGET // 4))
@given(st.data())
def test_T7_partition_equivalence_gradient_programs(data: st.DataObject) -> None:
    case = data.draw(gradient_cases())
    draw = data.draw(placements(case.graph))
    check_partition_equivalence(case.graph, case.grads, case.feeds, draw, to_source(case.program) + "\n")
