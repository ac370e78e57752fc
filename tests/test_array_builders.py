"""TensorFlow's array functions as ``tn`` builders (``turnout.array_ops``, ``turnout.nn``): ``range``,
``squeeze``, ``unstack``, ``split``, ``slice``, ``one_hot``, ``argmax``/``argmin``, ``rank``,
``clip_by_value``, ``nn.softmax``, ``nn.log_softmax``.

Each law is checked on the compiled routes and their oracle (``route_table.COMPILED_ROUTES``) against
the same function in numpy or ``jax.numpy``, values and ``jax.grad`` gradients: with static shapes,
with sizes known only when the program runs (where the builders' run-time checks fail the same way on
every route), inside ``while_loop`` and ``map_fn``; and bad arguments are build-time errors naming the
function and the argument. The last tests check that the importer builds these ops as the builders do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from route_table import COMPILED_ROUTES, run_on, run_strictly
from route_table import in_jax as _jax

import turnout as tn

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

ROUTES = sorted(COMPILED_ROUTES)
RNG = np.random.RandomState(7)
XV = RNG.randn(2, 1, 3)
WEIGHTS = {k: RNG.randn(*s) for k, s in [("squeeze", (2, 3)), ("unstack", (2, 1)), ("split", (2, 1, 2)),
                                         ("slice", (1, 1, 2)), ("one_hot", (3, 3)), ("clip", (2, 1, 3)),
                                         ("softmax", (2, 1, 3)), ("log_softmax", (2, 1, 3))]}
IDX = np.asarray([0, 2, 5], np.int32)  # 5 is out of range: a row of off_value


def _losses(lib: Any, x: Any) -> dict[str, Any]:
    """One scalar per builder, the same formula on ``tn`` and on ``jnp`` (``lib`` maps the names)."""
    w = WEIGHTS
    return {
        "squeeze": lib["sum"](lib["squeeze"](x) * w["squeeze"]),
        "unstack": lib["sum"](lib["unstack"](x)[2] * w["unstack"]),
        "split": lib["sum"](lib["split"](x)[1] * w["split"]),
        "slice": lib["sum"](lib["slice"](x) * w["slice"]),
        "one_hot": lib["sum"](lib["one_hot"](x) * w["one_hot"]),
        "clip": lib["sum"](lib["clip"](x) * w["clip"]),
        "softmax": lib["sum"](lib["softmax"](x) * w["softmax"]),
        "log_softmax": lib["sum"](lib["log_softmax"](x) * w["log_softmax"]),
    }


TN = {
    "sum": tn.reduce_sum, "squeeze": lambda x: tn.squeeze(x, 1), "unstack": lambda x: tn.unstack(x, axis=2),
    "split": lambda x: tn.split(x, [1, -1], axis=2), "slice": lambda x: tn.slice(x, [1, 0, 1], [1, -1, 2]),
    "one_hot": lambda x: tn.one_hot(IDX, 3, on_value=x[0, 0, 0], off_value=x[1, 0, 2], dtype=tn.float64),
    "clip": lambda x: tn.clip_by_value(x, -0.5, 0.5), "softmax": lambda x: tn.nn.softmax(x, axis=0),
    "log_softmax": tn.nn.log_softmax,
}
JNP = {
    "sum": jnp.sum, "squeeze": lambda x: jnp.squeeze(x, 1), "unstack": lambda x: [x[:, :, k] for k in range(3)],
    "split": lambda x: jnp.split(x, [1], axis=2), "slice": lambda x: x[1:2, 0:, 1:3],
    "one_hot": lambda x: jnp.where(jax.nn.one_hot(IDX, 3) > 0, x[0, 0, 0], x[1, 0, 2]),
    "clip": lambda x: jnp.clip(x, -0.5, 0.5), "softmax": lambda x: jax.nn.softmax(x, axis=0),
    "log_softmax": jax.nn.log_softmax,
}


@pytest.mark.parametrize("route", ROUTES)
def test_each_builder_computes_jaxs_values_and_gradients(route: str) -> None:
    """Every builder's value and the gradient of a weighted sum of it equal JAX's, on every route."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [2, 1, 3])
        losses = _losses(TN, x)
        grads = {k: tn.gradients(v, [x])[0] for k, v in losses.items()}
        values = {"argmax": tn.argmax(x, 2), "argmin": tn.argmin(x, -1, output_type=tn.int32), "rank": tn.rank(x),
                  "range": tn.range(1, 2.5, 0.5), "range_down": tn.range(10, 1, -3, dtype=tn.int64)}
    got = run_strictly(route, g, {"losses": losses, "grads": grads, "values": values}, {x: XV})
    for k in losses:
        want, dwant = _jax(jax.value_and_grad(lambda v, k=k: _losses(JNP, v)[k]), XV)
        np.testing.assert_allclose(got["losses"][k], want, rtol=1e-12, err_msg=k)
        np.testing.assert_allclose(got["grads"][k], dwant, rtol=1e-12, atol=1e-15, err_msg=k)
    v = got["values"]
    np.testing.assert_array_equal(v["argmax"], np.argmax(XV, 2))
    assert v["argmax"].dtype == np.int64 and v["argmin"].dtype == np.int32
    np.testing.assert_array_equal(v["argmin"], np.argmin(XV, -1))
    assert v["rank"] == 3
    np.testing.assert_array_equal(v["range"], np.asarray([1.0, 1.5, 2.0], np.float32))
    np.testing.assert_array_equal(v["range_down"], [10, 7, 4])
    assert v["range"].dtype == np.float32 and v["range_down"].dtype == np.int64


# ---- sizes known only when the program runs --------------------------------------------------------------
def _run_time_graph() -> tuple[tn.Graph, dict[str, Any], dict[str, Any]]:
    g = tn.Graph()
    with g.as_default():
        y = tn.placeholder(tn.float64, [None, None], name="y")
        n = tn.placeholder(tn.int32, [], name="n")
        d = tn.placeholder(tn.int32, [], name="d")
        f = tn.placeholder(tn.float32, [], name="f")
        out = {
            "range": tn.range(n), "range_step": tn.range(n, 1, d), "range_float": tn.range(0.0, f, 0.75),
            "squeeze": tn.squeeze(y, 1), "unstack": tn.unstack(y, num=4), "split": tn.split(y, 2),
            "split_rest": tn.split(y, [1, -1, 1]), "slice": tn.slice(y, [1, 0], [2, -1]), "rank": tn.rank(y),
        }
        middle = tn.squeeze(tn.split(y, [1, -1, 1])[1], 1)  # y[1:3, 0], twice: the gradient is 2 y there
        grad = tn.gradients(tn.reduce_sum(middle * tn.squeeze(tn.slice(y, [1, 0], [2, 1]), 1)), [y])[0]
    return g, {**out, "grad": grad}, {"y": y, "n": n, "d": d, "f": f}


@pytest.mark.parametrize("route", ROUTES)
def test_run_time_sizes_give_numpys_values(route: str) -> None:
    """A range of run-time bounds is ``np.arange`` of them (empty when the bounds are the wrong way
    round), and the slices of an axis of run-time size are numpy's."""
    g, out, ph = _run_time_graph()
    yv = np.arange(4.0).reshape(4, 1) + 0.5
    for nv, dv, fv in [(5, -2, 2.0), (0, 3, -1.0)]:
        got = run_strictly(route, g, out, {ph["y"]: yv, ph["n"]: nv, ph["d"]: dv, ph["f"]: np.float32(fv)})
        np.testing.assert_array_equal(got["range"], np.arange(nv, dtype=np.int32))
        np.testing.assert_array_equal(got["range_step"], np.arange(nv, 1, dv, dtype=np.int32))
        np.testing.assert_allclose(got["range_float"], np.arange(0.0, fv, 0.75, dtype=np.float32))
    np.testing.assert_array_equal(got["squeeze"], yv[:, 0])
    for k in range(4):
        np.testing.assert_array_equal(got["unstack"][k], yv[k])
    np.testing.assert_array_equal(got["split"][1], yv[2:])
    for part, want in zip(got["split_rest"], [yv[:1], yv[1:3], yv[3:]], strict=True):
        np.testing.assert_array_equal(part, want)
    np.testing.assert_array_equal(got["slice"], yv[1:3])
    assert got["rank"] == 2
    want_grad = np.zeros_like(yv)
    want_grad[1:3] = 2 * yv[1:3]
    np.testing.assert_array_equal(got["grad"], want_grad)


RUN_TIME_ERRORS = [
    ("squeeze", np.zeros((4, 2)), r"squeeze: axis 1 must have size 1"),
    ("unstack", np.zeros((3, 1)), r"unstack: axis 0 must have size num=4"),
    ("split", np.zeros((3, 1)), r"split: num_or_size_splits=2 does not divide axis 0"),
    ("split_rest", np.zeros((1, 1)), r"split: axis 0 must have at least 2 entries"),
    ("slice", np.zeros((2, 1)), r"slice: begin\[0\]=1, size\[0\]=2 do not lie in axis 0"),
    ("range_step", np.zeros((4, 1)), r"range: delta must not be 0"),
]
#: a fed delta of 0 leaves the fast backend no length to compile the range with: it runs the program
#: on the interpreter (with its RuntimeWarning), which raises the check's KernelError
FALLS_BACK = {"range_step"}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("fetch, yv, message", RUN_TIME_ERRORS, ids=[c[0] for c in RUN_TIME_ERRORS])
def test_sizes_that_do_not_fit_when_it_runs_are_kernel_errors(route: str, fetch: str, yv: Any, message: str) -> None:
    """What a builder cannot check when building (an axis of unknown size is 1, is num long, splits,
    holds the slice; a delta that is fed) is checked when it runs: a KernelError naming the builder,
    the same on every route, never a value computed from a clipped or truncated slice."""
    g, out, ph = _run_time_graph()
    run = run_on if fetch in FALLS_BACK else run_strictly
    with pytest.raises(tn.KernelError, match=message):
        run(route, g, out[fetch], {ph["y"]: yv, ph["n"]: 3, ph["d"]: 0, ph["f"]: np.float32(1.0)})


# ---- inside loops ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("route", ROUTES)
def test_builders_inside_while_loop_and_map_fn(route: str) -> None:
    """In a ``while_loop`` body, ``sum(range(i))`` (a run-time length each iteration) and a softmax
    of the scaled input; in ``map_fn``, each row's one-hot argmax times its log-softmax; values and
    the gradient through both against plain Python and ``jax.grad``."""
    x2 = RNG.randn(3, 4)
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [3, 4])

        def body(i: Any, tri: Any, acc: Any) -> Any:
            s = tn.cast(i, tn.float64)
            return i + 1, tri + tn.reduce_sum(tn.range(i)), acc + tn.reduce_sum(tn.nn.softmax(x * s) * x)

        start = [tn.constant(0), tn.constant(0), tn.constant(0.0, tn.float64)]
        _, tri, acc = tn.while_loop(lambda i, t, a: i < 4, body, start)
        rows = tn.map_fn(lambda r: tn.one_hot(tn.argmax(r, 0), 4, dtype=tn.float64) * tn.nn.log_softmax(r), x)
        loss = acc + tn.reduce_sum(rows)
        (dx,) = tn.gradients(loss, [x])
    got_tri, got_loss, got_dx = run_strictly(route, g, [tri, loss, dx], {x: x2})
    assert got_tri == sum(sum(range(i)) for i in range(4))

    def jloss(v: Any) -> Any:
        acc = sum(jnp.sum(jax.nn.softmax(v * float(i)) * v) for i in range(4))
        hot = jax.nn.one_hot(jnp.argmax(v, 1), 4)
        return acc + jnp.sum(hot * jax.nn.log_softmax(v))

    want, dwant = _jax(jax.value_and_grad(jloss), x2)
    np.testing.assert_allclose(got_loss, want, rtol=1e-12)
    np.testing.assert_allclose(got_dx, dwant, rtol=1e-12, atol=1e-15)


# ---- bad arguments ---------------------------------------------------------------------------------------
BUILD_ERRORS = [
    (lambda x: tn.squeeze(x, 3), tn.ShapeError, r"squeeze: axis 3 is out of range for a tensor of rank 3"),
    (lambda x: tn.squeeze(x, 0), tn.ShapeError, r"squeeze: axis 0 of x has size 2, not 1"),
    (lambda x: tn.squeeze(tn.placeholder(tn.float32, [None, 1])), tn.ShapeError, r"squeeze: axis=None needs"),
    (lambda x: tn.unstack(tn.placeholder(tn.float32, [None])), tn.ShapeError, r"unstack: num is not given"),
    (lambda x: tn.unstack(x, num=3), tn.ShapeError, r"unstack: num=3 does not match the size 2"),
    (lambda x: tn.split(x, [1, 1], axis=2), tn.ShapeError, r"split: sizes \[1, 1\] do not sum to the size 3"),
    (lambda x: tn.split(x, 2, axis=-1), tn.ShapeError, r"split: num_or_size_splits=2 does not divide axis 2"),
    (lambda x: tn.split(x, [-1, -1], axis=2), tn.ShapeError, r"split: num_or_size_splits \[-1, -1\]"),
    (lambda x: tn.slice(x, [0, 0, 2], [1, 1, 2]), tn.ShapeError, r"slice: begin\[2\]=2, size\[2\]=2 do not lie"),
    (lambda x: tn.slice(x, [0, 0], [1, 1]), tn.ShapeError, r"slice: begin \[0, 0\] and size \[1, 1\] must have"),
    (lambda x: tn.one_hot([1, 2], -1), tn.ShapeError, r"one_hot: depth must be >= 0, got -1"),
    (lambda x: tn.one_hot([1, 2], 3, axis=2), tn.ShapeError, r"one_hot: axis 2 is out of range"),
    (lambda x: tn.one_hot(x, 3), tn.DTypeError, r"one_hot: indices must be integers"),
    (lambda x: tn.argmax(x, 3), tn.ShapeError, r"argmax: axis 3 is out of range"),
    (lambda x: tn.argmin(x, 0, output_type=tn.float32), tn.DTypeError, r"argmin: output_type must be int32"),
    (lambda x: tn.argmax(x, 1.0), tn.GraphBuildError, r"argmax: axis must be an int"),
    (lambda x: tn.range(0, 5, 0), tn.GraphBuildError, r"range: delta must not be 0"),
    (lambda x: tn.range(tn.constant(5), 0, 0), tn.GraphBuildError, r"range: delta must not be 0"),
    (lambda x: tn.range(tn.constant(5), tn.constant(2.0)), tn.DTypeError, r"range: limit is float32, the range is "),
    (lambda x: tn.range(tn.zeros([2], tn.int32)), tn.ShapeError, r"range: limit must be a scalar"),
    (lambda x: tn.clip_by_value(x, tn.constant(0), 1.0), tn.DTypeError, r"clip_by_value: the bounds must have"),
    (lambda x: tn.nn.softmax(x, axis=-4), tn.ShapeError, r"softmax: axis -4 is out of range"),
    (lambda x: tn.nn.log_softmax(tn.constant([1, 2])), tn.DTypeError, r"log_softmax: x must be floating"),
]


@pytest.mark.parametrize("make, error, message", BUILD_ERRORS, ids=[str(k) for k in range(len(BUILD_ERRORS))])
def test_bad_arguments_are_build_errors_naming_the_function_and_argument(make: Any, error: type, message: str) -> None:
    """Arguments that cannot be right whatever is fed fail when building, with a Turnout error that
    names the builder and the argument."""
    with tn.Graph().as_default():
        with pytest.raises(error, match=message):
            make(tn.placeholder(tn.float32, [2, 1, 3]))


# ---- the importer builds these ops as the builders do ----------------------------------------------------
def _ops(g: tn.Graph) -> list[str]:
    return [n.op for n in g.nodes if n.op not in ("Placeholder", "Const")]


def test_imported_ops_are_built_as_the_builders_build_them() -> None:
    """An imported Softmax, LogSoftmax, ClipByValue, OneHot, Squeeze, Unpack, SplitV and Slice are
    the nodes ``tn`` builds for the same call: one construction (``turnout.composite``), so a ported
    program and an imported one compute the same thing, gradients included."""
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")
    from test_graphdef_model_ops import F32, I32, GraphDef

    def c(g: Any, name: str, v: Any) -> str:
        return g.const(name, np.asarray(v, np.float32 if isinstance(v, float) else np.int32))

    cases = [
        ("Softmax", lambda g: ("x",), {"T": F32}, lambda x, i: tn.nn.softmax(x)),
        ("LogSoftmax", lambda g: ("x",), {"T": F32}, lambda x, i: tn.nn.log_softmax(x)),
        ("ClipByValue", lambda g: ("x", c(g, "lo", 0.0), c(g, "hi", 1.0)), {"T": F32},
         lambda x, i: tn.clip_by_value(x, 0.0, 1.0)),
        ("OneHot", lambda g: ("i", c(g, "depth", 3), c(g, "on", 1.0), c(g, "off", 0.0)),
         {"T": F32, "TI": I32, "axis": -1}, lambda x, i: tn.one_hot(i, 3)),
        ("Squeeze", lambda g: ("x",), {"T": F32, "squeeze_dims": [1]}, lambda x, i: tn.squeeze(x, 1)),
        ("Unpack", lambda g: ("x",), {"T": F32, "num": 3, "axis": 2}, lambda x, i: tn.unstack(x, axis=2)),
        ("SplitV", lambda g: ("x", c(g, "sizes", [1, -1]), c(g, "axis", 2)), {"T": F32, "Tlen": I32, "num_split": 2},
         lambda x, i: tn.split(x, [1, -1], axis=2)),
        ("Slice", lambda g: ("x", c(g, "begin", [1, 0, 1]), c(g, "size", [1, -1, 2])), {"T": F32, "Index": I32},
         lambda x, i: tn.slice(x, [1, 0, 1], [1, -1, 2])),
    ]
    for op, inputs, attrs, build in cases:
        g = GraphDef()
        g.placeholder("x", F32, [2, 1, 3])
        g.placeholder("i", I32, [4])
        g.node("op", op, inputs(g), **attrs)
        imported = tn.import_graph_def(g.gd).graph
        built = tn.Graph()
        with built.as_default():
            build(tn.placeholder(tn.float32, [2, 1, 3]), tn.placeholder(tn.int32, [4]))
        assert _ops(imported) == _ops(built), op


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_imported_squeeze_and_split_of_run_time_sizes_check_them_when_run(backend: str) -> None:
    """Regression: an imported Squeeze, Unpack or Split of an axis whose size is known only when the
    program runs was refused when importing; built as ``tn`` builds them, they now run, and a size
    that does not fit is a KernelError naming the NodeDef (as TensorFlow fails), never a slice of it."""
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")
    from test_graphdef_model_ops import F32, GraphDef, _run

    g = GraphDef()
    y = g.placeholder("y", F32, [-1, -1])
    g.node("sq", "Squeeze", (y,), T=F32, squeeze_dims=[1])
    g.node("un", "Unpack", (y,), T=F32, num=2, axis=0)
    g.node("sp", "Split", (g.const("axis", np.int32(0)), y), T=F32, num_split=2)
    yv = np.asarray([[1.0], [2.0]], np.float32)
    sq, un1, sp1 = _run(g, ["sq:0", "un:1", "sp:1"], {"y:0": yv}, backend)
    np.testing.assert_array_equal(sq, [1.0, 2.0])
    np.testing.assert_array_equal(un1, [2.0])
    np.testing.assert_array_equal(sp1, [[2.0]])
    for fetch, shape, message in [("sq:0", (2, 2), r'Squeeze node "sq": axis 1 must have size 1'),
                                  ("un:0", (3, 1), r'Unpack node "un": axis 0 must have size num=2'),
                                  ("sp:0", (3, 1), r'Split node "sp": num_or_size_splits=2')]:
        with pytest.raises(tn.KernelError, match=message):
            _run(g, [fetch], {"y:0": np.zeros(shape, np.float32)}, backend)


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_an_imported_range_of_a_run_time_limit_is_read_as_tns_range(backend: str) -> None:
    """Regression: ``tf.range(2, n, 3)`` with a fed ``n``, read by an op other than a TensorArray's
    gather or scatter, was refused when importing ("a Range with run-time bounds"); it is now the
    tensor ``tn.range`` builds (``array_ops.range_part``), ``np.arange(2, n, 3)``, empty when ``n <= 2``."""
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")
    from test_graphdef_model_ops import I32, GraphDef, _run

    g = GraphDef()
    n = g.placeholder("n", I32, [])
    g.node("r", "Range", (g.const("start", np.int32(2)), n, g.const("delta", np.int32(3))), Tidx=I32)
    g.node("twice", "Mul", ("r", g.const("two", np.int32(2))), T=I32)
    for nv in (9, 2, -4):
        (got,) = _run(g, ["twice:0"], {"n:0": np.int32(nv)}, backend)
        np.testing.assert_array_equal(got, 2 * np.arange(2, nv, 3, dtype=np.int32))


def test_builders_export_to_tensorflow_and_import_back_to_the_same_values() -> None:
    """The builders' nodes are primitives that export (``tn.export_graph_def``): imported back, the
    graph computes the same values, and a run-time check still fails, with the builder's message."""
    pytest.importorskip("tensorboard.compat.proto.graph_pb2")
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2, 1, 3], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        y = tn.placeholder(tn.float32, [None, None], name="y")
        outs = [tn.range(n), tn.squeeze(y, 1), tn.split(y, 2)[1], tn.slice(y, [1, 0], [2, -1]), tn.one_hot([0, 2], 3),
                tn.argmax(x, 2), tn.clip_by_value(x, 0.0, 1.0), tn.nn.log_softmax(x), tn.unstack(x, axis=2)[1]]
    exported = tn.export_graph_def(g)
    imp = tn.import_graph_def(exported.graph_def)
    names = [exported.tf_name(t) for t in outs]
    xv, yv = XV.astype(np.float32), np.arange(4.0, dtype=np.float32).reshape(4, 1)
    want = tn.Session(g).run(outs, {x: xv, n: 4, y: yv})
    got = imp.run(tn.Session(imp.graph), names, {"x:0": xv, "n:0": np.int32(4), "y:0": yv})
    for name, a, b in zip(names, want, got, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
    with pytest.raises(tn.KernelError, match="squeeze: axis 1 must have size 1"):
        imp.run(tn.Session(imp.graph), names[1:2], {"y:0": np.zeros((4, 2), np.float32)})


# ---- against TensorFlow itself, where it is installed -------------------------------------------------------
_TF_CASES = """
import sys
import numpy as np
import tensorflow as tf
x = np.load(sys.argv[1])
out = {"one_hot": tf.one_hot([0, 2, -1, 3], 3, on_value=5.0, off_value=-1.0, axis=0),
       "split": tf.split(x, [1, -1], axis=2)[1], "range_float": tf.range(0.3, 2.0, 0.35),
       "range_down": tf.range(10, 1, -3),
       "clip": tf.clip_by_value(x, 0.5, -0.5), "softmax": tf.nn.softmax(x, axis=0), "log_softmax": tf.nn.log_softmax(x),
       "argmax": tf.argmax(x, 2), "slice": tf.slice(x, [1, 0, 1], [1, -1, 2]), "squeeze": tf.squeeze(x),
       "unstack": tf.unstack(x, axis=2)[2], "rank": tf.rank(x)}
np.savez(sys.argv[2], **{k: v.numpy() for k, v in out.items()})
"""


def test_builders_compute_tensorflows_values_dtypes_and_shapes(tmp_path: Any) -> None:
    """Where TensorFlow is installed (``TURNOUT_TF_PYTHON`` names its Python), each builder gives
    what the TensorFlow function of the same name gives on the same input: dtype, shape and value
    (softmax to a float32 rounding), including TensorFlow's corners (an index out of range in
    ``one_hot`` along axis 0, ``clip_by_value`` with ``lo > hi``, a float range, a -1 split size)."""
    import os
    import subprocess

    python = os.environ.get("TURNOUT_TF_PYTHON")
    if python is None:
        pytest.skip("TensorFlow's Python is not given (set TURNOUT_TF_PYTHON)")
    xv = XV.astype(np.float32)
    np.save(tmp_path / "x.npy", xv)
    done = subprocess.run([python, "-c", _TF_CASES, str(tmp_path / "x.npy"), str(tmp_path / "tf.npz")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    want = np.load(tmp_path / "tf.npz")
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2, 1, 3])
        ours = {"one_hot": tn.one_hot([0, 2, -1, 3], 3, on_value=5.0, off_value=-1.0, axis=0),
                "split": tn.split(x, [1, -1], axis=2)[1], "range_float": tn.range(0.3, 2.0, 0.35),
                "range_down": tn.range(10, 1, -3), "clip": tn.clip_by_value(x, 0.5, -0.5),
                "softmax": tn.nn.softmax(x, axis=0), "log_softmax": tn.nn.log_softmax(x), "argmax": tn.argmax(x, 2),
                "slice": tn.slice(x, [1, 0, 1], [1, -1, 2]), "squeeze": tn.squeeze(x),
                "unstack": tn.unstack(x, axis=2)[2], "rank": tn.rank(x)}
    got = tn.Session(g).run(ours, {x: xv})
    assert set(got) == set(want.files)
    for k, v in got.items():
        assert (v.dtype, v.shape) == (want[k].dtype, want[k].shape), k
        np.testing.assert_allclose(v, want[k], rtol=2e-7, atol=0, err_msg=k)
