"""Laws of the fast backend's arithmetic lowering rules (``turnout.fast.lowering``): a condition a
rule checks (``_holds``) is known to hold only when it is static and true, and a static one is checked
for nothing where it holds; integer division, modulo and powers refuse a zero divisor or a negative
exponent, static or fed, with the reference interpreter's error type and the node's name, and give
the reference's values everywhere else. Each law kills mutants of the full set of
``fast/lowering.py`` (issue 40, part 3; ``python tools/mutation.py --module fast/lowering.py --all``).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

import turnout as tn
from turnout.errors import KernelError
from turnout.fast.lowering import _holds, _sign
from turnout.fast.values import is_static


class _Checks:
    """A stand-in trace that records each check: (whether its condition was static, the message)."""

    def __init__(self) -> None:
        self.checks: list[tuple[bool, Any, str]] = []

    def check(self, ok: Any, message: str, code: str = "kernel", shows: Any = None) -> None:
        """Record the check; a static condition is kept as a Python bool."""
        self.checks.append((is_static(ok), bool(ok) if is_static(ok) else None, message))


def test_a_static_condition_that_holds_is_known_to_hold_and_checked_statically() -> None:
    """A constant divisor with no zero: the rule knows the condition holds (it adds no guard), and the
    check it makes is of a static true value, which a trace turns into nothing."""
    rec = _Checks()
    assert _holds(rec, np.array([1, 2, 3]) != 0, "m") is True  # type: ignore[arg-type]
    assert rec.checks == [(True, True, "m")]


def test_a_static_condition_that_fails_is_not_known_to_hold_and_fails_with_its_message() -> None:
    rec = _Checks()
    assert _holds(rec, np.array([1, 0]) != 0, "division by zero") is False  # type: ignore[arg-type]
    assert rec.checks == [(True, False, "division by zero")]


def test_a_traced_condition_is_never_known_to_hold() -> None:
    """A fed divisor: whatever its values will be, the rule cannot know the condition holds while
    tracing, so it keeps its guard; the check it makes is of the traced value."""
    rec, known = _Checks(), []

    def f(b: Any) -> Any:
        known.append(_holds(rec, b != 0, "m"))  # type: ignore[arg-type]
        return b

    jax.jit(f)(np.array([1, 2], np.int32))
    assert known == [False] and rec.checks == [(False, None, "m")]


def _int_ops() -> tuple[tn.Graph, dict[str, Any]]:
    """Integer ``//``, ``%`` and ``**`` of a fed vector by a fed vector and by constants."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [3], name="x")
        y = tn.placeholder(tn.int32, [3], name="y")
        t = {"x": x, "y": y,
             "div": tn.floordiv(x, y, name="div"), "mod": tn.mod(x, y, name="mod"),
             "pow": tn.pow(x, y, name="pow"),
             "pow_by": tn.pow(x, tn.constant(np.array([2, 0, 3], np.int32)), name="pow_by"),
             "div_by": tn.floordiv(x, tn.constant(np.array([2, 1, 3], np.int32)), name="div_by"),
             "pow_neg": tn.pow(x, tn.constant(np.array([1, -1, 0], np.int32)), name="pow_neg"),
             "div_zero": tn.floordiv(x, tn.constant(np.array([1, 0, 2], np.int32)), name="div_zero")}
    return g, t


@pytest.mark.parametrize("fetch", ["div", "mod", "pow", "pow_by", "div_by"])
def test_integer_arithmetic_by_fed_and_constant_operands_gives_the_references_values(fetch: str) -> None:
    """Exponents of 0 and divisors of 1 among them: a guard must change no value the check allows.
    Compiled by the rules themselves (``fallback=False``: a rule that fails would send the run to the
    interpreter, which gives the same values)."""
    g, t = _int_ops()
    feed = {t["x"]: np.array([7, -5, 4], np.int32), t["y"]: np.array([2, 1, 0], np.int32)}
    if fetch in ("div", "mod"):
        feed[t["y"]] = np.array([2, 1, -3], np.int32)
    want = tn.Session(g).run(t[fetch], feed)
    np.testing.assert_array_equal(tn.Session(g, backend="fast", fallback=False).run(t[fetch], feed), want)


@pytest.mark.parametrize("fetch, y, words", [
    ("div", [2, 0, 1], "integer division by zero"),
    ("mod", [2, 0, 1], "integer modulo by zero"),
    ("pow", [2, -1, 1], "integers to negative integer powers are not allowed"),
    ("pow_neg", [1, 1, 1], "integers to negative integer powers are not allowed"),
    ("div_zero", [1, 1, 1], "integer division by zero"),
])
def test_integer_arithmetic_refuses_what_the_reference_refuses_naming_the_node(fetch: str, y: list[int],
                                                                               words: str) -> None:
    """A zero divisor or a negative exponent, fed (a check of the traced value) or constant (a static
    check): the reference interpreter's error type, the rule's words and the node's name."""
    g, t = _int_ops()
    feed = {t["x"]: np.array([7, 5, 4], np.int32), t["y"]: np.array(y, np.int32)}
    with pytest.raises(KernelError) as ref:
        tn.Session(g).run(t[fetch], feed)
    with pytest.raises(KernelError, match=words) as fast:
        tn.Session(g, backend="fast", fallback=False).run(t[fetch], feed)
    name = t[fetch].node.name
    assert f'"{name}"' in str(fast.value) and f'"{name}"' in str(ref.value)


#: the elementwise ops of the rule table with an input each is defined on, away from poles and roots
_UNARY = {op: [0.25, 0.5, 0.75] for op in (
    "Neg", "Abs", "Square", "Relu", "Tanh", "Sigmoid", "Exp", "Log", "Sqrt", "Log1p", "Expm1", "Erf", "Sin",
    "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Atanh", "Erfc")}
_UNARY.update({"Sign": [-0.5, 0.0, 0.75], "Floor": [-1.5, 0.25, 2.75], "Ceil": [-1.5, 0.25, 2.75],
               "Round": [-1.25, 0.75, 2.25], "Acosh": [1.25, 1.5, 2.0],
               "Lgamma": [0.5, 1.5, 3.25], "Digamma": [0.5, 1.5, 3.25]})
_BINARY = ("Add", "Sub", "Mul", "Maximum", "Minimum", "Atan2", "Less", "LessEqual", "Greater",
           "GreaterEqual", "Equal", "NotEqual")


@pytest.mark.parametrize("dtype", [tn.float32, tn.float64])
def test_every_elementwise_rule_compiles_the_references_values(dtype: Any) -> None:
    """Each elementwise op of the table, on fed values, is compiled by its own rule (``fallback=False``:
    a rule that fails would send the run to the interpreter, which gives the same values) and gives
    the reference's values, to an ulp or two of the dtype. ``Lgamma`` and ``Digamma`` of float32 are
    computed in float64 and rounded once (``_in_double``), as the reference's kernels are."""
    g = tn.Graph()
    outs = {}
    with g.as_default():
        x = tn.placeholder(dtype, [3], name="x")
        z = tn.placeholder(dtype, [3], name="z")
        for op, v in _UNARY.items():
            outs[op] = (g.create_node(op, [x], name=op).outputs[0], np.asarray(v))
        for op in _BINARY:
            outs[op] = (g.create_node(op, [x, z], name=op).outputs[0], np.asarray([0.5, -0.25, 0.75]))
        p = tn.placeholder(tn.bool, [2], name="p")
        q = tn.placeholder(tn.bool, [2], name="q")
        logic = [g.create_node(op, ins, name=op).outputs[0]
                 for op, ins in (("LogicalAnd", [p, q]), ("LogicalOr", [p, q]), ("LogicalNot", [p]))]
    np_dtype = np.float32 if dtype == tn.float32 else np.float64
    ref, fast = tn.Session(g), tn.Session(g, backend="fast", fallback=False)
    zv = np.asarray([0.5, 0.5, -0.75], np_dtype)
    rtol = 2e-6 if dtype == tn.float32 else 1e-10  # (digamma of float64 near its root: 1e-12 apart)
    for op, (t, v) in outs.items():
        feed = {x: v.astype(np_dtype), z: zv}
        np.testing.assert_allclose(fast.run(t, feed), ref.run(t, feed), rtol=rtol, atol=1e-30, err_msg=op)
    pq = {p: np.array([True, False]), q: np.array([True, True])}
    for t in logic:
        np.testing.assert_array_equal(fast.run(t, pq), ref.run(t, pq))


@pytest.mark.parametrize("dtype", [tn.int32, tn.int64])
def test_an_integer_relu_keeps_every_integer(dtype: Any) -> None:
    """``Relu`` of integers compares with an integer zero of the input's dtype: a float zero would
    make the maximum a float64, which cannot hold every int64 (2**60 + 1 would come back as 2**60)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(dtype, [3], name="x")
        y = g.create_node("Relu", [x], name="Relu").outputs[0]
    big = 2**60 + 1 if dtype == tn.int64 else 2**31 - 1
    v = np.array([big, -3, 0], np.int64 if dtype == tn.int64 else np.int32)
    fast = tn.Session(g, backend="fast", fallback=False)
    np.testing.assert_array_equal(fast.run(y, {x: v}), tn.Session(g).run(y, {x: v}))


def test_sign_gives_both_zeros_a_positive_zero_and_keeps_integers() -> None:
    """``sign`` as the kernel and TensorFlow give it: ``+0.0`` for ``0.0`` and ``-0.0`` (XLA's keeps
    the zero's sign), -1, 1 and NaN elsewhere, traced or not; integer signs as ``jnp.sign``'s."""
    x = np.asarray([-0.0, 0.0, -3.5, 2.0, -np.inf, np.nan], np.float32)
    for got in (np.asarray(_sign(jax.numpy.asarray(x))), np.asarray(jax.jit(_sign)(x))):
        np.testing.assert_array_equal(got, [0.0, 0.0, -1.0, 1.0, -1.0, np.nan])
        assert not np.signbit(got[:2]).any() and got.dtype == np.float32
    ints = np.asarray([-4, 0, 9], np.int32)
    got_i = np.asarray(_sign(jax.numpy.asarray(ints)))
    np.testing.assert_array_equal(got_i, [-1, 0, 1])
    assert got_i.dtype == np.int32
