"""Integer ranges of traced values: the indices a TensorArray read or a ``GetItem`` cannot take out
of range, known while a program is traced.

Why: in the body of a loop whose header is ``counter < bound`` (the counter an int32 loop variable
from a known start, advanced by one, the bound known when tracing), the counter lies in
``[start, bound - 1]`` in every body that runs. A fold reads its elements at the counter, so when
the TensorArray holds ``bound`` elements its read cannot fail: it needs neither its range check
nor its clamp. Without such reads a nest of folds has nothing that writes the error word but its
loops' bounds, whose checks are then made once, before the nest (``Emitter._hoist_checks``); with
them every level of the nest carried the error word and checked it, and a nest of folds compiled
in 2.5 to 4 times the time of the same nest of ``lax.scan``.

Values are JAX tracers, known by identity: the table maps ``id(value)`` to the value and its range,
the value kept so that its id is not reused while the entry lives. The emitter adds a loop's
counter while it traces the loop's body, and forgets it and what was computed from it after
(``Emitter.run_light_while``); the rules below (``RANGE_RULES``, keyed by primitive) give the range
of what a body computes from ranged values and constants, such as the slot ``n - 1 - i`` a
reversed fold reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np

from turnout.fast.values import is_static
from turnout.graph import Node

Range = tuple[int, int]

#: the int32 values: a range that leaves them would wrap when computed, so none is recorded
_INT32 = (int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max))


class Ranges:
    """Traced integer values with the closed range each is known to lie in."""

    def __init__(self) -> None:
        # id -> (value, lo, hi) for a scalar; (value, None, per-element ranges) for a vector
        self._by_id: dict[int, tuple[Any, Any, Any]] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, v: Any) -> Optional[Range]:
        """The range of ``v``: a point for a static integer scalar, the recorded range of a traced
        value, ``None`` when nothing is known."""
        if is_static(v):
            a = np.asarray(v)
            return (int(a), int(a)) if a.shape == () and a.dtype.kind in "iu" else None
        got = self._by_id.get(id(v))
        return (got[1], got[2]) if got is not None and got[0] is v and got[1] is not None else None

    def each(self, v: Any) -> Optional[list[Range]]:
        """The range of every element of the integer vector ``v``: points for a static one, the
        recorded ranges of a traced one (``add_each``), ``None`` when not all are known."""
        if is_static(v):
            a = np.asarray(v)
            return [(int(x), int(x)) for x in a] if a.ndim == 1 and a.dtype.kind in "iu" else None
        got = self._by_id.get(id(v))
        return list(got[2]) if got is not None and got[0] is v and got[1] is None else None

    def add(self, v: Any, lo: int, hi: int) -> None:
        """Record that the traced ``v`` lies in ``[lo, hi]``."""
        if not is_static(v) and _INT32[0] <= lo <= hi <= _INT32[1]:
            self._by_id[id(v)] = (v, lo, hi)

    def add_each(self, v: Any, ranges: Sequence[Range]) -> None:
        """Record that element ``i`` of the traced vector ``v`` lies in ``ranges[i]``."""
        if not is_static(v) and all(_INT32[0] <= lo <= hi <= _INT32[1] for lo, hi in ranges):
            self._by_id[id(v)] = (v, None, tuple(ranges))

    def mark(self) -> int:
        """A mark to ``forget`` back to: the entries made after it belong to one trace."""
        return len(self._by_id)

    def forget(self, mark: int) -> None:
        """Forget every entry made since ``mark``: the body whose trace made them is traced, and its
        values are not to be kept alive or read again."""
        for k in list(self._by_id)[mark:]:
            del self._by_id[k]

    def within(self, v: Any, lo: int, hi: int) -> bool:
        """Whether ``v`` is known to lie in ``[lo, hi]``."""
        r = self.get(v)
        return r is not None and lo <= r[0] and r[1] <= hi


def known_within(ctx: Any, v: Any, lo: int, hi: int) -> bool:
    """Whether the lowering context ``ctx`` knows ``v`` to lie in ``[lo, hi]`` (an empty table, as a
    cluster group's, knows nothing, and its rules check as if nothing were known)."""
    return bool(ctx.ranges.within(v, lo, hi))


def first_write(ctx: Any, n: Node, written: Optional[frozenset[int]], i: Any) -> bool:
    """Whether the TensorArrayWrite ``n``, at index ``i`` of an array known to hold the slots
    ``written`` written (``TA.written``, ``None`` when unknown), is known to write a slot nobody
    wrote before: a constant index not among them, or a loop's one write to a loop variable at a
    slot that moves with the loop's counter (``facts.fresh_writes``: no two bodies write one slot)
    whose range holds none of the slots written when the loop was entered
    (``Emitter.fresh_writes``)."""
    if is_static(i) and written is not None:
        return int(i) not in written
    entry: Optional[frozenset[int]] = ctx.fresh_writes.get(n.id)
    if entry is None:
        return False
    got = ctx.ranges.get(i)
    return got is not None and not any(got[0] <= k <= got[1] for k in entry)


RangeRule = Callable[[Sequence[Optional[Range]]], Optional[Range]]


def _same(rs: Sequence[Optional[Range]]) -> Optional[Range]:
    return rs[0]


def _add(rs: Sequence[Optional[Range]]) -> Optional[Range]:
    a, b = rs
    return None if a is None or b is None else (a[0] + b[0], a[1] + b[1])


def _sub(rs: Sequence[Optional[Range]]) -> Optional[Range]:
    a, b = rs
    return None if a is None or b is None else (a[0] - b[1], a[1] - b[0])


#: primitive -> the range of its output from the ranges of its inputs (``None`` where unknown)
RANGE_RULES: dict[str, RangeRule] = {"Identity": _same, "Add": _add, "Sub": _sub}


def propagate(table: Ranges, n: Node, xs: Sequence[Any], outs: Sequence[Any]) -> None:
    """Record the range of node ``n``'s traced integer output, computed from ``xs``, when its rule
    and the ranges of its inputs give one. A ``Pack`` of integer scalars records the range of each
    element of the vector it makes: a gradient stack's index is one (``Emitter.full``)."""
    if len(outs) != 1 or is_static(outs[0]) or not n.outputs[0].dtype.is_integer:
        return
    if n.op == "Pack" and n.attrs.get("axis", 0) == 0:
        each = [table.get(x) for x in xs]
        if all(r is not None and np.ndim(x) == 0 for r, x in zip(each, xs, strict=True)):
            table.add_each(outs[0], each)  # type: ignore[arg-type]
        return
    rule = RANGE_RULES.get(n.op)
    if rule is None:
        return
    got = rule([table.get(x) for x in xs])
    if got is not None:
        table.add(outs[0], *got)


#: ops through which an index may come from a loop's counter (``from_counter``), and ops whose
#: values are known when tracing (shapes are static in XLA)
_CARRIES = frozenset({"Identity", "Enter", "Switch"})
_KNOWN = frozenset({"Const", "Shape", "Size", "TensorArraySize"})


def from_counter(t: Any, merges: frozenset[int], limit: int = 16) -> bool:
    """Whether tensor ``t`` is computed by Identity, Enter, Switch, Add, Sub and constant indexing
    from the counter Merges ``merges`` (node ids) and values known when tracing (constants and
    shapes): an index that the ranges may prove in range when the nest is traced, such as a fold's
    ``i``, ``n - 1 - i`` or ``0``. A structural guess, made before tracing (``facts.cannot_fail``);
    what the trace cannot prove is checked as before."""
    work, steps = [t], 0
    while work:
        n = work.pop().node
        steps += 1
        if steps > limit:
            return False
        if n.id in merges or n.op in _KNOWN:
            continue
        if n.op in _CARRIES or (n.op == "GetItem" and len(n.inputs) == 1):
            work.append(n.inputs[0])
        elif n.op in ("Add", "Sub"):
            work.extend(n.inputs)
        else:
            return False
    return True


def counters_reached(t: Any, merges: frozenset[int], limit: int = 16) -> frozenset[int]:
    """The counter Merges of ``merges`` (node ids) that index ``t`` is computed from, through the ops
    ``from_counter`` follows: the loops whose counters' ranges a proof of ``t`` in range needs. What
    ``from_counter`` would not follow (a pop, a loop variable) ends the search there: such an index
    is either proved without the counters (a full counted stack's pop) or not at all."""
    work, steps, out = [t], 0, set()
    while work and steps <= limit:
        n = work.pop().node
        steps += 1
        if n.id in merges:
            out.add(n.id)
        elif n.op in _CARRIES or (n.op == "GetItem" and len(n.inputs) == 1):
            work.append(n.inputs[0])
        elif n.op in ("Add", "Sub"):
            work.extend(n.inputs)
    return frozenset(out)

