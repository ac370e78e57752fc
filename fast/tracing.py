"""Tracing helpers shared by every part of the emitter: a function traced once and replayed
(``Traced``), a value made to match the type of another (``reconcile``), and whether a loop's carry
already has its final type (``settled``).

Why a module of its own: conditionals, loops and the SPMD tier all trace functions whose result
types must be known before the ``lax`` call that runs them; these are the pieces they share, and none
of them needs the emitter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from turnout.fast import stacks as stk
from turnout.fast.values import DEAD, TA


def jnp_tree(tree: Any) -> Any:
    """Every leaf of ``tree`` as a JAX array (what a ``lax`` loop or cond returns must be)."""
    return jax.tree_util.tree_map(lambda x: jnp.asarray(x), tree)


def zeros_of(aval_tree: Any) -> Any:
    """Zeros of every ``ShapeDtypeStruct`` of ``aval_tree``."""
    return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), aval_tree)


def same_constant(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two constants met while tracing are one value (dtype and elements)."""
    return a.dtype == b.dtype and np.array_equal(a, b)


def reconcile(value: Any, other: Any) -> tuple[Any, bool]:
    """``value`` with its pending TensorArrays / stacks and dead slots made concrete like ``other``
    (an abstract value of the same place). Why: a loop carry or a cond result must have one type, but
    a TensorArray's element shape is only known after its first write."""
    if isinstance(value, (TA, stk.StackValue)) and value.pending and not getattr(other, "pending", True):
        return made_like(value, other), True
    if value is DEAD and other is not DEAD:
        return zeros_of(other), True
    if isinstance(value, dict) and isinstance(other, dict):
        out, ch = {}, False
        for k, v in value.items():
            out[k], c = reconcile(v, other[k]) if k in other else (v, False)
            ch |= c
        return out, ch
    if isinstance(value, (list, tuple)) and isinstance(other, (list, tuple)) and len(value) == len(other):
        pairs = [reconcile(v, o) for v, o in zip(value, other, strict=True)]
        return type(value)(p[0] for p in pairs), any(p[1] for p in pairs)
    return value, False


def made_like(value: Any, other: Any) -> Any:
    """A pending TensorArray or stack ``value`` made concrete with the type of ``other`` (the same
    array or stack after a write or push): a stack by its own rule (``StackValue.materialize``, which
    makes its buffer where the stack keeps it, in host memory for a swapping loop's), a TensorArray
    as zeros of ``other``'s type, keeping its own run-time length where it has one."""
    if isinstance(value, stk.StackValue):
        return value.materialize(tuple(other.buf.shape[1:]), () if other.idx is None else tuple(other.idx.shape[1:]))
    made = zeros_of(other)
    return made.with_slots(made.buf, made.mask, length=value.length) if value.dynamic else made


class Traced:
    """A Python function traced once into a jaxpr, callable again at the cost of replaying the jaxpr.

    Why: ``lax.cond`` and ``lax.while_loop`` trace the functions they are given; a region whose result
    types must be known *before* the ``lax`` call (to fill dead values and pending TensorArrays) would
    otherwise be traced twice, and a region nested ``k`` deep ``2^k`` times. Replaying binds the
    jaxpr's top-level equations only: nested ``cond`` / ``while`` equations carry their own, already
    traced, jaxprs. ``shapes`` is the result as a pytree of ``jax.ShapeDtypeStruct`` (dead values and
    pending TensorArrays keep their leafless structure), as ``jax.eval_shape`` would give it.
    """

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self.closed, self.shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
        self.out_tree = jax.tree_util.tree_structure(self.shapes)

    def __call__(self, *args: Any) -> Any:
        flat = jax.tree_util.tree_leaves(args)
        out = jax.core.eval_jaxpr(self.closed.jaxpr, self.closed.consts, *flat)
        return jax.tree_util.tree_unflatten(self.out_tree, out)



def settled(carry: Any) -> bool:
    """Whether a loop's initial carry already has the type its body gives it back: no pending
    TensorArray or stack (their first write fixes their shape), no dead value, no weakly typed leaf
    (``lax.while_loop`` traces the body a second time to promote one, and a nest of such loops
    would be traced ``2^depth`` times)."""
    def special(v: Any) -> bool:
        return v is DEAD or isinstance(v, (TA, stk.StackValue))

    for v in jax.tree_util.tree_leaves(carry, is_leaf=special):
        if v is DEAD or (isinstance(v, (TA, stk.StackValue)) and v.pending):
            return False
        if not special(v) and jax.typeof(v).weak_type:
            return False
    return True


__all__ = ["Traced", "jnp_tree", "made_like", "reconcile", "same_constant", "settled", "zeros_of"]
