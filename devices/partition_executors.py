"""Which executor a task of a cluster uses for its partitions: a table of executor kinds, by name.

Why a seam here: a task (``task_runner.TaskRunner``) owns the rendezvous, the messages to other tasks,
the credits and the decision when the run is over; *what fires* inside each partition is another
matter. Two kinds exist: ``"reference"`` (the default: the reference interpreter, the oracle, one node
at a time) and ``"fast"`` (``compiled_partition``: a partition that talks to no other runs whole on the
fast backend, the others with their arithmetic fused into jitted groups). A kind only has to offer the
small interface of ``PartitionExecutor`` below, driven the same way, and be named in
``PARTITION_EXECUTORS``; the task runner, the Ray runtime and the tests do not change. A session picks
the kind with ``tn.Session(graph, cluster=spec, partition_executor="fast")`` (or ``backend="fast"``).

An entry is either an ``ExecutorKind`` or a string ``"module:attribute"`` naming one. The string
form matters on a cluster: the table is read in each task's process, not on the driver, so a kind
that is registered at run time on the driver would not be seen by the tasks; a module path is
imported where it is needed (and keeps optional dependencies, such as JAX, out of tasks that do not
use them). A session may also pass such a path directly as ``partition_executor``.
"""

from __future__ import annotations

import importlib
import itertools
from collections import deque
from collections.abc import Callable, Sized
from dataclasses import dataclass
from typing import Any, Optional, Protocol

import numpy as np

from turnout.devices.executor import PartitionInterpreter, partition_plan
from turnout.devices.partition import Partition
from turnout.devices.rendezvous import Rendezvous
from turnout.errors import UnsupportedError
from turnout.graph import Node
from turnout.reference.rules import Tag, Token
from turnout.session import RunOptions
from turnout.slot_sizes import SlotPlan


class PartitionExecutor(Protocol):
    """What the task runner drives, per partition and per run (``PartitionInterpreter`` is one).

    The runner calls ``start()`` once, then in rounds: ``drain()`` (under the rendezvous lock) when
    ``mailbox`` holds wake-ups from the rendezvous, and ``step()`` while ``queue`` is non-empty. Send
    and Recv go through the rendezvous given to the factory; ``firings`` counts steps (for
    ``max_firings``), ``produced`` holds the root-frame tokens (the fetches are read from it or from
    ``feeds``), ``counts`` the firing counts per (node name, tag), ``trace`` a ``DeviceTrace`` when
    the run is traced, and ``slot_stats`` what the run's stats say of the checkpoint slots its
    partition's recomputed loops got (``SlotPlan.stats``; nothing where it has none)."""

    device: str
    firings: int
    counts: dict[tuple[str, Tag], int]
    produced: dict[tuple[int, int], Token]
    feeds: dict[tuple[int, int], Any]
    trace: Optional[Any]
    mailbox: deque[tuple[Node, Tag, str]]
    queue: Sized

    @property
    def slot_stats(self) -> dict[str, Any]:
        """What the run's stats say of the checkpoint slots the partition's recomputed loops got
        (``SlotPlan.stats``)."""
        ...

    def start(self) -> None:
        """Begin the run: deliver the feeds, make the sources ready (or run the partition whole)."""
        ...

    def drain(self) -> None:
        """Make ready what the rendezvous woke (the ``mailbox``); called under the rendezvous lock."""
        ...

    def step(self) -> None:
        """Fire one ready item of ``queue``."""
        ...

    def waiting_report(self) -> list[str]:
        """The lines of a stuck run's report for this partition: its nodes that got part of their inputs and never
        fired."""
        ...


#: ``make(device, prepared, feeds, variables, options, rendezvous, clock, slots)``: one executor per run;
#: ``slots``, the checkpoint slots its partition's recomputed loops get and where a run that needed more
#: says so (``turnout.slot_sizes``; the task sizes them, ``TaskRunner.run``)
Make = Callable[[str, Any, dict[tuple[int, int], Any], dict[str, np.ndarray], RunOptions, Rendezvous,
                 "itertools.count[int]", SlotPlan], PartitionExecutor]


@dataclass(frozen=True)
class ExecutorKind:
    """An executor of partitions. ``prepare(partition)`` runs once per partition and fetch signature on
    the task (the reference interpreter builds its plan; a compiler would compile), and its result is
    handed to ``make`` at every run; ``describe(partition)`` says, in words, what runs it (a cluster
    session's ``explain``). ``memory_budgets``: whether its executors count what their
    partition's loops save against a run's memory budget (``RunOptions.memory_budget``, a loop's
    own), stopping the run with ``ResourceExhaustedError`` where a device would go over, and expose
    the count as ``saved`` (``memory_plan.SavedBytes``); a cluster whose kind does not is refused a
    budget, never run over it without a word."""

    name: str
    prepare: Callable[[Partition], Any]
    make: Make
    memory_budgets: bool = False
    #: what runs a partition, in words (``Session.explain``'s schedule of a cluster)
    describe: Callable[[Partition], str] = lambda part: "its executor"


def _reference_plan(part: Partition) -> Any:
    return partition_plan(part.graph, frozenset(ph.id for ph in part.feeds.values()))


REFERENCE = ExecutorKind("reference", _reference_plan, PartitionInterpreter, memory_budgets=True,
                         describe=lambda part: "the reference interpreter")

#: name -> ExecutorKind, or ``"module:attribute"`` naming one (imported on first use, in the task)
PARTITION_EXECUTORS: dict[str, ExecutorKind | str] = {
    "reference": REFERENCE,
    "fast": "turnout.devices.compiled_partition:FAST",  # JAX is imported only by the tasks that use it
}


def executor_kind(name: str) -> ExecutorKind:
    """The executor kind named ``name`` (a key of ``PARTITION_EXECUTORS`` or a ``"module:attribute"``
    path); UnsupportedError naming the known kinds otherwise."""
    entry = PARTITION_EXECUTORS.get(name, name if ":" in name else None)
    if entry is None:
        raise UnsupportedError(f"unknown partition executor {name!r}; the tasks of a cluster know "
                               f"{sorted(PARTITION_EXECUTORS)} (or give a 'module:attribute' path)")
    if isinstance(entry, ExecutorKind):
        return entry
    module, _, attr = entry.partition(":")
    try:
        kind = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise UnsupportedError(f"partition executor {name!r}: cannot load {entry!r} ({e})") from None
    if not isinstance(kind, ExecutorKind):
        raise UnsupportedError(f"partition executor {name!r}: {entry!r} is a {type(kind).__name__}, "
                               "not an ExecutorKind")
    return kind
