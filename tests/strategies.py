"""Hypothesis strategies: the one home of Turnout's test generators.

``programs()`` draws structured programs (``tests/programs.py``) using *swarm testing*: a program first
draws a ``Features`` record that switches whole features off (loops, conds, case, scan, nesting,
loop-invariant captures, maximum_iterations, parallel_iterations > 1, conds inside loop predicates,
loops inside branches). Each program therefore exercises a random subset of features, which finds
bugs that need a feature to be *absent* as well as present, and lets the shrinker switch features off
one at a time until a failing program is small and readable.

``float_programs()`` restricts the ops to differentiable ones and lets only int values (counters,
int inputs) steer control flow, so gradients are defined everywhere (T6).

``raw_graphs_ill_formed()`` builds hand-made graphs that break one well-formedness rule each, for T4's
negative half.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Optional

import numpy as np
from hypothesis import strategies as st
from programs import (
    F64,
    FLOATS,
    INT,
    SCALAR,
    Bin,
    Block,
    Built,
    Case,
    Cast,
    Cmp,
    Const,
    Expr,
    If,
    InputDecl,
    Let,
    Logic,
    Loop,
    Not,
    Program,
    Ref,
    Scan,
    Stmt,
    Unary,
    build,
)

import turnout as tn


@dataclass(frozen=True)
class Features:
    """Swarm flags: each switches one feature of generated programs on or off."""

    loops: bool = True
    conds: bool = True
    case: bool = True
    scan: bool = True
    nesting: bool = True
    captures: bool = True
    max_iterations: bool = True
    parallel: bool = True
    conds_in_preds: bool = True
    loops_in_branches: bool = True
    floats: bool = True


@st.composite
def features(draw: Any, int_only: bool = False, **fixed: bool) -> Features:
    """A swarm draw; ``fixed`` pins flags (e.g. ``loops=True``)."""
    vals = {}
    for f in fields(Features):
        if f.name in fixed:
            vals[f.name] = fixed[f.name]
        elif f.name == "floats" and int_only:
            vals[f.name] = False
        else:
            vals[f.name] = draw(st.booleans())
    return Features(**vals)


_INT_CONSTS = [0, 1, 2, 3, -1, 5, -4, 7, 2**30, -(2**31)]
_FLOAT_CONSTS = [0.0, 1.0, 0.5, -1.5, 2.0, -0.25]


class _Gen:
    """One program's generator state: the draw function, the flags and a fresh-name counter."""

    def __init__(self, draw: Any, feats: Features, max_depth: int, differentiable: bool, float_dtype: str,
                 max_stmts: int, max_bound: int = 4, max_vars: int = 2) -> None:
        self.max_bound = max_bound
        self.max_vars = max_vars
        self.draw = draw
        self.f = feats
        self.max_depth = max_depth
        self.diff = differentiable
        self.fd = float_dtype
        self.max_stmts = max_stmts
        self.counts: dict[str, int] = {}

    def fresh(self, prefix: str) -> str:
        k = self.counts.get(prefix, 0)
        self.counts[prefix] = k + 1
        return f"{prefix}{k}"

    def dtypes(self) -> list[str]:
        return [INT, self.fd] if self.f.floats else [INT]

    # ---- expressions ----------------------------------------------------------------------------
    def const(self, dtype: str) -> Const:
        if dtype == INT:
            return Const(self.draw(st.sampled_from(_INT_CONSTS[:8] if self.diff else _INT_CONSTS)), INT)
        return Const(self.draw(st.sampled_from(_FLOAT_CONSTS)), dtype)

    def expr(self, scope: list[tuple[str, str]], dtype: str, depth: int = 2) -> Expr:
        names = [n for n, d in scope if d == dtype]
        kinds = ["const"] + (["ref"] if names else [])
        if depth > 0:
            kinds += ["bin", "unary"]
            if dtype in FLOATS and not self.diff:
                kinds.append("cast")
        k = self.draw(st.sampled_from(kinds))
        if k == "const":
            return self.const(dtype)
        if k == "ref":
            return Ref(self.draw(st.sampled_from(names)), dtype)
        if k == "cast":
            return Cast(self.expr(scope, INT, depth - 1), dtype)
        if k == "unary":
            if dtype == INT:
                ops = ["neg"]
            elif self.diff:
                ops = ["neg", "tanh", "sigmoid", "exp"]
            else:
                ops = ["neg", "tanh", "sigmoid"]
            op = self.draw(st.sampled_from(ops))
            operand = self.expr(scope, dtype, depth - 1)
            if op == "exp":  # exp of a bounded value only
                operand = Unary("tanh", operand)
            return Unary(op, operand)
        if dtype == INT:
            ops = ["add", "sub", "mul", "max", "min", "mod"]
        elif self.diff:
            ops = ["add", "sub", "mul"]
        else:
            ops = ["add", "sub", "mul", "max", "min"]
        op = self.draw(st.sampled_from(ops))
        lhs = self.expr(scope, dtype, depth - 1)
        if op == "mod":  # nonzero divisor by construction
            return Bin("mod", lhs, Const(self.draw(st.sampled_from([3, 2, -3, 5, 7])), INT))
        return Bin(op, lhs, self.expr(scope, dtype, depth - 1))

    def pred(self, scope: list[tuple[str, str]], depth: int = 1) -> Expr:
        """A bool expression. Under ``differentiable`` only int values decide control flow."""
        dts = [INT] if self.diff else self.dtypes()
        kinds = ["cmp"] + (["logic", "not"] if depth > 0 else [])
        k = self.draw(st.sampled_from(kinds))
        if k == "cmp":
            d = self.draw(st.sampled_from(dts))
            op = self.draw(st.sampled_from(["lt", "le", "gt", "ge", "eq", "ne"]))
            return Cmp(op, self.expr(scope, d, 1), self.expr(scope, d, 1))
        if k == "not":
            return Not(self.pred(scope, depth - 1))
        return Logic(self.draw(st.sampled_from(["and", "or"])), self.pred(scope, depth - 1),
                     self.pred(scope, depth - 1))

    # ---- statements -----------------------------------------------------------------------------
    def block(self, scope: list[tuple[str, str]], level: int, result_dtypes: list[str], *,
              in_branch: bool = False, in_pred: bool = False) -> Block:
        scope = list(scope)
        stmts: list[Stmt] = []
        limit = self.max_stmts if level == 0 else max(1, self.max_stmts // 2)
        n = self.draw(st.integers(1 if level == 0 else 0, limit))
        for _ in range(n):
            s = self.stmt(scope, level, in_branch=in_branch, in_pred=in_pred)
            stmts.append(s)
            scope += _bound(s)
        results = tuple(self.expr(scope, d) for d in result_dtypes)
        return Block(tuple(stmts), results)

    def stmt(self, scope: list[tuple[str, str]], level: int, *, in_branch: bool, in_pred: bool) -> Stmt:
        kinds = ["let"]
        nested_ok = level + 1 <= self.max_depth and (level == 0 or self.f.nesting)
        if nested_ok and (not in_pred or self.f.conds_in_preds):
            if self.f.conds:
                kinds.append("if")
            if self.f.case:
                kinds.append("case")
            if not in_pred and (not in_branch or self.f.loops_in_branches):
                if self.f.loops:
                    kinds.append("loop")
                if self.f.scan and self._vectors(scope):
                    kinds.append("scan")
        # Control-flow statements are drawn twice as often as Lets (shrinking still goes to "let").
        k = self.draw(st.sampled_from(kinds + kinds[1:]))
        if k == "let":
            d = self.draw(st.sampled_from(self.dtypes()))
            return Let(self.fresh("v"), self.expr(scope, d))
        if k == "if":
            outs = self.result_dtypes()
            return If(self.fresh("cond"), tuple(self.fresh("v") for _ in outs), self.pred(scope),
                      self.block(scope, level + 1, outs, in_branch=True, in_pred=in_pred),
                      self.block(scope, level + 1, outs, in_branch=True, in_pred=in_pred))
        if k == "case":
            outs = self.result_dtypes()
            nb = self.draw(st.integers(1, 3))
            index = self.expr(scope, INT, 1)
            branches = tuple(self.block(scope, level + 1, outs, in_branch=True, in_pred=in_pred) for _ in range(nb))
            default = self.block(scope, level + 1, outs, in_branch=True, in_pred=in_pred)
            return Case(self.fresh("case"), tuple(self.fresh("v") for _ in outs), index, branches, default)
        if k == "loop":
            return self.loop(scope, level, in_branch=in_branch)
        return self.scan(scope, level, in_branch=in_branch)

    def result_dtypes(self) -> list[str]:
        return self.draw(st.lists(st.sampled_from(self.dtypes()), min_size=1, max_size=2))

    def _vectors(self, scope: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(n, d) for n, d in scope if d.startswith("vec:")]

    def _pi(self) -> int:
        return self.draw(st.sampled_from([2, 3, 10])) if self.f.parallel else 1

    def loop(self, scope: list[tuple[str, str]], level: int, in_branch: bool) -> Loop:
        lid = self.fresh("loop")
        counter = self.fresh("i")
        var_dtypes = self.draw(st.lists(st.sampled_from(self.dtypes()), min_size=0, max_size=self.max_vars))
        vars_ = tuple((self.fresh("v"), self.expr(scope, d)) for d in var_dtypes)
        inner = [(counter, INT), *((n, d) for (n, _), d in zip(vars_, var_dtypes, strict=True))]
        if self.f.captures:
            inner = scalars(scope) + inner
        pred = self.block(inner, level + 1, [], in_branch=in_branch, in_pred=True)
        pscope = inner + [b for s in pred.stmts for b in _bound(s)]
        pred = Block(pred.stmts, (self.pred(pscope),))
        body = self.block(inner + self._vectors(scope) if self.f.captures else inner, level + 1, var_dtypes,
                          in_branch=in_branch)
        bound = self.draw(st.integers(0, self.max_bound))
        mi = self.draw(st.one_of(st.none(), st.integers(0, self.max_bound))) if self.f.max_iterations else None
        targets = (self.fresh("v"), *(self.fresh("v") for _ in vars_))
        return Loop(lid, targets, counter, bound, vars_, pred, body, self._pi(), mi)

    def scan(self, scope: list[tuple[str, str]], level: int, in_branch: bool) -> Scan:
        vname, vdt = self.draw(st.sampled_from(self._vectors(scope)))
        d = vdt[len("vec:"):]
        sid = self.fresh("scan")
        carry, elem = self.fresh("c"), self.fresh("e")
        inner = [(carry, d), (elem, d)]
        if self.f.captures:
            inner = scalars(scope) + inner
        body = self.block(inner, level + 1, [d], in_branch=in_branch)
        return Scan(sid, self.fresh("v"), vname, carry, elem, self.expr(scope, d), body, self._pi(),
                    self.draw(st.booleans()))


def scalars(scope: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(n, d) for n, d in scope if not d.startswith("vec:")]


def _bound(s: Stmt) -> list[tuple[str, str]]:
    """The (name, dtype) pairs a statement binds."""
    if isinstance(s, Let):
        return [(s.name, s.expr.dtype)]
    if isinstance(s, (If, Case)):
        first = s.true if isinstance(s, If) else s.default
        return [(t, r.dtype) for t, r in zip(s.targets, first.results, strict=True)]
    if isinstance(s, Loop):
        return [(s.targets[0], INT), *((t, e.dtype) for t, (_, e) in zip(s.targets[1:], s.vars, strict=True))]
    if isinstance(s, Scan):
        return [(s.target, s.init.dtype)]
    raise TypeError(s)


@st.composite
def programs(draw: Any, int_only: bool = False, max_depth: int = 3, max_stmts: int = 3,
             feats: Optional[Features] = None, differentiable: bool = False, float_dtype: str = F64,
             max_bound: int = 4, max_vars: int = 2, **fixed: bool) -> Program:
    """A structured program. ``fixed`` pins swarm flags (e.g. ``programs(loops=True)``); loops run at
    most ``max_bound`` iterations and carry at most ``max_vars`` variables besides their counter."""
    f = feats if feats is not None else draw(features(int_only=int_only, **fixed))
    g = _Gen(draw, f, max_depth, differentiable, float_dtype, max_stmts, max_bound, max_vars)
    inputs = [InputDecl("x0", INT), InputDecl("x1", INT)]
    if f.floats:
        inputs.append(InputDecl("f0", float_dtype))
    if f.scan:
        inputs.append(InputDecl("xs", INT, draw(st.integers(1, 3))))
        if f.floats:
            inputs.append(InputDecl("fs", float_dtype, draw(st.integers(1, 3))))
    scope = [(d.name, d.dtype if d.length is None else f"vec:{d.dtype}") for d in inputs]
    body = g.block(scope, 0, [])
    top = scalars(scope) + [b for s in body.stmts for b in _bound(s)]
    # Fetch every value a top-level control-flow statement binds (so none of it is pruned away),
    # plus one drawn expression.
    fetched = [Ref(n, d) for s in body.stmts if not isinstance(s, Let) for n, d in _bound(s)]
    results = (*fetched, g.expr(top, draw(st.sampled_from(g.dtypes()))))
    return Program(tuple(inputs), Block(body.stmts, results))


def float_programs(max_depth: int = 2, float_dtype: str = F64, **fixed: bool) -> st.SearchStrategy[Program]:
    """Programs over differentiable float ops (+, -, *, neg, tanh, sigmoid, exp of a tanh) whose control
    flow is steered only by int values (loop counters, int inputs): gradients exist everywhere (T6)."""
    return programs(max_depth=max_depth, differentiable=True, float_dtype=float_dtype,
                    **{"floats": True, **fixed})


@dataclass
class GradientCase:
    """A generated float program with the gradients of its first float fetch w.r.t. its float inputs."""

    program: Program
    graph: tn.Graph
    grads: list[tn.Tensor]
    feeds: dict[tn.Tensor, Any]


@st.composite
def gradient_cases(draw: Any, max_depth: int = 2) -> GradientCase:
    """A program from ``float_programs`` with ``tn.gradients`` of its first float fetch with respect to
    its float inputs built in its graph (programs without such a pair, or whose gradients are all None,
    are rejected): the one recipe of the gradient property tests of every executor."""
    p = draw(float_programs(max_depth=max_depth))
    b, grads = gradient_graph(p)
    return GradientCase(p, b.graph, grads, b.feed_dict(draw(inputs_for(p, wide=False))))


def gradient_graph(p: Program, float_shape: Any = SCALAR, swap_memory: bool = False,
                   memory_budget: Optional[int] = None) -> tuple[Built, list[tn.Tensor]]:
    """``p`` built (``float_shape`` and ``swap_memory`` as ``programs.build`` takes them), with
    ``tn.gradients`` of its first float fetch w.r.t. its float inputs (None gradients left out), under
    ``memory_budget`` (the gradient's); a program without such a pair, or whose gradients are all
    None, is rejected (hypothesis ``assume``). What ``gradient_cases`` draws, for tests that feed the
    graph many times."""
    from hypothesis import assume

    b = build(p, float_shape, swap_memory)
    xs = [t for t in b.placeholders.values() if t.dtype.is_floating]
    ys = [f for f in b.fetches if f.dtype.is_floating]
    assume(xs and ys)
    with b.graph.as_default():
        grads = [g for g in tn.gradients(ys[0], xs, memory_budget=memory_budget) if g is not None]
    assume(grads)
    return b, grads


@st.composite
def inputs_for(draw: Any, p: Program, wide: bool = True) -> dict[str, np.ndarray]:
    """Values for every input of ``p``: small ints (sometimes extreme, to exercise int32 wraparound when
    ``wide``) and floats in [-2, 2]."""
    ints = st.integers(-3, 6)
    if wide:
        ints = st.one_of(ints, st.sampled_from([2**31 - 1, -(2**31), 2**20]))
    floats = st.floats(-2.0, 2.0, allow_nan=False, allow_infinity=False, width=32)
    out: dict[str, np.ndarray] = {}
    for d in p.inputs:
        elem = ints if d.dtype == INT else floats
        if d.length is None:
            out[d.name] = np.asarray(draw(elem), dtype=d.dtype)
        else:
            out[d.name] = np.asarray(draw(st.lists(elem, min_size=d.length, max_size=d.length)), dtype=d.dtype)
    return out


@st.composite
def programs_with_inputs(draw: Any, **kw: Any) -> tuple[Program, dict[str, np.ndarray]]:
    p = draw(programs(**kw))
    return p, draw(inputs_for(p))


# ---------------------------------------------------------------------------------------------------
# Ill-formed raw graphs (T4, negative half)
# ---------------------------------------------------------------------------------------------------
@dataclass
class IllFormed:
    """A hand-built graph that breaks ``rule``; ``fetches`` are what a careless user would run."""

    kind: str
    rule: str
    graph: tn.Graph
    fetches: list[tn.Tensor]


def _padding(draw: Any, x: tn.Tensor) -> tn.Tensor:
    """A few well-formed ordinary ops around the defect, so the defect is not always at the same place."""
    for _ in range(draw(st.integers(0, 3))):
        x = draw(st.sampled_from([tn.identity, lambda t: t + 1, lambda t: t * 2]))(x)
    return x


def _ill_mixed_frames(draw: Any) -> tuple[str, list[tn.Tensor]]:
    x = _padding(draw, tn.placeholder(tn.int32, [], name="x"))
    e = tn.raw.enter(x, "F")
    return "W-Frame-Consistent", [tn.raw.exit(_padding(draw, e + x))]


def _ill_exit_outside(draw: Any) -> tuple[str, list[tn.Tensor]]:
    x = _padding(draw, tn.placeholder(tn.int32, [], name="x"))
    return "W-Exit-In-Frame", [_padding(draw, tn.raw.exit(x))]


def _ill_unbound_back_edge(draw: Any) -> tuple[str, list[tn.Tensor]]:
    x = _padding(draw, tn.constant(0))
    e = tn.raw.enter(x, "F")
    m, _ = tn.raw.merge([e, tn.raw.BACK_EDGE])
    p = tn.raw.loop_cond(m < 3)
    f, t = tn.raw.switch(m, p)
    tn.raw.next_iteration(t + 1)  # created but never bound to the Merge
    return "W-Merge-Bound", [tn.raw.exit(f)]


def _ill_cycle_without_next(draw: Any) -> tuple[str, list[tn.Tensor]]:
    x = _padding(draw, tn.constant(0))
    e = tn.raw.enter(x, "F")
    m, _ = tn.raw.merge([e, tn.raw.BACK_EDGE])
    p = tn.raw.loop_cond(m < 3)
    f, t = tn.raw.switch(m, p)
    back = _padding(draw, t + 1)
    m.node._inputs[1] = back  # a back edge that skips NextIteration: only reachable by hand
    return "W-Cycle-Through-Next", [tn.raw.exit(f)]


def _ill_merge_dtypes(draw: Any) -> tuple[str, list[tn.Tensor]]:
    from turnout.graph import TensorSpec

    a = _padding(draw, tn.placeholder(tn.int32, [], name="a"))
    b = tn.placeholder(tn.float64, [], name="b")
    g = a.graph
    m = g.create_node("Merge", [a, b], name="bad_merge",
                      specs=[TensorSpec(tn.int32, ()), TensorSpec(tn.int32, ())])
    return "W-Types", [m.outputs[0]]


ILL_FORMED: dict[str, Callable[[Any], tuple[str, list[tn.Tensor]]]] = {
    "mixed_frames": _ill_mixed_frames,
    "exit_outside_frame": _ill_exit_outside,
    "unbound_back_edge": _ill_unbound_back_edge,
    "cycle_without_next_iteration": _ill_cycle_without_next,
    "mismatched_merge_dtypes": _ill_merge_dtypes,
}


@st.composite
def raw_graphs_ill_formed(draw: Any, kinds: Optional[list[str]] = None) -> IllFormed:
    """A raw graph with exactly one well-formedness defect (see ``ILL_FORMED``)."""
    kind = draw(st.sampled_from(sorted(kinds or ILL_FORMED)))
    g = tn.Graph()
    with g.as_default():
        rule, fetches = ILL_FORMED[kind](draw)
    return IllFormed(kind, rule, g, fetches)


# ---- placements (T7) -------------------------------------------------------------------------------
DEVICE_ORDERS = ("round_robin", "random", "threads")


@dataclass(frozen=True)
class PlacementDraw:
    """A random placement of a graph's nodes over ``devices`` (soft requests: colocation constraints win),
    with the partition order and seed of the partitioned run and the ready-queue scheduler inside."""

    devices: tuple[str, ...]
    requests: dict[str, str]
    order: str
    seed: int
    scheduler: str


@st.composite
def placements(draw: Any, graph: tn.Graph, min_devices: int = 2, max_devices: int = 4,
               orders: tuple[str, ...] = DEVICE_ORDERS) -> PlacementDraw:
    """Every node of ``graph`` requested on a device drawn from 2-4 devices (shrinks towards device 0)."""
    n = draw(st.integers(min_devices, max_devices))
    devices = tuple(f"/job:localhost/task:0/device:CPU:{i}" for i in range(n))
    idx = draw(st.lists(st.integers(0, n - 1), min_size=len(graph.nodes), max_size=len(graph.nodes)))
    requests = {node.name: devices[i] for node, i in zip(graph.nodes, idx)}
    return PlacementDraw(devices, requests, draw(st.sampled_from(orders)), draw(st.integers(0, 2**16)),
                         draw(st.sampled_from(("fifo", "lifo", "random"))))


__all__ = [
    "DEVICE_ORDERS", "PlacementDraw", "placements",
    "Features", "IllFormed", "features", "float_programs", "inputs_for", "programs",
    "programs_with_inputs", "raw_graphs_ill_formed",
]


# ---------------------------------------------------------------------------------------------------
# Damaged files (the loaders' fuzzers)
# ---------------------------------------------------------------------------------------------------
def byte_mutations(data: bytes, max_flips: int = 8) -> st.SearchStrategy[bytes]:
    """Truncations, flipped bytes, inserted and deleted runs of ``data``: what a damaged or cut-off
    file looks like to a loader."""
    n = len(data)
    truncate = st.integers(0, n).map(lambda k: data[:k])
    flips = st.lists(st.tuples(st.integers(0, n - 1), st.integers(1, 255)), min_size=1, max_size=max_flips).map(
        lambda fl: bytes(b ^ dict(fl).get(k, 0) for k, b in enumerate(data)))
    insert = st.tuples(st.integers(0, n), st.binary(min_size=1, max_size=16)).map(
        lambda a: data[:a[0]] + a[1] + data[a[0]:])
    delete = st.tuples(st.integers(0, n - 1), st.integers(1, 32)).map(lambda a: data[:a[0]] + data[a[0] + a[1]:])
    return st.one_of(truncate, flips, insert, delete)


# ---------------------------------------------------------------------------------------------------
# Window programs (tests/test_jax_differential_new_ops.py): a window op in a control-flow context
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WindowCase:
    """One window op (``conv`` / ``max`` / ``avg``) over an image batch of ``nhwc`` (the filter
    ``kernel`` x ``channels``), in ``context`` (plain, while, cond, map, scan), with the placeholder's
    shape ``known`` as far as ``shape_mode`` says (static, batch unknown, rank unknown)."""

    op: str
    dtype: str
    data_format: str
    nhwc: tuple[int, int, int, int]
    out_channels: int
    window: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    padding: str
    shape_mode: str
    context: str
    seed: int


@st.composite
def window_cases(draw: Any) -> WindowCase:
    """Batches of 0 to 2 images of 0 to 4 rows and columns, windows up to 3 (larger than the input
    under SAME), strides up to 3 (larger than the window), dilations of a convolution up to 2; a VALID
    window that would not fit is drawn as SAME (that refusal has its own test)."""
    op = draw(st.sampled_from(["conv", "max", "avg"]))
    nhwc = (draw(st.integers(0, 2)), draw(st.integers(0, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 2)))
    window = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if op == "conv" else (1, 1)
    padding = draw(st.sampled_from(["SAME", "VALID"]))
    if any((window[i] - 1) * dil[i] + 1 > nhwc[1 + i] for i in range(2)):
        padding = "SAME"
    return WindowCase(op=op, dtype=draw(st.sampled_from(["float32", "float64"])),
                      data_format=draw(st.sampled_from(["NHWC", "NCHW"])), nhwc=nhwc,
                      out_channels=draw(st.integers(1, 2)), window=window,
                      strides=(draw(st.integers(1, 3)), draw(st.integers(1, 3))), dilations=dil, padding=padding,
                      shape_mode=draw(st.sampled_from(["static", "batch", "unknown"])),
                      context=draw(st.sampled_from(["plain", "while", "cond", "map", "scan"])),
                      seed=draw(st.integers(0, 2**31 - 1)))


__all__ += ["WindowCase", "window_cases"]
