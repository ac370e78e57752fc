"""Import rules of the TensorFlow ops common in TF1/TF2 models that are formulas over existing
primitives (turnout.graphdef.import_math, import_arrays, import_scatter, import_models): Softsign,
Xlogy, Xdivy, MulNoNan, Rint, Print, StackCloseV2, LinSpace, MatrixBandPart, the MatrixDiag family,
TensorScatterAdd/Sub, Roll, MirrorPad, SpaceToDepth / DepthToSpace, SpaceToBatchND / BatchToSpaceND,
InTopKV2, UnsortedSegmentMax/Min/Prod and the Scatter* updates of TF1 reference variables.

Hand-written GraphDefs against numpy closed forms of TensorFlow's definitions (edge cases included:
Xlogy(0, 0), MulNoNan(inf, 0), halves, ties and non-finite predictions), on both backends, and
``tn.gradients`` of the imported graphs against the closed forms of TensorFlow's gradients. Needs
the ``tf`` extra, not TensorFlow."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.errors import ArgumentError, DTypeError, KernelError, ShapeError, UnsupportedError

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from test_graphdef_model_ops import BACKENDS, F32, I32, GraphDef, _run  # noqa: E402

from turnout.graphdef import import_graph_def  # noqa: E402


def _grads(g: GraphDef, y: str, xs: list[str], feeds: dict[str, Any], backend: str,
           seed: Any = None) -> list[Any]:
    """``tn.gradients(sum(y * seed), xs)`` of the imported graph (``seed``: the upstream gradient)."""
    imp = import_graph_def(g.gd)
    out = imp.tensor(y)
    with imp.graph.as_default():
        total = tn.reduce_sum(out if seed is None else out * tn.constant(seed))
        gs = tn.gradients(total, [imp.tensor(x) for x in xs])
    return tn.Session(imp.graph, backend=backend).run(gs, {imp.tensor(k): v for k, v in feeds.items()})


def _refused(g: GraphDef, pattern: str) -> None:
    with pytest.raises(UnsupportedError, match=pattern):
        import_graph_def(g.gd)


# ---- element-wise formulas -------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_softsign_its_gradient_op_and_gradient(backend: str) -> None:
    """``x / (|x| + 1)``, NaN at the infinities as TensorFlow's kernel; SoftsignGrad and the gradient
    of the imported op are ``dy / (|x| + 1)^2``."""
    x = np.asarray([-np.inf, -3.0, -0.5, 0.0, 2.0, np.inf], np.float32)
    dy = np.asarray([1.0, 2.0, -1.0, 0.5, 3.0, 1.0], np.float32)
    g = GraphDef()
    g.node("y", "Softsign", (g.const("x", x),), T=F32)
    g.node("dx", "SoftsignGrad", (g.const("dy", dy), "x"), T=F32)
    y, dx = _run(g, ["y:0", "dx:0"], {}, backend)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(y, x / (np.abs(x) + 1))
    np.testing.assert_allclose(dx, dy / (np.abs(x) + 1) ** 2, rtol=1e-6)
    g2 = GraphDef()
    g2.node("y", "Softsign", (g2.placeholder("x", F32, [4]),), T=F32)
    xv = np.asarray([-3.0, -0.5, 0.25, 2.0], np.float32)
    (gx,) = _grads(g2, "y:0", ["x:0"], {"x:0": xv}, backend)
    np.testing.assert_allclose(gx, 1 / (1 + np.abs(xv)) ** 2, rtol=1e-6)


# x, y pairs: zeros against 0, NaN, a negative and inf; non-zero x against 0; ordinary; inf and NaN x
XY = (np.asarray([0.0, 0.0, 0.0, 0.0, 1.0, 2.0, -1.0, np.inf, np.nan, -3.0], np.float32),
      np.asarray([0.0, np.nan, -1.0, np.inf, 0.0, 3.0, 2.0, 0.0, 1.0, 0.0], np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_xlogy_and_xdivy_are_zero_where_x_is_zero_whatever_y(backend: str) -> None:
    x, y = XY
    g = GraphDef()
    g.node("l", "Xlogy", (g.const("x", x), g.const("y", y)), T=F32)
    g.node("d", "Xdivy", ("x", "y"), T=F32)
    lg, dv = _run(g, ["l:0", "d:0"], {}, backend)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(lg, np.where(x == 0, 0.0, x * np.log(y)))
        np.testing.assert_array_equal(dv, np.where(x == 0, 0.0, x / y))
    assert lg[0] == 0 and lg[1] == 0 and dv[0] == 0 and lg[4] == -np.inf and dv[4] == np.inf


@pytest.mark.parametrize("backend", BACKENDS)
def test_xlogy_and_xdivy_gradients_are_tensorflows(backend: str) -> None:
    """TensorFlow's gradients: Xlogy's are ``log(y)`` and ``x / y`` where x != 0, else 0; Xdivy's
    ``1 / y`` and ``-x / y^2`` where x != 0, else 0 (no NaN leaks from the untaken side)."""
    x = np.asarray([0.0, 0.0, 1.5, -2.0, 0.5], np.float32)
    y = np.asarray([0.0, 2.0, 3.0, 0.5, 4.0], np.float32)
    for op in ("Xlogy", "Xdivy"):
        g = GraphDef()
        g.node("z", op, (g.placeholder("x", F32, [5]), g.placeholder("y", F32, [5])), T=F32)
        gx, gy = _grads(g, "z:0", ["x:0", "y:0"], {"x:0": x, "y:0": y}, backend)
        nz = x != 0
        with np.errstate(all="ignore"):
            if op == "Xlogy":
                want_x, want_y = np.where(nz, np.log(y), 0.0), np.where(nz, x / y, 0.0)
            else:
                want_x, want_y = np.where(nz, 1 / y, 0.0), np.where(nz, -x / y ** 2, 0.0)
        np.testing.assert_allclose(gx, want_x, rtol=1e-6, err_msg=op)
        np.testing.assert_allclose(gy, want_y, rtol=1e-6, err_msg=op)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mul_no_nan_is_plus_zero_where_y_is_zero_even_for_inf_and_nan(backend: str) -> None:
    """``MulNoNan(inf, 0)`` and ``MulNoNan(NaN, 0)`` are 0 (+0, also for a negative x), but
    ``MulNoNan(0, NaN)`` is NaN: only y is tested. Gradients, TensorFlow's: ``dz * y`` (0 where y
    is 0) and ``dz * x``, also where y is 0."""
    x, y = XY
    g = GraphDef()
    g.node("z", "MulNoNan", (g.const("x", x), g.const("y", y)), T=F32)
    (z,) = _run(g, ["z:0"], {}, backend)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(z, np.where(y == 0, 0.0, x * y))
    assert not np.signbit(z[-1]) and np.isnan(z[1]) and z[7] == 0.0
    g2 = GraphDef()
    g2.node("z", "MulNoNan", (g2.placeholder("x", F32, [4]), g2.placeholder("y", F32, [4])), T=F32)
    xv = np.asarray([2.0, -3.0, 0.5, 4.0], np.float32)
    yv = np.asarray([0.0, 0.0, 2.0, -1.5], np.float32)
    dz = np.asarray([1.0, 2.0, 3.0, -1.0], np.float32)
    gx, gy = _grads(g2, "z:0", ["x:0", "y:0"], {"x:0": xv, "y:0": yv}, backend, seed=dz)
    np.testing.assert_array_equal(gx, np.where(yv == 0, 0.0, dz * yv))
    np.testing.assert_array_equal(gy, dz * xv)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rint_rounds_halves_to_even(backend: str) -> None:
    x = np.asarray([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.7, -3.2], np.float32)
    g = GraphDef()
    g.node("y", "Rint", (g.const("x", x),), T=F32)
    (y,) = _run(g, ["y:0"], {}, backend)
    np.testing.assert_array_equal(y, np.rint(x))
    assert np.signbit(y[2])  # rint(-0.5) is -0, as in TensorFlow
    for op in ("Rint", "Softsign", "Xlogy", "MulNoNan"):
        gi = GraphDef()
        i = gi.const("i", np.asarray([1, 2], np.int32))
        gi.node("y", op, (i, i) if op in ("Xlogy", "MulNoNan") else (i,), T=I32)
        _refused(gi, f'{op} node "y": supported for floating inputs only')


@pytest.mark.parametrize("backend", BACKENDS)
def test_print_passes_its_first_input_and_its_gradient(backend: str) -> None:
    g = GraphDef()
    x = g.placeholder("x", F32, [3])
    g.node("sq", "Square", (x,), T=F32)
    g.node("p", "Print", ("sq", x, g.const("n", np.int32(3))), T=F32, message="sq: ", first_n=-1, summarize=3)
    xv = np.asarray([1.0, -2.0, 3.0], np.float32)
    (p,) = _run(g, ["p:0"], {"x:0": xv}, backend)
    np.testing.assert_array_equal(p, xv ** 2)
    (gx,) = _grads(g, "p:0", ["x:0"], {"x:0": xv}, backend)
    np.testing.assert_array_equal(gx, 2 * xv)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stack_close_is_a_no_op_that_control_edges_can_wait_on(backend: str) -> None:
    g = GraphDef()
    g.node("s", "StackV2", (g.const("max", np.int32(-1)),), elem_type=F32, stack_name="s")
    g.node("push", "StackPushV2", ("s", g.const("v", np.float32(4.5))), T=F32)
    g.node("pop", "StackPopV2", ("s", "^push"), elem_type=F32)
    g.node("close", "StackCloseV2", ("s", "^pop"))
    g.node("after", "Identity", ("pop", "^close"), T=F32)
    assert _run(g, ["after:0"], {}, backend) == [4.5]


# ---- LinSpace ------------------------------------------------------------------------------------------
def _tf_linspace(start: float, stop: float, num: int) -> np.ndarray:
    """TensorFlow's kernel in float32: ``start + step * i``, the last value exactly ``stop``."""
    s, e = np.float32(start), np.float32(stop)
    if num == 1:
        return np.asarray([s])
    step = (e - s) / np.float32(num - 1)
    return np.asarray([s + step * np.float32(i) for i in range(num - 1)] + [e], np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lin_space_matches_tensorflows_kernel(backend: str) -> None:
    """Exactly TensorFlow's values on the reference backend; the fast one within a last bit. No
    gradient flows through it, as in TensorFlow."""
    g = GraphDef()
    start, stop = g.placeholder("a", F32, []), g.placeholder("b", F32, [])
    for n in (1, 2, 5, 7):
        g.node(f"l{n}", "LinSpace", (start, stop, g.const(f"n{n}", np.int32(n))), T=F32)
    got = _run(g, ["l1:0", "l2:0", "l5:0", "l7:0"], {"a:0": np.float32(0.1), "b:0": np.float32(1.3)}, backend)
    for n, v in zip((1, 2, 5, 7), got):
        want = _tf_linspace(0.1, 1.3, n)
        assert v[0] == want[0] and v[-1] == want[-1]
        # XLA may fuse ``start + step * i`` into one multiply-add, rounded once: a last-bit difference
        np.testing.assert_array_max_ulp(v, want, maxulp=0 if backend == "reference" else 1)
    imp = import_graph_def(g.gd)
    with imp.graph.as_default():  # no gradient, as TensorFlow registers none
        assert tn.gradients(tn.reduce_sum(imp.tensor("l5:0")), [imp.tensor("a:0")]) == [None]
    bad = GraphDef()
    bad.node("l", "LinSpace", (bad.const("a", np.float32(0)), bad.const("b", np.float32(1)),
                               bad.placeholder("n", I32, [])), T=F32)
    _refused(bad, r'LinSpace node "l": num \(n:0\) must be known when importing')
    zero = GraphDef()
    zero.node("l", "LinSpace", (zero.const("a", np.float32(0)), zero.const("b", np.float32(1)),
                                zero.const("n", np.int32(0))), T=F32)
    _refused(zero, 'LinSpace node "l": num must be > 0')
    ints = GraphDef()
    ints.node("l", "LinSpace", (ints.const("a", np.int32(0)), ints.const("b", np.int32(4)),
                                ints.const("n", np.int32(3))), T=I32)
    _refused(ints, 'LinSpace node "l": supported for floating inputs only, got int32')


# ---- band and diagonals ----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_matrix_band_part(backend: str) -> None:
    """Entries outside the band are 0, even infinite ones; -1 keeps a whole side; gradient: the band."""
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x[0, 0, 3] = np.inf
    g = GraphDef()
    xs = g.const("x", x)
    cases = {"b10": (1, 0), "b02": (0, 2), "bm1": (-1, 1), "all": (-1, -1), "diag": (0, 0)}
    for name, (lo, hi) in cases.items():
        g.node(name, "MatrixBandPart", (xs, g.const(f"{name}_lo", np.int32(lo)), g.const(f"{name}_hi", np.int32(hi))),
               T=F32)
    got = _run(g, [f"{n}:0" for n in cases], {}, backend)
    i, j = np.arange(3)[:, None], np.arange(4)[None, :]
    for (lo, hi), out in zip(cases.values(), got):
        band = ((lo < 0) | (i - j <= lo)) & ((hi < 0) | (j - i <= hi))
        np.testing.assert_array_equal(out, np.where(band, x, 0.0))
    g2 = GraphDef()
    g2.node("y", "MatrixBandPart", (g2.placeholder("x", F32, [3, 4]), g2.const("lo", np.int32(1)),
                                    g2.const("hi", np.int32(0))), T=F32)
    (gx,) = _grads(g2, "y:0", ["x:0"], {"x:0": x[1]}, backend)
    np.testing.assert_array_equal(gx, ((i - j <= 1) & (j - i <= 0)).astype(np.float32))
    g3 = GraphDef()
    g3.node("y", "MatrixBandPart", (g3.const("x", x), g3.const("lo", np.int32(4)), g3.const("hi", np.int32(0))), T=F32)
    _refused(g3, 'MatrixBandPart node "y": num_lower 4 and num_upper 0 must be at most the rows 3')


@pytest.mark.parametrize("backend", BACKENDS)
def test_matrix_diag_diag_part_and_set_diag(backend: str) -> None:
    """V1 and V3 (k = 0): a batch of diagonals made into matrices (V3 with its padding value),
    the diagonals of wide and tall matrices read (a -0 stays -0) and replaced."""
    d = np.asarray([[1.0, -2.0, 3.0], [4.0, 5.0, -0.0]], np.float32)
    wide = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 5
    wide[1, 2, 2] = -0.0
    tall = np.transpose(wide, (0, 2, 1)).copy()
    g = GraphDef()
    k = g.const("k", np.int32(0))
    g.node("diag", "MatrixDiag", (g.const("d", d),), T=F32)
    g.node("diag3", "MatrixDiagV3", ("d", k, g.const("rows", np.int32(-1)), g.const("cols", np.int32(5)),
                                     g.const("pad", np.float32(9.0))), T=F32, align="RIGHT_LEFT")
    g.node("part_wide", "MatrixDiagPart", (g.const("wide", wide),), T=F32)
    g.node("part_tall", "MatrixDiagPartV3", (g.const("tall", tall), k, g.const("pad0", np.float32(7.0))), T=F32)
    g.node("set_wide", "MatrixSetDiag", ("wide", "d"), T=F32)
    g.node("set_tall", "MatrixSetDiagV3", ("tall", "d", k), T=F32)
    got = _run(g, ["diag:0", "diag3:0", "part_wide:0", "part_tall:0", "set_wide:0", "set_tall:0"], {}, backend)
    diag, diag3, part_wide, part_tall, set_wide, set_tall = got
    want = np.zeros((2, 3, 3), np.float32)
    want3 = np.full((2, 3, 5), 9.0, np.float32)
    for b in range(2):
        for i in range(3):
            want[b, i, i] = want3[b, i, i] = d[b, i]
    np.testing.assert_array_equal(diag, want)
    np.testing.assert_array_equal(diag3, want3)
    np.testing.assert_array_equal(part_wide, np.diagonal(wide, axis1=1, axis2=2))
    np.testing.assert_array_equal(part_tall, np.diagonal(tall, axis1=1, axis2=2))
    assert np.signbit(part_wide[1, 2])
    for x, out in ((wide, set_wide), (tall, set_tall)):
        w = x.copy()
        for b in range(2):
            for i in range(3):
                w[b, i, i] = d[b, i]
        np.testing.assert_array_equal(out, w)
    bad = GraphDef()
    bad.node("p", "MatrixDiagPartV3", (bad.const("x", wide), bad.const("k", np.int32(1)),
                                       bad.const("pad", np.float32(0))), T=F32)
    _refused(bad, r'MatrixDiagPartV3 node "p": only the main diagonal \(k = 0\) is supported, got k = \[1\]')


@pytest.mark.parametrize("backend", BACKENDS)
def test_matrix_set_diag_gradients(backend: str) -> None:
    """TensorFlow's: the gradient with its diagonal zeroed for the input, its diagonal for the diagonal."""
    g = GraphDef()
    g.node("y", "MatrixSetDiag", (g.placeholder("x", F32, [3, 4]), g.placeholder("d", F32, [3])), T=F32)
    seed = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    gx, gd = _grads(g, "y:0", ["x:0", "d:0"], {"x:0": np.ones((3, 4), np.float32), "d:0": np.ones(3, np.float32)},
                    backend, seed=seed)
    np.testing.assert_array_equal(gx, np.where(np.eye(3, 4, dtype=bool), 0.0, seed))
    np.testing.assert_array_equal(gd, np.diagonal(seed))


# ---- scatters ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_tensor_scatter_add_and_sub(backend: str) -> None:
    """Rows and single elements, repeated indices adding up; an index out of range is an error;
    gradients: dy for the tensor, dy's rows at the indices (negated for Sub) for the updates."""
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    g = GraphDef()
    xs = g.placeholder("x", F32, [4, 3])
    rows = g.placeholder("rows", I32, [3, 1])
    upd = g.placeholder("u", F32, [3, 3])
    g.node("add", "TensorScatterAdd", (xs, rows, upd), T=F32, Tindices=I32)
    g.node("sub", "TensorScatterSub", (xs, g.const("el", np.asarray([[0, 2], [3, 1], [0, 2]], np.int32)),
                                       g.const("ev", np.asarray([1.0, 2.0, 4.0], np.float32))), T=F32, Tindices=I32)
    u = np.arange(9, dtype=np.float32).reshape(3, 3) * 10
    feeds = {"x:0": x, "rows:0": np.asarray([[1], [3], [1]], np.int32), "u:0": u}
    add, sub = _run(g, ["add:0", "sub:0"], feeds, backend)
    want_add, want_sub = x.copy(), x.copy()
    np.add.at(want_add, [1, 3, 1], u)
    np.subtract.at(want_sub, ([0, 3, 0], [2, 1, 2]), [1.0, 2.0, 4.0])
    np.testing.assert_array_equal(add, want_add)
    np.testing.assert_array_equal(sub, want_sub)
    seed = np.arange(12, dtype=np.float32).reshape(4, 3) - 4
    gx, gu = _grads(g, "add:0", ["x:0", "u:0"], feeds, backend, seed=seed)
    np.testing.assert_array_equal(gx, seed)
    np.testing.assert_array_equal(gu, seed[[1, 3, 1]])
    with pytest.raises(KernelError, match="indices do not index into tensor shape"):
        _run(g, ["add:0"], {**feeds, "rows:0": np.asarray([[1], [4], [0]], np.int32)}, backend)


# ---- Roll and MirrorPad ----------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_roll_along_axes_with_repeated_and_negative_shifts(backend: str) -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    g = GraphDef()
    g.node("r", "Roll", (g.placeholder("x", F32, [2, 3, 4]), g.const("s", np.asarray([1, -5, 2], np.int32)),
                         g.const("a", np.asarray([2, 1, -1], np.int32))), T=F32)
    (r,) = _run(g, ["r:0"], {"x:0": x}, backend)
    np.testing.assert_array_equal(r, np.roll(x, (1, -5, 2), axis=(2, 1, 2)))
    seed = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (gx,) = _grads(g, "r:0", ["x:0"], {"x:0": x}, backend, seed=seed)
    np.testing.assert_array_equal(gx, np.roll(seed, (-3, 5), axis=(2, 1)))
    bad = GraphDef()
    bad.node("r", "Roll", (bad.const("x", x), bad.placeholder("s", I32, []), bad.const("a", np.int32(0))), T=F32)
    _refused(bad, r'Roll node "r": the shift \(s:0\) must be known when importing')


def _mirror_adjoint(grad: np.ndarray, pads: list[tuple[int, int]], mode: str) -> np.ndarray:
    """The adjoint of ``np.pad(x, pads, mode)``: each padded entry's gradient added to its source."""
    shape = [n - b - a for n, (b, a) in zip(grad.shape, pads)]
    size = int(np.prod(shape))
    src = np.pad(np.arange(size).reshape(shape), pads, mode=mode)
    out = np.zeros(size, grad.dtype)
    np.add.at(out, src.ravel(), grad.ravel())
    return out.reshape(shape)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mirror_pad_reflect_and_symmetric_and_their_gradient(backend: str) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    pads = [(2, 1), (3, 3)]
    g = GraphDef()
    p = g.const("p", np.asarray(pads, np.int32))
    xs = g.placeholder("x", F32, [3, 4])
    g.node("refl", "MirrorPad", (xs, p), T=F32, mode="REFLECT")
    g.node("sym", "MirrorPad", (xs, p), T=F32, mode="SYMMETRIC")
    dy = np.arange(6 * 10, dtype=np.float32).reshape(6, 10) % 7
    g.node("grad", "MirrorPadGrad", (g.const("dy", dy), p), T=F32, mode="SYMMETRIC")
    refl, sym, grad = _run(g, ["refl:0", "sym:0", "grad:0"], {"x:0": x}, backend)
    np.testing.assert_array_equal(refl, np.pad(x, pads, mode="reflect"))
    np.testing.assert_array_equal(sym, np.pad(x, pads, mode="symmetric"))
    np.testing.assert_array_equal(grad, _mirror_adjoint(dy, pads, "symmetric"))
    (gx,) = _grads(g, "refl:0", ["x:0"], {"x:0": x}, backend, seed=dy[:, :10])
    np.testing.assert_array_equal(gx, _mirror_adjoint(dy, pads, "reflect"))
    bad = GraphDef()
    bad.node("m", "MirrorPad", (bad.const("x", x), bad.const("p", np.asarray([[3, 0], [0, 0]], np.int32))), T=F32,
             mode="REFLECT")
    _refused(bad, r'MirrorPad node "m": paddings \(3, 0\) must be at most 2 for an axis of size 3 in REFLECT mode')


# ---- block moves -----------------------------------------------------------------------------------------
def _space_to_depth(x: np.ndarray, b: int) -> np.ndarray:
    """TensorFlow's definition: ``out[n, h, w, (i * b + j) * c + k] = x[n, h * b + i, w * b + j, k]``."""
    n, hh, ww, c = x.shape
    out = np.zeros((n, hh // b, ww // b, b * b * c), x.dtype)
    for h in range(hh // b):
        for w in range(ww // b):
            for i in range(b):
                for j in range(b):
                    out[:, h, w, (i * b + j) * c:(i * b + j + 1) * c] = x[:, h * b + i, w * b + j, :]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_space_to_depth_and_depth_to_space_invert_each_other(backend: str) -> None:
    x = np.arange(2 * 4 * 6 * 3, dtype=np.float32).reshape(2, 4, 6, 3)
    g = GraphDef()
    g.node("s2d", "SpaceToDepth", (g.placeholder("x", F32, [-1, 4, 6, 3]),), T=F32, block_size=2)
    g.node("back", "DepthToSpace", ("s2d",), T=F32, block_size=2)
    s2d, back = _run(g, ["s2d:0", "back:0"], {"x:0": x}, backend)
    np.testing.assert_array_equal(s2d, _space_to_depth(x, 2))
    np.testing.assert_array_equal(back, x)
    bad = GraphDef()
    bad.node("s", "SpaceToDepth", (bad.const("x", x),), T=F32, block_size=2, data_format="NCHW")
    _refused(bad, "SpaceToDepth node \"s\": data_format 'NCHW' is not supported")


def _space_to_batch(x: np.ndarray, block: list[int], pads: list[tuple[int, int]]) -> np.ndarray:
    """TensorFlow's definition, for two block axes: the zero-padded input's entry ``(n, h * b0 + i,
    w * b1 + j, c)`` goes to batch ``(i * b1 + j) * N + n``, position ``(h, w, c)``."""
    p = np.pad(x, [(0, 0), *pads, (0, 0)])
    n, hh, ww, c = p.shape
    b0, b1 = block
    out = np.zeros((n * b0 * b1, hh // b0, ww // b1, c), x.dtype)
    for i in range(b0):
        for j in range(b1):
            out[(i * b1 + j) * n:(i * b1 + j + 1) * n] = p[:, i::b0, j::b1, :]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_space_to_batch_nd_and_back_with_a_run_time_batch(backend: str) -> None:
    """The pair around a dilated convolution: paddings then crops of the same sizes give the input
    back; the batch is a run-time dimension; the V1 forms take ``block_size``."""
    x = np.arange(2 * 5 * 4 * 3, dtype=np.float32).reshape(2, 5, 4, 3)
    block, pads = [2, 3], [(1, 0), (1, 1)]
    g = GraphDef()
    xs = g.placeholder("x", F32, [-1, 5, 4, 3])
    bs, ps = g.const("block", np.asarray(block, np.int32)), g.const("pads", np.asarray(pads, np.int32))
    g.node("s2b", "SpaceToBatchND", (xs, bs, ps), T=F32)
    g.node("b2s", "BatchToSpaceND", ("s2b", bs, ps), T=F32)
    g.node("v1", "SpaceToBatch", (xs, g.const("p1", np.asarray([[1, 0], [0, 0]], np.int32))), T=F32, block_size=2)
    g.node("v1back", "BatchToSpace", ("v1", "p1"), T=F32, block_size=2)
    s2b, b2s, v1, v1back = _run(g, ["s2b:0", "b2s:0", "v1:0", "v1back:0"], {"x:0": x}, backend)
    np.testing.assert_array_equal(s2b, _space_to_batch(x, block, pads))
    np.testing.assert_array_equal(b2s, x)
    np.testing.assert_array_equal(v1, _space_to_batch(x, [2, 2], [(1, 0), (0, 0)]))
    np.testing.assert_array_equal(v1back, x)
    seed = np.arange(s2b.size, dtype=np.float32).reshape(s2b.shape)
    (gx,) = _grads(g, "s2b:0", ["x:0"], {"x:0": x}, backend, seed=seed)
    want = np.zeros_like(x)  # the adjoint: each input entry's gradient is the seed where it went
    probe = _space_to_batch(np.arange(x.size, dtype=np.float32).reshape(x.shape) + 1, block, pads)
    np.add.at(want.reshape(-1), (probe[probe > 0] - 1).astype(int), seed[probe > 0])
    np.testing.assert_array_equal(gx, want)
    bad = GraphDef()
    bad.node("s", "SpaceToBatchND", (bad.const("x", x), bad.const("b", np.asarray([2, 2], np.int32)),
                                     bad.const("p", np.asarray([[0, 0], [0, 0]], np.int32))), T=F32)
    _refused(bad, r'SpaceToBatchND node "s": the padded block axes \[5, 4\] must be multiples of the block_shape')


# ---- InTopK and segment reductions ------------------------------------------------------------------------
def _in_top_k(pred: np.ndarray, targets: np.ndarray, k: int) -> list[bool]:
    """TensorFlow's kernel: false for a target out of range or a row with a non-finite entry, else
    whether fewer than k predictions are strictly larger than the target's."""
    out = []
    for row, t in zip(pred, targets):
        if not 0 <= t < len(row) or not np.isfinite(row).all():
            out.append(False)
        else:
            out.append(int((row > row[t]).sum()) < k)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_top_k_with_ties_non_finite_rows_and_bad_targets(backend: str) -> None:
    pred = np.asarray([[0.1, 0.3, 0.3, 0.2], [0.1, 0.2, np.nan, 0.3], [1.0, 2.0, 3.0, np.inf],
                       [1.0, 1.0, 1.0, 1.0], [0.5, 0.4, 0.3, 0.2], [0.5, 0.4, 0.3, 0.2]], np.float32)
    g = GraphDef()
    g.node("top", "InTopKV2", (g.const("p", pred), g.placeholder("t", I32, [6]), g.placeholder("k", I32, [])), T=I32)
    g.node("top1", "InTopK", ("p", "t"), T=I32, k=1)
    for targets in ([2, 3, 0, 3, 2, 0], [1, 0, 1, 0, 5, -1]):
        t = np.asarray(targets, np.int32)
        for k in (1, 2, 3):
            top, top1 = _run(g, ["top:0", "top1:0"], {"t:0": t, "k:0": np.int32(k)}, backend)
            np.testing.assert_array_equal(top, _in_top_k(pred, t, k), err_msg=f"{targets} k={k}")
            np.testing.assert_array_equal(top1, _in_top_k(pred, t, 1))
    bad = GraphDef()
    bad.node("top", "InTopKV2", (bad.const("p", np.ones((2, 3), np.int32)), bad.const("t", np.zeros(2, np.int32)),
                                 bad.const("k", np.int32(1))), T=I32)
    _refused(bad, r'InTopKV2 node "top": needs floating predictions \[batch, classes\]')


def _segments(data: np.ndarray, ids: np.ndarray, num: int, op: str) -> np.ndarray:
    fn = {"UnsortedSegmentMax": np.max, "UnsortedSegmentMin": np.min, "UnsortedSegmentProd": np.prod}[op]
    empty = {"UnsortedSegmentMax": np.finfo(np.float32).min, "UnsortedSegmentMin": np.finfo(np.float32).max,
             "UnsortedSegmentProd": 1.0}[op]
    out = np.full((num, *data.shape[ids.ndim:]), empty, np.float32)
    for s in range(num):
        rows = data[ids == s]
        if len(rows):
            out[s] = fn(rows, axis=0)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_unsorted_segment_max_min_prod(backend: str) -> None:
    """Empty segments read the type's lowest (highest) value or 1; a negative id drops its row; an
    id >= num_segments is an error; matrix ids reduce over both of their axes."""
    data = np.asarray([[1.0, 5.0], [3.0, -2.0], [7.0, 0.5], [-1.0, 4.0], [2.0, 2.0]], np.float32)
    g = GraphDef()
    ids = g.placeholder("ids", I32, [5])
    ops = ("UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd")
    for op in ops:
        g.node(op, op, (g.const(f"{op}_d", data), ids, g.const(f"{op}_n", np.int32(4))), T=F32, Tindices=I32)
    g.node("mat", "UnsortedSegmentMax", (g.const("d2", data[:4].reshape(2, 2, 2)),
                                          g.const("ids2", np.asarray([[1, 0], [1, 1]], np.int32)),
                                          g.const("n2", np.int32(2))), T=F32, Tindices=I32)
    idv = np.asarray([0, 2, 0, -1, 2], np.int32)
    got = _run(g, [f"{op}:0" for op in ops] + ["mat:0"], {"ids:0": idv}, backend)
    for op, out in zip(ops, got):
        np.testing.assert_array_equal(out, _segments(data, idv, 4, op), err_msg=op)
    np.testing.assert_array_equal(got[3], _segments(data[:4].reshape(2, 2, 2), np.asarray([[1, 0], [1, 1]]), 2,
                                                    "UnsortedSegmentMax"))
    with pytest.raises(KernelError, match=r"segment_ids must be < num_segments \(4\)"):
        _run(g, ["UnsortedSegmentMax:0"], {"ids:0": np.asarray([0, 4, 0, 1, 1], np.int32)}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unsorted_segment_gradients_share_ties_and_handle_zeros(backend: str) -> None:
    """TensorFlow's gradients: Max's to the elements equal to their segment's maximum, shared among
    ties; Prod's the product of the segment's other elements (exact with a zero)."""
    data = np.asarray([3.0, 1.0, 3.0, 2.0, 0.0, 5.0], np.float32)
    ids = np.asarray([0, 0, 0, 1, 1, 1], np.int32)
    seed = np.asarray([4.0, 10.0], np.float32)
    for op in ("UnsortedSegmentMax", "UnsortedSegmentProd"):
        g = GraphDef()
        g.node("y", op, (g.placeholder("x", F32, [6]), g.const("ids", ids), g.const("n", np.int32(2))), T=F32,
               Tindices=I32)
        (gx,) = _grads(g, "y:0", ["x:0"], {"x:0": data}, backend, seed=seed)
        if op == "UnsortedSegmentMax":
            want = [2.0, 0.0, 2.0, 0.0, 0.0, 10.0]
        else:
            want = [seed[s] * np.prod([data[j] for j in range(6) if ids[j] == s and j != i])
                    for i, s in enumerate(ids)]
        np.testing.assert_array_equal(gx, want, err_msg=op)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_structure_formulas_keep_integer_types(backend: str) -> None:
    """TensorFlow's kernels of these ops exist for integers too, and so do the imports: an empty
    segment's maximum is the int32 minimum, a diagonal of ints, a band, a roll and a mirror pad."""
    x = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
    g = GraphDef()
    xs = g.const("x", x)
    g.node("band", "MatrixBandPart", (xs, g.const("lo", np.int32(0)), g.const("hi", np.int32(1))), T=I32)
    g.node("part", "MatrixDiagPart", (xs,), T=I32)
    g.node("roll", "Roll", (xs, g.const("s", np.int32(1)), g.const("a", np.int32(1))), T=I32)
    g.node("pad", "MirrorPad", (xs, g.const("p", np.asarray([[1, 1], [0, 2]], np.int32))), T=I32, mode="REFLECT")
    g.node("seg", "UnsortedSegmentMax", (g.const("d", np.asarray([3, -7, 2], np.int32)),
                                          g.const("ids", np.asarray([0, 0, 2], np.int32)), g.const("n", np.int32(3))),
           T=I32, Tindices=I32)
    g.node("sadd", "TensorScatterAdd", (xs, g.const("i", np.asarray([[2, 3]], np.int32)),
                                        g.const("u", np.asarray([100], np.int32))), T=I32, Tindices=I32)
    band, part, roll, pad, seg, sadd = _run(g, ["band:0", "part:0", "roll:0", "pad:0", "seg:0", "sadd:0"], {}, backend)
    i, j = np.arange(3)[:, None], np.arange(4)[None, :]
    np.testing.assert_array_equal(band, np.where((i <= j) & (j - i <= 1), x, 0))
    np.testing.assert_array_equal(part, np.diagonal(x))
    np.testing.assert_array_equal(roll, np.roll(x, 1, axis=1))
    np.testing.assert_array_equal(pad, np.pad(x, [(1, 1), (0, 2)], mode="reflect"))
    np.testing.assert_array_equal(seg, [3, np.iinfo(np.int32).min, 2])
    want = x.copy()
    want[2, 3] += 100
    np.testing.assert_array_equal(sadd, want)
    assert all(v.dtype == np.int32 for v in (band, part, roll, pad, seg, sadd))


# ---- Scatter* of TF1 reference variables -----------------------------------------------------------------
def _variable(g: GraphDef, name: str, value: np.ndarray) -> str:
    g.node(name, "VariableV2", dtype=F32, shape=list(value.shape))
    g.node(f"{name}/Assign", "Assign", (name, g.const(f"{name}/init", value)), T=F32)
    return name


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_updates_of_reference_variables(backend: str) -> None:
    """ScatterSub (TF1's GradientDescent on an embedding), ScatterAdd with a repeated row adding up,
    ScatterUpdate with a repeated row (the last update wins, as TensorFlow's CPU kernel writes),
    ScatterNdUpdate / ScatterNdAdd of single elements; each outputs the Variable's new value, and
    the Variable keeps it."""
    init = np.arange(12, dtype=np.float32).reshape(4, 3)
    g = GraphDef()
    for name in ("sub", "add", "upd", "ndu", "nda"):
        _variable(g, f"v_{name}", init)
    idx = g.const("idx", np.asarray([2, 0, 2], np.int32))
    rows = g.const("rows", np.asarray([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [3.0, 4.0, 5.0]], np.float32))
    g.node("sub", "ScatterSub", ("v_sub", idx, rows), T=F32, Tindices=I32)
    g.node("add", "ScatterAdd", ("v_add", idx, rows), T=F32, Tindices=I32)
    g.node("upd", "ScatterUpdate", ("v_upd", idx, rows), T=F32, Tindices=I32)
    el = g.const("el", np.asarray([[3, 1], [0, 0], [3, 1]], np.int32))
    ev = g.const("ev", np.asarray([10.0, 20.0, 30.0], np.float32))
    g.node("ndu", "ScatterNdUpdate", ("v_ndu", el, ev), T=F32, Tindices=I32)
    g.node("nda", "ScatterNdAdd", ("v_nda", el, ev), T=F32, Tindices=I32)
    imp = import_graph_def(g.gd)
    sess = tn.Session(imp.graph, backend=backend)
    got = imp.run(sess, ["sub:0", "add:0", "upd:0", "ndu:0", "nda:0"])
    r = np.asarray([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [3.0, 4.0, 5.0]], np.float32)
    sub, add, upd, ndu, nda = init.copy(), init.copy(), init.copy(), init.copy(), init.copy()
    np.subtract.at(sub, [2, 0, 2], r)
    np.add.at(add, [2, 0, 2], r)
    for i, row in zip([2, 0, 2], r):
        upd[i] = row
    for (a, b), v in zip([(3, 1), (0, 0), (3, 1)], [10.0, 20.0, 30.0]):
        ndu[a, b] = v
        nda[a, b] += v
    for want, out, name in zip((sub, add, upd, ndu, nda), got, ("sub", "add", "upd", "ndu", "nda")):
        np.testing.assert_array_equal(out, want, err_msg=name)
    np.testing.assert_array_equal(imp.run(sess, ["v_sub:0"])[0], sub)  # the Variable holds it


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_refuses_rows_out_of_range(backend: str) -> None:
    g = GraphDef()
    _variable(g, "v", np.zeros((3, 2), np.float32))
    g.node("s", "ScatterSub", ("v", g.placeholder("i", I32, [2]), g.const("u", np.ones((2, 2), np.float32))),
           T=F32, Tindices=I32)
    with pytest.raises(KernelError, match=r"indices must be in \[0, 3\)"):
        _run(g, ["s:0"], {"i:0": np.asarray([0, 3], np.int32)}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scatter_updates_read_from_another_reference_variable(backend: str) -> None:
    """TF1 passes a Variable's ref where a value is due (``scatter_add(v, i, w)``): it is read."""
    g = GraphDef()
    _variable(g, "v", np.zeros((3, 2), np.float32))
    w = np.asarray([[1.0, 2.0], [3.0, 4.0]], np.float32)
    _variable(g, "w", w)
    g.node("s", "ScatterAdd", ("v", g.const("i", np.asarray([2, 0], np.int32)), "w"), T=F32, Tindices=I32)
    (out,) = _run(g, ["s:0"], {}, backend)
    np.testing.assert_array_equal(out, [w[1], [0.0, 0.0], w[0]])


def test_scatter_of_a_value_that_is_not_a_ref_is_refused_naming_the_node() -> None:
    g = GraphDef()
    g.node("s", "ScatterAdd", (g.const("x", np.zeros((3, 2), np.float32)), g.const("i", np.asarray([0], np.int32)),
                               g.const("u", np.ones((1, 2), np.float32))), T=F32, Tindices=I32)
    _refused(g, 'ScatterAdd node "s": its ref input does not come from a VariableV2')


@pytest.mark.parametrize("backend", BACKENDS)
def test_broadcast_args_folds_to_the_shape_both_broadcast_to(backend: str) -> None:
    """``BroadcastArgs`` of a known ``Shape`` and a constant (what TensorFlow 2's ``linspace`` and
    ``broadcast_to`` of computed shapes write): folded at import to numpy's broadcast shape, which a
    ``BroadcastTo`` then reads; two shapes that do not broadcast are a ``ShapeError`` at import."""
    from turnout.errors import ShapeError

    g = GraphDef()
    x = g.placeholder("x", F32, [3, 1])
    g.node("shape", "Shape", (x,), T=F32, out_type=I32)
    g.node("both", "BroadcastArgs", ("shape", g.const("other", np.asarray([2, 1, 4], np.int32))), T=I32)
    g.node("y", "BroadcastTo", (x, "both"), T=F32, Tidx=I32)
    xv = np.arange(3, dtype=np.float32).reshape(3, 1)
    (got,) = _run(g, ["y:0"], {"x:0": xv}, backend)
    np.testing.assert_array_equal(got, np.broadcast_to(xv, (2, 3, 4)))
    bad = GraphDef()
    bad.node("both", "BroadcastArgs", (bad.const("a", np.asarray([2], np.int32)),
                                       bad.const("b", np.asarray([3], np.int32))), T=I32)
    with pytest.raises(ShapeError, match=r'BroadcastArgs node "both": shapes \[2\] and \[3\] do not broadcast'):
        import_graph_def(bad.gd)


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_bucketize_counts_the_boundaries_a_value_is_not_below(backend: str) -> None:
    """``Bucketize`` as TensorFlow's kernel (``std::upper_bound``): equal boundaries both passed at a
    tie, a NaN past all of them, an integer compared as float32, a float64 compared with the float32
    boundaries widened (10.1 in float64 is below float32's 10.1). The expected buckets are TensorFlow
    2.21's for the same inputs, which are numpy's ``searchsorted(side="right")`` but for the NaN."""
    g = GraphDef()
    bounds = [-1.5, 0.0, 0.0, 2.0, 10.1]
    for name, t in (("x", F32), ("i", I32), ("d", 2)):
        g.node(f"b{name}", "Bucketize", (g.placeholder(name, t, [-1]),), T=t)
        g.gd.node[-1].attr["boundaries"].list.f.extend(bounds)
    xv = np.array([-2, -1.5, -0.0, 0.0, 1, 2, 10.1, 11, np.nan, np.inf, -np.inf], np.float32)
    iv = np.array([-2, -1, 0, 1, 2, 10, 11], np.int32)
    dv = np.array([10.1, 10.100000381469727, 10.1000004, -1.5], np.float64)
    got = _run(g, ["bx:0", "bi:0", "bd:0"], {"x:0": xv, "i:0": iv, "d:0": dv}, backend)
    assert [a.tolist() for a in got] == [[0, 1, 3, 3, 3, 4, 5, 5, 5, 5, 0], [0, 1, 3, 3, 4, 4, 5], [4, 5, 5, 1]]
    assert got[0].tolist()[:8] == np.searchsorted(np.float32(bounds), xv[:8], side="right").tolist()


def _pad_graph(value: Any = None) -> GraphDef:
    """``Pad`` (``PadV2`` of ``value``) of a fed ``x`` at fed paddings: known only when it runs."""
    g = GraphDef()
    g.placeholder("x", F32, [-1, 3])
    g.placeholder("p", I32, [2, 2])
    if value is None:
        g.node("y", "Pad", ("x", "p"), T=F32)
    else:
        g.node("y", "PadV2", ("x", "p", g.const("v", np.float32(value))), T=F32)
    return g


@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_at_run_time_paddings_is_numpys_zero_pad_and_its_gradient_the_slice(backend: str) -> None:
    """Law (TensorFlow's Pad): ``x`` at ``[before : before + size]`` of zeros of the padded shape, at
    paddings known only when the graph runs (``nce_loss``'s gradient pads at the batch size); its
    gradient reads that window back."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    for pads in ([[1, 0], [2, 1]], [[0, 0], [0, 0]], [[0, 3], [1, 0]]):
        (y,) = _run(_pad_graph(), ["y:0"], {"x:0": x, "p:0": np.asarray(pads, np.int32)}, backend)
        np.testing.assert_array_equal(y, np.pad(x, pads))
        seed = np.arange(np.pad(x, pads).size, dtype=np.float32).reshape(np.pad(x, pads).shape)
        (dx,) = _grads(_pad_graph(), "y:0", ["x:0"], {"x:0": x, "p:0": np.asarray(pads, np.int32)}, backend, seed)
        (b0, _), (b1, _) = pads
        np.testing.assert_array_equal(dx, seed[b0:b0 + 2, b1:b1 + 3])


@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_at_run_time_paddings_refuses_a_negative_one(backend: str) -> None:
    x = np.ones((2, 3), np.float32)
    with pytest.raises(KernelError, match="Pad: paddings must be non-negative"):
        _run(_pad_graph(), ["y:0"], {"x:0": x, "p:0": np.asarray([[0, -1], [0, 0]], np.int32)}, backend)


def test_pad_v2_of_a_nonzero_value_at_run_time_paddings_is_refused() -> None:
    _refused(_pad_graph(2.0), "a pad value other than zero needs paddings known when importing")
    import_graph_def(_pad_graph(0.0).gd)  # (a zero PadV2 is a Pad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_band_and_diagonal_ops_of_matrices_whose_size_is_known_only_when_they_run(backend: str) -> None:
    """Law: TensorFlow's values at run-time sizes too (``tf.eye(n)`` of a computed ``n``, the Cholesky
    factor's gradient of a fed kernel matrix): the band, the diagonal made, read and replaced; a
    non-square matrix there, and a band count past the rows, are ``KernelError``s when they run."""
    g = GraphDef()
    x = g.placeholder("x", F32, [-1, -1])
    d = g.placeholder("d", F32, [-1])
    k = g.const("k", np.int32(0))
    g.node("band", "MatrixBandPart", (x, g.const("lo", np.int32(1)), g.const("hi", np.int32(0))), T=F32)
    g.node("eye", "MatrixDiagV3", (d, k, g.const("rows", np.int32(-1)), g.const("cols", np.int32(-1)),
                                   g.const("pad", np.float32(0.0))), T=F32, align="RIGHT_LEFT")
    g.node("part", "MatrixDiagPartV3", (x, k, g.const("pad2", np.float32(0.0))), T=F32)
    g.node("set", "MatrixSetDiagV3", (x, d, k), T=F32)
    v = np.arange(16, dtype=np.float32).reshape(4, 4) - 3
    dv = np.asarray([1.0, -2.0, 5.0, 0.5], np.float32)
    band, eye, part, put = _run(g, ["band:0", "eye:0", "part:0", "set:0"], {"x:0": v, "d:0": dv}, backend)
    np.testing.assert_array_equal(band, np.tril(v) - np.tril(v, -2))
    np.testing.assert_array_equal(eye, np.diag(dv))
    np.testing.assert_array_equal(part, np.diagonal(v))
    want = v.copy()
    np.fill_diagonal(want, dv)
    np.testing.assert_array_equal(put, want)
    with pytest.raises(KernelError, match="must be square"):
        _run(g, ["part:0"], {"x:0": np.zeros((2, 3), np.float32), "d:0": dv}, backend)
    with pytest.raises(KernelError, match="num_lower \\(1\\) must be at most the rows"):
        _run(g, ["band:0"], {"x:0": np.zeros((0, 3), np.float32), "d:0": dv}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_segment_reductions_and_their_gradient_ops(backend: str) -> None:
    """Law (TensorFlow's kernels): ``out[s]`` combines the rows ``data[indices[i]]`` with sorted
    ``ids[i] == s``: summed, averaged, or summed over the root of the count; an empty segment is 0;
    ``num_segments`` pads to that many. The gradient ops spread each segment's row back to the indices,
    divided alike. Unsorted ids and a negative index are ``KernelError`` s."""
    data = np.arange(12, dtype=np.float32).reshape(4, 3) - 4
    idx, ids = np.array([3, 0, 3, 1], np.int32), np.array([0, 0, 2, 2], np.int32)
    g = GraphDef()
    d, i, s = g.const("data", data), g.placeholder("i", I32, [-1]), g.placeholder("s", I32, [-1])
    for op in ("SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN"):
        g.node(op, op, (d, i, s), T=F32, Tidx=I32)
        g.node(f"{op}N", f"{op}WithNumSegments", (d, i, s, g.const(f"{op}_n", np.int32(5))), T=F32, Tidx=I32)
        g.node(f"{op}Grad", f"{op}Grad", (g.const(f"{op}_g", data[:3]), i, s, g.const(f"{op}_rows", np.int32(6))),
               T=F32, Tidx=I32)
    names = [f"{op}{k}:0" for op in ("SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN")
             for k in ("", "N", "Grad")]
    got = dict(zip(names, _run(g, names, {"i:0": idx, "s:0": ids}, backend)))
    counts = np.array([2, 0, 2], np.float32)
    for op, div in (("SparseSegmentSum", np.ones(3)), ("SparseSegmentMean", np.maximum(counts, 1)),
                    ("SparseSegmentSqrtN", np.sqrt(np.maximum(counts, 1)))):
        want = np.zeros((3, 3), np.float32)
        np.add.at(want, ids, data[idx])
        want /= div[:, None]
        np.testing.assert_allclose(got[f"{op}:0"], want, rtol=1e-6)
        np.testing.assert_allclose(got[f"{op}N:0"], np.concatenate([want, np.zeros((2, 3))]), rtol=1e-6)
        back = np.zeros((6, 3), np.float32)
        np.add.at(back, idx, (data[:3] / div[:, None])[ids])
        np.testing.assert_allclose(got[f"{op}Grad:0"], back, rtol=1e-6)
    with pytest.raises(KernelError, match="segment ids are not increasing"):
        _run(g, ["SparseSegmentSum:0"], {"i:0": idx, "s:0": np.array([0, 2, 1, 2], np.int32)}, backend)
    with pytest.raises(KernelError):
        _run(g, ["SparseSegmentMean:0"], {"i:0": np.array([3, -1, 3, 1], np.int32), "s:0": ids}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sorted_segment_extremes_and_products_read_zero_for_an_empty_segment(backend: str) -> None:
    """Law (TensorFlow's sorted kernels): ``out[s]`` the max, min or product of the rows with id ``s``
    up to the largest id; an empty segment is 0 (the product's 1)."""
    data = np.asarray([[1.0, -2.0], [3.0, 0.5], [-4.0, 2.0], [0.25, 8.0]], np.float32)
    ids = np.asarray([0, 0, 2, 2], np.int32)
    g = GraphDef()
    d, s = g.const("d", data), g.placeholder("s", I32, [-1])
    for op in ("SegmentMax", "SegmentMin", "SegmentProd"):
        g.node(op, op, (d, s), T=F32, Tindices=I32)
    mx, mn, pr = _run(g, ["SegmentMax:0", "SegmentMin:0", "SegmentProd:0"], {"s:0": ids}, backend)
    np.testing.assert_array_equal(mx, [[3.0, 0.5], [0.0, 0.0], [0.25, 8.0]])
    np.testing.assert_array_equal(mn, [[1.0, -2.0], [0.0, 0.0], [-4.0, 2.0]])
    np.testing.assert_array_equal(pr, [[3.0, -1.0], [1.0, 1.0], [-1.0, 16.0]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_dense_bincount_counts_weighs_and_drops_past_its_size(backend: str) -> None:
    """Law (``tf.math.bincount``): counts (or summed weights; 1 where any with ``binary_output``) of
    each value below ``size``; larger values dropped, a negative one an error."""
    g = GraphDef()
    a, n = g.placeholder("a", I32, [-1]), g.placeholder("n", I32, [])
    w = g.const("w", np.asarray([0.5, 1.0, 2.0, 4.0, 8.0], np.float32))
    g.node("counts", "DenseBincount", (a, n, g.const("none", np.zeros(0, np.int32))), T=I32, Tidx=I32,
           binary_output=False)
    g.node("weighed", "DenseBincount", (a, n, w), T=F32, Tidx=I32, binary_output=False)
    g.node("binary", "DenseBincount", (a, n, g.const("none2", np.zeros(0, np.int32))), T=I32, Tidx=I32,
           binary_output=True)
    arr = np.asarray([1, 3, 1, 9, 0], np.int32)
    counts, weighed, binary = _run(g, ["counts:0", "weighed:0", "binary:0"], {"a:0": arr, "n:0": 5}, backend)
    assert counts.tolist() == [1, 2, 0, 1, 0] and binary.tolist() == [1, 1, 0, 1, 0]
    np.testing.assert_array_equal(weighed, [8.0, 2.5, 0.0, 1.0, 0.0])
    with pytest.raises(KernelError, match="Input arr must be non-negative"):
        _run(g, ["counts:0"], {"a:0": np.asarray([1, -1], np.int32), "n:0": 3}, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_slice_of_a_shape_folds_where_it_picks_known_dimensions(backend: str) -> None:
    """Law: ``shape(x)[-1]`` of a batch of unknown size is known at import when the last dimension is
    (``tf.sort`` and ``tf.argsort`` take it as ``TopKV2``'s ``k``)."""
    g = GraphDef()
    x = g.placeholder("x", F32, [-1, 4])
    g.node("shape", "Shape", (x,), T=F32, out_type=I32)
    k = g.node("k", "StridedSlice", ("shape", g.const("b", np.asarray([-1], np.int32)),
                                     g.const("e", np.asarray([0], np.int32)), g.const("st", np.asarray([1], np.int32))),
               T=I32, Index=I32, shrink_axis_mask=1, end_mask=1)
    g.node("top", "TopKV2", (x, k), T=F32, sorted=True)
    xv = np.asarray([[3.0, -1.0, 2.0, 0.5], [0.0, 4.0, -2.0, 1.0]], np.float32)
    (top,) = _run(g, ["top:0"], {"x:0": xv}, backend)
    np.testing.assert_array_equal(top, -np.sort(-xv, axis=1))


def _grid(lo: float, hi: float, size: int, k: int, n: int) -> float:
    """The kernel's sampling position ``k`` of ``n`` between ``lo`` and ``hi`` (the middle for one)."""
    return lo * (size - 1) + k * ((hi - lo) * (size - 1) / (n - 1)) if n > 1 else 0.5 * (lo + hi) * (size - 1)


def _crop_kernel(image: np.ndarray, boxes: np.ndarray, index: np.ndarray, crop: tuple[int, int],
                 extrapolation: float) -> np.ndarray:
    """TensorFlow's ``CropAndResize`` CPU kernel, its loops written out."""
    _, h, w, c = image.shape
    out = np.zeros((len(boxes), *crop, c), np.float32)
    for b, (y1, x1, y2, x2) in enumerate(boxes):
        for i in range(crop[0]):
            y = _grid(y1, y2, h, i, crop[0])
            for j in range(crop[1]):
                x = _grid(x1, x2, w, j, crop[1])
                if not (0 <= y <= h - 1 and 0 <= x <= w - 1):
                    out[b, i, j] = extrapolation
                    continue
                t, bo, le, ri = int(np.floor(y)), int(np.ceil(y)), int(np.floor(x)), int(np.ceil(x))
                img = image[index[b]]
                top = img[t, le] + (img[t, ri] - img[t, le]) * (x - le)
                bottom = img[bo, le] + (img[bo, ri] - img[bo, le]) * (x - le)
                out[b, i, j] = top + (bottom - top) * (y - t)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_crop_and_resize_is_the_kernels_bilinear_sampling(backend: str) -> None:
    """Law: each box sampled on its grid (its middle for one sample), bilinear inside the image and
    ``extrapolation_value`` outside; a box index past the batch is a ``KernelError``."""
    rng = np.random.default_rng(9)
    image = rng.normal(size=(2, 5, 6, 2)).astype(np.float32)
    boxes = np.asarray([[0.1, 0.2, 0.8, 0.7], [-0.3, 0.0, 0.9, 1.2], [0.5, 0.5, 0.5, 0.5]], np.float32)
    index = np.asarray([1, 0, 1], np.int32)
    g = GraphDef()
    im, bx = g.placeholder("im", F32, [-1, 5, 6, 2]), g.placeholder("bx", F32, [-1, 4])
    ix = g.placeholder("ix", I32, [-1])
    g.node("grid", "CropAndResize", (im, bx, ix, g.const("s1", np.asarray([3, 4], np.int32))), T=F32,
           extrapolation_value=-1.5, method="bilinear")
    g.node("one", "CropAndResize", (im, bx, ix, g.const("s2", np.asarray([1, 2], np.int32))), T=F32,
           extrapolation_value=0.0, method="bilinear")
    feeds = {"im:0": image, "bx:0": boxes, "ix:0": index}
    grid, one = _run(g, ["grid:0", "one:0"], feeds, backend)
    np.testing.assert_allclose(grid, _crop_kernel(image, boxes, index, (3, 4), -1.5), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(one, _crop_kernel(image, boxes, index, (1, 2), 0.0), rtol=1e-5, atol=1e-6)
    with pytest.raises(KernelError, match="box_index has values outside"):
        _run(g, ["grid:0"], {**feeds, "ix:0": np.asarray([1, 2, 0], np.int32)}, backend)


def _conv3d_numpy(x: np.ndarray, w: np.ndarray, strides: tuple[int, int, int], dilations: tuple[int, int, int],
                  pads: list[tuple[int, int]], out: tuple[int, int, int]) -> np.ndarray:
    """``y[n, d, i, j, o] = sum x_padded[n, d*s + a*r, ...] * w[a, b, c, ch, o]``: the definition."""
    xp = np.pad(x, [(0, 0), *pads, (0, 0)])
    y = np.zeros((x.shape[0], *out, w.shape[4]), np.float64)
    for d, i, j in np.ndindex(*out):
        for a, b, c in np.ndindex(*w.shape[:3]):
            patch = xp[:, d * strides[0] + a * dilations[0], i * strides[1] + b * dilations[1],
                       j * strides[2] + c * dilations[2]]
            y[:, d, i, j] += patch @ w[a, b, c]
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_conv3d_is_the_cross_correlation_over_depth_rows_and_columns(backend: str) -> None:
    """Law: ``Conv3D`` (NDHWC, DHWIO) is the 3-D cross-correlation with TensorFlow's padding per axis,
    here with a depth dilation and strides; its gradient ops are the correlation's transposes (checked
    by the sum they take with the upstream gradient: ``<conv(x, w), g>`` equals ``<x, dx>`` and
    ``<w, dw>``)."""
    rng = np.random.default_rng(12)
    x = rng.normal(size=(2, 5, 4, 3, 2)).astype(np.float32)
    w = rng.normal(size=(2, 2, 3, 2, 3)).astype(np.float32)
    g = GraphDef()
    xs, ws = g.placeholder("x", F32, [-1, 5, 4, 3, 2]), g.const("w", w)
    g.node("y", "Conv3D", (xs, ws), T=F32, strides=[1, 1, 2, 1, 1], dilations=[1, 2, 1, 1, 1], padding="SAME",
           data_format="NDHWC")
    (y,) = _run(g, ["y:0"], {"x:0": x}, backend)
    # SAME: depth 5 with a dilated tap span of 3 pads 1 before, 1 after; rows 4 / 2 pad 0+1; columns 3 pad 1+1
    want = _conv3d_numpy(x, w, (1, 2, 1), (2, 1, 1), [(1, 1), (0, 1), (1, 1)], (5, 2, 3))
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    up = rng.normal(size=y.shape).astype(np.float32)
    g.node("dx", "Conv3DBackpropInputV2", (g.const("xsize", np.asarray(x.shape, np.int32)), ws, g.const("up", up)),
           T=F32, strides=[1, 1, 2, 1, 1], dilations=[1, 2, 1, 1, 1], padding="SAME", data_format="NDHWC")
    g.node("dw", "Conv3DBackpropFilterV2", (xs, g.const("wsize", np.asarray(w.shape, np.int32)), "up"),
           T=F32, strides=[1, 1, 2, 1, 1], dilations=[1, 2, 1, 1, 1], padding="SAME", data_format="NDHWC")
    dx, dw = _run(g, ["dx:0", "dw:0"], {"x:0": x}, backend)
    inner = float((want * up).sum())
    np.testing.assert_allclose(float((x * dx).sum()), inner, rtol=1e-4)
    np.testing.assert_allclose(float((w * dw).sum()), inner, rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_xlog1py_is_zero_where_x_is_zero_and_its_gradients_are_tensorflows(backend: str) -> None:
    """Law: ``0 where x == 0`` (whatever y, -1 and NaN included), else ``x * log1p(y)``; gradients
    ``log1p(y)`` and ``x / (1 + y)`` where x != 0, else 0."""
    x = np.asarray([0.0, 0.0, 1.5, -2.0, 1.0], np.float32)
    y = np.asarray([-1.0, np.nan, 3.0, 0.5, -1.0], np.float32)
    g = GraphDef()
    g.node("z", "Xlog1py", (g.placeholder("x", F32, [5]), g.placeholder("y", F32, [5])), T=F32)
    (z,) = _run(g, ["z:0"], {"x:0": x, "y:0": y}, backend)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(z, np.where(x == 0, 0.0, x * np.log1p(y)), rtol=1e-6)
    assert z[0] == 0 and z[1] == 0 and z[4] == -np.inf
    xs, ys = x[:4], np.asarray([-0.5, 2.0, 3.0, 0.5], np.float32)
    g2 = GraphDef()
    g2.node("z", "Xlog1py", (g2.placeholder("x", F32, [4]), g2.placeholder("y", F32, [4])), T=F32)
    gx, gy = _grads(g2, "z:0", ["x:0", "y:0"], {"x:0": xs, "y:0": ys}, backend)
    nz = xs != 0
    np.testing.assert_allclose(gx, np.where(nz, np.log1p(ys), 0.0), rtol=1e-6)
    np.testing.assert_allclose(gy, np.where(nz, xs / (1 + ys), 0.0), rtol=1e-6)


def _greedy_nms(boxes: np.ndarray, scores: np.ndarray, limit: int, iou: float, threshold: float) -> list[int]:
    """TensorFlow's kernel: by decreasing score (ties: lower index), keep a box above the threshold
    overlapping no kept box by more than ``iou``."""
    def overlap(a: np.ndarray, b: np.ndarray) -> float:
        ya, xa, yb, xb = min(a[0], a[2]), min(a[1], a[3]), max(a[0], a[2]), max(a[1], a[3])
        yc, xc, yd, xd = min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])
        area_a, area_b = (yb - ya) * (xb - xa), (yd - yc) * (xd - xc)
        if area_a <= 0 or area_b <= 0:
            return 0.0
        inter = max(min(yb, yd) - max(ya, yc), 0) * max(min(xb, xd) - max(xa, xc), 0)
        return inter / (area_a + area_b - inter)
    kept: list[int] = []
    for i in sorted(range(len(scores)), key=lambda k: (-scores[k], k)):
        if len(kept) < limit and scores[i] > threshold and all(overlap(boxes[i], boxes[k]) <= iou for k in kept):
            kept.append(i)
    return kept


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_max_suppression_is_the_kernels_greedy_selection(backend: str) -> None:
    """Law: ``NonMaxSuppressionV3`` / ``V5`` (no soft suppression) keep boxes greedily by score, as
    the kernel: corners in either order, a box of no area overlapping nothing, ties by index. The
    kept count is known only when it runs: the fast backend runs this on the interpreter, saying so."""
    rng = np.random.default_rng(21)
    g = GraphDef()
    b, s = g.placeholder("b", F32, [12, 4]), g.placeholder("s", F32, [12])
    g.node("v3", "NonMaxSuppressionV3", (b, s, g.const("n3", np.int32(6)), g.const("i3", np.float32(0.3)),
                                         g.const("t3", np.float32(0.2))), T=F32, T_threshold=F32)
    g.node("v5", "NonMaxSuppressionV5", (b, s, g.const("n5", np.int32(12)), g.const("i5", np.float32(0.5)),
                                         g.const("t5", np.float32(-1.0)), g.const("sigma", np.float32(0.0))),
           T=F32, pad_to_max_output_size=False)
    for _ in range(3):
        corner = rng.uniform(0, 1, size=(12, 2)).astype(np.float32)
        boxes = np.concatenate([corner, corner + rng.uniform(0.05, 0.5, size=(12, 2)).astype(np.float32)], 1)
        boxes[4] = boxes[4][[2, 3, 0, 1]]
        boxes[7, 2] = boxes[7, 0]
        scores = np.round(rng.uniform(0, 1, size=12), 1).astype(np.float32)
        fallback = pytest.warns(RuntimeWarning, match="known only at run time") if backend == "fast" else nullcontext()
        with fallback:
            v3, v5, v5s, v5n = _run(g, ["v3:0", "v5:0", "v5:1", "v5:2"], {"b:0": boxes, "s:0": scores}, backend)
        assert v3.tolist() == _greedy_nms(boxes, scores, 6, 0.3, 0.2)
        assert v5.tolist() == _greedy_nms(boxes, scores, 12, 0.5, -1.0) and int(v5n) == len(v5)
        np.testing.assert_array_equal(v5s, scores[v5])


def _bad_node(op: str, ins: list[tuple[str, int, list[int]]], **attrs: Any) -> GraphDef:
    g = GraphDef()
    names = [g.placeholder(n, t, shape) for n, t, shape in ins]
    g.node("bad", op, tuple(names), **attrs)
    return g


_I64 = 9


@pytest.mark.parametrize(("graph", "error", "match"), [
    (lambda: _bad_node("Multinomial", [("l", F32, [2, 3, 4]), ("n", I32, [])], T=F32), ArgumentError,
     "logits should be a matrix"),
    (lambda: _bad_node("LogUniformCandidateSampler", [("t", I32, [-1, 1])], num_true=1, num_sampled=2, unique=True,
                       range_max=5), ArgumentError, "true_classes must be an int64 tensor"),
    (lambda: _bad_node("LogUniformCandidateSampler", [("t", _I64, [-1, 1])], num_true=1, num_sampled=9, unique=True,
                       range_max=5), ArgumentError, "Sampler's range is too small"),
    (lambda: _bad_node("CTCLoss", [("x", F32, [3, 4]), ("i", _I64, [-1, 2]), ("v", I32, [-1]), ("l", I32, [-1])]),
     ArgumentError, "inputs must be 3-D"),
    (lambda: _bad_node("Cholesky", [("x", I32, [2, 2])], T=I32), DTypeError, "must be float32 or float64"),
    (lambda: _bad_node("MatrixSolve", [("a", F32, [3, 3]), ("b", F32, [2, 1])], T=F32), ShapeError, "cannot solve"),
    (lambda: _bad_node("CropAndResize", [("im", F32, [1, 4, 4, 1]), ("b", F32, [-1, 4]), ("i", I32, [-1]),
                                         ("s", I32, [2])], T=F32, method="nearest"), UnsupportedError,
     "only method='bilinear' is built"),
    (lambda: _bad_node("Conv3D", [("x", F32, [1, -1, 3, 3, 2]), ("w", F32, [1, 1, 1, 2, 2])], T=F32,
                       strides=[1, 1, 1, 1, 1], padding="SAME"), UnsupportedError, "needs the input's depth"),
    (lambda: _bad_node("NonMaxSuppressionV3", [("b", F32, [-1, 4]), ("s", F32, [-1]), ("k", I32, []),
                                               ("i", F32, []), ("t", F32, [])], T=F32), UnsupportedError,
     "needs the number of boxes"),
    (lambda: _bad_node("DenseBincount", [("a", I32, [2, 2]), ("n", I32, []), ("w", I32, [0])], T=I32, Tidx=I32),
     UnsupportedError, "supported for a vector input"),
], ids=["multinomial_rank", "sampler_dtype", "sampler_range", "ctc_rank", "cholesky_dtype", "solve_rows",
        "crop_method", "conv3d_depth", "nms_count", "bincount_rank"])
def test_bad_nodes_of_this_sessions_rules_are_errors_naming_the_node(graph: Any, error: type, match: str) -> None:
    """Law: a node the rule cannot build is a Turnout error naming it (never numpy's or a parser's)."""
    with pytest.raises(error, match=f'node "bad".*{match}'):
        import_graph_def(graph().gd)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_old_reverse_flips_the_dimensions_its_bools_name(backend: str) -> None:
    """Law (TensorFlow 1's ``Reverse``): ``x`` reversed along each dimension whose ``dims`` entry is
    true, as ``ReverseV2`` along those axes."""
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    g = GraphDef()
    xs = g.const("x", x)
    g.node("r", "Reverse", (xs, g.const("d", np.asarray([True, False, True]))), T=F32)
    g.node("none", "Reverse", (xs, g.const("n", np.asarray([False, False, False]))), T=F32)
    r, none = _run(g, ["r:0", "none:0"], {}, backend)
    np.testing.assert_array_equal(r, x[::-1, :, ::-1])
    np.testing.assert_array_equal(none, x)
