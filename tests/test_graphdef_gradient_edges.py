"""Gradients of imported activations and of TensorFlow's gradient ops at the edges of their domains.

An imported graph's gradient is TensorFlow's, whether it comes from TensorFlow's own gradient ops in
the GraphDef (``SqrtGrad``, ``RsqrtGrad``, ``ReciprocalGrad``: 0 wherever the incoming gradient is 0,
whatever the forward output) or from ``tn.gradients`` of an imported activation built as a formula
(``Relu6``: none at 0 and 6; ``Elu``, ``Selu``, ``Softplus``: no NaN where the side of the formula
not taken overflows). Hand-written GraphDefs against the values TensorFlow's kernels give
(``import_math``). Needs the ``tf`` extra, not TensorFlow."""

from __future__ import annotations

import math

import numpy as np
import pytest

import turnout as tn

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from test_graphdef_model_ops import BACKENDS, F32, GraphDef, _run  # noqa: E402

from turnout.graphdef import import_graph_def  # noqa: E402

NAN, INF = float("nan"), float("inf")


def _value_and_gradient(op: str, x: np.ndarray, backend: str) -> tuple[np.ndarray, np.ndarray]:
    """The imported ``op`` of ``x`` and ``tn.gradients`` of its sum."""
    g = GraphDef()
    g.node("y", op, (g.placeholder("x", F32, [len(x)]),), T=F32)
    imp = import_graph_def(g.gd)
    with imp.graph.as_default():
        (dx,) = tn.gradients(tn.reduce_sum(imp.tensor("y:0")), [imp.tensor("x:0")])
    y, d = tn.Session(imp.graph, backend=backend).run([imp.tensor("y:0"), dx], {imp.tensor("x:0"): x})
    return y, d


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_gradient_of_an_imported_relu6_is_none_at_its_bounds(backend: str) -> None:
    """TensorFlow's ``Relu6Grad``: the gradient passes where ``0 < x < 6`` only, so at 0 and at 6
    (a ReLU6 fed a zero-padded input meets 0 often) it is 0; the values are ``min(6, max(0, x))``."""
    x = np.asarray([-1.0, -0.0, 0.0, 3.0, 6.0, 7.0], np.float32)
    y, d = _value_and_gradient("Relu6", x, backend)
    np.testing.assert_array_equal(y, np.minimum(6.0, np.maximum(0.0, x)))
    np.testing.assert_array_equal(d, [0.0, 0.0, 0.0, 1.0, 0.0, 0.0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["Elu", "Selu", "Softplus"])
def test_an_imported_activation_has_a_finite_gradient_where_its_other_side_overflows(op: str, backend: str) -> None:
    """At x = 100 or an infinity, ``exp(x)`` overflows; the formula's side that reads it is not
    taken there, and its zero gradient must not meet the infinity (``0 * inf`` is NaN): the
    gradient is the taken side's, 1 (SELU: its scale), as TensorFlow's kernels give."""
    scale, scale_alpha = 1.0507009873554805, 1.7580993408473769
    x = np.asarray([-1.0, 0.5, 100.0, INF], np.float32)
    y, d = _value_and_gradient(op, x, backend)
    if op == "Softplus":
        want_y = [math.log1p(math.exp(-1.0)), math.log1p(math.exp(0.5)), 100.0, INF]
        want_d = [1 / (1 + math.exp(1.0)), 1 / (1 + math.exp(-0.5)), 1.0, 1.0]
    else:
        k, ka = (scale, scale_alpha) if op == "Selu" else (1.0, 1.0)
        want_y = [ka * math.expm1(-1.0), k * 0.5, k * 100.0, INF]
        want_d = [ka * math.exp(-1.0), k, k, k]
    np.testing.assert_allclose(y, want_y, rtol=1e-6)
    np.testing.assert_allclose(d, want_d, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["SqrtGrad", "RsqrtGrad", "ReciprocalGrad"])
def test_tensorflows_gradient_ops_give_zero_where_the_incoming_gradient_is_zero(op: str, backend: str) -> None:
    """``SqrtGrad(y, dy)`` and its kin, from the forward output ``y``: 0 wherever ``dy`` is 0, even
    where ``y`` is NaN (the square root of a negative number on a branch ``tf.where`` did not take)
    or 0 or an infinity; else TensorFlow's formula."""
    y = np.asarray([NAN, 0.0, INF, 2.0], np.float32)
    dy = np.asarray([0.0, 0.0, 0.0, 1.0], np.float32)
    g = GraphDef()
    g.node("d", op, (g.placeholder("y", F32, [4]), g.placeholder("dy", F32, [4])), T=F32)
    (got,) = _run(g, ["d:0"], {"y:0": y, "dy:0": dy}, backend)
    last = {"SqrtGrad": 0.5 * 1.0 / 2.0, "RsqrtGrad": -0.5 * 1.0 * 2.0 ** 3, "ReciprocalGrad": -1.0 * 2.0 ** 2}[op]
    np.testing.assert_array_equal(got, [0.0, 0.0, 0.0, last])
