"""One node lowered while tracing: the step every interpreter of ``LOWERING_RULES`` takes.

Why one function: the one-device emitter (``fast.emitter_core``, which the SPMD program runs too)
and the fused groups of a cluster partition (``devices.compiled_partition``) each walk their nodes
and lower them one by one. A node must be folded, refused and lowered the same way by each, or a
program's answer (or its error) would depend on which of them traced it. So the three choices live
here once, in their order:

1. **fold**: every input known while tracing, a pure compute primitive: the reference kernels
   themselves compute it (so a folded value is the oracle's value);
2. **refuse**: the op's shape rule refuses its inputs' shapes: the rule's message is recorded with
   ``ctx.check`` (an error if the node runs) and zeros stand in (``refused_by_shape_rule``);
3. **lower**: the primitive's rule in ``LOWERING_RULES``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from turnout import kernels
from turnout.errors import KernelError, TurnoutError, UnsupportedError, describe_node
from turnout.fast.lowering import LOWERING_RULES, UNSUPPORTED, refused_by_shape_rule
from turnout.fast.lowering_base import LoweringContext
from turnout.fast.values import is_static
from turnout.graph import Node
from turnout.primitives import COMPUTE

#: never folded while tracing: TensorArrays (their values are built up in place), Sleep (its wait
#: must happen when the program runs, not when it is traced), and the checkpoint slots' count and
#: trip count (their rules size the slots: the reference kernels give the budget's count)
NO_FOLD = frozenset(p for p in COMPUTE if p.startswith("TensorArray")) | {"Sleep", "CheckpointSlots",
                                                                          "CheckpointTrips"}

#: the most bytes a folded value may have. Why a bound: a folded value becomes a constant of the
#: compiled program, which holds it and copies it into every buffer it starts (a loop variable, say)
#: on every call. A loop's checkpoint slots (``tn.fill`` of ``[slots, ...]`` zeros, constant inputs)
#: were folded into a constant as large as the loop's memory budget: twice the budget resident, and
#: a 256 MiB copy per step (the LSTM step at T = 1000 cost 4 to 7 times its store-everything step).
#: A value this small costs nothing to compute where the program runs instead.
FOLD_BYTES = 64 * 1024


def fold(n: Node, xs: Sequence[Any]) -> Optional[list[Any] | KernelError]:
    """``n``'s outputs computed by the reference kernels when every input is known while tracing and
    ``n`` is pure compute (not in ``NO_FOLD``) with outputs of at most ``FOLD_BYTES`` (as its shapes
    say, where they are static; as computed, where not); the kernel's ``KernelError`` where it
    refuses the values, which it then refuses at every run (``lower_node`` makes that the node's
    error where it runs: a refusal at trace time would raise for a node on a branch that is never
    taken); ``None`` otherwise."""
    if n.op not in COMPUTE or n.op in NO_FOLD or not all(is_static(x) for x in xs):
        return None
    if any(_static_bytes(t.spec) > FOLD_BYTES for t in n.outputs):
        return None
    try:
        outs = [np.asarray(v) for v in kernels.run_kernel(n.op, [np.asarray(x) for x in xs], n.attrs)]
    except KernelError as e:
        return e
    return None if any(v.nbytes > FOLD_BYTES for v in outs) else outs


def _refused_by_kernel(ctx: LoweringContext, n: Node, e: KernelError) -> list[Any]:
    """A node whose inputs, all known while tracing, its kernel refuses: the kernel's message is the
    node's error where it runs (``ctx.check``, as the interpreters raise it), and constant zeros of
    its outputs' static shapes (an unknown dimension 0) stand in. Why constants: what reads them
    (a TensorArray's size, a shape) stays known while tracing, where a traced stand-in could keep
    it from compiling; and the message is the interpreters' own (a gather's index included)."""
    ctx.check(np.asarray(False), f"{describe_node(n)}: {e}")
    return [np.zeros(tuple(d or 0 for d in (t.shape or ())), t.dtype.numpy) for t in n.outputs]


def _static_bytes(spec: Any) -> int:
    """The bytes of a value of ``spec`` where its shape is static and its dtype has a size, else 0
    (unknown: the fold computes it and looks)."""
    shape, dtype = spec.shape, spec.dtype
    if shape is None or any(not isinstance(d, int) for d in shape) or dtype.is_opaque:
        return 0
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def lower_node(ctx: LoweringContext, n: Node, xs: Sequence[Any]) -> list[Any]:
    """``n``'s output values for input values ``xs`` in the trace ``ctx`` runs: folded, refused by its
    shape rule, or lowered by its rule, in that order (the module docstring says why). A primitive
    with no rule is an ``UnsupportedError`` naming the node and the reason (``UNSUPPORTED``); a rule
    that trips over its inputs (a ``TypeError``/``ValueError``/``IndexError`` from JAX) is one too."""
    outs = fold(n, xs)
    if isinstance(outs, KernelError):
        return _refused_by_kernel(ctx, n, outs)
    if outs is None:
        outs = refused_by_shape_rule(ctx, n, xs)
    if outs is not None:
        return outs
    rule = LOWERING_RULES.get(n.op)
    if rule is None:
        raise UnsupportedError(f"fast backend: cannot lower {describe_node(n)}: "
                               f"{UNSUPPORTED.get(n.op, 'no lowering rule')}")
    try:
        return rule(ctx, n, xs)
    except TurnoutError:
        raise  # already says what is wrong (e.g. FeedError for an unfed Placeholder)
    except (TypeError, ValueError, IndexError) as e:
        raise UnsupportedError(f"fast backend: cannot lower {describe_node(n)}: {e}") from None


__all__ = ["FOLD_BYTES", "NO_FOLD", "fold", "lower_node"]
