"""Laws of the integer ranges the fast backend knows while tracing (``turnout.fast.ranges``), stated on
the table, its rules and its structural walks themselves. Each law kills mutants of the full set of
``fast/ranges.py`` (issue 40, part 3) that ``tests/test_fast_ranges.py`` let through: a bound of the
table's int32 guard off by one, a scalar's range read from a vector's entry (or the reverse), a
``Pack`` recorded where it must not be, a walk that follows an op it must not (or stops where it must
follow), a search that is not bounded. A wrong range proves an index in range that is not, and the
read then skips its check: these laws are what keeps a fold's unchecked reads honest.

The graphs are built and never run: ``from_counter`` and ``counters_reached`` read only their
structure, and a placeholder's id stands for a loop's counter Merge, as in ``test_fast_ranges``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout import raw

jax = pytest.importorskip("jax")

from turnout.fast.ranges import Ranges, counters_reached, first_write, from_counter, propagate  # noqa: E402

INT32_MIN, INT32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)


def _traced(fn: Any, *shapes: tuple[int, ...]) -> None:
    """Run ``fn`` on traced int32 values of ``shapes`` (a scalar when none is given): the table holds
    tracers, as while a loop's body is traced."""
    args = [np.zeros(s, np.int32) for s in (shapes or ((),))]
    jax.make_jaxpr(fn)(*args)


# ---- the table ---------------------------------------------------------------------------------------


def test_the_int32_bounds_and_a_point_are_ranges_the_table_records() -> None:
    """A range is recorded when ``INT32_MIN <= lo <= hi <= INT32_MAX``: both bounds of int32 are
    values a counter may take, and a point (``lo == hi``, a loop's last counter) is a range. Kills
    each ``<=`` of ``add``'s and ``add_each``'s guard turned into ``<``."""
    for lo, hi in ((INT32_MIN, 0), (0, INT32_MAX), (3, 3), (INT32_MIN, INT32_MAX)):
        _traced(_records(Ranges(), lo, hi))


def _records(table: Ranges, lo: int, hi: int) -> Any:
    """A body that records ``[lo, hi]`` for a scalar and as an element's range, and checks both kept."""
    def fn(i: Any) -> None:
        v = i + 0
        table.add(i, lo, hi)
        table.add_each(v, [(lo, hi), (0, 0)])
        assert table.get(i) == (lo, hi)
        assert table.each(v) == [(lo, hi), (0, 0)]
    return fn


def test_a_vector_range_that_leaves_int32_or_is_empty_is_never_recorded() -> None:
    """``add_each`` refuses the whole vector when one element's range would wrap around int32 or is
    empty, as ``add`` does for a scalar: a claim about the other elements alone would be read as a
    claim about all."""
    table = Ranges()

    def fn(v: Any) -> None:
        for bad in ((INT32_MIN - 1, 0), (0, INT32_MAX + 1), (2, 1)):
            table.add_each(v, [(0, 1), bad])
            assert table.each(v) is None and len(table) == 0

    _traced(fn, (2,))


def test_the_table_holds_traced_values_only() -> None:
    """A static value is a point by its value and never an entry: ``add`` and ``add_each`` given one
    record nothing (the table would keep it alive for nothing), and ``get`` still answers its value."""
    table = Ranges()
    five, vec = np.int32(5), np.array([1, 2], np.int32)
    table.add(five, 0, 9)
    table.add_each(vec, [(0, 9), (0, 9)])
    assert len(table) == 0
    assert table.get(five) == (5, 5) and table.each(vec) == [(1, 1), (2, 2)]


def test_a_scalars_range_and_a_vectors_element_ranges_are_never_read_one_for_the_other() -> None:
    """``get`` answers only for a value recorded by ``add`` and ``each`` only for one recorded by
    ``add_each``: a vector's element ranges are no range of the vector, and a scalar has no
    elements."""
    table = Ranges()

    def fn(i: Any) -> None:
        v = jax.numpy.stack([i, i])
        table.add(i, 0, 4)
        table.add_each(v, [(0, 4), (1, 5)])
        assert table.get(i) == (0, 4) and table.each(i) is None
        assert table.each(v) == [(0, 4), (1, 5)] and table.get(v) is None

    _traced(fn)


def test_static_vectors_give_their_elements_as_points_and_nothing_else_does() -> None:
    """``each`` of a static integer vector is its elements as points; a float vector, an integer
    scalar or matrix has no element ranges (``None``), whatever its values."""
    table = Ranges()
    assert table.each(np.array([4, -1, 7], np.int64)) == [(4, 4), (-1, -1), (7, 7)]
    assert table.each(np.array([3], np.uint8)) == [(3, 3)]
    assert table.each(np.array([1.0, 2.0], np.float32)) is None
    assert table.each(np.int32(3)) is None
    assert table.each(np.zeros((2, 2), np.int32)) is None
    assert table.get(np.uint16(7)) == (7, 7)
    assert table.get(np.zeros((2, 2), np.int32)) is None


# ---- propagation -------------------------------------------------------------------------------------


def _graph() -> dict[str, Any]:
    """A graph with the nodes ``propagate`` is given: a Pack of two int32 scalars, one of two int32
    vectors, an Add, a Sub, a node without outputs and one with two."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int32, [], name="a")
        b = tn.placeholder(tn.int32, [], name="b")
        u = tn.placeholder(tn.int32, [2], name="u")
        p = tn.placeholder(tn.bool, [], name="p")
        return {"pack": tn.stack([a, b]).node, "pack_vectors": tn.stack([u, u]).node,
                "add": (a + b).node, "sub": (a - b).node, "noop": tn.no_op(name="nothing"),
                "switch": raw.switch(a, p)[0].node}


def test_a_pack_of_ranged_scalars_records_each_elements_range() -> None:
    """A ``Pack`` of integer scalars whose ranges are known records the vector's element ranges, in
    order (a gradient stack's index is one); ``get`` of it stays unknown."""
    nodes, table = _graph(), Ranges()

    def fn(i: Any) -> None:
        j = i + 1
        table.add(i, 0, 4)
        table.add(j, 1, 5)
        out = jax.numpy.stack([i, j])
        propagate(table, nodes["pack"], [i, j], [out])
        assert table.each(out) == [(0, 4), (1, 5)] and table.get(out) is None
        static = jax.numpy.stack([i, i])
        propagate(table, nodes["pack"], [i, np.int32(7)], [static])
        assert table.each(static) == [(0, 4), (7, 7)]

    _traced(fn)


def test_a_pack_with_an_unknown_scalar_or_of_vectors_records_nothing() -> None:
    """Every element of a ``Pack`` needs its range for the vector to have element ranges; and a
    ``Pack`` of vectors (even vectors recorded with one range for all their elements) makes a matrix,
    whose rows are no elements: nothing is recorded for either."""
    nodes, table = _graph(), Ranges()

    def fn(i: Any, v: Any) -> None:
        j = i + 1
        table.add(i, 0, 4)
        out = jax.numpy.stack([i, j])
        propagate(table, nodes["pack"], [i, j], [out])
        assert table.each(out) is None and table.get(out) is None
        table.add(v, 0, 3)
        mat = jax.numpy.stack([v, v])
        propagate(table, nodes["pack_vectors"], [v, v], [mat])
        assert table.each(mat) is None and table.get(mat) is None
        assert len(table) == 2

    _traced(fn, (), (2,))


def test_propagate_passes_over_nodes_with_no_or_several_outputs() -> None:
    """``propagate`` runs for every node traced while the table holds anything: a node without
    outputs (a ``NoOp``) or with two (a ``Switch``) gets no range and must not fail."""
    nodes, table = _graph(), Ranges()

    def fn(i: Any) -> None:
        table.add(i, 0, 4)
        propagate(table, nodes["noop"], [], [])
        propagate(table, nodes["switch"], [i, True], [i + 0, i + 1])
        assert len(table) == 1

    _traced(fn)


def test_a_node_whose_output_is_not_an_integer_gets_no_range_whatever_its_inputs() -> None:
    """The node's output dtype decides: a float ``Add`` is given no range even where the values it is
    handed have ranges (a float is never an index), and neither is a static output (the table holds
    traced values only)."""
    g = tn.Graph()
    with g.as_default():
        f = tn.placeholder(tn.float32, [], name="f")
        fadd = (f + 1.0).node
    nodes, table = _graph(), Ranges()

    def fn(i: Any) -> None:
        table.add(i, 0, 4)
        out = i + 1
        propagate(table, fadd, [i, np.int32(1)], [out])
        assert table.get(out) is None
        propagate(table, nodes["add"], [np.int32(1), np.int32(2)], [np.int32(3)])
        assert len(table) == 1

    _traced(fn)


def test_sub_with_an_unknown_operand_has_no_range() -> None:
    """``a - b`` has a range only when both operands have one, whichever is unknown."""
    nodes, table = _graph(), Ranges()

    def fn(i: Any) -> None:
        table.add(i, 0, 4)
        unknown = i * 2
        for xs in ([i, unknown], [unknown, i]):
            out = xs[0] - xs[1]
            propagate(table, nodes["sub"], xs, [out])
            assert table.get(out) is None
        out = i - np.int32(1)
        propagate(table, nodes["sub"], [i, np.int32(1)], [out])
        assert table.get(out) == (-1, 3)

    _traced(fn)


# ---- first_write -------------------------------------------------------------------------------------


def _write_node() -> Any:
    g = tn.Graph()
    with g.as_default():
        return tn.TensorArray(tn.float32, size=4, element_shape=[]).write(0, 1.0).tensor.node


def test_a_write_at_a_moving_slot_is_judged_by_its_range_even_where_the_slots_written_are_known() -> None:
    """The slots known written answer only for a constant index; a write at the loop's counter is a
    first write when its range holds none of the slots written on entry, including its upper bound
    (a range ``[0, 2]`` holds slot 2)."""
    w = _write_node()

    class Ctx:
        ranges = Ranges()
        fresh_writes = {w.id: frozenset({2})}

    def fn(i: Any) -> None:
        Ctx.ranges.add(i, 3, 3)
        assert first_write(Ctx(), w, frozenset({2}), i)
        Ctx.ranges.add(i, 0, 2)
        assert not first_write(Ctx(), w, frozenset({2}), i)
        assert not first_write(Ctx(), w, None, i)
        Ctx.ranges.add(i, 0, 1)
        assert first_write(Ctx(), w, None, i)

    _traced(fn)


# ---- the structural walks ----------------------------------------------------------------------------


def _index_graph() -> dict[str, Any]:
    """Indices built from a stand-in counter ``c`` (a second counter ``c2``): through each op the walks
    follow, each value known when tracing, and ops they must not follow."""
    g = tn.Graph()
    with g.as_default():
        d = tn.placeholder(tn.int32, [], name="d")
        c = tn.placeholder(tn.int32, [], name="c")
        c2 = tn.placeholder(tn.int32, [], name="c2")
        v = tn.placeholder(tn.int32, [3], name="v")
        x = tn.placeholder(tn.float32, [None, 3], name="x")
        p = tn.placeholder(tn.bool, [], name="p")
        ta = tn.TensorArray(tn.float32, size=5, element_shape=[])
        return {
            "d": d, "c": c, "c2": c2, "v": v,
            "identity": tn.identity(c), "enter": raw.enter(c, "frame"), "switch_true": raw.switch(c, p)[1],
            "switch_false": raw.switch(c, p)[0], "plus_one": c + 1, "minus_one": c - 1,
            "const": tn.constant(np.int32(2)) - c, "shape": tn.shape(x)[1] - c, "size": tn.size(x) - 1 - c,
            "ta_size": ta.size() - 1 - c, "d_plus_c": d + c, "c_plus_d": c + d, "neg": -c,
            "shape_at_c": tn.shape(x)[c], "v_at_0": v[0], "v_at_c": v[c], "two": c + c2,
        }


def test_from_counter_follows_each_carry_and_each_value_known_when_tracing() -> None:
    """An index reached from the counter through ``Identity``, ``Enter`` or either side of a
    ``Switch``, moved by a constant, a shape's dimension, a ``Size`` or a ``TensorArraySize`` (each
    known when tracing), is one the ranges may prove in range."""
    t = _index_graph()
    merges = frozenset({t["c"].node.id})
    for name in ("identity", "enter", "switch_true", "switch_false", "plus_one", "minus_one", "const", "shape",
                 "size", "ta_size"):
        assert from_counter(t[name], merges), name


def test_from_counter_needs_every_operand_from_counters_in_either_order() -> None:
    """``d + c`` and ``c + d`` are both refused for a fed ``d``, whichever operand the walk meets
    first; a one-input op with no range rule (``-c``) and a read at a run-time index (even of a
    shape, known when tracing) are refused too: the ranges could not prove them."""
    t = _index_graph()
    merges = frozenset({t["c"].node.id})
    for name in ("d_plus_c", "c_plus_d", "neg", "shape_at_c"):
        assert not from_counter(t[name], merges), name
    assert from_counter(t["v_at_0"], frozenset({t["v"].node.id}))  # a constant index of a counted vector


def _chain(k: int) -> tuple[Any, frozenset[int]]:
    """An index reached from a stand-in counter through ``k`` Identities (a walk of ``k + 1`` nodes)."""
    g = tn.Graph()
    with g.as_default():
        c = tn.placeholder(tn.int32, [], name="c")
        t = c
        for _ in range(k):
            t = tn.identity(t)
    return t, frozenset({c.node.id})


def test_from_counter_gives_up_after_its_limit_of_nodes() -> None:
    """The structural guess is bounded: it looks at ``limit`` nodes at most (16 by default) and refuses
    an index it has not finished by then, so a long expression costs little, and what it refuses is
    checked when it runs."""
    assert from_counter(*_chain(15)) and not from_counter(*_chain(16))
    assert from_counter(*_chain(3), limit=4) and not from_counter(*_chain(4), limit=4)
    assert not from_counter(*_chain(100))


def test_counters_reached_finds_the_counters_of_every_index_from_counter_accepts() -> None:
    """For an index ``from_counter`` accepts, ``counters_reached`` names the counters it is computed
    from (``facts.hoistable`` needs each one's range): through each carry and either operand of an
    ``Add`` or a ``Sub``, however long the walk ``from_counter`` accepts."""
    t = _index_graph()
    c, c2 = t["c"].node.id, t["c2"].node.id
    both = frozenset({c, c2})
    for name in ("identity", "enter", "switch_true", "switch_false", "plus_one", "minus_one", "const", "shape",
                 "size", "ta_size"):
        assert counters_reached(t[name], both) == {c}, name
    assert counters_reached(t["two"], both) == both
    assert counters_reached(t["d_plus_c"], both) == {c}
    for k in range(16):
        index, merges = _chain(k)
        assert from_counter(index, merges) and counters_reached(index, merges) == merges, k


def test_counters_reached_follows_only_what_from_counter_follows_and_is_bounded() -> None:
    """A counter under an op ``from_counter`` does not follow (a one-input op with no range rule, a
    read at a run-time index) is not reached; a ``GetItem`` at a constant index is followed; and the
    search ends after about ``limit`` nodes, so a counter far down a long chain is not found."""
    t = _index_graph()
    c, v = t["c"].node.id, t["v"].node.id
    assert counters_reached(t["neg"], frozenset({c})) == frozenset()
    assert counters_reached(t["v_at_c"], frozenset({v})) == frozenset()
    assert counters_reached(t["v_at_0"], frozenset({v})) == {v}
    index, merges = _chain(100)
    assert counters_reached(index, merges) == frozenset()
