"""Laws of placement (``turnout.devices.placement``): which device each node gets, and the reason
``Placement.why`` gives for it. Each law kills mutants of the full set of ``devices/placement.py``
(issue 40, part 3; ``python tools/mutation.py --module devices/placement.py --all``): a resource
user not tied to its maker, a loop's Merge tied to the wrong input, a rule dropped from a group's
ties, a request that never applied, an order in which a backward op came before its forward op, an
error or a reason that named the wrong node, device or rule.

The graphs are built node by node with ``Graph.create_node`` and fixed specs (no shape inference,
no session, no run): placement reads only each node's op, inputs, control inputs, device scope,
``colocate_with`` ties and ``gradient_of``, so each test takes milliseconds.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from turnout.devices.names import canonical, parse
from turnout.devices.placement import (
    RESOURCE_MAKERS,
    RESOURCE_USERS,
    Placement,
    Placer,
    _Groups,
    _order,
    colocation_groups,
    place,
    resource_creator,
)
from turnout.dtypes import float32
from turnout.errors import PlacementError, describe_node
from turnout.frames import same_iteration_preds, topological_order
from turnout.graph import BACK_EDGE, Graph, Node
from turnout.specs import TensorSpec

SPEC = TensorSpec(float32, ())
D2 = ["cpu:0", "cpu:1"]
D3 = ["cpu:0", "cpu:1", "cpu:2"]
CPU = [canonical(d) for d in D3]
FORWARDERS = ["Identity", "Enter", "Exit", "Switch", "Merge", "NextIteration", "StopGradient"]
SOFT = " (allow_soft_placement)"


@pytest.fixture(autouse=True)
def _bounded() -> Iterator[None]:
    """A mutant that loops forever (a union-find root that never answers, a cycle of handle forwarders
    walked without memory) fails its test within ten seconds (each test takes milliseconds) instead
    of holding the campaign until its timeout: SIGALRM raises inside the test; the handler and the
    timer are restored after it."""

    def stop(signum: int, frame: Any) -> None:
        raise TimeoutError("placement did not finish within 10 s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 10.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _op(g: Graph, op: str, *inputs: Any, name: str, control: tuple[Node, ...] = ()) -> Node:
    """A node of ``op`` with one scalar output, reading the first output of each input node
    (``BACK_EDGE`` stays a pending Merge slot)."""
    ins = [x.outputs[0] if isinstance(x, Node) else x for x in inputs]
    return g.create_node(op, ins, {}, name=name, control_inputs=control, specs=[SPEC])


def _loop(g: Graph, source: Node, back_first: bool = False) -> tuple[Node, Node, Node, Node]:
    """A loop's plumbing on ``source``: Enter, Merge, an Identity body, NextIteration (the back edge
    closed into the Merge's slot 0 when ``back_first``, else slot 1)."""
    e = _op(g, "Enter", source, name="enter")
    m = _op(g, "Merge", *((BACK_EDGE, e) if back_first else (e, BACK_EDGE)), name="merge")
    body = _op(g, "Identity", m, name="body")
    ni = _op(g, "NextIteration", body, name="next")
    m.close_back_edge(ni.outputs[0])
    return e, m, body, ni


def _conflict(*asked: tuple[Node, str], ties: str) -> str:
    """The error of a colocation group whose members are scoped to different devices."""
    who = ", ".join(f"{describe_node(n)} on {d}" for n, d in asked)
    return (f"conflicting placement: {who} must share one device, because {ties} "
            "(allow_soft_placement=True resolves it by the colocation rule)")


# ---- colocation: resources, loops, colocate_with --------------------------------------------------------
@pytest.mark.parametrize("maker", sorted(RESOURCE_MAKERS))
@pytest.mark.parametrize("user", sorted(RESOURCE_USERS))
def test_every_resource_user_must_share_its_makers_device(maker: str, user: str) -> None:
    """Rule 1: an op on a resource sits with the op that made it, so the resource's state lives on
    one device; scoped apart, they are a conflict naming both and the rule. Kills a name dropped or
    misspelt from ``RESOURCE_USERS`` or ``RESOURCE_MAKERS``, and the conflict's message mutated."""
    g = Graph()
    with g.device("cpu:1"):
        m = _op(g, maker, name="m")
    with g.device("cpu:0"):
        u = _op(g, user, m, name="u")
    with pytest.raises(PlacementError) as e:
        place(g, D2)
    ties = f"u ({user}) uses the resource made by m ({maker})"
    assert str(e.value) == _conflict((m, "cpu:1"), (u, "cpu:0"), ties=ties)


@pytest.mark.parametrize("forwarder", FORWARDERS)
def test_a_handle_is_traced_to_its_maker_through_each_forwarder_and_no_other_op(forwarder: str) -> None:
    """A handle passed through the plumbing that forwards input 0 unchanged still belongs to its
    maker; through any other op (an Add) it is no handle of that maker. Kills each forwarder's name
    mutated in ``_FORWARDERS`` and the walk's tests inverted."""
    g = Graph()
    m = _op(g, "VarHandle", name="m")
    other = _op(g, "Const", name="other")
    f = _op(g, forwarder, m, other, name="f")  # (input 1 is no handle: the walk follows input 0 only)
    assert resource_creator(f.outputs[0]) is m
    assert resource_creator(_op(g, "Identity", f, name="again").outputs[0]) is m
    assert resource_creator(_op(g, "Add", m, other, name="add").outputs[0]) is None
    assert resource_creator(other.outputs[0]) is None


def test_a_walk_stops_at_a_forwarder_without_a_tensor_input_and_on_a_cycle() -> None:
    """The walk back from a handle ends (with no maker) at a forwarder with no inputs, at a Merge
    whose input 0 is a back edge not yet bound, and on a cycle of forwarders (a loop's Merge,
    body and NextIteration), which it must not walk forever. Kills the walk's tests joined by ``and``
    (an index past the inputs) and a walk that remembers nothing (``seen.add(None)``)."""
    g = Graph()
    assert resource_creator(_op(g, "Identity", name="bare").outputs[0]) is None
    pending = _op(g, "Merge", BACK_EDGE, name="pending")
    assert resource_creator(pending.outputs[0]) is None
    _, m, body, ni = _loop(g, _op(g, "Const", name="c"), back_first=True)
    assert resource_creator(ni.outputs[0]) is None
    assert resource_creator(body.outputs[0]) is None


def test_a_loop_merge_is_tied_to_its_next_iteration_only() -> None:
    """Rule 1: a NextIteration sits with the Merge it feeds (a back edge never crosses devices); the
    Merge's entry (its Enter) and the body are free. Kills the Merge and NextIteration names mutated
    in the test, ``or`` for ``and``, and a tie to every input of a Merge."""
    g = Graph()
    c = _op(g, "Const", name="c")
    e, m, body, ni = _loop(g, c)
    groups = colocation_groups(g, g.nodes)
    root = groups.find(m.id)
    assert groups.find(ni.id) == root and groups.find(e.id) != root and groups.find(body.id) != root
    assert groups.ties == {root: ["next is the NextIteration of loop Merge merge"]}


def test_only_a_resource_user_is_tied_and_through_forwarders() -> None:
    """An Identity forwarding a handle is not a resource user: it is not tied to the maker; the
    ReadVariable after it is, however far the handle went. Kills every op with a tensor input 0 taken
    for a resource user (``or``), and the handle looked for at input 1."""
    g = Graph()
    m = _op(g, "VarHandle", name="m")
    fwd = _op(g, "Identity", m, name="fwd")
    read = _op(g, "ReadVariable", fwd, name="read")
    groups = colocation_groups(g, g.nodes)
    assert groups.find(read.id) == groups.find(m.id) != groups.find(fwd.id)
    assert groups.ties[groups.find(m.id)] == ["read (ReadVariable) uses the resource made by m (VarHandle)"]


def test_the_rules_that_joined_a_group_are_kept_in_the_order_they_were_applied() -> None:
    """Union-find keeps every rule that joined a group once: a union joins the rules of the first
    member's group, then the second's, then its own (two groups with ties each; then a rule joining
    two members already together); the root is the smallest id. Kills ties dropped or doubled when two
    groups merge, and a root not found."""
    g = Graph()
    a, b, c, d = (_op(g, "Const", name=x) for x in "abcd")
    groups = _Groups(g.nodes)
    groups.union(b, a, "ab")
    groups.union(d, c, "cd")
    groups.union(d, b, "db")
    assert {groups.find(n.id) for n in (a, b, c, d)} == {a.id}
    assert groups.ties == {a.id: ["cd", "ab", "db"]}
    groups.union(c, a, "again")
    assert groups.ties == {a.id: ["cd", "ab", "db", "again"]}


def test_a_tie_to_a_node_outside_the_grouped_nodes_is_ignored() -> None:
    """Groups over a subset of a graph's nodes (a partition's, say) ignore a rule naming a node
    outside it, on either side. Kills the membership test made ``and`` or inverted."""
    g = Graph()
    a, b = _op(g, "Const", name="a"), _op(g, "Const", name="b")
    groups = _Groups([a])
    groups.union(a, b, "out")
    groups.union(b, a, "out")
    assert groups.find(a.id) == a.id and groups.ties == {}


def test_colocate_with_ties_a_node_and_names_the_scope() -> None:
    """``tn.colocate_with`` ties an op to the op given, and the tie is named in the reasons of the
    group's other members. Kills the ``colocation`` lookup mutated and the tie's rule dropped."""
    g = Graph()
    with g.device("cpu:1"):
        a = _op(g, "Const", name="a")
    with g.colocate_with(a):
        b = _op(g, "Const", name="b")
    c = _op(g, "Const", name="c")
    p = place(g, D2)
    assert (p[b], p[c]) == (CPU[1], CPU[0])
    assert p.why(a) == "device scope of a"
    assert p.why(b) == "device scope of a; colocated (b was built under colocate_with(a))"
    assert p.why(c) == "default device"


# ---- the Placement record ----------------------------------------------------------------------------
def test_a_placement_answers_for_a_node_its_tensor_and_its_name() -> None:
    """``p[x]`` and ``p.why(x)`` take a node, one of its tensors or its name; ``nodes_on`` takes any
    spelling of a device and lists its nodes in creation order; ``describe`` gives one line per device,
    an empty one too. Kills the lookups given no graph or no node and the listing inverted."""
    g = Graph()
    a = _op(g, "Const", name="a")
    with g.device("/device:CPU:1"):
        b = _op(g, "Identity", a, name="b")
    c = _op(g, "Identity", a, name="c")
    p = place(g, D3)
    assert p[b] == p[b.outputs[0]] == p["b"] == CPU[1]
    assert p.why(b) == p.why(b.outputs[0]) == p.why("b") == "device scope of b"
    assert p.nodes_on("cpu:0") == p.nodes_on(parse("/cpu:0")) == [a, c]
    assert p.nodes_on("cpu:1") == [b]
    assert p.describe() == "cpu:0: a, c\ncpu:1: b\ncpu:2: (nothing)"


def test_a_placement_built_by_hand_has_no_reasons_of_its_own() -> None:
    """``Placement`` built without reasons (as partition tests build one) starts with an empty dict of
    its own, not shared with another. Kills the default factory removed."""
    g = Graph()
    first, second = Placement(g, D2, {}), Placement(g, D2, {})
    assert first.reasons == {} and first.reasons is not second.reasons


# ---- device lists, scopes and requests ------------------------------------------------------------------
def test_a_device_list_is_canonical_nonempty_and_without_repeats() -> None:
    """``place`` needs at least one device, and one listed twice (in any spelling) is an error naming
    it; the placement keeps the canonical names in the order given. Kills each check inverted, a
    name dropped and the messages mutated."""
    g = Graph()
    _op(g, "Const", name="a")
    assert place(g, ["cpu:1", "/cpu:0"]).devices == [CPU[1], CPU[0]]
    with pytest.raises(PlacementError) as e:
        place(g, [])
    assert str(e.value) == "place needs at least one device"
    with pytest.raises(PlacementError) as e:
        place(g, ["cpu:0", "/cpu:0"])
    assert str(e.value) == f"device '/cpu:0' is listed twice (as {CPU[0]})"


@pytest.mark.parametrize("soft", [False, True])
def test_a_device_name_that_does_not_parse_is_an_error_naming_the_node_and_the_source(soft: bool) -> None:
    """A scope or a request that is no device name stays an error with soft placement too, and says
    which node asked, and how (scope or request). Kills the node or the wording dropped. (A
    ``tn.device`` scope refuses such a name itself, so the node's device is written directly, as a
    graph built by other means than the scope may carry it.)"""
    with pytest.raises(PlacementError) as bad:
        canonical("cpu:x")
    g = Graph()
    a = _op(g, "Const", name="a")
    a.device = "cpu:x"
    with pytest.raises(PlacementError) as e:
        place(g, D2, allow_soft_placement=soft)
    assert str(e.value) == f"{describe_node(a)} is scoped to device 'cpu:x': {bad.value}"
    g2 = Graph()
    b = _op(g2, "Const", name="b")
    with pytest.raises(PlacementError) as e:
        place(g2, D2, requests={"b": "cpu:x"}, allow_soft_placement=soft)
    assert str(e.value) == f"{describe_node(b)} is requested on device 'cpu:x': {bad.value}"


@pytest.mark.parametrize(("how", "what"), [("scope", "is scoped to device"), ("request", "is requested on device")])
def test_a_device_not_listed_is_an_error_that_says_how_to_place_it_anyway(how: str, what: str) -> None:
    """Rule 2 without soft placement: a scope or request naming a device not in the list is an error
    naming the node, the device (as asked and canonical), the list, and ``allow_soft_placement``."""
    g = Graph()
    with g.device("gpu:0" if how == "scope" else None):
        a = _op(g, "Const", name="a")
    requests = {"a": "gpu:0"} if how == "request" else None
    with pytest.raises(PlacementError) as e:
        place(g, D2, requests=requests)
    assert str(e.value) == (f"{describe_node(a)} {what} 'gpu:0' ({canonical('gpu:0')}), which is not one of the "
                            "devices ['cpu:0', 'cpu:1'] (allow_soft_placement=True places it on a device of its "
                            "task, or by the default rules) (argument devices of place)")


def test_requests_place_groups_nobody_scoped_and_yield_to_scopes() -> None:
    """Soft requests: a group with no scope takes the first request of its members (in build order);
    a scope wins over a request; a request naming no node of the graph is ignored. Kills each test of
    the request rule inverted or ``or`` for ``and``, and the request's device or reason dropped."""
    g = Graph()
    a = _op(g, "Const", name="a")
    with g.colocate_with(a):
        b = _op(g, "Const", name="b")
    with g.device("cpu:0"):
        s = _op(g, "Const", name="s")
    free = _op(g, "Const", name="free")
    p = place(g, D3, requests={"b": "cpu:2", "a": "cpu:1", "s": "cpu:1", "nobody": "cpu:2"})
    assert (p[a], p[b], p[s], p[free]) == (CPU[1], CPU[1], CPU[0], CPU[0])
    assert (p.why(a), p.why(s), p.why(free)) == ("requested; colocated (b was built under colocate_with(a))",
                                                 "device scope of s", "default device")
    q = place(g, D3)
    assert (q[a], q[b]) == (CPU[0], CPU[0])


# ---- soft placement -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("devices", "asked", "placed"), [
    (["cpu:0", "gpu:0", "gpu:1"], "gpu:5", "gpu:0"),  # the first of its task and type
    (["gpu:0", "cpu:1", "cpu:0"], "cpu:7", "cpu:1"),
    (["gpu:0", "gpu:1"], "cpu:3", "gpu:0"),           # no device of its type: the first of its task
    (["/job:w/task:1/device:CPU:0", "/job:w/task:0/device:GPU:0", "/job:w/task:0/device:CPU:1"],
     "/job:w/task:0/device:CPU:4", "/job:w/task:0/device:CPU:1"),
    (["/job:w/task:0/device:CPU:0", "/job:v/task:1/device:CPU:1", "/job:w/task:1/device:CPU:2"],
     "/job:w/task:1/device:GPU:0", "/job:w/task:1/device:CPU:2"),
])
def test_soft_placement_keeps_a_requests_job_and_task_and_prefers_its_type(devices: list[str], asked: str,
                                                                             placed: str) -> None:
    """Soft placement of a device not listed: the first listed device of the same job and task, one
    of the same type first, as TensorFlow's placer does; the reason says what was asked and where it
    went. Kills each filter inverted, ``and`` for ``or`` and the second candidate taken."""
    g = Graph()
    with g.device(asked):
        a = _op(g, "Const", name="a")
    p = place(g, devices, allow_soft_placement=True)
    assert p[a] == canonical(placed)
    assert p.why(a) == (f"asked for {parse(asked).short}, which is not one of the devices: placed on "
                        f"{parse(placed).short}, the first listed device of its task{SOFT}; device scope of a")


def test_soft_placement_drops_a_request_whose_task_has_no_device() -> None:
    """A scope or request naming a task with no listed device is dropped: the node is placed by the
    defaults (here, after its input), and its reason says so. Kills the drop taken for a placement."""
    g = Graph()
    with g.device("cpu:1"):
        a = _op(g, "Const", name="a")
    far = "/job:worker/task:1/device:CPU:0"
    with g.device(far):
        b = _op(g, "Identity", a, name="b")
    c = _op(g, "Const", name="c")
    p = place(g, D2, requests={"c": far}, allow_soft_placement=True)
    dropped = (f"asked for {far}, which is not one of the devices: no listed device is of its task, so the "
               f"request is dropped{SOFT}")
    assert (p[b], p.why(b)) == (CPU[1], f"{dropped}; follows its input a:0")
    assert (p[c], p.why(c)) == (CPU[0], f"{dropped}; default device")


def test_a_conflict_is_an_error_unless_soft_placement_lets_the_later_members_yield() -> None:
    """Rule 2: members of one group scoped to different devices are a conflict naming each member's
    device and every rule tying them; with soft placement the group keeps its earliest-built scoped
    member's device and the others yield, each reason saying to whom and why. Two members scoped to
    the same device are no conflict. Kills the count of devices mutated, the ties or the members
    dropped from the message, and the yielding rule inverted."""
    g = Graph()
    with g.device("cpu:0"):
        a = _op(g, "VarHandle", name="a")
        same = _op(g, "ReadVariable", a, name="same")
    with g.device("cpu:1"):
        b = _op(g, "AssignVariable", a, name="b")
    ties = ("same (ReadVariable) uses the resource made by a (VarHandle); "
            "b (AssignVariable) uses the resource made by a (VarHandle)")
    with pytest.raises(PlacementError) as e:
        place(g, D2)
    assert str(e.value) == _conflict((a, "cpu:0"), (same, "cpu:0"), (b, "cpu:1"), ties=ties)
    p = place(g, D2, allow_soft_placement=True)
    assert {p[n] for n in (a, same, b)} == {CPU[0]}
    assert p.why(a) == "device scope of a"
    assert p.why(same) == f"device scope of a; colocated ({ties})"
    assert p.why(b) == (f"asked for cpu:1, yields to a on cpu:0 because {ties}{SOFT}; "
                        f"device scope of a; colocated ({ties})")


# ---- the defaults ---------------------------------------------------------------------------------------
def test_an_unplaced_op_follows_its_forward_op_then_its_first_input_then_its_first_control_input() -> None:
    """Rule 3, in order: a backward op goes with its forward op (before its inputs); another op takes
    the device of its first data input, else of its first control input, else the first listed
    device; the reason names which. Kills each branch's test inverted or ``or`` for ``and``, the
    second input or control input taken, and the reasons mutated."""
    g = Graph()
    with g.device("cpu:1"):
        one = _op(g, "Const", name="one")
    zero = _op(g, "Const", name="zero")
    first = _op(g, "Add", one, zero, name="first")
    ctrl = _op(g, "Const", name="ctrl", control=(one, zero))
    with g.device("cpu:2"):
        fwd = _op(g, "Identity", zero, name="fwd")
    back = _op(g, "Identity", zero, name="back")
    g.gradient_of[back.id] = fwd.id
    p = place(g, D3)
    assert (p[zero], p.why(zero)) == (CPU[0], "default device")
    assert (p[first], p.why(first)) == (CPU[1], "follows its input one:0")
    assert (p[ctrl], p.why(ctrl)) == (CPU[1], "follows its control input one")
    assert (p[back], p.why(back)) == (CPU[2], "with its forward op fwd")


def test_a_tied_member_that_follows_its_own_input_gives_no_colocation_note() -> None:
    """A group's first member placed after its own first input says only that; the other members
    say they are colocated, with the rule. Kills the test of a member's own reason inverted, made
    ``or``, and made always true or always false."""
    g = Graph()
    with g.device("cpu:1"):
        a = _op(g, "Const", name="a")
    c = _op(g, "Identity", a, name="c")
    with g.colocate_with(c):
        d = _op(g, "Identity", c, name="d")
    p = place(g, D2)
    assert (p[c], p[d]) == (CPU[1], CPU[1])
    assert p.why(c) == "follows its input a:0"
    assert p.why(d) == "follows its input a:0; colocated (d was built under colocate_with(c))"


def test_a_merge_whose_back_edge_comes_first_follows_its_entry() -> None:
    """A Merge whose input 0 is the back edge (its NextIteration, placed after it) follows its first
    input already placed, the Enter. Kills the placed-inputs filter made ``or`` (the unplaced
    NextIteration looked up)."""
    g = Graph()
    with g.device("cpu:1"):
        c = _op(g, "Const", name="c")
    e, m, body, ni = _loop(g, c, back_first=True)
    p = place(g, D2)
    assert {p[n] for n in (e, m, body, ni)} == {CPU[1]}
    assert p.why(m).startswith("follows its input enter:0")


# ---- the order of the defaults --------------------------------------------------------------------------
def _respects(order: list[Node], g: Graph) -> bool:
    """Each node after the nodes it waits for in one iteration, and a backward op after its forward op."""
    pos = {n.id: k for k, n in enumerate(order)}
    return all(pos[p.id] < pos[n.id] for n in order for p in same_iteration_preds(n)) and all(
        pos[f] < pos[b] for b, f in g.gradient_of.items())


def _with_gradient() -> tuple[Graph, Node, Node]:
    """A loop, an op with a control input, and a backward op and its forward op (both read ``x``, the
    backward op built last), so that the plain topological order puts the backward op first. The
    loop's Merge is a backward op too (as a backward loop's are), of a source the plain order takes
    first: free of it, the Merge would be ready before its Enter."""
    g = Graph()
    x = _op(g, "Const", name="x")
    _, merge, _, _ = _loop(g, x)
    k = _op(g, "Const", name="k", control=(x,))
    _op(g, "Add", x, k, name="two")
    fwd = _op(g, "Identity", x, name="fwd")
    back = _op(g, "Identity", x, name="back")
    lone = _op(g, "Const", name="lone")
    g.gradient_of[back.id] = fwd.id
    g.gradient_of[merge.id] = lone.id
    return g, back, fwd


def test_the_order_of_the_defaults_puts_every_forward_op_before_its_backward_ops() -> None:
    """``_order`` is a topological order (back edges aside) in which every forward op comes before
    the backward ops of its gradient, where the plain order would not, so that a backward op can
    follow its forward op. Kills the reordering skipped, the back edge counted (a cycle: the plain
    order), control or data predecessors dropped, and in-degrees miscounted."""
    g, back, fwd = _with_gradient()
    base = topological_order(g)
    assert not _respects(base, g)  # (as built: the case the reordering exists for)
    got = _order(g)
    assert sorted(n.id for n in got) == sorted(n.id for n in g.nodes) and _respects(got, g)
    p = place(g, D2)
    assert p.why(back) == "with its forward op fwd"


def test_the_order_of_the_defaults_takes_the_nodes_free_at_the_start_in_the_plain_order() -> None:
    """The reordering starts as the plain order does: the nodes that wait for nothing (sources) come
    in the plain order's order, whatever their ids. It matters to placement: a group nobody placed
    follows the member visited first, so the gradient-aware order keeps the plain order's choices
    where no forward op asks otherwise. Kills the sort of the free nodes by id, or reversed."""
    g, _, _ = _with_gradient()
    sources = [n.id for n in topological_order(g) if not same_iteration_preds(n)]
    assert sources != sorted(sources)  # (as built: the ids do not give the order)
    assert [n.id for n in _order(g) if not same_iteration_preds(n)] == sources


def test_without_gradients_or_when_the_forward_edges_close_a_cycle_the_order_is_the_plain_one() -> None:
    """With no backward ops, or when a forward op would have to come after its own backward op (the
    backward op feeds it), ``_order`` is the plain topological order, and such a backward op, placed
    before its forward op, follows its input instead. Kills the no-gradient shortcut inverted, the
    fallback on a cycle removed or inverted, and a forward op not yet placed looked up (``or``)."""
    g, back, fwd = _with_gradient()
    g.gradient_of.clear()
    assert _order(g) == topological_order(g)
    h = Graph()
    x = _op(h, "Const", name="x")
    b = _op(h, "Identity", x, name="b")
    f = _op(h, "Identity", b, name="f")
    h.gradient_of[b.id] = f.id
    assert _order(h) == topological_order(h)
    p = place(h, D2, requests={"x": "cpu:1"})
    assert (p[b], p.why(b)) == (CPU[1], "follows its input x:0")


# ---- one placement per graph version: Placer ----------------------------------------------------------
def test_a_placer_places_each_version_of_the_graph_once() -> None:
    """``Placer``, through which every partitioned backend places: the same ``Placement`` while the
    graph is unchanged (no pass over the graph at each run), a new one once it grows (a node added
    after the session was made is placed too), with the requests and soft placement it was given,
    and ``used()`` the devices that placement puts a node on."""
    g = Graph()
    with g.device("cpu:1"):
        a = _op(g, "Const", name="a")
    b = _op(g, "Identity", a, name="b")
    placer = Placer(g, D3, {"b": "cpu:2"})
    first = placer()
    assert placer() is first and first[b] == CPU[2] and placer.used() == {CPU[1], CPU[2]}  # (b as requested)
    with g.device("cpu:0"):
        c = _op(g, "Const", name="c")
    again = placer()
    assert again is not first and again[c] == CPU[0] and placer.used() == set(CPU)
    with g.device("cpu:0"), g.colocate_with(a):
        d = _op(g, "Identity", a, name="d")  # (scoped away from the op it must sit with)
    with pytest.raises(PlacementError, match="conflicting placement"):
        placer()
    soft = Placer(g, D3, allow_soft_placement=True)()
    assert soft[d] == soft[a]
