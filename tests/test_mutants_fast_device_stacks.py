"""Laws of the host's bookkeeping of per-device gradient stacks (``turnout.fast.device_stacks``): when
the host reads a stack pointer, when a full buffer is spilled or a low one refilled, what the stores
are told, and how errors and totals name the devices. Each law kills mutants of the full set of
``fast/device_stacks.py`` (issue 40, part 3): a pointer read too many (a wait for the device that
undoes asynchronous dispatch) or too few (a chunk that overflows or runs dry) leaves a run's values
right whenever the device's own checks and the retry catch it, so only these counts can tell.

The stores are stand-ins that record what they are asked (``DeviceStacks`` reads only their
``begin_pops``, ``has``, ``spill``, ``refill``, ``observe``, ``end_pushes``, ``ledgers``, ``moved``,
``stats`` and ``held``), and each stack is a ``StackValue`` of numpy arrays whose pointer the test sets
as the device would have left it; the bounds are upper bounds, so a pointer below them is what a
compiled cond that did not push looks like."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Optional

import jax
import numpy as np
import pytest

from turnout.errors import ResourceExhaustedError
from turnout.fast import stacks as stk
from turnout.fast.cut import Traffic
from turnout.fast.device_stacks import DeviceStacks

CAP = 4
S = "stack:s"


def _sv(ptr: int, capacity: int = CAP) -> stk.StackValue:
    """A stack with buffers whose pointer is ``ptr``."""
    return stk.StackValue(capacity, np.float32, np.zeros((capacity,), np.float32),
                          np.zeros((capacity, 1), np.int32), np.int32(ptr))


def _pending() -> stk.StackValue:
    """A stack with no buffer yet (element shape known only when its first push is traced)."""
    return stk.StackValue(CAP, np.float32)


class _Store:
    """A stand-in ``ChunkStore``: records each request; a spill hands back empty buffers, a refill
    buffers whose pointer is ``refilled``; ``chunks``: the stacks it holds full chunks of."""

    def __init__(self, chunks: tuple[str, ...] = (), refilled: int = CAP, capacity: int = CAP) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.chunks, self.refilled, self.capacity = set(chunks), refilled, capacity
        self.ledgers: dict[str, Any] = {}
        self.held: dict[str, int] = {}
        self.totals: dict[str, int] = {}
        self.chunks_moved = 0

    def begin_pops(self, stacks: dict[str, Any]) -> None:
        self.calls.append(("begin_pops", stacks))

    def has(self, k: str) -> bool:
        return k in self.chunks

    def spill(self, full: dict[str, stk.StackValue]) -> dict[str, stk.StackValue]:
        self.calls.append(("spill", full))
        return {s: _sv(0, self.capacity) for s in full}

    def refill(self, low: dict[str, stk.StackValue]) -> dict[str, stk.StackValue]:
        self.calls.append(("refill", low))
        return {s: _sv(self.refilled, self.capacity) for s in low}

    def observe(self, stacks: dict[str, Any]) -> None:
        self.calls.append(("observe", stacks))

    def end_pushes(self, keys: list[str]) -> None:
        self.calls.append(("end_pushes", keys))

    def moved(self) -> int:
        return self.chunks_moved

    def stats(self) -> dict[str, int]:
        return dict(self.totals)

    def asked(self, what: str) -> list[Any]:
        return [arg for name, arg in self.calls if name == what]


def _stacks(store: Optional[_Store] = None, capacity: int = CAP) -> tuple[DeviceStacks, _Store]:
    """A ``DeviceStacks`` of one device ``"d"`` whose store is ``store``."""
    ds = DeviceStacks({}, ["d"], capacity, None, who="test", label=lambda d: "")
    st = store or _Store(capacity=capacity)
    ds.stores["d"] = st  # type: ignore[assignment]
    return ds, st


def _reads(ds: DeviceStacks) -> int:
    return int(ds.stats()["stack_pointer_reads"])


def _push(ds: DeviceStacks, n: Optional[int], ptr: int) -> dict[str, Any]:
    """One call that pushes at most ``n`` values onto ``S`` (None: no bound), the device's pointer at
    ``ptr`` before it: the stacks ``before`` gives the call, then ``after``."""
    t = Traffic({S: n})
    out = ds.before(t, "d", {S: _sv(ptr, ds.capacity)})
    ds.after(t, "d", out)
    return out


def _pop(ds: DeviceStacks, n: Optional[int], ptr: int) -> dict[str, Any]:
    """One call that pops at most ``n`` values from ``S``, its pointer at ``ptr`` before it."""
    t = Traffic({}, {S: n})
    out = ds.before(t, "d", {S: _sv(ptr, ds.capacity)})
    ds.after(t, "d", out)
    return out


def test_bounded_pushes_that_sum_to_the_capacity_need_no_read() -> None:
    """The bound is exact, not padded: a stack never read starts at 0, and calls whose pushes add
    up to exactly the capacity fit for sure, so the host never waits for the device. Kills the
    defaults of 1 (``known``, ``pushed`` before the call and in ``after``), a strict ``<`` and the
    counts kept as ``None``."""
    ds, st = _stacks()
    _push(ds, CAP, 0)
    assert _reads(ds) == 0
    ds, st = _stacks()
    _push(ds, 1, 0)
    _push(ds, CAP - 1, 1)
    assert _reads(ds) == 0 and st.asked("spill") == []


def test_a_bounded_push_reads_only_when_its_bound_may_overflow_and_a_read_resets_the_bound() -> None:
    """What the host knows of a pointer is its last read plus the pushes dispatched since: a call
    whose bound may overflow reads the pointer (once), a read at a pointer below the bound (a cond
    that did not push) starts the count again from that pointer, a full buffer is spilled and the
    count starts from 0. Kills a bound that subtracts, ignores the last read or the pushes since, a
    read recorded under another key or not resetting the count, and the count after a spill not 0."""
    ds, st = _stacks()
    _push(ds, 3, 0)            # 0 + 3 <= 4: no read (the device pushed only 1)
    assert _reads(ds) == 0
    _push(ds, 2, 1)            # 0 + 3 + 2 > 4: read 1; 1 + 2 fits, no spill (the device pushed 2)
    assert _reads(ds) == 1
    _push(ds, 1, 3)            # 1 + 2 + 1 <= 4: no read (the device pushed 1)
    assert _reads(ds) == 1
    out = _push(ds, 1, 4)      # 1 + 3 + 1 > 4: read 4, full: spilled
    assert _reads(ds) == 2
    (spilled,) = st.asked("spill")
    assert list(spilled) == [S] and int(spilled[S].ptr) == 4
    assert int(out[S].ptr) == 0  # the call gets the store's empty buffer
    _push(ds, 3, 1)            # 0 + 1 + 3 <= 4: no read
    assert _reads(ds) == 2 and len(st.asked("spill")) == 1


@pytest.mark.parametrize("ptr, n, spilled", [(0, CAP + 1, False), (1, CAP, True), (2, 2, False), (3, 2, True),
                                             (4, 1, True)])
def test_a_read_spills_a_nonempty_buffer_that_the_calls_bound_would_overflow(ptr: int, n: int, spilled: bool) -> None:
    """Once read, a buffer is spilled exactly when it holds something and its pointer plus the
    call's bound is past the capacity (an empty buffer is never spilled: the device reports a call
    that cannot fit even an empty chunk). Kills ``or``, ``>= 0``, ``> 1``, ``-``, ``>=`` in that test
    and a bounded call's need taken from the unbounded growth."""
    ds, st = _stacks()
    ds.after(Traffic({S: CAP}), "d", {})  # (a call that may have filled the buffer: the next one reads)
    out = ds.before(Traffic({S: n}), "d", {S: _sv(ptr)})
    assert _reads(ds) == 1
    assert bool(st.asked("spill")) == spilled
    assert int(out[S].ptr) == (0 if spilled else ptr)


@pytest.mark.parametrize("capacity, pointers, spills", [
    (4, [3], [False]),                                   # nothing grown yet: one free entry is enough
    (4, [1, 2, 3, 4], [False, False, False, True]),      # a growth of 1 needs one free entry
    (8, [1, 4, 5, 6], [False, False, False, True]),      # the largest growth seen (3), not the last (1)
])
def test_an_unbounded_push_needs_the_largest_growth_seen_between_reads(capacity: int, pointers: list[int],
                                                                        spills: list[bool]) -> None:
    """A push inside a loop compiled whole has no bound: the host reads its pointer before every call
    and spills when the largest growth per call seen so far (1 before any) would not fit. Kills the
    growth not recorded, recorded as ``p + last``, not kept as a maximum, or with a default of 2, and
    the need's default of 2 or ``None``."""
    ds, st = _stacks(capacity=capacity)
    got = []
    for p in pointers:
        before = len(st.asked("spill"))
        _push(ds, None, p)
        got.append(len(st.asked("spill")) > before)
    assert got == spills
    assert _reads(ds) == len(pointers)


@pytest.mark.parametrize("pointers, lows", [
    ([1], [False]),                                       # nothing shrunk yet: one entry is enough
    ([4, 3, 2, 1, 0], [False, False, False, False, True]),  # a shrink of 1 needs one entry
    ([7, 4, 3, 2], [False, False, False, True]),          # the largest shrink seen (3), not the last (1)
])
def test_an_unbounded_pop_needs_the_largest_shrink_seen_between_reads(pointers: list[int], lows: list[bool]) -> None:
    """The mirror image for pops inside a loop compiled whole: a stack is refilled when it holds
    fewer entries than the largest shrink per call seen so far (1 before any). Kills the shrink not
    recorded, recorded as ``last + p``, not kept as a maximum or with a default of 2, the need's
    default of 2 or ``None``, and ``<=``."""
    ds, st = _stacks(_Store(chunks=(S,), refilled=8, capacity=8), capacity=8)
    got = []
    for p in pointers:
        before = len(st.asked("refill"))
        _pop(ds, None, p)
        got.append(len(st.asked("refill")) > before)
    assert got == lows
    assert _reads(ds) == len(pointers)


@pytest.mark.parametrize("ptr, n, low", [(1, 2, True), (2, 2, False), (0, 1, True)])
def test_a_first_bounded_pop_reads_and_refills_below_its_bound(ptr: int, n: int, low: bool) -> None:
    """A stack whose pointer the host has never read is read before its first pop, and refilled
    exactly when it holds fewer entries than the call may pop. Kills a bounded pop's need taken from
    the unbounded shrink and the pointer looked up before it was ever read."""
    ds, st = _stacks(_Store(chunks=(S,)))
    out = ds.before(Traffic({}, {S: n}), "d", {S: _sv(ptr)})
    assert _reads(ds) == 1
    assert bool(st.asked("refill")) == low
    assert int(out[S].ptr) == (CAP if low else ptr)


def test_bounded_pops_read_only_when_they_may_empty_the_stack() -> None:
    """What the host knows of a popped stack is its last read (or refill) less the pops dispatched
    since: a call that may pop past it reads the pointer, one that pops exactly what is left does
    not, and a refill starts the count from the refilled pointer. Kills ``+`` for ``-`` in that bound,
    ``> 0`` / ``>= 1``, the pops counted with a default of 1, not summed, subtracted, or ignored, and
    the count after a refill not 0."""
    ds, st = _stacks(_Store(chunks=(S,)))
    _pop(ds, 2, 4)   # never read: read 4, enough
    assert _reads(ds) == 1
    _pop(ds, 2, 2)   # 4 - 2 - 2 = 0: no read (the device popped 1 only)
    assert _reads(ds) == 1
    out = _pop(ds, 1, 1)   # 4 - 4 - 1 < 0: read 1, enough for one pop
    assert _reads(ds) == 2 and st.asked("refill") == [] and int(out[S].ptr) == 1
    out = _pop(ds, 2, 1)   # 1 - 1 - 2 < 0: read 1 < 2: refilled
    assert _reads(ds) == 3 and len(st.asked("refill")) == 1 and int(out[S].ptr) == CAP
    _pop(ds, 2, CAP)   # refilled to 4, 2 popped since: 4 - 2 - 2 = 0: no read
    assert _reads(ds) == 3


def test_stacks_not_ready_are_passed_over_and_the_rest_still_checked() -> None:
    """A pushed stack with no buffer yet (pending), or absent from the call's stacks, is left alone;
    so is a popped stack whose store holds no chunk; none of them stops the checks of the stacks after
    it, nor does a stack that fits for sure. Kills ``break`` for each ``continue``, ``and`` for ``or`` and
    the dropped ``not`` of the skip, and the stack looked up under ``None``."""
    fits, pend, gone, no_chunk, enough = "stack:f", "stack:p", "stack:x", "stack:h", "stack:e"
    ds, st = _stacks(_Store(chunks=(S, enough)))
    stacks = {fits: _sv(0), pend: _pending(), no_chunk: _sv(2), enough: _sv(CAP), S: _sv(CAP)}
    ds.settle("d", {enough: _sv(CAP)})
    out = ds.before(Traffic({fits: 1, pend: None, gone: None, S: None}), "d", stacks)
    assert list(st.asked("spill")) == [{S: stacks[S]}]
    assert _reads(ds) == 2 and int(out[S].ptr) == 0
    assert all(out[k] is stacks[k] for k in stacks if k != S)
    stacks = {**stacks, S: _sv(0)}
    out = ds.before(Traffic({}, {no_chunk: None, pend: None, gone: None, enough: 1, S: None}), "d", stacks)
    assert list(st.asked("refill")) == [{S: stacks[S]}]
    assert _reads(ds) == 3 and int(out[S].ptr) == CAP
    assert all(out[k] is stacks[k] for k in stacks if k != S)


def test_a_stacks_pops_begin_once_in_its_store() -> None:
    """The store is told once per stack, at the first call that pops it, that its pops begin (it
    queues the prefetch of the newest chunk), whether or not it holds a chunk of it; the pops of a
    stack with no chunk are counted all the same. Kills the test negated, the stack not recorded as
    begun, ``begin_pops`` given ``None``, and a pop count with no default."""
    ds, st = _stacks(_Store(chunks=(S,)))
    stacks = {S: _sv(CAP), "stack:h": _sv(1)}
    t = Traffic({}, {"stack:h": 1, S: 1})
    for _ in range(3):
        ds.after(t, "d", ds.before(t, "d", stacks))
    assert st.asked("begin_pops") == [{"stack:h": stacks["stack:h"]}, {S: stacks[S]}]


def test_a_settled_driven_loop_sets_the_pointer_the_bounds_start_from() -> None:
    """After a driven loop the host reads every stack with a buffer (not a pending one, nor the
    state's other values), and the next bounds start from those pointers; the store records every
    stack of the state. Kills the settle test's ``or`` and dropped ``not``, the read under another
    key, and ``observe(None)``."""
    ds, st = _stacks()
    err = np.int32(0)
    state = {"err": err, "stack:p": _pending(), S: _sv(3)}
    ds.settle("d", state)
    assert _reads(ds) == 1
    assert st.asked("observe") == [{"stack:p": state["stack:p"], S: state[S]}]
    ds.before(Traffic({S: 2}), "d", {S: _sv(3)})  # 3 + 2 > 4: read, full: spilled
    assert _reads(ds) == 2 and len(st.asked("spill")) == 1


def test_the_store_observes_the_stacks_of_the_call_and_the_state() -> None:
    """``after`` records the buffers of the stacks the call pushes or pops that it returned (no
    others), and ``observe`` every stack of a state allocated outside a call (no other value)."""
    ds, st = _stacks()
    a, b, c = _sv(1), _sv(2), _sv(3)
    ds.after(Traffic({"stack:a": 1, "stack:gone": 1}, {"stack:b": 1}), "d", {"stack:a": a, "stack:b": b, "stack:c": c})
    ds.observe("d", {"stack:c": c, "err": np.int32(0)})
    assert st.asked("observe") == [{"stack:a": a, "stack:b": b}, {"stack:c": c}]


def test_a_loops_end_reaches_each_store_with_its_own_stacks() -> None:
    """The end of a forward loop's pushes goes to every device's store, each told only the loop's
    stacks it keeps ledgers of."""
    ds = DeviceStacks({}, ["d", "e"], CAP, None, who="test", label=lambda d: d)
    one, two = _Store(), _Store()
    one.ledgers, two.ledgers = {"stack:a": 0}, {"stack:b": 0}
    ds.stores = {"d": one, "e": two}  # type: ignore[dict-item]
    ds.loop_ended({"stack:a", "stack:b", "stack:c"})
    assert one.asked("end_pushes") == [["stack:a"]] and two.asked("end_pushes") == [["stack:b"]]


def test_totals_are_summed_over_the_devices_stores() -> None:
    """``moved``, ``stats`` and the checkpoint bytes per loop add up every device's store, and a run
    with no checkpoint slots reports no ``checkpoint_bytes``."""
    ds = DeviceStacks({}, ["d", "e"], CAP, None, who="test", label=lambda d: d)
    one, two = _Store(), _Store()
    one.chunks_moved, two.chunks_moved = 2, 3
    one.totals, two.totals = {"x": 1, "y": 2}, {"x": 3, "y": 0}
    ds.stores = {"d": one, "e": two}  # type: ignore[dict-item]
    assert ds.moved() == 5
    assert ds.stats() == {"x": 4, "y": 2, "stack_pointer_reads": 0}
    one.held, two.held = {"rnn": 10}, {"rnn": 5, "enc": 1}
    assert ds.stats() == {"x": 4, "y": 2, "stack_pointer_reads": 0, "checkpoint_bytes": {"rnn": 15, "enc": 1}}


def test_each_device_gets_a_store_of_the_runs_stacks_named_after_it() -> None:
    """Each device's ``ChunkStore`` has the run's stack info, cap and budget, the checkpoint slots its
    device holds, and a name in errors with the device's label (the plain name where the device has
    none: the one device of a run)."""
    info = {S: stk.StackInfo("rnn", 'loop "rnn"', False)}
    budget: Any = SimpleNamespace(swapped=lambda: frozenset({"rnn"}))
    ds = DeviceStacks(info, ["a", "b"], CAP, 1000, budget, who="test", label={"a": "", "b": "1"}.__getitem__)
    assert ds.capacity == CAP and ds.who == "test" and ds.labels == {"a": "", "b": "1"}
    for d, who in (("a", "test"), ("b", "test (device 1)")):
        store = ds.stores[d]
        assert store.info is info and store.limit == 1000 and store.budget is budget and store.who == who
        assert store.held == {}
    ds = DeviceStacks(info, ["a", "b"], CAP, None, None, {"b": {"rnn": 64}}, who="test", label=lambda d: d)
    assert ds.stores["a"].held == {} and ds.stores["b"].held == {"rnn": 64}
    assert ds.stats()["stack_pointer_reads"] == 0
    assert ds.stats()["checkpoint_bytes"] == {"rnn": 64}


def _oom() -> Exception:
    return jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: out of memory allocating 64 bytes\nmore")


def test_a_device_out_of_memory_names_the_executor_the_device_and_the_loops() -> None:
    """XLA's out-of-memory in a call becomes Turnout's ``ResourceExhaustedError`` naming the executor,
    the device by its label (``the device`` where it has none), and the loops whose stacks the call
    touches, sorted, or else the call itself."""
    info = {"stack:s": stk.StackInfo("rnn", 'loop "rnn"', False), "stack:t": stk.StackInfo("enc", 'loop "enc"', False)}
    ds = DeviceStacks(info, ["a", "b"], CAP, None, who="test", label={"a": "", "b": "1"}.__getitem__)
    with pytest.raises(ResourceExhaustedError) as e:
        with ds.device_oom(Traffic({"stack:t": 1}, {"stack:s": 1, "stack:u": 1}), "b", lambda: "segment 3"):
            raise _oom()
    assert str(e.value).startswith('test: device 1 ran out of memory running loop "enc", loop "rnn": '
                                   "RESOURCE_EXHAUSTED: out of memory allocating 64 bytes; run loops with")
    with pytest.raises(ResourceExhaustedError) as e:
        with ds.device_oom(None, "a", lambda: "segment 3"):
            raise _oom()
    assert str(e.value).startswith("test: the device ran out of memory running segment 3: RESOURCE_EXHAUSTED")
