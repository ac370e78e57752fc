"""Lowering rules: one JAX rule per primitive, keyed by primitive name (``LOWERING_RULES``).

Why a table: every interpreter of Turnout is a table keyed by primitive, and a test checks that
every primitive of ``turnout.primitives`` is here or in ``UNSUPPORTED`` with a reason. The arithmetic
has the same meaning as ``turnout.kernels`` (the reference kernels): integer ``Div`` is floor
division, ``FloorMod`` is numpy's ``mod``, ``Sigmoid`` is ``1 / (1 + exp(-x))``, reductions keep the
input dtype. Run-time kernel errors that numpy raises (integer division by zero, an out-of-range
TensorArray read) cannot raise inside compiled code: ``ctx.check(ok, message)`` records them in an
error word that the backend turns into ``KernelError`` after the run.

Rules take ``(ctx, node, inputs)`` and return the list of output values. Values are numpy arrays
when known at trace time (constants, shapes) — the emitter then folds pure ops with the reference
kernels themselves — or jax arrays, ``TA`` TensorArrays and ``Handle`` s. The control-flow primitives
have rules that the region emitter (``emit``) applies as part of a Cond or While region.

The rules live in modules by the kind of op they lower: here sources, control flow and elementwise
ops; ``fast.lower_structure`` (linear algebra, indexing, reductions, shapes),
``fast.lower_windows`` (convolution and pooling), ``fast.lower_linalg`` (inverse, Cholesky, triangular
solve), ``fast.lower_random`` (RandomDraw), ``fast.lower_tensor_arrays`` and
``fast.lower_state`` (Variables and gradient stacks). Each files its rules in the one table of
``fast.lowering_base``, and importing this module imports them all, so ``LOWERING_RULES`` read from
here holds every rule.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from turnout.errors import FeedError, GradientError, UnsupportedError, describe_node, prevent_gradient_message

# (importing the rule modules files their rules in ``LOWERING_RULES``)
from turnout.fast import (  # noqa: F401
    counted_stacks,
    lower_linalg,
    lower_random,
    lower_state,
    lower_structure,
    lower_tensor_arrays,  # noqa: F401
    lower_windows,
)
from turnout.fast.lower_structure import _pad_config, refused_by_shape_rule, sum_to_shape
from turnout.fast.lower_tensor_arrays import _ta_index
from turnout.fast.lowering_base import (
    LOWERING_RULES,
    UNSUPPORTED,
    LoweringContext,
    NeedsStatic,
    Rule,
    feeds_behind,
    is_int,
    lowering_rule,
    np_dtype,
)
from turnout.fast.values import DEAD, is_static
from turnout.primitives import PRIMITIVES
from turnout.summarize import assert_message


# ---- sources and control flow --------------------------------------------------------------------
@lowering_rule("Const")
def _const(ctx, n, xs):
    return [np.asarray(n.attrs["value"], dtype=np_dtype(n.attrs["dtype"]))]


@lowering_rule("Placeholder")
def _placeholder(ctx, n, xs):
    raise FeedError(f"{describe_node(n)} must be fed: pass a value for {n.outputs[0].name} in feed_dict")


@lowering_rule("Switch", "Enter", "Exit", "NextIteration")
def _structural(ctx, n, xs):
    # Applied by the region emitter: a Switch is part of a CondRegion or of its loop's WhileRegion,
    # Enter / Exit / NextIteration are the edges of a WhileRegion ([E-Enter], [E-Exit-Live], [E-Next-Live]).
    raise UnsupportedError(f"fast backend: {describe_node(n)} is not part of any structured region")


@lowering_rule("Merge")
def _merge(ctx, n, xs):
    # A Merge that is not the join of a CondRegion has at most one input that can be live
    # ([E-Merge-Live]); the others are statically dead.
    for i, x in enumerate(xs):
        if x is not DEAD:
            return [x, np.asarray(i, np.int32)]
    return [DEAD, DEAD]


@lowering_rule("LoopCond", "Identity")
def _identity(ctx, n, xs):
    return [xs[0]]


@lowering_rule("Assert")
def _assert(ctx, n, xs):
    # (the value leaves as it came; a false condition sets the error word, raised after the run, with
    # the data it shows, which the host formats as the kernel does: ``turnout.summarize``)
    head = f"{describe_node(n)}: Assert:"
    shows = None
    if len(xs) > 2:
        shown, limit = n.attrs.get("shown"), n.attrs.get("summarize", 3)
        shows = (lambda *vs: f"{head} {assert_message(n.attrs['message'], shown, vs, limit)}", xs[2:])
    ctx.check(jnp.asarray(xs[0], bool), f"{head} {n.attrs['message']}", shows=shows)
    return [xs[1]]


@lowering_rule("Sleep")
def _sleep(ctx, n, xs):
    # A host callback that waits and returns a token; the value passes through an optimization barrier
    # tied to the token, so it leaves the op only after the wait. (The value itself does not go
    # through the callback: a callback's results are checked against the x64 setting of the thread
    # that runs it, which for 64-bit values on a worker thread is not the tracing thread's.) On CPU a
    # compiled call that contains a host callback runs synchronously, so the fast partitioned executor
    # dispatches such segments from per-device threads (devices/fast_executor.py).
    seconds = float(n.attrs["seconds"])
    x = jnp.asarray(xs[0])

    def wait(_: Any) -> Any:
        time.sleep(seconds)
        return np.zeros((), np.int32)

    token = io_callback(wait, jax.ShapeDtypeStruct((), np.int32), jnp.zeros((), jnp.int32) + jnp.sum(x != x))
    out, _ = jax.lax.optimization_barrier((x, token))
    return [out]


@lowering_rule("StopGradient")
def _stop_gradient(ctx, n, xs):
    return [xs[0] if is_static(xs[0]) else jax.lax.stop_gradient(xs[0])]


@lowering_rule("PreventGradient")
def _prevent_gradient(ctx, n, xs):
    # The value passes. A JAX derivative through it (a graph made a JAX function by ``to_jax``, under
    # ``jax.grad``) is refused as ``tn.gradients`` refuses one: whoever wrote the op said its gradient
    # would be wrong. A custom JVP runs its rule only where a tangent flows in, so values that are not
    # differentiated pass as they do through an identity.
    if is_static(xs[0]):
        return [xs[0]]
    reason = prevent_gradient_message(n)

    @jax.custom_jvp
    def passes(x: Any) -> Any:
        return x

    @passes.defjvp
    def refused(primals: Any, tangents: Any) -> Any:
        raise GradientError(reason)

    return [passes(xs[0])]


@lowering_rule("NoOp")
def _noop(ctx, n, xs):
    return []


# ---- elementwise -----------------------------------------------------------------------------------
def _ew(fn: Callable[..., Any]) -> Rule:
    def rule(ctx, n, xs):
        r = fn(*xs)
        if r.dtype != jnp.bool_:
            r = r.astype(jnp.result_type(*xs))
        return [r]

    return rule


def _holds(ctx: LoweringContext, ok: Any, message: str) -> bool:
    """Check ``ok`` on every element, and say whether it is known to hold: a static ``ok`` (a constant
    divisor or exponent) that holds costs nothing and writes no error word (``facts.cannot_fail``
    counts on it), and the rule needs no guard against the values it excludes."""
    if is_static(ok):
        ok = np.all(ok)
        ctx.check(ok, message)
        return bool(ok)
    ctx.check(jnp.all(ok), message)
    return False


def _div_rule(ctx, n, xs):
    a, b = xs
    if is_int(a):
        if not _holds(ctx, b != 0, f"{describe_node(n)}: Div: integer division by zero"):
            b = jnp.where(b == 0, 1, b)
        return [jnp.floor_divide(a, b).astype(jnp.result_type(*xs))]
    return [jnp.divide(a, b).astype(jnp.result_type(a, b))]


def _mod_rule(ctx, n, xs):
    a, b = xs
    if is_int(a) and not _holds(ctx, b != 0, f"{describe_node(n)}: FloorMod: integer modulo by zero"):
        b = jnp.where(b == 0, 1, b)
    return [jnp.mod(a, b).astype(jnp.result_type(*xs))]


def _pow_rule(ctx, n, xs):
    a, b = xs
    if is_int(a) and not _holds(ctx, b >= 0,
                                 f"{describe_node(n)}: Pow: integers to negative integer powers are not allowed"):
        b = jnp.maximum(b, 0)
    return [jnp.power(a, b).astype(jnp.result_type(*xs))]


def _sign(x: Any) -> Any:
    """``sign``, with ``+0.0`` for both zeros as the kernel (numpy) and TensorFlow give it; XLA's
    keeps a zero's sign (``sign(-0.0)`` is ``-0.0``). (An integer zero is zero either way.)"""
    return jnp.where(x == 0, jnp.zeros_like(x), jnp.sign(x))


def _in_double(f: Any) -> Any:
    """``f`` computed in float64 for a float32 input, rounded once: XLA's float32 ``lgamma`` and
    ``digamma`` are tens of ulps off near their roots (3e-6 relative at lgamma(1.5)), where the
    interpreters' kernels and TensorFlow's are within one. (The fast backend traces in 64-bit mode.)"""
    return lambda x: f(x.astype(jnp.float64)).astype(x.dtype) if x.dtype == jnp.float32 else f(x)


LOWERING_RULES.update({
    "Add": _ew(jnp.add), "Sub": _ew(jnp.subtract), "Mul": _ew(jnp.multiply),
    "Div": _div_rule, "FloorMod": _mod_rule, "Pow": _pow_rule,
    "Maximum": _ew(jnp.maximum), "Minimum": _ew(jnp.minimum), "Neg": _ew(jnp.negative),
    "Abs": _ew(jnp.abs), "Sign": _ew(_sign), "Square": _ew(jnp.square),
    "Relu": _ew(lambda x: jnp.maximum(x, jnp.zeros((), jnp.result_type(x)))),
    "Tanh": _ew(jnp.tanh), "Sigmoid": _ew(lambda x: 1 / (1 + jnp.exp(-x))),
    "Exp": _ew(jnp.exp), "Log": _ew(jnp.log), "Sqrt": _ew(jnp.sqrt),
    "Log1p": _ew(jnp.log1p), "Expm1": _ew(jnp.expm1), "Erf": _ew(jax.scipy.special.erf), "Sin": _ew(jnp.sin),
    "Cos": _ew(jnp.cos), "Floor": _ew(jnp.floor), "Ceil": _ew(jnp.ceil), "Round": _ew(jnp.round),
    "Tan": _ew(jnp.tan), "Asin": _ew(jnp.arcsin), "Acos": _ew(jnp.arccos), "Atan": _ew(jnp.arctan),
    "Atan2": _ew(jnp.arctan2), "Sinh": _ew(jnp.sinh), "Cosh": _ew(jnp.cosh), "Asinh": _ew(jnp.arcsinh),
    "Acosh": _ew(jnp.arccosh), "Atanh": _ew(jnp.arctanh), "Erfc": _ew(jax.scipy.special.erfc),
    "Lgamma": _ew(_in_double(jax.scipy.special.gammaln)), "Digamma": _ew(_in_double(jax.scipy.special.digamma)),
    "Less": _ew(jnp.less), "LessEqual": _ew(jnp.less_equal), "Greater": _ew(jnp.greater),
    "GreaterEqual": _ew(jnp.greater_equal), "Equal": _ew(jnp.equal), "NotEqual": _ew(jnp.not_equal),
    "LogicalAnd": _ew(jnp.logical_and), "LogicalOr": _ew(jnp.logical_or), "LogicalNot": _ew(jnp.logical_not),
})


@lowering_rule("Select")
def _select(ctx, n, xs):
    c, a, b = xs
    return [jnp.where(c, a, b)]


def _scan(run: Callable[..., Any], unit: int) -> Rule:
    """``Cumsum`` (``unit`` 0) or ``Cumprod`` (1) in the reference kernel's order: an exclusive scan
    is the inclusive one shifted by a slot."""
    def rule(ctx, n, xs):
        x = jnp.asarray(xs[0])
        ax, rev = n.attrs["axis"] % x.ndim, n.attrs.get("reverse", False)
        y = jnp.flip(x, ax) if rev else x
        s = run(y, axis=ax, dtype=x.dtype)
        if n.attrs.get("exclusive", False) and x.shape[ax]:
            lead = jnp.full_like(jax.lax.slice_in_dim(s, 0, 1, axis=ax), unit)
            s = jnp.concatenate([lead, jax.lax.slice_in_dim(s, 0, x.shape[ax] - 1, axis=ax)], axis=ax)
        return [jnp.flip(s, ax) if rev else s]

    return rule


LOWERING_RULES.update({"Cumsum": _scan(jnp.cumsum, 0), "Cumprod": _scan(jnp.cumprod, 1)})


@lowering_rule("Cast")
def _cast(ctx, n, xs):
    """float -> int has the reference kernels' meaning (``kernels.cast_float_to_int``): truncation
    where representable, else a KernelError (through the error word), never XLA's arbitrary integer."""
    x = jnp.asarray(xs[0])
    target = np_dtype(n.attrs["dtype"])
    if jnp.issubdtype(x.dtype, jnp.floating) and np.issubdtype(target, np.integer):
        info = np.iinfo(target)
        t = jnp.trunc(x)
        ok = jnp.isfinite(t) & (t >= float(info.min)) & (t < -float(info.min))
        ctx.check(jnp.all(ok), f"{describe_node(n)}: Cast: a NaN, infinite or out-of-range value cannot be cast "
                  f"to {np.dtype(target).name} (range [{info.min}, {info.max}]); clip it first")
        return [jnp.where(ok, t, 0).astype(target)]
    return [x.astype(target)]



def missing_rules() -> list[str]:
    """Primitives with neither a rule nor an UNSUPPORTED reason (the completeness test wants [])."""
    return sorted(p for p in PRIMITIVES if p not in LOWERING_RULES and p not in UNSUPPORTED)



__all__ = ["LOWERING_RULES", "UNSUPPORTED", "LoweringContext", "NeedsStatic", "Rule", "_pad_config", "_ta_index",
           "feeds_behind", "missing_rules", "refused_by_shape_rule", "sum_to_shape"]
