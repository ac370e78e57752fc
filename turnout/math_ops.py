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


__all__ = ["ceil", "cos", "cumprod", "cumsum", "erf", "expm1", "floor", "log1p", "round", "sin"]
