"""Laws of the full while loop while tracing (``turnout.fast.loops``): a loop whose header is not light
(``facts.light_header``: here a predicate computed with arithmetic, which is not speculable) runs as
``lax.while_loop`` over (carried header values, predicate, state, iteration count). Each law kills
mutants of the full set of ``fast/loops.py`` (issue 40, part 3; ``python tools/mutation.py --module
fast/loops.py --all``) that the loop-form and fast-backend tests of its list leave alive.

Each law runs a tiny program on the fast backend, compiled with ``fallback=False`` (so a refusal
raises rather than sending the run to the interpreter), against the reference interpreter; where a
law is about the tracing itself, the module's functions are called directly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import turnout as tn
from turnout import raw


def _fast(g: tn.Graph, **options: Any) -> tn.Session:
    return tn.Session(g, backend="fast", fallback=False, **options)


def _both(g: tn.Graph, fetch: Any, feeds: dict[Any, Any], **options: Any) -> Any:
    """The fast backend's value (compiled, no fallback) after checking it against the reference's."""
    want = tn.Session(g).run(fetch, feeds, **options)
    sess = _fast(g)
    got = sess.run(fetch, feeds, **options)
    for a, b in zip(got if isinstance(fetch, list) else [got], want if isinstance(fetch, list) else [want],
                    strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    assert sess.last_result is not None and sess.last_result.stats["executor"] == "compiled"
    return got


def _outcome(sess: tn.Session, fetch: Any, feeds: dict[Any, Any], **options: Any) -> tuple[str, Any]:
    """The value, or the error's type and its message up to the tag the interpreters add."""
    try:
        return "value", np.asarray(sess.run(fetch, feeds, **options)).tolist()
    except tn.TurnoutError as e:
        return type(e).__name__, str(e).split(" (")[0]


def _loop_cond_read_in_body_and_exit() -> tuple[tn.Graph, Any, Any]:
    """A hand-built loop (frame ``lc``) whose body and exit side read its ``LoopCond`` output itself,
    not through a Switch (each ``where(p, ...)`` reads ``p`` and a Switch output, so it runs on that
    Switch's side): ``i <- where(p, i + 2, i)`` while ``2 i < n`` (``p`` true in the body), and after
    it ``where(p, i + 10, i)`` (false there). Its header computes ``2 i`` (not light): the full form."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        fr = "lc"
        m, _ = raw.merge([raw.enter(tn.constant(0), fr), raw.BACK_EDGE])
        two = raw.enter(tn.constant(2), fr, is_constant=True)
        p = raw.loop_cond(tn.less(m * two, raw.enter(n, fr, is_constant=True)))
        f, t = raw.switch(m, p)
        one = raw.enter(tn.constant(1), fr, is_constant=True)
        raw.close_back_edge(m, raw.next_iteration(tn.where(p, t + one + one, t)))
        ten = raw.enter(tn.constant(10), fr, is_constant=True)
        y = raw.exit(tn.where(p, f + ten, f))
    return g, n, y


@pytest.mark.parametrize("limit", [0, 5])
def test_a_full_loops_body_and_exit_side_read_its_loop_cond_as_the_side_they_are_on(limit: int) -> None:
    """Law: in a full loop the ``LoopCond`` output reads true in the body and false on the exit side
    (each side's environment holds the predicate under the LoopCond's key): the reference's values."""
    g, n, y = _loop_cond_read_in_body_and_exit()
    _both(g, y, {n: limit})


def _growing(name: str) -> tuple[tn.Graph, Any, Any]:
    """A loop whose carry grows by one entry an iteration while its sum is below ``x`` (a float: the
    trace cannot know the trip count, so it cannot unroll it either)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        _, v = tn.while_loop(lambda i, v: tn.reduce_sum(v) < x,
                             lambda i, v: (i + 1, tn.concat([v, tn.ones([1])], 0)),
                             [tn.constant(0), tn.ones([1])], shape_invariants=[[], [None]], name=name)
    return g, x, v


def test_a_full_loop_whose_carry_changes_shape_is_refused_naming_the_loop() -> None:
    """Law: a loop whose carry changes shape across iterations and whose trip count the trace cannot
    know is refused, the refusal naming the loop's frame and saying that its carry changes type or
    shape in the loop's own words, found by the carry check before ``lax.while_loop`` sees the carry
    (``CarryChanges``'s message, which the unroller's refusal quotes, then its own reason)."""
    g, x, v = _growing("grows")
    with pytest.raises(tn.errors.UnsupportedError,
                       match=r"loop frame 'grows/frame0'.* changes type or shape across iterations "
                             r"\(shape_invariants\); XLA loops need a fixed shape; "):
        _fast(g).run(v, {x: 3.5})


def test_a_full_loops_predicate_of_the_wrong_shape_is_the_interpreters_error_naming_the_loop_cond() -> None:
    """Law: a full loop's predicate fed as a vector (its static shape unknown) is refused at run time
    with the interpreters' error, which names the ``LoopCond`` that reads it."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, None, name="n")
        y = tn.while_loop(lambda i: tn.less(i * 2, n), lambda i: i + 1, [tn.constant(0)], name="vec")[0]
    feeds = {n: np.array([3, 4], np.int32)}
    want = _outcome(tn.Session(g), y, feeds)
    assert want[0] == "KernelError" and "LoopCond" in want[1]
    assert _outcome(_fast(g), y, feeds) == want


def _counted_full(bound: int) -> tuple[tn.Graph, Any, Any]:
    """A counted loop (``i < bound``, ``i`` from 0 by 1) whose body reads a value its header computes
    (``2 s``: not speculable, so the header is not light and the loop takes the full form), ``s <-
    3 s + x``; after it ``fill([i], s)``, whose shape is the loop's trip count."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float32, [], name="x")
        header: dict[str, Any] = {}

        def cond(i: Any, s: Any) -> Any:
            header["twice"] = s * 2.0
            return i < bound

        count, total = tn.while_loop(cond, lambda i, s: (i + 1, s + header["twice"] + x),
                                     [tn.constant(0), tn.constant(1.0)])
        out = tn.fill(tn.reshape(count, [1]), total)
    return g, x, out


@pytest.mark.parametrize("bound", [0, 3])
def test_a_full_counted_loops_trip_count_is_known_after_it_while_tracing(bound: int) -> None:
    """Law: where a full loop is counted with a start and a bound known while tracing, its counter's
    value after the loop is the constant ``facts.counter_exits`` gives, under the counter Merge's
    key: a shape computed from it after the loop is static, and the program compiles into one call
    (the reference's values)."""
    g, x, out = _counted_full(bound)
    assert _both(g, out, {x: 0.5}).shape == (bound,)


def _spanning() -> tuple[tn.Graph, Any, list[Any]]:
    """A loop on ``cpu:0`` whose two variables start on ``cpu:1`` and are computed in the body on
    ``cpu:0`` and ``cpu:1`` in turn, each from the other: every entry and every next value crosses
    a device to reach its Merge."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        with tn.device("cpu:1"):
            a0, b0 = tn.constant(1.0), tn.constant(2.0)

        def body(i: Any, a: Any, b: Any) -> Any:
            with tn.device("cpu:1"):
                a2 = b * 2.0 + 1.0
            with tn.device("cpu:0"):
                b2 = a - 3.0
                return i + 1, a2, b2

        with tn.device("cpu:0"):
            _, a, b = tn.while_loop(lambda i, a, b: i < n, body, [tn.constant(0), a0, b0])
    return g, n, [a, b]


def test_a_loop_spanning_devices_moves_its_entries_and_next_values_to_their_merges() -> None:
    """Law: under the SPMD tier (where every loop takes the full form) a loop's entry values and next
    values are read as its Merges read them, moved to their device: the reference's values for
    several trip counts, in one compiled program."""
    from turnout.devices import place
    from turnout.devices.spmd import spmd_choice
    from turnout.session import RunOptions

    g, n, outs = _spanning()
    plan = spmd_choice(g, place(g, ["cpu:0", "cpu:1"]), outs, [n])
    assert not isinstance(plan, str), plan
    ref = tn.Session(g)
    for trips in (0, 1, 4):
        got = plan.run({n: np.int32(trips)}, {}, RunOptions())
        assert got.stats["tier"] == "spmd"
        np.testing.assert_allclose([float(v) for v in got.values], [float(v) for v in ref.run(outs, {n: trips})])


def _grows_fed(with_gradient: bool) -> tuple[tn.Graph, list[Any], dict[str, Any]]:
    """A full loop (its predicate ``2 i < 2 k`` is arithmetic) of ``k`` (fed) iterations whose carry
    grows by one entry each, ``y <- y x`` beside it; with ``with_gradient``, ``dy/dx`` too (its stack
    starts pending: the body is traced by ``discover``, not by ``lax.while_loop`` itself)."""
    g = tn.Graph()
    with g.as_default():
        x = tn.placeholder(tn.float64, [], name="x")
        k = tn.placeholder(tn.int32, [], name="k")

        def body(i: Any, y: Any, v: Any) -> Any:
            return i + 1, y * x, tn.concat([v, tn.reshape(y, [1])], 0)

        _, y, v = tn.while_loop(lambda i, y, v: i * 2 < k * 2, body,
                                [tn.constant(0), tn.ones_like(x), tn.zeros([1], tn.float64)],
                                shape_invariants=[[], [], [None]], name="fed")
        fetch = [y, v] + (tn.gradients(y, [x]) if with_gradient else [])
    return g, fetch, {"x": x, "k": k}


@pytest.mark.parametrize("with_gradient", [False, True])
def test_a_full_loop_whose_carry_grows_is_unrolled_where_its_trip_count_is_fed(with_gradient: bool) -> None:
    """Law: the refusal of a full loop whose carry changes shape names that very loop (its
    ``region``), whether the body was traced by ``lax.while_loop`` (a settled carry) or first by
    ``discover`` (a pending stack in it); so the emitter unrolls the loop where the trace knows its
    trip count (fed here), and the values are the reference's."""
    g, fetch, f = _grows_fed(with_gradient)
    for n in (0, 3):
        got = _both(g, fetch, {f["x"]: 1.5, f["k"]: n})
        assert got[1].shape == (1 + n,)


def _region() -> Any:
    """A loop region of a small program (``describe`` names its frame ``probe/frame0``)."""
    from turnout.fast.functionalize import functionalize
    from turnout.fast.regions import WhileRegion

    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        y = tn.while_loop(lambda i: i < n, lambda i: i + 1, [tn.constant(0)], name="probe")[0]
    (r,) = [it for it in functionalize(g, [y], [n]).items if isinstance(it, WhileRegion)]
    return r


def test_the_carry_check_passes_a_kept_carry_and_names_the_loop_or_a_loop_when_none_is_given() -> None:
    """Law: ``_check_carry`` lets a carry that keeps its tree, shapes and dtypes pass, and refuses one
    whose shape or dtype changes, with a ``CarryChanges`` naming the loop it is given, or "a loop"
    where it is given none (a caller outside a region)."""
    import jax.numpy as jnp

    from turnout.fast.loops import CarryChanges, LoopEmitter

    r = _region()
    c0 = (jnp.zeros(2, jnp.float32), jnp.int32(0))
    LoopEmitter._check_carry(c0, (jnp.ones(2, jnp.float32), jnp.int32(4)), r)
    for out in [(jnp.zeros(3, jnp.float32), jnp.int32(0)), (jnp.zeros(2, jnp.int32), jnp.int32(0)),
                (jnp.zeros(2, jnp.float32),)]:
        with pytest.raises(CarryChanges) as e:
            LoopEmitter._check_carry(c0, out, r)
        assert e.value.region is r and str(e.value).startswith(f"fast backend: a loop variable of {r.describe()} "
                                                              "changes type or shape across iterations")
    with pytest.raises(CarryChanges) as e:
        LoopEmitter._check_carry(c0, (jnp.zeros(3, jnp.float32), jnp.int32(0)), None)
    assert e.value.region is None and "a loop variable of a loop changes type" in str(e.value)


def test_lax_while_loops_own_type_error_names_the_loop_and_a_body_fault_surfaces_as_itself() -> None:
    """Law: a ``TypeError`` that ``lax.while_loop`` raises about the loop itself (its carry changing
    type, past the check) becomes a ``CarryChanges`` naming the loop and quoting JAX; a ``TypeError``
    of the body's own lowering, carried out of the trace by ``loop_body``'s wrapper, surfaces as that
    ``TypeError`` and nothing else."""
    import jax.numpy as jnp

    from turnout.fast.loops import CarryChanges, LoopEmitter

    r = _region()

    def cond(c: Any) -> Any:
        return c[0] < 3

    with pytest.raises(CarryChanges) as e:
        LoopEmitter._while_loop(r, cond, lambda c: (c[0] + 1, jnp.zeros(3)), (jnp.int32(0), jnp.zeros(2)))
    assert e.value.region is r and str(e.value).startswith(f"fast backend: a loop variable of {r.describe()} "
                                                          "changes type or shape across iterations "
                                                          "(shape_invariants); XLA loops need a fixed shape: ")
    assert str(e.value).split("need a fixed shape: ", 1)[1]  # (JAX's own words follow)

    class _Em:
        _check_carry = staticmethod(LoopEmitter._check_carry)

    def faulty(c: Any) -> Any:
        raise TypeError("a lowering's own fault")

    c0 = (jnp.int32(0), jnp.zeros(2))
    c0, body = LoopEmitter.loop_body(_Em(), faulty, c0, r)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="^a lowering's own fault$") as got:
        LoopEmitter._while_loop(r, cond, body, c0)
    assert not isinstance(got.value, CarryChanges)
    ok = LoopEmitter.loop_body(_Em(), lambda c: (c[0] + 1, c[1] * 2.0), c0, r)[1]  # type: ignore[arg-type]
    assert int(LoopEmitter._while_loop(r, cond, ok, c0)[0]) == 3


def _spin(name: str) -> tuple[tn.Graph, Any, Any]:
    """A full loop (its predicate ``2 i < 2 k`` is arithmetic) of ``k`` (fed) bodies: ``i`` after it."""
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        y = tn.while_loop(lambda i: i * 2 < k * 2, lambda i: i + 1, [tn.constant(0)], name=name)[0]
    return g, k, y


@pytest.mark.parametrize("trips", [4, 5, 6])
def test_a_full_loop_runs_up_to_its_iteration_budget_and_past_it_is_the_interpreters_runaway(trips: int) -> None:
    """Law: a full loop may run as many bodies as ``max_iterations`` allows (5 here) and no more: one
    more is the interpreters' ``NonTerminationError`` naming the loop (the predicate still true when
    the budget is spent), the same outcome as the reference's."""
    g, k, y = _spin("spin")
    want = _outcome(tn.Session(g), y, {k: trips}, max_iterations=5)
    assert want[0] == ("NonTerminationError" if trips > 5 else "value")
    assert _outcome(_fast(g), y, {k: trips}, max_iterations=5) == want


def test_a_full_loop_false_at_entry_while_tracing_hands_on_its_entry_values_as_known() -> None:
    """Law: a full loop whose predicate is known false before its first body (a constant bound of 0)
    is not emitted at all: its exits take the entry values as they are, known while tracing, so a
    shape computed after it from a loop variable that is no counter (``j <- j + 2``, from 2) is static
    and the program compiles into one call."""
    g = tn.Graph()
    with g.as_default():
        header: dict[str, Any] = {}

        def cond(i: Any, j: Any) -> Any:
            header["j"] = j * 1
            return i < 0

        _, j = tn.while_loop(cond, lambda i, j: (i + 1, j + header["j"] * 0 + 2), [tn.constant(0), tn.constant(2)])
        out = tn.fill(tn.reshape(j, [1]), 1.5)
    assert _both(g, out, {}).shape == (2,)


class _DeadEm:
    """A stand-in emitter for ``while_fns``: the core's ``wire`` over plain reads, and a ``hold`` that
    records its call."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}
        self.held: list[Any] = []

    def wire(self, wires: Any, src: Any, dst: Any = None) -> None:
        from turnout.fast.emitter_core import EmitterCore

        EmitterCore.wire(self, wires, src, dst)  # type: ignore[arg-type]

    def read(self, env: Any, t: Any, reader: Any) -> Any:
        from turnout.fast.regions import key

        return env[key(t)]

    def hold(self, r: Any, state: Any) -> None:
        self.held.append((r, state))


def test_a_full_loop_entered_dead_takes_its_held_stacks_and_hands_dead_exits_on() -> None:
    """Law: a full loop a dead value enters ([E-Switch-Dead] before it) emits no loop: ``start`` takes
    the loop's held stacks first (the backward loop's pops read them even then) and gives no carry,
    and ``finish`` writes every Exit of the loop dead ([E-Merge-AllDead]). (A trace prunes a Switch
    whose predicate it knows before the loop behind it is emitted, so only a stand-in emitter reaches
    this.)"""
    from turnout.fast import plumbing
    from turnout.fast.loops import LoopEmitter
    from turnout.fast.regions import key
    from turnout.fast.values import DEAD

    r = _region()
    env: dict[Any, Any] = {key(t): DEAD for t, _ in plumbing.entries(r)}
    env.update({key(inv.inputs[0]): np.int32(3) for inv in r.invariants})
    em = _DeadEm()
    start, _, finish = LoopEmitter.while_fns(em, r, env)  # type: ignore[arg-type]
    state = {"err": np.int32(0)}
    assert start(state) is None and em.held == [(r, state)]
    out: dict[Any, Any] = {"other": 1}
    finish(None, out)
    assert plumbing.exit_keys(r) and out == {"other": 1, **{k: DEAD for k in plumbing.exit_keys(r)}}
    # the same through run_full_while, which writes the dead Exits into the loop's own environment
    em.while_fns = lambda r, env: LoopEmitter.while_fns(em, r, env)  # type: ignore[attr-defined]
    LoopEmitter.run_full_while(em, r, env)  # type: ignore[arg-type]
    assert all(env[k] is DEAD for k in plumbing.exit_keys(r))


def test_a_full_loop_with_a_pending_tensor_array_whose_carry_grows_is_unrolled_where_its_trip_count_is_fed() -> None:
    """Law: a full loop whose carry holds a TensorArray with no element shape yet (pending: its body
    is traced first by ``discover``) and a value that grows is refused by ``discover``'s carry check
    naming that very loop, so the emitter unrolls it where its trip count is fed: the reference's
    values, for several trip counts."""
    g = tn.Graph()
    with g.as_default():
        k = tn.placeholder(tn.int32, [], name="k")
        ta = tn.TensorArray(tn.float32, size=0, dynamic_size=True)

        def body(i: Any, v: Any, ta: Any) -> Any:
            return i + 1, tn.concat([v, v[-1:] * 2.0], 0), ta.write(i, tn.reduce_sum(v))

        _, v, ta = tn.while_loop(lambda i, v, ta: i * 2 < k * 2, body, [tn.constant(0), tn.ones([1]), ta],
                                 shape_invariants=[[], [None], None], name="pending")
        out = ta.stack()
    for n in (1, 3):
        _both(g, [v, out], {k: n})


def test_read_at_1_holds_the_nodes_whose_output_1_is_read_and_no_other() -> None:
    """Law: ``read_at_1`` is the set of the program's nodes whose output 1 some node reads: a loop's
    Switch (its output 1 feeds the body), not its Merge (whose output 1, the value index, nothing
    reads here) nor its LoopCond (one output); found once, the same set on a second call."""
    from types import SimpleNamespace

    from turnout.fast.functionalize import functionalize
    from turnout.fast.loops import LoopEmitter

    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        y = tn.while_loop(lambda i: i < n, lambda i: i + 1, [tn.constant(0)], name="probe")[0]
    em = SimpleNamespace(_read_at_1=None, program=functionalize(g, [y], [n]))
    got = LoopEmitter.read_at_1(em)  # type: ignore[arg-type]
    ops = {nd.id: nd.op for nd in g.nodes}
    assert got and {ops[i] for i in got} == {"Switch"}
    assert LoopEmitter.read_at_1(em) is got  # type: ignore[arg-type]


class _StateEm:
    """A stand-in emitter for ``discover``: its run-time state and the real carry check."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {"err": np.int32(0)}

    _check_carry = staticmethod(lambda c0, out, region: None)


def test_discover_leaves_the_emitters_state_as_it_found_it() -> None:
    """Law: ``discover`` traces the body, which writes its own (traced) run-time state into the
    emitter, and then gives the emitter back the state it had before: its caller (a light nest run
    in a cond on its checks reads the error word next) reads no value of the body's trace."""
    import jax.numpy as jnp

    from turnout.fast.loops import LoopEmitter

    em = _StateEm()
    before = em.state

    def body(c: Any) -> Any:
        em.state = {"err": c[0]}
        return (c[0] + 1, c[1] * 2.0)

    c0 = (jnp.int32(0), jnp.zeros(2))
    LoopEmitter.discover(em, body, c0)  # type: ignore[arg-type]
    assert em.state is before


def test_discover_gives_up_reconciling_after_eight_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Law: ``discover`` makes the carry concrete and traces the body again at most eight times, even
    where every trace finds another pending value: its work is bounded (a body that needs more
    rounds is then refused by the carry check, not traced without end)."""
    import jax.numpy as jnp

    from turnout.fast import loops

    rounds: list[int] = []

    def never_settles(c0: Any, shapes: Any) -> tuple[Any, bool]:
        rounds.append(1)
        return c0, True

    monkeypatch.setattr(loops, "reconcile", never_settles)
    c0 = (jnp.int32(0),)
    loops.LoopEmitter.discover(_StateEm(), lambda c: (c[0] + 1,), c0)  # type: ignore[arg-type]
    assert len(rounds) == 8


def _invariant_twice(after: bool) -> tuple[tn.Graph, Any, list[Any]]:
    """A loop on ``cpu:0`` adding ``x`` (computed on ``cpu:1``, read as a loop invariant) ``n`` times,
    with a second variable computed on ``cpu:1`` (the loop spans both devices); with ``after``, ``x``
    is added once more on ``cpu:0`` after the loop (a reader that runs after it, since it reads the
    loop's result). Both variables are fetched."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.int32, [], name="n")
        with tn.device("cpu:1"):
            x = tn.cast(n, tn.float32) * 2.0  # (computed while running: a fed value or a constant is not moved)

        def body(i: Any, a: Any, b: Any) -> Any:
            with tn.device("cpu:1"):
                b2 = b * 0.5 + 1.0
            with tn.device("cpu:0"):
                return i + 1, a + x, b2

        with tn.device("cpu:0"):
            _, a, b = tn.while_loop(lambda i, a, b: i < n, body, [tn.constant(0), tn.constant(1.0), tn.constant(2.0)])
            y = a + x if after else a * 1.0
    return g, n, [y, b]


def test_an_invariant_moved_into_a_loop_is_not_moved_again_for_a_reader_after_it() -> None:
    """Law: under the SPMD tier a loop invariant read from another device is moved once, in the
    caller's environment: a reader on the loop's device after the loop reuses that copy, so the
    program with the second reader traces as many moves as the one without it (the reference's
    values)."""
    from turnout.devices import place
    from turnout.devices.spmd import spmd_choice
    from turnout.session import RunOptions

    moves = {}
    for after in (False, True):
        g, n, outs = _invariant_twice(after)
        plan = spmd_choice(g, place(g, ["cpu:0", "cpu:1"]), outs, [n])
        assert not isinstance(plan, str), plan
        got = plan.run({n: np.int32(3)}, {}, RunOptions())
        assert got.stats["tier"] == "spmd"
        np.testing.assert_allclose([float(v) for v in got.values], [float(v) for v in tn.Session(g).run(outs, {n: 3})])
        moves[after] = got.stats["moves_per_trace"]
    assert moves[False] >= 1 and moves[True] == moves[False]


def _fails_as_on_the_reference(g: tn.Graph, fetch: Any, feeds: dict[Any, Any]) -> Any:
    """Run ``fetch`` on the fast backend (no fallback; a small ladder, rungs 4 and 8) and on the
    reference: both raise the same ``KernelError``, and the fast backend's one plan is returned."""
    from turnout.errors import KernelError

    want = _outcome(tn.Session(g), fetch, feeds)
    assert want[0] == "KernelError"
    sess = tn.Session(g, backend="fast", fallback=False, options=tn.FastOptions(stack_chunk=8, stack_first_rung=4))
    with pytest.raises(KernelError):
        sess.run(fetch, feeds)
    assert _outcome(sess, fetch, feeds) == want
    return next(iter(sess.backend._plans.values()))


def test_a_fused_attempts_loop_that_pushes_stops_at_its_first_error() -> None:
    """Law: in a fused attempt a full loop that pushes onto a stack stops at the first error its body
    sets (``Emitter.stop_on_error``): its stack then holds no more than the entries pushed up to the
    error, within the first rung, so the run raises the interpreters' error from that rung and climbs
    to no rung above it (run on, the loop would push past the rung, and the attempt would be
    discarded for a larger one only to fail the same way)."""
    g = tn.Graph()
    with g.as_default():
        n = tn.placeholder(tn.float32, [], name="n")
        v = tn.placeholder(tn.float32, [2], name="v")
        stack = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []}, name="stk").outputs[0]

        def body(i: Any, h: Any) -> Any:
            p = g.create_node("StackPush", [stack, tn.reshape(i, [1]), tn.cast(i, tn.float32)], name="push").outputs[0]
            return i + 1, h + p * 0.0 + v[i]  # (v[2] is out of range: the error at the third body)

        # (a float bound: the trace cannot know the trip count, so the loop is never unrolled)
        _, h = tn.while_loop(lambda i, h: tn.cast(i, tn.float32) * 2.0 < n * 2.0, body,
                             [tn.constant(0), tn.constant(0.0)], name="push")
    plan = _fails_as_on_the_reference(g, h, {n: 6.0, v: np.ones(2, np.float32)})
    assert len(plan.ladder) > 1 and sorted(plan.rungs) == plan.ladder[:1]
    assert plan.fused is not None and not plan.refused  # (the attempt ran: its trace refused nothing)


def test_a_fused_attempts_loop_that_pops_stops_at_its_first_error() -> None:
    """Law: in a fused attempt a full loop that pops (and pushes nothing) stops at the first error
    its body sets too: the stack keeps the entries it had not popped yet, so the pushes made after
    the loop count on from there, past the first rung here, and the attempt is discarded for the
    rung that holds them (``Discard.needed``), where the run raises the interpreters' error. (Run
    on, the loop would pop every entry, and the pushes after it would fit the first rung.)"""
    g = tn.Graph()
    with g.as_default():
        v = tn.placeholder(tn.float32, [2], name="v")
        stack = g.create_node("StackNew", (), {"elem_dtype": "float32", "elem_shape": []}, name="stk").outputs[0]

        def push_body(i: Any, h: Any) -> Any:
            p = g.create_node("StackPush", [stack, tn.reshape(i, [1]), tn.cast(i, tn.float32)], name="push").outputs[0]
            return i + 1, h + p * 0.0

        _, h = tn.while_loop(lambda i, h: i < 3, push_body, [tn.constant(0), tn.constant(0.0)], name="pushes")
        with tn.control_dependencies([h]):
            top = tn.constant(2) + 0

        def pop_body(j: Any, s: Any) -> Any:
            popped = g.create_node("StackPop", [stack, tn.reshape(top - j, [1])], {"dtype": "float32"},
                                   name="pop").outputs[0]
            return j + 1, s + tn.reshape(popped, []) + v[j + 2]  # (v[2] is out of range: the first body fails)

        _, total = tn.while_loop(lambda j, s: j * 2 < 6, pop_body, [tn.constant(0), tn.constant(0.0)], name="pops")
        after = total
        for k in range(3):
            with tn.control_dependencies([after]):
                after = g.create_node("StackPush", [stack, tn.constant([k]), after], name=f"again{k}").outputs[0]
    plan = _fails_as_on_the_reference(g, after, {v: np.ones(2, np.float32)})
    assert plan.fused is not None and not plan.refused and len(plan.rungs) == 2
