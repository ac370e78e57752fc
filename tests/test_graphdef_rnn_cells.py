"""TensorFlow's fused recurrent cells, imported: ``LSTMBlockCell`` and ``GRUBlockCell`` against numpy
closed forms of their kernels, and their gradient ops against ``tn.gradients`` of the imported cells
(the law that ties them: a cell's gradient op is the derivative of the cell). The TensorFlow-made
fixture ``block_cells`` (``tests/test_graphdef_import.py``) checks both against TensorFlow's run.
Needs the ``tf`` extra, not TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

import turnout as tn

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from test_graphdef_model_ops import BACKENDS, F32, GraphDef, _run  # noqa: E402

from turnout.graphdef import import_graph_def  # noqa: E402

B, M, N = 3, 2, 4  # batch, input and cell widths
RNG = np.random.default_rng(31)
LSTM_IN = {"x": (B, M), "cs_prev": (B, N), "h_prev": (B, N), "w": (M + N, 4 * N), "wci": (N,), "wcf": (N,),
           "wco": (N,), "b": (4 * N,)}
GRU_IN = {"x": (B, M), "h_prev": (B, N), "w_ru": (M + N, 2 * N), "w_c": (M + N, N), "b_ru": (2 * N,), "b_c": (N,)}
LSTM_OUT = ["i", "cs", "f", "o", "ci", "co", "h"]
GRU_OUT = ["r", "u", "c", "h"]


def _values(spec: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    return {k: RNG.normal(size=s).astype(np.float32) for k, s in spec.items()}


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def _lstm(v: dict[str, np.ndarray], peephole: bool, clip: float) -> list[np.ndarray]:
    icfo = np.concatenate([v["x"], v["h_prev"]], 1) @ v["w"] + v["b"]
    pi, pc, pf, po = (icfo[:, k * N:(k + 1) * N] for k in range(4))
    i = _sigmoid(pi + (v["cs_prev"] * v["wci"] if peephole else 0))
    ci = np.tanh(pc)
    f = _sigmoid(pf + 1.0 + (v["cs_prev"] * v["wcf"] if peephole else 0))
    cs = ci * i + v["cs_prev"] * f
    cs = np.clip(cs, -clip, clip) if clip > 0 else cs
    co = np.tanh(cs)
    o = _sigmoid(po + (cs * v["wco"] if peephole else 0))
    return [i, cs, f, o, ci, co, co * o]


def _cell_graph(op: str, spec: dict[str, tuple[int, ...]], **attrs: object) -> GraphDef:
    g = GraphDef()
    g.node("cell", op, tuple(g.placeholder(k, F32, list(s)) for k, s in spec.items()), T=F32, **attrs)
    return g


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("peephole, clip", [(False, -1.0), (True, 0.5)])
def test_lstm_block_cell_is_its_kernel_s_formula(backend: str, peephole: bool, clip: float) -> None:
    v = _values(LSTM_IN)
    g = _cell_graph("LSTMBlockCell", LSTM_IN, forget_bias=1.0, cell_clip=clip, use_peephole=peephole)
    got = _run(g, [f"cell:{k}" for k in range(7)], {f"{k}:0": a for k, a in v.items()}, backend)
    for name, a, want in zip(LSTM_OUT, got, _lstm(v, peephole, clip), strict=True):
        np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("peephole", [False, True])
def test_lstm_block_cell_grad_is_the_derivative_of_the_cell(peephole: bool) -> None:
    """Without a clip (the kernel's gradient ignores one): the gradient op's ``cs_prev_grad``, the
    peephole weights' gradients and ``dicfo`` summed over the batch equal ``tn.gradients`` of the
    imported cell for ``cs_prev``, ``wci``/``wcf``/``wco`` and ``b``, for the cotangents ``cs_grad``,
    ``h_grad`` of ``cs`` and ``h``."""
    v = _values(LSTM_IN)
    dcs, dh = RNG.normal(size=(B, N)).astype(np.float32), RNG.normal(size=(B, N)).astype(np.float32)
    g = _cell_graph("LSTMBlockCell", LSTM_IN, forget_bias=1.0, cell_clip=-1.0, use_peephole=peephole)
    outs = [f"cell:{k}" for k in range(6)]
    g.node("grad", "LSTMBlockCellGrad", (*[f"{k}:0" for k in LSTM_IN], *outs,
                                          g.const("dcs", dcs), g.const("dh", dh)), T=F32, use_peephole=peephole)
    imp = import_graph_def(g.gd)
    feeds = {imp.tensor(f"{k}:0"): a for k, a in v.items()}
    with imp.graph.as_default():
        wrt = ["cs_prev", "wci", "wcf", "wco", "b"]
        ys = [imp.tensor("cell:1"), imp.tensor("cell:6")]
        mine = tn.gradients(ys, [imp.tensor(f"{k}:0") for k in wrt], grad_ys=[tn.constant(dcs), tn.constant(dh)])
    sess = tn.Session(imp.graph)
    want = [None if t is None else sess.run(t, feeds) for t in mine]  # (no peepholes: None for their weights)
    got = sess.run([imp.tensor(f"grad:{k}") for k in range(5)], feeds)
    dicfo_sum = np.sum(got[1], axis=0)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    for k, name in enumerate(("wci", "wcf", "wco")):
        np.testing.assert_allclose(got[2 + k], want[1 + k] if peephole else np.zeros(N), rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    np.testing.assert_allclose(dicfo_sum, want[4], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gru_block_cell_is_its_kernel_s_formula(backend: str) -> None:
    v = _values(GRU_IN)
    got = _run(_cell_graph("GRUBlockCell", GRU_IN), [f"cell:{k}" for k in range(4)],
               {f"{k}:0": a for k, a in v.items()}, backend)
    ru = _sigmoid(np.concatenate([v["x"], v["h_prev"]], 1) @ v["w_ru"] + v["b_ru"])
    r, u = ru[:, :N], ru[:, N:]
    c = np.tanh(np.concatenate([v["x"], v["h_prev"] * r], 1) @ v["w_c"] + v["b_c"])
    for name, a, want in zip(GRU_OUT, got, [r, u, c, u * v["h_prev"] + (1 - u) * c], strict=True):
        np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_gru_block_cell_grad_is_the_derivative_of_the_cell() -> None:
    """``d_x`` and ``d_h_prev`` equal ``tn.gradients`` of the imported cell's ``h``; ``d_c_bar`` and
    ``d_r_bar_u_bar`` summed over the batch equal its gradients for ``b_c`` and ``b_ru``."""
    v = _values(GRU_IN)
    dh = RNG.normal(size=(B, N)).astype(np.float32)
    g = _cell_graph("GRUBlockCell", GRU_IN)
    g.node("grad", "GRUBlockCellGrad", (*[f"{k}:0" for k in GRU_IN], "cell:0", "cell:1", "cell:2",
                                        g.const("dh", dh)), T=F32)
    imp = import_graph_def(g.gd)
    feeds = {imp.tensor(f"{k}:0"): a for k, a in v.items()}
    with imp.graph.as_default():
        mine = tn.gradients(imp.tensor("cell:3"), [imp.tensor(f"{k}:0") for k in ("x", "h_prev", "b_c", "b_ru")],
                            grad_ys=tn.constant(dh))
    sess = tn.Session(imp.graph)
    want = sess.run(mine, feeds)
    d_x, d_h_prev, d_c_bar, d_ru = sess.run([imp.tensor(f"grad:{k}") for k in range(4)], feeds)
    for got, w in zip([d_x, d_h_prev, d_c_bar.sum(0), d_ru.sum(0)], want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5)


def test_a_cell_whose_weights_have_no_known_shape_is_refused_naming_it() -> None:
    spec = {**GRU_IN, "w_c": (-1, -1)}
    with pytest.raises(tn.UnsupportedError, match=r'GRUBlockCell node "cell": needs the weights as a matrix'):
        import_graph_def(_cell_graph("GRUBlockCell", spec).gd)
