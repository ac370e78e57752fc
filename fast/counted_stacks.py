"""Counted stacks: gradient stacks whose pushes and pops the fused trace proves, so it checks none.

Why: every push onto a gradient stack checks that the stack has room and (for a positional stack)
that its entry lands at its iteration index, and every pop that the stack is not empty and that it
pops what was pushed under its index. Each check is a select on the error word, which every loop
around then carries: for the gradient of a nest of four ``tn.scan`` XLA compiled 81 KB of
StableHLO against 14 KB for ``jax.grad`` of the same nest of ``lax.scan``, 5 to 6 times its compile
time, and the checks cost a small training step a few microseconds per run.

A stack is *counted* when its pushes follow a schedule known before tracing (``counted_stacks``):

- it has one StackPush, directly in the body of the innermost loop of a chain of loops ``L1 ... Lk``
  (``L1`` among the root items, each next one directly in the body of the one before: no cond
  between them), and
- that push's index is the vector of the loops' iteration counters, outermost first (a counter
  enters at 0 and adds 1 in each body), as ``tn.gradients`` builds it.

When the fused trace enters ``L1`` with every loop of the chain *counted* with a trip count known
while tracing (``T1 ... Tk``, ``Emitter._counted_chain``), the stack still empty, and ``T1 * ... * Tk``
entries fitting its buffer (``Emitter.enter_counted_stacks``), the push runs exactly once per body of
``Lk``, in order: its ``n``-th entry is pushed under the index whose position in the row-major
order of ``(T1, ..., Tk)`` is ``n``. So the push needs no check (it neither overflows nor leaves
its position), and once ``L1`` has ended the stack holds an entry at every position
(``Emitter.full``): a pop reads the entry at its index's position, and needs only that its index lie
in ``[0, Ti - 1]`` in each element, which the loop counters' ranges usually prove (``fast.ranges``:
a backward loop pops at ``N - 1 - j`` with ``N`` its forward loop's trip count, a constant when
that loop is counted, ``emit.exit_counts``). A pop the ranges do not prove checks its index, with
the message the record check has.

A run in which a loop of the chain ends early (its iteration budget spent, an error that stops the
fused attempt) sets the error word, and nothing of it is returned, so the schedule holds in every
run whose values are read. Counted stacks exist only in the fused trace, whose stacks all start
empty; the staged path (chunks, swapping) checks its stacks as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from turnout.fast.facts import body_value, counters
from turnout.fast.indexing import slot
from turnout.fast.regions import Program, WhileRegion, program_nodes
from turnout.graph import Node, Tensor


class RungTooSmall(Exception):
    """Raised while the fused trace of a plan is made, when a counted stack's chain pushes more
    entries than the plan's stack capacity (``Emitter.enter_counted_stacks``). The chain's trip
    counts are known when tracing, so every run of this plan would overflow: the backend passes
    over this rung of the capacity ladder without compiling it.

    Why an exception: it leaves JAX's trace of the fused stage, which only raising can; it goes no
    further than the call that traced (``FastBackend._call_fused``), which turns it into the outcome
    ``Discard(refused=..., needed=entries)`` that the capacity ladder reads: it goes straight to the
    rung that holds ``entries``."""

    def __init__(self, key: str, entries: int, capacity: int) -> None:
        super().__init__(f"{key}: {entries} entries for a capacity of {capacity}")
        self.entries = entries


@dataclass(frozen=True)
class CountedStack:
    """A stack whose one push follows the counters of the loops ``loops`` (outermost first, the
    first among the root items); ``push`` is the StackPush node. ``counter``: ``(j, start)`` when
    the value pushed is itself a counter of ``loops[j]`` that enters as the constant ``start`` (a
    fold's ``i``, saved for its gradient), so the entry under an index is ``index[j] + start`` and
    the stack need hold nothing (``value_of_counter``)."""

    key: str
    loops: tuple[WhileRegion, ...]
    push: Node
    counter: Optional[tuple[int, int]] = None


def counted_stacks(program: Program, stack_key_of: Any) -> dict[int, list[CountedStack]]:
    """The counted stacks of ``program`` (see the module docstring), grouped by ``id`` of the root
    loop ``L1`` that heads their chains. ``stack_key_of(node)`` gives the state key of the stack a
    StackPush or StackPop node uses, ``None`` where it cannot be followed to its StackNew."""
    pushes: dict[str, list[Node]] = {}
    pops: dict[str, list[Node]] = {}
    for n in program_nodes(program):
        if n.op in ("StackPush", "StackPop"):
            k = stack_key_of(n)
            if k is not None:
                (pushes if n.op == "StackPush" else pops).setdefault(k, []).append(n)
    out: dict[int, list[CountedStack]] = {}
    for head in program.items:
        if not isinstance(head, WhileRegion):
            continue
        inside = {n.id for n in head.nodes}
        for chain in _chains(head):
            inner = chain[-1]
            for n in inner.body:
                if not isinstance(n, Node) or n.op != "StackPush":
                    continue
                k = stack_key_of(n)
                if k is None or len(pushes.get(k, [])) != 1 or not _counts(n.inputs[1], chain):
                    continue
                # every pop after the chain, with an index of one element per loop
                if any(p.id in inside or p.inputs[1].shape is None or tuple(p.inputs[1].shape) != (len(chain),)
                       for p in pops.get(k, [])):
                    continue
                counter = next(((j, got) for j, loop in enumerate(chain)
                                if (got := _counter_start(n.inputs[2], loop)) is not None), None)
                out.setdefault(id(head), []).append(CountedStack(k, tuple(chain), n, counter))
    return out


def _chains(head: WhileRegion) -> list[list[WhileRegion]]:
    """``[head]``, ``[head, L2]``, ...: the chains of loops each directly in the body of the one
    before (the one loop among a body's items, as ``Emitter._counted_chain`` follows them)."""
    chains, chain = [], [head]
    while True:
        chains.append(list(chain))
        inner = [it for it in chain[-1].body if isinstance(it, WhileRegion)]
        if len(inner) != 1:
            return chains
        chain.append(inner[0])


def _counts(index: Tensor, chain: list[WhileRegion]) -> bool:
    """Whether ``index`` is ``Pack`` of the iteration counters of ``chain``'s loops, outermost first:
    each element, through Enters and Identities, the body value of a loop variable of its loop that
    enters as the constant 0 and adds 1 in each body (``facts.counters``)."""
    pack = index.node
    if pack.op != "Pack" or len(pack.inputs) != len(chain):
        return False
    return all(_counter_start(t, loop) == 0 for t, loop in zip(pack.inputs, chain, strict=True))


def _counter_start(t: Tensor, loop: WhileRegion) -> Optional[int]:
    """The constant a counter of ``loop`` (``facts.counters``: int32, adding 1 in each body) enters
    as, when ``t`` is that counter's body value, through Enters and Identities; ``None`` otherwise."""
    while t.node.op in ("Enter", "Identity"):
        t = t.node.inputs[0]
    for j in counters(loop):
        e, m = loop.loop_vars[j][0], loop.loop_vars[j][1]
        start = e.inputs[0].node
        value = np.asarray(start.attrs.get("value")) if start.op == "Const" else None
        if value is not None and value.shape == () and body_value(loop, t, m):
            return int(value)
    return None


def value_of_counter(index: Any, level: int, start: int) -> Any:
    """What a counted stack whose push pushed a counter of its chain's loop ``level``, entered as
    ``start``, holds under ``index``: ``index[level] + start`` (``CountedStack.counter``)."""
    ix = jnp.asarray(index, jnp.int32)
    got = jax.lax.squeeze(jax.lax.slice(ix, (level,), (level + 1,)), (0,))
    return got if start == 0 else jax.lax.add(got, np.int32(start))


def position(index: Any, dims: tuple[int, ...]) -> Any:
    """The row-major position of the int32 vector ``index`` in an array of shape ``dims``: where a
    counted stack holds the entry pushed under it."""
    strides = [math.prod(dims[i + 1:]) for i in range(len(dims))]
    ix = jnp.asarray(index, jnp.int32)
    if len(dims) == 1:
        return jax.lax.squeeze(jax.lax.slice(ix, (0,), (1,)), (0,))
    terms = jax.lax.mul(ix, np.asarray(strides, np.int32))
    return jax.lax.reduce(terms, np.int32(0), jax.lax.add, (0,))


def in_range(index: Any, dims: tuple[int, ...]) -> Any:
    """Whether every element ``i`` of ``index`` lies in ``[0, dims[i] - 1]`` (traced)."""
    ix = jnp.asarray(index, jnp.int32)
    hi = np.asarray([d - 1 for d in dims], np.int32)
    ok = jax.lax.bitwise_and(jax.lax.ge(ix, np.int32(0)), jax.lax.le(ix, hi))
    return jax.lax.reduce(ok, np.bool_(True), jax.lax.bitwise_and, (0,))


def proved(ranges: Optional[list[tuple[int, int]]], dims: tuple[int, ...]) -> bool:
    """Whether element ranges ``ranges`` (``Ranges.each``) lie within ``dims``."""
    return ranges is not None and len(ranges) == len(dims) \
        and all(0 <= lo and hi <= d - 1 for (lo, hi), d in zip(ranges, dims, strict=True))


def read(buf: Any, index: Any, dims: tuple[int, ...]) -> Any:
    """The entry of a full counted stack's buffer under ``index``. An index out of range (its pop's
    check reports it) reads an entry of the buffer all the same: XLA clamps a dynamic slice's start
    into the array."""
    return slot(buf, position(index, dims))
