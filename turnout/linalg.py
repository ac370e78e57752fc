"""``tn.linalg``: the inverse, the Cholesky factor, solves (triangular or not) and determinants of
square float matrices, batched over the leading axes, as TensorFlow's ``tf.linalg.inv``,
``cholesky``, ``triangular_solve``, ``solve``, ``det`` and ``slogdet`` (primitives
``MatrixInverse``, ``Cholesky``, ``MatrixTriangularSolve``, ``MatrixSolve``, ``MatrixDeterminant``,
``LogMatrixDeterminant``: ``turnout.linalg_rules``), with their gradients
(``turnout.gradients.rules``) on every backend.

Why these: a Gaussian process, a full-covariance Gaussian or a whitening step needs the Cholesky
factor of a covariance, solves against it, and its log-determinant
(``2 * reduce_sum(log(diag(L)))``, written with ``tn.linalg.logdet_from_cholesky``); a normalising
flow needs the log-determinant of a general matrix; TensorFlow's gradients of these are written with
the inverse and the solves.
"""

from __future__ import annotations

from typing import Any, Optional

from turnout import math_ops, ops
from turnout.arguments import checked
from turnout.graph import Tensor


@checked
def inv(x: Any, adjoint: bool = False, name: Optional[str] = None) -> Tensor:
    """The inverse of each square matrix of ``x``'s last two axes (of its transpose with ``adjoint``):
    ``tf.linalg.inv``. A matrix whose LU factorisation meets a zero pivot is a ``KernelError`` when it
    runs (TensorFlow's ``Input is not invertible.``)."""
    t = ops.convert_to_tensor(x)
    return t.graph.create_node("MatrixInverse", [t], {"adjoint": adjoint},
                               name=name).outputs[0]


@checked
def cholesky(x: Any, name: Optional[str] = None) -> Tensor:
    """The lower-triangular ``L`` with ``x = L L^T`` for each symmetric positive-definite matrix of
    ``x``'s last two axes, read from its lower triangle: ``tf.linalg.cholesky``. One that is not
    positive definite is a ``KernelError`` when it runs (TensorFlow's words)."""
    t = ops.convert_to_tensor(x)
    return t.graph.create_node("Cholesky", [t], {}, name=name).outputs[0]


@checked
def triangular_solve(matrix: Any, rhs: Any, lower: bool = True, adjoint: bool = False,
                     name: Optional[str] = None) -> Tensor:
    """``x`` with ``T x = rhs`` (``T^T x = rhs`` with ``adjoint``), ``T`` the lower (``lower``) or upper
    triangle of each square ``matrix``; the batch axes of the two broadcast: ``tf.linalg.triangular_solve``.
    Nothing is checked: a zero on the diagonal gives infinities or NaNs, as in TensorFlow."""
    a, b = ops.convert_to_tensor(matrix), ops.convert_to_tensor(rhs)
    return a.graph.create_node("MatrixTriangularSolve", [a, b], {"lower": lower, "adjoint": adjoint},
                               name=name).outputs[0]


@checked
def solve(matrix: Any, rhs: Any, adjoint: bool = False, name: Optional[str] = None) -> Tensor:
    """``x`` with ``matrix x = rhs`` (``matrix^T x = rhs`` with ``adjoint``) for each square matrix and
    right-hand side of one batch: ``tf.linalg.solve``. A zero pivot of the matrix's LU factorisation is
    a ``KernelError`` when it runs (TensorFlow's ``Input matrix is not invertible.``)."""
    a, b = ops.convert_to_tensor(matrix), ops.convert_to_tensor(rhs)
    return a.graph.create_node("MatrixSolve", [a, b], {"adjoint": adjoint}, name=name).outputs[0]


@checked
def det(x: Any, name: Optional[str] = None) -> Tensor:
    """The determinant of each square matrix of ``x``'s last two axes: ``tf.linalg.det``."""
    t = ops.convert_to_tensor(x)
    return t.graph.create_node("MatrixDeterminant", [t], {}, name=name).outputs[0]


@checked
def slogdet(x: Any, name: Optional[str] = None) -> tuple[Tensor, Tensor]:
    """The sign and the log of the magnitude of each determinant: ``tf.linalg.slogdet`` (a singular
    matrix: sign 0, ``-inf``)."""
    t = ops.convert_to_tensor(x)
    sign, log = t.graph.create_node("LogMatrixDeterminant", [t], {}, name=name).outputs
    return sign, log


@checked
def logdet_from_cholesky(chol: Any, name: Optional[str] = None) -> Tensor:
    """``log det(x)`` of the matrices whose Cholesky factors are ``chol``: twice the sum of the logs of
    the factors' diagonals (``tf.linalg.logdet`` computes it so)."""
    c = ops.convert_to_tensor(chol)
    diag = ops.reduce_sum(c * eye_like(c), axis=-1)
    return ops.multiply(ops.reduce_sum(ops.log(diag), axis=-1), ops.constant(2.0, c.dtype), name=name)


def eye_like(x: Tensor) -> Tensor:
    """Ones on the diagonal of each matrix shaped like ``x``'s last two axes, zeros elsewhere, of any
    size known only when it runs (row and column numbers counted by running sums of ones)."""
    return ops.cast(ops.equal(*_row_col(x)), x.dtype)


def lower_like(x: Tensor, lower: bool = True) -> Tensor:
    """Ones on and below (``lower``) or on and above the diagonal of each matrix shaped like ``x``."""
    row, col = _row_col(x)
    return ops.cast(ops.greater_equal(row, col) if lower else ops.less_equal(row, col), x.dtype)


def _row_col(x: Tensor) -> tuple[Tensor, Tensor]:
    ones = ops.ones_like(x)
    return math_ops.cumsum(ones, axis=-2), math_ops.cumsum(ones, axis=-1)


__all__ = ["cholesky", "det", "eye_like", "inv", "logdet_from_cholesky", "lower_like", "slogdet", "solve",
           "triangular_solve"]
