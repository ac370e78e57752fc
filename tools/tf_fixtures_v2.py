"""TensorFlow fixture cases built with control flow v2 (tools/tf_fixtures.py registers and writes them):
TF1-style graph code as TensorFlow 2 writes it when only eager execution is turned off, so its loops
and conditionals are the functional ``While`` / ``StatelessWhile``, ``If`` / ``StatelessIf`` and
``Case`` ops over functions of the GraphDef's library, and a ``tf.function`` called from the graph is
a ``StatefulPartitionedCall``. The runs fetch forward values and apply Variable updates (the
gradients of v2 loops use TensorList ops, which Turnout does not import).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from tf_fixture_helpers import _weights

CASES: dict[str, Callable[[Any], list[dict[str, Any]]]] = {}


def case(fn: Callable[[Any], list[dict[str, Any]]]) -> Callable[[Any], list[dict[str, Any]]]:
    CASES[fn.__name__] = fn
    return fn


@contextmanager
def control_flow_v2() -> Iterator[None]:
    """Control flow v2 while the case builds its graph (the runner turns TF2 behaviour off)."""
    from tensorflow.python.ops import control_flow_util

    saved = control_flow_util.ENABLE_CONTROL_FLOW_V2
    control_flow_util.ENABLE_CONTROL_FLOW_V2 = True
    try:
        yield
    finally:
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = saved


@case
def v2_while_cond_case(tf: Any) -> list[dict[str, Any]]:
    """A loop over a fed vector that reads a Variable, a cond on the loop's result whose branches
    differ in shape work, a switch_case on a fed index (out of range: the last branch), a loop nested
    in a loop whose inner trip count is the outer counter, a cond with a stateful branch (an
    AssignAdd the run's target applies), and a tf.function called from the graph."""
    with control_flow_v2():
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        k = tf.compat.v1.placeholder(tf.int32, [], name="k")
        v = tf.compat.v1.get_variable("v", initializer=tf.constant(_weights((), 110, 2.0) + 1.5))
        count = tf.compat.v1.get_variable("count", initializer=tf.constant(0.0))
        _, y = tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * v + 0.5), [0, x])
        z = tf.cond(tf.reduce_sum(y) > 10.0, lambda: y - tf.reduce_mean(y), lambda: tf.tanh(y) * v, name="c")
        picked = tf.switch_case(k, [lambda: z * 2.0, lambda: tf.reverse(z, [0]), lambda: z + v], name="sw")

        def outer(i: Any, acc: Any) -> Any:
            _, inner = tf.while_loop(lambda j, a: j < i, lambda j, a: (j + 1, a + tf.cast(j, tf.float32)), [0, acc])
            return i + 1, inner * 0.5

        _, nest = tf.while_loop(lambda i, a: i < 4, outer, [0, tf.reduce_sum(x)])

        @tf.function
        def scaled(a: Any, b: Any) -> Any:
            return a * b + tf.reduce_max(a)

        called = scaled(picked, v)
        bump = tf.cond(k > 0, lambda: count.assign_add(1.0), lambda: tf.identity(count.read_value()), name="bump")
        out = tf.identity(called + nest, name="out")
    feeds = {"x:0": np.asarray([0.5, -1.0, 2.0], np.float32), "k:0": 1}
    runs = []
    for kk, xv in [(0, [0.5, -1.0, 2.0]), (1, [3.0, 4.0]), (2, [-0.25]), (5, [1.0, 2.0, 3.0, 4.0]), (-1, [])]:
        f = {**feeds, "x:0": np.asarray(xv, np.float32), "k:0": kk}
        runs.append({"feeds": f, "fetches": [out.name, z.name, picked.name, nest.name, bump.name]})
    runs.append({"feeds": feeds, "fetches": [count.value().name]})
    return runs


@case
def v2_rnn_training(tf: Any) -> list[dict[str, Any]]:
    """A recurrent loop over a fed sequence written with a TensorArray (under control flow v2, a
    TensorList: ``TensorListReserve``, ``TensorListFromTensor``, ``TensorListGetItem``,
    ``TensorListSetItem``, ``TensorListStack``) and a cond on its last state, trained by SGD through
    ``minimize``: the v2 loop's own gradient, which saves its forward values on TensorList
    accumulators (``EmptyTensorList``, ``TensorListPushBack``, ``TensorListPopBack``), and the cond's,
    whose branches hand their values to it as Optionals."""
    with control_flow_v2():
        xs = tf.compat.v1.placeholder(tf.float32, [None, 3], name="xs")
        w = tf.compat.v1.get_variable("w", initializer=tf.constant(_weights((3, 3), 120, 0.6)))
        u = tf.compat.v1.get_variable("u", initializer=tf.constant(_weights((3, 3), 121, 0.6)))
        n = tf.shape(xs)[0]
        inputs = tf.TensorArray(tf.float32, size=n).unstack(xs)
        outs = tf.TensorArray(tf.float32, size=n)

        def body(t: Any, h: Any, outs: Any) -> Any:
            x = tf.expand_dims(inputs.read(t), 0)
            h2 = tf.tanh(tf.matmul(x, w) + tf.matmul(h, u))
            return t + 1, h2, outs.write(t, tf.squeeze(h2, 0))

        _, h, outs = tf.while_loop(lambda t, h, o: t < n, body, [0, tf.zeros([1, 3]), outs])
        seq = outs.stack()
        last = tf.cond(tf.reduce_sum(h) > 0.0, lambda: tf.sin(h) * h, lambda: 0.5 * tf.square(h), name="last")
        loss = tf.reduce_mean(tf.square(seq - 0.25)) + 0.1 * tf.reduce_sum(last)
        train = tf.compat.v1.train.GradientDescentOptimizer(0.3).minimize(loss)
    rng = np.random.default_rng(122)
    runs = []
    for length in (4, 2, 5):
        feeds = {"xs:0": rng.normal(size=(length, 3)).astype(np.float32)}
        runs.append({"feeds": feeds, "fetches": [loss.name], "targets": [train.name]})
    runs.append({"feeds": feeds, "fetches": [loss.name, seq.name, w.value().name, u.value().name]})
    return runs


@case
def v2_cond_in_loop_training(tf: Any) -> list[dict[str, Any]]:
    """A loop whose body takes one of two branches by the sign of its state (so the branch changes
    from step to step), trained by SGD through ``minimize``: the v2 gradient saves the cond's values
    as Optionals on a list of variant elements (``OptionalFromValue`` in the branch that computed a
    value, ``OptionalNone`` in the other), and the backward cond reads them back."""
    with control_flow_v2():
        x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
        w = tf.compat.v1.get_variable("w", initializer=tf.constant(_weights((2, 2), 130, 0.9)))

        def body(i: Any, h: Any) -> Any:
            pre = tf.matmul(h, w)
            h2 = tf.cond(tf.reduce_sum(pre) > 0.0, lambda: tf.sin(pre) * pre, lambda: tf.tanh(pre) - 0.1 * h)
            return i + 1, h2

        _, h = tf.while_loop(lambda i, h: i < 4, body, [0, x])
        loss = tf.reduce_sum(tf.square(h - 0.3))
        train = tf.compat.v1.train.GradientDescentOptimizer(0.2).minimize(loss)
    rng = np.random.default_rng(131)
    runs = []
    for rows in (3, 1, 2):
        feeds = {"x:0": rng.normal(size=(rows, 2)).astype(np.float32)}
        runs.append({"feeds": feeds, "fetches": [loss.name], "targets": [train.name]})
    runs.append({"feeds": feeds, "fetches": [loss.name, h.name, w.value().name]})
    return runs


@case
def v2_sampling_loop(tf: Any) -> list[dict[str, Any]]:
    """A sampling loop of control flow v2 (a ``While`` over library functions): each step draws the
    next token by ``tf.random.categorical`` of a table row chosen by the last token, seeded, and sums
    the tokens; and a cond whose taken branch samples (its untaken one draws nothing). Three runs, each
    drawing anew."""
    with control_flow_v2():
        tf.compat.v1.set_random_seed(41)
        table = tf.constant(_weights((4, 4), 42, 2.0))
        start = tf.compat.v1.placeholder(tf.int32, [None], name="start")

        def step(i: Any, tok: Any, acc: Any) -> Any:
            nxt = tf.random.categorical(tf.gather(table, tok), 1, dtype=tf.int32, seed=43)[:, 0]
            return i + 1, nxt, acc * 4 + nxt

        _, last, code = tf.while_loop(lambda i, t, a: i < 5, step, [0, start, tf.zeros_like(start)])
        flag = tf.compat.v1.placeholder(tf.bool, [], name="flag")
        picked = tf.cond(flag, lambda: tf.random.categorical(table, 3, seed=44)[0],
                         lambda: tf.zeros([3], tf.int64), name="pick")
    feeds = {"start:0": np.array([0, 3, 1], np.int32), "flag:0": True}
    fetches = [tf.identity(last, name="last").name, tf.identity(code, name="code").name, picked.name]
    return [{"feeds": {**feeds, "flag:0": k != 1}, "fetches": fetches} for k in range(3)]
