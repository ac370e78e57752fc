"""Op constructors of the special functions, rounding and running sums that TF1 model code uses
(softplus, elu and gelu are written with them; ``tn.import_graph_def`` imports TensorFlow's ops of
these names to them).

Why a module beside ``turnout.ops``: these are primitives of their own (no composition of the others
computes them exactly: ``log(1 + x)`` loses ``log1p``'s digits for small ``x``), and ``turnout.ops``
holds the core arithmetic and structure ops already. Each builder is one primitive node; its meaning
is the numpy function named in its docstring.
"""

from __future__ import annotations

from typing import Any, Optional

from turnout.arguments import checked
from turnout.graph import Tensor
from turnout.ops import convert_to_tensor, int_attr


def _op1(op: str, x: Any, name: Optional[str], **attrs: Any) -> Tensor:
    x = convert_to_tensor(x)
    return x.graph.create_node(op, [x], attrs, name=name).outputs[0]


@checked
def log1p(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.log1p(x)``: ``log(1 + x)``, exact for small ``x`` (floating dtypes only)."""
    return _op1("Log1p", x, name)


@checked
def expm1(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.expm1(x)``: ``exp(x) - 1``, exact for small ``x`` (floating dtypes only)."""
    return _op1("Expm1", x, name)


@checked
def erf(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise error function ``math.erf`` (floating dtypes only)."""
    return _op1("Erf", x, name)


@checked
def sin(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.sin(x)`` (floating dtypes only)."""
    return _op1("Sin", x, name)


@checked
def cos(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.cos(x)`` (floating dtypes only)."""
    return _op1("Cos", x, name)


@checked
def tan(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.tan(x)`` (floating dtypes only)."""
    return _op1("Tan", x, name)


@checked
def asin(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.arcsin(x)``: NaN outside [-1, 1] (floating dtypes only)."""
    return _op1("Asin", x, name)


@checked
def acos(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.arccos(x)``: NaN outside [-1, 1] (floating dtypes only)."""
    return _op1("Acos", x, name)


@checked
def atan(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.arctan(x)`` (floating dtypes only)."""
    return _op1("Atan", x, name)


@checked
def atan2(y: Any, x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.arctan2(y, x)``: the angle of the point ``(x, y)``, in ``[-pi, pi]``, with
    ``y`` first as in numpy and TensorFlow; the two broadcast (floating dtypes only)."""
    y = convert_to_tensor(y)
    x = convert_to_tensor(x, dtype=y.dtype)
    return y.graph.create_node("Atan2", [y, x], {}, name=name).outputs[0]


@checked
def sinh(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.sinh(x)`` (floating dtypes only)."""
    return _op1("Sinh", x, name)


@checked
def cosh(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.cosh(x)`` (floating dtypes only)."""
    return _op1("Cosh", x, name)


@checked
def asinh(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.arcsinh(x)`` (floating dtypes only)."""
    return _op1("Asinh", x, name)


@checked
def acosh(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.arccosh(x)``: NaN below 1 (floating dtypes only)."""
    return _op1("Acosh", x, name)


@checked
def atanh(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.arctanh(x)``: +-inf at +-1, NaN beyond (floating dtypes only)."""
    return _op1("Atanh", x, name)


@checked
def erfc(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``math.erfc``: ``1 - erf(x)``, exact where ``erf(x)`` is near 1, so the tails of a
    normal distribution keep their digits (floating dtypes only)."""
    return _op1("Erfc", x, name)


@checked
def lgamma(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``math.lgamma``: ``log |Gamma(x)|``, +inf at the poles 0, -1, -2, ... as in
    TensorFlow (floating dtypes only). Its gradient is ``digamma``."""
    return _op1("Lgamma", x, name)


@checked
def digamma(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise digamma function, the derivative of ``lgamma``: NaN at the poles 0, -1, -2, ...
    as in TensorFlow (floating dtypes only). It has no gradient in Turnout (TensorFlow's is
    ``polygamma(1, x)``): ``tn.gradients`` through it raises ``GradientError``."""
    return _op1("Digamma", x, name)


@checked
def floor(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.floor(x)`` (floating dtypes only; no gradient: it is piecewise constant)."""
    return _op1("Floor", x, name)


@checked
def ceil(x: Any, name: Optional[str] = None) -> Tensor:
    """Elementwise ``np.ceil(x)`` (floating dtypes only; no gradient: it is piecewise constant)."""
    return _op1("Ceil", x, name)


@checked
def round(x: Any, name: Optional[str] = None) -> Tensor:  # noqa: A001
    """Elementwise ``np.round(x)``: halves go to the even neighbour, as in TensorFlow (floating
    dtypes only; no gradient: it is piecewise constant)."""
    return _op1("Round", x, name)


@checked
def cumsum(x: Any, axis: int = 0, exclusive: bool = False, reverse: bool = False,
           name: Optional[str] = None) -> Tensor:
    """Running sum along ``axis``, as ``tf.cumsum``: ``np.cumsum(x, axis)``; ``exclusive`` leaves
    each element out of its own sum (the first is 0), ``reverse`` sums from the end. Its gradient is
    the running sum of the gradient in the other direction."""
    return _op1("Cumsum", x, name, axis=int_attr(axis, "cumsum", "axis"), exclusive=bool(exclusive),
                reverse=bool(reverse))


@checked
def cumprod(x: Any, axis: int = 0, exclusive: bool = False, reverse: bool = False,
            name: Optional[str] = None) -> Tensor:
    """Running product along ``axis``, as ``tf.math.cumprod``: ``np.cumprod(x, axis)``; ``exclusive``
    leaves each element out of its own product (the first is 1), ``reverse`` multiplies from the end.
    Its gradient is exact where ``x`` holds zeros: TensorFlow's formula (a running sum of ``y * dy`` in
    the other direction divided by ``x``) where that is exact, and at a line's first zero the same sum
    with the zero read as 1 (TensorFlow's gives 0 there, which is not the derivative)."""
    return _op1("Cumprod", x, name, axis=int_attr(axis, "cumprod", "axis"), exclusive=bool(exclusive),
                reverse=bool(reverse))


__all__ = ["acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "cos", "cosh", "cumprod", "cumsum",
           "digamma", "erf", "erfc", "expm1", "floor", "lgamma", "log1p", "round", "sin", "sinh", "tan"]
