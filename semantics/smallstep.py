"""The small-step transition system of the dataflow semantics, made executable (specs/semantics.rst).

Why this module exists: the reference interpreter is an efficient, imperative statement of what a
Turnout graph means. This module is a second, independent statement written straight from the named
``E-`` rules: a configuration ``C = <Q, Fired, Inst, sigma, Sigma>`` is an immutable, hashable value,
``enabled(C)`` lists *every* firing the rules allow in ``C``, and ``fire(C, f)`` takes one of them and
returns a new configuration. A scheduler is nothing but a choice among enabled firings, so
``run(..., scheduler=...)`` and the exhaustive explorer in ``semantics/explore.py`` share one rule
set. Agreement between this module and ``turnout.reference`` is evidence only because neither uses
the other's control-flow machinery: this module imports nothing from ``turnout.reference`` or
``turnout.fast``; it shares with them only the graph, ``static_frames``, the validator of well-formed graphs
(``SmallStepBackend``) and the compute kernels.

Clarity beats speed here. Configurations are rebuilt with small dict copies on every step; that is
fine for the small graphs this module exists to check (a 50-iteration loop takes a fraction of a
second).

Conventions (the spec's notation in Python):

- a tag is a tuple of ``(frame_name, iteration)`` pairs from the root, ``()`` being the root tag;
- a frame instance ``I = (t, F)`` is keyed by its parent tag and frame name;
- input slots of a node are numbered data slots first (``0 .. len(inputs)-1``), then one slot per
  control input, so a control edge is literally "a data input without a value";
- the key of a node firing is ``(node, tag of its inputs)``; a parked ``NextIteration`` delivery is
  keyed by its *target* tag; ``[E-Iter-Retire]`` / ``[E-Frame-Done]`` are keyed by the instance and
  report the frame name in place of a node name.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from turnout.dtypes import as_dtype
from turnout.errors import (
    MAX_ITERATIONS_HINT,
    ArgumentError,
    DeadFetchError,
    DeadlockError,
    ExecutionError,
    FeedError,
    KernelError,
    MergeConflictError,
    NonTerminationError,
    dead_fetch_message,
    describe_node,
    merge_conflict_message,
    runaway_message,
)
from turnout.frames import Frame
from turnout.graph import Graph, Node, Tensor, ancestors
from turnout.kernels import TensorArrayValue, run_kernel, truth
from turnout.memory_plan import SavedBytes, platform, run_plan
from turnout.reference.trace import fmt_tag as message_tag
from turnout.session import RunOptions, RunResult
from turnout.validate import validate

Tag = tuple[tuple[str, int], ...]
InstKey = tuple[Tag, str]  # (parent tag, frame name)
EdgeKey = tuple[int, Tag]  # (consumer node id, tag)

__all__ = [
    "Config", "Firing", "Instance", "SmallStepResult", "StackHandleValue", "Token", "VarHandleValue",
    "enabled", "fire", "fmt_tag", "freeze", "initial", "is_final", "is_quiescent", "outputs", "run",
    "stranded", "deadlock_report", "SmallStepBackend", "RULES",
]


# ---- values and tokens -------------------------------------------------------------------------------
@dataclass(frozen=True)
class VarHandleValue:
    """The value a ``VarHandle`` outputs: it names a variable of the store ``sigma``."""

    name: str


@dataclass(frozen=True)
class StackHandleValue:
    """The value a ``StackNew`` outputs. Derived from the creating key ``(node, tag)`` ([E-Stack-Push]),
    so handles are the same under every scheduler."""

    node: str
    tag: Tag


def freeze(v: Any) -> Hashable:
    """A hashable key equal for equal values: configurations are compared and hashed by value, which
    is what lets the explorer recognise a state it has already visited."""
    if v is None or isinstance(v, (VarHandleValue, StackHandleValue, str)):
        return v
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)
        if a.dtype == object:
            return ("obj", a.shape, tuple(freeze(x) for x in a.ravel()))
        return ("nd", a.dtype.str, a.shape, a.tobytes())
    if isinstance(v, TensorArrayValue):
        return ("ta", v.dtype, freeze(v.element_shape), tuple(freeze(x) for x in v.items))
    if isinstance(v, (bool, int, float, complex)):
        return ("py", type(v).__name__, v)
    if isinstance(v, (tuple, list)):
        return ("seq", tuple(freeze(x) for x in v))
    return ("repr", type(v).__name__, repr(v))


class Token:
    """``(value, is_dead, tag)``. Equality and hashing go by value (see ``freeze``); a dead token's
    value is irrelevant and stored as None. Control tokens are tokens whose value is None."""

    __slots__ = ("value", "is_dead", "tag", "_key")

    def __init__(self, value: Any, is_dead: bool, tag: Tag) -> None:
        self.value = None if is_dead else value
        self.is_dead = is_dead
        self.tag = tag
        self._key = (freeze(self.value), is_dead, tag)

    @staticmethod
    def live(value: Any, tag: Tag) -> Token:
        """A live token carrying ``value`` at ``tag``."""
        return Token(value, False, tag)

    @staticmethod
    def dead(tag: Tag) -> Token:
        """A dead token at ``tag`` (its value is None)."""
        return Token(None, True, tag)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Token) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"dead@{fmt_tag(self.tag)}" if self.is_dead else f"live({self.value!r})@{fmt_tag(self.tag)}"


def fmt_tag(tag: Tag) -> str:
    """``()`` for the root tag, else ``frame[k] > inner[j]``."""
    return "()" if not tag else " > ".join(f"{f}[{k}]" for f, k in tag)


# ---- the static program: the pruned graph, in the shape the rules need ---------------------------------
@dataclass
class Program:
    """Static facts the rules consult; built once by ``initial`` and shared by every configuration."""

    graph: Graph
    nodes: dict[int, Node]
    n_data: dict[int, int]
    n_slots: dict[int, int]
    out_edges: dict[int, tuple[tuple[tuple[int, int], ...], ...]]  # per output: (consumer id, slot)
    ctl_edges: dict[int, tuple[tuple[int, int], ...]]  # (consumer id, control slot)
    back_slots: dict[int, frozenset[int]]  # Merge id -> slots fed by a NextIteration (loop Merges only)
    enter_count: dict[Frame, int]  # |Enters(frame)| among the nodes that take part
    node_frame: dict[int, Frame]
    sources: tuple[int, ...]  # nodes with no inputs at all: enabled at the root tag
    fetches: tuple[tuple[int, int], ...]
    fetch_names: tuple[str, ...]
    #: RunOptions.max_iterations: no frame instance may run more bodies (None: no limit)
    max_iterations: int | None = None
    frame_origin: dict[Frame, str] = field(default_factory=dict)  # frame -> its first Enter, described

    def slot_source(self, nid: int, slot: int) -> str:
        """The tensor that feeds input ``slot`` of node ``nid``, by name (``^node`` for a control slot), for the
        report of a stalled node."""
        node = self.nodes[nid]
        nd = self.n_data[nid]
        if slot < nd:
            return node.raw_inputs[slot].name  # type: ignore[union-attr]
        return "^" + node.control_inputs[slot - nd].name


# ---- configurations ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Instance:
    """The record ``Inst(I)`` of one frame instance (specs/semantics.rst, "Configurations")."""

    started: frozenset[int]  # S(I)
    oldest: int  # o(I)
    window: int  # N(I), parallel_iterations
    invariants: frozenset[tuple[int, Token]]  # Inv(I): (constant Enter id, token)
    parked: frozenset[tuple[int, int, Token]]  # Park(I): (NextIteration id, target iteration, token)
    dead_exits: frozenset[int]  # Dx(I)
    live_exits: frozenset[int]  # Lx(I)
    pend: int  # Enters of the frame that have not delivered yet


@dataclass(frozen=True, eq=False)
class Config:
    """A configuration ``<Q, Fired, Inst, sigma, Sigma>`` plus the fetch edges' tokens.

    Immutable by convention: every field is a fresh dict or frozenset that no one mutates after
    construction (``fire`` copies before it writes). Equality and hashing go by value, ignoring the
    shared ``program``.
    """

    program: Program
    pending: Mapping[EdgeKey, frozenset[tuple[int, Token]]]  # Q, grouped by (consumer, tag): {(slot, token)}
    fired: frozenset[EdgeKey]
    instances: Mapping[InstKey, Instance]
    variables: Mapping[str, Any]
    stacks: Mapping[tuple[StackHandleValue, tuple[int, ...]], Any]
    produced: Mapping[tuple[int, int], Token]  # fetch edges: (node id, output) -> token
    #: Rv: the rendezvous tokens addressed to this graph's Recvs and not yet received, ((edge, tag), token)
    mailbox: frozenset[tuple[tuple[str, Tag], Token]] = frozenset()
    _key_cache: list[Any] = field(default_factory=list, repr=False)

    def key(self) -> Hashable:
        """The configuration as a hashable value (computed once): what equality and hashing compare, so that the
        explorer recognizes a configuration it has seen."""
        if not self._key_cache:
            self._key_cache.append((
                frozenset(self.pending.items()),
                self.fired,
                frozenset(self.instances.items()),
                frozenset((k, freeze(v)) for k, v in self.variables.items()),
                frozenset((k, freeze(v)) for k, v in self.stacks.items()),
                frozenset(self.produced.items()),
                self.mailbox,
            ))
        return self._key_cache[0]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())


@dataclass(frozen=True)
class Firing:
    """One enabled step: the rule, the node (or frame) it applies to, and its key tag.

    ``inputs`` are the tokens the firing consumes, one per slot (data slots, then control slots); for
    ``[E-Merge-Live]`` only the forwarded slot ``slot`` is given. ``dead`` says whether the firing is
    dead (its control token is dead). ``parked`` marks an ``[E-Next-Live]`` delivery out of ``Park``.
    """

    rule: str
    node: str
    tag: Tag
    dead: bool = False
    node_id: int = -1
    inputs: tuple[Token, ...] = ()
    slot: int = -1
    instance: InstKey | None = None
    parked: bool = False

    @property
    def is_node_firing(self) -> bool:
        """True for the steps that consume a node's inputs at its key (take(n, t))."""
        return self.node_id >= 0 and not self.parked


# ---- initial configuration -----------------------------------------------------------------------------
def _as_tensor(graph: Graph, t: Any) -> Tensor:
    if isinstance(t, str):
        return graph.tensor(t)
    if hasattr(t, "_as_tensor") and not isinstance(t, Tensor):
        t = t._as_tensor()
    if not isinstance(t, Tensor) or t.graph is not graph:
        raise ArgumentError(f"{t!r} is not a tensor of this graph")
    return t


def _prune(fetches: Sequence[Tensor], fed: Mapping[tuple[int, int], Any]) -> dict[int, Node]:
    """The nodes the fetches depend on, stopping at fed tensors (the pruning a session does; the
    semantics runs only these). A graph utility, not control-flow machinery."""
    return ancestors(fetches, fed)


def _feed_value(t: Tensor, v: Any) -> Any:
    return np.asarray(v) if t.dtype.numpy is None else np.asarray(v).astype(t.dtype.numpy)


def initial(graph: Graph, fetches: Sequence[Any], feeds: Mapping[Any, Any] | None = None,
            variables: Mapping[str, Any] | None = None, whole_graph: bool = False,
            max_iterations: int | None = None) -> Config:
    """The initial configuration for a run computing ``fetches``.

    Only the nodes the fetches depend on take part. ``feeds`` maps root-frame tensors (Tensor objects
    or ``"name:0"``), usually Placeholders, to values. A fed tensor is cut out of the graph, as a
    session does: its producer is not run for it, and the initial ``Q`` holds the fed value as a live
    token at the root tag on every edge it feeds (the spec's ``Q`` is otherwise empty at the start).
    ``variables`` overrides the ``initial_value`` of the graph's Variables. ``max_iterations`` bounds
    every frame instance: a live true ``LoopCond`` in iteration ``max_iterations`` (body
    ``max_iterations + 1`` would run) raises ``NonTerminationError``, as does starting iteration
    ``max_iterations + 1`` in a frame without one (``RunOptions.max_iterations``; None, the default
    here, sets no bound).

    Raises ``ValidationError`` for a graph that breaks a well-formedness rule (``turnout.validate``:
    an unbound back edge, inconsistent frames, a fetch inside a loop, recorded types its ops do not
    make...); ``FeedError`` for a needed Placeholder that is not fed or a fed tensor inside a loop.
    """
    fetch_ts = [_as_tensor(graph, f) for f in fetches]
    fed_ts = {_as_tensor(graph, k): v for k, v in (feeds or {}).items()}
    # every well-formedness rule, as every backend checks them before a run: the rules below are
    # defined on well-formed graphs ([T4-Quiescence])
    analysis = validate(graph, fetch_ts, list(fed_ts))
    fed: dict[tuple[int, int], Any] = {}
    for t, v in fed_ts.items():
        if analysis.node_frame[t.node.id]:
            raise FeedError(f"cannot feed {t.name}: it is inside a loop frame; feed root-frame tensors only")
        fed[(t.node.id, t.index)] = _feed_value(t, v)
    if whole_graph:  # a partition: already pruned, and its Sends are roots that fetch nothing
        keep = {n.id: n for n in graph.nodes
                if not n.outputs or any((n.id, i) not in fed for i in range(len(n.outputs)))}
    else:
        keep = _prune(fetch_ts, fed)
    # A fed Placeholder kept only for a control dependency does not run: its fed value stands for it,
    # and its control consumers start with a live control token.
    fed_nodes = {i for i, n in keep.items() if n.op == "Placeholder" and (i, 0) in fed}
    keep = {i: n for i, n in keep.items() if i not in fed_nodes}
    for n in keep.values():
        if n.op == "Placeholder":
            raise FeedError(f"{describe_node(n)} must be fed a value: a fetched value depends on it")

    n_data = {i: len(n.raw_inputs) for i, n in keep.items()}
    n_slots = {i: n_data[i] + len(n.control_inputs) for i, n in keep.items()}
    outs: dict[int, list[list[tuple[int, int]]]] = {i: [[] for _ in n.outputs] for i, n in keep.items()}
    ctl: dict[int, list[tuple[int, int]]] = {i: [] for i in keep}
    back: dict[int, frozenset[int]] = {}
    pending: dict[EdgeKey, frozenset[tuple[int, Token]]] = {}
    for i, n in keep.items():
        for slot, src in enumerate(n.raw_inputs):
            assert isinstance(src, Tensor)  # unbound back edges were rejected above
            key = (src.node.id, src.index)
            if key in fed:
                pending[(i, ())] = pending.get((i, ()), frozenset()) | {(slot, Token.live(fed[key], ()))}
            else:
                outs[src.node.id][src.index].append((i, slot))
        for j, c in enumerate(n.control_inputs):
            if c.id in fed_nodes:
                pending[(i, ())] = pending.get((i, ()), frozenset()) | {(n_data[i] + j, Token.live(None, ()))}
            else:
                ctl[c.id].append((i, n_data[i] + j))
        if n.op == "Merge":
            bs = frozenset(s for s, t in enumerate(n.raw_inputs)
                           if isinstance(t, Tensor) and t.node.op == "NextIteration")
            if bs:
                back[i] = bs
    enter_count: dict[Frame, int] = {}
    frame_origin: dict[Frame, str] = {}
    for i, n in sorted(keep.items()):
        if n.op == "Enter":
            f = analysis.node_frame[i]
            enter_count[f] = enter_count.get(f, 0) + 1
            frame_origin.setdefault(f, describe_node(n))
    produced = {(t.node.id, t.index): Token.live(fed[(t.node.id, t.index)], ())
                for t in fetch_ts if (t.node.id, t.index) in fed}

    program = Program(
        graph=graph, nodes=keep, n_data=n_data, n_slots=n_slots,
        out_edges={i: tuple(tuple(e) for e in o) for i, o in outs.items()},
        ctl_edges={i: tuple(c) for i, c in ctl.items()},
        back_slots=back, enter_count=enter_count,
        node_frame={i: analysis.node_frame[i] for i in keep},
        sources=tuple(i for i in keep if n_slots[i] == 0),
        fetches=tuple((t.node.id, t.index) for t in fetch_ts),
        fetch_names=tuple(t.name for t in fetch_ts),
        max_iterations=max_iterations, frame_origin=frame_origin,
    )
    store: dict[str, Any] = {}
    for n in graph.nodes:
        if n.op == "VarHandle":
            store[n.attrs["var_name"]] = np.asarray(n.attrs["initial_value"])
    for name, v in (variables or {}).items():
        store[name] = np.asarray(v)
    return Config(program, pending, frozenset(), {}, store, {}, produced)


# ---- updates: take, put, emit, open, start ---------------------------------------------------------------
class _Update:
    """The auxiliary operations of the spec, applied to copies of a configuration's fields."""

    def __init__(self, c: Config) -> None:
        self.p = c.program
        self.pending = dict(c.pending)
        self.fired = c.fired
        self.instances = dict(c.instances)
        self.variables = c.variables
        self.stacks = c.stacks
        self.produced = c.produced
        self.mailbox = c.mailbox
        self.outbox: list[tuple[tuple[str, Tag], Token]] = []  # tokens a Send put into the rendezvous

    def take(self, nid: int, tag: Tag) -> None:
        """take(n, t): remove every token of n at t and add (n, t) to Fired."""
        self.pending.pop((nid, tag), None)
        self.fired = self.fired | {(nid, tag)}

    def put(self, cid: int, slot: int, tok: Token) -> None:
        """put: a token bound for a Merge that already fired at its tag is discarded, unless it is a live
        data token: that one is a second live input at the tag and enables [E-Merge-Conflict]."""
        key = (cid, tok.tag)
        if self.p.nodes[cid].op == "Merge" and key in self.fired and (tok.is_dead or slot >= self.p.n_data[cid]):
            return  # a live data token stays: it enables [E-Merge-Conflict]
        self.pending[key] = self.pending.get(key, frozenset()) | {(slot, tok)}

    def emit(self, nid: int, tag: Tag, outs: Sequence[Token], ctl_live: bool) -> None:
        """emit(n, u, tau_0..tau_r ; c): every output edge, every control edge, and the fetch edges."""
        for i, (tok, edges) in enumerate(zip(outs, self.p.out_edges[nid], strict=True)):
            for cid, slot in edges:
                self.put(cid, slot, tok)
            if (nid, i) in self.p.fetches and (nid, i) not in self.produced:
                self.produced = {**self.produced, (nid, i): tok}
        ctok = Token(None, not ctl_live, tag)
        for cid, slot in self.p.ctl_edges[nid]:
            self.put(cid, slot, ctok)

    def emit_dead(self, nid: int, tag: Tag) -> None:
        self.emit(nid, tag, [Token.dead(tag)] * len(self.p.nodes[nid].outputs), False)

    def open(self, inst: InstKey, window: int) -> Instance:
        """open(I, N): create the instance with iteration 0 started, if it does not exist yet."""
        if inst not in self.instances:
            self._check_limit(inst, 0)
            t, f = inst
            path = (*(name for name, _ in t), f)
            self.instances[inst] = Instance(frozenset({0}), 0, window, frozenset(), frozenset(),
                                            frozenset(), frozenset(), self.p.enter_count.get(path, 0))
        return self.instances[inst]

    def start(self, inst: InstKey, k: int) -> None:
        """start(I, k): a new iteration receives every invariant known so far ([E-Enter-Const])."""
        rec = self.instances[inst]
        if k in rec.started:
            return
        self._check_limit(inst, k)
        self.instances[inst] = _replace(rec, started=rec.started | {k})
        t, f = inst
        for eid, tok in sorted(rec.invariants, key=lambda e: e[0]):
            u = (*t, (f, k))
            self.emit(eid, u, [Token(tok.value, tok.is_dead, u)], not tok.is_dead)

    def _frame_words(self, inst: InstKey) -> str:
        """'loop frame "while/frame0" (instance root; entered by Enter node ...)', as the reference
        interpreter names a frame instance, so a runaway loop reads the same on both interpreters."""
        t, f = inst
        origin = self.p.frame_origin.get((*(name for name, _ in t), f), "")
        by = f"; entered by {origin}" if origin else ""
        return f"loop frame {f!r} (instance {fmt_tag(t) if t else 'root'}{by})"

    def _check_limit(self, inst: InstKey, k: int) -> None:
        """RunOptions.max_iterations for a frame without a LoopCond: starting iteration k > the limit
        stops the run. Iteration ``limit`` may start, to find the predicate false; a true one stops the
        run at the LoopCond (``check_loop_cond``)."""
        limit = self.p.max_iterations
        if limit is None or k <= limit:
            return
        raise NonTerminationError(
            f"{self._frame_words(inst)} started iteration {k}, over the limit max_iterations={limit}; "
            f"{MAX_ITERATIONS_HINT}")

    def check_loop_cond(self, tag: Tag, live_true: bool) -> None:
        """RunOptions.max_iterations at [E-LoopCond]: a live true predicate in iteration ``limit`` would
        run body ``limit + 1``; the run stops with the reference interpreter's message."""
        limit = self.p.max_iterations
        if limit is None or not tag or tag[-1][1] < limit or not live_true:
            return
        inst = (tag[:-1], tag[-1][0])
        raise NonTerminationError(runaway_message(self._frame_words(inst), limit))

    def set_instance(self, inst: InstKey, **changes: Any) -> None:
        self.instances[inst] = _replace(self.instances[inst], **changes)

    def done(self) -> Config:
        return Config(self.p, self.pending, self.fired, self.instances, self.variables, self.stacks,
                      self.produced, self.mailbox)


def _replace(rec: Instance, **changes: Any) -> Instance:
    return dataclasses.replace(rec, **changes)


# ---- enabling: which firings the rules allow ------------------------------------------------------------
Arrivals = dict[int, list[Token]]
Enabler = Callable[[Config, Node, Tag, Arrivals], list[Firing]]


def _full_choices(c: Config, node: Node, arr: Arrivals) -> list[tuple[Token, ...]]:
    """Full(n, t): every input edge holds a token at t. Returns every way to pick one token per slot
    (exactly one way unless a graph breaks [W-Merge-Unique] and an edge holds two tokens)."""
    n = c.program.n_slots[node.id]
    if any(s not in arr for s in range(n)):
        return []
    return list(itertools.product(*(arr[s] for s in range(n))))


def _strict(live_rule: str, dead_rule: str) -> Enabler:
    """Rules that wait for every input and go dead if any input is dead ([E-Op] / [E-Op-Dead] and kin)."""

    def enable(c: Config, node: Node, tag: Tag, arr: Arrivals) -> list[Firing]:
        out = []
        for combo in _full_choices(c, node, arr):
            dead = any(tok.is_dead for tok in combo)
            out.append(Firing(dead_rule if dead else live_rule, node.name, tag, dead, node.id, combo))
        return out

    return enable


def _enable_ordinary(c: Config, node: Node, tag: Tag, arr: Arrivals) -> list[Firing]:
    """[E-Op] / [E-Op-Dead] and the stateful rules: an ordinary op fires once all its inputs at t are
    present; live if all are live."""
    live_rule = _LIVE_OPS.get(node.op, _LIVE_OPS_DEFAULT)[0]
    return _strict(live_rule, "E-Op-Dead")(c, node, tag, arr)


def _enable_enter(c: Config, node: Node, tag: Tag, arr: Arrivals) -> list[Firing]:
    """[E-Enter] / [E-Enter-Const]: the token moves, live or dead, into the child frame."""
    rule = "E-Enter-Const" if node.attrs.get("is_constant") else "E-Enter"
    return _strict(rule, rule)(c, node, tag, arr)


def _enable_next(c: Config, node: Node, tag: Tag, arr: Arrivals) -> list[Firing]:
    """[E-Next-Live] (fresh) / [E-Next-Park] / [E-Next-Dead]."""
    out = []
    for combo in _full_choices(c, node, arr):
        if any(tok.is_dead for tok in combo):
            out.append(Firing("E-Next-Dead", node.name, tag, True, node.id, combo))
            continue
        inst, k = (tag[:-1], tag[-1][0]), tag[-1][1]
        rec = c.instances.get(inst)
        if rec is None:
            raise ExecutionError(f"{describe_node(node)} at tag {fmt_tag(tag)}: its frame instance is gone")
        fits = k + 1 in rec.started or k + 1 < rec.oldest + rec.window
        rule = "E-Next-Live" if fits else "E-Next-Park"
        out.append(Firing(rule, node.name, tag, False, node.id, combo, instance=inst))
    return out


def _arrivable(c: Config, node: Node, tag: Tag) -> range | frozenset[int]:
    """Arr(m, t): the data slots of a Merge that can deliver at t."""
    n = c.program.n_data[node.id]
    back = c.program.back_slots.get(node.id)
    if back is None:
        return range(n)
    if not tag or tag[-1][1] == 0:
        return frozenset(range(n)) - back
    return back


def _enable_merge(c: Config, node: Node, tag: Tag, arr: Arrivals) -> list[Firing]:
    """[E-Merge-Live], [E-Merge-AllDead] (cases a and b), [E-Merge-DeadEnter]."""
    p = c.program
    nd, ns = p.n_data[node.id], p.n_slots[node.id]
    ctl_slots = range(nd, ns)
    if any(s not in arr for s in ctl_slots):  # Guard(m, t) fails: wait for every control input
        return []
    out: list[Firing] = []
    for ctl in itertools.product(*(arr[s] for s in ctl_slots)):
        guard_live = not any(tok.is_dead for tok in ctl)
        live_data = [(j, tok) for j in range(nd) for tok in arr.get(j, ()) if not tok.is_dead]
        if len(live_data) > 1:  # [E-Merge-Conflict]: two live data inputs at t
            return [Firing("E-Merge-Conflict", node.name, tag, False, node.id, ())]
        if guard_live:
            for j, tok in live_data:  # [E-Merge-Live]: the one live input
                out.append(Firing("E-Merge-Live", node.name, tag, False, node.id, (tok, *ctl), slot=j))
        elif live_data:  # [E-Merge-AllDead] (b): a dead control input where it would have fired live
            out.append(Firing("E-Merge-AllDead", node.name, tag, True, node.id, ctl))
        arrivable = _arrivable(c, node, tag)
        if all(any(tok.is_dead for tok in arr.get(j, ())) for j in arrivable):
            loop_iter0 = node.id in p.back_slots and (not tag or tag[-1][1] == 0)
            rule = "E-Merge-DeadEnter" if loop_iter0 else "E-Merge-AllDead"  # (a)
            f = Firing(rule, node.name, tag, True, node.id, ctl)
            if f not in out:
                out.append(f)
    return out


def _transfer_key(node: Node, tag: Tag) -> tuple[str, Tag]:
    return (node.attrs["edge"], tag)


def _enable_transfer(c: Config, node: Node, tag: Tag, arr: Arrivals) -> list[Firing]:
    """[E-Send]: a Send fires once its inputs are full at t, live or dead. [E-Recv] / [E-Recv-Dead]: a Recv
    fires once its control inputs are full at t (a root Recv has none) and the rendezvous holds the token
    keyed (edge, t); it takes that token, whose deadness it passes on whatever its control input says.
    In one graph alone a Recv waits forever: the tokens come from the other partitions of a run
    (``turnout.devices.smallstep`` runs a set of partitions over a shared rendezvous)."""
    out = []
    for combo in _full_choices(c, node, arr):
        if node.op == "Send":
            out.append(Firing("E-Send", node.name, tag, any(tok.is_dead for tok in combo), node.id, combo))
            continue
        key = _transfer_key(node, tag)
        for k, msg in c.mailbox:
            if k == key:
                rule = "E-Recv-Dead" if msg.is_dead else "E-Recv"
                out.append(Firing(rule, node.name, tag, msg.is_dead, node.id, (*combo, msg)))
    return out


def _blocked_transfers(c: Config) -> list[Tag]:
    """Tags of Recvs whose control inputs are full but whose token has not come: their iteration is
    busy (it cannot retire under them), exactly as if they were enabled."""
    p = c.program
    out = []
    keys = {k for k, _ in c.mailbox}
    for (nid, tag), toks in c.pending.items():
        node = p.nodes[nid]
        if node.op == "Recv" and (nid, tag) not in c.fired and len(toks) == p.n_slots[nid] \
                and _transfer_key(node, tag) not in keys:
            out.append(tag)
    return out


_ENABLE: dict[str, Enabler] = {
    "Send": _enable_transfer,
    "Recv": _enable_transfer,
    "Switch": _strict("E-Switch", "E-Switch-Dead"),
    "Merge": _enable_merge,
    "Enter": _enable_enter,
    "Exit": _strict("E-Exit-Live", "E-Exit-Dead"),
    "NextIteration": _enable_next,
    "LoopCond": _strict("E-LoopCond", "E-LoopCond"),
}


def _node_firings(c: Config) -> list[Firing]:
    p = c.program
    out: list[Firing] = []
    for nid in p.sources:
        if (nid, ()) not in c.fired:
            node = p.nodes[nid]
            out.extend(_ENABLE.get(node.op, _enable_ordinary)(c, node, (), {}))
    for (nid, tag), toks in c.pending.items():
        if (nid, tag) in c.fired:
            node = p.nodes[nid]
            if node.op == "Merge" and any(j < p.n_data[nid] and not t.is_dead for j, t in toks):
                out.append(Firing("E-Merge-Conflict", node.name, tag, False, nid, ()))  # a late live input
            continue
        arr: Arrivals = {}
        for slot, tok in toks:
            arr.setdefault(slot, []).append(tok)
        node = p.nodes[nid]
        out.extend(_ENABLE.get(node.op, _enable_ordinary)(c, node, tag, arr))
    for inst, rec in c.instances.items():  # [E-Next-Live], parked source
        t, f = inst
        for nid, k, tok in rec.parked:
            if k in rec.started or k < rec.oldest + rec.window:
                out.append(Firing("E-Next-Live", p.nodes[nid].name, (*t, (f, k)), False, nid, (tok,),
                                  instance=inst, parked=True))
    return out


def _extends(u: Tag, prefix: Tag) -> bool:
    return u[: len(prefix)] == prefix


def _instance_steps(c: Config, busy: Iterable[Tag]) -> list[Firing]:
    """[E-Iter-Retire] and [E-Frame-Done], whose premises are about the rest of the configuration."""
    busy = list(busy)
    out = []
    for inst, rec in c.instances.items():
        if rec.pend:
            continue
        t, f = inst
        k = rec.oldest
        if k in rec.started:
            itag = (*t, (f, k))
            quiet = not any(_extends(u, itag) for u in busy)
            if quiet and not any(_extends(u, itag) for u, _ in c.instances):
                out.append(Firing("E-Iter-Retire", f, itag, instance=inst))
        elif all(s < rec.oldest for s in rec.started) and not rec.parked:
            out.append(Firing("E-Frame-Done", f, t, instance=inst))
    return out


def enabled(config: Config) -> list[Firing]:
    """Every firing the ``E-`` rules allow in ``config`` (node firings first, then instance steps)."""
    nodes = _node_firings(config)
    busy = [f.tag for f in nodes] + _blocked_transfers(config)
    return nodes + _instance_steps(config, busy)


# ---- firing ---------------------------------------------------------------------------------------------
def _describe(node: Node, tag: Tag) -> str:
    return f"{describe_node(node)} at tag {fmt_tag(tag)}"


LiveKernel = Callable[[_Update, Node, Tag, list[Any]], list[Any]]


def _k_pure(u: _Update, node: Node, tag: Tag, vals: list[Any]) -> list[Any]:
    return run_kernel(node.op, vals, node.attrs, _describe(node, tag))


def _k_placeholder(u: _Update, node: Node, tag: Tag, vals: list[Any]) -> list[Any]:
    # unreachable: ``initial`` cuts fed tensors out and rejects a needed Placeholder that is not fed
    raise FeedError(f"{describe_node(node)} must be fed a value")


def _k_noop(u: _Update, node: Node, tag: Tag, vals: list[Any]) -> list[Any]:
    return []


def _k_var_handle(u: _Update, node: Node, tag: Tag, vals: list[Any]) -> list[Any]:
    return [VarHandleValue(node.attrs["var_name"])]


def _var_name(node: Node, h: Any) -> str:
    return h.name if isinstance(h, VarHandleValue) else str(node.attrs["var_name"])


def _k_read(u: _Update, node: Node, tag: Tag, vals: list[Any]) -> list[Any]:
    """[E-Var-Read]: the current value of the variable."""
    name = _var_name(node, vals[0])
    if name not in u.variables:
        raise ExecutionError(f"{_describe(node, tag)} reads variable {name!r}, which has no value")
    return [u.variables[name]]


_ASSIGN: dict[str, Callable[[Any, Any], Any]] = {
    "AssignVariable": lambda old, v: v,
    "AssignAddVariable": lambda old, v: run_kernel("Add", [old, v], {})[0],
    "AssignSubVariable": lambda old, v: run_kernel("Sub", [old, v], {})[0],
}


def _k_assign(u: _Update, node: Node, tag: Tag, vals: list[Any]) -> list[Any]:
    """[E-Var-Assign]: sigma(x) := f_n(sigma(x), v); the new value is the output. The store holds a
    copy: the value assigned may be a constant's array or a fed one, which sigma(x) must not share."""
    name = _var_name(node, vals[0])
    old = u.variables.get(name)
    if old is None and node.op != "AssignVariable":
        raise ExecutionError(f"{_describe(node, tag)} updates variable {name!r}, which has no value")
    new = np.array(_ASSIGN[node.op](old, vals[1]))
    if "dtype" in node.attrs:
        new = new.astype(as_dtype(node.attrs["dtype"]).numpy, copy=False)
    if old is not None and new.shape != np.shape(old):  # a Variable keeps its shape, as on every backend
        raise ExecutionError(f"{_describe(node, tag)}: assigning shape {new.shape} to a variable of shape "
                             f"{np.shape(old)}")
    u.variables = {**u.variables, name: new}
    return [new]


def _k_stack_new(u: _Update, node: Node, tag: Tag, vals: list[Any]) -> list[Any]:
    return [StackHandleValue(node.name, tag)]


def _stack_key(idx: Any) -> tuple[int, ...]:
    return tuple(int(i) for i in np.asarray(idx).ravel())


def _k_push(u: _Update, node: Node, tag: Tag, vals: list[Any]) -> list[Any]:
    """[E-Stack-Push]: Sigma(h)(tuple(index)) := v; the output is v."""
    h, idx, v = vals
    u.stacks = {**u.stacks, (h, _stack_key(idx)): v}
    return [v]


def _k_pop(u: _Update, node: Node, tag: Tag, vals: list[Any]) -> list[Any]:
    """[E-Stack-Pop]: the entry stored under tuple(index)."""
    h, idx = vals
    key = (h, _stack_key(idx))
    if key not in u.stacks:
        raise KernelError(f"{_describe(node, tag)}: stack {h} has no entry under key {key[1]}")
    return [u.stacks[key]]


# op -> (rule cited for its live firing, kernel). Everything else is a pure compute kernel ([E-Op]).
_LIVE_OPS: dict[str, tuple[str, LiveKernel]] = {
    "Placeholder": ("E-Op", _k_placeholder),
    "NoOp": ("E-Op", _k_noop),
    "VarHandle": ("E-Op", _k_var_handle),
    "ReadVariable": ("E-Var-Read", _k_read),
    "AssignVariable": ("E-Var-Assign", _k_assign),
    "AssignAddVariable": ("E-Var-Assign", _k_assign),
    "AssignSubVariable": ("E-Var-Assign", _k_assign),
    "StackNew": ("E-Op", _k_stack_new),
    "StackPush": ("E-Stack-Push", _k_push),
    "StackPop": ("E-Stack-Pop", _k_pop),
}
_LIVE_OPS_DEFAULT: tuple[str, LiveKernel] = ("E-Op", _k_pure)


def _data(c: Config, f: Firing) -> list[Any]:
    return [tok.value for tok in f.inputs[: c.program.n_data[f.node_id]]]


def _fire_op(c: Config, f: Firing, u: _Update) -> None:
    """[E-Op] and the stateful live rules: run the kernel once, emit live outputs at the same tag."""
    node = c.program.nodes[f.node_id]
    kernel = _LIVE_OPS.get(node.op, _LIVE_OPS_DEFAULT)[1]
    outs = kernel(u, node, f.tag, _data(c, f))
    u.take(f.node_id, f.tag)
    u.emit(f.node_id, f.tag, [Token.live(v, f.tag) for v in outs], True)


def _fire_dead(c: Config, f: Firing, u: _Update) -> None:
    """[E-Op-Dead], [E-Switch-Dead], [E-Merge-AllDead], [E-Merge-DeadEnter]: every output dead."""
    u.take(f.node_id, f.tag)
    u.emit_dead(f.node_id, f.tag)


def _fire_switch(c: Config, f: Firing, u: _Update) -> None:
    """[E-Switch]: output[pred] live (index 1 = true), the other dead; the firing itself is live."""
    v, pred = _data(c, f)
    b = int(truth(pred, lambda: _describe(c.program.nodes[f.node_id], f.tag)))
    outs = [Token.dead(f.tag), Token.dead(f.tag)]
    outs[b] = Token.live(v, f.tag)
    u.take(f.node_id, f.tag)
    u.emit(f.node_id, f.tag, outs, True)


def _fire_merge_live(c: Config, f: Firing, u: _Update) -> None:
    """[E-Merge-Live]: forward the live input and its int32 index; later inputs at t are discarded."""
    u.take(f.node_id, f.tag)
    u.emit(f.node_id, f.tag, [Token.live(f.inputs[0].value, f.tag),
                              Token.live(np.asarray(f.slot, dtype=np.int32), f.tag)], True)


def _fire_merge_conflict(c: Config, f: Firing, u: _Update) -> None:
    """[E-Merge-Conflict]: a Merge holds two live data inputs at one tag (both waiting, or one arriving
    after it fired): the run stops with MergeConflictError, whichever input came first. Its message
    writes the tag as the reference interpreter does (``root``, ``outer:1/inner:0``): it is the one
    message every interpreter gives."""
    raise MergeConflictError(merge_conflict_message(c.program.nodes[f.node_id], message_tag(f.tag)))


def _fire_enter(c: Config, f: Firing, u: _Update) -> None:
    """[E-Enter] / [E-Enter-Const]: open the instance (t, F), count this Enter off, deliver."""
    node = c.program.nodes[f.node_id]
    fname = node.attrs["frame_name"]
    inst: InstKey = (f.tag, fname)
    data = f.inputs[0]
    tok_dead = f.dead
    u.take(f.node_id, f.tag)
    rec = u.open(inst, int(node.attrs.get("parallel_iterations", 10)))
    if f.rule == "E-Enter-Const":
        inv = Token(data.value, tok_dead, ())
        u.set_instance(inst, pend=rec.pend - 1, invariants=rec.invariants | {(f.node_id, inv)})
        iterations = sorted(rec.started)
    else:
        u.set_instance(inst, pend=rec.pend - 1)
        iterations = [0]
    for k in iterations:
        tag = (*f.tag, (fname, k))
        u.emit(f.node_id, tag, [Token(data.value, tok_dead, tag)], not tok_dead)


def _fire_exit(c: Config, f: Firing, u: _Update) -> None:
    """[E-Exit-Live]: deliver at the parent tag now. [E-Exit-Dead]: remember the Exit, deliver nothing."""
    inst: InstKey = (f.tag[:-1], f.tag[-1][0])
    u.take(f.node_id, f.tag)
    rec = u.instances.get(inst)
    if f.dead:
        if rec is not None:
            u.set_instance(inst, dead_exits=rec.dead_exits | {f.node_id})
        return
    if rec is not None:
        u.set_instance(inst, live_exits=rec.live_exits | {f.node_id})
    parent = f.tag[:-1]
    u.emit(f.node_id, parent, [Token.live(f.inputs[0].value, parent)], True)


def _fire_next_live(c: Config, f: Firing, u: _Update) -> None:
    """[E-Next-Live]: deliver to iteration k+1 (starting it); fresh from the edge or out of Park."""
    assert f.instance is not None
    inst = f.instance
    if f.parked:
        target = f.tag
        rec = u.instances[inst]
        u.set_instance(inst, parked=rec.parked - {(f.node_id, target[-1][1], f.inputs[0])})
    else:
        u.take(f.node_id, f.tag)
        target = (*f.tag[:-1], (f.tag[-1][0], f.tag[-1][1] + 1))
    u.start(inst, target[-1][1])
    u.emit(f.node_id, target, [Token.live(f.inputs[0].value, target)], True)


def _fire_next_park(c: Config, f: Firing, u: _Update) -> None:
    """[E-Next-Park]: iteration k+1 lies outside the parallel_iterations window; park the value."""
    assert f.instance is not None
    u.take(f.node_id, f.tag)
    rec = u.instances[f.instance]
    k1 = f.tag[-1][1] + 1
    u.set_instance(f.instance, parked=rec.parked | {(f.node_id, k1, Token.live(f.inputs[0].value, ()))})


def _fire_next_dead(c: Config, f: Firing, u: _Update) -> None:
    """[E-Next-Dead]: the dead token is dropped; this is how a loop ends."""
    u.take(f.node_id, f.tag)


def _fire_loop_cond(c: Config, f: Firing, u: _Update) -> None:
    """[E-LoopCond]: identity on tokens, live or dead (and the iteration bound, ``check_loop_cond``)."""
    live = not f.dead and truth(f.inputs[0].value, lambda: _describe(c.program.nodes[f.node_id], f.tag))
    u.check_loop_cond(f.tag, live)
    u.take(f.node_id, f.tag)
    u.emit(f.node_id, f.tag, [Token(f.inputs[0].value, f.dead, f.tag)], not f.dead)


def _fire_retire(c: Config, f: Firing, u: _Update) -> None:
    """[E-Iter-Retire]: the oldest active iteration retires; the window moves."""
    assert f.instance is not None
    u.set_instance(f.instance, oldest=u.instances[f.instance].oldest + 1)


def _fire_frame_done(c: Config, f: Firing, u: _Update) -> None:
    """[E-Frame-Done]: release one dead token per Exit in Dx \\ Lx at the parent tag; delete I."""
    assert f.instance is not None
    rec = u.instances.pop(f.instance)
    t = f.instance[0]
    for x in sorted(rec.dead_exits - rec.live_exits):
        u.emit_dead(x, t)


def _fire_send(c: Config, f: Firing, u: _Update) -> None:
    """[E-Send]: the data input's token (a control Send: its control inputs' deadness) goes into the
    rendezvous under (edge, t); a dead Send still sends."""
    node = c.program.nodes[f.node_id]
    nd = c.program.n_data[f.node_id]
    if nd:
        tok = f.inputs[0]
        msg = Token(tok.value, tok.is_dead, ())
    else:
        msg = Token(None, f.dead, ())
    u.take(f.node_id, f.tag)
    u.outbox.append((_transfer_key(node, f.tag), msg))
    u.emit(f.node_id, f.tag, [], True)


def _fire_recv(c: Config, f: Firing, u: _Update) -> None:
    """[E-Recv] / [E-Recv-Dead]: take the token keyed (edge, t) out of the rendezvous and emit it at t."""
    node = c.program.nodes[f.node_id]
    msg = f.inputs[-1]
    u.take(f.node_id, f.tag)
    u.mailbox = u.mailbox - {(_transfer_key(node, f.tag), msg)}
    u.emit(f.node_id, f.tag, [Token(msg.value, msg.is_dead, f.tag)], not msg.is_dead)


_FIRE: dict[str, Callable[[Config, Firing, _Update], None]] = {
    "E-Send": _fire_send,
    "E-Recv": _fire_recv,
    "E-Recv-Dead": _fire_recv,
    "E-Op": _fire_op,
    "E-Var-Read": _fire_op,
    "E-Var-Assign": _fire_op,
    "E-Stack-Push": _fire_op,
    "E-Stack-Pop": _fire_op,
    "E-Op-Dead": _fire_dead,
    "E-Switch": _fire_switch,
    "E-Switch-Dead": _fire_dead,
    "E-Merge-Live": _fire_merge_live,
    "E-Merge-AllDead": _fire_dead,
    "E-Merge-DeadEnter": _fire_dead,
    "E-Merge-Conflict": _fire_merge_conflict,
    "E-Enter": _fire_enter,
    "E-Enter-Const": _fire_enter,
    "E-Exit-Live": _fire_exit,
    "E-Exit-Dead": _fire_exit,
    "E-Next-Live": _fire_next_live,
    "E-Next-Park": _fire_next_park,
    "E-Next-Dead": _fire_next_dead,
    "E-LoopCond": _fire_loop_cond,
    "E-Iter-Retire": _fire_retire,
    "E-Frame-Done": _fire_frame_done,
}

#: Every rule name this module implements (a test checks them against specs/rules.toml when present).
RULES = frozenset(_FIRE)


def fire(config: Config, firing: Firing) -> Config:
    """Take one enabled firing; returns a new configuration and leaves ``config`` untouched."""
    return fire_sending(config, firing)[0]


def fire_sending(config: Config, firing: Firing) -> tuple[Config, list[tuple[tuple[str, Tag], Token]]]:
    """``fire``, also returning the tokens an [E-Send] put into the rendezvous (for a set of partitions)."""
    late_conflict = firing.rule == "E-Merge-Conflict"  # may follow the Merge's own firing at the tag
    if firing.is_node_firing and not late_conflict and (firing.node_id, firing.tag) in config.fired:
        raise ArgumentError(f"{firing.node} has already fired at tag {fmt_tag(firing.tag)}")
    u = _Update(config)
    _FIRE[firing.rule](config, firing, u)
    return u.done(), u.outbox


# ---- reading the outcome ---------------------------------------------------------------------------------
def is_quiescent(config: Config) -> bool:
    """Nothing is enabled: the run is over."""
    return not enabled(config)


def is_final(config: Config) -> bool:
    """Quiescent with every fetch edge holding a token (live or dead): a run that ended normally."""
    return all(f in config.produced for f in config.program.fetches) and is_quiescent(config)


def stranded(config: Config) -> list[tuple[str, Tag, int, Token]]:
    """Tokens left waiting in Q: (consumer name, tag, slot, token). [T4-Quiescence] says builder-made
    programs strand no live token."""
    p = config.program
    return [(p.nodes[nid].name, tag, slot, tok)
            for (nid, tag), toks in config.pending.items() for slot, tok in sorted(toks, key=lambda e: e[0])]


def deadlock_report(config: Config) -> str:
    """The blocked keys (n, t): each with the inputs that arrived and those missing; open instances."""
    p = config.program
    missing = [name for f, name in zip(p.fetches, p.fetch_names, strict=True) if f not in config.produced]
    lines = [f"deadlock: no firing is enabled, yet fetches {', '.join(missing)} were never produced"]
    for (nid, tag), toks in config.pending.items():
        if (nid, tag) in config.fired:
            continue
        have = sorted({slot for slot, _ in toks})
        node = p.nodes[nid]
        miss = [s for s in range(p.n_slots[nid]) if s not in have]
        lines.append(
            f"  blocked: {_describe(node, tag)}; arrived: "
            f"{', '.join(p.slot_source(nid, s) for s in have) or 'nothing'}; missing: "
            f"{', '.join(p.slot_source(nid, s) for s in miss) or 'nothing'}")
    for (t, fname), rec in config.instances.items():
        lines.append(f"  open frame instance {fname!r} entered at tag {fmt_tag(t)}: started "
                     f"{sorted(rec.started)}, oldest active {rec.oldest}, Enters still to arrive {rec.pend}")
    return "\n".join(lines)


def outputs(config: Config) -> list[Any]:
    """The fetched values. ``DeadFetchError`` for a dead fetch, ``DeadlockError`` for a missing one."""
    p = config.program
    vals = []
    for f, name in zip(p.fetches, p.fetch_names, strict=True):
        tok = config.produced.get(f)
        if tok is None:
            raise DeadlockError(deadlock_report(config))
        if tok.is_dead:
            raise DeadFetchError(dead_fetch_message(name, p.nodes[f[0]]))
        vals.append(tok.value)
    return vals


# ---- runs under a scheduler ------------------------------------------------------------------------------
@dataclass
class SmallStepResult:
    """Fetched values; every step taken as ``(rule, node or frame name, tag, dead)``; the number of
    node firings per key ``(node name, tag)`` (parked deliveries and instance steps excluded: they
    consume no inputs); and the final variable store."""

    values: list[Any]
    firings: list[tuple[str, str, Tag, bool]]
    counts: dict[tuple[str, Tag], int]
    variables: dict[str, Any]
    final: Config
    #: what a run under a memory budget counted of its saved values (None: no budget applied)
    saved: SavedBytes | None = None


SCHEDULERS = ("fifo", "lifo", "random")


def run(graph: Graph, fetches: Sequence[Any], feeds: Mapping[Any, Any] | None = None,
        scheduler: str = "fifo", seed: int = 0, max_steps: int = 200_000,
        variables: Mapping[str, Any] | None = None, max_seconds: float | None = None,
        max_iterations: int | None = 1_000_000, memory_budget: int | None = None) -> SmallStepResult:
    """Run to quiescence, choosing among enabled firings with ``scheduler``.

    ``fifo`` takes the firing enabled longest ago, ``lifo`` the one enabled most recently, ``random``
    a seeded uniform choice. Raises ``DeadlockError`` (quiescent with a fetch missing; lists the
    blocked keys), ``DeadFetchError``, or ``NonTerminationError`` after ``max_steps`` steps,
    ``max_seconds`` seconds of wall-clock time, or when a frame instance starts iteration
    ``max_iterations`` (None: no such bound). Under a memory budget (``memory_budget``, the run's,
    and the loops' own on their ``StackNew`` nodes) the entries the rules put in the stack store
    (Sigma) are counted as the reference interpreter counts its pushes: a run that would hold more
    stops with ``ResourceExhaustedError`` (``saved`` in the result says what was counted). The
    budget is the driver's: the rules themselves are unchanged.
    """
    if scheduler not in SCHEDULERS:
        raise ArgumentError(f"unknown scheduler {scheduler!r}; choose one of {SCHEDULERS}")
    rng = random.Random(seed)
    c = initial(graph, fetches, feeds, variables, max_iterations=max_iterations)
    saved = _saved_bytes(c.program, memory_budget)
    loop_of = {n.name: n.attrs["loop_name"] for n in c.program.nodes.values()
               if n.op == "StackNew" and "loop_name" in n.attrs}
    age: dict[Firing, int] = {}
    clock = itertools.count()
    log: list[tuple[str, str, Tag, bool]] = []
    counts: dict[tuple[str, Tag], int] = {}
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    while True:
        en = enabled(c)
        if not en:
            break
        if len(log) >= max_steps:
            raise NonTerminationError(
                f"small-step run exceeded max_steps={max_steps} firings (a loop that does not end?); "
                f"last: {log[-1]}; raise the limit with sess.run(..., max_firings=N)")
        if deadline is not None and not len(log) & 255 and time.monotonic() > deadline:
            raise NonTerminationError(
                f"small-step run took more than max_seconds={max_seconds} seconds (a loop that does not end?); "
                f"last: {log[-1] if log else None}; raise the limit with sess.run(..., max_seconds=N)")
        age = {f: age[f] if f in age else next(clock) for f in en}  # when each became enabled
        en.sort(key=age.__getitem__)
        pick = en[0] if scheduler == "fifo" else en[-1] if scheduler == "lifo" else rng.choice(en)
        del age[pick]
        c = fire(c, pick)
        log.append((pick.rule, pick.node, pick.tag, pick.dead))
        if pick.is_node_firing:
            counts[(pick.node, pick.tag)] = counts.get((pick.node, pick.tag), 0) + 1
        if saved is not None and not pick.dead:
            _count_saved(saved, loop_of, c.program, pick)
    return SmallStepResult(outputs(c), log, counts, dict(c.variables), c, saved)


def _saved_bytes(p: Program, memory_budget: int | None) -> SavedBytes | None:
    """The count of saved values a run under a memory budget keeps (None: no budget applies)."""
    plan = run_plan(p.nodes.values(), platform("cpu"), memory_budget)
    return None if plan is None else SavedBytes(plan, "small-step system")


def _count_saved(saved: SavedBytes, loop_of: Mapping[str, str], p: Program, f: Firing) -> None:
    """What a live firing saves, as the reference interpreter counts it: a ``[E-Stack-Push]`` stored
    one entry (its value and its index) under the loop its stack belongs to (``loop_of``: a
    ``StackNew``'s name -> its ``loop_name``); a ``CheckpointSlots`` gave the slots its loop's
    checkpoints then take (``SavedBytes.checkpoints``)."""
    if f.rule == "E-Stack-Push":
        _count_push(saved, loop_of, f)
    elif f.is_node_firing and p.nodes[f.node_id].op == "CheckpointSlots":
        node = p.nodes[f.node_id]
        saved.checkpoints(node.attrs, int(node.attrs["slots"]))


def _count_push(saved: SavedBytes, loop_of: Mapping[str, str], f: Firing) -> None:
    """A live ``[E-Stack-Push]`` stored one entry: its value and its index, counted under the loop its
    stack belongs to, as the reference counts them."""
    h, idx, v = (tok.value for tok in f.inputs[:3])
    assert isinstance(h, StackHandleValue) and idx is not None
    loop = loop_of.get(h.node)
    if loop is not None:
        saved.push(loop, int(getattr(v, "nbytes", 0)) + 4 * int(np.size(idx)))


class SmallStepBackend:
    """The ``Backend`` protocol of ``turnout.session`` over ``run``, so the small-step semantics can
    stand beside the other executors in backend-parametrized tests. Variables persist in the
    session's store (updated in place, as the other backends do).

    The rules hold for well-formed graphs only, so a run first checks the graph with the shared
    validator (``turnout.validate``), as every other backend does: an ill-formed graph (a Merge of
    two dtypes, a back edge less specific than its loop variable's invariant) raises the same
    ``ValidationError`` here as there. ``run`` itself checks only what the transition system needs.
    Memory budgets are honoured by counting the stack store's entries (``run``'s ``memory_budget``)."""

    #: runs honour memory budgets (the driver counts what the stack store holds)
    memory_budgets = True

    def __init__(self, graph: Graph, **options: Any) -> None:
        if options:  # e.g. device_memory_limit: an option no one honours must not be silently ignored
            raise ArgumentError(f"the small-step backend takes no options, got {sorted(options)}")
        self.graph = graph
        self.options = options

    def run(self, fetches: list[Tensor], feeds: dict[Tensor, Any], variables: dict[str, Any],
            options: RunOptions) -> RunResult:
        """Run one step by the transition system (``run``), with the run options' scheduler and limits, and put the
        Variables' final values back into ``variables``."""
        limit = options.max_firings
        r = run(self.graph, fetches, feeds, scheduler=options.scheduler, seed=options.seed,
                max_steps=limit if limit is not None else 10**9, variables=variables,
                max_seconds=options.max_seconds, max_iterations=options.max_iterations,
                memory_budget=options.memory_budget)
        variables.clear()
        variables.update(r.variables)
        saved = {} if r.saved is None else r.saved.stats()
        return RunResult(values=r.values, trace=r.firings if options.trace else None,
                         counts=r.counts, stats={"firings": len(r.firings), **saved})
