"""Laws of loops unrolled while tracing (``turnout.fast.unrolled``). Each law kills mutants of the full
set of ``fast/unrolled.py`` (issue 40, part 3) that ``tests/test_fast_unrolled.py`` leaves alive or
reaches only through its generated cases (seconds each). The first laws run small programs compiled
with ``fallback=False`` against the reference interpreter; the rest drive the module's functions
with a stand-in emitter and loop (``_Em``, ``_Loop``), which record what the unrolling asks of
them: that is how a loop with dead entries is reached at all (the trace prunes a Switch whose
predicate it knows before any loop behind it is emitted), and each law then takes milliseconds."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import turnout as tn
from turnout.errors import NonTerminationError, UnsupportedError
from turnout.fast import unrolled
from turnout.fast.loops import CarryChanges
from turnout.fast.lowering_base import NeedsStatic
from turnout.fast.outcome import NONTERM
from turnout.fast.plumbing import dead, exit_wires
from turnout.fast.values import DEAD


def _grow(limit: Any, start: Any) -> Any:
    """A loop of ``limit`` iterations whose carry grows by its last entry's tanh at each one: its
    carry changes shape, so the fast backend can only unroll it."""
    return tn.while_loop(lambda i, a: i < limit, lambda i, a: (i + 1, tn.concat([a, tn.tanh(a[-1:]) * 1.5], 0)),
                         [tn.constant(0), start], shape_invariants=[[], [None]])[1]


def _both(g: tn.Graph, fetch: Any, feeds: dict[Any, Any], **options: Any) -> Any:
    """The fast backend's value (compiled, no fallback) after checking it against the reference's."""
    want = tn.Session(g).run(fetch, feeds, **options)
    sess = tn.Session(g, backend="fast", fallback=False)
    got = sess.run(fetch, feeds, **options)
    for a, b in zip(got if isinstance(fetch, list) else [got], want if isinstance(fetch, list) else [want],
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert sess.last_result is not None and sess.last_result.stats["executor"] == "compiled"
    return got


@pytest.mark.parametrize("n", [0, 1, 3])
def test_an_unrolled_loop_runs_its_bodies_and_exits_with_the_last_values(n: int) -> None:
    """A loop of ``n`` (fed) iterations whose carry grows: its exit holds ``2 + n`` values, the
    reference's, and its counter ends at ``n``. The common case: kills most of the mutants of
    ``run_unrolled`` and ``_iterate`` (the header's first flag, the sides, the body's next values)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        k = tn.placeholder(tn.int32, [], name="k")
        i, acc = tn.while_loop(lambda i, a: i < k, lambda i, a: (i + 1, tn.concat([a, a[-1:] * 2.0 + 1.0], 0)),
                               [tn.constant(0), x], shape_invariants=[[], [None]])
    got = _both(g, [i, acc], {x: np.array([1.0, -0.5], np.float32), k: n})
    assert int(got[0]) == n and got[1].shape == (2 + n,)


def _nested() -> tuple[tn.Graph, tn.Tensor, tn.Tensor, tn.Tensor]:
    """A loop of a fixed carry (a ``lax`` loop) run ``k`` times, a growing loop of two steps from
    ``x * s`` in its body: (its graph, ``x``, ``k``, its sum)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [2], name="x")
        k = tn.placeholder(tn.int32, [], name="k")
        out = tn.while_loop(lambda j, s: j < k, lambda j, s: (j + 1, s + tn.reduce_sum(_grow(2, x * s))),
                            [tn.constant(0), tn.constant(1.0)])[1]
    return g, x, k, out


def test_an_unrolled_loop_inside_a_loop_runs_once_per_outer_iteration() -> None:
    """A growing loop inside a loop of a fixed carry (a ``lax`` loop) is unrolled in its body, in its
    own frame: the outer loop's values are the reference's for several trip counts."""
    g, x, k, out = _nested()
    for n in (0, 2):
        _both(g, out, {x: np.array([0.5, -1.0], np.float32), k: n})


@pytest.mark.parametrize("budget, runs", [(2, True), (1, False)])
def test_an_unrolled_loop_inside_a_loop_meets_the_iteration_budget(budget: int, runs: bool) -> None:
    """``max_iterations`` bounds an unrolled loop's bodies inside a loop too: two bodies run under a
    budget of two, and under a budget of one the run raises the reference's ``NonTerminationError``,
    naming the inner loop. Kills the mutants of ``_budget``'s nested branch (its error code)."""
    g, x, k, out = _nested()
    feeds = {x: np.array([0.5, -1.0], np.float32), k: 1}
    if runs:
        _both(g, out, feeds, max_iterations=budget)
        return
    with pytest.raises(NonTerminationError) as want:
        tn.Session(g).run(out, feeds, max_iterations=budget)
    with pytest.raises(NonTerminationError) as got:
        tn.Session(g, backend="fast", fallback=False).run(out, feeds, max_iterations=budget)
    inner = "loop frame 'while/body/while/frame1'"
    assert str(want.value).startswith(inner) and str(got.value).startswith(inner)


def _t(node_id: int, index: int = 0, graph: Any = None) -> Any:
    """A stand-in tensor: output ``index`` of node ``node_id`` (its key is ``(node_id, index)``)."""
    return SimpleNamespace(node=SimpleNamespace(id=node_id), index=index, graph=graph)


def _region(n_vars: int = 1) -> Any:
    """A stand-in loop region of ``n_vars`` loop variables (Enter ``10 + v`` entering tensor ``v``,
    Merge ``20 + v``, NextIteration ``30 + v`` reading tensor ``40 + v``), one Exit each (node
    ``50 + v``, reading ``60 + v``), and body and exit-side item lists."""
    loop_vars = [(SimpleNamespace(inputs=[_t(v)]), SimpleNamespace(id=20 + v, outputs=[_t(20 + v)]),
                  SimpleNamespace(inputs=[_t(40 + v)]), None, None) for v in range(n_vars)]
    exits = [SimpleNamespace(id=50 + v, inputs=[_t(60 + v)], outputs=[_t(50 + v)]) for v in range(n_vars)]
    return SimpleNamespace(loop_vars=loop_vars, exits=exits, invariants=[], header=[], body=["body"],
                           exit_side=["exit side"])


class _Em:
    """A stand-in emitter: it records every call the unrolling makes, and reads each tensor's value
    from ``values`` (by node id), or from the environment it is read in."""

    def __init__(self, values: dict[int, Any], unroll_max: int = 4, max_iter: Any = None) -> None:
        self.values, self.unroll_max, self.max_iter = values, unroll_max, max_iter
        self.state: dict[str, Any] = {"err": 0}
        self.frames: list[int] = []
        self.fed = {7}
        self.calls: list[tuple[Any, ...]] = []

    def hold(self, r: Any, state: Any) -> None:
        self.calls.append(("hold", r, state))

    def read(self, env: Any, t: Any, reader: Any) -> Any:
        self.calls.append(("read", env, t.node.id, reader.id))
        return env[t.node.id] if t.node.id in env else self.values[t.node.id]

    def wire(self, wires: Any, src: Any, dst: Any = None) -> None:
        self.calls.append(("wire", wires, src, dst))

    def run_items(self, items: Any, env: Any) -> None:
        self.calls.append(("run", items, env))
        env.update({40 + v: np.asarray(env["vals"][v] + 1) for v in range(len(env["vals"]))})

    def _leave_frame(self, before: Any, off: Any) -> None:
        self.calls.append(("leave", before, off))

    def check(self, ok: Any, message: Any, code: Any = None) -> None:
        self.calls.append(("check", bool(ok), message, code))

    def _set_err(self, over: Any, code: Any) -> None:
        self.calls.append(("set_err", bool(over), code))


class _Loop:
    """A stand-in light loop over region ``r``: its header's predicate is ``vals[0] < stop`` (a numpy
    value, known while tracing) or, from header ``unknown_at`` on, a traced one."""

    def __init__(self, em: _Em, r: Any, stop: int, number: int = 0, framed: bool = False,
                 unknown_at: Any = None) -> None:
        self.em, self.r, self.stop, self.unknown_at = em, r, stop, unknown_at
        self.env = {"entry": True}
        self.number, self.framed, self.off, self.before, self.message = number, framed, 2, "err0", "runaway"
        self.headers: list[tuple[list[Any], bool, list[int]]] = []
        self.sides: list[tuple[Any, Any, int]] = []
        self.preds: list[Any] = []

    def header(self, vals: list[Any], first: bool) -> tuple[Any, Any]:
        self.headers.append((list(vals), first, list(self.em.frames)))
        k = len(self.headers) - 1
        pred = np.asarray(vals[0] < self.stop)
        self.preds.append(jnp.asarray(pred) if self.unknown_at is not None and k >= self.unknown_at else pred)
        return {"h": k, "vals": vals}, self.preds[-1]

    def side(self, henv: Any, pred: Any, branch: int) -> Any:
        assert pred is self.preds[henv["h"]], "a side taken with another predicate than its header's"
        self.sides.append((henv["h"], bool(pred), branch))
        return {"side": branch, "h": henv["h"], "vals": henv["vals"]}


def test_a_loop_with_a_dead_entry_exits_dead_and_runs_nothing() -> None:
    """[E-Merge-AllDead] through an unrolled loop: where a loop variable enters dead, every Exit is
    dead in the environment the loop was entered in, and no header or body runs; the stacks its
    gradient holds are taken first all the same. Kills the mutants of ``run_unrolled``'s dead
    shortcut, its reads of the entries and its ``hold``."""
    em, r = _Em({0: np.asarray(0), 1: DEAD}), _region(2)
    loop = _Loop(em, r, stop=3)
    unrolled.run_unrolled(em, loop, CarryChanges("grows", None))  # type: ignore[arg-type]
    assert em.calls == [("hold", r, em.state), ("read", loop.env, 0, 20), ("read", loop.env, 1, 21),
                        ("wire", dead([(50, 0), (51, 0)]), loop.env, None)]
    assert loop.headers == []


@pytest.mark.parametrize("framed", [False, True])
def test_an_unrolled_loop_runs_each_body_on_the_last_values_then_its_exit_side(framed: bool) -> None:
    """[E-Enter], then per iteration the header on the loop variables (``first`` only at the first),
    the body on the true side ([E-Switch] 1) and [E-Next-Live] (the NextIteration's input, read as
    its Merge passes it) as the next values, until the predicate is false; then the exit side on
    the last header's false side ([E-Switch] 0, with the predicate that ended the loop) and
    [E-Exit-Live] into the entering environment. A
    framed loop (the first of its height in a nest) has its number on the emitter's frames while its
    headers and bodies run, and leaves its frame after. Kills the mutants of ``run_unrolled`` and
    ``_iterate`` that pass another environment, side, flag or value, or lose the frame."""
    em, r = _Em({0: np.asarray(0)}), _region(1)
    loop = _Loop(em, r, stop=3, number=5, framed=framed)
    unrolled.run_unrolled(em, loop, CarryChanges("grows", None))  # type: ignore[arg-type]
    assert [(int(v[0]), first) for v, first, _ in loop.headers] == [(0, True), (1, False), (2, False), (3, False)]
    assert {tuple(frames) for _, _, frames in loop.headers} == {(5,) if framed else ()}
    assert em.frames == []
    assert loop.sides == [(0, True, 1), (1, True, 1), (2, True, 1), (3, False, 0)]
    runs = [c for c in em.calls if c[0] == "run"]
    assert [(items, env["side"], env["h"]) for _, items, env in runs] == [
        (["body"], 1, 0), (["body"], 1, 1), (["body"], 1, 2), (["exit side"], 0, 3)]
    body_reads = [c for c in em.calls if c[0] == "read" and c[2] == 40]
    assert [(env["h"], reader) for _, env, _, reader in body_reads] == [(0, 20), (1, 20), (2, 20)]
    assert [c for c in em.calls if c[0] == "leave"] == ([("leave", "err0", 2)] if framed else [])
    wire = em.calls[-1]
    assert wire[0] == "wire" and wire[1] == exit_wires(r) and wire[2]["side"] == 0 and wire[3] is loop.env


def test_a_loop_may_run_exactly_unroll_max_bodies_and_no_more() -> None:
    """``unroll_max`` bodies are unrolled (the header after the last one is still read, and ends the
    loop); one more body is refused as too many, naming the bound. Kills the mutants of
    ``_iterate``'s range and of its last check."""
    em = _Em({0: np.asarray(0)}, unroll_max=3)
    bodies, henv, pred = unrolled._iterate(em, _Loop(em, _region(), stop=3), [np.asarray(0)],  # type: ignore[arg-type]
                                           CarryChanges("grows", None))
    assert (bodies, henv["h"], bool(pred)) == (3, 3, False)
    em = _Em({0: np.asarray(0)}, unroll_max=3)
    loop = _Loop(em, _region(), stop=4)
    with pytest.raises(UnsupportedError, match=r"^grows; it runs more than 3 bodies, too many to unroll "
                                               r"\(FastOptions.unroll_max\)$"):
        unrolled._iterate(em, loop, [np.asarray(0)], CarryChanges("grows", None))  # type: ignore[arg-type]
    assert len(loop.headers) == 4 and len([c for c in em.calls if c[0] == "run"]) == 3


def test_a_refusal_other_than_a_changing_carry_is_raised_as_it_is() -> None:
    """``_refused``: only a loop refused for its changing carry gets the reason it was not unrolled
    either (after the lowering's); any other refusal is raised unchanged, as the lowering gave it."""
    other = UnsupportedError("a pop's shape")
    assert unrolled._refused(other, "why") is other
    got = unrolled._refused(CarryChanges("grows", None), "why")
    assert type(got) is UnsupportedError and str(got) == "grows; why"


def test_a_trip_count_known_only_at_run_time_specialises_on_deciding_feeds_at_the_first_header(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A predicate not known while tracing: at the first header of a loop refused for its changing
    carry, the feeds that decide what the header reads (``_feeds_deciding``) are asked for
    (``NeedsStatic``, its message the refusal's); with none, at a later header, or for another
    refusal, it is refused, saying why. Kills the mutants of ``_not_known``'s condition, its keys
    and its message."""
    asked: list[tuple[Any, Any]] = []
    deciding: Any = frozenset({(7, 0)})

    def feeds(em: Any, loop: Any) -> Any:
        asked.append((em, loop))
        return deciding

    monkeypatch.setattr(unrolled, "_feeds_deciding", feeds)
    em = _Em({0: np.asarray(0)})
    loop = _Loop(em, _region(), stop=3, unknown_at=0)
    with pytest.raises(NeedsStatic) as e:
        unrolled._iterate(em, loop, [np.asarray(0)], CarryChanges("grows", None))  # type: ignore[arg-type]
    assert e.value.keys == deciding and asked == [(em, loop)]
    assert str(e.value) == "grows; its trip count is known only when the program runs"
    for refusal, k, found in [(CarryChanges("grows", None), 1, deciding), (CarryChanges("grows", None), 0, None),
                              (UnsupportedError("other"), 0, deciding)]:
        asked.clear()
        deciding = found
        loop = _Loop(em, _region(), stop=3, unknown_at=k)
        with pytest.raises(UnsupportedError) as e:
            unrolled._iterate(em, loop, [np.asarray(0)], refusal)  # type: ignore[arg-type]
        assert not isinstance(e.value, NeedsStatic)
        assert str(e.value) == ("other" if str(refusal) == "other"
                                else "grows; its trip count is known only when the program runs")
        assert len(asked) == (1 if k == 0 and isinstance(refusal, CarryChanges) else 0)


def _deciding_case(monkeypatch: pytest.MonkeyPatch, behind: dict[int, Any], small: set[tuple[int, int]]) -> Any:
    """A loop of three variables and two invariants for ``_feeds_deciding``: variable 0 enters a
    traced value the header reads, variable 1 a numpy value (known) it reads, variable 2 a traced
    value it does not read; invariant 3 (Enter ``3``, value traced) is read, invariant 4 (traced)
    is not. ``behind`` gives the feeds ``feeds_behind`` finds behind each entering tensor (by node
    id), and ``small`` the fed keys that are small decisions."""
    graph = SimpleNamespace(nodes={7: SimpleNamespace(outputs=[("t", 7, 0), ("t", 7, 1)]),
                                   8: SimpleNamespace(outputs=[("t", 8, 0)]),
                                   9: SimpleNamespace(outputs=[("t", 9, 0)])})
    r = _region(3)
    for v in range(3):
        r.loop_vars[v][0].inputs[0].graph = graph
    invs = [SimpleNamespace(inputs=[_t(v, 0, graph)], outputs=[_t(67 + v)]) for v in (3, 4)]
    r.invariants = invs
    r.header = [SimpleNamespace(inputs=[_t(20), _t(21)]), SimpleNamespace(inputs=[_t(70)])]
    for h in r.header:  # (each stand-in node holds itself, as fast.regions.item_nodes reads an item)
        h.nodes = [h]
    em = _Em({0: jnp.zeros(()), 1: np.asarray(1), 2: jnp.zeros(())})
    loop = _Loop(em, r, stop=3)
    loop.base = {(70, 0): jnp.zeros(()), (71, 0): jnp.zeros(())}

    def feeds_behind(t: Any, fed: Any) -> Any:
        assert fed is em.fed
        return behind.get(t.node.id)

    monkeypatch.setattr(unrolled, "feeds_behind", feeds_behind)
    monkeypatch.setattr(unrolled, "small_decision", lambda t: (t[1], t[2]) in small)
    return unrolled._feeds_deciding(em, loop)  # type: ignore[arg-type]


def test_the_feeds_deciding_a_header_are_those_behind_every_unknown_value_it_reads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The feeds a plan is specialised on for an unknown trip count: the union of those behind each
    value the header reads that the trace does not know, a loop variable's entering value or an
    invariant's; a value it knows, or one the header does not read, asks for nothing (whatever is
    behind it). Kills the mutants of ``_feeds_deciding`` that key, read or skip another value, stop
    at the first skipped one, or keep only some of the keys."""
    behind = {0: frozenset({(7, 0)}), 1: None, 2: None, 3: frozenset({(7, 1), (8, 0)}), 4: None}
    got = _deciding_case(monkeypatch, behind, {(7, 0), (7, 1), (8, 0)})
    assert got == frozenset({(7, 0), (7, 1), (8, 0)})


@pytest.mark.parametrize("case", ["not behind feeds", "data", "nothing"])
def test_no_feeds_decide_a_header_where_something_else_or_data_does(monkeypatch: pytest.MonkeyPatch,
                                                                    case: str) -> None:
    """``None`` (the loop is refused, not specialised) where something other than feeds decides a
    value the header reads (``feeds_behind`` finds none), where a feed behind one is data (not a
    small decision: a plan per value would compile every run), or where no feed is behind any."""
    behind = {0: frozenset({(7, 0)}), 3: frozenset({(8, 0)})}
    small = {(7, 0), (8, 0)}
    if case == "not behind feeds":
        behind[3] = None
    elif case == "data":
        small = {(7, 0)}
    else:
        behind = {0: frozenset(), 3: frozenset()}
    assert _deciding_case(monkeypatch, behind, small) is None


@pytest.mark.parametrize("number, bodies, max_iter, over", [(0, 3, 3, False), (0, 4, 3, True), (0, 0, 3, None),
                                                            (0, 3, None, None), (5, 3, 3, False), (5, 4, 3, True)])
def test_an_unrolled_loop_checks_its_bodies_against_the_iteration_budget(number: int, bodies: int, max_iter: Any,
                                                                         over: Any) -> None:
    """``max_iterations`` bounds the bodies an unrolled loop ran (more than it, not as many, is over):
    a loop at the root checks it with the loop's runaway message (code ``nonterm``), a loop in a
    nest sets the error word to ``NONTERM`` plus its offset in the nest; no bodies, or no budget,
    checks nothing. Kills the mutants of ``_budget``."""
    em = _Em({}, max_iter=max_iter)
    unrolled._budget(em, _Loop(em, _region(), stop=0, number=number), bodies)  # type: ignore[arg-type]
    if over is None:
        assert em.calls == []
    elif number == 0:
        assert em.calls == [("check", not over, "runaway", "nonterm")]
    else:
        assert em.calls == [("set_err", over, NONTERM + 2)]


def test_the_module_exports_what_it_defines() -> None:
    """Every name in ``fast.unrolled.__all__`` is defined by the module (``tests/test_exports.py``'s
    law, for this module alone). Kills the ``__all__`` mutants."""
    from test_exports import test_every_exported_name_exists

    test_every_exported_name_exists("turnout.fast.unrolled")
