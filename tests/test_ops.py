"""Every op constructor: its value against numpy, its inferred shape and dtype, and its build-time errors.

Value tests run on both backends (the ``backend`` fixture). Each expected value is the numpy expression
written next to the op, so a reader can check it by hand.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.errors import GraphBuildError

A = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]], np.float32)
B = np.array([[0.5, 2.0, -1.0], [4.0, -0.5, 2.0]], np.float32)
P = np.array([[0.5, 1.0, 2.0], [4.0, 0.25, 9.0]], np.float32)  # positive, for log / sqrt / pow
I = np.array([7, -7, 9, 0], np.int32)
J = np.array([2, 2, -4, 3], np.int32)
H = np.array([[0.5, 1.5, 2.5], [-0.5, -2.5, 3.7]], np.float32)  # halves, for round's ties to even
U = np.array([[-0.9, -0.5, 0.0], [0.25, 0.6, 0.95]], np.float32)  # inside (-1, 1), for asin / acos / atanh
_EULER = 0.5772156649015329
#: digamma at halves and integers, in closed form: psi(1) = -gamma, psi(1/2) = -gamma - 2 log 2, and
#: psi(x + 1) = psi(x) + 1 / x
DIGAMMA_AT = {0.5: -_EULER - 2 * math.log(2.0), 1.0: -_EULER, 2.0: 1 - _EULER, 3.0: 1.5 - _EULER,
              -0.5: -_EULER - 2 * math.log(2.0) + 2, 1.5: -_EULER - 2 * math.log(2.0) + 2}
D = np.array(list(DIGAMMA_AT), np.float32)


#: tests of reference-only machinery, or of graphs the fast backend rejects by design (UnsupportedError)
REFERENCE_ONLY = pytest.mark.parametrize("backend", ["reference"])


def run(backend: str, g: tn.Graph, fetches: Any, feed: dict[Any, Any] | None = None) -> Any:
    return tn.Session(g, backend=backend).run(fetches, feed_dict=feed)


def build_and_run(backend: str, make: Callable[[], Any]) -> tuple[Any, Any]:
    """Build ``make()`` in a fresh graph and run it; returns (tensor(s), value(s))."""
    g = tn.Graph()
    with g.as_default():
        t = make()
    return t, run(backend, g, t)


# (name, constructor over constants, numpy expectation)
def sleep(x: Any) -> Any:
    """``tn.sleep`` with no wait: its value is its input (its bad ``seconds`` are tested below)."""
    return tn.sleep(x, 0.0)


UNARY: list[tuple[str, Callable[[Any], Any], Callable[[np.ndarray], np.ndarray], np.ndarray]] = [
    ("identity", tn.identity, lambda x: x, A),
    ("negative", tn.negative, lambda x: -x, A),
    ("abs", tn.abs, np.abs, A),
    ("sign", tn.sign, np.sign, A),
    ("square", tn.square, np.square, A),
    ("relu", tn.relu, lambda x: np.maximum(x, 0), A),
    ("tanh", tn.tanh, np.tanh, A),
    ("sigmoid", tn.sigmoid, lambda x: 1 / (1 + np.exp(-x)), A),
    ("exp", tn.exp, np.exp, A),
    ("log", tn.log, np.log, P),
    ("sqrt", tn.sqrt, np.sqrt, P),
    ("stop_gradient", tn.stop_gradient, lambda x: x, A),
    ("prevent_gradient", tn.prevent_gradient, lambda x: x, A),
    ("sleep", sleep, lambda x: x, A),
    ("zeros_like", tn.zeros_like, np.zeros_like, A),
    ("ones_like", tn.ones_like, np.ones_like, A),
    ("abs_int", tn.abs, np.abs, I),
    ("log1p", tn.log1p, np.log1p, P),
    ("expm1", tn.expm1, np.expm1, A),
    ("erf", tn.erf, lambda x: np.vectorize(math.erf, otypes=[np.float32])(x), A),
    ("sin", tn.sin, np.sin, A),
    ("cos", tn.cos, np.cos, A),
    ("tan", tn.tan, np.tan, U),
    ("asin", tn.asin, np.arcsin, U),
    ("acos", tn.acos, np.arccos, U),
    ("atan", tn.atan, np.arctan, A),
    ("sinh", tn.sinh, np.sinh, A),
    ("cosh", tn.cosh, np.cosh, A),
    ("asinh", tn.asinh, np.arcsinh, A),
    ("acosh", tn.acosh, np.arccosh, P + 1),
    ("atanh", tn.atanh, np.arctanh, U),
    ("erfc", tn.erfc, lambda x: np.vectorize(math.erfc, otypes=[np.float32])(x), A),
    ("lgamma", tn.lgamma, lambda x: np.vectorize(math.lgamma, otypes=[np.float32])(x), H),
    ("digamma", tn.digamma, lambda x: np.asarray([DIGAMMA_AT[float(v)] for v in x], np.float32), D),
    ("floor", tn.floor, np.floor, H),
    ("ceil", tn.ceil, np.ceil, H),
    ("round", tn.round, np.round, H),
    ("cumsum", tn.cumsum, lambda x: np.cumsum(x, axis=0), A),
    ("cumprod", tn.cumprod, lambda x: np.cumprod(x, axis=0), A),
    ("negative_int", tn.negative, lambda x: -x, I),
]


@pytest.mark.parametrize("name,op,ref,x", UNARY, ids=[u[0] for u in UNARY])
def test_unary_matches_numpy(backend: str, name: str, op: Any, ref: Any, x: np.ndarray) -> None:
    t, v = build_and_run(backend, lambda: op(tn.constant(x)))
    want = ref(x)
    assert t.dtype.numpy == want.dtype and t.shape == want.shape
    assert v.dtype == want.dtype
    np.testing.assert_allclose(v, want, rtol=1e-6)


BINARY: list[tuple[str, Callable[[Any, Any], Any], Callable[[Any, Any], Any], Any, Any]] = [
    ("add", tn.add, np.add, A, B),
    ("atan2", tn.atan2, np.arctan2, B, A),
    ("subtract", tn.subtract, np.subtract, A, B),
    ("multiply", tn.multiply, np.multiply, A, B),
    ("divide", tn.divide, np.divide, A, B),
    ("maximum", tn.maximum, np.maximum, A, B),
    ("minimum", tn.minimum, np.minimum, A, B),
    ("pow", tn.pow, np.power, P, B),
    ("mod_float", tn.mod, np.mod, A, B),
    # integer division is floor division, integer mod follows the divisor's sign (Python's //, %)
    ("divide_int", tn.divide, np.floor_divide, I, J),
    ("mod_int", tn.mod, np.mod, I, J),
    # floor division: the floor of the float quotient (TensorFlow's floordiv), Div on integers
    ("floordiv_float", tn.floordiv, lambda a, b: np.floor(a / b), A, B),
    ("floordiv_int", tn.floordiv, np.floor_divide, I, J),
    # true division: integers as float64 (TensorFlow's truediv, numpy's divide)
    ("truediv_int", tn.truediv, lambda a, b: np.divide(a, b, dtype=np.float64), I, J),
    ("truediv_float", tn.truediv, np.divide, A, B),
    ("add_broadcast_row", tn.add, np.add, A, B[0]),
    ("mul_broadcast_col", tn.multiply, np.multiply, A, B[:, :1]),
    ("less", tn.less, np.less, A, B),
    ("less_equal", tn.less_equal, np.less_equal, A, A[:, ::-1]),
    ("greater", tn.greater, np.greater, A, B),
    ("greater_equal", tn.greater_equal, np.greater_equal, A, A[:, ::-1]),
    ("equal", tn.equal, np.equal, I, np.array([7, 7, 9, 1], np.int32)),
    ("not_equal", tn.not_equal, np.not_equal, I, np.array([7, 7, 9, 1], np.int32)),
    ("logical_and", tn.logical_and, np.logical_and, np.array([True, True, False, False]),
     np.array([True, False, True, False])),
    ("logical_or", tn.logical_or, np.logical_or, np.array([True, True, False, False]),
     np.array([True, False, True, False])),
    ("logical_xor", tn.logical_xor, np.logical_xor, np.array([True, True, False, False]),
     np.array([True, False, True, False])),
]


@pytest.mark.parametrize("name,op,ref,a,b", BINARY, ids=[u[0] for u in BINARY])
def test_binary_matches_numpy(backend: str, name: str, op: Any, ref: Any, a: Any, b: Any) -> None:
    t, v = build_and_run(backend, lambda: op(tn.constant(a), tn.constant(b)))
    want = np.asarray(ref(a, b))
    assert t.shape == want.shape, "static shape inference"
    assert t.dtype.numpy == want.dtype, "static dtype inference"
    assert v.dtype == want.dtype
    np.testing.assert_allclose(v, want, rtol=1e-6)


def test_the_mean_of_nothing_warns_of_nothing(backend: str) -> None:
    # numpy's mean of an empty slice prints a RuntimeWarning from inside numpy (an error under -W error)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, v = build_and_run(backend, lambda: tn.reduce_mean(tn.constant(np.zeros((0, 3), np.float32)), axis=0))
    assert np.isnan(v).all() and v.shape == (3,)


def test_integer_division_by_hand(backend: str) -> None:
    _, v = build_and_run(backend, lambda: (tn.constant(7) // 2, tn.constant(-7) // 2, tn.constant(-7) % 3))
    assert [int(x) for x in v] == [3, -4, 2]


def test_floor_division_of_floats_rounds_the_quotient_down(backend: str) -> None:
    # ``//`` on floats was ``/`` (Div divides floats exactly): -7.5 // 2.0 gave -3.75
    x = np.array([-7.5, 7.5, -7.5, 6.0], np.float32)
    _, (q, rq, f) = build_and_run(backend, lambda: (tn.constant(x) // 2.0, 15.0 // tn.constant(x),
                                                    tn.floordiv(tn.constant(x), -2.0)))
    np.testing.assert_array_equal(q, [-4.0, 3.0, -4.0, 3.0])
    np.testing.assert_array_equal(rq, np.floor(15.0 / x))
    np.testing.assert_array_equal(f, [3.0, -4.0, 3.0, -3.0])


def test_is_nan_is_inf_and_is_finite_as_numpy(backend: str) -> None:
    """TensorFlow's three tests of a float, in both float dtypes, at both infinities, NaN, zero, the
    largest finite float and a subnormal; an integer input is a build error naming the builder."""
    for dtype in (np.float32, np.float64):
        x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -np.finfo(dtype).max, np.finfo(dtype).tiny / 4], dtype)
        ts, vs = build_and_run(backend, lambda x=x: tuple(f(tn.constant(x)) for f in (tn.is_nan, tn.is_inf,
                                                                                       tn.is_finite)))
        for t, v, want in zip(ts, vs, (np.isnan(x), np.isinf(x), np.isfinite(x)), strict=True):
            assert t.dtype == tn.bool and t.shape == x.shape
            np.testing.assert_array_equal(v, want)
    for op in (tn.is_nan, tn.is_inf, tn.is_finite):
        with tn.Graph().as_default(), pytest.raises(GraphBuildError, match=f"{op.__name__}: expected a floating"):
            op(tn.constant([1, 2]))


def test_logical_not_and_where(backend: str) -> None:
    c = np.array([True, False, True])
    _, (n, w) = build_and_run(backend, lambda: (tn.logical_not(tn.constant(c)),
                                       tn.where(tn.constant(c), tn.constant([1.0, 2.0, 3.0]), 0.0)))
    np.testing.assert_array_equal(n, [False, True, False])
    np.testing.assert_array_equal(w, [1.0, 0.0, 3.0])


def test_cast(backend: str) -> None:
    t, v = build_and_run(backend, lambda: tn.cast(tn.constant([1.7, -1.7, 2.0]), tn.int32))
    assert t.dtype == tn.int32 and t.shape == (3,)
    np.testing.assert_array_equal(v, np.array([1.7, -1.7, 2.0], np.float32).astype(np.int32))
    t, v = build_and_run(backend, lambda: tn.cast(tn.constant([0, 2]), tn.bool))
    assert t.dtype == tn.bool
    np.testing.assert_array_equal(v, [False, True])


def test_matmul_and_transposes(backend: str) -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(12, dtype=np.float32).reshape(3, 4)
    t, v = build_and_run(backend, lambda: tn.matmul(tn.constant(a), tn.constant(b)))
    assert t.shape == (2, 4)
    np.testing.assert_allclose(v, a @ b)
    t, v = build_and_run(backend, lambda: tn.matmul(tn.constant(a.T), tn.constant(b.T),
                                           transpose_a=True, transpose_b=True))
    assert t.shape == (2, 4)
    np.testing.assert_allclose(v, a @ b)
    t, v = build_and_run(backend, lambda: tn.constant(a) @ tn.constant(b))
    np.testing.assert_allclose(v, a @ b)


STRUCT: list[tuple[str, Callable[[], Any], Any, tuple[Any, ...]]] = [
    ("reshape", lambda: tn.reshape(tn.constant(A), [3, 2]), A.reshape(3, 2), (3, 2)),
    ("reshape_minus1", lambda: tn.reshape(tn.constant(A), [-1]), A.reshape(-1), (6,)),
    ("transpose", lambda: tn.transpose(tn.constant(A)), A.T, (3, 2)),
    ("transpose_perm", lambda: tn.transpose(tn.constant(np.zeros((2, 3, 4))), [2, 0, 1]),
     np.zeros((4, 2, 3)), (4, 2, 3)),
    ("expand_dims", lambda: tn.expand_dims(tn.constant(A), 1), A[:, None, :], (2, 1, 3)),
    ("concat0", lambda: tn.concat([tn.constant(A), tn.constant(B)], 0), np.concatenate([A, B], 0), (4, 3)),
    ("concat1", lambda: tn.concat([tn.constant(A), tn.constant(B)], axis=1), np.concatenate([A, B], 1),
     (2, 6)),
    ("stack", lambda: tn.stack([tn.constant(A), tn.constant(B)]), np.stack([A, B]), (2, 2, 3)),
    ("gather", lambda: tn.gather(tn.constant(A), tn.constant([1, 0, 1])), A[[1, 0, 1]], (3, 3)),
    ("gather_axis1", lambda: tn.gather(tn.constant(A), tn.constant([2, 0]), axis=1), A[:, [2, 0]], (2, 2)),
    ("tile", lambda: tn.tile(tn.constant(A), [2, 1]), np.tile(A, [2, 1]), (4, 3)),
    ("update_slot", lambda: tn.update_slot(tn.constant(A), 1, tn.constant(B[0])), np.stack([A[0], B[0]]), (2, 3)),
    ("update_slot_from_end", lambda: tn.update_slot(tn.constant(A), -2, tn.constant(B[1])), np.stack([B[1], A[1]]),
     (2, 3)),
    ("reduce_sum", lambda: tn.reduce_sum(tn.constant(A)), A.sum(), ()),
    ("reduce_sum_axis0", lambda: tn.reduce_sum(tn.constant(A), axis=0), A.sum(0), (3,)),
    ("reduce_sum_keep", lambda: tn.reduce_sum(tn.constant(A), axis=1, keepdims=True), A.sum(1, keepdims=True),
     (2, 1)),
    ("reduce_mean", lambda: tn.reduce_mean(tn.constant(A), axis=1), A.mean(1), (2,)),
    ("reduce_max", lambda: tn.reduce_max(tn.constant(A), axis=[0, 1]), A.max(), ()),
    ("reduce_min", lambda: tn.reduce_min(tn.constant(A), axis=1), A.min(1), (2,)),
    ("reduce_prod", lambda: tn.reduce_prod(tn.constant(A), axis=1), A.prod(1), (2,)),
    # integers as TensorFlow's kernel: the sum divided by the count toward zero (-5 / 2 is -2)
    ("reduce_mean_int", lambda: tn.reduce_mean(tn.constant([[-7, 1], [2, 2]]), axis=0), np.array([-2, 1], np.int32),
     (2,)),
    ("reduce_all", lambda: tn.reduce_all(tn.constant(A) > A.min(), axis=1), (A > A.min()).all(1), (2,)),
    ("reduce_any", lambda: tn.reduce_any(tn.constant(A) > A.min(), axis=0, keepdims=True),
     (A > A.min()).any(0, keepdims=True), (1, 3)),
    ("reduce_all_empty", lambda: tn.reduce_all(tn.constant(np.zeros((0, 2), bool)), axis=0), np.ones(2, bool), (2,)),
    ("reduce_any_empty", lambda: tn.reduce_any(tn.constant(np.zeros((0, 2), bool))), np.bool_(False), ()),
    # (0/0, as TensorFlow gives; with no numpy warning: ``test_the_mean_of_nothing_warns_of_nothing``)
    ("reduce_mean_empty", lambda: tn.reduce_mean(tn.constant(np.zeros((0, 2), np.float32)), axis=0),
     np.full(2, np.nan, np.float32), (2,)),
    # over no integers TensorFlow's kernel fills its MeanReducer's identity, 0 (NaN for floats)
    ("reduce_mean_empty_int", lambda: tn.reduce_mean(tn.constant(np.zeros((0, 2), np.int64)), axis=0),
     np.zeros(2, np.int64), (2,)),
    ("zeros", lambda: tn.zeros([2, 2]), np.zeros((2, 2), np.float32), (2, 2)),
    ("ones_int", lambda: tn.ones([3], tn.int32), np.ones(3, np.int32), (3,)),
    ("shape", lambda: tn.shape(tn.constant(A)), np.array([2, 3], np.int32), (2,)),
    ("size", lambda: tn.size(tn.constant(A)), np.int32(6), ()),
    ("broadcast_like", lambda: tn.broadcast_like(tn.constant([1.0, 2.0, 3.0]), tn.constant(A)),
     np.broadcast_to(np.array([1.0, 2.0, 3.0], np.float32), (2, 3)), (2, 3)),
    ("sum_to_like", lambda: tn.sum_to_like(tn.constant(A), tn.constant([0.0, 0.0, 0.0])), A.sum(0), (3,)),
]


@pytest.mark.parametrize("name,make,want,shape", STRUCT, ids=[s[0] for s in STRUCT])
def test_structural_ops(backend: str, name: str, make: Callable[[], Any], want: Any, shape: tuple[Any, ...]) -> None:
    t, v = build_and_run(backend, make)
    want = np.asarray(want)
    assert t.shape == shape, "static shape inference"
    assert v.shape == want.shape and v.dtype == want.dtype
    np.testing.assert_allclose(v, want, rtol=1e-6)


def test_fill_has_run_time_shape(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        t = tn.fill(tn.stack([n, 2]), 1.5)
    assert t.shape == (None, None) and t.dtype == tn.float32
    np.testing.assert_array_equal(run(backend, g, t, {n: 3}), np.full((3, 2), 1.5, np.float32))


def test_constant_dtypes() -> None:
    g = tn.Graph()
    with g.as_default():
        assert tn.constant(1.0).dtype == tn.float32
        assert tn.constant(1).dtype == tn.int32
        assert tn.constant(True).dtype == tn.bool
        assert tn.constant(1, tn.float64).dtype == tn.float64
        assert tn.constant([[1, 2, 3]]).shape == (1, 3)
        with pytest.raises(tn.GraphBuildError, match="int32"):
            tn.constant(1.5, tn.int32)


def test_placeholder_shapes_propagate(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 3])
        y = tn.matmul(x, tn.constant(np.ones((3, 5), np.float32)))
        assert y.shape == (None, 5)
        assert tn.reduce_sum(y, axis=1).shape == (None,)
        assert (x + tn.constant([1.0, 2.0, 3.0])).shape == (None, 3)
        unknown = tn.placeholder(tn.float32)
        assert unknown.shape is None
        assert (unknown * 2.0).shape is None
    v = run(backend, g, y, {x: np.ones((4, 3))})
    np.testing.assert_allclose(v, np.full((4, 5), 3.0))


# ---- build-time errors name the op -------------------------------------------------------------
ERRORS: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("add_shapes", lambda: tn.constant(A) + tn.constant([1.0, 2.0]), tn.ShapeError, "Add"),
    ("add_dtypes", lambda: tn.constant(1.0) + tn.constant(1), tn.DTypeError, "Add"),
    ("matmul_inner", lambda: tn.matmul(tn.constant(A), tn.constant(A)), tn.ShapeError, "MatMul"),
    ("matmul_rank", lambda: tn.matmul(tn.constant([1.0]), tn.constant(A)), tn.ShapeError, "MatMul"),
    ("reshape", lambda: tn.reshape(tn.constant(A), [4]), tn.ShapeError, "Reshape"),
    ("transpose_perm", lambda: tn.transpose(tn.constant(A), [0, 0]), tn.ShapeError, "Transpose"),
    ("concat_dims", lambda: tn.concat([tn.constant(A), tn.constant(A.T)], 0), tn.ShapeError, "Concat"),
    ("stack_shapes", lambda: tn.stack([tn.constant(A), tn.constant(A.T)]), tn.ShapeError, "Pack"),
    ("tanh_int", lambda: tn.tanh(tn.constant(1)), tn.DTypeError, "Tanh"),
    ("sum_axis", lambda: tn.reduce_sum(tn.constant(A), axis=2), tn.ShapeError, "Sum"),
    ("and_float", lambda: tn.logical_and(tn.constant(1.0), tn.constant(True)), tn.DTypeError, "LogicalAnd"),
    ("where_cond", lambda: tn.where(tn.constant(1.0), 1.0, 2.0), tn.DTypeError, "Select"),
    ("getitem_range", lambda: tn.constant(A)[2], tn.ShapeError, "GetItem"),
    ("getitem_rank", lambda: tn.constant(A)[0, 0, 0], tn.ShapeError, "GetItem"),
    ("gather_float_idx", lambda: tn.gather(tn.constant(A), tn.constant([0.0])), tn.DTypeError, "Gather"),
    ("tile_rank", lambda: tn.tile(tn.constant(A), [2]), tn.ShapeError, "Tile"),
    ("update_slot_shape", lambda: tn.update_slot(tn.constant(A), 0, tn.constant(A)), tn.ShapeError, "UpdateSlot"),
    ("update_slot_scalar", lambda: tn.update_slot(tn.constant(1.0), 0, tn.constant(1.0)), tn.ShapeError, "UpdateSlot"),
    ("less_bool", lambda: tn.less(tn.constant(True), tn.constant(False)), tn.DTypeError, "Less"),
    ("expand_axis", lambda: tn.expand_dims(tn.constant(A), 5), tn.ShapeError, "ExpandDims"),
]


@pytest.mark.parametrize("name,make,err,op", ERRORS, ids=[e[0] for e in ERRORS])
def test_build_time_errors_name_the_op(name: str, make: Callable[[], Any], err: type[Exception],
                                       op: str) -> None:
    g = tn.Graph()
    with g.as_default(), pytest.raises(err, match=op):
        make()


def test_shape_and_dtype_errors_are_graph_build_errors() -> None:
    assert issubclass(tn.ShapeError, tn.GraphBuildError)
    assert issubclass(tn.DTypeError, tn.GraphBuildError)


# ---- operator overloading ----------------------------------------------------------------------
def test_arithmetic_operators_and_python_scalars(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(6.0)
        k = tn.constant(7)
        outs = {
            "add": x + 1, "radd": 1 + x, "sub": x - 1, "rsub": 1 - x, "mul": x * 2, "rmul": 2 * x,
            "div": x / 4, "rdiv": 3 / x, "pow": x ** 2, "rpow": 2 ** x, "neg": -x, "abs": abs(-x),
            "floordiv": k // 2, "mod": k % 4, "rmod": 9 % k, "intdiv": k / 2, "rintdiv": 14 / k,
        }
        # ``/`` of integers is true division, in float64 (as in TensorFlow and numpy); ``//`` floors
        assert outs["intdiv"].dtype == tn.float64 and outs["rintdiv"].dtype == tn.float64
        # a Python scalar takes the dtype of the tensor it meets
        assert outs["add"].dtype == tn.float32 and outs["floordiv"].dtype == tn.int32
    v = run(backend, g, outs)
    want = {"add": 7, "radd": 7, "sub": 5, "rsub": -5, "mul": 12, "rmul": 12, "div": 1.5, "rdiv": 0.5,
            "pow": 36, "rpow": 64, "neg": -6, "abs": 6, "floordiv": 3, "mod": 3, "rmod": 2, "intdiv": 3.5,
            "rintdiv": 2}
    assert {k: float(x) for k, x in v.items()} == want


def test_comparison_and_logical_operators(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(3)
        t, f = tn.constant(True), tn.constant(False)
        outs = [x < 4, x <= 3, x > 3, x >= 4, t & f, t | f, ~t]
        assert all(o.dtype == tn.bool and o.shape == () for o in outs)
    assert [bool(b) for b in run(backend, g, outs)] == [True, True, False, False, False, True, False]


def test_getitem_int_tensor_and_slices(backend: str) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = tn.Graph()
    with g.as_default():
        c = tn.constant(x)
        i = tn.placeholder(tn.int32, [], name="i")
        j = tn.placeholder(tn.int32, [], name="j")
        cases = {
            "int": (c[1], x[1], (4,)),
            "neg_int": (c[-1], x[-1], (4,)),
            "tensor": (c[i], x[2], (4,)),
            "pair": (c[1, 2], x[1, 2], ()),
            "tensor_pair": (c[i, j], x[2, 1], ()),
            "slice": (c[0:2], x[0:2], (2, 4)),
            "open_slice": (c[1:], x[1:], (2, 4)),
            "step": (c[::2], x[::2], (2, 4)),
            "col_slice": (c[:, 1:3], x[:, 1:3], (3, 2)),
            "mixed": (c[i, 1:3], x[2, 1:3], (2,)),
        }
    for name, (t, _, shape) in cases.items():
        assert t.shape == shape, name
    vals = run(backend, g, {k: t for k, (t, _, _) in cases.items()}, {i: 2, j: 1})
    for name, (_, want, _) in cases.items():
        np.testing.assert_array_equal(vals[name], want, err_msg=name)


def test_getitem_slice_with_a_run_time_bound(backend: str) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        t = tn.constant(x)[i:]
    assert t.shape == (None, 4)
    np.testing.assert_array_equal(run(backend, g, t, {i: 2}), x[2:])


def test_getitem_tensor_index_out_of_range_is_a_kernel_error(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [])
        y = tn.constant([1.0, 2.0])[i]
    with pytest.raises(tn.KernelError, match="GetItem"):
        run(backend, g, y, {i: 5})


def test_getitem_rejects_float_index() -> None:
    g = tn.Graph()
    with g.as_default(), pytest.raises(tn.GraphBuildError):
        tn.constant([1.0, 2.0])[tn.constant(0.0)]


def test_bool_of_a_tensor_is_an_error() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.constant(1.0)
        with pytest.raises(tn.GraphBuildError, match="tn.cond"):
            if x > 0:
                pass
        with pytest.raises(tn.GraphBuildError, match="truth value"):
            bool(x)
        with pytest.raises(tn.GraphBuildError):
            len(x)
        with pytest.raises(tn.GraphBuildError):
            iter(x)


def test_mixing_graphs_is_a_build_error() -> None:
    g1, g2 = tn.Graph(), tn.Graph()
    with g1.as_default():
        a = tn.constant(1.0)
    with g2.as_default():
        b = tn.constant(2.0)
        with pytest.raises(tn.GraphBuildError, match="another graph"):
            tn.add(a, b)


def test_group_and_no_op_are_nodes() -> None:
    g = tn.Graph()
    with g.as_default():
        a, b = tn.constant(1.0), tn.constant(2.0)
        grp = tn.group(a, b)
        assert isinstance(grp, tn.Node) and grp.op == "NoOp"
        assert {n.name for n in grp.control_inputs} == {a.node.name, b.node.name}
        assert grp.outputs == ()


def test_convert_to_tensor_and_no_op(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        t = tn.constant([1, 2])
        assert tn.convert_to_tensor(t) is t
        with pytest.raises(tn.GraphBuildError, match="float32"):
            tn.convert_to_tensor(t, tn.float32)
        c = tn.convert_to_tensor(2.5, tn.float64)
        assert c.dtype == tn.float64 and c.node.op == "Const"
        v = tn.Variable([3, 4], name="v")
        r = tn.convert_to_tensor(v)
        assert r.node.op == "ReadVariable"
        nop = tn.no_op(name="nothing")
        assert nop.op == "NoOp" and nop.outputs == ()
        with tn.control_dependencies([nop]):
            after = tn.identity(c)
        assert after.node.control_inputs == (nop,)
    assert tn.Session(g, backend=backend).run(nop) is None
    assert [int(x) for x in tn.Session(g, backend=backend).run(r)] == [3, 4]
    assert float(tn.Session(g, backend=backend).run(after)) == 2.5


def test_assert_true_passes_its_value_on(backend: str) -> None:
    """``assert_true``'s value; its failures and gradients are in ``tests/test_case_pairs.py``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [2], name="x")
        y = tn.assert_true(tn.greater(tn.reduce_sum(x), 0), x * 3, "positive sum")
    np.testing.assert_array_equal(run(backend, g, y, {x: np.array([1, 2], np.int32)}), [3, 6])
    with pytest.raises(tn.KernelError, match="positive sum"):
        run(backend, g, y, {x: np.array([1, -2], np.int32)})


#: op constructors whose values some test above checks, beyond those in the UNARY and BINARY tables
CHECKED_ELSEWHERE = {
    "cast", "matmul", "reshape", "transpose", "expand_dims", "concat", "stack", "gather", "tile", "update_slot",
    "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_all", "reduce_any", "zeros", "ones",
    "shape", "size", "broadcast_like",
    "sum_to_like", "fill", "constant", "placeholder", "getitem", "where", "select", "logical_not",
    "is_nan", "is_inf", "is_finite",  # test_is_nan_is_inf_and_is_finite_as_numpy
    "group", "no_op", "convert_to_tensor", "control_dependencies", "assert_true",
    # value checkers, not op constructors: tests/test_bad_inputs.py
    "bad_value", "checked_scalar", "int_attr", "int_list_attr", "convert_argument", "checked_constant_value",
}


def test_every_op_constructor_is_checked() -> None:
    """A new op constructor in turnout.ops or turnout.math_ops needs a value test here (add it to a
    table above)."""
    import inspect

    import turnout.math_ops as math_ops
    import turnout.ops as ops

    public = {n for m in (ops, math_ops) for n, f in vars(m).items()
              if inspect.isfunction(f) and f.__module__ == m.__name__ and not n.startswith("_")}
    tabled = {f.__name__ for _, f, *_ in UNARY} | {f.__name__ for _, f, *_ in BINARY}
    unchecked = sorted(public - tabled - CHECKED_ELSEWHERE)
    assert not unchecked, f"op constructors with no value test in tests/test_ops.py: {unchecked}"


@pytest.mark.parametrize("seconds", [-1.0, 61.0, "1", True, None, float("nan")])
def test_sleep_seconds_must_be_a_number_in_range(seconds: Any) -> None:
    with tn.Graph().as_default(), pytest.raises(tn.GraphBuildError, match="sleep: seconds"):
        tn.sleep(tn.constant(1.0), seconds)
