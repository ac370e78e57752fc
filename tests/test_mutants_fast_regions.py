"""Laws of the region tree (``turnout.fast.regions``): the keys of tensors, what a cond hands out,
which node an error about its predicate names, how a loop frame is described, the nodes of a
program, the depth-first walk, the loops' numbers and heights, and how deep regions nest. Each law
kills mutants of the full set of ``fast/regions.py`` (issue 40, part 3; ``python tools/mutation.py
--module fast/regions.py --all``).

The regions are built by hand (``CondRegion`` and ``WhileRegion`` over nodes made with
``Graph.create_node`` and fixed specs): no tracing and no compile, so the whole file takes well
under a second. The programs that ``functionalize`` raises to regions and compiles are in
``test_fast_loop_forms.py``, ``test_fast_nested_compile.py`` and ``test_fast_case_chain.py``.
"""

from __future__ import annotations

import pytest

from turnout.dtypes import bool_, int32
from turnout.errors import describe_node
from turnout.fast.regions import (
    EMPTY,
    CondRegion,
    Item,
    Program,
    WhileRegion,
    cond_exports,
    cond_outputs,
    item_nodes,
    key,
    loop_height,
    loop_number,
    nesting,
    pred_reader,
    program_nodes,
    tensor_of,
    walk,
)
from turnout.graph import Graph, Node
from turnout.specs import TensorSpec

INT = TensorSpec(int32, ())
BOOL = TensorSpec(bool_, ())


def _node(g: Graph, name: str, *inputs: Node, op: str = "Identity", outputs: int = 1) -> Node:
    """A node of ``op`` reading the first output of each input, with ``outputs`` int32 outputs."""
    return g.create_node(op, [x.outputs[0] for x in inputs], {}, name=name, specs=[INT] * outputs)


def _cond(g: Graph, name: str, false: list[Item], true: list[Item]) -> CondRegion:
    """A cond on a fresh predicate with the given branches (no Switches, Merges or nodes)."""
    p = g.create_node("Const", [], {}, name=f"{name}/p", specs=[BOOL])
    return CondRegion(pred=p.outputs[0], scope=EMPTY, switches=[], merges=[], branches={False: false, True: true})


def _loop(g: Graph, name: str, header: list[Item], body: list[Item], exit_side: list[Item]) -> WhileRegion:
    """A loop frame with the given parts (no loop variables or invariants)."""
    lc = _node(g, f"{name}/cond", op="LoopCond")
    return WhileRegion(frame=("", name), loop_cond=lc, loop_vars=[], invariants=[], switches=[], exits=[],
                       header=header, body=body, exit_side=exit_side, carried=[], parallel_iterations=1)


# ---- keys ---------------------------------------------------------------------------------------------------
def test_a_key_names_its_tensor_and_tensor_of_inverts_it() -> None:
    """``key`` is (node id, output index) and ``tensor_of`` finds that tensor again, at an output
    other than the first of a node whose id is not its output index. Kills ``tensor_of`` reading
    the node at ``k[1]`` or the output at ``k[2]``."""
    g = Graph()
    _node(g, "a")
    _node(g, "b")
    n = _node(g, "n", outputs=3)
    for t in n.outputs:
        assert key(t) == (n.id, t.index)
        assert tensor_of(g, key(t)) is t


def test_the_empty_guard_is_the_empty_conjunction() -> None:
    """``EMPTY`` is the guard without literals: joined with a literal it is that literal alone (a node
    at the root scope fires live always). Kills ``EMPTY`` made ``None``."""
    lit = ((0, 0), True)
    assert EMPTY | {lit} == frozenset({lit}) and not EMPTY


# ---- a cond's outputs and predicate ------------------------------------------------------------------------
def _cond_with_merges() -> tuple[Graph, CondRegion, dict[str, Node]]:
    """A cond on ``p`` with two Switches, a node in each branch and one Merge joining them; every node
    is in ``nodes``."""
    g = Graph()
    x = _node(g, "x", op="Const")
    p = g.create_node("Const", [], {}, name="p", specs=[BOOL])
    sw0 = g.create_node("Switch", [x.outputs[0], p.outputs[0]], {}, name="sw0", specs=[INT, INT])
    sw1 = g.create_node("Switch", [x.outputs[0], p.outputs[0]], {}, name="sw1", specs=[INT, INT])
    f = _node(g, "f", sw0)
    t = g.create_node("Identity", [sw1.outputs[1]], {}, name="t", specs=[INT])
    m = g.create_node("Merge", [f.outputs[0], t.outputs[0]], {}, name="m", specs=[INT, INT])
    r = CondRegion(pred=p.outputs[0], scope=EMPTY, switches=[sw0, sw1], merges=[(m, {False: 0, True: 1})],
                   branches={False: [f], True: [t]}, nodes=[sw0, sw1, f, t, m])
    return g, r, {"x": x, "p": p, "sw0": sw0, "sw1": sw1, "f": f, "t": t, "m": m}


def test_a_cond_hands_out_its_fetched_branch_values_and_its_exports_sorted_but_not_its_merges() -> None:
    """``cond_exports``: the fetched outputs of the nodes inside the cond, other than its Merges (they
    leave as the cond's results anyway), joined with its ``exports``, sorted; a value not fetched and
    not exported stays inside. Kills the Merges' ids made None or the test on them inverted, the
    fetch test inverted, a key made of None, the union made an intersection and the exports made
    None."""
    _, r, n = _cond_with_merges()
    r.exports = [key(n["sw1"].outputs[1])]
    fetch = {key(n["t"].outputs[0]), key(n["m"].outputs[0]), key(n["x"].outputs[0])}
    assert cond_exports(r, fetch) == sorted([key(n["t"].outputs[0]), key(n["sw1"].outputs[1])])
    assert cond_exports(r, set()) == [key(n["sw1"].outputs[1])]


def test_a_cond_gives_out_each_merges_value_and_index_then_its_exports() -> None:
    """``cond_outputs``: per Merge its value and its index, in order, then the exports given. Kills the
    lists subtracted, a key made of None and the exports made None."""
    _, r, n = _cond_with_merges()
    exports = [key(n["f"].outputs[0])]
    m = n["m"]
    assert cond_outputs(r, exports) == [key(m.outputs[0]), key(m.outputs[1]), key(n["f"].outputs[0])]
    assert cond_outputs(r, []) == [key(m.outputs[0]), key(m.outputs[1])]


def test_an_error_about_a_conds_predicate_names_its_first_switch_or_else_the_predicates_node() -> None:
    """``pred_reader``: the first of the cond's Switches; a cond without Switches (a gradient's, whose
    branches only join values) names the node that computes its predicate. Kills the test made
    always false or always true and the second Switch named."""
    _, r, n = _cond_with_merges()
    assert pred_reader(r) is n["sw0"]
    r.switches = []
    assert pred_reader(r) is n["p"]


# ---- a loop frame's description --------------------------------------------------------------------------------
def test_a_loop_frame_is_described_by_its_innermost_frame_name_and_its_first_enter() -> None:
    """``WhileRegion.describe``: the last name of the frame, and the Enter created first among the loop
    variables' and the invariants' (it carries the user's line of the loop), here an invariant listed
    after a loop variable; a loop with neither says no more than its frame. Kills the Enters made
    None or subtracted, the Merge taken for the Enter, the invariants made None, the clause made
    None, always or never given or ``XXXX`` without Enters, ``min`` given None, no list, no key or a
    key of None, and the frame's name read at ``[+1]`` or ``[-2]``."""
    g = Graph()
    x = _node(g, "x", op="Const")
    inv = _node(g, "inv", x, op="Enter")
    enter = _node(g, "enter", x, op="Enter")
    merge = _node(g, "merge", enter, op="Merge", outputs=2)
    nxt = _node(g, "next", merge, op="NextIteration")
    lc = _node(g, "cond", merge, op="LoopCond")
    r = WhileRegion(frame=("", "outer", "outer/loop"), loop_cond=lc, loop_vars=[(enter, merge, nxt, 0, 0)],
                    invariants=[inv], switches=[], exits=[], header=[], body=[], exit_side=[], carried=[],
                    parallel_iterations=1)
    assert r.describe() == f"loop frame 'outer/loop' (entered by {describe_node(inv)})"
    r.invariants = []
    assert r.describe() == f"loop frame 'outer/loop' (entered by {describe_node(enter)})"
    r.loop_vars = []
    assert r.describe() == "loop frame 'outer/loop'"


# ---- defaults of the dataclasses -----------------------------------------------------------------------------
def test_regions_and_programs_made_without_their_optional_parts_start_each_with_empty_ones_of_their_own() -> None:
    """A ``CondRegion`` made without ``nodes`` or ``exports``, a ``WhileRegion`` without ``nodes`` or
    ``facts`` and a ``Program`` without its stack sets and loop numbers each get empty ones, not
    shared with another instance. Kills each default made None or its factory None."""
    g = Graph()
    c1, c2 = _cond(g, "c1", [], []), _cond(g, "c2", [], [])
    assert c1.nodes == [] and c1.exports == [] and c1.nodes is not c2.nodes and c1.exports is not c2.exports
    w1, w2 = _loop(g, "w1", [], [], []), _loop(g, "w2", [], [], [])
    assert w1.nodes == [] and w1.facts == {} and w1.nodes is not w2.nodes and w1.facts is not w2.facts
    p1, p2 = Program(items=[], guards={}, fetch_keys=[]), Program(items=[], guards={}, fetch_keys=[])
    for d1, d2 in ((p1.stacks_pushed, p2.stacks_pushed), (p1.stacks_popped, p2.stacks_popped),
                   (p1.loop_numbers, p2.loop_numbers)):
        assert d1 == {} and d1 is not d2


def test_a_loops_facts_are_no_part_of_its_repr_or_its_equality() -> None:
    """``WhileRegion.facts`` (computed once from the region alone) is left out of the repr and of
    ``==``: a region whose facts were filled is the region it was. Kills ``repr`` or ``compare`` made
    true or left to its default."""
    g = Graph()
    lc = _node(g, "cond", op="LoopCond")
    parts = dict(frame=("", "loop"), loop_cond=lc, loop_vars=[], invariants=[], switches=[], exits=[], header=[],
                 body=[], exit_side=[], carried=[], parallel_iterations=1)
    a, b = WhileRegion(**parts), WhileRegion(**parts)  # type: ignore[arg-type]
    a.facts["trips"] = 3
    assert a == b and "facts" not in repr(a) and "trips" not in repr(a)


# ---- a program's nodes, the walk -------------------------------------------------------------------------------
def test_a_programs_nodes_are_its_plain_nodes_and_its_regions_nodes_once_each_in_first_seen_order() -> None:
    """``item_nodes``: a node is itself, a region its ``nodes``; ``program_nodes``: all of them over the
    root items, each once, in the order first met. Kills the node test made always false or always
    true, the collection made None, the region's nodes asked of None and the nodes stored as None."""
    g = Graph()
    a, b, c = _node(g, "a"), _node(g, "b"), _node(g, "c")
    r = _cond(g, "r", [b], [c])
    r.nodes = [b, c, a]
    assert item_nodes(a) == [a] and item_nodes(r) == [b, c, a]
    p = Program(items=[a, r], guards={}, fetch_keys=[])
    assert program_nodes(p) == [a, b, c]


class _Tree:
    """Regions nested in every position the walks follow: at the root a node, a cond whose false
    branch holds a loop (with a loop in its header, two in its body and one in its exit side) and
    whose true branch holds a loop with a cond in its body, then a last loop."""

    def __init__(self) -> None:
        g = Graph()
        n = iter(range(100))

        def node() -> Node:
            return _node(g, f"n{next(n)}")

        self.n0, self.h1, self.b1, self.b2, self.e1 = node(), node(), node(), node(), node()
        self.h_loop = _loop(g, "h_loop", [self.h1], [], [])
        self.b_loop1 = _loop(g, "b_loop1", [], [self.b1], [])
        self.b_loop2 = _loop(g, "b_loop2", [], [self.b2], [])
        self.e_loop = _loop(g, "e_loop", [], [], [self.e1])
        self.f_loop = _loop(g, "f_loop", [self.h_loop], [self.b_loop1, self.b_loop2], [self.e_loop])
        self.t1, self.t2 = node(), node()
        self.inner_cond = _cond(g, "inner", [self.t1], [self.t2])
        self.t_loop = _loop(g, "t_loop", [], [self.inner_cond], [])
        self.cond = _cond(g, "cond", [self.f_loop], [self.t_loop])
        self.last = _loop(g, "last", [], [], [])
        self.items: list[Item] = [self.n0, self.cond, self.last]
        #: the loops in depth-first pre-order
        self.loops = [self.f_loop, self.h_loop, self.b_loop1, self.b_loop2, self.e_loop, self.t_loop, self.last]


def test_the_walk_is_depth_first_regions_before_their_contents_false_branch_and_header_first() -> None:
    """``walk``: every item once, a region before its contents; a cond's false branch before its true
    one, a loop's header before its body before its exit side. Kills the result or the work list
    made None, the work list replaced or subtracted, the branches or parts joined with ``-``, the
    same branch taken twice and the item or what is appended made None."""
    t = _Tree()
    assert walk(t.items) == [t.n0, t.cond, t.f_loop, t.h_loop, t.h1, t.b_loop1, t.b1, t.b_loop2, t.b2, t.e_loop, t.e1,
                             t.t_loop, t.inner_cond, t.t1, t.t2, t.last]
    assert walk([]) == []


def test_loops_are_numbered_from_one_in_the_walks_order_through_conds() -> None:
    """``loop_number``: a loop's place among the program's loops in ``walk``'s order, from 1 (so a
    loop's first nested loop is one more than it), through both branches of conds and every part
    of a loop. Kills every change to the work list's order or contents, the loop recorded as None,
    the numbers made from 0 or 2, and each number stored as None."""
    t = _Tree()
    p = Program(items=t.items, guards={}, fetch_keys=[])
    assert [loop_number(p, r) for r in t.loops] == list(range(1, len(t.loops) + 1))
    assert [r for r in walk(t.items) if isinstance(r, WhileRegion)] == t.loops


def test_a_loops_height_counts_the_loops_nested_inside_it_through_conds() -> None:
    """``loop_height``: 1 for a loop with no loop inside, else one more than its tallest inner loop,
    conds passed through; loops at one level take the tallest, not the last. Kills the heights made
    None or started at 2, stored under None, the outer loop's test inverted, its height made None,
    the tallest taken as the last or ``max`` given one argument, the inner height counted minus one or
    plus two, and the height read under None."""
    t = _Tree()
    g = Graph()
    deep = _loop(g, "deep", [], [], [])
    mid = _loop(g, "mid", [], [deep], [])
    short = _loop(g, "short", [], [], [])
    outer = _loop(g, "outer", [], [short, mid], [])  # a short inner loop, then the tallest: its height is met first
    t.items.append(outer)
    p = Program(items=t.items, guards={}, fetch_keys=[])
    heights = {id(r): loop_height(p, r) for r in [*t.loops, deep, mid, short, outer]}
    assert heights[id(t.f_loop)] == 2 and heights[id(t.t_loop)] == 1 and heights[id(t.last)] == 1
    assert all(heights[id(r)] == 1 for r in (t.h_loop, t.b_loop1, t.b_loop2, t.e_loop, deep, short))
    assert heights[id(mid)] == 2 and heights[id(outer)] == 3


def test_a_loop_outside_the_programs_tree_has_number_and_height_zero() -> None:
    """A loop that is not in the program's tree is numbered 0 and has height 0, after the program's own
    loops are numbered. Kills the default made None or given ``(1, 0)`` or ``(0, 1)``, the lookup by
    None or by ``id(None)``, the default dropped, and the height read at ``[2]`` or the number at
    ``[1]``."""
    t = _Tree()
    p = Program(items=t.items, guards={}, fetch_keys=[])
    stray = _loop(Graph(), "stray", [], [], [])
    assert loop_number(p, stray) == 0 and loop_height(p, stray) == 0
    assert loop_number(p, t.last) == len(t.loops) and loop_height(p, t.f_loop) == 2


def test_loops_are_numbered_once_and_the_numbers_kept() -> None:
    """``_number_loops`` fills ``loop_numbers`` on first use and leaves it as it is after: a program's
    numbers stay the ones it was given first. Kills the numbering done on None."""
    t = _Tree()
    p = Program(items=t.items, guards={}, fetch_keys=[])
    assert loop_number(p, t.h_loop) == 2
    assert set(p.loop_numbers) == {id(r) for r in t.loops}
    p.loop_numbers[id(t.h_loop)] = (7, 9)
    assert loop_number(p, t.h_loop) == 7 and loop_height(p, t.h_loop) == 9


# ---- nesting ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["false", "true", "header", "body", "exit_side"])
def test_nesting_counts_regions_inside_regions_in_every_part(where: str) -> None:
    """``nesting``: 0 for plain nodes, 1 for a region holding no region, one more per region inside,
    through either branch of a cond and every part of a loop; a deeper region listed after a shallower
    sibling, or before one, counts. Kills the depth started at 1 or None, the work list made None, the
    depth taken as None, the ``max`` dropped or given None or one argument, depths counted minus one or
    plus two in any part, the work list replaced or subtracted, and one branch taken twice."""
    g = Graph()
    a = _node(g, "a")
    assert nesting([a]) == 0 and nesting([]) == 0
    leaf = _cond(g, "leaf", [a], [a])
    inner = _loop(g, "inner", [], [leaf], [])  # depth 2 below its holder
    parts: dict[str, list[Item]] = {k: [] for k in ("false", "true", "header", "body", "exit_side")}
    parts[where] = [inner]
    if where in ("false", "true"):
        holder: Item = _cond(g, "holder", parts["false"], parts["true"])
    else:
        holder = _loop(g, "holder", parts["header"], parts["body"], parts["exit_side"])
    assert nesting([_cond(g, "lone", [a], [])]) == 1 and nesting([_loop(g, "lone_loop", [], [], [])]) == 1
    shallow = _cond(g, "shallow", [a], [a])
    assert nesting([holder]) == 3
    assert nesting([holder, shallow]) == 3 and nesting([shallow, holder]) == 3
    assert nesting([holder, _loop(g, "after", [], [], [])]) == 3  # (a loop after a deeper region)
    assert nesting([a, _loop(g, "wrap", [], [holder, shallow], [])]) == 4

