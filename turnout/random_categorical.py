"""TensorFlow's ``Multinomial`` (``tf.random.categorical``) composed from Turnout's primitives.

Why a composition: the kernel is a uniform draw followed by arithmetic. For each row of the logits it
takes the largest finite logit ``m`` (in the logits' dtype), the running sums in float64 of
``exp(l - m)`` over the finite logits (a non-finite logit adds nothing: its class is never drawn),
and for each sample a uniform double ``u`` from its Philox stream, answering the number of running
sums ``<= u * total`` (``std::upper_bound``'s distance). The doubles are those of a float64
``RandomUniform`` drawn at the op's counter (two Philox words a double, taken in order, as the
kernel's ``SimplePhilox`` does), so ``RandomDraw`` already makes them bit for bit on every executor;
only the counter's advance differs: the kernel reserves 256 calls for ``2 * ceil4(num_samples)``
outputs a row (``ceil4``: rounded up to a multiple of 4), and none when the output is empty. Built
this way the op runs, compiles, partitions and exports wherever its primitives do, with no rule of
its own in any table.

The kernel splits its batch over its thread pool when its cost estimate is large (a row costs about
``50 (num_samples log2(classes) + classes)`` cycles), and then starts each block's rows at an offset
that depends on where the block begins: such draws depend on TensorFlow's thread count. This is the
single-block kernel, which is TensorFlow's whenever the batch is not split. The comparison of every
sample with every running sum holds ``batch * num_samples * classes`` booleans (the kernel's binary
search holds none).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout.graph import Node, Tensor

#: how a construction creates a node: (op, inputs, attrs, suffix, static output dims or None) -> Node
#: (the builders of ``turnout.random`` and the GraphDef importer each pass theirs to the constructions
#: of this module, ``turnout.random_samplers`` and ``random.execution``)
Create = Callable[[str, Sequence[Tensor], dict[str, Any], str, Optional[list[int]]], Node]
#: the dtypes of the logits and of the samples (TensorFlow's kernel also takes half and bfloat16 logits)
LOGIT_DTYPES = ("float32", "float64")
SAMPLE_DTYPES = ("int32", "int64")


class _Builder:
    """Named nodes of one composition: each ``op`` call creates one node with a suffix of its own
    (``tag``, the op, a count)."""

    def __init__(self, create: Create, tag: str = "") -> None:
        self.create, self.tag, self.k = create, tag, 0

    def op(self, name: str, *inputs: Tensor, **attrs: Any) -> Tensor:
        self.k += 1
        return self.create(name, list(inputs), attrs, f"{self.tag}{name.lower()}{self.k}", None).outputs[0]

    def const(self, value: Any, dtype: str) -> Tensor:
        self.k += 1
        return self.create("Const", [], {"value": np.asarray(value, dtype), "dtype": dtype},
                           f"{self.tag}const{self.k}", None).outputs[0]


def categorical_part(create: Create, read: Tensor, logits: Tensor, num_samples: Tensor, sample_dtype: str,
                     seeds: dict[str, Any], static: Optional[list[int]] = None) -> Tensor:
    """The samples, ``[batch, num_samples]`` of ``sample_dtype``, of ``logits`` (``[batch, classes]``)
    from the uniform doubles of Philox call ``read`` on of the stream ``seeds`` keys; ``num_samples``
    is an int32 scalar. ``static`` is the output's sizes where the caller knows them. A row of no
    classes or a negative count is a ``KernelError`` with the words of TensorFlow's kernel."""
    b = _Builder(create)
    shape = b.op("Shape", logits)
    classes = _entry(b, shape, 1)
    logits = _check(b, b.op("Greater", classes, b.const(0, "int32")), logits,
                    "Multinomial: num_classes should be positive, got", classes)
    num_samples = _check(b, b.op("GreaterEqual", num_samples, b.const(0, "int32")), num_samples,
                         "Multinomial: num_samples should be non-negative, got", num_samples)
    out_shape = b.op("Add", b.op("Mul", shape, b.const([1, 0], "int32")),
                     b.op("Mul", b.const([0, 1], "int32"), num_samples))
    attrs = {"distribution": "RandomUniform", "dtype": dt.float64.name, **seeds}
    u = create("RandomDraw", [out_shape, read], attrs, "draw", static).outputs[0]
    return _search(b, logits, u, sample_dtype)


def reserved_outputs(create: Create, samples: Tensor) -> Tensor:
    """The outputs whose Philox calls one execution reserves (``random.execution`` moves the counter
    256 calls for each): ``2 * batch * ceil4(num_samples)``, read off the samples' shape, so that the
    advance waits on them."""
    b = _Builder(create, "reserve_")
    sizes = b.op("Shape", samples)
    rows, count = _entry(b, sizes, 0), _entry(b, sizes, 1)
    ceil4 = b.op("Add", count, b.op("FloorMod", b.op("Neg", count), b.const(4, "int32")))
    return b.op("Mul", b.op("Mul", rows, ceil4), b.const(2, "int32"))


def _entry(b: _Builder, shape: Tensor, k: int) -> Tensor:
    """Entry ``k`` of a shape vector of two sizes, as a scalar (a dot product: no slicing op)."""
    return b.op("Sum", b.op("Mul", shape, b.const([int(k == 0), int(k == 1)], "int32")), axis=None, keepdims=False)


def _check(b: _Builder, ok: Tensor, value: Tensor, message: str, shown: Tensor) -> Tensor:
    """``value`` once ``ok`` holds; else a ``KernelError`` quoting ``message`` and ``shown``."""
    return b.op("Assert", ok, value, shown, message=message, shown=[None], summarize=1)


def _search(b: _Builder, logits: Tensor, u: Tensor, sample_dtype: str) -> Tensor:
    """For each row and each double ``u``: how many of the row's running sums are ``<= u * total``."""
    ldt = logits.dtype.name
    finite = b.op("Equal", b.op("Sub", logits, logits), b.op("ZerosLike", logits))
    lowest = b.const(np.finfo(np.dtype(ldt)).min, ldt)
    top = b.op("Max", b.op("Select", finite, logits, lowest), axis=1, keepdims=True)
    # (a non-finite logit is replaced by the row's maximum before the exp, which then gives 1, not an
    # overflow or a NaN, and its term is zeroed after)
    shifted = b.op("Sub", b.op("Cast", b.op("Select", finite, logits, top), dtype=dt.float64.name),
                   b.op("Cast", top, dtype=dt.float64.name))
    terms = b.op("Exp", shifted)
    terms = b.op("Select", finite, terms, b.op("ZerosLike", terms))
    sums = b.op("Cumsum", terms, axis=1, exclusive=False, reverse=False)
    total = b.op("Max", sums, axis=1, keepdims=True)  # (the last running sum: the terms are >= 0)
    wanted = b.op("Mul", u, total)
    below = b.op("LessEqual", b.op("ExpandDims", sums, axis=1), b.op("ExpandDims", wanted, axis=2))
    return b.op("Sum", b.op("Cast", below, dtype=sample_dtype), axis=2, keepdims=False)


__all__ = ["LOGIT_DTYPES", "SAMPLE_DTYPES", "Create", "categorical_part", "reserved_outputs"]
