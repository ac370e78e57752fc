"""``tn.foldr`` and ``tn.scan(..., reverse=True)``: the folds that walk their elements from the last to
the first, on every in-process backend (the ``backend`` fixture), with their gradients.

Each expectation is computed by the plain-Python meaning in ``turnout.control_flow.functional``'s
docstring (a loop over ``reversed(elems)``), so the values are checked against a closed form, and the
gradients against JAX's own gradient of the same Python loop.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_bad_inputs import session as _session

import turnout as tn


def run(backend: str, g: tn.Graph, fetches: Any, feed: dict[Any, Any] | None = None) -> Any:
    return tn.Session(g, backend=backend).run(fetches, feed_dict=feed)


def py_foldr(fn: Any, elems: list[Any], init: Any = None) -> Any:
    items = list(reversed(elems))
    carry = items.pop(0) if init is None else init
    for x in items:
        carry = fn(carry, x)
    return carry


def py_scan_reverse(fn: Any, elems: list[Any], init: Any = None) -> list[Any]:
    """``ys[i]``: the carry after element ``i``, the elements taken last to first."""
    ys: list[Any] = [None] * len(elems)
    carry = init
    for i in reversed(range(len(elems))):
        carry = elems[i] if carry is None else fn(carry, elems[i])
        ys[i] = carry
    return ys


def test_foldr_with_and_without_an_initializer(backend: str) -> None:
    elems = [1, 2, 3, 4, 5, 6]
    step = lambda a, x: (a + x) * 2  # noqa: E731
    g = tn.Graph()
    with g.as_default():
        xs = tn.constant(np.array(elems, np.int32))
        plain = tn.foldr(step, xs)
        seeded = tn.foldr(step, xs, initializer=tn.constant(10))
        left = tn.foldl(step, xs)
    got = run(backend, g, [plain, seeded, left])
    assert [int(v) for v in got[:2]] == [py_foldr(step, elems), py_foldr(step, elems, 10)]
    assert int(got[0]) != int(got[2])  # the order matters for this step


def test_scan_reverse_keeps_each_carry_at_its_elements_slot(backend: str) -> None:
    elems = [1, 2, 3, 4, 5, 6]
    g = tn.Graph()
    with g.as_default():
        xs = tn.constant(np.array(elems, np.int32))
        sums = tn.scan(lambda a, x: a + x, xs, reverse=True)
        affine = tn.scan(lambda a, x: a * 2 - x, xs, initializer=tn.constant(1), reverse=True)
        forward = tn.scan(lambda a, x: a + x, xs)
    s, f, fw = run(backend, g, [sums, affine, forward])
    assert [int(v) for v in s] == py_scan_reverse(lambda a, x: a + x, elems) == [21, 20, 18, 15, 11, 6]
    assert [int(v) for v in f] == py_scan_reverse(lambda a, x: a * 2 - x, elems, 1)
    assert [int(v) for v in fw] == [1, 3, 6, 10, 15, 21]


def test_reversed_folds_over_structures(backend: str) -> None:
    """Nested elems and a nested carry: a running (min, max) from the right over pairs of rows."""
    a = np.array([3, 1, 4, 1, 5], np.int32)
    b = np.array([2, 7, 1, 8, 2], np.int32)

    def step(acc: Any, x: Any) -> Any:
        return tn.minimum(acc[0], x["a"] + x["b"]), tn.maximum(acc[1], x["a"] * x["b"])

    g = tn.Graph()
    with g.as_default():
        elems = {"a": tn.constant(a), "b": tn.constant(b)}
        lo, hi = tn.scan(step, elems, (tn.constant(100), tn.constant(0)), reverse=True)
        flo, fhi = tn.foldr(step, elems, (tn.constant(100), tn.constant(0)))
    got = run(backend, g, [lo, hi, flo, fhi])
    want_lo = np.minimum.accumulate((a + b)[::-1])[::-1]
    want_hi = np.maximum.accumulate((a * b)[::-1])[::-1]
    np.testing.assert_array_equal(got[0], want_lo)
    np.testing.assert_array_equal(got[1], want_hi)
    assert int(got[2]) == want_lo[0] and int(got[3]) == want_hi[0]


@pytest.mark.parametrize("n", [0, 1, 5])
def test_reversed_folds_over_a_fed_length(backend: str, n: int) -> None:
    """Elements of a length known only at run time, including none (with an initializer)."""
    xs_v = np.arange(1, n + 1, dtype=np.float32) * 0.5
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, [None], name="xs")
        fr = tn.foldr(lambda c, x: c * 0.5 + x, xs, initializer=tn.constant(3.0))
        sr = tn.scan(lambda c, x: c * 0.5 + x, xs, initializer=tn.constant(3.0), reverse=True)
    f, s = run(backend, g, [fr, sr], {xs: xs_v})
    step = lambda c, x: c * 0.5 + x  # noqa: E731
    np.testing.assert_allclose(f, py_foldr(step, list(xs_v), 3.0), rtol=1e-6)
    assert s.shape == (n,)
    np.testing.assert_allclose(s, py_scan_reverse(step, list(xs_v), 3.0) if n else np.zeros(0), rtol=1e-6)


def test_reversed_folds_of_no_elements_without_an_initializer_fail_alike(backend: str) -> None:
    """Nothing to start the carry from: the read of the last element fails, as ``foldl``'s read of
    the first does, with the same error type on every backend."""
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float32, [None], name="xs")
        fr = tn.foldr(lambda c, x: c + x, xs)
        sr = tn.scan(lambda c, x: c + x, xs, reverse=True)
    for t in (fr, sr):
        with pytest.raises(tn.KernelError, match="TensorArrayRead"):
            run(backend, g, t, {xs: np.zeros(0, np.float32)})


def test_reversed_folds_inside_a_loop_body(backend: str) -> None:
    """A foldr and a reversed scan in every iteration of an outer loop over rows."""
    m = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0], [4.0, 0.0, -2.0]])
    step = lambda c, x: c * 0.5 + x  # noqa: E731
    g = tn.Graph()
    with g.as_default():
        rows = tn.constant(m)

        def body(i: Any, acc: Any, last: Any) -> Any:
            row = tn.gather(rows, i)
            return (i + 1, acc + tn.foldr(step, row, initializer=tn.constant(1.0, tn.float64)),
                    tn.scan(step, row, reverse=True))

        _, acc, last = tn.while_loop(lambda i, acc, last: i < 3, body,
                                     [tn.constant(0), tn.constant(0.0, tn.float64),
                                      tn.zeros([3], tn.float64)])
    got_acc, got_last = run(backend, g, [acc, last])
    np.testing.assert_allclose(got_acc, sum(py_foldr(step, list(r), 1.0) for r in m))
    np.testing.assert_allclose(got_last, py_scan_reverse(step, list(m[2])))


def test_gradients_of_reversed_folds_match_jax(backend: str) -> None:
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    xs_v = np.array([0.5, -1.0, 2.0, 0.3])

    def f(xs: Any, c0: Any) -> Any:
        ys = py_scan_reverse(lambda c, x: jnp.tanh(c * x + 0.5), list(xs), c0)
        fr = py_foldr(lambda c, x: c * x + 1.0, list(xs), c0)
        nr = py_foldr(lambda c, x: c * jnp.tanh(x) + x * x, list(xs))
        sc = jnp.stack(ys)
        return jnp.sum(sc * sc * jnp.arange(1.0, 5.0)) + fr + nr

    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float64, [4], name="xs")
        c0 = tn.placeholder(tn.float64, [], name="c0")
        sc = tn.scan(lambda c, x: tn.tanh(c * x + 0.5), xs, initializer=c0, reverse=True)
        fr = tn.foldr(lambda c, x: c * x + 1.0, xs, initializer=c0)
        nr = tn.foldr(lambda c, x: c * tn.tanh(x) + x * x, xs)
        loss = tn.reduce_sum(sc * sc * tn.constant(np.arange(1.0, 5.0))) + fr + nr
        grads = tn.gradients(loss, [xs, c0])
    with jax.enable_x64(True):
        want_loss = f(xs_v, 0.2)
        want = jax.grad(f, (0, 1))(xs_v, 0.2)
    got = run(backend, g, [loss, *grads], {xs: xs_v, c0: 0.2})
    np.testing.assert_allclose(got[0], want_loss, rtol=1e-12)
    np.testing.assert_allclose(got[1], want[0], rtol=1e-10)
    np.testing.assert_allclose(got[2], want[1], rtol=1e-10)


def test_reversed_folds_are_named_saved_and_loaded(backend: str) -> None:
    """The loop takes the builder's name (its frame is ``foldr``), and a saved graph loads and runs
    the same."""
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.int32, [None], name="xs")
        fr = tn.foldr(lambda c, x: c * 3 + x, xs, initializer=tn.constant(0))
        sr = tn.scan(lambda c, x: c - x, xs, reverse=True)
    frames = {n.attrs.get("frame_name") for n in g.nodes if n.op == "Enter"}
    assert any(f and "foldr" in f for f in frames)
    g2 = tn.loads(tn.dumps(g))
    v = np.array([1, 2, 3], np.int32)
    got = run(backend, g2, [g2.tensor(fr.name), g2.tensor(sr.name)], {g2.tensor(xs.name): v})
    assert int(got[0]) == py_foldr(lambda c, x: c * 3 + x, [1, 2, 3], 0) == 34
    assert [int(x) for x in got[1]] == py_scan_reverse(lambda c, x: c - x, [1, 2, 3]) == [0, 1, 3]


@pytest.mark.parametrize("other", ["smallstep", "partitioned", "fast-partitioned"])
def test_the_other_executors_agree(other: str) -> None:
    """The small-step system and both partitioned executors (nodes spread over two devices) give the
    reference's values and gradients for a reversed scan and a foldr."""
    pytest.importorskip("jax")
    xs_v = np.array([0.5, -1.0, 2.0])
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float64, [3], name="xs")
        sc = tn.scan(lambda c, x: c * x + 1.0, xs, reverse=True)
        fr = tn.foldr(lambda c, x: c * 0.5 + x * x, xs, initializer=tn.constant(2.0, tn.float64))
        (grad,) = tn.gradients(tn.reduce_sum(sc) + fr, [xs])
    fetches = [sc, fr, grad]
    want = tn.Session(g).run(fetches, {xs: xs_v})
    got = _session(g, other).run(fetches, {xs: xs_v})
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(want[0], py_scan_reverse(lambda c, x: c * x + 1.0, list(xs_v)))


def test_a_reversed_fold_that_raises_leaves_the_graph_as_it_was() -> None:
    """``foldr`` and a reversed ``scan`` whose function fails remove what they built before the
    failure (their TensorArrays and half-built loop), as the other builders do."""
    g = tn.Graph()
    with g.as_default():
        xs = tn.constant([1.0, 2.0])
        before = (len(g.nodes), len(g.contexts))
        with pytest.raises(ZeroDivisionError):
            tn.foldr(lambda c, x: c + 1 // 0, xs)
        with pytest.raises(tn.GraphBuildError):
            tn.scan(lambda c, x: None, xs, reverse=True)
        assert (len(g.nodes), len(g.contexts)) == before
        total = tn.foldr(lambda c, x: c * 10.0 + x, xs)
    assert float(tn.Session(g).run(total)) == 21.0  # starts from the last element: 2 * 10 + 1


def test_the_structured_evaluator_reads_reversed_folds_as_loops() -> None:
    """[S-Scan]: the structured meaning of ``foldr`` and a reversed ``scan`` is their Python loop,
    with the trip counts of that loop (a foldr without initializer starts from the last element)."""
    from turnout.semantics.structured import evaluate

    g = tn.Graph()
    with g.as_default():
        xs = tn.constant(np.arange(1, 6, dtype=np.float64))
        sc = tn.scan(lambda c, x: c * 2.0 - x, xs, tn.constant(0.0, tn.float64), reverse=True)
        fr = tn.foldr(lambda c, x: c * 10.0 + x, xs)
    r = evaluate(g, [sc, fr])
    np.testing.assert_array_equal(r.values[0], py_scan_reverse(lambda c, x: c * 2.0 - x, [1.0, 2, 3, 4, 5], 0.0))
    assert float(r.values[1]) == 54321.0
    assert sorted(r.trip_counts.values()) == [4, 5]


def test_the_folds_refuse_what_cannot_be_folded_when_built() -> None:
    """A ``fn`` that is not callable, ``elems`` whose known leading dimensions differ and a
    ``reverse`` that is not a bool are refused when the graph is built, naming the builder or the
    tensors (before, the first failed deep inside the loop's body, the second at run time, on the
    read past the shorter one's end, and the third was taken for its truth value)."""
    g = tn.Graph()
    with g.as_default():
        xs, ys = tn.constant([1.0, 2.0, 3.0]), tn.constant([1.0, 2.0])
        for builder in (tn.scan, tn.foldl, tn.foldr, tn.map_fn):
            with pytest.raises(tn.GraphBuildError, match=f"{builder.__name__}: fn must be a callable, got str"):
                builder("fn", xs)  # type: ignore[operator]
        with pytest.raises(tn.ShapeError, match=r"leading dimension.*Const:0 with 3, Const_1:0 with 2"):
            tn.foldr(lambda c, x: c + x[0] * x[1], (xs, ys), tn.constant(0.0))
        with pytest.raises(tn.ShapeError, match="leading dimension"):
            tn.map_fn(lambda x: x[0] * x[1], (xs, ys))
        with pytest.raises(tn.GraphBuildError, match="reverse must be True or False"):
            tn.scan(lambda c, x: c + x, xs, reverse="yes")  # type: ignore[arg-type]
        n = len(g.nodes)
    assert len(g.nodes) == n
    with g.as_default():
        zs = tn.placeholder(tn.float32, [None], name="zs")  # a length known only at run time: checked there
        y = tn.foldr(lambda c, x: c + x[0] * x[1], (xs, zs), tn.constant(0.0))
    with pytest.raises(tn.KernelError, match="elems must share their leading dimension"):
        tn.Session(g).run(y, {zs: np.ones(2, np.float32)})
    assert float(tn.Session(g).run(y, {zs: np.ones(3, np.float32)})) == 6.0
