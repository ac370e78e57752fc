"""Laws of the state's lowering rules (``turnout.fast.lower_state``): a Variable's handle names it,
a read returns what the trace holds for it, an assignment writes the new value (the value, the
sum, the difference) cast to the Variable's dtype and returns it; a stack's handle names its
``StackNew`` node; a recomputed loop's checkpoint slots are the count ``slots_given`` allows, as an
int32 array; its trip count passes unchanged, and a loop given fewer slots than its budget holds
tells ``learn_slots`` what it needed (``min(trips, slots)``) only where that is more than it got,
while tracing where the count is known then, else from the run. Each law kills mutants of the full
set of ``fast/lower_state.py`` (issue 40, part 3; ``python tools/mutation.py --module
fast/lower_state.py --all``, ``"decorated"`` in the tool's list since ``@lowering_rule`` registers
the rules).

The rules are called directly, from ``LOWERING_RULES``, with stand-in nodes and a stand-in trace
context; the gradient stacks' laws run on programs (``_STACK_TESTS`` in the tool's list).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from turnout.control_flow.checkpoints import fewest_slots
from turnout.errors import UnsupportedError, describe_node
from turnout.fast.lowering import LOWERING_RULES
from turnout.fast.stack_values import StackValue
from turnout.fast.values import Handle


@dataclass
class _Trace:
    """A stand-in trace context: Variables' values by name, each read and write recorded, and the
    checkpoint slots' capacity and learner."""

    values: dict[str, Any] = field(default_factory=dict)
    reads: list[tuple[Any, Any]] = field(default_factory=list)
    writes: list[tuple[Any, Any]] = field(default_factory=list)
    slot_capacity: Optional[int] = None
    learn_slots: Optional[Any] = None

    def read_var(self, n: Any, h: Handle) -> Any:
        self.reads.append((n, h))
        return self.values[h.name]

    def write_var(self, h: Handle, v: Any) -> None:
        self.writes.append((h, v))
        self.values[h.name] = v


def _node(**attrs: Any) -> Any:
    return SimpleNamespace(id=7, name="n7", op="Op", attrs=attrs, outputs=[], inputs=[], source=None)


def test_handles_name_their_variable_and_their_stack() -> None:
    """Law: a ``VarHandle`` is the handle of kind "var" named by its ``var_name``; a ``StackNew`` is
    the handle of kind "stack" named by its node's id."""
    (h,) = LOWERING_RULES["VarHandle"](_Trace(), _node(var_name="w"), [])
    assert (h.kind, h.name) == ("var", "w") and h == Handle("var", "w")
    (s,) = LOWERING_RULES["StackNew"](_Trace(), _node(), [np.int32(4)])
    assert (s.kind, s.name) == ("stack", 7) and s == Handle("stack", 7)


def test_a_read_returns_the_traces_value_of_its_handle() -> None:
    """Law: ``ReadVariable`` asks the trace for the value of its first input's handle, naming the
    node, and returns it."""
    ctx, n, h = _Trace(values={"w": np.float32(2.5)}), _node(), Handle("var", "w")
    assert LOWERING_RULES["ReadVariable"](ctx, n, [h]) == [np.float32(2.5)]
    assert ctx.reads == [(n, h)]


@pytest.mark.parametrize("op, want", [("AssignVariable", 2.0), ("AssignAddVariable", 7.0),
                                      ("AssignSubVariable", 3.0)])
def test_an_assignment_writes_and_returns_the_new_value_in_the_variables_dtype(op: str, want: float) -> None:
    """Law: an assignment of ``v`` to a Variable holding ``old`` makes ``v``, ``old + v`` or
    ``old - v`` (5 and 2: 2, 7, 3), cast to the Variable's dtype (float32, from a float64 value),
    writes it under the Variable's handle and returns it; the old value is read naming the node."""
    ctx, n, h = _Trace(values={"w": jnp.float32(5.0)}), _node(dtype="float32"), Handle("var", "w")
    with jax.enable_x64(True):  # (as the backend traces: a float64 value stays float64 until cast)
        (out,) = LOWERING_RULES[op](ctx, n, [h, np.float64(2.0)])
    assert out.dtype == np.float32 and float(out) == want
    assert ctx.writes == [(h, out)] and ctx.reads == [(n, h)]


@pytest.mark.parametrize("capacity", [None, 12, 5, 1])
def test_checkpoint_slots_are_the_count_allowed_as_an_int32_array(capacity: Optional[int]) -> None:
    """Law: a loop whose budget holds 10 slots gets all 10 where the trace sets no capacity (or one
    above 10), the capacity where it lies between ``fewest_slots(10)`` and 10, and never fewer than
    ``fewest_slots(10)``; the count is an int32 array (a numpy scalar would not cross a call as
    one)."""
    (out,) = LOWERING_RULES["CheckpointSlots"](_Trace(slot_capacity=capacity), _node(slots=10), [])
    want = {None: 10, 12: 10, 5: 5, 1: fewest_slots(10)}[capacity]
    assert fewest_slots(10) > 1 and isinstance(out, np.ndarray) and out.dtype == np.int32 and int(out) == want


def _trips(capacity: Optional[int], learnt: Optional[list[Any]], trips: Any) -> Any:
    ctx = _Trace(slot_capacity=capacity, learn_slots=None if learnt is None else learnt.append)
    (out,) = LOWERING_RULES["CheckpointTrips"](ctx, _node(slots=10), [trips])
    return out


@pytest.mark.parametrize("trips, want", [(4, []), (5, []), (6, [6]), (10, [10]), (30, [10])])
def test_a_known_trip_count_passes_and_a_need_above_the_slots_given_is_learnt(trips: int, want: list[int]) -> None:
    """Law: a loop of 10 slots given 5 passes its known trip count on unchanged and, while tracing,
    tells ``learn_slots`` ``min(trips, 10)`` as an int32 where that is more than 5, and nothing
    where it is 5 or less."""
    learnt: list[Any] = []
    t = np.int32(trips)
    assert _trips(5, learnt, t) is t
    assert learnt == want and all(type(v) is np.int32 for v in learnt)


def test_a_loop_given_every_slot_or_nowhere_to_learn_adds_nothing() -> None:
    """Law: where the loop gets every slot its budget holds (no capacity, or 10 of 10), or the trace
    has no ``learn_slots``, the trip count passes as it is and nothing is learnt or traced, known
    count or not (the traced program is the bare input)."""
    for capacity, learnt in [(None, []), (10, []), (5, None)]:
        assert _trips(capacity, learnt, np.int32(30)) == 30 and not learnt
        jaxpr = jax.make_jaxpr(lambda t, c=capacity, ls=learnt: _trips(c, ls, t))(jnp.int32(30))
        assert jaxpr.jaxpr.eqns == [] and not learnt


def test_a_traced_trip_count_is_learnt_from_the_run_where_it_needed_more() -> None:
    """Law: a loop of 10 slots given 5 whose trip count is known only when it runs passes it on
    unchanged and, from the run, tells ``learn_slots`` ``min(trips, 10)`` where that is more than 5
    (6, 10 for 30), and nothing for 5."""
    learnt: list[Any] = []
    run = jax.jit(lambda t: _trips(5, learnt, t))
    for trips in (5, 6, 30):
        assert int(run(jnp.int32(trips))) == trips
    jax.effects_barrier()
    assert [int(v) for v in learnt] == [6, 10]


# ---- gradient stacks: StackPush and StackPop on a stand-in trace ----------------------------------
@dataclass
class _Stacks:
    """A stand-in trace of gradient stacks: the stacks by key, each call a rule makes recorded as
    (method, arguments), and the facts a trace holds (held stacks, counted stacks proved while their
    chain is traced (``dense``), those after it (``full``), counter pushes, constants pushed)."""

    stacks: dict[str, Any] = field(default_factory=dict)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    held: set[str] = field(default_factory=set)
    dense: set[str] = field(default_factory=set)
    full: dict[str, tuple[int, ...]] = field(default_factory=dict)
    counter_pushes: dict[str, tuple[int, int]] = field(default_factory=dict)
    constant: Any = None
    constant_at: Any = None
    ranges: Any = None
    free_pointers: bool = False
    push_limit: Optional[int] = None

    def holds(self, h: Handle) -> bool:
        return f"stack:{h.name}" in self.held

    def held_value(self, n: Any, h: Handle) -> Any:
        self.calls.append(("held_value", n, h))
        return "held"

    def get_stack(self, n: Any, h: Handle) -> Any:
        self.calls.append(("get_stack", n, h))
        return self.stacks[f"stack:{h.name}"]

    def set_stack(self, h: Handle, s: Any) -> None:
        self.calls.append(("set_stack", h))
        self.stacks[f"stack:{h.name}"] = s

    def check(self, ok: Any, message: str, code: str = "kernel", shows: Any = None) -> None:
        """Record the check; its condition must be a boolean (a trace sets the error word by it)."""
        assert np.asarray(ok).dtype == np.bool_, f"a check's condition is a boolean, got {ok!r}"
        self.calls.append(("check", bool(np.asarray(ok)), message, code))

    def pushed_constant(self, h: Handle, index: Any = None) -> Any:
        """The constant pushed on stack ``_H`` (under an index, where given); None for any other."""
        if h != _H:
            return None
        return self.constant if index is None else self.constant_at

    def pending_shape(self, n: Any, h: Handle) -> tuple[int, ...]:
        self.calls.append(("pending_shape", n, h))
        return (2, 3)

    def __getattr__(self, name: str) -> Any:
        """Every other method (``note_push``, ``note_push_shape``, ``note_push_range``, ``skip_push``,
        ``pop_range``, ``read_skipped``): recorded with its arguments."""
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, *args))

    def made(self, name: str) -> list[tuple[Any, ...]]:
        """The recorded calls of method ``name``, their arguments."""
        return [c[1:] for c in self.calls if c[0] == name]

    def checks(self) -> list[tuple[bool, str, str]]:
        return [c[1:] for c in self.calls if c[0] == "check"]


def _stack(ptr: int, capacity: int = 3, record: bool = True) -> Any:
    """A float32 stack of 2-vectors holding entries 10, 11, ... under indices [0], [1], ... below
    ``ptr`` (its index record kept unless it is positional)."""
    buf = jnp.asarray([[10.0 + k] * 2 for k in range(capacity)], jnp.float32)
    idx = jnp.asarray([[k] for k in range(capacity)], jnp.int32) if record else None
    return StackValue(capacity, np.float32, buf, idx, jnp.int32(ptr))


_H = Handle("stack", 4)


def _push(ctx: _Stacks, v: Any, index: Any = (1,)) -> Any:
    n = _node(dtype="float32")
    (out,) = LOWERING_RULES["StackPush"](ctx, n, [_H, jnp.asarray(index, jnp.int32), v])
    return n, out


def test_a_push_on_a_held_stack_returns_its_value_and_touches_nothing() -> None:
    """Law: a held stack's pushes do nothing (its one value is taken as its loop starts): the pushed
    value passes, no stack is read or written and nothing is checked or noted."""
    ctx, v = _Stacks(held={"stack:4"}), jnp.ones(2, jnp.float32)
    _, out = _push(ctx, v)
    assert out is v and ctx.calls == []


def test_a_push_writes_at_the_pointer_records_its_index_and_checks_for_overflow() -> None:
    """Law: a push on a stack with room writes the value at the pointer under its index, moves the
    pointer on, notes the push (its node, handle, value, index) and its shapes, and checks the
    position (the code "unrecorded") and the room (the node's "stack chunk overflow", the code
    "overflow"), both holding; the value is the push's output."""
    ctx, v, ix = _Stacks(stacks={"stack:4": _stack(1)}), jnp.asarray([7.0, 8.0], jnp.float32), (5,)
    n, out = _push(ctx, v, ix)
    s = ctx.stacks["stack:4"]
    assert out is v and int(s.ptr) == 2
    np.testing.assert_array_equal(s.buf[1], [7.0, 8.0])
    assert s.idx[1].tolist() == [5] and ctx.made("set_stack") == [(_H,)] and ctx.made("get_stack") == [(n, _H)]
    assert ctx.checks() == [(True, "a positional stack pushed away from its position", "unrecorded"),
                            (True, f"{describe_node(n)}: stack chunk overflow", "overflow")]
    ((pn, ph, pv, pix),) = ctx.made("note_push")
    assert (pn, ph, pv) == (n, _H, v) and pix.tolist() == [5]
    ((sh, sv, six),) = ctx.made("note_push_shape")
    assert (sh, sv) == (_H, v) and six.tolist() == [5]


@pytest.mark.parametrize("free, limit, ptr", [(False, None, 3), (True, None, 4), (True, 5, 4)])
def test_a_push_past_the_capacity_fails_its_overflow_check(free: bool, limit: Optional[int], ptr: int) -> None:
    """Law: a push on a full stack (3 of 3) fails the overflow check; the pointer stops at the
    capacity unless the trace's pointers run free (then it counts on), and with a ``push_limit`` of
    5 the push at 3 is no overflow (the pointer counts up to the limit)."""
    ctx = _Stacks(stacks={"stack:4": _stack(3)}, free_pointers=free, push_limit=limit)
    n, _ = _push(ctx, jnp.zeros(2, jnp.float32), (3,))
    assert ctx.checks()[1] == (limit is not None, f"{describe_node(n)}: stack chunk overflow", "overflow")
    assert int(ctx.stacks["stack:4"].ptr) == ptr


def test_a_positional_push_away_from_its_position_fails_the_unrecorded_check() -> None:
    """Law: a push on a positional stack (no index record) under an index other than its pointer
    fails the check with the code "unrecorded" (the run goes back to index records); at the pointer
    it holds."""
    for index, holds in [((1,), True), ((2,), False)]:
        ctx = _Stacks(stacks={"stack:4": _stack(1, record=False)})
        _push(ctx, jnp.zeros(2, jnp.float32), index)
        assert ctx.checks()[0] == (holds, "a positional stack pushed away from its position", "unrecorded")


def test_a_push_of_a_value_of_another_shape_names_the_push() -> None:
    """Law: a value whose shape differs from the stack's elements is an ``UnsupportedError`` naming
    the push, then the stacks' words."""
    ctx = _Stacks(stacks={"stack:4": _stack(1)})
    with pytest.raises(UnsupportedError) as e:
        _push(ctx, jnp.zeros(3, jnp.float32))
    n = _node(dtype="float32")
    assert str(e.value).startswith(f"{describe_node(n)}: fast backend: a value of shape (3,)")
    assert e.value.__cause__ is None and e.value.__suppress_context__


def test_a_counted_push_of_a_counter_writes_nothing() -> None:
    """Law: on a counted stack whose push pushes its chain's counter (its pops compute the value
    from their index), a push notes itself (no index) and its range and writes nothing."""
    ctx = _Stacks(stacks={"stack:4": _stack(1)}, dense={"stack:4"}, counter_pushes={"stack:4": (0, 1)})
    v = jnp.int32(3)
    n, out = _push(ctx, v)
    assert out is v and ctx.made("note_push") == [(n, _H, v)] and ctx.made("note_push_range") == [(_H, v)]
    assert ctx.made("set_stack") == [] and ctx.checks() == []


def test_a_counted_push_of_the_known_constant_writes_nothing() -> None:
    """Law: on a counted stack every push of which pushed the constant now pushed, a known value
    is noted (no index) and skipped, and nothing is written; with no such constant it is written
    at the pointer, unchecked (the push is proved to fit), its index record left as it is (its
    pops read by position), its range noted."""
    v = np.float32([1.0, 2.0])
    ctx = _Stacks(stacks={"stack:4": _stack(1)}, dense={"stack:4"}, constant=v)
    n, out = _push(ctx, v)
    assert out is v and ctx.made("note_push") == [(n, _H, v)] and ctx.made("skip_push") == [(_H,)]
    assert ctx.made("set_stack") == [] and ctx.checks() == []
    ctx = _Stacks(stacks={"stack:4": _stack(1)}, dense={"stack:4"})
    n, out = _push(ctx, v, (5,))
    assert ctx.made("skip_push") == [] and ctx.checks() == [] and ctx.made("note_push_range") == [(_H, v)]
    assert ctx.made("set_stack") == [(_H,)] and int(ctx.stacks["stack:4"].ptr) == 2
    assert ctx.stacks["stack:4"].idx[1].tolist() == [1]  # the index record left as it was
    np.testing.assert_array_equal(ctx.stacks["stack:4"].buf[1], v)
    assert [len(c) for c in ctx.made("note_push")] == [3, 4]


def test_a_counted_push_of_a_traced_value_is_written_unchecked() -> None:
    """Law: on a counted stack a traced value is written at the pointer with no check (proved to
    fit), its range noted, and the push noted with its index."""
    ctx = _Stacks(stacks={"stack:4": _stack(1)}, dense={"stack:4"})
    n, _ = _push(ctx, jnp.asarray([1.0, 2.0], jnp.float32))
    assert ctx.checks() == [] and len(ctx.made("note_push_range")) == 1
    assert int(ctx.stacks["stack:4"].ptr) == 2 and [len(c) for c in ctx.made("note_push")] == [4]


def _pop(ctx: _Stacks, index: Any = (1,), dtype: str = "float32") -> Any:
    n = _node(dtype=dtype)
    (out,) = LOWERING_RULES["StackPop"](ctx, n, [_H, jnp.asarray(index, jnp.int32)])
    return n, out


def test_a_pop_of_a_held_stack_is_its_held_value() -> None:
    """Law: a pop of a held stack returns the held value, reading no stack."""
    ctx = _Stacks(held={"stack:4"})
    n, out = _pop(ctx)
    assert out == "held" and ctx.calls == [("held_value", n, _H)]


def test_a_pop_of_a_stack_never_pushed_fails_as_underflow_with_zeros() -> None:
    """Law: a pop of a stack no push has made fails its check (the node's "StackPop on an empty
    stack", the code "underflow") and returns zeros of the shape a push would have given and the
    node's dtype (int32 here: not JAX's default float)."""
    ctx = _Stacks(stacks={"stack:4": StackValue(3, np.int32)})
    n, out = _pop(ctx, dtype="int32")
    assert ctx.checks() == [(False, f"{describe_node(n)}: StackPop on an empty stack", "underflow")]
    assert ctx.made("get_stack") == [(n, _H)] and ctx.made("pending_shape") == [(n, _H)]
    assert out.shape == (2, 3) and out.dtype == np.int32 and not np.asarray(out).any()


def test_a_pop_reads_the_top_entry_and_checks_it_and_its_index() -> None:
    """Law: a pop returns the top entry and lowers the pointer, checking that the stack was not
    empty ("underflow") and that the entry was pushed under the popped index; a pop of an empty
    stack fails the first, its pointer kept at 0 unless the trace's pointers run free; a constant
    pushed under that index, or by every push, is returned instead of the entry."""
    for index, match in [((1,), True), ((0,), False)]:
        ctx = _Stacks(stacks={"stack:4": _stack(2)})
        n, out = _pop(ctx, index)
        np.testing.assert_array_equal(out, [11.0, 11.0])
        assert int(ctx.stacks["stack:4"].ptr) == 1 and ctx.made("set_stack") == [(_H,)]
        assert ctx.checks() == [
            (True, f"{describe_node(n)}: StackPop on an empty stack", "underflow"),
            (match, f"{describe_node(n)}: StackPop: the popped value was pushed under another iteration index "
                    "(pushes and pops are not in reverse order)", "kernel")]
    for free, ptr in [(False, 0), (True, -1)]:  # free pointers count down past the bottom
        ctx = _Stacks(stacks={"stack:4": _stack(0)}, free_pointers=free)
        n, _ = _pop(ctx)
        assert ctx.checks()[0][0] is False and int(ctx.stacks["stack:4"].ptr) == ptr
    ctx = _Stacks(stacks={"stack:4": _stack(2)}, constant_at="at 1")
    assert _pop(ctx)[1] == "at 1"
    ctx = _Stacks(stacks={"stack:4": _stack(2)}, constant="every", constant_at="at 1")
    assert _pop(ctx)[1] == "every"


_OUT = ("StackPop: the popped value was pushed under another iteration index (pushes and pops are not in "
        "reverse order)")


@pytest.mark.parametrize("ranges, index, checked", [([(0, 2)], (1,), None), ([(0, 3)], (1,), True),
                                                    (None, (3,), False), ([(-1, 2)], (2,), True)])
def test_a_counted_pop_reads_its_indexs_position_checked_unless_proved(ranges: Any, index: Any,
                                                                       checked: Optional[bool]) -> None:
    """Law: a pop of a full counted stack (3 entries) reads the entry at its index's position, its
    range noted, with no check where the index's known range lies inside the stack, else a check
    that the index is in range (failing for 3); the pointer is left as it is."""
    asked: list[Any] = []
    each = SimpleNamespace(each=lambda ix: (asked.append(ix), ranges)[1])
    ctx = _Stacks(stacks={"stack:4": _stack(3)}, full={"stack:4": (3,)}, ranges=each)
    n, out = _pop(ctx, index)
    want = [] if checked is None else [(checked, f"{describe_node(n)}: {_OUT}", "kernel")]
    assert ctx.checks() == want and ctx.made("set_stack") == [] and [a.tolist() for a in asked] == [list(index)]
    np.testing.assert_array_equal(out, [10.0 + min(index[0], 2)] * 2)
    ((ph, pv),) = ctx.made("pop_range")
    assert ctx.made("read_skipped") == [(n, _H)] and ph == _H and pv is out


def test_a_counted_pop_of_a_constant_or_a_counter_reads_nothing() -> None:
    """Law: a pop of a full counted stack whose pushes all pushed one constant returns it; one whose
    push pushed its chain's counter (level 0, entered at 2) returns ``index[0] + 2``, its range
    noted; neither reads the stack."""
    each = SimpleNamespace(each=lambda ix: [(0, 2)])
    ctx = _Stacks(stacks={"stack:4": _stack(3)}, full={"stack:4": (3,)}, ranges=each, constant="c")
    assert _pop(ctx)[1] == "c" and ctx.made("pop_range") == [] and ctx.made("read_skipped") == []
    ctx = _Stacks(stacks={"stack:4": _stack(3)}, full={"stack:4": (3,)}, ranges=each,
                  counter_pushes={"stack:4": (0, 2)})
    _, out = _pop(ctx, (1,))
    ((ph, pv),) = ctx.made("pop_range")
    assert int(out) == 3 and ph == _H and pv is out and ctx.made("read_skipped") == []


def test_only_a_counted_stacks_push_skips_writing_a_known_constant() -> None:
    """Law: a push on a stack that is not counted writes a value known while tracing even where
    every push of the stack pushed it (its pops read the buffer): no note of a constant, no skip.
    Kills ``proved and is_static(v)`` made ``proved or is_static(v)``."""
    v = np.float32([1.0, 2.0])
    ctx = _Stacks(stacks={"stack:4": _stack(1)}, constant=v)
    _push(ctx, v, (1,))
    assert ctx.made("skip_push") == [] and [len(c) for c in ctx.made("note_push")] == [4]
    assert int(ctx.stacks["stack:4"].ptr) == 2 and len(ctx.checks()) == 2
