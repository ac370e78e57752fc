"""Import rules of TF1 model ops on paths the TensorFlow fixtures do not take (SplitV with a -1 size,
Slice with run-time bounds, NCHW BiasAdd, TF1's row Select, ReverseSequence, TopKV2, Unique, Einsum, the sparse
softmax loss's label check), on hand-written GraphDefs, against numpy closed forms on both backends.
Needs the ``tf`` extra, not TensorFlow."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.errors import KernelError

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from turnout.graphdef import import_graph_def, protos  # noqa: E402

F32, I32, BOOL = 1, 3, 10
BACKENDS = ["reference", "fast"]


class GraphDef:
    """A GraphDef written by hand: ``node(name, op, inputs, **attrs)`` with ints, floats, int lists,
    type enums (``T=F32``), shapes and numpy constants (``value=...``)."""

    def __init__(self) -> None:
        self.gd = protos.pb().graph_pb2.GraphDef()

    def node(self, name: str, op: str, inputs: tuple[str, ...] = (), **attrs: Any) -> str:
        nd = self.gd.node.add()
        nd.name, nd.op = name, op
        nd.input.extend(inputs)
        for k, v in attrs.items():
            a = nd.attr[k]
            if k == "value":
                protos.numpy_to_tensor(np.asarray(v), a.tensor)
            elif k in ("T", "dtype", "Tidx", "Tlen", "output_type", "Tindices", "Tlabels", "Index"):
                a.type = v
            elif k == "shape":
                for d in v:
                    a.shape.dim.add().size = d
            elif isinstance(v, bool):
                a.b = v
            elif isinstance(v, int):
                a.i = v
            elif isinstance(v, float):
                a.f = v
            elif isinstance(v, list):
                a.list.i.extend(v)
            else:
                a.s = str(v).encode()
        return name

    def const(self, name: str, value: Any) -> str:
        arr = np.asarray(value)
        enum = {np.dtype(np.float32): F32, np.dtype(np.int32): I32, np.dtype(np.bool_): BOOL}[arr.dtype]
        return self.node(name, "Const", value=arr, dtype=enum)

    def placeholder(self, name: str, dtype: int, shape: list[int]) -> str:
        return self.node(name, "Placeholder", dtype=dtype, shape=shape)


def _run(g: GraphDef, fetches: list[str], feeds: dict[str, Any], backend: str) -> list[Any]:
    imp = import_graph_def(g.gd)
    return imp.run(tn.Session(imp.graph, backend=backend), fetches, feeds)


X = np.arange(10, dtype=np.float32).reshape(2, 5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_split_v_with_a_rest_size(backend: str) -> None:
    g = GraphDef()
    g.node("s", "SplitV", (g.const("x", X), g.const("sizes", np.asarray([2, -1], np.int32)),
                           g.const("axis", np.asarray(1, np.int32))), T=F32, num_split=2)
    a, b = _run(g, ["s:0", "s:1"], {}, backend)
    np.testing.assert_array_equal(a, X[:, :2])
    np.testing.assert_array_equal(b, X[:, 2:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_slice_with_run_time_begin_and_size(backend: str) -> None:
    """Begin and size fed at run time; a size of -1 takes the rest of its axis."""
    g = GraphDef()
    g.node("y", "Slice", (g.const("x", X), g.placeholder("begin", I32, [2]), g.placeholder("size", I32, [2])),
           T=F32, Index=I32)
    cases = [([0, 1], [2, 3], X[0:2, 1:4]), ([1, 2], [-1, -1], X[1:, 2:]), ([0, 4], [1, -1], X[:1, 4:])]
    for begin, size, want in cases:
        (got,) = _run(g, ["y:0"], {"begin:0": np.asarray(begin, np.int32), "size:0": np.asarray(size, np.int32)},
                      backend)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bias_add_nchw(backend: str) -> None:
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    g = GraphDef()
    g.node("y", "BiasAdd", (g.const("x", x), g.const("b", np.asarray([10.0, 20.0], np.float32))), T=F32,
           data_format="NCHW")
    g.node("gb", "BiasAddGrad", ("y",), T=F32, data_format="NCHW")
    y, gb = _run(g, ["y:0", "gb:0"], {}, backend)
    np.testing.assert_array_equal(y, x + np.asarray([10.0, 20.0], np.float32)[:, None])
    np.testing.assert_array_equal(gb, y.sum(axis=(0, 2)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_tf1_select_picks_rows_and_select_v2_broadcasts(backend: str) -> None:
    g = GraphDef()
    c = g.placeholder("c", BOOL, [2])
    x, y = g.const("x", X), g.const("y", -X)
    g.node("rows", "Select", (c, x, y), T=F32)
    g.node("cols", "SelectV2", (g.const("c5", np.asarray([True, False, True, False, False])), x, y), T=F32)
    rows, cols = _run(g, ["rows:0", "cols:0"], {"c:0": np.asarray([False, True])}, backend)
    np.testing.assert_array_equal(rows, np.stack([-X[0], X[1]]))
    np.testing.assert_array_equal(cols, np.where([True, False, True, False, False], X, -X))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reverse_sequence_top_k_and_arg_max(backend: str) -> None:
    x = np.asarray([[3.0, 1.0, 3.0, 2.0], [0.5, 4.0, -1.0, 4.0]], np.float32)
    g = GraphDef()
    seqs = np.arange(8, dtype=np.float32).reshape(2, 4)
    g.node("r", "ReverseSequence", (g.const("seqs", seqs), g.const("n", np.asarray([3, 1], np.int32))), T=F32,
           Tlen=I32, seq_dim=1, batch_dim=0)
    g.node("top", "TopKV2", (g.const("x", x), g.const("k", np.asarray(2, np.int32))), T=F32, sorted=True)
    g.node("am", "ArgMax", ("x", g.const("ax", np.asarray(1, np.int32))), T=F32, Tidx=I32, output_type=I32)
    r, values, idx, am = _run(g, ["r:0", "top:0", "top:1", "am:0"], {}, backend)
    np.testing.assert_array_equal(r, [[2.0, 1.0, 0.0, 3.0], [4.0, 5.0, 6.0, 7.0]])
    np.testing.assert_array_equal(values, [[3.0, 3.0], [4.0, 4.0]])
    np.testing.assert_array_equal(idx, [[0, 2], [1, 3]])  # among equal values, the lower index first
    np.testing.assert_array_equal(am, [0, 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_softmax_loss_refuses_a_label_out_of_range(backend: str) -> None:
    logits = np.asarray([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]], np.float32)
    g = GraphDef()
    labels = g.placeholder("labels", I32, [2])
    g.node("xent", "SparseSoftmaxCrossEntropyWithLogits", (g.const("logits", logits), labels), T=F32, Tlabels=I32)
    loss, backprop = _run(g, ["xent:0", "xent:1"], {"labels:0": np.asarray([1, 2], np.int32)}, backend)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(loss, -np.log(p[[0, 1], [1, 2]]), rtol=1e-6)
    np.testing.assert_allclose(backprop, p - np.eye(3)[[1, 2]], rtol=1e-6, atol=1e-7)
    with pytest.raises(KernelError, match="outside the valid range"):
        _run(g, ["xent:0"], {"labels:0": np.asarray([1, 3], np.int32)}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unique_keeps_first_appearances_in_order(backend: str) -> None:
    """``y`` the distinct ids in order of first appearance (a length known only when it runs),
    ``x == y[idx]``, as the optimizers' deduplication of IndexedSlices reads them."""
    g = GraphDef()
    g.node("u", "Unique", (g.placeholder("x", I32, [-1]),), T=I32)
    for x in ([5, 3, 5, 0, 3, 3, 7], [2], [4, 4, 4]):
        y, idx = _run(g, ["u:0", "u:1"], {"x:0": np.asarray(x, np.int32)}, backend)
        want = list(dict.fromkeys(x))
        np.testing.assert_array_equal(y, want)
        np.testing.assert_array_equal(idx, [want.index(v) for v in x])


@pytest.mark.parametrize("backend", BACKENDS)
def test_unique_with_counts_counts_each_distinct_value(backend: str) -> None:
    """``tf.unique_with_counts``: ``Unique``'s outputs and how often each distinct value appears."""
    g = GraphDef()
    g.node("u", "UniqueWithCounts", (g.placeholder("x", I32, [-1]),), T=I32)
    for x in ([5, 3, 5, 0, 3, 3, 7], [4, 4]):
        y, idx, count = _run(g, ["u:0", "u:1", "u:2"], {"x:0": np.asarray(x, np.int32)}, backend)
        want = list(dict.fromkeys(x))
        np.testing.assert_array_equal(y, want)
        np.testing.assert_array_equal(idx, [want.index(v) for v in x])
        np.testing.assert_array_equal(count, [x.count(v) for v in want])


@pytest.mark.parametrize("backend", BACKENDS)
def test_where_gives_the_coordinates_of_the_true_elements_in_row_major_order(backend: str) -> None:
    """TensorFlow's one-argument ``Where``: an int64 row of coordinates per true (or non-zero)
    element, in row-major order, as many as there are (none at all included), ``np.argwhere``; and
    ``tf.boolean_mask``'s use of it: the rows squeezed and gathered."""
    g = GraphDef()
    g.node("w", "Where", (g.placeholder("m", BOOL, [3, 4]),), T=BOOL)
    g.node("wf", "Where", (g.placeholder("f", F32, [2, 2, 3]),), T=F32)
    g.node("idx", "Where", (g.placeholder("keep", BOOL, [5]),), T=BOOL)
    g.node("flat_idx", "Squeeze", ("idx",), T=9, squeeze_dims=[1])
    g.node("masked", "GatherV2", (g.placeholder("v", F32, [5]), "flat_idx", g.const("axis", np.int32(0))),
           Tparams=F32, Tindices=9, Taxis=I32)
    rng = np.random.default_rng(5)
    for p in (0.5, 0.0, 1.0):
        m = rng.uniform(size=(3, 4)) < p
        f = np.where(rng.uniform(size=(2, 2, 3)) < p, rng.normal(size=(2, 2, 3)), 0.0).astype(np.float32)
        keep = rng.uniform(size=5) < p
        v = rng.normal(size=5).astype(np.float32)
        w, wf, masked = _run(g, ["w:0", "wf:0", "masked:0"], {"m:0": m, "f:0": f, "keep:0": keep, "v:0": v}, backend)
        assert w.dtype == np.int64 and w.shape == (int(m.sum()), 2)
        np.testing.assert_array_equal(w, np.argwhere(m))
        np.testing.assert_array_equal(wf, np.argwhere(f))
        np.testing.assert_array_equal(masked, v[keep])


@pytest.mark.parametrize("backend", BACKENDS)
def test_einsum_equations(backend: str) -> None:
    """Contractions, a batch label kept, an outer product, a transpose and a sum of one operand."""
    rng = np.random.default_rng(3)
    a = rng.normal(size=(2, 3, 4)).astype(np.float32)
    b = rng.normal(size=(4, 5)).astype(np.float32)
    c = rng.normal(size=(2, 3, 5)).astype(np.float32)
    g = GraphDef()
    xa, xb, xc = g.const("a", a), g.const("b", b), g.const("c", c)
    cases = {"e1": ("tbh,hv->tbv", (xa, xb)), "e2": ("tbv,tbh->hv", (xc, xa)), "e3": ("tbh,tbv->bhv", (xa, xc)),
             "e4": ("hv,tbh->vbt", (xb, xa)), "e5": ("tbh->hb", (xa,)), "e6": ("ij,kl->ijkl", (xb, xb))}
    for name, (eq, ins) in cases.items():
        g.node(name, "Einsum", ins, T=F32, N=len(ins), equation=eq)
    got = _run(g, [f"{n}:0" for n in cases], {}, backend)
    vals = {"a": a, "b": b, "c": c}
    for (eq, ins), out in zip(cases.values(), got):
        want = np.einsum(eq, *(vals[i] for i in ins))
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=eq)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pack_along_an_inner_axis_needs_no_rank(backend: str) -> None:
    """``tf.stack`` along axis 1 or -1 of inputs of unknown rank (a Placeholder without a shape) is
    ``np.stack``: imported as ``tn.stack`` builds it (it was refused: "packing along axis 1 needs the
    inputs' rank")."""
    g = GraphDef()
    p = g.node("p", "Placeholder", dtype=F32)
    q = g.node("q", "Mul", (p, g.const("two", np.float32(2))), T=F32)
    g.node("inner", "Pack", (p, q), T=F32, N=2, axis=1)
    g.node("last", "Pack", (p, q), T=F32, N=2, axis=-1)
    inner, last = _run(g, ["inner:0", "last:0"], {"p:0": X}, backend)
    np.testing.assert_array_equal(inner, np.stack([X, 2 * X], axis=1))
    np.testing.assert_array_equal(last, np.stack([X, 2 * X], axis=-1))


def _cond_on(g: GraphDef, pred: str) -> str:
    """tf.cond(pred, lambda: x * 2, lambda: x + 1) as TensorFlow 1 writes it: the predicate switched
    on itself for the pivots, every other input switched on its ``pred_id`` Identity."""
    x = g.const("x", np.float32(5))
    g.node("cond/Switch", "Switch", (pred, pred), T=BOOL)
    g.node("cond/switch_t", "Identity", ("cond/Switch:1",), T=BOOL)
    g.node("cond/switch_f", "Identity", ("cond/Switch",), T=BOOL)
    pred_id = g.node("cond/pred_id", "Identity", (pred,), T=BOOL)
    g.node("cond/Switch_1", "Switch", (x, pred_id), T=F32)
    g.node("cond/mul", "Mul", ("cond/Switch_1:1", g.node("cond/two", "Const", ("^cond/switch_t",),
                                                           value=np.float32(2), dtype=F32)), T=F32)
    g.node("cond/add", "Add", ("cond/Switch_1", g.node("cond/one", "Const", ("^cond/switch_f",),
                                                         value=np.float32(1), dtype=F32)), T=F32)
    return g.node("cond/Merge", "Merge", ("cond/add", "cond/mul"), T=F32, N=2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fed_identity_in_front_of_a_cond_chooses_its_branch(backend: str) -> None:
    """An ``is_training = tf.identity(tf.constant(True))`` fed False takes the false branch: the
    import reads past tf.cond's own ``pred_id`` only, never past another Identity (it read past every
    Identity to the constant, and took the true branch whatever was fed: a silent wrong answer). A
    feed of ``pred_id`` itself is refused, naming it."""
    g = GraphDef()
    flag = g.node("is_training", "Identity", (g.const("flag", np.bool_(True)),), T=BOOL)
    out = _cond_on(g, flag)
    assert _run(g, [f"{out}:0"], {}, backend) == [10.0]
    assert _run(g, [f"{out}:0"], {"is_training:0": False}, backend) == [6.0]
    imp = import_graph_def(g.gd)
    with pytest.raises(tn.FeedError, match=r"feed 'cond/pred_id:0'.*feed the predicate itself"):
        imp.run(tn.Session(imp.graph, backend=backend), [f"{out}:0"], {"cond/pred_id:0": False})


@pytest.mark.parametrize("backend", BACKENDS)
def test_einsum_contractions_are_batched_matmuls_at_run_time_sizes(backend: str) -> None:
    """Law: a two-operand einsum with a summed label (attention's scores and values, a dense layer of
    a batch, a dot product, a label of one operand summed alone) is ``np.einsum``'s, at batch sizes
    known only when it runs, and ``tn.gradients`` of it is numpy's product rule."""
    rng = np.random.default_rng(5)
    q = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    k = rng.normal(size=(2, 3, 6, 5)).astype(np.float32)
    k2 = rng.normal(size=(2, 6, 4, 5)).astype(np.float32)
    w = rng.normal(size=(5, 7)).astype(np.float32)
    v = rng.normal(size=(5,)).astype(np.float32)
    g = GraphDef()
    xq, xk = g.placeholder("q", F32, [-1, 3, 4, 5]), g.placeholder("k", F32, [-1, 3, -1, 5])
    xk2 = g.placeholder("k2", F32, [-1, -1, 4, 5])
    xw, xv = g.const("w", w), g.const("v", v)
    cases = {"scores": ("bhqd,bhkd->bhqk", (xq, xk)), "mha": ("bqhd,bkhd->bhqk", (xq, xk2)),
             "dense": ("abcd,de->abce", (xq, xw)), "dot": ("i,i->", (xv, xv)), "alone": ("bhqd,d->hq", (xq, xv)),
             "swapped": ("de,bhqd->ebqh", (xw, xq))}
    for name, (eq, ins) in cases.items():
        g.node(name, "Einsum", ins, T=F32, N=len(ins), equation=eq)
    feeds = {"q:0": q, "k:0": k, "k2:0": k2}
    got = _run(g, [f"{n}:0" for n in cases], feeds, backend)
    vals = {"q": q, "k": k, "k2": k2, "w": w, "v": v}
    for (eq, ins), out in zip(cases.values(), got):
        want = np.einsum(eq, *(vals[i] for i in ins))
        assert out.shape == want.shape, eq
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=eq)
    imp = import_graph_def(g.gd)
    with imp.graph.as_default():
        dq, dk = tn.gradients(tn.reduce_sum(imp.tensor("scores:0") ** 2), [imp.tensor("q:0"), imp.tensor("k:0")])
    gq, gk = tn.Session(imp.graph, backend=backend).run([dq, dk], {imp.tensor(n): x for n, x in feeds.items()})
    s = np.einsum("bhqd,bhkd->bhqk", q, k)
    np.testing.assert_allclose(gq, np.einsum("bhqk,bhkd->bhqd", 2 * s, k), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gk, np.einsum("bhqk,bhqd->bhkd", 2 * s, q), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_einsum_with_an_ellipsis_is_numpys(backend: str) -> None:
    """Law: ``...`` stands for the axes an operand's labels leave, right-aligned and broadcast across
    operands (Keras's ``EinsumDense`` writes ``...b,bc->...c``), in contractions and products alike."""
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    w = rng.normal(size=(4, 5)).astype(np.float32)
    y = rng.normal(size=(1, 4, 3)).astype(np.float32)
    g = GraphDef()
    xx, xw, xy = g.placeholder("x", F32, [-1, 3, 4]), g.const("w", w), g.const("y", y)
    cases = {"dense": ("...b,bc->...c", (xx, xw)), "batched": ("...ij,...jk->...ik", (xx, xy)),
             "outer": ("...i,j->...ij", (xx, g.const("v", w[:, 0]))), "one": ("...ij->...ji", (xx,))}
    for name, (eq, ins) in cases.items():
        g.node(name, "Einsum", ins, T=F32, N=len(ins), equation=eq)
    got = _run(g, [f"{n}:0" for n in cases], {"x:0": x}, backend)
    vals = {"x": x, "w": w, "y": y, "v": w[:, 0]}
    for (eq, ins), out in zip(cases.values(), got):
        want = np.einsum(eq, *(vals[i] for i in ins))
        assert out.shape == want.shape, eq
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=eq)
