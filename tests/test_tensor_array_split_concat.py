"""TensorArray's ``concat``, ``split``, ``identity`` and ``close``, and TensorFlow's construction hints.

The laws: ``concat`` is ``np.concatenate`` of the elements and ``split`` is ``np.split`` into equal
pieces, on every route, with their gradients; lengths that differ, or do not sum to the value's
rows, fail (while building where they are known then, else a KernelError on every route, never a
silently cut value); the hints TensorFlow 1 code passes change nothing a program can see.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import turnout as tn
from tests.example_counts import examples
from tests.route_table import ROUTES, run_on
from turnout.errors import GraphBuildError, KernelError, ShapeError


def _loop_concat() -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    """A loop writes ``x * (i + 1)`` (rows [2, 3]) at slot i of a dynamic-size array, whose trip count
    is fed; its concat and the gradient of a weighted sum of it with respect to ``x``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2, 3], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        ta = tn.TensorArray(tn.float32, size=0, dynamic_size=True, infer_shape=True)

        def body(i: tn.Tensor, ta: tn.TensorArray) -> list:
            return [i + 1, ta.write(i, x * tn.cast(i + 1, tn.float32))]

        _, out = tn.while_loop(lambda i, ta: i < n, body, [tn.constant(0), ta])
        joined = out.concat()
        loss = tn.reduce_sum(joined * tn.cast(tn.range(0, tn.shape(joined)[0]), tn.float32)[:, None])
        gx, = tn.gradients(loss, [x])
    return g, joined, gx, loss


@pytest.mark.parametrize("route", list(ROUTES))
def test_concat_of_a_loops_writes_is_their_concatenation_with_its_gradient(route: str) -> None:
    g, joined, gx, _ = _loop_concat()
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    got, grad = run_on(route, g, [joined, gx], {"x:0": xv, "n:0": 3})
    np.testing.assert_allclose(got, np.concatenate([xv * (k + 1) for k in range(3)]))
    # row r of the concat is x[r % 2] * (r // 2 + 1), weighted by r
    want = sum((k + 1) * np.stack([np.full(3, 2 * k), np.full(3, 2 * k + 1)]) for k in range(3))
    np.testing.assert_allclose(grad, want)


@pytest.mark.parametrize("route", list(ROUTES))
def test_split_into_equal_pieces_is_numpys_split_with_its_gradient(route: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [6, 2], name="x")
        ta = tn.TensorArray(tn.float32, size=3).split(x, [2, 2, 2])
        middle = ta.read(1)
        stacked = ta.stack()
        gx, = tn.gradients(tn.reduce_sum(middle * middle), [x])
    xv = np.arange(12, dtype=np.float32).reshape(6, 2)
    mid, st, grad = run_on(route, g, [middle, stacked, gx], {"x:0": xv})
    np.testing.assert_allclose(mid, xv[2:4])
    np.testing.assert_allclose(st, np.stack(np.split(xv, 3)))
    want = np.zeros_like(xv)
    want[2:4] = 2 * xv[2:4]
    np.testing.assert_allclose(grad, want)


def _runtime_lengths() -> tuple[tn.Graph, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 2], name="x")
        lens = tn.placeholder(tn.int32, [3], name="lens")
        joined = tn.TensorArray(tn.float32, size=3).split(x, lens).identity().concat()
    return g, joined


@pytest.mark.parametrize("route", ["reference", "smallstep", "fast"])
def test_split_by_lengths_fed_when_it_runs_checks_them_there(route: str) -> None:
    g, joined = _runtime_lengths()
    xv = np.arange(12, dtype=np.float32).reshape(6, 2)
    np.testing.assert_allclose(run_on(route, g, joined, {"x:0": xv, "lens:0": [2, 2, 2]}), xv)
    with pytest.raises(KernelError, match="the lengths differ"):
        run_on(route, g, joined, {"x:0": xv, "lens:0": [1, 2, 3]})
    with pytest.raises(KernelError, match="rows are not the lengths' sum"):
        run_on(route, g, joined, {"x:0": xv, "lens:0": [1, 1, 1]})


def test_split_lengths_known_while_building_are_checked_there() -> None:
    with tn.Graph().as_default():
        x = tn.placeholder(tn.float32, [6, 2])
        with pytest.raises(ShapeError, match="differ"):
            tn.TensorArray(tn.float32, size=2).split(x, [2, 4])
        with pytest.raises(ShapeError, match="summing to 4 for a value of 6 rows"):
            tn.TensorArray(tn.float32, size=2).split(x, [2, 2])
        with pytest.raises(ShapeError, match="scalar has no rows"):
            tn.TensorArray(tn.float32, size=2).split(tn.constant(1.0), [1, 1])
        with pytest.raises(GraphBuildError, match="lengths must be an int32 vector whose length is known"):
            tn.TensorArray(tn.float32, size=2).split(x, tn.placeholder(tn.int32, [None]))


def test_split_lengths_known_while_building_check_rows_known_only_when_it_runs() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 2], name="x")
        joined = tn.TensorArray(tn.float32, size=2).split(x, [2, 2]).concat()
    xv = np.ones((4, 2), np.float32)
    np.testing.assert_allclose(tn.Session(g).run(joined, {"x:0": xv}), xv)
    for backend in ("reference", "fast"):
        with pytest.raises(KernelError, match="rows are not the lengths' sum"):
            tn.Session(g, backend=backend).run(joined, {"x:0": np.ones((5, 2), np.float32)})


def test_concat_of_scalar_elements_is_refused_while_building() -> None:
    with tn.Graph().as_default():
        ta = tn.TensorArray(tn.float32, size=2, element_shape=[]).write(0, 1.0).write(1, 2.0)
        with pytest.raises(ShapeError, match="scalars"):
            ta.concat()


def test_concat_keeps_the_static_shape_where_the_elements_have_one() -> None:
    with tn.Graph().as_default():
        ta = tn.TensorArray(tn.float32, size=3, element_shape=[2, 4])
        ta = ta.unstack(tn.zeros([3, 2, 4]))
        assert tuple(ta.concat().shape) == (6, 4)


def test_tensorflows_hints_change_nothing_a_program_sees() -> None:
    """``clear_after_read=True`` does not clear: a second read gives the element again (TensorFlow
    would fail there, so no program it runs sees a difference); the other hints are taken as they are."""
    g = tn.Graph()
    with g.as_default():
        ta = tn.TensorArray(tn.float32, size=2, infer_shape=False, clear_after_read=True,
                            colocate_with_first_write_call=False).write(0, 3.0).write(1, 4.0)
        twice = ta.read(0) + ta.read(0)
        closed = ta.close()
    for backend in ("reference", "fast"):
        s = tn.Session(g, backend=backend)
        assert s.run(twice) == 6.0
        assert s.run(closed) is None


@pytest.mark.parametrize("hint, value", [("infer_shape", 1), ("clear_after_read", "yes"),
                                         ("colocate_with_first_write_call", None)])
def test_a_hint_that_is_not_a_bool_is_refused_naming_it(hint: str, value: object) -> None:
    with tn.Graph().as_default(), pytest.raises(GraphBuildError, match=hint):
        tn.TensorArray(tn.float32, size=2, **{hint: value})


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_an_imported_split_whose_lengths_miss_the_rows_fails_with_tensorflows_check(backend: str) -> None:
    """TensorFlow's fixture ``tensor_array_split_concat`` with 5 rows cut into 2 pieces: TensorFlow
    refuses it ("Expected sum of lengths to be equal to values.shape[0]", then its values, which
    Turnout's Assert shows in its own form), and so does the imported graph on every backend."""
    from pathlib import Path

    from turnout.graphdef import import_graph_def

    imp = import_graph_def(Path(__file__).parent / "data" / "tf" / "tensor_array_split_concat.pbtxt")
    feeds = {imp.tensor("x:0"): np.ones((5, 3), np.float32), imp.tensor("n:0"): np.asarray(2, np.int32)}
    with pytest.raises(KernelError, match=r"Expected sum of lengths to be equal to values\.shape\[0\]"):
        tn.Session(imp.graph, backend=backend).run(imp.tensor("joined:0"), feeds)


@settings(max_examples=examples(8), deadline=None)
@given(n=st.integers(0, 4), piece=st.integers(0, 3), rest=st.lists(st.integers(0, 3), max_size=2),
       backend=st.sampled_from(["reference", "fast"]))
def test_split_then_concat_gives_the_value_back_and_stack_its_pieces(n: int, piece: int, rest: list[int],
                                                                     backend: str) -> None:
    """For any count, piece length and element shape (zeros included): the pieces of ``split`` stack
    to the value cut into ``n`` pieces, and their ``concat`` is the value again, with the
    gradient of a weighted sum of the concat the weights, on the oracle and the fast backend."""
    rows = n * piece
    xv = np.arange(rows * int(np.prod(rest)), dtype=np.float32).reshape(rows, *rest)
    weights = np.linspace(-1.0, 1.0, xv.size, dtype=np.float32).reshape(xv.shape)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, *rest], name="x")
        ta = tn.TensorArray(tn.float32, size=n).split(x, [piece] * n)
        stacked, joined = ta.stack(), ta.concat()
        gx, = tn.gradients(tn.reduce_sum(joined * tn.constant(weights)), [x])
    got = tn.Session(g, backend=backend).run([stacked, joined, gx], {"x:0": xv})
    # (no lengths say no piece length: an empty array's pieces are of length 0)
    np.testing.assert_array_equal(got[0], xv.reshape(n, piece if n else 0, *rest))
    np.testing.assert_array_equal(got[1], xv)
    np.testing.assert_allclose(got[2], weights)
