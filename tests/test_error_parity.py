"""The same mistake raises the same error type on every backend.

Why one catalogue: each backend detects mistakes its own way (the reference interpreter while it
fires nodes, the fast backend while raising regions, tracing, or from the error word of a compiled
run), so agreement holds only if every mistake is tried on every backend. Each case builds a small
program with one mistake and names the error type a user catches; ``BACKENDS`` lists every
in-process executor (a new one adds itself there and inherits the whole catalogue; the Ray backend's
share is in ``tests/test_ray.py``). Adding the small-step and the reference-partitioned executors
found one fault: the partitioned executor let a run of fewer than 1024 firings pass its
``max_firings`` budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from test_bad_inputs import session as _session  # the partitioned ones spread the nodes over two devices

import turnout as tn
from turnout import raw
from turnout.session import RunOptions

pytest.importorskip("jax")

BACKENDS = ["reference", "fast", "smallstep", "partitioned", "fast-partitioned"]


@dataclass
class Mistake:
    """A program with one mistake: ``build()`` returns (graph, fetches, feed_dict)."""

    build: Callable[[], tuple[tn.Graph, Any, dict[Any, Any]]]
    error: type[Exception]
    options: dict[str, Any] = field(default_factory=dict)


def _loop_counter() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        i = tn.while_loop(lambda i: i < n, lambda i: i + 1, [tn.constant(0)])[0]
    return g, i, {n: np.int32(10)}


def unfed_placeholder() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = x + 1.0
    return g, y, {}


def feed_of_wrong_shape() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        y = x * 2.0
    return g, y, {x: np.zeros(3, np.float32)}


def _loop_with_its_inside() -> tuple[tn.Graph, Any, tn.Tensor]:
    """``while i < 3: i += 1``: the graph, the loop's result and the tensor ``i + 1`` inside its body."""
    g = tn.Graph()
    with g.as_default():
        inner: list[tn.Tensor] = []

        def body(i: Any) -> Any:
            j = i + 1
            inner.append(j)
            return j

        i = tn.while_loop(lambda i: i < 3, body, [tn.constant(0)])
    return g, i, inner[0]


def feed_inside_a_loop() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g, i, inside = _loop_with_its_inside()
    return g, i, {inside: np.int32(7)}


def fetch_inside_a_loop() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g, _, inside = _loop_with_its_inside()
    return g, inside, {}


def dead_fetch() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        f, _ = raw.switch(tn.constant(1.0), p)
        y = f * 2.0
    return g, y, {p: True}


def endless_loop() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g, i, feed = _loop_counter()
    return g, i, {k: np.int32(10**6) for k in feed}


def integer_division_by_zero() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int32, [], name="a")
        b = tn.placeholder(tn.int32, [], name="b")
        y = tn.divide(a, b)
    return g, y, {a: np.int32(7), b: np.int32(0)}


def integer_division_by_zero_in_a_loop() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g = tn.Graph()
    with g.as_default():
        d = tn.placeholder(tn.int32, [], name="d")
        _, acc = tn.while_loop(lambda i, acc: i < 3, lambda i, acc: (i + 1, acc + tn.divide(10, d - i)),
                               [tn.constant(0), tn.constant(0)])
    return g, acc, {d: np.int32(1)}  # the second iteration divides by zero


def failed_check_in_a_loop() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    """``tn.assert_true`` in a loop body, false from the third iteration on."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        _, acc = tn.while_loop(lambda i, acc: i < n,
                               lambda i, acc: (i + 1, tn.assert_true(tn.less(acc, 2.0), acc + 1.0, "acc below 2")),
                               [tn.constant(0), tn.constant(0.0)])
    return g, acc, {n: np.int32(5)}


def case_with_two_true_predicates() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="x")
        y = tn.case([(tn.less(x, 5), lambda: tn.constant(1.0)), (tn.less(x, 9), lambda: tn.constant(2.0))],
                    default=lambda: tn.constant(3.0), exclusive=True)
    return g, y, {x: np.int32(1)}


def tensor_array_read_out_of_range() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        ta = tn.TensorArray(tn.float32, size=3).write(0, tn.constant(1.0))
        y = ta.read(k)
    return g, y, {k: np.int32(5)}


def tensor_array_read_before_any_write() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    """No element shape and nothing written: the fast backend cannot trace the read, so it runs the
    program on the interpreter (``fallback=True``, the default) and raises the same KernelError."""
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        y = tn.TensorArray(tn.float32, size=3).read(k)
    return g, y, {k: np.int32(1)}


def tensor_array_write_against_its_element_shape() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    """The TensorArray declares elements of shape [2]; the fed value (of unknown length while
    building) has 3. Found by probing: every backend stored it, and a stack returned a [1, 3]."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")
        y = tn.TensorArray(tn.float32, size=1, element_shape=[2]).write(0, x).stack()
    return g, y, {x: np.ones(3, np.float32)}


def tensor_array_writes_of_two_shapes_in_a_loop() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    """No declared element shape: the first write fixes it, and the loop's second iteration writes a
    longer value (its length is the iteration number plus one)."""
    g = tn.Graph()
    with g.as_default():
        def body(i: Any, ta: tn.TensorArray) -> Any:
            return i + 1, ta.write(i, tn.fill(tn.expand_dims(i + 1, 0), 1.0))

        ta = tn.TensorArray(tn.float32, size=2)
        _, ta = tn.while_loop(lambda i, ta: i < 2, body, [tn.constant(0), ta])
        y = ta.read(0)
    return g, y, {}


def gather_out_of_range() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [1], name="k")
        y = tn.gather(tn.constant([1.0, 2.0, 3.0]), k)
    return g, y, {k: np.array([9], np.int32)}


def index_into_an_empty_dimension() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    """``x[k]`` of a fed ``x`` with no rows: found by a differential fuzz of run-time shapes, where the
    fast backend failed inside JAX (an ``IndexError`` while tracing) instead of raising KernelError."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 2], name="x")
        k = tn.placeholder(tn.int32, [], name="k")
        y = x[k]
    return g, y, {x: np.zeros((0, 2), np.float32), k: np.int32(0)}


def gather_from_an_empty_axis() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None], name="x")
        k = tn.placeholder(tn.int32, [None], name="k")
        y = tn.gather(x, k)
    return g, y, {x: np.zeros(0, np.float32), k: np.array([2], np.int32)}


def scatter_add_out_of_range() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    """``ScatterAddLike`` (Gather's gradient, and the import's scatter formulas) at an index past its
    axis: the fast backend's XLA scatter had dropped the update silently where the interpreters
    failed; every route now refuses it as Gather does."""
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [None], name="k")
        like = tn.constant(np.zeros(4, np.float32))
        y = g.create_node("ScatterAddLike", [like, k, tn.ones_like(tn.cast(k, tn.float32))], {}).outputs[0]
    return g, y, {k: np.array([0, 4, 2], np.int32)}


def argmax_of_an_empty_axis() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    """The index of the largest of no values does not exist (a maximum over none is its identity,
    -inf, but no index holds it): every backend refuses it when it runs, as TensorFlow does. (This
    case was a ``reduce_max`` of an empty tensor, which the fast backend had returned as an empty
    array where the interpreters failed; a maximum over none is now -inf on every route.)"""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 3], name="x")
        y = tn.argmax(x, axis=0)
    return g, y, {x: np.zeros((0, 3), np.float32)}


def reduction_axis_beyond_the_rank() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    """The rank of an unknown-rank placeholder is known only when it is fed; an axis beyond it had
    failed inside the fast backend's lowering with a bare ``IndexError``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, None, name="x")
        y = tn.reduce_mean(x, axis=1)
    return g, y, {x: np.float32(1.0)}


def sum_to_a_shape_that_does_not_broadcast() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, None, name="x")
        like = tn.placeholder(tn.float32, None, name="like")
        y = tn.sum_to_like(x, like)
    return g, y, {x: np.float32(1.0), like: np.zeros(3, np.float32)}


def pop_of_an_index_never_pushed() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    """A stack pushed under ``[i]`` in a loop of three iterations, popped after it under a fed index
    that was never pushed (on the fast backend a counted stack, whose pop checks its index)."""
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        s = g.create_node("StackNew", (), {"elem_dtype": "int32", "elem_shape": []}, name="s")

        def body(i: Any) -> Any:
            p = g.create_node("StackPush", [s.outputs[0], tn.stack([i]), i * 2], name="push")
            with tn.control_dependencies([p]):
                return i + 1

        (n,) = tn.while_loop(lambda i: i < 3, body, [tn.constant(0)])
        with tn.control_dependencies([n]):
            got = g.create_node("StackPop", [s.outputs[0], tn.stack([k])], {"dtype": "int32", "shape": []},
                                name="pop").outputs[0]
    return g, got + n, {k: np.int32(5)}


def ill_formed_loop() -> tuple[tn.Graph, Any, dict[Any, Any]]:
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(1.0)
        e = raw.enter(x, "frame")
        y = raw.exit(e * 2.0)  # an Exit of a frame without LoopCond
    return g, y, {}


CATALOGUE: dict[str, Mistake] = {
    "unfed placeholder": Mistake(unfed_placeholder, tn.FeedError),
    "feed of the wrong shape": Mistake(feed_of_wrong_shape, tn.FeedError),
    "feed inside a loop": Mistake(feed_inside_a_loop, tn.FeedError),
    "fetch inside a loop": Mistake(fetch_inside_a_loop, tn.ValidationError),
    "dead fetch": Mistake(dead_fetch, tn.DeadFetchError),
    "loop over max_iterations": Mistake(endless_loop, tn.NonTerminationError, {"max_iterations": 100}),
    "integer division by zero": Mistake(integer_division_by_zero, tn.KernelError),
    "integer division by zero in a loop": Mistake(integer_division_by_zero_in_a_loop, tn.KernelError),
    "TensorArray read out of range": Mistake(tensor_array_read_out_of_range, tn.KernelError),
    "failed check in a loop": Mistake(failed_check_in_a_loop, tn.KernelError),
    "case with two true predicates and exclusive": Mistake(case_with_two_true_predicates, tn.KernelError),
    "TensorArray read before any write": Mistake(tensor_array_read_before_any_write, tn.KernelError),
    "TensorArray write against its element shape": Mistake(tensor_array_write_against_its_element_shape,
                                                           tn.KernelError),
    "TensorArray writes of two shapes in a loop": Mistake(tensor_array_writes_of_two_shapes_in_a_loop,
                                                          tn.KernelError),
    "gather index out of range": Mistake(gather_out_of_range, tn.KernelError),
    "scatter-add index out of range": Mistake(scatter_add_out_of_range, tn.KernelError),
    "pop of an index never pushed": Mistake(pop_of_an_index_never_pushed, tn.KernelError),
    "loop frame without LoopCond": Mistake(ill_formed_loop, tn.ValidationError),
    "index into an empty dimension": Mistake(index_into_an_empty_dimension, tn.KernelError),
    "gather from an empty axis": Mistake(gather_from_an_empty_axis, tn.KernelError),
    "argmax of an empty axis": Mistake(argmax_of_an_empty_axis, tn.KernelError),
    "reduction axis beyond the rank": Mistake(reduction_axis_beyond_the_rank, tn.KernelError),
    "sum to a shape that does not broadcast": Mistake(sum_to_a_shape_that_does_not_broadcast, tn.KernelError),
    "unknown run option": Mistake(unfed_placeholder, TypeError, {"no_such_option": 1}),
    "bad max_iterations": Mistake(_loop_counter, ValueError, {"max_iterations": 0}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_same_mistake_same_error(backend: str, name: str) -> None:
    m = CATALOGUE[name]
    g, fetches, feed = m.build()
    with pytest.raises(m.error):
        _session(g, backend).run(fetches, feed_dict=feed, **m.options)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("taken", [False, True])
def test_an_index_into_an_empty_axis_fails_only_where_it_runs(backend: str, taken: bool) -> None:
    """A Gather, a GetItem and its gradient, and a Max, on a branch of a cond, over an axis of size 0:
    the taken branch raises KernelError, an untaken one costs nothing (the fast backend decides when it
    traces that such an index is out of range, and must still leave the decision to the run)."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        x = tn.placeholder(tn.float32, [None, 2], name="x")
        k = tn.placeholder(tn.int32, [], name="k")
        picked, top = tn.cond(p, lambda: (tn.gather(x, tn.expand_dims(k, 0))[0] + x[k], tn.reduce_max(x, axis=0)),
                              lambda: (tn.zeros([2], tn.float32), tn.zeros([2], tn.float32)))
        loss = tn.reduce_sum(picked * picked) + tn.reduce_sum(top)
        dx = tn.gradients(loss, [x])[0]
    sess = _session(g, backend)
    feeds = {p: np.bool_(taken), x: np.zeros((0, 2), np.float32), k: np.int32(0)}
    if taken:
        with pytest.raises(tn.KernelError, match="out of range|reduction over an empty tensor"):
            sess.run([loss, dx], feeds)
    else:
        got_loss, got_dx = sess.run([loss, dx], feeds)
        assert float(got_loss) == 0.0 and got_dx.shape == (0, 2)
        if backend == "fast":  # compiled, not run on the interpreter after a failed lowering
            assert sess.last_result.stats["executor"] == "compiled"


def test_the_fast_backend_names_a_reduction_axis_out_of_the_traced_rank() -> None:
    """Refused by the op's shape rule on the traced rank, as the interpreters refuse it at run time
    (``shape_rules.concrete_shape_error``): a ``KernelError`` even without the fallback, for an axis
    equal to the rank as for one beyond it, in the rule's words (not JAX's error caught on the way)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, None, name="x")
        ys = [tn.reduce_sum(x, axis=1), tn.reduce_sum(x, axis=-2)]
    sess = tn.Session(g, backend="fast", fallback=False)
    for y in ys:
        with pytest.raises(tn.KernelError, match=r"Sum: reduction axis -?\d out of range for rank 1"):
            sess.run(y, {x: np.ones(3, np.float32)})
        with pytest.raises(tn.KernelError, match=r"Sum: reduction axis -?\d out of range for rank 1"):
            tn.Session(g).run(y, {x: np.ones(3, np.float32)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_mistake_leaves_the_session_usable(backend: str) -> None:
    """After a run-time error, the next run of the same session computes normally."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int32, [], name="a")
        b = tn.placeholder(tn.int32, [], name="b")
        y = tn.divide(a, b)
    sess = _session(g, backend)
    with pytest.raises(tn.KernelError):
        sess.run(y, {a: np.int32(7), b: np.int32(0)})
    assert int(sess.run(y, {a: np.int32(7), b: np.int32(2)})) == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_firings_is_honoured_or_rejected(backend: str) -> None:
    """A firing budget below what the program needs never passes silently: the interpreters count
    firings and stop; the fast backends, which run compiled loops and count no firings, reject the
    option with UnsupportedError naming ``max_iterations`` instead."""
    g, i, feed = _loop_counter()
    opts = RunOptions(max_firings=20)
    with pytest.raises((tn.NonTerminationError, tn.UnsupportedError)) as info:
        _session(g, backend).run(i, feed_dict=feed, options=opts)
    # the interpreters count firings (the partitioned one checked its budget only every 1024 firings
    # and at the end of a run a return skipped; this catalogue found it once it ran every backend)
    want = tn.NonTerminationError if backend in ("reference", "smallstep", "partitioned") else tn.UnsupportedError
    assert info.type is want
    # without a budget (None) or with the default one, both run
    assert int(_session(g, backend).run(i, feed_dict=feed, max_firings=None)) == 10


# ---- a Variable set from outside (``turnout.store``): checked at the assignment, on every backend ----
def _two_variables() -> tuple[tn.Graph, Any]:
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.array([0.5, -0.5], np.float32), name="w")
        k = tn.Variable(np.int32(3), name="k")
        y = tn.reduce_sum(w.read()) * tn.cast(k.read(), tn.float32)
    return g, y


BAD_VARIABLE_VALUES: dict[str, tuple[str, Any]] = {
    "wrong shape": ("w", np.zeros(3, np.float32)),
    "a scalar for a vector": ("w", 1.5),
    "None": ("w", None),
    "a string": ("w", "0.5"),
    "a bool array for a float Variable": ("w", np.array([True, False])),
    "beyond float32": ("w", np.array([1e300, 0.0])),
    "a float for an int Variable": ("k", 2.0),
    "a float array for an int Variable": ("k", np.array(2.0)),
    "a float32 scalar for an int Variable": ("k", np.float32(2.0)),
    "beyond int32": ("k", 2**40),
    "an object array": ("w", np.array([object(), object()])),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(BAD_VARIABLE_VALUES))
def test_a_bad_value_set_on_a_variable_is_a_feed_error(backend: str, case: str) -> None:
    name, bad = BAD_VARIABLE_VALUES[case]
    g, y = _two_variables()
    sess = _session(g, backend)
    before = float(sess.run(y))
    with pytest.raises(tn.FeedError, match=f"Variable '{name}'"):
        sess.variables[name] = bad
    assert float(sess.run(y)) == before  # refused: the old value stays, the session runs on


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_value_set_on_a_variable_is_converted_alike(backend: str) -> None:
    """Values that fit are converted to the Variable's dtype, so every backend computes in it."""
    g, y = _two_variables()
    sess = _session(g, backend)
    sess.variables["w"] = [1.25, 2.0]  # a list
    sess.variables["k"] = np.int64(2)
    assert sess.variables["w"].dtype == np.float32 and sess.variables["k"].dtype == np.int32
    assert float(sess.run(y)) == 6.5
    sess.variables["w"] = np.array([0.1, 0.2])  # float64, narrowed as a feed is
    assert sess.variables["w"].dtype == np.float32
    np.testing.assert_allclose(sess.run(y), np.float32(0.1 + 0.2) * 2, rtol=1e-6)


def test_a_dead_fetch_reads_the_same_on_every_backend() -> None:
    """The message of ``DeadFetchError`` is one text (``errors.dead_fetch_message``), naming the
    tensor and the node with its source line, on every backend and on the fast backend's repeated-run
    lane too: a user who reports it gets the same words whichever executor ran the graph."""
    messages = {}
    for backend in BACKENDS:
        g, fetches, feed = dead_fetch()
        sess = _session(g, backend)
        for _ in range(2 if backend == "fast" else 1):  # the second fast run takes the lane
            with pytest.raises(tn.DeadFetchError) as err:
                sess.run(fetches, feed_dict=feed)
            messages.setdefault(backend, str(err.value))
            assert str(err.value) == messages[backend]
    assert len(set(messages.values())) == 1, messages
    assert "is dead" in messages["reference"] and "created at" in messages["reference"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_runaway_loop_is_named_with_its_source_line_and_the_same_hint(backend: str) -> None:
    """``NonTerminationError`` names the loop's frame and the Enter that carries the user's source
    line, and ends with the one hint every backend gives (``errors.runaway_message``)."""
    from turnout.errors import MAX_ITERATIONS_HINT

    m = CATALOGUE["loop over max_iterations"]
    g, fetches, feed = m.build()
    with pytest.raises(tn.NonTerminationError) as err:
        _session(g, backend).run(fetches, feed_dict=feed, **m.options)
    text = str(err.value)
    assert "loop frame 'while/frame0'" in text and text.endswith(MAX_ITERATIONS_HINT)
    # (on the partitioned reference, the control loop's Enter the partitioner makes carries the source
    # line of the frame's first Enter, so its message names the user's line too)
    assert "created at test_error_parity.py" in text


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_kernel_refusing_values_known_while_tracing_gives_its_own_words(backend: str) -> None:
    """A gather of a constant at a constant index out of range, in the branch a fed predicate takes:
    the fast backend's trace knows both inputs, and the reference kernel refuses them there, so the
    compiled program fails where the branch runs with the kernel's own message, index included, as
    the interpreter does (``lower_node``: the fold's refusal); the other branch runs clean."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [])
        y = tn.cond(p, lambda: tn.gather(tn.constant([1.0, 2.0, 3.0]), 7), lambda: tn.constant(0.0))
    sess = tn.Session(g, backend=backend)
    assert float(sess.run(y, {p: False})) == 0.0
    with pytest.raises(tn.KernelError, match=r'Gather node "cond/true/Gather" .*Gather: index out of range for '
                                             r"axis 0 of size 3: 7$"):
        sess.run(y, {p: True})
