"""Graphs, nodes and tensors.

A graph is built append-only: once a node exists its op, inputs and attrs never change. The single
exception is the back edge of a loop ``Merge``: a loop is a cycle, so one edge must be closed after its
source (the ``NextIteration``) exists. ``Node.close_back_edge`` fills a slot that was explicitly left
pending at creation, once; validation rejects graphs with pending slots left open.

The graph also carries the *structured form* the builders produced (``Graph.contexts``): every
``cond`` and ``while_loop`` leaves a context object describing its pivots, merges and frame, so later
passes (gradients, the structured evaluator, the fast backend) need not rediscover it.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from turnout import dtypes as _dt
from turnout import primitives
from turnout import shapes as _sh
from turnout.arguments import check_node_name
from turnout.errors import ArgumentError, GraphBuildError, NotFoundError, describe_node
from turnout.shape_rules import check_merge_input, infer
from turnout.specs import TensorSpec

if TYPE_CHECKING:
    from turnout.control_flow.contexts import ControlFlowContext


class _PendingBackEdge:
    """Marker for a Merge input slot that a NextIteration will fill later."""

    def __repr__(self) -> str:
        return "BACK_EDGE"


BACK_EDGE = _PendingBackEdge()


def same_graph_object(obj: object, name: str, other: object) -> bool:
    """``==`` for tensors and Variables: identity against graph objects (and None); against a value it
    is a GraphBuildError, because a Python comparison can never be the elementwise one meant."""
    if other is None or isinstance(other, (Tensor, Node)) or hasattr(other, "_as_tensor"):
        return obj is other
    raise GraphBuildError(
        f"`{name} == {other!r}` would compare Python objects, not values: use "
        f"tn.equal(tensor, value) (or tn.not_equal) for the elementwise comparison")


class Tensor:
    """The ``index``-th output of a node. Operators build ops in the tensor's graph."""

    __slots__ = ("node", "index", "spec")
    __array_priority__ = 100  # numpy defers to our operators

    def __init__(self, node: Node, index: int, spec: TensorSpec) -> None:
        self.node = node
        self.index = index
        self.spec = spec

    @property
    def dtype(self) -> _dt.DType:
        """The element type, from the node's inferred spec."""
        return self.spec.dtype

    @property
    def shape(self) -> _sh.Shape:
        """The static shape, from the node's inferred spec (None: unknown rank; None dims: unknown size)."""
        return self.spec.shape

    @property
    def graph(self) -> Graph:
        """The graph of the node that produces this tensor."""
        return self.node.graph

    @property
    def op(self) -> Node:
        """The node that produces this tensor (TensorFlow's name for it)."""
        return self.node

    @property
    def name(self) -> str:
        """``node_name:index``, TensorFlow's naming of tensors."""
        return f"{self.node.name}:{self.index}"

    def __repr__(self) -> str:
        return f"<tn.Tensor {self.name} {self.dtype.name}{_sh.fmt(self.shape)}>"

    def __bool__(self) -> bool:
        raise GraphBuildError(
            f"the truth value of tensor {self.name} is not known while the graph is built; "
            "use tn.cond / tn.while_loop instead of Python `if`/`while` on tensors"
        )

    def __eq__(self, other: object) -> bool:
        """Identity, as in TensorFlow 1, so tensors serve as dict keys and list members. Comparing a
        tensor with a value (``i % 2 == 0``) would silently be False, never the elementwise test the
        user meant, so it is an error that names ``tn.equal``."""
        return same_graph_object(self, self.name, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = object.__hash__

    def __iter__(self) -> Iterator[Any]:
        raise GraphBuildError(f"tensor {self.name} is not iterable while the graph is built; index it instead")

    def __len__(self) -> int:
        raise GraphBuildError(f"len() of tensor {self.name} is not known while the graph is built; use tn.size")

    def _no_value(self, what: str) -> GraphBuildError:
        return GraphBuildError(f"{what} of tensor {self.name} is not known while the graph is built; run it "
                               "with a Session (sess.run) for its value, or use tn.cast to change its dtype")

    # A tensor has no value while the graph is built. Python's conversions would otherwise fail with a
    # bare TypeError far from the mistake (float(t)), and numpy would wrap the tensor in an object
    # array that carries on silently (np.asarray(t) + 1).
    def __float__(self) -> float:
        raise self._no_value("float()")

    def __int__(self) -> int:
        raise self._no_value("int()")

    def __complex__(self) -> complex:
        raise self._no_value("complex()")

    def __index__(self) -> int:
        raise self._no_value("the integer value (as an index)")

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        raise self._no_value("the array value (numpy conversion)")

    # Operator overloading is installed by turnout.ops (it needs the op constructors); these
    # declarations only tell type checkers what it provides.
    if TYPE_CHECKING:

        def __add__(self, other: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __sub__(self, other: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __mul__(self, other: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __truediv__(self, other: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __floordiv__(self, other: Any) -> Tensor: ...
        def __rfloordiv__(self, other: Any) -> Tensor: ...
        def __mod__(self, other: Any) -> Tensor: ...
        def __rmod__(self, other: Any) -> Tensor: ...
        def __pow__(self, other: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __matmul__(self, other: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __lt__(self, other: Any) -> Tensor: ...
        def __le__(self, other: Any) -> Tensor: ...
        def __gt__(self, other: Any) -> Tensor: ...
        def __ge__(self, other: Any) -> Tensor: ...
        def __and__(self, other: Any) -> Tensor: ...
        def __rand__(self, other: Any) -> Tensor: ...
        def __or__(self, other: Any) -> Tensor: ...
        def __ror__(self, other: Any) -> Tensor: ...
        def __xor__(self, other: Any) -> Tensor: ...
        def __rxor__(self, other: Any) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __invert__(self) -> Tensor: ...
        def __getitem__(self, key: Any) -> Tensor: ...


class Node:
    """One op in a graph. Create nodes with ``Graph.create_node`` (or the op constructors)."""

    __slots__ = (
        "graph", "id", "name", "op", "_inputs", "control_inputs", "attrs", "outputs", "device",
        "context", "source",
    )

    def __init__(
        self,
        graph: Graph,
        id: int,
        name: str,
        op: str,
        inputs: Sequence[Tensor | _PendingBackEdge],
        control_inputs: Sequence[Node],
        attrs: dict[str, Any],
        specs: Sequence[TensorSpec],
        device: Optional[str],
        context: Optional[ControlFlowContext],
        source: Optional[str],
    ) -> None:
        self.graph = graph
        self.id = id
        self.name = name
        self.op = op
        self._inputs = list(inputs)
        self.control_inputs = tuple(control_inputs)
        self.attrs = dict(attrs)
        self.outputs = tuple(Tensor(self, i, s) for i, s in enumerate(specs))
        self.device = device
        self.context = context
        self.source = source

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """Data inputs. Raises if a back edge is still pending (use ``raw_inputs`` to see the marker)."""
        if any(isinstance(t, _PendingBackEdge) for t in self._inputs):
            raise GraphBuildError(f"{describe_node(self)} has an unbound back edge; close it with close_back_edge")
        return tuple(self._inputs)  # type: ignore[arg-type]

    @property
    def raw_inputs(self) -> tuple[Tensor | _PendingBackEdge, ...]:
        """The input slots as they are, a pending back edge's marker included (``inputs`` raises on one): for the
        passes that must see a loop still being built (validation, serialization, the gradient walk)."""
        return tuple(self._inputs)

    @property
    def has_pending_back_edge(self) -> bool:
        """True for a Merge whose NextIteration input is not connected yet (a loop still being built)."""
        return any(isinstance(t, _PendingBackEdge) for t in self._inputs)

    def close_back_edge(self, tensor: Tensor, slot: Optional[int] = None) -> None:
        """Bind a pending Merge input slot to ``tensor`` (normally a NextIteration output).

        The only mutation a node allows: a loop is a cycle, so its back edge is closed after its source
        exists. Each pending slot can be bound once.
        """
        if self.op != "Merge":
            raise GraphBuildError(f"close_back_edge applies to Merge nodes, not to {describe_node(self)}")
        pending = [i for i, t in enumerate(self._inputs) if isinstance(t, _PendingBackEdge)]
        if not pending:
            raise GraphBuildError(f"{describe_node(self)} has no pending back edge to close")
        if slot is None:
            slot = pending[0]
        if slot not in pending:
            raise GraphBuildError(f"input {slot} of {describe_node(self)} is not a pending back edge")
        if not isinstance(tensor, Tensor) or tensor.graph is not self.graph:
            raise GraphBuildError(f"back edge of {describe_node(self)} must be a tensor of the same graph")
        self.graph._check_merge_input(self, tensor)
        self._inputs[slot] = tensor
        self.graph._version += 1
        self.graph._edits += 1

    @property
    def frame_name(self) -> Optional[str]:
        """The ``frame_name`` attr of an Enter (None for other nodes)."""
        return self.attrs.get("frame_name")

    def __repr__(self) -> str:
        return f"<tn.Node {self.op} {self.name!r}>"


_TURNOUT_DIR = os.path.dirname(os.path.abspath(__file__))
_PKG_ROOT = os.path.dirname(_TURNOUT_DIR)
_INTERNAL_DIRS = tuple(
    os.path.join(_PKG_ROOT, d) + os.sep for d in ("turnout", "reference", "semantics", "fast", "devices")
)


@functools.lru_cache(maxsize=4096)
def _internal(filename: str) -> bool:
    """Whether a frame of ``filename`` is Turnout's own (or a context manager's that Turnout entered,
    or ``threading``'s, which starts the worker threads Turnout runs calls on).

    Cached by file name: every node made walks the stack to the user's line (``create_node``), and
    making each frame's path absolute was most of that walk (about a tenth of the time of a test
    file that builds some 70 000 nodes)."""
    return (os.path.abspath(filename).startswith(_INTERNAL_DIRS) or "contextlib" in filename
            or filename == threading.__file__)


def user_source_line() -> Optional[str]:
    """file:line of the innermost stack frame outside Turnout: where the user created the op."""
    site = user_site()
    return None if site is None else f"{os.path.basename(site.filename)}:{site.lineno}"


@dataclass(frozen=True)
class UserSite:
    """Where the user's code called into Turnout: the innermost stack frame outside Turnout."""

    filename: str
    lineno: int
    module_globals: dict[str, Any]


_inherited = threading.local()


def user_site() -> Optional[UserSite]:
    """The innermost stack frame outside Turnout (the user's ``sess.run`` line, as
    ``user_source_line`` finds it); on a worker thread that runs a call for the user's thread
    (``calls_from``), whose stack holds no frame of the user's, the site that thread called from."""
    f: Any = sys._getframe(1)
    while f is not None:
        if not _internal(f.f_code.co_filename):
            return UserSite(f.f_code.co_filename, f.f_lineno, f.f_globals)
        f = f.f_back
    return getattr(_inherited, "site", None)


@contextlib.contextmanager
def calls_from(site: Optional[UserSite]) -> Iterator[None]:
    """Run the block (on a worker thread) as called from ``site``, the calling thread's
    ``user_site``: a warning the block raises names the user's line, not ``threading``'s."""
    before = getattr(_inherited, "site", None)
    _inherited.site = site
    try:
        yield
    finally:
        _inherited.site = before


def warn_user(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` of ``message`` attributed to the user's line (``user_site``), shown once per
    line as ``warnings.warn`` shows it. Why not a ``stacklevel``: a warning raised under a backend's
    run is reached through more or fewer of Turnout's frames by the session's paths and the backends
    (a fixed level named a line of Turnout), and on a worker thread no level reaches the user's
    frame at all."""
    site = user_site()
    if site is None:
        warnings.warn(message, category, stacklevel=2)
        return
    registry = site.module_globals.setdefault("__warningregistry__", {})
    warnings.warn_explicit(message, category, site.filename, site.lineno,
                           module=site.module_globals.get("__name__"), registry=registry,
                           module_globals=site.module_globals)


class Graph:
    """A dataflow graph. Use ``with g.as_default():`` to build into it."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self._by_name: dict[str, Node] = {}
        self._name_counts: dict[str, int] = {}
        self._scope: list[str] = []
        self._control_deps: list[list[Node]] = []
        self._devices: list[Optional[str]] = []
        self._colocate: list[Optional[Node]] = []
        #: node id -> ids of the nodes it must be placed with (``tn.colocate_with`` gives one; an imported
        #: ``_class`` attr may name several, which ties them all together); read by placement
        self.colocation: dict[int, tuple[int, ...]] = {}
        self._gradient_of: list[Node] = []
        #: backward node id -> id of the forward op whose gradient it computes: placement puts it on the
        #: forward op's device unless a constraint or a device scope says otherwise
        self.gradient_of: dict[int, int] = {}
        self._context: Optional[ControlFlowContext] = None
        self.contexts: list[ControlFlowContext] = []
        self.variables: dict[str, Node] = {}
        self._version = 0
        self._edits = 0
        self._frame_counter = itertools.count()
        self._capture_enabled = True
        self.variable_objects: list[Any] = []
        #: the top-level ``tn.gradients`` calls built into this graph, in order
        #: (``turnout.rebuild.GradientCall``): what a run under a memory budget may rebuild
        self.gradient_calls: list[Any] = []
        #: the graph-level seed of its random ops (``tn.random.set_random_seed``), or None
        self.random_seed: Optional[int] = None

    # ---- default graph ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def as_default(self) -> Iterator[Graph]:
        """Within the ``with`` block, builders and op constructors add their nodes to this graph."""
        _default.stack.append(self)
        try:
            yield self
        finally:
            _default.stack.pop()

    # ---- naming and scopes -----------------------------------------------------------------------
    def _in_scope(self, name: str) -> str:
        """``name`` under the current name scope. A name that already starts with the scope (the
        builders pass names they got from ``unique_name``) is not prefixed twice."""
        prefix = "/".join(self._scope)
        if not prefix or name.startswith(prefix + "/"):
            return name
        return f"{prefix}/{name}"

    def unique_name(self, base: str) -> str:
        """``base`` under the current name scope, made unique in this graph with a ``_k`` suffix."""
        base = self._in_scope(base)
        if base not in self._by_name and base not in self._name_counts:
            self._name_counts[base] = 0
            return base
        while True:
            self._name_counts[base] = self._name_counts.get(base, 0) + 1
            cand = f"{base}_{self._name_counts[base]}"
            if cand not in self._by_name:
                return cand

    def unique_frame_name(self, base: str) -> str:
        """A frame name no other loop of this graph has: two loops built with the same name must still be two frames."""
        return f"{base}/frame{next(self._frame_counter)}"

    @contextlib.contextmanager
    def name_scope(self, name: str) -> Iterator[None]:
        """Within the ``with`` block, node names are prefixed with ``name/`` (nested scopes join)."""
        if not isinstance(name, str):  # (joined into node names: Python's TypeError from str.join)
            raise ArgumentError(f"name_scope: the name must be a string, got {name!r}")
        check_node_name(name, "name_scope")
        saved = self._scope
        self._scope = [self._in_scope(name)]
        try:
            yield
        finally:
            self._scope = saved

    @contextlib.contextmanager
    def control_dependencies(self, deps: Optional[Sequence[Any]]) -> Iterator[None]:
        """Ops created inside run after ``deps`` (nodes or tensors). ``None`` clears outer dependencies."""
        if deps is None:
            saved = self._control_deps
            self._control_deps = []
            try:
                yield
            finally:
                self._control_deps = saved
            return
        from turnout.nest import flatten

        nodes = []
        for d in flatten(list(deps)):
            if hasattr(d, "_as_control_node"):
                d = d._as_control_node()
            if isinstance(d, Tensor):
                d = d.node
            if not isinstance(d, Node):
                raise GraphBuildError(f"control_dependencies takes nodes or tensors, got {d!r}")
            if d.graph is not self:
                raise GraphBuildError(f"control dependency {d.name} belongs to another graph")
            nodes.append(d)
        self._control_deps.append(nodes)
        try:
            yield
        finally:
            self._control_deps.pop()

    @contextlib.contextmanager
    def device(self, name: Optional[str]) -> Iterator[None]:
        """Ops created inside are placed on device ``name`` (a string; ``None`` clears an outer scope,
        and ``""`` names no device, so the outer scope holds, as in TensorFlow).
        Why it is checked here: a scope is read only by placement, so a name that is no string, or no
        device name at all (``"cpu-1"``), was an error on the partitioned backends alone and ignored by
        the others; it is refused where the user wrote it, on every backend."""
        from turnout.devices.names import parse

        if name is not None and not isinstance(name, str):
            raise ArgumentError(f"device: the name must be a string such as 'cpu:1' (or None), got {name!r}")
        if name == "":
            name = self._devices[-1] if self._devices else None
        elif name is not None:
            parse(name)
        self._devices.append(name)
        try:
            yield
        finally:
            self._devices.pop()

    @contextlib.contextmanager
    def colocate_with(self, op: Optional[Node]) -> Iterator[None]:
        """Ops created inside are placed on the device of ``op`` (``None`` clears an outer scope).
        Placement (``turnout.devices.place``) honours it, and reports a conflict with a device scope."""
        if op is not None and not isinstance(op, Node):
            raise ArgumentError(f"colocate_with: expected a tensor, a node or a Variable (or None), got {op!r}")
        self._colocate.append(op)
        try:
            yield
        finally:
            self._colocate.pop()

    @contextlib.contextmanager
    def _gradient_scope(self, forward: Node) -> Iterator[None]:
        """Ops created inside compute the gradient of ``forward`` (recorded in ``gradient_of``)."""
        self._gradient_of.append(forward)
        try:
            yield
        finally:
            self._gradient_of.pop()

    @contextlib.contextmanager
    def _in_context(self, ctx: Optional[ControlFlowContext]) -> Iterator[None]:
        saved = self._context
        self._context = ctx
        try:
            yield
        finally:
            self._context = saved

    @contextlib.contextmanager
    def _all_or_nothing(self) -> Iterator[None]:
        """A builder (``while_loop``, ``cond``, ``tn.gradients``) that raises leaves the graph as it
        found it: the nodes and contexts it made are removed (``_roll_back``).

        Why: a half-built loop keeps a Merge whose back edge was never bound, and validation checks the
        whole graph, so one mistake in a loop body (a dtype the body changes, a shape that does not fit)
        made every later run of the graph fail with ``[W-Merge-Bound]``, even of tensors that have
        nothing to do with the loop. In a notebook that graph is the default graph."""
        n0, c0 = len(self.nodes), len(self.contexts)
        try:
            yield
        except BaseException:
            if len(self.nodes) > n0 or len(self.contexts) > c0:
                self._roll_back(n0, c0)
            raise

    def _roll_back(self, n0: int, c0: int) -> None:
        """Remove the nodes from id ``n0`` on and the contexts from ``c0`` on, and every record of them
        the graph and the remaining contexts keep. Node ids are reused from then on, so ``version`` and
        ``edits`` both change: every cache keyed on them is stale."""
        for n in self.nodes[n0:]:
            if self._by_name.get(n.name) is n:
                del self._by_name[n.name]
            self.colocation.pop(n.id, None)
            self.gradient_of.pop(n.id, None)
        del self.nodes[n0:]
        del self.contexts[c0:]
        self.variables = {k: v for k, v in self.variables.items() if v.id < n0}
        self.variable_objects = [v for v in self.variable_objects if v.handle_node.id < n0]
        self.gradient_calls = [c for c in self.gradient_calls if c.start < n0]
        for c in self.gradient_calls:
            c.forget_nodes_from(n0)
        for ctx in self.contexts:
            ctx.forget_nodes_from(n0)
        self._version += 1
        self._edits += 1

    @contextlib.contextmanager
    def _root_scope(self) -> Iterator[None]:
        """Name what is built inside from the root, not from whatever name scope is open: plumbing
        that builders and gradients add to a loop already built is named after the loop itself."""
        saved = self._scope
        self._scope = []
        try:
            yield
        finally:
            self._scope = saved

    @contextlib.contextmanager
    def _no_capture(self) -> Iterator[None]:
        saved = self._capture_enabled
        self._capture_enabled = False
        try:
            yield
        finally:
            self._capture_enabled = saved

    @property
    def current_context(self) -> Optional[ControlFlowContext]:
        """The cond branch or loop body being built (None at the top level), into which new nodes go."""
        return self._context

    # ---- node creation ---------------------------------------------------------------------------
    def create_node(
        self,
        op: str,
        inputs: Sequence[Tensor | _PendingBackEdge] = (),
        attrs: Optional[dict[str, Any]] = None,
        name: Optional[str] = None,
        control_inputs: Sequence[Node] = (),
        specs: Optional[Sequence[TensorSpec]] = None,
    ) -> Node:
        """Create a node, inferring output specs with the shape rule of ``op``.

        Inside a ``cond`` branch or ``while_loop`` body, inputs from outside are *captured* first
        (routed through Switch, or entered as loop invariants) so every node's inputs share its frame.
        """
        primitives.get(op)
        attrs = dict(attrs or {})
        ctx = self._context
        ins: list[Tensor | _PendingBackEdge] = []
        for t in inputs:
            if isinstance(t, _PendingBackEdge):
                ins.append(t)
                continue
            if not isinstance(t, Tensor):
                raise GraphBuildError(f"input of {op} must be a tensor, got {type(t).__name__}")
            if t.graph is not self:
                raise GraphBuildError(f"input {t.name} of {op} belongs to another graph")
            if self._capture_enabled and ctx is not None:
                t = ctx.capture(t)
            elif self._capture_enabled and t.node.context is not None:
                _check_visible(t, None, op)
            ins.append(t)
        ctrl: list[Node] = list(control_inputs)
        for group in self._control_deps:
            ctrl.extend(group)
        if self._capture_enabled and ctx is not None:
            ctrl = [ctx.capture_control(c) for c in ctrl]
            # An op with no inputs, or reading only loop invariants (constant Enters, live at every
            # iteration), gets a control dependency on the pivot: otherwise it would run live at the
            # exit iteration too and, feeding a NextIteration, keep the loop going forever
            # (TensorFlow's _MaybeAddControlDependency does the same).
            if not ctrl and all(_is_loop_invariant(t) for t in ins if isinstance(t, Tensor)):
                ctrl = [ctx.pivot_node_for_sources()]
        seen: set[int] = set()
        ctrl = [c for c in ctrl if not (c.id in seen or seen.add(c.id))]  # type: ignore[func-returns-value]
        if specs is None:
            specs = infer(op, [t for t in ins if isinstance(t, Tensor)], attrs)
        node = Node(
            self,
            len(self.nodes),
            self.unique_name(name or op),
            op,
            ins,
            ctrl,
            attrs,
            specs,
            self._devices[-1] if self._devices else None,
            ctx,
            user_source_line(),
        )
        self.nodes.append(node)
        self._by_name[node.name] = node
        self._version += 1
        if self._colocate and self._colocate[-1] is not None:
            self.colocation[node.id] = (self._colocate[-1].id,)
        if self._gradient_of:
            self.gradient_of[node.id] = self._gradient_of[-1].id
        if ctx is not None:
            ctx.add_node(node)
        return node

    def _check_merge_input(self, merge: Node, t: Tensor) -> None:
        check_merge_input(merge, t)

    # ---- lookup ----------------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        """The node named ``name``, or ``NotFoundError``."""
        try:
            return self._by_name[name]
        except KeyError:
            raise NotFoundError(f"no node named {name!r} in this graph") from None

    def tensor(self, name: str) -> Tensor:
        """Look up ``'node:index'`` (index defaults to 0)."""
        node_name, _, idx = name.rpartition(":") if ":" in name else (name, "", "0")
        return self.node(node_name).outputs[int(idx)]

    def consumers(self) -> dict[int, list[tuple[Node, int]]]:
        """node id -> [(consumer, input slot)] for data edges."""
        out: dict[int, list[tuple[Node, int]]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for slot, t in enumerate(n.raw_inputs):
                if isinstance(t, Tensor):
                    out[t.node.id].append((n, slot))
        return out

    @property
    def version(self) -> int:
        """Changes whenever the graph changes: caches key on (id(graph), version)."""
        return self._version

    @property
    def edits(self) -> int:
        """Changes whenever an existing node changes (a loop's back edge closed), not when a node is
        appended. Why: graphs are append-only, so what a set of fetches computes (their ancestors, with
        their ops, inputs and attrs) is fixed once its nodes exist; a cache of compiled programs keyed
        on ``edits`` survives new nodes, such as the proxy a session adds the first time an op is
        fetched, which ``version`` would make it compile again."""
        return self._edits

    def __len__(self) -> int:
        return len(self.nodes)

    def __repr__(self) -> str:
        return f"<tn.Graph with {len(self.nodes)} nodes>"


def _is_loop_invariant(t: Tensor) -> bool:
    return t.node.op == "Enter" and bool(t.node.attrs.get("is_constant"))


def fetched_tensor(f: Any) -> Any:
    """The tensor fetched for ``f``, an object that stands for a tensor (``_as_tensor``): a Variable's
    one fetch read (``Variable._fetch_tensor``), else a tensor made for it now. One rule for the
    session that runs a fetch and the validation that checks it."""
    get = getattr(f, "_fetch_tensor", None)
    return get() if get is not None else f._as_tensor()


def ancestors(fetches: Sequence[Tensor], fed: Any = (), control: bool = True) -> dict[int, Node]:
    """The nodes ``fetches`` depend on through data and control edges (back edges included), stopping
    at fed tensors — the pruning a session does (TensorFlow's too): only these nodes run. ``fed`` is a
    collection of ``(node id, output index)`` keys. ``control=False``: through data edges only, the
    nodes a value is computed from. Returned by node id, in creation order."""
    keep: dict[int, Node] = {}
    stack = [t.node for t in fetches if (t.node.id, t.index) not in fed]
    while stack:
        n = stack.pop()
        if n.id in keep:
            continue
        keep[n.id] = n
        stack.extend(t.node for t in n.raw_inputs if isinstance(t, Tensor) and (t.node.id, t.index) not in fed)
        if control:
            stack.extend(n.control_inputs)
    return dict(sorted(keep.items()))


def sources(t: Tensor, passes: Mapping[str, bool]) -> set[Node]:
    """The nodes that made the value ``t`` carries (a resource handle, a TensorArray): walked back
    through the ops of ``passes``, which pass such a value on from their input 0, or from every data
    input where ``passes[op]`` is true (a Merge's, a sum's)."""
    seen: set[int] = set()
    out: set[Node] = set()
    todo = [t.node]
    while todo:
        n = todo.pop()
        if n.id in seen:
            continue
        seen.add(n.id)
        if n.op not in passes:
            out.add(n)
            continue
        todo.extend(x.node for x in (n.inputs if passes[n.op] else n.inputs[:1]))
    return out


def _check_visible(t: Tensor, ctx: Optional[ControlFlowContext], op: str) -> None:
    """A tensor made inside a cond branch or loop body cannot be used outside it (except via the
    builder's outputs)."""
    c = t.node.context
    while c is not None:
        if c is ctx:
            return
        c = c.outer
    if ctx is None or t.node.context is not None:
        raise GraphBuildError(
            f"tensor {t.name} was created inside {t.node.context.describe()} and cannot be used by {op} "  # type: ignore[union-attr]
            f"outside it; return it from the branch or loop body instead"
        )


class _DefaultStack(threading.local):
    def __init__(self) -> None:
        self.stack: list[Graph] = []


_default = _DefaultStack()
_global_graph = Graph()


def get_default_graph() -> Graph:
    """The graph new ops go into: the innermost ``with g.as_default():``, else a global graph."""
    return _default.stack[-1] if _default.stack else _global_graph


def reset_default_graph() -> Graph:
    """Replace the global default graph with a new, empty one (outside any ``as_default`` block)."""
    global _global_graph
    _global_graph = Graph()
    return _global_graph
