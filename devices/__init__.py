"""Devices, placement, partitioning and the partitioned reference executor (the paper, Sec. 4.4).

The pieces, one module each:

* ``names``: device names in TensorFlow's syntax (``/job:worker/task:1/device:CPU:0``, ``cpu:1``).
* ``placement``: ``place(graph, devices)`` gives every node a device — colocation constraints first
  (a NextIteration with its Merge, a resource op with the op that made the resource, ``colocate_with``),
  then ``tn.device`` scopes, then defaults.
* ``partition``: ``partition(graph, placement, fetches)`` cuts the placed graph into one graph per
  device, with Send/Recv pairs at device boundaries and control loops for loops that span devices.
* ``rendezvous``: the keyed table of tokens between partitions, with a credit per edge.
* ``executor``: one reference interpreter per partition, driven in turn, at random or in threads;
  ``tn.Session(graph, devices=[...])`` uses it.
* ``trace``: per-device traces on one clock, exportable to Perfetto.

The partitioned run gives exactly the results of the unpartitioned one, for any placement (T7 in the
property tests). It is the oracle for the partitioned executors that follow.
"""

from turnout.devices.executor import PartitionedBackend, PartitionedRun
from turnout.devices.names import DeviceSpec, canonical, parse
from turnout.devices.partition import Partitioned, Transfer, check_partitions, partition
from turnout.devices.placement import Placement, place
from turnout.devices.rendezvous import Rendezvous
from turnout.devices.trace import PartitionedTrace

__all__ = [
    "DeviceSpec", "Partitioned", "PartitionedBackend", "PartitionedRun", "PartitionedTrace", "Placement",
    "Rendezvous", "Transfer", "canonical", "check_partitions", "parse", "partition", "place",
]
