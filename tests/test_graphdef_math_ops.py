"""Import rules of TensorFlow's element-wise math and activation ops (turnout.graphdef.import_math)
on the paths the TensorFlow fixture (``mlp_layer_norm``) does not take: the extremes of Softplus,
infinities and NaNs, a zero divisor broadcast against a larger dividend, integer inputs, and the
refusals that name the op. Hand-written GraphDefs against numpy closed forms, on both backends.
Needs the ``tf`` extra, not TensorFlow."""

from __future__ import annotations

import math

import numpy as np
import pytest

from turnout.errors import UnsupportedError

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from test_graphdef_model_ops import BACKENDS, F32, I32, GraphDef, _run  # noqa: E402

from turnout.graphdef import import_graph_def  # noqa: E402


def _one_op(op: str, x: np.ndarray, t: int) -> GraphDef:
    g = GraphDef()
    g.node("y", op, (g.const("x", x),), T=t)
    return g


@pytest.mark.parametrize("backend", BACKENDS)
def test_softplus_at_its_thresholds_and_between(backend: str) -> None:
    """Above 13.94 it is x, below -13.94 exp(x), else log1p(exp(x)): each exact where used."""
    x = np.asarray([-30.0, -14.0, -1e-3, 0.0, 2.5, 14.0, 40.0], np.float32)
    g = GraphDef()
    g.node("y", "Softplus", (g.const("x", x),), T=F32)
    g.node("dy", "SoftplusGrad", (g.const("g", np.ones_like(x)), "x"), T=F32)
    y, dy = _run(g, ["y:0", "dy:0"], {}, backend)
    want = np.asarray([math.log1p(math.exp(float(v))) for v in x], np.float32)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    assert y[-1] == 40.0 and y[0] == np.float32(math.exp(-30.0))
    np.testing.assert_allclose(dy, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_is_finite_div_no_nan_and_reciprocal_on_infinities(backend: str) -> None:
    x = np.asarray([[1.0, np.inf, -np.inf, np.nan], [0.0, -2.0, 3.0, 4.0]], np.float32)
    y = np.asarray([0.0, 2.0, 0.0, 4.0], np.float32)  # broadcast against x's rows
    g = GraphDef()
    g.node("fin", "IsFinite", (g.const("x", x),), T=F32)
    g.node("nan", "IsNan", ("x",), T=F32)
    g.node("inf", "IsInf", ("x",), T=F32)
    g.node("q", "DivNoNan", ("x", g.const("y", y)), T=F32)
    g.node("r", "Reciprocal", (g.const("z", np.asarray([0.0, -0.5, 4.0], np.float32)),), T=F32)
    fin, nan, inf, q, r = _run(g, ["fin:0", "nan:0", "inf:0", "q:0", "r:0"], {}, backend)
    np.testing.assert_array_equal(fin, np.isfinite(x))
    np.testing.assert_array_equal(nan, np.isnan(x))
    np.testing.assert_array_equal(inf, np.isinf(x))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(q, np.where(y == 0, 0.0, x / np.where(y == 0, 1.0, y)))
    np.testing.assert_array_equal(r, [np.inf, -2.0, 0.25])


@pytest.mark.parametrize("backend", BACKENDS)
def test_activations_with_their_gradients(backend: str) -> None:
    """LeakyRelu's alpha attribute, Relu6 on int32, Elu and Selu below and above zero."""
    x = np.asarray([-2.0, -0.5, 0.0, 0.5, 7.0], np.float32)
    dy = np.asarray([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
    g = GraphDef()
    g.const("x", x)
    g.const("dy", dy)
    g.node("lr", "LeakyRelu", ("x",), T=F32, alpha=0.25)
    g.node("lrg", "LeakyReluGrad", ("dy", "x"), T=F32, alpha=0.25)
    g.node("r6", "Relu6", (g.const("i", np.asarray([-3, 2, 9], np.int32)),), T=I32)
    g.node("r6g", "Relu6Grad", ("dy", "x"), T=F32)
    g.node("elu", "Elu", ("x",), T=F32)
    g.node("elug", "EluGrad", ("dy", "elu"), T=F32)
    g.node("selu", "Selu", ("x",), T=F32)
    g.node("selug", "SeluGrad", ("dy", "selu"), T=F32)
    got = _run(g, ["lr:0", "lrg:0", "r6:0", "r6g:0", "elu:0", "elug:0", "selu:0", "selug:0"], {}, backend)
    lr, lrg, r6, r6g, elu, elug, selu, selug = got
    np.testing.assert_array_equal(lr, np.where(x > 0, x, x * np.float32(0.25)))
    np.testing.assert_array_equal(lrg, np.where(x > 0, dy, dy * np.float32(0.25)))
    np.testing.assert_array_equal(r6, [0, 2, 6])
    (same,) = _run(_one_op("Round", np.asarray([-3, 2, 9], np.int32), I32), ["y:0"], {}, backend)
    np.testing.assert_array_equal(same, [-3, 2, 9])  # TensorFlow's Round of an integer
    np.testing.assert_array_equal(r6g, [0.0, 0.0, 0.0, 4.0, 0.0])
    np.testing.assert_allclose(elu, np.where(x < 0, np.expm1(x), x), rtol=1e-6)
    np.testing.assert_allclose(elug, np.where(x < 0, dy * np.exp(x), dy), rtol=1e-6)
    scale, alpha = 1.0507009873554805, 1.6732632423543772
    np.testing.assert_allclose(selu, scale * np.where(x < 0, alpha * np.expm1(x), x), rtol=1e-6)
    np.testing.assert_allclose(selug, np.where(x < 0, dy * scale * alpha * np.exp(x), dy * scale), rtol=1e-6)


def test_integer_reciprocal_and_activations_of_integers_are_refused_naming_the_node() -> None:
    """TensorFlow's integer Reciprocal truncates ``1 / x``; Turnout's integer Div floors, so it is
    refused rather than computed differently; Elu of an int32 has no TensorFlow kernel either."""
    for op in ("Reciprocal", "Elu", "Softplus", "Rsqrt", "IsFinite", "IsNan", "IsInf"):
        g = GraphDef()
        g.node("y", op, (g.const("i", np.asarray([1, -2], np.int32)),), T=I32)
        with pytest.raises(UnsupportedError, match=f'{op} node "y": supported for floating inputs only'):
            import_graph_def(g.gd)


def test_the_new_primitives_export_and_import_as_the_tensorflow_ops_of_their_names() -> None:
    import turnout as tn
    from turnout.graphdef import export_graph_def

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [4], name="x")
        parts = [tn.log1p(x), tn.expm1(x), tn.erf(x), tn.sin(x), tn.cos(x), tn.floor(x), tn.ceil(x), tn.round(x),
                 tn.tan(x), tn.asin(x / 4), tn.acos(x / 4), tn.atan(x), tn.atan2(x, x + 1), tn.sinh(x), tn.cosh(x),
                 tn.asinh(x), tn.acosh(x * x + 1), tn.atanh(x / 4), tn.erfc(x), tn.lgamma(x), tn.digamma(x)]
    ex = export_graph_def(g)
    ops = {nd.op for nd in ex.graph_def.node}
    assert {"Log1p", "Expm1", "Erf", "Sin", "Cos", "Floor", "Ceil", "Round", "Tan", "Asin", "Acos", "Atan", "Atan2",
            "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Erfc", "Lgamma", "Digamma"} <= ops
    imp = import_graph_def(ex.graph_def)
    xv = np.asarray([0.25, -1.5, 2.5, 3.5], np.float32)
    got = imp.run(tn.Session(imp.graph), [ex.tf_name(p) for p in parts], {ex.tf_name(x): xv})
    want = tn.Session(g).run(parts, {x: xv})
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(want[7], [0.0, -2.0, 2.0, 4.0])  # halves to even, as TensorFlow


@pytest.mark.parametrize("backend", BACKENDS)
def test_floor_division_of_floats_is_the_floor_of_the_quotient(backend: str) -> None:
    """TensorFlow's FloorDiv: ``floor(x / y)`` on floats (so ``1 // 0.1`` is 10, where Python's
    ``//`` gives 9), floor division on integers; signs of every pair, a zero divisor, a NaN."""
    xf = np.asarray([7.5, -7.5, 7.5, -7.5, 1.0, 1.0, np.nan], np.float32)
    yf = np.asarray([2.0, 2.0, -2.0, -2.0, np.float32(0.1), 0.0, 1.0], np.float32)
    a = np.asarray([7, -7, 7, -7], np.int32)
    b = np.asarray([2, 2, -2, -2], np.int32)
    g = GraphDef()
    g.node("qf", "FloorDiv", (g.const("xf", xf), g.const("yf", yf)), T=F32)
    g.node("q", "FloorDiv", (g.const("a", a), g.const("b", b)), T=I32)
    qf, q = _run(g, ["qf:0", "q:0"], {}, backend)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(qf, np.floor(xf / yf))
    assert qf[4] == 10.0 and qf[5] == np.inf
    np.testing.assert_array_equal(q, [3, -4, -4, 3])


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncating_division_and_remainder(backend: str) -> None:
    """C's ``/`` and ``%``, against Python's truncation of exact fractions, over every sign pair."""
    a = np.asarray([7, -7, 7, -7, 6, -6, 0], np.int32)
    b = np.asarray([2, 2, -2, -2, 3, -3, 5], np.int32)
    xf = np.asarray([7.5, -7.5, 2.0, -0.25], np.float32)
    yf = np.asarray([2.0, 2.0, -4.0, 1.0], np.float32)
    g = GraphDef()
    g.node("q", "TruncateDiv", (g.const("a", a), g.const("b", b)), T=I32)
    g.node("r", "TruncateMod", ("a", "b"), T=I32)
    g.node("m", "Mod", ("a", "b"), T=I32)
    g.node("qf", "TruncateDiv", (g.const("xf", xf), g.const("yf", yf)), T=F32)
    g.node("d", "Div", ("a", "b"), T=I32)  # (TensorFlow's Div kernel on integers is TruncateDiv's)
    g.node("df", "Div", ("xf", "yf"), T=F32)
    q, r, m, qf, d, df = _run(g, ["q:0", "r:0", "m:0", "qf:0", "d:0", "df:0"], {}, backend)
    want_q = [int(p / s) for p, s in zip(a.tolist(), b.tolist())]
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(d, want_q)
    np.testing.assert_array_equal(df, xf / yf)
    np.testing.assert_array_equal(r, [p - s * w for p, s, w in zip(a.tolist(), b.tolist(), want_q)])
    np.testing.assert_array_equal(m, r)
    np.testing.assert_array_equal(qf, np.trunc(xf / yf))
    g2 = GraphDef()
    g2.node("r", "TruncateMod", (g2.const("x", xf), g2.const("y", yf)), T=F32)
    with pytest.raises(UnsupportedError, match='TruncateMod node "r": supported for integer inputs only'):
        import_graph_def(g2.gd)


@pytest.mark.parametrize("backend", BACKENDS)
def test_clip_by_value_inv_and_their_gradient_forms(backend: str) -> None:
    """``ClipByValue`` is ``max(min(t, hi), lo)``, TensorFlow's order, which decides where lo > hi
    (the result is lo); ``Inv`` is ``Reciprocal``'s older name, and ``InvGrad`` / ``ReciprocalGrad``
    are ``-dy * y * y`` from the forward output y."""
    t = np.asarray([[-5.0, 0.5, 9.0], [1.0, 2.0, 3.0]], np.float32)
    g = GraphDef()
    g.node("clip", "ClipByValue", (g.const("t", t), g.const("lo", np.float32(0.0)), g.const("hi", np.float32(2.0))),
           T=F32)
    g.node("odd", "ClipByValue", ("t", g.const("lo2", np.float32(3.0)), g.const("hi2", np.float32(1.0))), T=F32)
    y = np.asarray([0.5, -4.0, 2.0], np.float32)
    dy = np.asarray([1.0, 2.0, -3.0], np.float32)
    g.node("inv", "Inv", (g.const("y", y),), T=F32)
    g.node("ig", "InvGrad", ("inv", g.const("dy", dy)), T=F32)
    g.node("rg", "ReciprocalGrad", ("inv", "dy"), T=F32)
    clip, odd, inv, ig, rg = _run(g, ["clip:0", "odd:0", "inv:0", "ig:0", "rg:0"], {}, backend)
    np.testing.assert_array_equal(clip, np.clip(t, 0.0, 2.0))
    np.testing.assert_array_equal(odd, np.full_like(t, 3.0))
    np.testing.assert_array_equal(inv, 1 / y)
    np.testing.assert_allclose(ig, -dy / (y * y), rtol=1e-6)
    np.testing.assert_array_equal(rg, ig)


#: TensorFlow's trigonometric, hyperbolic and special-function ops, one primitive each: the numpy
#: function each must match, and its input (edges included: the domain's ends, where TensorFlow
#: gives +-inf or NaN)
_TRIG = {
    "Tan": (np.tan, [-1.2, 0.0, 0.7, 1.5]),
    "Asin": (np.arcsin, [-1.0, -0.3, 0.9, 1.5]),
    "Acos": (np.arccos, [-1.0, -0.3, 0.9, 1.5]),
    "Atan": (np.arctan, [-np.inf, -3.0, 0.2, 40.0]),
    "Sinh": (np.sinh, [-3.0, 1e-4, 0.5, 100.0]),
    "Cosh": (np.cosh, [-3.0, 0.0, 0.5, 100.0]),
    "Asinh": (np.arcsinh, [-30.0, -1e-4, 0.5, 1e6]),
    "Acosh": (np.arccosh, [0.5, 1.0, 1.5, 1e6]),
    "Atanh": (np.arctanh, [-1.0, -0.5, 0.25, 1.5]),
    "Erfc": (np.vectorize(math.erfc), [-3.0, 0.0, 3.0, 9.0]),
    # (lgamma is +inf at its poles, as TensorFlow's)
    "Lgamma": (np.vectorize(lambda v: math.inf if v <= 0 and v == int(v) else math.lgamma(v)), [-2.0, -0.5, 0.0, 30.0]),
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_trigonometric_hyperbolic_and_special_ops(backend: str) -> None:
    g = GraphDef()
    for op, (_, x) in _TRIG.items():
        g.node(op.lower(), op, (g.const(f"x_{op}", np.asarray(x, np.float32)),), T=F32)
    ys = np.asarray([0.0, -0.0, 0.0, 1.0, -1.0], np.float32)
    xs = np.asarray([0.0, 0.0, -1.0, 0.0, -0.0], np.float32)
    g.node("atan2", "Atan2", (g.const("y", ys), g.const("x", xs)), T=F32)
    g.node("digamma", "Digamma", (g.const("d", np.asarray([-1.0, 0.0, 1.0, 0.5], np.float32)),), T=F32)
    got = _run(g, [f"{op.lower()}:0" for op in _TRIG] + ["atan2:0", "digamma:0"], {}, backend)
    with np.errstate(all="ignore"):
        for (op, (f, x)), y in zip(_TRIG.items(), got):
            np.testing.assert_allclose(y, np.asarray(f(np.asarray(x, np.float64)), np.float32), rtol=2e-6,
                                       err_msg=op)
    # atan2 keeps the signs of zeros: the angle of (-1, +0) is pi, of (+0, -0) is -0
    np.testing.assert_array_equal(got[-2], np.arctan2(ys, xs))
    assert np.signbit(got[-2][1]) and got[-2][2] == np.float32(np.pi)
    euler = 0.5772156649015329
    np.testing.assert_allclose(got[-1], [np.nan, np.nan, -euler, -euler - 2 * math.log(2.0)], rtol=1e-6)


def test_digamma_has_no_gradient_and_says_why() -> None:
    """TensorFlow's gradient of Digamma is polygamma(1, x), which Turnout does not build: a
    GradientError naming the op, never a silent zero. Lgamma's gradient is digamma itself."""
    import turnout as tn

    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        (d,) = tn.gradients(tn.reduce_sum(tn.lgamma(x)), [x])
        with pytest.raises(tn.GradientError, match="Digamma.*trigamma"):
            tn.gradients(tn.reduce_sum(tn.digamma(x)), [x])
    got = tn.Session(g).run(d, {x: np.asarray([1.0, 2.0, 0.5], np.float32)})
    euler = 0.5772156649015329
    np.testing.assert_allclose(got, [-euler, 1 - euler, -euler - 2 * math.log(2.0)], rtol=1e-6)
