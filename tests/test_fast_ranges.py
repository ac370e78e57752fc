"""The integer ranges the fast backend knows of traced values while tracing (``fast.ranges``).

A loop's counter lies in ``[start, bound - 1]`` in every body that runs; the ranges of what a body
computes from it (``i + 1``, ``n - 1 - i``) follow by the rules keyed by primitive, and an index so
proved in range is read without a check. These tests hold the table and its rules to that meaning:
a range is never wider than the truth allows to be claimed, never outlives its trace, and never
claimed for a value that would wrap around int32.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from turnout.fast.ranges import RANGE_RULES, Ranges, first_write, from_counter, known_within, propagate  # noqa: E402


def _traced(fn: Any) -> None:
    """Run ``fn`` on a traced int32 scalar (the table holds tracers, as while a loop is traced)."""
    jax.make_jaxpr(fn)(np.int32(0))


def test_static_integer_scalars_are_points_and_nothing_else_is_known() -> None:
    table = Ranges()
    assert table.get(np.int32(5)) == (5, 5) and table.get(np.array(-3, np.int64)) == (-3, -3)
    assert table.get(np.float32(1.0)) is None and table.get(np.array([1, 2], np.int32)) is None

    def fn(i: Any) -> None:
        assert table.get(i) is None  # a tracer nobody recorded
        table.add(i, 0, 9)
        assert table.get(i) == (0, 9)
        assert table.within(i, 0, 9) and table.within(i, -1, 10)
        assert not table.within(i, 1, 9) and not table.within(i, 0, 8)
        assert table.get(i + 0) is None  # another value, though equal

    _traced(fn)


def test_a_range_that_leaves_int32_is_never_recorded() -> None:
    table = Ranges()

    def fn(i: Any) -> None:
        table.add(i, 0, 2**31)
        assert table.get(i) is None
        table.add(i, 3, 2)  # empty: nothing to claim
        assert table.get(i) is None

    _traced(fn)


def test_forget_drops_what_a_trace_recorded_and_keeps_what_came_before() -> None:
    table = Ranges()

    def fn(i: Any) -> None:
        table.add(i, 0, 4)
        mark = table.mark()
        j = i + 1
        table.add(j, 1, 5)
        assert len(table) == 2
        table.forget(mark)
        assert table.get(j) is None and table.get(i) == (0, 4)

    _traced(fn)


@pytest.mark.parametrize(("op", "ranges", "want"), [
    ("Add", [(0, 4), (1, 1)], (1, 5)),
    ("Add", [(-2, 3), (10, 20)], (8, 23)),
    ("Sub", [(2, 2), (0, 2)], (0, 2)),      # n - 1 - i with n = 3
    ("Sub", [(0, 4), (-1, 1)], (-1, 5)),
    ("Add", [(0, 4), None], None),
    ("Identity", [(3, 7)], (3, 7)),
])
def test_range_rules(op: str, ranges: list[Any], want: Any) -> None:
    assert RANGE_RULES[op](ranges) == want


def test_propagate_records_integer_results_only() -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int32, [], name="a")
        f = tn.placeholder(tn.float32, [], name="f")
        add, fadd = (a + 1).node, (f + 1.0).node
    table = Ranges()

    def fn(i: Any) -> None:
        table.add(i, 0, 4)
        out = i + 1
        propagate(table, add, [i, np.int32(1)], [out])
        assert table.get(out) == (1, 5)
        fout = i.astype(jnp.float32) + 1.0
        propagate(table, fadd, [i, np.float32(1.0)], [fout])
        assert table.get(fout) is None

    _traced(fn)


def test_known_within_reads_the_contexts_table() -> None:
    """An empty table (a cluster group's context) knows static integers only; a traced value is known
    within a range only once the trace recorded one for it."""
    class Ctx:
        ranges = Ranges()

    assert known_within(Ctx(), np.int32(1), 0, 2) and not known_within(Ctx(), np.int32(3), 0, 2)

    def fn(i: Any) -> None:
        assert not known_within(Ctx(), i, 0, 2)
        Ctx.ranges.add(i, 0, 1)
        assert known_within(Ctx(), i, 0, 2) and not known_within(Ctx(), i, 1, 2)

    _traced(fn)


def test_from_counter_follows_arithmetic_on_counters_and_static_values_only() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        d = tn.placeholder(tn.int32, [], name="d")
        counter = tn.identity(d, name="counter")  # stands for a loop's counter Merge
        n = tn.shape(x)[0]
        merges = frozenset({counter.node.id})
        assert from_counter(counter, merges)
        assert from_counter(n - 1 - counter, merges)       # foldr's slot
        assert from_counter(tn.constant(0), merges)         # a static index
        assert from_counter(n - 1, merges)
        assert not from_counter(d, merges)                  # a fed value
        assert not from_counter(counter + d, merges)        # a counter moved by a fed value
        assert not from_counter(counter * 2, merges)        # no rule for Mul
        assert not from_counter(counter, frozenset())


def _write_node() -> Any:
    """A TensorArrayWrite node, for ``first_write`` to name."""
    g = tn.Graph()
    with g.as_default():
        return tn.TensorArray(tn.float32, size=3, element_shape=[]).write(0, 1.0).tensor.node


def test_first_write_of_a_constant_slot_reads_the_slots_known_written() -> None:
    w = _write_node()

    class Ctx:
        ranges = Ranges()
        fresh_writes: dict[int, frozenset[int]] = {}

    assert first_write(Ctx(), w, frozenset({1}), np.int32(0))
    assert not first_write(Ctx(), w, frozenset({0, 1}), np.int32(0))
    assert not first_write(Ctx(), w, None, np.int32(0))  # nothing known of the slots written


def test_first_write_at_a_moving_slot_needs_its_range_clear_of_the_slots_written_on_entry() -> None:
    w = _write_node()

    class Ctx:
        ranges = Ranges()
        fresh_writes = {w.id: frozenset({0})}

    def fn(i: Any) -> None:
        assert not first_write(Ctx(), w, None, i)  # no range known
        Ctx.ranges.add(i, 1, 2)
        assert first_write(Ctx(), w, None, i)
        Ctx.ranges.add(i, 0, 2)
        assert not first_write(Ctx(), w, None, i)  # slot 0 was written before the loop
        Ctx.fresh_writes = {}
        Ctx.ranges.add(i, 1, 2)
        assert not first_write(Ctx(), w, None, i)  # not a loop's own write at its counter

    _traced(fn)
