"""Control-flow contexts: the structured form that builders leave on the graph.

While a builder runs the user's branch or body function, the graph's *current context* is a
``CondContext`` or ``WhileContext``. Every op created then is recorded in the context, and every
input from outside is *captured*: routed through ``Switch(value, pred)[branch]`` for a cond branch, or
``Enter(value, is_constant=True)`` for a loop (once per tensor per nesting level), exactly as the paper's
lowering prescribes (Sec. 4). Ops with no inputs get a control dependency on the context's pivot so
they belong to the right frame and die on an untaken branch.

The contexts stay on the graph afterwards (``graph.contexts``): gradients, the structured evaluator
and the fast backend read them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from turnout import dtypes as dt
from turnout.errors import GraphBuildError
from turnout.graph import BACK_EDGE, Graph, Node, Tensor, TensorSpec

if TYPE_CHECKING:
    from turnout.control_flow.checkpoints import OnlineCheckpoints


class ControlFlowContext(ABC):
    """Base class. ``outer`` is the enclosing context (None at the root)."""

    kind = "context"

    def __init__(self, graph: Graph, outer: Optional[ControlFlowContext], outer_deps: list[Node]) -> None:
        self.graph = graph
        self.outer = outer
        self.outer_deps = list(outer_deps)
        self.nodes: list[Node] = []
        self._captured: dict[tuple[int, int], Tensor] = {}
        self._capture_outputs: set[tuple[int, int]] = set()  # the tensors in ``_captured``, by key
        self._captured_ctrl: dict[int, Node] = {}
        self.id = len(graph.contexts)
        graph.contexts.append(self)

    # -- structure ---------------------------------------------------------------------------------
    def is_within(self, other: Optional[ControlFlowContext]) -> bool:
        """True when self is ``other`` or nested inside it (everything is within the root, None)."""
        c: Optional[ControlFlowContext] = self
        while c is not None:
            if c is other:
                return True
            c = c.outer
        return other is None

    @property
    def while_context(self) -> Optional[WhileContext]:
        """The innermost enclosing loop (self included)."""
        c: Optional[ControlFlowContext] = self
        while c is not None and not isinstance(c, WhileContext):
            c = c.outer
        return c

    def add_node(self, node: Node) -> None:
        """Record ``node`` as built in this context (``Graph.create_node`` calls it for every node)."""
        self.nodes.append(node)

    def forget_nodes_from(self, n0: int) -> None:
        """Drop every record of the nodes from id ``n0`` on, which a builder that raised made and the
        graph removed (``Graph._roll_back``): a capture made for them is made again when next needed."""
        self.nodes = [n for n in self.nodes if n.id < n0]
        self._captured = {k: t for k, t in self._captured.items() if t.node.id < n0}
        self._capture_outputs = {(t.node.id, t.index) for t in self._captured.values()}
        self._captured_ctrl = {k: n for k, n in self._captured_ctrl.items() if n.id < n0}

    def describe(self) -> str:
        """Where a node of this context was created, in words, for error messages ("created inside ...")."""
        return self.kind

    # -- capture -----------------------------------------------------------------------------------
    def _outer_value(self, t: Tensor) -> Tensor:
        """``t`` made available in the outer context (recursively captured)."""
        if self.outer is not None:
            return self.outer.capture(t)
        if t.node.context is not None:
            raise GraphBuildError(
                f"tensor {t.name} was created inside {t.node.context.describe()} and cannot be used "
                "outside it; return it from the branch or loop body instead"
            )
        return t

    def capture(self, t: Tensor) -> Tensor:
        """``t`` as seen from this context: itself if made here, else captured from outside."""
        c = t.node.context
        if c is self:
            return t
        if c is not None and c.is_within(self):
            raise GraphBuildError(
                f"tensor {t.name} was created inside {c.describe()} and cannot be used outside it; "
                "return it from the branch or loop body instead"
            )
        key = (t.node.id, t.index)
        if key in self._capture_outputs:
            return t  # already this context's capture of an outside value (a Switch lives outside its branch)
        if key not in self._captured:
            self.add_capture(key, self._make_capture(self._outer_value(t)))
        return self._captured[key]

    def add_capture(self, key: tuple[int, int], t: Tensor) -> None:
        """Record ``t`` as this context's view of the outside tensor whose key is ``key``. Why its own
        method: a capture must be known as one, or capturing it once more would wrap it again (a
        Switch of a Switch, which the gradient builder would not see through)."""
        self._captured[key] = t
        self._capture_outputs.add((t.node.id, t.index))

    @abstractmethod
    def _make_capture(self, t: Tensor) -> Tensor:
        """Route an outside value (already available in ``outer``) into this context."""

    def capture_control(self, node: Node) -> Node:
        """A control input from outside becomes a captured proxy value (so it respects frames)."""
        if node.context is self:
            return node
        if node.context is not None and node.context.is_within(self):
            raise GraphBuildError(
                f"control dependency on {node.name}, created inside {node.context.describe()}, "
                "cannot be used outside it"
            )
        if node.id not in self._captured_ctrl:
            g = self.graph
            with g._in_context(self.outer), g._no_capture(), g.control_dependencies(None):
                if self.outer is not None:
                    node_o = self.outer.capture_control(node)
                else:
                    if node.context is not None:
                        raise GraphBuildError(
                            f"control dependency on {node.name}, created inside {node.context.describe()}, "
                            "cannot be used outside it"
                        )
                    node_o = node
                import numpy as np

                proxy = g.create_node(
                    "Const", (), {"value": np.asarray(True), "dtype": "bool"}, name="ctrl_proxy",
                    control_inputs=[node_o],
                ).outputs[0]
            inside = self.capture(proxy)
            # The anchor is a node of this context fed by the captured value, not the capture's own
            # node: in a cond that node is the Switch, which fires whichever branch is taken, so a
            # control edge from it would make an op of the untaken branch (a Const) live there too
            # (and a gradient's export Merge of that Const then received two live inputs). An
            # Identity of the branch's output is live exactly when the branch runs.
            with g._in_context(self), g._no_capture(), g.control_dependencies(None):
                anchor = g.create_node("Identity", [inside], name="ctrl_anchor")
            self._captured_ctrl[node.id] = anchor
        return self._captured_ctrl[node.id]

    @abstractmethod
    def pivot_node_for_sources(self) -> Node:
        """The node an op without inputs gets a control dependency on, so it joins this context."""


@dataclass
class CondInfo:
    """One ``cond``: its predicate, its two branch contexts and the Merges that join the outputs."""

    pred: Tensor
    pivot_switch: Node
    branches: dict[int, CondContext] = field(default_factory=dict)
    branch_outputs: dict[int, list[Tensor]] = field(default_factory=dict)
    merges: list[Node] = field(default_factory=list)
    name: str = "cond"


class CondContext(ControlFlowContext):
    """One branch (``branch`` 1 = true, 0 = false) of a cond."""

    kind = "cond"

    def __init__(self, graph: Graph, outer: Optional[ControlFlowContext], info: CondInfo, branch: int,
                 outer_deps: list[Node]) -> None:
        super().__init__(graph, outer, outer_deps)
        self.info = info
        self.branch = branch
        self.pivot: Optional[Node] = None
        info.branches[branch] = self

    def describe(self) -> str:
        """``the true branch of cond "name"``, for error messages."""
        return f'the {"true" if self.branch else "false"} branch of cond "{self.info.name}"'

    def _make_capture(self, t: Tensor) -> Tensor:
        """[lowering: cond] an outside value read by a branch is routed through Switch(value, pred)."""
        g = self.graph
        ctrl = list(self.outer_deps) + invariant_pivot(self.outer, [t, self.info.pred])
        with g._in_context(self.outer), g._no_capture(), g.control_dependencies(None):
            sw = g.create_node("Switch", [t, self.info.pred], name="switch", control_inputs=ctrl)
        return sw.outputs[self.branch]

    def pivot_node_for_sources(self) -> Node:
        """The node an op with no inputs (or only loop invariants) in this branch waits on, so that it runs only when
        the branch is taken: the branch's pivot."""
        assert self.pivot is not None
        return self.pivot


@dataclass
class LoopVar:
    """The primitives of one loop variable: Enter -> Merge -> Switch -> (Identity body input, Exit),
    with NextIteration closing the Merge's back edge."""

    enter: Node
    merge: Node
    switch: Optional[Node] = None
    body_input: Optional[Node] = None
    next_iteration: Optional[Node] = None
    exit: Optional[Node] = None


class WhileContext(ControlFlowContext):
    """One ``while_loop``: a frame. Loop variable 0 is always the iteration counter the builder adds
    (gradients use it as the trip count; ``maximum_iterations`` tests it)."""

    kind = "while"

    def __init__(self, graph: Graph, outer: Optional[ControlFlowContext], frame_name: str,
                 parallel_iterations: int, back_prop: bool, swap_memory: bool,
                 maximum_iterations: Optional[Tensor], outer_deps: list[Node], name: str,
                 memory_budget: Optional[int] = None) -> None:
        super().__init__(graph, outer, outer_deps)
        self.frame_name = frame_name
        self.parallel_iterations = parallel_iterations
        self.back_prop = back_prop
        self.swap_memory = swap_memory
        self.memory_budget = memory_budget  # bytes its saved values may hold on the device (None: no budget)
        self.maximum_iterations = maximum_iterations
        self.name = name
        self.loop_vars: list[LoopVar] = []
        self.invariants: dict[tuple[int, int], Node] = {}  # outer tensor -> Enter(is_constant)
        self.pred: Optional[Tensor] = None  # the predicate value before LoopCond
        self.pivot: Optional[Node] = None  # the LoopCond node
        self.pivot_for_pred: Optional[Node] = None
        self.pivot_for_body: Optional[Node] = None
        self.mode = "pred"
        self.structure: Any = None  # the user's loop_vars structure (without the counter)
        self.pred_nodes: list[Node] = []
        # the user's body function, kept so that a gradient under a memory budget can call it again to
        # recompute loop states (``gradients.recompute``); None for a loop imported from a GraphDef
        self.body_fn: Optional[Callable[..., Any]] = None
        self.num_state = 0  # the user's loop variables (after the counter); the rest are the builder's
        # the slots of online checkpoints that the forward loop keeps for a gradient that recomputes,
        # added by the first such gradient (``control_flow.checkpoints.slots_of``); None: it keeps none
        self.checkpoints: Optional[OnlineCheckpoints] = None
        # the indices, among the user's loop variables, of the TensorArrays the body only writes
        # (``checkpoints.accumulators``, recorded once the body is built): checkpoints leave them out
        self.accumulators: frozenset[int] = frozenset()

    def describe(self) -> str:
        """``the body of while_loop "name" (frame ...)``, for error messages."""
        return f'the body of while_loop "{self.name}" (frame {self.frame_name})'

    def add_node(self, node: Node) -> None:
        """``ControlFlowContext.add_node``; while the predicate is being built, also record ``node`` in
        ``pred_nodes``."""
        super().add_node(node)
        if self.mode == "pred":
            self.pred_nodes.append(node)

    def forget_nodes_from(self, n0: int) -> None:
        """``ControlFlowContext.forget_nodes_from``, and the loop's own records: its invariants and
        predicate nodes (a loop whose body caught a nested builder's error goes on being built)."""
        super().forget_nodes_from(n0)
        self.invariants = {k: e for k, e in self.invariants.items() if e.id < n0}
        self.pred_nodes = [n for n in self.pred_nodes if n.id < n0]
        # loop variables a gradient added to a loop already built (``add_loop_var``): its sync
        # variable, the slots of online checkpoints
        self.loop_vars = [lv for lv in self.loop_vars if lv.enter.id < n0]
        if self.checkpoints is not None and self.checkpoints.count.enter.id >= n0:
            self.checkpoints = None

    def _make_capture(self, t: Tensor) -> Tensor:
        """[lowering: while_loop] an outside value enters as a loop invariant: Enter(is_constant=True).
        Where the value is an invariant of an enclosing loop (live at each of its iterations, the exit
        iteration included), the Enter waits on that loop's pivot, as the loop variables' Enters do:
        otherwise it would enter, live, in an outer iteration whose body never ran."""
        g = self.graph
        with g._in_context(self), g._no_capture(), g.control_dependencies(None):
            e = g.create_node(
                "Enter", [t],
                {"frame_name": self.frame_name, "is_constant": True, "parallel_iterations": self.parallel_iterations},
                name="enter_const", control_inputs=list(self.outer_deps) or invariant_pivot(self.outer, [t]),
            )
        self.invariants[(t.node.id, t.index)] = e
        return e.outputs[0]

    def pivot_node_for_sources(self) -> Node:
        """The node an op with no inputs (or only loop invariants) waits on, so that it runs once per iteration and
        never at the exit iteration: the counter's Merge while the predicate is built, its body input (after the
        Switch) while the body is."""
        p = self.pivot_for_pred if self.mode == "pred" else self.pivot_for_body
        assert p is not None
        return p

    @property
    def counter(self) -> LoopVar:
        """Loop variable 0: the iteration counter the builder adds (the trip count of the loop's gradient)."""
        return self.loop_vars[0]

    def add_loop_var(self, init: Tensor, prefix: str, **enter_attrs: Any) -> LoopVar:
        """One more loop variable, added once the loop's pivot exists (by a gradient's sync variable,
        by the slots of online checkpoints), lowered as the builder lowers each (the paper, Sec. 4.2):
        ``Enter -> Merge(enter, <back edge>) -> Switch(merge, pivot) -> (Identity, Exit)``, named
        ``prefix/...`` from the root. Its back edge stays open until ``close_loop_var``. Registered in
        ``loop_vars``, and its header in ``pred_nodes`` (where the builder records a loop variable's,
        made before the body), so that structured passes see an ordinary loop variable.

        Why no control dependencies but the loop's own (``outer_deps``, on its Enters): a
        ``tn.control_dependencies`` open where the plumbing is added must not reach into the frame."""
        assert self.pivot is not None
        g = self.graph
        attrs = {"frame_name": self.frame_name, "is_constant": False,
                 "parallel_iterations": self.parallel_iterations, **enter_attrs}
        with g._in_context(self), g._no_capture(), g.control_dependencies(None), g._root_scope():
            e = g.create_node("Enter", [init], attrs, name=f"{prefix}/enter", control_inputs=self.outer_deps)
            m = g.create_node("Merge", [e.outputs[0], BACK_EDGE], name=f"{prefix}/merge",
                              specs=[e.outputs[0].spec, TensorSpec(dt.int32, ())])
            sw = g.create_node("Switch", [m.outputs[0], self.pivot.outputs[0]], name=f"{prefix}/switch")
            bi = g.create_node("Identity", [sw.outputs[1]], name=f"{prefix}/body_in")
        with g._in_context(self.outer), g._no_capture(), g.control_dependencies(None), g._root_scope():
            ex = g.create_node("Exit", [sw.outputs[0]], name=f"{prefix}/exit")
        lv = LoopVar(enter=e, merge=m, switch=sw, body_input=bi, exit=ex)
        self.loop_vars.append(lv)
        self.pred_nodes.extend([e, m, sw, bi])
        return lv

    def close_loop_var(self, lv: LoopVar, next_value: Tensor, name: str) -> None:
        """Close ``lv``'s back edge: ``next_value``, computed in the body, through a NextIteration
        named ``name`` from the root."""
        g = self.graph
        with g._in_context(self), g._no_capture(), g.control_dependencies(None), g._root_scope():
            lv.next_iteration = g.create_node("NextIteration", [next_value], name=name)
        lv.merge.close_back_edge(lv.next_iteration.outputs[0])


def invariant_pivot(ctx: Optional[ControlFlowContext], inputs: list[Tensor]) -> list[Node]:
    """``[pivot]`` when a Switch built in loop body ``ctx`` reads only loop invariants, else ``[]``.

    Why: a loop invariant (a constant Enter) is live at every iteration, the exit iteration included;
    a cond whose predicate and captured value are both invariants would then run its branch there too
    and, feeding a NextIteration, keep the loop going forever. Ordinary ops get this control
    dependency from ``Graph.create_node``; the cond builder makes its Switches with capture turned off,
    so it asks here.
    """
    if isinstance(ctx, WhileContext) and all(t.node.op == "Enter" and t.node.attrs.get("is_constant")
                                             for t in inputs):
        return [ctx.pivot_node_for_sources()]
    return []
