"""Laws of counted stacks (``turnout.fast.counted_stacks``): which gradient stacks the fused trace may
leave unchecked, and the index arithmetic it reads them with. A stack is counted when one StackPush,
directly in the body of the innermost loop of a chain of loops (each the one loop of the body
before), pushes under the Pack of the chain's counters that enter at 0, and every pop after the
chain indexes it with one element per loop; what it pushes is recorded when it is itself a counter
(its start kept). Positions are row-major, ranges are checked per element, and every index is read
as int32 whatever its integer dtype. Each law kills mutants of the full set of
``fast/counted_stacks.py`` (issue 40, part 3; ``python tools/mutation.py --module
fast/counted_stacks.py --all``).

The search runs on tiny hand-built programs (functionalized, never run); the arithmetic is called
directly under ``jax.enable_x64`` (as the fast backend traces), with int64 indices.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import jax
import numpy as np
import pytest

import turnout as tn
from turnout.fast import counted_stacks as cs
from turnout.fast import emit
from turnout.fast.functionalize import functionalize
from turnout.fast.regions import Program, WhileRegion


def _new(g: tn.Graph, name: str) -> Any:
    return g.create_node("StackNew", (), {"elem_dtype": "int32", "elem_shape": []}, name=name).outputs[0]


def _push(g: tn.Graph, s: Any, index: Any, value: Any, name: str) -> Any:
    return g.create_node("StackPush", [s, index, value], name=name)


def _pop(g: tn.Graph, s: Any, index: Any, name: str) -> Any:
    return g.create_node("StackPop", [s, index], {"dtype": "int32", "shape": []}, name=name).outputs[0]


def _one_loop(names: tuple[str, ...], in_body: Callable[..., list[Any]], after: Callable[..., list[Any]],
              fed_start: bool = False) -> tuple[Program, tn.Graph]:
    """A loop of three bodies over the counters ``i`` (entering as 0, or as a fed value) and ``k``
    (entering as 5), whose body makes the pushes ``in_body(g, stacks, i, k)`` onto the stacks
    ``names`` (made before it) and reads what each passes on (so that the program keeps them all,
    popped or not); ``after(g, stacks, acc)`` makes the pops after it (``acc``: the loop's output,
    so they come after it)."""
    g = tn.Graph()
    with g.as_default():
        stacks = {s: _new(g, s) for s in names}
        feeds = [tn.placeholder(tn.int32, [], name="start")] if fed_start else []
        i0 = feeds[0] if fed_start else tn.constant(0)

        def body(i: Any, k: Any, acc: Any) -> Any:
            pushes = in_body(g, stacks, i, k)
            total = acc + 1
            for p in pushes:  # (what a push passes on is read: a stack never popped is kept, too)
                total = total + p.outputs[0] * 0
            with tn.control_dependencies(pushes):
                return i + 1, k + 1, total

        _, _, acc = tn.while_loop(lambda i, k, acc: i < 3, body, [i0, tn.constant(5), tn.constant(0)])
        outs = [acc, *after(g, stacks, acc)]
    feeds = [n.outputs[0] for n in g.nodes if n.op == "Placeholder"]
    return functionalize(g, outs, feeds), g


def _loops(program: Program) -> list[WhileRegion]:
    return [it for it in program.items if isinstance(it, WhileRegion)]


def _named(g: tn.Graph, name: str) -> Any:
    (n,) = [n for n in g.nodes if n.name.endswith(name)]
    return n


def test_a_stack_pushed_once_under_its_loops_counter_is_counted_with_the_counter_it_pushes() -> None:
    """Three stacks pushed once each under ``[i]``, two popped after the loop under one-element
    indices and one never popped: all counted, under the loop's id, with their key, chain and push;
    the one pushing the counter ``k`` (entering as 5) records ``(0, 5)``, the one pushing ``i``
    ``(0, 0)``, the one pushing ``2 * i`` nothing."""
    def in_body(g: tn.Graph, stacks: dict[str, Any], i: Any, k: Any) -> list[Any]:
        return [_push(g, stacks["a"], tn.stack([i]), k, "push_a"),
                _push(g, stacks["b"], tn.stack([i]), i * 2, "push_b"),
                _push(g, stacks["c"], tn.stack([i]), i, "push_c")]

    def after(g: tn.Graph, stacks: dict[str, Any], acc: Any) -> list[Any]:
        return [_pop(g, stacks[s], tn.stack([acc * 0 + 1]), f"pop_{s}") for s in ("a", "b")]

    program, g = _one_loop(("a", "b", "c"), in_body, after)
    (loop,) = _loops(program)
    found = cs.counted_stacks(program, emit.stack_key_of)
    assert list(found) == [id(loop)]
    got = {c.push.name: c for c in found[id(loop)]}
    assert sorted(got) == sorted(_named(g, f"push_{s}").name for s in ("a", "b", "c"))
    for name, counter in (("push_a", (0, 5)), ("push_b", None), ("push_c", (0, 0))):
        c = got[_named(g, name).name]
        assert c.push is _named(g, name)
        assert c.key == emit.stack_key_of(c.push) and c.key is not None
        assert c.loops == (loop,) and isinstance(c.loops, tuple)
        assert c.counter == counter


def test_a_push_in_the_inner_loop_of_a_chain_is_counted_under_both_counters_through_enters() -> None:
    """A push in the body of a loop nested in another's, under ``[i, j]`` (``i`` the outer counter,
    read through its Enter and an Identity), pushing the inner counter ``j``: counted with the chain
    (outer, inner) under the outer loop's id, recording the counter ``(1, 0)``."""
    g = tn.Graph()
    with g.as_default():
        s = _new(g, "s")

        def inner_body(j: Any, i_in: Any) -> Any:
            with tn.control_dependencies([_push(g, s, tn.stack([tn.identity(i_in), j]), j, "push")]):
                return j + 1

        def body(i: Any, acc: Any) -> Any:
            (jj,) = tn.while_loop(lambda j: j < 3, lambda j: inner_body(j, i), [tn.constant(0)])
            return i + 1, acc + jj

        _, acc = tn.while_loop(lambda i, acc: i < 2, body, [tn.constant(0), tn.constant(0)])
        out = acc + _pop(g, s, tn.stack([acc * 0 + 1, tn.constant(2)]), "pop")
    program = functionalize(g, [out], [])
    (outer,) = _loops(program)
    (inner,) = [it for it in outer.body if isinstance(it, WhileRegion)]
    found = cs.counted_stacks(program, emit.stack_key_of)
    assert list(found) == [id(outer)]
    (c,) = found[id(outer)]
    assert c.loops == (outer, inner) and c.push is _named(g, "push") and c.counter == (1, 0)
    assert c.key == emit.stack_key_of(c.push)


def test_only_the_stack_that_follows_the_counters_is_counted_whatever_comes_before_it() -> None:
    """Stacks the search must pass over, pushed in the body before one it counts: pushed under
    ``[i + 1]``, ``-i`` (not a Pack), ``[i, i]`` (two elements for one loop) or ``[k]`` (a counter
    entering as 5), pushed twice, one whose push has no key, popped in the body, popped after under
    two elements or an index of unknown shape. Only the last stack is counted."""
    bad = ("plus", "neg", "pair", "k", "twice", "unkeyed", "inside", "wide", "unknown")

    def in_body(g: tn.Graph, stacks: dict[str, Any], i: Any, k: Any) -> list[Any]:
        idx = tn.stack([i])
        pushes = [_push(g, stacks["plus"], tn.stack([i + 1]), i, "push_plus"),
                  _push(g, stacks["neg"], -i, i, "push_neg"),
                  _push(g, stacks["pair"], tn.stack([i, i]), i, "push_pair"),
                  _push(g, stacks["k"], tn.stack([k]), i, "push_k"),
                  _push(g, stacks["twice"], idx, i, "push_twice_1"),
                  _push(g, stacks["twice"], idx, i, "push_twice_2"),
                  _push(g, stacks["unkeyed"], idx, i, "unkeyed_push"),
                  _push(g, stacks["inside"], idx, i, "push_inside")]
        with tn.control_dependencies(pushes):
            popped = _pop(g, stacks["inside"], idx, "pop_inside")
        pushes += [_push(g, stacks["wide"], idx, popped, "push_wide"),
                   _push(g, stacks["unknown"], idx, i, "push_unknown")]
        with tn.control_dependencies(pushes):  # (so that every order of the body has it last)
            return [*pushes, _push(g, stacks["good"], idx, i * 3, "push_good")]

    def after(g: tn.Graph, stacks: dict[str, Any], acc: Any) -> list[Any]:
        one = tn.stack([acc * 0 + 1])
        return [*[_pop(g, stacks[s], one, f"pop_{s}") for s in bad if s not in ("wide", "unknown", "inside")],
                _pop(g, stacks["wide"], tn.stack([acc * 0, acc * 0]), "pop_wide"),
                _pop(g, stacks["unknown"], tn.placeholder(tn.int32, None, name="unknown"), "pop_unknown"),
                _pop(g, stacks["good"], one, "pop_good")]

    program, g = _one_loop((*bad, "good"), in_body, after)
    (loop,) = _loops(program)
    keys = lambda n: None if n.name.endswith("unkeyed_push") else emit.stack_key_of(n)  # noqa: E731
    found = cs.counted_stacks(program, keys)
    assert [c.push.name for c in found[id(loop)]] == [_named(g, "push_good").name]
    assert list(found) == [id(loop)]


def test_a_loop_whose_counter_enters_as_a_fed_value_counts_no_stack() -> None:
    """The index counter must enter as a constant (0): one entering as a fed value counts nothing."""
    def in_body(g: tn.Graph, stacks: dict[str, Any], i: Any, k: Any) -> list[Any]:
        return [_push(g, stacks["s"], tn.stack([i]), i, "push")]

    program, _ = _one_loop(("s",), in_body, lambda g, stacks, acc: [], fed_start=True)
    assert cs.counted_stacks(program, emit.stack_key_of) == {}


def test_a_chain_follows_only_a_body_with_one_loop() -> None:
    """An outer loop whose body holds two loops heads no chain into either: a push in the first,
    under ``[i, j]``, is not counted."""
    g = tn.Graph()
    with g.as_default():
        s = _new(g, "s")

        def inner_body(j: Any, i_in: Any) -> Any:
            with tn.control_dependencies([_push(g, s, tn.stack([i_in, j]), j, "push")]):
                return j + 1

        def body(i: Any, acc: Any) -> Any:
            (a,) = tn.while_loop(lambda j: j < 3, lambda j: inner_body(j, i), [tn.constant(0)])
            (b,) = tn.while_loop(lambda j: j < 2, lambda j: j + 1, [tn.constant(0)])
            return i + 1, acc + a + b

        _, acc = tn.while_loop(lambda i, acc: i < 2, body, [tn.constant(0), tn.constant(0)])
        out = acc + _pop(g, s, tn.stack([acc * 0 + 1, tn.constant(2)]), "pop")
    program = functionalize(g, [out], [])
    (outer,) = _loops(program)
    assert len([it for it in outer.body if isinstance(it, WhileRegion)]) == 2
    assert cs.counted_stacks(program, emit.stack_key_of) == {}


def test_a_counted_stack_records_no_counter_unless_given_one() -> None:
    c = cs.CountedStack("k", (), None)  # type: ignore[arg-type]
    assert c.counter is None


def test_a_rung_too_small_names_the_stack_its_entries_and_the_capacity() -> None:
    e = cs.RungTooSmall("stack:3", 144, 128)
    assert str(e) == "stack:3: 144 entries for a capacity of 128"
    assert e.entries == 144


def _i64(*v: int) -> Any:
    return np.asarray(v, np.int64)


def _int32(x: Any) -> int:
    assert x.dtype == np.int32 and x.shape == ()
    return int(x)


@pytest.mark.parametrize(("index", "dims"), [((2,), (5,)), ((0,), (1,)), ((1, 2), (3, 4)), ((1, 0, 3), (2, 3, 4)),
                                             ((0, 3), (3, 4)), ((2, 2, 0), (3, 3, 3))])
def test_a_position_is_row_major_and_int32_for_an_index_of_any_integer_dtype(index: tuple[int, ...],
                                                                             dims: tuple[int, ...]) -> None:
    want = int(np.ravel_multi_index(index, dims))
    with jax.enable_x64(True):
        assert _int32(cs.position(_i64(*index), dims)) == want
        assert _int32(cs.position(np.asarray(index, np.int32), dims)) == want
        buf = np.arange(100, 100 + int(np.prod(dims)), dtype=np.float32)
        assert float(cs.read(buf, _i64(*index), dims)) == buf[want]


@pytest.mark.parametrize(("index", "ok"), [((0, 3), True), ((2, 0), True), ((1, 1), True), ((3, 0), False),
                                           ((0, 4), False), ((-1, 0), False), ((0, -1), False), ((2, 5), False)])
def test_an_index_is_in_range_when_each_element_lies_in_its_dimension(index: tuple[int, int], ok: bool) -> None:
    with jax.enable_x64(True):
        got = cs.in_range(_i64(*index), (3, 4))
    assert got.dtype == np.bool_ and got.shape == () and bool(got) == ok


@pytest.mark.parametrize(("ranges", "ok"), [([(0, 2), (0, 3)], True), ([(1, 1), (3, 3)], True),
                                            ([(0, 2), (0, 4)], False), ([(0, 3), (0, 3)], False),
                                            ([(-1, 2), (0, 3)], False), ([(0, 2), (-1, 0)], False),
                                            ([(0, 2)], False), ([(0, 2), (0, 3), (0, 0)], False), (None, False)])
def test_ranges_are_proved_when_each_lies_within_its_dimension(ranges: Optional[list[tuple[int, int]]],
                                                              ok: bool) -> None:
    assert cs.proved(ranges, (3, 4)) is ok


@pytest.mark.parametrize(("level", "start"), [(0, 0), (1, 0), (2, 0), (0, 3), (1, 1), (2, 7)])
def test_a_counted_counter_holds_its_index_element_plus_its_start(level: int, start: int) -> None:
    index = (4, 9, 6)
    with jax.enable_x64(True):
        assert _int32(cs.value_of_counter(_i64(*index), level, start)) == index[level] + start


def test_a_counter_entering_at_zero_is_read_without_an_add() -> None:
    """What a counted stack of a counter entering at 0 holds is the index element itself: its trace
    adds nothing (each op of a fused trace costs compile time)."""
    for start, adds in ((0, 0), (2, 1)):
        jaxpr = jax.make_jaxpr(lambda ix, s=start: cs.value_of_counter(ix, 1, s))(np.zeros(2, np.int32))
        assert [e.primitive.name for e in jaxpr.eqns].count("add") == adds
