"""An ``Assert`` that shows data: the values of tensors in its message, as TensorFlow prints them, on
every backend.

The expected strings below are TensorFlow's own: each was printed by TensorFlow 2.21's v1 ``Assert``
(graph mode, control flow v1) for the same data and ``summarize``, so the formatting rules of
``turnout.summarize`` are checked against the framework whose messages TF1 users know.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout.summarize import assert_message, summarize_value

#: (data, summarize, what TensorFlow's Assert printed after "assertion failed: ")
TF_PRINTED: list[tuple[list[Any], int, str]] = [
    (["inputs must be below 100, got", np.array([[200, 1.5, -3.25], [4, 5, 6]], np.float32), "and",
      np.array([1, 2, 3, 4, 5], np.int32), np.float32(2.5)], 3,
     "[inputs must be below 100, got] [[200 1.5 -3.25]...] [and] [1 2 3...] [2.5]"),
    ([np.array([[200, 1.5, -3.25], [4, 5, 6]], np.float32)], 10, "[[200 1.5 -3.25][4 5 6]]"),
    ([np.full((4, 3), 1e9, np.float32)], 10,
     "[[1e+09 1e+09 1e+09][1e+09 1e+09 1e+09][1e+09 1e+09 1e+09][1e+09...]...]"),
    ([np.array([[200, 0.1, 1e-7]], np.float32)], 3, "[[200 0.1 1e-07]]"),
    ([np.array([True, False]), np.int64(7), np.array([1 / 3, 2e10, -0.0]), np.array([1 / 3, 123456789.0], np.float32),
      np.zeros((0, 2), np.float32), np.float32(np.nan), np.float32(np.inf),
      np.arange(8, dtype=np.int32).reshape(2, 2, 2)],
     3, "[1 0] [7] [0.33333333333333331 20000000000 -0] [0.333333343 123456792] [] [nan] [inf] [[[0 1][2...]]...]"),
]


@pytest.mark.parametrize("data,limit,printed", TF_PRINTED)
def test_data_are_shown_as_tensorflow_prints_them(data: list[Any], limit: int, printed: str) -> None:
    shown = [d if isinstance(d, str) else None for d in data]
    values = [d for d in data if not isinstance(d, str)]
    assert assert_message("assertion failed:", shown, values, limit) == f"assertion failed: {printed}"


def test_a_negative_summarize_shows_every_element() -> None:
    assert summarize_value(np.arange(7, dtype=np.int32), -1) == "0 1 2 3 4 5 6"
    assert summarize_value(np.arange(7, dtype=np.int32), 0) == "..."


def _program() -> tuple[tn.Graph, dict[str, tn.Tensor], dict[Any, Any]]:
    """A root Assert showing a fed matrix, a vector and a constant, and one in a loop body showing the
    iteration's counter and running sum (it fails in the iteration where the sum reaches 5)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 3], name="x")
        i = tn.placeholder(tn.int32, [None], name="i")
        checked = tn.assert_true(tn.reduce_all(x < 100.0), x, "inputs must be below 100, got",
                                 data=[x, i, tn.constant(np.float32(2.5))], name="check") * 2.0

        def body(k: tn.Tensor, s: tn.Tensor) -> list[tn.Tensor]:
            return [k + 1, tn.assert_true(s < 5.0, s + 1.5, "running sum", data=[k, s], name="in_loop")]

        _, total = tn.while_loop(lambda k, s: k < 10, body, [tn.constant(0), tn.constant(0.0)])
    feeds = {x: np.array([[200.0, 1.5, -3.25], [4, 5, 6]], np.float32), i: np.arange(1, 6, dtype=np.int32)}
    return g, {"root": checked, "loop": total}, feeds


SESSIONS = {
    "reference": {"backend": "reference"},
    "smallstep": {"backend": "smallstep"},
    "fast": {"backend": "fast"},
    "fast, partitioned": {"backend": "fast", "devices": ["cpu:0", "cpu:1"]},
    "reference, partitioned": {"backend": "reference", "devices": ["cpu:0", "cpu:1"]},
}


@pytest.mark.parametrize("route", list(SESSIONS))
def test_every_backend_shows_the_failing_runs_values(route: str) -> None:
    """The message ends with the values of the run that failed: the fed ones at the root, and in the
    loop those of the iteration whose check failed (k = 4, s = 6), never a later or earlier one."""
    if "fast" in route:
        pytest.importorskip("jax")
    g, fetch, feeds = _program()
    sess = tn.Session(g, **SESSIONS[route])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # (compiled where the route compiles)
        with pytest.raises(tn.KernelError) as root:
            sess.run(fetch["root"], feeds)
        with pytest.raises(tn.KernelError) as loop:
            sess.run(fetch["loop"], feeds)
    assert str(root.value).endswith("Assert: inputs must be below 100, got [[200 1.5 -3.25]...] [1 2 3...] [2.5]")
    assert 'Assert node "check"' in str(root.value)
    assert str(loop.value).endswith("Assert: running sum [4] [6]")
    # a passing run shows nothing and fails nothing
    ok = {**feeds, next(iter(feeds)): np.zeros((2, 3), np.float32)}
    np.testing.assert_array_equal(sess.run(fetch["root"], ok), np.zeros((2, 3), np.float32))


def test_an_imported_tensorflow_assert_fails_with_tensorflows_message() -> None:
    """The TF-made softmax classifier's ``Assert`` (``tf.compat.v1.Assert(..., ["inputs must be below
    100, got", x])``) fails a run with the line TensorFlow printed for the same feed, on both backends."""
    from turnout.graphdef import import_graph_def

    imp = import_graph_def(Path(__file__).parent / "data" / "tf" / "softmax_adagrad.pbtxt")
    x, y = imp.tensor("x:0"), imp.tensor("y:0")
    loss = imp.tensor("Mean:0")
    feeds = {x: np.full((2, 3), 200.0, np.float32), y: np.eye(4, dtype=np.float32)[[0, 1]]}
    for backend in ("reference", "fast"):
        with pytest.raises(tn.KernelError) as e:
            tn.Session(imp.graph, backend=backend).run(loss, feeds)
        assert str(e.value).endswith("Assert: assertion failed: [inputs must be below 100, got] "
                                     "[[200 200 200]...]")


def test_the_data_have_no_gradient_and_the_value_passes_its_through() -> None:
    g = tn.Graph()
    with g.as_default():
        w = tn.placeholder(tn.float32, [2], name="w")
        y = tn.reduce_sum(tn.assert_true(tn.reduce_all(w > 0.0), w * w, "positive", data=[w, w * 3.0]))
        (dw,) = tn.gradients(y, [w])
    for backend in ("reference", "fast"):
        np.testing.assert_allclose(tn.Session(g, backend=backend).run(dw, {w: [1.0, 2.0]}), [2.0, 4.0])


def test_a_graph_with_shown_data_saves_and_loads() -> None:
    from turnout.serialize import dumps, loads

    g, fetch, feeds = _program()
    again = loads(dumps(g))
    node = next(n for n in again.nodes if n.name == "check")
    assert node.attrs["shown"] == [None, None, None] and node.attrs["summarize"] == 3
    with pytest.raises(tn.KernelError, match=r"\[1 2 3\.\.\.\] \[2\.5\]$"):
        tn.Session(again, backend="reference").run(node.outputs[0], {again.tensor("x:0"): feeds[next(iter(feeds))],
                                                                    again.tensor("i:0"): np.arange(1, 6)})


@pytest.mark.parametrize("attr,value,says", [("shown", [None, 3], "list of strings and nulls"),
                                             ("shown", [None], "shows 1 data but the node has 3"),
                                             ("summarize", "3", "must be an integer")])
def test_a_saved_assert_with_bad_attrs_is_refused(attr: str, value: Any, says: str) -> None:
    import json

    from turnout.serialize import dumps, loads

    g, _, _ = _program()
    doc = json.loads(dumps(g))
    rec = next(n for n in doc["nodes"] if n["name"] == "check")
    rec["attrs"][attr] = value
    with pytest.raises(tn.TurnoutError, match=says):
        loads(json.dumps(doc))


@pytest.mark.parametrize("kw,says", [({"summarize": 2.5}, "summarize must be an int"),
                                     ({"data": "x"}, "data must be a list of tensors")])
def test_assert_true_refuses_bad_arguments(kw: dict[str, Any], says: str) -> None:
    g = tn.Graph()
    with g.as_default(), pytest.raises(tn.GraphBuildError, match=says):
        tn.assert_true(tn.constant(True), tn.constant(1.0), "m", **kw)


def test_an_assert_showing_data_exports_and_imports_back_with_its_message() -> None:
    """Export writes TensorFlow's ``Assert`` with the message first, then the texts and tensors the
    Turnout Assert shows; imported back, the run fails with the same values shown (TensorFlow's form:
    the message becomes its first bracketed text)."""
    from turnout.graphdef import export_graph_def, import_graph_def

    g, fetch, feeds = _program()
    ex = export_graph_def(g)
    imp = import_graph_def(ex.graph_def)
    back = {imp.tensor(ex.tf_name(t)): v for t, v in feeds.items()}
    for key, shows in (("root", "[inputs must be below 100, got] [[200 1.5 -3.25]...] [1 2 3...] [2.5]"),
                       ("loop", "[running sum] [4] [6]")):
        with pytest.raises(tn.KernelError) as e:
            tn.Session(imp.graph, backend="reference").run(imp.tensor(ex.tf_name(fetch[key])), back)
        assert str(e.value).endswith(f"assertion failed: {shows}")


@pytest.mark.parametrize("whole_program,tier", [("always", "spmd"), ("never", "host-driven")])
def test_a_loop_spanning_two_devices_shows_the_failing_iterations_values(whole_program: str, tier: str) -> None:
    """An Assert on ``cpu:1`` in the body of a loop driven from ``cpu:0``: the SPMD program (one
    ``shard_map`` over both devices) and the host-driven tier both show the values of the iteration
    that failed (i = 6, y = 64: the first doubling past 50)."""
    pytest.importorskip("jax")
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")

        def body(i: tn.Tensor, y: tn.Tensor) -> list[tn.Tensor]:
            with tn.device("cpu:1"):
                z = tn.assert_true(y < 50.0, y * 2.0, "too big", data=[i, y])
            return [i + 1, z]

        with tn.device("cpu:0"):
            _, y = tn.while_loop(lambda i, y: i < n, body, [tn.constant(0), x])
    sess = tn.Session(g, backend="fast", devices=["cpu:0", "cpu:1"], whole_program=whole_program)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert float(sess.run(y, {x: 1.0, n: 3})) == 8.0
        assert sess.last_result.stats["tier"] == tier
        with pytest.raises(tn.KernelError) as e:
            sess.run(y, {x: 1.0, n: 10})
    assert str(e.value).endswith("Assert: too big [6] [64]")


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_each_failing_run_shows_its_own_values(backend: str) -> None:
    """Runs of one compiled program, passing and failing in turn, each failure showing the values of
    its own run (never those a previous run left behind), whichever route the repeated run takes."""
    if backend == "fast":
        pytest.importorskip("jax")
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        y = tn.assert_true(tn.reduce_all(x < 10.0), x + 1.0, "small", data=[x]) * 3.0
    sess = tn.Session(g, backend=backend)
    for k in range(6):
        v = np.asarray([k, 20.0 + k if k % 2 else k], np.float32)
        if k % 2:
            with pytest.raises(tn.KernelError) as e:
                sess.run(y, {x: v})
            assert str(e.value).endswith(f"Assert: small [{k} {20 + k}]")
        else:
            np.testing.assert_array_equal(sess.run(y, {x: v}), (v + 1.0) * 3.0)
