"""Laws of the table of partition executor kinds (``turnout.devices.partition_executors``): which
executor a task of a cluster uses for its partitions. Each law kills mutants of the full set of
``devices/partition_executors.py`` (issue 40, part 3; ``python tools/mutation.py --module
devices/partition_executors.py --all``): a kind's defaults changed (a budget claimed it does not keep,
a description lost), the reference kind built with a wrong field or a plan that makes a fed
Placeholder a source, the table's names or the fast kind's path broken, a name looked up wrongly, an
error that does not say which executor or why, the ``Make`` signature's forward reference broken.

The functions are called directly on a one-device partition built by hand (a Placeholder, a Const
and their sum): no cluster, no task, no run, so each test takes milliseconds (the first call of the
fast kind imports JAX). The runs that use the kinds for real are in ``test_cluster.py`` and
``test_compiled_partition.py``.
"""

from __future__ import annotations

import typing
from collections.abc import Callable

import pytest

import turnout as tn
from turnout.devices import partition_executors as pe
from turnout.devices.executor import PartitionInterpreter
from turnout.devices.partition import Partition
from turnout.devices.partition_executors import (
    PARTITION_EXECUTORS,
    REFERENCE,
    ExecutorKind,
    PartitionExecutor,
    executor_kind,
)
from turnout.errors import UnsupportedError


def _part() -> Partition:
    """A partition of one device whose Placeholder ``x`` is fed: ``x + 1.0``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape=[], name="x")
        _ = x + tn.constant(1.0, name="one")
    return Partition("cpu:0", g, feeds={(x.node.id, 0): x.node})


def _prepare(part: Partition) -> str:
    return "prepared"


def test_a_kind_claims_no_budget_and_describes_itself_plainly_by_default() -> None:
    """Law: an ``ExecutorKind`` given only a name, ``prepare`` and ``make`` does not count saved bytes
    against a memory budget (so a cluster refuses it a budget) and is described as "its executor".
    Kills the defaults ``memory_budgets`` None or True and ``describe`` None, returning None or another
    string."""
    kind = ExecutorKind("plain", _prepare, PartitionInterpreter)
    assert kind.memory_budgets is False
    assert kind.describe(_part()) == "its executor"


def test_the_reference_kind_is_the_interpreter_with_a_budget() -> None:
    """Law: the reference kind is named "reference", makes ``PartitionInterpreter``s, keeps memory
    budgets and is described as the reference interpreter. Kills every mutant of ``REFERENCE``'s
    construction (None, a field dropped or None, the name, the budget or the description changed)."""
    assert isinstance(REFERENCE, ExecutorKind)
    assert REFERENCE.name == "reference"
    assert REFERENCE.make is PartitionInterpreter
    assert REFERENCE.memory_budgets is True
    assert REFERENCE.describe(_part()) == "the reference interpreter"


def test_the_reference_plan_runs_the_partition_from_its_unfed_sources() -> None:
    """Law: the reference kind's ``prepare`` plans the whole partition, and a fed Placeholder is not a
    source (its token comes from the feeds, not from firing it). Kills ``_reference_plan`` without its
    graph, without or with a broken set of fed ids, and ``REFERENCE`` built without it."""
    part = _part()
    plan = REFERENCE.prepare(part)
    assert sorted(n.name for n in plan.nodes) == sorted(n.name for n in part.graph.nodes)
    assert [n.name for n in plan.sources] == ["one"]


def test_the_table_names_the_reference_kind_and_the_fast_one_by_path() -> None:
    """Law: the table knows exactly "reference" (the kind itself) and "fast" (a "module:attribute"
    path, so JAX is imported only by the tasks that use it), and each name gives the kind that carries
    it. Kills the table's keys renamed and the fast path broken (module or attribute)."""
    from turnout.devices.compiled_partition import FAST

    assert sorted(PARTITION_EXECUTORS) == ["fast", "reference"]
    assert PARTITION_EXECUTORS["reference"] is REFERENCE
    assert isinstance(PARTITION_EXECUTORS["fast"], str)
    assert executor_kind("reference") is REFERENCE
    assert executor_kind("fast") is FAST


def test_a_module_attribute_path_names_a_kind_directly() -> None:
    """Law: a name that is no key of the table but holds a ":" is a "module:attribute" path, imported
    and read. Kills the path form dropped (the ":" test negated or made false, the default of the
    look-up lost) and the import or attribute read broken."""
    assert executor_kind("turnout.devices.partition_executors:REFERENCE") is REFERENCE


def test_an_unknown_name_is_refused_naming_the_known_kinds() -> None:
    """Law: a name without ":" that the table does not hold is an UnsupportedError that names it and
    the kinds the tasks know. Kills the ":" test made true (the name then fails as a path, with
    another message), the look-up by None, and the message broken."""
    with pytest.raises(UnsupportedError) as e:
        executor_kind("turbo")
    assert str(e.value) == ("unknown partition executor 'turbo'; the tasks of a cluster know "
                            "['fast', 'reference'] (or give a 'module:attribute' path)")


@pytest.mark.parametrize("path", ["turnout.no_such_module:KIND", "turnout.devices.partition_executors:NO_SUCH"])
def test_a_path_that_does_not_load_is_refused_naming_it(path: str) -> None:
    """Law: a "module:attribute" path whose module or attribute is missing is an UnsupportedError that
    names the executor and the path, never an ImportError or AttributeError. Kills the message
    replaced by None and the error not caught."""
    with pytest.raises(UnsupportedError) as e:
        executor_kind(path)
    assert str(e.value).startswith(f"partition executor {path!r}: cannot load {path!r} (")


def test_a_path_is_cut_at_its_first_colon() -> None:
    """Law: a path's module is what comes before its first ":" (no module name holds one), the rest is
    the attribute; so a path with a second ":" loads its module and misses that attribute, and the
    error's cause says so. Kills the path cut at its last ":" (``rpartition``: the module would then
    be the whole path but the last part, and the cause a missing module)."""
    path = "turnout.devices.partition_executors:REFERENCE:x"
    with pytest.raises(UnsupportedError) as e:
        executor_kind(path)
    assert "has no attribute 'REFERENCE:x'" in str(e.value)


def test_a_path_to_something_else_than_a_kind_is_refused_naming_its_type() -> None:
    """Law: a path that loads something other than an ``ExecutorKind`` is an UnsupportedError naming
    the executor, the path and the type it found. Kills the ``isinstance`` test negated and the
    message replaced or changed."""
    path = "turnout.devices.partition_executors:executor_kind"
    with pytest.raises(UnsupportedError) as e:
        executor_kind(path)
    assert str(e.value) == f"partition executor {path!r}: {path!r} is a function, not an ExecutorKind"


def test_make_is_the_signature_of_an_executor_factory() -> None:
    """Law: ``Make``, the type of a kind's ``make``, is a callable of the eight arguments the task
    passes returning a ``PartitionExecutor``. Kills ``Make`` replaced by None. (The clock's forward
    reference, ``"itertools.count[int]"``, is read only by a type checker: ``itertools.count`` is not
    subscriptable at run time, so its mutants are recorded as equivalent.)"""
    assert typing.get_origin(pe.Make) is Callable
    params, result = typing.get_args(pe.Make)
    assert len(params) == 8 and result is PartitionExecutor
