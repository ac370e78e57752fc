"""Raise a primitive graph to structured regions, from the graph alone.

Why not read ``graph.contexts``: graphs built by hand with ``tn.raw`` or loaded from JSON carry no
builder metadata, and the fast backend must run them exactly as it runs builder graphs. Everything
here is recomputed from the primitives:

1. ``static_frames`` (through ``validate.frame_analysis``, cached per graph version) gives each
   node's frame; each non-root frame is one loop (``Enter -> Merge -> LoopCond -> Switch ->
   NextIteration``, ``Exit``).
2. A liveness guard (see ``regions``) is computed for every tensor, frame by frame, in topological
   order: Switch adds a literal, a Merge of the two sides of one predicate removes it
   ([E-Switch], [E-Merge-Live]). A Merge fed by two paths that can be live together, or by paths not
   on complementary sides of one predicate, cannot become a ``lax.cond`` and is rejected.
3. At each scope (a frame and a guard), nodes guarded by one more predicate are grouped into a
   ``CondRegion`` (connected components of the nodes under that predicate, with their Switches and
   Merges); each loop frame becomes a ``WhileRegion`` item of its parent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from turnout.errors import FeedError, MergeConflictError, UnsupportedError, describe_node, merge_conflict_message
from turnout.fast.regions import EMPTY, CondRegion, Guard, Item, Key, Program, WhileRegion, key, tensor_of, walk
from turnout.frames import Frame, FrameAnalysis, kahn_order
from turnout.graph import Graph, Node, Tensor
from turnout.validate import frame_analysis

_NEVER = None  # guard of a Switch output that can never be live (contradicting literals)


def _data_inputs(n: Node) -> list[Tensor]:
    return [t for t in n.raw_inputs if isinstance(t, Tensor)]


def _preds(n: Node) -> list[Node]:
    return [t.node for t in _data_inputs(n)] + list(n.control_inputs)


def _stack_of(t: Tensor) -> Optional[int]:
    n = t.node
    for _ in range(10_000):
        if n.op == "StackNew":
            return n.id
        if n.op not in ("Enter", "Switch", "Identity", "Merge", "Exit") or not n.raw_inputs:
            return None
        n = n.inputs[0].node
    return None


def needed_nodes(graph: Graph, fa: FrameAnalysis, fetches: list[Tensor],
                 fed: frozenset[int] = frozenset()) -> set[int]:
    """Nodes the fetches depend on (dead-code elimination, frames included), as the interpreters
    prune: a Variable assignment in a loop body that no fetch depends on does not run, there or here.

    Fed nodes are needed, their inputs are not. A needed frame brings its LoopCond (it decides the
    trip count). A gradient stack's pushes are needed only when one of its pops is: a gradient that
    is not fetched (say, with respect to a loop's inputs when only the weights' gradient is asked
    for) then costs nothing, neither its backward computation nor the saved values. Control edges
    from pushes (the gradient builder's sync variable) do not by themselves make a push needed.
    """
    pushes: dict[int, list[Node]] = {}
    for n in graph.nodes:
        if n.op == "StackPush":
            sid = _stack_of(n.inputs[0])
            if sid is not None:
                pushes.setdefault(sid, []).append(n)
    need: set[int] = set()
    frames_done: set[Frame] = set()
    popped: set[int] = set()
    work = [t.node for t in fetches]
    while work:
        n = work.pop()
        if n.id in need:
            continue
        need.add(n.id)
        if n.id in fed:
            continue
        work += [t.node for t in _data_inputs(n)]
        work += [c for c in n.control_inputs if c.op != "StackPush" or _stack_of(c.inputs[0]) is None]
        if n.op == "StackPop":
            sid = _stack_of(n.inputs[0])
            if sid is not None and sid not in popped:
                popped.add(sid)
                work += pushes.get(sid, [])
        f = fa.node_frame[n.id]
        for d in range(1, len(f) + 1):
            sub = f[:d]
            if sub not in frames_done:
                frames_done.add(sub)
                work += fa.frames[sub].loop_cond
    return need


class _Raiser:
    def __init__(self, graph: Graph, fetches: list[Tensor], fed: frozenset[int] = frozenset()) -> None:
        self.graph = graph
        self.fa = frame_analysis(graph)
        for t in fetches:
            if self.fa.node_frame[t.node.id] != ():
                raise UnsupportedError(
                    f"fast backend: cannot fetch {t.name}: it lies inside a loop frame; fetch the loop's results")
        for n in graph.nodes:
            if n.id in fed and self.fa.node_frame[n.id] != ():
                raise FeedError(
                    f"cannot feed {describe_node(n)}: it is inside a loop frame; feed root-frame tensors only")
        self.fed = fed
        self.need = needed_nodes(graph, self.fa, fetches, fed)
        self.order = [n for n in self.fa.order if n.id in self.need]
        self.pos = {n.id: i for i, n in enumerate(self.fa.order)}
        self.tensors: dict[Key, Tensor] = {key(o): o for n in self.order for o in n.outputs}
        self.frame_nodes: dict[Frame, list[Node]] = {}
        for n in self.order:
            self.frame_nodes.setdefault(self.fa.node_frame[n.id], []).append(n)
        self.shell: dict[Frame, dict[str, object]] = {}
        self.shell_ids: set[int] = set()
        self.cons = graph.consumers()  # once: per loop frame it would make raising quadratic
        for f in self.fa.frames:
            if f and f in self.frame_nodes:
                self._find_shell(f)
        self.G: dict[Key, Optional[Guard]] = {}
        self._tops_of: dict[tuple[Guard, Guard], frozenset[Key]] = {}
        self.node_g: dict[int, Guard] = {}
        self.enter_g: dict[int, Guard] = {}
        self.merge_side: dict[int, tuple[Key, dict[bool, int]]] = {}
        self.frame_g: dict[Frame, Guard] = {}
        # An Exit may come before a later Enter of its loop in topological order: recompute the guards
        # with the loops' final guards until they are stable.
        for _ in range(len(self.shell) + 1):
            self._guards()
            used, self.frame_g = self.frame_g, {}
            final = {f: self.frame_guard(f) for f in self.shell}
            self.frame_g = final
            if final == used:
                break

    # ---- loop shells ---------------------------------------------------------------------------
    def _find_shell(self, f: Frame) -> None:
        info = self.fa.frames[f]
        lcs = [n for n in info.loop_cond if n.id in self.need]
        if len(lcs) != 1:
            raise UnsupportedError(
                f"fast backend: loop frame {f[-1]!r} has {len(lcs)} LoopCond nodes; a While region needs exactly one")
        lc = lcs[0]
        members = self.frame_nodes[f]
        cons = self.cons
        loop_vars = []
        for m in members:
            if m.op != "Merge" or not any(isinstance(t, Tensor) and t.node.op == "NextIteration" for t in m.raw_inputs):
                continue
            ins = m.inputs
            nxt = [i for i, t in enumerate(ins) if t.node.op == "NextIteration"]
            ent = [i for i, t in enumerate(ins) if t.node.op == "Enter" and not t.node.attrs.get("is_constant")]
            if len(ins) != 2 or len(nxt) != 1 or len(ent) != 1:
                raise UnsupportedError(
                    f"fast backend: loop {describe_node(m)} must merge one non-constant Enter and one NextIteration "
                    f"(inputs: {[t.name for t in ins]})")
            loop_vars.append((ins[ent[0]].node, m, ins[nxt[0]].node, ent[0], nxt[0]))
        lv_merges = {m.id for _, m, _, _, _ in loop_vars}
        for e in info.enters:
            if e.id in self.need and not e.attrs.get("is_constant"):
                bad = [c for c, _ in cons[e.id] if c.id not in lv_merges and c.id in self.need]
                if bad:
                    raise UnsupportedError(
                        f"fast backend: {describe_node(e)} (a loop variable Enter) is read by {describe_node(bad[0])}; "
                        "only its loop Merge may read it")
        switches = [n for n in members if n.op == "Switch" and n.inputs[1].node is lc]
        nexts = [n for n in members if n.op == "NextIteration"]
        for nx in nexts:
            if not any(c.id in lv_merges for c, _ in cons[nx.id]):
                raise UnsupportedError(f"fast backend: {describe_node(nx)} feeds no loop Merge")
        invariants = [e for e in info.enters if e.id in self.need and e.attrs.get("is_constant")]
        var_enters = [e for e, _, _, _, _ in loop_vars]
        self.shell[f] = dict(lc=lc, loop_vars=loop_vars, switches=switches, nexts=nexts, invariants=invariants,
                             exits=[x for x in info.exits if x.id in self.need], enters=var_enters + invariants)
        self.shell_ids |= {lc.id, *(m.id for m in members if m.id in lv_merges), *(s.id for s in switches),
                           *(n.id for n in nexts), *(e.id for e in var_enters + invariants)}

    # ---- liveness guards -----------------------------------------------------------------------
    def _conj(self, n: Node, gs: Iterable[Optional[Guard]]) -> Guard:
        out: set = set()
        for g in gs:
            if g is _NEVER:
                raise UnsupportedError(
                    f"fast backend: {describe_node(n)} reads a Switch output that can never be live")
            out |= g
        preds = [p for p, b in out if (p, not b) in out]
        if preds:
            raise UnsupportedError(
                f"fast backend: {describe_node(n)} is live only when predicate {self.tensors[preds[0]].name} is both "
                "true and false; it can never run")
        return frozenset(out)

    def _guards(self) -> None:
        for n in self.order:
            ins = _data_inputs(n)
            ctrl = [self.node_g[c.id] for c in n.control_inputs if c.id in self.need] if n.id not in self.fed else []
            if n.id in self.fed:
                self._set(n, EMPTY)
            elif n.op == "Enter":
                self.enter_g[n.id] = self._conj(n, [self.G[key(t)] for t in ins] + ctrl)
                self._set(n, EMPTY)
            elif n.op == "Merge" and n.id in self.shell_ids:
                self._set(n, EMPTY)
            elif n.op == "Merge":
                self._set(n, self._merge_guard(n))
            elif n.op == "Exit":
                f = self.fa.node_frame[ins[0].node.id]
                lc = self.shell[f]["lc"]
                if self.G[key(ins[0])] != frozenset({(key(lc.outputs[0]), False)}):  # type: ignore[attr-defined]
                    raise UnsupportedError(
                        f"fast backend: {describe_node(n)} must read the false side of its loop's Switch")
                self._set(n, self.frame_guard(f))
            elif n.op == "Switch":
                g = self._conj(n, [self.G[key(t)] for t in ins] + ctrl)
                self.node_g[n.id] = g
                p = key(ins[1])
                for b in (False, True):
                    self.G[key(n.outputs[int(b)])] = _NEVER if (p, not b) in g else g | {(p, b)}
            else:
                self._set(n, self._conj(n, [self.G[key(t)] for t in ins] + ctrl))

    def _set(self, n: Node, g: Guard) -> None:
        self.node_g[n.id] = g
        for o in n.outputs:
            self.G[key(o)] = g

    def frame_guard(self, f: Frame) -> Guard:
        """The guard a loop runs under in its parent frame: the conjunction of its Enters' guards.

        Enters may be guarded by a chain of guards (a header value entered next to body values of an
        outer loop: {} and {outer pred}); the loop runs when the strongest holds. Unrelated guards
        have no structured form and are rejected.
        """
        if f in self.frame_g:
            return self.frame_g[f]
        gs = [self.enter_g[e.id] for e in self.shell[f]["enters"] if e.id in self.enter_g]  # type: ignore[attr-defined]
        if not gs:
            return EMPTY
        top = max(gs, key=len)
        if any(not g <= top for g in gs):
            raise UnsupportedError(
                f"fast backend: the Enters of loop frame {f[-1]!r} are live under unrelated conditions; "
                "enter every loop input from the same branch")
        return top

    def _merge_guard(self, n: Node) -> Guard:
        ins = [(i, t) for i, t in enumerate(n.inputs) if self.G[key(t)] is not _NEVER]
        if len(ins) == 1:
            return self.G[key(ins[0][1])]  # type: ignore[return-value]
        names = ", ".join(t.name for _, t in ins)
        if len(ins) == 2:
            (i0, t0), (i1, t1) = ins
            g0, g1 = self.G[key(t0)], self.G[key(t1)]
            assert g0 is not None and g1 is not None
            c = g0 & g1
            d0, d1 = g0 - c, g1 - c
            if len(d0) == 1 and len(d1) == 1:
                (p0, b0), (p1, b1) = next(iter(d0)), next(iter(d1))
                if p0 == p1 and b0 != b1:
                    self.merge_side[n.id] = (p0, {b0: i0, b1: i1})
                    return c
            if g0 == g1:  # [E-Merge-Conflict] whenever the Merge runs: the reference's error type
                raise MergeConflictError(
                    merge_conflict_message(n, "every tag where it runs") + f" (fast backend: inputs {names} "
                    "are live together)")
        raise UnsupportedError(
            f"fast backend: the inputs of {describe_node(n)} ({names}) do not come from the two complementary "
            "sides of one predicate's Switch; it cannot be raised to a conditional")

    # ---- regions -------------------------------------------------------------------------------
    def anchor(self, e: Item) -> tuple[Guard, Optional[Key]]:
        if isinstance(e, WhileRegion):
            return self.frame_guard(e.frame), None
        assert isinstance(e, Node)
        if e.op == "Switch":
            return self.node_g[e.id], key(e.inputs[1])
        if e.op == "Merge" and e.id in self.merge_side:
            return self.node_g[e.id], self.merge_side[e.id][0]
        return self.node_g[e.id], None

    @staticmethod
    def nodes_of(e: Item) -> list[Node]:
        return [e] if isinstance(e, Node) else e.nodes

    def build_items(self, scope: Guard, elems: list[Item]) -> list[Item]:
        direct: list[Item] = []
        pred_of: dict[int, Key] = {}  # element index -> the predicate of its cond group at this scope
        for i, e in enumerate(elems):
            a, p = self.anchor(e)
            if a == scope and p is None:
                direct.append(e)
                continue
            if a != scope:
                tops = self._tops(a, scope)
                if len(tops) != 1:
                    n = self.nodes_of(e)[0]
                    raise UnsupportedError(
                        f"fast backend: {describe_node(n)} is guarded by {len(tops)} unrelated predicates; "
                        "nest the conditionals instead")
                p = next(iter(tops))
            pred_of[i] = p  # type: ignore[assignment]
        level = self._levels(scope, elems, pred_of)
        groups: dict[tuple[Key, int], list[Item]] = {}
        for i, p in pred_of.items():
            groups.setdefault((p, level[i]), []).append(elems[i])
        items = direct + [self._cond(scope, p, es) for (p, _), es in groups.items()]
        return self._order(items)

    def _tops(self, a: Guard, scope: Guard) -> frozenset[Key]:
        """The predicates of guard ``a`` beyond ``scope`` that are decided at ``scope`` (the cond an
        item guarded by ``a`` belongs to, one level below ``scope``). Memoised per (guard, scope):
        items share few guards, and finding them anew for every item at every level of a nest of
        ``d`` conds cost each item ``d`` set differences of ``d`` literals."""
        got = self._tops_of.get((a, scope))
        if got is None:
            got = self._tops_of[(a, scope)] = frozenset(
                lit[0] for lit in a - scope if (self.G.get(lit[0]) or EMPTY) <= scope)
        return got

    def _levels(self, scope: Guard, elems: list[Item], pred_of: dict[int, Key]) -> list[int]:
        """Split the members of each predicate's group into successive conds.

        Members on one predicate that are connected only through values at the enclosing scope
        (a second cond on the same predicate that reads the first one's Merge, as a gradient cond
        does) cannot share one ``lax.cond``: the member is put one *level* later than every member of
        its group it reaches through such a path. Members of one level form one CondRegion; a later
        level may read an earlier level's branch values (exported by the earlier ``lax.cond``).
        """
        owner: dict[int, int] = {}
        for i, e in enumerate(elems):
            for n in self.nodes_of(e):
                owner[n.id] = i
        preds: list[set[int]] = [set() for _ in elems]
        for i, e in enumerate(elems):
            for n in _boundary(e):
                for q in _preds(n):
                    j = owner.get(q.id)
                    if j is not None and j != i and not (n.op == "Merge" and q.op == "NextIteration"):
                        preds[i].add(j)
        level = [0] * len(elems)
        reach: list[dict[Key, int]] = [{} for _ in elems]  # predicate -> highest member level upstream
        for i in kahn_order(range(len(elems)), preds.__getitem__, int):
            p = pred_of.get(i)
            lv = 0
            for j in preds[i]:
                if p is not None and pred_of.get(j) == p:
                    e = elems[j]
                    joins = isinstance(e, Node) and e.op == "Merge" and self.anchor(e) == (scope, p)
                    lv = max(lv, level[j] + 1 if joins else level[j])
                elif p is not None and p in reach[j]:
                    lv = max(lv, reach[j][p] + 1)
            level[i] = lv
            for j in preds[i]:
                for q, v in reach[j].items():
                    reach[i][q] = max(reach[i].get(q, -1), v)
            if p is not None:
                reach[i][p] = max(reach[i].get(p, -1), lv)
        return level

    def _cond(self, scope: Guard, p: Key, members: list[Item]) -> CondRegion:
        switches, merges = [], []
        pools: dict[bool, list[Item]] = {False: [], True: []}
        for e in members:
            a, q = self.anchor(e)
            if isinstance(e, Node) and e.op == "Switch" and a == scope and q == p:
                switches.append(e)
            elif isinstance(e, Node) and e.op == "Merge" and a == scope and q == p:
                merges.append((e, self.merge_side[e.id][1]))
            else:
                pools[(p, True) in a].append(e)
        region = CondRegion(self.tensors[p] if p in self.tensors else tensor_of(self.graph, p), scope,
                            switches, merges,
                            {b: self.build_items(scope | {(p, b)}, pools[b]) for b in (False, True)})
        region.nodes = [n for e in members for n in self.nodes_of(e)]
        return region

    def _order(self, items: list[Item]) -> list[Item]:
        owner: dict[int, int] = {}
        for i, it in enumerate(items):
            for n in self.nodes_of(it):
                owner[n.id] = i
        deps: list[set[int]] = [set() for _ in items]
        for i, it in enumerate(items):
            for n in _boundary(it):
                for q in _preds(n):
                    j = owner.get(q.id)
                    if j is not None and j != i and not (n.op == "Merge" and q.op == "NextIteration"):
                        deps[i].add(j)
        first = [min(self.pos[n.id] for n in self.nodes_of(it)) for it in items]
        done: list[Item] = []
        placed: set[int] = set()
        remaining = sorted(range(len(items)), key=lambda i: first[i])
        while remaining:
            for i in remaining:
                if deps[i] <= placed:
                    break
            else:
                it = items[remaining[0]]
                raise UnsupportedError(
                    f"fast backend: cannot order the regions around {describe_node(self.nodes_of(it)[0])}: a "
                    "conditional both feeds and reads another computation on the same predicate")
            remaining.remove(i)
            placed.add(i)
            done.append(items[i])
        return done

    def while_region(self, f: Frame, children: list[WhileRegion]) -> WhileRegion:
        sh = self.shell[f]
        lc: Node = sh["lc"]  # type: ignore[assignment]
        lck = key(lc.outputs[0])
        if self.G[key(lc.inputs[0])] != EMPTY:
            raise UnsupportedError(f"fast backend: the predicate of {describe_node(lc)} must not depend on the body")
        for s in sh["switches"]:  # type: ignore[attr-defined]
            if self.G[key(s.inputs[0])] != EMPTY:
                raise UnsupportedError(f"fast backend: {describe_node(s)} must switch a value of the loop header")
        for nx in sh["nexts"]:  # type: ignore[attr-defined]
            if self.G[key(nx.inputs[0])] != frozenset({(lck, True)}):
                raise UnsupportedError(
                    f"fast backend: {describe_node(nx)} must take a value computed on the taken side of the loop")
        pool: list[Item] = [n for n in self.frame_nodes[f] if n.id not in self.shell_ids and n.op != "Exit"]
        pool += [c for c in children if c.frame[:-1] == f]
        phases: dict[str, list[Item]] = {"header": [], "body": [], "exit": []}
        for e in pool:
            a, _ = self.anchor(e)
            phases["body" if (lck, True) in a else "exit" if (lck, False) in a else "header"].append(e)
        header = self.build_items(EMPTY, phases["header"])
        for n in (n for it in header for n in _boundary(it)):  # (the header makes the predicate: it cannot read it)
            if any(key(t) == lck for t in _data_inputs(n)):
                raise UnsupportedError(f"fast backend: {describe_node(n)} reads the output of {describe_node(lc)} "
                                       "in its loop's header, where the predicate is being made; only the loop's "
                                       "Switches (and what they feed) may read it")
        body = self.build_items(frozenset({(lck, True)}), phases["body"])
        exit_side = self.build_items(frozenset({(lck, False)}), phases["exit"])
        header_ids = {n.id for it in header for n in self.nodes_of(it)}
        header_ids |= {m.id for _, m, _, _, _ in sh["loop_vars"]}  # type: ignore[attr-defined]
        readers = [n for it in body + exit_side for n in _boundary(it)]
        readers += [lc, *sh["switches"], *sh["nexts"]]  # type: ignore[list-item, misc]
        carried: dict[Key, Tensor] = {}
        for n in readers:
            for t in _data_inputs(n):
                if t.node.id in header_ids and not (n.op == "Merge" and t.node.op == "NextIteration"):
                    carried[key(t)] = t
        inv = sh["invariants"]
        region = WhileRegion(
            frame=f, loop_cond=lc, loop_vars=sh["loop_vars"], invariants=inv,  # type: ignore[arg-type]
            switches=sh["switches"], exits=sh["exits"], header=header, body=body,  # type: ignore[arg-type]
            exit_side=exit_side, carried=list(carried.values()),
            parallel_iterations=self.fa.frames[f].parallel_iterations,
        )
        nodes = [n for n in self.frame_nodes[f]] + list(sh["exits"])  # type: ignore[call-overload]
        ids = {x.id for x in nodes}
        for c in children:
            if c.frame[:-1] == f:
                nodes += [n for n in c.nodes if n.id not in ids]
                ids.update(n.id for n in c.nodes)
        region.nodes = nodes
        return region

    def program(self, fetches: list[Tensor]) -> Program:
        regions: dict[Frame, WhileRegion] = {}
        for f in sorted(self.shell, key=len, reverse=True):
            regions[f] = self.while_region(f, [r for g, r in regions.items() if g[:-1] == f])
        pool: list[Item] = [n for n in self.frame_nodes.get((), []) if n.id not in self.shell_ids
                            and n.op != "Exit"]
        pool += [r for f, r in regions.items() if len(f) == 1]
        items = self.build_items(EMPTY, pool)
        readers: dict[Key, set[int]] = {}
        for n in self.order:
            for t in _data_inputs(n):
                readers.setdefault(key(t), set()).add(n.id)
        for it in walk(items):
            if isinstance(it, CondRegion):
                inside = {n.id for n in it.nodes}
                joins = {m.id for m, _ in it.merges}
                it.exports = sorted(key(o) for n in it.nodes if n.id not in joins for o in n.outputs
                                    if readers.get(key(o), set()) - inside)
        guards = {k: g for k, g in self.G.items() if g is not None}
        return Program(items, guards, [key(t) for t in fetches])


def _boundary(it: Item) -> list[Node]:
    """The nodes of an item that may read values of the frame the item sits in: a nested loop reads
    them only through its Enters (a frame is entered, never read across), so its inner nodes need not
    be scanned for an item's inputs. Why: scanning every nested node at every level made raising a
    loop nest quadratic in its depth."""
    if isinstance(it, Node):
        return [it]
    if isinstance(it, WhileRegion):
        return [e for e, _, _, _, _ in it.loop_vars] + list(it.invariants)
    return it.nodes


def program_key(graph: Graph, fetches: Iterable[Tensor], feeds: Iterable[Tensor]) -> Any:
    """What the program of a run (``functionalize``) is a function of: the graph's edits, the fetches
    and the fed tensors. Every plan of one program, at any capacity or specialisation, on any backend,
    runs the same regions: what a backend learns of a program (how deep it nests, how many checkpoint
    slots its loops need) is kept under this key."""
    return graph.edits, tuple(key(t) for t in fetches), tuple(sorted(key(t) for t in feeds))


def functionalize(graph: Graph, fetches: list[Tensor], feeds: Iterable[Tensor] = ()) -> Program:
    """Raise the part of ``graph`` that ``fetches`` need to structured regions.

    Raises ``ValidationError`` for ill-formed frames (from ``static_frames``) and ``UnsupportedError``
    naming the node for graphs that have no structured form (e.g. a Merge of two live paths).
    """
    fed = frozenset(t.node.id for t in feeds)
    return _Raiser(graph, fetches, fed).program(fetches)
