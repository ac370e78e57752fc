"""z3 encodings of builder-made programs: bounded symbolic execution over the structured form.

Why: z3 turns the structured semantics ([S-Cond], [S-While]) into formulas, which makes three things
possible that running a program cannot do: predict the outputs of an integer program without any
executor (a third opinion next to the reference interpreter and the structured evaluator), *solve*
for inputs that drive a loop exactly k times or take a chosen branch (sharp inputs for the property
tests), and prove two graphs equal on all inputs up to an unrolling bound (rewrites, gradient
plumbing).

The encoding walks the same regions and items as ``semantics.structured`` (``Walker``), with z3
terms for values:

- int32 / int64 scalars are bit-vectors of width 32 / 64, so wraparound is numpy's; comparisons are
  signed; ``Div`` is floor division and ``FloorMod`` takes the divisor's sign, as numpy's.
- bool scalars are z3 Bools.
- float scalars are z3 Reals: *ideal* arithmetic, no rounding, no inf/nan. Predictions for float
  programs are exact rationals, not float32/float64 results.
- Only scalars: any other shape, and any primitive outside ``Z3_RULES``, raises ``UnsupportedError``
  naming the op (the deliberate exclusions are listed in ``Z3_UNSUPPORTED``).

Control flow. Each region is executed under a *path condition* (``guard``). At a cond ([S-Cond]) the
predicate is simplified: when it is a constant only the taken branch is encoded, otherwise both
branches are encoded under ``guard & p`` and ``guard & ~p`` and the Merges join them with
``If(p, ...)`` (forking, then merging the states at the join). A loop ([S-While]) is unrolled
iteration by iteration: iteration ``j`` runs under ``active_j`` (the guard and every earlier test),
the loop stops at ``j`` under ``stop_j = active_j & ~test_j``, and the Exit values are
``If(stop_0, v_0, If(stop_1, v_1, ...))``. Unrolling ends when ``active_j & test_j`` is false, or at
the bound ``k``, where ``active_k & test_k`` is recorded as *beyond the bound*. With concrete inputs
every predicate simplifies to a constant, so the encoding is an exact execution.

Partial operations: an integer ``Div`` / ``FloorMod`` whose divisor may be zero on the current path
adds the obligation ``guard -> divisor != 0``; solver queries assume every obligation, and a
concrete execution that breaks one raises ``KernelError`` like the numpy kernel.

Solver queries always carry a timeout (``timeout_ms``); an ``unknown`` answer raises
``SolverUnknown`` (or, for ``equivalent``, returns ``equal=None``), never anything else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import z3

from turnout.control_flow.contexts import CondInfo, WhileContext
from turnout.errors import (
    FeedError,
    GraphBuildError,
    KernelError,
    TurnoutError,
    UnsupportedError,
    describe_node,
)
from turnout.graph import Graph, Node, Tensor, TensorSpec
from turnout.semantics.structured import StructuredForm, Tag, Walker, in_loop
from turnout.tables import registrar

__all__ = [
    "BeyondBound", "EquivalenceResult", "SolverUnknown", "Z3_RULES", "Z3_UNSUPPORTED", "encode", "equivalent",
    "predict", "synthesize_branch", "synthesize_trip_count",
]


class SolverUnknown(TurnoutError):
    """z3 answered ``unknown`` (timeout or an undecidable query): the question has no answer here.
    Property tests catch it and discard the example."""


class BeyondBound(TurnoutError):
    """A concrete execution needs more loop iterations than the unrolling bound allows."""


Sym = Any  # a z3 term


# ---------------------------------------------------------------------------------------------------
# Sorts and literals
# ---------------------------------------------------------------------------------------------------
def _is_scalar(spec: TensorSpec) -> bool:
    return spec.shape is None or spec.shape == ()


def sort_of(spec: TensorSpec, uninterpreted: bool = False, what: str = "") -> z3.SortRef:
    """The z3 sort of a tensor: BitVec(32/64), Bool or Real for scalars; with ``uninterpreted``, an
    uninterpreted sort per (dtype, shape) for everything else."""
    d = spec.dtype
    if _is_scalar(spec) and not d.is_opaque:
        if d.is_integer:
            return z3.BitVecSort(8 * d.itemsize)
        if d.is_bool:
            return z3.BoolSort()
        if d.is_floating:
            return z3.RealSort()
    if uninterpreted:
        shape = "?" if spec.shape is None else "x".join(str(s) for s in spec.shape)
        return z3.DeclareSort(f"{d.name}[{shape}]")
    raise UnsupportedError(
        f"z3 encoding: {what or 'a tensor'} is a {d.name} of shape {list(spec.shape or [])}; only int, bool "
        "and float scalars are encoded (use uninterpreted=True to treat other values abstractly)"
    )


def literal(value: Any, spec: TensorSpec) -> Sym:
    """A concrete scalar as a z3 term of ``spec``'s sort."""
    d = spec.dtype
    v = np.asarray(value)
    if v.shape != ():
        raise UnsupportedError(f"the value {value!r} is not a scalar; the z3 encoding is scalar-only")
    if d.is_integer:
        return z3.BitVecVal(int(v), 8 * d.itemsize)
    if d.is_bool:
        return z3.BoolVal(bool(v))
    if d.is_floating:
        return z3.RealVal(Fraction(float(v)))
    raise UnsupportedError(f"z3 encoding: cannot make a {d.name} literal")


def to_python(term: Sym, spec: TensorSpec) -> int | bool | float:
    """A constant z3 term back to Python: signed ints, bools, floats (from the exact rational)."""
    term = z3.simplify(term)
    if spec.dtype.is_integer and z3.is_bv_value(term):
        return int(term.as_signed_long())
    if spec.dtype.is_bool and (z3.is_true(term) or z3.is_false(term)):
        return bool(z3.is_true(term))
    if spec.dtype.is_floating and z3.is_rational_value(term):
        return float(term.as_fraction())
    raise UnsupportedError(f"z3 encoding: {term} is not a constant {spec.dtype.name}")


def _const_bool(term: Sym) -> bool | None:
    t = z3.simplify(term)
    return True if z3.is_true(t) else False if z3.is_false(t) else None


# ---------------------------------------------------------------------------------------------------
# The rule table: interpreted meaning of each primitive on scalars
# ---------------------------------------------------------------------------------------------------
Rule = Callable[["_SymExec", Node, list[Sym]], list[Sym]]
Z3_RULES: dict[str, Rule] = {}


_rule = registrar(Z3_RULES)


def _out(n: Node, k: int = 0) -> TensorSpec:
    return n.outputs[k].spec


def _is_int(n: Node, k: int = 0) -> bool:
    return _out(n, k).dtype.is_integer


@_rule("Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond")
def _structural(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    """Encoded by the walk itself ([S-Cond], [S-While]), never as an op."""
    raise UnsupportedError(f"z3 encoding: {describe_node(n)} is not part of a builder-made cond or while_loop")


@_rule("NoOp")
def _noop(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return []


@_rule("Const")
def _const(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return [literal(n.attrs["value"], _out(n))]


@_rule("CheckpointSlots")
def _checkpoint_slots(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return [literal(n.attrs["slots"], _out(n))]


@_rule("Identity", "StopGradient", "PreventGradient", "Sleep", "CheckpointTrips")
def _identity(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return [ins[0]]


@_rule("Add")
def _add(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return [ins[0] + ins[1]]


@_rule("Sub")
def _sub(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return [ins[0] - ins[1]]


@_rule("Mul")
def _mul(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return [ins[0] * ins[1]]


@_rule("Square")
def _square(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return [ins[0] * ins[0]]


@_rule("Neg")
def _neg(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return [-ins[0]]


@_rule("Div")
def _div(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    """numpy's floor division on ints (bvsdiv truncates, so step down when the remainder's sign differs
    from the divisor's); real division on floats. Either way the divisor must not be zero."""
    a, b = ins
    ex.require_nonzero(n, b)
    if not _is_int(n):
        return [a / b]
    q, r = a / b, z3.SRem(a, b)
    return [z3.If(z3.And(r != 0, (r < 0) != (b < 0)), q - 1, q)]


@_rule("FloorMod")
def _floormod(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    """bvsmod: the result takes the divisor's sign, like numpy's ``mod``."""
    if not _is_int(n):
        raise UnsupportedError(f"z3 encoding: {describe_node(n)} on floats is not encoded")
    ex.require_nonzero(n, ins[1])
    return [ins[0] % ins[1]]


@_rule("Maximum")
def _maximum(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    a, b = ins
    return [z3.If(a >= b, a, b)]


@_rule("Minimum")
def _minimum(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    a, b = ins
    return [z3.If(a <= b, a, b)]


@_rule("Abs")
def _abs(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return [z3.If(ins[0] < 0, -ins[0], ins[0])]  # abs(INT_MIN) wraps to INT_MIN, as in numpy


@_rule("Relu")
def _relu(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    zero = literal(0, _out(n))
    return [z3.If(ins[0] > zero, ins[0], zero)]


@_rule("Sign")
def _sign(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    one, zero = literal(1, _out(n)), literal(0, _out(n))
    return [z3.If(ins[0] > zero, one, z3.If(ins[0] < zero, -one, zero))]


_COMPARE: dict[str, Callable[[Sym, Sym], Sym]] = {
    "Less": lambda a, b: a < b,
    "LessEqual": lambda a, b: a <= b,
    "Greater": lambda a, b: a > b,
    "GreaterEqual": lambda a, b: a >= b,
    "Equal": lambda a, b: a == b,
    "NotEqual": lambda a, b: a != b,
}


@_rule(*_COMPARE)
def _compare(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    """Signed comparisons on bit-vectors (z3's Python operators on BitVecs are the signed ones)."""
    return [_COMPARE[n.op](ins[0], ins[1])]


@_rule("LogicalAnd")
def _and(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return [z3.And(ins[0], ins[1])]


@_rule("LogicalOr")
def _or(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return [z3.Or(ins[0], ins[1])]


@_rule("LogicalNot")
def _not(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return [z3.Not(ins[0])]


@_rule("Select")
def _select(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    return [z3.If(ins[0], ins[1], ins[2])]


@_rule("Cast")
def _cast(ex: _SymExec, n: Node, ins: list[Sym]) -> list[Sym]:
    """Between int32, int64 and bool (numpy's ``astype``: sign-extend, truncate, ``!= 0``, 0/1), and
    from ints or bools to floats (exact). Casts from floats are not encoded."""
    src, dst = n.inputs[0].dtype, _out(n).dtype
    x = ins[0]
    if src == dst:
        return [x]
    if src.is_integer and dst.is_integer:
        ws, wd = 8 * src.itemsize, 8 * dst.itemsize
        return [z3.SignExt(wd - ws, x) if wd > ws else z3.Extract(wd - 1, 0, x)]
    if src.is_integer and dst.is_bool:
        return [x != 0]
    if src.is_bool and dst.is_integer:
        return [z3.If(x, literal(1, _out(n)), literal(0, _out(n)))]
    if src.is_integer and dst.is_floating:
        return [z3.ToReal(z3.BV2Int(x, is_signed=True))]
    if src.is_bool and dst.is_floating:
        return [z3.If(x, z3.RealVal(1), z3.RealVal(0))]
    raise UnsupportedError(f"z3 encoding: {describe_node(n)} casts {src.name} to {dst.name}, which is not encoded")


#: Primitives deliberately not encoded: transcendental functions (no exact z3 theory), tensors and
#: TensorArrays (the encoding is scalar-only), state (Variables, stacks), and integer Pow (no
#: bit-vector power). With ``uninterpreted=True`` the compute ones among them become uninterpreted
#: functions, and the stateful ones are still refused.
Z3_UNSUPPORTED: frozenset[str] = frozenset({
    "Placeholder",  # not a rule: a Placeholder is an input of the query (its own z3 constant)
    "Tanh", "Sigmoid", "Exp", "Log", "Sqrt", "Pow", "Log1p", "Expm1", "Erf", "Sin", "Cos",
    "Tan", "Asin", "Acos", "Atan", "Atan2", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Erfc", "Lgamma", "Digamma",
    "Floor", "Ceil", "Round", "Cumsum", "Cumprod", "Prod",
    "RandomDraw",  # Philox arithmetic: encodable, but no query needs it
    "Assert",  # a failing check is an error, which the encoding has no value for
    "ArgMax", "ArgMin", "TopK", "ReverseSequence",
    "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MaxPool", "MaxPoolGrad", "AvgPool", "AvgPoolGrad",
    "MatMul", "MatrixInverse", "Cholesky", "MatrixTriangularSolve", "MatrixSolve", "MatrixDeterminant",
    "LogMatrixDeterminant",
    "Reshape", "ReshapeTo", "Transpose", "ExpandDims", "Concat", "Pack", "GetItem", "GetItemGrad", "Gather",
    "ScatterAddLike", "UpdateSlot", "Tile", "Sum", "Mean", "Max", "Min", "All", "Any", "ZerosLike", "OnesLike", "Fill",
    "Shape",
    "Size",
    "BroadcastLike", "SumToLike",
    "TensorArrayNew", "TensorArrayWrite", "TensorArrayRead", "TensorArrayStack", "TensorArrayUnstack",
    "TensorArraySize", "TensorArrayAdd", "TensorArrayAccumulate", "TensorArrayReadOrZeros", "TensorArrayStackOrZeros",
    "VarHandle", "ReadVariable", "AssignVariable", "AssignAddVariable", "AssignSubVariable",
    "StackNew", "StackPush", "StackPop",
    "Send", "Recv",  # transfers between partitions: z3 encodes the unpartitioned graph, which T7 equates
})

#: Kept interpreted even with ``uninterpreted=True``: the Boolean structure and value plumbing, so
#: ``cond(~p, g, f)`` is still recognised as ``cond(p, f, g)``.
_ALWAYS_INTERPRETED = frozenset({"Const", "Identity", "StopGradient", "PreventGradient", "LogicalAnd", "LogicalOr",
                                 "LogicalNot", "Select", "NoOp"})
_STATEFUL = frozenset({"VarHandle", "ReadVariable", "AssignVariable", "AssignAddVariable", "AssignSubVariable",
                       "StackNew", "StackPush", "StackPop", "Send", "Recv"})


# ---------------------------------------------------------------------------------------------------
# Uninterpreted functions, shared by the graphs of one query
# ---------------------------------------------------------------------------------------------------
def _norm(v: Any) -> Any:
    if isinstance(v, np.ndarray) or isinstance(v, np.generic):
        a = np.asarray(v)
        return ("array", a.dtype.str, a.shape, a.tolist())
    if isinstance(v, dict):
        return tuple(sorted((k, _norm(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_norm(x) for x in v)
    return v


class UninterpretedTable:
    """One z3 function per (primitive, attrs, input sorts, output): the same op with the same attrs
    is the same function in every graph of a query, and nothing else is known about it."""

    def __init__(self) -> None:
        self._decls: dict[str, Any] = {}

    def apply(self, n: Node, ins: list[Sym], k: int, out: z3.SortRef) -> Sym:
        """Output ``k`` of ``n`` applied to ``ins``: the z3 function of its (op, attrs, input sorts, ``k``, output
        sort), declared on first use, so that the same op with the same attrs is the same function in every graph of
        the query."""
        sig = repr((n.op, _norm(n.attrs), [str(x.sort()) for x in ins], k, str(out)))
        name = f"{n.op}_{hashlib.sha1(sig.encode()).hexdigest()[:10]}"
        if name not in self._decls:
            self._decls[name] = (z3.Function(name, *[x.sort() for x in ins], out) if ins else z3.Const(name, out))
        f = self._decls[name]
        return f(*ins) if ins else f

    def constant(self, value: Any, sort: z3.SortRef) -> Sym:
        """A non-scalar constant: one z3 constant per distinct value."""
        a = np.asarray(value)
        name = f"const_{hashlib.sha1(repr((a.dtype.str, a.shape, a.tolist(), str(sort))).encode()).hexdigest()[:10]}"
        if name not in self._decls:
            self._decls[name] = z3.Const(name, sort)
        return self._decls[name]


# ---------------------------------------------------------------------------------------------------
# The symbolic walk
# ---------------------------------------------------------------------------------------------------
@dataclass
class LoopInstance:
    """One instance of a loop: ``stops[j]`` holds when it stops after exactly j trips; ``beyond`` when
    it would need more than the bound."""

    tag: Tag
    stops: list[Sym] = field(default_factory=list)
    beyond: Sym = None


class _SymExec(Walker):
    def __init__(self, form: StructuredForm, inputs: Mapping[tuple[int, int], Sym], bound: int,
                 uninterpreted: bool, table: UninterpretedTable, concrete: bool) -> None:
        super().__init__(form)
        self.inputs = dict(inputs)
        self.bound = bound
        self.uninterpreted = uninterpreted
        self.table = table
        self.concrete = concrete
        self.guard: Sym = z3.BoolVal(True)
        self.safe: list[Sym] = []
        self.beyond: list[Sym] = []
        self.loops: dict[int, list[LoopInstance]] = {}
        self.conds: dict[int, list[tuple[Sym, Sym]]] = {}

    # -- obligations --------------------------------------------------------------------------------
    def require_nonzero(self, n: Node, divisor: Sym) -> None:
        """An integer divisor must not be zero on the current path (the numpy kernel raises there);
        real division is excluded at zero too, since ideal arithmetic has no inf."""
        zero = divisor == literal(0, n.inputs[1].spec)
        hit = _const_bool(z3.And(self.guard, zero))
        if hit is True:
            raise KernelError(f"{describe_node(n)}: division by zero (z3 encoding)")
        if hit is None:
            self.safe.append(z3.Implies(self.guard, z3.Not(zero)))

    # -- nodes --------------------------------------------------------------------------------------
    def node(self, n: Node, tag: Tag) -> None:
        op = n.op
        if op == "Placeholder":
            if (n.id, 0) not in self.inputs:
                raise FeedError(f"{describe_node(n)} is neither an input of the query nor given a value")
            self.write(n, 0, tag, self.inputs[(n.id, 0)])
            return
        if op == "Merge" and n.id in self.form.loop_merges:
            return  # bound by [S-While] before the test
        ins = [self.read(t, tag) for t in n.inputs]
        if op == "Switch" and n.id in self.form.loop_switches:
            self.write(n, 0, tag, ins[0])  # both outputs carry the value; the guards say which is live
            self.write(n, 1, tag, ins[0])
            return
        if op in ("LoopCond", "NextIteration") and in_loop(n) is not None:
            self.write(n, 0, tag, ins[0])
            return
        if op in _STATEFUL:
            raise UnsupportedError(f"z3 encoding: {describe_node(n)} reads or writes state, which is not encoded")
        if self.uninterpreted and not (op in _ALWAYS_INTERPRETED and self._scalars(n)):
            outs = self._abstract(n, ins)
        else:
            rule = Z3_RULES.get(op)
            if rule is None:
                raise UnsupportedError(f"z3 encoding: {describe_node(n)} ({op}) is not encoded")
            if not self._scalars(n):
                sort_of(next(t.spec for t in (*n.inputs, *n.outputs) if not _is_scalar(t.spec)),
                        what=f"a value of {describe_node(n)}")
            outs = rule(self, n, ins)
            if self.concrete:
                outs = [z3.simplify(o) for o in outs]
        for k, v in enumerate(outs):
            self.write(n, k, tag, v)

    def _scalars(self, n: Node) -> bool:
        return all(_is_scalar(t.spec) and not t.dtype.is_opaque for t in (*n.inputs, *n.outputs))

    def _abstract(self, n: Node, ins: list[Sym]) -> list[Sym]:
        """With ``uninterpreted=True`` a compute op is an unknown function of its inputs: equal inputs
        give equal outputs, and nothing more is assumed. Constants and identities keep their meaning."""
        if n.op == "Const":
            return [self.table.constant(n.attrs["value"], sort_of(_out(n), True))]
        if n.op in ("Identity", "StopGradient", "PreventGradient"):
            return [ins[0]]
        if n.op == "NoOp":
            return []
        return [self.table.apply(n, ins, k, sort_of(t.spec, True)) for k, t in enumerate(n.outputs)]

    # -- [S-Cond] -------------------------------------------------------------------------------------
    def cond(self, info: CondInfo, tag: Tag) -> None:
        """[S-Cond]: a constant predicate encodes only the taken branch; a symbolic one encodes both,
        each under its path condition, and joins them with If."""
        p = self.read(info.pred, tag)
        self.conds.setdefault(id(info), []).append((self.guard, p))
        for s in self.form.switches(info):
            v = self.read(s.inputs[0], tag)
            self.write(s, 0, tag, v)
            self.write(s, 1, tag, v)
        known = _const_bool(p)
        taken = [1] if known is True else [0] if known is False else [1, 0]
        outer = self.guard
        for b in taken:
            self.guard = z3.simplify(z3.And(outer, p if b else z3.Not(p)))
            self.run_region(info.branches[b], tag)
        self.guard = outer
        for m in self.form.merges(info):
            if len(taken) == 1:
                v, idx = self.read(m.inputs[taken[0]], tag), z3.BitVecVal(taken[0], 32)
            else:
                v = z3.If(p, self.read(m.inputs[1], tag), self.read(m.inputs[0], tag))
                idx = z3.If(p, z3.BitVecVal(1, 32), z3.BitVecVal(0, 32))
            self.write(m, 0, tag, v)
            self.write(m, 1, tag, idx)

    # -- [S-While] ------------------------------------------------------------------------------------
    def loop(self, ctx: WhileContext, tag: Tag) -> None:
        """[S-While], unrolled: iteration j runs under ``active_j``; the Exit values are the loop
        variables at the iteration where the loop stops."""
        frame = ctx.frame_name
        enters, entered, lvs, vals = self.loop_entry(ctx, tag)
        exits = self.form.exits(ctx)
        inst = LoopInstance(tag)
        self.loops.setdefault(ctx.id, []).append(inst)
        result: dict[int, Sym] = {}
        outer = self.guard
        active = outer
        j = 0
        while True:
            tj = (*tag, (frame, j))
            self.seed_iteration(tj, enters, entered, lvs, vals, z3.BitVecVal(0 if j == 0 else 1, 32))
            self.guard = active
            self.run_region(ctx, tj, "test")
            test = self.read(ctx.pivot.outputs[0], tj)  # type: ignore[union-attr]
            stop = z3.simplify(z3.And(active, z3.Not(test)))
            go = z3.simplify(z3.And(active, test))
            inst.stops.append(stop)
            if _const_bool(stop) is not False:
                for x in exits:
                    v, prev = self.read(x.inputs[0], tj), result.get(x.id)
                    result[x.id] = v if prev is None or _const_bool(stop) is True else z3.If(stop, v, prev)
            if _const_bool(go) is False:
                break
            if j >= self.bound:
                inst.beyond = go
                self.beyond.append(go)
                break
            self.guard = go
            self.run_region(ctx, tj, "body")
            vals = [self.read(lv.next_iteration.outputs[0], tj) for lv in lvs]
            self.env.pop(tj, None)
            active = go
            j += 1
        self.guard = outer
        self.env.pop(tj, None)
        for x in exits:
            v = result.get(x.id)
            if v is None:  # no path stops within the bound: the value is unconstrained
                v = z3.FreshConst(sort_of(x.outputs[0].spec, self.uninterpreted), "beyond_bound")
            self.write(x, 0, tag, z3.simplify(v) if self.concrete else v)


# ---------------------------------------------------------------------------------------------------
# Building an encoding
# ---------------------------------------------------------------------------------------------------
@dataclass
class Encoding:
    """The formulas of one graph: ``values`` of the targets' outputs, the ``safe`` obligations, the
    ``beyond``-bound conditions, and per loop / cond the instances the walk met."""

    values: dict[tuple[int, int], Sym]
    safe: list[Sym]
    beyond: list[Sym]
    loops: dict[int, list[LoopInstance]]
    conds: dict[int, list[tuple[Sym, Sym]]]

    def within_bound(self) -> Sym:
        """The condition that no loop instance runs past the bound (true when none could)."""
        return z3.And(*[z3.Not(b) for b in self.beyond]) if self.beyond else z3.BoolVal(True)

    def assumptions(self) -> Sym:
        """What a query assumes of its runs: every loop stops within the bound and every ``safe`` obligation holds
        (no division by zero on a path taken)."""
        return z3.And(self.within_bound(), *self.safe)


def encode(graph: Graph, targets: Sequence[Node], inputs: Mapping[Tensor, Sym], bound: int,
           uninterpreted: bool = False, table: UninterpretedTable | None = None,
           concrete: bool = False) -> Encoding:
    """Symbolically execute the part of ``graph`` that ``targets`` need, with ``inputs`` (placeholder ->
    z3 term), unrolling every loop instance at most ``bound`` times."""
    if bound < 0:
        raise GraphBuildError(f"the unrolling bound must be >= 0, got {bound}")
    form = StructuredForm(graph, targets)
    refused = _STATEFUL if uninterpreted else Z3_UNSUPPORTED - {"Placeholder"}
    bad = sorted((n for n in form.needed.values() if n.op in refused), key=lambda n: n.id)
    if bad:
        names = ", ".join(describe_node(n) for n in bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise UnsupportedError(f"z3 encoding: {names} not encoded (see Z3_UNSUPPORTED)")
    ins = {(t.node.id, t.index): v for t, v in inputs.items()}
    ex = _SymExec(form, ins, bound, uninterpreted, table or UninterpretedTable(), concrete)
    ex.run_region(None, ())
    root = ex.env.get((), {})
    values = {(n.id, k): root[(n.id, k)] for n in targets for k in range(len(n.outputs)) if (n.id, k) in root}
    return Encoding(values, ex.safe, ex.beyond, ex.loops, ex.conds)


def _check_fetch(t: Tensor) -> None:
    w = in_loop(t.node)
    if w is not None:
        raise GraphBuildError(f"cannot fetch {t.name}: it is inside {w.describe()}; fetch the loop's result")


def _fetch_value(enc: Encoding, t: Tensor) -> Sym:
    try:
        return enc.values[(t.node.id, t.index)]
    except KeyError:
        from turnout.errors import DeadFetchError, dead_fetch_message

        raise DeadFetchError(dead_fetch_message(t.name, t.node)) from None


def _solver(timeout_ms: int) -> z3.Solver:
    s = z3.Solver()
    s.set("timeout", int(timeout_ms))
    return s


def _check(s: z3.Solver) -> z3.ModelRef | None:
    """sat -> model, unsat -> None, unknown -> SolverUnknown (with z3's reason)."""
    try:
        r = s.check()
    except z3.Z3Exception as e:  # z3 can raise on interruption; it is still "no answer"
        raise SolverUnknown(f"z3 gave no answer: {e}") from None
    if r == z3.sat:
        return s.model()
    if r == z3.unsat:
        return None
    raise SolverUnknown(f"z3 answered unknown ({s.reason_unknown()})")


def _model_value(m: z3.ModelRef, term: Sym, spec: TensorSpec) -> Any:
    return to_python(m.eval(term, model_completion=True), spec)


# ---------------------------------------------------------------------------------------------------
# (a) predict
# ---------------------------------------------------------------------------------------------------
def predict(graph: Graph, fetches: Sequence[Tensor], inputs: Mapping[Tensor, Any], bound: int = 1000) -> list[Any]:
    """The fetched values for concrete ``inputs`` (placeholder -> value), by the z3 encoding alone.

    Exact for int and bool programs (bit-vector arithmetic wraps like numpy); float programs are
    computed in ideal (rational) arithmetic. Raises ``BeyondBound`` when a loop needs more than
    ``bound`` iterations and ``KernelError`` on an integer division by zero.
    """
    fetches = list(fetches)
    for t in fetches:
        _check_fetch(t)
    terms = {p: _input_literal(p, v) for p, v in inputs.items()}
    enc = encode(graph, [t.node for t in fetches], terms, bound, concrete=True)
    for b in enc.beyond:
        if _const_bool(b) is not False:
            raise BeyondBound(f"a loop needs more than bound={bound} iterations for these inputs")
    return [to_python(_fetch_value(enc, t), t.spec) for t in fetches]


# ---------------------------------------------------------------------------------------------------
# (b) input synthesis
# ---------------------------------------------------------------------------------------------------
def _find_loop(graph: Graph, loop: WhileContext | str) -> WhileContext:
    if isinstance(loop, WhileContext):
        return loop
    for c in graph.contexts:
        if isinstance(c, WhileContext) and loop in (c.frame_name, c.name):
            return c
    raise GraphBuildError(f"no while_loop with frame or name {loop!r} in this graph")


def _find_cond(graph: Graph, cond: CondInfo | str) -> CondInfo:
    if isinstance(cond, CondInfo):
        return cond
    for c in graph.contexts:
        info = getattr(c, "info", None)
        if info is not None and info.name == cond:
            return info  # type: ignore[no-any-return]
    raise GraphBuildError(f"no cond named {cond!r} in this graph")


def _input_literal(p: Tensor, v: Any) -> Sym:
    try:
        return literal(v, p.spec)
    except UnsupportedError as e:
        raise UnsupportedError(f"z3 encoding: input {p.name}: {e}") from None


def _symbolic_inputs(inputs: Sequence[Tensor], fixed: Mapping[Tensor, Any] | None) -> dict[Tensor, Sym]:
    terms: dict[Tensor, Sym] = {}
    for k, p in enumerate(inputs):
        if p.node.op != "Placeholder":
            raise GraphBuildError(f"input {p.name} of a query must be a placeholder")
        terms[p] = z3.Const(f"in{k}_{p.node.name}", sort_of(p.spec, what=f"input {p.name}"))
    for p, v in (fixed or {}).items():
        terms[p] = _input_literal(p, v)
    return terms


def _solve(enc: Encoding, goal: Sym, inputs: Sequence[Tensor], terms: Mapping[Tensor, Sym],
           timeout_ms: int) -> dict[Tensor, Any] | None:
    s = _solver(timeout_ms)
    s.add(enc.assumptions(), goal)
    m = _check(s)
    if m is None:
        return None
    return {p: _model_value(m, terms[p], p.spec) for p in inputs}


def synthesize_trip_count(graph: Graph, loop: WhileContext | str, k: int, inputs: Sequence[Tensor],
                          bound: int | None = None, timeout_ms: int = 2000,
                          fixed: Mapping[Tensor, Any] | None = None) -> dict[Tensor, Any] | None:
    """Values for the placeholders ``inputs`` that make ``loop`` (a loop outside every other loop, given
    as its WhileContext, frame name or name) run its body exactly ``k`` times; ``fixed`` gives other
    placeholders a value. Every loop the trip count depends on must finish within ``bound``
    (default ``k``) and no division by zero may occur. ``None`` when no such inputs exist;
    ``SolverUnknown`` when z3 cannot tell within ``timeout_ms``."""
    ctx = _find_loop(graph, loop)
    if ctx.outer is not None and ctx.outer.while_context is not None:
        raise UnsupportedError(
            f"synthesize_trip_count: {ctx.describe()} is nested in another loop; choose a top-level loop")
    bound = k if bound is None else bound
    if k > bound:
        raise GraphBuildError(f"synthesize_trip_count: k={k} exceeds the unrolling bound {bound}")
    terms = _symbolic_inputs(inputs, fixed)
    assert ctx.pivot is not None
    enc = encode(graph, [ctx.pivot], terms, bound)
    goal = z3.Or(*[inst.stops[k] for inst in enc.loops.get(ctx.id, []) if len(inst.stops) > k] or [z3.BoolVal(False)])
    return _solve(enc, goal, inputs, terms, timeout_ms)


def synthesize_branch(graph: Graph, cond: CondInfo | str, branch: int, inputs: Sequence[Tensor],
                      bound: int = 10, timeout_ms: int = 2000,
                      fixed: Mapping[Tensor, Any] | None = None) -> dict[Tensor, Any] | None:
    """Values for ``inputs`` that make ``cond`` (its CondInfo or name) take ``branch`` (1 = true,
    0 = false). Inside a loop, some instance taking the branch is enough. ``None`` when impossible
    within ``bound`` unrollings; ``SolverUnknown`` when z3 cannot tell within ``timeout_ms``."""
    if branch not in (0, 1):
        raise GraphBuildError(f"synthesize_branch: branch must be 1 (true) or 0 (false), got {branch!r}")
    info = _find_cond(graph, cond)
    terms = _symbolic_inputs(inputs, fixed)
    enc = encode(graph, [info.pivot_switch], terms, bound)
    taken = [z3.And(g, p if branch else z3.Not(p)) for g, p in enc.conds.get(id(info), [])]
    return _solve(enc, z3.Or(*taken) if taken else z3.BoolVal(False), inputs, terms, timeout_ms)


# ---------------------------------------------------------------------------------------------------
# (c) equivalence
# ---------------------------------------------------------------------------------------------------
@dataclass
class EquivalenceResult:
    """``equal``: True when the two graphs agree on every input for which both finish within the bound
    without a division by zero; False with a ``counterexample`` (first graph's placeholder -> value);
    None when z3 could not decide within the timeout (``reason`` says why). With ``uninterpreted=True``
    a counterexample is an input on which *some* meaning of the uninterpreted ops tells the graphs
    apart: a difference of structure, not necessarily one under the real kernels."""

    equal: bool | None
    counterexample: dict[Tensor, Any] | None = None
    reason: str = ""


def equivalent(graph_a: Graph, fetches_a: Sequence[Tensor], graph_b: Graph, fetches_b: Sequence[Tensor],
               inputs_a: Sequence[Tensor], inputs_b: Sequence[Tensor], bound: int = 10,
               uninterpreted: bool = True, timeout_ms: int = 2000) -> EquivalenceResult:
    """Do two graphs compute the same fetches from the same inputs (``inputs_a[i]`` and ``inputs_b[i]``
    are the same input), up to ``bound`` unrollings of every loop?

    With ``uninterpreted=True`` every compute op except the Boolean connectives, Select and Identity is
    an uninterpreted function named by its primitive and attrs, so the answer depends only on the
    control-flow and dataflow structure: ``cond(p, lambda: f(x), lambda: f(x))`` equals ``f(x)``, swapping
    the branches under a negated predicate changes nothing, and a changed constant is a difference.
    """
    fa, fb = list(fetches_a), list(fetches_b)
    if len(fa) != len(fb):
        raise GraphBuildError(f"equivalent: {len(fa)} fetches against {len(fb)}")
    for t in (*fa, *fb):
        _check_fetch(t)
    shared: dict[Tensor, Sym] = {}
    terms_b: dict[Tensor, Sym] = {}
    for k, (pa, pb) in enumerate(zip(inputs_a, inputs_b, strict=True)):
        sa, sb = sort_of(pa.spec, uninterpreted, pa.name), sort_of(pb.spec, uninterpreted, pb.name)
        if sa != sb:
            raise GraphBuildError(
                f"equivalent: input {k} is {pa.dtype.name} in one graph and {pb.dtype.name} in the other")
        shared[pa] = terms_b[pb] = z3.Const(f"in{k}_{pa.node.name}", sa)
    table = UninterpretedTable()
    ea = encode(graph_a, [t.node for t in fa], shared, bound, uninterpreted, table)
    eb = encode(graph_b, [t.node for t in fb], terms_b, bound, uninterpreted, table)
    diffs = []
    for ta, tb in zip(fa, fb, strict=True):
        va, vb = _fetch_value(ea, ta), _fetch_value(eb, tb)
        if va.sort() != vb.sort():
            return EquivalenceResult(False, None, f"{ta.name} and {tb.name} have different types")
        diffs.append(va != vb)
    s = _solver(timeout_ms)
    s.add(ea.assumptions(), eb.assumptions(), z3.Or(*diffs) if diffs else z3.BoolVal(False))
    try:
        m = _check(s)
    except SolverUnknown as e:
        return EquivalenceResult(None, None, str(e))
    if m is None:
        return EquivalenceResult(True, None, f"equal on every input within {bound} iterations per loop")
    cex = {}
    for p in inputs_a:
        try:
            cex[p] = _model_value(m, shared[p], p.spec)
        except UnsupportedError:  # an uninterpreted-sort input has no Python value
            cex[p] = str(m.eval(shared[p], model_completion=True))
    return EquivalenceResult(False, cex, "the graphs differ on this input")
