"""Write the TensorFlow-made checkpoint fixtures under tests/data/tf/ckpt/ (run where TensorFlow is installed).

Each case builds a small TensorFlow v1 graph (graph mode, resource Variables and one reference
Variable) whose Variables have seeded constant initializers, saves it with
``tf.compat.v1.train.Saver`` to ``<case>/model`` (``model.index`` + ``model.data-*``) and writes
``<case>.json``: TensorFlow's value, dtype and shape of every saved tensor (complex values as
``[real, imag]`` pairs). tests/test_tf_checkpoint.py reads the checkpoints with Turnout alone and
compares.

    python tools/tf_checkpoint_fixtures.py [--out tests/data/tf/ckpt] [--check]

``--check`` writes nothing: it saves every case again in TensorFlow and compares the values with the
checked-in JSON. TensorFlow is not a dependency of Turnout; only this script and the optional tests
import it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

#: case -> (build the Variables in the default graph, session config kwargs, Saver kwargs)
CASES: dict[str, Callable[[Any], dict[str, Any]]] = {}


def case(fn: Callable[[Any], dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
    CASES[fn.__name__] = fn
    return fn


@case
def dtypes(tf: Any) -> dict[str, Any]:
    """One Variable of each numeric dtype, scalars and an empty tensor among them, names with scopes."""
    rng = np.random.default_rng(38)
    v1 = tf.compat.v1
    with v1.variable_scope("rnn/lstm_cell"):
        v1.get_variable("kernel", initializer=rng.normal(size=(5, 8)).astype(np.float32))
        v1.get_variable("bias", initializer=np.linspace(-1, 1, 8).astype(np.float32))
    v1.get_variable("dense/w", initializer=rng.normal(size=(2, 3)))  # float64
    v1.get_variable("global_step", initializer=np.int64(7), trainable=False)
    v1.get_variable("counts", initializer=np.array([3, -4, 2**31 - 1], np.int32), trainable=False)
    v1.get_variable("mask", initializer=np.array([[True, False], [False, True]]), trainable=False)
    v1.get_variable("empty", initializer=np.zeros((0, 3), np.float32))
    v1.get_variable("half", initializer=np.array([0.5, -2.0, 65504.0], np.float16))
    v1.get_variable("bytes", initializer=np.array([0, 1, 255], np.uint8), trainable=False)
    v1.get_variable("small", initializer=np.array([-128, 127], np.int8), trainable=False)
    v1.get_variable("shorts", initializer=np.array([[-3], [300]], np.int16), trainable=False)
    v1.get_variable("waves", initializer=np.array([1 + 2j, -0.5j], np.complex64))
    v1.get_variable("scalar", initializer=np.float32(3.25))
    # a TF1 reference Variable (VariableV2): Saver stores it the same way
    v1.get_variable("ref/w", initializer=rng.normal(size=(3,)).astype(np.float32), use_resource=False)
    return {}


@case
def sharded(tf: Any) -> dict[str, Any]:
    """Variables on two CPU devices saved by a sharded Saver: two data files."""
    rng = np.random.default_rng(7)
    v1 = tf.compat.v1
    with tf.device("/cpu:0"):
        v1.get_variable("enc/w", initializer=rng.normal(size=(4, 3)).astype(np.float32))
        v1.get_variable("enc/b", initializer=np.arange(3, dtype=np.float32))
    with tf.device("/cpu:1"):
        v1.get_variable("dec/w", initializer=rng.normal(size=(3, 2)).astype(np.float32))
        v1.get_variable("step", initializer=np.int64(12), trainable=False)
    return {"config": {"device_count": {"CPU": 2}}, "saver": {"sharded": True}}


@case
def strings(tf: Any) -> dict[str, Any]:
    """A string Variable beside a float one: Turnout lists it and refuses to read it, by name."""
    v1 = tf.compat.v1
    v1.get_variable("vocab", initializer=np.array([b"<s>", b"</s>"]), dtype=tf.string, trainable=False)
    v1.get_variable("w", initializer=np.array([1.5, -1.0], np.float32))
    return {}


@case
def partitioned(tf: Any) -> dict[str, Any]:
    """A Variable partitioned in two slices beside a whole one: Turnout lists it and refuses to read it."""
    v1 = tf.compat.v1
    v1.get_variable("emb", shape=[4, 2], partitioner=v1.fixed_size_partitioner(2),
                    initializer=v1.constant_initializer(1.5))
    v1.get_variable("w", initializer=np.array([0.25, 4.0], np.float32))
    return {}


def _jsonable(v: np.ndarray) -> Any:
    if v.dtype.kind == "c":
        return np.stack([v.real, v.imag], axis=-1).tolist()
    if v.dtype.kind in "SO":
        return [x.decode("utf-8") if isinstance(x, bytes) else x for x in v.reshape(-1).tolist()]
    return v.tolist()


def build(tf: Any, name: str, where: Path) -> dict[str, Any]:
    """Save case ``name`` under ``where/model``; the expected values, by tensor name."""
    g = tf.Graph()
    with g.as_default():
        opts = CASES[name](tf)
        init = tf.compat.v1.global_variables_initializer()
        saver = tf.compat.v1.train.Saver(**opts.get("saver", {}))
    config = tf.compat.v1.ConfigProto(**opts.get("config", {}))
    with tf.compat.v1.Session(graph=g, config=config) as sess:
        sess.run(init)
        saver.save(sess, str(where / "model"), write_meta_graph=False, write_state=False)
        tensors = {}
        for v in g.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES):
            value = np.asarray(sess.run(v))
            tensors[v.op.name] = {"dtype": tf.as_dtype(v.dtype).base_dtype.name, "shape": list(value.shape),
                                  "value": _jsonable(value)}
    return {"tensorflow": tf.__version__, "tensors": dict(sorted(tensors.items()))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests" / "data" / "tf" / "ckpt"))
    ap.add_argument("--check", action="store_true", help="compare with the checked-in values, write nothing")
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    a = ap.parse_args(argv)
    import tensorflow as tf

    tf.compat.v1.disable_v2_behavior()
    tf.compat.v1.enable_resource_variables()
    out = Path(a.out)
    bad = 0
    for name in a.cases or sorted(CASES):
        with tempfile.TemporaryDirectory() as tmp:
            meta = build(tf, name, Path(tmp))
            if a.check:
                old = json.loads((out / f"{name}.json").read_text())["tensors"]
                if old != meta["tensors"]:
                    print(f"{name}: TensorFlow now saves {meta['tensors']}, the fixture says {old}")
                    bad += 1
                continue
            dest = out / name
            if dest.exists():
                shutil.rmtree(dest)
            dest.mkdir(parents=True)
            for f in sorted(Path(tmp).iterdir()):
                shutil.copy(f, dest / f.name)
        (out / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
        print(f"{name}: {len(meta['tensors'])} tensors, files {sorted(p.name for p in dest.iterdir())}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
