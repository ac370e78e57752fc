"""``trace=True`` on the fast backend: a timeline of compiled stages, driven-loop chunks and host
swaps, exportable to Perfetto like the reference trace."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import turnout as tn

pytest.importorskip("jax")

from turnout.fast.timeline import ROWS, Timeline  # noqa: E402


def test_a_one_call_program_traces_one_compiled_stage() -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = tn.cond(x > 0.0, lambda: x * 2.0, lambda: -x)
    sess = tn.Session(g, backend="fast")
    assert float(sess.run(y, {x: 3.0}, trace=True)) == 6.0
    tl = sess.last_result.trace
    assert isinstance(tl, Timeline)
    rows = [s.row for s in tl.spans]
    assert rows.count("compiled stages") == 1 and rows.count("run") == 1
    compiles = sess.last_result.stats["compiles"]  # the session's running total
    assert compiles >= 1 and tl.summary()["compiles_this_run"] == compiles  # traced and compiled on this first run
    assert tl.summary()["compiled_stages"] == 1
    sess.run(y, {x: 3.0}, trace=True)
    assert sess.last_result.stats["compiles"] == compiles
    assert sess.last_result.trace.summary()["compiles_this_run"] == 0
    assert sess.last_result.trace.summary()["compiled_stages"] == 0
    sess.run(y, {x: 3.0})
    assert sess.last_result.trace is None  # untraced runs record nothing


def test_driven_loops_show_chunks_and_host_swaps(tmp_path: Path) -> None:
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y * 1.1), [tn.constant(0), x])
        dx = tn.gradients(y, x)[0]
    sess = tn.Session(g, backend="fast", stack_chunk=4)
    want = sess.run([y, dx], {x: 1.0, n: 10})
    got = sess.run([y, dx], {x: 1.0, n: 10}, trace=True)
    np.testing.assert_allclose(got, want)
    tl = sess.last_result.trace
    chunks = [s for s in tl.spans if s.row == "driven loops"]
    assert sum(s.args["iterations"] for s in chunks) == 20  # 10 forward + 10 backward iterations
    swaps = [s for s in tl.spans if s.row == "host swaps"]  # 10 pushes do not fit a chunk of 4
    # full chunks leave while the forward loop pushes, and come back while the backward loop pops
    assert {s.name for s in swaps} == {"stack chunks full", "stack chunks back"}
    path = tmp_path / "fast_trace.json"
    tl.save_chrome(str(path))
    doc = json.loads(path.read_text())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M"}
    assert names == set(ROWS)
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(tl.spans) and all(e["dur"] >= 0 for e in slices)
    run = next(e for e in slices if e["cat"] == "run")
    assert all(run["ts"] <= e["ts"] and e["ts"] + e["dur"] <= run["ts"] + run["dur"] + 1 for e in slices)
