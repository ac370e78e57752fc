"""Reverse-mode differentiation, graph to graph (the paper, Sec. 5).

``gradients(ys, xs)`` adds the backward graph to the forward graph and returns the gradient tensors.
It walks one *region* at a time (the root, a cond branch, a loop body) in reverse topological order.
Ordinary ops use their rule from ``GRAD_RULES``; a builder-made ``cond`` or ``while_loop`` nested in
the region is differentiated as a whole (``control_flow.py``): a cond's gradient is a cond on the same
predicate (Merge -> Switch, Switch -> Merge), a loop's gradient is a backward ``while_loop`` running
the forward trip count. Both are built with the builders, so the gradient graph is builder-made
(structured) like the forward graph.

The one subtle thing is *where a forward value lives*. Backward code for region F runs in the
backward context B(F) (a backward cond branch, a backward loop body); a forward value ``t`` made in an
enclosing forward region is made visible there by ``Backward.value``: values of loop bodies are pushed
on a stack in the forward loop and popped in the backward loop; values of cond branches are exported
from the forward cond through one more Merge (so the backward cond reads them through its own Switch).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from turnout import dtypes as dt
from turnout import math_ops, ops
from turnout import shapes as sh
from turnout.control_flow.contexts import CondContext, CondInfo, ControlFlowContext, LoopVar, WhileContext
from turnout.errors import GradientError, describe_node
from turnout.gradients import budgets, stacks
from turnout.gradients.control_flow import cond_grad, loop_grad
from turnout.gradients.grads import Frame, Grads, Key, key
from turnout.gradients.rules import (
    GRAD_RULES,
    NON_DIFFERENTIABLE,
    STRUCTURED,
    UNSUPPORTED,
    is_differentiable_dtype,
)
from turnout.graph import Graph, Node, Tensor, TensorSpec
from turnout.shape_rules import reduced_shape

Ctx = Optional[ControlFlowContext]


@dataclass
class Unit:
    """A step of reverse-mode in a region: an ordinary node, a whole cond, or a whole loop."""

    kind: str  # "node", "cond", "loop"
    node: Optional[Node] = None
    info: Optional[CondInfo] = None
    loop: Optional[WhileContext] = None


@dataclass
class _LoopSync:
    var: LoopVar
    trip_count: Tensor  # the forward trip count, gated on the sync Exit (in the loop's outer context)
    pushes: list[Node] = field(default_factory=list)


class Backward:
    """State of one ``gradients`` call: which nodes lie on a gradient path, the frames being
    differentiated, and caches so each forward value is pushed, exported and popped only once."""

    def __init__(self, g: Graph, root: Ctx, xs: Sequence[Tensor], ys: Sequence[Tensor],
                 stops: Sequence[Tensor] = ()) -> None:
        self.g = g
        self.root = root
        self.frames: list[Frame] = []
        self.x_keys = {key(x) for x in xs}
        #: ``stop_gradients``: tensors no gradient passes through (TensorFlow's constants for this call)
        self.stop_keys = {key(t) for t in stops}
        self._capture_switch: dict[int, CondContext] = {}
        self._skip: set[int] = set()
        for c in g.contexts:
            if isinstance(c, CondContext):
                for t in c._captured.values():
                    self._capture_switch[t.node.id] = c
                self._skip.add(c.info.pivot_switch.id)
        self._skip |= set(self._capture_switch)
        self.reachable = self._forward_reachable(xs)
        self.on_path = self.reachable & self._backward_reachable(ys)
        #: the loops' shares of the gradient's ``memory_budget`` (``share``; the others keep their own)
        self.budgets: dict[int, budgets.LoopBudget] = {}
        self._values: dict[tuple[int, Key], Tensor] = {}
        self._stacks: dict[Key, Node] = {}
        self._exports: dict[Key, Tensor] = {}
        self._fwd_index: dict[int, Tensor] = {}
        self._sync: dict[int, _LoopSync] = {}
        self._aux: dict[tuple[str, Key], Tensor] = {}
        self._grad_stacks: dict[int, Node] = {}  # StackNew id -> the stack of its values' gradients
        # backward loop id -> its gradient pushes (or tokens of nested loops' pushes), with their stacks
        self._grad_stack_pushes: dict[int, list[tuple[Node, int]]] = {}
        self._grad_stack_gate: dict[int, Tensor] = {}  # StackNew id -> fires after all gradient pushes

    # ---- which nodes carry gradients --------------------------------------------------------------
    def _forward_reachable(self, xs: Sequence[Tensor]) -> set[int]:
        cons = self.g.consumers()
        pops: dict[int, list[Node]] = {}  # StackNew id -> its pops
        for n in self.g.nodes:
            if n.op == "StackPop":
                pops.setdefault(_stack_root(n.inputs[0]).id, []).append(n)
        seen: set[int] = set()
        work: list[Node] = []
        for x in xs:
            for n, slot in cons[x.node.id]:
                if key(n.raw_inputs[slot]) == key(x):  # type: ignore[arg-type]
                    work.append(n)
        while work:
            n = work.pop()
            if n.id in seen:
                continue
            seen.add(n.id)
            if n.op == "StackPush":  # a value hidden behind a stack: its pops depend on xs too (to a fixpoint,
                work.extend(pops.get(_stack_root(n.inputs[0]).id, []))  # as pops may be pushed again)
                continue
            if n.op in NON_DIFFERENTIABLE:
                continue
            for c, slot in cons[n.id]:
                t = c.raw_inputs[slot]
                if isinstance(t, Tensor) and is_differentiable_dtype(t.dtype) and key(t) not in self.stop_keys:
                    work.append(c)
        return seen

    def _backward_reachable(self, ys: Sequence[Tensor]) -> set[int]:
        pushed: dict[int, list[Tensor]] = {}  # StackNew id -> the values pushed on it
        for n in self.g.nodes:
            if n.op == "StackPush":
                pushed.setdefault(_stack_root(n.inputs[0]).id, []).append(n.inputs[2])
        seen: set[int] = set()
        work = [y.node for y in ys]
        while work:
            n = work.pop()
            if n.id in seen:
                continue
            seen.add(n.id)
            if n.op == "StackNew":  # a pop stands for the pushed values (second order)
                work.extend(t.node for t in pushed.get(n.id, []) if is_differentiable_dtype(t.dtype))
            if n.op in NON_DIFFERENTIABLE:
                continue
            for t in n.raw_inputs:
                if isinstance(t, Tensor) and is_differentiable_dtype(t.dtype) and key(t) not in self.stop_keys:
                    work.append(t.node)
        return seen

    def wants(self, t: Tensor) -> bool:
        """Is a gradient for ``t`` of any use (it is a requested x, or lies downstream of one)?"""
        return is_differentiable_dtype(t.dtype) and (key(t) in self.x_keys or t.node.id in self.reachable)

    # ---- regions ------------------------------------------------------------------------------------
    def units(self, region: Ctx) -> list[Unit]:
        """The region's steps in topological order: its own ops, and each cond / loop nested directly
        in it as one step (placed at its first Merge / Exit)."""
        nodes = region.nodes if region is not None else [n for n in self.g.nodes if n.context is None]
        cond_of: dict[int, CondInfo] = {}
        loop_of: dict[int, WhileContext] = {}
        for c in self.g.contexts:
            if c.outer is not region:
                continue
            if isinstance(c, CondContext):
                for m in c.info.merges:
                    cond_of[m.id] = c.info
            elif isinstance(c, WhileContext):
                for lv in c.loop_vars:
                    if lv.exit is not None:
                        loop_of[lv.exit.id] = c
        machinery: set[int] = set()
        if isinstance(region, WhileContext):
            for lv in region.loop_vars:
                machinery |= {n.id for n in (lv.enter, lv.merge, lv.switch, lv.body_input, lv.next_iteration)
                              if n is not None}
            machinery |= {e.id for e in region.invariants.values()}
            if region.pivot is not None:
                machinery.add(region.pivot.id)
        out: list[Unit] = []
        done: set[int] = set()
        for n in nodes:
            if n.id in cond_of:
                info = cond_of[n.id]
                if id(info) not in done:
                    done.add(id(info))
                    out.append(Unit("cond", info=info))
            elif n.id in loop_of:
                w = loop_of[n.id]
                if id(w) not in done:
                    done.add(id(w))
                    out.append(Unit("loop", loop=w))
            elif n.id not in self._skip and n.id not in machinery:
                out.append(Unit("node", node=n))
        return out

    def backprop_region(self, region: Ctx, grads: Grads) -> None:
        """Reverse-mode over one region: ``grads`` holds the gradients of the region's outputs on entry
        and receives those of everything the region reads."""
        for u in reversed(self.units(region)):
            if u.kind == "node":
                n = u.node
                assert n is not None
                if n.id not in self.on_path:
                    continue
                dys = [self._total(grads, o) for o in n.outputs]
                if all(d is None for d in dys):
                    continue
                for t, d in zip(n.inputs, self._node_grad(n, dys), strict=True):
                    if d is not None and self.wants(t):
                        grads.add(t, d)
            elif u.kind == "cond":
                info = u.info
                assert info is not None
                dys = [self._total(grads, m.outputs[0]) if m.id in self.on_path else None for m in info.merges]
                if any(d is not None for d in dys):
                    for t, d in cond_grad(self, info, dys):
                        grads.add(t, d)
            else:
                w = u.loop
                assert w is not None
                dys = [self._total(grads, lv.exit.outputs[0]) if lv.exit is not None and lv.exit.id in self.on_path
                       else None for lv in w.loop_vars]
                if any(d is not None for d in dys[1:]) or self.has_stack_gradients(w):
                    for t, d in loop_grad(self, w, dys):
                        grads.add(t, d)

    def _total(self, grads: Grads, t: Tensor) -> Optional[Tensor]:
        """The gradient that flows on from ``t`` to what computed it: none from a stopped tensor (its
        own gradient is still there for ``gradients`` to return where it is one of ``xs``)."""
        if not is_differentiable_dtype(t.dtype) or key(t) in self.stop_keys:
            return None
        return grads.total(t)

    def _node_grad(self, n: Node, dys: list[Optional[Tensor]]) -> list[Optional[Tensor]]:
        if n.op in UNSUPPORTED:
            raise GradientError(f"{describe_node(n)}: {UNSUPPORTED[n.op]}")
        if n.op in NON_DIFFERENTIABLE:
            return [None] * len(n.inputs)
        if n.op in STRUCTURED:
            raise GradientError(
                f"{describe_node(n)} is hand-built control flow (not made by tn.cond / tn.while_loop); "
                "gradients are built for builder-made conds and loops only"
            )
        rule = GRAD_RULES.get(n.op)
        if rule is None:
            raise GradientError(f"{describe_node(n)}: no gradient rule for primitive {n.op}")
        with self.g._gradient_scope(n):  # placement puts backward ops with their forward op
            out = rule(self, n, dys)
        if len(out) != len(n.inputs):
            raise GradientError(f"gradient rule of {n.op} returned {len(out)} gradients for {len(n.inputs)} inputs")
        return out

    # ---- forward values, as seen from the backward code ------------------------------------------
    def canonical(self, t: Tensor) -> Tensor:
        """The same value with builder plumbing removed: a captured Switch output of a live branch and
        a loop invariant (Enter is_constant) equal their input."""
        return self.aliases(t)[-1]

    def aliases(self, t: Tensor) -> list[Tensor]:
        """``t``, and each tensor it captures in turn (a cond's Switch, a loop's constant Enter), down
        to ``canonical(t)``: the names one value has in the nested contexts it was captured into."""
        out = [t]
        while True:
            n = t.node
            if (n.op == "Switch" and n.id in self._capture_switch) or (n.op == "Enter" and n.attrs.get("is_constant")):
                t = n.inputs[0]
                out.append(t)
            else:
                return out

    def _frame_of(self, region: Ctx) -> int:
        """Index of the frame differentiating ``region``; -1 when the region is outside every frame
        (the region gradients() was called in, or one enclosing it): its values are usable as they are."""
        if region is None or (self.root is not None and self.root.is_within(region)):
            return -1
        for i in range(len(self.frames) - 1, -1, -1):
            if self.frames[i].fwd is region:
                return i
        raise GradientError(f"internal: a forward value of {region.describe()} is needed outside its gradient")

    def value(self, t: Tensor) -> Tensor:
        """Forward tensor ``t`` made visible to the backward code being built ([E-Stack-Pop])."""
        t = self.canonical(t)
        i = self._frame_of(t.node.context)
        if i < 0:
            return t
        fr = self.frames[i]
        ck = (id(fr.bwd), key(t))
        if ck not in self._values:
            if fr.kind == "loop":
                self._values[ck] = self._pop(t, i)
            else:
                assert fr.info is not None
                self._values[ck] = self.value(self._export(t, fr.info, fr.branch))
        return self._values[ck]

    def _export(self, t: Tensor, info: CondInfo, branch: int) -> Tensor:
        """One more output of a forward cond: ``Merge`` of ``t`` (branch ``branch``) and a filler from
        the other branch, so the backward cond reads ``t`` through its own Switch."""
        if key(t) in self._exports:
            return self._exports[key(t)]
        g = self.g
        other = info.branches[1 - branch]
        assert other.pivot is not None
        with g._in_context(other), g._no_capture(), g.control_dependencies(None), g._root_scope():
            filler = _filler(g, t, other.pivot)
        pair = [filler, t] if branch == 1 else [t, filler]
        with g._in_context(info.branches[branch].outer), g._no_capture(), g.control_dependencies(None), \
                g._root_scope():
            m = g.create_node("Merge", pair, name=f"{info.name}/gradient_export",
                              specs=[t.spec, TensorSpec(dt.int32, ())])
        info.merges.append(m)
        info.branch_outputs[0].append(pair[0])
        info.branch_outputs[1].append(pair[1])
        self._exports[key(t)] = m.outputs[0]
        return m.outputs[0]

    def share(self, memory_budget: Optional[int]) -> None:
        """Divide ``memory_budget`` (None: none) among the loops this gradient reverses, once its path
        is known (``gradients.budgets``)."""
        if memory_budget is not None:
            self.budgets = budgets.loop_budgets(budgets.reversed_loops(self.g, self.root, self.on_path),
                                                memory_budget)

    def budget_of(self, w: WhileContext) -> budgets.LoopBudget:
        """The budget this gradient reverses loop ``w`` under: its share of the gradient's, or its own."""
        return self.budgets.get(id(w)) or budgets.own(w)

    def inner_budget(self, w: WhileContext) -> Optional[int]:
        """The shares of the loops inside ``w`` (None: no gradient budget): what the gradient of one
        step of ``w`` may save, where ``w`` recomputes and each step is differentiated on its own."""
        return budgets.inside(self.budgets, w) if id(w) in self.budgets else None

    def _pop(self, t: Tensor, i: int) -> Tensor:
        fr = self.frames[i]
        w = fr.fwd
        assert isinstance(w, WhileContext)
        g = self.g
        stack = self._stacks.get(key(t))
        if stack is None:
            stack = stacks.new_stack(g, t, w, self.budget_of(w))
            p = stacks.push(g, stack.outputs[0], self._forward_index(w), t, w)
            self._stacks[key(t)] = stack
            self._sync_for(w).pushes.append(p)
        with g._in_context(fr.bwd):
            return stacks.pop(g, stack, self._backward_index(i))

    def _enclosing_loops(self, w: WhileContext) -> list[WhileContext]:
        out: list[WhileContext] = []
        c: Ctx = w
        while c is not None:
            if isinstance(c, WhileContext):
                out.append(c)
            c = c.outer
        return out[::-1]

    def _forward_index(self, w: WhileContext) -> Tensor:
        """[counters of all enclosing forward loops, outermost first], inside ``w``."""
        if w.id not in self._fwd_index:
            g = self.g
            with g._in_context(w), g.control_dependencies(None), g._root_scope():
                cs = [lp.counter.body_input.outputs[0] for lp in self._enclosing_loops(w)]  # type: ignore[union-attr]
                self._fwd_index[w.id] = ops.stack(cs, name=f"{w.name}/gradient_stack_index")
        return self._fwd_index[w.id]

    def _backward_index(self, i: int) -> Tensor:
        """The same index, in the backward loop of frame ``i``: each differentiated loop contributes the
        forward iteration its backward iteration undoes; loops enclosing gradients() contribute their
        own counter."""
        fr = self.frames[i]
        if fr.index is None:
            w = fr.fwd
            assert isinstance(w, WhileContext)
            parts = []
            for lp in self._enclosing_loops(w):
                j = next((jj for jj, f in enumerate(self.frames) if f.fwd is lp), None)
                parts.append(self._k(j) if j is not None else lp.counter.body_input.outputs[0])  # type: ignore[union-attr]
            g = self.g
            with g._in_context(fr.bwd), g.control_dependencies(None), g.name_scope("gradients"):
                fr.index = ops.stack(parts, name="stack_index")
        return fr.index

    def _k(self, i: int) -> Tensor:
        """k = N - 1 - j: the forward iteration undone by backward iteration j of frame ``i``. N is the
        trip count gated on the forward loop's sync Exit, so pops come after all pushes."""
        fr = self.frames[i]
        if fr.k is None:
            w = fr.fwd
            assert isinstance(w, WhileContext) and isinstance(fr.bwd, WhileContext)
            n = self.trip_count(w)
            g = self.g
            with g._in_context(fr.bwd), g.control_dependencies(None), g.name_scope("gradients"):
                j = fr.bwd.counter.body_input.outputs[0]  # type: ignore[union-attr]
                fr.k = ops.subtract(ops.subtract(n, 1), j, name="forward_iteration")
        return fr.k

    def _sync_for(self, w: WhileContext) -> _LoopSync:
        if w.id not in self._sync:
            g = self.g
            lv = stacks.add_sync_var(g, w)
            assert lv.exit is not None and w.counter.exit is not None
            with g._in_context(w.outer), g._no_capture(), g.control_dependencies(None), g._root_scope():
                n = g.create_node("Identity", [w.counter.exit.outputs[0]], control_inputs=[lv.exit],
                                  name=f"{w.name}/gradient_sync/trip_count").outputs[0]
            self._sync[w.id] = _LoopSync(lv, n)
        return self._sync[w.id]

    def trip_count(self, w: WhileContext) -> Tensor:
        """The forward trip count of ``w`` (its counter's Exit), gated on the sync Exit, as seen here."""
        return self.value(self._sync_for(w).trip_count)

    def close_sync(self, w: WhileContext) -> None:
        """After the backward loop of ``w`` is built: every push of ``w`` is known; close the sync var."""
        s = self._sync.get(w.id)
        if s is not None and s.var.next_iteration is None:
            stacks.close_sync_var(self.g, w, s.var, s.pushes)

    def _forward_aux(self, kind: str, t: Tensor) -> Tensor:
        """Shape(t) or TensorArraySize(t), computed next to ``t`` in the forward graph, then made
        visible here: a small int vector is saved instead of ``t`` itself."""
        t = self.canonical(t)
        k = (kind, key(t))
        if k not in self._aux:
            g = self.g
            with g._in_context(t.node.context), g.control_dependencies(None), g._root_scope():
                op = "Shape" if kind == "shape" else "TensorArraySize"
                self._aux[k] = g.create_node(op, [t], name=f"{t.node.name}/gradient_{kind}").outputs[0]
        return self.value(self._aux[k])

    # ---- second order: gradients of values popped off a stack ---------------------------------------
    def push_stack_gradient(self, handle: Tensor, index: Tensor, dy: Tensor) -> None:
        """Push ``dy``, the gradient of a value popped from stack ``handle`` under ``index``, on that
        stack's gradient stack, in the current backward loop."""
        root = _stack_root(handle)
        if root.attrs.get("gradient_stack"):
            raise GradientError(
                f"{describe_node(root)}: third and higher-order gradients through while loops are not "
                "supported (this stack holds second-order gradients); second order is")
        ctx = self.g.current_context
        w = ctx.while_context if ctx is not None else None
        if w is None:
            raise GradientError(f"{describe_node(root)}: a stack popped outside a loop cannot be differentiated")
        gs = self._grad_stacks.get(root.id)
        if gs is None:
            a = root.attrs
            with self.g._in_context(None), self.g.control_dependencies(None), self.g._no_capture(), \
                    self.g._root_scope():
                gs = self.g.create_node("StackNew", (), {**a, "forward_tensor": f"{a['forward_tensor']}/gradient",
                                                         "gradient_stack": True},
                                        name=f"gradients/gradient_stack/{root.name}")
            self._grad_stacks[root.id] = gs
        with self.g.control_dependencies(None):
            p = self.g.create_node("StackPush", [gs.outputs[0], index, dy], name="gradients/push_gradient")
        self._grad_stack_pushes.setdefault(w.id, []).append((p, root.id))

    def close_stack_gradients(self, bwd: WhileContext, fwd: WhileContext) -> None:
        """After backward loop ``bwd`` (of forward loop ``fwd``) is built: its gradient pushes are
        known; give them a sync variable, whose Exit gates every pop of those gradient stacks.

        Where the gate stands: the pops come in the backward loop of the forward loop that pushed the
        stack's values (``_pusher``), built in the backward scope of that loop's scope; ``bwd``'s
        Exits stand in the backward scope of ``fwd``'s. Where ``fwd``'s scope encloses the pusher's
        (the two loops side by side in one loop body, as when a loop's body takes the gradient of a
        loop inside it, or at the root), the gate is the Exit here, which that backward loop, built
        later in the same scope, reads. Otherwise (the pops are in a backward loop nested deeper than
        the pusher, as in a first-order gradient of nested loops) it is one more "push" of the
        enclosing backward loop's iteration, and is set when that loop closes, up to the root."""
        pushes = self._grad_stack_pushes.pop(bwd.id, [])
        if not pushes:
            return
        s = self._sync_for(bwd)
        s.pushes.extend(p for p, _ in pushes)
        self.close_sync(bwd)
        outer = bwd.outer.while_context if bwd.outer is not None else None
        later = []
        for _, sid in pushes:
            if outer is None or _encloses(fwd.outer, self._pusher(sid).outer):
                self._grad_stack_gate[sid] = s.trip_count
            else:
                later.append(sid)
        if later:
            assert outer is not None
            self._grad_stack_pushes.setdefault(outer.id, []).extend((s.trip_count.node, sid) for sid in later)

    def _pusher(self, sid: int) -> WhileContext:
        """The forward loop whose body pushes the values of stack ``sid``."""
        for n in self.g.nodes:
            if n.op == "StackPush" and _stack_root(n.inputs[0]).id == sid and n.context is not None:
                w = n.context.while_context
                if w is not None:
                    return w
        raise AssertionError(f"stack {sid} has no push inside a loop")

    def _check_no_pending(self, w: WhileContext) -> None:
        """Before the backward loop of ``w`` reads the gradients of its popped values: none may still
        wait on a backward loop not closed yet (its gate would come after this loop is built, and the
        gradient would leave those values' contribution out). Raises ``GradientError`` naming the loop
        rather than build such a gradient."""
        mine = {_stack_root(n.inputs[0]).id for n in w.nodes if n.op == "StackPush"}
        pending = {sid for pushes in self._grad_stack_pushes.values() for _, sid in pushes} & mine
        pending -= set(self._grad_stack_gate)
        if pending:
            raise GradientError(
                f'gradients: the second-order gradient through while_loop "{w.name}" would read gradients of its '
                "saved values that a loop in another scope (a cond branch around the first-order gradient) "
                "computes only later; this arrangement is not supported: take the first-order gradient in the "
                "scope of the loop")

    def has_stack_gradients(self, w: WhileContext) -> bool:
        """Do values of ``w`` or of loops nested in it have gradients waiting on gradient stacks?
        (Raises where some of ``w``'s would be set only after its backward loop: ``_check_no_pending``.)"""
        self._check_no_pending(w)
        return any(n.op == "StackPush" and n.context is not None and n.context.is_within(w)
                   and _stack_root(n.inputs[0]).id in self._grad_stack_gate for n in self.g.nodes)

    def stack_gradients(self, w: WhileContext) -> list[tuple[Tensor, Node, Tensor]]:
        """(forward value, gradient stack, gate) for each value of loop ``w`` whose pops got gradients."""
        self._check_no_pending(w)
        out = []
        for n in w.nodes:
            if n.op == "StackPush":
                sid = _stack_root(n.inputs[0]).id
                if sid in self._grad_stack_gate and self.wants(n.inputs[2]):
                    out.append((n.inputs[2], self._grad_stacks[sid], self._grad_stack_gate[sid]))
        return out

    def pop_stack_gradient(self, fr_index: int, gs: Node, gate: Tensor, t: Tensor) -> Tensor:
        """In the backward loop of frame ``fr_index``: the gradient pushed for forward value ``t`` of
        this iteration, popped after every gradient push is done (a control input on ``gate``)."""
        idx = self._backward_index(fr_index)
        a = gs.attrs
        attrs: dict[str, Any] = {"dtype": a["elem_dtype"], "shape": a["elem_shape"], "stack": gs.name,
                                 "forward_tensor": a["forward_tensor"]}
        if a.get("ta_elem_dtype"):
            attrs["elem_dtype"] = a["ta_elem_dtype"]
            attrs["elem_shape"] = a["ta_elem_shape"]
        with self.g.control_dependencies(None):  # the gate enters the frame as a captured control input
            return self.g.create_node("StackPop", [gs.outputs[0], idx], attrs, control_inputs=[gate.node],
                                      name="gradients/pop_gradient").outputs[0]

    # ---- helpers for rules --------------------------------------------------------------------------
    def shape_of(self, t: Tensor) -> Tensor:
        """The shape of forward tensor ``t`` in the current backward context: a constant where it is
        static, marked ``gradient_shape`` (the size of a value that exists, which a compiler may
        treat as the ``Shape`` it stands for: ``fast.conds``), else saved from the forward pass."""
        if sh.is_fully_defined(t.shape):
            return self.g.create_node("Const", (), {"value": np.asarray(t.shape, np.int32), "dtype": "int32",
                                                   "gradient_shape": True}, name="Const").outputs[0]
        return self._forward_aux("shape", t)

    def size_of(self, ta: Tensor) -> Tensor:
        """The size of TensorArray ``ta``, from where it was made when that is visible (a static
        unstacked shape, or the size given to TensorArrayNew), so nothing need be saved for it. An
        array of dynamic size grows with its writes, so the size it was made with is not its size:
        ``ta``'s own is saved from the forward pass (a read at slot 3 of an array made with size 1
        and grown to 4 had a gradient array of size 1, and its gradient failed "index 3 out of
        range")."""
        t = self.canonical(ta)
        while t.node.op in ("TensorArrayWrite", "TensorArrayAdd", "TensorArrayAccumulate"):
            t = self.canonical(t.node.inputs[0])
        if t.node.op == "TensorArrayUnstack":
            x = t.node.inputs[0]
            if x.shape is not None and x.shape[0] is not None:
                return ops.constant(np.asarray(x.shape[0], np.int32), dtype=dt.int32)
            return ops.getitem(self.shape_of(x), 0)
        if t.node.op == "TensorArrayNew" and not t.node.attrs.get("dynamic_size"):
            return self.value(t.node.inputs[0])
        return self._forward_aux("size", self.canonical(ta))

    def zeros_like(self, t: Tensor) -> Tensor:
        """Zeros of ``t``'s type, built in the current backward context."""
        if t.dtype == dt.tensor_array:
            es = t.spec.elem_shape
            return self.g.create_node(
                "TensorArrayNew", [self.size_of(t)],
                {"dtype": t.spec.elem_dtype.name, "element_shape": None if es is None else list(es)},  # type: ignore[union-attr]
                name="gradients/zeros_ta").outputs[0]
        if t.dtype == dt.resource:
            h = self.canonical(t).node
            if h.op != "VarHandle":
                raise GradientError(f"{describe_node(h)}: gradients w.r.t. this handle are not defined")
            return ops.zeros(h.attrs["shape"], h.attrs["dtype"])
        if sh.is_fully_defined(t.shape):
            return ops.zeros(t.shape, t.dtype)  # type: ignore[arg-type]
        zero = ops.constant(0, dtype=t.dtype)
        if t.shape is None:
            return ops.fill(self.shape_of(t), zero)
        # A Fill's shape rule sees a run-time shape vector of known length only, so it would give
        # [?, ?] for t of shape [?, 4]; the zeros have t's shape, and saying so keeps every gradient
        # built from them (``unbroadcast``'s SumToLike, a backward loop's variable) as precise as t.
        return self.g.create_node("Fill", [self.shape_of(t), zero], specs=[TensorSpec(t.dtype, t.shape)]).outputs[0]

    def unbroadcast(self, dy: Optional[Tensor], x: Tensor, out: Tensor) -> Optional[Tensor]:
        """Sum ``dy`` (shaped like the broadcast result) down to ``x``'s shape."""
        if dy is None:
            return None
        if sh.is_fully_defined(x.shape) and x.shape == dy.shape:
            return dy
        if sh.is_fully_defined(x.shape) and sh.is_fully_defined(dy.shape):
            assert x.shape is not None and dy.shape is not None
            lead = len(dy.shape) - len(x.shape)
            axes = list(range(lead)) + [i + lead for i, d in enumerate(x.shape) if d == 1 and dy.shape[i + lead] != 1]
            r = ops.reduce_sum(dy, axis=axes, keepdims=True) if axes else dy
            return ops.reshape(r, x.shape)  # type: ignore[arg-type]
        return ops.sum_to_like(dy, self.zeros_like(x))

    def broadcast_to(self, dy: Tensor, x: Tensor) -> Tensor:
        """``dy`` broadcast to ``x``'s shape (the gradient of a reduction, after ``keepdims``); ``dy`` itself when
        the shapes are known and equal, else a run-time ``BroadcastLike``."""
        if sh.is_fully_defined(x.shape) and x.shape == dy.shape:
            return dy
        return ops.broadcast_like(dy, self.zeros_like(x))

    def keepdims(self, dy: Tensor, n: Node) -> Tensor:
        """Re-insert the reduced axes of reduction ``n`` into ``dy`` (size 1), so it broadcasts."""
        if n.attrs.get("keepdims", False):
            return dy
        x = n.inputs[0]
        axis = n.attrs.get("axis")
        if axis is None:
            return dy  # a scalar: it broadcasts to any shape as it is
        listed = axis if isinstance(axis, list) else [axis]
        if x.shape is None:
            if any(a < 0 for a in listed):
                return dy.graph.create_node("ReshapeTo", [dy, self.kept_shape(x, listed)]).outputs[0]
            for a in sorted(set(listed)):
                dy = ops.expand_dims(dy, a)
            return dy
        r = len(x.shape)
        axes = [a % r for a in listed]
        target = reduced_shape(x.shape, axis, True)
        if sh.is_fully_defined(target):
            return ops.reshape(dy, target)  # type: ignore[arg-type]
        for a in sorted(set(axes)):
            dy = ops.expand_dims(dy, a)
        return dy

    def kept_shape(self, x: Tensor, axes: list[int]) -> Tensor:
        """The run-time shape of forward tensor ``x`` with ``axes`` (negative ones counted from its
        end) set to 1: the shape of a reduction of ``x`` that kept its dims. Why at run time: for ``x``
        of unknown rank the position of a negative axis is known only then (TensorFlow computes the
        same from ``Shape`` and ``Rank``)."""
        s = self.shape_of(x)
        position = math_ops.cumsum(ops.ones_like(s), exclusive=True)  # 0, 1, ..., rank - 1
        from_end = position - ops.size(s)  # -rank, ..., -1
        hit = functools.reduce(ops.logical_or, [ops.equal(from_end if a < 0 else position, a) for a in axes])
        return ops.where(hit, ops.ones_like(s), s)

    def refine_shape(self, t: Tensor, shape: sh.Shape) -> Tensor:
        """``t`` with static shape ``shape`` when inference lost it (a loop's back edge must be as
        specific as its Merge): a Reshape that is the identity at run time."""
        if t.dtype.is_opaque or not sh.is_fully_defined(shape) or t.shape == shape:
            return t
        return ops.reshape(t, shape)  # type: ignore[arg-type]

    def reshape_like(self, dy: Tensor, x: Tensor) -> Tensor:
        """``dy`` reshaped to forward tensor ``x``'s shape: a static Reshape where at most one size of
        ``x`` is unknown (and none is 0), else a ``ReshapeTo`` the run-time shape (``shape_of``). Why
        the fallback: a value whose static shape inference lost (a placeholder of unknown shape, a
        TensorArray's stack) has a shape when it runs, as TensorFlow's Reshape gradient reads it;
        refusing it was a GradientError for a program every backend runs. And a -1 beside a 0 names
        no size (any size times 0 is 0): [?, 0] reshaped to [-1, 0] was a KernelError."""
        s = x.shape
        if s is not None and (None not in s or (sum(d is None for d in s) == 1 and 0 not in s)):
            return ops.reshape(dy, [-1 if d is None else d for d in s])
        return dy.graph.create_node("ReshapeTo", [dy, self.shape_of(x)]).outputs[0]


def _encloses(scope: Optional[ControlFlowContext], inner: Optional[ControlFlowContext]) -> bool:
    """Whether ``inner`` lies in ``scope`` (itself or nested in it; everything lies in the root, None)."""
    return scope is None or (inner is not None and inner.is_within(scope))


def _stack_root(t: Tensor) -> Node:
    while t.node.op in ("Enter", "Switch"):
        t = t.node.inputs[0]
    return t.node


def _filler(g: Graph, t: Tensor, pivot: Node) -> Tensor:
    """A stand-in for ``t`` on the branch that did not compute it (never read by the gradient)."""
    if t.dtype == dt.tensor_array:
        n = g.create_node("Const", (), {"value": np.asarray(0, np.int32), "dtype": "int32"},
                          control_inputs=[pivot], name="gradients/filler").outputs[0]
        es = t.spec.elem_shape
        return g.create_node("TensorArrayNew", [n], {"dtype": t.spec.elem_dtype.name,  # type: ignore[union-attr]
                                                       "element_shape": None if es is None else list(es)},
                             name="gradients/filler").outputs[0]
    if t.dtype.is_opaque:
        raise GradientError(f"cannot export {t.name} ({t.dtype.name}) from a cond branch for its gradient")
    # any value of a shape the Merge accepts will do: unknown sizes become 0 (an empty array of the
    # right rank), an unknown rank a scalar. ``gradient_filler`` tells a compiler that the value is
    # never read, so it may stand in zeros of the other branch's shape where that shape is known only
    # when the program runs (``fast.emit``: one ``lax.cond`` needs both sides of one shape).
    shape: Any = () if t.shape is None else tuple(0 if d is None else d for d in t.shape)
    return g.create_node("Const", (), {"value": np.zeros(shape, t.dtype.numpy), "dtype": t.dtype.name,
                                       "gradient_filler": True},
                         control_inputs=[pivot], name="gradients/filler").outputs[0]
