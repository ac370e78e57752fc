"""Laws of the small-step system's values, tokens, configurations and initial configuration, found
missing by mutation testing (``python tools/mutation.py --module semantics/smallstep.py``): what
``freeze`` keeps apart, what a token and a configuration compare by, the module's public names, and
what ``initial`` accepts, refuses and puts into Q.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import turnout as tn
from turnout import raw
from turnout.kernels import TensorArrayValue
from turnout.reference.executor import run_graph
from turnout.semantics import smallstep as ss


def _counter() -> tuple[tn.Graph, tn.Tensor]:
    g = tn.Graph()
    with g.as_default():
        (k,) = tn.while_loop(lambda k: k < 3, lambda k: k + 1, [tn.constant(0)])
    return g, k


# ---- the public names ----------------------------------------------------------------------------------
def test_every_name_the_module_exports_is_defined() -> None:
    """``__all__`` is the module's public surface: a list of names, each defined by the module (a
    misspelt entry breaks ``from turnout.semantics.smallstep import *``), and it names the rules'
    entry points and the values they take and return."""
    assert isinstance(ss.__all__, list) and len(ss.__all__) == len(set(ss.__all__))
    missing = [name for name in ss.__all__ if not hasattr(ss, name)]
    assert missing == []
    namespace: dict[str, object] = {}
    exec("from turnout.semantics.smallstep import *", namespace)  # noqa: S102
    assert {name for name in namespace if not name.startswith("__")} == set(ss.__all__)
    assert {"Config", "Firing", "Token", "initial", "enabled", "fire", "run", "outputs", "RULES"} <= set(ss.__all__)


# ---- freeze: a key equal exactly for equal values -------------------------------------------------------
def test_freeze_keeps_values_that_are_keys_already() -> None:
    """``freeze`` is the identity on values that are hashable keys already (None, strings and the
    handle values), so a configuration or an outcome holding a handle holds the handle itself."""
    for v in (None, "s", ss.VarHandleValue("v"), ss.StackHandleValue("push", (("f", 1),))):
        assert ss.freeze(v) is v


def test_freeze_tells_apart_values_that_differ_in_their_elements() -> None:
    """Equal keys for equal values only: object arrays, TensorArrays (elements and element shape),
    sequences and the values freeze knows only by their ``repr`` differ as soon as one element does,
    and equal ones, built apart, give equal keys."""
    def obj(*xs: object) -> np.ndarray:
        a = np.empty(len(xs), dtype=object)
        a[:] = list(xs)
        return a

    def ta(shape: object, *xs: float) -> TensorArrayValue:
        return TensorArrayValue("float32", shape, tuple(np.float32(x) for x in xs))

    pairs = [
        (obj("a", "b"), obj("a", "b"), obj("a", "c")),
        (ta((), 1.0, 2.0), ta((), 1.0, 2.0), ta((), 1.0, 3.0)),
        (ta((), 1.0), ta((), 1.0), ta((1,), 1.0)),
        ([1, 2], [1, 2], [1, 3]),
        ((np.float32(1.0), "x"), (np.float32(1.0), "x"), (np.float32(2.0), "x")),
        ({"a": 1}, {"a": 1}, {"a": 2}),
    ]
    for a, same, other in pairs:
        assert ss.freeze(a) == ss.freeze(same) and hash(ss.freeze(a)) == hash(ss.freeze(same)), a
        assert ss.freeze(a) != ss.freeze(other), (a, other)


def test_freeze_tells_apart_equal_looking_values_of_different_types() -> None:
    """Values of different types are different keys even where Python calls them equal (``True == 1
    == 1.0``) or where their ``repr`` reads the same: a bool variable is not an int variable."""
    assert len({ss.freeze(True), ss.freeze(1), ss.freeze(1.0)}) == 3

    class A:
        def __repr__(self) -> str:
            return "same"

    class B(A):
        pass

    assert ss.freeze(A()) == ss.freeze(A())
    assert ss.freeze(A()) != ss.freeze(B())


# ---- tokens --------------------------------------------------------------------------------------------
def test_a_dead_token_has_no_value_and_equals_every_dead_token_at_its_tag() -> None:
    """A dead token's value is irrelevant and stored as None: ``Token(v, True, t)`` is the dead token
    at t whatever v, so Q holds one dead token per slot however it was made."""
    tag = (("f", 1),)
    tok = ss.Token(np.float32(5.0), True, tag)
    assert tok.value is None
    assert tok == ss.Token.dead(tag) and hash(tok) == hash(ss.Token.dead(tag))
    assert tok != ss.Token.dead(())


def test_tokens_compare_by_value_deadness_and_tag() -> None:
    """Token equality goes by value (through ``freeze``), deadness and tag; a token equals no other
    kind of object; and hashing goes by the same key, so tokens with different values spread over
    different hashes (a set of them does not degrade to one bucket)."""
    one = ss.Token.live(np.int32(1), ())
    assert one == ss.Token.live(np.int32(1), ())
    assert one != ss.Token.live(np.int32(2), ())
    assert one != ss.Token.live(np.int32(1), (("f", 0),))
    assert one != ss.Token.dead(())
    assert one != 1 and one != object()
    assert len({hash(ss.Token.live(np.int32(i), ())) for i in range(32)}) > 16


def test_a_token_reads_as_its_liveness_value_and_tag() -> None:
    """``repr(token)``: ``live(value)@tag`` or ``dead@tag``, the tag as ``fmt_tag`` writes it (the form
    the explorer and the reports show tokens in)."""
    tag = (("outer", 1), ("inner", 0))
    v = np.int32(7)
    assert repr(ss.Token.live(v, tag)) == f"live({v!r})@{ss.fmt_tag(tag)}"
    assert repr(ss.Token.dead(tag)) == f"dead@{ss.fmt_tag(tag)}"
    assert repr(ss.Token.live(v, ())) == f"live({v!r})@()"


def test_fmt_tag_writes_the_root_and_nested_iterations() -> None:
    """``fmt_tag``: ``()`` for the root tag, else each frame and iteration from the root, ``frame[k]``,
    joined by `` > ``."""
    assert ss.fmt_tag(()) == "()"
    assert ss.fmt_tag((("outer", 1),)) == "outer[1]"
    assert ss.fmt_tag((("outer", 1), ("inner", 0))) == "outer[1] > inner[0]"


# ---- configurations ------------------------------------------------------------------------------------
def test_configurations_differing_only_in_their_stores_are_different_states() -> None:
    """A configuration is compared by value, its variable store sigma and its stack store Sigma
    included: two configurations that differ only in a variable's or a stack's value are different
    states (the explorer must not merge them), and ones with equal stores, built apart, are equal."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(2.0, name="v")
        out = v.read() * 2.0
    c1 = ss.initial(g, [out], variables={"v": np.float32(1.0)})
    assert c1 == ss.initial(g, [out], variables={"v": np.float32(1.0)})
    assert c1 != ss.initial(g, [out], variables={"v": np.float32(3.0)})

    h = ss.StackHandleValue("push", ())

    def with_stack(x: float) -> ss.Config:
        return dataclasses.replace(c1, stacks={(h, (0,)): np.float32(x)}, _key_cache=[])

    assert with_stack(1.0) == with_stack(1.0) and hash(with_stack(1.0)) == hash(with_stack(1.0))
    assert with_stack(1.0) != with_stack(2.0)


def test_the_program_records_the_graph_and_each_nodes_static_frame() -> None:
    """The program an initial configuration shares is the static half of the run: the graph it was
    built from and, for each node that takes part, its frame from the static frame analysis."""
    g, k = _counter()
    c = ss.initial(g, [k])
    frames = tn.static_frames(g).node_frame
    assert c.program.graph is g
    assert c.program.node_frame == {i: frames[i] for i in c.program.nodes}
    assert any(c.program.node_frame.values()) and () in c.program.node_frame.values()


def test_a_configuration_reads_without_its_cached_key() -> None:
    """``repr(config)`` shows the configuration's fields, not the key cached by the first comparison:
    it reads the same before and after the configuration is hashed."""
    g, k = _counter()
    c = ss.initial(g, [k])
    before = repr(c)
    hash(c)
    assert repr(c) == before and "_key_cache" not in before


def test_instance_steps_are_logged_as_live() -> None:
    """[E-Iter-Retire] and [E-Frame-Done] consume no token, so they are never dead firings: the log of
    a run records each as live, and every entry's deadness is a bool."""
    g, k = _counter()
    r = ss.run(g, [k])
    assert all(isinstance(dead, bool) for *_, dead in r.firings)
    steps = [dead for rule, _, _, dead in r.firings if rule in ("E-Iter-Retire", "E-Frame-Done")]
    assert steps and not any(steps)
    assert any(dead for *_, dead in r.firings)  # the loop's last iteration does fire dead


# ---- initial: what it takes as a tensor ----------------------------------------------------------------
def test_fetches_are_tensors_of_the_graph_names_or_objects_that_stand_for_one() -> None:
    """``initial`` takes as a fetch a tensor of its graph, its name, or an object that stands for one
    (a Variable fetches its value, as a session fetches it); anything else, a tensor of another graph
    included, is an ``ArgumentError`` naming it."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(2.0, name="v")
        y = tn.multiply(v.read(), 3.0, name="y")
    assert [float(x) for x in ss.run(g, [v, y, "y:0"]).values] == [2.0, 6.0, 6.0]
    assert float(tn.Session(g).run(v)) == 2.0
    other = tn.Graph()
    with other.as_default():
        z = tn.constant(1.0)
    for bad in (42, z):
        with pytest.raises(tn.ArgumentError, match=rf"^{bad!r} is not a tensor of this graph$".replace("[", r"\[")):
            ss.initial(g, [bad])


def test_a_fed_opaque_value_reaches_its_fetch_as_given() -> None:
    """A fed tensor of an opaque dtype (a resource handle) has no numpy type to cast to: its value is
    taken as given, not cast, and a fetch of it returns it, as the reference interpreter does."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(2.0, name="v")
    handle = v._as_tensor().node.raw_inputs[0]
    assert handle.dtype.is_opaque
    feeds = {handle: ss.VarHandleValue("w")}
    (got,) = ss.run(g, [handle], feeds).values
    assert np.asarray(got).item() == run_graph(g, [handle], feeds).values[0] == ss.VarHandleValue("w")


# ---- initial: what it refuses ----------------------------------------------------------------------------
def _nested_frames() -> tuple[tn.Graph, tn.Tensor]:
    """A value entered into frame 'outer' and from there into 'inner' (no loop around either)."""
    g = tn.Graph()
    with g.as_default():
        deep = raw.enter(raw.enter(tn.constant(1.0), "outer"), "inner", name="deep")
    return g, deep


def test_a_fetch_inside_a_frame_is_refused_naming_the_frame_path() -> None:
    """[W-Fetch-Root]: a fetch must lie in the root frame. ``initial`` refuses one inside a frame with
    the validator's ``ValidationError`` under that rule (the reference interpreter's, word for word),
    naming the fetch, the frames it lies in, and the fetched node as ``ValidationError.node``."""
    g, deep = _nested_frames()
    with pytest.raises(tn.ValidationError) as info:
        ss.initial(g, [deep])
    assert info.value.rule == "W-Fetch-Root" and info.value.node is deep.node
    assert "fetch deep:0" in str(info.value) and "'outer/inner'" in str(info.value)
    with pytest.raises(tn.ValidationError) as ref:
        run_graph(g, [deep])
    assert str(ref.value) == str(info.value)


def test_a_tensor_inside_a_frame_cannot_be_fed() -> None:
    """Feeds are root-frame tensors: ``initial`` refuses to feed a tensor inside a loop frame with a
    ``FeedError`` naming it."""
    g, deep = _nested_frames()
    with g.as_default():
        out = raw.exit(raw.exit(deep))
    with pytest.raises(tn.FeedError, match=rf"^cannot feed {deep.name}: it is inside a loop frame; feed "
                                           "root-frame tensors only$"):
        ss.initial(g, [out], {deep: np.float32(2.0)})


def test_a_needed_placeholder_must_be_fed() -> None:
    """A Placeholder that a fetch depends on holds no value of its own: ``initial`` refuses to start
    without a feed for it, with ``FeedError`` naming the Placeholder; fed, the run computes."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = x + 1.0
    with pytest.raises(tn.FeedError, match=r'^Placeholder node "x" .*must be fed a value'):
        ss.initial(g, [y])
    assert float(ss.run(g, [y], {x: np.float32(1.0)}).values[0]) == 2.0


# ---- initial: what Q and the fetch edges start with -----------------------------------------------------
def test_fed_values_and_fed_control_inputs_all_start_in_q() -> None:
    """A node fed on a data edge and tied by control edges to fed Placeholders starts with every one
    of those tokens in Q at the root: the fed value at its data slot and one live control token at
    each control slot, so it fires once and computes from the fed value."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        a = tn.placeholder(tn.int32, [], name="a")
        b = tn.placeholder(tn.int32, [], name="b")
        with tn.control_dependencies([a, b]):
            y = tn.add(x, 1.0, name="y")
    feeds = {x: np.float32(2.0), a: np.int32(0), b: np.int32(0)}
    c = ss.initial(g, [y], feeds)
    slots = sorted((slot, tok.value is None) for slot, tok in c.pending[(y.node.id, ())])
    assert slots == [(0, False), (2, True), (3, True)]
    r = ss.run(g, [y], feeds)
    assert float(r.values[0]) == 3.0 and r.counts[("y", ())] == 1


def test_a_fetched_fed_tensor_is_produced_at_the_root_tag() -> None:
    """A fetch that is fed is produced from the start: its fetch edge holds the fed value as a live
    token at the root tag, the tag of every fetch."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = x * 2.0
    c = ss.initial(g, [x, y], {x: np.float32(3.0)})
    assert c.produced == {(x.node.id, 0): ss.Token.live(np.float32(3.0), ())}
    assert [float(v) for v in ss.run(g, [x, y], {x: np.float32(3.0)}).values] == [3.0, 6.0]


# ---- reports that name sources and frames ----------------------------------------------------------------
def test_a_deadlock_report_names_the_sources_of_data_and_control_slots() -> None:
    """The deadlock report lists, for a key left blocked, the inputs that arrived and those missing by their
    sources: a data slot by the tensor feeding it, a control slot by ``^`` and the node. Here a loop
    body's Add reads a non-constant Enter (iteration 0 only) and waits on a control edge: from
    iteration 1 on, its other data input and its control input arrive, the Enter's value never does."""
    g = tn.Graph()
    with g.as_default():
        m, _ = raw.merge([raw.enter(tn.constant(0.0), "f"), raw.BACK_EDGE])
        sf, st = raw.switch(m, raw.loop_cond(m < raw.enter(tn.constant(3.0), "f", is_constant=True)))
        step = raw.enter(tn.constant(1.0), "f", name="step")
        gate = tn.identity(st, name="gate")
        with tn.control_dependencies([gate]):
            stalled = tn.add(st, step, name="stalled")
        raw.close_back_edge(m, raw.next_iteration(stalled))
        out = raw.exit(sf)
    c = ss.initial(g, [out])
    while en := ss.enabled(c):
        c = ss.fire(c, en[0])
    lines = [ln for ln in ss.deadlock_report(c).splitlines() if 'Add node "stalled"' in ln]
    assert lines and all(ln.endswith(f"; arrived: {st.name}, ^gate; missing: {step.name}") for ln in lines)


def test_a_runaway_loop_names_its_frame_instance_and_first_enter() -> None:
    """``RunOptions.max_iterations``: a loop still running at the bound stops with the reference
    interpreter's words for a runaway loop (``runaway_message``), naming the frame, its instance and
    the frame's first Enter (the one with the lowest id, which carries the user's source line), as
    the fast backend names it."""
    from turnout.errors import describe_node, runaway_message

    g = tn.Graph()
    with g.as_default():
        (k,) = tn.while_loop(lambda k: k >= 0, lambda k: k + 1, [tn.constant(0)])
    enters = [n for n in g.nodes if n.op == "Enter"]
    first = min(enters, key=lambda n: n.id)
    frame = first.attrs["frame_name"]
    with pytest.raises(tn.NonTerminationError) as info:
        ss.run(g, [k], max_iterations=3)
    assert len(enters) > 1
    loop = f"loop frame {frame!r} (instance root; entered by {describe_node(first)})"
    assert str(info.value) == runaway_message(loop, 3)
