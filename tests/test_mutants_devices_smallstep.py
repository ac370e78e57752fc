"""Laws of the small-step system over partitions (``turnout.devices.smallstep``): what its initial
configuration routes and fetches, where a sent token lands, what an outcome reports, how the explorer
counts, bounds and reports what it visits, and how a random run picks its interleaving. They kill
mutants of the full set of ``devices/smallstep.py`` (issue 40, part 3). The programs are two or three
ops on two devices (a dozen configurations each), so every count here can be checked by hand or by
an independent search in a few lines."""

from __future__ import annotations

import itertools
import types
from typing import Any

import pytest

import turnout as tn
from turnout import raw
from turnout.devices import partition, place
from turnout.devices import smallstep as pss
from turnout.errors import NonTerminationError

D2 = ["cpu:0", "cpu:1"]
CPU0, CPU1 = "/job:localhost/task:0/device:CPU:0", "/job:localhost/task:0/device:CPU:1"


def _chain() -> tuple[pss.System, tn.Tensor, tn.Tensor]:
    """``a = x + 1`` on cpu:0 and ``b = a * 2`` on cpu:1, both fetched (``b`` first), ``x`` fed 3: one
    Send/Recv pair, a fetch on each partition."""
    g = tn.Graph()
    with g.as_default():
        with tn.device("cpu:0"):
            x = tn.placeholder(tn.int32, shape=[], name="x")
            a = tn.add(x, 1, name="a")
        with tn.device("cpu:1"):
            b = tn.multiply(a, 2, name="b")
    parted = partition(g, place(g, D2), [b, a], {(x.node.id, 0)})
    return pss.system(parted, {x: 3}), a, b


def _int(v: int) -> Any:
    return ("live", ("int32", (), v))


def _reachable(s: pss.System) -> tuple[set[pss.PartitionedConfig], list[pss.PartitionedConfig]]:
    """Every configuration reachable from ``s.initial`` and the final ones, by a plain breadth-first
    search over ``steps`` and ``step``."""
    seen, frontier, finals = {s.initial}, [s.initial], []
    while frontier:
        pc = frontier.pop(0)
        nxt = pss.steps(s, pc)
        if not nxt:
            finals.append(pc)
        for i, f in nxt:
            child = pss.step(s, pc, i, f)
            if child not in seen:
                seen.add(child)
                frontier.append(child)
    return seen, finals


def test_a_system_routes_each_recv_and_lists_each_fetch_where_it_is_produced() -> None:
    """``route`` maps a cut edge to the partition holding its Recv; ``fetches`` gives each fetch, in
    the order asked, as (partition index, (node id, output), original name); the partitioned graph is
    kept. Kills ``system`` mutants that drop or blank the route, the fetches or the partitioned graph,
    or read a fetch of another device as its own."""
    s, a, b = _chain()
    assert list(s.parted.partitions) == [CPU0, CPU1]
    (edge,) = s.route
    assert s.route == {edge: 1} and edge.startswith("a:0")
    recv = [n for n in s.parted.partitions[CPU1].graph.nodes if n.op == "Recv"]
    assert [n.attrs["edge"] for n in recv] == [edge]
    (tb,) = [t for d, t in s.parted.fetches if d == CPU1]
    (ta,) = [t for d, t in s.parted.fetches if d == CPU0]
    assert s.fetches == [(1, (tb.node.id, tb.index), "b:0"), (0, (ta.node.id, ta.index), "a:0")]
    assert s.parted.fetches[0][1] is tb and len(s.initial.configs) == 2


def test_each_partition_starts_with_its_own_feeds_and_nothing_in_flight() -> None:
    """The initial configuration is one small-step configuration per partition: the fed value waits on
    the edges of its own partition, nothing has fired, been produced or sent. Kills ``system`` giving a
    partition no feeds."""
    s, _, _ = _chain()
    c0, c1 = s.initial.configs
    assert c0.pending and not c1.pending
    assert not c0.fired and not c1.fired and not c0.produced and not c1.produced
    assert not c0.mailbox and not c1.mailbox


def test_configurations_are_equal_by_value_and_only_to_configurations() -> None:
    """Two configurations reached by the same steps are equal and hash alike; different ones differ
    and hash apart (the explorer's memo is a hash set); a configuration equals nothing that is not
    one. Kills ``PartitionedConfig.__eq__`` with ``or`` or ``!=`` and ``__hash__`` hashing None."""
    s, _, _ = _chain()
    (first, *_), pc = pss.steps(s, s.initial), s.initial
    one, two = pss.step(s, pc, *first), pss.step(s, pc, *first)
    assert one is not two and one == two and hash(one) == hash(two)
    assert one != pc and hash(one) != hash(pc)
    assert pc != object() and pc != pc.key() and not (pc == 3)


def test_a_sent_token_lands_in_the_receivers_mailbox_and_nowhere_else() -> None:
    """[E-Send] across partitions: firing the Send moves its token, keyed by the cut edge and its tag,
    into the mailbox of the partition that holds the Recv; that partition's other fields are untouched
    (it has not run), and the sending partition's mailbox stays empty. Kills ``step`` mutants that
    blank or drop a field of the receiving configuration, route by the tag instead of the edge, or
    intersect the mailbox with the token instead of adding it."""
    s, _, _ = _chain()
    pc = s.initial
    while not pc.configs[1].mailbox:
        ((i, f),) = [(i, f) for i, f in pss.steps(s, pc) if i == 0][:1]
        pc = pss.step(s, pc, i, f)
    before, after = s.initial.configs[1], pc.configs[1]
    ((key, tok),) = after.mailbox
    assert key[0] in s.route and key[1] == () and not tok.is_dead and int(tok.value) == 4
    assert after.program is before.program
    assert (after.pending, after.fired, after.instances) == (before.pending, before.fired, before.instances)
    assert (after.variables, after.stacks, after.produced) == (before.variables, before.stacks, before.produced)
    assert not pc.configs[0].mailbox
    assert pss.outcome(s, pc) is None  # a token in flight: the run has not ended cleanly


def test_an_outcome_needs_every_fetch_produced() -> None:
    """Before anything ran no fetch is produced: no outcome. After the whole run, each fetch's live
    value in the order asked. Kills ``outcome`` mutants that read a produced token by the wrong key or
    never, and that report a live value under another word or without its value."""
    s, _, _ = _chain()
    assert pss.outcome(s, s.initial) is None
    out, final = pss.run(s)
    assert out == (_int(8), _int(4)) == pss.outcome(s, final)


def test_a_dead_fetch_is_reported_dead_by_name_and_a_live_one_by_value() -> None:
    """A fetch on the untaken side of a Switch ends dead: its outcome is ("dead", its name), beside a
    live fetch's ("live", value). Kills ``outcome`` reporting every token as live, every token as dead,
    or a dead one under another word."""
    g = tn.Graph()
    with g.as_default():
        p = tn.placeholder(tn.bool, shape=[], name="p")
        x = tn.placeholder(tn.int32, shape=[], name="x")
        _, on_true = raw.switch(x, p)
        with tn.device("cpu:1"):
            y = tn.multiply(on_true, tn.constant(10), name="y")
            z = tn.add(x, 1, name="z")
    feeds = {p: False, x: 3}
    parted = partition(g, place(g, D2), [y, z], {(t.node.id, t.index) for t in feeds})
    out, _ = pss.run(pss.system(parted, feeds))
    assert out == (("dead", "y:0"), _int(4))


def test_explore_visits_each_reachable_configuration_once_and_reports_complete() -> None:
    """``n_states`` is the number of reachable configurations, each counted once (the independent
    search's count); the search is complete, nothing is stuck and the outcome is the run's. Kills
    ``explore`` counting from 1, setting the count to 1, forgetting what it has seen, and starting
    ``complete`` as False or None."""
    s, _, _ = _chain()
    seen, finals = _reachable(s)
    r = pss.explore(s)
    assert r.n_states == len(seen) > 5 and r.complete is True and r.stuck == []
    assert r.outcomes == {(_int(8), _int(4))} and len(finals) == 1
    assert pss.PartitionedExploration(set(), 0).complete is True
    assert pss.PartitionedExploration(set(), 0).stuck == []


def test_explore_stops_at_max_states_and_says_it_is_incomplete() -> None:
    """With room for three configurations the explorer visits exactly three (the initial one and the
    first two it finds) and reports that it did not see everything (``complete`` exactly False). Kills
    ``explore`` letting one more in (``>`` for ``>=``) and marking the search complete or None."""
    s, _, _ = _chain()
    r = pss.explore(s, max_states=3)
    assert r.n_states == 3 and r.complete is False


def test_a_quiescent_configuration_with_a_fetch_missing_is_reported_stuck() -> None:
    """A maximal run whose fetch was never produced has no outcome: the explorer lists its final
    configuration as stuck and reports no outcome for it. Here the system asks for a fetch no
    partition produces (a node id no graph has). Kills ``explore`` filing a stuck run as an outcome,
    or its configuration as None."""
    s, _, _ = _chain()
    broken = pss.System(s.parted, s.route, [(0, (10**6, 0), "nowhere:0")], s.initial)
    _, finals = _reachable(s)
    r = pss.explore(broken)
    assert r.outcomes == set() and r.stuck == finals and r.complete is True


def _racing_assigns() -> pss.System:
    """Three assigns of one Variable on cpu:0 with no order between them, summed on cpu:1: every
    interleaving fetches 6, but the Variable ends holding whichever assign fired last."""
    g = tn.Graph()
    with g.as_default():
        with tn.device("cpu:0"):
            v = tn.Variable(0, name="v")
            writes = [v.assign(k) for k in (1, 2, 3)]
        with tn.device("cpu:1"):
            total = writes[0] + writes[1] + writes[2]
    return pss.system(partition(g, place(g, D2), [total], set()), {})


def test_a_random_run_is_reproducible_by_its_seed_and_seed_0_by_default() -> None:
    """``run`` picks uniformly among the enabled steps with a generator seeded by ``seed`` (0 unless
    given): the same seed gives the same final configuration, the default is seed 0's, and different
    seeds reach different interleavings (the Variable's last writer differs), while the fetched value
    is the same. Kills ``run`` seeding with None (the clock) and defaulting to seed 1."""
    s = _racing_assigns()
    runs = {k: pss.run(s, seed=k) for k in range(8)}
    assert all(out == ((_int(6)),) for out, _ in runs.values())
    assert all(pss.run(s, seed=k)[1] == pc for k, (_, pc) in runs.items())
    last = {int(pc.configs[0].variables["v"]) for _, pc in runs.values()}
    assert len(last) > 1
    assert pss.run(s)[1] == runs[0][1] != runs[1][1]


def test_a_run_past_max_steps_raises_naming_the_bound() -> None:
    """A run that has not ended within ``max_steps`` steps raises ``NonTerminationError`` saying how
    many steps it took; with room for the whole run it ends. Kills ``run`` raising with no message."""
    s, _, _ = _chain()
    seen, _ = _reachable(s)
    with pytest.raises(NonTerminationError, match="more than 2 steps"):
        pss.run(s, max_steps=2)
    assert pss.run(s, max_steps=len(seen))[0] == (_int(8), _int(4))


@pytest.fixture
def endless(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A system that never ends, made cheap: ``steps`` offers one firing in every configuration and
    ``step`` makes the next configuration a new integer, so each step costs a function call (the
    default bounds are then reached in about a second)."""
    monkeypatch.setattr(pss, "steps", lambda s, pc: [(0, None)])
    monkeypatch.setattr(pss, "step", lambda s, pc, i, f: pc + 1)
    return types.SimpleNamespace(initial=0)


def test_explore_stops_by_default_at_fifty_thousand_configurations(endless: Any) -> None:
    """Unless told otherwise the explorer visits at most 50 000 configurations (the bound its
    signature states) and then says it is incomplete. Kills the default raised by one."""
    r = pss.explore(endless)
    assert r.n_states == 50_000 and r.complete is False and not r.outcomes


def test_a_run_stops_by_default_after_a_million_steps(endless: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unless told otherwise a random run takes at most 1 000 000 steps (the bound its signature
    states) and then raises, saying so. Kills the default raised by one."""
    taken = itertools.count()
    monkeypatch.setattr(pss, "step", lambda s, pc, i, f: next(taken))
    with pytest.raises(NonTerminationError, match="more than 1000000 steps"):
        pss.run(endless)
    assert next(taken) == 1_000_000
