"""Laws of conditionals while tracing (``turnout.fast.conds``): a ``CondRegion`` runs as ``lax.cond``
(or, when its predicate is known at trace time, as just the taken branch), a fetched value on a branch
that did not run is dead, and a chain of nested conds on one decision runs as one ``lax.switch``. Each
law kills mutants of the full set of ``fast/conds.py`` (issue 40, part 3; ``python tools/mutation.py
--module fast/conds.py --all``) that the loop-form and fast-backend tests of its list leave alive.

Each law runs a tiny program on the fast backend, compiled with ``fallback=False`` (so a refusal
raises rather than sending the run to the interpreter), against the reference interpreter; where a
law is about a small function of the module, it is called directly, and where it is about one step
of ``run_cond`` that no program reaches (a predicate dead while tracing, a Merge one branch gives
nothing), ``run_cond`` runs on the fast backend's own emitter with the environment the law names.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import turnout as tn
from turnout import raw
from turnout.errors import UnsupportedError, describe_node
from turnout.fast import conds
from turnout.fast.conds import SMALL_DECISION, small_decision
from turnout.fast.emit import Emitter
from turnout.fast.functionalize import functionalize
from turnout.fast.outcome import ErrorCodes
from turnout.fast.regions import CondRegion, Key, cond_outputs, key, pred_reader
from turnout.fast.values import DEAD


def _both(g: tn.Graph, fetch: Any, feeds: dict[Any, Any]) -> Any:
    """The fast backend's value (compiled, no fallback) after checking it against the reference's."""
    want = tn.Session(g).run(fetch, feeds)
    sess = tn.Session(g, backend="fast", fallback=False)
    got = sess.run(fetch, feeds)
    for a, b in zip(got if isinstance(fetch, list) else [got], want if isinstance(fetch, list) else [want],
                    strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    assert sess.last_result is not None and sess.last_result.stats["executor"] == "compiled"
    return got


@pytest.mark.parametrize("flag", [True, False])
def test_a_cond_on_a_fed_predicate_gives_the_taken_branchs_value(flag: bool) -> None:
    """Law: a cond whose predicate is fed (unknown at trace time, so ``lax.cond``) gives the value of
    the branch its predicate picks, as the reference does, on either side."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        x = tn.placeholder(tn.float32, [3], name="x")
        y = tn.cond(p, lambda: x * 2.0 + 1.0, lambda: x - 5.0)
    _both(g, y, {p: flag, x: np.arange(3, dtype=np.float32)})


# ---- the module's small functions, called directly ------------------------------------------------


@pytest.mark.parametrize(("dtype", "shape", "small"), [
    (tn.bool, [], True), (tn.int32, [], True), (tn.int32, [8], True),
    (tn.bool, [8], True), (tn.int64, [2, 4], True),
    (tn.int32, [9], False), (tn.bool, [3, 3], False),
    (tn.float32, [], False), (tn.float32, [2], False), (tn.int32, [None], False), (tn.int32, None, False)])
def test_a_small_decision_is_a_bool_or_integer_of_at_most_eight_elements(dtype: Any, shape: Any,
                                                                        small: bool) -> None:
    """Law: a plan may be specialised on a fed tensor's values only when it is a bool or an integer
    whose element count is known and at most ``SMALL_DECISION`` (eight); a float, a larger tensor or
    one of unknown size is data."""
    assert SMALL_DECISION == 8  # (the bound the law names, so the two cannot drift apart)
    g = tn.Graph()
    with g.as_default():
        t = tn.placeholder(dtype, shape)
    assert small_decision(t) is small


def _const(g: tn.Graph, value: Any, **marks: bool) -> Any:
    return g.create_node("Const", (), {"value": np.asarray(value, np.int32), "dtype": "int32", **marks},
                         name="Const").outputs[0]


def test_a_merge_exports_for_a_gradient_when_any_input_is_a_filler() -> None:
    """Law: a Merge hands a branch's value to a gradient when one of its inputs (not necessarily all)
    is a gradient's filler, a ``Const`` marked ``gradient_filler``; a marked false or unmarked
    ``Const`` is not one."""
    g = tn.Graph()
    with g.as_default():
        plain, filler, unmarked = _const(g, 1), _const(g, 0, gradient_filler=True), _const(g, 2, gradient_filler=False)
        for ins, want in [((plain, filler), True), ((filler, plain), True), ((plain, unmarked), False),
                          ((filler, filler), True)]:
            m, _ = raw.merge(list(ins))
            assert conds._exports_for_gradient(m.node) is want
            assert [conds._is_filler(t) for t in ins] == [t is filler for t in ins]
            assert all(type(conds._is_filler(t)) is bool for t in ins)


def test_note_exports_records_each_live_value_under_its_key_in_branch_order() -> None:
    """Law: each branch's exports are appended under their keys, in the order the branches traced
    them, and a dead one is left out (so a later fold sees only the branches where it lives)."""
    seen: dict[Any, list[Any]] = {}
    a, b, c = np.int32(1), np.int32(2), np.int32(3)
    conds._note_exports(seen, [(1, 0), (2, 0)], [a, DEAD])
    conds._note_exports(seen, [(1, 0), (2, 0)], [b, c])
    assert seen == {(1, 0): [a, b], (2, 0): [c]}
    assert seen[(1, 0)][0] is a and seen[(1, 0)][1] is b
    with pytest.raises(ValueError):
        conds._note_exports(seen, [(1, 0)], [a, b])


def test_a_size_is_a_shape_size_or_array_size_or_a_gradient_shape_through_switches_and_identities() -> None:
    """Law: ``Shape``, ``Size``, ``TensorArraySize`` and a ``Const`` marked ``gradient_shape`` are sizes,
    also behind any chain of Switches and Identities; other ops (a plain or ``gradient_filler`` Const,
    arithmetic on a size) are not."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 3])
        p = tn.placeholder(tn.bool, [])
        sizes = [tn.shape(x), tn.size(x), tn.TensorArray(tn.float32, size=3).size(),
                 _const(g, [2], gradient_shape=True)]
        others = [_const(g, [2]), _const(g, [2], gradient_shape=False), _const(g, 0, gradient_filler=True),
                  tn.size(x) + 1, x]
        for t, want in [*((t, True) for t in sizes), *((t, False) for t in others)]:
            _, on = raw.switch(t, p)
            off, _ = raw.switch(tn.identity(on), p)
            for u in (t, on, off, tn.identity(off)):
                assert conds._a_size(u) is want, (t.op, u.op)


def test_fold_exports_makes_again_a_size_that_every_live_branch_traced_as_one_constant() -> None:
    """Law: after a conditional, an export that is a size and that every branch where it lives traced
    as one constant (same dtype and elements) is that constant again; one that is not a size, one a
    branch traced as a traced value, one whose constants differ in value or dtype, and one no live
    branch traced, keep the value the conditional gave, each at its own place."""
    import jax.numpy as jnp
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [None, 3])
        s1, s2, s3, s4, s5 = (tn.shape(x) for _ in range(5))
        plain = _const(g, [4, 3])
    k = key
    two = np.asarray([4, 3], np.int32)
    seen = {k(s1): [two, two.copy()], k(s2): [two, np.asarray([5, 3], np.int32)],
            k(s3): [two, jnp.asarray(two)], k(plain): [two, two], k(s4): [two, two.astype(np.int64)],
            k(s5): []}
    exports = [k(plain), k(s1), k(s2), k(s3), k(s4), k(s5), (x.node.id, 0)]
    vals = [object() for _ in exports]
    given = list(vals)
    out = conds._fold_exports(g, seen, exports, vals)
    assert out[1] is seen[k(s1)][0]
    assert [o is v for o, v in zip(out, vals, strict=True)] == [True, False, True, True, True, True, True]
    assert all(a is b for a, b in zip(vals, given, strict=True))  # the given list is left as it was
    one = {k(s1): [two]}
    assert conds._fold_exports(g, one, [k(s1)], [None])[0] is two


def test_a_conds_exports_are_found_once_per_region_in_a_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Law: ``_exports`` searches a cond's branches for what it hands out once per region and trace.
    A raised case chain runs its outer conds again in each of its functions, and a search at every
    visit made tracing a case of ``n`` branches cubic in ``n``; counted here in searches, exactly."""
    searched: list[int] = []
    search = conds.cond_exports

    def counting(r: Any, fetch_set: Any) -> Any:
        searched.append(id(r))
        return search(r, fetch_set)

    monkeypatch.setattr(conds, "cond_exports", counting)
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        x = tn.placeholder(tn.float32, [3], name="x")
        y = tn.case([(tn.equal(i, k), (lambda k=k: x * float(k + 1))) for k in range(6)], default=lambda: x - 1.0)
    got = _both(g, y, {i: np.int32(3), x: np.ones(3, np.float32)})
    np.testing.assert_allclose(got, np.full(3, 4.0))
    assert len(searched) >= 6 and len(searched) == len(set(searched))


# ---- run_cond and its branches on the fast backend's own emitter ----------------------------------


class _Recording(Emitter):
    """The fast backend's emitter, noting each value a structural node reads (``read``) and each
    predicate read (``predicate``) with the node named as its reader."""

    def __init__(self, program: Any) -> None:
        super().__init__(program, ErrorCodes(), 64, np.int32(100))
        self.state = {"err": np.int32(0)}
        self.reads: list[tuple[Any, Any]] = []
        self.preds: list[tuple[Any, Any]] = []

    def read(self, env: Any, t: Any, reader: Any) -> Any:
        self.reads.append((t, reader))
        return super().read(env, t, reader)

    def predicate(self, env: Any, t: Any, user: Any) -> Any:
        self.preds.append((t, user))
        return super().predicate(env, t, user)


def _two_merge_cond() -> tuple[Any, ...]:
    """A cond on fed ``p`` joining two values (two Merges), with a fetched value inside its true
    branch (handed out besides the Merges): the graph, its region, its tensors."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        x = tn.placeholder(tn.float32, [3], name="x")
        inner: list[Any] = []

        def taken() -> Any:
            inner.append(tn.identity(x * 2.0, name="inner"))
            return inner[0] + 1.0

        y, z = tn.cond(p, lambda: [taken(), x * 4.0], lambda: [x - 1.0, x * 3.0])
    program = functionalize(g, [y, z, inner[0]], [p, x])
    r = next(it for it in program.items if isinstance(it, CondRegion))
    return program, r, p, x, y, z, inner[0]


def test_a_cond_whose_predicate_is_dead_kills_each_merge_value_and_index_and_each_export() -> None:
    """Law [E-Switch-Dead], [E-Merge-AllDead]: a cond whose predicate is dead while tracing runs
    neither branch; each of its Merges' value and index and each value it hands out besides them (a
    fetched branch value) is dead after it, every other value of the environment is left as it was,
    and the predicate is read as its first Switch reads it."""
    program, r, p, x, y, z, inner = _two_merge_cond()
    em = _Recording(program)
    env: dict[Key, Any] = {key(p): DEAD, key(x): np.ones(3, np.float32)}
    before = dict(env)
    em.run_cond(r, env)
    outs = cond_outputs(r, em._exports(r))
    assert key(inner) in outs and len(outs) == 2 * 2 + 1
    assert em.preds == [(r.pred, pred_reader(r))] and em.reads == []
    assert set(env) == set(before) | set(outs)
    assert all(env[k] is DEAD for k in outs)
    assert all(env[k] is before[k] for k in before)


@pytest.mark.parametrize("b", [False, True])
def test_a_merge_the_branch_that_ran_gives_nothing_is_dead_and_the_next_merge_still_joins(b: bool) -> None:
    """Law [E-Merge-AllDead] after one branch (``plumbing.branch_joins``): a Merge to which branch
    ``b`` gives no input is dead after that branch, value and index, and the Merges after it still
    take that branch's values, each read as its own Merge passes it on (the SPMD tier moves a value
    to its reader's device)."""
    program, r, p, x, y, z, _ = _two_merge_cond()
    (m0, s0), (m1, s1) = r.merges
    one_sided = CondRegion(r.pred, r.scope, r.switches, [(m0, {not b: s0[not b]}), (m1, s1)], r.branches,
                           r.nodes)
    em = _Recording(program)
    xs = np.arange(3, dtype=np.float32)
    env: dict[Key, Any] = {key(p): np.bool_(b), key(x): xs}
    em.run_cond(one_sided, env)
    assert env[key(m0.outputs[0])] is DEAD and env[key(m0.outputs[1])] is DEAD
    want = {key(y): xs * 2.0 + 1.0 if b else xs - 1.0, key(z): xs * 4.0 if b else xs * 3.0}
    np.testing.assert_allclose(np.asarray(env[key(m1.outputs[0])]), want[key(m1.outputs[0])])
    assert int(env[key(m1.outputs[1])]) == s1[b]
    assert [rd for rd in em.reads if rd[1] in (m0, m1)] == [(m1.inputs[s1[b]], m1)]


@pytest.mark.parametrize(("outer", "inner", "live"), [(True, True, True), (True, False, False), (False, True, False)])
def test_a_fetched_value_of_a_cond_nested_in_a_branch_is_live_only_where_both_conds_took_its_side(
        outer: bool, inner: bool, live: bool) -> None:
    """Law [T5-Deadness-Soundness] through two conds: a value fetched from the true branch of a cond
    nested in the true branch of another leaves both ``lax.cond`` with the live flag the inner one
    gave it, so fetching it raises ``DeadFetchError`` when either predicate is false, on the fast
    backend (compiled) as on the reference."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        q = tn.placeholder(tn.bool, [], name="q")
        x = tn.placeholder(tn.float32, [3], name="x")
        w: list[Any] = []

        def deep() -> Any:
            w.append(tn.identity(x * 2.0, name="w"))
            return w[0] + 1.0

        y = tn.cond(p, lambda: tn.cond(q, deep, lambda: x - 1.0), lambda: x * 3.0)
    feeds = {p: outer, q: inner, x: np.arange(3, dtype=np.float32)}
    ref, fast = tn.Session(g), tn.Session(g, backend="fast", fallback=False)
    np.testing.assert_allclose(fast.run(y, feeds), ref.run(y, feeds))
    for sess in (ref, fast):
        if live:
            np.testing.assert_allclose(sess.run(w[0], feeds), np.arange(3) * 2.0)
        else:
            with pytest.raises(tn.DeadFetchError):
                sess.run([y, w[0]], feeds)
    assert fast.last_result is not None and fast.last_result.stats["executor"] == "compiled"


# ---- refusals of ragged conds and chains, and the raised chain's own laws ---------------------------


class _Ragged(_Recording):
    """The emitter with each branch of a cond traced as handing out one value, three elements long
    on the true side and two on the false: values of different shapes, as no ``lax.cond`` takes."""

    def _cond_branch(self, r: Any, env: Any, exports: Any, fixed: Any, seen: Any, b: bool,
                     fill: bool = False) -> Any:
        def fn(state: Any) -> Any:
            return [], [jnp.zeros(3 if b else 2)], [np.asarray(True)], dict(state)

        return fn


def test_a_ragged_cond_without_merges_is_refused_naming_its_first_node() -> None:
    """Law: the branches of a cond on a predicate no feed decides that give values of different
    shapes are refused (``UnsupportedError``) with a message naming the cond's first Merge, or,
    for a cond without Merges (one that only hands values out), its first node."""
    program, r, p, x, *_ = _two_merge_cond()
    env = {key(p): jnp.asarray(True), key(x): jnp.zeros(3)}
    for merges, named in [(r.merges, r.merges[0][0]), ([], r.nodes[0])]:
        bare = CondRegion(r.pred, r.scope, r.switches, merges, r.branches, r.nodes)
        em = _Ragged(program)
        with pytest.raises(UnsupportedError, match="different types or shapes") as got:
            em._lax_cond(bare, dict(env), [], {}, {}, env[key(p)])
        assert f"near {describe_node(named)} produce" in str(got.value)
        assert describe_node(r.nodes[1]) != describe_node(named)


@pytest.mark.parametrize(("flag", "count"), [(True, 2), (True, 0), (False, 2)])
def test_a_ragged_cond_nested_in_a_branch_compiles_per_fed_value_passed_in_through_the_outer_switch(
        flag: bool, count: int) -> None:
    """Law: a cond whose branches give values of different shapes, nested in the branch of a cond on
    a fed flag, with a predicate made from a fed count that reaches it through the outer cond's
    Switch, is decided by those feeds (``feeds_behind`` follows the Switch to its value and
    predicate): the plan is specialised on them (``NeedsStatic``) and compiles, giving the
    reference's values, rather than being refused."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, [], name="p")
        n = tn.placeholder(tn.int32, [], name="n")
        x = tn.placeholder(tn.float32, [], name="x")

        def ragged() -> Any:
            inner = tn.cond(n > 0, lambda: tn.fill([2], x), lambda: tn.fill([3], x * 2.0))
            return tn.reduce_sum(inner)

        y = tn.cond(p, ragged, lambda: x - 1.0)
    feeds = {p: np.bool_(flag), n: np.int32(count), x: np.float32(1.5)}
    want = tn.Session(g).run(y, feeds)
    sess = tn.Session(g, backend="fast", fallback=False)
    np.testing.assert_allclose(sess.run(y, feeds), want)
    assert sess.last_result is not None and sess.last_result.stats["executor"] == "compiled"
    assert set(sess.last_result.stats["specialized_on"]) == {"p:0", "n:0"}


@pytest.mark.parametrize(("i", "j"), [(1, 0), (0, 1), (0, 0)])
def test_a_ragged_chain_of_conds_compiles_specialised_on_the_feeds_behind_every_predicate(i: int, j: int) -> None:
    """Law: a chain of two nested conds (the inner one last in the outer's false branch) whose
    branches give values of different shapes, each predicate made from its own fed integer alone
    (the inner one in the outer's false branch by a control edge, not through its Switch), is
    specialised on the feeds behind *every* predicate of the chain (the union over
    its conds, not those of one level alone); it then compiles and gives the reference's values
    for every branch taken."""
    g = tn.Graph()
    with g.as_default():
        a = tn.placeholder(tn.int32, [], name="a")
        b = tn.placeholder(tn.int32, [], name="b")
        x = tn.placeholder(tn.float32, [], name="x")
        pa = a > 0
        outer_false, outer_true = raw.switch(x, pa)
        with tn.control_dependencies([tn.identity(outer_false)]):  # (in the outer false branch, from b alone)
            pb = b > 0
        inner_false, inner_true = raw.switch(outer_false, pb)
        inner, _ = raw.merge([tn.fill([3], inner_false * 3.0), tn.fill([2], inner_true * 2.0)])
        out, _ = raw.merge([inner, tn.fill([1], outer_true)])
        y = tn.reduce_sum(out)
    feeds = {a: np.int32(i), b: np.int32(j), x: np.float32(1.5)}
    want = tn.Session(g).run(y, feeds)
    sess = tn.Session(g, backend="fast", fallback=False)
    np.testing.assert_allclose(sess.run(y, feeds), want)
    assert sess.last_result is not None and sess.last_result.stats["executor"] == "compiled"
    assert set(sess.last_result.stats["specialized_on"]) == {"a:0", "b:0"}


def test_a_ragged_cond_on_a_fed_float_is_refused_with_its_message() -> None:
    """Law: a cond whose branches give values of different shapes, decided by a fed float (data: a
    plan per value would compile on every run), is not specialised but refused, with the message
    naming the cond, its Merge and the mismatch."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        y = tn.cond(x > 0.5, lambda: tn.fill([2], x), lambda: tn.fill([3], x), name="ragged")
    sess = tn.Session(g, backend="fast", fallback=False)
    with pytest.raises(UnsupportedError, match=r'two branches of the cond on Greater:0 near Merge node "ragged/merge"'
                                               r".*different types or shapes"):
        sess.run(y, {x: np.float32(1.0)})


def test_a_ragged_case_chain_on_a_variable_is_refused_naming_the_outermost_conds_merge() -> None:
    """Law: a ``tn.case`` (one chain) whose branches give values of different shapes, decided by a
    Variable (no feed to specialise on), is refused with a message that names the chain by its
    outermost cond and that cond's first Merge."""
    g = tn.Graph()
    with g.as_default():
        v = tn.Variable(np.int32(1), name="v")
        i = v.read()
        x = tn.placeholder(tn.float32, [], name="x")
        y = tn.case([(tn.equal(i, k), (lambda k=k: tn.fill([k + 1], x))) for k in range(3)],
                    default=lambda: tn.fill([5], x))
    program = functionalize(g, [y], [x])
    outer = next(it for it in program.items if isinstance(it, CondRegion))
    assert len(outer.branches[False]) >= 1 and outer.merges
    sess = tn.Session(g, backend="fast", fallback=False)
    with pytest.raises(UnsupportedError, match="case chain") as got:
        sess.run(y, {x: np.float32(1.0)})
    assert f"of {outer.describe()} near {describe_node(outer.merges[0][0])} produce" in str(got.value)


class _RaggedChain(_Recording):
    """The emitter with function ``k`` of a raised case chain traced as handing out one value of
    ``k + 1`` elements: values of different shapes, as no ``lax.switch`` takes."""

    def _chain_level(self, chain: Any, k: int, senv: Any, computed: Any, exports: Any, consts: Any,
                     exported: Any) -> Any:
        def fn(state: Any) -> Any:
            return [], [jnp.zeros(k + 1)], [np.asarray(True)], dict(state)

        return fn


def test_a_ragged_case_chain_without_merges_is_refused_naming_its_outermost_conds_first_node() -> None:
    """Law: the functions of a raised case chain on predicates no feed decides that give values of
    different shapes are refused (``UnsupportedError``) with a message naming the outermost cond's
    first Merge, or, for one without Merges (one that only hands values out), its first node."""
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        x = tn.placeholder(tn.float32, [], name="x")
        y = tn.case([(tn.equal(i, k), (lambda k=k: x * float(k + 1))) for k in range(2)], default=lambda: x)
    program = functionalize(g, [y], [i, x])
    r = next(it for it in program.items if isinstance(it, CondRegion))
    inner = r.branches[False][-1]
    assert isinstance(inner, CondRegion) and r.merges
    preds = ([jnp.asarray(True), jnp.asarray(False)], {}, set())
    for merges, named in [(r.merges, r.merges[0][0]), ([], r.nodes[0])]:
        bare = CondRegion(r.pred, r.scope, r.switches, merges, r.branches, r.nodes)
        with pytest.raises(UnsupportedError, match="different types or shapes") as got:
            _RaggedChain(program).run_case_chain([bare, inner], preds, {}, [])
        assert f"near {describe_node(named)} produce" in str(got.value)


def test_a_gradients_merge_of_a_raised_case_chain_leaves_it_as_the_constant_every_level_gave() -> None:
    """Law: a gradient's Merge on the outermost cond of a raised case chain that hands a branch's
    value out (the value on the levels whose branch computes it, a stand-in on the others), which
    every level where it lives gave as one constant while tracing (a ``Const`` of the branch), is
    that constant after the ``lax.switch`` (as a shape a later ``Fill`` reads must be), not the
    traced value the switch gives; one that a level gave as a traced value stays traced. The
    gradient is the reference's."""
    import jax

    from turnout.fast import conds as cmod
    from turnout.fast.regions import walk
    from turnout.fast.values import is_static

    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        f = tn.placeholder(tn.float64, [None], name="f")
        (v,) = tn.case(i, [lambda: (f * 2.0,), lambda: (tn.sin(f),)], default=lambda: (f + 1.0,))
        (df,) = tn.gradients(tn.reduce_sum(v * v), [f])
    program = functionalize(g, [v, df], [i, f])
    merges = [m for it in walk(program.items) if isinstance(it, CondRegion) for m, _ in it.merges
              if cmod._exports_for_gradient(m)]
    consts = [m for m in merges if all(t.node.op == "Const" for t in m.inputs)]
    assert consts and len(consts) < len(merges)
    static: dict[str, bool] = {}

    def run(iv: Any, fv: Any) -> Any:
        em = _Recording(program)
        em.fed = {i.node.id, f.node.id}
        env = {key(i): iv, key(f): fv}
        em.run_items(program.items, env)
        static.update((m.name, is_static(env[key(m.outputs[0])])) for m in merges)
        return env[key(df)]

    fv = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(jax.jit(run)(np.int32(1), fv), tn.Session(g).run(df, {i: 1, f: fv}))
    assert static == {m.name: m in consts for m in merges}


def test_a_raised_case_chain_computes_each_speculated_node_once() -> None:
    """Law: the nodes that compute a raised case chain's predicates (``speculate``) are computed
    once, up front, and each function of the ``lax.switch`` reuses them (the emitter's ``known``
    grows by them) rather than computing them again in every function, which made tracing a case
    quadratic in its branches; the value is the reference's."""
    import jax

    from turnout.fast.case_chain import find_chain

    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        x = tn.placeholder(tn.float32, [3], name="x")
        y = tn.case([(tn.equal(i, k), (lambda k=k: x * float(k + 1))) for k in range(4)], default=lambda: x - 1.0)
    program = functionalize(g, [y], [i, x])
    chain = find_chain(next(it for it in program.items if isinstance(it, CondRegion)))
    speculated = {n.id for c in chain[:-1] for n in c.branches[False][:-1]}
    assert len(chain) == 4 and speculated
    runs: list[int] = []

    class Counting(_Recording):
        def run_node(self, n: Any, env: Any) -> None:
            if n.id not in self.known:  # (lowered here, not taken from the speculation)
                runs.append(n.id)
            super().run_node(n, env)

    def run(iv: Any, xv: Any) -> Any:
        em = Counting(program)
        em.fed = {i.node.id, x.node.id}
        env = {key(i): iv, key(x): xv}
        em.run_items(program.items, env)
        return env[key(y)]

    xv = np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(jax.jit(run)(np.int32(2), xv), tn.Session(g).run(y, {i: 2, x: xv}))
    assert all(runs.count(n) == 1 for n in speculated)


def test_the_modules_export_list_names_each_public_name_it_defines_once() -> None:
    """Law: ``__all__`` names every public name the module itself defines at its top level (its
    functions, classes, constants and aliases: no leading underscore), each once, and nothing else,
    so ``from turnout.fast.conds import *`` gives exactly the module's own interface."""
    import ast
    import inspect

    from turnout.fast import conds as cmod

    tree = ast.parse(inspect.getsource(cmod))
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {t.id for t in targets if isinstance(t, ast.Name)}
    public = {n for n in defined if not n.startswith("_")}
    assert len(cmod.__all__) == len(set(cmod.__all__)) and set(cmod.__all__) == public


@pytest.mark.parametrize("k", [1, 2])
def test_a_gradient_merge_of_a_chain_traced_on_one_level_and_constant_on_a_later_one_stays_traced(k: int) -> None:
    """Law: a gradient's Merge on a raised case chain's outermost cond (a stand-in on its true side,
    the inner cond's Merge on its false side) that level 1 gives as a traced value and the default
    level as a constant is no constant after the ``lax.switch``: once one level gave a traced value
    the constants of later levels are no longer collected, and the value is the taken level's, as
    on the reference."""
    g = tn.Graph()
    with g.as_default():
        i = tn.placeholder(tn.int32, [], name="i")
        x = tn.placeholder(tn.float32, [], name="x")
        p0 = tn.equal(i, 0)
        x_f, x_t = raw.switch(x, p0)
        i_f, _ = raw.switch(i, p0)
        p1 = tn.equal(i_f, 1)
        y_f, y_t = raw.switch(x_f, p1)
        with tn.control_dependencies([tn.identity(y_f)]):
            three = tn.constant(3.0)
        inner, _ = raw.merge([three, y_t * 2.0])
        with tn.control_dependencies([tn.identity(x_t)]):
            filler = g.create_node("Const", (), {"value": np.asarray(0.0, np.float32), "dtype": "float32",
                                                 "gradient_filler": True}, name="filler").outputs[0]
        out, _ = raw.merge([inner, filler])
    feeds = {i: np.int32(k), x: np.float32(1.5)}
    want = tn.Session(g).run(out, feeds)
    sess = tn.Session(g, backend="fast", fallback=False)
    np.testing.assert_allclose(sess.run(out, feeds), want)
    assert sess.last_result is not None and sess.last_result.stats["executor"] == "compiled"
