"""Local response normalisation as TensorFlow defines it: ``LRN`` and its gradient op ``LRNGrad``.

Hand-written GraphDefs against numpy closed forms written the way TensorFlow's op documentation and
CPU kernel state them, channel by channel (not the band product the import uses): ``sqr_sum[..., d]
= sum(x[..., d - r : d + r + 1] ** 2)``, ``y = x / (bias + alpha * sqr_sum) ** beta``, and the gradient
loop of the kernel, which reads the forward output. The TensorFlow-made ``cifar10_lrn`` fixture
(``tests/test_graphdef_import.py``) checks both against TensorFlow's own run. Needs the ``tf`` extra.
"""

from __future__ import annotations

import numpy as np
import pytest

import turnout as tn
from turnout.errors import UnsupportedError

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from test_graphdef_model_ops import BACKENDS, F32, GraphDef, _run  # noqa: E402

from turnout.graphdef import import_graph_def  # noqa: E402

#: (depth_radius, bias, alpha, beta, channels): the defaults, the CIFAR-10 tutorial's, a window wider
#: than the channels, a radius of 0 and a beta of 1
SETTINGS = [(5, 1.0, 1.0, 0.5, 3), (4, 1.0, 0.001 / 9.0, 0.75, 6), (1, 2.0, 0.5, 1.0, 4), (0, 0.5, 2.0, 0.3, 5)]


def _norm(x: np.ndarray, r: int, bias: float, alpha: float) -> np.ndarray:
    c = x.shape[-1]
    sq = np.stack([np.sum(x[..., max(0, d - r):d + r + 1].astype(np.float64) ** 2, axis=-1) for d in range(c)], -1)
    return bias + alpha * sq


def _lrn(x: np.ndarray, r: int, bias: float, alpha: float, beta: float) -> np.ndarray:
    return x / _norm(x, r, bias, alpha) ** beta


def _lrn_grad(dy: np.ndarray, x: np.ndarray, y: np.ndarray, r: int, bias: float, alpha: float,
              beta: float) -> np.ndarray:
    """TensorFlow's kernel: every output ``j`` adds to the input ``k`` of its window
    ``-2 alpha beta x[k] y[j] / norm[j] * dy[j]``, and to itself ``norm[j] ** -beta * dy[j]``."""
    norm = _norm(x, r, bias, alpha)
    dx = np.zeros(x.shape, np.float64)
    c = x.shape[-1]
    for j in range(c):
        for k in range(max(0, j - r), min(c, j + r + 1)):
            dx[..., k] += -2 * alpha * beta * x[..., k] * y[..., j] / norm[..., j] * dy[..., j]
        dx[..., j] += norm[..., j] ** -beta * dy[..., j]
    return dx


def _graph(op: str, r: int, bias: float, alpha: float, beta: float, c: int) -> GraphDef:
    g = GraphDef()
    attrs = {"depth_radius": r, "bias": bias, "alpha": alpha, "beta": beta, "T": F32}
    if op == "LRN":
        g.node("out", "LRN", (g.placeholder("x", F32, [-1, 2, 3, c]),), **attrs)
    else:
        g.node("out", "LRNGrad", tuple(g.placeholder(n, F32, [-1, 2, 3, c]) for n in ("dy", "x", "y")), **attrs)
    return g


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("setting", SETTINGS, ids=[f"r{s[0]}_c{s[4]}" for s in SETTINGS])
def test_lrn_normalises_by_the_sum_of_squares_of_the_nearby_channels(backend: str,
                                                                     setting: tuple[int, float, float, float, int]
                                                                     ) -> None:
    r, bias, alpha, beta, c = setting
    x = (np.random.default_rng(c).normal(size=(2, 2, 3, c)) * 2).astype(np.float32)
    (got,) = _run(_graph("LRN", *setting), ["out:0"], {"x:0": x}, backend)
    np.testing.assert_allclose(got, _lrn(x, r, bias, alpha, beta), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("setting", SETTINGS, ids=[f"r{s[0]}_c{s[4]}" for s in SETTINGS])
def test_lrn_grad_is_tensorflows_kernel_loop(backend: str, setting: tuple[int, float, float, float, int]) -> None:
    r, bias, alpha, beta, c = setting
    rng = np.random.default_rng(10 + c)
    x = (rng.normal(size=(2, 2, 3, c)) * 2).astype(np.float32)
    dy = rng.normal(size=x.shape).astype(np.float32)
    y = _lrn(x, r, bias, alpha, beta).astype(np.float32)
    (got,) = _run(_graph("LRNGrad", *setting), ["out:0"], {"dy:0": dy, "x:0": x, "y:0": y}, backend)
    np.testing.assert_allclose(got, _lrn_grad(dy, x, y, r, bias, alpha, beta), rtol=2e-5, atol=1e-6)


def test_the_gradient_of_an_imported_lrn_is_its_lrn_grad() -> None:
    """``tn.gradients`` of the imported forward formula and the imported ``LRNGrad`` agree: a model
    imported without its training graph trains as one imported with it."""
    setting = SETTINGS[1]
    r, bias, alpha, beta, c = setting
    imp = import_graph_def(_graph("LRN", *setting).gd)
    x = np.random.default_rng(3).normal(size=(2, 2, 3, c)).astype(np.float32)
    dy = np.random.default_rng(4).normal(size=x.shape).astype(np.float32)
    with imp.graph.as_default():
        (dx,) = tn.gradients(imp.tensor("out:0"), [imp.tensor("x:0")], grad_ys=[tn.constant(dy)])
    got = tn.Session(imp.graph).run(dx, {imp.tensor("x:0"): x})
    np.testing.assert_allclose(got, _lrn_grad(dy, x, _lrn(x, r, bias, alpha, beta), r, bias, alpha, beta),
                               rtol=2e-5, atol=1e-6)


def test_an_lrn_whose_channel_count_is_unknown_at_import_is_refused_naming_it() -> None:
    g = GraphDef()
    g.node("out", "LRN", (g.placeholder("x", F32, [-1, 2, 3, -1]),), depth_radius=2, T=F32)
    with pytest.raises(UnsupportedError, match=r"out.*channel count is known at import"):
        import_graph_def(g.gd)


def test_a_negative_depth_radius_is_refused_naming_the_node() -> None:
    """TensorFlow's kernel refuses a ``depth_radius`` outside ``[0, 2**31)``; a negative one would make
    an empty window here, and a normalisation by ``bias`` alone."""
    g = GraphDef()
    g.node("out", "LRN", (g.placeholder("x", F32, [-1, 2, 3, 4]),), depth_radius=-1, T=F32)
    with pytest.raises(tn.GraphBuildError, match=r'LRN node "out": depth_radius -1 is not in'):
        import_graph_def(g.gd)
