"""A small structured program language for differential testing of Turnout's executors.

Why a separate AST: the property tests need programs that (a) every executor can run — the builders
lower them to Switch/Merge/Enter/Exit/NextIteration — and (b) have an *obviously correct* meaning
that owes nothing to the graph. This module gives each program four faces:

- ``to_source(p)``: readable Python using ``tn.`` calls (what a failing hypothesis example prints);
- ``build(p)``: the graph, emitted with ``tn.while_loop`` / ``tn.cond`` / ``tn.case`` / ``tn.scan``;
- ``interpret(p, inputs)``: a direct Python evaluation of the AST with numpy scalar semantics
  (int32 wraps around), which also records the trip count of every loop instance and the branch
  every conditional took — an oracle independent of both the graph and the executors;
- ``summarize(p)``: feature counts for the differential campaign.

Loops terminate by construction: every ``Loop`` has a counter that starts at 0, is incremented by the
body (implicitly, by the language, not by generated code) and is bounded by a small constant, so the
predicate is always ``counter < bound and <generated predicate>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import numpy as np

import turnout as tn

# ---------------------------------------------------------------------------------------------------
# The AST
# ---------------------------------------------------------------------------------------------------
INT = "int32"
F64 = "float64"
F32 = "float32"
BOOL = "bool"
FLOATS = (F64, F32)


@dataclass(frozen=True)
class Const:
    value: Union[int, float]
    dtype: str


@dataclass(frozen=True)
class Ref:
    """A program input or a variable bound by Let / a loop / a cond / a scan."""

    name: str
    dtype: str


@dataclass(frozen=True)
class Bin:
    """Arithmetic: add, sub, mul, max, min, mod (int only; the divisor is a nonzero Const)."""

    op: str
    lhs: Expr
    rhs: Expr

    @property
    def dtype(self) -> str:
        return self.lhs.dtype


@dataclass(frozen=True)
class Unary:
    """neg (any numeric dtype); tanh, sigmoid, exp, square (floats)."""

    op: str
    operand: Expr

    @property
    def dtype(self) -> str:
        return self.operand.dtype


@dataclass(frozen=True)
class Cast:
    operand: Expr
    dtype: str


@dataclass(frozen=True)
class Cmp:
    """lt, le, gt, ge, eq, ne -> bool."""

    op: str
    lhs: Expr
    rhs: Expr
    dtype: str = BOOL


@dataclass(frozen=True)
class Logic:
    """and, or over bools."""

    op: str
    lhs: Expr
    rhs: Expr
    dtype: str = BOOL


@dataclass(frozen=True)
class Not:
    operand: Expr
    dtype: str = BOOL


Expr = Union[Const, Ref, Bin, Unary, Cast, Cmp, Logic, Not]


@dataclass(frozen=True)
class Block:
    stmts: tuple[Stmt, ...]
    results: tuple[Expr, ...]


@dataclass(frozen=True)
class Let:
    name: str
    expr: Expr


@dataclass(frozen=True)
class If:
    """``targets = tn.cond(pred, true, false)``."""

    id: str
    targets: tuple[str, ...]
    pred: Expr
    true: Block
    false: Block


@dataclass(frozen=True)
class Case:
    """``targets = tn.case(index, branches, default)``: branches[index] if 0 <= index < n else default."""

    id: str
    targets: tuple[str, ...]
    index: Expr
    branches: tuple[Block, ...]
    default: Block


@dataclass(frozen=True)
class Loop:
    """``targets = while counter < bound and pred(counter, vars): vars = body(counter, vars); counter += 1``.

    ``targets[0]`` receives the final counter, ``targets[1:]`` the final loop variables. The pred block
    yields one bool, the body block one value per loop variable.
    """

    id: str
    targets: tuple[str, ...]
    counter: str
    bound: int
    vars: tuple[tuple[str, Expr], ...]
    pred: Block
    body: Block
    parallel_iterations: int = 10
    maximum_iterations: Optional[int] = None


@dataclass(frozen=True)
class Scan:
    """``target = reduce_sum(tn.scan(lambda carry, elem: body, elems, initializer=init, reverse=reverse))``:
    with ``reverse`` the elements are taken last to first and ``ys[i]`` is the carry after element ``i``."""

    id: str
    target: str
    elems: str
    carry: str
    elem: str
    init: Expr
    body: Block
    parallel_iterations: int = 10
    reverse: bool = False


Stmt = Union[Let, If, Case, Loop, Scan]


@dataclass(frozen=True)
class InputDecl:
    name: str
    dtype: str
    length: Optional[int] = None  # None: a scalar; n: a vector of n elements (scan's elems)


@dataclass(frozen=True)
class Program:
    inputs: tuple[InputDecl, ...]
    body: Block

    def __str__(self) -> str:
        return to_source(self)


# ---------------------------------------------------------------------------------------------------
# Walking
# ---------------------------------------------------------------------------------------------------
def sub_blocks(s: Stmt) -> list[Block]:
    if isinstance(s, If):
        return [s.true, s.false]
    if isinstance(s, Case):
        return [*s.branches, s.default]
    if isinstance(s, Loop):
        return [s.pred, s.body]
    if isinstance(s, Scan):
        return [s.body]
    return []


def walk(block: Block, depth: int = 0) -> Iterator[tuple[Stmt, int]]:
    """Every statement with its control-flow nesting depth (0 = top level)."""
    for s in block.stmts:
        yield s, depth
        for b in sub_blocks(s):
            yield from walk(b, depth + 1)


def expr_refs(e: Expr) -> Iterator[str]:
    if isinstance(e, Ref):
        yield e.name
    for k in ("lhs", "rhs", "operand"):
        if hasattr(e, k):
            yield from expr_refs(getattr(e, k))


# ---------------------------------------------------------------------------------------------------
# to_source
# ---------------------------------------------------------------------------------------------------
_BIN_SRC = {"add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})", "max": "tn.maximum({}, {})",
            "min": "tn.minimum({}, {})", "mod": "tn.mod({}, {})"}
_CMP_SRC = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_CMP_FN = {"eq": "tn.equal", "ne": "tn.not_equal"}
_SHORT = {INT: "i32", F64: "f64", F32: "f32"}


def expr_source(e: Expr) -> str:
    if isinstance(e, Const):
        return f"{_SHORT[e.dtype]}({e.value!r})"
    if isinstance(e, Ref):
        return e.name
    if isinstance(e, Bin):
        return _BIN_SRC[e.op].format(expr_source(e.lhs), expr_source(e.rhs))
    if isinstance(e, Unary):
        return f"(-{expr_source(e.operand)})" if e.op == "neg" else f"tn.{e.op}({expr_source(e.operand)})"
    if isinstance(e, Cast):
        return f"tn.cast({expr_source(e.operand)}, tn.{e.dtype})"
    if isinstance(e, Cmp):
        if e.op in _CMP_FN:
            return f"{_CMP_FN[e.op]}({expr_source(e.lhs)}, {expr_source(e.rhs)})"
        return f"({expr_source(e.lhs)} {_CMP_SRC[e.op]} {expr_source(e.rhs)})"
    if isinstance(e, Logic):
        return f"tn.logical_{e.op}({expr_source(e.lhs)}, {expr_source(e.rhs)})"
    if isinstance(e, Not):
        return f"tn.logical_not({expr_source(e.operand)})"
    raise TypeError(f"not an expression: {e!r}")


def _tuple_src(xs: list[str]) -> str:
    return "(" + ", ".join(xs) + ("," if len(xs) == 1 else "") + ")"


def _block_lines(b: Block, ind: str, ret: str = "return") -> list[str]:
    lines: list[str] = []
    for s in b.stmts:
        lines += _stmt_lines(s, ind)
    lines.append(f"{ind}{ret} {_tuple_src([expr_source(r) for r in b.results])}")
    return lines


def _stmt_lines(s: Stmt, ind: str) -> list[str]:
    if isinstance(s, Let):
        return [f"{ind}{s.name} = {expr_source(s.expr)}"]
    inner = ind + "    "
    if isinstance(s, If):
        lines = [f"{ind}def {s.id}_true():", *_block_lines(s.true, inner),
                 f"{ind}def {s.id}_false():", *_block_lines(s.false, inner)]
        lines.append(f"{ind}{_tuple_src(list(s.targets))} = tn.cond({expr_source(s.pred)}, {s.id}_true, "
                     f"{s.id}_false)")
        return lines
    if isinstance(s, Case):
        lines = []
        for k, br in enumerate(s.branches):
            lines += [f"{ind}def {s.id}_branch{k}():", *_block_lines(br, inner)]
        lines += [f"{ind}def {s.id}_default():", *_block_lines(s.default, inner)]
        fns = ", ".join(f"{s.id}_branch{k}" for k in range(len(s.branches)))
        lines.append(f"{ind}{_tuple_src(list(s.targets))} = tn.case({expr_source(s.index)}, [{fns}], "
                     f"default={s.id}_default)")
        return lines
    if isinstance(s, Loop):
        params = ", ".join([s.counter, *(n for n, _ in s.vars)])
        lines = [f"{ind}def {s.id}_cond({params}):"]
        for x in s.pred.stmts:
            lines += _stmt_lines(x, inner)
        lines.append(f"{inner}return tn.logical_and({s.counter} < {s.bound}, {expr_source(s.pred.results[0])})")
        lines.append(f"{ind}def {s.id}_body({params}):")
        for x in s.body.stmts:
            lines += _stmt_lines(x, inner)
        lines.append(f"{inner}return {_tuple_src([f'{s.counter} + 1', *(expr_source(r) for r in s.body.results)])}")
        init = ", ".join(["i32(0)", *(expr_source(e) for _, e in s.vars)])
        mi = "" if s.maximum_iterations is None else f", maximum_iterations={s.maximum_iterations}"
        lines.append(f"{ind}{_tuple_src(list(s.targets))} = tn.while_loop({s.id}_cond, {s.id}_body, [{init}], "
                     f"parallel_iterations={s.parallel_iterations}{mi})")
        return lines
    if isinstance(s, Scan):
        lines = [f"{ind}def {s.id}_fn({s.carry}, {s.elem}):"]
        for x in s.body.stmts:
            lines += _stmt_lines(x, inner)
        lines.append(f"{inner}return {expr_source(s.body.results[0])}")
        rev = ", reverse=True" if s.reverse else ""
        lines.append(f"{ind}{s.target} = tn.reduce_sum(tn.scan({s.id}_fn, {s.elems}, initializer="
                     f"{expr_source(s.init)}, parallel_iterations={s.parallel_iterations}{rev}))")
        return lines
    raise TypeError(f"not a statement: {s!r}")


def to_source(p: Program) -> str:
    """The program as readable Python over ``tn.`` calls (``i32(3)`` is ``tn.constant(3, tn.int32)``)."""
    args = []
    for d in p.inputs:
        shape = "[]" if d.length is None else f"[{d.length}]"
        args.append(f"{d.name}: {d.dtype}{shape}")
    lines = [f"def program({', '.join(args)}):", *_block_lines(p.body, "    ")]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# interpret: the direct oracle
# ---------------------------------------------------------------------------------------------------
def _np(dtype: str) -> Any:
    return np.dtype(dtype).type


def _scalar(v: Any, dtype: str) -> np.ndarray:
    return np.asarray(v, dtype=np.dtype(dtype))


_BIN_NP = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
_CMP_NP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
           "ne": np.not_equal}
_UNARY_NP = {"neg": np.negative, "tanh": np.tanh, "exp": np.exp, "square": np.square,
             "sigmoid": lambda x: 1 / (1 + np.exp(-x))}


@dataclass
class Outcome:
    """What ``interpret`` returns: the program's results, the trip count of every loop instance (in
    execution order, keyed by the loop's id; scans too), and the branch every conditional instance
    took (1/0 for If; the branch index for Case, ``len(branches)`` meaning the default)."""

    values: list[np.ndarray]
    trips: dict[str, list[int]] = field(default_factory=dict)
    branches: dict[str, list[int]] = field(default_factory=dict)


class _Interp:
    def __init__(self) -> None:
        self.out = Outcome([])

    def expr(self, e: Expr, env: dict[str, np.ndarray]) -> np.ndarray:
        if isinstance(e, Const):
            return _scalar(e.value, e.dtype)
        if isinstance(e, Ref):
            return env[e.name]
        if isinstance(e, Bin):
            a, b = self.expr(e.lhs, env), self.expr(e.rhs, env)
            if e.op == "mod":
                if b == 0:
                    raise ZeroDivisionError("mod by zero: the generator must not produce this")
                return np.asarray(np.mod(a, b), a.dtype)
            return np.asarray(_BIN_NP[e.op](a, b), a.dtype)
        if isinstance(e, Unary):
            a = self.expr(e.operand, env)
            return np.asarray(_UNARY_NP[e.op](a), a.dtype)
        if isinstance(e, Cast):
            return np.asarray(self.expr(e.operand, env)).astype(e.dtype)
        if isinstance(e, Cmp):
            return np.asarray(_CMP_NP[e.op](self.expr(e.lhs, env), self.expr(e.rhs, env)))
        if isinstance(e, Logic):
            a, b = bool(self.expr(e.lhs, env)), bool(self.expr(e.rhs, env))
            return np.asarray(a and b if e.op == "and" else a or b)
        if isinstance(e, Not):
            return np.asarray(not bool(self.expr(e.operand, env)))
        raise TypeError(f"not an expression: {e!r}")

    def block(self, b: Block, env: dict[str, np.ndarray]) -> list[np.ndarray]:
        env = dict(env)
        for s in b.stmts:
            self.stmt(s, env)
        return [self.expr(r, env) for r in b.results]

    def stmt(self, s: Stmt, env: dict[str, np.ndarray]) -> None:
        if isinstance(s, Let):
            env[s.name] = self.expr(s.expr, env)
            return
        if isinstance(s, If):
            taken = bool(self.expr(s.pred, env))
            self.out.branches.setdefault(s.id, []).append(int(taken))
            vals = self.block(s.true if taken else s.false, env)
        elif isinstance(s, Case):
            k = int(self.expr(s.index, env))
            inside = 0 <= k < len(s.branches)
            self.out.branches.setdefault(s.id, []).append(k if inside else len(s.branches))
            vals = self.block(s.branches[k] if inside else s.default, env)
        elif isinstance(s, Loop):
            vals = self.loop(s, env)
        elif isinstance(s, Scan):
            vals = [self.scan(s, env)]
        else:
            raise TypeError(f"not a statement: {s!r}")
        targets = s.targets if not isinstance(s, Scan) else (s.target,)
        for t, v in zip(targets, vals, strict=True):
            env[t] = v

    def loop(self, s: Loop, env: dict[str, np.ndarray]) -> list[np.ndarray]:
        names = [s.counter, *(n for n, _ in s.vars)]
        vals = [_scalar(0, INT), *(self.expr(e, env) for _, e in s.vars)]
        trips = 0
        while True:
            inner = {**env, **dict(zip(names, vals, strict=True))}
            # The generated predicate runs every time the loop tests (even when the bound or
            # maximum_iterations already stops it): the builder emits `counter < bound and pred`
            # as one LogicalAnd of two computed values, not a short-circuit.
            user = bool(self.block(s.pred, inner)[0])
            go = bool(vals[0] < s.bound) and user
            if s.maximum_iterations is not None and trips >= s.maximum_iterations:
                go = False
            if not go:
                break
            new = self.block(s.body, inner)
            vals = [np.asarray(vals[0] + np.int32(1), np.int32), *new]
            trips += 1
        self.out.trips.setdefault(s.id, []).append(trips)
        return vals

    def scan(self, s: Scan, env: dict[str, np.ndarray]) -> np.ndarray:
        carry = self.expr(s.init, env)
        elems = env[s.elems]
        ys: list[Any] = [None] * len(elems)
        for i in _scan_order(s, len(elems)):
            carry = self.block(s.body, {**env, s.carry: carry, s.elem: np.asarray(elems[i])})[0]
            ys[i] = carry
        self.out.trips.setdefault(s.id, []).append(len(ys))
        total = np.zeros((), carry.dtype)
        for y in ys:  # in slot order, as reduce_sum adds them
            total = np.asarray(total + y, carry.dtype)
        return total


def interpret(p: Program, inputs: dict[str, Any]) -> Outcome:
    """Run the AST directly in Python with numpy scalar semantics (int32 wraps around)."""
    it = _Interp()
    env = {d.name: np.asarray(inputs[d.name], dtype=np.dtype(d.dtype)) for d in p.inputs}
    with np.errstate(all="ignore"):
        it.out.values = it.block(p.body, env)
    return it.out


class _JaxReplay(_Interp):
    """The same interpretation with float values as jax.numpy arrays, so ``jax.grad`` can differentiate
    it. Control decisions are made by Python on concrete ints (float programs steer control by ints
    only), so what jax sees is the straight-line replay of the path the program took."""

    def expr(self, e: Expr, env: dict[str, Any]) -> Any:
        import jax.numpy as jnp

        if isinstance(e, Bin) and e.op in _BIN_NP:
            a, b = self.expr(e.lhs, env), self.expr(e.rhs, env)
            if _is_float(a):
                return {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "max": jnp.maximum,
                        "min": jnp.minimum}[e.op](a, b)
        if isinstance(e, Unary):
            a = self.expr(e.operand, env)
            if _is_float(a):
                return {"neg": jnp.negative, "tanh": jnp.tanh, "exp": jnp.exp, "square": jnp.square,
                        "sigmoid": lambda x: 1 / (1 + jnp.exp(-x))}[e.op](a)
        if isinstance(e, Cmp) and _is_float(self.expr(e.lhs, env)):
            raise TypeError("a float comparison steers control: not a float program")
        return super().expr(e, env)

    def scan(self, s: Scan, env: dict[str, Any]) -> Any:
        carry = self.expr(s.init, env)
        if not _is_float(carry):
            return super().scan(s, env)
        elems = env[s.elems]
        ys: list[Any] = [None] * len(elems)
        for i in _scan_order(s, len(elems)):
            carry = self.block(s.body, {**env, s.carry: carry, s.elem: elems[i]})[0]
            ys[i] = carry
        self.out.trips.setdefault(s.id, []).append(len(elems))
        total = 0.0
        for y in ys:  # in slot order, as reduce_sum adds them
            total = total + y
        return total


def _scan_order(s: Scan, n: int) -> range:
    """The element indices a scan visits, in the order it visits them."""
    return range(n - 1, -1, -1) if s.reverse else range(n)


def _is_float(v: Any) -> bool:
    return np.issubdtype(np.asarray(v).dtype, np.floating) if not hasattr(v, "aval") else True


def replay_gradients(p: Program, inputs: dict[str, Any], which: list[int], wrt: list[str]) -> list[np.ndarray]:
    """``jax.grad`` of ``sum(results[which])`` w.r.t. the inputs ``wrt``, through the straight-line replay
    of the control decisions the program takes on ``inputs`` ([T6], oracle (a))."""
    import jax
    import jax.numpy as jnp

    def loss(*xs: Any) -> Any:
        env: dict[str, Any] = {d.name: np.asarray(inputs[d.name], dtype=np.dtype(d.dtype)) for d in p.inputs}
        env.update({n: x for n, x in zip(wrt, xs, strict=True)})
        vals = _JaxReplay().block(p.body, env)
        return sum(jnp.asarray(vals[i], jnp.float64) for i in which)

    with jax.enable_x64(True):
        args = [jnp.asarray(inputs[n], jnp.float64) for n in wrt]
        return [np.asarray(g) for g in jax.grad(loss, argnums=tuple(range(len(wrt))))(*args)]


# ---------------------------------------------------------------------------------------------------
# build: emission with the Turnout builders
# ---------------------------------------------------------------------------------------------------
@dataclass
class Built:
    """The graph of a program. Unpacks as ``graph, placeholders, fetches``. ``loops`` / ``conds`` map
    the AST ids to the builder contexts (a Case maps to the chain of CondInfos it lowers to)."""

    graph: tn.Graph
    placeholders: dict[str, tn.Tensor]
    fetches: list[tn.Tensor]
    loops: dict[str, Any] = field(default_factory=dict)
    conds: dict[str, list[Any]] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.graph, self.placeholders, self.fetches))

    def feed_dict(self, inputs: dict[str, Any]) -> dict[tn.Tensor, Any]:
        return {t: inputs[n] for n, t in self.placeholders.items()}


class _Emitter:
    def __init__(self, g: tn.Graph, built: Built, swap_memory: bool = False) -> None:
        self.g = g
        self.built = built
        self.swap_memory = swap_memory

    def const(self, v: Any, dtype: str) -> tn.Tensor:
        return tn.constant(v, dtype=dtype)

    def expr(self, e: Expr, env: dict[str, tn.Tensor]) -> tn.Tensor:
        if isinstance(e, Const):
            return self.const(e.value, e.dtype)
        if isinstance(e, Ref):
            return env[e.name]
        if isinstance(e, Bin):
            a, b = self.expr(e.lhs, env), self.expr(e.rhs, env)
            fn = {"add": tn.add, "sub": tn.subtract, "mul": tn.multiply, "max": tn.maximum,
                  "min": tn.minimum, "mod": tn.mod}[e.op]
            return fn(a, b)
        if isinstance(e, Unary):
            a = self.expr(e.operand, env)
            return {"neg": tn.negative, "tanh": tn.tanh, "sigmoid": tn.sigmoid, "exp": tn.exp,
                    "square": tn.square}[e.op](a)
        if isinstance(e, Cast):
            return tn.cast(self.expr(e.operand, env), e.dtype)
        if isinstance(e, Cmp):
            fn = {"lt": tn.less, "le": tn.less_equal, "gt": tn.greater, "ge": tn.greater_equal,
                  "eq": tn.equal, "ne": tn.not_equal}[e.op]
            return fn(self.expr(e.lhs, env), self.expr(e.rhs, env))
        if isinstance(e, Logic):
            fn = tn.logical_and if e.op == "and" else tn.logical_or
            return fn(self.expr(e.lhs, env), self.expr(e.rhs, env))
        if isinstance(e, Not):
            return tn.logical_not(self.expr(e.operand, env))
        raise TypeError(f"not an expression: {e!r}")

    def block(self, b: Block, env: dict[str, tn.Tensor]) -> list[tn.Tensor]:
        env = dict(env)
        for s in b.stmts:
            self.stmt(s, env)
        return [self.expr(r, env) for r in b.results]

    def _branch(self, b: Block, env: dict[str, tn.Tensor]) -> Any:
        return lambda: self.block(b, env)

    def stmt(self, s: Stmt, env: dict[str, tn.Tensor]) -> None:
        if isinstance(s, Let):
            env[s.name] = self.expr(s.expr, env)
            return
        start = len(self.g.contexts)
        if isinstance(s, If):
            outs = tn.cond(self.expr(s.pred, env), self._branch(s.true, env), self._branch(s.false, env), name=s.id)
            self.built.conds[s.id] = _new_cond_infos(self.g, start)
        elif isinstance(s, Case):
            outs = tn.case(self.expr(s.index, env), [self._branch(b, env) for b in s.branches],
                           default=self._branch(s.default, env), name=s.id)
            self.built.conds[s.id] = _new_cond_infos(self.g, start)
        elif isinstance(s, Loop):
            outs = self.loop(s, env)
        elif isinstance(s, Scan):
            outs = [self.scan(s, env)]
        else:
            raise TypeError(f"not a statement: {s!r}")
        targets = s.targets if not isinstance(s, Scan) else (s.target,)
        for t, v in zip(targets, outs, strict=True):
            env[t] = v

    def loop(self, s: Loop, env: dict[str, tn.Tensor]) -> list[tn.Tensor]:
        names = [s.counter, *(n for n, _ in s.vars)]
        init = [self.const(0, INT), *(self.expr(e, env) for _, e in s.vars)]

        def cond(*vals: tn.Tensor) -> tn.Tensor:
            inner = {**env, **dict(zip(names, vals, strict=True))}
            user = self.block(s.pred, inner)[0]
            return tn.logical_and(tn.less(vals[0], self.const(s.bound, INT)), user)

        def body(*vals: tn.Tensor) -> list[tn.Tensor]:
            inner = {**env, **dict(zip(names, vals, strict=True))}
            new = self.block(s.body, inner)
            return [tn.add(vals[0], self.const(1, INT)), *new]

        start = len(self.g.contexts)
        mi = None if s.maximum_iterations is None else self.const(s.maximum_iterations, INT)
        outs = tn.while_loop(cond, body, init, parallel_iterations=s.parallel_iterations,
                             maximum_iterations=mi, name=s.id, swap_memory=self.swap_memory)
        self.built.loops[s.id] = self.g.contexts[start]
        return list(outs)

    def scan(self, s: Scan, env: dict[str, tn.Tensor]) -> tn.Tensor:
        def fn(carry: tn.Tensor, x: tn.Tensor) -> tn.Tensor:
            return self.block(s.body, {**env, s.carry: carry, s.elem: x})[0]

        start = len(self.g.contexts)
        ys = tn.scan(fn, env[s.elems], initializer=self.expr(s.init, env),
                     parallel_iterations=s.parallel_iterations, name=s.id, reverse=s.reverse,
                     swap_memory=self.swap_memory)
        self.built.loops[s.id] = self.g.contexts[start]
        return tn.reduce_sum(ys)


def _new_cond_infos(g: tn.Graph, start: int) -> list[Any]:
    """The CondInfos of the conds created since context index ``start`` (outermost first; nested
    conds inside branches are excluded by taking only those whose true-branch context is a direct
    child of the context active at ``start``)."""
    from turnout.control_flow.contexts import CondContext

    outer = g.current_context
    infos: list[Any] = []
    for c in g.contexts[start:]:
        if isinstance(c, CondContext) and c.branch == 1 and _case_chain_parent(c, outer):
            infos.append(c.info)
    return infos


def _case_chain_parent(c: Any, outer: Any) -> bool:
    """A case lowers to cond(k==0, b0, lambda: cond(k==1, ...)): the chain's conds sit in false
    branches of each other. Accept c if its ancestors up to ``outer`` are only false branches of the chain."""
    p = c.outer
    while p is not outer:
        if p is None or getattr(p, "branch", None) != 0:
            return False
        p = p.outer
    return True


#: ``build``'s default: a scalar input is a placeholder of shape []
SCALAR: Any = ()


def build(p: Program, float_shape: Any = SCALAR, swap_memory: bool = False) -> Built:
    """Emit ``p`` into a fresh graph with the Turnout builders. ``float_shape`` is the declared shape
    of its scalar float inputs: ``[None]`` makes them batches of unknown size, ``None`` of unknown
    rank (fed vectors, the values broadcast through the program). ``swap_memory``: every loop and
    scan is built with it (their gradient stacks then swap)."""
    g = tn.Graph()
    built = Built(g, {}, [])
    with g.as_default():
        for d in p.inputs:
            shape: Any = [] if d.length is None else [d.length]
            if d.length is None and d.dtype.startswith("float") and float_shape is not SCALAR:
                shape = float_shape
            built.placeholders[d.name] = tn.placeholder(d.dtype, shape=shape, name=d.name)
        em = _Emitter(g, built, swap_memory)
        built.fetches = em.block(p.body, dict(built.placeholders))
    return built


# ---------------------------------------------------------------------------------------------------
# Feature summary (for the campaign)
# ---------------------------------------------------------------------------------------------------
def summarize(p: Program, outcome: Optional[Outcome] = None) -> dict[str, Any]:
    """Structural features of ``p`` (and, given an outcome, dynamic ones such as zero-trip loops)."""
    stmts = list(walk(p.body))
    ctl = [(s, d) for s, d in stmts if not isinstance(s, Let)]
    loops = [s for s, _ in stmts if isinstance(s, Loop)]
    feats: dict[str, Any] = {
        "max_depth": max((d + 1 for _, d in ctl), default=0),
        "loops": len(loops),
        "conds": sum(isinstance(s, If) for s, _ in stmts),
        "cases": sum(isinstance(s, Case) for s, _ in stmts),
        "scans": sum(isinstance(s, Scan) for s, _ in stmts),
        "parallel_iterations": sorted({s.parallel_iterations for s, _ in stmts if isinstance(s, (Loop, Scan))}),
        "maximum_iterations": sum(s.maximum_iterations is not None for s in loops),
        "conds_in_preds": sum(any(not isinstance(x, Let) for x in s.pred.stmts) for s in loops),
        "floats": any(d.dtype in FLOATS for d in p.inputs),
    }
    if outcome is not None:
        feats["zero_trip_loops"] = sum(1 for v in outcome.trips.values() for k in v if k == 0)
        feats["loop_instances"] = sum(len(v) for v in outcome.trips.values())
        feats["max_trips"] = max((k for v in outcome.trips.values() for k in v), default=0)
    return feats


def assert_values_equal(got: list[Any], want: list[Any], what: str = "") -> None:
    """Exact equality for ints and bools; floats equal up to rounding of transcendental kernels (NaN == NaN),
    relative, and absolute to a few units in the last place of a value near 1: a difference of two equal
    terms is exactly 0 where both are computed alike and a rounding's width where they are not (XLA
    may fuse the two evaluations of ``tn.exp(tn.tanh(f0)) - tn.exp(tn.tanh(f0))`` differently:
    ``test_regressions.py``)."""
    assert len(got) == len(want), f"{what}: {len(got)} results, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, f"{what}: result {k} has dtype {g.dtype}, expected {w.dtype}"
        assert g.shape == w.shape, f"{what}: result {k} has shape {g.shape}, expected {w.shape}"
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-6 if g.dtype == np.float32 else 1e-12,
                                       atol=4 * float(np.finfo(g.dtype).eps),
                                       equal_nan=True, err_msg=f"{what}: result {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{what}: result {k}")


def run_outcome(run: Callable[[], Any]) -> tuple[Optional[list[Any]], Optional[type]]:
    """What a run gives: its values, or the type of the Turnout error it raises (the differential
    checks compare executors on both)."""
    try:
        return list(run()), None
    except tn.TurnoutError as e:
        return None, type(e)


def assert_same_outcome(want_run: Callable[[], Any], got_run: Callable[[], Any], what: str) -> bool:
    """The executor under test (``got_run``) gives the reference's values or raises its error type;
    True when the reference gave values."""
    want, want_err = run_outcome(want_run)
    got, got_err = run_outcome(got_run)
    assert got_err == want_err, f"{what} raised {got_err}, the reference {want_err}"
    if want is None:
        return False
    assert got is not None
    assert_values_equal(got, want, what)
    return True
