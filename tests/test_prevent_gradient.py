"""``PreventGradient``: a value that passes, and a gradient through it that is refused.

TensorFlow writes it where an op's author knows a gradient would be wrong: TensorFlow 1's gradient of
``SparseSoftmaxCrossEntropyWithLogits`` and the gradient of ``CTCLoss`` wrap the backprop they save in
one, so the training graphs of TF1 models hold it and a second derivative of their loss is refused.
The laws: the value is its input on every route; ``tn.gradients`` along a path through it is a
``GradientError`` naming the node, the user's line and the message, and along any other path is what
it would be without it; ``to_jax`` under ``jax.grad`` refuses the same; it imports, exports and saves
with its message.
"""

from __future__ import annotations

import numpy as np
import pytest
from route_table import ROUTES, run_on

import turnout as tn
from turnout import serialize
from turnout.errors import GradientError

X = np.asarray([1.0, -2.0, 3.0], np.float32)
W = np.asarray([0.5, 4.0, -1.0], np.float32)


def _guarded() -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor, tn.Tensor]:
    """``loss = sum(prevent_gradient(x * x) * w)``, so d loss / d w goes around the guard and
    d loss / d x through it."""
    with tn.Graph().as_default() as g:
        x = tn.placeholder(tn.float32, [3], name="x")
        w = tn.placeholder(tn.float32, [3], name="w")
        guarded = tn.prevent_gradient(x * x, message="no second derivative of the fused loss", name="guard")
        loss = tn.reduce_sum(guarded * w)
    return g, x, w, guarded, loss


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_value_passes_on_every_route(route: str) -> None:
    g, x, w, guarded, loss = _guarded()
    got_guarded, got_loss = run_on(route, g, [guarded, loss], {x: X, w: W})
    np.testing.assert_array_equal(got_guarded, X * X)
    np.testing.assert_allclose(got_loss, np.sum(X * X * W), rtol=1e-6)


def test_a_gradient_through_it_is_refused_naming_the_node_the_line_and_the_message() -> None:
    g, x, w, guarded, loss = _guarded()
    with g.as_default(), pytest.raises(GradientError) as e:
        tn.gradients(loss, [x])
    text = str(e.value)
    assert 'PreventGradient node "guard"' in text and "test_prevent_gradient.py" in text
    assert text.endswith("its gradient is explicitly disabled: no second derivative of the fused loss")


@pytest.mark.parametrize("route", ["reference", "fast"])
def test_a_gradient_that_goes_around_it_is_built_as_without_it(route: str) -> None:
    """TensorFlow refuses only a gradient whose path passes the op: d loss / d w reads the guarded
    value but does not differentiate it."""
    g, x, w, guarded, loss = _guarded()
    with g.as_default():
        (dw,) = tn.gradients(loss, [w])
    np.testing.assert_array_equal(run_on(route, g, dw, {x: X, w: W}), X * X)


def test_a_gradient_through_a_loop_that_holds_it_is_refused() -> None:
    """The guard inside a ``while_loop`` body: the backward loop would differentiate it at every
    iteration, so building the gradient is refused as outside a loop."""
    with tn.Graph().as_default():
        x = tn.placeholder(tn.float32, [3], name="x")
        _, y = tn.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tn.prevent_gradient(v * 2.0, "in a loop")),
                             [tn.constant(0), x])
        with pytest.raises(GradientError, match="explicitly disabled: in a loop"):
            tn.gradients(tn.reduce_sum(y), [x])


def test_a_jax_derivative_of_the_compiled_graph_is_refused_where_tn_gradients_is() -> None:
    jax = pytest.importorskip("jax")
    from turnout.fast.api import to_jax

    g, x, w, _, loss = _guarded()
    f = to_jax(g, [x, w], loss)
    np.testing.assert_array_equal(np.asarray(jax.grad(f, 1)(X, W)), X * X)
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.grad(f, 1))(X, W)), X * X)
    with pytest.raises(GradientError, match='PreventGradient node "guard".*explicitly disabled: no second'):
        jax.grad(f, 0)(X, W)


def test_it_saves_and_loads_with_its_message() -> None:
    g, *_ = _guarded()
    back = serialize.loads(serialize.dumps(g))
    assert back.node("guard").attrs["message"] == "no second derivative of the fused loss"


def test_a_message_that_is_no_string_is_an_argument_error() -> None:
    with tn.Graph().as_default(), pytest.raises(tn.ArgumentError, match="prevent_gradient: message"):
        tn.prevent_gradient(tn.constant(1.0), message=3)  # type: ignore[arg-type]


# ---- TensorFlow's GraphDef ---------------------------------------------------------------------------
def _tf1_sparse_xent_backprop() -> object:
    """The part of a TensorFlow 1 training graph that holds the op: the saved backprop of a sparse
    softmax cross entropy, guarded, times the incoming gradient (TensorFlow 1's ``_BroadcastMul``)."""
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")
    from test_graphdef_model_ops import F32, GraphDef

    g = GraphDef()
    backprop = g.placeholder("backprop", F32, [2, 3])
    guard = g.node("guard", "PreventGradient", (backprop,), T=F32,
                   message="Currently there is no way to take the second derivative of "
                           "sparse_softmax_cross_entropy_with_logits")
    g.node("grad", "Mul", (guard, g.placeholder("dloss", F32, [2, 1])), T=F32)
    return g


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_an_imported_one_passes_its_value_and_refuses_a_gradient(backend: str) -> None:
    from turnout.graphdef import import_graph_def

    imp = import_graph_def(_tf1_sparse_xent_backprop().gd)  # type: ignore[attr-defined]
    b = np.arange(6, dtype=np.float32).reshape(2, 3)
    d = np.asarray([[2.0], [-1.0]], np.float32)
    (got,) = imp.run(tn.Session(imp.graph, backend=backend), ["grad:0"], {"backprop:0": b, "dloss:0": d})
    np.testing.assert_array_equal(got, b * d)
    with imp.graph.as_default(), pytest.raises(GradientError, match="no way to take the second derivative"):
        tn.gradients(tn.reduce_sum(imp.tensor("grad:0")), [imp.tensor("backprop:0")])


def test_it_exports_as_tensorflows_op_with_its_message() -> None:
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")
    from turnout.graphdef import export_graph_def, import_graph_def

    g, *_ = _guarded()
    gd = export_graph_def(g).graph_def
    (nd,) = [n for n in gd.node if n.op == "PreventGradient"]
    assert nd.attr["message"].s.decode() == "no second derivative of the fused loss"
    back = import_graph_def(gd).graph
    assert [n.attrs["message"] for n in back.nodes if n.op == "PreventGradient"] == [
        "no second derivative of the fused loss"]
