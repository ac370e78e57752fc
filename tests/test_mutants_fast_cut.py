"""Laws of the cut (``turnout.fast.cut``): how a program's region tree becomes the steps a run executes,
on one device or many. Each law kills mutants of the full set of ``fast/cut.py`` (issue 40, part 3)
that the runs on forced devices reach only in minutes: a segment that reads or gives back the wrong
keys, a loop driven where it must stay compiled (or the reverse), steps in an order that reads a value
before it is made, stack counts off by one. The cut is pure Python over the region tree, so these
tests call it directly, on programs raised by ``functionalize`` with devices given per node name, and
on hand-made items where only the counting is at stake; nothing is compiled."""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterator
from typing import Any

import turnout as tn
from turnout import raw
from turnout.fast import cut
from turnout.fast.cut import HostCond, HostLoop, Schedule, Segment, Traffic
from turnout.fast.functionalize import functionalize
from turnout.fast.regions import CondRegion, Key, Program, WhileRegion, item_nodes, key, walk
from turnout.fast.state_keys import stack_key_of
from turnout.graph import Graph, Node, Tensor

# ---- helpers ---------------------------------------------------------------------------------------


def _segments(steps: list[Any]) -> Iterator[Segment]:
    """Every segment of ``steps`` in the order a run meets them: a host cond's branches, a host loop's
    header, body and exit side."""
    for s in steps:
        if isinstance(s, Segment):
            yield s
        elif isinstance(s, HostCond):
            for b in (False, True):
                yield from _segments(s.branches[b])
        else:
            for part in (s.header, s.body, s.exit_side):
                yield from _segments(part)


def _check_keys(program: Program, segs: list[Segment], fed: set[int]) -> None:
    """The keys law of every segment: it reads exactly what its nodes take from outside it (an input
    made elsewhere or fed, a fed node's outputs, a control input from outside as ``(id, -1)``); it
    gives back exactly what it makes (outputs of nodes not fed, and each node's control key) that a
    node outside it reads, at any depth, or that is fetched; and ``fetched`` is the fetched part."""
    every = [n for it in walk(program.items) for n in item_nodes(it)]
    fetch = set(program.fetch_keys)
    for seg in segs:
        nodes = [n for it in seg.items for n in item_nodes(it)]
        ids = {n.id for n in nodes}
        want_reads = {key(t) for n in nodes for t in n.inputs if t.node.id not in ids or t.node.id in fed}
        want_reads |= {key(o) for n in nodes if n.id in fed for o in n.outputs}
        want_reads |= {(c.id, -1) for n in nodes for c in n.control_inputs if c.id not in ids}
        assert seg.reads == sorted(want_reads), seg.describe()
        outside = [n for n in every if n.id not in ids]
        read_outside = {key(t) for n in outside for t in n.inputs} | {(c.id, -1) for n in outside
                                                                      for c in n.control_inputs}
        made = {key(o) for n in nodes if n.id not in fed for o in n.outputs} | {(n.id, -1) for n in nodes}
        assert seg.writes == sorted(k for k in made if k in fetch or k in read_outside), seg.describe()
        assert seg.fetched == [k for k in seg.writes if k in fetch], seg.describe()


def _check_order(segs: list[Segment], fed_keys: set[Key]) -> None:
    """The order law of a cut run in sequence: every key a segment reads is fed or given back by an
    earlier segment (a value is never read before it is made)."""
    made = set(fed_keys)
    for seg in segs:
        missing = [k for k in seg.reads if k not in made]
        assert not missing, f"{seg.describe()} reads {missing} before any segment gives them back"
        made |= set(seg.writes)


def _root_program(items: list[Node], fetches: list[Tensor]) -> Program:
    """A program of root nodes in the given order (the order ``functionalize`` would give is one
    dependency order; these tests choose theirs)."""
    return Program(items=list(items), guards={}, fetch_keys=[key(t) for t in fetches])


def _gradient_loop() -> tuple[Graph, Program, set[int], list[Tensor]]:
    """A loop of tanh and its gradient: the forward loop pushes two stacks per iteration, the
    backward loop pops them; both are loops a one-device run drives chunk by chunk."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")
        _, y = tn.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, tn.tanh(h) * 1.1), [tn.constant(0), x])
        (dx,) = tn.gradients(y, [x])
    return g, functionalize(g, [y, dx], [x, n]), {x.node.id, n.node.id}, [x, n]


def _loops(program: Program) -> list[WhileRegion]:
    return [it for it in program.items if isinstance(it, WhileRegion)]


def _stack_keys(loop: WhileRegion, op: str) -> set[str]:
    """The run-state keys of the stacks that ``loop``'s ``op`` nodes use."""
    return {k for n in loop.nodes if n.op == op and (k := stack_key_of(n)) is not None}


def _fed_keys(program: Program, fed: set[int]) -> set[Key]:
    return {key(o) for it in walk(program.items) for n in item_nodes(it) if n.id in fed for o in n.outputs}


class _Stacks:
    """Hand-made stack nodes for the counting laws: ``push(s)`` and ``pop(s)`` make a StackPush or
    StackPop of stack ``s`` (a letter), whose run-state key is ``key(s)``."""

    def __init__(self) -> None:
        self.g = tn.Graph()
        with self.g.as_default():
            self.index = tn.constant([0], name="index")
            self.value = tn.constant(1.0, name="value")
        self.stacks: dict[str, Node] = {}

    def _stack(self, s: str) -> Tensor:
        if s not in self.stacks:
            self.stacks[s] = self.g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []},
                                                name=f"stack_{s}")
        return self.stacks[s].outputs[0]

    def key(self, s: str) -> str:
        self._stack(s)
        return f"stack:{self.stacks[s].id}"

    def push(self, s: str) -> Node:
        return self.g.create_node("StackPush", [self._stack(s), self.index, self.value], name=f"push_{s}")

    def pop(self, s: str) -> Node:
        return self.g.create_node("StackPop", [self._stack(s), self.index], {"dtype": "float32"}, name=f"pop_{s}")

    def other(self) -> Node:
        return self.index.node


def _cond(false: list[Any], true: list[Any]) -> CondRegion:
    """A stand-in conditional: only its branches matter to the counts."""
    nodes = [n for it in false + true for n in item_nodes(it)]
    return CondRegion(pred=None, scope=frozenset(), switches=[], merges=[],  # type: ignore[arg-type]
                      branches={False: false, True: true}, nodes=nodes)


def _loop(nodes: list[Node]) -> WhileRegion:
    """A stand-in loop: only its nodes matter to the counts."""
    return WhileRegion(frame=("f",), loop_cond=None, loop_vars=[], invariants=[], switches=[],  # type: ignore[arg-type]
                       exits=[], header=[], body=list(nodes), exit_side=[], carried=[], parallel_iterations=1,
                       nodes=list(nodes))


def _by_name(program: Program, rule: Callable[[Node], str]) -> dict[int, str]:
    """A device for every node of ``program``, chosen from the node by ``rule``."""
    return {n.id: rule(n) for it in walk(program.items) for n in item_nodes(it)}


# ---- Traffic, Segment and the counts -----------------------------------------------------------------


def test_traffic_is_true_when_a_call_pushes_or_pops() -> None:
    """A segment's ``Traffic`` is true when one call pushes or pops any stack (the host moves chunks
    around the calls whose traffic is true), false for a call that touches none; each traffic has
    its own dicts. Kills ``__bool__`` returning ``push and pop`` or nothing, and the defaults made
    ``None`` or a ``None`` factory."""
    assert not Traffic()
    assert Traffic(push={"s": 1}) and Traffic(pop={"s": None})
    a, b = Traffic(), Traffic()
    a.push["s"] = 1
    assert a.push == {"s": 1} and a.pop == {} and b.push == {} and b.pop == {}


def test_a_new_segment_reads_writes_and_moves_nothing() -> None:
    """A segment made with only its device and items is the first (index 0) of one device without a
    label, reads and gives back nothing, is not driven, touches no stacks and is not compiled yet
    (``fn`` is made on first use: ``None`` until then); each segment has its own lists and dicts. A
    host loop made without ``pushes`` pushes nothing. Kills every mutant of the defaults."""
    a, b = Segment("d", []), Segment("d", [])
    assert (a.index, a.label, a.driven, a.traffic, a.fn) == (0, "", None, None, None)
    assert (a.reads, a.writes, a.fetched, a.push, a.pop, a.measured) == ([], [], [], {}, {}, set())
    a.reads.append((1, 0))
    a.writes.append((1, 0))
    a.fetched.append((1, 0))
    a.push["s"] = a.pop["s"] = 1
    a.measured.add("s")
    assert (b.reads, b.writes, b.fetched, b.push, b.pop, b.measured) == ([], [], [], {}, {}, set())
    loop = HostLoop(_loop([]), [], [], [], ["d"], "d")
    assert loop.pushes == set()
    loop.pushes.add("s")
    assert HostLoop(_loop([]), [], [], [], ["d"], "d").pushes == set()


def test_describe_names_the_device_the_first_node_and_how_many_more() -> None:
    """A segment's label in traces and errors: its index, ``on`` its device's label where it has one,
    then the first node of its first item and how many items follow, or ``(empty)``; a driven
    segment names its loop instead. Kills the label and count mutants of ``describe``."""
    s = _Stacks()
    nodes = [s.push("a"), s.push("b"), s.pop("a")]
    assert Segment("d", nodes, index=4, label="gpu:1").describe() == "segment 4 on gpu:1: push_a (+2 more)"
    assert Segment("d", nodes[:2], index=1).describe() == "segment 1: push_a (+1 more)"
    assert Segment("d", nodes[1:2], index=2).describe() == "segment 2: push_b"
    assert Segment("d", [], index=3, label="x").describe() == "segment 3 on x: (empty)"
    assert Segment("d", [], index=0).describe() == "segment 0: (empty)"
    loop = _loop(nodes)
    assert Segment("d", [loop], index=5, driven=loop).describe() == f"segment 5: driven {loop.describe()}"
    labelled = Segment("d", [loop], index=5, driven=loop, label="b")
    assert labelled.describe() == f"segment 5 on b: driven {loop.describe()}"


def test_iteration_counts_add_nodes_take_the_larger_branch_and_name_loop_stacks() -> None:
    """``iteration_counts``: each push (pop) node counts one for its stack; a cond counts, per stack,
    the larger of its two branches (only one runs), added to what came before it; a loop counts
    nothing but names its stacks (with 0) as measured, in either branch of a cond too; a held stack
    is none of them at any depth; nodes that are not pushes or pops count nothing. Kills the
    arithmetic, default, branch and held mutants of ``iteration_counts`` and ``_stack_ops``."""
    s = _Stacks()
    items = [s.other(), s.push("a"), s.push("h"), _loop([s.push("e"), s.push("h")]),
             _cond([s.push("a"), s.push("a"), s.pop("c"), s.push("h"), _loop([s.push("f")])],
                   [s.other(), s.push("a"), s.push("b"), _loop([s.push("d"), s.pop("g"), s.pop("h")])]),
             s.pop("c"), s.pop("c")]
    push, pop, measured = cut.iteration_counts(items, {s.key("h")})
    k = s.key
    assert push == {k("a"): 3, k("b"): 1, k("d"): 0, k("e"): 0, k("f"): 0}
    assert pop == {k("c"): 3, k("g"): 0}
    assert measured == {k("d"), k("e"), k("f"), k("g")}
    # (nothing held: the held stack counts like the others, in nodes, branches and loops)
    push, pop, measured = cut.iteration_counts(items)
    assert push == {k("a"): 3, k("b"): 1, k("d"): 0, k("e"): 0, k("f"): 0, k("h"): 2}
    assert pop == {k("c"): 3, k("g"): 0, k("h"): 0}
    assert measured == {k("d"), k("e"), k("f"), k("g"), k("h")}


def test_traffic_is_unbounded_for_stacks_a_loop_pushes_or_pops() -> None:
    """``traffic``: the counts of ``iteration_counts`` for a segment's nodes, and no bound (``None``)
    for a stack a loop among its items pushes or pops, since its trip count is known only on the
    device; held stacks are left out. Kills the swapped, forced and dropped bounds of ``traffic``."""
    s = _Stacks()
    items = [s.push("a"), s.push("a"), s.pop("c"), s.push("h"), _loop([s.push("b"), s.pop("d"), s.push("h")])]
    t = cut.traffic(items, {s.key("h")})
    k = s.key
    assert t.push == {k("a"): 2, k("b"): None} and t.pop == {k("c"): 1, k("d"): None}
    assert cut.traffic([s.other()]) == Traffic() and not cut.traffic([s.other()])


# ---- one device -------------------------------------------------------------------------------------


def test_one_device_cuts_before_and_after_each_driven_loop() -> None:
    """On one device the root items stay in program order, one segment each run between the loops
    that push or pop stacks; each such loop is a segment of its own, driven, with its stacks'
    pushes (pops) per iteration, unbounded traffic, and an index in order; a label of none. The keys
    and order laws hold. Kills the grouping mutants of ``_cluster`` (``alone``, ``drives``), the
    driven-segment mutants of ``_segment`` and most of ``one_device``'s."""
    _, program, fed, _ = _gradient_loop()
    forward, backward = _loops(program)
    segs = cut.one_device(program, fed)
    assert [s.driven for s in segs] == [None, forward, None, backward]
    assert [s.index for s in segs] == [0, 1, 2, 3]
    assert all(s.device == cut.ONE and s.label == "" and s.fn is None for s in segs)
    assert [it for s in segs for it in s.items] == program.items
    assert segs[1].items == [forward] and segs[3].items == [backward]
    pushed, popped = _stack_keys(forward, "StackPush"), _stack_keys(backward, "StackPop")
    assert len(pushed) == 2 and popped == pushed
    assert (segs[1].push, segs[1].pop, segs[1].measured) == (dict.fromkeys(pushed, 1), {}, set())
    assert (segs[3].push, segs[3].pop, segs[3].measured) == ({}, dict.fromkeys(popped, 1), set())
    assert segs[1].traffic == Traffic(dict.fromkeys(pushed)) and segs[3].traffic == Traffic({}, dict.fromkeys(popped))
    assert segs[0].traffic is None and segs[2].traffic is None
    assert " on " not in segs[0].describe() and segs[1].describe().startswith("segment 1: driven loop frame")
    _check_keys(program, segs, fed)
    _check_order(segs, _fed_keys(program, fed))
    assert any(k[1] == -1 for s in segs for k in s.reads)  # (a control key crosses segments)


def test_a_held_stack_is_no_stack_of_a_driven_loop() -> None:
    """A held stack (its pushes do nothing) is not counted for the loop that drives it, nor in its
    traffic; a loop whose only stacks are held is not driven at all, and joins the segment around it.
    Kills the mutants that drop ``held`` in ``_drives``, ``_segment``, ``traffic`` and ``one_device``."""
    _, program, fed, _ = _gradient_loop()
    forward, backward = _loops(program)
    one, other = sorted(_stack_keys(forward, "StackPush"))
    segs = cut.one_device(program, fed, {one})
    assert [s.driven for s in segs] == [None, forward, None, backward]
    assert (segs[1].push, segs[3].pop) == ({other: 1}, {other: 1})
    assert (segs[1].traffic, segs[3].traffic) == (Traffic({other: None}), Traffic({}, {other: None}))
    segs = cut.one_device(program, fed, {one, other})
    assert len(segs) == 1 and segs[0].driven is None and segs[0].items == program.items and segs[0].traffic is None
    _check_keys(program, segs, fed)


def test_a_loop_that_pushes_in_its_header_is_driven_and_names_the_stack() -> None:
    """A loop whose predicate pushes a stack (a hand-built push in ``cond``) is driven, and its
    segment names that stack among its pushes with no count per body iteration (the body does not
    push it). Kills the mutants of ``_segment``'s loop over every node of the driven loop."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        stack = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []}, name="stk").outputs[0]

        def cond(i: Any, h: Any) -> Any:
            p = g.create_node("StackPush", [stack, tn.reshape(i, [1]), h], name="hpush").outputs[0]
            return i + tn.cast(p * 0.0, tn.int32) < n

        _, h = tn.while_loop(cond, lambda i, h: (i + 1, h * 2.0), [tn.constant(0), tn.constant(1.0)])
    program = functionalize(g, [h], [n])
    (loop,) = _loops(program)
    segs = cut.one_device(program, {n.node.id})
    (driven,) = [s for s in segs if s.driven is not None]
    assert driven.driven is loop
    assert (driven.push, driven.pop, driven.measured) == ({f"stack:{stack.node.id}": 0}, {}, set())


def test_one_device_keeps_the_program_order() -> None:
    """On one device the items keep the program's order, even where the cut across devices would
    take first the item whose reader comes earliest. Kills the mutants of ``_order``'s early return."""
    g = tn.Graph()
    with g.as_default():
        p = tn.constant(1.0, name="p")
        q = tn.constant(2.0, name="q")
        r = tn.identity(q, name="r")
        s = tn.identity(p, name="s")
    items = [p.node, q.node, r.node, s.node]
    program = _root_program(items, [r, s])
    (seg,) = cut.one_device(program, set())
    assert seg.items == items and seg.writes == [key(r), key(s)] and seg.fetched == [key(r), key(s)]


def test_an_empty_program_is_one_empty_segment() -> None:
    """A program with no items is one empty segment of the one device (the staged path always has a
    segment to run). Kills the mutants of ``one_device``'s last line."""
    (seg,) = cut.one_device(_root_program([], []), set())
    assert (seg.device, seg.items, seg.index, seg.driven, seg.label) == (cut.ONE, [], 0, None, "")


def test_a_fed_node_is_read_and_never_given_back() -> None:
    """A fed node's outputs come from the feed: a segment that holds it reads them (and what its
    readers take from it) and never gives them back, though it may give back its control key. Kills
    the mutants of ``_segment``'s reads and ``produced`` on fed nodes."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = tn.multiply(x, 2.0, name="y")
        z = tn.add(y, 1.0, name="z")
    program = functionalize(g, [z, y], [y])
    fed = {y.node.id}
    (seg,) = cut.one_device(program, fed)
    assert key(y) in seg.reads and key(y) not in seg.writes and key(z) in seg.writes
    _check_keys(program, [seg], fed)


# ---- across devices ---------------------------------------------------------------------------------


def test_the_cut_keeps_going_on_one_device_while_it_can() -> None:
    """Across devices, the next item is one of the current device's while any is ready, so that the
    items of a device form few segments; when none is, the ready item whose first reader comes
    earliest goes next (a constant of device b joins b's segment instead of forming its own).
    Kills the mutants of ``_order``'s readiness, ``same`` and ``urgency``."""
    g = tn.Graph()
    with g.as_default():
        a1 = tn.constant(1.0, name="a1")
        b0 = tn.constant(2.0, name="b0")
        a2 = tn.identity(a1, name="a2")
        b1 = tn.add(a2, b0, name="b1")
    device = {a1.node.id: "a", a2.node.id: "a", b0.node.id: "b", b1.node.id: "b"}
    for order in ([a1, b0, a2, b1], [b0, a1, a2, b1]):
        program = _root_program([t.node for t in order], [b1])
        sched = cut.schedule(program, device, set())
        assert [(s.device, s.items) for s in sched.steps] == [("a", [a1.node, a2.node]), ("b", [b0.node, b1.node])]
        assert [s.label for s in sched.segments] == ["a", "b"] and [s.index for s in sched.segments] == [0, 1]
        assert sched.segments == sched.steps and (sched.host_loops, sched.host_conds) == ([], [])
        _check_keys(program, sched.segments, set())
        _check_order(sched.segments, set())


def test_a_control_input_orders_the_cut() -> None:
    """A control input is a dependency like a data input: the item that waits on another device's
    node comes after it, whatever the program's order says of the rest. Kills the mutants of
    ``_order``'s control dependencies and of the readers' control keys."""
    g = tn.Graph()
    with g.as_default():
        bx = tn.constant(1.0, name="bx")
        ay = tn.constant(2.0, name="ay")
        with tn.control_dependencies([ay]):
            bz = tn.constant(3.0, name="bz")
    device = {bx.node.id: "b", ay.node.id: "a", bz.node.id: "b"}
    program = _root_program([bx.node, ay.node, bz.node], [bx, bz])
    sched = cut.schedule(program, device, set(), label=lambda d: f"dev {d}")
    assert [(s.device, s.items) for s in sched.steps] == [("a", [ay.node]), ("b", [bx.node, bz.node])]
    assert sched.segments[0].writes == [(ay.node.id, -1)] and sched.segments[1].reads == [(ay.node.id, -1)]
    assert [s.describe() for s in sched.segments] == ["segment 0 on dev a: ay", "segment 1 on dev b: bx (+1 more)"]
    _check_keys(program, sched.segments, set())
    _check_order(sched.segments, set())


def test_a_conditional_spanning_devices_is_a_host_cond() -> None:
    """A cond whose nodes sit on two devices is a ``HostCond``: the host reads its predicate and runs
    the steps of the taken branch, each branch cut by the same rules (its nodes on device b a
    segment of b, the rest of a). Kills the mutants of ``_host``'s cond and of ``scope``."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = tn.cond(x > 0.0, lambda: tn.add(tn.multiply(x, 2.0, name="t1"), 1.0, name="t2"),
                    lambda: tn.subtract(x, 1.0, name="f1"), name="c")
    program = functionalize(g, [y], [x])
    fed = {x.node.id}
    on_b = {"c/true/t2", "c/false/f1"}
    sched = cut.schedule(program, _by_name(program, lambda n: "b" if n.name in on_b else "a"), fed)
    (region,) = [it for it in program.items if isinstance(it, CondRegion)]
    (hc,) = sched.host_conds
    assert hc.region is region and sched.host_loops == [] and sched.compiled_loops == 0
    assert [type(s) for s in sched.steps] == [Segment, HostCond] and sched.steps[1] is hc
    for b, last in ((False, "c/false/f1"), (True, "c/true/t2")):
        steps = hc.branches[b]
        assert [s.device for s in steps] == ["a", "b"] and all(isinstance(s, Segment) for s in steps)
        assert [n.name for it in steps[1].items for n in item_nodes(it)] == [last]
        assert [it for s in steps for it in s.items] == region.branches[b]
    segs = list(_segments(sched.steps))
    assert [s.index for s in segs] == sorted(s.index for s in segs) == list(range(len(sched.segments)))
    assert segs == sched.segments
    _check_keys(program, segs, fed)


def _spanning_gradient_loop() -> tuple[Program, set[int], dict[int, str], list[WhileRegion]]:
    """A forward loop spanning devices a and b (its tanh on b, a compiled inner loop of its body on
    a, its predicate's product on b, after a constant that waits on the loop's Merge), then its
    gradient: the backward loop, on a alone, comes after the host loop ends."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")

        def body(i: Any, h: Any) -> Any:
            _, inner = tn.while_loop(lambda j, u: j < 2, lambda j, u: (j + 1, tn.sin(u)), [tn.constant(0), h],
                                     name="inner")
            return i + 1, tn.tanh(inner, name="on_b") * 1.1

        _, y = tn.while_loop(lambda i, h: i < tn.multiply(n, 1, name="on_b"), body, [tn.constant(0), x],
                             name="outer")
        (dx,) = tn.gradients(y, [x])
    program = functionalize(g, [y, dx], [x, n])
    fed = {x.node.id, n.node.id}
    device = _by_name(program, lambda m: "b" if m.name in ("outer/body/on_b", "outer/cond/on_b") else "a")
    return program, fed, device, _loops(program)


def test_a_loop_spanning_devices_is_a_host_loop_and_the_loops_in_it_stay_compiled() -> None:
    """A loop whose nodes span devices is a ``HostLoop``: its header, body and exit side cut by the
    same rules, its devices sorted, its home the device of its first Merge, and the stacks it (or a
    loop in it) pushes. A loop with stacks inside a host loop stays compiled whole (driving it would
    make every outer iteration wait for the host); a loop with stacks after the host loop, at the
    root, is driven again. Kills the mutants of ``_host``'s loop, of the host-loop depth and of the
    compiled-loop count."""
    program, fed, device, (forward, backward) = _spanning_gradient_loop()
    sched = cut.schedule(program, device, fed)
    (hl,) = sched.host_loops
    assert hl.region is forward and hl.devices == ["a", "b"] and hl.home == "a"
    assert hl.pushes == _stack_keys(forward, "StackPush") and len(hl.pushes) >= 3
    assert sched.steps.count(hl) == 1 and sched.host_conds == []
    for part, items in ((hl.header, forward.header), (hl.body, forward.body), (hl.exit_side, forward.exit_side)):
        assert [it for s in _segments(part) for it in s.items] != [] or items == []
        assert sorted(n.id for s in _segments(part) for it in s.items for n in item_nodes(it)) == sorted(
            n.id for it in items for n in item_nodes(it))
    assert [s.device for s in hl.header] == ["a", "b", "a"] and [s.device for s in hl.body] == ["a", "b", "a"]
    assert hl.exit_side == []
    # (the header's constant waits on the loop's Merge, a node outside the header's items)
    assert any(c.op == "Merge" for s in hl.header for it in s.items for n in item_nodes(it) for c in n.control_inputs)
    inner = [it for s in hl.body for it in s.items if isinstance(it, WhileRegion)]
    assert len(inner) == 1 and all(s.driven is None for s in _segments([hl]))
    (last,) = [s for s in sched.segments if s.driven is not None]
    assert last.driven is backward and last.items == [backward] and last.device == "a"
    assert sum(isinstance(x, WhileRegion) for x in walk([backward])) + 1 == sched.compiled_loops
    segs = list(_segments(sched.steps))
    assert segs == sched.segments and [s.index for s in segs] == list(range(len(segs)))
    _check_keys(program, segs, fed)


def test_a_host_loop_lives_on_the_device_of_its_first_merge() -> None:
    """A host loop's home is the device of its first loop variable's Merge (where the loop variables
    live), not that of its LoopCond or of another variable. Kills the mutants of ``home``."""
    program, fed, device, (forward, _) = _spanning_gradient_loop()
    first = forward.loop_vars[0]
    for n in (first[0], first[1], first[2]):
        device[n.id] = "c"
    device[forward.loop_cond.id] = "a"
    assert all(device[lv[1].id] != "c" for lv in forward.loop_vars[1:])
    (hl,) = cut.schedule(program, device, fed).host_loops
    assert hl.home == "c" and hl.devices == ["a", "b", "c"]


def test_the_compiled_loops_count_every_loop_on_one_device() -> None:
    """``compiled_loops`` counts every loop compiled whole inside one segment, nested ones included,
    on the host loop's side too; a loop the host drives is not one of them. Kills the mutants of
    ``_cluster``'s count."""
    program, fed, device, (forward, backward) = _spanning_gradient_loop()
    on_one = sum(isinstance(x, WhileRegion) for x in walk(program.items))
    assert cut.schedule(program, dict.fromkeys(device, "a"), fed).compiled_loops == on_one
    assert cut.schedule(program, device, fed).compiled_loops == on_one - 1
    assert on_one == 4  # (the forward loop, its inner loop, the backward loop and its inner loop)


def test_the_exports_are_the_modules_public_definitions() -> None:
    """``cut.__all__`` names each public name the module defines, once (a name left out is missing
    from ``import *`` and from the API docs), and a ``Step`` is a segment, a host cond or a host loop.
    Kills the ``__all__`` mutants that swap a name for another defined one, and ``Step = None``."""
    public = {name for name, v in vars(cut).items() if not name.startswith("_")
              and getattr(v, "__module__", cut.__name__) == cut.__name__ and not isinstance(v, type(typing))}
    public -= {"annotations"}
    assert sorted(cut.__all__) == sorted(public | {"ONE", "Step"}) and len(set(cut.__all__)) == len(cut.__all__)
    assert typing.get_args(cut.Step) == (Segment, HostCond, HostLoop)
    assert isinstance(cut.schedule(_root_program([], []), {}, set()), Schedule)


def test_a_loop_after_a_nested_host_loop_stays_compiled() -> None:
    """A host loop nested in a host loop's body counts one more level of host loops, and each gives
    its level back when it ends: a loop with stacks after the nested one, in the same body, stays
    compiled whole, and once the outer host loop ends the root is at level 0 again, where the
    backward loop is driven. Kills the host-loop depth set to 1 (instead of one more) when a host
    loop starts (the root is left at level -1, and nothing there is driven)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        n = tn.placeholder(tn.int32, [], name="n")

        def body(i: Any, h: Any) -> Any:
            _, u = tn.while_loop(lambda j, u: j < 2, lambda j, u: (j + 1, tn.sin(u, name="span_b")),
                                 [tn.constant(0), h], name="spanning")
            _, v = tn.while_loop(lambda j, v: j < 2, lambda j, v: (j + 1, tn.tanh(v)), [tn.constant(0), u],
                                 name="after")
            return i + 1, v

        _, y = tn.while_loop(lambda i, h: i < n, body, [tn.constant(0), x], name="outer")
        (dx,) = tn.gradients(y, [x])
    program = functionalize(g, [y, dx], [x, n])
    fed = {x.node.id, n.node.id}
    sched = cut.schedule(program, _by_name(program, lambda m: "b" if m.name.endswith("/span_b")
                                           and not m.name.startswith("gradients") else "a"), fed)
    outer = next(hl for hl in sched.host_loops if len(hl.region.frame) == 1)
    assert len(sched.host_loops) == 2 and sched.host_loops[-1] is outer
    after = [it for s in _segments(outer.body) for it in s.items
             if isinstance(it, WhileRegion) and it.frame[-1].startswith("outer/body/after")]
    assert len(after) == 1 and _stack_ops_of(after[0])
    assert all(s.driven is None for s in _segments([outer]))
    assert [s.driven is not None for s in sched.segments].count(True) == 1  # (the backward loop, at the root)


def _stack_ops_of(loop: WhileRegion) -> set[str]:
    return _stack_keys(loop, "StackPush") | _stack_keys(loop, "StackPop")


def test_a_host_loop_without_loop_variables_lives_on_the_device_of_its_loop_cond() -> None:
    """A loop built from the primitives may have no loop variable (its predicate and the value it
    hands out are invariants: it runs no iteration here); spanning devices, it is a host loop whose
    home is its LoopCond's device. Kills the home read from a first loop variable that is not there."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        p = raw.enter(tn.constant(False, name="f"), "frame", is_constant=True, name="p_in")
        lc = raw.loop_cond(tn.logical_not(tn.logical_not(p, name="n1"), name="n2"), name="lc")
        out = raw.exit(raw.switch(raw.enter(x, "frame", is_constant=True, name="x_in"), lc, name="sw")[0], name="out")
        y = tn.add(out, 1.0, name="y")
    program = functionalize(g, [y], [x])
    (loop,) = _loops(program)
    assert loop.loop_vars == []
    (hl,) = cut.schedule(program, _by_name(program, lambda n: "b" if n.name in ("n2", "lc") else "a"),
                         {x.node.id}).host_loops
    assert hl.region is loop and hl.home == "b" and hl.devices == ["a", "b"]
