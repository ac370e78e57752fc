"""Gradients on the fast backend equal the reference backend's, and the closed forms.

The gradient graphs are built by ``tn.gradients`` (the paper's Sec. 5: stacks pushed in the forward
loop, popped in reverse by the backward loop). The fast backend lowers each stack to a chunked device
buffer; every case runs with a small chunk capacity (2: swaps to host every other push) and the
default (no swap), and one case with 1 (a swap after every push) and 3 (chunks that do not divide the
trip count); all must give the reference backend's numbers.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import graphs
import numpy as np
import pytest
from example_counts import examples
from hypothesis import given, settings
from hypothesis import strategies as st

import turnout as tn

pytest.importorskip("jax")

CHUNKS = [2, 1024]


def check(g: tn.Graph, fetches: list[Any], feed: dict[Any, Any], want: list[Any] | None = None,
          rtol: float = 1e-6, chunks: list[int] = CHUNKS) -> None:
    ref = tn.Session(g).run(fetches, feed_dict=feed)
    fast = [tn.Session(g, backend="fast", stack_chunk=c).run(fetches, feed_dict=feed) for c in chunks]
    for chunk, got in zip(chunks, fast, strict=True):
        for r, f in zip(ref, got, strict=True):
            np.testing.assert_allclose(f, r, rtol=rtol, atol=1e-12, err_msg=f"stack_chunk={chunk}")
    if want is not None:
        for r, w in zip(ref, want, strict=True):
            np.testing.assert_allclose(r, w, rtol=rtol)


def test_squaring_loop_gradient_is_1024() -> None:
    # 2 -> 4 -> 16 -> 256 = x**8; d/dx = 8 x**7 = 1024 at x = 2 (TensorFlow's classic case)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        y = tn.while_loop(lambda v: v < 100.0, lambda v: v * v, [x])
        (dx,) = tn.gradients(y, [x])
    check(g, [y, dx], {x: 2.0}, [256.0, 1024.0])


@pytest.mark.parametrize("n,chunks", [(0, CHUNKS), (7, [1, 3, 1024])])
def test_power_loop_with_run_time_trip_count(n: int, chunks: list[int]) -> None:
    g, x, N, y, dx = graphs.power_loop()
    check(g, [y, dx], {x: 1.5, N: n}, [1.5**n, n * 1.5 ** (n - 1) if n else 0.0], chunks=chunks)


def test_nested_loops_gradient() -> None:
    # y = x**(3*2): d/dx = 6 x**5
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")

        def outer(i, y):
            _, y2 = tn.while_loop(lambda j, y: j < 2, lambda j, y: (j + 1, y * x), [tn.constant(0), y])
            return i + 1, y2

        _, y = tn.while_loop(lambda i, y: i < 3, outer, [tn.constant(0), tn.ones_like(x)])
        (dx,) = tn.gradients(y, [x])
    check(g, [y, dx], {x: 1.1}, [1.1**6, 6 * 1.1**5])


def test_nested_loops_with_run_time_inner_trip_counts() -> None:
    # inner loop runs i times in outer iteration i: y = x**(0+1+2+3+4) = x**10
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")

        def outer(i, y):
            _, y2 = tn.while_loop(lambda j, y: j < i, lambda j, y: (j + 1, y * x), [tn.constant(0), y])
            return i + 1, y2

        _, y = tn.while_loop(lambda i, y: i < 5, outer, [tn.constant(0), tn.ones_like(x)])
        (dx,) = tn.gradients(y, [x])
    check(g, [y, dx], {x: 1.05}, [1.05**10, 10 * 1.05**9])


def test_cond_inside_loop_gradient() -> None:
    # x = 3: y = 3 -> 9 -> 27 (> 10) -> 13.5 -> 6.75; as a function of x: y = x**3 / 4, dy/dx = 3 x**2 / 4
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        _, y = tn.while_loop(lambda i, y: i < 4,
                             lambda i, y: (i + 1, tn.cond(y > 10.0, lambda: y * 0.5, lambda: y * x)),
                             [tn.constant(0), x])
        (dx,) = tn.gradients(y, [x])
    check(g, [y, dx], {x: 3.0}, [6.75, 27.0 / 4.0])


@pytest.mark.parametrize("wrap", ["cond", "case"])
def test_a_scan_inside_a_conditional_has_its_gradient_compiled(wrap: str) -> None:
    """Found by the routes property under a gradient budget (dev profile), but no budget is needed: the
    gradient of a TensorArray unstacked in a branch stacks the cotangents to the forward value's shape,
    a constant of the backward branch that left the conditional as a traced value, so the compiled
    program could not size the stack and the run went to the interpreter. The gradient marks such a
    constant as the size it is (``gradient_shape``), which a conditional hands out as a constant.
    The scan's results sum ``fs``: the gradient is ones where the branch runs, else zeros."""
    g = tn.Graph()
    with g.as_default():
        fs = tn.placeholder(tn.float64, [3], name="fs")
        k = tn.placeholder(tn.int32, [], name="k")

        def branch() -> tn.Tensor:
            return tn.reduce_sum(tn.scan(lambda c, e: e * 1.0, fs, initializer=tn.constant(0.0, tn.float64)))

        def other() -> tn.Tensor:
            return tn.constant(0.0, tn.float64)

        y = tn.cond(k > 0, branch, other) if wrap == "cond" else tn.case(1 - k, [branch], default=other)
        (gx,) = tn.gradients(y, [fs])
    sess = tn.Session(g, backend="fast", fallback=False)
    for taken in (0, 1):
        np.testing.assert_array_equal(sess.run(gx, {fs: np.arange(3.0), k: taken}), np.full(3, float(taken)))


@pytest.mark.parametrize("take", [True, False])
def test_loop_inside_cond_gradient(take: bool) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        p = tn.placeholder(tn.bool, [], name="p")

        def loop() -> tn.Tensor:
            return tn.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), [tn.constant(0), x])[1]

        y = tn.cond(p, loop, lambda: x * 2.0)
        (dx,) = tn.gradients(y, [x])
    # taken: x**4 -> 4 x**3; untaken: 2x -> 2
    check(g, [y, dx], {x: 1.2, p: take}, [1.2**4, 4 * 1.2**3] if take else [2.4, 2.0])


def test_scan_and_map_fn_gradients() -> None:
    g = tn.Graph()
    with g.as_default():
        xs = tn.placeholder(tn.float64, [4], name="xs")
        prods = tn.scan(lambda c, x: c * x, xs, initializer=tn.constant(1.0, tn.float64))
        sq = tn.map_fn(lambda x: x * x, xs)
        loss = tn.reduce_sum(prods) + tn.reduce_sum(sq)
        (dxs,) = tn.gradients(loss, [xs])
    v = np.array([1.0, 2.0, 3.0, 0.5])
    # d/dx_k sum_j prod_{i<=j} x_i = sum_{j>=k} prod_{i<=j, i!=k} x_i ; plus 2 x_k
    want = np.array([sum(np.prod([v[i] for i in range(j + 1) if i != k]) for j in range(k, 4)) for k in range(4)])
    check(g, [dxs], {xs: v}, [want + 2 * v])


def _rnn(g: tn.Graph, act: Callable[[Any], Any]) -> tuple[Any, ...]:
    with g.as_default():
        xs = tn.placeholder(tn.float64, [None, 3], name="xs")
        w = tn.Variable(np.array([[0.5, -0.2], [0.1, 0.3], [-0.4, 0.2]]), name="w")
        u = tn.Variable(np.array([[0.9, 0.1], [-0.3, 0.7]]), name="u")
        h0 = tn.zeros([1, 2], tn.float64)
        hs = tn.scan(lambda h, x: act(tn.matmul(tn.reshape(x, [1, 3]), w) + tn.matmul(h, u)), xs, initializer=h0)
        loss = tn.reduce_sum(hs * hs)
        dw, du = tn.gradients(loss, [w, u])
    return xs, loss, dw, du


def test_rnn_gradients_with_respect_to_variables() -> None:
    g = tn.Graph()
    xs, loss, dw, du = _rnn(g, tn.tanh)
    rng = np.random.default_rng(0)
    check(g, [loss, dw, du], {xs: rng.normal(size=(6, 3))}, rtol=1e-9)


def test_gradient_program_is_not_recompiled_for_a_new_trip_count() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        N = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, y: i < N, lambda i, y: (i + 1, tn.tanh(y) * x), [tn.constant(0), x])
        (dx,) = tn.gradients(y, [x])
    sess = tn.Session(g, backend="fast", stack_chunk=4, precompile_staged=True)
    ref = tn.Session(g)
    sess.run([y, dx], {x: 0.7, N: 3})
    compiles = sess.backend.compile_count
    for n in (1, 9, 30):
        np.testing.assert_allclose(sess.run([y, dx], {x: 0.7, N: n}), ref.run([y, dx], {x: 0.7, N: n}), rtol=1e-9)
    assert sess.backend.compile_count == compiles
    assert sess.last_result.stats["stack_chunks_kept"] > 0  # swap_memory=False: the chunks stay on the device


def test_nested_stack_outgrowing_its_chunk_is_rerun_with_a_larger_chunk() -> None:
    # inner loop pushes 5 values per outer iteration into a chunk of 1: the run is repeated with a
    # larger capacity (see turnout.fast.stacks) and the gradient is unchanged: y = x**15, 15 x**14
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")

        def outer(i, y):
            _, y2 = tn.while_loop(lambda j, y: j < 5, lambda j, y: (j + 1, y * x), [tn.constant(0), y])
            return i + 1, y2

        _, y = tn.while_loop(lambda i, y: i < 3, outer, [tn.constant(0), tn.ones_like(x)])
        (dx,) = tn.gradients(y, [x])
    sess = tn.Session(g, backend="fast", stack_chunk=1)
    np.testing.assert_allclose(sess.run([y, dx], {x: 1.01}), [1.01**15, 15 * 1.01**14], rtol=1e-12)
    assert sess.last_result.stats["stack_capacity_retries"] > 0


@settings(max_examples=examples(10))
@given(st.data())
def test_generated_program_gradients_agree_with_the_reference(data: st.DataObject) -> None:
    """Gradients of generated float programs (nested loops, conds, scans; tests/strategies.py) on the
    fast backend with tiny chunks (2 entries: many swaps) equal the reference backend's."""
    import strategies

    case = data.draw(strategies.gradient_cases())
    ref = tn.Session(case.graph).run(case.grads, feed_dict=case.feeds)
    got = tn.Session(case.graph, backend="fast", stack_chunk=2).run(case.grads, feed_dict=case.feeds)
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


SLICES: dict[str, Callable[[Any], Any]] = {
    "rows": lambda x: x[1:4], "columns": lambda x: x[:, 0:3], "every other row": lambda x: x[::2],
    "strided rows of one column": lambda x: x[1::3, 2], "last row": lambda x: x[-1],
    "negative bounds": lambda x: x[:, -2:, 1:3], "empty": lambda x: x[4:1], "reversed": lambda x: x[::-1],
    "one element": lambda x: x[2, 3, 1], "stop past the end": lambda x: x[:, 1:100:2],
}


@pytest.mark.parametrize("name", sorted(SLICES))
def test_slice_gradients_in_a_loop_agree_with_the_reference(name: str) -> None:
    """A static slice's gradient is a pad with zeros (``lowering._pad_config``); reversed, empty and
    run-time indices keep the scatter-add. Each form, alone and inside a loop whose body slices
    the carried value (as an LSTM slices its gates), gives the reference backend's gradient."""
    f = SLICES[name]
    xv = np.random.default_rng(0).normal(size=(5, 6, 4))
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [5, 6, 4])
        n = tn.placeholder(tn.int32, [])
        y = tn.reduce_sum(f(x) * f(x)) * 1.5

        def body(i: Any, acc: Any) -> Any:
            return i + 1, acc + tn.reduce_sum(tn.tanh(f(x * acc)))

        _, looped = tn.while_loop(lambda i, acc: i < n, body, [tn.constant(0), tn.constant(1.0, tn.float64)])
        dx, dlx = tn.gradients(y, [x])[0], tn.gradients(looped, [x])[0]
    check(g, [dx, dlx], {x: xv, n: 3})


def test_only_static_forward_indices_are_padded() -> None:
    """``_pad_config`` gives the pad of each dimension (before, after, interior) for static integers and
    forward slices, and refuses the rest, which the scatter-add handles."""
    from turnout.fast.lowering import _pad_config

    assert _pad_config((slice(1, 4), 2), (5, 6, 4)) == ([(1, 1, 0), (2, 3, 0), (0, 0, 0)], (3, 1, 4))
    assert _pad_config((slice(1, None, 3),), (6,)) == ([(1, 1, 2)], (2,))
    assert _pad_config((-1,), (5,)) == ([(4, 0, 0)], (1,))
    assert _pad_config((slice(None, None, -1),), (5,)) is None
    assert _pad_config((slice(4, 1),), (5,)) is None
    assert _pad_config((np.int32(1), slice(0, 2)), (3, 3)) == ([(1, 1, 0), (0, 1, 0)], (1, 2))
    import jax.numpy as jnp

    assert _pad_config((jnp.zeros((), jnp.int32),), (5,)) is None  # a value known only at run time


def _compiled_matches_closed_form(sess: tn.Session, fetches: list[Any], feed: dict[Any, Any], xv: np.ndarray,
                                  w0: np.ndarray, steps: list[str]) -> list[Any]:
    """Run ``[loss, dx, dw]`` on the fast backend, check that it was compiled, and compare it with the
    closed form (float64, forward then backward by hand) of ``loss = sum(h * h)`` after the ``steps``
    from ``h = x``: ``"tanh"`` is h <- tanh(h W), ``"double"`` h <- 2 h, ``"shift"`` h <- h - 1."""
    hs, h, w = [], xv.astype(np.float64), w0.astype(np.float64)
    for step in steps:
        hs.append(h)
        h = np.tanh(h @ w) if step == "tanh" else h * 2.0 if step == "double" else h - 1.0
    dh, dw = 2.0 * h, np.zeros_like(w)
    for step, before in reversed(list(zip(steps, hs, strict=True))):
        if step == "tanh":
            dz = dh * (1.0 - np.tanh(before @ w) ** 2)
            dw, dh = dw + before.T @ dz, dz @ w.T
        elif step == "double":
            dh = dh * 2.0
    got = sess.run(fetches, feed)
    assert sess.last_result.stats["executor"] == "compiled"
    np.testing.assert_allclose(got[0], (h * h).sum(), rtol=1e-5)
    np.testing.assert_allclose(got[1], dh, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got[2], dw, rtol=1e-4, atol=1e-6)
    return list(got)


@pytest.mark.parametrize("shape", [[3, 4], [None, 4], [None, None], None], ids=["known", "batch", "rank", "unknown"])
@pytest.mark.parametrize("chunk", [2, 1024])
def test_cond_in_loop_gradient_of_a_batch_of_unknown_size_compiles(shape: Any, chunk: int) -> None:
    """A loop whose body is a cond over a batch of unknown size (``[None, 4]``, the usual placeholder),
    differentiated with respect to the input and a Variable. Two faults met here: building the
    gradient raised ``ShapeError`` (the zeros that carry a value's shape had shape ``[?, ?]``), and
    once built the fast backend ran it on the interpreter (the branch's exported value and its
    stand-in differ in shape; the zeros' shape is popped from a stack). Now every shape compiles,
    with both stack sizes, and matches the closed form: h <- tanh(h W) on even steps, 2 h on odd."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, shape, name="x")
        w0 = (np.arange(16, dtype=np.float32).reshape(4, 4) - 7.0) / 20.0
        w = tn.Variable(w0, name="w")

        def body(i: tn.Tensor, h: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            return i + 1, tn.cond(tn.equal(i % 2, 0), lambda: tn.tanh(tn.matmul(h, w.read())), lambda: h * 2.0)

        _, h = tn.while_loop(lambda i, h: i < 4, body, [tn.constant(0), x])
        loss = tn.reduce_sum(h * h)
        dx, dw = tn.gradients(loss, [x, w])
    xv = np.linspace(-1.0, 1.0, 12).reshape(3, 4).astype(np.float32)
    sess = tn.Session(g, backend="fast", stack_chunk=chunk)
    got = _compiled_matches_closed_form(sess, [loss, dx, dw], {x: xv}, xv, w0, ["tanh", "double"] * 2)
    ref = tn.Session(g).run([loss, dx, dw], {x: xv})
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_case_in_loop_gradient_of_a_batch_of_unknown_size_compiles() -> None:
    """The same over a three-way ``tn.case`` (one ``lax.switch``, its links' decisions fixed per
    function): the stand-ins of the values its gradient needs are filled there too. Closed form:
    step i applies tanh(h W), 2 h or h - 1 by i mod 3."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 4], name="x")
        w0 = (np.arange(16, dtype=np.float32).reshape(4, 4) - 7.0) / 20.0
        w = tn.Variable(w0, name="w")

        def body(i: tn.Tensor, h: tn.Tensor) -> tuple[tn.Tensor, tn.Tensor]:
            return i + 1, tn.case(i % 3, [lambda: tn.tanh(tn.matmul(h, w.read())), lambda: h * 2.0,
                                          lambda: h - 1.0])

        _, h = tn.while_loop(lambda i, h: i < 5, body, [tn.constant(0), x])
        loss = tn.reduce_sum(h * h)
        dx, dw = tn.gradients(loss, [x, w])
    xv = np.linspace(-1.0, 1.0, 12).reshape(3, 4).astype(np.float32)
    _compiled_matches_closed_form(tn.Session(g, backend="fast"), [loss, dx, dw], {x: xv}, xv, w0,
                                  ["tanh", "double", "shift", "tanh", "double"])


#: why a generated program over batches may still run on the interpreter: a cond whose branches give a
#: scalar and a batch on a predicate the loop decides, or a loop variable that becomes a batch
_BATCH_FALLBACKS = ("different types or shapes", "changes type or shape across iterations")


@pytest.mark.parametrize("float_shape", [[None], None], ids=["batch", "rank"])
@settings(max_examples=examples(40))
@given(data=st.data())
def test_generated_gradients_over_batches_of_unknown_size_compile_and_agree(float_shape: Any, data: Any) -> None:
    """The generated gradient programs of the property tests, their float inputs declared as batches
    of unknown size (``[None]``) or of unknown rank and fed three values: the fast backend gives the
    reference's values and errors, and compiles every program except those the docs list
    (docs/missing.rst). Two faults this family hits were found by hand: the gradient of a cond in a
    loop raised ``ShapeError`` when built, and once built ran on the interpreter."""
    from hypothesis import assume
    from programs import build
    from strategies import float_programs, inputs_for

    p = data.draw(float_programs(max_depth=2))
    try:
        b = build(p, float_shape)
    except (tn.ShapeError, tn.DTypeError):  # a loop variable that turns a scalar into a batch
        assume(False)
    xs = [t for t in b.placeholders.values() if t.dtype.is_floating]
    ys = [f for f in b.fetches if f.dtype.is_floating]
    assume(xs and ys)
    with b.graph.as_default():  # (an error here is the gradient's: it fails the test)
        grads = [g for g in tn.gradients(ys[0], xs) if g is not None]
    assume(grads)
    feeds: dict[Any, Any] = {}
    for name, v in data.draw(inputs_for(p, wide=False)).items():
        t = b.placeholders[name]
        feeds[t] = np.array([v, v * 0.5, -v], t.dtype.numpy) if t.dtype.is_floating and np.ndim(v) == 0 else v
    fetches = list(b.fetches) + grads
    try:
        want = tn.Session(b.graph).run(fetches, feeds)
    except tn.TurnoutError as e:
        with pytest.raises(type(e)):
            tn.Session(b.graph, backend="fast").run(fetches, feeds)
        return
    sess = tn.Session(b.graph, backend="fast")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = sess.run(fetches, feeds)
    stats = sess.last_result.stats
    if stats["executor"] != "compiled":
        assert any(r in stats["fallback_reason"] for r in _BATCH_FALLBACKS), stats["fallback_reason"]
    for a, w in zip(got, want, strict=True):
        np.testing.assert_allclose(a, w, rtol=1e-6, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize("k", [0, 1, 2])
def test_the_gradient_of_a_nested_case_over_a_batch_compiles(k: int) -> None:
    """Regression (the ``dev`` profile of
    ``test_generated_gradients_over_batches_of_unknown_size_compile_and_agree[batch]``): the gradient
    of a ``tn.case`` whose first branch holds another ``case``, over a batch of unknown size. The
    gradient switches the batch's shape through conds on the forward predicates, and the regions
    group one of those Switches with the forward cond, so the shape left that cond traced and the
    ``Fill`` of the zeros for an untaken branch was refused ("the shape of Fill must be known when
    compiling"; the program ran on the interpreter). A size that is one constant in every branch where
    it lives is that constant after the cond (``emit._fold_exports``): compiled, with the reference's
    values, whichever branch runs."""
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        f = tn.placeholder(tn.float64, [None], name="f")

        def first() -> tuple[tn.Tensor]:
            zero = tn.constant(0.0, tn.float64)
            tn.case(tn.constant(0), [lambda: (zero,)], default=lambda: (zero,))
            return (f,)

        (v,) = tn.case(i, [first, lambda: (f,)], default=lambda: (tn.constant(0.0, tn.float64) + f,))
        (df,) = tn.gradients(v * v, [f])
    feeds = {i: np.int32(k), f: np.array([0.5, -1.0, 2.0])}
    want = tn.Session(g).run([v, df], feeds)
    fast = tn.Session(g, backend="fast", fallback=False)
    got = fast.run([v, df], feeds)
    assert fast.last_result.stats["executor"] == "compiled"
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b)
    np.testing.assert_allclose(got[1], 2.0 * feeds[f])
