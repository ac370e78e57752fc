"""Import rule of TensorFlow's ``CTCLoss`` (``tf.compat.v1.nn.ctc_loss``: speech models' connectionist
temporal classification), built as a ``while_loop`` over time of the forward variables.

The op gives each batch entry's loss, ``-log p(labels | inputs)``, summed over every alignment of the
labels to the ``sequence_length`` time steps (blank between and around them, a label repeated over
steps merged), and the loss's gradient with respect to the inputs (which TensorFlow's gradient
reads, behind a ``PreventGradient``). Here the loss is the forward recursion of the kernel: ``alpha``
over the extended labels ``l'`` (a blank, then each label followed by a blank), in log space, one
step per trip of the loop, each batch entry's steps past its length leaving it unchanged; the loss is
``-log`` of the summed last two states. The gradient output is ``tn.gradients`` of that loss, which
equals the kernel's, computed from its backward variables. The log-probabilities are
``log_softmax`` of the inputs (the kernel takes the log of the softmax: they agree to rounding, and
here a class of vanishing probability keeps a finite log, so no NaN reaches the gradient).

The kernel's checks are made when the op runs, with its words: a sequence length past the inputs'
time steps or negative, a batch entry with no label, a label below 0, a real label after a label
``>= num_classes - 1`` (which ends the sequence), fewer time steps than labels (unless
``ignore_longer_outputs_than_inputs``: then that entry's loss and gradient are 0, as for a sequence
of length 0). Labels are read by the row and column of each sparse entry (``tf.SparseTensor``'s
``indices``). ``preprocess_collapse_repeated`` is not built.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from turnout import array_ops, math_ops, ops
from turnout import dtypes as dt
from turnout.control_flow.while_loop import while_loop
from turnout.errors import ArgumentError, UnsupportedError
from turnout.graph import Tensor
from turnout.graphdef.import_builders import held_gradient, with_builders
from turnout.graphdef.import_context import ImportContext, Value
from turnout.graphdef.import_rules import IMPORT_RULES, Outs
from turnout.nn import log_softmax
from turnout.tables import registrar

_rule = registrar(IMPORT_RULES)


@_rule("CTCLoss")
def _ctc_loss(ctx: ImportContext, nd: Any, ins: list[Value]) -> Outs:
    """The loss and its gradient (see the module docstring), built in the import graph."""
    x, indices, values, lengths = ins
    if not all(isinstance(t, Tensor) for t in ins):
        raise UnsupportedError(f"{ctx.where()}: every input must be a tensor")
    assert isinstance(x, Tensor) and isinstance(indices, Tensor) and isinstance(values, Tensor)
    assert isinstance(lengths, Tensor)
    if x.shape is None or len(x.shape) != 3 or x.shape[2] is None:
        raise ArgumentError(f"{ctx.where()}: inputs must be 3-D [max_time, batch, num_classes] with num_classes known "
                            f"at import, got shape {x.shape}")
    if x.dtype not in (dt.float32, dt.float64):
        raise ArgumentError(f"{ctx.where()}: inputs must be float32 or float64, got {x.dtype.name}")
    if ctx.attr("preprocess_collapse_repeated", False):
        raise UnsupportedError(f"{ctx.where()}: preprocess_collapse_repeated=True is not built")
    merge = bool(ctx.attr("ctc_merge_repeated", True))
    ignore = bool(ctx.attr("ignore_longer_outputs_than_inputs", False))
    with with_builders(ctx, ins):
        loss = _loss(x, indices, values, lengths, int(x.shape[2]), merge, ignore)
        grad = held_gradient(loss, ops.ones_like(loss), x)
    return [ctx.create("Identity", [loss], suffix="loss").outputs[0], ctx.create("Identity", [grad]).outputs[0]]


def _loss(x: Tensor, indices: Tensor, values: Tensor, lengths: Tensor, classes: int, merge: bool,
          ignore: bool) -> Tensor:
    """Each batch entry's loss (see the module docstring)."""
    blank = classes - 1
    steps, batch = ops.gather(ops.shape(x), ops.constant(0)), ops.gather(ops.shape(x), ops.constant(1))
    lengths = _checked_lengths(lengths, steps)
    labels, count = _dense_labels(indices, values, batch)
    size = ops.gather(ops.shape(labels), ops.constant(1))
    col = ops.expand_dims(array_ops.range(size), 0)
    present = ops.less(col, ops.expand_dims(count, 1))
    real = ops.logical_and(present, ops.less(labels, ops.constant(blank)))
    leading = ops.cast(math_ops.cumprod(ops.cast(real, dt.int32), axis=1), dt.bool_)
    labels = _checked_labels(labels, present, real, leading, count, lengths, ignore)
    used = ops.reduce_sum(ops.cast(leading, dt.int32), axis=1)
    extended = _extended(labels, size, blank)
    picks = ops.equal(ops.expand_dims(extended, 2), ops.constant(np.arange(classes, dtype=np.int32)))
    logp = log_softmax(x, axis=-1)
    s = ops.expand_dims(array_ops.range(2 * size + 1), 0)
    stay = ops.logical_or(ops.constant(merge), ops.equal(extended, ops.constant(blank)))
    before = ops.concat([ops.fill(ops.stack([batch, 2]), ops.constant(-1)), extended[:, :-2]], 1)
    skip = ops.logical_and(ops.greater_equal(s, ops.constant(2)), ops.not_equal(extended, ops.constant(blank)))
    if merge:
        skip = ops.logical_and(skip, ops.not_equal(extended, before))
    none = ops.fill(ops.shape(extended), ops.constant(-np.inf, x.dtype))

    def at(t: Tensor) -> Tensor:  # the log-probability of each extended label at step t
        row = ops.expand_dims(ops.gather(logp, t), 1)
        return ops.reduce_sum(ops.where(picks, row, ops.constant(np.zeros((), x.dtype.numpy))), axis=2)

    first = ops.where(ops.less(s, ops.constant(2)), at(ops.constant(0)), none)

    def body(t: Tensor, alpha: Tensor) -> list[Tensor]:
        minus = ops.fill(ops.stack([batch, 1]), ops.constant(-np.inf, x.dtype))
        one = ops.concat([minus, alpha[:, :-1]], 1)
        two = ops.concat([minus, minus, alpha[:, :-2]], 1)
        total = _log_sum_exp([ops.where(stay, alpha, none), one, ops.where(skip, two, none)]) + at(t)
        running = ops.expand_dims(ops.less(t, lengths), 1)
        return [t + 1, ops.where(running, total, alpha)]

    _, alpha = while_loop(lambda t, a: ops.less(t, steps), body, [ops.constant(1), first], name="forward")
    last = ops.expand_dims(2 * used, 1)
    ends = ops.logical_or(ops.equal(s, last), ops.equal(s, last - 1))
    loss = ops.negative(_log_sum_exp([ops.where(ends, alpha, none)], axis=1))
    dropped = ops.equal(lengths, ops.constant(0))
    if ignore:
        dropped = ops.logical_or(dropped, ops.greater(count, lengths))
    return ops.where(dropped, ops.zeros_like(loss), loss)


def _log_sum_exp(xs: list[Tensor], axis: Any = None) -> Tensor:
    """``log(sum(exp))`` of the tensors elementwise (or of one over ``axis``), ``-inf`` where every
    term is; written so that its gradient is 0 there, not NaN."""
    if axis is None:
        top = xs[0]
        for x in xs[1:]:
            top = ops.maximum(top, x)
    else:
        top = ops.reduce_max(xs[0], axis=axis, keepdims=True)
    finite = ops.is_finite(top)
    shift = ops.stop_gradient(ops.where(finite, top, ops.zeros_like(top)))
    terms = [ops.exp(x - shift) for x in xs]
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    if axis is not None:
        total, shift, finite = (ops.reduce_sum(total, axis=axis), array_ops.squeeze(shift, [axis]),
                                array_ops.squeeze(finite, [axis]))
    empty = ops.equal(total, ops.zeros_like(total))
    safe = ops.where(empty, ops.ones_like(total), total)
    return ops.where(empty, ops.fill(ops.shape(total), ops.constant(-np.inf, total.dtype)), ops.log(safe) + shift)


def _checked_lengths(lengths: Tensor, steps: Tensor) -> Tensor:
    ok = ops.logical_and(ops.reduce_all(ops.greater_equal(lengths, ops.constant(0))),
                         ops.reduce_all(ops.less_equal(lengths, steps)))
    return ops.assert_true(ok, lengths, "CTCLoss: every sequence length must be in [0, num_time_steps] "
                                        "(seq_len(b) < 0 or seq_len(b) > num_time_steps)", data=[lengths])


def _dense_labels(indices: Tensor, values: Tensor, batch: Tensor) -> tuple[Tensor, Tensor]:
    """The sparse labels as a ``[batch, longest]`` int32 matrix (by each entry's row and column) and
    each row's number of entries."""
    rows = ops.cast(ops.gather(indices, ops.constant(0), axis=1), dt.int32)
    cols = ops.cast(ops.gather(indices, ops.constant(1), axis=1), dt.int32)
    longest = ops.reduce_max(ops.concat([cols, ops.constant([-1])], 0)) + 1
    flat = ops.fill(ops.stack([batch * longest]), ops.constant(0))
    g = flat.graph
    placed = g.create_node("ScatterAddLike", [flat, rows * longest + cols, ops.cast(values, dt.int32)],
                           {"axis": 0}).outputs[0]
    count = g.create_node("ScatterAddLike", [ops.fill(ops.stack([batch]), ops.constant(0)), rows,
                                             ops.ones_like(rows)], {"axis": 0}).outputs[0]
    at = ops.expand_dims(array_ops.range(batch) * longest, 1) + ops.expand_dims(array_ops.range(longest), 0)
    return ops.gather(placed, at), count


def _checked_labels(labels: Tensor, present: Tensor, real: Tensor, leading: Tensor, count: Tensor, lengths: Tensor,
                    ignore: bool) -> Tensor:
    """The kernel's checks of the labels, in its words."""
    checks = [
        (ops.reduce_all(ops.greater(count, ops.constant(0))), "CTCLoss: Labels length is zero in a batch entry"),
        (ops.reduce_all(ops.logical_not(ops.logical_and(present, ops.less(labels, ops.constant(0))))),
         "CTCLoss: All labels must be nonnegative integers"),
        (ops.reduce_all(ops.logical_not(ops.logical_and(real, ops.logical_not(leading)))),
         "CTCLoss: Saw a non-null label (index >= num_classes - 1) following a null label"),
    ]
    if not ignore:
        checks.append((ops.reduce_all(ops.less_equal(count, lengths)),
                       "CTCLoss: Not enough time for target transition sequence"))
    for ok, message in checks:
        labels = ops.assert_true(ok, labels, message)
    return labels


def _extended(labels: Tensor, size: Tensor, blank: int) -> Tensor:
    """``l'``: a blank before each label and after the last, ``[batch, 2 * size + 1]``."""
    s = array_ops.range(2 * size + 1)
    col = ops.maximum(ops.floordiv(s - 1, ops.constant(2)), ops.constant(0))
    odd = ops.equal(ops.mod(s, ops.constant(2)), ops.constant(1))
    picked = ops.gather(labels, col, axis=1)
    return ops.where(ops.expand_dims(odd, 0), picked, ops.constant(np.int32(blank)))


__all__: list[str] = []
