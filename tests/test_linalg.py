"""``tn.linalg`` (primitives ``MatrixInverse``, ``Cholesky``, ``MatrixTriangularSolve``, ``MatrixSolve``,
``MatrixDeterminant``, ``LogMatrixDeterminant``) on every route
against numpy, their failures as the same ``KernelError`` everywhere, and their bad arguments
(tests/test_gradient_rules.py checks their gradients against finite differences and JAX;
tests/test_graphdef_import.py replays the TensorFlow-made fixture ``gp_regression``).

Laws: the inverse is numpy's, refused where the LU factorisation meets a zero pivot; the Cholesky
factor reads the lower triangle only and is refused where that is not positive definite; a triangular
solve reads its one triangle, broadcasts the batch axes and divides by a zero pivot as IEEE does; a
general solve is refused where the inverse is; the determinants are numpy's, a singular matrix's 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from route_table import ROUTES, run_on

import turnout as tn
from turnout.errors import ArgumentError, DTypeError, KernelError, ShapeError

pytest.importorskip("jax")

RNG = np.random.default_rng(11)


def _spd(*batch: int, n: int = 3) -> np.ndarray:
    a = RNG.normal(size=(*batch, n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_values_are_numpys_reading_one_triangle(route: str) -> None:
    """Law: inverses (and of transposes), the Cholesky factor of the lower triangle (the upper one
    holds junk here), and triangular solves in either triangle, batched and broadcast."""
    a = RNG.normal(size=(2, 3, 3)) + 3 * np.eye(3)
    s = _spd(2)
    junk = s + np.triu(np.full((3, 3), 50.0), 1)  # (only the lower triangle is read)
    rhs = RNG.normal(size=(3, 2))
    g = tn.Graph()
    with g.as_default():
        pa = tn.placeholder(tn.float64, [None, 3, 3], name="a")
        ps = tn.placeholder(tn.float64, [None, 3, 3], name="s")
        fetches = [tn.linalg.inv(pa), tn.linalg.inv(pa, adjoint=True), tn.linalg.cholesky(ps),
                   tn.linalg.triangular_solve(pa, tn.constant(rhs)),
                   tn.linalg.triangular_solve(pa, tn.constant(rhs), lower=False, adjoint=True),
                   tn.linalg.logdet_from_cholesky(tn.linalg.cholesky(ps)),
                   tn.linalg.solve(pa, tn.constant(np.stack([rhs, -rhs]))), tn.linalg.det(pa), *tn.linalg.slogdet(pa)]
    got = run_on(route, g, fetches, {pa: a, ps: junk})
    low, up = np.tril(a), np.triu(a)
    want = [np.linalg.inv(a), np.linalg.inv(np.swapaxes(a, -1, -2)), np.linalg.cholesky(s),
            np.linalg.solve(low, np.broadcast_to(rhs, (2, 3, 2))),
            np.linalg.solve(np.swapaxes(up, -1, -2), np.broadcast_to(rhs, (2, 3, 2))),
            np.linalg.slogdet(s)[1], np.linalg.solve(a, np.stack([rhs, -rhs])), np.linalg.det(a),
            *np.linalg.slogdet(a)]
    for x, w in zip(got, want, strict=True):
        np.testing.assert_allclose(x, w, rtol=1e-10, atol=1e-12)
    assert (np.triu(got[2], 1) == 0).all()


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize(("op", "value", "match"), [
    ("inv", [[1.0, 2.0], [2.0, 4.0]], "MatrixInverse: Input is not invertible."),
    ("inv", [[0.0, 0.0], [0.0, 0.0]], "MatrixInverse: Input is not invertible."),
    ("solve", [[1.0, 2.0], [2.0, 4.0]], "MatrixSolve: Input matrix is not invertible."),
    ("cholesky", [[1.0, 2.0], [2.0, 1.0]], "Cholesky decomposition was not successful"),
    ("cholesky", [[np.nan, 0.0], [0.0, 1.0]], "Cholesky decomposition was not successful"),
], ids=["singular", "zero", "solve", "indefinite", "nan"])
def test_a_failed_factorisation_is_the_same_kernel_error_on_every_route(route: str, op: str, value: Any,
                                                                       match: str) -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, [2, 2], name="a")
        out = tn.linalg.solve(a, tn.ones([2, 1])) if op == "solve" else getattr(tn.linalg, op)(a)
    with pytest.raises(KernelError, match=match):
        run_on(route, g, out, {a: np.asarray(value, np.float32)})


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_zero_pivot_of_a_triangular_solve_divides_as_ieee(backend: str) -> None:
    """Law (TensorFlow's kernel checks nothing): ``1 / 0`` is ``inf``, and what reads it ``inf`` or
    NaN; no error."""
    g = tn.Graph()
    with g.as_default():
        x = tn.linalg.triangular_solve(tn.constant([[0.0, 0.0], [1.0, 1.0]]), tn.constant([[1.0], [1.0]]))
    got = tn.Session(g, backend=backend).run(x)
    assert np.isinf(got[0, 0]) and not np.isfinite(got[1, 0])


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_a_singular_matrix_has_determinant_zero(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        a = tn.constant([[1.0, 2.0], [2.0, 4.0]])
        outs = [tn.linalg.det(a), *tn.linalg.slogdet(a)]
    d, sign, log = tn.Session(g, backend=backend).run(outs)
    assert d == 0 and sign == 0 and log == -np.inf


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_empty_batches_and_matrices(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        outs = [tn.linalg.inv(tn.zeros([0, 2, 2])), tn.linalg.cholesky(tn.zeros([3, 0, 0])),
                tn.linalg.triangular_solve(tn.zeros([2, 2]), tn.zeros([2, 0]))]
    assert [o.shape for o in tn.Session(g, backend=backend).run(outs)] == [(0, 2, 2), (3, 0, 0), (2, 0)]


@pytest.mark.parametrize(("build", "error", "match"), [
    (lambda: tn.linalg.inv(tn.constant([[1, 2], [3, 4]])), DTypeError, "MatrixInverse: the input must be float"),
    (lambda: tn.linalg.inv(tn.zeros([2, 3])), ShapeError, "must be square"),
    (lambda: tn.linalg.cholesky(tn.zeros([3])), ShapeError, "a matrix or a batch of them"),
    (lambda: tn.linalg.triangular_solve(tn.zeros([3, 3]), tn.zeros([2, 1])), ShapeError, "cannot solve"),
    (lambda: tn.linalg.triangular_solve(tn.zeros([2, 3, 3]), tn.zeros([4, 3, 1])), ShapeError, "batch axes"),
    (lambda: tn.linalg.triangular_solve(tn.zeros([3, 3]), tn.zeros([3, 1], tn.float64)), DTypeError,
     "float32 and the right-hand side float64"),
    (lambda: tn.linalg.triangular_solve(tn.zeros([3, 3]), tn.zeros([3])), ShapeError, "right-hand side must be"),
    (lambda: tn.linalg.solve(tn.zeros([2, 3, 3]), tn.zeros([3, 1])), ShapeError, "MatrixSolve: a .* cannot solve"),
    (lambda: tn.linalg.det(tn.zeros([2, 3])), ShapeError, "MatrixDeterminant: the input must be square"),
    (lambda: tn.linalg.inv(tn.zeros([2, 2]), adjoint=1), ArgumentError, "adjoint must be True or False"),
    (lambda: tn.linalg.triangular_solve(tn.zeros([2, 2]), tn.zeros([2, 1]), lower="yes"), ArgumentError,
     "lower must be True or False"),
])
def test_bad_arguments_are_errors_naming_the_op(build: Any, error: type, match: str) -> None:
    with tn.Graph().as_default(), pytest.raises(error, match=match):
        build()


def test_a_graph_with_linear_algebra_saves_and_loads(tmp_path: Any) -> None:
    """Law: the attrs (``adjoint``, ``lower``) survive Turnout's own format."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float64, [3, 3], name="a")
        x = tn.linalg.triangular_solve(a, tn.linalg.inv(a, adjoint=True), lower=False, adjoint=True, name="x")
    tn.save(g, tmp_path / "g.json")
    h = tn.load(tmp_path / "g.json")
    v = _spd()
    np.testing.assert_allclose(tn.Session(h).run(h.tensor("x:0"), {h.tensor("a:0"): v}),
                               tn.Session(g).run(x, {a: v}))
