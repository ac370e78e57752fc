"""A JAX ``while_loop`` that reverse-mode differentiates, in a fixed memory budget, at any trip count.

``jax.lax.while_loop`` cannot be reverse-differentiated: its trip count is unknown when the program is
compiled, so JAX has nowhere fixed to keep the states the backward pass needs. The usual workarounds
bound the loop (a ``scan`` of ``max_steps`` with a mask) and pay for ``max_steps`` every time. Here the
forward loop keeps checkpoints of the loop state in a buffer of fixed size, thinned online as the loop
runs, and the backward loop recomputes what it lacks from them, step by step in reverse. The schedule is
``turnout.checkpoint_schedule``'s, run unchanged inside one compiled program, so its ``cost`` reports
exactly what a gradient here costs.

Importing this module imports jax (the ``fast`` extra); ``import turnout`` does not.

Its meaning is ``lax.while_loop``'s::

    def while_loop(cond_fun, body_fun, init_val, *, memory_budget=None, checkpoints=None):
        val = init_val
        while cond_fun(val):
            val = body_fun(val)
        return val
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from turnout import checkpoint_schedule as schedule
from turnout.arguments import check_arity
from turnout.errors import ArgumentError, UnsupportedError

T = TypeVar("T")

#: slots when neither ``memory_budget`` nor ``checkpoints`` is given: 1.0 extra forward passes at a
#: thousand steps, 1.8 at ten thousand, 2.5 at a hundred thousand (``checkpoint_schedule.cost``)
DEFAULT_CHECKPOINTS = 64
#: bytes of bookkeeping per slot (the int32 position of the state it holds), counted in the budget
POSITION_BYTES = 4
#: more slots than this is a budget far beyond what any trip count of int32 needs; it would allocate them
MAX_SLOTS = 2**28
#: why a second derivative is refused (the backward loop, or the forward mode's loop, is itself a loop of
#: unknown length, which reverse mode cannot differentiate)
SECOND_ORDER = ("turnout.jax.while_loop: second and higher derivatives (a gradient of its gradient, a Hessian) "
                "are not supported; differentiate it once, or use lax.scan with a fixed trip count for higher orders")
#: the tracers of forward mode (``jax.jvp``, ``jax.jacfwd``); reverse mode (``jax.grad``) linearizes
#: with tracers of another kind
_JVP_TRACER = getattr(getattr(jax.interpreters, "ad", None), "JVPTracer", ())


def while_loop(cond_fun: Callable[[T], Any], body_fun: Callable[[T], T], init_val: T, *,
               memory_budget: int | None = None, checkpoints: int | None = None) -> T:
    """``lax.while_loop`` that ``jax.grad``, ``jax.vjp`` and ``jax.jit`` go through, with no ``max_steps``.

    Why: a reverse-mode gradient of a loop of unknown length needs its states in reverse order, and
    storing them all would take memory growing with the trip count. Here the forward loop keeps at most
    ``slots`` states, chosen online (``turnout.checkpoint_schedule``), and the backward loop recomputes
    the rest from them. Without a gradient it is a plain ``lax.while_loop`` and keeps nothing.

    Args:
      cond_fun, body_fun, init_val: as for ``lax.while_loop``. The state is a pytree of arrays (or
        Python numbers); integer and bool leaves carry no cotangent. Arrays the two functions close
        over get their cotangents as well.
      memory_budget: bytes for the saved loop states: ``slots = memory_budget // (state bytes + 4)``.
      checkpoints: the number of slots directly. Give one of the two; neither means
        ``DEFAULT_CHECKPOINTS``.

    Raises:
      ArgumentError: a leaf of ``init_val`` that is not an array, a function that is not one, a
        ``body_fun`` whose output differs from its input in structure, shape or dtype, a ``cond_fun``
        that does not return a scalar bool, a function JAX cannot trace (a Python ``if`` on a traced
        value), or a budget that holds no state.
      UnsupportedError: a second derivative.
    """
    x0 = _as_state(init_val)
    _check_functions(cond_fun, body_fun, x0)
    slots = checkpoint_slots(x0, memory_budget=memory_budget, checkpoints=checkpoints)
    body, body_consts = _closure_convert(body_fun, x0)
    cond, cond_consts = _closure_convert(cond_fun, x0)
    plan, consts = _Plan(slots, cond, body), (tuple(cond_consts), tuple(body_consts))
    if _forward_mode((x0, consts)):
        return _forward(plan, x0, *consts)
    return _loop(plan, x0, *consts)


def checkpoint_slots(init_val: Any, *, memory_budget: int | None = None, checkpoints: int | None = None) -> int:
    """How many loop states ``while_loop`` keeps for this state and budget, for
    ``turnout.checkpoint_schedule.cost(n, slots)`` (the schedule's recompute cost at trip count ``n``)."""
    if memory_budget is not None and checkpoints is not None:
        raise ArgumentError("while_loop: give memory_budget or checkpoints, not both")
    if checkpoints is not None:
        if not _is_int(checkpoints) or checkpoints < 1:
            raise ArgumentError(f"while_loop: checkpoints must be an int >= 1 (the initial state needs a slot), "
                                f"got {checkpoints!r}")
        slots = int(checkpoints)
    elif memory_budget is not None:
        if not _is_int(memory_budget) or memory_budget < 0:
            raise ArgumentError(f"while_loop: memory_budget must be a number of bytes (an int >= 0), "
                                f"got {memory_budget!r}")
        per_state = state_bytes(init_val) + POSITION_BYTES
        slots = schedule.slots_for_budget(int(memory_budget), per_state)
        if slots < 1:
            raise ArgumentError(f"while_loop: memory_budget={memory_budget} bytes holds no loop state: one "
                                f"takes {per_state} bytes ({per_state - POSITION_BYTES} of arrays and "
                                f"{POSITION_BYTES} of bookkeeping); give at least {per_state}")
    else:
        slots = DEFAULT_CHECKPOINTS
    if slots > MAX_SLOTS:
        raise ArgumentError(f"while_loop: {slots} slots would be allocated whole; give at most {MAX_SLOTS} "
                            f"(a smaller memory_budget or checkpoints)")
    return slots


def state_bytes(init_val: Any) -> int:
    """Bytes of one loop state (every leaf, integer ones included: a recomputation needs them)."""
    return sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in jax.tree.leaves(_as_state(init_val)))


# ---- checking what the user gave ---------------------------------------------------------------------

_ARRAYS = (jax.Array, np.ndarray, np.generic, bool, int, float, complex)


#: the numpy dtype kinds no loop state holds: Python objects, strings, bytes and datetimes, none of which
#: JAX carries (bfloat16 and the other ``ml_dtypes`` are of kind "V" and pass)
_NOT_STATE_KINDS = "OUSMm"


def _as_state(init_val: Any) -> Any:
    """The state as arrays without weak types, or an ArgumentError naming the first leaf that is not one
    (an array of objects or strings included), or saying that the state holds none. Why the last two:
    JAX's ``TypeError`` for an object array, and the user's own for a state of ``None`` (a body adding
    to it), named neither the loop nor ``init_val``."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(init_val)
    if not leaves:
        raise ArgumentError(f"while_loop: init_val holds no array (got {init_val!r}); a loop state is a pytree "
                            "of at least one array")
    for path, leaf in leaves:
        if not isinstance(leaf, _ARRAYS):
            raise ArgumentError(f"while_loop: the loop state must be a pytree of arrays; init_val"
                                f"{jax.tree_util.keystr(path)} is a {type(leaf).__name__}")
        kind = getattr(leaf, "dtype", None)
        if kind is not None and np.dtype(kind).kind in _NOT_STATE_KINDS:
            raise ArgumentError(f"while_loop: the loop state must be a pytree of arrays of numbers or bools; "
                                f"init_val{jax.tree_util.keystr(path)} is an array of dtype {np.dtype(kind)}")
    return jax.tree.map(lambda a: jnp.asarray(a, dtype=jnp.asarray(a).dtype), init_val)


def _check_functions(cond_fun: Callable[..., Any], body_fun: Callable[..., Any], x0: Any) -> None:
    """Refuse, as Turnout errors, the mistakes ``lax.while_loop`` would report from deep inside JAX."""
    want = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), x0)
    got = _traced(body_fun, "body_fun", x0)
    got_tree: Any = jax.tree.structure(got)
    if got_tree != jax.tree.structure(want):
        raise ArgumentError(f"while_loop: body_fun must return the structure it takes, "
                            f"{jax.tree.structure(want)}; it returned {got_tree}")
    for (path, w), g in zip(jax.tree_util.tree_flatten_with_path(want)[0], jax.tree.leaves(got), strict=True):
        if (w.shape, w.dtype) != (g.shape, g.dtype):
            raise ArgumentError(f"while_loop: body_fun changes the state{jax.tree_util.keystr(path)} from "
                                f"{w.dtype}{list(w.shape)} to {g.dtype}{list(g.shape)}; a loop state keeps its "
                                f"shape and dtype")
    pred = _traced(cond_fun, "cond_fun", x0)
    if not (isinstance(pred, jax.ShapeDtypeStruct) and pred.shape == () and pred.dtype == jnp.bool_):
        raise ArgumentError(f"while_loop: cond_fun must return a scalar bool, it returned {pred}")


def _traced(fn: Any, name: str, x0: Any) -> Any:
    """The shapes ``fn`` (the user's ``name``) returns for state ``x0``. JAX's own errors of tracing it
    (a Python ``bool`` or ``int`` of a traced value, an index JAX cannot trace) become an
    ``ArgumentError`` naming the function and where it is defined, JAX's explanation chained to it;
    an error the function raises of its own is the user's and passes as it is."""
    if not callable(fn):
        raise ArgumentError(f"while_loop: {name} must be a function, got {fn!r} ({type(fn).__name__})")
    check_arity(fn, (x0,), "while_loop", name)
    try:
        return jax.eval_shape(fn, x0)
    except (jax.errors.JAXTypeError, jax.errors.JAXIndexError) as e:
        code = getattr(fn, "__code__", None)
        where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ArgumentError(f"while_loop: JAX cannot trace {name}{where} on the loop state: {first}") from e


def _is_int(x: object) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


# ---- the loop and its gradient ------------------------------------------------------------------------


def _closure_convert(fun: Callable[[Any], Any], x0: Any) -> tuple[Callable[..., Any], list[Any]]:
    """``fun`` as a function of the state and of every traced value it closes over (``fun(x, *consts)``),
    and those values. Why not ``jax.closure_convert``: it hoists only the values that may carry a
    tangent (floats) and bakes the others into the function, so a loop nested in another's body whose
    predicate reads the outer loop's integer counter would keep that counter's tracer, and the
    backward loop, which calls the function again in another trace, would find it escaped. Values that
    are not traced (constants) stay inside."""
    flat, tree = jax.tree.flatten(x0)
    closed = jax.make_jaxpr(lambda *a: fun(jax.tree.unflatten(tree, a)), return_shape=True)
    jaxpr, out = closed(*flat)
    traced = [isinstance(c, jax.core.Tracer) for c in jaxpr.consts]
    kept = [c for c, t in zip(jaxpr.consts, traced, strict=True) if not t]
    out_tree = jax.tree.structure(out)

    def converted(x: Any, *hoisted: Any) -> Any:
        given, fixed = iter(hoisted), iter(kept)
        consts = [next(given) if t else next(fixed) for t in traced]
        return jax.tree.unflatten(out_tree, jax.core.eval_jaxpr(jaxpr.jaxpr, consts, *jax.tree.leaves(x)))

    return converted, [c for c, t in zip(jaxpr.consts, traced, strict=True) if t]


@dataclass(frozen=True)
class _Plan:
    """What the forward and backward loops share that is not an array: the slot count and the loop's
    closure-converted functions (``cond(x, *cond_consts)``, ``body(x, *body_consts)``)."""

    slots: int
    cond: Callable[..., Any]
    body: Callable[..., Any]


def _forward_mode(args: Any) -> bool:
    """Whether ``while_loop`` is differentiated in forward mode here: a leaf of ``args`` (the state
    and the closed-over arrays) is a tracer of ``jax.jvp``. Why ask: JAX gives a ``custom_vjp``
    function no forward mode (it fails, eagerly or when compiled, with its own ``TypeError``), while
    ``lax.while_loop``'s own rule carries the tangents along with the states and needs nothing saved.
    A reverse-mode derivative of that forward one (``jax.jacrev(jax.jacfwd(f))``) would transpose
    the loop, which no rule can at an unknown trip count: refused, like every second derivative.
    (Where JAX linearizes with ``jax.jvp``'s tracers too, ``jax_use_direct_linearize`` off, the two
    modes cannot be told apart, and the loop keeps its reverse mode.)"""
    if not getattr(jax.config, "jax_use_direct_linearize", False):
        return False
    forward = [a for a in jax.tree.leaves(args) if isinstance(a, _JVP_TRACER)]
    for t in forward:
        while isinstance(t, jax.core.Tracer):
            if type(t).__name__ == "LinearizeTracer":
                raise UnsupportedError(SECOND_ORDER)
            t = getattr(t, "primal", None)
    return bool(forward)


def _forward(plan: _Plan, x0: Any, cond_consts: tuple[Any, ...], body_consts: tuple[Any, ...]) -> Any:
    """The loop as ``lax.while_loop`` runs it: the value of ``while_loop``, and its forward-mode
    derivative too (``jax.jvp``, ``jax.jacfwd``), which carries the tangents along with the states and
    so needs no state saved, whatever the trip count."""
    return lax.while_loop(lambda x: plan.cond(x, *cond_consts), lambda x: plan.body(x, *body_consts), x0)


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _loop(plan: _Plan, x0: Any, cond_consts: tuple[Any, ...], body_consts: tuple[Any, ...]) -> Any:
    return _forward(plan, x0, cond_consts, body_consts)


def _loop_fwd(plan: _Plan, x0: Any, cond_consts: tuple[Any, ...], body_consts: tuple[Any, ...]) -> tuple[Any, Any]:
    """The forward loop: the body as ``lax.while_loop`` runs it, plus online thinning of the kept states
    (``checkpoint_schedule.forward_checkpoints``, step for step)."""
    slots = plan.slots
    buf = jax.tree.map(lambda a: jnp.zeros((slots, *a.shape), a.dtype), x0)
    pos = jnp.zeros((slots,), jnp.int32)

    def step(carry: tuple[Any, ...]) -> tuple[Any, ...]:
        x, i, stride, count, buf, pos = carry
        stride, count, buf, pos = _thin(slots, i, stride, count, buf, pos)
        due = i % stride == 0
        at = jnp.minimum(count, slots - 1)  # not due: slot ``at`` is written back unchanged
        buf = jax.tree.map(lambda b, a: b.at[at].set(jnp.where(due, a, b[at])), buf, x)
        pos = pos.at[at].set(jnp.where(due, i, pos[at]))
        return plan.body(x, *body_consts), i + 1, stride, count + due.astype(jnp.int32), buf, pos

    one, zero = jnp.int32(1), jnp.int32(0)
    x, n, _, count, buf, pos = lax.while_loop(lambda c: plan.cond(c[0], *cond_consts), step,
                                              (x0, zero, one, zero, buf, pos))
    return x, (n, count, buf, pos, cond_consts, body_consts)


def _thin(slots: int, i: jax.Array, stride: jax.Array, count: jax.Array, buf: Any, pos: jax.Array) -> tuple[Any, ...]:
    """Drop every other kept state and double the stride while state ``i`` is due and the slots are full
    (``checkpoint_schedule.capacity``). Runs zero times on almost every step. The kept states move down
    one by one (slot ``k`` takes slot ``2k``), in place: a gather would hold a second buffer for a moment
    and double the peak bytes of the budget."""

    def full(c: tuple[Any, ...]) -> jax.Array:
        stride, count = c[0], c[1]
        capacity = slots if slots == 1 else jnp.where(stride == 1, slots, slots - 1)
        return (i % stride == 0) & (count >= capacity)

    def move(k: jax.Array, c: tuple[Any, jax.Array]) -> tuple[Any, jax.Array]:
        buf, pos = c
        return jax.tree.map(lambda b: b.at[k].set(b[2 * k]), buf), pos.at[k].set(pos[2 * k])

    def halve(c: tuple[Any, ...]) -> tuple[Any, ...]:
        stride, count, buf, pos = c
        kept = (count + 1) // 2
        buf, pos = lax.fori_loop(1, kept, move, (buf, pos))
        return stride * 2, kept, buf, pos

    return lax.while_loop(full, halve, (stride, count, buf, pos))


def _loop_bwd(plan: _Plan, res: Any, ct: Any) -> tuple[Any, ...]:
    """The cotangents of ``_loop``: those of the float leaves come from ``_reverse``; integer and bool
    leaves, and the predicate's closed-over values, get zeros (``float0`` for integers)."""
    n, count, buf, pos, cond_consts, body_consts = res
    ct_leaves, treedef = jax.tree.flatten(ct)
    state = tuple(jax.ShapeDtypeStruct(b.shape[1:], b.dtype) for b in jax.tree.leaves(buf))
    rev = _Reversal(plan, treedef, state, tuple(map(_inexact, state)), tuple(map(_inexact, body_consts)))
    ct_x, ct_p = _reverse(rev, n, count, buf, pos, tuple(body_consts), tuple(_pick(ct_leaves, rev.diff)))
    return (rev.unflatten(ct_x), tuple(_zero_ct(c) for c in cond_consts),
            tuple(_fill(ct_p, rev.p_diff, list(body_consts))))


_loop.defvjp(_loop_fwd, _loop_bwd)


@dataclass(frozen=True)
class _Reversal:
    """What the backward loop knows statically: the plan, the state's structure and leaf types, and
    which leaves of the state (``diff``) and of the body's closed-over values (``p_diff``) are floats."""

    plan: _Plan
    treedef: Any
    state: tuple[jax.ShapeDtypeStruct, ...]
    diff: tuple[bool, ...]
    p_diff: tuple[bool, ...]

    def unflatten(self, ct_x: Sequence[jax.Array]) -> Any:
        return self.treedef.unflatten(_fill(ct_x, self.diff, self.state))


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def _reverse(rev: _Reversal, n: jax.Array, count: jax.Array, buf: Any, pos: jax.Array, body_consts: tuple[Any, ...],
             ct_x: tuple[jax.Array, ...]) -> tuple[list[jax.Array], list[jax.Array]]:
    """The backward loop: ``checkpoint_schedule.actions`` as a ``lax.while_loop``. Each action recomputes
    ``m`` steps from the top slot, then either pushes the state reached or applies the vector-Jacobian
    product of the step after it. Returns the cotangents of the float leaves of the initial state and
    of the body's closed-over values."""
    plan, slots = rev.plan, rev.plan.slots

    def vjp_step(x: Any, ct_x: list[jax.Array], ct_p: list[jax.Array]) -> tuple[list[jax.Array], list[jax.Array]]:
        _, pull = jax.vjp(lambda x, p: plan.body(x, *p), x, body_consts)
        gx, gp = pull(rev.unflatten(ct_x))
        return _pick(jax.tree.leaves(gx), rev.diff), [a + b for a, b in zip(ct_p, _pick(gp, rev.p_diff), strict=True)]

    def action(carry: tuple[Any, ...]) -> tuple[Any, ...]:
        top, end, buf, pos, ct_x, ct_p = carry
        start = pos[top]
        length, free = end - start, slots - top
        push = (free >= 2) & (length >= 2)
        m = jnp.where(push, _split(jnp.maximum(length, 2), jnp.maximum(free, 2)), length - 1)
        x = lax.fori_loop(0, m, lambda _, x: plan.body(x, *body_consts), jax.tree.map(lambda b: b[top], buf))
        at = jnp.minimum(top + 1, slots - 1)  # not pushing: slot ``at`` is written back unchanged
        buf = jax.tree.map(lambda b, a: b.at[at].set(jnp.where(push, a, b[at])), buf, x)
        pos = pos.at[at].set(jnp.where(push, start + m, pos[at]))
        ct_x, ct_p = lax.cond(push, lambda *a: a[1:], vjp_step, x, ct_x, ct_p)
        end = jnp.where(push, end, end - 1)
        top = jnp.where(push, top + 1, jnp.where(end == start, top - 1, top))
        return top, end, buf, pos, ct_x, ct_p

    ct_p0 = [jnp.zeros_like(p) for p in _pick(body_consts, rev.p_diff)]
    *_, ct_x_out, ct_p = lax.while_loop(lambda c: c[1] > 0, action, (count - 1, n, buf, pos, list(ct_x), ct_p0))
    return ct_x_out, ct_p


@_reverse.defjvp
def _reverse_jvp(rev: _Reversal, primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
    """Why refuse: the backward loop is itself a loop of unknown length, which would need a schedule of
    its own to be differentiated again."""
    raise UnsupportedError(SECOND_ORDER)


def _split(length: jax.Array, slots: jax.Array) -> jax.Array:
    """``checkpoint_schedule.split`` in int32 arithmetic that never overflows (it saturates at
    ``SPLIT_CAP`` exactly where the pure version does, so both pick the same split)."""
    cap = schedule.SPLIT_CAP
    length = jnp.minimum(length, cap // 2)

    def grow(c: tuple[jax.Array, jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        beta, beta1, _, r = c
        k, d = slots + r + 1, r + 1
        q, rem = beta // d, beta % d  # beta * k // d == q * k + rem * k // d, exactly
        nxt = jnp.where(q > cap // k, cap, jnp.minimum(cap, q * k + rem * k // d))
        return nxt, beta, beta1, r + 1

    zero = jnp.int32(0)
    beta, beta1, beta2, _ = lax.while_loop(lambda c: c[0] < length, grow, (jnp.int32(1), zero, zero, zero))
    return jnp.minimum(length - 1, jnp.maximum(jnp.maximum(1, length - (beta - beta1)), beta2))


# ---- cotangents of integer leaves (float0) --------------------------------------------------------------


def _inexact(a: Any) -> bool:
    return bool(jnp.issubdtype(a.dtype, jnp.inexact))


def _pick(leaves: Sequence[Any], keep: Sequence[bool]) -> list[Any]:
    return [a for a, k in zip(leaves, keep, strict=True) if k]


def _fill(picked: Sequence[Any], keep: Sequence[bool], like: Sequence[Any]) -> list[Any]:
    """Put the picked (differentiable) leaves back among float0 zeros for the others."""
    it = iter(picked)
    return [next(it) if k else _zero_ct(a) for a, k in zip(like, keep, strict=True)]


def _zero_ct(a: Any) -> Any:
    t = jax.typeof(a)  # (a closed-over Python number comes back from the residuals without a shape)
    if jnp.issubdtype(t.dtype, jnp.inexact):
        return jnp.zeros(t.shape, t.dtype)
    return np.zeros(t.shape, dtype=jax.dtypes.float0)
