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
