"""``Session.run``: fetch structures, feeds, node targets, run-time guards, errors, and trace export."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout import raw
from turnout.session import RunOptions

Point = collections.namedtuple("Point", ["x", "y"])


#: tests of reference-only machinery, or of graphs the fast backend rejects by design (UnsupportedError)
REFERENCE_ONLY = pytest.mark.parametrize("backend", ["reference"])


def small_graph() -> tuple[tn.Graph, dict[str, Any]]:
    """x (fed) -> y = 2x -> z = y + 1."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        y = tn.multiply(x, 2.0, name="y")
        z = tn.add(y, 1.0, name="z")
    return g, {"x": x, "y": y, "z": z}


def test_nested_fetches_keep_their_structure(backend: str) -> None:
    g, t = small_graph()
    out = tn.Session(g, backend=backend).run({"a": [t["y"], (t["z"],)], "b": Point(t["y"], t["z"]), "c": t["z"]},
                            {t["x"]: [1.0, 2.0]})
    assert set(out) == {"a", "b", "c"}
    assert isinstance(out["a"], list) and isinstance(out["a"][1], tuple) and isinstance(out["b"], Point)
    np.testing.assert_array_equal(out["a"][0], [2.0, 4.0])
    np.testing.assert_array_equal(out["a"][1][0], [3.0, 5.0])
    np.testing.assert_array_equal(out["b"].y, [3.0, 5.0])
    np.testing.assert_array_equal(out["c"], [3.0, 5.0])


def test_single_fetch_and_repeated_fetch(backend: str) -> None:
    g, t = small_graph()
    sess = tn.Session(g, backend=backend)
    v = sess.run(t["z"], {t["x"]: [0.0, 1.0]})
    assert isinstance(v, np.ndarray) and v.dtype == np.float32
    a, b = sess.run([t["z"], t["z"]], {t["x"]: [0.0, 1.0]})
    np.testing.assert_array_equal(a, b)


def test_feeding_any_tensor_cuts_the_graph_there(backend: str) -> None:
    """Feeding y replaces it: x need not be fed, and z = fed y + 1."""
    g, t = small_graph()
    sess = tn.Session(g, backend=backend)
    np.testing.assert_array_equal(sess.run(t["z"], {t["y"]: [10.0, 20.0]}), [11.0, 21.0])
    np.testing.assert_array_equal(sess.run(t["y"], {t["y"]: [7.0, 8.0]}), [7.0, 8.0])


def test_feed_by_name(backend: str) -> None:
    g, t = small_graph()
    np.testing.assert_array_equal(tn.Session(g, backend=backend).run(t["z"], {"x:0": [1.0, 1.0]}), [3.0, 3.0])
    np.testing.assert_array_equal(tn.Session(g, backend=backend).run(t["z"], {"x": [0.0, 0.0]}), [1.0, 1.0])


def test_feed_converts_to_the_tensor_dtype(backend: str) -> None:
    g, t = small_graph()
    v = tn.Session(g, backend=backend).run(t["y"], {t["x"]: np.array([1, 2], np.int64)})
    assert v.dtype == np.float32


@pytest.mark.parametrize("value,match", [
    ([1.0, 2.0, 3.0], "shape"),
    ("hello", None),
])
def test_feed_errors(backend: str, value: Any, match: str | None) -> None:
    g, t = small_graph()
    with pytest.raises(tn.FeedError, match=match):
        tn.Session(g, backend=backend).run(t["z"], {t["x"]: value})


def test_feed_type_errors(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        b = tn.placeholder(tn.bool, [], name="b")
        out = tn.cond(b, lambda: i + 1, lambda: i - 1)
    sess = tn.Session(g, backend=backend)
    with pytest.raises(tn.FeedError, match="floating"):
        sess.run(out, {i: 1.5, b: True})
    with pytest.raises(tn.FeedError, match="bool"):
        sess.run(out, {i: 1, b: 1})
    assert int(sess.run(out, {i: 1, b: True})) == 2


def test_feed_key_errors(backend: str) -> None:
    g, t = small_graph()
    other, ot = small_graph()
    sess = tn.Session(g, backend=backend)
    with pytest.raises(tn.FeedError):
        sess.run(t["z"], {ot["x"]: [1.0, 2.0]})
    with pytest.raises(tn.FeedError, match="no_such_node"):
        sess.run(t["z"], {"no_such_node:0": 1.0})
    with pytest.raises(tn.FeedError, match="x:7"):
        sess.run(t["z"], {"x:7": 1.0})
    with pytest.raises(tn.FeedError):
        sess.run(t["z"], {3: 1.0})


def test_missing_placeholder_feed_names_it(backend: str) -> None:
    g, t = small_graph()
    with pytest.raises(tn.FeedError, match='"x"'):
        tn.Session(g, backend=backend).run(t["z"])


def test_fetch_errors(backend: str) -> None:
    g, t = small_graph()
    other, ot = small_graph()
    sess = tn.Session(g, backend=backend)
    with pytest.raises(tn.GraphBuildError, match="another graph"):
        sess.run(ot["z"], {t["x"]: [1.0, 2.0]})
    with pytest.raises(tn.GraphBuildError, match="cannot fetch"):
        sess.run("no_such_node:0")
    with pytest.raises(tn.GraphBuildError, match="cannot fetch"):
        sess.run(3.5)


def test_fetching_a_node_runs_it(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(0, name="counter")
        inc = v.assign_add(1)
        grp = tn.group(inc)
        r = v.read()
    sess = tn.Session(g, backend=backend)
    assert sess.run(grp) is None
    assert sess.run([grp, inc.node]) == [None, None]
    assert int(sess.run(r)) == 2


def test_fetching_a_tensor_inside_a_loop_is_rejected(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        inside: list[tn.Tensor] = []

        def body(i: tn.Tensor) -> tn.Tensor:
            inside.append(i + 1)
            return inside[-1]

        tn.while_loop(lambda i: i < 3, body, tn.constant(0))
    with pytest.raises(tn.ValidationError, match="W-Fetch-Root"):
        tn.Session(g, backend=backend).run(inside[0])


def infinite_loop() -> tuple[tn.Graph, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        out = tn.while_loop(lambda i: i >= 0, lambda i: i + 1, tn.constant(0))
    return g, out


def test_max_iterations_guards_an_infinite_loop(backend: str) -> None:
    g, out = infinite_loop()
    with pytest.raises(tn.NonTerminationError, match="max_iterations"):
        tn.Session(g, backend=backend).run(out, options=RunOptions(max_iterations=50))


@REFERENCE_ONLY  # firings are counted only by the reference interpreter
def test_max_firings_guards_an_infinite_loop(backend: str) -> None:
    g, out = infinite_loop()
    with pytest.raises(tn.NonTerminationError, match="max_firings"):
        tn.Session(g, backend=backend).run(out, max_firings=500)


def test_guards_do_not_fire_on_a_loop_within_the_limit(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        out = tn.while_loop(lambda i: i < 50, lambda i: i + 1, tn.constant(0))
    assert int(tn.Session(g, backend=backend).run(out, max_iterations=60)) == 50


def test_deadlock_names_the_blocked_node(backend: str) -> None:
    """A hand-built loop in which an op reads the loop's (non-constant) Enter, a value that exists at
    iteration 0 only: at iteration 1 the op waits forever, so the inner frame it enters never receives
    all its Enters, the outer iteration never retires, and the fetch is never produced."""
    g = tn.Graph()
    with g.as_default():
        e = raw.enter(tn.constant(0), "outer", name="entry")
        m, _ = raw.merge([e, raw.BACK_EDGE], name="m")
        p = raw.loop_cond(tn.less(m, raw.enter(tn.constant(2), "outer", is_constant=True)), name="p")
        f, t = raw.switch(m, p, name="sw")
        raw.close_back_edge(m, raw.next_iteration(t + raw.enter(tn.constant(1), "outer", is_constant=True)))
        w = tn.add(e, t, name="needs_entry")  # e arrives at iteration 0 only
        inner = tn.add(raw.enter(t, "inner"), raw.enter(w, "inner"), name="inner_sum")
        x = raw.exit(inner, name="inner_exit")
        xf, _ = raw.switch(x, p, name="sw_x")
        out = raw.exit(xf, name="out")
    with pytest.raises(tn.DeadlockError, match="never produced") as ei:
        tn.Session(g, backend=backend).run(out)
    msg = str(ei.value)
    assert "needs_entry" in msg and "inner" in msg


def test_dead_fetch_error_names_the_tensor(backend: str) -> None:
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        _, t = raw.switch(tn.constant(1.0), p, name="sw")
    with pytest.raises(tn.DeadFetchError, match="sw:1"):
        tn.Session(g, backend=backend).run(t, {p: False})


def test_run_options_as_dict_and_keywords(backend: str) -> None:
    g, t = small_graph()
    sess = tn.Session(g, backend=backend)
    a = sess.run(t["z"], {t["x"]: [1.0, 2.0]}, options={"scheduler": "lifo"})
    b = sess.run(t["z"], {t["x"]: [1.0, 2.0]}, scheduler="random", seed=3)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="scheduler"):
        sess.run(t["z"], {t["x"]: [1.0, 2.0]}, scheduler="nope")


@pytest.mark.parametrize("backend", ["reference", "fast"])
def test_keywords_beside_run_options_override_it(backend: str) -> None:
    """A keyword given beside a ``RunOptions`` overrides that field; it was once ignored silently."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        _, s = tn.while_loop(lambda i, s: i < n, lambda i, s: (i + 1, s + i), [tn.constant(0), tn.constant(0)])
    sess = tn.Session(g, backend=backend)
    assert int(sess.run(s, {n: np.int32(50)}, options=tn.RunOptions())) == sum(range(50))
    with pytest.raises(tn.errors.NonTerminationError, match="max_iterations"):
        sess.run(s, {n: np.int32(50)}, options=tn.RunOptions(), max_iterations=5)
    with pytest.raises(ValueError, match="max_iterations"):
        sess.run(s, {n: np.int32(50)}, options=tn.RunOptions(), max_iterations=0)


def test_unknown_backend() -> None:
    with pytest.raises(ValueError, match="backend"):
        tn.Session(tn.Graph(), backend="nope")


@pytest.mark.parametrize("kind", ["reference", "fast", "smallstep", "partitioned", "fast-partitioned"])
def test_session_is_a_context_manager_and_a_closed_session_refuses_to_run(kind: str) -> None:
    """``close`` forgets the Variables and every later run raises ``ExecutionError`` on every backend
    (before, an in-process session started its Variables again from their initial values without a
    word, and a cluster's failed), the lane of a repeated run included."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(1, name="v")
        inc = v.assign_add(1)
    backend, opts = kind.removesuffix("-partitioned"), {"devices": ["cpu:0", "cpu:1"]} if "partitioned" in kind else {}
    if kind == "partitioned":
        backend = "reference"
    with tn.Session(g, backend=backend, **opts) as sess:
        assert [int(sess.run(inc)) for _ in range(3)] == [2, 3, 4]
    assert len(sess.variables) == 0
    for _ in range(2):
        with pytest.raises(tn.ExecutionError, match="closed"):
            sess.run(inc)
    sess.close()  # twice is allowed


@REFERENCE_ONLY  # traces exist only in the reference interpreter
def test_trace_summary_and_chrome_export(backend: str, tmp_path: Path) -> None:
    """A loop of 3 iterations: the trace counts its iterations and exports to Chrome/Perfetto JSON."""
    g = tn.Graph()
    with g.as_default():
        out = tn.while_loop(lambda i: i < 3, lambda i: i + 1, tn.constant(0), name="L")
    sess = tn.Session(g, backend=backend)
    assert int(sess.run(out, trace=True)) == 3
    res = sess.last_result
    assert res is not None and res.trace is not None
    summary = res.trace.summary()
    assert summary["firings"] == summary["live"] + summary["dead"] == res.stats["firings"]
    assert summary["retirements"] == 4  # iterations 0..3 each retire
    bookkeeping = summary["retirements"] + summary["frame_end_exits"]
    assert summary["events"] == summary["firings"] + bookkeeping == len(res.trace)
    (frame,) = summary["iterations_per_frame"]
    assert frame.startswith("L/") and summary["iterations_per_frame"][frame] == 4  # iterations 0..3
    path = tmp_path / "trace.json"
    res.trace.save_chrome(str(path))
    doc = json.loads(path.read_text())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(res.trace)
    assert {"name", "ts", "dur", "pid", "tid", "args"} <= set(slices[0])
    assert any(e["args"]["dead"] for e in slices) and any(not e["args"]["dead"] for e in slices)
    names = [e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M"]
    assert "root" in names and any(n.startswith(frame) for n in names)


def test_no_trace_unless_asked(backend: str) -> None:
    g, t = small_graph()
    sess = tn.Session(g, backend=backend)
    sess.run(t["z"], {t["x"]: [1.0, 2.0]})
    assert sess.last_result is not None and sess.last_result.trace is None


def test_fetches_by_name_and_fetching_none(backend: str) -> None:
    """A fetch may be a name, as in TensorFlow: ``'node:index'`` is that tensor, a bare node name the
    node (run, fetched as ``None``), and a name the graph lacks is a ``GraphBuildError``. ``None`` is
    not a fetch, also after runs that took the fast backend's lane (the session's record of the last
    lane's fetch starts as no fetch at all, not ``None``, which once called a missing lane)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        y = tn.add(x, 1.0, name="y")
        v = tn.Variable(np.zeros(2, np.float32), name="v")
        up = v.assign_add(x)
    sess = tn.Session(g, backend=backend)
    f = {x: np.ones(2, np.float32)}
    with pytest.raises(tn.GraphBuildError, match="cannot fetch None"):
        sess.run(None, f)
    for _ in range(3):
        np.testing.assert_array_equal(sess.run("y:0", f), [2.0, 2.0])
        np.testing.assert_array_equal(sess.run(y, f), [2.0, 2.0])
    got = sess.run({"a": "y:0", "b": [y, up.node.name]}, f)
    np.testing.assert_array_equal(got["a"], [2.0, 2.0])
    assert got["b"][1] is None and list(sess.variables["v"]) == [1.0, 1.0]
    for bad in ("nope:0", "y:7", "nope"):
        with pytest.raises(tn.GraphBuildError, match="no tensor or node of this graph has that name"):
            sess.run(bad, f)
    with pytest.raises(tn.GraphBuildError, match="cannot fetch None"):
        sess.run(None, f)
    with pytest.raises(TypeError, match="options must be"):
        sess.run(y, f, options="fast")


def test_a_session_of_something_else_than_a_graph_is_refused() -> None:
    """``tn.Session("model.pb")`` once made a session whose every run failed deep inside; the
    constructor says what its first argument must be."""
    for bad in ("model.pb", 3, [tn.Graph()]):
        with pytest.raises(TypeError, match="must be a tn.Graph"):
            tn.Session(bad)  # type: ignore[arg-type]


def test_a_variable_without_a_value_yet_says_why(backend: str) -> None:
    """``session.variables[name]`` before any run touched that Variable (values are made on first
    use) is a ``KeyError`` that says so, and one for a name no Variable has says that instead; ``get``
    and ``in`` still treat both as absent."""
    g = tn.Graph()
    with g.as_default():
        a = tn.Variable(1.0, name="a")
        tn.Variable(np.zeros(2), name="b")
        y = a.read() * 2.0
    sess = tn.Session(g, backend=backend)
    sess.run(y)
    assert float(sess.variables["a"]) == 1.0
    with pytest.raises(KeyError, match="'b' holds no value in this session yet"):
        sess.variables["b"]
    with pytest.raises(KeyError, match="no Variable of this graph is named 'c'"):
        sess.variables["c"]
    assert sess.variables.get("b") is None and "b" not in sess.variables
    np.testing.assert_allclose(sess.run(g.variable_objects[1]), np.zeros(2))
    np.testing.assert_allclose(sess.variables["b"], np.zeros(2))


def test_a_firing_budget_on_compiled_code_is_refused_saying_what_to_use_instead() -> None:
    """Compiled code counts loop iterations, not firings: a ``max_firings`` budget is never silently
    ignored by the fast backend: it is refused, naming the option's value and what bounds a compiled
    run, with the interpreter fallback on or off (the fallback is for programs, not options)."""
    g, out = infinite_loop()
    strict = tn.Session(g, backend="fast", options=tn.FastOptions(fallback=False))
    with pytest.raises(tn.UnsupportedError) as e:
        strict.run(out, max_firings=500)
    assert str(e.value).endswith(
        "RunOptions.max_firings=500 cannot be honoured: compiled code counts loop iterations, not firings; "
        "bound loops with max_iterations (or run on backend='reference')"), str(e.value)
    with pytest.raises(tn.UnsupportedError, match="max_firings=500 cannot be honoured"):
        tn.Session(g, backend="fast").run(out, max_firings=500)
