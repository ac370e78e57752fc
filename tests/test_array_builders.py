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
from route_table import COMPILED_ROUTES, run_strictly
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
