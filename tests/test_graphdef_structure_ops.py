"""Import rules of TensorFlow's structure ops (turnout.graphdef.import_structure) on the paths the
TensorFlow fixtures (``attention_block``, ``one_hot_cumsum_pad``) do not take: run-time dimensions,
failing run-time checks with TensorFlow's messages, and the refusals that name the op and its
argument; plus Turnout's MatMul of batches, which BatchMatMulV2 imports to, differentiated and
exported, and its Cumsum, which Cumsum imports to, on int32 and on an empty axis. Hand-written
GraphDefs against numpy closed forms, on both backends. Needs the ``tf`` extra, not TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

import turnout as tn
from turnout.errors import KernelError, UnsupportedError

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from test_graphdef_model_ops import BACKENDS, F32, I32, GraphDef, _run  # noqa: E402

from turnout.graphdef import export_graph_def, import_graph_def  # noqa: E402

X = np.arange(12, dtype=np.float32).reshape(3, 4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_of_a_run_time_batch_with_a_fed_value(backend: str) -> None:
    g = GraphDef()
    x = g.placeholder("x", F32, [-1, 4])
    g.node("p", "Pad", (x, g.const("pads", np.asarray([[1, 2], [0, 1]], np.int32))), T=F32, Tpaddings=I32)
    g.node("p2", "PadV2", (x, g.const("pads2", np.asarray([[0, 0], [2, 0]], np.int32)), g.placeholder("v", F32, [])),
           T=F32, Tpaddings=I32)
    p, p2 = _run(g, ["p:0", "p2:0"], {"x:0": X, "v:0": np.float32(-1.0)}, backend)
    np.testing.assert_array_equal(p, np.pad(X, [[1, 2], [0, 1]]))
    np.testing.assert_array_equal(p2, np.pad(X, [[0, 0], [2, 0]], constant_values=-1.0))


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_hot_along_axis_0_unpack_and_squeeze(backend: str) -> None:
    g = GraphDef()
    idx = g.const("idx", np.asarray([[0, 2], [5, -1]], np.int32))
    g.node("h", "OneHot", (idx, g.const("depth", np.asarray(3, np.int32)), g.const("on", np.float32(1.0)),
                           g.const("off", np.float32(0.0))), T=F32, TI=I32, axis=0)
    g.node("u", "Unpack", (g.const("x", X),), T=F32, num=4, axis=-1)
    g.node("s", "Squeeze", (g.const("col", X[:, :1]),), T=F32)
    h, u0, u3, s = _run(g, ["h:0", "u:0", "u:3", "s:0"], {}, backend)
    want = (np.asarray([[0, 2], [5, -1]])[None] == np.arange(3)[:, None, None]).astype(np.float32)
    np.testing.assert_array_equal(h, want)  # 5 and -1 are out of range: rows of off
    np.testing.assert_array_equal(u0, X[:, 0])
    np.testing.assert_array_equal(u3, X[:, 3])
    np.testing.assert_array_equal(s, X[:, 0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_time_checks_fail_with_tensorflows_messages(backend: str) -> None:
    g = GraphDef()
    x = g.placeholder("x", F32, [-1, -1])
    g.node("e", "EnsureShape", (x,), T=F32, shape=[-1, 4])
    g.node("c", "CheckNumerics", ("e",), T=F32, message="bad x")
    g.node("gnd", "GatherNd", ("c", g.placeholder("i", I32, [-1, 2])), Tparams=F32, Tindices=I32)
    (got,) = _run(g, ["gnd:0"], {"x:0": X, "i:0": np.asarray([[2, 3], [0, 1]], np.int32)}, backend)
    np.testing.assert_array_equal(got, [X[2, 3], X[0, 1]])
    with pytest.raises(KernelError, match=r"Shape of tensor x is not compatible with expected shape \[\?,4\]"):
        _run(g, ["c:0"], {"x:0": X[:, :3]}, backend)
    bad = X.copy()
    bad[0, 0], bad[1, 1] = np.inf, np.nan
    with pytest.raises(KernelError, match="bad x : Tensor had Inf and NaN values"):
        _run(g, ["c:0"], {"x:0": bad}, backend)
    bad[1, 1] = 0.0
    with pytest.raises(KernelError, match="bad x : Tensor had Inf values"):
        _run(g, ["c:0"], {"x:0": bad}, backend)
    with pytest.raises(KernelError, match=r"indices do not index into param shape \[\?,4\]"):
        _run(g, ["gnd:0"], {"x:0": X, "i:0": np.asarray([[0, 4]], np.int32)}, backend)  # in range if linear


@pytest.mark.parametrize("backend", BACKENDS)
def test_placeholder_with_default_runs_the_default_or_the_feed(backend: str) -> None:
    g = GraphDef()
    g.node("p", "PlaceholderWithDefault", (g.const("d", np.float32(1.5)),), dtype=F32, shape=[])
    g.node("y", "Mul", ("p", g.const("two", np.float32(2.0))), T=F32)
    g.node("n", "IdentityN", ("y", "p"), T=F32)
    imp = import_graph_def(g.gd)
    sess = tn.Session(imp.graph, backend=backend)
    assert imp.run(sess, ["n:0", "n:1"], {}) == [3.0, 1.5]
    assert imp.run(sess, ["n:0"], {"p:0": np.float32(4.0)}) == [8.0]


def test_refusals_name_the_op_and_what_it_cannot_honour() -> None:
    cases = [
        ("Squeeze", {"squeeze_dims": [1]}, "squeeze_dims axis 1 must have size 1"),
        ("PlaceholderWithDefault", {"dtype": F32, "shape": [-1, 4]}, "less specific than its default's"),
        ("BatchMatMulV3", {"Ta": F32, "Tb": F32, "Tout": I32, "adj_x": True}, "Tout int32 differs"),
        ("GatherNd", {"Tparams": F32, "Tindices": I32, "bad_indices_policy": "IGNORE"}, "bad_indices_policy"),
    ]
    for op, attrs, msg in cases:
        g = GraphDef()
        x = g.const("x", X)
        ins = (x,) if op in ("Squeeze", "PlaceholderWithDefault") else (x, g.const("y", np.ones((4, 2), np.int32)
                                                                                   if op == "GatherNd" else X))
        g.node("op", op, ins, **({"T": F32} if op != "GatherNd" else {}), **attrs)
        with pytest.raises(UnsupportedError, match=f'{op} node "op": .*{msg}'):
            import_graph_def(g.gd)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batched_matmul_broadcasts_differentiates_and_exports(backend: str) -> None:
    """A batch of matrices times one matrix (what ``tf.matmul`` of a rank-3 input and a weight
    emits): the weight's gradient sums over the batch; exported, the product is a BatchMatMulV2."""
    rng = np.random.default_rng(3)
    av, wv = rng.normal(size=(2, 3, 4)).astype(np.float32), rng.normal(size=(2, 4)).astype(np.float32)
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.float32, [2, 3, 4], name="a")
        w = tn.placeholder(tn.float32, [2, 4], name="w")
        z = tn.matmul(a, w, transpose_b=True)
        loss = tn.reduce_sum(z * z)
        ga, gw = tn.gradients(loss, [a, w])
    assert z.shape == (2, 3, 2)
    got = tn.Session(g, backend=backend).run([z, ga, gw], {a: av, w: wv})
    zz = av @ wv.T
    np.testing.assert_allclose(got[0], zz, rtol=1e-5)
    np.testing.assert_allclose(got[1], 2 * zz @ wv, rtol=1e-5)
    np.testing.assert_allclose(got[2], np.einsum("bmn,bmk->nk", 2 * zz, av), rtol=1e-5, atol=1e-5)
    ex = export_graph_def(g)
    assert "BatchMatMulV2" in {nd.op for nd in ex.graph_def.node}
    imp = import_graph_def(ex.graph_def)
    (back,) = imp.run(tn.Session(imp.graph, backend=backend), [ex.tf_name(z)], {ex.tf_name(a): av, ex.tf_name(w): wv})
    np.testing.assert_allclose(back, zz, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_nd_adds_repeated_indices_and_refuses_one_out_of_range(backend: str) -> None:
    g = GraphDef()
    idx = g.placeholder("i", I32, [-1, 2])
    upd = g.const("u", np.asarray([1.0, 2.0, 4.0], np.float32))
    g.node("s", "ScatterNd", (idx, upd, g.const("shape", np.asarray([2, 3], np.int32))), T=F32, Tindices=I32)
    (got,) = _run(g, ["s:0"], {"i:0": np.asarray([[1, 2], [0, 0], [1, 2]], np.int32)}, backend)
    np.testing.assert_array_equal(got, [[2.0, 0.0, 0.0], [0.0, 0.0, 5.0]])
    with pytest.raises(KernelError, match=r"indices do not index into output shape \[2,3\]"):
        _run(g, ["s:0"], {"i:0": np.asarray([[0, 3], [0, 0], [0, 0]], np.int32)}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cumsum_of_int32_and_of_an_empty_axis(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.int32, [None, 3], name="x")
        cases = [(a, e, r) for a in (0, 1) for e in (False, True) for r in (False, True)]
        ys = [tn.cumsum(x, axis=a, exclusive=e, reverse=r) for a, e, r in cases]
    xv = np.asarray([[1, 2, 3], [4, 5, 6]], np.int32)

    def want(v: np.ndarray, a: int, e: bool, r: bool) -> np.ndarray:
        w = np.flip(v, a) if r else v
        s = np.cumsum(w, axis=a) - (w if e else 0)
        return np.flip(s, a) if r else s

    for v in (xv, np.zeros((0, 3), np.int32)):
        got = tn.Session(g, backend=backend).run(ys, {x: v})
        for out, (a, e, r) in zip(got, cases):
            assert out.dtype == np.int32
            np.testing.assert_array_equal(out, want(v, a, e, r), err_msg=f"axis {a} exclusive {e} reverse {r}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_matmul_v1_and_v3_multiply_batches(backend: str) -> None:
    """TF1's ``BatchMatMul`` (equal batch dimensions) and ``BatchMatMulV3`` whose ``Ta`` / ``Tb`` /
    ``Tout`` name the operands' dtype, with ``adj_x`` / ``adj_y`` transposing the last two axes."""
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(2, 4, 3)).astype(np.float32), rng.normal(size=(2, 5, 4)).astype(np.float32)
    g = GraphDef()
    g.node("v1", "BatchMatMul", (g.const("a", a), g.const("b", b)), T=F32, adj_x=True, adj_y=True)
    g.node("v3", "BatchMatMulV3", ("b", "a"), Ta=F32, Tb=F32, Tout=F32)
    v1, v3 = _run(g, ["v1:0", "v3:0"], {}, backend)
    np.testing.assert_allclose(v1, np.swapaxes(a, 1, 2) @ np.swapaxes(b, 1, 2), rtol=1e-5)
    np.testing.assert_allclose(v3, b @ a, rtol=1e-5)
