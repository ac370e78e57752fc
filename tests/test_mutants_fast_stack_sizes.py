"""Laws of the gradient stacks as sizes (``turnout.fast.stack_sizes``), stated on the pure functions
themselves: which pushes make a stack static, its bytes at a capacity, which stacks the fused call
makes inside itself, how errors name a stack, the capacity ladder and the rung a run starts on, and
which Variables a program reads and assigns.

Each law kills mutants of the full set of ``fast/stack_sizes.py`` (issue 40, part 3; the run is in
docs/checking.rst). The backend's tests reach these functions only through whole runs, where most
of these mutants change no value a test compares (a stack allocated while tracing instead of before
the run, a byte count off by a record, an error that names the loop less well), and each of them
costs a compilation; here every law runs in milliseconds on graphs that are built, never run.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.fast.chunk_store import StackInfo
from turnout.fast.functionalize import functionalize
from turnout.fast.regions import Program
from turnout.fast.stack_sizes import (
    StackMarks,
    capacity_ladder,
    filled_and_emptied_inside,
    inside_stacks,
    stack_bytes,
    stack_dtype,
    stack_infos,
    stack_source_var,
    static_push_shapes,
    static_stack_shapes,
    variables_of,
)
from turnout.fast.state_keys import stack_key, stack_source
from turnout.fast.values import Handle
from turnout.graph import Node


def _loop_gradient(shape: Any = (2,), name: str = "rnn", swap: bool = True) -> tuple[tn.Graph, tn.Tensor, int]:
    """A named while loop of ``n`` trips over ``x`` (of ``shape``) and its gradient: one gradient
    stack, pushed in the forward loop and popped in the backward one; the graph, ``dx`` and the
    source line of the ``while_loop`` call."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, shape, name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        line = inspect.stack()[0].lineno + 1
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * x), [tn.constant(0), tn.ones_like(x)],
                             name=name, swap_memory=swap)
        (dx,) = tn.gradients(tn.reduce_sum(y), [x])
    assert dx is not None
    return g, dx, line


def _ops(g: tn.Graph, op: str) -> list[Node]:
    return [n for n in g.nodes if n.op == op]


# -- which pushes make a stack static ---------------------------------------------------------------


def _stack_with_pushes(shapes: list[Any]) -> tuple[tn.Graph, Node]:
    """A hand-built stack with one push of a placeholder value per shape of ``shapes`` (in order)."""
    g = tn.Graph()
    with g.as_default():
        sn = g.create_node("StackNew", [], {"elem_dtype": "float32"}, name="s")
        idx = tn.placeholder(tn.int32, [1], name="i")
        for k, shape in enumerate(shapes):
            v = tn.placeholder(tn.float32, shape, name=f"v{k}")
            g.create_node("StackPush", [sn.outputs[0], idx, v], {}, name=f"push{k}")
    return g, sn


def test_a_push_is_static_with_its_value_shape_then_its_index_shape() -> None:
    """``static_push_shapes``: a StackPush's inputs are (handle, index, value); its shapes are the
    value's (element) shape and then the index's, and only where every dimension of both is known.
    Kills: input 3 or input 2 read for either shape, the result swapped or dropped, the test of
    ``ok`` inverted or made always true or false."""
    g, _, _ = _loop_gradient(shape=(2, 3))
    (push,) = _ops(g, "StackPush")
    assert push.inputs[2].shape == (2, 3) and push.inputs[1].shape == (1,)
    assert static_push_shapes(push) == ((2, 3), (1,))


@pytest.mark.parametrize("shape", [None, [None, 2], [2, None]], ids=["unknown rank", "first dim", "last dim"])
def test_a_push_of_unknown_value_shape_is_not_static(shape: Any) -> None:
    """A push whose value has an unknown rank or an unknown dimension has no static shapes (None),
    even though its index shape is known: its stack is made at its first push, while tracing.
    Kills: ``and`` of the three conditions turned into ``or`` (either place), the result given
    whatever ``ok`` says."""
    g, _ = _stack_with_pushes([shape])
    (push,) = _ops(g, "StackPush")
    assert push.inputs[1].shape == (1,)
    assert static_push_shapes(push) is None


def test_a_stack_is_static_where_every_push_agrees() -> None:
    """``static_stack_shapes``: StackNew id -> (element shape, index shape) for a stack whose every
    push is static with the same shapes (two pushes alike count once); nodes other than pushes are
    not read. Kills: the dict or the source dropped, the push test inverted, renamed or made always
    true or false, the handle read from input 1, an entry kept only where it differs from the one
    before, the entries kept being the unknown ones."""
    g, sn = _stack_with_pushes([[3], [3]])
    assert static_stack_shapes(list(g.nodes)) == {sn.id: ((3,), (1,))}
    g, _, _ = _loop_gradient(shape=(2,))
    (push,) = _ops(g, "StackPush")
    src = stack_source(push.inputs[0])
    assert src is not None and static_stack_shapes(list(g.nodes)) == {src.id: ((2,), (1,))}


@pytest.mark.parametrize("shapes", [[[3], [4]], [[4], [3]], [None, [3]], [[3], None], [[3], [4], [3]]],
                         ids=["3 then 4", "4 then 3", "unknown then 3", "3 then unknown", "3, 4, 3"])
def test_a_stack_whose_pushes_disagree_is_not_static(shapes: list[Any]) -> None:
    """A stack pushed with two different shapes, or once with an unknown shape, in any order, is not
    static: no one buffer holds its entries. Kills: the comparison with the earlier push's shapes
    dropped (made always true, read under another key, or without the default for a first push),
    so that the last push decides."""
    g, _ = _stack_with_pushes(shapes)
    assert static_stack_shapes(list(g.nodes)) == {}


# -- bytes, and which stacks the fused call makes inside itself ---------------------------------------


def test_a_stack_holds_its_values_and_an_int32_index_record_per_entry() -> None:
    """``stack_bytes``: ``capacity`` entries, each the element's bytes (its dtype's itemsize times
    its size) and, by default, its index record (int32: 4 bytes per index element); ``record=False``
    counts the values alone. Kills every arithmetic swap, the dtype dropped (numpy reads ``None``
    as float64), the record's default or its 4 bytes changed."""
    shapes = ((2, 3), (2,))
    assert stack_bytes(10, np.float32, shapes) == 10 * (6 * 4 + 2 * 4) == 320
    assert stack_bytes(10, np.float32, shapes, record=True) == 320
    assert stack_bytes(10, np.float32, shapes, record=False) == 10 * 6 * 4 == 240
    assert stack_bytes(7, np.int8, ((5,), (3,)), record=False) == 35
    assert stack_bytes(0, np.float64, shapes) == 0


def test_the_call_makes_inside_the_stacks_whose_values_fit_the_limit() -> None:
    """``inside_stacks``: a static stack is made inside the fused call where its value buffer at
    ``capacity`` (without its index record, which the call does not make) is at most ``limit``
    bytes, the limit itself included. Kills: the record counted, the limit made strict, an argument
    dropped or replaced (a float32 stack counted at float64's 8 bytes)."""
    static = {"stack:1": (np.float32, ((4,), (1,))), "stack:2": (np.float32, ((8,), (1,))),
              "stack:3": (np.float64, ((4,), (1,)))}
    # at capacity 8: 128, 256 and 256 bytes of values (160, 288, 288 with the records)
    assert set(inside_stacks(static, 8, 128)) == {"stack:1"}
    assert set(inside_stacks(static, 8, 256)) == {"stack:1", "stack:2", "stack:3"}
    assert set(inside_stacks(static, 8, 255)) == {"stack:1"}
    assert set(inside_stacks(static, 16, 255)) == set()
    assert inside_stacks(static, 8, 128)["stack:1"] == static["stack:1"]


# -- how errors name a stack ----------------------------------------------------------------------


def test_a_stack_is_named_by_its_loop_its_frame_and_the_line_that_made_the_loop() -> None:
    """``stack_infos``: each StackNew's key maps to its forward loop's name, how errors name it
    (``loop "rnn" (frame rnn/frame0, created at FILE:LINE)``, the line of the ``while_loop`` call,
    read from the first Enter of that frame) and its ``swap_memory``. Kills: the first Enter's
    line replaced by a later Enter's (the gradient's, in the same frame), the line or the loop
    name lost, the frame read under another name, other nodes named too, the key, the swap flag
    or any field of ``StackInfo`` dropped or replaced."""
    g, _, line = _loop_gradient(name="rnn", swap=True)
    (sn,) = _ops(g, "StackNew")
    frame = sn.attrs["frame_name"]
    enters = [n for n in _ops(g, "Enter") if n.attrs["frame_name"] == frame]
    assert len({n.source for n in enters}) > 1  # (the gradient adds an Enter of its own line)
    where = f'loop "rnn" (frame {frame}, created at {__file__.rsplit("/", 1)[-1]}:{line})'
    assert stack_infos(g.nodes) == {stack_key(Handle("stack", sn.id)): StackInfo("rnn", where, True)}
    assert stack_infos(iter(g.nodes)) == stack_infos(g.nodes)  # (any iterable: it is read twice)


def test_a_stack_of_no_known_loop_is_named_by_its_frame_alone() -> None:
    """A hand-built StackNew with no attrs: its loop and frame are "?", no line is claimed, and it
    does not swap; one with a frame but no loop name is named by its frame. Kills: the defaults
    changed (``None``, another string, ``swap_memory`` True), the "created at" part claimed for a
    frame no Enter made."""
    g = tn.Graph()
    with g.as_default():
        bare = g.create_node("StackNew", [], {}, name="s")
        framed = g.create_node("StackNew", [], {"frame_name": "f0", "swap_memory": False}, name="t")
    got = stack_infos(g.nodes)
    assert got == {stack_key(Handle("stack", bare.id)): StackInfo("?", 'loop "?" (frame ?)', False),
                   stack_key(Handle("stack", framed.id)): StackInfo("f0", 'loop "f0" (frame f0)', False)}


# -- the capacity ladder and the rung a run starts on ---------------------------------------------


def test_the_ladder_climbs_by_its_ratio_rounded_up() -> None:
    """``capacity_ladder``: ``first``, then each rung ``ceil(rung * ratio)`` (more than the last:
    ``FastOptions`` refuses a ratio under 1.1) while under ``top``; then ``top`` once. Kills: the
    loop run to ``top`` itself (``top`` twice), the rounding, the ratio divided, the least step of
    one entry made two (at 2 entries and a ratio of 1.1 the next rung is 3, not 4)."""
    assert capacity_ladder(1024) == [128, 160, 200, 250, 313, 392, 490, 613, 767, 959, 1024]
    assert capacity_ladder(20, first=2, ratio=1.1) == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 20]
    assert capacity_ladder(128) == [128] and capacity_ladder(64) == [64]
    assert capacity_ladder(16, first=4, ratio=2) == [4, 8, 16]


def test_a_run_starts_on_the_smallest_rung_that_holds_its_window() -> None:
    """``StackMarks.start``: the smallest rung holding the largest mark of the window (a mark equal
    to a rung fits it), and the top where none does. Kills: the comparison made strict, the top
    read as the second rung or the one before it, no rung (``None``) past the top."""
    marks = StackMarks([16, 24, 36, 100], window=3)
    assert marks.start() == 16
    assert marks.note(24) == 24
    assert marks.note(25) == 36
    assert marks.note(500) == 100


def test_a_window_of_one_run_descends_at_once() -> None:
    """With ``window`` 1 only the last run counts: a short run after a long one starts the next on
    the lowest rung; a window of 0 is one of 1. Kills: the window's length made unbounded or at
    least 2."""
    for window in (1, 0):
        marks = StackMarks([16, 24, 36, 100], window=window)
        assert marks.note(90) == 100
        assert marks.note(3) == 16


def test_a_longer_window_descends_once_every_long_run_left_it() -> None:
    """With ``window`` 2 a long run keeps the next run on its rung until two shorter runs followed it."""
    marks = StackMarks([16, 24, 36, 100], window=2)
    assert [marks.note(m) for m in (90, 3, 3, 20)] == [100, 100, 16, 24]


def test_a_handed_back_run_chooses_the_rung_once() -> None:
    """A run a lane handed back (its mark left in ``pending``, which the lane writes and 0 means
    none) starts the general path on the rung that holds it (``begin``), and is spent then: the run
    after starts from the window alone; a run noted spends it too. Kills: ``begin`` returning
    nothing, ``pending`` left set, a handed-back run of one entry claimed before any was."""
    marks = StackMarks([16, 24, 36, 100], window=2)
    assert marks.pending == 0
    marks.pending = 30
    assert marks.begin() == 36 and marks.pending == 0 and marks.start() == 16
    marks.pending = 30
    assert marks.note(5) == 16 and marks.pending == 0 and marks.start() == 16


# -- stacks filled and emptied inside one root region --------------------------------------------


def _descent_loop() -> tuple[tn.Graph, list[tn.Tensor], list[tn.Tensor]]:
    """Gradient descent written as a loop: each outer iteration runs a loop and its gradient, so
    that loop's stack is pushed and popped inside the outer loop's region."""
    g = tn.Graph()
    with g.as_default():
        x0 = tn.placeholder(tn.float64, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")

        def step(i: Any, x: Any) -> Any:
            _, y = tn.while_loop(lambda j, z: j < 3, lambda j, z: (j + 1, z * x), [tn.constant(0), tn.ones_like(x)])
            (dx,) = tn.gradients(y, [x])
            assert dx is not None
            return i + 1, x - 0.01 * dx

        _, xf = tn.while_loop(lambda i, x: i < n, step, [tn.constant(0), x0])
    return g, [xf], [x0, n]


def test_a_stack_pushed_and_popped_inside_one_loop_is_seen() -> None:
    """``filled_and_emptied_inside``: true where one root region both pushes and pops a stack (a
    loop whose body takes the gradient of a loop of its own), even after root items that are plain
    nodes. Kills: the search stopped at the first plain node, a region's pushes or pops not seen
    (their op names changed, the handle read from input 1), pushes and pops put in one set, the
    answers inverted."""
    g, fetches, feeds = _descent_loop()
    program = functionalize(g, fetches, feeds)
    assert isinstance(program.items[0], Node)
    assert filled_and_emptied_inside(program) is True


def test_a_loop_and_its_gradient_at_the_root_fill_and_empty_nothing_inside() -> None:
    """A loop's stack pushed in the root's forward loop and popped in the root's backward loop is
    filled and emptied in two regions, not inside one: false. Kills: the union of pushes and pops
    tested instead of their intersection, every node's first input taken as a handle."""
    g, dx, _ = _loop_gradient()
    program = functionalize(g, [dx], [n.outputs[0] for n in _ops(g, "Placeholder")])
    assert filled_and_emptied_inside(program) is False


def test_a_region_that_pushes_one_stack_and_pops_another_fills_and_empties_neither() -> None:
    """Only the same stack pushed and popped in one region counts: a region (here a stand-in,
    ``item_nodes`` reads only its ``nodes``) that pushes one stack and pops another does not. Kills:
    the stack's id replaced by a constant, which makes any push and any pop the same stack."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        ys = [tn.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), [tn.constant(0), x], name=name)[1]
              for name in ("a", "b")]
        tn.gradients(ys[0] + ys[1], [x])
    stacks = {n.id: (n.attrs["loop_name"], n) for n in _ops(g, "StackNew")}
    by_loop: dict[tuple[str, str], list[Node]] = {}
    for n in _ops(g, "StackPush") + _ops(g, "StackPop"):
        src = stack_source(n.inputs[0])
        assert src is not None
        by_loop.setdefault((stacks[src.id][0], n.op), []).append(n)
    push_a, pop_b = by_loop[("a", "StackPush")], by_loop[("b", "StackPop")]
    assert push_a and pop_b
    assert filled_and_emptied_inside(Program([SimpleNamespace(nodes=[*push_a, *pop_b])], {}, [])) is False  # type: ignore[list-item]
    pop_a = by_loop[("a", "StackPop")]
    assert filled_and_emptied_inside(Program([SimpleNamespace(nodes=[*push_a, *pop_a])], {}, [])) is True  # type: ignore[list-item]


# -- the Variables a program reads and assigns ------------------------------------------------------


def _assigned_through_each_forwarding_op() -> tuple[tn.Graph, dict[str, tn.Tensor]]:
    """Variables assigned through handles that pass an Enter (in a loop), a Switch, an Identity and
    a Merge (a cond whose branches return the handle), and one only read; and a value read from a
    Variable used where a handle goes (``ReadVariable`` is no forwarding op)."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.float32(1.0), name="w")
        v = tn.Variable(np.float32(2.0), name="v")
        u = tn.Variable(np.float32(3.0), name="u")
        r = tn.Variable(np.float32(4.0), name="r")
        p = tn.placeholder(tn.bool, [], name="p")
        tn.while_loop(lambda i: i < 3.0, lambda i: i + w.assign_add(1.0) * 0.0 + 1.0, [tn.constant(0.0)])
        h = tn.cond(p, lambda: tn.identity(v.handle), lambda: tn.identity(v.handle))
        g.create_node("AssignVariable", [h, tn.constant(np.float32(5.0))], v._attrs(), name="v_via_merge")
        g.create_node("AssignSubVariable", [tn.identity(u.handle), tn.constant(np.float32(1.0))], u._attrs(),
                      name="u_via_identity")
        read = r.read()
    return g, {"read": read}


def test_a_handle_is_followed_through_enter_switch_identity_and_merge() -> None:
    """``stack_source_var``: a handle passes through Enter, Switch, Identity and Merge unchanged, so
    an op's first input read through any of them names its Variable. Kills: any of the four op
    names changed, the walk's test inverted, the handle read from input 1, the VarHandle test
    inverted, made always true or false, or its ``var_name`` read under another name."""
    g, _ = _assigned_through_each_forwarding_op()
    got = {n.name: stack_source_var(n) for n in g.nodes if n.op.startswith("Assign")}
    chains = {}
    for n in g.nodes:
        if n.op.startswith("Assign"):
            src, ops = n.inputs[0].node, []
            while src.op != "VarHandle":
                ops.append(src.op)
                src = src.inputs[0].node
            chains[n.name] = ops
    assert {"Enter", "Switch", "Identity", "Merge"} <= {op for ops in chains.values() for op in ops}
    assert sorted(got.values()) == ["u", "v", "w"]


def test_a_value_read_from_a_variable_is_not_its_handle() -> None:
    """The walk follows only the forwarding ops: a ``ReadVariable``'s value leads to no Variable,
    although its own input is the handle. Kills: the walk continued through any op with inputs."""
    g, t = _assigned_through_each_forwarding_op()
    with g.as_default():
        user = g.create_node("Identity", [t["read"]], {}, name="use")
    assert stack_source_var(user) is None


def test_a_program_uses_every_variable_it_holds_a_handle_of_and_assigns_those_it_writes() -> None:
    """``variables_of``: every VarHandle by its Variable's name, and the names of the Variables an
    ``Assign*`` op writes (never None, for a handle that leads to no Variable): a Variable only
    read is used, not assigned. Kills: the
    VarHandle test inverted or renamed, ``var_name`` read under another name, the ``Assign`` prefix
    changed, the handle not followed."""
    g, _ = _assigned_through_each_forwarding_op()
    used, assigned = variables_of(iter(g.nodes))
    assert set(used) == {"w", "v", "u", "r"} and all(used[k].op == "VarHandle" for k in used)
    assert assigned == {"w", "v", "u"}
    with g.as_default():
        stack = g.create_node("StackNew", [], {"elem_dtype": "float32"}, name="not_a_variable")
        attrs = {"var_name": "q", "dtype": "float32", "shape": []}
        g.create_node("AssignVariable", [stack.outputs[0], tn.constant(np.float32(1.0))], attrs, name="odd")
    assert variables_of(g.nodes)[1] == {"w", "v", "u"}


# -- a stack's dtype --------------------------------------------------------------------------


@pytest.mark.parametrize("attrs, want", [({"elem_dtype": "float64"}, np.float64), ({"dtype": "int32"}, np.int32),
                                         ({"elem_dtype": "float16", "dtype": "int32"}, np.float16),
                                         ({"elem_dtype": "no such type", "dtype": "int8"}, np.int8),
                                         ({}, np.float32), ({"elem_dtype": None}, np.float32)])
def test_a_stack_has_its_elem_dtype_else_its_dtype_else_float32(attrs: dict[str, Any], want: Any) -> None:
    """``stack_dtype``: the entries' dtype is the StackNew's ``elem_dtype``, else its ``dtype``, where
    numpy reads the name; else float32. Kills: either attribute read under another name, no
    attribute read, ``None`` given to numpy (float64)."""
    sn = SimpleNamespace(attrs=attrs)
    assert stack_dtype(sn) == np.dtype(want)  # type: ignore[arg-type]
