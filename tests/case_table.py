"""What the closed-form case files share (test_closed_forms.py, test_tf_suite_cases.py,
test_tf_suite_cases2.py, test_suite_cases3.py): a registry of cases by name, and the small builders
their cases are written with. A case builds its graph and returns (fetches, feeds, the expected
values, or None where a test of its own checks them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np

import turnout as tn

Case = tuple[list[Any], dict[tn.Tensor, Any], Optional[list[Any]]]


class Cases(dict[str, Callable[[], Case]]):
    """The cases of one file by name; ``case`` registers a function under its name."""

    def case(self, f: Callable[[], Case]) -> Callable[[], Case]:
        self[f.__name__] = f
        return f


def run_case(cases: Cases, name: str, route: str) -> tuple[list[Any], Optional[list[Any]]]:
    """Case ``name`` built in a fresh graph and run on ``route`` (``route_table.run_on``): what it
    fetched, and what it expects."""
    from route_table import run_on

    g = tn.Graph()
    with g.as_default():
        fetches, feeds, want = cases[name]()
    return list(run_on(route, g, fetches, feeds)), want


def close(got: list[Any], want: list[Any], what: str, rtol: float) -> None:
    """Each fetch equal to its expected value in float64, of the same shape, within ``rtol`` (and an
    absolute 1e-12 for values at zero)."""
    assert len(got) == len(want), what
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        assert a64.shape == b64.shape, f"{what}: fetch {k} has shape {a64.shape}, expected {b64.shape}"
        np.testing.assert_allclose(a64, b64, rtol=rtol, atol=1e-12, err_msg=f"{what}: fetch {k}")


def f64(v: Any) -> tn.Tensor:
    return tn.constant(v, tn.float64)


def ph(shape: Any = (), name: str = "x", dtype: Any = tn.float64) -> tn.Tensor:
    """A placeholder, float64 and scalar unless told (``shape=None``: of unknown rank)."""
    return tn.placeholder(dtype, None if shape is None else list(shape), name=name)


def grad(y: tn.Tensor, x: Any, **kw: Any) -> tn.Tensor:
    """The one gradient of ``y`` with respect to ``x``, which must exist."""
    (d,) = tn.gradients(y, [x], **kw)
    assert d is not None
    return d
