"""The shape rules and numpy kernels of the linear-algebra primitives: ``MatrixInverse``, ``Cholesky``,
``MatrixTriangularSolve``, ``MatrixSolve``, ``MatrixDeterminant`` and ``LogMatrixDeterminant``, over
batches of square float matrices (the last two axes).

Why primitives (not compositions): each is a factorisation whose loop over the rows a composition
would unroll or run as a graph loop, and whose failure (a singular matrix, one that is not positive
definite) must be found where the factorisation finds it. The kernels follow TensorFlow's CPU
kernels: ``MatrixInverse`` refuses a matrix whose LU factorisation meets a zero pivot (``Input is not
invertible.``); ``Cholesky`` reads the lower triangle only and refuses a matrix that is not positive
definite there; ``MatrixTriangularSolve`` reads the ``lower`` (or upper) triangle only, checks
nothing (a zero on the diagonal gives infinities, as TensorFlow's does), and broadcasts the batch
axes of its two operands; ``MatrixSolve`` refuses a zero pivot as the inverse does (``Input matrix is
not invertible.``), its batch axes those of the matrix; the determinants check nothing (a singular
matrix has determinant 0, sign 0 and log-determinant ``-inf``). ``adjoint`` is the transpose
(Turnout's floats are real).

``turnout.shape_rules`` and ``turnout.kernels`` take these rules into their tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout import shapes as sh
from turnout.errors import DTypeError, KernelError, ShapeError
from turnout.specs import TensorSpec

#: the linear-algebra primitives and TensorFlow's op of each
LINALG_OPS = ("MatrixInverse", "Cholesky", "MatrixTriangularSolve", "MatrixSolve", "MatrixDeterminant",
              "LogMatrixDeterminant")
#: the messages of TensorFlow's kernels, which Turnout's errors carry word for word
NOT_INVERTIBLE = "Input is not invertible."
NOT_POSITIVE_DEFINITE = "Cholesky decomposition was not successful. The input might not be valid."
NOT_SOLVABLE = "Input matrix is not invertible."


def _square(op: str, spec: TensorSpec, what: str = "input") -> sh.Shape:
    """A float batch of square matrices: its shape (None where unknown)."""
    if spec.dtype not in (dt.float32, dt.float64):
        raise DTypeError(f"{op}: the {what} must be float32 or float64, got {spec.dtype.name}")
    s = spec.shape
    if s is None:
        return None
    if len(s) < 2:
        raise ShapeError(f"{op}: the {what} must be a matrix or a batch of them, got shape {sh.fmt(s)}")
    if s[-1] is not None and s[-2] is not None and s[-1] != s[-2]:
        raise ShapeError(f"{op}: the {what} must be square, got shape {sh.fmt(s)}")
    return s


def _one_matrix(op: str, specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    """``MatrixInverse`` and ``Cholesky``: one batch of square matrices, its own shape out."""
    if len(specs) != 1:
        raise ShapeError(f"{op}: takes one input, got {len(specs)}")
    return [TensorSpec(specs[0].dtype, _square(op, specs[0]))]


def _matrix_and_rhs(op: str, specs: Sequence[TensorSpec]) -> tuple[dt.DType, sh.Shape, sh.Shape]:
    """A solve's operands, checked: a batch of square matrices and right-hand sides of its dtype, each
    of rank 2 or more; their dtype and shapes."""
    if len(specs) != 2:
        raise ShapeError(f"{op}: takes a matrix and a right-hand side, got {len(specs)} inputs")
    a, b = specs
    sa = _square(op, a, "matrix")
    if b.dtype != a.dtype:
        raise DTypeError(f"{op}: the matrix is {a.dtype.name} and the right-hand side {b.dtype.name}")
    if b.shape is not None and len(b.shape) < 2:
        raise ShapeError(f"{op}: the right-hand side must be a matrix or a batch of them, got {sh.fmt(b.shape)}")
    return a.dtype, sa, b.shape


def _triangular_solve(op: str, specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    """``[..., M, M]`` and ``[..., M, K]`` of one dtype, batch axes broadcast: ``[..., M, K]``."""
    d, sa, sb = _matrix_and_rhs(op, specs)
    if sa is None or sb is None:
        return [TensorSpec(d, None)]
    if sa[-1] is not None and sb[-2] is not None and sa[-1] != sb[-2]:
        raise ShapeError(f"{op}: a {sh.fmt(sa)} matrix cannot solve a right-hand side of {sh.fmt(sb)} rows")
    try:
        batch = sh.broadcast(tuple(sa[:-2]), tuple(sb[:-2]))
    except ValueError as e:
        raise ShapeError(f"{op}: the batch axes {e}") from None
    assert batch is not None
    return [TensorSpec(d, (*batch, sa[-1] if sa[-1] is not None else sb[-2], sb[-1]))]


def _solve(op: str, specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    """``[..., M, M]`` and ``[..., M, K]``, one dtype, the same batch axes: ``[..., M, K]``."""
    d, sa, sb = _matrix_and_rhs(op, specs)
    if sa is None or sb is None:
        return [TensorSpec(d, sb)]
    if len(sa) != len(sb) or not sh.compatible(tuple(sa[:-1]), tuple(sb[:-1])):
        raise ShapeError(f"{op}: a {sh.fmt(sa)} matrix cannot solve a right-hand side of shape {sh.fmt(sb)}")
    merged = sh.merge(tuple(sa[:-1]), tuple(sb[:-1]))
    assert merged is not None
    return [TensorSpec(d, (*merged, sb[-1]))]


def _determinants(op: str, specs: Sequence[TensorSpec], attrs: dict[str, Any]) -> list[TensorSpec]:
    """``[..., M, M]`` -> ``[...]`` (``LogMatrixDeterminant``: the sign and the log of the magnitude)."""
    if len(specs) != 1:
        raise ShapeError(f"{op}: takes one input, got {len(specs)}")
    s = _square(op, specs[0])
    out = TensorSpec(specs[0].dtype, None if s is None else tuple(s[:-2]))
    return [out, out] if op == "LogMatrixDeterminant" else [out]


# ---- kernels -------------------------------------------------------------------------------------------
def _t(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


def inverse(a: np.ndarray, adjoint: bool = False) -> np.ndarray:
    """``MatrixInverse``: ``a^-1`` (of ``a^T`` with ``adjoint``); a zero pivot is a ``KernelError``."""
    x = _t(a) if adjoint else a
    if x.size == 0:
        return x.copy()
    try:
        return np.linalg.inv(x).astype(a.dtype, copy=False)
    except np.linalg.LinAlgError:
        raise KernelError(f"MatrixInverse: {NOT_INVERTIBLE}") from None


def cholesky(a: np.ndarray) -> np.ndarray:
    """``Cholesky``: the lower factor ``L`` of ``a = L L^T``, read from ``a``'s lower triangle."""
    if a.size == 0:
        return a.copy()
    low = np.tril(a)
    full = low + _t(np.tril(a, -1))  # (the lower triangle mirrored: what the factorisation reads)
    if not np.isfinite(full).all():
        raise KernelError(f"Cholesky: {NOT_POSITIVE_DEFINITE}")
    try:
        return np.linalg.cholesky(full).astype(a.dtype, copy=False)
    except np.linalg.LinAlgError:
        raise KernelError(f"Cholesky: {NOT_POSITIVE_DEFINITE}") from None


def triangular_solve(a: np.ndarray, b: np.ndarray, lower: bool = True, adjoint: bool = False) -> np.ndarray:
    """``MatrixTriangularSolve``: ``x`` with ``tri(a) x = b`` (``tri(a)^T x = b`` with ``adjoint``),
    ``tri`` the ``lower`` or upper triangle, by substitution row by row (a zero pivot divides by zero,
    as TensorFlow's kernel does)."""
    tri = np.tril(a) if lower else np.triu(a)
    if adjoint:
        tri, lower = _t(tri), not lower
    batch = np.broadcast_shapes(tri.shape[:-2], b.shape[:-2])
    tri = np.broadcast_to(tri, (*batch, *tri.shape[-2:]))
    x = np.array(np.broadcast_to(b, (*batch, *b.shape[-2:])), dtype=a.dtype)
    m = tri.shape[-1]
    order = range(m) if lower else range(m - 1, -1, -1)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in order:
            done = slice(0, i) if lower else slice(i + 1, m)
            rest = np.einsum("...j,...jk->...k", tri[..., i, done], x[..., done, :])
            x[..., i, :] = (x[..., i, :] - rest) / tri[..., i, i][..., None]
    return x


def solve(a: np.ndarray, b: np.ndarray, adjoint: bool = False) -> np.ndarray:
    """``MatrixSolve``: ``x`` with ``a x = b`` (``a^T x = b`` with ``adjoint``); a zero pivot is a
    ``KernelError``."""
    x = _t(a) if adjoint else a
    if x.size == 0 or b.size == 0:
        return np.zeros(b.shape, a.dtype)
    try:
        return np.linalg.solve(x, b).astype(a.dtype, copy=False)
    except np.linalg.LinAlgError:
        raise KernelError(f"MatrixSolve: {NOT_SOLVABLE}") from None


def _inverse_kernel(xs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    return [inverse(np.asarray(xs[0]), bool(attrs.get("adjoint", False)))]


def _cholesky_kernel(xs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    return [cholesky(np.asarray(xs[0]))]


def _solve_kernel(xs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    return [triangular_solve(np.asarray(xs[0]), np.asarray(xs[1]), bool(attrs.get("lower", True)),
                             bool(attrs.get("adjoint", False)))]


def _matrix_solve_kernel(xs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    return [solve(np.asarray(xs[0]), np.asarray(xs[1]), bool(attrs.get("adjoint", False)))]


def _det_kernel(xs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    a = np.asarray(xs[0])
    return [np.linalg.det(a).astype(a.dtype) if a.size else np.ones(a.shape[:-2], a.dtype)]


def _log_det_kernel(xs: Sequence[Any], attrs: dict[str, Any]) -> list[Any]:
    a = np.asarray(xs[0])
    if not a.size:
        return [np.ones(a.shape[:-2], a.dtype), np.zeros(a.shape[:-2], a.dtype)]
    sign, log = np.linalg.slogdet(a)
    return [sign.astype(a.dtype), log.astype(a.dtype)]


LINALG_SHAPE_RULES = {"MatrixInverse": _one_matrix, "Cholesky": _one_matrix, "MatrixTriangularSolve": _triangular_solve,
                      "MatrixSolve": _solve, "MatrixDeterminant": _determinants, "LogMatrixDeterminant": _determinants}
LINALG_KERNELS = {"MatrixInverse": _inverse_kernel, "Cholesky": _cholesky_kernel,
                  "MatrixTriangularSolve": _solve_kernel, "MatrixSolve": _matrix_solve_kernel,
                  "MatrixDeterminant": _det_kernel, "LogMatrixDeterminant": _log_det_kernel}

__all__ = ["LINALG_KERNELS", "LINALG_OPS", "LINALG_SHAPE_RULES", "NOT_INVERTIBLE", "NOT_POSITIVE_DEFINITE",
           "NOT_SOLVABLE", "cholesky", "inverse", "solve", "triangular_solve"]
