"""Round trips with TensorFlow, where it is installed: what Turnout does to an imported TF1 model,
TensorFlow reads back.

* **Weights**: Turnout imports a TensorFlow-made model (tests/data/tf), trains it three steps on the
  fast backend, and writes its Variables with ``checkpoint.save_tf``; TensorFlow builds the same model
  again (tools/tf_fixtures.py), restores that checkpoint with ``Saver.restore``, and has Turnout's
  weights exactly, and Turnout's loss after training.
* **Graphs**: a GraphDef Turnout exports of an imported model runs in TensorFlow's v1 Session with the
  values TensorFlow computed for the original (the fixture's), training runs included.

TensorFlow runs in its own process (tools/tf_check.py): ``TURNOUT_TF_PYTHON`` names a Python with
``tensorflow`` and ``tf_keras``, else this Python is used when it has them; otherwise every test here
is skipped. Needs the ``tf`` extra for the GraphDefs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout import checkpoint

pytest.importorskip("tensorboard.compat.proto.graph_pb2")

from turnout.graphdef import export_graph_def, import_graph_def  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "tf"
TOOL = ROOT / "tools" / "tf_check.py"
#: fixtures that import and run but do not export, with why (docs/missing.rst lists them)
NOT_EXPORTED = {
    # map_fn of a function that makes its own TensorArray: tf.gradients saves the array's handle on a
    # stack, and Turnout's TensorArray (a value on its flow edge) has no handle to push
    "while_case_map_fn": "stacks of resource values have no TensorFlow form",
    # control flow v2's lists (``import_tensor_lists``): a list's set overwrites an array slot, and a
    # list of a cond's Optionals holds elements of several shapes; TensorArrayWriteV3 does neither
    "v2_rnn_training": "has no TensorArrayWriteV3 form",
    "v2_cond_in_loop_training": "has no TensorArrayWriteV3 form",
}
CASES = sorted(p.stem for p in DATA.glob("*.pbtxt") if p.stem not in NOT_EXPORTED)


def tf_python() -> str | None:
    """The Python that runs tools/tf_check.py (see the module docstring), or None."""
    chosen = os.environ.get("TURNOUT_TF_PYTHON")
    if chosen:
        return chosen
    have = all(importlib.util.find_spec(m) is not None for m in ("tensorflow", "tf_keras"))
    return sys.executable if have else None


def in_tensorflow(jobs: list[dict[str, Any]], tmp: Path) -> list[Any]:
    python = tf_python()
    if python is None:
        pytest.skip("TensorFlow is not installed (set TURNOUT_TF_PYTHON to a Python with tensorflow and tf_keras)")
    (tmp / "request.json").write_text(json.dumps({"jobs": jobs}))
    done = subprocess.run([python, str(TOOL), str(tmp / "request.json"), str(tmp / "result.json")],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp / "result.json").read_text())["results"]  # type: ignore[no-any-return]


def _fixture(case: str) -> dict[str, Any]:
    return json.loads((DATA / f"{case}.json").read_text())  # type: ignore[no-any-return]


def test_every_fixture_exports() -> None:
    """Every TensorFlow-made fixture, imported, exports again: the gradients of ``map_fn``, ``scan`` and
    ``foldl`` too, whose loop-carried sums of gradient arrays take TensorFlow's gradient-array form."""
    for case in CASES:
        imp = import_graph_def(DATA / f"{case}.pbtxt")
        export_graph_def(imp.graph)


@pytest.mark.parametrize("case", sorted(NOT_EXPORTED))
def test_a_fixture_that_does_not_export_is_refused_naming_why(case: str) -> None:
    imp = import_graph_def(DATA / f"{case}.pbtxt")
    with pytest.raises(tn.UnsupportedError, match=NOT_EXPORTED[case]):
        export_graph_def(imp.graph)


def test_tensorflow_runs_what_turnout_exported_with_tensorflows_values(tmp_path: Path) -> None:
    jobs, expected = [], []
    for case in CASES:
        imp = import_graph_def(DATA / f"{case}.pbtxt")
        ex = export_graph_def(imp.graph)
        path = ex.write(tmp_path / f"{case}.pb")
        runs = []
        for r in _fixture(case)["runs"]:
            if "save" in r:  # (where TensorFlow's Saver wrote a checkpoint: test_graphdef_import restores it)
                continue
            runs.append({"feeds": {ex.tf_name(imp.tensor(k)): v for k, v in r["feeds"].items()},
                         "fetches": [ex.tf_name(imp.tensor(f)) for f in r["fetches"]],
                         "targets": [ex.tf_op(imp.node(t)) for t in r.get("targets", [])]})
            expected.append((case, r))
        # the export's initializer (every Variable, a gradient stack's depth counter included), then the
        # imported model's own, as TensorFlow's users run it
        init = [ex.init_op] if ex.init_op is not None else []
        if "init" in imp.controls:
            init.append(ex.tf_op(imp.node("init")))
        jobs.append({"kind": "run", "graph": str(path), "init": init, "runs": runs})
    results = [r for job in in_tensorflow(jobs, tmp_path) for r in job]
    assert len(results) == len(expected)
    for (case, want), got in zip(expected, results):
        if "error" in want:  # a run TensorFlow refused (an Assert): refused again, with its message
            assert want["error"] in got.get("error", ""), (case, got)
            continue
        assert "values" in got, (case, got)
        for name, g, w in zip(want["fetches"], got["values"], want["expected"]):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-5, err_msg=f"{case}: {name}")


@pytest.mark.parametrize("case", ["lstm_adam", "reference_variables", "placed_rnn"])
def test_tensorflow_restores_what_turnout_trained(case: str, tmp_path: Path) -> None:
    imp = import_graph_def(DATA / f"{case}.pbtxt")
    sess = tn.Session(imp.graph, backend="fast")
    runs = _fixture(case)["runs"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sess.run(imp.node("init"))
        for r in runs[:-1]:  # the training steps; the last run reads the loss and weights after them
            feeds = {imp.tensor(k): np.asarray(v) for k, v in r["feeds"].items()}
            sess.run([imp.tensor(f) for f in r["fetches"]] + [imp.node(t) for t in r.get("targets", [])], feeds)
        last = runs[-1]
        after = sess.run([imp.tensor(f) for f in last["fetches"]],
                         {imp.tensor(k): np.asarray(v) for k, v in last["feeds"].items()})
    saved = checkpoint.save_tf(sess, tmp_path / "trained" / "model")
    (got,) = in_tensorflow([{"kind": "restore", "case": case, "prefix": str(tmp_path / "trained" / "model")}], tmp_path)
    assert sorted(got["variables"]) == saved
    for name, value in got["variables"].items():
        mine = np.asarray(sess.variables[name])
        np.testing.assert_array_equal(np.asarray(value, mine.dtype), mine, err_msg=name)
    for name, g, w in zip(last["fetches"], got["values"], after):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{case}: {name}")
