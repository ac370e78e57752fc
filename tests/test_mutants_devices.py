"""Tests that kill what mutation testing found surviving in ``devices/``
(``python tools/mutation.py --module devices/partition.py``): the checks a partitioned program must
pass before it runs, and the node each of their errors names."""

from __future__ import annotations

import re

import pytest
from test_devices import D2, _loop_graph

from turnout.devices import check_partitions, partition, place
from turnout.errors import PartitionError


def test_a_send_on_the_wrong_device_is_a_partition_error_naming_the_send() -> None:
    """A Send whose ``src_device`` attribute disagrees with the partition holding it would ship its
    value from the wrong place; the check refuses it and says which Send and which devices."""
    g, x, y = _loop_graph()
    parted = partition(g, place(g, D2), [y], {(x.node.id, 0)})
    check_partitions(parted)  # as built, it passes
    send = next(n for part in parted.partitions.values() for n in part.graph.nodes if n.op == "Send")
    real = send.attrs["src_device"]
    other = next(d for d in parted.partitions if d != real)
    send.attrs["src_device"] = other
    want = rf'Send node "{re.escape(send.name)}".* is on {real}, its attrs say {other}'
    with pytest.raises(PartitionError, match=want):
        check_partitions(parted)


def test_a_loop_variable_that_grows_runs_across_devices_as_on_one() -> None:
    """A loop variable relaxed by ``shape_invariants`` keeps its relaxed spec in every partition: the
    partitioned copies of the loop's nodes carry the original specs, not ones re-inferred from the
    first iteration's shapes (re-inferred, the partition of the growing loop is a ShapeError)."""
    import numpy as np

    import turnout as tn

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        _, v = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tn.concat([v, tn.reshape(x, [1])], 0)),
                             [tn.constant(0), tn.reshape(x, [1])], shape_invariants=[None, [None]])
    want = tn.Session(g).run(v, {x: 2.0})
    got = tn.Session(g, devices=D2).run(v, {x: 2.0})
    np.testing.assert_array_equal(got, want)
    assert want.shape == (4,)
