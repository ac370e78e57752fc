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

import numpy as np
import pytest

import turnout as tn
from turnout import raw
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
