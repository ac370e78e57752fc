"""The checkpoint schedule (``turnout.checkpoint_schedule``): every state comes back in reverse order
exactly once, the slots are never exceeded, and the costs it reports are the ones the docs state.

Closed-form cases first (anyone can check them by hand), then the properties on generated trip counts
and slot counts (the ``ci`` profile's examples are derandomized; ``TURNOUT_HYPOTHESIS_PROFILE=dev`` or
``nightly`` draws more).
"""

from __future__ import annotations

import math
from functools import lru_cache

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnout import checkpoint_schedule as cs

# ---- closed forms ---------------------------------------------------------------------------------------


def test_a_loop_that_fits_is_never_recomputed() -> None:
    for n in range(0, 20):
        assert cs.forward_checkpoints(n, 20) == (list(range(n)), 1)
        assert cs.cost(n, 20) == cs.Cost(n, 20, peak_states=n, recomputed=0, body_calls=2 * n)


def test_one_slot_recomputes_every_step_from_the_start() -> None:
    # the state before step i is recomputed by i steps from the initial state: 0 + 1 + ... + (n - 1)
    for n in (1, 2, 10, 37):
        assert cs.cost(n, 1).recomputed == n * (n - 1) // 2
        assert cs.cost(n, 1).peak_states == 1


def test_thinning_keeps_multiples_of_the_stride() -> None:
    # 4 slots: 0 1 2 3 fill them; state 4 is due, so keep 0 2 and double the stride; from then on the
    # forward loop keeps one slot free (3 states): 0 2 4, then 6 is due: keep 0 4, stride 4; 8 ...
    assert cs.forward_checkpoints(4, 4) == ([0, 1, 2, 3], 1)
    assert cs.forward_checkpoints(5, 4) == ([0, 2, 4], 2)
    assert cs.forward_checkpoints(7, 4) == ([0, 4], 4)
    assert cs.forward_checkpoints(9, 4) == ([0, 4, 8], 4)
    assert cs.forward_checkpoints(96, 4) == ([0, 32, 64], 32)
    assert cs.forward_checkpoints(100, 4) == ([0, 64], 64)  # 96 was due with 3 kept: thinned, and 96 % 64 != 0


def test_split_is_the_binomial_rule() -> None:
    assert cs.split(2, 2) == 1
    assert cs.split(5, 10) == 1  # everything fits: push every state
    assert cs.split(10, 2) == 6  # C(2 + 3, 2) = 10 >= 10: r = 3, push at max(10 - C(4, 1), C(3, 2)) = 6


@lru_cache(None)
def _fewest_recomputations(length: int, slots: int) -> int:
    """The fewest steps any push/reverse schedule recomputes to reverse ``length`` steps with ``slots``
    slots (its start's included): a dynamic programme over every first push."""
    if length <= 1:
        return 0
    if slots == 1:
        return length * (length - 1) // 2
    return min(m + _fewest_recomputations(length - m, slots - 1) + _fewest_recomputations(m, slots)
               for m in range(1, length))


def test_the_offline_schedule_is_optimal() -> None:
    for n in range(1, 90):
        for slots in range(1, 8):
            assert cs.cost(n, slots, kept=[0]).recomputed == _fewest_recomputations(n, slots), (n, slots)


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_sqrt_checkpoints_cost_about_one_extra_forward_pass(n: int) -> None:
    c = cs.cost(n, math.isqrt(2 * n))
    assert c.peak_states <= math.isqrt(2 * n)
    assert 0.5 <= c.overhead <= 1.3, c


@pytest.mark.parametrize("n", [300, 1_000, 10_000])
def test_the_online_schedule_is_within_a_quarter_of_the_offline_optimum(n: int) -> None:
    # the offline optimum runs its first sweep as the forward loop: its extra steps are those beyond n
    for slots in (math.isqrt(2 * n), 16):
        optimum = cs.cost(n, slots, kept=[0]).recomputed - n
        assert optimum <= cs.cost(n, slots).recomputed <= 1.25 * optimum, (n, slots)


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_log_checkpoints_cost_order_n_log_n(n: int) -> None:
    slots = math.ceil(math.log2(n))
    c = cs.cost(n, slots)
    assert c.peak_states <= slots
    assert c.overhead <= math.log2(n), c
    assert cs.repetition_bound(n, slots) <= math.log2(n)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        cs.cost(3, 0)
    with pytest.raises(ValueError, match="negative"):
        cs.forward_checkpoints(-1, 3)
    assert cs.slots_for_budget(100, 12) == 8
    assert cs.slots_for_budget(11, 12) == 0


def test_split_saturates_instead_of_overflowing() -> None:
    # a segment longer than SPLIT_CAP // 2 is split as if it had SPLIT_CAP // 2 steps
    assert 1 <= cs.split(2**40, 2) < 2**40
    assert cs.split(2**40, 3) == cs.split(cs.SPLIT_CAP // 2, 3)


# ---- properties -----------------------------------------------------------------------------------------


@given(n=st.integers(0, 1500), slots=st.integers(1, 200))
def test_replay_yields_every_state_in_reverse_order_exactly_once(n: int, slots: int) -> None:
    assert cs.replay(n, slots) == list(range(n - 1, -1, -1))


@given(n=st.integers(0, 3000), slots=st.integers(1, 200))
def test_the_slots_are_never_exceeded(n: int, slots: int) -> None:
    kept, stride = cs.forward_checkpoints(n, slots)
    assert len(kept) <= slots
    assert kept == list(range(0, n, stride))[: len(kept)] and all(p % stride == 0 for p in kept)
    assert cs.cost(n, slots).peak_states <= slots
    assert all(a.depth <= slots for a in cs.actions(n, slots))


@given(n=st.integers(1, 400), slots=st.integers(1, 12), kept_every=st.integers(1, 50))
def test_any_forward_checkpoints_reverse_correctly(n: int, slots: int, kept_every: int) -> None:
    kept = list(range(0, n, kept_every))[:slots]
    assert cs.replay(n, slots, kept) == list(range(n - 1, -1, -1))
