"""Write tests/data/tf_random_streams.json: what TensorFlow's random ops draw the first time they run,
bit for bit (run where TensorFlow is installed).

Each entry is one op (``RandomUniform``, ``RandomStandardNormal``, ``TruncatedNormal``,
``RandomUniformInt``) with a dtype, a shape, the attrs ``seed`` / ``seed2`` (and the bounds of
``RandomUniformInt``), run once in a fresh graph and session on the CPU, its output's bytes as hex.
The entries of the first seed pair and the shapes [3] and [2, 7] also keep the op's second and third
outputs in that session (``later``): where the stateful kernel's counter has moved on.
tests/test_tf_random.py checks ``turnout.tf_random`` against them without TensorFlow.

    python tools/tf_random_fixtures.py [--out tests/data/tf_random_streams.json] [--check]

``--check`` writes nothing: it draws again in TensorFlow and compares with the checked-in file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

SHAPES = [[], [1], [3], [5], [2, 7], [33, 17], [1000]]
BIG = 5  # the shapes from here on are drawn with the first seed pair only (they keep the file small)
SEEDS = [(1, 2), (87654321, 0), (0, 5), (2**40 + 3, 2**35 + 9), (-7, 3), (2**63 - 1, -(2**63))]
FLOATS = {"RandomUniform": ["float32", "float64"], "RandomStandardNormal": ["float32", "float64"],
          "TruncatedNormal": ["float32", "float64"]}
INT_BOUNDS = {"int32": [(0, 10), (-5, 7), (-(2**31), 2**31 - 1)], "int64": [(0, 10), (-5, 7), (-(2**62), 2**62 + 5)]}


def cases() -> list[dict[str, Any]]:
    """Every op with every dtype, shape and seed pair; the integer op over a few bounds."""
    out: list[dict[str, Any]] = []
    for op, dtypes in FLOATS.items():
        for dtype in dtypes:
            for k, shape in enumerate(SHAPES):
                for seed, seed2 in SEEDS[: 1 if k >= BIG else None]:
                    out.append({"op": op, "dtype": dtype, "shape": shape, "seed": seed, "seed2": seed2})
    for dtype, bounds in INT_BOUNDS.items():
        for lo, hi in bounds:
            for shape in SHAPES[1:BIG]:
                for seed, seed2 in SEEDS[:3]:
                    out.append({"op": "RandomUniformInt", "dtype": dtype, "shape": shape, "seed": seed,
                                "seed2": seed2, "bounds": [lo, hi]})
    return out


def later(c: dict[str, Any]) -> bool:
    """Whether the entry keeps the op's second and third outputs too."""
    return (c["seed"], c["seed2"]) == SEEDS[0] and c["shape"] in ([3], [2, 7])


def draw(tf: Any, c: dict[str, Any]) -> dict[str, Any]:
    """The op's first output in TensorFlow, as the hex of its bytes (little-endian), and, where
    ``later``, its next two outputs in the same session."""
    from tensorflow.python.ops import gen_random_ops as ops

    dtype = getattr(tf, c["dtype"])
    with tf.Graph().as_default(), tf.device("/cpu:0"):  # (the GPU kernels fill otherwise)
        shape = tf.constant(c["shape"], tf.int32)
        if c["op"] == "RandomUniformInt":
            lo, hi = (tf.constant(b, dtype) for b in c["bounds"])
            t = ops.random_uniform_int(shape, lo, hi, seed=c["seed"], seed2=c["seed2"])
        else:
            fn = {"RandomUniform": ops.random_uniform, "RandomStandardNormal": ops.random_standard_normal,
                  "TruncatedNormal": ops.truncated_normal}[c["op"]]
            t = fn(shape, dtype, seed=c["seed"], seed2=c["seed2"])
        with tf.compat.v1.Session() as sess:
            values = [sess.run(t) for _ in range(3 if later(c) else 1)]
    hexes = [np.ascontiguousarray(v, v.dtype.newbyteorder("<")).tobytes().hex() for v in values]
    return {"bits": hexes[0], **({"later": hexes[1:]} if later(c) else {})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests" / "data" /
                                         "tf_random_streams.json"))
    ap.add_argument("--check", action="store_true", help="compare with the checked-in file, write nothing")
    a = ap.parse_args(argv)
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    drawn = [dict(c, **draw(tf, c)) for c in cases()]
    if a.check:
        old = json.loads(Path(a.out).read_text())["draws"]
        bad = [c for c, o in zip(drawn, old) if c != o] + drawn[len(old):]
        for c in bad[:10]:
            print(f"TensorFlow now draws otherwise: {c['op']} {c['dtype']} {c['shape']} "
                  f"seeds {c['seed']}, {c['seed2']}")
        return 1 if bad or len(old) != len(drawn) else 0
    Path(a.out).write_text(json.dumps({"tensorflow": tf.__version__, "draws": drawn}, indent=0) + "\n")
    print(f"{len(drawn)} draws, {sum(len(c['bits']) for c in drawn) // 2} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
