"""Laws of the case chain (``turnout.fast.case_chain``): which nested conds form one chain, how its
predicates are computed up front, and which branch the flat switch takes. Each law kills mutants of
the full set of ``fast/case_chain.py`` (issue 40, part 3; ``python tools/mutation.py --module
fast/case_chain.py --all``): a chain followed through the true branch or past a node that may fail,
a chain cut one level short or run one past its end, a predicate read from the wrong environment or
by the wrong node, the switches wired to the taken side, the speculated nodes run elsewhere or
counted when their values were kept elsewhere, a dead predicate not noticed, and the first true
predicate looked for in the wrong order or past the ends.

The regions are built by hand (``CondRegion`` over nodes made with ``Graph.create_node`` and fixed
specs) and the emitter is a stand-in that records what ``speculate`` asks of it: no tracing, no
compile, so each test takes milliseconds. The runs that raise a ``tn.case`` to one ``lax.switch`` for
real are in ``test_fast_case_chain.py`` and ``test_mutants_fast3.py``.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from turnout.dtypes import bool_, int32
from turnout.fast.case_chain import MIN_LEVELS, SPECULABLE, _prefix, find_chain, first_true, speculate
from turnout.fast.plumbing import Wire, switch_wires
from turnout.fast.regions import EMPTY, CondRegion, Item, Key, key
from turnout.fast.values import DEAD
from turnout.graph import Graph, Node, Tensor
from turnout.specs import TensorSpec

INT = TensorSpec(int32, ())
BOOL = TensorSpec(bool_, ())


def _node(g: Graph, op: str, *inputs: Node, name: str, spec: TensorSpec = INT, outputs: int = 1) -> Node:
    """A node of ``op`` reading the first output of each input, with ``outputs`` outputs of ``spec``."""
    return g.create_node(op, [x.outputs[0] for x in inputs], {}, name=name, specs=[spec] * outputs)


def _region(g: Graph, pred: Tensor, data: Node, false: list[Item], name: str) -> CondRegion:
    """A cond on ``pred`` with one Switch of ``data``, a true branch of one Identity, and ``false``."""
    sw = g.create_node("Switch", [data.outputs[0], pred], {}, name=f"{name}/switch", specs=[INT, INT])
    true = _node(g, "Identity", sw, name=f"{name}/true")
    return CondRegion(pred=pred, scope=EMPTY, switches=[sw], merges=[], branches={True: [true], False: false})


class _Chain:
    """``levels`` conds nested in each other's false branch, as ``tn.case`` makes them: level ``k + 1``'s
    predicate is ``Equal(i, Const k + 1)``, computed in level ``k``'s false branch just before the
    nested cond; the innermost false branch is one Identity (the default)."""

    def __init__(self, levels: int) -> None:
        g = Graph()
        self.i = _node(g, "Const", name="i")
        self.x = _node(g, "Const", name="x")
        self.p0 = _node(g, "Const", name="p0", spec=BOOL)
        #: ``prefixes[k]``: the nodes of level ``k``'s false branch that compute level ``k + 1``'s predicate
        self.prefixes: list[list[Node]] = []
        preds = [self.p0]
        for k in range(1, levels):
            c = _node(g, "Const", name=f"c{k}")
            preds.append(_node(g, "Equal", self.i, c, name=f"p{k}", spec=BOOL))
            self.prefixes.append([c, preds[-1]])
        inner: list[Item] = [_node(g, "Identity", self.x, name="default")]
        self.regions: list[CondRegion] = []
        for k in range(levels - 1, -1, -1):
            r = _region(g, preds[k].outputs[0], self.x, inner, f"level{k}")
            self.regions.insert(0, r)
            if k:
                inner = [*self.prefixes[k - 1], r]


class _Emitter:
    """Stands for the emitter: records each ``predicate``, ``wire`` and ``run_items`` call (with the
    environment it was given), reads a predicate and a wire's source from the environment, and runs a
    node by writing ``values[name]`` to its outputs (a node not in ``values`` keeps its outputs out of
    the environment, as the SPMD emitter does with a value it keeps inside one device's batch)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values
        self.calls: list[tuple[Any, ...]] = []

    def predicate(self, env: dict[Key, Any], t: Tensor, user: Node) -> Any:
        self.calls.append(("predicate", id(env), t, user))
        return env[key(t)]

    def wire(self, wires: list[Wire], env: dict[Key, Any]) -> None:
        self.calls.append(("wire", id(env), wires))
        for w in wires:
            env[w.dst] = w.value if w.src is None else env[key(w.src)]

    def run_items(self, items: list[Item], env: dict[Key, Any]) -> None:
        self.calls.append(("run_items", id(env), list(items)))
        for n in items:
            assert isinstance(n, Node)
            if n.name in self.values:
                for o in n.outputs:
                    env[key(o)] = self.values[n.name]


# ---- which conds form a chain ------------------------------------------------------------------------------
@pytest.mark.parametrize("levels", [1, 2, 4])
def test_a_chain_is_each_cond_nested_last_in_the_false_branch_after_speculable_nodes(levels: int) -> None:
    """[S-Case]: a cond whose false branch is speculable nodes followed by one nested cond continues
    the chain with it, outermost first, until a false branch of another form; ``_prefix`` gives the
    nodes ahead of the nested cond and the cond. Kills the walk started or continued from the wrong
    level, its test inverted, the cond appended as None or as a missing third element, and the
    prefix cut as ``[:+1]`` or ``[:-2]`` or its cond read as ``[+1]`` or ``[-2]``."""
    c = _Chain(levels)
    assert find_chain(c.regions[0]) == c.regions
    for k, r in enumerate(c.regions[:-1]):
        got = _prefix(r)
        assert got is not None
        assert got[0] == c.prefixes[k] and got[1] is c.regions[k + 1]
    assert _prefix(c.regions[-1]) is None


def test_a_chain_of_two_levels_is_raised_and_a_lone_cond_is_not() -> None:
    """The shortest chain raised to a switch has two levels (a case of two branches, three
    functions); a lone cond stays a ``lax.cond`` (a two-way switch is a cond). Kills ``MIN_LEVELS``
    set to None or 3."""
    assert len(find_chain(_Chain(2).regions[0])) >= MIN_LEVELS > len(find_chain(_Chain(1).regions[0]))


def _lone(false: list[Item], true: list[Item] | None = None) -> tuple[Graph, CondRegion]:
    g = Graph()
    x = _node(g, "Const", name="x")
    p = _node(g, "Const", name="p", spec=BOOL)
    r = _region(g, p.outputs[0], x, false, "outer")
    if true is not None:
        r.branches[True] = true
    return g, r


def test_a_false_branch_of_another_form_ends_the_chain() -> None:
    """The chain stops at a false branch that is empty, that ends in a plain node, whose items
    before the nested cond are not all nodes (a cond ahead of it), or that holds an op that may fail
    (``FloorMod``, which fails on zero); a chain-shaped true branch does not count. Kills the
    emptiness and the ``isinstance`` tests inverted or joined by ``and``, the speculable test made
    ``or``, inverted or negated, and the false branch read as the true one."""
    c = _Chain(2)
    inner = c.regions[0]
    g = inner.pred.node.graph
    x = _node(g, "Const", name="x2")
    mod = _node(g, "FloorMod", x, x, name="mod")
    const = _node(g, "Const", name="const")
    for false in ([], [const], [const, inner, inner], [mod, inner], [const, mod, inner]):
        _, r = _lone(false)
        assert _prefix(r) is None, false
        assert find_chain(r) == [r]
    _, r = _lone([const], true=[const, inner])
    assert find_chain(r) == [r]
    _, r = _lone([const, inner], true=[])
    assert find_chain(r) == [r, *c.regions]


#: ops without effects that cannot fail (comparisons, logic, constants, identities)
SPECULABLE_OPS = ["Const", "Identity", "Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual",
                  "LogicalNot", "LogicalAnd", "LogicalOr"]


@pytest.mark.parametrize("op", SPECULABLE_OPS)
def test_each_op_that_cannot_fail_or_act_may_compute_an_inner_predicate(op: str) -> None:
    """Each comparison, logical op, constant and identity may sit in a false branch ahead of the
    nested cond (computed up front, it changes nothing a program observes), and only those: an op
    that can fail or act is not in the set. Kills each name of ``SPECULABLE`` misspelt or cased
    wrongly."""
    c = _Chain(2)
    g = c.regions[0].pred.node.graph
    ins = [_node(g, "Const", name="a"), _node(g, "Const", name="b")][: 0 if op == "Const" else 2]
    n = _node(g, op, *ins, name="n")
    _, r = _lone([n, c.regions[0]])
    assert find_chain(r) == [r, *c.regions]
    assert SPECULABLE == frozenset(SPECULABLE_OPS)
    assert not SPECULABLE & {"FloorMod", "Div", "Assert", "AssignVariable", "Gather"}


# ---- the predicates, computed up front ---------------------------------------------------------------------
@pytest.mark.parametrize("levels", [2, 3, 4])
def test_speculate_computes_each_predicate_as_if_the_levels_above_took_their_false_branch(levels: int) -> None:
    """Level ``k + 1``'s predicate is computed after level ``k``'s Switches pass their data to the
    false side (output 0; output 1 dead) and its speculable nodes run, all in one copy of the
    environment that ``speculate`` returns (the caller's is untouched); each predicate is read by the
    level's first Switch; the last level wires and runs nothing. Kills the copy dropped, the
    predicate's environment, tensor or reader dropped, the wires made for the true side or from
    nothing, the nodes run from nothing or into no environment, the loop's end moved, and a
    predicate appended as None."""
    c = _Chain(levels)
    env: dict[Key, Any] = {key(c.x.outputs[0]): 5, key(c.p0.outputs[0]): np.bool_(False)}
    before = dict(env)
    values = {f"c{k}": k for k in range(1, levels)} | {f"p{k}": np.bool_(k == levels - 1) for k in range(1, levels)}
    em = _Emitter(values)
    got = speculate(c.regions, env, em)
    assert got is not None
    preds, senv, computed = got
    assert env == before
    assert [bool(p) for p in preds] == [False] * (levels - 1) + [True]
    expected: list[tuple[Any, ...]] = []
    for k, r in enumerate(c.regions):
        expected.append(("predicate", id(senv), r.pred, r.switches[0]))
        if k + 1 < levels:
            expected.append(("wire", id(senv), switch_wires(r.switches, 0)))
            expected.append(("run_items", id(senv), c.prefixes[k]))
    assert em.calls == expected
    sw = c.regions[0].switches[0]
    assert senv[key(sw.outputs[0])] == 5 and senv[key(sw.outputs[1])] is DEAD
    assert computed == {n.id for p in c.prefixes for n in p}


def test_only_nodes_whose_every_output_the_runner_kept_count_as_computed() -> None:
    """A speculated node whose outputs the runner left out of the environment is not counted as
    computed (the chain's functions compute it again). Kills the test of each output inverted and
    read under no key."""
    c = _Chain(3)
    env: dict[Key, Any] = {key(c.x.outputs[0]): 5, key(c.p0.outputs[0]): np.bool_(False)}
    em = _Emitter({"p1": np.bool_(False), "p2": np.bool_(True), "c2": 2})  # c1 kept elsewhere
    got = speculate(c.regions, env, em)
    assert got is not None
    assert got[2] == {c.prefixes[0][1].id, *(n.id for n in c.prefixes[1])}


def test_a_chain_of_one_is_its_predicate_alone() -> None:
    """A lone cond: its predicate, read once, and nothing wired, run or computed. Kills the loop's
    end test inverted or moved past the last level and its ``break`` made a ``return``."""
    c = _Chain(1)
    env: dict[Key, Any] = {key(c.x.outputs[0]): 5, key(c.p0.outputs[0]): np.bool_(True)}
    em = _Emitter({})
    got = speculate(c.regions, env, em)
    assert got is not None
    preds, senv, computed = got
    assert [bool(p) for p in preds] == [True] and senv == env and computed == set()
    assert em.calls == [("predicate", id(senv), c.regions[0].pred, c.regions[0].switches[0])]


def test_a_dead_predicate_leaves_the_chain_nested() -> None:
    """A predicate that is dead (read as ``DEAD``), or that no speculated node wrote, makes
    ``speculate`` give up (None) without reading it: the nested emission handles the chain as it
    stands. Kills the deadness test inverted or forced either way and the presence test inverted."""
    c = _Chain(3)
    dead: dict[Key, Any] = {key(c.x.outputs[0]): 5, key(c.p0.outputs[0]): DEAD}
    em = _Emitter({"c1": 1, "p1": np.bool_(False)})
    assert speculate(c.regions, dead, em) is None
    assert em.calls == [("predicate", em.calls[0][1], c.regions[0].pred, c.regions[0].switches[0])]
    env: dict[Key, Any] = {key(c.x.outputs[0]): 5, key(c.p0.outputs[0]): np.bool_(False)}
    em = _Emitter({"c1": 1})  # level 1's predicate kept out of the environment
    assert speculate(c.regions, env, em) is None
    assert [call[0] for call in em.calls] == ["predicate", "wire", "run_items"]


# ---- the switch's index ------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_the_switch_takes_the_first_true_predicate_or_the_default(n: int) -> None:
    """``first_true`` is the index of the first true predicate, ``len(preds)`` (the innermost false
    branch) when none holds, for every combination of ``n`` predicates. Kills every bound and step
    of the backward walk moved, the index or its start dropped, and the ``where`` given no
    condition, no index or no fallback."""
    for combo in itertools.product([False, True], repeat=n):
        want = combo.index(True) if True in combo else n
        assert int(first_true([np.bool_(b) for b in combo])) == want, combo
