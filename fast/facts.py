"""Facts about a program's loops that tracing relies on: pure functions of the region tree.

Which loop variables count iterations (``counters``), which loops are *counted* (a header
``counter < bound`` with a bound fixed on entry: ``bounded_counter``, ``counted_bound``), which
TensorArray writes are each slot's first (``own_writes``, ``fresh_writes``), whether a loop's header may
be recomputed instead of carried (``light_header``), and whether a nest's nodes can write the error
word at all (``cannot_fail``, from the op sets ``NEVER_FAIL``, ``FLOAT_ONLY_FAIL`` and ``TA_INDEXED``).

Why a module of its own: each is decided from the graph alone, before or while a loop is traced, and
the emitter (``fast.emit``), the counted stacks (``fast.counted_stacks``) and the tests read them; kept
here they can be read and tested without a trace, and none of them imports the emitter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from turnout.fast.case_chain import SPECULABLE
from turnout.fast.ranges import counters_reached, from_counter
from turnout.fast.regions import WhileRegion, key, walk
from turnout.fast.values import is_static
from turnout.graph import Node, Tensor


def _safe_operand(n: Node) -> bool:
    """Whether an integer ``Div``/``FloorMod`` divides by a constant without zeros, or an integer
    ``Pow`` raises to a constant without negatives: its check then holds when traced and writes
    nothing (``lowering._holds``)."""
    c = n.inputs[1].node
    while c.op in ("Identity", "Enter"):  # (a constant made outside the loop enters it)
        c = c.inputs[0].node
    if c.op != "Const":
        return False
    v = np.asarray(c.attrs.get("value"))
    return bool(np.all(v >= 0)) if n.op == "Pow" else bool(np.all(v != 0))


def bounded_counter(r: WhileRegion) -> Optional[tuple[int, Tensor]]:
    """``(j, bound)`` when loop ``r``'s predicate is one ``Less(counter, bound)`` on loop variable
    ``j``, a counter (``counters``), alone or and-ed with ``True`` (``_bound_test``): in every body
    that runs, the counter is below ``bound`` and no lower than where it started (``fast.ranges``).
    ``None`` for any other loop. (The header may compute other values beside it, such as the read of
    a Variable that an imported TF1 loop makes there: they do not decide the predicate.)"""
    less = _bound_test(r.loop_cond.inputs[0])
    if less is None:
        return None
    count, bound = less.inputs
    for j in counters(r):
        if count.node is r.loop_vars[j][1] and count.index == 0:
            return j, bound
    return None


def _bound_test(t: Tensor) -> Optional[Node]:
    """The ``Less`` node that alone decides predicate ``t``: ``t`` itself, or one side of a
    ``LogicalAnd`` whose other side is the constant ``True`` (``while_loop`` with
    ``maximum_iterations`` and a condition that is always true, as every backward loop of a
    gradient is: ``counter < trip_count and True``). ``None`` for any other predicate."""
    n = t.node
    if t.index != 0:
        return None
    if n.op == "LogicalAnd":
        a, b = n.inputs
        for less, other in ((a, b), (b, a)):
            c = other.node
            if less.index == 0 and less.node.op == "Less" and c.op == "Const" \
                    and np.asarray(c.attrs.get("value")).shape == () and bool(c.attrs["value"]) is True:
                return less.node
        return None
    return n if n.op == "Less" else None


def counter_merges(r: WhileRegion) -> frozenset[int]:
    """The ids of the counter Merges of ``r`` and of the loops nested in it whose headers bound them
    (``bounded_counter``): the indices computed from these may be proved in range while tracing."""
    out = set()
    for w in walk([r]):
        if isinstance(w, WhileRegion):
            found = bounded_counter(w)
            if found is not None:
                out.add(w.loop_vars[found[0]][1].id)
    return frozenset(out)


def fresh_writes(r: WhileRegion) -> list[tuple[int, Node]]:
    """``(j, write)`` for each loop variable ``j`` of ``r`` whose next value is its own value written
    once, by ``write``, at a slot that moves with the loop's bounded counter (``bounded_counter``):
    the counter itself, or the counter plus or minus values known when tracing (a scan's ``i``, a
    reversed scan's ``n - 1 - i``). No two bodies write one slot, so the write is the slot's first
    when no slot of its range was written before the loop (``ranges.first_write``)."""
    found = bounded_counter(r)
    if found is None:
        return []
    counter = r.loop_vars[found[0]][1]
    return [(j, w) for j, w in own_writes(r) if _moves_with(r, w.inputs[1], counter)]


def own_writes(r: WhileRegion) -> list[tuple[int, Node]]:
    """``(j, write)`` for each loop variable ``j`` of ``r`` whose next value is its own value (read
    through its Switch) written once, by ``write``: a scan's or a map's output TensorArray."""
    out = []
    for j, (_, m, nx, _, _) in enumerate(r.loop_vars):
        w = _through_identities(nx.inputs[0]).node
        if w.op == "TensorArrayWrite" and body_value(r, w.inputs[0], m):
            out.append((j, w))
    return out


def _through_identities(t: Tensor) -> Tensor:
    while t.node.op == "Identity":
        t = t.node.inputs[0]
    return t


def body_value(r: WhileRegion, t: Tensor, m: Node) -> bool:
    """Whether ``t`` is the value in loop ``r``'s body of its loop variable ``m`` (a Merge): the true
    output of the loop's Switch on it, through Identities."""
    t = _through_identities(t)
    sw = t.node
    return sw in r.switches and t.index == 1 and sw.inputs[0].node is m and sw.inputs[0].index == 0


def _moves_with(r: WhileRegion, t: Tensor, counter: Node, depth: int = 0) -> bool:
    """Whether ``t`` is loop ``r``'s ``counter`` (a Merge, read in the body) moved by Add and Sub of
    values known when tracing: a different value in every body."""
    if depth > 16:
        return False
    if body_value(r, t, counter):
        return True
    n = _through_identities(t).node
    if n.op == "Add" or n.op == "Sub":
        a, b = n.inputs
        if _moves_with(r, a, counter, depth + 1):
            return from_counter(b, frozenset())
        return _moves_with(r, b, counter, depth + 1) and from_counter(a, frozenset())
    return False


def counted_bound(r: WhileRegion) -> Optional[tuple[Node, int]]:
    """The invariant Enter (or the header's constant) that gives loop ``r`` its bound, and where its
    counter starts, when ``r`` is *counted*: its header is one ``Less(counter, bound)``, the counter
    an int32 loop variable entered as a constant ``start >= 0`` and advanced by 1 (``counters``),
    the bound a value entered unchanged (``is_constant``) or a constant. Such a loop runs exactly
    ``max(bound, start) - start`` bodies (a fold without an initializer starts at 1). ``None`` for
    any other loop. (Whether its check may be hoisted also depends on what else can fail in it:
    ``cannot_fail``, which also keeps out gradient stacks that are neither counted nor held.)"""
    found = bounded_counter(r)
    if found is None:
        return None
    j, bound = found
    fixed = bound.node in r.invariants or bound.node.op == "Const"
    inv = bound.node if bound.index == 0 and fixed else None
    start = r.loop_vars[j][0].inputs[0].node
    if inv is None or start.op != "Const" or np.asarray(start.attrs.get("value")).shape != () \
            or int(start.attrs["value"]) < 0:
        return None
    return inv, int(start.attrs["value"])


#: ops whose lowering never writes the error word (whatever the shapes their rule accepts), and ops
#: that do on integers only (integer division and modulo by zero, a negative integer power): a nest
#: made only of these has no error to order against its loops' bounds (``CountedNests._counted_chain``).
#: (A shape that a rule refuses while the nest is traced writes the word of any op: the nest is then
#: traced again without hoisting, ``LightLoops._emit_hoisted``.)
NEVER_FAIL = frozenset({
    "Const", "Identity", "NoOp", "Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond",
    "Add", "Sub", "Mul", "Maximum", "Minimum", "Neg", "Abs", "Sign", "Square", "Relu", "Tanh", "Sigmoid",
    "Exp", "Log", "Sqrt", "Less", "LessEqual", "Greater", "GreaterEqual", "Equal", "NotEqual",
    "LogicalAnd", "LogicalOr", "LogicalNot", "Select", "MatMul", "Transpose", "ExpandDims", "Concat",
    "Pack", "Reshape", "Sum", "Prod", "Mean", "StopGradient", "ZerosLike", "OnesLike", "Shape", "Size",
    "BroadcastLike", "SumToLike", "TensorArraySize", "TensorArrayUnstack", "TensorArrayNew",
    "TensorArrayStackOrZeros", "VarHandle", "ReadVariable",
})
FLOAT_ONLY_FAIL = frozenset({"Div", "FloorMod", "Pow"})
#: the TensorArray ops that index a slot (``lowering._ta_index``): they write no check for an
#: index proved in range
TA_INDEXED = frozenset({"TensorArrayRead", "TensorArrayWrite", "TensorArrayReadOrZeros", "TensorArrayAccumulate"})


def cannot_fail(nodes: list[Node], counted: frozenset[int] = frozenset(), proved: frozenset[int] = frozenset()) -> bool:
    """Whether no node of ``nodes`` can write the error word when traced: each is in ``NEVER_FAIL``,
    in ``FLOAT_ONLY_FAIL`` with a float result or a constant operand that cannot fail
    (``_safe_operand``: ``i // 2``), a ``Cast`` other than float to integer (the one cast
    that checks its values: a NaN, an infinity or a value out of the integer's range fails), or an
    indexing whose index comes from the loop counters ``counted`` (``counter_merges``), the proved
    pops ``proved`` and values known when tracing (``ranges.from_counter``): a TensorArray read,
    write or accumulation (``TA_INDEXED``), or a ``GetItem``
    whose every run-time index does (one of constant indices only fails, if at all, when traced).
    Such an index is proved in range while tracing (``fast.ranges``), and a write proved to be its
    slot's first (``ranges.first_write``); what the trace cannot prove (a TensorArray shorter than
    the loop's bound, a slot written twice) is still checked, and the nest is then traced again
    with its checks after each loop (``LightLoops._emit_hoisted``). ``proved``: the ids of stack ops
    that write nothing (``CountedNests._proved_stack_ops``)."""
    return all(n.op in NEVER_FAIL or n.id in proved or (n.op in FLOAT_ONLY_FAIL and (n.outputs[0].dtype.is_floating
                                                                  or _safe_operand(n)))
               or (n.op == "Cast" and not (n.inputs[0].dtype.is_floating and n.outputs[0].dtype.is_integer))
               or (n.op in TA_INDEXED and from_counter(n.inputs[1], counted | proved))
               or (n.op == "GetItem" and all(from_counter(t, counted | proved) for t in n.inputs[1:]))
               for n in nodes)


def light_header(r: WhileRegion, read_at_1: Optional[set[int]] = None) -> bool:
    """Whether a loop's header (what computes its predicate from the loop variables) is made of
    speculable ops only, and nothing reads a loop Merge's ``value_index``: then the header may be
    recomputed from the loop variables wherever its values are needed, and nothing of it need be
    carried (``Emitter.run_light_while``).

    ``read_at_1``: the ids of the nodes whose output 1 some node reads (``Emitter.read_at_1``), if
    known. Why: found from ``r.nodes``, which hold the nested loops' nodes too, the search costs a
    nest of ``k`` loops ``k^2`` steps."""
    if not all(isinstance(it, Node) and it.op in SPECULABLE for it in r.header):
        return False
    merges = {m.id for _, m, _, _, _ in r.loop_vars}
    if read_at_1 is None:
        read_at_1 = {t.node.id for n in r.nodes for t in n.inputs if t.index == 1}
    return not merges & read_at_1


def counters(r: WhileRegion) -> list[int]:
    """The indices of the loop variables that count iterations: int32 *scalars* whose next value is
    their own body value plus the constant 1. ``while_loop`` adds one to every loop (the paper's
    forward counter). Started at 0, after ``k`` bodies such a counter holds ``k``, so the iteration
    bound can test it instead of carrying a count of its own. Why the static shape ``()`` is
    required, not assumed: a vector advanced by one (a decoder's per-row step counts, ``v + 1``) is
    no count of iterations, and the analyses built on counters read a counter as one number."""
    out = []
    for j, (_, m, nx, _, _) in enumerate(r.loop_vars):
        add = nx.inputs[0].node
        if add.op != "Add" or len(add.inputs) != 2 or m.outputs[0].dtype.numpy != np.int32 \
                or m.outputs[0].shape != ():
            continue
        src, one = add.inputs
        if not body_value(r, src, m):
            continue
        if one.node.op == "Const" and np.asarray(one.node.attrs.get("value")).shape == () \
                and int(one.node.attrs["value"]) == 1:
            out.append(j)
    return out


def nest_loops(r: WhileRegion) -> frozenset[int]:
    """The ids of every loop of the nest ``r`` heads, ``r`` included, at any depth (through conds, in
    headers and exit sides), found once per loop."""
    got = r.facts.get("nest_loops")
    if got is None:
        got = r.facts["nest_loops"] = frozenset(id(w) for w in walk([r]) if isinstance(w, WhileRegion))
    return got  # type: ignore[no-any-return]


def indexing_counters(r: WhileRegion) -> frozenset[int]:
    """The ids of the counter Merges (``counter_merges``) from which an index of the nest ``r`` heads
    is computed (a TensorArray read, write or accumulation, or a ``GetItem``'s run-time index): the
    counters whose ranges must be known when tracing for those indices to be proved in range
    (``fast.ranges``). Found once per loop."""
    got = r.facts.get("indexing_counters")
    if got is None:
        merges = counter_merges(r)
        out: set[int] = set()
        for n in r.nodes:
            if n.op in TA_INDEXED:
                out |= counters_reached(n.inputs[1], merges)
            elif n.op == "GetItem":
                for t in n.inputs[1:]:
                    out |= counters_reached(t, merges)
        got = r.facts["indexing_counters"] = frozenset(out)
    return got  # type: ignore[no-any-return]


def hoistable(r: WhileRegion, chain: Sequence[tuple[WhileRegion, Any]]) -> bool:
    """Whether the iteration-bound checks of the nest ``r`` heads may be made before it is entered
    (``CountedNests._hoist_checks``), given the nest's counted loops as its head sees them (``chain``:
    each loop with its number of bodies, ``CountedNests._counted_chain``) and that no node of the nest
    can fail (``cannot_fail``). Decided once, before the nest is traced, from the program and the
    values known at its head:

    - every loop of the nest is on the chain (``nest_loops``): a loop off it checks its own bound
      after it runs, and so writes the error word inside the nest;
    - every loop whose counter an index of the nest is computed from (``indexing_counters``) has a
      bound known when tracing: without it the counter has no range (``fast.ranges``), and the
      index is checked when it runs.

    Why before: a hoisted nest whose body writes the error word would raise its errors in another
    order than the interpreters (the bound checks first); deciding after the trace meant tracing the
    nest a second time. What only the trace can tell (a TensorArray shorter than a counter's range,
    a slot written before the loop) still refutes the decision while the nest is traced, and the
    nest is then traced once more without hoisting (``LightLoops._emit_hoisted``)."""
    on_chain = {id(c) for c, _ in chain}
    if not nest_loops(r) <= on_chain:
        return False
    need = indexing_counters(r)
    for loop, bodies in chain:
        found = bounded_counter(loop)
        if found is not None and loop.loop_vars[found[0]][1].id in need and not is_static(bodies):
            return False
    return True


def counter_starts(r: WhileRegion, vals0: Sequence[Any]) -> dict[int, int]:
    """The loop variables of ``r`` that count its iterations (``counters``) and start at a value
    known while tracing (``vals0``: the loop's entry values), with that value."""
    return {j: int(vals0[j]) for j in counters(r) if is_static(vals0[j])}


def counted_range(r: WhileRegion, starts: dict[int, int], base: dict[Any, Any]) -> Optional[tuple[int, int, int]]:
    """Where loop ``r``'s header is ``counter < bound`` with the counter's start (``starts``:
    ``counter_starts``) and the bound (a constant, or an invariant's value in ``base``) known while
    tracing: (the counter's index, its start, ``bound - 1``), the range the counter takes in every
    body; else ``None``."""
    found = bounded_counter(r)
    if found is None or found[0] not in starts:
        return None
    b = found[1].node
    bound = base.get(key(found[1])) if b.op != "Const" else np.asarray(b.attrs["value"])
    if bound is None or not is_static(bound) or np.asarray(bound).shape != ():
        return None
    return found[0], starts[found[0]], int(bound) - 1


def counter_exits(r: WhileRegion, vals0: Sequence[Any], base: dict[Any, Any]) -> dict[int, Any]:
    """The values the counters of loop ``r`` hold after it (``exit_counts``), where its range is known
    while tracing (``counted_range``, from its entry values ``vals0`` and invariants ``base``); none
    otherwise."""
    starts = counter_starts(r, vals0)
    ranged = counted_range(r, starts, base)
    return {} if ranged is None else exit_counts(starts, ranged)


def exit_counts(starts: dict[int, int], ranged: tuple[int, int, int]) -> dict[int, Any]:
    """The values the counters of a loop whose header is ``counter < bound`` hold when it ends, both
    known when tracing (``ranged``: the header's counter, its start, ``bound - 1``): the loop runs
    ``max(bound - start, 0)`` bodies, and each counter (``starts``: loop variable index -> its
    start) ends that many past its start.

    Why they may be constants: a run in which the loop ends otherwise (its iteration budget spent,
    or an error that stops a fused attempt's loop) has its error word set, and none of its values
    is returned. As constants, the trip count that a gradient reads from the loop's counter is known
    when its backward loop is traced: that loop is counted too (its counter's range proves the
    indices it pops, ``fast.ranges``), and a nested loop's trip count, pushed as a constant, pops as
    one (``Emitter.pushed_constant``)."""
    bodies = max(ranged[2] + 1 - ranged[1], 0)
    return {j: np.int32(s + bodies) for j, s in starts.items()}


__all__ = ["FLOAT_ONLY_FAIL", "NEVER_FAIL", "TA_INDEXED", "body_value", "bounded_counter", "cannot_fail",
           "counted_bound", "counted_range", "counter_exits", "counter_merges", "counter_starts", "counters",
           "exit_counts", "fresh_writes", "hoistable", "indexing_counters", "light_header", "nest_loops", "own_writes"]
