"""Bad inputs, one test per class of mistake: never a silent wrong answer.

Every value that enters a graph (constants, Python scalars in operators, feeds, attributes, builder
arguments), every cast from float to int, every Merge that would receive two live inputs, every
allocation a small graph can ask for and every runaway loop ends in a Turnout error that names the
culprit, or in the one documented value. Classes that fail at run time are parametrized over every
in-process backend registered in ``turnout.session.BACKENDS`` (a backend added there is tested here at
once; the Ray backend's share is in ``tests/test_ray.py``);
classes that fail while the graph is built are backend-independent and run once.

``python -m tests.test_bad_inputs`` prints how many inputs the tables hold and their expected outcomes.
"""

from __future__ import annotations

import collections
import datetime
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout import raw
from turnout.session import BACKENDS, RunOptions

#: every in-process backend; "ray" needs a running cluster, so its share of this catalogue (feeds are
#: checked by the same Session front end before any backend runs) is left to tests/test_ray.py
ALL_BACKENDS = sorted(b for b in BACKENDS if b != "ray")


@pytest.fixture(params=ALL_BACKENDS)
def any_backend(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


def session(g: tn.Graph, backend: str) -> tn.Session:
    """A session of ``backend``; the partitioned ones spread the graph's nodes over two devices (soft
    requests, so colocation rules still hold), so a bad input meets Send/Recv (or a cross-device copy)
    on its way."""
    if backend not in ("partitioned", "fast-partitioned"):
        return tn.Session(g, backend=backend)
    devices = ["cpu:0", "cpu:1"]
    requests = {n.name: devices[k % 2] for k, n in enumerate(g.nodes)}
    return tn.Session(g, backend=backend, devices=devices, requests=requests)


def run(g: tn.Graph, backend: str, fetch: Any, feeds: Any = None, **options: Any) -> Any:
    with session(g, backend) as s:
        return s.run(fetch, feeds, **options)


# ---- 1. constants ---------------------------------------------------------------------------------
BAD_CONSTANTS: list[tuple[Any, Any, str]] = [
    (2**40, None, "does not fit in int32"),
    (-(2**31) - 1, None, "does not fit in int32"),
    (2**70, None, "does not fit in int64"),
    (2**64 - 1, tn.int64, "does not fit in int64"),
    (np.uint64(2**64 - 1), tn.int64, "does not fit in int64"),
    ([1, 2**40], tn.int32, "does not fit in int32"),
    ("1.5", None, "is a string"),
    ("1.5", tn.float32, "is a string"),
    (b"7", None, "bytes string"),
    (1j, None, "complex number"),
    (np.complex64(1), tn.float32, "complex number"),
    (datetime.datetime(2020, 1, 1), None, "Python object"),
    (np.datetime64("2020-01-01"), None, "datetime"),
    (np.timedelta64(3, "s"), tn.int64, "timedelta"),
    (None, None, "Python object"),
    (object(), tn.float32, "Python object"),
    ([[1], [1, 2]], None, "cannot convert"),
    (1e300, None, "overflows float32"),
    (2.5, tn.int32, "not a whole number"),
    (float("nan"), tn.int32, "not a whole number"),
    (float("inf"), tn.int64, "not a whole number"),
    (3e9, tn.int32, "does not fit in int32"),
    (True, tn.int32, "bool"),
    (1, tn.bool, "for a bool tensor"),
]


@pytest.mark.parametrize("value,dtype,words", BAD_CONSTANTS, ids=[repr(c[0])[:20] for c in BAD_CONSTANTS])
def test_constants_are_kind_and_range_checked(value: Any, dtype: Any, words: str) -> None:
    with tn.Graph().as_default(), pytest.raises(tn.GraphBuildError, match="constant") as info:
        tn.constant(value, dtype=dtype)
    assert words in str(info.value)
    assert "test_bad_inputs.py:" in str(info.value)  # the user's source line


def test_good_constants_keep_their_value() -> None:
    with tn.Graph().as_default():
        assert int(tn.Session().run(tn.constant(2**40, dtype=tn.int64))) == 2**40
        assert int(tn.Session().run(tn.constant(3.0, dtype=tn.int32))) == 3
        assert int(tn.Session().run(tn.constant(-(2**31)))) == -(2**31)


# ---- 2. Python scalars in operators ---------------------------------------------------------------
BAD_SCALARS: list[tuple[Any, Callable[[Any, Any], Any], Any, str]] = [
    (tn.int32, lambda x, v: x + v, 2**40, "does not fit in int32"),
    (tn.int32, lambda x, v: v * x, -(2**31) - 1, "does not fit in int32"),
    (tn.int64, lambda x, v: x - v, 2**63, "does not fit in int64"),
    (tn.int32, lambda x, v: x + v, 1.5, "not a whole number"),
    (tn.int32, lambda x, v: tn.maximum(x, v), 2**32, "does not fit in int32"),
    (tn.int32, lambda x, v: x < v, 2**35, "does not fit in int32"),
    (tn.float32, lambda x, v: x * v, 1e300, "overflows float32"),
    (tn.float32, lambda x, v: x + v, "1", "is a string"),
    (tn.float32, lambda x, v: x + v, 1j, "complex number"),
    (tn.bool, lambda x, v: x & v, 2, "for a bool tensor"),
    (tn.float32, lambda x, v: tn.where(x > 0, x, v), "0", "is a string"),
]


@pytest.mark.parametrize("dtype,fn,value,words", BAD_SCALARS, ids=[str(i) for i in range(len(BAD_SCALARS))])
def test_python_scalars_in_operators_are_checked(dtype: Any, fn: Any, value: Any, words: str) -> None:
    with tn.Graph().as_default():
        x = tn.placeholder(dtype, [], name="xin")
        with pytest.raises(tn.GraphBuildError, match="xin") as info:
            fn(x, value)
    assert words in str(info.value)


# ---- 3. attributes: axes, dims, multiples, maximum_iterations -------------------------------------
def _vec() -> tn.Tensor:
    return tn.constant([[1.0, 2.0], [3.0, 4.0]])


BAD_ATTRIBUTES: list[tuple[str, Callable[[], Any], str]] = [
    ("reshape to 2.9", lambda: tn.reshape(_vec(), [2.9, 2]), "reshape: shape[0]"),
    ("reshape to '4'", lambda: tn.reshape(_vec(), ["4"]), "reshape: shape[0]"),
    ("reshape to a scalar", lambda: tn.reshape(_vec(), 4), "reshape: shape"),
    ("reduce_sum axis 1.5", lambda: tn.reduce_sum(_vec(), axis=1.5), "reduce_sum: axis"),
    ("reduce_mean axis [0, 1.0]", lambda: tn.reduce_mean(_vec(), axis=[0, 1.0]), "reduce_mean: axis[1]"),
    ("reduce_max axis True", lambda: tn.reduce_max(_vec(), axis=True), "reduce_max: axis"),
    ("expand_dims axis 0.0", lambda: tn.expand_dims(_vec(), 0.0), "expand_dims: axis"),
    ("concat axis 1.0", lambda: tn.concat([_vec(), _vec()], 1.0), "concat: axis"),
    ("gather axis 0.5", lambda: tn.gather(_vec(), tn.constant([0]), axis=0.5), "gather: axis"),
    ("tile multiples 2.0", lambda: tn.tile(_vec(), [2.0, 1]), "tile: multiples[0]"),
    ("transpose perm 1.0", lambda: tn.transpose(_vec(), [1.0, 0]), "transpose: perm[0]"),
    ("slice step 1.5", lambda: _vec()[::1.5], "slice step"),
    ("zeros of 10**12", lambda: tn.zeros([10**6, 10**6]), "max_tensor_bytes"),
    ("zeros of 2.5", lambda: tn.ones([2.5]), "ones: shape[0]"),
    ("placeholder shape 2.5", lambda: tn.placeholder(tn.float32, [2.5], name="ph"),
     "placeholder ph: invalid dimension"),
    ("cast to a string dtype", lambda: tn.cast(_vec(), "string"), "cast: dtype"),
    ("cast to complex", lambda: tn.cast(_vec(), complex), "cast: dtype"),
    ("Variable of a string", lambda: tn.Variable("abc"), "Variable: 'abc' is a string"),
    ("Variable of None", lambda: tn.Variable(None), "Variable: None"),
    ("Variable of 2**40", lambda: tn.Variable(2**40), "Variable: integer 1099511627776 does not fit in int32"),
    ("TensorArray size 2**40", lambda: tn.TensorArray(tn.float32, size=2**40), "does not fit in int32"),
    ("TensorArray size 2.5", lambda: tn.TensorArray(tn.float32, size=2.5), "not a whole number"),
    ("fill shape 2.5", lambda: tn.fill([2.5], 1.0), "not a whole number"),
    ("map_fn over None", lambda: tn.map_fn(lambda x: x, None), "None"),
    ("maximum_iterations 2**40",
     lambda: tn.while_loop(lambda i: i < 3, lambda i: i + 1, [tn.constant(0)], maximum_iterations=2**40),
     "while_loop: maximum_iterations"),
    ("maximum_iterations np.int64(2**40)",
     lambda: tn.while_loop(lambda i: i < 3, lambda i: i + 1, [tn.constant(0)],
                           maximum_iterations=np.int64(2**40)),
     "while_loop: maximum_iterations"),
    ("maximum_iterations 2.0",
     lambda: tn.while_loop(lambda i: i < 3, lambda i: i + 1, [tn.constant(0)], maximum_iterations=2.0),
     "maximum_iterations"),
]


@pytest.mark.parametrize("case,fn,words", BAD_ATTRIBUTES, ids=[c[0] for c in BAD_ATTRIBUTES])
def test_attributes_are_ints_never_truncated(case: str, fn: Callable[[], Any], words: str) -> None:
    with tn.Graph().as_default(), pytest.raises(tn.GraphBuildError) as info:
        fn()
    assert words in str(info.value)


# ---- 4. feeds -------------------------------------------------------------------------------------
BAD_FEEDS: list[tuple[Any, Any, str]] = [
    (tn.int32, 2**40, "does not fit in int32"),
    (tn.int32, np.int64(2**31), "does not fit in int32"),
    (tn.int32, [1, 2**40], "does not fit in int32"),
    (tn.int64, np.uint64(2**64 - 1), "does not fit in int64"),
    (tn.int64, 2**64, "does not fit in int64"),
    (tn.int32, 2.5, "floating"),
    (tn.int32, True, "bool"),
    (tn.bool, 1, "for a bool tensor"),
    (tn.float32, "1.5", "is a string"),
    (tn.float32, "abc", "is a string"),
    (tn.float32, b"1", "bytes string"),
    (tn.float32, 1j, "complex number"),
    (tn.float64, np.complex128(2), "complex number"),
    (tn.float32, datetime.datetime(2020, 1, 1), "Python object"),
    (tn.float32, np.datetime64("2020-01-01"), "datetime"),
    (tn.int64, np.timedelta64(3, "s"), "timedelta"),
    (tn.float32, object(), "Python object"),
    (tn.float32, None, "Python object"),
    (tn.float32, 1e300, "overflows float32"),
    (tn.float32, [[1.0], [1.0, 2.0]], "cannot convert"),
]


@pytest.mark.parametrize("dtype,value,words", BAD_FEEDS, ids=[f"{c[0].name}<-{c[1]!r:.20}" for c in BAD_FEEDS])
def test_feeds_are_kind_and_range_checked(any_backend: str, dtype: Any, value: Any, words: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(dtype, None, name="fed_x")
        y = tn.identity(x)
    with pytest.raises(tn.FeedError, match="fed_x") as info:
        run(g, any_backend, y, {x: value})
    assert words in str(info.value)


def test_a_good_feed_after_a_bad_one_is_still_checked(any_backend: str) -> None:
    """The feed-signature cache must not let 2**40 through after 5 passed with the same numpy dtype."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [], name="fed_x")
        y = x + 1
    with session(g, any_backend) as s:
        assert int(s.run(y, {x: 5})) == 6
        with pytest.raises(tn.FeedError, match="does not fit"):
            s.run(y, {x: 2**40})
        with pytest.raises(tn.FeedError, match="does not fit"):
            s.run([y], {x: np.int64(2**40)})


def test_two_feeds_of_one_tensor_must_agree(any_backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="fed_x")
        y = x * 2.0
    with pytest.raises(tn.FeedError, match="fed twice"):
        run(g, any_backend, y, {x: 1.0, "fed_x:0": 2.0})
    assert float(run(g, any_backend, y, {x: 1.0, "fed_x:0": 1.0})) == 2.0


@pytest.mark.parametrize("bad", [[], ["x"], "x", 5], ids=["empty-list", "list", "str", "int"])
def test_a_feed_dict_that_is_not_a_mapping_is_a_feed_error(any_backend: str, bad: Any) -> None:
    """``feed_dict`` as a list of pairs, a string or a number is a ``FeedError`` saying what it must
    be, on every backend, and after repeated runs too (the fast backend's lane, which checks the feeds
    of a repeat itself, hands such a call to the session's checks). It was a bare ``AttributeError``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        y, z = x + 1.0, tn.constant(3.0) * 2.0
    with session(g, any_backend) as s:
        for _ in range(3):  # repeats: the fast backend makes lanes for both fetches
            s.run(y, {x: np.ones(2, np.float32)})
            s.run(z)
        pairs = [(x, np.ones(2, np.float32))] if bad == ["x"] else bad
        for fetch in (y, z):
            with pytest.raises(tn.FeedError, match="feed_dict must be a dict"):
                s.run(fetch, pairs)


def test_a_deleted_jax_array_feed_is_a_feed_error(any_backend: str) -> None:
    """A ``jax.Array`` donated to a jitted call (or deleted) has no value: feeding it is a
    ``FeedError`` naming the tensor on every backend, after repeated runs of live arrays too. It was a
    bare ``RuntimeError`` from JAX."""
    jnp = pytest.importorskip("jax.numpy")
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        y = x + 1.0
    with session(g, any_backend) as s:
        for _ in range(3):
            np.testing.assert_array_equal(s.run(y, {x: jnp.ones(2, jnp.float32)}), [2.0, 2.0])
        dead = jnp.ones(2, jnp.float32)
        dead.delete()
        with pytest.raises(tn.FeedError, match="x:0.*deleted"):
            s.run(y, {x: dead})


# ---- 5. casts from float to int -------------------------------------------------------------------
BAD_CASTS: list[tuple[Any, Any]] = [
    ([float("nan")], tn.int32), ([float("inf")], tn.int32), ([-float("inf")], tn.int64),
    ([3e9], tn.int32), ([-2.1475e9], tn.int32), ([1e19], tn.int64), ([1.0, float("nan")], tn.int64),
]


@pytest.mark.parametrize("fold", [False, True], ids=["fed", "constant"])
@pytest.mark.parametrize("value,dtype", BAD_CASTS, ids=[f"{c[0]}->{c[1].name}" for c in BAD_CASTS])
def test_float_to_int_cast_of_nan_inf_or_out_of_range_is_an_error(any_backend: str, value: Any, dtype: Any,
                                                                    fold: bool) -> None:
    """One meaning on every backend: truncation toward zero where representable, else KernelError
    (the fast backend folds constants with the reference kernels and checks fed values in its lowering)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(value, dtype=tn.float64) if fold else tn.placeholder(tn.float64, [len(value)])
        y = tn.cast(x, dtype, name="the_cast")
    with pytest.raises(tn.KernelError, match="the_cast"):
        run(g, any_backend, y, None if fold else {x: value})


def test_float_to_int_cast_truncates_toward_zero(any_backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [6])
        y = tn.cast(x, tn.int32)
        z = tn.cast(tn.cast(x, tn.float64) * 1e9, tn.int64)
    vals = [-2.7, -0.5, 0.0, 0.9, 2.5, 2147483520.0]
    out = run(g, any_backend, [y, z], {x: vals})
    np.testing.assert_array_equal(out[0], np.trunc(np.asarray(vals, np.float32)).astype(np.int32))
    assert out[1].dtype == np.int64 and out[1][0] == -2700000047  # float32(-2.7) * 1e9, truncated


# ---- 6. builder arguments where a tensor is due ---------------------------------------------------
def _loop(cond: Any, body: Any, loop_vars: Any) -> Any:
    return tn.while_loop(cond, body, loop_vars)


BAD_BUILDER_ARGS: list[tuple[str, Callable[[], Any], str]] = [
    ("cond pred None", lambda: tn.cond(None, lambda: 1.0, lambda: 2.0), "cond: pred is None"),
    ("cond pred string", lambda: tn.cond("yes", lambda: 1.0, lambda: 2.0), "cond: pred"),
    ("cond pred ragged list", lambda: tn.cond([True, [False]], lambda: 1.0, lambda: 2.0), "cond: pred"),
    ("cond branch None", lambda: tn.cond(tn.constant(True), lambda: None, lambda: 2.0), "output 0 of true_fn"),
    ("cond branch string", lambda: tn.cond(tn.constant(True), lambda: 1.0, lambda: "b"), "output 0 of false_fn"),
    ("case index None", lambda: tn.case(None, [lambda: 1.0, lambda: 2.0]), "case: branch_index"),
    ("loop var None", lambda: _loop(lambda i: i < 3, lambda i: i + 1, [None]), "loop variable 0 is None"),
    ("loop var string", lambda: _loop(lambda i: i < 3, lambda i: i + 1, ["0"]), "loop variable 0"),
    ("loop cond None", lambda: _loop(lambda i: None, lambda i: i + 1, [tn.constant(0)]), "the value cond returns"),
    ("loop cond string", lambda: _loop(lambda i: "t", lambda i: i + 1, [tn.constant(0)]), "the value cond returns"),
    ("loop body None", lambda: _loop(lambda i: i < 3, lambda i: None, [tn.constant(0)]), "body output 0"),
    ("loop body string", lambda: _loop(lambda i: i < 3, lambda i: "x", [tn.constant(0)]), "body output 0"),
    ("loop body dict keys", lambda: _loop(lambda d: d["a"] < 3, lambda d: {"b": d["a"] + 1, "c": d["c"]},
                                          {"a": tn.constant(0), "c": tn.constant(1)}), "structures differ"),
    ("loop body dict keys in list", lambda: _loop(lambda d: d["a"] < 3, lambda d: [{"a": d["a"] + 1, "z": d["c"]}],
                                                  [{"a": tn.constant(0), "c": tn.constant(1)}]), "structures differ"),
]


@pytest.mark.parametrize("case,fn,words", BAD_BUILDER_ARGS, ids=[c[0] for c in BAD_BUILDER_ARGS])
def test_builders_name_the_argument_where_a_tensor_is_due(case: str, fn: Callable[[], Any], words: str) -> None:
    with tn.Graph().as_default(), pytest.raises(tn.GraphBuildError) as info:
        fn()
    msg = str(info.value)
    assert words in msg
    assert "no Turnout counterpart" not in msg
    assert msg.startswith(("cond", "case", "while_loop")), msg  # names the builder


def test_a_dict_body_with_the_same_keys_still_works(any_backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        out = tn.while_loop(lambda d: d["a"] < 3, lambda d: {"c": d["c"] * 2, "a": d["a"] + 1},
                            {"a": tn.constant(0), "c": tn.constant(1)})
    assert run(g, any_backend, [out["a"], out["c"]]) == [3, 8]


@pytest.mark.parametrize("update", ["assign", "assign_add"])
def test_an_assignment_that_changes_a_variables_shape_is_an_execution_error(any_backend: str, update: str) -> None:
    """A Variable keeps its shape ([E-Var-Assign]). The value comes from a placeholder of unknown
    shape, so only the run can tell. The small-step backend once wrote it and failed later, with the
    ``FeedError`` of the session's store; every backend now refuses the assignment itself, naming it."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.zeros(3, np.float32), name="v")
        x = tn.placeholder(tn.float32, None, name="x")
        op = getattr(v, update)(x)
    sess = session(g, any_backend)
    with pytest.raises(tn.ExecutionError, match="assigning shape"):
        sess.run(op, {x: np.ones((2, 3), np.float32)})
    assert "v" not in sess.variables  # the run raised, so it set nothing (see the next test)


def test_a_run_that_raises_changes_no_variable(any_backend: str) -> None:
    """A run is all or nothing for Variables (``Session._backend_run``): an assignment that fired
    before the error is undone. Before, the reference interpreter kept it (and which assignments had
    fired depended on the scheduler), the fast backend discarded the run's values, and the small-step
    backend had not even stored the Variables' initial values."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.zeros(3, np.float32), name="w")
        k = tn.placeholder(tn.int32, [], name="k")
        bumped = w.assign_add(tn.ones([3], tn.float32))
        with tn.control_dependencies([bumped]):
            q = tn.divide(tn.constant(6), k)
    sess = session(g, any_backend)
    with pytest.raises(tn.KernelError):
        sess.run(q, {k: np.int32(0)})
    assert "w" not in sess.variables  # the first run raised: nothing was set, not even the initial value
    for _ in range(2):  # twice: the second run of the fast backend takes its repeated-run route
        assert int(sess.run(q, {k: np.int32(2)})) == 3
        with pytest.raises(tn.KernelError):
            sess.run(q, {k: np.int32(0)})
    np.testing.assert_array_equal(sess.variables["w"], np.full(3, 2.0, np.float32))
    assert int(sess.run(q, {k: np.int32(3)})) == 2
    np.testing.assert_array_equal(sess.variables["w"], np.full(3, 3.0, np.float32))


# ---- 7. a Merge with two live inputs at one tag ---------------------------------------------------
def test_merge_of_two_live_inputs_is_an_error_on_every_backend(any_backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.constant(1.0)
        m, _ = raw.merge([a + 1.0, a * 3.0], name="racy")
    for scheduler in ("fifo", "lifo"):
        with pytest.raises(tn.MergeConflictError, match=r"\[E-Merge-Conflict\].*racy"):
            run(g, any_backend, m, scheduler=scheduler)


def test_merge_of_two_live_inputs_in_a_loop_is_reported(any_backend: str) -> None:
    """A cond-like Merge inside a loop body whose two inputs are both live at iteration 1."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")

        def body(i: Any, v: Any) -> Any:
            m, _ = raw.merge([v + 1.0, v * 2.0], name="racy_in_loop")
            return i + 1, m

        out = tn.while_loop(lambda i, v: i < 2, body, [tn.constant(0), x])
    with pytest.raises(tn.MergeConflictError, match="racy_in_loop"):
        run(g, any_backend, out[1], {x: 1.0})


# ---- 8. a control dependency on a fed placeholder -------------------------------------------------
def test_control_dependency_on_a_fed_placeholder(any_backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.float32, [], name="p")
        with tn.control_dependencies([p]):
            y = tn.constant(2.0) * 3.0
    assert float(run(g, any_backend, y, {p: 1.0})) == 6.0
    with pytest.raises(tn.FeedError, match='"p"'):
        run(g, any_backend, y)


def test_control_dependency_on_a_fed_placeholder_in_the_structured_evaluator() -> None:
    from turnout.semantics.structured import evaluate

    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.float32, [], name="p")
        with tn.control_dependencies([p]):
            y = tn.constant(2.0) * 3.0
    assert float(evaluate(g, [y], {p: 1.0}).values[0]) == 6.0
    with pytest.raises(tn.FeedError, match='"p"'):
        evaluate(g, [y])


# ---- 9. TensorFlow's testLoop_false: a Switch reading a non-constant Enter ------------------------
def loop_false() -> tuple[tn.Graph, tn.Tensor]:
    """The predicate enters iteration 0 only (non-constant Enter): iteration 0 sends 10 out through the
    Exit and, live, round the back edge; iteration 1's Switch then waits for a predicate that never
    comes. TensorFlow returns 10: the run ends at quiescence with the fetch produced."""
    g = tn.Graph()
    with g.as_default():
        enter_false = raw.enter(tn.constant(False), "foo_1")
        enter_n = raw.enter(tn.constant(10), "foo_1")
        m, _ = raw.merge([enter_n, raw.BACK_EDGE], name="merge_n")
        out_f, _ = raw.switch(m, enter_false, name="switch_n")
        y = raw.exit(out_f)
        raw.close_back_edge(m, raw.next_iteration(out_f))
    return g, y


def test_loop_false_returns_the_value_as_tensorflow_does(any_backend: str) -> None:
    g, y = loop_false()
    if any_backend == "partitioned":
        # A control loop follows its frame's LoopCond; this loop has none, so it cannot be split over
        # devices (docs/missing.rst). A clear error, never a value that differs.
        with pytest.raises(tn.PartitionError, match="0 LoopCond"):
            run(g, any_backend, y)
        with tn.Session(g, backend="partitioned", devices=["cpu:0", "cpu:1"]) as s:  # on one device: runs
            assert int(s.run(y)) == 10
        return
    if any_backend == "fast-partitioned":
        # No LoopCond, so no lax.while_loop: the partitioned reference executor runs it, and refuses to
        # split it, as above
        with pytest.warns(RuntimeWarning, match="LoopCond"), pytest.raises(tn.PartitionError, match="0 LoopCond"):
            run(g, any_backend, y)
        return
    if any_backend == "fast":
        # No LoopCond, so no lax.while_loop: the fast backend runs it on the interpreter, and says so.
        with pytest.warns(RuntimeWarning, match="LoopCond"):
            assert int(run(g, any_backend, y)) == 10
        return
    assert int(run(g, any_backend, y)) == 10


def test_loop_false_is_confluent_under_the_explorer() -> None:
    from turnout.semantics import explore

    g, y = loop_false()
    assert explore.check_confluence(g, [y]) is None


# ---- 10. resources: the allocation guard and runaway loops ----------------------------------------
def test_tile_by_ten_to_the_twelve_is_refused_before_allocating(any_backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2])
        y = tn.tile(x, [10**12], name="huge_tile")
    with pytest.raises(tn.ResourceExhaustedError, match="huge_tile|Tile.*max_tensor_bytes"):
        run(g, any_backend, y, {x: [1.0, 2.0]})


def test_tensor_array_of_two_to_the_thirty_slots_is_refused(any_backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        ta = tn.TensorArray(tn.float32, size=2**30)
        n = ta.size()
    with pytest.raises(tn.ResourceExhaustedError, match="max_tensor_bytes"):
        run(g, any_backend, n)


def test_fill_from_a_fed_huge_shape_is_refused(any_backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        s = tn.placeholder(tn.int32, [2], name="shape_in")
        y = tn.fill(s, 1.0)
    # (the fast backend cannot size a compiled tensor from a fed shape: it runs this on the interpreter)
    with pytest.raises(tn.ResourceExhaustedError, match="Fill.*40,000,000,000 bytes"):
        run(g, any_backend, y, {s: [100_000, 100_000]})


def test_the_allocation_limit_is_a_run_option(any_backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4])
        y = tn.reduce_sum(tn.tile(x, [1000]))
    with pytest.raises(tn.ResourceExhaustedError, match="max_tensor_bytes=1,000"):
        run(g, any_backend, y, {x: [1.0] * 4}, max_tensor_bytes=1000)
    assert float(run(g, any_backend, y, {x: [1.0] * 4}, max_tensor_bytes=16_000)) == 4000.0
    assert float(run(g, any_backend, y, {x: [1.0] * 4}, options=RunOptions(max_tensor_bytes=None))) == 4000.0


def _runaway() -> tuple[tn.Graph, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        r = tn.while_loop(lambda k: k >= 0, lambda k: k + 1, [tn.constant(0)], name="runaway")
    return g, r


@pytest.mark.parametrize("backend", ["reference", "smallstep"])
def test_a_runaway_loop_stops_within_seconds_naming_the_option(backend: str) -> None:
    g, r = _runaway()
    t0 = time.monotonic()
    with pytest.raises(tn.NonTerminationError, match="max_seconds") as info:
        run(g, backend, r, max_seconds=1.0, max_iterations=None, max_firings=None)
    assert time.monotonic() - t0 < 10
    if backend == "reference":
        assert "runaway" in str(info.value) and "test_bad_inputs.py" in str(info.value)  # names the loop


@pytest.mark.parametrize("backend", ["reference", "smallstep"])
def test_a_runaway_loop_stops_at_max_iterations_naming_the_loop(backend: str) -> None:
    """Both interpreters stop a loop instance whose predicate holds in iteration max_iterations (it
    would run one body more), with one message naming the loop frame, the Enter's source line and the
    option; the other guards are off, so only the iteration count can have stopped it."""
    g, r = _runaway()
    with pytest.raises(tn.NonTerminationError, match="would run body 41, over the limit max_iterations=40") \
            as info:
        run(g, backend, r, max_iterations=40, max_firings=None, max_seconds=None)
    assert "runaway" in str(info.value) and "test_bad_inputs.py" in str(info.value)


@pytest.mark.parametrize("bound", [9, 10, 11])
def test_max_iterations_lets_a_loop_of_that_many_bodies_run_on_every_backend(any_backend: str, bound: int) -> None:
    """``max_iterations=n`` allows ``n`` bodies, on every backend. The interpreters once counted the
    iteration that finds the predicate false as one more (a loop of 10 bodies needed
    ``max_iterations=11`` there and 10 on the fast backend)."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        ten = tn.while_loop(lambda k: k < n, lambda k: k + 1, [tn.constant(0)])
    if bound < 10:
        with pytest.raises(tn.NonTerminationError, match="max_iterations"):
            run(g, any_backend, ten, {n: np.int32(10)}, max_iterations=bound)
    else:
        assert int(run(g, any_backend, ten, {n: np.int32(10)}, max_iterations=bound)[0]) == 10


def test_runaway_loop_limits(any_backend: str) -> None:
    """Each counting guard stops a runaway loop where the backend enforces it: max_iterations on every
    backend (a compiled loop's counter on fast), max_firings on the interpreters (reference,
    small-step). Small limits keep the test quick; the defaults are test_default_limits'."""
    g, r = _runaway()
    # No wall-clock guard here: on a loaded machine the small-step system can take longer than the
    # default 10 s to reach 500 iterations, and this test is about the counting guards.
    with pytest.raises(tn.NonTerminationError, match="max_iterations"):
        run(g, any_backend, r, max_iterations=500, max_firings=None, max_seconds=None)
    if any_backend not in ("fast", "fast-partitioned"):
        with pytest.raises(tn.NonTerminationError, match="max_firings"):
            run(g, any_backend, r, max_firings=3000, max_seconds=None)
    else:  # compiled code counts no firings: the budget is rejected, never ignored
        with pytest.raises(tn.UnsupportedError, match="max_firings"):
            run(g, any_backend, r, max_firings=3000)


def test_default_limits() -> None:
    o = RunOptions()
    assert o.max_seconds == 10.0 and o.max_firings == 2_000_000 and o.max_iterations == 1_000_000
    assert o.max_tensor_bytes == 2**30
    for bad in ({"max_seconds": 0}, {"max_seconds": "1"}, {"max_tensor_bytes": 0}, {"max_firings": 1.5}):
        with pytest.raises(ValueError):
            RunOptions(**bad)


# ---- 11. the malformed-graph corpus, on every backend ---------------------------------------------
def _counting_loop() -> dict[str, Any]:
    g = tn.Graph()
    with g.as_default():
        lim = raw.enter(tn.constant(3), "F", is_constant=True)
        one = raw.enter(tn.constant(1), "F", is_constant=True)
        m, _ = raw.merge([raw.enter(tn.constant(0), "F"), raw.BACK_EDGE], name="merge")
        p = raw.loop_cond(m < lim)
        f, t = raw.switch(m, p)
    return {"g": g, "m": m, "f": f, "t": t, "one": one}


def _unbound_back_edge() -> tuple[tn.Graph, Any]:
    d = _counting_loop()
    with d["g"].as_default():
        y = raw.exit(d["f"])
    return d["g"], y


def _exit_in_root() -> tuple[tn.Graph, Any]:
    g = tn.Graph()
    with g.as_default():
        y = raw.exit(tn.constant(1.0))
    return g, y


def _next_iteration_in_root() -> tuple[tn.Graph, Any]:
    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([tn.constant(1.0), raw.BACK_EDGE])
        raw.close_back_edge(m, raw.next_iteration(m + 1.0))
    return g, m


def _fetch_inside_loop() -> tuple[tn.Graph, Any]:
    d = _counting_loop()
    with d["g"].as_default():
        body = d["t"] + d["one"]
        raw.close_back_edge(d["m"], raw.next_iteration(body))
    return d["g"], body


def _frames_mixed() -> tuple[tn.Graph, Any]:
    d = _counting_loop()
    with d["g"].as_default():
        raw.close_back_edge(d["m"], raw.next_iteration(d["t"] + d["one"]))
        y = raw.exit(d["f"]) + d["t"]
    return d["g"], y


def _merge_of_two_dtypes() -> tuple[tn.Graph, Any]:
    """A Merge recorded as int32 whose inputs are int32 and float64 (built by hand, past the builders)."""
    from turnout.graph import TensorSpec

    g = tn.Graph()
    with g.as_default():
        p = tn.constant(True)
        a, _ = raw.switch(tn.constant(1), p)
        _, b = raw.switch(tn.constant(1.0, dtype=tn.float64), p)
        m = g.create_node("Merge", [a, b], name="mixed_merge",
                          specs=[TensorSpec(tn.int32, ()), TensorSpec(tn.int32, ())])
    return g, m.outputs[0]


MALFORMED: dict[str, tuple[Callable[[], tuple[tn.Graph, Any]], str]] = {
    "unbound back edge": (_unbound_back_edge, "W-Merge-Bound"),
    "Exit in the root frame": (_exit_in_root, "W-Exit-In-Frame"),
    "NextIteration in the root frame": (_next_iteration_in_root, "W-"),
    "fetch inside a loop": (_fetch_inside_loop, "W-Fetch-Root"),
    "inputs from two frames": (_frames_mixed, "W-Frame-Consistent"),
    "a Merge of two dtypes": (_merge_of_two_dtypes, "W-Types"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_graphs_are_rejected_on_every_backend(any_backend: str, case: str) -> None:
    make, rule = MALFORMED[case]
    g, y = make()
    with pytest.raises(tn.ValidationError, match=rule):
        run(g, any_backend, y)


# ---- the closing count ----------------------------------------------------------------------------
def tally() -> dict[str, Any]:
    """How many bad inputs the tables above hold, and the outcome each must have."""
    per_backend = len(BAD_FEEDS) + 2 * len(BAD_CASTS) + len(MALFORMED)
    once = len(BAD_CONSTANTS) + len(BAD_SCALARS) + len(BAD_ATTRIBUTES) + len(BAD_BUILDER_ARGS)
    outcomes = collections.Counter({
        "GraphBuildError (build time, once)": once,
        f"FeedError (x{len(ALL_BACKENDS)} backends)": len(BAD_FEEDS),
        f"KernelError from Cast (x{len(ALL_BACKENDS)} backends)": 2 * len(BAD_CASTS),
        f"ValidationError (x{len(ALL_BACKENDS)} backends)": len(MALFORMED),
    })
    return {"backends": ALL_BACKENDS, "table_inputs": once + per_backend,
            "runs": once + per_backend * len(ALL_BACKENDS), "outcomes": dict(outcomes)}


if __name__ == "__main__":
    print(tally())


# ---- comparing a tensor with a value in Python ----------------------------------------------------
def test_tensor_equals_value_is_an_error_not_a_silent_false() -> None:
    """``i % 2 == 0`` on a tensor once compared Python objects and was silently False (a cond on it
    always took the false branch); it must name tn.equal instead. Tensors still work as dict keys."""
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        v = tn.Variable(1.0, name="v")
        for bad in (lambda: i % 2 == 0, lambda: i != 1, lambda: 0 == i, lambda: i == np.int32(0),
                    lambda: v == 1.0):
            with pytest.raises(tn.GraphBuildError, match="tn.equal"):
                bad()
        assert (i == i) and not (i != i) and i != None and {i: 1}[i] == 1 and i in [v.read(), i]  # noqa: E711
        y = tn.cond(tn.equal(i % 2, 0), lambda: tn.constant(1), lambda: tn.constant(0))
    assert int(tn.Session(g).run(y, {i: 4})) == 1


def test_a_tensor_has_no_python_or_numpy_value_while_the_graph_is_built() -> None:
    """``float(t)``, ``int(t)``, a tensor as a list index and ``np.asarray(t)`` name the tensor and
    the way to get its value. Before, the first three failed with Python's bare ``TypeError``, and
    ``np.asarray(t) + 1`` built an object array holding a tensor and went on silently. Numpy's
    operators still defer to the tensor's."""
    g = tn.Graph()
    with g.as_default():
        t = tn.constant([1.0, 2.0], name="t")
        i = tn.constant(1, name="i")
        for bad in (lambda: float(t), lambda: int(i), lambda: complex(t), lambda: [10, 20][i],
                    lambda: np.asarray(t), lambda: np.asarray(t) + 1, lambda: range(i)):
            with pytest.raises(tn.GraphBuildError, match="not known while the graph is built.*Session"):
                bad()
        mixed = [np.float32(2.0) * t, np.array([1.0, 2.0]) * t, t * np.float32(3.0), np.int32(1) + i]
    got = tn.Session(g).run(mixed)
    assert [np.asarray(v).tolist() for v in got] == [[2.0, 4.0], [1.0, 4.0], [3.0, 6.0], 2]


def test_integer_overflow_and_narrowing_wrap_alike_on_every_backend(any_backend: str) -> None:
    """Integer arithmetic wraps and an int64 -> int32 cast keeps the low bits (docs/limits.rst,
    "Integer overflow and narrowing"): defined, and the same on every backend."""
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [3], name="i")
        wide = tn.placeholder(tn.int64, [3], name="wide")
        big = tn.placeholder(tn.float64, [2], name="big")
        outs = [i * 65536 * 65536 + 7, i * 2147483647, tn.cast(wide, tn.int32), tn.cast(big, tn.float32)]
    got = run(g, any_backend, outs, {i: np.array([3, -1, 46341], np.int32),
                                     wide: np.array([2**40 + 5, -(2**33) - 1, 2**31], np.int64),
                                     big: np.array([1e300, -1.5])})
    assert np.asarray(got[0]).tolist() == [7, 7, 7]  # i * 2**32 wraps to 0
    low_bits = (np.array([3, -1, 46341], np.int64) * 2147483647 + 2**31) % 2**32 - 2**31
    assert np.asarray(got[1]).tolist() == low_bits.tolist()
    assert np.asarray(got[2]).tolist() == [5, -1, -(2**31)]
    assert np.asarray(got[3]).tolist() == [np.inf, -1.5] and np.asarray(got[3]).dtype == np.float32


def test_reductions_of_a_scalar_and_of_unknown_rank_agree_on_every_backend(any_backend: str) -> None:
    """A scalar reduced over axis 0 (the one axis the shape rule allows at rank 0) is itself, for
    every reduction: numpy allows it for ``sum`` and ``max`` and refuses it for ``mean``, so the
    reference's Mean failed where its Sum did not. A tensor of unknown rank reduced over every axis is
    a scalar when built, so a loop that accumulates such a sum keeps its loop variable's shape."""
    g = tn.Graph()
    with g.as_default():
        c = tn.constant(2.0)
        u = tn.placeholder(tn.float32, None, name="u")
        scalars = [tn.reduce_sum(c, axis=0), tn.reduce_mean(c, axis=0), tn.reduce_max(c, axis=[0], keepdims=True)]
        whole = tn.reduce_sum(u)
        assert whole.shape == ()
        _, acc = tn.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a + tn.reduce_sum(u * a)),
                               [tn.constant(0), tn.constant(1.0)])
    got = run(g, any_backend, [*scalars, whole, acc], {u: np.ones((2, 3), np.float32)})
    assert [float(v) for v in got] == [2.0, 2.0, 2.0, 6.0, 49.0]
