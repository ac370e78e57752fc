"""TensorFlow's ``LogUniformCandidateSampler`` (``tf.random.log_uniform_candidate_sampler``: the
negative classes ``tf.nn.nce_loss`` and ``tf.nn.sampled_softmax_loss`` draw by default) composed from
Turnout's primitives and a ``while_loop``.

Why a loop: the kernel draws one double ``u`` at a time from its Philox stream (two words a double,
in order, as ``RandomUniform``'s float64 draws take them) and turns it into the class
``int64(exp(u * log1p(range))) - 1`` (mod ``range``); with ``unique`` it keeps only a class not drawn
before and draws until it has ``num_sampled`` of them, so how many doubles it reads (``num_tries``)
is known only as it runs. Each trip of the loop here is one such try: a ``RandomDraw`` of the one
Philox call that holds double ``t`` (call ``counter + t // 2``), the class, and, when new, its write
into the samples. The expected counts are the kernel's: a class's probability ``log((c + 2) / (c +
1)) / log1p(range)`` in float64, as a float32 ``p``, and ``p * num_sampled`` where every try was
kept, else ``-expm1(num_tries * log1p(-p))`` in float32. The op's counter moves the calls the kernel
reserves, 512 a sample, however many it read (past them, TensorFlow's kernel goes on into the
calls of its next execution, and so does this).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from turnout import dtypes as dt
from turnout.control_flow.while_loop import while_loop
from turnout.graph import Tensor, get_default_graph
from turnout.math_ops import expm1, log1p
from turnout.ops import (
    add,
    assert_true,
    cast,
    constant,
    divide,
    equal,
    exp,
    floordiv,
    gather,
    greater_equal,
    less,
    log,
    logical_and,
    logical_not,
    mod,
    multiply,
    negative,
    reduce_all,
    reduce_any,
    select,
    shape,
    update_slot,
)
from turnout.random_categorical import Create

#: the Philox calls the kernel reserves for each sample (``ReserveSamples32(2048 * num_sampled)``)
CALLS_PER_SAMPLE = 512


def log_uniform_part(read: Tensor, true_classes: Tensor, num_true: int, num_sampled: int, unique: bool,
                     range_max: int, seeds: dict[str, Any]) -> tuple[Tensor, Tensor, Tensor]:
    """The sampled classes (int64 ``[num_sampled]``), the true classes' expected counts (float32, shaped
    as ``true_classes``) and the sampled ones' (float32 ``[num_sampled]``), drawn from Philox call
    ``read`` on of the stream ``seeds`` keys, built in the default graph. ``true_classes`` is an int64
    ``[batch, num_true]``; its width and its classes are checked when it runs (a ``KernelError``)."""
    log_range = math.log1p(range_max)
    width = gather(shape(true_classes), constant(1))
    inside = logical_and(greater_equal(true_classes, constant(np.int64(0))),
                         less(true_classes, constant(np.int64(range_max))))
    true_classes = assert_true(
        logical_and(equal(width, constant(np.int32(num_true))), reduce_all(inside)), true_classes,
        f"LogUniformCandidateSampler: true_classes must have {num_true} columns, each class in [0, {range_max})",
        data=[true_classes], summarize=-1)
    sampled, tries = _draws(read, num_sampled, unique, range_max, log_range, seeds)
    every = tries if unique else constant(np.int32(num_sampled))
    return (sampled, _expected(true_classes, every, num_sampled, log_range),
            _expected(sampled, every, num_sampled, log_range))


def _draws(read: Tensor, num_sampled: int, unique: bool, range_max: int, log_range: float,
           seeds: dict[str, Any]) -> tuple[Tensor, Tensor]:
    """The loop of tries: ``(samples, number of tries)``."""
    g = get_default_graph()
    pair = constant(np.asarray([2], np.int32))
    attrs = {"distribution": "RandomUniform", "dtype": dt.float64.name, **seeds}

    def body(t: Tensor, kept: Tensor, out: Tensor) -> list[Tensor]:
        call = add(read, cast(floordiv(t, constant(np.int32(2))), dt.int64))
        u = gather(g.create_node("RandomDraw", [pair, call], attrs).outputs[0], mod(t, constant(np.int32(2))))
        drawn = cast(exp(multiply(u, constant(log_range, dt.float64))), dt.int64)
        c = mod(add(drawn, constant(np.int64(-1))), constant(np.int64(range_max)))
        new = logical_not(reduce_any(equal(out, c))) if unique else constant(True)
        return [add(t, constant(np.int32(1))), add(kept, cast(new, dt.int32)),
                select(new, update_slot(out, kept, c), out)]

    start = [constant(np.int32(0)), constant(np.int32(0)), constant(np.full([num_sampled], -1, np.int64))]
    tries, _, out = while_loop(lambda t, kept, out: less(kept, constant(np.int32(num_sampled))), body, start,
                               name="tries")
    return out, tries


def per_sample(create: Create, sampled: Tensor) -> Tensor:
    """The outputs whose Philox calls a sampler's execution reserves (``random.execution`` moves the
    counter 256 calls for each): ``CALLS_PER_SAMPLE / 256`` for each sample, read off the samples so
    that the advance waits on them."""
    n = create("Size", [sampled], {}, "samples", None).outputs[0]
    k = create("Const", [], {"value": np.int32(CALLS_PER_SAMPLE // 256), "dtype": "int32"}, "outputs_per_sample",
               None).outputs[0]
    return create("Mul", [n, k], {}, "outputs", None).outputs[0]


def _expected(classes: Tensor, tries: Tensor, num_sampled: int, log_range: float) -> Tensor:
    """``ExpectedCountHelper`` of each class's probability (see the module docstring)."""
    c = cast(classes, dt.float64)
    p = cast(divide(log(divide(add(c, constant(2.0, dt.float64)), add(c, constant(1.0, dt.float64)))),
                    constant(log_range, dt.float64)), dt.float32)
    every = equal(tries, constant(np.int32(num_sampled)))
    return select(every, multiply(p, constant(np.float32(num_sampled))),
                  negative(expm1(multiply(cast(tries, dt.float32), log1p(negative(p))))))


__all__ = ["CALLS_PER_SAMPLE", "log_uniform_part", "per_sample"]
