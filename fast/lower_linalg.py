"""Lowering rules of the linear-algebra primitives (``turnout.linalg_rules``): ``MatrixInverse``,
``Cholesky``, ``MatrixTriangularSolve``, ``MatrixSolve`` and the determinants as XLA's factorisations.

The kernels' failures cannot raise inside compiled code, so each is a check of the error word
(``LoweringContext.check``) with the kernel's words: ``MatrixInverse`` looks at the pivots of the LU
factorisation (a zero one: not invertible, as the kernel and TensorFlow's find it; ``MatrixSolve``
too); ``Cholesky``, whose
XLA factorisation leaves NaNs where the matrix is not positive definite, at the factor's diagonal.
The factorisations read what the kernels read: ``Cholesky`` the lower triangle only (no symmetrising
of the input), ``MatrixTriangularSolve`` the one triangle its ``lower`` attr names.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import lax

from turnout.errors import describe_node
from turnout.fast.lowering_base import lowering_rule
from turnout.linalg_rules import NOT_INVERTIBLE, NOT_POSITIVE_DEFINITE, NOT_SOLVABLE


def _diagonal(x: Any) -> Any:
    return jnp.diagonal(x, axis1=-2, axis2=-1)


@lowering_rule("MatrixInverse")
def _inverse(ctx, n, xs):
    a = jnp.asarray(xs[0])
    if n.attrs.get("adjoint", False):
        a = jnp.swapaxes(a, -1, -2)
    if a.size == 0:
        return [a]
    lu = lax.linalg.lu(a)[0]
    ctx.check(jnp.all(jnp.abs(_diagonal(lu)) > 0), f"{describe_node(n)}: MatrixInverse: {NOT_INVERTIBLE}")
    return [jnp.linalg.inv(a)]


@lowering_rule("Cholesky")
def _cholesky(ctx, n, xs):
    a = jnp.asarray(xs[0])
    if a.size == 0:
        return [a]
    low = lax.linalg.cholesky(a, symmetrize_input=False)
    ok = jnp.all(jnp.isfinite(_diagonal(low))) & jnp.all(jnp.isfinite(jnp.tril(a)))
    ctx.check(ok, f"{describe_node(n)}: Cholesky: {NOT_POSITIVE_DEFINITE}")
    return [jnp.tril(low)]


@lowering_rule("MatrixTriangularSolve")
def _triangular_solve(ctx, n, xs):
    a, b = jnp.asarray(xs[0]), jnp.asarray(xs[1])
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = jnp.broadcast_to(a, (*batch, *a.shape[-2:]))
    b = jnp.broadcast_to(b, (*batch, *b.shape[-2:]))
    lower = bool(n.attrs.get("lower", True))
    return [lax.linalg.triangular_solve(a, b, left_side=True, lower=lower,
                                        transpose_a=bool(n.attrs.get("adjoint", False)))]


@lowering_rule("MatrixSolve")
def _solve(ctx, n, xs):
    a, b = jnp.asarray(xs[0]), jnp.asarray(xs[1])
    if n.attrs.get("adjoint", False):
        a = jnp.swapaxes(a, -1, -2)
    if a.size == 0 or b.size == 0:
        return [jnp.zeros(b.shape, a.dtype)]
    lu = lax.linalg.lu(a)[0]
    ctx.check(jnp.all(jnp.abs(_diagonal(lu)) > 0), f"{describe_node(n)}: MatrixSolve: {NOT_SOLVABLE}")
    return [jnp.linalg.solve(a, b)]


@lowering_rule("MatrixDeterminant")
def _det(ctx, n, xs):
    a = jnp.asarray(xs[0])
    return [jnp.linalg.det(a) if a.size else jnp.ones(a.shape[:-2], a.dtype)]


@lowering_rule("LogMatrixDeterminant")
def _log_det(ctx, n, xs):
    a = jnp.asarray(xs[0])
    if not a.size:
        return [jnp.ones(a.shape[:-2], a.dtype), jnp.zeros(a.shape[:-2], a.dtype)]
    sign, log = jnp.linalg.slogdet(a)
    return [sign, log]
