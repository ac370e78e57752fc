"""What every lowering rule shares: the table the rules are filed in (``LOWERING_RULES``), the context
a rule runs in (``LoweringContext``), and the refusals and guards rules make.

Why a module of its own: the rules live in several modules by the kind of op they lower
(``fast.lowering`` for sources, control flow and elementwise ops, ``fast.lower_structure``,
``fast.lower_tensor_arrays``, ``fast.lower_state``); each files its rules here, and
``fast.lowering`` imports them all, so reading ``LOWERING_RULES`` from there sees every rule.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Optional, Protocol

import jax.numpy as jnp
import numpy as np

from turnout import dtypes as dt
from turnout.errors import ResourceExhaustedError, TurnoutError, UnsupportedError, describe_node
from turnout.fast import stacks as stk
from turnout.fast.ranges import Ranges
from turnout.fast.values import Handle
from turnout.graph import Node, Tensor
from turnout.limits import check_allocation
from turnout.tables import registrar

#: what a failed check shows beside its message: a function making the failure's full message from
#: the values (numpy, on the host), and the traced values (an ``Assert``'s data: ``EmitterCore.check``)
Shows = tuple[Callable[..., str], Sequence[Any]]


class LoweringContext(Protocol):
    """What a lowering rule may use of the emitter that runs it (``fast.emitter_core.EmitterCore``)."""

    #: the fused stage's trace: loops stop at the first error
    stop_on_error: bool
    #: stack pointers run free (``stk.push``): no pointer of a run whose error word is set is read
    free_pointers: bool
    #: with ``free_pointers``: a push is an overflow only at this many entries, not at the capacity
    #: (``stk.push``; the fused attempt counts past its rung to find the rung that holds the run)
    push_limit: Optional[int]
    #: the nodes whose outputs were fed (a shape argument behind one can be made static: ``NeedsStatic``)
    fed: set[int]
    #: the entries a buffer that grows with a loop holds in this trace (a gradient stack's chunk, a
    #: TensorArray of dynamic size: ``fast.values.TA``); one past it is the error word's ``overflow``
    capacity: int
    #: counted stacks whose chain is being traced, proved (their pushes check nothing), and those whose
    #: chain has ended, with its trip counts (``fast.counted_nests``; empty where there are none)
    dense: set[str]
    full: dict[str, Any]
    #: what the trace knows of integer values' ranges (``fast.ranges``; empty: nothing is known, and
    #: the rules check as if nothing were), and each loop's TensorArray writes known to write a slot
    #: nobody wrote (``facts.fresh_writes``)
    ranges: Ranges
    fresh_writes: dict[int, frozenset[int]]
    #: the most checkpoint slots a loop under its own budget gets in this trace (``CheckpointSlots``;
    #: ``None``: every slot its budget holds), and where a run that needed more says so (``None``:
    #: nowhere); set by the one-device backend, which sizes the slots to what its runs need
    slot_capacity: Optional[int]
    learn_slots: Optional[Callable[[Any], None]]

    def check(self, ok: Any, message: str, code: str = "kernel", shows: Optional[Shows] = None) -> None:
        """Set the error word where ``ok`` does not hold (``EmitterCore.check``)."""
        ...

    def read_var(self, node: Node, h: Handle) -> Any:
        """The traced value of the Variable behind ``h``, read by ``node``."""
        ...

    def write_var(self, h: Handle, value: Any) -> None:
        """Set the Variable behind ``h`` to ``value`` in the traced state."""
        ...

    def get_stack(self, node: Node, h: Handle) -> stk.StackValue:
        """The gradient stack behind ``h``, made pending on first use by ``node``."""
        ...

    def set_stack(self, h: Handle, s: stk.StackValue) -> None:
        """Put the stack behind ``h`` back into the traced state."""
        ...

    def note_push(self, node: Node, h: Handle, value: Any, index: Any = None) -> None:
        """Record a push by ``node``, so that a pop can return a constant pushed value (``EmitterCore.note_push``)."""
        ...

    def note_push_shape(self, h: Handle, value: Any, index: Any) -> None:
        """Record the shapes of a push on stack ``h``, as traced."""
        ...

    def pushed_constant(self, h: Handle, index: Any = None) -> Any:
        """The constant every push of ``h`` (under ``index``, where known) pushed, or None."""
        ...

    def pending_shape(self, n: Node, h: Handle) -> tuple[int, ...]:
        """The element shape StackPop ``n`` returns where no push has made stack ``h``
        (``EmitterCore.pending_shape``)."""
        ...

    def holds(self, h: Handle) -> bool:
        """Whether stack ``h`` is held (``fast.held``): its pushes do nothing."""
        ...

    def held_value(self, node: Node, h: Handle) -> Any:
        """What a pop of held stack ``h`` returns: the Variable's value as its loop began."""
        ...


Rule = Callable[[LoweringContext, Node, Sequence[Any]], list[Any]]
LOWERING_RULES: dict[str, Rule] = {}

#: primitives the fast backend deliberately does not lower, with the reason.
UNSUPPORTED: dict[str, str] = {
    "Send": "unsupported: partitioned fast execution is a later issue (run partitions with backend='reference')",
    "Recv": "unsupported: partitioned fast execution is a later issue (run partitions with backend='reference')",
}


#: the decorator that files a rule in ``LOWERING_RULES`` under its primitive's name
lowering_rule = registrar(LOWERING_RULES)


class NeedsStatic(TurnoutError):
    """A shape argument (a ``fill`` shape, a TensorArray size, a slice bound) known only at run time,
    computed from root-frame feeds alone.

    Why an exception of its own: XLA needs static shapes, but such a program still compiles once
    those feeds are constants of the plan. The backend catches it, makes the feeds in ``keys``
    static (their values become part of the plan's cache key, so a value seen before never
    recompiles) and traces again. Where nothing is learned (no feed behind the value) the refusal is
    an ``UnsupportedError`` instead, and the program runs on the interpreter fallback.

    It is not an ``UnsupportedError``: it never means "this cannot be compiled", so no handler of
    refusals (a fused attempt's ``Discard``, a loop form tried before another, the SPMD tier's
    decline, the interpreter fallback) takes it by mistake. It leaves the trace by raising (only
    raising can) and goes no further than the one place of each backend that compiles a run: the
    fast backend's ``FastBackend._run_compiled`` and the fast partitioned executor's compile of a run
    (its SPMD program's or a segment's trace), each of which returns it as the outcome
    ``Specialise`` to the one loop that specialises (``fast.specialise``). The cluster's fused groups,
    which trace with no feeds behind their values, never meet it (``not_static`` refuses with an
    ``UnsupportedError`` there).
    """

    def __init__(self, message: str, keys: frozenset[tuple[int, int]], cut: frozenset[tuple[int, int]] = frozenset()
                 ) -> None:
        super().__init__(message)
        self.keys = keys
        #: root-frame tensors, computed by the program, whose shapes only a run can tell (the stack of a
        #: TensorArray of dynamic size, ``fast.values.Stacked``): the run is cut at them
        #: (``fast.specialise``)
        self.cut = cut


@dataclass(frozen=True)
class Specialise:
    """The outcome of a compile that met ``NeedsStatic``: plan and trace again with the fed tensors
    ``keys`` as constants of the plan, or with the computed tensors ``cut`` computed first and fed
    (``fast.specialise.run_specialised`` decides whether that can help); ``reason`` is the
    refusal's message, for a run that falls back."""

    keys: frozenset[tuple[int, int]]
    reason: str
    cut: frozenset[tuple[int, int]] = frozenset()

    @staticmethod
    def of(e: NeedsStatic) -> Specialise:
        """The outcome of a compile whose trace raised ``e``."""
        return Specialise(e.keys, str(e), e.cut)


#: ops through which a shape argument is not traced back to feeds: their value is not a function of
#: the root frame's feeds alone (loop state, branches, effects)
_NOT_FROM_FEEDS = frozenset({"Merge", "Switch", "NextIteration", "Exit", "LoopCond", "Placeholder", "Sleep"})
#: ops whose value a trace always knows (every traced shape is static): nothing behind them needs a feed
#: made static, whatever computed their input (a Variable, a loop's state)
_STATIC_IN_A_TRACE = frozenset({"Shape", "Size"})


def feeds_behind(t: Tensor, fed: set[int], through_switch: bool = False) -> Optional[frozenset[tuple[int, int]]]:
    """The fed tensors whose values alone decide ``t`` (through constants, loop invariants and pure
    ops), or None when something else does: then making feeds static cannot make ``t`` static.
    ``through_switch`` follows a Switch to its value and predicate too: right for the predicate of a
    cond nested in the branch of one whose predicate the same feeds decide (static, that branch is
    taken while tracing and its Switches pass static values on)."""
    keys: set[tuple[int, int]] = set()
    work, seen = [t], set()
    while work:
        u = work.pop()
        n = u.node
        if (n.id, u.index) in seen:
            continue
        seen.add((n.id, u.index))
        if n.id in fed:
            keys.add((n.id, u.index))
        elif n.op in _STATIC_IN_A_TRACE:
            continue
        elif through_switch and n.op == "Switch":
            work += list(n.inputs)
        elif (n.op in _NOT_FROM_FEEDS or n.op.startswith(("TensorArray", "Stack", "Assign", "Var"))
              or (n.op == "Enter" and not n.attrs.get("is_constant"))):
            return None
        else:
            work += list(n.inputs)
    return frozenset(keys) if keys else None


def not_static(ctx: LoweringContext, n: Node, i: int, message: str) -> NoReturn:
    """Refuse a shape argument (input ``i`` of ``n``) that is not static while tracing: ``NeedsStatic``
    when feeds decide it (the backend specialises the plan on their values), else ``UnsupportedError``."""
    keys = feeds_behind(n.inputs[i], ctx.fed)
    if keys:
        raise NeedsStatic(message, keys)
    raise UnsupportedError(message)


def np_dtype(d: Any) -> Any:
    """The numpy dtype of Turnout dtype ``d``."""
    return dt.as_dtype(d).numpy


def is_int(x: Any) -> bool:
    """Whether ``x`` has an integer dtype."""
    return jnp.issubdtype(jnp.result_type(x), jnp.integer)


def guard(n: Node, shape: Sequence[int], dtype: Any) -> None:
    """The allocation guard (``turnout.limits``), applied when the program is traced: shapes are static."""
    try:
        check_allocation(n.op, shape, np.dtype(dtype).itemsize)
    except ResourceExhaustedError as e:
        raise ResourceExhaustedError(f"{describe_node(n)}: {e}") from None


def fails_when_run(ctx: LoweringContext, n: Node, message: str, shape: Sequence[int], dtype: Any) -> list[Any]:
    """An op whose operands' shapes (known once traced) make it fail whenever it runs: the error word
    says so if it runs, and zeros of its result's shape stand in, so an op on a branch that is not
    taken costs nothing (the interpreters raise ``KernelError`` only where it runs)."""
    ctx.check(np.asarray(False), f"{describe_node(n)}: {message}")
    return [jnp.zeros(tuple(shape), dtype)]


__all__ = ["LOWERING_RULES", "UNSUPPORTED", "LoweringContext", "NeedsStatic", "Rule", "Specialise", "fails_when_run",
           "feeds_behind", "guard", "is_int", "lowering_rule", "not_static", "np_dtype"]
