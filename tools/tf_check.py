"""TensorFlow's side of the round-trip tests (tests/test_tf_round_trips.py): run in a Python that has
TensorFlow (and tf_keras), never in Turnout's; it imports neither Turnout nor JAX.

    python tools/tf_check.py REQUEST.json RESULT.json

The request is JSON (no pickles) with a list of jobs; each result is JSON too:

* ``{"kind": "run", "graph": "model.pb", "init": [ops], "runs": [...]}``: import a GraphDef that
  Turnout exported, run its ``init`` ops in order, then each run (``feeds`` by tensor name, as nested lists cast
  to each placeholder's dtype; ``fetches``; ``targets``) in one ``tf.compat.v1.Session``. Result: the
  fetched values per run, or ``{"error": message}`` for a run TensorFlow refused.
* ``{"kind": "restore", "case": name, "prefix": checkpoint}``: build the model of a
  tools/tf_fixtures.py case again in TensorFlow, restore the checkpoint with ``Saver.restore``, and
  replay the case's last run (the loss and weights after training). Result: every global
  Variable's value by name, and that run's values.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np


def _session(tf: Any, g: Any) -> Any:
    # two CPU devices and soft placement: the placed fixtures ask for /cpu:1
    return tf.compat.v1.Session(graph=g, config=tf.compat.v1.ConfigProto(device_count={"CPU": 2},
                                                                        allow_soft_placement=True))


def _feeds(g: Any, feeds: dict[str, Any]) -> dict[Any, Any]:
    out = {}
    for name, v in feeds.items():
        t = g.get_tensor_by_name(name)
        out[t] = np.asarray(v, dtype=t.dtype.as_numpy_dtype)
    return out


def _plain(values: list[Any]) -> list[Any]:
    return [np.asarray(v).tolist() for v in values]


def run_job(tf: Any, job: dict[str, Any]) -> list[dict[str, Any]]:
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(Path(job["graph"]).read_bytes())
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
    out = []
    with _session(tf, g) as sess:
        for op in job.get("init", []):  # in order: Turnout's own Variables (a stack's depth), then the model's
            sess.run(g.get_operation_by_name(op))
        for r in job["runs"]:
            fetches = [g.get_tensor_by_name(f) for f in r["fetches"]]
            targets = [g.get_operation_by_name(t) for t in r.get("targets", [])]
            try:
                vals = sess.run(fetches + targets, feed_dict=_feeds(g, r["feeds"]))
            except tf.errors.OpError as e:
                out.append({"error": e.message})
                continue
            out.append({"values": _plain(vals[: len(fetches)])})
    return out


def restore_job(tf: Any, job: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import tf_fixtures

    g = tf.Graph()
    with g.as_default():
        runs = tf_fixtures.CASES[job["case"]](tf)
        variables = tf.compat.v1.global_variables()
        saver = tf.compat.v1.train.Saver()
    last = runs[-1]
    with _session(tf, g) as sess:
        saver.restore(sess, job["prefix"])
        values = sess.run([v.value() if hasattr(v, "value") else v for v in variables])
        fetched = sess.run([g.get_tensor_by_name(f) for f in last["fetches"]], feed_dict=_feeds(g, last["feeds"]))
    return {"variables": {v.op.name: np.asarray(x).tolist() for v, x in zip(variables, values)},
            "fetches": last["fetches"], "values": _plain(fetched)}


def main(argv: list[str]) -> int:
    request, result = Path(argv[0]), Path(argv[1])
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # TensorFlow's own CPU kernels refuse the gradient of a dilated convolution (Conv2DBackpropFilter
    # with a dilation above 1); its oneDNN kernels, on by default only on some processors, compute it
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    import tensorflow as tf

    tf.compat.v1.disable_v2_behavior()
    tf.compat.v1.enable_resource_variables()
    jobs = json.loads(request.read_text())["jobs"]
    out = [run_job(tf, j) if j["kind"] == "run" else restore_job(tf, j) for j in jobs]
    result.write_text(json.dumps({"tensorflow": tf.__version__, "results": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
