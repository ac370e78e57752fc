"""Laws of a cluster run's merged trace (``turnout.devices.cluster_trace``): the wall clock that stamps a
task's firings, the least clock offsets that put every Recv after its Send, and the merge of the tasks'
tracks into one timeline. They kill mutants of the full set of ``devices/cluster_trace.py`` (issue 40,
part 3) that the cluster runs left alive, because a run on one machine needs no correction at all. The
tracks are written by hand (a few ``Event`` each), so every stamp and offset here can be checked on
paper; nothing runs a graph."""

from __future__ import annotations

import pytest

from turnout.devices import cluster_trace
from turnout.devices.cluster_trace import ClockOffsets, WallClock, clock_offsets, merge
from turnout.reference.trace import Event

T0, T1, T2 = "/job:worker/task:0", "/job:worker/task:1", "/job:worker/task:2"
TAG = (("f", 0),)


def _ev(seq: int, node: str, op: str, rule: str = "r", dead: bool = False) -> Event:
    return Event(seq, node, op, TAG, dead, rule)


def _send(seq: int, edge: str) -> Event:
    return _ev(seq, f"_send/{edge}", "Send", "E-Send")


def _recv(seq: int, edge: str) -> Event:
    return _ev(seq, f"_recv/{edge}", "Recv", "E-Recv")


def _cpu(task: str, i: int = 0) -> str:
    return f"{task}/device:CPU:{i}"


def test_a_wall_clock_starts_at_the_clocks_own_microsecond(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first stamp is the wall clock's microsecond, even at the clock's zero: nothing before it
    was stamped. Kills ``WallClock.__init__`` starting ``last`` at +1 (a first reading of 0 would be
    stamped 2)."""
    ns = iter([0, 999, 2_000])
    monkeypatch.setattr(cluster_trace.time, "time_ns", lambda: next(ns))
    clock = WallClock()
    assert [next(clock) for _ in range(3)] == [0, 1, 2]


def test_only_the_sends_and_recvs_of_cut_edges_constrain_the_clocks() -> None:
    """A constraint pairs a Send firing named ``_send/<edge>`` with the Recv firing named
    ``_recv/<edge>`` at the same tag; other firings (a Send op under another name, another op under
    a Send's name, and the same for Recv) are no rendezvous and must not move a task's clock, however
    their stamps fall. Kills ``clock_offsets`` reading a send or a recv with ``or`` for ``and`` or with
    the op test negated, and reading every event as a Recv (``... or True``)."""
    tracks = {_cpu(T0): [_ev(100, "_send/a", "Identity"), _ev(100, "mysendb", "Send"), _send(100, "c")],
              _cpu(T1): [_recv(10, "a"), _recv(10, "b"), _ev(10, "_recv/c", "Identity"), _ev(10, "myrecvc", "Recv")]}
    assert clock_offsets(tracks) == ClockOffsets({T0: 0, T1: 0}, True)


def test_a_send_and_recv_within_one_task_never_constrain_its_clock() -> None:
    """Two devices of one task share its clock and get one offset, so no offset could reorder a Send
    and Recv between them: such a pair makes no constraint, whatever its stamps (here the Recv's
    stamp is the earlier). Kills ``clock_offsets`` comparing the sender's stamp, not its task, with the
    receiving task (``sent[1] != receiver``: every pair a constraint, a task against itself one that
    can never be met)."""
    tracks = {_cpu(T0, 0): [_send(100, "a")], _cpu(T0, 1): [_recv(99, "a")], _cpu(T1): [_ev(5, "x", "Add")]}
    assert clock_offsets(tracks) == ClockOffsets({T0: 0, T1: 0}, True)


def test_the_tightest_constraint_of_a_pair_of_tasks_wins_whichever_comes_last() -> None:
    """Between two tasks the offset must satisfy every Recv, so the largest ``send - recv + 1`` of the
    pair decides it, and the order in which the Recvs are read does not matter. Here the looser
    constraint (3) is read first and the tighter (6) second. Kills ``clock_offsets`` taking the
    second term one or two ticks off (``- 1``, ``+ 2``) and not keeping the largest so far."""
    tracks = {_cpu(T0): [_send(100, "a"), _send(101, "c")], _cpu(T1): [_recv(99, "c"), _recv(95, "a")]}
    assert clock_offsets(tracks) == ClockOffsets({T0: 0, T1: 6}, True)
    reverse = {_cpu(T0): tracks[_cpu(T0)], _cpu(T1): list(reversed(tracks[_cpu(T1)]))}
    assert clock_offsets(reverse) == clock_offsets(tracks)


def test_offsets_follow_a_chain_of_tasks_read_in_any_order() -> None:
    """Task 1 lags task 0 (a Recv 5 before its Send: offset 6) and task 2 lags task 1 by 3 more on its
    own stamps (offset 6 + 3 = 9): an offset moves everything the task sent, so the next task down the
    chain must move with it. Task 2's track is read first, so its constraint is met in the first round
    and broken again when task 1 moves: the search needs a second round to settle. Kills
    ``clock_offsets`` adding the offsets it compares (``off[b] + off[a]``), marking a raise as no
    change (one round only) and stopping at the first round that changed something."""
    tracks = {_cpu(T2): [_recv(48, "b")], _cpu(T1): [_send(50, "b"), _recv(95, "a")], _cpu(T0): [_send(100, "a")]}
    assert clock_offsets(tracks) == ClockOffsets({T2: 9, T1: 6, T0: 0}, True)
    trace = merge(tracks)
    assert [(d, e.node, e.seq) for d, e in trace.events] == [
        (_cpu(T1), "_send/b", 0), (_cpu(T2), "_recv/b", 1), (_cpu(T0), "_send/a", 44), (_cpu(T1), "_recv/a", 45)]


def test_clocks_no_offset_can_reconcile_stop_after_one_round_per_task_and_one_more() -> None:
    """Tasks 0 and 1 each received a message stamped 10 us before it was sent: no offsets satisfy both
    (a positive cycle), so the search gives up, saying so with ``consistent`` False (exactly False, not
    merely falsy), after its bound of one round per task and one more (four here): each round raises
    task 0 by 22 (to 11 past task 1) and task 1 by 22 (to 11 past task 0).
    Task 2 takes no part and stays at 0, so the offsets show how many rounds ran. Kills
    ``clock_offsets`` starting ``consistent`` as None and running a round more."""
    tracks = {_cpu(T0): [_send(100, "a"), _recv(95, "b")], _cpu(T1): [_recv(90, "a"), _send(105, "b")],
              _cpu(T2): [_ev(1, "x", "Add")]}
    fix = clock_offsets(tracks)
    assert fix.consistent is False
    assert fix.offsets == {T0: 77, T1: 88, T2: 0}


def test_no_tracks_need_no_offsets() -> None:
    """An empty run has no tasks: no offsets, and nothing inconsistent. Kills ``clock_offsets`` taking
    the smallest offset with no default (an error on no tasks)."""
    assert clock_offsets({}) == ClockOffsets({}, True)


def test_a_merged_timeline_keeps_every_field_and_starts_at_zero() -> None:
    """Each merged event is the task's event with only its stamp moved: shifted by its task's offset
    and by the run's first stamp, so the run starts at 0; its node, op, tag, deadness and rule are
    kept, each track keeps its device name and its events, and the offsets are kept on the result.
    Kills every ``merge`` mutant that drops, swaps or blanks a field of the event, the track or the
    trace, and the offset subtracted instead of added."""
    tracks = {_cpu(T0): [_ev(1000, "x", "Add", "E-Op"), _send(1002, "a")],
              _cpu(T1): [_recv(1001, "a"), _ev(1003, "y", "Mul", "E-Op-Dead", dead=True)]}
    trace = merge(tracks)
    assert trace.clock_offsets == ClockOffsets({T0: 0, T1: 2}, True)
    assert list(trace.tracks) == [_cpu(T0), _cpu(T1)]
    assert [t.device for t in trace.tracks.values()] == [_cpu(T0), _cpu(T1)]
    assert trace.tracks[_cpu(T0)].events == [_ev(0, "x", "Add", "E-Op"), _send(2, "a")]
    assert trace.tracks[_cpu(T1)].events == [_recv(3, "a"), _ev(5, "y", "Mul", "E-Op-Dead", dead=True)]
    assert all(type(e.seq) is int for _, e in trace.events)


def test_a_merged_trace_counts_from_its_first_event_not_from_zero() -> None:
    """Stamps are microseconds since the run began: a run whose clocks read 7 and 9 merges to 0 and 2.
    Kills ``merge`` adding the first stamp instead of subtracting it."""
    trace = merge({_cpu(T0): [_ev(7, "x", "Add")], _cpu(T1): [_ev(9, "y", "Add")]})
    assert [e.seq for _, e in trace.events] == [0, 2]


def test_a_merged_trace_reads_like_a_one_process_trace() -> None:
    """A merged track is a ``DeviceTrace`` like a one-process run's (``len`` and ``summary`` read it),
    and its summary counts the Send and Recv firings."""
    trace = merge({_cpu(T0): [_send(3, "a")], _cpu(T1): [_recv(4, "a")]})
    assert len(trace) == 2 and trace.summary()["sends"] == 1 and trace.summary()["recvs"] == 1
