"""Optimizers (``tn.train``): one-step closed forms, and training through a while loop."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import turnout as tn

ROOT = Path(__file__).resolve().parent.parent


def test_sgd_one_step_closed_form() -> None:
    """loss = w^2 at w = 3: g = 6, w <- 3 - 0.1 * 6 = 2.4."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.array(3.0), name="w")
        loss = w * w
        step = tn.train.SGD(0.1).minimize(loss)
    s = tn.Session(g)
    assert s.run([loss, step])[0] == 9.0  # the loss is computed before the update
    np.testing.assert_allclose(s.run(w.read()), 2.4)


def test_adam_one_step_closed_form_and_slots_are_variables() -> None:
    """First Adam step at w = 1, loss w^2, g = 2: m = 0.1 g, v = 0.001 g^2 and the bias-corrected step
    is lr * sqrt(1 - b2) / (1 - b1) * m / (sqrt(v) + eps) = 0.1 (up to eps): w becomes 0.9."""
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.array(1.0), name="w")
        opt = tn.train.Adam(0.1, beta1=0.9, beta2=0.999, epsilon=1e-8)
        step = opt.minimize(w * w)
    names = {v.name for v in tn.global_variables(g)}
    assert {"w", "w/adam_m", "w/adam_v", "adam_step"} <= names
    assert [v.name for v in tn.trainable_variables(g)] == ["w"]
    s = tn.Session(g)
    s.run(step)
    want = 1.0 - 0.1 * np.sqrt(1 - 0.999) / (1 - 0.9) * 0.2 / (np.sqrt(0.004) + 1e-8)
    np.testing.assert_allclose(s.run(w.read()), want, rtol=1e-12)
    np.testing.assert_allclose(want, 0.9, rtol=1e-7)
    np.testing.assert_allclose(s.run(opt.slots["w"][0].read()), 0.1 * 2.0)  # m = (1 - b1) g


def _regression(opt: Any) -> list[float]:
    """A tiny regression whose model runs a while loop: h <- h/2 + x @ w / 2, n times."""
    rng = np.random.default_rng(0)
    x_v = rng.normal(size=(16, 3))
    y_v = x_v @ np.array([[1.0], [-2.0], [0.5]])
    g = tn.Graph()
    with g.as_default():
        w = tn.Variable(np.zeros((3, 1)), name="w")
        x = tn.placeholder(tn.float64, [16, 3], name="x")
        y = tn.placeholder(tn.float64, [16, 1], name="y")
        n = tn.placeholder(tn.int32, [], name="n")
        _, h = tn.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, h * 0.5 + tn.matmul(x, w) * 0.5),
                             [tn.constant(0), tn.matmul(x, w)])
        loss = tn.reduce_mean(tn.square(h - y))
        step = opt.minimize(loss)
    s = tn.Session(g)
    return [float(s.run([loss, step], feed_dict={x: x_v, y: y_v, n: k % 4})[0]) for k in range(25)]


@pytest.mark.parametrize("make", [lambda: tn.train.SGD(0.05), lambda: tn.train.Adam(0.1)], ids=["sgd", "adam"])
def test_loss_decreases_through_a_while_loop(make: Any) -> None:
    losses = _regression(make())
    assert losses[-1] < 0.2 * losses[0]
    assert np.mean(losses[-5:]) < np.mean(losses[:5])


def test_minimize_needs_a_connected_variable() -> None:
    g = tn.Graph()
    with g.as_default():
        tn.Variable(np.array(1.0), name="w")
        x = tn.placeholder(tn.float64, [], name="x")
        with pytest.raises(tn.GradientError, match="does not depend"):
            tn.train.SGD(0.1).minimize(x * x)


def test_lstm_example_trains() -> None:
    """examples/lstm.py: an LSTM over run-time sequence lengths, trained with Adam; the loss falls."""
    spec = importlib.util.spec_from_file_location("lstm_example", ROOT / "examples" / "lstm.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    losses = mod.main(backend="reference", steps=40, verbose=False)
    assert np.mean(losses[-10:]) < 0.6 * np.mean(losses[:10])
