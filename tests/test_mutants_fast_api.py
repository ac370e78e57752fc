"""Laws of ``to_jax`` (``turnout.fast.api``): a Turnout graph as a pure JAX function of its inputs.
One tensor gives one value and a list or tuple a tuple; anything else, or a call with the wrong
number of inputs, is an ``ArgumentError`` naming ``to_jax``; an input may be any tensor (the graph
above it is cut) and is converted to its dtype; Variables are read at their initial values, inside
loops too, and assignments are dropped; gradient stacks are allocated, inside loops, with the
program's dtypes; a TensorArray fetched is its buffer, of ``stack_capacity`` entries where its size
is dynamic; ``max_iterations`` bounds a loop; a fetch that is dead whenever the program runs
raises ``DeadFetchError`` naming it. Each law kills mutants of the full set of ``fast/api.py``
(issue 40, part 3; ``python tools/mutation.py --module fast/api.py --all``, which mutates ``to_jax``
although ``@checked`` decorates it: ``"decorated"`` in the tool's list).

The functions are called eagerly (no ``jax.jit``) on small programs and compared with the reference
interpreter; the runs inside ``jax.jit`` and ``jax.vmap`` are in ``test_fast.py``.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

import turnout as tn
from turnout import raw
from turnout.errors import ArgumentError, DeadFetchError
from turnout.fast import to_jax


def _program() -> dict[str, Any]:
    """``y = 3 x``; ``h <- sin(h w)`` for ``n`` steps from ``y``, ``w`` a Variable (2.0) read in the
    loop's body; the gradient of ``h`` w.r.t. ``x`` (its stacks pushed in the loop); an assignment
    of ``w`` that the function drops."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        w = tn.Variable(np.float32(2.0), name="w")
        y = x * 3.0
        i, h = tn.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tn.sin(h * w)), [tn.constant(0), y])
        (dx,) = tn.gradients(h, [x])
        bump = w.assign(w + 1.0)
    return {"g": g, "x": x, "n": n, "y": y, "i": i, "h": h, "dx": dx, "bump": bump}


@pytest.fixture(scope="module")
def prog() -> dict[str, Any]:
    return _program()


def _close(got: Any, want: Any) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5)


def test_a_list_gives_a_tuple_a_tensor_one_value(prog: dict[str, Any]) -> None:
    """A list or tuple of outputs gives a tuple of values in their order, one tensor gives its value
    alone, each the reference interpreter's (the loop's Variable read in its body at its initial
    value, the gradient's stacks allocated in the loop). Kills ``single`` set to None or its tests
    made always false or always true, the list of outputs or inputs taken of None, the program, its
    inputs or its emitter's program or bound dropped, the Variables and stacks looked for under
    another op name or in the loops' nodes not at all, the Variable's key or value broken, the stack's
    key, capacity or dtype broken, the environment or an output dropped, and a value taken as a
    TensorArray's buffer."""
    g, x, n = prog["g"], prog["x"], prog["n"]
    outs = [prog["i"], prog["h"], prog["dx"]]
    want = tn.Session(g).run(outs, {x: 0.5, n: 4})
    for kind in (list, tuple):
        got = to_jax(g, [x, n], kind(outs))(np.float32(0.5), np.int32(4))
        assert isinstance(got, tuple)
        _close(got, want)
    one = to_jax(g, (x, n), prog["h"])(np.float32(0.5), np.int32(4))
    assert not isinstance(one, tuple) and np.asarray(one).shape == ()
    np.testing.assert_allclose(np.asarray(one), want[1], rtol=1e-5)


def test_variables_are_read_at_their_initial_values_and_assignments_dropped(prog: dict[str, Any]) -> None:
    """The function is pure: a Variable is read at its initial value however often it runs, and an
    assignment it fetches gives the assigned value without keeping it."""
    bump = to_jax(prog["g"], [], prog["bump"])
    assert float(bump()) == float(bump()) == 3.0
    h = to_jax(prog["g"], [prog["x"], prog["n"]], prog["h"])
    assert float(h(np.float32(0.5), np.int32(1))) == pytest.approx(np.sin(1.5 * 2.0))


def test_an_input_may_be_any_tensor_and_is_converted_to_its_dtype(prog: dict[str, Any]) -> None:
    """An input need not be a placeholder: feeding ``y`` cuts the graph above it, as a feed does
    (``functionalize``'s inputs). A Python int given for a float32 input is converted to float32.
    Kills the inputs not handed to ``functionalize`` and the conversion given no dtype."""
    g, y, n = prog["g"], prog["y"], prog["n"]
    got = to_jax(g, [y, n], prog["h"])(np.float32(1.5), np.int32(4))
    np.testing.assert_allclose(np.asarray(got), tn.Session(g).run(prog["h"], {y: 1.5, n: 4}), rtol=1e-5)
    tripled = to_jax(g, [prog["x"]], y)(2)
    assert tripled.dtype == np.float32 and float(tripled) == 6.0
    same = to_jax(g, [prog["x"]], prog["x"])(2)  # (the input itself: no op to promote it)
    assert same.dtype == np.float32 and float(same) == 2.0


def test_max_iterations_bounds_a_loop(prog: dict[str, Any]) -> None:
    """``max_iterations`` bounds every loop of the function (its run-time check cannot raise inside
    a trace, so the loop stops there). Kills the bound set to None or taken of None."""
    f = to_jax(prog["g"], [prog["x"], prog["n"]], prog["i"], max_iterations=3)
    assert int(f(np.float32(0.5), np.int32(10))) == 3
    assert int(f(np.float32(0.5), np.int32(2))) == 2


def test_outputs_of_another_kind_are_refused_naming_to_jax(prog: dict[str, Any]) -> None:
    """Outputs must be a tensor or a list or tuple of them: a dict is an ``ArgumentError`` that says
    so and shows what it got. Kills the test inverted (a list refused) and the message dropped."""
    with pytest.raises(ArgumentError, match=r"to_jax: outputs must be a tensor or a list or tuple of them, got \{"):
        to_jax(prog["g"], [prog["x"]], {"h": prog["h"]})


def test_a_call_with_the_wrong_number_of_inputs_is_refused(prog: dict[str, Any]) -> None:
    """The function takes exactly its inputs: more or fewer is an ``ArgumentError`` with both counts.
    Kills the count's test inverted and the message dropped."""
    f = to_jax(prog["g"], [prog["x"]], prog["y"])
    for args in ((), (np.float32(1.0), np.float32(2.0))):
        with pytest.raises(ArgumentError, match=f"to_jax function takes 1 inputs, got {len(args)}"):
            f(*args)


def test_a_fetch_dead_whenever_the_program_runs_is_refused_naming_it() -> None:
    """A fetch on a branch that never runs (the false side of a Switch on a constant true) cannot be
    a value: ``DeadFetchError`` names it. Kills its message dropped."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        no, yes = raw.switch(x, tn.constant(True), name="sw")
    assert float(to_jax(g, [x], yes)(np.float32(2.0))) == 2.0
    with pytest.raises(DeadFetchError, match=f"output {no.name} is dead"):
        to_jax(g, [x], no)(np.float32(2.0))


def test_stacks_keep_a_float64_program_s_dtype() -> None:
    """In 64-bit mode the gradient stacks are allocated with the dtype pushed (``stack_dtype``): a
    float64 loop's gradient is the reference's to float64 precision."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        _, h = tn.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, tn.sin(h) * 1.0000001), [tn.constant(0), x])
        (dx,) = tn.gradients(h, [x])
    with jax.enable_x64(True):
        got = to_jax(g, [x], dx)(np.float64(1.1))
        assert got.dtype == np.float64
        np.testing.assert_allclose(np.asarray(got), tn.Session(g).run(dx, {x: 1.1}), rtol=1e-12)


def test_stacks_keep_a_float32_program_s_dtype_in_64_bit_mode(prog: dict[str, Any]) -> None:
    """In 64-bit mode a float32 program's stacks stay float32 (their dtype is the pushed value's, not
    NumPy's default float64), so the gradient is float32 and the reference's. Kills the stack's dtype
    set to None (``np.dtype(None)`` is float64)."""
    with jax.enable_x64(True):
        got = to_jax(prog["g"], [prog["x"], prog["n"]], prog["dx"])(np.float32(0.5), np.int32(4))
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), tn.Session(prog["g"]).run(prog["dx"], {prog["x"]: 0.5, prog["n"]: 4}),
                               rtol=1e-5)


def test_a_tensor_array_output_gives_its_buffer() -> None:
    """A fetched TensorArray is its buffer of elements, as ``stack`` reads it (a JAX function returns
    arrays, not the emitter's ``TA`` records). Kills the ``TA`` test made always false."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        ta = tn.TensorArray(tn.float32, size=3).write(0, x).write(1, x * 2.0).write(2, x * 3.0)
        stacked = ta.stack()
    got, want = to_jax(g, [x], [ta.tensor, stacked])(np.float32(1.5))
    assert isinstance(got, jax.Array)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(want), tn.Session(g).run(stacked, {x: 1.5}))


def test_a_dynamic_tensor_array_s_buffer_holds_stack_capacity_entries() -> None:
    """A TensorArray of dynamic size gets a buffer of ``stack_capacity`` entries (the emitter's
    capacity, as a gradient stack's), the elements written in front and its size beside it. Kills
    the emitter's capacity set to None."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        ta = tn.TensorArray(tn.float32, size=0, dynamic_size=True, element_shape=[])
        _, ta = tn.while_loop(lambda i, ta: i < 3, lambda i, ta: (i + 1, ta.write(i, x * tn.cast(i, tn.float32))),
                              [tn.constant(0), ta])
        stacked, size = ta.stack(), ta.size()
    want, n = tn.Session(g).run([stacked, size], {x: 2.0})
    for cap in (8, 16):
        buf, got_n = to_jax(g, [x], [ta.tensor, size], stack_capacity=cap)(np.float32(2.0))
        assert np.asarray(buf).shape == (cap,) and int(got_n) == n == 3
        np.testing.assert_array_equal(np.asarray(buf)[:n], want)


def test_the_stack_of_a_dynamic_tensor_array_is_refused_by_name_not_returned_as_a_record() -> None:
    """A TensorArray of dynamic size stacked (``stack()``) has a shape known only when the program
    runs, which a function traced by ``jax.jit`` cannot return: ``to_jax``'s function refuses it with
    ``UnsupportedError`` naming the output and what to return instead, under ``jax.jit`` too (it
    returned the emitter's internal ``Stacked`` record, silently). Its buffer and size are returned."""
    import jax

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        ta = tn.TensorArray(tn.float32, size=0, dynamic_size=True, element_shape=[])
        _, ta = tn.while_loop(lambda i, ta: i < 3, lambda i, ta: (i + 1, ta.write(i, x)), [tn.constant(0), ta])
        stacked = ta.stack()
    said = (f"to_jax: output {stacked.name} stacks a TensorArray of dynamic size, whose shape is known only when "
            "the program runs; return the TensorArray itself (its buffer of stack_capacity entries, the elements "
            "in front) and its size() instead")
    for f in (to_jax(g, [x], stacked), jax.jit(to_jax(g, [x], [stacked, ta.size()]))):
        with pytest.raises(tn.UnsupportedError) as e:
            f(np.float32(1.0))
        assert str(e.value) == said
    buf, n = to_jax(g, [x], [ta.tensor, ta.size()], stack_capacity=8)(np.float32(1.0))
    assert int(n) == 3 and np.asarray(buf)[:3].tolist() == [1.0, 1.0, 1.0]
