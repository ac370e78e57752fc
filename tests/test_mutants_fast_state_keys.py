"""Laws of the run-time state's keys (``turnout.fast.state_keys``): the key a stack handle names, the
``StackNew`` a handle comes from through the forwarding ops, and the stacks one push of a graph
pushes. Each law kills mutants of the full set of ``fast/state_keys.py`` (issue 40, part 3): a
handle followed through the wrong input or past an op that computes, a walk bounded wrongly, a
count of pushes off by one or kept past a change of the graph. Such a mistake names the wrong stack
or none: a push no pop finds, or a gradient's stacks not recognised as pushed once (whose only pushes'
constants a later trace pops, ``Emitter.note_push``).

The graphs are built node by node with ``Graph.create_node`` and fixed specs (nothing inferred or
run): the walk reads only each node's op and inputs, so each law takes milliseconds (the longest
builds a chain of ten thousand forwarders, about a tenth of a second)."""

from __future__ import annotations

from typing import Any

import test_exports

from turnout.dtypes import float32
from turnout.fast.state_keys import pushed_once, stack_key, stack_key_of, stack_source
from turnout.fast.values import Handle
from turnout.graph import Graph, Node
from turnout.specs import TensorSpec

SPEC = TensorSpec(float32, ())
#: the ops a handle passes through unchanged, in the order of a loop's and a cond's plumbing
FORWARDERS = ["Enter", "Switch", "Identity", "Merge", "Exit", "NextIteration"]


def _op(g: Graph, op: str, *inputs: Node, name: str) -> Node:
    """A node of ``op`` with one scalar output, reading the first output of each input node."""
    return g.create_node(op, [x.outputs[0] for x in inputs], {}, name=name, specs=[SPEC])


def _chain(g: Graph, start: Node, ops: list[str], prefix: str) -> Node:
    """``start`` passed through one node of each op in ``ops``, in order; the last node."""
    n = start
    for k, op in enumerate(ops):
        n = _op(g, op, n, name=f"{prefix}{k}")
    return n


def test_a_stack_handles_key_names_its_stack() -> None:
    """The key of a stack handle is ``stack:`` and the handle's name (the id of its ``StackNew``)."""
    assert stack_key(Handle("stack", 17)) == "stack:17"


def test_a_handle_is_followed_through_every_forwarder_to_its_stack() -> None:
    """Through each of Enter, Switch, Identity, Merge, Exit and NextIteration (their first input), a
    handle still names its ``StackNew``, and a push or pop of it uses that stack's key; an op that
    computes (here a ``Tanh``), a forwarder with no input, or a node that is none of these ends the
    walk with no stack. Kills ``stack_source``'s and ``stack_key_of``'s mutants of the op names, of
    the input followed and of the tests of the walk and its end."""
    g = Graph()
    new = _op(g, "StackNew", name="stack")
    other = _op(g, "Const", name="index")
    handle = _chain(g, new, FORWARDERS, "fwd")
    assert stack_source(handle.outputs[0]) is new and stack_source(new.outputs[0]) is new
    merge = _op(g, "Merge", handle, other, name="merge2")  # (input 1 is not the handle)
    assert stack_source(merge.outputs[0]) is new
    push = _op(g, "StackPush", merge, other, other, name="push")
    assert stack_key_of(push) == f"stack:{new.id}"
    computed = _chain(g, _op(g, "Tanh", handle, name="tanh"), ["Identity", "Enter"], "after")
    assert stack_source(computed.outputs[0]) is None
    assert stack_source(_op(g, "Merge", name="empty").outputs[0]) is None
    assert stack_source(other.outputs[0]) is None
    assert stack_key_of(_op(g, "StackPop", computed, other, name="pop")) is None
    assert stack_key_of(_op(g, "StackPush", other, merge, other, name="push_index")) is None


def test_the_walk_gives_up_after_ten_thousand_forwarders() -> None:
    """The walk is bounded (a guard against a cycle of forwarders in a hand-built graph): a stack ten
    thousand forwarders up is found, one a forwarder further is not. Kills the mutants of the bound
    (``<=``, ``10001``), of its counter (starting at one, reset, stepping by two or down) and of the
    end test that would answer with a forwarder."""
    g = Graph()
    new = _op(g, "StackNew", name="stack")
    at_bound = _chain(g, new, ["Identity"] * 10_000, "i")
    assert stack_source(at_bound.outputs[0]) is new
    past = _op(g, "Identity", at_bound, name="past")
    assert stack_source(past.outputs[0]) is None


def _pushes(g: Graph, handle: Node, count: int, name: str) -> list[Node]:
    index = _op(g, "Const", name=f"{name}_index")
    return [_op(g, "StackPush", handle, index, index, name=f"{name}_push{k}") for k in range(count)]


def test_the_stacks_pushed_once_are_counted_over_the_graph_once_per_version() -> None:
    """``pushed_once``: the stacks exactly one ``StackPush`` of the graph pushes, through forwarders;
    not a stack pushed twice, nor one only popped, nor a push whose handle leads to no stack. The
    answer is kept per graph version: the same set again while the graph is unchanged, counted
    again once a node is added. Kills ``pushed_once``'s mutants (the counts, the test of the push,
    the input followed, the version check)."""
    g = Graph()
    once, twice, popped = (_op(g, "StackNew", name=n) for n in ("once", "twice", "popped"))
    _pushes(g, _chain(g, once, ["Enter", "Identity"], "once_fwd"), 1, "once")
    _pushes(g, twice, 2, "twice")
    _op(g, "StackPop", popped, _op(g, "Const", name="popped_index"), name="popped_pop")
    _pushes(g, _op(g, "Tanh", _op(g, "Const", name="c"), name="not_a_handle"), 1, "lost")
    got = pushed_once(g)
    assert got == frozenset({once.id})
    assert pushed_once(g) is got
    _pushes(g, popped, 1, "popped")
    again: Any = pushed_once(g)
    assert again == frozenset({once.id, popped.id}) and pushed_once(g) is again
    _pushes(g, once, 1, "once_again")
    assert pushed_once(g) == frozenset({popped.id})


def test_the_module_exports_what_it_defines() -> None:
    """``tests/test_exports.py``'s law for this module alone: its ``__all__`` is a list of the names
    it defines. Here so that a mutant of ``__all__`` (which runs every test of the module's list) is
    killed by this file in seconds, not after the backend's runs."""
    test_exports.test_every_exported_name_exists("turnout.fast.state_keys")
